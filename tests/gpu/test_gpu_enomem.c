/*
 * Out of device memory on a real GPU: allocating up to the limit ends in
 * -ENOMEM with the pool unchanged, and the pool keeps working (data intact,
 * a freed block reusable, small allocations again once there is room).
 *
 * The limit is device_mem:2G by default. With UMPOOL_GPU_FULL=1 a second
 * test also fills the whole device with 1 GiB allocations (it needs the GPU
 * to itself: scripts/gpu-check runs it alone, after make check). Managed
 * memory is never used: it would oversubscribe instead of failing.
 * SKIP without a GPU.
 */
#include "config.h"

#include <time.h>

#include "gpu_util.h"

#define CAP (2048 * TU_MIB)
#define BLOCK (64 * TU_MIB)
#define FULL_BLOCK (1024 * TU_MIB)
#define FULL_MAX_S 20.0

static int setup(void **state)
{
    static struct gpu_fixture f;
    if (gpu_fixture_open(&f, *state))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    return gpu_fixture_close(*state);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Allocates blocks of `block` bytes on device 0 until -ENOMEM (at most max,
 * and for at most max_s seconds), each written by a kernel with its own
 * pattern; returns how many, or -1 when time or count ran out first.
 */
static int fill_device(struct gpu_fixture *f, size_t block, void **p, int max,
                       double max_s)
{
    double t0 = now_s();
    ump_hints_t h = tu_hints(0);
    for (int n = 0; n < max; n++) {
        if (now_s() - t0 > max_s)
            return -1;
        int rc = ump_alloc(f->pool, block, &h, &p[n]);
        if (rc == -ENOMEM)
            return n;
        if (rc != 0)
            fail_msg("ump_alloc(%zu) #%d = %d (%s): not -ENOMEM", block, n,
                     rc, ump_strerror(rc));
        gpu_ok(gk_fill(f->rtdev, f->s, p[n], block, 100 + (uint64_t)n));
    }
    return -1;
}

/* At -ENOMEM: another attempt fails the same way and changes nothing. */
static void expect_full(struct gpu_fixture *f, size_t block)
{
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    void *q = NULL;
    assert_int_equal(ump_alloc(f->pool, block, NULL, &q), -ENOMEM);
    assert_null(q);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
}

/* Frees block i, allocates the same size again (it must fit), and checks
 * with a kernel that the new block and every other block hold their data. */
static void free_one_and_reuse(struct gpu_fixture *f, size_t block, void **p,
                               int n)
{
    int i = n / 2;
    tu_free(f->pool, p[i]);
    p[i] = tu_alloc(f->pool, block, 0);
    gpu_ok(gk_fill(f->rtdev, f->s, p[i], block, 999));
    gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p[i], block, 999);
    for (int k = 0; k < n; k++)
        if (k != i)
            gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p[k], block,
                               100 + (uint64_t)k);
    expect_full(f, block);
}

static void free_all_and_trim(struct gpu_fixture *f, void **p, int n)
{
    for (int k = 0; k < n; k++)
        tu_free(f->pool, p[k]);
    ump_ok(ump_trim(f->pool));
    ump_stats_t st = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 1); /* the result block */
    assert_int_equal(st.cached_bytes, 0);
    assert_true(st.mapped_bytes <= st.capacity);
}

static void test_capped(void **state)
{
    enum { MAX = (int)(CAP / BLOCK) + 4 };
    struct gpu_fixture *f = *state;
    static void *p[MAX];

    ump_stats_t st = tu_stats(f->pool, 0);
    assert_int_equal(st.capacity, CAP);
    int n = fill_device(f, BLOCK, p, MAX, FULL_MAX_S);
    if (n < 0)
        fail_msg("%d allocations of 64 MiB on a 2 GiB device and no -ENOMEM",
                 MAX);
    /* Everything but the chunk holding the result block. */
    assert_true((size_t)n * BLOCK <= CAP);
    assert_true((size_t)(n + 1) * BLOCK >= CAP);
    st = tu_stats(f->pool, 0);
    assert_true(st.mapped_bytes <= st.capacity);
    assert_int_equal(st.live_count, (uint64_t)n + 1);
    expect_full(f, BLOCK);
    free_one_and_reuse(f, BLOCK, p, n);
    free_all_and_trim(f, p, n);
}

/* Full of 64 MiB blocks, then of 2 MiB ones: a small allocation either fits
 * in a slab that is left or fails with -ENOMEM; once a block is freed it
 * fits, and a kernel can use it. */
static void test_small_after_full(void **state)
{
    enum { MAX = (int)(CAP / BLOCK) + 4, MAX2 = (int)(CAP / (2 * TU_MIB)) };
    struct gpu_fixture *f = *state;
    static void *p[MAX], *p2[MAX2];

    int n = fill_device(f, BLOCK, p, MAX, FULL_MAX_S);
    assert_true(n > 0);
    int n2 = fill_device(f, 2 * TU_MIB, p2, MAX2, FULL_MAX_S);
    assert_true(n2 >= 0);
    void *small = NULL;
    int rc = ump_alloc(f->pool, 4096, NULL, &small);
    print_message("full: 4096 bytes give %d\n", rc);
    if (rc == 0)
        tu_free(f->pool, small);
    else
        assert_int_equal(rc, -ENOMEM);
    tu_free(f->pool, p[n - 1]);
    for (size_t sz = 256; sz <= 4096; sz *= 4) {
        small = tu_alloc(f->pool, sz, 0);
        gpu_ok(gk_fill(f->rtdev, f->s, small, sz, sz));
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, small, sz, sz);
        tu_free(f->pool, small);
    }
    for (int k = 0; k < n2; k++)
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p2[k],
                           2 * TU_MIB, 100 + (uint64_t)k);
    for (int k = 0; k < n2; k++)
        tu_free(f->pool, p2[k]);
    free_all_and_trim(f, p, n - 1);
}

/* The whole device, in 1 GiB allocations, up to the real limit. */
static void test_whole_device(void **state)
{
    enum { MAX = 1024 };
    struct gpu_fixture *f = *state;
    static void *p[MAX];
    const char *full = getenv("UMPOOL_GPU_FULL");

    if (!full || strcmp(full, "1") != 0) {
        print_message("set UMPOOL_GPU_FULL=1 to fill the whole GPU (it needs "
                      "the GPU to itself)\n");
        skip();
    }
    ump_stats_t st = tu_stats(f->pool, 0);
    double t0 = now_s();
    int n = fill_device(f, FULL_BLOCK, p, MAX, FULL_MAX_S);
    if (n < 0) {
        print_message("no -ENOMEM within %.0f s or %d GiB\n", FULL_MAX_S, MAX);
        fail();
    }
    print_message("%d x 1 GiB of %zu MiB in %.2f s, then -ENOMEM\n", n,
                  st.capacity >> 20, now_s() - t0);
    /* The capacity is what was free at creation: the last GiB may be short
     * by the result block's chunk, and the driver may keep a little for the
     * context (kernels loaded since): a few GiB of slack on ~140. */
    assert_true((size_t)n * FULL_BLOCK <= st.capacity);
    assert_true((size_t)(n + 4) * FULL_BLOCK > st.capacity);
    expect_full(f, FULL_BLOCK);
    free_one_and_reuse(f, FULL_BLOCK, p, n);
    free_all_and_trim(f, p, n);
}

int main(void)
{
    gpu_require("test_gpu_enomem");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(
            test_capped, setup, teardown, (void *)"backend:cuda,device_mem:2G"),
        cmocka_unit_test_prestate_setup_teardown(
            test_small_after_full, setup, teardown,
            (void *)"backend:cuda,device_mem:2G"),
        cmocka_unit_test_prestate_setup_teardown(test_whole_device, setup,
                                                 teardown,
                                                 (void *)"backend:cuda"),
    };
    return cmocka_run_group_tests_name("gpu_enomem", tests, NULL, NULL);
}
