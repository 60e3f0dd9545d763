/*
 * The collectives over several processes. Hierarchical: inside each process
 * the pooled algorithms of a one-process communicator (world->local), whose
 * ranks read each other's buffers through the pool's pointers; between
 * processes the data engine (xchg.c) moves one buffer per process; then
 * inside again. For allreduce: reduce to local rank 0, allreduce across the
 * processes, broadcast from local rank 0; the others compose the same way
 * (each function says how). Flat (allreduce, small buffers on the CPU):
 * every rank's input goes to every process, which folds them itself: one
 * round between processes and no in-process phases, for latency.
 *
 * The fixed order: a reduction folds each process's ranks in rank order
 * (the in-process reduce), then the processes' partial results in process
 * order, in the element type (float16 and bfloat16 partials are rounded to
 * their type: they travel as it); AVG sums and divides once by every rank's
 * count at the end. Both schedules fold exactly so, and every process folds
 * a slice the same way, so every rank of every process gets the same bits,
 * run after run, whichever schedule the size picks.
 *
 * The calling thread runs the steps between processes: a call first waits
 * for the ranks' streams (the work queued before it), moves the data
 * between processes before it returns, and leaves only the last in-process
 * phase queued on the streams. The CPU folds the processes' partials: on
 * cuda they are staged through host memory (coll_stage_in).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/hier.h"
#include "coll/model.h"
#include "coll/reduce.h"
#include "coll/run.h"
#include "coll/shared.h"
#include "coll/world.h"
#include "front/front.h"
#include "util/log.h"

/* The engine between processes, as the schedule choice sees it: a start-up
 * cost per round and a bandwidth per direction. Same node: MPI's shared
 * memory (a copy in and out through a shared segment, a few GB/s on a
 * loaded host). Across nodes: a 100 Gb/s network. Rough: they only choose
 * between schedules whose costs differ by a round or by a factor of the
 * rank count. */
#define ENG_NODE_US 3.0
#define ENG_NODE_GBPS 5.0
#define ENG_NET_US 8.0
#define ENG_NET_GBPS 12.5

static double eng_us(const struct coll_world *w, int rounds, double bytes)
{
    bool net = w->nnode > 1;
    return rounds * (net ? ENG_NET_US : ENG_NODE_US) +
           bytes / ((net ? ENG_NET_GBPS : ENG_NODE_GBPS) * 1e3);
}

/* A failed device (or a lost buffer) on this process's side of a call
 * must not make it skip the exchanges: its peers would wait for it until
 * comm_timeout and the communicator would break. So the in-process phases
 * go through hier_local(): once a rank's device has failed (or a phase says
 * -EIO), w->bad records it and the phase's error is swallowed; the
 * schedule runs on with stand-in data, every exchange happens, and the
 * call's agreement (agree) makes it -EIO on every process. */
int hier_local(ump_comm_t *c, int rc)
{
    struct coll_world *w = c->world;
    if (!rc)
        return 0;
    if (w->bad || rc == -EIO || coll_comm_failed_rank(c) >= 0) {
        if (!w->bad)
            w->bad = -EIO;
        return 0;
    }
    return rc;
}

/* An in-process phase of the call a: the collective coll on this
 * process's ranks (world->local, run.c) with a's element type and streams,
 * under hier_local(). Its log lines name the caller's collective. */
int hier_phase(ump_comm_t *c, const struct coll_args *a, int coll,
                 const void *const *send, void *const *recv, size_t count,
                 int op, int root)
{
    return hier_local(c, coll_run_local(c->world->local,
                                   &(const struct coll_args){
                                       a->fn, coll, send, recv, count, a->dt,
                                       op, root, a->streams}));
}

/* coll_stage_in, or once this process's part failed, a zeroed stand-in of
 * len bytes (never the buffer itself: it may be NULL, lost or unreachable
 * by then), freed by stage_out. */
static int stage_in(ump_comm_t *c, void *p, size_t len, bool copy, void **h)
{
    int rc = c->world->bad ? -EIO : coll_stage_in(c, p, len, copy, h);
    if (!rc || hier_local(c, rc))
        return rc;
    *h = calloc(1, len ? len : 1);
    return *h ? 0 : -ENOMEM;
}

/* coll_stage_out; once the part failed, nothing is copied back (h is
 * freed, or kept if the communicator broke: a cancelled send may still
 * read it, coll_stage_out). */
static int stage_out(ump_comm_t *c, void *p, void *h, size_t len, bool copy)
{
    if (c->world->bad) {
        coll_stage_out(c, p, h, len, false);
        return 0;
    }
    return hier_local(c, coll_stage_out(c, p, h, len, copy));
}

/* Local rank r's stream, as the call's in-process phases use it. */
int hier_sync_rank(ump_comm_t *c, const struct coll_args *a, int r)
{
    return hier_local(c, a->streams ? ump_stream_synchronize(c->pool,
                                                        a->streams[r])
                               : 0);
}

int hier_sync_all(ump_comm_t *c, const struct coll_args *a)
{
    int rc = 0;
    for (int r = 0; !rc && r < c->n; r++)
        rc = hier_sync_rank(c, a, r);
    return rc;
}

static int proc_of(const struct coll_world *w, int g)
{
    int p = 0;
    while (p + 1 < w->nproc && w->first[p + 1] <= g)
        p++;
    return p;
}

static struct coll_msg msg(const struct coll_world *w, void *buf,
                           size_t bytes, int proc, bool send)
{
    return (struct coll_msg){buf, bytes, proc, coll_call_tag(w), send, 0};
}

/* Allreduce of h (count elements, host memory) over the processes, folded
 * in process order. Large: each process reduces its slice (reduce-scatter)
 * and sends it to all (allgather), 2 rounds of 2(P-1)/P of the bytes. Small:
 * every process sends all of h to all and folds everything, one round.
 * Both fold every element in the same order: the same bits. */
int hier_proc_allreduce(ump_comm_t *c, void *h, size_t count, int dt,
                          int op, const char *fn)
{
    struct coll_world *w = c->world;
    int np = w->nproc, me = w->me;
    size_t esz = coll_dtype_size(dt), s = count * esz;
    bool one = eng_us(w, 1, (double)(np - 1) * (double)s) <=
               eng_us(w, 2, 2.0 * (np - 1) / np * (double)s);
    size_t lo = one ? 0 : count * (size_t)me / (size_t)np;
    size_t hi = one ? count : count * (size_t)(me + 1) / (size_t)np;
    size_t mine = (hi - lo) * esz;
    char *tmp = coll_world_tmp(w, 0, (size_t)np * mine);
    struct coll_msg *m = calloc(2 * (size_t)np, sizeof(*m));
    const void **src = calloc((size_t)np, sizeof(*src));
    int rc = tmp && m && src ? 0 : -ENOMEM, k = 0;
    char *hc = h;
    for (int q = 0; !rc && q < np; q++) {
        if (q == me)
            continue;
        size_t qlo = one ? 0 : count * (size_t)q / (size_t)np;
        size_t qhi = one ? count : count * (size_t)(q + 1) / (size_t)np;
        m[k++] = msg(w, hc + qlo * esz, (qhi - qlo) * esz, q, true);
        m[k++] = msg(w, tmp + (size_t)q * mine, mine, q, false);
    }
    if (!rc)
        rc = coll_xchg(c, m, k, fn);
    if (!rc) {
        for (int q = 0; q < np; q++)
            src[q] = q == me ? hc + lo * esz : tmp + (size_t)q * mine;
        coll_reduce(dt, op, hc + lo * esz, src, np, hi - lo);
    }
    k = 0;
    for (int q = 0; !rc && !one && q < np; q++) {
        if (q == me)
            continue;
        size_t qlo = count * (size_t)q / (size_t)np;
        size_t qhi = count * (size_t)(q + 1) / (size_t)np;
        m[k++] = msg(w, hc + lo * esz, mine, q, true);
        m[k++] = msg(w, hc + qlo * esz, (qhi - qlo) * esz, q, false);
    }
    if (!rc && !one)
        rc = coll_xchg(c, m, k, fn);
    free(m);
    free(src);
    return rc;
}

/* Allreduce, hierarchical: reduce to local rank 0's recv, allreduce across
 * the processes, broadcast from local rank 0. Device memory the CPU cannot
 * reach goes through pinned host memory in one hop or in pipelined pieces
 * (staged.c); otherwise the host view of rank 0's buffer is folded. */
static int hier_allreduce(ump_comm_t *c, const struct coll_args *a)
{
    int rc = coll_staged_allreduce(c, a);
    if (rc <= 0)
        return rc;
    size_t s = a->count * esz_of(a);
    int op = reduce_op(a->op);
    rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, a->recv, a->count, op, 0);
    if (!rc)
        rc = hier_sync_rank(c, a, 0);
    if (rc)
        return rc;
    void *h = NULL;
    if ((rc = stage_in(c, a->recv[0], s, true, &h)))
        return rc;
    rc = hier_proc_allreduce(c, h, a->count, a->dt, op, a->fn);
    if (!rc && a->op == UMP_AVG)
        coll_avg_finish(a->dt, h, a->count, c->nall);
    int e = stage_out(c, a->recv[0], h, s, !rc);
    rc = rc ? rc : e;
    if (!rc && c->n > 1)
        rc = hier_phase(c, a, UMP_COLL_BROADCAST, (const void *const *)a->recv,
                        a->recv, a->count, 0, 0);
    return rc;
}

static bool all_host(ump_comm_t *c, const struct coll_args *a)
{
    for (int r = 0; r < c->n; r++)
        if (!coll_host_ok(c->pool, a->send[r]) ||
            !coll_host_ok(c->pool, a->recv[r]))
            return false;
    return true;
}

/* Allreduce, flat: every rank's input to every process, each folds them
 * all (per process, then across, as the hierarchical schedule does). The
 * CPU reads and writes the buffers: host memory only. */
/* The processes' verdicts all[0..np) (0, or a negative errno: that
 * process's part failed), mine among them: -EIO when any failed, logged
 * once here. */
static int verdict_of(const int32_t *all, int np, int32_t mine,
                      const char *fn)
{
    int first = -1;
    for (int p = 0; p < np && first < 0; p++)
        if (all[p])
            first = p;
    if (first < 0)
        return 0;
    if (!mine)
        ump_log_error("%s: process %d's part failed (%s: a failed device, "
                      "or a lost buffer): -EIO on every process", fn, first,
                      ump_strerror(all[first]));
    else
        ump_log_error("%s: this process's part failed (%s): -EIO on every "
                      "process", fn, ump_strerror(mine));
    return -EIO;
}

static int flat_allreduce(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a);
    int np = w->nproc, op = reduce_op(a->op), k = 0;
    char *in = coll_world_tmp(w, 0, (size_t)c->nall * s);
    char *part = coll_world_tmp(w, 1, (size_t)np * s);
    /* Every process sends every other its data: the call's verdict (agree)
     * rides along in the same exchange, one word each way, at no extra
     * round trip. It is taken as the sends are posted; a device failing
     * during the exchange (microseconds) shows at the next call. */
    struct coll_msg *m = calloc((size_t)c->nall * 2 + 2 * (size_t)np + 1,
                                sizeof(*m));
    const void **src = calloc((size_t)c->nall + (size_t)np, sizeof(*src));
    int32_t *verdict = calloc((size_t)np, sizeof(*verdict));
    int rc = in && part && m && src && verdict ? 0 : -ENOMEM;
    int32_t mine = w->bad ? w->bad : coll_comm_failed_rank(c) >= 0 ? -EIO : 0;
    const void *const *send = a->send;
    const void *zero[COLL_MAX_RANKS];
    void *z = NULL;
    if (mine) { /* the buffers may be lost: stand-in zeros, not them */
        w->bad = mine;
        if (!rc)
            rc = stage_in(c, NULL, s, false, &z);
        for (int r = 0; r < c->n; r++)
            zero[r] = z;
        send = zero;
    }
    for (int p = 0; !rc && p < np; p++) {
        if (p == w->me)
            continue;
        for (int r = 0; r < c->n; r++)
            m[k++] = msg(w, (void *)send[r], s, p, true);
        for (int i = 0; i < w->nr[p]; i++)
            m[k++] = msg(w, in + (size_t)(w->first[p] + i) * s, s, p, false);
        m[k++] = msg(w, &mine, sizeof(mine), p, true);
        m[k++] = msg(w, &verdict[p], sizeof(verdict[p]), p, false);
    }
    if (!rc)
        rc = coll_xchg(c, m, k, a->fn);
    if (!rc) {
        verdict[w->me] = mine;
        rc = verdict_of(verdict, np, mine, a->fn);
        w->agreed = true;
    }
    if (!rc) {
        for (int p = 0; p < np; p++) {
            for (int i = 0; i < w->nr[p]; i++)
                src[i] = p == w->me ? a->send[i]
                                    : in + (size_t)(w->first[p] + i) * s;
            coll_reduce(a->dt, op, part + (size_t)p * s, src, w->nr[p],
                        a->count);
        }
        for (int p = 0; p < np; p++)
            src[p] = part + (size_t)p * s;
        coll_reduce(a->dt, op, in, src, np, a->count);
        if (a->op == UMP_AVG)
            coll_avg_finish(a->dt, in, a->count, c->nall);
        for (int r = 0; r < c->n; r++)
            memcpy(a->recv[r], in, s);
    }
    free(m);
    free(src);
    free(verdict);
    if (z)
        stage_out(c, NULL, z, s, false);
    return rc;
}

/* Broadcast: inside the root's process first, then from its rank to one
 * rank of every other process, then inside those. */
static int hier_broadcast(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a);
    int q = proc_of(w, a->root), lr = a->root - w->first[q], rc, k = 0;
    void *h = NULL;
    struct coll_msg *m = calloc((size_t)w->nproc, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (w->me == q) {
        rc = hier_phase(c, a, UMP_COLL_BROADCAST, a->send, a->recv, a->count, 0, lr);
        if (!rc)
            rc = hier_sync_rank(c, a, lr);
        if (!rc)
            rc = stage_in(c, a->recv[lr], s, true, &h);
        for (int p = 0; !rc && p < w->nproc; p++)
            if (p != q)
                m[k++] = msg(w, h, s, p, true);
        if (!rc) {
            rc = coll_xchg(c, m, k, a->fn);
            int e = stage_out(c, a->recv[lr], h, s, false);
            rc = rc ? rc : e;
        }
    } else {
        rc = stage_in(c, a->recv[0], s, false, &h);
        if (!rc) {
            m[k++] = msg(w, h, s, q, false);
            rc = coll_xchg(c, m, k, a->fn);
            int e = stage_out(c, a->recv[0], h, s, !rc);
            rc = rc ? rc : e;
        }
        if (!rc && c->n > 1)
            rc = hier_phase(c, a, UMP_COLL_BROADCAST, (const void *const *)a->recv,
                       a->recv, a->count, 0, 0);
    }
    free(m);
    return rc;
}

static void *scratch(ump_comm_t *c, size_t bytes, int *rc)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    hints.device = c->dev[0];
    hints.flags = UMP_HINT_NO_SPILL;
    void *p = NULL;
    *rc = hier_local(c, ump_alloc(c->pool, bytes ? bytes : 1, &hints, &p));
    return p;
}

/* Reduce: inside every process to one rank (the root's process: the root),
 * then the other processes' partials to the root, folded there in process
 * order. */
static int hier_reduce(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a);
    int np = w->nproc, q = proc_of(w, a->root), lr = a->root - w->first[q];
    int op = reduce_op(a->op), rc, k = 0;
    struct coll_msg *m = calloc((size_t)np, sizeof(*m));
    if (!m)
        return -ENOMEM;
    void *h = NULL;
    if (w->me == q) {
        char *tmp = coll_world_tmp(w, 0, (size_t)np * s);
        const void **src = calloc((size_t)np, sizeof(*src));
        rc = tmp && src ? 0 : -ENOMEM;
        if (!rc)
            rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, a->recv, a->count, op,
                       lr);
        if (!rc)
            rc = hier_sync_rank(c, a, lr);
        if (!rc)
            rc = stage_in(c, a->recv[lr], s, true, &h);
        for (int p = 0; !rc && p < np; p++)
            if (p != q)
                m[k++] = msg(w, tmp + (size_t)p * s, s, p, false);
        if (!rc) {
            rc = coll_xchg(c, m, k, a->fn);
            for (int p = 0; !rc && p < np; p++)
                src[p] = p == q ? h : tmp + (size_t)p * s;
            if (!rc) {
                coll_reduce(a->dt, op, h, src, np, a->count);
                if (a->op == UMP_AVG)
                    coll_avg_finish(a->dt, h, a->count, c->nall);
            }
            int e = stage_out(c, a->recv[lr], h, s, !rc);
            rc = rc ? rc : e;
        }
        free(src);
    } else {
        void *S = scratch(c, s, &rc);
        void *R[COLL_MAX_RANKS] = {S};
        if (!rc)
            rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, R, a->count, op, 0);
        if (!rc)
            rc = hier_sync_rank(c, a, 0);
        if (!rc)
            rc = stage_in(c, S, s, true, &h);
        if (!rc) {
            m[k++] = msg(w, h, s, q, true);
            rc = coll_xchg(c, m, k, a->fn);
            stage_out(c, S, h, s, false);
        }
        if (S)
            ump_free(c->pool, S);
    }
    free(m);
    return rc;
}

/* Allgather: inside each process into its block of every local recv, the
 * blocks between processes into local rank 0's recv, then a broadcast of
 * the whole of it inside. */
static int hier_allgather(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a), all = s * (size_t)c->nall;
    void *R[COLL_MAX_RANKS];
    for (int r = 0; r < c->n; r++)
        R[r] = (char *)a->recv[r] + (size_t)c->first * s;
    int rc = hier_phase(c, a, UMP_COLL_ALLGATHER, a->send, R, a->count, 0, 0), k = 0;
    if (!rc)
        rc = hier_sync_rank(c, a, 0);
    char *h = NULL;
    if (!rc)
        rc = stage_in(c, a->recv[0], all, true, (void **)&h);
    if (rc)
        return rc;
    struct coll_msg *m = calloc(2 * (size_t)w->nproc, sizeof(*m));
    rc = m ? 0 : -ENOMEM;
    for (int p = 0; !rc && p < w->nproc; p++) {
        if (p == w->me)
            continue;
        m[k++] = msg(w, h + (size_t)c->first * s, (size_t)c->n * s, p, true);
        m[k++] = msg(w, h + (size_t)w->first[p] * s, (size_t)w->nr[p] * s, p,
                     false);
    }
    if (!rc)
        rc = coll_xchg(c, m, k, a->fn);
    free(m);
    int e = stage_out(c, a->recv[0], h, all, !rc);
    rc = rc ? rc : e;
    if (!rc && c->n > 1)
        rc = hier_phase(c, a, UMP_COLL_BROADCAST, (const void *const *)a->recv,
                   a->recv, a->count * (size_t)c->nall, 0, 0);
    return rc;
}

/* Reduce-scatter: every block reduced inside the process to local rank 0
 * (scratch), each process's blocks to it, folded there in process order,
 * then scattered inside. */
static int hier_reduce_scatter(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a), all = s * (size_t)c->nall;
    size_t mine = s * (size_t)c->n;
    int np = w->nproc, op = reduce_op(a->op), rc, k = 0;
    char *S = scratch(c, all, &rc), *h = NULL;
    void *R[COLL_MAX_RANKS] = {S};
    if (!rc)
        rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, R,
                   a->count * (size_t)c->nall, op, 0);
    if (!rc)
        rc = hier_sync_rank(c, a, 0);
    if (!rc)
        rc = stage_in(c, S, all, true, (void **)&h);
    if (rc) {
        if (S)
            ump_free(c->pool, S);
        return rc;
    }
    char *tmp = coll_world_tmp(w, 0, (size_t)np * mine);
    struct coll_msg *m = calloc(2 * (size_t)np, sizeof(*m));
    const void **src = calloc((size_t)np, sizeof(*src));
    rc = tmp && m && src ? 0 : -ENOMEM;
    char *own = h + (size_t)c->first * s;
    for (int p = 0; !rc && p < np; p++) {
        if (p == w->me)
            continue;
        m[k++] = msg(w, h + (size_t)w->first[p] * s, (size_t)w->nr[p] * s, p,
                     true);
        m[k++] = msg(w, tmp + (size_t)p * mine, mine, p, false);
    }
    if (!rc)
        rc = coll_xchg(c, m, k, a->fn);
    if (!rc) {
        for (int p = 0; p < np; p++)
            src[p] = p == w->me ? own : tmp + (size_t)p * mine;
        coll_reduce(a->dt, op, own, src, np, a->count * (size_t)c->n);
        if (a->op == UMP_AVG)
            coll_avg_finish(a->dt, own, a->count * (size_t)c->n, c->nall);
    }
    free(m);
    free(src);
    int e = stage_out(c, S, h, all, !rc);
    rc = rc ? rc : e;
    const void *from[COLL_MAX_RANKS] = {S + (size_t)c->first * s};
    /* Once the part failed there is nothing right to scatter (and S is
     * freed at once below: nothing may still read it). */
    if (!rc && !w->bad)
        rc = hier_phase(c, a, UMP_COLL_SCATTER, from, a->recv, a->count, 0, 0);
    /* The scatter's ranks are done reading S when local rank 0's stream
     * is past it (its last barrier). */
    if (S && a->streams && !w->bad)
        ump_free_async(c->pool, S, a->streams[0]);
    else if (S)
        ump_free(c->pool, S);
    return rc;
}

/* Host views of the n local buffers (copy: with their bytes; own: a
 * private copy even where the CPU reaches the buffer). */
static int views(ump_comm_t *c, void *const *buf, size_t len, bool copy,
                 bool own, void **h)
{
    int rc = 0, r = 0;
    for (; r < c->n; r++) {
        if (own && coll_host_ok(c->pool, buf[r])) {
            h[r] = malloc(len + 1);
            rc = h[r] ? 0 : -ENOMEM;
            if (!rc)
                memcpy(h[r], buf[r], len);
        } else {
            rc = stage_in(c, buf[r], len, copy, &h[r]);
        }
        if (rc)
            break;
    }
    for (int i = 0; rc && i < r; i++)
        if (h[i] != buf[i])
            coll_stage_free(c->pool, h[i]);
    return rc;
}

static int views_end(ump_comm_t *c, void *const *buf, size_t len, bool copy,
                     void **h)
{
    int rc = 0;
    for (int r = 0; r < c->n; r++) {
        int e = stage_out(c, buf[r], h[r], len, copy);
        rc = rc ? rc : e;
    }
    return rc;
}

/* All-to-all: the blocks between this process's ranks inside it, every
 * other block straight from its sender to its receiver's process (one
 * message per pair of ranks). */
static int hier_alltoall(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a), all = s * (size_t)c->nall;
    const void *S[COLL_MAX_RANKS];
    void *R[COLL_MAX_RANKS];
    bool inplace = false;
    for (int r = 0; r < c->n; r++) {
        S[r] = (const char *)a->send[r] + (size_t)c->first * s;
        R[r] = (char *)a->recv[r] + (size_t)c->first * s;
        inplace |= a->send[r] == a->recv[r];
    }
    /* In place, a block may arrive where one still waits to leave: the
     * sends read a private copy, taken before the local exchange. */
    void *hs[COLL_MAX_RANKS], *hr[COLL_MAX_RANKS];
    int rc = views(c, (void *const *)a->send, all, true, inplace, hs);
    if (rc)
        return rc;
    rc = hier_phase(c, a, UMP_COLL_ALLTOALL, S, R, a->count, 0, 0);
    if (!rc)
        rc = hier_sync_all(c, a);
    if (!rc)
        rc = views(c, a->recv, all, true, false, hr);
    if (rc) {
        views_end(c, (void *const *)a->send, all, false, hs);
        return rc;
    }
    size_t nm = 2 * (size_t)c->n * (size_t)c->nall, k = 0;
    struct coll_msg *m = calloc(nm, sizeof(*m));
    rc = m ? 0 : -ENOMEM;
    for (int p = 0; !rc && p < w->nproc; p++) {
        if (p == w->me)
            continue;
        /* The same order on both sides: sender's rank, then receiver's. */
        for (int r = 0; r < c->n; r++)
            for (int j = 0; j < w->nr[p]; j++)
                m[k++] = msg(w, (char *)hs[r] + (size_t)(w->first[p] + j) * s,
                             s, p, true);
        for (int i = 0; i < w->nr[p]; i++)
            for (int r = 0; r < c->n; r++)
                m[k++] = msg(w, (char *)hr[r] + (size_t)(w->first[p] + i) * s,
                             s, p, false);
    }
    if (!rc)
        rc = coll_xchg(c, m, (int)k, a->fn);
    free(m);
    views_end(c, (void *const *)a->send, all, false, hs);
    int e = views_end(c, a->recv, all, !rc, hr);
    return rc ? rc : e;
}

/* Gather: inside the root's process into its block of the root's recv;
 * every other rank's buffer straight to the root's process. */
static int hier_gather(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a), all = s * (size_t)c->nall;
    int q = proc_of(w, a->root), lr = a->root - w->first[q], rc;
    size_t k = 0;
    struct coll_msg *m = calloc((size_t)c->nall, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (w->me == q) {
        void *R[COLL_MAX_RANKS] = {0};
        R[lr] = (char *)a->recv[lr] + (size_t)c->first * s;
        char *h = NULL;
        rc = hier_phase(c, a, UMP_COLL_GATHER, a->send, R, a->count, 0, lr);
        if (!rc)
            rc = hier_sync_rank(c, a, lr);
        if (!rc)
            rc = stage_in(c, a->recv[lr], all, true, (void **)&h);
        if (!rc) {
            for (int p = 0; p < w->nproc; p++)
                for (int i = 0; p != q && i < w->nr[p]; i++)
                    m[k++] = msg(w, h + (size_t)(w->first[p] + i) * s, s, p,
                                 false);
            rc = coll_xchg(c, m, (int)k, a->fn);
            int e = stage_out(c, a->recv[lr], h, all, !rc);
            rc = rc ? rc : e;
        }
    } else {
        void *hs[COLL_MAX_RANKS];
        rc = views(c, (void *const *)a->send, s, true, false, hs);
        if (!rc) {
            for (int r = 0; r < c->n; r++)
                m[k++] = msg(w, hs[r], s, q, true);
            rc = coll_xchg(c, m, (int)k, a->fn);
            views_end(c, (void *const *)a->send, s, false, hs);
        }
    }
    free(m);
    return rc;
}

/* Scatter: inside the root's process from its block of the root's send;
 * every other rank's block straight from the root's process. */
static int hier_scatter(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    size_t s = a->count * esz_of(a), all = s * (size_t)c->nall;
    int q = proc_of(w, a->root), lr = a->root - w->first[q], rc;
    size_t k = 0;
    struct coll_msg *m = calloc((size_t)c->nall, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (w->me == q) {
        const void *S[COLL_MAX_RANKS] = {0};
        S[lr] = (const char *)a->send[lr] + (size_t)c->first * s;
        char *h = NULL;
        rc = hier_phase(c, a, UMP_COLL_SCATTER, S, a->recv, a->count, 0, lr);
        if (!rc)
            rc = stage_in(c, (void *)a->send[lr], all, true,
                               (void **)&h);
        if (!rc) {
            for (int p = 0; p < w->nproc; p++)
                for (int i = 0; p != q && i < w->nr[p]; i++)
                    m[k++] = msg(w, h + (size_t)(w->first[p] + i) * s, s, p,
                                 true);
            rc = coll_xchg(c, m, (int)k, a->fn);
            stage_out(c, (void *)a->send[lr], h, all, false);
        }
        /* The in-process scatter reads the root's send meanwhile: wait for
         * it before the caller may change it (streams NULL: done). */
        int e = hier_sync_all(c, a);
        rc = rc ? rc : e;
    } else {
        void *hr[COLL_MAX_RANKS];
        rc = views(c, a->recv, s, false, false, hr);
        if (!rc) {
            for (int r = 0; r < c->n; r++)
                m[k++] = msg(w, hr[r], s, q, false);
            rc = coll_xchg(c, m, (int)k, a->fn);
            int e = views_end(c, a->recv, s, !rc, hr);
            rc = rc ? rc : e;
        }
    }
    free(m);
    return rc;
}

/* Flat or hierarchical allreduce of bytes (c->world->nproc > 1). Every
 * process must choose the same, so the choice reads only what they all
 * know (the processes' rank counts, the bytes, the configuration), not
 * their own topologies. Flat runs on sim only (it folds on the CPU,
 * straight from the buffers), so the costs are the sim's: an in-process
 * phase is the stream workers' hand-offs plus its bytes through one CPU
 * (every rank's buffer read or written), the CPU folds and copies at about
 * one core's memory speed. Calibrated with scripts/bench-mpi on 2 cores
 * (flat wins to about 256 KiB of float32 over 2 processes x 2 ranks). */
#define SIM_PHASE_US 20.0
#define SIM_CPU_GBPS 8.0
static bool want_flat(ump_comm_t *c, size_t bytes, double *us_p)
{
    struct coll_world *w = c->world;
    int np = w->nproc, nmax = 0;
    for (int p = 0; p < np; p++)
        nmax = w->nr[p] > nmax ? w->nr[p] : nmax;
    double b = (double)bytes, cpu = SIM_CPU_GBPS * 1e3; /* bytes per us */
    double one = eng_us(w, 1, (np - 1) * b);
    double two = eng_us(w, 2, 2.0 * (np - 1) / np * b);
    /* Reduce and broadcast inside, the exchange, the fold of the slices. */
    double hier = 2 * (SIM_PHASE_US + nmax * b / cpu) +
                  (one < two ? one : two) + b / cpu;
    /* Every rank's input to every process, folded there, copied out. */
    double flat = eng_us(w, 1, (double)(np - 1) * nmax * b) +
                  (c->nall + nmax) * b / cpu;
    bool f = !strcmp(c->pool->be->name, "sim") &&
             (c->sched == COLL_SCHED_FLAT ||
              (c->sched == COLL_SCHED_AUTO && flat < hier));
    if (us_p)
        *us_p = f ? flat : hier;
    return f;
}

const char *coll_world_plan(ump_comm_t *c, int coll, size_t count, int dt,
                            double *us_p)
{
    const ump_comm_t *L = c->world->local;
    if (c->world->nproc == 1) {
        ump_coll_plan_t plan;
        int rc = coll_comm_plan_local(L, coll, count, dt, &plan);
        *us_p = rc ? INFINITY : plan.modeled_us;
        return rc ? "none" : plan.algorithm;
    }
    size_t bytes = coll_bytes(coll, count, coll_dtype_size(dt), c->nall);
    if (coll_shared_takes(c, coll)) { /* as in one process (its model's) */
        coll_comm_algo(L, coll, bytes, us_p);
        return "shared";
    }
    if (coll == UMP_COLL_ALLREDUCE)
        return want_flat(c, bytes, us_p) ? "flat" : "hierarchical";
    /* The others: their in-process phase and one round between processes
     * of the bytes (an estimate: the plan names the schedule). */
    double in;
    coll_comm_algo(L, coll, bytes, &in);
    *us_p = in + eng_us(c->world, 1, (double)bytes);
    return "hierarchical";
}

/* The call's verdict, the same on every process: each sends the others
 * its own (0, or this process's part failed: w->bad). A failed device is
 * known only to its process, and it took part in every exchange with
 * stand-in data (local): without this round its peers would return 0
 * with results built from that data. One message of 4 bytes to and from
 * every other process per call: the cheapest that tells every process
 * (a flag in the schedule's own messages would not reach the processes a
 * rooted schedule sends nothing to). */
static int agree(ump_comm_t *c, const char *fn)
{
    struct coll_world *w = c->world;
    int np = w->nproc, k = 0;
    int32_t mine = w->bad ? w->bad
                          : coll_comm_failed_rank(c) >= 0 ? -EIO : 0;
    int32_t *all = calloc((size_t)np, sizeof(*all));
    struct coll_msg *m = calloc(2 * (size_t)np, sizeof(*m));
    int rc = all && m ? 0 : -ENOMEM;
    for (int p = 0; !rc && p < np; p++) {
        if (p == w->me)
            continue;
        m[k++] = msg(w, &mine, sizeof(mine), p, true);
        m[k++] = msg(w, &all[p], sizeof(all[p]), p, false);
    }
    if (!rc)
        rc = coll_xchg(c, m, k, fn);
    if (!rc) {
        all[w->me] = mine;
        rc = verdict_of(all, np, mine, fn);
    }
    free(m);
    free(all);
    return rc;
}

static int schedule(ump_comm_t *c, const struct coll_args *a)
{
    switch (a->coll) {
    case UMP_COLL_ALLREDUCE:
        if (all_host(c, a) &&
            want_flat(c, a->count * esz_of(a), NULL))
            return flat_allreduce(c, a);
        return hier_allreduce(c, a);
    case UMP_COLL_BROADCAST:
        return hier_broadcast(c, a);
    case UMP_COLL_REDUCE:
        return hier_reduce(c, a);
    case UMP_COLL_ALLGATHER:
        return hier_allgather(c, a);
    case UMP_COLL_REDUCE_SCATTER:
        return hier_reduce_scatter(c, a);
    case UMP_COLL_ALLTOALL:
        return hier_alltoall(c, a);
    case UMP_COLL_GATHER:
        return hier_gather(c, a);
    default:
        return hier_scatter(c, a);
    }
}

int coll_world_run(ump_comm_t *c, const struct coll_args *a, int bad)
{
    struct coll_world *w = c->world;
    if (w->broken) {
        ump_log_error("%s: the communicator failed earlier (%s); destroy it",
                      a->fn, ump_strerror(w->broken));
        coll_shared_give_up(c);
        return w->broken;
    }
    w->bad = bad ? bad : coll_comm_check_failed(c, a->fn);
    /* Every process of one shared pool: one job over every rank, when
     * they all can (else 1, everywhere). */
    int rc = coll_shared_run(c, a);
    if (rc != 1) {
        w->bad = 0;
        w->agreed = false;
        return rc;
    }
    /* The work queued before the call on the ranks' streams (the
     * producers of the send buffers, readers of the recv buffers) is done
     * before the CPU or the engine touches them. */
    rc = hier_sync_all(c, a);
    if (!rc)
        rc = schedule(c, a);
    /* An error of the schedule itself (out of memory, the engine): the
     * processes no longer agree on what was sent; only a call that made
     * every exchange has a verdict to agree on. */
    if (!rc && !w->agreed)
        rc = agree(c, a->fn);
    w->bad = 0;
    w->agreed = false;
    return rc;
}
