/*
 * Address ranges built from chunks (contract in chunks.h: chunks_build,
 * chunks_build_at, chunks_extend): chunks gathered for each part of a
 * placement, mapped in order at free addresses, access granted, all or
 * nothing. Split from chunks.c, whose internals it uses through
 * chunks_int.h.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "mem/chunks_int.h"
#include "util/internal.h"

/* Chunks of device for `left` granules, appended to cs[*nc..]. On error
 * the caller gives back what cs holds. */
int chunks_gather(ump_pool_t *pool, int device, size_t left,
                  struct chunk **cs, size_t *nc)
{
    while (left) {
        struct chunk *c;
        int rc = chunks_get(pool, device, left, &c);
        if (rc)
            return rc;
        cs[(*nc)++] = c;
        left -= c->n;
    }
    return 0;
}

/* Maps cs[0..nc) one after the other from granule g0 and notes them in
 * the granule table; stops at the first error. How many it mapped into
 * *i_p, the granule after them into *g_p. */
int chunks_map_in_order(ump_pool_t *pool, struct chunk **cs, size_t nc,
                        size_t g0, size_t *i_p, size_t *g_p)
{
    struct vas *v = &pool->vas;
    size_t g = g0, i = 0;
    int rc = 0;
    for (; i < nc; i++) {
        struct chunk *c = cs[i];
        rc = pool->be->map(pool->bctx, vas_addr(v, g), chunk_bytes(pool, c->n),
                           c->handle);
        if (rc)
            break;
        c->g = g;
        for (size_t j = g; j < g + c->n; j++)
            v->gran[j].chunk = c;
        pool->dev[c->device].mapped += chunk_bytes(pool, c->n);
        g += c->n;
    }
    *i_p = i;
    *g_p = g;
    return rc;
}

/* Maps cs[0..nc), total granules, one after the other from granule g0,
 * whose addresses the caller took. On error it is all undone: what was
 * mapped is unmapped, every chunk goes idle, and the addresses go back. */
static int map_chunks(ump_pool_t *pool, struct chunk **cs, size_t nc,
                      size_t g0, size_t total)
{
    struct vas *v = &pool->vas;
    size_t g, i;
    int rc = chunks_map_in_order(pool, cs, nc, g0, &i, &g);
    if (!rc)
        return 0;
    for (; i < nc; i++) /* never mapped */
        chunks_idle_push(pool, cs[i]);
    if (g > g0 && chunks_unmap_to_idle(pool, g0, g - g0))
        ump_log_error("cannot undo a partly built range: some of its %zu "
                      "bytes stay mapped", chunk_bytes(pool, g - g0));
    if (g < g0 + total)
        vas_give(v, g, g0 + total - g);
    return rc;
}

/* Read-write access to [g, g+k), memory of device d, for every device
 * that can reach it. On error the range (all mapped) is unmapped. */
static int grant(ump_pool_t *pool, int d, size_t g, size_t k)
{
    int devs[UMP_MAX_DEVICES];
    int nd = chunks_accessors(pool, d, devs);
    void *va = vas_addr(&pool->vas, g);
    int rc = place_is_host(pool, d)
                 ? pool->be->set_access_host(pool->bctx, va,
                                             chunk_bytes(pool, k), devs, nd)
                 : pool->be->set_access(pool->bctx, va, chunk_bytes(pool, k),
                                        devs, nd);
    if (rc && chunks_unmap_to_idle(pool, g, k))
        ump_log_error("cannot undo a built range: some of its %zu bytes "
                      "stay mapped", chunk_bytes(pool, k));
    return rc;
}

/* chunks_build, at any free addresses or (fixed) at *start_p. */
static int build(ump_pool_t *pool, const ump_place_part_t *parts,
                 size_t nparts, size_t n, bool fixed, size_t *start_p)
{
    struct vas *v = &pool->vas;
    /* The chunks first, then the addresses: gathering may unmap cached
     * chunks, whose addresses then coalesce with their neighbours. */
    struct chunk **cs = malloc(n * sizeof(*cs));
    if (!cs)
        return -ENOMEM;
    size_t nc = 0, start;
    int rc = 0;
    for (size_t p = 0; p < nparts && !rc; p++)
        rc = chunks_gather(pool, parts[p].device, parts[p].chunks, cs, &nc);
    if (!rc && fixed) {
        start = *start_p;
        rc = vas_take_range(v, start, n);
    } else if (!rc && vas_take(v, n, &start)) {
        /* A shared pool's process asks for more of the pool's addresses;
         * else they are fragmented by cached blocks: unmap them all, so
         * that their addresses coalesce, and try once more. */
        bool more = pool->share_ops && !pool->share_ops->lease(pool, n);
        if (!more || vas_take(v, n, &start)) {
            chunks_reclaim_all(pool);
            if (vas_take(v, n, &start)) {
                ump_log_error("out of virtual addresses for %zu bytes "
                              "(va_size %zu)", chunk_bytes(pool, n),
                              v->size);
                rc = -ENOMEM;
            }
        }
    }
    if (rc) {
        while (nc)
            chunks_idle_push(pool, cs[--nc]);
        free(cs);
        return rc;
    }
    rc = map_chunks(pool, cs, nc, start, n);
    free(cs);
    if (rc)
        return rc;
    /* One access call per device segment: every device that can reach that
     * device's memory gets read-write access to it. */
    for (size_t p = 0, s = start; p < nparts; s += parts[p++].chunks) {
        rc = grant(pool, parts[p].device, s, parts[p].chunks);
        if (rc) {
            if (s > start && chunks_unmap_to_idle(pool, start, s - start))
                ump_log_error("cannot undo a built range: some of its %zu "
                              "bytes stay mapped",
                              chunk_bytes(pool, s - start));
            if (start + n > s + parts[p].chunks)
                chunks_unmap_to_idle(pool, s + parts[p].chunks,
                              start + n - s - parts[p].chunks);
            return rc;
        }
    }
    *start_p = start;
    return 0;
}

int chunks_build(ump_pool_t *pool, const ump_place_part_t *parts,
                 size_t nparts, size_t n, size_t *start_p)
{
    return build(pool, parts, nparts, n, false, start_p);
}

int chunks_build_at(ump_pool_t *pool, const ump_place_part_t *parts,
                    size_t nparts, size_t n, size_t start)
{
    return build(pool, parts, nparts, n, true, &start);
}

int chunks_extend(ump_pool_t *pool, int device, size_t n,
                  enum chunks_share share, size_t *start_p)
{
    struct dev_state *ds = &pool->dev[device];
    struct vas *v = &pool->vas;
    struct block *best = NULL;
    if (pool_dev_failed(pool, device))
        return -ENOENT;
    /* Free addresses follow the block: it ends with a whole chunk. It may
     * begin inside one that a live run shares. */
    ump_list_for_each(b, &ds->blocks, struct block, link)
        if (b->n < n && (!best || b->n > best->n) &&
            (share != SHARE_NONE ||
             chunks_at(pool, b->start)->g == b->start) &&
            vas_free_at(v, b->start + b->n) >= n - b->n)
            best = b;
    if (!best)
        return -ENOENT;
    /* Off the cached list while memory is found for the rest, so that
     * stitching does not take its chunks; meanwhile its granules read as
     * free to a stray pointer, which is what they are. */
    struct block b = *best;
    chunks_block_unlink(ds, best);
    free(best);
    chunks_cached_note(pool, device, b.start, b.n, false);
    vas_set(v, b.start, b.n, VAS_FREE, NULL);
    size_t left = n - b.n, at = b.start + b.n, nc = 0;
    struct chunk **cs = malloc(left * sizeof(*cs));
    int rc = cs ? chunks_gather(pool, device, left, cs, &nc) : -ENOMEM;
    /* Gathering only ever gives addresses back: they are still free. */
    if (!rc && vas_take_at(v, at, left))
        rc = -ENOMEM;
    if (rc) {
        while (nc)
            chunks_idle_push(pool, cs[--nc]);
    } else if (!(rc = map_chunks(pool, cs, nc, at, left))) {
        rc = grant(pool, device, at, left);
    }
    free(cs);
    if (rc) {
        chunks_cache(pool, b.start, b.n); /* as it was */
        return rc;
    }
    *start_p = b.start;
    return 0;
}

