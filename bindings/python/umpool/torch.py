"""PyTorch on the process's pool, through its pluggable allocator.

    import umpool.torch
    umpool.torch.use("overflow:host")   # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    print(umpool.torch.stats())

use() installs libumpool's umpool_torch_alloc / umpool_torch_free
(torch.cuda.memory.CUDAPluggableAllocator): frees are stream-ordered, and
a tensor's record_stream is honoured by the C hook of the same name for
C++ users. PyTorch must not have allocated CUDA memory yet (its own rule:
the allocator cannot change afterwards; inside torch.cuda.MemPool regions
it can). torch.cuda.memory_stats() has nothing for a pluggable allocator:
stats() reads the pool instead. Expandable segments must stay off (they
are the native allocator's); CUDA graphs work only inside a MemPool.
"""
import umpool

__all__ = ["use", "stats", "allocator"]

_allocator = None


def _torch():
    try:
        import torch
    except ImportError as e:
        raise umpool.Error(-38, "umpool.torch.use (PyTorch is not "
                           "installed: %s)" % e) from None
    return torch


def allocator():
    """A torch.cuda.memory.CUDAPluggableAllocator over the process's pool
    (for torch.cuda.MemPool); Error when this PyTorch has none."""
    torch = _torch()
    cls = getattr(getattr(torch.cuda, "memory", None),
                  "CUDAPluggableAllocator", None)
    if cls is None or not torch.cuda.is_available():
        raise umpool.Error(-95, "umpool.torch (this PyTorch has no CUDA "
                           "pluggable allocator: a CPU-only build?)")
    return cls(umpool.lib._name, "umpool_torch_alloc", "umpool_torch_free")


def use(config=None):
    """Makes the process's pool (config over UMPOOL_CONF) PyTorch's CUDA
    allocator. Error when PyTorch lacks a pluggable allocator or has
    already allocated CUDA memory with its own."""
    global _allocator
    a = allocator()
    torch = _torch()
    if torch.cuda.is_initialized() and torch.cuda.memory_reserved() > 0:
        raise umpool.Error(-16, "umpool.torch.use (PyTorch has allocated "
                           "CUDA memory already: call it before the first "
                           "CUDA tensor, or use torch.cuda.MemPool("
                           "umpool.torch.allocator().allocator()))")
    umpool.process_pool(config)
    torch.cuda.memory.change_current_allocator(a)
    _allocator = a
    return a


def stats(device=umpool.DEVICE_ALL):
    """The process's pool's statistics (what torch.cuda.memory_stats()
    cannot give for a pluggable allocator)."""
    return umpool.process_pool().stats(device)
