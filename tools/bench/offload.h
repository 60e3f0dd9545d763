/*
 * umpool-bench offload: what its three files share. offload.c runs the
 * scenario (the moves between tiers and the oversubscribed loop),
 * offload_base.c the raw baselines it is compared with (the spill
 * directory, device<->host copies, host<->NVMe disk I/O by fio or
 * io_uring), offload_report.c prints the results.
 */
#ifndef UMP_BENCH_OFFLOAD_H
#define UMP_BENCH_OFFLOAD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "cuda_loader.h"
#include "umpool.h"

#define DEFAULT_SIZE (256 * MiB)
#define CUDA_DEFAULT_SIZE (1024 * MiB) /* with backend:cuda in --config */
#define DEFAULT_REPS 5 /* a noisy machine needs more than 3 */
#define FILL 0x5a /* the contents of (a)'s allocation */

/* The disk pattern of the baselines, fio's and ours. */
#define IO_BLOCK MiB
#define IO_DEPTH 32
#define IO_ALIGN 4096

/* ump_prefetch to the host has no completion call: poll this often. */
#define POLL_NS 20000L
#define POLL_MAX_NS (60 * 1000000000ull)

/* A loop's device holds D of its tensors, which are budget / max(D,
 * LOOP_PER_BUDGET, N / LOOP_TIMES_BUDGET) rounded down to a power of two:
 * as in the first member (12 of budget / 4), at most 3x the budget in
 * all, so that a member with more tensors or slots takes no longer. */
#define LOOP_PER_BUDGET 4
#define LOOP_TIMES_BUDGET 3
/* Untimed rounds before the timed ones: the pool predicts a tensor's next
 * use from its last two acquires, so it has seen the cycle only once
 * every tensor was acquired twice (the first round writes them). */
#define LOOP_WARM_ROUNDS 2
/* Timed rounds: at least LOOP_ROUNDS, and LOOP_MIN_VISITS visits, so that
 * a short cycle's few restores a round are not judged on a handful (one
 * restore more is 11% of 9). */
#define LOOP_ROUNDS 3
#define LOOP_MIN_VISITS 36
#define LOOP_BASE_REPS 8 /* raw copies of one tensor, each way */
/* Rounds Belady's rule runs for a loop's sustained optimum: its start
 * (the best contents) saves at most a device's worth of restores, under
 * an eighth of a tensor per round here. */
#define LOOP_OPT_ROUNDS 64
/* The end of a loop's moves, which no call reports: the pool's move
 * counters unchanged for this long, or for LOOP_QUIET_COPIES copies of one
 * tensor at the raw rate if longer (a move of the loop never lasts that
 * long). */
#define LOOP_QUIET_MIN_NS (50 * 1000000ull)
#define LOOP_QUIET_COPIES 4

#define TARGET_XFER 0.9 /* umpool / raw, at least */
#define TARGET_XFER_SMALL 0.8 /* device<->host below 1 GiB (issue 29) */
#define TARGET_LOOP 1.15 /* wall / ideal, at most */
#define TARGET_RESTORES 1.10 /* restores / Belady's optimum, at most */

/* The moves of (a), in the order of the table (device<->host first:
 * --moves host runs those two only). */
enum xfer { X_D2H, X_H2D, X_H2N, X_N2H, X_D2N, X_N2D, X_COUNT };

struct xfer_desc {
    const char *key, *label, *call;
    double target; /* 0: none */
};

/* ---- the spill directory ------------------------------------------------ */

struct spill_dir {
    char path[PATH_MAX];
    bool tmpfs;
    bool tmpdir_skipped; /* $TMPDIR was tmpfs, so /var/tmp is used */
    bool direct;         /* an O_DIRECT write worked there */
    bool uring;          /* this build could set up an io_uring */
    char why[300];       /* why one of the two did not */
};

/* Picks the directory (dir, or NULL: $TMPDIR unless tmpfs, else /var/tmp)
 * and finds out what the NVMe store can use there. */
void spill_dir_probe(struct spill_dir *d, const char *dir);

/* ---- device<->host baseline --------------------------------------------- */

/* memcpy between two buffers on sim, pinned cuMemcpy on cuda. On the sim
 * with sim_driver_costs:h200-timed, the memcpy paced to the model's pinned
 * cuMemcpy (lib/topo/drivercost.c: latency, rate, sync), times the sim's
 * time scale: the physical limit the model says, as cuMemcpy is on a GPU. */
struct copy_base {
    bool ok;
    bool cuda;
    unsigned pace; /* the sim's time scale when paced, else 0 */
    const char *name; /* short, for the table */
    char why[300];
    size_t size;
    void *dev, *host; /* sim: the two buffers */
#ifdef BENCH_CUDA
    struct bench_cu drv;
    CUdeviceptr dptr;
#endif
};

/* pace: offload_pace's. */
void copy_setup(struct copy_base *c, bool cuda, size_t size, unsigned pace);
void copy_cleanup(struct copy_base *c);
/* The model's rate of a paced copy of c->size bytes (GB/s), times the
 * scale; 0 when not paced. */
double copy_model_gbs(const struct copy_base *c);
/* One copy of c->size bytes, timed into *ns_p; on failure c->ok goes
 * false with why set. */
void copy_run(struct copy_base *c, bool to_host, double *ns_p);

/* The sim's time scale when the pools made with config (UMPOOL_CONF, then
 * config key by key, as the library reads them) run the sim backend (the
 * one ump_backend_name said) with sim_driver_costs:h200-timed; else 0. */
unsigned offload_pace(const char *config, const char *backend);

/* ---- host<->NVMe baseline ----------------------------------------------- */

enum disk_kind { DISK_NONE, DISK_FIO, DISK_URING };

struct disk_base {
    enum disk_kind kind;
    bool ok;
    char why[600];
    char fio[PATH_MAX];  /* fio's path */
    char file[PATH_MAX]; /* fio's file */
    int fd;              /* ours: an O_DIRECT file, unlinked */
    void *bufs[IO_DEPTH];
    char *dest; /* disk_durable: a fresh destination of size bytes, or NULL */
};

/* fio when it is in PATH, else an io_uring loop, else nothing (why). */
void disk_setup(struct disk_base *d, const struct spill_dir *dir,
                size_t size);
void disk_cleanup(struct disk_base *d);
/* One pass of size bytes; on failure d->ok goes false with why set. */
void disk_run(struct disk_base *d, size_t size, bool write, double *ns_p);
const char *disk_name(const struct disk_base *d);
/* What a checkpoint must do at least, timed whole: size bytes written to a
 * new file at path (O_DIRECT, the same io_uring loop as disk_run's) and
 * fsynced (write), or read back from it: into the loop's reused buffers,
 * or (fresh) into size bytes of new memory, each block in its place, as a
 * restore must. 0, -ENOTSUP without liburing, or the error. */
int disk_durable(const char *path, size_t size, bool write, bool fresh,
                 double *ns_p);

/* ---- the run ------------------------------------------------------------ */

struct loop_res {
    struct bench_loop spec; /* tensors, device slots, prefetch depth */
    char *config;           /* its pool's */
    size_t capacity; /* device 0's, as ump_stats gives it */
    size_t tensor;
    int rounds;
    double wall_s;
    double first_s;               /* the untimed rounds */
    double acquire_s, prefetch_s; /* inside those calls, of wall_s */
    uint64_t spill_bytes, restore_bytes, evictions;
    int dev_tensors;     /* tensors the device holds: capacity / tensor */
    /* Belady's restores per round, sustained (offload.c: loop_optimum);
     * -1: unknown */
    double opt_per_round;
    double floor_per_round;  /* the same for the acquires alone */
    double window_per_round; /* Belady's for the timed rounds alone, from
                                the best contents */
    double restores;     /* the pool's, in tensors: restore_bytes / tensor */
    double touch_gbs;         /* ump_memset_async on a resident tensor */
    double base_ns[2][LOOP_BASE_REPS]; /* raw copies of one tensor: */
    double d2h_gbs, h2d_gbs;           /* device->host, host->device */
    char why[300];                     /* why there are none */
    double pool_moves_s; /* the pool's own moved bytes at the raw rates */
    double transfer_s;   /* the optimum's moves of the timed rounds, each
                            way */
    double touch_s, ideal_s;
    bool ideal_ok; /* the raw copies ran */
    bool nvme_used; /* the NVMe tier held data: the ideal is a lower bound */
};

/* A member's verdicts: ratios, and whether they meet the targets (a ratio
 * that cannot be computed is no verdict: n/a). */
struct loop_verdict {
    double restores_ratio, wall_ratio;
    bool restores_known, wall_known;
    bool restores_ok, wall_ok;
};
void loop_judge(const struct loop_res *l, struct loop_verdict *v);

struct off {
    const struct bench_offload_opts *o;
    size_t size, budget;
    int reps;
    struct spill_dir dir;
    char engine[64];    /* what the NVMe store should use, and why */
    char *config;       /* (a)'s pool */
    bool sim_machine;   /* the scenario sets the sim's machine up */
    const char *backend;
    int nmoves; /* (a)'s moves: X_COUNT, or the first two (--moves host) */
    struct copy_base copy;
    struct disk_base disk;
    ump_pool_t *pool;
    ump_stream_t stream;
    void *p; /* (a)'s allocation */
    double ump_ns[X_COUNT][BENCH_OFFLOAD_MAX_REPS];
    double base_ns[X_COUNT][BENCH_OFFLOAD_MAX_REPS];
    double ump_gbs[X_COUNT], base_gbs[X_COUNT];
    bool base_ok[X_COUNT];
    int nloops; /* (b)'s members; 0: (b) not run */
    struct loop_res loop[BENCH_OFFLOAD_MAX_LOOPS];
};

/* The results on stdout, as JSON or as a table. */
void offload_print_json(const struct off *x);
void offload_print_table(const struct off *x);

#endif
