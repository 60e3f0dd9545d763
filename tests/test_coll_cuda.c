/*
 * Collectives on the cuda backend without a GPU: the GPU executor (gpu.c)
 * on the fake driver (tests/fake_cuda.c), which runs copies at once and
 * emulates the reduction kernel with the host reduction (the kernel's
 * contract, kernel.h). What this checks is the executor: the schedules,
 * the events between the ranks' streams, the module loaded from the
 * embedded image, staging through pinned host memory where ranks cannot
 * reach each other, held buffers, failures half way. The kernel itself
 * runs on a GPU only (tests/gpu/test_gpu_coll.c).
 *
 * Built without cuda.h there is no fake driver: every test is skipped.
 * Built without nvcc there is no kernel: the reducing collectives must be
 * -ENOTSUP and the others must still run.
 */
#include "config.h"

#include "testutil.h"
#include "fakecuda_util.h"

#include "coll/coll.h"
#include "coll/kernel.h"
#include "coll/reduce.h"
#include "coll_cases.h"

#ifdef HAVE_CUDA_H

/* Built without nvcc: a reducing collective with good buffers is -ENOTSUP,
 * with one log line. */
static void not_supported(ump_pool_t *pool, ump_comm_t *comm, int coll, int n,
                          size_t c, ump_dtype_t dt)
{
    void *sb[NR_MAX], *rb[NR_MAX];
    const void *send[NR_MAX];
    for (int r = 0; r < n; r++) {
        sb[r] = tu_alloc(pool, c * 4 * (size_t)n, r);
        rb[r] = tu_alloc(pool, c * 4 * (size_t)n, r);
        send[r] = sb[r];
    }
    struct tu_capture cap;
    char log[4096];
    tu_capture_start(&cap);
    int rc = call(comm, coll, send, rb, c, dt, 0);
    tu_capture_stop(&cap, log, sizeof(log));
    assert_int_equal(rc, -ENOTSUP);
    assert_int_equal(tu_count_log_lines(log), 1);
    for (int r = 0; r < n; r++) {
        tu_free(pool, sb[r]);
        tu_free(pool, rb[r]);
    }
}

/* Every collective on n ranks of pool, with each algorithm forced in turn
 * (the executor runs its own where the forced one is the sim's only). */
static void all_collectives(ump_pool_t *pool, int n)
{
    static const char *const algos[] = {"auto", "oneshot", "twoshot",
                                        "direct", "ring"};
    static const size_t counts[] = {1, 7, 1000, 4099};
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        char cc[64];
        snprintf(cc, sizeof(cc), "coll_algo:%s", algos[a]);
        ump_comm_t *comm;
        assert_int_equal(ump_comm_create(pool, n, NULL, cc, &comm), 0);
        for (int coll = 0; coll < COLL_NCOLL; coll++) {
            ump_coll_plan_t plan;
            int rc = ump_comm_plan(comm, coll, 1000, UMP_INT32, &plan);
            if (coll_reducing(coll) && !coll_kernel_image) {
                assert_int_equal(rc, -ENOTSUP);
                continue;
            }
            assert_int_equal(rc, 0);
            if (coll != UMP_COLL_ALLREDUCE)
                assert_string_equal(plan.algorithm, "direct");
            else if (!strcmp(algos[a], "oneshot"))
                assert_string_equal(plan.algorithm, "oneshot");
            else /* two-shot where every rank reaches every other */
                assert_true(!strcmp(plan.algorithm, "oneshot") ||
                            !strcmp(plan.algorithm, "twoshot"));
        }
        for (int coll = 0; coll < COLL_NCOLL; coll++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]);
                 ci++)
                for (int ip = 0; ip < 2; ip++) {
                    ump_dtype_t dt = ci % 2 ? UMP_FLOAT32 : UMP_INT32;
                    if (!coll_reducing(coll) || coll_kernel_image) {
                        run_case(pool, comm, coll, n, counts[ci], dt, ip,
                                 algos[a]);
                        continue;
                    }
                    not_supported(pool, comm, coll, n, counts[ci], dt);
                }
        assert_int_equal(ump_comm_destroy(comm), 0);
    }
}

/* One GPU shown as 4 devices (what the GPU tests use), on 1 to 4 ranks;
 * the kernel's module is loaded once, in the GPU's one context. */
static void test_virtual_devices(void **state)
{
    (void)state;
    use_fake("devices=1,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:4");
    long launches = fake_count("launches"), waits = fake_count("waits");
    for (int n = 1; n <= 4; n++) {
        int dev[4] = {0, 1, 2, 3};
        ump_comm_t *comm;
        assert_int_equal(ump_comm_create(pool, n, dev, NULL, &comm), 0);
        assert_int_equal(ump_comm_destroy(comm), 0);
        if (n == 4)
            all_collectives(pool, n);
    }
    if (coll_kernel_image) {
        assert_true(fake_count("launches") > launches);
        assert_int_equal(fake_count("modules"), 1);
    }
    assert_true(fake_count("waits") > waits);
    tu_pool_destroy(pool);
    assert_int_equal(fake_count("modules"), 0); /* unloaded at close */
}

/* Two GPUs with peer access: two contexts, events waited for across them;
 * a forced two-shot is what runs. */
static void test_two_gpus(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    if (coll_kernel_image) {
        ump_comm_t *comm;
        ump_coll_plan_t plan;
        assert_int_equal(ump_comm_create(pool, 2, NULL, "coll_algo:twoshot",
                                         &comm), 0);
        assert_int_equal(ump_comm_plan(comm, UMP_COLL_ALLREDUCE, 1000,
                                       UMP_FLOAT32, &plan), 0);
        assert_string_equal(plan.algorithm, "twoshot");
        assert_int_equal(ump_comm_destroy(comm), 0);
    }
    all_collectives(pool, 2);
    if (coll_kernel_image)
        assert_int_equal(fake_count("modules"), 2);
    tu_pool_destroy(pool);
}

/* Four GPUs without peer access: every peer's send buffer comes through
 * pinned host memory of the communicator; two-shot is not run (it stores
 * into the peers' receive buffers). */
static void test_no_peer_staging(void **state)
{
    (void)state;
    use_fake("devices=4,mem=64,nopeer");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    long regs = fake_count("host_regs");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 4, NULL, "coll_algo:twoshot",
                                     &comm), 0);
    ump_coll_plan_t plan;
    if (coll_kernel_image) {
        assert_int_equal(ump_comm_plan(comm, UMP_COLL_ALLREDUCE, 1 << 20,
                                       UMP_FLOAT32, &plan), 0);
        assert_string_equal(plan.algorithm, "oneshot");
    }
    run_case(pool, comm, UMP_COLL_ALLGATHER, 4, 1000, UMP_INT32, false,
             "direct");
    assert_int_equal(fake_count("host_regs"), regs + 4);
    assert_int_equal(ump_comm_destroy(comm), 0);
    assert_int_equal(fake_count("host_regs"), regs);
    all_collectives(pool, 4);
    tu_pool_destroy(pool);
}

/* Peer access need not be transitive: GPUs 0 and 1 are peers, and each of
 * them and GPU 2, but 1 and 2 are not. Rank 0 (GPU 0) may keep its send
 * buffer on GPU 2; rank 1 cannot reach it there, so it comes through
 * pinned host memory though the two ranks are peers. Two-shot is not
 * planned on such a pool (it would store into buffers a rank may not
 * reach). */
static void test_peer_not_transitive(void **state)
{
    (void)state;
    use_fake("devices=3,mem=64,nopeer=1-2");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    int two[2] = {0, 1};
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 2, two, "coll_algo:twoshot",
                                     &comm), 0);
    if (coll_kernel_image) {
        ump_coll_plan_t plan;
        assert_int_equal(ump_comm_plan(comm, UMP_COLL_ALLREDUCE, 1 << 20,
                                       UMP_FLOAT32, &plan), 0);
        assert_string_equal(plan.algorithm, "oneshot");
    }
    const size_t c = 1000;
    int32_t *s0 = tu_alloc(pool, c * 4, 2), *s1 = tu_alloc(pool, c * 4, 1);
    int32_t *r0 = tu_alloc(pool, 2 * c * 4, 0);
    int32_t *r1 = tu_alloc(pool, 2 * c * 4, 1);
    for (size_t i = 0; i < c; i++) {
        s0[i] = (int32_t)i;
        s1[i] = -(int32_t)i;
    }
    const void *send[2] = {s0, s1};
    void *recv[2] = {r0, r1};
    long regs = fake_count("host_regs");
    assert_int_equal(ump_allgather(comm, send, recv, c, UMP_INT32, NULL), 0);
    assert_int_equal(fake_count("host_regs"), regs + 1); /* rank 0's */
    for (size_t i = 0; i < c; i++) {
        assert_int_equal(r0[i], (int32_t)i);
        assert_int_equal(r1[i], (int32_t)i);
        assert_int_equal(r0[c + i], -(int32_t)i);
        assert_int_equal(r1[c + i], -(int32_t)i);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_free(pool, s0);
    tu_free(pool, s1);
    tu_free(pool, r0);
    tu_free(pool, r1);
    tu_pool_destroy(pool);
}

/* A launch that fails half way with an error that leaves the GPU usable
 * (out of resources; a sticky one, such as CUDA_ERROR_LAUNCH_FAILED, marks
 * the GPU failed: test_cuda's test_fake_device_lost): the error comes
 * back, the buffers the call acquired are released, the communicator and
 * the pool work on. */
static void test_launch_failure(void **state)
{
    (void)state;
    if (!coll_kernel_image)
        skip(); /* no kernel, no launch */
    /* A small call is one launch (the fan): its only launch fails. A large
     * one is one per rank: the second fails, half way. */
    static const struct {
        const char *mode;
        size_t bytes;
    } cases[] = {{"devices=1,mem=64,fail=cuLaunchKernel:1:701", 4096},
                 {"devices=1,mem=64,fail=cuLaunchKernel:2:701", 2 << 20}};
    for (int k = 0; k < 2; k++) {
        size_t bytes = cases[k].bytes, count = bytes / 4;
        use_fake(cases[k].mode);
        ump_pool_t *pool =
            tu_pool_create("backend:cuda,cuda_virtual_devices:4");
        ump_comm_t *comm;
        assert_int_equal(ump_comm_create(pool, 4, NULL, "coll_algo:oneshot",
                                         &comm), 0);
        void *b[4];
        const void *send[4];
        ump_hints_t h = tu_hints(1);
        h.flags = UMP_HINT_OFFLOAD;
        for (int r = 0; r < 4; r++) {
            if (r == 1)
                assert_int_equal(ump_alloc(pool, bytes, &h, &b[r]), 0);
            else
                b[r] = tu_alloc(pool, bytes, r);
            memset(b[r], 1, bytes);
            send[r] = b[r];
        }
        struct tu_capture cap;
        char log[4096];
        tu_capture_start(&cap);
        int rc = ump_allreduce(comm, send, b, count, UMP_INT32, UMP_SUM,
                               NULL);
        tu_capture_stop(&cap, log, sizeof(log));
        assert_true(rc < 0);
        assert_non_null(strstr(log, "cuLaunchKernel"));
        /* not held any more: a release of it is one too many */
        tu_capture_start(&cap);
        assert_int_equal(ump_release(pool, b[1], 0), -EINVAL);
        tu_capture_stop(&cap, log, sizeof(log));
        for (int r = 0; r < 4; r++)
            memset(b[r], 0, bytes), ((int32_t *)b[r])[0] = r + 1;
        assert_int_equal(ump_allreduce(comm, send, b, count, UMP_INT32,
                                       UMP_SUM, NULL), 0);
        for (int r = 0; r < 4; r++)
            assert_int_equal(((int32_t *)b[r])[0], 10);
        assert_int_equal(ump_comm_destroy(comm), 0);
        for (int r = 0; r < 4; r++)
            tu_free(pool, b[r]);
        tu_pool_destroy(pool);
    }
}

/* The fan's tests' communicator: 4 ranks on one fake GPU shown as 4
 * devices (SKIP without the kernel). */
static ump_comm_t *fan_comm(ump_pool_t **pool_p, const char *config)
{
    if (!coll_kernel_image)
        skip();
    use_fake("devices=1,mem=64");
    *pool_p = tu_pool_create("backend:cuda,cuda_virtual_devices:4");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(*pool_p, 4, NULL, config, &comm), 0);
    return comm;
}

/* One int32 SUM call of the fan's tests on 4 ranks, mode 0: on the
 * communicator's own streams (one launch, no wait, one sync), 1: on the
 * caller's streams st (one launch, 2(n-1) waits, no sync; the streams are
 * synchronized after), 2: large (not checked here). Returns the launches
 * it made. */
static long fan_call(ump_pool_t *pool, ump_comm_t *comm, int coll,
                     const void **send, void **recv, size_t count, int root,
                     int mode, ump_stream_t *st)
{
    long l0 = fake_count("launches"), w0 = fake_count("waits");
    long s0 = fake_count("syncs");
    assert_int_equal(coll_case_call(comm, coll, send, recv, count, UMP_INT32,
                                    UMP_SUM, root, mode == 1 ? st : NULL),
                     0);
    long launches = fake_count("launches") - l0;
    long waits = fake_count("waits") - w0;
    long syncs = fake_count("syncs") - s0;
    if (mode == 0) {
        assert_int_equal(launches, 1);
        assert_int_equal(waits, 0);
        assert_int_equal(syncs, 1);
    } else if (mode == 1) {
        assert_int_equal(launches, 1);
        assert_int_equal(waits, 6);
        assert_int_equal(syncs, 0);
        for (int r = 0; r < 4; r++)
            assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    }
    return launches;
}

/* The fan: a small allreduce, broadcast or reduce is one launch on one
 * rank's stream. Synchronous (the communicator's own streams), it waits for
 * no event and syncs one stream: the floor. On the caller's streams, the
 * launching stream waits for the 3 others on entry and they for it on
 * exit. Above 1 MiB per rank, one launch per rank, as before. Every rank
 * gets the result, in place too. */
static void test_fan(void **state)
{
    (void)state;
    ump_pool_t *pool;
    ump_comm_t *comm = fan_comm(&pool, "coll_algo:oneshot");
    const size_t big = 2 << 20;
    void *b[4];
    const void *send[4];
    ump_stream_t st[4];
    for (int r = 0; r < 4; r++) {
        b[r] = tu_alloc(pool, big, r);
        send[r] = b[r];
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
    }
    for (int coll = 0; coll < 3; coll++) {
        static const int colls[] = {UMP_COLL_ALLREDUCE, UMP_COLL_BROADCAST,
                                    UMP_COLL_REDUCE};
        for (int mode = 0; mode < 3; mode++) { /* own, caller's, large */
            size_t count = mode == 2 ? big / 4 : 1024;
            for (int r = 0; r < 4; r++) {
                memset(b[r], 0, count * 4);
                ((int32_t *)b[r])[count - 1] = r + 1;
            }
            long launches = fan_call(pool, comm, colls[coll], send, b,
                                     count, 2, mode, st);
            if (mode == 2 && colls[coll] == UMP_COLL_ALLREDUCE)
                assert_int_equal(launches, 4); /* one-shot: each rank's */
            for (int r = 0; r < 4; r++) {
                int32_t got = ((int32_t *)b[r])[count - 1];
                int32_t want = colls[coll] == UMP_COLL_BROADCAST ? 3
                               : colls[coll] == UMP_COLL_REDUCE && r != 2
                                   ? r + 1
                                   : 10;
                if (got != want)
                    fail_msg("coll %d mode %d: rank %d got %d, not %d",
                             colls[coll], mode, r, got, want);
            }
        }
    }
    for (int r = 0; r < 4; r++) {
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
        tu_free(pool, b[r]);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

/* Allgather and reduce-scatter in one launch too (the kernel's segmented
 * shapes), on the communicator's streams and the caller's, out of place
 * and in place (NCCL's layouts), every element checked; above the fan's
 * 1 MiB, the schedules (copies for allgather, a launch per rank for
 * reduce-scatter). */
static void test_fan_segments(void **state)
{
    (void)state;
    ump_pool_t *pool;
    ump_comm_t *comm = fan_comm(&pool, NULL);
    const size_t cap = 4 << 20;
    int32_t *sb[4], *rb[4];
    ump_stream_t st[4];
    for (int r = 0; r < 4; r++) {
        sb[r] = tu_alloc(pool, cap, r);
        rb[r] = tu_alloc(pool, cap, r);
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
    }
    for (int gather = 0; gather < 2; gather++)
        for (int mode = 0; mode < 3; mode++) /* own, caller's, large */
            for (int ip = 0; ip < 2; ip++) {
                size_t count = mode == 2 ? 128 << 10 : 1000;
                const void *send[4];
                void *recv[4];
                for (int r = 0; r < 4; r++) {
                    /* in place: the small buffer is rank r's block of the
                     * big one */
                    int32_t *big = gather ? rb[r] : sb[r];
                    int32_t *small = ip ? big + r * count
                                        : gather ? sb[r] : rb[r];
                    send[r] = gather ? small : big;
                    recv[r] = gather ? big : small;
                    memset(rb[r], 0xff, 4 * count * 4);
                    int32_t *s = (int32_t *)send[r];
                    for (size_t i = 0; i < count * (gather ? 1 : 4); i++)
                        s[i] = r * 1000000 + (int32_t)i;
                }
                long launches = fan_call(
                    pool, comm,
                    gather ? UMP_COLL_ALLGATHER : UMP_COLL_REDUCE_SCATTER,
                    send, recv, count, 0, mode, st);
                if (mode == 2)
                    assert_int_equal(launches, gather ? 0 : 4);
                for (int r = 0; r < 4; r++) {
                    const int32_t *got = recv[r];
                    for (size_t i = 0; i < count * (gather ? 4 : 1); i++) {
                        int32_t want =
                            gather ? (int32_t)(i / count) * 1000000 +
                                         (int32_t)(i % count)
                                   : 6000000 + 4 * (int32_t)(r * count + i);
                        if (got[i] != want)
                            fail_msg("%s, mode %d%s: rank %d element %zu is "
                                     "%d, not %d",
                                     gather ? "allgather" : "reduce-scatter",
                                     mode, ip ? ", in place" : "", r, i,
                                     got[i], want);
                    }
                }
            }
    for (int r = 0; r < 4; r++) {
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
        tu_free(pool, sb[r]);
        tu_free(pool, rb[r]);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

/* Calls on the caller's streams return once queued; an offloadable buffer
 * stays acquired until the call is done and reaped (next call, destroy). */
static void test_streams_and_holds(void **state)
{
    (void)state;
    use_fake("devices=1,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:2");
    ump_comm_t *comm;
    ump_stream_t st[2];
    assert_int_equal(ump_comm_create(pool, 2, NULL, NULL, &comm), 0);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
    void *off, *b = tu_alloc(pool, 4096, 0);
    ump_hints_t h = tu_hints(1);
    h.flags = UMP_HINT_OFFLOAD;
    assert_int_equal(ump_alloc(pool, 4096, &h, &off), 0);
    memset(off, 7, 4096);
    const void *send[2] = {off, NULL}; /* read at the root only */
    void *recv[2] = {off, b};
    /* broadcast from rank 0's offloadable buffer */
    assert_int_equal(ump_broadcast(comm, send, recv, 4096, UMP_UINT8, 0, st),
                     0);
    assert_int_equal(ump_evict(pool, off, 0, UMP_TIER_HOST), -EBUSY);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    assert_int_equal(((unsigned char *)b)[4095], 7);
    ump_stream_t swapped[2] = {st[1], st[0]};
    struct tu_capture cap;
    char log[4096];
    tu_capture_start(&cap);
    assert_int_equal(ump_broadcast(comm, send, recv, 16, UMP_UINT8, 0,
                                   swapped), -EINVAL);
    tu_capture_stop(&cap, log, sizeof(log));
    assert_int_equal(tu_count_log_lines(log), 1);
    assert_int_equal(ump_comm_destroy(comm), 0); /* reaps the hold */
    assert_int_equal(ump_evict(pool, off, 0, UMP_TIER_HOST), 0);
    tu_free(pool, off);
    tu_free(pool, b);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
    tu_pool_destroy(pool);
}

/* The executor's link counters (ump_link_stats' coll_bytes) of devices
 * 0..3 and the host: each [a][b] must have grown by want[a][b] exactly
 * (index 4: the host). */
static void links_grew(ump_pool_t *pool, uint64_t before[5][5],
                       uint64_t want[5][5], const char *what)
{
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            ump_link_stats_t l;
            if (a == b)
                continue;
            assert_int_equal(ump_link_stats(pool, a < 4 ? a : UMP_LOC_HOST,
                                            b < 4 ? b : UMP_LOC_HOST, &l), 0);
            if (l.coll_bytes - before[a][b] != want[a][b])
                fail_msg("%s: link %d -> %d grew by %llu bytes, want %llu",
                         what, a, b,
                         (unsigned long long)(l.coll_bytes - before[a][b]),
                         (unsigned long long)want[a][b]);
            before[a][b] = l.coll_bytes;
        }
}

/* The GPU executor counts each copy between the ranks' devices (peers),
 * what the fan's one kernel reads and writes (rank 0's device: every send
 * buffer in, every receive buffer out), or through pinned host memory (no
 * peers); a broadcast's non-root send pointers are not looked at, even when
 * they alias the root's buffer. */
static void test_traffic(void **state)
{
    (void)state;
    for (int nopeer = 0; nopeer < 2; nopeer++)
        for (int large = 0; large < 2; large++) {
            /* 4 x 1 KiB is the fan's (one launch on rank 0's device), 4 x
             * 512 KiB the direct schedule's (from 4 x 8 KiB on the fake's
             * PCIe links: the cost model finds the fan's stores of every
             * whole buffer through one device's port dearer); without
             * peers, staging */
            const size_t s = large ? 512 * 1024 : 1024;
            use_fake(nopeer ? "devices=4,mem=64,nopeer" : "devices=4,mem=64");
            ump_pool_t *pool = tu_pool_create("backend:cuda");
            ump_comm_t *comm;
            assert_int_equal(ump_comm_create(pool, 4, NULL, NULL, &comm), 0);
            void *sb[4], *rb[4];
            for (int r = 0; r < 4; r++) {
                sb[r] = tu_alloc(pool, 4 * s, r);
                rb[r] = tu_alloc(pool, 4 * s, r);
            }
            uint64_t base[5][5] = {{0}}, want[5][5] = {{0}};
            links_grew(pool, base, want, "nothing yet");
            assert_int_equal(ump_allgather(comm, (const void *const *)sb, rb,
                                           s / 4, UMP_FLOAT32, NULL), 0);
            for (int k = 0; k < 4; k++)
                for (int r = 0; r < 4; r++)
                    if (k == r)
                        continue;
                    else if (nopeer) {
                        want[k][4] = s;  /* k's copy into pinned memory */
                        want[4][r] += s; /* read by each peer from there */
                    } else if (large) {
                        want[k][r] = s;
                    } else if (k == 0) { /* the fan writes whole buffers */
                        want[0][r] = 4 * s;
                    } else if (r == 0) { /* and reads every send buffer */
                        want[k][0] = s;
                    }
            links_grew(pool, base, want, nopeer  ? "staged all-gather"
                                         : large ? "all-gather"
                                                 : "fanned all-gather");
            const void *alias[4] = {sb[2], sb[2], sb[2], sb[2]};
            assert_int_equal(ump_broadcast(comm, alias, rb, s / 4,
                                           UMP_FLOAT32, 2, NULL), 0);
            memset(want, 0, sizeof(want));
            for (int r = 0; r < 4; r++)
                if (r != 2 && !nopeer)
                    want[2][r] = s;
                else if (r != 2)
                    want[4][r] = s;
            if (nopeer)
                want[2][4] = s;
            links_grew(pool, base, want, "broadcast from rank 2");
            /* A reduce into pinned host memory (the processes' one-hop
             * allreduce, hier.c), with peers: the root's device reads
             * every send buffer and writes the host. */
            void *h;
            assert_int_equal(ump_host_alloc(pool, s, &h), 0);
            void *rh[4] = {rb[0], rb[1], h, rb[3]};
            if (!nopeer) {
                assert_int_equal(ump_reduce(comm, (const void *const *)sb,
                                            rh, s / 4, UMP_FLOAT32, UMP_SUM,
                                            2, NULL),
                                 0);
                memset(want, 0, sizeof(want));
                for (int k = 0; k < 4; k++)
                    if (k != 2)
                        want[k][2] = s;
                want[2][4] = s;
                links_grew(pool, base, want, "reduce into host memory");
            }
            assert_int_equal(ump_host_free(pool, h), 0);
            for (int r = 0; r < 4; r++) {
                tu_free(pool, sb[r]);
                tu_free(pool, rb[r]);
            }
            assert_int_equal(ump_comm_destroy(comm), 0);
            tu_pool_destroy(pool);
        }
}

#else /* without cuda.h there is no fake driver */
NO_FAKE(test_virtual_devices)
NO_FAKE(test_two_gpus)
NO_FAKE(test_no_peer_staging)
NO_FAKE(test_peer_not_transitive)
NO_FAKE(test_launch_failure)
NO_FAKE(test_fan)
NO_FAKE(test_fan_segments)
NO_FAKE(test_streams_and_holds)
NO_FAKE(test_traffic)
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_virtual_devices),
        cmocka_unit_test(test_two_gpus),
        cmocka_unit_test(test_no_peer_staging),
        cmocka_unit_test(test_peer_not_transitive),
        cmocka_unit_test(test_launch_failure),
        cmocka_unit_test(test_fan),
        cmocka_unit_test(test_fan_segments),
        cmocka_unit_test(test_streams_and_holds),
        cmocka_unit_test(test_traffic),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
