/* Collectives across the processes of one shared pool (lib/coll/shared.c):
 * forked processes join one pool (config share:NAME), meet through an oob
 * in shared memory, and run every collective as one job over all their
 * ranks through the pool's addresses. Checked: the results, the same bits
 * as the hierarchical schedule (coll_schedule:hierarchical, through the
 * oob), a host buffer in one process sending every process the usual way,
 * and a process that never comes (-ETIMEDOUT within comm_timeout). On the
 * sim, and on the fake CUDA driver (lib/coll/xgpu.c: each process's share
 * in kernel launches; its memory is the CPU's here, so the checks read it
 * as on the sim). */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "coll/comm.h"
#include "coll/world.h"
#include "fakecuda_util.h"
#include "mem/pool.h"
#include "rundir.h"
#include "umpool.h"

#define MAXP 4
#define MAXB (4 << 20)

/* The oob: a buffer per process and a barrier, in memory the forked
 * processes share. */
struct meet {
    pthread_barrier_t bar;
    char buf[MAXP][MAXB];
};

static struct meet *meet;
static int nproc;
/* The pools' backend: the sim, or cuda on the fake driver (cuda_setup). */
static const char *backend = "backend:sim,sim_devices:2,sim_device_mem:128M";

static int oob_barrier(void *ctx)
{
    (void)ctx;
    int rc = pthread_barrier_wait(&meet->bar);
    return rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : -EIO;
}

static int oob_allgather(void *ctx, const void *send, void *recv,
                         size_t bytes)
{
    int me = *(int *)ctx;
    if (bytes > MAXB)
        return -EINVAL;
    memcpy(meet->buf[me], send, bytes);
    oob_barrier(ctx);
    for (int p = 0; p < nproc; p++)
        memcpy((char *)recv + (size_t)p * bytes, meet->buf[p], bytes);
    return oob_barrier(ctx);
}

/* The failing check, in a child: its exit status names the line. */
#define EXPECT(x)                                                      \
    do {                                                               \
        if (!(x)) {                                                    \
            fprintf(stderr, "process %d: line %d: %s\n", me, __LINE__, \
                    #x);                                               \
            return __LINE__ % 200 + 1;                                 \
        }                                                              \
    } while (0)

/* Rank g's input element i: exact in float32 sums of a few ranks. */
static float input(int g, size_t i)
{
    return (float)((g + 1) * 1000 + (int)(i % 997));
}

/* Rank g's random-ish floats, n of them: sums round, so a fold in another
 * order would show. */
static void fill_rand(float *p, size_t n, int g)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((unsigned)(g + 1) * 2654435761u ^
                       (unsigned)i * 40503u) / 4.1e7f - 50.3f;
}

/* Bytes this process's collectives received from other processes
 * (ump_link_stats: the network into the host and the devices). None when
 * every call went through the shared pool's addresses. */
static uint64_t from_net(ump_pool_t *pool)
{
    const int at[] = {UMP_LOC_HOST, 0, 1};
    uint64_t n = 0;
    for (int i = 0; i < 3; i++) {
        ump_link_stats_t ls;
        if (!ump_link_stats(pool, UMP_LOC_NET, at[i], &ls))
            n += ls.coll_bytes;
    }
    return n;
}

struct world {
    int me, nlocal, first, nall;
    ump_pool_t *pool;
    ump_comm_t *comm;
};

/* A communicator of nlocal ranks on pool (joined already: w->pool, or
 * made here when NULL). */
static int join(struct world *w, int me, int nlocal, const char *name,
                const char *ccfg, ump_pool_t *pool)
{
    char conf[256];
    snprintf(conf, sizeof(conf), "%s,publish:false,share:%s", backend, name);
    int rc = pool ? 0 : ump_pool_create(conf, &pool);
    if (rc)
        return rc;
    w->pool = pool;
    static int ctx[MAXP];
    ctx[me] = me;
    ump_oob_t oob = {me, nproc, oob_allgather, oob_barrier, &ctx[me]};
    int devs[2] = {0, 1};
    w->me = me;
    w->nlocal = nlocal;
    rc = ump_comm_create_oob(w->pool, nlocal, devs, &oob, ccfg, &w->comm);
    if (!rc)
        rc = ump_comm_rank(w->comm, 0, &w->first);
    if (!rc)
        rc = ump_comm_size(w->comm, &w->nall);
    return rc;
}

/* Every collective, its results checked; the allreduce's also bitwise
 * against coll_schedule:hierarchical's. */
static int child_all(int me, int nlocal, const char *name)
{
    struct world w, h;
    EXPECT(join(&w, me, nlocal, name, NULL, NULL) == 0);
    EXPECT(join(&h, me, nlocal, name, "coll_schedule:hierarchical", w.pool) ==
           0);
    ump_coll_plan_t plan;
    EXPECT(ump_comm_plan(w.comm, UMP_COLL_ALLREDUCE, 1000, UMP_FLOAT32,
                         &plan) == 0);
    EXPECT(!strcmp(plan.algorithm, "shared"));
    EXPECT(ump_comm_plan(h.comm, UMP_COLL_ALLREDUCE, 1000, UMP_FLOAT32,
                         &plan) == 0);
    EXPECT(strcmp(plan.algorithm, "shared") != 0);
    /* All-to-all: one job on the sim; on cuda the usual way (xgpu.c) */
    bool cuda = strstr(backend, "cuda") != NULL;
    EXPECT(ump_comm_plan(w.comm, UMP_COLL_ALLTOALL, 1000, UMP_FLOAT32,
                         &plan) == 0);
    EXPECT(!strcmp(plan.algorithm, "shared") == !cuda);
    int n = w.nlocal, N = w.nall;
    const size_t counts[] = {1, 1000, 100003};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t count = counts[ci], bytes = count * sizeof(float);
        float *s[2], *r[2], *r2[2], *ip_send[2];
        for (int l = 0; l < n; l++) {
            EXPECT(ump_alloc(w.pool, bytes * (size_t)N, NULL,
                             (void **)&s[l]) == 0);
            EXPECT(ump_alloc(w.pool, bytes * (size_t)N, NULL,
                             (void **)&r[l]) == 0);
            EXPECT(ump_alloc(w.pool, bytes * (size_t)N, NULL,
                             (void **)&r2[l]) == 0);
        }
        /* Allreduce, SUM and AVG of random-ish floats: the same bits as
         * the hierarchical schedule. */
        for (int op = UMP_SUM; op <= UMP_AVG; op += UMP_AVG - UMP_SUM) {
            for (int l = 0; l < n; l++)
                fill_rand(s[l], count, w.first + l);
            /* Nothing over the oob (the network's counters) for the
             * shared pool's call; the hierarchical one's crosses it. */
            uint64_t net = from_net(w.pool);
            EXPECT(ump_allreduce(w.comm, (const void *const *)s,
                                 (void *const *)r, count, UMP_FLOAT32, op,
                                 NULL) == 0);
            EXPECT(from_net(w.pool) == net);
            EXPECT(ump_allreduce(h.comm, (const void *const *)s,
                                 (void *const *)r2, count, UMP_FLOAT32, op,
                                 NULL) == 0);
            EXPECT(from_net(w.pool) > net);
            for (int l = 0; l < n; l++)
                EXPECT(!memcmp(r[l], r2[l], bytes));
        }
        /* bfloat16 (its sums round in the type): SUM and AVG bitwise as
         * the hierarchical schedule's too. */
        for (int op = UMP_SUM; op <= UMP_AVG; op += UMP_AVG - UMP_SUM) {
            for (int l = 0; l < n; l++)
                for (size_t i = 0; i < count; i++) {
                    float f = (float)(((w.first + l) * 7 + (int)(i % 29)) %
                                      37) * 64.5f + (float)l;
                    uint32_t u;
                    memcpy(&u, &f, sizeof(u));
                    ((uint16_t *)s[l])[i] = (uint16_t)(u >> 16);
                }
            EXPECT(ump_allreduce(w.comm, (const void *const *)s,
                                 (void *const *)r, count, UMP_BFLOAT16, op,
                                 NULL) == 0);
            EXPECT(ump_allreduce(h.comm, (const void *const *)s,
                                 (void *const *)r2, count, UMP_BFLOAT16, op,
                                 NULL) == 0);
            for (int l = 0; l < n; l++)
                EXPECT(!memcmp(r[l], r2[l], count * 2));
        }
        /* Reduce-scatter (out of place and in place: NCCL's layout, the
         * receive buffer inside the send buffer at the rank's block) and
         * reduce to the last rank, SUM and AVG: the same bits as the
         * hierarchical schedule's. */
        for (int op = UMP_SUM; op <= UMP_AVG; op += UMP_AVG - UMP_SUM) {
            void *ip[2], *ip2[2];
            for (int l = 0; l < n; l++) {
                fill_rand(s[l], count * (size_t)N, w.first + l);
                memcpy(r[l], s[l], bytes * (size_t)N);
                memcpy(r2[l], s[l], bytes * (size_t)N);
                ip[l] = r[l] + (size_t)(w.first + l) * count;
                ip2[l] = r2[l] + (size_t)(w.first + l) * count;
            }
            EXPECT(ump_reduce_scatter(w.comm, (const void *const *)r, ip,
                                      count, UMP_FLOAT32, op, NULL) == 0);
            EXPECT(ump_reduce_scatter(h.comm, (const void *const *)r2, ip2,
                                      count, UMP_FLOAT32, op, NULL) == 0);
            for (int l = 0; l < n; l++)
                EXPECT(!memcmp(ip[l], ip2[l], bytes));
            EXPECT(ump_reduce_scatter(w.comm, (const void *const *)s,
                                      (void *const *)r, count, UMP_FLOAT32,
                                      op, NULL) == 0);
            EXPECT(ump_reduce_scatter(h.comm, (const void *const *)s,
                                      (void *const *)r2, count, UMP_FLOAT32,
                                      op, NULL) == 0);
            for (int l = 0; l < n; l++)
                EXPECT(!memcmp(r[l], r2[l], bytes));
            EXPECT(ump_reduce(w.comm, (const void *const *)s,
                              (void *const *)r, count, UMP_FLOAT32, op,
                              N - 1, NULL) == 0);
            EXPECT(ump_reduce(h.comm, (const void *const *)s,
                              (void *const *)r2, count, UMP_FLOAT32, op,
                              N - 1, NULL) == 0);
            if (w.first + n == N)
                EXPECT(!memcmp(r[n - 1], r2[n - 1], bytes));
        }
        /* Allgather in place (rank g's block of its receive buffer is its
         * send buffer). */
        for (int l = 0; l < n; l++) {
            memset(r[l], 0, bytes * (size_t)N);
            for (size_t i = 0; i < count; i++)
                r[l][(size_t)(w.first + l) * count + i] =
                    input(w.first + l, i);
            ip_send[l] = r[l] + (size_t)(w.first + l) * count;
        }
        EXPECT(ump_allgather(w.comm, (const void *const *)ip_send,
                             (void *const *)r, count, UMP_FLOAT32,
                             NULL) == 0);
        for (int l = 0; l < n; l++)
            for (int g = 0; g < N; g++)
                EXPECT(r[l][(size_t)g * count + count - 1] ==
                       input(g, count - 1));
        /* In place, exact sums. */
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < count; i++)
                r[l][i] = input(w.first + l, i);
        EXPECT(ump_allreduce(w.comm, (const void *const *)r,
                             (void *const *)r, count, UMP_FLOAT32, UMP_SUM,
                             NULL) == 0);
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < count; i += 101) {
                float want = 0;
                for (int g = 0; g < N; g++)
                    want += input(g, i);
                EXPECT(r[l][i] == want);
            }
        /* Broadcast from the last rank (another process's). */
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < count; i++)
                s[l][i] = input(w.first + l, i);
        EXPECT(ump_broadcast(w.comm, (const void *const *)s,
                             (void *const *)r, count, UMP_FLOAT32, N - 1,
                             NULL) == 0);
        for (int l = 0; l < n; l++)
            EXPECT(r[l][count - 1] == input(N - 1, count - 1) &&
                   r[l][0] == input(N - 1, 0));
        /* Allgather: rank g's block from its input. */
        EXPECT(ump_allgather(w.comm, (const void *const *)s,
                             (void *const *)r, count, UMP_FLOAT32,
                             NULL) == 0);
        for (int l = 0; l < n; l++)
            for (int g = 0; g < N; g++)
                EXPECT(r[l][(size_t)g * count + count / 2] ==
                       input(g, count / 2));
        /* Reduce-scatter: block g of the sums to rank g. */
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < count * (size_t)N; i++)
                s[l][i] = input(w.first + l, i);
        EXPECT(ump_reduce_scatter(w.comm, (const void *const *)s,
                                  (void *const *)r, count, UMP_FLOAT32,
                                  UMP_SUM, NULL) == 0);
        for (int l = 0; l < n; l++) {
            size_t i = (size_t)(w.first + l) * count + count / 3;
            float want = 0;
            for (int g = 0; g < N; g++)
                want += input(g, i);
            EXPECT(r[l][count / 3] == want);
        }
        /* Reduce to rank 0 (process 0's). */
        EXPECT(ump_reduce(w.comm, (const void *const *)s, (void *const *)r,
                          count, UMP_FLOAT32, UMP_MAX, 0, NULL) == 0);
        if (w.first == 0)
            EXPECT(r[0][count - 1] == input(N - 1, count - 1));
        /* All-to-all: rank k's block j is rank j's block k. */
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < count * (size_t)N; i++)
                s[l][i] = (float)((w.first + l) * 100 + (int)(i / count));
        EXPECT(ump_alltoall(w.comm, (const void *const *)s,
                            (void *const *)r, count, UMP_FLOAT32,
                            NULL) == 0);
        for (int l = 0; l < n; l++)
            for (int g = 0; g < N; g++)
                EXPECT(r[l][(size_t)g * count] ==
                       (float)(g * 100 + w.first + l));
        for (int l = 0; l < n; l++) {
            EXPECT(ump_free(w.pool, s[l]) == 0);
            EXPECT(ump_free(w.pool, r[l]) == 0);
            EXPECT(ump_free(w.pool, r2[l]) == 0);
        }
    }
    EXPECT(ump_comm_destroy(h.comm) == 0);
    EXPECT(ump_comm_destroy(w.comm) == 0);
    EXPECT(ump_pool_destroy(w.pool) == 0);
    return 0;
}

/* Process 1 brings a host buffer (ump_host_alloc: not exportable): every
 * process runs the call the usual way, and it is right. */
static int child_host(int me, const char *name)
{
    struct world w;
    EXPECT(join(&w, me, 1, name, NULL, NULL) == 0);
    const size_t count = 4096;
    float *s, *r;
    if (me == 1)
        EXPECT(ump_host_alloc(w.pool, count * sizeof(float), (void **)&s) ==
               0);
    else
        EXPECT(ump_alloc(w.pool, count * sizeof(float), NULL, (void **)&s) ==
               0);
    EXPECT(ump_alloc(w.pool, count * sizeof(float), NULL, (void **)&r) == 0);
    for (size_t i = 0; i < count; i++)
        s[i] = input(me, i);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&s,
                         (void *const *)&r, count, UMP_FLOAT32, UMP_SUM,
                         NULL) == 0);
    for (size_t i = 0; i < count; i += 7)
        EXPECT(r[i] == input(0, i) + input(1, i));
    EXPECT(from_net(w.pool) > 0); /* the usual way: through the oob */
    EXPECT((me == 1 ? ump_host_free(w.pool, s) : ump_free(w.pool, s)) == 0);
    EXPECT(ump_free(w.pool, r) == 0);
    EXPECT(ump_comm_destroy(w.comm) == 0);
    EXPECT(ump_pool_destroy(w.pool) == 0);
    return 0;
}

/* Process 1 leaves without the call: process 0's is -ETIMEDOUT within
 * comm_timeout, and the communicator stays failed. */
static int child_gone(int me, const char *name)
{
    struct world w;
    EXPECT(join(&w, me, 1, name, "comm_timeout:1", NULL) == 0);
    float *b;
    EXPECT(ump_alloc(w.pool, 4096, NULL, (void **)&b) == 0);
    if (me == 1)
        _exit(0); /* gone, its pool with it */
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) == -ETIMEDOUT);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) < 0);
    EXPECT(ump_free(w.pool, b) == 0);
    ump_comm_destroy(w.comm);
    EXPECT(ump_pool_destroy(w.pool) == 0);
    return 0;
}

/* Process 1's device fails during a call (sim_fail_device: at the call's
 * first work on it, after a first call has opened every buffer): the
 * call is -EIO in both processes, not a timeout, and the communicator
 * says so from then on. */
static int child_devfail(int me, const char *name)
{
    struct world w;
    EXPECT(join(&w, me, 1, name, NULL, NULL) == 0);
    float *b;
    EXPECT(ump_alloc(w.pool, 4096, NULL, (void **)&b) == 0);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) == 0);
    if (me == 1)
        EXPECT(sim_fail_device(w.pool->bctx, 0, 1) == 0);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) == -EIO);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) == -EIO);
    EXPECT(from_net(w.pool) == 0); /* the calls went the shared way */
    ump_free(w.pool, b);
    ump_comm_destroy(w.comm);
    ump_pool_destroy(w.pool);
    return 0;
}

/* A process whose communicator failed returns from its next call before
 * the call's first barrier: the other, waiting there already, fails at
 * once, not after comm_timeout (30 s here). */
static int child_broken(int me, const char *name)
{
    struct world w;
    EXPECT(join(&w, me, 1, name, "comm_timeout:30", NULL) == 0);
    float *b;
    EXPECT(ump_alloc(w.pool, 4096, NULL, (void **)&b) == 0);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                         (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                         NULL) == 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (me == 1) {
        /* Process 0 waits in the call meanwhile. */
        nanosleep(&(struct timespec){0, 300000000}, NULL);
        w.comm->world->broken = -EIO; /* as a failed exchange leaves it */
        EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                             (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                             NULL) == -EIO);
    } else {
        EXPECT(ump_allreduce(w.comm, (const void *const *)&b,
                             (void *const *)&b, 1024, UMP_FLOAT32, UMP_SUM,
                             NULL) == -ETIMEDOUT);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        EXPECT(t1.tv_sec - t0.tv_sec < 10);
    }
    /* Process 1's communicator lives until process 0 returned (its
     * destroy would wake process 0 too). */
    EXPECT(oob_barrier(NULL) == 0);
    ump_free(w.pool, b);
    ump_comm_destroy(w.comm);
    ump_pool_destroy(w.pool);
    return 0;
}

#ifdef HAVE_CUDA_H
/* Process 1's launch of its share fails (the fake driver: a launch out of
 * resources, an error that leaves the device sound): the call fails in
 * both processes at the last barrier, not by a timeout, and the next call
 * is right in both. */
static int child_fail(int me, const char *name)
{
    if (me == 1)
        setenv("UMPOOL_FAKE_CUDA",
               "devices=2,mem=256,fail=cuLaunchKernel:1:701", 1);
    struct world w;
    EXPECT(join(&w, me, 1, name, NULL, NULL) == 0);
    const size_t count = 4096;
    float *b;
    EXPECT(ump_alloc(w.pool, count * sizeof(float), NULL, (void **)&b) == 0);
    for (size_t i = 0; i < count; i++)
        b[i] = input(me, i);
    int rc = ump_allreduce(w.comm, (const void *const *)&b, (void *const *)&b,
                           count, UMP_FLOAT32, UMP_SUM, NULL);
    EXPECT(me == 1 ? rc < 0 : rc == -EIO);
    for (size_t i = 0; i < count; i++)
        b[i] = input(me, i);
    EXPECT(ump_allreduce(w.comm, (const void *const *)&b, (void *const *)&b,
                         count, UMP_FLOAT32, UMP_SUM, NULL) == 0);
    for (size_t i = 0; i < count; i += 7)
        EXPECT(b[i] == input(0, i) + input(1, i));
    EXPECT(from_net(w.pool) == 0); /* both calls the shared way */
    EXPECT(ump_free(w.pool, b) == 0);
    EXPECT(ump_comm_destroy(w.comm) == 0);
    EXPECT(ump_pool_destroy(w.pool) == 0);
    return 0;
}
#endif

/* Runs fn in np forked processes (nlocal ranks each for child_all); the
 * parent makes no pool. Their exit statuses. */
static void run_procs(int np, int which, const char *name)
{
    meet = mmap(NULL, sizeof(*meet), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(meet != MAP_FAILED);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    assert_int_equal(pthread_barrier_init(&meet->bar, &ba, (unsigned)np), 0);
    nproc = np;
    pid_t pid[MAXP];
    for (int p = 0; p < np; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            int rc = which == 0   ? child_all(p, 1 + p % 2, name)
                     : which == 3 ? child_all(p, 1, name)
                     : which == 1 ? child_host(p, name)
                     : which == 5 ? child_devfail(p, name)
                     : which == 6 ? child_broken(p, name)
#ifdef HAVE_CUDA_H
                     : which == 4 ? child_fail(p, name)
#endif
                                  : child_gone(p, name);
            fflush(stderr);
            _exit(rc);
        }
    }
    /* A process that fails leaves the others waiting in the oob: they
     * are killed, and the test fails naming the first. */
    int bad = -1, why = 0;
    for (int left = np; left > 0; left--) {
        int st = 0;
        pid_t got = waitpid(-1, &st, 0);
        assert_true(got > 0);
        int p = 0;
        while (p < np && pid[p] != got)
            p++;
        pid[p] = 0;
        if ((!WIFEXITED(st) || WEXITSTATUS(st)) && bad < 0) {
            bad = p;
            why = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            for (int q = 0; q < np; q++)
                if (pid[q] > 0)
                    kill(pid[q], SIGKILL);
        }
    }
    if (bad >= 0)
        fail_msg("process %d: exit status %d", bad, why);
    pthread_barrier_destroy(&meet->bar);
    munmap(meet, sizeof(*meet));
}

static void test_two_processes(void **state)
{
    (void)state;
    run_procs(2, 0, "xcoll2");
}

static void test_three_processes(void **state)
{
    (void)state;
    run_procs(3, 0, "xcoll3");
}

/* A rank per process: the fold of the inputs at once (xalgo.c). */
static void test_rank_per_process(void **state)
{
    (void)state;
    run_procs(3, 3, "xcoll1");
}

static void test_host_buffer_falls_back(void **state)
{
    (void)state;
    run_procs(2, 1, "xcollhost");
}

static void test_process_gone(void **state)
{
    (void)state;
    run_procs(2, 2, "xcollgone");
}

static void test_device_fails(void **state)
{
    (void)state;
    run_procs(2, 5, "xcolldevfail");
}

static void test_broken_wakes_others(void **state)
{
    (void)state;
    run_procs(2, 6, "xcollbroken");
}

#ifdef HAVE_CUDA_H
/* The same on cuda: the fake driver's two devices, which reach each other.
 * The kernel's launches are counted in each process (fake_count), not
 * here: what shows the shared way is the network's counters (from_net). */
static int cuda_setup(void **state)
{
    (void)state;
    use_fake("devices=2,mem=256");
    backend = "backend:cuda";
    return 0;
}

static void test_cuda_processes(void **state)
{
    (void)state;
    run_procs(2, 0, "xcudacoll2");
    run_procs(3, 3, "xcudacoll1");
}

static void test_cuda_host_buffer_falls_back(void **state)
{
    (void)state;
    run_procs(2, 1, "xcudacollhost");
}

static void test_cuda_process_gone(void **state)
{
    (void)state;
    run_procs(2, 2, "xcudacollgone");
}

static void test_cuda_share_fails(void **state)
{
    (void)state;
    run_procs(2, 4, "xcudacollfail");
}
#else
static int cuda_setup(void **state)
{
    (void)state;
    return 0;
}

static void test_cuda_processes(void **state)
{
    (void)state;
    skip(); /* built without cuda.h: no fake driver */
}

static void test_cuda_host_buffer_falls_back(void **state)
{
    (void)state;
    skip();
}

static void test_cuda_process_gone(void **state)
{
    (void)state;
    skip();
}

static void test_cuda_share_fails(void **state)
{
    (void)state;
    skip();
}
#endif

static int setup(void **state)
{
    return rundir_setup(state) ? -1 : group_setup(state);
}

static int teardown(void **state)
{
    group_teardown(state);
    return rundir_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes),
        cmocka_unit_test(test_three_processes),
        cmocka_unit_test(test_rank_per_process),
        cmocka_unit_test(test_host_buffer_falls_back),
        cmocka_unit_test(test_process_gone),
        cmocka_unit_test(test_device_fails),
        cmocka_unit_test(test_broken_wakes_others),
        /* after the sim's: cuda_setup leaves the backend set */
        cmocka_unit_test_setup(test_cuda_processes, cuda_setup),
        cmocka_unit_test_setup(test_cuda_host_buffer_falls_back, cuda_setup),
        cmocka_unit_test_setup(test_cuda_process_gone, cuda_setup),
        cmocka_unit_test_setup(test_cuda_share_fails, cuda_setup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
