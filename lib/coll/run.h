/*
 * A collective on the ranks of one process (run.c): what the public calls
 * (calls.c) and the hierarchical schedules between processes (hier.c) run
 * for an in-process step. Neither calls the other's entry points: the
 * public calls sit on top of both.
 */
#ifndef UMP_COLL_RUN_H
#define UMP_COLL_RUN_H

#include "coll/check.h"

/* Checks the call (the pool, failed devices, the arguments), chooses its
 * algorithm and queues every rank's share on its stream; with streams NULL
 * it returns when the work is done. c is a one-process communicator (its
 * world NULL, or a world's local part). Not counted in ump_coll_stats:
 * the caller counts its own call. */
int coll_run_local(ump_comm_t *c, const struct coll_args *a);

/* A job across the processes of a shared pool (shared.c): the call a on
 * c's ranks (world->local: a's buffers and streams are this process's),
 * which are ranks [lo, lo + c->n) of the n whose buffers send and recv
 * hold (every process's, at the same addresses in each), with algorithm
 * algo (coll_xalgo_run), the barriers meeting across processes through x.
 * It starts once this process's previous job across is done (they share
 * x's barrier), waiting at most x's timeout. The caller checked the
 * arguments; the pool's failed devices are checked here. Any error before
 * the job is queued fails the other processes' job too (x's barrier
 * aborted): they would wait for this one's ranks in vain. */
struct coll_xjob;
int coll_run_across(ump_comm_t *c, const struct coll_args *a, int algo,
                    int n, int lo, const void *const *send,
                    void *const *recv, bool inplace, struct coll_xjob *x);
/* Waits until no job of c across processes through x is left (c's
 * finished ones reaped): false when timeout_s passed first (< 0: no
 * limit). */
bool coll_xjob_idle(ump_comm_t *c, struct coll_xjob *x, double timeout_s);

/* The sim's side of a communicator that is not c->gpu: the events that
 * join the ranks' streams around a fan (model.h), where the backend can
 * make a stream wait for one. Called once the streams exist; fini is safe
 * on a half-made one. */
int coll_run_init(ump_comm_t *c);
void coll_run_fini(ump_comm_t *c);

#endif
