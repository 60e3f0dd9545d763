/*
 * libumpool-mpi: MPI as umpool's out-of-band channel and data engine
 * between processes (include/umpool_engine.h). Everything runs on a
 * duplicate of the caller's communicator, so umpool's messages never match
 * the application's, with MPI_ERRORS_RETURN so that a failed transfer is
 * an error code, not an abort. umpool polls requests (MPI_Testall) with a
 * deadline rather than waiting in MPI: a peer that left makes the call fail
 * in bounded time, and NCCL's advice (never block in a wait that MPI's
 * progress depends on) holds.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include "umpool.h"
#include "umpool_engine.h"
#include "umpool_mpi.h"

#define UMP_MPI_EXPORT __attribute__((visibility("default")))

/* MPI counts are int: a transfer above this is split in pieces. */
#define PIECE ((size_t)1 << 30)

/* One transfer: its pieces' requests. A receive remembers its length: MPI
 * accepts a shorter message than the buffer, which here means the
 * processes disagree on a count, an error to report. */
struct req {
    int n;
    bool recv;
    size_t bytes;
    MPI_Request r[];
};

static int start(MPI_Comm comm, void *buf, size_t bytes, int proc, int tag,
                 bool send, void **req_p)
{
    int n = bytes ? (int)((bytes + PIECE - 1) / PIECE) : 1;
    struct req *q = malloc(sizeof(*q) + (size_t)n * sizeof(MPI_Request));
    if (!q)
        return -ENOMEM;
    q->n = n;
    q->recv = !send;
    q->bytes = bytes;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * PIECE;
        int len = (int)(bytes - off < PIECE ? bytes - off : PIECE);
        char *p = (char *)buf + off;
        int rc = send ? MPI_Isend(p, len, MPI_BYTE, proc, tag, comm, &q->r[i])
                      : MPI_Irecv(p, len, MPI_BYTE, proc, tag, comm, &q->r[i]);
        if (rc != MPI_SUCCESS) {
            for (int j = 0; j < i; j++) {
                MPI_Cancel(&q->r[j]);
                MPI_Request_free(&q->r[j]);
            }
            free(q);
            return -EIO;
        }
    }
    *req_p = q;
    return 0;
}

static int mpi_isend(void *ctx, const void *buf, size_t bytes, int proc,
                     int tag, void **req_p)
{
    return start(*(MPI_Comm *)ctx, (void *)buf, bytes, proc, tag, true, req_p);
}

static int mpi_irecv(void *ctx, void *buf, size_t bytes, int proc, int tag,
                     void **req_p)
{
    return start(*(MPI_Comm *)ctx, buf, bytes, proc, tag, false, req_p);
}

static void drop(int n, void **reqs)
{
    for (int i = 0; i < n; i++) {
        struct req *q = reqs[i];
        for (int j = 0; j < q->n; j++)
            if (q->r[j] != MPI_REQUEST_NULL) {
                MPI_Cancel(&q->r[j]);
                MPI_Request_free(&q->r[j]);
            }
        free(q);
        reqs[i] = NULL;
    }
}

/* The bytes a finished receive got (its pieces' counts). */
static size_t received(const MPI_Status *st, int n)
{
    size_t got = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        MPI_Get_count(&st[i], MPI_BYTE, &k);
        got += (size_t)(k > 0 ? k : 0);
    }
    return got;
}

static int mpi_testall(void *ctx, int n, void **reqs)
{
    (void)ctx;
    bool all = true;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        struct req *q = reqs[i];
        if (!q->n) /* finished in an earlier poll */
            continue;
        MPI_Status st[8];
        MPI_Status *stp = q->n <= 8 ? st : malloc((size_t)q->n * sizeof(*stp));
        int done = 0;
        if (!stp)
            return -ENOMEM;
        if (MPI_Testall(q->n, q->r, &done, stp) != MPI_SUCCESS)
            rc = -EIO;
        else if (done && q->recv && received(stp, q->n) != q->bytes)
            rc = -EMSGSIZE;
        else if (done)
            q->n = 0;
        if (stp != st)
            free(stp);
        all &= done != 0;
    }
    if (rc) {
        drop(n, reqs);
        return rc;
    }
    if (!all)
        return 0;
    for (int i = 0; i < n; i++) {
        free(reqs[i]);
        reqs[i] = NULL;
    }
    return 1;
}

static void mpi_cancel(void *ctx, int n, void **reqs)
{
    (void)ctx;
    drop(n, reqs);
}

static void mpi_destroy(void *ctx)
{
    MPI_Comm *comm = ctx;
    MPI_Comm_free(comm);
    free(comm);
}

static int oob_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    if (bytes > INT_MAX)
        return -EOVERFLOW;
    return MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes,
                         MPI_BYTE, *(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -EIO;
}

static int oob_barrier(void *ctx)
{
    return MPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -EIO;
}

/* Asked at run time: the library MPI loads may differ from the one built
 * against. */
static bool cuda_aware(void)
{
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
    int yes = 0;
    return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) ==
               MPI_SUCCESS && yes;
#else
    return false;
#endif
}

UMP_MPI_EXPORT int ump_comm_create_mpi(ump_pool_t *pool, MPI_Comm mpi,
                                       int nlocal, const int *devices,
                                       const char *config,
                                       ump_comm_t **comm_p)
{
    int init = 0;
    MPI_Initialized(&init);
    if (!init || mpi == MPI_COMM_NULL) {
        fprintf(stderr, "umpool: ump_comm_create_mpi: %s\n",
                init ? "mpi is MPI_COMM_NULL" : "MPI is not initialized");
        return -EINVAL;
    }
    MPI_Comm *dup = malloc(sizeof(*dup));
    if (!dup)
        return -ENOMEM;
    if (MPI_Comm_dup(mpi, dup) != MPI_SUCCESS) {
        free(dup);
        return -EIO;
    }
    MPI_Comm_set_errhandler(*dup, MPI_ERRORS_RETURN);
    ump_oob_t oob = {.allgather = oob_allgather, .barrier = oob_barrier,
                     .ctx = dup};
    MPI_Comm_rank(*dup, &oob.rank);
    MPI_Comm_size(*dup, &oob.size);
    ump_engine_t eng = {.name = "mpi", .device_buffers = cuda_aware(),
                        .ctx = dup, .isend = mpi_isend, .irecv = mpi_irecv,
                        .testall = mpi_testall, .cancel = mpi_cancel,
                        .destroy = mpi_destroy};
    return ump_comm_create_engine(pool, nlocal, devices, &oob, &eng, config,
                                  comm_p);
}
