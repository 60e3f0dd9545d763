/*
 * ump_alloc and ump_host_alloc (free.c takes the memory back). Cached
 * sizes are served from the calling thread's cache (tcache.h) with no lock
 * shared between threads; everything else takes pool->lock.
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
#include "front/count.h"
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
    /* Refused by this process's limit, not by the devices: the one line
     * the user needs, at the default level. */
    size_t limit = pool->cfg.process_limit, held = 0, cap = 0;
    if (limit && dev >= 0 && dev < pool->ndev) {
        pthread_mutex_lock(&pool->lock);
        held = pool->dev[dev].created;
        cap = pool->dev[dev].capacity_max;
        pthread_mutex_unlock(&pool->lock);
    }
    if (limit && cap == (limit & ~(pool->chunk_size - 1)) &&
        size > cap - (held < cap ? held : cap))
        ump_log_warn("out of memory: %zu bytes for device %d: this process "
                     "holds %zu bytes of it, its process_limit is %zu",
                     size, dev, held, limit);
    else
        ump_log_info("out of memory: %zu bytes for device %d (%d devices "
                     "full)", size, dev, pool->ndev);
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
    for (; b && i < n && bin_count(b) < b->cap; i++)
        bin_push(b, items[i]);
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
    if (ump_likely(b && bin_count(&b[cls]))) {
        struct tc_bin *bin = &b[cls];
        struct obj_ref it = bin_pop(bin);
        ctr_add_u(&bin->allocs, 1);
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

/* Hands out the last run of bin (not empty; tc entered, and left here)
 * with flags and size: the cached run's way, from the full path and the
 * cached one alike. */
static inline __attribute__((always_inline)) void
take_run(ump_pool_t *pool, struct tcache *tc, struct tc_bin *bin,
         unsigned flags, size_t size, void **ptr_p)
{
    struct obj_ref it = bin_pop(bin);
    ctr_add_u(&bin->allocs, 1);
    tc_exit(tc);
    /* Statistics read it under the lock (stats.c): relaxed. */
    atomic_store_explicit(&((struct run *)it.meta)->flags,
                          (unsigned char)flags, memory_order_relaxed);
    give_run(pool, it.meta, size, ptr_p);
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
        if (bin && bin_count(bin)) {
            take_run(pool, tc, bin, pr->req.flags, size, ptr_p);
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
    if (ump_unlikely(!bin || !bin_count(bin))) {
        tc_exit(tc);
        return false;
    }
    take_run(pool, tc, bin, flags, size, ptr_p);
    return true;
}

/* ump_alloc the full way: every check, hints, policies, the slow paths.
 * Out of line, so that the cached path (ump_alloc) saves no registers. */
static __attribute__((noinline)) int alloc_full(ump_pool_t *pool,
                                                size_t size,
                                                const ump_hints_t *hints,
                                                void **ptr_p)
{
    if (pool && ptr_p && size > pool->small_max && pool_quiet(pool)) {
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
    /* The cached path: a size served from slabs, a pool in no rare state
     * (check.h: pool_quiet), no hints or simple ones (simple_hints: the
     * interposer's, a device and "local"), an object in the thread's bin
     * of that device. It is what alloc_full does for such a call, without
     * building a placement request; anything else, errors included, goes
     * the full way, which checks and logs as before. The hints' test is
     * in line too: out of line it cost the interposer's pair a fifth. */
    if (ump_likely(pool && ptr_p && size - 1 < pool->small_max &&
                   pool_quiet(pool))) {
        struct tcache *tc = tcache_hit(pool);
        if (ump_likely(tc != NULL)) {
            int dev = ump_likely(!hints) ? tc->device
                                         : simple_hints(pool, tc, hints);
            if (dev >= 0 && alloc_cached(tc, dev, sc_index(size), size, ptr_p))
                return 0;
        }
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
