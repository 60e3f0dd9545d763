/*
 * Calls across the processes of a shared pool on cuda (xgpu.h). The sim
 * runs such a call as one job whose ranks meet at barriers on their
 * streams (run.c, xalgo.c); a GPU stream cannot wait for another
 * process's without IPC events, so here the processes meet on the host,
 * around the work, at shared.c's barriers: every process's streams are
 * idle when the call's buffers are published (coll_xgpu_enter), each
 * process then launches its share and waits for it (coll_xgpu_run), and no
 * process returns before every share is done (shared.c's last barrier). A
 * call on the caller's streams is therefore done when it returns, as the
 * calls between processes already were.
 *
 * The work is split by process as two-shot splits it by rank (gpu.c),
 * with no step between processes: process p takes the ranks [first[p],
 * first[p] + nr[p]) and
 *  - allreduce: their slices of the elements (coll_gpu_slice_lo over all
 *    the ranks), folded from every rank's send buffer and stored into
 *    every rank's receive buffer;
 *  - reduce-scatter: each of its ranks' blocks, into that rank's buffer;
 *  - reduce: the whole fold, in the root's process;
 *  - allgather: every block into its own ranks' receive buffers (one
 *    GATHER launch);
 *  - broadcast: the root's buffer into its own ranks' (one launch).
 * A process reads and writes only what no other process writes in the
 * call, in place too (the slices of allreduce and reduce-scatter's
 * blocks are read only by their owner), so the launches of different
 * processes need no order between them. All-to-all, gather and scatter
 * go the usual way (hier.c).
 *
 * The reductions fold as the schedules between processes do (xalgo.c,
 * hier.c): each process's ranks in rank order into a partial in the
 * element type (scratch on local rank 0's device, allocated before the
 * processes commit to the call: coll_xgpu_prepare), then the partials in
 * process order, AVG summed and then divided once by the rank count
 * (kernel.h's avgn). So a call has the same bits whichever way it goes.
 * With a rank per process that is one fold of the inputs (AVG: and one
 * division).
 */
#include "config.h"

#include <errno.h>

#include "coll/gpu.h"
#include "coll/reduce.h"
#include "coll/xgpu.h"
#include "util/log.h"

/* Every rank's buffer is one pointer of a kernel argument. */
_Static_assert(COLL_MAX_RANKS <= UMP_MAX_DEVICES,
               "a launch over every rank's buffers fits coll_kargs");

bool coll_xgpu_takes(int coll)
{
    return coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_REDUCE ||
           coll == UMP_COLL_REDUCE_SCATTER || coll == UMP_COLL_ALLGATHER ||
           coll == UMP_COLL_BROADCAST;
}

int coll_xgpu_enter(ump_comm_t *L, const struct coll_args *a)
{
    int rc = 0;
    for (int r = 0; a->streams && !rc && r < L->n; r++)
        rc = ump_stream_synchronize(L->pool, a->streams[r]);
    return rc;
}

struct xg {
    ump_comm_t *L;
    const struct coll_args *a;
    const struct coll_xjob *x;
    ump_stream_t st;
    size_t esz;
    int nall;
    const void *const *send;
    void *const *recv;
    char *part; /* the partials (partials_at), or NULL: none needed */
    int rc;     /* the first failure; later launches are skipped */
};

/* The elements of this process's longest fold: its slices of allreduce,
 * a block of reduce and reduce-scatter; 0: the call folds nothing here. */
static size_t fold_len(const ump_comm_t *L, const struct coll_args *a,
                       const struct coll_xjob *x, int me, int nall)
{
    int lo = x->first[me];
    size_t esz = coll_dtype_size(a->dt);
    switch (a->coll) {
    case UMP_COLL_ALLREDUCE:
        return coll_gpu_slice_lo(a->count, esz, nall, lo + L->n) -
               coll_gpu_slice_lo(a->count, esz, nall, lo);
    case UMP_COLL_REDUCE_SCATTER:
        return a->count;
    case UMP_COLL_REDUCE:
        return a->root >= lo && a->root < lo + L->n ? a->count : 0;
    default:
        return 0;
    }
}

/* Process p's partial of a fold of len elements of esz bytes, in the
 * scratch: only the processes of several ranks have one (another's is
 * its input), each from a 16-byte boundary (the kernel's vectors);
 * *n_p: how many such there are. */
static size_t partials_at(const struct coll_xjob *x, int p, size_t len,
                          size_t esz, int *n_p)
{
    size_t stride = (len * esz + 15) & ~(size_t)15;
    int k = 0, n = 0;
    for (int q = 0; q < x->nproc; q++)
        if (x->nr[q] > 1) {
            k += q < p;
            n++;
        }
    if (n_p)
        *n_p = n;
    return (size_t)k * stride;
}

/* One launch (kernel.h): count elements (segments of seg) of nsrc sources
 * into ndst destinations. */
static void kern(struct xg *g, int mode, void *const *dst, int ndst,
                 const void *const *src, int nsrc, size_t count, size_t seg,
                 int op, int avgn)
{
    if (g->rc || !count)
        return;
    struct coll_kargs k = {.count = count, .seg = seg, .n = nsrc,
                           .ndst = ndst, .dt = g->a->dt, .op = op,
                           .mode = mode, .avgn = avgn};
    for (int i = 0; i < nsrc; i++)
        k.src[i] = src[i];
    for (int o = 0; o < ndst; o++)
        k.dst[o] = dst[o];
    g->rc = coll_gpu_kernel(g->L->pool, g->st, &k);
}

/* Elements [off, off + len) of every rank's send buffer folded in the
 * fixed order (see the top) into dst[0..ndst). A destination that is a
 * rank's own send buffer at the same elements (in place) is read before
 * it is written: each launch reads an element's sources before it stores
 * it, and the launches run in order on one stream. */
static void fold(struct xg *g, size_t off, size_t len, void *const *dst,
                 int ndst)
{
    const struct coll_xjob *x = g->x;
    int op = g->a->op, sop = op == UMP_AVG ? UMP_SUM : op;
    const void *src[UMP_MAX_DEVICES], *ps[UMP_MAX_DEVICES];
    for (int k = 0; k < g->nall; k++)
        src[k] = (const char *)g->send[k] + off * g->esz;
    if (x->nproc == g->nall && op != UMP_AVG) {
        /* a rank per process: each partial is its one input, bit for bit */
        kern(g, COLL_KFOLD, dst, ndst, src, g->nall, len, 0, op, 0);
        return;
    }
    for (int p = 0; p < x->nproc; p++) {
        ps[p] = src[x->first[p]]; /* the partial of one term is that term */
        if (x->nr[p] == 1)
            continue;
        void *part = g->part + partials_at(x, p, len, g->esz, NULL);
        kern(g, COLL_KFOLD, &part, 1, &src[x->first[p]], x->nr[p], len, 0,
             sop, 0);
        ps[p] = part;
    }
    if (op != UMP_AVG) {
        kern(g, COLL_KFOLD, dst, ndst, ps, x->nproc, len, 0, op, 0);
        return;
    }
    /* AVG: the sum rounded to the type in the first destination, then
     * divided by the rank count into every one */
    kern(g, COLL_KFOLD, dst, 1, ps, x->nproc, len, 0, UMP_SUM, 0);
    kern(g, COLL_KFOLD, dst, ndst, (const void *const *)dst, 1, len, 0,
         UMP_AVG, g->nall);
}

int coll_xgpu_prepare(ump_comm_t *L, const struct coll_args *a,
                      const struct coll_xjob *x, int me, int nall,
                      void **scratch_p)
{
    size_t len = fold_len(L, a, x, me, nall), esz = coll_dtype_size(a->dt);
    int n;
    size_t bytes = partials_at(x, x->nproc, len, esz, &n);
    *scratch_p = NULL;
    if (!len || !n)
        return 0;
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = L->dev[0];
    h.flags = UMP_HINT_NO_SPILL;
    log_mute(true); /* what cannot go this way goes the usual way */
    int rc = ump_alloc(L->pool, bytes, &h, scratch_p);
    log_mute(false);
    if (rc)
        ump_log_info("%s: no scratch space of %zu bytes on device %d for "
                     "the partials: between processes the usual way",
                     a->fn, bytes, h.device);
    return rc;
}

int coll_xgpu_run(ump_comm_t *L, const struct coll_args *a,
                  const struct coll_xjob *x, int me, int nall,
                  const void *const *send, void *const *recv,
                  void *scratch)
{
    struct xg g = {.L = L, .a = a, .x = x,
                   .st = a->streams ? a->streams[0] : L->own[0],
                   .esz = coll_dtype_size(a->dt), .nall = nall,
                   .send = send, .recv = recv, .part = scratch};
    int lo = x->first[me], n = L->n;
    size_t count = a->count;
    void *dst[UMP_MAX_DEVICES];
    switch (a->coll) {
    case UMP_COLL_ALLREDUCE: {
        size_t from = coll_gpu_slice_lo(count, g.esz, nall, lo);
        size_t to = coll_gpu_slice_lo(count, g.esz, nall, lo + n);
        for (int k = 0; k < nall; k++)
            dst[k] = (char *)recv[k] + from * g.esz;
        if (to > from)
            fold(&g, from, to - from, dst, nall);
        break;
    }
    case UMP_COLL_REDUCE_SCATTER:
        for (int r = lo; r < lo + n; r++)
            fold(&g, (size_t)r * count, count, &recv[r], 1);
        break;
    case UMP_COLL_REDUCE:
        if (a->root >= lo && a->root < lo + n)
            fold(&g, 0, count, &recv[a->root], 1);
        break;
    case UMP_COLL_ALLGATHER:
        kern(&g, COLL_KGATHER, &recv[lo], n, send, nall, (size_t)nall * count,
             count, UMP_SUM, 0);
        break;
    default: { /* broadcast: into this process's ranks but the root's own */
        int nd = 0;
        for (int r = lo; r < lo + n; r++)
            if (recv[r] != send[a->root])
                dst[nd++] = recv[r];
        if (nd)
            kern(&g, COLL_KFOLD, dst, nd, &send[a->root], 1, count, 0,
                 UMP_SUM, 0);
        break;
    }
    }
    /* Done before the last barrier: the other processes may then reuse
     * what this share reads and writes. Waited for after a failed launch
     * too: what was queued may still use the partials. */
    int src = ump_stream_synchronize(L->pool, g.st);
    if (!g.rc)
        g.rc = src;
    if (g.part && ump_free(L->pool, g.part))
        ump_log_error("%s: the partials' scratch did not go back",
                      a->fn);
    return g.rc;
}
