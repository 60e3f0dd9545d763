#include "config.h"

#include "mem/sizeclass.h"

unsigned sc_count_for_chunk(size_t chunk_size)
{
    unsigned n = 0;
    while (n < SC_COUNT && sc_size(n) * 2 <= chunk_size)
        n++;
    return n;
}
