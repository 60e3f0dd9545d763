/*
 * Pool lifetime, runs, devices and trim. The allocation hot paths are in
 * alloc.c and free.c, the thread caches in tcache.c.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "mem/chunks.h"
#include "tier/offload.h"
#include "place/policy.h"
#include "front/front.h"
#include "front/lifecycle.h"
#include "mem/pending.h"
#include "mem/runs.h"
#include "front/registry.h"
#include "front/check.h"
#include "front/stats.h"
#include "mem/slab.h"
#include "front/tcache.h"

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;
static _Atomic uint64_t next_pool_id = 1;

/* Lazy, thread-safe process setup: no constructor does work (the library
 * may be preloaded into programs that never create a pool). */
static void global_init(void)
{
    global_rc = tcache_global_init();
    if (!global_rc)
        global_rc = fork_global_init();
}

void pool_flush_tcaches(ump_pool_t *pool)
{
    for (struct tcache *tc = pool->tcaches; tc; tc = tc->next)
        tcache_flush(tc);
    runs_unpark_all(pool);
}

/* Does any thread cache or the device's parked list hold freed runs? */
static bool runs_kept(ump_pool_t *pool, int device)
{
    bool kept = pool->dev[device].parked != 0;
    for (struct tcache *tc = pool->tcaches; tc && !kept; tc = tc->next)
        kept = tcache_holds(tc, device, pool->nsmall, pool->nbins);
    return kept;
}

/* Does any thread cache hold slab objects of device? Such a slab is not
 * wholly free while they sit there, and so not released by slab_put nor
 * by slab_trim_place. */
static bool objects_kept(ump_pool_t *pool, int device)
{
    for (struct tcache *tc = pool->tcaches; tc; tc = tc->next)
        if (tcache_holds(tc, device, 0, pool->nsmall))
            return true;
    return false;
}

void pool_reclaim_device(ump_pool_t *pool, int device)
{
    pool_poll_pending(pool, false); /* frees whose streams are done */
    if (runs_kept(pool, device) || objects_kept(pool, device))
        pool_flush_tcaches(pool);
}

int pool_run_alloc(ump_pool_t *pool, const struct place_req *pr,
                   struct run **run_p)
{
    /* Suspended: an allocation that raced past alloc_begin's check. */
    if (atomic_load(&pool->suspended) &&
        !place_is_host(pool, pr->req.device))
        return -EBUSY;
    pool_poll_pending(pool, false);
    pool_clock_tick(pool); /* ages of runs the thread caches hand out */
    int rc;
    /* Reuse before growing: freed runs kept whole for their size (thread
     * caches, parked) are memory too. A first try takes only what is free
     * as it is (no driver call: chunks_get answers -EAGAIN before moving
     * or making anything); failing that, they become cached blocks and the
     * request tries again. A flush is cheap next to a driver call, and it
     * happens only where the pool would otherwise go to the driver. */
    if (runs_kept(pool, pr->req.device)) {
        pool->no_grow = true;
        rc = runs_alloc(pool, pr, run_p);
        pool->no_grow = false;
        if (rc != -EAGAIN && rc != -ENOMEM)
            return rc;
        pool_flush_tcaches(pool);
        rc = runs_alloc(pool, pr, run_p);
    } else {
        rc = runs_alloc(pool, pr, run_p);
        if (rc == -ENOMEM) { /* what threads park may make it fit */
            pool_flush_tcaches(pool);
            rc = runs_alloc(pool, pr, run_p);
        }
    }
    if (rc == -ENOMEM && pool_release_free_slabs(pool, pr->req.device))
        rc = runs_alloc(pool, pr, run_p);
    return rc;
}

bool pool_release_free_slabs(ump_pool_t *pool, int place)
{
    size_t n = 0;
    bool host = place_is_host(pool, place);
    for (int d = host ? pool->ndev : 0; d < (host ? pool->nplace : pool->ndev);
         d++)
        n += slab_trim_place(pool, d);
    return n != 0;
}

void pool_run_free(ump_pool_t *pool, struct run *r)
{
    if (ump_unlikely(atomic_load_explicit(&r->exported,
                                          memory_order_relaxed)) &&
        pool->ipc_ops->run_freed(pool, r))
        return;
    if (r->res) /* it may have moved: not reusable as it is */
        offload_run_free(pool, r);
    else
        runs_free(pool, r);
}

void pool_obj_free(ump_pool_t *pool, struct slab *s, uint32_t idx)
{
    if (ump_unlikely(pool->exports) && pool->ipc_ops->obj_freed(pool, s, idx))
        return;
    slab_put(pool, s, idx);
}

void pool_trim_locked(ump_pool_t *pool)
{
    pool_poll_pending(pool, false);
    pool_flush_tcaches(pool);
    slab_trim(pool);
    chunks_trim(pool);
    offload_trim_locked(pool);
    /* A driver that ran out before the pool's count (another process used
     * the device) lowered a capacity; trimming is the moment to try again. */
    for (int d = 0; d < pool->ndev; d++) /* a failed device offers none */
        pool->dev[d].capacity =
            pool_dev_failed(pool, d) ? 0 : pool->dev[d].capacity_max;
}

/* --- create and destroy ------------------------------------------------ */

static int open_backend(ump_pool_t *pool)
{
    const struct ump_config *cfg = &pool->cfg;
    if (cfg->backend != UMP_BACKEND_SIM) {
        pool->be = &cuda_backend_ops;
        int rc = pool->be->open(cfg, &pool->topo, &pool->bctx);
        if (!rc || cfg->backend == UMP_BACKEND_CUDA)
            return rc;
        ump_log_info("backend auto: no usable GPU (%s), using the sim "
                     "backend", cuda_unavailable_reason());
    }
    pool->be = &sim_backend_ops;
    return pool->be->open(cfg, &pool->topo, &pool->bctx);
}

/* Reserves the pool's addresses: va bytes anywhere, or exactly at `at`. */
static int reserve(ump_pool_t *pool, void *at, size_t va)
{
    if (!at)
        return pool->be->reserve(pool->bctx, va, pool->chunk_size, &pool->va);
    if (!pool->be->reserve_at) {
        ump_log_error("the %s backend cannot reserve a given address range",
                      pool->be->name);
        return -ENOTSUP;
    }
    int rc = pool->be->reserve_at(pool->bctx, at, va, pool->chunk_size);
    if (rc == 0)
        pool->va = at;
    return rc;
}

/* at, at_size: the address range to reserve exactly (a restore), or NULL. */
static int pool_setup(ump_pool_t *pool, void *at, size_t at_size)
{
    pool->ndev = pool->topo.ndev;
    pool->nplace = pool->ndev + PLACE_EXTRA;
    size_t chunk = pool->cfg.chunk_size;
    for (int d = 0; d < pool->ndev; d++) {
        size_t gran = pool->be->granularity(pool->bctx, d);
        if (chunk % gran) {
            ump_log_error("config: chunk_size %zu is not a multiple of device "
                          "%d's granularity %zu", chunk, d, gran);
            return -EINVAL;
        }
    }
    pool->chunk_size = chunk;
    pool->chunk_shift = (unsigned)__builtin_ctzll(chunk);
    if (pool->cfg.max_chunk < chunk) {
        ump_log_error("config: max_chunk %zu is smaller than chunk_size %zu",
                      pool->cfg.max_chunk, chunk);
        return -EINVAL;
    }
    pool->max_chunk_n = pool->cfg.max_chunk / chunk;
    /* Below chunk_size it means one granule; above max_chunk, max_chunk. */
    size_t warm = pool->cfg.warm_chunk < pool->cfg.max_chunk
                      ? pool->cfg.warm_chunk
                      : pool->cfg.max_chunk;
    pool->warm_chunk_n = warm > chunk ? warm / chunk : 1;
    pool->nsmall = sc_count_for_chunk(chunk);
    pool->small_max = pool->nsmall ? sc_size(pool->nsmall - 1) : 0;
    pool->nbins = pool->nsmall + RUN_TCACHE_MAX;

    size_t total = 0;
    pool->dev = calloc((size_t)pool->nplace, sizeof(*pool->dev));
    pool->folded = calloc((size_t)pool->nplace, sizeof(*pool->folded));
    pool->free_slabs = calloc(pool->nsmall, sizeof(*pool->free_slabs));
    if (!pool->dev || !pool->folded || !pool->free_slabs)
        return -ENOMEM;
    pool->pinned_cap = conf_pinned_limit(&pool->cfg) & ~(chunk - 1);
    for (int d = 0; d < pool->nplace; d++) {
        struct dev_state *ds = &pool->dev[d];
        if (place_is_host(pool, d)) { /* their budget is shared: chunks.c */
            ds->capacity = ds->capacity_max = pool->pinned_cap;
        } else {
            size_t mem = pool->topo.dev[d].mem;
            if (pool->cfg.device_mem && pool->cfg.device_mem < mem)
                mem = pool->cfg.device_mem;
            /* The addresses are sized for the devices, not for this
             * process's limit: a shared pool's processes lease them all. */
            total += mem & ~(chunk - 1);
            if (pool->cfg.process_limit && pool->cfg.process_limit < mem)
                mem = pool->cfg.process_limit;
            ds->capacity = ds->capacity_max = mem & ~(chunk - 1);
        }
        ds->partial = calloc(pool->nsmall, sizeof(*ds->partial));
        ds->full = calloc(pool->nsmall, sizeof(*ds->full));
        ds->empty = calloc(pool->nsmall, sizeof(*ds->empty));
        if (!ds->partial || !ds->full || !ds->empty)
            return -ENOMEM;
    }
    /* Twice the memory, so that cached blocks fragmenting the addresses
     * never make a fitting allocation fail; memory moved to the host tier
     * or NVMe keeps its addresses, so the tiers count too (NVMe without a
     * limit as four times the devices), and so do the host places. */
    size_t tiers = offload_host_limit(pool) + pool->pinned_cap;
    if (pool->cfg.nvme_dir[0])
        tiers += pool->cfg.nvme_limit ? pool->cfg.nvme_limit : 4 * total;
    size_t va = pool->cfg.va_size ? pool->cfg.va_size : 2 * (total + tiers);
    va = UMP_ALIGN_UP(va < 2 * chunk ? 2 * chunk : va, chunk);
    if (at)
        va = at_size;
    size_t cap[UMP_MAX_DEVICES], avail[UMP_MAX_DEVICES];
    for (int d = 0; d < pool->ndev; d++)
        cap[d] = pool->dev[d].capacity;
    chunks_available_all(pool, avail);
    int rc = policy_set_init(&pool->place, &pool->topo, cap, pool->ndev,
                             pool->cfg.policy, avail);
    if (rc)
        return rc;
    rc = reserve(pool, at, va);
    if (rc)
        return rc;
    rc = vas_init(&pool->vas, pool->va, va, chunk);
    if (rc) {
        pool->be->unreserve(pool->bctx, pool->va, va);
        pool->va = NULL;
    }
    return rc;
}

/* Frees what pool_setup and later use allocated; the backend has been
 * closed or its memory given back already. */
static void pool_free_meta(ump_pool_t *pool)
{
    while (pool->tcaches) {
        struct tcache *tc = pool->tcaches;
        pool->tcaches = tc->next;
        for (int d = 0; d < pool->nplace; d++)
            free(atomic_load(&tc->bins[d]));
        free(tc);
    }
    slab_free_all(pool);
    if (pool->dev) {
        for (int d = 0; d < pool->nplace; d++) {
            struct dev_state *ds = &pool->dev[d];
            struct ump_list_node *n;
            while ((n = ump_list_pop_front(&ds->blocks)))
                free(ump_container_of(n, struct block, link));
            free(ds->spare_block);
            while (ds->idle) {
                struct chunk *c = ds->idle;
                ds->idle = c->next;
                free(c);
            }
            while (ds->runs) { /* parked (only left after fork) */
                struct run *r = ds->runs;
                ds->runs = r->next;
                free(r);
            }
            free(ds->partial);
            free(ds->full);
            free(ds->empty);
        }
    }
    while (pool->free_runs) {
        struct run *r = pool->free_runs;
        pool->free_runs = r->next;
        free(r);
    }
    pending_forget(pool);
    policy_set_fini(&pool->place);
    vas_fini(&pool->vas);
    free(pool->dev);
    free(pool->folded);
    free(pool->streams); /* the backend closes the streams it made */
    free(pool->stream_info);
    pthread_mutex_destroy(&pool->streams_lock);
    pthread_mutex_destroy(&pool->ckpt_lock);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

int pool_create_at(const struct ump_config *cfg, void *at, size_t at_size,
                   const struct pool_observer *obs, ump_pool_t **pool_p)
{
    pthread_once(&global_once, global_init);
    if (global_rc) {
        ump_log_error("cannot set up the process: %s", ump_strerror(global_rc));
        return global_rc;
    }
    ump_pool_t *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return -ENOMEM;
    pool->cfg = *cfg;
    int rc;
    log_set_level(pool->cfg.log_level);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_mutex_init(&pool->streams_lock, NULL);
    pthread_mutex_init(&pool->ckpt_lock, NULL);
    pool->id = atomic_fetch_add(&next_pool_id, 1);
    pool->fork_gen = atomic_load(&fork_generation);
    pool_clock_init(pool);
    rc = open_backend(pool);
    if (rc) {
        pthread_mutex_destroy(&pool->streams_lock);
        pthread_mutex_destroy(&pool->ckpt_lock);
        pthread_mutex_destroy(&pool->lock);
        free(pool);
        return rc;
    }
    rc = pool_setup(pool, at, at_size);
    if (rc)
        goto fail;
    /* A device failure sets a bit here; the next public call handles it
     * (front/failure.c). */
    if (pool->be->watch_failures)
        pool->be->watch_failures(pool->bctx, &pool->failing);
    rc = offload_init(pool);
    if (rc)
        goto fail;
    /* Before live data moves to make room, what threads keep cached goes
     * back (the tier cannot name the thread caches). */
    offload_set_reclaim(pool, pool_reclaim_device);
    rc = registry_add(pool);
    if (rc)
        goto fail;
    pool->observer = obs;
    if (obs && obs->start)
        obs->start(pool); /* it logs why not; the pool works without */
    ump_log_debug("pool %llu: %d devices (%s), chunk %zu, %zu bytes of "
                  "addresses", (unsigned long long)pool->id, pool->ndev,
                  pool->topo.name, pool->chunk_size, pool->vas.size);
    *pool_p = pool;
    return 0;
fail:
    offload_stop(pool);
    offload_fini(pool);
    if (pool->va)
        pool->be->unreserve(pool->bctx, pool->va, pool->vas.size);
    pool->be->close(pool->bctx);
    pool_free_meta(pool);
    return rc;
}

static uint64_t live_count_locked(ump_pool_t *pool)
{
    int64_t live = 0;
    for (int d = 0; d < pool->nplace; d++)
        live += (int64_t)(atomic_load(&pool->folded[d].allocs) -
                          atomic_load(&pool->folded[d].frees));
    for (struct tcache *tc = pool->tcaches; tc; tc = tc->next)
        for (int d = 0; d < pool->nplace; d++) {
            int64_t bytes = 0;
            uint64_t a = 0, f = 0;
            tcache_sum(tc, d, &bytes, &a, &f);
            live += (int64_t)(a - f);
        }
    return live > 0 ? (uint64_t)live : 0;
}

/* In a child after fork(): the pool's memory belongs to the parent (on sim
 * it is even shared with it), so the child only drops its own copy. */
static int destroy_in_child(ump_pool_t *pool)
{
    registry_remove(pool);
    if (pool->observer && pool->observer->stop) /* the child's copy only */
        pool->observer->stop(pool);
    if (pool->ipc_ops)
        pool->ipc_ops->stop_in_child(pool);
    offload_fini_in_child(pool);
    pool->be->close_in_child(pool->bctx);
    for (size_t g = 0; g < pool->vas.ngran;) { /* chunks still mapped */
        struct chunk *c = pool->vas.gran[g].chunk;
        size_t n = c ? c->n : 1;
        free(c);
        g += n;
    }
    pool_free_meta(pool);
    return 0;
}

int pool_destroy(ump_pool_t *pool)
{
    if (!pool)
        return pool_refused(-EINVAL, "ump_pool_destroy");
    if (pool->fork_gen != atomic_load(&fork_generation))
        return destroy_in_child(pool);
    /* A communicator would outlive it: its calls would read a freed pool
     * (streams left are the pool's to close; a communicator is not). */
    int comms = atomic_load(&pool->comms);
    if (comms) {
        ump_log_error("ump_pool_destroy: %d communicators are still live "
                      "(ump_comm_destroy)", comms);
        return -EBUSY;
    }
    pthread_mutex_lock(&pool->lock);
    if (atomic_load(&pool->suspended)) {
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("ump_pool_destroy: the pool is suspended "
                      "(ump_pool_resume first)");
        return -EBUSY;
    }
    uint64_t live = live_count_locked(pool);
    if (live) {
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("ump_pool_destroy: %llu allocations are still live",
                      (unsigned long long)live);
        return -EBUSY;
    }
    pthread_mutex_unlock(&pool->lock);
    /* From here on no thread may use the pool (as with free()). Leaving the
     * registry first means exiting threads no longer touch it. */
    if (pool->observer && pool->observer->stop)
        pool->observer->stop(pool); /* its thread reads the pool */
    if (pool->ipc_ops) /* its thread too; it frees what it kept */
        pool->ipc_ops->stop(pool);
    registry_remove(pool);
    offload_stop(pool); /* no move may run while the pool goes */
    pthread_mutex_lock(&pool->lock);
    pool_poll_pending(pool, true);
    while (pool->tcaches)
        tcache_destroy(pool->tcaches);
    pool_trim_locked(pool);
    offload_suspend_forget(pool); /* resumed: the list is empty */
    offload_fini(pool);
    for (int d = 0; d < pool->nplace; d++)
        if (pool->dev[d].mapped || pool->dev[d].created)
            ump_log_warn("device %d: %zu bytes still mapped at destroy", d,
                         pool->dev[d].mapped);
    pending_fini(pool);
    pthread_mutex_unlock(&pool->lock);
    if (pool->ipc_ops)
        pool->ipc_ops->fini(pool);
    int rc = pool->be->unreserve(pool->bctx, pool->va, pool->vas.size);
    if (rc)
        ump_log_warn("cannot release the address reservation: %s",
                     ump_strerror(rc));
    pool->be->close(pool->bctx);
    pool_free_meta(pool);
    return 0;
}

/* --- devices and trim ---------------------------------------------------- */

UMP_EXPORT int ump_device_count(ump_pool_t *pool)
{
    int rc = pool_check(pool, "ump_device_count");
    return rc ? rc : pool->ndev;
}

UMP_EXPORT int ump_set_device(ump_pool_t *pool, int device)
{
    int rc = pool_check(pool, "ump_set_device");
    if (rc)
        return rc;
    if (device < 0 || device >= pool->ndev) {
        ump_log_error("ump_set_device: device %d out of range (0..%d)", device,
                      pool->ndev - 1);
        return -EINVAL;
    }
    struct tcache *tc = tcache_get(pool);
    if (!tc)
        return -ENOMEM;
    tc->device = device;
    return 0;
}

UMP_EXPORT int ump_get_device(ump_pool_t *pool, int *device_p)
{
    int rc = pool_check(pool, "ump_get_device");
    if (rc)
        return rc;
    if (!device_p) {
        ump_log_error("ump_get_device: device_p is NULL");
        return -EINVAL;
    }
    struct tcache *tc = tcache_get(pool);
    if (!tc)
        return -ENOMEM;
    *device_p = tc->device;
    return 0;
}

UMP_EXPORT int ump_trim(ump_pool_t *pool)
{
    int rc = pool_check(pool, "ump_trim");
    if (rc)
        return rc;
    pthread_mutex_lock(&pool->lock);
    pool_trim_locked(pool);
    pthread_mutex_unlock(&pool->lock);
    return 0;
}
