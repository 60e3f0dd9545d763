/*
 * Link traffic and collective counters (ump_link_stats, ump_coll_stats):
 * tier moves and collectives of known sizes add exactly their bytes to the
 * links they crossed, and nothing to any other; the collectives' calls,
 * bytes and bus bytes follow nccl-tests' definitions; bad locations and
 * collectives are refused.
 *
 * Every check compares the whole table of links before and after one
 * operation, so that bytes counted on a wrong link fail as surely as bytes
 * missing on the right one.
 */
#include "config.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

#define NDEV 4
#define CHUNK TU_CHUNK
#define S (3 * CHUNK) /* an allocation of three chunks, moved one by one */
#define NLOC (NDEV + 3)

/* The locations of the table: devices, then host, NVMe and the network. */
static int loc(int i)
{
    return i < NDEV ? i : i == NDEV ? UMP_LOC_HOST
                      : i == NDEV + 1 ? UMP_LOC_NVME
                                      : UMP_LOC_NET;
}

static const char *loc_name(int i)
{
    static const char *const names[] = {"0", "1", "2", "3", "host", "nvme",
                                        "net"};
    return names[i];
}

/* Every link's bytes of one cause (0: tier, 1: collectives). */
struct table {
    uint64_t b[NLOC][NLOC];
};

static struct table links(ump_pool_t *pool, int cause)
{
    struct table t = {0};
    for (int a = 0; a < NLOC; a++)
        for (int b = 0; b < NLOC; b++) {
            if (a == b)
                continue;
            ump_link_stats_t l;
            expect_rc(ump_link_stats(pool, loc(a), loc(b), &l), 0);
            t.b[a][b] = cause ? l.coll_bytes : l.tier_bytes;
        }
    return t;
}

/* After minus before must be want exactly, link by link. */
static void expect_delta(const struct table *before, const struct table *after,
                         const struct table *want, const char *what)
{
    int bad = 0;
    for (int a = 0; a < NLOC; a++)
        for (int b = 0; b < NLOC; b++) {
            uint64_t d = after->b[a][b] - before->b[a][b];
            if (d != want->b[a][b]) {
                print_message("%s: link %s -> %s: %llu bytes, want %llu\n",
                              what, loc_name(a), loc_name(b),
                              (unsigned long long)d,
                              (unsigned long long)want->b[a][b]);
                bad++;
            }
        }
    if (bad)
        fail_msg("%s: %d links wrong", what, bad);
}

enum { H = NDEV, N = NDEV + 1, NET = NDEV + 2 };

/* Runs op, then checks that only the links in want moved, by their bytes. */
#define STEP(pool, cause, op, what, ...)                                       \
    do {                                                                       \
        struct table before_ = links(pool, cause);                             \
        op;                                                                    \
        struct table after_ = links(pool, cause);                              \
        struct table want_ = {0};                                              \
        struct {                                                               \
            int a, b;                                                          \
            uint64_t n;                                                        \
        } w_[] = {__VA_ARGS__};                                                \
        for (size_t i_ = 0; i_ < sizeof(w_) / sizeof(w_[0]); i_++)             \
            if (w_[i_].n)                                                      \
                want_.b[w_[i_].a][w_[i_].b] += w_[i_].n;                       \
        expect_delta(&before_, &after_, &want_, what);                         \
    } while (0)

static char dir[64];

static void test_tier_moves(void **state)
{
    (void)state;
    char conf[256];
    snprintf(conf, sizeof(conf),
             "backend:sim,sim_devices:%d,sim_device_mem:64M,chunk_size:2M,"
             "max_chunk:2M,host_reserve:0,nvme_dir:%s", NDEV, dir);
    ump_pool_t *pool = tu_pool_create(conf);
    ump_hints_t h = tu_hints(1);
    h.flags = UMP_HINT_OFFLOAD;
    void *p;
    expect_rc(ump_alloc(pool, S, &h, &p), 0);
    tu_pool_fill(pool, p, S, 7);
    STEP(pool, 0, expect_rc(ump_evict(pool, p, S, UMP_TIER_HOST), 0),
         "device 1 to host", {1, H, S});
    STEP(pool, 0, expect_rc(ump_evict(pool, p, S, UMP_TIER_NVME), 0),
         "host to NVMe", {H, N, S});
    /* Up from NVMe: through the host, into device 1. */
    STEP(pool, 0, expect_rc(ump_acquire(pool, p, S, 1, NULL), 0),
         "NVMe to device 1", {N, H, S}, {H, 1, S});
    expect_rc(ump_release(pool, p, S), 0);
    /* Down to NVMe at once: the bounce buffers are host memory. */
    STEP(pool, 0, expect_rc(ump_evict(pool, p, S, UMP_TIER_NVME), 0),
         "device 1 to NVMe", {1, H, S}, {H, N, S});
    STEP(pool, 0, expect_rc(ump_acquire(pool, p, S, 1, NULL), 0),
         "NVMe to device 1 again", {N, H, S}, {H, 1, S});
    expect_rc(ump_release(pool, p, S), 0);
    /* Part of it: one chunk. */
    STEP(pool, 0,
         expect_rc(ump_evict(pool, (char *)p + CHUNK, CHUNK, UMP_TIER_HOST), 0),
         "one chunk to host", {1, H, CHUNK});
    STEP(pool, 0, expect_rc(ump_acquire(pool, p, S, 1, NULL), 0),
         "one chunk up", {H, 1, CHUNK});
    expect_rc(ump_release(pool, p, S), 0);
    tu_assert_pool_pattern(pool, p, S, 7);
    /* Contents dropped (DONTNEED): the move copies nothing. */
    expect_rc(ump_advise(pool, p, S, UMP_ADVISE_DONTNEED), 0);
    STEP(pool, 0, expect_rc(ump_evict(pool, p, S, UMP_TIER_HOST), 0),
         "a discarded move", {0, 0, 0});
    /* Collectives' counters saw none of it. */
    struct table none = {0}, coll = links(pool, 1);
    expect_delta(&none, &coll, &none, "collective links after tier moves");
    /* The statistics' spills and restores agree: every byte that left
     * device 1 went down, every byte that came to it came up. */
    ump_stats_t st = tu_stats(pool, 1);
    ump_link_stats_t l;
    expect_rc(ump_link_stats(pool, 1, UMP_LOC_HOST, &l), 0);
    assert_int_equal(l.tier_bytes, 2 * S + CHUNK);
    assert_true(st.spill_bytes >= l.tier_bytes);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* Suspend moves every device's memory down and resume brings it back:
 * slabs and runs alike cross their device's host link. */
static void test_suspend_resume(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:4,"
                                      "sim_device_mem:64M,chunk_size:2M,"
                                      "max_chunk:2M,host_reserve:0");
    void *run = tu_alloc(pool, S, 2);
    void *obj = tu_alloc(pool, 4096, 3); /* a slab object: its slab moves */
    STEP(pool, 0, expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), 0),
         "suspend", {2, H, S}, {3, H, CHUNK});
    STEP(pool, 0, expect_rc(ump_pool_resume(pool), 0), "resume", {H, 2, S},
         {H, 3, CHUNK});
    tu_free(pool, run);
    tu_free(pool, obj);
    tu_pool_destroy(pool);
}

/* Rank r's buffers of bytes on device r. */
static void rank_buffers(ump_pool_t *pool, size_t bytes, void *send[NDEV],
                         void *recv[NDEV])
{
    for (int r = 0; r < NDEV; r++) {
        send[r] = tu_alloc(pool, bytes, r);
        recv[r] = tu_alloc(pool, bytes, r);
        expect_rc(ump_memset_async(pool, send[r], r + 1, bytes, NULL), 0);
    }
}

static void expect_coll(ump_pool_t *pool, int coll, uint64_t calls,
                        uint64_t bytes, uint64_t timed, uint64_t bus)
{
    ump_coll_stats_t s;
    expect_rc(ump_coll_stats(pool, coll, &s), 0);
    assert_int_equal(s.calls, calls);
    assert_int_equal(s.bytes, bytes);
    assert_int_equal(s.timed_calls, timed);
    assert_int_equal(s.timed_bus_bytes, bus);
    assert_true(timed ? s.timed_ns > 0 : s.timed_ns == 0);
}

static void test_collectives(void **state)
{
    (void)state;
    /* Above the fan's 1 MiB (model.h): the algorithms' own schedules. */
    const size_t b = 2 << 20, count = b / sizeof(float);
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:4,"
                                      "sim_device_mem:64M");
    void *send[NDEV], *recv[NDEV];
    rank_buffers(pool, NDEV * b, send, recv);
    const void *const *sd = (const void *const *)send;
    ump_comm_t *one, *ring;
    expect_rc(ump_comm_create(pool, NDEV, NULL, "coll_algo:oneshot", &one), 0);
    expect_rc(ump_comm_create(pool, NDEV, NULL, "coll_algo:ring", &ring), 0);

    /* One-shot: every rank reads every peer's whole input. */
    STEP(pool, 1,
         expect_rc(ump_allreduce(one, sd, recv, count, UMP_FLOAT32, UMP_SUM,
                                 NULL), 0),
         "one-shot allreduce", {1, 0, b}, {2, 0, b}, {3, 0, b}, {0, 1, b},
         {2, 1, b}, {3, 1, b}, {0, 2, b}, {1, 2, b}, {3, 2, b}, {0, 3, b},
         {1, 3, b}, {2, 3, b});
    expect_coll(pool, UMP_COLL_ALLREDUCE, 1, b, 1, b * 3 / 2);

    /* Ring: each rank hands its successor 2 (n - 1) slices of b / n. */
    STEP(pool, 1,
         expect_rc(ump_allreduce(ring, sd, recv, count, UMP_FLOAT32, UMP_SUM,
                                 NULL), 0),
         "ring allreduce", {0, 1, b * 3 / 2}, {1, 2, b * 3 / 2},
         {2, 3, b * 3 / 2}, {3, 0, b * 3 / 2});
    expect_coll(pool, UMP_COLL_ALLREDUCE, 2, 2 * b, 2, 3 * b);

    /* All-gather: every rank gathers each peer's block. */
    STEP(pool, 1,
         expect_rc(ump_allgather(one, sd, recv, count, UMP_FLOAT32, NULL), 0),
         "all-gather", {1, 0, b}, {2, 0, b}, {3, 0, b}, {0, 1, b}, {2, 1, b},
         {3, 1, b}, {0, 2, b}, {1, 2, b}, {3, 2, b}, {0, 3, b}, {1, 3, b},
         {2, 3, b});
    expect_coll(pool, UMP_COLL_ALLGATHER, 1, NDEV * b, 1, 3 * b);

    /* Broadcast from rank 2: the peers read its buffer; bus factor 1.
     * (At 2 MiB the model prefers a ring; at 1 MiB direct and the fan
     * move the same bytes.) */
    STEP(pool, 1,
         expect_rc(ump_broadcast(one, sd, recv, count / 2, UMP_FLOAT32, 2,
                                 NULL), 0),
         "broadcast", {2, 0, b / 2}, {2, 1, b / 2}, {2, 3, b / 2});
    expect_coll(pool, UMP_COLL_BROADCAST, 1, b / 2, 1, b / 2);

    /* On streams: counted, not timed. */
    ump_stream_t st[NDEV];
    for (int r = 0; r < NDEV; r++)
        expect_rc(ump_stream_create(pool, r, &st[r]), 0);
    expect_rc(ump_allreduce(one, sd, recv, count, UMP_FLOAT32, UMP_SUM, st),
              0);
    for (int r = 0; r < NDEV; r++)
        expect_rc(ump_stream_synchronize(pool, st[r]), 0);
    expect_coll(pool, UMP_COLL_ALLREDUCE, 3, 3 * b, 2, 3 * b);
    /* A failed call is not counted. */
    expect_rc(ump_allreduce(one, sd, recv, count, (ump_dtype_t)99, UMP_SUM,
                            NULL), -EINVAL);
    expect_coll(pool, UMP_COLL_ALLREDUCE, 3, 3 * b, 2, 3 * b);

    /* Small calls run as a fan: rank 0 (a broadcast's or reduce's root) reads
     * what each peer contributes and stores each peer's result. */
    const size_t f = 16 << 10, fcount = f / sizeof(float);
    STEP(pool, 1,
         expect_rc(ump_allreduce(one, sd, recv, fcount, UMP_FLOAT32, UMP_SUM,
                                 NULL), 0),
         "fan allreduce", {1, 0, f}, {2, 0, f}, {3, 0, f}, {0, 1, f},
         {0, 2, f}, {0, 3, f});
    STEP(pool, 1,
         expect_rc(ump_allgather(one, sd, recv, fcount, UMP_FLOAT32, NULL), 0),
         "fan all-gather", {1, 0, f}, {2, 0, f}, {3, 0, f}, {0, 1, NDEV * f},
         {0, 2, NDEV * f}, {0, 3, NDEV * f});
    STEP(pool, 1,
         expect_rc(ump_reduce_scatter(one, sd, recv, fcount, UMP_FLOAT32,
                                      UMP_SUM, NULL), 0),
         "fan reduce-scatter", {1, 0, NDEV * f}, {2, 0, NDEV * f},
         {3, 0, NDEV * f}, {0, 1, f}, {0, 2, f}, {0, 3, f});
    STEP(pool, 1,
         expect_rc(ump_broadcast(one, sd, recv, fcount, UMP_FLOAT32, 2, NULL),
                   0),
         "fan broadcast", {2, 0, f}, {2, 1, f}, {2, 3, f});
    STEP(pool, 1,
         expect_rc(ump_reduce(one, sd, recv, fcount, UMP_FLOAT32, UMP_SUM, 1,
                              NULL), 0),
         "fan reduce", {0, 1, f}, {2, 1, f}, {3, 1, f});

    /* Point-to-point: rank 0 to rank 3. */
    STEP(pool, 1,
         {
             expect_rc(ump_group_start(), 0);
             expect_rc(ump_send(one, 0, send[0], count, UMP_FLOAT32, 3, NULL),
                       0);
             expect_rc(ump_recv(one, 3, recv[3], count, UMP_FLOAT32, 0, NULL),
                       0);
             expect_rc(ump_group_end(), 0);
         },
         "send 0 -> 3", {0, 3, b});
    /* No tier move among them. */
    struct table none = {0}, tier = links(pool, 0);
    expect_delta(&none, &tier, &none, "tier links after collectives");

    for (int r = 0; r < NDEV; r++) {
        expect_rc(ump_stream_destroy(pool, st[r]), 0);
        tu_free(pool, send[r]);
        tu_free(pool, recv[r]);
    }
    expect_rc(ump_comm_destroy(one), 0);
    expect_rc(ump_comm_destroy(ring), 0);
    tu_pool_destroy(pool);
}

/* The topology's bandwidths, and every bad argument. */
static void test_bandwidth_and_bad_input(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_topology:pcie-4gpu");
    ump_link_stats_t l;
    ump_link_props_t p;
    expect_rc(ump_link_stats(pool, 0, 3, &l), 0);
    expect_rc(ump_link_props(pool, 0, 3, &p), 0);
    assert_true(l.bandwidth_gbs == p.bandwidth_gbs && l.bandwidth_gbs > 0);
    expect_rc(ump_link_stats(pool, 2, UMP_LOC_HOST, &l), 0);
    assert_true(l.bandwidth_gbs == 25); /* its pcie_bw */
    expect_rc(ump_link_stats(pool, UMP_LOC_HOST, 2, &l), 0);
    assert_true(l.bandwidth_gbs == 25);
    expect_rc(ump_link_stats(pool, UMP_LOC_HOST, UMP_LOC_NVME, &l), 0);
    assert_true(l.bandwidth_gbs == 0 && l.tier_bytes == 0);
    expect_rc(ump_link_stats(pool, 1, UMP_LOC_NET, &l), 0);

    expect_rc(ump_link_stats(pool, 1, 1, &l), -EINVAL);
    expect_rc(ump_link_stats(pool, UMP_LOC_HOST, UMP_LOC_HOST, &l), -EINVAL);
    expect_rc(ump_link_stats(pool, 4, 0, &l), -EINVAL); /* 4 devices */
    expect_rc(ump_link_stats(pool, 0, UMP_MAX_DEVICES, &l), -EINVAL);
    expect_rc(ump_link_stats(pool, UMP_DEVICE_ALL, 0, &l), -EINVAL);
    expect_rc(ump_link_stats(pool, 0, -6, &l), -EINVAL);
    expect_rc(ump_link_stats(pool, 0, 1, NULL), -EINVAL);
    expect_rc(ump_link_stats(NULL, 0, 1, &l), -EINVAL);
    ump_coll_stats_t c;
    expect_rc(ump_coll_stats(pool, UMP_COLL_SCATTER, &c), 0);
    assert_int_equal(c.calls, 0);
    expect_rc(ump_coll_stats(pool, UMP_COLL_SCATTER + 1, &c), -EINVAL);
    expect_rc(ump_coll_stats(pool, -1, &c), -EINVAL);
    expect_rc(ump_coll_stats(pool, 0, NULL), -EINVAL);
    expect_rc(ump_coll_stats(NULL, 0, &c), -EINVAL);
    tu_pool_destroy(pool);
}

int main(void)
{
    tu_sim_only("exact link traffic needs the sim's known devices");
    snprintf(dir, sizeof(dir), "/tmp/umpool-traffic-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier_moves),
        cmocka_unit_test(test_suspend_resume),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_bandwidth_and_bad_input),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_remove_tree(dir);
    return failed;
}
