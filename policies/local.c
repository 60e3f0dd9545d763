/*
 * "local": the requesting device; when it is full, the rest spills over to
 * the nearest devices (link bandwidth, then hops), then -ENOMEM. With
 * UMP_HINT_NO_SPILL, the requesting device only. Small, fast, and what a
 * CUDA program expects: memory where the kernel runs.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "place/builtin.h"

static int local_place(void *state, const ump_place_request_t *req,
                       const ump_place_view_t *view, ump_place_part_t *parts,
                       size_t cap, size_t *nparts_p)
{
    (void)state;
    int order[UMP_MAX_DEVICES];
    size_t avail[UMP_MAX_DEVICES];
    memcpy(avail, view->free_chunks, (size_t)view->ndev * sizeof(*avail));
    order[0] = req->device;
    int n = 1;
    if (!(req->flags & UMP_HINT_NO_SPILL))
        n += pol_nearest(view, req->device, order + 1);
    size_t np = 0;
    if (pol_fill(parts, cap, &np, avail, order, n, req->chunks))
        return -ENOMEM;
    *nparts_p = np;
    return 0;
}

const ump_policy_t policy_local = {
    .version = UMP_POLICY_VERSION,
    .name = "local",
    .place = local_place,
};
