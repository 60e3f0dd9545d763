#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "mem/chunks_int.h"
#include "topo/drivercost.h"
#include "util/internal.h"


/* Is chunk c wholly inside granules [g, g+n)? A carved run, and the
 * cached block next to it, may cover only part of a chunk (chunks.h). */
static bool chunk_in(const struct chunk *c, size_t g, size_t n)
{
    return c->g >= g && c->g + c->n <= g + n;
}

/* Granules [g, g+n) of place d join (cached) or leave the cached blocks.
 * Each chunk counts its cached granules (ncached); those of a chunk that
 * is not wholly cached are holes (ds->holes), cached memory that only
 * carving can reuse: a live allocation shares its chunk, so it can
 * neither be stitched nor given back. */
void chunks_cached_note(ump_pool_t *pool, int d, size_t g, size_t n,
                        bool cached)
{
    struct dev_state *ds = &pool->dev[d];
    for (size_t e = g + n; g < e;) {
        struct chunk *c = chunks_at(pool, g);
        size_t hi = c->g + c->n < e ? c->g + c->n : e;
        size_t was = c->ncached < c->n ? c->ncached : 0;
        c->ncached = cached ? c->ncached + (hi - g) : c->ncached - (hi - g);
        ds->holes = ds->holes - was + (c->ncached < c->n ? c->ncached : 0);
        g = hi;
    }
    if (cached)
        ds->cached += chunk_bytes(pool, n);
    else
        ds->cached -= chunk_bytes(pool, n);
}

bool chunks_shared(ump_pool_t *pool, size_t g, size_t n)
{
    return !chunk_in(chunks_at(pool, g), g, n) ||
           !chunk_in(chunks_at(pool, g + n - 1), g, n);
}

void chunks_block_unlink(struct dev_state *ds, struct block *b)
{
    ump_list_remove(&ds->blocks, &b->link);
}

static void block_push(struct dev_state *ds, struct block *b)
{
    ump_list_push_front(&ds->blocks, &b->link);
}

size_t chunks_available(ump_pool_t *pool, int device)
{
    if (pool_dev_failed(pool, device))
        return 0;
    struct dev_state *ds = &pool->dev[device];
    size_t room = ds->capacity > ds->created ? ds->capacity - ds->created : 0;
    /* Holes serve only carving, and only requests that fit them. */
    return (room >> pool->chunk_shift) + ds->idle_n +
           (ds->cached >> pool->chunk_shift) - ds->holes;
}

void chunks_available_all(ump_pool_t *pool, size_t *avail)
{
    for (int d = 0; d < pool->ndev; d++)
        avail[d] = chunks_available(pool, d);
}

/* Does block b begin with whole chunks adding up to exactly n granules?
 * (A block may begin inside a chunk whose first granules back a live run:
 * carve.) */
static bool block_has_prefix(ump_pool_t *pool, const struct block *b, size_t n)
{
    if (chunks_at(pool, b->start)->g != b->start)
        return false;
    size_t sum = 0;
    while (sum < n)
        sum += chunks_at(pool, b->start + sum)->n;
    return sum == n;
}

enum chunks_share chunks_share_for(ump_pool_t *pool, int device, size_t n,
                                   bool whole)
{
    if (whole || place_is_host(pool, device))
        return SHARE_NONE;
    const struct dev_state *ds = &pool->dev[device];
    size_t half = ds->capacity / 2;
    return pool->cfg.carve && ds->created_peak <= half &&
                   chunk_bytes(pool, n) <= half - ds->created_peak
               ? SHARE_CARVE
               : SHARE_KEEP;
}

int chunks_reuse(ump_pool_t *pool, int device, size_t n,
                 enum chunks_share share, size_t *start_p)
{
    struct dev_state *ds = &pool->dev[device];
    struct block *best = NULL, *fit = NULL;
    /* A failed device's blocks hold granules of chunks lost allocations
     * still share: never handed out. */
    if (pool_dev_failed(pool, device))
        return -ENOENT;
    /* Best fit, most recently freed first: an exact match ends the search.
     * A bigger block serves whole chunks at its front; carving, it serves
     * its front whatever the chunks (the smallest that is big enough). A
     * block whose edge chunk a live run shares is whole chunks for no
     * one. */
    ump_list_for_each(b, &ds->blocks, struct block, link) {
        if (b->n == n &&
            (share != SHARE_NONE || !chunks_shared(pool, b->start, n))) {
            best = b;
            break;
        }
        if (b->n < n)
            continue;
        if ((!best || b->n < best->n) && block_has_prefix(pool, b, n))
            best = b;
        if (!fit || b->n < fit->n)
            fit = b;
    }
    if (!best && share == SHARE_CARVE)
        best = fit;
    if (!best)
        return -ENOENT;
    *start_p = best->start;
    chunks_cached_note(pool, device, best->start, n, false);
    if (best->n == n) {
        chunks_block_unlink(ds, best);
        free(best);
    } else {
        best->start += n; /* the rest keeps its tags: they name best */
        best->n -= n;
    }
    return 0;
}


void chunks_idle_push(ump_pool_t *pool, struct chunk *c)
{
    /* A failed device's memory is never used again: given back at once
     * (kept idle, never handed out, if the driver refuses even that). */
    if (pool_dev_failed(pool, c->device) && !chunks_release_one(pool, c))
        return;
    struct dev_state *ds = &pool->dev[c->device];
    c->next = ds->idle;
    ds->idle = c;
    ds->idle_n += c->n;
}

/* Unmaps the whole chunks making up granules [g, g+k), which are not in use
 * and not in any block, and parks them as idle; their addresses go back to
 * the free ranges. On a driver error the chunks not yet unmapped stay
 * mapped and their granules are given back no further. */
int chunks_unmap_to_idle(ump_pool_t *pool, size_t g, size_t k)
{
    struct vas *v = &pool->vas;
    size_t i = g;
    int rc = 0;
    while (i < g + k) {
        struct chunk *c = chunks_at(pool, i);
        UMP_ASSERT(c->g == i && i + c->n <= g + k);
        rc = pool->be->unmap(pool->bctx, vas_addr(v, i),
                             chunk_bytes(pool, c->n));
        if (rc)
            break;
        for (size_t j = i; j < i + c->n; j++)
            v->gran[j].chunk = NULL;
        pool->dev[c->device].mapped -= chunk_bytes(pool, c->n);
        i += c->n;
        chunks_idle_push(pool, c); /* a failed device's: released, freed */
    }
    if (i > g) {
        vas_set(v, g, i - g, VAS_FREE, NULL);
        if (vas_give(v, g, i - g))
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", i - g);
    }
    return rc;
}

/* Takes the chunk at granules [g, g+k) out of cached block b, which holds
 * it: what is left before it stays b, what is left after becomes a block
 * of its own, counted as the least recently freed. -ENOMEM, b unchanged,
 * when that block cannot be made. */
int chunks_block_cut(ump_pool_t *pool, struct block *b, size_t g, size_t k)
{
    struct dev_state *ds = &pool->dev[b->device];
    size_t end = b->start + b->n;
    UMP_ASSERT(g >= b->start && g + k <= end);
    if (g > b->start && g + k < end) {
        struct block *t = malloc(sizeof(*t));
        if (!t)
            return -ENOMEM;
        *t = (struct block){.start = g + k, .n = end - g - k,
                            .device = b->device};
        vas_set(&pool->vas, t->start, t->n, VAS_CACHED, t);
        ump_list_push_back(&ds->blocks, &t->link);
        b->n = g - b->start;
    } else if (g == b->start) {
        b->start += k; /* the rest keeps its tags: they name b */
        b->n -= k;
        if (!b->n) {
            chunks_block_unlink(ds, b);
            free(b);
        }
    } else {
        b->n -= k;
    }
    chunks_cached_note(pool, (int)(ds - pool->dev), g, k, false);
    return 0;
}

/* Unmaps chunk c of cached block b and makes it idle (stitching: it will
 * back a new range, or be released). */
static int take_cached_chunk(ump_pool_t *pool, struct block *b,
                             struct chunk *c)
{
    size_t g = c->g, n = c->n;
    int rc = chunks_block_cut(pool, b, g, n);
    if (rc)
        return rc;
    /* Out of the block first: unmap_to_idle retags the granules. */
    rc = chunks_unmap_to_idle(pool, g, n);
    if (rc) /* still mapped: cache it again rather than lose track */
        chunks_cache(pool, g, n);
    return rc;
}

/* Unmaps one chunk of device's cached blocks, least recently freed block
 * first, and makes it idle: the smallest bigger than max_n if bigger is
 * set (a chunk to release in favour of smaller ones), else any chunk of at
 * most max_n granules. -ENOMEM when there is none. */
int chunks_reclaim_one(ump_pool_t *pool, int device, size_t max_n,
                       bool bigger)
{
    struct dev_state *ds = &pool->dev[device];
    struct block *hb = NULL;
    struct chunk *hc = NULL;
    ump_list_for_each_reverse(b, &ds->blocks, struct block, link) {
        for (size_t g = b->start; g < b->start + b->n;) {
            struct chunk *c = chunks_at(pool, g);
            if (!chunk_in(c, b->start, b->n)) { /* a live run shares it */
                g = c->g + c->n;
                continue;
            }
            if (bigger ? c->n > max_n && (!hc || c->n < hc->n)
                       : c->n <= max_n) {
                hb = b;
                hc = c;
                if (!bigger)
                    return take_cached_chunk(pool, hb, hc);
            }
            g += c->n;
        }
    }
    return hc ? take_cached_chunk(pool, hb, hc) : -ENOMEM;
}

/* A shared pool's processes count device memory in one ledger: what the
 * others hold is not this process's to create (-EDQUOT: create_chunk
 * then tries a smaller chunk, as when the driver is short, but keeps the
 * device's capacity, since the room comes back when the others free). */
static int charge(ump_pool_t *pool, int d, size_t bytes)
{
    if (!pool->share_ops || place_is_host(pool, d))
        return 0;
    return pool->share_ops->charge(pool, d, bytes);
}

static void uncharge(ump_pool_t *pool, int d, size_t bytes)
{
    if (pool->share_ops && !place_is_host(pool, d))
        pool->share_ops->uncharge(pool, d, bytes);
}

int chunks_release_one(ump_pool_t *pool, struct chunk *c)
{
    int rc = pool->be->chunk_release(pool->bctx, c->handle);
    if (rc) {
        ump_log_error("cannot release a chunk of device %d: %s", c->device,
                      ump_strerror(rc));
        return rc;
    }
    struct dev_state *ds = &pool->dev[c->device];
    uncharge(pool, c->device, chunk_bytes(pool, c->n));
    ds->created -= chunk_bytes(pool, c->n);
    if (!place_is_host(pool, c->device))
        pool->created -= chunk_bytes(pool, c->n);
    ds->chunks_released++;
    free(c);
    return 0;
}

/* Takes an idle chunk of device off the list (NULL: none): the largest of
 * at most max_n granules, or with bigger the smallest of more. */
static struct chunk *idle_take(ump_pool_t *pool, int device, size_t max_n,
                               bool bigger)
{
    struct dev_state *ds = &pool->dev[device];
    struct chunk **best = NULL;
    for (struct chunk **pc = &ds->idle; *pc; pc = &(*pc)->next) {
        size_t n = (*pc)->n;
        if (bigger ? n > max_n && (!best || n < (*best)->n)
                   : n <= max_n && (!best || n > (*best)->n))
            best = pc;
    }
    if (!best)
        return NULL;
    struct chunk *c = *best;
    *best = c->next;
    ds->idle_n -= c->n;
    return c;
}

/* The largest chunk to create on device now (chunks.h): max_chunk while
 * it holds no freed memory, warm_chunk once it does. */
static size_t chunk_cap(ump_pool_t *pool, int device)
{
    const struct dev_state *ds = &pool->dev[device];
    bool cold = !ds->cached && !ds->idle_n && !ds->parked;
    return cold ? pool->max_chunk_n : pool->warm_chunk_n;
}

/* The chunk to create for `left` granules: all of it, up to the cap. */
static size_t chunk_want(size_t cap, size_t left)
{
    return left < cap ? left : cap;
}

/* Modeled driver time to create `left` granules anew, in the chunks
 * chunk_want chooses under cap. */
static uint64_t create_cost(ump_pool_t *pool, size_t cap, size_t left)
{
    uint64_t ns = 0;
    while (left) {
        size_t n = chunk_want(cap, left);
        ns += drvcost_create_ns(chunk_bytes(pool, n));
        left -= n;
    }
    return ns;
}

#define STITCH_MAX 64 /* cached chunks weighed for one stitch */

static int cmp_chunk_size(const void *a, const void *b)
{
    size_t x = (*(struct chunk *const *)a)->n;
    size_t y = (*(struct chunk *const *)b)->n;
    return (x < y) - (x > y); /* largest first */
}

bool chunks_stitch_pays(ump_pool_t *pool, const size_t *ns, size_t k,
                        size_t left)
{
    uint64_t remap = 0, drop = 0;
    size_t sum = 0;
    for (size_t i = 0; i < k; i++) {
        remap += drvcost_remap_ns(chunk_bytes(pool, ns[i]));
        drop += drvcost_drop_ns(chunk_bytes(pool, ns[i]));
        sum += ns[i];
    }
    /* There are cached chunks to weigh: the device is warm. */
    size_t cap = pool->warm_chunk_n;
    return remap + create_cost(pool, cap, left - sum) <=
           create_cost(pool, cap, left) + drop;
}

/* Stitching: cached chunks of device that fit in `left` granules (the
 * largest first, from the least recently freed blocks' first STITCH_MAX
 * chunks) are unmapped to the idle list, where chunks_get takes them, when
 * chunks_stitch_pays says so. Returns how many granules it made idle. */
static size_t stitch(ump_pool_t *pool, int device, size_t left)
{
    struct dev_state *ds = &pool->dev[device];
    struct chunk *cand[STITCH_MAX];
    size_t nc = 0;
    ump_list_for_each_reverse(b, &ds->blocks, struct block, link) {
        for (size_t g = b->start; g < b->start + b->n && nc < STITCH_MAX;) {
            struct chunk *c = chunks_at(pool, g);
            if (c->n <= left && chunk_in(c, b->start, b->n))
                cand[nc++] = c;
            g = c->g + c->n;
        }
        if (nc == STITCH_MAX)
            break;
    }
    if (!nc)
        return 0;
    qsort(cand, nc, sizeof(*cand), cmp_chunk_size);
    size_t k = 0, sum = 0, ns[STITCH_MAX] = {0};
    for (size_t i = 0; i < nc && sum < left; i++) {
        if (sum + cand[i]->n > left)
            continue;
        sum += cand[i]->n;
        ns[k] = cand[i]->n;
        cand[k++] = cand[i];
    }
    if (!chunks_stitch_pays(pool, ns, k, left))
        return 0;
    size_t moved = 0;
    for (size_t i = 0; i < k; i++) {
        /* Its block found again from its tag: cutting a chunk out of a
         * block may have split it. */
        uintptr_t t = vas_tag(&pool->vas, cand[i]->g);
        UMP_ASSERT(vas_tag_kind(t) == VAS_CACHED);
        size_t n = cand[i]->n;
        if (take_cached_chunk(pool, vas_tag_owner(t), cand[i]))
            break;
        moved += n;
    }
    return moved;
}

/* Bytes place d may still create: its capacity's rest, or for the host
 * places what their shared budget leaves. */
static size_t place_room(ump_pool_t *pool, int d)
{
    size_t cap = pool->dev[d].capacity, used = pool->dev[d].created;
    if (place_is_host(pool, d)) {
        cap = pool->pinned_cap;
        used = pool->dev[place_host(pool)].created +
               pool->dev[place_overflow(pool)].created;
    }
    return cap > used ? cap - used : 0;
}

/* The NUMA node of the calling thread's CPU, for pinned host chunks:
 * the thread that asks for host memory is the one that fills it. */
static int host_node(ump_pool_t *pool)
{
    unsigned cpu, node;
    if (pool->topo.nnuma <= 1 || getcpu(&cpu, &node) ||
        node >= (unsigned)pool->topo.nnuma)
        return 0;
    return (int)node;
}

/* A chunk of size bytes for place d from the backend. */
static int backend_create(ump_pool_t *pool, int d, size_t size,
                          ump_handle_t *h)
{
    if (!place_is_host(pool, d))
        return pool->be->chunk_create(pool->bctx, d, size, h);
    int rc = pool->be->host_chunk_create(pool->bctx, host_node(pool), size, h);
    /* A driver with pinned host memory on no particular node only. */
    if (rc == -ENOTSUP)
        rc = pool->be->host_chunk_create(pool->bctx, -1, size, h);
    return rc;
}

/* A new chunk of device of want granules, fewer where the
 * device has less room. -ENOMEM when the device has no room. */
static int create_chunk(ump_pool_t *pool, int device, size_t want,
                        struct chunk **c_p)
{
    struct dev_state *ds = &pool->dev[device];
    size_t room = place_room(pool, device) >> pool->chunk_shift;
    size_t n = want < room ? want : room;
    if (!n)
        return -ENOMEM;
    struct chunk *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    int rc;
    /* A driver may lack one large piece while it still has smaller ones
     * (fragmented physical memory, or another process's use): powers of
     * two below it, halving. */
    for (;; n = ump_is_pow2(n) ? n / 2 : ump_pow2_floor(n)) {
        rc = charge(pool, device, chunk_bytes(pool, n));
        if (!rc) {
            rc = backend_create(pool, device, chunk_bytes(pool, n),
                                &c->handle);
            if (rc)
                uncharge(pool, device, chunk_bytes(pool, n));
        }
        if ((rc != -ENOMEM && rc != -EDQUOT) || n == 1)
            break;
    }
    if (rc == -EDQUOT) { /* the other processes hold it: room comes back
                            when they free, the capacity stays */
        free(c);
        return -ENOMEM;
    }
    if (rc) {
        free(c);
        if (rc == -ENOMEM && !place_is_host(pool, device)) {
            /* Not even one granule: the device has less room than we
             * counted (another process uses it); believe the driver. */
            ump_log_info("device %d full at %zu bytes created", device,
                         ds->created);
            ds->capacity = ds->created;
        }
        return rc;
    }
    c->device = device;
    c->n = n;
    c->g = 0;
    c->ncached = 0;
    c->next = NULL;
    ds->created += chunk_bytes(pool, n);
    if (ds->created > ds->created_peak)
        ds->created_peak = ds->created;
    if (place_is_host(pool, device)) {
        size_t both = pool->dev[place_host(pool)].created +
                      pool->dev[place_overflow(pool)].created;
        if (both > pool->pinned_created_peak)
            pool->pinned_created_peak = both;
    } else {
        pool->created += chunk_bytes(pool, n);
        if (pool->created > pool->created_peak)
            pool->created_peak = pool->created;
    }
    ds->chunks_created++;
    *c_p = c;
    return 0;
}

/* Releases one chunk of place d to the driver: idle, else unmapped from
 * its cached blocks (least recently freed block first); with bigger, the
 * smallest of more than max_n granules, else any of at most max_n. false
 * when there is none or the driver refused. */
static bool release_from(ump_pool_t *pool, int d, size_t max_n, bool bigger)
{
    struct chunk *c = idle_take(pool, d, max_n, bigger);
    if (!c) {
        if (chunks_reclaim_one(pool, d, max_n, bigger))
            return false;
        c = idle_take(pool, d, max_n, bigger);
        if (!c)
            return false;
    }
    if (chunks_release_one(pool, c)) {
        chunks_idle_push(pool, c);
        return false;
    }
    return true;
}

/* Reuse before growing, in this order: an idle chunk that fits; cached
 * chunks stitched, where the cost model says moving them pays; one bigger
 * idle or cached chunk released for chunks of the size needed (the
 * footprint stays, the driver does more work); then a new chunk; and on a
 * full device any cached chunk that fits, whatever moving it costs. A pool
 * that created while cached memory sat idle grew to fill its device on a
 * workload whose sizes drift (a training run with variable sequence
 * lengths: 2.99x its peak live bytes on 141 GiB). */
int chunks_get(ump_pool_t *pool, int device, size_t left,
               struct chunk **c_p)
{
    bool stitched = false, released = false;
    if (pool_dev_failed(pool, device))
        return -ENOMEM; /* placement never names it; a stale plan may */
    for (;;) {
        struct chunk *c = idle_take(pool, device, left, false);
        if (c) {
            *c_p = c;
            return 0;
        }
        /* The slow path's first try serves what is free as it is, with no
         * driver call: the pool flushes its thread caches and tries again
         * before anything is moved or made. */
        if (pool->no_grow)
            return -EAGAIN;
        /* Once per chunk each: what stitching moves to the idle list serves
         * the next rounds of this loop, and one release makes room for
         * what is left (releasing every bigger chunk would throw away
         * memory the next large request wants back). */
        if (!stitched) {
            stitched = true;
            if (stitch(pool, device, left))
                continue;
        }
        /* A bigger idle or cached chunk makes room for chunks of the
         * size needed. */
        if (!released && release_from(pool, device, left, true)) {
            released = true;
            continue;
        }
        int rc = create_chunk(pool, device,
                              chunk_want(chunk_cap(pool, device), left), c_p);
        if (rc != -ENOMEM)
            return rc;
        /* The device is full: small cached chunks must serve, whatever
         * moving them costs. */
        rc = chunks_reclaim_one(pool, device, left, false);
        /* A host place shares its budget with the other: what that one
         * holds unused goes back to make room. */
        if (rc && place_is_host(pool, device) &&
            release_from(pool,
                         device == place_host(pool) ? place_overflow(pool)
                                                    : place_host(pool),
                         SIZE_MAX, false))
            rc = 0;
        if (rc)
            return rc;
    }
}

/* Unmaps every cached chunk (they go idle), so that their addresses
 * coalesce. */
void chunks_reclaim_all(ump_pool_t *pool)
{
    for (int d = 0; d < pool->nplace; d++)
        while (!chunks_reclaim_one(pool, d, SIZE_MAX, false))
            ;
}

int chunks_accessors(ump_pool_t *pool, int d, int *devs)
{
    int n = 0;
    /* A failed device is given access to nothing: the driver refuses it.
     * That includes one the backend has told of (failing) and the pool
     * not handled yet: a move whose copy failed with the device maps the
     * host memory back at once, before the next public call marks it. */
    uint32_t bad = atomic_load(&pool->failing) | atomic_load(&pool->failed);
    for (int e = 0; e < pool->ndev; e++)
        if (!((bad >> e) & 1u) &&
            (place_is_host(pool, d) || topo_reaches(&pool->topo, e, d)))
            devs[n++] = e;
    return n;
}

/* Whole chunks of granules [g, g+k) go idle (mapped nowhere); a carved
 * edge's chunk, which a live run shares, cannot: its granules, tagged
 * free but still mapped (and so in no free range), are lost to reuse
 * (logged) until chunks_unshare gives their addresses back. Only where no
 * block can hold them. */
static void give_back(ump_pool_t *pool, size_t g, size_t k)
{
    size_t e = g + k;
    while (g < e) {
        struct chunk *c = chunks_at(pool, g);
        size_t ce = c->g + c->n < e ? c->g + c->n : e;
        if (!chunk_in(c, g, e - g)) {
            ump_log_error("out of memory for a cached block: %zu freed "
                          "bytes of a shared chunk are not reused",
                          chunk_bytes(pool, ce - g));
            vas_set(&pool->vas, g, ce - g, VAS_FREE, NULL);
        } else if (chunks_unmap_to_idle(pool, g, c->n)) {
            ump_log_error("cannot cache or unmap %zu freed bytes",
                          chunk_bytes(pool, c->n));
        }
        g = ce;
    }
}

static void cache_segment(ump_pool_t *pool, int d, size_t g, size_t k)
{
    struct vas *v = &pool->vas;
    struct dev_state *ds = &pool->dev[d];
    struct block *b = NULL, *r = NULL;
    size_t e = g + k;
    if (g > 0) {
        uintptr_t t = vas_tag(v, g - 1);
        struct block *l = vas_tag_owner(t);
        if (vas_tag_kind(t) == VAS_CACHED && l->device == d &&
            l->start + l->n == g)
            b = l;
    }
    if (e < v->ngran) {
        uintptr_t t = vas_tag(v, e);
        r = vas_tag_owner(t);
        if (vas_tag_kind(t) != VAS_CACHED || r->device != d || r->start != e)
            r = NULL;
    }
    if (b) { /* grows the block before it, which may then take r in */
        chunks_block_unlink(ds, b);
        b->n += k;
    } else if (r) { /* the block after it grows backwards */
        chunks_block_unlink(ds, r);
        r->start = g;
        r->n += k;
        b = r;
        r = NULL;
    } else {
        /* The spare is for a malloc that fails: a free must not leave
         * granules that belong to nothing. */
        b = malloc(sizeof(*b));
        if (!b && (b = ds->spare_block))
            ds->spare_block = NULL;
        if (!b) {
            give_back(pool, g, k);
            return;
        }
        *b = (struct block){.start = g, .n = k, .device = d};
    }
    vas_set(v, g, k, VAS_CACHED, b);
    if (r) {
        vas_set(v, r->start, r->n, VAS_CACHED, b);
        b->n += r->n;
        chunks_block_unlink(ds, r);
        free(r);
    }
    block_push(ds, b);
    chunks_cached_note(pool, d, g, k, true);
    if (!ds->spare_block)
        ds->spare_block = malloc(sizeof(*ds->spare_block));
    /* A failed device's memory is never used again: every chunk that is
     * now wholly free goes back to the driver (chunks_idle_push releases
     * it); one a lost allocation still shares waits for its free. */
    if (pool_dev_failed(pool, d))
        while (!chunks_reclaim_one(pool, d, SIZE_MAX, false))
            ;
}

void chunks_cache(ump_pool_t *pool, size_t start, size_t n)
{
    size_t g = start, end = start + n;
    while (g < end) {
        int d = chunks_device(pool, g);
        const struct chunk *c = chunks_at(pool, g);
        size_t e = c->g + c->n;
        while (e < end && chunks_device(pool, e) == d) {
            c = chunks_at(pool, e);
            e = c->g + c->n;
        }
        if (e > end) /* a carved run ends inside its last chunk */
            e = end;
        cache_segment(pool, d, g, e - g);
        g = e;
    }
}

void chunks_fail_device(ump_pool_t *pool, int d)
{
    struct dev_state *ds = &pool->dev[d];
    ds->capacity = 0;
    /* Cached chunks are unmapped (idle_push then releases them), idle ones
     * released. */
    while (!chunks_reclaim_one(pool, d, SIZE_MAX, false))
        ;
    struct chunk *keep = NULL;
    while (ds->idle) {
        struct chunk *c = ds->idle;
        ds->idle = c->next;
        ds->idle_n -= c->n;
        if (chunks_release_one(pool, c)) {
            c->next = keep;
            keep = c;
        }
    }
    for (struct chunk *c; (c = keep);) { /* the driver refused: kept */
        keep = c->next;
        c->next = ds->idle;
        ds->idle = c;
        ds->idle_n += c->n;
    }
}

bool chunks_range_failed(ump_pool_t *pool, size_t g, size_t n)
{
    for (size_t e = g + n; g < e;) {
        const struct chunk *c = chunks_at(pool, g);
        if (!c) { /* moved off the devices (a tracked run's segment) */
            g++;
            continue;
        }
        if (pool_dev_failed(pool, c->device))
            return true;
        g = c->g + c->n;
    }
    return false;
}

void chunks_trim(ump_pool_t *pool)
{
    chunks_reclaim_all(pool);
    for (int d = 0; d < pool->nplace; d++) {
        struct dev_state *ds = &pool->dev[d];
        while (ds->idle) {
            struct chunk *c = ds->idle;
            ds->idle = c->next;
            ds->idle_n -= c->n;
            if (chunks_release_one(pool, c)) { /* keep it: accounting stays true */
                chunks_idle_push(pool, c);
                break;
            }
        }
    }
}

/* Release windows (config release_window seconds): what a device used at
 * its highest in the current window and the one before is what "recent
 * peaks" means to the release policy. */
static void window_roll(ump_pool_t *pool, struct dev_state *ds)
{
    uint32_t ticks = (uint32_t)pool->cfg.release_window * 10; /* 0.1 s */
    uint32_t w = atomic_load_explicit(&pool->clock, memory_order_relaxed) /
                 (ticks ? ticks : 1);
    if (w == ds->win)
        return;
    ds->win_peak[1] = w == ds->win + 1 ? ds->win_peak[0] : 0;
    ds->win_peak[0] = ds->mapped - ds->cached;
    ds->win = w;
}

void chunks_note_in_use(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    size_t in_use = ds->mapped - ds->cached;
    if (in_use > ds->peak)
        ds->peak = in_use;
    window_roll(pool, ds);
    if (in_use > ds->win_peak[0])
        ds->win_peak[0] = in_use;
    /* The pool's peak is the devices'; the host places have theirs. */
    bool host = place_is_host(pool, device);
    size_t total = 0;
    for (int d = host ? pool->ndev : 0; d < (host ? pool->nplace : pool->ndev);
         d++)
        total += pool->dev[d].mapped - pool->dev[d].cached;
    size_t *peak = host ? &pool->pinned_peak : &pool->peak;
    if (total > *peak)
        *peak = total;
}

/* What the release policy lets device keep: its recent peak use plus the
 * threshold. */
static size_t surplus_keep(ump_pool_t *pool, struct dev_state *ds)
{
    window_roll(pool, ds);
    size_t keep = ds->win_peak[0] > ds->win_peak[1] ? ds->win_peak[0]
                                                    : ds->win_peak[1];
    size_t t = pool->cfg.release_threshold;
    return keep > SIZE_MAX - t ? SIZE_MAX : keep + t;
}

bool chunks_over_surplus(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    return ds->created > surplus_keep(pool, ds);
}

void chunks_release_surplus(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    size_t keep = surplus_keep(pool, ds);
    while (ds->created > keep) {
        struct chunk *c = idle_take(pool, device, SIZE_MAX, false);
        if (!c) {
            if (chunks_reclaim_one(pool, device, SIZE_MAX, false))
                return;
            continue;
        }
        if (chunks_release_one(pool, c)) {
            chunks_idle_push(pool, c);
            return;
        }
    }
}
