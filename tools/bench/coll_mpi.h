/*
 * umpool-bench coll under mpirun (coll_mpi.c): the processes of the launch,
 * the communicator over all of them (ump_comm_create_mpi), the few
 * collectives the bench itself needs between processes (barrier, max, sum,
 * broadcast) and the baseline: plain MPI_Allreduce / MPI_Allgather /
 * MPI_Alltoall among the processes, one buffer each. coll.c sees no MPI
 * type: without MPI (configure found none) these are stubs that say so.
 */
#ifndef UMP_BENCH_COLL_MPI_H
#define UMP_BENCH_COLL_MPI_H

#include <stdbool.h>
#include <stddef.h>

#include "umpool.h"

/* Started by mpirun (Open MPI's, MPICH's or a PMIx launcher's environment)?
 * *size_p: the launch's size from the environment, -1 when not given. */
bool coll_mpi_launched(int *size_p);
/* MPI_Init_thread(MPI_THREAD_MULTIPLE): this process among nprocs; 0, or
 * -1 after printing why (no MPI in this build, no thread support). */
int coll_mpi_init(int *proc_p, int *nprocs_p);
void coll_mpi_finalize(void);
/* After a failure that would leave the others waiting in a collective. */
void coll_mpi_abort(void);

/* ump_comm_create_mpi over MPI_COMM_WORLD: this process's n ranks on
 * devices dev[0..n). */
int coll_mpi_comm_create(ump_pool_t *pool, int n, const int *dev,
                         const char *config, ump_comm_t **comm_p);

/* Between every process (collective: every process calls them in the same
 * order). */
void coll_mpi_barrier(void);
int coll_mpi_max_int(int v);
double coll_mpi_max(double v);
long long coll_mpi_sum(long long v);
/* all[p] = process p's v. */
void coll_mpi_allgather_int(int v, int *all);
/* bytes at buf from process 0 to every process. */
void coll_mpi_bcast(void *buf, size_t bytes);

/* The baseline, the plain MPI collective among the processes with one
 * buffer each: NULL when MPI can run collective coll (UMP_COLL_*) of type
 * dt and op on these buffers (host: memory the CPU reads, as on sim), else
 * why not, for the table. */
const char *coll_mpi_baseline_unsupported(int coll, int dt, int op,
                                          bool host, size_t count,
                                          int nprocs);
/* Microseconds per call of that collective (count elements per rank, as
 * the bench counts them) from send into recv: one warm-up call, a barrier,
 * iters calls back to back timed by every process, the slowest process's
 * time. */
double coll_mpi_baseline_us(int coll, const void *send, void *recv,
                            size_t count, int dt, int op, int iters);

#endif
