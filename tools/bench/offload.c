/*
 * umpool-bench offload: the host and NVMe tiers, next to raw baselines
 * timed in the same run.
 *
 * (a) One offloadable allocation of --size bytes on device 0 goes round the
 *     tiers; every move is timed on its own, the median over --reps, after
 *     one untimed pass (the host tier pins its memory on first use: that
 *     is its set-up, not a move):
 *       device->host   ump_evict(UMP_TIER_HOST)
 *       host->NVMe     ump_evict(UMP_TIER_NVME) of the host-resident data
 *       NVMe->device   ump_acquire of the NVMe-resident data
 *       device->NVMe   ump_evict(UMP_TIER_NVME) of the device-resident data
 *       NVMe->host     ump_prefetch(UMP_LOC_HOST), then ump_ptr_info polled
 *                      until every chunk is on the host tier
 *       host->device   ump_acquire of the host-resident data
 *     (--moves host: the first and the last only.)
 *     Baselines, each run next to the move it is compared with (before it
 *     in even repetitions, after it in odd ones):
 *     device<->host, memcpy between two prefaulted buffers on sim (the sim
 *     backend's copies are memcpy; with sim_driver_costs:h200-timed paced
 *     to the model's pinned cuMemcpy, as the sim's copies are paced to its
 *     links), cuMemcpyDtoH/HtoD with pinned memory (cuMemAllocHost) on
 *     cuda; host<->NVMe, fio (io_uring, O_DIRECT, 1 MiB
 *     blocks, queue depth 32) when it is in PATH, else the same pattern
 *     through liburing on an O_DIRECT file in the spill directory.
 *     device<->NVMe compares with the slower of its two legs: what a
 *     perfect pipeline of the two would reach.
 * (b) A family of oversubscribed loops (--loop: the default family, or
 *     members N:D:P), each on a pool of its own: N offloadable tensors
 *     through a device that holds D of them, visited in order, each visit
 *     prefetching the next P, acquiring, checking the last round's value,
 *     ump_memset_async, releasing. The members are where an eviction order
 *     that guesses the next use, or a prefetch queue, can go wrong: few
 *     tensors, a device barely above the prefetch window, a prefetch
 *     deeper than the device, no prefetch, many tensors (loop_family).
 *     After untimed rounds that bring the pool to its steady state, the
 *     wall time runs from the first timed visit until the moves the last
 *     one started have ended, and is set against the ideal: the fewest
 *     bytes any eviction policy must move for those accesses (Belady's
 *     rule, with the device's capacity in tensors and the prefetch
 *     distance, at the rate it sustains: offload_opt.c, loop_optimum; each
 *     restore needs a spill, as the device is full and every tensor is
 *     written at each visit) at the raw device<->host bandwidths, or the
 *     touches' own time when that is longer (a perfect pipeline hides the
 *     shorter of the two). The pool's own moves (ump_stats' spill_bytes
 *     and restore_bytes deltas) are reported next to it, never used as
 *     the baseline: extra moves would inflate the very figure they are
 *     judged against. The pool's restores per round are set against the
 *     optimum's too. The raw bandwidths are timed on copies of one
 *     tensor's size, as (a)'s baselines are on (a)'s size (the rate of a
 *     copy depends on its size: glibc's memcpy, for one, changes method
 *     above a fraction of the cache), half right before the rounds and
 *     half right after them, so that a machine whose speed drifts is
 *     measured over the same stretch of time as the loop.
 *
 * The baselines live in offload_base.c, the output in offload_report.c.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bench.h"
#include "offload.h"
#include "offload_opt.h"
#include "umpool.h"

static int fail(const char *what, int rc)
{
    fprintf(stderr, "umpool-bench: offload: %s: %s\n", what,
            ump_strerror(rc));
    return 1;
}

/* An allocation the bench needs failed: what the pool held then, so that a
 * failure in a test run says where the memory was. */
static int alloc_fail(ump_pool_t *pool, const char *what, int rc)
{
    ump_stats_t st;
    ump_tier_stats_t host, nvme;

    if (!ump_stats(pool, 0, &st) &&
        !ump_tier_stats(pool, UMP_TIER_HOST, &host) &&
        !ump_tier_stats(pool, UMP_TIER_NVME, &nvme))
        fprintf(stderr, "umpool-bench: offload: %s: device 0: capacity %zu, "
                "mapped %zu, cached %zu, live %zu, %llu evictions; host "
                "tier %zu used of %zu; NVMe %zu used\n", what, st.capacity,
                st.mapped_bytes, st.cached_bytes, st.live_bytes,
                (unsigned long long)st.evictions, host.used_bytes,
                host.capacity, nvme.used_bytes);
    return fail(what, rc);
}

/* The value of the last "key:value" item of a config string into buf;
 * false when the key is not there. */
static bool conf_value(const char *config, const char *key, char *buf,
                       size_t len)
{
    size_t klen = strlen(key);
    bool found = false;

    for (const char *p = config; p && *p;) {
        size_t n = strcspn(p, ",");

        if (n > klen && !strncmp(p, key, klen) && p[klen] == ':') {
            snprintf(buf, len, "%.*s", (int)(n - klen - 1), p + klen + 1);
            found = true;
        }
        p += n;
        if (*p)
            p++;
    }
    return found;
}

unsigned offload_pace(const char *config, const char *backend)
{
    char val[32];
    long scale = 1;

    if (!backend || strcmp(backend, "sim"))
        return 0;
    if (!conf_value(config, "sim_driver_costs", val, sizeof(val)) &&
        !conf_value(getenv("UMPOOL_CONF"), "sim_driver_costs", val,
                    sizeof(val)))
        return 0;
    if (strcasecmp(val, "h200-timed"))
        return 0;
    if (conf_value(config, "sim_time_scale", val, sizeof(val)) ||
        conf_value(getenv("UMPOOL_CONF"), "sim_time_scale", val, sizeof(val)))
        scale = strtol(val, NULL, 10);
    /* The pool took the value, so it is 1..1000. */
    return scale > 0 ? (unsigned)scale : 1;
}

/* The scenario's keys, then the user's: theirs win, key by key. */
static char *join_config(const char *own, const char *user)
{
    char *s;

    if (asprintf(&s, "%s%s%s", own, user && *user ? "," : "",
                 user ? user : "") < 0)
        return NULL;
    return s;
}

static int make_configs(struct off *x)
{
    const char *user = x->o->config;
    char own[PATH_MAX + 512], val[64];

    if (user && conf_value(user, "nvme_dir", val, sizeof(val))) {
        fprintf(stderr, "umpool-bench: offload: give the spill directory "
                "with --dir, not nvme_dir in --config\n");
        return 1;
    }
    /* The sim's machine unless --config names another backend: the
     * config shown is then the one that ran, without sim keys. */
    bool sim = !user || !conf_value(user, "backend", val, sizeof(val)) ||
               !strcmp(val, "sim");
    char dev[96] = "";
    if (sim)
        snprintf(dev, sizeof(dev),
                 "backend:sim,sim_devices:1,sim_device_mem:%zu,", 2 * x->size);
    /* log_level info: the NVMe store says so when it cannot use io_uring. */
    snprintf(own, sizeof(own), "%shost_limit:%zu,nvme_dir:%s,log_level:info",
             dev, 2 * x->size, x->dir.path);
    x->config = join_config(own, user);
    if (!x->config)
        return fail("config", -ENOMEM);
    x->sim_machine = sim;
    if (user && conf_value(user, "nvme_engine", val, sizeof(val)) &&
        strcmp(val, "auto")) {
        snprintf(x->engine, sizeof(x->engine), "%.20s (nvme_engine)", val);
        return 0;
    }
    snprintf(x->engine, sizeof(x->engine), "%s",
             x->dir.direct && x->dir.uring ? "io_uring" : "threads");
    return 0;
}

/* Reads back one byte every stride bytes of [p, p + size), and the last,
 * through the stream; 0, -EILSEQ when one is not want, or the pool's
 * error. */
static int check_bytes(ump_pool_t *pool, ump_stream_t s, const void *p,
                       size_t size, size_t stride, unsigned char want)
{
    size_t n = (size - 1) / stride + 2;
    unsigned char *b = calloc(n, 1);
    int rc = b ? 0 : -ENOMEM;

    for (size_t i = 0; !rc && i < n; i++) {
        size_t off = i + 1 < n ? i * stride : size - 1;

        rc = ump_memcpy_async(pool, &b[i], (const char *)p + off, 1, s);
    }
    if (!rc)
        rc = ump_stream_synchronize(pool, s);
    for (size_t i = 0; !rc && i < n; i++)
        if (b[i] != want)
            rc = -EILSEQ;
    free(b);
    return rc;
}

/*
 * Checks that every chunk of [p, p + size) is on tier want: 0, or -EPROTO
 * with the tier found in *found_p. With wait, a chunk still below want
 * (on NVMe for the host, on either for a device) is polled until it comes
 * up (a chunk on its way counts where its data still is): the end of a
 * ump_prefetch, which has no call of its own to wait with; -ETIMEDOUT
 * after POLL_MAX_NS.
 */
static int tier_walk(ump_pool_t *pool, char *p, size_t size, int want,
                     bool wait, int *found_p)
{
    const struct timespec pause = {0, POLL_NS};
    uint64_t deadline = now_ns() + POLL_MAX_NS;
    size_t off = 0;

    while (off < size) {
        ump_ptr_info_t info;
        size_t next;
        int rc = ump_ptr_info(pool, p + off, &info);

        if (rc)
            return rc;
        if (wait && info.tier > want) {
            if (now_ns() > deadline)
                return -ETIMEDOUT;
            nanosleep(&pause, NULL);
            continue;
        }
        if (info.tier != want) {
            *found_p = info.tier;
            return -EPROTO;
        }
        next = (size_t)((char *)info.chunk_base + info.chunk_size - p);
        if (next <= off)
            return -EPROTO;
        off = next;
    }
    return 0;
}

enum op { OP_EVICT_HOST, OP_EVICT_NVME, OP_ACQUIRE, OP_PREFETCH_HOST };

/* One ump call on (a)'s allocation, timed into *ns_p, then a check that
 * the data is where the call was to put it (a move that did not happen
 * would show as a fast one); an acquire is released after that. 0, or 1
 * after printing why. */
static int ump_timed(struct off *x, enum op op, double *ns_p)
{
    static const int want[] = {UMP_TIER_HOST, UMP_TIER_NVME, UMP_TIER_DEVICE,
                               UMP_TIER_HOST};
    const char *what = "";
    uint64_t t0 = now_ns(), t1;
    int rc = 0, found = -1;

    switch (op) {
    case OP_EVICT_HOST:
        what = "ump_evict(UMP_TIER_HOST)";
        rc = ump_evict(x->pool, x->p, 0, UMP_TIER_HOST);
        break;
    case OP_EVICT_NVME:
        what = "ump_evict(UMP_TIER_NVME)";
        rc = ump_evict(x->pool, x->p, 0, UMP_TIER_NVME);
        break;
    case OP_ACQUIRE:
        what = "ump_acquire";
        rc = ump_acquire(x->pool, x->p, 0, 0, NULL);
        break;
    case OP_PREFETCH_HOST:
        what = "ump_prefetch(UMP_LOC_HOST)";
        rc = ump_prefetch(x->pool, x->p, 0, UMP_LOC_HOST, NULL);
        if (!rc)
            rc = tier_walk(x->pool, x->p, x->size, UMP_TIER_HOST, true,
                           &found);
        break;
    }
    t1 = now_ns();
    if (!rc)
        rc = tier_walk(x->pool, x->p, x->size, want[op], false, &found);
    if (rc == -EPROTO && found >= 0) {
        fprintf(stderr, "umpool-bench: offload: after %s, a chunk is on "
                "tier %d, not %d\n", what, found, want[op]);
        return 1;
    }
    if (rc)
        return fail(what, rc);
    *ns_p = (double)(t1 - t0);
    if (op == OP_ACQUIRE && (rc = ump_release(x->pool, x->p, 0)))
        return fail("ump_release", rc);
    return 0;
}

/* The raw transfer that dir is compared with, next to it. */
static void base_timed(struct off *x, enum xfer dir, int r)
{
    double *ns = &x->base_ns[dir][r];

    switch (dir) {
    case X_D2H:
    case X_H2D:
        if (x->copy.ok)
            copy_run(&x->copy, dir == X_D2H, ns);
        break;
    case X_H2N:
    case X_N2H:
        if (x->disk.ok)
            disk_run(&x->disk, x->size, dir == X_H2N, ns);
        break;
    default:
        break;
    }
}

struct step {
    enum xfer dir;
    enum op op;
};

/* Every move once, from and back to the device (released), each next to
 * its baseline (with --moves host, device->host and back only); r < 0:
 * untimed, without baselines. Each step starts where the one before left
 * the data. */
static int xfer_rep(struct off *x, int r)
{
    static const struct step all[] = {
        {X_D2H, OP_EVICT_HOST}, {X_H2N, OP_EVICT_NVME},
        {X_N2D, OP_ACQUIRE},    {X_D2N, OP_EVICT_NVME},
        {X_N2H, OP_PREFETCH_HOST}, {X_H2D, OP_ACQUIRE},
    }, host[] = {{X_D2H, OP_EVICT_HOST}, {X_H2D, OP_ACQUIRE}};
    bool host_only = x->nmoves < X_COUNT;
    const struct step *steps = host_only ? host : all;
    size_t n = host_only ? sizeof(host) / sizeof(host[0])
                         : sizeof(all) / sizeof(all[0]);

    /* Which of the two goes first alternates: a disk (or a virtual one
     * with a cache in front) is often slower for the second of two writes
     * in a row, and neither side should always be the second. */
    bool base_first = r % 2 == 0;
    for (size_t i = 0; i < n; i++) {
        double untimed;
        if (r >= 0 && base_first)
            base_timed(x, steps[i].dir, r);
        if (ump_timed(x, steps[i].op,
                      r >= 0 ? &x->ump_ns[steps[i].dir][r] : &untimed))
            return 1;
        if (r >= 0 && !base_first)
            base_timed(x, steps[i].dir, r);
    }
    return 0;
}

/* Medians and GB/s (bytes per ns) of every row (the times get sorted). */
static void xfer_results(struct off *x)
{
    static const enum xfer legs[][3] = {{X_D2N, X_D2H, X_H2N},
                                        {X_N2D, X_N2H, X_H2D}};
    double bytes = (double)x->size;

    for (int d = 0; d < x->nmoves; d++)
        x->ump_gbs[d] = bytes / median(x->ump_ns[d], (size_t)x->reps);
    x->base_ok[X_D2H] = x->base_ok[X_H2D] = x->copy.ok;
    x->base_ok[X_H2N] = x->base_ok[X_N2H] = x->disk.ok;
    for (size_t l = 0; x->nmoves == X_COUNT && l < 2; l++) {
        enum xfer d = legs[l][0], a = legs[l][1], b = legs[l][2];

        x->base_ok[d] = x->base_ok[a] && x->base_ok[b];
        for (int r = 0; x->base_ok[d] && r < x->reps; r++)
            x->base_ns[d][r] = x->base_ns[a][r] > x->base_ns[b][r]
                                   ? x->base_ns[a][r] : x->base_ns[b][r];
    }
    for (int d = 0; d < x->nmoves; d++)
        if (x->base_ok[d])
            x->base_gbs[d] = bytes / median(x->base_ns[d], (size_t)x->reps);
}

/* Part (a): the pool, the allocation, the repetitions. 0, or 1. */
static int xfer_run(struct off *x)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    int ret = 1, rc;

    rc = ump_pool_create(x->config, &x->pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: offload: ump_pool_create(\"%s\"): "
                "%s\n", x->config, ump_strerror(rc));
        return 1;
    }
    x->backend = ump_backend_name(x->pool);
    copy_setup(&x->copy, !strcmp(x->backend, "cuda"), x->size,
               offload_pace(x->config, x->backend));
    if (x->nmoves == X_COUNT)
        disk_setup(&x->disk, &x->dir, x->size);
    rc = ump_stream_create(x->pool, 0, &x->stream);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_pool;
    }
    hints.device = 0;
    hints.flags = UMP_HINT_OFFLOAD;
    rc = ump_alloc(x->pool, x->size, &hints, &x->p);
    if (rc) {
        alloc_fail(x->pool, "ump_alloc of the moves' allocation", rc);
        goto out_stream;
    }
    rc = ump_memset_async(x->pool, x->p, FILL, x->size, x->stream);
    if (!rc)
        rc = ump_stream_synchronize(x->pool, x->stream);
    if (rc) {
        fail("ump_memset_async", rc);
        goto out_free;
    }
    /* One untimed pass first: the host tier pins its memory (and its
     * reserve) on first use, at a few GB/s, which is the tier's set-up,
     * not a move; the baselines' memory is pinned (or faulted in) before
     * they run too. */
    for (int r = -1; r < x->reps; r++)
        if (xfer_rep(x, r))
            goto out_free;
    rc = ump_acquire(x->pool, x->p, 0, 0, x->stream);
    if (rc) {
        fail("ump_acquire", rc);
        goto out_free;
    }
    rc = check_bytes(x->pool, x->stream, x->p, x->size, MiB, FILL);
    ump_release(x->pool, x->p, 0);
    if (rc) {
        fail(rc == -EILSEQ ? "data changed by the moves" : "reading back",
             rc);
        goto out_free;
    }
    xfer_results(x);
    ret = 0;
out_free:
    rc = ump_free(x->pool, x->p);
    if (rc)
        ret = fail("ump_free", rc);
out_stream:
    ump_stream_destroy(x->pool, x->stream);
out_pool:
    rc = ump_pool_destroy(x->pool);
    if (rc)
        ret = fail("ump_pool_destroy", rc);
    x->pool = NULL;
    return ret;
}

/* ---- (b) the loops ----------------------------------------------------- */

/*
 * The default family (--loop family). The first is the loop of earlier
 * versions; each other one is a place where an eviction order that guesses
 * the next use from the past, or a prefetch queue, can go wrong.
 */
static const struct bench_loop loop_family[] = {
    {12, 4, 2}, /* 3x the device, two ahead */
    {6, 4, 1},  /* few tensors: most of them stay, the cycle is short */
    {16, 3, 1}, /* one slot beyond the visit and its prefetch */
    {8, 2, 3},  /* prefetch deeper than the device: prefetches must evict
                   others the loop asked for, or wait */
    {12, 3, 0}, /* no prefetch: every restore inside an acquire */
    {24, 8, 1}, /* many tensors (smaller), a device of many */
};
#define LOOP_FAMILY (int)(sizeof(loop_family) / sizeof(loop_family[0]))

static unsigned char loop_val(int tensor, int round)
{
    return (unsigned char)(1 + (tensor * 31 + round * 7) % 255);
}

/* Touches tensor i of round `round` as a training step would: acquire
 * (timed into *acq_ns), check the previous round's value, memset, release.
 * 0, or 1 after printing why. */
static int loop_visit(ump_pool_t *pool, ump_stream_t s, void **t,
                      size_t size, int i, int round, uint64_t *acq_ns)
{
    uint64_t t0 = now_ns();
    int rc = ump_acquire(pool, t[i], 0, 0, s);

    *acq_ns += now_ns() - t0;
    if (rc)
        return fail("ump_acquire", rc);
    if (round > 0 &&
        (rc = check_bytes(pool, s, t[i], size, size,
                          loop_val(i, round - 1)))) {
        ump_release(pool, t[i], 0);
        return fail(rc == -EILSEQ ? "a tensor lost its data" : "reading back",
                    rc);
    }
    rc = ump_memset_async(pool, t[i], loop_val(i, round), size, s);
    if (!rc)
        rc = ump_stream_synchronize(pool, s);
    ump_release(pool, t[i], 0);
    return rc ? fail("ump_memset_async", rc) : 0;
}

/* The memset rate of a resident tensor t (the last one touched): what the
 * touches cost without any move. 0, or 1 after printing why. */
static int loop_touch_rate(struct off *x, struct loop_res *l, ump_pool_t *pool,
                           ump_stream_t s, void *t)
{
    double ns[BENCH_OFFLOAD_MAX_REPS];
    int rc = ump_acquire(pool, t, 0, 0, s);

    if (rc)
        return fail("ump_acquire", rc);
    for (int r = 0; !rc && r < x->reps; r++) {
        uint64_t t0 = now_ns();

        rc = ump_memset_async(pool, t, loop_val(l->spec.tensors - 1, 0),
                              l->tensor, s);
        if (!rc)
            rc = ump_stream_synchronize(pool, s);
        ns[r] = (double)(now_ns() - t0);
    }
    ump_release(pool, t, 0);
    if (rc)
        return fail("ump_memset_async", rc);
    l->touch_gbs = (double)l->tensor / median(ns, (size_t)x->reps);
    return 0;
}

/* The raw device<->host copies of one tensor through c (set up for that
 * size): reps [from, to) of each direction, alternating, into
 * l->base_ns. A failure leaves c->ok false, with c->why. */
static void loop_base(struct loop_res *l, struct copy_base *c, int from,
                      int to)
{
    for (int r = from; c->ok && r < to; r++) {
        copy_run(c, true, &l->base_ns[0][r]);
        if (c->ok)
            copy_run(c, false, &l->base_ns[1][r]);
    }
}

/*
 * Waits until the pool's moves have stopped: the prefetches the last visits
 * made (of the next round's first tensors), and the moves down that made
 * room for them. No call reports that. When the prefetched tensors fit on
 * the device beside the visit's (P < D), they are waited for there; and
 * then (with a prefetch deeper than the device, where they end up says
 * nothing) the pool's move counters are watched until they hold still for
 * quiet_ns, longer than a move lasts. *end_p: when the last of those
 * moves ended (a restore seen as its counter went up, or the last
 * prefetched tensor seen on the device: within a poll of it), or the
 * call's start when there was none. The timed rounds end there, and start
 * with none of the untimed rounds' moves in flight, so that ump_stats
 * counts exactly the moves of the timed rounds' calls, the accesses the
 * optimum is computed for. 0, or 1 after printing why.
 */
static int loop_settle(const struct loop_res *l, ump_pool_t *pool, void **t,
                       uint64_t quiet_ns, uint64_t *end_p)
{
    const struct timespec pause = {0, POLL_NS};
    uint64_t t0 = now_ns(), deadline = t0 + POLL_MAX_NS, changed;
    uint64_t restores = UINT64_MAX, spills = UINT64_MAX;
    int found = -1;

    *end_p = t0;
    for (int k = 0; l->spec.prefetch < l->spec.dev && k < l->spec.prefetch;
         k++) {
        int rc = tier_walk(pool, t[k], l->tensor, UMP_TIER_DEVICE, true,
                           &found);
        if (rc == -EPROTO && found >= 0) {
            fprintf(stderr, "umpool-bench: offload: a prefetched tensor is "
                    "on tier %d, not on the device\n", found);
            return 1;
        }
        if (rc)
            return fail("waiting for the prefetches", rc);
        *end_p = now_ns();
    }
    changed = now_ns();
    for (;;) {
        ump_stats_t st;
        int rc = ump_stats(pool, UMP_DEVICE_ALL, &st);
        uint64_t t1 = now_ns();

        if (rc)
            return fail("ump_stats", rc);
        if (restores != UINT64_MAX && st.restore_count != restores)
            *end_p = t1;
        if (st.restore_count != restores || st.spill_count != spills) {
            restores = st.restore_count;
            spills = st.spill_count;
            changed = t1;
        }
        if (t1 - changed >= quiet_ns)
            return 0;
        if (t1 > deadline) {
            fprintf(stderr, "umpool-bench: offload: the pool's moves did "
                    "not stop after the loop's last visit\n");
            return 1;
        }
        nanosleep(&pause, NULL);
    }
}

/* How long loop_settle waits for the next move: LOOP_QUIET_COPIES raw
 * copies of one tensor (the first half of the raw copies timed), at least
 * LOOP_QUIET_MIN_NS. */
static uint64_t loop_quiet_ns(const struct loop_res *l)
{
    double ns[LOOP_BASE_REPS];
    double copy = 0;

    if (l->ideal_ok) {
        memcpy(ns, l->base_ns[1], sizeof(ns));
        copy = median(ns, LOOP_BASE_REPS / 2);
    }
    uint64_t q = (uint64_t)(copy * LOOP_QUIET_COPIES);
    return q > LOOP_QUIET_MIN_NS ? q : LOOP_QUIET_MIN_NS;
}

/* The untimed rounds of the loop, then the timed rounds between two
 * ump_stats. 0, or 1 after printing why. */
static int loop_rounds(struct loop_res *l, ump_pool_t *pool, ump_stream_t s,
                       ump_stream_t cs, void **t)
{
    const int n = l->spec.tensors, depth = l->spec.prefetch;
    const int timed = 1 + LOOP_WARM_ROUNDS;
    uint64_t quiet = loop_quiet_ns(l), end;
    ump_stats_t before, after;
    ump_tier_stats_t nvme;
    uint64_t t0 = now_ns(), t1, acq = 0, pre = 0;
    int rc = 0;

    for (int r = 1; r < timed + l->rounds; r++) {
        /* The untimed rounds bring the pool to its steady state (the host
         * memory the cycle needs pinned, both workers running, every
         * tensor's interval known), as the first steps of a training run
         * do; the timed ones repeat them. */
        if (r == timed) {
            l->first_s = (double)(now_ns() - t0) / 1e9;
            if (loop_settle(l, pool, t, quiet, &end))
                return 1;
            if ((rc = ump_stats(pool, UMP_DEVICE_ALL, &before)))
                return fail("ump_stats", rc);
            acq = pre = 0;
            t0 = now_ns();
        }
        for (int i = 0; i < n; i++) {
            /* On their own stream, as a training loop's copies are. */
            t1 = now_ns();
            for (int k = 1; !rc && k <= depth; k++)
                rc = ump_prefetch(pool, t[(i + k) % n], 0, 0, cs);
            pre += now_ns() - t1;
            if (rc)
                return fail("ump_prefetch", rc);
            if (loop_visit(pool, s, t, l->tensor, i, r, &acq))
                return 1;
        }
    }
    uint64_t visits_end = now_ns();
    if (loop_settle(l, pool, t, quiet, &end))
        return 1;
    /* The last visit's own work, when no restore came after it. */
    end = end > visits_end ? end : visits_end;
    l->wall_s = (double)(end - t0) / 1e9;
    l->acquire_s = (double)acq / 1e9;
    l->prefetch_s = (double)pre / 1e9;
    rc = ump_stats(pool, UMP_DEVICE_ALL, &after);
    if (!rc)
        rc = ump_tier_stats(pool, UMP_TIER_NVME, &nvme);
    if (rc)
        return fail("ump_stats", rc);
    l->spill_bytes = after.spill_bytes - before.spill_bytes;
    l->restore_bytes = after.restore_bytes - before.restore_bytes;
    l->evictions = after.evictions - before.evictions;
    l->nvme_used = nvme.peak_bytes > 0;
    return 0;
}

/* A member's tensor size (offload.h: LOOP_PER_BUDGET), a power of two
 * (one chunk each: the pool's chunks are, up to max_chunk, so that the
 * members do not differ by how many pieces their tensors move in), at
 * least the default chunk_size. */
static size_t loop_tensor(size_t budget, const struct bench_loop *m)
{
    const size_t chunk = 2 * MiB;
    int per = m->dev > LOOP_PER_BUDGET ? m->dev : LOOP_PER_BUDGET;
    size_t t = budget / (size_t)per, p = chunk;

    if (m->tensors > LOOP_TIMES_BUDGET * per)
        t = budget * LOOP_TIMES_BUDGET / (size_t)m->tensors;
    while (p * 2 <= t)
        p *= 2;
    return p;
}

/* Timed rounds of a member (offload.h: LOOP_MIN_VISITS). */
static int loop_timed_rounds(const struct bench_loop *m)
{
    int r = (LOOP_MIN_VISITS + m->tensors - 1) / m->tensors;

    return r > LOOP_ROUNDS ? r : LOOP_ROUNDS;
}

/* A member's pool: a device of D tensors, room on the host for every
 * tensor and some (the loop measures device<->host). */
static int loop_config(const struct off *x, struct loop_res *l)
{
    size_t dev = (size_t)l->spec.dev * l->tensor;
    size_t host = (size_t)(l->spec.tensors + LOOP_PER_BUDGET) * l->tensor;
    char own[PATH_MAX + 256], sim[96] = "";

    if (x->sim_machine)
        snprintf(sim, sizeof(sim),
                 "backend:sim,sim_devices:1,sim_device_mem:%zu,", dev);
    snprintf(own, sizeof(own), "%sdevice_mem:%zu,host_limit:%zu,nvme_dir:%s",
             sim, dev, host, x->dir.path);
    l->config = join_config(own, x->o->config);
    return l->config ? 0 : fail("config", -ENOMEM);
}

/* One member of (b). 0, or 1 after printing why. */
static int loop_run(struct off *x, struct loop_res *l)
{
    const int n = l->spec.tensors;
    struct copy_base base = {0}; /* the raw copies of one tensor */
    ump_hints_t hints = UMP_HINTS_INIT;
    void *t[BENCH_OFFLOAD_MAX_TENSORS] = {0};
    ump_stream_t s, cs;
    ump_pool_t *pool;
    ump_stats_t st;
    uint64_t untimed = 0;
    int ret = 1, rc;

    l->tensor = loop_tensor(x->budget, &l->spec);
    l->rounds = loop_timed_rounds(&l->spec);
    if (loop_config(x, l))
        return 1;
    rc = ump_pool_create(l->config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: offload: ump_pool_create(\"%s\"): "
                "%s\n", l->config, ump_strerror(rc));
        return 1;
    }
    rc = ump_stats(pool, 0, &st);
    if (rc) {
        fail("ump_stats", rc);
        goto out_pool;
    }
    l->capacity = st.capacity;
    rc = ump_stream_create(pool, 0, &s);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_pool;
    }
    rc = ump_stream_create(pool, 0, &cs);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_stream;
    }
    hints.device = 0;
    hints.flags = UMP_HINT_OFFLOAD;
    /* Round 0 writes every tensor once, as it is made: the pool moves the
     * earlier ones down to make room for the later ones. */
    for (int i = 0; i < n; i++) {
        rc = ump_alloc(pool, l->tensor, &hints, &t[i]);
        if (rc) {
            char what[64];
            snprintf(what, sizeof(what), "ump_alloc of loop tensor %d", i);
            alloc_fail(pool, what, rc);
            goto out_free;
        }
        if (loop_visit(pool, s, t, l->tensor, i, 0, &untimed))
            goto out_free;
    }
    if (loop_touch_rate(x, l, pool, s, t[n - 1]))
        goto out_free;
    copy_setup(&base, x->copy.cuda, l->tensor, x->copy.pace);
    loop_base(l, &base, 0, LOOP_BASE_REPS / 2);
    l->ideal_ok = base.ok;
    if (loop_rounds(l, pool, s, cs, t))
        goto out_free;
    loop_base(l, &base, LOOP_BASE_REPS / 2, LOOP_BASE_REPS);
    l->ideal_ok = base.ok;
    if (!base.ok)
        snprintf(l->why, sizeof(l->why), "%s", base.why);
    ret = 0;
out_free:
    copy_cleanup(&base);
    for (int i = 0; i < n; i++) {
        rc = t[i] ? ump_free(pool, t[i]) : 0;
        if (rc)
            ret = fail("ump_free", rc);
    }
    ump_stream_destroy(pool, cs);
out_stream:
    ump_stream_destroy(pool, s);
out_pool:
    rc = ump_pool_destroy(pool);
    if (rc)
        ret = fail("ump_pool_destroy", rc);
    return ret;
}

/*
 * Belady's restores per round for a member's loop, run for `rounds` rounds
 * through a device of l->dev_tensors from the best contents (the first
 * ones accessed, loaded free): the fewest any policy can make; -1 when it
 * cannot be computed. With prefetch depth P, each ump_prefetch is an
 * access where the loop calls it, before the visit's acquire: the optimum
 * of a policy that does what it is asked when it is asked. A pool whose
 * worker gets to a prefetch only after the visit's release, or not at all,
 * may evict the visit's tensor for it, which that sequence forbids, and
 * come in below; with prefetch 0 (acquires only), no policy can: the
 * floor. With P + 1 above the device's tensors, the strict sequence must
 * restore the prefetches it cannot keep again and again, and the floor is
 * far below it.
 *
 * Over the timed rounds alone (the window), the best contents are a gift
 * no loop in its steady state gets: Belady keeps what it was given for a
 * few rounds before its own choices take over (24 tensors, 8 on the
 * device, prefetch 1: 16, 16, 16, 17, 18, 18, ... a round). Run behind one
 * untimed round as the pool is, Belady itself then misses 1.125x the
 * window's figure. The target is therefore set against the rate Belady
 * sustains, its misses over LOOP_OPT_ROUNDS rounds per round (the gift
 * spread thin); the window's figure is reported beside it.
 */
static double loop_optimum(const struct loop_res *l, int prefetch, int rounds)
{
    const int n = l->spec.tensors;
    size_t len = opt_loop_refs(n, rounds, prefetch, NULL);
    int *refs = malloc(len * sizeof(*refs));
    long m = -1;

    if (refs && l->dev_tensors > 0) {
        opt_loop_refs(n, rounds, prefetch, refs);
        m = opt_misses(refs, len, n, l->dev_tensors, NULL, OPT_BEST_START);
    }
    free(refs);
    return m < 0 ? -1 : (double)m / rounds;
}

/* A member's ideal from the optimum's moves, its raw bandwidths and the
 * touch rate. */
static void loop_ideal(struct loop_res *l)
{
    double touched = (double)l->tensor * l->spec.tensors * l->rounds;

    l->touch_s = touched / l->touch_gbs / 1e9;
    l->dev_tensors = (int)(l->capacity / l->tensor);
    l->opt_per_round = loop_optimum(l, l->spec.prefetch, LOOP_OPT_ROUNDS);
    l->floor_per_round = loop_optimum(l, 0, LOOP_OPT_ROUNDS);
    l->window_per_round = loop_optimum(l, l->spec.prefetch, l->rounds);
    l->restores = (double)l->restore_bytes / (double)l->tensor;
    if (!l->ideal_ok)
        return;
    l->d2h_gbs = (double)l->tensor / median(l->base_ns[0], LOOP_BASE_REPS);
    l->h2d_gbs = (double)l->tensor / median(l->base_ns[1], LOOP_BASE_REPS);
    l->pool_moves_s = ((double)l->spill_bytes / l->d2h_gbs +
                       (double)l->restore_bytes / l->h2d_gbs) / 1e9;
    if (l->opt_per_round < 0) {
        snprintf(l->why, sizeof(l->why), "the optimum could not be "
                 "computed (out of memory)");
        l->ideal_ok = false;
        return;
    }
    /* Each of the optimum's restores comes with one spill: the device
     * starts full and every tensor is written at each visit. */
    double opt_bytes = l->opt_per_round * l->rounds * (double)l->tensor;
    l->transfer_s = (opt_bytes / l->d2h_gbs + opt_bytes / l->h2d_gbs) / 1e9;
    l->ideal_s = l->transfer_s > l->touch_s ? l->transfer_s : l->touch_s;
}

void loop_judge(const struct loop_res *l, struct loop_verdict *v)
{
    *v = (struct loop_verdict){0};
    /* No restore needed and none made is on target; some made is not. */
    double opt = l->opt_per_round * l->rounds;

    if (l->opt_per_round == 0) {
        v->restores_known = true;
        v->restores_ok = l->restores == 0;
        v->restores_ratio = l->restores == 0 ? 1 : 0;
    } else if (l->opt_per_round > 0) {
        v->restores_known = true;
        v->restores_ratio = l->restores / opt;
        v->restores_ok = v->restores_ratio <= TARGET_RESTORES;
    }
    if (l->ideal_ok && l->ideal_s > 0) {
        v->wall_known = true;
        v->wall_ratio = l->wall_s / l->ideal_s;
        v->wall_ok = v->wall_ratio <= TARGET_LOOP;
    }
}

int bench_offload(const struct bench_offload_opts *o)
{
    struct off *x = calloc(1, sizeof(*x));
    char backend[16];
    int ret = 1;

    if (!x)
        return fail("calloc", -ENOMEM);
    x->o = o;
    x->disk.fd = -1;
    x->size = o->size ? o->size : DEFAULT_SIZE;
    x->reps = o->reps ? o->reps : DEFAULT_REPS;
    /* PCIe needs more than 256 MiB to reach its speed. */
    if (!o->size && o->config && conf_value(o->config, "backend", backend,
                                            sizeof(backend)) &&
        !strcmp(backend, "cuda"))
        x->size = CUDA_DEFAULT_SIZE;
    spill_dir_probe(&x->dir, o->dir);
    x->budget = o->budget ? o->budget : x->size / 2;
    /* X_D2H and X_H2D come first in enum xfer. */
    x->nmoves = o->host_moves ? X_H2D + 1 : X_COUNT;
    if (o->nloops > 0) {
        x->nloops = o->nloops;
        for (int m = 0; m < o->nloops; m++)
            x->loop[m].spec = o->loops[m];
    } else if (o->nloops == 0) {
        x->nloops = LOOP_FAMILY;
        for (int m = 0; m < LOOP_FAMILY; m++)
            x->loop[m].spec = loop_family[m];
    }
    if (make_configs(x) || xfer_run(x))
        goto out;
    for (int m = 0; m < x->nloops; m++) {
        if (loop_run(x, &x->loop[m]))
            goto out;
        loop_ideal(&x->loop[m]);
    }
    if (o->json)
        offload_print_json(x);
    else
        offload_print_table(x);
    ret = 0;
out:
    copy_cleanup(&x->copy);
    disk_cleanup(&x->disk);
    for (int m = 0; m < x->nloops; m++)
        free(x->loop[m].config);
    free(x->config);
    free(x);
    return ret;
}
