/*
 * Pinned host memory of the pool: ump_host_alloc / ump_host_free (cached,
 * from the pool's size classes over pinned host chunks), and overflow:host
 * (device allocations that fit on no device, on pinned host memory at pool
 * addresses). Sim backend: its host chunks are what the host tier uses,
 * populated when made, as pinning does.
 */
#include "config.h"

#include <pthread.h>
#include <unistd.h>

#include "testutil.h"
#include "backend/backend.h"
#include "mem/pool.h"

#define CONF "backend:sim,sim_devices:2,sim_device_mem:16M,pinned_limit:32M"

static void *host_alloc(ump_pool_t *pool, size_t size)
{
    void *p = NULL;
    int rc = ump_host_alloc(pool, size, &p);
    if (rc)
        fail_msg("ump_host_alloc(%zu) = %d (%s)", size, rc, ump_strerror(rc));
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % TU_ALIGN, 0);
    return p;
}

static void host_free(ump_pool_t *pool, void *p)
{
    int rc = ump_host_free(pool, p);
    if (rc)
        fail_msg("ump_host_free(%p) = %d (%s)", p, rc, ump_strerror(rc));
}

/* Small and big ones: the CPU reads and writes them, the pool says they
 * are host memory, and they count on the host, not on a device. */
static void test_basic(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t sizes[] = {100, 4 * TU_KIB, 3 * TU_MIB};
    void *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = host_alloc(pool, sizes[i]);
        tu_fill(p[i], sizes[i], (uint64_t)i + 1);
        ump_ptr_info_t in = tu_info(pool, (char *)p[i] + sizes[i] - 1);
        assert_ptr_equal(in.base, p[i]);
        assert_int_equal(in.size,
                         TU_ALIGN_UP(sizes[i], (size_t)sysconf(_SC_PAGESIZE)));
        assert_int_equal(in.device, -1);
        assert_int_equal(in.tier, UMP_TIER_HOST);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(tu_check(p[i], sizes[i], (uint64_t)i + 1),
                         sizes[i]);
    ump_stats_t h = tu_stats(pool, UMP_LOC_HOST);
    assert_int_equal(h.live_count, 3);
    assert_int_equal(h.capacity, 32 * TU_MIB);
    assert_true(h.reserved_bytes >= 2 * TU_CHUNK);
    ump_stats_t d = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(d.live_count, 0);
    assert_int_equal(d.reserved_bytes, 0);
    for (int i = 0; i < 3; i++)
        host_free(pool, p[i]);
    h = tu_stats(pool, UMP_LOC_HOST);
    assert_int_equal(h.live_count, 0);
    assert_int_equal(h.alloc_count, 3);
    assert_int_equal(h.free_count, 3);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, UMP_LOC_HOST).reserved_bytes, 0);
    tu_pool_destroy(pool);
}

/* A freed size comes back with no new chunk: the cache. */
static void test_reuse(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t sizes[] = {64 * TU_KIB, 4 * TU_MIB};
    for (int i = 0; i < 2; i++) {
        void *a = host_alloc(pool, sizes[i]);
        uint64_t made = tu_stats(pool, UMP_LOC_HOST).chunks_created;
        host_free(pool, a);
        for (int k = 0; k < 100; k++) {
            void *b = host_alloc(pool, sizes[i]);
            assert_ptr_equal(b, a);
            host_free(pool, b);
        }
        assert_int_equal(tu_stats(pool, UMP_LOC_HOST).chunks_created, made);
    }
    tu_pool_destroy(pool);
}

/* Each free takes its own: ump_free refuses ump_host_alloc's pointers and
 * ump_host_free everything else, and nothing changes when they do. */
static void test_pairing(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *h = host_alloc(pool, 4 * TU_KIB), *hb = host_alloc(pool, 4 * TU_MIB);
    void *d = tu_alloc(pool, 4 * TU_KIB, 0);
    char local[64];
    tu_fill(h, 4 * TU_KIB, 7);
    assert_int_equal(ump_free(pool, h), -EINVAL);
    assert_int_equal(ump_free(pool, hb), -EINVAL);
    assert_int_equal(ump_free_async(pool, h, NULL), -EINVAL);
    assert_int_equal(ump_host_free(pool, d), -EINVAL);
    assert_int_equal(ump_host_free(pool, (char *)h + 256), -EINVAL);
    assert_int_equal(ump_host_free(pool, local), -EINVAL);
    assert_int_equal(ump_host_free(pool, NULL), 0);
    assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 2);
    assert_int_equal(tu_stats(pool, 0).live_count, 1);
    assert_int_equal(tu_check(h, 4 * TU_KIB, 7), 4 * TU_KIB);
    host_free(pool, h);
    host_free(pool, hb);
    assert_int_equal(ump_host_free(pool, h), -EINVAL); /* twice */
    assert_int_equal(ump_host_free(pool, hb), -EINVAL);
    tu_free(pool, d);
    assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 0);
    assert_int_equal(ump_host_alloc(pool, 0, &h), -EINVAL);
    assert_int_equal(ump_host_alloc(pool, 1, NULL), -EINVAL);
    assert_int_equal(ump_host_alloc(NULL, 1, &h), -EINVAL);
    tu_pool_destroy(pool);
}

/* pinned_limit bounds the host places together; at the limit the next
 * allocation fails and the pool is as it was. */
static void test_limit(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:16M,pinned_limit:8M");
    void *p[8];
    int n = 0;
    void *q;
    while (n < 8 && ump_host_alloc(pool, 3 * TU_MIB, &q) == 0)
        p[n++] = q;
    assert_int_equal(n, 2); /* 4 MiB each: two fit in 8 MiB */
    assert_int_equal(ump_host_alloc(pool, 3 * TU_MIB, &q), -ENOMEM);
    ump_stats_t h = tu_stats(pool, UMP_LOC_HOST);
    assert_true(h.reserved_bytes <= 8 * TU_MIB);
    assert_int_equal(h.live_count, 2);
    host_free(pool, p[1]);
    p[1] = host_alloc(pool, 3 * TU_MIB);
    for (int i = 0; i < n; i++)
        host_free(pool, p[i]);
    tu_pool_destroy(pool);
}

/* Host chunks come from the backend's pinned host memory: when that
 * fails, the allocation fails cleanly, and device memory is not used. */
static void test_pinning_fails(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    assert_int_equal(sim_inject_fault(pool->bctx, "host_chunk_create", 1,
                                      -EIO),
                     0);
    void *p;
    assert_int_equal(ump_host_alloc(pool, 4 * TU_KIB, &p), -EIO);
    assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).reserved_bytes, 0);
    /* Device chunks failing does not touch host memory. */
    assert_int_equal(sim_inject_fault(pool->bctx, "chunk_create", 1, -EIO), 0);
    p = host_alloc(pool, 4 * TU_KIB);
    host_free(pool, p);
    assert_int_equal(sim_inject_fault(pool->bctx, "chunk_create", 0, 0), 0);
    tu_pool_destroy(pool);
}

/* Every device reaches it: copies on each device's stream, both ways. */
static void test_devices_reach_it(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t n = 3 * TU_MIB;
    void *h = host_alloc(pool, n), *back = host_alloc(pool, n);
    tu_fill(h, n, 11);
    for (int dev = 0; dev < 2; dev++) {
        void *d = tu_alloc(pool, n, dev);
        ump_stream_t s;
        assert_int_equal(ump_stream_create(pool, dev, &s), 0);
        assert_int_equal(ump_memcpy_async(pool, d, h, n, s), 0);
        memset(back, 0, n);
        assert_int_equal(ump_memcpy_async(pool, back, d, n, s), 0);
        assert_int_equal(ump_stream_synchronize(pool, s), 0);
        assert_int_equal(tu_check(back, n, 11), n);
        assert_int_equal(ump_stream_destroy(pool, s), 0);
        tu_free(pool, d);
    }
    host_free(pool, h);
    host_free(pool, back);
    tu_pool_destroy(pool);
}

/* Pinned host memory never moves: eviction refuses it, acquire has
 * nothing to do, and the data stay. */
static void test_not_moved(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *h = host_alloc(pool, 4 * TU_MIB);
    tu_fill(h, 4 * TU_MIB, 3);
    assert_int_not_equal(ump_evict(pool, h, 0, UMP_TIER_HOST), 0);
    assert_int_equal(tu_info(pool, h).tier, UMP_TIER_HOST);
    assert_int_equal(tu_check(h, 4 * TU_MIB, 3), 4 * TU_MIB);
    host_free(pool, h);
    tu_pool_destroy(pool);
}

static void test_destroy_busy(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *h = host_alloc(pool, 100);
    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    host_free(pool, h);
    tu_pool_destroy(pool);
}

#define NTHREADS 4
#define ROUNDS 2000

static void *churn(void *arg)
{
    ump_pool_t *pool = arg;
    uintptr_t bad = 0;
    void *keep[8] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        size_t size = (size_t)256 << (i % 12); /* 256 B .. 512 KiB */
        int k = i % 8;
        if (keep[k]) {
            bad += *(volatile unsigned char *)keep[k] != (unsigned char)k;
            bad += ump_host_free(pool, keep[k]) != 0;
        }
        keep[k] = NULL;
        if (ump_host_alloc(pool, size, &keep[k])) {
            bad++;
            continue;
        }
        *(unsigned char *)keep[k] = (unsigned char)k;
    }
    for (int k = 0; k < 8; k++)
        bad += keep[k] && ump_host_free(pool, keep[k]) != 0;
    return (void *)bad;
}

static void test_threads(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, pool), 0);
    for (int i = 0; i < NTHREADS; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_int_equal((uintptr_t)bad, 0);
    }
    ump_stats_t h = tu_stats(pool, UMP_LOC_HOST);
    assert_int_equal(h.live_count, 0);
    assert_int_equal(h.alloc_count, NTHREADS * ROUNDS);
    tu_pool_destroy(pool);
}

/* Whole pages, page-aligned, as cuMemHostAlloc's. */
static void test_page_aligned(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t sizes[] = {1, 100, 5000, 6000, 9000, 70000, 300000, 3 * TU_MIB};
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = host_alloc(pool, sizes[i]);
        assert_int_equal((uintptr_t)p[i] % page, 0);
        ump_ptr_info_t in = tu_info(pool, p[i]);
        assert_int_equal(in.size, TU_ALIGN_UP(sizes[i], page));
        assert_int_equal(in.kind, UMP_KIND_HOST);
    }
    for (int i = 0; i < 8; i++)
        host_free(pool, p[i]);
    tu_pool_destroy(pool);
}

static void *alloc_and_exit(void *arg)
{
    void *p = NULL;
    return ump_host_alloc(arg, 100, &p) ? NULL : p;
}

/* A live allocation of a thread that has exited still counts: the pool
 * is not destroyed under it. */
static void test_exited_thread(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    pthread_t t;
    void *p = NULL;
    assert_int_equal(pthread_create(&t, NULL, alloc_and_exit, pool), 0);
    pthread_join(t, &p);
    assert_non_null(p);
    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    host_free(pool, p);
    tu_pool_destroy(pool);
}

/* The host places share pinned_limit: memory one holds unused (cached)
 * goes back for the other, which would otherwise fail until ump_trim. */
static void test_shared_budget(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:16M,pinned_limit:8M,"
        "overflow:host");
    void *h[2], *o[2];
    for (int i = 0; i < 2; i++)
        h[i] = host_alloc(pool, 4 * TU_MIB);
    for (int i = 0; i < 2; i++)
        host_free(pool, h[i]);
    void *dev = tu_alloc(pool, 16 * TU_MIB, 0);
    for (int i = 0; i < 2; i++) { /* overflow, in the pinned cache's room */
        assert_int_equal(ump_alloc(pool, 4 * TU_MIB, NULL, &o[i]), 0);
        assert_int_equal(tu_info(pool, o[i]).tier, UMP_TIER_HOST);
    }
    assert_true(tu_stats(pool, UMP_LOC_HOST).reserved_bytes <= 8 * TU_MIB);
    for (int i = 0; i < 2; i++)
        tu_free(pool, o[i]);
    for (int i = 0; i < 2; i++) /* and back */
        h[i] = host_alloc(pool, 4 * TU_MIB);
    for (int i = 0; i < 2; i++)
        host_free(pool, h[i]);
    tu_free(pool, dev);
    tu_pool_destroy(pool);
}

/* Peaks: the devices' figures do not count host memory, and the host's
 * are of both places together, never above their one budget. */
static void test_peaks(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:16M,pinned_limit:8M,"
        "overflow:host");
    void *h = host_alloc(pool, 8 * TU_MIB);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.peak_reserved_bytes, 0);
    assert_int_equal(all.peak_bytes, 0);
    host_free(pool, h);
    assert_int_equal(ump_trim(pool), 0);
    void *dev = tu_alloc(pool, 16 * TU_MIB, 0), *o = NULL;
    assert_int_equal(ump_alloc(pool, 8 * TU_MIB, NULL, &o), 0);
    ump_stats_t host = tu_stats(pool, UMP_LOC_HOST);
    assert_int_equal(host.peak_reserved_bytes, 8 * TU_MIB);
    assert_int_equal(host.peak_bytes, 8 * TU_MIB);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).peak_reserved_bytes,
                     16 * TU_MIB);
    tu_free(pool, o);
    tu_free(pool, dev);
    tu_pool_destroy(pool);
}

/* --- overflow:host ------------------------------------------------------ */

#define OVER "backend:sim,sim_devices:2,sim_device_mem:16M,pinned_limit:64M"

/* Fills both devices (local spills to the peer), then the next allocation
 * goes to pinned host memory with overflow:host, and fails without. */
static void test_overflow(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        ump_pool_t *pool = tu_pool_create(on ? OVER ",overflow:host" : OVER);
        void *dev[4];
        for (int i = 0; i < 4; i++)
            dev[i] = tu_alloc(pool, 8 * TU_MIB, 0);
        assert_int_equal(tu_info(pool, dev[3]).device, 1);
        void *p = NULL;
        int rc = ump_alloc(pool, 6 * TU_MIB, NULL, &p);
        if (!on) {
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 0);
        } else {
            assert_int_equal(rc, 0);
            ump_ptr_info_t in = tu_info(pool, p);
            assert_int_equal(in.tier, UMP_TIER_HOST);
            assert_int_equal(in.device, -1);
            assert_int_equal(in.kind, UMP_KIND_DEVICE);
            assert_int_equal(in.size, 6 * TU_MIB);
            /* A device reaches it: a copy from it on device 0's stream. */
            tu_fill(p, 6 * TU_MIB, 5);
            assert_int_equal(tu_pool_copy(pool, dev[0], p, 6 * TU_MIB), 0);
            assert_int_equal(tu_check(dev[0], 6 * TU_MIB, 5), 6 * TU_MIB);
            ump_stats_t h = tu_stats(pool, UMP_LOC_HOST);
            assert_int_equal(h.live_count, 1);
            assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).live_count, 4);
            /* A small one overflows too (a slab on the host). */
            void *s = NULL;
            assert_int_equal(ump_alloc(pool, 4 * TU_KIB, NULL, &s), 0);
            assert_int_equal(tu_info(pool, s).tier, UMP_TIER_HOST);
            /* Its free is ump_free's, not ump_host_free's. */
            assert_int_equal(ump_host_free(pool, p), -EINVAL);
            assert_int_equal(ump_host_free(pool, s), -EINVAL);
            tu_free(pool, s);
            assert_int_equal(ump_free_async(pool, p, NULL), 0);
            assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 0);
        }
        for (int i = 0; i < 4; i++)
            tu_free(pool, dev[i]);
        tu_pool_destroy(pool);
    }
}

/* NO_SPILL keeps an allocation off the other devices, not off the host;
 * offloadable memory never overflows (it is what moves to make room). */
static void test_overflow_hints(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(OVER ",overflow:host");
    void *a = tu_alloc(pool, 16 * TU_MIB, 0);
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_NO_SPILL;
    void *p = NULL;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), 0);
    assert_int_equal(tu_info(pool, p).tier, UMP_TIER_HOST);
    assert_int_equal(tu_stats(pool, 1).live_count, 0);
    void *b = tu_alloc(pool, 16 * TU_MIB, 1);
    h.flags = UMP_HINT_OFFLOAD;
    void *q = NULL;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &q), -ENOMEM);
    tu_free(pool, p);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_pool_destroy(pool);
}

/* Overflow and ump_host_alloc share pinned_limit: past it, -ENOMEM. */
static void test_overflow_limit(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:16M,pinned_limit:8M,"
        "overflow:host");
    void *a = tu_alloc(pool, 16 * TU_MIB, 0);
    void *h = host_alloc(pool, 4 * TU_MIB);
    void *p = NULL;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, NULL, &p), 0);
    void *q = NULL;
    assert_int_equal(ump_alloc(pool, 2 * TU_MIB, NULL, &q), -ENOMEM);
    assert_int_equal(ump_host_alloc(pool, 2 * TU_MIB, &q), -ENOMEM);
    assert_int_equal(tu_stats(pool, UMP_LOC_HOST).live_count, 2);
    tu_free(pool, p);
    host_free(pool, h);
    tu_free(pool, a);
    tu_pool_destroy(pool);
}

static void test_config(void **state)
{
    (void)state;
    ump_pool_t *pool = NULL;
    assert_int_equal(ump_pool_create("backend:sim,overflow:disk", &pool),
                     -EINVAL);
    assert_null(pool);
    assert_int_equal(ump_pool_create("backend:sim,pinned_limit:lots", &pool),
                     -EINVAL);
    assert_null(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_pairing),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_pinning_fails),
        cmocka_unit_test(test_devices_reach_it),
        cmocka_unit_test(test_not_moved),
        cmocka_unit_test(test_destroy_busy),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_page_aligned),
        cmocka_unit_test(test_exited_thread),
        cmocka_unit_test(test_shared_budget),
        cmocka_unit_test(test_peaks),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_overflow_hints),
        cmocka_unit_test(test_overflow_limit),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
