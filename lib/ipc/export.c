/*
 * The maker's side of IPC handles: ump_ipc_get_handle, and the exports it
 * records. An export is a run (a device allocation that never moves) and
 * the number that its handles carry. The run is marked exported, so that
 * its free takes the full path (front/free.c) and reaches ipc_run_freed
 * here: a run other processes have open is kept, mapped, its addresses
 * out of reuse, until the last of them closes it (server.c counts the
 * opens per connection); one open nowhere is freed at once and its
 * handles then open nowhere. On sim that is what keeps an opener's bytes
 * the maker's: a released extent of the device's memfd is reused.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "front/check.h"
#include "front/front.h"
#include "ipc/ipc.h"
#include "ipc/wire.h"
#include "mem/chunks.h"
#include "mem/slab.h"
#include "util/log.h"

static struct ipc_export **bucket(struct ipc_state *st, size_t g)
{
    return &st->buckets[g % IPC_BUCKETS];
}

struct ipc_export *ipc_export_find(struct ipc_state *st, size_t g,
                                   uint64_t gen)
{
    for (struct ipc_export *e = *bucket(st, g); e; e = e->next)
        if (e->run->start == g && e->gen == gen)
            return e;
    return NULL;
}

/* The live export of r, or NULL. */
static struct ipc_export *export_of(struct ipc_state *st, struct run *r)
{
    for (struct ipc_export *e = *bucket(st, r->start); e; e = e->next)
        if (e->run == r)
            return e;
    return NULL;
}

static void unlink_export(ump_pool_t *pool, struct ipc_export *e)
{
    struct ipc_state *st = pool->ipc;
    struct ipc_export **pp = bucket(st, e->run->start);
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    atomic_store_explicit(&e->run->exported, false, memory_order_relaxed);
    pool->exports--;
    free(e);
}

bool ipc_run_freed(ump_pool_t *pool, struct run *r)
{
    struct ipc_export *e = export_of(pool->ipc, r);
    if (e && e->opens) {
        e->freed = true;
        return true;
    }
    if (e)
        unlink_export(pool, e);
    else
        atomic_store_explicit(&r->exported, false, memory_order_relaxed);
    return false;
}

void ipc_export_unopen(ump_pool_t *pool, struct ipc_export *e)
{
    if (--e->opens || !e->freed)
        return;
    struct run *r = e->run;
    unlink_export(pool, e);
    pool_run_free(pool, r);
}

void ipc_exports_drop(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    for (int b = 0; b < IPC_BUCKETS; b++)
        while (st->buckets[b]) {
            struct ipc_export *e = st->buckets[b];
            struct run *r = e->run;
            bool freed = e->freed;
            unlink_export(pool, e);
            if (freed)
                pool_run_free(pool, r);
        }
}

/* The run that ptr starts, if it may be exported; else the error, logged.
 * Pool lock held. */
static int exportable(ump_pool_t *pool, const void *ptr, struct run **r_p)
{
    static const char fn[] = "ump_ipc_get_handle";
    if (!vas_contains(&pool->vas, ptr))
        return pool_bad_pointer(ptr, fn, "not a pointer of this pool");
    /* A suspend moves every run down, dropping the lock as it copies: one
     * exported meanwhile would move under its openers. */
    if (atomic_load(&pool->suspended) || pool->suspending) {
        ump_log_error("%s: the pool is suspended", fn);
        return -EBUSY;
    }
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, ptr));
    if (vas_tag_kind(tag) == VAS_SLAB) {
        struct slab *s = vas_tag_owner(tag);
        size_t idx = (size_t)((const char *)ptr - s->base) / s->size;
        if (idx >= s->nobj ||
            obj_state(atomic_load(&s->word[idx])) != OBJ_LIVE)
            return pool_bad_pointer(ptr, fn, "not allocated");
        ump_log_error("%s: %p is a small allocation (up to %zu bytes: a "
                      "slab object), which cannot be exported yet; "
                      "allocate at least %zu bytes", fn, ptr,
                      pool->small_max, pool->small_max + 1);
        return -ENOTSUP;
    }
    if (vas_tag_kind(tag) != VAS_RUN)
        return pool_bad_pointer(ptr, fn, "not allocated");
    struct run *r = vas_tag_owner(tag);
    if (ptr != vas_addr(&pool->vas, r->start))
        return pool_bad_pointer(ptr, fn,
                                "inside an allocation, not its start");
    if (obj_state(atomic_load(&r->word)) != OBJ_LIVE)
        return pool_bad_pointer(ptr, fn, "not allocated (freed?)");
    if (place_is_host(pool, r->device))
        return pool_bad_pointer(ptr, fn,
                                "pinned host memory (ump_host_alloc, or "
                                "a device allocation overflowed to the "
                                "host): only device memory is exported");
    if (atomic_load_explicit(&r->flags, memory_order_relaxed) &
        UMP_HINT_OFFLOAD)
        return pool_bad_pointer(ptr, fn,
                                "made with UMP_HINT_OFFLOAD: it may move "
                                "between tiers, under another process's "
                                "mapping");
    if (r->res) { /* a plain run that ump_evict or a suspend moved once */
        ump_log_error("%s: %p has been moved between tiers (ump_evict, "
                      "ump_pool_suspend), and the tiers still track it: "
                      "it cannot be exported", fn, ptr);
        return -EBUSY;
    }
    if (chunks_range_failed(pool, r->start, r->n)) {
        ump_log_error("%s: %p is on a failed device", fn, ptr);
        return -EIO;
    }
    *r_p = r;
    return 0;
}

UMP_EXPORT int ump_ipc_get_handle(ump_pool_t *pool, const void *ptr,
                                  ump_ipc_handle_t *handle_p)
{
    int rc = pool_check(pool, "ump_ipc_get_handle");
    if (rc)
        return rc;
    if (!handle_p) {
        ump_log_error("ump_ipc_get_handle: handle_p is NULL");
        return -EINVAL;
    }
    struct ipc_state *st = ipc_state_get(pool);
    if (!st)
        return -ENOMEM;
    /* First, so that a pool that cannot serve exports nothing (a pointer
     * then refused leaves a server with nothing to serve: harmless). */
    rc = ipc_server_start(pool);
    if (rc)
        return rc;
    struct ipc_export *fresh = malloc(sizeof(*fresh));
    if (!fresh) {
        ump_log_error("ump_ipc_get_handle: out of memory");
        return -ENOMEM;
    }
    pthread_mutex_lock(&pool->lock);
    struct run *r = NULL;
    rc = exportable(pool, ptr, &r);
    if (rc || !r) {
        pthread_mutex_unlock(&pool->lock);
        free(fresh);
        return rc ? rc : -EINVAL;
    }
    struct ipc_export *e = export_of(st, r);
    if (!e) {
        e = fresh;
        fresh = NULL;
        *e = (struct ipc_export){.gen = ++st->next_gen, .run = r};
        e->next = *bucket(st, r->start);
        *bucket(st, r->start) = e;
        atomic_store_explicit(&r->exported, true, memory_order_relaxed);
        pool->exports++;
    }
    struct ipc_handle_fields f = {
        .backend = pool->be == &sim_backend_ops ? IPC_BACKEND_SIM
                                                : IPC_BACKEND_CUDA,
        .pid = st->pid,
        .key = st->key,
        .gen = e->gen,
        .ticket = ++st->next_ticket,
        .addr = (uint64_t)(uintptr_t)ptr,
        .size = atomic_load_explicit(&r->size, memory_order_relaxed),
    };
    pthread_mutex_unlock(&pool->lock);
    free(fresh);
    ipc_handle_pack(&f, handle_p);
    return 0;
}
