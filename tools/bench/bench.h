/*
 * umpool-bench: what its files share. The command line, parsed once by
 * umpool-bench.c (the dispatch), one entry point per scenario, each in its
 * own file (alloc.c, demo.c, placement.c, offload.c), and the small helpers
 * every scenario uses. Scenarios use the public API (umpool.h) only.
 */
#ifndef UMP_BENCH_H
#define UMP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* The pools of alloc and demo unless --config says otherwise. */
#define BENCH_ALLOC_CONFIG                                                     \
    "backend:sim,sim_devices:1,sim_device_mem:8G,sim_driver_costs:h200"
#define BENCH_DEMO_CONFIG "backend:sim,sim_topology:dgx-h200,sim_device_mem:2G"
#define BENCH_ALLOC_ITERS 200000 /* --iters by default */
#define BENCH_MAX_SIZES 32       /* --sizes */

/* umpool-bench offload: limits of its options, checked by the parser. */
#define BENCH_OFFLOAD_MIN_SIZE ((size_t)4 << 20)   /* and a multiple of 1M */
#define BENCH_OFFLOAD_MIN_BUDGET ((size_t)8 << 20)
#define BENCH_OFFLOAD_MAX_REPS 100
#define BENCH_OFFLOAD_MAX_LOOPS 8      /* members of --loop */
#define BENCH_OFFLOAD_MAX_TENSORS 64   /* tensors of one loop */

/* One oversubscribed loop of offload's family: tensors visited in order
 * through a device that holds dev of them, each visit prefetching the
 * next `prefetch`. */
struct bench_loop {
    int tensors, dev, prefetch;
};

struct bench_offload_opts {
    const char *config; /* --config: appended to the scenario's keys */
    const char *dir;    /* --dir; NULL: $TMPDIR unless tmpfs, or /var/tmp */
    size_t size;        /* --size; 0: the default */
    size_t budget;      /* --budget; 0: size / 2 */
    int reps;           /* --reps; 0: the default */
    bool host_moves; /* --moves host: device<->host only, no NVMe */
    /* --loop: 0 the default family, -1 none, else the members given */
    int nloops;
    struct bench_loop loops[BENCH_OFFLOAD_MAX_LOOPS];
    bool json;
};

/* umpool-bench replay. */
#define BENCH_REPLAY_MAX_CAPS 16
struct bench_replay_opts {
    const char *trace;
    const char *config; /* --config: appended to the scenario's keys */
    struct {
        size_t bytes;  /* a capacity, or 0: ... */
        double times;  /* ... this multiple of the trace's peak live */
    } caps[BENCH_REPLAY_MAX_CAPS];
    int ncap;
    bool json;
};

/* umpool-bench coll. */
#define BENCH_COLL_CONFIG                                                      \
    "backend:sim,sim_topology:dgx-h200,sim_device_mem:4G"
struct bench_coll_opts {
    const char *config;      /* --config: the pool */
    const char *comm_config; /* --algo A, --schedule S: "coll_algo:A,..." */
    const char *algo, *schedule;
    char comm_buf[96];
    int coll, dtype, op, root, ranks, iters;
    size_t min_bytes, max_bytes, factor;
    bool mpi_only; /* --mpi-only: under mpirun, the plain MPI baseline only */
    bool json;
};
/* The index of s among the collectives ("coll"), types ("type") or
 * reductions ("op") by nccl-tests' names; -1 when none. */
int bench_coll_lookup(const char *s, const char *kind);

/* The command line. */
struct bench_opts {
    bool json;
    const char *config; /* NULL: the scenario's default */
    const char *scenario;
    size_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    bool sizes_set; /* --sizes given: no backend-dependent default */
    int threads;
    uint64_t iters;
    bool alloc_opts; /* an alloc-only option was given */
    struct bench_offload_opts off;
    bool offload_opts; /* an offload-only option was given */
    bool loop_opt;     /* --loop or --moves was given (offload's alone) */
    struct bench_replay_opts replay;
    bool replay_opts; /* --capacity was given */
    struct bench_coll_opts coll;
    bool coll_opts; /* a coll option was given */
    const char *coll_name; /* coll's positional argument */
};

/* The scenarios: 0, or 1 on failure (messages printed). */

/* umpool-bench alloc (alloc.c); argv: to run again when jemalloc needs
 * more static TLS. */
int bench_alloc(const struct bench_opts *o, char **argv);

/* umpool-bench demo (demo.c). */
int bench_demo(const struct bench_opts *o);

/* umpool-bench placement [--json] (placement.c): topologies and policies,
 * comma-separated lists; NULL: all of them. */
int bench_placement(const char *topologies, const char *policies, bool json);

/* umpool-bench offload (offload.c). */
int bench_offload(const struct bench_offload_opts *o);

/* umpool-bench coll [NAME] (coll.c). */
int bench_coll(const struct bench_coll_opts *o);

/* umpool-bench replay TRACE (replay.c). */
int bench_replay(const struct bench_replay_opts *o);
/* preload.c */
int bench_preload(const struct bench_opts *o);
/* plugin.c: the PyTorch and CuPy entry points beside ump_alloc+ump_free. */
int bench_plugin(const struct bench_opts *o);
/* resilience.c: checkpoint, restore, suspend, resume beside the raw disk
 * and the pool's own moves (--config, --dir, --size, --reps of off). */
int bench_resilience(const struct bench_offload_opts *o);
/* ipc.c: an allocation opened by a peer process (--config, --sizes,
 * --iters), and the peer itself (argv: ipc-peer CONFIG ROUNDS IN OUT). */
int bench_ipc(const struct bench_opts *o);
int bench_ipc_peer(int argc, char **argv);
/* share.c: a pool shared with a peer process (--config, --sizes, --iters):
 * its attach, and its allocations opened here; the peer itself (argv:
 * share-peer NAME CONFIG ROUNDS IN OUT). */
int bench_share(const struct bench_opts *o);
int bench_share_peer(int argc, char **argv);

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Writes size in binary units: "256 B", "64 KiB", "1.5 GiB". */
static inline const char *fmt_size(size_t size, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    size_t unit = 1;

    while (u + 1 < sizeof(units) / sizeof(units[0]) && size >= unit * 1024) {
        unit *= 1024;
        u++;
    }
    if (size % unit == 0)
        snprintf(buf, len, "%zu %s", size / unit, units[u]);
    else
        snprintf(buf, len, "%.2f %s", (double)size / (double)unit, units[u]);
    return buf;
}

static inline void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Sorts v in place; n > 0. */
static inline double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
