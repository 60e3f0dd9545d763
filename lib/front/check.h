/*
 * The checks at the top of every public call, shared by the files of the
 * front end: a NULL pool, a pool inherited across fork(), a pointer the
 * pool cannot free. Each logs one line where it is found.
 */
#ifndef UMP_FRONT_CHECK_H
#define UMP_FRONT_CHECK_H

#include "front/registry.h"
#include "mem/pool.h"

/* Logs why a pool was refused (NULL, or inherited across fork). */
int pool_refused(int rc, const char *fn);

/* A device failure the backend told (pool->failing) and the pool has not
 * handled yet: handles it (front/failure.c). Takes pool->lock. */
void pool_handle_failures(ump_pool_t *pool);

/* The common check at the top of every public call: NULL pool is -EINVAL,
 * a pool inherited across fork() -ENOTRECOVERABLE, each with a log line.
 * A device failure not yet handled is handled here, first: the call then
 * runs on a pool that knows it. */
static inline int pool_check(const ump_pool_t *pool, const char *fn)
{
    int rc = 0;
    if (ump_unlikely(!pool))
        rc = -EINVAL;
    else if (ump_unlikely(pool->fork_gen !=
                          atomic_load_explicit(&fork_generation,
                                               memory_order_relaxed)))
        rc = -ENOTRECOVERABLE;
    if (ump_likely(!rc)) {
        ump_pool_t *p = (ump_pool_t *)pool;
        if (ump_unlikely(atomic_load_explicit(&p->failing,
                                              memory_order_relaxed) !=
                         atomic_load_explicit(&p->failed,
                                              memory_order_relaxed)))
            pool_handle_failures(p);
        return 0;
    }
    return pool_refused(rc, fn);
}

/* Has no device of the pool failed (handled or not)? The hot path's test
 * of the rare states (ump_free's cached path, and with pool_quiet
 * ump_alloc's): after a device failure every call takes the full path,
 * slower, and the failure is rare. One load: the handled bits (failed)
 * are a subset of the told ones (failing), which only grow
 * (front/failure.c takes failed from failing). A pool inherited across
 * fork needs no test: the child forgets its thread's caches (registry.c),
 * so the cached paths, which start from the thread's cache of the pool,
 * miss and take the full path, which refuses the pool. pool not NULL. */
static inline bool pool_no_failure(const ump_pool_t *pool)
{
    return ump_likely(!atomic_load_explicit(
        &((ump_pool_t *)pool)->failing, memory_order_relaxed));
}

/* pool_no_failure, and the pool not suspended (device memory is not
 * served then: ump_alloc's full path says so): the rare states of an
 * allocation of device memory in one branch. */
static inline bool pool_quiet(const ump_pool_t *pool)
{
    ump_pool_t *p = (ump_pool_t *)pool;
    uint32_t rare =
        atomic_load_explicit(&p->failing, memory_order_relaxed) |
        (uint32_t)atomic_load_explicit(&p->suspended, memory_order_relaxed);
    return ump_likely(!rare);
}

/* rc of a backend call: an -EIO that came with a device failure has the
 * failure handled before the caller sees it. */
static inline int pool_io_result(ump_pool_t *pool, int rc)
{
    if (ump_unlikely(rc == -EIO) &&
        atomic_load(&pool->failing) != atomic_load(&pool->failed))
        pool_handle_failures(pool);
    return rc;
}

/* Logs "fn: ptr is why" and returns -EINVAL (a pointer the pool cannot
 * free or look up). */
int pool_bad_pointer(const void *ptr, const char *fn, const char *why);

#endif
