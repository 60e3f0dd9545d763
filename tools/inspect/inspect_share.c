/*
 * A pool shared by processes (ump_pool_share), as umpool-inspect shows
 * it: the pool's name and its processes with the device memory each
 * holds, from the pool's ledger (the snapshot's share table). Every
 * process of the pool publishes the same table, from its own view.
 */
#include "config.h"

#include <inttypes.h>

#include "inspect_fmt.h"

void fmt_show_share(FILE *out, const struct snap_view *v)
{
    const struct snap_data *d = v->data;
    char s[FMT_SIZE_LEN];
    if (!d->share_name[0])
        return;
    fprintf(out, "\nSHARED POOL %s: %" PRIu32 " process%s\n%-10s %4s %12s\n",
            d->share_name, d->share_nproc, d->share_nproc == 1 ? "" : "es",
            "PID", "SLOT", "DEVICE MEM");
    for (uint32_t i = 0; i < d->share_nproc; i++) {
        const struct snap_share_proc *p = &d->share_proc[i];
        fprintf(out, "%-10" PRId32 " %4" PRIu32 " %12s%s\n", p->pid, p->slot,
                fmt_size(s, p->bytes),
                (int32_t)i == d->share_self ? "  (this one)"
                : p->slot == 0              ? "  (the sharer)"
                                            : "");
    }
}

void fmt_json_share(FILE *out, const struct snap_view *v)
{
    const struct snap_data *d = v->data;
    fprintf(out, "      \"share\": {\"name\": ");
    fmt_json_string(out, d->share_name);
    fprintf(out, ", \"processes\": [");
    for (uint32_t i = 0; i < d->share_nproc; i++) {
        const struct snap_share_proc *p = &d->share_proc[i];
        fprintf(out, "%s\n        {\"pid\": %" PRId32 ", \"slot\": %" PRIu32
                ", \"device_bytes\": %" PRIu64 ", \"self\": %s}",
                i ? "," : "", p->pid, p->slot, p->bytes,
                (int32_t)i == d->share_self ? "true" : "false");
    }
    fprintf(out, "%s]}", d->share_nproc ? "\n      " : "");
}

void fmt_prometheus_share(FILE *out, const struct fmt_pool *pools, size_t n)
{
    prom_family(out, "umpool_share_process_device_bytes", "gauge",
                "Device memory a process of a shared pool holds, all "
                "devices, from the pool's ledger (labels: the process and "
                "its slot; 0 is the sharer).");
    for (size_t i = 0; i < n; i++) {
        const struct snap_data *d = pools[i].v->data;
        for (uint32_t k = 0; k < d->share_nproc; k++) {
            fprintf(out, "umpool_share_process_device_bytes{");
            prom_pool_labels(out, pools[i].v);
            fprintf(out, ",process=\"%" PRId32 "\",slot=\"%" PRIu32 "\"}",
                    d->share_proc[k].pid, d->share_proc[k].slot);
            prom_number(out, d->share_proc[k].bytes, false);
        }
    }
}
