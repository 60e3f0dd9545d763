/*
 * libumpool-mpi: umpool communicators across MPI processes
 * (pkg-config umpool-mpi). MPI must be initialized (MPI_THREAD_MULTIPLE
 * when other threads call MPI meanwhile).
 */
#ifndef UMPOOL_MPI_H
#define UMPOOL_MPI_H

#include <mpi.h>

#include "umpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator over the ranks of every process of mpi: this process
 * contributes nlocal ranks on devices[0..nlocal) (as ump_comm_create_oob).
 * Collective over mpi. The processes meet and move data on a duplicate of
 * mpi: host memory (every sim buffer, host-tier buffers) goes to MPI
 * directly; device memory directly only when MPI says it is CUDA-aware,
 * else staged through host memory. On cuda, NCCL is used instead where it
 * loads and starts (coll_engine:auto|mpi|nccl). */
int ump_comm_create_mpi(ump_pool_t *pool, MPI_Comm mpi, int nlocal,
                        const int *devices, const char *config,
                        ump_comm_t **comm_p);

#ifdef __cplusplus
}
#endif
#endif /* UMPOOL_MPI_H */
