/*
 * The sim backend's virtual memory management (see sim.c for the model):
 * chunk slots and extents of the memfds, reservations, chunks, mappings and
 * access, each as strict as the driver. Everything runs under c->lock; with
 * sim_driver_costs:h200-timed each call also runs between sim_call_begin
 * and sim_call_end (sim_timed.c), outside that lock, which make it take
 * what it takes on an H200.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/sim/sim_vmm.h"
#include "topo/drivercost.h"
#include "util/internal.h"
#include "util/log.h"

/* --- modeled driver time (sim_driver_costs) ----------------------------- */

/* Accounts op on chunk ch as the H200 would have charged it: per handle,
 * by the handle's size (topo/drivercost.h, the table the allocator's
 * choices read too). Successful calls only: the model has no figure for a
 * refused one. The call k waits for every handle's cost (h200-timed);
 * driver_ns counts device handles only, to the device owning the handle,
 * as the cuda backend times them: pinning host memory is no cost of the
 * device's memory management (the host tier keeps its chunks created
 * ahead of need for that reason). Lock held. */
void drv_account(struct sim_ctx *c, const struct sim_chunk *ch,
                 enum drv_op op, struct sim_call *k)
{
    uint64_t ns = ch->host ? drvcost_host_ns(op, ch->size)
                           : drvcost_ns(op, ch->size);

    k->ns += ns;
    if (c->drv_costs && !ch->host)
        atomic_fetch_add_explicit(&c->drv_ns[ch->device], ns,
                                  memory_order_relaxed);
}

uint64_t sim_driver_ns(void *ctx, int device)
{
    struct sim_ctx *c = ctx;
    uint64_t ns = 0;

    if (device >= c->ndev)
        return 0;
    for (int d = device < 0 ? 0 : device;
         d < (device < 0 ? c->ndev : device + 1); d++)
        ns += atomic_load_explicit(&c->drv_ns[d], memory_order_relaxed);
    return ns;
}

/* --- chunk slots and extents ------------------------------------------- */

/* A handle's chunk if it names a live, unreleased chunk, else NULL. Lock held. */
struct sim_chunk *chunk_of(struct sim_ctx *c, ump_handle_t h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)c->slots;
    struct sim_chunk *ch;

    if (p < base || p >= base + c->slots_touched * sizeof(*ch) ||
        (p - base) % sizeof(*ch))
        return NULL;
    ch = (struct sim_chunk *)p;
    if (ch->device < 0 || ch->released)
        return NULL;
    return ch;
}

/* Lock held. */
struct sim_chunk *slot_get(struct sim_ctx *c)
{
    struct sim_chunk *ch;

    if (c->slots_touched < c->nslots)
        return &c->slots[c->slots_touched++];
    ch = c->free_head;
    if (ch) {
        c->free_head = ch->next_free;
        if (!c->free_head)
            c->free_tail = NULL;
    }
    return ch;
}

/* Lock held. */
static void slot_put(struct sim_ctx *c, struct sim_chunk *ch)
{
    memset(ch, 0, sizeof(*ch));
    ch->device = -1;
    if (c->free_tail)
        c->free_tail->next_free = ch;
    else
        c->free_head = ch;
    c->free_tail = ch;
}

/* Takes size bytes from the first free extent that fits; -ENOSPC when none
 * does. *spare_p gets a node for extent_give. Lock held. */
static int extent_take(struct sim_device *d, size_t size, size_t *off_p,
                       struct sim_extent **spare_p)
{
    struct sim_extent **pp, *e, *spare;

    for (pp = &d->free; (e = *pp); pp = &e->next) {
        if (e->len < size)
            continue;
        if (e->len == size) {
            *pp = e->next;
            e->next = NULL;
            *off_p = e->off;
            *spare_p = e;
            return 0;
        }
        spare = calloc(1, sizeof(*spare));
        if (!spare) {
            ump_log_error("sim: out of host memory for an extent");
            return -ENOMEM;
        }
        *off_p = e->off;
        e->off += size;
        e->len -= size;
        *spare_p = spare;
        return 0;
    }
    return -ENOSPC;
}

/* Returns [off, off + len) to the free list, merging it with its
 * neighbours; spare becomes the new node or is freed. Lock held. */
static void extent_give(struct sim_device *d, size_t off, size_t len,
                        struct sim_extent *spare)
{
    struct sim_extent *prev = NULL, *next = d->free;
    bool left, right;

    while (next && next->off < off) {
        prev = next;
        next = next->next;
    }
    left = prev && prev->off + prev->len == off;
    right = next && off + len == next->off;
    if (left && right) {
        prev->len += len + next->len;
        prev->next = next->next;
        free(next);
        free(spare);
    } else if (left) {
        prev->len += len;
        free(spare);
    } else if (right) {
        next->off = off;
        next->len += len;
        free(spare);
    } else {
        spare->off = off;
        spare->len = len;
        spare->next = next;
        if (prev)
            prev->next = spare;
        else
            d->free = spare;
    }
}

/* The memory a live chunk is an extent of. Lock held. */
static struct sim_device *chunk_mem(struct sim_ctx *c,
                                    const struct sim_chunk *ch)
{
    return ch->host ? &c->host[ch->device] : &c->dev[ch->device];
}

/* The file a live chunk's memory is in, at ch->off. Lock held. */
int chunk_fd(struct sim_ctx *c, const struct sim_chunk *ch)
{
    return ch->imported ? ch->fd : chunk_mem(c, ch)->fd;
}

/* Gives a released, unmapped chunk's memory back. Lock held. */
void sim_chunk_free(struct sim_ctx *c, struct sim_chunk *ch)
{
    struct sim_device *d = chunk_mem(c, ch);

    if (ch->imported) { /* the exporter's memory: only let go of it */
        close(ch->fd);
        c->nimported--;
        slot_put(c, ch);
        return;
    }
    if (!ch->exported &&
        fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)ch->off, (off_t)ch->size) != 0)
        ump_log_warn("sim: cannot punch a hole in %s %d's memory: %s",
                     ch->host ? "host node" : "device", ch->device,
                     strerror(errno));
    extent_give(d, ch->off, ch->size, ch->spare);
    d->used -= ch->size;
    slot_put(c, ch);
}

/* The reservation holding all of [va, va + size), or NULL. Lock held. */
static struct sim_resv *resv_find(struct sim_ctx *c, const void *va,
                                  size_t size)
{
    uintptr_t a = (uintptr_t)va;

    if (a + size < a)
        return NULL;
    for (struct sim_resv *r = c->resv; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->va;

        if (a >= b && a + size <= b + r->size)
            return r;
    }
    return NULL;
}

/* Checks a range given to map, set_access or unmap and finds its
 * reservation and first granule. Logs and returns -EINVAL. Lock held. */
static int range_check(struct sim_ctx *c, const char *op, void *va,
                       size_t size, struct sim_resv **r_p, size_t *first_p)
{
    struct sim_resv *r;

    if ((uintptr_t)va % SIM_GRAN || !size || size % SIM_GRAN) {
        ump_log_error("sim: %s: [%p, +%zu) is not granularity-aligned", op,
                      va, size);
        return -EINVAL;
    }
    r = resv_find(c, va, size);
    if (!r) {
        ump_log_error("sim: %s: [%p, +%zu) is not inside a reservation", op,
                      va, size);
        return -EINVAL;
    }
    *r_p = r;
    *first_p = (size_t)((char *)va - r->va) / SIM_GRAN;
    return 0;
}

/* --- chunks and mappings ----------------------------------------------- */

/* Takes a chunk of size bytes from d (device or host node `id`); -ENOMEM,
 * logged at debug level only, when d is full: the pool goes elsewhere.
 * Lock held. */
static int chunk_new(struct sim_ctx *c, struct sim_device *d, bool host,
                     int id, size_t size, ump_handle_t *h_p)
{
    const char *what = host ? "host node" : "device";
    struct sim_extent *spare;
    struct sim_chunk *ch;
    size_t off;
    int err;

    if (!size || size % SIM_GRAN || size / SIM_GRAN > UINT32_MAX) {
        ump_log_error("sim: %schunk_create: size %zu is not a positive "
                      "multiple of the granularity %zu", host ? "host_" : "",
                      size, SIM_GRAN);
        return -EINVAL;
    }
    if (size > d->cap - d->used) {
        ump_log_debug("sim: %s %d is full (%zu of %zu bytes used)", what, id,
                      d->used, d->cap);
        return -ENOMEM;
    }
    err = extent_take(d, size, &off, &spare);
    if (err == -ENOSPC) {
        ump_log_debug("sim: %s %d has no free extent of %zu bytes", what, id,
                      size);
        return -ENOMEM;
    }
    if (err)
        return err;
    ch = slot_get(c);
    if (!ch) {
        ump_log_error("sim: chunk table is full");
        extent_give(d, off, size, spare);
        return -ENOMEM;
    }
    memset(ch, 0, sizeof(*ch));
    ch->device = id;
    ch->host = host;
    ch->size = size;
    ch->off = off;
    ch->spare = spare;
    d->used += size;
    *h_p = (ump_handle_t)(uintptr_t)ch;
    return 0;
}

int sim_chunk_create(void *ctx, int device, size_t size,
                            ump_handle_t *h_p)
{
    struct sim_ctx *c = ctx;
    struct sim_call k;
    int err;

    err = sim_check_caller("chunk_create");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_CHUNK_CREATE);
    if (err)
        goto out;
    if (device < 0 || device >= c->ndev) {
        ump_log_error("sim: chunk_create: no device %d (have %d)", device,
                      c->ndev);
        err = -EINVAL;
        goto out;
    }
    err = sim_dev_op(c, device);
    if (!err)
        err = chunk_new(c, &c->dev[device], false, device, size, h_p);
    if (!err)
        drv_account(c, chunk_of(c, *h_p), DRV_CREATE, &k);
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

int sim_host_chunk_create(void *ctx, int numa_node, size_t size,
                                 ump_handle_t *h_p)
{
    struct sim_ctx *c = ctx;
    struct sim_call k;
    int err;

    err = sim_check_caller("host_chunk_create");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_HOST_CHUNK_CREATE);
    if (err)
        goto out;
    if (numa_node == -1)
        numa_node = 0;
    if (numa_node < 0 || numa_node >= c->nhost) {
        ump_log_error("sim: host_chunk_create: no NUMA node %d (have %d)",
                      numa_node, c->nhost);
        err = -EINVAL;
        goto out;
    }
    err = chunk_new(c, &c->host[numa_node], true, numa_node, size, h_p);
    if (!err) {
        struct sim_chunk *ch = chunk_of(c, *h_p);
        char *at = c->host[numa_node].win + ch->off;

        drv_account(c, ch, DRV_CREATE, &k);
        pthread_mutex_unlock(&c->lock);
        /* Pinning allocates every page, as cuMemCreate on HOST_NUMA does:
         * the cost lands here (the pool keeps a reserve made ahead), not
         * on the first copy. A granule at a time: populating holds the
         * process's mmap lock, and a whole chunk at once would stall every
         * map and unmap of the other threads for tens of milliseconds.
         * Only a hint: kernels before 5.14 lack it. With h200-timed this
         * work counts towards the modeled pinning time. */
#ifdef MADV_POPULATE_WRITE
        for (size_t done = 0; done < size; done += SIM_GRAN)
            (void)madvise(at + done, SIM_GRAN, MADV_POPULATE_WRITE);
#else
        (void)at;
#endif
        sim_call_end(c, &k);
        return 0;
    }
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

void *sim_io_view(void *ctx, void *va, size_t size)
{
    size_t len = 0;
    char *view = sim_view_of(ctx, va, size, &len);

    return view && len == size ? view : NULL;
}

int sim_chunk_release(void *ctx, ump_handle_t h)
{
    struct sim_ctx *c = ctx;
    struct sim_chunk *ch;
    struct sim_call k;
    int err;

    err = sim_check_caller("chunk_release");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    ch = chunk_of(c, h);
    if (!ch) {
        ump_log_error("sim: chunk_release: handle %#llx is not a live chunk",
                      (unsigned long long)h);
        err = -EINVAL;
        goto out;
    }
    drv_account(c, ch, DRV_RELEASE, &k);
    /* Like cuMemRelease: mappings keep the memory until they are unmapped. */
    ch->released = true;
    if (!ch->maps)
        sim_chunk_free(c, ch);
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

int sim_map(void *ctx, void *va, size_t size, ump_handle_t h)
{
    struct sim_ctx *c = ctx;
    struct sim_chunk *ch;
    struct sim_resv *r;
    struct sim_call k;
    size_t first, n;
    void *p;
    int err;

    err = sim_check_caller("map");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_MAP);
    if (err)
        goto out;
    ch = chunk_of(c, h);
    if (!ch) {
        ump_log_error("sim: map: handle %#llx is not a live chunk",
                      (unsigned long long)h);
        err = -EINVAL;
        goto out;
    }
    err = range_check(c, "map", va, size, &r, &first);
    if (err)
        goto out;
    if (size != ch->size) {
        ump_log_error("sim: map: size %zu differs from the chunk's %zu", size,
                      ch->size);
        err = -EINVAL;
        goto out;
    }
    if (!ch->host && (err = sim_dev_op(c, ch->device)))
        goto out;
    n = size / SIM_GRAN;
    for (size_t i = first; i < first + n; i++) {
        if (r->g[i].chunk) {
            ump_log_error("sim: map: %p is already mapped",
                          (void *)(r->va + i * SIM_GRAN));
            err = -EINVAL;
            goto out;
        }
    }
    /* PROT_NONE: like CUDA, nothing is accessible before set_access. */
    p = mmap(va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, chunk_fd(c, ch),
             (off_t)ch->off);
    if (p == MAP_FAILED) {
        err = -errno;
        ump_log_error("sim: map: mmap at %p: %s%s", va, strerror(-err),
                      err == -ENOMEM ? " (too many mappings? see "
                                       "vm.max_map_count)" : "");
        /* A failed MAP_FIXED may have dropped what was there. */
        sim_resv_fill(va, size);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        r->g[first + i].chunk = ch;
        r->g[first + i].idx = (uint32_t)i;
        r->g[first + i].access = false;
        r->g[first + i].cpu = false;
    }
    r->nmapped += n;
    ch->maps++;
    drv_account(c, ch, DRV_MAP, &k);
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

/* set_access and set_access_host: checks the devices and every granule of
 * the range (host_only: each must map a host chunk, and the CPU alone may
 * be given access), then makes the range readable and writable. Lock
 * held. */
static int access_grant(struct sim_ctx *c, const char *op, void *va,
                        size_t size, const int *devices, int ndevices,
                        bool host_only, struct sim_call *call)
{
    struct sim_resv *r;
    size_t first, n;
    int err;

    if (ndevices < 0 || (ndevices > 0 && !devices) ||
        (ndevices == 0 && !host_only)) {
        ump_log_error("sim: %s: no devices given", op);
        return -EINVAL;
    }
    for (int i = 0; i < ndevices; i++) {
        if (devices[i] < 0 || devices[i] >= c->ndev) {
            ump_log_error("sim: %s: no device %d (have %d)", op, devices[i],
                          c->ndev);
            return -EINVAL;
        }
    }
    err = range_check(c, op, va, size, &r, &first);
    if (err)
        return err;
    n = size / SIM_GRAN;
    for (size_t i = first; i < first + n; i++) {
        const struct sim_chunk *ch = r->g[i].chunk;

        if (!ch) {
            ump_log_error("sim: %s: %p is not mapped", op,
                          (void *)(r->va + i * SIM_GRAN));
            return -EINVAL;
        }
        if (host_only && !ch->host) {
            ump_log_error("sim: %s: %p maps device %d's memory, not host "
                          "memory", op, (void *)(r->va + i * SIM_GRAN),
                          ch->device);
            return -EINVAL;
        }
        /* Every device reaches host memory over its link. */
        if (ch->host)
            continue;
        /* As strict as the driver: only a peer may be given access. */
        for (int k = 0; k < ndevices; k++) {
            if (!topo_reaches(&c->topo, devices[k], ch->device)) {
                ump_log_error("sim: %s: device %d has no peer access to "
                              "device %d's memory", op, devices[k],
                              ch->device);
                return -EINVAL;
            }
        }
    }
    /* An operation of every device it names and whose memory it maps. */
    uint32_t devs = 0;
    for (int k = 0; k < ndevices; k++)
        devs |= 1u << devices[k];
    for (size_t i = first; i < first + n; i++)
        if (!r->g[i].chunk->host)
            devs |= 1u << r->g[i].chunk->device;
    for (int d = 0; d < c->ndev; d++)
        if ((devs & (1u << d)) && (err = sim_dev_op(c, d)))
            return err;
    /* The CPU stands in for every device on sim. */
    if (mprotect(va, size, PROT_READ | PROT_WRITE) != 0) {
        err = -errno;
        ump_log_error("sim: %s: mprotect at %p: %s", op, va, strerror(-err));
        return err;
    }
    for (size_t i = first; i < first + n; i++) {
        r->g[i].access = true;
        r->g[i].cpu = r->g[i].cpu || host_only; /* others keep theirs */
        /* Per handle, also when one call covers many (DESIGN.md's table):
         * each chunk once, at its first granule in the range. The CPU is
         * named only by set_access_host (on sim it gets access anyway, as
         * the stand-in for every device). */
        if (i == first || r->g[i].idx == 0)
            drv_account(c, r->g[i].chunk,
                        host_only ? DRV_SET_ACCESS_CPU : DRV_SET_ACCESS,
                        call);
    }
    return 0;
}

int sim_set_access(void *ctx, void *va, size_t size,
                          const int *devices, int ndevices)
{
    struct sim_ctx *c = ctx;
    struct sim_call k;
    int err;

    err = sim_check_caller("set_access");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_SET_ACCESS);
    if (!err)
        err = access_grant(c, "set_access", va, size, devices, ndevices,
                           false, &k);
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

int sim_set_access_host(void *ctx, void *va, size_t size,
                               const int *devices, int ndevices)
{
    struct sim_ctx *c = ctx;
    struct sim_call k;
    int err;

    err = sim_check_caller("set_access_host");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = access_grant(c, "set_access_host", va, size, devices, ndevices,
                       true, &k);
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

int sim_unmap(void *ctx, void *va, size_t size)
{
    struct sim_ctx *c = ctx;
    struct sim_resv *r;
    struct sim_call k;
    size_t first, end, i;
    int err;

    err = sim_check_caller("unmap");
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_UNMAP);
    if (err)
        goto out;
    err = range_check(c, "unmap", va, size, &r, &first);
    if (err)
        goto out;
    end = first + size / SIM_GRAN;
    /* Whole mappings only, as cuMemUnmap requires. */
    for (i = first; i < end; i += r->g[i].chunk->size / SIM_GRAN) {
        if (!r->g[i].chunk || r->g[i].idx != 0) {
            ump_log_error("sim: unmap: %p is not the start of a mapping",
                          (void *)(r->va + i * SIM_GRAN));
            err = -EINVAL;
            goto out;
        }
    }
    if (i != end) {
        ump_log_error("sim: unmap: [%p, +%zu) ends inside a mapping", va,
                      size);
        err = -EINVAL;
        goto out;
    }
    err = sim_resv_fill(va, size);
    if (err) {
        ump_log_error("sim: unmap: mmap at %p: %s", va, strerror(-err));
        goto out;
    }
    for (i = first; i < end; i++) {
        struct sim_chunk *ch = r->g[i].chunk;

        /* A mapping's first granule stands for its handle; accounted
         * before the slot may be freed. */
        if (r->g[i].idx == 0) {
            drv_account(c, ch,
                        ch->host && !r->g[i].cpu ? DRV_UNMAP_NOCPU
                                                 : DRV_UNMAP, &k);
            if (--ch->maps == 0 && ch->released)
                sim_chunk_free(c, ch);
        }
        memset(&r->g[i], 0, sizeof(r->g[i]));
    }
    r->nmapped -= end - first;
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

char *sim_view_of(void *ctx, const void *p, size_t max, size_t *len_p)
{
    struct sim_ctx *c = ctx;
    uintptr_t a = (uintptr_t)p;
    char *view = NULL;

    pthread_mutex_lock(&c->lock);
    for (struct sim_resv *r = c->resv; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->va;
        if (a < b || a >= b + r->size)
            continue;
        size_t i = (a - b) / SIM_GRAN, in = (a - b) % SIM_GRAN;
        struct sim_granule *g = &r->g[i];
        /* An imported chunk has no window here: copies use p itself. */
        if (!g->chunk || !g->access || g->chunk->imported)
            break;
        size_t at = g->chunk->off + (size_t)g->idx * SIM_GRAN + in;
        size_t left = g->chunk->size - (size_t)g->idx * SIM_GRAN - in;
        view = chunk_mem(c, g->chunk)->win + at;
        *len_p = left < max ? left : max;
        break;
    }
    pthread_mutex_unlock(&c->lock);
    return view;
}

int sim_loc_of(struct sim_ctx *c, const void *p, size_t max, size_t *len_p)
{
    uintptr_t a = (uintptr_t)p;

    *len_p = max;
    for (struct sim_resv *r = c->resv; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->va;
        if (a < b || a >= b + r->size)
            continue;
        size_t i = (a - b) / SIM_GRAN, in = (a - b) % SIM_GRAN;
        const struct sim_granule *g = &r->g[i];
        /* Copies are checked before they run: not reached for them. */
        if (!g->chunk)
            return SIM_LOC_PLAIN;
        size_t left = g->chunk->size - (size_t)g->idx * SIM_GRAN - in;
        *len_p = left < max ? left : max;
        return g->chunk->host ? SIM_LOC_HOST : g->chunk->device;
    }
    return SIM_LOC_PLAIN;
}

int sim_check_range(void *ctx, const void *p, size_t size)
{
    struct sim_ctx *c = ctx;
    uintptr_t a = (uintptr_t)p, e = a + size;
    int err = 0;

    if (!size)
        return 0;
    if (e < a) {
        ump_log_error("sim: range [%p, +%zu) wraps around", p, size);
        return -EINVAL;
    }
    pthread_mutex_lock(&c->lock);
    for (struct sim_resv *r = c->resv; r && !err; r = r->next) {
        uintptr_t b = (uintptr_t)r->va, re = b + r->size;
        size_t lo, hi;

        if (e <= b || a >= re)
            continue;
        lo = ((a > b ? a : b) - b) / SIM_GRAN;
        hi = ((e < re ? e : re) - 1 - b) / SIM_GRAN;
        for (size_t i = lo; i <= hi; i++) {
            if (!r->g[i].chunk || !r->g[i].access) {
                ump_log_error("sim: %p is reserved but not %s",
                              (void *)(r->va + i * SIM_GRAN),
                              r->g[i].chunk ? "accessible" : "mapped");
                err = -EINVAL;
                break;
            }
        }
    }
    pthread_mutex_unlock(&c->lock);
    return err;
}
