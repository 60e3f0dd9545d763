/*
 * The one registry of live pools, and fork(). Every pool is in it from
 * creation to destruction; the fork handlers (one pthread_atfork, in
 * registry.c) walk it. Lock order: the registry lock, then each pool's
 * lock, then its streams_lock, then its thread caches (tc_seize); nothing
 * takes the registry lock while holding a pool lock, nor a pool lock while
 * holding streams_lock.
 */
#ifndef UMP_FRONT_REGISTRY_H
#define UMP_FRONT_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem/pool.h"

/* Bumped in every child of fork(): pools of an older generation refuse. */
extern _Atomic uint64_t fork_generation;

int registry_add(ump_pool_t *pool);
void registry_remove(ump_pool_t *pool);
/* Calls fn(pool, arg) under the registry lock if the pool is alive. */
bool registry_with_pool(ump_pool_t *pool, uint64_t id,
                        void (*fn)(ump_pool_t *, void *), void *arg);
/* Calls fn(pool, arg) for every live pool, under the registry lock. */
void registry_for_each(void (*fn)(ump_pool_t *, void *), void *arg);
/* registry_for_each if the registry lock is free now, else nothing (for
 * exit handlers, which may run while another thread holds it). */
void registry_try_for_each(void (*fn)(ump_pool_t *, void *), void *arg);
/* Installs the fork handlers, once per process. */
int fork_global_init(void);

#endif
