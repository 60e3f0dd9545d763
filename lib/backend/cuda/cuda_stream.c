/*
 * Streams and events of the cuda backend.
 *
 * Contract:
 *  - Streams are the driver's CUstreams, created non-blocking in their
 *    device's primary context; the pool keeps a list of them so that one it
 *    did not create is refused, and close destroys what the caller left.
 *    A stream the application made (ump_stream_wrap: PyTorch's, CuPy's)
 *    is adopted after a check of its context, and is in no list: nothing
 *    here destroys it, and every other call treats it as its own.
 *    A virtual device's (cuda_virtual_devices) is its GPU's context: its
 *    streams are the GPU's streams, and nothing below tells them apart
 *    (events, copies, host functions work per context, unchanged).
 *  - NULL (and CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is the default
 *    stream of the calling thread's current context, device 0's primary
 *    context when there is none: what a cuda.h user means by it.
 *  - Every call makes the stream's context current and puts the caller's
 *    back, because the driver wants the stream's context current and the
 *    application's own must not change behind its back.
 *  - An event is created lazily in the context of the stream it is first
 *    recorded on, and re-created when recorded on a stream of another
 *    context: the driver refuses an event and a stream of different
 *    contexts, and the backend's event_create does not know the stream.
 *  - The two lists are guarded by the context's lock; the uses of one event
 *    are serialised by the caller (the pool holds its lock).
 */
#include "config.h"

#ifdef HAVE_CUDA_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/internal.h"
#include "util/log.h"
#include "backend/cuda/cuda_backend.h"

struct custream_node {
    CUstream s;
    struct custream_node *next;
};

/* The CUevent exists once recorded, in the context of its stream. */
struct custream_event {
    CUevent ev;
    CUcontext ctx;
    struct ump_list_node link; /* in c->events */
};

/* NULL and the special handles CU_STREAM_LEGACY and CU_STREAM_PER_THREAD
 * (what cudaStreamLegacy and cudaStreamPerThread are) name a default stream
 * of the calling thread's context rather than a stream object. */
static bool default_stream(CUstream stream)
{
    return (uintptr_t)stream <= (uintptr_t)CU_STREAM_PER_THREAD;
}

int custream_enter(struct cuda_ctx *c, CUstream stream, CUcontext *sctx_p,
                   CUcontext *saved_p)
{
    const struct cudrv_api *api = &c->api;
    CUcontext sctx = NULL;
    CUresult res;

    if (!default_stream(stream))
        res = api->cuStreamGetCtx(stream, &sctx);
    else
        res = api->cuCtxGetCurrent(&sctx);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(api, res, UMP_LOG_ERROR, "%s of stream %p",
                          default_stream(stream) ? "cuCtxGetCurrent"
                                                 : "cuStreamGetCtx",
                          (void *)stream);
    if (!sctx)
        sctx = c->pctx[CUDA_ANY_DEVICE];
    *sctx_p = sctx;
    return cudrv_ctx_enter(api, sctx, saved_p);
}

/* --- streams ----------------------------------------------------------- */

int custream_create(void *ctx, int device, void **stream_p)
{
    struct cuda_ctx *c = ctx;
    struct custream_node *node;
    CUstream s = NULL;
    CUcontext saved, dctx;
    CUresult res;
    int err;

    if (!cuda_device_ok(c, device, "stream_create"))
        return -EINVAL;
    dctx = c->pctx[cuda_phys(c, device)];
    node = malloc(sizeof(*node));
    if (!node) {
        ump_log_error("cuda: out of host memory for a stream");
        return -ENOMEM;
    }
    err = cudrv_ctx_enter(&c->api, dctx, &saved);
    if (err)
        goto err_free;
    res = c->api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    cudrv_ctx_leave(&c->api, dctx, saved);
    if (res != CUDA_SUCCESS) {
        err = cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                         "cuStreamCreate on device %d", device);
        goto err_free;
    }
    node->s = s;
    pthread_mutex_lock(&c->lock);
    node->next = c->streams;
    c->streams = node;
    pthread_mutex_unlock(&c->lock);
    *stream_p = s;
    return 0;

err_free:
    free(node);
    return err;
}

int custream_adopt(void *ctx, int device, void *native)
{
    struct cuda_ctx *c = ctx;
    CUstream s = native;
    CUcontext sctx = NULL;
    CUresult res;

    if (!cuda_device_ok(c, device, "stream_adopt"))
        return -EINVAL;
    /* The special handles name the calling thread's default stream, not a
     * stream object: the one CU_STREAM_PER_THREAD names changes with the
     * thread, and NULL (CU_STREAM_LEGACY) is the pool's default already. */
    if (default_stream(s)) {
        ump_log_error("cuda: stream_adopt: %p is a default stream's handle "
                      "(NULL, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD), not "
                      "a stream", native);
        return -EINVAL;
    }
    /* The driver checks the handle: no context is needed to ask, and the
     * caller's current one is not touched. */
    res = c->api.cuStreamGetCtx(s, &sctx);
    if (res != CUDA_SUCCESS) {
        cuda_note_result(c, cuda_phys(c, device), NULL, res);
        return cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                          "stream_adopt: cuStreamGetCtx of %p (not a live "
                          "stream?)", native);
    }
    if (sctx != c->pctx[cuda_phys(c, device)]) {
        ump_log_error("cuda: stream_adopt: stream %p is not a stream of "
                      "device %d's primary context (another device's, or a "
                      "context of its own)", native, device);
        return -EINVAL;
    }
    return 0;
}

int custream_destroy(void *ctx, void *stream)
{
    struct cuda_ctx *c = ctx;
    struct custream_node **pp, *node;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    /* Found in the list before the driver sees it: a stream of another
     * pool, or one destroyed already, is never dereferenced. */
    pthread_mutex_lock(&c->lock);
    for (pp = &c->streams; (node = *pp); pp = &node->next)
        if (node->s == stream)
            break;
    if (node)
        *pp = node->next;
    pthread_mutex_unlock(&c->lock);
    if (!node) {
        ump_log_error("cuda: stream_destroy: stream %p was not created by "
                      "this pool", stream);
        return -EINVAL;
    }
    free(node);
    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuStreamDestroy(stream);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuStreamDestroy of stream %p", stream);
}

int custream_sync(void *ctx, void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuStreamSynchronize(stream);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuStreamSynchronize of stream %p", stream);
}

int custream_memcpy_async(void *ctx, void *dst, const void *src, size_t size,
                          void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    if (!size)
        return 0;
    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    /* Unified addressing: the driver tells host from device pointers. */
    res = c->api.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                               (CUdeviceptr)(uintptr_t)src, size, stream);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuMemcpyAsync of %zu bytes from %p to %p",
                             size, src, dst);
}

int custream_memset_async(void *ctx, void *dst, int value, size_t size,
                          void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    if (!size)
        return 0;
    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst,
                                 (unsigned char)value, size, stream);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuMemsetD8Async of %zu bytes at %p", size, dst);
}

int custream_host_func(void *ctx, void *stream, void (*fn)(void *),
                       void *arg)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuLaunchHostFunc(stream, fn, arg);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuLaunchHostFunc on stream %p", stream);
}

/* --- events ------------------------------------------------------------ */

/* No driver call: the CUevent waits for the first record, which knows the
 * context. An event never recorded reads as complete, as in CUDA. */
int custream_event_create(void *ctx, void **event_p)
{
    struct cuda_ctx *c = ctx;
    struct custream_event *e = calloc(1, sizeof(*e));

    if (!e) {
        ump_log_error("cuda: out of host memory for an event");
        return -ENOMEM;
    }
    pthread_mutex_lock(&c->lock);
    ump_list_push_front(&c->events, &e->link);
    pthread_mutex_unlock(&c->lock);
    *event_p = e;
    return 0;
}

int custream_event_destroy(void *ctx, void *event)
{
    struct cuda_ctx *c = ctx;
    struct custream_event *e = event;
    CUresult res = CUDA_SUCCESS;

    if (!e)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    ump_list_remove(&c->events, &e->link);
    pthread_mutex_unlock(&c->lock);
    if (e->ev) {
        CUcontext saved;

        if (!cudrv_ctx_enter(&c->api, e->ctx, &saved)) {
            res = c->api.cuEventDestroy(e->ev);
            cudrv_ctx_leave(&c->api, e->ctx, saved);
        }
    }
    free(e);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(&c->api, res, UMP_LOG_ERROR, "cuEventDestroy");
    return 0;
}

/* The caller serialises the uses of one event (the pool holds its lock). */
int custream_event_record(void *ctx, void *event, void *stream)
{
    struct cuda_ctx *c = ctx;
    struct custream_event *e = event;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    if (e->ev && e->ctx != sctx) {
        res = c->api.cuEventDestroy(e->ev);
        if (res != CUDA_SUCCESS) /* its context may be gone: drop it */
            cudrv_fail(&c->api, res, UMP_LOG_DEBUG, "cuEventDestroy of an "
                       "event moving to another context");
        e->ev = NULL;
    }
    if (!e->ev) {
        res = c->api.cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING);
        if (res != CUDA_SUCCESS) {
            e->ev = NULL;
            err = cudrv_fail(&c->api, res, UMP_LOG_ERROR, "cuEventCreate");
            goto out;
        }
        e->ctx = sctx;
    }
    res = c->api.cuEventRecord(e->ev, stream);
    if (res != CUDA_SUCCESS)
        err = cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                         "cuEventRecord on stream %p", stream);
out:
    cudrv_ctx_leave(&c->api, sctx, saved);
    return err;
}

/* Asks whether an event's work is done (wait: waits for it). The driver
 * promises event calls from another device's context, not from none: the
 * event's own context is made current. */
static int event_wait(struct cuda_ctx *c, struct custream_event *e, bool wait)
{
    CUcontext saved;
    CUresult res;
    int err;

    if (!e->ev)
        return 0;
    err = cudrv_ctx_enter(&c->api, e->ctx, &saved);
    if (err)
        return err;
    res = wait ? c->api.cuEventSynchronize(e->ev) : c->api.cuEventQuery(e->ev);
    if (res == CUDA_ERROR_NOT_READY && !wait) {
        cudrv_ctx_leave(&c->api, e->ctx, saved);
        return -EAGAIN;
    }
    cuda_note_result(c, -1, e->ctx, res);
    return cudrv_leave_check(&c->api, e->ctx, saved, res, "%s",
                             wait ? "cuEventSynchronize" : "cuEventQuery");
}

int custream_event_query(void *ctx, void *event)
{
    return event_wait(ctx, event, false);
}

int custream_event_sync(void *ctx, void *event)
{
    return event_wait(ctx, event, true);
}

/* The event never recorded waits for nothing, as in CUDA. The driver lets
 * a stream wait for an event of another context (another GPU). */
int custream_wait_event(void *ctx, void *stream, void *event)
{
    struct cuda_ctx *c = ctx;
    struct custream_event *e = event;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    if (!e)
        return -EINVAL;
    if (!e->ev)
        return 0;
    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuStreamWaitEvent(stream, e->ev, 0);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuStreamWaitEvent of stream %p", stream);
}

/* --- close ------------------------------------------------------------- */

void custream_close(struct cuda_ctx *c)
{
    const struct cudrv_api *api = &c->api;
    CUresult res;

    /* Each in its own context. */
    ump_list_for_each(e, &c->events, struct custream_event, link) {
        CUcontext saved;

        if (!e->ev || cudrv_ctx_enter(api, e->ctx, &saved))
            continue;
        res = api->cuEventDestroy(e->ev);
        cudrv_ctx_leave(api, e->ctx, saved);
        if (res != CUDA_SUCCESS)
            cudrv_fail(api, res, UMP_LOG_DEBUG, "cuEventDestroy at close");
    }
    for (struct custream_node *s = c->streams; s; s = s->next) {
        CUcontext sctx, saved;

        if (custream_enter(c, s->s, &sctx, &saved))
            continue;
        res = api->cuStreamDestroy(s->s);
        cudrv_ctx_leave(api, sctx, saved);
        if (res != CUDA_SUCCESS)
            cudrv_fail(api, res, UMP_LOG_WARN, "cuStreamDestroy at close");
    }
}

void custream_free(struct cuda_ctx *c)
{
    while (c->streams) {
        struct custream_node *s = c->streams;
        c->streams = s->next;
        free(s);
    }
    struct ump_list_node *n;
    while ((n = ump_list_pop_front(&c->events)))
        free(ump_container_of(n, struct custream_event, link));
}

#endif /* HAVE_CUDA_H */
