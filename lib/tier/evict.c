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
#include <stdint.h>
#include <stdlib.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "place/policy.h"
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

/* The coldest segment the pool may move by itself from device dev. When there is none but one that will free room or become a
 * victim is moving there (evicted, or prefetched up by another thread),
 * *wait_p is set. */
static struct seg *victim(ump_pool_t *pool, int dev, bool *wait_p)
{
    ump_list_for_each_reverse(s, &pool->off->lru, struct seg, lru) {
        if (s->pins || !movable(s))
            continue;
        bool here = s->tier == UMP_TIER_DEVICE && s->dev == dev;
        if (here && !s->moving)
            return s;
        if (wait_p && s->moving &&
            (here || s->dest == dev))
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

/* Memory kept for reuse on dev but not in its cached blocks (runs parked
 * whole, runs in threads' caches) becomes cached blocks, which
 * chunks_available counts and chunks_get takes back. */
static void reclaim_parked(ump_pool_t *pool, int dev)
{
    if (pool->off->reclaim)
        pool->off->reclaim(pool, dev); /* the front end's: thread caches */
    else if (pool->dev[dev].parked)
        runs_unpark_all(pool);
}

/* Evicts from device dev until n granules could be allocated there (0).
 * Memory threads keep cached is taken back before any live data moves,
 * and room on its way (moves down from dev under way, the eviction
 * worker's or another thread's ump_evict) is waited for: only when neither
 * is left and nothing may move is it -ENOMEM. */
static int room_locked(ump_pool_t *pool, int dev, size_t n, bool *moved_p)
{
    bool reclaimed = false;
    for (;;) {
        size_t have = chunks_available(pool, dev);
        if (have >= n)
            return 0;
        if (!reclaimed) {
            reclaimed = true;
            reclaim_parked(pool, dev);
            continue;
        }
        /* Enough is on its way down already: wait for it rather than
         * evict more than needed. */
        size_t coming = pool->off->evicting[dev];
        if (coming && have + coming >= n) {
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
    }
}

/* Granules the tiers below could take now: the host tier's room, plus
 * NVMe's (unbounded without an nvme_limit) when there is an NVMe tier. */
static size_t room_below(const ump_pool_t *pool)
{
    const struct offload *o = pool->off;
    size_t bytes = host_room(pool);
    if (o->nvme)
        bytes = o->nvme_limit
                    ? bytes + (o->nvme_limit - o->nvme_used)
                    : SIZE_MAX;
    return bytes == SIZE_MAX ? SIZE_MAX : bytes >> pool->chunk_shift;
}

/* Per device, granules of the unpinned offloadable segments the pool may
 * move down by itself (those moving down already too: their room is
 * coming). */
static void movable_per_device(ump_pool_t *pool, size_t *per_dev)
{
    for (int d = 0; d < pool->ndev; d++)
        per_dev[d] = 0;
    ump_list_for_each(s, &pool->off->lru, struct seg, lru)
        if (s->tier == UMP_TIER_DEVICE && !s->pins && movable(s))
            per_dev[s->dev] += s->n;
}

/* The room a request needs is what its own policy would place, on a
 * machine where everything movable has moved (as far as the tiers below
 * can take it): one plan against that view says both whether the request
 * can fit at all (if not, nothing moves: -ENOMEM leaves the pool as it
 * was) and how much each device must give. The allocation then makes its
 * real plan on the room made. */
int evict_make_room(ump_pool_t *pool, const struct place_req *pr)
{
    size_t avail[UMP_MAX_DEVICES], whatif[UMP_MAX_DEVICES];
    size_t down[UMP_MAX_DEVICES]; /* movable, per device */
    ump_place_part_t *parts = NULL;
    size_t np = 0;
    bool moved = false; /* room_locked's; the room itself is what counts */

    pthread_mutex_lock(&pool->lock);
    size_t below = room_below(pool);
    chunks_available_all(pool, avail);
    movable_per_device(pool, down);
    for (int d = 0; d < pool->ndev; d++)
        whatif[d] = avail[d] + (down[d] < below ? down[d] : below);
    int rc = policy_plan(&pool->place, pr->policy, &pr->req, whatif, &parts,
                         &np);
    if (rc)
        goto out;
    size_t need[UMP_MAX_DEVICES] = {0}, short_by = 0;
    for (size_t i = 0; i < np; i++)
        need[parts[i].device] += parts[i].chunks;
    for (int d = 0; d < pool->ndev; d++)
        short_by += need[d] > avail[d] ? need[d] - avail[d] : 0;
    rc = -ENOMEM;
    if (short_by > below) /* the devices' shares together do not fit below */
        goto out;
    /* Room counts however it came: moved down here, taken back from what
     * threads cache, or made meanwhile by the eviction worker (the
     * allocation failed before this took the lock). */
    rc = 0;
    for (int d = 0; d < pool->ndev && !rc; d++)
        if (need[d] > avail[d])
            rc = room_locked(pool, d, need[d], &moved);
out:
    pthread_mutex_unlock(&pool->lock);
    free(parts);
    return rc ? -ENOMEM : 0; /* a bad plan was logged by policy_plan */
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
