/*
 * Suspend and resume in place (ump_pool_suspend / ump_pool_resume, whose
 * checks and flag live in front/suspend.c): every live allocation's bytes
 * on a device move down to the host tier or NVMe, and come back to the
 * device each was on. Runs move as the tiers move them (a run not tracked
 * yet becomes tracked, as ump_evict makes it); a slab's chunk, which the
 * tiers never move, is copied down whole and its chunk given back, the
 * slab keeping its granule (slab->away). What moved is listed in
 * pool->susp, by address, so that frees while suspended need nothing
 * special: a freed run is gone from its granule when resume looks.
 *
 * Pool lock held on entry and return; the moves drop it while they copy.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"
#include "tier/backing.h"
#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "tier/offload.h"
#include "tier/xfer.h"

/* One thing suspend moved down: a slab's chunk or a tracked segment, by
 * its first granule, with the device it was on. */
struct away {
    size_t g;
    int dev;
    bool slab;
    struct hpiece *host; /* slab on the host tier: its piece */
    uint64_t *slots;     /* slab on NVMe: its slot */
};

struct suspend {
    struct away *a;
    size_t n, cap;
};

static int note_away(ump_pool_t *pool, const struct away *a)
{
    struct suspend *sp = pool->susp;
    if (!sp && !(sp = pool->susp = calloc(1, sizeof(*sp))))
        return -ENOMEM;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? 2 * sp->cap : 64;
        struct away *na = realloc(sp->a, cap * sizeof(*na));
        if (!na)
            return -ENOMEM;
        sp->a = na;
        sp->cap = cap;
    }
    sp->a[sp->n++] = *a;
    return 0;
}

/* --- slabs ------------------------------------------------------------ */

/* A backing of the one device chunk c (the array is the backing's). */
static int chunk_backing(struct chunk *c, struct backing *b)
{
    memset(b, 0, sizeof(*b));
    b->tier = UMP_TIER_DEVICE;
    b->dev = c->device;
    if (!(b->dc = malloc(sizeof(*b->dc))))
        return -ENOMEM;
    b->dc[0] = c;
    b->ndc = 1;
    return 0;
}

/* Copies the granule at g to or from host piece p, in its window. */
static int host_copy(ump_pool_t *pool, struct hpiece *p, size_t g, int dev,
                     bool down)
{
    void *stream;
    int rc = move_stream_get(pool, dev, down ? DIR_DOWN : DIR_UP, &stream);
    if (rc)
        return rc;
    void *win = host_addr(pool, p), *at = vas_addr(&pool->vas, g);
    rc = pool->be->memcpy_async(pool->bctx, down ? win : at, down ? at : win,
                                pool->chunk_size, stream);
    int r2 = pool->be->stream_sync(pool->bctx, stream);
    rc = rc ? rc : r2;
    if (!rc)
        move_traffic(pool, down ? UMP_TIER_DEVICE : UMP_TIER_HOST, dev,
                     down ? UMP_TIER_HOST : UMP_TIER_DEVICE, dev, 1);
    return rc;
}

/* Slab s's chunk (one granule) goes down to tier and back to the driver. */
static int slab_down(ump_pool_t *pool, struct slab *s, int tier)
{
    size_t g = s->granule;
    struct chunk *c = chunks_at(pool, g);
    struct away a = {.g = g, .dev = s->device, .slab = true};
    struct backing b;
    void *stream;
    if (c->g != g || c->n != 1)
        return -ENOTSUP; /* slabs are built of one granule's chunk */
    int rc = note_away(pool, &a); /* room first: nothing to undo after */
    if (rc)
        return rc;
    pool->susp->n--;
    if (tier == UMP_TIER_HOST) {
        rc = host_get(pool, pool->topo.dev[a.dev].numa, 1, &a.host);
        if (!rc && (rc = host_copy(pool, a.host, g, a.dev, true)))
            host_put(pool, a.host);
    } else {
        rc = move_stream_get(pool, a.dev, DIR_DOWN, &stream);
        if (!rc)
            rc = xfer_slots_alloc(pool, 1, &a.slots);
        if (!rc && (rc = xfer_run(pool, vas_addr(&pool->vas, g), NULL,
                                  a.slots, 1, true, stream)))
            xfer_slots_free_later(pool, a.slots, 1);
        if (!rc)
            move_traffic(pool, UMP_TIER_DEVICE, a.dev, UMP_TIER_NVME, -1, 1);
    }
    if (rc)
        return rc;
    rc = chunk_backing(c, &b);
    if (!rc && (rc = backing_unmap(pool, &b, g)))
        backing_clear(&b);
    if (rc) {
        if (a.host)
            host_put(pool, a.host);
        else
            xfer_slots_free_later(pool, a.slots, 1);
        return rc;
    }
    backing_put(pool, &b); /* idle: released by the trim that follows */
    tier_count(pool, a.dev, 1, tier, +1);
    s->away = tier;
    pool->susp->a[pool->susp->n++] = a;
    return 0;
}

/* A slab's chunk back on its device, with its data. */
static int slab_up(ump_pool_t *pool, struct away *a)
{
    uintptr_t tag = vas_tag(&pool->vas, a->g);
    struct slab *s = vas_tag_owner(tag);
    struct chunk *c;
    struct backing b;
    /* Its device failed while the pool slept: the data is safe down here,
     * and the slab moves to a device that works. */
    int dev = a->dev;
    if (pool_dev_failed(pool, dev) && (dev = evict_working_device(pool, -1)) < 0)
        return -EIO;
    int rc = chunks_get(pool, dev, 1, &c);
    if (rc)
        return rc;
    if ((rc = chunk_backing(c, &b))) {
        chunks_idle_push(pool, c);
        return rc;
    }
    rc = backing_map(pool, &b, a->g, 1);
    if (rc) {
        backing_put(pool, &b);
        return rc;
    }
    backing_clear(&b);
    void *stream;
    if (a->host) {
        rc = host_copy(pool, a->host, a->g, dev, false);
    } else {
        rc = move_stream_get(pool, dev, DIR_UP, &stream);
        if (!rc)
            rc = xfer_run(pool, vas_addr(&pool->vas, a->g), NULL, a->slots,
                          1, false, stream);
        if (!rc)
            move_traffic(pool, UMP_TIER_NVME, -1, UMP_TIER_DEVICE, dev, 1);
    }
    if (rc) { /* the copy below stays: the chunk goes again */
        if (!chunk_backing(chunks_at(pool, a->g), &b) &&
            !backing_unmap(pool, &b, a->g))
            backing_put(pool, &b);
        else
            backing_clear(&b);
        return rc == -ENOMEM ? rc : -EIO;
    }
    if (a->host)
        host_put(pool, a->host);
    else
        xfer_slots_free_later(pool, a->slots, 1);
    tier_count(pool, a->dev, 1, s->away, -1);
    s->away = 0;
    if (dev != s->device)
        slab_move_device(pool, s, dev);
    chunks_note_in_use(pool, dev);
    return 0;
}

/* --- runs ------------------------------------------------------------- */

/* Every segment of r on a device goes down to tier. */
static int run_down(ump_pool_t *pool, struct run *r, int tier)
{
    struct res *res;
    int rc = res_get(pool, r, &res);
    if (rc)
        return rc;
    res->busy++; /* a free meanwhile waits for the last segment */
    for (size_t i = 0; i < res->nseg && !rc && !res->dead; i++) {
        struct seg *s = &res->seg[i];
        res_move_begin(pool, s);
        if (s->tier == UMP_TIER_DEVICE && !res->dead) {
            struct away a = {.g = s->g, .dev = s->dev};
            rc = note_away(pool, &a);
            if (!rc) {
                rc = tier == UMP_TIER_HOST
                         ? move_mem(pool, s, UMP_TIER_HOST, -1)
                         : move_to_nvme(pool, s);
                if (rc)
                    pool->susp->n--;
            }
        }
        res_move_end(pool, s);
    }
    res_unbusy(pool, res);
    return rc;
}

/* A segment moved down comes back to its device: gone or elsewhere by now
 * (freed meanwhile, its granule reused) is nothing to do. */
static int seg_up(ump_pool_t *pool, const struct away *a)
{
    uintptr_t tag = vas_tag(&pool->vas, a->g);
    if (vas_tag_kind(tag) != VAS_RUN)
        return 0;
    struct run *r = vas_tag_owner(tag);
    if (!r->res)
        return 0;
    struct seg *s = res_seg_at(r->res, a->g);
    if (s->g != a->g)
        return 0;
    struct res *res = r->res;
    res->busy++;
    res_move_begin(pool, s);
    int rc = 0, dev = a->dev;
    if (pool_dev_failed(pool, dev) && (dev = evict_working_device(pool, -1)) < 0)
        rc = -EIO;
    else if (!res->dead && s->tier == UMP_TIER_HOST)
        rc = move_mem(pool, s, UMP_TIER_DEVICE, dev);
    else if (!res->dead && s->tier == UMP_TIER_NVME)
        rc = move_from_nvme(pool, s, UMP_TIER_DEVICE, dev);
    if (!rc && !res->dead)
        res_lru_touch(pool->off, s, true);
    res_move_end(pool, s);
    res_unbusy(pool, res);
    return rc;
}

/* --- the whole pool --------------------------------------------------- */

/* What down_one moves: to tier; with whole, only what has its chunks to
 * itself (the rest, carved, once unshare_one gave it its own). */
struct down {
    int tier;
    bool whole;
};

/* A slab or a live run, if on a device, down to the arg's tier. */
static int down_one(ump_pool_t *pool, struct slab *s, struct run *r,
                    void *arg)
{
    const struct down *dn = arg;
    /* Lost with a failed device: no bytes to move; they stay as they are
     * until freed (front/failure.c). */
    if (s)
        return !s->away && !place_is_host(pool, s->device) &&
                       s->nfree < s->nobj && !slab_lost(pool, s) &&
                       !(dn->whole && chunks_shared(pool, s->granule, 1))
                   ? slab_down(pool, s, dn->tier)
                   : 0;
    return place_is_host(pool, r->device) ||
                   chunks_range_failed(pool, r->start, r->n) ||
                   (dn->whole && !r->res &&
                    chunks_shared(pool, r->start, r->n))
               ? 0
               : run_down(pool, r, dn->tier);
}

/* A slab or a live run on a device that shares a chunk gets its own. */
static int unshare_one(ump_pool_t *pool, struct slab *s, struct run *r,
                       void *arg)
{
    (void)arg;
    int rc = 0;
    if (s) {
        if (!s->away && !place_is_host(pool, s->device) && !slab_lost(pool, s) &&
            chunks_shared(pool, s->granule, 1)) {
            void *stream;
            rc = move_stream_get(pool, s->device, DIR_DOWN, &stream);
            if (!rc)
                rc = chunks_unshare(pool, s->granule, stream);
        }
        if (rc)
            ump_log_error("ump_pool_suspend: cannot give a slab at %p a "
                          "chunk of its own: %s", s->base, ump_strerror(rc));
        return rc;
    }
    if (r->res || place_is_host(pool, r->device) ||
        chunks_range_failed(pool, r->start, r->n))
        return 0;
    rc = res_unshare(pool, r, false);
    if (rc)
        ump_log_error("ump_pool_suspend: cannot give the allocation at %p "
                      "chunks of its own: %s", vas_addr(&pool->vas, r->start),
                      ump_strerror(rc));
    return rc;
}

int offload_suspend(ump_pool_t *pool, int tier)
{
    if (tier == UMP_TIER_NVME && !pool->off->nvme) {
        ump_log_error("ump_pool_suspend: no NVMe tier (nvme_dir is not set)");
        return -EINVAL;
    }
    /* runs_walk reads each tag afresh: moves drop the lock, and frees
     * may change what the walk has not reached yet. A chunk is what moves:
     * what shares one (carved, mem/chunks.h) gets chunks of its own first,
     * safe here since nothing runs on the pool's memory now. That needs
     * device memory for the copies, so it comes after everything else has
     * gone down and what is cached has gone back: the shared chunks were
     * all cut while the device's peak was within half of it (carving), so
     * there is room then. Parked runs are free memory. */
    runs_unpark_all(pool);
    struct down dn = {tier, true};
    int rc = runs_walk(pool, down_one, &dn);
    if (!rc) {
        slab_trim(pool);
        chunks_trim(pool);
        rc = runs_walk(pool, unshare_one, NULL);
    }
    dn.whole = false;
    if (!rc)
        rc = runs_walk(pool, down_one, &dn);
    if (rc) {
        ump_log_error("ump_pool_suspend: cannot move everything down (%s); "
                      "what moved is moved back", ump_strerror(rc));
        int r2 = offload_resume(pool);
        if (r2)
            ump_log_error("ump_pool_suspend: %zu pieces stay on the lower "
                          "tier: %s", pool->susp ? pool->susp->n : 0,
                          ump_strerror(r2));
    }
    return rc;
}

int offload_resume(ump_pool_t *pool)
{
    struct suspend *sp = pool->susp;
    int rc = 0;
    /* From the end, so that what is left on error is a prefix. */
    while (sp && sp->n && !rc) {
        struct away a = sp->a[sp->n - 1];
        rc = a.slab ? slab_up(pool, &a) : seg_up(pool, &a);
        if (!rc)
            sp->n--;
    }
    return rc;
}

void offload_suspend_forget(ump_pool_t *pool)
{
    struct suspend *sp = pool->susp;
    if (!sp)
        return;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->a[i].host)
            host_put(pool, sp->a[i].host);
        else if (sp->a[i].slots)
            xfer_slots_free_later(pool, sp->a[i].slots, 1);
    }
    free(sp->a);
    free(sp);
    pool->susp = NULL;
}
