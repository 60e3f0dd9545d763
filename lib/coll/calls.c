/*
 * The public collective calls: each goes to the ranks of this process
 * (run.c), or, on a communicator over several processes, to the
 * hierarchical schedules (hier.c), which run their in-process phases
 * through run.c as well; then it is counted in ump_coll_stats.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "coll/check.h"
#include "coll/comm.h"
#include "coll/reduce.h"
#include "coll/run.h"
#include "coll/world.h"
#include "front/check.h"
#include "front/front.h"
#include "util/internal.h"
#include "util/log.h"

static int run_call(ump_comm_t *c, const struct coll_args *a)
{
    if (!c->world)
        return coll_run_local(c, a);
    /* One process: the call as it is, on the communicator of its ranks. */
    if (c->world->nproc == 1)
        return coll_run_local(c->world->local, a);
    int rc = pool_check(c->pool, a->fn);
    if (rc)
        return rc;
    /* Every call counts, failed or empty: the calls' transfers carry
     * their number, so that a process that left one out (its arguments
     * were bad) never has its next call matched with the others' this one
     * (world.h). */
    bool inplace;
    pthread_mutex_lock(&c->lock);
    c->world->seq++;
    rc = coll_check_call(c, a, &inplace);
    /* A lost buffer: this process still takes part (hier.c). */
    int bad = rc == -EIO ? rc : 0;
    if ((!rc || bad) && a->count)
        rc = coll_world_run(c, a, bad);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* nccl-tests' bus factor (its PERFORMANCE.md): the bytes a rank's link
 * carries per byte of the collective's size in the best schedule, so that
 * busBw compares with a link's bandwidth whatever the number of ranks. */
static double bus_factor(int coll, int n)
{
    if (coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE)
        return 1.0;
    double f = (double)(n - 1) / n; /* 0 for one rank: no link carries it */
    return coll == UMP_COLL_ALLREDUCE ? 2.0 * f : f;
}

/* A call, counted in the pool's ump_coll_stats when it succeeded (queued,
 * for a call on streams); a synchronous one with its time, taken around
 * the whole call as nccl-tests takes it. */
static int run(ump_comm_t *c, const struct coll_args *a)
{
    if (!c) {
        ump_log_error("%s: comm is NULL", a->fn);
        return -EINVAL;
    }
    uint64_t t0 = now_ns();
    int rc = run_call(c, a);
    if (rc)
        return rc;
    struct coll_ctr *k = &c->pool->coll_ctr[a->coll];
    size_t bytes = coll_bytes(a->coll, a->count, coll_dtype_size(a->dt),
                              c->nall);
    atomic_fetch_add_explicit(&k->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->bytes, bytes, memory_order_relaxed);
    if (a->streams)
        return 0;
    uint64_t bus = (uint64_t)((double)bytes * bus_factor(a->coll, c->nall));
    atomic_fetch_add_explicit(&k->timed_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->timed_bus_bytes, bus, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->timed_ns, now_ns() - t0,
                              memory_order_relaxed);
    return 0;
}

#define ARGS(name, coll_, count_, dt_, op_, root_)                             \
    (&(const struct coll_args){name, coll_, send, recv, count_, (int)(dt_),   \
                               op_, root_, streams})

UMP_EXPORT int ump_allreduce(ump_comm_t *c, const void *const send[],
                             void *const recv[], size_t count, ump_dtype_t dt,
                             ump_redop_t op, const ump_stream_t streams[])
{
    return run(c, ARGS("ump_allreduce", UMP_COLL_ALLREDUCE, count, dt,
                       (int)op, 0));
}

UMP_EXPORT int ump_broadcast(ump_comm_t *c, const void *const send[],
                             void *const recv[], size_t count, ump_dtype_t dt,
                             int root, const ump_stream_t streams[])
{
    return run(c, ARGS("ump_broadcast", UMP_COLL_BROADCAST, count, dt, 0,
                       root));
}

UMP_EXPORT int ump_reduce(ump_comm_t *c, const void *const send[],
                          void *const recv[], size_t count, ump_dtype_t dt,
                          ump_redop_t op, int root,
                          const ump_stream_t streams[])
{
    return run(c, ARGS("ump_reduce", UMP_COLL_REDUCE, count, dt, (int)op,
                       root));
}

UMP_EXPORT int ump_allgather(ump_comm_t *c, const void *const send[],
                             void *const recv[], size_t sendcount,
                             ump_dtype_t dt, const ump_stream_t streams[])
{
    return run(c, ARGS("ump_allgather", UMP_COLL_ALLGATHER, sendcount, dt, 0,
                       0));
}

UMP_EXPORT int ump_reduce_scatter(ump_comm_t *c, const void *const send[],
                                  void *const recv[], size_t recvcount,
                                  ump_dtype_t dt, ump_redop_t op,
                                  const ump_stream_t streams[])
{
    return run(c, ARGS("ump_reduce_scatter", UMP_COLL_REDUCE_SCATTER,
                       recvcount, dt, (int)op, 0));
}

UMP_EXPORT int ump_alltoall(ump_comm_t *c, const void *const send[],
                            void *const recv[], size_t count, ump_dtype_t dt,
                            const ump_stream_t streams[])
{
    return run(c, ARGS("ump_alltoall", UMP_COLL_ALLTOALL, count, dt, 0, 0));
}

UMP_EXPORT int ump_gather(ump_comm_t *c, const void *const send[],
                          void *const recv[], size_t sendcount,
                          ump_dtype_t dt, int root,
                          const ump_stream_t streams[])
{
    return run(c, ARGS("ump_gather", UMP_COLL_GATHER, sendcount, dt, 0, root));
}

UMP_EXPORT int ump_scatter(ump_comm_t *c, const void *const send[],
                           void *const recv[], size_t recvcount,
                           ump_dtype_t dt, int root,
                           const ump_stream_t streams[])
{
    return run(c, ARGS("ump_scatter", UMP_COLL_SCATTER, recvcount, dt, 0,
                       root));
}
