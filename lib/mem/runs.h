/*
 * Runs: allocations of chunks (struct run, in mem/pool.h), possibly from
 * several devices. A run is planned by its request's policy and built by
 * chunks.c, or reused: a freed run parked whole on its device, or a cached
 * block, whole chunks or carved (chunks.h). Run structs are recycled for
 * the pool's life. Every function here runs with pool->lock held.
 */
#ifndef UMP_MEM_RUNS_H
#define UMP_MEM_RUNS_H

#include "mem/pool.h"

/* A run of pr->req.chunks chunks placed by pr->policy: a parked run or a
 * cached block where the policy would place it on the requesting device
 * anyway, else a new range. -ENOMEM when it does not fit now (the caller
 * may flush what threads park and try again); the run is not counted yet. */
int runs_alloc(ump_pool_t *pool, const struct place_req *pr,
               struct run **run_p);
/* A run of the chunks the plan parts[0..np) says, mapped at exactly
 * [start, start + sum of the parts) (a checkpoint's restore), tagged, not
 * live yet; -EADDRINUSE when those addresses are not free, -ENOMEM when a
 * device has no room. */
int runs_build_at(ump_pool_t *pool, size_t start,
                  const ump_place_part_t *parts, size_t np, unsigned flags,
                  struct run **run_p);
/* Calls fn, in address order, for every slab (r NULL) and every live run
 * (s NULL) of the pool, until fn returns an error, which it returns. The
 * tags are read afresh at each step, so fn may drop the pool lock: what
 * was freed meanwhile is not visited. Pool lock held. */
struct slab;
int runs_walk(ump_pool_t *pool,
              int (*fn)(ump_pool_t *pool, struct slab *s, struct run *r,
                        void *arg),
              void *arg);
/* A run struct, zeroed or recycled (runs_put); NULL when out of memory. */
struct run *runs_get(ump_pool_t *pool);
/* A freed run not tracked by the tiers (r->res NULL) is parked whole or
 * becomes cached blocks. */
void runs_free(ump_pool_t *pool, struct run *r);
/* A run struct no longer used goes back to the free list. */
void runs_put(ump_pool_t *pool, struct run *r);
/* Every parked run becomes cached blocks. */
void runs_unpark_all(ump_pool_t *pool);

#endif
