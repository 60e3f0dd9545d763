/*
 * ump_alloc, ump_free, ump_free_async and ump_ptr_info. Cached sizes are
 * served from the calling thread's cache (tcache.h) with no lock shared
 * between threads; everything else takes pool->lock.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "mem/chunks.h"
#include "tier/offload.h"
#include "place/policy.h"
#include "mem/slab.h"
#include "front/tcache.h"
#include "front/check.h"
#include "front/failure.h"
#include "front/front.h"
#include "mem/pending.h"
#include "front/stream.h"

static int bad_arg(const char *fn, const char *what)
{
    ump_log_error("%s: %s", fn, what);
    return -EINVAL;
}

/* Turns the hints into a placement request with the pool's default
 * policy, or "local"; a policy named otherwise is left in *spec_p, to be
 * looked up under the lock. */
static int read_hints(ump_pool_t *pool, const struct tcache *tc,
                      const ump_hints_t *h, size_t size, struct place_req *pr,
                      const char **spec_p)
{
    pr->req = (ump_place_request_t){.size = size,
                                    .chunk_size = pool->chunk_size,
                                    .device = tc->device,
                                    .access = UMP_ACCESS_PRIVATE};
    pr->policy = pool->place.dflt;
    *spec_p = NULL;
    if (!h)
        return 0;
    if (h->flags & ~(UMP_HINT_NO_SPILL | UMP_HINT_OFFLOAD)) {
        ump_log_error("ump_alloc: unknown hint flags 0x%x", h->flags);
        return -EINVAL;
    }
    if (h->access < UMP_ACCESS_PRIVATE || h->access > UMP_ACCESS_STREAMING) {
        ump_log_error("ump_alloc: unknown access pattern %d", h->access);
        return -EINVAL;
    }
    if (h->device != UMP_DEVICE_CURRENT) {
        if (h->device < 0 || h->device >= pool->ndev) {
            ump_log_error("ump_alloc: device %d out of range (0..%d)",
                          h->device, pool->ndev - 1);
            return -EINVAL;
        }
        pr->req.device = h->device;
    }
    pr->req.flags = h->flags;
    pr->req.group = h->group;
    pr->req.access = h->access;
    if (h->policy) {
        if (!strcmp(h->policy, "local"))
            pr->policy = pool->place.local;
        else
            *spec_p = h->policy;
    }
    return 0;
}

/* Looks up a policy named by hints. Pool lock held. */
static int hinted_policy(ump_pool_t *pool, const char *spec,
                         struct place_req *pr)
{
    if (!spec)
        return 0;
    pr->policy = policy_lookup(&pool->place, spec);
    if (pr->policy)
        return 0;
    /* First use: the policy's init reads the view. */
    size_t avail[UMP_MAX_DEVICES];
    chunks_available_all(pool, avail);
    return policy_get(&pool->place, spec, avail, &pr->policy);
}

static void oom(ump_pool_t *pool, size_t size, int dev)
{
    ump_log_info("out of memory: %zu bytes for device %d (%d devices full)",
                 size, dev, pool->ndev);
}

/* --- counting ----------------------------------------------------------- */

/* What a count records: an allocation, a free, or a free taken back (a
 * deferred free that could not be queued: the allocation stays live and
 * was never freed, so the free count goes down, the allocation count
 * does not go up). */
enum { COUNT_ALLOC = 1, COUNT_FREE = -1, COUNT_UNFREE = 2 };

/* +1 or -1: the direction of the live bytes. */
static int live_sign(int what) { return what == COUNT_FREE ? -1 : 1; }

/* The counter `what` moves, and by how much (mod 2^64). */
static void count_event(_Atomic uint64_t *allocs, _Atomic uint64_t *frees,
                        int what)
{
    if (what == COUNT_ALLOC)
        ctr_add_u(allocs, 1);
    else
        ctr_add_u(frees, what == COUNT_FREE ? 1 : UINT64_MAX);
}

/* Counts one allocation, free or taken-back free (`what`, COUNT_*) of bin
 * b on device d in the owner's counters: the bin's own when it exists.
 * Between tc_enter/exit. */
static void count_bin(struct tcache *tc, int d, unsigned b, size_t bytes,
                      int what)
{
    struct tc_bin *bin = tcache_bin(tc, d, b);
    if (ump_likely(bin != NULL)) {
        count_event(&bin->allocs, &bin->frees, what);
        return;
    }
    struct counters *c = &tc->cnt[d];
    ctr_add_i(&c->live_bytes, live_sign(what) * (int64_t)bytes);
    count_event(&c->allocs, &c->frees, what);
}

static size_t run_bin(const ump_pool_t *pool, size_t n)
{
    return pool->nsmall + n - 1;
}

static bool run_cacheable(const struct run *r)
{
    return !r->mixed && r->n <= RUN_TCACHE_MAX;
}

/* Counts a run (what: COUNT_*). Runs a thread may cache count in their
 * bin; the others per device of their chunks (a live run's chunks do not
 * change, so no lock is needed to read them). */
static void count_run(ump_pool_t *pool, struct tcache *tc, struct run *r,
                      int what)
{
    size_t bytes = r->n << pool->chunk_shift;
    int sign = live_sign(what);
    tc_enter(tc);
    if (run_cacheable(r)) {
        count_bin(tc, r->device, (unsigned)run_bin(pool, r->n), bytes, what);
    } else if (!r->mixed) {
        ctr_add_i(&tc->cnt[r->device].live_bytes, sign * (int64_t)bytes);
    } else {
        for (size_t g = r->start; g < r->start + r->n; g++)
            ctr_add_i(&tc->cnt[r->res ? offload_home(r, g - r->start)
                                      : chunks_device(pool, g)].live_bytes,
                      sign * (int64_t)pool->chunk_size);
    }
    if (!run_cacheable(r))
        count_event(&tc->cnt[r->device].allocs, &tc->cnt[r->device].frees,
                    what);
    tc_exit(tc);
}

/* --- small sizes: slab objects ------------------------------------------ */

static void give_object(const struct obj_ref *it, size_t size, void **ptr_p)
{
    struct slab *s = it->meta;
    atomic_store_explicit(&s->word[it->idx], obj_word(OBJ_LIVE, size),
                          memory_order_release);
    *ptr_p = it->ptr;
}

static int alloc_small_slow(ump_pool_t *pool, struct tcache *tc,
                            const ump_place_request_t *req, unsigned cls,
                            void **ptr_p)
{
    int dev = req->device;
    size_t size = req->size;
    struct obj_ref items[64];
    tc_enter(tc);
    struct tc_bin *bin = tcache_bin(tc, dev, cls);
    /* Fill the bin: a fresh slab hands out consecutive objects, so a whole
     * bin's object words share cache lines with no other thread's. */
    unsigned batch = bin && bin->cap > 1 ? bin->cap : 1;
    tc_exit(tc);

    unsigned n;
    int got;
    pthread_mutex_lock(&pool->lock);
    pool_poll_pending(pool, false);
    int rc = slab_take(pool, dev, cls, req->flags, batch, items, &n, &got);
    if (rc == -ENOMEM) { /* what other threads park may be enough */
        pool_flush_tcaches(pool);
        rc = slab_take(pool, dev, cls, req->flags, batch, items, &n, &got);
    }
    /* Free slabs of other classes: their chunks make this one's. */
    if (rc == -ENOMEM && pool_release_free_slabs(pool, dev))
        rc = slab_take(pool, dev, cls, req->flags, batch, items, &n, &got);
    pthread_mutex_unlock(&pool->lock);
    /* Moving offloadable memory down makes room: only when it would fail,
     * and a few rounds at most (each frees a chunk's worth or more). A new
     * slab is one chunk placed by "local" (slab.c). */
    struct place_req slab_pr = {
        .req = {.chunks = 1, .chunk_size = pool->chunk_size, .device = dev,
                .flags = req->flags},
        .policy = pool->place.local};
    for (int round = 0; rc == -ENOMEM && round < OFFLOAD_ROUNDS &&
                        !offload_make_room(pool, &slab_pr);
         round++) {
        pthread_mutex_lock(&pool->lock);
        rc = slab_take(pool, dev, cls, req->flags, batch, items, &n, &got);
        pthread_mutex_unlock(&pool->lock);
    }
    if (rc)
        return rc;
    unsigned i = 1;
    tc_enter(tc);
    /* got may have failed since: its objects are not cached. */
    struct tc_bin *b = pool_dev_failed(pool, got) ? NULL
                                                  : tcache_bin(tc, got, cls);
    for (; b && i < n && b->count < b->cap; i++)
        b->items[b->count++] = items[i];
    if (i > 1)
        tc_add_bytes(&tc->obj_bytes[got], (int64_t)((i - 1) * sc_size(cls)));
    count_bin(tc, got, cls, sc_size(cls), COUNT_ALLOC);
    tc_exit(tc);
    if (i < n) {
        pthread_mutex_lock(&pool->lock);
        for (; i < n; i++)
            slab_put(pool, items[i].meta, items[i].idx);
        pthread_mutex_unlock(&pool->lock);
    }
    give_object(&items[0], size, ptr_p);
    return 0;
}

/* An object of class cls on device dev from the thread's bin, if the bin
 * exists and holds one and no other thread wants the cache (else false,
 * nothing changed): the cached path. */
static inline __attribute__((always_inline)) bool
alloc_cached(struct tcache *tc, int dev, unsigned cls,
                                size_t size, void **ptr_p)
{
    if (ump_unlikely(!tc_try_enter(tc)))
        return false;
    struct tc_bin *b = atomic_load_explicit(&tc->bins[dev],
                                            memory_order_relaxed);
    if (ump_likely(b && b[cls].count)) {
        struct tc_bin *bin = &b[cls];
        struct obj_ref it = bin->items[--bin->count];
        ctr_add_u(&bin->allocs, 1);
        tc_add_bytes(&tc->obj_bytes[dev], -(int64_t)sc_size(cls));
        tc_exit(tc);
        give_object(&it, size, ptr_p);
        return true;
    }
    tc_exit(tc);
    return false;
}

static int alloc_small(ump_pool_t *pool, struct tcache *tc,
                       const ump_place_request_t *req, unsigned cls,
                       void **ptr_p)
{
    if (alloc_cached(tc, req->device, cls, req->size, ptr_p))
        return 0;
    return alloc_small_slow(pool, tc, req, cls, ptr_p);
}

/* --- big sizes: runs of chunks ------------------------------------------ */

static void give_run(ump_pool_t *pool, struct run *r, size_t size,
                     void **ptr_p)
{
    atomic_store_explicit(&r->size, size, memory_order_relaxed);
    atomic_store_explicit(&r->born,
                          atomic_load_explicit(&pool->clock,
                                               memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&r->word, obj_word(OBJ_LIVE, 0),
                          memory_order_release);
    *ptr_p = vas_addr(&pool->vas, r->start);
}


static int alloc_run(ump_pool_t *pool, struct tcache *tc,
                     const struct place_req *pr, void **ptr_p)
{
    int dev = pr->req.device;
    size_t n = pr->req.chunks, size = pr->req.size;
    /* The thread's cached runs are on the requesting device: taken only
     * for a policy that would choose that device anyway. */
    bool offload = pr->req.flags & UMP_HINT_OFFLOAD;
    /* Offloadable runs are tracked from the start: never thread-cached. */
    if (n <= RUN_TCACHE_MAX && !offload &&
        policy_prefers_requester(&pool->place, pr->policy)) {
        tc_enter(tc);
        struct tc_bin *bin = tcache_bin(tc, dev, (unsigned)run_bin(pool, n));
        if (bin && bin->count) {
            struct obj_ref it = bin->items[--bin->count];
            ctr_add_u(&bin->allocs, 1);
            tc_add_bytes(&tc->run_bytes[dev],
                         -(int64_t)(n << pool->chunk_shift));
            tc_exit(tc);
            /* Statistics read it under the lock (stats.c): relaxed. */
            atomic_store_explicit(&((struct run *)it.meta)->flags,
                                  (unsigned char)pr->req.flags,
                                  memory_order_relaxed);
            give_run(pool, it.meta, size, ptr_p);
            return 0;
        }
        tc_exit(tc);
    }
    struct run *r;
    int rc, round = 0;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        rc = pool_run_alloc(pool, pr, &r);
        if (!rc && offload && (rc = offload_track(pool, r)))
            pool_run_free(pool, r);
        /* Moved memory keeps its addresses: no eviction makes more. */
        bool addresses = rc == -ENOMEM && vas_largest_free(&pool->vas) >= n;
        pthread_mutex_unlock(&pool->lock);
        /* Moving offloadable memory down makes room: only when it would
         * otherwise fail, and a few rounds at most (each makes n chunks of
         * room, or moves all there is). */
        if (!addresses || ++round > OFFLOAD_ROUNDS ||
            offload_make_room(pool, pr))
            break;
    }
    if (rc)
        return rc;
    count_run(pool, tc, r, COUNT_ALLOC);
    give_run(pool, r, size, ptr_p);
    return 0;
}

/* Slabs or a run, at the place pr says. */
static int alloc_at(ump_pool_t *pool, struct tcache *tc, struct place_req *pr,
                    void **ptr_p)
{
    size_t size = pr->req.size;
    /* Slabs, near the requesting device; what may move is made of whole
     * chunks, since a chunk is what moves. */
    if (size <= pool->small_max && !(pr->req.flags & UMP_HINT_OFFLOAD))
        return alloc_small(pool, tc, &pr->req, sc_index(size), ptr_p);
    if (size > pool->vas.size - pool->chunk_size)
        return -ENOMEM;
    pr->req.chunks = (size + pool->chunk_size - 1) >> pool->chunk_shift;
    return alloc_run(pool, tc, pr, ptr_p);
}

/* An allocation at the place pr says; with overflow:host, one that fits on
 * no device goes to the overflow place (mem/pool.h). Offloadable memory
 * does not: it is what moves down to make room, and it was tried first. */
static int alloc_placed(ump_pool_t *pool, struct tcache *tc,
                        struct place_req *pr, void **ptr_p)
{
    int rc = alloc_at(pool, tc, pr, ptr_p);
    if (rc == -ENOMEM && pool->cfg.overflow == UMP_OVERFLOW_HOST &&
        !place_is_host(pool, pr->req.device) &&
        !(pr->req.flags & UMP_HINT_OFFLOAD)) {
        int dev = pr->req.device;
        pr->req.device = place_overflow(pool);
        pr->policy = pool->place.local;
        rc = alloc_at(pool, tc, pr, ptr_p);
        /* Said once per process: a program that overflows does so often. */
        static atomic_bool said;
        if (!rc && !atomic_exchange_explicit(&said, true, memory_order_relaxed))
            ump_log_info("overflow: device %d is full; allocations that fit "
                         "on no device now go to pinned host memory", dev);
        pr->req.device = dev;
    }
    if (rc == -EBUSY)
        ump_log_error("ump_alloc: the pool was suspended meanwhile "
                      "(ump_pool_resume first)");
    if (rc == -ENOMEM) {
        if (place_is_host(pool, pr->req.device))
            ump_log_info("out of pinned host memory: %zu bytes (pinned_limit "
                         "%zu)", pr->req.size, pool->pinned_cap);
        else
            oom(pool, pr->req.size, pr->req.device);
    }
    return rc;
}

static size_t host_page_size(void)
{
    static _Atomic size_t page;
    size_t p = atomic_load_explicit(&page, memory_order_relaxed);
    if (!p) {
        long v = sysconf(_SC_PAGESIZE);
        p = v > 0 ? (size_t)v : 4096;
        atomic_store_explicit(&page, p, memory_order_relaxed);
    }
    return p;
}

/* The checks ump_alloc and ump_host_alloc start with; the thread's cache
 * in *tc_p. */
static int alloc_begin(ump_pool_t *pool, const char *fn, size_t size,
                       void **ptr_p, struct tcache **tc_p)
{
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (ump_unlikely(!ptr_p))
        return bad_arg(fn, "ptr_p is NULL");
    if (ump_unlikely(!size))
        return bad_arg(fn, "size 0");
    /* Device memory is given back while suspended (front/suspend.c);
     * pinned host memory stays and is served. */
    if (ump_unlikely(atomic_load_explicit(&pool->suspended,
                                          memory_order_relaxed)) &&
        strcmp(fn, "ump_host_alloc")) {
        ump_log_error("%s: the pool is suspended (ump_pool_resume first)", fn);
        return -EBUSY;
    }
    *tc_p = tcache_get(pool);
    return ump_likely(*tc_p != NULL) ? 0 : -ENOMEM;
}

/* The device a small allocation with hints h goes to, when the hints ask
 * nothing the cached path does not do: flags at most UMP_HINT_NO_SPILL
 * (it matters only where a new slab is made), a valid access pattern, a
 * device of the pool or the current one, no policy or "local" (small
 * sizes come from slabs near the device whatever the policy: a policy
 * named otherwise must still be looked up, and may not exist). Else -1:
 * the full path (the interposer's hints are these, device and "local"). */
static inline int simple_hints(const ump_pool_t *pool, const struct tcache *tc,
                               const ump_hints_t *h)
{
    /* "local", compared in line: a call to strcmp costs the pair a tenth
     * (the bytes are read only up to the first that differs) */
    const char *pn = h->policy;
    if ((h->flags & ~UMP_HINT_NO_SPILL) || h->access < UMP_ACCESS_PRIVATE ||
        h->access > UMP_ACCESS_STREAMING ||
        (pn && !(pn[0] == 'l' && pn[1] == 'o' && pn[2] == 'c' &&
                 pn[3] == 'a' && pn[4] == 'l' && !pn[5])))
        return -1;
    if (h->device == UMP_DEVICE_CURRENT)
        return tc->device;
    return h->device >= 0 && h->device < pool->ndev ? h->device : -1;
}

/* The cached path of a run (chunk-sized allocations, up to RUN_TCACHE_MAX
 * chunks): what alloc_run's thread-cache step does, for a call whose
 * placement is the requesting device dev under policy pol with flags (no
 * UMP_HINT_OFFLOAD), without building a placement request. False, having
 * changed nothing, when the thread's bin has no run of that many chunks. */
static inline __attribute__((always_inline)) bool
run_cached(ump_pool_t *pool, struct tcache *tc, int dev,
                              const struct policy_inst *pol, unsigned flags,
                              size_t size, void **ptr_p)
{
    /* A size past the reservation is the full path's -ENOMEM (and its
     * chunk count would wrap to a slab class's bin). */
    if (size > pool->vas.size - pool->chunk_size)
        return false;
    size_t n = (size + pool->chunk_size - 1) >> pool->chunk_shift;
    if (n > RUN_TCACHE_MAX || !policy_prefers_requester(&pool->place, pol) ||
        !tc_try_enter(tc))
        return false;
    struct tc_bin *b = atomic_load_explicit(&tc->bins[dev],
                                            memory_order_relaxed);
    struct tc_bin *bin = b ? &b[run_bin(pool, n)] : NULL;
    if (ump_unlikely(!bin || !bin->count)) {
        tc_exit(tc);
        return false;
    }
    struct obj_ref it = bin->items[--bin->count];
    ctr_add_u(&bin->allocs, 1);
    tc_add_bytes(&tc->run_bytes[dev], -(int64_t)(n << pool->chunk_shift));
    tc_exit(tc);
    atomic_store_explicit(&((struct run *)it.meta)->flags,
                          (unsigned char)flags, memory_order_relaxed);
    give_run(pool, it.meta, size, ptr_p);
    return true;
}

/* ump_alloc the full way: every check, hints, policies, the slow paths.
 * Out of line, so that the cached path (ump_alloc) saves no registers. */
static __attribute__((noinline)) int alloc_full(ump_pool_t *pool,
                                                size_t size,
                                                const ump_hints_t *hints,
                                                void **ptr_p)
{
    /* The cached path of simple hints (the interposer's): here, so that
     * ump_alloc's own, without hints, stays free of the policy's strcmp. */
    if (hints && pool && ptr_p && size - 1 < pool->small_max &&
        pool_quiet(pool)) {
        struct tcache *tc = tcache_hit(pool);
        int dev = tc ? simple_hints(pool, tc, hints) : -1;
        if (dev >= 0 && alloc_cached(tc, dev, sc_index(size), size, ptr_p))
            return 0;
    } else if (pool && ptr_p && size > pool->small_max && pool_quiet(pool)) {
        /* A run the thread has cached, under no hints or simple ones. */
        struct tcache *tc = tcache_hit(pool);
        int dev = !tc ? -1 : hints ? simple_hints(pool, tc, hints)
                                   : tc->device;
        if (dev >= 0 &&
            run_cached(pool, tc, dev,
                       hints && hints->policy ? pool->place.local
                                              : pool->place.dflt,
                       hints ? hints->flags : 0, size, ptr_p))
            return 0;
    }
    struct tcache *tc;
    int rc = alloc_begin(pool, "ump_alloc", size, ptr_p, &tc);
    if (rc)
        return rc;
    struct place_req pr;
    const char *spec;
    rc = read_hints(pool, tc, hints, size, &pr, &spec);
    if (rc)
        return rc;
    if (ump_unlikely(spec)) { /* a policy by name: check it exists */
        pthread_mutex_lock(&pool->lock);
        rc = hinted_policy(pool, spec, &pr);
        pthread_mutex_unlock(&pool->lock);
        if (rc)
            return rc;
    }
    rc = alloc_placed(pool, tc, &pr, ptr_p);
    /* A device failed under this allocation (its chunk, or its access
     * list): once the pool knows, the allocation goes elsewhere. */
    if (ump_unlikely(rc == -EIO) &&
        atomic_load(&pool->failing) != atomic_load(&pool->failed)) {
        pool_handle_failures(pool);
        rc = alloc_placed(pool, tc, &pr, ptr_p);
    }
    return rc;
}

UMP_EXPORT int ump_alloc(ump_pool_t *pool, size_t size, const ump_hints_t *hints,
                         void **ptr_p)
{
    /* The cached path: no hints, a size served from slabs, a pool in no
     * rare state (check.h: pool_quiet), an object in the thread's bin of
     * its current device. It is what alloc_full does for such a call,
     * without building a placement request; anything else, errors
     * included, goes the full way, which checks and logs as before. */
    if (ump_likely(!hints && pool && ptr_p && size - 1 < pool->small_max &&
                   pool_quiet(pool))) {
        struct tcache *tc = tcache_hit(pool);
        if (ump_likely(tc != NULL) &&
            alloc_cached(tc, tc->device, sc_index(size), size, ptr_p))
            return 0;
    }
    return alloc_full(pool, size, hints, ptr_p);
}

/* ump_host_alloc the full way (out of line, as alloc_full). */
static __attribute__((noinline)) int host_alloc_full(ump_pool_t *pool,
                                                     size_t size,
                                                     void **ptr_p)
{
    struct tcache *tc;
    int rc = alloc_begin(pool, "ump_host_alloc", size, ptr_p, &tc);
    if (rc)
        return rc;
    /* Whole pages, so page-aligned: the size class of a multiple of the
     * page is a multiple of the page too (sizeclass.h: below 4 pages each
     * multiple is a class, above the classes step by a quarter of a power
     * of two), and runs are chunk-aligned. Programs
     * count on it (O_DIRECT buffers, cuMemHostRegister of sub-ranges), as
     * cuMemHostAlloc gives it. */
    size_t page = host_page_size();
    if (size > SIZE_MAX - page)
        return -ENOMEM;
    size = (size + page - 1) & ~(page - 1);
    /* A run the thread has cached (ump_alloc's, alloc_full). */
    if (size > pool->small_max && pool_no_failure(pool) &&
        run_cached(pool, tc, place_host(pool), pool->place.local, 0, size,
                   ptr_p))
        return 0;
    struct place_req pr = {
        .req = {.size = size, .chunk_size = pool->chunk_size,
                .device = place_host(pool), .access = UMP_ACCESS_PRIVATE},
        .policy = pool->place.local};
    return alloc_placed(pool, tc, &pr, ptr_p);
}

UMP_EXPORT int ump_host_alloc(ump_pool_t *pool, size_t size, void **ptr_p)
{
    /* The cached path, as ump_alloc's: whole pages of a slab class, from
     * the thread's bin of the host place (served while suspended too). */
    if (ump_likely(pool && ptr_p && size - 1 < pool->small_max &&
                   pool_no_failure(pool))) {
        size_t page = host_page_size();
        size_t whole = (size + page - 1) & ~(page - 1);
        struct tcache *tc = tcache_hit(pool);
        if (ump_likely(tc != NULL && whole <= pool->small_max) &&
            alloc_cached(tc, place_host(pool), sc_index(whole), whole, ptr_p))
            return 0;
    }
    return host_alloc_full(pool, size, ptr_p);
}

/* --- frees ------------------------------------------------------------- */

struct claim {
    struct slab *slab; /* a slab object ... */
    uint32_t idx;
    struct run *run;   /* ... or a run */
    _Atomic uint32_t *word;
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
    if (obj_state(w) == OBJ_LIVE &&
        check_place(pool, c->slab ? c->slab->device : c->run->device, ptr, fn,
                    host))
        return -EINVAL;
    if (obj_state(w) != OBJ_LIVE ||
        !atomic_compare_exchange_strong_explicit(
            word, &w, obj_word(to, obj_req(w)), memory_order_acq_rel,
            memory_order_acquire))
        return pool_bad_pointer(ptr, fn, "not allocated (freed twice?)");
    return 0;
}

static void free_small(ump_pool_t *pool, struct tcache *tc, struct slab *s,
                       uint32_t idx, void *ptr)
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
     * cache's section, so a flush cannot miss it). */
    if (ump_unlikely(pool_dev_failed(pool, s->device))) {
        back[k++] = (struct obj_ref){ptr, s, idx};
    } else if (ump_likely(bin && bin->count < bin->cap)) {
        bin->items[bin->count++] = (struct obj_ref){ptr, s, idx};
        tc_add_bytes(&tc->obj_bytes[s->device], s->size);
        tc_exit(tc);
        return;
    } else if (bin && bin->cap) { /* full: half goes back to the slabs */
        k = bin->count / 2;
        bin->count -= k;
        memcpy(back, bin->items + bin->count, k * sizeof(*back));
        bin->items[bin->count++] = (struct obj_ref){ptr, s, idx};
        tc_add_bytes(&tc->obj_bytes[s->device],
                     (1 - (int64_t)k) * (int64_t)s->size);
    } else {
        back[k++] = (struct obj_ref){ptr, s, idx};
    }
    tc_exit(tc);
    pthread_mutex_lock(&pool->lock);
    for (unsigned i = 0; i < k; i++)
        slab_put(pool, back[i].meta, back[i].idx);
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
        if (bin && bin->count < bin->cap && !r->res &&
            !pool_any_failed(pool)) {
            bin->items[bin->count++] = (struct obj_ref){
                vas_addr(&pool->vas, r->start), r, 0};
            tc_add_bytes(&tc->run_bytes[r->device],
                         (int64_t)(r->n << pool->chunk_shift));
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
        free_small(pool, tc, c.slab, c.idx, ptr);
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
     * (res), a mixed or long one, or a full bin take free_run's way. */
    size_t n = r->n;
    struct tc_bin *b = atomic_load_explicit(&tc->bins[d],
                                            memory_order_relaxed);
    struct tc_bin *bin = b && n <= RUN_TCACHE_MAX ? &b[run_bin(pool, n)]
                                                  : NULL;
    if (ump_unlikely(!bin || bin->count >= bin->cap || r->res || r->mixed)) {
        tc_exit(tc);
        free_run_changed(pool, tc, r);
        return true;
    }
    ctr_add_u(&bin->frees, 1);
    bin->items[bin->count++] = (struct obj_ref){ptr, r, 0};
    tc_add_bytes(&tc->run_bytes[d], (int64_t)(n << pool->chunk_shift));
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
    if (ump_unlikely(!bin || bin->count >= bin->cap ||
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
    bin->items[bin->count++] = (struct obj_ref){ptr, s, idx};
    tc_add_bytes(&tc->obj_bytes[d], s->size);
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
        slab_put(pool, p->meta, p->idx);
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

void alloc_adopt_run(ump_pool_t *pool, struct tcache *tc, struct run *r,
                     size_t size)
{
    void *p;
    give_run(pool, r, size, &p);
    count_run(pool, tc, r, COUNT_ALLOC);
}

void alloc_adopt_object(struct tcache *tc, struct slab *s)
{
    tc_enter(tc);
    count_bin(tc, s->device, s->cls, s->size, COUNT_ALLOC);
    tc_exit(tc);
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
        set_state(c.word, OBJ_LIVE);
        return rc;
    }
    if (done)
        pending_done(pool, done);
    pthread_mutex_unlock(&pool->lock);
    return 0;
}
