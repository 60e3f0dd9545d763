/*
 * The public tier calls: ump_acquire, ump_release, ump_prefetch, ump_evict,
 * ump_advise and ump_tier_stats. The front end checks what is its own to
 * check (the pool, a device or UMP_DEVICE_CURRENT, a tier, an advice, an
 * output pointer), each with one log line, and hands the rest to the tier
 * layer's offload_* calls (lib/tier/offload.h), which take the pool lock
 * and check the pointer against the pool's runs. The tier layer never
 * calls back up here: the current device is resolved before it is called.
 */
#include "config.h"

#include "front/check.h"
#include "front/failure.h"
#include "tier/offload.h"
#include "util/internal.h"
#include "front/stream.h"

/* device: an index or UMP_DEVICE_CURRENT (also UMP_LOC_HOST when host_ok),
 * resolved into *dev_p. */
static int read_device(ump_pool_t *pool, const char *fn, int device,
                       bool host_ok, int *dev_p)
{
    if (device == UMP_DEVICE_CURRENT) {
        int rc = ump_get_device(pool, dev_p);
        return rc ? rc : pool_check_device(pool, *dev_p, fn);
    }
    if (device == UMP_LOC_HOST && host_ok) {
        *dev_p = device;
        return 0;
    }
    if (device >= 0 && device < pool->ndev) {
        *dev_p = device;
        return pool_check_device(pool, device, fn);
    }
    ump_log_error("%s: device %d out of range (0..%d%s)", fn, device,
                  pool->ndev - 1, host_ok ? " or UMP_LOC_HOST" : "");
    return -EINVAL;
}

/* Memory cannot come up or move while the pool is suspended
 * (front/suspend.c): -EBUSY. */
static int awake(ump_pool_t *pool, const char *fn)
{
    if (!atomic_load(&pool->suspended))
        return 0;
    ump_log_error("%s: the pool is suspended (ump_pool_resume first)", fn);
    return -EBUSY;
}

UMP_EXPORT int ump_acquire(ump_pool_t *pool, void *ptr, size_t size,
                           int device, ump_stream_t stream)
{
    int rc = pool_check(pool, "ump_acquire");
    int dev;
    if (!rc)
        rc = awake(pool, "ump_acquire");
    if (!rc)
        rc = read_device(pool, "ump_acquire", device, false, &dev);
    if (!rc)
        rc = pool_stream_check(pool, stream, "ump_acquire");
    if (!rc)
        rc = pool_check_lost(pool, ptr, size ? size : 1, "ump_acquire");
    if (rc)
        return rc;
    (void)stream; /* the data is in place when this returns */
    return offload_acquire(pool, ptr, size, dev);
}

UMP_EXPORT int ump_release(ump_pool_t *pool, void *ptr, size_t size)
{
    int rc = pool_check(pool, "ump_release");
    if (rc)
        return rc;
    return offload_release(pool, ptr, size);
}

UMP_EXPORT int ump_prefetch(ump_pool_t *pool, void *ptr, size_t size,
                            int device, ump_stream_t stream)
{
    int rc = pool_check(pool, "ump_prefetch");
    int dev;
    if (!rc)
        rc = awake(pool, "ump_prefetch");
    if (!rc)
        rc = read_device(pool, "ump_prefetch", device, true, &dev);
    if (!rc)
        rc = pool_stream_check(pool, stream, "ump_prefetch");
    if (!rc)
        rc = pool_check_lost(pool, ptr, size ? size : 1, "ump_prefetch");
    if (rc)
        return rc;
    (void)stream; /* a hint: ump_acquire is where the data is waited for */
    return offload_prefetch(pool, ptr, size, dev);
}

UMP_EXPORT int ump_evict(ump_pool_t *pool, void *ptr, size_t size, int tier)
{
    int rc = pool_check(pool, "ump_evict");
    if (!rc)
        rc = awake(pool, "ump_evict");
    if (rc)
        return rc;
    if (tier != UMP_TIER_HOST && tier != UMP_TIER_NVME) {
        ump_log_error("ump_evict: tier %d is not UMP_TIER_HOST or "
                      "UMP_TIER_NVME", tier);
        return -EINVAL;
    }
    rc = pool_check_lost(pool, ptr, size ? size : 1, "ump_evict");
    return rc ? rc : offload_evict(pool, ptr, size, tier);
}

UMP_EXPORT int ump_advise(ump_pool_t *pool, void *ptr, size_t size,
                          int advice)
{
    int rc = pool_check(pool, "ump_advise");
    if (rc)
        return rc;
    if (advice < UMP_ADVISE_HOT || advice > UMP_ADVISE_DONTNEED) {
        ump_log_error("ump_advise: unknown advice %d", advice);
        return -EINVAL;
    }
    rc = pool_check_lost(pool, ptr, size ? size : 1, "ump_advise");
    return rc ? rc : offload_advise(pool, ptr, size, advice);
}

UMP_EXPORT int ump_tier_stats(ump_pool_t *pool, int tier,
                              ump_tier_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_tier_stats");
    if (rc)
        return rc;
    if (!stats_p || (tier != UMP_TIER_HOST && tier != UMP_TIER_NVME)) {
        ump_log_error("ump_tier_stats: %s", stats_p ? "tier is not "
                      "UMP_TIER_HOST or UMP_TIER_NVME" : "stats_p is NULL");
        return -EINVAL;
    }
    ump_tier_stats_t st;
    offload_tier_stats(pool, tier, &st);
    *stats_p = st;
    return 0;
}
