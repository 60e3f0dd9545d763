/*
 * Moves: copy-then-switch of one claimed segment (res_move_begin) between
 * device memory, the host tier and NVMe. Which segment moves where, and
 * making room for it, is evict.c's. Pool lock held on entry and return;
 * dropped for the copy or the disk I/O.
 *
 * On error the data stays where it was and usable, and the destination's
 * memory is given back (unless the driver refuses to undo, logged).
 */
#ifndef UMP_TIER_MOVE_H
#define UMP_TIER_MOVE_H

#include "tier/tier.h"

/* A host-tier segment whose pieces the driver refused to map back
 * (seg.unmapped) is mapped at its address again, for work that reads it
 * there; 0 when it is mapped already. Pool lock held. */
int move_host_remap(ump_pool_t *pool, struct seg *s);

/* Moves claimed s, on a device or the host, to device dev (tier DEVICE)
 * or to the host tier (dev -1). -ENOMEM when there is no room there. */
int move_mem(ump_pool_t *pool, struct seg *s, int tier, int dev);
/* Pieces a swap's copies go in (move_swap): each of x's goes up as soon
 * as v's of the same place is down. */
#define SWAP_PIECES 4
/* Brings claimed x, on the host tier, into the device memory of v, a
 * segment of x's size on device dev that the pool may move, which goes to
 * the host tier in its place, with the driver's calls run while the copies
 * do (move.c says how). v is claimed here. -EAGAIN when it cannot be done
 * after all (v acquired or freed meanwhile, no host room): nothing moved. */
int move_swap(ump_pool_t *pool, struct seg *x, struct seg *v, int dev);
/* Moves claimed s, on a device or the host, to NVMe. -ENOSPC when there is
 * no NVMe tier or it is full, -EIO when the disk fails. */
int move_to_nvme(ump_pool_t *pool, struct seg *s);
/* Moves claimed s from NVMe to device dev (tier DEVICE) or the host tier;
 * the data is checked (crc32c) before it is used. -EIO when the disk fails
 * or the data is corrupt (s stays on NVMe), -ENOMEM without room. */
int move_from_nvme(ump_pool_t *pool, struct seg *s, int tier, int dev);
/* Device d's internal stream for moves in direction dir (DIR_DOWN,
 * DIR_UP), made on first use. Pool lock held. */
int move_stream_get(ump_pool_t *pool, int d, int dir, void **s_p);
/* Counts the copy of n granules from (from_tier, from_dev) to (tier, dev)
 * in the pool's link traffic (mem/traffic.h): once per link it crossed.
 * Any lock or none. */
void move_traffic(ump_pool_t *pool, int from_tier, int from_dev, int tier,
                  int dev, size_t n);
/* Destroys the devices' internal streams (pool teardown). */
void move_streams_destroy(ump_pool_t *pool, struct offload *o);

#endif
