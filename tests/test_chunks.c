/*
 * Chunk sizes and the driver-error paths of growing the pool (lib/chunks.c):
 * cold allocations are made of few large chunks, freed chunks are reused
 * whole, and a backend failure in the middle of building a range leaves the
 * pool consistent.
 */
#include "config.h"

#include "testutil.h"

#include "backend/backend.h"
#include "mem/pool.h"

#define GIB ((size_t)1 << 30)

static size_t chunks_of(ump_pool_t *pool, char *p, size_t size)
{
    size_t n = 0;
    for (char *q = p; q < p + size; n++) {
        ump_ptr_info_t info = tu_info(pool, q);
        tu_assert_chunk_size(info.chunk_size);
        assert_ptr_equal(info.chunk_base, q); /* chunks tile the run */
        q += info.chunk_size;
    }
    return n;
}

/* A cold 1 GiB allocation is one chunk (one driver handle). */
static void test_cold_gib_is_one_chunk(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,sim_device_mem:4G");
    char *p = tu_alloc(pool, GIB, 0);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 1);
    assert_int_equal(chunks_of(pool, p, GIB), 1);
    assert_int_equal(tu_info(pool, p + GIB - 1).chunk_size, GIB);
    p[0] = 1;
    p[GIB - 1] = 2;
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* max_chunk bounds the chunk size. */
static void test_max_chunk(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:4G,max_chunk:64M");
    char *p = tu_alloc(pool, GIB + 3 * TU_MIB, 0);
    /* 16 x 64 MiB, then one 4 MiB chunk: the 3 MiB left over round up to
     * two granules */
    assert_int_equal(chunks_of(pool, p, GIB + 3 * TU_MIB), 17);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 17);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    ump_pool_t *bad = NULL;
    assert_int_equal(ump_pool_create("backend:sim,max_chunk:1M,log_level:error",
                                     &bad), -EINVAL);
    assert_null(bad);
}

/* A cached block is cut only at a chunk boundary. A freed 6 MiB run (a
 * 4 MiB and a 2 MiB chunk) is parked whole; under pressure it becomes a
 * cached block that serves 4 MiB from its first chunk and 2 MiB from its
 * second with no new chunk, but 2 MiB is never cut out of the 4 MiB chunk. */
static void test_reuse_at_chunk_boundaries(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:8M,tcache:false");
    char *p = tu_alloc(pool, 6 * TU_MIB, 0);
    assert_int_equal(chunks_of(pool, p, 6 * TU_MIB), 2);
    tu_free(pool, p);                        /* parked as a 6 MiB run */
    char *a = tu_alloc(pool, 4 * TU_MIB, 0); /* no room: the run is cut */
    assert_ptr_equal(a, p);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 2);
    tu_free(pool, a);                        /* parked as a 4 MiB run */
    char *x = tu_alloc(pool, 2 * TU_MIB, 0); /* the 2 MiB chunk's block */
    assert_ptr_equal(x, p + 4 * TU_MIB);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 2);
    char *y = tu_alloc(pool, 2 * TU_MIB, 0); /* new: not inside a's chunk */
    assert_int_equal(tu_stats(pool, 0).chunks_created, 3);
    assert_true(y < p || y >= p + 6 * TU_MIB);
    /* the device is full: the parked 4 MiB chunk is released so that a
     * 2 MiB one can be made in its place */
    char *z = tu_alloc(pool, 2 * TU_MIB, 0);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_released, 1);
    assert_int_equal(st.chunks_created, 4);
    assert_int_equal(st.mapped_bytes, 6 * TU_MIB);
    tu_free(pool, z);
    tu_free(pool, x);
    tu_free(pool, y);
    tu_pool_destroy(pool);
}

/* A freed run is parked whole and taken back by the next allocation of its
 * size on its device, with no new chunk, as it was. */
static void test_parked_run_reused(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:4G,tcache:false");
    char *p = tu_alloc(pool, GIB, 0);
    tu_free(pool, p);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.cached_bytes, GIB); /* parked counts as cached */
    assert_int_equal(st.live_bytes, 0);
    ump_ptr_info_t info;
    assert_int_equal(ump_ptr_info(pool, p, &info), -EINVAL);
    assert_int_equal(ump_free(pool, p), -EINVAL); /* parked: freed already */
    char *q = tu_alloc(pool, GIB, 0);
    assert_ptr_equal(q, p);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 1);
    q[GIB - 1] = 1;
    tu_free(pool, q);
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(st.mapped_bytes, 0);
    tu_pool_destroy(pool);
}

/* A chunk too big for the hole being filled is released so that smaller
 * ones fit: a full device holding a freed 64 MiB chunk still serves many
 * small allocations. */
static void test_big_idle_chunk_released_for_small(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:128M,tcache:false");
    char *big = tu_alloc(pool, 64 * TU_MIB, 0);
    char *rest = tu_alloc(pool, 64 * TU_MIB, 0); /* the device is full */
    tu_fill(rest, 64 * TU_MIB, 7);
    tu_free(pool, big); /* cached: one 64 MiB chunk */
    void *small[32];
    for (int i = 0; i < 32; i++) { /* one-granule runs */
        small[i] = tu_alloc(pool, 2 * TU_MIB, 0);
        tu_fill(small[i], 2 * TU_MIB, (uint64_t)i);
    }
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_released, 1);    /* the 64 MiB chunk */
    assert_true(st.mapped_bytes <= st.capacity);
    for (int i = 0; i < 32; i++)
        tu_assert_pattern(small[i], 2 * TU_MIB, (uint64_t)i);
    tu_assert_pattern(rest, 64 * TU_MIB, 7);
    void *x;
    assert_int_equal(ump_alloc(pool, 2 * TU_MIB, NULL, &x), -ENOMEM);
    for (int i = 0; i < 32; i++)
        tu_free(pool, small[i]);
    tu_free(pool, rest);
    tu_pool_destroy(pool);
}

/* A driver failure while a range is being built (the third map call, or
 * the access call) fails the allocation and leaves the pool consistent:
 * nothing half-mapped stays reachable, and the next allocation works. */
static void fault_in_build(const char *op, int nth)
{
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:256M,max_chunk:2M");
    char *keep = tu_alloc(pool, 8 * TU_MIB, 0);
    tu_fill(keep, 8 * TU_MIB, 1);
    ump_stats_t before = tu_stats(pool, 0);
    assert_int_equal(sim_inject_fault(pool->bctx, op, nth, -EIO), 0);
    void *p = NULL;
    assert_int_equal(ump_alloc(pool, 16 * TU_MIB, NULL, &p), -EIO);
    assert_null(p);
    ump_stats_t after = tu_stats(pool, 0);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes);
    assert_int_equal(after.live_bytes, before.live_bytes);
    assert_int_equal(after.live_count, before.live_count);
    tu_assert_pattern(keep, 8 * TU_MIB, 1);
    /* the chunks made for it are kept (idle) and used next time */
    p = tu_alloc(pool, 16 * TU_MIB, 0);
    tu_fill(p, 16 * TU_MIB, 2);
    ump_stats_t again = tu_stats(pool, 0);
    assert_int_equal(again.chunks_created, 4 + 8); /* 4 kept + 8 new */
    tu_free(pool, p);
    tu_free(pool, keep);
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t end = tu_stats(pool, 0);
    assert_int_equal(end.mapped_bytes, 0);
    assert_int_equal(end.cached_bytes, 0);
    assert_int_equal(end.chunks_released, end.chunks_created);
    tu_pool_destroy(pool);
}

static void test_fault_map(void **state)
{
    (void)state;
    fault_in_build("map", 3);
}

static void test_fault_set_access(void **state)
{
    (void)state;
    fault_in_build("set_access", 1);
}

static void test_fault_create(void **state)
{
    (void)state;
    fault_in_build("chunk_create", 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_gib_is_one_chunk),
        cmocka_unit_test(test_max_chunk),
        cmocka_unit_test(test_reuse_at_chunk_boundaries),
        cmocka_unit_test(test_parked_run_reused),
        cmocka_unit_test(test_big_idle_chunk_released_for_small),
        cmocka_unit_test(test_fault_map),
        cmocka_unit_test(test_fault_set_access),
        cmocka_unit_test(test_fault_create),
    };
    return cmocka_run_group_tests_name("chunks", tests, NULL, NULL);
}
