"""umpool from Python: a pure-ctypes binding of libumpool's public API.

    import umpool
    with umpool.Pool("backend:sim,sim_devices:4") as pool:
        p = pool.alloc(1 << 20, device=2)
        a = pool.array(p, (1024,), "float64")   # a NumPy view (sim only)
        pool.free(p)

Pointers are ints (addresses). Every failing call raises umpool.Error,
which carries the errno (negative, as the C API returns it) and
ump_strerror's text. Integer arguments are checked against their C type
before they reach ctypes (which would wrap them modulo 2**bits): not an
integer (a float, a str, a bool) is TypeError; a negative size, count, flag word
or address is Error -EINVAL; a value past the C type's range (2**64 + 4096
as a size, 2**32 + 1 as a device) is Error -EOVERFLOW. Addresses may be
None (NULL). The library is found through UMPOOL_LIBRARY, else the
libdir it was installed to, else the system's search path. torch and cupy
plug the process's pool into PyTorch and CuPy: umpool.torch, umpool.cupy.
"""
import ctypes
import ctypes.util
import errno as _errno
import math
import operator
import os
import sys

__all__ = ["Error", "Pool", "Comm", "lib", "process_pool",
           "DEVICE_CURRENT", "DEVICE_ALL", "LOC_HOST", "LOC_NVME", "LOC_NET",
           "COLLECTIVES",
           "TIER_DEVICE", "TIER_HOST", "TIER_NVME",
           "HINT_NO_SPILL", "HINT_OFFLOAD", "KIND_DEVICE", "KIND_HOST",
           "ADVISE_HOT", "ADVISE_COLD", "ADVISE_WILLNEED", "ADVISE_DONTNEED"]

# include/umpool.h
DEVICE_CURRENT = -1
DEVICE_ALL = -2
LOC_HOST = -3
LOC_NVME = -4
LOC_NET = -5
# UMP_COLL_* by name, for Pool.coll_stats.
COLLECTIVES = {"allreduce": 0, "broadcast": 1, "reduce": 2, "allgather": 3,
               "reduce_scatter": 4, "alltoall": 5, "gather": 6, "scatter": 7}
TIER_DEVICE, TIER_HOST, TIER_NVME = 0, 1, 2
HINT_NO_SPILL, HINT_OFFLOAD = 0x1, 0x2
KIND_DEVICE, KIND_HOST = 0, 1
ADVISE_HOT, ADVISE_COLD, ADVISE_WILLNEED, ADVISE_DONTNEED = 0, 1, 2, 3
ACCESS_PRIVATE = 0

# ump_dtype_t (NCCL's numbers) by NumPy dtype name; ump_redop_t by name.
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4,
          "uint64": 5, "float16": 6, "float32": 7, "float64": 8,
          "bfloat16": 9}
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def _find_library():
    env = os.environ.get("UMPOOL_LIBRARY")
    if env:
        return env
    try:
        from . import _install  # written by make at build time
        path = os.path.join(_install.LIBDIR, "libumpool.so.0")
        if os.path.exists(path):
            return path
    except ImportError:
        pass
    return ctypes.util.find_library("umpool") or "libumpool.so.0"


lib = ctypes.CDLL(_find_library())
_vp, _sz, _int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


def _decl(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


class Hints(ctypes.Structure):
    _fields_ = [("device", _int), ("policy", ctypes.c_char_p),
                ("flags", ctypes.c_uint), ("group", ctypes.c_uint),
                ("access", _int)]


class PtrInfo(ctypes.Structure):
    _fields_ = [("base", _vp), ("size", _sz), ("device", _int),
                ("tier", _int), ("chunk_base", _vp), ("chunk_size", _sz),
                ("kind", _int), ("lost", _int)]


class IpcHandle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 64)]


_U64 = ctypes.c_uint64


class Stats(ctypes.Structure):
    _fields_ = [("capacity", _sz), ("live_bytes", _sz), ("mapped_bytes", _sz),
                ("cached_bytes", _sz), ("peak_bytes", _sz),
                ("live_count", _U64), ("alloc_count", _U64),
                ("free_count", _U64), ("chunks_created", _U64),
                ("chunks_released", _U64), ("host_bytes", _sz),
                ("nvme_bytes", _sz), ("spill_count", _U64),
                ("spill_bytes", _U64), ("restore_count", _U64),
                ("restore_bytes", _U64), ("evictions", _U64),
                ("largest_free", _sz), ("fragmentation", ctypes.c_double),
                ("reserved_bytes", _sz), ("peak_reserved_bytes", _sz),
                ("driver_ns", _U64), ("failed_devices", _int),
                ("lost_count", _U64), ("lost_bytes", _sz),
                ("share_processes", _int), ("share_bytes", _sz)]


class LinkStats(ctypes.Structure):
    _fields_ = [("tier_bytes", _U64), ("coll_bytes", _U64),
                ("bandwidth_gbs", ctypes.c_double)]


class CollStats(ctypes.Structure):
    _fields_ = [("calls", _U64), ("bytes", _U64), ("timed_calls", _U64),
                ("timed_bus_bytes", _U64), ("timed_ns", _U64)]


def _as_dict(s):
    return {name: getattr(s, name) for name, _ in s._fields_}


_decl("ump_strerror", ctypes.c_char_p, _int)
_decl("ump_pool_create", _int, ctypes.c_char_p, ctypes.POINTER(_vp))
_decl("ump_process_pool", _int, ctypes.c_char_p, ctypes.POINTER(_vp))
_decl("ump_pool_destroy", _int, _vp)
_decl("ump_alloc", _int, _vp, _sz, ctypes.POINTER(Hints), ctypes.POINTER(_vp))
_decl("ump_free", _int, _vp, _vp)
_decl("ump_free_async", _int, _vp, _vp, _vp)
_decl("ump_host_alloc", _int, _vp, _sz, ctypes.POINTER(_vp))
_decl("ump_host_free", _int, _vp, _vp)
_decl("ump_ptr_info", _int, _vp, _vp, ctypes.POINTER(PtrInfo))
_decl("ump_stats", _int, _vp, _int, ctypes.POINTER(Stats))
_decl("ump_link_stats", _int, _vp, _int, _int, ctypes.POINTER(LinkStats))
_decl("ump_coll_stats", _int, _vp, _int, ctypes.POINTER(CollStats))
_decl("ump_device_count", _int, _vp)
_decl("ump_ipc_get_handle", _int, _vp, _vp, ctypes.POINTER(IpcHandle))
_decl("ump_ipc_open", _int, _vp, ctypes.POINTER(IpcHandle),
      ctypes.POINTER(_vp))
_decl("ump_ipc_close", _int, _vp, _vp)
_decl("ump_pool_checkpoint", _int, _vp, ctypes.c_char_p)
_decl("ump_pool_share", _int, _vp, ctypes.c_char_p)
_decl("ump_pool_attach", _int, ctypes.c_char_p, ctypes.c_char_p,
      ctypes.POINTER(_vp))
_decl("ump_pool_restore", _int, ctypes.c_char_p, ctypes.c_char_p,
      ctypes.POINTER(_vp))
_decl("ump_pool_set_root", _int, _vp, _vp)
_decl("ump_pool_root", _int, _vp, ctypes.POINTER(_vp))
_decl("ump_pool_suspend", _int, _vp, _int)
_decl("ump_pool_resume", _int, _vp)
_decl("ump_set_device", _int, _vp, _int)
_decl("ump_trim", _int, _vp)
_decl("ump_backend_name", ctypes.c_char_p, _vp)
_decl("ump_acquire", _int, _vp, _vp, _sz, _int, _vp)
_decl("ump_release", _int, _vp, _vp, _sz)
_decl("ump_prefetch", _int, _vp, _vp, _sz, _int, _vp)
_decl("ump_evict", _int, _vp, _vp, _sz, _int)
_decl("ump_advise", _int, _vp, _vp, _sz, _int)
_decl("ump_stream_create", _int, _vp, _int, ctypes.POINTER(_vp))
_decl("ump_stream_destroy", _int, _vp, _vp)
_decl("ump_stream_synchronize", _int, _vp, _vp)
_decl("ump_comm_create", _int, _vp, _int, ctypes.POINTER(_int),
      ctypes.c_char_p, ctypes.POINTER(_vp))
_decl("ump_comm_destroy", _int, _vp)
_decl("ump_comm_size", _int, _vp, ctypes.POINTER(_int))
_decl("ump_comm_shrink", _int, _vp, _int, ctypes.POINTER(_int),
      ctypes.POINTER(_vp))
_PP = ctypes.POINTER(_vp)
for _name in ("ump_allreduce", "ump_reduce_scatter"):
    _decl(_name, _int, _vp, _PP, _PP, _sz, _int, _int, _PP)
_decl("ump_reduce", _int, _vp, _PP, _PP, _sz, _int, _int, _int, _PP)
for _name in ("ump_allgather", "ump_alltoall"):
    _decl(_name, _int, _vp, _PP, _PP, _sz, _int, _PP)
for _name in ("ump_broadcast", "ump_gather", "ump_scatter"):
    _decl(_name, _int, _vp, _PP, _PP, _sz, _int, _int, _PP)


def strerror(err):
    return lib.ump_strerror(_cint(err, "err", "ump_strerror")).decode()


class Error(OSError):
    """A failed umpool call: errno is the C API's negative errno."""

    def __init__(self, err, call):
        super().__init__(-err, "%s: %s" % (call, strerror(err)))
        self.errno = err
        self.call = call


def _check(rc, call):
    if rc < 0:
        raise Error(rc, call)
    return rc


# Integer arguments. ctypes reduces an int that does not fit its C type
# modulo 2**bits without a word (2**64 + 4096 becomes a 4096-byte size,
# p + 2**64 frees p, 2**32 + 1 is device 1), so every integer a public
# function takes goes through one of these before it reaches C. The rule:
# no __index__ (a float, a str) is TypeError, as in Python itself, and so
# is a bool (an int to Python, a mistake as a size or device); a
# negative value for an unsigned C type is -EINVAL (a negative size or
# address is no size or address at all); a value past the C type's range
# is -EOVERFLOW. what names the argument, call the C function, for the
# message.
def _ranged(ctype, name, signed):
    bits = 8 * ctypes.sizeof(ctype)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed \
        else (0, (1 << bits) - 1)

    def check(value, what, call):
        # bool is an int to Python, but True as a size, a device or an
        # address is a caller's mistake, not a 1.
        if isinstance(value, bool):
            raise TypeError("%s: %s must be an integer (%s), not bool" %
                            (call, what, name))
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError("%s: %s must be an integer (%s), not %s" %
                            (call, what, name, type(value).__name__)) \
                from None
        if lo <= v <= hi:
            return v
        err = -_errno.EINVAL if v < 0 and lo == 0 else -_errno.EOVERFLOW
        raise Error(err, "%s (%s %d outside %s: %d..%d)" %
                    (call, what, v, name, lo, hi))
    return check


_size = _ranged(ctypes.c_size_t, "size_t", False)
_cint = _ranged(ctypes.c_int, "int", True)
_cuint = _ranged(ctypes.c_uint, "unsigned int", False)
_uintptr = _ranged(ctypes.c_void_p, "uintptr_t", False)


def _ptr(value, what, call):
    """An address: None (NULL) or an int that fits a pointer."""
    return None if value is None else _uintptr(value, what, call)


def _ptrs(ps, what, call):
    ps = list(ps)
    return (_vp * len(ps))(*[_ptr(p, "%s[%d]" % (what, i), call)
                             for i, p in enumerate(ps)])


def _ints(vs, what, call):
    vs = [_cint(v, "%s[%d]" % (what, i), call) for i, v in enumerate(vs)]
    return (_int * len(vs))(*vs) if vs else None, len(vs)


def process_pool(config=None):
    """The process's pool (ump_process_pool): the one the PyTorch and CuPy
    plug-ins and the preload use, made by the first call."""
    p = _vp()
    _check(lib.ump_process_pool(config.encode() if config else None,
                                ctypes.byref(p)), "ump_process_pool")
    return Pool(_handle=p.value)


class Pool:
    """A pool (ump_pool_create). config: "key:value,..." or None."""

    def __init__(self, config=None, _handle=None, _owned=None):
        self._owned = _handle is None if _owned is None else _owned
        self._opened = {}  # ipc_open's addresses: (size, opens)
        if _handle is None:
            p = _vp()
            _check(lib.ump_pool_create(config.encode() if config else None,
                                       ctypes.byref(p)), "ump_pool_create")
            _handle = p.value
        self.handle = _handle

    def close(self):
        """Destroys the pool: Error (-EBUSY) while allocations are live."""
        if self.handle and self._owned:
            _check(lib.ump_pool_destroy(self.handle), "ump_pool_destroy")
        self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        if not self.handle:
            raise Error(-9, "umpool.Pool")  # -EBADF: closed
        return self.handle

    @property
    def backend(self):
        return lib.ump_backend_name(self._h()).decode()

    @property
    def device_count(self):
        return _check(lib.ump_device_count(self._h()), "ump_device_count")

    def alloc(self, size, device=DEVICE_CURRENT, policy=None, flags=0,
              group=0):
        c = "ump_alloc"
        size = _size(size, "size", c)
        h = Hints(_cint(device, "device", c),
                  policy.encode() if policy else None,
                  _cuint(flags, "flags", c), _cuint(group, "group", c),
                  ACCESS_PRIVATE)
        p = _vp()
        _check(lib.ump_alloc(self._h(), size, ctypes.byref(h),
                             ctypes.byref(p)), "ump_alloc")
        return p.value

    def free(self, ptr, stream=None):
        if stream is None:
            ptr = _ptr(ptr, "ptr", "ump_free")
            _check(lib.ump_free(self._h(), ptr), "ump_free")
        else:
            c = "ump_free_async"
            ptr, stream = _ptr(ptr, "ptr", c), _ptr(stream, "stream", c)
            _check(lib.ump_free_async(self._h(), ptr, stream), c)

    def host_alloc(self, size):
        p = _vp()
        size = _size(size, "size", "ump_host_alloc")
        _check(lib.ump_host_alloc(self._h(), size, ctypes.byref(p)),
               "ump_host_alloc")
        return p.value

    def host_free(self, ptr):
        ptr = _ptr(ptr, "ptr", "ump_host_free")
        _check(lib.ump_host_free(self._h(), ptr), "ump_host_free")

    def ipc_handle(self, ptr):
        """The handle (64 bytes) through which another process opens the
        allocation that starts at ptr (ump_ipc_get_handle)."""
        c = "ump_ipc_get_handle"
        h = IpcHandle()
        _check(lib.ump_ipc_get_handle(self._h(), _ptr(ptr, "ptr", c),
                                      ctypes.byref(h)), c)
        return bytes(h.bytes)

    def ipc_open(self, handle):
        """Maps another process's allocation named by handle (the bytes
        of ipc_handle) in this pool; returns its address here."""
        if not isinstance(handle, (bytes, bytearray)) or len(handle) != 64:
            raise TypeError("ump_ipc_open: handle must be the 64 bytes of "
                            "ipc_handle")
        h = IpcHandle.from_buffer_copy(bytes(handle))
        p = _vp()
        _check(lib.ump_ipc_open(self._h(), ctypes.byref(h), ctypes.byref(p)),
               "ump_ipc_open")
        # For array(): the allocation's size, bytes 48-55 of the handle
        # (lib/ipc/wire.c), and how many opens of it are not closed.
        size = int.from_bytes(bytes(handle[48:56]), sys.byteorder)
        n = self._opened.get(p.value, (size, 0))[1]
        self._opened[p.value] = (size, n + 1)
        return p.value

    def ipc_close(self, ptr):
        """Unmaps what ipc_open returned."""
        _check(lib.ump_ipc_close(self._h(), _ptr(ptr, "ptr", "ump_ipc_close")),
               "ump_ipc_close")
        size, n = self._opened.pop(ptr)
        if n > 1:
            self._opened[ptr] = (size, n - 1)

    def _opened_info(self, ptr):
        """The allocation opened by ipc_open that holds ptr, or None."""
        for base, (size, _) in self._opened.items():
            if base <= ptr < base + size:
                return {"base": base, "size": size}
        return None

    def ptr_info(self, ptr):
        info = PtrInfo()
        ptr = _ptr(ptr, "ptr", "ump_ptr_info")
        _check(lib.ump_ptr_info(self._h(), ptr, ctypes.byref(info)),
               "ump_ptr_info")
        return _as_dict(info)

    def stats(self, device=DEVICE_ALL):
        s = Stats()
        device = _cint(device, "device", "ump_stats")
        _check(lib.ump_stats(self._h(), device, ctypes.byref(s)),
               "ump_stats")
        return _as_dict(s)

    def link_stats(self, src, dst):
        """Bytes the pool moved from src to dst (a device, LOC_HOST,
        LOC_NVME, LOC_NET): tier_bytes, coll_bytes, bandwidth_gbs."""
        s = LinkStats()
        src = _cint(src, "src", "ump_link_stats")
        dst = _cint(dst, "dst", "ump_link_stats")
        _check(lib.ump_link_stats(self._h(), src, dst, ctypes.byref(s)),
               "ump_link_stats")
        return _as_dict(s)

    def coll_stats(self, name):
        """A collective's counters ("allreduce", ...: COLLECTIVES)."""
        if name not in COLLECTIVES:
            raise ValueError("unknown collective %r (one of %s)"
                             % (name, ", ".join(COLLECTIVES)))
        s = CollStats()
        _check(lib.ump_coll_stats(self._h(), COLLECTIVES[name],
                                  ctypes.byref(s)), "ump_coll_stats")
        return _as_dict(s)

    def set_device(self, device):
        device = _cint(device, "device", "ump_set_device")
        _check(lib.ump_set_device(self._h(), device), "ump_set_device")

    def trim(self):
        _check(lib.ump_trim(self._h()), "ump_trim")

    # resilience
    def checkpoint(self, path):
        """Every live allocation and the layout to a new file (atomic)."""
        _check(lib.ump_pool_checkpoint(self._h(), os.fsencode(path)),
               "ump_pool_checkpoint")

    @classmethod
    def restore(cls, path, config=None):
        """A new pool from a checkpoint, at the same addresses."""
        p = _vp()
        _check(lib.ump_pool_restore(os.fsencode(path),
                                    config.encode() if config else None,
                                    ctypes.byref(p)), "ump_pool_restore")
        return cls(_handle=p.value, _owned=True)

    # a pool shared by processes
    def share(self, name):
        """Publishes the pool under name (a plain word) for other processes
        of the user to attach (ump_pool_share)."""
        _check(lib.ump_pool_share(self._h(), name.encode()), "ump_pool_share")

    @classmethod
    def attach(cls, name, config=None):
        """Joins the pool another process shared as name (ump_pool_attach):
        a pool of this process at the same addresses; close() detaches."""
        p = _vp()
        _check(lib.ump_pool_attach(name.encode(),
                                   config.encode() if config else None,
                                   ctypes.byref(p)), "ump_pool_attach")
        return cls(_handle=p.value, _owned=True)

    @property
    def root(self):
        """The pointer checkpoints keep (ump_pool_set_root), or None."""
        p = _vp()
        _check(lib.ump_pool_root(self._h(), ctypes.byref(p)), "ump_pool_root")
        return p.value

    @root.setter
    def root(self, ptr):
        ptr = _ptr(ptr, "ptr", "ump_pool_set_root")
        _check(lib.ump_pool_set_root(self._h(), ptr), "ump_pool_set_root")

    def suspend(self, tier=TIER_HOST):
        tier = _cint(tier, "tier", "ump_pool_suspend")
        _check(lib.ump_pool_suspend(self._h(), tier), "ump_pool_suspend")

    def resume(self):
        _check(lib.ump_pool_resume(self._h()), "ump_pool_resume")

    # tiers
    def acquire(self, ptr, size=0, device=DEVICE_CURRENT, stream=None):
        c = "ump_acquire"
        _check(lib.ump_acquire(self._h(), _ptr(ptr, "ptr", c),
                               _size(size, "size", c),
                               _cint(device, "device", c),
                               _ptr(stream, "stream", c)), c)

    def release(self, ptr, size=0):
        c = "ump_release"
        _check(lib.ump_release(self._h(), _ptr(ptr, "ptr", c),
                               _size(size, "size", c)), c)

    def prefetch(self, ptr, size=0, device=DEVICE_CURRENT, stream=None):
        c = "ump_prefetch"
        _check(lib.ump_prefetch(self._h(), _ptr(ptr, "ptr", c),
                                _size(size, "size", c),
                                _cint(device, "device", c),
                                _ptr(stream, "stream", c)), c)

    def evict(self, ptr, size=0, tier=TIER_HOST):
        c = "ump_evict"
        _check(lib.ump_evict(self._h(), _ptr(ptr, "ptr", c),
                             _size(size, "size", c),
                             _cint(tier, "tier", c)), c)

    def advise(self, ptr, size, advice):
        c = "ump_advise"
        _check(lib.ump_advise(self._h(), _ptr(ptr, "ptr", c),
                              _size(size, "size", c),
                              _cint(advice, "advice", c)), c)

    # streams
    def stream(self, device):
        s = _vp()
        device = _cint(device, "device", "ump_stream_create")
        _check(lib.ump_stream_create(self._h(), device, ctypes.byref(s)),
               "ump_stream_create")
        return s.value

    def stream_destroy(self, stream):
        stream = _ptr(stream, "stream", "ump_stream_destroy")
        _check(lib.ump_stream_destroy(self._h(), stream),
               "ump_stream_destroy")

    def synchronize(self, stream=None):
        stream = _ptr(stream, "stream", "ump_stream_synchronize")
        _check(lib.ump_stream_synchronize(self._h(), stream),
               "ump_stream_synchronize")

    def array(self, ptr, shape, dtype="float64"):
        """A NumPy array over pool memory at ptr (no copy). Only where the
        CPU reaches pool memory: the sim backend (Error -ENOTSUP else). The
        view is valid while the allocation is: like the pointer itself, it
        must not be used after free()."""
        import numpy as np
        if self.backend != "sim":
            raise Error(-95, "umpool.Pool.array (pool memory is the GPU's)")
        dt = np.dtype(dtype)
        c = "umpool.Pool.array"
        shape = (shape,) if hasattr(shape, "__index__") else tuple(shape)
        shape = tuple(_size(d, "shape[%d]" % i, c)
                      for i, d in enumerate(shape))
        # Python ints: np.prod would wrap at 2**63 too.
        n = _size(math.prod(shape) * dt.itemsize, "byte count", c)
        ptr = _ptr(ptr, "ptr", c)
        info = self._opened_info(ptr) or self.ptr_info(ptr)  # raises
        if ptr + n > info["base"] + info["size"]:
            raise Error(-22, "umpool.Pool.array (past the allocation)")
        buf = (ctypes.c_char * n).from_address(ptr)
        return np.frombuffer(buf, dtype=dt).reshape(shape)


class Comm:
    """A communicator of one rank per device (ump_comm_create): devices
    None is every device of the pool, rank = device."""

    def __init__(self, pool, devices=None, config=None):
        self.pool = pool
        if devices is not None:
            devs, n = _ints(devices, "devices", "ump_comm_create")
        else:
            devs, n = None, pool.device_count
        c = _vp()
        _check(lib.ump_comm_create(pool._h(), n, devs,
                                   config.encode() if config else None,
                                   ctypes.byref(c)), "ump_comm_create")
        self.handle = c.value
        self.size = n

    def close(self):
        if self.handle:
            _check(lib.ump_comm_destroy(self.handle), "ump_comm_destroy")
        self.handle = None

    def shrink(self, exclude):
        """ump_comm_shrink: a new communicator of the ranks not in exclude
        (a failed device's, say), renumbered in order, with the same
        config; this one stays valid until closed."""
        if not self.handle:
            raise Error(-9, "ump_comm_shrink (the communicator is closed)")
        ex, n = _ints(exclude, "exclude", "ump_comm_shrink")
        c = _vp()
        _check(lib.ump_comm_shrink(self.handle, n, ex, ctypes.byref(c)),
               "ump_comm_shrink")
        new = Comm.__new__(Comm)
        new.pool = self.pool
        new.handle = c.value
        n = _int()
        _check(lib.ump_comm_size(new.handle, ctypes.byref(n)),
               "ump_comm_size")
        new.size = n.value
        return new

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, name, send, recv, count, dtype, *rest):
        """rest: the op and root, checked already (_op, _root)."""
        if not self.handle:
            raise Error(-9, name + " (the communicator is closed)")
        send, recv = _ptrs(send, "send", name), _ptrs(recv, "recv", name)
        if len(send) != self.size or len(recv) != self.size:
            raise Error(-22, name + " (one buffer per rank)")
        count = _size(count, "count", name)
        if dtype not in DTYPES:
            raise Error(-22, "%s (dtype %r)" % (name, dtype))
        fn = getattr(lib, name)
        _check(fn(self.handle, send, recv, count, DTYPES[dtype], *rest,
                  None), name)

    @staticmethod
    def _op(op):
        if op not in OPS:
            raise Error(-22, "unknown reduction %r (one of %s)" %
                        (op, ", ".join(OPS)))
        return OPS[op]

    @staticmethod
    def _root(root, name):
        return _cint(root, "root", name)

    def allreduce(self, send, recv, count, dtype="float64", op="sum"):
        self._call("ump_allreduce", send, recv, count, dtype, self._op(op))

    def reduce_scatter(self, send, recv, count, dtype="float64", op="sum"):
        self._call("ump_reduce_scatter", send, recv, count, dtype,
                   self._op(op))

    def reduce(self, send, recv, count, dtype="float64", op="sum", root=0):
        self._call("ump_reduce", send, recv, count, dtype, self._op(op),
                   self._root(root, "ump_reduce"))

    def broadcast(self, send, recv, count, dtype="float64", root=0):
        self._call("ump_broadcast", send, recv, count, dtype,
                   self._root(root, "ump_broadcast"))

    def allgather(self, send, recv, count, dtype="float64"):
        self._call("ump_allgather", send, recv, count, dtype)

    def alltoall(self, send, recv, count, dtype="float64"):
        self._call("ump_alltoall", send, recv, count, dtype)

    def gather(self, send, recv, count, dtype="float64", root=0):
        self._call("ump_gather", send, recv, count, dtype,
                   self._root(root, "ump_gather"))

    def scatter(self, send, recv, count, dtype="float64", root=0):
        self._call("ump_scatter", send, recv, count, dtype,
                   self._root(root, "ump_scatter"))
