/*
 * "balanced": each allocation goes to the device with the most free memory
 * (the requesting device on a tie), for many independent tensors that
 * should spread evenly. What does not fit there continues on the next
 * emptiest devices, unless UMP_HINT_NO_SPILL. Only devices the requesting
 * device can reach (itself and its peers) are considered.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "place/builtin.h"

static int balanced_place(void *state, const ump_place_request_t *req,
                          const ump_place_view_t *view,
                          ump_place_part_t *parts, size_t cap,
                          size_t *nparts_p)
{
    (void)state;
    size_t avail[UMP_MAX_DEVICES];
    memcpy(avail, view->free_chunks, (size_t)view->ndev * sizeof(*avail));
    int order[UMP_MAX_DEVICES], n = 0;
    for (int d = 0; d < view->ndev; d++)
        if (pol_reachable(view, req->device, d))
            order[n++] = d;
    /* emptiest first; the requesting device, then lower indices, on ties */
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        while (j > 0) {
            int y = order[j - 1];
            bool before = avail[x] > avail[y] ||
                          (avail[x] == avail[y] &&
                           (x == req->device ||
                            (y != req->device && x < y)));
            if (!before)
                break;
            order[j] = y;
            j--;
        }
        order[j] = x;
    }
    if (req->flags & UMP_HINT_NO_SPILL)
        n = 1;
    size_t np = 0;
    if (pol_fill(parts, cap, &np, avail, order, n, req->chunks))
        return -ENOMEM;
    *nparts_p = np;
    return 0;
}

const ump_policy_t policy_balanced = {
    .version = UMP_POLICY_VERSION,
    .name = "balanced",
    .place = balanced_place,
};
