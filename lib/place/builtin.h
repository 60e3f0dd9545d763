/*
 * The built-in placement policies, one file each, behind the public
 * interface of umpool.h (ump_policy_t): a policy reads the request and a
 * read-only view of the machine and of what each device can supply, and
 * returns a plan; it never touches memory. Helpers shared by the policies
 * carry the prefix pol_.
 */
#ifndef UMP_POLICIES_BUILTIN_H
#define UMP_POLICIES_BUILTIN_H

#include <stdbool.h>
#include <stddef.h>

#include "umpool.h"

extern const ump_policy_t policy_local;
extern const ump_policy_t policy_interleave;
extern const ump_policy_t policy_balanced;
extern const ump_policy_t policy_domain;

static inline const ump_link_props_t *pol_link(const ump_place_view_t *view,
                                               int from, int to)
{
    return &view->links[from * view->ndev + to];
}

/* The built-in policy called name, or NULL. */
const ump_policy_t *pol_builtin(const char *name);

/* Can device `from` use memory of device d (itself, or a peer)? The pool
 * refuses plans with memory the requesting device cannot reach. */
bool pol_reachable(const ump_place_view_t *view, int from, int d);

/* Devices other than dev that dev can reach, nearest first: bandwidth
 * descending, then hops, then index (the order a spill-over follows).
 * Returns their number. */
int pol_nearest(const ump_place_view_t *view, int dev, int *order);


/* Appends n chunks of device to the plan, merging with the last part when
 * it is the same device. -ENOSPC when cap parts are used. */
int pol_add(ump_place_part_t *parts, size_t cap, size_t *np, int device,
            size_t n);

/* Fills a plan for `left` chunks from devices in the given order, taking
 * what each can supply (avail[] is updated). Returns what is still left. */
size_t pol_fill(ump_place_part_t *parts, size_t cap, size_t *np,
                size_t *avail, const int *order, int norder, size_t left);

#endif
