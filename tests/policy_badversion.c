/*
 * A broken plugin for test_policies: the right symbol, but built for an
 * interface version umpool does not speak (99). Loading it must fail with
 * -EINVAL and one log line giving both versions, before anything of it is
 * called: place() here would take everything from device 0.
 */
#include "config.h"

#include <errno.h>

#include <umpool.h>

static int first_place(void *state, const ump_place_request_t *req,
                       const ump_place_view_t *view, ump_place_part_t *parts,
                       size_t cap, size_t *nparts_p)
{
    (void)state;
    if (cap < 1 || view->free_chunks[0] < req->chunks)
        return -ENOMEM;
    parts[0] = (ump_place_part_t){.device = 0, .chunks = req->chunks};
    *nparts_p = 1;
    return 0;
}

__attribute__((visibility("default"))) const ump_policy_t umpool_policy = {
    .version = 99,
    .name = "badversion",
    .place = first_place,
};
