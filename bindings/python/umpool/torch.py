"""PyTorch on the process's pool, through its pluggable allocator.

    import umpool.torch
    umpool.torch.use("overflow:host")   # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    print(umpool.torch.stats())
    del x
    torch.cuda.empty_cache()            # the pool's cached memory back

use() installs libumpool's umpool_torch_alloc / umpool_torch_free
(torch.cuda.memory.CUDAPluggableAllocator): frees are stream-ordered, and
a tensor's record_stream is honoured by the C hook of the same name for
C++ users. PyTorch must not have allocated CUDA memory yet (its own rule:
the allocator cannot change afterwards; inside torch.cuda.MemPool regions
it can). torch.cuda.memory_stats() has nothing for a pluggable allocator:
stats() reads the pool instead. Expandable segments must stay off (they
are the native allocator's); CUDA graphs work only inside a MemPool.

empty_cache. PyTorch's torch.cuda.empty_cache() (torch/cuda/memory.py)
calls torch._C._cuda_emptyCache, that is c10::cuda::CUDACachingAllocator::
emptyCache(), which for a pluggable allocator is
CUDAPluggableAllocator::emptyCache (torch/csrc/cuda/
CUDAPluggableAllocator.cpp): it calls the reset function set with
set_reset_fn and does nothing when none is set (the same from 2.1-era
sources to current main; there is no other empty-cache hook). The Python
class CUDAPluggableAllocator takes alloc and free only, but the object its
allocator() returns (torch._C._CUDAPluggableAllocator, torch/csrc/cuda/
Module.cpp) has set_reset_fn. So allocator() sets it to libumpool's
umpool_torch_reset, which is empty_cache() here: every thread's blocks
kept for same-stream reuse go back to the pool once their stream's work
is done, and ump_trim gives the pool's cached memory to the driver. Where
the object has no set_reset_fn, use() wraps torch.cuda.empty_cache (and
torch.cuda.memory.empty_cache) so that it calls empty_cache() after
PyTorch's own; a reference to the function taken before use() stays
unwrapped. EMPTY_CACHE says which: "reset_fn", "wrapped", or None before
use(). Inside a torch.cuda.MemPool only, the current allocator is still
PyTorch's: call umpool.torch.empty_cache() after torch.cuda.empty_cache()
to give back what the plug-in keeps. scripts/gpu-check checks on a GPU
that torch.cuda.empty_cache() gives a freed 256 MiB tensor back; until a
GPU host has run it, that is shown on sim only (tests/python, a stand-in
torch).
"""
import ctypes
import functools

import umpool

__all__ = ["use", "stats", "allocator", "empty_cache"]

_allocator = None
# How torch.cuda.empty_cache() reaches the pool since use(): "reset_fn"
# (PyTorch calls umpool_torch_reset itself) or "wrapped" (use() wrapped
# torch.cuda.empty_cache); None before use().
EMPTY_CACHE = None

_reset = umpool.lib.umpool_torch_reset
_reset.restype = None
_reset.argtypes = []


def _torch():
    try:
        import torch
    except ImportError as e:
        raise umpool.Error(-38, "umpool.torch.use (PyTorch is not "
                           "installed: %s)" % e) from None
    return torch


def empty_cache():
    """Gives the pool's cached memory back to the driver (what
    torch.cuda.empty_cache() does once use() ran): the blocks every thread
    keeps for same-stream reuse go back to the pool once their stream's
    queued work is done (waited for, as PyTorch's own empty_cache waits),
    then ump_trim. Blocks record_stream made wait for other streams come
    back once those are done."""
    _reset()


def _make_allocator():
    """The allocator, and whether its emptyCache calls umpool_torch_reset
    (set_reset_fn, where this PyTorch has it)."""
    torch = _torch()
    cls = getattr(getattr(torch.cuda, "memory", None),
                  "CUDAPluggableAllocator", None)
    if cls is None or not torch.cuda.is_available():
        raise umpool.Error(-95, "umpool.torch (this PyTorch has no CUDA "
                           "pluggable allocator: a CPU-only build?)")
    a = cls(umpool.lib._name, "umpool_torch_alloc", "umpool_torch_free")
    get = getattr(a, "allocator", None)
    set_reset = getattr(get() if callable(get) else None, "set_reset_fn",
                        None)
    if set_reset is None:
        return a, False
    set_reset(ctypes.cast(_reset, ctypes.c_void_p).value)
    return a, True


def allocator():
    """A torch.cuda.memory.CUDAPluggableAllocator over the process's pool
    (for torch.cuda.MemPool), its emptyCache hooked to empty_cache() where
    this PyTorch allows it; Error when this PyTorch has none."""
    return _make_allocator()[0]


def _wrap_empty_cache(torch):
    """torch.cuda.empty_cache, and torch.cuda.memory's, made to call
    empty_cache() after PyTorch's own."""
    for mod in (torch.cuda, getattr(torch.cuda, "memory", None)):
        orig = getattr(mod, "empty_cache", None)
        if orig is None or getattr(orig, "_umpool_wrapped", False):
            continue

        @functools.wraps(orig)
        def wrapped(*args, _orig=orig, **kwargs):
            result = _orig(*args, **kwargs)
            empty_cache()
            return result

        wrapped._umpool_wrapped = True
        setattr(mod, "empty_cache", wrapped)


def use(config=None):
    """Makes the process's pool (config over UMPOOL_CONF) PyTorch's CUDA
    allocator, torch.cuda.empty_cache() included (EMPTY_CACHE says how).
    Error when PyTorch lacks a pluggable allocator or has already
    allocated CUDA memory with its own."""
    global _allocator, EMPTY_CACHE
    a, hooked = _make_allocator()
    torch = _torch()
    if torch.cuda.is_initialized() and torch.cuda.memory_reserved() > 0:
        raise umpool.Error(-16, "umpool.torch.use (PyTorch has allocated "
                           "CUDA memory already: call it before the first "
                           "CUDA tensor, or use torch.cuda.MemPool("
                           "umpool.torch.allocator().allocator()))")
    umpool.process_pool(config)
    torch.cuda.memory.change_current_allocator(a)
    if not hooked:
        _wrap_empty_cache(torch)
    _allocator = a
    EMPTY_CACHE = "reset_fn" if hooked else "wrapped"
    return a


def stats(device=umpool.DEVICE_ALL):
    """The process's pool's statistics (what torch.cuda.memory_stats()
    cannot give for a pluggable allocator)."""
    return umpool.process_pool().stats(device)
