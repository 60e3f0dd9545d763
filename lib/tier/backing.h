/*
 * Backings: the memory that holds a segment's data on a device (chunks of
 * the memory layer) or on the host tier (pinned pieces), and mapping it at
 * granules of the pool's addresses. Besides mem/chunks.c, the only caller
 * of the backend's map / unmap / set_access. Pool lock held for all.
 */
#ifndef UMP_TIER_BACKING_H
#define UMP_TIER_BACKING_H

#include "tier/tier.h"

struct backing {
    int tier;              /* UMP_TIER_DEVICE or UMP_TIER_HOST */
    int dev;               /* DEVICE: the device */
    struct chunk **dc;     /* DEVICE: chunks in address order */
    size_t ndc;
    struct hpiece *host;   /* HOST: pieces */
    bool unmapped;         /* HOST: a segment's, not mapped (seg.unmapped):
                            * backing_unmap has nothing to do */
};

/* Forgets b (the array of chunks is freed, not the memory). */
void backing_clear(struct backing *b);
/* New memory for n granules on device dev (tier DEVICE) or the host tier
 * (near NUMA node `node`). On error nothing is held. May drop the pool lock
 * (pinning host memory). */
int backing_get(ump_pool_t *pool, int tier, int dev, int node, size_t n,
                struct backing *b);
/* The backing of segment s, which is on a device or the host; -ENOMEM. */
int backing_of(ump_pool_t *pool, const struct seg *s, struct backing *b);
/* Gives an unmapped backing back: chunks become idle, pieces free. */
void backing_put(ump_pool_t *pool, struct backing *b);
/* Maps b at granules [g, g+n) and gives access. All or nothing: on error
 * nothing of b stays mapped (unless the driver refuses to undo, logged). */
int backing_map(ump_pool_t *pool, struct backing *b, size_t g, size_t n);
/* Unmaps b from granule g on; its memory is kept. All or nothing: when the
 * driver refuses one piece, those unmapped before it are mapped back. */
int backing_unmap(ump_pool_t *pool, struct backing *b, size_t g);
/* Device memory mapped where it is and, at the same time, at granules
 * [g, g+n) (a handle may be mapped at several addresses), for a swap
 * (move.c): the granule table and the mapped bytes keep it where it was
 * until backing_rehome. backing_alias maps (all or nothing, as
 * backing_map), backing_unalias unmaps that second mapping. */
int backing_alias(ump_pool_t *pool, struct backing *b, size_t g, size_t n);
int backing_unalias(ump_pool_t *pool, struct backing *b, size_t g);
/* b, unmapped from where it was (backing_unmap), is at its alias at g:
 * the granule table and the mapped bytes say so now. */
void backing_rehome(ump_pool_t *pool, struct backing *b, size_t g);

#endif
