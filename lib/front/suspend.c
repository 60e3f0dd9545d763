/*
 * ump_pool_suspend and ump_pool_resume (the moving is tier/suspend.c's):
 * the checks, the flag that refuses allocations meanwhile, and giving the
 * devices' memory back. Like vLLM's sleep mode, at the level of the pool:
 * the addresses stay reserved, so every pointer is valid again after the
 * resume.
 */
#include "config.h"

#include <errno.h>

#include "front/check.h"
#include "front/front.h"
#include "tier/offload.h"

UMP_EXPORT int ump_pool_suspend(ump_pool_t *pool, int tier)
{
    static const char fn[] = "ump_pool_suspend";
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (tier != UMP_TIER_HOST && tier != UMP_TIER_NVME) {
        ump_log_error("%s: tier %d is not UMP_TIER_HOST or UMP_TIER_NVME",
                      fn, tier);
        return -EINVAL;
    }
    pthread_mutex_lock(&pool->lock);
    if (atomic_load(&pool->suspended)) {
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("%s: the pool is already suspended", fn);
        return -EBUSY;
    }
    if (pool->exports) {
        size_t n = pool->exports;
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("%s: %zu allocations are exported (ump_ipc_get_handle): "
                      "other processes may map their memory, which must not "
                      "move; free them first", fn, n);
        return -EBUSY;
    }
    /* Refused from here on: an allocation now would take device memory
     * back, or hand out a slab object whose chunk is gone. */
    atomic_store(&pool->suspended, true);
    pool->suspending = true;
    pool_poll_pending(pool, true);
    pool_flush_tcaches(pool); /* their objects and runs are free memory */
    offload_quiesce(pool);
    rc = offload_suspend(pool, tier);
    if (rc)
        atomic_store(&pool->suspended, false);
    /* Everything the devices still hold is cached or idle: it all goes. */
    pool_trim_locked(pool);
    pool->suspending = false;
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

UMP_EXPORT int ump_pool_resume(ump_pool_t *pool)
{
    static const char fn[] = "ump_pool_resume";
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    pthread_mutex_lock(&pool->lock);
    if (!atomic_load(&pool->suspended)) {
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("%s: the pool is not suspended", fn);
        return -EINVAL;
    }
    if (pool->suspending) { /* it drops the lock while it moves */
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("%s: a suspend is still running", fn);
        return -EBUSY;
    }
    rc = offload_resume(pool);
    if (rc)
        ump_log_error("%s: cannot bring everything back (%s); the pool stays "
                      "suspended, call again once the devices have room", fn,
                      ump_strerror(rc));
    else
        atomic_store(&pool->suspended, false);
    pthread_mutex_unlock(&pool->lock);
    return rc;
}
