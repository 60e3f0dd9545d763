/*
 * Placement policies as the pool sees them: one instance per pool and
 * policy text ("local", "interleave=0+1", "/path/libmine.so"), made on first
 * use; the view of the machine a policy reads; and the checks every plan
 * passes before the pool carries it out (a policy's bug or a plugin's must
 * not corrupt the pool). All functions run with pool->lock held.
 */
#ifndef UMP_POLICY_H
#define UMP_POLICY_H

#include "pool.h"

#define POLICY_SPEC_MAX 256

struct policy_inst {
    char spec[POLICY_SPEC_MAX];
    const ump_policy_t *p;
    void *state;
    void *dl; /* plugin handle */
    struct policy_inst *next;
};

/* The instance for spec, made on first use. -EINVAL with one log line for
 * an unknown name, a plugin that cannot be loaded or has the wrong version,
 * or an init that fails. */
int policy_get(ump_pool_t *pool, const char *spec, struct policy_inst **inst_p);
/* Checks a spec once, at pool creation (the `policy` config key). */
int policy_setup(ump_pool_t *pool);
void policy_free_all(ump_pool_t *pool);
/* The pool's view: free chunks per device now (filled into free). */
void policy_view(ump_pool_t *pool, ump_place_view_t *view, size_t *avail);
/* Asks inst for a plan of req->chunks chunks and checks it. *parts_p is
 * malloc'ed (caller frees). -ENOMEM when it does not fit, -EINVAL for a
 * plan that breaks the rules (logged). */
int policy_plan(ump_pool_t *pool, struct policy_inst *inst,
                const ump_place_request_t *req, ump_place_part_t **parts_p,
                size_t *nparts_p);

#endif
