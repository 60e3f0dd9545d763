/*
 * The maker's side of IPC handles: ump_ipc_get_handle, and the exports it
 * records. An export is a run (a device allocation that never moves) or a
 * slab object, and the number that its handles carry. A run is marked
 * exported (r->exported), an object's state becomes OBJ_EXPORTED, so that
 * its free takes the full path (front/free.c) and reaches ipc_run_freed or
 * ipc_obj_freed here: an allocation other processes have open is kept,
 * mapped, its addresses out of reuse, until the last of them closes it
 * (server.c counts the opens per connection); one open nowhere is freed at
 * once and its handles then open nowhere. On sim that is what keeps an
 * opener's bytes the maker's: a released extent of the device's memfd is
 * reused. An object's openers map its slab's whole granule (its chunk), as
 * cudaIpcOpenMemHandle maps the whole allocation a pointer lies in; an
 * object kept for them keeps its slab from being released.
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

static size_t first_granule(const struct ipc_export *e)
{
    return e->run ? e->run->start : e->slab->granule;
}

void ipc_export_range(const struct ipc_export *e, size_t *g_p, size_t *n_p)
{
    *g_p = first_granule(e);
    *n_p = e->run ? e->run->n : 1; /* a slab is one granule */
}

struct ipc_export *ipc_export_find(struct ipc_state *st, size_t g,
                                   const void *addr, uint64_t gen)
{
    for (struct ipc_export *e = *bucket(st, g); e; e = e->next)
        if (e->gen == gen && e->addr == addr && first_granule(e) == g)
            return e;
    return NULL;
}

/* The live export of r, or of object idx of s (r NULL), or NULL. */
static struct ipc_export *export_of(struct ipc_state *st, struct run *r,
                                    struct slab *s, uint32_t idx)
{
    size_t g = r ? r->start : s->granule;
    for (struct ipc_export *e = *bucket(st, g); e; e = e->next)
        if (r ? e->run == r : e->slab == s && e->idx == idx)
            return e;
    return NULL;
}

/* The export is forgotten: a run's mark goes; an object still live (the
 * pool goes) is plain live again. */
static void unlink_export(ump_pool_t *pool, struct ipc_export *e)
{
    struct ipc_state *st = pool->ipc;
    struct ipc_export **pp = bucket(st, first_granule(e));
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    if (e->run) {
        atomic_store_explicit(&e->run->exported, false, memory_order_relaxed);
    } else {
        _Atomic uint32_t *word = &e->slab->word[e->idx];
        uint32_t w = atomic_load_explicit(word, memory_order_relaxed);
        if (obj_state(w) == OBJ_EXPORTED)
            atomic_compare_exchange_strong(word, &w,
                                           obj_word(OBJ_LIVE, obj_req(w)));
    }
    pool->exports--;
    ipc_export_free(e);
}

void ipc_export_free(struct ipc_export *e)
{
    free(e->closed);
    free(e);
}

bool ipc_export_closed(const struct ipc_export *e, uint64_t conn,
                       uint64_t ticket)
{
    for (uint32_t i = 0; i < e->nclosed; i++)
        if (e->closed[i].ticket == ticket && e->closed[i].conn == conn)
            return true;
    return false;
}

int ipc_export_note_closed(struct ipc_export *e, uint64_t conn,
                           uint64_t ticket)
{
    if (e->nclosed == e->capclosed) {
        uint32_t c = e->capclosed ? 2 * e->capclosed : 4;
        struct ipc_closed *p =
            c > e->capclosed ? realloc(e->closed, c * sizeof(*p)) : NULL;
        if (!p)
            return -ENOMEM;
        e->closed = p;
        e->capclosed = c;
    }
    e->closed[e->nclosed++] = (struct ipc_closed){conn, ticket};
    return 0;
}

void ipc_exports_forget_conn(struct ipc_state *st, uint64_t conn)
{
    for (int b = 0; b < IPC_BUCKETS; b++)
        for (struct ipc_export *e = st->buckets[b]; e; e = e->next)
            for (uint32_t i = 0; i < e->nclosed;)
                if (e->closed[i].conn == conn)
                    e->closed[i] = e->closed[--e->nclosed];
                else
                    i++;
}

/* e's maker freed it: true when it is kept for its openers. */
static bool freed(ump_pool_t *pool, struct ipc_export *e)
{
    if (e->opens) {
        e->freed = true;
        return true;
    }
    unlink_export(pool, e);
    return false;
}

bool ipc_run_freed(ump_pool_t *pool, struct run *r)
{
    struct ipc_export *e = export_of(pool->ipc, r, NULL, 0);
    if (e)
        return freed(pool, e);
    atomic_store_explicit(&r->exported, false, memory_order_relaxed);
    return false;
}

bool ipc_obj_freed(ump_pool_t *pool, struct slab *s, uint32_t idx)
{
    struct ipc_export *e = export_of(pool->ipc, NULL, s, idx);
    return e && freed(pool, e);
}

/* A freed export's allocation back to the pool, the export gone. */
static void give_back(ump_pool_t *pool, struct ipc_export *e)
{
    struct run *r = e->run;
    struct slab *s = e->slab;
    uint32_t idx = e->idx;
    unlink_export(pool, e);
    if (r)
        pool_run_free(pool, r);
    else
        pool_obj_free(pool, s, idx);
}

void ipc_export_unopen(ump_pool_t *pool, struct ipc_export *e)
{
    if (--e->opens || !e->freed)
        return;
    give_back(pool, e);
}

void ipc_exports_drop(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    for (int b = 0; b < IPC_BUCKETS; b++)
        while (st->buckets[b]) {
            struct ipc_export *e = st->buckets[b];
            if (e->freed)
                give_back(pool, e);
            else
                unlink_export(pool, e);
        }
}

/* What ump_ipc_get_handle exports: a run, or object idx of slab s. */
struct target {
    struct run *run;
    struct slab *slab;
    uint32_t idx;
};

/* A slab object that ptr starts, if it may be exported; else the error,
 * logged. Pool lock held. */
static int object_exportable(ump_pool_t *pool, const void *ptr,
                             struct slab *s, struct target *t)
{
    static const char fn[] = "ump_ipc_get_handle";
    /* A slab struct outlives its chunk: a stale tag names one whose
     * granule moved on. */
    if (s->granule != vas_index(&pool->vas, ptr))
        return pool_bad_pointer(ptr, fn, "not allocated");
    uint32_t off = (uint32_t)((const char *)ptr - s->base);
    uint32_t idx = slab_index(s, off);
    if (idx >= s->nobj ||
        !obj_live(atomic_load_explicit(&s->word[idx], memory_order_acquire)))
        return pool_bad_pointer(ptr, fn, "not allocated");
    if (idx * s->size != off)
        return pool_bad_pointer(ptr, fn,
                                "inside an allocation, not its start");
    if (place_is_host(pool, s->device))
        return pool_bad_pointer(ptr, fn,
                                "pinned host memory (ump_host_alloc): only "
                                "device memory is exported");
    if (s->away || chunks_range_failed(pool, s->granule, 1)) {
        ump_log_error("%s: %p is on a failed device", fn, ptr);
        return -EIO;
    }
    *t = (struct target){.slab = s, .idx = idx};
    return 0;
}

/* The allocation that ptr starts, if it may be exported; else the error,
 * logged. Pool lock held. */
static int exportable(ump_pool_t *pool, const void *ptr, struct target *t)
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
    if (vas_tag_kind(tag) == VAS_SLAB)
        return object_exportable(pool, ptr, vas_tag_owner(tag), t);
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
    *t = (struct target){.run = r};
    return 0;
}

/* t's size as requested. Pool lock held. */
static size_t target_size(const struct target *t)
{
    return t->run ? atomic_load_explicit(&t->run->size, memory_order_relaxed)
                  : obj_req(atomic_load(&t->slab->word[t->idx]));
}

/* Marks t exported (a run's flag; an object's state, which a racing free
 * may have taken first: then not allocated). Pool lock held. */
static int mark(const void *ptr, const struct target *t)
{
    if (t->run) {
        atomic_store_explicit(&t->run->exported, true, memory_order_relaxed);
        return 0;
    }
    _Atomic uint32_t *word = &t->slab->word[t->idx];
    uint32_t w = atomic_load_explicit(word, memory_order_acquire);
    while (obj_state(w) == OBJ_LIVE &&
           !atomic_compare_exchange_weak_explicit(
               word, &w, obj_word(OBJ_EXPORTED, obj_req(w)),
               memory_order_acq_rel, memory_order_acquire))
        ;
    if (!obj_live(w))
        return pool_bad_pointer(ptr, "ump_ipc_get_handle", "not allocated");
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
    struct target t = {0};
    rc = exportable(pool, ptr, &t);
    struct ipc_export *e = rc ? NULL : export_of(st, t.run, t.slab, t.idx);
    if (!rc && !e)
        rc = mark(ptr, &t);
    if (rc) {
        pthread_mutex_unlock(&pool->lock);
        free(fresh);
        return rc;
    }
    if (!e) {
        e = fresh;
        fresh = NULL;
        *e = (struct ipc_export){.gen = ++st->next_gen, .addr = (void *)ptr,
                                 .run = t.run, .slab = t.slab, .idx = t.idx};
        e->next = *bucket(st, first_granule(e));
        *bucket(st, first_granule(e)) = e;
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
        .size = target_size(&t),
    };
    pthread_mutex_unlock(&pool->lock);
    free(fresh);
    ipc_handle_pack(&f, handle_p);
    return 0;
}
