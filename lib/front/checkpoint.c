/*
 * ump_pool_checkpoint: every live allocation's bytes and the pool's layout
 * to a new file (format: ckpt_format.h). The pool stops for it: under
 * pool->lock, once the deferred frees and the moves in flight are done,
 * the allocations are listed and their bytes written through the NVMe
 * tier's machinery (tier/ckpt.c: io_uring, O_DIRECT, crc32c per block) into
 * a temporary file; the index and the header follow, the file is fsynced
 * and renamed over path. Allocations and frees of other threads served by
 * their thread caches go on meanwhile; the slow paths and the tier's
 * workers wait, so that nothing the checkpoint reads moves or goes away.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front/check.h"
#include "front/ckpt.h"
#include "front/failure.h"
#include "front/ckpt_format.h"
#include "front/front.h"
#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/slab.h"
#include "tier/ckpt.h"
#include "tier/offload.h"
#include "tier/nvme.h"
#include "util/crc32c.h"

/* --- the index, built in memory --------------------------------------- */

int ckpt_buf_put(struct ckpt_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return -ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

int32_t ckpt_place_code(const ump_pool_t *pool, int place)
{
    if (place == place_host(pool))
        return CKPT_PLACE_HOST;
    if (place == place_overflow(pool))
        return CKPT_PLACE_OVERFLOW;
    return place;
}

/* What the walk found: the index so far, and the data ranges to write. */
struct walk {
    struct ckpt_buf index;
    uint64_t nrec, nblocks, live;
    /* granules whose data is kept, and the blocks they take */
    struct range { size_t g, n; uint64_t blocks; } *ranges;
    size_t nranges, cap;
};

static int walk_range(struct walk *w, size_t g, size_t n, uint64_t blocks)
{
    if (w->nranges == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct range *r = realloc(w->ranges, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        w->ranges = r;
        w->cap = cap;
    }
    w->ranges[w->nranges++] = (struct range){g, n, blocks};
    w->nblocks += blocks;
    return 0;
}

static int walk_slab(ump_pool_t *pool, struct walk *w, struct slab *s)
{
    struct ckpt_rec rec = {.g = s->granule, .n = 1, .size = s->size,
                           .kind = CKPT_SLAB, .flags = s->cls,
                           .place = ckpt_place_code(pool, s->device)};
    size_t at = w->index.len;
    int rc = ckpt_buf_put(&w->index, &rec, sizeof(rec));
    for (uint32_t i = 0; i < s->nobj && !rc; i++) {
        uint32_t word = atomic_load_explicit(&s->word[i],
                                             memory_order_acquire);
        if (!obj_live(word))
            continue;
        struct ckpt_obj o = {.idx = i, .req = obj_req(word)};
        rc = ckpt_buf_put(&w->index, &o, sizeof(o));
        rec.nsub++;
        w->live += o.req;
    }
    if (rc)
        return rc;
    if (!rec.nsub) { /* no live object: nothing to keep */
        w->index.len = at;
        return 0;
    }
    memcpy(w->index.p + at, &rec, sizeof(rec));
    w->nrec++;
    return walk_range(w, s->granule, 1, 1);
}

static int walk_run(ump_pool_t *pool, struct walk *w, struct run *r)
{
    size_t size = atomic_load_explicit(&r->size, memory_order_relaxed);
    struct ckpt_rec rec = {
        .g = r->start, .n = r->n, .size = size,
        .kind = r->res ? CKPT_TRACKED : CKPT_RUN,
        .flags = atomic_load_explicit(&r->flags, memory_order_relaxed),
        .place = ckpt_place_code(pool, r->device)};
    size_t at = w->index.len;
    int rc = ckpt_buf_put(&w->index, &rec, sizeof(rec));
    uint64_t blocks = 0;
    if (r->res) {
        struct ckpt_seg *segs = NULL;
        size_t nseg = 0;
        if (!rc)
            rc = ckpt_run_segs(r, &segs, &nseg);
        for (size_t i = 0; i < nseg && !rc; i++) {
            struct ckpt_tseg t = {.n = segs[i].n, .home = segs[i].home,
                                  .tier = segs[i].tier, .dev = segs[i].dev,
                                  .nodata = segs[i].nodata};
            rc = ckpt_buf_put(&w->index, &t, sizeof(t));
            blocks += t.nodata ? 0 : t.n;
        }
        rec.nsub = (uint32_t)nseg;
        free(segs);
    } else {
        size_t end = r->start + r->n;
        for (size_t g = r->start; g < end && !rc;) {
            struct ckpt_part p = {.place = ckpt_place_code(
                                      pool, chunks_at(pool, g)->device)};
            while (g < end &&
                   ckpt_place_code(pool, chunks_at(pool, g)->device) ==
                       p.place) {
                /* a carved run's edge chunks reach past it */
                const struct chunk *c = chunks_at(pool, g);
                size_t e = c->g + c->n < end ? c->g + c->n : end;
                p.n += e - g;
                g = e;
            }
            rc = ckpt_buf_put(&w->index, &p, sizeof(p));
            rec.nsub++;
        }
        blocks = r->n;
    }
    if (rc)
        return rc;
    memcpy(w->index.p + at, &rec, sizeof(rec));
    w->nrec++;
    w->live += size;
    return walk_range(w, r->start, r->n, blocks);
}

/* One slab or live run into the walk (runs_walk's callback). */
static int walk_one(ump_pool_t *pool, struct slab *s, struct run *r,
                    void *arg)
{
    return s ? walk_slab(pool, arg, s) : walk_run(pool, arg, r);
}

/* Lists every live allocation, in address order. */
static int walk_pool(ump_pool_t *pool, struct walk *w)
{
    return runs_walk(pool, walk_one, w);
}

/* --- writing ---------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n, off_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = pwrite(fd, (const char *)p + done, n - done,
                           off + (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        done += (size_t)k;
    }
    return 0;
}

/* The directory of path, fsynced so that the rename is durable. */
static void sync_dir(const char *path)
{
    char copy[PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The data of every listed range into the checkpoint's store. Pool lock
 * held, quiesced. */
static int write_data(ump_pool_t *pool, struct nvme_store *ck,
                      const struct walk *w)
{
    uint64_t *slots = malloc((w->nblocks ? w->nblocks : 1) * sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t b = 0; b < w->nblocks && !rc; b++) {
        rc = nvme_slot_alloc(ck, &slots[b]);
        if (!rc && slots[b] != b) /* the file store hands them in order */
            rc = -EIO;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < w->nranges && !rc; i++) {
        rc = ckpt_data(pool, ck, w->ranges[i].g, w->ranges[i].n, slots + at,
                       true);
        at += w->ranges[i].blocks;
    }
    free(slots);
    return rc;
}

/* The test hook's fault for the next checkpoint's store (ckpt.h). */
static char fault_what[16];
static int fault_nth;

int ckpt_inject_fault(const char *what, int nth)
{
    if (nth < 0 || (nth && (!what || strlen(what) >= sizeof(fault_what))))
        return -EINVAL;
    snprintf(fault_what, sizeof(fault_what), "%s", nth ? what : "");
    fault_nth = nth;
    return 0;
}

UMP_EXPORT int ump_pool_set_root(ump_pool_t *pool, void *ptr)
{
    int rc = pool_check(pool, "ump_pool_set_root");
    if (rc)
        return rc;
    if (ptr && !vas_contains(&pool->vas, ptr)) {
        ump_log_error("ump_pool_set_root: %p is not in the pool's range", ptr);
        return -EINVAL;
    }
    atomic_store(&pool->root, ptr);
    return 0;
}

UMP_EXPORT int ump_pool_root(ump_pool_t *pool, void **ptr_p)
{
    int rc = pool_check(pool, "ump_pool_root");
    if (rc)
        return rc;
    if (!ptr_p) {
        ump_log_error("ump_pool_root: ptr_p is NULL");
        return -EINVAL;
    }
    *ptr_p = atomic_load(&pool->root);
    return 0;
}

UMP_EXPORT int ump_pool_checkpoint(ump_pool_t *pool, const char *path)
{
    static const char fn[] = "ump_pool_checkpoint";
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (!path || !*path || strlen(path) > PATH_MAX - 32) {
        ump_log_error("%s: path is %s", fn, !path ? "NULL" : "empty or too "
                      "long");
        return -EINVAL;
    }
    if (pool->chunk_size % ((size_t)1 << 20)) {
        ump_log_error("%s: chunk_size %zu is not a multiple of 1 MiB (the "
                      "checkpoint's block)", fn, pool->chunk_size);
        return -EINVAL;
    }
    static _Atomic unsigned seq;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-%u", path, (long)getpid(),
             atomic_fetch_add(&seq, 1));
    struct walk w = {0};
    struct ckpt_header h = {.version = CKPT_VERSION,
                            .header_bytes = sizeof(h),
                            .granule = pool->chunk_size,
                            .va_base = (uintptr_t)pool->vas.base,
                            .va_size = pool->vas.size,
                            .ndev = (uint32_t)pool->ndev,
                            .root = (uintptr_t)atomic_load(&pool->root)};
    memcpy(h.magic, CKPT_MAGIC, sizeof(h.magic));
    char *config = malloc(CKPT_CONFIG_MAX);
    if (!config)
        return -ENOMEM;
    rc = conf_format(&pool->cfg, config, CKPT_CONFIG_MAX);
    if (rc) {
        free(config);
        return rc;
    }

    pthread_mutex_lock(&pool->ckpt_lock);
    pthread_mutex_lock(&pool->lock);
    /* No new move starts from here on (others in flight end); both waits
     * drop the lock, so a suspend may have begun meanwhile: checked after
     * them, with the lock kept from then on. */
    offload_hold(pool);
    pool_poll_pending(pool, true);
    offload_quiesce(pool);
    if (atomic_load(&pool->suspended)) {
        offload_unhold(pool);
        pthread_mutex_unlock(&pool->lock);
        pthread_mutex_unlock(&pool->ckpt_lock);
        free(config);
        ump_log_error("%s: the pool is suspended (ump_pool_resume first)", fn);
        return -EBUSY;
    }
    /* Bytes lost with a failed device cannot be saved, and a checkpoint
     * that restored them as garbage would hide the loss. */
    uint64_t nlost;
    size_t lost_bytes;
    pool_lost(pool, UMP_DEVICE_ALL, &nlost, &lost_bytes);
    if (nlost) {
        offload_unhold(pool);
        pthread_mutex_unlock(&pool->lock);
        pthread_mutex_unlock(&pool->ckpt_lock);
        free(config);
        ump_log_error("%s: %llu allocation(s), %zu bytes, were lost with a "
                      "failed device (ump_stats: lost_count): ump_free them "
                      "first; a checkpoint cannot hold bytes that are gone",
                      fn, (unsigned long long)nlost, lost_bytes);
        return -EIO;
    }
    /* The index is known before the data is written: the data starts past
     * its room. Walking once to size it and once to write it would need
     * the same lock anyway, so the walk comes first, with the store opened
     * after it. */
    rc = walk_pool(pool, &w);
    struct nvme_store *ck = NULL;
    size_t crc_at = w.index.len;
    if (!rc) {
        uint32_t crc0 = 0;
        for (uint64_t b = 0; b < w.nblocks && !rc; b++)
            rc = ckpt_buf_put(&w.index, &crc0, sizeof(crc0));
        if (!rc)
            rc = ckpt_buf_put(&w.index, config, strlen(config) + 1);
        h.nrec = w.nrec;
        h.nblocks = w.nblocks;
        h.live_bytes = w.live;
        h.index_off = CKPT_HEADER_BLOCK;
        h.index_len = w.index.len;
        h.data_off = UMP_ALIGN_UP(h.index_off + h.index_len,
                                  (uint64_t)CKPT_HEADER_BLOCK);
    }
    if (!rc) {
        rc = ckpt_store_open(pool, tmp, true, h.data_off, 0, &ck);
        if (rc)
            ump_log_error("%s: cannot create %s: %s", fn, tmp,
                          ump_strerror(rc));
        else if (fault_nth)
            rc = nvme_inject_fault(ck, fault_what, fault_nth);
        fault_nth = 0;
    }
    if (!rc) {
        rc = write_data(pool, ck, &w);
        if (rc)
            ump_log_error("%s: cannot write the data to %s: %s", fn, tmp,
                          ump_strerror(rc));
    }
    offload_unhold(pool);
    pthread_mutex_unlock(&pool->lock);

    /* The index with the blocks' crcs, then the header, then durable. */
    if (!rc) {
        for (uint64_t b = 0; b < w.nblocks; b++) {
            uint32_t c = nvme_slot_crc(ck, b);
            memcpy(w.index.p + crc_at + b * sizeof(c), &c, sizeof(c));
        }
        h.index_crc = crc32c(0, w.index.p, w.index.len);
        int fd = open(tmp, O_WRONLY | O_CLOEXEC);
        char block[CKPT_HEADER_BLOCK] = {0};
        memcpy(block, &h, sizeof(h));
        h.header_crc = crc32c(0, block, sizeof(block));
        memcpy(block, &h, sizeof(h));
        rc = fd < 0 ? -errno : 0;
        /* The store grows its file in steps: cut it to the data's end. */
        if (!rc && ftruncate(fd, (off_t)(h.data_off + h.nblocks * h.granule)))
            rc = -errno;
        if (!rc)
            rc = write_all(fd, w.index.p, w.index.len, (off_t)h.index_off);
        if (!rc && fdatasync(fd))
            rc = -errno;
        if (!rc)
            rc = write_all(fd, block, sizeof(block), 0);
        if (!rc && fsync(fd))
            rc = -errno;
        if (fd >= 0)
            close(fd);
        if (rc)
            ump_log_error("%s: cannot write the index of %s: %s", fn, tmp,
                          ump_strerror(rc));
    }
    ckpt_store_close(pool, ck);
    if (!rc && rename(tmp, path)) {
        rc = -errno;
        ump_log_error("%s: cannot rename %s to %s: %s", fn, tmp, path,
                      ump_strerror(rc));
    }
    if (rc)
        unlink(tmp); /* the old checkpoint at path, if any, stays */
    else
        sync_dir(path);
    pthread_mutex_unlock(&pool->ckpt_lock);
    free(w.index.p);
    free(w.ranges);
    free(config);
    if (!rc)
        ump_log_debug("%s: %llu allocations, %llu bytes of data to %s", fn,
                      (unsigned long long)h.nrec,
                      (unsigned long long)(h.nblocks * h.granule), path);
    return rc;
}
