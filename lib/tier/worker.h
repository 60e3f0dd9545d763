/*
 * Workers: the two background threads of a pool's tiers, started on first
 * need. The prefetch worker runs the queue of ump_prefetch / WILLNEED in
 * order (moves up); the eviction worker makes the room the queued ones
 * will need, keeps the watermarks and the host reserve, when woken and
 * every WORKER_TICK_MS (moves down). Both run with
 * pool->lock held except while a move copies or they sleep.
 */
#ifndef UMP_TIER_WORKER_H
#define UMP_TIER_WORKER_H

#include "tier/tier.h"

/* How often the eviction worker looks at the watermarks. */
#define WORKER_TICK_MS 20

/* Wakes worker w (W_PREFETCH, W_EVICT), started on first need. Pool lock
 * held. */
void worker_wake(ump_pool_t *pool, int w);
/* Queues a prefetch of [ptr, ptr+size) to dest (a device, UMP_LOC_HOST or
 * TIER_DEST_HOME) and wakes the prefetch worker. Pool lock held. */
int worker_queue_prefetch(ump_pool_t *pool, void *ptr, size_t size, int dest);
/* The tracked run that queued prefetch pf names now, with the first
 * segment of its range in *s_p and the granule past the range in *g1_p;
 * NULL when the allocation is gone (freed since it was queued) or never
 * left its devices. Pool lock held. */
struct res *worker_pf_res(ump_pool_t *pool, const struct prefetch *pf,
                          struct seg **s_p, size_t *g1_p);
/* Was s acquired since pf was asked for (pf has nothing left to do for
 * it)? Pool lock held. */
bool worker_pf_stale(const struct prefetch *pf, const struct seg *s);
/* Stops and joins both workers; they do not start again. Pool lock not
 * held. */
void worker_stop(ump_pool_t *pool);
/* Frees the prefetch queue (the workers are stopped or gone). */
void worker_forget(struct offload *o);

#endif
