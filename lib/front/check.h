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

/* The common check at the top of every public call: NULL pool is -EINVAL,
 * a pool inherited across fork() -ENOTRECOVERABLE, each with a log line. */
static inline int pool_check(const ump_pool_t *pool, const char *fn)
{
    int rc = 0;
    if (ump_unlikely(!pool))
        rc = -EINVAL;
    else if (ump_unlikely(pool->fork_gen !=
                          atomic_load_explicit(&fork_generation,
                                               memory_order_relaxed)))
        rc = -ENOTRECOVERABLE;
    return ump_likely(!rc) ? 0 : pool_refused(rc, fn);
}

/* Logs "fn: ptr is why" and returns -EINVAL (a pointer the pool cannot
 * free or look up). */
int pool_bad_pointer(const void *ptr, const char *fn, const char *why);

#endif
