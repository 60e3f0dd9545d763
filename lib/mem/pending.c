#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "mem/pending.h"

int pending_queue(ump_pool_t *pool, void *meta, uint32_t idx, bool is_slab,
                  ump_stream_t stream, struct pending **done_p)
{
    int rc = 0;
    struct pending *p = pool->spare_pending;
    if (p) {
        pool->spare_pending = p->next;
    } else {
        p = calloc(1, sizeof(*p));
        if (!p)
            return -ENOMEM;
        /* an event is made once per struct and kept with it */
        rc = pool->be->event_create(pool->bctx, &p->event);
        if (rc) {
            free(p);
            return rc;
        }
    }
    rc = pool->be->event_record(pool->bctx, p->event, stream);
    if (rc) {
        pending_recycle(pool, p);
        return rc;
    }
    p->meta = meta;
    p->idx = idx;
    p->is_slab = is_slab;
    p->next = NULL;
    if (pool->be->event_query(pool->bctx, p->event) == 0) {
        *done_p = p; /* the stream is idle: no need to wait */
    } else {
        *done_p = NULL;
        p->next = pool->pending;
        pool->pending = p;
    }
    return 0;
}

struct pending *pending_collect(ump_pool_t *pool, bool wait)
{
    struct pending *done = NULL, **tail = &done; /* in queue order */
    struct pending **pp = &pool->pending;
    while (*pp) {
        struct pending *p = *pp;
        int rc = wait ? pool->be->event_sync(pool->bctx, p->event)
                      : pool->be->event_query(pool->bctx, p->event);
        if (rc == -EAGAIN) {
            pp = &p->next;
            continue;
        }
        if (rc) /* the stream failed: its work is over either way */
            ump_log_warn("deferred free: event failed: %s", ump_strerror(rc));
        *pp = p->next;
        p->next = NULL;
        *tail = p;
        tail = &p->next;
    }
    return done;
}

void pending_recycle(ump_pool_t *pool, struct pending *p)
{
    p->next = pool->spare_pending;
    pool->spare_pending = p;
}

void pending_fini(ump_pool_t *pool)
{
    while (pool->spare_pending) {
        struct pending *p = pool->spare_pending;
        pool->spare_pending = p->next;
        if (p->event)
            pool->be->event_destroy(pool->bctx, p->event);
        free(p);
    }
}

void pending_forget(ump_pool_t *pool)
{
    struct pending *lists[] = {pool->pending, pool->spare_pending};
    for (size_t i = 0; i < UMP_ARRAY_SIZE(lists); i++)
        while (lists[i]) {
            struct pending *p = lists[i];
            lists[i] = p->next;
            free(p);
        }
    pool->pending = pool->spare_pending = NULL;
}
