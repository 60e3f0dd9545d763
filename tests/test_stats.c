/* ump_stats and ump_trim: counters, byte totals and their invariants. */
#include "config.h"

#include <pthread.h>

#define TU_CUDA_AWARE 1
#include "testutil.h"
#include "topo/drivercost.h"

#define NDEV 3
#define CONF "backend:sim,sim_devices:3,sim_device_mem:96M"
#define DEVMEM (96 * TU_MIB)
#define GIB ((size_t)1 << 30)

/* The most a size may be rounded up to: a size class wastes at most a
 * quarter (plus the 256-byte quantum), a run is whole chunks. */
static size_t max_rounded(size_t size)
{
    if (size <= TU_SLAB_MAX)
        return size + size / 4 + TU_ALIGN;
    return TU_ALIGN_UP(size, TU_CHUNK);
}

/* Memory in use is at least what is mapped and not held for reuse. */
static size_t in_use_floor(const ump_stats_t *st)
{
    return st->mapped_bytes > st->cached_bytes
               ? st->mapped_bytes - st->cached_bytes
               : 0;
}

/* Invariants that hold at any quiet moment, for the pool and each device;
 * peak_seen tracks the high-water mark the test saw (per selector). */
static void check_invariants(ump_pool_t *pool, size_t *peak_seen)
{
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    ump_stats_t sum;
    memset(&sum, 0, sizeof(sum));
    size_t peak_sum = 0, peak_reserved_sum = 0, peak_reserved_max = 0;

    for (int d = -1; d < NDEV; d++) {
        ump_stats_t st = d < 0 ? all : tu_stats(pool, d);
        size_t *seen = &peak_seen[d + 1];
        assert_int_equal(st.live_count, st.alloc_count - st.free_count);
        assert_true(st.mapped_bytes <= st.capacity);
        /* Live memory is mapped and not held for reuse; cached memory may
         * include created chunks that are not mapped. */
        assert_true(st.live_bytes <= st.mapped_bytes);
        assert_true(st.live_bytes + st.cached_bytes <= st.capacity);
        assert_true(st.chunks_released <= st.chunks_created);
        assert_true(st.peak_bytes >= in_use_floor(&st));
        assert_true(st.peak_bytes >= st.live_bytes);
        /* Reserved: mapped plus idle chunks, all of it created, so
         * everything else fits in it; what ump_trim keeps (reserved -
         * cached) holds the live allocations, at a quiet moment. */
        assert_true(st.mapped_bytes <= st.reserved_bytes);
        assert_true(st.cached_bytes <= st.reserved_bytes);
        assert_true(st.live_bytes + st.cached_bytes <= st.reserved_bytes);
        assert_true(st.reserved_bytes <= st.capacity);
        assert_true(st.reserved_bytes <= st.peak_reserved_bytes);
        assert_int_equal(st.reserved_bytes % TU_CHUNK, 0);
        /* Non-decreasing. */
        assert_true(st.peak_bytes >= *seen);
        *seen = st.peak_bytes;
        if (d >= 0) {
            assert_int_equal(st.capacity, DEVMEM);
            sum.capacity += st.capacity;
            sum.live_bytes += st.live_bytes;
            sum.mapped_bytes += st.mapped_bytes;
            sum.cached_bytes += st.cached_bytes;
            sum.live_count += st.live_count;
            sum.alloc_count += st.alloc_count;
            sum.free_count += st.free_count;
            sum.chunks_created += st.chunks_created;
            sum.chunks_released += st.chunks_released;
            peak_sum += st.peak_bytes;
            sum.reserved_bytes += st.reserved_bytes;
            peak_reserved_sum += st.peak_reserved_bytes;
            if (st.peak_reserved_bytes > peak_reserved_max)
                peak_reserved_max = st.peak_reserved_bytes;
        }
    }
    assert_int_equal(all.capacity, sum.capacity);
    assert_int_equal(all.live_bytes, sum.live_bytes);
    assert_int_equal(all.mapped_bytes, sum.mapped_bytes);
    assert_int_equal(all.cached_bytes, sum.cached_bytes);
    assert_int_equal(all.live_count, sum.live_count);
    assert_int_equal(all.alloc_count, sum.alloc_count);
    assert_int_equal(all.free_count, sum.free_count);
    assert_int_equal(all.chunks_created, sum.chunks_created);
    assert_int_equal(all.chunks_released, sum.chunks_released);
    /* Each device's peak bounds its share at the pool's peak moment. */
    assert_true(all.peak_bytes <= peak_sum);
    assert_int_equal(all.reserved_bytes, sum.reserved_bytes);
    /* The pool's peak is at least any device's (the pool held that much
     * then) and at most their sum. */
    assert_true(all.peak_reserved_bytes >= peak_reserved_max);
    assert_true(all.peak_reserved_bytes <= peak_reserved_sum);
}

static void expect_empty_after_trim(ump_pool_t *pool)
{
    assert_int_equal(ump_trim(pool), 0);
    for (int d = -1; d < NDEV; d++) {
        ump_stats_t st = tu_stats(pool, d < 0 ? UMP_DEVICE_ALL : d);
        assert_int_equal(st.live_count, 0);
        assert_int_equal(st.live_bytes, 0);
        assert_int_equal(st.cached_bytes, 0);
        assert_int_equal(st.mapped_bytes, 0);
        assert_int_equal(st.reserved_bytes, 0);
        assert_int_equal(st.chunks_released, st.chunks_created);
    }
}

static void test_fresh(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t peak[NDEV + 1] = {0};
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.capacity, NDEV * DEVMEM);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.alloc_count, 0);
    assert_int_equal(st.free_count, 0);
    check_invariants(pool, peak);
    tu_pool_destroy(pool);
}

/* One allocation: its bytes and counts land on its device only. */
static void test_one_alloc(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    const size_t sizes[] = {1, 4096, 5000, TU_MIB, TU_CHUNK, 5 * TU_MIB + 1};
    size_t peak[NDEV + 1] = {0};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t sz = sizes[i];
        int dev = (int)(i % NDEV);
        ump_stats_t before[NDEV];
        for (int d = 0; d < NDEV; d++)
            before[d] = tu_stats(pool, d);
        void *p = tu_alloc(pool, sz, dev);
        for (int d = 0; d < NDEV; d++) {
            ump_stats_t st = tu_stats(pool, d);
            if (d != dev) {
                tu_assert_stats_equal(&before[d], &st);
                continue;
            }
            assert_int_equal(st.alloc_count, before[d].alloc_count + 1);
            assert_int_equal(st.live_count, before[d].live_count + 1);
            size_t grew = st.live_bytes - before[d].live_bytes;
            assert_true(grew >= sz);
            assert_true(grew <= max_rounded(sz));
            assert_true(st.mapped_bytes >= st.live_bytes);
        }
        check_invariants(pool, peak);
        tu_free(pool, p);
        ump_stats_t st = tu_stats(pool, dev);
        assert_int_equal(st.live_bytes, before[dev].live_bytes);
        assert_int_equal(st.free_count, before[dev].free_count + 1);
        check_invariants(pool, peak);
    }
    /* A run is exactly its chunks. */
    void *p = tu_alloc(pool, TU_CHUNK, 0);
    assert_int_equal(tu_stats(pool, 0).live_bytes, TU_CHUNK);
    tu_free(pool, p);
    expect_empty_after_trim(pool);
    tu_pool_destroy(pool);
}

/* A random mix of allocations and frees; the test keeps its own books and
 * compares them with the pool's. */
static void test_random_books(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    enum { SLOTS = 256, STEPS = 4000 };
    static void *ptr[SLOTS];
    static size_t size[SLOTS];
    uint64_t rng = 7, allocs = 0, frees = 0;
    size_t peak[NDEV + 1] = {0};
    size_t max_in_use = 0;
    memset(ptr, 0, sizeof(ptr));

    for (int step = 0; step < STEPS; step++) {
        int i = (int)(tu_rand(&rng) % SLOTS);
        if (ptr[i]) {
            tu_free(pool, ptr[i]);
            ptr[i] = NULL;
            frees++;
        } else {
            uint64_t r = tu_rand(&rng);
            size_t sz = r % 16 == 0 ? TU_MIB + r % (4 * TU_MIB)
                                    : 1 + r % 20000;
            ump_hints_t h = tu_hints((int)(r >> 40) % NDEV);
            int rc = ump_alloc(pool, sz, &h, &ptr[i]);
            if (rc == -ENOMEM) {
                ptr[i] = NULL;
                continue;
            }
            assert_int_equal(rc, 0);
            size[i] = sz;
            allocs++;
        }
        if (step % 50 == 0) {
            check_invariants(pool, peak);
            ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
            size_t req = 0, bound = 0;
            uint64_t live = 0;
            for (int k = 0; k < SLOTS; k++)
                if (ptr[k]) {
                    req += size[k];
                    bound += max_rounded(size[k]);
                    live++;
                }
            assert_int_equal(st.alloc_count, allocs);
            assert_int_equal(st.free_count, frees);
            assert_int_equal(st.live_count, live);
            assert_true(st.live_bytes >= req);
            assert_true(st.live_bytes <= bound);
            size_t in_use = in_use_floor(&st);
            if (st.live_bytes > in_use)
                in_use = st.live_bytes;
            if (in_use > max_in_use)
                max_in_use = in_use;
            assert_true(st.peak_bytes >= max_in_use);
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (ptr[k])
            tu_free(pool, ptr[k]);
    check_invariants(pool, peak);
    expect_empty_after_trim(pool);
    /* The peak survives the trim. */
    assert_true(tu_stats(pool, UMP_DEVICE_ALL).peak_bytes >= max_in_use);
    tu_pool_destroy(pool);
}

/* Failed calls count nothing. */
static void test_failures_not_counted(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *keep = tu_alloc(pool, 300, 0);
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    void *p = NULL;
    int x = 0;
    assert_int_equal(ump_alloc(pool, 0, NULL, &p), -EINVAL);
    assert_int_equal(ump_alloc(pool, NDEV * DEVMEM + TU_CHUNK, NULL, &p),
                     -ENOMEM);
    assert_int_equal(ump_free(pool, &x), -EINVAL);
    assert_int_equal(ump_free(pool, NULL), 0);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    tu_free(pool, keep);
    tu_pool_destroy(pool);
}

/* Freed memory is cached (held for reuse); ump_trim gives it back and
 * leaves live allocations alone. */
static void test_cache_and_trim(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t peak[NDEV + 1] = {0};
    void *keep_small = tu_alloc(pool, 2000, 1);
    void *keep_big = tu_alloc(pool, 6 * TU_MIB, 2);
    tu_pool_write(pool, keep_small, 2000, 1);
    tu_pool_write(pool, keep_big, 6 * TU_MIB, 2);

    void *big = tu_alloc(pool, 10 * TU_MIB, 0);
    ump_stats_t with = tu_stats(pool, 0);
    tu_free(pool, big);
    ump_stats_t freed = tu_stats(pool, 0);
    /* Still mapped, now held for reuse. */
    assert_int_equal(freed.mapped_bytes, with.mapped_bytes);
    assert_true(freed.cached_bytes >= with.cached_bytes + 10 * TU_MIB);
    check_invariants(pool, peak);

    ump_stats_t live_before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(st.live_bytes, live_before.live_bytes);
    assert_int_equal(st.live_count, live_before.live_count);
    assert_true(st.mapped_bytes + 10 * TU_MIB <= live_before.mapped_bytes);
    assert_true(st.mapped_bytes >= st.live_bytes);
    /* the 10 MiB were one chunk */
    assert_true(st.chunks_released >= live_before.chunks_released + 1);
    for (int d = 0; d < NDEV; d++)
        assert_int_equal(tu_stats(pool, d).cached_bytes, 0);
    check_invariants(pool, peak);
    tu_assert_pool_pattern(pool, keep_small, 2000, 1);
    tu_assert_pool_pattern(pool, keep_big, 6 * TU_MIB, 2);

    /* A second trim has nothing to do. */
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t again = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&st, &again);

    tu_free(pool, keep_small);
    tu_free(pool, keep_big);
    expect_empty_after_trim(pool);
    tu_pool_destroy(pool);
}

/* The peak is a high-water mark: it does not drop when memory is freed. */
static void test_peak(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *a = tu_alloc(pool, 20 * TU_MIB, 0);
    void *b = tu_alloc(pool, 30 * TU_MIB, 0);
    ump_stats_t high = tu_stats(pool, 0);
    assert_true(high.peak_bytes >= 50 * TU_MIB);
    tu_free(pool, a);
    tu_free(pool, b);
    ump_stats_t low = tu_stats(pool, 0);
    assert_int_equal(low.peak_bytes, high.peak_bytes);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).peak_bytes, high.peak_bytes);
    /* Reusing cached memory below the old peak leaves it alone. */
    a = tu_alloc(pool, 10 * TU_MIB, 0);
    assert_int_equal(tu_stats(pool, 0).peak_bytes, high.peak_bytes);
    tu_free(pool, a);
    /* Device 1 was never used. */
    assert_int_equal(tu_stats(pool, 1).peak_bytes, 0);
    tu_pool_destroy(pool);
}

/* Reserved bytes: chunks created, mapped or not; their peak stays. */
static void test_reserved(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t peak[NDEV + 1] = {0};
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).reserved_bytes, 0);
    void *a = tu_alloc(pool, 20 * TU_MIB, 0);
    void *b = tu_alloc(pool, 6 * TU_MIB, 1);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, 20 * TU_MIB);
    assert_int_equal(st.peak_reserved_bytes, 20 * TU_MIB);
    assert_int_equal(tu_stats(pool, 1).reserved_bytes, 6 * TU_MIB);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.reserved_bytes, 26 * TU_MIB);
    assert_int_equal(all.peak_reserved_bytes, 26 * TU_MIB);
    check_invariants(pool, peak);
    /* Freed: still reserved, now cached. */
    tu_free(pool, a);
    st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, 20 * TU_MIB);
    assert_int_equal(st.cached_bytes, 20 * TU_MIB);
    check_invariants(pool, peak);
    /* Trimmed: device 0 holds nothing, its peak and the pool's stay. */
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.peak_reserved_bytes, 20 * TU_MIB);
    all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.reserved_bytes, 6 * TU_MIB);
    assert_int_equal(all.peak_reserved_bytes, 26 * TU_MIB);
    /* Device 1 grows past its old peak while device 0 is empty: the pool's
     * peak is not the sum of the devices' peaks. */
    void *c = tu_alloc(pool, 10 * TU_MIB, 1);
    all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.reserved_bytes, 16 * TU_MIB);
    assert_int_equal(all.peak_reserved_bytes, 26 * TU_MIB);
    assert_int_equal(tu_stats(pool, 1).peak_reserved_bytes, 16 * TU_MIB);
    check_invariants(pool, peak);
    tu_free(pool, b);
    tu_free(pool, c);
    expect_empty_after_trim(pool);
    tu_pool_destroy(pool);
}

/* The driver time of one cold allocation of `size` on device dev and of
 * trimming it afterwards. */
static void cold_alloc_and_trim(ump_pool_t *pool, size_t size, int dev,
                                uint64_t *alloc_ns_p, uint64_t *trim_ns_p)
{
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    void *p = tu_alloc(pool, size, dev);
    ump_stats_t mid = tu_stats(pool, UMP_DEVICE_ALL);
    tu_free(pool, p);
    /* Freeing keeps the chunks mapped and cached: no driver call. */
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).driver_ns, mid.driver_ns);
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(after.reserved_bytes, 0);
    *alloc_ns_p = mid.driver_ns - before.driver_ns;
    *trim_ns_p = after.driver_ns - mid.driver_ns;
}

/* sim_driver_costs:h200: each call accounts the H200's cost per handle;
 * a cold 1 GiB allocation (max_chunk 1G: one handle) is one create, one
 * map and one set access of a 1 GiB handle, its trim one unmap and one
 * release. Nothing is slept: the test runs in no time. */
static void test_driver_costs_h200(void **state)
{
    (void)state;
    tu_sim_only("modeled driver costs are the sim's");
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:4G,"
                                      "sim_driver_costs:h200");
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.driver_ns, 0);
    uint64_t alloc_ns, trim_ns;
    cold_alloc_and_trim(pool, GIB, 1, &alloc_ns, &trim_ns);
    assert_int_equal(alloc_ns, drvcost_create_ns(GIB));
    assert_int_equal(trim_ns, drvcost_drop_ns(GIB));
    /* On the device owning the handles. */
    assert_int_equal(tu_stats(pool, 0).driver_ns, 0);
    assert_int_equal(tu_stats(pool, 1).driver_ns, alloc_ns + trim_ns);
    /* Reuse costs nothing: the second allocation of a cached size. */
    void *p = tu_alloc(pool, GIB, 1);
    uint64_t cold = tu_stats(pool, UMP_DEVICE_ALL).driver_ns;
    tu_free(pool, p);
    p = tu_alloc(pool, GIB, 1);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).driver_ns, cold);
    tu_free(pool, p);
    assert_int_equal(ump_trim(pool), 0);
    tu_pool_destroy(pool);

    /* Small handles: 8 MiB as four 2 MiB handles costs four creates, four
     * maps and four set accesses, although one set-access call covers
     * them all (per handle, as measured). */
    pool = tu_pool_create("backend:sim,sim_devices:1,sim_device_mem:1G,"
                          "sim_driver_costs:h200,max_chunk:2M");
    cold_alloc_and_trim(pool, 8 * TU_MIB, 0, &alloc_ns, &trim_ns);
    assert_int_equal(alloc_ns, 4 * drvcost_create_ns(2 * TU_MIB));
    assert_int_equal(trim_ns, 4 * drvcost_drop_ns(2 * TU_MIB));
    tu_pool_destroy(pool);
}

/* Without the key, sim accounts nothing; on cuda the time is measured,
 * for the whole pool only. */
static void test_driver_costs_off(void **state)
{
    (void)state;
    ump_pool_t *pool =
        tu_pool_create("backend:sim,sim_devices:1,sim_device_mem:1G");
    uint64_t alloc_ns, trim_ns;
    cold_alloc_and_trim(pool, 64 * TU_MIB, 0, &alloc_ns, &trim_ns);
    if (tu_on_cuda()) {
        assert_true(alloc_ns > 0);
        assert_true(trim_ns > 0);
        assert_int_equal(tu_stats(pool, 0).driver_ns, 0);
    } else {
        assert_int_equal(alloc_ns, 0);
        assert_int_equal(trim_ns, 0);
        assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).driver_ns, 0);
    }
    tu_pool_destroy(pool);
}

static void test_bad_args(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_stats_t st;
    memset(&st, 0x5c, sizeof(st));
    ump_stats_t untouched = st;
    const int bad[] = {NDEV, NDEV + 1, 1000, -4, -1000}; /* -3: the host */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ump_stats(pool, bad[i], &st), -EINVAL);
    assert_memory_equal(&st, &untouched, sizeof(st));
    assert_int_equal(ump_stats(pool, UMP_DEVICE_ALL, NULL), -EINVAL);
    assert_int_equal(ump_stats(pool, 0, NULL), -EINVAL);
    assert_int_equal(ump_stats(NULL, 0, &st), -EINVAL);
    assert_memory_equal(&st, &untouched, sizeof(st));
    tu_pool_destroy(pool);
}

struct worker {
    ump_pool_t *pool;
    int id;
    int rounds;
    int failures;
};

static void *worker_thread(void *arg)
{
    struct worker *w = arg;
    void *p[32];
    ump_set_device(w->pool, w->id % NDEV);
    for (int r = 0; r < w->rounds; r++) {
        for (int i = 0; i < 32; i++)
            if (ump_alloc(w->pool, 100 + (size_t)i * 300, NULL, &p[i]) != 0) {
                w->failures++;
                p[i] = NULL;
            }
        for (int i = 0; i < 32; i++)
            if (p[i] && ump_free(w->pool, p[i]) != 0)
                w->failures++;
    }
    return NULL;
}

/* Counters kept per thread add up, including those of exited threads. */
static void test_threads(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    enum { T = 4, ROUNDS = 100 };
    struct worker w[T];
    pthread_t t[T];
    size_t peak[NDEV + 1] = {0};

    for (int i = 0; i < T; i++) {
        w[i] = (struct worker){pool, i, ROUNDS, 0};
        assert_int_equal(pthread_create(&t[i], NULL, worker_thread, &w[i]),
                         0);
    }
    /* Statistics while the threads run: the invariants that do not depend
     * on a quiet moment. */
    for (int i = 0; i < 20; i++) {
        ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
        assert_true(st.mapped_bytes <= st.capacity);
        assert_true(st.alloc_count <= (uint64_t)T * ROUNDS * 32);
    }
    for (int i = 0; i < T; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
    }
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.alloc_count, (uint64_t)T * ROUNDS * 32);
    assert_int_equal(st.free_count, (uint64_t)T * ROUNDS * 32);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_bytes, 0);
    check_invariants(pool, peak);
    for (int d = 0; d < NDEV; d++)
        assert_true(tu_stats(pool, d).alloc_count >= (uint64_t)ROUNDS * 32);
    expect_empty_after_trim(pool);
    tu_pool_destroy(pool);
}

int main(void)
{
    tu_main_begin("test_stats");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh),
        cmocka_unit_test(test_one_alloc),
        cmocka_unit_test(test_random_books),
        cmocka_unit_test(test_failures_not_counted),
        cmocka_unit_test(test_cache_and_trim),
        cmocka_unit_test(test_peak),
        cmocka_unit_test(test_reserved),
        cmocka_unit_test(test_driver_costs_h200),
        cmocka_unit_test(test_driver_costs_off),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_threads),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
