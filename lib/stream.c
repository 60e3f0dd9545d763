/* Streams and copies of the public API: checks, then the backend. */
#include "config.h"

#include "pool.h"

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

UMP_EXPORT int ump_stream_create(ump_pool_t *pool, int device,
                                 ump_stream_t *stream_p)
{
    int rc = need(pool, stream_p != NULL, "ump_stream_create",
                  "stream_p is NULL");
    if (rc)
        return rc;
    if (device < 0 || device >= pool->ndev) {
        ump_log_error("ump_stream_create: device %d out of range", device);
        return -EINVAL;
    }
    return pool->be->stream_create(pool->bctx, device, stream_p);
}

UMP_EXPORT int ump_stream_destroy(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = need(pool, stream != NULL, "ump_stream_destroy",
                  "the default stream cannot be destroyed");
    return rc ? rc : pool->be->stream_destroy(pool->bctx, stream);
}

UMP_EXPORT int ump_stream_synchronize(ump_pool_t *pool, ump_stream_t stream)
{
    int rc = pool_check(pool, "ump_stream_synchronize");
    return rc ? rc : pool->be->stream_sync(pool->bctx, stream);
}

UMP_EXPORT int ump_memcpy_async(ump_pool_t *pool, void *dst, const void *src,
                                size_t size, ump_stream_t stream)
{
    int rc = need(pool, (dst && src) || !size, "ump_memcpy_async",
                  "NULL pointer");
    return rc ? rc
              : pool->be->memcpy_async(pool->bctx, dst, src, size, stream);
}

UMP_EXPORT int ump_memset_async(ump_pool_t *pool, void *dst, int value,
                                size_t size, ump_stream_t stream)
{
    int rc = need(pool, dst || !size, "ump_memset_async", "NULL pointer");
    return rc ? rc
              : pool->be->memset_async(pool->bctx, dst, value, size, stream);
}

UMP_EXPORT int ump_launch_host_func(ump_pool_t *pool, ump_stream_t stream,
                                    void (*fn)(void *arg), void *arg)
{
    int rc = need(pool, fn != NULL, "ump_launch_host_func", "fn is NULL");
    return rc ? rc : pool->be->host_func(pool->bctx, stream, fn, arg);
}
