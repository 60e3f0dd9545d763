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

/* The IPC layer's hooks (lib/ipc), which it installs in the pool at its
 * first call (pool->ipc_ops): front calls them without naming it. */
struct run;
struct slab;
struct pool_ipc_ops {
    /* The maker freed run r, which is exported (r->exported): true when
     * the layer keeps it (its chunks mapped, its addresses out of reuse)
     * until no other process has it open; it then frees it itself with
     * pool_run_free, r->exported cleared. Pool lock held. */
    bool (*run_freed)(ump_pool_t *pool, struct run *r);
    /* A slab object idx of s was freed (its state now OBJ_FREE) while the
     * pool has exports (pool->exports): true when it is one and the layer
     * keeps it (out of its slab's free list, so that its slab stays) until
     * no other process has it open; it then frees it itself with
     * pool_obj_free. Pool lock held. */
    bool (*obj_freed)(ump_pool_t *pool, struct slab *s, uint32_t idx);
    /* At ump_pool_destroy, before anything is torn down: the layer's
     * thread stops, what it keeps is freed, what the pool imported is
     * unmapped. No pool lock held. */
    void (*stop)(ump_pool_t *pool);
    /* The same in a child after fork(), where the layer only drops its
     * copy: the parent's socket and mappings are left alone. */
    void (*stop_in_child)(ump_pool_t *pool);
    /* At ump_pool_destroy, after stop and after the pool's memory went
     * back to the driver (whose releases a shared pool's ledger counts):
     * what the layer still kept goes. No pool lock held. */
    void (*fini)(ump_pool_t *pool);
};

/* A pool of configuration cfg (loaded; obs may be NULL): ump_pool_create
 * (lib/umpool.c), its addresses reserved exactly at
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
