/* Helpers shared by the built-in policies, and their registry. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "place/builtin.h"

const ump_policy_t *pol_builtin(const char *name)
{
    static const ump_policy_t *const all[] = {
        &policy_local, &policy_interleave, &policy_balanced, &policy_domain};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

bool pol_reachable(const ump_place_view_t *view, int from, int d)
{
    return d == from || pol_link(view, from, d)->peer;
}

int pol_nearest(const ump_place_view_t *view, int dev, int *order)
{
    int n = 0;
    for (int d = 0; d < view->ndev; d++)
        if (d != dev && pol_reachable(view, dev, d))
            order[n++] = d;
    /* insertion sort: a handful of devices */
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        const ump_link_props_t *lx = pol_link(view, dev, x);
        while (j > 0) {
            const ump_link_props_t *ly = pol_link(view, dev, order[j - 1]);
            bool before = lx->bandwidth_gbs > ly->bandwidth_gbs ||
                          (lx->bandwidth_gbs == ly->bandwidth_gbs &&
                           (lx->hops < ly->hops ||
                            (lx->hops == ly->hops && x < order[j - 1])));
            if (!before)
                break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    return n;
}

int pol_add(ump_place_part_t *parts, size_t cap, size_t *np, int device,
            size_t n)
{
    if (!n)
        return 0;
    if (*np && parts[*np - 1].device == device) {
        parts[*np - 1].chunks += n;
        return 0;
    }
    if (*np == cap)
        return -ENOSPC;
    parts[(*np)++] = (ump_place_part_t){device, n};
    return 0;
}

size_t pol_fill(ump_place_part_t *parts, size_t cap, size_t *np,
                size_t *avail, const int *order, int norder, size_t left)
{
    for (int i = 0; i < norder && left; i++) {
        int d = order[i];
        size_t take = avail[d] < left ? avail[d] : left;
        if (pol_add(parts, cap, np, d, take))
            break;
        avail[d] -= take;
        left -= take;
    }
    return left;
}
