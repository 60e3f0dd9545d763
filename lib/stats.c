#include "config.h"

#include <string.h>

#include "slab.h"
#include "tcache.h"

/* One device's figures. Pool lock held. */
static void device_stats(ump_pool_t *pool, int d, ump_stats_t *st)
{
    struct dev_state *ds = &pool->dev[d];
    int64_t live = atomic_load(&pool->folded[d].live_bytes);
    uint64_t allocs = atomic_load(&pool->folded[d].allocs);
    uint64_t frees = atomic_load(&pool->folded[d].frees);
    size_t parked = 0;
    for (struct tcache *tc = pool->tcaches; tc; tc = tc->next) {
        tcache_sum(tc, d, &live, &allocs, &frees);
        parked += atomic_load_explicit(&tc->run_bytes[d],
                                       memory_order_relaxed);
    }
    size_t empty_slabs = 0;
    for (unsigned c = 0; c < pool->nsmall; c++)
        empty_slabs += ds->empty[c].count;
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
}

UMP_EXPORT int ump_stats(ump_pool_t *pool, int device, ump_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_stats");
    if (rc)
        return rc;
    if (!stats_p || (device != UMP_DEVICE_ALL &&
                     (device < 0 || device >= pool->ndev))) {
        ump_log_error("ump_stats: %s", stats_p ? "device out of range"
                                               : "stats_p is NULL");
        return -EINVAL;
    }
    ump_stats_t st;
    memset(&st, 0, sizeof(st));
    pthread_mutex_lock(&pool->lock);
    for (int d = 0; d < pool->ndev; d++) {
        if (device != UMP_DEVICE_ALL && d != device)
            continue;
        ump_stats_t one;
        device_stats(pool, d, &one);
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
    }
    if (device == UMP_DEVICE_ALL) /* not the sum: devices peak at other times */
        st.peak_bytes = pool->peak;
    pthread_mutex_unlock(&pool->lock);
    *stats_p = st;
    return 0;
}
