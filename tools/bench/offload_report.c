/*
 * umpool-bench offload: its results on stdout, a table or one JSON object
 * (--json): the moves next to their baselines, and the loop against its
 * ideal (the fewest moves any policy needs: offload_opt.c) and its
 * restores against that optimum's.
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench.h"
#include "offload.h"
#include "topo/drivercost.h"
#include "umpool.h"

/* The moves of (a), in the order of the table. */
static const struct xfer_desc xfers[X_COUNT] = {
    {"device_to_host", "device->host", "ump_evict(UMP_TIER_HOST)",
     TARGET_XFER},
    {"host_to_device", "host->device", "ump_acquire", TARGET_XFER},
    {"host_to_nvme", "host->NVMe", "ump_evict(UMP_TIER_NVME)", TARGET_XFER},
    {"nvme_to_host", "NVMe->host", "ump_prefetch(UMP_LOC_HOST) + wait",
     TARGET_XFER},
    {"device_to_nvme", "device->NVMe", "ump_evict(UMP_TIER_NVME)", 0},
    {"nvme_to_device", "NVMe->device", "ump_acquire", 0},
};

/* Move d's target at the run's size: issue 29's for the device<->host
 * moves (0.90 of the pinned copy at 1 GiB and more, 0.80 below: a move of
 * 64 MiB pays its driver calls over fewer bytes), issue 5's for the
 * rest. */
static double xfer_target(const struct off *x, int d)
{
    if ((d == X_D2H || d == X_H2D) && x->size < ((size_t)1 << 30))
        return TARGET_XFER_SMALL;
    return xfers[d].target;
}

/* ---- output ------------------------------------------------------------- */

static const char *base_label(const struct off *x, enum xfer d)
{
    switch (d) {
    case X_D2H:
    case X_H2D:
        return x->copy.name;
    case X_H2N:
    case X_N2H:
        return disk_name(&x->disk);
    default:
        return "slower leg";
    }
}

static const char *base_why(const struct off *x, enum xfer d)
{
    if (d == X_D2H || d == X_H2D)
        return x->copy.why;
    if (d == X_H2N || d == X_N2H)
        return x->disk.why;
    return !x->copy.ok ? x->copy.why : x->disk.why;
}

static void json_num(double v, bool ok, int prec)
{
    if (ok)
        printf("%.*f", prec, v);
    else
        printf("null");
}

/* One member of (b) as a JSON object. */
static void json_loop(const struct off *x, const struct loop_res *l)
{
    struct loop_verdict v;

    loop_judge(l, &v);
    printf("{\"spec\": \"%d:%d:%d\", \"tensors\": %d, \"prefetch_depth\": %d, "
           "\"config\": ", l->spec.tensors, l->spec.dev, l->spec.prefetch,
           l->spec.tensors, l->spec.prefetch);
    json_string(stdout, l->config);
    printf(", \"device_capacity\": %zu, \"tensor_size\": %zu, \"rounds\": %d, "
           "\"warm_rounds\": %d, \"wall_s\": %.6f, \"untimed_s\": %.4f, "
           "\"in_acquire_s\": %.4f, \"in_prefetch_s\": %.4f, \"spill_bytes\": %" PRIu64
           ", \"restore_bytes\": %" PRIu64 ", \"evictions\": %" PRIu64
           ", \"touch_gbs\": %.3f, \"touch_s\": %.4f, \"raw_d2h_gbs\": ",
           l->capacity, l->tensor, l->rounds, LOOP_WARM_ROUNDS, l->wall_s,
           l->first_s,
           l->acquire_s, l->prefetch_s, l->spill_bytes, l->restore_bytes,
           l->evictions, l->touch_gbs, l->touch_s);
    json_num(l->d2h_gbs, l->ideal_ok, 3);
    printf(", \"raw_h2d_gbs\": ");
    json_num(l->h2d_gbs, l->ideal_ok, 3);
    printf(", \"raw_baseline\": ");
    json_string(stdout, x->copy.name);
    printf(", \"device_tensors\": %d, \"restores_per_round\": %.3f, "
           "\"optimal_restores_per_round\": ", l->dev_tensors,
           l->restores / l->rounds);
    json_num(l->opt_per_round, l->opt_per_round >= 0, 3);
    printf(", \"floor_restores_per_round\": ");
    json_num(l->floor_per_round, l->floor_per_round >= 0, 3);
    printf(", \"window_restores_per_round\": ");
    json_num(l->window_per_round, l->window_per_round >= 0, 3);
    printf(", \"restores_ratio\": ");
    json_num(v.restores_ratio, v.restores_known, 3);
    printf(", \"restores_ok\": ");
    if (v.restores_known)
        printf("%s", v.restores_ok ? "true" : "false");
    else
        printf("null");
    printf(", \"pool_moves_s\": ");
    json_num(l->pool_moves_s, l->ideal_ok, 4);
    printf(", \"transfer_s\": ");
    json_num(l->transfer_s, l->ideal_ok, 6);
    printf(", \"ideal_s\": ");
    json_num(l->ideal_s, v.wall_known, 6);
    printf(", \"ratio\": ");
    json_num(v.wall_ratio, v.wall_known, 3);
    printf(", \"ok\": ");
    if (v.wall_known)
        printf("%s", v.wall_ok ? "true" : "false");
    else
        printf("null");
    if (!l->ideal_ok) {
        printf(", \"reason\": ");
        json_string(stdout, l->why);
    }
    printf(", \"ideal_is_lower_bound\": %s}", l->nvme_used ? "true" : "false");
}

void offload_print_json(const struct off *x)
{
    printf("{\"scenario\": \"offload\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, x->config);
    printf(", \"backend\": ");
    json_string(stdout, x->backend);
    /* 0: the device<->host baseline is not paced to the H200 model */
    printf(", \"baseline_paced_scale\": %u, \"baseline_model_gbs\": ",
           x->copy.pace);
    json_num(copy_model_gbs(&x->copy), x->copy.pace > 0, 3);
    printf(", \"size\": %zu, \"reps\": %d, \"spill_dir\": {\"path\": ",
           x->size, x->reps);
    json_string(stdout, x->dir.path);
    printf(", \"tmpfs\": %s, \"o_direct\": %s, \"io_uring\": %s, "
           "\"nvme_engine_expected\": ", x->dir.tmpfs ? "true" : "false",
           x->dir.direct ? "true" : "false", x->dir.uring ? "true" : "false");
    json_string(stdout, x->engine);
    if (x->dir.why[0]) {
        printf(", \"reason\": ");
        json_string(stdout, x->dir.why);
    }
    printf("}, \"method\": \"medians over reps; GB/s = size / time; each "
           "baseline runs next to the move it is compared with, before it in "
           "even reps and after it in odd ones\", \"transfers\": [");
    for (int d = 0; d < x->nmoves; d++) {
        printf("%s\n  {\"direction\": \"%s\", \"call\": ", d ? "," : "",
               xfers[d].key);
        json_string(stdout, xfers[d].call);
        printf(", \"ump_gbs\": %.3f, \"baseline\": ", x->ump_gbs[d]);
        json_string(stdout, base_label(x, (enum xfer)d));
        printf(", \"baseline_gbs\": ");
        json_num(x->base_gbs[d], x->base_ok[d], 3);
        printf(", \"ratio\": ");
        json_num(x->ump_gbs[d] / x->base_gbs[d], x->base_ok[d], 3);
        printf(", \"target\": ");
        json_num(xfer_target(x, d), xfer_target(x, d) > 0, 2);
        if (!x->base_ok[d]) {
            printf(", \"reason\": ");
            json_string(stdout, base_why(x, (enum xfer)d));
        }
        printf("}");
    }
    printf("\n], \"loop_budget\": %zu, \"loop_targets\": {\"restores_ratio\": "
           "%.2f, \"ratio\": %.2f}, \"loops\": [", x->budget,
           TARGET_RESTORES, TARGET_LOOP);
    for (int m = 0; m < x->nloops; m++) {
        printf("%s\n  ", m ? "," : "");
        json_loop(x, &x->loop[m]);
    }
    printf("\n]}\n");
}

static void print_header(const struct off *x)
{
    char sz[32];

    printf("umpool-bench offload (umpool %s): backend %s, pool config\n  "
           "\"%s\"\n", ump_version_string(), x->backend, x->config);
    printf("spill directory %s%s: O_DIRECT %s, io_uring %s; NVMe engine "
           "expected: %s\n", x->dir.path,
           x->dir.tmpfs ? " (tmpfs: memory, not a disk)" : "",
           x->dir.direct ? "works" : "refused",
           x->dir.uring ? "works" : "not usable", x->engine);
    if (x->dir.why[0])
        printf("  (%s; the library logs \"nvme: using the pread/pwrite "
               "thread engine\" at log_level info)\n", x->dir.why);
    if (x->dir.tmpdir_skipped)
        printf("  ($TMPDIR is tmpfs, memory rather than a disk: not "
               "used)\n");
    printf("\n(a) moves of one offloadable %s allocation on device 0, "
           "median of %d; GB/s = bytes / time\n",
           fmt_size(x->size, sz, sizeof(sz)), x->reps);
    if (x->nmoves == X_COUNT)
        printf("  NVMe->host: ump_prefetch(UMP_LOC_HOST), then ump_ptr_info "
               "polled every %ld us until no chunk is on NVMe\n",
               POLL_NS / 1000);
    if (!x->copy.ok)
        printf("  device<->host baseline: n/a (%s)\n", x->copy.why);
    else if (x->copy.cuda)
        printf("  device<->host baseline: cuMemcpyDtoH / cuMemcpyHtoD "
               "between device 0 and pinned memory\n  (cuMemAlloc, "
               "cuMemAllocHost)\n");
    else if (x->copy.pace)
        printf("  device<->host baseline: memcpy between two prefaulted "
               "buffers, paced to the H200 model's\n  pinned cuMemcpy "
               "(%.1f GB/s, %.1f us latency and sync; lib/topo/drivercost.c)"
               "\n  times sim_time_scale %u, as the sim's own costs\n",
               drvcost_h200.pinned_gbs,
               (double)(drvcost_h200.copy_lat_ns + drvcost_h200.copy_gap_ns +
                        drvcost_h200.sync_ns) / 1e3, x->copy.pace);
    else
        printf("  device<->host baseline: memcpy between two prefaulted "
               "buffers (what the sim backend's\n  copies do)\n");
    if (x->nmoves < X_COUNT) { /* --moves host */
        printf("\n");
        return;
    }
    if (x->disk.kind == DISK_FIO)
        printf("  host<->NVMe baseline: %s --ioengine=io_uring --direct=1 "
               "--bs=1M --iodepth=32 in the spill directory\n", x->disk.fio);
    else if (x->disk.kind == DISK_URING)
        printf("  host<->NVMe baseline: fio is not in PATH; our io_uring "
               "loop on an O_DIRECT file in the spill\n  directory, 1 MiB "
               "blocks, queue depth 32\n");
    if (!x->disk.ok)
        printf("  host<->NVMe baseline: n/a (%s)\n", x->disk.why);
    printf("  device<->NVMe baseline: the slower leg of the two raw moves "
           "(a perfect pipeline)\n\n");
}

/* A paced baseline below the model's rate: this machine's memcpy, not the
 * model, set it, and the ratios are not the model's. */
static void pace_note(const struct off *x)
{
    double model = copy_model_gbs(&x->copy);
    double slow = x->base_gbs[X_D2H] < x->base_gbs[X_H2D] ? x->base_gbs[X_D2H]
                                                          : x->base_gbs[X_H2D];

    if (!x->copy.ok || !model || slow >= 0.95 * model)
        return;
    printf("  note: the paced copies ran at %.3f GB/s, below the model's "
           "%.3f: this machine's\n  memcpy is slower than the modeled link "
           "at sim_time_scale %u; raise it for ratios\n  comparable to an "
           "H200's\n", slow, model, x->copy.pace);
}

/* A ratio and its verdict, padded to a column of 12 characters unless it
 * ends the line. */
static void print_ratio(double ratio, bool known, bool ok, bool last)
{
    const char *v = !known ? "" : ok ? "ok" : "above";

    if (known)
        printf("%6.3f", ratio);
    else
        printf("%6s", "n/a");
    if (last)
        printf("%s%s", *v ? " " : "", v);
    else
        printf(" %-5s ", v);
}

/* (b): one row per member, then what they share. */
static void print_loops(const struct off *x)
{
    const struct loop_res *l0 = &x->loop[0];
    double dmin = 0, dmax = 0, hmin = 0, hmax = 0;
    int above = 0, unknown = 0;
    bool nvme = false;
    char a[32];

    printf("\n(b) oversubscribed loops, one a row: N offloadable tensors "
           "through a device of D of\n  them, each the largest power of two "
           "at most budget %s / max(D, %d, N / %d);\n  %d untimed rounds, "
           "then at least %d timed ones (and %d visits); each visit in "
           "order:\n  ump_prefetch of the next P, ump_acquire, check, "
           "ump_memset_async, ump_release.\n  Restores per round against "
           "Belady's optimum for those calls, the rate it sustains\n  (floor: "
           "the same for the acquires alone, which no policy beats); wall "
           "against\n  the ideal: the optimum's moves of the timed rounds each "
           "way at the raw rates of\n  one tensor's copy (medians of %d, half "
           "before the rounds, half after), or the\n  touches alone "
           "(ump_memset_async on a resident tensor) if longer\n",
           fmt_size(x->budget, a, sizeof(a)), LOOP_PER_BUDGET,
           LOOP_TIMES_BUDGET, LOOP_WARM_ROUNDS, LOOP_ROUNDS, LOOP_MIN_VISITS,
           LOOP_BASE_REPS);
    printf("  pool config of the first \"%s\"\n  (the others: device_mem, "
           "and host_limit, for their own tensors)\n\n", l0->config);
    printf("%-12s| %8s | %8s %7s %6s %-12s | %7s %8s %s\n", "loop N:D:P",
           "tensor", "restores", "Belady", "floor", " ratio", "wall s",
           "ideal s", " wall/ideal");
    for (int m = 0; m < x->nloops; m++) {
        const struct loop_res *l = &x->loop[m];
        struct loop_verdict v;
        char spec[32];

        loop_judge(l, &v);
        snprintf(spec, sizeof(spec), "loop %d:%d:%d", l->spec.tensors,
                 l->spec.dev, l->spec.prefetch);
        printf("%-12s| %8s | %8.2f ", spec, fmt_size(l->tensor, a, sizeof(a)),
               l->restores / l->rounds);
        if (l->opt_per_round >= 0)
            printf("%7.2f %6.2f ", l->opt_per_round, l->floor_per_round);
        else
            printf("%7s %6s ", "n/a", "n/a");
        print_ratio(v.restores_ratio, v.restores_known, v.restores_ok, false);
        printf("| %7.3f ", l->wall_s);
        if (v.wall_known)
            printf("%8.3f%s", l->ideal_s, l->nvme_used ? "*" : " ");
        else
            printf("%8s ", "n/a");
        print_ratio(v.wall_ratio, v.wall_known, v.wall_ok, true);
        printf("\n");
        above += (v.restores_known && !v.restores_ok) +
                 (v.wall_known && !v.wall_ok);
        unknown += !v.restores_known + !v.wall_known;
        nvme = nvme || l->nvme_used;
        if (!l->ideal_ok)
            continue;
        if (!dmax || l->d2h_gbs < dmin)
            dmin = l->d2h_gbs;
        if (!hmax || l->h2d_gbs < hmin)
            hmin = l->h2d_gbs;
        dmax = l->d2h_gbs > dmax ? l->d2h_gbs : dmax;
        hmax = l->h2d_gbs > hmax ? l->h2d_gbs : hmax;
    }
    printf("  targets: restores <= %.2fx Belady's, wall <= %.2fx the ideal; "
           "%d above, %d n/a\n", TARGET_RESTORES, TARGET_LOOP, above,
           unknown);
    if (dmax > 0)
        printf("  raw copies of one tensor (%s): device->host %.2f-%.2f "
               "GB/s, host->device\n  %.2f-%.2f GB/s\n", x->copy.name, dmin,
               dmax, hmin, hmax);
    for (int m = 0; m < x->nloops; m++)
        if (!x->loop[m].ideal_ok)
            printf("  loop %d:%d:%d: no ideal (%s)\n", x->loop[m].spec.tensors,
                   x->loop[m].spec.dev, x->loop[m].spec.prefetch,
                   x->loop[m].why);
    if (nvme)
        printf("  * a lower bound: some data went to NVMe\n");
}

void offload_print_table(const struct off *x)
{
    print_header(x);
    printf("%-12s | %-33s | %8s | %-10s %8s | %8s | %s\n", "direction",
           "umpool call", "ump GB/s", "baseline", "GB/s", "ump/base",
           "target");
    for (int d = 0; d < x->nmoves; d++) {
        bool ok = x->base_ok[d];
        double ratio = ok ? x->ump_gbs[d] / x->base_gbs[d] : 0;

        printf("%-12s | %-33s | %8.3f | %-10s", xfers[d].label,
               xfers[d].call, x->ump_gbs[d], base_label(x, (enum xfer)d));
        if (ok)
            printf(" %8.3f | %8.3f |", x->base_gbs[d], ratio);
        else
            printf(" %8s | %8s |", "n/a", "n/a");
        double target = xfer_target(x, d);
        if (target > 0)
            printf(" >= %.2f%s\n", target,
                   !ok ? "" : ratio >= target ? " ok" : " below");
        else
            printf(" -\n");
    }
    if (x->nmoves < X_COUNT)
        printf("(--moves host: no move to or from NVMe)\n");
    pace_note(x);
    if (x->nloops)
        print_loops(x);
    else
        printf("\n(b) the loops: not run (--loop none)\n");
}
