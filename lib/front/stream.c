/*
 * Streams and copies of the public API: checks, then the backend.
 *
 * A stream is checked against the set of live streams (front/stream.h)
 * before the backend sees it, by value: a stream of another pool, one
 * already destroyed, or any other pointer is -EINVAL with one log line and
 * is never dereferenced. The set is the pool's own open-addressing hash
 * table of handles, under a lock of its own held only for the lookup, so
 * that stream calls of different pools never meet and none waits for the
 * pool lock.
 *
 * The set holds the streams ump_stream_create made and the native streams
 * ump_stream_wrap registered (a framework's: PyTorch's side streams). A
 * wrapped stream is the native handle itself, so that the backends need
 * nothing more than a check of it at wrap time (backend stream_adopt):
 * every call that takes a stream then works on it unchanged. Destroying a
 * wrapped stream only takes it out of the set.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "mem/pool.h"
#include "front/check.h"
#include "front/failure.h"
#include "front/stream.h"

/* The pool's set (pool->streams: stream_cap slots, a power of two, NULL
 * marks a free one; pool->stream_info beside it), under
 * pool->streams_lock. */

static size_t live_hash(const void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

/* The slot of handle, or of the free slot that ends its probe. Lock held,
 * stream_cap > 0. */
static size_t live_slot(const ump_pool_t *pool, const void *handle)
{
    size_t mask = pool->stream_cap - 1, i = live_hash(handle) & mask;

    while (pool->streams[i] && pool->streams[i] != handle)
        i = (i + 1) & mask;
    return i;
}

static bool live_has(const ump_pool_t *pool, const void *handle)
{
    return pool->stream_cap && pool->streams[live_slot(pool, handle)];
}

/* Adds a handle not in the set; grows it to keep it at most half full.
 * -ENOMEM (not logged) when it cannot grow. Lock held. */
static int live_add(ump_pool_t *pool, void *handle, struct live_stream info)
{
    if ((pool->stream_n + 1) * 2 > pool->stream_cap) {
        size_t old_cap = pool->stream_cap;
        size_t cap = old_cap ? old_cap * 2 : 16;
        void **old = pool->streams, **bigger = calloc(cap, sizeof(*bigger));
        struct live_stream *old_info = pool->stream_info;
        struct live_stream *infos = calloc(cap, sizeof(*infos));

        if (!bigger || !infos) {
            free(bigger);
            free(infos);
            return -ENOMEM;
        }
        pool->streams = bigger;
        pool->stream_info = infos;
        pool->stream_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i]) {
                size_t j = live_slot(pool, old[i]);
                pool->streams[j] = old[i];
                pool->stream_info[j] = old_info[i];
            }
        free(old);
        free(old_info);
    }
    size_t i = live_slot(pool, handle);
    pool->streams[i] = handle;
    pool->stream_info[i] = info;
    pool->stream_n++;
    return 0;
}

/* Removes the handle in slot i, shifting back the ones whose probe passed
 * through it (linear probing with backward-shift deletion). Lock held. */
static void live_remove_at(ump_pool_t *pool, size_t i)
{
    size_t mask = pool->stream_cap - 1, j = i;
    void **slot = pool->streams;

    slot[i] = NULL;
    pool->stream_n--;
    for (;;) {
        j = (j + 1) & mask;
        if (!slot[j])
            return;
        size_t home = live_hash(slot[j]) & mask;
        /* j's entry may move to the hole at i when its home is not in
         * (i, j], cyclically. */
        if ((j > i && (home <= i || home > j)) ||
            (j < i && home <= i && home > j)) {
            slot[i] = slot[j];
            pool->stream_info[i] = pool->stream_info[j];
            slot[j] = NULL;
            i = j;
        }
    }
}

/* Takes handle out of the set: true when it was there, with what the set
 * knew of it in *info_p. */
static bool live_take(ump_pool_t *pool, const void *handle,
                      struct live_stream *info_p)
{
    bool found = false;

    pthread_mutex_lock(&pool->streams_lock);
    if (pool->stream_cap) {
        size_t i = live_slot(pool, handle);
        if (pool->streams[i]) {
            *info_p = pool->stream_info[i];
            live_remove_at(pool, i);
            found = true;
        }
    }
    pthread_mutex_unlock(&pool->streams_lock);
    return found;
}

static int not_a_stream(ump_stream_t stream, const char *fn)
{
    ump_log_error("%s: stream %p was not created by this pool (nor wrapped "
                  "by ump_stream_wrap), or was destroyed", fn, stream);
    return -EINVAL;
}

int pool_stream_check(ump_pool_t *pool, ump_stream_t stream, const char *fn)
{
    bool found;

    if (!stream)
        return 0;
    pthread_mutex_lock(&pool->streams_lock);
    found = live_has(pool, stream);
    pthread_mutex_unlock(&pool->streams_lock);
    return found ? 0 : not_a_stream(stream, fn);
}

static int need(ump_pool_t *pool, bool ok, const char *fn, const char *what)
{
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (!ok) {
        ump_log_error("%s: %s", fn, what);
        return -EINVAL;
    }
    return 0;
}

/* need, then the stream. */
static int need_stream(ump_pool_t *pool, bool ok, const char *fn,
                       const char *what, ump_stream_t stream)
{
    int rc = need(pool, ok, fn, what);
    return rc ? rc : pool_stream_check(pool, stream, fn);
}

UMP_EXPORT int ump_stream_create(ump_pool_t *pool, int device,
                                 ump_stream_t *stream_p)
{
    void *s = NULL;
    int rc = need(pool, stream_p != NULL, "ump_stream_create",
                  "stream_p is NULL");
    if (rc)
        return rc;
    if (device < 0 || device >= pool->ndev) {
        ump_log_error("ump_stream_create: device %d out of range", device);
        return -EINVAL;
    }
    rc = pool_check_device(pool, device, "ump_stream_create");
    if (rc)
        return rc;
    rc = pool_io_result(pool, pool->be->stream_create(pool->bctx, device, &s));
    if (rc)
        return rc;
    pthread_mutex_lock(&pool->streams_lock);
    rc = live_add(pool, s, (struct live_stream){device, false});
    pthread_mutex_unlock(&pool->streams_lock);
    if (rc) {
        pool->be->stream_destroy(pool->bctx, s);
        ump_log_error("ump_stream_create: out of host memory");
        return rc;
    }
    *stream_p = s;
    return 0;
}

UMP_EXPORT int ump_stream_wrap(ump_pool_t *pool, int device, void *native,
                               ump_stream_t *stream_p)
{
    static const char fn[] = "ump_stream_wrap";
    int rc = need(pool, stream_p != NULL, fn, "stream_p is NULL");
    if (rc)
        return rc;
    if (device < 0 || device >= pool->ndev) {
        ump_log_error("%s: device %d out of range", fn, device);
        return -EINVAL;
    }
    if (!native) {
        ump_log_error("%s: native is NULL, the default stream (usable as it "
                      "is: nothing to wrap)", fn);
        return -EINVAL;
    }
    rc = pool_check_device(pool, device, fn);
    if (rc)
        return rc;
    /* Known already (made here, or wrapped): the caller may use it as it
     * is, and the registration is not the caller's to undo. An answer,
     * not a fault: told at debug level only. */
    pthread_mutex_lock(&pool->streams_lock);
    bool known = live_has(pool, native);
    pthread_mutex_unlock(&pool->streams_lock);
    if (known) {
        ump_log_debug("%s: stream %p is a stream of this pool already", fn,
                      native);
        return -EEXIST;
    }
    if (!pool->be->stream_adopt) {
        ump_log_error("%s: the %s backend has no native streams: %p is not "
                      "one of its streams", fn, pool->be->name, native);
        return -ENOTSUP;
    }
    rc = pool_io_result(pool, pool->be->stream_adopt(pool->bctx, device,
                                                     native));
    if (rc)
        return rc;
    pthread_mutex_lock(&pool->streams_lock);
    known = live_has(pool, native); /* a racing wrap came first */
    if (!known)
        rc = live_add(pool, native, (struct live_stream){device, true});
    pthread_mutex_unlock(&pool->streams_lock);
    if (known) {
        ump_log_debug("%s: stream %p is a stream of this pool already", fn,
                      native);
        return -EEXIST;
    }
    if (rc) {
        ump_log_error("%s: out of host memory", fn);
        return rc;
    }
    *stream_p = native;
    return 0;
}

UMP_EXPORT int ump_stream_destroy(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = need(pool, stream != NULL, "ump_stream_destroy",
                  "the default stream cannot be destroyed");
    if (rc)
        return rc;
    /* Taken out first: a second destroy, even a racing one, finds nothing. */
    struct live_stream info;
    if (!live_take(pool, stream, &info))
        return not_a_stream(stream, "ump_stream_destroy");
    if (info.wrapped) /* the caller's: the pool only forgets it */
        return 0;
    rc = pool->be->stream_destroy(pool->bctx, stream);
    if (rc) {
        /* Still alive (say, destroyed from a host function): keep it. The
         * slot it left is free again, so this cannot need memory. */
        pthread_mutex_lock(&pool->streams_lock);
        live_add(pool, stream, info);
        pthread_mutex_unlock(&pool->streams_lock);
    }
    return rc;
}

int pool_stream_device(ump_pool_t *pool, ump_stream_t stream)
{
    int dev = -1;
    pthread_mutex_lock(&pool->streams_lock);
    if (stream && pool->stream_cap) {
        size_t i = live_slot(pool, stream);
        if (pool->streams[i])
            dev = pool->stream_info[i].device;
    }
    pthread_mutex_unlock(&pool->streams_lock);
    return dev;
}

UMP_EXPORT int ump_stream_synchronize(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = need_stream(pool, true, "ump_stream_synchronize", NULL, stream);
    return rc ? rc
              : pool_io_result(pool, pool->be->stream_sync(pool->bctx, stream));
}

UMP_EXPORT int ump_memcpy_async(ump_pool_t *pool, void *dst, const void *src,
                                size_t size, ump_stream_t stream)
{
    int rc = need_stream(pool, (dst && src) || !size, "ump_memcpy_async",
                         "NULL pointer", stream);
    if (!rc)
        rc = pool_check_lost(pool, dst, size, "ump_memcpy_async");
    if (!rc)
        rc = pool_check_lost(pool, src, size, "ump_memcpy_async");
    return rc ? rc
              : pool_io_result(pool, pool->be->memcpy_async(pool->bctx, dst,
                                                            src, size,
                                                            stream));
}

UMP_EXPORT int ump_memset_async(ump_pool_t *pool, void *dst, int value,
                                size_t size, ump_stream_t stream)
{
    int rc = need_stream(pool, dst || !size, "ump_memset_async",
                         "NULL pointer", stream);
    if (!rc)
        rc = pool_check_lost(pool, dst, size, "ump_memset_async");
    return rc ? rc
              : pool_io_result(pool, pool->be->memset_async(pool->bctx, dst,
                                                            value, size,
                                                            stream));
}

UMP_EXPORT int ump_launch_host_func(ump_pool_t *pool, ump_stream_t stream,
                                    void (*fn)(void *arg), void *arg)
{
    int rc = need_stream(pool, fn != NULL, "ump_launch_host_func",
                         "fn is NULL", stream);
    return rc ? rc
              : pool_io_result(pool,
                               pool->be->host_func(pool->bctx, stream, fn, arg));
}
