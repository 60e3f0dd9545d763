#include "config.h"

#include <errno.h>

#include "placement.h"

int placement_plan(const struct ump_topology *topo, const size_t *avail,
                   int device, size_t n, struct plan_part *parts,
                   int *nparts_p)
{
    int order[UMP_MAX_DEVICES];
    order[0] = device;
    int nord = 1 + topo_nearest(topo, device, order + 1);
    int np = 0;
    size_t left = n;
    for (int i = 0; i < nord && left; i++) {
        int d = order[i];
        size_t take = avail[d] < left ? avail[d] : left;
        if (!take)
            continue;
        parts[np++] = (struct plan_part){d, take};
        left -= take;
    }
    if (left)
        return -ENOMEM;
    *nparts_p = np;
    return 0;
}
