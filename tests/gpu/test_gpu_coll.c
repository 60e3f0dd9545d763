/*
 * Collectives on a real GPU: one GPU shown as 4 pool devices
 * (cuda_virtual_devices:4), so the multi-rank kernels, copies and event
 * barriers run on the one H200. Every collective, every type and every
 * reduction against a host reference computed with the library's own host
 * reduction (coll_reduce): the kernel folds in the same order in the same
 * types with the same conversions, so results must be bitwise equal.
 * Inputs are finite (no NaN, whose payload is not specified). And a kernel
 * still writing a send buffer on its rank's stream when the collective is
 * queued is waited for. SKIP without a GPU or without nvcc.
 */
#include "config.h"

#include "gpu_util.h"

#include "coll/reduce.h"
#include "../coll_cases.h"

#define CONF "backend:cuda,cuda_virtual_devices:4"
#define NR 4

struct fixture {
    ump_pool_t *pool;
    ump_comm_t *comm;
    ump_stream_t st[NR];
    int rt; /* the runtime ordinal of the GPU */
};

static int setup(void **state)
{
    static struct fixture f;
    if (ump_pool_create(CONF, &f.pool) != 0)
        return -1;
    if (ump_comm_create(f.pool, NR, NULL, NULL, &f.comm) != 0)
        return -1;
    for (int r = 0; r < NR; r++)
        if (ump_stream_create(f.pool, r, &f.st[r]) != 0)
            return -1;
    f.rt = gpu_rt_device(f.pool, 0);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = ump_comm_destroy(f->comm);
    for (int r = 0; r < NR; r++)
        rc |= ump_stream_destroy(f->pool, f->st[r]);
    rc |= ump_pool_destroy(f->pool);
    return rc ? -1 : 0;
}

static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* n elements of dt for rank r: any bits for the integers; for the floating
 * types k / 8 with |k| < 100, exact in every one of them, so that sums,
 * products, maxima and averages exercise the conversions and roundings
 * without NaN. */
static void fill(void *buf, int dt, size_t n, int r)
{
    size_t esz = coll_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = mix((uint64_t)r << 40 ^ i ^ (uint64_t)dt << 56);
        float f = (float)((int)(x % 199) - 99) / 8.0f;
        coll_case_put((char *)buf + i * esz, dt, f, x);
    }
}

/* One call on the GPU, out of place or in place (NCCL's conventions: send
 * == recv, or for allgather and gather the rank's slice of recv, for
 * reduce-scatter and scatter the other way round; for the rooted ones at
 * the root, and at every rank for broadcast), checked bitwise. */
static void one(struct fixture *f, int coll, int dt, int op, size_t count,
                bool inplace)
{
    size_t s = count * coll_dtype_size(dt), all = s * NR;
    int root = coll_rooted(coll) ? 2 : 0;
    char *hs[NR], *got = malloc(all), *want = malloc(all);
    char *hsend[NR]; /* the host bytes of each rank's send buffer */
    void *sb[NR], *rb[NR];
    bool ip[NR];
    const void *send[NR];
    void *recv[NR];
    assert_non_null(got);
    assert_non_null(want);
    for (int r = 0; r < NR; r++) {
        ip[r] = inplace &&
                (!coll_rooted(coll) || r == root || coll == UMP_COLL_BROADCAST);
        hs[r] = malloc(all);
        assert_non_null(hs[r]);
        fill(hs[r], dt, all / coll_dtype_size(dt), r);
        sb[r] = tu_alloc(f->pool, all, r);
        rb[r] = ip[r] ? sb[r] : tu_alloc(f->pool, all, r);
        gpu_copy(f->pool, f->st[r], sb[r], hs[r], all);
        send[r] = sb[r];
        recv[r] = rb[r];
        hsend[r] = hs[r];
        if (ip[r] && (coll == UMP_COLL_ALLGATHER ||
                      coll == UMP_COLL_GATHER)) {
            send[r] = (char *)sb[r] + (size_t)r * s;
            hsend[r] = hs[r] + (size_t)r * s;
        } else if (ip[r] && (coll == UMP_COLL_REDUCE_SCATTER ||
                             coll == UMP_COLL_SCATTER)) {
            recv[r] = (char *)sb[r] + (size_t)r * s;
        }
    }
    int rc = coll_case_call(f->comm, coll, send, recv, count, dt, op, root,
                            NULL);
    if (rc)
        fail_msg("coll %d %s/%s count %zu: %s", coll, coll_dtype_name(dt),
                 coll_op_name(op), count, ump_strerror(rc));
    size_t rlen = coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER ||
                          coll == UMP_COLL_ALLTOALL
                      ? all
                      : s;
    for (int r = 0; r < NR; r++) {
        if (!coll_case_reference(coll, dt, op, root, NR, r, count,
                                 (const char *const *)hsend, want))
            continue;
        gpu_copy(f->pool, f->st[r], got, recv[r], rlen);
        if (memcmp(got, want, rlen)) {
            size_t i = 0;
            while (got[i] == want[i])
                i++;
            fail_msg("coll %d %s/%s count %zu %s: rank %d differs from the "
                     "host reference at byte %zu of %zu", coll,
                     coll_dtype_name(dt), coll_op_name(op), count,
                     inplace ? "in place" : "out of place", r, i, rlen);
        }
    }
    for (int r = 0; r < NR; r++) {
        tu_free(f->pool, sb[r]);
        if (!ip[r])
            tu_free(f->pool, rb[r]);
        free(hs[r]);
    }
    free(got);
    free(want);
}

/* Every collective, type and op; counts around the kernel's block and the
 * two-shot slices, and (SUM only, to keep the host reference short) one of
 * several MiB. */
static void test_every_collective(void **state)
{
    struct fixture *f = *state;
    static const size_t counts[] = {1, 4099, (1u << 20) + 3};
    for (int coll = 0; coll < 8; coll++)
        for (int dt = 0; dt < COLL_NDTYPE; dt++)
            for (int op = 0; op < (coll_reducing(coll) ? COLL_NOP : 1); op++)
                for (size_t c = 0; c < (op == UMP_SUM ? 3u : 2u); c++)
                    one(f, coll, dt, op, counts[c], false);
    /* in place: every collective */
    for (int coll = 0; coll < 8; coll++)
        for (int dt = 0; dt < COLL_NDTYPE; dt++)
            for (size_t c = 0; c < 3; c++)
                one(f, coll, dt, UMP_SUM, counts[c], true);
}

/* One-shot and two-shot forced in turn: the same bits. */
static void test_algorithms_agree(void **state)
{
    struct fixture *f = *state;
    static const char *const algo[] = {"coll_algo:oneshot",
                                       "coll_algo:twoshot"};
    ump_comm_t *keep = f->comm;
    for (int a = 0; a < 2; a++) {
        ump_ok(ump_comm_create(f->pool, NR, NULL, algo[a], &f->comm));
        for (int dt = 0; dt < COLL_NDTYPE; dt++) {
            one(f, UMP_COLL_ALLREDUCE, dt, UMP_SUM, 100003, false);
            one(f, UMP_COLL_ALLREDUCE, dt, UMP_AVG, 100003, true);
        }
        ump_ok(ump_comm_destroy(f->comm));
    }
    f->comm = keep;
}

/* A kernel on rank 0's stream writes its send buffer (one pattern, a
 * spin, then another) when the allreduce is queued on the ranks' streams:
 * the result holds the second pattern, and the kernel saw nobody write its
 * buffer meanwhile. */
static void test_producer_waited_for(void **state)
{
    struct fixture *f = *state;
    const size_t n = 8 * TU_MIB, words = n / 8;
    void *sb[NR], *rb[NR];
    const void *send[NR];
    void *recv[NR];
    struct gk_result *res = tu_alloc(f->pool, sizeof(*res), 0);
    for (int r = 0; r < NR; r++) {
        sb[r] = tu_alloc(f->pool, n, r);
        rb[r] = tu_alloc(f->pool, n, r);
        send[r] = sb[r];
        recv[r] = rb[r];
        if (r)
            gpu_ok(gk_fill(f->rt, f->st[r], sb[r], n, 10 + (uint64_t)r));
    }
    for (int r = 0; r < NR; r++)
        ump_ok(ump_stream_synchronize(f->pool, f->st[r]));
    gpu_result_init(f->pool, f->st[0], res);
    gpu_ok(gk_spin_fill_check(f->rt, f->st[0], sb[0], n, 1, 2, 200, res));
    ump_ok(ump_allreduce(f->comm, send, recv, words, UMP_UINT64, UMP_SUM,
                         f->st));
    for (int r = 0; r < NR; r++)
        ump_ok(ump_stream_synchronize(f->pool, f->st[r]));
    struct gk_result rr = gpu_result_read(f->pool, f->st[0], res);
    assert_int_equal(rr.bad, 0);
    uint64_t *got = malloc(n);
    assert_non_null(got);
    for (int r = 0; r < NR; r++) {
        gpu_copy(f->pool, f->st[r], got, recv[r], n);
        for (size_t i = 0; i < words; i++) {
            uint64_t want = gk_word(2, i);
            for (int k = 1; k < NR; k++)
                want += gk_word(10 + (uint64_t)k, i);
            if (got[i] != want)
                fail_msg("rank %d word %zu: %llx, expected %llx (the "
                         "producer's second pattern was not waited for)", r,
                         i, (unsigned long long)got[i],
                         (unsigned long long)want);
        }
    }
    free(got);
    for (int r = 0; r < NR; r++) {
        tu_free(f->pool, sb[r]);
        tu_free(f->pool, rb[r]);
    }
    tu_free(f->pool, res);
}

int main(void)
{
    gpu_require("test_gpu_coll");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_collective),
        cmocka_unit_test(test_algorithms_agree),
        cmocka_unit_test(test_producer_waited_for),
    };
    return cmocka_run_group_tests_name("gpu_coll", tests, setup, teardown);
}
