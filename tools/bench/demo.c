/*
 * umpool-bench demo: a short narrated tour of a simulated 8-GPU node
 * (BENCH_DEMO_CONFIG unless --config says otherwise), one step a function:
 * (a) create the pool, (b) one tensor on each device, (c) a tensor larger
 * than one device, (d) stitching freed holes into one allocation,
 * (e) statistics, (f) trim.
 * With --json, the same steps print one JSON object instead.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "umpool.h"

#define STITCH_CONFIG "backend:sim,sim_devices:1,sim_device_mem:256M"

struct demo {
    const struct bench_opts *o;
    ump_pool_t *pool;
    int ndev;
    void **tensor;  /* one per device */
    size_t tensor_size;
    void *big;
    size_t big_size;
    ump_pool_t *spool; /* the stitching pool */
    void **holes;
    size_t nholes, holes_cap;
    void *stitched;
    /* For --json. */
    ump_stats_t *dev_stats;
    ump_stats_t total;
    bool stitch_ok;
    size_t stitch_bytes;
    uint64_t chunks_before, chunks_after;
    size_t cached_before, cached_after;
};

static void say(const struct demo *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const struct demo *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o->json)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* Reports a failed call; returns 1, the exit status. */
static int demo_fail(const char *what, int rc)
{
    fprintf(stderr, "umpool-bench: demo: %s: %s\n", what, ump_strerror(rc));
    if (rc == -ENOENT)
        fprintf(stderr, "umpool-bench: demo: (simulated topologies are read "
                "from UMPOOL_TOPOLOGY_DIR when set)\n");
    return 1;
}

static int demo_broken(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int demo_broken(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: demo: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    return 1;
}

static int demo_create(struct demo *d)
{
    const char *config = d->o->config ? d->o->config : BENCH_DEMO_CONFIG;
    int rc;

    say(d, "== (a) create the pool\n");
    rc = ump_pool_create(config, &d->pool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_device_count(d->pool);
    if (rc < 0)
        return demo_fail("ump_device_count", rc);
    if (rc == 0)
        return demo_broken("the pool has no device");
    d->ndev = rc;
    if (!d->o->config)
        say(d, "Simulated node: the DGX H200 topology (8 GPUs on NVSwitch) "
               "with each GPU's memory\nshrunk to 2 GiB so that the demo "
               "runs in a second.\nConfig: \"%s\"\n", config);
    else
        say(d, "Pool created with config \"%s\".\n", config);
    say(d, "ump_device_count: the pool spans %d device(s), one virtual "
           "address space.\n\n", d->ndev);
    d->tensor = calloc((size_t)d->ndev, sizeof(*d->tensor));
    d->dev_stats = calloc((size_t)d->ndev, sizeof(*d->dev_stats));
    if (!d->tensor || !d->dev_stats)
        return demo_fail("calloc", -ENOMEM);
    return 0;
}

static int demo_place(struct demo *d)
{
    ump_stats_t st;
    char sz[32];
    int rc;

    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    /* Small enough for any device the user may configure. */
    d->tensor_size = st.capacity / 32 < 64 * MiB ? st.capacity / 32 : 64 * MiB;
    if (d->tensor_size == 0)
        d->tensor_size = 1;
    say(d, "== (b) one %s tensor on each device\n",
        fmt_size(d->tensor_size, sz, sizeof(sz)));
    say(d, "Each ump_alloc gets hints.device = d; ump_ptr_info tells where "
           "the bytes are.\n");
    for (int dev = 0; dev < d->ndev; dev++) {
        ump_hints_t hints = UMP_HINTS_INIT;
        ump_ptr_info_t info;

        hints.device = dev;
        rc = ump_alloc(d->pool, d->tensor_size, &hints, &d->tensor[dev]);
        if (rc)
            return demo_fail("ump_alloc", rc);
        rc = ump_ptr_info(d->pool, d->tensor[dev], &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        say(d, "  asked for GPU %d: %p, ump_ptr_info: device %d\n", dev,
            d->tensor[dev], info.device);
        if (info.device != dev || info.tier != UMP_TIER_DEVICE)
            return demo_broken("tensor asked for GPU %d landed on device %d "
                               "(tier %d)", dev, info.device, info.tier);
    }
    say(d, "\n");
    return 0;
}

/* Prints one run of same-device chunks of the big tensor. */
static void demo_run(const struct demo *d, size_t start, size_t end, int dev,
                     unsigned chunks)
{
    char sz[32];

    say(d, "  [%p, +%s) on ", (void *)((char *)d->big + start),
        fmt_size(end - start, sz, sizeof(sz)));
    if (dev >= 0)
        say(d, "GPU %d", dev);
    else
        say(d, "no device (tier %d)", -dev - 1);
    say(d, " (%u chunk%s)\n", chunks, chunks == 1 ? "" : "s");
}

/* Copies a pattern from the host across [lo, hi) of the big tensor and back
 * (copies on a stream, not the CPU: pool memory is not CPU-accessible on
 * cuda); 0 when every byte came back. */
static int demo_pattern(struct demo *d, size_t lo, size_t hi)
{
    size_t len = hi - lo, n = len / sizeof(uint64_t);
    uint64_t *buf = malloc(len), *back = malloc(len);
    ump_stream_t s;
    int ret = 0, rc;

    if (!buf || !back) {
        ret = demo_fail("malloc", -ENOMEM);
        goto out;
    }
    rc = ump_stream_create(d->pool, 0, &s);
    if (rc) {
        ret = demo_fail("ump_stream_create", rc);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (lo / sizeof(uint64_t) + i) * 0x9e3779b97f4a7c15ull;
    memset(back, 0, len);
    rc = ump_memcpy_async(d->pool, (char *)d->big + lo, buf,
                          n * sizeof(uint64_t), s);
    if (!rc)
        rc = ump_memcpy_async(d->pool, back, (char *)d->big + lo,
                              n * sizeof(uint64_t), s);
    if (!rc)
        rc = ump_stream_synchronize(d->pool, s);
    if (rc)
        ret = demo_fail("ump_memcpy_async", rc);
    else if (memcmp(back, buf, n * sizeof(uint64_t)) != 0)
        ret = demo_broken("pattern read back differs from what was written");
    rc = ump_stream_destroy(d->pool, s);
    if (rc && !ret)
        ret = demo_fail("ump_stream_destroy", rc);
out:
    free(back);
    free(buf);
    return ret;
}

static int demo_span(struct demo *d)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    ump_stats_t st;
    size_t off = 0, run_start = 0, boundary = 0, lo, hi;
    unsigned run_chunks = 0;
    int run_dev = 0, runs = 0, first_dev = 0, second_dev = 0, rc;
    char a[32], b[32];

    say(d, "== (c) a tensor larger than one device\n");
    if (d->ndev < 2) {
        say(d, "Only one device: nothing to span, skipped.\n\n");
        return 0;
    }
    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->big_size = st.capacity + st.capacity / 2;
    say(d, "GPU 0 has %s free of %s. ",
        fmt_size(st.capacity - st.mapped_bytes, a, sizeof(a)),
        fmt_size(st.capacity, b, sizeof(b)));
    say(d, "Asking GPU 0 for %s: when GPU 0 is full,\nthe allocation "
           "continues on the nearest devices, at the next addresses.\n",
        fmt_size(d->big_size, a, sizeof(a)));
    hints.device = 0;
    rc = ump_alloc(d->pool, d->big_size, &hints, &d->big);
    if (rc)
        return demo_fail("ump_alloc", rc);
    say(d, "Walking it chunk by chunk with ump_ptr_info (chunk_base, "
           "chunk_size):\n");
    while (off < d->big_size) {
        ump_ptr_info_t info;
        size_t next;
        int dev;

        rc = ump_ptr_info(d->pool, (char *)d->big + off, &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        if (info.base != d->big || info.size != d->big_size)
            return demo_broken("ump_ptr_info of byte %zu gives base %p size "
                               "%zu, not %p size %zu", off, info.base,
                               info.size, d->big, d->big_size);
        next = (size_t)((char *)info.chunk_base + info.chunk_size -
                        (char *)d->big);
        if (info.chunk_size == 0 || next <= off)
            return demo_broken("ump_ptr_info of byte %zu gives an empty chunk",
                               off);
        if (next > d->big_size)
            next = d->big_size;
        dev = info.tier == UMP_TIER_DEVICE ? info.device : -1 - info.tier;
        if (run_chunks && dev != run_dev) {
            demo_run(d, run_start, off, run_dev, run_chunks);
            if (runs++ == 0) {
                boundary = off;
                first_dev = run_dev;
                second_dev = dev;
            }
            run_start = off;
            run_chunks = 0;
        }
        run_dev = dev;
        run_chunks++;
        off = next;
    }
    demo_run(d, run_start, off, run_dev, run_chunks);
    runs++;

    /* Touch a window, not 3 GiB: the boundary is what is interesting. */
    lo = boundary > 4 * MiB ? boundary - 4 * MiB : 0;
    hi = boundary + 4 * MiB < d->big_size ? boundary + 4 * MiB : d->big_size;
    if (demo_pattern(d, lo, hi))
        return 1;
    if (runs > 1)
        say(d, "A copy wrote a pattern of %s across the GPU %d / GPU %d "
               "boundary (at +%s)\nthrough the pointer and read every byte "
               "back intact: one pointer, %d devices.\n\n",
            fmt_size(hi - lo, a, sizeof(a)), first_dev, second_dev,
            fmt_size(boundary, b, sizeof(b)), runs);
    else
        say(d, "It fit on one device; a copy wrote a pattern over its first "
               "%s and read it back intact.\n\n", fmt_size(hi, a, sizeof(a)));
    return 0;
}

static int demo_stitch(struct demo *d)
{
    ump_stats_t st;
    size_t nfreed = 0;
    char a[32], b[32];
    int rc;

    say(d, "== (d) stitching freed holes into one allocation\n");
    rc = ump_pool_create(STITCH_CONFIG, &d->spool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_stats(d->spool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    for (;;) {
        void *p;

        /* A device that never says -ENOMEM would loop forever. */
        if (d->nholes > st.capacity / (2 * MiB) + 64)
            return demo_broken("%zu allocations of 2 MiB on a %s device and "
                               "still no -ENOMEM", d->nholes,
                               fmt_size(st.capacity, a, sizeof(a)));
        if (d->nholes == d->holes_cap) {
            size_t cap = d->holes_cap ? d->holes_cap * 2 : 64;
            void **h = realloc(d->holes, cap * sizeof(*h));

            if (!h)
                return demo_fail("realloc", -ENOMEM);
            d->holes = h;
            d->holes_cap = cap;
        }
        rc = ump_alloc(d->spool, 2 * MiB, NULL, &p);
        if (rc == -ENOMEM)
            break;
        if (rc)
            return demo_fail("ump_alloc", rc);
        d->holes[d->nholes++] = p;
    }
    say(d, "A fresh pool, \"%s\":\nfilled its device with %zu "
           "allocations of 2 MiB until -ENOMEM.\n", STITCH_CONFIG, d->nholes);
    for (size_t i = 0; i < d->nholes; i += 2) {
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
        nfreed++;
    }
    d->stitch_bytes = nfreed * 2 * MiB;
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_before = st.chunks_created;
    say(d, "Freed every other one: %zu holes of 2 MiB, %s in all, none of "
           "them adjacent.\n", nfreed, fmt_size(d->stitch_bytes, a, sizeof(a)));
    if (d->stitch_bytes == 0)
        return demo_broken("nothing could be allocated on the stitching pool");
    rc = ump_alloc(d->spool, d->stitch_bytes, NULL, &d->stitched);
    if (rc == -ENOMEM)
        return demo_broken("stitching failed: one allocation of %s did not "
                           "fit in %zu freed holes of 2 MiB",
                           fmt_size(d->stitch_bytes, a, sizeof(a)), nfreed);
    if (rc)
        return demo_fail("ump_alloc", rc);
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_after = st.chunks_created;
    say(d, "Allocating %s in one piece: chunks_created before %" PRIu64
           ", after %" PRIu64 ".\n", fmt_size(d->stitch_bytes, b, sizeof(b)),
        d->chunks_before, d->chunks_after);
    if (d->chunks_after > d->chunks_before)
        return demo_broken("stitching created %" PRIu64 " new chunks instead "
                           "of reusing the freed ones",
                           d->chunks_after - d->chunks_before);
    d->stitch_ok = true;
    say(d, "Stitching works: the %s allocation succeeded at %p,\nbuilt "
           "from the %zu freed chunks; no new physical memory was created."
           "\n\n",
        fmt_size(d->stitch_bytes, a, sizeof(a)), d->stitched, nfreed);

    rc = ump_free(d->spool, d->stitched);
    if (rc)
        return demo_fail("ump_free", rc);
    d->stitched = NULL;
    for (size_t i = 0; i < d->nholes; i++) {
        if (!d->holes[i])
            continue;
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
    }
    rc = ump_pool_destroy(d->spool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->spool = NULL;
    return 0;
}

static void demo_stats_row(const struct demo *d, const char *name,
                           const ump_stats_t *st)
{
    char c[32], l[32], m[32], k[32], p[32];

    say(d, "%6s | %9s %9s %9s %9s %9s | %6" PRIu64 " %6" PRIu64 " %6" PRIu64
           " | %6" PRIu64 " %6" PRIu64 "\n", name,
        fmt_size(st->capacity, c, sizeof(c)),
        fmt_size(st->live_bytes, l, sizeof(l)),
        fmt_size(st->mapped_bytes, m, sizeof(m)),
        fmt_size(st->cached_bytes, k, sizeof(k)),
        fmt_size(st->peak_bytes, p, sizeof(p)), st->live_count,
        st->alloc_count, st->free_count, st->chunks_created,
        st->chunks_released);
}

static int demo_stats(struct demo *d)
{
    char name[16];
    int rc;

    say(d, "== (e) statistics (ump_stats), per device and for the whole "
           "pool\n");
    say(d, "%6s | %9s %9s %9s %9s %9s | %6s %6s %6s | %6s %6s\n", "device",
        "capacity", "live", "mapped", "cached", "peak", "live#", "allocs",
        "frees", "chunk+", "chunk-");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_stats(d->pool, dev, &d->dev_stats[dev]);
        if (rc)
            return demo_fail("ump_stats", rc);
        snprintf(name, sizeof(name), "GPU %d", dev);
        demo_stats_row(d, name, &d->dev_stats[dev]);
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &d->total);
    if (rc)
        return demo_fail("ump_stats", rc);
    demo_stats_row(d, "pool", &d->total);
    say(d, "\n");
    return 0;
}

static int demo_trim(struct demo *d)
{
    ump_stats_t st;
    char a[32], b[32];
    int rc;

    say(d, "== (f) trim\n");
    if (d->big) {
        rc = ump_free(d->pool, d->big);
        if (rc)
            return demo_fail("ump_free", rc);
        d->big = NULL;
        say(d, "Freed the big tensor: its chunks stay mapped and cached for "
               "the next allocation.\n");
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_before = st.cached_bytes;
    rc = ump_trim(d->pool);
    if (rc)
        return demo_fail("ump_trim", rc);
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_after = st.cached_bytes;
    say(d, "ump_trim gave cached memory back to the devices: cached %s "
           "before, %s after.\n",
        fmt_size(d->cached_before, a, sizeof(a)),
        fmt_size(d->cached_after, b, sizeof(b)));
    if (d->cached_before > 0 && d->cached_after >= d->cached_before)
        return demo_broken("ump_trim released no cached memory");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_free(d->pool, d->tensor[dev]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->tensor[dev] = NULL;
    }
    rc = ump_pool_destroy(d->pool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->pool = NULL;
    say(d, "Freed every tensor and destroyed the pool.\n");
    return 0;
}

static void json_stats(const ump_stats_t *st)
{
    printf("{\"capacity\": %zu, \"live_bytes\": %zu, \"mapped_bytes\": %zu, "
           "\"cached_bytes\": %zu, \"peak_bytes\": %zu, "
           "\"live_count\": %" PRIu64 ", \"alloc_count\": %" PRIu64
           ", \"free_count\": %" PRIu64 ", \"chunks_created\": %" PRIu64
           ", \"chunks_released\": %" PRIu64 "}",
           st->capacity, st->live_bytes, st->mapped_bytes, st->cached_bytes,
           st->peak_bytes, st->live_count, st->alloc_count, st->free_count,
           st->chunks_created, st->chunks_released);
}

static void demo_print_json(const struct demo *d)
{
    printf("{\"scenario\": \"demo\", \"config\": ");
    json_string(stdout, d->o->config ? d->o->config : BENCH_DEMO_CONFIG);
    printf(", \"devices\": %d, \"stitching\": {\"ok\": %s, \"bytes\": %zu, "
           "\"chunks_created_before\": %" PRIu64 ", \"chunks_created_after\": %"
           PRIu64 "}, \"trim\": {\"cached_before\": %zu, \"cached_after\": %zu}"
           ", \"stats\": {\"per_device\": [",
           d->ndev, d->stitch_ok ? "true" : "false", d->stitch_bytes,
           d->chunks_before, d->chunks_after, d->cached_before,
           d->cached_after);
    for (int dev = 0; dev < d->ndev; dev++) {
        printf("%s\n  ", dev ? "," : "");
        json_stats(&d->dev_stats[dev]);
    }
    printf("\n], \"total\": ");
    json_stats(&d->total);
    printf("}}\n");
}

/* Frees whatever a failed step left behind, in reverse order of creation. */
static void demo_cleanup(struct demo *d)
{
    if (d->spool) {
        if (d->stitched)
            ump_free(d->spool, d->stitched);
        for (size_t i = 0; i < d->nholes; i++)
            if (d->holes[i])
                ump_free(d->spool, d->holes[i]);
        ump_pool_destroy(d->spool);
    }
    if (d->pool) {
        if (d->big)
            ump_free(d->pool, d->big);
        for (int dev = 0; d->tensor && dev < d->ndev; dev++)
            if (d->tensor[dev])
                ump_free(d->pool, d->tensor[dev]);
        ump_pool_destroy(d->pool);
    }
    free(d->holes);
    free(d->dev_stats);
    free(d->tensor);
}

int bench_demo(const struct bench_opts *o)
{
    struct demo d;
    int ret;

    memset(&d, 0, sizeof(d));
    d.o = o;
    ret = demo_create(&d);
    if (!ret)
        ret = demo_place(&d);
    if (!ret)
        ret = demo_span(&d);
    if (!ret)
        ret = demo_stitch(&d);
    if (!ret)
        ret = demo_stats(&d);
    if (!ret)
        ret = demo_trim(&d);
    if (!ret && o->json)
        demo_print_json(&d);
    demo_cleanup(&d);
    return ret;
}
