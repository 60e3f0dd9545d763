/*
 * ump_free, ump_host_free and ump_free_async: a pointer claimed (its
 * object's state moved from live, atomically, so that a second free, even
 * racing, is refused), counted, and given back to the calling thread's
 * cache where it fits (the cached paths: no lock shared between threads),
 * else to its slab or to the pool's runs under pool->lock; a deferred free
 * waits on its stream's event (mem/pending.h). alloc.c hands the memory
 * out.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "front/check.h"
#include "front/count.h"
#include "front/failure.h"
#include "front/front.h"
#include "front/stream.h"
#include "front/tcache.h"
#include "mem/chunks.h"
#include "mem/pending.h"
#include "mem/slab.h"
#include "tier/offload.h"

struct claim {
    struct slab *slab; /* a slab object ... */
    uint32_t idx;
    struct run *run;   /* ... or a run */
    _Atomic uint32_t *word;
    bool exported;     /* the object was OBJ_EXPORTED (lib/ipc) */
};

/* Moves a claimed object's state on, keeping its requested size. Only the
 * claimer does this, so a load and a store suffice. */
static void set_state(_Atomic uint32_t *word, unsigned state)
{
    uint32_t w = atomic_load_explicit(word, memory_order_relaxed);
    atomic_store_explicit(word, obj_word(state, obj_req(w)),
                          memory_order_release);
}

/* Is place d the one fn frees from? ump_host_free takes ump_host_alloc's
 * memory only, the other frees everything else. */
static int check_place(ump_pool_t *pool, int d, void *ptr, const char *fn,
                       bool host)
{
    if ((d == place_host(pool)) == host)
        return 0;
    return pool_bad_pointer(ptr, fn,
                            host ? "not from ump_host_alloc"
                                 : "from ump_host_alloc (free it with "
                                   "ump_host_free)");
}

/* Checks that ptr is a live allocation of the pool (of ump_host_alloc if
 * host, else not) and moves its state from live to `to` atomically, so
 * that two frees of one pointer, even racing in two threads, cannot both
 * succeed. */
static int claim(ump_pool_t *pool, void *ptr, unsigned to, const char *fn,
                 bool host, struct claim *c)
{
    if (!vas_contains(&pool->vas, ptr))
        return pool_bad_pointer(ptr, fn, "not a pointer of this pool");
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, ptr));
    _Atomic uint32_t *word;
    switch (vas_tag_kind(tag)) {
    case VAS_SLAB: {
        struct slab *s = vas_tag_owner(tag);
        /* A slab struct outlives its chunk (slab.c keeps them): a stale
         * tag may name one that moved on; its granule says so. */
        if (s->granule != vas_index(&pool->vas, ptr))
            return pool_bad_pointer(ptr, fn,
                                    "not allocated (freed twice?)");
        uint32_t off = (uint32_t)((char *)ptr - s->base);
        uint32_t idx = slab_index(s, off);
        if (idx * s->size != off || idx >= s->nobj)
            return pool_bad_pointer(ptr, fn,
                                    "inside an allocation, not its start");
        word = &s->word[idx];
        *c = (struct claim){.slab = s, .idx = idx, .word = word};
        break;
    }
    case VAS_RUN: {
        struct run *r = vas_tag_owner(tag);
        if (ptr != vas_addr(&pool->vas, r->start))
            return pool_bad_pointer(ptr, fn,
                                    "inside an allocation, not its start");
        word = &r->word;
        *c = (struct claim){.run = r, .word = word};
        break;
    }
    default:
        return pool_bad_pointer(ptr, fn, "not allocated (freed twice?)");
    }
    uint32_t w = atomic_load_explicit(word, memory_order_acquire);
    if (obj_live(w) &&
        check_place(pool, c->slab ? c->slab->device : c->run->device, ptr, fn,
                    host))
        return -EINVAL;
    if (!obj_live(w) ||
        !atomic_compare_exchange_strong_explicit(
            word, &w, obj_word(to, obj_req(w)), memory_order_acq_rel,
            memory_order_acquire))
        return pool_bad_pointer(ptr, fn, "not allocated (freed twice?)");
    c->exported = obj_state(w) == OBJ_EXPORTED;
    return 0;
}

/* exported: the object was OBJ_EXPORTED, so no thread cache takes it:
 * pool_obj_free gives it to the IPC layer (front.h). */
static void free_small(ump_pool_t *pool, struct tcache *tc, struct slab *s,
                       uint32_t idx, void *ptr, bool exported)
{
    struct obj_ref back[64];
    unsigned k = 0;
    tc_enter(tc);
    struct tc_bin *bin = tcache_bin(tc, s->device, s->cls);
    if (ump_likely(bin != NULL))
        ctr_add_u(&bin->frees, 1);
    else
        count_bin(tc, s->device, s->cls, s->size, COUNT_FREE);
    /* A failed device's object goes straight back to its slab, which
     * hands out nothing more (front/failure.c: the bit is read inside the
     * cache's section, so a flush cannot miss it); an exported one to the
     * IPC layer, which may keep it for its openers. */
    if (ump_unlikely(exported || pool_dev_failed(pool, s->device))) {
        back[k++] = (struct obj_ref){ptr, s, idx};
    } else if (ump_likely(bin && bin_count(bin) < bin->cap)) {
        bin_push(bin, (struct obj_ref){ptr, s, idx});
        tc_exit(tc);
        return;
    } else if (bin && bin->cap) { /* full: half goes back to the slabs */
        uint32_t left = bin_count(bin) - bin_count(bin) / 2;
        k = bin_count(bin) / 2;
        memcpy(back, bin->items + left, k * sizeof(*back));
        bin_set_count(bin, left);
        bin_push(bin, (struct obj_ref){ptr, s, idx});
    } else {
        back[k++] = (struct obj_ref){ptr, s, idx};
    }
    tc_exit(tc);
    pthread_mutex_lock(&pool->lock);
    for (unsigned i = 0; i < k; i++)
        pool_obj_free(pool, back[i].meta, back[i].idx);
    pthread_mutex_unlock(&pool->lock);
}

static void free_run(ump_pool_t *pool, struct tcache *tc, struct run *r)
{
    if (!run_cacheable(r)) {
        count_run(pool, tc, r, COUNT_FREE);
    } else {
        tc_enter(tc);
        unsigned b = (unsigned)run_bin(pool, r->n);
        count_bin(tc, r->device, b, r->n << pool->chunk_shift, COUNT_FREE);
        struct tc_bin *bin = tcache_bin(tc, r->device, b);
        /* After a device failure runs are not cached by threads: one may
         * hold a failed chunk (runs_free gives those back). */
        /* Nor is an exported run: pool_run_free gives it to the IPC
         * layer, which keeps it while other processes have it open. */
        if (bin && bin_count(bin) < bin->cap && !r->res &&
            !pool_any_failed(pool) &&
            !atomic_load_explicit(&r->exported, memory_order_relaxed)) {
            bin_push(bin, (struct obj_ref){vas_addr(&pool->vas, r->start),
                                           r, 0});
            tc_exit(tc);
            return;
        }
        tc_exit(tc);
    }
    pthread_mutex_lock(&pool->lock);
    if (r->res)
        offload_wait_idle(pool, r);
    pool_run_free(pool, r);
    pthread_mutex_unlock(&pool->lock);
}

/* The start of ump_free and ump_free_async: 1 for a NULL ptr (nothing to
 * do), 0 once ptr is claimed (its state moved to `to`), else an error. */
static int free_begin(ump_pool_t *pool, void *ptr, unsigned to,
                      const char *fn, bool host, struct tcache **tc_p,
                      struct claim *c)
{
    int rc = pool_check(pool, fn);
    if (rc || !ptr)
        return rc ? rc : 1;
    *tc_p = tcache_get(pool);
    if (ump_unlikely(!*tc_p))
        return -ENOMEM;
    return claim(pool, ptr, to, fn, host, c);
}

/* ump_free and ump_host_free: the same free, of the places they own
 * (out of line: ump_free's cached path saves no registers for it). */
static __attribute__((noinline)) int free_now(ump_pool_t *pool, void *ptr, const char *fn, bool host)
{
    struct tcache *tc;
    struct claim c;
    int rc = free_begin(pool, ptr, OBJ_FREE, fn, host, &tc, &c);
    if (rc)
        return rc > 0 ? 0 : rc;
    if (c.slab)
        free_small(pool, tc, c.slab, c.idx, ptr, c.exported);
    else
        free_run(pool, tc, c.run);
    return 0;
}

/* free_run, out of line and cold for free_run_cached (below), which rarely
 * needs it and saves no registers for it. */
static __attribute__((noinline, cold)) void
free_run_changed(ump_pool_t *pool, struct tcache *tc, struct run *r)
{
    free_run(pool, tc, r);
}

/* ump_free's cached path for a run (free_cached, below): ptr r's start, of
 * the place the caller frees, claimed live to free inside the cache's
 * section (no device failed), then pushed onto the thread's bin if the run
 * is one a thread may cache (not mixed, not offloadable) and the bin has
 * room, else freed as free_run frees. False, having changed nothing, when
 * it is not claimed: free_now then says what is wrong. claim's checks and
 * free_run's cached step. Out of line: the slab objects' path saves no
 * registers for it. Its steps in the cache's section are like
 * free_cached's for a slab object; one inline helper for both cost the
 * 256 B pair 5 instructions (callgrind: 199 to 204), so the two are
 * written out. */
static __attribute__((noinline)) bool
free_run_cached(ump_pool_t *pool, struct run *r, void *ptr, bool host)
{
    int d = r->device;
    if (ptr != vas_addr(&pool->vas, r->start) ||
        (d == place_host(pool)) != host)
        return false;
    struct tcache *tc = tcache_hit(pool);
    if (ump_unlikely(!tc || !tc_try_enter(tc)))
        return false;
    uint32_t w = atomic_load_explicit(&r->word, memory_order_acquire);
    if (ump_unlikely(atomic_load_explicit(&pool->failed,
                                          memory_order_relaxed) ||
                     obj_state(w) != OBJ_LIVE ||
                     !atomic_compare_exchange_strong_explicit(
                         &r->word, &w, obj_word(OBJ_FREE, obj_req(w)),
                         memory_order_acq_rel, memory_order_acquire))) {
        tc_exit(tc);
        return false;
    }
    /* Claimed: the free happens here. What decides its way is read after
     * the claim, as the full path reads it: a run a suspend's move tracks
     * (res), a mixed or long one, an exported one, or a full bin take
     * free_run's way. */
    size_t n = r->n;
    struct tc_bin *b = atomic_load_explicit(&tc->bins[d],
                                            memory_order_relaxed);
    struct tc_bin *bin = b && n <= RUN_TCACHE_MAX ? &b[run_bin(pool, n)]
                                                  : NULL;
    if (ump_unlikely(!bin || bin_count(bin) >= bin->cap || r->res ||
                     r->mixed ||
                     atomic_load_explicit(&r->exported,
                                          memory_order_relaxed))) {
        tc_exit(tc);
        free_run_changed(pool, tc, r);
        return true;
    }
    ctr_add_u(&bin->frees, 1);
    bin_push(bin, (struct obj_ref){ptr, r, 0});
    tc_exit(tc);
    return true;
}

/* ump_free's cached path (ump_host_free's with host): ptr the start of a
 * live slab object of a device place (host: of the host place, which
 * ump_host_alloc serves), claimed (live to free, atomically:
 * a racing second free fails its claim), and pushed onto the thread's bin,
 * which exists and has room, its device not failed. False, having changed
 * nothing, for anything else: free_now then does it all, and says what is
 * wrong where something is. The claim comes last, inside the cache's
 * section (as free_small reads the failure bit there: below). */
static inline __attribute__((always_inline)) bool
free_cached(ump_pool_t *pool, void *ptr, bool host)
{
    const struct vas *v = &pool->vas;
    if (!vas_contains(v, ptr))
        return false;
    size_t g = vas_index(v, ptr);
    uintptr_t tag = vas_tag(v, g);
    if (ump_unlikely(vas_tag_kind(tag) != VAS_SLAB))
        return vas_tag_kind(tag) == VAS_RUN &&
               free_run_cached(pool, vas_tag_owner(tag), ptr, host);
    struct slab *s = vas_tag_owner(tag);
    uint32_t off = (uint32_t)((char *)ptr - s->base);
    uint32_t idx = slab_index(s, off);
    int d = s->device;
    if (s->granule != g || idx * s->size != off || idx >= s->nobj ||
        (d == place_host(pool)) != host)
        return false;
    struct tcache *tc = tcache_hit(pool);
    if (ump_unlikely(!tc || !tc_try_enter(tc)))
        return false;
    struct tc_bin *b = atomic_load_explicit(&tc->bins[d],
                                            memory_order_relaxed);
    struct tc_bin *bin = b ? &b[s->cls] : NULL;
    _Atomic uint32_t *word = &s->word[idx];
    uint32_t w = atomic_load_explicit(word, memory_order_acquire);
    /* A device that failed since pool_no_failure: its bit is read again
     * inside the section, as free_small reads it, so that a failure's
     * flush of the caches either waits for this free or is seen by it
     * (else a failed device's object could go into the bin after the
     * flush, and out again to the next allocation). Any bit: the full
     * path then does what it does per device. */
    if (ump_unlikely(!bin || bin_count(bin) >= bin->cap ||
                     atomic_load_explicit(&pool->failed,
                                          memory_order_relaxed) ||
                     obj_state(w) != OBJ_LIVE ||
                     !atomic_compare_exchange_strong_explicit(
                         word, &w, obj_word(OBJ_FREE, obj_req(w)),
                         memory_order_acq_rel, memory_order_acquire))) {
        tc_exit(tc);
        return false;
    }
    ctr_add_u(&bin->frees, 1);
    bin_push(bin, (struct obj_ref){ptr, s, idx});
    tc_exit(tc);
    return true;
}

UMP_EXPORT int ump_free(ump_pool_t *pool, void *ptr)
{
    if (ump_likely(pool && pool_no_failure(pool)) &&
        free_cached(pool, ptr, false))
        return 0;
    return free_now(pool, ptr, "ump_free", false);
}

UMP_EXPORT int ump_host_free(ump_pool_t *pool, void *ptr)
{
    if (ump_likely(pool && pool_no_failure(pool)) &&
        free_cached(pool, ptr, true))
        return 0;
    return free_now(pool, ptr, "ump_host_free", true);
}

/* A deferred free whose stream work is done: the memory goes back to the
 * pool (not to a thread cache: this may run in any thread). Lock held. */
static void pending_done(ump_pool_t *pool, struct pending *p)
{
    if (p->is_slab) {
        set_state(&((struct slab *)p->meta)->word[p->idx], OBJ_FREE);
        pool_obj_free(pool, p->meta, p->idx);
    } else {
        set_state(&((struct run *)p->meta)->word, OBJ_FREE);
        pool_run_free(pool, p->meta);
    }
    pending_recycle(pool, p);
}

void pool_poll_pending(ump_pool_t *pool, bool wait)
{
    struct pending *p = pending_collect(pool, wait), *next;
    for (; p; p = next) {
        next = p->next;
        pending_done(pool, p);
    }
}

/* Counts a claimed allocation (what: COUNT_FREE or COUNT_UNFREE). */
static void count_claimed(ump_pool_t *pool, struct tcache *tc,
                          const struct claim *c, int what)
{
    if (c->slab) {
        tc_enter(tc);
        count_bin(tc, c->slab->device, c->slab->cls, c->slab->size, what);
        tc_exit(tc);
    } else {
        count_run(pool, tc, c->run, what);
    }
}

UMP_EXPORT int ump_free_async(ump_pool_t *pool, void *ptr, ump_stream_t stream)
{
    struct tcache *tc;
    struct claim c;
    /* A stream of another pool, or a destroyed one, is refused before the
     * pointer is claimed: nothing to count or undo. */
    int rc = pool_check(pool, "ump_free_async");
    if (!rc)
        rc = pool_stream_check(pool, stream, "ump_free_async");
    if (rc)
        return rc;
    rc = free_begin(pool, ptr, OBJ_PENDING, "ump_free_async", false, &tc, &c);
    if (rc)
        return rc > 0 ? 0 : rc;
    /* Counted now, while the pending state pins the slab or run: once it is
     * queued, another thread may complete it and reuse the memory. */
    count_claimed(pool, tc, &c, COUNT_FREE);
    pthread_mutex_lock(&pool->lock);
    pool_poll_pending(pool, false);
    struct pending *done;
    rc = pending_queue(pool, c.slab ? (void *)c.slab : (void *)c.run, c.idx,
                       c.slab != NULL, stream, &done);
    if (rc) {
        pthread_mutex_unlock(&pool->lock);
        /* Undo the claim: the allocation stays live, nothing changed (the
         * backend logged why). */
        count_claimed(pool, tc, &c, COUNT_UNFREE);
        set_state(c.word, c.exported ? OBJ_EXPORTED : OBJ_LIVE);
        return rc;
    }
    if (done)
        pending_done(pool, done);
    pthread_mutex_unlock(&pool->lock);
    return 0;
}
