/*
 * A collective call by its number, and the buffer sizes it takes: shared by
 * the cmocka tests (coll_cases.h) and the plain MPI test
 * (tests/mpi/test_mpi_coll.c), so needing nothing but umpool.h.
 */
#ifndef UMP_TESTS_COLL_CALL_H
#define UMP_TESTS_COLL_CALL_H

#include <stddef.h>

#include "umpool.h"

/* Elements of rank r's send and recv buffers for count. */
static inline void sizes(int coll, int n, size_t c, size_t *sn,
                         size_t *rn)
{
    *sn = *rn = c;
    if (coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER)
        *rn = c * (size_t)n;
    if (coll == UMP_COLL_REDUCE_SCATTER || coll == UMP_COLL_SCATTER)
        *sn = c * (size_t)n;
    if (coll == UMP_COLL_ALLTOALL)
        *sn = *rn = c * (size_t)n;
}

/* One call of coll with reduction op (ignored by the collectives that
 * only move data) on streams (NULL: the communicator's own). */
static inline int coll_case_call(ump_comm_t *comm, int coll,
                                 const void **send, void **recv, size_t c,
                                 int dt, int op, int root,
                                 const ump_stream_t *streams)
{
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
        return ump_allreduce(comm, send, recv, c, dt, op, streams);
    case UMP_COLL_BROADCAST:
        return ump_broadcast(comm, send, recv, c, dt, root, streams);
    case UMP_COLL_REDUCE:
        return ump_reduce(comm, send, recv, c, dt, op, root, streams);
    case UMP_COLL_ALLGATHER:
        return ump_allgather(comm, send, recv, c, dt, streams);
    case UMP_COLL_REDUCE_SCATTER:
        return ump_reduce_scatter(comm, send, recv, c, dt, op, streams);
    case UMP_COLL_ALLTOALL:
        return ump_alltoall(comm, send, recv, c, dt, streams);
    case UMP_COLL_GATHER:
        return ump_gather(comm, send, recv, c, dt, root, streams);
    default:
        return ump_scatter(comm, send, recv, c, dt, root, streams);
    }
}

#endif
