/*
 * Stitching: a full device whose free memory lies in holes between live
 * allocations still serves one large allocation, from the chunks of those
 * holes remapped at new contiguous addresses, without creating chunks.
 */
#include "config.h"

#define TU_CUDA_AWARE 1
#include "testutil.h"

#define CONF1 "backend:sim,sim_devices:1,sim_device_mem:64M"
#define CONF2 "backend:sim,sim_devices:2,sim_device_mem:64M"
#define NSLOT 80

struct filled {
    ump_pool_t *pool;
    int n;
    void *p[NSLOT];
    size_t size[NSLOT];
    bool live[NSLOT];
};

/* Fills the pool with allocations of the given sizes (cycled) on device
 * dev until -ENOMEM or max of them; each gets the pattern of its index. */
static void fill_device(struct filled *f, const size_t *sizes, int nsizes,
                        int dev, int max)
{
    for (int k = 0; k < max; k++) {
        assert_true(f->n < NSLOT);
        size_t sz = sizes[k % nsizes];
        ump_hints_t h = tu_hints(dev);
        void *p = NULL;
        int rc = ump_alloc(f->pool, sz, &h, &p);
        if (rc == -ENOMEM)
            break;
        assert_int_equal(rc, 0);
        assert_int_equal(tu_info(f->pool, p).device, dev);
        tu_pool_write(f->pool, p, sz, (uint64_t)f->n);
        f->p[f->n] = p;
        f->size[f->n] = sz;
        f->live[f->n] = true;
        f->n++;
    }
}

static void check_live(const struct filled *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->live[i])
            tu_assert_pool_pattern(f->pool, f->p[i], f->size[i],
                                   (uint64_t)i);
}

static void free_live(struct filled *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->live[i]) {
            tu_free(f->pool, f->p[i]);
            f->live[i] = false;
        }
}

static void expect_enomem(ump_pool_t *pool, size_t size, int dev)
{
    ump_hints_t h = tu_hints(dev);
    void *p = NULL;
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    int rc = ump_alloc(pool, size, &h, &p);
    if (rc != -ENOMEM)
        fail_msg("ump_alloc(%zu) = %d, expected -ENOMEM", size, rc);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
}

/* 32 x 2 MiB fill the device; every other freed; 32 MiB fit in the holes. */
static void test_stitch_2m_holes(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF1)};
    const size_t two = TU_CHUNK;
    fill_device(&f, &two, 1, 0, NSLOT);
    assert_int_equal(f.n, 32);
    expect_enomem(f.pool, TU_CHUNK, 0);

    for (int i = 0; i < f.n; i += 2) {
        tu_free(f.pool, f.p[i]);
        f.live[i] = false;
    }
    uint64_t created = tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created;
    const size_t big = 32 * TU_MIB;
    char *p = tu_alloc(f.pool, big, 0);
    assert_int_equal(tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created,
                     created);
    for (size_t off = 0; off < big; off += TU_CHUNK)
        assert_int_equal(tu_info(f.pool, p + off).device, 0);
    tu_pool_write(f.pool, p, big, 1000);
    check_live(&f);
    tu_assert_pool_pattern(f.pool, p, big, 1000);

    /* Full again. */
    expect_enomem(f.pool, TU_CHUNK, 0);
    ump_stats_t st = tu_stats(f.pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 17);
    assert_int_equal(st.mapped_bytes, 64 * TU_MIB);

    tu_free(f.pool, p);
    check_live(&f);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

/* Mixed sizes: 4 MiB holes between 2 MiB survivors. */
static void test_stitch_mixed_holes(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF1)};
    const size_t sizes[] = {4 * TU_MIB, TU_CHUNK};
    fill_device(&f, sizes, 2, 0, NSLOT);
    /* 11 x 4 MiB and 10 x 2 MiB make 64 MiB. */
    assert_int_equal(f.n, 21);

    size_t holes = 0;
    for (int i = 0; i < f.n; i++)
        if (f.size[i] == 4 * TU_MIB) {
            tu_free(f.pool, f.p[i]);
            f.live[i] = false;
            holes += 4 * TU_MIB;
        }
    assert_int_equal(holes, 44 * TU_MIB);
    uint64_t created = tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created;

    char *p = tu_alloc(f.pool, holes, 0);
    assert_int_equal(tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created,
                     created);
    tu_pool_write(f.pool, p, holes, 2000);
    check_live(&f);
    tu_assert_pool_pattern(f.pool, p, holes, 2000);
    expect_enomem(f.pool, TU_CHUNK, 0);
    tu_free(f.pool, p);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

/* Holes of unequal sizes together, less than all of them. */
static void test_stitch_partial(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF1)};
    const size_t sizes[] = {TU_CHUNK, 6 * TU_MIB, TU_CHUNK, 4 * TU_MIB};
    fill_device(&f, sizes, 4, 0, NSLOT);
    /* Free the 6 MiB and 4 MiB ones: 10 MiB per round of 14. */
    size_t holes = 0;
    for (int i = 0; i < f.n; i++)
        if (f.size[i] != TU_CHUNK) {
            tu_free(f.pool, f.p[i]);
            f.live[i] = false;
            holes += f.size[i];
        }
    uint64_t created = tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created;
    size_t free_bytes = tu_stats(f.pool, 0).capacity -
                        tu_stats(f.pool, 0).live_bytes;
    assert_true(free_bytes >= holes);

    /* Two allocations that each need several holes. */
    size_t a_size = holes / 2 + TU_CHUNK + 100;
    char *a = tu_alloc(f.pool, a_size, 0);
    size_t b_size = free_bytes - TU_ALIGN_UP(a_size, TU_CHUNK);
    char *b = tu_alloc(f.pool, b_size, 0);
    assert_int_equal(tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created,
                     created);
    tu_pool_write(f.pool, a, a_size, 31);
    tu_pool_write(f.pool, b, b_size, 32);
    check_live(&f);
    tu_assert_pool_pattern(f.pool, a, a_size, 31);
    tu_assert_pool_pattern(f.pool, b, b_size, 32);
    expect_enomem(f.pool, TU_CHUNK, 0);
    tu_free(f.pool, a);
    tu_free(f.pool, b);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

/* After ump_trim the holes' chunks are gone; the large allocation creates
 * them anew and still fits. */
static void test_stitch_after_trim(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF1)};
    const size_t two = TU_CHUNK;
    fill_device(&f, &two, 1, 0, NSLOT);
    for (int i = 1; i < f.n; i += 2) {
        tu_free(f.pool, f.p[i]);
        f.live[i] = false;
    }
    ump_stats_t before = tu_stats(f.pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_trim(f.pool), 0);
    ump_stats_t after = tu_stats(f.pool, UMP_DEVICE_ALL);
    assert_int_equal(after.cached_bytes, 0);
    assert_int_equal(after.mapped_bytes, 32 * TU_MIB);
    assert_int_equal(after.chunks_released - before.chunks_released, 16);
    check_live(&f);

    char *p = tu_alloc(f.pool, 32 * TU_MIB, 0);
    ump_stats_t now = tu_stats(f.pool, UMP_DEVICE_ALL);
    uint64_t made = now.chunks_created - after.chunks_created;
    /* The sim device's memory fragments like a file: the freed 2 MiB holes
     * are its only room, one chunk each. A driver finds the 32 MiB in one
     * piece, or in a few. */
    if (tu_on_cuda())
        assert_true(made >= 1 && made <= 16);
    else
        assert_int_equal(made, 16);
    assert_int_equal(now.mapped_bytes, 64 * TU_MIB);
    tu_pool_write(f.pool, p, 32 * TU_MIB, 3);
    check_live(&f);
    tu_assert_pool_pattern(f.pool, p, 32 * TU_MIB, 3);
    tu_free(f.pool, p);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

/* Holes on two devices: one allocation stitches all of them, the
 * requesting device's first. */
static void test_stitch_two_devices(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF2)};
    const size_t two = TU_CHUNK;
    fill_device(&f, &two, 1, 0, 32);
    int first1 = f.n;
    /* Device 0 is full (the next one would spill to device 1); device 1
     * fills until the whole pool is full. */
    fill_device(&f, &two, 1, 1, NSLOT);
    assert_int_equal(first1, 32);
    assert_int_equal(f.n, 64);

    for (int i = 0; i < f.n; i += 2) {
        tu_free(f.pool, f.p[i]);
        f.live[i] = false;
    }
    uint64_t created = tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created;
    char *p = tu_alloc(f.pool, 64 * TU_MIB, 1);
    assert_int_equal(tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created,
                     created);
    for (size_t k = 0; k < 32; k++)
        assert_int_equal(tu_info(f.pool, p + k * TU_CHUNK).device,
                         k < 16 ? 1 : 0);
    tu_pool_write(f.pool, p, 64 * TU_MIB, 64);
    check_live(&f);
    tu_assert_pool_pattern(f.pool, p, 64 * TU_MIB, 64);
    tu_free(f.pool, p);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

/* A freed stitched allocation is itself reusable in pieces. */
static void test_stitched_then_split(void **state)
{
    (void)state;
    struct filled f = {.pool = tu_pool_create(CONF1)};
    const size_t two = TU_CHUNK;
    fill_device(&f, &two, 1, 0, NSLOT);
    for (int i = 0; i < f.n; i += 2) {
        tu_free(f.pool, f.p[i]);
        f.live[i] = false;
    }
    char *p = tu_alloc(f.pool, 32 * TU_MIB, 0);
    tu_free(f.pool, p);
    uint64_t created = tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created;

    void *q[8];
    for (int i = 0; i < 8; i++) {
        q[i] = tu_alloc(f.pool, 4 * TU_MIB, 0);
        tu_pool_write(f.pool, q[i], 4 * TU_MIB, 500 + (uint64_t)i);
    }
    assert_int_equal(tu_stats(f.pool, UMP_DEVICE_ALL).chunks_created,
                     created);
    expect_enomem(f.pool, TU_CHUNK, 0);
    for (int i = 0; i < 8; i++)
        tu_assert_pool_pattern(f.pool, q[i], 4 * TU_MIB, 500 + (uint64_t)i);
    check_live(&f);
    for (int i = 0; i < 8; i++)
        tu_free(f.pool, q[i]);
    free_live(&f);
    tu_pool_destroy(f.pool);
}

int main(void)
{
    tu_main_begin("test_stitch");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stitch_2m_holes),
        cmocka_unit_test(test_stitch_mixed_holes),
        cmocka_unit_test(test_stitch_partial),
        cmocka_unit_test(test_stitch_after_trim),
        cmocka_unit_test(test_stitch_two_devices),
        cmocka_unit_test(test_stitched_then_split),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
