#include "config.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mem/slab.h"
#include "front/tcache.h"
#include "front/registry.h"
#include "front/front.h"
#include "util/poll.h"

_Thread_local struct tls_slot tls_slots[TLS_SLOTS]
    __attribute__((tls_model("initial-exec")));

static pthread_key_t exit_key;
bool tc_asym_fence;

static long membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
}

void tcache_register_membarrier(void)
{
    tc_asym_fence = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    if (!tc_asym_fence)
        ump_log_debug("membarrier unavailable: thread caches use a locked "
                      "store");
}

void tc_enter_slow(struct tcache *tc)
{
    do {
        atomic_store_explicit(&tc->active, 0, memory_order_release);
        while (atomic_load_explicit(&tc->flush_req, memory_order_acquire))
            sched_yield();
        atomic_store_explicit(&tc->active, 1, memory_order_seq_cst);
    } while (atomic_load_explicit(&tc->flush_req, memory_order_acquire));
}

void tc_seize(struct tcache *tc)
{
    atomic_store_explicit(&tc->flush_req, 1, memory_order_seq_cst);
    if (tc_asym_fence && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) {
        /* Registered, so this cannot fail; if it did, the owner's plain
         * store could be missed and its cache corrupted: stop here. */
        ump_log_error("membarrier failed after registration: %s",
                      strerror(errno));
        abort();
    }
    while (atomic_load_explicit(&tc->active, memory_order_acquire))
        ump_cpu_relax();
}

void tc_release(struct tcache *tc)
{
    atomic_store_explicit(&tc->flush_req, 0, memory_order_release);
}

/* How many free objects a thread keeps per class: many small ones, few big
 * ones, so that a thread never parks more than about a megabyte per class. */
static uint32_t bin_cap(const ump_pool_t *pool, unsigned bin)
{
    if (!pool->cfg.tcache)
        return 0;
    if (bin >= pool->nsmall)
        return 2;
    size_t per = ((size_t)1 << 20) / sc_size(bin);
    return per > 64 ? 64 : per < 2 ? 2 : (uint32_t)per;
}

struct tc_bin *tcache_bin_slow(struct tcache *tc, int device, unsigned bin)
{
    ump_pool_t *pool = tc->pool;
    size_t items = 0;
    for (unsigned b = 0; b < pool->nbins; b++)
        items += bin_cap(pool, b);
    /* One block per device: the bins, then every bin's items, on cache
     * lines of their own (no false sharing with another thread's cache). */
    size_t bytes = UMP_ALIGN_UP(pool->nbins * sizeof(struct tc_bin) +
                                    items * sizeof(struct obj_ref),
                                UMP_CACHELINE);
    struct tc_bin *bins = aligned_alloc(UMP_CACHELINE, bytes);
    if (!bins)
        return NULL;
    memset(bins, 0, bytes);
    struct obj_ref *it = (struct obj_ref *)(bins + pool->nbins);
    for (unsigned b = 0; b < pool->nbins; b++) {
        bins[b].cap = bin_cap(pool, b);
        bins[b].items = it;
        it += bins[b].cap;
    }
    atomic_store_explicit(&tc->bins[device], bins, memory_order_release);
    return &bins[bin];
}

static void release_item(ump_pool_t *pool, unsigned bin, struct obj_ref *it)
{
    if (bin < pool->nsmall)
        slab_put(pool, it->meta, it->idx);
    else
        pool_run_free(pool, it->meta);
}

void tcache_sum(const struct tcache *tc, int d, int64_t *live_p,
                uint64_t *allocs_p, uint64_t *frees_p)
{
    const ump_pool_t *pool = tc->pool;
    uint64_t a = atomic_load_explicit(&tc->cnt[d].allocs, memory_order_relaxed);
    uint64_t f = atomic_load_explicit(&tc->cnt[d].frees, memory_order_relaxed);
    int64_t live =
        atomic_load_explicit(&tc->cnt[d].live_bytes, memory_order_relaxed);
    struct tc_bin *bins = atomic_load_explicit(&tc->bins[d],
                                               memory_order_acquire);
    for (unsigned b = 0; bins && b < pool->nbins; b++) {
        uint64_t ba = atomic_load_explicit(&bins[b].allocs,
                                           memory_order_relaxed);
        uint64_t bf = atomic_load_explicit(&bins[b].frees,
                                           memory_order_relaxed);
        a += ba;
        f += bf;
        live += (int64_t)(ba - bf) * (int64_t)tcache_bin_bytes(pool, b);
    }
    *live_p += live;
    *allocs_p += a;
    *frees_p += f;
}

bool tcache_holds(const struct tcache *tc, int d, unsigned lo, unsigned hi)
{
    const struct tc_bin *bins =
        atomic_load_explicit(&tc->bins[d], memory_order_acquire);
    for (unsigned b = lo; bins && b < hi; b++)
        if (bin_count(&bins[b]))
            return true;
    return false;
}

size_t tcache_run_bytes(const struct tcache *tc, int d)
{
    const ump_pool_t *pool = tc->pool;
    const struct tc_bin *bins =
        atomic_load_explicit(&tc->bins[d], memory_order_acquire);
    size_t bytes = 0;
    for (unsigned b = pool->nsmall; bins && b < pool->nbins; b++)
        bytes += bin_count(&bins[b]) * tcache_bin_bytes(pool, b);
    return bytes;
}

void tcache_flush(struct tcache *tc)
{
    ump_pool_t *pool = tc->pool;
    tc_seize(tc);
    for (int d = 0; d < pool->nplace; d++) {
        struct tc_bin *bins = atomic_load(&tc->bins[d]);
        if (!bins)
            continue;
        for (unsigned b = 0; b < pool->nbins; b++) {
            uint32_t n = bin_count(&bins[b]);
            for (uint32_t i = 0; i < n; i++)
                release_item(pool, b, &bins[b].items[i]);
            bin_set_count(&bins[b], 0);
        }
    }
    tc_release(tc);
}

void tcache_destroy(struct tcache *tc)
{
    ump_pool_t *pool = tc->pool;
    tcache_flush(tc);
    for (int d = 0; d < pool->nplace; d++) {
        struct counters *f = &pool->folded[d];
        int64_t live = 0;
        uint64_t a = 0, fr = 0;
        tcache_sum(tc, d, &live, &a, &fr);
        ctr_add_i(&f->live_bytes, live);
        ctr_add_u(&f->allocs, a);
        ctr_add_u(&f->frees, fr);
        free(atomic_load(&tc->bins[d]));
    }
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        pool->tcaches = tc->next;
    if (tc->next)
        tc->next->prev = tc->prev;
    free(tc);
}

/* Destroys the calling thread's caches of pool. */
static void destroy_mine(ump_pool_t *pool, void *arg)
{
    (void)arg;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&pool->lock);
    for (struct tcache *tc = pool->tcaches, *next; tc; tc = next) {
        next = tc->next;
        if (pthread_equal(tc->owner, self))
            tcache_destroy(tc);
    }
    pthread_mutex_unlock(&pool->lock);
}

static void flush_cb(ump_pool_t *pool, void *arg)
{
    pthread_mutex_lock(&pool->lock);
    tcache_flush(arg);
    pthread_mutex_unlock(&pool->lock);
}

/* Thread exit: give everything this thread cached back to its pools (those
 * still alive; a destroyed pool already freed its caches), including the
 * caches whose thread-local slot was taken by other pools. */
static void thread_exit(void *arg)
{
    (void)arg;
    registry_for_each(destroy_mine, NULL);
    memset(tls_slots, 0, sizeof(tls_slots));
}

int tcache_global_init(void)
{
    tcache_register_membarrier();
    return -pthread_key_create(&exit_key, thread_exit);
}

static struct tcache *tcache_new(ump_pool_t *pool)
{
    /* The cache and its counters in one block of whole cache lines: the
     * owner writes them on every call, and no other thread's data may
     * share those lines. */
    size_t nplace = (size_t)pool->nplace;
    size_t off_cnt = UMP_ALIGN_UP(sizeof(struct tcache), UMP_CACHELINE);
    size_t bytes = off_cnt + UMP_ALIGN_UP(nplace * sizeof(struct counters),
                                          UMP_CACHELINE);
    struct tcache *tc = aligned_alloc(UMP_CACHELINE, bytes);
    if (!tc)
        return NULL;
    memset(tc, 0, bytes);
    tc->pool = pool;
    tc->owner = pthread_self();
    tc->cnt = (struct counters *)((char *)tc + off_cnt);
    pthread_mutex_lock(&pool->lock);
    tc->next = pool->tcaches;
    if (pool->tcaches)
        pool->tcaches->prev = tc;
    pool->tcaches = tc;
    pthread_mutex_unlock(&pool->lock);
    return tc;
}

/* This thread's cache of pool that lost its slot to other pools. */
static struct tcache *find_mine(ump_pool_t *pool)
{
    pthread_t self = pthread_self();
    struct tcache *found = NULL;
    pthread_mutex_lock(&pool->lock);
    for (struct tcache *tc = pool->tcaches; tc && !found; tc = tc->next)
        if (pthread_equal(tc->owner, self))
            found = tc;
    pthread_mutex_unlock(&pool->lock);
    return found;
}

struct tcache *tcache_lookup_slow(ump_pool_t *pool)
{
    for (int i = 1; i < TLS_SLOTS; i++) {
        if (tls_slots[i].pool == pool && tls_slots[i].id == pool->id) {
            struct tls_slot t = tls_slots[i];
            tls_slots[i] = tls_slots[0];
            tls_slots[0] = t;
            return t.tc;
        }
    }
    struct tcache *tc = find_mine(pool);
    if (!tc)
        tc = tcache_new(pool);
    if (!tc)
        return NULL;
    /* A non-NULL value makes thread_exit run when this thread ends. */
    pthread_setspecific(exit_key, tls_slots);
    /* More pools than slots: the least recent one's cache keeps its place
     * in its pool (and the thread's current device there), but gives back
     * what it holds, since nothing will touch it for a while. */
    struct tls_slot *last = &tls_slots[TLS_SLOTS - 1];
    if (last->pool)
        registry_with_pool(last->pool, last->id, flush_cb, last->tc);
    memmove(&tls_slots[1], &tls_slots[0],
            (TLS_SLOTS - 1) * sizeof(tls_slots[0]));
    tls_slots[0] = (struct tls_slot){pool, pool->id, tc};
    return tc;
}
