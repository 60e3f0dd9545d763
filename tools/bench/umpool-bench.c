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
            "          the same run (memcpy on sim, pinned cuMemcpy on cuda;\n"
            "          fio when in PATH, else io_uring with O_DIRECT), and a\n"
            "          loop over offloadable tensors 3x the device budget\n"
            "    --dir DIR      spill directory (default $TMPDIR unless it is\n"
            "                   tmpfs, else /var/tmp)\n"
            "    --size BYTES   bytes per transfer, a multiple of 1M, min 4M\n"
            "                   (default 256M; 1G with backend:cuda)\n"
            "    --budget BYTES the loop's device budget (default --size / 2,\n"
            "                   min 8M)\n"
            "    --reps N       repetitions; medians are shown (default 5)\n"
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
            BENCH_ALLOC_ITERS, BENCH_ALLOC_CONFIG, BENCH_DEMO_CONFIG);
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
          "scenarios: alloc, demo, placement, offload, replay; see "
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

static bool parse_sizes(const char *list, struct bench_opts *o)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    if (strlen(list) >= sizeof(buf))
        return false;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == BENCH_MAX_SIZES || !parse_size(tok, &o->sizes[n]))
            return false;
        n++;
    }
    if (n == 0)
        return false;
    o->nsizes = n;
    return true;
}

/* replay's --capacity: sizes or multiples of the peak ("1.02x"). */
static bool parse_capacities(const char *list, struct bench_replay_opts *r)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    if (strlen(list) >= sizeof(buf))
        return false;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(tok);
        if (n == BENCH_REPLAY_MAX_CAPS)
            return false;
        r->caps[n].bytes = 0;
        r->caps[n].times = 0;
        if (len > 1 && tok[len - 1] == 'x') {
            char *end;
            errno = 0;
            double t = strtod(tok, &end);
            if (errno || end != tok + len - 1 || !(t >= 0.5 && t <= 1000))
                return false;
            r->caps[n].times = t;
        } else if (!parse_size(tok, &r->caps[n].bytes)) {
            return false;
        }
        n++;
    }
    if (n == 0)
        return false;
    r->ncap = n;
    return true;
}

/* One of offload's options into off; 0, or -EINVAL after printing why. */
static int parse_offload_opt(const char *name, const char *val,
                             struct bench_offload_opts *off)
{
    if (!strcmp(name, "--dir")) {
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
                      !strcmp(name, "--capacity");
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
                   !strcmp(name, "--budget") || !strcmp(name, "--reps")) {
            if (parse_offload_opt(name, val, &o->off))
                return EXIT_USAGE;
            o->offload_opts = true;
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
    int rc = parse_args(argc, argv, &o);

    if (rc < 0)
        return 0;
    if (rc)
        return rc;
    if (o.offload_opts && strcmp(o.scenario, "offload")) {
        usage_error("--dir, --size, --budget and --reps belong to offload");
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

