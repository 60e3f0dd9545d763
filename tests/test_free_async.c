/*
 * ump_free_async: memory freed on a stream is not handed out again before
 * the work queued on that stream ahead of the free has run. A host function
 * that blocks on a gate the test controls holds the stream.
 */
#include "config.h"

#include <pthread.h>

#define TU_CUDA_AWARE 1
#include "testutil.h"

#define CONF "backend:sim,sim_devices:1,sim_device_mem:64M"
#define CAPACITY (64 * TU_MIB)

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    bool entered;
};

/* One gate for the whole program: a failing test leaves it closed, and the
 * teardown opens it so that the stream's worker is never stuck. */
static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                           true, false};

static void gate_close(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = false;
    gate.entered = false;
    pthread_mutex_unlock(&gate.lock);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = true;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

static void gate_fn(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->entered = true;
    pthread_cond_broadcast(&g->cond);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* Waits until the stream's worker sits in gate_fn. */
static void gate_wait_entered(void)
{
    pthread_mutex_lock(&gate.lock);
    while (!gate.entered)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

struct fixture {
    ump_pool_t *pool;
    ump_stream_t s;
};

/* CONF for the backend the tests run on (set by main). */
static const char *conf;

static int setup(void **state)
{
    static struct fixture f;
    if (ump_pool_create(conf, &f.pool) != 0)
        return -1;
    if (ump_stream_create(f.pool, 0, &f.s) != 0)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    gate_open();
    int rc = ump_stream_synchronize(f->pool, f->s);
    rc |= ump_stream_destroy(f->pool, f->s);
    rc |= ump_pool_destroy(f->pool);
    return rc ? -1 : 0;
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* Everything freed and trimmed: nothing of the pool is left in use, so no
 * deferred free was lost. */
static void expect_empty_after_trim(ump_pool_t *pool)
{
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_count, st.alloc_count - st.free_count);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.chunks_released, st.chunks_created);
}

/* Frees ptr (size bytes) on a held stream; allocations of the same and other
 * sizes never overlap it while the stream is held; once the stream has run,
 * the memory is given back like any other. */
static void held_free(struct fixture *f, size_t size)
{
    enum { N = 200, NBIG = 5 };
    static void *live[N + NBIG];
    static size_t lsize[N + NBIG];
    /* Live ones of a big size would fill the device: 1000 bytes instead. */
    const size_t others[] = {size <= TU_SLAB_MAX ? size : 1000, 256, 4096,
                             100000};
    int n = 0;
    char *ptr = tu_alloc(f->pool, size, 0);
    tu_pool_write(f->pool, ptr, size, 1);

    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    /* Work queued before the free that writes the memory: if the memory were
     * handed out meanwhile, this memset would trample its new owner. */
    assert_int_equal(ump_memset_async(f->pool, ptr, 0xa5, size, f->s), 0);
    assert_int_equal(ump_free_async(f->pool, ptr, f->s), 0);
    gate_wait_entered();

    /* Alloc-free pairs of the same size: a cache would give ptr back. */
    for (int i = 0; i < 50; i++) {
        void *q = tu_alloc(f->pool, size, 0);
        assert_false(overlaps(q, size, ptr, size));
        tu_free(f->pool, q);
    }
    /* Live ones, of several sizes, with data. */
    for (int i = 0; i < N + NBIG; i++) {
        size_t sz = i < N ? others[i % 4] : 3 * TU_MIB;
        void *q = tu_alloc(f->pool, sz, 0);
        assert_false(overlaps(q, sz, ptr, size));
        tu_pool_write(f->pool, q, sz, 100 + (uint64_t)i);
        live[n] = q;
        lsize[n] = sz;
        n++;
    }
    ump_stats_t st = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, (uint64_t)n);

    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    /* The memset ran on memory no one else held. */
    for (int i = 0; i < n; i++)
        tu_assert_pool_pattern(f->pool, live[i], lsize[i],
                               100 + (uint64_t)i);
    for (int i = 0; i < n; i++)
        tu_free(f->pool, live[i]);
    expect_empty_after_trim(f->pool);
}

static void test_held_small(void **state)
{
    held_free(*state, 4096);
}

static void test_held_tiny(void **state)
{
    held_free(*state, 1);
}

static void test_held_big(void **state)
{
    held_free(*state, 4 * TU_MIB);
}

/* After the stream ran, the whole device is there again: as many 4 MiB
 * allocations as fit in its capacity. */
static void test_reusable_after_sync(void **state)
{
    struct fixture *f = *state;
    const size_t sz = 4 * TU_MIB;
    void *p[CAPACITY / (4 * TU_MIB)];
    const int n = (int)(CAPACITY / sz);

    for (int i = 0; i < n; i++)
        p[i] = tu_alloc(f->pool, sz, 0);
    void *q = NULL;
    assert_int_equal(ump_alloc(f->pool, sz, NULL, &q), -ENOMEM);

    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(ump_free_async(f->pool, p[i], f->s), 0);
    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);

    for (int i = 0; i < n; i++)
        p[i] = tu_alloc(f->pool, sz, 0);
    for (int i = 0; i < n; i++)
        tu_free(f->pool, p[i]);
    expect_empty_after_trim(f->pool);
}

/* NULL stream: the same as ump_free, the memory is reusable at once. */
static void test_null_stream(void **state)
{
    struct fixture *f = *state;
    const size_t sz = 4 * TU_MIB;
    void *p[CAPACITY / (4 * TU_MIB)];
    const int n = (int)(CAPACITY / sz);

    for (int i = 0; i < n; i++)
        p[i] = tu_alloc(f->pool, sz, 0);
    void *q = NULL;
    assert_int_equal(ump_alloc(f->pool, sz, NULL, &q), -ENOMEM);

    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_free_async(f->pool, p[5], NULL), 0);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(after.free_count, before.free_count + 1);
    assert_int_equal(after.live_count, before.live_count - 1);
    p[5] = tu_alloc(f->pool, sz, 0);
    tu_pool_write(f->pool, p[5], sz, 5);
    tu_assert_pool_pattern(f->pool, p[5], sz, 5);
    assert_int_equal(ump_free_async(f->pool, p[5], NULL), 0);
    assert_int_equal(ump_free_async(f->pool, p[5], NULL), -EINVAL);
    for (int i = 0; i < n; i++)
        if (i != 5)
            assert_int_equal(ump_free_async(f->pool, p[i], NULL), 0);
    expect_empty_after_trim(f->pool);
}

/* A second free of memory whose async free is pending, and after it ran. */
static void test_double_free_async(void **state)
{
    struct fixture *f = *state;
    void *small = tu_alloc(f->pool, 512, 0);
    void *big = tu_alloc(f->pool, 6 * TU_MIB, 0);

    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    assert_int_equal(ump_free_async(f->pool, small, f->s), 0);
    assert_int_equal(ump_free_async(f->pool, big, f->s), 0);
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    void *const both[] = {small, big};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ump_free_async(f->pool, both[k], f->s), -EINVAL);
        assert_int_equal(ump_free_async(f->pool, both[k], NULL), -EINVAL);
        assert_int_equal(ump_free(f->pool, both[k]), -EINVAL);
    }
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);

    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ump_free_async(f->pool, both[k], f->s), -EINVAL);
        assert_int_equal(ump_free(f->pool, both[k]), -EINVAL);
    }
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    expect_empty_after_trim(f->pool);
}

/* Counters move at the call, not when the stream runs. */
static void test_counts(void **state)
{
    struct fixture *f = *state;
    void *p = tu_alloc(f->pool, 1000, 0);
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);

    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    assert_int_equal(ump_free_async(f->pool, p, f->s), 0);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(after.free_count, before.free_count + 1);
    assert_int_equal(after.alloc_count, before.alloc_count);
    assert_int_equal(after.live_count, before.live_count - 1);
    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    expect_empty_after_trim(f->pool);
}

/* Many pending frees of mixed sizes; synchronising another stream releases
 * none of them. */
static void test_many_pending_other_stream(void **state)
{
    struct fixture *f = *state;
    enum { N = 60 };
    void *p[N];
    size_t sz[N];
    ump_stream_t other = NULL;
    assert_int_equal(ump_stream_create(f->pool, 0, &other), 0);

    for (int i = 0; i < N; i++) {
        sz[i] = i % 20 == 0 ? TU_CHUNK + 1 : 256 * (size_t)(1 + i % 7);
        p[i] = tu_alloc(f->pool, sz[i], 0);
    }
    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(ump_free_async(f->pool, p[i], f->s), 0);
    assert_int_equal(ump_stream_synchronize(f->pool, other), 0);

    for (int r = 0; r < 3; r++) {
        void *q[N];
        for (int i = 0; i < N; i++) {
            q[i] = tu_alloc(f->pool, sz[i], 0);
            for (int k = 0; k < N; k++)
                assert_false(overlaps(q[i], sz[i], p[k], sz[k]));
        }
        for (int i = 0; i < N; i++)
            tu_free(f->pool, q[i]);
    }
    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    assert_int_equal(ump_stream_destroy(f->pool, other), 0);
    expect_empty_after_trim(f->pool);
}

struct async_freer {
    ump_pool_t *pool;
    ump_stream_t s;
    void **ptrs;
    int n;
    int rc;
};

static void *async_free_thread(void *arg)
{
    struct async_freer *a = arg;
    for (int i = 0; i < a->n; i++) {
        int rc = ump_free_async(a->pool, a->ptrs[i], a->s);
        if (rc != 0 && a->rc == 0)
            a->rc = rc;
    }
    return NULL;
}

/* Five size classes: few slabs, so the small device never fills. */
#define SIZE_OF(i) (64 + (size_t)((i) % 5) * 1000)

/* Another thread frees on the stream what this one allocated. */
static void test_other_thread(void **state)
{
    struct fixture *f = *state;
    enum { N = 100 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = tu_alloc(f->pool, SIZE_OF(i), 0);
        tu_pool_write(f->pool, p[i], SIZE_OF(i), (uint64_t)i);
    }
    gate_close();
    assert_int_equal(ump_launch_host_func(f->pool, f->s, gate_fn, &gate), 0);
    struct async_freer a = {f->pool, f->s, p, N, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, async_free_thread, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(a.rc, 0);
    for (int i = 0; i < N; i++) {
        void *q = tu_alloc(f->pool, SIZE_OF(i), 0);
        for (int k = 0; k < N; k++)
            assert_false(overlaps(q, SIZE_OF(i), p[k], SIZE_OF(k)));
        tu_free(f->pool, q);
    }
    gate_open();
    assert_int_equal(ump_stream_synchronize(f->pool, f->s), 0);
    expect_empty_after_trim(f->pool);
}

/* A deferred free whose stream is idle completes at once and may release
 * its slab: the call must not touch the slab afterwards (ASan checks; with
 * 1 MiB objects a slab holds two, so the fourth free empties the second). */
static void test_idle_stream_releases_slab(void **state)
{
    (void)state;
    tu_sim_only("the slab layout is the sim pool's");
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:64M,tcache:false");
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = tu_alloc(pool, TU_MIB, 0);
    for (int i = 0; i < 3; i++)
        tu_free(pool, p[i]);
    assert_int_equal(ump_free_async(pool, p[3], NULL), 0);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_bytes, 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    tu_main_begin("test_free_async");
    char buf[512];
    conf = tu_config_or_exit("test_free_async", CONF, buf, sizeof(buf));
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_held_small),
        T(test_held_tiny),
        T(test_held_big),
        T(test_reusable_after_sync),
        T(test_null_stream),
        T(test_double_free_async),
        T(test_counts),
        T(test_many_pending_other_stream),
        T(test_other_thread),
        cmocka_unit_test(test_idle_stream_releases_slab),
    };
#undef T
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
