/*
 * Per-thread caches: the allocation hot path. Each thread keeps, per pool and
 * per device, a small stack of free slab objects for every size class and of
 * free runs of 1..RUN_TCACHE_MAX chunks. ump_alloc/ump_free of a cached size
 * touch only the thread's own cache, so threads do not share a lock or a
 * cache line (the lock below is only ever contended by ump_trim, statistics
 * and the out-of-memory path reclaiming what the thread holds).
 *
 * Sharing a cache with other threads (ump_trim, the out-of-memory path and
 * fork reclaim what it holds) is an asymmetric Dekker handshake: the owner
 * announces itself with a plain store (active = 1) and then reads flush_req;
 * a thread that wants the cache sets flush_req, issues membarrier(2), which
 * runs a full barrier on every CPU running this process, and waits for
 * active == 0. The owner's hot path thus has no locked instruction; only
 * the rare seizing thread pays (a few microseconds). Without membarrier the
 * owner's store is sequentially consistent instead (one xchg).
 *
 * Lock order: registry lock, then pool->lock, then seizing a tcache. The
 * owner never takes a lock while active; a seizing thread holds pool->lock,
 * so there is at most one per cache.
 */
#ifndef UMP_TCACHE_H
#define UMP_TCACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem/pool.h"

/* A bin also counts the allocations and frees of its class made by the
 * owner (written by the owner only, read by statistics): live bytes are
 * (allocs - frees) * class size, with no extra counter on the hot path. */
struct tc_bin {
    /* Items held: written by the owner (or a thread that seized the
     * cache) only, read by others with no lock (front/pool.c asks whether
     * a device's objects or runs sit in caches, stats.c sums the parked
     * runs): relaxed, through bin_count and bin_push/bin_pop. Counting
     * bytes beside it cost every allocation and free a store more. */
    _Atomic uint32_t count;
    uint32_t cap;
    struct obj_ref *items;
    _Atomic uint64_t allocs, frees;
};

struct tcache {
    _Atomic int active;                /* the owner is using its bins */
    _Atomic int flush_req;             /* another thread wants them */
    ump_pool_t *pool;
    pthread_t owner;                   /* the thread it belongs to */
    int device;                        /* the thread's current device */
    /* per place (mem/pool.h), nbins each, made on first use
     * (release-published so that statistics can read the counters without
     * stopping the owner) */
    _Atomic(struct tc_bin *) bins[UMP_MAX_PLACES];
    struct counters *cnt;              /* per place: what no bin counts */
    struct tcache *prev, *next;        /* the pool's list (pool->lock) */
};

extern bool tc_asym_fence; /* membarrier(2) is usable */
void tc_enter_slow(struct tcache *tc);

static inline void tc_exit(struct tcache *tc)
{
    atomic_store_explicit(&tc->active, 0, memory_order_release);
}
/* The owner starts using its bins, unless another thread wants them: then
 * false, the bins not entered (the hot path takes the full path, whose
 * tc_enter waits). */
static inline bool tc_try_enter(struct tcache *tc)
{
    if (ump_likely(tc_asym_fence)) {
        atomic_store_explicit(&tc->active, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
    } else {
        atomic_store_explicit(&tc->active, 1, memory_order_seq_cst);
    }
    if (ump_likely(!atomic_load_explicit(&tc->flush_req,
                                         memory_order_acquire)))
        return true;
    tc_exit(tc);
    return false;
}
/* The owner starts using its bins (waiting while another thread has
 * them). */
static inline void tc_enter(struct tcache *tc)
{
    if (ump_unlikely(!tc_try_enter(tc)))
        tc_enter_slow(tc);
}
/* Another thread takes tc's bins until tc_release. pool->lock held. */
void tc_seize(struct tcache *tc);
void tc_release(struct tcache *tc);

/* Only the owning thread writes its counters: a relaxed load and store is
 * enough (no locked instruction), readers sum them with relaxed loads. */
static inline void ctr_add_i(_Atomic int64_t *c, int64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}
static inline void ctr_add_u(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

struct tcache *tcache_lookup_slow(ump_pool_t *pool);

/* This thread's cache for pool, made on first use; NULL when out of memory. */
struct tls_slot {
    ump_pool_t *pool;
    uint64_t id;
    struct tcache *tc;
};
#define TLS_SLOTS 8
/* initial-exec: one %fs-relative access instead of a __tls_get_addr call
 * per lookup. The 192 bytes fit the static TLS glibc keeps for libraries
 * that are dlopen'ed (as jemalloc does for its thread cache). */
extern _Thread_local struct tls_slot tls_slots[TLS_SLOTS]
    __attribute__((tls_model("initial-exec")));

/* The thread's cache for pool when it sits in the first slot (the common
 * case: the pool last used), else NULL: the hot path's lookup, no call. */
static inline struct tcache *tcache_hit(const ump_pool_t *pool)
{
    if (ump_likely(tls_slots[0].pool == pool && tls_slots[0].id == pool->id))
        return tls_slots[0].tc;
    return NULL;
}

static inline struct tcache *tcache_get(ump_pool_t *pool)
{
    struct tcache *tc = tcache_hit(pool);
    return ump_likely(tc != NULL) ? tc : tcache_lookup_slow(pool);
}

struct tc_bin *tcache_bin_slow(struct tcache *tc, int device, unsigned bin);

/* The bin of (device, bin index), its storage made on first use; NULL when
 * out of memory. Caller holds tc's lock. */
static inline struct tc_bin *tcache_bin(struct tcache *tc, int device,
                                        unsigned bin)
{
    struct tc_bin *b =
        atomic_load_explicit(&tc->bins[device], memory_order_relaxed);
    if (ump_likely(b != NULL))
        return &b[bin];
    return tcache_bin_slow(tc, device, bin);
}

static inline uint32_t bin_count(const struct tc_bin *b)
{
    return atomic_load_explicit(&b->count, memory_order_relaxed);
}

static inline void bin_set_count(struct tc_bin *b, uint32_t n)
{
    atomic_store_explicit(&b->count, n, memory_order_relaxed);
}

/* Puts it on b, which has room (the caller checked). */
static inline void bin_push(struct tc_bin *b, struct obj_ref it)
{
    uint32_t n = bin_count(b);
    b->items[n] = it;
    bin_set_count(b, n + 1);
}

/* Takes b's last item; b is not empty (the caller checked). */
static inline struct obj_ref bin_pop(struct tc_bin *b)
{
    uint32_t n = bin_count(b) - 1;
    bin_set_count(b, n);
    return b->items[n];
}

/* Bytes one allocation of bin b stands for. */
static inline size_t tcache_bin_bytes(const ump_pool_t *pool, unsigned b)
{
    return b < pool->nsmall ? sc_size(b)
                            : (size_t)(b - pool->nsmall + 1) << pool->chunk_shift;
}

/* Whether tc's bins [lo, hi) of place d hold items, and the bytes of the
 * runs parked in its run bins there: read with no lock by any thread (an
 * owner working meanwhile may change them). */
bool tcache_holds(const struct tcache *tc, int d, unsigned lo, unsigned hi);
size_t tcache_run_bytes(const struct tcache *tc, int d);
/* Adds tc's counts for device d (bins and the rest) to *c. */
void tcache_sum(const struct tcache *tc, int d, int64_t *live_p,
                uint64_t *allocs_p, uint64_t *frees_p);
/* Takes every item out of tc (for ump_trim or memory pressure) and returns
 * them to the pool. Pool lock held, tc lock not held. */
void tcache_flush(struct tcache *tc);
/* Flushes, folds the counters into the pool, unlinks and frees tc. Pool
 * lock held. */
void tcache_destroy(struct tcache *tc);
/* Called once per process (pthread_once): the thread-exit key, membarrier
 * registration. Again in a forked child (membarrier). */
int tcache_global_init(void);
void tcache_register_membarrier(void);

#endif
