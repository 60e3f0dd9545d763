/*
 * "interleave": stripes an allocation's chunks over a set of devices, in
 * proportion to weights, so that a device reading it pulls from all of them
 * at once (aggregate bandwidth). Arguments: "D*W+D*W+..." (weight 1 when
 * "*W" is left out), e.g. "interleave=0+1+2+3" or "interleave=0*2+1"; by
 * default every device, weight 1. The stripe is one chunk; each allocation's
 * stripes start at the requesting device when it is in the set, so a
 * one-chunk allocation stays local. A device of the set that is full is
 * skipped, and so is one the requesting device cannot reach (no peer
 * access); when the whole set is full the allocation fails (-ENOMEM): the
 * set is what was asked for.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "place/builtin.h"

struct interleave {
    int n;
    int dev[UMP_MAX_DEVICES];
    unsigned weight[UMP_MAX_DEVICES];
};

static int parse_args(const ump_place_view_t *view, const char *args,
                      struct interleave *il)
{
    const char *p = args;
    while (*p) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || d < 0 || d >= view->ndev || il->n == UMP_MAX_DEVICES)
            return -EINVAL;
        long w = 1;
        if (*end == '*') {
            p = end + 1;
            w = strtol(p, &end, 10);
            if (end == p || w < 1 || w > 1024)
                return -EINVAL;
        }
        for (int i = 0; i < il->n; i++)
            if (il->dev[i] == d)
                return -EINVAL; /* a device twice */
        il->dev[il->n] = (int)d;
        il->weight[il->n++] = (unsigned)w;
        if (*end == '+')
            end++;
        else if (*end)
            return -EINVAL;
        p = end;
    }
    return il->n ? 0 : -EINVAL;
}

static int interleave_init(const ump_place_view_t *view, const char *args,
                           void **state_p)
{
    struct interleave *il = calloc(1, sizeof(*il));
    if (!il)
        return -ENOMEM;
    if (args) {
        if (parse_args(view, args, il)) {
            free(il);
            return -EINVAL;
        }
    } else {
        for (int d = 0; d < view->ndev; d++) {
            il->dev[d] = d;
            il->weight[d] = 1;
        }
        il->n = view->ndev;
    }
    *state_p = il;
    return 0;
}

static int interleave_place(void *state, const ump_place_request_t *req,
                            const ump_place_view_t *view,
                            ump_place_part_t *parts, size_t cap,
                            size_t *nparts_p)
{
    const struct interleave *il = state;
    size_t avail[UMP_MAX_DEVICES];
    memcpy(avail, view->free_chunks, (size_t)view->ndev * sizeof(*avail));
    int first = 0;
    for (int i = 0; i < il->n; i++)
        if (il->dev[i] == req->device)
            first = i;
    size_t left = req->chunks, np = 0;
    while (left) {
        bool progress = false;
        for (int k = 0; k < il->n && left; k++) {
            int i = (first + k) % il->n, d = il->dev[i];
            if (!pol_reachable(view, req->device, d))
                continue;
            size_t take = il->weight[i];
            if (take > avail[d])
                take = avail[d];
            if (take > left)
                take = left;
            if (!take)
                continue;
            if (pol_add(parts, cap, &np, d, take))
                return -ENOMEM; /* more stripes than the plan may hold */
            avail[d] -= take;
            left -= take;
            progress = true;
        }
        if (!progress)
            return -ENOMEM;
    }
    *nparts_p = np;
    return 0;
}

const ump_policy_t policy_interleave = {
    .version = UMP_POLICY_VERSION,
    .name = "interleave",
    .init = interleave_init,
    .place = interleave_place,
    .fini = free,
};
