/*
 * The virtual address manager's bookkeeping: one reservation cut into
 * granules of the pool's chunk size, a tag per granule saying what the
 * granule is (free, a cached block, a slab, a run), and the address-ordered
 * free ranges (granules with no physical memory behind them), coalesced.
 *
 * Tags are read without the pool lock on the allocation hot path (ump_free
 * finds a pointer's slab or run from its granule), so each tag is one atomic
 * word: the owner's address with the kind in the low bits. They are written
 * under the pool lock only. No backend call happens here.
 */
#ifndef UMP_VAS_H
#define UMP_VAS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum vas_kind {
    VAS_FREE = 0,   /* no physical memory; part of a free range */
    VAS_CACHED = 1, /* mapped, part of a cached block (owner: the block) */
    VAS_SLAB = 2,   /* mapped, a slab (owner: the slab) */
    VAS_RUN = 3,    /* mapped, part of a run (owner: the run) */
};
#define VAS_KIND_MASK ((uintptr_t)3)

struct chunk;

struct vas_granule {
    _Atomic uintptr_t tag; /* owner | kind */
    struct chunk *chunk;   /* physical chunk mapped here (pool lock) */
};

struct vas_range {
    size_t start, n; /* in granules */
};

struct vas {
    uintptr_t base;
    size_t size;
    unsigned shift; /* log2 of the granule (= chunk) size */
    size_t ngran;
    struct vas_granule *gran; /* ngran entries, mmap'd lazily */
    struct vas_range *free;   /* sorted by start, never adjacent */
    size_t nfree, capfree;
};

/* Sets up the bookkeeping of a reservation [base, base+size); all free. */
int vas_init(struct vas *v, void *base, size_t size, size_t granule);
void vas_fini(struct vas *v);

/* Takes n contiguous free granules (first fit); -ENOMEM when none. */
int vas_take(struct vas *v, size_t n, size_t *start_p);
/* Granules of the free range beginning exactly at start (0: none). */
size_t vas_free_at(const struct vas *v, size_t start);
/* Takes the first n granules of the free range beginning exactly at start;
 * -ENOMEM when there is none or it is shorter. */
int vas_take_at(struct vas *v, size_t start, size_t n);
/* Takes exactly [start, start+n), which must lie inside one free range
 * (restoring a checkpoint puts allocations at their old addresses);
 * -EADDRINUSE when any of it is not free, -ENOMEM when the range table
 * cannot grow. */
int vas_take_range(struct vas *v, size_t start, size_t n);
/* Gives granules back to the free ranges, coalescing with neighbours.
 * Caller: they are not free now. -ENOMEM only if the range table can't grow. */
int vas_give(struct vas *v, size_t start, size_t n);
/* Largest free range, in granules. */
size_t vas_largest_free(const struct vas *v);

static inline bool vas_contains(const struct vas *v, const void *p)
{
    return (uintptr_t)p - v->base < v->size;
}
static inline size_t vas_index(const struct vas *v, const void *p)
{
    return ((uintptr_t)p - v->base) >> v->shift;
}
static inline void *vas_addr(const struct vas *v, size_t g)
{
    return (void *)(v->base + (g << v->shift));
}
static inline uintptr_t vas_tag(const struct vas *v, size_t g)
{
    return atomic_load_explicit(&v->gran[g].tag, memory_order_acquire);
}
static inline int vas_tag_kind(uintptr_t tag) { return (int)(tag & VAS_KIND_MASK); }
static inline void *vas_tag_owner(uintptr_t tag)
{
    return (void *)(tag & ~VAS_KIND_MASK);
}
/* Tags granules [start, start+n) with kind and owner. Pool lock held. */
void vas_set(struct vas *v, size_t start, size_t n, int kind, void *owner);

#endif
