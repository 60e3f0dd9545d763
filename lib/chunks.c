#include "config.h"

#include <errno.h>
#include <string.h>

#include "chunks.h"
#include "internal.h"

static size_t chunk_bytes(ump_pool_t *pool, size_t n)
{
    return n << pool->chunk_shift;
}

static void block_unlink(struct dev_state *ds, struct block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        ds->blocks = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        ds->blocks_tail = b->prev;
    b->prev = b->next = NULL;
}

static void block_push(struct dev_state *ds, struct block *b)
{
    b->prev = NULL;
    b->next = ds->blocks;
    if (ds->blocks)
        ds->blocks->prev = b;
    else
        ds->blocks_tail = b;
    ds->blocks = b;
}

size_t chunks_available(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    size_t room = ds->capacity > ds->created ? ds->capacity - ds->created : 0;
    return (room >> pool->chunk_shift) + ds->idle_n +
           (ds->cached >> pool->chunk_shift);
}

int chunks_reuse(ump_pool_t *pool, int device, size_t n, size_t *start_p)
{
    struct dev_state *ds = &pool->dev[device];
    struct block *best = NULL;
    /* Best fit, most recently freed first: an exact match ends the search. */
    for (struct block *b = ds->blocks; b; b = b->next) {
        if (b->n == n) {
            best = b;
            break;
        }
        if (b->n > n && (!best || b->n < best->n))
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

/* Unmaps granules [g, g+k), all on one device and not in use, and parks
 * their chunks as idle. The caller has taken them out of any block. */
static int unmap_to_idle(ump_pool_t *pool, size_t g, size_t k)
{
    struct vas *v = &pool->vas;
    int rc = pool->be->unmap(pool->bctx, vas_addr(v, g), chunk_bytes(pool, k));
    if (rc)
        return rc;
    for (size_t i = g; i < g + k; i++) {
        struct chunk *c = v->gran[i].chunk;
        struct dev_state *ds = &pool->dev[c->device];
        v->gran[i].chunk = NULL;
        c->next = ds->idle;
        ds->idle = c;
        ds->idle_n++;
        ds->mapped -= pool->chunk_size;
    }
    vas_set(v, g, k, VAS_FREE, NULL);
    if (vas_give(v, g, k))
        ump_log_error("out of memory for the address range table: %zu "
                      "granules of addresses lost", k);
    return 0;
}

/* Frees one chunk of device by unmapping the last granule of its least
 * recently freed cached block (stitching: the chunk will back a new range). */
static int reclaim_one(ump_pool_t *pool, int device)
{
    struct dev_state *ds = &pool->dev[device];
    struct block *b = ds->blocks_tail;
    if (!b)
        return -ENOMEM;
    int rc = unmap_to_idle(pool, b->start + b->n - 1, 1);
    if (rc)
        return rc;
    ds->cached -= pool->chunk_size;
    if (--b->n == 0) {
        block_unlink(ds, b);
        free(b);
    }
    return 0;
}

/* One chunk of device: idle, else new, else reclaimed from cached blocks. */
static int get_chunk(ump_pool_t *pool, int device, struct chunk **c_p)
{
    struct dev_state *ds = &pool->dev[device];
    if (!ds->idle && ds->created + pool->chunk_size <= ds->capacity) {
        struct chunk *c = malloc(sizeof(*c));
        if (!c)
            return -ENOMEM;
        int rc = pool->be->chunk_create(pool->bctx, device, pool->chunk_size,
                                        &c->handle);
        if (!rc) {
            c->device = device;
            ds->created += pool->chunk_size;
            ds->chunks_created++;
            *c_p = c;
            return 0;
        }
        free(c);
        if (rc != -ENOMEM)
            return rc;
        /* The device has less room than we counted (another process uses
         * it): believe the driver from now on. */
        ump_log_info("device %d full at %zu bytes created", device,
                     ds->created);
        ds->capacity = ds->created;
    }
    if (!ds->idle) {
        int rc = reclaim_one(pool, device);
        if (rc)
            return rc;
    }
    struct chunk *c = ds->idle;
    ds->idle = c->next;
    ds->idle_n--;
    *c_p = c;
    return 0;
}

/* Devices that can reach memory of device d: itself and its peers. */
static int accessors(ump_pool_t *pool, int d, int *devs)
{
    int n = 0;
    for (int e = 0; e < pool->ndev; e++)
        if (e == d || pool->topo.link[e][d].peer)
            devs[n++] = e;
    return n;
}

int chunks_build(ump_pool_t *pool, const struct plan_part *parts, int nparts,
                 size_t n, size_t *start_p)
{
    struct vas *v = &pool->vas;
    size_t start;
    if (vas_take(v, n, &start)) {
        /* Addresses are fragmented by cached blocks: unmap them all, so
         * their addresses coalesce, and try once more. */
        for (int d = 0; d < pool->ndev; d++)
            while (pool->dev[d].blocks)
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
    for (int p = 0; p < nparts; p++) {
        for (size_t k = 0; k < parts[p].n; k++, g++) {
            struct chunk *c;
            rc = get_chunk(pool, parts[p].device, &c);
            if (rc)
                goto undo;
            rc = pool->be->map(pool->bctx, vas_addr(v, g), pool->chunk_size,
                               c->handle);
            if (rc) {
                struct dev_state *ds = &pool->dev[c->device];
                c->next = ds->idle;
                ds->idle = c;
                ds->idle_n++;
                goto undo;
            }
            v->gran[g].chunk = c;
            pool->dev[c->device].mapped += pool->chunk_size;
        }
    }
    /* One access call per device segment: every device that can reach that
     * device's memory gets read-write access to it. */
    size_t s = start;
    for (int p = 0; p < nparts; p++) {
        int devs[UMP_MAX_DEVICES];
        int nd = accessors(pool, parts[p].device, devs);
        rc = pool->be->set_access(pool->bctx, vas_addr(v, s),
                                  chunk_bytes(pool, parts[p].n), devs, nd);
        if (rc)
            goto undo;
        s += parts[p].n;
    }
    *start_p = start;
    return 0;
undo:
    if (g > start && unmap_to_idle(pool, start, g - start))
        ump_log_error("cannot undo a partly built range: %zu bytes of "
                      "addresses stay mapped", chunk_bytes(pool, g - start));
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
        size_t e = g + 1;
        while (e < end && chunks_device(pool, e) == d)
            e++;
        cache_segment(pool, d, g, e - g);
        g = e;
    }
}

static void release_idle(ump_pool_t *pool, struct dev_state *ds)
{
    while (ds->idle) {
        struct chunk *c = ds->idle;
        int rc = pool->be->chunk_release(pool->bctx, c->handle);
        if (rc) {
            ump_log_error("cannot release a chunk of device %d: %s",
                          c->device, ump_strerror(rc));
            return; /* keep it: accounting stays true */
        }
        ds->idle = c->next;
        ds->idle_n--;
        ds->created -= pool->chunk_size;
        ds->chunks_released++;
        free(c);
    }
}

void chunks_trim(ump_pool_t *pool)
{
    for (int d = 0; d < pool->ndev; d++) {
        struct dev_state *ds = &pool->dev[d];
        while (ds->blocks) {
            struct block *b = ds->blocks;
            if (unmap_to_idle(pool, b->start, b->n)) {
                ump_log_error("cannot unmap a cached block of device %d", d);
                break;
            }
            ds->cached -= chunk_bytes(pool, b->n);
            block_unlink(ds, b);
            free(b);
        }
        release_idle(pool, ds);
    }
}
