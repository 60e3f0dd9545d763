/*
 * Communicators across MPI processes (run by tests/mpi/run.sh under
 * mpirun -np 4, each process a sim pool of CONFIG's devices, 2 by
 * default: 8 ranks). Every collective x every type x every reduction
 * against a reference computed here (the fixed order: each process's ranks
 * folded in rank order, then the processes in order), in place and not,
 * both schedules of allreduce, streams, a communicator whose processes
 * bring different rank counts, the oob without an engine, point-to-point
 * rings and pairwise exchanges in groups, and the faults: a process whose
 * config differs, one whose device is bad, counts that differ, a process
 * that leaves (bounded time). A plain MPI program, not cmocka: every
 * process counts its failures, and rank 0 reports the sum.
 *
 * Pool memory is its device's: on cuda the CPU cannot load or store it
 * (on sim and the fake driver it happens to be able to). The test reaches
 * it only through to_pool, from_pool and pool_set: inputs are made in host
 * arrays and copied in, results copied out before they are compared.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../coll_call.h"
#include "coll/coll.h"
#include "coll/reduce.h"
#include "../plaintest.h"
#include "umpool.h"
#include "umpool_mpi.h"

static int me, np;
static ump_pool_t *pool;
static int ndev;


static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The layout of a communicator: every process's ranks. */
struct layout {
    int nall;
    int first[64], nr[64];
};

static void layout_of(ump_comm_t *c, int nlocal, struct layout *l)
{
    MPI_Allgather(&nlocal, 1, MPI_INT, l->nr, 1, MPI_INT, MPI_COMM_WORLD);
    l->nall = 0;
    for (int p = 0; p < np; p++) {
        l->first[p] = l->nall;
        l->nall += l->nr[p];
    }
    int n = 0, g = -1;
    CHECK(ump_comm_size(c, &n) == 0 && n == l->nall, "ump_comm_size: %d, "
          "expected %d", n, l->nall);
    CHECK(ump_comm_rank(c, 0, &g) == 0 && g == l->first[me],
          "ump_comm_rank(0): %d, expected %d", g, l->first[me]);
}

/* Global rank k's send element j in dt: values that round in float, so the
 * fold order shows in the bits. */
static void put(void *p, int dt, int k, size_t j)
{
    int iv = (int)((k * 7 + j * 13) % 97) - 48;
    float f = (float)iv / 3.0f;
    uint64_t bits = (uint64_t)(int64_t)iv;
    uint16_t h;
    double d = (double)iv / 3.0;
    switch (dt) {
    case UMP_FLOAT16:
        h = coll_float_to_half(f);
        memcpy(p, &h, 2);
        break;
    case UMP_BFLOAT16:
        h = coll_float_to_bf16(f);
        memcpy(p, &h, 2);
        break;
    case UMP_FLOAT32:
        memcpy(p, &f, 4);
        break;
    case UMP_FLOAT64:
        memcpy(p, &d, 8);
        break;
    default:
        memcpy(p, &bits, coll_dtype_size(dt));
    }
}

/* What global rank g receives, from every rank's send (all[k], host), in
 * want; false when it receives nothing. Reductions in the fixed order. */
static bool reference(const struct layout *l, int coll, int dt, int op,
                      int root, int g, size_t count, char *const *all,
                      char *want)
{
    size_t esz = coll_dtype_size(dt), s = count * esz;
    int rop = op == UMP_AVG ? UMP_SUM : op;
    size_t off = coll == UMP_COLL_REDUCE_SCATTER ? (size_t)g * s : 0;
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
    case UMP_COLL_REDUCE:
    case UMP_COLL_REDUCE_SCATTER: {
        if (coll == UMP_COLL_REDUCE && g != root)
            return false;
        char *part = malloc((size_t)np * s + 1);
        const void *src[64];
        for (int p = 0; p < np; p++) {
            for (int i = 0; i < l->nr[p]; i++)
                src[i] = all[l->first[p] + i] + off;
            coll_reduce(dt, rop, part + (size_t)p * s, src, l->nr[p], count);
        }
        for (int p = 0; p < np; p++)
            src[p] = part + (size_t)p * s;
        coll_reduce(dt, rop, want, src, np, count);
        if (op == UMP_AVG)
            coll_avg_finish(dt, want, count, l->nall);
        free(part);
        return true;
    }
    case UMP_COLL_BROADCAST:
        memcpy(want, all[root], s);
        return true;
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        if (coll == UMP_COLL_GATHER && g != root)
            return false;
        for (int k = 0; k < l->nall; k++)
            memcpy(want + (size_t)k * s, all[k], s);
        return true;
    case UMP_COLL_ALLTOALL:
        for (int k = 0; k < l->nall; k++)
            memcpy(want + (size_t)k * s, all[k] + (size_t)g * s, s);
        return true;
    default:
        memcpy(want, all[root] + (size_t)g * s, s);
        return true;
    }
}

static uint64_t fnv(const void *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void *palloc(size_t bytes, int dev)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    hints.device = dev;
    void *p = NULL;
    int rc = ump_alloc(pool, bytes ? bytes : 1, &hints, &p);
    if (rc) {
        fail("ump_alloc(%zu): %s", bytes, ump_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* The test's only ways into pool memory (see the top): copies and memsets
 * on the default stream, waited for (NULL is valid to ump_stream_
 * synchronize: on sim the work ran already, on cuda it is the legacy
 * default stream of the calling thread's context, which the copy used). */
static int pool_copy(void *dst, const void *src, size_t n)
{
    int rc = ump_memcpy_async(pool, dst, src, n, NULL);
    return rc ? rc : ump_stream_synchronize(pool, NULL);
}

/* A copy that failed: what the test would check next is garbage. */
static void pool_must(int rc, const char *what, const void *p, size_t n)
{
    if (rc) {
        fail("%s of %zu bytes at %p: %s", what, n, p, ump_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* n bytes of host memory src into pool memory dst. */
static void to_pool(void *dst, const void *src, size_t n)
{
    pool_must(pool_copy(dst, src, n), "to_pool", dst, n);
}

/* n bytes of pool memory src into host memory dst. */
static void from_pool(void *dst, const void *src, size_t n)
{
    pool_must(pool_copy(dst, src, n), "from_pool", src, n);
}

/* n bytes of pool memory p set to byte. */
static void pool_set(void *p, int byte, size_t n)
{
    int rc = ump_memset_async(pool, p, byte, n, NULL);
    if (!rc)
        rc = ump_stream_synchronize(pool, NULL);
    pool_must(rc, "pool_set", p, n);
}

/* One call on comm c of this process's nlocal ranks on devs, checked. */
static void one_case(ump_comm_t *c, const struct layout *l, int nlocal,
                     const int *devs, int coll, int dt, int op, int root,
                     size_t count, bool inplace, const ump_stream_t *st,
                     const char *what)
{
    size_t esz = coll_dtype_size(dt), sn, rn;
    sizes(coll, l->nall, count, &sn, &rn);
    size_t big = (sn > rn ? sn : rn) * esz;
    /* Every rank's input, for the reference. */
    char **all = calloc((size_t)l->nall, sizeof(*all));
    for (int k = 0; k < l->nall; k++) {
        all[k] = malloc(sn * esz + 1);
        for (size_t j = 0; j < sn; j++)
            put(all[k] + j * esz, dt, k, j);
    }
    const void *send[32];
    void *recv[32], *buf[32], *sbuf[32];
    int first = l->first[me];
    for (int r = 0; r < nlocal; r++) {
        int g = first + r;
        bool recvs = !(coll == UMP_COLL_REDUCE || coll == UMP_COLL_GATHER) ||
                     g == root;
        bool ip = inplace && recvs &&
                  (!coll_rooted(coll) || g == root || coll == UMP_COLL_BROADCAST);
        buf[r] = palloc(big, devs[r]);
        pool_set(buf[r], 0x5a, big);
        sbuf[r] = ip ? NULL : palloc(sn * esz, devs[r]);
        recv[r] = buf[r];
        send[r] = sbuf[r];
        if (ip) {
            if (coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER) {
                send[r] = (char *)buf[r] + (size_t)g * count * esz;
            } else if (coll == UMP_COLL_REDUCE_SCATTER ||
                       coll == UMP_COLL_SCATTER) {
                send[r] = buf[r];
                recv[r] = (char *)buf[r] + (size_t)g * count * esz;
            } else {
                send[r] = buf[r];
            }
        }
        if (coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER)
            to_pool((void *)send[r], all[g], count * esz);
        else
            to_pool((void *)send[r], all[g], sn * esz);
    }
    int rc = coll_case_call(c, coll, send, recv, count, dt, op, root, st);
    for (int r = 0; st && r < nlocal; r++) {
        int sync_rc = ump_stream_synchronize(pool, st[r]);
        CHECK(sync_rc == 0, "%s: synchronize rank %d's stream: %s", what,
              first + r, ump_strerror(sync_rc));
    }
    CHECK(rc == 0, "%s: coll %d dt %d op %d count %zu: %s", what, coll, dt,
          op, count, ump_strerror(rc));
    char *want = malloc(big + 1), *res = malloc(big + 1);
    size_t got = coll == UMP_COLL_REDUCE_SCATTER || coll == UMP_COLL_SCATTER
                     ? count * esz
                     : rn * esz;
    uint64_t h = 0;
    for (int r = 0; !rc && r < nlocal; r++) {
        int g = first + r;
        if (!reference(l, coll, dt, op, root, g, count, all, want))
            continue;
        from_pool(res, recv[r], got);
        if (memcmp(res, want, got)) {
            size_t i = 0;
            while (res[i] == want[i])
                i++;
            fail("%s: coll %d dt %d op %d count %zu root %d %s: rank %d "
                 "differs from the reference at byte %zu", what, coll, dt, op,
                 count, root, inplace ? "in place" : "out of place", g, i);
        }
        if (r == 0)
            h = fnv(res, got);
        else if (coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_ALLGATHER ||
                 coll == UMP_COLL_BROADCAST)
            CHECK(fnv(res, got) == h, "%s: rank %d's bits differ from "
                  "local rank 0's", what, g);
    }
    /* Every rank of every process the same bits, where all receive the
     * same. */
    if (!rc && (coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_ALLGATHER ||
                coll == UMP_COLL_BROADCAST)) {
        uint64_t hs[64];
        MPI_Allgather(&h, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T,
                      MPI_COMM_WORLD);
        for (int p = 1; p < np; p++)
            CHECK(hs[p] == hs[0], "%s: coll %d dt %d op %d: process %d's "
                  "result bits differ from process 0's", what, coll, dt, op,
                  p);
    }
    free(want);
    free(res);
    for (int r = 0; r < nlocal; r++) {
        ump_free(pool, buf[r]);
        if (sbuf[r])
            ump_free(pool, sbuf[r]);
    }
    for (int k = 0; k < l->nall; k++)
        free(all[k]);
    free(all);
}

/* Every collective x type x reduction (data movers: once per type). */
static void matrix(ump_comm_t *c, int nlocal, const int *devs,
                   const char *what)
{
    struct layout l;
    layout_of(c, nlocal, &l);
    for (int coll = 0; coll < 8; coll++)
        for (int dt = 0; dt < 10; dt++)
            for (int op = 0; op < (coll_reducing(coll) ? 5 : 1); op++) {
                int root = coll_rooted(coll) ? (coll + dt) % l.nall : 0;
                one_case(c, &l, nlocal, devs, coll, dt, op, root, 37,
                         (dt + op) % 2, NULL, what);
            }
}

static int all_devs[32];

/* Sizes and roots over every process, with streams. */
static void sizes_and_streams(ump_comm_t *c)
{
    struct layout l;
    layout_of(c, ndev, &l);
    ump_stream_t st[32];
    for (int r = 0; r < ndev; r++)
        ump_stream_create(pool, r, &st[r]);
    size_t counts[] = {1, 3, 1000, 70001};
    for (int coll = 0; coll < 8; coll++)
        for (size_t i = 0; i < sizeof(counts) / sizeof(*counts); i++)
            for (int root = 0; root < (coll_rooted(coll) ? l.nall : 1); root += 3)
                one_case(c, &l, ndev, all_devs, coll, UMP_FLOAT32, UMP_SUM,
                         root, counts[i], i % 2, i % 2 ? st : NULL,
                         "sizes, roots, streams");
    /* Allreduce of device memory goes between the processes in pieces of
     * 512 KiB (hier.c, on cuda): exactly one piece, one element over it,
     * seven pieces and a rest; AVG divides piece by piece. */
    static const size_t big[] = {131072, 131073, 400000};
    static const int big_dt[] = {UMP_FLOAT32, UMP_FLOAT32, UMP_FLOAT64};
    for (size_t i = 0; i < sizeof(big) / sizeof(*big); i++)
        one_case(c, &l, ndev, all_devs, UMP_COLL_ALLREDUCE, big_dt[i],
                 i == 1 ? UMP_AVG : UMP_SUM, 0, big[i], i % 2,
                 i % 2 ? st : NULL, "allreduce in pieces");
    for (int r = 0; r < ndev; r++)
        ump_stream_destroy(pool, st[r]);
}

/* The flat and the hierarchical schedules of allreduce: the same bits. */
static void schedules(void)
{
    const char *cfg[] = {"coll_schedule:flat", "coll_schedule:hierarchical"};
    for (int i = 0; i < 2; i++) {
        ump_comm_t *c;
        int rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL, cfg[i],
                                     &c);
        CHECK(rc == 0, "create %s: %s", cfg[i], ump_strerror(rc));
        if (rc)
            return;
        struct layout l;
        layout_of(c, ndev, &l);
        ump_coll_plan_t plan;
        rc = ump_comm_plan(c, UMP_COLL_ALLREDUCE, 1000, UMP_FLOAT32, &plan);
        /* Flat runs where the CPU folds the buffers: on sim. */
        bool sim = !strcmp(ump_backend_name(pool), "sim");
        CHECK(rc == 0 && (np == 1 || !strcmp(plan.algorithm,
                                             i || !sim ? "hierarchical"
                                                       : "flat")),
              "plan with %s: %s", cfg[i], rc ? ump_strerror(rc)
                                               : plan.algorithm);
        for (int dt = 0; dt < 10; dt++)
            for (int op = 0; op < 5; op++)
                one_case(c, &l, ndev, all_devs, UMP_COLL_ALLREDUCE, dt, op, 0,
                         1001, false, NULL, cfg[i]);
        ump_comm_destroy(c);
    }
}

/* Bytes of the collectives between this process and the others, to the
 * network (out) or from it. */
static uint64_t net_bytes(bool out)
{
    uint64_t sum = 0;
    for (int d = -1; d < ndev; d++) {
        ump_link_stats_t l;
        int at = d < 0 ? UMP_LOC_HOST : d;
        if (!ump_link_stats(pool, out ? at : UMP_LOC_NET,
                            out ? UMP_LOC_NET : at, &l))
            sum += l.coll_bytes;
    }
    return sum;
}

/* The counters of a call across processes (ump_coll_stats): each process
 * counts the call once, with every process's ranks (the steps it runs on
 * its own devices are not calls of their own), and its bytes to and from
 * the others on the network links. */
static void traffic(void)
{
    const char *cfg[] = {"coll_schedule:flat", "coll_schedule:hierarchical"};
    const size_t count = 4096;
    for (int i = 0; i < 2; i++) {
        ump_comm_t *c;
        int rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL, cfg[i],
                                     &c);
        CHECK(rc == 0, "create %s: %s", cfg[i], ump_strerror(rc));
        if (rc)
            return;
        int nall = 0;
        ump_comm_size(c, &nall);
        void *s[32], *r[32];
        for (int d = 0; d < ndev; d++) {
            s[d] = palloc(count * 4, d);
            r[d] = palloc(count * 4, d);
            pool_set(s[d], 0, count * 4);
        }
        ump_coll_stats_t a, b, o[8];
        uint64_t out0 = net_bytes(true), in0 = net_bytes(false);
        for (int k = 1; k < 8; k++)
            ump_coll_stats(pool, k, &o[k]);
        ump_coll_stats(pool, UMP_COLL_ALLREDUCE, &a);
        rc = ump_allreduce(c, (const void *const *)s, r, count, UMP_FLOAT32,
                           UMP_SUM, NULL);
        ump_coll_stats(pool, UMP_COLL_ALLREDUCE, &b);
        /* The hierarchical schedule's in-process reduce and broadcast are
         * steps of this call, not calls. */
        for (int k = 1; k < 8; k++) {
            ump_coll_stats_t x;
            ump_coll_stats(pool, k, &x);
            CHECK(x.calls == o[k].calls, "%s: collective %d counted %llu "
                  "calls during an allreduce", cfg[i], k,
                  (unsigned long long)(x.calls - o[k].calls));
        }
        uint64_t bus = (uint64_t)((double)(count * 4) * 2.0 * (nall - 1) /
                                  nall);
        CHECK(rc == 0 && b.calls == a.calls + 1 &&
                  b.bytes == a.bytes + count * 4 &&
                  b.timed_calls == a.timed_calls + 1 &&
                  b.timed_bus_bytes == a.timed_bus_bytes + bus &&
                  b.timed_ns > a.timed_ns,
              "%s: rc %d, calls +%llu, bytes +%llu, bus bytes +%llu (want "
              "1, %zu, %llu)", cfg[i], rc,
              (unsigned long long)(b.calls - a.calls),
              (unsigned long long)(b.bytes - a.bytes),
              (unsigned long long)(b.timed_bus_bytes - a.timed_bus_bytes),
              count * 4, (unsigned long long)bus);
        uint64_t out = net_bytes(true) - out0, in = net_bytes(false) - in0;
        CHECK(np == 1 ? out == 0 && in == 0 : out >= count * 4 / np &&
                                                 in >= count * 4 / np,
              "%s: %llu bytes to the network, %llu from it", cfg[i],
              (unsigned long long)out, (unsigned long long)in);
        if (me == 0 && i == 0)
            printf("traffic: %s allreduce of %zu B: %llu B out, %llu B in "
                   "on process 0\n", cfg[i], count * 4,
                   (unsigned long long)out, (unsigned long long)in);
        for (int d = 0; d < ndev; d++) {
            ump_free(pool, s[d]);
            ump_free(pool, r[d]);
        }
        ump_comm_destroy(c);
    }
}

/* Point-to-point: a ring, pairwise exchanges, several messages per pair in
 * order, and a process-to-process send outside a group. */
static void p2p(ump_comm_t *c)
{
    struct layout l;
    layout_of(c, ndev, &l);
    int n = l.nall, first = l.first[me];
    size_t cnt = 513, total = (size_t)n * 3 * cnt;
    int *sb[32], *rb[32]; /* pool memory */
    int *hb = malloc(total * 4); /* host: what goes in, what came out */
    for (int r = 0; r < ndev; r++) {
        sb[r] = palloc(total * 4, r);
        rb[r] = palloc(total * 4, r);
        for (size_t j = 0; j < total; j++)
            hb[j] = (first + r) * 1000003 + (int)j;
        to_pool(sb[r], hb, total * 4);
    }
    /* Ring: each rank sends to the next, receives from the one before. */
    int rc = ump_group_start();
    for (int r = 0; r < ndev; r++) {
        int g = first + r;
        rc |= ump_send(c, r, sb[r], cnt, UMP_INT32, (g + 1) % n, NULL);
        rc |= ump_recv(c, r, rb[r], cnt, UMP_INT32, (g + n - 1) % n, NULL);
    }
    rc |= ump_group_end();
    CHECK(rc == 0, "ring: %d", rc);
    for (int r = 0; !rc && r < ndev; r++) {
        int from = (first + r + n - 1) % n;
        from_pool(hb, rb[r], cnt * 4);
        for (size_t j = 0; j < cnt; j++)
            if (hb[j] != from * 1000003 + (int)j) {
                fail("ring: rank %d element %zu: %d", first + r, j, hb[j]);
                break;
            }
    }
    /* Every pair, three messages each way, in order: message m from g to h
     * is block (h * 3 + m) of g's send buffer, into block (g * 3 + m) of
     * h's recv buffer. */
    pool_set(rb[0], 0, 4);
    rc = ump_group_start();
    for (int r = 0; r < ndev; r++)
        for (int h = 0; h < n; h++)
            for (int m = 0; m < 3; m++) {
                int g = first + r;
                rc |= ump_send(c, r, sb[r] + ((size_t)h * 3 + m) * cnt, cnt,
                               UMP_INT32, h, NULL);
                rc |= ump_recv(c, r, rb[r] + ((size_t)h * 3 + m) * cnt, cnt,
                               UMP_INT32, h, NULL);
                (void)g;
            }
    rc |= ump_group_end();
    CHECK(rc == 0, "pairwise: %d", rc);
    for (int r = 0; !rc && r < ndev; r++) {
        from_pool(hb, rb[r], total * 4);
        for (int h = 0; h < n; h++)
            for (int m = 0; m < 3; m++) {
                int g = first + r;
                int want = h * 1000003 + (int)(((size_t)g * 3 + m) * cnt);
                int got = hb[((size_t)h * 3 + m) * cnt];
                if (got != want)
                    fail("pairwise: rank %d, message %d from %d: %d, "
                         "expected %d", g, m, h, got, want);
            }
    }
    /* Outside a group, between processes: even processes send first. */
    int peer = l.first[me ^ 1];
    if ((me ^ 1) < np) {
        if (me % 2 == 0) {
            rc = ump_send(c, 0, sb[0], cnt, UMP_INT32, peer, NULL);
            rc |= ump_recv(c, 0, rb[0], cnt, UMP_INT32, peer, NULL);
        } else {
            rc = ump_recv(c, 0, rb[0], cnt, UMP_INT32, peer, NULL);
            rc |= ump_send(c, 0, sb[0], cnt, UMP_INT32, peer, NULL);
        }
        from_pool(hb, rb[0], cnt * 4);
        CHECK(rc == 0 && hb[5] == peer * 1000003 + 5,
              "blocking pair with %d: rc %d, %d", peer, rc, hb[5]);
    }
    /* Two communicators in one group: each process's transfers with its
     * neighbour on both, completed in an order all agree on. */
    ump_comm_t *c2 = NULL;
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL, NULL, &c2);
    CHECK(rc == 0, "second comm: %s", ump_strerror(rc));
    if (!rc && np > 1) {
        int next = l.first[(me + 1) % np], prev = l.first[(me + np - 1) % np];
        pool_set(rb[0], 0, cnt * 8);
        rc = ump_group_start();
        rc |= ump_send(c2, 0, sb[0], cnt, UMP_INT32, next, NULL);
        rc |= ump_recv(c2, 0, rb[0], cnt, UMP_INT32, prev, NULL);
        rc |= ump_send(c, 0, sb[0] + cnt, cnt, UMP_INT32, prev, NULL);
        rc |= ump_recv(c, 0, rb[0] + cnt, cnt, UMP_INT32, next, NULL);
        rc |= ump_group_end();
        from_pool(hb, rb[0], cnt * 8);
        CHECK(rc == 0 && hb[0] == prev * 1000003 &&
                  hb[cnt] == next * 1000003 + (int)cnt,
              "two comms in a group: rc %d, got %d and %d", rc, hb[0],
              hb[cnt]);
    }
    if (c2)
        ump_comm_destroy(c2);
    /* Bad input, caught before anything moves. */
    if (ndev > 1) {
        rc = ump_send(c, 0, sb[0], cnt, UMP_INT32, first + 1, NULL);
        CHECK(rc == -EDEADLK, "a send inside the process outside a group: "
              "%d, expected -EDEADLK", rc);
        ump_group_start();
        ump_send(c, 0, sb[0], cnt, UMP_INT32, first + 1, NULL);
        ump_recv(c, 1, rb[1], cnt + 1, UMP_INT32, first, NULL);
        rc = ump_group_end();
        CHECK(rc == -EINVAL, "sizes differ in a pair: %d", rc);
    }
    CHECK(ump_send(c, 0, sb[0], cnt, UMP_INT32, n, NULL) == -EINVAL,
          "peer out of range accepted");
    CHECK(ump_send(c, ndev, sb[0], cnt, UMP_INT32, 0, NULL) == -EINVAL,
          "local rank out of range accepted");
    int stack[4];
    CHECK(ump_send(c, 0, stack, 4, UMP_INT32, 0, NULL) == -EINVAL,
          "a buffer outside the pool accepted");
    CHECK(ump_group_end() == -EINVAL, "ump_group_end without a start");
    for (int r = 0; r < ndev; r++) {
        ump_free(pool, sb[r]);
        ump_free(pool, rb[r]);
    }
    free(hb);
}

/* An oob over MPI without an engine: the collectives through its
 * allgather; point-to-point between processes is not possible. */
static int oob_allgather(void *ctx, const void *s, void *r, size_t bytes)
{
    return MPI_Allgather(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE,
                         *(MPI_Comm *)ctx) ? -EIO : 0;
}

static int oob_barrier(void *ctx)
{
    return MPI_Barrier(*(MPI_Comm *)ctx) ? -EIO : 0;
}

static void oob_only(void)
{
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    ump_oob_t oob = {me, np, oob_allgather, oob_barrier, &dup};
    ump_comm_t *c;
    int rc = ump_comm_create_oob(pool, ndev, NULL, &oob, NULL, &c);
    CHECK(rc == 0, "ump_comm_create_oob: %s", ump_strerror(rc));
    if (!rc) {
        struct layout l;
        layout_of(c, ndev, &l);
        for (int coll = 0; coll < 8; coll++)
            one_case(c, &l, ndev, all_devs, coll, UMP_BFLOAT16,
                     coll_reducing(coll) ? UMP_AVG : 0,
                     coll_rooted(coll) ? 3 % l.nall : 0, 29,
                     false, NULL, "oob only");
        void *b = palloc(64, 0);
        int peer = l.first[(me + 1) % np];
        rc = ump_send(c, 0, b, 4, UMP_INT32, peer, NULL);
        CHECK(np == 1 || rc == -ENOTSUP, "p2p without an engine: %d", rc);
        ump_free(pool, b);
        ump_comm_destroy(c);
    }
    MPI_Comm_free(&dup);
}

/* Processes bringing different numbers of ranks: process 0 one (its
 * second device), the others all of theirs. */
static void uneven(void)
{
    int one[1] = {ndev - 1};
    int nl = me == 0 ? 1 : ndev;
    const int *devs = me == 0 ? one : all_devs;
    ump_comm_t *c;
    int rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, nl,
                                 me == 0 ? one : NULL, NULL, &c);
    CHECK(rc == 0, "uneven create: %s", ump_strerror(rc));
    if (rc)
        return;
    struct layout l;
    layout_of(c, nl, &l);
    /* Every process plans the same schedule for every size, whatever its
     * own rank count (a different choice would pair unlike transfers). */
    for (size_t cnt = 1; cnt <= ((size_t)1 << 24); cnt *= 2) {
        ump_coll_plan_t plan;
        rc = ump_comm_plan(c, UMP_COLL_ALLREDUCE, cnt, UMP_FLOAT32, &plan);
        uint64_t h = rc ? 0 : fnv(plan.algorithm, strlen(plan.algorithm));
        uint64_t hs[64];
        MPI_Allgather(&h, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T,
                      MPI_COMM_WORLD);
        for (int p = 1; p < np; p++)
            CHECK(hs[p] == hs[0], "uneven: count %zu: process %d plans "
                  "another schedule than process 0", cnt, p);
    }
    for (int coll = 0; coll < 8; coll++)
        for (int root = 0; root < (coll_rooted(coll) ? l.nall : 1); root += 2)
            one_case(c, &l, nl, devs, coll, UMP_FLOAT16,
                     coll_reducing(coll) ? UMP_SUM : 0, root, 33, root % 4 == 2,
                     NULL, "uneven");
    ump_comm_destroy(c);
}

/* Faults: every process fails the same way, none hangs. */
static void faults(void)
{
    ump_comm_t *c = NULL;
    /* Process 1's config differs. */
    int rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                                 me == 1 ? "coll_algo:ring" : NULL, &c);
    CHECK(np == 1 ? rc == 0 : rc == -EINVAL,
          "configs differ: %d, expected -EINVAL", rc);
    if (!rc)
        ump_comm_destroy(c);
    /* Process 2 passes a device its pool lacks. */
    int bad[1] = {ndev + 5};
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, 1,
                             me == 2 % np ? bad : all_devs, NULL, &c);
    CHECK(rc == -EINVAL, "a bad device in process %d: %d, expected -EINVAL",
          2 % np, rc);
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                             "comm_timeout:0", &c);
    CHECK(rc == -EINVAL, "comm_timeout:0: %d", rc);
    if (np < 2)
        return;
    /* Counts differ between processes: an error, not a hang. */
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                             "comm_timeout:2", &c);
    CHECK(rc == 0, "create with comm_timeout:2: %s", ump_strerror(rc));
    if (rc)
        return;
    struct layout l;
    layout_of(c, ndev, &l);
    float *b[32];
    const void *s[32];
    void *r[32];
    for (int i = 0; i < ndev; i++) {
        b[i] = palloc(4096 * 4, i);
        pool_set(b[i], 0, 4096 * 4);
        s[i] = r[i] = b[i];
    }
    double t0 = now();
    rc = ump_allreduce(c, s, r, me == 1 ? 4000 : 4096, UMP_FLOAT32, UMP_SUM,
                       NULL);
    CHECK(rc != 0, "counts differ between processes: no error");
    CHECK(now() - t0 < 30, "counts differ: %.1f s", now() - t0);
    ump_comm_destroy(c);
    MPI_Barrier(MPI_COMM_WORLD);
    /* One process's bad argument (or count 0) in a call the others make:
     * it fails there at once, and no process gets a result from unlike
     * calls (the calls' numbers differ): the others fail too, in bounded
     * time. */
    for (int variant = 0; variant < 2; variant++) {
        rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                                 "comm_timeout:1", &c);
        CHECK(rc == 0, "create with comm_timeout:1: %s", ump_strerror(rc));
        if (rc)
            break;
        const void *sendv[32];
        for (int i = 0; i < ndev; i++)
            sendv[i] = me == 1 && !variant ? NULL : s[i];
        size_t cnt = me == 1 && variant ? 0 : 4096;
        int rc1 = ump_allreduce(c, sendv, r, cnt, UMP_FLOAT32, UMP_SUM, NULL);
        int rc2 = ump_allreduce(c, s, r, 4096, UMP_FLOAT32, UMP_SUM, NULL);
        if (me == 1)
            CHECK(variant ? rc1 == 0 && rc2 != 0 : rc1 == -EINVAL && rc2 != 0,
                  "%s on process 1: calls %d, %d", variant ? "count 0"
                  : "a NULL send", rc1, rc2);
        else
            CHECK(rc1 != 0, "%s on process 1: process %d's call succeeded",
                  variant ? "count 0" : "a NULL send", me);
        ump_comm_destroy(c);
        c = NULL;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* The last process leaves: the others fail within about comm_timeout,
     * and fail at once after that. */
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                             "comm_timeout:1", &c);
    CHECK(rc == 0, "create with comm_timeout:1: %s", ump_strerror(rc));
    if (!rc && me != np - 1) {
        t0 = now();
        rc = ump_allreduce(c, s, r, 4096, UMP_FLOAT32, UMP_SUM, NULL);
        double t = now() - t0;
        CHECK(rc == -ETIMEDOUT, "a peer left: %d, expected -ETIMEDOUT", rc);
        CHECK(t >= 0.9 && t < 10, "a peer left: failed after %.2f s", t);
        rc = ump_allreduce(c, s, r, 4096, UMP_FLOAT32, UMP_SUM, NULL);
        CHECK(rc == -ETIMEDOUT, "after the failure: %d", rc);
    }
    if (c)
        ump_comm_destroy(c);
    for (int i = 0; i < ndev; i++)
        ump_free(pool, b[i]);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The sum over global ranks 0..nall-1 of (g + j): what every element j of
 * an allreduce of "rank + index" holds. */
static int32_t rank_sum(int nall, size_t j)
{
    return (int32_t)((size_t)nall * j + (size_t)nall * (size_t)(nall - 1) / 2);
}

/* Fills this process's buffers (pool memory) with their global rank +
 * index on c, allreduces them and checks every element; the call's result.
 * Local rank lost (-1: none) is on the failed device: its fill must be
 * -EIO (its memory is gone), and it is not read back. */
static int rank_allreduce(ump_comm_t *c, int nlocal, int32_t **b, size_t n,
                          int lost, const char *what)
{
    const void *s[32];
    void *r[32];
    int32_t *h = malloc(n * sizeof(*h));
    for (int i = 0; i < nlocal; i++) {
        int g = 0;
        ump_comm_rank(c, i, &g);
        for (size_t j = 0; j < n; j++)
            h[j] = (int32_t)(g + (int)j);
        if (i == lost) {
            int rc = pool_copy(b[i], h, n * sizeof(*h));
            CHECK(rc == -EIO, "%s: filling local rank %d on the failed "
                  "device: %d, expected -EIO", what, i, rc);
        } else {
            to_pool(b[i], h, n * sizeof(*h));
        }
        s[i] = r[i] = b[i];
    }
    int nall = 0;
    MPI_Allreduce(&nlocal, &nall, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int rc = ump_allreduce(c, s, r, n, UMP_INT32, UMP_SUM, NULL);
    for (int i = 0; !rc && i < nlocal; i++) {
        if (i == lost)
            continue; /* rc 0 is wrong already (checked by the caller) */
        from_pool(h, b[i], n * sizeof(*h));
        for (size_t j = 0; j < n; j++)
            if (h[j] != rank_sum(nall, j)) {
                fail("%s: local rank %d element %zu is %d, expected %d", what,
                     i, j, (int)h[j], (int)rank_sum(nall, j));
                break;
            }
    }
    free(h);
    return rc;
}

/* A failed device (issue 17): process 1's last device fails (the sim's
 * injected failure). Every process's next collective is -EIO, in bounded
 * time; ump_comm_shrink without that rank gives a communicator whose
 * collectives are right again. Its own pool: the failure stays in it. */
static void devfail(const char *cfg)
{
    if (np < 2 || ndev < 2 || strcmp(ump_backend_name(pool), "sim"))
        return; /* the sim injects the failure */
    /* Process 1's last device fails at its 2000th operation: later than
     * anything before the memsets below, which reach it (the test has the
     * public API only: the config is its hook). */
    char fcfg[256];
    snprintf(fcfg, sizeof(fcfg), "%s,sim_fail_device:%d,sim_fail_after:2000",
             cfg, ndev - 1);
    ump_pool_t *saved = pool;
    int rc = ump_pool_create(me == 1 ? fcfg : cfg, &pool);
    CHECK(rc == 0, "pool for devfail: %s", ump_strerror(rc));
    if (rc) {
        pool = saved;
        return;
    }
    ump_comm_t *c = NULL, *nc = NULL;
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                             "comm_timeout:5", &c);
    CHECK(rc == 0, "create: %s", ump_strerror(rc));
    enum { N = 1000 };
    int32_t *b[32];
    for (int i = 0; i < ndev; i++)
        b[i] = palloc(N * sizeof(int32_t), i);
    if (!rc) {
        rc = rank_allreduce(c, ndev, b, N, -1, "before the failure");
        CHECK(rc == 0, "allreduce before the failure: %s", ump_strerror(rc));
        struct layout l;
        layout_of(c, ndev, &l);
        MPI_Barrier(MPI_COMM_WORLD);
        if (me == 1) {
            int k = 0;
            while (k < 3000 &&
                   ump_memset_async(pool, b[ndev - 1], 0, 4, NULL) == 0)
                k++;
            CHECK(k < 3000, "device %d did not fail", ndev - 1);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        rc = rank_allreduce(c, ndev, b, N, me == 1 ? ndev - 1 : -1,
                            "with a failed device");
        double t = now() - t0;
        CHECK(rc == -EIO, "a rank's device failed: process %d got %d (%s), "
              "expected -EIO", me, rc, ump_strerror(rc));
        CHECK(t < 10, "a rank's device failed: -EIO after %.2f s", t);
        /* A rooted one (its schedule has no all-to-all of its own: the
         * agreement round tells every process). */
        const void *bs[32];
        void *br[32];
        for (int i = 0; i < ndev; i++)
            bs[i] = br[i] = b[i];
        rc = ump_broadcast(c, bs, br, N, UMP_INT32, 0, NULL);
        CHECK(rc == -EIO, "broadcast with a failed device: process %d got "
              "%d, expected -EIO", me, rc);
        /* Keeping the failed rank: no process gets a communicator (the
         * one that has the rank says why, the others learn it). */
        ump_comm_t *kept = NULL;
        rc = ump_comm_shrink(c, 0, NULL, &kept);
        CHECK(rc == (me == 1 ? -EIO : -EINVAL) && !kept,
              "shrink keeping the failed rank: process %d got %d", me, rc);
        int ex = l.first[1] + ndev - 1;
        rc = ump_comm_shrink(c, 1, &ex, &nc);
        CHECK(rc == 0 && nc, "ump_comm_shrink: %s", ump_strerror(rc));
        int nr = 0;
        if (nc)
            ump_comm_size(nc, &nr);
        CHECK(nr == np * ndev - 1, "shrunk: %d ranks, expected %d", nr,
              np * ndev - 1);
        if (nc) {
            rc = rank_allreduce(nc, me == 1 ? ndev - 1 : ndev, b, N, -1,
                                "after ump_comm_shrink");
            CHECK(rc == 0, "allreduce of the survivors: %s",
                  ump_strerror(rc));
            ump_comm_destroy(nc);
        }
        ump_comm_destroy(c);
    }
    for (int i = 0; i < ndev; i++) /* the lost buffer too */
        CHECK(ump_free(pool, b[i]) == 0, "ump_free of buffer %d", i);
    ump_pool_destroy(pool);
    pool = saved;
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A pool of cfg's devices at log level info (the global pool is swapped
 * for it) and a communicator with coll_engine:nccl, the log of its
 * creation caught in log. The pool to destroy is returned through the
 * global; NULL c on failure (checked). */
static ump_pool_t *nccl_pool(const char *cfg, ump_comm_t **c, char *log,
                             size_t len)
{
    char pcfg[256];
    snprintf(pcfg, sizeof(pcfg), "%s,log_level:info", cfg);
    ump_pool_t *saved = pool;
    *c = NULL;
    int rc = ump_pool_create(pcfg, &pool);
    CHECK(rc == 0, "pool %s: %s", pcfg, ump_strerror(rc));
    if (rc) {
        pool = saved;
        return NULL;
    }
    fflush(stderr);
    int err = dup(2);
    FILE *t = tmpfile();
    dup2(fileno(t), 2);
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL,
                             "coll_engine:nccl", c);
    fflush(stderr);
    dup2(err, 2);
    close(err);
    rewind(t);
    log[fread(log, 1, len - 1, t)] = '\0';
    fclose(t);
    CHECK(rc == 0, "coll_engine:nccl: %s; log: %s", ump_strerror(rc), log);
    return saved;
}

static void nccl_done(ump_comm_t *c, ump_pool_t *saved)
{
    if (c)
        ump_comm_destroy(c);
    ump_pool_destroy(pool);
    pool = saved;
}

/* NCCL asked for (coll_engine:nccl) where it cannot start (no GPU, or the
 * sim backend): every process falls back to MPI with one info line, and
 * the communicator works. Where libnccl.so.2 loads, this goes through its
 * loading, process 0's unique id and the oob exchanges. */
static void nccl_fallback(const char *cfg)
{
    ump_comm_t *c;
    char log[4096] = "";
    ump_pool_t *saved = nccl_pool(cfg, &c, log, sizeof(log));
    if (!saved)
        return;
    const char *line = strstr(log, "NCCL did not start");
    CHECK(line && !strstr(line + 1, "NCCL did not start") &&
              strstr(line, "goes through mpi"),
          "coll_engine:nccl without a GPU: no (single) fallback line in: %s",
          log);
    if (me == 0 && line)
        printf("nccl: %.*s\n", (int)strcspn(line, "\n"), line);
    if (c) {
        struct layout l;
        layout_of(c, ndev, &l);
        one_case(c, &l, ndev, all_devs, UMP_COLL_ALLREDUCE, UMP_FLOAT32,
                 UMP_SUM, 0, 1000, false, NULL, "after the NCCL fallback");
    }
    nccl_done(c, saved);
}

/* NCCL started (the stand-in of tests/mpi/fake_nccl.c, named by
 * UMPOOL_NCCL_LIBRARY, on the fake CUDA driver): point-to-point between
 * processes goes through it, straight from device memory, and pairs
 * match although the two sides call in different orders. */
static void nccl_p2p(const char *cfg)
{
    ump_comm_t *c;
    char log[4096] = "";
    ump_pool_t *saved = nccl_pool(cfg, &c, log, sizeof(log));
    if (!saved)
        return;
    CHECK(strstr(log, "NCCL carries point-to-point"),
          "coll_engine:nccl with the stand-in: NCCL did not start: %s", log);
    if (c)
        p2p(c);
    nccl_done(c, saved);
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    snprintf(fail_prefix, sizeof(fail_prefix), "[process %d] ", me);
    const char *cfg = argc > 1 ? argv[1] : "backend:sim,sim_devices:2";
    int rc = ump_pool_create(cfg, &pool);
    if (rc) {
        fprintf(stderr, "ump_pool_create(%s): %s\n", cfg, ump_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ndev = ump_device_count(pool);
    for (int i = 0; i < ndev; i++)
        all_devs[i] = i;
    ump_comm_t *c;
    rc = ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL, NULL, &c);
    if (rc) {
        fprintf(stderr, "ump_comm_create_mpi: %s\n", ump_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *only = getenv("UMPOOL_MPI_TEST"); /* parts, e.g. "p2p,oob" */
    if (only && !*only)
        only = NULL;
#define PART(name, stmt)                                                       \
    if (!only || strstr(only, name)) {                                         \
        double t0 = now();                                                     \
        stmt;                                                                  \
        if (me == 0)                                                           \
            printf("%-8s %.2f s\n", name, now() - t0);                         \
    }
    PART("matrix", matrix(c, ndev, all_devs, "matrix"));
    PART("sizes", sizes_and_streams(c));
    PART("sched", schedules());
    PART("traffic", traffic());
    PART("p2p", p2p(c));
    PART("oob", oob_only());
    PART("uneven", uneven());
    ump_comm_destroy(c);
    PART("faults", faults());
    PART("devfail", devfail(cfg));
    if (getenv("UMPOOL_NCCL_LIBRARY")) {
        PART("ncclp2p", nccl_p2p(cfg));
    } else {
        PART("nccl", nccl_fallback(cfg));
    }
    /* Nothing the calls allocated is left live, broken communicators'
     * staging included (hier.c): the pool can be destroyed. */
    int drc = ump_pool_destroy(pool);
    CHECK(drc == 0, "ump_pool_destroy at the end: %s", ump_strerror(drc));
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("%s: %d processes x %d devices, %d failure(s)\n",
               total ? "FAIL" : "PASS", np, ndev, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
