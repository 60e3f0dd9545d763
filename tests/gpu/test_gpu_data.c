/*
 * Pooled memory on a real GPU holds what kernels and copies put there:
 * kernel writes read back on the host, host writes checked by a kernel, many
 * live allocations of mixed sizes that never trample each other, and a cold
 * 1 GiB allocation usable at once. SKIP without a GPU.
 */
#include "config.h"

#include "gpu_util.h"

#define CONF "backend:cuda,device_mem:2G"

static int setup(void **state)
{
    static struct gpu_fixture f;
    if (gpu_fixture_open(&f, CONF))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    return gpu_fixture_close(*state);
}

/* Slab sizes, a chunk, runs that end inside a chunk, a large run. */
static const size_t sizes[] = {256,         4096,         64 * TU_KIB + 256,
                               TU_MIB,      2 * TU_MIB,   2 * TU_MIB + 4096,
                               3 * TU_MIB + 768, 64 * TU_MIB};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_kernel_writes_host_reads(void **state)
{
    struct gpu_fixture *f = *state;
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        uint64_t *host = malloc(n);
        assert_non_null(host);
        memset(host, 0, n);
        void *p = tu_alloc(f->pool, n, 0);
        gpu_ok(gk_fill(f->rtdev, f->s, p, n, 10 + k));
        /* Same stream: the copy starts after the kernel. */
        gpu_copy(f->pool, f->s, host, p, n);
        size_t bad = gpu_host_first_bad(host, n, 10 + k);
        if (bad != n / 8)
            fail_msg("%zu bytes at %p: word %zu is not what the kernel wrote",
                     n, p, bad);
        tu_free(f->pool, p);
        free(host);
    }
}

static void test_host_writes_kernel_reads(void **state)
{
    struct gpu_fixture *f = *state;
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        uint64_t *host = malloc(n);
        assert_non_null(host);
        gpu_host_fill(host, n, 20 + k);
        void *p = tu_alloc(f->pool, n, 0);
        gpu_copy(f->pool, f->s, p, host, n);
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p, n, 20 + k);
        /* The checker sees a wrong pattern: every word differs. */
        struct gk_result r =
            gpu_count_bad(f->pool, f->rtdev, f->s, f->res, p, n, 21 + k);
        assert_int_equal(r.bad, n / 8);
        assert_int_equal(r.first, 0);
        tu_free(f->pool, p);
        free(host);
    }
}

/* Hundreds of live allocations of mixed sizes, each written by a kernel with
 * its own pattern: none overlaps another on the device. Then half are freed
 * and replaced, and everything is checked again. */
static void test_many_live(void **state)
{
    enum { N = 300 };
    struct gpu_fixture *f = *state;
    static void *p[N];
    static size_t sz[N];
    static uint64_t seed[N];
    uint64_t rng = 42;

    for (int i = 0; i < N; i++) {
        uint64_t r = tu_rand(&rng);
        /* Mostly slab sizes, some runs of one to two chunks. */
        sz[i] = i % 10 == 9 ? TU_MIB + 8 * (r % (TU_MIB / 8))
                            : 8 + 8 * (r % (64 * TU_KIB / 8));
        seed[i] = 1000 + (uint64_t)i;
        p[i] = tu_alloc(f->pool, sz[i], 0);
        gpu_ok(gk_fill(f->rtdev, f->s, p[i], sz[i], seed[i]));
    }
    for (int i = 0; i < N; i++)
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p[i], sz[i],
                           seed[i]);
    for (int i = 0; i < N; i += 2) {
        tu_free(f->pool, p[i]);
        seed[i] += N;
        p[i] = tu_alloc(f->pool, sz[i], 0);
        gpu_ok(gk_fill(f->rtdev, f->s, p[i], sz[i], seed[i]));
    }
    for (int i = 0; i < N; i++)
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p[i], sz[i],
                           seed[i]);
    for (int i = 0; i < N; i++)
        tu_free(f->pool, p[i]);
}

/* After ump_trim nothing is cached: a 1 GiB allocation creates its physical
 * memory, and a kernel can use all of it at once. Twice, so that memory
 * given back and created again works too. */
static void test_cold_1g(void **state)
{
    struct gpu_fixture *f = *state;
    const size_t n = 1024 * TU_MIB, tail = TU_MIB;
    uint64_t *host = malloc(tail);
    assert_non_null(host);

    for (int round = 0; round < 2; round++) {
        ump_ok(ump_trim(f->pool));
        ump_stats_t before = tu_stats(f->pool, 0);
        assert_int_equal(before.cached_bytes, 0);
        void *p = tu_alloc(f->pool, n, 0);
        ump_stats_t after = tu_stats(f->pool, 0);
        assert_true(after.chunks_created > before.chunks_created);
        assert_true(after.mapped_bytes >= before.mapped_bytes + n);
        assert_int_equal(tu_info(f->pool, p).device, 0);

        uint64_t seed = 77 + (uint64_t)round;
        gpu_ok(gk_fill(f->rtdev, f->s, p, n, seed));
        gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p, n, seed);
        /* The last MiB on the host too: the end of the mapping is there. */
        gpu_copy(f->pool, f->s, host, (char *)p + n - tail, tail);
        for (size_t i = 0; i < tail / 8; i++)
            if (host[i] != gk_word(seed, (n - tail) / 8 + i))
                fail_msg("word %zu of the last MiB of 1 GiB differs", i);
        tu_free(f->pool, p);
    }
    ump_ok(ump_trim(f->pool));
    assert_int_equal(tu_stats(f->pool, 0).cached_bytes, 0);
    free(host);
}

int main(void)
{
    gpu_require("test_gpu_data");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_writes_host_reads),
        cmocka_unit_test(test_host_writes_kernel_reads),
        cmocka_unit_test(test_many_live),
        cmocka_unit_test(test_cold_1g),
    };
    return cmocka_run_group_tests_name("gpu_data", tests, setup, teardown);
}
