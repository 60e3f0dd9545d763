/*
 * Driver calls of a baseline, paced as the timed sim paces the pool's.
 *
 * On the sim, the baselines of alloc's cold column and replay's PyTorch
 * column are models of what a real driver would be asked: they make no
 * call of their own (the sim backend is not theirs to call, and tools sit
 * on the public API). Each modeled call is charged the H200's cost from
 * the one table (lib/topo/drivercost.c) and, with
 * sim_driver_costs:h200-timed, waits from its own start for that cost times
 * sim_time_scale with ump_clock_wait_until: the very wait the sim's calls
 * make (lib/backend/sim/sim_timed.c), so that both sides pay the same
 * sleep-then-spin overshoot of this machine and the ratio compares driver
 * work, not the accuracy of a timer. Without the timed sim (scale 0) the
 * costs are only summed: modeled driver time next to the pool's driver_ns.
 */
#ifndef UMP_BENCH_DRVPACE_H
#define UMP_BENCH_DRVPACE_H

#include <stddef.h>
#include <stdint.h>

#include "topo/drivercost.h"
#include "util/clock.h"

/* The modeled calls, for the counts a report shows. */
enum pace_op {
    PACE_CREATE,
    PACE_MAP,
    PACE_ACCESS, /* handles covered, one call may cover many */
    PACE_UNMAP,
    PACE_RELEASE,
    PACE_RESERVE,
    PACE_SYNC,
    PACE_NOPS
};

struct drv_pace {
    unsigned scale;        /* the sim's time scale; 0: not timed */
    uint64_t ns;           /* modeled driver time of the VMM calls on
                              device handles (create, map, set access,
                              unmap, release: what driver_ns counts) */
    uint64_t other_ns;     /* reservations and syncs */
    uint64_t n[PACE_NOPS]; /* calls, or handles for PACE_ACCESS */
};

/* One modeled call of `ns` nanoseconds (n handles for PACE_ACCESS, else
 * 1): counted, and waited for when timed. */
static inline void pace_call(struct drv_pace *p, enum pace_op op, uint64_t n,
                             uint64_t ns)
{
    uint64_t t0 = p->scale ? ump_clock_ns() : 0;

    p->n[op] += n;
    if (op == PACE_RESERVE || op == PACE_SYNC)
        p->other_ns += ns;
    else
        p->ns += ns;
    if (p->scale)
        ump_clock_wait_until(t0 + ns * p->scale);
}

/* One device handle of `bytes`: the raw sequence's three calls. */
static inline void pace_create(struct drv_pace *p, size_t bytes)
{
    pace_call(p, PACE_CREATE, 1, drvcost_ns(DRV_CREATE, bytes));
}
static inline void pace_map(struct drv_pace *p, size_t bytes)
{
    pace_call(p, PACE_MAP, 1, drvcost_ns(DRV_MAP, bytes));
}
/* cuMemSetAccess over n handles of `bytes` each, in one call: the driver
 * charges per handle. */
static inline void pace_access(struct drv_pace *p, size_t n, size_t bytes)
{
    pace_call(p, PACE_ACCESS, n, n * drvcost_ns(DRV_SET_ACCESS, bytes));
}
static inline void pace_unmap(struct drv_pace *p, size_t bytes)
{
    pace_call(p, PACE_UNMAP, 1, drvcost_ns(DRV_UNMAP, bytes));
}
static inline void pace_release(struct drv_pace *p, size_t bytes)
{
    pace_call(p, PACE_RELEASE, 1, drvcost_ns(DRV_RELEASE, bytes));
}

#endif
