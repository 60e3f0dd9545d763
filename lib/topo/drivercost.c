#include "config.h"

#include "topo/drivercost.h"

/* One measured point: a handle size (log2 bytes) and its cost in ns. */
struct point {
    unsigned lg;
    uint32_t ns;
};

/* DESIGN.md's H200 table; where it gives a range, its middle. */
static const struct point create_pts[] = {{21, 13500}, {26, 39000},
                                          {30, 28000}};
static const struct point map_pts[] = {{21, 1300}};
static const struct point access_pts[] = {{21, 33000}, {30, 86000}};
static const struct point unmap_pts[] = {{21, 21500}};
static const struct point release_pts[] = {{21, 15000}};

static const struct {
    const struct point *p;
    unsigned n;
} table[DRV_NOPS] = {
    [DRV_CREATE] = {create_pts, 3},
    [DRV_MAP] = {map_pts, 1},
    [DRV_SET_ACCESS] = {access_pts, 2},
    [DRV_UNMAP] = {unmap_pts, 1},
    [DRV_RELEASE] = {release_pts, 1},
};

/* log2(bytes) in 1/1024ths, for interpolating between points. */
static uint64_t lg_fixed(size_t bytes)
{
    if (bytes < 2)
        return 0;
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)bytes);
    /* The fraction from the bits below the top one: linear in between, a
     * fine enough curve for a cost model. */
    uint64_t rest = lg >= 10 ? (bytes >> (lg - 10)) & 1023
                             : ((uint64_t)bytes << (10 - lg)) & 1023;
    return ((uint64_t)lg << 10) | rest;
}

uint64_t drvcost_ns(enum drv_op op, size_t bytes)
{
    if ((unsigned)op >= DRV_NOPS)
        return 0;
    const struct point *p = table[op].p;
    unsigned n = table[op].n;
    uint64_t x = lg_fixed(bytes);
    if (x <= (uint64_t)p[0].lg << 10)
        return p[0].ns;
    for (unsigned i = 1; i < n; i++) {
        uint64_t x1 = (uint64_t)p[i].lg << 10, x0 = (uint64_t)p[i - 1].lg << 10;
        if (x <= x1) {
            int64_t y0 = p[i - 1].ns, y1 = p[i].ns;
            return (uint64_t)(y0 + (y1 - y0) * (int64_t)(x - x0) /
                                       (int64_t)(x1 - x0));
        }
    }
    return p[n - 1].ns;
}
