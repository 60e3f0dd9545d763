/*
 * The sim's fan (model.h): a small call's whole work in one host function
 * on one rank's stream, as the GPU runs it in one kernel launch (gpu.c):
 * rank q reads every rank's contribution through the pool's pointers and
 * writes every rank's result, element by element (coll_reduce_shape, the
 * kernel's contract on the host), so in place needs no scratch and no
 * barrier between ranks. run.c queues it and joins the streams; this file
 * does the work and logs its transfers, the bytes model.c's fan charges.
 */
#include "config.h"

#include "coll/job.h"
#include "coll/kernel.h"
#include "coll/reduce.h"

void coll_fan_run(struct coll_job *j, int q)
{
    int n = j->n, mode = COLL_KFOLD, nsrc = n, ndst = n;
    size_t S = j->count * j->esz, total = j->count, seg = j->count;
    size_t in = S, out = S, own = 2 * S;
    const void *src[COLL_MAX_RANKS];
    void *dst[COLL_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        src[r] = j->send[r];
        dst[r] = j->recv[r];
    }
    const void *const *s = src;
    void *const *d = dst;
    switch (j->coll) {
    case UMP_COLL_BROADCAST: /* the root's buffer into every rank's */
        s = &src[q];
        nsrc = 1;
        in = 0;
        break;
    case UMP_COLL_REDUCE: /* into the root's receive buffer */
        d = &dst[q];
        ndst = 1;
        out = 0;
        break;
    case UMP_COLL_ALLGATHER: /* block r of every receive buffer from r */
        mode = COLL_KGATHER;
        total = (size_t)n * j->count;
        out = (size_t)n * S;
        own = S + out;
        break;
    case UMP_COLL_REDUCE_SCATTER: /* slice r of every send buffer into r */
        mode = COLL_KSPLIT;
        total = (size_t)n * j->count;
        in = (size_t)n * S;
        own = in + S;
        break;
    default: /* allreduce: every rank's buffer folded into every rank's */
        break;
    }
    /* Broadcast and allgather copy: their op is no argument of theirs
     * (checked only for the reductions), so the fold gets a valid one. */
    int op = nsrc == 1 || mode == COLL_KGATHER ? UMP_SUM : j->op;
    coll_reduce_shape(j->dt, op, mode, d, ndst, s, nsrc, total, seg);
    /* One step after the launch: every transfer is in flight at once. */
    j->rank[q].step = 1;
    coll_log(j, q, q, q, own);
    for (int r = 0; r < n; r++) {
        if (r == q)
            continue;
        if (in)
            coll_note(j, q, r, in);
        if (out)
            coll_note_to(j, q, r, out);
    }
}
