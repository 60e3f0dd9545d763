/*
 * Deferred frees (ump_free_async): an allocation freed on a stream goes
 * back to the pool only once the stream's work queued before the free has
 * run. Each is a struct pending (mem/pool.h) with a backend event recorded
 * on the stream; completed ones are handed back to the caller, which frees
 * the memory (a run may be tracked by the tiers: that is the front end's
 * decision, not this layer's). The structs and their events are recycled.
 * Every function here runs with pool->lock held.
 */
#ifndef UMP_MEM_PENDING_H
#define UMP_MEM_PENDING_H

#include <stdbool.h>

#include "mem/pool.h"

/* Queues the free of meta (a slab, object idx, or a run) behind the work
 * on stream. 0 with *done_p NULL when queued, or with *done_p set when the
 * stream is idle (free it now, then pending_recycle). On error nothing is
 * queued and the backend has logged why. */
int pending_queue(ump_pool_t *pool, void *meta, uint32_t idx, bool is_slab,
                  ump_stream_t stream, struct pending **done_p);
/* Takes the deferred frees whose events have completed (all of them, after
 * waiting, when wait) off the queue, as a list linked by next. */
struct pending *pending_collect(ump_pool_t *pool, bool wait);
/* A done struct goes back for reuse, with its event. */
void pending_recycle(ump_pool_t *pool, struct pending *p);
/* Destroys the events of the recycled structs and frees them (the queue is
 * empty: the pool is being destroyed). */
void pending_fini(ump_pool_t *pool);
/* Frees every struct, queued or recycled, and touches no event: for a
 * child after fork(), whose events belong to the parent, and after
 * pending_fini. No lock needed (nobody else uses the pool). */
void pending_forget(ump_pool_t *pool);

#endif
