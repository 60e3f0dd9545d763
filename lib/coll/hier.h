/*
 * What the schedules between processes share (hier.c runs them, staged.c
 * the allreduce of device memory staged through pinned host memory).
 */
#ifndef UMP_COLL_HIER_H
#define UMP_COLL_HIER_H

#include "coll/reduce.h"
#include "coll/world.h"

static inline int reduce_op(int op)
{
    return op == UMP_AVG ? UMP_SUM : op;
}

static inline size_t esz_of(const struct coll_args *a)
{
    return coll_dtype_size(a->dt);
}

/* An in-process phase's error, or a failure of this process's part that
 * must not stop the exchanges: swallowed, recorded in world->bad (the
 * call's agreement makes it -EIO everywhere). */
int hier_local(ump_comm_t *c, int rc);
/* The collective coll on this process's ranks, with a's type and streams,
 * under hier_local. */
int hier_phase(ump_comm_t *c, const struct coll_args *a, int coll,
               const void *const *send, void *const *recv, size_t count,
               int op, int root);
/* Local rank r's stream (every rank's) waited for, under hier_local. */
int hier_sync_rank(ump_comm_t *c, const struct coll_args *a, int r);
int hier_sync_all(ump_comm_t *c, const struct coll_args *a);
/* Allreduce of h (count elements, host memory) over the processes, folded
 * in process order. */
int hier_proc_allreduce(ump_comm_t *c, void *h, size_t count, int dt, int op,
                        const char *fn);

/* staged.c: the hierarchical allreduce of device memory the CPU cannot
 * reach (cuda), staged through the pool's pinned host memory: in one hop
 * up to a piece, pipelined in pieces above. 1 when it does not apply
 * (host-reachable buffers, this process's part failed, no pinned memory
 * or streams): the caller stages the whole buffer. */
int coll_staged_allreduce(ump_comm_t *c, const struct coll_args *a);

#endif
