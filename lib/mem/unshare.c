/*
 * Unsharing a carved chunk (chunks_unshare, contract in chunks.h): every
 * run and slab that shares it gets chunks of its own, filled by a device
 * copy, switched in with full rollback. Split from chunks.c, whose
 * internals it uses through chunks_int.h.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "mem/chunks_int.h"
#include "util/internal.h"

/* --- unsharing a carved chunk --------------------------------------------- */

/* One owner's granules of a chunk being unshared: a run's or a slab's
 * (given chunks of its own cs[0..nc), filled at staging granules st), a
 * cached block's, or none's (granules lost to reuse: give_back). */
struct piece {
    size_t g, n;
    int kind; /* VAS_RUN or VAS_SLAB: an owner's; VAS_CACHED, VAS_FREE */
    struct chunk **cs;
    size_t nc, st;
};

static bool piece_owned(const struct piece *p)
{
    return p->kind == VAS_RUN || p->kind == VAS_SLAB;
}

/* Unmaps chunk c where the granule table has it mapped (nothing if
 * nowhere). */
static int unmap_one(ump_pool_t *pool, struct chunk *c)
{
    struct vas *v = &pool->vas;
    if (v->gran[c->g].chunk != c)
        return 0;
    int rc = pool->be->unmap(pool->bctx, vas_addr(v, c->g),
                             chunk_bytes(pool, c->n));
    if (rc)
        return rc;
    for (size_t j = c->g; j < c->g + c->n; j++)
        v->gran[j].chunk = NULL;
    pool->dev[c->device].mapped -= chunk_bytes(pool, c->n);
    return 0;
}

/* Maps chunks cs[0..nc) one after the other from granule g, which the
 * caller owns, and gives device d's accessors access; on error what it
 * mapped is unmapped again. */
static int map_all(ump_pool_t *pool, struct chunk **cs, size_t nc, size_t g,
                   int d)
{
    size_t at, i;
    int rc = chunks_map_in_order(pool, cs, nc, g, &i, &at);
    if (!rc) {
        int devs[UMP_MAX_DEVICES];
        int nd = chunks_accessors(pool, d, devs);
        rc = pool->be->set_access(pool->bctx, vas_addr(&pool->vas, g),
                                  chunk_bytes(pool, at - g), devs, nd);
    }
    for (size_t k = 0; rc && k < i; k++)
        if (unmap_one(pool, cs[k]))
            ump_log_error("cannot undo the mapping of %zu bytes at %p",
                          chunk_bytes(pool, cs[k]->n),
                          vas_addr(&pool->vas, cs[k]->g));
    return rc;
}

/* The pieces of chunk c by owner (vas tags), into pt; returns how many. */
static size_t pieces_of(ump_pool_t *pool, const struct chunk *c,
                        struct piece *pt)
{
    struct vas *v = &pool->vas;
    size_t np = 0;
    for (size_t g = c->g, e; g < c->g + c->n; g = e) {
        uintptr_t t = vas_tag(v, g);
        for (e = g + 1; e < c->g + c->n && vas_tag(v, e) == t;)
            e++;
        pt[np++] = (struct piece){.g = g, .n = e - g, .kind = vas_tag_kind(t)};
    }
    return np;
}

/* The new chunks of pt[0..np) go back: unmapped wherever they are and
 * idle, their staging addresses free again. One the driver will not
 * unmap stays where it is, with its addresses (logged). */
static void unstage(ump_pool_t *pool, struct piece *pt, size_t np)
{
    struct vas *v = &pool->vas;
    for (size_t i = 0; i < np; i++) {
        struct piece *p = &pt[i];
        bool staging_clear = true;
        for (size_t k = 0; k < p->nc; k++) {
            struct chunk *c = p->cs[k];
            bool at_staging = v->gran[c->g].chunk == c && c->g >= p->st &&
                              c->g < p->st + p->n;
            if (unmap_one(pool, c)) {
                ump_log_error("cannot unmap %zu bytes at %p: lost",
                              chunk_bytes(pool, c->n), vas_addr(v, c->g));
                staging_clear &= !at_staging;
                continue;
            }
            chunks_idle_push(pool, c);
        }
        if (p->nc && staging_clear)
            vas_give(v, p->st, p->n);
        free(p->cs);
        p->cs = NULL;
        p->nc = 0;
    }
}

/* New chunks for piece p on device d, mapped at staging addresses and
 * filled from the piece by a copy queued on stream. On error nothing is
 * left of them. */
static int stage(ump_pool_t *pool, struct piece *p, int d, void *stream)
{
    struct vas *v = &pool->vas;
    size_t nc = 0;
    bool took = false;
    int rc = (p->cs = malloc(p->n * sizeof(*p->cs))) ? 0 : -ENOMEM;
    if (!rc)
        rc = chunks_gather(pool, d, p->n, p->cs, &nc);
    if (!rc && !(took = !vas_take(v, p->n, &p->st)))
        rc = -ENOMEM;
    if (!rc && !(rc = map_all(pool, p->cs, nc, p->st, d)))
        rc = pool->be->memcpy_async(pool->bctx, vas_addr(v, p->st),
                                    vas_addr(v, p->g),
                                    chunk_bytes(pool, p->n), stream);
    if (rc) {
        /* nothing of this piece's is in flight: its copy was not queued */
        bool clear = true;
        for (size_t k = 0; k < nc; k++) {
            if (unmap_one(pool, p->cs[k])) {
                ump_log_error("cannot unmap %zu bytes at %p: lost",
                              chunk_bytes(pool, p->cs[k]->n),
                              vas_addr(v, p->cs[k]->g));
                clear = false;
                continue;
            }
            chunks_idle_push(pool, p->cs[k]);
        }
        if (took && clear)
            vas_give(v, p->st, p->n);
        free(p->cs);
        p->cs = NULL;
        return rc;
    }
    p->nc = nc;
    return 0;
}

/* Maps chunk c back at its addresses with its accessors' access, after a
 * failed switch: its memory still holds every owner's data. */
static void remap_shared(ump_pool_t *pool, struct chunk *c)
{
    struct vas *v = &pool->vas;
    int devs[UMP_MAX_DEVICES];
    int nd = chunks_accessors(pool, c->device, devs);
    int rc = pool->be->map(pool->bctx, vas_addr(v, c->g),
                           chunk_bytes(pool, c->n), c->handle);
    if (!rc)
        rc = pool->be->set_access(pool->bctx, vas_addr(v, c->g),
                                  chunk_bytes(pool, c->n), devs, nd);
    if (rc) {
        ump_log_error("cannot map %zu bytes back at %p after a failed "
                      "unshare: their data is lost (%s)",
                      chunk_bytes(pool, c->n), vas_addr(v, c->g),
                      ump_strerror(rc));
        return;
    }
    for (size_t j = c->g; j < c->g + c->n; j++)
        v->gran[j].chunk = c;
    pool->dev[c->device].mapped += chunk_bytes(pool, c->n);
}

/* c's cached pieces of pt[0..np) back into cached blocks (c mapped), or,
 * with c gone for good, free addresses. */
static void uncut(ump_pool_t *pool, const struct piece *pt, size_t np,
                  bool mapped)
{
    for (size_t i = 0; i < np; i++) {
        if (pt[i].kind != VAS_CACHED)
            continue;
        if (mapped) {
            chunks_cache(pool, pt[i].g, pt[i].n);
        } else if (vas_give(&pool->vas, pt[i].g, pt[i].n)) {
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", pt[i].n);
        }
    }
}

int chunks_unshare(ump_pool_t *pool, size_t g, void *stream)
{
    struct vas *v = &pool->vas;
    struct chunk *c = chunks_at(pool, g);
    int d = c->device, rc = 0;
    if (pool_dev_failed(pool, d))
        return -EIO;
    struct piece *pt = calloc(c->n, sizeof(*pt));
    if (!pt)
        return -ENOMEM;
    size_t np = pieces_of(pool, c, pt);
    /* Each owner's piece: new chunks at staging addresses, filled from c.
     * The copies are waited for whatever happens: none may still be
     * writing into memory given back. */
    for (size_t i = 0; i < np && !rc; i++)
        if (piece_owned(&pt[i]))
            rc = stage(pool, &pt[i], d, stream);
    int r2 = pool->be->stream_sync(pool->bctx, stream);
    rc = rc ? rc : r2;
    if (rc) {
        unstage(pool, pt, np);
        free(pt);
        return rc;
    }
    /* c's cached granules leave their blocks while c is still mapped (the
     * holes' count reads it). c's edge is their block's edge, so no block
     * is split and block_cut needs no memory. */
    for (size_t i = 0; i < np; i++)
        if (pt[i].kind == VAS_CACHED) {
            chunks_block_cut(pool, vas_tag_owner(vas_tag(v, pt[i].g)), pt[i].g,
                      pt[i].n);
            vas_set(v, pt[i].g, pt[i].n, VAS_FREE, NULL);
        }
    /* The switch: c goes, each owner's chunks move from staging to its
     * piece. */
    rc = pool->be->unmap(pool->bctx, vas_addr(v, c->g),
                         chunk_bytes(pool, c->n));
    if (rc) {
        uncut(pool, pt, np, true);
        unstage(pool, pt, np);
        free(pt);
        return rc;
    }
    for (size_t j = c->g; j < c->g + c->n; j++)
        v->gran[j].chunk = NULL;
    pool->dev[d].mapped -= chunk_bytes(pool, c->n);
    for (size_t i = 0; i < np && !rc; i++) {
        struct piece *p = &pt[i];
        if (!piece_owned(p))
            continue;
        for (size_t k = 0; k < p->nc && !rc; k++)
            rc = unmap_one(pool, p->cs[k]);
        if (!rc)
            rc = map_all(pool, p->cs, p->nc, p->g, d);
    }
    if (rc) { /* the driver refused what it took a moment ago */
        unstage(pool, pt, np);
        remap_shared(pool, c);
        uncut(pool, pt, np, v->gran[c->g].chunk == c);
        free(pt);
        return rc;
    }
    /* Done: the staging addresses, c's cached granules and granules lost
     * to reuse become free addresses. */
    for (size_t i = 0; i < np; i++) {
        struct piece *p = &pt[i];
        if (p->kind == VAS_FREE)
            vas_set(v, p->g, p->n, VAS_FREE, NULL);
        if (vas_give(v, piece_owned(p) ? p->st : p->g, p->n))
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", p->n);
        free(p->cs);
    }
    free(pt);
    if (chunks_release_one(pool, c))
        chunks_idle_push(pool, c); /* unmapped: idle, released later */
    return 0;
}
