#include "config.h"

#include <string.h>
#include <time.h>

#include "mem/chunks.h"
#include "tier/offload.h"
#include "front/stats.h"
#include "front/check.h"
#include "front/failure.h"
#include "mem/slab.h"
#include "front/tcache.h"

/* 1 - largest / total: 0 when all free cached memory is one block. */
static double fragmentation(size_t largest, size_t total)
{
    return total ? 1.0 - (double)largest / (double)total : 0.0;
}

void stats_device(ump_pool_t *pool, int d, ump_stats_t *st)
{
    struct dev_state *ds = &pool->dev[d];
    int64_t live = atomic_load(&pool->folded[d].live_bytes);
    uint64_t allocs = atomic_load(&pool->folded[d].allocs);
    uint64_t frees = atomic_load(&pool->folded[d].frees);
    size_t parked = 0;
    for (struct tcache *tc = pool->tcaches; tc; tc = tc->next) {
        tcache_sum(tc, d, &live, &allocs, &frees);
        parked += tcache_run_bytes(tc, d);
    }
    size_t empty_slabs = 0;
    for (unsigned c = 0; c < pool->nsmall; c++)
        empty_slabs += ds->empty[c].count;
    size_t largest = 0;
    ump_list_for_each(b, &ds->blocks, const struct block, link)
        if (b->n > largest)
            largest = b->n;
    memset(st, 0, sizeof(*st));
    st->capacity = ds->capacity;
    st->live_bytes = live > 0 ? (size_t)live : 0;
    st->mapped_bytes = ds->mapped;
    st->cached_bytes = ds->cached + (ds->idle_n << pool->chunk_shift) +
                       (empty_slabs << pool->chunk_shift) + parked +
                       ds->parked;
    st->peak_bytes = ds->peak;
    st->alloc_count = allocs;
    st->free_count = frees;
    st->live_count = allocs > frees ? allocs - frees : 0;
    st->chunks_created = ds->chunks_created;
    st->chunks_released = ds->chunks_released;
    st->largest_free = largest << pool->chunk_shift;
    st->fragmentation = fragmentation(st->largest_free, ds->cached);
    st->reserved_bytes = ds->created;
    st->peak_reserved_bytes = ds->created_peak;
    if (place_is_host(pool, d)) /* no tiers below, no device chunks */
        return;
    st->driver_ns = pool->be->driver_ns ? pool->be->driver_ns(pool->bctx, d)
                                        : 0;
    offload_device_stats(pool, d, st);
}

void stats_pool_wide(ump_pool_t *pool, ump_stats_t *st)
{
    st->peak_bytes = pool->peak;
    st->peak_reserved_bytes = pool->created_peak;
    /* The backend's own total: on cuda the devices' figures are 0. */
    st->driver_ns = pool->be->driver_ns ? pool->be->driver_ns(pool->bctx, -1)
                                        : 0;
}

UMP_EXPORT int ump_stats(ump_pool_t *pool, int device, ump_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_stats");
    if (rc)
        return rc;
    if (!stats_p || (device != UMP_DEVICE_ALL && device != UMP_LOC_HOST &&
                     (device < 0 || device >= pool->ndev))) {
        ump_log_error("ump_stats: %s", stats_p ? "device out of range"
                                               : "stats_p is NULL");
        return -EINVAL;
    }
    /* The places summed: one device, every device, or the host places. */
    int d0 = device, d1 = device + 1;
    if (device == UMP_DEVICE_ALL) {
        d0 = 0;
        d1 = pool->ndev;
    } else if (device == UMP_LOC_HOST) {
        d0 = pool->ndev;
        d1 = pool->nplace;
    }
    ump_stats_t st;
    memset(&st, 0, sizeof(st));
    size_t in_blocks = 0;
    pthread_mutex_lock(&pool->lock);
    for (int d = d0; d < d1; d++) {
        ump_stats_t one;
        stats_device(pool, d, &one);
        st.capacity += one.capacity;
        st.live_bytes += one.live_bytes;
        st.mapped_bytes += one.mapped_bytes;
        st.cached_bytes += one.cached_bytes;
        st.peak_bytes += one.peak_bytes;
        st.alloc_count += one.alloc_count;
        st.free_count += one.free_count;
        st.live_count += one.live_count;
        st.chunks_created += one.chunks_created;
        st.chunks_released += one.chunks_released;
        st.host_bytes += one.host_bytes;
        st.nvme_bytes += one.nvme_bytes;
        st.spill_count += one.spill_count;
        st.spill_bytes += one.spill_bytes;
        st.restore_count += one.restore_count;
        st.restore_bytes += one.restore_bytes;
        st.evictions += one.evictions;
        st.reserved_bytes += one.reserved_bytes;
        st.peak_reserved_bytes += one.peak_reserved_bytes;
        st.driver_ns += one.driver_ns;
        st.failed_devices += pool_dev_failed(pool, d);
        if (one.largest_free > st.largest_free)
            st.largest_free = one.largest_free;
        in_blocks += pool->dev[d].cached;
    }
    if (device == UMP_DEVICE_ALL) /* not sums: devices peak at other times */
        stats_pool_wide(pool, &st);
    if (device == UMP_LOC_HOST) { /* one budget, not one each */
        st.capacity = pool->pinned_cap;
        st.peak_bytes = pool->pinned_peak;
        st.peak_reserved_bytes = pool->pinned_created_peak;
    }
    st.fragmentation = fragmentation(st.largest_free, in_blocks);
    if (device != UMP_LOC_HOST)
        pool_lost(pool, device, &st.lost_count, &st.lost_bytes);
    if (pool->share_ops && device != UMP_LOC_HOST)
        pool->share_ops->figures(pool, device == UMP_DEVICE_ALL ? -1 : device,
                                 &st.share_processes, &st.share_bytes);
    pthread_mutex_unlock(&pool->lock);
    *stats_p = st;
    return 0;
}

/* ---- walking the pool's memory ----------------------------------------- */

/* Reports the granules of run r from g on, chunk by chunk (memory moves
 * between tiers in whole chunks); returns the granule after the run. */
static size_t walk_run(ump_pool_t *pool, const struct run *r, size_t g,
                       stats_walk_fn fn, void *arg)
{
    if (r->start > g || r->start + r->n <= g)
        return g + 1; /* a stale tag: cannot happen under the lock */
    bool live = obj_state(atomic_load_explicit(&r->word,
                                               memory_order_acquire)) ==
                OBJ_LIVE;
    size_t end = r->start + r->n;
    if (place_is_host(pool, r->device)) /* the walk is of devices */
        return end;
    while (g < end) {
        const struct chunk *c = chunks_at(pool, g);
        /* On NVMe a chunk is unmapped: no chunk, one granule at a time. */
        size_t step = c && c->g <= g && c->g + c->n > g ? c->g + c->n - g : 1;
        if (step > end - g)
            step = end - g;
        int tier = offload_gran_tier(pool, g);
        struct stats_piece p = {
            .g = g,
            .n = step,
            .device = tier == UMP_TIER_DEVICE && c ? c->device
                      : r->res ? offload_home(r, g - r->start)
                               : r->device,
            .state = tier == UMP_TIER_HOST   ? STATS_HOST
                     : tier == UMP_TIER_NVME ? STATS_NVME
                     : live                  ? STATS_USED
                                             : STATS_CACHED,
            .run = live ? r : NULL,
        };
        fn(arg, &p);
        g += step;
    }
    return end;
}

void stats_walk(ump_pool_t *pool, stats_walk_fn fn, void *arg)
{
    struct vas *v = &pool->vas;
    size_t fi = 0; /* the first free range not wholly below g */
    for (size_t g = 0; g < v->ngran;) {
        while (fi < v->nfree && v->free[fi].start + v->free[fi].n <= g)
            fi++;
        if (fi < v->nfree && v->free[fi].start <= g) {
            g = v->free[fi].start + v->free[fi].n;
            continue;
        }
        uintptr_t tag = vas_tag(v, g);
        size_t next = g + 1;
        switch (vas_tag_kind(tag)) {
        case VAS_RUN:
            next = walk_run(pool, vas_tag_owner(tag), g, fn, arg);
            break;
        case VAS_CACHED: {
            const struct block *b = vas_tag_owner(tag);
            if (b->start <= g && b->start + b->n > g)
                next = b->start + b->n;
            if (!place_is_host(pool, b->device))
                fn(arg, &(struct stats_piece){g, next - g, b->device,
                                              STATS_CACHED, NULL});
            break;
        }
        case VAS_SLAB: {
            const struct slab *s = vas_tag_owner(tag);
            if (!place_is_host(pool, s->device))
                fn(arg, &(struct stats_piece){
                            g, 1, s->device,
                            s->away == UMP_TIER_HOST   ? STATS_HOST
                            : s->away == UMP_TIER_NVME ? STATS_NVME
                            : s->nfree == s->nobj      ? STATS_CACHED
                                                       : STATS_USED,
                            NULL});
            break;
        }
        default: /* taken but not yet tagged: never seen under the lock */
            break;
        }
        g = next;
    }
    for (int d = 0; d < pool->ndev; d++) {
        const struct dev_state *ds = &pool->dev[d];
        size_t room = ds->capacity > ds->created
                          ? (ds->capacity - ds->created) >> pool->chunk_shift
                          : 0;
        if (ds->idle_n)
            fn(arg, &(struct stats_piece){SIZE_MAX, ds->idle_n, d,
                                          STATS_CACHED, NULL});
        if (room)
            fn(arg, &(struct stats_piece){SIZE_MAX, room, d, STATS_FREE,
                                          NULL});
    }
}

/* What ump_largest_allocs says about live run r. Pool lock held. */
static void run_info(ump_pool_t *pool, const struct run *r, uint32_t now,
                     ump_alloc_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->ptr = vas_addr(&pool->vas, r->start);
    info->size = atomic_load_explicit(&r->size, memory_order_relaxed);
    info->device = r->device;
    info->tier = offload_gran_tier(pool, r->start);
    info->flags = atomic_load_explicit(&r->flags, memory_order_relaxed);
    uint32_t born = atomic_load_explicit(&r->born, memory_order_relaxed);
    info->age_s = (double)(uint32_t)(now - born) / 10.0;
    uint64_t devs = 1ull << r->device;
    /* Where the chunks were placed: a moved chunk still counts for the
     * device it came from. */
    if (r->res)
        for (size_t i = 0; i < r->n; i++)
            devs |= 1ull << offload_home(r, i);
    else if (r->mixed)
        for (size_t g = r->start; g < r->start + r->n; g++)
            devs |= 1ull << chunks_device(pool, g);
    info->ndevices = __builtin_popcountll(devs);
}

/* Largest first; equal sizes by address. */
static bool alloc_before(const ump_alloc_info_t *a, const ump_alloc_info_t *b)
{
    return a->size != b->size ? a->size > b->size
                              : (uintptr_t)a->ptr < (uintptr_t)b->ptr;
}

static int alloc_cmp(const void *a, const void *b)
{
    return alloc_before(a, b) ? -1 : alloc_before(b, a) ? 1 : 0;
}

/* struct stats_top keeps the max best runs seen so far as a heap whose
 * root is the one to drop first. */
static void heap_down(struct stats_top *t, size_t i)
{
    for (;;) {
        size_t m = i, l = 2 * i + 1, r = l + 1;
        if (l < t->k && alloc_before(&t->out[m], &t->out[l]))
            m = l;
        if (r < t->k && alloc_before(&t->out[m], &t->out[r]))
            m = r;
        if (m == i)
            return;
        ump_alloc_info_t tmp = t->out[i];
        t->out[i] = t->out[m];
        t->out[m] = tmp;
        i = m;
    }
}

void stats_top_init(struct stats_top *t, ump_pool_t *pool, int device,
                    ump_alloc_info_t *out, size_t max)
{
    *t = (struct stats_top){pool, device, out, max, 0,
                            pool_clock_tick(pool)};
}

void stats_top_add(struct stats_top *t, const struct stats_piece *p)
{
    const struct run *r = p->run;
    if (!r || p->g != r->start || !t->max ||
        (t->device != UMP_DEVICE_ALL && r->device != t->device))
        return;
    ump_alloc_info_t info;
    run_info(t->pool, r, t->now, &info);
    if (t->k < t->max) {
        size_t i = t->k++;
        t->out[i] = info;
        while (i && alloc_before(&t->out[(i - 1) / 2], &t->out[i])) {
            ump_alloc_info_t tmp = t->out[i];
            t->out[i] = t->out[(i - 1) / 2];
            t->out[(i - 1) / 2] = tmp;
            i = (i - 1) / 2;
        }
    } else if (alloc_before(&info, &t->out[0])) {
        t->out[0] = info;
        heap_down(t, 0);
    }
}

size_t stats_top_end(struct stats_top *t)
{
    if (t->k > 1)
        qsort(t->out, t->k, sizeof(*t->out), alloc_cmp);
    return t->k;
}

static void top_add(void *arg, const struct stats_piece *p)
{
    stats_top_add(arg, p);
}

size_t stats_largest(ump_pool_t *pool, int device, ump_alloc_info_t *out,
                     size_t max)
{
    struct stats_top t;
    stats_top_init(&t, pool, device, out, max);
    stats_walk(pool, top_add, &t);
    return stats_top_end(&t);
}

UMP_EXPORT int ump_largest_allocs(ump_pool_t *pool, int device,
                                  ump_alloc_info_t *out, size_t max,
                                  size_t *count_p)
{
    int rc = pool_check(pool, "ump_largest_allocs");
    if (rc)
        return rc;
    if (!count_p || (!out && max) ||
        (device != UMP_DEVICE_ALL && (device < 0 || device >= pool->ndev))) {
        ump_log_error("ump_largest_allocs: %s",
                      !count_p ? "count_p is NULL"
                      : !out && max ? "out is NULL"
                                    : "device out of range");
        return -EINVAL;
    }
    pthread_mutex_lock(&pool->lock);
    size_t k = stats_largest(pool, device, out, max);
    pthread_mutex_unlock(&pool->lock);
    *count_p = k;
    return 0;
}
