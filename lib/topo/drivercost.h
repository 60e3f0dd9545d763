/*
 * What the driver's virtual-memory calls cost, per call on one handle, as
 * measured on an H200 (CUDA 13, driver 580; the table in DESIGN.md). Two
 * users: the sim backend, which accounts these as modeled driver time when
 * sim_driver_costs:h200 is set, and the memory layer, which chooses between
 * remapping cached chunks and creating new ones with the same figures on
 * every backend (a choice made from a model, not from timing this run, so
 * it is the same on sim and on a GPU and tests can pin it down).
 *
 * Costs are per handle, not per byte and not per call: cuMemSetAccess over
 * a range of 512 handles costs 512 times one handle. Between measured
 * sizes, costs are interpolated linearly in log2(size); beyond the smallest
 * and the largest measured size they stay flat. Unmap and release were
 * measured for 2 MiB handles only: larger handles are assumed to cost the
 * same (the driver's per-handle bookkeeping, not the bytes, dominates).
 */
#ifndef UMP_DRIVERCOST_H
#define UMP_DRIVERCOST_H

#include <stddef.h>
#include <stdint.h>

enum drv_op {
    DRV_CREATE,     /* cuMemCreate */
    DRV_MAP,        /* cuMemMap */
    DRV_SET_ACCESS, /* cuMemSetAccess, per handle in the range */
    DRV_UNMAP,      /* cuMemUnmap */
    DRV_RELEASE,    /* cuMemRelease */
    DRV_NOPS
};

/* Modeled nanoseconds of op on one handle of `bytes`. */
uint64_t drvcost_ns(enum drv_op op, size_t bytes);

/* Making a new handle of `bytes` usable: create + map + set access. */
static inline uint64_t drvcost_create_ns(size_t bytes)
{
    return drvcost_ns(DRV_CREATE, bytes) + drvcost_ns(DRV_MAP, bytes) +
           drvcost_ns(DRV_SET_ACCESS, bytes);
}

/* Moving a mapped handle of `bytes` to new addresses: unmap + map + set
 * access. */
static inline uint64_t drvcost_remap_ns(size_t bytes)
{
    return drvcost_ns(DRV_UNMAP, bytes) + drvcost_ns(DRV_MAP, bytes) +
           drvcost_ns(DRV_SET_ACCESS, bytes);
}

/* Giving a mapped handle of `bytes` back: unmap + release. */
static inline uint64_t drvcost_drop_ns(size_t bytes)
{
    return drvcost_ns(DRV_UNMAP, bytes) + drvcost_ns(DRV_RELEASE, bytes);
}

#endif
