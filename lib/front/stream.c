/*
 * Streams and copies of the public API: checks, then the backend.
 *
 * A stream is checked against the set of live streams (front/stream.h)
 * before the backend sees it, by value: a stream of another pool, one
 * already destroyed, or any other pointer is -EINVAL with one log line and
 * is never dereferenced. The set is an open-addressing hash table keyed by
 * (pool id, handle), linear probing with backward-shift deletion, under one
 * mutex held only for the lookup: stream calls are not the allocation hot
 * path, and a pool has few streams.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "mem/pool.h"
#include "front/check.h"
#include "front/stream.h"

struct live_stream {
    uint64_t pool_id; /* 0: free slot (pool ids start at 1) */
    void *handle;
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct live_stream *live; /* live_cap slots, a power of two */
static size_t live_cap, live_n;

/* In a forked child the set belongs to pools that refuse all work there
 * (pool_check): start empty, with a fresh lock in case a thread of the
 * parent held it at the fork. Called by the one set of fork handlers
 * (registry.c). */
void pool_streams_after_fork(void)
{
    free(live);
    live = NULL;
    live_cap = live_n = 0;
    pthread_mutex_init(&live_lock, NULL);
}

static size_t live_hash(uint64_t pool_id, const void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle ^ (pool_id * 0x9e3779b97f4a7c15ull);

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

/* The slot of (pool_id, handle), or of the free slot that ends its probe.
 * live_lock held, live_cap > 0. */
static size_t live_slot(uint64_t pool_id, const void *handle)
{
    size_t mask = live_cap - 1, i = live_hash(pool_id, handle) & mask;

    while (live[i].pool_id &&
           (live[i].pool_id != pool_id || live[i].handle != handle))
        i = (i + 1) & mask;
    return i;
}

static bool live_has(uint64_t pool_id, const void *handle)
{
    return live_cap && live[live_slot(pool_id, handle)].pool_id;
}

/* Adds an entry not in the set; grows it to keep it at most half full.
 * -ENOMEM (not logged) when it cannot grow. live_lock held. */
static int live_add(uint64_t pool_id, void *handle)
{
    if ((live_n + 1) * 2 > live_cap) {
        size_t cap = live_cap ? live_cap * 2 : 64;
        struct live_stream *old = live, *bigger = calloc(cap, sizeof(*bigger));
        size_t old_cap = live_cap;

        if (!bigger)
            return -ENOMEM;
        live = bigger;
        live_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].pool_id)
                live[live_slot(old[i].pool_id, old[i].handle)] = old[i];
        free(old);
    }
    size_t i = live_slot(pool_id, handle);
    live[i].pool_id = pool_id;
    live[i].handle = handle;
    live_n++;
    return 0;
}

/* Removes the entry in slot i, shifting back the ones whose probe passed
 * through it. live_lock held. */
static void live_remove_at(size_t i)
{
    size_t mask = live_cap - 1, j = i;

    live[i].pool_id = 0;
    live_n--;
    for (;;) {
        j = (j + 1) & mask;
        if (!live[j].pool_id)
            return;
        size_t home = live_hash(live[j].pool_id, live[j].handle) & mask;
        /* j's entry may move to the hole at i when its home is not in
         * (i, j], cyclically. */
        if ((j > i && (home <= i || home > j)) ||
            (j < i && home <= i && home > j)) {
            live[i] = live[j];
            live[j].pool_id = 0;
            i = j;
        }
    }
}

/* Takes (pool_id, handle) out of the set: true when it was there. */
static bool live_take(uint64_t pool_id, const void *handle)
{
    bool found = false;

    pthread_mutex_lock(&live_lock);
    if (live_cap) {
        size_t i = live_slot(pool_id, handle);
        if (live[i].pool_id) {
            live_remove_at(i);
            found = true;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

static int not_a_stream(ump_stream_t stream, const char *fn)
{
    ump_log_error("%s: stream %p was not created by this pool, or was "
                  "destroyed", fn, stream);
    return -EINVAL;
}

int pool_stream_check(ump_pool_t *pool, ump_stream_t stream, const char *fn)
{
    bool found;

    if (!stream)
        return 0;
    pthread_mutex_lock(&live_lock);
    found = live_has(pool->id, stream);
    pthread_mutex_unlock(&live_lock);
    return found ? 0 : not_a_stream(stream, fn);
}

void pool_streams_forget(ump_pool_t *pool)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < live_cap;) {
        /* A removal may shift a later entry into slot i: look again. */
        if (live[i].pool_id == pool->id)
            live_remove_at(i);
        else
            i++;
    }
    pthread_mutex_unlock(&live_lock);
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
    rc = pool->be->stream_create(pool->bctx, device, &s);
    if (rc)
        return rc;
    pthread_mutex_lock(&live_lock);
    rc = live_add(pool->id, s);
    pthread_mutex_unlock(&live_lock);
    if (rc) {
        pool->be->stream_destroy(pool->bctx, s);
        ump_log_error("ump_stream_create: out of host memory");
        return rc;
    }
    *stream_p = s;
    return 0;
}

UMP_EXPORT int ump_stream_destroy(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = need(pool, stream != NULL, "ump_stream_destroy",
                  "the default stream cannot be destroyed");
    if (rc)
        return rc;
    /* Taken out first: a second destroy, even a racing one, finds nothing. */
    if (!live_take(pool->id, stream))
        return not_a_stream(stream, "ump_stream_destroy");
    rc = pool->be->stream_destroy(pool->bctx, stream);
    if (rc) {
        /* Still alive (say, destroyed from a host function): keep it. The
         * slot it left is free again, so this cannot need memory. */
        pthread_mutex_lock(&live_lock);
        live_add(pool->id, stream);
        pthread_mutex_unlock(&live_lock);
    }
    return rc;
}

UMP_EXPORT int ump_stream_synchronize(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = need_stream(pool, true, "ump_stream_synchronize", NULL, stream);
    return rc ? rc : pool->be->stream_sync(pool->bctx, stream);
}

UMP_EXPORT int ump_memcpy_async(ump_pool_t *pool, void *dst, const void *src,
                                size_t size, ump_stream_t stream)
{
    int rc = need_stream(pool, (dst && src) || !size, "ump_memcpy_async",
                         "NULL pointer", stream);
    return rc ? rc
              : pool->be->memcpy_async(pool->bctx, dst, src, size, stream);
}

UMP_EXPORT int ump_memset_async(ump_pool_t *pool, void *dst, int value,
                                size_t size, ump_stream_t stream)
{
    int rc = need_stream(pool, dst || !size, "ump_memset_async",
                         "NULL pointer", stream);
    return rc ? rc
              : pool->be->memset_async(pool->bctx, dst, value, size, stream);
}

UMP_EXPORT int ump_launch_host_func(ump_pool_t *pool, ump_stream_t stream,
                                    void (*fn)(void *arg), void *arg)
{
    int rc = need_stream(pool, fn != NULL, "ump_launch_host_func",
                         "fn is NULL", stream);
    return rc ? rc : pool->be->host_func(pool->bctx, stream, fn, arg);
}
