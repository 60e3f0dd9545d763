/*
 * A pool's traffic as umpool-inspect shows it: the bytes its tier moves and
 * collectives put on each link direction (ump_link_stats) and its
 * collectives' counters (ump_coll_stats), as read from the snapshot.
 *
 * Prometheus gets counters, so that rate() gives a link's bandwidth in use
 * and, divided by umpool_link_bandwidth_bytes_per_second, its utilization;
 * and the collectives' bus bytes and time, whose rates' quotient is
 * nccl-tests' busBw. Every link the pool can use appears from the start,
 * at 0 (rate() and increase() miss a series' first value): those the
 * topology knows (devices, their host links), host and NVMe when the pool
 * has the tier, the devices and host to and from the network; any other
 * once it carried bytes.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "inspect_fmt.h"

static const char *const coll_names[SNAP_NCOLL] = {
    "allreduce", "broadcast", "reduce",  "allgather",
    "reduce_scatter", "alltoall", "gather", "scatter"};

static const struct snap_link *link_at(const struct snap_view *v, uint32_t i,
                                       uint32_t j)
{
    return &v->link[(size_t)i * snap_nloc(v->hdr->ndev) + j];
}

static bool link_used(const struct snap_link *l)
{
    return l->tier_bytes || l->coll_bytes;
}

/* A link of the pool's machine, used or not (see above). */
static bool link_known(const struct snap_view *v, uint32_t i, uint32_t j)
{
    uint32_t nd = v->hdr->ndev, host = nd + SNAP_LOC_HOST,
             nvme = nd + SNAP_LOC_NVME, net = nd + SNAP_LOC_NET;
    if (i == j)
        return false;
    if (link_used(link_at(v, i, j)) || link_at(v, i, j)->bandwidth_gbs > 0)
        return true;
    if ((i == host && j == nvme) || (i == nvme && j == host))
        return v->data->tier[SNAP_TIER_NVME].present;
    return (i == net && j != nvme) || (j == net && i != nvme);
}

/* Bus bandwidth of the timed calls, GB/s; 0 when none was timed. */
static double bus_gbs(const struct snap_coll *c)
{
    return c->timed_ns ? (double)c->timed_bus_bytes / (double)c->timed_ns : 0;
}

void fmt_show_links(FILE *out, const struct snap_view *v)
{
    uint32_t n = snap_nloc(v->hdr->ndev), shown = 0;
    char a[12], b[12], s[2][FMT_SIZE_LEN];
    fprintf(out, "\nLINKS (bytes moved by tier moves and collectives)\n"
            "%-5s %-5s %10s %10s %10s\n", "FROM", "TO", "TIER", "COLL",
            "BANDWIDTH");
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            const struct snap_link *l = link_at(v, i, j);
            if (i == j || !link_used(l))
                continue;
            char bw[24] = "-";
            if (l->bandwidth_gbs > 0)
                snprintf(bw, sizeof(bw), "%.0f GB/s", l->bandwidth_gbs);
            fprintf(out, "%-5s %-5s %10s %10s %10s\n",
                    snap_loc_name(v->hdr->ndev, i, a, sizeof(a)),
                    snap_loc_name(v->hdr->ndev, j, b, sizeof(b)),
                    fmt_size(s[0], l->tier_bytes), fmt_size(s[1], l->coll_bytes),
                    bw);
            shown++;
        }
    if (!shown)
        fprintf(out, "  (none has carried bytes yet)\n");
}

void fmt_show_colls(FILE *out, const struct snap_view *v)
{
    char s[FMT_SIZE_LEN];
    unsigned shown = 0;
    fprintf(out, "\nCOLLECTIVES\n%-14s %8s %10s %8s %12s\n", "OP", "CALLS",
            "DATA", "TIMED", "BUS BW");
    for (int k = 0; k < SNAP_NCOLL; k++) {
        const struct snap_coll *c = &v->data->coll[k];
        if (!c->calls)
            continue;
        char bw[24] = "-";
        if (c->timed_ns)
            snprintf(bw, sizeof(bw), "%.2f GB/s", bus_gbs(c));
        fprintf(out, "%-14s %8" PRIu64 " %10s %8" PRIu64 " %12s\n",
                coll_names[k], c->calls, fmt_size(s, c->bytes), c->timed_calls,
                bw);
        shown++;
    }
    if (!shown)
        fprintf(out, "  (none called yet)\n");
}

void fmt_json_traffic(FILE *out, const struct snap_view *v)
{
    uint32_t n = snap_nloc(v->hdr->ndev);
    char a[12], b[12];
    bool first = true;
    fprintf(out, "      \"links\": [");
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            const struct snap_link *l = link_at(v, i, j);
            if (!link_known(v, i, j))
                continue;
            fprintf(out, "%s\n        {\"src\": \"%s\", \"dst\": \"%s\", "
                    "\"tier_bytes\": %" PRIu64 ", \"coll_bytes\": %" PRIu64
                    ", \"bandwidth_gbs\": %.3f}", first ? "" : ",",
                    snap_loc_name(v->hdr->ndev, i, a, sizeof(a)),
                    snap_loc_name(v->hdr->ndev, j, b, sizeof(b)),
                    l->tier_bytes, l->coll_bytes, l->bandwidth_gbs);
            first = false;
        }
    fprintf(out, "%s],\n      \"collectives\": [", first ? "" : "\n      ");
    for (int k = 0; k < SNAP_NCOLL; k++) {
        const struct snap_coll *c = &v->data->coll[k];
        fprintf(out, "%s\n        {\"op\": \"%s\", \"calls\": %" PRIu64
                ", \"bytes\": %" PRIu64 ", \"timed_calls\": %" PRIu64
                ", \"timed_bus_bytes\": %" PRIu64 ", \"timed_ns\": %" PRIu64
                "}", k ? "," : "", coll_names[k], c->calls, c->bytes,
                c->timed_calls, c->timed_bus_bytes, c->timed_ns);
    }
    fprintf(out, "\n      ]");
}

/* One sample of a link family: the pool's labels, src and dst. */
static void link_labels(FILE *out, const char *metric,
                        const struct snap_view *v, uint32_t i, uint32_t j)
{
    char a[12], b[12];
    fprintf(out, "%s{", metric);
    prom_pool_labels(out, v);
    fprintf(out, ",src=\"%s\",dst=\"%s\"",
            snap_loc_name(v->hdr->ndev, i, a, sizeof(a)),
            snap_loc_name(v->hdr->ndev, j, b, sizeof(b)));
}

static void prom_links(FILE *out, const struct fmt_pool *pools, size_t np)
{
    prom_family(out, "umpool_link_bytes_total", "counter",
                "Bytes the pool moved over a link direction, src to dst (a "
                "device, host, nvme or net): by tier moves (cause tier) or "
                "by collectives and point-to-point (cause coll).");
    for (size_t p = 0; p < np; p++) {
        const struct snap_view *v = pools[p].v;
        uint32_t n = snap_nloc(v->hdr->ndev);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++) {
                const struct snap_link *l = link_at(v, i, j);
                if (!link_known(v, i, j))
                    continue;
                link_labels(out, "umpool_link_bytes_total", v, i, j);
                fprintf(out, ",cause=\"tier\"} %" PRIu64 "\n", l->tier_bytes);
                link_labels(out, "umpool_link_bytes_total", v, i, j);
                fprintf(out, ",cause=\"coll\"} %" PRIu64 "\n", l->coll_bytes);
            }
    }
    prom_family(out, "umpool_link_bandwidth_bytes_per_second", "gauge",
                "A link direction's bandwidth in the pool's topology.");
    for (size_t p = 0; p < np; p++) {
        const struct snap_view *v = pools[p].v;
        uint32_t n = snap_nloc(v->hdr->ndev);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++) {
                const struct snap_link *l = link_at(v, i, j);
                if (i == j || !(l->bandwidth_gbs > 0))
                    continue;
                link_labels(out, "umpool_link_bandwidth_bytes_per_second", v,
                            i, j);
                fprintf(out, "} %.0f\n", l->bandwidth_gbs * 1e9);
            }
    }
}

static void prom_colls(FILE *out, const struct fmt_pool *pools, size_t np)
{
    static const struct {
        const char *metric, *help;
        size_t off;
        bool ns;
    } fields[] = {
        {"umpool_collective_calls_total",
         "Collective calls that succeeded (queued, for calls on streams).",
         offsetof(struct snap_coll, calls), false},
        {"umpool_collective_bytes_total",
         "Data of those calls, as nccl-tests counts a collective's size.",
         offsetof(struct snap_coll, bytes), false},
        {"umpool_collective_timed_calls_total",
         "Synchronous calls (streams NULL), timed from call to return.",
         offsetof(struct snap_coll, timed_calls), false},
        {"umpool_collective_timed_bus_bytes_total",
         "Data of the timed calls times the collective's bus factor: over "
         "umpool_collective_timed_seconds_total, nccl-tests' busBw.",
         offsetof(struct snap_coll, timed_bus_bytes), false},
        {"umpool_collective_timed_seconds_total",
         "Time the synchronous calls took.",
         offsetof(struct snap_coll, timed_ns), true},
    };
    for (size_t f = 0; f < ARRAY_LEN(fields); f++) {
        prom_family(out, fields[f].metric, "counter", fields[f].help);
        for (size_t p = 0; p < np; p++)
            for (int k = 0; k < SNAP_NCOLL; k++) {
                uint64_t x;
                memcpy(&x, (const char *)&pools[p].v->data->coll[k] +
                           fields[f].off, sizeof(x));
                fprintf(out, "%s{", fields[f].metric);
                prom_pool_labels(out, pools[p].v);
                fprintf(out, ",op=\"%s\"}", coll_names[k]);
                prom_number(out, x, fields[f].ns);
            }
    }
}

void fmt_prometheus_traffic(FILE *out, const struct fmt_pool *pools, size_t n)
{
    prom_links(out, pools, n);
    prom_colls(out, pools, n);
}
