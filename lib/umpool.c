/*
 * The library's assembly: the one place that knows every layer. The pool's
 * public lifecycle calls live here because creating a pool wires the front
 * end to the statistics publisher above it (lib/publish), which the front
 * end must not name (lib/layers).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "front/lifecycle.h"
#include "front/registry.h"
#include "ipc/share.h"
#include "publish/publish.h"
#include "util/internal.h"
#include "util/log.h"

/* Publishes the statistics of pools made with publish:true. */
static int observe_start(ump_pool_t *pool)
{
    return pool->cfg.publish ? publish_start(pool) : 0;
}

static const struct pool_observer publisher = {observe_start, publish_stop};

/* share:NAME in a pool's configuration: the pool shared as NAME is
 * joined, or made and shared where there is none (the job's first
 * process); a process that loses the race to share it joins it.
 * attach:NAME: joined only. */
static int create_shared(const struct ump_config *cfg, const char *config,
                         ump_pool_t **pool_p)
{
    const char *name = cfg->share;
    /* A sharer that stops between our share and our attach makes the
     * name free again: a few rounds. */
    for (int round = 0;; round++) {
        ump_pool_t *pool;
        int rc = pool_create_at(cfg, NULL, 0, &publisher, &pool);
        if (rc)
            return rc;
        log_mute(true); /* a live pool under the name is no error here */
        rc = ump_pool_share(pool, name);
        log_mute(false);
        if (!rc) {
            *pool_p = pool;
            return 0;
        }
        pool_destroy(pool);
        if (rc != -EADDRINUSE) {
            ump_log_error("share:%s: cannot share the pool: %s", name,
                          ump_strerror(rc));
            return rc;
        }
        rc = share_attach(name, config, &publisher, pool_p);
        if (rc != -ENOENT || round == 2)
            return rc;
    }
}

/* ump_pool_create and the process's pool. */
static int create(const char *config, ump_pool_t **pool_p)
{
    if (!pool_p) {
        ump_log_error("ump_pool_create: pool_p is NULL");
        return -EINVAL;
    }
    struct ump_config *cfg = malloc(sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    int rc = conf_load(config, cfg);
    if (!rc && cfg->attach[0])
        rc = share_attach(cfg->attach, config, &publisher, pool_p);
    else if (!rc && cfg->share[0])
        rc = create_shared(cfg, config, pool_p);
    else if (!rc)
        rc = pool_create_at(cfg, NULL, 0, &publisher, pool_p);
    free(cfg);
    return rc;
}

UMP_EXPORT int ump_pool_create(const char *config, ump_pool_t **pool_p)
{
    return create(config, pool_p);
}

UMP_EXPORT int ump_pool_attach(const char *name, const char *config,
                               ump_pool_t **pool_p)
{
    return share_attach(name, config, &publisher, pool_p);
}

UMP_EXPORT int ump_pool_restore(const char *path, const char *config,
                                ump_pool_t **pool_p)
{
    return pool_restore(path, config, &publisher, pool_p);
}

/* The process's pool: made once, never destroyed (see umpool.h). */
static ump_pool_t *_Atomic process_pool;
static int process_rc; /* the first attempt's error, kept */
static pthread_mutex_t process_lock = PTHREAD_MUTEX_INITIALIZER;

UMP_EXPORT int ump_process_pool(const char *config, ump_pool_t **pool_p)
{
    if (!pool_p) {
        ump_log_error("ump_process_pool: pool_p is NULL");
        return -EINVAL;
    }
    uint64_t gen = atomic_load_explicit(&fork_generation,
                                        memory_order_relaxed);
    ump_pool_t *p = atomic_load_explicit(&process_pool, memory_order_acquire);
    if (ump_likely(p != NULL && p->fork_gen == gen)) {
        *pool_p = p;
        return 0;
    }
    pthread_mutex_lock(&process_lock);
    p = atomic_load_explicit(&process_pool, memory_order_relaxed);
    if (p && p->fork_gen != gen) {
        /* A child after fork(): the parent's pool is dropped here (its
         * memory stays the parent's) and the child gets one of its own. */
        pool_destroy(p);
        atomic_store(&process_pool, NULL);
        p = NULL;
        process_rc = 0;
    }
    if (!p && !process_rc) {
        process_rc = create(config, &p);
        if (!process_rc)
            atomic_store_explicit(&process_pool, p, memory_order_release);
    }
    int rc = p ? 0 : process_rc;
    pthread_mutex_unlock(&process_lock);
    if (!rc)
        *pool_p = p;
    return rc;
}

UMP_EXPORT int ump_pool_destroy(ump_pool_t *pool)
{
    ump_pool_t *proc = atomic_load(&process_pool);
    if (pool && pool == proc &&
        pool->fork_gen != atomic_load(&fork_generation)) {
        /* A child dropping the parent's process pool: the next
         * ump_process_pool makes the child's. */
        pthread_mutex_lock(&process_lock);
        if (atomic_load(&process_pool) == pool) {
            atomic_store(&process_pool, NULL);
            process_rc = 0;
        }
        pthread_mutex_unlock(&process_lock);
    } else if (pool && pool == proc) {
        ump_log_error("ump_pool_destroy: the process's pool "
                      "(ump_process_pool) lives until the process ends");
        return -EBUSY;
    }
    return pool_destroy(pool);
}
