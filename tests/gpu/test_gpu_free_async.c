/*
 * ump_free_async on a real GPU: a kernel still running on a stream keeps the
 * buffer it writes, even though the buffer was freed on that stream.
 *
 * The kernel writes a pattern over buffer A, spins ~200 ms, checks that A
 * still holds its pattern (counting words someone else overwrote), and
 * writes a second pattern. Meanwhile the test frees A with ump_free_async on
 * the kernel's stream, then allocates the same size many times and other
 * sizes (up to -ENOMEM on a small device) and memsets every new allocation
 * on another stream. No allocation may overlap A while the kernel runs, the
 * kernel must see no foreign write, and afterwards A holds the kernel's
 * second pattern. SKIP without a GPU.
 */
#include "config.h"

#include "gpu_util.h"

#define SPIN_MS 200
#define MAX_LIVE 1024
#define PER_SIZE 64

struct fixture {
    ump_pool_t *pool;
    ump_stream_t s1; /* the kernel's */
    ump_stream_t s2; /* the memsets' */
    int rtdev;
    struct gk_result *res;
    void *live[MAX_LIVE]; /* the test's allocations, freed by teardown */
    int nlive;
};

/* The prestate is the pool configuration. */
static int setup(void **state)
{
    static struct fixture f;
    const char *conf = *state;
    memset(&f, 0, sizeof(f));
    if (ump_pool_create(conf, &f.pool) != 0)
        return -1;
    if (ump_stream_create(f.pool, 0, &f.s1) != 0 ||
        ump_stream_create(f.pool, 0, &f.s2) != 0)
        return -1;
    f.rtdev = gpu_rt_device(f.pool, 0);
    if (ump_alloc(f.pool, sizeof(*f.res), NULL, (void **)&f.res) != 0)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = ump_stream_synchronize(f->pool, f->s1);
    rc |= ump_stream_synchronize(f->pool, f->s2);
    for (int i = 0; i < f->nlive; i++)
        rc |= ump_free(f->pool, f->live[i]);
    rc |= ump_free(f->pool, f->res);
    rc |= ump_stream_destroy(f->pool, f->s2);
    rc |= ump_stream_destroy(f->pool, f->s1);
    rc |= ump_pool_destroy(f->pool);
    return rc ? -1 : 0;
}

static int busy(struct fixture *f)
{
    int b = gk_stream_busy(f->rtdev, f->s1);
    if (b < 0)
        fail_msg("cudaStreamQuery = %d (%s)", -b, gk_strerror(-b));
    return b;
}

static void held_by_kernel(struct fixture *f, size_t size,
                           const size_t *others, int nothers)
{
    void **live = f->live;
    int during = 0, late = 0, enomem = 0;

    char *a = tu_alloc(f->pool, size, 0);
    /* The first allocation below must return while the kernel runs, so it
     * must not wait on the driver: creating, mapping or giving access to
     * new memory may wait for the work in flight. A spare of A's size,
     * allocated and freed before the kernel starts, leaves memory of that
     * size mapped and cached in the pool (a parked run, or a slab object in
     * the thread cache), which the first ump_alloc takes back with no driver
     * call. It is allocated after A, and the same way as below (no hints),
     * so that A cannot have taken it and the loop finds it. */
    void *spare = NULL;
    ump_ok(ump_alloc(f->pool, size, NULL, &spare));
    uintptr_t spare_at = (uintptr_t)spare;
    ump_ok(ump_free(f->pool, spare));
    uintptr_t first = 0; /* the first allocation below: the spare, likely */
    gpu_result_init(f->pool, f->s1, f->res);
    gpu_ok(gk_spin_fill_check(f->rtdev, f->s1, a, size, 1, 2, SPIN_MS,
                              f->res));
    ump_ok(ump_free_async(f->pool, a, f->s1));

    /* Phase -1: A's own size, which a cache would hand back first. */
    for (int phase = -1; phase < nothers && !late; phase++) {
        size_t sz = phase < 0 ? size : others[phase];
        for (int k = 0; k < PER_SIZE && f->nlive < MAX_LIVE; k++) {
            void *q = NULL;
            int rc = ump_alloc(f->pool, sz, NULL, &q);
            /* Asked after the call: an overlap while this says 1 is a
             * reuse before the kernel finished. */
            int running = busy(f);
            if (rc == -ENOMEM) {
                enomem++;
                break;
            }
            if (rc != 0)
                fail_msg("ump_alloc(%zu) = %d (%s)", sz, rc, ump_strerror(rc));
            if (!first)
                first = (uintptr_t)q;
            live[f->nlive++] = q;
            if (gpu_overlaps(q, sz, a, size)) {
                if (running)
                    fail_msg("allocation %d (%zu bytes at %p) overlaps the "
                             "%zu bytes at %p freed by ump_free_async while "
                             "the kernel on that stream still runs",
                             f->nlive, sz, q, size, (void *)a);
            } else {
                ump_ok(ump_memset_async(f->pool, q, 0xa5, sz, f->s2));
            }
            if (running) {
                during++;
            } else {
                late++; /* the kernel is done: the window has closed */
                break;
            }
        }
    }
    print_message("%d allocations while the kernel ran, %d after, %d "
                  "-ENOMEM\n", during, late, enomem);
    if (during == 0)
        fail_msg("the kernel finished before the first allocation returned: "
                 "nothing was tested (SPIN_MS too short?%s)",
                 first && first != spare_at
                     ? " the first allocation did not reuse the spare, so "
                       "it may have waited on the driver"
                     : "");

    ump_ok(ump_stream_synchronize(f->pool, f->s1));
    ump_ok(ump_stream_synchronize(f->pool, f->s2));
    struct gk_result r = gpu_result_read(f->pool, f->s1, f->res);
    if (r.bad)
        fail_msg("while the kernel ran, %llu of its %zu words were "
                 "overwritten (the first at word %llu): memory freed on its "
                 "stream was handed out early", r.bad, size / 8, r.first);
    /* Freed memory stays mapped and cached, so A can still be read; not
     * after a late allocation, which may have remapped its chunks. */
    if (!late) {
        uint64_t *host = malloc(size);
        assert_non_null(host);
        gpu_copy(f->pool, f->s1, host, a, size);
        size_t bad = gpu_host_first_bad(host, size, 2);
        if (bad != size / 8)
            fail_msg("after the kernel, word %zu of A is not what it wrote",
                     bad);
        free(host);
    }
    /* Once the stream has run, A's memory is the pool's again: its size
     * fits, even on the device the allocations filled (where A's memory is
     * all that is left, unless a late allocation took it). */
    if (!late) {
        void *q = tu_alloc(f->pool, size, 0);
        tu_free(f->pool, q);
    }
    while (f->nlive > 0)
        tu_free(f->pool, live[--f->nlive]);
    ump_stats_t st = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 1); /* the result block */
}

/* A slab object: the per-thread cache would return it at once. */
static void test_held_slab(void **state)
{
    static const size_t others[] = {256, 4096, 64 * TU_KIB + 256, TU_MIB,
                                    3 * TU_MIB};
    held_by_kernel(*state, 64 * TU_KIB, others, 5);
}

static void test_held_small(void **state)
{
    static const size_t others[] = {256, 2048, 8192};
    held_by_kernel(*state, 4096, others, 3);
}

/* A run of chunks on a 64 MiB device: the allocations fill the device, so
 * the pool is tempted to take A's chunks (reuse or stitching). */
static void test_held_run_device_full(void **state)
{
    static const size_t others[] = {4 * TU_MIB, 2 * TU_MIB, 6 * TU_MIB,
                                    64 * TU_KIB, 256};
    held_by_kernel(*state, 8 * TU_MIB, others, 5);
}

int main(void)
{
    gpu_require("test_gpu_free_async");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(
            test_held_slab, setup, teardown,
            (void *)"backend:cuda,device_mem:256M"),
        cmocka_unit_test_prestate_setup_teardown(
            test_held_small, setup, teardown,
            (void *)"backend:cuda,device_mem:256M"),
        cmocka_unit_test_prestate_setup_teardown(
            test_held_run_device_full, setup, teardown,
            (void *)"backend:cuda,device_mem:64M"),
    };
    return cmocka_run_group_tests_name("gpu_free_async", tests, NULL, NULL);
}
