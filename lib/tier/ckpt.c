/*
 * Checkpoint data of the tier layer (contract in ckpt.h). The granules of
 * a range are cut into stretches that live in one kind of place (one
 * device's chunks, pinned host memory, one NVMe segment) and each stretch
 * takes the transfer that place needs, the same ones moves use (xfer.c).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mem/chunks.h"
#include "tier/backing.h"
#include "tier/ckpt.h"
#include "tier/host.h"
#include "tier/nvme.h"
#include "tier/residency.h"
#include "tier/move.h"
#include "tier/xfer.h"

int ckpt_store_open(ump_pool_t *pool, const char *path, bool create,
                    uint64_t base, uint64_t nslots, struct nvme_store **st_p)
{
    if (pool->chunk_size % ((size_t)1 << 20))
        return -EINVAL;
    struct nvme_config nc = {
        .slot_size = pool->chunk_size,
        .queue_depth = (unsigned)pool->cfg.nvme_queue_depth,
        .force_threads = pool->cfg.nvme_engine == UMP_NVME_THREADS,
        .numa_node = pool->topo.dev[0].numa,
    };
    int rc = nvme_open_file(&nc, path, create, base, nslots, st_p);
    if (rc)
        return rc;
    /* As the tier's own (xfer_open): copies from and to device memory run
     * at the link's speed only into page-locked buffers. */
    size_t len;
    void *arena = nvme_arena(*st_p, &len);
    if (arena && pool->be->host_register &&
        pool->be->host_register(pool->bctx, arena, len))
        ump_log_debug("checkpoint: bounce buffers not page-locked");
    return 0;
}

void ckpt_store_close(ump_pool_t *pool, struct nvme_store *st)
{
    size_t len;
    void *arena = st ? nvme_arena(st, &len) : NULL;
    if (arena && pool->be->host_register && pool->be->host_unregister)
        pool->be->host_unregister(pool->bctx, arena);
    nvme_close(st);
}

int ckpt_run_segs(const struct run *r, struct ckpt_seg **segs_p,
                  size_t *n_p)
{
    const struct res *res = r->res;
    struct ckpt_seg *segs = calloc(res->nseg, sizeof(*segs));
    if (!segs)
        return -ENOMEM;
    for (size_t i = 0; i < res->nseg; i++) {
        const struct seg *s = &res->seg[i];
        segs[i] = (struct ckpt_seg){
            .n = s->n, .home = s->home, .tier = s->tier,
            .dev = s->tier == UMP_TIER_DEVICE ? s->dev : -1,
            .nodata = s->tier == UMP_TIER_NVME && !s->slots};
    }
    *segs_p = segs;
    *n_p = res->nseg;
    return 0;
}

/* Where granule g's data is: a place's chunk (device or host place), a
 * tracked segment on a device, the host tier or NVMe. */
struct where {
    int kind;             /* UMP_TIER_DEVICE, UMP_TIER_HOST, UMP_TIER_NVME */
    int dev;              /* DEVICE: the device */
    const uint64_t *slots; /* NVME: the slot of each granule from g on */
    const struct hpiece *host; /* a segment on the host tier: its pieces */
    size_t off;           /* granule g's offset in that segment */
    size_t left;          /* granules from g on in the same place */
    bool unmapped;        /* a host segment not mapped at its address */
};

static void where_of(ump_pool_t *pool, size_t g, struct where *w)
{
    uintptr_t tag = vas_tag(&pool->vas, g);
    struct run *r = vas_tag_kind(tag) == VAS_RUN ? vas_tag_owner(tag) : NULL;
    if (r && r->res) {
        struct seg *s = res_seg_at(r->res, g);
        /* its I/O may fall back to bounce buffers, which read its address:
         * a host copy left unmapped (seg.unmapped) is mapped again, or the
         * write refused */
        w->unmapped = move_host_remap(pool, s) != 0;
        w->kind = s->tier;
        w->dev = s->dev;
        w->slots = s->slots ? s->slots + (g - s->g) : NULL;
        w->host = s->tier == UMP_TIER_HOST ? s->host : NULL;
        w->off = g - s->g;
        w->left = s->g + s->n - g;
        return;
    }
    const struct chunk *c = chunks_at(pool, g);
    w->dev = c->device;
    w->unmapped = false;
    w->kind = place_is_host(pool, c->device) ? UMP_TIER_HOST
                                              : UMP_TIER_DEVICE;
    w->slots = NULL;
    w->host = NULL;
    w->off = 0;
    w->left = c->g + c->n - g;
}

/* The stream a copy of device dev's memory runs on (host memory: the
 * first device's, for a driver that refuses direct I/O on it). */
static int copy_stream(ump_pool_t *pool, const struct where *w, bool write,
                       void **stream_p)
{
    int d = w->kind == UMP_TIER_DEVICE ? w->dev : 0;
    return move_stream_get(pool, d, write ? DIR_DOWN : DIR_UP, stream_p);
}

/* May the disk's I/O go straight to the granules [g, g+m) of w? Host
 * memory always (the host tier's in its window, host.c; pinned host
 * places at their addresses); device memory where the backend gives the
 * CPU a view of it: sim's devices are the CPU's memory, as GPUDirect
 * Storage would let a disk reach a GPU's. Elsewhere (cuda's device
 * memory) the data goes through bounce buffers and the device's copies. */
static bool cpu_reaches(ump_pool_t *pool, const struct where *w, size_t g,
                        size_t m)
{
    if (w->kind == UMP_TIER_HOST)
        return true;
    if (!pool->be->io_view)
        return false;
    for (size_t i = 0; i < m; i++)
        if (!pool->be->io_view(pool->bctx, vas_addr(&pool->vas, g + i),
                               pool->chunk_size))
            return false;
    return true;
}

/* Where the CPU reaches each of the granules [g, g+m) of w, for the disk's
 * I/O: a new array, or NULL when it does not (or there is no memory for
 * one: the I/O then goes through bounce buffers). */
static void **cpu_bufs(ump_pool_t *pool, const struct where *w, size_t g,
                       size_t m)
{
    void **cpu = cpu_reaches(pool, w, g, m) ? malloc(m * sizeof(*cpu)) : NULL;
    for (size_t i = 0; cpu && !w->host && i < m; i++)
        cpu[i] = vas_addr(&pool->vas, g + i);
    if (cpu && w->host)
        host_cpu_addrs(pool, w->host, w->off, m, cpu);
    return cpu;
}

int ckpt_data(ump_pool_t *pool, struct nvme_store *ck, size_t g, size_t n,
              const uint64_t *slots, bool write)
{
    unsigned qd = (unsigned)pool->cfg.nvme_queue_depth;
    size_t done = 0; /* slots used so far */
    for (size_t at = g; at < g + n;) {
        struct where w;
        where_of(pool, at, &w);
        size_t m = w.left < g + n - at ? w.left : g + n - at;
        int rc = 0;
        if (w.kind == UMP_TIER_NVME) {
            if (w.slots) /* else discarded: no data, no slot */
                rc = xfer_copy_slots(pool, ck, slots + done, w.slots, m,
                                     write);
            done += w.slots ? m : 0;
        } else if (w.unmapped) {
            ump_log_error("cannot map %zu bytes at %p to read them",
                          tier_bytes(pool, m), vas_addr(&pool->vas, at));
            rc = -EIO;
        } else {
            void *stream, **cpu = cpu_bufs(pool, &w, at, m);
            rc = copy_stream(pool, &w, write, &stream);
            if (!rc)
                rc = xfer_store_run(pool, ck, qd, vas_addr(&pool->vas, at),
                                    cpu, slots + done, m, write, stream);
            free(cpu);
            done += m;
        }
        if (rc)
            return rc;
        at += m;
    }
    return 0;
}

/* Undoes segment s of a run being restored: its memory goes back. */
static void seg_undo(ump_pool_t *pool, struct seg *s)
{
    struct backing b;
    res_note_tier(pool, s, s->tier, -1);
    res_lru_unlink(pool->off, s);
    if (s->tier == UMP_TIER_NVME) {
        if (s->slots)
            xfer_slots_free_later(pool, s->slots, s->n);
        return;
    }
    if (backing_of(pool, s, &b) == 0) {
        if (backing_unmap(pool, &b, s->g) == 0)
            backing_put(pool, &b);
        else
            backing_clear(&b);
    }
}

/* Memory for segment s on tier (dev for a device); -ENOMEM/-ENOSPC when
 * that tier has no room. */
static int seg_make(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct backing b;
    int rc;
    if (tier == UMP_TIER_NVME) {
        if (!pool->off->nvme)
            return -ENOSPC;
        rc = xfer_slots_alloc(pool, s->n, &s->slots);
    } else {
        rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, s->n,
                         &b);
        if (!rc && (rc = backing_map(pool, &b, s->g, s->n)))
            backing_put(pool, &b);
        if (!rc) {
            s->host = b.host;
            backing_clear(&b);
        }
    }
    if (rc)
        return rc;
    s->tier = tier;
    s->dev = tier == UMP_TIER_DEVICE ? dev : -1;
    res_note_tier(pool, s, tier, +1);
    if (tier == UMP_TIER_DEVICE)
        chunks_note_in_use(pool, dev);
    if (tier == UMP_TIER_HOST)
        pool->off->host_in_use = true;
    return 0;
}

/* Memory for restored segment s, saved as cs: on its tier, else the next
 * one down that has room, else its home device. A discarded one has no
 * bytes: it stays a discarded NVMe segment (no slots) where the pool has
 * NVMe, else it gets memory, its contents undefined as after DONTNEED. */
static int seg_restore(ump_pool_t *pool, struct seg *s,
                       const struct ckpt_seg *cs)
{
    if (cs->nodata && pool->off->nvme) {
        s->tier = UMP_TIER_NVME;
        s->dev = -1;
        s->discard = true;
        res_note_tier(pool, s, UMP_TIER_NVME, +1);
        return 0;
    }
    int order[3][2] = {{cs->tier, cs->dev},
                       {cs->tier == UMP_TIER_HOST ? UMP_TIER_NVME
                                                  : UMP_TIER_HOST, -1},
                       {UMP_TIER_DEVICE, cs->home}};
    int rc = -ENOSPC;
    for (int k = 0; k < 3 && rc; k++) {
        if (order[k][0] == UMP_TIER_DEVICE &&
            (order[k][1] < 0 || order[k][1] >= pool->ndev))
            continue;
        rc = seg_make(pool, s, order[k][0], order[k][1]);
    }
    return rc;
}

int ckpt_restore_run(ump_pool_t *pool, struct run *r, size_t start,
                     const struct ckpt_seg *segs, size_t nseg, unsigned flags)
{
    size_t n = 0;
    for (size_t i = 0; i < nseg; i++)
        n += segs[i].n;
    struct res *res = calloc(1, sizeof(*res) + nseg * sizeof(struct seg));
    if (!res)
        return -ENOMEM;
    int rc = vas_take_range(&pool->vas, start, n);
    if (rc) {
        free(res);
        return rc;
    }
    res->run = r;
    res->nseg = nseg;
    size_t i = 0, g = start;
    for (; i < nseg && !rc; g += segs[i++].n) {
        struct seg *s = &res->seg[i];
        *s = (struct seg){.g = g, .n = segs[i].n, .home = segs[i].home,
                          .dest = -1, .res = res};
        rc = seg_restore(pool, s, &segs[i]);
        if (rc)
            break;
        res_lru_touch(pool->off, s, true);
    }
    if (rc) {
        while (i--)
            seg_undo(pool, &res->seg[i]);
        free(res);
        if (vas_give(&pool->vas, start, n))
            ump_log_error("out of memory for the address range table");
        return rc == -ENOMEM ? -ENOSPC : rc;
    }
    r->start = start;
    r->n = n;
    r->device = segs[0].home;
    r->mixed = false;
    for (size_t j = 0; j < nseg; j++)
        r->mixed |= segs[j].home != segs[0].home;
    r->flags = (unsigned char)flags;
    r->res = res;
    atomic_store_explicit(&r->word, obj_word(OBJ_FREE, 0),
                          memory_order_relaxed);
    vas_set(&pool->vas, start, n, VAS_RUN, r);
    return 0;
}
