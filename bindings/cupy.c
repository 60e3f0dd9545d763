/*
 * CuPy's C allocator (cupy.cuda.memory.CFunctionAllocator): malloc and
 * free with the signatures it calls. param is a pool (ump_pool_t *), or
 * NULL for the process's pool (ump_process_pool). CuPy frees only memory
 * whose last use it has synchronized (its own allocator's rule), so the
 * free is immediate.
 *
 * Above the public API only, like the tools.
 */
#include "config.h"

#include <stddef.h>

#include "umpool.h"
#include "umpool_bindings.h"

#define EXPORT __attribute__((visibility("default")))

static ump_pool_t *pool_or_process(void *param)
{
    ump_pool_t *p = param;
    if (!p && ump_process_pool(NULL, &p))
        return NULL;
    return p;
}

EXPORT void *umpool_cupy_malloc(void *param, size_t size, int device)
{
    ump_pool_t *pool = pool_or_process(param);
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    void *p = NULL;
    /* CuPy asks for 0 bytes too: a distinct pointer, as from cudaMalloc. */
    if (!pool || ump_alloc(pool, size ? size : 1, &h, &p))
        return NULL; /* CuPy raises OutOfMemoryError */
    return p;
}

EXPORT void umpool_cupy_free(void *param, void *ptr, int device)
{
    (void)device;
    ump_pool_t *pool = pool_or_process(param);
    if (pool)
        ump_free(pool, ptr); /* a bad pointer: logged, nothing changes */
}
