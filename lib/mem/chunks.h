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
 * 2 MiB, 28 us + 86 us for 1 GiB), so new memory is created in as few
 * chunks as the request needs, each of exactly the granules it covers: a
 * 100 MiB allocation is one chunk. How large one may be depends on what the
 * device holds. On a device with no freed memory (cold: a first
 * allocation, or after ump_trim) up to max_chunk (1 GiB): a cold 1 GiB
 * allocation is one handle, as a raw cuMemCreate would be. Once the device
 * holds freed memory, up to warm_chunk (64 MiB): a chunk is what is reused,
 * stitched and given back whole, and a 1 GiB chunk that a few smaller
 * allocations later share holds its whole gigabyte for any one of them.
 *
 * Carving. Freed memory is reused in place where a request fits in a cached
 * block. A block that is exactly the request's size, or begins with whole
 * chunks of its size, serves any request (an offloadable one only where
 * no live allocation shares the block's edge chunks). A plain allocation
 * (not offloadable) may also take the front of a bigger block whatever its
 * chunks: its first and last chunk may then be shared with its neighbours
 * (live allocations or cached memory), as PyTorch's expandable segments
 * share a 20 MiB page between blocks. A training step whose tensor sizes
 * differ from the last one's then makes no driver call, where whole-chunk
 * reuse remaps one or more chunks per tensor. The price is holes: cached
 * granules of a chunk that a live allocation shares can be carved again,
 * but not stitched into another range or given back, nor do they count as
 * room for placement (chunks_available). The pool carves while the
 * device's peak reserved memory, with the request, stays within half its
 * capacity (config carve); closer to full it reuses chunks whole, since a
 * hole could then cost an allocation. A chunk is what moves between
 * tiers, so an allocation that shares one is given chunks of its own
 * before it moves, and cannot move while a live neighbour shares them
 * (tier/residency.c, res_unshare).
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
/* What a range being built may have in common with its neighbours. */
enum chunks_share {
    SHARE_NONE,  /* whole chunks only: it may move (offloadable), a slab */
    SHARE_KEEP,  /* a chunk that a neighbour already shares, no new one */
    SHARE_CARVE, /* any granule: carving cuts chunks */
};
/* What n granules for device may share: SHARE_NONE where they must be
 * whole chunks (whole: they may move) or on a host place; SHARE_CARVE
 * with config carve while the device's peak stays within half of it, and
 * SHARE_KEEP beyond (see Carving above: there a hole could cost an
 * allocation, where whole chunks can always be stitched). */
enum chunks_share chunks_share_for(ump_pool_t *pool, int device, size_t n,
                                   bool whole);
/* n granules of cached memory on device: a block of exactly n, else the
 * front of a bigger one that begins with whole chunks of n granules, else
 * with SHARE_CARVE the front of the smallest bigger one, whatever its
 * chunks; -ENOENT when no block serves. */
int chunks_reuse(ump_pool_t *pool, int device, size_t n,
                 enum chunks_share share, size_t *start_p);
/* Do granules [g, g+n), mapped, share a chunk with granules outside them
 * (a carved run's edge)? */
bool chunks_shared(ump_pool_t *pool, size_t g, size_t n);
/* Maps a new range of n granules as the plan says, from chunks_get's
 * chunks. On error nothing stays mapped in it and the pool's accounting is
 * as before. */
int chunks_build(ump_pool_t *pool, const ump_place_part_t *parts,
                 size_t nparts, size_t n, size_t *start_p);
/* chunks_build at exactly [start, start+n) (a checkpoint's restore):
 * -EADDRINUSE when those addresses are not free. */
int chunks_build_at(ump_pool_t *pool, const ump_place_part_t *parts,
                    size_t nparts, size_t n, size_t start);
/* n granules of device from a cached block grown in place: the largest
 * block smaller than n with free addresses right after it for the rest,
 * which is mapped there from chunks_get's chunks. The block's memory
 * serves with no driver call, where stitching would move it. -ENOENT when
 * no block can grow so; on other errors the block is cached as before. */
int chunks_extend(ump_pool_t *pool, int device, size_t n,
                  enum chunks_share share, size_t *start_p);
/* Mapped granules [start, start+n) become cached blocks (per device,
 * merged with cached neighbours). */
void chunks_cache(ump_pool_t *pool, size_t start, size_t n);
/* One chunk of device of at most `left` granules, not mapped: idle, else
 * cached chunks stitched (unmapped from their blocks) where the cost model
 * says it pays, else a bigger idle or cached chunk released to make room
 * for smaller ones, else new, else any cached chunk. -ENOMEM when none. */
int chunks_get(ump_pool_t *pool, int device, size_t left, struct chunk **c_p);
/* An unmapped chunk becomes idle (reused before new ones are created). */
void chunks_idle_push(ump_pool_t *pool, struct chunk *c);
/* Does moving cached chunks of ns[0..k) granules into a range of `left`
 * granules (the rest created) cost no more driver time than creating all
 * `left` anew (topo/drivercost.h)? Creating would leave them cached beside
 * the new memory: the footprint grows by what they hold, and giving that
 * back (the release policy, ump_trim) costs an unmap and a release each.
 * The pool puts footprint first, so that cost is charged to creating,
 * whenever it is paid:
 *     remap(ns) + create(left - sum ns)  <=  create(left) + drop(ns)
 * With the H200's table one chunk always pays to move (2 MiB: 56 us against
 * 48 + 37), but many small ones lose to one large new one: 1 GiB from 512
 * cached 2 MiB chunks costs 29 ms to stitch, 0.1 ms to create plus 19 ms
 * to drop them. */
bool chunks_stitch_pays(ump_pool_t *pool, const size_t *ns, size_t k,
                        size_t left);
/* Devices that can reach memory of device d (itself and its peers), into
 * devs; returns how many. */
int chunks_accessors(ump_pool_t *pool, int d, int *devs);
/* Updates the device's and the pool's peak of in-use memory after the
 * device's in-use memory grew. */
void chunks_note_in_use(ump_pool_t *pool, int device);
/* The release policy (config release_threshold and release_window, like
 * cudaMallocAsync's release threshold): while the device holds more than
 * its peak use of the current and the previous window plus the threshold,
 * idle chunks and then the least recently freed cached chunks go back to
 * the driver. A workload that peaks every few seconds (training steps)
 * keeps its memory; one that shrank for good gives the difference back,
 * and on a shared GPU the others get it. chunks_over_surplus says whether
 * there is anything to give back (runs.c then unparks the device's runs
 * first: they are cached memory too). */
bool chunks_over_surplus(ump_pool_t *pool, int device);
void chunks_release_surplus(ump_pool_t *pool, int device);
/* Device d has failed (pool->failed says so already): it offers no room,
 * its cached and idle chunks go back to the driver. What is still mapped
 * (lost allocations) is given back as it is freed: chunks_cache and
 * chunks_idle_push release a failed device's memory instead of keeping
 * it. */
void chunks_fail_device(ump_pool_t *pool, int d);
/* Is any of granules [g, g+n), which belong to one allocation, mapped to
 * a failed device's chunk (its bytes are lost)? */
bool chunks_range_failed(ump_pool_t *pool, size_t g, size_t n);
/* Gives every run and slab that shares the chunk at granule g (carved,
 * see above) a chunk of its own for its granules: new chunks on its device,
 * filled from it by a device copy on stream, mapped in their place; the
 * chunk's cached granules become free addresses, and the chunk is
 * released. Nobody may touch the chunk's memory meanwhile: the caller
 * knows (ump_pool_suspend; ump_evict of its one live run). The copies are
 * waited for. On error nothing changed: the chunk is mapped back where the
 * switch had begun, and what the driver refuses to undo is logged (data
 * lost only if it refuses to map the chunk back). */
int chunks_unshare(ump_pool_t *pool, size_t g, void *stream);
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
