/*
 * The algorithms, as each rank runs them (job.h), after the call's first
 * barrier (every rank's stream has reached the call). A rank reads its peers'
 * buffers directly through the pool's pointers and writes only its own
 * (two-shot excepted: it stores its slice into every rank's buffer);
 * coll_barrier separates the steps, so a step reads only what the steps
 * before it wrote.
 *
 * Reductions read their inputs in one fixed order wherever a result is
 * made (reduce.h): one-shot makes every element on every rank, from the
 * same inputs in the same order; the others make each element once and
 * copy it; either way all ranks get the same bits. Which order depends on the
 * algorithm: one-shot and two-shot fold ranks 0..n-1 with one rounding
 * (identical results); ring folds a slice around the ring and tree up the
 * tree, two inputs at a time (README: collectives).
 *
 * In place (send[r] == recv[r], or at the rank's slice of recv for
 * allgather and gather, NCCL's convention): a schedule never overwrites
 * data a peer has yet to read; where it would (one-shot, all-to-all), it
 * builds the result in the rank's scratch buffer first.
 */
#include "config.h"

#include <string.h>

#include "coll/job.h"
#include "coll/reduce.h"

#define AT(p, i) ((char *)(p) + (size_t)(i) * esz)
#define CAT(p, i) ((const char *)(p) + (size_t)(i) * esz)

static void copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes)
        memmove(dst, src, bytes);
}

/* The transfer log of the sim's virtual-time link model (job.h): every copy
 * and reduction notes what it reads from whom. A peer's bytes are a
 * transfer over the link (it lands in the rank's memory: the model charges
 * both ends' memory for it); the rank's own are local work, read and
 * written. Zero-byte transfers are noted too: their hand-off still pays a
 * hop. */

/* Rank r copied bytes from rank `from`'s buffer src into its dst. */
static void fetched(struct coll_job *j, int r, int from, void *dst,
                    const void *src, size_t bytes)
{
    if (from != r)
        coll_note(j, r, from, bytes);
    else if (dst != src)
        coll_note(j, r, r, 2 * bytes);
}

/* copy() of rank r from rank from's buffer, noted. */
static void copy_from(struct coll_job *j, int r, int from, void *dst,
                      const void *src, size_t bytes)
{
    copy(dst, src, bytes);
    fetched(j, r, from, dst, src, bytes);
}

/* Rank r reduced bytes of each of the n ranks' inputs into its memory. */
static void reduced_all(struct coll_job *j, int r, size_t bytes)
{
    for (int k = 0; k < j->n; k++)
        coll_note(j, r, k, bytes); /* k == r: its own input, read */
    coll_note(j, r, r, bytes);     /* the result, written */
}

/* Rank r added bytes of rank from's buffer to its own (two-at-a-time). */
static void reduced2(struct coll_job *j, int r, int from, size_t bytes)
{
    coll_note(j, r, from, bytes);
    coll_note(j, r, r, 2 * bytes); /* its own read, the result written */
}

/* The op a two-at-a-time step applies: AVG sums, and divides once at the
 * end (coll_avg_finish). */
static int step_op(int op) { return op == UMP_AVG ? UMP_SUM : op; }

/* --- allreduce ----------------------------------------------------------- */

/* Every rank reduces all n inputs, ranks in order: one rounding. */
static void allreduce_oneshot(struct coll_job *j, int r)
{
    size_t esz = j->esz;
    void *dst = j->inplace ? j->scratch[r] : j->recv[r];
    /* In place the result is read back at once (below): not streamed. */
    coll_reduce_multi_stream(j->dt, j->op, &dst, 1, j->send, j->n, j->count,
                             !j->inplace &&
                                 coll_job_streams(j, j->count * esz));
    reduced_all(j, r, j->count * esz);
    if (!j->inplace)
        return;
    /* Peers read send[r] == recv[r] until they are done. */
    if (!coll_barrier(j, r))
        return;
    copy_from(j, r, r, j->recv[r], dst, j->count * esz);
}

/* Rank r reduces slice r of every input (ranks in order: the same bits as
 * one-shot) and writes it into every rank's receive buffer, as a GPU
 * kernel stores over NVLink: each input byte is read once and each output
 * byte written once, the least a two-shot moves (reduce-scatter, then an
 * all-gather that pulls the slices would read every slice a second time).
 * In place, rank r writes slice r of the send buffers, which only it reads,
 * each block after it has read it (coll_reduce_multi). The step's barrier
 * then is two-shot's hand-off between its rounds, which the cost model
 * charges (model.c: 2 rounds); here it finds the slices already in place. */
static void allreduce_twoshot(struct coll_job *j, int r)
{
    size_t esz = j->esz, lo = slice_lo(j->count, j->n, r);
    size_t len = slice_len(j->count, j->n, r);
    const void *src[COLL_MAX_RANKS];
    void *dst[COLL_MAX_RANKS];
    for (int k = 0; k < j->n; k++) {
        src[k] = CAT(j->send[k], lo);
        dst[k] = AT(j->recv[k], lo);
    }
    coll_reduce_multi_stream(j->dt, j->op, dst, j->n, src, j->n, len,
                             coll_job_streams(j, (size_t)j->n * len * esz));
    reduced_all(j, r, len * esz);
    for (int k = 0; k < j->n; k++)
        if (k != r)
            coll_note_to(j, r, k, len * esz);
    coll_barrier(j, r);
}

/* Reduce-scatter around the ring: at step s rank r adds what its
 * predecessor holds of slice r - s - 1 + shift to its own; at the end rank
 * r holds slice r + 1 + shift whole. All-gather around the ring: at step s
 * rank r copies slice r - s + shift from its predecessor, which holds it
 * (the slice a rank holds whole at the start is r + 1 + shift: pass the
 * same shift). Neighbours touch different slices in every step. */
static bool ring_reduce_scatter(struct coll_job *j, int r, void *const *work,
                                size_t count, int shift)
{
    size_t esz = j->esz;
    int n = j->n, prev = (r + n - 1) % n;
    for (int s = 0; s + 1 < n; s++) {
        int c = ((r - s - 1 + shift) % n + n) % n;
        size_t lo = slice_lo(count, n, c);
        coll_reduce2(j->dt, step_op(j->op), AT(work[r], lo),
                     CAT(work[prev], lo), CAT(work[r], lo),
                     slice_len(count, n, c));
        reduced2(j, r, prev, slice_len(count, n, c) * esz);
        if (!coll_barrier(j, r))
            return false;
    }
    return true;
}

static bool ring_allgather(struct coll_job *j, int r, void *const *buf,
                           size_t count, int shift)
{
    size_t esz = j->esz;
    int n = j->n, prev = (r + n - 1) % n;
    for (int s = 0; s + 1 < n; s++) {
        int c = ((r - s + shift) % n + n) % n;
        size_t lo = slice_lo(count, n, c);
        copy_from(j, r, prev, AT(buf[r], lo), CAT(buf[prev], lo),
                  slice_len(count, n, c) * esz);
        if (!coll_barrier(j, r))
            return false;
    }
    return true;
}

static void allreduce_ring(struct coll_job *j, int r)
{
    size_t esz = j->esz;
    copy_from(j, r, r, j->recv[r], j->send[r], j->count * esz);
    if (!coll_barrier(j, r) || !ring_reduce_scatter(j, r, j->recv, j->count, 0))
        return;
    int own = (r + 1) % j->n;
    if (j->op == UMP_AVG)
        coll_avg_finish(j->dt, AT(j->recv[r], slice_lo(j->count, j->n, own)),
                        slice_len(j->count, j->n, own), j->n);
    if (!coll_barrier(j, r))
        return;
    ring_allgather(j, r, j->recv, j->count, 0);
}

/* Binary tree over ranks relative to root: node v's children are 2v+1 and
 * 2v+2, its depth floor(log2(v + 1)). */
static int depth_of(int v)
{
    int d = 0;
    while (v > 0) {
        v = (v - 1) / 2;
        d++;
    }
    return d;
}

/* Up the tree into buf (each node adds its children's partial sums to its
 * own, left child first); true when the schedule may go on. */
static bool tree_reduce(struct coll_job *j, int r, void *const *buf, int root)
{
    int n = j->n, v = (r - root + n) % n, dmax = depth_of(n - 1);
    for (int d = dmax - 1; d >= 0; d--) {
        if (depth_of(v) == d)
            for (int ch = 2 * v + 1; ch <= 2 * v + 2 && ch < n; ch++) {
                coll_reduce2(j->dt, step_op(j->op), buf[r], buf[r],
                             buf[(ch + root) % n], j->count);
                reduced2(j, r, (ch + root) % n, j->count * j->esz);
            }
        if (!coll_barrier(j, r))
            return false;
    }
    return true;
}

/* Down the tree from root's src: each node copies its parent's buffer. */
static void tree_broadcast(struct coll_job *j, int r, void *const *buf,
                           const void *src, int root)
{
    int n = j->n, v = (r - root + n) % n, dmax = depth_of(n - 1);
    for (int d = 1; d <= dmax; d++) {
        if (depth_of(v) == d) {
            int p = ((v - 1) / 2 + root) % n;
            copy_from(j, r, p, buf[r], p == root ? src : buf[p],
                      j->count * j->esz);
        }
        if (!coll_barrier(j, r))
            return;
    }
}

static void allreduce_tree(struct coll_job *j, int r)
{
    copy_from(j, r, r, j->recv[r], j->send[r], j->count * j->esz);
    if (!coll_barrier(j, r) || !tree_reduce(j, r, j->recv, 0))
        return;
    if (r == 0 && j->op == UMP_AVG)
        coll_avg_finish(j->dt, j->recv[0], j->count, j->n);
    if (!coll_barrier(j, r))
        return;
    tree_broadcast(j, r, j->recv, j->recv[0], 0);
}

/* --- broadcast, reduce ---------------------------------------------------- */

static void broadcast_direct(struct coll_job *j, int r)
{
    copy_from(j, r, j->root, j->recv[r], j->send[j->root],
              j->count * j->esz);
}

/* A chain from the root: rank root+s+1 copies from rank root+s. */
static void broadcast_ring(struct coll_job *j, int r)
{
    int n = j->n, v = (r - j->root + n) % n;
    if (v == 0)
        copy_from(j, r, r, j->recv[r], j->send[r], j->count * j->esz);
    for (int s = 0; s + 1 < n; s++) {
        /* The root's first successor reads send (the root's copy into
         * recv is not behind a barrier yet). */
        if (v == s + 1)
            copy_from(j, r, (r + n - 1) % n, j->recv[r],
                      v == 1 ? j->send[j->root] : j->recv[(r + n - 1) % n],
                      j->count * j->esz);
        if (!coll_barrier(j, r))
            return;
    }
}

static void broadcast_tree(struct coll_job *j, int r)
{
    if (r == j->root)
        copy_from(j, r, r, j->recv[r], j->send[r], j->count * j->esz);
    tree_broadcast(j, r, j->recv, j->send[j->root], j->root);
}

static void reduce_direct(struct coll_job *j, int r)
{
    if (r == j->root) {
        coll_reduce(j->dt, j->op, j->recv[r], j->send, j->n, j->count);
        reduced_all(j, r, j->count * j->esz);
    }
}

/* Partial results travel in the ranks' scratch buffers (recv is the
 * root's only); the root's own lands in recv. */
static void *const *reduce_bufs(struct coll_job *j, void **buf)
{
    for (int k = 0; k < j->n; k++)
        buf[k] = k == j->root ? j->recv[k] : j->scratch[k];
    return buf;
}

/* A chain ending at the root: rank root+1 starts, each next adds its own
 * input to its predecessor's partial result. */
static void reduce_ring(struct coll_job *j, int r)
{
    void *buf[COLL_MAX_RANKS];
    reduce_bufs(j, buf);
    int n = j->n, v = (r - j->root + n) % n; /* the chain: v = 1 .. n-1, 0 */
    int step = v ? v - 1 : n - 1;
    for (int s = 0; s < n; s++) {
        if (s == step) {
            if (s == 0) {
                copy_from(j, r, r, buf[r], j->send[r], j->count * j->esz);
            } else {
                coll_reduce2(j->dt, step_op(j->op), buf[r],
                             buf[(r + n - 1) % n], j->send[r], j->count);
                reduced2(j, r, (r + n - 1) % n, j->count * j->esz);
            }
        }
        if (s + 1 < n && !coll_barrier(j, r))
            return;
    }
    if (r == j->root && j->op == UMP_AVG)
        coll_avg_finish(j->dt, j->recv[r], j->count, n);
}

static void reduce_tree(struct coll_job *j, int r)
{
    void *buf[COLL_MAX_RANKS];
    reduce_bufs(j, buf);
    copy_from(j, r, r, buf[r], j->send[r], j->count * j->esz);
    if (!coll_barrier(j, r) || !tree_reduce(j, r, buf, j->root))
        return;
    if (r == j->root && j->op == UMP_AVG)
        coll_avg_finish(j->dt, j->recv[r], j->count, j->n);
}

/* --- allgather, reduce-scatter, all-to-all, gather, scatter --------------- */

static void allgather_direct(struct coll_job *j, int r)
{
    size_t esz = j->esz, c = j->count;
    for (int k = 0; k < j->n; k++)
        copy_from(j, r, k, AT(j->recv[r], (size_t)k * c), j->send[k],
                  c * esz);
}

static void allgather_ring(struct coll_job *j, int r)
{
    size_t esz = j->esz, c = j->count;
    copy_from(j, r, r, AT(j->recv[r], (size_t)r * c), j->send[r], c * esz);
    if (coll_barrier(j, r)) /* rank r holds slice r: shift -1 */
        ring_allgather(j, r, j->recv, c * (size_t)j->n, -1);
}

/* Rank r reduces its slice of every input, ranks in order. */
static void reduce_scatter_direct(struct coll_job *j, int r)
{
    size_t esz = j->esz, c = j->count;
    const void *src[COLL_MAX_RANKS];
    for (int k = 0; k < j->n; k++)
        src[k] = CAT(j->send[k], (size_t)r * c);
    coll_reduce_multi_stream(j->dt, j->op, &j->recv[r], 1, src, j->n, c,
                             coll_job_streams(j, c * esz));
    reduced_all(j, r, c * esz);
}

static void reduce_scatter_ring(struct coll_job *j, int r)
{
    size_t esz = j->esz, c = j->count, all = c * (size_t)j->n;
    copy_from(j, r, r, j->scratch[r], j->send[r], all * esz);
    if (!coll_barrier(j, r) || !ring_reduce_scatter(j, r, j->scratch, all, -1))
        return;
    if (j->op == UMP_AVG)
        coll_avg_finish(j->dt, AT(j->scratch[r], (size_t)r * c), c, j->n);
    copy_from(j, r, r, j->recv[r], CAT(j->scratch[r], (size_t)r * c),
              c * esz);
}

/* Peer order: rank r reads rank r-1 first, then r-2, ...: with ring, one
 * peer per step (NCCL's schedule of point-to-point pairs). */
static void alltoall_run(struct coll_job *j, int r, bool stepwise)
{
    size_t esz = j->esz, c = j->count;
    void *dst = j->inplace ? j->scratch[r] : j->recv[r];
    for (int s = 0; s < j->n; s++) {
        int k = (r - s + j->n) % j->n;
        copy_from(j, r, k, AT(dst, (size_t)k * c),
                  CAT(j->send[k], (size_t)r * c), c * esz);
        if (stepwise && s + 1 < j->n && !coll_barrier(j, r))
            return;
    }
    if (!j->inplace)
        return;
    if (!coll_barrier(j, r)) /* peers read send[r] == recv[r] until done */
        return;
    copy_from(j, r, r, j->recv[r], dst, c * (size_t)j->n * esz);
}

/* The root reads every rank's input; with ring, one peer per step. */
static void gather_run(struct coll_job *j, int r, bool stepwise)
{
    size_t esz = j->esz, c = j->count;
    for (int s = 0; s < j->n; s++) {
        int k = (j->root + s) % j->n;
        if (r == j->root)
            copy_from(j, r, k, AT(j->recv[r], (size_t)k * c), j->send[k],
                      c * esz);
        if (stepwise && s + 1 < j->n && !coll_barrier(j, r))
            return;
    }
}

static void scatter_run(struct coll_job *j, int r, bool stepwise)
{
    size_t esz = j->esz, c = j->count;
    int n = j->n, v = (r - j->root + n) % n;
    for (int s = 0; s < n; s++) {
        if (v == s)
            copy_from(j, r, j->root, j->recv[r],
                      CAT(j->send[j->root], (size_t)r * c), c * esz);
        if (stepwise && s + 1 < n && !coll_barrier(j, r))
            return;
    }
}

/* --- dispatch ------------------------------------------------------------- */

size_t coll_algo_log_cap(const struct coll_job *j)
{
    /* Barriers a rank passes, at the most: the call's first and last, and
     * in between ring allreduce's 2(n-1) + 2 (the others pass fewer: tree's
     * 2 log2(n) + 2 is no more). Each step notes at most one transfer per
     * rank and one for its own writes, but two-shot's, which notes two per
     * peer (a read and a write) in one of its three steps. */
    size_t steps = 2 * (size_t)j->n + 3, per_step = (size_t)j->n + 1;
    return steps * per_step;
}

size_t coll_algo_scratch(const struct coll_job *j)
{
    size_t b = j->count * j->esz;
    switch (j->coll) {
    case UMP_COLL_ALLREDUCE:
        return j->algo == COLL_ONESHOT && j->inplace ? b : 0;
    case UMP_COLL_REDUCE:
        return j->algo == COLL_DIRECT ? 0 : b;
    case UMP_COLL_REDUCE_SCATTER:
        return j->algo == COLL_RING ? b * (size_t)j->n : 0;
    case UMP_COLL_ALLTOALL:
        return j->inplace ? b * (size_t)j->n : 0;
    default:
        return 0;
    }
}

void coll_algo_run(struct coll_job *j, int r)
{
    int a = j->algo;
    switch (j->coll) {
    case UMP_COLL_ALLREDUCE:
        if (a == COLL_ONESHOT)
            allreduce_oneshot(j, r);
        else if (a == COLL_TWOSHOT)
            allreduce_twoshot(j, r);
        else if (a == COLL_RING)
            allreduce_ring(j, r);
        else
            allreduce_tree(j, r);
        break;
    case UMP_COLL_BROADCAST:
        if (a == COLL_DIRECT)
            broadcast_direct(j, r);
        else if (a == COLL_RING)
            broadcast_ring(j, r);
        else
            broadcast_tree(j, r);
        break;
    case UMP_COLL_REDUCE:
        if (a == COLL_DIRECT)
            reduce_direct(j, r);
        else if (a == COLL_RING)
            reduce_ring(j, r);
        else
            reduce_tree(j, r);
        break;
    case UMP_COLL_ALLGATHER:
        if (a == COLL_DIRECT)
            allgather_direct(j, r);
        else
            allgather_ring(j, r);
        break;
    case UMP_COLL_REDUCE_SCATTER:
        if (a == COLL_DIRECT)
            reduce_scatter_direct(j, r);
        else
            reduce_scatter_ring(j, r);
        break;
    case UMP_COLL_ALLTOALL:
        alltoall_run(j, r, a == COLL_RING);
        break;
    case UMP_COLL_GATHER:
        gather_run(j, r, a == COLL_RING);
        break;
    case UMP_COLL_SCATTER:
        scatter_run(j, r, a == COLL_RING);
        break;
    }
}
