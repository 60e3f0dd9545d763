/*
 * GPU timing of umpool-bench coll (coll_gpu.h). Events are created in the
 * context of the stream they are recorded on (the driver wants them in
 * one); waiting for an event of another context is allowed, which is how
 * the copy baseline starts every rank's copy at rank 0's event.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "coll_gpu.h"
#include "cuda_loader.h"

#ifdef BENCH_CUDA

#define MAX_RANKS 64

struct coll_gpu {
    ump_pool_t *pool;
    int n;
    struct bench_cu cu;
    ump_stream_t st[MAX_RANKS];
    CUcontext ctx[MAX_RANKS];      /* of st[r]: events live in it */
    CUevent start[MAX_RANKS], end[MAX_RANKS];
};

/* Makes rank r's stream's context current: the driver wants an event
 * recorded on a stream of its own context. */
static CUresult enter(struct coll_gpu *g, int r)
{
    return g->cu.ctx_set_current(g->ctx[r]);
}

struct coll_gpu *coll_gpu_open(ump_pool_t *pool, int n, char *why,
                               size_t len)
{
    if (n > MAX_RANKS) {
        snprintf(why, len, "more than %d ranks", MAX_RANKS);
        return NULL;
    }
    struct coll_gpu *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    g->pool = pool;
    if (bench_cu_load(&g->cu, BENCH_CU_EVENT, why, len)) {
        free(g);
        return NULL;
    }
    int rc = 0;
    for (int r = 0; r < n && !rc; r++, g->n++)
        rc = ump_stream_create(pool, r, &g->st[r]);
    CUresult cr = CUDA_SUCCESS;
    for (int r = 0; !rc && cr == CUDA_SUCCESS && r < n; r++) {
        cr = g->cu.stream_get_ctx((CUstream)g->st[r], &g->ctx[r]);
        if (cr == CUDA_SUCCESS)
            cr = enter(g, r);
        if (cr == CUDA_SUCCESS)
            cr = g->cu.event_create(&g->start[r], CU_EVENT_DEFAULT);
        if (cr == CUDA_SUCCESS)
            cr = g->cu.event_create(&g->end[r], CU_EVENT_DEFAULT);
    }
    if (rc || cr != CUDA_SUCCESS) {
        snprintf(why, len, "%s", rc ? ump_strerror(rc)
                                    : bench_cu_err(&g->cu, cr));
        coll_gpu_close(g);
        return NULL;
    }
    return g;
}

void coll_gpu_close(struct coll_gpu *g)
{
    if (!g)
        return;
    for (int r = 0; r < g->n; r++) {
        if (g->st[r])
            ump_stream_destroy(g->pool, g->st[r]);
        if (g->ctx[r])
            enter(g, r);
        if (g->start[r])
            g->cu.event_destroy(g->start[r]);
        if (g->end[r])
            g->cu.event_destroy(g->end[r]);
    }
    bench_cu_unload(&g->cu);
    free(g);
}

const ump_stream_t *coll_gpu_streams(const struct coll_gpu *g)
{
    return g->st;
}

static bool cu_ok(const struct coll_gpu *g, CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return true;
    fprintf(stderr, "umpool-bench: coll: %s: %s\n", what,
            bench_cu_err(&g->cu, r));
    return false;
}

double coll_gpu_time(struct coll_gpu *g,
                     int (*call)(void *arg, const ump_stream_t *st),
                     void *arg, int iters)
{
    if (call(arg, g->st))
        return NAN;
    if (!cu_ok(g, enter(g, 0), "cuCtxSetCurrent") ||
        !cu_ok(g, g->cu.event_record(g->start[0], (CUstream)g->st[0]),
               "cuEventRecord"))
        return NAN;
    for (int k = 0; k < iters; k++)
        if (call(arg, g->st))
            return NAN;
    float ms = 0;
    if (!cu_ok(g, enter(g, 0), "cuCtxSetCurrent") ||
        !cu_ok(g, g->cu.event_record(g->end[0], (CUstream)g->st[0]),
               "cuEventRecord") ||
        !cu_ok(g, g->cu.event_sync(g->end[0]), "cuEventSynchronize") ||
        !cu_ok(g, g->cu.event_elapsed(&ms, g->start[0], g->end[0]),
               "cuEventElapsedTime"))
        return NAN;
    return (double)ms * 1e3 / iters;
}

/* Each rank's copy is timed by a pair of events in its own context (the
 * driver times only events of one device), both after its stream has
 * waited for rank 0's start: the round's time is the longest of them. */
double coll_gpu_copy_us(struct coll_gpu *g, void *const *dst,
                        void *const *src, size_t bytes, int reps)
{
    double t[17];
    if (reps > 16)
        reps = 16;
    for (int k = 0; k <= reps; k++) {
        double worst = 0;
        if (!cu_ok(g, enter(g, 0), "cuCtxSetCurrent") ||
            !cu_ok(g, g->cu.event_record(g->end[0], (CUstream)g->st[0]),
                   "cuEventRecord"))
            return NAN;
        /* end[0] as the starting gun: every rank's stream waits for it
         * and records its start before any copy is queued (a wait takes
         * the event as recorded at the call) */
        CUevent go = g->end[0];
        for (int r = 0; r < g->n; r++) {
            CUstream s = (CUstream)g->st[r];
            if (!cu_ok(g, enter(g, r), "cuCtxSetCurrent") ||
                !cu_ok(g, g->cu.stream_wait_event(s, go, 0),
                       "cuStreamWaitEvent") ||
                !cu_ok(g, g->cu.event_record(g->start[r], s),
                       "cuEventRecord"))
                return NAN;
        }
        for (int r = 0; r < g->n; r++) {
            int rc = ump_memcpy_async(g->pool, dst[r], src[r], bytes,
                                      g->st[r]);
            if (rc) {
                fprintf(stderr, "umpool-bench: coll: copy baseline: %s\n",
                        ump_strerror(rc));
                return NAN;
            }
            if (!cu_ok(g, enter(g, r), "cuCtxSetCurrent") ||
                !cu_ok(g, g->cu.event_record(g->end[r], (CUstream)g->st[r]),
                       "cuEventRecord"))
                return NAN;
        }
        for (int r = 0; r < g->n; r++) {
            float ms = 0;
            if (!cu_ok(g, g->cu.event_sync(g->end[r]), "cuEventSynchronize") ||
                !cu_ok(g, g->cu.event_elapsed(&ms, g->start[r], g->end[r]),
                       "cuEventElapsedTime"))
                return NAN;
            if (ms > worst)
                worst = ms;
        }
        t[k] = worst * 1e3;
    }
    return median(t + 1, (size_t)reps);
}

#else /* built without cuda.h: no GPU timing */

struct coll_gpu {
    int unused;
};

struct coll_gpu *coll_gpu_open(ump_pool_t *pool, int n, char *why,
                               size_t len)
{
    (void)pool;
    (void)n;
    snprintf(why, len, "umpool-bench was built without CUDA headers");
    return NULL;
}

void coll_gpu_close(struct coll_gpu *g) { (void)g; }

const ump_stream_t *coll_gpu_streams(const struct coll_gpu *g)
{
    (void)g;
    return NULL;
}

double coll_gpu_time(struct coll_gpu *g,
                     int (*call)(void *arg, const ump_stream_t *st),
                     void *arg, int iters)
{
    (void)g;
    (void)call;
    (void)arg;
    (void)iters;
    return NAN;
}

double coll_gpu_copy_us(struct coll_gpu *g, void *const *dst,
                        void *const *src, size_t bytes, int reps)
{
    (void)g;
    (void)dst;
    (void)src;
    (void)bytes;
    (void)reps;
    return NAN;
}
#endif
