"""CuPy on a pool: its allocator becomes libumpool's umpool_cupy_malloc /
umpool_cupy_free (cupy.cuda.memory.CFunctionAllocator).

    import umpool.cupy
    umpool.cupy.use()          # the process's pool
    umpool.cupy.use(pool)      # or a pool of your own (keep it alive)
"""
import ctypes

import umpool

__all__ = ["use"]


def use(pool=None):
    try:
        import cupy
    except ImportError as e:
        raise umpool.Error(-38, "umpool.cupy.use (CuPy is not installed: "
                           "%s)" % e) from None
    if pool is None:
        umpool.process_pool()
    param = pool.handle if pool is not None else 0
    malloc = ctypes.cast(umpool.lib.umpool_cupy_malloc, ctypes.c_void_p)
    free = ctypes.cast(umpool.lib.umpool_cupy_free, ctypes.c_void_p)
    a = cupy.cuda.memory.CFunctionAllocator(param, malloc.value, free.value,
                                            pool)
    cupy.cuda.set_allocator(a.malloc)
    return a
