/*
 * The first allocation after ump_trim makes exactly the driver calls of the
 * raw sequence an application would make for the same size: one
 * cuMemCreate of the size rounded up to the granularity, one cuMemMap and
 * one cuMemSetAccess of it, nothing else (no second handle, no bigger chunk
 * than the raw one, no unmap or release on the way): the calls are counted
 * through a copy of the backend's ops, and the modeled driver time
 * (sim_driver_costs:h200) is the H200's cost of that one sequence. That is
 * what lets umpool-bench alloc's cold column be within a few percent of
 * the raw driver (issue 29); the rest is the pool's own bookkeeping.
 */
#include "config.h"

#include "testutil.h"

#include "backend/backend.h"
#include "mem/chunks.h"
#include "mem/pool.h"
#include "topo/drivercost.h"

enum { C_CREATE, C_RELEASE, C_MAP, C_UNMAP, C_ACCESS, C_HOST, C_N };

static const struct backend_ops *real_be;
static struct backend_ops counting_be;
static int calls[C_N];
static size_t sizes[C_N]; /* the bytes of the last call of each kind */

static int count_create(void *ctx, int device, size_t size, ump_handle_t *h)
{
    calls[C_CREATE]++;
    sizes[C_CREATE] = size;
    return real_be->chunk_create(ctx, device, size, h);
}

static int count_release(void *ctx, ump_handle_t h)
{
    calls[C_RELEASE]++;
    return real_be->chunk_release(ctx, h);
}

static int count_map(void *ctx, void *va, size_t size, ump_handle_t h)
{
    calls[C_MAP]++;
    sizes[C_MAP] = size;
    return real_be->map(ctx, va, size, h);
}

static int count_unmap(void *ctx, void *va, size_t size)
{
    calls[C_UNMAP]++;
    return real_be->unmap(ctx, va, size);
}

static int count_access(void *ctx, void *va, size_t size, const int *devs,
                        int n)
{
    calls[C_ACCESS]++;
    sizes[C_ACCESS] = size;
    return real_be->set_access(ctx, va, size, devs, n);
}

static int count_host_create(void *ctx, int node, size_t size,
                             ump_handle_t *h)
{
    calls[C_HOST]++;
    return real_be->host_chunk_create(ctx, node, size, h);
}

static int count_host_access(void *ctx, void *va, size_t size,
                             const int *devs, int n)
{
    calls[C_HOST]++;
    return real_be->set_access_host(ctx, va, size, devs, n);
}

static void count_calls(ump_pool_t *pool)
{
    real_be = pool->be;
    counting_be = *real_be;
    counting_be.chunk_create = count_create;
    counting_be.chunk_release = count_release;
    counting_be.map = count_map;
    counting_be.unmap = count_unmap;
    counting_be.set_access = count_access;
    counting_be.host_chunk_create = count_host_create;
    counting_be.set_access_host = count_host_access;
    pool->be = &counting_be;
}

static void zero_counts(void)
{
    memset(calls, 0, sizeof(calls));
    memset(sizes, 0, sizeof(sizes));
}

/* Trim, then one allocation of size: exactly create + map + set access of
 * one handle of the size rounded up to the 2 MiB granule, twice in a row
 * (the second time the pool reuses the bookkeeping of the first, a retired
 * slab or run struct, and must still make no other call). */
static void cold_is_raw(ump_pool_t *pool, size_t size)
{
    size_t raw = (size + TU_CHUNK - 1) / TU_CHUNK * TU_CHUNK;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ump_trim(pool), 0);
        ump_stats_t a = tu_stats(pool, UMP_DEVICE_ALL);
        zero_counts();
        void *p = tu_alloc(pool, size, 0);
        ump_stats_t b = tu_stats(pool, UMP_DEVICE_ALL);
        if (calls[C_CREATE] != 1 || calls[C_MAP] != 1 ||
            calls[C_ACCESS] != 1 || calls[C_UNMAP] || calls[C_RELEASE] ||
            calls[C_HOST])
            fail_msg("cold %zu bytes: %d creates, %d maps, %d set access, "
                     "%d unmaps, %d releases, %d host calls; the raw "
                     "sequence is one create, map and set access", size,
                     calls[C_CREATE], calls[C_MAP], calls[C_ACCESS],
                     calls[C_UNMAP], calls[C_RELEASE], calls[C_HOST]);
        assert_int_equal(sizes[C_CREATE], raw);
        assert_int_equal(sizes[C_MAP], raw);
        assert_int_equal(sizes[C_ACCESS], raw);
        assert_int_equal(b.chunks_created - a.chunks_created, 1);
        assert_int_equal(b.driver_ns - a.driver_ns, drvcost_create_ns(raw));
        tu_free(pool, p);
    }
}

static void test_cold_is_the_raw_sequence(void **state)
{
    (void)state;
    tu_sim_only("the backend's calls are counted on sim");
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:4G,"
                                      "sim_driver_costs:h200");
    count_calls(pool);
    static const size_t cases[] = {256, 64 * TU_KIB, TU_MIB, 64 * TU_MIB,
                                   1024 * TU_MIB, 100 * TU_MIB / 64};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cold_is_raw(pool, cases[i]);
    pool->be = real_be;
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_is_the_raw_sequence),
    };
    return cmocka_run_group_tests_name("cold", tests, NULL, NULL);
}
