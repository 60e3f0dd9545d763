/*
 * Tiers on a real GPU: an offloadable allocation written by a kernel is
 * spilled to pinned host memory by remapping at the same address (the
 * kernel and the CPU both read it there), then to NVMe (unmapped), and comes
 * back with ump_acquire intact; an oversubscribed loop keeps every byte.
 * SKIP without a GPU.
 */
#include "config.h"

#include <stdlib.h>

#include "gpu_util.h"

static char spill_dir[] = "/var/tmp/umpool-gpu-offload-XXXXXX";

static int setup(void **state)
{
    static struct gpu_fixture f;
    static char conf[256];
    if (!mkdtemp(spill_dir))
        return -1;
    /* host_cpu_access: the test reads the host tier with the CPU too (the
     * default maps it there for the devices only; gpu-check's offload
     * bench runs that path and checks its bytes on the GPU). */
    snprintf(conf, sizeof(conf),
             "backend:cuda,device_mem:512M,host_limit:1G,host_cpu_access:true,"
             "nvme_dir:%s", spill_dir);
    if (gpu_fixture_open(&f, conf))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    int rc = gpu_fixture_close(*state);
    rmdir(spill_dir);
    return rc;
}

static void *offload_alloc(ump_pool_t *pool, size_t n)
{
    ump_hints_t h = UMP_HINTS_INIT;
    void *p = NULL;
    h.device = 0;
    h.flags = UMP_HINT_OFFLOAD;
    ump_ok(ump_alloc(pool, n, &h, &p));
    return p;
}

static int tier_of(ump_pool_t *pool, const void *p)
{
    ump_ptr_info_t info;
    ump_ok(ump_ptr_info(pool, p, &info));
    return info.tier;
}

static void test_spill_by_remap(void **state)
{
    struct gpu_fixture *f = *state;
    const size_t n = 64 * TU_MIB;
    void *p = offload_alloc(f->pool, n);
    ump_ok(ump_acquire(f->pool, p, 0, 0, f->s));
    gpu_ok(gk_fill(f->rtdev, f->s, p, n, 41));
    ump_ok(ump_stream_synchronize(f->pool, f->s));
    ump_ok(ump_release(f->pool, p, 0));

    ump_ok(ump_evict(f->pool, p, 0, UMP_TIER_HOST));
    assert_int_equal(tier_of(f->pool, p), UMP_TIER_HOST);
    /* The same pointer, now host memory: the GPU reads it over the link,
     * the CPU reads it directly. */
    gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p, n, 41);
    size_t bad = gpu_host_first_bad(p, n, 41);
    if (bad != n / 8)
        fail_msg("the CPU reads word %zu of the host tier wrong", bad);

    ump_ok(ump_evict(f->pool, p, 0, UMP_TIER_NVME));
    assert_int_equal(tier_of(f->pool, p), UMP_TIER_NVME);
    ump_ok(ump_acquire(f->pool, p, 0, 0, f->s));
    assert_int_equal(tier_of(f->pool, p), UMP_TIER_DEVICE);
    gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, p, n, 41);
    ump_ok(ump_release(f->pool, p, 0));
    tu_free(f->pool, p);
}

/* 1.5 GiB of tensors through a 512 MiB device budget, twice. */
static void test_oversubscribed(void **state)
{
    struct gpu_fixture *f = *state;
    enum { NT = 12 };
    const size_t n = 128 * TU_MIB;
    void *t[NT];
    for (int i = 0; i < NT; i++) {
        t[i] = offload_alloc(f->pool, n);
        ump_ok(ump_acquire(f->pool, t[i], 0, 0, f->s));
        gpu_ok(gk_fill(f->rtdev, f->s, t[i], n, 100 + (uint64_t)i));
        ump_ok(ump_stream_synchronize(f->pool, f->s));
        ump_ok(ump_release(f->pool, t[i], 0));
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NT; i++) {
            ump_ok(ump_prefetch(f->pool, t[(i + 1) % NT], 0, 0, NULL));
            ump_ok(ump_acquire(f->pool, t[i], 0, 0, f->s));
            gpu_assert_pattern(f->pool, f->rtdev, f->s, f->res, t[i], n,
                               100 + (uint64_t)i);
            ump_ok(ump_release(f->pool, t[i], 0));
        }
    ump_stats_t st;
    ump_ok(ump_stats(f->pool, 0, &st));
    assert_true(st.spill_count > 0 && st.restore_count > 0);
    for (int i = 0; i < NT; i++)
        tu_free(f->pool, t[i]);
}

int main(void)
{
    gpu_require("test_gpu_offload");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spill_by_remap),
        cmocka_unit_test(test_oversubscribed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
