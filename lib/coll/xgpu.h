/*
 * A call across the processes of a shared pool on a backend that runs
 * kernels (cuda): each process launches the kernel (kernel.h) for its own
 * ranks' share of the call over every rank's buffers, which the shared
 * pool maps at the same addresses in every process (xgpu.c). shared.c
 * makes the processes meet before and after it.
 */
#ifndef UMP_COLL_XGPU_H
#define UMP_COLL_XGPU_H

#include <stdbool.h>

#include "coll/check.h"
#include "coll/job.h"

/* Whether calls of coll go this way (xgpu.c's five collectives): the
 * same answer in every process. What else it needs holds for the whole
 * communicator and is checked once, at its creation (shared.c:
 * coll_shared_start): a kernel built in, every device of the pool
 * reaching every other, at most COLL_MAX_RANKS ranks. */
bool coll_xgpu_takes(int coll);

/* Before the call's buffers are published: the work queued on the
 * caller's streams (a->streams; the communicator's own are idle between
 * calls) is done, so that no process reads a buffer still being written.
 * 0, or the error of a stream (its device failed). */
int coll_xgpu_enter(ump_comm_t *L, const struct coll_args *a);

/* Before the processes commit to the call (shared.c's second barrier):
 * the scratch space of this process's partials, on local rank 0's device
 * (*scratch_p NULL when its folds need none). 0, or -ENOMEM: the call
 * then goes the usual way in every process, before any has written. */
int coll_xgpu_prepare(ump_comm_t *L, const struct coll_args *a,
                      const struct coll_xjob *x, int me, int nall,
                      void **scratch_p);

/* This process's share of the call a over the job's nall ranks (their
 * buffers send and recv, this process's L->n of them from x->first[me]),
 * launched on local rank 0's stream and waited for: 0 when it is done,
 * else the error (the share may be half written). Frees scratch
 * (coll_xgpu_prepare's). */
int coll_xgpu_run(ump_comm_t *L, const struct coll_args *a,
                  const struct coll_xjob *x, int me, int nall,
                  const void *const *send, void *const *recv,
                  void *scratch);

#endif
