/*
 * Moves: copy-then-switch (contract in move.h). The destination is made
 * ready where nothing can see it (host pieces in their window, device
 * chunks mapped at a staging range of the pool's addresses, or either at
 * the unmapped range of a segment on NVMe), the data is copied or read
 * there with the pool lock dropped, and only then is the source unmapped
 * and the destination mapped at the segment's address. If
 * anything fails before the switch, the destination is given back and the
 * data stays where it was; if the switch itself fails, the source (unmapped
 * but not released) is mapped back.
 *
 * The segment is claimed by the caller: nobody else reads or changes its
 * backing, slots or tier while the lock is dropped.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tier/backing.h"
#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "tier/worker.h"
#include "tier/xfer.h"
#include "util/internal.h"

/* --- streams --------------------------------------------------------------- */

int move_stream_get(ump_pool_t *pool, int d, int dir, void **s_p)
{
    void **sp = &pool->off->stream[d * 2 + dir];
    if (!*sp) {
        int rc = pool->be->stream_create(pool->bctx, d, sp);
        if (rc)
            return rc;
    }
    *s_p = *sp;
    return 0;
}

/* A device that takes part in a move of s to dev, for its copy stream. */
static int move_stream(ump_pool_t *pool, const struct seg *s, int dev,
                       void **stream_p)
{
    if (dev >= 0)
        return move_stream_get(pool, dev, DIR_UP, stream_p);
    return move_stream_get(pool,
                           s->tier == UMP_TIER_DEVICE ? s->dev : s->home,
                           DIR_DOWN, stream_p);
}

void move_streams_destroy(ump_pool_t *pool, struct offload *o)
{
    for (int i = 0; o->stream && i < pool->ndev * 2; i++)
        if (o->stream[i])
            pool->be->stream_destroy(pool->bctx, o->stream[i]);
}

/* Copies size bytes with the backend on an internal stream and waits for
 * them. Pool lock not held. */
static int copy_sync(ump_pool_t *pool, void *stream, void *dst, const void *src,
                     size_t size)
{
    int rc = pool->be->memcpy_async(pool->bctx, dst, src, size, stream);
    int rc2 = pool->be->stream_sync(pool->bctx, stream);
    return rc ? rc : rc2;
}

/* A move up has mapped its destination on dev: when that put dev above
 * its high watermark, the eviction worker makes the room the next move up
 * will need while this one copies. (Only moves up call it, so the worker,
 * which moves down, never wakes itself.) Pool lock held. */
static void room_ahead(ump_pool_t *pool, int dev)
{
    if (evict_above_high(pool, dev))
        worker_wake(pool, W_EVICT);
}

/* --- traffic --------------------------------------------------------------- */

/* The location (mem/traffic.h) of a tier's memory: a device, or host. */
static int tier_loc(int tier, int dev)
{
    return tier == UMP_TIER_DEVICE ? dev
           : tier == UMP_TIER_HOST ? TRAFFIC_HOST
                                   : TRAFFIC_NVME;
}

void move_traffic(ump_pool_t *pool, int from_tier, int from_dev, int tier,
                  int dev, size_t n)
{
    int a = tier_loc(from_tier, from_dev), b = tier_loc(tier, dev);
    size_t bytes = tier_bytes(pool, n);
    /* NVMe is read and written through host memory (xfer.c: device memory
     * always goes through bounce buffers): a device's bytes cross its host
     * link too. (traffic_add leaves out host to host.) */
    if (a == TRAFFIC_NVME || b == TRAFFIC_NVME) {
        traffic_add(&pool->traffic, TRAFFIC_TIER, a, TRAFFIC_HOST, bytes);
        a = TRAFFIC_HOST;
    }
    traffic_add(&pool->traffic, TRAFFIC_TIER, a, b, bytes);
}

/* --- moves ----------------------------------------------------------------- */

/* Queues the copies of granules [a, b) of s between its address and the
 * windows of the host pieces list (at their offsets): into the windows
 * (to_host), or out of them; one copy per piece the range meets. Pool lock
 * not held. */
static int copies_range(ump_pool_t *pool, void *stream, const struct seg *s,
                        const struct hpiece *list, size_t a, size_t b,
                        bool to_host)
{
    int rc = 0;
    for (const struct hpiece *p = list; p && !rc; p = p->next) {
        size_t lo = p->off > a ? p->off : a;
        size_t hi = p->off + p->n < b ? p->off + p->n : b;
        if (lo >= hi)
            continue;
        char *win = host_addr(pool, p) + tier_bytes(pool, lo - p->off);
        void *va = vas_addr(&pool->vas, s->g + lo);
        size_t len = tier_bytes(pool, hi - lo);
        rc = to_host ? pool->be->memcpy_async(pool->bctx, win, va, len, stream)
                     : pool->be->memcpy_async(pool->bctx, va, win, len, stream);
    }
    return rc;
}

/* Queues the copies of the n granules at s's address into the windows of
 * the host pieces list (at their offsets), one copy per piece. Pool lock
 * not held. */
static int copies_to_host(ump_pool_t *pool, void *stream, const struct seg *s,
                          const struct hpiece *list)
{
    return copies_range(pool, stream, s, list, 0, s->n, true);
}

/* copies_to_host, and waits. Pool lock not held. */
static int copy_to_host(ump_pool_t *pool, void *stream, const struct seg *s,
                        const struct hpiece *list)
{
    int rc = copies_to_host(pool, stream, s, list);
    int rc2 = pool->be->stream_sync(pool->bctx, stream);
    return rc ? rc : rc2;
}

/* The CPU's addresses of the n granules of host pieces list, for disk
 * I/O: a new array, or NULL when there is no memory for one (the I/O then
 * goes through bounce buffers). */
static void **host_io_bufs(ump_pool_t *pool, const struct hpiece *list,
                           size_t n)
{
    void **cpu = malloc(n * sizeof(*cpu));
    if (cpu)
        host_cpu_addrs(pool, list, 0, n, cpu);
    return cpu;
}

/* Queues the copies of the windows of the host pieces list into the n
 * granules at s's address, one copy per piece. Pool lock not held. */
static int copies_from_host(ump_pool_t *pool, void *stream,
                            const struct seg *s, const struct hpiece *list)
{
    return copies_range(pool, stream, s, list, 0, s->n, false);
}

/* copies_from_host, and waits. Pool lock not held. */
static int copy_from_host(ump_pool_t *pool, void *stream, const struct seg *s,
                          const struct hpiece *list)
{
    int rc = copies_from_host(pool, stream, s, list);
    int rc2 = pool->be->stream_sync(pool->bctx, stream);
    return rc ? rc : rc2;
}

/* Maps host-tier segment s's pieces (src) back at its address after a
 * failed move. When the driver refuses that too, s keeps them unmapped
 * (seg.unmapped): its data is whole there, and its next move or its free
 * takes them from there. Pool lock held. */
static void host_map_back(ump_pool_t *pool, struct seg *s,
                          struct backing *src)
{
    s->unmapped = backing_map(pool, src, s->g, s->n) != 0;
    if (s->unmapped)
        ump_log_error("cannot map %zu bytes at %p back to the host tier "
                      "after a failed move: they stay in host memory, "
                      "unmapped until the allocation's next move",
                      tier_bytes(pool, s->n), vas_addr(&pool->vas, s->g));
}

/*
 * From the host tier to device dev: switch, then copy. The data stays in
 * the host pieces' windows until the move is over, so the device chunks
 * can be mapped at the segment's address first and filled there: no
 * staging range (its map, access and unmap are a tenth of a 64 MiB move
 * on an H200). While the copy runs, the address holds the device memory
 * being filled; the segment is claimed and not acquired, and unmapping
 * the host memory under a reader would fault it just the same in a
 * copy-then-switch. A failed copy maps the host pieces back.
 */
static int move_up_from_host(ump_pool_t *pool, struct seg *s, int dev,
                             void *stream)
{
    struct backing dst, src;
    size_t n = s->n;
    int rc = backing_get(pool, UMP_TIER_DEVICE, dev, -1, n, &dst);
    if (rc)
        return rc;
    if ((rc = backing_of(pool, s, &src))) {
        backing_put(pool, &dst);
        return rc;
    }
    if ((rc = backing_unmap(pool, &src, s->g))) { /* nothing moved */
        backing_put(pool, &dst);
        return rc;
    }
    if ((rc = backing_map(pool, &dst, s->g, n))) {
        backing_put(pool, &dst);
        host_map_back(pool, s, &src);
        return rc;
    }
    room_ahead(pool, dev);
    bool copy = !s->discard;
    pool->off->host_returning += tier_bytes(pool, n);
    pthread_mutex_unlock(&pool->lock);
    if (copy)
        rc = copy_from_host(pool, stream, s, src.host);
    if (copy && !rc) /* s is claimed: its tier and device hold still */
        move_traffic(pool, UMP_TIER_HOST, -1, UMP_TIER_DEVICE, dev, n);
    pthread_mutex_lock(&pool->lock);
    pool->off->host_returning -= tier_bytes(pool, n);
    if (rc) {
        if (backing_unmap(pool, &dst, s->g)) {
            ump_log_error("cannot unmap %zu bytes at %p after a failed copy "
                          "to them: the host tier's copy is not mapped "
                          "back, and the allocation cannot move again",
                          tier_bytes(pool, n), vas_addr(&pool->vas, s->g));
            backing_clear(&dst); /* still mapped: not reused */
            return rc;
        }
        backing_put(pool, &dst);
        host_map_back(pool, s, &src);
        return rc;
    }
    backing_put(pool, &src);
    res_note_move(pool, s, UMP_TIER_DEVICE, dev);
    s->host = NULL;
    backing_clear(&dst); /* device chunks: in the granule table now */
    return 0;
}

/*
 * A move to the host tier copies into the pieces' windows, where they are
 * already mapped (host.c), and then maps them at the segment's address:
 * no staging range, and only the segment's own address changes mapping.
 * A move from one device to another maps the new chunks at a staging
 * range first, so that the data is in place before the segment's address
 * switches (from the host tier: move_up_from_host).
 */
int move_mem(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct vas *v = &pool->vas;
    struct backing dst, src = {0};
    bool to_host = tier == UMP_TIER_HOST;
    size_t st = 0, n = s->n;
    void *stream;
    int rc = move_stream(pool, s, dev, &stream);
    if (rc)
        return rc;
    if (s->tier == UMP_TIER_HOST && tier == UMP_TIER_DEVICE)
        return move_up_from_host(pool, s, dev, stream);
    rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, n, &dst);
    if (rc)
        return rc;
    if (!to_host && vas_take(v, n, &st)) {
        ump_log_error("no addresses left to stage a move of %zu bytes",
                      tier_bytes(pool, n));
        backing_put(pool, &dst);
        return -ENOMEM;
    }
    if (!to_host && (rc = backing_map(pool, &dst, st, n))) {
        backing_put(pool, &dst);
        vas_give(v, st, n);
        return rc;
    }
    if (tier == UMP_TIER_DEVICE)
        room_ahead(pool, dev);
    bool copy = !s->discard;
    pthread_mutex_unlock(&pool->lock);
    if (copy && to_host)
        rc = copy_to_host(pool, stream, s, dst.host);
    else if (copy)
        rc = copy_sync(pool, stream, vas_addr(v, st), vas_addr(v, s->g),
                       tier_bytes(pool, n));
    if (copy && !rc) /* s is claimed: its tier and device hold still */
        move_traffic(pool, s->tier, s->dev, tier, dev, n);
    pthread_mutex_lock(&pool->lock);
    if (!rc)
        rc = backing_of(pool, s, &src);
    if (!rc && (rc = backing_unmap(pool, &src, s->g)))
        backing_clear(&src); /* the driver kept it mapped: nothing moved */
    bool nomap = false; /* moved to the host tier, but not mapped */
    if (!rc && (rc = backing_map(pool, &dst, s->g, n))) {
        if (!backing_map(pool, &src, s->g, n)) {
            backing_clear(&src);
        } else if (to_host) { /* the data is in dst: s stays there */
            ump_log_error("cannot map %zu bytes at %p, neither on the host "
                          "tier nor back: they stay in host memory, "
                          "unmapped until the allocation's next move",
                          tier_bytes(pool, n), vas_addr(v, s->g));
            nomap = true;
            rc = 0;
        } else {
            ump_log_error("lost the mapping of %zu bytes at %p",
                          tier_bytes(pool, n), vas_addr(v, s->g));
            backing_clear(&src);
        }
    }
    bool staged = to_host || backing_unmap(pool, &dst, st) == 0;
    if (!to_host && staged)
        vas_give(v, st, n);
    else if (!staged) /* still mapped there: neither memory nor range reused */
        ump_log_error("cannot unmap a staging range: %zu bytes of addresses "
                      "lost", tier_bytes(pool, n));
    if (rc) {
        if (staged)
            backing_put(pool, &dst);
        else
            backing_clear(&dst);
    } else {
        backing_put(pool, &src);
        res_note_move(pool, s, tier, dev);
        s->unmapped = nomap;
        s->host = dst.host; /* device chunks: in the granule table now */
        backing_clear(&dst);
    }
    return rc;
}

/* Waits for stream with the pool lock dropped; rc, or the sync's error
 * when rc is 0. */
static int sync_unlocked(ump_pool_t *pool, void *stream, int rc)
{
    pthread_mutex_unlock(&pool->lock);
    int rc2 = pool->be->stream_sync(pool->bctx, stream);
    pthread_mutex_lock(&pool->lock);
    return rc ? rc : rc2;
}

/*
 * A swap failed, for x: x goes back to its host pieces (its data never
 * left them). v either finished its own move (v_down: its data was all in
 * hv when the failure came, and it stays there), or is in its device
 * memory (vb) still, where the first `dirty` granules may hold x's bytes
 * by now: those come back from hv. What the driver
 * refuses to undo is logged, as for the other moves; memory still mapped
 * somewhere is not given back. Returns whether vb may be given back (v is
 * on hv and vb is mapped nowhere).
 */
static bool swap_revert(ump_pool_t *pool, struct seg *x, struct seg *v,
                        struct backing *vb, struct backing *xb,
                        struct backing *hv, bool aliased, bool v_down,
                        bool vcopy, size_t dirty, void *stream)
{
    bool vb_free = v_down;
    if (aliased && backing_unalias(pool, vb, x->g)) {
        vb_free = false; /* still mapped at x's address */
        ump_log_error("cannot unmap a failed swap's memory at %p: the "
                      "allocation there cannot move again",
                      vas_addr(&pool->vas, x->g));
    } else if (aliased) {
        host_map_back(pool, x, xb);
    }
    if (v_down)
        return vb_free;
    if (!vcopy || !dirty)
        return false;
    pthread_mutex_unlock(&pool->lock);
    int rc = copies_range(pool, stream, v, hv->host, 0, dirty, false);
    pthread_mutex_lock(&pool->lock);
    rc = sync_unlocked(pool, stream, rc);
    if (rc)
        ump_log_error("cannot copy %zu bytes back to %p after a failed swap: "
                      "%s", tier_bytes(pool, dirty),
                      vas_addr(&pool->vas, v->g), ump_strerror(rc));
    return false;
}

/* Granule j of a swap of n granules in k pieces: where piece j starts. */
static size_t swap_cut(size_t n, size_t k, size_t j)
{
    return j == k ? n : j * (n / k);
}

/*
 * A swap: x, on the host tier, comes up into the device memory of v (of
 * the same size, on device dev, the victim its room needs), which goes
 * down to new host pieces. As a spill then a restore, each a move of its
 * own, it would be two copies one after the other, with four rounds of
 * driver calls between them (for 16 MiB, about a quarter of the copies'
 * time on an H200: lib/topo/drivercost.c). Here the copies go in
 * SWAP_PIECES pieces, each piece of x's copied up as soon as v's of the
 * same place is down (an event per piece), so the two directions of the
 * link run at once but for one piece, and the calls run while the copies
 * do:
 *
 *   v's pieces down            | x's address switched to v's memory (an
 *     x's pieces up, one       |   alias: v's address keeps it meanwhile)
 *     behind                   | v's address switched to its host pieces,
 *                              |   once all of x's are on their way
 *
 * v's address shows x's bytes where they have landed until it is
 * switched, as x's shows v's until its own pieces land, and a move up
 * from the host shows memory being filled (move_up_from_host): both are
 * claimed, and neither is acquired (offloadable memory is used between
 * ump_acquire and ump_release only), so nobody may look. Their data is
 * never lost: a piece of v's is in its host pieces before x's is written
 * over it, and x's stays in its own until the swap is over. A failure
 * puts both back (swap_revert).
 *
 * x is claimed by the caller; v is claimed here. -EAGAIN: not a swap
 * after all (v acquired or freed while host memory was made, or no host
 * room for it): nothing moved, the caller makes room the usual way. Pool
 * lock held, dropped while copies run.
 */
int move_swap(ump_pool_t *pool, struct seg *x, struct seg *v, int dev)
{
    struct backing hv, vb, xb;
    void *down, *up, *ev[SWAP_PIECES] = {0};
    size_t n = x->n, k = n < SWAP_PIECES ? n : SWAP_PIECES;
    int rc = move_stream_get(pool, dev, DIR_DOWN, &down);
    if (!rc)
        rc = move_stream_get(pool, dev, DIR_UP, &up);
    for (size_t j = 0; j < k && !rc; j++)
        rc = pool->be->event_create(pool->bctx, &ev[j]);
    if (rc)
        goto out_events;
    res_move_begin(pool, v);
    if (evict_host_room(pool, n) ||
        backing_get(pool, UMP_TIER_HOST, -1, pool->topo.dev[v->home].numa, n,
                    &hv)) {
        rc = -EAGAIN;
        goto out_claim;
    }
    /* The lock may have been dropped: v may be wanted now, or gone. */
    if (v->pins || v->res->dead) {
        rc = -EAGAIN;
        goto out_host;
    }
    if ((rc = backing_of(pool, v, &vb)))
        goto out_host;
    backing_of(pool, x, &xb); /* host pieces: nothing to allocate */
    bool vcopy = !v->discard, xcopy = !x->discard, aliased = false;
    bool v_down = false, v_nomap = false;
    size_t dirty = 0; /* granules of v's memory x's copies may have reached */
    pool->off->host_returning += tier_bytes(pool, n);

    pthread_mutex_unlock(&pool->lock);
    for (size_t j = 0; j < k && !rc; j++) {
        if (vcopy)
            rc = copies_range(pool, down, v, hv.host, swap_cut(n, k, j),
                              swap_cut(n, k, j + 1), true);
        if (!rc)
            rc = pool->be->event_record(pool->bctx, ev[j], down);
    }
    bool queued = !rc; /* all of v's copies are on the down stream */
    pthread_mutex_lock(&pool->lock);
    if (!rc && !(rc = backing_unmap(pool, &xb, x->g))) {
        if (!(rc = backing_alias(pool, &vb, x->g, n)))
            aliased = true;
        else
            host_map_back(pool, x, &xb);
    }
    pthread_mutex_unlock(&pool->lock);
    for (size_t j = 0; j < k && !rc; j++) {
        rc = pool->be->event_sync(pool->bctx, ev[j]);
        if (!rc && xcopy) {
            dirty = swap_cut(n, k, j + 1);
            rc = copies_range(pool, up, x, xb.host, swap_cut(n, k, j), dirty,
                              false);
        }
    }
    /* The rest of v's: its last piece's event, not the stream, which may
     * carry another move down queued behind them (the eviction worker's
     * spill for the next prefetch), whose copy the swap does not wait for. */
    int rc2 = queued ? pool->be->event_sync(pool->bctx, ev[k - 1])
                     : pool->be->stream_sync(pool->bctx, down);
    rc = rc ? rc : rc2;
    pthread_mutex_lock(&pool->lock);
    /* A failure so far (a device that failed included: its stream's sync
     * then fails too, and nothing proves which of v's copies ran before
     * it) leaves v where it was. */
    if (queued && !rc2 && !rc) {
        /* v's data is all down: its address goes to the host pieces while
         * x's last pieces are copied. */
        int mrc = backing_unmap(pool, &vb, v->g);
        if (!mrc) {
            mrc = backing_map(pool, &hv, v->g, n);
            /* The device failing in that very call (its access refused):
             * hv no longer names it (chunks_accessors), and v's bytes
             * were all down before it. */
            if (mrc && (atomic_load(&pool->failing) >> dev & 1u))
                mrc = backing_map(pool, &hv, v->g, n);
            v_down = true;
            if (mrc && backing_map(pool, &vb, v->g, n)) {
                ump_log_error("cannot map %zu bytes at %p, neither on the "
                              "host tier nor back: they stay in host "
                              "memory, unmapped until the allocation's "
                              "next move", tier_bytes(pool, n),
                              vas_addr(&pool->vas, v->g));
                v_nomap = true;
            } else if (mrc) {
                v_down = false; /* back on vb */
            }
        }
        rc = rc ? rc : mrc;
    }
    rc = sync_unlocked(pool, up, rc);
    pool->off->host_returning -= tier_bytes(pool, n);
    if (v_down) { /* v has moved, whatever becomes of x */
        if (vcopy)
            move_traffic(pool, UMP_TIER_DEVICE, dev, UMP_TIER_HOST, -1, n);
        res_note_move(pool, v, UMP_TIER_HOST, -1);
        v->unmapped = v_nomap;
        v->host = hv.host;
        backing_clear(&hv);
        pool->off->ctr[v->home].evictions++;
    }
    if (rc) {
        if (swap_revert(pool, x, v, &vb, &xb, &hv, aliased, v_down, vcopy,
                        dirty, up))
            backing_put(pool, &vb);
        backing_clear(&vb);
        goto out_host; /* hv: given back unless v holds it now */
    }
    if (xcopy)
        move_traffic(pool, UMP_TIER_HOST, -1, UMP_TIER_DEVICE, dev, n);
    backing_rehome(pool, &vb, x->g);
    backing_put(pool, &xb);
    res_note_move(pool, x, UMP_TIER_DEVICE, dev);
    x->host = NULL;
    backing_clear(&vb);
    pool->off->swaps++;
    goto out_claim;
out_host:
    backing_put(pool, &hv);
out_claim:
    res_move_end(pool, v);
out_events:
    for (size_t j = 0; j < k; j++)
        if (ev[j])
            pool->be->event_destroy(pool->bctx, ev[j]);
    return rc;
}

int move_host_remap(ump_pool_t *pool, struct seg *s)
{
    if (s->tier != UMP_TIER_HOST || !s->unmapped)
        return 0;
    struct backing b;
    int rc = backing_of(pool, s, &b); /* host pieces: nothing to allocate */
    if (!rc) {
        b.unmapped = false;
        rc = backing_map(pool, &b, s->g, s->n);
    }
    if (!rc)
        s->unmapped = false;
    return rc;
}

int move_to_nvme(ump_pool_t *pool, struct seg *s)
{
    uint64_t *slots = NULL;
    struct backing src;
    void *stream = NULL;
    int rc = 0;
    if (!pool->off->nvme) {
        ump_log_error("no NVMe tier: nvme_dir is not set");
        return -ENOSPC;
    }
    /* Its I/O may fall back to bounce buffers, which copy from its
     * address: mapped there first. */
    if ((rc = move_host_remap(pool, s)))
        return rc;
    /* Host memory needs a stream too: a driver that refuses direct I/O on
     * it sends the data through the bounce buffers (xfer_run). */
    rc = move_stream(pool, s, -1, &stream);
    if (rc)
        return rc;
    bool copy = !s->discard;
    /* s is claimed: its pieces hold still while the lock is dropped */
    void **cpu = copy && s->tier == UMP_TIER_HOST
                     ? host_io_bufs(pool, s->host, s->n)
                     : NULL;
    pthread_mutex_unlock(&pool->lock);
    if (copy && !(rc = xfer_slots_alloc(pool, s->n, &slots))) {
        rc = xfer_run(pool, vas_addr(&pool->vas, s->g), cpu, slots, s->n,
                      true, stream);
        if (!rc)
            move_traffic(pool, s->tier, s->dev, UMP_TIER_NVME, -1, s->n);
        if (rc) {
            xfer_slots_free(pool, slots, s->n);
            slots = NULL;
        }
    }
    free(cpu);
    pthread_mutex_lock(&pool->lock);
    if (!rc)
        rc = backing_of(pool, s, &src);
    if (!rc && (rc = backing_unmap(pool, &src, s->g)))
        backing_clear(&src);
    if (rc) {
        xfer_slots_free_later(pool, slots, s->n);
    } else {
        backing_put(pool, &src);
        res_note_move(pool, s, UMP_TIER_NVME, -1);
        s->host = NULL;
        s->slots = slots;
    }
    return rc;
}

/* A failed read back is the disk's failure whatever the store said: a
 * read never runs out of space, and ump_acquire documents -EIO for it.
 * Only a lack of memory (bounce buffers) keeps its own code. */
static int read_error(ump_pool_t *pool, const struct seg *s, int rc)
{
    if (rc == -EIO || rc == -ENOMEM)
        return rc;
    ump_log_error("cannot read %zu bytes at %p back from NVMe: %s",
                  tier_bytes(pool, s->n), vas_addr(&pool->vas, s->g),
                  ump_strerror(rc));
    return -EIO;
}

int move_from_nvme(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct backing dst;
    void *stream;
    int rc = move_stream(pool, s, dev, &stream);
    if (rc)
        return rc;
    rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, s->n, &dst);
    if (rc)
        return rc;
    rc = backing_map(pool, &dst, s->g, s->n);
    if (rc) {
        backing_put(pool, &dst);
        return rc;
    }
    if (tier == UMP_TIER_DEVICE)
        room_ahead(pool, dev);
    void **cpu = s->slots && tier == UMP_TIER_HOST
                     ? host_io_bufs(pool, dst.host, s->n)
                     : NULL;
    /* s is claimed: nobody else reads or changes s->slots meanwhile */
    pthread_mutex_unlock(&pool->lock);
    if (s->slots)
        rc = xfer_run(pool, vas_addr(&pool->vas, s->g), cpu, s->slots, s->n,
                      false, stream);
    free(cpu);
    if (s->slots && !rc)
        move_traffic(pool, UMP_TIER_NVME, -1, tier, dev, s->n);
    if (!rc) /* the data is in place and checked: nothing can undo it */
        xfer_slots_free(pool, s->slots, s->n);
    pthread_mutex_lock(&pool->lock);
    if (rc) {
        rc = read_error(pool, s, rc);
        if (backing_unmap(pool, &dst, s->g))
            ump_log_error("cannot unmap after a failed read: %zu bytes of "
                          "memory lost", tier_bytes(pool, s->n));
        else
            backing_put(pool, &dst);
        backing_clear(&dst);
    } else {
        s->slots = NULL;
        res_note_move(pool, s, tier, dev);
        s->host = dst.host;
        backing_clear(&dst);
    }
    return rc;
}
