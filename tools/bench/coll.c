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
 * #wrong: where every rank receives the same result (allreduce,
 * allgather, broadcast), the elements of each rank that differ from rank
 * 0's at all (all ranks must get the same bits); n/a for the others, whose
 * results the test suite checks (tests/test_coll.c).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
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

int bench_coll(const struct bench_coll_opts *o)
{
    const char *config = o->config ? o->config : BENCH_COLL_CONFIG;
    ump_pool_t *pool;
    int rc = ump_pool_create(config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: coll: ump_pool_create(\"%s\"): %s\n",
                config, ump_strerror(rc));
        return 1;
    }
    int n = ump_device_count(pool), coll = o->coll, dt = o->dtype;
    if (o->ranks && o->ranks < n)
        n = o->ranks;
    ump_comm_t *comm;
    int dev[64];
    for (int r = 0; r < n && r < 64; r++) /* the first n devices */
        dev[r] = r;
    rc = ump_comm_create(pool, n, dev, o->comm_config, &comm);
    if (rc) {
        fprintf(stderr, "umpool-bench: coll: ump_comm_create: %s\n",
                ump_strerror(rc));
        ump_pool_destroy(pool);
        return 1;
    }
    size_t esz = type_sizes[dt];
    int root = rooted(coll) ? o->root % n : -1;
    bool sim = !strcmp(ump_backend_name(pool), "sim");
    if (!o->json) {
        printf("# umpool-bench coll %s: %d ranks, pool \"%s\"%s\n",
               coll_names[coll], n, config,
               sim ? "; time: measured CPU time (sim), model: the cost "
                     "model's time for the topology; exec: the model's time "
                     "for the schedule as executed (each transfer charged to "
                     "its links); copy: the memory-copy baseline of the same "
                     "bytes"
                   : "");
        printf("%12s %12s %8s %6s %5s %10s %8s %8s %7s %10s %8s %8s %10s "
               "%7s %10s\n",
               "size", "count", "type", "redop", "root", "time us",
               "algbw", "busbw", "#wrong", "algorithm", "model us",
               "exec us", "model bus", "copy us", "copy/time");
    } else {
        printf("{\"scenario\": \"coll\", \"collective\": \"%s\", \"ranks\": "
               "%d, \"config\": ", coll_names[coll], n);
        json_string(stdout, config);
        printf(", \"results\": [");
    }
    int ret = 0;
    bool first = true;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && !ret;
         bytes = bytes * o->factor > bytes ? bytes * o->factor
                                           : o->max_bytes + 1) {
        /* nccl-tests' size is S: count = S / esz / (n for the sliced ones) */
        size_t per = coll == UMP_COLL_ALLREDUCE ||
                             coll == UMP_COLL_BROADCAST ||
                             coll == UMP_COLL_REDUCE
                         ? 1
                         : (size_t)n;
        size_t count = bytes / esz / per;
        if (!count)
            continue;
        size_t sn, rn;
        elems(coll, n, count, &sn, &rn);
        void *sb[64], *rb[64];
        for (int r = 0; r < n && !ret; r++) {
            ump_hints_t h = {.device = r};
            if (ump_alloc(pool, sn * esz, &h, &sb[r]) ||
                ump_alloc(pool, rn * esz, &h, &rb[r]))
                ret = 1;
            for (size_t i = 0; !ret && i < sn; i++)
                put((char *)sb[r] + i * esz, dt,
                    (long)((r * 3 + (int)(i % 11)) % 5));
            if (!ret)
                memset(rb[r], 0, rn * esz);
        }
        if (ret) {
            fprintf(stderr, "umpool-bench: coll: out of pool memory at %zu "
                    "bytes\n", bytes);
            break;
        }
        const void *send[64];
        void *recv[64];
        for (int r = 0; r < n; r++) {
            send[r] = sb[r];
            recv[r] = rb[r];
        }
        int iters = o->iters ? o->iters : 5;
        double t = 0;
        for (int k = 0; k <= iters && !ret; k++) {
            uint64_t t0 = now_ns();
            switch (coll) {
            case UMP_COLL_ALLREDUCE:
                rc = ump_allreduce(comm, send, recv, count, dt, o->op, NULL);
                break;
            case UMP_COLL_BROADCAST:
                rc = ump_broadcast(comm, send, recv, count, dt, root, NULL);
                break;
            case UMP_COLL_REDUCE:
                rc = ump_reduce(comm, send, recv, count, dt, o->op, root,
                                NULL);
                break;
            case UMP_COLL_ALLGATHER:
                rc = ump_allgather(comm, send, recv, count, dt, NULL);
                break;
            case UMP_COLL_REDUCE_SCATTER:
                rc = ump_reduce_scatter(comm, send, recv, count, dt, o->op,
                                        NULL);
                break;
            case UMP_COLL_ALLTOALL:
                rc = ump_alltoall(comm, send, recv, count, dt, NULL);
                break;
            case UMP_COLL_GATHER:
                rc = ump_gather(comm, send, recv, count, dt, root, NULL);
                break;
            default:
                rc = ump_scatter(comm, send, recv, count, dt, root, NULL);
            }
            if (rc) {
                fprintf(stderr, "umpool-bench: coll: %s of %zu bytes: %s\n",
                        coll_names[coll], bytes, ump_strerror(rc));
                ret = 1;
            }
            if (k) /* the first is a warm-up */
                t += (double)(now_ns() - t0) / 1e3;
        }
        t /= iters;
        bool same = coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_ALLGATHER ||
                    coll == UMP_COLL_BROADCAST;
        uint64_t wrong = 0;
        if (!ret && same)
            for (int r = 1; r < n; r++)
                for (size_t i = 0; i < rn; i++)
                    wrong += memcmp((char *)rb[r] + i * esz,
                                    (char *)rb[0] + i * esz, esz) != 0;
        ump_coll_plan_t plan = {"?", 0};
        ump_comm_plan(comm, coll, count, dt, &plan);
        /* The last iteration's schedule, charged transfer by transfer by
         * the sim's virtual-time link model: it should match the plan. */
        double exec = NAN;
        if (ump_comm_last_modeled_us(comm, &exec))
            exec = NAN;
        /* the least bytes: every input read once and every output written
         * once, per rank: a copy of the larger of the two, in host memory
         * of the same kind as the sim's */
        size_t cp = (sn > rn ? sn : rn) * esz;
        double copy = NAN;
        void *cs[64], *cd[64];
        int got = 0;
        for (; sim && !ret && got < n; got++) {
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
        if (sim && !ret && got == n)
            copy = copy_baseline(cd, cs, n, cp, 3) * 1e6;
        while (got-- > 0) {
            free(cs[got]);
            free(cd[got]);
        }
        double algbw = (double)bytes / (t * 1e3); /* GB/s */
        char wbuf[24];
        double mbus = plan.modeled_us > 0
                          ? (double)bytes / (plan.modeled_us * 1e3) *
                                bus_factor(coll, n)
                          : 0;
        if (!ret && !o->json)
            printf("%12zu %12zu %8s %6s %5d %10.1f %8.2f %8.2f %7s %10s "
                   "%8.1f %8.1f %10.2f %7.1f %10.2f\n", bytes, count,
                   type_names[dt], reducing(coll) ? op_names[o->op] : "none",
                   root, t, algbw,
                   algbw * bus_factor(coll, n),
                   same ? (snprintf(wbuf, sizeof(wbuf), "%llu",
                                    (unsigned long long)wrong), wbuf)
                        : "n/a",
                   plan.algorithm, plan.modeled_us, exec, mbus, copy,
                   copy / t);
        else if (!ret)
            printf("%s\n {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
                   "\"redop\": \"%s\", \"root\": %d, \"time_us\": %.3f, "
                   "\"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": "
                   "%lld, \"algorithm\": \"%s\", \"model_us\": %.3f, "
                   "\"exec_us\": %.3f, \"model_busbw_gbs\": %.4f, "
                   "\"copy_us\": %.3f}",
                   first ? "" : ",", bytes, count, type_names[dt],
                   reducing(coll) ? op_names[o->op] : "none", root, t, algbw,
                   algbw * bus_factor(coll, n),
                   same ? (long long)wrong : -1LL,
                   plan.algorithm, plan.modeled_us,
                   isnan(exec) ? -1.0 : exec, mbus,
                   isnan(copy) ? -1.0 : copy);
        first = false;
        if (wrong)
            ret = 1;
        for (int r = 0; r < n; r++) {
            ump_free(pool, sb[r]);
            ump_free(pool, rb[r]);
        }
    }
    if (o->json)
        printf("\n]}\n");
    ump_comm_destroy(comm);
    ump_pool_destroy(pool);
    return ret;
}
