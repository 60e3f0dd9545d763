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

/* One transfer: its pieces' requests. A receive is not posted at once: it
 * is matched first (MPI_Improbe), its size checked, then received
 * (MPI_Imrecv). A message of another size than expected means the
 * processes disagree on a count: an error, found before any byte lands,
 * since a receive posted for less than what arrives is not safe in every
 * MPI (Open MPI 4.1's shared-memory single copy writes past the buffer). */
struct req {
    bool recv;
    int n;    /* pieces */
    int next; /* receive: pieces matched so far, in order */
    char *buf;
    size_t bytes;
    int proc, tag;
    MPI_Request r[]; /* MPI_REQUEST_NULL until started */
};

static size_t piece_len(const struct req *q, int i)
{
    size_t off = (size_t)i * PIECE;
    return q->bytes - off < PIECE ? q->bytes - off : PIECE;
}

/* Abandons requests. A receive matched is waited for (its message is on
 * its way: MPI writes its bytes, then no more), one not matched was never
 * posted. A send cannot be taken back in general (Open MPI does not cancel
 * sends): it is let go, and MPI delivers it or drops it with the
 * communicator. */
static void drop(int n, void **reqs)
{
    for (int i = 0; i < n; i++) {
        struct req *q = reqs[i];
        if (!q)
            continue;
        for (int j = 0; j < q->n; j++) {
            if (q->r[j] == MPI_REQUEST_NULL)
                continue;
            if (q->recv)
                MPI_Wait(&q->r[j], MPI_STATUS_IGNORE);
            else
                MPI_Request_free(&q->r[j]);
        }
        free(q);
        reqs[i] = NULL;
    }
}

static int start(MPI_Comm comm, void *buf, size_t bytes, int proc, int tag,
                 bool send, void **req_p)
{
    int n = bytes ? (int)((bytes + PIECE - 1) / PIECE) : 1;
    struct req *q = malloc(sizeof(*q) + (size_t)n * sizeof(MPI_Request));
    if (!q)
        return -ENOMEM;
    *q = (struct req){.recv = !send, .n = n, .buf = buf, .bytes = bytes,
                      .proc = proc, .tag = tag};
    for (int i = 0; i < n; i++)
        q->r[i] = MPI_REQUEST_NULL;
    for (int i = 0; send && i < n; i++) {
        if (MPI_Isend(q->buf + (size_t)i * PIECE, (int)piece_len(q, i),
                      MPI_BYTE, proc, tag, comm, &q->r[i]) != MPI_SUCCESS) {
            void *one = q;
            drop(1, &one);
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

/* Matches receive reqs[i]'s next pieces with the messages that arrived.
 * Messages of one (process, tag) match in order: a receive waits while an
 * earlier one of the same pair is not fully matched. */
static int match(MPI_Comm comm, int i, void **reqs)
{
    struct req *q = reqs[i];
    for (int j = 0; j < i; j++) {
        const struct req *e = reqs[j];
        if (e->recv && e->next < e->n && e->proc == q->proc &&
            e->tag == q->tag)
            return 0;
    }
    while (q->next < q->n) {
        int flag = 0, k = 0;
        MPI_Message msg;
        MPI_Status st;
        if (MPI_Improbe(q->proc, q->tag, comm, &flag, &msg, &st) !=
            MPI_SUCCESS)
            return -EIO;
        if (!flag)
            return 0;
        MPI_Get_count(&st, MPI_BYTE, &k);
        size_t len = piece_len(q, q->next);
        if (k < 0 || (size_t)k != len) {
            /* Taken off the queue into a buffer of its own, then dropped. */
            void *junk = malloc(k > 0 ? (size_t)k : 1);
            if (junk)
                MPI_Mrecv(junk, k > 0 ? k : 0, MPI_BYTE, &msg,
                          MPI_STATUS_IGNORE);
            free(junk);
            return -EMSGSIZE;
        }
        if (MPI_Imrecv(q->buf + (size_t)q->next * PIECE, (int)len, MPI_BYTE,
                       &msg, &q->r[q->next]) != MPI_SUCCESS)
            return -EIO;
        q->next++;
    }
    return 0;
}

static int mpi_testall(void *ctx, int n, void **reqs)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    int rc = 0;
    for (int i = 0; !rc && i < n; i++)
        if (((struct req *)reqs[i])->recv)
            rc = match(comm, i, reqs);
    bool all = true;
    for (int i = 0; !rc && i < n; i++) {
        struct req *q = reqs[i];
        int done = 0;
        if (q->recv && q->next < q->n) {
            all = false;
            continue;
        }
        if (MPI_Testall(q->n, q->r, &done, MPI_STATUSES_IGNORE) !=
            MPI_SUCCESS)
            rc = -EIO;
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
