#include "config.h"

#include <errno.h>
#include <string.h>

#include "mem/chunks.h"
#include "util/internal.h"

static size_t chunk_bytes(ump_pool_t *pool, size_t n)
{
    return n << pool->chunk_shift;
}

static void block_unlink(struct dev_state *ds, struct block *b)
{
    ump_list_remove(&ds->blocks, &b->link);
}

static void block_push(struct dev_state *ds, struct block *b)
{
    ump_list_push_front(&ds->blocks, &b->link);
}

size_t chunks_available(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    size_t room = ds->capacity > ds->created ? ds->capacity - ds->created : 0;
    return (room >> pool->chunk_shift) + ds->idle_n +
           (ds->cached >> pool->chunk_shift);
}

void chunks_available_all(ump_pool_t *pool, size_t *avail)
{
    for (int d = 0; d < pool->ndev; d++)
        avail[d] = chunks_available(pool, d);
}

/* Does block b begin with whole chunks adding up to exactly n granules? */
static bool block_has_prefix(ump_pool_t *pool, const struct block *b, size_t n)
{
    size_t sum = 0;
    while (sum < n)
        sum += chunks_at(pool, b->start + sum)->n;
    return sum == n;
}

int chunks_reuse(ump_pool_t *pool, int device, size_t n, size_t *start_p)
{
    struct dev_state *ds = &pool->dev[device];
    struct block *best = NULL;
    /* Best fit, most recently freed first: an exact match ends the search.
     * A bigger block serves only if it can be cut at a chunk boundary. */
    ump_list_for_each(b, &ds->blocks, struct block, link) {
        if (b->n == n) {
            best = b;
            break;
        }
        if (b->n > n && (!best || b->n < best->n) &&
            block_has_prefix(pool, b, n))
            best = b;
    }
    if (!best)
        return -ENOENT;
    *start_p = best->start;
    if (best->n == n) {
        block_unlink(ds, best);
        free(best);
    } else {
        best->start += n; /* the rest keeps its tags: they name best */
        best->n -= n;
    }
    ds->cached -= chunk_bytes(pool, n);
    return 0;
}

void chunks_idle_push(ump_pool_t *pool, struct chunk *c)
{
    struct dev_state *ds = &pool->dev[c->device];
    c->next = ds->idle;
    ds->idle = c;
    ds->idle_n += c->n;
}

/* Unmaps the whole chunks making up granules [g, g+k), which are not in use
 * and not in any block, and parks them as idle; their addresses go back to
 * the free ranges. On a driver error the chunks not yet unmapped stay
 * mapped and their granules are given back no further. */
static int unmap_to_idle(ump_pool_t *pool, size_t g, size_t k)
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
        chunks_idle_push(pool, c);
        i += c->n;
    }
    if (i > g) {
        vas_set(v, g, i - g, VAS_FREE, NULL);
        if (vas_give(v, g, i - g))
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", i - g);
    }
    return rc;
}

/* Unmaps the last chunk of device's least recently freed cached block
 * (stitching: the chunk will back a new range). -ENOMEM when none. */
static int reclaim_one(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    if (ump_list_empty(&ds->blocks))
        return -ENOMEM;
    struct block *b = ump_container_of(ds->blocks.last, struct block, link);
    struct chunk *c = chunks_at(pool, b->start + b->n - 1);
    size_t g = c->g, n = c->n;
    UMP_ASSERT(g >= b->start);
    /* Out of the block first: unmap_to_idle retags the granules. */
    b->n -= n;
    if (!b->n) {
        block_unlink(ds, b);
        free(b);
    }
    ds->cached -= chunk_bytes(pool, n);
    int rc = unmap_to_idle(pool, g, n);
    if (rc) /* still mapped: cache it again rather than lose track */
        chunks_cache(pool, g, n);
    return rc;
}

static int release_chunk(ump_pool_t *pool, struct chunk *c)
{
    int rc = pool->be->chunk_release(pool->bctx, c->handle);
    if (rc) {
        ump_log_error("cannot release a chunk of device %d: %s", c->device,
                      ump_strerror(rc));
        return rc;
    }
    struct dev_state *ds = &pool->dev[c->device];
    ds->created -= chunk_bytes(pool, c->n);
    pool->created -= chunk_bytes(pool, c->n);
    ds->chunks_released++;
    free(c);
    return 0;
}

/* Takes the idle chunk of device chosen by pick (NULL: none) off the list. */
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


/* A new chunk of device, as large as fits `left` granules, max_chunk and
 * the device's room. -ENOMEM when the device has no room. */
static int create_chunk(ump_pool_t *pool, int device, size_t left,
                        struct chunk **c_p)
{
    struct dev_state *ds = &pool->dev[device];
    size_t room = ds->capacity > ds->created
                      ? (ds->capacity - ds->created) >> pool->chunk_shift
                      : 0;
    size_t n = left < pool->max_chunk_n ? left : pool->max_chunk_n;
    if (room < n)
        n = room;
    if (!n)
        return -ENOMEM;
    struct chunk *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    int rc;
    /* A driver may lack one large piece while it still has smaller ones
     * (fragmented physical memory, or another process's use): halve. */
    for (n = ump_pow2_floor(n);; n /= 2) {
        rc = pool->be->chunk_create(pool->bctx, device, chunk_bytes(pool, n),
                                    &c->handle);
        if (rc != -ENOMEM || n == 1)
            break;
    }
    if (rc) {
        free(c);
        if (rc == -ENOMEM) {
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
    c->next = NULL;
    ds->created += chunk_bytes(pool, n);
    if (ds->created > ds->created_peak)
        ds->created_peak = ds->created;
    pool->created += chunk_bytes(pool, n);
    if (pool->created > pool->created_peak)
        pool->created_peak = pool->created;
    ds->chunks_created++;
    *c_p = c;
    return 0;
}

int chunks_get(ump_pool_t *pool, int device, size_t left,
               struct chunk **c_p)
{
    for (;;) {
        struct chunk *c = idle_take(pool, device, left, false);
        if (c) {
            *c_p = c;
            return 0;
        }
        int rc = create_chunk(pool, device, left, c_p);
        if (rc != -ENOMEM)
            return rc;
        rc = reclaim_one(pool, device);
        if (!rc)
            continue;
        if (rc != -ENOMEM)
            return rc;
        c = idle_take(pool, device, left, true);
        if (!c)
            return -ENOMEM;
        rc = release_chunk(pool, c);
        if (rc) {
            chunks_idle_push(pool, c);
            return rc;
        }
    }
}

int chunks_accessors(ump_pool_t *pool, int d, int *devs)
{
    int n = 0;
    for (int e = 0; e < pool->ndev; e++)
        if (topo_reaches(&pool->topo, e, d))
            devs[n++] = e;
    return n;
}

int chunks_build(ump_pool_t *pool, const ump_place_part_t *parts,
                 size_t nparts, size_t n, size_t *start_p)
{
    struct vas *v = &pool->vas;
    size_t start;
    if (vas_take(v, n, &start)) {
        /* Addresses are fragmented by cached blocks: unmap them all, so
         * their addresses coalesce, and try once more. */
        for (int d = 0; d < pool->ndev; d++)
            while (!ump_list_empty(&pool->dev[d].blocks))
                if (reclaim_one(pool, d))
                    break;
        if (vas_take(v, n, &start)) {
            ump_log_error("out of virtual addresses for %zu bytes "
                          "(va_size %zu)", chunk_bytes(pool, n), v->size);
            return -ENOMEM;
        }
    }
    size_t g = start;
    int rc = 0;
    for (size_t p = 0; p < nparts; p++) {
        for (size_t left = parts[p].chunks; left;) {
            struct chunk *c;
            rc = chunks_get(pool, parts[p].device, left, &c);
            if (rc)
                goto undo;
            rc = pool->be->map(pool->bctx, vas_addr(v, g),
                               chunk_bytes(pool, c->n), c->handle);
            if (rc) {
                chunks_idle_push(pool, c);
                goto undo;
            }
            c->g = g;
            for (size_t j = g; j < g + c->n; j++)
                v->gran[j].chunk = c;
            pool->dev[c->device].mapped += chunk_bytes(pool, c->n);
            g += c->n;
            left -= c->n;
        }
    }
    /* One access call per device segment: every device that can reach that
     * device's memory gets read-write access to it. */
    size_t s = start;
    for (size_t p = 0; p < nparts; p++) {
        int devs[UMP_MAX_DEVICES];
        int nd = chunks_accessors(pool, parts[p].device, devs);
        rc = pool->be->set_access(pool->bctx, vas_addr(v, s),
                                  chunk_bytes(pool, parts[p].chunks), devs, nd);
        if (rc)
            goto undo;
        s += parts[p].chunks;
    }
    *start_p = start;
    return 0;
undo:
    if (g > start && unmap_to_idle(pool, start, g - start))
        ump_log_error("cannot undo a partly built range: some of its %zu "
                      "bytes stay mapped", chunk_bytes(pool, g - start));
    if (g < start + n)
        vas_give(v, g, start + n - g);
    return rc;
}

static void cache_segment(ump_pool_t *pool, int d, size_t g, size_t k)
{
    struct vas *v = &pool->vas;
    struct dev_state *ds = &pool->dev[d];
    struct block *b = NULL;
    if (g > 0) {
        uintptr_t t = vas_tag(v, g - 1);
        struct block *l = vas_tag_owner(t);
        if (vas_tag_kind(t) == VAS_CACHED && l->device == d &&
            l->start + l->n == g) {
            b = l;
            b->n += k;
            block_unlink(ds, b);
        }
    }
    if (!b) {
        b = malloc(sizeof(*b));
        if (!b) {
            /* No memory for the block: give the chunks back instead. */
            if (unmap_to_idle(pool, g, k))
                ump_log_error("cannot cache or unmap %zu freed bytes",
                              chunk_bytes(pool, k));
            return;
        }
        *b = (struct block){.start = g, .n = k, .device = d};
    }
    vas_set(v, g, k, VAS_CACHED, b);
    size_t e = g + k;
    if (e < v->ngran) {
        uintptr_t t = vas_tag(v, e);
        struct block *r = vas_tag_owner(t);
        if (vas_tag_kind(t) == VAS_CACHED && r->device == d && r->start == e) {
            vas_set(v, r->start, r->n, VAS_CACHED, b);
            b->n += r->n;
            block_unlink(ds, r);
            free(r);
        }
    }
    block_push(ds, b);
    ds->cached += chunk_bytes(pool, k);
}

void chunks_cache(ump_pool_t *pool, size_t start, size_t n)
{
    size_t g = start, end = start + n;
    while (g < end) {
        int d = chunks_device(pool, g);
        size_t e = g + chunks_at(pool, g)->n;
        while (e < end && chunks_device(pool, e) == d)
            e += chunks_at(pool, e)->n;
        cache_segment(pool, d, g, e - g);
        g = e;
    }
}

void chunks_trim(ump_pool_t *pool)
{
    for (int d = 0; d < pool->ndev; d++) {
        struct dev_state *ds = &pool->dev[d];
        while (!ump_list_empty(&ds->blocks)) {
            if (reclaim_one(pool, d)) {
                ump_log_error("cannot unmap a cached block of device %d", d);
                break;
            }
        }
        while (ds->idle) {
            struct chunk *c = ds->idle;
            ds->idle = c->next;
            ds->idle_n -= c->n;
            if (release_chunk(pool, c)) { /* keep it: accounting stays true */
                chunks_idle_push(pool, c);
                break;
            }
        }
    }
}

void chunks_note_in_use(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    size_t in_use = ds->mapped - ds->cached;
    if (in_use > ds->peak)
        ds->peak = in_use;
    size_t total = 0;
    for (int d = 0; d < pool->ndev; d++)
        total += pool->dev[d].mapped - pool->dev[d].cached;
    if (total > pool->peak)
        pool->peak = total;
}
