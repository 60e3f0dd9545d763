/*
 * Chunk sizes and the driver-error paths of growing the pool (lib/chunks.c):
 * cold allocations are made of few large chunks, freed chunks are reused
 * whole or carved, and a backend failure in the middle of building a range
 * leaves the pool consistent.
 */
#include "config.h"

#include "testutil.h"

#include <unistd.h>

#include "backend/backend.h"
#include "mem/chunks.h"
#include "mem/runs.h"
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

/* With carve:false a cached block is cut only at a chunk boundary. A
 * freed 4 MiB run and the 2 MiB one after it (one chunk each) serve a
 * 2 MiB request from the 2 MiB chunk with no new chunk, but 2 MiB is never
 * cut out of the 4 MiB chunk: that one is released and a 2 MiB one made
 * in its place, though the device has room for a new one. */
static void test_reuse_at_chunk_boundaries(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:16M,tcache:false,"
                                      "carve:false");
    char *p = tu_alloc(pool, 4 * TU_MIB, 0);
    char *q = tu_alloc(pool, 2 * TU_MIB, 0);
    assert_ptr_equal(q, p + 4 * TU_MIB);
    assert_int_equal(chunks_of(pool, p, 4 * TU_MIB), 1);
    tu_free(pool, p);
    tu_free(pool, q);
    char *x = tu_alloc(pool, 2 * TU_MIB, 0); /* the parked 2 MiB run */
    assert_ptr_equal(x, q);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 2);
    char *y = tu_alloc(pool, 2 * TU_MIB, 0);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_created, 3);
    assert_int_equal(st.chunks_released, 1);
    assert_int_equal(st.reserved_bytes, 4 * TU_MIB);
    assert_int_equal(chunks_of(pool, y, 2 * TU_MIB), 1);
    /* nothing cached left: new memory */
    char *z = tu_alloc(pool, 2 * TU_MIB, 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_released, 1);
    assert_int_equal(st.chunks_created, 4);
    assert_int_equal(st.mapped_bytes, 6 * TU_MIB);
    tu_free(pool, z);
    tu_free(pool, x);
    tu_free(pool, y);
    tu_pool_destroy(pool);
}

/* Carving: freed memory serves smaller plain allocations in place at any
 * granule, with no driver call; they share its chunk, and ump_ptr_info
 * says so (the chunk reaches past them). The bytes of each are its own:
 * writing one never touches its neighbours. Cached granules of a chunk a
 * live allocation shares are carved again but not given back; once all
 * of it is free, ump_trim gives it back whole. */
static void test_carve(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:64M,tcache:false,"
                                      "sim_driver_costs:h200");
    char *p = tu_alloc(pool, 16 * TU_MIB, 0);
    assert_int_equal(chunks_of(pool, p, 16 * TU_MIB), 1);
    tu_free(pool, p);
    ump_stats_t st0 = tu_stats(pool, 0);
    char *a = tu_alloc(pool, 10 * TU_MIB, 0);
    char *b = tu_alloc(pool, 5 * TU_MIB, 0); /* 3 granules */
    assert_ptr_equal(a, p);
    assert_ptr_equal(b, p + 10 * TU_MIB);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_created, st0.chunks_created);
    assert_int_equal(st.driver_ns, st0.driver_ns); /* no driver call */
    ump_ptr_info_t ia = tu_info(pool, a), ib = tu_info(pool, b + 1);
    assert_ptr_equal(ia.chunk_base, p);
    assert_int_equal(ia.chunk_size, 16 * TU_MIB);
    assert_ptr_equal(ib.chunk_base, p);
    tu_fill(a, 10 * TU_MIB, 31);
    tu_fill(b, 5 * TU_MIB, 32);
    tu_free(pool, a);
    char *c = tu_alloc(pool, 4 * TU_MIB, 0); /* in a's place */
    assert_ptr_equal(c, p);
    tu_fill(c, 4 * TU_MIB, 33);
    tu_assert_pattern(b, 5 * TU_MIB, 32);
    /* 6 MiB of the chunk between c and b is cached, and stays mapped */
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.cached_bytes, 6 * TU_MIB);
    assert_int_equal(st.reserved_bytes, 16 * TU_MIB);
    char *d = tu_alloc(pool, 6 * TU_MIB, 0); /* the hole, exactly */
    assert_ptr_equal(d, p + 4 * TU_MIB);
    tu_fill(d, 6 * TU_MIB, 34);
    tu_assert_pattern(c, 4 * TU_MIB, 33);
    tu_assert_pattern(b, 5 * TU_MIB, 32);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_free(pool, d);
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.cached_bytes, 0);
    tu_pool_destroy(pool);
}

/* What does not carve: with carve:false, an offloadable allocation, and
 * once the device's peak is past half of it; each is made of whole chunks
 * of its own (ump_ptr_info: the chunks tile it). A 1 GiB device over
 * 16 MiB: no carving after a 600 MiB peak. */
static void test_no_carve(void **state)
{
    (void)state;
    const char *confs[] = {
        ("backend:sim,sim_devices:1,sim_device_mem:1G,tcache:false,"
         "carve:false"),
        "backend:sim,sim_devices:1,sim_device_mem:1G,tcache:false",
        "backend:sim,sim_devices:1,sim_device_mem:1G,tcache:false"};
    for (int k = 0; k < 3; k++) {
        ump_pool_t *pool = tu_pool_create(confs[k]);
        if (k == 2)
            tu_free(pool, tu_alloc(pool, 600 * TU_MIB, 0));
        char *p = tu_alloc(pool, 16 * TU_MIB, 0);
        tu_free(pool, p);
        ump_hints_t h = tu_hints(0);
        h.flags = k == 1 ? UMP_HINT_OFFLOAD : 0;
        void *a;
        assert_int_equal(ump_alloc(pool, 10 * TU_MIB, &h, &a), 0);
        assert_int_equal(chunks_of(pool, a, 10 * TU_MIB), 1);
        tu_free(pool, a);
        tu_pool_destroy(pool);
    }
}

/* Holes (cached granules of a chunk a live allocation shares) are not
 * room for placement: with device 0 full but for an 8 MiB hole, an
 * offloadable 8 MiB allocation (whole chunks only) and a plain 6 MiB one
 * (carving is off past half the device) asked of device 0 land on device
 * 1, which the policy spills to, rather than failing. */
static void test_holes_not_room(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:64M,tcache:false");
    char *big = tu_alloc(pool, 16 * TU_MIB, 0);
    tu_free(pool, big);
    char *x = tu_alloc(pool, 4 * TU_MIB, 0);
    char *hole = tu_alloc(pool, 8 * TU_MIB, 0);
    char *z = tu_alloc(pool, 4 * TU_MIB, 0);
    tu_free(pool, hole);
    assert_int_equal(ump_trim(pool), 0); /* the parked run: a hole */
    char *fill = tu_alloc(pool, 48 * TU_MIB, 0);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, st.capacity);
    assert_int_equal(st.cached_bytes, 8 * TU_MIB);
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_OFFLOAD;
    void *o, *q;
    assert_int_equal(ump_alloc(pool, 8 * TU_MIB, &h, &o), 0);
    assert_int_equal(tu_info(pool, o).device, 1);
    assert_int_equal(chunks_of(pool, o, 8 * TU_MIB), 1);
    h.flags = 0;
    assert_int_equal(ump_alloc(pool, 6 * TU_MIB, &h, &q), 0);
    assert_int_equal(tu_info(pool, q).device, 1);
    tu_free(pool, q);
    tu_free(pool, o);
    tu_free(pool, fill);
    tu_free(pool, z);
    tu_free(pool, x);
    tu_pool_destroy(pool);
}

/* Below half the device, carving goes on after a shared chunk is freed
 * and cached again: the stress of many sizes leaves every byte where it
 * was written, and the statistics' invariants hold throughout. */
static void test_carve_many(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:1G,tcache:false");
    enum { N = 48 };
    char *p[N] = {0};
    size_t sz[N] = {0};
    uint64_t seed = 12345;
    for (int round = 0; round < 400; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((seed >> 33) % N);
        if (p[i]) {
            tu_assert_pattern(p[i], sz[i], (uint64_t)i + 100);
            tu_free(pool, p[i]);
            p[i] = NULL;
            continue;
        }
        sz[i] = ((seed >> 20) % (12 * TU_MIB)) + TU_MIB + 1;
        p[i] = tu_alloc(pool, sz[i], 0);
        tu_fill(p[i], sz[i], (uint64_t)i + 100);
        ump_stats_t st = tu_stats(pool, 0);
        assert_true(st.mapped_bytes <= st.reserved_bytes);
        assert_true(st.cached_bytes <= st.mapped_bytes);
    }
    for (int i = 0; i < N; i++)
        if (p[i]) {
            tu_assert_pattern(p[i], sz[i], (uint64_t)i + 100);
            tu_free(pool, p[i]);
        }
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).reserved_bytes, 0);
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

/* The cost model's choice between remapping cached chunks and creating
 * (the H200's table, topo/drivercost.h): moving chunks pays against
 * creating the same memory and giving those chunks back later, except
 * where many small chunks would make a range a few new chunks cover. The
 * device holds cached chunks, so new ones are at most warm_chunk (64 MiB,
 * mem/chunks.h). */
static void test_stitch_pays_model(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1");
    size_t ns[512];
    for (size_t i = 0; i < 512; i++)
        ns[i] = 1; /* 2 MiB chunks */
    assert_true(chunks_stitch_pays(pool, ns, 1, 1));
    /* one new 4 MiB handle beats a moved 2 MiB one and a new 2 MiB one */
    assert_false(chunks_stitch_pays(pool, ns, 1, 2));
    /* 1 GiB: 29 ms to move 512 chunks, 0.1 ms to create + 19 to drop */
    assert_false(chunks_stitch_pays(pool, ns, 512, 512));
    /* 32 MiB of 16: 0.89 ms against 0.09 + 0.58 */
    assert_false(chunks_stitch_pays(pool, ns, 16, 16));
    /* 4 x 256 MiB into 1 GiB: 388 us against 16 new 64 MiB chunks, 1.6
     * ms, + 146; access, paid per handle, dominates */
    size_t big[4] = {128, 128, 128, 128};
    assert_true(chunks_stitch_pays(pool, big, 4, 512));
    size_t two[2] = {32, 32}; /* 2 x 64 MiB into 128 MiB: 170 us, 278 */
    assert_true(chunks_stitch_pays(pool, two, 2, 64));
    size_t four[4] = {16, 16, 16, 16}; /* 4 x 32 MiB: 318 us, 351 */
    assert_true(chunks_stitch_pays(pool, four, 4, 64));
    size_t eight[8] = {8, 8, 8, 8, 8, 8, 8, 8}; /* 8 x 16 MiB: 0.58 ms, 0.5 */
    assert_false(chunks_stitch_pays(pool, eight, 8, 64));
    size_t one[1] = {512};
    assert_true(chunks_stitch_pays(pool, one, 1, 512));
    tu_pool_destroy(pool);
}

/* Allocates k runs of sz each separated by a 2 MiB one kept live, then frees
 * the k runs: k cached blocks that do not coalesce. */
static void holes(ump_pool_t *pool, int k, size_t sz, void **keep)
{
    void *p[64];
    for (int i = 0; i < k; i++) {
        p[i] = tu_alloc(pool, sz, 0);
        keep[i] = tu_alloc(pool, 2 * TU_MIB, 0);
    }
    for (int i = 0; i < k; i++)
        tu_free(pool, p[i]);
}

/* The same choice where the pool makes it: 128 MiB over 64 cached 2 MiB
 * chunks is new memory (two 64 MiB chunks: warm_chunk); over 2 cached
 * 64 MiB chunks it is stitched. */
static void test_remap_or_create(void **state)
{
    (void)state;
    const char *conf = "backend:sim,sim_devices:1,sim_device_mem:1G,"
                       "tcache:false";
    void *keep[64];
    ump_pool_t *pool = tu_pool_create(conf);
    holes(pool, 64, 2 * TU_MIB, keep);
    ump_stats_t a = tu_stats(pool, 0);
    void *p = tu_alloc(pool, 128 * TU_MIB, 0);
    ump_stats_t b = tu_stats(pool, 0);
    assert_int_equal(b.chunks_created, a.chunks_created + 2);
    assert_int_equal(b.reserved_bytes, a.reserved_bytes + 128 * TU_MIB);
    assert_int_equal(b.chunks_released, a.chunks_released);
    tu_free(pool, p);
    for (int i = 0; i < 64; i++)
        tu_free(pool, keep[i]);
    tu_pool_destroy(pool);

    pool = tu_pool_create(conf);
    holes(pool, 2, 64 * TU_MIB, keep);
    a = tu_stats(pool, 0);
    p = tu_alloc(pool, 128 * TU_MIB, 0);
    b = tu_stats(pool, 0);
    assert_int_equal(b.chunks_created, a.chunks_created);
    assert_int_equal(b.reserved_bytes, a.reserved_bytes);
    assert_int_equal(tu_info(pool, p).chunk_size, 64 * TU_MIB);
    memset(p, 7, 128 * TU_MIB); /* mapped, all of it */
    tu_free(pool, p);
    for (int i = 0; i < 2; i++)
        tu_free(pool, keep[i]);
    tu_pool_destroy(pool);
}

/* Frees the pool's parked runs into cached blocks and applies the release
 * policy as if `ticks` tenths of a second had passed since creation. */
static ump_stats_t release_at(ump_pool_t *pool, uint32_t ticks)
{
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->clock, ticks);
    runs_unpark_all(pool);
    chunks_release_surplus(pool, 0);
    pthread_mutex_unlock(&pool->lock);
    return tu_stats(pool, 0);
}

/* The release policy keeps what the device used at its peak in the last
 * 10 to 20 seconds (plus release_threshold) and gives the rest back. */
static void test_release_after_quiet_windows(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:1G,tcache:false,"
                                      "release_threshold:64M");
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = tu_alloc(pool, 64 * TU_MIB, 0);
    for (int i = 0; i < 4; i++)
        tu_free(pool, p[i]);
    /* the same window, and the next one: the 256 MiB peak is recent */
    ump_stats_t st = release_at(pool, 5);
    assert_int_equal(st.reserved_bytes, 256 * TU_MIB);
    st = release_at(pool, 150);
    assert_int_equal(st.reserved_bytes, 256 * TU_MIB);
    /* two windows on with nothing in use: the threshold stays cached */
    st = release_at(pool, 250);
    assert_int_equal(st.reserved_bytes, 64 * TU_MIB);
    assert_int_equal(st.chunks_released, 3);
    void *q = tu_alloc(pool, 64 * TU_MIB, 0); /* served by what stayed */
    assert_int_equal(tu_stats(pool, 0).chunks_created, 4);
    tu_free(pool, q);
    tu_pool_destroy(pool);
}

/* The same through the public API with 1-second windows: a device whose
 * use fell keeps its memory for a window or two, then a free gives the
 * surplus back, parked runs included. */
static void test_release_end_to_end(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:1G,tcache:false,"
                                      "release_threshold:0,release_window:1");
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = tu_alloc(pool, 64 * TU_MIB, 0);
    for (int i = 0; i < 4; i++)
        tu_free(pool, p[i]); /* parked: the peak is recent */
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.reserved_bytes, 256 * TU_MIB);
    assert_int_equal(st.chunks_released, 0);
    usleep(2500 * 1000); /* two windows with 4 MiB in use at most */
    void *q = tu_alloc(pool, 4 * TU_MIB, 0);
    tu_free(pool, q);
    st = tu_stats(pool, 0);
    assert_true(st.reserved_bytes <= 4 * TU_MIB);
    assert_int_equal(st.live_bytes, 0);
    tu_pool_destroy(pool);
}

/* A cached block with free addresses after it grows in place: the freed
 * 8 MiB run serves the first 8 MiB of a 12 MiB request at its own address,
 * and only 4 MiB are made. */
static void test_extend_in_place(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:1G,tcache:false");
    char *a = tu_alloc(pool, 8 * TU_MIB, 0);
    memset(a, 1, 8 * TU_MIB);
    tu_free(pool, a);
    char *b = tu_alloc(pool, 12 * TU_MIB, 0);
    ump_stats_t st = tu_stats(pool, 0);
    assert_ptr_equal(b, a);
    assert_int_equal(st.chunks_created, 2);
    assert_int_equal(st.reserved_bytes, 12 * TU_MIB);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(chunks_of(pool, b, 12 * TU_MIB), 2);
    memset(b, 2, 12 * TU_MIB); /* all of it mapped */
    tu_free(pool, b);
    /* a driver error while the rest is mapped: the block is cached again,
     * as it was, and nothing else changed */
    void *bctx = pool->bctx;
    ump_stats_t before = tu_stats(pool, 0);
    assert_int_equal(sim_inject_fault(bctx, "map", 1, -EIO), 0);
    void *c = NULL;
    assert_int_equal(ump_alloc(pool, 16 * TU_MIB, NULL, &c), -EIO);
    ump_stats_t after = tu_stats(pool, 0);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes);
    assert_int_equal(after.live_bytes, 0);
    assert_int_equal(after.reserved_bytes - after.cached_bytes, 0);
    char *d = tu_alloc(pool, 12 * TU_MIB, 0); /* the block, whole */
    assert_ptr_equal(d, a);
    tu_free(pool, d);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).reserved_bytes, 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_gib_is_one_chunk),
        cmocka_unit_test(test_max_chunk),
        cmocka_unit_test(test_reuse_at_chunk_boundaries),
        cmocka_unit_test(test_carve),
        cmocka_unit_test(test_no_carve),
        cmocka_unit_test(test_carve_many),
        cmocka_unit_test(test_holes_not_room),
        cmocka_unit_test(test_parked_run_reused),
        cmocka_unit_test(test_big_idle_chunk_released_for_small),
        cmocka_unit_test(test_fault_map),
        cmocka_unit_test(test_fault_set_access),
        cmocka_unit_test(test_fault_create),
        cmocka_unit_test(test_stitch_pays_model),
        cmocka_unit_test(test_remap_or_create),
        cmocka_unit_test(test_release_after_quiet_windows),
        cmocka_unit_test(test_release_end_to_end),
        cmocka_unit_test(test_extend_in_place),
    };
    return cmocka_run_group_tests_name("chunks", tests, NULL, NULL);
}
