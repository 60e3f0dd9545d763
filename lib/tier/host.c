/*
 * The host tier: pinned host pieces and the reserve (contract in host.h).
 *
 * Accounting: host_created counts every pinned byte, free or in use, plus
 * the budget of pins under way (host_pinning), so that nobody counts on
 * that room while the lock is dropped; host_free_bytes counts the free
 * list. A piece is freed by whoever holds it last: the free list
 * (host_trim), or a segment's backing (backing_put gives it back here).
 * Pool lock held throughout, except inside host_pin's pinning.
 *
 * The window. On an H200 the driver charges per handle and, for host
 * memory, per CPU page: giving the CPU access to 1 GiB of pinned memory
 * costs about 35 ms and tearing that mapping down 22 ms, three times the
 * copy of the same bytes (lib/topo/drivercost.c). So every piece is mapped
 * once, when it is pinned (already a cost of hundreds of milliseconds per
 * GiB, paid ahead of need by the reserve), at addresses of its own for
 * every device and the CPU; moves copy to and from there, and the disk
 * reads and writes there. At the segment's own address a piece is mapped
 * for the devices only, unless config host_cpu_access asks for the CPU
 * too (backing.c). A CUDA handle may be mapped at several addresses; it
 * can only be mapped whole, so pieces stay whole handles.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "mem/chunks.h"
#include "tier/host.h"
#include "util/internal.h"

/* Reserves the window on the first pin. The pieces alive add up to at
 * most host_limit; the window is twice that, so that pieces of mixed
 * sizes freed and pinned again in any order mostly find a range. That is
 * not a guarantee (free ranges can be scattered in small holes): a pin
 * that finds no range for its size makes a smaller piece (host_pin), and
 * host_get makes up the rest with more of them. */
static int win_get(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (o->win_on)
        return 0;
    size_t gran = pool->chunk_size;
    size_t size = ((o->host_limit + gran - 1) & ~(gran - 1)) * 2;
    void *va;
    int rc = pool->be->reserve(pool->bctx, size, gran, &va);
    if (rc) {
        ump_log_error("cannot reserve %zu bytes of addresses for the host "
                      "tier: %s", size, ump_strerror(rc));
        return rc;
    }
    rc = vas_init(&o->win, va, size, gran);
    if (rc) {
        pool->be->unreserve(pool->bctx, va, size);
        return rc;
    }
    o->win_on = true;
    return 0;
}

void host_win_fini(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o->win_on)
        return;
    int rc = pool->be->unreserve(pool->bctx, (void *)o->win.base, o->win.size);
    if (rc)
        ump_log_error("cannot unreserve the host tier's addresses: %s",
                      ump_strerror(rc));
    vas_fini(&o->win);
    o->win_on = false;
}

char *host_addr(const ump_pool_t *pool, const struct hpiece *p)
{
    return vas_addr(&pool->off->win, p->win);
}

void host_cpu_addrs(const ump_pool_t *pool, const struct hpiece *list,
                    size_t from, size_t m, void **out)
{
    const struct hpiece *p = list;
    for (size_t i = from; i < from + m; i++) {
        while (p && i >= p->off + p->n)
            p = p->next;
        if (!p || i < p->off) { /* pieces are in offset order */
            for (p = list; p && !(i >= p->off && i < p->off + p->n);)
                p = p->next;
        }
        out[i - from] = host_addr(pool, p) + tier_bytes(pool, i - p->off);
    }
}

void host_release(ump_pool_t *pool, struct hpiece *p)
{
    struct offload *o = pool->off;
    size_t bytes = tier_bytes(pool, p->n);
    int rc = pool->be->unmap(pool->bctx, host_addr(pool, p), bytes);
    if (rc) { /* the window keeps it: neither is reused */
        ump_log_error("cannot unmap a pinned host chunk from the host "
                      "tier's window: %s", ump_strerror(rc));
        free(p);
        return;
    }
    vas_give(&o->win, p->win, p->n);
    rc = pool->be->chunk_release(pool->bctx, p->handle);
    if (rc) { /* still held: it keeps counting against host_limit */
        ump_log_error("cannot release a pinned host chunk: %s",
                      ump_strerror(rc));
    } else {
        o->host_created -= tier_bytes(pool, p->n);
    }
    free(p);
}

int host_pin(ump_pool_t *pool, int node, size_t n, struct hpiece **p_p)
{
    struct offload *o = pool->off;
    size_t room = (o->host_limit - o->host_created) >> pool->chunk_shift;
    if (n > pool->max_chunk_n)
        n = pool->max_chunk_n;
    if (n > room)
        n = room;
    if (!n)
        return -ENOSPC;
    if (o->host_fault && --o->host_fault == 0) {
        ump_log_error("cannot pin host memory: injected fault");
        return -ENOMEM;
    }
    int devs[UMP_MAX_DEVICES];
    int nd = chunks_accessors(pool, place_host(pool), devs); /* working */
    int rc = win_get(pool);
    if (rc)
        return rc;
    n = ump_pow2_floor(n);
    struct hpiece *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    while (vas_take(&o->win, n, &p->win)) { /* fragmented: smaller */
        if (n == 1) {
            ump_log_error("no addresses left in the host tier's window for "
                          "%zu bytes", tier_bytes(pool, n));
            free(p);
            return -ENOMEM;
        }
        n /= 2;
    }
    /* Pinning runs at a few GB/s (22 ms for 64 MiB on an H200), and giving
     * the CPU access costs a tenth of that again: not with the pool lock.
     * The budget is taken first, so that nobody else counts on it
     * meanwhile; host_pinning says it is coming, so that whoever needs it
     * waits for it rather than finding the tier full. */
    size_t n0 = n, budget = tier_bytes(pool, n);
    o->host_created += budget;
    o->host_pinning += budget;
    pthread_mutex_unlock(&pool->lock);
    for (;; n /= 2) {
        rc = pool->be->host_chunk_create(pool->bctx, node, tier_bytes(pool, n),
                                         &p->handle);
        if (rc != -ENOMEM || n == 1)
            break;
    }
    bool made = rc == 0, mapped = false;
    char *va = vas_addr(&o->win, p->win);
    if (!rc)
        mapped = (rc = pool->be->map(pool->bctx, va, tier_bytes(pool, n),
                                     p->handle)) == 0;
    if (!rc)
        rc = pool->be->set_access_host(pool->bctx, va, tier_bytes(pool, n),
                                       devs, nd);
    if (rc && mapped && pool->be->unmap(pool->bctx, va, tier_bytes(pool, n))) {
        ump_log_error("cannot unmap a pinned host chunk after a failure: "
                      "%zu bytes lost", tier_bytes(pool, n));
        made = false; /* still mapped: it cannot be released */
    }
    if (rc && made)
        pool->be->chunk_release(pool->bctx, p->handle);
    pthread_mutex_lock(&pool->lock);
    o->host_created -= budget;
    o->host_pinning -= budget;
    pthread_cond_broadcast(&o->moved); /* waiters for room: look again */
    if (rc) {
        if (made || !mapped) /* else the window's range stays taken */
            vas_give(&o->win, p->win, n0);
        free(p);
        if (rc == -ENOMEM)
            ump_log_warn("cannot pin %zu bytes of host memory on node %d",
                         tier_bytes(pool, n), node);
        return rc;
    }
    if (n < n0) /* pinned less than asked: the rest of the range is free */
        vas_give(&o->win, p->win + n, n0 - n);
    p->node = node;
    p->n = n;
    o->host_created += tier_bytes(pool, n);
    *p_p = p;
    return 0;
}

/* Takes the free piece of at most max_n granules that is largest (nearest
 * node first), or NULL. */
static struct hpiece *take_free(struct offload *o, int node, size_t max_n)
{
    struct hpiece **best = NULL;
    for (struct hpiece **pp = &o->host_free; *pp; pp = &(*pp)->next) {
        struct hpiece *p = *pp;
        if (p->n > max_n)
            continue;
        if (!best || p->n > (*best)->n ||
            (p->n == (*best)->n && p->node == node && (*best)->node != node))
            best = pp;
    }
    if (!best)
        return NULL;
    struct hpiece *p = *best;
    *best = p->next;
    p->next = NULL;
    return p;
}

void host_put(ump_pool_t *pool, struct hpiece *list)
{
    struct offload *o = pool->off;
    while (list) {
        struct hpiece *p = list;
        list = p->next;
        o->host_free_bytes += tier_bytes(pool, p->n);
        p->next = o->host_free;
        o->host_free = p;
    }
}

int host_get(ump_pool_t *pool, int node, size_t n, struct hpiece **list_p)
{
    struct offload *o = pool->off;
    struct hpiece *list = NULL, **tail = &list;
    size_t off = 0;
    int rc = 0;
    o->host_hint = n; /* the reserve's piece size (host_refill) */
    while (off < n) {
        struct hpiece *p = take_free(o, node, n - off);
        if (p) {
            o->host_free_bytes -= tier_bytes(pool, p->n);
        } else {
            rc = host_pin(pool, node, n - off, &p);
            if (rc == -ENOSPC && o->host_free) { /* too big ones: make room */
                struct hpiece *big = o->host_free;
                o->host_free = big->next;
                o->host_free_bytes -= tier_bytes(pool, big->n);
                host_release(pool, big);
                continue;
            }
            if (rc)
                break;
        }
        p->off = off;
        off += p->n;
        *tail = p;
        tail = &p->next;
    }
    if (rc) {
        host_put(pool, list);
        return rc;
    }
    *list_p = list;
    return 0;
}

size_t host_room(const ump_pool_t *pool)
{
    const struct offload *o = pool->off;
    return o->host_limit - o->host_created + o->host_free_bytes;
}

/*
 * The reserve is pinned in pieces of the size the tier was last asked for
 * (at most the reserve). A piece stays one handle, mapped whole, so a
 * move takes only free pieces no bigger than its segment: a reserve
 * pinned as one 64 MiB piece served no move of 32 MiB segments, which
 * pinned their own, about 0.4 s of the driver's time each (scaled 32
 * times on the timed sim) in the middle of a loop, while the reserve sat
 * unused. The pieces of moves up under way count as free: they are at
 * their moves' end, and a pin made meanwhile holds the driver (which
 * serializes its calls) while those moves wait for their own calls.
 */
void host_refill(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o->host_in_use && !o->stopping &&
           o->host_free_bytes + o->host_returning < o->host_reserve) {
        struct hpiece *p;
        size_t n = (o->host_reserve - o->host_free_bytes -
                    o->host_returning) >> pool->chunk_shift;
        if (o->host_hint && n > o->host_hint)
            n = o->host_hint;
        if (!n || host_pin(pool, 0, n, &p))
            break;
        host_put(pool, p);
    }
}

void host_trim(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o && o->host_free) {
        struct hpiece *p = o->host_free;
        o->host_free = p->next;
        o->host_free_bytes -= tier_bytes(pool, p->n);
        host_release(pool, p);
    }
}

void host_forget(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o->host_free) {
        struct hpiece *p = o->host_free;
        o->host_free = p->next;
        free(p);
    }
    if (o->win_on) /* the bookkeeping only: the parent's driver holds it */
        vas_fini(&o->win);
    o->win_on = false;
}
