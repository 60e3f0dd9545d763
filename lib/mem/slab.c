#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "place/policy.h"
#include "mem/slab.h"

static struct slab_list *slab_list_of(ump_pool_t *pool, struct slab *s)
{
    struct dev_state *ds = &pool->dev[s->device];
    switch (s->list) {
    case SLAB_PARTIAL:
        return &ds->partial[s->cls];
    case SLAB_FULL:
        return &ds->full[s->cls];
    default:
        return &ds->empty[s->cls];
    }
}

static void slab_unlink(ump_pool_t *pool, struct slab *s)
{
    struct slab_list *l = slab_list_of(pool, s);
    ump_list_remove(&l->l, &s->link);
    l->count--;
}

static void slab_link(ump_pool_t *pool, struct slab *s, int list)
{
    s->list = list;
    struct slab_list *l = slab_list_of(pool, s);
    ump_list_push_front(&l->l, &s->link);
    l->count++;
}

/* Entries on the free stack: the free objects that are not fresh. */
static uint32_t slab_stacked(const struct slab *s)
{
    return s->nfree - (s->nobj - s->fresh);
}

static int slab_list_for(const struct slab *s)
{
    if (s->nfree == s->nobj)
        return SLAB_EMPTY;
    return s->nfree ? SLAB_PARTIAL : SLAB_FULL;
}

static void slab_destroy(struct slab *s)
{
    free(s->free_idx);
    free((void *)s->word);
    free(s);
}

/* A slab whose chunk went back: its struct and words are kept for the
 * pool's lifetime (like runs), so that a racing or stale free that read
 * the granule's tag before the release still reads valid memory, finds
 * every word FREE and fails cleanly. Pool lock held. */
static void slab_retire(ump_pool_t *pool, struct slab *s)
{
    s->granule = SIZE_MAX;
    s->next_retired = pool->free_slabs[s->cls];
    pool->free_slabs[s->cls] = s;
}

/* A new slab of class cls on the chunk at granule g. */
static struct slab *slab_new(ump_pool_t *pool, unsigned cls, size_t g)
{
    struct slab *s = pool->free_slabs[cls];
    if (s) {
        pool->free_slabs[cls] = s->next_retired;
        goto place; /* same class: same sizes, every word still FREE */
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->size = (uint32_t)sc_size(cls);
    s->nobj = (uint32_t)(pool->chunk_size / s->size);
    s->recip = (((uint64_t)1 << 52) + s->size - 1) / s->size;
    s->free_idx = malloc(s->nobj * sizeof(*s->free_idx));
    /* Whole cache lines: another slab's words, written by another thread,
     * must not share a line with these. */
    size_t wbytes = UMP_ALIGN_UP(s->nobj * sizeof(*s->word), UMP_CACHELINE);
    s->word = aligned_alloc(UMP_CACHELINE, wbytes);
    if (s->word)
        memset((void *)s->word, 0, wbytes);
    if (!s->free_idx || !s->word) {
        slab_destroy(s);
        return NULL;
    }
place:
    s->link = (struct ump_list_node){NULL, NULL};
    s->next_retired = NULL;
    s->base = vas_addr(&pool->vas, g);
    s->granule = g;
    s->cls = cls;
    s->device = chunks_device(pool, g);
    /* Hand out low addresses first (fresh counts up): a batch then shares
     * cache lines of the word array with itself rather than with another
     * thread's batch. */
    s->fresh = 0;
    s->nfree = s->nobj;
    return s;
}

/* A slab with free objects of class cls on device, or on the nearest device
 * with room when device has none. */
static int slab_find(ump_pool_t *pool, int device, unsigned cls,
                     unsigned flags, struct slab **s_p)
{
    struct dev_state *ds = &pool->dev[device];
    /* A failed device's slabs hand out nothing more (their free objects
     * are lost memory): the policy spills to a device that works. */
    bool failed = pool_dev_failed(pool, device);
    struct slab *s = failed ? NULL : slab_list_first(&ds->partial[cls]);
    if (!s && !failed)
        s = slab_list_first(&ds->empty[cls]);
    if (s) {
        *s_p = s;
        return 0;
    }
    /* Small objects live near the requesting device: "local" placement.
     * A host place is its own plan. */
    ump_place_part_t part = {.device = device, .chunks = 1};
    int rc;
    if (!place_is_host(pool, device)) {
        ump_place_request_t req = {.chunks = 1,
                                   .chunk_size = pool->chunk_size,
                                   .device = device, .flags = flags};
        ump_place_part_t *plan;
        size_t np;
        size_t avail[UMP_MAX_DEVICES];
        chunks_available_all(pool, avail);
        rc = policy_plan(&pool->place, pool->place.local, &req, avail, &plan,
                         &np);
        if (rc)
            return rc;
        part = plan[0];
        free(plan);
    }
    if (part.device != device) {
        /* Spilling: use a partly free slab there before a new chunk. */
        struct dev_state *other = &pool->dev[part.device];
        s = slab_list_first(&other->partial[cls]);
        if (!s)
            s = slab_list_first(&other->empty[cls]);
        if (s) {
            *s_p = s;
            return 0;
        }
    }
    size_t g;
    rc = chunks_reuse(pool, part.device, 1,
                      chunks_share_for(pool, part.device, 1, false), &g);
    if (rc == -ENOENT)
        rc = chunks_build(pool, &part, 1, 1, &g);
    if (rc)
        return rc;
    s = slab_new(pool, cls, g);
    if (!s) {
        chunks_cache(pool, g, 1);
        return -ENOMEM;
    }
    vas_set(&pool->vas, g, 1, VAS_SLAB, s);
    slab_link(pool, s, SLAB_EMPTY);
    chunks_note_in_use(pool, s->device);
    *s_p = s;
    return 0;
}

int slab_take(ump_pool_t *pool, int device, unsigned cls, unsigned flags,
              unsigned max, struct obj_ref *out, unsigned *n_p, int *device_p)
{
    struct slab *s;
    /* Suspended (tier/suspend.c): device memory is not handed out, and an
     * away slab's chunk is gone. An allocation that raced past the front
     * end's check stops here, under the lock. */
    if (atomic_load(&pool->suspended) && !place_is_host(pool, device))
        return -EBUSY;
    int rc = slab_find(pool, device, cls, flags, &s);
    if (rc)
        return rc;
    unsigned n = 0;
    while (n < max && s->nfree) {
        /* Freed objects first, the most recently freed on top (its cache
         * lines are warm), then the never used ones in address order. */
        uint32_t idx = slab_stacked(s) ? s->free_idx[slab_stacked(s) - 1]
                                       : s->fresh++;
        s->nfree--;
        out[n++] = (struct obj_ref){s->base + (size_t)idx * s->size, s, idx};
    }
    slab_unlink(pool, s);
    slab_link(pool, s, slab_list_for(s));
    *n_p = n;
    *device_p = s->device;
    return 0;
}

int slab_build_at(ump_pool_t *pool, int place, unsigned cls, size_t g,
                  const uint32_t *live, const uint32_t *req, size_t nlive,
                  struct slab **s_p)
{
    ump_place_part_t part = {.device = place, .chunks = 1};
    int rc = chunks_build_at(pool, &part, 1, 1, g);
    if (rc)
        return rc;
    struct slab *s = slab_new(pool, cls, g);
    if (!s) {
        chunks_cache(pool, g, 1);
        return -ENOMEM;
    }
    for (size_t i = 0; i < nlive; i++)
        atomic_store_explicit(&s->word[live[i]], obj_word(OBJ_LIVE, req[i]),
                              memory_order_relaxed);
    /* The free stack holds the others, low addresses on top (the order
     * slab_new's fresh objects come in); none is left fresh. */
    s->nfree = 0;
    s->fresh = s->nobj;
    for (uint32_t i = s->nobj; i-- > 0;)
        if (!obj_live(atomic_load_explicit(&s->word[i],
                                           memory_order_relaxed)))
            s->free_idx[s->nfree++] = i;
    vas_set(&pool->vas, g, 1, VAS_SLAB, s);
    slab_link(pool, s, slab_list_for(s));
    chunks_note_in_use(pool, s->device);
    *s_p = s;
    return 0;
}

static void slab_release(ump_pool_t *pool, struct slab *s)
{
    slab_unlink(pool, s);
    chunks_cache(pool, s->granule, 1); /* retags the granule as cached */
    slab_retire(pool, s);
}

void slab_put(ump_pool_t *pool, struct slab *s, uint32_t idx)
{
    s->free_idx[slab_stacked(s)] = idx;
    s->nfree++;
    int list = slab_list_for(s);
    if (list == s->list)
        return;
    slab_unlink(pool, s);
    if (list == SLAB_EMPTY && !s->away &&
        (pool->dev[s->device].empty[s->cls].count >= SLAB_EMPTY_KEEP ||
         pool_dev_failed(pool, s->device))) {
        s->list = SLAB_EMPTY; /* not linked: release without unlinking */
        chunks_cache(pool, s->granule, 1);
        slab_retire(pool, s);
        return;
    }
    slab_link(pool, s, list);
}

void slab_fail_device(ump_pool_t *pool, int d)
{
    for (unsigned c = 0; c < pool->nsmall; c++)
        ump_list_for_each_safe(s, nx, &pool->dev[d].empty[c].l, struct slab,
                               link)
            if (!s->away)
                slab_release(pool, s);
}

void slab_move_device(ump_pool_t *pool, struct slab *s, int d)
{
    /* Its live objects were counted as allocated on the old device; their
     * frees will count on d. The move counts as their frees there and
     * allocations here, so that both devices' live figures stay true and
     * the counters only grow. */
    uint64_t live = 0;
    for (uint32_t i = 0; i < s->nobj; i++)
        live += obj_live(atomic_load_explicit(&s->word[i],
                                              memory_order_relaxed));
    struct counters *from = &pool->folded[s->device], *to = &pool->folded[d];
    int64_t bytes = (int64_t)(live * s->size);
    atomic_fetch_add(&from->frees, live);
    atomic_fetch_sub(&from->live_bytes, bytes);
    atomic_fetch_add(&to->allocs, live);
    atomic_fetch_add(&to->live_bytes, bytes);
    slab_unlink(pool, s);
    s->device = d;
    slab_link(pool, s, slab_list_for(s));
}

bool slab_lost(const ump_pool_t *pool, const struct slab *s)
{
    return !s->away && pool_dev_failed(pool, s->device);
}

size_t slab_trim_place(ump_pool_t *pool, int d)
{
    size_t n = 0;
    for (unsigned c = 0; c < pool->nsmall; c++)
        ump_list_for_each_safe(s, nx, &pool->dev[d].empty[c].l, struct slab,
                               link)
            if (!s->away) { /* its chunk is gone: kept until resumed */
                slab_release(pool, s);
                n++;
            }
    return n;
}

void slab_trim(ump_pool_t *pool)
{
    for (int d = 0; d < pool->nplace; d++)
        slab_trim_place(pool, d);
}

void slab_free_all(ump_pool_t *pool)
{
    for (int d = 0; pool->dev && d < pool->nplace; d++) {
        struct dev_state *ds = &pool->dev[d];
        struct slab_list *lists[] = {ds->partial, ds->full, ds->empty};
        for (size_t l = 0; l < UMP_ARRAY_SIZE(lists); l++)
            for (unsigned c = 0; lists[l] && c < pool->nsmall; c++)
                for (struct ump_list_node *n;
                     (n = ump_list_pop_front(&lists[l][c].l));)
                    slab_destroy(ump_container_of(n, struct slab, link));
    }
    for (unsigned c = 0; pool->free_slabs && c < pool->nsmall; c++)
        while (pool->free_slabs[c]) {
            struct slab *s = pool->free_slabs[c];
            pool->free_slabs[c] = s->next_retired;
            slab_destroy(s);
        }
    free(pool->free_slabs);
    pool->free_slabs = NULL;
}
