/* Small helpers shared by every file of the library. */
#ifndef UMP_INTERNAL_H
#define UMP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/log.h"

/* Only the public API is exported; everything else stays hidden. */
#define UMP_EXPORT __attribute__((visibility("default")))

#define ump_likely(x) __builtin_expect(!!(x), 1)
#define ump_unlikely(x) __builtin_expect(!!(x), 0)

/* Internal invariants, checked with --enable-debug only. Never used on user
 * input: bad input gets an error code, not an abort. */
#ifdef UMP_DEBUG
#define UMP_ASSERT(c)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            ump_log_error("assertion failed: %s (%s:%d)", #c, __FILE__,        \
                          __LINE__);                                           \
            abort();                                                           \
        }                                                                      \
    } while (0)
#else
#define UMP_ASSERT(c) ((void)0)
#endif

#define UMP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define UMP_ALIGN_UP(x, a) (((x) + (a) - 1) & ~((__typeof__(x))(a) - 1))
#define UMP_CACHELINE 64

static inline int ump_is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* The largest power of two <= x (x > 0). */
static inline size_t ump_pow2_floor(size_t x)
{
    return (size_t)1 << (63 - __builtin_clzll(x));
}

#endif
