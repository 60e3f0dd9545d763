/*
 * umpool-inspect's output: tables for people, JSON, the Prometheus text
 * format, and the SVG memory map. Each takes checked snapshots
 * (snap_parse) and never fails on their contents.
 */
#ifndef INSPECT_FMT_H
#define INSPECT_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "publish/snapshot.h"

#define FMT_SIZE_LEN 16
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* "0 B", "512 B", "1.5 KiB", ... "16.0 EiB": binary units. */
const char *fmt_size(char buf[FMT_SIZE_LEN], uint64_t bytes);

/* A pool as the formats see it: its snapshot, and a note for people
 * ("exited", "stale: ...") or NULL. */
struct fmt_pool {
    const struct snap_view *v;
    const char *note;
};

/* The per-device and per-tier tables and the largest allocations. */
void fmt_show(FILE *out, const struct fmt_pool *p);
/* {"pools": [...]}: everything the snapshots hold but their maps. */
void fmt_show_json(FILE *out, const struct fmt_pool *pools, size_t n);
/* The text exposition format: umpool_* families, HELP and TYPE once
 * each, labelled by pid, pool, device and tier. */
void fmt_prometheus(FILE *out, const struct fmt_pool *pools, size_t n);
/* The memory map of one pool: per device, a grid of cells coloured by
 * state (one <g> per state), a legend and totals. */
void fmt_svg(FILE *out, const struct snap_view *v);

/* A pool's counters at one round of watch, for rates. */
struct fmt_prev {
    int32_t pid;
    uint32_t pid_ns;
    uint64_t pool, created, at, allocs, frees, spills, restores;
};
/* The line of rates of v since the round prev[0..*n_p) holds for its pool
 * (none the first time), then records v there (cap entries at most). A
 * pool whose counters went back, or that was created anew, is another
 * process under the same pid and pool id: its rates start afresh. */
void fmt_rates(FILE *out, const struct snap_view *v, struct fmt_prev *prev,
               size_t *n_p, size_t cap);

/* The traffic of a pool (inspect_traffic.c): its links that carried
 * bytes, and its collectives, as tables; as the JSON members "links" and
 * "collectives" (no trailing comma); as Prometheus families. */
void fmt_show_links(FILE *out, const struct snap_view *v);
void fmt_show_colls(FILE *out, const struct snap_view *v);
void fmt_json_traffic(FILE *out, const struct snap_view *v);
void fmt_prometheus_traffic(FILE *out, const struct fmt_pool *pools,
                            size_t n);

/* A pool shared by processes (inspect_share.c): its processes as a
 * table (nothing when the pool is not shared), as the JSON member "share"
 * (no trailing comma), as a Prometheus family. */
void fmt_show_share(FILE *out, const struct snap_view *v);
void fmt_json_share(FILE *out, const struct snap_view *v);
void fmt_prometheus_share(FILE *out, const struct fmt_pool *pools, size_t n);

/* The Prometheus format's pieces: a family's HELP and TYPE lines; a
 * sample's pid and pool labels; its value and the line's end (ns: a count
 * of nanoseconds, written in seconds). */
void prom_family(FILE *out, const char *name, const char *type,
                 const char *help);
void prom_pool_labels(FILE *out, const struct snap_view *v);
void prom_number(FILE *out, uint64_t x, bool ns);

/* Writes s as a JSON string, quotes included. */
void fmt_json_string(FILE *out, const char *s);

/* The device matrix of a pool made with the public API: of this machine
 * (backend auto) or of a simulated machine's topology file. 0, or 1 after
 * a line on stderr saying why not. */
int fmt_topo(FILE *out, const char *topology, bool json);

#endif
