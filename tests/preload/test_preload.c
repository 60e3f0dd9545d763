/*
 * A CUDA program as libumpool-preload sees it, run under LD_PRELOAD against
 * the fake driver named libcuda.so.1 (tests/preload/run.sh). Built twice:
 * linked against libcuda by name (calls bound at load time), and with
 * -DVIA_DLOPEN, which takes every entry point the way cudart does:
 * dlopen("libcuda.so.1"), dlsym of cuGetProcAddress_v2, then its first
 * queries ("", 0), ("cuInit", 2000), ("cuGetProcAddress", 11030 and 12000),
 * then everything through the cuGetProcAddress it was given.
 *
 *   test_preload MODE   MODE: basic (default), host (pinned host memory),
 *   overflow (2.5x the GPU, with overflow:host: its peer, then the host), race (8 threads on the
 *   first call), omp (the first calls from an OpenMP team), none (no CUDA
 *   call: no pool made), fork (a child's calls)
 *
 * Plain C, not cmocka (the preload must see a plain program): every failed
 * check prints FAIL and the exit status is 1.
 */
#define _GNU_SOURCE
#include "config.h"

#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../plaintest.h"
#include "umpool.h"



/* The driver calls the test makes, by name or through cuGetProcAddress. */
static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*ctx_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_sync)(CUstream);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*host_alloc)(void **, size_t);
    CUresult (*host_free)(void *);
    CUresult (*host_alloc_flags)(void **, size_t, unsigned);
    CUresult (*host_devptr)(CUdeviceptr *, void *, unsigned);
    CUresult (*host_flags)(unsigned *, void *);
    CUresult (*ipc_get)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*ipc_open)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*ipc_close)(CUdeviceptr);
} cu;

#ifdef VIA_DLOPEN
typedef CUresult getproc_fn(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

static void *get(getproc_fn *gp, const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    /* cudart passes no status pointer in its first queries; later ones
     * pass one. */
    CUresult res = gp(name, &fn, version, 0, version < 12000 ? NULL : &st);
    CHECK(res == CUDA_SUCCESS && fn, "cuGetProcAddress(%s, %d): %d", name,
          version, (int)res);
    return fn;
}

static void bind(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "FAIL: dlopen(libcuda.so.1): %s\n", dlerror());
        exit(1);
    }
    getproc_fn *gp;
    void *sym = dlsym(h, "cuGetProcAddress_v2");
    memcpy(&gp, &sym, sizeof(gp));
    CHECK(gp != NULL, "no cuGetProcAddress_v2 on the handle");
    /* The handle is the preload's: its cuGetProcAddress is umpool's. */
    CHECK(sym == dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"),
          "dlsym(libcuda, cuGetProcAddress_v2) is not the preload's");
    /* A symbol umpool leaves alone comes from the driver. */
    CHECK(dlsym(h, "cuDriverGetVersion") != NULL,
          "cuDriverGetVersion is not found on the handle");
    void *fn = (void *)1;
    CUresult res = gp("", &fn, 0, 0, NULL);
    CHECK(res == CUDA_SUCCESS && !fn, "cuGetProcAddress(\"\", 0): %d %p",
          (int)res, fn);
    memcpy(&cu.init, (void *[]){get(gp, "cuInit", 2000)}, sizeof(cu.init));
    void *gp11 = get(gp, "cuGetProcAddress", 11030);
    void *gp12 = get(gp, "cuGetProcAddress", 12000);
    CHECK(gp11 == dlsym(RTLD_DEFAULT, "cuGetProcAddress"),
          "cuGetProcAddress at 11030 is not the preload's");
    CHECK(gp12 == (void *)gp, "cuGetProcAddress at 12000 is not the "
          "preload's");
    memcpy(&gp, &gp12, sizeof(gp));
#define GET(f, n) sym = get(gp, n, 13000), memcpy(&cu.f, &sym, sizeof(cu.f))
    GET(device_get, "cuDeviceGet");
    GET(ctx_retain, "cuDevicePrimaryCtxRetain");
    GET(ctx_set, "cuCtxSetCurrent");
    GET(stream_create, "cuStreamCreate");
    GET(stream_sync, "cuStreamSynchronize");
    GET(stream_destroy, "cuStreamDestroy");
    GET(alloc, "cuMemAlloc");
    GET(free, "cuMemFree");
    GET(alloc_async, "cuMemAllocAsync");
    GET(free_async, "cuMemFreeAsync");
    GET(info, "cuMemGetInfo");
    GET(range, "cuMemGetAddressRange");
    GET(attr, "cuPointerGetAttribute");
    GET(host_alloc, "cuMemAllocHost");
    GET(host_free, "cuMemFreeHost");
    GET(host_alloc_flags, "cuMemHostAlloc");
    GET(host_devptr, "cuMemHostGetDevicePointer");
    GET(host_flags, "cuMemHostGetFlags");
    GET(ipc_get, "cuIpcGetMemHandle");
    GET(ipc_open, "cuIpcOpenMemHandle");
    GET(ipc_close, "cuIpcCloseMemHandle");
    /* The same through every version cudart asks with. */
    CHECK(get(gp, "cuMemAlloc", 12000) == get(gp, "cuMemAlloc", 13000),
          "cuMemAlloc differs between 12000 and 13000");
}
#else
static void bind(void)
{
    cu.init = cuInit;
    cu.device_get = cuDeviceGet;
    cu.ctx_retain = cuDevicePrimaryCtxRetain;
    cu.ctx_set = cuCtxSetCurrent;
    cu.stream_create = cuStreamCreate;
    cu.stream_sync = cuStreamSynchronize;
    cu.stream_destroy = cuStreamDestroy;
    cu.alloc = cuMemAlloc;
    cu.free = cuMemFree;
    cu.alloc_async = cuMemAllocAsync;
    cu.free_async = cuMemFreeAsync;
    cu.info = cuMemGetInfo;
    cu.range = cuMemGetAddressRange;
    cu.attr = cuPointerGetAttribute;
    cu.host_alloc = cuMemAllocHost;
    cu.host_free = cuMemFreeHost;
    cu.host_alloc_flags = cuMemHostAlloc;
    cu.host_devptr = cuMemHostGetDevicePointer;
    cu.host_flags = cuMemHostGetFlags;
    cu.ipc_get = cuIpcGetMemHandle;
    cu.ipc_open = cuIpcOpenMemHandle;
    cu.ipc_close = cuIpcCloseMemHandle;
}
#endif

/* The preload's pool, through the symbol it exports for this. */
static ump_pool_t *the_pool(void)
{
    ump_pool_t *(*fn)(void);
    void *sym = dlsym(RTLD_DEFAULT, "umpool_preload_pool");
    if (!sym)
        return NULL;
    memcpy(&fn, &sym, sizeof(fn));
    return fn();
}

static void context(int dev)
{
    CUdevice d;
    CUcontext c;
    CHECK(cu.device_get(&d, dev) == CUDA_SUCCESS, "cuDeviceGet(%d)", dev);
    CHECK(cu.ctx_retain(&c, d) == CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
    CHECK(cu.ctx_set(c) == CUDA_SUCCESS, "cuCtxSetCurrent");
}

/* Has this process a published pool segment (/dev/shm/umpool-UID-NS-PID-
 * ID, lib/publish)? */
static bool published(void)
{
    DIR *d = opendir("/dev/shm");
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        unsigned uid, ns;
        int pid;
        unsigned long long id;
        found = sscanf(e->d_name, "umpool-%u-%u-%d-%llu", &uid, &ns, &pid,
                       &id) == 4 && pid == (int)getpid();
    }
    if (d)
        closedir(d);
    return found;
}

static bool in_pool(ump_pool_t *pool, CUdeviceptr p)
{
    ump_ptr_info_t in;
    return pool && ump_ptr_lookup(pool, (void *)(uintptr_t)p, &in) == 0;
}

static void basic(void)
{
    context(0);
    CUdeviceptr p = 0;
    CUresult res = cu.alloc(&p, 3 << 20);
    ump_pool_t *pool = the_pool();
    CHECK(res == CUDA_SUCCESS && pool && in_pool(pool, p),
          "cuMemAlloc: %d, pool %p, from it: %d", (int)res, (void *)pool,
          in_pool(pool, p));
    if (!pool)
        return;
    /* Published like any pool (the same test says "none" publishes
     * nothing). */
    CHECK(published(), "the preload's pool is not published");
    ump_stats_t st;
    ump_stats(pool, UMP_DEVICE_ALL, &st);
    CHECK(st.live_bytes >= (3u << 20), "live bytes %zu", st.live_bytes);
    /* Data: fake device memory is host memory. */
    memset((void *)(uintptr_t)p, 0x5a, 3 << 20);
    CHECK(((unsigned char *)(uintptr_t)p)[(3 << 20) - 1] == 0x5a, "data");
    /* Range of an interior pointer: the allocation's. */
    CUdeviceptr base = 0;
    size_t size = 0;
    res = cu.range(&base, &size, p + 1000);
    CHECK(res == CUDA_SUCCESS && base == p && size == (3u << 20),
          "cuMemGetAddressRange: %d, base %+lld, size %zu", (int)res,
          (long long)(base - p), size);
    res = cu.attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 5);
    CHECK(res == CUDA_SUCCESS && size == (3u << 20),
          "cuPointerGetAttribute(RANGE_SIZE): %d, %zu", (int)res, size);
    /* Memory info: never above the device, free shrinks by what is held. */
    size_t f0, t0, f1, t1;
    CHECK(cu.info(&f0, &t0) == CUDA_SUCCESS && f0 <= t0, "cuMemGetInfo");
    CUdeviceptr q = 0;
    CHECK(cu.alloc(&q, 8 << 20) == CUDA_SUCCESS, "cuMemAlloc 8 MiB");
    CHECK(cu.info(&f1, &t1) == CUDA_SUCCESS && t1 == t0 &&
              f1 + (8u << 20) <= f0,
          "cuMemGetInfo after 8 MiB: free %zu -> %zu (total %zu -> %zu)",
          f0, f1, t0, t1);
    /* Out of memory is the driver's error, and loses nothing. */
    CUdeviceptr big = 0;
    res = cu.alloc(&big, (size_t)1 << 40);
    CHECK(res == CUDA_ERROR_OUT_OF_MEMORY, "1 TiB: %d", (int)res);
    /* Frees, and a pointer inside an allocation is not one. */
    CHECK(cu.free(q + 256) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFree of an interior pointer accepted");
    CHECK(cu.free(q) == CUDA_SUCCESS && !in_pool(pool, q), "cuMemFree");
    /* Stream-ordered free: back to the pool once the stream is there. */
    CUstream s;
    CHECK(cu.stream_create(&s, 0) == CUDA_SUCCESS, "cuStreamCreate");
    CUdeviceptr a = 0;
    CHECK(cu.alloc_async(&a, 1 << 20, s) == CUDA_SUCCESS && in_pool(pool, a),
          "cuMemAllocAsync");
    CHECK(cu.free_async(a, s) == CUDA_SUCCESS, "cuMemFreeAsync");
    cu.stream_sync(s);
    CUdeviceptr b = 0;
    CHECK(cu.alloc(&b, 4096) == CUDA_SUCCESS, "cuMemAlloc after");
    CHECK(!in_pool(pool, a) || a == b, "the async free did not reach the "
          "pool after the stream was done");
    cu.free(b);
    cu.stream_destroy(s);
    /* A pointer the pool does not own goes to the driver. */
    CHECK(cu.free((CUdeviceptr)0x1000) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFree of a foreign pointer");
    CHECK(cu.free(p) == CUDA_SUCCESS, "cuMemFree");
    ump_stats(pool, UMP_DEVICE_ALL, &st);
    CHECK(st.live_bytes == 0, "live bytes at the end: %zu", st.live_bytes);
    /* A pointer freed on a stream is freed: a second free of it (on a
     * stream or not) is the caller's error and reaches nothing. */
    CUstream s2;
    CHECK(cu.stream_create(&s2, 0) == CUDA_SUCCESS, "cuStreamCreate");
    CUdeviceptr z = 0;
    CHECK(cu.alloc(&z, 4096) == CUDA_SUCCESS, "cuMemAlloc");
    CHECK(cu.free_async(z, s2) == CUDA_SUCCESS, "cuMemFreeAsync");
    CHECK(cu.free(z) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFree of a pointer pending on a stream accepted");
    CHECK(cu.free_async(z, s2) == CUDA_ERROR_INVALID_VALUE,
          "a second cuMemFreeAsync of a pending pointer accepted");
    cu.stream_sync(s2);
    cu.stream_destroy(s2);
    /* A freed pointer, or one past an allocation inside its chunk, is no
     * pointer: not the chunk's range. */
    CUdeviceptr w = 0;
    CHECK(cu.alloc(&w, 4096) == CUDA_SUCCESS, "cuMemAlloc");
    res = cu.range(&base, &size, w + 8192);
    CHECK(res != CUDA_SUCCESS, "range past a 4 KiB allocation: %d, size %zu",
          (int)res, size);
    cu.free(w);
    res = cu.range(&base, &size, w);
    CHECK(res != CUDA_SUCCESS, "range of a freed pointer: %d", (int)res);
    res = cu.attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, w);
    CHECK(res != CUDA_SUCCESS, "attribute of a freed pointer: %d", (int)res);
    /* The current device only: no spilling to device 1 when device 0 is
     * full (the driver's out of memory). */
    size_t f2, t2;
    cu.info(&f2, &t2);
    CUdeviceptr full = 0, more = 0;
    res = cu.alloc(&full, f2 - (4u << 20));
    CHECK(res == CUDA_SUCCESS, "cuMemAlloc of most of device 0: %d", (int)res);
    res = cu.alloc(&more, 16u << 20);
    if (res == CUDA_SUCCESS) {
        for (size_t off = 0; off < (16u << 20);) {
            ump_ptr_info_t pi;
            if (ump_ptr_lookup(pool, (char *)(uintptr_t)more + off, &pi))
                break;
            CHECK(pi.device == 0, "a device 0 allocation has memory on "
                  "device %d", pi.device);
            off = (size_t)((char *)pi.chunk_base + pi.chunk_size -
                           (char *)(uintptr_t)more);
        }
        cu.free(more);
    } else {
        CHECK(res == CUDA_ERROR_OUT_OF_MEMORY, "device 0 full: %d", (int)res);
    }
    cu.free(full);
    /* NVML, seen from inside the process, agrees with cuMemGetInfo: the
     * pool's figures (a program that sizes its work by NVML sees the
     * room the driver's call gives). */
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(nv != NULL, "dlopen(libnvidia-ml.so.1): %s", dlerror());
    if (nv) {
        int (*init)(void), (*by_index)(unsigned, void **);
        int (*mem)(void *, unsigned long long *);
        void *sym = dlsym(nv, "nvmlInit_v2");
        memcpy(&init, &sym, sizeof(init));
        sym = dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
        memcpy(&by_index, &sym, sizeof(by_index));
        sym = dlsym(nv, "nvmlDeviceGetMemoryInfo");
        memcpy(&mem, &sym, sizeof(mem));
        CHECK(sym == dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo"),
              "NVML's memory call on the handle is not the preload's");
        void *h0 = NULL;
        unsigned long long m[3] = {0}; /* total, free, used */
        size_t f, t;
        CHECK(init && by_index && mem && !init() && !by_index(0, &h0) &&
                  !mem(h0, m) && !cu.info(&f, &t) && m[0] == t &&
                  m[1] == f && m[2] == t - f,
              "NVML (total %llu free %llu) and cuMemGetInfo (%zu, %zu) "
              "disagree", m[0], m[1], t, f);
    }
    /* The second device: its own context, the pool's second device. */
    context(1);
    CHECK(cu.alloc(&q, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc on device 1");
    ump_ptr_info_t in;
    CHECK(ump_ptr_lookup(pool, (void *)(uintptr_t)q, &in) == 0 &&
              in.device == 1,
          "device 1's allocation is on device %d", in.device);
    cu.free(q);
    /* A free on another device's stream, device 1 current... then device
     * 0's: the event goes in the stream's context. */
    CUstream s1;
    CHECK(cu.stream_create(&s1, 0) == CUDA_SUCCESS, "stream on device 1");
    CUdeviceptr d1 = 0;
    CHECK(cu.alloc_async(&d1, 1 << 16, s1) == CUDA_SUCCESS, "alloc on 1");
    context(0);
    res = cu.free_async(d1, s1);
    CHECK(res == CUDA_SUCCESS, "cuMemFreeAsync on another context's stream: "
          "%d", (int)res);
    cu.stream_sync(s1);
#ifdef VIA_DLOPEN
    /* RTLD_NOLOAD of the loaded driver: the stand-in's handle too. */
    void *nl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(nl && dlsym(nl, "cuMemAlloc_v2") ==
                    dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"),
          "dlopen(RTLD_NOLOAD) bypasses the preload");
#endif
}

/* A counter of the fake driver (fake_cuda_count, fake_cuda_classic),
 * found through the libcuda handle a program gets. */
static long fake_count(const char *fn, const char *what)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *sym = h ? dlsym(h, fn) : NULL;
    long (*f)(const char *);
    memcpy(&f, &sym, sizeof(f));
    long n = f ? f(what) : -1;
    if (h)
        dlclose(h);
    return n;
}

static bool pool_host_mem(ump_pool_t *pool, const void *p)
{
    ump_ptr_info_t in;
    return pool && ump_ptr_lookup(pool, p, &in) == 0 && in.device == -1 &&
           in.tier == UMP_TIER_HOST;
}

/* Pinned host memory: cuMemAllocHost and cuMemHostAlloc come from the
 * pool's cached pinned host memory (the driver's page-locked host chunks),
 * reused; each free takes its own kind only. */
static void host(void)
{
    context(0);
    long classic = fake_count("fake_cuda_classic", "host");
    void *h = NULL;
    CHECK(cu.host_alloc(&h, 4096) == CUDA_SUCCESS && h, "cuMemAllocHost");
    ump_pool_t *pool = the_pool();
    ump_ptr_info_t hi;
    CHECK(pool_host_mem(pool, h) && ump_ptr_lookup(pool, h, &hi) == 0 &&
              hi.kind == UMP_KIND_HOST,
          "cuMemAllocHost's memory is not the pool's pinned host memory");
    /* Page-locked: a pinned host chunk of the driver (cuMemCreate of host
     * memory), not the driver's own cuMemAllocHost. */
    CHECK(fake_count("fake_cuda_count", "host_allocs") >= 1,
          "no pinned host chunk was made");
    CHECK(fake_count("fake_cuda_classic", "host") == classic,
          "the driver's cuMemAllocHost served it");
    memset(h, 0x3c, 4096);
    CHECK(((unsigned char *)h)[4095] == 0x3c, "data");
    /* Page-aligned, as the driver's. */
    void *small = NULL;
    CHECK(cu.host_alloc(&small, 100) == CUDA_SUCCESS &&
              (uintptr_t)small % (uintptr_t)sysconf(_SC_PAGESIZE) == 0,
          "cuMemAllocHost(100) at %p: not page-aligned", small);
    CHECK(cu.host_free(small) == CUDA_SUCCESS, "cuMemFreeHost");
    /* Not a stream-ordered free's: the driver's error, and it stays. */
    CUstream s;
    CHECK(cu.stream_create(&s, 0) == CUDA_SUCCESS, "cuStreamCreate");
    CHECK(cu.free_async((CUdeviceptr)(uintptr_t)h, s) ==
              CUDA_ERROR_INVALID_VALUE,
          "cuMemFreeAsync of pinned host memory accepted");
    cu.stream_sync(s);
    cu.stream_destroy(s);
    CHECK(pool_host_mem(pool, h), "pinned memory lost after a refused "
          "cuMemFreeAsync");
    /* Reused: the same size comes back with nothing new pinned. */
    long chunks = fake_count("fake_cuda_count", "host_allocs");
    for (int i = 0; i < 50; i++) {
        void *again = NULL;
        CHECK(cu.host_free(h) == CUDA_SUCCESS, "cuMemFreeHost");
        CHECK(cu.host_alloc(&again, 4096) == CUDA_SUCCESS && again == h,
              "a freed pinned size was not reused (%p, then %p)", h, again);
        h = again;
    }
    CHECK(fake_count("fake_cuda_count", "host_allocs") == chunks,
          "reuse pinned more memory");
    /* cuMemHostAlloc, portable and mapped: one address for the device. */
    void *m = NULL;
    CHECK(cu.host_alloc_flags(&m, 3 << 20, CU_MEMHOSTALLOC_PORTABLE |
                                               CU_MEMHOSTALLOC_DEVICEMAP) ==
                  CUDA_SUCCESS &&
              pool_host_mem(pool, m),
          "cuMemHostAlloc(PORTABLE | DEVICEMAP) is not the pool's");
    CUdeviceptr dp = 0;
    unsigned fl = 0;
    CHECK(cu.host_devptr(&dp, (char *)m + 64, 0) == CUDA_SUCCESS &&
              dp == (CUdeviceptr)(uintptr_t)m + 64,
          "cuMemHostGetDevicePointer: %p for %p", (void *)(uintptr_t)dp, m);
    CHECK(cu.host_flags(&fl, m) == CUDA_SUCCESS &&
              (fl & CU_MEMHOSTALLOC_DEVICEMAP),
          "cuMemHostGetFlags: 0x%x", fl);
    CHECK(cu.host_devptr(&dp, m, 1) == CUDA_ERROR_INVALID_VALUE,
          "cuMemHostGetDevicePointer with flags 1 accepted");
    /* Write-combined memory is the driver's. */
    void *wc = NULL;
    CHECK(cu.host_alloc_flags(&wc, 4096, CU_MEMHOSTALLOC_WRITECOMBINED) ==
                  CUDA_SUCCESS &&
              !pool_host_mem(pool, wc) &&
              fake_count("fake_cuda_classic", "host") == classic + 1,
          "write-combined memory did not go to the driver");
    CHECK(cu.host_free(wc) == CUDA_SUCCESS, "cuMemFreeHost of the driver's");
    /* Each free its own kind; errors change nothing. */
    CUdeviceptr d = 0;
    CHECK(cu.alloc(&d, 4096) == CUDA_SUCCESS, "cuMemAlloc");
    CHECK(cu.host_free((void *)(uintptr_t)d) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFreeHost of device memory accepted");
    CHECK(cu.free((CUdeviceptr)(uintptr_t)h) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFree of pinned host memory accepted");
    CHECK(cu.host_devptr(&dp, (void *)(uintptr_t)d, 0) ==
              CUDA_ERROR_INVALID_VALUE,
          "a host device pointer for device memory");
    CHECK(cu.host_free((char *)m + 256) == CUDA_ERROR_INVALID_VALUE,
          "cuMemFreeHost of an interior pointer accepted");
    CHECK(cu.free(d) == CUDA_SUCCESS, "cuMemFree");
    CHECK(cu.host_free(h) == CUDA_SUCCESS && cu.host_free(m) == CUDA_SUCCESS,
          "cuMemFreeHost");
    CHECK(cu.host_free(h) == CUDA_ERROR_INVALID_VALUE, "a second free");
    ump_stats_t st;
    CHECK(ump_stats(pool, UMP_LOC_HOST, &st) == 0 && st.live_count == 0 &&
              st.alloc_count == 53,
          "host statistics: %llu live, %llu allocations",
          (unsigned long long)st.live_count,
          (unsigned long long)st.alloc_count);
}

/* overflow:host (run.sh sets it for this mode): a program that needs 2.5x
 * its GPU's memory runs: the current device first, then its peer (the
 * policy's spilling), then pinned host memory, data intact; those frees
 * are cuMemFree's. */
static void overflow(void)
{
    context(0);
    size_t f = 0, t = 0;
    CHECK(cu.info(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
    size_t piece = 8u << 20, n = t * 5 / 2 / piece, on_host = 0;
    CUdeviceptr p[64] = {0};
    CHECK(n <= 64, "%zu pieces", n);
    ump_pool_t *pool = NULL;
    int last = 0; /* where the pieces went so far: 0, 1, then 2 (host) */
    for (size_t i = 0; i < n && i < 64; i++) {
        CUresult res = cu.alloc(&p[i], piece);
        pool = the_pool();
        ump_ptr_info_t in;
        CHECK(res == CUDA_SUCCESS && in_pool(pool, p[i]) &&
                  ump_ptr_lookup(pool, (void *)(uintptr_t)p[i], &in) == 0,
              "piece %zu of %zu: %d", i, n, (int)res);
        if (res != CUDA_SUCCESS)
            break;
        memset((void *)(uintptr_t)p[i], (int)i + 1, piece);
        int at = in.tier == UMP_TIER_HOST ? 2 : in.device;
        CHECK(at >= last && in.kind == UMP_KIND_DEVICE,
              "piece %zu on %d after one on %d (kind %d)", i, at, last,
              in.kind);
        last = at;
        on_host += at == 2;
    }
    CHECK(last == 2 && on_host < n / 3, "%zu of %zu pieces on the host: "
          "the peer did not serve first", on_host, n);
    for (size_t i = 0; i < n && i < 64 && p[i]; i++) {
        const unsigned char *b = (const unsigned char *)(uintptr_t)p[i];
        CHECK(b[0] == i + 1 && b[piece - 1] == i + 1, "piece %zu's data", i);
        if (pool_host_mem(pool, b)) {
            CUdeviceptr dp = 0;
            unsigned fl = 0;
            CHECK(cu.host_free((void *)(uintptr_t)p[i]) ==
                      CUDA_ERROR_INVALID_VALUE,
                  "cuMemFreeHost of overflowed device memory accepted");
            CHECK(cu.host_devptr(&dp, (void *)(uintptr_t)p[i], 0) ==
                          CUDA_ERROR_INVALID_VALUE &&
                      cu.host_flags(&fl, (void *)(uintptr_t)p[i]) ==
                          CUDA_ERROR_INVALID_VALUE,
                  "overflowed device memory answered as pinned host memory");
        }
        CHECK(cu.free(p[i]) == CUDA_SUCCESS, "cuMemFree of piece %zu", i);
    }
    ump_stats_t st;
    CHECK(pool && ump_stats(pool, UMP_LOC_HOST, &st) == 0 &&
              st.live_count == 0 && st.alloc_count == on_host,
          "host statistics after the frees");
}

static void *racer(void *arg)
{
    CUdeviceptr *p = arg;
    context(0);
    if (cu.alloc(p, 1 << 16) != CUDA_SUCCESS)
        *p = 0;
    return NULL;
}

/* 8 threads' first calls at once: one pool, every pointer from it. */
static void race(void)
{
    pthread_t t[8];
    CUdeviceptr p[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, racer, &p[i]);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    ump_pool_t *pool = the_pool();
    for (int i = 0; i < 8; i++) {
        CHECK(p[i] && in_pool(pool, p[i]), "thread %d's pointer", i);
        cu.free(p[i]);
    }
}

static void omp(void)
{
#ifdef _OPENMP
    int bad = 0;
#pragma omp parallel num_threads(8) reduction(+ : bad)
    {
        CUdeviceptr p = 0;
        context(0);
        if (cu.alloc(&p, 1 << 16) != CUDA_SUCCESS || !in_pool(the_pool(), p))
            bad++;
        cu.free(p);
    }
    CHECK(bad == 0, "%d OpenMP threads failed", bad);
#else
    printf("SKIP: built without OpenMP\n");
#endif
}

static unsigned char ipc_pat(size_t i) { return (unsigned char)(i * 7 + 3); }

/* IPC handles under the preload: cuIpcGetMemHandle of pool memory (even
 * inside an allocation) gives umpool's handle of the allocation, with no
 * driver call (the driver has none for virtual-memory allocations);
 * another process, this program again as "ipc-peer", opens it with
 * cuIpcOpenMemHandle, reads and writes the maker's bytes and closes it.
 * Handles and pointers not umpool's go to the driver. */
static void ipc(void)
{
    context(0);
    const size_t n = 4 << 20;
    CUdeviceptr p = 0;
    CHECK(cu.alloc(&p, n) == CUDA_SUCCESS, "cuMemAlloc");
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)(uintptr_t)p)[i] = ipc_pat(i);
    long calls = fake_count("fake_cuda_count", "ipc_calls");
    CUipcMemHandle h;
    CHECK(cu.ipc_get(&h, p + 4096) == CUDA_SUCCESS, "cuIpcGetMemHandle");
    CHECK(!memcmp(h.reserved, UMP_IPC_HANDLE_TAG, 4), "not umpool's handle");
    CHECK(fake_count("fake_cuda_count", "ipc_calls") == calls,
          "cuIpcGetMemHandle of pool memory reached the driver");
    char hx[2 * sizeof(h) + 1];
    for (size_t i = 0; i < sizeof(h); i++)
        sprintf(hx + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_preload", "ipc-peer", hx,
              (char *)NULL);
        _exit(99);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer: status %d", st);
    CHECK(!memcmp((void *)(uintptr_t)p, "peer", 5), "the peer's write");
    /* Not umpool's: the driver answers. A damaged one of umpool's is
     * refused here. */
    CUipcMemHandle other;
    CUdeviceptr q = 0;
    memset(&other, 0, sizeof(other));
    CHECK(cu.ipc_open(&q, other, 0) == CUDA_ERROR_INVALID_HANDLE,
          "a foreign handle");
    CHECK(fake_count("fake_cuda_count", "ipc_calls") == calls + 1,
          "a foreign handle did not reach the driver");
    h.reserved[20] ^= 1;
    CHECK(cu.ipc_open(&q, h, 0) == CUDA_ERROR_INVALID_HANDLE && !q,
          "a damaged handle");
    CHECK(cu.ipc_close(p) == CUDA_ERROR_INVALID_VALUE &&
              fake_count("fake_cuda_count", "ipc_calls") == calls + 2,
          "cuIpcCloseMemHandle of a pointer umpool did not open");
    CHECK(cu.free(p) == CUDA_SUCCESS, "cuMemFree");
}

static int ipc_peer(const char *hx)
{
    CUipcMemHandle h;
    CUdeviceptr q = 0;
    for (size_t i = 0; i < sizeof(h); i++) {
        unsigned v;
        if (sscanf(hx + 2 * i, "%2x", &v) != 1)
            return 2;
        h.reserved[i] = (char)v;
    }
    context(0);
    if (cu.ipc_open(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) !=
        CUDA_SUCCESS)
        return 3;
    const unsigned char *b = (const unsigned char *)(uintptr_t)q;
    for (size_t i = 0; i < (4 << 20); i += 4093)
        if (b[i] != ipc_pat(i))
            return 4;
    memcpy((void *)(uintptr_t)q, "peer", 5);
    if (cu.ipc_close(q) != CUDA_SUCCESS)
        return 5;
    /* Closed: now the driver's to refuse. */
    return cu.ipc_close(q) == CUDA_SUCCESS ? 6 : 0;
}

/* The preload's pool's processes (a shared pool's), or -1. */
static int pool_processes(void)
{
    ump_stats_t st;
    ump_pool_t *pool = the_pool();
    return pool && !ump_stats(pool, UMP_DEVICE_ALL, &st) ? st.share_processes
                                                          : -1;
}

/* UMPOOL_CONF has share:NAME: this process's pool is made and shared; a
 * peer (this program again, under the same preload and configuration)
 * joins it at its first CUDA call, and its allocation opens here at the
 * peer's own address: one pool, one address space. */
static void share(void)
{
    context(0);
    const size_t n = 4 << 20;
    CUdeviceptr p = 0, q = 0;
    CHECK(cu.alloc(&p, n) == CUDA_SUCCESS, "cuMemAlloc");
    CHECK(pool_processes() == 1, "a shared pool: %d processes",
          pool_processes());
    int to[2], from[2];
    CHECK(!pipe(to) && !pipe(from), "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        execl("/proc/self/exe", "test_preload", "share-peer", (char *)NULL);
        _exit(99);
    }
    close(to[0]);
    close(from[1]);
    FILE *f = fdopen(from[0], "r");
    char line[256], hx[2 * sizeof(CUipcMemHandle) + 1];
    unsigned long long at = 0;
    CUipcMemHandle h;
    bool got = f && fgets(line, sizeof(line), f) &&
               sscanf(line, "%llx %128s", &at, hx) == 2;
    CHECK(got, "the peer's line");
    if (!got) { /* the peer could not join: nothing to open */
        close(to[1]);
        waitpid(pid, NULL, 0);
        if (f)
            fclose(f);
        cu.free(p);
        return;
    }
    for (size_t i = 0; i < sizeof(h); i++) {
        unsigned v = 0;
        sscanf(hx + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    CHECK(at != p, "the peer's allocation at this one's address");
    CHECK(pool_processes() == 2, "2 processes: %d", pool_processes());
    CHECK(cu.ipc_open(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
              CUDA_SUCCESS && q == at,
          "opened at %#llx, the peer's address %#llx",
          (unsigned long long)q, at);
    for (size_t i = 0; q == at && i < n; i += 4093)
        CHECK(((unsigned char *)(uintptr_t)q)[i] == ipc_pat(i),
              "the peer's byte %zu", i);
    CHECK(cu.ipc_close(q) == CUDA_SUCCESS, "cuIpcCloseMemHandle");
    CHECK(write(to[1], "done\n", 5) == 5, "write");
    close(to[1]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer: status %d", st);
    if (f)
        fclose(f);
    CHECK(cu.free(p) == CUDA_SUCCESS, "cuMemFree");
}

static int share_peer(void)
{
    context(0);
    const size_t n = 4 << 20;
    CUdeviceptr p = 0;
    CUipcMemHandle h;
    char line[16];
    if (cu.alloc(&p, n) != CUDA_SUCCESS)
        return 2;
    if (pool_processes() != 2)
        return 3;
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)(uintptr_t)p)[i] = ipc_pat(i);
    if (cu.ipc_get(&h, p) != CUDA_SUCCESS)
        return 4;
    printf("%llx ", (unsigned long long)p);
    for (size_t i = 0; i < sizeof(h); i++)
        printf("%02x", (unsigned char)h.reserved[i]);
    printf("\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin)) /* the other has closed it */
        return 5;
    return cu.free(p) == CUDA_SUCCESS ? 0 : 6;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "none")) {
        /* No CUDA call: nothing made, nothing published. */
        CHECK(the_pool() == NULL, "a pool without a CUDA call");
        CHECK(!published(), "a segment published without a CUDA call");
        printf("%s: %s none\n", failures ? "FAIL" : "PASS", argv[0]);
        return failures ? 1 : 0;
    }
    bind();
    CHECK(cu.init(0) == CUDA_SUCCESS, "cuInit");
    if (!strcmp(mode, "basic"))
        basic();
    else if (!strcmp(mode, "host"))
        host();
    else if (!strcmp(mode, "overflow"))
        overflow();
    else if (!strcmp(mode, "race"))
        race();
    else if (!strcmp(mode, "omp"))
        omp();
    else if (!strcmp(mode, "ipc"))
        ipc();
    else if (!strcmp(mode, "ipc-peer") && argc > 2)
        return ipc_peer(argv[2]);
    else if (!strcmp(mode, "share"))
        share();
    else if (!strcmp(mode, "share-peer"))
        return share_peer();
    else if (!strcmp(mode, "fork")) {
        context(0);
        CUdeviceptr p = 0;
        CHECK(cu.alloc(&p, 4096) == CUDA_SUCCESS, "parent's cuMemAlloc");
        pid_t pid = fork();
        if (pid == 0) {
            /* The child: CUDA is not usable after fork; a clean error,
             * not a crash or a hang. */
            CUdeviceptr c = 0;
            CUresult res = cu.alloc(&c, 4096);
            _exit(res == CUDA_SUCCESS ? 0 : 2);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st), "the child died (status %d)", st);
        cu.free(p);
    } else {
        CHECK(false, "unknown mode %s", mode);
    }
    printf("%s: %s %s\n", failures ? "FAIL" : "PASS", argv[0], mode);
    return failures ? 1 : 0;
}
