/*
 * A pool's life: creation and destruction, called by the public
 * ump_pool_create/ump_pool_destroy of the library's assembly (lib/umpool.c),
 * which also names the pool's observer. The front end calls the observer
 * through this table and never names the layer that implements it.
 */
#ifndef UMP_FRONT_LIFECYCLE_H
#define UMP_FRONT_LIFECYCLE_H

#include "mem/pool.h"

struct pool_observer {
    /* After the pool is whole and registered. Its failure is its own to
     * log: the pool works without it. */
    int (*start)(ump_pool_t *pool);
    /* Before anything is torn down (its thread may read the pool), and in
     * a child after fork(), where it drops only the child's copy. */
    void (*stop)(ump_pool_t *pool);
};

/* ump_pool_create: obs may be NULL. */
int pool_create(const char *config, const struct pool_observer *obs,
                ump_pool_t **pool_p);
/* A pool of configuration cfg (loaded), its addresses reserved exactly at
 * [at, at + at_size) when at is not NULL (a restore: -EADDRINUSE when they
 * are taken, -ENOTSUP when the backend cannot). */
int pool_create_at(const struct ump_config *cfg, void *at, size_t at_size,
                   const struct pool_observer *obs, ump_pool_t **pool_p);
/* ump_pool_restore (front/restore.c). */
int pool_restore(const char *path, const char *config,
                 const struct pool_observer *obs, ump_pool_t **pool_p);
/* ump_pool_destroy. */
int pool_destroy(ump_pool_t *pool);

#endif
