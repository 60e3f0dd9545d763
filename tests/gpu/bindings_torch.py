"""PyTorch on umpool's pluggable allocator (issue 16), run by
scripts/gpu-check on a GPU host, with PYTHONPATH at bindings/python and
UMPOOL_LIBRARY at the built libumpool.

    python3 bindings_torch.py native OUT.json   PyTorch's own allocator
    python3 bindings_torch.py umpool OUT.json   umpool.torch.use() first

Both runs train the same small model (the losses must be equal bit for
bit) and time torch.empty + free of 1 MiB from Python (median of 5 batches
of 20000: the plug-in's target is at most 1.1x PyTorch's caching
allocator). The umpool run also checks that umpool.torch.stats() shows the
tensors, that torch.cuda.empty_cache() gives a freed 256 MiB tensor back
to the driver (the pool's reserved and mapped bytes drop by at least
that; an AssertionError once the results are written), and that a
torch.cuda.MemPool over the plug-in serves allocations made inside it.
CuPy, if installed, allocates through umpool.cupy.use().
"""
import json
import sys
import time

import torch

mode, out = sys.argv[1], sys.argv[2]
res = {}
failures = []  # raised at the end, once every result is written
if mode == "umpool":
    import umpool
    import umpool.torch
    umpool.torch.use("backend:cuda")

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
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
res["losses"] = losses

if mode == "umpool":
    st = umpool.torch.stats()
    res["live_bytes"] = st["live_bytes"]
    # torch.cuda.empty_cache() must reach the pool (umpool_torch_reset,
    # through set_reset_fn or use()'s wrapper) and give the freed tensor's
    # memory to the driver: reserved and mapped bytes drop by its size.
    big = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    del big
    torch.cuda.synchronize()
    st0 = umpool.torch.stats()
    torch.cuda.empty_cache()
    st1 = umpool.torch.stats()
    res["empty_cache"] = [st0["reserved_bytes"], st1["reserved_bytes"]]
    res["empty_cache_mapped"] = [st0["mapped_bytes"], st1["mapped_bytes"]]
    res["empty_cache_via"] = umpool.torch.EMPTY_CACHE
    for key in ("reserved_bytes", "mapped_bytes"):
        if st0[key] - st1[key] < 256 << 20:
            failures.append(
                "torch.cuda.empty_cache() (via %s) gave back %d of a freed "
                "256 MiB tensor's %d bytes (%s %d -> %d)" % (
                    umpool.torch.EMPTY_CACHE, st0[key] - st1[key],
                    256 << 20, key, st0[key], st1[key]))
    try:
        pool = torch.cuda.MemPool(umpool.torch.allocator().allocator())
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device=dev)
        info = umpool.process_pool().ptr_info(t.data_ptr())
        res["mempool"] = info["size"] >= (1 << 20) * 4
        del t
    except (AttributeError, RuntimeError) as e:
        res["mempool"] = "not run: %s" % e
    try:
        import cupy
        import umpool.cupy
        umpool.cupy.use()
        a = cupy.arange(1 << 20, dtype=cupy.float32)
        res["cupy"] = bool(float(a.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)) and \
            umpool.process_pool().ptr_info(a.data.ptr)["size"] > 0
    except ImportError:
        res["cupy"] = "not installed"

times = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(20000):
        t = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
        del t
    times.append((time.perf_counter() - t0) / 20000)
times.sort()
res["empty_free_us"] = times[2] * 1e6
json.dump(res, open(out, "w"))
assert not failures, "; ".join(failures)
