/*
 * The collectives' cost model (lib/coll/model.c) on the shipped machines:
 * the crossovers the issue asks for on dgx-h200, vLLM's thresholds as a
 * sanity check, every collective and algorithm finite where it applies,
 * the host path of pcie-4gpu, and bad communicators.
 *
 * The topologies are found through UMPOOL_TOPOLOGY_DIR (set by the test
 * harness); without it the tests that need them are skipped and the
 * program exits 77 (SKIP) once the others have passed.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/coll.h"
#include "coll/model.h"
#include "topo/topology.h"
#include "umpool.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static bool shipped_missing;

static const char *const coll_names[COLL_NCOLL] = {
    "allreduce",     "broadcast", "reduce", "allgather",
    "reducescatter", "alltoall",  "gather", "scatter",
};

/* The shipped machine name, or skip the test when the folder is unknown.
 * The caller frees it. */
static struct ump_topology *load(const char *name)
{
    char path[PATH_MAX];
    struct ump_topology *topo;

    if (shipped_missing)
        skip();
    topo = malloc(sizeof(*topo));
    assert_non_null(topo);
    assert_int_equal(topo_resolve(name, path, sizeof(path)), 0);
    assert_int_equal(topo_load_file(path, topo), 0);
    return topo;
}

/* The communicator of ranks on devices[] (NULL: 0..n-1) of machine name. */
static void comm_on(const char *name, int n, const int *devices,
                    struct coll_topo *t)
{
    struct ump_topology *topo = load(name);
    assert_int_equal(coll_topo_from(topo, n, devices, t), 0);
    free(topo);
}

/* nccl-tests' busBw of an allreduce of S bytes in us microseconds, GB/s. */
static double allreduce_busbw(int n, size_t S, double us)
{
    return (double)S / (us * 1e3) * 2.0 * (n - 1) / n;
}

static void test_names(void **state)
{
    (void)state;
    for (int a = 0; a < COLL_NALGO; a++) {
        const char *s = coll_algo_name((enum coll_algo)a);
        assert_non_null(s);
        assert_int_equal(coll_algo_lookup(s), a);
    }
    assert_string_equal(coll_algo_name(COLL_ONESHOT), "oneshot");
    assert_string_equal(coll_algo_name(COLL_DIRECT), "direct");
    assert_null(coll_algo_name(COLL_NALGO));
    assert_null(coll_algo_name((enum coll_algo)-1));
    assert_int_equal(coll_algo_lookup("Ring"), -1);
    assert_int_equal(coll_algo_lookup(""), -1);
    assert_int_equal(coll_algo_lookup(NULL), -1);
}

static void test_bad_communicators(void **state)
{
    struct ump_topology *topo = load("dgx-h200");
    struct coll_topo t, before;
    const int dup[] = {0, 1, 2, 1};
    const int out_of_range[] = {0, 8};
    const int negative[] = {-1};
    (void)state;

    /* A failure leaves the result alone. */
    memset(&t, 0x5a, sizeof(t));
    before = t;
    assert_int_equal(coll_topo_from(topo, 0, NULL, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, -1, NULL, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, 9, NULL, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, 4, dup, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, 2, out_of_range, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, 1, negative, &t), -EINVAL);
    assert_int_equal(coll_topo_from(NULL, 1, NULL, &t), -EINVAL);
    assert_int_equal(coll_topo_from(topo, 1, NULL, NULL), -EINVAL);
    assert_memory_equal(&t, &before, sizeof(t));
    free(topo);
}

static void test_views(void **state)
{
    struct coll_topo t;
    const int perm[] = {3, 0, 2};
    (void)state;

    /* dgx-h200: every pair NVLink at 450, and each rank's port is the same
     * 450, shared by all seven peers. */
    comm_on("dgx-h200", 8, NULL, &t);
    assert_int_equal(t.nranks, 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(t.dev[i], i);
        assert_true(t.nvl_port[i] == 450);
        assert_true(t.pcie_port[i] == 0);
        for (int j = 0; j < 8; j++) {
            assert_true(t.peer[i][j]);
            assert_int_equal(t.kind[i][j],
                             i == j ? UMP_LINK_SELF : UMP_LINK_NVLINK);
            assert_true(t.bw[i][j] == (i == j ? 4800 : 450));
        }
    }
    assert_true(t.local_bw == 4800);

    /* pcie-4gpu, ranks on devices 3, 0, 2: 0 and 2 are 20 GB/s without
     * peer access, 3 and 2 share a PCIe switch. */
    comm_on("pcie-4gpu", 3, perm, &t);
    assert_int_equal(t.dev[0], 3);
    assert_int_equal(t.dev[1], 0);
    assert_false(t.peer[0][1]);
    assert_false(t.peer[1][2]);
    assert_true(t.peer[0][2]);
    assert_int_equal(t.kind[0][2], UMP_LINK_PCIE);
    assert_true(t.bw[1][2] == 20);
    for (int r = 0; r < 3; r++) {
        assert_true(t.pcie_port[r] == 25);
        assert_true(t.nvl_port[r] == 0);
    }
    /* The host path: the slower leg (the sockets' crossing), two PCIe
     * hops of latency. */
    assert_true(coll_model_path_gbs(&t, 1, 2) == 20);
    assert_true(coll_model_path_gbs(&t, 0, 2) == 25);
    assert_true(coll_model_hop_us(&t, 1, 2) > coll_model_hop_us(&t, 0, 2));
    assert_true(coll_model_path_gbs(&t, 0, 3) == 0);
    assert_true(coll_model_hop_us(&t, 0, 0) == 0);
}

static void test_dgx_targets(void **state)
{
    struct coll_topo t;
    double us;
    enum coll_algo a;
    (void)state;

    comm_on("dgx-h200", 8, NULL, &t);
    a = coll_model_choose(&t, UMP_COLL_ALLREDUCE, 8 * KiB, &us);
    assert_int_equal(a, COLL_ONESHOT);
    assert_true(us > 0 && us < 15);

    a = coll_model_choose(&t, UMP_COLL_ALLREDUCE, 256 * MiB, &us);
    assert_int_not_equal(a, COLL_ONESHOT);
    assert_true(allreduce_busbw(8, 256 * MiB, us) >= 0.85 * 450);

    /* NCCL's own figure: ring LL on 8 Hopper ranks over NVLink is
     * 6.6 + 14 * 0.6 = 15 us of latency. */
    us = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_RING, 8);
    assert_true(us > 15.0 && us < 15.1);

    /* One-shot's seven reads share the port to the switch: 64 MiB takes
     * seven times 64 MiB at 450 GB/s, not one. */
    us = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 64 * MiB);
    assert_true(us >= 7.0 * 64 * MiB / 450e3);
    assert_true(us < 7.0 * 64 * MiB / 450e3 + 20);
}

/* The largest power of two at which allreduce still picks one-shot on n
 * ranks of dgx-h200 (0: never), checking that once it loses it never wins
 * again up to 1 GiB. */
static size_t oneshot_limit(int n)
{
    struct coll_topo t;
    size_t last = 0;
    bool lost = false;

    comm_on("dgx-h200", n, NULL, &t);
    for (size_t S = 8; S <= GiB; S *= 2) {
        bool one = coll_model_choose(&t, UMP_COLL_ALLREDUCE, S, NULL) ==
                   COLL_ONESHOT;
        if (one) {
            assert_false(lost);
            last = S;
        } else {
            lost = true;
        }
    }
    return last;
}

static void test_crossovers(void **state)
{
    (void)state;
    /* vLLM: one-shot always at 2 ranks, below 512 KiB at 4, below 256 KiB
     * at 8. The model's schedules cross at 484 KiB and 255 KiB; the fan
     * (one launch, no barrier) moves the last power of two with one-shot
     * to 512 KiB at 4 ranks and 256 KiB at 8. */
    assert_int_equal(oneshot_limit(2), GiB);
    size_t at4 = oneshot_limit(4), at8 = oneshot_limit(8);
    fprintf(stderr, "one-shot up to %zu KiB at 4 ranks, %zu KiB at 8\n",
            at4 / KiB, at8 / KiB);
    assert_true(at4 >= 256 * KiB && at4 <= 512 * KiB);
    assert_true(at8 >= 128 * KiB && at8 <= 256 * KiB);
    assert_true(oneshot_limit(3) >= at4);
    assert_true(oneshot_limit(5) <= at4 && oneshot_limit(5) >= at8);
}

/* The fan (model.h): which calls it takes, on which rank, and its time. */
static void test_fan(void **state)
{
    struct coll_topo t;
    (void)state;

    comm_on("dgx-h200", 8, NULL, &t);
    /* 8 B on 8 ranks: the launch and one NVLink hop, no barrier. */
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8,
                                    0), 0);
    double us = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8);
    assert_true(us > 3.6 && us < 3.61);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_BROADCAST, COLL_DIRECT, 4096,
                                    5), 5);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_REDUCE, COLL_DIRECT, 4096,
                                    3), 3);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLGATHER, COLL_DIRECT,
                                    4096, 3), 0);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_REDUCE_SCATTER, COLL_DIRECT,
                                     4096, 0), 0);
    /* Not the fan's: other algorithms and collectives, bad arguments. */
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_TWOSHOT, 8,
                                    0), -1);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_RING, 8, 0),
                     -1);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLTOALL, COLL_DIRECT, 8, 0),
                     -1);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_GATHER, COLL_DIRECT, 8, 0),
                     -1);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_BROADCAST, COLL_DIRECT, 8,
                                    8), -1);
    assert_int_equal(coll_model_fan(NULL, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8,
                                    0), -1);
    /* Too big: above COLL_FAN_MAX, or where every byte through one port
     * costs more than the schedule: an allgather's fan stores the whole
     * 1 MiB into each of 7 peers, direct reads 7 x 128 KiB a rank. */
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT,
                                    COLL_FAN_MAX + 1, 0), -1);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT,
                                    COLL_FAN_MAX, 0), 0);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLGATHER, COLL_DIRECT,
                                    COLL_FAN_MAX, 0), -1);
    assert_true(coll_model_us(&t, UMP_COLL_ALLGATHER, COLL_DIRECT,
                              COLL_FAN_MAX) < 7.0 * MiB / 450e3);
    /* One-shot's fan against two-shot's schedule, between powers of two:
     * at 8 ranks they cross at 460 KiB, at 4 at 791 KiB. */
    assert_int_equal(coll_model_choose(&t, UMP_COLL_ALLREDUCE, 448 * KiB,
                                       NULL), COLL_ONESHOT);
    assert_int_equal(coll_model_choose(&t, UMP_COLL_ALLREDUCE, 472 * KiB,
                                       NULL), COLL_TWOSHOT);
    comm_on("dgx-h200", 4, NULL, &t);
    assert_int_equal(coll_model_choose(&t, UMP_COLL_ALLREDUCE, 784 * KiB,
                                       NULL), COLL_ONESHOT);
    assert_int_equal(coll_model_choose(&t, UMP_COLL_ALLREDUCE, 800 * KiB,
                                       NULL), COLL_TWOSHOT);
    /* The root of a rooted fan, and any root of the others. */
    assert_int_equal(coll_model_fan(&t, UMP_COLL_BROADCAST, COLL_DIRECT, 64,
                                    3), 3);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 64,
                                    -1), 0);
    /* No peer access between some ranks: no fan. */
    comm_on("pcie-4gpu", 4, NULL, &t);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8,
                                    0), -1);
    /* One rank: a local copy, no fan. */
    comm_on("dgx-h200", 1, NULL, &t);
    assert_int_equal(coll_model_fan(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8,
                                    0), -1);

    /* The executed fan's time from its log, and a bad log. */
    comm_on("dgx-h200", 4, NULL, &t);
    struct coll_xfer log[7] = {{1, 0, 0, 2 * 4096}};
    for (int r = 1; r < 4; r++) {
        log[2 * r - 1] = (struct coll_xfer){1, r, 0, 4096};
        log[2 * r] = (struct coll_xfer){1, 0, r, 4096};
    }
    double exec = coll_model_exec_fan_us(&t, log, 7);
    double plan = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 4096);
    assert_true(fabs(exec - plan) < 1e-9);
    log[3].to = 4;
    assert_true(isnan(coll_model_exec_fan_us(&t, log, 7)));
    assert_true(isnan(coll_model_exec_fan_us(&t, NULL, 7)));
}

/* Every collective and algorithm on t: finite, positive and growing with
 * size where it applies, infinite elsewhere; the choice is the minimum. */
static void check_all(const struct coll_topo *t)
{
    for (int c = 0; c < COLL_NCOLL; c++) {
        for (int a = 0; a < COLL_NALGO; a++) {
            bool applies = coll_algo_applies(c, (enum coll_algo)a);
            double prev = 0;
            for (size_t S = 0; S <= GiB; S = S ? S * 4 : 1) {
                double us = coll_model_us(t, c, (enum coll_algo)a, S);
                if (!applies) {
                    assert_true(isinf(us));
                    continue;
                }
                assert_true(isfinite(us) && us > 0);
                if (S && !(us > prev))
                    fprintf(stderr, "%s %s: %zu B %.3f us, less %.3f\n",
                            coll_names[c], coll_algo_name((enum coll_algo)a),
                            S, us, prev);
                assert_true(S == 0 || us > prev);
                prev = us;
                /* Any root gives a finite time too. */
                assert_true(isfinite(coll_model_root_us(
                    t, c, (enum coll_algo)a, S, t->nranks - 1)));
            }
        }
        for (size_t S = 8; S <= GiB; S *= 8) {
            double best, us;
            enum coll_algo a = coll_model_choose(t, c, S, &best);
            assert_true(coll_algo_applies(c, a));
            assert_true(best == coll_model_us(t, c, a, S));
            for (int b = 0; b < COLL_NALGO; b++) {
                us = coll_model_us(t, c, (enum coll_algo)b, S);
                assert_true(us >= best);
            }
        }
    }
}

static void test_every_collective(void **state)
{
    struct coll_topo t;
    static const int two_sockets[] = {1, 2};
    static const struct {
        const char *name;
        int n;
        const int *devices;
    } comms[] = {
        {"dgx-h200", 8, NULL},  {"dgx-h200", 3, NULL},
        {"dgx-h200", 1, NULL},  {"pcie-4gpu", 4, NULL},
        {"pcie-4gpu", 2, two_sockets}, {"nvlink-pairs-4gpu", 4, NULL},
    };
    (void)state;

    for (size_t k = 0; k < sizeof(comms) / sizeof(comms[0]); k++) {
        comm_on(comms[k].name, comms[k].n, comms[k].devices, &t);
        check_all(&t);
    }

    /* Which algorithm exists for which collective. */
    for (int c = 0; c < COLL_NCOLL; c++) {
        bool ar = c == UMP_COLL_ALLREDUCE;
        bool tree = ar || c == UMP_COLL_BROADCAST || c == UMP_COLL_REDUCE;
        assert_int_equal(coll_algo_applies(c, COLL_ONESHOT), ar);
        assert_int_equal(coll_algo_applies(c, COLL_TWOSHOT), ar);
        assert_int_equal(coll_algo_applies(c, COLL_TREE), tree);
        assert_true(coll_algo_applies(c, COLL_RING));
        assert_int_equal(coll_algo_applies(c, COLL_DIRECT), !ar);
    }

    /* Out of range: nothing applies. */
    comm_on("dgx-h200", 8, NULL, &t);
    double us = 0;
    assert_true(isinf(coll_model_us(&t, -1, COLL_RING, 8)));
    assert_true(isinf(coll_model_us(&t, COLL_NCOLL, COLL_RING, 8)));
    assert_true(isinf(coll_model_us(&t, 0, COLL_NALGO, 8)));
    assert_true(isinf(coll_model_us(NULL, 0, COLL_RING, 8)));
    assert_true(isinf(coll_model_root_us(&t, UMP_COLL_BROADCAST, COLL_RING,
                                         8, 8)));
    assert_int_equal(coll_model_choose(&t, COLL_NCOLL, 8, &us), COLL_NALGO);
    assert_true(isinf(us));
}

static void test_one_rank(void **state)
{
    struct coll_topo t;
    const int dev5[] = {5};
    (void)state;

    /* A local copy whatever the algorithm: the ties go to one-shot for
     * allreduce and direct for the rest. */
    comm_on("dgx-h200", 1, dev5, &t);
    for (int c = 0; c < COLL_NCOLL; c++) {
        double best;
        enum coll_algo a = coll_model_choose(&t, c, 64 * MiB, &best);
        assert_int_equal(a, c == UMP_COLL_ALLREDUCE ? COLL_ONESHOT
                                                    : COLL_DIRECT);
        for (int b = 0; b < COLL_NALGO; b++)
            if (coll_algo_applies(c, (enum coll_algo)b))
                assert_true(coll_model_us(&t, c, (enum coll_algo)b,
                                          64 * MiB) == best);
    }
}

static void test_pcie_host_path(void **state)
{
    struct coll_topo all, socket, across;
    const int one_socket[] = {0, 1}, two_sockets[] = {0, 2};
    (void)state;

    comm_on("pcie-4gpu", 4, NULL, &all);
    comm_on("pcie-4gpu", 2, one_socket, &socket);
    comm_on("pcie-4gpu", 2, two_sockets, &across);
    for (size_t S = 16 * MiB; S <= GiB; S *= 4) {
        double us4, us2, usx;
        coll_model_choose(&all, UMP_COLL_ALLREDUCE, S, &us4);
        coll_model_choose(&socket, UMP_COLL_ALLREDUCE, S, &us2);
        coll_model_choose(&across, UMP_COLL_ALLREDUCE, S, &usx);
        assert_true(us4 > us2);
        /* Two ranks across the sockets: the host path (20 GB/s, two PCIe
         * hops) is slower than the switch (25 GB/s). */
        assert_true(usx > us2);
        assert_true(usx >= (double)S / 20e3);
    }
    /* Small sizes pay the host path's latency. */
    assert_true(coll_model_us(&across, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8) >
                coll_model_us(&socket, UMP_COLL_ALLREDUCE, COLL_ONESHOT, 8));
    /* A ring over the four crosses the sockets twice: the host path is its
     * bottleneck, 1.5 S at 20 GB/s. */
    double us = coll_model_us(&all, UMP_COLL_ALLREDUCE, COLL_RING, 256 * MiB);
    assert_true(us >= 1.5 * 256 * MiB / 20e3);
}

/* Device memory is a resource too: with slow memory (100 GB/s against
 * NVLink's 450) the reduction's own reads and writes and the peers' reads
 * bound the time, not the link. Needs no shipped file. */
static void test_memory_bound(void **state)
{
    static const char text[] = "name slowmem\n"
                               "local_bw 100\n"
                               "device 0-1 mem 16G numa 0\n"
                               "link 0 1 nvlink 450\n";
    struct ump_topology *topo = malloc(sizeof(*topo));
    struct coll_topo t;
    const double S = 64.0 * MiB;
    double us;
    (void)state;

    assert_non_null(topo);
    assert_int_equal(topo_parse(text, "slowmem", topo), 0);
    assert_int_equal(coll_topo_from(topo, 2, NULL, &t), 0);
    /* One-shot: each rank reads its input, writes its output, serves its
     * peer's read and takes its peer's data: 4 S through 100 GB/s. */
    us = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_ONESHOT, (size_t)S);
    assert_true(us >= 4 * S / 100e3 && us < 4 * S / 100e3 + 20);
    /* One rank: a copy, S read and S written. */
    assert_int_equal(coll_topo_from(topo, 1, NULL, &t), 0);
    us = coll_model_us(&t, UMP_COLL_ALLREDUCE, COLL_RING, (size_t)S);
    assert_true(us >= 2 * S / 100e3 && us < 2 * S / 100e3 + 20);
    free(topo);
}

/* The plan for allreduce at the sizes the issue names. */
static void print_table(const char *name, int n)
{
    static const size_t sizes[] = {8, 8 * KiB, 256 * KiB, MiB, 16 * MiB,
                                   256 * MiB};
    struct coll_topo t;

    comm_on(name, n, NULL, &t);
    fprintf(stderr, "allreduce on %s, %d ranks:\n", name, n);
    fprintf(stderr, "  %10s  %-8s %12s %10s\n", "bytes", "algo", "us",
            "busBw GB/s");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        double us;
        enum coll_algo a =
            coll_model_choose(&t, UMP_COLL_ALLREDUCE, sizes[k], &us);
        fprintf(stderr, "  %10zu  %-8s %12.2f %10.1f\n", sizes[k],
                coll_algo_name(a), us, allreduce_busbw(n, sizes[k], us));
        assert_true(isfinite(us));
    }
}

static void test_table(void **state)
{
    (void)state;
    print_table("dgx-h200", 8);
    print_table("pcie-4gpu", 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bad_communicators),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_dgx_targets),
        cmocka_unit_test(test_crossovers),
        cmocka_unit_test(test_fan),
        cmocka_unit_test(test_every_collective),
        cmocka_unit_test(test_one_rank),
        cmocka_unit_test(test_pcie_host_path),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_table),
    };
    const char *dir = getenv("UMPOOL_TOPOLOGY_DIR");
    int failed;

    if (!dir || !*dir) {
        shipped_missing = true;
        fprintf(stderr, "test_coll_model: UMPOOL_TOPOLOGY_DIR is not set: "
                        "the shipped topologies are skipped\n");
    }
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed ? failed : shipped_missing ? 77 : 0;
}
