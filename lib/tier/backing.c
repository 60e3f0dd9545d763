/*
 * Backings: what holds a segment's data, and mapping it (contract in
 * backing.h). Device memory is chunks of the memory layer, in the VA
 * manager's granule table while mapped (a segment may be several chunks
 * after a move up); host memory is a list of pinned pieces (host.c). The
 * granule table and the devices' mapped bytes are kept true to what the
 * driver did, also when it refuses half way. Pool lock held throughout.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "tier/backing.h"
#include "tier/host.h"
#include "util/internal.h"

void backing_clear(struct backing *b)
{
    free(b->dc);
    memset(b, 0, sizeof(*b));
}

int backing_get(ump_pool_t *pool, int tier, int dev, int node, size_t n,
                struct backing *b)
{
    memset(b, 0, sizeof(*b));
    b->tier = tier;
    b->dev = dev;
    if (tier == UMP_TIER_HOST)
        return host_get(pool, node, n, &b->host);
    b->dc = calloc(n, sizeof(*b->dc));
    if (!b->dc)
        return -ENOMEM;
    for (size_t left = n; left;) {
        struct chunk *c;
        int rc = chunks_get(pool, dev, left, &c);
        if (rc) {
            for (size_t i = 0; i < b->ndc; i++)
                chunks_idle_push(pool, b->dc[i]);
            backing_clear(b);
            return rc;
        }
        b->dc[b->ndc++] = c;
        left -= c->n;
    }
    return 0;
}

int backing_of(ump_pool_t *pool, const struct seg *s, struct backing *b)
{
    memset(b, 0, sizeof(*b));
    b->tier = s->tier;
    b->dev = s->dev;
    if (s->tier == UMP_TIER_HOST) {
        b->host = s->host;
        b->unmapped = s->unmapped;
        return 0;
    }
    b->dc = calloc(s->n, sizeof(*b->dc));
    if (!b->dc)
        return -ENOMEM;
    for (size_t g = s->g; g < s->g + s->n; g += chunks_at(pool, g)->n)
        b->dc[b->ndc++] = chunks_at(pool, g);
    return 0;
}

void backing_put(ump_pool_t *pool, struct backing *b)
{
    if (b->tier == UMP_TIER_HOST)
        host_put(pool, b->host);
    for (size_t i = 0; i < b->ndc; i++)
        chunks_idle_push(pool, b->dc[i]);
    backing_clear(b);
}

/* Piece i of b: its handle and granules. Host pieces are a list: *hp is
 * the previous one (NULL before the first), so walk them in order. */
static void piece(const struct backing *b, size_t i, const struct hpiece **hp,
                  ump_handle_t *h_p, size_t *n_p)
{
    if (b->tier == UMP_TIER_HOST) {
        const struct hpiece *p = *hp ? (*hp)->next : b->host;
        *hp = p;
        *h_p = p->handle;
        *n_p = p->n;
    } else {
        *h_p = b->dc[i]->handle;
        *n_p = b->dc[i]->n;
    }
}

static size_t npieces(const struct backing *b)
{
    size_t k = 0;
    if (b->tier != UMP_TIER_HOST)
        return b->ndc;
    for (const struct hpiece *p = b->host; p; p = p->next)
        k++;
    return k;
}

/* Device chunk i of b, mapped (map true) or unmapped at granule at: the
 * granule table and the device's mapped bytes say so. */
static void table_note(ump_pool_t *pool, struct backing *b, size_t i,
                       size_t at, bool map)
{
    struct vas *v = &pool->vas;
    struct chunk *c = b->dc[i];
    if (map)
        c->g = at;
    for (size_t j = at; j < at + c->n; j++)
        v->gran[j].chunk = map ? c : NULL;
    if (map)
        pool->dev[b->dev].mapped += tier_bytes(pool, c->n);
    else
        pool->dev[b->dev].mapped -= tier_bytes(pool, c->n);
}

/* Maps (map true) or unmaps the first k pieces of b from granule g on,
 * in order, keeping the granule table and the device's mapped bytes true
 * to what the driver did (table false: an alias, which they do not
 * count); stops at the first failure, with *done_p pieces done. */
static int pieces_do(ump_pool_t *pool, struct backing *b, size_t g, size_t k,
                     bool map, bool table, size_t *done_p)
{
    struct vas *v = &pool->vas;
    const struct hpiece *hp = NULL;
    size_t at = g, i = 0;
    int rc = 0;
    for (; i < k; i++) {
        ump_handle_t h;
        size_t n;
        piece(b, i, &hp, &h, &n);
        void *va = vas_addr(v, at);
        rc = map ? pool->be->map(pool->bctx, va, tier_bytes(pool, n), h)
                 : pool->be->unmap(pool->bctx, va, tier_bytes(pool, n));
        if (rc)
            break;
        if (table && b->tier != UMP_TIER_HOST)
            table_note(pool, b, i, at, map);
        at += n;
    }
    *done_p = i;
    return rc;
}

/* Access to the granules [g, g+n) where b is mapped: every device that
 * can reach it; for host memory the CPU too only with config
 * host_cpu_access (its mapping costs more than the copy: host.c), since
 * the tier's own CPU work (disk I/O) goes through the window. */
static int backing_access(ump_pool_t *pool, const struct backing *b, size_t g,
                          size_t n)
{
    int devs[UMP_MAX_DEVICES], nd = 0;
    void *va = vas_addr(&pool->vas, g);
    if (b->tier != UMP_TIER_HOST) {
        nd = chunks_accessors(pool, b->dev, devs);
        return pool->be->set_access(pool->bctx, va, tier_bytes(pool, n), devs,
                                    nd);
    }
    nd = chunks_accessors(pool, place_host(pool), devs); /* working ones */
    if (nd && !pool->off->cpu_access)
        return pool->be->set_access(pool->bctx, va, tier_bytes(pool, n), devs,
                                    nd);
    return pool->be->set_access_host(pool->bctx, va, tier_bytes(pool, n), devs,
                                     nd);
}

/* Granules the first k pieces of b cover. */
static size_t pieces_len(const struct backing *b, size_t k)
{
    const struct hpiece *hp = NULL;
    size_t sum = 0;
    for (size_t i = 0; i < k; i++) {
        ump_handle_t h;
        size_t n;
        piece(b, i, &hp, &h, &n);
        sum += n;
    }
    return sum;
}

/* backing_map, with the granule table (table true) or as an alias. */
static int map_at(ump_pool_t *pool, struct backing *b, size_t g, size_t n,
                  bool table)
{
    size_t k = npieces(b), done, undone;
    int rc = pieces_do(pool, b, g, k, true, table, &done);
    if (!rc)
        rc = backing_access(pool, b, g, n);
    if (rc && pieces_do(pool, b, g, done, false, table, &undone))
        ump_log_error("cannot undo a failed mapping at %p: %zu bytes stay "
                      "mapped", vas_addr(&pool->vas, g),
                      tier_bytes(pool, pieces_len(b, done)));
    return rc;
}

/* backing_unmap, with the granule table (table true) or of an alias. */
static int unmap_at(ump_pool_t *pool, struct backing *b, size_t g, bool table)
{
    size_t done, redone;
    if (b->unmapped) { /* the driver refused to map it back: it is not */
        b->unmapped = false;
        return 0;
    }
    int rc = pieces_do(pool, b, g, npieces(b), false, table, &done);
    if (!rc || !done)
        return rc;
    size_t n = pieces_len(b, done);
    if (pieces_do(pool, b, g, done, true, table, &redone) ||
        backing_access(pool, b, g, n))
        ump_log_error("cannot map back %zu bytes at %p after a failed unmap: "
                      "their data is lost", tier_bytes(pool, n),
                      vas_addr(&pool->vas, g));
    return rc;
}

int backing_map(ump_pool_t *pool, struct backing *b, size_t g, size_t n)
{
    return map_at(pool, b, g, n, true);
}

int backing_unmap(ump_pool_t *pool, struct backing *b, size_t g)
{
    return unmap_at(pool, b, g, true);
}

int backing_alias(ump_pool_t *pool, struct backing *b, size_t g, size_t n)
{
    return map_at(pool, b, g, n, false);
}

int backing_unalias(ump_pool_t *pool, struct backing *b, size_t g)
{
    return unmap_at(pool, b, g, false);
}

void backing_rehome(ump_pool_t *pool, struct backing *b, size_t g)
{
    for (size_t i = 0, at = g; i < b->ndc; at += b->dc[i++]->n)
        table_note(pool, b, i, at, true);
}
