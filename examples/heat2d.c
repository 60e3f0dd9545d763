/*
 * heat2d: 2D heat diffusion with umpool's direct C API, the way a
 * simulation code uses it.
 *
 * The plate is NY rows by NX columns. Its edges are fixed (Dirichlet): the
 * row above the plate is held at 1.0 (the hot top edge), the row below and
 * the outermost columns at 0.0. Each step is a Jacobi sweep of the 5-point
 * stencil: every inner cell becomes the mean of its four neighbours of the
 * previous step.
 *
 * The rows are split in blocks over every rank of a communicator, one rank
 * per device of the pool (and, built with -DHEAT2D_MPI, per device of every
 * process's pool). A rank's block lives in pool memory on its device, with
 * one halo row above and below that each step fills with the neighbours'
 * edge rows (ump_send/ump_recv in one group). Every K steps the ranks add
 * up the residual (the sum of squared changes of the step) with
 * ump_allreduce. At the end rank 0 gathers the plate (ump_gather) and its
 * process checks it against the same computation done serially on plain
 * malloc'ed memory: the per-cell arithmetic is the same, so the plates must
 * be bitwise equal, whatever the decomposition.
 *
 * With --checkpoint-every N it checkpoints its pool every N steps
 * (ump_pool_checkpoint), and --restart FILE continues a run from such a
 * checkpoint (ump_pool_restore): the blocks come back at their addresses,
 * found through the pool's root (ump_pool_set_root), a struct in pool
 * memory holding the step reached and the blocks' pointers. A run killed
 * after a checkpoint and restarted ends with the same plate, bitwise, as
 * one never interrupted. Under MPI each process has its own file
 * (FILE.RANK).
 *
 *   heat2d [-n N] [-x NX] [-y NY] [-s STEPS] [-k K] [--config STR]
 *          [--checkpoint-every N [--checkpoint FILE]] [--restart FILE]
 *   mpirun -np 4 heat2d-mpi --config backend:sim,sim_devices:2
 *
 * Exit status: 0 when the plate matches the serial one, 1 when it does not
 * or a call fails, 2 on a usage error or a setup the example cannot run.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "umpool.h"
#ifdef HEAT2D_MPI
#include "umpool_mpi.h"
#endif

#define DEFAULT_N 256
#define DEFAULT_STEPS 200
#define DEFAULT_EVERY 50
#define DEFAULT_CONFIG "backend:sim,sim_devices:2"
#define DEFAULT_CKPT "heat2d.ckpt"
#define STATE_MAGIC 0x68656174326463ull /* "heat2dc" */

/* What a restarted run needs, in pool memory, found through the pool's
 * root: the plate's shape, the step reached and the blocks' pointers,
 * which stay valid across a restore (the same addresses). */
struct run_state {
    uint64_t magic;
    int nx, ny, ndev, nranks;
    int steps_done;
    double residual;
    double *cur[UMP_MAX_DEVICES], *next[UMP_MAX_DEVICES];
    double *res_send[UMP_MAX_DEVICES], *res_recv[UMP_MAX_DEVICES];
};

/* The residual may differ from the serial one by the order of the sums
 * only (each rank's partial sum, then the allreduce's fixed order). */
#define RESIDUAL_RTOL 1e-9

/* Every failure ends the whole job: under MPI a process that returned
 * alone would leave the others waiting in their next exchange, so it
 * aborts them all. */
static void die(int status)
{
#ifdef HEAT2D_MPI
    MPI_Abort(MPI_COMM_WORLD, status);
#endif
    exit(status);
}

static void fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("heat2d: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    die(status);
}

/* A setup every process finds wrong alike (a usage error, the backend, the
 * plate's size): said once, and every process leaves by itself with 2. */
static void refuse(const char *fmt, ...)
{
    int me = 0;
#ifdef HEAT2D_MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
#endif
    if (me == 0) {
        va_list ap;
        va_start(ap, fmt);
        fputs("heat2d: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
#ifdef HEAT2D_MPI
    MPI_Finalize();
#endif
    exit(2);
}

/* Checks one umpool call: its text and the error's name on failure. */
#define CHECK(call)                                                            \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ < 0)                                                           \
            fail(1, "%s:%d: %s: %s", __FILE__, __LINE__, #call,               \
                 ump_strerror(rc_));                                           \
    } while (0)

/* The plate's first state, by serial row (0: the hot edge above the plate,
 * 1..ny: the plate, ny + 1: the edge below) and column. The blocks and the
 * serial copy both start from it, so they start bitwise equal. */
static double initial(int row, int col, int nx)
{
    (void)col;
    (void)nx;
    return row == 0 ? 1.0 : 0.0;
}

/*
 * One Jacobi sweep over rows 1..rows of a block of rows + 2 rows of nx
 * cells (rows 0 and rows + 1 are halos or fixed edges; columns 0 and nx - 1
 * stay fixed). The serial check runs this very function over the whole
 * plate, so each cell's value comes from the same operations in the same
 * order, and the results match bit for bit (no reassociation: C11 without
 * -ffast-math keeps the parentheses).
 *
 * On sim, pool memory is host memory, so the CPU may run the stencil on it
 * directly. On cuda this loop would be a kernel launched on the rank's
 * stream on its device, and the halo exchange would wait for it there.
 */
static void sweep(const double *restrict old, double *restrict new, int rows,
                  int nx)
{
    for (int i = 1; i <= rows; i++) {
        const double *up = old + (size_t)(i - 1) * nx;
        const double *mid = old + (size_t)i * nx;
        const double *down = old + (size_t)(i + 1) * nx;
        double *out = new + (size_t)i * nx;
        for (int j = 1; j < nx - 1; j++)
            out[j] = 0.25 * ((up[j] + down[j]) + (mid[j - 1] + mid[j + 1]));
    }
}

/* Sum of the squared changes over rows 1..rows: how far the plate still
 * is from its steady state. */
static double sq_change(const double *old, const double *new, int rows,
                        int nx)
{
    double s = 0.0;
    for (int i = 1; i <= rows; i++)
        for (int j = 1; j < nx - 1; j++) {
            size_t k = (size_t)i * nx + j;
            double d = new[k] - old[k];
            s += d * d;
        }
    return s;
}

/* The first row and the row count of global rank g when ny rows are split
 * over n ranks: the first ny % n ranks take one row more. */
static int block_start(int g, int n, int ny)
{
    return g * (ny / n) + (g < ny % n ? g : ny % n);
}

static int block_rows(int g, int n, int ny)
{
    return ny / n + (g < ny % n ? 1 : 0);
}

/* The whole computation once more on one malloc'ed plate, for the check.
 * Writes the plate (ny + 2 rows with its edges) to *plate_p and the last
 * step's residual to *res_p. */
static void serial(int nx, int ny, int steps, double **plate_p,
                   double *res_p)
{
    size_t cells = (size_t)(ny + 2) * nx;
    double *a = malloc(cells * sizeof(double));
    double *b = malloc(cells * sizeof(double));
    if (!a || !b)
        fail(1, "serial check: out of memory for %zu cells", cells);
    for (int i = 0; i < ny + 2; i++)
        for (int j = 0; j < nx; j++)
            a[(size_t)i * nx + j] = b[(size_t)i * nx + j] = initial(i, j, nx);
    double res = 0.0;
    for (int s = 1; s <= steps; s++) {
        sweep(a, b, ny, nx);
        if (s == steps)
            res = sq_change(a, b, ny, nx);
        double *t = a;
        a = b;
        b = t;
    }
    free(b);
    *plate_p = a;
    *res_p = res;
}

/* n doubles of pool memory on device. */
static double *pool_doubles(ump_pool_t *pool, size_t n, int device)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    void *p;
    CHECK(ump_alloc(pool, n * sizeof(double), &h, &p));
    return p;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: heat2d [-n N] [-x NX] [-y NY] [-s STEPS] [-k K] "
            "[--config STR]\n"
            "              [--checkpoint-every N [--checkpoint FILE]] "
            "[--restart FILE]\n"
            "  -n N          plate of N x N cells (default %d)\n"
            "  -x NX, -y NY  columns, rows (NX >= 3; at least one row per "
            "rank)\n"
            "  -s STEPS      Jacobi steps (default %d)\n"
            "  -k K          residual every K steps and at the end "
            "(default %d)\n"
            "  --config STR  ump_pool_create's configuration (default "
            "\"%s\")\n"
            "  --checkpoint-every N  checkpoint the pool every N steps\n"
            "  --checkpoint FILE     where (default %s; FILE.RANK under "
            "MPI)\n"
            "  --restart FILE        continue the run checkpointed in FILE\n",
            DEFAULT_N, DEFAULT_STEPS, DEFAULT_EVERY, DEFAULT_CONFIG,
            DEFAULT_CKPT);
}

/* A positive int option value, or a usage error. */
static int positive(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || x < 1 || x > 1000000)
        refuse("%s: expected a number from 1 to 1000000, got '%s'", opt,
               v ? v : "");
    return (int)x;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every process waits for every other: around the timed loop, so that the
 * time per step is the slowest process's. */
static void sync_processes(void)
{
#ifdef HEAT2D_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
}

int main(int argc, char **argv)
{
    int nx = DEFAULT_N, ny = DEFAULT_N, steps = DEFAULT_STEPS;
    int every = DEFAULT_EVERY;
    const char *config = DEFAULT_CONFIG;
    int nproc = 1, me = 0;
    int ckpt_every = 0;
    const char *ckpt = DEFAULT_CKPT, *restart = NULL;
    int shape_given = 0;

#ifdef HEAT2D_MPI
    /* umpool's engine calls MPI from the threads that run the ranks'
     * transfers while this thread may be in MPI too. */
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) !=
        MPI_SUCCESS)
        fail(1, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_MULTIPLE)
        refuse("MPI gives thread level %d, umpool needs MPI_THREAD_MULTIPLE",
               provided);
    MPI_Comm_size(MPI_COMM_WORLD, &nproc);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
#endif

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (me == 0) /* once, not once per process */
                usage(stdout);
#ifdef HEAT2D_MPI
            MPI_Finalize();
#endif
            return 0;
        } else if (!strcmp(a, "-n")) {
            nx = ny = positive(a, v);
            shape_given = 1;
            i++;
        } else if (!strcmp(a, "-x")) {
            nx = positive(a, v);
            shape_given = 1;
            i++;
        } else if (!strcmp(a, "-y")) {
            ny = positive(a, v);
            shape_given = 1;
            i++;
        } else if (!strcmp(a, "--checkpoint-every")) {
            ckpt_every = positive(a, v);
            i++;
        } else if (!strcmp(a, "--checkpoint") || !strcmp(a, "--restart")) {
            if (!v)
                refuse("%s: expected a file name", a);
            if (a[2] == 'c')
                ckpt = v;
            else
                restart = v;
            i++;
        } else if (!strcmp(a, "-s")) {
            steps = positive(a, v);
            i++;
        } else if (!strcmp(a, "-k")) {
            every = positive(a, v);
            i++;
        } else if (!strcmp(a, "--config")) {
            if (!v)
                refuse("--config: expected a configuration string");
            config = v;
            i++;
        } else {
            refuse("unknown option '%s' (-h for help)", a);
        }
    }
    if (nx < 3)
        refuse("-x %d: the plate needs at least 3 columns (two are its "
                "fixed edges)", nx);

    /* Under MPI each process checkpoints its own pool: FILE.RANK. */
    char ckpt_path[4096], restart_path[4096];
    snprintf(ckpt_path, sizeof(ckpt_path), nproc > 1 ? "%s.%d" : "%s", ckpt,
             me);
    if (restart)
        snprintf(restart_path, sizeof(restart_path),
                 nproc > 1 ? "%s.%d" : "%s", restart, me);

    ump_pool_t *pool;
    if (restart)
        CHECK(ump_pool_restore(restart_path, config, &pool));
    else
        CHECK(ump_pool_create(config, &pool));
    /* The stencil runs on the CPU directly on pool memory (see sweep()),
     * which only sim's pool memory allows. */
    const char *backend = ump_backend_name(pool);
    if (!backend || strcmp(backend, "sim"))
        refuse("backend '%s': this example computes on the CPU on pool "
                "memory, which needs backend:sim (on cuda the stencil would "
                "be a kernel)", backend ? backend : "?");
    int ndev = ump_device_count(pool);
    CHECK(ndev);

    /* One rank per device of this process's pool. */
    ump_comm_t *comm;
#ifdef HEAT2D_MPI
    CHECK(ump_comm_create_mpi(pool, MPI_COMM_WORLD, ndev, NULL, NULL, &comm));
#else
    CHECK(ump_comm_create(pool, ndev, NULL, NULL, &comm));
#endif
    int nranks;
    CHECK(ump_comm_size(comm, &nranks));
    int grank[UMP_MAX_DEVICES]; /* global rank of each local rank */
    for (int r = 0; r < ndev; r++)
        CHECK(ump_comm_rank(comm, r, &grank[r]));
    /* Global rank 0 is this process's local rank 0 in the first process
     * (ranks are numbered process by process): it gathers and checks. */
    int root_here = grank[0] == 0;

    /* A restarted run takes its plate from the checkpoint. */
    struct run_state *st = NULL;
    if (restart) {
        CHECK(ump_pool_root(pool, (void **)&st));
        if (!st || st->magic != STATE_MAGIC)
            refuse("%s: not a heat2d checkpoint (no run state at its root)",
                   restart_path);
        if (shape_given && (st->nx != nx || st->ny != ny))
            refuse("%s holds a %dx%d plate, not %dx%d", restart_path, st->nx,
                   st->ny, nx, ny);
        if (st->ndev != ndev || st->nranks != nranks)
            refuse("%s was written by %d ranks over %d devices; this run has "
                   "%d over %d", restart_path, st->nranks, st->ndev, nranks,
                   ndev);
        if (st->steps_done >= steps)
            refuse("%s is at step %d: -s %d has nothing left to do",
                   restart_path, st->steps_done, steps);
        nx = st->nx;
        ny = st->ny;
    }

    /* Every process knows nranks and ny, so all refuse together. */
    if (nranks > ny) {
        CHECK(ump_comm_destroy(comm));
        CHECK(ump_pool_destroy(pool));
        refuse("%d rows over %d ranks: every rank needs at least one row "
               "(use -y %d or more, or fewer devices or processes)",
               ny, nranks, nranks);
    }

    /* Blocks of max_rows + 2 rows, whatever the rank's own count: the
     * gather takes the same count from every rank, max_rows rows from the
     * block's first row, so a block one row short sends its lower halo
     * too, which the root ignores. (Blocks differ by one row at most.) */
    int max_rows = block_rows(0, nranks, ny);
    size_t block_cells = (size_t)(max_rows + 2) * nx;
    if (!st) {
        void *p;
        CHECK(ump_alloc(pool, sizeof(*st), NULL, &p));
        st = p;
        memset(st, 0, sizeof(*st));
        *st = (struct run_state){.magic = STATE_MAGIC, .nx = nx, .ny = ny,
                                 .ndev = ndev, .nranks = nranks};
        CHECK(ump_pool_set_root(pool, st));
    }
    double **cur = st->cur, **next = st->next;
    double **res_send = st->res_send, **res_recv = st->res_recv;
    const void *rsend[UMP_MAX_DEVICES]; /* the same, as the calls take them */
    void *rrecv[UMP_MAX_DEVICES];
    int rows[UMP_MAX_DEVICES], start[UMP_MAX_DEVICES];
    for (int r = 0; r < ndev; r++) {
        /* Local rank r runs on device r (devices NULL): its memory goes
         * there too. */
        rows[r] = block_rows(grank[r], nranks, ny);
        start[r] = block_start(grank[r], nranks, ny);
        if (restart) { /* the blocks are back, at their addresses */
            rsend[r] = res_send[r];
            rrecv[r] = res_recv[r];
            continue;
        }
        cur[r] = pool_doubles(pool, block_cells, r);
        next[r] = pool_doubles(pool, block_cells, r);
        res_send[r] = pool_doubles(pool, 1, r);
        res_recv[r] = pool_doubles(pool, 1, r);
        rsend[r] = res_send[r];
        rrecv[r] = res_recv[r];
        /* Both buffers get the edges: the sweeps never write the fixed
         * columns, nor the halo rows that are the plate's top and bottom
         * edges (the first and last rank's), so those stay put. */
        for (int i = 0; i < max_rows + 2; i++)
            for (int j = 0; j < nx; j++) {
                size_t k = (size_t)i * nx + j;
                cur[r][k] = next[r][k] =
                    i <= rows[r] + 1 ? initial(start[r] + i, j, nx) : 0.0;
            }
    }

    double residual = st->residual;
    int first = st->steps_done + 1;
    if (restart && root_here)
        printf("heat2d: restarted from %s at step %d\n", restart_path,
               st->steps_done);
    sync_processes();
    double t0 = now_s();
    for (int s = first; s <= steps; s++) {
        /* Halos: each rank sends its first row up and its last row down
         * and receives its neighbours' into its halo rows. One group, so
         * the pairs are issued together and cannot deadlock, between the
         * ranks of this process as between processes. */
        CHECK(ump_group_start());
        for (int r = 0; r < ndev; r++) {
            int g = grank[r];
            double *b = cur[r];
            if (g > 0) {
                CHECK(ump_send(comm, r, b + nx, (size_t)nx, UMP_FLOAT64,
                               g - 1, NULL));
                CHECK(ump_recv(comm, r, b, (size_t)nx, UMP_FLOAT64, g - 1,
                               NULL));
            }
            if (g < nranks - 1) {
                CHECK(ump_send(comm, r, b + (size_t)rows[r] * nx, (size_t)nx,
                               UMP_FLOAT64, g + 1, NULL));
                CHECK(ump_recv(comm, r, b + (size_t)(rows[r] + 1) * nx,
                               (size_t)nx, UMP_FLOAT64, g + 1, NULL));
            }
        }
        CHECK(ump_group_end());

        for (int r = 0; r < ndev; r++)
            sweep(cur[r], next[r], rows[r], nx);

        if (s % every == 0 || s == steps) {
            for (int r = 0; r < ndev; r++)
                *res_send[r] = sq_change(cur[r], next[r], rows[r], nx);
            /* streams NULL: returns with the sum in every res_recv. */
            CHECK(ump_allreduce(comm, rsend, rrecv, 1, UMP_FLOAT64, UMP_SUM,
                                NULL));
            residual = *res_recv[0];
            if (root_here && s != steps)
                printf("heat2d: step %d: residual %.6e\n", s, residual);
        }
        for (int r = 0; r < ndev; r++) {
            double *t = cur[r];
            cur[r] = next[r];
            next[r] = t;
        }
        if (ckpt_every && s % ckpt_every == 0 && s != steps) {
            /* The state says where the run is; the pool keeps the rest. */
            st->steps_done = s;
            st->residual = residual;
            CHECK(ump_pool_checkpoint(pool, ckpt_path));
            sync_processes(); /* every process's file is at step s */
            if (root_here) {
                printf("heat2d: checkpoint at step %d: %s\n", s, ckpt_path);
                fflush(stdout); /* a test kills the run on this line */
            }
        }
    }
    sync_processes();
    double us_step = (now_s() - t0) * 1e6 / (steps - first + 1);

    /* Rank 0 gathers every block, max_rows rows each (see above). */
    size_t slice = (size_t)max_rows * nx;
    double *all = NULL;
    if (root_here)
        all = pool_doubles(pool, slice * (size_t)nranks, 0);
    const void *gsend[UMP_MAX_DEVICES];
    void *grecv[UMP_MAX_DEVICES];
    for (int r = 0; r < ndev; r++) {
        gsend[r] = cur[r] + nx;
        grecv[r] = r == 0 ? all : NULL; /* read at the root only */
    }
    CHECK(ump_gather(comm, gsend, grecv, slice, UMP_FLOAT64, 0, NULL));

    int status = 0;
    if (root_here) {
        double *ref, ref_res;
        serial(nx, ny, steps, &ref, &ref_res);
        double maxdiff = 0.0;
        long ndiff = 0;
        for (int g = 0; g < nranks; g++) {
            int n = block_rows(g, nranks, ny), r0 = block_start(g, nranks, ny);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < nx; j++) {
                    double x = all[(size_t)g * slice + (size_t)i * nx + j];
                    double y = ref[(size_t)(r0 + 1 + i) * nx + j];
                    if (memcmp(&x, &y, sizeof(double))) {
                        if (!ndiff)
                            fprintf(stderr,
                                    "heat2d: first difference at row %d "
                                    "column %d (rank %d): %.17g, serial "
                                    "%.17g\n",
                                    r0 + i, j, g, x, y);
                        ndiff++;
                        double d = x > y ? x - y : y - x;
                        if (d != d || d > maxdiff) /* a NaN sticks */
                            maxdiff = d;
                    }
                }
        }
        double dres = residual > ref_res ? residual - ref_res
                                         : ref_res - residual;
        double rel = dres / (ref_res > 0.0 ? ref_res : 1.0);
        int res_ok = rel <= RESIDUAL_RTOL;
        printf("heat2d: %dx%d, %d steps, %d rank%s (%d process%s x %d "
               "device%s): max |diff| vs serial %g (%s), residual %.3e%s, "
               "%.1f us/step\n",
               nx, ny, steps, nranks, nranks == 1 ? "" : "s", nproc,
               nproc == 1 ? "" : "es", ndev,
               ndev == 1 ? "" : "s", maxdiff,
               ndiff ? "MISMATCH" : "bitwise equal", residual,
               res_ok ? "" : " (MISMATCH)", us_step);
        if (ndiff)
            fprintf(stderr, "heat2d: %ld cells differ from the serial plate\n",
                    ndiff);
        if (!res_ok)
            fprintf(stderr,
                    "heat2d: residual %.17g, serial %.17g (relative %.3g > "
                    "%g)\n",
                    residual, ref_res, rel, RESIDUAL_RTOL);
        status = ndiff || !res_ok;
        free(ref);
        CHECK(ump_free(pool, all));
    }
#ifdef HEAT2D_MPI
    /* Every process exits with the verdict (only the root's is not 0), so
     * mpirun's status is it. */
    MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#endif

    CHECK(ump_comm_destroy(comm));
    for (int r = 0; r < ndev; r++) {
        CHECK(ump_free(pool, cur[r]));
        CHECK(ump_free(pool, next[r]));
        CHECK(ump_free(pool, res_send[r]));
        CHECK(ump_free(pool, res_recv[r]));
    }
    CHECK(ump_pool_set_root(pool, NULL));
    CHECK(ump_free(pool, st));
    CHECK(ump_pool_destroy(pool));
#ifdef HEAT2D_MPI
    MPI_Finalize();
#endif
    return status;
}
