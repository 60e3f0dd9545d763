/*
 * The traffic a pool puts on the machine's links: bytes per link direction
 * (source location to destination location), counted by what moved them,
 * since the pool was created. The tiers count their moves (lib/tier/move.c),
 * the collectives their transfers (lib/coll); ump_link_stats reads them.
 * With them, the collectives' calls, data and time (ump_coll_stats).
 *
 * A location is a device index, or one of the places below the devices.
 * Their indexes are fixed (UMP_MAX_DEVICES + k), not ndev + k, so that the
 * table reads the same for every pool and a device index is its own slot.
 *
 * Counters are relaxed atomics: writers are the pool's threads, stream
 * workers and the tier workers, often with no lock held, and one add per
 * transfer (a chunk, a step of a collective) is nothing beside the copy.
 * A reader sees each counter whole; two counters read together may be one
 * transfer apart, as with every statistic of a running pool.
 */
#ifndef UMP_TRAFFIC_H
#define UMP_TRAFFIC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "umpool.h"

#define TRAFFIC_HOST (UMP_MAX_DEVICES + 0) /* host DRAM (pinned, staging) */
#define TRAFFIC_NVME (UMP_MAX_DEVICES + 1) /* the NVMe tier's files */
#define TRAFFIC_NET (UMP_MAX_DEVICES + 2)  /* other processes (a data engine) */
#define TRAFFIC_NLOC (UMP_MAX_DEVICES + 3)

/* What moved the bytes (ump_link_stats_t's fields). */
enum { TRAFFIC_TIER = 0, TRAFFIC_COLL = 1, TRAFFIC_NCAUSES = 2 };

struct traffic {
    _Atomic uint64_t bytes[TRAFFIC_NCAUSES][TRAFFIC_NLOC][TRAFFIC_NLOC];
};

/* Adds bytes moved from location src to location dst; a transfer within
 * one location (a device's own memory) crosses no link and is not
 * counted, nor is a location out of range. */
static inline void traffic_add(struct traffic *t, int cause, int src, int dst,
                               size_t bytes)
{
    if (src == dst || src < 0 || dst < 0 || src >= TRAFFIC_NLOC ||
        dst >= TRAFFIC_NLOC || !bytes)
        return;
    atomic_fetch_add_explicit(&t->bytes[cause][src][dst], bytes,
                              memory_order_relaxed);
}

/* Collectives that ran to the end, per UMP_COLL_* (ump_coll_stats_t's
 * fields; lib/coll counts them, with no lock). */
#define TRAFFIC_NCOLL (UMP_COLL_SCATTER + 1)
struct coll_ctr {
    _Atomic uint64_t calls, bytes, timed_calls, timed_bus_bytes, timed_ns;
};

static inline uint64_t traffic_get(const struct traffic *t, int cause,
                                   int src, int dst)
{
    return atomic_load_explicit(&((struct traffic *)t)->bytes[cause][src][dst],
                                memory_order_relaxed);
}

#endif
