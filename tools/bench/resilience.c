/*
 * umpool-bench resilience: checkpoint, restore, suspend and resume of a
 * pool holding --size bytes (2 GiB by default) spread over 4 devices (sim
 * by default; --config backend:cuda,cuda_virtual_devices:4 on one GPU),
 * each next to its baseline timed in the same run: medians over --reps
 * rounds, and over RES_CYCLES alternated cycles per round for suspend,
 * resume and their baselines (see round_once):
 *
 *   checkpoint  ump_pool_checkpoint to a file in --dir, against a raw
 *               write of the same bytes to a new file in that directory,
 *               fsynced as a checkpoint must be (the io_uring O_DIRECT
 *               loop of the offload scenario's disk baseline, 1 MiB blocks
 *               at queue depth 32: offload_base.c's disk_durable)
 *   restore     ump_pool_restore of that file into a fresh pool (the old
 *               one freed and destroyed first), against a raw read of the
 *               raw file
 *   suspend     ump_pool_suspend(UMP_TIER_HOST), against the pool's own
 *               device->host moves: ump_evict(UMP_TIER_HOST) of the same
 *               allocations, the rate the offload scenario reports
 *   resume      ump_pool_resume, against ump_acquire of the evicted
 *               allocations (host->device moves)
 * Both moves start as suspend and resume do: after ump_trim, so that each
 * makes the memory it moves to (suspend gives the devices' memory back).
 * The same moves once more with that memory kept (warm: the offload
 * scenario's case) are shown beside them, for information.
 *
 * The device<->host copy rate (offload_base.c's baseline: memcpy on sim,
 * paced to the H200 model with sim_driver_costs:h200-timed, pinned
 * cuMemcpy on cuda) is printed too, as the physical limit of both
 * moves. Targets (issue 17):
 * checkpoint and restore at least 0.8 of the raw disk, suspend and resume
 * at least 0.9 of the pool's moves. Every round checks the data.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "offload.h"
#include "umpool.h"

#define NDEV 4
#define RES_REPS 3
#define RES_SIZE ((size_t)2 << 30)
/* Samples of the moves and the sleeps per round (round_once). */
#define RES_CYCLES 3

enum { R_CKPT, R_WRITE, R_RESTORE, R_READ, R_READ_NEW, R_SUSPEND, R_EVICT,
       R_RESUME, R_ACQUIRE, R_EVICT_WARM, R_ACQUIRE_WARM, R_SUSPEND2,
       R_RESUME2, R_COUNT };
/* Rows sampled once per round (the disk's); the others RES_CYCLES times. */
#define R_ONCE R_SUSPEND
static int samples_of(int k, int reps)
{
    return k < R_ONCE ? reps : reps * RES_CYCLES;
}
static const char *const row_name[R_COUNT] = {
    "checkpoint", "raw write+fsync", "restore", "raw read",
    "raw read, new memory", "suspend", "ump_evict to host", "resume",
    "ump_acquire back", "ump_evict, warm", "ump_acquire, warm",
    "suspend, again", "resume, again"};
/* The table: each operation beside its baselines, with the target. */
static const struct { int op, base; const char *target; } table[] = {
    {R_CKPT, R_WRITE, ">=0.8"},     {R_RESTORE, R_READ, ">=0.8"},
    {R_RESTORE, R_READ_NEW, ">=0.8"}, {R_SUSPEND, R_EVICT, ">=0.9"},
    {R_RESUME, R_ACQUIRE, ">=0.9"},  {R_SUSPEND2, R_EVICT_WARM, "-"},
    {R_RESUME2, R_ACQUIRE_WARM, "-"}};

struct res_run {
    ump_pool_t *pool;
    void *p[NDEV];
    size_t each; /* bytes per device */
    char config[1024];
    char path[PATH_MAX + 32];
};

static int say(const char *what, int rc)
{
    if (rc)
        fprintf(stderr, "umpool-bench resilience: %s: %s\n", what,
                ump_strerror(rc));
    return rc;
}

/* A word of the pattern: allocation d, offset i. */
static uint64_t word(int d, size_t i)
{
    return ((uint64_t)d << 56) ^ (i * 0x9e3779b97f4a7c15ull);
}

/* Fills (or checks) every allocation, through a host buffer and the
 * pool's copies, so that it runs on any backend. */
static int pattern(struct res_run *x, bool check)
{
    size_t piece = 64 * MiB < x->each ? 64 * MiB : x->each;
    uint64_t *buf = malloc(piece);
    if (!buf)
        return say("pattern", -ENOMEM);
    int rc = 0;
    for (int d = 0; d < NDEV && !rc; d++)
        for (size_t off = 0; off < x->each && !rc; off += piece) {
            char *at = (char *)x->p[d] + off;
            size_t n = piece / sizeof(uint64_t), i0 = off / sizeof(uint64_t);
            if (check) {
                rc = ump_memcpy_async(x->pool, buf, at, piece, NULL);
                for (size_t i = 0; i < n && !rc; i++)
                    if (buf[i] != word(d, i0 + i))
                        rc = say("the data changed", -EILSEQ);
            } else {
                for (size_t i = 0; i < n; i++)
                    buf[i] = word(d, i0 + i);
                rc = ump_memcpy_async(x->pool, at, buf, piece, NULL);
            }
            if (!rc)
                rc = ump_stream_synchronize(x->pool, NULL);
        }
    free(buf);
    return rc ? say("the data", rc) : 0;
}

static int setup(struct res_run *x)
{
    int rc = say("ump_pool_create", ump_pool_create(x->config, &x->pool));
    for (int d = 0; d < NDEV && !rc; d++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = d;
        rc = say("ump_alloc", ump_alloc(x->pool, x->each, &h, &x->p[d]));
    }
    return rc ? rc : pattern(x, false);
}

static double secs(uint64_t t0)
{
    return (double)(now_ns() - t0) / 1e9;
}

/* The raw baselines of one direction: the write into t[R_WRITE], or both
 * reads (into reused buffers, into new memory) into t[R_READ..]. */
static int raw(const char *raw_path, size_t size, bool write, int round,
               double *t)
{
    double ns;
    if (write) {
        int rc = disk_durable(raw_path, size, true, false, &ns);
        t[R_WRITE] = ns / 1e9;
        return say("raw write", rc);
    }
    /* The two reads take turns at going first: the second finds the disk
     * (or the host's cache) warmer. */
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        bool fresh = (i + round) % 2;
        rc = disk_durable(raw_path, size, false, fresh, &ns);
        t[fresh ? R_READ_NEW : R_READ] = ns / 1e9;
    }
    if (!write)
        unlink(raw_path);
    return say(write ? "raw write" : "raw read", rc);
}

/* The pool's own moves of the 2 GiB (evict, then acquire back), from the
 * state suspend and resume start from: no pinned host memory made ahead
 * (trimmed), and the device memory given back before the way up (suspend
 * gives it back, so resume makes it anew; ump_acquire after ump_trim too).
 * Then, with that memory kept (host pieces freed to the tier, device
 * chunks cached), the same moves again: the rates the offload scenario
 * reports, which suspend and resume cannot have (suspend gives the
 * devices' memory back, by definition). */
static int moves(struct res_run *x, double *t)
{
    int rc = 0;
    ump_trim(x->pool);
    uint64_t t0 = now_ns();
    for (int d = 0; d < NDEV && !rc; d++)
        rc = say("ump_evict", ump_evict(x->pool, x->p[d], 0, UMP_TIER_HOST));
    t[R_EVICT] = secs(t0);
    ump_trim(x->pool);
    t0 = now_ns();
    for (int d = 0; d < NDEV && !rc; d++) {
        rc = say("ump_acquire", ump_acquire(x->pool, x->p[d], 0, d, NULL));
        if (!rc)
            rc = say("ump_release", ump_release(x->pool, x->p[d], 0));
    }
    t[R_ACQUIRE] = secs(t0);
    t0 = now_ns();
    for (int d = 0; d < NDEV && !rc; d++)
        rc = say("ump_evict", ump_evict(x->pool, x->p[d], 0, UMP_TIER_HOST));
    t[R_EVICT_WARM] = secs(t0);
    t0 = now_ns();
    for (int d = 0; d < NDEV && !rc; d++) {
        rc = say("ump_acquire", ump_acquire(x->pool, x->p[d], 0, d, NULL));
        if (!rc)
            rc = say("ump_release", ump_release(x->pool, x->p[d], 0));
    }
    t[R_ACQUIRE_WARM] = secs(t0);
    return rc;
}

/* A suspend and resume cycle from the same cold state (trimmed), then a
 * second one, as a server that sleeps and wakes does: the pinned host
 * memory of the first one is still the tier's. */
static int sleeps(struct res_run *x, double *t)
{
    ump_trim(x->pool);
    uint64_t t0 = now_ns();
    int rc = say("ump_pool_suspend", ump_pool_suspend(x->pool, UMP_TIER_HOST));
    t[R_SUSPEND] = secs(t0);
    t0 = now_ns();
    if (!rc)
        rc = say("ump_pool_resume", ump_pool_resume(x->pool));
    t[R_RESUME] = secs(t0);
    t0 = now_ns();
    if (!rc)
        rc = say("ump_pool_suspend", ump_pool_suspend(x->pool, UMP_TIER_HOST));
    t[R_SUSPEND2] = secs(t0);
    t0 = now_ns();
    if (!rc)
        rc = say("ump_pool_resume", ump_pool_resume(x->pool));
    t[R_RESUME2] = secs(t0);
    return rc;
}

/* One round: checkpoint and restore with the disk's baselines, into
 * t[0 .. R_ONCE) (odd rounds run each baseline after its operation, even
 * ones before, so that a disk whose speed drifts weighs on both alike);
 * then RES_CYCLES cycles of the moves and the sleeps, cycle c's into
 * t[R_COUNT * c + R_ONCE .. R_COUNT * (c + 1)). */
static int round_once(struct res_run *x, const char *raw_path, size_t size,
                      int round, double *t)
{
    bool base_first = round % 2 == 0;
    int rc = base_first ? raw(raw_path, size, true, round, t) : 0;
    uint64_t t0 = now_ns();
    if (!rc)
        rc = say("ump_pool_checkpoint",
                 ump_pool_checkpoint(x->pool, x->path));
    t[R_CKPT] = secs(t0);
    if (!rc && !base_first)
        rc = raw(raw_path, size, true, round, t);
    for (int d = 0; d < NDEV && !rc; d++)
        rc = say("ump_free", ump_free(x->pool, x->p[d]));
    if (!rc)
        rc = say("ump_pool_destroy", ump_pool_destroy(x->pool));
    if (rc)
        return rc;
    x->pool = NULL;
    rc = base_first ? raw(raw_path, size, false, round, t) : 0;
    t0 = now_ns();
    if (!rc)
        rc = say("ump_pool_restore",
                 ump_pool_restore(x->path, NULL, &x->pool));
    t[R_RESTORE] = secs(t0);
    unlink(x->path);
    if (!rc && !base_first)
        rc = raw(raw_path, size, false, round, t);
    if (rc || (rc = pattern(x, true)))
        return rc;

    /* The moves and the sleeps, each sample from the same cold state,
     * RES_CYCLES times per round, taking turns at going first: on this
     * kind of machine one cold move of 2 GiB varies up to twofold from
     * one try to the next (page faults of fresh memory), so a round's
     * single pair would say more about the moment than about the two. */
    for (int c = 0; c < RES_CYCLES && !rc; c++) {
        double *m = t + R_COUNT * (size_t)c;
        bool sleeps_first = (round + c) % 2;
        if (sleeps_first)
            rc = sleeps(x, m);
        if (!rc)
            rc = moves(x, m);
        if (!rc && !sleeps_first)
            rc = sleeps(x, m);
    }
    return rc ? rc : pattern(x, true);
}

int bench_resilience(const struct bench_offload_opts *o)
{
    struct res_run x = {0};
    size_t size = o->size ? o->size : RES_SIZE;
    int reps = o->reps ? o->reps : RES_REPS;
    if (size % (NDEV * 2 * MiB)) {
        fprintf(stderr, "umpool-bench resilience: --size must be a multiple "
                        "of %zu MiB\n", (size_t)NDEV * 2);
        return 1;
    }
    x.each = size / NDEV;
    struct spill_dir dir;
    spill_dir_probe(&dir, o->dir);
    snprintf(x.path, sizeof(x.path), "%s/umpool-bench-%ld.ckpt", dir.path,
             (long)getpid());
    /* Room on each device for its share, the host tier for all of it. */
    snprintf(x.config, sizeof(x.config),
             "backend:sim,sim_devices:%d,sim_device_mem:%zuM,chunk_size:2M,"
             "host_limit:%zuM,host_reserve:0,publish:false%s%s",
             NDEV, x.each / MiB + 64, size / MiB + 64,
             o->config ? "," : "", o->config ? o->config : "");
    char raw_path[PATH_MAX + 32];
    snprintf(raw_path, sizeof(raw_path), "%s/umpool-bench-%ld.raw",
             dir.path, (long)getpid());
    static double t[R_COUNT][BENCH_OFFLOAD_MAX_REPS * RES_CYCLES];
    double mem_ns[2];
    int rc = setup(&x);
    /* The link the moves cross, on the backend that ran (the config may
     * name another than sim). */
    const char *backend = x.pool ? ump_backend_name(x.pool) : "none";
    struct copy_base copy;
    copy_setup(&copy, !strcmp(backend, "cuda"), 64 * MiB,
               offload_pace(x.config, backend));
    for (int r = 0; r < reps && !rc; r++) {
        double one[R_COUNT * RES_CYCLES];
        rc = round_once(&x, raw_path, size, r, one);
        for (int k = 0; k < R_COUNT; k++)
            for (int c = 0; c < (k < R_ONCE ? 1 : RES_CYCLES); c++)
                t[k][k < R_ONCE ? r : r * RES_CYCLES + c] =
                    one[c * R_COUNT + k];
    }
    if (copy.ok) {
        copy_run(&copy, true, &mem_ns[0]);
        copy_run(&copy, false, &mem_ns[1]);
    }
    if (!rc) {
        char sz[32];
        double gbs[R_COUNT];
        for (int k = 0; k < R_COUNT; k++)
            gbs[k] = (double)size / median(t[k], samples_of(k, reps)) / 1e9;
        printf("umpool-bench resilience: %s over %d devices of the %s "
               "backend, files in %s; medians of %d rounds (checkpoint, "
               "restore and the disk) and of %d alternated cycles (suspend, "
               "resume and the moves)\n",
               fmt_size(size, sz, sizeof(sz)), NDEV, backend, dir.path, reps,
               reps * RES_CYCLES);
        printf("%-22s %9s %9s %-22s %9s %7s %7s\n", "operation", "s", "GB/s",
               "baseline", "GB/s", "ratio", "target");
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
            int k = table[i].op, b = table[i].base;
            printf("%-22s %9.3f %9.2f %-22s %9.2f %7.2f %7s\n", row_name[k],
                   median(t[k], samples_of(k, reps)), gbs[k], row_name[b],
                   gbs[b], gbs[k] / gbs[b], table[i].target);
        }
        if (copy.ok)
            printf("%s, 64 MiB: %.2f GB/s down, %.2f GB/s up (%s)\n",
                   copy.cuda ? "pinned cuMemcpy" : "raw memcpy",
                   (double)(64 * MiB) / mem_ns[0],
                   (double)(64 * MiB) / mem_ns[1],
                   copy.cuda ? "the GPU's device<->host link"
                             : "the sim's device<->host limit");
        else
            printf("device<->host copy baseline: not measured (%s)\n",
                   copy.why);
    }
    for (int d = 0; x.pool && d < NDEV; d++)
        if (x.p[d])
            ump_free(x.pool, x.p[d]);
    if (x.pool)
        ump_pool_destroy(x.pool);
    unlink(x.path);
    unlink(raw_path);
    copy_cleanup(&copy);
    /* 77, automake's SKIP: no device to run on (no GPU, no driver), which
     * scripts/gpu-check tells from a failure of the bench itself. */
    return rc == -ENODEV ? 77 : rc ? 1 : 0;
}
