/*
 * Eviction policy (contract in evict.h): what moves where, and room.
 *
 * Victims are the coldest segments the pool may move by itself:
 * offloadable, not UMP_HINT_NO_SPILL, live, unpinned and not claimed.
 * Waiting cannot cycle: only room makers for a device wait (for a moving
 * segment, or for the evictions under way); a move down never waits for a
 * segment (it falls back to NVMe or fails), and the only unpinned moves up
 * are the prefetch worker's, one at a time. Room makers for the host tier
 * wait only for host memory being pinned, which never waits on anything.
 * Pool lock held throughout, dropped only inside moves and waits.
 */
#include "config.h"

#include <errno.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "util/internal.h"

bool evict_above_high(const ump_pool_t *pool, int d)
{
    const struct dev_state *ds = &pool->dev[d];
    return ds->mapped - ds->cached >
           ds->capacity * (size_t)pool->cfg.high_watermark / 100;
}

/* May the pool move s by itself? Offloadable, not forbidden to move, and
 * live: a run being freed is waited for, not written to disk. */
static bool movable(const struct seg *s)
{
    const struct run *r = s->res->run;
    unsigned flags = atomic_load_explicit(&r->flags, memory_order_relaxed);
    return !s->res->dead && (flags & UMP_HINT_OFFLOAD) &&
           !(flags & UMP_HINT_NO_SPILL) &&
           obj_state(atomic_load_explicit(&r->word, memory_order_acquire)) ==
               OBJ_LIVE;
}

/* The coldest segment the pool may move by itself from device dev (any
 * when -1). When there is none but one that will free room or become a
 * victim is moving there (evicted, or prefetched up by another thread),
 * *wait_p is set. */
static struct seg *victim(ump_pool_t *pool, int dev, bool *wait_p)
{
    ump_list_for_each_reverse(s, &pool->off->lru, struct seg, lru) {
        if (s->pins || !movable(s))
            continue;
        bool here = s->tier == UMP_TIER_DEVICE && (dev < 0 || s->dev == dev);
        if (here && !s->moving)
            return s;
        if (wait_p && s->moving &&
            (here || (s->dest >= 0 && (dev < 0 || s->dest == dev))))
            *wait_p = true;
    }
    return NULL;
}

/* The coldest host segment the pool may move to NVMe by itself. */
static struct seg *host_victim(ump_pool_t *pool)
{
    ump_list_for_each_reverse(s, &pool->off->lru, struct seg, lru)
        if (s->tier == UMP_TIER_HOST && !s->pins && !s->moving && movable(s))
            return s;
    return NULL;
}

int evict_host_room(ump_pool_t *pool, size_t n)
{
    struct offload *o = pool->off;
    size_t need = tier_bytes(pool, n);
    while (host_room(pool) < need) {
        /* Memory being pinned (the reserve's refill, another move) is room
         * on its way, not room missing: with host_reserve >= host_limit the
         * refill may be pinning the whole tier right now. */
        if (host_room(pool) + o->host_pinning >= need) {
            pthread_cond_wait(&o->moved, &pool->lock);
            continue;
        }
        struct seg *v = o->nvme ? host_victim(pool) : NULL;
        if (!v && o->host_pinning) {
            pthread_cond_wait(&o->moved, &pool->lock);
            continue;
        }
        if (!v)
            return -ENOSPC;
        int home = v->home; /* v may be gone after res_move_end */
        res_move_begin(pool, v);
        int rc = move_to_nvme(pool, v);
        res_move_end(pool, v);
        if (rc)
            return rc;
        o->ctr[home].evictions++;
    }
    return 0;
}

int evict_down(ump_pool_t *pool, struct seg *s)
{
    struct offload *o = pool->off;
    int rc = -ENOSPC, home = s->home;
    res_move_begin(pool, s);
    int from = s->tier == UMP_TIER_DEVICE ? s->dev : -1;
    size_t n = s->n;
    if (from >= 0)
        o->evicting[from] += n;
    if (evict_host_room(pool, s->n) == 0)
        rc = s->pins ? -EBUSY : move_mem(pool, s, UMP_TIER_HOST, -1);
    /* ENOTSUP: a driver too old for pinned host chunks (before 12.2). The
     * lock was dropped: s may have been acquired meanwhile. */
    if ((rc == -ENOSPC || rc == -ENOMEM || rc == -ENOTSUP) && o->nvme)
        rc = s->pins ? -EBUSY : move_to_nvme(pool, s);
    if (from >= 0)
        o->evicting[from] -= n;
    res_move_end(pool, s);
    if (!rc)
        o->ctr[home].evictions++;
    else if (rc == -ENOSPC || rc == -ENOMEM)
        o->full = true; /* until a tier gives space back */
    return rc;
}

/* Memory kept for reuse but not in the cached blocks (runs parked whole,
 * runs in threads' caches) becomes cached blocks, which chunks_available
 * counts and chunks_get takes back. */
static void reclaim_parked(ump_pool_t *pool)
{
    if (pool->off->reclaim)
        pool->off->reclaim(pool); /* the front end's: parked runs too */
    else
        runs_unpark_all(pool);
}

/* Granules moving down from dev (any device when -1): ump_evict and the
 * eviction worker. */
static size_t evicting_from(const ump_pool_t *pool, int dev)
{
    size_t sum = 0;
    for (int d = 0; d < pool->ndev; d++)
        if (dev < 0 || d == dev)
            sum += pool->off->evicting[d];
    return sum;
}

/* Evicts from device dev until n granules could be allocated there (0),
 * or, dev -1, one segment from any device. Memory threads keep cached is
 * taken back before any live data moves, and room on its way (moves down
 * under way, whoever started them) is waited for: only when neither is
 * left and nothing may move is it -ENOMEM. */
static int room_locked(ump_pool_t *pool, int dev, size_t n, bool *moved_p)
{
    bool reclaimed = false;
    for (;;) {
        size_t have = dev >= 0 ? chunks_available(pool, dev) : 0;
        if (dev >= 0 && have >= n)
            return 0;
        if (dev >= 0 && !reclaimed) {
            reclaimed = true;
            reclaim_parked(pool);
            continue;
        }
        /* Enough is on its way down already (the eviction worker, another
         * thread's ump_evict): wait for it rather than evict more than
         * needed. */
        size_t coming = evicting_from(pool, dev);
        if (dev >= 0 && coming && have + coming >= n) {
            pthread_cond_wait(&pool->off->moved, &pool->lock);
            *moved_p = true;
            continue;
        }
        bool wait = false;
        struct seg *v = victim(pool, dev, &wait);
        if (!v && (wait || coming)) { /* room is being made: see after it */
            pthread_cond_wait(&pool->off->moved, &pool->lock);
            *moved_p = true;
            continue;
        }
        if (!v)
            return -ENOMEM;
        int rc = evict_down(pool, v);
        if (rc == -EBUSY) /* acquired while room was made for it: next */
            continue;
        if (rc)
            return rc;
        *moved_p = true;
        if (dev < 0) /* one at a time: the caller counts */
            return 0;
    }
}

/* Chunks every device could supply now. */
static size_t available_all(ump_pool_t *pool)
{
    size_t sum = 0;
    for (int d = 0; d < pool->ndev; d++)
        sum += chunks_available(pool, d);
    return sum;
}

/* Granules every device could supply if the pool moved down all it may:
 * what they supply now, plus the unpinned offloadable segments on them
 * (those moving down too: their room is coming). */
static size_t could_supply(ump_pool_t *pool)
{
    size_t sum = available_all(pool);
    ump_list_for_each_reverse(s, &pool->off->lru, struct seg, lru)
        if (s->tier == UMP_TIER_DEVICE && !s->pins && movable(s))
            sum += s->n;
    return sum;
}

int evict_make_room(ump_pool_t *pool, int device, size_t bytes)
{
    bool moved = false;
    size_t n = (bytes + pool->chunk_size - 1) >> pool->chunk_shift;
    pthread_mutex_lock(&pool->lock);
    /* A request that cannot fit however much moves must leave the pool as
     * it was: decide before moving anything for it. */
    if (could_supply(pool) < n) {
        pthread_mutex_unlock(&pool->lock);
        return -ENOMEM;
    }
    if (chunks_available(pool, device) < n) {
        room_locked(pool, device, n, &moved);
    } else {
        /* The device has room, yet the allocation failed: its plan wants
         * other devices too. n chunks more, from any device. */
        size_t want = available_all(pool) + n;
        while (available_all(pool) < want) {
            bool one = false;
            if (room_locked(pool, -1, 1, &one) || !one)
                break;
            moved = true;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return moved ? 0 : -ENOMEM;
}

int evict_up(ump_pool_t *pool, struct seg *s, int device)
{
    int to = device == TIER_DEST_HOME || topo_reaches(&pool->topo, device, s->home)
                 ? s->home
                 : device;
    int rc;
    res_move_begin(pool, s);
    /* Room made (or freed by others meanwhile) can be taken by another
     * thread before this one maps it: a few rounds. */
    for (int round = 0;; round++) {
        bool moved = false;
        if (s->tier == UMP_TIER_DEVICE &&
            (device == TIER_DEST_HOME || topo_reaches(&pool->topo, device, s->dev))) {
            rc = 0;
            break;
        }
        s->dest = to;
        rc = s->tier == UMP_TIER_NVME
                 ? move_from_nvme(pool, s, UMP_TIER_DEVICE, to)
                 : move_mem(pool, s, UMP_TIER_DEVICE, to);
        s->dest = -1;
        if (rc != -ENOMEM)
            break;
        if (round == EVICT_UP_ROUNDS || room_locked(pool, to, s->n, &moved))
            break;
    }
    res_move_end(pool, s);
    return rc;
}

void evict_watermarks(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    for (int d = 0; d < pool->ndev; d++) {
        struct dev_state *ds = &pool->dev[d];
        size_t low = ds->capacity * (size_t)pool->cfg.low_watermark / 100;
        if (evict_above_high(pool, d))
            o->draining[d] = true;
        while (o->draining[d] && !o->stopping && !o->full) {
            if (ds->mapped - ds->cached <= low) {
                o->draining[d] = false;
                break;
            }
            struct seg *v = victim(pool, d, NULL);
            if (!v || evict_down(pool, v))
                break;
        }
    }
}
