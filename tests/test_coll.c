/*
 * Collectives on sim: every collective with every algorithm that runs it
 * (and the cost model's choice), on 1 to 8 ranks, in place and out of
 * place, against a reference computed here; and every bad argument.
 * Inputs are small integers (nccl-tests' verifiable style), exact in float
 * too, so every algorithm's result must be bitwise the reference's.
 */
#include "config.h"

#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "coll/coll.h"
#include "coll/model.h"
#include "coll/reduce.h"
#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "mem/pool.h"
#include <time.h>

#include <math.h>

#include "coll_cases.h"

static const char *const algos[] = {"auto", "oneshot", "twoshot", "ring",
                                    "tree", "direct"};
#define NALGOS (sizeof(algos) / sizeof(algos[0]))

static void test_all_collectives(void **state)
{
    (void)state;
    static const int nranks[] = {1, 2, 3, 4, 5, 8};
    static const size_t counts[] = {1, 7, 1000, 4099};
    for (size_t ni = 0; ni < sizeof(nranks) / sizeof(nranks[0]); ni++) {
        int n = nranks[ni];
        char conf[128];
        snprintf(conf, sizeof(conf),
                 "backend:sim,sim_devices:%d,sim_device_mem:256M", n);
        ump_pool_t *pool = tu_pool_create(conf);
        for (size_t a = 0; a < NALGOS; a++) {
            char cc[64];
            snprintf(cc, sizeof(cc), "coll_algo:%s", algos[a]);
            ump_comm_t *comm;
            assert_int_equal(ump_comm_create(pool, n, NULL, cc, &comm), 0);
            /* A forced algorithm runs wherever it can. */
            for (int coll = 0; a > 0 && coll < COLL_NCOLL; coll++) {
                ump_coll_plan_t plan;
                assert_int_equal(ump_comm_plan(comm, coll, 1000, UMP_INT32,
                                               &plan), 0);
                if (coll_algo_applies(coll, (enum coll_algo)(a - 1)))
                    assert_string_equal(plan.algorithm, algos[a]);
            }
            for (int coll = 0; coll < COLL_NCOLL; coll++)
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]);
                     ci++)
                    for (int ip = 0; ip < 2; ip++)
                        run_case(pool, comm, coll, n, counts[ci],
                                 ci % 2 ? UMP_FLOAT32 : UMP_INT32, ip,
                                 algos[a]);
            assert_int_equal(ump_comm_destroy(comm), 0);
        }
        tu_pool_destroy(pool);
    }
}

/* Every bad argument is -EINVAL with one log line, before anything runs:
 * the buffers keep their bytes. */
#define expect_bad(call, what)                                                 \
    do {                                                                       \
        struct tu_capture cap_;                                                \
        char log_[4096];                                                       \
        tu_capture_start(&cap_);                                               \
        int rc_ = (call);                                                      \
        tu_capture_stop(&cap_, log_, sizeof(log_));                            \
        if (rc_ != -EINVAL || tu_count_log_lines(log_) != 1)                   \
            fail_msg("%s: %d, expected -EINVAL with one log line; log:\n%s",   \
                     what, rc_, log_);                                         \
    } while (0)

static void test_bad_arguments(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:4,"
                                      "sim_device_mem:256M");
    ump_comm_t *comm;
    int twice[2] = {1, 1}, out[2] = {0, 4}, two[2] = {0, 1};
    assert_int_equal(ump_comm_create(pool, 2, twice, NULL, &comm), -EINVAL);
    assert_int_equal(ump_comm_create(pool, 2, out, NULL, &comm), -EINVAL);
    assert_int_equal(ump_comm_create(pool, 3, NULL, NULL, &comm), -EINVAL);
    assert_int_equal(ump_comm_create(pool, 0, two, NULL, &comm), -EINVAL);
    assert_int_equal(ump_comm_create(pool, 2, two, "coll_algo:nope", &comm),
                     -EINVAL);
    assert_int_equal(ump_comm_create(pool, 2, two, "nope:1", &comm), -EINVAL);
    assert_int_equal(ump_comm_create(NULL, 2, two, NULL, &comm), -EINVAL);
    assert_int_equal(ump_comm_create(pool, 2, two, NULL, &comm), 0);
    int nr = 0;
    assert_int_equal(ump_comm_size(comm, &nr), 0);
    assert_int_equal(nr, 2);

    size_t c = 256;
    void *a = tu_alloc(pool, c * 4, 0), *b = tu_alloc(pool, c * 4, 1);
    void *a2 = tu_alloc(pool, c * 4, 0), *b2 = tu_alloc(pool, c * 4, 1);
    void *small = tu_alloc(pool, c * 4 - 4, 1);
    char host[1024];
    const void *send[2] = {a, b};
    void *recv[2] = {a2, b2};
    memset(a2, 1, c * 4);
    memset(b2, 1, c * 4);

    expect_bad(ump_allreduce(comm, send, recv, c, (ump_dtype_t)10, UMP_SUM,
                             NULL), "bad dtype");
    expect_bad(ump_allreduce(comm, send, recv, c, UMP_INT32, (ump_redop_t)5,
                             NULL), "bad op");
    expect_bad(ump_broadcast(comm, send, recv, c, UMP_INT32, 2, NULL),
               "root out of range");
    expect_bad(ump_reduce(comm, send, recv, c, UMP_INT32, UMP_SUM, -1, NULL),
               "negative root");
    expect_bad(ump_allreduce(comm, send, recv, SIZE_MAX / 2, UMP_INT32,
                             UMP_SUM, NULL), "count overflow");
    const void *s_host[2] = {host, b};
    expect_bad(ump_allreduce(comm, s_host, recv, c, UMP_INT32, UMP_SUM, NULL),
               "not pool memory");
    void *r_small[2] = {a2, small};
    expect_bad(ump_allreduce(comm, send, r_small, c, UMP_INT32, UMP_SUM,
                             NULL), "too small");
    const void *s_odd[2] = {(char *)a + 2, b};
    expect_bad(ump_allreduce(comm, s_odd, recv, c - 1, UMP_INT32, UMP_SUM,
                             NULL), "not aligned to its elements");

    void *r_overlap[2] = {a2, (char *)a2 + 64};
    expect_bad(ump_allreduce(comm, send, r_overlap, c, UMP_INT32, UMP_SUM,
                             NULL), "overlapping ranks");
    const void *s_shared[2] = {a, a};
    expect_bad(ump_allreduce(comm, s_shared, recv, c, UMP_INT32, UMP_SUM,
                             NULL), "one send buffer for two ranks");
    const void *s_half[2] = {(char *)a2 + 4, b};
    expect_bad(ump_allreduce(comm, s_half, recv, c - 1, UMP_INT32, UMP_SUM,
                             NULL), "send overlapping recv, not in place");
    ump_stream_t bogus[2] = {(ump_stream_t)host, (ump_stream_t)host};
    expect_bad(ump_allreduce(comm, send, recv, c, UMP_INT32, UMP_SUM, bogus),
               "foreign streams");
    ump_stream_t nulls[2] = {NULL, NULL};
    expect_bad(ump_allreduce(comm, send, recv, c, UMP_INT32, UMP_SUM, nulls),
               "NULL streams");
    expect_bad(ump_allreduce(NULL, send, recv, c, UMP_INT32, UMP_SUM, NULL),
               "NULL comm");
    /* nothing ran */
    for (size_t i = 0; i < c * 4; i++)
        if (((unsigned char *)a2)[i] != 1 || ((unsigned char *)b2)[i] != 1)
            fail_msg("byte %zu of a recv buffer changed", i);
    /* count 0: nothing is looked at, not even the buffers */
    const void *none_s[2] = {NULL, NULL};
    void *none_r[2] = {NULL, NULL};
    assert_int_equal(ump_allreduce(comm, none_s, none_r, 0, UMP_INT32, UMP_SUM,
                                   NULL), 0);
    /* 2-byte aligned is aligned enough for 2-byte elements; collectives
     * that only copy take any alignment */
    assert_int_equal(ump_allreduce(comm, s_odd, recv, c - 1, UMP_FLOAT16,
                                   UMP_SUM, NULL), 0);
    assert_int_equal(ump_allgather(comm, s_odd, recv, c / 2 - 1, UMP_INT32,
                                   NULL), 0);

    /* a device the rank cannot reach: pcie-4gpu's two sockets */
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, a2);
    tu_free(pool, b2);
    tu_free(pool, small);
    tu_pool_destroy(pool);

    pool = tu_pool_create("backend:sim,sim_topology:pcie-4gpu,"
                          "sim_device_mem:256M");
    int pair[2] = {0, 1};
    assert_int_equal(ump_comm_create(pool, 2, pair, NULL, &comm), 0);
    ump_link_props_t l;
    assert_int_equal(ump_link_props(pool, 0, 2, &l), 0);
    if (!l.peer) {
        void *far = tu_alloc(pool, c * 4, 2), *r0 = tu_alloc(pool, c * 4, 0),
             *s1 = tu_alloc(pool, c * 4, 1), *r1 = tu_alloc(pool, c * 4, 1);
        const void *sf[2] = {far, s1};
        void *rf[2] = {r0, r1};
        expect_bad(ump_allreduce(comm, sf, rf, c, UMP_INT32, UMP_SUM, NULL),
                   "unreachable device");
        tu_free(pool, far);
        tu_free(pool, r0);
        tu_free(pool, s1);
        tu_free(pool, r1);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

/* User streams: the call returns once queued; the work is done after the
 * streams are synchronized, and work queued before it is seen. */
static void test_user_streams(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:3,"
                                      "sim_device_mem:256M");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 3, NULL, "coll_algo:ring", &comm),
                     0);
    ump_stream_t st[3];
    size_t c = 1 << 16;
    void *buf[3];
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
        buf[r] = tu_alloc(pool, c * 4, r);
        /* queued before the collective, on the same stream */
        assert_int_equal(ump_memset_async(pool, buf[r], r + 1, c * 4, st[r]),
                         0);
    }
    const void *send[3] = {buf[0], buf[1], buf[2]};
    assert_int_equal(ump_allreduce(comm, send, buf, c, UMP_UINT8 == 1
                                                          ? UMP_INT32
                                                          : UMP_INT32,
                                   UMP_SUM, st), 0);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    uint32_t want = 0x01010101u + 0x02020202u + 0x03030303u;
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < c; i++)
            if (((uint32_t *)buf[r])[i] != want)
                fail_msg("rank %d element %zu: %#x", r, i,
                         ((uint32_t *)buf[r])[i]);
    for (int r = 0; r < 3; r++) {
        tu_free(pool, buf[r]);
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

static void hold_until(void *arg)
{
    while (!atomic_load((atomic_int *)arg))
        usleep(1000);
}

/* The fan tests' pool: 4 sim devices, a communicator over them, and per
 * rank a stream and bytes of int32 in (r + 1 + i % 7) and out (-7). */
enum { FAN_N = 4 };
struct fan_fx {
    ump_pool_t *pool;
    ump_comm_t *comm;
    int32_t *in[FAN_N], *out[FAN_N];
    ump_stream_t st[FAN_N];
    const void *send[FAN_N];
    void *recv[FAN_N];
};

static void fan_fx_make(struct fan_fx *f, size_t bytes)
{
    f->pool = tu_pool_create("backend:sim,sim_devices:4,sim_device_mem:64M");
    assert_int_equal(ump_comm_create(f->pool, FAN_N, NULL, NULL, &f->comm),
                     0);
    for (int r = 0; r < FAN_N; r++) {
        f->in[r] = tu_alloc(f->pool, bytes, r);
        f->out[r] = tu_alloc(f->pool, bytes, r);
        for (size_t i = 0; i < bytes / 4; i++) {
            f->in[r][i] = (int32_t)(r + 1 + i % 7);
            f->out[r][i] = -7;
        }
        assert_int_equal(ump_stream_create(f->pool, r, &f->st[r]), 0);
        f->send[r] = f->in[r];
        f->recv[r] = f->out[r];
    }
}

static void fan_fx_drop(struct fan_fx *f)
{
    for (int r = 0; r < FAN_N; r++) {
        ump_stream_synchronize(f->pool, f->st[r]);
        assert_int_equal(ump_stream_destroy(f->pool, f->st[r]), 0);
        tu_free(f->pool, f->in[r]);
        tu_free(f->pool, f->out[r]);
    }
    assert_int_equal(ump_comm_destroy(f->comm), 0);
    tu_pool_destroy(f->pool);
}

/* A fan queued behind other work, and a peer's device failing before it
 * runs: it writes nothing (a GPU's kernel would fault on the lost memory;
 * the sim's must not write results made of it), and the next call is
 * -EIO. */
static void test_fan_failure(void **state)
{
    (void)state;
    enum { N = FAN_N };
    size_t c = 1024;
    struct fan_fx f;
    fan_fx_make(&f, c * 4);
    ump_pool_t *pool = f.pool;
    ump_comm_t *comm = f.comm;
    int32_t **out = f.out;
    ump_stream_t *st = f.st;
    const void **send = f.send;
    void **recv = f.recv;
    atomic_int go = 0;
    assert_int_equal(ump_launch_host_func(pool, st[0], hold_until, &go), 0);
    assert_int_equal(ump_allreduce(comm, send, recv, c, UMP_INT32, UMP_SUM,
                                   st), 0);
    assert_int_equal(sim_fail_device(pool->bctx, 2, 0), 0);
    atomic_store(&go, 1);
    assert_int_equal(ump_stream_synchronize(pool, st[0]), 0);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; r != 2 && i < c; i++)
            if (out[r][i] != -7)
                fail_msg("rank %d [%zu] = %d: the fan wrote after a peer's "
                         "device failed", r, i, out[r][i]);
    assert_int_equal(ump_allreduce(comm, send, recv, c, UMP_INT32, UMP_SUM,
                                   NULL), -EIO);
    fan_fx_drop(&f);
}

/* A slow producer: work queued before the collective on a rank's stream
 * that writes its send buffer late. Every algorithm must wait for it. */
struct late {
    int32_t *p;
    size_t c;
    int32_t v;
};

static void late_write(void *arg)
{
    struct late *l = arg;
    usleep(20000);
    for (size_t i = 0; i < l->c; i++)
        l->p[i] = l->v;
}

/* What the sim's streams were asked to do by one call. */
static struct sim_stream_counts counts_of(ump_pool_t *pool,
                                          struct sim_stream_counts *before)
{
    struct sim_stream_counts now;
    sim_stream_counts(pool->bctx, &now);
    struct sim_stream_counts d = {now.funcs - before->funcs,
                                  now.waits - before->waits,
                                  now.syncs - before->syncs};
    *before = now;
    return d;
}

struct peek {
    int32_t *p;
    int32_t seen;
};

static void peek_first(void *arg)
{
    struct peek *k = arg;
    k->seen = k->p[0];
}

/* Small calls in one launch on sim, as on the GPU (issue 30): the fan is
 * one host function on one rank's stream; synchronous, one sync and no
 * wait; on the caller's streams, no sync, and the streams joined with
 * events both ways (n - 1 waits on the fan's stream, n - 1 on the
 * others'). Above the fan's size, every rank's stream runs its share. */
static void test_fan_shape(void **state)
{
    (void)state;
    enum { N = FAN_N };
    size_t big = 4 << 20, c = 1024; /* 4 KiB of int32 per rank */
    struct fan_fx f;
    fan_fx_make(&f, big);
    ump_pool_t *pool = f.pool;
    ump_comm_t *comm = f.comm;
    int32_t **in = f.in, **out = f.out;
    ump_stream_t *st = f.st;
    const void **send = f.send;
    void **recv = f.recv;
    struct sim_stream_counts base, d;
    sim_stream_counts(pool->bctx, &base);
    for (int k = 0; k < 5; k++) {
        int rc = k == 0   ? ump_allreduce(comm, send, recv, c, UMP_INT32,
                                          UMP_SUM, NULL)
                 : k == 1 ? ump_allgather(comm, send, recv, c / N, UMP_INT32,
                                          NULL)
                 : k == 2 ? ump_reduce_scatter(comm, send, recv, c / N,
                                               UMP_INT32, UMP_SUM, NULL)
                 : k == 3 ? ump_broadcast(comm, send, recv, c, UMP_INT32, 2,
                                          NULL)
                          : ump_reduce(comm, send, recv, c, UMP_INT32,
                                       UMP_SUM, 1, NULL);
        assert_int_equal(rc, 0);
        d = counts_of(pool, &base);
        if (d.funcs != 1 || d.syncs != 1 || d.waits != 0)
            fail_msg("call %d: %lu launches, %lu syncs, %lu waits; want 1, "
                     "1, 0", k, d.funcs, d.syncs, d.waits);
    }
    /* The last, reduce to rank 1: exact. */
    for (size_t i = 0; i < c; i++)
        assert_int_equal(out[1][i], (int32_t)(10 + 4 * (i % 7)));

    /* On the caller's streams, in place: the fan's stream waits for a late
     * producer on rank 3's, and work queued after the call on rank 1's
     * sees the result. */
    struct late l = {in[3], c, 100};
    assert_int_equal(ump_launch_host_func(pool, st[3], late_write, &l), 0);
    sim_stream_counts(pool->bctx, &base);
    assert_int_equal(ump_allreduce(comm, send, (void *const *)send, c,
                                   UMP_INT32, UMP_SUM, st), 0);
    d = counts_of(pool, &base);
    if (d.funcs != 1 || d.syncs != 0 || d.waits != 2 * (N - 1))
        fail_msg("on streams: %lu launches, %lu syncs, %lu waits; want 1, 0,"
                 " %d", d.funcs, d.syncs, d.waits, 2 * (N - 1));
    struct peek pk = {in[1], 0};
    assert_int_equal(ump_launch_host_func(pool, st[1], peek_first, &pk), 0);
    for (int r = 0; r < N; r++)
        assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    int32_t want0 = 1 + 2 + 3 + 100;
    assert_int_equal(pk.seen, want0);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < c; i++)
            if (in[r][i] != (int32_t)(6 + 3 * (i % 7) + 100))
                fail_msg("in place: rank %d [%zu] = %d", r, i, in[r][i]);

    /* Above the fan: every rank's stream, one sync each. */
    sim_stream_counts(pool->bctx, &base);
    assert_int_equal(ump_allreduce(comm, send, recv, big / 4, UMP_INT32,
                                   UMP_SUM, NULL), 0);
    d = counts_of(pool, &base);
    assert_int_equal(d.funcs, N);
    assert_int_equal(d.syncs, N);
    fan_fx_drop(&f);
}

static void test_waits_for_every_stream(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:3,"
                                      "sim_device_mem:256M,host_limit:64M");
    static const char *const forced[] = {"oneshot", "twoshot", "ring",
                                         "tree"};
    ump_stream_t st[3];
    for (int r = 0; r < 3; r++)
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
    size_t c = 1000;
    for (int a = 0; a < 4; a++) {
        char cc[64];
        snprintf(cc, sizeof(cc), "coll_algo:%s", forced[a]);
        ump_comm_t *comm;
        assert_int_equal(ump_comm_create(pool, 3, NULL, cc, &comm), 0);
        int32_t *in[3], *out[3];
        struct late l[3];
        for (int r = 0; r < 3; r++) {
            in[r] = tu_alloc(pool, c * 4, r);
            out[r] = tu_alloc(pool, c * 4, r);
            memset(in[r], 0, c * 4);
            l[r] = (struct late){in[r], c, r + 1};
            /* rank 2's producer is the late one */
            if (r == 2)
                assert_int_equal(ump_launch_host_func(pool, st[r],
                                                      late_write, &l[r]), 0);
            else
                late_write(&l[r]);
        }
        const void *send[3] = {in[0], in[1], in[2]};
        void *recv[3] = {out[0], out[1], out[2]};
        assert_int_equal(ump_allreduce(comm, send, recv, c, UMP_INT32,
                                       UMP_SUM, st), 0);
        for (int r = 0; r < 3; r++)
            assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
        for (int r = 0; r < 3; r++)
            for (size_t i = 0; i < c; i++)
                if (out[r][i] != 6)
                    fail_msg("%s: rank %d element %zu: %d, expected 6",
                             forced[a], r, i, out[r][i]);
        for (int r = 0; r < 3; r++) {
            tu_free(pool, in[r]);
            tu_free(pool, out[r]);
        }
        assert_int_equal(ump_comm_destroy(comm), 0);
    }
    /* streams: one of another device, or one stream for two ranks */
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 3, NULL, NULL, &comm), 0);
    void *b[3];
    for (int r = 0; r < 3; r++)
        b[r] = tu_alloc(pool, 4096, r);
    const void *send[3] = {b[0], b[1], b[2]};
    ump_stream_t swapped[3] = {st[1], st[0], st[2]};
    ump_stream_t twice[3] = {st[0], st[0], st[2]};
    expect_bad(ump_allreduce(comm, send, b, 1024, UMP_INT32, UMP_SUM,
                             swapped), "a stream of another device");
    expect_bad(ump_allreduce(comm, send, b, 1024, UMP_INT32, UMP_SUM, twice),
               "one stream for two ranks");
    /* an offloadable buffer is held (acquired) while the call is queued:
     * the tiers cannot move it until the call is done and the next call
     * on the communicator has released it */
    void *off;
    ump_hints_t h = tu_hints(1);
    h.flags = UMP_HINT_OFFLOAD;
    assert_int_equal(ump_alloc(pool, 4096, &h, &off), 0);
    memset(off, 0, 4096);
    const void *send2[3] = {b[0], off, b[2]};
    struct late slow = {b[0], 1, 0};
    assert_int_equal(ump_launch_host_func(pool, st[0], late_write, &slow), 0);
    assert_int_equal(ump_allreduce(comm, send2, b, 1024, UMP_INT32, UMP_SUM,
                                   st), 0);
    assert_int_equal(ump_evict(pool, off, 0, UMP_TIER_HOST), -EBUSY);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    const void *send3[3] = {b[0], b[1], b[2]};
    void *r3[3] = {b[0], b[1], b[2]};
    assert_int_equal(ump_allreduce(comm, send3, r3, 1, UMP_INT32, UMP_SUM,
                                   NULL), 0); /* reaps the held buffer */
    assert_int_equal(ump_evict(pool, off, 0, UMP_TIER_HOST), 0);
    tu_free(pool, off);
    for (int r = 0; r < 3; r++)
        tu_free(pool, b[r]);
    assert_int_equal(ump_comm_destroy(comm), 0);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
    tu_pool_destroy(pool);
}

/* Two threads, each with its own communicator over the same devices, run
 * collectives at once; and several communicators live together. */
struct thr {
    ump_pool_t *pool;
    int seed;
    int rc;
};

static void *thread_main(void *arg)
{
    struct thr *t = arg;
    ump_comm_t *comm;
    t->rc = ump_comm_create(t->pool, 2, NULL,
                            t->seed ? "coll_algo:twoshot" : NULL, &comm);
    if (t->rc)
        return NULL;
    size_t c = 4096;
    int32_t *b[2];
    for (int r = 0; r < 2 && !t->rc; r++) {
        ump_hints_t h = {.device = r};
        t->rc = ump_alloc(t->pool, c * 4, &h, (void **)&b[r]);
    }
    for (int it = 0; it < 50 && !t->rc; it++) {
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < c; i++)
                b[r][i] = (int32_t)(i + (size_t)r + (size_t)t->seed + it);
        const void *send[2] = {b[0], b[1]};
        void *recv[2] = {b[0], b[1]};
        t->rc = ump_allreduce(comm, send, recv, c, UMP_INT32, UMP_SUM, NULL);
        for (int r = 0; r < 2 && !t->rc; r++)
            for (size_t i = 0; i < c; i++)
                if (b[r][i] != (int32_t)(2 * (i + (size_t)t->seed + it) + 1))
                    t->rc = -EIO;
    }
    ump_free(t->pool, b[0]);
    ump_free(t->pool, b[1]);
    int rc = ump_comm_destroy(comm);
    if (!t->rc)
        t->rc = rc;
    return NULL;
}

static void test_two_threads(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:256M");
    ump_comm_t *extra[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(ump_comm_create(pool, 2, NULL, NULL, &extra[i]), 0);
    pthread_t th[2];
    struct thr t[2] = {{pool, 0, 0}, {pool, 1000, 0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &t[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].rc, 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(ump_comm_destroy(extra[i]), 0);
    tu_pool_destroy(pool);
}

/* --- every type and reduction: algorithms against each other ------------ */

/* A random element of dt into p: integers across their whole range (sums
 * and products wrap), floats with fractions (roundings matter), near 1 for
 * PROD (no overflow). */
static void rand_elem(void *p, int dt, int op, uint64_t *rs)
{
    uint64_t x = tu_rand(rs);
    double f = op == UMP_PROD ? 0.5 + (double)(x % 1000) / 1000.0
                              : ((double)(x % 4001) - 2000.0) / 512.0;
    switch (dt) {
    case UMP_INT8: case UMP_UINT8: *(uint8_t *)p = (uint8_t)x; break;
    case UMP_INT32: case UMP_UINT32: *(uint32_t *)p = (uint32_t)x; break;
    case UMP_INT64: case UMP_UINT64: *(uint64_t *)p = x; break;
    case UMP_FLOAT32: *(float *)p = (float)f; break;
    case UMP_FLOAT64: *(double *)p = f; break;
    case UMP_FLOAT16: *(uint16_t *)p = coll_float_to_half((float)f); break;
    default: *(uint16_t *)p = coll_float_to_bf16((float)f); break;
    }
}

static double as_double(const void *p, int dt)
{
    switch (dt) {
    case UMP_FLOAT32: return *(const float *)p;
    case UMP_FLOAT64: return *(const double *)p;
    case UMP_FLOAT16: return coll_half_to_float(*(const uint16_t *)p);
    default: return coll_bf16_to_float(*(const uint16_t *)p);
    }
}

static bool is_float(int dt)
{
    return dt == UMP_FLOAT16 || dt == UMP_FLOAT32 || dt == UMP_FLOAT64 ||
           dt == UMP_BFLOAT16;
}

/* Unit roundoff of a float type. */
static double unit(int dt)
{
    return dt == UMP_FLOAT16 ? 0x1p-11 : dt == UMP_BFLOAT16 ? 0x1p-8
           : dt == UMP_FLOAT32 ? 0x1p-24 : 0x1p-53;
}

/* Allreduce of every type and reduction on n ranks with each algorithm:
 * one-shot and two-shot give the reference's bits (coll_reduce over the
 * ranks in order, itself checked in test_coll_reduce); ring and tree give
 * them too for integers, MAX and MIN, and for float sums and products stay
 * within the bound of their step-wise roundings; every rank gets the same
 * bits; a second run gives the same bits. */
static void allreduce_matrix(int n)
{
    char conf[128];
    snprintf(conf, sizeof(conf), "backend:sim,sim_devices:%d,"
             "sim_device_mem:64M", n);
    ump_pool_t *pool = tu_pool_create(conf);
    static const char *const forced[] = {"oneshot", "twoshot", "ring",
                                         "tree"};
    ump_comm_t *comm[4];
    for (int a = 0; a < 4; a++) {
        snprintf(conf, sizeof(conf), "coll_algo:%s", forced[a]);
        assert_int_equal(ump_comm_create(pool, n, NULL, conf, &comm[a]), 0);
    }
    static const size_t counts[] = {1, 17, 1031};
    uint64_t rs = 0x9e3779b97f4a7c15ull + (uint64_t)n;
    for (int dt = 0; dt < 10; dt++)
        for (int op = 0; op < 5; op++)
            for (size_t ci = 0; ci < 3; ci++) {
                size_t c = counts[ci], esz = coll_dtype_size(dt);
                void *in[NR_MAX], *out[NR_MAX];
                const void *send[NR_MAX];
                for (int r = 0; r < n; r++) {
                    in[r] = tu_alloc(pool, c * esz, r);
                    out[r] = tu_alloc(pool, c * esz, r);
                    send[r] = in[r];
                    for (size_t i = 0; i < c; i++)
                        rand_elem((char *)in[r] + i * esz, dt, op, &rs);
                }
                char *ref = malloc(c * esz), *first = malloc(c * esz);
                coll_reduce(dt, op, ref, (const void *const *)in, n, c);
                for (int a = 0; a < 4; a++) {
                    for (int run = 0; run < 2; run++) {
                        assert_int_equal(ump_allreduce(comm[a], send, out, c,
                                                       dt, op, NULL), 0);
                        for (int r = 1; r < n; r++)
                            if (memcmp(out[r], out[0], c * esz))
                                fail_msg("%s n %d dt %d op %d count %zu: "
                                         "rank %d differs from rank 0",
                                         forced[a], n, dt, op, c, r);
                        if (run == 0)
                            memcpy(first, out[0], c * esz);
                        else if (memcmp(first, out[0], c * esz))
                            fail_msg("%s n %d dt %d op %d: runs differ",
                                     forced[a], n, dt, op);
                    }
                    bool exact = a < 2 || !is_float(dt) || op == UMP_MAX ||
                                 op == UMP_MIN || n <= 2;
                    for (size_t i = 0; i < c; i++) {
                        const char *g = (const char *)out[0] + i * esz;
                        const char *w = ref + i * esz;
                        if (exact) {
                            if (memcmp(g, w, esz))
                                fail_msg("%s n %d dt %d op %d count %zu: "
                                         "element %zu differs from the "
                                         "reference", forced[a], n, dt, op,
                                         c, i);
                            continue;
                        }
                        /* n - 1 roundings of the type plus the reference's
                         * one, relative to the magnitudes folded */
                        double mag = 0, got = as_double(g, dt),
                               want = as_double(w, dt);
                        for (int k = 0; k < n; k++)
                            mag += fabs(as_double((char *)in[k] + i * esz,
                                                  dt));
                        if (op == UMP_PROD)
                            mag = fabs(want) + 1e-30;
                        double tol = (double)(n + 1) * unit(dt) * mag * 1.01;
                        if (fabs(got - want) > tol)
                            fail_msg("%s n %d dt %d op %d element %zu: %g, "
                                     "reference %g, bound %g", forced[a], n,
                                     dt, op, i, got, want, tol);
                    }
                }
                free(ref);
                free(first);
                for (int r = 0; r < n; r++) {
                    tu_free(pool, in[r]);
                    tu_free(pool, out[r]);
                }
            }
    for (int a = 0; a < 4; a++)
        assert_int_equal(ump_comm_destroy(comm[a]), 0);
    tu_pool_destroy(pool);
}

static void test_allreduce_matrix(void **state)
{
    (void)state;
    static const int nranks[] = {2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof(nranks) / sizeof(nranks[0]); i++)
        allreduce_matrix(nranks[i]);
}

/* Element j of rank k's input as type dt: -2..2, whose sums, products,
 * maxima, minima and averages over up to 8 ranks fold exactly in every
 * type (|product| <= 256: exact in half and bfloat16), whatever the order
 * and the roundings of the steps, so every algorithm must give the
 * reference's bits. */
static void small_elem(void *p, int dt, int k, size_t j)
{
    int v = (int)((k * 5 + j * 3 + j / 7) % 5) - 2;
    coll_case_put(p, dt, (float)v, (uint64_t)(int64_t)v);
}

/* One collective of c elements of dt with op on n ranks, with every
 * algorithm that runs it (comm[a] forces algorithm a): bitwise the
 * reference's. */
static void check_every_algo(ump_pool_t *pool, ump_comm_t *const *comm,
                             int n, int coll, int dt, int op, size_t c)
{
    size_t esz = coll_dtype_size(dt), sn, rn;
    sizes(coll, n, c, &sn, &rn);
    size_t got = coll == UMP_COLL_REDUCE_SCATTER || coll == UMP_COLL_SCATTER
                     ? c * esz
                     : rn * esz;
    int root = coll_rooted(coll) ? n / 2 : 0;
    char *hs[NR_MAX], *want = malloc(rn * esz + 1);
    void *sb[NR_MAX], *rb[NR_MAX];
    const void *send[NR_MAX];
    for (int r = 0; r < n; r++) {
        hs[r] = malloc(sn * esz + 1);
        for (size_t j = 0; j < sn; j++)
            small_elem(hs[r] + j * esz, dt, r, j);
        sb[r] = tu_alloc(pool, sn * esz + 1, r);
        rb[r] = tu_alloc(pool, rn * esz + 1, r);
        memcpy(sb[r], hs[r], sn * esz);
        send[r] = sb[r];
    }
    for (int a = 0; a < COLL_NALGO; a++) {
        if (!coll_algo_applies(coll, a))
            continue;
        for (int r = 0; r < n; r++)
            memset(rb[r], 0x5a, rn * esz);
        int rc = coll_case_call(comm[a], coll, send, rb, c, dt, op, root,
                                NULL);
        if (rc)
            fail_msg("%s coll %d dt %d op %d n %d count %zu: %s",
                     coll_algo_name(a), coll, dt, op, n, c, ump_strerror(rc));
        for (int r = 0; r < n && c; r++)
            if (coll_case_reference(coll, dt, op, root, n, r, c,
                                    (const char *const *)hs, want) &&
                memcmp(rb[r], want, got))
                fail_msg("%s coll %d %s %s n %d count %zu: rank %d differs "
                         "from the reference", coll_algo_name(a), coll,
                         coll_dtype_name(dt), coll_op_name(op), n, c, r);
    }
    for (int r = 0; r < n; r++) {
        tu_free(pool, sb[r]);
        tu_free(pool, rb[r]);
        free(hs[r]);
    }
    free(want);
}

/* Every collective x every type x every reduction, on 2, 3, 4, 5 and 8
 * ranks, counts 0, 1, a prime and a larger prime, with every algorithm
 * that runs the collective, forced in turn: bitwise the reference's. */
static void test_every_collective_type_op(void **state)
{
    (void)state;
    static const int nranks[] = {2, 3, 4, 5, 8};
    static const size_t counts[] = {0, 1, 13, 1031};
    for (size_t ni = 0; ni < sizeof(nranks) / sizeof(nranks[0]); ni++) {
        int n = nranks[ni];
        char conf[128];
        snprintf(conf, sizeof(conf), "backend:sim,sim_devices:%d,"
                 "sim_device_mem:64M", n);
        ump_pool_t *pool = tu_pool_create(conf);
        ump_comm_t *comm[COLL_NALGO];
        for (int a = 0; a < COLL_NALGO; a++) {
            snprintf(conf, sizeof(conf), "coll_algo:%s", coll_algo_name(a));
            assert_int_equal(ump_comm_create(pool, n, NULL, conf, &comm[a]),
                             0);
        }
        for (int coll = 0; coll < COLL_NCOLL; coll++)
            for (int dt = 0; dt < COLL_NDTYPE; dt++)
                /* the data movers have no op: one pass */
                for (int op = 0; op < (coll_reducing(coll) ? COLL_NOP : 1);
                     op++)
                    for (size_t ci = 0; ci < 4; ci++)
                        check_every_algo(pool, comm, n, coll, dt, op,
                                         counts[ci]);
        for (int a = 0; a < COLL_NALGO; a++)
            assert_int_equal(ump_comm_destroy(comm[a]), 0);
        tu_pool_destroy(pool);
    }
}

/* Buffers that span two devices (placed by interleave) and buffers moved
 * to the host tier serve as well as device-local ones. */
static void test_pooled_and_host_buffers(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:256M,host_limit:256M");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 2, NULL, "coll_algo:twoshot",
                                     &comm), 0);
    size_t c = 4 << 20; /* 16 MiB of int32: 8 chunks */
    void *b[2];
    for (int r = 0; r < 2; r++) {
        ump_hints_t h = tu_hints(r);
        h.policy = "interleave";
        h.flags = r ? UMP_HINT_OFFLOAD : 0;
        assert_int_equal(ump_alloc(pool, c * 4, &h, &b[r]), 0);
        for (size_t i = 0; i < c; i++)
            ((int32_t *)b[r])[i] = (int32_t)(i * (size_t)(r + 1));
    }
    /* rank 1's buffer on the host tier, keeping its address */
    assert_int_equal(ump_evict(pool, b[1], 0, UMP_TIER_HOST), 0);
    ump_ptr_info_t in0, in0e, in1;
    assert_int_equal(ump_ptr_info(pool, b[0], &in0), 0);
    assert_int_equal(ump_ptr_info(pool, (char *)b[0] + c * 4 - 1, &in0e), 0);
    assert_int_not_equal(in0.device, in0e.device); /* spans both */
    assert_int_equal(ump_ptr_info(pool, b[1], &in1), 0);
    assert_int_equal(in1.tier, UMP_TIER_HOST);
    const void *send[2] = {b[0], b[1]};
    assert_int_equal(ump_allreduce(comm, send, b, c, UMP_INT32, UMP_SUM, NULL),
                     0);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < c; i++)
            if (((int32_t *)b[r])[i] != (int32_t)(3 * i))
                fail_msg("rank %d element %zu: %d", r, i,
                         ((int32_t *)b[r])[i]);
    for (int r = 0; r < 2; r++)
        tu_free(pool, b[r]);
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

/* Failed devices (issue 17). Every rank's buffers on its own device; int32
 * sums of small values, exact. */
#define FCOUNT 1024
static double fnow(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One collective (k: 0 allreduce, 1 allgather, 2 broadcast from root) on
 * comm of n ranks; 0 and exact results, or -EIO. */
static int fcall(ump_comm_t *comm, int n, int k, int root, int32_t **snd,
                 int32_t **rcv, int salt)
{
    for (int r = 0; r < n; r++)
        for (int i = 0; i < FCOUNT; i++)
            snd[r][i] = r * 7 + i % 13 + salt;
    const void *s[COLL_MAX_RANKS];
    void *d[COLL_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        s[r] = snd[r];
        d[r] = rcv[r];
    }
    double t0 = fnow();
    int rc = k == 0   ? ump_allreduce(comm, s, d, FCOUNT, UMP_INT32, UMP_SUM,
                                      NULL)
             : k == 1 ? ump_allgather(comm, s, d, FCOUNT / n, UMP_INT32, NULL)
                      : ump_broadcast(comm, s, d, FCOUNT, UMP_INT32, root,
                                      NULL);
    if (fnow() - t0 > 10)
        fail_msg("a collective took %g s", fnow() - t0);
    if (rc)
        return rc;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < FCOUNT; i++) {
            int32_t want;
            if (k == 0) {
                want = 0;
                for (int q = 0; q < n; q++)
                    want += q * 7 + i % 13 + salt;
            } else if (k == 1) {
                int per = FCOUNT / n, q = i / per;
                if (q >= n)
                    continue; /* past n slices */
                want = q * 7 + (i % per) % 13 + salt;
            } else {
                want = root * 7 + i % 13 + salt;
            }
            if (rcv[r][i] != want)
                fail_msg("collective %d: rank %d [%d] = %d, want %d", k, r, i,
                         rcv[r][i], want);
        }
    return 0;
}

static void test_failed_device(void **state)
{
    (void)state;
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 12; trial++) {
        ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:4,"
                                          "sim_device_mem:64M");
        /* The sim fails a device at its nth operation. Small calls run as
         * a fan (model.h): one host function on one rank's stream, the
         * peers' devices untouched by operations, as a GPU's kernel
         * reading them is no operation of theirs. So odd trials run the
         * ranks' own schedules (ring: every rank's stream works in every
         * call), and fail any device; even ones run fans, and fail the
         * device of rank 0, which runs the fans of allreduce and
         * allgather (two operations a call: the launch and the sync). */
        bool fans = trial % 2 == 0;
        ump_comm_t *comm;
        assert_int_equal(ump_comm_create(pool, 4, NULL,
                                         fans ? NULL : "coll_algo:ring",
                                         &comm), 0);
        int32_t *snd[4], *rcv[4];
        for (int r = 0; r < 4; r++) {
            snd[r] = tu_alloc(pool, FCOUNT * 4, r);
            rcv[r] = tu_alloc(pool, FCOUNT * 4, r);
        }
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        int dead = fans ? 0 : (int)(rs >> 33) % 4;
        /* Trial 0: failed before the first call; the others at a random
         * operation of the device within the series. */
        int nth = trial ? 1 + (int)((rs >> 40) % (fans ? 20 : 30)) : 0;
        assert_int_equal(sim_fail_device(pool->bctx, dead, nth), 0);
        bool failed = false;
        for (int call = 0; call < 20; call++) {
            int rc = fcall(comm, 4, call % 3, call % 4, snd, rcv, call);
            if (failed || trial == 0)
                assert_int_equal(rc, -EIO);
            else if (rc)
                assert_int_equal(rc, -EIO);
            failed |= rc != 0;
        }
        assert_true(failed); /* the failure did come within the series */
        assert_true(pool_dev_failed(pool, dead));
        /* The survivors: exact results on a shrunk communicator. */
        ump_comm_t *nc = NULL;
        assert_int_equal(ump_comm_shrink(comm, 1, &dead, &nc), 0);
        int nr = 0;
        assert_int_equal(ump_comm_size(nc, &nr), 0);
        assert_int_equal(nr, 3);
        int32_t *s3[3], *r3[3];
        for (int r = 0, k = 0; r < 4; r++)
            if (r != dead) {
                s3[k] = snd[r];
                r3[k++] = rcv[r];
            }
        for (int k = 0; k < 3; k++)
            assert_int_equal(fcall(nc, 3, k, 2, s3, r3, 100 + k), 0);
        /* A lost buffer in a call of the new communicator: -EIO. */
        const void *s[3] = {snd[dead], s3[1], s3[2]};
        void *d[3] = {r3[0], r3[1], r3[2]};
        assert_int_equal(ump_allreduce(nc, s, d, FCOUNT, UMP_INT32, UMP_SUM,
                                       NULL), -EIO);
        /* The old communicator still fails, and both are destroyed. */
        assert_int_equal(fcall(comm, 4, 0, 0, snd, rcv, 0), -EIO);
        assert_int_equal(ump_comm_destroy(nc), 0);
        assert_int_equal(ump_comm_destroy(comm), 0);
        for (int r = 0; r < 4; r++) {
            ump_free(pool, snd[r]);
            ump_free(pool, rcv[r]);
        }
        tu_pool_destroy(pool);
    }
}

/* Point-to-point with a failed device: -EIO, no wait. */
static void test_failed_device_p2p(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:2,"
                                      "sim_device_mem:64M");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 2, NULL, NULL, &comm), 0);
    void *a = tu_alloc(pool, 4096, 0), *b = tu_alloc(pool, 4096, 1);
    assert_int_equal(sim_fail_device(pool->bctx, 1, 0), 0);
    ump_group_start();
    assert_int_equal(ump_send(comm, 0, a, 1024, UMP_INT32, 1, NULL), -EIO);
    assert_int_equal(ump_recv(comm, 1, b, 1024, UMP_INT32, 0, NULL), -EIO);
    assert_int_equal(ump_group_end(), 0);
    assert_int_equal(ump_comm_destroy(comm), 0);
    ump_free(pool, a);
    ump_free(pool, b);
    tu_pool_destroy(pool);
}

static void test_shrink_bad_input(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:4,"
                                      "sim_device_mem:64M");
    ump_comm_t *comm, *sentinel = (ump_comm_t *)&sentinel, *nc = sentinel;
    assert_int_equal(ump_comm_create(pool, 4, NULL, "coll_algo:ring", &comm),
                     0);
    int one = 1, out = 4, neg = -1, dup[2] = {2, 2}, all[4] = {3, 1, 0, 2};
    expect_bad(ump_comm_shrink(NULL, 1, &one, &nc), "NULL comm");
    expect_bad(ump_comm_shrink(comm, 1, &one, NULL), "NULL newcomm_p");
    expect_bad(ump_comm_shrink(comm, -1, &one, &nc), "nexclude < 0");
    expect_bad(ump_comm_shrink(comm, 1, NULL, &nc), "NULL exclude");
    expect_bad(ump_comm_shrink(comm, 1, &out, &nc), "rank out of range");
    expect_bad(ump_comm_shrink(comm, 1, &neg, &nc), "negative rank");
    expect_bad(ump_comm_shrink(comm, 2, dup, &nc), "duplicate rank");
    expect_bad(ump_comm_shrink(comm, 4, all, &nc), "everyone excluded");
    assert_ptr_equal(nc, sentinel); /* nothing made */
    /* Nothing excluded: a copy; the config kept (a forced ring). */
    assert_int_equal(ump_comm_shrink(comm, 0, NULL, &nc), 0);
    ump_coll_plan_t plan;
    assert_int_equal(ump_comm_plan(nc, UMP_COLL_ALLREDUCE, 1000, UMP_INT32,
                                   &plan), 0);
    assert_string_equal(plan.algorithm, "ring");
    assert_int_equal(ump_comm_destroy(nc), 0);
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    tu_main_begin("test_coll");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_collectives),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_user_streams),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_allreduce_matrix),
        cmocka_unit_test(test_every_collective_type_op),
        cmocka_unit_test(test_pooled_and_host_buffers),
        cmocka_unit_test(test_waits_for_every_stream),
        cmocka_unit_test(test_fan_shape),
        cmocka_unit_test(test_fan_failure),
        cmocka_unit_test(test_failed_device),
        cmocka_unit_test(test_failed_device_p2p),
        cmocka_unit_test(test_shrink_bad_input),
    };
    return tu_main_end(cmocka_run_group_tests_name("coll", tests, NULL, NULL),
                       7);
}
