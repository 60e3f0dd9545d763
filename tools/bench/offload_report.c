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

void offload_print_json(const struct off *x)
{
    const struct loop_res *l = &x->loop;
    bool lok = l->ideal_ok && l->ideal_s > 0;
    bool ook = l->opt_restores > 0;

    printf("{\"scenario\": \"offload\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, x->config);
    printf(", \"loop_config\": ");
    json_string(stdout, x->loop_config);
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
    for (int d = 0; d < X_COUNT; d++) {
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
        json_num(xfers[d].target, xfers[d].target > 0, 2);
        if (!x->base_ok[d]) {
            printf(", \"reason\": ");
            json_string(stdout, base_why(x, (enum xfer)d));
        }
        printf("}");
    }
    printf("\n], \"loop\": {\"device_capacity\": %zu, \"tensors\": %d, "
           "\"tensor_size\": %zu, \"rounds\": %d, \"prefetch_depth\": %d, "
           "\"wall_s\": %.4f, \"untimed_round_s\": %.4f, \"in_acquire_s\": "
           "%.4f, \"in_prefetch_s\": %.4f, \"spill_bytes\": %" PRIu64
           ", \"restore_bytes\": %" PRIu64
           ", \"evictions\": %" PRIu64 ", \"touch_gbs\": %.3f, "
           "\"touch_s\": %.4f, \"raw_d2h_gbs\": ",
           l->capacity, l->tensors, l->tensor, l->rounds, LOOP_PREFETCH,
           l->wall_s, l->first_s, l->acquire_s, l->prefetch_s, l->spill_bytes,
           l->restore_bytes,
           l->evictions, l->touch_gbs, l->touch_s);
    json_num(l->d2h_gbs, l->ideal_ok, 3);
    printf(", \"raw_h2d_gbs\": ");
    json_num(l->h2d_gbs, l->ideal_ok, 3);
    printf(", \"device_tensors\": %d, \"restores_per_round\": %.3f, "
           "\"optimal_restores_per_round\": ", l->dev_tensors,
           l->restores / l->rounds);
    json_num((double)l->opt_restores / l->rounds, l->opt_restores >= 0, 3);
    printf(", \"floor_restores_per_round\": ");
    json_num((double)l->floor_restores / l->rounds, l->floor_restores >= 0,
             3);
    printf(", \"restores_ratio\": ");
    json_num(l->restores / (double)l->opt_restores, ook, 3);
    printf(", \"restores_target\": %.2f, \"pool_moves_s\": ",
           TARGET_RESTORES);
    json_num(l->pool_moves_s, l->ideal_ok, 4);
    printf(", \"transfer_s\": ");
    json_num(l->transfer_s, l->ideal_ok, 4);
    printf(", \"ideal_s\": ");
    json_num(l->ideal_s, lok, 4);
    printf(", \"ratio\": ");
    json_num(l->wall_s / l->ideal_s, lok, 3);
    printf(", \"ideal_is_lower_bound\": %s, \"target\": %.2f}}\n",
           l->nvme_used ? "true" : "false", TARGET_LOOP);
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

void offload_print_table(const struct off *x)
{
    const struct loop_res *l = &x->loop;
    char a[32], b[32];

    print_header(x);
    printf("%-12s | %-33s | %8s | %-10s %8s | %8s | %s\n", "direction",
           "umpool call", "ump GB/s", "baseline", "GB/s", "ump/base",
           "target");
    for (int d = 0; d < X_COUNT; d++) {
        bool ok = x->base_ok[d];
        double ratio = ok ? x->ump_gbs[d] / x->base_gbs[d] : 0;

        printf("%-12s | %-33s | %8.3f | %-10s", xfers[d].label,
               xfers[d].call, x->ump_gbs[d], base_label(x, (enum xfer)d));
        if (ok)
            printf(" %8.3f | %8.3f |", x->base_gbs[d], ratio);
        else
            printf(" %8s | %8s |", "n/a", "n/a");
        if (xfers[d].target > 0)
            printf(" >= %.2f%s\n", xfers[d].target,
                   !ok ? "" : ratio >= xfers[d].target ? " ok" : " below");
        else
            printf(" -\n");
    }
    pace_note(x);
    printf("\n(b) oversubscribed loop: %d offloadable tensors of %s (%.1fx "
           "the device's %s), %d rounds\n  after an untimed one; in order: "
           "ump_prefetch of the next %d, ump_acquire, check,\n  "
           "ump_memset_async, ump_release\n",
           l->tensors, fmt_size(l->tensor, a, sizeof(a)),
           (double)l->tensor * l->tensors / (double)l->capacity,
           fmt_size(l->capacity, b, sizeof(b)), l->rounds, LOOP_PREFETCH);
    printf("  pool config \"%s\"\n", x->loop_config);
    printf("  wall time        %8.3f s  (in ump_acquire %.3f s, in ump_prefetch "
           "%.3f s; the untimed\n%32sround took %.3f s)\n", l->wall_s,
           l->acquire_s, l->prefetch_s, "", l->first_s);
    printf("  moved            %s down, %s up (spill_bytes, restore_bytes); "
           "%" PRIu64 " evictions\n",
           fmt_size(l->spill_bytes, a, sizeof(a)),
           fmt_size(l->restore_bytes, b, sizeof(b)), l->evictions);
    printf("  restores/round   %8.2f    ", l->restores / l->rounds);
    if (l->opt_restores > 0) {
        double ratio = l->restores / (double)l->opt_restores;

        printf("optimum %.2f (Belady's rule on the calls in order, a\n"
               "%32sdevice of %d tensors, from its best contents): %.3f x\n"
               "%32s(target <= %.2f%s); acquires alone %.2f: no policy\n"
               "%32smoves less, however late it prefetches\n",
               (double)l->opt_restores / l->rounds, "", l->dev_tensors,
               ratio, "", TARGET_RESTORES,
               ratio <= TARGET_RESTORES ? " ok" : " above",
               (double)l->floor_restores / l->rounds, "");
    } else {
        printf("optimum %s\n", l->opt_restores ? "n/a" : "0: no restore "
               "needed");
    }
    if (l->ideal_ok) {
        printf("  at raw bandwidth %8.3f s  (the optimum's moves, %ld tensors "
               "each way; %s of one\n%32stensor, medians of %d, half before "
               "the rounds, half\n%32safter: device->host %.2f GB/s, "
               "host->device %.2f GB/s)\n", l->transfer_s, l->opt_restores,
               x->copy.name, "", LOOP_BASE_REPS, "", l->d2h_gbs, l->h2d_gbs);
        printf("  the pool's moves %8.3f s  (at the same rates)\n",
               l->pool_moves_s);
    } else {
        printf("  at raw bandwidth      n/a  (%s)\n", l->why);
    }
    printf("  touches alone    %8.3f s  (ump_memset_async at %.2f GB/s on a "
           "resident tensor)\n", l->touch_s, l->touch_gbs);
    if (l->ideal_ok && l->ideal_s > 0) {
        double ratio = l->wall_s / l->ideal_s;

        printf("  ideal            %8.3f s  (the longer of the two%s)\n",
               l->ideal_s, l->nvme_used ? "; a lower bound: some data went "
               "to NVMe" : "");
        printf("  without overlap  %8.3f s  (transfers, then touches)\n",
               l->transfer_s + l->touch_s);
        printf("  wall / ideal     %8.3f    (target <= %.2f%s)\n", ratio,
               TARGET_LOOP, ratio <= TARGET_LOOP ? " ok" : " above");
    } else {
        printf("  wall / ideal          n/a\n");
    }
}

