#include "config.h"

#include <errno.h>
#include <stdint.h>

#include "coll/check.h"
#include "front/failure.h"
#include "coll/reduce.h"
#include "front/front.h"
#include "front/stream.h"
#include "util/log.h"

/* The slice rules: allgather and gather receive n slices, reduce-scatter
 * and scatter send n, all-to-all both. */
void coll_buf_use(const struct coll_args *a, int g, int nall, size_t s,
                  bool used[2], size_t len[2])
{
    size_t all = s * (size_t)nall;
    used[0] = !coll_rooted(a->coll) || a->coll == UMP_COLL_REDUCE ||
              a->coll == UMP_COLL_GATHER || g == a->root;
    used[1] = !coll_rooted(a->coll) || a->coll == UMP_COLL_BROADCAST ||
              a->coll == UMP_COLL_SCATTER || g == a->root;
    size_t slen = s, rlen = s;
    switch (a->coll) {
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        rlen = all;
        break;
    case UMP_COLL_REDUCE_SCATTER:
    case UMP_COLL_SCATTER:
        slen = all;
        break;
    case UMP_COLL_ALLTOALL:
        slen = rlen = all;
        break;
    default:
        break;
    }
    len[0] = slen;
    len[1] = rlen;
}

int coll_buffers(const ump_comm_t *c, const struct coll_args *a, int r,
                 size_t s, struct coll_buf *b)
{
    bool used[2];
    size_t len[2];
    int k = 0;
    coll_buf_use(a, r + c->first, c->nall, s, used, len);
    if (used[0])
        b[k++] = (struct coll_buf){a->send[r], len[0], r, false};
    if (used[1])
        b[k++] = (struct coll_buf){a->recv[r], len[1], r, true};
    return k;
}

/* Is rank r working in place (its send is its recv, or its slice of it,
 * the slice of its global rank)? */
static bool in_place(const ump_comm_t *c, const struct coll_args *a, int r,
                     size_t s)
{
    const char *sp = a->send[r], *rp = a->recv[r];
    r += c->first;
    switch (a->coll) {
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        return sp == rp + (size_t)r * s;
    case UMP_COLL_REDUCE_SCATTER:
    case UMP_COLL_SCATTER:
        return rp == sp + (size_t)r * s;
    default:
        return sp == rp;
    }
}

/* Pool memory (aligned to its elements for a reduction), len bytes from p
 * inside one allocation, every chunk on a device rank's device reaches or
 * on the host tier. */
static int check_one(ump_comm_t *c, const struct coll_args *a,
                     const struct coll_buf *b, size_t esz)
{
    const char *what = b->recv ? "recv" : "send";
    if (!b->p) {
        ump_log_error("%s: rank %d's %s buffer is NULL", a->fn, b->rank, what);
        return -EINVAL;
    }
    /* A reduction reads and writes elements as their type, on the CPU on
     * sim and in a kernel on the GPU, where a misaligned access is a fault
     * that breaks the whole context. The others only copy bytes. */
    if (coll_reducing(a->coll) && (uintptr_t)b->p % esz) {
        ump_log_error("%s: rank %d's %s buffer %p is not aligned to its "
                      "%zu-byte elements", a->fn, b->rank, what,
                      (const void *)b->p, esz);
        return -EINVAL;
    }
    for (size_t off = 0; off < b->len;) {
        ump_ptr_info_t in;
        const char *why;
        if (pool_ptr_info(c->pool, b->p + off, &in, &why)) {
            ump_log_error("%s: rank %d's %s buffer %p is %s", a->fn, b->rank,
                          what, (const void *)b->p, why);
            return -EINVAL;
        }
        if ((size_t)((const char *)in.base + in.size - b->p) < b->len) {
            ump_log_error("%s: rank %d's %s buffer %p holds %zu bytes from "
                          "there, the call needs %zu", a->fn, b->rank, what,
                          (const void *)b->p,
                          (size_t)((const char *)in.base + in.size - b->p),
                          b->len);
            return -EINVAL;
        }
        if (in.tier == UMP_TIER_NVME) {
            ump_log_error("%s: rank %d's %s buffer %p is on NVMe "
                          "(ump_acquire it first)", a->fn, b->rank, what,
                          (const void *)b->p);
            return -EINVAL;
        }
        ump_link_props_t l;
        int d = c->dev[b->rank];
        if (in.device >= 0 && in.device != d &&
            (ump_link_props(c->pool, d, in.device, &l) || !l.peer)) {
            ump_log_error("%s: rank %d's %s buffer %p has memory on device "
                          "%d, which device %d cannot reach", a->fn, b->rank,
                          what, (const void *)b->p, in.device, d);
            return -EINVAL;
        }
        off = (size_t)((const char *)in.chunk_base + in.chunk_size - b->p);
    }
    return 0;
}

static bool overlap(const struct coll_buf *x, const struct coll_buf *y)
{
    return x->p < y->p + y->len && y->p < x->p + x->len;
}

int coll_check(ump_comm_t *c, const struct coll_args *a, bool *inplace_p)
{
    const char *fn = a->fn;
    if (!coll_dtype_valid(a->dt) ||
        (coll_reducing(a->coll) && !coll_op_valid(a->op)) ||
        (coll_rooted(a->coll) && (a->root < 0 || a->root >= c->nall))) {
        ump_log_error("%s: %s %d", fn,
                      !coll_dtype_valid(a->dt) ? "unknown data type"
                      : coll_reducing(a->coll) && !coll_op_valid(a->op)
                          ? "unknown reduction"
                          : "root out of range:",
                      !coll_dtype_valid(a->dt) ? a->dt
                      : coll_reducing(a->coll) && !coll_op_valid(a->op) ? a->op
                                                                   : a->root);
        return -EINVAL;
    }
    if (!a->count) /* NCCL's convention: no buffer is read */
        return 0;
    if (!a->send || !a->recv) {
        ump_log_error("%s: %s is NULL", fn, a->send ? "recv" : "send");
        return -EINVAL;
    }
    size_t esz = coll_dtype_size(a->dt);
    if (a->count > SIZE_MAX / esz / (size_t)c->nall) {
        ump_log_error("%s: count %zu overflows", fn, a->count);
        return -EINVAL;
    }
    size_t s = a->count * esz;
    struct coll_buf b[2 * COLL_MAX_RANKS];
    int nb = 0;
    *inplace_p = false;
    for (int r = 0; r < c->n; r++) {
        int k = coll_buffers(c, a, r, s, &b[nb]);
        for (int i = nb; i < nb + k; i++) {
            int rc = check_one(c, a, &b[i], esz);
            if (rc)
                return rc;
        }
        if (k == 2 && in_place(c, a, r, s))
            *inplace_p = true;
        nb += k;
    }
    for (int i = 0; i < nb; i++)
        for (int j = i + 1; j < nb; j++) {
            bool own = b[i].rank == b[j].rank && in_place(c, a, b[i].rank, s);
            if (!overlap(&b[i], &b[j]) || own)
                continue;
            ump_log_error("%s: rank %d's %s buffer %p overlaps rank %d's %s "
                          "buffer %p", fn, b[j].rank,
                          b[j].recv ? "recv" : "send", (const void *)b[j].p,
                          b[i].rank, b[i].recv ? "recv" : "send",
                          (const void *)b[i].p);
            return -EINVAL;
        }
    /* Last: a buffer in an allocation lost with a failed device is -EIO,
     * not a caller's mistake. */
    for (int i = 0; i < nb; i++) {
        int rc = pool_check_lost(c->pool, b[i].p, b[i].len, fn);
        if (rc)
            return rc;
    }
    return 0;
}

int coll_check_call(ump_comm_t *c, const struct coll_args *a, bool *inplace)
{
    int rc = coll_check(c, a, inplace);
    if (rc || !a->count) /* count 0: nothing to move, nothing waited for */
        return rc;
    for (int r = 0; a->streams && r < c->n; r++) {
        const ump_stream_t *st = a->streams;
        if (!st[r]) {
            ump_log_error("%s: streams[%d] is NULL (a stream of rank %d's "
                          "device, or streams NULL)", a->fn, r, r);
            return -EINVAL;
        }
        if ((rc = pool_stream_check(c->pool, st[r], a->fn)))
            return rc;
        /* Each rank's share waits for the others': two on one stream (one
         * worker) would wait for each other forever. */
        int d = pool_stream_device(c->pool, st[r]);
        if (d != c->dev[r]) {
            ump_log_error("%s: streams[%d] is a stream of device %d, not of "
                          "rank %d's device %d", a->fn, r, d, r, c->dev[r]);
            return -EINVAL;
        }
    }
    return 0;
}
