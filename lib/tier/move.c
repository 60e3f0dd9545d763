/*
 * Moves: copy-then-switch (contract in move.h). The destination is made
 * ready and mapped where nothing can see it (a staging range of the pool's
 * addresses, or the unmapped range of a segment on NVMe), the data is
 * copied or read there with the pool lock dropped, and only then is the
 * source unmapped and the destination mapped at the segment's address. If
 * anything fails before the switch, the destination is given back and the
 * data stays where it was; if the switch itself fails, the source (unmapped
 * but not released) is mapped back.
 *
 * The segment is claimed by the caller: nobody else reads or changes its
 * backing, slots or tier while the lock is dropped.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "tier/backing.h"
#include "tier/evict.h"
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

int move_mem(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct vas *v = &pool->vas;
    struct backing dst, src = {0};
    size_t st, n = s->n;
    void *stream;
    int rc = move_stream(pool, s, dev, &stream);
    if (rc)
        return rc;
    rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, n, &dst);
    if (rc)
        return rc;
    if (vas_take(v, n, &st)) {
        ump_log_error("no addresses left to stage a move of %zu bytes",
                      tier_bytes(pool, n));
        backing_put(pool, &dst);
        return -ENOMEM;
    }
    rc = backing_map(pool, &dst, st, n);
    if (rc) {
        backing_put(pool, &dst);
        vas_give(v, st, n);
        return rc;
    }
    if (tier == UMP_TIER_DEVICE)
        room_ahead(pool, dev);
    bool copy = !s->discard;
    pthread_mutex_unlock(&pool->lock);
    if (copy)
        rc = copy_sync(pool, stream, vas_addr(v, st), vas_addr(v, s->g),
                       tier_bytes(pool, n));
    if (copy && !rc) /* s is claimed: its tier and device hold still */
        move_traffic(pool, s->tier, s->dev, tier, dev, n);
    pthread_mutex_lock(&pool->lock);
    if (!rc)
        rc = backing_of(pool, s, &src);
    if (!rc && (rc = backing_unmap(pool, &src, s->g)))
        backing_clear(&src); /* the driver kept it mapped: nothing moved */
    if (!rc && (rc = backing_map(pool, &dst, s->g, n))) {
        if (backing_map(pool, &src, s->g, n))
            ump_log_error("lost the mapping of %zu bytes at %p",
                          tier_bytes(pool, n), vas_addr(v, s->g));
        backing_clear(&src);
    }
    bool staged = backing_unmap(pool, &dst, st) == 0;
    if (staged)
        vas_give(v, st, n);
    else /* still mapped there: neither the memory nor the range is reused */
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
        s->host = dst.host; /* device chunks: in the granule table now */
        backing_clear(&dst);
    }
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
    /* Host memory needs a stream too: a driver that refuses direct I/O on
     * it sends the data through the bounce buffers (xfer_run). */
    rc = move_stream(pool, s, -1, &stream);
    if (rc)
        return rc;
    bool copy = !s->discard;
    pthread_mutex_unlock(&pool->lock);
    if (copy && !(rc = xfer_slots_alloc(pool, s->n, &slots))) {
        rc = xfer_run(pool, vas_addr(&pool->vas, s->g), slots, s->n, true,
                      s->tier == UMP_TIER_HOST, stream);
        if (!rc)
            move_traffic(pool, s->tier, s->dev, UMP_TIER_NVME, -1, s->n);
        if (rc) {
            xfer_slots_free(pool, slots, s->n);
            slots = NULL;
        }
    }
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
    /* s is claimed: nobody else reads or changes s->slots meanwhile */
    pthread_mutex_unlock(&pool->lock);
    if (s->slots)
        rc = xfer_run(pool, vas_addr(&pool->vas, s->g), s->slots, s->n, false,
                      tier == UMP_TIER_HOST, stream);
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
