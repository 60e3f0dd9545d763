/*
 * The pool's statistics (ump_stats, ump_largest_allocs, ...), and the walks
 * the statistics publisher (lib/publish) reads the pool with.
 */
#ifndef UMP_FRONT_STATS_H
#define UMP_FRONT_STATS_H

#include <stddef.h>

#include "mem/pool.h"

/* One place's figures (ump_stats for one device; a host place has no
 * tier figures and no driver time). Pool lock held. */
void stats_device(ump_pool_t *pool, int d, ump_stats_t *st);
/* Overwrites in st the figures of the whole pool that are not the sum of
 * its devices': peak_bytes and peak_reserved_bytes (devices peak at other
 * times) and driver_ns (the backend's total; cuda does not split it by
 * device). Pool lock held. */
void stats_pool_wide(ump_pool_t *pool, ump_stats_t *st);

/* The state of a stretch of a device's memory. The snapshot format keeps
 * the same numbers (lib/publish checks it at compile time). */
enum stats_state {
    STATS_USED = 0,   /* live allocations on the device */
    STATS_CACHED = 1, /* mapped or created, held for reuse (ump_trim) */
    STATS_FREE = 2,   /* capacity with no chunk created */
    STATS_HOST = 3,   /* the device's allocations now on the host tier */
    STATS_NVME = 4,   /* ... and on NVMe */
    STATS_NSTATES = 5,
};

/* A stretch of granules of one device in one state (enum stats_state). g
 * is SIZE_MAX for memory with no address: idle chunks, capacity not yet
 * created. run is the live allocation it belongs to, else NULL. */
struct stats_piece {
    size_t g, n;
    int device;
    unsigned state;
    const struct run *run;
};
typedef void (*stats_walk_fn)(void *arg, const struct stats_piece *p);
/* Calls fn for the devices' mapped memory in address order (the host
 * places' is not walked: ump_stats with UMP_LOC_HOST has their figures),
 * then for each device's idle chunks and uncreated capacity. Pool lock
 * held. */
void stats_walk(ump_pool_t *pool, stats_walk_fn fn, void *arg);
/* The largest live runs of device (or UMP_DEVICE_ALL) into out, largest
 * first; returns how many (at most max). Pool lock held. */
size_t stats_largest(ump_pool_t *pool, int device, ump_alloc_info_t *out,
                     size_t max);

/* stats_largest in pieces, for a caller that needs the same walk for more:
 * stats_top_init (pool lock held), stats_top_add for each piece of the
 * walk (lock held; it allocates nothing), then stats_top_end, which sorts
 * out and returns how many it holds (no lock needed). */
struct stats_top {
    ump_pool_t *pool;
    int device;
    ump_alloc_info_t *out;
    size_t max, k;
    uint32_t now;
};
void stats_top_init(struct stats_top *t, ump_pool_t *pool, int device,
                    ump_alloc_info_t *out, size_t max);
void stats_top_add(struct stats_top *t, const struct stats_piece *p);
size_t stats_top_end(struct stats_top *t);

#endif
