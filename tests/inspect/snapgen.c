#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "snapgen.h"
#include "publish/snapshot.h"
#include "umpool.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define GRAN (2 * MIB)
#define NDEV 4
#define NALLOC 3
#define MAP_CAP 256

/* One device's layout, in granules, address order; the rest is free. */
static const struct snap_run layouts[NDEV][6] = {
    {{SNAP_USED, 1024}, {SNAP_CACHED, 128}, {SNAP_USED, 1024},
     {SNAP_HOST, 512}, {SNAP_CACHED, 128}, {SNAP_USED, 7}},
    {{SNAP_USED, 256}, {SNAP_CACHED, 64}, {SNAP_USED, 256}, {SNAP_NVME, 256},
     {SNAP_CACHED, 3}, {SNAP_USED, 1}},
    {{SNAP_USED, 1}, {SNAP_CACHED, 1}},
    {{SNAP_CACHED, 0}},
};

/* The links of a PCIe box (25 GB/s between devices and to the host):
 * device 0 spilled to the host and NVMe, a ring allreduce ran over the
 * first four devices, and device 1 sent to other processes; the
 * collectives' counters to match. */
static void fill_traffic(void *buf, uint32_t ndev, uint32_t rows,
                         uint32_t map_cap, struct snap_data *d)
{
    uint32_t n = snap_nloc(ndev), host = ndev + SNAP_LOC_HOST,
             nvme = ndev + SNAP_LOC_NVME, net = ndev + SNAP_LOC_NET;
    struct snap_link *l = (struct snap_link *)(
        (char *)buf + snap_off_link(ndev, rows, map_cap));
    for (uint32_t i = 0; i < ndev; i++) {
        for (uint32_t j = 0; j < ndev; j++)
            if (i != j)
                l[i * n + j].bandwidth_gbs = 25;
        l[i * n + host].bandwidth_gbs = 25;
        l[host * n + i].bandwidth_gbs = 25;
    }
    l[0 * n + host].tier_bytes = 3 * GIB / 2;
    l[host * n + 0].tier_bytes = GIB / 2;
    l[host * n + nvme].tier_bytes = 512 * MIB;
    for (uint32_t i = 0; i < 4 && i < ndev; i++)
        l[i * n + (i + 1) % (ndev < 4 ? ndev : 4)].coll_bytes += 96 * MIB;
    if (ndev > 1)
        l[1 * n + net].coll_bytes = 8 * MIB;
    d->coll[UMP_COLL_ALLREDUCE] = (struct snap_coll){
        .calls = 40, .bytes = 40 * 64 * MIB, .timed_calls = 32,
        .timed_bus_bytes = 32 * 96 * MIB, .timed_ns = 250000000};
    d->coll[UMP_COLL_BROADCAST] = (struct snap_coll){.calls = 2,
                                                     .bytes = 2 * MIB};
}

static void fill_device(struct snap_device *d, uint32_t i, uint32_t map_cap,
                        struct snap_map *map)
{
    static const char *const pci[NDEV] = {"0000:1a:00.0", "0000:1b:00.0",
                                          "0000:9a:00.0", "0000:9b:00.0"};
    struct snap_run fine[7];
    size_t n = 0;
    uint64_t used = 0;
    for (size_t k = 0; k < 6 && layouts[i % NDEV][k].n; k++) {
        fine[n++] = layouts[i % NDEV][k];
        used += layouts[i % NDEV][k].n;
    }
    uint64_t capacity = 48 * GIB;
    fine[n++] = (struct snap_run){SNAP_FREE, capacity / GRAN - used};
    memset(d, 0, sizeof(*d));
    strcpy(d->model, "L40S");
    strcpy(d->pci, pci[i % NDEV]);
    d->numa = i < 2 ? 0 : 1;
    for (size_t k = 0; k < n; k++)
        d->state_bytes[fine[k].state] += fine[k].n * GRAN;
    uint64_t per;
    d->map_count = snap_map_encode(fine, n, map_cap, map, &per);
    d->map_unit = per * GRAN;
    d->capacity = capacity;
    d->live_bytes = d->state_bytes[SNAP_USED] - (i == 0 ? 14 * MIB : 0);
    d->mapped_bytes = d->state_bytes[SNAP_USED] + d->state_bytes[SNAP_CACHED];
    d->cached_bytes = d->state_bytes[SNAP_CACHED];
    d->peak_bytes = d->mapped_bytes + (i == 0 ? GIB : 0);
    d->live_count = 3 * i + 17;
    d->alloc_count = 1000 * (i + 1) + d->live_count;
    d->free_count = 1000 * (i + 1);
    d->chunks_created = 40 - 10 * i;
    d->chunks_released = i;
    d->host_bytes = d->state_bytes[SNAP_HOST];
    d->nvme_bytes = d->state_bytes[SNAP_NVME];
    d->spill_count = d->host_bytes / GRAN + d->nvme_bytes / GRAN + i;
    d->spill_bytes = d->host_bytes + d->nvme_bytes + i * GRAN;
    d->restore_count = i;
    d->restore_bytes = i * GRAN;
    d->evictions = i == 0 ? 7 : 0;
    d->largest_free = (i < 2 ? 128 : 1) * GRAN;
    d->fragmentation = i == 0 ? 0.5 : 0.0;
    /* Idle chunks on device 1: reserved is more than mapped there. */
    d->reserved_bytes = d->mapped_bytes + (i == 1 ? 64 * MIB : 0);
    d->peak_reserved_bytes = d->reserved_bytes + (i == 0 ? 2 * GIB : 0);
    d->driver_ns = i == 3 ? 0 : 1234567ull * (i + 1) + (i == 0 ? 2000000000ull : 0);
    /* Device 2 has failed, with one allocation lost there. */
    d->failed = i == 2;
    d->lost_count = i == 2 ? 1 : 0;
    d->lost_bytes = i == 2 ? GRAN : 0;
}

void *snapgen_build(const struct snapgen_opts *o, size_t *len_p)
{
    uint32_t ndev = o->ndev ? o->ndev : NDEV;
    uint32_t rows = o->max_allocs ? o->max_allocs : SNAP_ALLOCS;
    uint32_t map_cap = o->map_cap ? o->map_cap : MAP_CAP;
    size_t len = snap_size(ndev, rows, map_cap);
    void *buf = calloc(1, len);
    if (!buf)
        return NULL;
    struct snap_header *h = buf;
    snap_header_init(h, ndev, rows, map_cap);
    h->uid = o->uid;
    h->pid = o->pid;
    h->pid_start = o->pid_start;
    h->pool_id = o->pool_id;
    h->pid_ns = o->pid_ns;
    h->created_ns = 1700000000000000000ull;
    strcpy(h->program, "trainer");
    strcpy(h->backend, "sim");
    strcpy(h->topology, "pcie-4gpu");

    struct snap_data *d = (struct snap_data *)(h + 1);
    d->generation = 42;
    d->updated_ns = h->created_ns + 5000000000ull;
    d->chunk_size = GRAN;
    d->va_size = 384 * GIB;
    d->peak_bytes = 6 * GIB;
    d->largest_free = 128 * GRAN;
    d->fragmentation = 0.4;
    d->peak_reserved_bytes = 7 * GIB; /* at least any device's, at most their sum */
    d->driver_ns = 2000000000ull + 1234567ull * 6; /* the devices' sum */
    d->tier[SNAP_TIER_HOST] = (struct snap_tier){
        16 * GIB, GIB, 64 * MIB, 3 * GIB / 2, GIB / GRAN, 1, 0};
    d->tier[SNAP_TIER_NVME] = (struct snap_tier){
        0, 512 * MIB, 0, 512 * MIB, 512 * MIB / GRAN, 1, 0};

    struct snap_device *dev = (struct snap_device *)((char *)buf +
                                                     snap_off_dev());
    struct snap_map *map = (struct snap_map *)(
        (char *)buf + snap_off_map(ndev, rows));
    for (uint32_t i = 0; i < ndev; i++)
        fill_device(&dev[i], i, map_cap, map + (size_t)i * map_cap);
    fill_traffic(buf, ndev, rows, map_cap, d);
    /* Of a pool shared by 3 processes: the sharer, this one, another. */
    strcpy(d->share_name, "job42");
    d->share_nproc = 3;
    d->share_self = 1;
    d->share_proc[0] = (struct snap_share_proc){4001, 0, 3 * GIB};
    d->share_proc[1] = (struct snap_share_proc){o->pid, 1, 6 * GIB};
    d->share_proc[2] = (struct snap_share_proc){4003, 5, 512 * MIB};

    /* The rows that fit, on devices that exist. */
    struct snap_alloc a[NALLOC];
    a[0] = (struct snap_alloc){0x7f2a00000000ull, 2 * GIB, 0, 1,
                               UMP_TIER_DEVICE, UMP_HINT_OFFLOAD, 12.5};
    a[1] = (struct snap_alloc){0x7f2a80000000ull, GIB, 0, 1, UMP_TIER_HOST,
                               UMP_HINT_OFFLOAD, 300.0};
    a[2] = (struct snap_alloc){0x7f2ac0000000ull, 512 * MIB + 1000, 1, 2,
                               UMP_TIER_DEVICE, UMP_HINT_NO_SPILL, 0.4};
    struct snap_alloc *rowp = (struct snap_alloc *)((char *)buf +
                                                    snap_off_alloc(ndev));
    for (uint32_t i = 0; i < NALLOC && d->nalloc < rows; i++)
        if ((uint32_t)a[i].device < ndev && (uint32_t)a[i].ndevices <= ndev)
            rowp[d->nalloc++] = a[i];
    *len_p = len;
    return buf;
}
