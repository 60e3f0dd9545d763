"""PyTorch under libumpool-preload, run by scripts/gpu-check on a GPU host.

    python3 preload_torch.py train OUT.json     a small training loop, run
        natively and under the preload: the same losses bit for bit (the
        preload changes where tensors live, not what is computed), the
        tensors' memory from the pool (its statistics, read through ctypes
        from the process's own symbols), and the median step time (the two
        runs' ratio is the preload's cost: target 1.02)
    python3 preload_torch.py overflow OUT.json  under the preload with
        overflow:host: tensors adding up to 1.3x the device's memory (as
        torch.cuda.mem_get_info gives it), each filled and checked on the
        GPU; the part beyond the device on pinned host memory
"""
import ctypes
import json
import sys
import time

import torch

UMP_DEVICE_ALL = -2  # include/umpool.h
UMP_LOC_HOST = -3


def pool_live(device):
    """live_bytes of the preload's pool for device, or None without it."""
    try:
        me = ctypes.CDLL(None)
        pool_of = me.umpool_preload_pool
        pool_of.restype = ctypes.c_void_p
        pool = pool_of()
        if not pool:
            return None

        class Stats(ctypes.Structure):  # room for all of ump_stats_t
            _fields_ = [("f%d" % i, ctypes.c_size_t) for i in range(32)]
        st = Stats()
        # live_bytes is the second field.
        if me.ump_stats(ctypes.c_void_p(pool), device, ctypes.byref(st)):
            return None
        return st.f1
    except (OSError, AttributeError):
        return None


def train(out):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(1024, 256, device=dev)
    y = torch.randint(0, 10, (1024,), device=dev)
    losses, times = [], []
    for step in range(220):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronizes
        if step >= 20:  # warm: kernels loaded, memory cached
            times.append(time.perf_counter() - t0)
    times.sort()
    json.dump({"losses": losses, "pool_live_or_none": pool_live(UMP_DEVICE_ALL),
               "step_ms": times[len(times) // 2] * 1e3}, open(out, "w"))


def overflow(out):
    dev = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    piece = 256 << 20
    n = total * 13 // 10 // piece
    ts = [torch.full((piece // 4,), float(i), device=dev) for i in range(n)]
    ok = all(bool(t.eq(float(i)).all()) for i, t in enumerate(ts))
    json.dump({"ok": ok, "pieces": n, "total": total,
               "host_live": pool_live(UMP_LOC_HOST)}, open(out, "w"))


{"train": train, "overflow": overflow}[sys.argv[1]](sys.argv[2])
