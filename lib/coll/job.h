/*
 * One collective in flight (job.c runs it, algo.c holds each algorithm's
 * per-rank schedule). On sim, rank r's share runs as a host function on its
 * stream, in the stream's worker thread, after the work queued before it:
 * it reads its peers' buffers through the pool's pointers, as a GPU reads a
 * peer over NVLink. Ranks hand steps to each other through a barrier of the
 * job (a mutex and a condition variable: the release/acquire edges TSan
 * checks), and every schedule ends with one, so that no rank's stream runs
 * on into work that overwrites a buffer a peer still reads.
 */
#ifndef UMP_COLL_JOB_H
#define UMP_COLL_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coll/coll.h"
#include "coll/model.h"
#include "coll/reduce.h"
#include "coll/xbar.h"

struct coll_job;

/* A rank's share: written only by the rank's own thread while the job
 * runs, read by the last rank to finish (after the job's `left` count, an
 * acquire-release edge). */
struct coll_rank {
    struct coll_job *job;
    int r;
    unsigned step;  /* barriers passed in this call */
    size_t nlog;    /* entries of log used */
    bool log_full;  /* the schedule logged more than log_cap: no time */
    struct coll_xfer *log; /* log_cap entries, in job->logs */
};

/* A job over the ranks of several processes of one shared pool
 * (shared.c): this process runs ranks [lo, lo + nl) of the job's n; the
 * others run in their processes, and the barriers meet across them. */
struct coll_xjob {
    struct xbar *bar;  /* in memory every process maps */
    int nproc;
    const int *first, *nr; /* per process: its first rank, its ranks */
    double timeout_s;
    /* This process's jobs not yet freed: they share bar, so one runs at
     * a time, and what they read stays open until they are done. */
    atomic_int inflight;
    /* Beside bar: set by a process that gave up because one of its
     * devices failed, before it aborts bar, so that the others say -EIO
     * (a failed device), not that a process went away. */
    atomic_int *lost;
};

/* This process gives up x's job, because of a failed device or not. */
static inline void coll_xjob_give_up(struct coll_xjob *x, bool dev_failed)
{
    if (dev_failed)
        atomic_store(x->lost, 1);
    xbar_abort(x->bar);
}

struct coll_job {
    int coll, algo, n, dt, op, root;
    int lo, nl; /* the ranks this process runs: [lo, lo + nl) (all n of
                   them, but across processes) */
    struct coll_xjob *x; /* across processes, or NULL */
    int fan; /* the rank that runs the whole call (model.h), or -1 */
    size_t count; /* elements, as the call's count means it */
    size_t esz;   /* bytes of one element */
    bool inplace; /* some rank's send and recv are the same buffer */
    const void *send[COLL_MAX_RANKS];
    void *recv[COLL_MAX_RANKS];
    void *scratch[COLL_MAX_RANKS]; /* per rank, where the schedule needs it */
    size_t scratch_bytes;
    /* The barrier: arrivals of the current generation. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    /* gen, abort and launched are written under mu and atomic for the
     * waits' polls without it (util/poll.h), as a kernel's ranks would
     * spin on a flag */
    _Atomic unsigned gen;
    _Atomic bool abort; /* (mu) not every rank was launched, or a rank's
                           device failed (fail_mask): nobody waits, the
                           call is -EIO */
    int done;   /* (mu) ranks past their last barrier */
    _Atomic bool launched; /* (mu) a fan's launch queued everything: it
                              may run */
    /* The pool's failure bits (failing: told by the backend, failed:
     * handled) and the bits of the job's devices: the barrier's last
     * arrival reads them, so that a device failing mid-call stops every
     * rank at its next barrier rather than letting the schedule run on
     * over poisoned memory (two relaxed loads per barrier). */
    _Atomic uint32_t *failing, *failed;
    uint32_t devmask;
    /* Ranks still running, plus the caller's reference (calls.c): the
     * last one to let go finishes the job. */
    atomic_int left;
    struct coll_rank rank[COLL_MAX_RANKS];
    /* The sim's virtual-time link model (model.h): every rank logs the
     * transfers of its schedule into its own log, one writer per log and
     * no lock; the last rank to finish computes the modeled time from all
     * the logs and gives it to the communicator. Sized from the schedule
     * (coll_algo_log_cap): a bounded append on the data path. */
    struct coll_xfer *logs;
    size_t log_cap; /* per rank */
    /* Buffers of movable allocations, acquired (pinned where they are)
     * for the call: released by the communicator once the job is done,
     * since a host function may not call the pool (calls.c). */
    int nhold;
    struct {
        void *p;
        size_t len;
    } hold[2 * COLL_MAX_RANKS];
    ump_comm_t *comm;
    struct coll_job *next; /* in comm->done */
};

/* Slice k of count elements over n ranks: [slice_lo, + slice_len), the
 * first count % n slices one element longer. */
static inline size_t slice_lo(size_t count, int n, int k)
{
    return count / (size_t)n * (size_t)k +
           ((size_t)k < count % (size_t)n ? (size_t)k : count % (size_t)n);
}

static inline size_t slice_len(size_t count, int n, int k)
{
    return slice_lo(count, n, k + 1) - slice_lo(count, n, k);
}

/* Whether a step in which every rank of the job writes bytes stores them
 * around the caches: the call writes n times that (reduce.h). */
static inline bool coll_job_streams(const struct coll_job *job, size_t bytes)
{
    return bytes * (size_t)job->n >= COLL_STREAM_MIN;
}

/* Rank r waits until every rank of the job has called it as often; false
 * when the job was aborted (the schedule then stops), also when one of
 * the job's devices has failed by the time the last rank arrives. Counts
 * rank r's steps for its transfer log. Across processes the last of this
 * process's ranks to arrive waits for the other processes (xbar). */
bool coll_barrier(struct coll_job *job, int r);

/* Has one of the job's devices failed (or is failing: the backend told,
 * the pool has not handled it yet)? */
static inline bool coll_job_dev_failed(const struct coll_job *job)
{
    return job->devmask &&
           ((atomic_load_explicit(job->failing, memory_order_relaxed) |
             atomic_load_explicit(job->failed, memory_order_relaxed)) &
            job->devmask);
}

/* Rank r logs, into its own log, a transfer of bytes from rank `from`'s
 * memory into rank to's (from == to: local work, the bytes of that memory
 * read and written). A bounded append; past log_cap it marks the log full
 * instead. */
static inline void coll_log(struct coll_job *job, int r, int from, int to,
                            size_t bytes)
{
    struct coll_rank *cr = &job->rank[r];
    if (cr->nlog == job->log_cap) {
        cr->log_full = true;
        return;
    }
    cr->log[cr->nlog++] = (struct coll_xfer){cr->step, from, to, bytes};
}

/* What rank r read from rank `from` into its own memory. */
static inline void coll_note(struct coll_job *job, int r, int from,
                             size_t bytes)
{
    coll_log(job, r, from, r, bytes);
}

/* What rank r stored into rank to's memory (two-shot's stores). */
static inline void coll_note_to(struct coll_job *job, int r, int to,
                                size_t bytes)
{
    coll_log(job, r, r, to, bytes);
}

/* The most transfers one rank of job logs in all (coll_note, coll_note_to):
 * about one entry per rank it reads, plus one for what it writes, in each
 * of its steps (two-shot logs two per peer in one step, well within). */
size_t coll_algo_log_cap(const struct coll_job *job);

/* Runs rank r's share of job's algorithm (algo.c): every algorithm for
 * every collective coll_algo_applies (model.h) says it applies to. */
void coll_algo_run(struct coll_job *job, int r);
/* Rank r's share of a job across processes (xalgo.c): the reductions
 * fold in the fixed order of the schedules between processes (each
 * process's ranks, then the processes' partials), the others move data
 * as COLL_DIRECT does. */
void coll_xalgo_run(struct coll_job *job, int r);
/* Its scratch per rank, in bytes. */
size_t coll_xalgo_scratch(const struct coll_job *job);
/* Does algorithm a need a scratch buffer per rank for this job, and how
 * many bytes (0: none)? */
size_t coll_algo_scratch(const struct coll_job *job);

/* Runs the whole job as one rank, q, in one go (fan.c): the sim's fan
 * (model.h), with no barrier. Logs its transfers into q's log as one step
 * after the launch. */
void coll_fan_run(struct coll_job *job, int q);

#endif
