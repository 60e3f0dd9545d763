/*
 * A broken plugin for test_policies: its plans break the rules the pool
 * checks, one way per instance, chosen by the argument after '=':
 *   (none), over  more chunks of device 0 than it can supply
 *   short         parts adding up to one chunk less than asked
 *   excess        parts adding up to one chunk more (each device has room)
 *   range         a device past the last one
 *   negative      device -1
 *   empty         a part of no chunks
 *   none          no parts at all
 *   overcap       claims one part more than the cap it was given (the parts
 *                 it wrote add up; the last one is beyond the buffer)
 *   placefail     place() fails with -EIO
 *   initfail      init() fails with -EIO
 * Each must give -EINVAL (or the failure) with one log line and leave the
 * pool as it was. policy_greedy_live counts instances between init and
 * fini, so that the test can see that the pool finalises them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <umpool.h>

enum kind {
    OVER,
    SHORT,
    EXCESS,
    RANGE,
    NEGATIVE,
    EMPTY,
    NONE,
    OVERCAP,
    PLACEFAIL,
    INITFAIL,
    WRAP
};

static const char *const kind_names[] = {
    "over",  "short", "excess",  "range",     "negative",
    "empty", "none",  "overcap", "placefail", "initfail", "wrap"};

__attribute__((visibility("default"))) int policy_greedy_live;

static int greedy_init(const ump_place_view_t *view, const char *args,
                       void **state_p)
{
    (void)view;
    int k = OVER;
    if (args) {
        k = -1;
        for (int i = 0; i < (int)(sizeof(kind_names) / sizeof(*kind_names));
             i++)
            if (!strcmp(args, kind_names[i]))
                k = i;
        if (k < 0)
            return -EINVAL;
    }
    if (k == INITFAIL)
        return -EIO;
    enum kind *st = malloc(sizeof(*st));
    if (!st)
        return -ENOMEM;
    *st = (enum kind)k;
    policy_greedy_live++;
    *state_p = st;
    return 0;
}

static void greedy_fini(void *state)
{
    policy_greedy_live--;
    free(state);
}

/* Writes what fits of the n parts given. */
static size_t put(ump_place_part_t *parts, size_t cap,
                  const ump_place_part_t *want, size_t n)
{
    size_t i;
    for (i = 0; i < n && i < cap; i++)
        parts[i] = want[i];
    return i;
}

static int greedy_place(void *state, const ump_place_request_t *req,
                        const ump_place_view_t *view, ump_place_part_t *parts,
                        size_t cap, size_t *nparts_p)
{
    size_t n = req->chunks, np = 0;
    int other = view->ndev > 1 ? 1 : 0;
    switch (*(const enum kind *)state) {
    case OVER: {
        ump_place_part_t w[] = {{0, view->free_chunks[0] + 1}};
        np = put(parts, cap, w, 1);
        break;
    }
    case SHORT: {
        ump_place_part_t w[] = {{0, n - 1}};
        np = n > 1 ? put(parts, cap, w, 1) : 0;
        break;
    }
    case EXCESS: {
        ump_place_part_t w[] = {{0, n}, {other, 1}};
        np = put(parts, cap, w, 2);
        break;
    }
    case RANGE: {
        ump_place_part_t w[] = {{view->ndev, n}};
        np = put(parts, cap, w, 1);
        break;
    }
    case NEGATIVE: {
        ump_place_part_t w[] = {{-1, n}};
        np = put(parts, cap, w, 1);
        break;
    }
    case EMPTY: {
        ump_place_part_t w[] = {{0, 0}, {other, n}};
        np = put(parts, cap, w, 2);
        break;
    }
    case NONE:
        break;
    case OVERCAP:
        for (np = 0; np < cap && np < n; np++)
            parts[np] = (ump_place_part_t){(int)(np % 2) * other, 1};
        if (np && np < n) /* cap below the request: pad the last */
            parts[np - 1].chunks += n - np;
        np = cap + 1;
        break;
    case WRAP: { /* sums that wrap around: 1 + SIZE_MAX + n */
        ump_place_part_t w[] = {{0, 1}, {0, (size_t)-1}, {0, n}};
        np = put(parts, cap, w, 3);
        break;
    }
    case PLACEFAIL:
    case INITFAIL:
        return -EIO;
    }
    *nparts_p = np;
    return 0;
}

__attribute__((visibility("default"))) const ump_policy_t umpool_policy = {
    .version = UMP_POLICY_VERSION,
    .name = "greedy",
    .init = greedy_init,
    .place = greedy_place,
    .fini = greedy_fini,
};
