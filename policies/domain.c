/*
 * "domain": keeps an allocation, and every allocation with the same group
 * id (hints.group), inside one NVLink domain (devices joined by NVLink,
 * directly or through NVSwitch), so that the traffic between them never
 * crosses PCIe or the sockets' link while the domain has room.
 *
 * A group's domain is chosen at its first allocation: the requesting
 * device's domain if the allocation fits there; else, of the domains where
 * it fits, the one the requesting device reads fastest according to the
 * cost model (then the one with most room); else the roomiest domain. Inside
 * the domain the requesting device comes first, then its nearest peers.
 * Only when the domain is full does the rest spill out, nearest first (not
 * at all with UMP_HINT_NO_SPILL).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "topo/costmodel.h"
#include "place/builtin.h"

struct group_dom {
    unsigned group;
    int domain;
};

struct domain {
    int ndom;
    int dom[UMP_MAX_DEVICES]; /* domain of each device */
    struct group_dom *groups;
    size_t ngroups, cap;
};

static int domain_init(const ump_place_view_t *view, const char *args,
                       void **state_p)
{
    if (args)
        return -EINVAL;
    struct domain *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    for (int d = 0; d < view->ndev; d++)
        st->dom[d] = -1;
    /* connected components of the NVLink graph */
    for (int d = 0; d < view->ndev; d++) {
        if (st->dom[d] >= 0)
            continue;
        int stack[UMP_MAX_DEVICES], top = 0;
        st->dom[d] = st->ndom;
        stack[top++] = d;
        while (top) {
            int x = stack[--top];
            for (int y = 0; y < view->ndev; y++)
                if (st->dom[y] < 0 &&
                    pol_link(view, x, y)->kind == UMP_LINK_NVLINK) {
                    st->dom[y] = st->ndom;
                    stack[top++] = y;
                }
        }
        st->ndom++;
    }
    *state_p = st;
    return 0;
}

static void domain_fini(void *state)
{
    struct domain *st = state;
    if (st)
        free(st->groups);
    free(st);
}

/* Devices of domain D nearest the requesting device first (it leads when
 * it is in D), then, when spill is allowed, every other device. */
static int domain_order(const struct domain *st, const ump_place_view_t *view,
                        int req_dev, int D, bool spill, int *order)
{
    int near[UMP_MAX_DEVICES];
    int nn = pol_nearest(view, req_dev, near), n = 0;
    if (st->dom[req_dev] == D)
        order[n++] = req_dev;
    for (int i = 0; i < nn; i++)
        if (st->dom[near[i]] == D)
            order[n++] = near[i];
    if (spill) {
        if (st->dom[req_dev] != D)
            order[n++] = req_dev;
        for (int i = 0; i < nn; i++)
            if (st->dom[near[i]] != D)
                order[n++] = near[i];
    }
    return n;
}

static int choose_domain(const struct domain *st,
                         const ump_place_request_t *req,
                         const ump_place_view_t *view)
{
    size_t room[UMP_MAX_DEVICES] = {0};
    for (int d = 0; d < view->ndev; d++)
        if (pol_reachable(view, req->device, d))
            room[st->dom[d]] += view->free_chunks[d];
    int mine = st->dom[req->device];
    if (room[mine] >= req->chunks)
        return mine;
    int best = -1, roomiest = mine;
    double best_bw = -1;
    for (int D = 0; D < st->ndom; D++) {
        if (room[D] > room[roomiest])
            roomiest = D;
        if (room[D] < req->chunks)
            continue;
        /* what the requesting device would see reading it placed there */
        int order[UMP_MAX_DEVICES];
        int n = domain_order(st, view, req->device, D, false, order);
        size_t chunks[UMP_MAX_DEVICES] = {0}, left = req->chunks;
        for (int i = 0; i < n && left; i++) {
            size_t take = view->free_chunks[order[i]];
            take = take < left ? take : left;
            chunks[order[i]] = take;
            left -= take;
        }
        double bw = cost_read_bw(view, chunks, req->device);
        if (bw > best_bw || (bw == best_bw && room[D] > room[best])) {
            best = D;
            best_bw = bw;
        }
    }
    return best >= 0 ? best : roomiest;
}

static int group_domain(struct domain *st, unsigned group, int *domain_p)
{
    for (size_t i = 0; i < st->ngroups; i++)
        if (st->groups[i].group == group) {
            *domain_p = st->groups[i].domain;
            return 0;
        }
    return -ENOENT;
}

static int remember(struct domain *st, unsigned group, int domain)
{
    if (st->ngroups == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 16;
        struct group_dom *g = realloc(st->groups, cap * sizeof(*g));
        if (!g)
            return -ENOMEM;
        st->groups = g;
        st->cap = cap;
    }
    st->groups[st->ngroups++] = (struct group_dom){group, domain};
    return 0;
}

static int domain_place(void *state, const ump_place_request_t *req,
                        const ump_place_view_t *view, ump_place_part_t *parts,
                        size_t cap, size_t *nparts_p)
{
    struct domain *st = state;
    int D;
    bool known = req->group && !group_domain(st, req->group, &D);
    if (!known)
        D = choose_domain(st, req, view);
    int order[UMP_MAX_DEVICES];
    int n = domain_order(st, view, req->device, D,
                         !(req->flags & UMP_HINT_NO_SPILL), order);
    size_t avail[UMP_MAX_DEVICES], np = 0;
    memcpy(avail, view->free_chunks, (size_t)view->ndev * sizeof(*avail));
    if (pol_fill(parts, cap, &np, avail, order, n, req->chunks))
        return -ENOMEM;
    /* a group is bound to its domain once it has memory there */
    if (req->group && !known && remember(st, req->group, D))
        return -ENOMEM;
    *nparts_p = np;
    return 0;
}

const ump_policy_t policy_domain = {
    .version = UMP_POLICY_VERSION,
    .name = "domain",
    .init = domain_init,
    .place = domain_place,
    .fini = domain_fini,
};
