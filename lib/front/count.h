/*
 * The allocation and free counts of the front end (alloc.c, free.c): each
 * thread counts into its own cache's counters (tcache.h), a bin's own
 * where the size has one, so no count takes a lock shared between threads.
 * Runs a thread may cache are counted in their bin of chunk counts.
 */
#ifndef UMP_FRONT_COUNT_H
#define UMP_FRONT_COUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "front/tcache.h"
#include "mem/chunks.h"
#include "mem/pool.h"
#include "tier/offload.h"

/* What a count records: an allocation, a free, or a free taken back (a
 * deferred free that could not be queued: the allocation stays live and
 * was never freed, so the free count goes down, the allocation count
 * does not go up). */
enum { COUNT_ALLOC = 1, COUNT_FREE = -1, COUNT_UNFREE = 2 };

/* +1 or -1: the direction of the live bytes. */
static inline int live_sign(int what) { return what == COUNT_FREE ? -1 : 1; }

/* The counter `what` moves, and by how much (mod 2^64). */
static inline void count_event(_Atomic uint64_t *allocs, _Atomic uint64_t *frees,
                        int what)
{
    if (what == COUNT_ALLOC)
        ctr_add_u(allocs, 1);
    else
        ctr_add_u(frees, what == COUNT_FREE ? 1 : UINT64_MAX);
}

/* Counts one allocation, free or taken-back free (`what`, COUNT_*) of bin
 * b on device d in the owner's counters: the bin's own when it exists.
 * Between tc_enter/exit. */
static inline void count_bin(struct tcache *tc, int d, unsigned b, size_t bytes,
                      int what)
{
    struct tc_bin *bin = tcache_bin(tc, d, b);
    if (ump_likely(bin != NULL)) {
        count_event(&bin->allocs, &bin->frees, what);
        return;
    }
    struct counters *c = &tc->cnt[d];
    ctr_add_i(&c->live_bytes, live_sign(what) * (int64_t)bytes);
    count_event(&c->allocs, &c->frees, what);
}

static inline size_t run_bin(const ump_pool_t *pool, size_t n)
{
    return pool->nsmall + n - 1;
}

static inline bool run_cacheable(const struct run *r)
{
    return !r->mixed && r->n <= RUN_TCACHE_MAX;
}

/* Counts a run (what: COUNT_*). Runs a thread may cache count in their
 * bin; the others per device of their chunks (a live run's chunks do not
 * change, so no lock is needed to read them). */
static inline void count_run(ump_pool_t *pool, struct tcache *tc, struct run *r,
                      int what)
{
    size_t bytes = r->n << pool->chunk_shift;
    int sign = live_sign(what);
    tc_enter(tc);
    if (run_cacheable(r)) {
        count_bin(tc, r->device, (unsigned)run_bin(pool, r->n), bytes, what);
        tc_exit(tc);
        return;
    }
    if (!r->mixed)
        ctr_add_i(&tc->cnt[r->device].live_bytes, sign * (int64_t)bytes);
    else
        for (size_t g = r->start; g < r->start + r->n; g++)
            ctr_add_i(&tc->cnt[r->res ? offload_home(r, g - r->start)
                                      : chunks_device(pool, g)].live_bytes,
                      sign * (int64_t)pool->chunk_size);
    count_event(&tc->cnt[r->device].allocs, &tc->cnt[r->device].frees, what);
    tc_exit(tc);
}

#endif
