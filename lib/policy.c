#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../policies/builtin.h"
#include "chunks.h"
#include "policy.h"

/* A plan longer than this is refused (an interleave of 2 MiB stripes over
 * 128 GiB): the pool carries out plans part by part. */
#define PLAN_MAX_PARTS 65536

void policy_view(ump_pool_t *pool, ump_place_view_t *view, size_t *avail)
{
    for (int d = 0; d < pool->ndev; d++)
        avail[d] = chunks_available(pool, d);
    *view = (ump_place_view_t){pool->ndev, avail, pool->props, pool->links};
}

static int load_plugin(struct policy_inst *inst, const char *path)
{
    inst->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!inst->dl) {
        ump_log_error("policy '%s': cannot load: %s", path, dlerror());
        return -EINVAL;
    }
    const ump_policy_t *p = dlsym(inst->dl, UMP_POLICY_SYMBOL);
    if (!p) {
        ump_log_error("policy '%s': no symbol %s in it", path,
                      UMP_POLICY_SYMBOL);
        return -EINVAL;
    }
    if (p->version != UMP_POLICY_VERSION) {
        ump_log_error("policy '%s': interface version %u, umpool expects %u",
                      path, p->version, UMP_POLICY_VERSION);
        return -EINVAL;
    }
    if (!p->name || !p->place) {
        ump_log_error("policy '%s': %s is incomplete (name and place are "
                      "required)", path, UMP_POLICY_SYMBOL);
        return -EINVAL;
    }
    inst->p = p;
    return 0;
}

int policy_get(ump_pool_t *pool, const char *spec, struct policy_inst **inst_p)
{
    for (struct policy_inst *i = pool->policies; i; i = i->next)
        if (!strcmp(i->spec, spec)) {
            *inst_p = i;
            return 0;
        }
    if (strlen(spec) >= POLICY_SPEC_MAX) {
        ump_log_error("policy '%.40s...': longer than %d bytes", spec,
                      POLICY_SPEC_MAX - 1);
        return -EINVAL;
    }
    struct policy_inst *inst = calloc(1, sizeof(*inst));
    if (!inst)
        return -ENOMEM;
    strcpy(inst->spec, spec);
    /* "name=args"; for a plugin path, '=' only after the last '/' */
    char what[POLICY_SPEC_MAX];
    strcpy(what, spec);
    const char *slash = strrchr(what, '/');
    char *eq = strchr(slash ? slash : what, '=');
    const char *args = NULL;
    if (eq) {
        *eq = '\0';
        args = eq + 1;
    }
    int rc = 0;
    if (slash) {
        rc = load_plugin(inst, what);
    } else if (!(inst->p = pol_builtin(what))) {
        ump_log_error("unknown policy '%s' (accepted: local, interleave, "
                      "balanced, domain, or the path of a plugin)", what);
        rc = -EINVAL;
    }
    if (!rc && args && !inst->p->init) {
        ump_log_error("policy '%s': %s takes no arguments", spec,
                      inst->p->name);
        rc = -EINVAL;
    }
    if (!rc && inst->p->init) {
        size_t avail[UMP_MAX_DEVICES];
        ump_place_view_t view;
        policy_view(pool, &view, avail);
        rc = inst->p->init(&view, args, &inst->state);
        if (rc) {
            ump_log_error("policy '%s': %s", spec, ump_strerror(rc));
            rc = rc == -ENOMEM ? rc : -EINVAL;
        }
    }
    if (rc) {
        if (inst->dl)
            dlclose(inst->dl);
        free(inst);
        return rc;
    }
    inst->next = pool->policies;
    pool->policies = inst;
    *inst_p = inst;
    return 0;
}

int policy_setup(ump_pool_t *pool)
{
    int n = pool->ndev;
    pool->props = calloc((size_t)n, sizeof(*pool->props));
    pool->links = calloc((size_t)(n * n), sizeof(*pool->links));
    if (!pool->props || !pool->links)
        return -ENOMEM;
    for (int d = 0; d < n; d++) {
        const struct topo_device *t = &pool->topo.dev[d];
        ump_device_props_t *p = &pool->props[d];
        snprintf(p->model, sizeof(p->model), "%s", t->model);
        snprintf(p->pci_bus_id, sizeof(p->pci_bus_id), "%s", t->pci);
        p->capacity = pool->dev[d].capacity;
        p->numa_node = t->numa;
        for (int e = 0; e < n; e++) {
            const struct topo_link *l = &pool->topo.link[d][e];
            pool->links[d * n + e] =
                (ump_link_props_t){l->kind, l->bw_gbs, l->hops, l->peer};
        }
    }
    int rc = policy_get(pool, "local", &pool->local_policy);
    if (!rc)
        rc = policy_get(pool, pool->cfg.policy, &pool->default_policy);
    return rc;
}

void policy_free_all(ump_pool_t *pool)
{
    while (pool->policies) {
        struct policy_inst *i = pool->policies;
        pool->policies = i->next;
        if (i->p && i->p->fini)
            i->p->fini(i->state);
        if (i->dl)
            dlclose(i->dl);
        free(i);
    }
    free(pool->props);
    free(pool->links);
}

/* Logs and refuses a plan that breaks the contract. */
static int bad_plan(const struct policy_inst *inst, const char *what)
{
    ump_log_error("policy '%s' returned a bad plan: %s", inst->spec, what);
    return -EINVAL;
}

static int check_plan(ump_pool_t *pool, const struct policy_inst *inst,
                      const ump_place_request_t *req,
                      const ump_place_part_t *parts, size_t np,
                      const size_t *avail)
{
    size_t used[UMP_MAX_DEVICES] = {0}, total = 0;
    if (!np)
        return bad_plan(inst, "no parts");
    for (size_t i = 0; i < np; i++) {
        int d = parts[i].device;
        if (d < 0 || d >= pool->ndev)
            return bad_plan(inst, "a device out of range");
        if (!parts[i].chunks)
            return bad_plan(inst, "an empty part");
        /* the requesting device must be able to use every byte */
        if (d != req->device &&
            !pool->links[req->device * pool->ndev + d].peer)
            return bad_plan(inst, "a device the requesting device cannot "
                                  "reach (no peer access)");
        /* compared before adding (used <= avail, total <= chunks hold):
         * a huge part must not wrap the sums */
        if (parts[i].chunks > avail[d] - used[d]) {
            ump_log_error("policy '%s' returned a bad plan: more chunks of "
                          "device %d than the %zu it can supply", inst->spec,
                          d, avail[d]);
            return -EINVAL;
        }
        if (parts[i].chunks > req->chunks - total)
            return bad_plan(inst, "the parts add up to more than the request");
        used[d] += parts[i].chunks;
        total += parts[i].chunks;
    }
    if (total != req->chunks)
        return bad_plan(inst, "the parts do not add up to the request");
    return 0;
}

int policy_plan(ump_pool_t *pool, struct policy_inst *inst,
                const ump_place_request_t *req, ump_place_part_t **parts_p,
                size_t *nparts_p)
{
    size_t avail[UMP_MAX_DEVICES];
    ump_place_view_t view;
    policy_view(pool, &view, avail);
    size_t cap = req->chunks < PLAN_MAX_PARTS ? req->chunks : PLAN_MAX_PARTS;
    ump_place_part_t *parts = malloc(cap * sizeof(*parts));
    if (!parts)
        return -ENOMEM;
    size_t np = 0;
    int rc = inst->p->place(inst->state, req, &view, parts, cap, &np);
    if (!rc && np > cap)
        rc = bad_plan(inst, "more parts than it was given room for");
    else if (!rc)
        rc = check_plan(pool, inst, req, parts, np, avail);
    else if (rc != -ENOMEM)
        ump_log_error("policy '%s': %s", inst->spec, ump_strerror(rc));
    if (rc) {
        free(parts);
        return rc;
    }
    *parts_p = parts;
    *nparts_p = np;
    return 0;
}
