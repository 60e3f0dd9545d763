/*
 * The sharer's side of a shared pool, run by its IPC server thread
 * (server.c polls the pool's named socket and hands its connections
 * here): ATTACH gives a process a ledger slot, the ledger and a first
 * lease of addresses; LEASE gives more. A connection's end is its
 * process's detach or death: its slot and leases come back once no other
 * process holds an open of its memory (the ledger's holds), since an
 * opener maps that memory at the same addresses.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "util/log.h"

/* Leases slot n granules of the pool's free addresses, lease_n if that
 * is more and fits. */
static int lease_out(ump_pool_t *pool, struct share_state *sh, int slot,
                     size_t n, size_t *start_p, size_t *n_p)
{
    if (n > pool->vas.ngran)
        return -ENOMEM;
    size_t more = n < sh->lease_n ? sh->lease_n : n;
    pthread_mutex_lock(&pool->lock);
    int rc = 0;
    if (sh->nleases == sh->capleases) {
        size_t c = sh->capleases ? 2 * sh->capleases : 16;
        struct share_range *p = realloc(sh->leases, c * sizeof(*p));
        if (p) {
            sh->leases = p;
            sh->capleases = c;
        } else {
            rc = -ENOMEM;
        }
    }
    if (!rc && !vas_take(&pool->vas, more, start_p))
        n = more;
    else if (!rc && vas_take(&pool->vas, n, start_p))
        rc = -ENOMEM;
    if (!rc) {
        sh->leases[sh->nleases++] = (struct share_range){*start_p, n, slot};
        *n_p = n;
    }
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

static int serve_attach(ump_pool_t *pool, struct share_state *sh,
                        struct ipc_conn *c)
{
    struct share_welcome *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    struct share_ledger *l = sh->ledger;
    pid_t pid;
    int rc = usock_peer_check(c->fd, &pid), k = 1;
    while (!rc && k < SHARE_SLOTS && sh->slots[k].state != SLOT_FREE)
        k++;
    if (!rc && k == SHARE_SLOTS) {
        ump_log_warn("shared pool %s: process %d refused: %d processes "
                     "are attached", sh->name, (int)pid, SHARE_SLOTS);
        w->status = -EUSERS;
    }
    size_t start = 0, n = 0;
    /* Its process, watched: it may die while a child it forked keeps
     * this connection open. */
    int pidfd = !rc && !w->status ? usock_peer_pidfd(c->fd) : -1;
    if (pidfd == -ESRCH) /* gone already */
        rc = pidfd;
    else if (pidfd < 0) /* no pidfds here: the connection's end alone */
        pidfd = -1;
    if (!rc && !w->status) {
        struct share_slot *s = &l->slot[k];
        for (int d = 0; d < UMP_MAX_DEVICES; d++)
            atomic_store(&s->used[d], 0);
        for (int j = 0; j < SHARE_SLOTS; j++)
            atomic_store(&s->holds[j], 0);
        atomic_store(&s->key, 0);
        atomic_store(&s->pid, (uint32_t)pid);
        atomic_store(&s->state, SLOT_LIVE);
        sh->slots[k] =
            (struct share_slot_rec){SLOT_LIVE, pidfd, false, (int)pid};
        c->slot = k; /* from here on its end gives the slot back */
        w->status = lease_out(pool, sh, k, 1, &start, &n);
    }
    if (!rc && !w->status)
        w->status = conf_format(&pool->cfg, w->config, sizeof(w->config));
    if (rc) {
        free(w);
        return rc;
    }
    w->slot = (uint32_t)k;
    w->base = (uint64_t)(uintptr_t)pool->va;
    w->size = pool->vas.size;
    w->chunk_size = pool->chunk_size;
    w->backend = pool->be == &sim_backend_ops ? IPC_BACKEND_SIM
                                              : IPC_BACKEND_CUDA;
    w->ndev = pool->ndev;
    for (int d = 0; d < pool->ndev; d++)
        w->device_mem[d] = sh->capacity[d];
    w->process_limit = pool->cfg.process_limit;
    w->ledger_bytes = sizeof(*l);
    w->lease_start = start;
    w->lease_n = n;
    rc = usock_send(c->fd, w, sizeof(*w), w->status ? NULL : &sh->ledger_fd,
                    w->status ? 0 : 1);
    free(w);
    if (!rc)
        ump_log_debug("shared pool %s: process %d attached (slot %d)",
                      sh->name, (int)pid, k);
    return rc;
}

static int serve_lease(ump_pool_t *pool, struct share_state *sh,
                       struct ipc_conn *c, uint64_t granules)
{
    struct share_lease r = {0};
    size_t start = 0, n = 0;
    r.status = granules ? lease_out(pool, sh, c->slot, (size_t)granules,
                                    &start, &n)
                        : -EINVAL;
    r.start = start;
    r.n = n;
    return usock_send(c->fd, &r, sizeof(r), NULL, 0);
}

int share_serve(ump_pool_t *pool, struct ipc_conn *c)
{
    struct share_state *sh = atomic_load(&pool->ipc->sharing);
    struct share_req q;
    int nfds;
    int rc = usock_recv(c->fd, &q, sizeof(q), NULL, 0, &nfds);
    if (rc)
        return rc;
    if (!sh)
        return -EPIPE;
    if (q.op == SHARE_ATTACH && c->slot < 0)
        return serve_attach(pool, sh, c);
    if (q.op == SHARE_LEASE && c->slot >= 0)
        return serve_lease(pool, sh, c, q.granules);
    if (q.op == SHARE_DETACH && c->slot >= 0) {
        sh->slots[c->slot].detached = true;
        return -EPIPE; /* the connection is done with */
    }
    return -EPROTO;
}

int share_conn_pidfd(ump_pool_t *pool, const struct ipc_conn *c)
{
    struct share_state *sh = atomic_load(&pool->ipc->sharing);
    return sh && c->share && c->slot >= 0 ? sh->slots[c->slot].pidfd : -1;
}

void share_conn_gone(ump_pool_t *pool, struct ipc_conn *c)
{
    struct share_state *sh = atomic_load(&pool->ipc->sharing);
    if (!sh || c->slot < 0)
        return;
    struct share_slot *s = &sh->ledger->slot[c->slot];
    sh->slots[c->slot].state = SLOT_GONE;
    atomic_store(&s->state, SLOT_GONE);
    ump_log_debug("shared pool %s: process %u (slot %d) is gone", sh->name,
                  (unsigned)atomic_load(&s->pid), c->slot);
    sh->waiting = true;
    share_reclaim(pool);
}

/* Opens of slot k's memory that other processes hold. */
static uint64_t holds_of(const struct share_state *sh, int k)
{
    uint64_t n = 0;
    for (int j = 0; j < SHARE_SLOTS; j++)
        if (j != k && sh->slots[j].state != SLOT_FREE)
            n += atomic_load(&sh->ledger->slot[j].holds[k]);
    return n;
}

/* Has slot k's process ended, or detached (its imports unmapped)? A
 * connection the sharer dropped (a malformed request) leaves a live
 * process that still maps what it opened and still writes its slot: the
 * slot waits for its end. Where the kernel gave no pidfd, its pid is
 * asked (its leases handed out again while it still allocates in them
 * would give two processes one address). */
static bool done_with(const struct share_state *sh, int k)
{
    const struct share_slot_rec *r = &sh->slots[k];
    if (r->detached)
        return true;
    if (r->pidfd < 0)
        return !share_pid_alive((uint32_t)r->pid);
    struct pollfd pf = {r->pidfd, POLLIN, 0};
    return poll(&pf, 1, 0) == 1;
}

/* Slot k's leases go back to the pool's free addresses. */
static int leases_back(ump_pool_t *pool, struct share_state *sh, int k)
{
    int rc = 0;
    pthread_mutex_lock(&pool->lock);
    for (size_t i = 0; i < sh->nleases && !rc;) {
        struct share_range r = sh->leases[i];
        if (r.slot != k) {
            i++;
            continue;
        }
        rc = vas_give(&pool->vas, r.start, r.n);
        if (!rc)
            sh->leases[i] = sh->leases[--sh->nleases];
    }
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

bool share_reclaim(ump_pool_t *pool)
{
    struct share_state *sh = atomic_load(&pool->ipc->sharing);
    if (!sh || !sh->waiting)
        return false;
    struct share_ledger *l = sh->ledger;
    bool waiting = false;
    for (int k = 1; k < SHARE_SLOTS; k++) {
        struct share_slot *s = &l->slot[k];
        if (sh->slots[k].state != SLOT_GONE)
            continue;
        if (!done_with(sh, k)) {
            waiting = true;
            continue;
        }
        /* What it had open of others' memory ended with it. */
        for (int j = 0; j < SHARE_SLOTS; j++)
            atomic_store(&s->holds[j], 0);
        if (holds_of(sh, k) || leases_back(pool, sh, k)) {
            waiting = true;
            continue;
        }
        for (int d = 0; d < UMP_MAX_DEVICES; d++)
            atomic_store(&s->used[d], 0);
        atomic_store(&s->key, 0);
        atomic_store(&s->pid, 0);
        atomic_store(&s->state, SLOT_FREE);
        if (sh->slots[k].pidfd >= 0)
            close(sh->slots[k].pidfd);
        sh->slots[k] = (struct share_slot_rec){SLOT_FREE, -1, false, 0};
    }
    sh->waiting = waiting;
    return waiting;
}
