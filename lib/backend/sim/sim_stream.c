/*
 * Sim streams and events.
 *
 * A stream is a FIFO of operations (copy, memset, host function) run one
 * after another by the stream's own worker thread, so work on one stream is
 * ordered and work on different streams overlaps, as on a GPU.
 *
 * Stream NULL, the default stream, is synchronous on sim: the operation runs
 * in the calling thread before the call returns, stream_sync(NULL) returns at
 * once and an event recorded on it is complete. Unlike CUDA's legacy default
 * stream it does not wait for work queued on other streams: code that needs
 * that order must synchronise explicitly, which is also correct on cuda.
 *
 * A stream numbers its operations: "queued" counts those enqueued, "finished"
 * those done. Recording an event notes the stream and its current "queued";
 * the event is complete once "finished" reaches that number. An event holds
 * a reference on the stream, so it stays valid after stream_destroy.
 *
 * A stream handle is looked up by value in its context's registry before it
 * is touched (stream_get): a destroyed stream, another context's stream or
 * any other pointer is -EINVAL and never dereferenced. Destroy takes the
 * stream out of the registry first, so a second destroy finds nothing.
 *
 * Strictness, to catch bugs above without a GPU:
 *  - a host function must not call the backend (CUDA does not permit driver
 *    calls there): such calls fail with -EPERM;
 *  - a copy or memset is checked when queued: bytes inside a reservation
 *    must be mapped with access, and copy ranges must not overlap.
 *
 * With sim_driver_costs:h200-timed (sim_timed.c), a copy or memset ends
 * no sooner than it would on an H200, counted from when it was queued and
 * when the worker (or, on the default stream, the caller) starts it, and a
 * stream sync no sooner than an empty one would.
 *
 * A stream waits for an event (stream_wait_event) as cuStreamWaitEvent
 * does: the work queued after the wait runs once the work the event's last
 * record covered has finished, without the caller waiting; the worker
 * thread blocks on the other stream's progress.
 *
 * Every wait polls a while before it sleeps (util/poll.h), as the CUDA
 * driver's syncs spin and a GPU's engines start queued work at once: the
 * worker for its next operation, a sync for the count it waits on, a
 * stream for the one it waits on. A worker running an operation is
 * counted with the pollers, so that waits poll only while the process has
 * a core to spare for them.
 *
 * Lock order: registry lock alone; event lock, then stream lock.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/internal.h"
#include "util/log.h"
#include "util/poll.h"
#include "backend/sim/sim.h"

#define EVENT_MAGIC 0x53494d45u  /* "SIME" */

enum sim_op_kind { OP_COPY, OP_SET, OP_FUNC, OP_WAIT };

struct sim_op {
    enum sim_op_kind kind;
    void *ctx;
    void *dst;
    const void *src;
    size_t size;
    int value;
    void (*fn)(void *);
    void *arg;
    uint64_t queued; /* h200-timed: when it was queued (ump_clock_ns) */
    /* OP_WAIT: the stream an event was recorded on (a reference the op
     * holds) and the count of its operations the event waits for */
    struct sim_stream *waited;
    uint64_t target;
    struct sim_op *next;
};

struct sim_stream {
    pthread_mutex_t lock;
    pthread_cond_t work; /* an operation was queued, or stop was set */
    pthread_cond_t done; /* an operation finished */
    pthread_t thread;
    int device;
    struct sim_op *head, *tail;
    /* written under lock, atomic for poll_count's reads without it */
    _Atomic uint64_t queued, finished;
    bool stop;   /* the worker exits once the queue is empty */
    bool dying;  /* destroy has begun: no new work */
    /* the registry's, plus one per event recorded on it and one per call
     * using it (stream_get) */
    atomic_int refs;
    struct ump_list_node link; /* in the context's registry */
};

struct sim_event {
    unsigned magic;
    pthread_mutex_t lock;
    struct sim_stream *stream; /* NULL: nothing pending */
    uint64_t target;           /* complete once stream->finished reaches it */
    int device; /* of the stream last recorded on; -1: none (default) */
    struct ump_list_node link; /* in the context's registry */
};

static _Thread_local bool in_host_func;

/* A wait on a stream polls (util/poll.h) before it sleeps on the
 * condition: the counter it waits on moves within microseconds on a busy
 * stream, as a GPU's does, and a sleeper's wake-up costs far more here. */
struct count_wait {
    const _Atomic uint64_t *ctr;
    uint64_t val;
};

static bool count_reached(const void *arg)
{
    const struct count_wait *w = arg;
    return atomic_load_explicit(w->ctr, memory_order_acquire) >= w->val;
}

static bool count_moved(const void *arg)
{
    const struct count_wait *w = arg;
    return atomic_load_explicit(w->ctr, memory_order_acquire) != w->val;
}

/* Polls until *ctr reaches val (or, moved, differs from it), at most
 * UMP_POLL_NS: the caller then takes the lock and waits as before. */
static void poll_count(const _Atomic uint64_t *ctr, uint64_t val, bool moved)
{
    struct count_wait w = {ctr, val};
    ump_poll(moved ? count_moved : count_reached, &w, UMP_POLL_NS);
}

int sim_check_caller(const char *op)
{
    if (!in_host_func)
        return 0;
    ump_log_error("sim: %s called from a host function (cuda does not permit "
                  "driver calls there)", op);
    return -EPERM;
}

/*
 * Copies and sets reach pool memory through the device's view of it (the
 * windows of sim_view_of), not through the pool's addresses. The pool maps
 * a chunk afresh at every move between tiers, and the first touch of a
 * fresh mapping faults in each 4 KiB page table entry: a cost a GPU's copy
 * engine never pays (cuMemMap fills its page tables), and one that would
 * cut the copy to a fifth of memcpy here. The windows stay populated.
 */
static void copy_run(void *ctx, char *dst, const char *src, size_t size)
{
    while (size) {
        size_t n = size;
        char *d = sim_view_of(ctx, dst, n, &n);
        const char *s = sim_view_of(ctx, src, n, &n);

        sim_bytes_hold(ctx);
        memcpy(d ? d : dst, s ? s : src, n);
        sim_bytes_drop(ctx);
        dst += n;
        src += n;
        size -= n;
    }
}

static void set_run(void *ctx, char *dst, int value, size_t size)
{
    while (size) {
        size_t n = size;
        char *d = sim_view_of(ctx, dst, n, &n);

        sim_bytes_hold(ctx);
        memset(d ? d : dst, value, n);
        sim_bytes_drop(ctx);
        dst += n;
        size -= n;
    }
}

/* Runs op; with h200-timed, a copy or memset then waits for its end on
 * an H200, its links reserved before the CPU's work starts, so that this
 * work counts towards the modeled time and other streams see the links
 * taken from the start. */
static void op_run(const struct sim_op *op)
{
    uint64_t end;

    switch (op->kind) {
    case OP_COPY:
        end = op->queued ? sim_copy_end(op->ctx, op->dst, op->src, op->size,
                                        op->queued, ump_clock_ns())
                         : 0;
        copy_run(op->ctx, op->dst, op->src, op->size);
        if (end)
            ump_clock_wait_until(end);
        break;
    case OP_SET:
        end = op->queued ? sim_set_end(op->ctx, op->dst, op->size, op->queued,
                                       ump_clock_ns())
                         : 0;
        set_run(op->ctx, op->dst, op->value, op->size);
        if (end)
            ump_clock_wait_until(end);
        break;
    case OP_FUNC:
        in_host_func = true;
        op->fn(op->arg);
        in_host_func = false;
        break;
    case OP_WAIT:
        poll_count(&op->waited->finished, op->target, false);
        pthread_mutex_lock(&op->waited->lock);
        while (op->waited->finished < op->target)
            pthread_cond_wait(&op->waited->done, &op->waited->lock);
        pthread_mutex_unlock(&op->waited->lock);
        break;
    }
}

/* Frees a stream once nobody refers to it; its worker has been joined. */
static void stream_unref(struct sim_stream *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static void *stream_main(void *arg)
{
    struct sim_stream *s = arg;
    struct sim_op *op;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (!s->head && !s->stop) {
            uint64_t seen = s->queued;
            pthread_mutex_unlock(&s->lock);
            poll_count(&s->queued, seen, true);
            pthread_mutex_lock(&s->lock);
        }
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->work, &s->lock);
        op = s->head;
        if (!op)
            break;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        ump_poll_busy(true);
        op_run(op);
        ump_poll_busy(false);
        if (op->waited)
            stream_unref(op->waited);
        free(op);
        pthread_mutex_lock(&s->lock);
        s->finished++;
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The live stream of ss whose handle is stream, with a reference the
 * caller drops with stream_unref; NULL (logged) when there is none. The
 * handle is compared, never dereferenced, so a freed one is harmless. */
static struct sim_stream *stream_get(struct sim_streams *ss, void *stream,
                                     const char *op)
{
    struct sim_stream *s = NULL;

    pthread_mutex_lock(&ss->lock);
    ump_list_for_each(it, &ss->streams, struct sim_stream, link)
        if (it == stream) {
            s = it;
            atomic_fetch_add(&s->refs, 1);
            break;
        }
    pthread_mutex_unlock(&ss->lock);
    if (!s)
        ump_log_error("sim: %s: %p is not a live stream of this context", op,
                      stream);
    return s;
}

static struct sim_event *event_of(void *event, const char *op)
{
    struct sim_event *ev = event;

    if (!ev || ev->magic != EVENT_MAGIC) {
        ump_log_error("sim: %s: %p is not an event", op, event);
        return NULL;
    }
    return ev;
}

int sim_streams_init(struct sim_streams *ss, int ndev)
{
    int err = pthread_mutex_init(&ss->lock, NULL);

    if (err) {
        ump_log_error("sim: pthread_mutex_init: %s", strerror(err));
        return -err;
    }
    ss->streams = (struct ump_list){NULL, NULL};
    ss->events = (struct ump_list){NULL, NULL};
    ss->ndev = ndev;
    atomic_init(&ss->n_funcs, 0);
    atomic_init(&ss->n_waits, 0);
    atomic_init(&ss->n_syncs, 0);
    return 0;
}

/* Stops the worker after the queued work and joins it; the stream is out of
 * the registry or about to leave it. */
static void stream_stop(struct sim_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
}

static void event_free(struct sim_event *ev)
{
    ev->magic = 0;
    if (ev->stream)
        stream_unref(ev->stream);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}

void sim_streams_fini(struct sim_streams *ss)
{
    struct ump_list_node *n;

    /* One at a time, without the registry lock while joining. */
    for (;;) {
        pthread_mutex_lock(&ss->lock);
        n = ump_list_pop_front(&ss->streams);
        pthread_mutex_unlock(&ss->lock);
        if (!n)
            break;
        struct sim_stream *s = ump_container_of(n, struct sim_stream, link);
        pthread_mutex_lock(&s->lock);
        s->dying = true;
        pthread_mutex_unlock(&s->lock);
        stream_stop(s);
        stream_unref(s);
    }
    while ((n = ump_list_pop_front(&ss->events)))
        event_free(ump_container_of(n, struct sim_event, link));
    pthread_mutex_destroy(&ss->lock);
}

/* In a forked child nothing may be locked or destroyed: free memory only. */
void sim_streams_forget(struct sim_streams *ss)
{
    struct sim_op *op, *opn;

    ump_list_for_each_safe(ev, evn, &ss->events, struct sim_event, link) {
        if (ev->stream && atomic_fetch_sub(&ev->stream->refs, 1) == 1)
            free(ev->stream);
        free(ev);
    }
    ump_list_for_each_safe(s, sn, &ss->streams, struct sim_stream, link) {
        for (op = s->head; op; op = opn) {
            opn = op->next;
            /* A queued wait's reference; the last one frees a stream
             * this loop has passed already. */
            if (op->waited && atomic_fetch_sub(&op->waited->refs, 1) == 1)
                free(op->waited);
            free(op);
        }
        if (atomic_fetch_sub(&s->refs, 1) == 1)
            free(s);
    }
    ss->streams = (struct ump_list){NULL, NULL};
    ss->events = (struct ump_list){NULL, NULL};
}

int sim_stream_create(void *ctx, int device, void **stream_p)
{
    struct sim_streams *ss = sim_streams_of(ctx);
    struct sim_stream *s;
    char name[16];
    int err;

    err = sim_check_caller("stream_create");
    if (err)
        return err;
    if (device < 0 || device >= ss->ndev) {
        ump_log_error("sim: stream_create: no device %d (have %d)", device,
                      ss->ndev);
        return -EINVAL;
    }
    err = sim_device_op(ctx, device);
    if (err)
        return err;
    s = calloc(1, sizeof(*s));
    if (!s) {
        ump_log_error("sim: out of host memory for a stream");
        return -ENOMEM;
    }
    s->device = device;
    atomic_init(&s->refs, 1);
    err = pthread_mutex_init(&s->lock, NULL);
    if (err)
        goto err_free;
    err = pthread_cond_init(&s->work, NULL);
    if (err)
        goto err_mutex;
    err = pthread_cond_init(&s->done, NULL);
    if (err)
        goto err_work;
    err = pthread_create(&s->thread, NULL, stream_main, s);
    if (err)
        goto err_done;
    snprintf(name, sizeof(name), "umpool-sim-%d", device % 100);
    pthread_setname_np(s->thread, name);

    pthread_mutex_lock(&ss->lock);
    ump_list_push_front(&ss->streams, &s->link);
    pthread_mutex_unlock(&ss->lock);
    *stream_p = s;
    return 0;

err_done:
    pthread_cond_destroy(&s->done);
err_work:
    pthread_cond_destroy(&s->work);
err_mutex:
    pthread_mutex_destroy(&s->lock);
err_free:
    free(s);
    ump_log_error("sim: cannot create a stream: %s", strerror(err));
    return -err;
}

int sim_stream_destroy(void *ctx, void *stream)
{
    struct sim_streams *ss = sim_streams_of(ctx);
    struct sim_stream *s;
    int err;

    err = sim_check_caller("stream_destroy");
    if (err)
        return err;
    if (!stream) {
        ump_log_error("sim: stream_destroy: the default stream cannot be "
                      "destroyed");
        return -EINVAL;
    }
    /* Out of the registry first, found by value: from here on no call can
     * find it, and a second destroy fails without touching it. */
    s = NULL;
    pthread_mutex_lock(&ss->lock);
    ump_list_for_each(it, &ss->streams, struct sim_stream, link)
        if (it == stream) {
            s = it;
            ump_list_remove(&ss->streams, &s->link);
            break;
        }
    pthread_mutex_unlock(&ss->lock);
    if (!s) {
        ump_log_error("sim: stream_destroy: %p is not a live stream of this "
                      "context", stream);
        return -EINVAL;
    }
    /* Calls that found it before still hold references: they see dying. */
    pthread_mutex_lock(&s->lock);
    s->dying = true;
    pthread_mutex_unlock(&s->lock);
    stream_stop(s);
    stream_unref(s);
    return 0;
}

int sim_stream_sync(void *ctx, void *stream)
{
    uint64_t t0 = sim_timed(ctx) ? ump_clock_ns() : 0;
    struct sim_stream *s;
    uint64_t target;
    int err;

    err = sim_check_caller("stream_sync");
    if (err)
        return err;
    /* The default stream has nothing pending: the cost of an empty sync. */
    if (!stream) {
        atomic_fetch_add_explicit(&sim_streams_of(ctx)->n_syncs, 1,
                                  memory_order_relaxed);
        if (t0)
            ump_clock_wait_until(sim_sync_end(ctx, t0));
        return 0;
    }
    s = stream_get(sim_streams_of(ctx), stream, "stream_sync");
    if (!s)
        return -EINVAL;
    atomic_fetch_add_explicit(&sim_streams_of(ctx)->n_syncs, 1,
                              memory_order_relaxed);
    /* A failed device's sync fails, but only once its queued work has
     * run: the caller frees or remaps what the copies touch as soon as
     * this returns, and the stream's thread must not reach it after
     * that (a real driver's work dies with the context instead). The
     * sync is the device's operation after that work: a failure it
     * brings poisons the memory once the copies are done with it. */
    target = s->queued;
    poll_count(&s->finished, target, false);
    pthread_mutex_lock(&s->lock);
    while (s->finished < target)
        pthread_cond_wait(&s->done, &s->lock);
    pthread_mutex_unlock(&s->lock);
    err = sim_device_op(ctx, s->device);
    stream_unref(s);
    if (err)
        return err;
    if (t0)
        ump_clock_wait_until(sim_sync_end(ctx, t0));
    return 0;
}

/* Runs op now on the default stream (s NULL), else queues a copy of it on
 * s, which the caller holds a reference on. */
static int submit(struct sim_stream *s, const struct sim_op *tmpl,
                  const char *name)
{
    struct sim_op *op;

    if (!s) {
        op_run(tmpl);
        return 0;
    }
    op = malloc(sizeof(*op));
    if (!op) {
        ump_log_error("sim: %s: out of host memory", name);
        return -ENOMEM;
    }
    *op = *tmpl;
    op->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->dying) {
        pthread_mutex_unlock(&s->lock);
        free(op);
        ump_log_error("sim: %s: stream %p is being destroyed", name,
                      (void *)s);
        return -EINVAL;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int sim_memcpy_async(void *ctx, void *dst, const void *src, size_t size,
                     void *stream)
{
    struct sim_op op = {.kind = OP_COPY, .ctx = ctx, .dst = dst, .src = src,
                        .size = size,
                        .queued = sim_timed(ctx) ? ump_clock_ns() : 0};
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    struct sim_stream *st = NULL;
    int err;

    err = sim_check_caller("memcpy_async");
    if (err)
        return err;
    if (stream) {
        st = stream_get(sim_streams_of(ctx), stream, "memcpy_async");
        if (!st)
            return -EINVAL;
    }
    if (!size)
        goto out;
    err = -EINVAL;
    if (!dst || !src) {
        ump_log_error("sim: memcpy_async: NULL %s", dst ? "source" : "dest");
        goto out;
    }
    err = sim_check_range(ctx, dst, size);
    if (!err)
        err = sim_check_range(ctx, src, size);
    if (err)
        goto out;
    if (d < s + size && s < d + size) {
        ump_log_error("sim: memcpy_async: [%p, +%zu) and [%p, +%zu) overlap",
                      dst, size, src, size);
        err = -EINVAL;
        goto out;
    }
    err = st ? sim_device_op(ctx, st->device) : 0;
    if (!err)
        err = sim_range_op(ctx, dst, size);
    if (!err)
        err = sim_range_op(ctx, src, size);
    if (!err)
        err = submit(st, &op, "memcpy_async");
out:
    if (st)
        stream_unref(st);
    return err;
}

int sim_memset_async(void *ctx, void *dst, int value, size_t size,
                     void *stream)
{
    struct sim_op op = {.kind = OP_SET, .ctx = ctx, .dst = dst, .value = value,
                        .size = size,
                        .queued = sim_timed(ctx) ? ump_clock_ns() : 0};
    struct sim_stream *st = NULL;
    int err;

    err = sim_check_caller("memset_async");
    if (err)
        return err;
    if (stream) {
        st = stream_get(sim_streams_of(ctx), stream, "memset_async");
        if (!st)
            return -EINVAL;
    }
    if (!size)
        goto out;
    if (!dst) {
        ump_log_error("sim: memset_async: NULL destination");
        err = -EINVAL;
        goto out;
    }
    err = sim_check_range(ctx, dst, size);
    if (!err && st)
        err = sim_device_op(ctx, st->device);
    if (!err)
        err = sim_range_op(ctx, dst, size);
    if (!err)
        err = submit(st, &op, "memset_async");
out:
    if (st)
        stream_unref(st);
    return err;
}

int sim_host_func(void *ctx, void *stream, void (*fn)(void *), void *arg)
{
    struct sim_op op = {.kind = OP_FUNC, .fn = fn, .arg = arg};
    struct sim_stream *st = NULL;
    int err;

    err = sim_check_caller("host_func");
    if (err)
        return err;
    if (!fn) {
        ump_log_error("sim: host_func: NULL function");
        return -EINVAL;
    }
    if (stream) {
        st = stream_get(sim_streams_of(ctx), stream, "host_func");
        if (!st)
            return -EINVAL;
    }
    err = st ? sim_device_op(ctx, st->device) : 0;
    if (!err)
        err = submit(st, &op, "host_func");
    if (!err)
        atomic_fetch_add_explicit(&sim_streams_of(ctx)->n_funcs, 1,
                                  memory_order_relaxed);
    if (st)
        stream_unref(st);
    return err;
}

int sim_event_create(void *ctx, void **event_p)
{
    struct sim_streams *ss = sim_streams_of(ctx);
    struct sim_event *ev;
    int err;

    err = sim_check_caller("event_create");
    if (err)
        return err;
    ev = calloc(1, sizeof(*ev));
    if (!ev) {
        ump_log_error("sim: out of host memory for an event");
        return -ENOMEM;
    }
    err = pthread_mutex_init(&ev->lock, NULL);
    if (err) {
        ump_log_error("sim: pthread_mutex_init: %s", strerror(err));
        free(ev);
        return -err;
    }
    ev->magic = EVENT_MAGIC;
    ev->device = -1;
    pthread_mutex_lock(&ss->lock);
    ump_list_push_front(&ss->events, &ev->link);
    pthread_mutex_unlock(&ss->lock);
    *event_p = ev;
    return 0;
}

int sim_event_destroy(void *ctx, void *event)
{
    struct sim_streams *ss = sim_streams_of(ctx);
    struct sim_event *ev;
    int err;

    err = sim_check_caller("event_destroy");
    if (err)
        return err;
    ev = event_of(event, "event_destroy");
    if (!ev)
        return -EINVAL;
    pthread_mutex_lock(&ss->lock);
    ump_list_remove(&ss->events, &ev->link);
    pthread_mutex_unlock(&ss->lock);
    event_free(ev);
    return 0;
}

int sim_event_record(void *ctx, void *event, void *stream)
{
    struct sim_stream *s = NULL, *old;
    struct sim_event *ev;
    uint64_t target = 0;
    bool pending;
    int err, device = -1;

    err = sim_check_caller("event_record");
    if (err)
        return err;
    ev = event_of(event, "event_record");
    if (!ev)
        return -EINVAL;
    if (stream) {
        s = stream_get(sim_streams_of(ctx), stream, "event_record");
        if (!s)
            return -EINVAL;
        pthread_mutex_lock(&s->lock);
        if (s->dying) {
            pthread_mutex_unlock(&s->lock);
            stream_unref(s);
            ump_log_error("sim: event_record: stream %p is being destroyed",
                          stream);
            return -EINVAL;
        }
        target = s->queued;
        pending = s->finished < target;
        device = s->device;
        pthread_mutex_unlock(&s->lock);
        if (!pending) {
            stream_unref(s); /* nothing pending: complete already */
            s = NULL;
        } /* else the reference stream_get took is the event's */
    }
    pthread_mutex_lock(&ev->lock);
    old = ev->stream;
    ev->stream = s;
    ev->target = target;
    ev->device = device;
    pthread_mutex_unlock(&ev->lock);
    if (old)
        stream_unref(old);
    return 0;
}

int sim_event_query(void *ctx, void *event)
{
    struct sim_stream *s, *drop = NULL;
    struct sim_event *ev;
    int err;

    (void)ctx;
    err = sim_check_caller("event_query");
    if (err)
        return err;
    ev = event_of(event, "event_query");
    if (!ev)
        return -EINVAL;
    pthread_mutex_lock(&ev->lock);
    s = ev->stream;
    if (s) {
        pthread_mutex_lock(&s->lock);
        err = s->finished >= ev->target ? 0 : -EAGAIN;
        pthread_mutex_unlock(&s->lock);
        if (!err) {
            /* Done: let go of the stream early. */
            ev->stream = NULL;
            drop = s;
        }
    }
    pthread_mutex_unlock(&ev->lock);
    if (drop)
        stream_unref(drop);
    return err;
}

int sim_event_sync(void *ctx, void *event)
{
    struct sim_stream *s;
    struct sim_event *ev;
    uint64_t target;
    int err, device;

    err = sim_check_caller("event_sync");
    if (err)
        return err;
    ev = event_of(event, "event_sync");
    if (!ev)
        return -EINVAL;
    pthread_mutex_lock(&ev->lock);
    s = ev->stream;
    target = ev->target;
    device = ev->device;
    if (s)
        atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&ev->lock);
    if (s) {
        poll_count(&s->finished, target, false);
        pthread_mutex_lock(&s->lock);
        while (s->finished < target)
            pthread_cond_wait(&s->done, &s->lock);
        pthread_mutex_unlock(&s->lock);
        stream_unref(s);
    }
    /* A synchronisation with the device's stream, as stream_sync's (after
     * the work, for the same reason): a failed device's is -EIO, as the
     * driver's sticky error is for cuEventSynchronize. */
    return sim_device_op(ctx, device);
}

int sim_stream_wait_event(void *ctx, void *stream, void *event)
{
    struct sim_stream *st, *w;
    struct sim_event *ev;
    uint64_t target;
    int err;

    err = sim_check_caller("stream_wait_event");
    if (err)
        return err;
    ev = event_of(event, "stream_wait_event");
    if (!ev)
        return -EINVAL;
    /* The default stream runs its work in the caller: it waits now. */
    if (!stream)
        return sim_event_sync(ctx, event);
    st = stream_get(sim_streams_of(ctx), stream, "stream_wait_event");
    if (!st)
        return -EINVAL;
    /* The event as it is now: a later record does not change this wait. */
    pthread_mutex_lock(&ev->lock);
    w = ev->stream;
    target = ev->target;
    if (w)
        atomic_fetch_add(&w->refs, 1);
    pthread_mutex_unlock(&ev->lock);
    err = sim_device_op(ctx, st->device);
    if (!err && w && w != st) { /* on st itself, the order is the stream's */
        struct sim_op op = {.kind = OP_WAIT, .waited = w, .target = target};
        err = submit(st, &op, "stream_wait_event");
        if (!err)
            w = NULL; /* the op's reference now */
    }
    if (!err)
        atomic_fetch_add_explicit(&sim_streams_of(ctx)->n_waits, 1,
                                  memory_order_relaxed);
    if (w)
        stream_unref(w);
    stream_unref(st);
    return err;
}

void sim_stream_counts(void *ctx, struct sim_stream_counts *out)
{
    struct sim_streams *ss = sim_streams_of(ctx);
    out->funcs = atomic_load_explicit(&ss->n_funcs, memory_order_relaxed);
    out->waits = atomic_load_explicit(&ss->n_waits, memory_order_relaxed);
    out->syncs = atomic_load_explicit(&ss->n_syncs, memory_order_relaxed);
}
