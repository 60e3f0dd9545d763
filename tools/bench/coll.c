/*
 * umpool-bench coll [NAME]: nccl-tests' table for one collective (allreduce
 * by default) on every device of a pool, sizes doubling from -b to -e:
 * size, count, type, redop, root, time, algBw, busBw, #wrong, the
 * algorithm the communicator ran. algBw = S / t and busBw = algBw x the
 * collective's factor, as nccl-tests defines them (allreduce 2(n-1)/n;
 * reduce-scatter, allgather, all-to-all, gather, scatter (n-1)/n;
 * broadcast and reduce 1).
 *
 * On sim two times stand side by side: the measured CPU time (the ranks'
 * threads reading and writing host memory) and the cost model's time for
 * the topology (ump_comm_plan), with the memory-copy baseline of the same
 * run: the bytes the collective must read and write at the least (every
 * input read once, every output written once), moved by one memcpy per
 * rank, the ranks' copies on as many threads at once. Its ratio is how
 * close the collective comes to the machine's limit.
 *
 * On cuda the time is the GPU's, from events around calls queued back to
 * back on the ranks' streams (coll_gpu.c), and the copy baseline is every
 * rank's device-to-device copy of the same bytes, all at once.
 *
 * #wrong: the received elements that differ from a reference computed
 * here (the inputs are small integers, so SUM, MAX and MIN are exact in
 * every type; PROD and AVG, whose roundings differ per type, are checked
 * by the test suite, tests/test_coll_reduce.c), plus, where every rank
 * receives the same result (allreduce, allgather, broadcast), the elements
 * whose bits differ from rank 0's (all ranks must get the same bits). A
 * wrong element makes the bench fail.
 *
 * Under mpirun (coll_mpi.c): every process's devices are ranks of one
 * communicator (ump_comm_create_mpi), numbered process by process; inputs
 * and references follow the global ranks, #wrong is summed over the
 * processes, times are the slowest process's (a barrier, then the calls
 * back to back), and process 0 prints. Beside umpool's columns, the plain
 * MPI collective (allreduce, allgather, alltoall) among the processes in
 * the same run, on local rank 0's same buffers: one buffer per process,
 * the same bytes per rank. --mpi-only runs that baseline alone.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "coll_gpu.h"
#include "coll_mpi.h"
#include "umpool.h"

static const char *const coll_names[] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
    "alltoall", "gather", "scatter"};
static const char *const type_names[] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float",
    "double", "bfloat16"};
static const size_t type_sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

int bench_coll_lookup(const char *s, const char *kind)
{
    const char *const *t = !strcmp(kind, "coll")   ? coll_names
                           : !strcmp(kind, "type") ? type_names
                                                   : op_names;
    int n = !strcmp(kind, "coll") ? 8 : !strcmp(kind, "type") ? 10 : 5;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, t[i]))
            return i;
    return -1;
}

static double bus_factor(int coll, int n)
{
    if (coll == UMP_COLL_ALLREDUCE)
        return 2.0 * (n - 1) / n;
    if (coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE)
        return 1.0;
    return (double)(n - 1) / n;
}

static bool reducing(int coll)
{
    return coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_REDUCE ||
           coll == UMP_COLL_REDUCE_SCATTER;
}

static bool rooted(int coll)
{
    return coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE ||
           coll == UMP_COLL_GATHER || coll == UMP_COLL_SCATTER;
}

/* Elements of a rank's send and recv for count (nccl-tests' count: the
 * per-rank count of the call). */
static void elems(int coll, int n, size_t c, size_t *sn, size_t *rn)
{
    *sn = *rn = c;
    if (coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER)
        *rn = c * (size_t)n;
    if (coll == UMP_COLL_REDUCE_SCATTER || coll == UMP_COLL_SCATTER)
        *sn = c * (size_t)n;
    if (coll == UMP_COLL_ALLTOALL)
        *sn = *rn = c * (size_t)n;
}

/* Writes value v as an element of type dt. */
static void put(void *p, int dt, long v)
{
    switch (dt) {
    case UMP_INT8: case UMP_UINT8: *(int8_t *)p = (int8_t)v; break;
    case UMP_INT32: case UMP_UINT32: *(int32_t *)p = (int32_t)v; break;
    case UMP_INT64: case UMP_UINT64: *(int64_t *)p = v; break;
    case UMP_FLOAT32: *(float *)p = (float)v; break;
    case UMP_FLOAT64: *(double *)p = (double)v; break;
    case UMP_FLOAT16: { /* small integers: exact in half */
        float f = (float)v;
        uint32_t x;
        memcpy(&x, &f, 4);
        uint16_t h = (uint16_t)(((x >> 16) & 0x8000) |
                                (v ? ((((x >> 23) & 0xff) - 112) << 10) |
                                         ((x >> 13) & 0x3ff)
                                   : 0));
        memcpy(p, &h, 2);
        break;
    }
    default: { /* bfloat16: the top half of the float */
        float f = (float)v;
        uint32_t x;
        memcpy(&x, &f, 4);
        uint16_t h = (uint16_t)(x >> 16);
        memcpy(p, &h, 2);
    }
    }
}

/* The memory-copy baseline: n threads, started once, each copying its
 * bytes from src[r] to dst[r]; a round starts and ends at a barrier, and
 * thread 0 times it. */
struct copy_ctx {
    pthread_barrier_t bar;
    void *const *dst;
    void *const *src;
    size_t bytes;
    int rounds;
    double t[17];
};

struct copy_arg {
    struct copy_ctx *ctx;
    int r;
};

static void *copy_thread(void *arg)
{
    struct copy_arg *a = arg;
    struct copy_ctx *c = a->ctx;
    for (int k = 0; k < c->rounds; k++) {
        pthread_barrier_wait(&c->bar);
        uint64_t t0 = now_ns();
        memcpy(c->dst[a->r], c->src[a->r], c->bytes);
        pthread_barrier_wait(&c->bar);
        if (a->r == 0)
            c->t[k] = (double)(now_ns() - t0) / 1e9;
    }
    return NULL;
}

/* Seconds of one round, median of reps after one that warms the pages;
 * NAN when the threads cannot be made. */
static double copy_baseline(void *const *dst, void *const *src, int n,
                            size_t bytes, int reps)
{
    struct copy_ctx c = {.dst = dst, .src = src, .bytes = bytes,
                         .rounds = (reps > 16 ? 16 : reps) + 1};
    pthread_t th[64];
    struct copy_arg a[64];
    int made = 0;
    if (pthread_barrier_init(&c.bar, NULL, (unsigned)n))
        return NAN;
    for (; made < n; made++) {
        a[made] = (struct copy_arg){&c, made};
        if (pthread_create(&th[made], NULL, copy_thread, &a[made]))
            break;
    }
    if (made < n) { /* cannot happen in practice: give up cleanly */
        fprintf(stderr, "umpool-bench: coll: cannot start copy threads\n");
        exit(1);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&c.bar);
    return median(c.t + 1, (size_t)c.rounds - 1);
}

/* One call of the collective being measured (streams NULL: the
 * communicator's own, and the call returns when done). */
struct call {
    ump_comm_t *comm;
    int coll, dt, op, root;
    size_t count;
    const void *send[64];
    void *recv[64];
};

static int call_run(void *arg, const ump_stream_t *st)
{
    struct call *c = arg;
    int rc;
    switch (c->coll) {
    case UMP_COLL_ALLREDUCE:
        rc = ump_allreduce(c->comm, c->send, c->recv, c->count, c->dt, c->op,
                           st);
        break;
    case UMP_COLL_BROADCAST:
        rc = ump_broadcast(c->comm, c->send, c->recv, c->count, c->dt,
                           c->root, st);
        break;
    case UMP_COLL_REDUCE:
        rc = ump_reduce(c->comm, c->send, c->recv, c->count, c->dt, c->op,
                        c->root, st);
        break;
    case UMP_COLL_ALLGATHER:
        rc = ump_allgather(c->comm, c->send, c->recv, c->count, c->dt, st);
        break;
    case UMP_COLL_REDUCE_SCATTER:
        rc = ump_reduce_scatter(c->comm, c->send, c->recv, c->count, c->dt,
                                c->op, st);
        break;
    case UMP_COLL_ALLTOALL:
        rc = ump_alltoall(c->comm, c->send, c->recv, c->count, c->dt, st);
        break;
    case UMP_COLL_GATHER:
        rc = ump_gather(c->comm, c->send, c->recv, c->count, c->dt, c->root,
                        st);
        break;
    default:
        rc = ump_scatter(c->comm, c->send, c->recv, c->count, c->dt, c->root,
                         st);
    }
    if (rc)
        fprintf(stderr, "umpool-bench: coll: %s of %zu elements: %s\n",
                coll_names[c->coll], c->count, ump_strerror(rc));
    return rc;
}

/* Rank k's input element j: small integers, exact in every type. */
static long input(int k, size_t j)
{
    return (long)((k * 3 + (int)(j % 11)) % 5);
}

/* Element i of type dt at p, as a double (exact for the inputs' range). */
static double get(const void *p, int dt)
{
    int8_t i8;
    int32_t i32;
    int64_t i64;
    uint16_t h;
    float f;
    double d;
    uint32_t x;
    switch (dt) {
    case UMP_INT8: memcpy(&i8, p, 1); return i8;
    case UMP_UINT8: return *(const uint8_t *)p;
    case UMP_INT32: memcpy(&i32, p, 4); return i32;
    case UMP_UINT32: memcpy(&x, p, 4); return x;
    case UMP_INT64: case UMP_UINT64: memcpy(&i64, p, 8); return (double)i64;
    case UMP_FLOAT32: memcpy(&f, p, 4); return f;
    case UMP_FLOAT64: memcpy(&d, p, 8); return d;
    case UMP_FLOAT16: { /* normal halves and zero: what the inputs make */
        memcpy(&h, p, 2);
        int e = (h >> 10) & 0x1f;
        x = (uint32_t)(h & 0x8000) << 16;
        if (e == 31)
            x |= 0x7f800000u | (uint32_t)(h & 0x3ff) << 13;
        else if (e)
            x |= (uint32_t)(e + 112) << 23 | (uint32_t)(h & 0x3ff) << 13;
        memcpy(&f, &x, 4);
        return e || !(h & 0x3ff) ? f : NAN; /* subnormal: not expected */
    }
    default:
        memcpy(&h, p, 2);
        x = (uint32_t)h << 16;
        memcpy(&f, &x, 4);
        return f;
    }
}

/* The participants of a checked call: n of them, participant k's inputs
 * those of rank id[k] (id NULL: k itself). umpool's call has every global
 * rank; the MPI baseline one buffer per process, local rank 0's. */
struct parts {
    int n;
    const int *id;
};

static long part_input(const struct parts *p, int k, size_t j)
{
    return input(p->id ? p->id[k] : k, j);
}

/* The reference: what participant r's recv element i must hold, for the
 * ops whose result is exact in every type on these inputs (SUM, MAX, MIN)
 * and for the data movers; NAN for PROD and AVG (whose roundings and
 * wrapping differ per type: tests/test_coll_reduce.c checks them). */
static double want(const struct call *c, const struct parts *p, int r,
                   size_t i)
{
    size_t cnt = c->count;
    size_t j = i;
    switch (c->coll) {
    case UMP_COLL_BROADCAST:
        return (double)part_input(p, c->root, i);
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        return (double)part_input(p, (int)(i / cnt), i % cnt);
    case UMP_COLL_ALLTOALL:
        return (double)part_input(p, (int)(i / cnt),
                                  (size_t)r * cnt + i % cnt);
    case UMP_COLL_SCATTER:
        return (double)part_input(p, c->root, (size_t)r * cnt + i);
    case UMP_COLL_REDUCE_SCATTER:
        j = (size_t)r * cnt + i;
        break;
    default:
        break;
    }
    if (c->op == UMP_PROD || c->op == UMP_AVG)
        return NAN;
    double acc = (double)part_input(p, 0, j);
    for (int k = 1; k < p->n; k++) {
        double v = (double)part_input(p, k, j);
        acc = c->op == UMP_SUM   ? acc + v
              : c->op == UMP_MAX ? (v > acc ? v : acc)
                                 : (v < acc ? v : acc);
    }
    return acc;
}

/* Does rank r receive anything? */
static bool receives(int coll, int r, int root)
{
    return !(coll == UMP_COLL_REDUCE || coll == UMP_COLL_GATHER) || r == root;
}

/* Copies between pool memory and the host through the default stream and
 * waits (pool memory is not the CPU's on cuda). */
static int xfer(ump_pool_t *pool, void *dst, const void *src, size_t n)
{
    int rc = ump_memcpy_async(pool, dst, src, n, NULL);
    return rc ? rc : ump_stream_synchronize(pool, NULL);
}

/* #wrong: the elements of every receiving rank that differ from the
 * reference (where there is one), plus, for the collectives where every
 * rank receives the same result, those whose bits differ from rank 0's.
 * This process holds nlocal of the participants: recv[r] is participant
 * pos[r]'s buffer. across (under mpirun, collective): rank 0's bits are
 * process 0's local rank 0's, broadcast to every process; the count is
 * this process's. -1 when the buffers cannot be read back. */
static long long count_wrong(ump_pool_t *pool, const struct call *c,
                             const struct parts *p, int nlocal,
                             const int *pos, void *const *recv, size_t rn,
                             size_t esz, bool across, int proc)
{
    char *h0 = malloc(rn * esz), *h = malloc(rn * esz);
    long long wrong = 0;
    bool same = c->coll == UMP_COLL_ALLREDUCE ||
                c->coll == UMP_COLL_ALLGATHER ||
                c->coll == UMP_COLL_BROADCAST;
    size_t got_n = c->coll == UMP_COLL_REDUCE_SCATTER ||
                           c->coll == UMP_COLL_SCATTER
                       ? c->count
                       : rn;
    if (across && same && (!h0 || !h)) {
        /* the others would wait in the broadcast below */
        fprintf(stderr, "umpool-bench: coll: out of host memory\n");
        coll_mpi_abort();
    }
    for (int r = 0; r < nlocal && wrong >= 0; r++) {
        if (!receives(c->coll, pos[r], c->root))
            continue;
        if (!h0 || !h || xfer(pool, r ? h : h0, recv[r], got_n * esz)) {
            wrong = -1;
            break;
        }
        const char *b = r ? h : h0;
        for (size_t i = 0; i < got_n; i++) {
            double w = want(c, p, pos[r], i);
            if ((!isnan(w) && get(b + i * esz, c->dt) != w) ||
                (same && r && memcmp(b + i * esz, h0 + i * esz, esz)))
                wrong++;
        }
    }
    if (across && same) { /* h: process 0's rank 0 */
        if (proc == 0)
            memcpy(h, h0, got_n * esz);
        coll_mpi_bcast(h, got_n * esz);
        for (size_t i = 0; proc && wrong >= 0 && i < got_n; i++)
            if (memcmp(h + i * esz, h0 + i * esz, esz))
                wrong++;
    }
    free(h0);
    free(h);
    return wrong;
}

/* The memory-copy baseline on sim: the least bytes a rank must move,
 * copied by n threads in host memory of the same kind as the sim's;
 * microseconds, NAN when memory is short. */
static double host_copy_us(int n, size_t cp)
{
    void *cs[64], *cd[64];
    int got = 0;
    double copy = NAN;
    for (; got < n; got++) {
        cs[got] = malloc(cp);
        cd[got] = malloc(cp);
        if (!cs[got] || !cd[got]) {
            free(cs[got]);
            free(cd[got]);
            break;
        }
        memset(cs[got], 1, cp);
        memset(cd[got], 0, cp);
    }
    if (got == n)
        copy = copy_baseline(cd, cs, n, cp, 5) * 1e6;
    while (got-- > 0) {
        free(cs[got]);
        free(cd[got]);
    }
    return copy;
}

/* The same on the GPU: each rank copies between two buffers of the pool on
 * its device, all at once. */
static double gpu_copy_us(ump_pool_t *pool, struct coll_gpu *g, int n,
                          size_t cp)
{
    void *cs[64], *cd[64];
    int got = 0;
    double copy = NAN;
    for (; got < n; got++) {
        ump_hints_t h = {.device = got};
        if (ump_alloc(pool, cp, &h, &cs[got]))
            break;
        if (ump_alloc(pool, cp, &h, &cd[got])) {
            ump_free(pool, cs[got]);
            break;
        }
    }
    if (got == n)
        copy = coll_gpu_copy_us(g, cd, cs, cp, 5);
    while (got-- > 0) {
        ump_free(pool, cs[got]);
        ump_free(pool, cd[got]);
    }
    return copy;
}

/* Sizes up to this are small: their floor is printed beside them. */
#define FLOOR_MAX ((size_t)1 << 20)

/*
 * The floor a small collective is measured against: the least GPU work a
 * caller can wait for, one operation queued on a stream of the device
 * (a 4-byte memset: on cuda one launch) and one sync of that stream. A
 * collective of one launch and one wait at the end can come near it; one
 * that syncs on the host between its steps pays it once per step.
 * Microseconds, the median of 21 rounds after one that warms; NAN when no
 * stream or memory could be made.
 */
static double floor_us(ump_pool_t *pool, int dev)
{
    enum { ROUNDS = 21 };
    ump_stream_t s;
    ump_hints_t h = {.device = dev};
    void *p;
    double t[ROUNDS], us = NAN;
    if (ump_stream_create(pool, dev, &s))
        return NAN;
    if (ump_alloc(pool, 256, &h, &p)) {
        ump_stream_destroy(pool, s);
        return NAN;
    }
    int k = -1;
    for (; k < ROUNDS; k++) {
        uint64_t t0 = now_ns();
        if (ump_memset_async(pool, p, 0, 4, s) ||
            ump_stream_synchronize(pool, s))
            break;
        if (k >= 0)
            t[k] = (double)(now_ns() - t0) / 1e3;
    }
    if (k == ROUNDS)
        us = median(t, ROUNDS);
    ump_free(pool, p);
    ump_stream_destroy(pool, s);
    return us;
}

/* Where this run's ranks are: one process (the default), or every process
 * of an mpirun launch, each with its pool's devices. */
struct world {
    bool mpi;      /* started by mpirun: MPI is initialized */
    bool mpi_only; /* --mpi-only: the MPI baseline alone */
    int proc, nprocs;
    int n;           /* this process's ranks */
    int N;           /* every process's ranks: the communicator's size */
    int grank[64];   /* the global rank of local rank r */
    int *g0;         /* [nprocs]: each process's local rank 0, globally */
};

/* Every process's verdict: true when bad is true in any (collective under
 * mpirun, so that all stop together instead of waiting for the one that
 * stopped). */
static bool agree(const struct world *w, bool bad)
{
    return w->mpi ? coll_mpi_max_int(bad) != 0 : bad;
}

/* A count summed over the processes, -1 when one could not count. */
static long long sum_wrong(const struct world *w, long long wrong)
{
    if (!w->mpi)
        return wrong;
    if (agree(w, wrong < 0))
        return -1;
    return coll_mpi_sum(wrong);
}

static const char *const mpi_calls[] = {
    "MPI_Allreduce", "MPI_Bcast", "MPI_Reduce", "MPI_Allgather",
    "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Gather", "MPI_Scatter"};

static void print_header(const struct bench_coll_opts *o, const char *config,
                         const struct world *w, bool sim)
{
    const char *cn = coll_names[o->coll];
    if (o->json) {
        printf("{\"scenario\": \"coll\", \"collective\": \"%s\", \"ranks\": "
               "%d, \"config\": ", cn, w->N);
        json_string(stdout, config);
        if (w->mpi)
            printf(", \"processes\": %d, \"local_ranks\": %d, \"mpi_only\": "
                   "%s, \"baseline\": \"%s\"", w->nprocs, w->n,
                   w->mpi_only ? "true" : "false", mpi_calls[o->coll]);
        printf(", \"results\": [");
        return;
    }
    if (w->mpi_only) {
        printf("# umpool-bench coll %s --mpi-only: plain %s among %d "
               "processes, one buffer each (pool memory, pool \"%s\"), the "
               "same bytes per rank as umpool's ranks; time: the slowest "
               "process's, per call\n", cn, mpi_calls[o->coll], w->nprocs,
               config);
        printf("%12s %12s %8s %6s %5s %10s %9s %9s %9s\n", "size", "count",
               "type", "redop", "root", "mpi us", "mpi algbw", "mpi busbw",
               "mpi wrong");
        return;
    }
    if (w->mpi)
        printf("# umpool-bench coll %s: %d ranks (%d processes, %d ranks in "
               "process 0), pool \"%s\"; times: the slowest process's; mpi: "
               "plain %s among the %d processes in the same run, one buffer "
               "each (local rank 0's, the same bytes per rank); ratio: busbw "
               "/ mpi busbw\n", cn, w->N, w->nprocs, w->n, config,
               mpi_calls[o->coll], w->nprocs);
    printf("# umpool-bench coll %s: %d ranks, pool \"%s\"%s\n", cn, w->N,
           config,
           sim ? "; time: measured CPU time (sim), model: the cost "
                 "model's time for the topology; exec: the model's time "
                 "for the schedule as executed (each transfer charged to "
                 "its links); copy: the memory-copy baseline of the same "
                 "bytes"
               : "; time: GPU time per call (events around calls queued "
                 "back to back), model: the cost model's time; copy: "
                 "every rank's device-to-device copy of the same bytes, "
                 "all at once");
    printf("%12s %12s %8s %6s %5s %10s %8s %8s %7s %10s %8s %8s %10s "
           "%7s %10s",
           "size", "count", "type", "redop", "root", "time us", "algbw",
           "busbw", "#wrong", "algorithm", "model us", "exec us",
           "model bus", "copy us", "copy/time");
    if (w->mpi)
        printf(" %10s %9s %9s %7s", "mpi us", "mpi busbw", "mpi wrong",
               "ratio");
    printf(" %8s\n", "floor us");
    printf("# floor: up to %zu bytes, the least a call can wait for: one "
           "4-byte memset on a stream of device 0 and one sync of it%s\n",
           FLOOR_MAX, w->mpi ? " (process 0's)" : "");
}

/* umpool's call, timed: microseconds per call, NAN when a call failed
 * (printed). Under mpirun: one warm-up call, a barrier, iters calls back
 * to back timed by every process, the slowest process's time. */
static double time_calls(const struct world *w, struct coll_gpu *gpu,
                         struct call *c, int iters)
{
    double t = 0;
    bool bad = false;
    if (gpu) {
        if (w->mpi)
            coll_mpi_barrier();
        t = coll_gpu_time(gpu, call_run, c, iters);
    } else if (w->mpi) {
        bad = agree(w, call_run(c, NULL) != 0); /* the warm-up */
        coll_mpi_barrier();
        uint64_t t0 = now_ns();
        for (int k = 0; k < iters && !bad; k++)
            bad = call_run(c, NULL) != 0;
        t = bad ? NAN : (double)(now_ns() - t0) / 1e3 / iters;
    } else {
        /* the median of the calls, as the copy baseline's (a noisy host
         * slows some calls, and a mean follows the slowest) */
        double *ts = malloc((size_t)iters * sizeof(*ts));
        bad = !ts;
        for (int k = 0; k <= iters && !bad; k++) {
            uint64_t t0 = now_ns();
            bad = call_run(c, NULL) != 0;
            if (k) /* the first is a warm-up */
                ts[k - 1] = (double)(now_ns() - t0) / 1e3;
        }
        t = bad ? NAN : median(ts, (size_t)iters);
        free(ts);
    }
    return w->mpi ? coll_mpi_max(t) : t;
}

/* Pool buffers of the n local ranks for one size, the inputs written (of
 * each rank's global rank); false (and nothing held) when memory is
 * short, in any process. */
static bool make_buffers(ump_pool_t *pool, const struct world *w, int dt,
                         size_t sn, size_t rn, void **sb, void **rb)
{
    size_t esz = type_sizes[dt];
    char *hb = malloc((sn > rn ? sn : rn) * esz);
    int made = 0;
    bool bad = !hb;
    for (; !bad && made < w->n; made++) {
        ump_hints_t h = {.device = made};
        if (ump_alloc(pool, sn * esz, &h, &sb[made])) {
            bad = true;
            break;
        }
        if (ump_alloc(pool, rn * esz, &h, &rb[made])) {
            ump_free(pool, sb[made]);
            bad = true;
            break;
        }
        for (size_t i = 0; i < sn; i++)
            put(hb + i * esz, dt, input(w->grank[made], i));
        if (xfer(pool, sb[made], hb, sn * esz) ||
            ump_memset_async(pool, rb[made], 0, rn * esz, NULL) ||
            ump_stream_synchronize(pool, NULL)) {
            made++;
            bad = true;
            break;
        }
    }
    free(hb);
    if (bad)
        fprintf(stderr, "umpool-bench: coll: out of pool memory at %zu "
                "bytes per buffer\n", sn > rn ? sn * esz : rn * esz);
    if (!agree(w, bad))
        return true;
    while (made-- > 0) {
        ump_free(pool, sb[made]);
        ump_free(pool, rb[made]);
    }
    return false;
}

/* The MPI baseline of one size on local rank 0's buffers: its time (NAN:
 * not run) and #wrong against the reference of one buffer per process. */
static double mpi_baseline(ump_pool_t *pool, const struct world *w,
                           const struct call *c, void *send, void *recv,
                           int iters, long long *wrong_p)
{
    size_t esz = type_sizes[c->dt], msn, mrn;
    elems(c->coll, w->nprocs, c->count, &msn, &mrn);
    /* what the check reads is what MPI wrote, not umpool's result */
    int rc = ump_memset_async(pool, recv, 0, mrn * esz, NULL);
    if (!rc)
        rc = ump_stream_synchronize(pool, NULL);
    if (rc)
        fprintf(stderr, "umpool-bench: coll: clearing the baseline's "
                "buffer: %s\n", ump_strerror(rc));
    if (agree(w, rc != 0))
        return NAN;
    double t = coll_mpi_baseline_us(c->coll, send, recv, c->count, c->dt,
                                    c->op, iters);
    struct parts mp = {w->nprocs, w->g0};
    void *rv[1] = {recv};
    *wrong_p = sum_wrong(w, count_wrong(pool, c, &mp, 1, &w->proc, rv, mrn,
                                        esz, true, w->proc));
    return t;
}

/* The sizes of the run on the ranks of w; 0, or 1 on failure. */
static int run_sizes(const struct bench_coll_opts *o, ump_pool_t *pool,
                     ump_comm_t *comm, struct coll_gpu *gpu,
                     const struct world *w, int root)
{
    int coll = o->coll, dt = o->dtype, n = w->n, N = w->N;
    size_t esz = type_sizes[dt];
    const char *why_not = NULL; /* the baseline's, for the footnote */
    bool first = true;
    int ret = 0;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && !ret;
         bytes = bytes * o->factor > bytes ? bytes * o->factor
                                           : o->max_bytes + 1) {
        /* nccl-tests' size is S: count = S / esz / (N for the sliced ones) */
        size_t per = coll == UMP_COLL_ALLREDUCE ||
                             coll == UMP_COLL_BROADCAST ||
                             coll == UMP_COLL_REDUCE
                         ? 1
                         : (size_t)N;
        size_t count = bytes / esz / per;
        if (!count)
            continue;
        size_t sn, rn;
        elems(coll, N, count, &sn, &rn);
        void *sb[64], *rb[64];
        if (!make_buffers(pool, w, dt, sn, rn, sb, rb)) {
            ret = 1;
            break;
        }
        struct call c = {comm, coll, dt, o->op, root < 0 ? 0 : root, count,
                         {NULL}, {NULL}};
        for (int r = 0; r < n; r++) {
            c.send[r] = sb[r];
            c.recv[r] = rb[r];
        }
        int iters = o->iters ? o->iters : 5;
        double t = NAN, copy = NAN, exec = NAN, flo = NAN;
        long long wrong = 0;
        ump_coll_plan_t plan = {"?", 0};
        if (!w->mpi_only) {
            t = time_calls(w, gpu, &c, iters);
            ret = isnan(t);
            struct parts all = {N, NULL};
            wrong = ret ? 0
                        : sum_wrong(w, count_wrong(pool, &c, &all, n,
                                                   w->grank, c.recv, rn, esz,
                                                   w->mpi, w->proc));
            ump_comm_plan(comm, coll, count, dt, &plan);
            /* The last iteration's schedule, charged transfer by transfer
             * by the sim's virtual-time link model: it should match the
             * plan. */
            if (ump_comm_last_modeled_us(comm, &exec))
                exec = NAN;
            /* the least bytes: every input read once and every output
             * written once, per rank: a copy of the larger of the two; under
             * mpirun every process's ranks at once */
            size_t cp = (sn > rn ? sn : rn) * esz;
            if (!ret) {
                if (w->mpi)
                    coll_mpi_barrier();
                copy = gpu ? gpu_copy_us(pool, gpu, n, cp)
                           : host_copy_us(n, cp);
                if (w->mpi)
                    copy = coll_mpi_max(copy);
                if (bytes <= FLOOR_MAX)
                    flo = floor_us(pool, 0);
            }
        }
        double tm = NAN, malgbw = 0, mbusbw = 0;
        long long mwrong = 0;
        const char *why = NULL;
        if (w->mpi && !ret) {
            why = coll_mpi_baseline_unsupported(coll, dt, o->op, gpu == NULL,
                                                count, w->nprocs);
            if (!why)
                tm = mpi_baseline(pool, w, &c, sb[0], rb[0], iters, &mwrong);
            else if (!why_not)
                why_not = why;
            /* the same bytes per rank on nprocs ranks: nccl-tests' S */
            double mS = (double)count * (double)esz *
                        (coll == UMP_COLL_ALLREDUCE ? 1 : w->nprocs);
            malgbw = tm > 0 ? mS / (tm * 1e3) : 0;
            mbusbw = malgbw * bus_factor(coll, w->nprocs);
        }
        double algbw = t > 0 ? (double)bytes / (t * 1e3) : 0; /* GB/s */
        double busbw = algbw * bus_factor(coll, N);
        double ratio = mbusbw > 0 && !w->mpi_only ? busbw / mbusbw : NAN;
        char wbuf[24], mwbuf[24];
        double mbus = plan.modeled_us > 0
                          ? (double)bytes / (plan.modeled_us * 1e3) *
                                bus_factor(coll, N)
                          : 0;
        if (wrong < 0)
            snprintf(wbuf, sizeof(wbuf), "n/a");
        else
            snprintf(wbuf, sizeof(wbuf), "%lld", wrong);
        if (mwrong < 0 || isnan(tm))
            snprintf(mwbuf, sizeof(mwbuf), "n/a");
        else
            snprintf(mwbuf, sizeof(mwbuf), "%lld", mwrong);
        bool out = !ret && (!w->mpi || w->proc == 0);
        const char *redop = reducing(coll) ? op_names[o->op] : "none";
        if (out && !o->json && w->mpi_only) {
            if (isnan(tm))
                printf("%12zu %12zu %8s %6s %5d %10s %9s %9s %9s\n", bytes,
                       count, type_names[dt], redop, root, "n/a", "n/a",
                       "n/a", "n/a");
            else
                printf("%12zu %12zu %8s %6s %5d %10.1f %9.2f %9.2f %9s\n",
                       bytes, count, type_names[dt], redop, root, tm, malgbw,
                       mbusbw, mwbuf);
        } else if (out && !o->json) {
            printf("%12zu %12zu %8s %6s %5d %10.1f %8.2f %8.2f %7s %10s "
                   "%8.1f %8.1f %10.2f %7.1f %10.2f", bytes, count,
                   type_names[dt], redop, root, t, algbw, busbw, wbuf,
                   plan.algorithm, plan.modeled_us, exec, mbus, copy,
                   copy / t);
            if (w->mpi && isnan(tm))
                printf(" %10s %9s %9s %7s", "n/a", "n/a", "n/a", "n/a");
            else if (w->mpi)
                printf(" %10.1f %9.2f %9s %7.2f", tm, mbusbw, mwbuf, ratio);
            if (isnan(flo))
                printf(" %8s\n", "-");
            else
                printf(" %8.1f\n", flo);
        } else if (out) {
            printf("%s\n {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
                   "\"redop\": \"%s\", \"root\": %d", first ? "" : ",", bytes,
                   count, type_names[dt], redop, root);
            if (!w->mpi_only)
                printf(", \"time_us\": %.3f, \"algbw_gbs\": %.4f, "
                       "\"busbw_gbs\": %.4f, \"wrong\": %lld, \"algorithm\": "
                       "\"%s\", \"model_us\": %.3f, \"exec_us\": %.3f, "
                       "\"model_busbw_gbs\": %.4f, \"copy_us\": %.3f",
                       t, algbw, busbw, wrong, plan.algorithm,
                       plan.modeled_us, isnan(exec) ? -1.0 : exec, mbus,
                       isnan(copy) ? -1.0 : copy);
            if (!w->mpi_only && !isnan(flo))
                printf(", \"floor_us\": %.3f", flo);
            if (w->mpi)
                printf(", \"mpi_time_us\": %.3f, \"mpi_algbw_gbs\": %.4f, "
                       "\"mpi_busbw_gbs\": %.4f, \"mpi_wrong\": %lld, "
                       "\"ratio\": %.4f",
                       isnan(tm) ? -1.0 : tm, malgbw, mbusbw,
                       isnan(tm) ? -1 : mwrong, isnan(ratio) ? -1.0 : ratio);
            printf("}");
        }
        if (out)
            first = false;
        if (wrong || mwrong)
            ret = 1;
        for (int r = 0; r < n; r++) {
            ump_free(pool, sb[r]);
            ump_free(pool, rb[r]);
        }
    }
    if (!w->mpi || w->proc == 0) {
        if (o->json)
            printf("\n]}\n");
        else if (why_not)
            printf("# mpi: n/a: %s\n", why_not);
    }
    return ret;
}

/* The pool, the communicator and the ranks of w; then the sizes. */
static int coll_run(const struct bench_coll_opts *o, const char *config,
                    struct world *w)
{
    ump_pool_t *pool = NULL;
    ump_comm_t *comm = NULL;
    struct coll_gpu *gpu = NULL;
    int dev[64], ret = 1;
    int rc = ump_pool_create(config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: coll: ump_pool_create(\"%s\"): %s\n",
                config, ump_strerror(rc));
        pool = NULL;
    }
    if (agree(w, rc != 0))
        goto out;
    int n = w->mpi_only ? 1 : ump_device_count(pool);
    if (o->ranks && o->ranks < n)
        n = o->ranks;
    if (n > 64)
        n = 64;
    w->n = n;
    for (int r = 0; r < n; r++) /* the first n devices */
        dev[r] = r;
    if (!w->mpi) {
        rc = ump_comm_create(pool, n, dev, o->comm_config, &comm);
        w->N = n;
        for (int r = 0; r < n; r++)
            w->grank[r] = r;
    } else if (!w->mpi_only) {
        rc = coll_mpi_comm_create(pool, n, dev, o->comm_config, &comm);
        if (!rc)
            rc = ump_comm_size(comm, &w->N);
        for (int r = 0; r < n && !rc; r++)
            rc = ump_comm_rank(comm, r, &w->grank[r]);
    } else { /* one buffer per process, the process's rank */
        w->N = w->nprocs;
        w->grank[0] = w->proc;
    }
    if (rc)
        fprintf(stderr, "umpool-bench: coll: %s: %s\n",
                w->mpi ? "ump_comm_create_mpi" : "ump_comm_create",
                ump_strerror(rc));
    if (agree(w, rc != 0))
        goto out;
    w->g0 = malloc((size_t)w->nprocs * sizeof(*w->g0));
    if (!w->g0) {
        fprintf(stderr, "umpool-bench: coll: out of memory\n");
        if (w->mpi)
            coll_mpi_abort();
        goto out;
    }
    if (w->mpi)
        coll_mpi_allgather_int(w->grank[0], w->g0);
    else
        w->g0[0] = w->grank[0];
    int root = rooted(o->coll) ? o->root % w->N : -1;
    bool sim = !strcmp(ump_backend_name(pool), "sim");
    if (!sim) {
        char why[256];
        gpu = coll_gpu_open(pool, n, why, sizeof(why));
        if (!gpu)
            fprintf(stderr, "umpool-bench: coll: no GPU timing on %s: %s\n",
                    ump_backend_name(pool), why);
        if (agree(w, !gpu))
            goto out;
    }
    if (!w->mpi || w->proc == 0)
        print_header(o, config, w, sim);
    ret = run_sizes(o, pool, comm, gpu, w, root);
out:
    coll_gpu_close(gpu);
    if (comm)
        ump_comm_destroy(comm);
    if (pool)
        ump_pool_destroy(pool);
    free(w->g0);
    return ret;
}

int bench_coll(const struct bench_coll_opts *o)
{
    const char *config = o->config ? o->config : BENCH_COLL_CONFIG;
    struct world w = {.nprocs = 1, .mpi_only = o->mpi_only};
    int size;
    bool launched = coll_mpi_launched(&size);
    if (o->mpi_only && !launched) {
        fprintf(stderr, "umpool-bench: coll: --mpi-only runs plain MPI "
                "among the processes of an mpirun launch: start it with "
                "mpirun\n");
        return 1;
    }
    if (launched) {
        if (coll_mpi_init(&w.proc, &w.nprocs))
            return 1;
        w.mpi = true;
    }
    int ret = coll_run(o, config, &w);
    if (w.mpi) {
        /* the exit status is every process's */
        ret = agree(&w, ret != 0);
        coll_mpi_finalize();
    }
    return ret;
}
