/*
 * A collective on the ranks of one process: the call checked, its
 * algorithm chosen, and each rank's share queued on its stream. On sim a
 * rank's share is a host function reading and writing pool memory from the
 * stream's worker thread (job.h); on a backend that runs kernels (cuda),
 * copies and kernel launches between event barriers (gpu.h). The public
 * calls (calls.c) and the hierarchical schedules between processes
 * (hier.c, for their in-process phases) both run here.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "coll/check.h"
#include "coll/comm.h"
#include "coll/gpu.h"
#include "coll/job.h"
#include "coll/reduce.h"
#include "coll/run.h"
#include "front/check.h"
#include "front/front.h"
#include "front/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/poll.h"

static void job_free(struct coll_job *j)
{
    if (j->x)
        atomic_fetch_sub(&j->x->inflight, 1);
    for (int r = 0; r < j->n; r++)
        free(j->scratch[r]);
    free(j->logs);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* A job whose ranks are all done: freed, or handed to its communicator
 * when it holds acquired buffers (released by the next call, or by
 * ump_comm_destroy). */
static void job_finish(struct coll_job *j)
{
    if (!j->nhold) {
        job_free(j);
        return;
    }
    ump_comm_t *c = j->comm;
    pthread_mutex_lock(&c->done_lock);
    j->next = c->done;
    c->done = j;
    pthread_mutex_unlock(&c->done_lock);
}

static void release_holds(ump_comm_t *c, struct coll_job *j)
{
    for (int i = 0; i < j->nhold; i++)
        ump_release(c->pool, j->hold[i].p, j->hold[i].len);
    j->nhold = 0;
}

void coll_comm_reap(ump_comm_t *c)
{
    if (c->gpu) {
        coll_gpu_reap(c, false);
        return;
    }
    pthread_mutex_lock(&c->done_lock);
    struct coll_job *j = c->done;
    c->done = NULL;
    pthread_mutex_unlock(&c->done_lock);
    while (j) {
        struct coll_job *next = j->next;
        release_holds(c, j);
        job_free(j);
        j = next;
    }
}

/* Acquires every buffer of the call whose allocation may move, so that no
 * tier moves it while a rank reads or writes it. */
static int hold_buffers(ump_comm_t *c, const struct coll_args *a,
                        struct coll_job *j)
{
    size_t s = a->count * j->esz;
    for (int r = 0; r < c->n; r++) {
        struct coll_buf b[2];
        int k = coll_buffers(c, a, r, s, b);
        for (int i = 0; i < k; i++) {
            if (!pool_ptr_movable(c->pool, b[i].p))
                continue;
            void *p = (void *)(uintptr_t)b[i].p;
            int rc = ump_acquire(c->pool, p, b[i].len, c->dev[r], NULL);
            if (rc) {
                release_holds(c, j);
                return rc;
            }
            j->hold[j->nhold].p = p;
            j->hold[j->nhold++].len = b[i].len;
        }
    }
    return 0;
}

/* The last rank of a job that ran to the end: the sim's virtual-time link
 * model reads every rank's log (the other ranks are done with them: the
 * job's `left` count orders their writes before this) and gives the
 * communicator the executed schedule's modeled time. */
static void account(struct coll_job *j)
{
    const struct coll_xfer *log[COLL_MAX_RANKS];
    size_t nlog[COLL_MAX_RANKS];
    bool full = false;
    for (int r = 0; r < j->n; r++) {
        log[r] = j->rank[r].log;
        nlog[r] = j->rank[r].nlog;
        full |= j->rank[r].log_full;
    }
    /* Every rank passed the same barriers: each waits for all the others.
     * A fan logged into its one rank's log. */
    double us = full         ? NAN
                : j->fan >= 0 ? coll_model_exec_fan_us(&j->comm->topo,
                                                      log[j->fan],
                                                      nlog[j->fan])
                             : coll_model_exec_us(&j->comm->topo, j->algo,
                                                  log, nlog,
                                                  j->rank[0].step);
    coll_comm_set_last_us(j->comm, us);
}

/* The last rank of a job, ran to the end or not: every transfer the
 * ranks logged (model.h: a read of a peer's memory, a store into it)
 * crossed the link between their devices. */
static void count_traffic(struct coll_job *j)
{
    const int *dev = j->comm->dev;
    for (int r = 0; r < j->n; r++)
        for (size_t e = 0; e < j->rank[r].nlog; e++) {
            const struct coll_xfer *x = &j->rank[r].log[e];
            coll_traffic(j->comm->pool, dev[x->from], dev[x->to], x->bytes);
        }
}

/* One rank's share, on its stream. A first barrier: every rank's stream
 * has reached the call, so the work queued before it on every stream (the
 * producers of the send buffers) is done, and a call whose launch failed
 * half way stops here having written nothing. A last barrier: no rank's
 * stream runs on while a peer still reads its buffers. A device that fails
 * meanwhile aborts the job at the next barrier (coll_barrier): every rank
 * stops there, none waits for a rank that will not come, and the call is
 * -EIO. The sim runs a failed device's queued host functions all the same
 * (only new work is refused), so every rank does reach its barriers. */
static void rank_end(struct coll_job *j, int ranks);

static void rank_main(void *arg)
{
    struct coll_rank *cr = arg;
    struct coll_job *j = cr->job;
    if (coll_barrier(j, cr->r)) {
        if (j->x)
            coll_xalgo_run(j, cr->r);
        else
            coll_algo_run(j, cr->r);
    }
    coll_barrier(j, cr->r);
    rank_end(j, 1);
}

/* A fan's launch is done (or failed), seen without the lock. */
static bool fan_may_run(const void *arg)
{
    const struct coll_job *j = arg;
    return atomic_load(&j->launched) || atomic_load(&j->abort);
}

/* The fan (model.h, fan.c): the whole call in one host function on rank
 * q's stream, which the launch has joined to the others (queue_fan). It
 * starts once the launch has queued everything (the joins after it too),
 * as the ranks' schedules start at their first barrier: a launch that
 * failed half way writes nothing. A device failed by then: the call is
 * -EIO and nothing is written either. */
static void fan_main(void *arg)
{
    struct coll_rank *cr = arg;
    struct coll_job *j = cr->job;
    ump_poll(fan_may_run, j, UMP_POLL_NS);
    pthread_mutex_lock(&j->mu);
    while (!j->launched && !j->abort)
        pthread_cond_wait(&j->cv, &j->mu);
    if (coll_job_dev_failed(j))
        j->abort = true;
    bool ok = !j->abort;
    pthread_mutex_unlock(&j->mu);
    if (ok)
        coll_fan_run(j, cr->r);
    rank_end(j, j->n);
}

/* After `ranks` ranks' shares are done: the last rank of the job counts
 * its traffic, accounts its time and lets the job go. */
static void rank_end(struct coll_job *j, int ranks)
{
    pthread_mutex_lock(&j->mu);
    j->done += ranks;
    bool last = j->done == j->nl;
    /* A failure during the last step: no barrier after it saw it. */
    if (last && coll_job_dev_failed(j))
        j->abort = true;
    bool ok = !j->abort;
    if (last)
        pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    /* Across processes the logs are this process's ranks' only: no
     * traffic or time of the whole schedule here. */
    if (last && !j->x)
        count_traffic(j);
    if (last && ok && !j->x)
        account(j);
    if (atomic_fetch_sub(&j->left, 1) == 1)
        job_finish(j);
}

/* A job of c's ranks, or (all not NULL) of every process's: the ranks'
 * buffers all->send and all->recv, this process's from c->first. */
struct coll_all {
    int n, lo;
    const void *const *send;
    void *const *recv;
    struct coll_xjob *x;
};

static struct coll_job *job_new(ump_comm_t *c, const struct coll_args *a,
                                int algo, int fan, bool inplace,
                                const struct coll_all *all)
{
    struct coll_job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->coll = a->coll;
    j->algo = algo;
    j->fan = fan;
    j->n = all ? all->n : c->n;
    j->lo = all ? all->lo : 0;
    j->nl = c->n;
    j->x = all ? all->x : NULL;
    if (j->x)
        atomic_fetch_add(&j->x->inflight, 1); /* job_free's to take back */
    j->dt = a->dt;
    j->op = a->op;
    j->root = a->root;
    j->count = a->count;
    j->esz = coll_dtype_size(a->dt);
    j->inplace = inplace;
    j->comm = c;
    for (int r = 0; r < j->n; r++) {
        j->send[r] = all ? all->send[r] : a->send[r];
        j->recv[r] = all ? all->recv[r] : a->recv[r];
        j->rank[r] = (struct coll_rank){.job = j, .r = r};
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    /* + the caller's (launch); a fan runs as one */
    atomic_init(&j->left, (fan >= 0 ? 1 : c->n) + 1);
    j->failing = &c->pool->failing;
    j->failed = &c->pool->failed;
    for (int r = 0; r < c->n; r++)
        if (c->dev[r] < 32)
            j->devmask |= 1u << c->dev[r];
    j->log_cap = coll_algo_log_cap(j);
    j->logs = calloc((size_t)c->n * j->log_cap, sizeof(*j->logs));
    for (int r = 0; j->logs && r < c->n; r++)
        j->rank[j->lo + r].log = j->logs + (size_t)r * j->log_cap;
    j->scratch_bytes = fan >= 0 ? 0
                       : j->x ? coll_xalgo_scratch(j)
                              : coll_algo_scratch(j);
    if (!j->logs) {
        job_free(j);
        return NULL;
    }
    for (int r = j->lo; r < j->lo + c->n && j->scratch_bytes; r++)
        if (!(j->scratch[r] = malloc(j->scratch_bytes))) {
            job_free(j);
            return NULL;
        }
    return j;
}

/* Queues the fan on rank q's stream (model.h): on streams of the caller's,
 * q's waits for what the others queued before the call and theirs wait for
 * the fan's end, with events, as on the GPU (gpu.c); the communicator's
 * own streams (wait: the call is synchronous and nothing else runs on
 * them) need neither. *queued: whether fan_main is queued (then the job
 * runs to its end whatever this returns). */
static int queue_fan(ump_comm_t *c, struct coll_job *j, const ump_stream_t *st,
                     bool wait, bool *queued)
{
    const struct backend_ops *be = c->pool->be;
    void *bctx = c->pool->bctx;
    int q = j->fan, rc = 0;
    for (int r = 0; r < c->n && !wait && !rc; r++)
        if (st[r] != st[q] &&
            !(rc = be->event_record(bctx, c->ev[r], st[r])))
            rc = be->stream_wait_event(bctx, st[q], c->ev[r]);
    if (!rc)
        rc = ump_launch_host_func(c->pool, st[q], fan_main, &j->rank[q]);
    *queued = !rc;
    if (rc || wait || (rc = be->event_record(bctx, c->ev[q], st[q])))
        return rc;
    for (int r = 0; r < c->n && !rc; r++)
        if (st[r] != st[q])
            rc = be->stream_wait_event(bctx, st[r], c->ev[q]);
    return rc;
}

/* Queues every rank's share (or the fan); on a failure half way, the ranks
 * queued are told to stop at their first barrier (the fan, before it
 * starts) and the error comes back.
 * wait: the caller's own streams, so the call is synchronous: waits for
 * every rank to be done and says -EIO when a device failed meanwhile.
 * Streams that drained mean every rank is past its last barrier (the fast
 * path, one wake-up per stream; a fan's one stream); only when one refuses
 * (its device failed: sim refuses at once, while its rank may still run)
 * is the job itself waited for, since it must outlive its ranks. */
static int launch(ump_comm_t *c, struct coll_job *j, const ump_stream_t *st,
                  const char *fn, bool wait)
{
    int r = 0, rc = 0, nrun = j->fan >= 0 ? 1 : c->n;
    bool fan_queued = false;
    if (j->fan >= 0) {
        rc = queue_fan(c, j, st, wait, &fan_queued);
        r = fan_queued;
    } else {
        for (; r < c->n; r++) {
            rc = ump_launch_host_func(c->pool, st[r], rank_main,
                                      &j->rank[j->lo + r]);
            if (rc)
                break;
        }
    }
    if (!rc && j->fan >= 0) { /* the fan may start */
        pthread_mutex_lock(&j->mu);
        j->launched = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    if (!rc) {
        bool aborted = false;
        if (wait) {
            bool drained = true;
            for (int k = 0; k < c->n && drained; k++)
                if (j->fan < 0 || k == j->fan)
                    drained = ump_stream_synchronize(c->pool, st[k]) == 0;
            pthread_mutex_lock(&j->mu);
            while (!drained && j->done < j->nl)
                pthread_cond_wait(&j->cv, &j->mu);
            /* A device that failed before the call returns took its
             * rank's result with it. */
            aborted = j->abort || coll_job_dev_failed(j);
            pthread_mutex_unlock(&j->mu);
        }
        /* Across processes, an abort the devices do not explain: a
         * process gave up or did not come in time (xbar). */
        bool away = aborted && j->x && !coll_job_dev_failed(j);
        bool lost = away && atomic_load(j->x->lost); /* j may go below */
        if (atomic_fetch_sub(&j->left, 1) == 1)
            job_finish(j);
        if (!aborted)
            return 0;
        if (lost) {
            ump_log_error("%s: a device of another process of the shared "
                          "pool's communicator failed during the call: -EIO "
                          "(what the call wrote is undefined)", fn);
            return -EIO;
        }
        if (away) {
            ump_log_error("%s: a process of the shared pool's communicator "
                          "gave up or did not reach the call in time: "
                          "-ETIMEDOUT", fn);
            return -ETIMEDOUT;
        }
        /* The failure is handled (pool_check) before the caller sees it. */
        pool_check(c->pool, fn);
        int f = coll_comm_failed_rank(c);
        ump_log_error("%s: rank %d's device %d failed during the call: -EIO "
                      "(what the call wrote is undefined)", fn,
                      c->first + (f < 0 ? 0 : f), c->dev[f < 0 ? 0 : f]);
        return -EIO;
    }
    /* A fan queued before a join failed writes nothing (fan_main); the
     * other processes of a job across them stop at their next barrier. */
    if (j->x)
        coll_xjob_give_up(j->x, rc == -EIO);
    pthread_mutex_lock(&j->mu);
    j->abort = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (rc == -EIO) {
        int f = coll_comm_failed_rank(c);
        int at = j->fan >= 0 ? j->fan : r; /* whose queueing failed */
        ump_log_error("%s: rank %d's device %d failed while the call was "
                      "queued: -EIO", fn, c->first + (f < 0 ? at : f),
                      c->dev[f < 0 ? at : f]);
    }
    /* The ranks never queued, and the caller's reference. */
    if (atomic_fetch_sub(&j->left, nrun - r + 1) == nrun - r + 1)
        job_finish(j);
    return rc;
}

/* The call's job made, its buffers held, and queued on the streams st;
 * the comm's lock held. */
static int queue_job(ump_comm_t *c, const struct coll_args *a, int algo,
                     int fan, bool inplace, const struct coll_all *all,
                     const ump_stream_t *st)
{
    struct coll_job *j = job_new(c, a, algo, fan, inplace, all);
    int rc = j ? hold_buffers(c, a, j) : -ENOMEM;
    if (rc && all) /* the other processes' ranks would wait for ours */
        coll_xjob_give_up(all->x, false);
    if (rc && j)
        job_free(j);
    else if (!rc)
        rc = launch(c, j, st, a->fn, !a->streams);
    return rc;
}

int coll_run_local(ump_comm_t *c, const struct coll_args *a)
{
    int rc = pool_check(c->pool, a->fn);
    if (rc)
        return rc;
    /* A rank whose device failed: no collective can be right (it reads
     * and writes its peers' buffers, they read its). */
    bool inplace;
    rc = coll_comm_check_failed(c, a->fn);
    if (!rc)
        rc = coll_check_call(c, a, &inplace);
    if (rc || !a->count)
        return rc;
    const ump_stream_t *st = a->streams ? a->streams : c->own;
    coll_comm_reap(c);
    double us;
    size_t bytes = coll_bytes(a->coll, a->count, coll_dtype_size(a->dt), c->n);
    pthread_mutex_lock(&c->lock);
    int algo = coll_comm_algo(c, a->coll, bytes, &us);
    if (c->gpu) {
        /* Streams NULL: the call returns when its work is done. */
        rc = coll_gpu_run(c, a, algo, st, !a->streams);
    } else {
        int fan = c->ev[0] ? coll_model_fan(&c->topo, a->coll, algo, bytes,
                                            a->root)
                           : -1;
        rc = queue_job(c, a, algo, fan, inplace, NULL, st);
    }
    pthread_mutex_unlock(&c->lock);
    if (!a->streams)
        coll_comm_reap(c);
    return rc;
}

bool coll_xjob_idle(ump_comm_t *c, struct coll_xjob *x, double timeout_s)
{
    uint64_t deadline = timeout_s < 0 ? UINT64_MAX
                        : ump_clock_ns() + (uint64_t)(timeout_s * 1e9);
    for (;;) {
        coll_comm_reap(c); /* a finished job waiting there is counted */
        if (!atomic_load(&x->inflight))
            return true;
        if (ump_clock_ns() > deadline)
            return false;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

int coll_run_across(ump_comm_t *c, const struct coll_args *a, int algo,
                    int n, int lo, const void *const *send,
                    void *const *recv, bool inplace, struct coll_xjob *x)
{
    int rc = pool_check(c->pool, a->fn);
    const ump_stream_t *st = a->streams ? a->streams : c->own;
    /* The previous job (on other streams of the caller's) first: two
     * jobs' barriers on the one shared barrier would pair across
     * processes. */
    if (!rc && !coll_xjob_idle(c, x, x->timeout_s)) {
        ump_log_error("%s: the previous call on this communicator's "
                      "streams did not end within comm_timeout", a->fn);
        rc = -ETIMEDOUT;
    }
    struct coll_all all = {n, lo, send, recv, x};
    if (rc) {
        coll_xjob_give_up(x, rc == -EIO);
    } else {
        pthread_mutex_lock(&c->lock);
        rc = queue_job(c, a, algo, -1, inplace, &all, st);
        pthread_mutex_unlock(&c->lock);
    }
    if (!a->streams)
        coll_comm_reap(c);
    return rc;
}

int coll_run_init(ump_comm_t *c)
{
    const struct backend_ops *be = c->pool->be;
    int rc = 0;
    /* Without a backend that joins streams, no fan: the ranks' schedules
     * meet in their host functions. */
    for (int r = 0; r < c->n && !rc && be->stream_wait_event; r++)
        rc = be->event_create(c->pool->bctx, &c->ev[r]);
    if (rc)
        coll_run_fini(c);
    return rc;
}

void coll_run_fini(ump_comm_t *c)
{
    for (int r = 0; r < c->n; r++) {
        if (c->ev[r])
            c->pool->be->event_destroy(c->pool->bctx, c->ev[r]);
        c->ev[r] = NULL;
    }
}
