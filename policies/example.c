/*
 * An example placement policy built as a plugin: copy this file to start
 * your own. It needs nothing but <umpool.h>.
 *
 * "round-robin": the n-th allocation this policy places goes, whole, to
 * device (start + n) mod ndev, so that a stream of equal tensors lands on
 * every device in turn. When that device cannot hold the allocation the
 * next one that can takes it (its turn is used up, the next allocation
 * moves on from there); with UMP_HINT_NO_SPILL only the device whose turn
 * it is. Argument: the first device, "=N" (default 0).
 *
 *     cc -std=c11 -shared -fPIC -I include -o libroundrobin.so policies/example.c
 *     UMPOOL_CONF=policy:/path/libroundrobin.so=2        (the pool default)
 *     hints.policy = "/path/libroundrobin.so";           (one allocation)
 *
 * The pool makes one instance per pool and policy text: init runs once
 * ("...so" and "...so=2" are two instances with their own state), place
 * for each allocation bigger than a slab object, fini when the pool is
 * destroyed. place() runs under the pool's lock, so the state needs no lock
 * of its own, and it must not call back into the pool. It returns a plan
 * only; the pool checks it (devices, counts, room) before using it.
 */
#ifdef HAVE_CONFIG_H /* umpool's own build; a plugin of yours needs none */
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>

#include <umpool.h>

struct rr {
    int next; /* device whose turn it is */
};

static int rr_init(const ump_place_view_t *view, const char *args,
                   void **state_p)
{
    long start = 0;
    if (args) {
        char *end;
        start = strtol(args, &end, 10);
        /* the pool logs the failure, naming the policy text */
        if (end == args || *end || start < 0 || start >= view->ndev)
            return -EINVAL;
    }
    struct rr *st = malloc(sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->next = (int)start;
    *state_p = st;
    return 0;
}

static int rr_place(void *state, const ump_place_request_t *req,
                    const ump_place_view_t *view, ump_place_part_t *parts,
                    size_t cap, size_t *nparts_p)
{
    struct rr *st = state;
    if (cap < 1)
        return -ENOSPC;
    /* free_chunks counts what a device can supply now, cached memory
     * included; view->links[from * ndev + to] would tell how near it is. */
    int tries = (req->flags & UMP_HINT_NO_SPILL) ? 1 : view->ndev;
    for (int k = 0; k < tries; k++) {
        int d = (st->next + k) % view->ndev;
        if (view->free_chunks[d] < req->chunks)
            continue;
        parts[0] = (ump_place_part_t){.device = d, .chunks = req->chunks};
        *nparts_p = 1;
        st->next = (d + 1) % view->ndev;
        return 0;
    }
    return -ENOMEM; /* the pool reports it; nothing was changed */
}

static void rr_fini(void *state)
{
    free(state);
}

/* The one symbol the pool looks up (UMP_POLICY_SYMBOL). Visible even when
 * the plugin is built with -fvisibility=hidden. */
__attribute__((visibility("default"))) const ump_policy_t umpool_policy = {
    .version = UMP_POLICY_VERSION,
    .name = "round-robin",
    .init = rr_init,
    .place = rr_place,
    .fini = rr_fini,
};
