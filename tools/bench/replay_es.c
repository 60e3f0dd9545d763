/*
 * The competitor of umpool-bench replay on the sim: a model of PyTorch's
 * CUDA caching allocator with expandable segments
 * (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), the configuration
 * the H200 figure is of (0.26 s for the hidden trace, 1.007
 * reserved/live). Written from the behaviour of
 * c10/cuda/CUDACachingAllocator.cpp (ExpandableSegment and
 * DeviceCachingAllocator), one stream, no CUDA graphs, default settings:
 *
 *  - sizes are rounded up to 512 bytes; up to 1 MiB they go to the small
 *    pool, beyond to the large pool; each pool has one segment of address
 *    space (reserved once, 9/8 of the device's memory) into which it maps
 *    pages of 2 MiB (small) or 20 MiB (large), one driver handle each;
 *  - an allocation takes the best-fitting free block of its pool (the
 *    smallest at least as large, lowest address among equals; a free block
 *    followed by the segment's unmapped part counts as large as it could
 *    grow, so the search passes it for a block that fits as it is) and
 *    splits off what is left over when that is 512 bytes or more;
 *  - when none fits, the segment grows at its lowest unmapped address that
 *    fits (with the free block just before it): the missing pages are
 *    created one by one, mapped one by one, and given device access in one
 *    call over them (the driver charges per handle);
 *  - a free merges the block with its free neighbours; nothing is unmapped;
 *  - when the device's memory runs out (cuMemCreate fails; the pages it
 *    made for the request are released), every free block's whole pages
 *    are unmapped and released (after a stream sync, as emptyCache does)
 *    and the growth is tried once more; then the allocation fails.
 *
 * Left out, as the replay never needs them: several streams, events, CUDA
 * graphs' pools, max_split_size and the roundup options (their defaults
 * are off), garbage collection, IPC, and a second segment per pool (the
 * first one's address space is 9/8 of the device, never exhausted here).
 *
 * The model makes no driver call: each one is charged the H200's cost from
 * lib/topo/drivercost.c and, on the timed sim, waited for like the sim's
 * own calls (drvpace.h). Its bookkeeping runs for real between them, in
 * sorted arrays searched by bisection (PyTorch's std::set is a tree of the
 * same order), and without the statistics, history and Python around
 * PyTorch's: a lower bound of its wall time, where umpool's is all of its
 * own.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "replay.h"

#define ES_ROUND 512                    /* kMinBlockSize */
#define ES_SMALL_MAX ((size_t)1 << 20)  /* kSmallSize */
#define ES_SMALL_PAGE ((size_t)2 << 20) /* kSmallBuffer */
#define ES_LARGE_PAGE ((size_t)20 << 20) /* kLargeBuffer */

enum { B_ALLOC, B_FREE, B_UNMAPPED };

/* A block of a segment, in address order with its neighbours. */
struct blk {
    size_t off, size;
    int state;
    struct blk *prev, *next;
};

/* Blocks kept sorted by cmp. */
struct bset {
    struct blk **v;
    size_t n, cap;
    int (*cmp)(const struct blk *, const struct blk *);
};

struct seg {
    size_t page;
    bool made;
    struct blk *head; /* at address 0: merges keep the lower block */
    struct bset free;     /* by size, then address */
    struct bset unmapped; /* by address */
};

struct es {
    struct seg seg[2]; /* small, large */
    size_t capacity, va_size, reserved;
    struct es_result *r;
    bool nomem; /* the model's own memory ran out */
};

static int by_size(const struct blk *a, const struct blk *b)
{
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return (a->off > b->off) - (a->off < b->off);
}

static int by_addr(const struct blk *a, const struct blk *b)
{
    return (a->off > b->off) - (a->off < b->off);
}

/* The first index whose block is not below key. */
static size_t bset_lower(const struct bset *s, const struct blk *key)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->cmp(s->v[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool bset_add(struct bset *s, struct blk *b)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        struct blk **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    size_t i = bset_lower(s, b);
    memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof(*s->v));
    s->v[i] = b;
    s->n++;
    return true;
}

static void bset_del(struct bset *s, const struct blk *b)
{
    size_t i = bset_lower(s, b);
    if (i < s->n && s->v[i] == b) {
        memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof(*s->v));
        s->n--;
    }
}

static struct blk *blk_new(struct es *m, size_t off, size_t size, int state)
{
    struct blk *b = calloc(1, sizeof(*b));
    if (!b) {
        m->nomem = true;
        return NULL;
    }
    b->off = off;
    b->size = size;
    b->state = state;
    return b;
}

/* n goes right after b in address order. */
static void link_after(struct blk *b, struct blk *n)
{
    n->prev = b;
    n->next = b->next;
    if (b->next)
        b->next->prev = n;
    b->next = n;
}

/* b and its next, of one state, become b. The set holding next must not
 * hold it any more. */
static void absorb_next(struct blk *b)
{
    struct blk *n = b->next;
    b->size += n->size;
    b->next = n->next;
    if (b->next)
        b->next->prev = b;
    free(n);
}

/* Puts b in set; a failure ends the replay (the model's memory ran out). */
static void keep(struct es *m, struct bset *set, struct blk *b)
{
    if (!bset_add(set, b))
        m->nomem = true;
}

/* Splits b at offset at: b keeps what is before it, what is after becomes
 * a block of `state` right after b, put in set unless set is NULL.
 * Returns it; NULL when the model's memory ran out. */
static struct blk *split(struct es *m, struct bset *set, struct blk *b,
                         size_t at, int state)
{
    struct blk *n = blk_new(m, at, b->off + b->size - at, state);
    if (!n)
        return NULL;
    link_after(b, n);
    b->size = at - b->off;
    if (set)
        keep(m, set, n);
    return n;
}

/* Merges free (or unmapped) b with neighbours of its state; b is in no
 * set, the neighbours leave theirs. Returns b. */
static struct blk *merge(struct seg *s, struct blk *b)
{
    struct bset *set = b->state == B_FREE ? &s->free : &s->unmapped;
    struct blk *p = b->prev;
    if (p && p->state == b->state) {
        bset_del(set, p);
        absorb_next(p);
        b = p;
    }
    if (b->next && b->next->state == b->state) {
        bset_del(set, b->next);
        absorb_next(b);
    }
    return b;
}

/* The segment's address space, reserved at its first use. */
static bool seg_make(struct es *m, struct seg *s)
{
    if (s->made)
        return true;
    pace_call(&m->r->drv, PACE_RESERVE, 1, drvcost_h200.reserve_ns);
    struct blk *b = blk_new(m, 0, m->va_size / s->page * s->page, B_UNMAPPED);
    if (!b || !bset_add(&s->unmapped, b)) {
        free(b);
        m->nomem = true;
        return false;
    }
    s->head = b;
    s->made = true;
    return true;
}

/* As large as the block could be made: with the unmapped rest after it. */
static size_t grow_size(const struct blk *b)
{
    return b->size + (b->next && b->next->state == B_UNMAPPED ? b->next->size
                                                              : 0);
}

/* The best-fitting free block for size, out of the free set; NULL: none. */
static struct blk *best_fit(struct seg *s, size_t size)
{
    struct blk key = {.off = 0, .size = size};
    size_t i = bset_lower(&s->free, &key);
    if (i == s->free.n)
        return NULL;
    while (i + 1 < s->free.n &&
           grow_size(s->free.v[i + 1]) < grow_size(s->free.v[i]))
        i++;
    struct blk *b = s->free.v[i];
    memmove(s->free.v + i, s->free.v + i + 1,
            (s->free.n - i - 1) * sizeof(*s->free.v));
    s->free.n--;
    return b;
}

/* Maps the pages of at least `bytes` at the start of unmapped block u:
 * creates them one by one, maps them, gives access in one call. The new
 * free block is merged with its free neighbours and put in the free set;
 * returned. NULL when the device has no room (what was created for it is
 * released) or the model's memory ran out. */
static struct blk *map_pages(struct es *m, struct seg *s, struct blk *u,
                             size_t bytes)
{
    struct drv_pace *d = &m->r->drv;
    size_t pages = (bytes + s->page - 1) / s->page, len = pages * s->page;
    size_t room = m->capacity > m->reserved ? m->capacity - m->reserved : 0;
    if (len > room) { /* cuMemCreate fails at the first that does not fit */
        size_t made = room / s->page;
        for (size_t i = 0; i < made; i++)
            pace_create(d, s->page);
        for (size_t i = 0; i < made; i++)
            pace_release(d, s->page);
        return NULL;
    }
    for (size_t i = 0; i < pages; i++)
        pace_create(d, s->page);
    for (size_t i = 0; i < pages; i++)
        pace_map(d, s->page);
    pace_access(d, pages, s->page);
    m->r->pages += pages;
    m->reserved += len;
    if (m->reserved > m->r->peak_reserved)
        m->r->peak_reserved = m->reserved;
    bset_del(&s->unmapped, u);
    if (len < u->size && !split(m, &s->unmapped, u, u->off + len, B_UNMAPPED))
        return NULL;
    u->state = B_FREE;
    u = merge(s, u);
    keep(m, &s->free, u);
    return u;
}

/* Grows the segment for size: at its lowest unmapped block that, with the
 * free block before it, has room. The block, out of the free set; NULL
 * when the device (or the model's memory) has none. */
static struct blk *grow(struct es *m, struct seg *s, size_t size)
{
    struct blk *c = NULL;
    for (size_t i = 0; i < s->unmapped.n && !c; i++) {
        struct blk *u = s->unmapped.v[i];
        struct blk *b = u->prev && u->prev->state == B_FREE ? u->prev : u;
        size_t room = 0;
        for (struct blk *x = b; x && x->state != B_ALLOC && room < size;
             x = x->next)
            room += x->size;
        if (room >= size)
            c = b;
    }
    if (!c)
        return NULL;
    if (c->state == B_UNMAPPED) {
        c = map_pages(m, s, c, size < c->size ? size : c->size);
        if (!c)
            return NULL;
    }
    while (c->size < size) { /* free, then unmapped: map the difference */
        struct blk *u = c->next;
        size_t need = size - c->size;
        c = map_pages(m, s, u, need < u->size ? need : u->size);
        if (!c)
            return NULL;
    }
    bset_del(&s->free, c);
    return c;
}

/* Unmaps and releases the whole pages of every free block (emptyCache, or
 * an allocation that found the device full), after a stream sync per
 * block as PyTorch makes. */
static void release_cached(struct es *m)
{
    struct drv_pace *d = &m->r->drv;
    for (int k = 0; k < 2; k++) {
        struct seg *s = &m->seg[k];
        size_t n = s->free.n;
        struct blk **todo = malloc((n ? n : 1) * sizeof(*todo));
        if (!todo) {
            m->nomem = true;
            return;
        }
        memcpy(todo, s->free.v, n * sizeof(*todo));
        for (size_t i = 0; i < n; i++) {
            struct blk *b = todo[i];
            size_t first = (b->off + s->page - 1) / s->page * s->page;
            size_t end = (b->off + b->size) / s->page * s->page;
            if (first >= end)
                continue;
            pace_call(d, PACE_SYNC, 1, drvcost_h200.sync_ns);
            for (size_t p = first; p < end; p += s->page) {
                pace_unmap(d, s->page);
                pace_release(d, s->page);
            }
            m->reserved -= end - first;
            bset_del(&s->free, b);
            /* b becomes [free before][unmapped][free after] */
            if (end < b->off + b->size && !split(m, &s->free, b, end, B_FREE))
                break;
            struct blk *mid = b;
            if (first > b->off) {
                mid = split(m, NULL, b, first, B_UNMAPPED);
                if (!mid)
                    break;
                keep(m, &s->free, b);
            }
            mid->state = B_UNMAPPED;
            keep(m, &s->unmapped, merge(s, mid));
        }
        free(todo);
        if (m->nomem)
            return;
    }
}

/* One allocation; NULL when it fails. */
static struct blk *es_malloc(struct es *m, size_t bytes)
{
    size_t size = (bytes + ES_ROUND - 1) / ES_ROUND * ES_ROUND;
    struct seg *s = &m->seg[size > ES_SMALL_MAX];
    if (!seg_make(m, s))
        return NULL;
    struct blk *b = best_fit(s, size);
    if (!b)
        b = grow(m, s, size);
    if (!b && !m->nomem) {
        release_cached(m);
        b = grow(m, s, size);
    }
    if (!b)
        return NULL;
    b->state = B_ALLOC;
    if (b->size - size >= ES_ROUND) /* the rest stays free */
        split(m, &s->free, b, b->off + size, B_FREE);
    return b;
}

static void es_free(struct es *m, struct seg *s, struct blk *b)
{
    b->state = B_FREE;
    keep(m, &s->free, merge(s, b));
}

int es_replay(const struct trace *t, size_t capacity, unsigned scale,
              struct es_result *r)
{
    struct es m = {.capacity = capacity,
                   .va_size = capacity + capacity / 8,
                   .r = r};
    struct blk **live = calloc(t->nids ? t->nids : 1, sizeof(*live));
    unsigned char *pool_of = calloc(t->nids ? t->nids : 1, 1);

    memset(r, 0, sizeof(*r));
    r->drv.scale = scale;
    m.seg[0] = (struct seg){.page = ES_SMALL_PAGE,
                            .free = {.cmp = by_size},
                            .unmapped = {.cmp = by_addr}};
    m.seg[1] = (struct seg){.page = ES_LARGE_PAGE,
                            .free = {.cmp = by_size},
                            .unmapped = {.cmp = by_addr}};
    if (!live || !pool_of)
        m.nomem = true;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < t->n && !m.nomem; i++) {
        const struct op *op = &t->ops[i];
        if (op->alloc) {
            size_t size = (op->bytes + ES_ROUND - 1) / ES_ROUND * ES_ROUND;
            live[op->id] = es_malloc(&m, op->bytes);
            pool_of[op->id] = size > ES_SMALL_MAX;
            if (!live[op->id])
                r->failures++;
        } else if (live[op->id]) {
            es_free(&m, &m.seg[pool_of[op->id]], live[op->id]);
            live[op->id] = NULL;
        }
    }
    r->wall_s = (double)(now_ns() - t0) / 1e9;
    for (int k = 0; k < 2; k++) { /* the blocks, by their address chains */
        struct seg *s = &m.seg[k];
        struct blk *b = s->head;
        while (b) {
            struct blk *n = b->next;
            free(b);
            b = n;
        }
        free(s->free.v);
        free(s->unmapped.v);
    }
    free(live);
    free(pool_of);
    return m.nomem ? -ENOMEM : 0;
}
