"""The Python package (bindings/python/umpool) and the PyTorch and CuPy
entry points of libumpool, on the sim backend. Run by tests/python/run.sh
(PYTHONPATH and UMPOOL_LIBRARY set to the build tree)."""
import ctypes
import errno
import os
import sys
import tempfile
import threading
import time
import types
import unittest

import numpy as np

import umpool

SIM4 = "backend:sim,sim_devices:4,sim_device_mem:64M"
# The process's pool, made first here (the first call's config wins): the
# PyTorch and CuPy entry points use it.
PROCESS = "backend:sim,sim_devices:2,sim_device_mem:64M"


def setUpModule():
    umpool.process_pool(PROCESS)


class PoolTest(unittest.TestCase):
    def setUp(self):
        self.pool = umpool.Pool(SIM4)

    def tearDown(self):
        if self.pool.handle:
            self.pool.close()

    def test_alloc_views_stats(self):
        pool = self.pool
        self.assertEqual(pool.backend, "sim")
        self.assertEqual(pool.device_count, 4)
        ptrs = [pool.alloc(3 << 20, device=d) for d in range(4)]
        for d, p in enumerate(ptrs):
            self.assertEqual(pool.ptr_info(p)["device"], d)
            a = pool.array(p, (3 << 20) // 8, "float64")
            a[:] = np.arange(a.size) * (d + 1)
        for d, p in enumerate(ptrs):  # the same memory, read again
            a = pool.array(p, (3 << 20) // 8, "float64")
            self.assertTrue(np.array_equal(a, np.arange(a.size) * (d + 1)))
        st = pool.stats()
        self.assertEqual(st["live_count"], 4)
        self.assertGreaterEqual(st["live_bytes"], 4 * (3 << 20))
        self.assertEqual(pool.stats(2)["live_count"], 1)
        for p in ptrs:
            pool.free(p)
        self.assertEqual(pool.stats()["live_count"], 0)

    def test_errors(self):
        pool = self.pool
        p = pool.alloc(4096)
        pool.free(p)
        with self.assertRaises(umpool.Error) as cm:
            pool.free(p)  # twice
        self.assertEqual(cm.exception.errno, -errno.EINVAL)
        self.assertIn("ump_free", str(cm.exception))
        local = ctypes.create_string_buffer(64)
        with self.assertRaises(umpool.Error):
            pool.free(ctypes.addressof(local))  # not the pool's
        with self.assertRaises(umpool.Error):
            pool.alloc(1 << 20, device=7)  # no such device
        with self.assertRaises(umpool.Error):
            umpool.Pool("backend:sim,no_such_key:1")
        q = pool.alloc(100)
        with self.assertRaises(umpool.Error):
            pool.array(q, 1000, "float64")  # past the allocation
        with self.assertRaises(umpool.Error) as cm:
            pool.close()  # live allocations
        self.assertEqual(cm.exception.errno, -errno.EBUSY)
        pool.free(q)
        pool.close()
        with self.assertRaises(umpool.Error):
            pool.alloc(100)  # closed

    def test_host_memory(self):
        pool = self.pool
        h = pool.host_alloc(10000)
        info = pool.ptr_info(h)
        self.assertEqual((info["device"], info["tier"], info["kind"]),
                         (-1, umpool.TIER_HOST, umpool.KIND_HOST))
        pool.array(h, 1000, "int64")[:] = 7
        self.assertTrue((pool.array(h, 1000, "int64") == 7).all())
        with self.assertRaises(umpool.Error):
            pool.free(h)  # ump_host_alloc's: ump_host_free only
        self.assertEqual(pool.stats(umpool.LOC_HOST)["live_count"], 1)
        pool.host_free(h)
        self.assertEqual(pool.stats(umpool.LOC_HOST)["live_count"], 0)

    def test_tiers(self):
        pool = self.pool
        n = 4 << 20
        p = pool.alloc(n, device=1, flags=umpool.HINT_OFFLOAD)
        pool.array(p, n // 8, "uint64")[:] = np.arange(n // 8)
        pool.evict(p, 0, umpool.TIER_HOST)
        self.assertEqual(pool.ptr_info(p)["tier"], umpool.TIER_HOST)
        pool.acquire(p, 0, 1)
        self.assertEqual(pool.ptr_info(p)["tier"], umpool.TIER_DEVICE)
        self.assertTrue(np.array_equal(pool.array(p, n // 8, "uint64"),
                                       np.arange(n // 8)))
        pool.release(p)
        with self.assertRaises(umpool.Error):
            pool.release(p)  # not acquired
        # the move down and the move up, on device 1's host link
        self.assertEqual(pool.link_stats(1, umpool.LOC_HOST)["tier_bytes"], n)
        self.assertEqual(pool.link_stats(umpool.LOC_HOST, 1)["tier_bytes"], n)
        self.assertEqual(pool.link_stats(0, umpool.LOC_HOST)["tier_bytes"], 0)
        with self.assertRaises(umpool.Error):
            pool.link_stats(1, 1)
        pool.free(p)


    def test_checkpoint_restore_suspend(self):
        pool = self.pool
        n = 3 << 20
        ptrs = [pool.alloc(n, device=d) for d in range(4)]
        for d, p in enumerate(ptrs):
            pool.array(p, n // 8, "uint64")[:] = np.arange(n // 8) + d
        pool.array(ptrs[0], 4, "uint64")[0] = ptrs[3]  # a pointer inside
        pool.root = ptrs[0]
        pool.suspend(umpool.TIER_HOST)
        with self.assertRaises(umpool.Error) as e:
            pool.alloc(1000)
        self.assertEqual(e.exception.errno, -errno.EBUSY)
        pool.resume()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pool.ckpt")
            pool.checkpoint(path)
            for p in ptrs:
                pool.free(p)
            pool.close()
            with self.assertRaises(umpool.Error) as e:
                umpool.Pool.restore(os.path.join(tmp, "missing"))
            self.assertEqual(e.exception.errno, -errno.ENOENT)
            self.pool = pool = umpool.Pool.restore(path)
        self.assertEqual(pool.root, ptrs[0])
        self.assertEqual(int(pool.array(ptrs[0], 1, "uint64")[0]), ptrs[3])
        for d, p in enumerate(ptrs):
            a = pool.array(p, n // 8, "uint64")
            self.assertEqual(int(a[1]), 1 + d)
            self.assertTrue(np.array_equal(a[1:], np.arange(1, n // 8) + d))
            pool.free(p)


    def test_ipc(self):
        """An allocation opened by another process (a child that runs
        Python again) and by another pool of this one."""
        import subprocess
        n = 4 << 20
        p = self.pool.alloc(n, device=1)
        self.pool.array(p, n // 8, "uint64")[:] = np.arange(n // 8)
        h = self.pool.ipc_handle(p)
        self.assertEqual(len(h), 64)
        code = (
            "import sys, numpy as np, umpool\n"
            "pool = umpool.Pool(%r)\n"
            "q = pool.ipc_open(bytes.fromhex(sys.argv[1]))\n"
            "a = pool.array(q, %d, 'uint64')\n"
            "assert (a == np.arange(%d)).all()\n"
            "a[0] = 12345\n"
            "pool.ipc_close(q)\n"
            "pool.close()\n" % (SIM4, n // 8, n // 8))
        r = subprocess.run([sys.executable, "-c", code, h.hex()],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(int(self.pool.array(p, 1, "uint64")[0]), 12345)
        other = umpool.Pool(SIM4)
        try:
            q = other.ipc_open(self.pool.ipc_handle(p))
            self.assertEqual(int(other.array(q, 2, "uint64")[1]), 1)
            other.ipc_close(q)
            with self.assertRaises(umpool.Error) as e:
                other.ipc_close(q)
            self.assertEqual(e.exception.errno, -errno.EINVAL)
            bad = bytearray(h)
            bad[30] ^= 1
            with self.assertRaises(umpool.Error) as e:
                other.ipc_open(bytes(bad))
            self.assertEqual(e.exception.errno, -errno.EINVAL)
            with self.assertRaises(TypeError):
                other.ipc_open(b"short")
        finally:
            other.close()
        self.pool.free(p)

    def test_share(self):
        """A pool shared with a child Python process (Pool.attach): its
        allocation opened here at the same address, one ledger."""
        import subprocess
        name = "pytest-%d" % os.getpid()
        shared = umpool.Pool(SIM4)
        try:
            shared.share(name)
            self.assertEqual(shared.stats()["share_processes"], 1)
            code = (
                "import sys, numpy as np, umpool\n"
                "pool = umpool.Pool.attach(sys.argv[1])\n"
                "p = pool.alloc(4 << 20)\n"
                "pool.array(p, 1 << 19, 'uint64')[:] = np.arange(1 << 19)\n"
                "print('%x %s' % (p, pool.ipc_handle(p).hex()), flush=True)\n"
                "sys.stdin.readline()\n"
                "pool.free(p)\n"
                "pool.close()\n")
            child = subprocess.Popen([sys.executable, "-c", code, name],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            try:
                at, h = child.stdout.readline().split()
                self.assertEqual(shared.stats()["share_processes"], 2)
                q = shared.ipc_open(bytes.fromhex(h))
                self.assertEqual(q, int(at, 16))
                a = shared.array(q, 1 << 19, "uint64")
                self.assertTrue((a == np.arange(1 << 19)).all())
                shared.ipc_close(q)
                child.stdin.write("exit\n")
                child.stdin.close()
                self.assertEqual(child.wait(timeout=120), 0)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            with self.assertRaises(umpool.Error) as e:
                umpool.Pool.attach("no-such-pool-%d" % os.getpid())
            self.assertEqual(e.exception.errno, -errno.ENOENT)
            with self.assertRaises(umpool.Error) as e:
                shared.share("not/a/name")
            self.assertEqual(e.exception.errno, -errno.EINVAL)
        finally:
            shared.close()

    def test_failed_device(self):
        """Device 1 fails at its 8th operation (config keys): what was on
        it is reported lost, the rest reads back, new memory avoids it."""
        pool = umpool.Pool(SIM4 + ",sim_fail_device:1,sim_fail_after:8")
        try:
            n = 2 << 20
            keep = pool.alloc(n, device=0)
            pool.array(keep, n // 8, "uint64")[:] = np.arange(n // 8)
            on1 = []
            for _ in range(8):
                try:
                    on1.append(pool.alloc(n, device=1))
                except umpool.Error as e:
                    self.assertEqual(e.errno, -errno.EIO)
                if pool.stats()["failed_devices"]:
                    break
            self.assertEqual(pool.stats(1)["failed_devices"], 1)
            self.assertEqual(pool.stats(0)["failed_devices"], 0)
            lost = [p for p in on1 if pool.ptr_info(p)["lost"]]
            self.assertGreater(len(lost), 0)
            self.assertEqual(pool.stats()["lost_count"], len(lost))
            self.assertFalse(pool.ptr_info(keep)["lost"])
            self.assertTrue(np.array_equal(pool.array(keep, n // 8, "uint64"),
                                           np.arange(n // 8)))
            p = pool.alloc(n, device=1)
            self.assertNotEqual(pool.ptr_info(p)["device"], 1)
            for q in on1 + [keep, p]:
                pool.free(q)
            self.assertEqual(pool.stats()["lost_count"], 0)
        finally:
            pool.close()


class CollectiveTest(unittest.TestCase):
    """Collectives on pool memory driven from Python, checked against
    NumPy (integer values: every sum is exact, in any order)."""

    def setUp(self):
        self.pool = umpool.Pool(SIM4)
        self.comm = umpool.Comm(self.pool)
        self.bufs = []
        self.rng = np.random.default_rng(5)

    def tearDown(self):
        self.comm.close()
        for p in self.bufs:
            self.pool.free(p)
        self.pool.close()

    def buf(self, d, n, dtype):
        p = self.pool.alloc(max(n, 1) * np.dtype(dtype).itemsize, device=d)
        self.bufs.append(p)
        return p, self.pool.array(p, n, dtype)

    def test_allreduce(self):
        n = 10000
        for dtype in ("float64", "int64", "float32"):
            send, recv, data = [], [], []
            for d in range(4):
                p, a = self.buf(d, n, dtype)
                a[:] = self.rng.integers(-1000, 1000, n)
                data.append(a.copy())
                send.append(p)
                recv.append(self.buf(d, n, dtype)[0])
            before = self.pool.coll_stats("allreduce")
            self.comm.allreduce(send, recv, n, dtype, "sum")
            after = self.pool.coll_stats("allreduce")
            self.assertEqual(after["calls"], before["calls"] + 1)
            self.assertEqual(after["bytes"] - before["bytes"],
                             n * np.dtype(dtype).itemsize)
            want = sum(data)
            for d in range(4):
                got = self.pool.array(recv[d], n, dtype)
                self.assertTrue(np.array_equal(got, want), (dtype, d))

    def test_shrink(self):
        """Ranks 1 and 3 left out: the other two reduce alone; bad lists
        raise and make nothing."""
        n = 1000
        with self.comm.shrink([3, 1]) as two:
            self.assertEqual(two.size, 2)
            send, data = [], []
            for d in (0, 2):
                p, a = self.buf(d, n, "int64")
                a[:] = self.rng.integers(-1000, 1000, n)
                data.append(a.copy())
                send.append(p)
            two.allreduce(send, send, n, "int64", "sum")
            for p in send:
                self.assertTrue(np.array_equal(
                    self.pool.array(p, n, "int64"), data[0] + data[1]))
        for bad in ([4], [1, 1], [0, 1, 2, 3], [-1]):
            with self.assertRaises(umpool.Error) as e:
                self.comm.shrink(bad)
            self.assertEqual(e.exception.errno, -errno.EINVAL)

    def test_allgather_broadcast_alltoall(self):
        n = 1000
        send, recv, data = [], [], []
        for d in range(4):
            p, a = self.buf(d, n, "int32")
            a[:] = self.rng.integers(0, 1 << 20, n)
            data.append(a.copy())
            send.append(p)
            recv.append(self.buf(d, 4 * n, "int32")[0])
        self.comm.allgather(send, recv, n, "int32")
        for d in range(4):
            self.assertTrue(np.array_equal(
                self.pool.array(recv[d], 4 * n, "int32"),
                np.concatenate(data)))
        self.comm.broadcast(send, send, n, "int32", root=2)
        for d in range(4):
            self.assertTrue(np.array_equal(
                self.pool.array(send[d], n, "int32"), data[2]))
        # alltoall: rank r's block p goes to rank p's block r
        blocks = []
        for d in range(4):
            a = self.pool.array(recv[d], 4 * n, "int32")  # send side
            blocks.append(a.copy().reshape(4, n))
        out = [self.buf(d, 4 * n, "int32")[0] for d in range(4)]
        self.comm.alltoall(recv, out, n, "int32")
        for d in range(4):
            got = self.pool.array(out[d], 4 * n, "int32").reshape(4, n)
            for r in range(4):
                self.assertTrue(np.array_equal(got[r], blocks[r][d]))

    def test_bad_calls(self):
        with self.assertRaises(umpool.Error) as cm:
            self.pool.close()  # the communicator would outlive it
        self.assertEqual(cm.exception.errno, -errno.EBUSY)
        p, _ = self.buf(0, 10, "float64")
        with self.assertRaises(umpool.Error):
            self.comm.allreduce([p] * 4, [p] * 4, 10, "complex", "sum")
        with self.assertRaises(umpool.Error):
            self.comm.allreduce([p] * 4, [p] * 4, 10, "float64", "xor")
        with self.assertRaises(umpool.Error):
            self.comm.allreduce([p], [p], 10)  # one buffer for 4 ranks
        with self.assertRaises(umpool.Error):
            local = ctypes.create_string_buffer(80)
            addr = ctypes.addressof(local)
            self.comm.allreduce([addr] * 4, [addr] * 4, 10)  # not the pool's


# --- integer arguments: checked against their C type, never wrapped -------

U64, U32 = 1 << 64, 1 << 32
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
EINVAL, EOVERFLOW = -errno.EINVAL, -errno.EOVERFLOW
umpool.lib.ump_get_device.restype = ctypes.c_int
umpool.lib.ump_get_device.argtypes = [ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_int)]


class IntegerRangeTest(unittest.TestCase):
    """ctypes reduces an int modulo 2**64 or 2**32 to fit its C type: the
    bad values here mostly wrap to valid ones (2**64 + 4096 to 4096,
    p + 2**64 to p, 2**32 + 1 to device 1), so a binding that let them
    through would act on the wrong thing. The rule: no integer is
    TypeError; negative for an unsigned C type is -EINVAL; past the C
    type's range is -EOVERFLOW; and the pool is left exactly as it was
    (the C call is not made)."""

    def setUp(self):
        """A pool with something of everything: device memory (p, the
        collectives' buffers), host memory (h), a stream, a communicator,
        a root."""
        pool = self.pool = umpool.Pool(SIM4)
        self.p = pool.alloc(1 << 20, device=1, flags=umpool.HINT_OFFLOAD)
        self.h = pool.host_alloc(4096)
        self.s = pool.stream(0)
        self.send = [pool.alloc(4096, device=d) for d in range(4)]
        self.recv = [pool.alloc(4096, device=d) for d in range(4)]
        pool.root = self.send[0]
        self.comm = umpool.Comm(pool)

    def tearDown(self):
        """Best effort: where a wrapped call went through (a binding without
        the checks) the pool may not close; the test has failed already."""
        pool = self.pool
        undo = [self.comm.close,
                lambda: pool.stream_destroy(self.s),
                lambda: pool.host_free(self.h)]
        undo += [lambda q=q: pool.free(q)
                 for q in [self.p] + self.send + self.recv]
        for fn in undo + [pool.close]:
            try:
                fn()
            except umpool.Error:
                pass

    def device(self):
        d = ctypes.c_int()
        self.assertEqual(umpool.lib.ump_get_device(self.pool.handle,
                                                   ctypes.byref(d)), 0)
        return d.value

    def state(self):
        """All the pool shows of itself."""
        pool = self.pool
        return (pool.stats(), [pool.stats(d) for d in range(4)],
                pool.stats(umpool.LOC_HOST),
                [pool.ptr_info(q) for q in [self.p, self.h] + self.send +
                 self.recv],
                pool.root, self.device(),
                [pool.link_stats(d, umpool.LOC_HOST) for d in range(4)],
                [pool.link_stats(umpool.LOC_HOST, d) for d in range(4)],
                [pool.coll_stats(c) for c in umpool.COLLECTIVES])

    def refused(self, fn, value, err):
        """fn(value) raises Error err from the binding's check, and the
        pool is unchanged."""
        before = self.state()
        with self.assertRaises(umpool.Error) as cm:
            fn(value)
        self.assertEqual(cm.exception.errno, err)
        self.assertIn(" outside ", cm.exception.call)  # not the C call's
        self.assertEqual(self.state(), before)

    def test_reported_cases(self):
        pool, p = self.pool, self.p
        live = pool.stats()["live_count"]
        self.refused(pool.alloc, U64 + 4096, EOVERFLOW)
        self.refused(pool.free, p + U64, EOVERFLOW)
        self.assertEqual(pool.ptr_info(p)["size"], 1 << 20)  # still live
        self.refused(pool.free, U64, EOVERFLOW)  # not NULL
        self.refused(pool.set_device, U32 + 1, EOVERFLOW)
        self.assertEqual(self.device(), 0)
        self.refused(pool.stats, U32 + 1, EOVERFLOW)
        self.refused(pool.alloc, -1, EINVAL)
        self.refused(pool.alloc, -4096, EINVAL)
        self.refused(pool.host_alloc, -1, EINVAL)
        self.refused(pool.free, -1, EINVAL)
        self.refused(lambda x: pool.array(p, (x, x), "uint8"), U32,
                     EOVERFLOW)  # 2**64 bytes: np.prod would make it 0
        self.assertEqual(pool.stats()["live_count"], live)

    def test_limits_reach_c(self):
        """The largest and smallest values that fit go to the C call (whose
        refusal it is), and NumPy integers count as integers."""
        pool = self.pool
        for fn, value in ((pool.alloc, U64 - 1), (pool.free, U64 - 1),
                          (pool.set_device, INT_MAX),
                          (pool.set_device, INT_MIN),
                          (pool.stats, INT_MAX),
                          (lambda x: pool.alloc(4096, flags=x), U32 - 1)):
            before = self.state()
            with self.assertRaises(umpool.Error) as cm:
                fn(value)
            self.assertNotIn(" outside ", cm.exception.call)
            self.assertEqual(self.state(), before)
        q = pool.alloc(np.uint64(4096), device=np.int32(2))
        self.assertEqual(pool.ptr_info(q)["device"], 2)
        self.assertEqual(pool.stats(np.int64(2))["live_count"], 3)
        self.assertEqual(pool.array(q, np.int64(8), "uint8").shape, (8,))
        pool.free(np.uint64(q))

    def test_not_integers(self):
        pool, p = self.pool, self.p
        for fn in (pool.alloc, pool.free, pool.host_alloc, pool.stats,
                   pool.set_device, pool.stream, pool.synchronize,
                   lambda x: pool.alloc(4096, device=x),
                   lambda x: pool.evict(p, x),
                   lambda x: self.comm.shrink([x]),
                   lambda x: self.comm.allreduce(self.send, self.recv, x)):
            for bad in (4096.0, 1.5, "1", b"1", [1], True, False):
                before = self.state()
                with self.assertRaises(TypeError):
                    fn(bad)
                self.assertEqual(self.state(), before)

    def cases(self):
        """(name, fn, C type, k): fn(k) would be a valid call, and ctypes
        would make fn(k + 2**64) (and fn(k + 2**32) for int and unsigned)
        into it."""
        pool, p, h, s = self.pool, self.p, self.h, self.s
        comm, send, recv = self.comm, self.send, self.recv
        H, T = umpool.LOC_HOST, umpool.TIER_HOST
        yield "alloc size", lambda x: pool.alloc(x), "size_t", 4096
        yield "alloc device", lambda x: pool.alloc(4096, device=x), "int", 1
        yield "alloc flags", lambda x: pool.alloc(4096, flags=x), \
            "unsigned", umpool.HINT_OFFLOAD
        yield "alloc group", lambda x: pool.alloc(4096, group=x), \
            "unsigned", 0
        yield "free ptr", lambda x: pool.free(x), "ptr", p
        yield "free_async ptr", lambda x: pool.free(x, s), "ptr", p
        yield "free_async stream", lambda x: pool.free(p, x), "ptr", s
        yield "host_alloc size", pool.host_alloc, "size_t", 4096
        yield "host_free ptr", pool.host_free, "ptr", h
        yield "ptr_info ptr", pool.ptr_info, "ptr", p
        yield "stats device", pool.stats, "int", 1
        yield "link_stats src", lambda x: pool.link_stats(x, H), "int", 1
        yield "link_stats dst", lambda x: pool.link_stats(1, x), "int", H
        yield "set_device device", pool.set_device, "int", 1
        yield "root ptr", lambda x: setattr(pool, "root", x), "ptr", recv[0]
        yield "suspend tier", pool.suspend, "int", T
        yield "acquire ptr", lambda x: pool.acquire(x, 0, 1), "ptr", p
        yield "acquire size", lambda x: pool.acquire(p, x, 1), "size_t", 0
        yield "acquire device", lambda x: pool.acquire(p, 0, x), "int", 1
        yield "acquire stream", lambda x: pool.acquire(p, 0, 1, x), "ptr", s
        yield "release ptr", lambda x: pool.release(x), "ptr", p
        yield "release size", lambda x: pool.release(p, x), "size_t", 0
        yield "prefetch ptr", lambda x: pool.prefetch(x, 0, 0), "ptr", p
        yield "prefetch size", lambda x: pool.prefetch(p, x, 0), "size_t", 0
        yield "prefetch device", lambda x: pool.prefetch(p, 0, x), "int", 0
        yield "prefetch stream", lambda x: pool.prefetch(p, 0, 0, x), \
            "ptr", s
        yield "evict ptr", lambda x: pool.evict(x, 0, T), "ptr", p
        yield "evict size", lambda x: pool.evict(p, x, T), "size_t", 0
        yield "evict tier", lambda x: pool.evict(p, 0, x), "int", T
        yield "advise ptr", lambda x: pool.advise(x, 0, umpool.ADVISE_COLD), \
            "ptr", p
        yield "advise size", lambda x: pool.advise(p, x, umpool.ADVISE_COLD), \
            "size_t", 0
        yield "advise advice", lambda x: pool.advise(p, 0, x), "int", \
            umpool.ADVISE_COLD
        yield "stream device", pool.stream, "int", 0
        yield "stream_destroy stream", pool.stream_destroy, "ptr", s
        yield "synchronize stream", pool.synchronize, "ptr", s
        yield "array ptr", lambda x: pool.array(x, 16), "ptr", p
        yield "array shape", lambda x: pool.array(p, (x,)), "size_t", 16
        yield "strerror err", umpool.strerror, "int", EINVAL
        yield "Comm devices", lambda x: umpool.Comm(pool, [0, x]).close(), \
            "int", 1
        yield "shrink exclude", lambda x: comm.shrink([x]).close(), "int", 3
        for name in ("allreduce", "reduce_scatter", "reduce", "broadcast",
                     "allgather", "alltoall", "gather", "scatter"):
            fn = getattr(comm, name)
            yield name + " count", lambda x, fn=fn: fn(send, recv, x), \
                "size_t", 16
            yield name + " send", lambda x, fn=fn: fn(
                send[:2] + [x] + send[3:], recv, 16), "ptr", send[2]
            yield name + " recv", lambda x, fn=fn: fn(
                send, [x] + recv[1:], 16), "ptr", recv[0]
            if name in ("reduce", "broadcast", "gather", "scatter"):
                yield name + " root", lambda x, fn=fn: fn(
                    send, recv, 16, root=x), "int", 1

    @staticmethod
    def bad_values(ctype, k):
        """(value, errno): k wrapped both ways, and the type's edges."""
        bad = [(k + U64, EOVERFLOW)]
        if ctype in ("int", "unsigned"):
            bad.append((k + U32, EOVERFLOW))
        if ctype == "int":
            return bad + [(INT_MAX + 1, EOVERFLOW), (INT_MIN - 1, EOVERFLOW),
                          (k - U32, EOVERFLOW), (k - U64, EOVERFLOW)]
        return bad + [(-1, EINVAL), (k - U64, EINVAL)]

    def test_every_method(self):
        """Every integer argument of every public call, past its C type at
        both ends; a fresh pool for each (one that a wrapped call changed
        must not fail the cases after it)."""
        n = 0
        for i, (name, _, ctype, k) in enumerate(list(self.cases())):
            for j in range(len(self.bad_values(ctype, k))):
                self.tearDown()
                self.setUp()
                _, fn, _, k = list(self.cases())[i]  # this pool's pointers
                value, err = self.bad_values(ctype, k)[j]
                with self.subTest(name, value=value):
                    self.refused(fn, value, err)
                n += 1
        self.assertGreater(n, 250)


# --- the PyTorch and CuPy entry points, with their callers' exact types -----

lib = umpool.lib
torch_alloc = lib.umpool_torch_alloc
torch_alloc.restype = ctypes.c_void_p
torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
torch_free = lib.umpool_torch_free
torch_free.restype = None
torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_void_p]
torch_record = lib.umpool_torch_record_stream
torch_record.restype = None
torch_record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
torch_base = lib.umpool_torch_base_alloc
torch_base.restype = ctypes.c_void_p
torch_base.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
torch_fraction = lib.umpool_torch_memory_fraction
torch_fraction.restype = None
torch_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
torch_reset = lib.umpool_torch_reset
torch_reset.restype = None
torch_reset.argtypes = []
torch_init = lib.umpool_torch_init
torch_init.restype = None
torch_init.argtypes = [ctypes.c_int]
cupy_malloc = lib.umpool_cupy_malloc
cupy_malloc.restype = ctypes.c_void_p
cupy_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
cupy_free = lib.umpool_cupy_free
cupy_free.restype = None
cupy_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
lib.ump_launch_host_func.restype = ctypes.c_int
lib.ump_launch_host_func.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                     HOSTFN, ctypes.c_void_p]


class Gate:
    """Holds a stream: a host function on it waits until opened."""

    def __init__(self, pool, stream):
        self.event = threading.Event()
        self.fn = HOSTFN(lambda arg: self.event.wait(10))
        self.pool, self.stream = pool, stream
        self.assertion = lib.ump_launch_host_func(pool.handle, stream,
                                                  self.fn, None)

    def open(self):
        self.event.set()
        self.pool.synchronize(self.stream)


class TorchEntryTest(unittest.TestCase):
    def setUp(self):
        self.pool = umpool.process_pool()
        self.live0 = 0
        self.live0 = self.live()

    def live(self):
        """Live blocks of this test, once this thread's kept blocks (freed,
        held for their stream's next allocation) went back (empty_cache)."""
        torch_reset()
        self.pool.synchronize(None)
        return self.pool.stats()["live_count"] - self.live0

    def test_alloc_free(self):
        torch_init(2)
        p = torch_alloc(1000, 1, None)
        self.assertTrue(p)
        self.assertEqual(self.pool.ptr_info(p)["device"], 1)
        size = ctypes.c_size_t()
        self.assertEqual(torch_base(p + 100, ctypes.byref(size)), p)
        self.assertEqual(size.value, 1000)
        self.assertEqual(self.live(), 1)
        torch_free(p, 1000, 1, None)
        # The same size on the same stream: the block freed there, at once.
        self.assertEqual(torch_alloc(1000, 1, None), p)
        torch_free(p, 1000, 1, None)
        self.assertEqual(self.live(), 0)
        z = torch_alloc(0, 0, None)  # zero bytes: a pointer still
        self.assertTrue(z)
        torch_free(z, 0, 0, None)
        self.assertIsNone(torch_alloc(1 << 40, 0, None))  # out of memory

    def test_free_is_stream_ordered(self):
        s, other = self.pool.stream(0), self.pool.stream(0)
        gate = Gate(self.pool, s)
        self.assertEqual(gate.assertion, 0)
        p = torch_alloc(4096, 0, s)
        torch_free(p, 4096, 0, s)  # queued behind the gate
        # Another stream does not get it while s is held; s itself does
        # (its later work runs after its earlier work).
        q = torch_alloc(4096, 0, other)
        self.assertNotEqual(q, p)
        self.assertEqual(torch_alloc(4096, 0, s), p)
        torch_free(p, 4096, 0, s)
        # empty_cache waits for s's work, as PyTorch's own does (it
        # synchronizes outstanding events first): it returns once the gate
        # opens, and p is the pool's again, not live.
        opener = threading.Timer(0.3, gate.event.set)
        t0 = time.monotonic()
        opener.start()
        torch_reset()
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        opener.join()
        with self.assertRaises(umpool.Error):
            self.pool.ptr_info(p)
        gate.open()
        torch_free(q, 4096, 0, other)
        self.assertEqual(self.live(), 0)
        for st in (s, other):
            self.pool.stream_destroy(st)

    def test_reset_takes_every_threads_blocks(self):
        """empty_cache gives back the blocks other threads keep (PyTorch
        frees on its autograd threads), while those threads live on."""
        kept, done = threading.Event(), threading.Event()
        got = []

        def worker():
            p = torch_alloc(16 << 20, 0, None)
            torch_free(p, 16 << 20, 0, None)  # kept by this thread
            kept.set()
            done.wait(10)
            q = torch_alloc(16 << 20, 0, None)  # its list, emptied, works
            got.append(q)
            torch_free(q, 16 << 20, 0, None)

        t = threading.Thread(target=worker)
        t.start()
        self.assertTrue(kept.wait(10))
        st0 = self.pool.stats(0)
        torch_reset()
        st1 = self.pool.stats(0)
        done.set()
        t.join()
        self.assertEqual(st0["live_count"] - st1["live_count"], 1)
        for key in ("reserved_bytes", "mapped_bytes"):
            self.assertGreaterEqual(st0[key] - st1[key], 16 << 20, key)
        self.assertTrue(got and got[0])
        # join() returns before the thread's C destructors run (CPython
        # releases the join lock first): its kept q goes back in them, so
        # wait until the kernel has the thread no more.
        task = "/proc/self/task/%d" % t.native_id
        deadline = time.monotonic() + 10
        while os.path.exists(task) and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertFalse(os.path.exists(task))
        self.assertEqual(self.live(), 0)  # the thread's exit gave q back

    def test_record_stream(self):
        s1, s2 = self.pool.stream(0), self.pool.stream(0)
        gate = Gate(self.pool, s2)
        p = torch_alloc(8192, 0, s1)
        torch_record(p, s2)
        torch_free(p, 8192, 0, s1)  # waits for s1 and for s2 (held)
        self.pool.synchronize(s1)
        q = torch_alloc(8192, 0, s1)
        self.assertNotEqual(q, p)  # s2 still holds it
        gate.open()
        r = torch_alloc(8192, 0, s1)  # the wait is over: p is back
        self.assertEqual(r, p)
        torch_free(q, 8192, 0, s1)
        torch_free(r, 8192, 0, s1)
        self.pool.synchronize(s1)
        for s in (s1, s2):
            self.pool.stream_destroy(s)
        self.assertEqual(self.live(), 0)

    def test_record_many_streams(self):
        """More recorded streams than a block first has room for: the free
        still waits for every one (the last one held here)."""
        streams = [self.pool.stream(0) for _ in range(12)]
        gate = Gate(self.pool, streams[-1])
        p = torch_alloc(8192, 0, streams[0])
        for st in streams[1:]:
            torch_record(p, st)
        torch_free(p, 8192, 0, streams[0])
        for st in streams[:-1]:
            self.pool.synchronize(st)
        q = torch_alloc(8192, 0, None)
        self.assertNotEqual(q, p)  # the held stream keeps it
        gate.open()
        r = torch_alloc(8192, 0, None)
        self.assertEqual(r, p)
        for b in (q, r):
            torch_free(b, 8192, 0, None)
        self.assertEqual(self.live(), 0)
        for st in streams:
            self.pool.stream_destroy(st)

    def test_fraction_edges(self):
        torch_fraction(0.0, 0)  # nothing more may be allocated
        self.assertIsNone(torch_alloc(1 << 20, 0, None))
        torch_fraction(float("nan"), 0)  # refused: the limit stays
        self.assertIsNone(torch_alloc(1 << 20, 0, None))
        torch_fraction(1.0, 0)
        p = torch_alloc(1 << 20, 0, None)
        self.assertTrue(p)
        torch_fraction(0.5, 0)  # set while a block is out ...
        torch_free(p, 1 << 20, 0, None)  # ... and freed after
        q = torch_alloc(16 << 20, 0, None)  # 16 of 32 MiB: fits
        self.assertTrue(q)
        torch_free(q, 16 << 20, 0, None)
        torch_fraction(1.0, 0)
        self.assertEqual(self.live(), 0)

    def test_fork_child_gets_its_own_pool(self):
        import os
        p = torch_alloc(4096, 0, None)
        pid = os.fork()
        if pid == 0:  # the child: a pool of its own, the plug-in working
            code = 1
            try:
                c = torch_alloc(4096, 0, None)
                child = umpool.process_pool()
                # Its own: c is its only allocation (the parent's pool
                # holds p too; the handle may be the same address).
                code = 0 if (c and child.ptr_info(c)["size"] == 4096 and
                             child.stats()["live_count"] == 1) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.WEXITSTATUS(status), 0)
        torch_free(p, 4096, 0, None)
        self.assertEqual(self.live(), 0)

    def test_fraction_and_reset(self):
        torch_fraction(0.25, 0)  # of 64 MiB
        p = torch_alloc(10 << 20, 0, None)
        self.assertTrue(p)
        self.assertIsNone(torch_alloc(10 << 20, 0, None))  # past 16 MiB
        torch_free(p, 10 << 20, 0, None)
        q = torch_alloc(10 << 20, 0, None)  # room again
        self.assertTrue(q)
        torch_free(q, 10 << 20, 0, None)
        torch_fraction(1.0, 0)
        torch_reset()  # empty_cache: the pool gives its cached memory back
        self.assertEqual(self.pool.stats(0)["reserved_bytes"], 0)

    def test_bad_input(self):
        p = torch_alloc(256, 0, None)
        torch_free(p, 256, 0, None)
        torch_free(p, 256, 0, None)  # twice: logged, nothing changes
        q = torch_alloc(256, 0, None)
        self.assertEqual(q, p)
        o = torch_alloc(256, 0, None)
        self.assertNotEqual(o, p)  # not handed out twice
        torch_free(o, 256, 0, None)
        torch_free(q, 256, 0, None)
        torch_reset()
        torch_free(q, 256, 0, None)  # twice, after it went back: refused
        local = ctypes.create_string_buffer(64)
        torch_free(ctypes.addressof(local), 64, 0, None)  # not the pool's
        torch_record(ctypes.addressof(local), None)
        self.assertIsNone(torch_alloc(256, 99, None))  # no such device
        size = ctypes.c_size_t(5)
        self.assertIsNone(torch_base(ctypes.addressof(local),
                                     ctypes.byref(size)))
        self.assertEqual(size.value, 0)
        self.assertEqual(self.live(), 0)

    def test_cupy_entry_points(self):
        p = cupy_malloc(None, 5000, 1)
        self.assertEqual(self.pool.ptr_info(p)["device"], 1)
        cupy_free(None, p, 1)
        own = umpool.Pool(SIM4)
        q = cupy_malloc(own.handle, 100, 3)  # param: a pool of one's own
        self.assertEqual(own.ptr_info(q)["device"], 3)
        cupy_free(own.handle, q, 3)
        own.close()
        self.assertEqual(self.live(), 0)

    def test_process_pool_stays(self):
        rc = umpool.lib.ump_pool_destroy(self.pool.handle)
        self.assertEqual(rc, -errno.EBUSY)  # lives until the process ends
        self.assertEqual(umpool.process_pool("ignored").handle,
                         self.pool.handle)


class FakeTorch:
    """A stand-in torch (torch, torch.cuda, torch.cuda.memory in
    sys.modules) with what umpool.torch calls, acting as PyTorch 2.x does
    (torch/cuda/memory.py, torch/csrc/cuda/CUDAPluggableAllocator.cpp):
    CUDAPluggableAllocator looks the two functions up in the library; its
    allocator() object has set_reset_fn where reset_fn is true; and
    torch.cuda.empty_cache() calls the current allocator's emptyCache,
    which calls the reset function if one is set and else does nothing.
    alloc and free call the plug-in's entry points through their
    addresses, as PyTorch's tensors do."""
    ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_void_p)
    FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_int, ctypes.c_void_p)
    RESET = ctypes.CFUNCTYPE(None)

    def __init__(self, reset_fn=True):
        fake = self
        self.current = None  # the allocator object PyTorch uses
        self.empty_cache_calls = 0

        class Raw:  # torch._C._CUDAPluggableAllocator
            def __init__(self, alloc_fn, free_fn):
                self.alloc_fn, self.free_fn = alloc_fn, free_fn
                self.reset_fn = None

            def emptyCache(self):
                if self.reset_fn:
                    fake.RESET(self.reset_fn)()

        if reset_fn:
            def set_reset_fn(raw, ptr):
                raw.reset_fn = ptr
            Raw.set_reset_fn = set_reset_fn

        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_name, free_name):
                so = ctypes.CDLL(path)
                addr = [ctypes.cast(getattr(so, n), ctypes.c_void_p).value
                        for n in (alloc_name, free_name)]
                self._allocator = Raw(*addr)

            def allocator(self):
                return self._allocator

        def change_current_allocator(a):
            fake.current = a.allocator()

        def empty_cache():
            fake.empty_cache_calls += 1
            if fake.current:
                fake.current.emptyCache()

        self.torch = types.ModuleType("torch")
        cuda = self.torch.cuda = types.ModuleType("torch.cuda")
        memory = cuda.memory = types.ModuleType("torch.cuda.memory")
        memory.CUDAPluggableAllocator = CUDAPluggableAllocator
        memory.change_current_allocator = change_current_allocator
        memory.empty_cache = cuda.empty_cache = empty_cache
        cuda.is_available = lambda: True
        cuda.is_initialized = lambda: False
        cuda.memory_reserved = lambda: 0

    def alloc(self, size, device=0, stream=None):
        return self.ALLOC(self.current.alloc_fn)(size, device, stream)

    def free(self, ptr, size, device=0, stream=None):
        self.FREE(self.current.free_fn)(ptr, size, device, stream)

    def __enter__(self):
        names = ("torch", "torch.cuda", "torch.cuda.memory")
        self.saved = {n: sys.modules.get(n) for n in names}
        sys.modules.update(zip(names, (self.torch, self.torch.cuda,
                                       self.torch.cuda.memory)))
        return self

    def __exit__(self, *exc):
        for n, m in self.saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


class TorchUseTest(unittest.TestCase):
    BIG = 16 << 20

    def gave_back(self, fake, call):
        """Frees a BIG tensor through the plug-in (kept for its stream),
        then call(): the bytes reserved and mapped on device 0 that went
        back, and how many allocations stopped being live."""
        pool = umpool.process_pool()
        fake.free(fake.alloc(self.BIG), self.BIG)
        st0 = pool.stats(0)
        call()
        st1 = pool.stats(0)
        return (st0["reserved_bytes"] - st1["reserved_bytes"],
                st0["mapped_bytes"] - st1["mapped_bytes"],
                st0["live_count"] - st1["live_count"])

    def test_empty_cache_through_reset_fn(self):
        """PyTorch's torch.cuda.empty_cache() reaches the pool: use() sets
        the allocator's reset function to umpool_torch_reset."""
        import umpool.torch as ut
        with FakeTorch() as fake:
            own = fake.torch.cuda.empty_cache
            ut.use()
            self.assertEqual(ut.EMPTY_CACHE, "reset_fn")
            self.assertEqual(fake.current.reset_fn, ctypes.cast(
                lib.umpool_torch_reset, ctypes.c_void_p).value)
            self.assertIs(fake.torch.cuda.empty_cache, own)  # not wrapped
            reserved, mapped, live = self.gave_back(
                fake, fake.torch.cuda.empty_cache)
            self.assertEqual(fake.empty_cache_calls, 1)
            self.assertGreaterEqual(reserved, self.BIG)
            self.assertGreaterEqual(mapped, self.BIG)
            self.assertEqual(live, 1)
            # And umpool.torch.empty_cache() by itself.
            reserved, mapped, live = self.gave_back(fake, ut.empty_cache)
            self.assertGreaterEqual(reserved, self.BIG)
            self.assertEqual(live, 1)

    def test_empty_cache_wrapped_without_reset_fn(self):
        """A PyTorch whose allocator object has no set_reset_fn: its
        empty_cache gives nothing back (the defect), so use() wraps it."""
        import umpool.torch as ut
        with FakeTorch(reset_fn=False) as fake:
            own = fake.torch.cuda.empty_cache
            fake.current = ut.allocator().allocator()  # not use()'s yet
            reserved, mapped, live = self.gave_back(
                fake, fake.torch.cuda.empty_cache)
            self.assertEqual((reserved, live), (0, 0))  # kept: nothing back
            ut.empty_cache()
            ut.use()
            self.assertEqual(ut.EMPTY_CACHE, "wrapped")
            for mod in (fake.torch.cuda, fake.torch.cuda.memory):
                self.assertIs(mod.empty_cache.__wrapped__, own)
            calls = fake.empty_cache_calls
            reserved, mapped, live = self.gave_back(
                fake, fake.torch.cuda.empty_cache)
            self.assertEqual(fake.empty_cache_calls, calls + 1)  # PyTorch's
            self.assertGreaterEqual(reserved, self.BIG)
            self.assertGreaterEqual(mapped, self.BIG)
            self.assertEqual(live, 1)
            wrapped = fake.torch.cuda.empty_cache
            ut.use()  # again: not wrapped twice
            self.assertIs(fake.torch.cuda.empty_cache, wrapped)

    def test_use_fails_clearly_without_cuda_pytorch(self):
        """No PyTorch, or Debian's CPU-only python3-torch (no pluggable
        allocator): umpool.Error, not a crash."""
        import umpool.torch as ut
        try:
            import torch
            if torch.cuda.is_available():
                self.skipTest("a CUDA PyTorch: scripts/gpu-check's")
        except ImportError:
            pass
        with self.assertRaises(umpool.Error) as cm:
            ut.use()
        self.assertRegex(str(cm.exception), "not installed|pluggable")


if __name__ == "__main__":
    unittest.main()
