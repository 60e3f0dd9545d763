/*
 * CuPy's C allocator (cupy.cuda.memory.CFunctionAllocator): malloc and
 * free with the signatures it calls. param is a pool (ump_pool_t *), or
 * NULL for the process's pool (ump_process_pool).
 *
 * Above the public API only, like the tools.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "umpool.h"
#include "umpool_bindings.h"

#define EXPORT __attribute__((visibility("default")))

/* param, or the process's pool: asked once, as it never changes, except
 * in a child after fork(), which gets its own (ump_process_pool). */
static ump_pool_t *_Atomic cached;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void forget(void)
{
    atomic_store(&cached, NULL);
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, forget);
}

static ump_pool_t *pool_or_process(void *param)
{
    ump_pool_t *p = param;
    if (p || (p = atomic_load_explicit(&cached, memory_order_acquire)))
        return p;
    if (ump_process_pool(NULL, &p))
        return NULL;
    pthread_once(&atfork_once, atfork_register);
    atomic_store_explicit(&cached, p, memory_order_release);
    return p;
}

EXPORT void *umpool_cupy_malloc(void *param, size_t size, int device)
{
    ump_pool_t *pool = pool_or_process(param);
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    void *p = NULL;
    /* 0 bytes (from a C caller): a distinct pointer, as from cudaMalloc. */
    if (!pool || ump_alloc(pool, size ? size : 1, &h, &p))
        return NULL; /* CuPy raises OutOfMemoryError */
    return p;
}

EXPORT void umpool_cupy_free(void *param, void *ptr, int device)
{
    (void)device;
    ump_pool_t *pool = pool_or_process(param);
    /* CuPy frees without synchronizing (cudaFree used to do it): the
     * memory is reused once the work queued on the legacy default stream
     * is done, which waits for every blocking stream's (CuPy's streams
     * are blocking unless made otherwise). CFunctionAllocator passes no
     * stream, so a non-blocking stream's work cannot be waited for here
     * (README: bindings). A bad pointer: logged, nothing changes. */
    if (pool)
        ump_free_async(pool, ptr, NULL);
}
