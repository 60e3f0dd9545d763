/*
 * Eviction policy (contract in evict.h): what moves where, and room.
 *
 * Victims are segments the pool may move by itself: offloadable, not
 * UMP_HINT_NO_SPILL, live, unpinned and not claimed; among them, the one
 * whose next use is farthest as far as the pool can tell (the order below).
 * Room is made three ways: when a move up needs it, as a swap with the
 * victim when the two are of a size (swap_in: the copies overlap the
 * driver's calls), else the victim goes down first; ahead, for the queued
 * prefetches (evict_prefetch_room: the eviction worker's spill overlaps
 * the prefetch worker's restore); and by the watermarks, unless that is
 * known to cost (worth_draining).
 * Waiting cannot cycle: only room makers for a device wait (for a moving
 * segment, or for the evictions under way); a move down never waits for a
 * segment (it falls back to NVMe or fails), a swap claims a victim that no
 * one has claimed (the lock held from the choice to the claim), and the
 * only unpinned moves up are the prefetch worker's, one at a time. Room
 * makers for the host tier wait only for host memory being pinned, which
 * never waits on anything. Pool lock held throughout, dropped only inside
 * moves and waits.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"
#include "place/policy.h"
#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "tier/worker.h"
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

/* --- the eviction order -----------------------------------------------------
 *
 * Belady's rule is optimal: evict what is used farthest in the future. LRU
 * approximates it by assuming the recent past repeats, which is exactly
 * wrong for a cyclic pattern (tensors visited in the same order every
 * step): the least recently used one is the next to come back, so LRU
 * evicts the worst choice every time. The pool cannot see the future, but
 * it is told some of it, and it sees intervals:
 *
 * - A queued prefetch (ump_prefetch, UMP_ADVISE_WILLNEED), or the one the
 *   worker runs, is never a victim while anything else may go (only a
 *   request that would otherwise fail with -ENOMEM takes one, and the
 *   watermarks never do). One whose segment was acquired since it was
 *   asked for is done (its use came) and protects nothing: the worker
 *   skips it (worker.c).
 * - Prefetched and not yet acquired (t_want): used next, so evicted last
 *   of all, the latest request first (it is used last), until it is
 *   stale: unused after WANT_TICKS_PER_SEG ticks per tracked segment, it
 *   was not for the near future and counts as below.
 * - Acquired twice or more (gap): the next acquire is predicted at the last
 *   one plus the interval between the last two, on a logical clock that
 *   ticks once per acquire, release, prefetch request and advice (wall time
 *   would make a slow move look like a long interval). For a cycle every
 *   interval is the same, so the farthest prediction is the most recently
 *   used segment: Belady's choice. A segment past its prediction broke its
 *   pattern and falls back to the next rule.
 * - Otherwise, LRU: a segment unused for a time is taken to stay unused
 *   for as long again (its prediction is now + age), on the same scale.
 * - UMP_ADVISE_COLD and DONTNEED: first to go until its next use; HOT: used
 *   now, its predicted interval dropped (the application knows better).
 *
 * Ties keep LRU order: the scan runs from the cold end of the list and
 * only a strictly later next use replaces the choice.
 *
 * Cost: one scan of the tracked segments per decision, plus marking the
 * queued prefetches: O(n + q). The scan was there already (LRU skipped
 * pinned and foreign segments the same way); a heap would save it but
 * must be re-keyed on every tick, since predictions past due change class.
 * A decision precedes a move of at least one chunk (a copy of megabytes,
 * or disk I/O), which a walk of a few thousand segments does not approach.
 */

/* Ticks of the clock per tracked segment before a prefetch that was never
 * used is stale: enough for every segment to be prefetched, acquired and
 * released once, with one to spare. */
#define WANT_TICKS_PER_SEG 4

/* Classes of the order, evicted last to first. */
enum { NEXT_WANTED, NEXT_LATER, NEXT_COLD };

struct next_use {
    int cls;
    uint64_t t;  /* within a class: the larger goes first */
    bool known;  /* t is a prediction from intervals, not LRU's guess */
};

static struct next_use next_use(const struct offload *o, const struct seg *s)
{
    uint64_t now = o->clock;
    if (s->cold)
        return (struct next_use){NEXT_COLD, now - s->t_used, false};
    if (s->t_want &&
        now - s->t_want <= WANT_TICKS_PER_SEG * (uint64_t)o->lru_len)
        return (struct next_use){NEXT_WANTED, s->t_want, true};
    if (s->gap && s->t_acq + s->gap > now)
        return (struct next_use){NEXT_LATER, s->t_acq + s->gap, true};
    return (struct next_use){NEXT_LATER, now + (now - s->t_used), false};
}

/* Is a used after b (a better victim)? */
static bool after(struct next_use a, struct next_use b)
{
    return a.cls != b.cls ? a.cls > b.cls : a.t > b.t;
}

/* Where evict_up brings s for a request to `device` (a device, or
 * TIER_DEST_HOME): its home when the device reaches it, else the device;
 * a failed one sends it to a working device (-1: none). */
static int up_dest(ump_pool_t *pool, const struct seg *s, int device)
{
    int to = device == TIER_DEST_HOME ||
                     topo_reaches(&pool->topo, device, s->home)
                 ? s->home
                 : device;
    if (pool_dev_failed(pool, to))
        to = evict_working_device(pool, device);
    return to;
}

/* Marks the segments of the queued prefetches (and of the one the worker
 * runs) with a new epoch: every older mark is stale at once, so nothing
 * needs unmarking when a prefetch ends or its run is freed. A queued
 * pointer freed meanwhile marks nothing, or marks the run now there,
 * which the worker will prefetch indeed; a segment acquired since it was
 * asked for is not marked (the worker skips it). With need (per device),
 * it also sums the granules the queued ones must bring onto each device:
 * each segment once, however often it is queued. Not the one the worker
 * runs, nor the queue's head while the worker is idle (it takes it at
 * once): the worker makes their room itself, by a swap where it can
 * (swap_in), which a spill made ahead would stop (the worker would wait
 * for the spill's copy and calls, then run its own). */
static void mark_queued(ump_pool_t *pool, size_t *need)
{
    struct offload *o = pool->off;
    uint64_t epoch = ++o->pf_epoch;
    struct prefetch *pf = o->pf_cur ? o->pf_cur : o->pf_head;
    struct prefetch *idle_head = o->pf_cur || o->pf_hold ? NULL : o->pf_head;

    for (int d = 0; need && d < pool->ndev; d++)
        need[d] = 0;
    for (; pf; pf = pf == o->pf_cur ? o->pf_head : pf->next) {
        struct seg *s;
        size_t g1;
        struct res *res = worker_pf_res(pool, pf, &s, &g1);
        for (; res && s < res->seg + res->nseg && s->g < g1; s++) {
            if (worker_pf_stale(pf, s) || s->pf_mark == epoch)
                continue;
            s->pf_mark = epoch;
            if (!need || pf == o->pf_cur || pf == idle_head ||
                pf->device == UMP_LOC_HOST || s->tier == UMP_TIER_DEVICE ||
                s->moving)
                continue;
            int to = up_dest(pool, s, pf->device);
            if (to >= 0)
                need[to] += s->n;
        }
    }
}

/* A victim search on one tier (device dev, or the host tier). */
struct pick {
    struct seg *best;   /* the farthest next use, queued prefetches aside */
    struct next_use best_next;
    struct seg *queued; /* the farthest among queued prefetches */
    struct next_use queued_next;
    bool wait;          /* a segment moving there will free room or be a
                           victim (evicted, or prefetched by another
                           thread) */
    /* Device only: the latest next use predicted for a movable segment
     * held there now (pinned, or prefetched), after its coming use; 0:
     * none known. The coming use ends a full interval before that at the
     * earliest (now, for an acquire still bringing it up, whose last use
     * is an interval old). */
    uint64_t held_after;
    /* Device only: the segment on the host tier (which comes up by a
     * swap: NVMe's does not), homed there, whose use by its interval is
     * due soonest (within half an interval past it, or
     * later), and when; NULL: none. */
    struct seg *due;
    uint64_t due_t;
};

/* self: a segment the caller is moving up to dev (claimed, dest set),
 * whose own move is not room on its way; NULL: none. */
static void pick(ump_pool_t *pool, int tier, int dev, const struct seg *self,
                 struct pick *p)
{
    struct offload *o = pool->off;
    *p = (struct pick){0};
    mark_queued(pool, NULL);
    ump_list_for_each_reverse(s, &o->lru, struct seg, lru) {
        /* Lost with a failed device: nothing to move (front/failure.c). */
        if (!movable(s) ||
            (s->tier == UMP_TIER_DEVICE && pool_dev_failed(pool, s->dev)))
            continue;
        bool here = s->tier == tier && (tier != UMP_TIER_DEVICE ||
                                        s->dev == dev);
        bool queued = s->pf_mark == o->pf_epoch;
        struct next_use n = next_use(o, s);
        if (tier == UMP_TIER_DEVICE && (here || s->dest == dev) && s->gap &&
            (s->pins || queued || n.cls == NEXT_WANTED)) {
            uint64_t t = o->clock + s->gap;
            if (t > p->held_after)
                p->held_after = t;
        }
        if (tier == UMP_TIER_DEVICE && s->tier == UMP_TIER_HOST &&
            s->home == dev && s->gap && !s->moving &&
            s->t_acq + s->gap + s->gap / 2 > o->clock &&
            (!p->due || s->t_acq + s->gap < p->due_t)) {
            p->due = s;
            p->due_t = s->t_acq + s->gap;
        }
        if (s->pins)
            continue;
        if (s->moving) {
            if (tier == UMP_TIER_DEVICE && s != self &&
                (here || s->dest == dev))
                p->wait = true;
            continue;
        }
        if (!here)
            continue;
        if (queued) {
            if (!p->queued || after(n, p->queued_next)) {
                p->queued = s;
                p->queued_next = n;
            }
        } else if (!p->best || after(n, p->best_next)) {
            p->best = s;
            p->best_next = n;
        }
    }
}

/* The host segment to move to NVMe: the farthest next use, a queued
 * prefetch only when nothing else may go (the tier is full otherwise). */
static struct seg *host_victim(ump_pool_t *pool)
{
    struct pick p;
    pick(pool, UMP_TIER_HOST, -1, NULL, &p);
    return p.best ? p.best : p.queued;
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

/* Memory kept for reuse on dev but not in its cached blocks becomes
 * cached blocks, which chunks_available counts and chunks_get takes back:
 * runs parked whole or in threads' caches, and slabs with no live object.
 * Each size class keeps one wholly free slab per device (SLAB_EMPTY_KEEP),
 * and a slab whose taken objects all sit in a thread cache is not even
 * wholly free: with small sizes of many classes in use, such slabs fill a
 * device while little is live. Two threads showed it (defect 6, filed
 * again; tests/test_acquire_race.c): A evicts its run, B's small
 * allocation of a class new to device 0 makes its slab of a chunk A's run
 * just gave back, and B frees it; the slab stays, kept free or held by
 * B's cache. Slab by slab device 0 filled (12 to 14 of its 16 chunks),
 * and A's ump_acquire, with nothing movable left there (B's run acquired
 * or not offloadable), was -ENOMEM with 10 MiB live on 2 x 32 MiB. Free
 * slabs go first (no driver call, no flush); thread caches are flushed
 * only when that is not enough, and the slabs their objects emptied go
 * too. */
static void reclaim_kept(ump_pool_t *pool, int dev, size_t n)
{
    slab_trim_place(pool, dev);
    if (chunks_available(pool, dev) >= n)
        return;
    if (pool->off->reclaim)
        pool->off->reclaim(pool, dev); /* the front end's: thread caches */
    else if (pool->dev[dev].parked)
        runs_unpark_all(pool);
    slab_trim_place(pool, dev);
}

/* Evicts from device dev until n granules could be allocated there (0).
 * Memory kept for reuse (reclaim_kept) is taken back before any live data
 * moves, and room on its way (moves down from dev under way, the eviction
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
            reclaim_kept(pool, dev, n);
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
        struct pick p;
        pick(pool, UMP_TIER_DEVICE, dev, NULL, &p);
        struct seg *v = p.best;
        if (!v && (p.wait || coming)) { /* room is being made: see after it */
            pthread_cond_wait(&pool->off->moved, &pool->lock);
            *moved_p = true;
            continue;
        }
        /* A queued prefetch only rather than failing a request that the
         * room below was promised to (evict_make_room's what-if view). */
        if (!v)
            v = p.queued;
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

/*
 * Room for s (on the host tier) on device dev, made by a swap with the
 * victim room_locked would pick: its device memory takes s's data as its
 * own goes down (move_swap), when it is s's size. A spill and then a
 * restore would wait for four rounds of driver calls between the copies;
 * the swap runs them beside the copies. Not when room is on its way (a
 * move down under way, or another segment moving there: waited for
 * instead), or memory kept for reuse makes it. s's own claim is no such
 * move: a prefetch's s is claimed and unpinned (an acquire's is pinned,
 * which pick skips), and counting it kept every prefetch from swapping.
 * -ENOMEM: make room the usual way.
 */
static int swap_in(ump_pool_t *pool, struct seg *s, int dev)
{
    if (pool->off->evicting[dev])
        return -ENOMEM;
    reclaim_kept(pool, dev, s->n);
    if (chunks_available(pool, dev) >= s->n)
        return -ENOMEM;
    struct pick p;
    pick(pool, UMP_TIER_DEVICE, dev, s, &p);
    if (!p.best || p.wait || p.best->n != s->n)
        return -ENOMEM;
    int rc = move_swap(pool, s, p.best, dev);
    return rc == -EAGAIN ? -ENOMEM : rc;
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

int evict_working_device(ump_pool_t *pool, int device)
{
    if (device >= 0 && device < pool->ndev && !pool_dev_failed(pool, device))
        return device;
    int best = -1;
    size_t most = 0;
    for (int d = 0; d < pool->ndev; d++) {
        size_t a = chunks_available(pool, d);
        if (!pool_dev_failed(pool, d) && (best < 0 || a > most)) {
            best = d;
            most = a;
        }
    }
    return best;
}

int evict_up(ump_pool_t *pool, struct seg *s, int device)
{
    /* Its home failed while its data was down a tier: it survived, and
     * comes up on a device that works. The home stays what it was: the
     * statistics count the run there, from its allocation to its free. */
    int to = up_dest(pool, s, device);
    if (to < 0)
        return -EIO;
    int rc;
    res_move_begin(pool, s);
    /* Suspended meanwhile (an acquire or a prefetch that began before):
     * nothing comes up. Checked under the lock, after the claim, so that
     * a suspend's walk finds every segment where this leaves it. */
    if (atomic_load(&pool->suspended)) {
        res_move_end(pool, s);
        return -EBUSY;
    }
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
        if (rc == -ENOMEM && s->tier == UMP_TIER_HOST)
            rc = swap_in(pool, s, to);
        s->dest = -1;
        if (rc != -ENOMEM)
            break;
        if (round == EVICT_UP_ROUNDS || room_locked(pool, to, s->n, &moved))
            break;
    }
    res_move_end(pool, s);
    return rc;
}

/*
 * Moving the best victim down ahead of need (the watermarks) is worth it
 * unless the pool knows it would regret it. A move made early costs
 * nothing when the same victim would be chosen when the room is needed;
 * it costs a restore when a better one turns up first. Two cases are
 * known: the victim is a prefetch not yet used (it comes back at once),
 * or its predicted next use comes before that of a segment held on the
 * device now (acquired, or prefetched), which becomes the better victim
 * once its coming use ends. Then the drain waits (the device stays between
 * its watermarks; the next release or move wakes it again), and a move
 * up that finds no room makes it itself with the victim of that moment.
 * In a cyclic loop, this keeps the device's last slot for the segment
 * whose turn comes soonest, as Belady's rule does, instead of emptying it
 * for headroom; a victim whose future is unknown drains as before.
 *
 * A third: a segment on the host tier, of the victim's size, is due before
 * the victim's next use. The room is then not headroom but that
 * segment's, whose acquire comes when it comes, in a loop right after the
 * release that woke the drain (the work is done between an acquire and
 * its release). Drained, the victim's copy and its driver calls would be
 * waited for, then the restore's calls and copy; left for the acquire, it
 * goes as a swap (move_swap), its calls beside the copies. Which is what
 * Belady's rule does too: evict at the miss.
 */
static bool worth_draining(const struct pick *p)
{
    if (p->best_next.cls == NEXT_WANTED)
        return false;
    if (!p->best_next.known || p->best_next.cls != NEXT_LATER)
        return true;
    if (p->due && p->due->n == p->best->n && p->due_t < p->best_next.t)
        return false;
    return p->best_next.t >= p->held_after;
}

/*
 * The room the queued prefetches will need, made now. The prefetch worker
 * runs them one at a time, each making its own room before it copies: a
 * spill, then the restore it made room for, one after the other, while the
 * link's other direction idles. The victim it will pick is the one picked
 * now (the farthest next use, queued prefetches aside), since the loop
 * asked for these before anything else: Belady's rule takes it at the
 * prefetch's call, where the optimum counts the access. So this worker
 * spills it now, while the prefetch worker still copies the one before,
 * and the restore finds its room made (or coming: room_locked waits for
 * it). Prefetched segments not used yet are no victims here (they are the
 * next to be used); when nothing else is left, the prefetch worker decides
 * for itself, as before. The prefetch an idle worker is about to run is
 * its own (mark_queued): it swaps, its calls beside its copies, and this
 * worker's spill for the one after it may run meanwhile (move_swap waits
 * for its own pieces only).
 */
void evict_prefetch_room(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    size_t need[UMP_MAX_DEVICES];
    mark_queued(pool, need);
    for (int d = 0; d < pool->ndev; d++) {
        while (!o->stopping && !o->full && need[d] &&
               !pool_dev_failed(pool, d) &&
               chunks_available(pool, d) + o->evicting[d] < need[d]) {
            struct pick p;
            pick(pool, UMP_TIER_DEVICE, d, NULL, &p);
            if (!p.best || p.best_next.cls == NEXT_WANTED ||
                evict_down(pool, p.best))
                break;
            /* The lock was dropped: the queue and the room changed. */
            mark_queued(pool, need);
        }
    }
}

void evict_watermarks(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    for (int d = 0; d < pool->ndev; d++) {
        struct dev_state *ds = &pool->dev[d];
        size_t low = ds->capacity * (size_t)pool->cfg.low_watermark / 100;
        if (pool_dev_failed(pool, d)) { /* what it holds cannot move */
            o->draining[d] = false;
            continue;
        }
        if (evict_above_high(pool, d))
            o->draining[d] = true;
        while (o->draining[d] && !o->stopping && !o->full) {
            if (ds->mapped - ds->cached <= low) {
                o->draining[d] = false;
                break;
            }
            struct pick p;
            pick(pool, UMP_TIER_DEVICE, d, NULL, &p);
            if (!p.best || !worth_draining(&p) || evict_down(pool, p.best))
                break;
        }
    }
}
