/*
 * What the files of the front end share: the allocation slow path over the
 * memory and tier layers. The front end decides what a layer below must not
 * (a run tracked by the tiers is freed by them; thread caches are flushed
 * before an allocation gives up). Pool lock held for all.
 */
#ifndef UMP_FRONT_FRONT_H
#define UMP_FRONT_FRONT_H

#include <stdbool.h>

#include "mem/pool.h"

/* A run for pr: deferred frees collected first; when it does not fit, what
 * threads park is flushed and it is tried once more, and then once more
 * after pool_release_free_slabs. */
int pool_run_alloc(ump_pool_t *pool, const struct place_req *pr,
                   struct run **run_p);
/* A freed run: to the tiers when they track it (it may have moved), else
 * parked or cached (mem/runs.c). */
void pool_run_free(ump_pool_t *pool, struct run *run);
/* A freed slab object (its state OBJ_FREE) back to its slab, or to the
 * IPC layer while it is exported (lifecycle.h: obj_freed). Lock held. */
void pool_obj_free(ump_pool_t *pool, struct slab *s, uint32_t idx);
/* Frees what ump_free_async deferred once its event is done; wait: all. */
void pool_poll_pending(ump_pool_t *pool, bool wait);
/* Everything parked (thread caches, parked runs) goes back to the pool's
 * slabs and cached blocks. */
void pool_flush_tcaches(ump_pool_t *pool);
/* Memory threads keep for reuse on device outside its cached blocks (runs
 * parked whole or in thread caches, slab objects in thread caches) goes
 * back, after the deferred frees whose streams are done: runs become
 * cached blocks, objects go back to their slabs (which the tier then
 * releases when wholly free: slab_trim_place). The tier's hook before it
 * moves live data down for room, and before ump_evict gives a carved run
 * chunks of its own. Nothing (no membarrier, no flush) when there is
 * none. */
void pool_reclaim_device(ump_pool_t *pool, int device);
/* Slabs with no live object (mem/slab.h: each size class keeps one per
 * place, SLAB_EMPTY_KEEP, and a flush of the thread caches may empty
 * more) hold chunks that neither the placement view (chunks_available)
 * nor chunks_get counts: with many classes in use they fill a device
 * while little is live. An allocation about to fail releases them to the
 * cached blocks of their places and tries once more: those of the devices
 * for a device place, of both host places (one budget) for a host place.
 * true when any was released. */
bool pool_release_free_slabs(ump_pool_t *pool, int place);
/* Gives cached physical memory back (ump_trim); thread caches flushed. */
void pool_trim_locked(ump_pool_t *pool);
/* ump_ptr_info without its log line, for callers that log their own:
 * -EINVAL with *why_p saying why ("not a pointer of this pool", "not
 * inside a live allocation"). */
int pool_ptr_info(ump_pool_t *pool, const void *ptr, ump_ptr_info_t *info_p,
                  const char **why_p);
/* May the allocation holding ptr move between tiers by itself or has it
 * (made with UMP_HINT_OFFLOAD, or tracked by the tiers)? false for slab
 * objects and for anything not allocated. */
bool pool_ptr_movable(ump_pool_t *pool, const void *ptr);
/* Is ptr in pinned host memory of ump_host_alloc (the host place)? For a
 * pointer into a live allocation, which the caller keeps live: no lock (a
 * live allocation's slab or run keeps its place). */
bool pool_ptr_on_host(ump_pool_t *pool, const void *ptr);

/* A run or a slab object that a restore made (front/restore.c) becomes
 * live as ump_alloc would have left it: its state, size, age, and the
 * counters of tc, the restoring thread's cache (one call per object). */
struct tcache;
struct slab;
void alloc_adopt_run(ump_pool_t *pool, struct tcache *tc, struct run *r,
                     size_t size);
void alloc_adopt_object(struct tcache *tc, struct slab *s);

#endif
