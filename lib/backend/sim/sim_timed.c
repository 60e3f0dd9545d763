/*
 * sim_driver_costs:h200-timed: the sim takes as long as an H200 would.
 * Every cost comes from topo/drivercost.c, times sim_time_scale.
 *
 *  - Virtual-memory calls (reserve, chunk create and release, host chunk
 *    create, map, unmap, set access with and without the CPU) wait in the
 *    calling thread until their start plus the H200's cost of every handle
 *    they touched, so the sim's own work counts towards that cost and
 *    nothing is charged twice. They run one at a time, under a lock of
 *    their own (the driver's): the CUDA driver serializes these calls in a
 *    process, and the model does too. The time spent waiting for that
 *    lock is not the call's cost, as it is not on the driver.
 *  - Copies and memsets wait on their stream's worker (or in the caller,
 *    on the default stream): a copy's bytes start moving once its latency
 *    since it was queued has passed and its link is free, and end after
 *    its bytes at the link's rate plus a per-copy gap. A link is each
 *    device's to the host and from it (PCIe: each direction on its own),
 *    its own memory, and each ordered pair of devices at the topology's
 *    rate: copies on different links overlap, copies on one link take
 *    turns. Host to host: the latency only (the CPU copies).
 *  - A stream sync returns no sooner than its start plus the empty sync's
 *    cost. Events and host functions cost nothing more.
 *
 * A machine whose memcpy is slower than the modeled links (54 GB/s to the
 * host, terabytes a second on a device) cannot copy in the modeled time:
 * sim_time_scale stretches every cost alike, so that the sim's own work
 * fits inside the modeled time and the ratios between modeled times hold.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "backend/sim/sim_vmm.h"
#include "topo/drivercost.h"
#include "util/clock.h"
#include "util/log.h"

/* Link indexes into c->link_busy. */
static size_t link_up(int d) { return (size_t)d; }
static size_t link_down(int d) { return UMP_MAX_DEVICES + (size_t)d; }
static size_t link_local(int d) { return 2 * UMP_MAX_DEVICES + (size_t)d; }
static size_t link_peer(int a, int b)
{
    return 3 * UMP_MAX_DEVICES + (size_t)a * UMP_MAX_DEVICES + (size_t)b;
}

int sim_timed_init(struct sim_ctx *c, const struct ump_config *cfg)
{
    int err;

    c->timed = cfg->sim_driver_costs == UMP_SIM_COSTS_H200_TIMED;
    /* A zeroed configuration (tests) has no scale: 1. */
    c->time_scale = cfg->sim_time_scale > 0 ? (unsigned)cfg->sim_time_scale
                                            : 1;
    err = pthread_mutex_init(&c->drv_lock, NULL);
    if (err) {
        ump_log_error("sim: pthread_mutex_init: %s", strerror(err));
        return -err;
    }
    err = pthread_mutex_init(&c->link_lock, NULL);
    if (err) {
        pthread_mutex_destroy(&c->drv_lock);
        ump_log_error("sim: pthread_mutex_init: %s", strerror(err));
        return -err;
    }
    return 0;
}

void sim_timed_fini(struct sim_ctx *c)
{
    pthread_mutex_destroy(&c->link_lock);
    pthread_mutex_destroy(&c->drv_lock);
}

void sim_call_begin(struct sim_ctx *c, struct sim_call *k)
{
    k->t0 = 0;
    k->ns = 0;
    if (!c->timed)
        return;
    pthread_mutex_lock(&c->drv_lock);
    k->t0 = ump_clock_ns();
}

void sim_call_end(struct sim_ctx *c, struct sim_call *k)
{
    if (!c->timed)
        return;
    atomic_fetch_add_explicit(&c->timed_ns, k->ns, memory_order_relaxed);
    ump_clock_wait_until(k->t0 + k->ns * c->time_scale);
    pthread_mutex_unlock(&c->drv_lock);
}

bool sim_timed(void *ctx)
{
    return ((struct sim_ctx *)ctx)->timed;
}

uint64_t sim_timed_vmm_ns(void *ctx)
{
    return atomic_load_explicit(&((struct sim_ctx *)ctx)->timed_ns,
                                memory_order_relaxed);
}

/* The link a copy from src to dst (sim_loc_of's locations) occupies, and
 * its rate in bytes per ns; false when none does (host to host). Bytes are
 * weighted: a copy on one device reads and writes its memory. */
static bool route(const struct sim_ctx *c, int src, int dst, size_t *link_p,
                  double *gbs_p)
{
    const struct drvcost_misc *m = &drvcost_h200;

    if (src >= 0 && dst >= 0) {
        if (src == dst) {
            *link_p = link_local(src);
            *gbs_p = m->local_gbs / 2;
            return true;
        }
        *link_p = link_peer(src, dst);
        *gbs_p = c->topo.link[src][dst].bw_gbs;
        /* A pair the topology leaves unlinked goes through the host. */
        if (!(*gbs_p > 0))
            *gbs_p = m->pinned_gbs;
        return true;
    }
    if (src < 0 && dst < 0)
        return false;
    /* HOST_NUMA VMM memory, or memory outside the reservations, which is
     * taken as registered (pinned): the pool's own is, on cuda. */
    int host = src < 0 ? src : dst;
    *link_p = src >= 0 ? link_up(src) : link_down(dst);
    *gbs_p = host == SIM_LOC_HOST ? m->host_vmm_gbs : m->pinned_gbs;
    return true;
}

/* One stretch of a transfer on one link: its bytes start at `ready` or
 * when the link is free, whichever is later, and hold the link for the gap
 * and the bytes; returns when they are done. Lock held (link_lock taken
 * here). */
static uint64_t occupy(struct sim_ctx *c, size_t link, double gbs,
                       size_t bytes, uint64_t ready)
{
    uint64_t s = c->time_scale;
    uint64_t hold = (drvcost_h200.copy_gap_ns + drvcost_bytes_ns(bytes, gbs)) *
                    s;

    pthread_mutex_lock(&c->link_lock);
    uint64_t start = c->link_busy[link] > ready ? c->link_busy[link] : ready;
    c->link_busy[link] = start + hold;
    pthread_mutex_unlock(&c->link_lock);
    return start + hold;
}

/* When the bytes of a copy (src NULL: a memset of dst) may start: its
 * latency after it was queued, and not before it starts. */
static uint64_t ready_at(const struct sim_ctx *c, uint64_t queued,
                         uint64_t start)
{
    uint64_t r = queued + drvcost_h200.copy_lat_ns * c->time_scale;
    return r > start ? r : start;
}

uint64_t sim_copy_end(void *ctx, void *dst, const void *src, size_t size,
                      uint64_t queued, uint64_t start)
{
    struct sim_ctx *c = ctx;
    const char *d = dst, *s = src;
    uint64_t ready, end;
    /* Stretches in a row on one link are one: a copy over many chunks of
     * one device pays its gap once. */
    size_t run_link = 0, run_bytes = 0;
    double run_gbs = 0;

    if (!c->timed)
        return 0;
    ready = end = ready_at(c, queued, start);
    pthread_mutex_lock(&c->lock);
    while (size) {
        size_t n = size, link;
        double gbs;
        int sl = sim_loc_of(c, s, n, &n), dl = sim_loc_of(c, d, n, &n);

        if (route(c, sl, dl, &link, &gbs)) {
            if (run_bytes && link != run_link) {
                uint64_t e = occupy(c, run_link, run_gbs, run_bytes, ready);
                end = e > end ? e : end;
                run_bytes = 0;
            }
            run_link = link;
            run_gbs = gbs;
            run_bytes += n;
        }
        d += n;
        s += n;
        size -= n;
    }
    if (run_bytes) {
        uint64_t e = occupy(c, run_link, run_gbs, run_bytes, ready);
        end = e > end ? e : end;
    }
    pthread_mutex_unlock(&c->lock);
    return end;
}

uint64_t sim_set_end(void *ctx, void *dst, size_t size, uint64_t queued,
                     uint64_t start)
{
    struct sim_ctx *c = ctx;
    const char *d = dst;
    uint64_t ready, end;

    if (!c->timed)
        return 0;
    ready = end = ready_at(c, queued, start);
    pthread_mutex_lock(&c->lock);
    while (size) {
        size_t n = size;
        int dl = sim_loc_of(c, d, n, &n);

        /* A device's memset writes its memory once per byte; one of host
         * memory costs the latency only (not measured). */
        if (dl >= 0) {
            uint64_t e = occupy(c, link_local(dl), drvcost_h200.local_gbs, n,
                                ready);
            end = e > end ? e : end;
        }
        d += n;
        size -= n;
    }
    pthread_mutex_unlock(&c->lock);
    return end;
}

uint64_t sim_sync_end(void *ctx, uint64_t start)
{
    struct sim_ctx *c = ctx;

    return c->timed ? start + drvcost_h200.sync_ns * c->time_scale : 0;
}
