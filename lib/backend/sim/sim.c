/*
 * The sim backend: CUDA's virtual memory management emulated on the CPU, so
 * that every layer above runs and is tested without a GPU.
 *
 *  - A device is a memfd as large as its memory (sparse: RAM is used only
 *    where chunks are written). A chunk is an extent of that file, taken
 *    first-fit from a sorted free list; releasing it punches the hole, so
 *    its RAM goes back and the next chunk there reads zeros, as new device
 *    memory would on a GPU that scrubs it.
 *  - Pinned host memory is the same on one memfd per host NUMA node, each
 *    as large as the host tier (host_limit, or a quarter of RAM). Host
 *    chunks map like device chunks; every device may be given access to
 *    them, as every GPU reaches host memory over its link.
 *  - A reservation is PROT_NONE anonymous memory; map() puts the chunk's
 *    extent there (MAP_SHARED, still PROT_NONE) and set_access() makes it
 *    readable and writable; unmap() puts PROT_NONE anonymous memory back.
 *  - It is deliberately as strict as the driver: every misuse the driver
 *    refuses (unaligned, outside a reservation, double map, partial unmap,
 *    size mismatch, stale handle, ...) is refused here with -EINVAL, so bugs
 *    above fail in CI rather than on a GPU.
 *
 * Handles are pointers into one array of chunk slots owned by the context,
 * so a stale or made-up handle is recognised without dereferencing it. Slots
 * are reused oldest-freed first, which keeps a stale handle invalid as long
 * as possible. One mutex guards everything: these are slow-path calls.
 *
 * With sim_driver_costs:h200-timed the calls also take as long as they do
 * on an H200 (sim_timed.c): a virtual-memory call in its caller, one at a
 * time as on the driver, a copy on its stream at its link's rate.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "util/internal.h"
#include "util/log.h"
#include "backend/sim/sim.h"
#include "topo/topology.h"
#include "backend/sim/sim_vmm.h"

static const char *const fault_names[FAULT_OPS] = {
    "chunk_create", "host_chunk_create", "map", "set_access", "unmap",
    "reserve",
};

struct sim_streams *sim_streams_of(void *ctx)
{
    return &((struct sim_ctx *)ctx)->streams;
}

/* Counts down an injected fault; its error once due, else 0. Lock held. */
int sim_fault_hit(struct sim_ctx *c, int op)
{
    if (c->fault[op].nth == 0 || --c->fault[op].nth > 0)
        return 0;
    ump_log_info("sim: injected fault in %s: %s", fault_names[op],
                 strerror(-c->fault[op].err));
    return c->fault[op].err;
}

int sim_inject_fault(void *ctx, const char *op, int nth, int err)
{
    struct sim_ctx *c = ctx;
    int i;

    if (!c || !op)
        return -EINVAL;
    for (i = 0; i < FAULT_OPS; i++)
        if (strcmp(op, fault_names[i]) == 0)
            break;
    if (i == FAULT_OPS) {
        ump_log_error("sim: cannot inject a fault into unknown operation '%s'",
                      op);
        return -EINVAL;
    }
    if (nth < 0 || (nth > 0 && err >= 0)) {
        ump_log_error("sim: bad fault for %s: nth %d, err %d (want nth >= 0 "
                      "and a negative errno)", op, nth, err);
        return -EINVAL;
    }
    pthread_mutex_lock(&c->lock);
    c->fault[i].nth = nth;
    c->fault[i].err = err;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* --- open and close ---------------------------------------------------- */

/* Creates the memfd of device i (or host node i), cap bytes (sparse). */
static int mem_open(struct sim_device *d, size_t cap, bool host, int i)
{
    const char *what = host ? "host node" : "device";
    char name[40];

    if (cap > (size_t)INT64_MAX / 2) {
        ump_log_error("sim: %s %d memory %zu is too large", what, i, cap);
        return -EINVAL;
    }
    d->cap = cap;
    snprintf(name, sizeof(name), "umpool-sim-%s%d", host ? "host" : "dev", i);
    d->fd = memfd_create(name, MFD_CLOEXEC);
    if (d->fd < 0) {
        int err = errno;
        ump_log_error("sim: memfd_create: %s", strerror(err));
        return err == ENOSYS ? -ENODEV : -err;
    }
    if (ftruncate(d->fd, (off_t)cap) != 0) {
        int err = errno;
        ump_log_error("sim: cannot size %s %d's memory to %zu: %s", what, i,
                      cap, strerror(err));
        return -err;
    }
    if (cap) {
        d->free = calloc(1, sizeof(*d->free));
        if (!d->free) {
            ump_log_error("sim: out of host memory");
            return -ENOMEM;
        }
        d->free->len = cap;
        d->win = mmap(NULL, cap, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_NORESERVE, d->fd, 0);
        if (d->win == MAP_FAILED) {
            int err = errno;
            d->win = NULL;
            ump_log_error("sim: cannot map %s %d's memory (%zu bytes): %s",
                          what, i, cap, strerror(err));
            return -err;
        }
    }
    return 0;
}

static int devices_open(struct sim_ctx *c)
{
    for (int i = 0; i < c->ndev; i++) {
        int err = mem_open(&c->dev[i],
                           c->topo.dev[i].mem / SIM_GRAN * SIM_GRAN, false, i);
        if (err)
            return err;
    }
    return 0;
}

/* The host tier's size: host_limit, else a quarter of physical memory, as
 * the configuration documents; whole granules. */
static size_t host_limit(const struct ump_config *cfg)
{
    return conf_host_limit(cfg) / SIM_GRAN * SIM_GRAN;
}

/* One memfd per host NUMA node, each as large as the whole host tier. */
static int hosts_open(struct sim_ctx *c, const struct ump_config *cfg)
{
    size_t cap = host_limit(cfg);
    int n = c->topo.nnuma > 0 ? c->topo.nnuma : 1;

    if (n > UMP_MAX_NUMA) {
        ump_log_error("sim: topology has %d NUMA nodes (at most %d)", n,
                      UMP_MAX_NUMA);
        return -EINVAL;
    }
    c->nhost = n;
    for (int i = 0; i < n; i++) {
        int err = mem_open(&c->host[i], cap, true, i);
        if (err)
            return err;
    }
    return 0;
}

/* Enough slots for every granule of every device and host node: a chunk
 * still mapped after its release keeps its memory, so live slots never
 * exceed that. Imported chunks take no memory here: they have slots of
 * their own on top (SIM_IMPORTS at most live), so that imports never use
 * up the room of the context's own chunks. */
static int slots_init(struct sim_ctx *c)
{
    size_t n = 1 + SIM_IMPORTS, page = (size_t)sysconf(_SC_PAGESIZE);

    for (int i = 0; i < c->ndev; i++)
        n += c->dev[i].cap / SIM_GRAN;
    for (int i = 0; i < c->nhost; i++)
        n += c->host[i].cap / SIM_GRAN;
    c->nslots = n;
    c->slots_bytes = UMP_ALIGN_UP(n * sizeof(struct sim_chunk), page);
    c->slots = mmap(NULL, c->slots_bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c->slots == MAP_FAILED) {
        c->slots = NULL;
        ump_log_error("sim: cannot map the chunk table: %s", strerror(errno));
        return -ENOMEM;
    }
    return 0;
}

static void mem_close(struct sim_device *d)
{
    struct sim_extent *e, *en;

    for (e = d->free; e; e = en) {
        en = e->next;
        free(e);
    }
    if (d->win)
        munmap(d->win, d->cap);
    if (d->fd >= 0)
        close(d->fd);
}

/* Frees every process-local resource without taking a lock: shared by close
 * and close_in_child. */
static void release_all(struct sim_ctx *c)
{
    struct sim_resv *r, *rn;

    for (r = c->resv; r; r = rn) {
        rn = r->next;
        munmap(r->va, r->size);
        munmap(r->g, r->gbytes);
        free(r);
    }
    c->resv = NULL;
    for (size_t i = 0; i < c->slots_touched; i++) {
        if (c->slots[i].device < 0)
            continue;
        free(c->slots[i].spare);
        if (c->slots[i].imported)
            close(c->slots[i].fd);
    }
    if (c->slots)
        munmap(c->slots, c->slots_bytes);
    for (int i = 0; i < c->ndev; i++)
        mem_close(&c->dev[i]);
    for (int i = 0; i < c->nhost; i++)
        mem_close(&c->host[i]);
}

static int sim_open(const struct ump_config *cfg, struct ump_topology *topo,
                    void **ctx_p)
{
    struct sim_ctx *c;
    int err;

    if (cfg->sim_devices < 0 || cfg->sim_devices > UMP_MAX_DEVICES) {
        ump_log_error("sim: sim_devices %d is out of range 1..%d",
                      cfg->sim_devices, UMP_MAX_DEVICES);
        return -EINVAL;
    }
    if (cfg->sim_devices && cfg->sim_topology[0]) {
        ump_log_error("sim: sim_devices and sim_topology exclude each other "
                      "(the topology gives the device count)");
        return -EINVAL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        ump_log_error("sim: out of host memory");
        return -ENOMEM;
    }
    for (int i = 0; i < UMP_MAX_DEVICES; i++)
        c->dev[i].fd = -1;
    for (int i = 0; i < UMP_MAX_NUMA; i++)
        c->host[i].fd = -1;

    if (cfg->sim_topology[0]) {
        char path[UMP_CONF_PATH_MAX];

        err = topo_resolve(cfg->sim_topology, path, sizeof(path));
        if (err)
            goto err_free;
        err = topo_load_file(path, &c->topo);
        if (err)
            goto err_free;
    } else {
        topo_make_uniform(&c->topo, cfg->sim_devices ? cfg->sim_devices : 1,
                          cfg->sim_device_mem ? cfg->sim_device_mem
                                              : SIM_DEFAULT_MEM);
    }
    if (c->topo.ndev < 1 || c->topo.ndev > UMP_MAX_DEVICES) {
        ump_log_error("sim: topology has %d devices", c->topo.ndev);
        err = -EINVAL;
        goto err_free;
    }
    if (cfg->sim_device_mem)
        for (int i = 0; i < c->topo.ndev; i++)
            c->topo.dev[i].mem = cfg->sim_device_mem;
    c->ndev = c->topo.ndev;
    c->drv_costs = cfg->sim_driver_costs == UMP_SIM_COSTS_H200 ||
                   cfg->sim_driver_costs == UMP_SIM_COSTS_H200_TIMED;
    /* A zeroed configuration (sim_fail_after 0) schedules no failure. */
    c->fail_dev = cfg->sim_fail_after > 0 ? cfg->sim_fail_device : -1;
    c->fail_left = cfg->sim_fail_after;
    if (c->fail_dev >= c->ndev) {
        ump_log_error("sim: sim_fail_device %d: no such device (have %d)",
                      c->fail_dev, c->ndev);
        err = -EINVAL;
        goto err_free;
    }

    err = devices_open(c);
    if (err)
        goto err_release;
    err = hosts_open(c, cfg);
    if (err)
        goto err_release;
    err = slots_init(c);
    if (err)
        goto err_release;
    err = -pthread_mutex_init(&c->lock, NULL);
    if (err) {
        ump_log_error("sim: pthread_mutex_init: %s", strerror(-err));
        goto err_release;
    }
    err = -pthread_rwlock_init(&c->bytes, NULL);
    if (err) {
        ump_log_error("sim: pthread_rwlock_init: %s", strerror(-err));
        goto err_mutex;
    }
    err = sim_timed_init(c, cfg);
    if (err)
        goto err_rwlock;
    err = sim_streams_init(&c->streams, c->ndev);
    if (err)
        goto err_timed;

    *topo = c->topo;
    *ctx_p = c;
    return 0;

err_timed:
    sim_timed_fini(c);
err_rwlock:
    pthread_rwlock_destroy(&c->bytes);
err_mutex:
    pthread_mutex_destroy(&c->lock);
err_release:
    release_all(c);
err_free:
    free(c);
    return err;
}

static void sim_close(void *ctx)
{
    struct sim_ctx *c = ctx;

    if (!c)
        return;
    /* Streams first: their queued copies may touch mapped memory. */
    sim_streams_fini(&c->streams);
    release_all(c);
    sim_timed_fini(c);
    pthread_rwlock_destroy(&c->bytes);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* In a forked child: the parent's lock may be held and its stream threads do
 * not exist here, so free memory only. */
static void sim_close_in_child(void *ctx)
{
    struct sim_ctx *c = ctx;

    if (!c)
        return;
    sim_streams_forget(&c->streams);
    release_all(c);
    free(c);
}

static size_t sim_granularity(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    return SIM_GRAN;
}

const struct backend_ops sim_backend_ops = {
    .name = "sim",
    .open = sim_open,
    .close = sim_close,
    .close_in_child = sim_close_in_child,
    .granularity = sim_granularity,
    .reserve = sim_reserve,
    .unreserve = sim_unreserve,
    .reserve_at = sim_reserve_at,
    .chunk_create = sim_chunk_create,
    .chunk_release = sim_chunk_release,
    .chunk_export = sim_chunk_export,
    .chunk_import = sim_chunk_import,
    .host_chunk_create = sim_host_chunk_create,
    .io_view = sim_io_view,
    .map = sim_map,
    .unmap = sim_unmap,
    .set_access = sim_set_access,
    .set_access_host = sim_set_access_host,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_sync = sim_stream_sync,
    .memcpy_async = sim_memcpy_async,
    .memset_async = sim_memset_async,
    .host_func = sim_host_func,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_sync = sim_event_sync,
    .stream_wait_event = sim_stream_wait_event,
    .driver_ns = sim_driver_ns,
    .watch_failures = sim_watch_failures,
};
