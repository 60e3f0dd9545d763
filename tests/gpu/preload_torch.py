"""A small PyTorch training loop, run natively and under libumpool-preload
by scripts/gpu-check on a GPU host: the same losses bit for bit (the
preload changes where tensors live, not what is computed), and under the
preload the tensors' memory comes from the pool (its statistics, read
through ctypes from the process's own symbols).

    python3 preload_torch.py OUT.json
"""
import ctypes
import json
import sys

import torch

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(1024, 256, device=dev)
y = torch.randint(0, 10, (1024,), device=dev)
losses = []
for _ in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
torch.cuda.synchronize()

pool_live = None
try:
    me = ctypes.CDLL(None)
    pool_of = me.umpool_preload_pool
    pool_of.restype = ctypes.c_void_p
    pool = pool_of()
    if pool:
        class Stats(ctypes.Structure):  # the leading fields of ump_stats_t
            _fields_ = [("f%d" % i, ctypes.c_size_t) for i in range(32)]
        st = Stats()
        # UMP_DEVICE_ALL is -1; live_bytes is the second field.
        if me.ump_stats(ctypes.c_void_p(pool), -1, ctypes.byref(st)) == 0:
            pool_live = st.f1
except (OSError, AttributeError):
    pass
json.dump({"losses": losses, "pool_live_or_none": pool_live},
          open(sys.argv[1], "w"))
