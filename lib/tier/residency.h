/*
 * Residency: which tracked run has which segments, where each one's data
 * is, who may move it (claims), the LRU order eviction reads, and the tier
 * counters. Every function runs with pool->lock held.
 */
#ifndef UMP_TIER_RESIDENCY_H
#define UMP_TIER_RESIDENCY_H

#include "tier/tier.h"

/* The segment of res holding granule g. */
struct seg *res_seg_at(struct res *res, size_t g);
/* The live run holding ptr, and the granules [*g0_p, *g1_p) that the range
 * [ptr, ptr+size) touches (size 0: the whole run). -EINVAL when ptr is not
 * in a live allocation or the range leaves it, logged as "fn: ptr is why"
 * (fn NULL: not logged); -ENOTSUP for a slab object or a run of pinned
 * host memory (a host place: mem/pool.h), which never move, not logged. */
int res_find_range(ump_pool_t *pool, const char *fn, void *ptr, size_t size,
                   struct run **r_p, size_t *g0_p, size_t *g1_p);

void res_lru_unlink(struct offload *o, struct seg *s);
/* Puts s at the hot end (head: used now) or the cold end (evicted first
 * until its next use: COLD or DONTNEED advice). */
void res_lru_touch(struct offload *o, struct seg *s, bool hot);

/* The eviction order's clock (evict.c): one tick per call that uses
 * memory; returns the new time. */
uint64_t res_tick(struct offload *o);
/* s was acquired at logical time now: its interval since the last acquire
 * predicts the next one; a prefetch it had is consumed; hot. */
void res_note_acquire(struct offload *o, struct seg *s, uint64_t now);
/* A prefetch (ump_prefetch, WILLNEED) asked for s at now: used soon. */
void res_note_want(struct seg *s, uint64_t now);
/* UMP_ADVISE_HOT: used now, and what its past predicted is dropped. */
void res_note_hot(struct offload *o, struct seg *s);

/* The run's residency, made on first need: one segment per chunk, all on
 * devices, hot in the LRU. -ENOMEM when it cannot be made; -EBUSY when the
 * run shares a chunk with a neighbour (carved: mem/chunks.h), which stays
 * where it is until res_unshare. */
int res_get(ump_pool_t *pool, struct run *r, struct res **res_p);
/* Gives untracked run r whole chunks of its own where it shares one
 * (chunks_unshare). alone: only where no other run or slab with objects out
 * shares them, -EBUSY otherwise, since another thread may be using such a
 * neighbour; the caller has taken back what thread caches hold and cached
 * the parked runs (a run popped from a thread cache goes live with no
 * lock). Without alone the caller knows no one uses any (suspend). */
int res_unshare(ump_pool_t *pool, struct run *r, bool alone);
/* Ends one busy operation on res (res->busy++ began it): the last one tears
 * a freed run down, else wakes whoever waits for the run to be idle. */
void res_unbusy(ump_pool_t *pool, struct res *res);
/* Frees a dead run's memory, wherever each segment is, its addresses and
 * its struct run; res is freed. No operation is busy on it. */
void res_teardown(ump_pool_t *pool, struct res *res);

/* A move of s, with everything it needs first (making room drops the
 * lock), runs between res_move_begin and res_move_end: meanwhile s is no
 * victim and others wait for it (begin waits for an earlier claim). After
 * the end, s may be gone unless the caller keeps its run busy. */
void res_move_begin(ump_pool_t *pool, struct seg *s);
void res_move_end(ump_pool_t *pool, struct seg *s);

/* Counts segment s in (sign +1) or out of tier's counters. */
void res_note_tier(ump_pool_t *pool, const struct seg *s, int tier, int sign);
/* The same for n granules placed on device home (a suspended slab's
 * chunk: tier/suspend.c). */
void tier_count(ump_pool_t *pool, int home, size_t n, int tier, int sign);
/* Segment s moved from its tier to tier (on dev when a device): counters,
 * s->tier and s->dev. */
void res_note_move(ump_pool_t *pool, struct seg *s, int tier, int dev);

#endif
