/*
 * Pooling: an allocation bigger than one device spills to the others, nearest
 * first, at contiguous addresses.
 */
#include "config.h"

#define TU_CUDA_AWARE 1
#include "testutil.h"

#define CONF4 "backend:sim,sim_devices:4,sim_device_mem:64M"
/* Why the placement orders below hold on sim only: sim_devices makes every
 * link alike, so that the nearest device is the next index. */
#define SIM_ORDER "expects the placement order of identical links"
#define MAXSEG 16

/* The devices holding an allocation, in address order, as runs of chunks. */
struct layout {
    int nseg;
    int device[MAXSEG];
    size_t chunks[MAXSEG];
};

static struct layout layout_of(ump_pool_t *pool, char *p, size_t size)
{
    struct layout l;
    memset(&l, 0, sizeof(l));
    for (size_t off = 0; off < size; off += TU_CHUNK) {
        ump_ptr_info_t info = tu_info(pool, p + off);
        assert_ptr_equal(info.base, p);
        assert_int_equal(info.size, size);
        assert_int_equal(info.tier, UMP_TIER_DEVICE);
        tu_assert_chunk_size(info.chunk_size);
        /* The last byte of each 2 MiB step is on the same chunk. */
        size_t last = off + TU_CHUNK - 1 < size ? off + TU_CHUNK - 1
                                                : size - 1;
        ump_ptr_info_t end = tu_info(pool, p + last);
        if ((char *)info.chunk_base == p + off)
            assert_int_equal(end.device, info.device);
        if (l.nseg == 0 || l.device[l.nseg - 1] != info.device) {
            assert_true(l.nseg < MAXSEG);
            l.device[l.nseg++] = info.device;
        }
        l.chunks[l.nseg - 1]++;
    }
    return l;
}

/* Fails unless the layout is: order[0] for the first want[0] chunks, then
 * order[1] ... */
static void expect_layout(const struct layout *l, const int *order,
                          const size_t *want, int n)
{
    if (l->nseg != n) {
        for (int i = 0; i < l->nseg; i++)
            print_message("segment %d: device %d, %zu chunks\n", i,
                          l->device[i], l->chunks[i]);
        fail_msg("%d device segments, expected %d", l->nseg, n);
    }
    for (int i = 0; i < n; i++) {
        if (l->device[i] != order[i] || l->chunks[i] != want[i])
            fail_msg("segment %d: device %d x %zu chunks, expected device "
                     "%d x %zu",
                     i, l->device[i], l->chunks[i], order[i], want[i]);
    }
}

static size_t chunks_of_device(ump_pool_t *pool, int d)
{
    return tu_stats(pool, d).capacity / TU_CHUNK;
}

/* 200 MiB over 4 x 64 MiB, from device 0: all of 0, 1, 2, then the rest
 * on 3 (identical links: nearest is by index). */
static void test_span_all_devices(void **state)
{
    (void)state;
    tu_sim_only(SIM_ORDER);
    ump_pool_t *pool = tu_pool_create(CONF4);
    const size_t size = 200 * TU_MIB;
    size_t per = chunks_of_device(pool, 0);
    assert_int_equal(per * TU_CHUNK, 64 * TU_MIB);

    char *p = tu_alloc(pool, size, 0);
    tu_pool_write(pool, p, size, 77);
    struct layout l = layout_of(pool, p, size);
    const int order[] = {0, 1, 2, 3};
    const size_t want[] = {per, per, per, size / TU_CHUNK - 3 * per};
    expect_layout(&l, order, want, 4);
    tu_assert_pool_pattern(pool, p, size, 77);

    /* Per-device statistics see their share. */
    for (int d = 0; d < 4; d++) {
        ump_stats_t st = tu_stats(pool, d);
        assert_true(st.mapped_bytes >= want[d] * TU_CHUNK);
    }
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_true(all.live_bytes >= size);
    assert_int_equal(all.live_count, 1);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* From device 2: 2 first, then 0, 1, 3. */
static void test_span_from_other_device(void **state)
{
    (void)state;
    tu_sim_only(SIM_ORDER);
    ump_pool_t *pool = tu_pool_create(CONF4);
    size_t per = chunks_of_device(pool, 0);
    const size_t size = (3 * per + 1) * TU_CHUNK - 1000;

    assert_int_equal(ump_set_device(pool, 2), 0);
    char *p = tu_alloc(pool, size, UMP_DEVICE_CURRENT);
    tu_pool_write(pool, p, size, 5);
    struct layout l = layout_of(pool, p, size);
    const int order[] = {2, 0, 1, 3};
    const size_t want[] = {per, per, per, 1};
    expect_layout(&l, order, want, 4);
    tu_assert_pool_pattern(pool, p, size, 5);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* The whole capacity in one allocation, then not one byte more; a failed
 * allocation changes nothing. */
static void test_exact_capacity(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF4);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    void *q = (void *)0x1;

    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_alloc(pool, all.capacity + TU_CHUNK, NULL, &q),
                     -ENOMEM);
    assert_ptr_equal(q, (void *)0x1);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);

    char *p = tu_alloc(pool, all.capacity, 1);
    tu_pool_write(pool, p, all.capacity, 9);
    before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_alloc(pool, 1, NULL, &q), -ENOMEM);
    assert_int_equal(ump_alloc(pool, TU_CHUNK, NULL, &q), -ENOMEM);
    assert_ptr_equal(q, (void *)0x1);
    after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    tu_assert_pool_pattern(pool, p, all.capacity, 9);
    tu_free(pool, p);

    /* Freed: the whole capacity is there again, without new chunks. */
    uint64_t created = tu_stats(pool, UMP_DEVICE_ALL).chunks_created;
    p = tu_alloc(pool, all.capacity, 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).chunks_created, created);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* Out of memory keeps earlier allocations and their data. */
static void test_enomem_keeps_pool(void **state)
{
    (void)state;
    tu_sim_only(SIM_ORDER);
    ump_pool_t *pool = tu_pool_create(CONF4);
    enum { N = 8 };
    char *p[N];
    size_t sz = 30 * TU_MIB;
    for (int i = 0; i < N; i++) {
        p[i] = tu_alloc(pool, sz, i % 4);
        tu_pool_write(pool, p[i], sz, (uint64_t)i);
    }
    /* 240 MiB live out of 256: 16 MiB spread in pieces remain. */
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    void *q = NULL;
    assert_int_equal(ump_alloc(pool, 40 * TU_MIB, NULL, &q), -ENOMEM);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    for (int i = 0; i < N; i++)
        tu_assert_pool_pattern(pool, p[i], sz, (uint64_t)i);

    /* The rest, 2 chunks at the end of each device, still fits: one
     * allocation over four devices, the requesting one first. */
    q = tu_alloc(pool, 16 * TU_MIB, 3);
    struct layout l = layout_of(pool, q, 16 * TU_MIB);
    const int order[] = {3, 0, 1, 2};
    const size_t want[] = {2, 2, 2, 2};
    expect_layout(&l, order, want, 4);
    tu_pool_write(pool, q, 16 * TU_MIB, 99);
    for (int i = 0; i < N; i++)
        tu_assert_pool_pattern(pool, p[i], sz, (uint64_t)i);
    tu_assert_pool_pattern(pool, q, 16 * TU_MIB, 99);
    tu_free(pool, q);
    for (int i = 0; i < N; i++)
        tu_free(pool, p[i]);
    tu_pool_destroy(pool);
}

/* Device 0 full: a small allocation asked of device 0 is served by the
 * nearest device with room. */
static void test_small_spill(void **state)
{
    (void)state;
    tu_sim_only(SIM_ORDER);
    ump_pool_t *pool = tu_pool_create(CONF4);
    size_t cap0 = tu_stats(pool, 0).capacity;
    void *fill = tu_alloc(pool, cap0, 0);
    assert_int_equal(layout_of(pool, fill, cap0).nseg, 1);

    void *s = tu_alloc(pool, 4096, 0);
    assert_int_equal(tu_info(pool, s).device, 1);
    tu_pool_write(pool, s, 4096, 3);
    tu_assert_pool_pattern(pool, s, 4096, 3);
    tu_free(pool, s);
    tu_free(pool, fill);
    tu_pool_destroy(pool);
}

/* NVLink pairs: device 0 spills to 1 (its pair) first, then 2 and 3. */
static void test_nvlink_pairs(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_topology:nvlink-pairs-"
                                      "4gpu,sim_device_mem:64M");
    assert_int_equal(ump_device_count(pool), 4);
    size_t per = chunks_of_device(pool, 0);
    assert_int_equal(per * TU_CHUNK, 64 * TU_MIB);

    /* Device 0, then all of device 1, then one of the other pair. */
    size_t size = (2 * per + 3) * TU_CHUNK;
    char *p = tu_alloc(pool, size, 0);
    struct layout l = layout_of(pool, p, size);
    assert_int_equal(l.nseg, 3);
    assert_int_equal(l.device[0], 0);
    assert_int_equal(l.chunks[0], per);
    assert_int_equal(l.device[1], 1);
    assert_int_equal(l.chunks[1], per);
    assert_true(l.device[2] == 2 || l.device[2] == 3);
    assert_int_equal(l.chunks[2], 3);
    tu_pool_write(pool, p, size, 1);
    tu_assert_pool_pattern(pool, p, size, 1);
    tu_free(pool, p);

    /* From device 3: 3, then 2, then the other pair. */
    size = (per + 5) * TU_CHUNK;
    p = tu_alloc(pool, size, 3);
    l = layout_of(pool, p, size);
    assert_int_equal(l.nseg, 2);
    assert_int_equal(l.device[0], 3);
    assert_int_equal(l.chunks[0], per);
    assert_int_equal(l.device[1], 2);
    assert_int_equal(l.chunks[1], 5);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* Each device the requesting one reaches (itself, its peers) appears in one
 * contiguous piece, the requesting one first, whatever the topology; the
 * others hold nothing. */
static void check_blocks(const char *config, int from)
{
    ump_pool_t *pool = tu_pool_create(config);
    int ndev = ump_device_count(pool), nreach = 0;
    bool reach[64] = {false};
    assert_true(ndev > 1 && ndev <= 64);
    for (int d = 0; d < ndev; d++) {
        ump_link_props_t lp;
        assert_int_equal(ump_link_props(pool, from, d, &lp), 0);
        reach[d] = d == from || lp.peer;
        nreach += reach[d];
    }
    assert_true(nreach > 1);
    size_t per = chunks_of_device(pool, 0);
    size_t size = (per * (size_t)(nreach - 1) + 1) * TU_CHUNK;
    char *p = tu_alloc(pool, size, from);
    struct layout l = layout_of(pool, p, size);
    assert_int_equal(l.nseg, nreach);
    assert_int_equal(l.device[0], from);
    for (int i = 0; i < l.nseg; i++) {
        assert_true(reach[l.device[i]]);
        for (int j = i + 1; j < l.nseg; j++)
            assert_int_not_equal(l.device[i], l.device[j]);
    }
    for (int i = 0; i < nreach - 1; i++)
        assert_int_equal(l.chunks[i], per);
    assert_int_equal(l.chunks[nreach - 1], 1);
    tu_pool_write(pool, p, size, (uint64_t)from);
    tu_assert_pool_pattern(pool, p, size, (uint64_t)from);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

static void test_pcie_blocks(void **state)
{
    (void)state;
    const char *conf = "backend:sim,sim_topology:pcie-4gpu,sim_device_mem:32M";
    check_blocks(conf, 0);
    check_blocks(conf, 3);
    /* Device 2 spills to its PCIe switch pair (the other socket has no peer
     * access). */
    ump_pool_t *pool = tu_pool_create(conf);
    size_t size = tu_stats(pool, 0).capacity + TU_CHUNK;
    char *p = tu_alloc(pool, size, 2);
    assert_int_equal(tu_info(pool, p + size - 1).device, 3);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

static void test_dgx_blocks(void **state)
{
    (void)state;
    check_blocks("backend:sim,sim_topology:dgx-h200,sim_device_mem:32M", 5);
}

/* Per-device statistics add up to the pool's while allocations span. */
static void test_span_stats(void **state)
{
    (void)state;
    tu_sim_only(SIM_ORDER);
    ump_pool_t *pool = tu_pool_create(CONF4);
    void *a = tu_alloc(pool, 100 * TU_MIB, 1);
    void *b = tu_alloc(pool, 1000, 3);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    size_t live = 0, mapped = 0, cap = 0;
    for (int d = 0; d < 4; d++) {
        ump_stats_t st = tu_stats(pool, d);
        live += st.live_bytes;
        mapped += st.mapped_bytes;
        cap += st.capacity;
    }
    assert_int_equal(live, all.live_bytes);
    assert_int_equal(mapped, all.mapped_bytes);
    assert_int_equal(cap, all.capacity);
    assert_true(all.live_bytes >= 100 * TU_MIB + 1000);
    /* 100 MiB from device 1: all of 1, the rest on 0; nothing on 2. */
    assert_true(tu_stats(pool, 2).mapped_bytes == 0);
    assert_true(tu_stats(pool, 1).mapped_bytes == 64 * TU_MIB);
    assert_true(tu_stats(pool, 0).mapped_bytes == 36 * TU_MIB);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_pool_destroy(pool);
}

int main(void)
{
    tu_main_begin("test_pooling");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_all_devices),
        cmocka_unit_test(test_span_from_other_device),
        cmocka_unit_test(test_exact_capacity),
        cmocka_unit_test(test_enomem_keeps_pool),
        cmocka_unit_test(test_small_spill),
        cmocka_unit_test(test_nvlink_pairs),
        cmocka_unit_test(test_pcie_blocks),
        cmocka_unit_test(test_dgx_blocks),
        cmocka_unit_test(test_span_stats),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
