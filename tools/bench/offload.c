/*
 * umpool-bench offload: the host and NVMe tiers, next to raw baselines
 * timed in the same run.
 *
 * (a) One offloadable allocation of --size bytes on device 0 goes round the
 *     tiers; every move is timed on its own, the median over --reps:
 *       device->host   ump_evict(UMP_TIER_HOST)
 *       host->NVMe     ump_evict(UMP_TIER_NVME) of the host-resident data
 *       NVMe->device   ump_acquire of the NVMe-resident data
 *       device->NVMe   ump_evict(UMP_TIER_NVME) of the device-resident data
 *       NVMe->host     ump_prefetch(UMP_LOC_HOST), then ump_ptr_info polled
 *                      until every chunk is on the host tier
 *       host->device   ump_acquire of the host-resident data
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
 * (b) Offloadable tensors, 3x the device budget (device_mem) in all, visited
 *     in order for a few rounds after an untimed one: prefetch the next
 *     ones, acquire, check the last round's value, ump_memset_async,
 *     release. The wall time runs from the first timed visit until the
 *     prefetches the last one made have ended (the untimed round's have
 *     ended before it starts), and is set against the ideal: the fewest bytes any eviction policy must move
 *     for the timed rounds' accesses (Belady's rule on them, with the
 *     device's capacity in tensors and the prefetch distance, from the
 *     best device contents: offload_opt.c; each restore needs a spill, as
 *     the device starts full and every tensor is written at each visit) at
 *     the raw device<->host bandwidths, or the touches' own time when that
 *     is longer (a perfect pipeline hides the shorter of the two). The
 *     pool's own moves (ump_stats' spill_bytes and restore_bytes deltas)
 *     are reported next to it, never used as the baseline: extra moves
 *     would inflate the very figure they are judged against. The pool's
 *     restores per round are set against the optimum's too. The raw
 *     bandwidths are timed on copies of one
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
    if (sim)
        snprintf(dev, sizeof(dev),
                 "backend:sim,sim_devices:1,sim_device_mem:%zu,", x->budget);
    /* Room on the host for every tensor: the loop measures device<->host. */
    snprintf(own, sizeof(own), "%sdevice_mem:%zu,host_limit:%zu,nvme_dir:%s",
             dev, x->budget, 4 * x->budget, x->dir.path);
    x->loop_config = join_config(own, user);
    if (!x->config || !x->loop_config)
        return fail("config", -ENOMEM);
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

/* Every move once, from and back to the device (released), each next to
 * its baseline. Each step starts where the one before left the data. */
static int xfer_rep(struct off *x, int r)
{
    static const struct {
        enum xfer dir;
        enum op op;
    } steps[] = {
        {X_D2H, OP_EVICT_HOST}, {X_H2N, OP_EVICT_NVME},
        {X_N2D, OP_ACQUIRE},    {X_D2N, OP_EVICT_NVME},
        {X_N2H, OP_PREFETCH_HOST}, {X_H2D, OP_ACQUIRE},
    };

    /* Which of the two goes first alternates: a disk (or a virtual one
     * with a cache in front) is often slower for the second of two writes
     * in a row, and neither side should always be the second. */
    bool base_first = r % 2 == 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (base_first)
            base_timed(x, steps[i].dir, r);
        if (ump_timed(x, steps[i].op, &x->ump_ns[steps[i].dir][r]))
            return 1;
        if (!base_first)
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

    for (int d = 0; d < X_COUNT; d++)
        x->ump_gbs[d] = bytes / median(x->ump_ns[d], (size_t)x->reps);
    x->base_ok[X_D2H] = x->base_ok[X_H2D] = x->copy.ok;
    x->base_ok[X_H2N] = x->base_ok[X_N2H] = x->disk.ok;
    for (size_t l = 0; l < 2; l++) {
        enum xfer d = legs[l][0], a = legs[l][1], b = legs[l][2];

        x->base_ok[d] = x->base_ok[a] && x->base_ok[b];
        for (int r = 0; x->base_ok[d] && r < x->reps; r++)
            x->base_ns[d][r] = x->base_ns[a][r] > x->base_ns[b][r]
                                   ? x->base_ns[a][r] : x->base_ns[b][r];
    }
    for (int d = 0; d < X_COUNT; d++)
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
    for (int r = 0; r < x->reps; r++)
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

/* The memset rate of a resident tensor (the last one touched): what the
 * touches cost without any move. 0, or 1 after printing why. */
static int loop_touch_rate(struct off *x, ump_pool_t *pool, ump_stream_t s,
                           void *t, double *gbs_p)
{
    double ns[BENCH_OFFLOAD_MAX_REPS];
    int rc = ump_acquire(pool, t, 0, 0, s);

    if (rc)
        return fail("ump_acquire", rc);
    for (int r = 0; !rc && r < x->reps; r++) {
        uint64_t t0 = now_ns();

        rc = ump_memset_async(pool, t, loop_val(LOOP_TENSORS - 1, 0),
                              x->loop.tensor, s);
        if (!rc)
            rc = ump_stream_synchronize(pool, s);
        ns[r] = (double)(now_ns() - t0);
    }
    ump_release(pool, t, 0);
    if (rc)
        return fail("ump_memset_async", rc);
    *gbs_p = (double)x->loop.tensor / median(ns, (size_t)x->reps);
    return 0;
}

/* The raw device<->host copies of one tensor through c (set up for that
 * size): reps [from, to) of each direction, alternating, into
 * res->base_ns. A failure leaves c->ok false, with c->why. */
static void loop_base(struct loop_res *res, struct copy_base *c, int from,
                      int to)
{
    for (int r = from; c->ok && r < to; r++) {
        copy_run(c, true, &res->base_ns[0][r]);
        if (c->ok)
            copy_run(c, false, &res->base_ns[1][r]);
    }
}

/* Waits until the prefetches the last visits of a round made (of the next
 * round's first tensors) have ended: the timed rounds start with none of
 * the untimed round's moves in flight, and end with all of their own done,
 * so that ump_stats counts exactly the moves of the timed rounds' calls,
 * the accesses the optimum is computed for. 0, or 1 after printing why. */
static int loop_settle(ump_pool_t *pool, void **t, size_t size)
{
    int found = -1;

    for (int k = 0; k < LOOP_PREFETCH; k++) {
        int rc = tier_walk(pool, t[k], size, UMP_TIER_DEVICE, true, &found);

        if (rc == -EPROTO && found >= 0) {
            fprintf(stderr, "umpool-bench: offload: a prefetched tensor is "
                    "on tier %d, not on the device\n", found);
            return 1;
        }
        if (rc)
            return fail("waiting for the prefetches", rc);
    }
    return 0;
}

/* One untimed round of the loop, then the timed rounds between two
 * ump_stats. 0, or 1 after printing why. */
static int loop_rounds(struct off *x, ump_pool_t *pool, ump_stream_t s,
                       ump_stream_t cs, void **t)
{
    struct loop_res *res = &x->loop;
    ump_stats_t before, after;
    ump_tier_stats_t nvme;
    uint64_t t0 = now_ns(), t1, acq = 0, pre = 0;
    int rc = 0;

    for (int r = 1; r <= 1 + LOOP_ROUNDS; r++) {
        /* The first round brings the pool to its steady state (the host
         * chunks the cycle needs made, both workers running), as the first
         * steps of a training run do; the timed ones repeat it. */
        if (r == 2) {
            res->first_s = (double)(now_ns() - t0) / 1e9;
            if (loop_settle(pool, t, res->tensor))
                return 1;
            if ((rc = ump_stats(pool, UMP_DEVICE_ALL, &before)))
                return fail("ump_stats", rc);
            acq = pre = 0;
            t0 = now_ns();
        }
        for (int i = 0; i < LOOP_TENSORS; i++) {
            /* On their own stream, as a training loop's copies are. */
            t1 = now_ns();
            for (int k = 1; !rc && k <= LOOP_PREFETCH; k++)
                rc = ump_prefetch(pool, t[(i + k) % LOOP_TENSORS], 0, 0, cs);
            pre += now_ns() - t1;
            if (rc)
                return fail("ump_prefetch", rc);
            if (loop_visit(pool, s, t, res->tensor, i, r, &acq))
                return 1;
        }
    }
    if (loop_settle(pool, t, res->tensor))
        return 1;
    res->wall_s = (double)(now_ns() - t0) / 1e9;
    res->acquire_s = (double)acq / 1e9;
    res->prefetch_s = (double)pre / 1e9;
    rc = ump_stats(pool, UMP_DEVICE_ALL, &after);
    if (!rc)
        rc = ump_tier_stats(pool, UMP_TIER_NVME, &nvme);
    if (rc)
        return fail("ump_stats", rc);
    res->spill_bytes = after.spill_bytes - before.spill_bytes;
    res->restore_bytes = after.restore_bytes - before.restore_bytes;
    res->evictions = after.evictions - before.evictions;
    res->nvme_used = nvme.peak_bytes > 0;
    return 0;
}

/* Part (b). 0, or 1 after printing why. */
static int loop_run(struct off *x)
{
    struct loop_res *res = &x->loop;
    struct copy_base base = {0}; /* the raw copies of one tensor */
    ump_hints_t hints = UMP_HINTS_INIT;
    void *t[LOOP_TENSORS] = {0};
    ump_stream_t s, cs;
    ump_pool_t *pool;
    ump_stats_t st;
    uint64_t untimed = 0;
    int ret = 1, rc;

    res->tensor = x->budget / LOOP_PER_BUDGET;
    res->tensors = LOOP_TENSORS;
    res->rounds = LOOP_ROUNDS;
    rc = ump_pool_create(x->loop_config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: offload: ump_pool_create(\"%s\"): "
                "%s\n", x->loop_config, ump_strerror(rc));
        return 1;
    }
    rc = ump_stats(pool, 0, &st);
    if (rc) {
        fail("ump_stats", rc);
        goto out_pool;
    }
    res->capacity = st.capacity;
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
    for (int i = 0; i < LOOP_TENSORS; i++) {
        rc = ump_alloc(pool, res->tensor, &hints, &t[i]);
        if (rc) {
            char what[64];
            snprintf(what, sizeof(what), "ump_alloc of loop tensor %d", i);
            alloc_fail(pool, what, rc);
            goto out_free;
        }
    }
    /* Round 0 writes every tensor once: the pool moves them down as the
     * later ones come, so that the timed rounds start in steady state. */
    for (int i = 0; i < LOOP_TENSORS; i++)
        if (loop_visit(pool, s, t, res->tensor, i, 0, &untimed))
            goto out_free;
    if (loop_touch_rate(x, pool, s, t[LOOP_TENSORS - 1], &res->touch_gbs))
        goto out_free;
    copy_setup(&base, x->copy.cuda, res->tensor, x->copy.pace);
    loop_base(res, &base, 0, LOOP_BASE_REPS / 2);
    if (loop_rounds(x, pool, s, cs, t))
        goto out_free;
    loop_base(res, &base, LOOP_BASE_REPS / 2, LOOP_BASE_REPS);
    res->ideal_ok = base.ok;
    if (!base.ok)
        snprintf(res->why, sizeof(res->why), "%s", base.why);
    ret = 0;
out_free:
    copy_cleanup(&base);
    for (int i = 0; i < LOOP_TENSORS; i++) {
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
 * The fewest restores the timed rounds need: Belady's rule on their
 * accesses through a device of res->dev_tensors, from the best contents
 * (whatever the untimed round left, no policy does better); -1 when it
 * cannot be computed. With prefetch LOOP_PREFETCH, each ump_prefetch is an
 * access where the loop calls it, before the visit's acquire: the optimum
 * of a policy that does what it is asked when it is asked. A pool whose
 * worker gets to a prefetch only after the visit's release may evict the
 * visit's tensor for it, which that sequence forbids, and come in below;
 * with prefetch 0 (acquires only), no policy can: the floor.
 */
static long loop_optimum(const struct loop_res *res, int prefetch)
{
    size_t n = opt_loop_refs(LOOP_TENSORS, LOOP_ROUNDS, prefetch, NULL);
    int *refs = malloc(n * sizeof(*refs));
    long m = -1;

    if (refs && res->dev_tensors > 0) {
        opt_loop_refs(LOOP_TENSORS, LOOP_ROUNDS, prefetch, refs);
        m = opt_misses(refs, n, LOOP_TENSORS, res->dev_tensors, NULL,
                       OPT_BEST_START);
    }
    free(refs);
    return m;
}

/* The loop's ideal from the optimum's moves, its raw bandwidths and the
 * touch rate. */
static void loop_ideal(struct off *x)
{
    struct loop_res *res = &x->loop;
    double touched = (double)res->tensor * LOOP_TENSORS * LOOP_ROUNDS;

    res->touch_s = touched / res->touch_gbs / 1e9;
    res->dev_tensors = (int)(res->capacity / res->tensor);
    res->opt_restores = loop_optimum(res, LOOP_PREFETCH);
    res->floor_restores = loop_optimum(res, 0);
    res->restores = (double)res->restore_bytes / (double)res->tensor;
    if (!res->ideal_ok)
        return;
    res->d2h_gbs = (double)res->tensor / median(res->base_ns[0],
                                                LOOP_BASE_REPS);
    res->h2d_gbs = (double)res->tensor / median(res->base_ns[1],
                                                LOOP_BASE_REPS);
    res->pool_moves_s = ((double)res->spill_bytes / res->d2h_gbs +
                         (double)res->restore_bytes / res->h2d_gbs) /
                        1e9;
    if (res->opt_restores < 0) {
        snprintf(res->why, sizeof(res->why), "the optimum could not be "
                 "computed (out of memory)");
        res->ideal_ok = false;
        return;
    }
    /* Each of the optimum's restores comes with one spill: the device
     * starts full and every tensor is written at each visit. */
    double opt_bytes = (double)res->opt_restores * (double)res->tensor;
    res->transfer_s = (opt_bytes / res->d2h_gbs + opt_bytes / res->h2d_gbs) /
                      1e9;
    res->ideal_s = res->transfer_s > res->touch_s ? res->transfer_s
                                                  : res->touch_s;
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
    if (make_configs(x))
        goto out;
    if (xfer_run(x) || loop_run(x))
        goto out;
    loop_ideal(x);
    if (o->json)
        offload_print_json(x);
    else
        offload_print_table(x);
    ret = 0;
out:
    copy_cleanup(&x->copy);
    disk_cleanup(&x->disk);
    free(x->loop_config);
    free(x->config);
    free(x);
    return ret;
}

