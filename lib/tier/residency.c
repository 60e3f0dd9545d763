/*
 * Residency: segments of tracked runs, their claims, the LRU and the tier
 * counters (contract in residency.h). Everything here runs with
 * pool->lock held; a struct res is freed here only (res_teardown), by the
 * last operation busy on it, so that a run freed while a move of it runs
 * with the lock dropped stays valid for that move.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"
#include "tier/backing.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "tier/xfer.h"
#include "util/internal.h"

/* --- lookup ---------------------------------------------------------------- */

struct seg *res_seg_at(struct res *res, size_t g)
{
    size_t lo = 0, hi = res->nseg;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (res->seg[mid].g <= g)
            lo = mid;
        else
            hi = mid;
    }
    return &res->seg[lo];
}

/* The tier layer reports a bad pointer itself, in the front end's words:
 * one line, where it is found. */
static int bad_range(const void *ptr, const char *fn, const char *why)
{
    if (fn)
        ump_log_error("%s: %p is %s", fn, ptr, why);
    return -EINVAL;
}

/* A slab object never moves (-ENOTSUP: nothing to do), but its range is
 * checked as a run's is: inside one live object, of its requested size. A
 * slab struct outlives its chunk: a stale tag names one whose granule
 * moved on. */
static int slab_range(const char *fn, const void *ptr, size_t size,
                      const struct slab *s, size_t g)
{
    if (s->granule != g)
        return bad_range(ptr, fn, "not inside a live allocation");
    size_t idx = (size_t)((const char *)ptr - s->base) / s->size;
    uint32_t w = idx < s->nobj ? atomic_load(&s->word[idx]) : 0;
    if (!obj_live(w))
        return bad_range(ptr, fn, "not inside a live allocation");
    size_t off = (size_t)((const char *)ptr - s->base) - idx * s->size;
    size_t osize = obj_req(w);
    if (size && (off >= osize || size > osize - off))
        return bad_range(ptr, fn, "the start of a range that leaves its allocation");
    return -ENOTSUP;
}

int res_find_range(ump_pool_t *pool, const char *fn, void *ptr, size_t size,
                   struct run **r_p, size_t *g0_p, size_t *g1_p)
{
    if (!ptr || !vas_contains(&pool->vas, ptr))
        return bad_range(ptr, fn, "not a pointer of this pool");
    size_t g = vas_index(&pool->vas, ptr);
    uintptr_t tag = vas_tag(&pool->vas, g);
    if (vas_tag_kind(tag) == VAS_SLAB)
        return slab_range(fn, ptr, size, vas_tag_owner(tag), g);
    struct run *r = vas_tag_kind(tag) == VAS_RUN ? vas_tag_owner(tag) : NULL;
    if (!r || obj_state(atomic_load(&r->word)) != OBJ_LIVE)
        return bad_range(ptr, fn, "not inside a live allocation");
    char *base = vas_addr(&pool->vas, r->start);
    size_t rsize = atomic_load(&r->size);
    size_t off = (size_t)((char *)ptr - base);
    if (!size) {
        off = 0;
        size = rsize;
    }
    if (off >= rsize || size > rsize - off)
        return bad_range(ptr, fn, "the start of a range that leaves its allocation");
    if (place_is_host(pool, r->device))
        return -ENOTSUP;
    *r_p = r;
    *g0_p = r->start + (off >> pool->chunk_shift);
    *g1_p = r->start + ((off + size - 1) >> pool->chunk_shift) + 1;
    return 0;
}

/* --- LRU ------------------------------------------------------------------- */

void res_lru_unlink(struct offload *o, struct seg *s)
{
    if (!s->in_lru)
        return;
    ump_list_remove(&o->lru, &s->lru);
    s->in_lru = false;
    o->lru_len--;
}

void res_lru_touch(struct offload *o, struct seg *s, bool hot)
{
    res_lru_unlink(o, s);
    if (hot) {
        ump_list_push_front(&o->lru, &s->lru);
        s->t_used = o->clock;
        s->cold = false;
    } else {
        ump_list_push_back(&o->lru, &s->lru);
        s->cold = true; /* first to go, until its next use */
        s->t_want = 0;
    }
    s->in_lru = true;
    o->lru_len++;
}

/* --- what the eviction order knows ----------------------------------------- */

uint64_t res_tick(struct offload *o)
{
    return ++o->clock;
}

void res_note_acquire(struct offload *o, struct seg *s, uint64_t now)
{
    s->gap = s->t_acq && now > s->t_acq ? now - s->t_acq : 0;
    s->t_acq = now;
    s->t_want = 0; /* the prefetch it had was for this use */
    res_lru_touch(o, s, true);
}

void res_note_want(struct seg *s, uint64_t now)
{
    s->t_want = now;
    s->cold = false;
}

void res_note_hot(struct offload *o, struct seg *s)
{
    s->gap = 0; /* the application's word over the pool's guess */
    res_lru_touch(o, s, true);
}

/* --- tracking -------------------------------------------------------------- */

int res_get(ump_pool_t *pool, struct run *r, struct res **res_p)
{
    if (r->res) {
        *res_p = r->res;
        return 0;
    }
    /* A chunk is what moves: one a neighbour shares cannot (res_unshare). */
    if (chunks_shared(pool, r->start, r->n))
        return -EBUSY;
    size_t nseg = 0;
    for (size_t g = r->start; g < r->start + r->n; g += chunks_at(pool, g)->n)
        nseg++;
    struct res *res = calloc(1, sizeof(*res) + nseg * sizeof(struct seg));
    if (!res)
        return -ENOMEM;
    res->run = r;
    res->nseg = nseg;
    size_t i = 0;
    for (size_t g = r->start; g < r->start + r->n; g += chunks_at(pool, g)->n) {
        struct seg *s = &res->seg[i++];
        const struct chunk *c = chunks_at(pool, g);
        UMP_ASSERT(c->g == g);
        s->g = g;
        s->n = c->n;
        s->home = s->dev = c->device;
        s->tier = UMP_TIER_DEVICE;
        s->dest = -1;
        s->res = res;
        res_lru_touch(pool->off, s, true);
    }
    r->res = res;
    *res_p = res;
    return 0;
}

/* May another thread be using memory of chunk c, other than run r's? Any
 * other run's granules say so: after the thread caches are taken back and
 * the parked runs cached, a run still there is live, or freed on a stream
 * whose work may still run (ump_free_async), or caught between a thread
 * cache and the lock (taken from it, not yet live; freed, not yet in it);
 * so do a slab's with objects out. Cached granules are free. */
static bool others_in(ump_pool_t *pool, const struct chunk *c,
                      const struct run *r)
{
    for (size_t g = c->g; g < c->g + c->n; g++) {
        uintptr_t t = vas_tag(&pool->vas, g);
        if (vas_tag_kind(t) == VAS_SLAB) {
            const struct slab *s = vas_tag_owner(t);
            if (s->nfree < s->nobj)
                return true;
        } else if (vas_tag_kind(t) == VAS_RUN && vas_tag_owner(t) != r) {
            return true;
        }
    }
    return false;
}

/* The chunk of run r's that a neighbour shares, at its start or else its
 * end; NULL when there is none. */
static struct chunk *shared_edge(ump_pool_t *pool, const struct run *r)
{
    struct chunk *c = chunks_at(pool, r->start);
    if (c->g < r->start || c->g + c->n > r->start + r->n)
        return c;
    c = chunks_at(pool, r->start + r->n - 1);
    return c->g + c->n > r->start + r->n ? c : NULL;
}

int res_unshare(ump_pool_t *pool, struct run *r, bool alone)
{
    /* Both edges first: refused, nothing is copied for nothing. */
    if (alone) {
        const struct chunk *a = chunks_at(pool, r->start);
        const struct chunk *b = chunks_at(pool, r->start + r->n - 1);
        if (others_in(pool, a, r) || others_in(pool, b, r))
            return -EBUSY;
    }
    for (struct chunk *c; (c = shared_edge(pool, r));) {
        void *stream;
        int rc = move_stream_get(pool, c->device, DIR_DOWN, &stream);
        if (!rc)
            rc = chunks_unshare(pool, c->g, stream);
        if (rc)
            return rc;
    }
    return 0;
}

void res_unbusy(ump_pool_t *pool, struct res *res)
{
    if (--res->busy)
        return;
    if (res->dead)
        res_teardown(pool, res);
    else /* a free may be waiting for it (offload_wait_idle) */
        pthread_cond_broadcast(&pool->off->moved);
}

void res_teardown(ump_pool_t *pool, struct res *res)
{
    struct run *r = res->run;
    vas_set(&pool->vas, r->start, r->n, VAS_FREE, NULL);
    for (size_t i = 0; i < res->nseg; i++) {
        struct seg *s = &res->seg[i];
        struct backing b;
        res_lru_unlink(pool->off, s);
        res_note_tier(pool, s, s->tier, -1);
        if (s->tier == UMP_TIER_NVME) {
            xfer_slots_free_later(pool, s->slots, s->n);
        } else if (backing_of(pool, s, &b)) {
            ump_log_error("out of memory: %zu bytes of a freed allocation "
                          "are lost", tier_bytes(pool, s->n));
            continue;
        } else if (backing_unmap(pool, &b, s->g)) {
            backing_clear(&b); /* still mapped: its addresses stay taken */
            continue;
        } else {
            backing_put(pool, &b);
        }
        if (vas_give(&pool->vas, s->g, s->n))
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", s->n);
    }
    r->res = NULL;
    free(res);
    runs_put(pool, r);
}

/* --- claims ---------------------------------------------------------------- */

/* Claims this thread holds: a move may claim others inside its own (room
 * made for a move up moves segments down), and those must not wait for a
 * hold that waits for the outer move to end. */
static _Thread_local unsigned claims_held;

void res_move_begin(ump_pool_t *pool, struct seg *s)
{
    while (s->moving || (pool->off->hold && !claims_held))
        pthread_cond_wait(&pool->off->moved, &pool->lock);
    s->moving = true;
    pool->off->moving++;
    claims_held++;
    s->res->busy++;
}

void res_move_end(ump_pool_t *pool, struct seg *s)
{
    s->moving = false;
    pool->off->moving--;
    claims_held--;
    pthread_cond_broadcast(&pool->off->moved);
    res_unbusy(pool, s->res);
}

/* --- accounting ------------------------------------------------------------ */

void res_note_tier(ump_pool_t *pool, const struct seg *s, int tier, int sign)
{
    tier_count(pool, s->home, s->n, tier, sign);
}

void tier_count(ump_pool_t *pool, int home, size_t n, int tier, int sign)
{
    struct offload *o = pool->off;
    struct tier_ctr *c = &o->ctr[home];
    size_t b = tier_bytes(pool, n);
    if (sign < 0 && tier != UMP_TIER_DEVICE)
        o->full = false;
    if (tier == UMP_TIER_HOST) {
        c->host_bytes = sign > 0 ? c->host_bytes + b : c->host_bytes - b;
        o->host_used = sign > 0 ? o->host_used + b : o->host_used - b;
        o->host_segs = sign > 0 ? o->host_segs + 1 : o->host_segs - 1;
        if (o->host_used > o->host_peak)
            o->host_peak = o->host_used;
    } else if (tier == UMP_TIER_NVME) {
        c->nvme_bytes = sign > 0 ? c->nvme_bytes + b : c->nvme_bytes - b;
        o->nvme_used = sign > 0 ? o->nvme_used + b : o->nvme_used - b;
        o->nvme_segs = sign > 0 ? o->nvme_segs + 1 : o->nvme_segs - 1;
        if (o->nvme_used > o->nvme_peak)
            o->nvme_peak = o->nvme_used;
    }
}

void res_note_move(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct tier_ctr *c = &pool->off->ctr[s->home];
    size_t b = tier_bytes(pool, s->n);
    if (tier > s->tier) {
        c->spill_count++;
        c->spill_bytes += b;
    } else if (tier < s->tier) { /* device to device is neither */
        c->restore_count++;
        c->restore_bytes += b;
    }
    s->discard = false; /* DONTNEED was for this move only */
    s->unmapped = false; /* the move mapped it (or, to NVMe, needs none) */
    res_note_tier(pool, s, s->tier, -1);
    res_note_tier(pool, s, tier, +1);
    s->tier = tier;
    s->dev = tier == UMP_TIER_DEVICE ? dev : -1;
    if (tier == UMP_TIER_DEVICE)
        chunks_note_in_use(pool, dev);
    if (tier == UMP_TIER_HOST)
        pool->off->host_in_use = true;
}
