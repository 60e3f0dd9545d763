/*
 * Size classes for small allocations, which come from slabs (one chunk cut
 * into equal objects). Classes are multiples of 256 bytes (CUDA's allocation
 * alignment): 256, 512, 768, 1024, then four per doubling (1280, 1536, 1792,
 * 2048, 2560, ...) up to 1 MiB, so rounding wastes at most 20%. Anything
 * bigger than the largest class the pool uses is a run of whole chunks.
 */
#ifndef UMP_SIZECLASS_H
#define UMP_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#define SC_QUANTUM 256u
#define SC_MAX ((size_t)1 << 20)
#define SC_COUNT 44 /* classes from 256 B to SC_MAX */

/* Class index of size, for 0 < size <= SC_MAX. */
static inline unsigned sc_index(size_t size)
{
    if (size <= 1024)
        return (unsigned)((size + SC_QUANTUM - 1) / SC_QUANTUM) - 1;
    size_t x = size - 1;
    unsigned lg = 63u - (unsigned)__builtin_clzll(x); /* 2^lg <= x < 2^(lg+1) */
    unsigned quarter = (unsigned)(x >> (lg - 2)) & 3u;
    return 4u + (lg - 10u) * 4u + quarter;
}

/* Object size of class idx, as a constant expression (the table below):
 * the first four step by the quantum, then four per doubling from 1 KiB.
 * SC_BASE's shift stays non-negative for every idx (compilers check the
 * branch not taken too). */
#define SC_BASE(idx) (1024u << ((idx) < 4 ? 0 : ((idx) - 4) / 4))
#define SC_SIZE(idx)                                                         \
    ((idx) < 4 ? ((idx) + 1) * SC_QUANTUM                                   \
               : SC_BASE(idx) + (((idx) - 4) % 4 + 1) * (SC_BASE(idx) / 4))

/* SC_SIZE of every class: one load on the hot path (sizeclass.c). */
extern const uint32_t sc_bytes[SC_COUNT];

/* Object size of class idx < SC_COUNT. */
static inline size_t sc_size(unsigned idx)
{
    return sc_bytes[idx];
}

/* Number of classes whose objects fit at least twice in a chunk of
 * chunk_size bytes (bigger requests become chunk runs). */
unsigned sc_count_for_chunk(size_t chunk_size);

#endif
