/*
 * The chunks' internals that lib/mem/unshare.c (chunks_unshare) shares
 * with lib/mem/chunks.c. Nothing else includes it. Pool lock held for all.
 */
#ifndef UMP_MEM_CHUNKS_INT_H
#define UMP_MEM_CHUNKS_INT_H

#include "mem/chunks.h"

/* Bytes of n granules. */
static inline size_t chunk_bytes(ump_pool_t *pool, size_t n)
{
    return n << pool->chunk_shift;
}

/* Takes the chunk at granules [g, g+k) out of cached block b, which holds
 * it: what is left before it stays b, what is left after becomes a block
 * of its own. -ENOMEM, b unchanged, when that block cannot be made. */
int chunks_block_cut(ump_pool_t *pool, struct block *b, size_t g, size_t k);
/* Releases unmapped chunk c to the backend, and frees it; the backend's
 * error (logged) leaves c as it was. */
int chunks_release_one(ump_pool_t *pool, struct chunk *c);
/* Chunks of device for `left` granules, appended to cs[*nc..]. On error
 * the caller gives back what cs holds. */
int chunks_gather(ump_pool_t *pool, int device, size_t left,
                  struct chunk **cs, size_t *nc);
/* Maps cs[0..nc) one after the other from granule g0 and notes them in
 * the granule table; stops at the first error. How many it mapped into
 * *i_p, the granule after them into *g_p. */
int chunks_map_in_order(ump_pool_t *pool, struct chunk **cs, size_t nc,
                        size_t g0, size_t *i_p, size_t *g_p);

/* Block b off its device's list of cached blocks. */
void chunks_block_unlink(struct dev_state *ds, struct block *b);
/* Granules [g, g+n) of device d become cached (cached true) or not: the
 * per-chunk counts and the device's holes follow. */
void chunks_cached_note(ump_pool_t *pool, int d, size_t g, size_t n,
                        bool cached);
/* Unmaps a cached chunk of device, the least recently freed first, and
 * makes it idle (with bigger: the smallest bigger than max_n, else any of
 * at most max_n granules). -ENOMEM when there is none. */
int chunks_reclaim_one(ump_pool_t *pool, int device, size_t max_n,
                       bool bigger);
/* Unmaps the chunks of granules [g, g+k) (mapped, in no block) and parks
 * them as idle; their addresses go back to the free ranges. */
int chunks_unmap_to_idle(ump_pool_t *pool, size_t g, size_t k);

/* Unmaps every cached chunk (they go idle), so that their addresses
 * coalesce. */
void chunks_reclaim_all(ump_pool_t *pool);

#endif
