#include "config.h"

#include "mem/sizeclass.h"

#define SC4(i) SC_SIZE(i), SC_SIZE(i + 1), SC_SIZE(i + 2), SC_SIZE(i + 3)
const uint32_t sc_bytes[SC_COUNT] = {
    SC4(0),  SC4(4),  SC4(8),  SC4(12), SC4(16), SC4(20),
    SC4(24), SC4(28), SC4(32), SC4(36), SC4(40),
};
_Static_assert(SC_SIZE(SC_COUNT - 1) == SC_MAX, "the last class is SC_MAX");

unsigned sc_count_for_chunk(size_t chunk_size)
{
    unsigned n = 0;
    while (n < SC_COUNT && sc_size(n) * 2 <= chunk_size)
        n++;
    return n;
}
