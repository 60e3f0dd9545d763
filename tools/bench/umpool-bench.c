/*
 * umpool-bench: timings and a narrated demo, on the public API only. This
 * file parses the command line and hands it to the scenario, one file each:
 *
 *   alloc  alloc+free latency of a cached size: ump_alloc/ump_free next to
 *          glibc malloc/free and jemalloc mallocx/dallocx, 1 and N threads;
 *          on the cuda backend also next to cudaMalloc/cudaFree and
 *          cudaMallocAsync/cudaFreeAsync, and the cold first allocation of
 *          each size next to the raw driver VMM sequence (alloc.c, its
 *          output in alloc_report.c).
 *   demo   a short narrated tour of a simulated 8-GPU node: placement, a
 *          tensor spanning GPUs, stitching, statistics, trim (demo.c).
 *   placement  each policy on each simulated machine: where a synthetic
 *          multi-GPU workload lands and its modeled bandwidth
 *          (placement.c).
 *   offload  the tiers: spill and restore throughput next to raw copies
 *          and disk I/O of the same run, and an oversubscribed loop
 *          (offload.c; its baselines in offload_base.c, its output in
 *          offload_report.c).
 *   replay  an allocation trace through the pool: peak reserved against
 *          peak live, chunks, modeled driver time, latencies (replay.c).
 *
 * The CUDA runtime and driver that alloc's and offload's baselines use are
 * loaded at run time by cuda_loader.c.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "umpool.h"

#define EXIT_USAGE 2
#define MAX_THREADS 256

static void usage(FILE *f)
{
    fprintf(f,
            "usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
            "       umpool-bench --help\n"
            "\n"
            "scenarios:\n"
            "  alloc   alloc+free latency of a cached size: ump_alloc/\n"
            "          ump_free, glibc malloc/free and jemalloc mallocx/\n"
            "          dallocx (loaded with dlopen), with 1 and N threads\n"
            "          on the cuda backend also cudaMalloc/cudaFree and\n"
            "          cudaMallocAsync/cudaFreeAsync (libcudart, dlopen), and\n"
            "          the first allocation after ump_trim next to raw\n"
            "          cuMemCreate+cuMemMap+cuMemSetAccess (libcuda, dlopen)\n"
            "    --sizes LIST   comma-separated sizes, K/M/G suffixes\n"
            "                   (default 256,64K,1M,64M; on cuda also 1G)\n"
            "    --threads N    threads of the second run (default 2)\n"
            "    --iters N      timed pairs per thread and cell (default %d)\n"
            "  demo    narrated run over a simulated 8-GPU node\n"
            "  placement  each placement policy on each simulated machine:\n"
            "          a synthetic workload's spread over the devices and its\n"
            "          modeled read bandwidth\n"
            "  offload the host and NVMe tiers: spill and restore throughput\n"
            "          device<->host and host<->NVMe next to raw baselines of\n"
            "          the same run (memcpy on sim, paced to the H200 model's\n"
            "          pinned cuMemcpy with sim_driver_costs:h200-timed;\n"
            "          pinned cuMemcpy on cuda; fio when in PATH, else\n"
            "          io_uring with O_DIRECT), and a\n"
            "          family of oversubscribed loops over offloadable\n"
            "          tensors, each against Belady's fewest moves\n"
            "    --dir DIR      spill directory (default $TMPDIR unless it is\n"
            "                   tmpfs, else /var/tmp)\n"
            "    --size BYTES   bytes per transfer, a multiple of 1M, min 4M\n"
            "                   (default 256M; 1G with backend:cuda)\n"
            "    --budget BYTES the loops' device budget (default --size / 2,\n"
            "                   min 8M): tensors of budget / max(D, 4)\n"
            "    --reps N       repetitions; medians are shown (default 5)\n"
            "    --moves WHICH  all (default), or host: device<->host only\n"
            "    --loop SPEC    the loops: family (default), none, or\n"
            "                   N:D:P[,N:D:P...]: N tensors, a device of D\n"
            "                   of them, prefetch depth P (12:4:2 is the\n"
            "                   family's first, the loop of earlier versions)\n"
            "  preload interposed cuMemAlloc+cuMemFree (libumpool-preload) beside\n"
            "          ump_alloc+ump_free and the driver's own pair, same run\n"
            "          (backend cuda; --iters: pairs per batch)\n"
            "  plugin  the PyTorch and CuPy entry points (umpool_torch_alloc+\n"
            "          free on a stream, umpool_cupy_malloc+free) beside\n"
            "          ump_alloc+ump_free, same run (--iters: pairs per batch)\n"
            "  ipc     one allocation used by another process (ump_ipc_*):\n"
            "          the handle, the open and close in a peer process, and\n"
            "          its copy from the imported memory beside the same\n"
            "          copy from the peer's own (--sizes, default 2M,16M,64M,\n"
            "          256M; --iters rounds, default 20, at most 80)\n"
            "  share   a pool shared with a peer process (ump_pool_share,\n"
            "          ump_pool_attach): its attach beside an unshared\n"
            "          pool's create, then its allocations opened here at\n"
            "          the peer's address, per chunk, and their copy beside\n"
            "          the same copy of this process's own memory (--sizes,\n"
            "          --iters as ipc); last, an allreduce between the two\n"
            "          processes (8 B to 2 MiB) through the shared pool\n"
            "          beside the way of processes that share no pool\n"
            "          (coll_schedule:hierarchical over their pipes)\n"
            "  resilience  checkpoint and restore of --size (default 2G) over\n"
            "          4 devices (sim, or --config backend:cuda,\n"
            "          cuda_virtual_devices:4) beside a raw disk write and\n"
            "          read in --dir,\n"
            "          suspend and resume beside the pool's own moves\n"
            "          (ump_evict, ump_acquire); --reps rounds (default 3)\n"
            "  coll [NAME]  nccl-tests' table for one collective (allreduce,\n"
            "          broadcast, reduce, allgather, reduce_scatter, alltoall,\n"
            "          gather, scatter) on every device of the pool: time,\n"
            "          algBw, busBw, #wrong, the algorithm, the cost\n"
            "          model's time and a copy baseline (GPU time and\n"
            "          device copies on cuda)\n"
            "    -b, -e SIZE    smallest and largest size (default 8, 64M)\n"
            "    -f N           size factor (default 2)\n"
            "    -d TYPE        float (default), half, bfloat16, double,\n"
            "                   int8, uint8, int32, uint32, int64, uint64\n"
            "    -o OP          sum (default), prod, max, min, avg\n"
            "    -r ROOT        root of the rooted ones (default 0)\n"
            "    -n N           timed calls per size, averaged (default 5)\n"
            "    --ranks N      the first N devices (default all)\n"
            "    --algo NAME    force oneshot, twoshot, ring, tree or direct\n"
            "          (pool default: \"%s\")\n"
            "    --schedule S   under mpirun: force flat or hierarchical\n"
            "                   (allreduce across processes)\n"
            "    --mpi-only     under mpirun: plain MPI alone (one buffer per\n"
            "                   process), no umpool communicator\n"
            "          Under mpirun (umpool built with MPI): every process's\n"
            "          devices are ranks of one communicator\n"
            "          (ump_comm_create_mpi); rank 0 prints the table, with\n"
            "          plain MPI_Allreduce/Allgather/Alltoall among the\n"
            "          processes on the same buffers (one per process) as\n"
            "          the baseline column; --ranks N: N ranks per process;\n"
            "          with share:NAME in --config the processes share one\n"
            "          pool and the calls go through its addresses\n"
            "          (algorithm 'shared'; --schedule: umpool's MPI path)\n"
            "  replay TRACE  replays an allocation trace (lines 'a ID BYTES'\n"
            "          and 'f ID'; scripts/gen-train-trace writes one) on one\n"
            "          simulated device with sim_driver_costs:h200: peak\n"
            "          reserved / peak live, chunks created, modeled driver\n"
            "          time, alloc and free latency percentiles\n"
            "    --capacity LIST  device capacities, comma-separated: sizes\n"
            "                   (K/M/G/T) or multiples of the trace's peak\n"
            "                   live like 1.02x (default 141G)\n"
            "\n"
            "options:\n"
            "  --json         one JSON object on stdout instead of text\n"
            "  --config STR   pool configuration \"key:value,...\"\n"
            "                 (alloc: \"%s\",\n"
            "                  demo: \"%s\";\n"
            "                  offload: appended to its own keys)\n"
            "  --help         this text\n"
            "\n"
            "exit status: 0 ok, 1 failure, 2 usage error\n",
            BENCH_ALLOC_ITERS, BENCH_COLL_CONFIG, BENCH_ALLOC_CONFIG,
            BENCH_DEMO_CONFIG);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    fputs("usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
          "scenarios: alloc, demo, placement, offload, replay, coll, preload, "
          "plugin, ipc, share, resilience; see "
          "umpool-bench "
          "--help\n",
          stderr);
}

/* Parses a decimal count; false on junk, sign, or overflow. */
static bool parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *v_p = v;
    return true;
}

/* Parses "256", "64K", "1M", "2GiB" (binary units). */
static bool parse_size(const char *s, size_t *size_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return false;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v == 0 || v > (SIZE_MAX >> shift))
        return false;
    *size_p = (size_t)v << shift;
    return true;
}

/* Calls item(tok, i, ctx) for each of the comma-separated items of list,
 * at most max of them; the count, or -1 when an item is refused, there are
 * too many or none, or the list is too long. */
static int parse_list(const char *list, int max,
                      bool (*item)(const char *tok, int i, void *ctx),
                      void *ctx)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    if (strlen(list) >= sizeof(buf))
        return -1;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max || !item(tok, n, ctx))
            return -1;
        n++;
    }
    return n ? n : -1;
}

static bool size_item(const char *tok, int i, void *ctx)
{
    return parse_size(tok, &((struct bench_opts *)ctx)->sizes[i]);
}

static bool parse_sizes(const char *list, struct bench_opts *o)
{
    int n = parse_list(list, BENCH_MAX_SIZES, size_item, o);
    if (n < 0)
        return false;
    o->nsizes = n;
    return true;
}

/* replay's --capacity item: a size or a multiple of the peak ("1.02x"). */
static bool capacity_item(const char *tok, int i, void *ctx)
{
    struct bench_replay_opts *r = ctx;
    size_t len = strlen(tok);
    r->caps[i].bytes = 0;
    r->caps[i].times = 0;
    if (len > 1 && tok[len - 1] == 'x') {
        char *end;
        errno = 0;
        double t = strtod(tok, &end);
        if (errno || end != tok + len - 1 || !(t >= 0.5 && t <= 1000))
            return false;
        r->caps[i].times = t;
        return true;
    }
    return parse_size(tok, &r->caps[i].bytes);
}

static bool parse_capacities(const char *list, struct bench_replay_opts *r)
{
    int n = parse_list(list, BENCH_REPLAY_MAX_CAPS, capacity_item, r);
    if (n < 0)
        return false;
    r->ncap = n;
    return true;
}

/* One of coll's options into co; 0, or -EINVAL after printing why. */
static int parse_coll_opt(const char *name, const char *val,
                          struct bench_coll_opts *co)
{
    uint64_t v;
    size_t sz;
    int i;
    switch (name[1] == '-' ? name[2] : name[1]) {
    case 'b':
    case 'e':
        if (!parse_size(val, &sz)) {
            usage_error("bad %s '%s' (a size like 8, 64K, 256M)", name, val);
            return -EINVAL;
        }
        if (name[1] == 'b')
            co->min_bytes = sz;
        else
            co->max_bytes = sz;
        return 0;
    case 'f':
    case 'n':
        if (!parse_u64(val, &v) || v < (name[1] == 'f' ? 2u : 1u) ||
            v > 1000) {
            usage_error("bad %s '%s' (%s)", name, val,
                        name[1] == 'f' ? "2..1000" : "1..1000");
            return -EINVAL;
        }
        if (name[1] == 'f')
            co->factor = (size_t)v;
        else
            co->iters = (int)v;
        return 0;
    case 'd':
    case 'o':
        i = bench_coll_lookup(val, name[1] == 'd' ? "type" : "op");
        if (i < 0) {
            usage_error("bad %s '%s' (%s)", name, val,
                        name[1] == 'd' ? "int8, uint8, int32, uint32, int64, "
                                         "uint64, half, float, double, "
                                         "bfloat16"
                                       : "sum, prod, max, min, avg");
            return -EINVAL;
        }
        if (name[1] == 'd')
            co->dtype = i;
        else
            co->op = i;
        return 0;
    case 'r':
        if (!parse_u64(val, &v) || v > 63) {
            usage_error("bad %s '%s' (0..63)", name, val);
            return -EINVAL;
        }
        if (!strcmp(name, "-r"))
            co->root = (int)v;
        else
            co->ranks = (int)v;
        return 0;
    default: /* --algo, --schedule: the communicator's configuration */
        if (!*val || strchr(val, ',') || strlen(val) > 32) {
            usage_error("bad %s '%s'", name, val);
            return -EINVAL;
        }
        if (name[2] == 'a')
            co->algo = val;
        else
            co->schedule = val;
        snprintf(co->comm_buf, sizeof(co->comm_buf), "%s%s%s%s%s",
                 co->algo ? "coll_algo:" : "", co->algo ? co->algo : "",
                 co->algo && co->schedule ? "," : "",
                 co->schedule ? "coll_schedule:" : "",
                 co->schedule ? co->schedule : "");
        co->comm_config = co->comm_buf;
        return 0;
    }
}

/* offload's --loop: "family", "none", or members N:D:P separated by ','
 * (N tensors, a device of D of them, prefetch depth P). false when it is
 * none of those. */
static bool parse_loops(const char *val, struct bench_offload_opts *off)
{
    int n = 0;

    if (!strcmp(val, "family")) {
        off->nloops = 0;
        return true;
    }
    if (!strcmp(val, "none")) {
        off->nloops = -1;
        return true;
    }
    for (const char *p = val;; p++) {
        struct bench_loop l;
        int used = 0;

        if (n == BENCH_OFFLOAD_MAX_LOOPS ||
            sscanf(p, "%d:%d:%d%n", &l.tensors, &l.dev, &l.prefetch,
                   &used) != 3 || !used || (p[used] && p[used] != ','))
            return false;
        /* Fewer slots than tensors (else nothing moves), and no prefetch
         * wrapping round to the visit's own tensor. */
        if (l.tensors < 2 || l.tensors > BENCH_OFFLOAD_MAX_TENSORS ||
            l.dev < 1 || l.dev >= l.tensors || l.prefetch < 0 ||
            l.prefetch >= l.tensors)
            return false;
        off->loops[n++] = l;
        p += used;
        if (!*p)
            break;
    }
    off->nloops = n;
    return true;
}

/* One of offload's options into off; 0, or -EINVAL after printing why. */
static int parse_offload_opt(const char *name, const char *val,
                             struct bench_offload_opts *off)
{
    if (!strcmp(name, "--moves")) {
        if (strcmp(val, "all") && strcmp(val, "host")) {
            usage_error("bad --moves '%s' (all, or host: device<->host "
                        "only)", val);
            return -EINVAL;
        }
        off->host_moves = !strcmp(val, "host");
    } else if (!strcmp(name, "--loop")) {
        if (!parse_loops(val, off)) {
            usage_error("bad --loop '%s' (family, none, or up to %d of "
                        "N:D:P, ',' between: N tensors (2..%d), a device "
                        "of D < N of them, prefetch depth P < N)", val,
                        BENCH_OFFLOAD_MAX_LOOPS, BENCH_OFFLOAD_MAX_TENSORS);
            return -EINVAL;
        }
    } else if (!strcmp(name, "--dir")) {
        /* ',' would end the value inside the pool's config string. */
        if (!*val || strchr(val, ',')) {
            usage_error("bad --dir '%s' (a directory, without ',')", val);
            return -EINVAL;
        }
        off->dir = val;
    } else if (!strcmp(name, "--size")) {
        if (!parse_size(val, &off->size) ||
            off->size < BENCH_OFFLOAD_MIN_SIZE || off->size % MiB) {
            usage_error("bad --size '%s' (a multiple of 1M, at least %zuM)",
                        val, BENCH_OFFLOAD_MIN_SIZE / MiB);
            return -EINVAL;
        }
    } else if (!strcmp(name, "--budget")) {
        if (!parse_size(val, &off->budget) ||
            off->budget < BENCH_OFFLOAD_MIN_BUDGET) {
            usage_error("bad --budget '%s' (at least %zuM)", val,
                        BENCH_OFFLOAD_MIN_BUDGET / MiB);
            return -EINVAL;
        }
    } else {
        uint64_t v;

        if (!parse_u64(val, &v) || v < 1 || v > BENCH_OFFLOAD_MAX_REPS) {
            usage_error("bad --reps '%s' (1..%d)", val,
                        BENCH_OFFLOAD_MAX_REPS);
            return -EINVAL;
        }
        off->reps = (int)v;
    }
    return 0;
}

/* 0 on success, EXIT_USAGE after printing why, -1 after --help. */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    static const size_t default_sizes[] = {256, 64 * KiB, 1 * MiB, 64 * MiB};

    memset(o, 0, sizeof(*o));
    o->threads = 2;
    o->iters = BENCH_ALLOC_ITERS;
    o->coll.min_bytes = 8;
    o->coll.max_bytes = 64 * MiB;
    o->coll.factor = 2;
    o->coll.dtype = UMP_FLOAT32;
    o->coll.op = UMP_SUM;
    o->nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
    memcpy(o->sizes, default_sizes, sizeof(default_sizes));

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        bool takes_value;

        if (a[0] != '-' || a[1] == '\0') {
            /* replay takes its trace file after the scenario's name. */
            if (o->scenario && !strcmp(o->scenario, "replay") &&
                !o->replay.trace) {
                o->replay.trace = a;
                continue;
            }
            if (o->scenario && !strcmp(o->scenario, "coll") &&
                !o->coll_name) {
                o->coll_name = a;
                continue;
            }
            if (o->scenario) {
                usage_error("unexpected argument '%s'", a);
                return EXIT_USAGE;
            }
            o->scenario = a;
            continue;
        }
        /* "--opt=value" and "--opt value" both work. */
        if (eq && (size_t)(eq - a) < sizeof(name)) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a);
        }
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(name, "--mpi-only")) {
            if (val) {
                usage_error("--mpi-only takes no value");
                return EXIT_USAGE;
            }
            o->coll.mpi_only = true;
            o->coll_opts = true;
            continue;
        }
        if (!strcmp(name, "--json")) {
            if (val) {
                usage_error("--json takes no value");
                return EXIT_USAGE;
            }
            o->json = true;
            continue;
        }
        takes_value = !strcmp(name, "--config") || !strcmp(name, "--sizes") ||
                      !strcmp(name, "--threads") || !strcmp(name, "--iters") ||
                      !strcmp(name, "--dir") || !strcmp(name, "--size") ||
                      !strcmp(name, "--budget") || !strcmp(name, "--reps") ||
                      !strcmp(name, "--loop") || !strcmp(name, "--moves") ||
                      !strcmp(name, "--capacity") || !strcmp(name, "-b") ||
                      !strcmp(name, "-e") || !strcmp(name, "-f") ||
                      !strcmp(name, "-d") || !strcmp(name, "-o") ||
                      !strcmp(name, "-r") || !strcmp(name, "-n") ||
                      !strcmp(name, "--ranks") || !strcmp(name, "--algo") ||
                      !strcmp(name, "--schedule");
        if (!takes_value) {
            usage_error("unknown option '%s'", a);
            return EXIT_USAGE;
        }
        if (!val) {
            if (i + 1 >= argc) {
                usage_error("%s needs a value", name);
                return EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (!strcmp(name, "--config")) {
            o->config = val;
        } else if (!strcmp(name, "--dir") || !strcmp(name, "--size") ||
                   !strcmp(name, "--budget") || !strcmp(name, "--reps") ||
                   !strcmp(name, "--loop") || !strcmp(name, "--moves")) {
            if (parse_offload_opt(name, val, &o->off))
                return EXIT_USAGE;
            o->offload_opts = true;
            o->loop_opt = o->loop_opt || !strcmp(name, "--loop") ||
                          !strcmp(name, "--moves");
        } else if (name[0] == '-' && name[1] != '-') { /* coll's */
            if (parse_coll_opt(name, val, &o->coll))
                return EXIT_USAGE;
            o->coll_opts = true;
        } else if (!strcmp(name, "--ranks") || !strcmp(name, "--algo") ||
                   !strcmp(name, "--schedule")) {
            if (parse_coll_opt(name, val, &o->coll))
                return EXIT_USAGE;
            o->coll_opts = true;
        } else if (!strcmp(name, "--capacity")) {
            if (!parse_capacities(val, &o->replay)) {
                usage_error("bad --capacity '%s' (sizes like 141G or "
                            "multiples of the peak like 1.02x, at most %d)",
                            val, BENCH_REPLAY_MAX_CAPS);
                return EXIT_USAGE;
            }
            o->replay_opts = true;
        } else if (!strcmp(name, "--sizes")) {
            if (!parse_sizes(val, o)) {
                usage_error("bad --sizes '%s' (sizes > 0 like 256,64K,1M, "
                            "at most %d)", val, BENCH_MAX_SIZES);
                return EXIT_USAGE;
            }
            o->sizes_set = true;
            o->alloc_opts = true;
        } else if (!strcmp(name, "--threads")) {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > MAX_THREADS) {
                usage_error("bad --threads '%s' (1..%d)", val, MAX_THREADS);
                return EXIT_USAGE;
            }
            o->threads = (int)v;
            o->alloc_opts = true;
        } else {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > (1ull << 32)) {
                usage_error("bad --iters '%s' (1..%llu)", val, 1ull << 32);
                return EXIT_USAGE;
            }
            o->iters = v;
            o->alloc_opts = true;
        }
    }
    if (!o->scenario) {
        usage_error("no scenario given");
        return EXIT_USAGE;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    /* ipc's and share's peer processes (ipc.c and share.c run them), not
     * scenarios of their own. */
    if (argc >= 2 && !strcmp(argv[1], "ipc-peer"))
        return bench_ipc_peer(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "share-peer"))
        return bench_share_peer(argc, argv);
    int rc = parse_args(argc, argv, &o);

    if (rc < 0)
        return 0;
    if (rc)
        return rc;
    if (o.offload_opts && strcmp(o.scenario, "offload") &&
        strcmp(o.scenario, "resilience")) {
        usage_error("--dir, --size, --budget, --reps, --moves and --loop "
                    "belong to offload (and --dir, --size and --reps to "
                    "resilience too)");
        return EXIT_USAGE;
    }
    if (o.loop_opt && strcmp(o.scenario, "offload")) {
        usage_error("--moves and --loop belong to offload");
        return EXIT_USAGE;
    }
    if (o.coll_opts && strcmp(o.scenario, "coll")) {
        usage_error("-b, -e, -f, -d, -o, -r, -n, --ranks, --algo, "
                    "--schedule and --mpi-only belong to coll");
        return EXIT_USAGE;
    }
    if (o.replay_opts && strcmp(o.scenario, "replay")) {
        usage_error("--capacity belongs to replay");
        return EXIT_USAGE;
    }
    if (!strcmp(o.scenario, "alloc"))
        rc = bench_alloc(&o, argv);
    else if (!strcmp(o.scenario, "demo")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        rc = bench_demo(&o);
    } else if (!strcmp(o.scenario, "placement")) {
        if (o.alloc_opts || o.config) {
            usage_error("placement takes only --json");
            return EXIT_USAGE;
        }
        rc = bench_placement(NULL, NULL, o.json);
    } else if (!strcmp(o.scenario, "offload")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        o.off.config = o.config;
        o.off.json = o.json;
        rc = bench_offload(&o.off);
    } else if (!strcmp(o.scenario, "coll")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        o.coll.coll = o.coll_name ? bench_coll_lookup(o.coll_name, "coll")
                                  : 0;
        if (o.coll.coll < 0) {
            usage_error("unknown collective '%s' (allreduce, broadcast, "
                        "reduce, allgather, reduce_scatter, alltoall, "
                        "gather, scatter)", o.coll_name);
            return EXIT_USAGE;
        }
        if (o.coll.max_bytes < o.coll.min_bytes) {
            usage_error("-e is below -b");
            return EXIT_USAGE;
        }
        o.coll.config = o.config;
        o.coll.json = o.json;
        rc = bench_coll(&o.coll);
    } else if (!strcmp(o.scenario, "preload")) {
        rc = bench_preload(&o);
    } else if (!strcmp(o.scenario, "plugin")) {
        rc = bench_plugin(&o);
    } else if (!strcmp(o.scenario, "ipc")) {
        rc = bench_ipc(&o);
    } else if (!strcmp(o.scenario, "share")) {
        rc = bench_share(&o);
    } else if (!strcmp(o.scenario, "resilience")) {
        if (o.alloc_opts || o.off.budget) {
            usage_error("resilience takes --config, --dir, --size, --reps");
            return EXIT_USAGE;
        }
        o.off.config = o.config;
        rc = bench_resilience(&o.off);
    } else if (!strcmp(o.scenario, "replay")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        if (!o.replay.trace) {
            usage_error("replay needs a trace file");
            return EXIT_USAGE;
        }
        if (!o.replay.ncap) { /* an H200's memory */
            o.replay.caps[0].bytes = (size_t)141 * GiB;
            o.replay.ncap = 1;
        }
        o.replay.config = o.config;
        o.replay.json = o.json;
        rc = bench_replay(&o.replay);
    } else {
        usage_error("unknown scenario '%s'", o.scenario);
        return EXIT_USAGE;
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "umpool-bench: writing output: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}

