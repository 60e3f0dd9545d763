/*
 * A failed device: a lost GPU, an uncorrectable memory error, told by the
 * backend (backend_ops.watch_failures sets a bit of pool->failing). The
 * next public call handles it (pool_check), once:
 *
 *  - pool->failed gets the bit, which every layer reads with no lock: no
 *    placement names the device again (chunks_available is 0), its slabs
 *    hand out nothing, its chunks are given back as soon as nothing maps
 *    them, no device is given access to new memory on its behalf;
 *  - what the pool kept for reuse there (thread caches, parked runs,
 *    cached blocks, idle chunks, wholly free slabs) goes back at once;
 *  - one log line says so, with what was lost.
 *
 * Lost allocations are not a list kept up to date: an allocation is lost
 * while one of its chunks is mapped from a failed device (a slab object
 * when its slab's is), which is what its bytes are. A tracked allocation
 * whose data was on the host tier or NVMe then is not lost: its next
 * acquire brings it up on a device that works (tier/evict.c). Everything
 * that reads pool memory refuses a lost allocation with -EIO
 * (pool_check_lost); ump_free takes it back, and its failed chunks are
 * released.
 */
#include "config.h"

#include "front/check.h"
#include "front/failure.h"
#include "front/front.h"
#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"
#include "util/log.h"

struct lost_count {
    int device; /* an index, or UMP_DEVICE_ALL */
    uint64_t count;
    size_t bytes;
};

static int count_lost(ump_pool_t *pool, struct slab *s, struct run *r,
                      void *arg)
{
    struct lost_count *lc = arg;
    if (s) {
        if (!slab_lost(pool, s) ||
            (lc->device != UMP_DEVICE_ALL && lc->device != s->device))
            return 0;
        for (uint32_t i = 0; i < s->nobj; i++)
            if (obj_live(atomic_load_explicit(&s->word[i],
                                              memory_order_relaxed))) {
                lc->count++;
                lc->bytes += s->size;
            }
        return 0;
    }
    if ((lc->device == UMP_DEVICE_ALL || lc->device == r->device) &&
        chunks_range_failed(pool, r->start, r->n)) {
        lc->count++;
        lc->bytes += r->n << pool->chunk_shift;
    }
    return 0;
}

void pool_lost(ump_pool_t *pool, int device, uint64_t *count_p,
               size_t *bytes_p)
{
    struct lost_count lc = {device, 0, 0};
    if (pool_any_failed(pool))
        runs_walk(pool, count_lost, &lc);
    *count_p = lc.count;
    *bytes_p = lc.bytes;
}

void pool_handle_failures(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    uint32_t all = pool->ndev >= 32 ? ~0u : (1u << pool->ndev) - 1;
    uint32_t seen = atomic_load(&pool->failing);
    uint32_t fresh = seen & all & ~atomic_load(&pool->failed);
    /* Bits of devices the pool does not have are ignored, but marked seen,
     * so that pool_check stops coming here. */
    atomic_fetch_or(&pool->failed, seen);
    if (fresh) {
        /* Thread caches hold free objects and runs of the device: back to
         * their slabs and blocks, which give them up (slab_put,
         * chunks_cache). A thread that freed into its cache before the bit
         * was set is flushed here; one after sees the bit (tcache.h). */
        pool_flush_tcaches(pool);
        for (int d = 0; d < pool->ndev; d++) {
            if (!(fresh & (1u << d)))
                continue;
            slab_fail_device(pool, d);
            chunks_fail_device(pool, d);
            ump_log_error("device %d failed: allocations with data there "
                          "are lost (-EIO on every access; ump_free them); "
                          "the pool goes on with the other devices", d);
        }
        uint64_t n;
        size_t bytes;
        pool_lost(pool, UMP_DEVICE_ALL, &n, &bytes);
        ump_log_error("%llu allocation(s), %zu bytes, lost in all",
                      (unsigned long long)n, bytes);
    }
    pthread_mutex_unlock(&pool->lock);
}

/* Is the allocation owning granule g lost? Its first granule after it in
 * *next_p. Pool lock held. */
static bool granule_lost(ump_pool_t *pool, size_t g, size_t *next_p)
{
    uintptr_t tag = vas_tag(&pool->vas, g);
    *next_p = g + 1;
    if (vas_tag_kind(tag) == VAS_SLAB)
        return slab_lost(pool, vas_tag_owner(tag));
    if (vas_tag_kind(tag) == VAS_RUN) {
        struct run *r = vas_tag_owner(tag);
        *next_p = r->start + r->n;
        return chunks_range_failed(pool, r->start, r->n);
    }
    return false;
}

int pool_check_lost(ump_pool_t *pool, const void *ptr, size_t size,
                    const char *fn)
{
    if (ump_likely(!pool_any_failed(pool)) || !size ||
        !vas_contains(&pool->vas, ptr))
        return 0;
    const struct vas *v = &pool->vas;
    size_t g = vas_index(v, ptr);
    size_t last = (uintptr_t)ptr - v->base + size - 1 < v->size
                      ? vas_index(v, (const char *)ptr + size - 1)
                      : v->ngran - 1;
    bool lost = false;
    pthread_mutex_lock(&pool->lock);
    while (g <= last && !lost)
        lost = granule_lost(pool, g, &g);
    pthread_mutex_unlock(&pool->lock);
    if (!lost)
        return 0;
    ump_log_error("%s: %p is in an allocation lost with a failed device: "
                  "its bytes are gone (ump_free it)", fn, ptr);
    return -EIO;
}

bool pool_ptr_lost(ump_pool_t *pool, const void *ptr)
{
    size_t next;
    return pool_any_failed(pool) &&
           granule_lost(pool, vas_index(&pool->vas, ptr), &next);
}

int pool_check_device(ump_pool_t *pool, int device, const char *fn)
{
    if (ump_likely(!pool_dev_failed(pool, device)))
        return 0;
    ump_log_error("%s: device %d has failed", fn, device);
    return -EIO;
}
