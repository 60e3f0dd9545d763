/*
 * The intercepted driver calls: one table (below), umpool's version of
 * each, and cuGetProcAddress, which hands them out. A call umpool does not
 * serve (no pool, a pointer it does not own, a memory pool other than the
 * device's default, umpool itself calling) goes to the real driver's
 * version, found through the real cuGetProcAddress, so never back here.
 *
 * Device calls act on the current context's device, which is the pool's
 * device of the same ordinal (backend cuda, one pool device per GPU).
 * Frees on a stream (cuMemFreeAsync) are stream-ordered like ump_free_async:
 * an event of the real driver is recorded on the program's stream and the
 * memory goes back to the pool once the event has completed (checked on
 * each later intercepted call), never before.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

#define EXPORT __attribute__((visibility("default")))

enum {
    E_GETPROC,
    E_GETPROC_V1,
    E_ALLOC,
    E_ALLOC_PITCH,
    E_FREE,
    E_ALLOC_ASYNC,
    E_FREE_ASYNC,
    E_ALLOC_POOL_ASYNC,
    E_HOST_ALLOC,
    E_HOST_ALLOC_FLAGS,
    E_HOST_FREE,
    E_HOST_DEVPTR,
    E_HOST_FLAGS,
    E_GETINFO,
    E_ADDR_RANGE,
    E_PTR_ATTR,
    E_PTR_ATTRS,
    E_IPC_GET,
    E_IPC_OPEN,
    E_IPC_CLOSE,
    E_NVML_MEM,
    E_NVML_MEM_V2,
    E_N
};

/* The one table (filled at the end of this file, after umpool's versions):
 * the base name cuGetProcAddress takes, the first CUDA version whose ABI
 * umpool's version has (the _v2 variants: 3.2), umpool's version, and the
 * real driver's, found on first use. */
struct entry {
    const char *name;
    int since;
    void *mine;
    void *_Atomic real;
};
static struct entry table[E_N];

int intercept_count(void)
{
    return E_N;
}

const char *intercept_name(int e)
{
    return e == E_GETPROC_V1 ? "cuGetProcAddress (11.3)" : table[e].name;
}

/* The real driver's version of entry e (its newest ABI, the one umpool's
 * version has), or NULL. */
static void *real_of(int e)
{
    void *fn = atomic_load(&table[e].real);
    if (fn)
        return fn;
    const struct preload_real *r = preload_real();
    if (!r)
        return NULL;
    preload_enter();
    r->getproc(table[e].name, &fn, e == E_GETPROC_V1 ? 11030 : 12000, 0,
               NULL);
    preload_leave();
    atomic_store(&table[e].real, fn);
    return fn;
}

#define REAL(e, type) ((type)real_of(e))
#define NO_DRIVER CUDA_ERROR_NOT_INITIALIZED

/* The pool, when this call is umpool's to serve: not from umpool itself,
 * and a pool made. */
static ump_pool_t *serving(void)
{
    if (preload_busy())
        return NULL;
    return preload_pool();
}

/* The pool device of the current context (its CUDA ordinal). */
static inline __attribute__((always_inline)) bool
current_device(ump_pool_t *pool, int *dev)
{
    const struct preload_real *r = preload_real();
    CUdevice d;
    if (!r || r->ctx_get_device(&d) != CUDA_SUCCESS)
        return false;
    /* The pool's devices do not change: counted once. */
    static _Atomic int ndev = -1;
    int n = atomic_load_explicit(&ndev, memory_order_relaxed);
    if (n < 0)
        atomic_store(&ndev, n = ump_device_count(pool));
    *dev = (int)d;
    return *dev >= 0 && *dev < n;
}

static bool owned(ump_pool_t *pool, CUdeviceptr p, ump_ptr_info_t *in)
{
    return ump_ptr_lookup(pool, (const void *)(uintptr_t)p, in) == 0;
}

/* In the pool's address range (ump_pool_range: nothing else is mapped
 * there)? The frees' test: two compares where a lookup costs as much as
 * the free itself. */
static _Atomic uintptr_t range_lo, range_hi;

static bool range_load(ump_pool_t *pool)
{
    void *b;
    size_t n;
    if (ump_pool_range(pool, &b, &n))
        return false;
    atomic_store(&range_hi, (uintptr_t)b + n);
    atomic_store(&range_lo, (uintptr_t)b);
    return true;
}

static inline bool in_range(ump_pool_t *pool, CUdeviceptr p)
{
    /* acquire: range_load stores hi before lo, so a reader that sees lo
     * sees hi too (free on x86; on a weakly ordered CPU it is not) */
    uintptr_t l = atomic_load_explicit(&range_lo, memory_order_acquire);
    if (__builtin_expect(!l, 0)) {
        if (!range_load(pool))
            return false;
        l = atomic_load_explicit(&range_lo, memory_order_acquire);
    }
    return p >= l && p < atomic_load_explicit(&range_hi, memory_order_relaxed);
}

/* --- stream-ordered frees ---------------------------------------------- */

struct pending {
    void *ptr;
    CUevent ev;
    struct pending *next;
};
static pthread_mutex_t pend_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *_Atomic pend;

/* Is p waiting for its stream (a cuMemFreeAsync not done yet)? A second
 * free of it is the caller's error, and must not reach the pool: the pool
 * still holds the allocation, and the pending free will return it. */
static bool pending_search(void *p)
{
    bool found = false;
    preload_enter();
    pthread_mutex_lock(&pend_lock);
    for (struct pending *e = atomic_load(&pend); e && !found; e = e->next)
        found = e->ptr == p;
    pthread_mutex_unlock(&pend_lock);
    preload_leave();
    return found;
}

/* pending_search, in line where nothing is pending (the common case). */
static inline bool pending_has(void *p)
{
    return atomic_load_explicit(&pend, memory_order_acquire) &&
           pending_search(p);
}

/* intercept_poll, in line where nothing is pending. */
static inline void poll_frees(void)
{
    if (atomic_load_explicit(&pend, memory_order_acquire))
        intercept_poll();
}

void intercept_poll(void)
{
    if (!atomic_load_explicit(&pend, memory_order_acquire))
        return; /* the common case: one load */
    ump_pool_t *pool = umpool_preload_pool();
    const struct preload_real *r = preload_real();
    if (!pool || !r)
        return;
    pthread_mutex_lock(&pend_lock);
    struct pending *e = atomic_load(&pend), *keep = NULL;
    while (e) {
        struct pending *next = e->next;
        if (r->event_query(e->ev) == CUDA_ERROR_NOT_READY) {
            e->next = keep;
            keep = e;
        } else { /* done (or the context failed: nothing touches it) */
            r->event_destroy(e->ev);
            /* Checked when queued: a failure here is umpool's bug. */
            if (ump_free(pool, e->ptr))
                fprintf(stderr, "umpool-preload: the stream-ordered free of "
                        "%p failed\n", e->ptr);
            free(e);
        }
        e = next;
    }
    atomic_store(&pend, keep);
    pthread_mutex_unlock(&pend_lock);
}

/* --- umpool's versions ------------------------------------------------- */

/* An allocation of size on the current device; CUDA's answer. In line in
 * each interposed allocation: a call and its frame are a tenth of the
 * interposer's own instructions. */
static inline __attribute__((always_inline)) CUresult
alloc_on_current(ump_pool_t *pool, CUdeviceptr *dptr, size_t size, int e,
                 bool *served)
{
    int dev;
    *served = false;
    if (!dptr || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current_device(pool, &dev))
        return CUDA_SUCCESS; /* not served: the driver answers */
    preload_enter();
    poll_frees();
    /* On the current device only, as the driver would: the pool's policy
     * is local (preload.c makes it so), and no spilling to a peer. With
     * overflow:host the program asked to run past its device: the policy
     * spills to the device's peers first (NVLink is faster than the host
     * link), and the pool overflows to pinned host memory last. */
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = dev;
    h.flags = preload_overflow ? 0 : UMP_HINT_NO_SPILL;
    /* By name: a plug-in may have made the process's pool first, with
     * another default policy. */
    h.policy = "local";
    void *p = NULL;
    int rc = ump_alloc(pool, size, &h, &p);
    preload_leave();
    if (rc && rc != -ENOMEM)
        return CUDA_SUCCESS; /* not served */
    *served = true;
    preload_count(e, true);
    if (rc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    ump_pool_t *pool = serving();
    bool served = false;
    CUresult res = pool ? alloc_on_current(pool, dptr, bytesize, E_ALLOC,
                                           &served)
                        : CUDA_SUCCESS;
    if (served || res != CUDA_SUCCESS)
        return res;
    preload_count(E_ALLOC, false);
    CUresult (*fn)(CUdeviceptr *, size_t) =
        REAL(E_ALLOC, CUresult (*)(CUdeviceptr *, size_t));
    return fn ? fn(dptr, bytesize) : NO_DRIVER;
}

/* Rows of width bytes padded to the driver's pitch alignment (512 bytes
 * covers every element size it takes: 4, 8 or 16). */
EXPORT CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch,
                                        size_t width, size_t height,
                                        unsigned int elem)
{
    ump_pool_t *pool = serving();
    if (pool && pitch && width && height &&
        (elem == 4 || elem == 8 || elem == 16) &&
        width <= SIZE_MAX - 511) {
        size_t pt = (width + 511) & ~(size_t)511;
        if (height <= SIZE_MAX / pt) {
            bool served;
            CUresult res = alloc_on_current(pool, dptr, pt * height,
                                            E_ALLOC_PITCH, &served);
            if (served || res != CUDA_SUCCESS) {
                if (res == CUDA_SUCCESS)
                    *pitch = pt;
                return res;
            }
        }
    }
    preload_count(E_ALLOC_PITCH, false);
    CUresult (*fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        REAL(E_ALLOC_PITCH,
             CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned));
    return fn ? fn(dptr, pitch, width, height, elem) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    ump_pool_t *pool = serving();
    if (pool && dptr && in_range(pool, dptr)) {
        preload_count(E_FREE, true);
        if (pending_has((void *)(uintptr_t)dptr))
            return CUDA_ERROR_INVALID_VALUE; /* freed already, on a stream */
        /* Not an allocation's start (ump_free says why in the log): the
         * driver's answer for a pointer it did not hand out. */
        preload_enter();
        int rc = ump_free(pool, (void *)(uintptr_t)dptr);
        poll_frees();
        preload_leave();
        return rc ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    preload_count(E_FREE, false);
    CUresult (*fn)(CUdeviceptr) = REAL(E_FREE, CUresult (*)(CUdeviceptr));
    return fn ? fn(dptr) : NO_DRIVER;
}

/* Stream order costs nothing to honour on allocation: the pool hands out
 * only memory no queued work still uses (frees wait for their stream). */
EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
                                        CUstream stream)
{
    ump_pool_t *pool = serving();
    bool served = false;
    CUresult res = pool ? alloc_on_current(pool, dptr, bytesize,
                                           E_ALLOC_ASYNC, &served)
                        : CUDA_SUCCESS;
    if (served || res != CUDA_SUCCESS)
        return res;
    preload_count(E_ALLOC_ASYNC, false);
    CUresult (*fn)(CUdeviceptr *, size_t, CUstream) =
        REAL(E_ALLOC_ASYNC, CUresult (*)(CUdeviceptr *, size_t, CUstream));
    return fn ? fn(dptr, bytesize, stream) : NO_DRIVER;
}

/* The event of a stream-ordered free, made and recorded in the stream's
 * own context (it may be another device's than the current one). */
static CUresult record_on(const struct preload_real *r, CUstream stream,
                          CUevent *ev)
{
    CUcontext cur = NULL, sc = NULL;
    /* The special handles (NULL, legacy, per-thread) are the current
     * context's streams. */
    bool other = (uintptr_t)stream > 2 && r->stream_get_ctx &&
                 r->stream_get_ctx(stream, &sc) == CUDA_SUCCESS &&
                 r->ctx_get_current(&cur) == CUDA_SUCCESS && sc != cur;
    if (other && r->ctx_set_current(sc) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult res = r->event_create(ev, CU_EVENT_DISABLE_TIMING);
    if (res == CUDA_SUCCESS) {
        res = r->event_record(*ev, stream);
        if (res != CUDA_SUCCESS)
            r->event_destroy(*ev);
    }
    if (other)
        r->ctx_set_current(cur);
    return res;
}

EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    ump_pool_t *pool = serving();
    const struct preload_real *r = preload_real();
    if (pool && r && dptr && in_range(pool, dptr)) {
        preload_count(E_FREE_ASYNC, true);
        ump_ptr_info_t in;
        preload_enter();
        bool start = owned(pool, dptr, &in) &&
                     (uintptr_t)in.base == (uintptr_t)dptr &&
                     in.kind == UMP_KIND_DEVICE;
        preload_leave();
        /* Not a device allocation's start, or freed already (pending). */
        if (!start || pending_has(in.base))
            return CUDA_ERROR_INVALID_VALUE;
        struct pending *e = malloc(sizeof(*e));
        if (!e)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult res = record_on(r, stream, &e->ev);
        if (res != CUDA_SUCCESS) {
            free(e);
            return res;
        }
        e->ptr = in.base;
        preload_enter();
        pthread_mutex_lock(&pend_lock);
        e->next = atomic_load(&pend);
        atomic_store(&pend, e);
        pthread_mutex_unlock(&pend_lock);
        preload_leave();
        return CUDA_SUCCESS;
    }
    preload_count(E_FREE_ASYNC, false);
    CUresult (*fn)(CUdeviceptr, CUstream) =
        REAL(E_FREE_ASYNC, CUresult (*)(CUdeviceptr, CUstream));
    return fn ? fn(dptr, stream) : NO_DRIVER;
}

/* The per-thread-default-stream names (programs built with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM call these): the same service, stream
 * 0 taken as the legacy default stream's order, which waits for more than
 * the thread's own stream, never for less. cuGetProcAddress's flag for
 * them is answered the same way. */
EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n,
                                             CUstream stream);
EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n,
                                             CUstream stream)
{
    return cuMemAllocAsync(dptr, n, stream);
}

EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                            CUstream stream);
EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return cuMemFreeAsync(dptr, stream);
}

/* From the device's default memory pool: the pool's; any other memory
 * pool is the program's own, and the driver's. */
EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr,
                                                size_t bytesize,
                                                CUmemoryPool mp,
                                                CUstream stream)
{
    ump_pool_t *pool = serving();
    const struct preload_real *r = preload_real();
    CUdevice d;
    CUmemoryPool def = NULL;
    if (pool && r && r->device_get_default_mem_pool &&
        r->ctx_get_device(&d) == CUDA_SUCCESS &&
        r->device_get_default_mem_pool(&def, d) == CUDA_SUCCESS &&
        def == mp) {
        bool served;
        CUresult res = alloc_on_current(pool, dptr, bytesize,
                                        E_ALLOC_POOL_ASYNC, &served);
        if (served || res != CUDA_SUCCESS)
            return res;
    }
    preload_count(E_ALLOC_POOL_ASYNC, false);
    CUresult (*fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        REAL(E_ALLOC_POOL_ASYNC,
             CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream));
    return fn ? fn(dptr, bytesize, mp, stream) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                     size_t n,
                                                     CUmemoryPool mp,
                                                     CUstream stream);
EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                     size_t n,
                                                     CUmemoryPool mp,
                                                     CUstream stream)
{
    return cuMemAllocFromPoolAsync(dptr, n, mp, stream);
}

/* --- pinned host memory ------------------------------------------------ */
/* cuMemAllocHost and cuMemHostAlloc come from the pool's cached pinned
 * host memory (ump_host_alloc): mapped at one address for the CPU and
 * every device, so it is portable and device-mapped whatever the flags
 * say. Write-combined memory is another kind: the driver's. Beyond the
 * pool's pinned_limit, or where the pool has no pinned host memory, the
 * driver pins it as it would have; cuMemFreeHost tells the two apart by
 * the pool's address range. */

#define HOST_FLAGS_SERVED (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)

static CUresult host_alloc(ump_pool_t *pool, void **pp, size_t size, int e,
                           bool *served)
{
    *served = false;
    if (!pp || !size)
        return CUDA_ERROR_INVALID_VALUE;
    preload_enter();
    poll_frees();
    int rc = ump_host_alloc(pool, size, pp);
    preload_leave();
    if (rc)
        return CUDA_SUCCESS; /* not served: the driver's */
    *served = true;
    preload_count(e, true);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
    ump_pool_t *pool = serving();
    bool served = false;
    CUresult res = pool ? host_alloc(pool, pp, bytesize, E_HOST_ALLOC, &served)
                        : CUDA_SUCCESS;
    if (served || res != CUDA_SUCCESS)
        return res;
    preload_count(E_HOST_ALLOC, false);
    CUresult (*fn)(void **, size_t) =
        REAL(E_HOST_ALLOC, CUresult (*)(void **, size_t));
    return fn ? fn(pp, bytesize) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize,
                                       unsigned int flags)
{
    ump_pool_t *pool = serving();
    bool served = false;
    CUresult res = CUDA_SUCCESS;
    if (pool && !(flags & ~HOST_FLAGS_SERVED))
        res = host_alloc(pool, pp, bytesize, E_HOST_ALLOC_FLAGS, &served);
    if (served || res != CUDA_SUCCESS)
        return res;
    preload_count(E_HOST_ALLOC_FLAGS, false);
    CUresult (*fn)(void **, size_t, unsigned) =
        REAL(E_HOST_ALLOC_FLAGS, CUresult (*)(void **, size_t, unsigned));
    return fn ? fn(pp, bytesize, flags) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
    ump_pool_t *pool = serving();
    if (pool && p && in_range(pool, (CUdeviceptr)(uintptr_t)p)) {
        preload_count(E_HOST_FREE, true);
        /* Device memory of the pool, or not an allocation's start:
         * ump_host_free says why in the log, the driver's error here. */
        preload_enter();
        int rc = ump_host_free(pool, p);
        poll_frees();
        preload_leave();
        return rc ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    preload_count(E_HOST_FREE, false);
    CUresult (*fn)(void *) = REAL(E_HOST_FREE, CUresult (*)(void *));
    return fn ? fn(p) : NO_DRIVER;
}

/* Is p in the pool's pinned host memory of cuMemAllocHost and kin (not
 * overflowed device memory, nor device memory moved down a tier)? */
static bool pool_host(ump_pool_t *pool, const void *p)
{
    ump_ptr_info_t in;
    preload_enter();
    bool mine = owned(pool, (CUdeviceptr)(uintptr_t)p, &in);
    preload_leave();
    return mine && in.kind == UMP_KIND_HOST;
}

/* The device's address of pool host memory is its own: one address space
 * (unified addressing, as every GPU the pool runs on has). */
EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p,
                                                  unsigned int flags)
{
    ump_pool_t *pool = serving();
    if (pool && in_range(pool, (CUdeviceptr)(uintptr_t)p)) {
        preload_count(E_HOST_DEVPTR, true);
        if (!pdptr || flags || !pool_host(pool, p))
            return CUDA_ERROR_INVALID_VALUE;
        *pdptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
    }
    preload_count(E_HOST_DEVPTR, false);
    CUresult (*fn)(CUdeviceptr *, void *, unsigned) =
        REAL(E_HOST_DEVPTR, CUresult (*)(CUdeviceptr *, void *, unsigned));
    return fn ? fn(pdptr, p, flags) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *flags, void *p)
{
    ump_pool_t *pool = serving();
    if (pool && in_range(pool, (CUdeviceptr)(uintptr_t)p)) {
        preload_count(E_HOST_FLAGS, true);
        if (!flags || !pool_host(pool, p))
            return CUDA_ERROR_INVALID_VALUE;
        *flags = HOST_FLAGS_SERVED;
        return CUDA_SUCCESS;
    }
    preload_count(E_HOST_FLAGS, false);
    CUresult (*fn)(unsigned *, void *) =
        REAL(E_HOST_FLAGS, CUresult (*)(unsigned *, void *));
    return fn ? fn(flags, p) : NO_DRIVER;
}

/* What the pool can still give device dev, and its capacity there, from
 * the driver's own figures for the GPU (real_free, real_total; 0 and 0
 * when unknown): the total is the GPU's (or the pool's limit, if lower),
 * never more; the free room is what the pool's limit leaves after the
 * memory it holds for live allocations, and at most what it could really
 * get: its cached memory plus what the driver still has (memory others
 * use, in this process or another, is not there). cuMemGetInfo and NVML's
 * memory calls both answer with it, so they agree. */
static bool pool_meminfo(ump_pool_t *pool, int dev, size_t real_free,
                         size_t real_total, size_t *free_b, size_t *total_b)
{
    ump_device_props_t props;
    ump_stats_t st;
    if (ump_device_props(pool, dev, &props) || ump_stats(pool, dev, &st))
        return false;
    size_t used = st.reserved_bytes > st.cached_bytes
                      ? st.reserved_bytes - st.cached_bytes
                      : 0;
    size_t total = props.capacity;
    if (real_total && real_total < total)
        total = real_total;
    size_t room = total > used ? total - used : 0;
    if (real_total && st.cached_bytes + real_free < room)
        room = st.cached_bytes + real_free;
    *total_b = total;
    *free_b = room;
    return true;
}

EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free_b, size_t *total_b)
{
    ump_pool_t *pool = serving();
    int dev;
    CUresult (*fn)(size_t *, size_t *) =
        REAL(E_GETINFO, CUresult (*)(size_t *, size_t *));
    size_t rf = 0, rt = 0;
    bool ok = false;
    if (pool && free_b && total_b && current_device(pool, &dev) && fn &&
        fn(&rf, &rt) == CUDA_SUCCESS) {
        preload_enter();
        ok = pool_meminfo(pool, dev, rf, rt, free_b, total_b);
        preload_leave();
    }
    if (ok) {
        preload_count(E_GETINFO, true);
        return CUDA_SUCCESS;
    }
    preload_count(E_GETINFO, false);
    return fn ? fn(free_b, total_b) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *base, size_t *size,
                                             CUdeviceptr dptr)
{
    ump_pool_t *pool = serving();
    ump_ptr_info_t in;
    if (pool && in_range(pool, dptr)) {
        preload_count(E_ADDR_RANGE, true);
        preload_enter();
        bool mine = owned(pool, dptr, &in);
        preload_leave();
        /* The pool's range, no allocation there: a pointer nobody handed
         * out (the driver would only see the chunk). */
        if (!mine)
            return CUDA_ERROR_NOT_FOUND;
        if (base)
            *base = (CUdeviceptr)(uintptr_t)in.base;
        if (size)
            *size = in.size;
        return CUDA_SUCCESS;
    }
    preload_count(E_ADDR_RANGE, false);
    CUresult (*fn)(CUdeviceptr *, size_t *, CUdeviceptr) =
        REAL(E_ADDR_RANGE, CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr));
    return fn ? fn(base, size, dptr) : NO_DRIVER;
}

/* The allocation's range where the driver would give the chunk's. */
static void fix_range(ump_pool_t *pool, CUpointer_attribute a, void *data,
                      CUdeviceptr ptr)
{
    ump_ptr_info_t in;
    preload_enter();
    bool mine = data && pool && owned(pool, ptr, &in);
    preload_leave();
    if (!mine)
        return;
    if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)in.base;
    else if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *(size_t *)data = in.size;
}

EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data,
                                              CUpointer_attribute attr,
                                              CUdeviceptr ptr)
{
    ump_pool_t *pool = serving();
    CUresult (*fn)(void *, CUpointer_attribute, CUdeviceptr) =
        REAL(E_PTR_ATTR, CUresult (*)(void *, CUpointer_attribute,
                                      CUdeviceptr));
    ump_ptr_info_t in;
    bool ranged = pool && in_range(pool, ptr), mine = false;
    if (ranged) {
        preload_enter();
        mine = owned(pool, ptr, &in);
        preload_leave();
    }
    preload_count(E_PTR_ATTR, ranged);
    /* The pool's range, no allocation there: nobody's pointer. */
    if (ranged && !mine)
        return CUDA_ERROR_INVALID_VALUE;
    if (mine && (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                 attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE)) {
        fix_range(pool, attr, data, ptr);
        return data ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    return fn ? fn(data, attr, ptr) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int n,
                                               CUpointer_attribute *attrs,
                                               void **data, CUdeviceptr ptr)
{
    ump_pool_t *pool = serving();
    CUresult (*fn)(unsigned, CUpointer_attribute *, void **, CUdeviceptr) =
        REAL(E_PTR_ATTRS, CUresult (*)(unsigned, CUpointer_attribute *,
                                       void **, CUdeviceptr));
    if (!fn)
        return NO_DRIVER;
    ump_ptr_info_t in;
    bool ranged = pool && in_range(pool, ptr), mine = false;
    if (ranged) {
        preload_enter();
        mine = owned(pool, ptr, &in);
        preload_leave();
        if (!mine) {
            preload_count(E_PTR_ATTRS, true);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    CUresult res = fn(n, attrs, data, ptr);
    mine = mine && res == CUDA_SUCCESS && attrs && data;
    preload_count(E_PTR_ATTRS, mine);
    for (unsigned i = 0; mine && i < n; i++)
        fix_range(pool, attrs[i], data[i], ptr);
    return res;
}

/* --- NVML --------------------------------------------------------------- */
/* NVML's memory figures for a GPU, seen from inside the process, are the
 * pool's (as cuMemGetInfo's): a program that sizes its work from NVML
 * (vLLM) and one that asks the driver see the same room. Before the pool
 * exists (no allocation yet) the real NVML answers. The GPU is found by
 * its PCI address (NVML's order need not be CUDA's). */
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned version;
    unsigned long long total, reserved, free, used;
};
struct nvml_pci {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
#define NVML_UNINITIALIZED 1
EXPORT int nvmlDeviceGetMemoryInfo(void *handle, struct nvml_memory *m);
EXPORT int nvmlDeviceGetMemoryInfo_v2(void *handle, struct nvml_memory_v2 *m);

static void *nvml_real(const char *name)
{
    static void *_Atomic lib;
    void *h = atomic_load(&lib);
    if (!h) {
        preload_enter();
        h = preload_real_dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        preload_leave();
        if (!h)
            return NULL;
        atomic_store(&lib, h);
    }
    return dlsym(h, name);
}

/* The pool's device of an NVML handle; false when none (or no pool). */
static bool nvml_device(void *handle, ump_pool_t **pool_p, int *dev)
{
    ump_pool_t *pool = preload_busy() ? NULL : umpool_preload_pool();
    const struct preload_real *r = preload_real();
    int (*pci)(void *, struct nvml_pci *);
    void *sym = nvml_real("nvmlDeviceGetPciInfo_v3");
    memcpy(&pci, &sym, sizeof(pci));
    struct nvml_pci info;
    CUdevice d;
    if (!pool || !r || !r->device_by_pci || !pci || pci(handle, &info) ||
        r->device_by_pci(&d, info.bus_id) != CUDA_SUCCESS ||
        (int)d >= ump_device_count(pool))
        return false;
    *pool_p = pool;
    *dev = (int)d;
    return true;
}

/* NVML's own figures for the GPU (0, 0 when unknown). */
static void nvml_real_mem(void *handle, size_t *f, size_t *t)
{
    int (*fn)(void *, struct nvml_memory *);
    void *sym = nvml_real("nvmlDeviceGetMemoryInfo");
    memcpy(&fn, &sym, sizeof(fn));
    struct nvml_memory m;
    *f = *t = 0;
    if (fn && !fn(handle, &m)) {
        *f = (size_t)m.free;
        *t = (size_t)m.total;
    }
}

/* The pool's figures for an NVML handle's GPU. */
static bool nvml_pool_mem(void *handle, size_t *f, size_t *t)
{
    ump_pool_t *pool;
    int dev;
    size_t rf, rt;
    if (!nvml_device(handle, &pool, &dev))
        return false;
    nvml_real_mem(handle, &rf, &rt);
    preload_enter();
    bool ok = pool_meminfo(pool, dev, rf, rt, f, t);
    preload_leave();
    return ok;
}

EXPORT int nvmlDeviceGetMemoryInfo(void *handle, struct nvml_memory *m)
{
    size_t f, t;
    if (m && nvml_pool_mem(handle, &f, &t)) {
        preload_count(E_NVML_MEM, true);
        m->total = t;
        m->free = f;
        m->used = t - f;
        return 0;
    }
    preload_count(E_NVML_MEM, false);
    int (*fn)(void *, struct nvml_memory *);
    void *sym = nvml_real("nvmlDeviceGetMemoryInfo");
    memcpy(&fn, &sym, sizeof(fn));
    return fn ? fn(handle, m) : NVML_UNINITIALIZED;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(void *handle, struct nvml_memory_v2 *m)
{
    size_t f, t;
    if (m && nvml_pool_mem(handle, &f, &t)) {
        preload_count(E_NVML_MEM_V2, true);
        m->total = t;
        m->reserved = 0;
        m->free = f;
        m->used = t - f;
        return 0;
    }
    preload_count(E_NVML_MEM_V2, false);
    int (*fn)(void *, struct nvml_memory_v2 *);
    void *sym = nvml_real("nvmlDeviceGetMemoryInfo_v2");
    memcpy(&fn, &sym, sizeof(fn));
    return fn ? fn(handle, m) : NVML_UNINITIALIZED;
}

/* --- cuGetProcAddress -------------------------------------------------- */

/* umpool's version of the driver entry point `name` (a base name, as
 * cuGetProcAddress takes it) for version, or NULL. */
static void *intercept_lookup(const char *name, int version)
{
    if (!name)
        return NULL;
    for (int e = 0; e < E_N; e++) {
        const struct entry *t = &table[e];
        if (!t->mine || version < t->since || strcmp(name, t->name))
            continue;
        /* cuGetProcAddress: the 12.0 one from 12.0 on, else the 11.3 one. */
        if (e == E_GETPROC_V1 && version >= table[E_GETPROC].since)
            continue;
        return t->mine;
    }
    return NULL;
}

/* --- IPC handles --------------------------------------------------------
 * The driver gives no legacy IPC handle of virtual-memory allocations,
 * which every pool allocation is, so cuIpcGetMemHandle of pool memory
 * (PyTorch's CUDA tensors sent to another process) is umpool's: the
 * handle of the allocation holding dptr (ump_ipc_get_handle; 64 bytes,
 * the size of CUipcMemHandle), which names the allocation's start as the
 * driver's names its allocation (the caller sends its offset beside it:
 * cuMemGetAddressRange gives the start). cuIpcOpenMemHandle of a handle
 * that begins with umpool's tag opens it in this process's pool, any
 * other is the driver's; cuIpcCloseMemHandle of what umpool opened closes
 * it (the list below), any other pointer is the driver's. */

static pthread_mutex_t opened_lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr *opened; /* one entry per open not yet closed */
static size_t nopened, capopened;

static bool opened_add(CUdeviceptr p)
{
    pthread_mutex_lock(&opened_lock);
    bool ok = nopened < capopened;
    if (!ok) {
        size_t cap = capopened ? 2 * capopened : 16;
        CUdeviceptr *a = realloc(opened, cap * sizeof(*a));
        if ((ok = a != NULL)) {
            opened = a;
            capopened = cap;
        }
    }
    if (ok)
        opened[nopened++] = p;
    pthread_mutex_unlock(&opened_lock);
    return ok;
}

/* One open of p off the list: false when umpool did not open it. */
static bool opened_take(CUdeviceptr p)
{
    bool found = false;
    pthread_mutex_lock(&opened_lock);
    for (size_t i = 0; i < nopened && !found; i++)
        if ((found = opened[i] == p))
            opened[i] = opened[--nopened];
    pthread_mutex_unlock(&opened_lock);
    return found;
}

static CUresult ipc_result(int rc)
{
    switch (rc) {
    case 0: return CUDA_SUCCESS;
    case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
    case -ENOTSUP: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle,
                                          CUdeviceptr dptr)
{
    _Static_assert(sizeof(CUipcMemHandle) == sizeof(ump_ipc_handle_t),
                   "a CUDA IPC handle holds umpool's");
    ump_pool_t *pool = serving();
    ump_ptr_info_t in;
    if (pool && in_range(pool, dptr)) {
        preload_count(E_IPC_GET, true);
        if (!handle)
            return CUDA_ERROR_INVALID_VALUE;
        preload_enter();
        int rc = owned(pool, dptr, &in) ? 0 : -EINVAL;
        ump_ipc_handle_t h;
        if (!rc)
            rc = ump_ipc_get_handle(pool, in.base, &h);
        preload_leave();
        if (!rc)
            memcpy(handle, &h, sizeof(h));
        return ipc_result(rc);
    }
    preload_count(E_IPC_GET, false);
    CUresult (*fn)(CUipcMemHandle *, CUdeviceptr) =
        REAL(E_IPC_GET, CUresult (*)(CUipcMemHandle *, CUdeviceptr));
    return fn ? fn(handle, dptr) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr,
                                           CUipcMemHandle handle,
                                           unsigned int flags)
{
    ump_pool_t *pool = serving();
    if (pool && !memcmp(handle.reserved, UMP_IPC_HANDLE_TAG, 4)) {
        preload_count(E_IPC_OPEN, true);
        if (!pdptr)
            return CUDA_ERROR_INVALID_VALUE;
        ump_ipc_handle_t h;
        void *p = NULL;
        memcpy(&h, &handle, sizeof(h));
        preload_enter();
        int rc = ump_ipc_open(pool, &h, &p);
        if (!rc && !opened_add((CUdeviceptr)(uintptr_t)p)) {
            ump_ipc_close(pool, p);
            rc = -ENOMEM;
        }
        preload_leave();
        if (!rc)
            *pdptr = (CUdeviceptr)(uintptr_t)p;
        /* The driver's answer for a handle it cannot open. */
        return rc == -EINVAL ? CUDA_ERROR_INVALID_HANDLE : ipc_result(rc);
    }
    preload_count(E_IPC_OPEN, false);
    CUresult (*fn)(CUdeviceptr *, CUipcMemHandle, unsigned) =
        REAL(E_IPC_OPEN, CUresult (*)(CUdeviceptr *, CUipcMemHandle,
                                      unsigned));
    return fn ? fn(pdptr, handle, flags) : NO_DRIVER;
}

EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ump_pool_t *pool = serving();
    if (pool && opened_take(dptr)) {
        preload_count(E_IPC_CLOSE, true);
        preload_enter();
        int rc = ump_ipc_close(pool, (void *)(uintptr_t)dptr);
        preload_leave();
        return ipc_result(rc);
    }
    preload_count(E_IPC_CLOSE, false);
    CUresult (*fn)(CUdeviceptr) = REAL(E_IPC_CLOSE, CUresult (*)(CUdeviceptr));
    return fn ? fn(dptr) : NO_DRIVER;
}

/* Both cuGetProcAddress: umpool's version of symbol into *pfn, counted
 * as a look-up by entry `counter`; false when it is the driver's to
 * answer. */
static bool answer(const char *symbol, void **pfn, int version, int counter)
{
    void *mine = pfn ? intercept_lookup(symbol, version) : NULL;
    if (!mine)
        return false;
    preload_count(counter, true);
    *pfn = mine;
    return true;
}

EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn,
                                         int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *st)
{
    if (answer(symbol, pfn, version, E_GETPROC)) {
        if (st)
            *st = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    const struct preload_real *r = preload_real();
    return r ? r->getproc(symbol, pfn, version, flags, st) : NO_DRIVER;
}

/* The 11.3 cuGetProcAddress (no status), under its exported name: cuda.h
 * maps the name to the 12.0 one. */
EXPORT CUresult CUDAAPI getproc_v1(const char *symbol, void **pfn,
                                   int version, cuuint64_t flags)
    __asm__("cuGetProcAddress");
CUresult CUDAAPI getproc_v1(const char *symbol, void **pfn, int version,
                            cuuint64_t flags)
{
    if (answer(symbol, pfn, version, E_GETPROC_V1))
        return CUDA_SUCCESS;
    const struct preload_real *r = preload_real();
    if (r && r->getproc_v1)
        return r->getproc_v1(symbol, pfn, version, flags);
    return r ? r->getproc(symbol, pfn, version, flags, NULL) : NO_DRIVER;
}

#define ROW(e, n, v, f) [e] = {n, v, (void *)(f), NULL}
static struct entry table[E_N] = {
    ROW(E_GETPROC, "cuGetProcAddress", 12000, cuGetProcAddress),
    ROW(E_GETPROC_V1, "cuGetProcAddress", 11030, getproc_v1),
    ROW(E_ALLOC, "cuMemAlloc", 3020, cuMemAlloc),
    ROW(E_ALLOC_PITCH, "cuMemAllocPitch", 3020, cuMemAllocPitch),
    ROW(E_FREE, "cuMemFree", 3020, cuMemFree),
    ROW(E_ALLOC_ASYNC, "cuMemAllocAsync", 11020, cuMemAllocAsync),
    ROW(E_FREE_ASYNC, "cuMemFreeAsync", 11020, cuMemFreeAsync),
    ROW(E_ALLOC_POOL_ASYNC, "cuMemAllocFromPoolAsync", 11020,
        cuMemAllocFromPoolAsync),
    ROW(E_HOST_ALLOC, "cuMemAllocHost", 3020, cuMemAllocHost),
    ROW(E_HOST_ALLOC_FLAGS, "cuMemHostAlloc", 2020, cuMemHostAlloc),
    ROW(E_HOST_FREE, "cuMemFreeHost", 2000, cuMemFreeHost),
    ROW(E_HOST_DEVPTR, "cuMemHostGetDevicePointer", 3020,
        cuMemHostGetDevicePointer),
    ROW(E_HOST_FLAGS, "cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    ROW(E_GETINFO, "cuMemGetInfo", 3020, cuMemGetInfo),
    ROW(E_ADDR_RANGE, "cuMemGetAddressRange", 3020, cuMemGetAddressRange),
    ROW(E_PTR_ATTR, "cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    ROW(E_PTR_ATTRS, "cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    ROW(E_IPC_GET, "cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    /* cuda.h's name is the 11.0 ABI's, cuIpcOpenMemHandle_v2. */
    ROW(E_IPC_OPEN, "cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle),
    ROW(E_IPC_CLOSE, "cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    /* NVML's, reached through dlopen of libnvidia-ml.so.1 or by name; never
     * through cuGetProcAddress. */
    ROW(E_NVML_MEM, "nvmlDeviceGetMemoryInfo", INT_MAX,
        nvmlDeviceGetMemoryInfo),
    ROW(E_NVML_MEM_V2, "nvmlDeviceGetMemoryInfo_v2", INT_MAX,
        nvmlDeviceGetMemoryInfo_v2),
};
