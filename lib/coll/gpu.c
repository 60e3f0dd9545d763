/*
 * The collectives on a backend that runs device code (gpu.h). A call is
 * queued, not run: each rank's share goes onto its stream as copies
 * (memcpy_async between pool pointers: the copy engines read peers over
 * NVLink or PCIe) and launches of the reduction kernel (kernel.h), and the
 * call returns. The ranks' streams meet at barriers made of events: every
 * rank records its event, then every rank's stream waits for every other
 * rank's event. That is the same protocol as the sim's host-function
 * barrier (job.h), on the device:
 *
 *  - an entry barrier, so that the work queued on every rank's stream
 *    before the call (a kernel still writing a send buffer) is done before
 *    any rank reads that buffer;
 *  - barriers between steps (in-place one-shot and all-to-all, whose
 *    results wait in scratch space until no peer reads the send buffers);
 *  - an exit barrier, so that no rank's stream runs on into work that
 *    overwrites a buffer a peer still reads.
 *
 * Small calls go in one launch (the fan): allreduce (one-shot),
 * broadcast, reduce, allgather and reduce-scatter whose largest buffer is
 * at most COLL_FAN_MAX bytes, when every device reaches every other and
 * the cost model finds the one launch cheaper than the schedule
 * (model.h: coll_model_fan; the sim's executor asks it the same)
 * (allgather and reduce-scatter use the kernel's segmented shapes,
 * kernel.h). One rank's stream (rank 0's; the root's)
 * runs the kernel over every rank's buffers at once: n sources, n
 * destinations (the kernel's contract, kernel.h, allows a destination
 * that is its own source: in place needs no scratch). Its stream waits
 * for the others' events on entry, and they wait for its on exit: 2(n-1)
 * waits instead of the barriers' 2n(n-1), one launch instead of n. A
 * synchronous call (the communicator's own streams, idle between calls)
 * needs neither: one launch and one sync, the floor (umpool-bench coll).
 * Above COLL_FAN_MAX the one device's links carry every rank's bytes,
 * where the ranks' own launches share the load: the schedules below.
 *
 * Algorithms: one-shot and two-shot for allreduce (one-shot: every rank
 * reads all its peers' buffers through the pool's pointers; two-shot: rank
 * r reduces slice r and stores it into every rank's receive buffer; the
 * kernel folds ranks 0..n-1 in order, so both give the sim's bits), direct
 * for the others (the rank that needs data reads it). Ring and tree are
 * the sim's only: over peer pointers on one NVLink domain the direct
 * schedules already use every link, and their step-by-step hand-offs
 * would cost a barrier each.
 *
 * The cost model (model.c) that chooses between one-shot and two-shot is
 * the sim's: it charges two-shot two barrier rounds (a pull in its second
 * step needs them), while this executor's two-shot stores its slices into
 * the peers' buffers and needs only the exit barrier; so on a GPU two-shot
 * is one round cheaper than the plan says, and the choice leans to
 * one-shot near the crossover.
 *
 * Ranks that cannot reach each other (no peer access, the two sockets of a
 * PCIe box) exchange through pinned host memory, as NCCL's shared-memory
 * transport does: the sender copies its send buffer into a host buffer of
 * the communicator before the entry barrier, and readers that cannot reach
 * it read that copy (a GPU reads pinned host memory over PCIe). Two-shot
 * then does not apply: it writes into the peers' receive buffers.
 *
 * Built without nvcc there is no kernel: the data-moving collectives still
 * run (copies), the reducing ones are -ENOTSUP.
 *
 * Buffers of movable allocations are acquired for the call, as on sim, and
 * released once an event recorded after the exit barrier has completed
 * (coll_gpu_reap, called at the next call and at destroy). Scratch space
 * (in-place one-shot and all-to-all) is pool memory of the rank's device,
 * freed with ump_free_async on the rank's stream right after the call is
 * queued.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/gpu.h"
#include "coll/kernel.h"
#include "coll/model.h"
#include "coll/reduce.h"
#include "front/front.h"
#include "util/log.h"

/* A call that holds acquired buffers until its work is done. */
struct coll_gjob {
    void *done; /* an event recorded after the exit barrier */
    int nhold;
    struct {
        void *p;
        size_t len;
    } hold[2 * COLL_MAX_RANKS];
    struct coll_gjob *next;
};

unsigned coll_gpu_algos(const ump_comm_t *c, int coll)
{
    if (coll_reducing(coll) && !coll_kernel_image)
        return 0;
    if (coll == UMP_COLL_ALLREDUCE)
        return 1u << COLL_ONESHOT | (c->reach_all ? 1u << COLL_TWOSHOT : 0);
    return 1u << COLL_DIRECT;
}

int coll_gpu_init(ump_comm_t *c)
{
    const struct backend_ops *be = c->pool->be;
    int rc = 0, nd = ump_device_count(c->pool);
    /* A rank's buffer may be on any device its own reaches (a pooled or
     * spilled allocation), not only on the ranks' devices: staging and
     * two-shot's stores into peers' buffers may be skipped only when every
     * device of the pool reaches every other. */
    c->reach_all = true;
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nd; j++) {
            ump_link_props_t l;
            c->reach_all &= i == j || (!ump_link_props(c->pool, i, j, &l) &&
                                       l.peer);
        }
    for (int r = 0; r < c->n && !rc; r++)
        rc = be->event_create(c->pool->bctx, &c->ev[r]);
    if (!rc)
        rc = be->event_create(c->pool->bctx, &c->last);
    if (rc)
        coll_gpu_fini(c);
    return rc;
}

void coll_gpu_fini(ump_comm_t *c)
{
    const struct backend_ops *be = c->pool->be;
    void *bctx = c->pool->bctx;
    coll_gpu_reap(c, true);
    if (c->last) {
        be->event_sync(bctx, c->last); /* staging may still be read */
        be->event_destroy(bctx, c->last);
        c->last = NULL;
    }
    for (int r = 0; r < c->n; r++) {
        if (c->ev[r])
            be->event_destroy(bctx, c->ev[r]);
        c->ev[r] = NULL;
        if (c->stage[r]) {
            be->host_unregister(bctx, c->stage[r]);
            free(c->stage[r]);
            c->stage[r] = NULL;
        }
    }
}

/* Gives back what j holds (after its work is done or was never queued). */
static void unhold(ump_comm_t *c, struct coll_gjob *j)
{
    for (int i = 0; i < j->nhold; i++)
        ump_release(c->pool, j->hold[i].p, j->hold[i].len);
    j->nhold = 0;
}

void coll_gpu_reap(ump_comm_t *c, bool wait)
{
    const struct backend_ops *be = c->pool->be;
    pthread_mutex_lock(&c->done_lock);
    struct coll_gjob *j = c->gjobs, *keep = NULL;
    c->gjobs = NULL;
    pthread_mutex_unlock(&c->done_lock);
    while (j) {
        struct coll_gjob *next = j->next;
        int rc = wait ? be->event_sync(c->pool->bctx, j->done)
                      : be->event_query(c->pool->bctx, j->done);
        if (rc == -EAGAIN) {
            j->next = keep;
            keep = j;
        } else {
            /* done, or the device failed: nothing will touch the buffers */
            unhold(c, j);
            be->event_destroy(c->pool->bctx, j->done);
            free(j);
        }
        j = next;
    }
    if (!keep)
        return;
    pthread_mutex_lock(&c->done_lock);
    struct coll_gjob **tail = &keep;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c->gjobs;
    c->gjobs = keep;
    pthread_mutex_unlock(&c->done_lock);
}

/* --- one call ------------------------------------------------------------ */

struct gcall {
    ump_comm_t *c;
    const struct backend_ops *be;
    void *bctx;
    const struct coll_args *a;
    const ump_stream_t *st;
    size_t esz, s; /* bytes of an element, of count elements */
    /* Where rank r reads rank k's send buffer: the buffer itself, or its
     * pinned host copy when r cannot reach it. */
    const char *src[COLL_MAX_RANKS][COLL_MAX_RANKS];
    void *scratch[COLL_MAX_RANKS];
    int rc; /* the first failure; later steps are skipped */
};

/* Where p lies for the link counters (comm.h: coll_traffic): a staging
 * copy is host memory, a rank's scratch is on its device, and a rank's
 * send and receive buffers count at its device, as on sim (job.h), or at
 * the host when they are the pool's pinned host memory (the processes'
 * one-hop allreduce hands the in-process phases such a buffer, hier.c). p lies
 * in one of the buffers the call uses: the one that starts nearest below
 * it (only the root's send buffer is read in broadcast and scatter, only
 * its receive buffer written in reduce and gather: the others' pointers
 * are not looked at, and may be anything). */
static int loc_of(const struct gcall *g, const void *p)
{
    const ump_comm_t *c = g->c;
    const struct coll_args *a = g->a;
    bool root_sends = a->coll == UMP_COLL_BROADCAST ||
                      a->coll == UMP_COLL_SCATTER;
    bool root_gets = a->coll == UMP_COLL_REDUCE || a->coll == UMP_COLL_GATHER;
    const char *q = p, *best = NULL;
    int at = TRAFFIC_HOST;
    for (int k = 0; k < c->n; k++) {
        if (c->stage[k] && q >= (char *)c->stage[k] &&
            q < (char *)c->stage[k] + c->stage_len[k])
            return TRAFFIC_HOST;
        const char *b[3] = {root_sends && k != a->root ? NULL : a->send[k],
                            root_gets && k != a->root ? NULL : a->recv[k],
                            g->scratch[k]};
        for (int i = 0; i < 3; i++)
            if (b[i] && b[i] <= q && (!best || b[i] > best)) {
                best = b[i];
                at = c->dev[k];
            }
    }
    return best && at != TRAFFIC_HOST && pool_ptr_on_host(c->pool, best)
               ? TRAFFIC_HOST
               : at;
}

static void copy(struct gcall *g, int r, void *dst, const void *src,
                 size_t bytes)
{
    if (g->rc || dst == src || !bytes)
        return;
    g->rc = g->be->memcpy_async(g->bctx, dst, src, bytes, g->st[r]);
    if (!g->rc)
        coll_traffic(g->c->pool, loc_of(g, src), loc_of(g, dst), bytes);
}

int coll_gpu_kernel(ump_pool_t *pool, ump_stream_t st,
                    struct coll_kargs *k)
{
    /* a thread per 16 bytes (the kernel's vectors), up to the cap */
    size_t vecs = (k->count * coll_dtype_size(k->dt) + 15) / 16;
    size_t blocks = (vecs + COLL_KERNEL_THREADS - 1) / COLL_KERNEL_THREADS;
    if (blocks > COLL_KERNEL_MAX_BLOCKS)
        blocks = COLL_KERNEL_MAX_BLOCKS;
    return pool->be->kernel_launch(pool->bctx, st, coll_kernel_image,
                                   COLL_KERNEL_REDUCE, (unsigned)blocks,
                                   COLL_KERNEL_THREADS, k);
}

/* Where rank r reads every rank's send buffer, off bytes in. */
static void srcs_at(const struct gcall *g, int r, size_t off,
                    const void **out)
{
    for (int k = 0; k < g->c->n; k++)
        out[k] = g->src[r][k] + off;
}

/* The kernel on rank r's stream, in one of its shapes (kernel.h): FOLD,
 * each of the ndst destinations = the fold of nsrc sources of count
 * elements (one source: a copy); GATHER and SPLIT, count elements cut in
 * segments of seg. */
static void launch_shape(struct gcall *g, int r, int mode, void *const *dst,
                         int ndst, const void *const *src, int nsrc,
                         size_t count, size_t seg)
{
    if (g->rc || !count)
        return;
    struct coll_kargs k = {.count = count, .seg = seg, .n = nsrc,
                           .ndst = ndst, .dt = g->a->dt, .op = g->a->op,
                           .mode = mode};
    for (int i = 0; i < nsrc; i++)
        k.src[i] = src[i];
    for (int o = 0; o < ndst; o++)
        k.dst[o] = dst[o];
    g->rc = coll_gpu_kernel(g->c->pool, g->st[r], &k);
    /* rank r's kernel reads every source and stores every destination */
    size_t sbytes = (mode == COLL_KGATHER ? seg : count) * g->esz;
    size_t dbytes = (mode == COLL_KSPLIT ? seg : count) * g->esz;
    for (int i = 0; !g->rc && i < nsrc; i++)
        coll_traffic(g->c->pool, loc_of(g, src[i]), g->c->dev[r], sbytes);
    for (int o = 0; !g->rc && o < ndst; o++)
        coll_traffic(g->c->pool, g->c->dev[r], loc_of(g, dst[o]), dbytes);
}

static void launch(struct gcall *g, int r, void *const *dst, int ndst,
                   const void *const *src, int nsrc, size_t count)
{
    launch_shape(g, r, COLL_KFOLD, dst, ndst, src, nsrc, count, 0);
}

/* Rank r: each of the ndst destinations = the fold of nsrc sources of
 * count elements: the kernel, or copies for one source (the kernel would
 * copy the bits; the copy engines do it beside the SMs). */
static void reduce(struct gcall *g, int r, void *const *dst, int ndst,
                   const void *const *src, int nsrc, size_t count)
{
    if (g->rc || !count)
        return;
    if (nsrc == 1) {
        for (int o = 0; o < ndst; o++)
            copy(g, r, dst[o], src[0], count * g->esz);
        return;
    }
    launch(g, r, dst, ndst, src, nsrc, count);
}

/* Every rank's stream waits for what every other rank's has queued. */
static void barrier(struct gcall *g)
{
    ump_comm_t *c = g->c;
    for (int r = 0; r < c->n && !g->rc; r++)
        g->rc = g->be->event_record(g->bctx, c->ev[r], g->st[r]);
    for (int r = 0; r < c->n && !g->rc; r++)
        for (int k = 0; k < c->n && !g->rc; k++)
            if (k != r && g->st[k] != g->st[r])
                g->rc = g->be->stream_wait_event(g->bctx, g->st[r], c->ev[k]);
}

/* The fan (see the top): the rank whose stream runs a small call in one
 * launch, or -1 when the call takes the schedules. The cost model says
 * which (model.h: coll_model_fan, as the sim's executor asks it): a rank's
 * largest buffer (allgather's receive, reduce-scatter's send buffer: the
 * size nccl-tests reports) within COLL_FAN_MAX, and the one launch
 * cheaper than the algorithm's schedule on the communicator's links. */
static int fan_rank(const struct gcall *g, int algo)
{
    const struct coll_args *a = g->a;
    if (!g->c->reach_all || !coll_kernel_image)
        return -1;
    return coll_model_fan(&g->c->topo, a->coll, (enum coll_algo)algo,
                          coll_bytes(a->coll, a->count, g->esz, g->c->n),
                          a->root);
}

/* Runs the call in one launch on rank q's stream. On streams of the
 * caller's, q's waits for what the others queued before the call, and
 * theirs wait for q's kernel; the communicator's own need neither (wait:
 * the call is synchronous, and nothing else runs on them). */
static void fan(struct gcall *g, int q, bool wait)
{
    ump_comm_t *c = g->c;
    const struct coll_args *a = g->a;
    int n = c->n;
    for (int r = 0; r < n && !wait && !g->rc; r++)
        if (g->st[r] != g->st[q] &&
            !(g->rc = g->be->event_record(g->bctx, c->ev[r], g->st[r])))
            g->rc = g->be->stream_wait_event(g->bctx, g->st[q], c->ev[r]);
    const void *src[COLL_MAX_RANKS];
    void *dst[COLL_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        src[r] = a->send[r];
        dst[r] = a->recv[r];
    }
    if (a->coll == UMP_COLL_ALLREDUCE)
        launch(g, q, dst, n, src, n, a->count);
    else if (a->coll == UMP_COLL_BROADCAST)
        launch(g, q, dst, n, &src[q], 1, a->count);
    else if (a->coll == UMP_COLL_REDUCE) /* the root's receive buffer */
        launch(g, q, &dst[q], 1, src, n, a->count);
    else /* every rank's block into every rank's, or slice r into rank r */
        launch_shape(g, q,
                     a->coll == UMP_COLL_ALLGATHER ? COLL_KGATHER
                                                   : COLL_KSPLIT,
                     dst, n, src, n, (size_t)n * a->count, a->count);
    if (wait || g->rc || (g->rc = g->be->event_record(g->bctx, c->ev[q],
                                                      g->st[q])))
        return;
    for (int r = 0; r < n && !g->rc; r++)
        if (g->st[r] != g->st[q])
            g->rc = g->be->stream_wait_event(g->bctx, g->st[r], c->ev[q]);
}

/* Does device d map every byte of [p, p + len) (its own, a peer's, or
 * pinned host memory)? */
static bool reaches(ump_comm_t *c, int d, const char *p, size_t len)
{
    for (size_t off = 0; off < len;) {
        ump_ptr_info_t in;
        const char *why;
        ump_link_props_t l;
        if (pool_ptr_info(c->pool, p + off, &in, &why))
            return false;
        if (in.device >= 0 && in.device != d &&
            (ump_link_props(c->pool, d, in.device, &l) || !l.peer))
            return false;
        off = (size_t)((const char *)in.chunk_base + in.chunk_size - p);
    }
    return true;
}

/* Pinned host memory for rank k's copy of len bytes. */
static int stage_buf(struct gcall *g, int k, size_t len)
{
    ump_comm_t *c = g->c;
    if (c->stage_len[k] >= len)
        return 0;
    if (c->stage[k]) {
        /* the last call's work may still read it: the host waits */
        int rc = g->be->event_sync(g->bctx, c->last);
        if (rc)
            return rc;
        g->be->host_unregister(g->bctx, c->stage[k]);
        free(c->stage[k]);
        c->stage[k] = NULL;
        c->stage_len[k] = 0;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, len)) {
        ump_log_error("%s: no host memory to stage %zu bytes of rank %d",
                      g->a->fn, len, k);
        return -ENOMEM;
    }
    int rc = g->be->host_register(g->bctx, p, len);
    if (rc) {
        free(p);
        return rc;
    }
    c->stage[k] = p;
    c->stage_len[k] = len;
    return 0;
}

/* Fills g->src; where a rank cannot reach a peer's send buffer, the peer
 * copies it to pinned host memory on its stream (before the entry
 * barrier, so that readers wait for the copy). */
static void sources(struct gcall *g)
{
    ump_comm_t *c = g->c;
    const struct coll_args *a = g->a;
    size_t slen = g->s;
    if (a->coll == UMP_COLL_REDUCE_SCATTER || a->coll == UMP_COLL_SCATTER ||
        a->coll == UMP_COLL_ALLTOALL)
        slen *= (size_t)c->n;
    /* Who reads whose send buffer: in broadcast and scatter only the
     * root's is read, in reduce and gather only the root reads. */
    bool one_sender = a->coll == UMP_COLL_BROADCAST ||
                      a->coll == UMP_COLL_SCATTER;
    bool one_reader = a->coll == UMP_COLL_REDUCE ||
                      a->coll == UMP_COLL_GATHER;
    bool staged_any = false;
    for (int k = 0; k < c->n && !g->rc; k++) {
        const char *sk = a->send[k];
        bool staged = false;
        for (int r = 0; r < c->n; r++) {
            g->src[r][k] = sk;
            if ((one_sender && k != a->root) || (one_reader && r != a->root))
                continue;
            if (r == k || c->reach_all || reaches(c, c->dev[r], sk, slen))
                continue;
            if (!staged) {
                if (!staged_any) /* the last call may still read them */
                    for (int q = 0; q < c->n && !g->rc; q++)
                        g->rc = g->be->stream_wait_event(g->bctx, g->st[q],
                                                         c->last);
                staged_any = true;
                if (!g->rc)
                    g->rc = stage_buf(g, k, slen);
                copy(g, k, c->stage[k], sk, slen);
                staged = true;
            }
            g->src[r][k] = c->stage[k];
        }
    }
}

static int scratch(struct gcall *g, int r, size_t bytes)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = g->c->dev[r];
    h.flags = UMP_HINT_NO_SPILL; /* on the rank's own device */
    int rc = ump_alloc(g->c->pool, bytes, &h, &g->scratch[r]);
    if (rc)
        ump_log_error("%s: no scratch space of %zu bytes on device %d",
                      g->a->fn, bytes, h.device);
    return rc;
}

size_t coll_gpu_slice_lo(size_t count, size_t esz, int n, int k)
{
    size_t unit = esz < 16 ? 16 / esz : 1, units = count / unit;
    if (k >= n)
        return count;
    return (units / (size_t)n * (size_t)k +
            ((size_t)k < units % (size_t)n ? (size_t)k
                                           : units % (size_t)n)) * unit;
}

#define AT(p, bytes) ((char *)(p) + (bytes))

static void allreduce(struct gcall *g, int algo)
{
    ump_comm_t *c = g->c;
    const struct coll_args *a = g->a;
    int n = c->n;
    if (algo == COLL_ONESHOT) {
        /* In place, a rank's result waits in scratch until no peer reads
         * its send buffer any more. */
        bool any = false;
        for (int r = 0; r < n && !g->rc; r++) {
            bool ip = a->send[r] == a->recv[r] && n > 1;
            if (ip && !(g->rc = scratch(g, r, g->s)))
                any = true;
            const void *src[COLL_MAX_RANKS];
            void *dst = ip ? g->scratch[r] : a->recv[r];
            srcs_at(g, r, 0, src);
            reduce(g, r, &dst, 1, src, n, a->count);
        }
        if (!any)
            return;
        barrier(g);
        for (int r = 0; r < n; r++)
            if (g->scratch[r])
                copy(g, r, a->recv[r], g->scratch[r], g->s);
        return;
    }
    /* two-shot: rank r reduces slice r of every input and stores it into
     * every rank's receive buffer (kernel.h: several destinations), so each
     * byte is read once and written once, and the exit barrier is the only
     * hand-off. In place, rank r writes slice r of the send buffers, which
     * only it reads, each element after reading it. */
    for (int r = 0; r < n; r++) {
        size_t first = coll_gpu_slice_lo(a->count, g->esz, n, r);
        size_t lo = first * g->esz;
        const void *src[COLL_MAX_RANKS];
        void *dst[COLL_MAX_RANKS];
        srcs_at(g, r, lo, src);
        for (int k = 0; k < n; k++)
            dst[k] = AT(a->recv[k], lo);
        reduce(g, r, dst, n, src, n,
               coll_gpu_slice_lo(a->count, g->esz, n, r + 1) - first);
    }
}

static void run_direct(struct gcall *g)
{
    ump_comm_t *c = g->c;
    const struct coll_args *a = g->a;
    int n = c->n, root = a->root;
    size_t s = g->s;
    const void *src[COLL_MAX_RANKS];
    switch (a->coll) {
    case UMP_COLL_REDUCE: /* the kernel may write over its own input */
        srcs_at(g, root, 0, src);
        reduce(g, root, &a->recv[root], 1, src, n, a->count);
        break;
    case UMP_COLL_REDUCE_SCATTER: /* in place: a rank's slice is its own */
        for (int r = 0; r < n; r++) {
            srcs_at(g, r, (size_t)r * s, src);
            reduce(g, r, &a->recv[r], 1, src, n, a->count);
        }
        break;
    case UMP_COLL_BROADCAST:
        for (int r = 0; r < n; r++)
            copy(g, r, a->recv[r], g->src[r][root], s);
        break;
    case UMP_COLL_ALLGATHER:
        for (int r = 0; r < n; r++)
            for (int i = 0; i < n; i++) {
                int k = (r + i) % n; /* peers read in turn, not all at 0 */
                copy(g, r, AT(a->recv[r], (size_t)k * s), g->src[r][k], s);
            }
        break;
    case UMP_COLL_GATHER:
        for (int k = 0; k < n; k++)
            copy(g, root, AT(a->recv[root], (size_t)k * s), g->src[root][k],
                 s);
        break;
    case UMP_COLL_SCATTER:
        for (int r = 0; r < n; r++)
            copy(g, r, a->recv[r], g->src[r][root] + (size_t)r * s, s);
        break;
    case UMP_COLL_ALLTOALL: {
        /* In place, a rank's send buffer is read by its peers while it
         * would receive into it: the blocks go to scratch first. */
        bool any = false;
        for (int r = 0; r < n && !g->rc; r++) {
            bool ip = a->send[r] == a->recv[r] && n > 1;
            if (ip && !(g->rc = scratch(g, r, s * (size_t)n)))
                any = true;
            void *dst = ip ? g->scratch[r] : a->recv[r];
            for (int i = 0; i < n; i++) {
                int k = (r + i) % n;
                copy(g, r, AT(dst, (size_t)k * s),
                     g->src[r][k] + (size_t)r * s, s);
            }
        }
        if (!any)
            break;
        barrier(g);
        for (int r = 0; r < n; r++)
            if (g->scratch[r])
                copy(g, r, a->recv[r], g->scratch[r], s * (size_t)n);
        break;
    }
    default:
        break;
    }
}

/* Acquires the buffers of movable allocations into j (as the sim does,
 * calls.c). */
static int hold(struct gcall *g, struct coll_gjob *j)
{
    ump_comm_t *c = g->c;
    for (int r = 0; r < c->n; r++) {
        struct coll_buf b[2];
        int k = coll_buffers(c, g->a, r, g->s, b);
        for (int i = 0; i < k; i++) {
            if (!pool_ptr_movable(c->pool, b[i].p))
                continue;
            void *p = (void *)(uintptr_t)b[i].p;
            int rc = ump_acquire(c->pool, p, b[i].len, c->dev[r], NULL);
            if (rc)
                return rc;
            j->hold[j->nhold].p = p;
            j->hold[j->nhold++].len = b[i].len;
        }
    }
    return 0;
}

int coll_gpu_run(ump_comm_t *c, const struct coll_args *a, int algo,
                 const ump_stream_t *st, bool wait)
{
    if (algo == COLL_NALGO) {
        ump_log_error("%s: the reductions run in a GPU kernel, and this "
                      "library was built without nvcc", a->fn);
        return -ENOTSUP;
    }
    struct gcall g = {.c = c, .be = c->pool->be, .bctx = c->pool->bctx,
                      .a = a, .st = st, .esz = coll_dtype_size(a->dt)};
    g.s = a->count * g.esz;
    /* Only a call that holds buffers outlives its queueing: on the heap,
     * with an event that says when its work is done. */
    struct coll_gjob held = {0}, *j = NULL;
    int rc = hold(&g, &held);
    if (!rc && held.nhold && !(j = malloc(sizeof(*j))))
        rc = -ENOMEM;
    if (j) {
        *j = held;
        rc = g.be->event_create(g.bctx, &j->done);
    }
    if (rc) {
        unhold(c, &held);
        free(j);
        return rc;
    }
    /* q: the stream whose event covers the call's work (the fan's, or
     * rank 0's, which has waited for every rank at the exit barrier) */
    int q = fan_rank(&g, algo);
    bool fanned = q >= 0;
    if (fanned) {
        fan(&g, q, wait);
    } else {
        q = 0;
        sources(&g);
        barrier(&g); /* entry */
        if (a->coll == UMP_COLL_ALLREDUCE)
            allreduce(&g, algo);
        else
            run_direct(&g);
        barrier(&g); /* exit */
    }
    if (!g.rc)
        g.rc = g.be->event_record(g.bctx, c->last, st[q]);
    if (!g.rc && j)
        g.rc = g.be->event_record(g.bctx, j->done, st[q]);
    /* Scratch goes back once its stream is past the call; on a failure
     * half way, the work queued may still use it: the same. */
    for (int r = 0; r < c->n; r++)
        if (g.scratch[r])
            ump_free_async(c->pool, g.scratch[r], st[r]);
    if (g.rc) {
        /* Failed half way: what was queued may still use the buffers, the
         * scratch and the staging; c->last does not cover it. */
        for (int r = 0; r < c->n; r++)
            g.be->stream_sync(g.bctx, st[r]);
        if (j) {
            unhold(c, j);
            g.be->event_destroy(g.bctx, j->done);
            free(j);
        }
    } else if (j) {
        pthread_mutex_lock(&c->done_lock);
        j->next = c->gjobs;
        c->gjobs = j;
        pthread_mutex_unlock(&c->done_lock);
    }
    /* Synchronous: the fan's work is all on q's stream (the others have
     * nothing queued); the schedules' ends on every rank's. */
    for (int r = 0; !g.rc && wait && r < c->n; r++)
        if (r == q || !fanned)
            g.rc = ump_stream_synchronize(c->pool, st[r]);
    /* The syncs of every rank's stream would have told of a device that
     * failed during the call; the fan's one sync tells of q's only. */
    int f = !g.rc && wait && fanned ? coll_comm_failed_rank(c) : -1;
    if (f >= 0) {
        ump_log_error("%s: rank %d's device %d failed during the call: -EIO "
                      "(what the call wrote is undefined)", a->fn,
                      c->first + f, c->dev[f]);
        g.rc = -EIO;
    }
    return g.rc;
}
