/*
 * umpool-bench replay TRACE: an allocation trace (one operation per line,
 * "a ID BYTES" or "f ID"; '#' starts a comment) replayed through ump_alloc
 * and ump_free on one device, memory never touched. What it measures is the
 * footprint: the physical memory the pool holds from the driver at its peak
 * (peak reserved) against the bytes the trace has live at its peak (the
 * requested sizes: nothing the pool rounds counts as live). The baseline of
 * that ratio is 1.0, the physical limit; PyTorch's allocators on the same
 * kind of trace are quoted in the README.
 *
 * With the sim backend's sim_driver_costs:h200 (set here unless --config
 * sets sim_driver_costs), the pool's driver calls are accounted at the
 * H200's measured per-handle costs: "driver time" is what those calls would
 * have cost on the GPU (ump_stats' driver_ns). With
 * sim_driver_costs:h200-timed every call also takes that long, and the
 * wall time is the one to compare.
 *
 * Next to the pool, on the same trace and device: PyTorch's caching
 * allocator with expandable segments, its allocation logic modeled and its
 * driver calls charged (and on the timed sim waited for) at the same
 * table's costs (replay_es.c): its footprint, driver time and wall.
 *
 * The trace is read whole first, so that parsing is not timed and the peak
 * live bytes are known before the pool is made (--capacity 1.02x).
 *
 * With --config backend:cuda the replay runs once on the GPU's device 0
 * (--capacity does not apply): driver time is measured, and the model's
 * figures are its modeled costs only; the competitor there is PyTorch
 * itself (scripts/replay-torch, which scripts/gpu-check runs beside it).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "offload.h"
#include "replay.h"
#include "umpool.h"


/* Reads the whole trace; 0, or 1 after printing where it is wrong. */
static int trace_read(const char *path, struct trace *t)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "umpool-bench: replay: cannot open %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    char line[256];
    size_t lineno = 0, live = 0;
    /* Sizes of the live IDs, to know the peak and catch bad frees. */
    size_t *sizes = NULL, nsizes = 0;
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == '\n' || !*p)
            continue;
        char kind;
        unsigned long long id, bytes = 0;
        int got = sscanf(p, "%c %llu %llu", &kind, &id, &bytes);
        bool ok = (kind == 'a' && got == 3 && bytes > 0) ||
                  (kind == 'f' && got == 2);
        if (!ok || id >= UINT32_MAX) {
            fprintf(stderr, "umpool-bench: replay: %s:%zu: expected "
                    "'a ID BYTES' or 'f ID'\n", path, lineno);
            rc = 1;
            break;
        }
        if (id >= nsizes) {
            size_t n = nsizes ? nsizes : 1024;
            while (n <= id)
                n *= 2;
            size_t *s = realloc(sizes, n * sizeof(*s));
            if (!s) {
                rc = 1;
                break;
            }
            memset(s + nsizes, 0, (n - nsizes) * sizeof(*s));
            sizes = s;
            nsizes = n;
        }
        if ((kind == 'a') == (sizes[id] != 0)) {
            fprintf(stderr, "umpool-bench: replay: %s:%zu: ID %llu is %s\n",
                    path, lineno, id,
                    kind == 'a' ? "already live" : "not live");
            rc = 1;
            break;
        }
        if (t->n == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 4096;
            struct op *o = realloc(t->ops, cap * sizeof(*o));
            if (!o) {
                rc = 1;
                break;
            }
            t->ops = o;
            t->cap = cap;
        }
        t->ops[t->n++] = (struct op){(uint32_t)id, kind == 'a', bytes};
        if (kind == 'a') {
            sizes[id] = bytes;
            live += bytes;
            if (live > t->peak_live)
                t->peak_live = live;
            t->nallocs++;
        } else {
            live -= sizes[id];
            sizes[id] = 0;
        }
        if (id >= t->nids)
            t->nids = (uint32_t)id + 1;
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "umpool-bench: replay: reading %s: %s\n", path,
                strerror(errno));
        rc = 1;
    }
    if (!rc && !t->nallocs) {
        fprintf(stderr, "umpool-bench: replay: %s has no allocation\n", path);
        rc = 1;
    }
    free(sizes);
    fclose(f);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n), n > 0. */
static double quantile_us(const uint64_t *v, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

struct result {
    size_t capacity;
    size_t peak_reserved, peak_in_use;
    uint64_t chunks_created, failures;
    size_t first_fail_op, first_fail_bytes; /* the first failure's */
    int first_fail_rc;
    uint64_t driver_ns;
    double wall_s;
    uint64_t *lat[2]; /* alloc, free: ns per call */
    size_t nlat[2];
    unsigned scale;   /* the timed sim's, or 0 */
    int es_rc;        /* the model's replay: 0, or why it has no figure */
    struct es_result es;
};

/* Does the user's configuration put the pool on the GPU? */
static bool on_cuda(const struct bench_replay_opts *o)
{
    return o->config && strstr(o->config, "backend:cuda");
}

/* One replay on a fresh pool of the given capacity (on cuda: device 0 of
 * the GPU, whatever its capacity). */
static int replay_once(const struct bench_replay_opts *o,
                       const struct trace *t, size_t capacity,
                       struct result *r)
{
    char conf[1024];
    bool costs = o->config && strstr(o->config, "sim_driver_costs");
    int len = on_cuda(o)
                  ? snprintf(conf, sizeof(conf), "%s", o->config)
                  : snprintf(conf, sizeof(conf),
                             "backend:sim,sim_devices:1,sim_device_mem:%zu%s%s%s",
                             capacity, costs ? "" : ",sim_driver_costs:h200",
                             o->config ? "," : "", o->config ? o->config : "");
    if (len < 0 || (size_t)len >= sizeof(conf)) {
        fprintf(stderr, "umpool-bench: replay: --config too long\n");
        return 1;
    }
    ump_pool_t *pool;
    int rc = ump_pool_create(conf, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: replay: ump_pool_create(\"%s\"): %s\n",
                conf, ump_strerror(rc));
        return 1;
    }
    void **ptrs = calloc(t->nids, sizeof(*ptrs));
    r->lat[0] = malloc(t->nallocs * sizeof(uint64_t));
    r->lat[1] = malloc(t->nallocs * sizeof(uint64_t));
    if (!ptrs || !r->lat[0] || !r->lat[1]) {
        fprintf(stderr, "umpool-bench: replay: out of memory\n");
        free(ptrs);
        ump_pool_destroy(pool);
        return 1;
    }
    ump_stats_t cap;
    r->capacity = on_cuda(o) && !ump_stats(pool, 0, &cap) ? cap.capacity
                                                           : capacity;
    r->scale = offload_pace(conf, ump_backend_name(pool));
    r->nlat[0] = r->nlat[1] = 0;
    r->failures = 0;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < t->n; i++) {
        const struct op *op = &t->ops[i];
        uint64_t a = now_ns();
        if (op->alloc) {
            rc = ump_alloc(pool, op->bytes, NULL, &ptrs[op->id]);
            uint64_t b = now_ns();
            if (rc) {
                ptrs[op->id] = NULL;
                if (!r->failures++) {
                    r->first_fail_op = i;
                    r->first_fail_bytes = op->bytes;
                    r->first_fail_rc = rc;
                }
                rc = 0;
                continue;
            }
            r->lat[0][r->nlat[0]++] = b - a;
        } else if (ptrs[op->id]) {
            rc = ump_free(pool, ptrs[op->id]);
            uint64_t b = now_ns();
            if (rc) {
                fprintf(stderr, "umpool-bench: replay: ump_free: %s\n",
                        ump_strerror(rc));
                break;
            }
            ptrs[op->id] = NULL;
            r->lat[1][r->nlat[1]++] = b - a;
        }
    }
    r->wall_s = (double)(now_ns() - t0) / 1e9;
    ump_stats_t st;
    int src = ump_stats(pool, UMP_DEVICE_ALL, &st);
    if (!src) {
        r->peak_reserved = st.peak_reserved_bytes;
        r->peak_in_use = st.peak_bytes;
        r->chunks_created = st.chunks_created;
        r->driver_ns = st.driver_ns;
    }
    for (uint32_t id = 0; id < t->nids; id++)
        if (ptrs[id])
            ump_free(pool, ptrs[id]);
    free(ptrs);
    ump_pool_destroy(pool);
    if (rc || src)
        return 1;
    qsort(r->lat[0], r->nlat[0], sizeof(uint64_t), cmp_u64);
    qsort(r->lat[1], r->nlat[1], sizeof(uint64_t), cmp_u64);
    /* The competitor on the same device, paced like the pool's calls. */
    r->es_rc = es_replay(t, r->capacity, r->scale, &r->es);
    return 0;
}

/* The model's line: its footprint, calls and times, and the pool's wall
 * (with the timed sim) or driver time against its. */
static void print_es(const struct trace *t, const struct result *r)
{
    const struct es_result *e = &r->es;
    char b[32];

    if (r->es_rc) {
        printf("  PyTorch expandable segments (model): n/a (%s)\n",
               strerror(-r->es_rc));
        return;
    }
    printf("  PyTorch expandable segments (model): peak reserved %s, "
           "ratio %.4f,\n    pages created %" PRIu64 ", driver time %.3f s, "
           "failed allocations %" PRIu64 ",\n    wall %.3f s%s\n",
           fmt_size(e->peak_reserved, b, sizeof(b)),
           (double)e->peak_reserved / (double)t->peak_live, e->pages,
           (double)e->drv.ns / 1e9, e->failures, e->wall_s,
           r->scale ? "" : " (driver calls not waited for)");
    if (r->scale && e->wall_s > 0)
        printf("  ump wall / PyTorch's: %.2f\n", r->wall_s / e->wall_s);
    else if (e->drv.ns)
        printf("  ump driver time / PyTorch's: %.2f\n",
               (double)r->driver_ns / (double)e->drv.ns);
}

static void print_text(const struct trace *t, const struct result *r)
{
    char b1[32], b2[32], b3[32];
    printf("capacity %s: peak live %s, peak reserved %s, ratio %.4f\n",
           fmt_size(r->capacity, b1, sizeof(b1)),
           fmt_size(t->peak_live, b2, sizeof(b2)),
           fmt_size(r->peak_reserved, b3, sizeof(b3)),
           (double)r->peak_reserved / (double)t->peak_live);
    printf("  chunks created %" PRIu64 ", driver time %.3f s, failed "
           "allocations %" PRIu64 ", wall %.3f s\n",
           r->chunks_created, (double)r->driver_ns / 1e9, r->failures,
           r->wall_s);
    if (r->failures)
        printf("  first failure: %zu bytes at operation %zu: %s\n",
               r->first_fail_bytes, r->first_fail_op + 1,
               ump_strerror(r->first_fail_rc));
    static const char *const what[] = {"ump_alloc", "ump_free"};
    for (int k = 0; k < 2; k++)
        if (r->nlat[k])
            printf("  %-9s us: p50 %.2f  p90 %.2f  p99 %.2f  max %.1f\n",
                   what[k], quantile_us(r->lat[k], r->nlat[k], 0.5),
                   quantile_us(r->lat[k], r->nlat[k], 0.9),
                   quantile_us(r->lat[k], r->nlat[k], 0.99),
                   quantile_us(r->lat[k], r->nlat[k], 1.0));
    print_es(t, r);
}

static void print_json(const struct trace *t, const struct result *r,
                       bool first)
{
    printf("%s{\"capacity\":%zu,\"peak_live\":%zu,\"peak_reserved\":%zu,"
           "\"ratio\":%.4f,\"chunks_created\":%" PRIu64 ",\"driver_s\":%.6f,"
           "\"failures\":%" PRIu64 ",\"wall_s\":%.6f",
           first ? "" : ",", r->capacity, t->peak_live, r->peak_reserved,
           (double)r->peak_reserved / (double)t->peak_live, r->chunks_created,
           (double)r->driver_ns / 1e9, r->failures, r->wall_s);
    static const char *const what[] = {"alloc_us", "free_us"};
    for (int k = 0; k < 2; k++)
        if (r->nlat[k])
            printf(",\"%s\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,"
                   "\"max\":%.3f}", what[k],
                   quantile_us(r->lat[k], r->nlat[k], 0.5),
                   quantile_us(r->lat[k], r->nlat[k], 0.9),
                   quantile_us(r->lat[k], r->nlat[k], 0.99),
                   quantile_us(r->lat[k], r->nlat[k], 1.0));
    printf(",\"time_scale\":%u,\"torch_es\":", r->scale);
    if (r->es_rc) {
        printf("null");
    } else {
        const struct es_result *e = &r->es;
        printf("{\"peak_reserved\":%zu,\"ratio\":%.4f,\"pages\":%" PRIu64
               ",\"driver_s\":%.6f,\"failures\":%" PRIu64 ",\"wall_s\":%.6f"
               ",\"calls\":{\"create\":%" PRIu64 ",\"map\":%" PRIu64
               ",\"access_handles\":%" PRIu64 ",\"unmap\":%" PRIu64
               ",\"release\":%" PRIu64 "}}",
               e->peak_reserved, (double)e->peak_reserved / (double)t->peak_live,
               e->pages, (double)e->drv.ns / 1e9, e->failures, e->wall_s,
               e->drv.n[PACE_CREATE], e->drv.n[PACE_MAP], e->drv.n[PACE_ACCESS],
               e->drv.n[PACE_UNMAP], e->drv.n[PACE_RELEASE]);
    }
    printf("}");
}

int bench_replay(const struct bench_replay_opts *o)
{
    struct trace t = {0};
    if (trace_read(o->trace, &t)) {
        free(t.ops);
        return 1;
    }
    if (!o->json) {
        char b[32];
        printf("trace %s: %zu operations, %" PRIu64 " allocations, peak live "
               "%s\n", o->trace, t.n, t.nallocs,
               fmt_size(t.peak_live, b, sizeof(b)));
    } else {
        printf("{\"trace\":");
        json_string(stdout, o->trace);
        printf(",\"ops\":%zu,\"allocations\":%" PRIu64 ",\"runs\":[", t.n,
               t.nallocs);
    }
    int rc = 0;
    /* On cuda the GPU's own capacity: one replay. */
    for (int i = 0; i < (on_cuda(o) ? 1 : o->ncap) && !rc; i++) {
        size_t cap = o->caps[i].bytes;
        if (!cap) /* a multiple of the peak, rounded up to 2 MiB */
            cap = ((size_t)((double)t.peak_live * o->caps[i].times) +
                   2 * MiB - 1) & ~(2 * MiB - 1);
        struct result r = {0};
        rc = replay_once(o, &t, cap, &r);
        if (!rc) {
            if (o->json)
                print_json(&t, &r, i == 0);
            else
                print_text(&t, &r);
        }
        free(r.lat[0]);
        free(r.lat[1]);
    }
    if (o->json)
        printf("]}\n");
    free(t.ops);
    return rc;
}
