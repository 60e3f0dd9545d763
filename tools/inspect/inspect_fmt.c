#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "inspect_fmt.h"
#include "umpool.h"

const char *fmt_size(char buf[FMT_SIZE_LEN], uint64_t bytes)
{
    static const char *const units[] = {"B",   "KiB", "MiB", "GiB",
                                        "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, FMT_SIZE_LEN, "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (v >= 1023.95 && u < 6) { /* would print as "1024.0" */
        v /= 1024.0;
        u++;
    }
    snprintf(buf, FMT_SIZE_LEN, "%.1f %s", v, units[u]);
    return buf;
}

/* ---- figures shared by the formats ------------------------------------ */

/* A device figure: its JSON key, its Prometheus family (NULL: shown in
 * another family), and what it means. */
struct dev_field {
    const char *key;
    const char *metric;
    const char *help;
    size_t off;
    bool counter;
};

#define DEV_FIELD(f) offsetof(struct snap_device, f)
static const struct dev_field dev_fields[] = {
    {"capacity", "umpool_capacity_bytes",
     "Physical memory the device offers the pool.", DEV_FIELD(capacity), false},
    {"live_bytes", "umpool_live_bytes",
     "Live allocations, rounded to their size class.", DEV_FIELD(live_bytes),
     false},
    {"mapped_bytes", "umpool_mapped_bytes",
     "Physical memory mapped in the pool's addresses.",
     DEV_FIELD(mapped_bytes), false},
    {"cached_bytes", "umpool_cached_bytes",
     "Memory held for reuse: what ump_trim gives back.",
     DEV_FIELD(cached_bytes), false},
    {"peak_bytes", "umpool_peak_bytes", "High-water mark of memory in use.",
     DEV_FIELD(peak_bytes), false},
    {"reserved_bytes", "umpool_reserved_bytes",
     "Physical memory held from the driver: chunks created and not "
     "released, mapped or idle.", DEV_FIELD(reserved_bytes), false},
    {"peak_reserved_bytes", "umpool_peak_reserved_bytes",
     "High-water mark of reserved memory.", DEV_FIELD(peak_reserved_bytes),
     false},
    {"largest_free", "umpool_largest_free_bytes",
     "Largest cached block: the biggest allocation served with no driver "
     "call.", DEV_FIELD(largest_free), false},
    {"live_count", "umpool_live_allocations", "Live allocations.",
     DEV_FIELD(live_count), false},
    {"alloc_count", "umpool_allocations_total", "Successful allocations.",
     DEV_FIELD(alloc_count), true},
    {"free_count", "umpool_frees_total", "Successful frees.",
     DEV_FIELD(free_count), true},
    {"chunks_created", "umpool_chunks_created_total",
     "Physical chunks created.", DEV_FIELD(chunks_created), true},
    {"chunks_released", "umpool_chunks_released_total",
     "Physical chunks given back to the device.", DEV_FIELD(chunks_released),
     true},
    {"driver_ns", "umpool_driver_seconds_total",
     "Driver time of virtual-memory calls on the device's chunks: modeled "
     "on sim (sim_driver_costs), 0 on cuda, which times the pool as a "
     "whole (umpool_pool_driver_seconds_total).", DEV_FIELD(driver_ns), true},
    {"failed", "umpool_device_failed",
     "1 when the device has failed (a lost GPU, an uncorrectable memory "
     "error): the pool places nothing there any more.", DEV_FIELD(failed),
     false},
    {"lost_count", "umpool_lost_allocations",
     "Live allocations whose bytes were lost with a failed device (every "
     "access is -EIO until they are freed).", DEV_FIELD(lost_count), false},
    {"lost_bytes", "umpool_lost_bytes",
     "Bytes of the lost allocations, rounded to their size class.",
     DEV_FIELD(lost_bytes), false},
    {"host_bytes", NULL, NULL, DEV_FIELD(host_bytes), false},
    {"nvme_bytes", NULL, NULL, DEV_FIELD(nvme_bytes), false},
    {"spill_count", "umpool_spills_total",
     "Chunk moves down a tier (device to host or NVMe, host to NVMe).",
     DEV_FIELD(spill_count), true},
    {"spill_bytes", "umpool_spilled_bytes_total", "Bytes moved down a tier.",
     DEV_FIELD(spill_bytes), true},
    {"restore_count", "umpool_restores_total", "Chunk moves up a tier.",
     DEV_FIELD(restore_count), true},
    {"restore_bytes", "umpool_restored_bytes_total", "Bytes moved up a tier.",
     DEV_FIELD(restore_bytes), true},
    {"evictions", "umpool_evictions_total",
     "Moves down the pool decided itself (watermarks, allocations that "
     "would not fit).", DEV_FIELD(evictions), true},
};

static uint64_t dev_get(const struct snap_device *d, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)d + off, sizeof(v));
    return v;
}

/* The sum of a figure over the devices; the pool's own peak. */
static uint64_t total(const struct snap_view *v, size_t off)
{
    if (off == DEV_FIELD(peak_bytes))
        return v->data->peak_bytes;
    if (off == DEV_FIELD(largest_free))
        return v->data->largest_free;
    if (off == DEV_FIELD(peak_reserved_bytes))
        return v->data->peak_reserved_bytes;
    if (off == DEV_FIELD(driver_ns)) /* cuda: not the devices' zeros */
        return v->data->driver_ns;
    uint64_t sum = 0;
    for (uint32_t d = 0; d < v->hdr->ndev; d++)
        sum += dev_get(&v->dev[d], off);
    return sum;
}

static const char *tier_label(int t)
{
    return t == SNAP_TIER_HOST ? "host" : "nvme";
}

static const struct {
    uint32_t bit;
    const char *name;
} flag_table[] = {{UMP_HINT_NO_SPILL, "no_spill"}, {UMP_HINT_OFFLOAD, "offload"}};

/* "no_spill,offload" (and any unknown bits in hex), or "-". */
static const char *flag_names(char *buf, size_t len, uint32_t flags)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(flag_table) && n < len; i++)
        if (flags & flag_table[i].bit) {
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "",
                                  flag_table[i].name);
            flags &= ~flag_table[i].bit;
        }
    if (flags && n < len)
        snprintf(buf + n, len - n, "%s0x%" PRIx32, n ? "," : "", flags);
    return buf[0] ? buf : "-";
}

/* The same as a JSON list; unknown bits as one hex string. */
static void json_flags(FILE *out, uint32_t flags)
{
    const char *sep = "";
    fputc('[', out);
    for (size_t i = 0; i < ARRAY_LEN(flag_table); i++)
        if (flags & flag_table[i].bit) {
            fprintf(out, "%s\"%s\"", sep, flag_table[i].name);
            flags &= ~flag_table[i].bit;
            sep = ", ";
        }
    if (flags)
        fprintf(out, "%s\"0x%" PRIx32 "\"", sep, flags);
    fputc(']', out);
}

/* ---- tables ------------------------------------------------------------ */

static void show_memory(FILE *out, const struct snap_view *v)
{
    char s[8][FMT_SIZE_LEN];
    int mw = 5;
    for (uint32_t d = 0; d < v->hdr->ndev; d++) {
        int len = (int)strlen(v->dev[d].model);
        if (len > mw)
            mw = len;
    }
    /* RESERVED before MAPPED: what the pool holds from the driver, then
     * the part of it mapped (the rest is idle chunks). */
    fprintf(out, "MEMORY\n%-4s %-*s %10s %10s %10s %10s %10s %10s %13s "
            "%12s %6s\n", "DEV", mw, "MODEL", "CAPACITY", "LIVE", "RESERVED",
            "MAPPED", "CACHED", "PEAK", "PEAK RESERVED", "LARGEST FREE",
            "FRAG");
    for (uint32_t d = 0; d < v->hdr->ndev; d++) {
        const struct snap_device *x = &v->dev[d];
        fprintf(out, "%-4" PRIu32 " %-*s %10s %10s %10s %10s %10s %10s %13s "
                "%12s %6.2f\n", d, mw, x->model[0] ? x->model : "-",
                fmt_size(s[0], x->capacity), fmt_size(s[1], x->live_bytes),
                fmt_size(s[2], x->reserved_bytes),
                fmt_size(s[3], x->mapped_bytes),
                fmt_size(s[4], x->cached_bytes), fmt_size(s[5], x->peak_bytes),
                fmt_size(s[6], x->peak_reserved_bytes),
                fmt_size(s[7], x->largest_free), x->fragmentation);
    }
    fprintf(out, "%-4s %-*s %10s %10s %10s %10s %10s %10s %13s %12s %6.2f\n",
            "all", mw, "", fmt_size(s[0], total(v, DEV_FIELD(capacity))),
            fmt_size(s[1], total(v, DEV_FIELD(live_bytes))),
            fmt_size(s[2], total(v, DEV_FIELD(reserved_bytes))),
            fmt_size(s[3], total(v, DEV_FIELD(mapped_bytes))),
            fmt_size(s[4], total(v, DEV_FIELD(cached_bytes))),
            fmt_size(s[5], v->data->peak_bytes),
            fmt_size(s[6], v->data->peak_reserved_bytes),
            fmt_size(s[7], v->data->largest_free), v->data->fragmentation);
}

/* A duration for people: "0", "850 ns", "12.3 us", "4.56 ms", "1.20 s". */
static const char *fmt_ns(char buf[FMT_SIZE_LEN], uint64_t ns)
{
    if (ns < 1000)
        snprintf(buf, FMT_SIZE_LEN, "%" PRIu64 "%s", ns, ns ? " ns" : "");
    else if (ns < 1000000)
        snprintf(buf, FMT_SIZE_LEN, "%.1f us", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, FMT_SIZE_LEN, "%.2f ms", (double)ns / 1e6);
    else
        snprintf(buf, FMT_SIZE_LEN, "%.2f s", (double)ns / 1e9);
    return buf;
}

static void show_counts(FILE *out, const struct snap_view *v)
{
    static const size_t offs[] = {DEV_FIELD(live_count), DEV_FIELD(alloc_count),
                                  DEV_FIELD(free_count),
                                  DEV_FIELD(chunks_created),
                                  DEV_FIELD(chunks_released)};
    char t[FMT_SIZE_LEN];
    /* The driver's time next to the chunks it made and freed. */
    fprintf(out, "\nALLOCATIONS\n%-4s %10s %12s %12s %12s %12s %12s\n", "DEV",
            "LIVE", "ALLOCS", "FREES", "CHUNKS MADE", "CHUNKS FREED",
            "DRIVER TIME");
    for (uint32_t d = 0; d <= v->hdr->ndev; d++) {
        if (d < v->hdr->ndev)
            fprintf(out, "%-4" PRIu32, d);
        else
            fprintf(out, "%-4s", "all");
        for (size_t i = 0; i < ARRAY_LEN(offs); i++) {
            uint64_t x = d < v->hdr->ndev ? dev_get(&v->dev[d], offs[i])
                                          : total(v, offs[i]);
            fprintf(out, " %*" PRIu64, i ? 12 : 10, x);
        }
        fprintf(out, " %12s\n",
                fmt_ns(t, d < v->hdr->ndev ? v->dev[d].driver_ns
                                           : total(v, DEV_FIELD(driver_ns))));
    }
}

/* Only when a device has failed: which, and what was lost with it. */
static void show_failed(FILE *out, const struct snap_view *v)
{
    char s[FMT_SIZE_LEN];
    if (!total(v, DEV_FIELD(failed)))
        return;
    fprintf(out, "\nFAILED DEVICES\n%-4s %10s %10s\n", "DEV", "LOST",
            "LOST BYTES");
    for (uint32_t d = 0; d < v->hdr->ndev; d++)
        if (v->dev[d].failed)
            fprintf(out, "%-4" PRIu32 " %10" PRIu64 " %10s\n", d,
                    v->dev[d].lost_count, fmt_size(s, v->dev[d].lost_bytes));
    /* Lost allocations count at their home device, which may work. */
    fprintf(out, "%-4s %10" PRIu64 " %10s\n", "all",
            total(v, DEV_FIELD(lost_count)),
            fmt_size(s, total(v, DEV_FIELD(lost_bytes))));
}

static void show_spills(FILE *out, const struct snap_view *v)
{
    char s[4][FMT_SIZE_LEN];
    fprintf(out, "\nTIERS BY DEVICE\n%-4s %10s %10s %8s %10s %8s %10s %9s\n",
            "DEV", "ON HOST", "ON NVME", "SPILLS", "SPILLED", "RESTORES",
            "RESTORED", "EVICTIONS");
    for (uint32_t d = 0; d <= v->hdr->ndev; d++) {
        struct snap_device x;
        if (d < v->hdr->ndev) {
            x = v->dev[d];
            fprintf(out, "%-4" PRIu32, d);
        } else {
            for (size_t i = 0; i < ARRAY_LEN(dev_fields); i++) {
                uint64_t t = total(v, dev_fields[i].off);
                memcpy((char *)&x + dev_fields[i].off, &t, sizeof(t));
            }
            fprintf(out, "%-4s", "all");
        }
        fprintf(out, " %10s %10s %8" PRIu64 " %10s %8" PRIu64 " %10s %9" PRIu64
                "\n", fmt_size(s[0], x.host_bytes), fmt_size(s[1], x.nvme_bytes),
                x.spill_count, fmt_size(s[2], x.spill_bytes), x.restore_count,
                fmt_size(s[3], x.restore_bytes), x.evictions);
    }
}

static void show_tiers(FILE *out, const struct snap_view *v)
{
    char s[4][FMT_SIZE_LEN];
    fprintf(out, "\nTIERS\n%-4s %10s %10s %10s %10s %8s\n", "TIER", "CAPACITY",
            "USED", "RESERVE", "PEAK", "CHUNKS");
    for (int t = 0; t < SNAP_NTIERS; t++) {
        const struct snap_tier *x = &v->data->tier[t];
        if (!x->present) {
            fprintf(out, "%-4s %10s\n", tier_label(t), "off");
            continue;
        }
        fprintf(out, "%-4s %10s %10s %10s %10s %8" PRIu64 "\n", tier_label(t),
                x->capacity ? fmt_size(s[0], x->capacity) : "disk",
                fmt_size(s[1], x->used_bytes), fmt_size(s[2], x->reserve_bytes),
                fmt_size(s[3], x->peak_bytes), x->chunks);
    }
}

static void show_largest(FILE *out, const struct snap_view *v)
{
    char s[FMT_SIZE_LEN], f[64];
    fprintf(out, "\nLARGEST ALLOCATIONS\n%3s  %-18s %10s %4s %7s %-6s %8s  %s\n",
            "#", "ADDRESS", "SIZE", "DEV", "DEVICES", "TIER", "AGE", "FLAGS");
    if (!v->data->nalloc)
        fprintf(out, "  (none above the slab sizes)\n");
    for (uint32_t i = 0; i < v->data->nalloc; i++) {
        const struct snap_alloc *a = &v->alloc[i];
        fprintf(out, "%3" PRIu32 "  0x%-16" PRIx64 " %10s %4" PRId32 " %7" PRId32
                " %-6s %6.1f s  %s\n", i + 1, a->addr, fmt_size(s, a->size),
                a->device, a->ndevices, snap_tier_name(a->tier), a->age_s,
                flag_names(f, sizeof(f), a->flags));
    }
}

void fmt_show(FILE *out, const struct fmt_pool *p)
{
    const struct snap_view *v = p->v;
    const struct snap_header *h = v->hdr;
    char cs[FMT_SIZE_LEN];
    fprintf(out, "pool %" PRIu64 " of pid %" PRId32 " (%s): backend %s, "
            "topology %s, %" PRIu32 " device%s, chunk %s, snapshot %" PRIu64
            "%s%s\n\n", h->pool_id, h->pid, h->program, h->backend,
            h->topology[0] ? h->topology : "-", h->ndev, h->ndev == 1 ? "" : "s",
            fmt_size(cs, v->data->chunk_size), v->data->generation,
            p->note ? ", " : "", p->note ? p->note : "");
    show_memory(out, v);
    show_counts(out, v);
    show_failed(out, v);
    fmt_show_share(out, v);
    show_spills(out, v);
    show_tiers(out, v);
    fmt_show_links(out, v);
    fmt_show_colls(out, v);
    show_largest(out, v);
}

/* ---- JSON -------------------------------------------------------------- */

void fmt_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c > 0x7e)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void json_pool(FILE *out, const struct snap_view *v)
{
    const struct snap_header *h = v->hdr;
    const struct snap_data *d = v->data;
    fprintf(out, "    {\n      \"pid\": %" PRId32 ",\n      \"pool\": %" PRIu64
            ",\n      \"program\": ", h->pid, h->pool_id);
    fmt_json_string(out, h->program);
    fprintf(out, ",\n      \"backend\": ");
    fmt_json_string(out, h->backend);
    fprintf(out, ",\n      \"topology\": ");
    fmt_json_string(out, h->topology);
    fprintf(out, ",\n      \"chunk_size\": %" PRIu64 ",\n      \"va_size\": %"
            PRIu64 ",\n      \"snapshot\": %" PRIu64 ",\n      "
            "\"created_unix_ns\": %" PRIu64 ",\n      \"updated_unix_ns\": %"
            PRIu64 ",\n      \"totals\": {", d->chunk_size, d->va_size,
            d->generation, h->created_ns, d->updated_ns);
    for (size_t i = 0; i < ARRAY_LEN(dev_fields); i++)
        fprintf(out, "%s\"%s\": %" PRIu64, i ? ", " : "", dev_fields[i].key,
                total(v, dev_fields[i].off));
    fprintf(out, ", \"fragmentation\": %.4f},\n      \"devices\": [\n",
            d->fragmentation);
    for (uint32_t i = 0; i < h->ndev; i++) {
        const struct snap_device *x = &v->dev[i];
        fprintf(out, "        {\"device\": %" PRIu32 ", \"model\": ", i);
        fmt_json_string(out, x->model);
        fprintf(out, ", \"pci_bus_id\": ");
        fmt_json_string(out, x->pci);
        fprintf(out, ", \"numa_node\": %" PRId32, x->numa);
        for (size_t k = 0; k < ARRAY_LEN(dev_fields); k++)
            fprintf(out, ", \"%s\": %" PRIu64, dev_fields[k].key,
                    dev_get(x, dev_fields[k].off));
        fprintf(out, ", \"fragmentation\": %.4f, \"memory\": {",
                x->fragmentation);
        for (unsigned s = 0; s < SNAP_NSTATES; s++)
            fprintf(out, "%s\"%s\": %" PRIu64, s ? ", " : "",
                    snap_state_name(s), x->state_bytes[s]);
        fprintf(out, "}}%s\n", i + 1 < h->ndev ? "," : "");
    }
    fprintf(out, "      ],\n      \"tiers\": [\n");
    for (int t = 0; t < SNAP_NTIERS; t++) {
        const struct snap_tier *x = &d->tier[t];
        fprintf(out, "        {\"tier\": \"%s\", \"enabled\": %s, "
                "\"capacity\": %" PRIu64 ", \"used_bytes\": %" PRIu64
                ", \"reserve_bytes\": %" PRIu64 ", \"peak_bytes\": %" PRIu64
                ", \"chunks\": %" PRIu64 "}%s\n", tier_label(t),
                x->present ? "true" : "false", x->capacity, x->used_bytes,
                x->reserve_bytes, x->peak_bytes, x->chunks,
                t + 1 < SNAP_NTIERS ? "," : "");
    }
    fprintf(out, "      ],\n      \"largest_allocations\": [\n");
    for (uint32_t i = 0; i < d->nalloc; i++) {
        const struct snap_alloc *a = &v->alloc[i];
        fprintf(out, "        {\"address\": \"0x%" PRIx64 "\", \"size\": %"
                PRIu64 ", \"device\": %" PRId32 ", \"ndevices\": %" PRId32
                ", \"tier\": \"%s\", \"flags\": ", a->addr, a->size, a->device,
                a->ndevices, snap_tier_name(a->tier));
        json_flags(out, a->flags);
        fprintf(out, ", \"age_s\": %.1f}%s\n", a->age_s,
                i + 1 < d->nalloc ? "," : "");
    }
    fprintf(out, "      ],\n");
    fmt_json_traffic(out, v);
    fprintf(out, ",\n");
    fmt_json_share(out, v);
    fprintf(out, "\n    }");
}

void fmt_show_json(FILE *out, const struct fmt_pool *pools, size_t n)
{
    fprintf(out, "{\n  \"pools\": [\n");
    for (size_t i = 0; i < n; i++) {
        json_pool(out, pools[i].v);
        fprintf(out, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(out, "  ]\n}\n");
}

/* ---- Prometheus -------------------------------------------------------- */

void prom_family(FILE *out, const char *name, const char *type,
                 const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: printable ASCII already (snap_parse), so only the
 * format's escapes are needed. */
static void prom_value(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', out);
        fputc(*s, out);
    }
}

void prom_pool_labels(FILE *out, const struct snap_view *v)
{
    fprintf(out, "pid=\"%" PRId32 "\",pool=\"%" PRIu64 "\"", v->hdr->pid,
            v->hdr->pool_id);
}

/* A sample's value and the end of its line: nanoseconds (ns) in seconds,
 * Prometheus's base unit; anything else as the integer it is. */
void prom_number(FILE *out, uint64_t x, bool ns)
{
    if (ns)
        fprintf(out, " %.9f\n", (double)x / 1e9);
    else
        fprintf(out, " %" PRIu64 "\n", x);
}

/* A family of one sample per pool, from the uint64_t at off in its
 * snap_data. */
static void prom_pool_family(FILE *out, const struct fmt_pool *pools,
                             size_t n, const char *metric, const char *type,
                             const char *help, size_t off, bool ns)
{
    prom_family(out, metric, type, help);
    for (size_t i = 0; i < n; i++) {
        uint64_t x;
        memcpy(&x, (const char *)pools[i].v->data + off, sizeof(x));
        fprintf(out, "%s{", metric);
        prom_pool_labels(out, pools[i].v);
        fputc('}', out);
        prom_number(out, x, ns);
    }
}

void fmt_prometheus(FILE *out, const struct fmt_pool *pools, size_t n)
{
    prom_family(out, "umpool_pool_info", "gauge",
                "A pool: its program, backend and machine (always 1).");
    for (size_t i = 0; i < n; i++) {
        const struct snap_header *h = pools[i].v->hdr;
        fprintf(out, "umpool_pool_info{");
        prom_pool_labels(out, pools[i].v);
        fprintf(out, ",program=\"");
        prom_value(out, h->program);
        fprintf(out, "\",backend=\"");
        prom_value(out, h->backend);
        fprintf(out, "\",topology=\"");
        prom_value(out, h->topology);
        fprintf(out, "\"} 1\n");
    }
    prom_pool_family(out, pools, n, "umpool_pool_peak_bytes", "gauge",
                     "High-water mark of the pool's memory in use, all "
                     "devices together.",
                     offsetof(struct snap_data, peak_bytes), false);
    prom_pool_family(out, pools, n, "umpool_pool_peak_reserved_bytes", "gauge",
                     "High-water mark of the physical memory the pool held "
                     "from the driver, all devices together.",
                     offsetof(struct snap_data, peak_reserved_bytes), false);
    prom_pool_family(out, pools, n, "umpool_pool_driver_seconds_total",
                     "counter",
                     "Driver time of the pool's virtual-memory calls on "
                     "device chunks: modeled on sim (sim_driver_costs), "
                     "measured on cuda.",
                     offsetof(struct snap_data, driver_ns), true);
    prom_family(out, "umpool_device_info", "gauge",
                "A device of a pool: its model, PCI bus id and NUMA node "
                "(always 1).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < pools[i].v->hdr->ndev; d++) {
            const struct snap_device *x = &pools[i].v->dev[d];
            fprintf(out, "umpool_device_info{");
            prom_pool_labels(out, pools[i].v);
            fprintf(out, ",device=\"%" PRIu32 "\",model=\"", d);
            prom_value(out, x->model);
            fprintf(out, "\",pci_bus_id=\"");
            prom_value(out, x->pci);
            fprintf(out, "\",numa_node=\"%" PRId32 "\"} 1\n", x->numa);
        }
    for (size_t k = 0; k < ARRAY_LEN(dev_fields); k++) {
        const struct dev_field *f = &dev_fields[k];
        if (!f->metric)
            continue;
        prom_family(out, f->metric, f->counter ? "counter" : "gauge", f->help);
        for (size_t i = 0; i < n; i++)
            for (uint32_t d = 0; d < pools[i].v->hdr->ndev; d++) {
                fprintf(out, "%s{", f->metric);
                prom_pool_labels(out, pools[i].v);
                fprintf(out, ",device=\"%" PRIu32 "\"}", d);
                prom_number(out, dev_get(&pools[i].v->dev[d], f->off),
                            f->off == DEV_FIELD(driver_ns));
            }
    }
    prom_family(out, "umpool_fragmentation_ratio", "gauge",
                "1 - largest cached block / all cached blocks (0: one "
                "block).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < pools[i].v->hdr->ndev; d++) {
            fprintf(out, "umpool_fragmentation_ratio{");
            prom_pool_labels(out, pools[i].v);
            fprintf(out, ",device=\"%" PRIu32 "\"} %.4f\n", d,
                    pools[i].v->dev[d].fragmentation);
        }
    prom_family(out, "umpool_offloaded_bytes", "gauge",
                "Bytes of the device's allocations now on a lower tier.");
    for (size_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < pools[i].v->hdr->ndev; d++)
            for (int t = 0; t < SNAP_NTIERS; t++) {
                const struct snap_device *x = &pools[i].v->dev[d];
                fprintf(out, "umpool_offloaded_bytes{");
                prom_pool_labels(out, pools[i].v);
                fprintf(out, ",device=\"%" PRIu32 "\",tier=\"%s\"} %" PRIu64
                        "\n", d, tier_label(t),
                        t == SNAP_TIER_HOST ? x->host_bytes : x->nvme_bytes);
            }
    prom_family(out, "umpool_memory_bytes", "gauge",
                "The device's memory by state: used, cached, free, and its "
                "allocations on the host or NVMe tiers.");
    for (size_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < pools[i].v->hdr->ndev; d++)
            for (unsigned s = 0; s < SNAP_NSTATES; s++) {
                fprintf(out, "umpool_memory_bytes{");
                prom_pool_labels(out, pools[i].v);
                fprintf(out, ",device=\"%" PRIu32 "\",state=\"%s\"} %" PRIu64
                        "\n", d, snap_state_name(s),
                        pools[i].v->dev[d].state_bytes[s]);
            }
    static const struct {
        const char *metric, *help;
        size_t off;
    } tier_fields[] = {
        {"umpool_tier_capacity_bytes",
         "Bytes the tier may hold (0 on NVMe: what the disks hold).",
         offsetof(struct snap_tier, capacity)},
        {"umpool_tier_used_bytes", "Bytes of allocations' data on the tier.",
         offsetof(struct snap_tier, used_bytes)},
        {"umpool_tier_reserve_bytes",
         "Host: pinned chunks created ahead of need, empty.",
         offsetof(struct snap_tier, reserve_bytes)},
        {"umpool_tier_peak_bytes", "High-water mark of the tier's used bytes.",
         offsetof(struct snap_tier, peak_bytes)},
        {"umpool_tier_chunks", "Chunks holding data on the tier.",
         offsetof(struct snap_tier, chunks)},
    };
    for (size_t k = 0; k < ARRAY_LEN(tier_fields); k++) {
        prom_family(out, tier_fields[k].metric, "gauge", tier_fields[k].help);
        for (size_t i = 0; i < n; i++)
            for (int t = 0; t < SNAP_NTIERS; t++) {
                const struct snap_tier *x = &pools[i].v->data->tier[t];
                uint64_t val;
                if (!x->present)
                    continue;
                memcpy(&val, (const char *)x + tier_fields[k].off, sizeof(val));
                fprintf(out, "%s{", tier_fields[k].metric);
                prom_pool_labels(out, pools[i].v);
                fprintf(out, ",tier=\"%s\"} %" PRIu64 "\n", tier_label(t), val);
            }
    }
    fmt_prometheus_traffic(out, pools, n);
    fmt_prometheus_share(out, pools, n);
}

static uint64_t sum_dev(const struct snap_view *v, size_t off)
{
    uint64_t sum = 0;
    for (uint32_t d = 0; d < v->hdr->ndev; d++) {
        uint64_t x;
        memcpy(&x, (const char *)&v->dev[d] + off, sizeof(x));
        sum += x;
    }
    return sum;
}

void fmt_rates(FILE *out, const struct snap_view *v, struct fmt_prev *prev,
               size_t *n_p, size_t cap)
{
    struct fmt_prev now = {
        v->hdr->pid, v->hdr->pid_ns, v->hdr->pool_id, v->hdr->created_ns,
        v->data->updated_ns,
        sum_dev(v, offsetof(struct snap_device, alloc_count)),
        sum_dev(v, offsetof(struct snap_device, free_count)),
        sum_dev(v, offsetof(struct snap_device, spill_count)),
        sum_dev(v, offsetof(struct snap_device, restore_count)),
    };
    size_t i = 0;
    while (i < *n_p && (prev[i].pid != now.pid || prev[i].pool != now.pool ||
                        prev[i].pid_ns != now.pid_ns))
        i++;
    const struct fmt_prev *p = i < *n_p ? &prev[i] : NULL;
    bool restarted = p && (p->created != now.created || now.at < p->at ||
                           now.allocs < p->allocs || now.frees < p->frees ||
                           now.spills < p->spills ||
                           now.restores < p->restores);
    if (p && !restarted && now.at > p->at) {
        double dt = (double)(now.at - p->at) / 1e9;
        fprintf(out, "rates: %.0f allocs/s, %.0f frees/s, %.0f spills/s, "
                "%.0f restores/s\n", (double)(now.allocs - p->allocs) / dt,
                (double)(now.frees - p->frees) / dt,
                (double)(now.spills - p->spills) / dt,
                (double)(now.restores - p->restores) / dt);
    } else {
        fprintf(out, "rates: %s(from the next refresh on)\n",
                restarted ? "restarted " : "");
    }
    if (i == *n_p && *n_p < cap)
        (*n_p)++;
    if (i < cap)
        prev[i] = now;
}
