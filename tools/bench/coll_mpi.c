/*
 * umpool-bench coll under mpirun: MPI for the bench (coll_mpi.h). The
 * baseline column is the plain MPI collective with one buffer per process,
 * on the same pool memory the umpool call used (local rank 0's buffers),
 * so the two differ only in who moves the bytes. Every MPI call here is on
 * MPI_COMM_WORLD; umpool's own traffic runs on its duplicate of it
 * (ump_comm_create_mpi), so the two never match each other's messages.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "coll_mpi.h"

#ifdef HAVE_MPI
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include "umpool_mpi.h"
#endif

bool coll_mpi_launched(int *size_p)
{
    /* Open MPI's mpirun, MPICH's hydra (and srun with PMI), PMIx launchers
     * (which give the rank, not the size). */
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        const char *s = getenv(sizes[i]);
        if (s && *s) {
            *size_p = atoi(s);
            return true;
        }
    }
    if (getenv("PMIX_RANK")) {
        *size_p = -1;
        return true;
    }
    *size_p = 0;
    return false;
}

#ifdef HAVE_MPI

int coll_mpi_init(int *proc_p, int *nprocs_p)
{
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) !=
        MPI_SUCCESS) {
        fprintf(stderr, "umpool-bench: coll: MPI_Init_thread failed\n");
        return -1;
    }
    /* umpool's engine may call MPI from the pool's worker threads while
     * the bench's thread waits in a call. */
    if (provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "umpool-bench: coll: MPI gives thread level %d, "
                "umpool needs MPI_THREAD_MULTIPLE\n", provided);
        MPI_Finalize();
        return -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, proc_p);
    MPI_Comm_size(MPI_COMM_WORLD, nprocs_p);
    return 0;
}

void coll_mpi_finalize(void)
{
    MPI_Finalize();
}

void coll_mpi_abort(void)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int coll_mpi_comm_create(ump_pool_t *pool, int n, const int *dev,
                         const char *config, ump_comm_t **comm_p)
{
    return ump_comm_create_mpi(pool, MPI_COMM_WORLD, n, dev, config, comm_p);
}

void coll_mpi_barrier(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
}

int coll_mpi_max_int(int v)
{
    int r = v;
    MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return r;
}

double coll_mpi_max(double v)
{
    double r = v;
    /* NAN (a failed timing) must win: it goes as +inf and comes back. */
    double x = isnan(v) ? INFINITY : v;
    MPI_Allreduce(&x, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return isinf(r) ? NAN : r;
}

long long coll_mpi_sum(long long v)
{
    long long r = v;
    MPI_Allreduce(&v, &r, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return r;
}

void coll_mpi_allgather_int(int v, int *all)
{
    MPI_Allgather(&v, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
}

void coll_mpi_bcast(void *buf, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += (size_t)INT_MAX) {
        size_t len = bytes - off < (size_t)INT_MAX ? bytes - off
                                                   : (size_t)INT_MAX;
        MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
}

/* umpool's types by NCCL's numbers; half and bfloat16 have no MPI type, so
 * only the data movers take them (as 16-bit words). */
static MPI_Datatype mpi_type(int dt)
{
    switch (dt) {
    case UMP_INT8: return MPI_INT8_T;
    case UMP_UINT8: return MPI_UINT8_T;
    case UMP_INT32: return MPI_INT32_T;
    case UMP_UINT32: return MPI_UINT32_T;
    case UMP_INT64: return MPI_INT64_T;
    case UMP_UINT64: return MPI_UINT64_T;
    case UMP_FLOAT32: return MPI_FLOAT;
    case UMP_FLOAT64: return MPI_DOUBLE;
    default: return MPI_UINT16_T;
    }
}

static MPI_Op mpi_op(int op)
{
    switch (op) {
    case UMP_SUM: return MPI_SUM;
    case UMP_PROD: return MPI_PROD;
    case UMP_MAX: return MPI_MAX;
    case UMP_MIN: return MPI_MIN;
    default: return MPI_OP_NULL; /* AVG: MPI has none */
    }
}

/* Asked at run time, as libumpool-mpi does: the MPI loaded may differ from
 * the one built against. */
static bool cuda_aware(void)
{
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
}

const char *coll_mpi_baseline_unsupported(int coll, int dt, int op,
                                          bool host, size_t count,
                                          int nprocs)
{
    if (coll != UMP_COLL_ALLREDUCE && coll != UMP_COLL_ALLGATHER &&
        coll != UMP_COLL_ALLTOALL)
        return "only allreduce, allgather, alltoall";
    if (coll == UMP_COLL_ALLREDUCE &&
        (dt == UMP_FLOAT16 || dt == UMP_BFLOAT16))
        return "no MPI reduction of half or bfloat16";
    if (coll == UMP_COLL_ALLREDUCE && mpi_op(op) == MPI_OP_NULL)
        return "no MPI avg";
    if (!host && !cuda_aware())
        return "device buffers and MPI is not CUDA-aware";
    /* MPI counts are int; the bench does not split its baseline. */
    if (count * (size_t)nprocs > (size_t)INT_MAX)
        return "count above MPI's int";
    return NULL;
}

static void baseline_call(int coll, const void *send, void *recv, int count,
                          MPI_Datatype t, MPI_Op op)
{
    if (coll == UMP_COLL_ALLREDUCE)
        MPI_Allreduce(send, recv, count, t, op, MPI_COMM_WORLD);
    else if (coll == UMP_COLL_ALLGATHER)
        MPI_Allgather(send, count, t, recv, count, t, MPI_COMM_WORLD);
    else
        MPI_Alltoall(send, count, t, recv, count, t, MPI_COMM_WORLD);
}

double coll_mpi_baseline_us(int coll, const void *send, void *recv,
                            size_t count, int dt, int op, int iters)
{
    MPI_Datatype t = mpi_type(dt);
    MPI_Op o = mpi_op(op);
    baseline_call(coll, send, recv, (int)count, t, o); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t t0 = now_ns();
    for (int k = 0; k < iters; k++)
        baseline_call(coll, send, recv, (int)count, t, o);
    double us = (double)(now_ns() - t0) / 1e3 / iters;
    return coll_mpi_max(us);
}

#else /* no MPI in this build: coll runs in one process only */

int coll_mpi_init(int *proc_p, int *nprocs_p)
{
    (void)proc_p;
    (void)nprocs_p;
    fprintf(stderr, "umpool-bench: coll: started by mpirun, but this "
            "umpool-bench was built without MPI (configure found none)\n");
    return -1;
}

void coll_mpi_finalize(void) {}

void coll_mpi_abort(void)
{
    exit(1);
}

int coll_mpi_comm_create(ump_pool_t *pool, int n, const int *dev,
                         const char *config, ump_comm_t **comm_p)
{
    (void)pool;
    (void)n;
    (void)dev;
    (void)config;
    (void)comm_p;
    return -ENOTSUP;
}

void coll_mpi_barrier(void) {}

int coll_mpi_max_int(int v)
{
    return v;
}

double coll_mpi_max(double v)
{
    return v;
}

long long coll_mpi_sum(long long v)
{
    return v;
}

void coll_mpi_allgather_int(int v, int *all)
{
    all[0] = v;
}

void coll_mpi_bcast(void *buf, size_t bytes)
{
    (void)buf;
    (void)bytes;
}

const char *coll_mpi_baseline_unsupported(int coll, int dt, int op,
                                          bool host, size_t count,
                                          int nprocs)
{
    (void)coll;
    (void)dt;
    (void)op;
    (void)host;
    (void)count;
    (void)nprocs;
    return "no MPI in this build";
}

double coll_mpi_baseline_us(int coll, const void *send, void *recv,
                            size_t count, int dt, int op, int iters)
{
    (void)coll;
    (void)send;
    (void)recv;
    (void)count;
    (void)dt;
    (void)op;
    (void)iters;
    return NAN;
}

#endif
