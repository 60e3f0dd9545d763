/*
 * A pool's IPC state: made at its first ump_ipc_* call, with a random
 * identity (the key) that names its socket, so that a handle of a pool
 * that is gone never reaches a later pool of a process that got the same
 * pid; and the hooks through which front frees and destroys (lifecycle.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "front/lifecycle.h"
#include "ipc/ipc.h"
#include "ipc/share.h"
#include "util/log.h"

void ipc_sock_name(uint32_t pid, uint64_t key, char *buf, size_t size)
{
    snprintf(buf, size, "ipc-%u-%016llx", (unsigned)pid,
             (unsigned long long)key);
}

static void ipc_stop(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    ipc_server_stop(pool);
    pthread_mutex_lock(&pool->lock);
    ipc_exports_drop(pool);
    pthread_mutex_unlock(&pool->lock);
    ipc_imports_drop(pool, false);
    share_stop(pool); /* after the imports: their holds are in the ledger */
    pthread_mutex_destroy(&st->srv_lock);
    pthread_mutex_destroy(&st->imp_lock);
    free(st);
    pool->ipc = NULL;
}

static void ipc_stop_in_child(ump_pool_t *pool)
{
    ipc_server_drop_in_child(pool);
    ipc_imports_drop(pool, true);
    share_stop_in_child(pool);
    for (int b = 0; b < IPC_BUCKETS; b++)
        for (struct ipc_export *e = pool->ipc->buckets[b], *n; e; e = n) {
            n = e->next;
            ipc_export_free(e);
        }
    free(pool->ipc);
    pool->ipc = NULL;
}

static const struct pool_ipc_ops hooks = {ipc_run_freed, ipc_obj_freed,
                                          ipc_stop, ipc_stop_in_child,
                                          share_fini};

struct ipc_state *ipc_state_get(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct ipc_state *st = pool->ipc;
    if (st) {
        pthread_mutex_unlock(&pool->lock);
        return st;
    }
    st = calloc(1, sizeof(*st));
    uint64_t key = 0;
    if (!st || getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        pthread_mutex_unlock(&pool->lock);
        ump_log_error("ump_ipc: %s", st ? "no randomness for the pool's "
                                          "identity"
                                        : "out of memory");
        free(st);
        return NULL;
    }
    st->key = key;
    st->pid = (uint32_t)getpid();
    st->listener.fd = -1;
    st->wake[0] = st->wake[1] = -1;
    pthread_mutex_init(&st->srv_lock, NULL);
    pthread_mutex_init(&st->imp_lock, NULL);
    pool->ipc = st;
    pool->ipc_ops = &hooks;
    pthread_mutex_unlock(&pool->lock);
    return st;
}
