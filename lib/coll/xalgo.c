/*
 * A job's schedules across the processes of a shared pool (job.h:
 * coll_xalgo_run). Every rank's buffers are mapped at the same addresses
 * in every process, so rank r reads and writes its peers' as in one
 * process; the barriers meet across the processes (xbar).
 *
 * The reductions fold as the schedules between processes do (hier.c):
 * each process's ranks in rank order into a partial in the element type,
 * then the partials in process order, AVG summed and divided once by the
 * rank count. So a call gives the same bits whichever way it goes between
 * processes (here, or hierarchical or flat through an engine). The work is
 * split as two-shot's: rank r folds its slice of every input and stores
 * the result into every rank's receive buffer (allreduce), into its own
 * (reduce-scatter), or the root folds it all (reduce). In place, rank r's
 * slice of the send buffers is read only by rank r, into its partials,
 * before the result is stored over it: no extra step.
 *
 * The others move data as COLL_DIRECT does (algo.c).
 */
#include "config.h"

#include <string.h>

#include "coll/job.h"
#include "coll/reduce.h"

/* The fixed order's fold of len elements of every rank's send buffer from
 * element off, into dst[0..ndst): partials per process in rank r's
 * scratch, then across. */
static void fold(struct coll_job *j, int r, size_t off, void *const *dst,
                 int ndst, size_t len)
{
    const struct coll_xjob *x = j->x;
    size_t esz = j->esz, bytes = len * esz;
    int op = j->op == UMP_AVG ? UMP_SUM : j->op;
    char *part = j->scratch[r], *res = part + (size_t)x->nproc * bytes;
    const void *src[COLL_MAX_RANKS];
    if (!len)
        return;
    if (x->nproc == j->n && j->op != UMP_AVG) {
        /* A rank per process: its partial is its input, bit for bit (a
         * fold of one term), so one fold of the inputs is the same;
         * allreduce's stored into every rank's buffer as it goes (in
         * place each destination is the input of its own index:
         * coll_reduce_multi's rule). Not AVG: the schedules between
         * processes round the sum to the type before they divide, which
         * a half type's one fold would not. */
        for (int k = 0; k < j->n; k++)
            src[k] = (const char *)j->send[k] + off * esz;
        if (ndst == j->n) /* every rank writes as much at once */
            coll_reduce_multi_stream(
                j->dt, j->op, dst, ndst, src, j->n, len,
                coll_job_streams(j, (size_t)ndst * bytes));
        else /* one destination, which may be any input (in place) */
            coll_reduce_multi_stream(j->dt, j->op, dst, 1, src, j->n, len,
                                     coll_job_streams(j, bytes));
        return;
    }
    const void *ps[COLL_MAX_RANKS];
    for (int p = 0; p < x->nproc; p++) {
        for (int i = 0; i < x->nr[p]; i++)
            src[i] = (const char *)j->send[x->first[p] + i] + off * esz;
        ps[p] = part + (size_t)p * bytes;
        if (x->nr[p] == 1) /* the partial of one term is that term */
            ps[p] = src[0];
        else
            coll_reduce(j->dt, op, part + (size_t)p * bytes, src, x->nr[p],
                        len);
    }
    coll_reduce(j->dt, op, res, ps, x->nproc, len);
    if (j->op == UMP_AVG)
        coll_avg_finish(j->dt, res, len, j->n);
    for (int k = 0; k < ndst; k++)
        memcpy(dst[k], res, bytes);
}

size_t coll_xalgo_scratch(const struct coll_job *j)
{
    size_t b = j->count * j->esz, np1 = (size_t)j->x->nproc + 1;
    switch (j->coll) {
    case UMP_COLL_ALLREDUCE: /* the largest slice */
        return np1 * (j->count / (size_t)j->n + 1) * j->esz;
    case UMP_COLL_REDUCE:
    case UMP_COLL_REDUCE_SCATTER:
        return np1 * b;
    default:
        return coll_algo_scratch(j);
    }
}

void coll_xalgo_run(struct coll_job *j, int r)
{
    size_t esz = j->esz, c = j->count;
    void *dst[COLL_MAX_RANKS];
    switch (j->coll) {
    case UMP_COLL_ALLREDUCE: {
        size_t lo = slice_lo(c, j->n, r), len = slice_len(c, j->n, r);
        for (int k = 0; k < j->n; k++)
            dst[k] = (char *)j->recv[k] + lo * esz;
        fold(j, r, lo, dst, j->n, len);
        break;
    }
    case UMP_COLL_REDUCE_SCATTER:
        dst[0] = j->recv[r];
        fold(j, r, (size_t)r * c, dst, 1, c);
        break;
    case UMP_COLL_REDUCE:
        if (r == j->root) {
            dst[0] = j->recv[r];
            fold(j, r, 0, dst, 1, c);
        }
        break;
    default:
        coll_algo_run(j, r);
    }
}
