#include "config.h"

#include "topo/drivercost.h"

/*
 * The one table of what the driver costs on an H200 (CUDA 13, driver 580).
 * Sources, cited per number below:
 *   [D] DESIGN.md's table of facts measured on an H200;
 *   [P] issue 29's probe on the same H200 (per 2 MiB handle unless it
 *       says otherwise);
 *   [U] umpool's own run on that H200 (umpool-bench offload, backend
 *       cuda, 1 GiB, 36d53ac: evict to host 8.7-10.4 GB/s, acquire from
 *       host 23.4-27.1 GB/s), used only for the two host-handle points
 *       the probe did not measure, solved from the moves' call sequence
 *       (see host_unmap_pts and host_cpu_pts).
 * Where a source gives a range, its middle.
 */

/* One measured point: a handle size (log2 bytes) and its cost in ns. */
struct point {
    unsigned lg;
    uint32_t ns;
};

/* --- device handles (log2 interpolation, flat outside) ------------------ */

/* cuMemCreate 2 MiB / 64 MiB / 1 GiB: 13.5 / 39 / 28 us [D]. ([P] has 15.0
 * us at 2 MiB; the table keeps [D]'s, which the memory layer's choices
 * were made with: the probe's figure is within the noise of the two.) */
static const struct point create_pts[] = {{21, 13500}, {26, 39000},
                                          {30, 28000}};
/* cuMemMap per handle: 1-1.6 us [D]. */
static const struct point map_pts[] = {{21, 1300}};
/* cuMemSetAccess for devices: 28-38 us per 2 MiB handle, also when one
 * call covers 512 [D] (34 us, 20.8 ms for 512 in one call [P]: inside
 * that range); one 1 GiB handle 86 us [D][P]. */
static const struct point access_pts[] = {{21, 33000}, {30, 86000}};
/* cuMemUnmap per 2 MiB handle: 19-24 us [D]. */
static const struct point unmap_pts[] = {{21, 21500}};
/* cuMemRelease per 2 MiB handle: 14-16 us [D] (16.7 us [P]). */
static const struct point release_pts[] = {{21, 15000}};

/* --- host handles, HOST_NUMA (linear in bytes) --------------------------- */

/* cuMemCreate on HOST_NUMA, pinning: 506 us per 2 MiB handle in a batch
 * of 512 [P][D], 22 ms for 64 MiB [D], 336 ms for 1 GiB in one handle
 * [P][D]: about 3-4 GB/s, linear in the bytes as the three points show
 * (64 MiB interpolated between the other two: 20.9 ms). The batch figure
 * is the steady cost; a lone 2 MiB create took 2.6 ms [P][D], a first
 * call's extra the model leaves out: the host tier pins in pieces of
 * 64 MiB and more, where it is under a tenth of the cost. */
static const struct point host_create_pts[] = {
    {21, 506000}, {26, 22000000}, {30, 336000000}};
/* No map of a host handle was timed alone: the device's (1-1.6 us [D]). */
static const struct point host_map_pts[] = {{21, 1300}};
/*
 * cuMemUnmap of a host handle the CPU maps. 2 MiB: 25.6 us, the probe's
 * unmap + map of 26.9 us [P] less the map. 1 GiB: 22.4 ms, not probed:
 * solved from [U]. ump_acquire from the host tier makes exactly one
 * host-handle call the probe did not time, the unmap of the 1 GiB host
 * handle at the allocation's address (besides two device maps and set
 * accesses of 1 GiB, 2 x 87.3 us, one device unmap, 21.5 us, and the copy
 * at host_vmm_gbs, 19.9 ms); its middle, 25.25 GB/s, is 42.5 ms, which
 * leaves 22.4 ms for that unmap: 85 ns per 4 KiB page, what tearing down
 * a CPU mapping of pinned pages costs.
 */
static const struct point host_unmap_pts[] = {{21, 25600}, {30, 22400000}};
/* cuMemRelease of a host handle: 73.5 us per 2 MiB, 31 ms for 1 GiB
 * [P][D]. */
static const struct point host_release_pts[] = {{21, 73500}, {30, 31000000}};
/*
 * cuMemSetAccess of a host handle for the devices and the CPU. 2 MiB:
 * 164 us per handle (84 ms for 1 GiB of them in one call) [P][D]. 1 GiB
 * in one handle: 35.0 ms, not probed: solved from [U]. ump_evict to the
 * host tier maps the 1 GiB host handle twice (a staging address for the
 * copy, then the allocation's), each with this set access, unmaps it once
 * from the staging address (22.4 ms, above), unmaps the device handle
 * (21.5 us) and copies (19.9 ms); its middle, 9.55 GB/s, is 112.4 ms,
 * which leaves 2 x 35.0 ms. Per byte that is under half of what 512
 * handles of 2 MiB cost, as for device access (86 us for one 1 GiB
 * handle, 17 ms for 512 of 2 MiB).
 */
static const struct point host_cpu_pts[] = {{21, 164000}, {30, 35000000}};

struct curve {
    const struct point *p;
    unsigned n;
};

#define CURVE(a) {a, sizeof(a) / sizeof(a[0])}

static const struct curve dev_table[DRV_NOPS] = {
    [DRV_CREATE] = CURVE(create_pts),
    [DRV_MAP] = CURVE(map_pts),
    [DRV_SET_ACCESS] = CURVE(access_pts),
    [DRV_UNMAP] = CURVE(unmap_pts),
    [DRV_RELEASE] = CURVE(release_pts),
    /* no CPU mapping to make or undo: devices only */
    [DRV_SET_ACCESS_CPU] = CURVE(access_pts),
    [DRV_UNMAP_NOCPU] = CURVE(unmap_pts),
};

static const struct curve host_table[DRV_NOPS] = {
    [DRV_CREATE] = CURVE(host_create_pts),
    [DRV_MAP] = CURVE(host_map_pts),
    /* Devices only (the CPU not named): the GPU's page tables, taken to
     * cost what they cost for device memory [D]; not probed apart. */
    [DRV_SET_ACCESS] = CURVE(access_pts),
    [DRV_UNMAP] = CURVE(host_unmap_pts),
    [DRV_RELEASE] = CURVE(host_release_pts),
    [DRV_SET_ACCESS_CPU] = CURVE(host_cpu_pts),
    /* Mapped for the devices only, a host handle has no CPU mapping to
     * tear down, which is what host_unmap_pts' bytes pay for: taken to
     * cost a device handle's unmap (not probed apart; scripts/gpu-check's
     * bench on the H200 tells). */
    [DRV_UNMAP_NOCPU] = CURVE(unmap_pts),
};

/* --- what is not per handle ---------------------------------------------- */

const struct drvcost_misc drvcost_h200 = {
    /* cuMemAddressReserve of 1 TiB of VA: 15 us [D]. */
    .reserve_ns = 15000,
    /* An empty stream sync: 0.3 us [P][D]. */
    .sync_ns = 300,
    /* A 4-32 KiB device copy and its sync: 8-10 us [P][D]; 9 us less the
     * sync and copy_gap_ns is the latency from queueing a copy until its
     * bytes move (overlapped by copies queued behind it). */
    .copy_lat_ns = 7200,
    /* Device <-> HOST_NUMA VMM memory: 54 GB/s each way for 1 GiB, 52 GB/s
     * in 2 MiB pieces [P][D]: 1.5 us more per piece, each copy's time on
     * the link beyond its bytes. */
    .copy_gap_ns = 1500,
    .host_vmm_gbs = 54.0,
    /* Device <-> pinned memory (cuMemAllocHost), PCIe Gen5 x16: 55.2 GB/s
     * each way, the baseline of umpool-bench offload on the H200 [P] (55
     * [D]). */
    .pinned_gbs = 55.2,
    /* Pageable host -> device: 6.9 GB/s [D]. Not charged by the sim, which
     * takes memory outside its reservations as registered (the pool's
     * bounce buffers are, on cuda). */
    .pageable_gbs = 6.9,
    /* Device -> device copy on one device, read + write: 3.9 TB/s [D]. */
    .local_gbs = 3900.0,
    /* cuMemHostRegister of 1 GiB of malloc'd memory: 38.8 ms, 27.7 GB/s
     * [P][D]; cuMemHostUnregister: 19.9 ms [D]. Not charged by the sim,
     * which has no host_register. */
    .register_gbs = 27.7,
    .unregister_gbs = 53.96,
};

/* --- interpolation --------------------------------------------------------- */

/* log2(bytes) in 1/1024ths, for interpolating between points. */
static uint64_t lg_fixed(size_t bytes)
{
    if (bytes < 2)
        return 0;
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)bytes);
    /* The fraction from the bits below the top one: linear in between, a
     * fine enough curve for a cost model. */
    uint64_t rest = lg >= 10 ? (bytes >> (lg - 10)) & 1023
                             : ((uint64_t)bytes << (10 - lg)) & 1023;
    return ((uint64_t)lg << 10) | rest;
}

/* Device handles: linear in log2(size) between points, flat outside. */
static uint64_t interp_log(const struct curve *c, size_t bytes)
{
    const struct point *p = c->p;
    uint64_t x = lg_fixed(bytes);
    if (x <= (uint64_t)p[0].lg << 10)
        return p[0].ns;
    for (unsigned i = 1; i < c->n; i++) {
        uint64_t x1 = (uint64_t)p[i].lg << 10, x0 = (uint64_t)p[i - 1].lg << 10;
        if (x <= x1) {
            int64_t y0 = p[i - 1].ns, y1 = p[i].ns;
            return (uint64_t)(y0 + (y1 - y0) * (int64_t)(x - x0) /
                                       (int64_t)(x1 - x0));
        }
    }
    return p[c->n - 1].ns;
}

/* Host handles: linear in the size between points (in KiB, so that the
 * products fit 64 bits up to terabytes), the last segment's slope beyond
 * the largest point, flat below the smallest. A one-point curve is flat. */
static uint64_t interp_bytes(const struct curve *c, size_t bytes)
{
    const struct point *p = c->p;
    uint64_t x = (uint64_t)bytes >> 10;
    if (c->n == 1 || x <= ((uint64_t)1 << p[0].lg) >> 10)
        return p[0].ns;
    unsigned i = 1;
    while (i < c->n - 1 && x > ((uint64_t)1 << p[i].lg) >> 10)
        i++;
    uint64_t x0 = ((uint64_t)1 << p[i - 1].lg) >> 10;
    uint64_t x1 = ((uint64_t)1 << p[i].lg) >> 10;
    int64_t y0 = p[i - 1].ns, y1 = p[i].ns;
    return (uint64_t)(y0 + (y1 - y0) * (int64_t)(x - x0) / (int64_t)(x1 - x0));
}

uint64_t drvcost_ns(enum drv_op op, size_t bytes)
{
    if ((unsigned)op >= DRV_NOPS)
        return 0;
    return interp_log(&dev_table[op], bytes);
}

uint64_t drvcost_host_ns(enum drv_op op, size_t bytes)
{
    if ((unsigned)op >= DRV_NOPS)
        return 0;
    /* Device-only access follows the device table's curve (log2). */
    if (host_table[op].p == access_pts)
        return interp_log(&host_table[op], bytes);
    return interp_bytes(&host_table[op], bytes);
}

uint64_t drvcost_bytes_ns(size_t bytes, double gbs)
{
    if (!(gbs > 0))
        return 0;
    return (uint64_t)((double)bytes / gbs + 0.5);
}
