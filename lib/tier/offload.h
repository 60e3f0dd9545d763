/*
 * The tier layer, as the front end sees it (the rest of lib/tier/ is
 * internal; tier.h lists its files). The chunks of a run move between
 * device memory, pinned host memory (remapped at the same address) and
 * NVMe slots (unmapped). lib/front/tier_api.c implements ump_acquire,
 * ump_release, ump_prefetch, ump_evict, ump_advise and ump_tier_stats on
 * the offload_* calls below, after checking their other arguments.
 *
 * A run that may move is tracked by a struct res: one segment per chunk it
 * was built from, each with a location, a pin count and a place in an LRU
 * list. Runs of UMP_HINT_OFFLOAD are tracked from their allocation (and
 * never cached whole or per thread); others from their first ump_evict.
 *
 * State lives under pool->lock; the copies and the disk I/O of a move run
 * without it while the segment is marked moving, so allocations go on.
 */
#ifndef UMP_OFFLOAD_H
#define UMP_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "mem/pool.h"

struct offload;
struct res;

/* Bytes the host tier may pin: conf_host_limit rounded down to whole
 * chunks (one chunk if physical memory is unknown); pool->chunk_size set. */
size_t offload_host_limit(const ump_pool_t *pool);
/* Sets up the tiers from the configuration (no thread, no file yet). */
int offload_init(ump_pool_t *pool);
/* The front end's hook for memory kept for reuse on a device outside its
 * cached blocks (runs in thread caches, parked runs, slab objects in thread
 * caches): room making for a move up calls it for that device, pool lock
 * held, when releasing the device's wholly free slabs was not enough, and
 * before it moves live data down. It never runs in a thread inside its own
 * cache (tc_enter): the tier runs no code there. Set once after
 * offload_init; without it only parked runs are taken back. */
void offload_set_reclaim(ump_pool_t *pool, void (*fn)(ump_pool_t *pool,
                                                   int device));
/* Stops the background thread; the pool lock is not held. */
void offload_stop(ump_pool_t *pool);
/* Frees host chunks, closes the NVMe store (nothing is left on disk) and
 * the state. Every run is already freed. NULL state is fine. */
void offload_fini(ump_pool_t *pool);
/* After fork(), in the child: frees memory only. */
void offload_fini_in_child(ump_pool_t *pool);
/* ump_trim: gives the empty host chunks back. Pool lock held. */
void offload_trim_locked(ump_pool_t *pool);

/* Starts tracking a new run (UMP_HINT_OFFLOAD). Pool lock held. */
int offload_track(ump_pool_t *pool, struct run *r);
/* Frees a tracked run: each segment's memory, wherever it is, and the
 * run's addresses; deferred to the mover while a move of it runs. Pool lock
 * held. */
void offload_run_free(ump_pool_t *pool, struct run *r);
/* Waits until no move or call of another thread works on tracked run r
 * (ump_free then frees it at once, statistics and all). Pool lock held. */
void offload_wait_idle(ump_pool_t *pool, struct run *r);
/* Rounds of offload_make_room an allocation tries before -ENOMEM. */
#define OFFLOAD_ROUNDS 3
/* Moves unpinned offloadable memory down until the request pr could be
 * placed by its policy: each device gives what the policy's plan, made as
 * if everything movable had moved, takes from it. 0 when something moved;
 * -ENOMEM when nothing could, and, with nothing moved, when the request
 * cannot fit however much moves. Pool lock not held. */
int offload_make_room(ump_pool_t *pool, const struct place_req *pr);

/* The work of the public tier calls, their pool and other arguments
 * checked by the front end; each takes the pool lock. A pointer that is not
 * in a live allocation, or a range that leaves it, is -EINVAL, logged here
 * in the public call's name. A slab object never moves: 0.
 *
 * ump_acquire on device dev (an index; the front end resolves
 * UMP_DEVICE_CURRENT). */
int offload_acquire(ump_pool_t *pool, void *ptr, size_t size, int dev);
/* ump_release: -EINVAL (logged) when the range is not acquired. */
int offload_release(ump_pool_t *pool, void *ptr, size_t size);
/* ump_prefetch to dest: a device index or UMP_LOC_HOST. */
int offload_prefetch(ump_pool_t *pool, void *ptr, size_t size, int dest);
/* ump_evict to tier: UMP_TIER_HOST or UMP_TIER_NVME. */
int offload_evict(ump_pool_t *pool, void *ptr, size_t size, int tier);
/* ump_advise with advice, one of UMP_ADVISE_*. */
int offload_advise(ump_pool_t *pool, void *ptr, size_t size, int advice);
/* ump_tier_stats of tier (UMP_TIER_HOST or UMP_TIER_NVME) into *st. */
void offload_tier_stats(ump_pool_t *pool, int tier, ump_tier_stats_t *st);

/* The home device of granule i of tracked run r (where it was placed). */
int offload_home(const struct run *r, size_t i);
/* device, tier, chunk_base and chunk_size of granule g of tracked run r.
 * Pool lock held. */
void offload_ptr_info(ump_pool_t *pool, const struct run *r, size_t g,
                      ump_ptr_info_t *info);
/* Where the data of granule g of a run lives now: UMP_TIER_DEVICE,
 * UMP_TIER_HOST or UMP_TIER_NVME (a segment being moved counts where its
 * data still is). Pool lock held. */
int offload_gran_tier(ump_pool_t *pool, size_t g);
/* Fills the tier fields of device d's statistics. Pool lock held. */
void offload_device_stats(ump_pool_t *pool, int d, ump_stats_t *st);

/* Waits until no move runs (they drop the pool lock while they copy).
 * Every move starts under the pool lock, so none starts while the caller
 * keeps holding it: a checkpoint reads a still pool. Pool lock held. */
void offload_quiesce(ump_pool_t *pool);
/* While held (counted), no move starts that is not part of one already
 * running: a checkpoint waiting in offload_quiesce is not starved by
 * threads that keep moving memory. Pool lock held. */
void offload_hold(ump_pool_t *pool);
void offload_unhold(ump_pool_t *pool);

/* ump_pool_suspend / ump_pool_resume's moving (tier/suspend.c). */
/* Moves everything on the devices down to tier (UMP_TIER_HOST or
 * UMP_TIER_NVME). On error what moved is moved back (offload_resume) and
 * the error returned. pool->suspended is set by the caller. */
int offload_suspend(ump_pool_t *pool, int tier);
/* Moves back what offload_suspend moved, as far as the devices have room:
 * -ENOMEM with what is left still listed (a later call goes on). */
int offload_resume(ump_pool_t *pool);
/* Frees the list (pool teardown; nothing is left on it then). */
void offload_suspend_forget(ump_pool_t *pool);


/* Test hook: the nth next operation of a kind fails. what: "eio",
 * "enospc", "short_write", "corrupt" (NVMe I/O, see nvme_inject_fault) or
 * "host_alloc" (creating a pinned host chunk: -ENOMEM). nth 0 clears.
 * -EINVAL for an unknown kind or a negative nth, -ENODEV for an NVMe fault
 * without an NVMe tier. */
int offload_inject_fault(ump_pool_t *pool, const char *what, int nth);

/* Test hook: while held, the prefetch worker takes nothing more from its
 * queue (the prefetch it runs, it finishes), so that a test can make room
 * while prefetches are queued. Released: the worker goes on. */
void offload_hold_prefetch(ump_pool_t *pool, bool hold);

#endif
