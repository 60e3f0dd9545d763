/*
 * Thread caches (lib/front/tcache.c): what a thread parks in its bins and
 * what goes back to the pool on a flush, the counters folded into the pool
 * when a thread exits, one cache per (thread, pool) kept across pools,
 * exact counts with many threads, and tcache:false.
 *
 * White box: the test reads the calling thread's cache (tcache_get) and the
 * slab behind a pointer (the granule's tag); tcache_flush runs with
 * pool->lock held, as its contract says.
 */
#include "config.h"

#include <pthread.h>

#include "testutil.h"

#include "front/tcache.h"
#include "mem/pool.h"
#include "mem/slab.h"

#define CONF1 "backend:sim,sim_devices:1,sim_device_mem:64M"

/* The slab that holds the live object p. */
static struct slab *slab_of(ump_pool_t *pool, const void *p)
{
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, p));
    assert_int_equal(vas_tag_kind(tag), VAS_SLAB);
    return vas_tag_owner(tag);
}

/* The calling thread's bin of class/bin index b on device d. */
static struct tc_bin *my_bin(ump_pool_t *pool, int d, unsigned b)
{
    struct tcache *tc = tcache_get(pool);
    assert_non_null(tc);
    struct tc_bin *bins = atomic_load(&tc->bins[d]);
    assert_non_null(bins);
    return &bins[b];
}

static size_t my_run_bytes(ump_pool_t *pool, int d)
{
    struct tcache *tc = tcache_get(pool);
    assert_non_null(tc);
    return tcache_run_bytes(tc, d);
}

static void flush_mine(ump_pool_t *pool)
{
    struct tcache *tc = tcache_get(pool); /* takes the lock on first use */
    assert_non_null(tc);
    pthread_mutex_lock(&pool->lock);
    tcache_flush(tc);
    pthread_mutex_unlock(&pool->lock);
}

/* A small allocation fills the bin with a batch from one slab; a free
 * parks the object in the bin (the slab still counts it in use, so nothing
 * is cached); a flush gives every parked object back to the slab, which is
 * then wholly free and counted as cached. Counts do not move on a flush. */
static void test_fill_flush_slab(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const unsigned cls = sc_index(4096);
    const size_t sz = sc_size(cls);
    assert_int_equal(sz, 4096);

    char *p = tu_alloc(pool, 4096, 0);
    struct tc_bin *bin = my_bin(pool, 0, cls);
    assert_int_equal(bin->cap, 64); /* 1 MiB / 4 KiB, at most 64 */
    assert_int_equal(bin->count, bin->cap - 1); /* the batch, less p */
    struct slab *s = slab_of(pool, p);
    assert_int_equal(s->cls, cls);
    assert_int_equal(s->nobj, TU_CHUNK / sz);
    assert_int_equal(s->nfree, s->nobj - bin->cap);
    for (uint32_t i = 0; i < bin->count; i++) {
        assert_ptr_equal(bin->items[i].meta, s);
        assert_ptr_not_equal(bin->items[i].ptr, p);
    }
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.live_count, 1);
    assert_int_equal(st.live_bytes, sz);
    assert_int_equal(st.mapped_bytes, TU_CHUNK);
    assert_int_equal(st.cached_bytes, 0);

    tu_free(pool, p);
    assert_int_equal(bin->count, bin->cap);
    assert_ptr_equal(bin->items[bin->count - 1].ptr, p);
    assert_int_equal(s->nfree, s->nobj - bin->cap); /* parked, not in slab */
    st = tu_stats(pool, 0);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.alloc_count, 1);
    assert_int_equal(st.free_count, 1);
    assert_int_equal(st.cached_bytes, 0); /* the slab is in use */

    /* The hot path hands back what was just freed, with no slab call. */
    assert_ptr_equal(tu_alloc(pool, 4000, 0), p);
    assert_int_equal(bin->count, bin->cap - 1);
    assert_int_equal(s->nfree, s->nobj - bin->cap);
    tu_free(pool, p);

    flush_mine(pool);
    assert_int_equal(bin->count, 0);
    assert_int_equal(s->nfree, s->nobj);
    st = tu_stats(pool, 0);
    assert_int_equal(st.alloc_count, 2);
    assert_int_equal(st.free_count, 2);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.mapped_bytes, TU_CHUNK);
    assert_int_equal(st.cached_bytes, TU_CHUNK); /* a wholly free slab */

    /* The next allocation refills the bin from the same slab. */
    p = tu_alloc(pool, 4096, 0);
    assert_ptr_equal(slab_of(pool, p), s);
    assert_int_equal(bin->count, bin->cap - 1);
    assert_int_equal(tu_stats(pool, 0).cached_bytes, 0);
    tu_free(pool, p);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(bin->count, 0); /* trim flushes too */
    st = tu_stats(pool, 0);
    assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(st.chunks_released, st.chunks_created);
    tu_pool_destroy(pool);
}

/* A full bin sends half of it back to the slabs: no object is lost or
 * parked twice, and the bin never holds more than its capacity. */
static void test_bin_overflow(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const unsigned cls = sc_index(4096);
    enum { N = 200 };
    char *p[N];
    for (int i = 0; i < N; i++)
        p[i] = tu_alloc(pool, 4096, 0);
    struct tc_bin *bin = my_bin(pool, 0, cls);
    struct slab *s = slab_of(pool, p[0]);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(slab_of(pool, p[i]), s); /* 512 a slab */
    for (int i = 0; i < N; i++) {
        tu_free(pool, p[i]);
        assert_true(bin->count <= bin->cap);
        /* every free object is in the slab or parked, once */
        assert_int_equal(s->nfree + bin->count, s->nobj - (N - 1 - i));
    }
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.alloc_count, N);
    assert_int_equal(st.free_count, N);
    assert_int_equal(st.live_count, 0);
    /* distinct objects parked */
    for (uint32_t i = 0; i < bin->count; i++)
        for (uint32_t k = i + 1; k < bin->count; k++)
            assert_ptr_not_equal(bin->items[i].ptr, bin->items[k].ptr);
    tu_pool_destroy(pool);
}

/* A freed run of the "local" policy is parked in the thread's bin of its
 * chunk count: counted as cached (ump_trim gives it back), reused whole
 * by the next allocation of that size; a flush hands it to the device's
 * parked runs, which still count as cached. */
static void test_fill_flush_run(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const size_t sz = 4 * TU_MIB;
    const unsigned rb = pool->nsmall + 2 - 1; /* bin of 2-chunk runs */

    char *p = tu_alloc(pool, sz, 0);
    struct tc_bin *bin = my_bin(pool, 0, rb);
    assert_int_equal(bin->cap, 2);
    assert_int_equal(bin->count, 0);
    tu_free(pool, p);
    assert_int_equal(bin->count, 1);
    assert_ptr_equal(bin->items[0].ptr, p);
    assert_int_equal(my_run_bytes(pool, 0), sz);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.mapped_bytes, sz);
    assert_int_equal(st.cached_bytes, sz);
    uint64_t created = st.chunks_created;

    /* reused from the bin: same address, no chunk made */
    assert_ptr_equal(tu_alloc(pool, sz - 100, 0), p);
    assert_int_equal(bin->count, 0);
    assert_int_equal(my_run_bytes(pool, 0), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_created, created);
    assert_int_equal(st.live_bytes, sz);
    assert_int_equal(st.cached_bytes, 0);
    tu_free(pool, p);

    flush_mine(pool);
    assert_int_equal(bin->count, 0);
    assert_int_equal(my_run_bytes(pool, 0), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.alloc_count, 2);
    assert_int_equal(st.free_count, 2);
    assert_int_equal(st.mapped_bytes, sz);
    assert_int_equal(st.cached_bytes, sz); /* parked on the device now */
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.cached_bytes, 0);
    tu_pool_destroy(pool);
}

/* The cached path of runs (ump_alloc without hints or with the interposer's,
 * ump_free, ump_host_alloc/free): the same run comes back with no chunk
 * made, and whatever the path does not take (an interior pointer, a second
 * free, the other kind's free, an offloadable run) goes the
 * full way, which refuses it or serves it, losing nothing. */
static void test_cached_run_paths(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:64M,host_limit:64M");
    const size_t sz = 4 * TU_MIB;
    const unsigned rb = pool->nsmall + 2 - 1; /* bin of 2-chunk runs */
    void *p, *q;
    assert_int_equal(ump_alloc(pool, sz, NULL, &p), 0);
    assert_int_equal(ump_free(pool, p), 0);
    struct tc_bin *bin = my_bin(pool, 0, rb);
    assert_int_equal(bin->count, 1);
    uint64_t created = tu_stats(pool, 0).chunks_created;
    assert_int_equal(ump_alloc(pool, sz - 1, NULL, &q), 0); /* no hints */
    assert_ptr_equal(q, p);
    assert_int_equal(bin->count, 0);
    assert_int_equal(tu_stats(pool, 0).chunks_created, created);

    /* Refused, nothing changed: inside it, the host's free of it. */
    assert_int_equal(ump_free(pool, (char *)p + 4096), -EINVAL);
    assert_int_equal(ump_free(pool, (char *)p + 2 * TU_MIB), -EINVAL);
    assert_int_equal(ump_host_free(pool, p), -EINVAL);
    assert_int_equal(bin->count, 0);
    assert_int_equal(tu_stats(pool, 0).live_bytes, sz);
    assert_int_equal(ump_free(pool, p), 0);
    assert_int_equal(bin->count, 1);
    assert_int_equal(ump_free(pool, p), -EINVAL); /* twice */
    assert_int_equal(bin->count, 1);
    assert_int_equal(tu_stats(pool, 0).live_bytes, 0);

    /* The interposer's hints (device 0, "local", no spill): the cached
     * run. */
    ump_hints_t h = tu_hints(0);
    h.policy = "local";
    h.flags = UMP_HINT_NO_SPILL;
    assert_int_equal(ump_alloc(pool, sz, &h, &q), 0);
    assert_ptr_equal(q, p);
    assert_int_equal(bin->count, 0);
    assert_int_equal(ump_free(pool, q), 0);
    assert_int_equal(bin->count, 1);
    /* Offloadable: never given back to a thread's bin (the full path
     * may reuse what the bins hold: it flushes them before growing). */
    h = tu_hints(0);
    h.flags = UMP_HINT_OFFLOAD;
    assert_int_equal(ump_alloc(pool, sz, &h, &q), 0);
    unsigned held = bin->count;
    assert_int_equal(ump_free(pool, q), 0);
    assert_int_equal(bin->count, held);

    /* A size past the reservation is -ENOMEM whatever the bins hold (a
     * wrapped chunk count must not reach a slab class's bin). */
    void *small;
    assert_int_equal(ump_alloc(pool, pool->small_max, NULL, &small), 0);
    assert_int_equal(ump_free(pool, small), 0);
    assert_int_equal(ump_alloc(pool, SIZE_MAX, NULL, &q), -ENOMEM);
    assert_int_equal(ump_alloc(pool, SIZE_MAX - TU_MIB, &h, &q), -ENOMEM);
    assert_int_equal(ump_host_alloc(pool, pool->small_max, &small), 0);
    assert_int_equal(ump_host_free(pool, small), 0);
    assert_int_equal(ump_host_alloc(pool, SIZE_MAX - 8192, &q), -ENOMEM);

    /* Pinned host runs: the host place's bin, and a device free of one
     * is refused. */
    void *hp, *hq;
    assert_int_equal(ump_host_alloc(pool, sz, &hp), 0);
    assert_int_equal(ump_free(pool, hp), -EINVAL);
    assert_int_equal(ump_host_free(pool, hp), 0);
    assert_int_equal(ump_host_alloc(pool, sz - 4096, &hq), 0);
    assert_ptr_equal(hq, hp);
    assert_int_equal(ump_host_free(pool, hq), 0);
    assert_int_equal(ump_host_free(pool, hq), -EINVAL);
    tu_pool_destroy(pool);
}

/* ---- a thread's exit ---------------------------------------------------- */

struct exiter {
    ump_pool_t *pool;
    pthread_barrier_t *bar;
    struct tcache *tc;
    void *small[10];
    void *big[2];
    int rc;
};

static void *exiter_main(void *arg)
{
    struct exiter *e = arg;
    ump_hints_t h = tu_hints(0);
    for (int i = 0; i < 10 && !e->rc; i++)
        e->rc = ump_alloc(e->pool, 1000, &h, &e->small[i]);
    for (int i = 0; i < 2 && !e->rc; i++)
        e->rc = ump_alloc(e->pool, 4 * TU_MIB, &h, &e->big[i]);
    for (int i = 0; i < 3 && !e->rc; i++) /* 7 small and 1 big stay live */
        e->rc = ump_free(e->pool, e->small[i]);
    if (!e->rc)
        e->rc = ump_free(e->pool, e->big[0]);
    e->tc = tcache_get(e->pool);
    pthread_barrier_wait(e->bar); /* main looks at the live cache */
    pthread_barrier_wait(e->bar);
    return NULL;
}

static bool pool_has_tcache(ump_pool_t *pool, const struct tcache *tc)
{
    bool found = false;
    pthread_mutex_lock(&pool->lock);
    for (struct tcache *t = pool->tcaches; t; t = t->next)
        found |= t == tc;
    pthread_mutex_unlock(&pool->lock);
    return found;
}

/* When a thread ends, its cache gives back what it parks and its counters
 * fold into the pool: the pool's counts do not change, the cache is gone. */
static void test_thread_exit_folds(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    struct exiter e = {.pool = pool, .bar = &bar};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, exiter_main, &e), 0);
    pthread_barrier_wait(&bar);
    assert_int_equal(e.rc, 0);
    assert_non_null(e.tc);
    assert_true(pool_has_tcache(pool, e.tc));
    ump_stats_t live = tu_stats(pool, 0);
    assert_int_equal(live.alloc_count, 12);
    assert_int_equal(live.free_count, 4);
    assert_int_equal(live.live_count, 8);
    assert_int_equal(live.live_bytes, 7 * 1024 + 4 * TU_MIB);
    assert_int_equal(live.cached_bytes, 4 * TU_MIB); /* the parked run */
    /* nothing folded yet: the counts are the thread's */
    assert_int_equal(atomic_load(&pool->folded[0].allocs), 0);
    struct slab *s = slab_of(pool, e.small[3]);
    assert_int_equal(s->nfree, s->nobj - 64); /* a batch of 64 taken */

    pthread_barrier_wait(&bar);
    assert_int_equal(pthread_join(t, NULL), 0);
    pthread_barrier_destroy(&bar);

    assert_false(pool_has_tcache(pool, e.tc));
    ump_stats_t after = tu_stats(pool, 0);
    assert_int_equal(after.alloc_count, live.alloc_count);
    assert_int_equal(after.free_count, live.free_count);
    assert_int_equal(after.live_count, live.live_count);
    assert_int_equal(after.live_bytes, live.live_bytes);
    assert_int_equal(after.cached_bytes, live.cached_bytes);
    assert_int_equal(atomic_load(&pool->folded[0].allocs), 12);
    assert_int_equal(atomic_load(&pool->folded[0].frees), 4);
    assert_int_equal(atomic_load(&pool->folded[0].live_bytes),
                     (int64_t)(7 * 1024 + 4 * TU_MIB));
    /* the parked objects went back to the slab: only the live ones remain */
    assert_int_equal(s->nfree, s->nobj - 7);

    /* Another thread frees what it left. */
    for (int i = 3; i < 10; i++)
        tu_free(pool, e.small[i]);
    tu_free(pool, e.big[1]);
    ump_stats_t end = tu_stats(pool, 0);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(end.live_bytes, 0);
    assert_int_equal(end.alloc_count, 12);
    assert_int_equal(end.free_count, 12);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).mapped_bytes, 0);
    tu_pool_destroy(pool);
}

/* ---- one thread, many pools ------------------------------------------- */

/* A thread keeps one cache per pool: going to another pool and back finds
 * the same cache with what it parked. Beyond TLS_SLOTS pools the least
 * recent pool's cache gives back what it parks but keeps its place and the
 * thread's current device there. */
static void test_cache_across_pools(void **state)
{
    (void)state;
    ump_pool_t *a = tu_pool_create(
        "backend:sim,sim_devices:2,sim_device_mem:64M");
    ump_pool_t *b = tu_pool_create(CONF1);
    const unsigned cls = sc_index(1000);

    assert_int_equal(ump_set_device(a, 1), 0);
    char *pa = tu_alloc(a, 1000, UMP_DEVICE_CURRENT);
    assert_int_equal(tu_info(a, pa).device, 1);
    tu_free(a, pa);
    struct tcache *tca = tcache_get(a);
    struct tc_bin *bina = my_bin(a, 1, cls);
    const uint32_t parked = bina->count;
    assert_int_equal(parked, bina->cap);

    char *pb = tu_alloc(b, 1000, 0);
    struct tcache *tcb = tcache_get(b);
    assert_ptr_not_equal(tcb, tca);
    tu_free(b, pb);

    /* back to a: the same cache, still holding pa */
    assert_ptr_equal(tcache_get(a), tca);
    assert_int_equal(bina->count, parked);
    assert_ptr_equal(tu_alloc(a, 1000, UMP_DEVICE_CURRENT), pa);
    tu_free(a, pa);

    /* TLS_SLOTS other pools used since: a's slot is taken. */
    ump_pool_t *more[TLS_SLOTS];
    for (int i = 0; i < TLS_SLOTS; i++) {
        more[i] = tu_pool_create(CONF1);
        tu_free(more[i], tu_alloc(more[i], 1000, 0));
    }
    assert_int_equal(bina->count, 0); /* given back... */
    struct slab *s = slab_of(a, pa);
    assert_int_equal(s->nfree, s->nobj); /* pa's slab is wholly free again */
    assert_int_equal(tu_stats(a, 1).cached_bytes, TU_CHUNK);
    assert_true(pool_has_tcache(a, tca)); /* ...but kept */
    int dev = -1;
    assert_int_equal(ump_get_device(a, &dev), 0);
    assert_int_equal(dev, 1);
    assert_ptr_equal(tcache_get(a), tca);
    ump_stats_t st = tu_stats(a, UMP_DEVICE_ALL);
    assert_int_equal(st.alloc_count, 2);
    assert_int_equal(st.free_count, 2);

    for (int i = 0; i < TLS_SLOTS; i++)
        tu_pool_destroy(more[i]);
    tu_pool_destroy(b);
    tu_pool_destroy(a);
}

/* ---- many threads -------------------------------------------------------- */

#define NTHREADS 8
#define NOPS 3000
#define KEEP 24

struct worker {
    ump_pool_t *pool;
    pthread_barrier_t *bar;
    int id;
    void *live[KEEP];
    int nlive;
    uint64_t allocs, frees;
    int err; /* an unexpected error code */
};

static const size_t wsizes[] = {1, 256, 1000, 4096, 30000, 100000,
                                TU_CHUNK + 1, 4 * TU_MIB};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = 0x1234567ull + (uint64_t)w->id * 7919;
    ump_hints_t h = tu_hints(w->id % 2);
    for (int i = 0; i < NOPS && !w->err; i++) {
        uint64_t r = tu_rand(&rng);
        if (w->nlive < KEEP && (w->nlive == 0 || r % 3 != 0)) {
            size_t sz = wsizes[(r >> 8) % (sizeof(wsizes) / sizeof(*wsizes))];
            void *p = NULL;
            int rc = ump_alloc(w->pool, sz, &h, &p);
            if (rc == 0)
                w->live[w->nlive++] = p, w->allocs++;
            else if (rc != -ENOMEM)
                w->err = rc;
        } else {
            int k = (int)((r >> 16) % (uint64_t)w->nlive);
            int rc = ump_free(w->pool, w->live[k]);
            if (rc)
                w->err = rc;
            w->live[k] = w->live[--w->nlive];
            w->frees++;
        }
    }
    /* Leave some live for the main thread, and hold the cache alive until
     * main has counted. */
    while (w->nlive > KEEP / 2 && !w->err) {
        if (ump_free(w->pool, w->live[--w->nlive]))
            w->err = -1;
        w->frees++;
    }
    pthread_barrier_wait(w->bar);
    pthread_barrier_wait(w->bar);
    return NULL;
}

/* Counts are exact with threads allocating and freeing concurrently: while
 * their caches live, after they exit (folded), and after another thread
 * frees what they left. */
static void test_many_threads(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:2,sim_device_mem:512M");
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, NTHREADS + 1);
    static struct worker w[NTHREADS];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i] = (struct worker){.pool = pool, .bar = &bar, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    pthread_barrier_wait(&bar);
    uint64_t allocs = 0, frees = 0, live = 0, live_dev[2] = {0, 0};
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(w[i].err, 0);
        allocs += w[i].allocs;
        frees += w[i].frees;
        live += (uint64_t)w[i].nlive;
        for (int k = 0; k < w[i].nlive; k++)
            live_dev[tu_info(pool, w[i].live[k]).device]++;
    }
    assert_true(allocs > NTHREADS * NOPS / 3);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.alloc_count, allocs);
    assert_int_equal(st.free_count, frees);
    assert_int_equal(st.live_count, live);
    assert_int_equal(st.alloc_count - st.free_count, st.live_count);
    for (int d = 0; d < 2; d++) {
        ump_stats_t sd = tu_stats(pool, d);
        assert_int_equal(sd.alloc_count - sd.free_count, live_dev[d]);
    }

    pthread_barrier_wait(&bar);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&bar);
    ump_stats_t folded = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(folded.alloc_count, allocs);
    assert_int_equal(folded.free_count, frees);
    assert_int_equal(folded.live_count, live);
    assert_int_equal(folded.live_bytes, st.live_bytes);
    assert_null(pool->tcaches); /* main has none: it never allocated */

    for (int i = 0; i < NTHREADS; i++)
        for (int k = 0; k < w[i].nlive; k++)
            tu_free(pool, w[i].live[k]);
    ump_stats_t end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(end.live_bytes, 0);
    assert_int_equal(end.free_count, frees + live);
    assert_int_equal(ump_trim(pool), 0);
    end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.mapped_bytes, 0);
    assert_int_equal(end.chunks_released, end.chunks_created);
    tu_pool_destroy(pool);
}

/* ---- tcache:false ------------------------------------------------------- */

/* No bin has room: frees go straight back to the slabs and runs, so a
 * wholly free slab shows as cached at once; counts are still exact. The
 * same sequence with caches parks the object (nothing cached). */
static void test_disabled(void **state)
{
    (void)state;
    ump_pool_t *pool =
        tu_pool_create(CONF1 ",tcache:false");
    const unsigned cls = sc_index(4096);
    const unsigned rb = pool->nsmall + 2 - 1;

    char *p = tu_alloc(pool, 4096, 0);
    struct tc_bin *bin = my_bin(pool, 0, cls);
    assert_int_equal(bin->cap, 0);
    assert_int_equal(bin->count, 0);
    struct slab *s = slab_of(pool, p);
    assert_int_equal(s->nfree, s->nobj - 1); /* no batch */
    tu_free(pool, p);
    assert_int_equal(s->nfree, s->nobj);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.cached_bytes, TU_CHUNK);
    assert_int_equal(st.alloc_count, 1);
    assert_int_equal(st.free_count, 1);

    char *r = tu_alloc(pool, 4 * TU_MIB, 0);
    tu_free(pool, r);
    assert_int_equal(my_bin(pool, 0, rb)->cap, 0);
    assert_int_equal(my_bin(pool, 0, rb)->count, 0);
    assert_int_equal(my_run_bytes(pool, 0), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.alloc_count, 2);
    assert_int_equal(st.free_count, 2);
    assert_int_equal(st.live_count, 0);
    tu_pool_destroy(pool);

    /* the same with caches: the object stays parked */
    pool = tu_pool_create(CONF1);
    p = tu_alloc(pool, 4096, 0);
    tu_free(pool, p);
    assert_int_equal(my_bin(pool, 0, cls)->count, 64);
    assert_int_equal(tu_stats(pool, 0).cached_bytes, 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_flush_slab),
        cmocka_unit_test(test_bin_overflow),
        cmocka_unit_test(test_fill_flush_run),
        cmocka_unit_test(test_cached_run_paths),
        cmocka_unit_test(test_thread_exit_folds),
        cmocka_unit_test(test_cache_across_pools),
        cmocka_unit_test(test_many_threads),
        cmocka_unit_test(test_disabled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
