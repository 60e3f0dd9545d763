/* Basic allocation through the public API (sim; cuda with
 * UMPOOL_TEST_BACKEND=cuda, see testutil.h). */
#include "config.h"

#include <pthread.h>

#define TU_CUDA_AWARE 1
#include "testutil.h"

/* One device where the test needs no more, so that it runs on a one-GPU
 * machine under UMPOOL_TEST_BACKEND=cuda too. */
#define CONF1 "backend:sim,sim_devices:1,sim_device_mem:256M"
#define CONF4 "backend:sim,sim_devices:4,sim_device_mem:64M"

static const size_t sizes[] = {
    1,          7,          255,         256,       257,
    1000,       4096,       4097,        65536,     100000,
    TU_MIB - 1, TU_MIB,     TU_MIB + 1,  TU_CHUNK,  TU_CHUNK + 1,
    5 * TU_MIB, 9 * TU_MIB + 3,
};

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(ump_version(), UMP_VERSION);
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", UMP_VERSION_MAJOR,
             UMP_VERSION_MINOR, UMP_VERSION_PATCH);
    assert_string_equal(ump_version_string(), expect);
}

static void test_strerror(void **state)
{
    (void)state;
    const int errs[] = {-EINVAL, -ENOMEM, -EBUSY, -ENOTRECOVERABLE};
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
        const char *s = ump_strerror(errs[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
    }
    assert_string_not_equal(ump_strerror(-EINVAL), ump_strerror(-ENOMEM));
}

static void test_sizes_rw(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    void *ptrs[sizeof(sizes) / sizeof(sizes[0])];

    for (size_t i = 0; i < n; i++) {
        ptrs[i] = tu_alloc(pool, sizes[i], UMP_DEVICE_CURRENT);
        tu_pool_write(pool, ptrs[i], sizes[i], i + 1);
    }
    /* Checked only after every allocation is made, so that an overlap
     * between any two would show. */
    for (size_t i = 0; i < n; i++) {
        tu_assert_pool_pattern(pool, ptrs[i], sizes[i], i + 1);
        ump_ptr_info_t info = tu_info(pool, ptrs[i]);
        assert_ptr_equal(info.base, ptrs[i]);
        assert_int_equal(info.size, sizes[i]);
        assert_int_equal(info.device, 0);
        assert_int_equal(info.tier, UMP_TIER_DEVICE);
    }
    for (size_t i = 0; i < n; i++)
        tu_free(pool, ptrs[i]);
    tu_pool_destroy(pool);
}

/* Many small objects: aligned, pairwise disjoint, each keeps its data. */
static void test_many_small_disjoint(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    enum { N = 2000 };
    static void *ptr[N];
    static size_t size[N];
    uint64_t rng = 42;

    for (int i = 0; i < N; i++) {
        size[i] = 1 + tu_rand(&rng) % 8192;
        ptr[i] = tu_alloc(pool, size[i], UMP_DEVICE_CURRENT);
        tu_pool_write(pool, ptr[i], size[i], 1000 + (uint64_t)i);
    }
    for (int i = 0; i < N; i++)
        tu_assert_pool_pattern(pool, ptr[i], size[i], 1000 + (uint64_t)i);
    /* Free every third, reallocate, and check that the survivors did not
     * move or change. */
    for (int i = 0; i < N; i += 3)
        tu_free(pool, ptr[i]);
    for (int i = 0; i < N; i += 3) {
        ptr[i] = tu_alloc(pool, size[i], UMP_DEVICE_CURRENT);
        tu_pool_write(pool, ptr[i], size[i], 5000 + (uint64_t)i);
    }
    for (int i = 0; i < N; i++)
        tu_assert_pool_pattern(pool, ptr[i], size[i],
                               (i % 3 ? 1000 : 5000) + (uint64_t)i);
    for (int i = 0; i < N; i++)
        tu_free(pool, ptr[i]);
    tu_pool_destroy(pool);
}

/* ump_ptr_info on every byte class of an allocation: the first, an interior
 * one, the last; the chunk it reports holds the byte. */
static void test_ptr_info_interior(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);

    for (size_t i = 0; i < n; i++) {
        size_t sz = sizes[i];
        char *p = tu_alloc(pool, sz, UMP_DEVICE_CURRENT);
        const size_t offs[] = {0, sz / 2, sz - 1};
        for (size_t k = 0; k < 3; k++) {
            const char *q = p + offs[k];
            ump_ptr_info_t info = tu_info(pool, q);
            assert_ptr_equal(info.base, p);
            assert_int_equal(info.size, sz);
            assert_int_equal(info.tier, UMP_TIER_DEVICE);
            assert_int_equal(info.device, 0);
            assert_non_null(info.chunk_base);
            assert_true(info.chunk_size > 0);
            assert_true((const char *)info.chunk_base <= q);
            assert_true(q < (const char *)info.chunk_base + info.chunk_size);
            if (sz > TU_SLAB_MAX)
                tu_assert_chunk_size(info.chunk_size);
        }
        tu_free(pool, p);
    }
    tu_pool_destroy(pool);
}

/* Walking a run chunk by chunk with chunk_base + chunk_size covers it. */
static void test_ptr_info_walk(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const size_t sz = 21 * TU_MIB + 12345;
    char *p = tu_alloc(pool, sz, 0);
    char *q = p;
    size_t steps = 0;

    while (q < p + sz) {
        ump_ptr_info_t info = tu_info(pool, q);
        assert_ptr_equal(info.base, p);
        assert_int_equal(info.device, 0);
        tu_assert_chunk_size(info.chunk_size);
        char *next = (char *)info.chunk_base + info.chunk_size;
        assert_true(next > q);
        q = next;
        steps++;
        assert_true(steps <= sz / TU_CHUNK + 2);
    }
    /* A cold run is one chunk of exactly its granules (mem/chunks.h). */
    assert_int_equal(steps, 1);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

static void test_hints_device(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF4);
    int ndev = ump_device_count(pool);
    assert_int_equal(ndev, 4);

    for (int d = 0; d < ndev; d++) {
        void *small = tu_alloc(pool, 3000, d);
        void *big = tu_alloc(pool, 3 * TU_MIB, d);
        assert_int_equal(tu_info(pool, small).device, d);
        assert_int_equal(tu_info(pool, big).device, d);
        assert_int_equal(tu_info(pool, (char *)big + 3 * TU_MIB - 1).device,
                         d);
        tu_pool_write(pool, big, 3 * TU_MIB, (uint64_t)d);
        tu_assert_pool_pattern(pool, big, 3 * TU_MIB, (uint64_t)d);
        tu_free(pool, small);
        tu_free(pool, big);
    }
    tu_pool_destroy(pool);
}

/* NULL hints, UMP_HINTS_INIT and "local" all follow the current device. */
static void test_current_device(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF4);
    int dev = -1;
    void *p;

    assert_int_equal(ump_get_device(pool, &dev), 0);
    assert_int_equal(dev, 0);
    assert_int_equal(ump_alloc(pool, 512, NULL, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 0);
    tu_free(pool, p);

    assert_int_equal(ump_set_device(pool, 3), 0);
    assert_int_equal(ump_get_device(pool, &dev), 0);
    assert_int_equal(dev, 3);

    assert_int_equal(ump_alloc(pool, 512, NULL, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 3);
    tu_free(pool, p);

    ump_hints_t h = UMP_HINTS_INIT;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 3);
    tu_free(pool, p);

    h.policy = "local";
    assert_int_equal(ump_alloc(pool, 700, &h, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 3);
    tu_free(pool, p);

    /* An explicit device wins over the current one. */
    h.device = 1;
    assert_int_equal(ump_alloc(pool, 700, &h, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 1);
    tu_free(pool, p);

    assert_int_equal(ump_set_device(pool, 0), 0);
    assert_int_equal(ump_alloc(pool, 512, NULL, &p), 0);
    assert_int_equal(tu_info(pool, p).device, 0);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

struct dev_probe {
    ump_pool_t *pool;
    int rc_get;
    int device;
    int alloc_device;
    void *ptr;
};

static void *probe_thread(void *arg)
{
    struct dev_probe *pr = arg;
    void *p = NULL;
    pr->rc_get = ump_get_device(pr->pool, &pr->device);
    if (ump_alloc(pr->pool, 1024, NULL, &p) == 0) {
        ump_ptr_info_t info;
        if (ump_ptr_info(pr->pool, p, &info) == 0)
            pr->alloc_device = info.device;
        pr->ptr = p;
    }
    return NULL;
}

/* The current device is per thread: another thread still starts at 0. */
static void test_current_device_per_thread(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF4);
    assert_int_equal(ump_set_device(pool, 2), 0);

    struct dev_probe pr = {pool, -1, -1, -1, NULL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, probe_thread, &pr), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(pr.rc_get, 0);
    assert_int_equal(pr.device, 0);
    assert_non_null(pr.ptr);
    assert_int_equal(pr.alloc_device, 0);

    /* This thread's setting is untouched by the other thread. */
    int dev = -1;
    assert_int_equal(ump_get_device(pool, &dev), 0);
    assert_int_equal(dev, 2);
    /* Frees from a thread other than the allocating one are allowed. */
    tu_free(pool, pr.ptr);
    tu_pool_destroy(pool);
}

/* The current device is per pool. */
static void test_current_device_per_pool(void **state)
{
    (void)state;
    ump_pool_t *a = tu_pool_create(CONF4);
    ump_pool_t *b = tu_pool_create(CONF4);
    int dev = -1;

    assert_int_equal(ump_set_device(a, 3), 0);
    assert_int_equal(ump_get_device(b, &dev), 0);
    assert_int_equal(dev, 0);
    assert_int_equal(ump_set_device(b, 1), 0);
    assert_int_equal(ump_get_device(a, &dev), 0);
    assert_int_equal(dev, 3);
    assert_int_equal(ump_get_device(b, &dev), 0);
    assert_int_equal(dev, 1);

    void *pa = tu_alloc(a, 100, UMP_DEVICE_CURRENT);
    void *pb = tu_alloc(b, 100, UMP_DEVICE_CURRENT);
    assert_int_equal(tu_info(a, pa).device, 3);
    assert_int_equal(tu_info(b, pb).device, 1);
    tu_free(a, pa);
    tu_free(b, pb);
    tu_pool_destroy(b);
    tu_pool_destroy(a);
}

static void test_device_count(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:3,"
                                      "sim_device_mem:32M");
    assert_int_equal(ump_device_count(pool), 3);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.capacity, 3 * 32 * TU_MIB);
    tu_pool_destroy(pool);

    pool = tu_pool_create("backend:sim,sim_topology:dgx-h200");
    assert_int_equal(ump_device_count(pool), 8);
    ump_stats_t d0 = tu_stats(pool, 0);
    all = tu_stats(pool, UMP_DEVICE_ALL);
    /* An H200 has 141 GB of memory (about 131 GiB): the file may state
     * it either way. */
    assert_true(d0.capacity >= (size_t)130 << 30);
    assert_int_equal(all.capacity, 8 * d0.capacity);
    for (int d = 1; d < 8; d++)
        assert_int_equal(tu_stats(pool, d).capacity, d0.capacity);
    void *p = tu_alloc(pool, 6 * TU_MIB, 7);
    assert_int_equal(tu_info(pool, p).device, 7);
    tu_pool_write(pool, p, 6 * TU_MIB, 7);
    tu_assert_pool_pattern(pool, p, 6 * TU_MIB, 7);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

struct xfree {
    ump_pool_t *pool;
    void **ptrs;
    size_t *sizes;
    int n;
    int failures;
};

static void *alloc_thread(void *arg)
{
    struct xfree *x = arg;
    for (int i = 0; i < x->n; i++) {
        x->sizes[i] = 64 + (size_t)i * 977 % 300000;
        if (ump_alloc(x->pool, x->sizes[i], NULL, &x->ptrs[i]) != 0) {
            x->ptrs[i] = NULL;
            x->failures++;
            continue;
        }
        if (tu_pool_fill(x->pool, x->ptrs[i], x->sizes[i], (uint64_t)i) != 0)
            x->failures++;
    }
    return NULL;
}

/* Memory allocated by a thread that has exited is freed by another. */
static void test_cross_thread_free(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    enum { N = 300 };
    static void *ptrs[N];
    static size_t szs[N];
    struct xfree x = {pool, ptrs, szs, N, 0};
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, alloc_thread, &x), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(x.failures, 0);
    for (int i = 0; i < N; i++) {
        tu_assert_pool_pattern(pool, ptrs[i], szs[i], (uint64_t)i);
        tu_free(pool, ptrs[i]);
    }
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.alloc_count, N);
    assert_int_equal(st.free_count, N);
    tu_pool_destroy(pool);
}

/* Freed memory is reused: allocating and freeing the same sizes over and
 * over does not create new chunks once the first round is done. */
static void test_reuse(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const size_t szs[] = {100, 5000, 300000, 3 * TU_MIB};
    void *p[4];

    for (int k = 0; k < 4; k++)
        p[k] = tu_alloc(pool, szs[k], UMP_DEVICE_CURRENT);
    for (int k = 0; k < 4; k++)
        tu_free(pool, p[k]);
    uint64_t created = tu_stats(pool, UMP_DEVICE_ALL).chunks_created;
    assert_true(created > 0);
    for (int round = 0; round < 200; round++) {
        for (int k = 0; k < 4; k++)
            p[k] = tu_alloc(pool, szs[k], UMP_DEVICE_CURRENT);
        for (int k = 0; k < 4; k++)
            tu_free(pool, p[k]);
    }
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).chunks_created, created);
    tu_pool_destroy(pool);
}

/* A thread using more pools than it keeps thread-local slots for (8)
 * still has its current device in each, and its caches go back to every
 * pool when it ends. */
#define MANY_POOLS 11

static void *use_many_pools(void *arg)
{
    ump_pool_t **pools = arg;
    assert_int_equal(ump_set_device(pools[0], 3), 0);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < MANY_POOLS; i++) {
            void *p = tu_alloc(pools[i], 1000, UMP_DEVICE_CURRENT);
            void *q = tu_alloc(pools[i], 3 * TU_MIB, UMP_DEVICE_CURRENT);
            tu_free(pools[i], p);
            tu_free(pools[i], q);
        }
    int dev = -1;
    assert_int_equal(ump_get_device(pools[0], &dev), 0);
    assert_int_equal(dev, 3);
    void *p = tu_alloc(pools[0], 1000, UMP_DEVICE_CURRENT);
    assert_int_equal(tu_info(pools[0], p).device, 3);
    tu_free(pools[0], p);
    return NULL;
}

static void test_many_pools_per_thread(void **state)
{
    (void)state;
    tu_sim_only("the pools are simulated machines of 4 devices");
    ump_pool_t *pools[MANY_POOLS];
    for (int i = 0; i < MANY_POOLS; i++)
        pools[i] = tu_pool_create("backend:sim,sim_devices:4,sim_device_mem:64M");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, use_many_pools, pools), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    for (int i = 0; i < MANY_POOLS; i++) {
        ump_stats_t st = tu_stats(pools[i], UMP_DEVICE_ALL);
        assert_int_equal(st.live_count, 0);
        assert_int_equal(st.alloc_count, i == 0 ? 7 : 6);
        tu_pool_destroy(pools[i]);
    }
}

int main(void)
{
    tu_main_begin("test_alloc");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_sizes_rw),
        cmocka_unit_test(test_many_small_disjoint),
        cmocka_unit_test(test_ptr_info_interior),
        cmocka_unit_test(test_ptr_info_walk),
        cmocka_unit_test(test_hints_device),
        cmocka_unit_test(test_current_device),
        cmocka_unit_test(test_current_device_per_thread),
        cmocka_unit_test(test_current_device_per_pool),
        cmocka_unit_test(test_device_count),
        cmocka_unit_test(test_cross_thread_free),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_many_pools_per_thread),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
