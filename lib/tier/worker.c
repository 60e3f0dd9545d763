/*
 * Workers (contract in worker.h): two threads, so that a spill and a
 * restore run at the same time, as a GPU's copy engines do them (and as a
 * full-duplex link carries them). The eviction worker is woken as soon as
 * a move up maps its destination above the high watermark (move.c), so
 * the room the next prefetch needs is made while this one copies.
 *
 * A queued prefetch holds only a pointer: the allocation may be freed
 * before it runs, so it is looked up again, quietly, when it does.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tier/evict.h"
#include "tier/host.h"
#include "tier/move.h"
#include "tier/residency.h"
#include "tier/worker.h"
#include "util/internal.h"

struct res *worker_pf_res(ump_pool_t *pool, const struct prefetch *pf,
                          struct seg **s_p, size_t *g1_p)
{
    struct run *r;
    size_t g0;
    if (res_find_range(pool, NULL, pf->ptr, pf->size, &r, &g0, g1_p) ||
        !r->res)
        return NULL;
    *s_p = res_seg_at(r->res, g0);
    return r->res;
}

bool worker_pf_stale(const struct prefetch *pf, const struct seg *s)
{
    return s->t_acq > pf->t;
}

static void prefetch_one(ump_pool_t *pool, struct prefetch *pf)
{
    struct seg *s;
    size_t g1;
    /* The allocation may be gone by now: quietly nothing to do. */
    struct res *res = worker_pf_res(pool, pf, &s, &g1);
    /* Nothing comes up while the pool is suspended: dropped. */
    if (!res || atomic_load(&pool->suspended))
        return;
    res->busy++;
    for (; s < res->seg + res->nseg && s->g < g1 && !res->dead; s++) {
        /* Acquired since it was asked: the use it was for came (and may
         * have gone: bringing it up again now would be a restore nobody
         * asked for). A later request has its own entry. */
        if (worker_pf_stale(pf, s))
            continue;
        if (pf->device == UMP_LOC_HOST) {
            res_move_begin(pool, s);
            if (s->tier == UMP_TIER_NVME && !evict_host_room(pool, s->n))
                move_from_nvme(pool, s, UMP_TIER_HOST, -1);
            res_move_end(pool, s);
        } else {
            evict_up(pool, s, pf->device);
        }
        if (!res->dead)
            res_lru_touch(pool->off, s, true);
    }
    res_unbusy(pool, res);
}

/* The prefetch worker: the queue, in order. */
static void *prefetch_main(void *arg)
{
    ump_pool_t *pool = arg;
    struct offload *o = pool->off;
    pthread_mutex_lock(&pool->lock);
    while (!o->stopping) {
        struct prefetch *pf = o->pf_head;
        if (!pf || o->pf_hold) {
            pthread_cond_wait(&o->w[W_PREFETCH].wake, &pool->lock);
            continue;
        }
        o->pf_head = pf->next;
        if (!o->pf_head)
            o->pf_tail = NULL;
        /* Still queued for the eviction order until it is done: its
         * segments are brought up one by one, then used. */
        o->pf_cur = pf;
        prefetch_one(pool, pf);
        o->pf_cur = NULL;
        free(pf);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* The eviction worker: room for the queued prefetches, watermarks and
 * the host reserve, when woken and every WORKER_TICK_MS. */
static void *evict_main(void *arg)
{
    ump_pool_t *pool = arg;
    struct offload *o = pool->off;
    struct worker *k = &o->w[W_EVICT];
    pthread_mutex_lock(&pool->lock);
    while (!o->stopping) {
        k->kicked = false;
        evict_prefetch_room(pool);
        evict_watermarks(pool);
        host_refill(pool);
        if (o->stopping)
            break;
        if (k->kicked)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += WORKER_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&k->wake, &pool->lock, &ts);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

void worker_wake(ump_pool_t *pool, int w)
{
    static const char *const names[W_COUNT] = {"umpool-prefetch",
                                               "umpool-evict"};
    struct offload *o = pool->off;
    struct worker *k = &o->w[w];
    if (!k->on && !o->stopping) {
        int rc = pthread_create(&k->thread, NULL,
                                w == W_PREFETCH ? prefetch_main : evict_main,
                                pool);
        if (rc) {
            ump_log_warn("cannot start the offload thread %s: %s (no "
                         "watermark eviction or prefetch)", names[w],
                         strerror(rc));
            o->stopping = true; /* do not try again */
            return;
        }
        pthread_setname_np(k->thread, names[w]);
        k->on = true;
    }
    k->kicked = true;
    pthread_cond_signal(&k->wake);
}

int worker_queue_prefetch(ump_pool_t *pool, void *ptr, size_t size, int dest)
{
    struct offload *o = pool->off;
    struct prefetch *pf = malloc(sizeof(*pf));
    if (!pf)
        return -ENOMEM;
    *pf = (struct prefetch){ptr, size, dest, o->clock, NULL};
    if (o->pf_tail)
        o->pf_tail->next = pf;
    else
        o->pf_head = pf;
    o->pf_tail = pf;
    worker_wake(pool, W_PREFETCH);
    /* The room it will need is made now, while the prefetch worker still
     * copies the one before (evict_prefetch_room). */
    if (dest != UMP_LOC_HOST)
        worker_wake(pool, W_EVICT);
    return 0;
}

void worker_stop(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    bool on[W_COUNT];
    pthread_mutex_lock(&pool->lock);
    o->stopping = true;
    for (int w = 0; w < W_COUNT; w++) {
        pthread_cond_signal(&o->w[w].wake);
        on[w] = o->w[w].on;
        o->w[w].on = false;
    }
    pthread_mutex_unlock(&pool->lock);
    for (int w = 0; w < W_COUNT; w++)
        if (on[w])
            pthread_join(o->w[w].thread, NULL);
}

void worker_forget(struct offload *o)
{
    while (o->pf_head) {
        struct prefetch *pf = o->pf_head;
        o->pf_head = pf->next;
        free(pf);
    }
    o->pf_tail = NULL;
}
