/*
 * Eviction policy: which segment moves where when the pool moves memory by
 * itself (coldest first, offloadable and unpinned only), making room on a
 * device or the host tier, bringing segments up, and the watermarks. Pool
 * lock held on entry and return for all; dropped while moves copy.
 */
#ifndef UMP_TIER_EVICT_H
#define UMP_TIER_EVICT_H

#include "tier/tier.h"

/* Rounds of evict_up that find no room on its device before -ENOMEM. */
#define EVICT_UP_ROUNDS 8

/* Is device d in use (mapped, not in cached blocks) above its high
 * watermark? */
bool evict_above_high(const ump_pool_t *pool, int d);
/* Moves offloadable host segments to NVMe until the host tier has room
 * for n granules, waiting for host memory being pinned. -ENOSPC when it
 * cannot. */
int evict_host_room(ump_pool_t *pool, size_t n);
/* Moves s down one step the pool chooses: to the host tier while it has
 * (or can make) room, else to NVMe. -EBUSY when s was acquired meanwhile. */
int evict_down(ump_pool_t *pool, struct seg *s);
/* Makes room for the request pr (see offload_make_room). */
int evict_make_room(ump_pool_t *pool, const struct place_req *pr);
/* Brings s onto a device that `device` reaches (see ump_acquire); device
 * may be TIER_DEST_HOME. The caller keeps s's run busy. */
int evict_up(ump_pool_t *pool, struct seg *s, int device);
/* Where memory whose home device failed comes up (its data survived on a
 * lower tier): device, if it is one and works, else the working device
 * with the most room; -1 when none works. */
int evict_working_device(ump_pool_t *pool, int device);
/* Moves down, now, what the queued prefetches will need room for on each
 * device (the eviction worker's, ahead of the prefetch worker). */
void evict_prefetch_room(ump_pool_t *pool);
/* Watermarks: a device above the high one drains down to the low one. */
void evict_watermarks(ump_pool_t *pool);

#endif
