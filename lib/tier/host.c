/*
 * The host tier: pinned host pieces and the reserve (contract in host.h).
 *
 * Accounting: host_created counts every pinned byte, free or in use, plus
 * the budget of pins under way (host_pinning), so that nobody counts on
 * that room while the lock is dropped; host_free_bytes counts the free
 * list. A piece is freed by whoever holds it last: the free list
 * (host_trim), or a segment's backing (backing_put gives it back here).
 * Pool lock held throughout, except inside host_pin's pinning.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "tier/host.h"
#include "util/internal.h"

void host_release(ump_pool_t *pool, struct hpiece *p)
{
    struct offload *o = pool->off;
    int rc = pool->be->chunk_release(pool->bctx, p->handle);
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
    struct hpiece *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    /* Pinning runs at a few GB/s (22 ms for 64 MiB on an H200): not with
     * the pool lock. The budget is taken first, so that nobody else
     * counts on it meanwhile; host_pinning says it is coming, so that
     * whoever needs it waits for it rather than finding the tier full. */
    n = ump_pow2_floor(n);
    size_t budget = tier_bytes(pool, n);
    o->host_created += budget;
    o->host_pinning += budget;
    pthread_mutex_unlock(&pool->lock);
    int rc;
    for (;; n /= 2) {
        rc = pool->be->host_chunk_create(pool->bctx, node, tier_bytes(pool, n),
                                         &p->handle);
        if (rc != -ENOMEM || n == 1)
            break;
    }
    pthread_mutex_lock(&pool->lock);
    o->host_created -= budget;
    o->host_pinning -= budget;
    pthread_cond_broadcast(&o->moved); /* waiters for room: look again */
    if (rc) {
        free(p);
        if (rc == -ENOMEM)
            ump_log_warn("cannot pin %zu bytes of host memory on node %d",
                         tier_bytes(pool, n), node);
        return rc;
    }
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

void host_refill(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o->host_in_use && !o->stopping &&
           o->host_free_bytes < o->host_reserve) {
        struct hpiece *p;
        size_t n = (o->host_reserve - o->host_free_bytes) >> pool->chunk_shift;
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
}
