/*
 * umpool-bench alloc: its results on stdout, a table or one JSON object
 * (--json): the latency cells, the CUDA baselines, the cold column.
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "bench.h"
#include "umpool.h"


static void print_num_or_na(double v, bool ok, int width, int prec)
{
    if (ok)
        printf(" %*.*f", width, prec, v);
    else
        printf(" %*s", width, "n/a");
}

/* A cell's median (in width) and p99 columns, then the separator. */
static void print_med_p99(const struct cell *c, int width)
{
    print_num_or_na(c->med_ns, c->valid, width, 1);
    print_num_or_na(c->p99_ns, c->valid, 10, 1);
    printf(" |");
}

/* a's median over b's, or n/a. */
static void print_ratio(const struct cell *a, const struct cell *b, int width)
{
    if (a->valid && b->valid && b->med_ns > 0)
        printf(" %#*.3g", width, a->med_ns / b->med_ns);
    else
        printf(" %*s", width, "n/a");
}

static void json_ratio(double num, double den, bool ok)
{
    if (ok && den > 0)
        printf("%.3g", num / den);
    else
        printf("null");
}

static void json_cell(const struct cell *c, const struct cell *one)
{
    if (!c->valid) {
        printf("null");
        return;
    }
    printf("{\"median_ns\": %.1f, \"p99_ns\": %.1f, \"mpairs_per_s\": %.3f, "
           "\"pairs\": %" PRIu64 ", \"batches\": %zu, \"batch_pairs\": %"
           PRIu64 ", \"capped\": %s",
           c->med_ns, c->p99_ns, c->mpairs_s, c->pairs, c->batches,
           c->batch_pairs, c->capped ? "true" : "false");
    if (one && one->valid && one->mpairs_s > 0)
        printf(", \"scaling\": %.2f", c->mpairs_s / one->mpairs_s);
    printf("}");
}

static void json_reason(const char *why)
{
    printf(", \"reason\": ");
    json_string(stdout, why);
}

static void json_cold(const struct bench_ctx *ctx, const struct cold_row *cold,
                      int ncold)
{
    printf(", \"cold\": {\"repeats\": %d, \"method\": \"ump: ump_trim, then "
           "one ump_alloc timed; raw_vmm: cuMemCreate + cuMemMap + "
           "cuMemSetAccess of the size rounded to the granularity on a "
           "reserved range (on the timed sim: the H200 model's costs of "
           "those three calls for that one handle, each waited for like "
           "the sim's own); medians\", \"raw_vmm\": {\"available\": %s",
           COLD_REPEATS, raw_vmm_shown(&ctx->vmm) ? "true" : "false");
    if (raw_vmm_shown(&ctx->vmm)) {
        printf(", \"granularity\": %zu", ctx->vmm.gran);
        if (ctx->vmm.pace)
            printf(", \"modeled\": \"h200-timed\", \"time_scale\": %u",
                   ctx->vmm.pace);
    } else {
        json_reason(ctx->vmm.why);
    }
    printf("}, \"results\": [");
    for (int i = 0; i < ncold; i++) {
        const struct cold_row *c = &cold[i];

        printf("%s\n  {\"size\": %zu, \"ump_median_ns\": ", i ? "," : "",
               c->size);
        if (c->ump_ok)
            printf("%.1f", c->ump_ns);
        else
            printf("null");
        printf(", \"raw_vmm_median_ns\": ");
        if (c->raw_ok)
            printf("%.1f, \"raw_vmm_bytes\": %zu", c->raw_ns, c->raw_bytes);
        else
            printf("null, \"raw_vmm_bytes\": null");
        printf(", \"ump_over_raw_vmm\": ");
        json_ratio(c->ump_ns, c->raw_ns, c->ump_ok && c->raw_ok);
        printf(", \"ump_driver_ns\": ");
        if (c->ump_ok)
            printf("%.1f", c->ump_drv_ns);
        else
            printf("null");
        printf(", \"h200_model_ns\": %.1f, \"ump_driver_over_model\": ",
               c->model_ns);
        json_ratio(c->ump_drv_ns, c->model_ns, c->ump_ok);
        printf("}");
    }
    printf("\n]}");
}

void alloc_print_json(const struct bench_opts *o, const char *config,
                             const struct bench_ctx *ctx,
                             const struct alloc_row *rows, int nrows,
                             const struct cold_row *cold, int ncold)
{
    printf("{\"scenario\": \"alloc\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, config);
    printf(", \"backend\": ");
    json_string(stdout, ump_backend_name(ctx->pool));
    printf(", \"method\": {\"warmup_pairs\": %d, \"warmup_max_s\": %.2f, "
           "\"batch_pairs\": %d, \"batch_max_s\": %.3f, \"iters\": %" PRIu64
           ", \"cell_max_s\": %.1f, \"clock\": \"CLOCK_MONOTONIC\", "
           "\"stats\": \"median and p99 of ns per pair over batches\"}",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, BATCH_PAIRS,
           (double)BATCH_MAX_NS / 1e9, o->iters, (double)CELL_MAX_NS / 1e9);
    printf(", \"threads\": %d, \"jemalloc\": {\"available\": %s",
           o->threads, ctx->je_handle ? "true" : "false");
    if (!ctx->je_handle) {
        json_reason(ctx->je_why);
    } else if (getenv(REEXEC_ENV)) {
        printf(", \"glibc_tunables\": \"" TLS_TUNABLE "\"");
    }
    printf("}");
    if (ctx->cuda_cols) {
        printf(", \"cuda_runtime\": {\"available\": %s",
               ctx->rt.handle ? "true" : "false");
        if (ctx->rt.handle) {
            printf(", \"library\": ");
            json_string(stdout, ctx->rt.lib);
            printf(", \"version\": %d, \"device\": 0, "
                   "\"mempool_release_threshold\": \"UINT64_MAX\"",
                   ctx->rt.version);
        } else {
            json_reason(ctx->rt.why);
        }
        printf("}");
    }
    printf(", \"results\": [");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct alloc_row *one = row->threads > 1 ? &rows[r - 1] : NULL;
        const struct cell *u = &row->cell[A_UMP];

        printf("%s\n  {\"size\": %zu, \"threads\": %d", r ? "," : "",
               row->size, row->threads);
        for (int k = 0; k < ctx->nkinds; k++) {
            printf(", \"%s\": ", alloc_kind_name[k]);
            json_cell(&row->cell[k], one ? &one->cell[k] : NULL);
        }
        for (int k = A_JEMALLOC; k < ctx->nkinds; k++) {
            const struct cell *c = &row->cell[k];

            printf(", \"ump_over_%s\": ", alloc_kind_name[k]);
            json_ratio(u->med_ns, c->med_ns, u->valid && c->valid);
        }
        printf("}");
    }
    printf("\n]");
    json_cold(ctx, cold, ncold);
    printf("}\n");
}

/* The CUDA baselines of the same run, next to ump's median. */
static void print_cuda_table(const struct bench_ctx *ctx,
                             const struct alloc_row *rows, int nrows)
{
    const struct cuda_rt *rt = &ctx->rt;
    char sz[32];

    if (rt->handle)
        printf("\nCUDA baselines on device 0, from %s (runtime %d.%d): "
               "cudaMalloc/cudaFree, and\ncudaMallocAsync/cudaFreeAsync on "
               "one stream per thread from the device's default\nmempool, "
               "its release threshold at UINT64_MAX (freed memory is kept)"
               "\n", rt->lib, rt->version / 1000, rt->version % 1000 / 10);
    else
        printf("\nCUDA baselines: n/a (%s)\n", rt->why);
    printf("%10s %3s | %10s | %14s %10s | %15s %10s | %14s %10s\n", "size",
           "thr", "ump med", "cudaMalloc med", "p99", "cudaMallocAsync",
           "p99", "ump/cudaMalloc", "ump/async");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct cell *u = &row->cell[A_UMP];
        const struct cell *m = &row->cell[A_CUDA_MALLOC];
        const struct cell *a = &row->cell[A_CUDA_ASYNC];

        printf("%10s %3d |", fmt_size(row->size, sz, sizeof(sz)),
               row->threads);
        print_num_or_na(u->med_ns, u->valid, 10, 1);
        printf(" |");
        print_med_p99(m, 14);
        print_med_p99(a, 15);
        print_ratio(u, m, 14);
        print_ratio(u, a, 10);
        printf("\n");
    }
}

static void print_cold_table(const struct bench_ctx *ctx,
                             const struct cold_row *cold, int ncold)
{
    char sz[32], gran[32];

    printf("\ncold: the first allocation of a size with nothing cached "
           "(ump_trim, then one\nump_alloc timed), median of %d", COLD_REPEATS);
    if (ctx->vmm.pace)
        printf("; raw VMM (modeled): the H200's cuMemCreate +\ncuMemMap + "
               "cuMemSetAccess of one handle of the size rounded up to %s\n"
               "(lib/topo/drivercost.c), each call waiting for its cost "
               "times sim_time_scale %u\nas the sim's own calls do, median "
               "of %d\n",
               fmt_size(ctx->vmm.gran, gran, sizeof(gran)), ctx->vmm.pace,
               COLD_REPEATS);
    else if (ctx->vmm.handle)
        printf("; raw VMM: cuMemCreate + cuMemMap + cuMemSetAccess\nof the "
               "size rounded up to %s on a range reserved beforehand, "
               "median of %d\n", fmt_size(ctx->vmm.gran, gran, sizeof(gran)),
               COLD_REPEATS);
    else
        printf("; raw VMM: n/a (%s)\n", ctx->vmm.why);
    printf("driver time: ump_stats' driver_ns of the cold ump_alloc (modeled "
           "on sim with\nsim_driver_costs:h200, measured on cuda), next to "
           "the H200's measured cost of\ncuMemCreate + cuMemMap + "
           "cuMemSetAccess for one handle of the size (DESIGN.md)\n");
    printf("%10s | %12s | %12s %10s | %8s | %10s %10s %8s\n", "size",
           "ump cold us", "raw VMM us", "raw bytes", "ump/raw", "ump drv us",
           "H200 us", "drv/H200");
    for (int i = 0; i < ncold; i++) {
        const struct cold_row *c = &cold[i];

        printf("%10s |", fmt_size(c->size, sz, sizeof(sz)));
        print_num_or_na(c->ump_ns / 1e3, c->ump_ok, 12, 1);
        printf(" |");
        print_num_or_na(c->raw_ns / 1e3, c->raw_ok, 12, 1);
        if (c->raw_ok)
            printf(" %10s |", fmt_size(c->raw_bytes, sz, sizeof(sz)));
        else
            printf(" %10s |", "n/a");
        if (c->ump_ok && c->raw_ok && c->raw_ns > 0)
            printf(" %#8.3g |", c->ump_ns / c->raw_ns);
        else
            printf(" %8s |", "n/a");
        print_num_or_na(c->ump_drv_ns / 1e3, c->ump_ok, 11, 1);
        printf(" %10.1f", c->model_ns / 1e3);
        if (c->ump_ok && c->model_ns > 0)
            printf(" %#8.3g\n", c->ump_drv_ns / c->model_ns);
        else
            printf(" %8s\n", "n/a");
    }
}

void alloc_print_table(const struct bench_opts *o, const char *config,
                              const struct bench_ctx *ctx,
                              const struct alloc_row *rows, int nrows,
                              const struct cold_row *cold, int ncold)
{
    char sz[32];
    bool capped = false, multi = o->threads > 1;

    printf("umpool-bench alloc (umpool %s): pool config \"%s\", backend %s\n",
           ump_version_string(), config, ump_backend_name(ctx->pool));
    printf("method: per cell and thread, %d warm-up pairs (at most %.2f s), "
           "then %" PRIu64 " alloc+free\n"
           "  pairs timed in batches of %d with "
           "clock_gettime(CLOCK_MONOTONIC), at most %.1f s per cell\n"
           "  (smaller batches when a pair is slow, so that a batch lasts "
           "about %.0f ms);\n"
           "  ns per pair = batch time / pairs in the batch; median and p99 "
           "over batches;\n"
           "  N threads: each runs the same loop, all start together, their "
           "batches pooled;\n"
           "  the allocations are not touched (the allocator alone is "
           "timed).\n",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, o->iters, BATCH_PAIRS,
           (double)CELL_MAX_NS / 1e9, (double)BATCH_MAX_NS / 1e6);
    if (ctx->je_handle)
        printf("jemalloc: mallocx/dallocx from libjemalloc.so.2 (dlopen%s)\n",
               getenv(REEXEC_ENV) ? ", GLIBC_TUNABLES=" TLS_TUNABLE : "");
    else
        printf("jemalloc: n/a (%s)\n", ctx->je_why);

    printf("\nlatency, ns per alloc+free pair\n");
    printf("%10s %3s | %10s %10s | %10s %10s | %12s %10s | %12s\n", "size",
           "thr", "ump med", "p99", "malloc med", "p99", "jemalloc med", "p99",
           "ump/jemalloc");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct cell *u = &row->cell[A_UMP], *m = &row->cell[A_MALLOC];
        const struct cell *j = &row->cell[A_JEMALLOC];

        printf("%10s %3d |", fmt_size(row->size, sz, sizeof(sz)),
               row->threads);
        print_med_p99(u, 10);
        print_med_p99(m, 10);
        print_med_p99(j, 12);
        print_ratio(u, j, 12);
        printf("\n");
        for (int k = 0; k < ctx->nkinds; k++)
            capped |= row->cell[k].capped;
    }
    if (ctx->cuda_cols)
        print_cuda_table(ctx, rows, nrows);

    printf("\nthroughput, M pairs/s (all threads)");
    if (multi)
        printf("; scaling = %d-thread / 1-thread", o->threads);
    printf("\n%10s |", "size");
    for (int k = 0; k < ctx->nkinds; k++) {
        printf(" %8s 1T", alloc_kind_name[k]);
        if (multi)
            printf(" %6dT %7s", o->threads, "scaling");
        printf(" |");
    }
    printf("\n");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *one = &rows[r];
        const struct alloc_row *many = multi ? &rows[r + 1] : NULL;

        if (one->threads != 1)
            continue;
        printf("%10s |", fmt_size(one->size, sz, sizeof(sz)));
        for (int k = 0; k < ctx->nkinds; k++) {
            const struct cell *c1 = &one->cell[k];
            const struct cell *cn = many ? &many->cell[k] : NULL;
            bool ok = c1->valid && cn && cn->valid && c1->mpairs_s > 0;
            int w = (int)strlen(alloc_kind_name[k]) + 3;

            print_num_or_na(c1->mpairs_s, c1->valid, w < 11 ? 11 : w, 3);
            if (multi) {
                print_num_or_na(cn->mpairs_s, cn->valid, 7, 3);
                print_num_or_na(ok ? cn->mpairs_s / c1->mpairs_s : 0, ok, 7,
                                2);
            }
            printf(" |");
        }
        printf("\n");
    }
    print_cold_table(ctx, cold, ncold);
    if (capped)
        printf("\nnote: some cells hit the %.1f s limit before %" PRIu64
               " pairs per thread;\n      --json shows the pairs timed.\n",
               (double)CELL_MAX_NS / 1e9, o->iters);
}
