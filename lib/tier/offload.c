/*
 * The tier layer's face to the front end (contract in offload.h): set-up
 * and tear-down of pool->off, tracking and freeing runs, and the work
 * behind ump_acquire, ump_release, ump_prefetch, ump_evict, ump_advise and
 * ump_tier_stats, whose arguments lib/front/tier_api.c has checked (pool,
 * device, tier, advice). Pointers are checked here, where the runs are:
 * a bad one is logged here, once, in the public call's name.
 *
 * Each call takes pool->lock itself unless its comment in offload.h says it
 * is held. A tracked run stays busy (res->busy) across every step that may
 * drop the lock, so that a free meanwhile is deferred to the last step.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/nvme.h"
#include "tier/offload.h"
#include "tier/residency.h"
#include "tier/worker.h"
#include "tier/xfer.h"
#include "util/internal.h"

/* --- set-up and tear-down -------------------------------------------------- */

size_t offload_host_limit(const ump_pool_t *pool)
{
    size_t chunk = pool->chunk_size;
    size_t limit = conf_host_limit(&pool->cfg);
    return limit ? limit & ~(chunk - 1) : chunk; /* sysconf failed */
}

/* Frees what offload_init made, but not the store nor host memory: those
 * are closed or released first by the caller. */
static void free_state(struct offload *o)
{
    worker_forget(o);
    xfer_forget(o);
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_destroy(&o->w[w].wake);
    pthread_cond_destroy(&o->moved);
    pthread_mutex_destroy(&o->io_lock);
    pthread_mutex_destroy(&o->dead_lock);
    free(o->stream);
    free(o->ctr);
    free(o->draining);
    free(o->evicting);
    free(o);
}

void offload_set_reclaim(ump_pool_t *pool, void (*fn)(ump_pool_t *pool,
                                                   int device))
{
    if (pool->off)
        pool->off->reclaim = fn;
}

int offload_init(ump_pool_t *pool)
{
    struct offload *o = calloc(1, sizeof(*o));
    int rc = -ENOMEM;
    if (!o)
        return rc;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_init(&o->w[w].wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&o->moved, NULL);
    pthread_mutex_init(&o->io_lock, NULL);
    pthread_mutex_init(&o->dead_lock, NULL);
    o->stream = calloc((size_t)pool->ndev * 2, sizeof(*o->stream));
    o->ctr = calloc((size_t)pool->ndev, sizeof(*o->ctr));
    o->draining = calloc((size_t)pool->ndev, sizeof(*o->draining));
    o->evicting = calloc((size_t)pool->ndev, sizeof(*o->evicting));
    if (!o->stream || !o->ctr || !o->draining || !o->evicting)
        goto fail;
    o->host_limit = offload_host_limit(pool);
    o->cpu_access = pool->cfg.host_cpu_access;
    o->host_reserve = pool->cfg.host_reserve < o->host_limit
                          ? pool->cfg.host_reserve & ~(pool->chunk_size - 1)
                          : o->host_limit;
    rc = xfer_open(pool, o);
    if (rc)
        goto fail;
    pool->off = o; /* only whole: the front end sees NULL or all of it */
    return 0;
fail:
    free_state(o); /* no store (xfer_open left none), no host memory yet */
    return rc;
}

void offload_stop(ump_pool_t *pool)
{
    if (pool->off)
        worker_stop(pool);
}

void offload_trim_locked(ump_pool_t *pool)
{
    host_trim(pool);
}

void offload_fini(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o)
        return;
    host_trim(pool);
    if (o->host_created)
        ump_log_warn("%zu bytes of pinned host memory still held at destroy",
                     o->host_created);
    else
        host_win_fini(pool); /* else still mapped there */
    move_streams_destroy(pool, o);
    xfer_close(pool, o);
    free_state(o);
    pool->off = NULL;
}

void offload_fini_in_child(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o)
        return;
    /* The parent's thread is not here, its locks may be held: memory only.
     * The NVMe store's files are this process's copies of the descriptors. */
    host_forget(pool);
    nvme_close(o->nvme);
    o->nvme = NULL;
    /* The parent's threads may have held these at fork, or slept on the
     * conditions: glibc's pthread_cond_destroy would wait for those
     * sleepers, who do not exist here, forever. */
    pthread_mutex_init(&o->io_lock, NULL);
    pthread_mutex_init(&o->dead_lock, NULL);
    pthread_cond_init(&o->moved, NULL);
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_init(&o->w[w].wake, NULL);
    free_state(o);
    pool->off = NULL;
}

/* --- runs ------------------------------------------------------------------ */

int offload_track(ump_pool_t *pool, struct run *r)
{
    struct res *res;
    res_tick(pool->off); /* a new run is as recently used as it gets */
    int rc = res_get(pool, r, &res);
    if (!rc) {
        pool->off->full = false; /* new pressure: worth another try */
        worker_wake(pool, W_EVICT);
    }
    return rc;
}

void offload_run_free(ump_pool_t *pool, struct run *r)
{
    struct res *res = r->res;
    res->dead = true;
    for (size_t i = 0; i < res->nseg; i++)
        res_lru_unlink(pool->off, &res->seg[i]);
    if (!res->busy)
        res_teardown(pool, res);
}

void offload_wait_idle(ump_pool_t *pool, struct run *r)
{
    while (r->res && r->res->busy)
        pthread_cond_wait(&pool->off->moved, &pool->lock);
}

int offload_make_room(ump_pool_t *pool, const struct place_req *pr)
{
    if (place_is_host(pool, pr->req.device)) /* nothing moves off them */
        return -ENOMEM;
    return evict_make_room(pool, pr);
}

/* --- the calls behind the public tier API --------------------------------- */

/* The tracked run for [ptr, ptr+size) and its segments [*s0_p, *s1_p);
 * with track false, an untracked run gives *res_p NULL. Slab objects and
 * runs that share a chunk: 1 (they do not move). Pool lock held. */
static int lookup(ump_pool_t *pool, const char *fn, void *ptr, size_t size,
                  bool track, struct res **res_p, struct seg **s0_p,
                  struct seg **s1_p)
{
    struct run *r;
    size_t g0, g1;
    int rc = res_find_range(pool, fn, ptr, size, &r, &g0, &g1);
    if (rc == -ENOTSUP)
        return 1;
    if (rc)
        return rc;
    /* Carved (mem/chunks.h): it stays on its device, and ump_evict alone
     * may give it chunks of its own: nothing to do. */
    if (!r->res && chunks_shared(pool, r->start, r->n))
        return 1;
    if (!r->res && !track) {
        *res_p = NULL;
        return 0;
    }
    struct res *res;
    rc = res_get(pool, r, &res);
    if (rc)
        return rc;
    *res_p = res;
    *s0_p = res_seg_at(res, g0);
    *s1_p = res_seg_at(res, g1 - 1) + 1;
    return 0;
}

void offload_quiesce(ump_pool_t *pool)
{
    while (pool->off->moving)
        pthread_cond_wait(&pool->off->moved, &pool->lock);
}

void offload_hold(ump_pool_t *pool)
{
    pool->off->hold++;
}

void offload_unhold(ump_pool_t *pool)
{
    pool->off->hold--;
    pthread_cond_broadcast(&pool->off->moved);
}

int offload_acquire(ump_pool_t *pool, void *ptr, size_t size, int dev)
{
    struct res *res;
    struct seg *s0, *s1, *s;
    pthread_mutex_lock(&pool->lock);
    int rc = lookup(pool, "ump_acquire", ptr, size, true, &res, &s0, &s1);
    if (rc) {
        pthread_mutex_unlock(&pool->lock);
        return rc > 0 ? 0 : rc;
    }
    /* The time of the call, not of its end: a move up that waits must not
     * stretch the interval the next use is predicted by. */
    uint64_t now = res_tick(pool->off);
    res->busy++;
    for (s = s0; s < s1; s++) { /* pinned first: nothing evicts them now */
        s->pins++;
        s->discard = false;
    }
    for (s = s0; s < s1 && !rc; s++)
        rc = evict_up(pool, s, dev);
    for (s = s0; s < s1; s++) {
        if (rc)
            s->pins--;
        else
            res_note_acquire(pool->off, s, now);
    }
    if (rc == -ENOMEM)
        ump_log_error("ump_acquire: no room on device %d for %p, even after "
                      "moving unpinned offloadable memory", dev, ptr);
    if (rc == -EBUSY)
        ump_log_error("ump_acquire: the pool was suspended meanwhile "
                      "(ump_pool_resume first)");
    res_unbusy(pool, res);
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

int offload_release(ump_pool_t *pool, void *ptr, size_t size)
{
    struct res *res;
    struct seg *s0, *s1, *s;
    pthread_mutex_lock(&pool->lock);
    int rc = lookup(pool, "ump_release", ptr, size, false, &res, &s0, &s1);
    if (!rc && res) {
        for (s = s0; s < s1; s++)
            if (!s->pins)
                break;
        if (s == s1) {
            /* Used, and done with for now: its next use is the one its
             * last interval predicts (evict.c). */
            res_tick(pool->off);
            for (s = s0; s < s1; s++) {
                s->pins--;
                res_lru_touch(pool->off, s, true);
            }
            worker_wake(pool, W_EVICT); /* it may now go below the watermark */
        } else {
            res = NULL;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    if (!rc && !res) {
        ump_log_error("ump_release: %p is not acquired", ptr);
        return -EINVAL;
    }
    return rc > 0 ? 0 : rc;
}

int offload_prefetch(ump_pool_t *pool, void *ptr, size_t size, int dest)
{
    struct res *res;
    struct seg *s0, *s1;
    pthread_mutex_lock(&pool->lock);
    int rc = lookup(pool, "ump_prefetch", ptr, size, false, &res, &s0, &s1);
    if (!rc && res) { /* an untracked run never left its devices */
        uint64_t now = res_tick(pool->off);
        rc = worker_queue_prefetch(pool, ptr, size, dest);
        for (struct seg *s = s0; s < s1 && !rc; s++)
            res_note_want(s, now); /* evicted last until used (evict.c) */
    }
    pthread_mutex_unlock(&pool->lock);
    return rc > 0 ? 0 : rc;
}

/* Moves the claimed segment s of ump_evict to tier. */
static int evict_one(ump_pool_t *pool, struct seg *s, void *ptr, int tier)
{
    struct offload *o = pool->off;
    int rc = 0;
    /* Room on its way for the room makers of its device (evict.c). */
    int from = !s->pins && s->tier == UMP_TIER_DEVICE && s->tier < tier
                   ? s->dev
                   : -1;
    size_t n = s->n;
    if (from >= 0)
        o->evicting[from] += n;
    if (s->pins) {
        ump_log_error("ump_evict: %p was acquired meanwhile", ptr);
        rc = -EBUSY;
    } else if (s->tier >= tier) {
        /* already there */
    } else if (tier == UMP_TIER_NVME) {
        rc = move_to_nvme(pool, s);
        if (rc == -ENOSPC && o->nvme)
            ump_log_error("ump_evict: the NVMe tier is full (%zu bytes used)",
                          o->nvme_used);
    } else {
        rc = evict_host_room(pool, s->n);
        if (!rc)
            rc = move_mem(pool, s, UMP_TIER_HOST, -1);
        if (rc == -ENOSPC)
            ump_log_error("ump_evict: the host tier is full (host_limit %zu)",
                          o->host_limit);
    }
    if (from >= 0)
        o->evicting[from] -= n;
    return rc;
}

int offload_evict(ump_pool_t *pool, void *ptr, size_t size, int tier)
{
    struct run *r;
    size_t g0, g1;
    pthread_mutex_lock(&pool->lock);
    int rc = res_find_range(pool, "ump_evict", ptr, size, &r, &g0, &g1);
    if (rc == -ENOTSUP)
        ump_log_error("ump_evict: %p is pinned host memory or a small "
                      "allocation (a slab object); only allocations of whole "
                      "device chunks move", ptr);
    if (!rc && (r->flags & UMP_HINT_NO_SPILL)) {
        ump_log_error("ump_evict: %p was allocated with UMP_HINT_NO_SPILL",
                      ptr);
        rc = -EPERM;
    }
    if (!rc && atomic_load_explicit(&r->exported, memory_order_relaxed)) {
        ump_log_error("ump_evict: %p is exported (ump_ipc_get_handle): "
                      "other processes may map its memory, which must not "
                      "move", ptr);
        rc = -EBUSY;
    }
    struct res *res = NULL;
    if (!rc && !r->res && chunks_shared(pool, r->start, r->n)) {
        /* Carved: its edge chunks become its own, unless a neighbour may
         * be in use. Thread caches and parked runs first: what they hold
         * is free memory. */
        if (pool->off->reclaim)
            pool->off->reclaim(pool, r->device);
        rc = res_unshare(pool, r, true);
        if (rc == -EBUSY)
            ump_log_error("ump_evict: %p shares a chunk with another live "
                          "allocation (memory carved from freed memory, "
                          "config carve); allocations that move are made "
                          "with UMP_HINT_OFFLOAD", ptr);
        else if (rc == -ENOMEM)
            ump_log_error("ump_evict: %p shares a chunk, and the device has "
                          "no room to give it chunks of its own first", ptr);
    }
    if (!rc)
        rc = res_get(pool, r, &res);
    struct seg *s0 = NULL, *s1 = NULL, *s;
    if (!rc) {
        s0 = res_seg_at(res, g0);
        s1 = res_seg_at(res, g1 - 1) + 1;
        for (s = s0; s < s1 && !rc; s++)
            if (s->pins)
                rc = -EBUSY;
        if (rc)
            ump_log_error("ump_evict: %p is acquired", ptr);
    }
    if (!rc) {
        res->busy++;
        for (s = s0; s < s1 && !rc; s++) {
            res_move_begin(pool, s);
            rc = evict_one(pool, s, ptr, tier);
            res_move_end(pool, s);
        }
        res_unbusy(pool, res);
    }
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

int offload_advise(ump_pool_t *pool, void *ptr, size_t size, int advice)
{
    struct res *res;
    struct seg *s0, *s1;
    pthread_mutex_lock(&pool->lock);
    /* Untracked runs never move by themselves: only DONTNEED has a use. */
    int rc = lookup(pool, "ump_advise", ptr, size,
                    advice == UMP_ADVISE_DONTNEED, &res, &s0, &s1);
    if (!rc && res) {
        uint64_t now = res_tick(pool->off);
        if (advice == UMP_ADVISE_WILLNEED)
            rc = worker_queue_prefetch(pool, ptr, size, TIER_DEST_HOME);
        /* DONTNEED drops whole segments only: one the range covers in
         * part keeps its data (the bytes outside the range are still
         * wanted), as madvise keeps a page the range only touches. The
         * allocation's end counts as the segment's when the range goes
         * there: its last chunk is rounded up past what was asked. */
        const char *a0 = ptr, *a1 = a0 + size;
        const char *end = (const char *)vas_addr(&pool->vas,
                                                 res->run->start) +
                          atomic_load(&res->run->size);
        for (struct seg *s = s0; s < s1 && !rc; s++) {
            const char *b0 = vas_addr(&pool->vas, s->g);
            const char *b1 = vas_addr(&pool->vas, s->g + s->n);
            bool whole = !size || (b0 >= a0 && (b1 <= a1 || a1 >= end));
            s->discard = (advice == UMP_ADVISE_DONTNEED && whole) ||
                         s->discard;
            if (advice == UMP_ADVISE_WILLNEED)
                res_note_want(s, now);
            else if (advice == UMP_ADVISE_HOT)
                res_note_hot(pool->off, s);
            else /* COLD, DONTNEED: first to go */
                res_lru_touch(pool->off, s, false);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return rc > 0 ? 0 : rc;
}

void offload_tier_stats(ump_pool_t *pool, int tier, ump_tier_stats_t *st)
{
    const struct offload *o = pool->off;
    *st = (ump_tier_stats_t){0};
    pthread_mutex_lock(&pool->lock);
    if (tier == UMP_TIER_HOST) {
        *st = (ump_tier_stats_t){o->host_limit, o->host_used,
                                 o->host_free_bytes, o->host_peak,
                                 o->host_segs};
    } else if (o->nvme) {
        *st = (ump_tier_stats_t){o->nvme_limit, o->nvme_used, 0, o->nvme_peak,
                                 o->nvme_segs};
    }
    pthread_mutex_unlock(&pool->lock);
}

/* --- statistics and introspection ------------------------------------------ */

int offload_home(const struct run *r, size_t i)
{
    return res_seg_at(r->res, r->start + i)->home;
}

void offload_device_stats(ump_pool_t *pool, int d, ump_stats_t *st)
{
    const struct tier_ctr *c = &pool->off->ctr[d];
    st->host_bytes = c->host_bytes;
    st->nvme_bytes = c->nvme_bytes;
    st->spill_count = c->spill_count;
    st->spill_bytes = c->spill_bytes;
    st->restore_count = c->restore_count;
    st->restore_bytes = c->restore_bytes;
    st->evictions = c->evictions;
}

void offload_ptr_info(ump_pool_t *pool, const struct run *r, size_t g,
                      ump_ptr_info_t *info)
{
    const struct seg *s = res_seg_at(r->res, g);
    info->tier = s->tier;
    info->device = s->tier == UMP_TIER_DEVICE ? s->dev : -1;
    info->chunk_base = vas_addr(&pool->vas, s->g);
    info->chunk_size = tier_bytes(pool, s->n);
}

int offload_gran_tier(ump_pool_t *pool, size_t g)
{
    uintptr_t tag = vas_tag(&pool->vas, g);
    if (vas_tag_kind(tag) != VAS_RUN)
        return UMP_TIER_DEVICE;
    const struct run *r = vas_tag_owner(tag);
    return r->res ? res_seg_at(r->res, g)->tier : UMP_TIER_DEVICE;
}

void offload_hold_prefetch(ump_pool_t *pool, bool hold)
{
    pthread_mutex_lock(&pool->lock);
    pool->off->pf_hold = hold;
    if (!hold && pool->off->pf_head)
        worker_wake(pool, W_PREFETCH);
    pthread_mutex_unlock(&pool->lock);
}

int offload_inject_fault(ump_pool_t *pool, const char *what, int nth)
{
    struct offload *o = pool->off;
    if (nth < 0 || !what)
        return -EINVAL;
    if (!strcmp(what, "host_alloc")) {
        pthread_mutex_lock(&pool->lock);
        o->host_fault = nth;
        pthread_mutex_unlock(&pool->lock);
        return 0;
    }
    if (strcmp(what, "eio") && strcmp(what, "enospc") &&
        strcmp(what, "short_write") && strcmp(what, "corrupt"))
        return -EINVAL;
    return xfer_inject_fault(pool, what, nth);
}
