/*
 * Slabs: one chunk cut into objects of one size class. Small allocations
 * come from slabs so that they cost no driver call and no chunk each. The
 * per-object word (state and requested size) makes double frees detectable
 * on the lock-free free path; the free index stack is used under pool->lock
 * only, when thread caches refill or flush.
 */
#ifndef UMP_SLAB_H
#define UMP_SLAB_H

#include <stdatomic.h>
#include <stdint.h>

#include "mem/pool.h"

enum { SLAB_PARTIAL, SLAB_FULL, SLAB_EMPTY };

struct slab {
    char *base;        /* the chunk's address */
    size_t granule;
    uint32_t size;     /* object size */
    uint64_t recip;    /* ceil(2^52 / size): division by multiplication */
    uint32_t nobj;
    uint32_t nfree;    /* free objects (pool->lock): on the free stack, and
                          the never handed out ones from fresh on */
    uint32_t fresh;    /* objects [fresh, nobj) were never handed out since
                          the slab was placed: served in address order
                          without a stack entry, so that a new slab costs
                          no pass over its objects (a cold 256 B
                          allocation would write 8192 entries) */
    unsigned cls;
    int device;
    int list;          /* SLAB_PARTIAL / FULL / EMPTY */
    /* 0, or the tier (UMP_TIER_HOST, UMP_TIER_NVME) its data went to while
     * the pool is suspended: its chunk is gone, the granule is still its
     * own, and it is never released (tier/suspend.c). */
    int away;
    struct ump_list_node link; /* in its device's list (SLAB_*) */
    struct slab *next_retired; /* in pool->free_slabs */
    uint32_t *free_idx;            /* stack of freed object indices */
    _Atomic uint32_t *word;        /* obj_word(state, requested size) */
};

/* off / s->size, for off < 2^31 (chunks are at most 2 GiB, conf.c) and
 * sizes up to 2^20: the error of the reciprocal, off / 2^52 < 2^-21, stays
 * below the 1/size gap to the next integer, so the floor is exact. */
static inline uint32_t slab_index(const struct slab *s, uint32_t off)
{
    return (uint32_t)(((unsigned __int128)off * s->recip) >> 52);
}

/* Takes up to max free objects of class cls for a request from device,
 * making a slab if needed (on the nearest device with room when device is
 * full, unless flags has UMP_HINT_NO_SPILL). Objects are written to out,
 * all from one device, returned in *device_p. -ENOMEM when no device has
 * room, -EBUSY for a device while the pool is suspended. Pool lock held. */
int slab_take(ump_pool_t *pool, int device, unsigned cls, unsigned flags,
              unsigned max, struct obj_ref *out, unsigned *n_p,
              int *device_p);
/* A slab of class cls on a new chunk of place, mapped at exactly granule
 * g (a checkpoint's restore), with objects live[0..nlive) live, of the
 * requested sizes req[]. The caller has checked the indices (< the slab's
 * objects, distinct). -EADDRINUSE when g is not free, -ENOMEM without
 * room. Pool lock held. */
int slab_build_at(ump_pool_t *pool, int place, unsigned cls, size_t g,
                  const uint32_t *live, const uint32_t *req, size_t nlive,
                  struct slab **s_p);
/* Gives back object idx, whose state is already OBJ_FREE. Pool lock held. */
void slab_put(ump_pool_t *pool, struct slab *s, uint32_t idx);
/* Device d has failed: its wholly free slabs are released. Its others
 * hand out nothing more and are released once their last object is freed
 * (slab_find, slab_put). Pool lock held. */
void slab_fail_device(ump_pool_t *pool, int d);
/* Slab s, whose memory is now a chunk of device d (its own device
 * failed while its data was away), belongs to d from now on. */
void slab_move_device(ump_pool_t *pool, struct slab *s, int d);
/* Are the objects of s lost with a failed device? (Not while its data is
 * away on a tier: a suspended pool's.) */
bool slab_lost(const ump_pool_t *pool, const struct slab *s);
/* Releases every wholly free slab's chunk to the cached blocks. */
void slab_trim(ump_pool_t *pool);
/* The same for place d only (room making on a full device: the slab kept
 * free per class, SLAB_EMPTY_KEEP, is memory chunks_available does not
 * count); returns how many chunks went to the cached blocks. */
size_t slab_trim_place(ump_pool_t *pool, int d);
/* Frees every slab's metadata (pool teardown). */
void slab_free_all(ump_pool_t *pool);

#endif
