/*
 * Publication of a pool's statistics for umpool-inspect (the segment's
 * layout is in snapshot.h), and what stats.c offers the publisher.
 *
 * A background thread per pool refreshes the segment at most every 100 ms
 * while someone reads it (the reader bumps the segment's request word and
 * wakes the thread through it, a futex), every second otherwise; each
 * refresh holds the pool lock for one walk of the pool's memory, with no
 * allocation under it. Nothing is added to the allocation paths.
 *
 * The segment can be written by any process of the user: the publisher
 * keeps its layout to itself, writes with pwrite() and reads nothing back
 * but the request word, so that a scribbled or shrunk segment can neither
 * corrupt the program's memory nor kill it; it stops publishing (with a
 * warning) when the file is shrunk or removed under it.
 */
#ifndef UMP_PUBLISH_H
#define UMP_PUBLISH_H

#include <stddef.h>

#include "pool.h"
#include "snapshot.h"

/* Creates the pool's segment, writes a first snapshot and starts the
 * thread (the caller checks cfg.publish). Logs a warning and returns a
 * negative errno when it cannot: the pool works without it. */
int publish_start(ump_pool_t *pool);
/* Stops the thread and removes the segment; nothing when the pool was
 * not published. In a child after fork() it only drops the child's copy
 * (the thread and the segment belong to the parent). */
void publish_stop(ump_pool_t *pool);

/* ---- stats.c ---------------------------------------------------------- */

/* The pool's coarse clock (pool->clock, tenths of a second since
 * creation), which allocations copy into their run with no system call:
 * the publisher ticks it every 100 ms, the slow path of allocations and
 * the readers of ages whenever they run. */
void stats_clock_init(ump_pool_t *pool);
uint32_t stats_clock_tick(ump_pool_t *pool);

/* One device's figures (ump_stats for one device). Pool lock held. */
void stats_device(ump_pool_t *pool, int d, ump_stats_t *st);

/* A stretch of granules of one device in one state (enum snap_state). g
 * is SIZE_MAX for memory with no address: idle chunks, capacity not yet
 * created. run is the live allocation it belongs to, else NULL. */
struct stats_piece {
    size_t g, n;
    int device;
    unsigned state;
    const struct run *run;
};
typedef void (*stats_walk_fn)(void *arg, const struct stats_piece *p);
/* Calls fn for the pool's mapped memory in address order, then for each
 * device's idle chunks and uncreated capacity. Pool lock held. */
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
