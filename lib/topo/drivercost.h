/*
 * What the driver's calls cost, as measured on an H200 (CUDA 13, driver
 * 580): the table in DESIGN.md and the probe of issue 29. One table
 * (drivercost.c), three users: the sim backend, which accounts the
 * device-handle costs as modeled driver time when sim_driver_costs:h200 is
 * set and also waits for every cost (host handles, copies and syncs too)
 * with sim_driver_costs:h200-timed; the memory layer, which chooses between
 * remapping cached chunks and creating new ones with the same figures on
 * every backend (a choice made from a model, not from timing this run, so
 * it is the same on sim and on a GPU and tests can pin it down); and
 * umpool-bench, whose baselines on the timed sim are the pinned copies of
 * this model.
 *
 * Virtual-memory calls cost per handle, not per call: cuMemSetAccess over
 * a range of 512 handles costs 512 times one handle.
 *  - Device handles: between measured sizes, costs are interpolated
 *    linearly in log2(size); beyond the smallest and the largest measured
 *    size they stay flat. The driver's per-handle bookkeeping, not the
 *    bytes, dominates (set access of one 1 GiB handle: 86 us, of 512 of
 *    2 MiB: 17 ms). Unmap and release were measured for 2 MiB handles only:
 *    larger handles are assumed to cost the same.
 *  - Host handles (pinned HOST_NUMA memory): the bytes dominate (pinning at
 *    about 4 GB/s, the CPU's page tables), so costs are interpolated
 *    linearly in the size between measured points and grow at the last
 *    segment's rate per byte beyond the largest one; below the smallest
 *    (the 2 MiB granularity) they stay flat.
 */
#ifndef UMP_DRIVERCOST_H
#define UMP_DRIVERCOST_H

#include <stddef.h>
#include <stdint.h>

enum drv_op {
    DRV_CREATE,     /* cuMemCreate */
    DRV_MAP,        /* cuMemMap */
    DRV_SET_ACCESS, /* cuMemSetAccess for devices, per handle in the range */
    DRV_UNMAP,      /* cuMemUnmap */
    DRV_RELEASE,    /* cuMemRelease */
    /* cuMemSetAccess for devices and the CPU, per handle: host handles
     * only (a device handle has no CPU mapping to make, and costs what
     * DRV_SET_ACCESS does) */
    DRV_SET_ACCESS_CPU,
    /* cuMemUnmap of a host handle mapped where only devices were given
     * access (no CPU page tables to tear down); a device handle's unmap */
    DRV_UNMAP_NOCPU,
    DRV_NOPS
};

/* Modeled nanoseconds of op on one device handle of `bytes`. */
uint64_t drvcost_ns(enum drv_op op, size_t bytes);

/* Modeled nanoseconds of op on one pinned host (HOST_NUMA) handle of
 * `bytes`. */
uint64_t drvcost_host_ns(enum drv_op op, size_t bytes);

/* What is not per handle: copies, syncs, reservations. */
struct drvcost_misc {
    uint64_t reserve_ns;  /* cuMemAddressReserve, any size */
    uint64_t sync_ns;     /* cuStreamSynchronize of an empty stream */
    uint64_t copy_lat_ns; /* from queueing a copy until its bytes move */
    uint64_t copy_gap_ns; /* a copy's time on its link beyond its bytes */
    double host_vmm_gbs;  /* device <-> HOST_NUMA VMM memory, each way */
    double pinned_gbs;    /* device <-> cuMemAllocHost memory, each way */
    double pageable_gbs;  /* pageable host memory -> device */
    double local_gbs;     /* a device's memory traffic: a copy on one
                             device moves 2 bytes (read, write) per byte */
    double register_gbs;  /* cuMemHostRegister of malloc'd memory */
    double unregister_gbs; /* cuMemHostUnregister */
};

extern const struct drvcost_misc drvcost_h200;

/* Nanoseconds for `bytes` at gbs GB/s (1e9 bytes per second); 0 when gbs
 * is not positive. */
uint64_t drvcost_bytes_ns(size_t bytes, double gbs);

/* Making a new device handle of `bytes` usable: create + map + set access. */
static inline uint64_t drvcost_create_ns(size_t bytes)
{
    return drvcost_ns(DRV_CREATE, bytes) + drvcost_ns(DRV_MAP, bytes) +
           drvcost_ns(DRV_SET_ACCESS, bytes);
}

/* Moving a mapped device handle of `bytes` to new addresses: unmap + map +
 * set access. */
static inline uint64_t drvcost_remap_ns(size_t bytes)
{
    return drvcost_ns(DRV_UNMAP, bytes) + drvcost_ns(DRV_MAP, bytes) +
           drvcost_ns(DRV_SET_ACCESS, bytes);
}

/* Giving a mapped device handle of `bytes` back: unmap + release. */
static inline uint64_t drvcost_drop_ns(size_t bytes)
{
    return drvcost_ns(DRV_UNMAP, bytes) + drvcost_ns(DRV_RELEASE, bytes);
}

#endif
