/*
 * Placement policies as the pool sees them: one instance per pool and
 * policy text ("local", "interleave=0+1", "/path/libmine.so"), made on first
 * use; the view of the machine a policy reads; and the checks every plan
 * passes before the pool carries it out (a policy's bug or a plugin's must
 * not corrupt the pool).
 *
 * This layer sees no pool: the caller hands in what a policy may read (the
 * chunks each device could supply now, `avail`), so placement never reaches
 * into the allocator and the allocator never second-guesses a plan. The
 * caller serialises calls on one set (the pool calls with pool->lock held).
 */
#ifndef UMP_POLICY_H
#define UMP_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "topo/topology.h"
#include "umpool.h"

#define POLICY_SPEC_MAX 256

struct policy_inst {
    char spec[POLICY_SPEC_MAX];
    const ump_policy_t *p;
    void *state;
    void *dl; /* plugin handle */
    struct policy_inst *next;
};

/* A pool's policies and the machine as they see it. */
struct policy_set {
    int ndev;
    ump_device_props_t *props; /* per device */
    ump_link_props_t *links;   /* per pair, [from * ndev + to] */
    struct policy_inst *list;  /* instances, by text */
    struct policy_inst *local; /* "local" */
    struct policy_inst *dflt;  /* the config's `policy` */
};

/* Builds the view of ndev devices of topo (capacity[d] bytes each) and the
 * instances of "local" and of dflt_spec, checked once at pool creation.
 * avail: chunks each device could supply now. On error the set is empty
 * (policy_set_fini is still fine). */
int policy_set_init(struct policy_set *set, const struct ump_topology *topo,
                    const size_t *capacity, int ndev, const char *dflt_spec,
                    const size_t *avail);
void policy_set_fini(struct policy_set *set);
/* The instance of spec when it was made already, else NULL. */
struct policy_inst *policy_lookup(const struct policy_set *set,
                                  const char *spec);
/* The instance for spec, made on first use. -EINVAL with one log line for
 * an unknown name, a plugin that cannot be loaded or has the wrong version,
 * or an init that fails. */
int policy_get(struct policy_set *set, const char *spec, const size_t *avail,
               struct policy_inst **inst_p);
/* Does inst put a whole request on the requesting device whenever that
 * device can supply it? Then memory already on that device (a cached block,
 * a parked or thread-cached run) is the plan it would make, and the caller
 * may take it without asking: only "local" promises that. */
static inline bool policy_prefers_requester(const struct policy_set *set,
                                            const struct policy_inst *inst)
{
    return inst == set->local;
}
/* The view a policy reads, over avail (which must outlive it). */
void policy_view(const struct policy_set *set, const size_t *avail,
                 ump_place_view_t *view);
/* Asks inst for a plan of req->chunks chunks and checks it against avail.
 * *parts_p is malloc'ed (caller frees). -ENOMEM when it does not fit,
 * -EINVAL for a plan that breaks the rules (logged). */
int policy_plan(const struct policy_set *set, struct policy_inst *inst,
                const ump_place_request_t *req, const size_t *avail,
                ump_place_part_t **parts_p, size_t *nparts_p);

#endif
