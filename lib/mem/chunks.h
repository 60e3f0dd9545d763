/*
 * Physical memory behind the pool's addresses: creating chunks, keeping
 * freed ones mapped as cached blocks (reused with no driver call), and
 * building new mapped ranges from idle, new or reclaimed chunks. Mapping
 * costs are per chunk and tens of microseconds on a real GPU, so this is the
 * slow path and the order of preference is: a cached block of the right
 * device (no driver call), then idle chunks, then new chunks while the device
 * has room, and only then chunks unmapped from cached blocks (stitching).
 *
 * Chunk sizes. The address space is cut into granules of chunk_size (2 MiB:
 * the driver's granularity on an H200), and slabs and stitching work in
 * granules. But each driver handle costs about the same to create, map and
 * give access to whatever its size (H200: 13.5 us create + 33 us access for
 * 2 MiB, 28 us + 86 us for 1 GiB), so a cold 1 GiB allocation made of 512
 * handles of 2 MiB would cost ~24 ms, 200x one 1 GiB handle. New memory is
 * therefore created in the largest power-of-two chunks that fit what is
 * still needed, up to max_chunk (1 GiB by default): a cold 1 GiB allocation
 * is one handle, 100 MiB is three (64 + 32 + 4 MiB). Freed chunks are reused
 * whole: cached blocks are carved only at chunk boundaries, and stitching
 * maps whole idle chunks that fit; a chunk too big for the hole being
 * filled is released so that smaller ones can be created in its place.
 *
 * Every function here runs with pool->lock held.
 */
#ifndef UMP_CHUNKS_H
#define UMP_CHUNKS_H

#include <stddef.h>

#include "mem/pool.h"

/* Chunks that device could supply now: room, idle and cached. */
size_t chunks_available(ump_pool_t *pool, int device);
/* chunks_available of every device, into avail[0..ndev): what placement
 * policies see. */
void chunks_available_all(ump_pool_t *pool, size_t *avail);
/* n granules of cached memory on device (exact or carved from a bigger
 * block); -ENOENT when no block is big enough. */
int chunks_reuse(ump_pool_t *pool, int device, size_t n, size_t *start_p);
/* Maps a new range of n granules as the plan says. On error nothing stays
 * mapped in it and the pool's accounting is as before. */
int chunks_build(ump_pool_t *pool, const ump_place_part_t *parts,
                 size_t nparts, size_t n, size_t *start_p);
/* Mapped granules [start, start+n) become cached blocks (per device,
 * merged with cached neighbours). */
void chunks_cache(ump_pool_t *pool, size_t start, size_t n);
/* One chunk of device of at most `left` granules, not mapped: idle, else
 * new, else reclaimed from cached blocks; an idle chunk too big for what is
 * left is released to make room for smaller ones. -ENOMEM when none. */
int chunks_get(ump_pool_t *pool, int device, size_t left, struct chunk **c_p);
/* An unmapped chunk becomes idle (reused before new ones are created). */
void chunks_idle_push(ump_pool_t *pool, struct chunk *c);
/* Devices that can reach memory of device d (itself and its peers), into
 * devs; returns how many. */
int chunks_accessors(ump_pool_t *pool, int d, int *devs);
/* Updates the device's and the pool's peak of in-use memory after the
 * device's in-use memory grew. */
void chunks_note_in_use(ump_pool_t *pool, int device);
/* Unmaps every cached block and releases every idle chunk. */
void chunks_trim(ump_pool_t *pool);
/* Device of the chunk mapped at granule g. */
static inline int chunks_device(ump_pool_t *pool, size_t g)
{
    return pool->vas.gran[g].chunk->device;
}
/* The chunk mapped at granule g. */
static inline struct chunk *chunks_at(ump_pool_t *pool, size_t g)
{
    return pool->vas.gran[g].chunk;
}

#endif
