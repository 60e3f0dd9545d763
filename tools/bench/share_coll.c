/*
 * umpool-bench share's allreduce (share_coll.h). The two processes of the
 * scenario make two communicators over the bench's pipes
 * (ump_comm_create_oob), one rank each on device 0:
 *
 *   shared   the default schedule: the processes share the pool, so a call
 *            runs through its addresses (ump_comm_plan: "shared"; sim: one
 *            job across the processes, cuda: each process's kernel over
 *            both buffers, lib/coll/xgpu.c);
 *   between  coll_schedule:hierarchical, the way between processes that
 *            do not share a pool: each process's buffer staged to host
 *            memory and carried by the oob's allgather (here the pipes;
 *            under mpirun, umpool-bench coll runs the same over MPI, with
 *            plain MPI_Allreduce beside it).
 *
 * Per size (float32 sum, 8 B to 2 MiB), two calls to warm up, then
 * `rounds` calls timed one by one on the sharer while both processes call
 * back to back, their median: a call's cycle time. The receive buffer is
 * cleared before each communicator's calls and checked after them
 * against the exact sums.
 *
 * An error ends the exchange for both (share.c): the process that failed
 * stops talking on the pipes (the peer exits, the sharer closes its
 * writing end), so that the other's next read of them ends; a call of the
 * other's waiting at a barrier of the shared way ends within the
 * communicators' comm_timeout (SC_TIMEOUT).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "peer.h"
#include "share_coll.h"

#define SC_ROUNDS_MAX 80
#define SC_TIMEOUT "comm_timeout:10"

struct pipe_oob {
    int me, in, out;
};

/* Two processes: each gets the other's bytes. One writes first, the other
 * reads first: a pipe holds 64 KiB, and the usual schedule sends whole
 * buffers through here. */
static int oob_allgather(void *ctx, const void *send, void *recv,
                         size_t bytes)
{
    const struct pipe_oob *o = ctx;
    char *mine = (char *)recv + (size_t)o->me * bytes;
    char *theirs = (char *)recv + (size_t)(1 - o->me) * bytes;
    memmove(mine, send, bytes);
    int rc = o->me == 0 ? peer_write(o->out, send, bytes) ||
                              peer_read(o->in, theirs, bytes)
                        : peer_read(o->in, theirs, bytes) ||
                              peer_write(o->out, send, bytes);
    return rc ? -EIO : 0;
}

static int oob_barrier(void *ctx)
{
    char one = 1, two[2];
    return oob_allgather(ctx, &one, two, 1);
}

/* Process me's element i: exact float sums of the two. */
static float input(int me, size_t i)
{
    return (float)((me + 1) * 1000 + (int)(i % 997));
}

struct sc {
    ump_pool_t *pool;
    ump_stream_t s;
    int me, rounds;
    float *send, *recv, *host;
};

/* Median µs of rounds timed calls on c (after two untimed), count floats;
 * the wrong elements of the result into *wrong. */
static int timed(struct sc *x, ump_comm_t *c, size_t count, double *us,
                 long long *wrong)
{
    uint64_t t[SC_ROUNDS_MAX];
    size_t bytes = count * sizeof(float);
    int rc = ump_memset_async(x->pool, x->recv, 0, bytes, x->s);
    if (!rc)
        rc = ump_stream_synchronize(x->pool, x->s);
    for (int i = -2; i < x->rounds && !rc; i++) {
        uint64_t t0 = now_ns();
        rc = ump_allreduce(c, (const void *const *)&x->send,
                           (void *const *)&x->recv, count, UMP_FLOAT32,
                           UMP_SUM, NULL);
        if (i >= 0)
            t[i] = now_ns() - t0;
    }
    if (!rc)
        rc = ump_memcpy_async(x->pool, x->host, x->recv, bytes, x->s);
    if (!rc)
        rc = ump_stream_synchronize(x->pool, x->s);
    for (size_t i = 0; !rc && i < count; i++)
        *wrong += x->host[i] != input(0, i) + input(1, i);
    if (!rc)
        *us = peer_median_us(t, x->rounds);
    return rc;
}

/* Fills the send buffer with this process's inputs. */
static int fill(struct sc *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        x->host[i] = input(x->me, i);
    int rc = ump_memcpy_async(x->pool, x->send, x->host,
                              count * sizeof(float), x->s);
    return rc ? rc : ump_stream_synchronize(x->pool, x->s);
}

int share_coll(ump_pool_t *pool, int me, int in, int out, int rounds,
               FILE *out_f, long long *wrong_p)
{
    static const size_t sizes[] = {8, 4 << 10, 32 << 10, 256 << 10,
                                   2 << 20};
    const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    const size_t most = sizes[nsizes - 1];
    struct pipe_oob po = {me, in, out};
    ump_oob_t oob = {me, 2, oob_allgather, oob_barrier, &po};
    struct sc x = {.pool = pool, .me = me,
                   .rounds = rounds < SC_ROUNDS_MAX ? rounds : SC_ROUNDS_MAX};
    ump_comm_t *cs = NULL, *cb = NULL;
    int dev = 0;
    *wrong_p = 0;
    /* This thread (the calls' caller) on a core of its own, one per
     * process, as mpirun binds by default, and with it the workers it
     * starts below (the stream's, the communicators'): two floating
     * processes on a 2-core machine were seen sharing one, and a barrier
     * then cost a waiter's whole poll (xbar.c: 0.1-0.3 ms a call where
     * 7-10 us is the norm). Undone at the end. */
    cpu_set_t was, one;
    bool bound = false;
    if (!sched_getaffinity(0, sizeof(was), &was) && CPU_COUNT(&was) >= 2) {
        int want = me, cpu = -1;
        for (int c = 0; c < CPU_SETSIZE && want >= 0; c++)
            if (CPU_ISSET(c, &was) && want-- == 0)
                cpu = c;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        bound = !sched_setaffinity(0, sizeof(one), &one);
    }
    /* Both processes make both communicators whatever failed before:
     * each creation is a round of the oob the other takes part in. */
    int rc = ump_comm_create_oob(pool, 1, &dev, &oob, SC_TIMEOUT, &cs);
    int rc2 = ump_comm_create_oob(pool, 1, &dev, &oob,
                                  "coll_schedule:hierarchical," SC_TIMEOUT,
                                  &cb);
    if (!rc)
        rc = rc2;
    if (!rc)
        rc = ump_stream_create(pool, 0, &x.s);
    x.host = malloc(most);
    if (!rc && !x.host)
        rc = -ENOMEM;
    if (!rc)
        rc = ump_alloc(pool, most, NULL, (void **)&x.send);
    if (!rc)
        rc = ump_alloc(pool, most, NULL, (void **)&x.recv);
    if (out_f)
        fprintf(out_f, "# allreduce between the 2 processes, 1 rank each "
                "on device 0, float32 sum, medians of %d calls timed by the "
                "sharer; shared: through the pool's addresses; between: "
                "coll_schedule:hierarchical, staged through host memory and "
                "these processes' pipes (the path of processes that share "
                "no pool; under mpirun umpool-bench coll with share:NAME "
                "runs it over MPI beside MPI_Allreduce)\n"
                "# %10s %10s %12s %10s %7s %s\n", x.rounds, "size",
                "shared_us", "algorithm", "between_us", "ratio", "wrong");
    for (size_t k = 0; k < nsizes && !rc; k++) {
        size_t count = sizes[k] / sizeof(float);
        double us_s = 0, us_b = 0;
        long long wrong = 0;
        ump_coll_plan_t plan = {"?", 0};
        rc = fill(&x, count);
        if (!rc)
            rc = ump_comm_plan(cs, UMP_COLL_ALLREDUCE, count, UMP_FLOAT32,
                               &plan);
        if (!rc)
            rc = timed(&x, cs, count, &us_s, &wrong);
        if (!rc)
            rc = timed(&x, cb, count, &us_b, &wrong);
        *wrong_p += wrong;
        char b[32];
        if (!rc && out_f)
            fprintf(out_f, "  %10s %10.1f %12s %10.1f %7.2f %lld\n",
                    fmt_size(sizes[k], b, sizeof(b)), us_s, plan.algorithm,
                    us_b, us_b / us_s, wrong);
    }
    if (rc && out_f)
        fprintf(stderr, "umpool-bench share: allreduce: %s\n",
                ump_strerror(rc));
    if (out_f)
        fprintf(out_f, "# ratio: between_us / shared_us (above 1: the "
                "shared pool's way is faster)\n");
    ump_free(pool, x.send);
    ump_free(pool, x.recv);
    free(x.host);
    if (x.s)
        ump_stream_destroy(pool, x.s);
    if (cs)
        ump_comm_destroy(cs);
    if (cb)
        ump_comm_destroy(cb);
    if (bound)
        sched_setaffinity(0, sizeof(was), &was);
    return rc;
}
