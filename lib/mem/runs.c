/*
 * Runs: allocations of chunks (struct run, in mem/pool.h), possibly from
 * several devices. A run is planned by its request's policy and built by
 * chunks.c, or reused: a freed run parked whole on its device, or a cached
 * block, whole chunks or carved (chunks.h). Run structs are recycled for
 * the pool's life. Every function here runs with pool->lock held.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"

struct run *runs_get(ump_pool_t *pool)
{
    struct run *r = pool->free_runs;
    if (r) {
        pool->free_runs = r->next;
        return r;
    }
    r = aligned_alloc(UMP_CACHELINE, sizeof(*r));
    if (r)
        memset(r, 0, sizeof(*r));
    return r;
}

/* Run structs are recycled, never freed while the pool lives: a stale
 * pointer's lookup then reads a valid (free) run, not freed memory. */
void runs_put(ump_pool_t *pool, struct run *r)
{
    r->next = pool->free_runs;
    pool->free_runs = r;
}

/* Plans (with the request's policy) and maps a new range; unless share is
 * SHARE_NONE, it may grow a cached block that shares its first chunk. */
static int run_build(ump_pool_t *pool, const struct place_req *pr,
                     enum chunks_share share, size_t *start_p, bool *mixed_p)
{
    ump_place_part_t *parts;
    size_t np = 1;
    int rc;
    if (place_is_host(pool, pr->req.device)) { /* a host place: no policy */
        parts = malloc(sizeof(*parts));
        if (!parts)
            return -ENOMEM;
        parts[0] = (ump_place_part_t){.device = pr->req.device,
                                      .chunks = pr->req.chunks};
    } else {
        size_t avail[UMP_MAX_DEVICES];
        chunks_available_all(pool, avail);
        rc = policy_plan(&pool->place, pr->policy, &pr->req, avail, &parts,
                         &np);
        if (rc)
            return rc;
    }
    /* On one device, a cached block that can grow in place to the size
     * needs new memory for the difference only. */
    rc = -ENOENT;
    if (np == 1)
        rc = chunks_extend(pool, parts[0].device, pr->req.chunks, share,
                           start_p);
    /* Not there, or no room for the rest while that block stood aside:
     * built from scratch, the block's chunks may serve. */
    if (rc == -ENOENT || rc == -ENOMEM)
        rc = chunks_build(pool, parts, np, pr->req.chunks, start_p);
    if (!rc) {
        *mixed_p = false;
        for (size_t p = 0; p < np; p++) {
            *mixed_p |= parts[p].device != parts[0].device;
            chunks_note_in_use(pool, parts[p].device);
        }
    }
    free(parts);
    return rc;
}

/* A parked run of exactly n chunks of device, taken off the list; one
 * that shares a chunk (carved) unless share is SHARE_NONE. */
static struct run *unpark(ump_pool_t *pool, int device, size_t n,
                          enum chunks_share share)
{
    struct dev_state *ds = &pool->dev[device];
    for (struct run **pr = &ds->runs; *pr; pr = &(*pr)->next) {
        struct run *r = *pr;
        if (r->n == n &&
            (share != SHARE_NONE || !chunks_shared(pool, r->start, n))) {
            *pr = r->next;
            ds->nruns--;
            ds->parked -= n << pool->chunk_shift;
            return r;
        }
    }
    return NULL;
}

/* A cached block serves a request only where its policy would put all of
 * it on the requesting device anyway. */
static bool reuse_ok(ump_pool_t *pool, const struct place_req *pr)
{
    return policy_prefers_requester(&pool->place, pr->policy);
}

/* A run struct for the n mapped granules at start, tagged, not live. */
static void run_init(ump_pool_t *pool, struct run *r, size_t start, size_t n,
                     bool mixed, unsigned flags)
{
    r->start = start;
    r->n = n;
    r->mixed = mixed;
    r->device = chunks_device(pool, start);
    r->flags = (unsigned char)flags;
    chunks_note_in_use(pool, r->device);
    atomic_store_explicit(&r->word, obj_word(OBJ_FREE, 0),
                          memory_order_relaxed);
    vas_set(&pool->vas, start, n, VAS_RUN, r);
}

int runs_alloc(ump_pool_t *pool, const struct place_req *pr,
               struct run **run_p)
{
    struct run *r = runs_get(pool);
    if (!r)
        return -ENOMEM;
    size_t start, n = pr->req.chunks;
    int dev = pr->req.device;
    bool mixed = false;
    int rc = -ENOENT;
    /* A chunk is what moves: an offloadable run owns whole ones. */
    enum chunks_share share = chunks_share_for(
        pool, dev, n, pr->req.flags & UMP_HINT_OFFLOAD);
    if (reuse_ok(pool, pr) && !pool_dev_failed(pool, dev)) {
        struct run *p = unpark(pool, dev, n, share);
        if (p) {
            runs_put(pool, r);
            p->flags = (unsigned char)pr->req.flags;
            *run_p = p;
            return 0;
        }
        rc = chunks_reuse(pool, dev, n, share, &start);
    }
    if (rc == -ENOENT)
        rc = run_build(pool, pr, share, &start, &mixed);
    if (rc) {
        runs_put(pool, r);
        return rc; /* a policy's own errno goes back as ump_alloc's */
    }
    run_init(pool, r, start, n, mixed, pr->req.flags);
    *run_p = r;
    return 0;
}

int runs_build_at(ump_pool_t *pool, size_t start,
                  const ump_place_part_t *parts, size_t np, unsigned flags,
                  struct run **run_p)
{
    struct run *r = runs_get(pool);
    if (!r)
        return -ENOMEM;
    size_t n = 0;
    bool mixed = false;
    for (size_t p = 0; p < np; p++) {
        n += parts[p].chunks;
        mixed |= parts[p].device != parts[0].device;
    }
    int rc = chunks_build_at(pool, parts, np, n, start);
    if (rc) {
        runs_put(pool, r);
        return rc;
    }
    for (size_t p = 0; p < np; p++)
        chunks_note_in_use(pool, parts[p].device);
    run_init(pool, r, start, n, mixed, flags);
    *run_p = r;
    return 0;
}

/* Every run parked on device becomes cached blocks. */
static void unpark_device(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    while (ds->runs) {
        struct run *r = ds->runs;
        ds->runs = r->next;
        ds->nruns--;
        ds->parked -= r->n << pool->chunk_shift;
        chunks_cache(pool, r->start, r->n); /* retags the granules */
        runs_put(pool, r);
    }
}

/* The release policy for device (chunks.h): its parked runs are cached
 * memory too, so they become cached blocks first when there is a surplus
 * to give back. */
static void release_surplus(ump_pool_t *pool, int device)
{
    if (!chunks_over_surplus(pool, device))
        return;
    unpark_device(pool, device);
    chunks_release_surplus(pool, device);
}

/* A freed run on one device is parked as it is, still tagged as a run, so
 * that the next allocation of its size takes it back with no work per
 * granule (retagging a 1 GiB run is 512 stores each way); it becomes cached
 * blocks when memory is tight, at ump_trim, or when too many are parked. */
void runs_free(ump_pool_t *pool, struct run *r)
{
    struct dev_state *ds = &pool->dev[r->device];
    int dev = r->device;
    if (!r->mixed && ds->nruns < RUN_PARK_MAX &&
        !pool_dev_failed(pool, dev)) {
        r->next = ds->runs;
        ds->runs = r;
        ds->nruns++;
        ds->parked += r->n << pool->chunk_shift;
    } else {
        chunks_cache(pool, r->start, r->n); /* retags the granules */
        runs_put(pool, r);
    }
    pool_clock_tick(pool); /* the windows of the release policy */
    release_surplus(pool, dev);
}

void runs_unpark_all(ump_pool_t *pool)
{
    for (int d = 0; d < pool->nplace; d++)
        unpark_device(pool, d);
}

int runs_walk(ump_pool_t *pool,
              int (*fn)(ump_pool_t *pool, struct slab *s, struct run *r,
                        void *arg),
              void *arg)
{
    struct vas *v = &pool->vas;
    int rc = 0;
    for (size_t g = 0; g < v->ngran && !rc;) {
        size_t free_n = vas_free_at(v, g);
        if (free_n) {
            g += free_n;
            continue;
        }
        uintptr_t tag = vas_tag(v, g);
        size_t step = 1;
        if (vas_tag_kind(tag) == VAS_SLAB) {
            struct slab *s = vas_tag_owner(tag);
            if (s->granule == g)
                rc = fn(pool, s, NULL, arg);
        } else if (vas_tag_kind(tag) == VAS_RUN) {
            struct run *r = vas_tag_owner(tag);
            if (r->start == g) {
                step = r->n;
                if (obj_state(atomic_load(&r->word)) == OBJ_LIVE)
                    rc = fn(pool, NULL, r, arg);
            }
        }
        g += step;
    }
    return rc;
}
