/*
 * NVMe transfers (contract in xfer.h): the store opened from nvme_dir,
 * slot bookkeeping that never blocks under the pool lock, and the data
 * path between the pool's addresses and slots. Device memory goes through
 * the store's bounce buffers in two halves, so that the device copy of one
 * batch overlaps the disk I/O of the other; host memory the CPU reaches is
 * the I/O buffer itself.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tier/nvme.h"
#include "tier/xfer.h"
#include "util/internal.h"

/* Slots freed while the pool lock is held wait here for the next user of
 * the store (io_lock may be held for a whole transfer: never taken under
 * the pool lock). */
struct dead_slots {
    uint64_t *slots;
    size_t n;
    struct dead_slots *next;
};

/* --- set-up ---------------------------------------------------------------- */

int xfer_open(ump_pool_t *pool, struct offload *o)
{
    const struct ump_config *cfg = &pool->cfg;
    const char *dirs[64];
    int ndirs = 0;
    char list[UMP_CONF_PATH_MAX];
    if (!cfg->nvme_dir[0])
        return 0;
    if (pool->chunk_size % ((size_t)1 << 20)) {
        ump_log_error("config: the NVMe tier needs chunk_size of at least 1M "
                      "(it is %zu)", pool->chunk_size);
        return -EINVAL;
    }
    strcpy(list, cfg->nvme_dir);
    for (char *save = NULL, *d = strtok_r(list, ":", &save); d;
         d = strtok_r(NULL, ":", &save)) {
        if (ndirs == (int)UMP_ARRAY_SIZE(dirs)) {
            ump_log_error("config: more than %zu nvme_dir directories",
                          UMP_ARRAY_SIZE(dirs));
            return -EINVAL;
        }
        dirs[ndirs++] = d;
    }
    struct nvme_config nc = {
        .dirs = dirs,
        .ndirs = ndirs,
        .slot_size = pool->chunk_size,
        .limit = cfg->nvme_limit,
        .queue_depth = (unsigned)cfg->nvme_queue_depth,
        .force_threads = cfg->nvme_engine == UMP_NVME_THREADS,
        /* one set of bounce buffers: near the first device */
        .numa_node = pool->topo.dev[0].numa,
    };
    if (!ndirs)
        return 0;
    /* nvme_open logs no error: this is the one line for it. */
    int rc = nvme_open(&nc, &o->nvme);
    if (rc) {
        ump_log_error("config: cannot use nvme_dir %s: %s", cfg->nvme_dir,
                      ump_strerror(rc));
        o->nvme = NULL;
        return rc;
    }
    if (cfg->nvme_engine == UMP_NVME_IO_URING &&
        strcmp(nvme_engine(o->nvme), "io_uring")) {
        ump_log_error("config: nvme_engine io_uring is not available here");
        nvme_close(o->nvme);
        o->nvme = NULL;
        return -ENOTSUP;
    }
    o->qd = (unsigned)cfg->nvme_queue_depth;
    o->nvme_limit = cfg->nvme_limit;
    /* The bounce buffers take device copies: page-locked for the driver,
     * those copies run at the link's speed and overlap the disk's I/O. */
    size_t len;
    void *arena = nvme_arena(o->nvme, &len);
    if (arena && pool->be->host_register &&
        pool->be->host_register(pool->bctx, arena, len) == 0)
        o->arena_registered = arena;
    return 0;
}

/* --- slots ----------------------------------------------------------------- */

/* Frees slots of the store; io_lock held. */
static void slots_release(struct offload *o, uint64_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        nvme_slot_free(o->nvme, slots[i]);
    free(slots);
}

/* Frees what waits in the dead list; io_lock held. */
static void slots_drain(struct offload *o)
{
    pthread_mutex_lock(&o->dead_lock);
    struct dead_slots *d = o->dead;
    o->dead = NULL;
    pthread_mutex_unlock(&o->dead_lock);
    while (d) {
        struct dead_slots *next = d->next;
        slots_release(o, d->slots, d->n);
        free(d);
        d = next;
    }
}

void xfer_close(ump_pool_t *pool, struct offload *o)
{
    if (o->nvme) {
        pthread_mutex_lock(&o->io_lock);
        slots_drain(o);
        pthread_mutex_unlock(&o->io_lock);
    }
    if (o->arena_registered)
        pool->be->host_unregister(pool->bctx, o->arena_registered);
    o->arena_registered = NULL;
    nvme_close(o->nvme);
    o->nvme = NULL;
}

void xfer_forget(struct offload *o)
{
    while (o->dead) { /* the store is gone: only the lists are left */
        struct dead_slots *d = o->dead;
        o->dead = d->next;
        free(d->slots);
        free(d);
    }
}

void xfer_slots_free(ump_pool_t *pool, uint64_t *slots, size_t n)
{
    struct offload *o = pool->off;
    if (!slots)
        return;
    pthread_mutex_lock(&o->io_lock);
    slots_release(o, slots, n);
    pthread_mutex_unlock(&o->io_lock);
}

void xfer_slots_free_later(ump_pool_t *pool, uint64_t *slots, size_t n)
{
    struct offload *o = pool->off;
    if (!slots)
        return;
    struct dead_slots *d = malloc(sizeof(*d));
    if (!d) { /* rare: wait for the store rather than lose the slots */
        pthread_mutex_lock(&o->io_lock);
        slots_release(o, slots, n);
        pthread_mutex_unlock(&o->io_lock);
        return;
    }
    *d = (struct dead_slots){slots, n, NULL};
    pthread_mutex_lock(&o->dead_lock);
    d->next = o->dead;
    o->dead = d;
    pthread_mutex_unlock(&o->dead_lock);
}

int xfer_slots_alloc(ump_pool_t *pool, size_t n, uint64_t **slots_p)
{
    struct offload *o = pool->off;
    uint64_t *slots = calloc(n, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    int rc = 0;
    size_t i = 0;
    pthread_mutex_lock(&o->io_lock);
    slots_drain(o);
    for (; i < n && !rc; i++)
        rc = nvme_slot_alloc(o->nvme, &slots[i]);
    if (rc)
        slots_release(o, slots, i - 1);
    pthread_mutex_unlock(&o->io_lock);
    if (rc == -ENOSPC)
        ump_log_debug("the NVMe tier is full (%zu bytes used)", o->nvme_used);
    if (!rc)
        *slots_p = slots;
    return rc;
}

/* --- data ------------------------------------------------------------------ */

/* Queues the copies between the granules [i, i + m) at va and the bounce
 * buffers buf on stream (to_buf: from va). */
static int bounce_copy(ump_pool_t *pool, char *va, void **buf, size_t i,
                       size_t m, bool to_buf, void *stream)
{
    size_t gran = pool->chunk_size;
    int rc = 0;
    for (size_t j = 0; j < m && !rc; j++) {
        char *at = va + (i + j) * gran;
        rc = to_buf ? pool->be->memcpy_async(pool->bctx, buf[j], at, gran,
                                             stream)
                    : pool->be->memcpy_async(pool->bctx, at, buf[j], gran,
                                             stream);
    }
    return rc;
}

/* One batch of m granules from granule i: slots and buffers into io. */
static void batch_io(struct nvme_io *io, const uint64_t *slots, void **buf,
                     size_t i, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        io[j].slot = slots[i + j];
        io[j].buf = buf[j];
    }
}

/*
 * The n granules at va (device memory) to or from slots through the k
 * bounce buffers, in batches of half of them: the device copy of one batch
 * runs on stream while the disk works on the other, so a move between a
 * device and NVMe takes about as long as its slower leg, not the sum. k is
 * at least 2 unless n is 1. The store is the caller's alone.
 */
static int bounce_xfer(ump_pool_t *pool, struct nvme_store *st, char *va,
                       const uint64_t *slots, size_t n, bool write, void **buf,
                       size_t k, struct nvme_io *io, void *stream)
{
    size_t h = k > 1 ? k / 2 : 1, nb = (n + h - 1) / h;
    void **half[2] = {buf, buf + (k > 1 ? h : 0)};
    int rc, r2;
    /* batch b: granules [b * h, b * h + size(b)) in half[b % 2] */
#define SIZE(b) ((b) * h + h <= n ? h : n - (b) * h)
    if (write) {
        rc = bounce_copy(pool, va, half[0], 0, SIZE(0), true, stream);
        r2 = pool->be->stream_sync(pool->bctx, stream);
        rc = rc ? rc : r2;
        for (size_t b = 0; b < nb && !rc; b++) {
            if (b + 1 < nb)
                rc = bounce_copy(pool, va, half[(b + 1) % 2], (b + 1) * h,
                                 SIZE(b + 1), true, stream);
            batch_io(io, slots, half[b % 2], b * h, SIZE(b));
            if (!rc)
                rc = nvme_write(st, io, SIZE(b));
            r2 = pool->be->stream_sync(pool->bctx, stream);
            rc = rc ? rc : r2;
        }
    } else {
        batch_io(io, slots, half[0], 0, SIZE(0));
        rc = nvme_read(st, io, SIZE(0));
        for (size_t b = 0; b < nb && !rc; b++) {
            rc = bounce_copy(pool, va, half[b % 2], b * h, SIZE(b), false,
                             stream);
            if (!rc && b + 1 < nb) {
                batch_io(io, slots, half[(b + 1) % 2], (b + 1) * h,
                         SIZE(b + 1));
                rc = nvme_read(st, io, SIZE(b + 1));
            }
            r2 = pool->be->stream_sync(pool->bctx, stream);
            rc = rc ? rc : r2;
        }
    }
#undef SIZE
    return rc;
}

/* Where the CPU does file I/O on the granule its address va reaches. */
static void *io_addr(ump_pool_t *pool, char *va)
{
    void *view = pool->be->io_view
                     ? pool->be->io_view(pool->bctx, va, pool->chunk_size)
                     : NULL;
    return view ? view : va;
}

int xfer_store_run(ump_pool_t *pool, struct nvme_store *st, unsigned qd,
                   char *va, void *const *cpu, const uint64_t *slots,
                   size_t n, bool write, void *stream)
{
    size_t gran = pool->chunk_size;
    if (qd < 2)
        qd = 2; /* two halves, see bounce_xfer */
    size_t k = cpu || n < qd ? n : qd;
    struct nvme_io *io = calloc(k, sizeof(*io));
    void **buf = calloc(k, sizeof(*buf));
    int rc = io && buf ? 0 : -ENOMEM;
    if (cpu) {
        for (size_t i = 0; !rc && i < n; i++) {
            io[i].slot = slots[i];
            io[i].buf = io_addr(pool, cpu[i]);
        }
        if (!rc)
            rc = write ? nvme_write(st, io, n) : nvme_read(st, io, n);
    } else {
        for (size_t i = 0; !rc && i < k; i++)
            if (!(buf[i] = nvme_buffer_alloc(st, gran)))
                rc = -ENOMEM;
        if (!rc)
            rc = bounce_xfer(pool, st, va, slots, n, write, buf, k, io,
                             stream);
    }
    for (size_t i = 0; buf && !cpu && i < k; i++)
        nvme_buffer_free(st, buf[i]);
    free(buf);
    free(io);
    /* Pinned memory a driver maps for the GPU may refuse direct I/O. */
    if (rc == -EFAULT && cpu)
        return xfer_store_run(pool, st, qd, va, NULL, slots, n, write, stream);
    return rc;
}

int xfer_run(ump_pool_t *pool, char *va, void *const *cpu, uint64_t *slots,
             size_t n, bool write, void *stream)
{
    struct offload *o = pool->off;
    pthread_mutex_lock(&o->io_lock);
    slots_drain(o);
    int rc = xfer_store_run(pool, o->nvme, o->qd, va, cpu, slots, n, write,
                            stream);
    pthread_mutex_unlock(&o->io_lock);
    return rc;
}

int xfer_copy_slots(ump_pool_t *pool, struct nvme_store *ck,
                    const uint64_t *ck_slots, const uint64_t *slots,
                    size_t n, bool to_ck)
{
    struct offload *o = pool->off;
    size_t k = o->qd ? o->qd : 1;
    if (k > n)
        k = n;
    struct nvme_io *io = calloc(k, sizeof(*io));
    void **buf = calloc(k, sizeof(*buf));
    int rc = io && buf ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < k; i++)
        if (!(buf[i] = nvme_buffer_alloc(ck, pool->chunk_size)))
            rc = -ENOMEM;
    struct nvme_store *from = to_ck ? o->nvme : ck, *to = to_ck ? ck : o->nvme;
    const uint64_t *fs = to_ck ? slots : ck_slots, *ts = to_ck ? ck_slots
                                                              : slots;
    pthread_mutex_lock(&o->io_lock);
    slots_drain(o);
    for (size_t i = 0; !rc && i < n; i += k) {
        size_t m = n - i < k ? n - i : k;
        batch_io(io, fs, buf, i, m);
        rc = nvme_read(from, io, m);
        if (!rc) {
            batch_io(io, ts, buf, i, m);
            rc = nvme_write(to, io, m);
        }
    }
    pthread_mutex_unlock(&o->io_lock);
    for (size_t i = 0; buf && i < k; i++)
        nvme_buffer_free(ck, buf[i]);
    free(buf);
    free(io);
    return rc;
}

int xfer_inject_fault(ump_pool_t *pool, const char *what, int nth)
{
    struct offload *o = pool->off;
    if (!o->nvme)
        return -ENODEV;
    pthread_mutex_lock(&o->io_lock); /* never under the pool lock */
    int rc = nvme_inject_fault(o->nvme, what, nth);
    pthread_mutex_unlock(&o->io_lock);
    return rc;
}
