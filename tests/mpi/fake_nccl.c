/*
 * A stand-in for libnccl.so.2 over MPI (UMPOOL_NCCL_LIBRARY points the
 * library at it): one NCCL rank per MPI process of MPI_COMM_WORLD, the
 * communicator set-up a duplicate of it, and point-to-point in a group
 * issued at ncclGroupEnd and finished there. Like NCCL, it matches a pair
 * of processes' transfers by their order alone (one tag), so a caller that
 * issues them in different orders on the two sides gets them crossed. Only
 * what umpool calls, with NCCL's signatures; the memory is the fake CUDA
 * driver's, which is host memory.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char internal[128];
} fake_id_t;

struct op {
    int send;
    void *buf;
    size_t bytes;
    int peer;
};

static struct op *ops;
static int nops, cap, depth;
static MPI_Comm comm = MPI_COMM_NULL;

int ncclGetUniqueId(fake_id_t *id);
int ncclCommInitRank(void **c, int nranks, fake_id_t id, int rank);
int ncclCommDestroy(void *c);
int ncclCommAbort(void *c);
int ncclSend(const void *buf, size_t count, int type, int peer, void *c,
             void *stream);
int ncclRecv(void *buf, size_t count, int type, int peer, void *c,
             void *stream);
int ncclGroupStart(void);
int ncclGroupEnd(void);
const char *ncclGetErrorString(int rc);

int ncclGetUniqueId(fake_id_t *id)
{
    memset(id, 0x2a, sizeof(*id));
    return 0;
}

int ncclCommInitRank(void **c, int nranks, fake_id_t id, int rank)
{
    int size, me;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    /* The id must be process 0's, the ranks MPI's. */
    if (nranks != size || rank != me || id.internal[0] != 0x2a)
        return 4; /* ncclInvalidArgument */
    if (comm == MPI_COMM_NULL)
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    *c = &comm;
    return 0;
}

int ncclCommDestroy(void *c)
{
    (void)c;
    return 0;
}

int ncclCommAbort(void *c)
{
    (void)c;
    return 0;
}

static int flush(void)
{
    MPI_Request *r = calloc((size_t)nops + 1, sizeof(*r));
    if (!r)
        return 1;
    for (int i = 0; i < nops; i++) {
        struct op *o = &ops[i];
        if (o->send)
            MPI_Isend(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 0, comm, &r[i]);
        else
            MPI_Irecv(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 0, comm, &r[i]);
    }
    int rc = MPI_Waitall(nops, r, MPI_STATUSES_IGNORE);
    free(r);
    nops = 0;
    return rc == MPI_SUCCESS ? 0 : 1;
}

static int add(int send, const void *buf, size_t bytes, int peer)
{
    if (nops == cap) {
        int n = cap ? 2 * cap : 64;
        struct op *p = realloc(ops, (size_t)n * sizeof(*p));
        if (!p)
            return 1;
        ops = p;
        cap = n;
    }
    ops[nops++] = (struct op){send, (void *)buf, bytes, peer};
    return depth ? 0 : flush();
}

int ncclSend(const void *buf, size_t count, int type, int peer, void *c,
             void *stream)
{
    (void)c;
    (void)stream;
    return type == 1 /* ncclUint8 */ ? add(1, buf, count, peer) : 4;
}

int ncclRecv(void *buf, size_t count, int type, int peer, void *c,
             void *stream)
{
    (void)c;
    (void)stream;
    return type == 1 ? add(0, buf, count, peer) : 4;
}

int ncclGroupStart(void)
{
    depth++;
    return 0;
}

int ncclGroupEnd(void)
{
    return --depth ? 0 : flush();
}

const char *ncclGetErrorString(int rc)
{
    return rc ? "fake NCCL error" : "no error";
}
