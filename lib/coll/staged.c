/*
 * The hierarchical allreduce of device memory the CPU cannot reach (cuda),
 * through the pool's own pinned host memory (hier.h): in one host hop when
 * it fits a piece, else pipelined in pieces.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>

#include "coll/hier.h"
#include "front/front.h"

/* A staged allreduce goes between the processes in pieces of this many
 * bytes (pipelined, below): small enough that the copies of the pieces
 * around it hide behind a piece's exchange, large enough that a piece's
 * round between the processes costs more than its start. */
#define STAGE_PIECE ((size_t)512 << 10)

/* The world's staging streams (world.h), made at their first use. */
static int stage_streams(ump_comm_t *c)
{
    struct coll_world *w = c->world;
    if (w->stage_st_made)
        return 0;
    int rc = ump_stream_create(c->pool, c->dev[0], &w->stage_st[0]);
    if (!rc && (rc = ump_stream_create(c->pool, c->dev[0], &w->stage_st[1])))
        ump_stream_destroy(c->pool, w->stage_st[0]);
    w->stage_st_made = !rc;
    return rc;
}

/* Elements [i * per, ...) of count: piece i's length in elements. */
static size_t piece_len(size_t count, size_t per, size_t i)
{
    return (i + 1) * per < count ? per : count - i * per;
}

/* Allreduce across the processes of p, count elements of device memory
 * the CPU cannot reach, through pinned host memory (coll_stage_alloc) in
 * pieces of STAGE_PIECE bytes: while the calling thread takes piece i
 * between the processes, piece i + 1 comes down (stage_st[0]) and piece
 * i - 1 goes up (stage_st[1]). Every element is folded as the whole
 * buffer's would be (in process order, proc_allreduce): the cuts do not
 * change the bits. A copy that fails with its device marks this process's
 * part bad (local): the remaining pieces still go between the processes,
 * with whatever the host buffer holds, so that no peer waits, and the
 * call's agreement makes it -EIO everywhere. */
static int pipelined_allreduce(ump_comm_t *c, const struct coll_args *a,
                               void *p)
{
    struct coll_world *w = c->world;
    ump_pool_t *pool = c->pool;
    size_t esz = esz_of(a), count = a->count, per = STAGE_PIECE / esz;
    size_t npiece = (count + per - 1) / per;
    int op = reduce_op(a->op);
    char *h = coll_stage_alloc(pool, count * esz), *d = p;
    if (!h)
        return -ENOMEM;
    ump_stream_t *st = w->stage_st;
    int rc = 0;
    int cr = w->bad ? 0 : ump_memcpy_async(pool, h, d,
                                           piece_len(count, per, 0) * esz,
                                           st[0]);
    for (size_t i = 0; i < npiece && !rc; i++) {
        size_t off = i * per * esz, len = piece_len(count, per, i) * esz;
        if (!cr && !w->bad && !(cr = ump_stream_synchronize(pool, st[0])))
            coll_traffic(pool, coll_loc(pool, d + off), TRAFFIC_HOST, len);
        if (!cr && !w->bad && i + 1 < npiece)
            cr = ump_memcpy_async(pool, h + off + len, d + off + len,
                                  piece_len(count, per, i + 1) * esz, st[0]);
        if (cr && !w->bad && (rc = hier_local(c, cr)))
            break;
        rc = hier_proc_allreduce(c, h + off, len / esz, a->dt, op, a->fn);
        if (!rc && a->op == UMP_AVG)
            coll_avg_finish(a->dt, h + off, len / esz, c->nall);
        if (!rc && !w->bad) {
            int e = ump_memcpy_async(pool, d + off, h + off, len, st[1]);
            if (!e)
                coll_traffic(pool, TRAFFIC_HOST, coll_loc(pool, d + off),
                             len);
            else if ((rc = hier_local(c, e)))
                break;
        }
    }
    /* Nothing of h may still be copied when it is freed. */
    int e0 = ump_stream_synchronize(pool, st[0]);
    int e1 = ump_stream_synchronize(pool, st[1]);
    if (!rc && !w->bad)
        rc = hier_local(c, e1 ? e1 : e0);
    coll_stage_drop(c, h);
    return rc;
}

/* Allreduce, hierarchical, of at most a piece of device memory the CPU
 * cannot reach (cuda): one host hop. The in-process reduce stores rank 0's
 * partial straight into pinned host memory of the pool (a GPU writes it
 * over its host link), the processes fold it there, and the in-process
 * broadcast reads it from there into every rank's buffer: no staging
 * copies, and none of their syncs. 1 when the pool has no pinned memory
 * left (pinned_limit): the caller stages instead. */
static int onehop_allreduce(ump_comm_t *c, const struct coll_args *a)
{
    size_t s = a->count * esz_of(a);
    int op = reduce_op(a->op);
    void *h;
    if (ump_host_alloc(c->pool, s, &h))
        return 1;
    void *recv[COLL_MAX_RANKS];
    const void *from[COLL_MAX_RANKS];
    for (int r = 0; r < c->n; r++) {
        recv[r] = r ? a->recv[r] : h;
        from[r] = h;
    }
    int rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, recv, a->count, op, 0);
    if (!rc)
        rc = hier_sync_rank(c, a, 0);
    if (!rc)
        rc = hier_proc_allreduce(c, h, a->count, a->dt, op, a->fn);
    if (!rc && a->op == UMP_AVG)
        coll_avg_finish(a->dt, h, a->count, c->nall);
    if (!rc)
        rc = hier_phase(c, a, UMP_COLL_BROADCAST, from, a->recv, a->count, 0, 0);
    /* The broadcast reads h, on the caller's streams after the call
     * returns: their work is waited for before h goes back. */
    int e = hier_sync_all(c, a);
    coll_stage_drop(c, h);
    return rc ? rc : e;
}

int coll_staged_allreduce(ump_comm_t *c, const struct coll_args *a)
{
    size_t s = a->count * esz_of(a);
    if (c->world->bad || coll_host_ok(c->pool, a->recv[0]))
        return 1;
    if (s <= STAGE_PIECE)
        return onehop_allreduce(c, a);
    if (stage_streams(c))
        return 1;
    int rc = hier_phase(c, a, UMP_COLL_REDUCE, a->send, a->recv, a->count,
                        reduce_op(a->op), 0);
    if (!rc)
        rc = hier_sync_rank(c, a, 0);
    if (!rc)
        rc = pipelined_allreduce(c, a, a->recv[0]);
    if (!rc && c->n > 1)
        rc = hier_phase(c, a, UMP_COLL_BROADCAST, (const void *const *)a->recv,
                        a->recv, a->count, 0, 0);
    return rc;
}
