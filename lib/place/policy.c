#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place/builtin.h"
#include "place/policy.h"
#include "util/log.h"

/* A plan longer than this is refused (an interleave of 2 MiB stripes over
 * 128 GiB): the pool carries out plans part by part. */
#define PLAN_MAX_PARTS 65536

void policy_view(const struct policy_set *set, const size_t *avail,
                 ump_place_view_t *view)
{
    /* the public view type is not const-qualified; policies only read it */
    *view = (ump_place_view_t){set->ndev, (size_t *)avail, set->props,
                               set->links};
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

struct policy_inst *policy_lookup(const struct policy_set *set,
                                  const char *spec)
{
    for (struct policy_inst *i = set->list; i; i = i->next)
        if (!strcmp(i->spec, spec))
            return i;
    return NULL;
}

int policy_get(struct policy_set *set, const char *spec, const size_t *avail,
               struct policy_inst **inst_p)
{
    struct policy_inst *found = policy_lookup(set, spec);
    if (found) {
        *inst_p = found;
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
        ump_place_view_t view;
        policy_view(set, avail, &view);
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
    inst->next = set->list;
    set->list = inst;
    *inst_p = inst;
    return 0;
}

int policy_set_init(struct policy_set *set, const struct ump_topology *topo,
                    const size_t *capacity, int ndev, const char *dflt_spec,
                    const size_t *avail)
{
    *set = (struct policy_set){.ndev = ndev};
    set->props = calloc((size_t)ndev, sizeof(*set->props));
    set->links = calloc((size_t)(ndev * ndev), sizeof(*set->links));
    int rc = -ENOMEM;
    if (!set->props || !set->links)
        goto fail;
    for (int d = 0; d < ndev; d++) {
        const struct topo_device *t = &topo->dev[d];
        ump_device_props_t *p = &set->props[d];
        snprintf(p->model, sizeof(p->model), "%s", t->model);
        snprintf(p->pci_bus_id, sizeof(p->pci_bus_id), "%s", t->pci);
        p->capacity = capacity[d];
        p->numa_node = t->numa;
        for (int e = 0; e < ndev; e++) {
            const struct topo_link *l = &topo->link[d][e];
            set->links[d * ndev + e] =
                (ump_link_props_t){l->kind, l->bw_gbs, l->hops, l->peer};
        }
    }
    rc = policy_get(set, "local", avail, &set->local);
    if (!rc)
        rc = policy_get(set, dflt_spec, avail, &set->dflt);
    if (!rc)
        return 0;
fail:
    policy_set_fini(set);
    return rc;
}

void policy_set_fini(struct policy_set *set)
{
    while (set->list) {
        struct policy_inst *i = set->list;
        set->list = i->next;
        if (i->p && i->p->fini)
            i->p->fini(i->state);
        if (i->dl)
            dlclose(i->dl);
        free(i);
    }
    free(set->props);
    free(set->links);
    *set = (struct policy_set){0};
}

/* Logs and refuses a plan that breaks the contract. */
static int bad_plan(const struct policy_inst *inst, const char *what)
{
    ump_log_error("policy '%s' returned a bad plan: %s", inst->spec, what);
    return -EINVAL;
}

static int check_plan(const struct policy_set *set,
                      const struct policy_inst *inst,
                      const ump_place_request_t *req,
                      const ump_place_part_t *parts, size_t np,
                      const size_t *avail)
{
    size_t used[UMP_MAX_DEVICES] = {0}, total = 0;
    ump_place_view_t view;
    policy_view(set, avail, &view);
    if (!np)
        return bad_plan(inst, "no parts");
    for (size_t i = 0; i < np; i++) {
        int d = parts[i].device;
        if (d < 0 || d >= set->ndev)
            return bad_plan(inst, "a device out of range");
        if (!parts[i].chunks)
            return bad_plan(inst, "an empty part");
        /* the requesting device must be able to use every byte */
        if (!pol_reachable(&view, req->device, d))
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

int policy_plan(const struct policy_set *set, struct policy_inst *inst,
                const ump_place_request_t *req, const size_t *avail,
                ump_place_part_t **parts_p, size_t *nparts_p)
{
    ump_place_view_t view;
    policy_view(set, avail, &view);
    size_t cap = req->chunks < PLAN_MAX_PARTS ? req->chunks : PLAN_MAX_PARTS;
    ump_place_part_t *parts = malloc(cap * sizeof(*parts));
    if (!parts)
        return -ENOMEM;
    size_t np = 0;
    int rc = inst->p->place(inst->state, req, &view, parts, cap, &np);
    if (!rc && np > cap)
        rc = bad_plan(inst, "more parts than it was given room for");
    else if (!rc)
        rc = check_plan(set, inst, req, parts, np, avail);
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
