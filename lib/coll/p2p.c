/*
 * Point-to-point: ump_send and ump_recv, alone or in groups. Like NCCL's,
 * groups are per thread (ump_group_start/end take no communicator) and
 * nest; the operations of a group are checked together, then issued
 * together: those between two ranks of this process are paired (the k-th
 * send from a to b with the k-th receive at b from a) and copied, those
 * between processes all started on the engine at once and polled, so a
 * ring of exchanges cannot deadlock. Like MPI's blocking calls, they are
 * synchronous: the data has arrived when the call (or ump_group_end)
 * returns; the work queued on the stream before is waited for first.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/nccl.h"
#include "coll/reduce.h"
#include "coll/world.h"
#include "front/check.h"
#include "front/failure.h"
#include "front/front.h"
#include "front/stream.h"
#include "util/internal.h"
#include "util/log.h"

struct p2p_op {
    ump_comm_t *c;
    int local; /* the calling rank, local */
    int peer;  /* global */
    char *buf;
    size_t bytes;
    ump_stream_t stream;
    bool send;
    int match; /* the paired op's index, for ops inside the process */
};

/* The calling thread's group. */
static _Thread_local struct {
    int depth;
    struct p2p_op *op;
    int n;
    size_t cap;
} grp;

static const char *name(const struct p2p_op *o)
{
    return o->send ? "ump_send" : "ump_recv";
}

/* The arguments of one call, before it joins a group. */
static int check(const struct p2p_op *o, size_t count, int dt)
{
    const char *fn = name(o);
    ump_comm_t *c = o->c;
    if (!c) {
        ump_log_error("%s: comm is NULL", fn);
        return -EINVAL;
    }
    int rc = pool_check(c->pool, fn);
    if (rc)
        return rc;
    if (o->local < 0 || o->local >= c->n || o->peer < 0 ||
        o->peer >= c->nall || !coll_dtype_valid(dt)) {
        ump_log_error("%s: %s %d", fn,
                      o->local < 0 || o->local >= c->n ? "local rank out of range:"
                      : !coll_dtype_valid(dt)          ? "unknown data type"
                                                       : "peer out of range:",
                      o->local < 0 || o->local >= c->n ? o->local
                      : !coll_dtype_valid(dt)          ? dt
                                                       : o->peer);
        return -EINVAL;
    }
    if (count > SIZE_MAX / coll_dtype_size(dt)) {
        ump_log_error("%s: count %zu overflows", fn, count);
        return -EINVAL;
    }
    if ((rc = pool_stream_check(c->pool, o->stream, fn)))
        return rc;
    if (!o->bytes)
        return 0;
    ump_ptr_info_t in;
    const char *why;
    if (!o->buf || pool_ptr_info(c->pool, o->buf, &in, &why)) {
        ump_log_error("%s: buf %p is %s", fn, (void *)o->buf,
                      o->buf ? why : "NULL");
        return -EINVAL;
    }
    size_t have = (size_t)((char *)in.base + in.size - o->buf);
    if (have < o->bytes) {
        ump_log_error("%s: buf %p holds %zu bytes from there, the call needs "
                      "%zu", fn, (void *)o->buf, have, o->bytes);
        return -EINVAL;
    }
    if (in.tier == UMP_TIER_NVME) {
        ump_log_error("%s: buf %p is on NVMe (ump_acquire it first)", fn,
                      (void *)o->buf);
        return -EINVAL;
    }
    return pool_check_lost(c->pool, o->buf, o->bytes, fn);
}

/* The calling rank's device, and the peer's when it is a rank of this
 * process: -EIO, logged, when one has failed. (A peer in another process
 * whose device failed is that process's to report: its call fails, and
 * this one's transfer with it times out.) */
static int check_failed(const struct p2p_op *o)
{
    const ump_comm_t *c = o->c;
    ump_pool_t *p = c->pool;
    uint32_t bad = atomic_load(&p->failing) | atomic_load(&p->failed);
    if (!bad)
        return 0;
    int lr[2] = {o->local, o->peer - c->first};
    for (int i = 0; i < 2; i++) {
        if (lr[i] < 0 || lr[i] >= c->n || c->dev[lr[i]] >= 32 ||
            !(bad & (1u << c->dev[lr[i]])))
            continue;
        ump_log_error("%s: rank %d's device %d has failed (-EIO)", name(o),
                      c->first + lr[i], c->dev[lr[i]]);
        return -EIO;
    }
    return 0;
}

static bool inside(const struct p2p_op *o)
{
    return o->peer >= o->c->first && o->peer < o->c->first + o->c->n;
}

/* Pairs the ops between ranks of this process, in order per pair; every
 * one must find its partner in the group, with the same bytes. Ops between
 * processes need an engine. Nothing has moved yet. */
static int pair(struct p2p_op *op, int n)
{
    for (int i = 0; i < n; i++)
        op[i].match = -1;
    for (int i = 0; i < n; i++) {
        struct p2p_op *o = &op[i];
        if (!inside(o)) {
            struct coll_world *w = o->c->world;
            if (!w->engine && !w->nccl) {
                ump_log_error("%s: rank %d to rank %d crosses processes, and "
                              "this communicator has no data engine "
                              "(ump_comm_create_mpi, or NCCL on cuda)",
                              name(o), o->c->first + o->local, o->peer);
                return -ENOTSUP;
            }
            continue;
        }
        if (!o->send || o->match >= 0)
            continue;
        int me = o->c->first + o->local;
        for (int j = 0; j < n; j++) {
            struct p2p_op *r = &op[j];
            if (r->send || r->match >= 0 || r->c != o->c ||
                r->c->first + r->local != o->peer || r->peer != me)
                continue;
            if (r->bytes != o->bytes) {
                ump_log_error("ump_send: rank %d sends %zu bytes to rank %d, "
                              "whose ump_recv takes %zu", me, o->bytes,
                              o->peer, r->bytes);
                return -EINVAL;
            }
            o->match = j;
            r->match = i;
            break;
        }
    }
    for (int i = 0; i < n; i++)
        if (inside(&op[i]) && op[i].match < 0) {
            int me = op[i].c->first + op[i].local;
            ump_log_error("%s: rank %d %s rank %d within this process has no "
                          "matching %s %s (put both in one ump_group_start/"
                          "end)", name(&op[i]), me,
                          op[i].send ? "to" : "from", op[i].peer,
                          op[i].send ? "ump_recv" : "ump_send",
                          grp.depth ? "in this group" : "");
            return -EDEADLK;
        }
    return 0;
}

/* Transfers by process, direction, tag (source and destination local
 * ranks), then the order of the calls (seq: qsort is not stable). */
static int cmp_msg(const void *a, const void *b)
{
    const struct coll_msg *x = a, *y = b;
    int kx[4] = {x->proc, x->send, x->tag, x->seq};
    int ky[4] = {y->proc, y->send, y->tag, y->seq};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i])
            return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* The ops of one communicator between processes: staged through host
 * memory where the engine cannot move device memory. */
static int remote(ump_comm_t *c, struct p2p_op *op, int n)
{
    struct coll_world *w = c->world;
    struct coll_msg *m = calloc((size_t)n + 1, sizeof(*m));
    void **h = calloc((size_t)n + 1, sizeof(*h));
    int rc = m && h ? 0 : -ENOMEM, k = 0;
    for (int i = 0; !rc && i < n; i++) {
        struct p2p_op *o = &op[i];
        if (o->c != c || inside(o))
            continue;
        int p = 0;
        while (p + 1 < w->nproc && w->first[p + 1] <= o->peer)
            p++;
        int from = o->send ? o->local : o->peer - w->first[p];
        int to = o->send ? o->peer - w->first[p] : o->local;
        if (w->nccl || w->eng.device_buffers)
            h[i] = o->buf;
        else if ((rc = coll_stage_in(c, o->buf, o->bytes, o->send,
                                     &h[i])))
            break;
        m[k] = (struct coll_msg){h[i], o->bytes, p,
                                 COLL_TAG_P2P + from * 32 + to, o->send, k};
        k++;
    }
    if (!rc && k && w->nccl) {
        /* NCCL matches a pair of processes' transfers by their order
         * alone: both sides issue them sorted by (source local rank,
         * destination local rank), the calls' order kept within each. */
        qsort(m, (size_t)k, sizeof(*m), cmp_msg);
        rc = coll_nccl_xchg(c, m, k, "ump_group_end");
        if (!rc)
            coll_xchg_traffic(c, m, k);
    } else if (!rc && k) {
        rc = coll_xchg(c, m, k, "ump_group_end");
    }
    for (int i = 0; h && i < n; i++)
        if (h[i] && h[i] != op[i].buf) {
            int e = coll_stage_out(c, op[i].buf, h[i], op[i].bytes,
                                   !rc && !op[i].send);
            rc = rc ? rc : e;
        }
    free(m);
    free(h);
    return rc;
}

/* Communicators in the order every process agrees on (world.h: id); the
 * one-process ones first (they move nothing between processes). */
static int cmp_comm(const void *a, const void *b)
{
    const ump_comm_t *x = *(ump_comm_t *const *)a, *y = *(ump_comm_t *const *)b;
    unsigned long i = x->world ? x->world->id + 1 : 0;
    unsigned long j = y->world ? y->world->id + 1 : 0;
    return i < j ? -1 : i > j;
}

static int run(struct p2p_op *op, int n)
{
    if (n < 1)
        return 0;
    int rc = pair(op, n);
    for (int i = 0; !rc && i < n; i++)
        if (op[i].stream)
            rc = ump_stream_synchronize(op[i].c->pool, op[i].stream);
    if (rc)
        return rc;
    /* The communicators of the group, each locked once, and their
     * transfers between processes completed one communicator after the
     * other, in the order every process agrees on: two processes sharing
     * two communicators never wait for each other crosswise. */
    ump_comm_t **cs = calloc((size_t)n, sizeof(*cs));
    if (!cs)
        return -ENOMEM;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < nc; j++)
            seen |= cs[j] == op[i].c;
        if (!seen)
            cs[nc++] = op[i].c;
    }
    qsort(cs, (size_t)nc, sizeof(*cs), cmp_comm);
    for (int j = 0; j < nc; j++)
        pthread_mutex_lock(&cs[j]->lock);
    for (int i = 0; !rc && i < n; i++) {
        struct p2p_op *o = &op[i];
        if (!inside(o) || !o->send || !o->bytes)
            continue;
        rc = ump_memcpy_async(o->c->pool, op[o->match].buf, o->buf, o->bytes,
                              NULL);
        if (!rc)
            rc = ump_stream_synchronize(o->c->pool, NULL);
        if (!rc)
            coll_traffic(o->c->pool, coll_loc(o->c->pool, o->buf),
                         coll_loc(o->c->pool, op[o->match].buf), o->bytes);
    }
    for (int j = 0; !rc && j < nc; j++)
        if (cs[j]->world)
            rc = remote(cs[j], op, n);
    for (int j = nc; j-- > 0;)
        pthread_mutex_unlock(&cs[j]->lock);
    free(cs);
    return rc;
}

static int post(struct p2p_op o, size_t count, int dt)
{
    o.bytes = coll_dtype_valid(dt) && count <= SIZE_MAX / coll_dtype_size(dt)
                  ? count * coll_dtype_size(dt)
                  : 0;
    int rc = check(&o, count, dt);
    if (!rc)
        rc = check_failed(&o);
    if (rc)
        return rc;
    if (!grp.depth)
        return run(&o, 1);
    if ((size_t)grp.n == grp.cap) {
        size_t cap = grp.cap ? 2 * grp.cap : 16;
        struct p2p_op *p = realloc(grp.op, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        grp.op = p;
        grp.cap = cap;
    }
    grp.op[grp.n++] = o;
    return 0;
}

UMP_EXPORT int ump_send(ump_comm_t *c, int local, const void *buf,
                        size_t count, ump_dtype_t dt, int peer,
                        ump_stream_t stream)
{
    return post((struct p2p_op){.c = c, .local = local, .peer = peer,
                                .buf = (char *)buf, .stream = stream,
                                .send = true},
                count, (int)dt);
}

UMP_EXPORT int ump_recv(ump_comm_t *c, int local, void *buf, size_t count,
                        ump_dtype_t dt, int peer, ump_stream_t stream)
{
    return post((struct p2p_op){.c = c, .local = local, .peer = peer,
                                .buf = buf, .stream = stream, .send = false},
                count, (int)dt);
}

UMP_EXPORT int ump_group_start(void)
{
    grp.depth++;
    return 0;
}

UMP_EXPORT int ump_group_end(void)
{
    if (!grp.depth) {
        ump_log_error("ump_group_end: no ump_group_start before it");
        return -EINVAL;
    }
    if (--grp.depth)
        return 0;
    int rc = grp.n ? run(grp.op, grp.n) : 0;
    free(grp.op);
    grp.op = NULL;
    grp.n = 0;
    grp.cap = 0;
    return rc;
}
