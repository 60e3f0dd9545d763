/*
 * Placement: which devices supply the chunks of a new range. The built-in
 * rule is "local with spill-over": the requesting device first, then the
 * others nearest first (link bandwidth, then hops). Placement never touches
 * memory; the pool executes the plan. (The pluggable policies of policies/
 * will replace this function behind the same plan.)
 */
#ifndef UMP_PLACEMENT_H
#define UMP_PLACEMENT_H

#include <stddef.h>

#include "topology.h"

struct plan_part {
    int device;
    size_t n; /* chunks, in address order */
};

/* Plans n chunks for a request from device, given avail[d] chunks obtainable
 * on each device. Writes at most ndev parts; -ENOMEM when they don't add up. */
int placement_plan(const struct ump_topology *topo, const size_t *avail,
                   int device, size_t n, struct plan_part *parts,
                   int *nparts_p);

#endif
