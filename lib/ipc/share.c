/*
 * A pool shared by the processes of a node: ump_pool_share, which makes
 * the calling process the pool's sharer (its IPC server thread serves the
 * named socket: share_serve.c), and ump_pool_attach, which joins it from
 * another process (share.h says how the addresses and the ledger are
 * shared). Here too the hooks through which mem charges the ledger and
 * asks for more addresses (pool->share_ops), and the detach.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "front/check.h"
#include "front/lifecycle.h"
#include "ipc/ipc.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "mem/chunks.h"
#include "util/log.h"

static const char fn_share[] = "ump_pool_share";
static const char fn_attach[] = "ump_pool_attach";

/* --- the hooks (pool lock held) ---------------------------------------- */

bool share_pid_alive(uint32_t pid)
{
    return pid && pid <= INT32_MAX &&
           !(kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

/* Does the sharer still give slots back? It says it stopped (SLOT_GONE)
 * only when it destroys its pool: one that was killed says nothing, so
 * its process is asked too (else every slot, its own and those of every
 * process that ends later, would count for ever). */
static bool sharer_serves(const struct share_ledger *l)
{
    return atomic_load_explicit(&l->slot[0].state, memory_order_relaxed) ==
               SLOT_LIVE &&
           share_pid_alive(
               atomic_load_explicit(&l->slot[0].pid, memory_order_relaxed));
}

/* Does slot k count (serving: sharer_serves)? While the sharer serves,
 * every slot does (a process gone until the sharer gives its slot back:
 * what it exported may still be open). Once the sharer is gone nobody
 * gives slots back: a process that ended counts no more. */
static bool counts(const struct share_ledger *l, int k, bool serving)
{
    return serving || share_pid_alive(atomic_load_explicit(
                          &l->slot[k].pid, memory_order_relaxed));
}

/* Device memory the pool's processes hold together (serving:
 * sharer_serves, asked once by the caller: a syscall). */
static uint64_t held(const struct share_ledger *l, int d, bool serving)
{
    uint64_t sum = 0;
    for (int k = 0; k < SHARE_SLOTS; k++)
        if (counts(l, k, serving))
            sum += atomic_load_explicit(&l->slot[k].used[d],
                                        memory_order_relaxed);
    return sum;
}

static int charge(ump_pool_t *pool, int d, size_t bytes)
{
    struct share_state *sh = pool->share;
    struct share_ledger *l = sh->ledger;
    /* Two processes charging at once may pass together, by a chunk each
     * at most: the driver stays the last word on physical memory. Not
     * -ENOMEM: that says the driver ran out (chunks.c lowers the
     * device's capacity then), while this room comes back when the other
     * processes free. */
    if (held(l, d, sharer_serves(l)) + bytes > sh->capacity[d])
        return -EDQUOT;
    atomic_fetch_add_explicit(&l->slot[sh->slot].used[d], bytes,
                              memory_order_relaxed);
    return 0;
}

static void uncharge(ump_pool_t *pool, int d, size_t bytes)
{
    struct share_state *sh = pool->share;
    atomic_fetch_sub_explicit(&sh->ledger->slot[sh->slot].used[d], bytes,
                              memory_order_relaxed);
}

static int range_add(struct share_range **arr, size_t *n, size_t *cap,
                     struct share_range r)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        struct share_range *p = realloc(*arr, c * sizeof(*p));
        if (!p)
            return -ENOMEM;
        *arr = p;
        *cap = c;
    }
    (*arr)[(*n)++] = r;
    return 0;
}

static bool in_place_at(const struct share_state *sh, size_t g)
{
    for (size_t i = 0; i < sh->ninplace; i++)
        if (g - sh->inplace[i].start < sh->inplace[i].n)
            return true;
    return false;
}

/* A lease's granules to this pool's free addresses, but those where this
 * process maps another's memory in place (a range the sharer took back
 * while this process still has it mapped: its open ended elsewhere, say
 * its connection to the maker broke). */
static int give_lease(ump_pool_t *pool, struct share_state *sh, size_t start,
                      size_t n)
{
    for (size_t g = start, e; g < start + n; g = e) {
        if (in_place_at(sh, g)) {
            e = g + 1;
            continue;
        }
        for (e = g + 1; e < start + n && !in_place_at(sh, e); e++)
            ;
        int rc = vas_give(&pool->vas, g, e - g);
        if (rc)
            return rc;
    }
    return 0;
}

/* An attached process asks the sharer for at least n more granules. */
static int lease(ump_pool_t *pool, size_t n)
{
    struct share_state *sh = pool->share;
    if (sh->sharer || sh->fd < 0 || sh->stopping)
        return -ENOMEM;
    struct share_req q = {.op = SHARE_LEASE, .granules = n};
    struct share_lease r;
    int nfds;
    int rc = usock_send(sh->fd, &q, sizeof(q), NULL, 0);
    if (!rc)
        rc = usock_recv_watched(sh->fd, sh->sharer_pidfd, &r, sizeof(r),
                                NULL, 0, &nfds);
    if (rc) {
        ump_log_error("shared pool %s: its sharer is gone (%s): no more "
                      "addresses for this process", sh->name,
                      ump_strerror(rc));
        close(sh->fd);
        sh->fd = -1;
        return -ENOMEM;
    }
    if (r.status) {
        ump_log_warn("shared pool %s: no addresses left for %zu bytes: %s",
                     sh->name, n << pool->chunk_shift,
                     ump_strerror(r.status));
        return -ENOMEM;
    }
    /* A stranger's answer: inside the reservation, none of it ours. */
    if (r.n < n || r.start > pool->vas.ngran ||
        r.n > pool->vas.ngran - r.start)
        goto bad;
    for (size_t i = 0; i < sh->nown; i++)
        if (r.start < sh->own[i].start + sh->own[i].n &&
            sh->own[i].start < r.start + r.n)
            goto bad;
    if ((rc = range_add(&sh->own, &sh->nown, &sh->capown,
                        (struct share_range){r.start, r.n, sh->slot})))
        return rc;
    return give_lease(pool, sh, r.start, r.n);
bad:
    ump_log_error("shared pool %s: the sharer's lease is malformed",
                  sh->name);
    return -EPROTO;
}

static void figures(ump_pool_t *pool, int d, int *procs_p, size_t *bytes_p)
{
    const struct share_ledger *l = pool->share->ledger;
    int procs = 0;
    size_t bytes = 0;
    bool serving = sharer_serves(l);
    for (int k = 0; k < SHARE_SLOTS; k++)
        procs += atomic_load_explicit(&l->slot[k].state,
                                      memory_order_relaxed) == SLOT_LIVE &&
                 counts(l, k, serving);
    for (int i = d < 0 ? 0 : d; i < (d < 0 ? pool->ndev : d + 1); i++)
        bytes += held(l, i, serving);
    *procs_p = procs;
    *bytes_p = bytes;
}

static const struct pool_share_ops share_ops = {charge, uncharge, lease,
                                                figures};

/* --- the ledger ---------------------------------------------------------- */

/* What device d offers the pool, as pool_setup counts it before
 * process_limit. */
static uint64_t device_offers(const ump_pool_t *pool, int d)
{
    size_t mem = pool->topo.dev[d].mem;
    if (pool->cfg.device_mem && pool->cfg.device_mem < mem)
        mem = pool->cfg.device_mem;
    return mem & ~(pool->chunk_size - 1);
}

static int ledger_make(ump_pool_t *pool, struct share_state *sh)
{
    /* Sealed at its size: a process of the pool cannot shrink it under
     * the others (their next access would be a SIGBUS). */
    int fd = memfd_create("umpool-ledger", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, sizeof(struct share_ledger)) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        ump_log_error("%s: cannot make the ledger: %s", fn_share,
                      strerror(-rc));
        return rc;
    }
    struct share_ledger *l = mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE,
                                  MAP_SHARED, fd, 0);
    if (l == MAP_FAILED) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    l->magic = SHARE_MAGIC;
    l->version = SHARE_VERSION;
    l->nslots = SHARE_SLOTS;
    l->ndev = pool->ndev;
    l->process_limit = pool->cfg.process_limit;
    for (int d = 0; d < pool->ndev; d++)
        l->capacity[d] = sh->capacity[d] = device_offers(pool, d);
    atomic_store(&l->slot[0].pid, (uint32_t)getpid());
    atomic_store(&l->slot[0].key, pool->ipc->key);
    atomic_store(&l->slot[0].state, SLOT_LIVE);
    sh->slots[0].state = SLOT_LIVE;
    sh->ledger = l;
    sh->ledger_fd = fd;
    return 0;
}

/* Maps an attached process's ledger and checks it as a stranger's. */
static int ledger_map(struct share_state *sh, int fd, uint64_t bytes)
{
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    if (bytes != sizeof(struct share_ledger) || fstat(fd, &sb) ||
        (uint64_t)sb.st_size != bytes || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
            (F_SEAL_SHRINK | F_SEAL_GROW)) {
        ump_log_error("%s: the shared pool's ledger is of another layout "
                      "(another umpool version?)", fn_attach);
        return -EPROTO;
    }
    struct share_ledger *l = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                                  MAP_SHARED, fd, 0);
    if (l == MAP_FAILED)
        return -errno;
    if (l->magic != SHARE_MAGIC || l->version != SHARE_VERSION ||
        l->nslots != SHARE_SLOTS || l->ndev < 1 ||
        l->ndev > UMP_MAX_DEVICES) {
        munmap(l, bytes);
        ump_log_error("%s: the shared pool's ledger is of another layout "
                      "(another umpool version?)", fn_attach);
        return -EPROTO;
    }
    sh->ledger = l;
    return 0;
}

static struct share_state *state_new(const char *name)
{
    struct share_state *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return NULL;
    strcpy(sh->name, name); /* usock_name_check: at most 64 */
    sh->ledger_fd = sh->fd = sh->sharer_pidfd = sh->listener.fd = -1;
    for (int k = 0; k < SHARE_SLOTS; k++)
        sh->slots[k].pidfd = -1;
    return sh;
}

static void state_free(struct share_state *sh)
{
    if (!sh->sharer && sh->fd >= 0) {
        /* Nothing of others' memory is mapped here (any more): the
         * sharer may give the slot back at once, not at this process's
         * end. */
        struct share_req q = {.op = SHARE_DETACH};
        usock_send(sh->fd, &q, sizeof(q), NULL, 0);
    }
    if (sh->ledger)
        munmap(sh->ledger, sizeof(*sh->ledger));
    if (sh->ledger_fd >= 0)
        close(sh->ledger_fd);
    if (sh->fd >= 0)
        close(sh->fd);
    if (sh->sharer_pidfd >= 0)
        close(sh->sharer_pidfd);
    for (int k = 0; k < SHARE_SLOTS; k++)
        if (sh->slots[k].pidfd >= 0)
            close(sh->slots[k].pidfd);
    free(sh->leases);
    free(sh->own);
    free(sh->inplace);
    free(sh);
}

static int backend_kind(const ump_pool_t *pool)
{
    return pool->be == &sim_backend_ops ? IPC_BACKEND_SIM : IPC_BACKEND_CUDA;
}

/* --- ump_pool_share ------------------------------------------------------ */

UMP_EXPORT int ump_pool_share(ump_pool_t *pool, const char *name)
{
    int rc = pool_check(pool, fn_share);
    if (rc)
        return rc;
    if (!name) {
        ump_log_error("%s: name is NULL", fn_share);
        return -EINVAL;
    }
    if ((rc = usock_name_check(name)))
        return rc;
    if (!pool->be->reserve_at || !pool->be->chunk_export) {
        ump_log_error("%s: the %s backend cannot share memory", fn_share,
                      pool->be->name);
        return -ENOTSUP;
    }
    struct ipc_state *st = ipc_state_get(pool);
    if (!st)
        return -ENOMEM;
    struct share_state *sh = state_new(name);
    if (!sh)
        return -ENOMEM;
    sh->sharer = true;
    sh->lease_n = pool->vas.ngran / 32 ? pool->vas.ngran / 32 : 1;
    pthread_mutex_lock(&st->srv_lock); /* one share at a time */
    if (pool->share) {
        pthread_mutex_unlock(&st->srv_lock);
        ump_log_error("%s: the pool is shared already (as %s)", fn_share,
                      pool->share->name);
        state_free(sh);
        return -EBUSY;
    }
    rc = ledger_make(pool, sh);
    if (!rc)
        rc = usock_listen(name, &sh->listener);
    if (rc == -EADDRINUSE)
        ump_log_error("%s: a live pool is shared as %s already", fn_share,
                      name);
    if (!rc) {
        int fl = fcntl(sh->listener.fd, F_GETFL);
        if (fl < 0 || fcntl(sh->listener.fd, F_SETFL, fl | O_NONBLOCK))
            rc = -errno;
    }
    if (!rc) {
        /* From here on this process's chunks count in the ledger. */
        pthread_mutex_lock(&pool->lock);
        for (int d = 0; d < pool->ndev; d++)
            atomic_store(&sh->ledger->slot[0].used[d],
                         pool->dev[d].created);
        pool->share = sh;
        pool->share_ops = &share_ops;
        pthread_mutex_unlock(&pool->lock);
        atomic_store_explicit(&st->sharing, sh, memory_order_release);
    }
    pthread_mutex_unlock(&st->srv_lock);
    if (!rc && (rc = ipc_server_start(pool)) != 0) { /* not shared */
        share_stop(pool);
        share_fini(pool);
        return rc;
    }
    if (!rc) /* a thread that ran already: it looks at the new socket */
        ipc_server_rescan(pool);
    if (rc) {
        if (sh->listener.fd >= 0)
            usock_unlisten(&sh->listener);
        state_free(sh);
        return rc;
    }
    ump_log_debug("%s: pool %llu shared as %s", fn_share,
                  (unsigned long long)pool->id, name);
    return 0;
}

/* --- ump_pool_attach ----------------------------------------------------- */

static const char *backend_name(int kind)
{
    return kind == IPC_BACKEND_SIM ? "sim" : "cuda";
}

/* The sharer's answer to ATTACH, with the ledger's descriptor. */
static int hello(const char *name, int fd, int pidfd,
                 struct share_welcome *w, int *ledger_p)
{
    struct share_req q = {.op = SHARE_ATTACH};
    int nfds = 0;
    int rc = usock_send(fd, &q, sizeof(q), NULL, 0);
    if (!rc)
        rc = usock_recv_watched(fd, pidfd, w, sizeof(*w), ledger_p, 1,
                                &nfds);
    if (rc == -ECONNRESET || rc == -EPIPE) { /* it stopped, or ended */
        ump_log_error("%s: no pool is shared as %s (its sharer stopped)",
                      fn_attach, name);
        return -ENOENT;
    }
    if (rc) {
        ump_log_error("%s: the sharer of %s did not answer: %s", fn_attach,
                      name, ump_strerror(rc));
        return rc;
    }
    if (w->status) {
        if (nfds)
            close(*ledger_p);
        ump_log_error("%s: the sharer of %s refused: %s", fn_attach, name,
                      w->status == -EUSERS ? "it has its most processes"
                                           : ump_strerror(w->status));
        return w->status < 0 ? w->status : -EPROTO;
    }
    w->config[sizeof(w->config) - 1] = '\0';
    if (nfds != 1 || w->ndev < 1 || w->ndev > UMP_MAX_DEVICES ||
        w->slot == 0 || w->slot >= SHARE_SLOTS || !w->size ||
        w->chunk_size < 4096 || w->base % w->chunk_size ||
        w->size % w->chunk_size) {
        if (nfds)
            close(*ledger_p);
        ump_log_error("%s: the sharer's answer is malformed", fn_attach);
        return -EPROTO;
    }
    return 0;
}

/* The configuration of an attaching process: the sharer's, then
 * UMPOOL_CONF and config; what must agree is checked, naming the key. */
static int attach_config(const char *config, const struct share_welcome *w,
                         struct ump_config *cfg)
{
    int rc = conf_load_over(w->config, "the shared pool's configuration",
                            config, cfg);
    if (rc)
        return rc;
    if (cfg->chunk_size != w->chunk_size) {
        ump_log_error("%s: config key chunk_size: %zu here, %llu in the "
                      "shared pool", fn_attach, cfg->chunk_size,
                      (unsigned long long)w->chunk_size);
        return -EINVAL;
    }
    int want = w->backend == IPC_BACKEND_SIM ? UMP_BACKEND_SIM
                                             : UMP_BACKEND_CUDA;
    if (cfg->backend != UMP_BACKEND_AUTO && cfg->backend != want) {
        ump_log_error("%s: config key backend: %s here, %s in the shared "
                      "pool", fn_attach,
                      cfg->backend == UMP_BACKEND_SIM ? "sim" : "cuda",
                      backend_name(w->backend));
        return -EINVAL;
    }
    cfg->backend = want;
    /* The sharer's limit holds for every process; one may ask for less. */
    if (w->process_limit &&
        (!cfg->process_limit || cfg->process_limit > w->process_limit))
        cfg->process_limit = w->process_limit;
    cfg->va_size = w->size;
    return 0;
}

/* The pool made here agrees with the shared one on its devices. */
static int attach_check(ump_pool_t *pool, const struct share_welcome *w)
{
    if (backend_kind(pool) != w->backend) {
        ump_log_error("%s: config key backend: this process runs %s, the "
                      "shared pool %s", fn_attach, pool->be->name,
                      backend_name(w->backend));
        return -EINVAL;
    }
    if (pool->ndev != w->ndev) {
        ump_log_error("%s: config key devices: %d here, %d in the shared "
                      "pool (sim_devices, sim_topology, "
                      "cuda_virtual_devices or CUDA_VISIBLE_DEVICES)",
                      fn_attach, pool->ndev, w->ndev);
        return -EINVAL;
    }
    /* On cuda a device offers what is free at creation, which moves: only
     * the sim's capacities are the configuration's. */
    for (int d = 0; d < pool->ndev && w->backend == IPC_BACKEND_SIM; d++)
        if (device_offers(pool, d) != w->device_mem[d]) {
            ump_log_error("%s: config key device_mem: device %d offers "
                          "%llu bytes here, %llu in the shared pool "
                          "(sim_device_mem, sim_topology)", fn_attach, d,
                          (unsigned long long)device_offers(pool, d),
                          (unsigned long long)w->device_mem[d]);
            return -EINVAL;
        }
    return 0;
}

/* Installs the attached process's share: every address is someone
 * else's but its first lease. */
static int attach_install(ump_pool_t *pool, struct share_state *sh,
                          const struct share_welcome *w)
{
    struct vas *v = &pool->vas;
    if (w->lease_start > v->ngran || w->lease_n > v->ngran - w->lease_start ||
        !w->lease_n) {
        ump_log_error("%s: the sharer's answer is malformed", fn_attach);
        return -EPROTO;
    }
    int rc = vas_take_range(v, 0, v->ngran);
    if (!rc)
        rc = range_add(&sh->own, &sh->nown, &sh->capown,
                       (struct share_range){w->lease_start, w->lease_n,
                                            sh->slot});
    if (!rc)
        rc = vas_give(v, w->lease_start, w->lease_n);
    if (rc)
        return rc;
    struct ipc_state *st = ipc_state_get(pool);
    if (!st)
        return -ENOMEM;
    atomic_store(&sh->ledger->slot[sh->slot].key, st->key);
    pthread_mutex_lock(&pool->lock);
    /* What the devices offer the pool's processes together, not what was
     * free when this one attached (on cuda the others' memory was not),
     * this process's limit below it. */
    size_t limit = pool->cfg.process_limit;
    for (int d = 0; d < pool->ndev; d++) {
        sh->capacity[d] = w->device_mem[d];
        size_t cap = limit && limit < sh->capacity[d] ? limit
                                                      : sh->capacity[d];
        pool->dev[d].capacity = pool->dev[d].capacity_max =
            cap & ~(pool->chunk_size - 1);
    }
    pool->share = sh;
    pool->share_ops = &share_ops;
    pthread_mutex_unlock(&pool->lock);
    return 0;
}

int share_attach(const char *name, const char *config,
                 const struct pool_observer *obs, ump_pool_t **pool_p)
{
    if (!pool_p || !name) {
        ump_log_error("%s: %s is NULL", fn_attach, name ? "pool_p" : "name");
        return -EINVAL;
    }
    int rc = usock_name_check(name);
    if (rc)
        return rc;
    struct share_state *sh = state_new(name);
    struct share_welcome *w = malloc(sizeof(*w));
    struct ump_config *cfg = malloc(sizeof(*cfg));
    ump_pool_t *pool = NULL;
    if (!sh || !w || !cfg) {
        rc = -ENOMEM;
        goto out;
    }
    rc = usock_connect(name, &sh->fd);
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        ump_log_error("%s: no pool is shared as %s (%s)", fn_attach, name,
                      rc == -ENOENT ? "no such socket"
                                    : "its sharer ended");
        rc = -ENOENT;
    }
    int ledger = -1;
    if (!rc)
        rc = usock_peer_check(sh->fd, NULL);
    /* The sharer's process, watched while its answers are awaited; a
     * kernel without pidfds (before 5.3) or a sandbox that refuses them
     * leaves it unwatched. */
    int pfd = rc ? -1 : usock_peer_pidfd(sh->fd);
    if (pfd == -ESRCH) {
        ump_log_error("%s: no pool is shared as %s (its sharer ended)",
                      fn_attach, name);
        rc = -ENOENT;
    }
    sh->sharer_pidfd = pfd >= 0 ? pfd : -1;
    if (!rc)
        rc = hello(name, sh->fd, sh->sharer_pidfd, w, &ledger);
    if (!rc) {
        sh->slot = (int)w->slot;
        rc = ledger_map(sh, ledger, w->ledger_bytes);
        close(ledger);
    }
    if (!rc)
        rc = attach_config(config, w, cfg);
    if (!rc) {
        rc = pool_create_at(cfg, (void *)(uintptr_t)w->base, w->size, obs,
                            &pool);
        if (rc == -EADDRINUSE || rc == -EEXIST)
            ump_log_error("%s: the shared pool's addresses %#llx..%#llx "
                          "are taken in this process: attach before "
                          "anything else maps there", fn_attach,
                          (unsigned long long)w->base,
                          (unsigned long long)(w->base + w->size));
    }
    if (!rc && (rc = attach_check(pool, w)) == 0 &&
        (rc = attach_install(pool, sh, w)) == 0) {
        ump_log_debug("%s: attached to %s as process %d of it", fn_attach,
                      name, sh->slot);
        *pool_p = pool;
        sh = NULL;
    }
out:
    if (rc && pool)
        pool_destroy(pool);
    if (sh)
        state_free(sh); /* its connection's end: the sharer takes back */
    free(w);
    free(cfg);
    return rc;
}

/* --- detach -------------------------------------------------------------- */

void share_stop(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    if (sh)
        sh->stopping = true;
    pthread_mutex_unlock(&pool->lock);
    if (!sh)
        return;
    atomic_store(&pool->ipc->sharing, NULL); /* the server has stopped */
    if (sh->sharer) /* the attached keep what they have */
        usock_unlisten(&sh->listener);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(void *const *)a;
    uintptr_t y = (uintptr_t)*(void *const *)b;
    return (x > y) - (x < y);
}

void share_note_kept(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    /* An attached process's only: the sharer gives its slot back once
     * the last open ends (share_reclaim). The sharer's own slot nobody
     * gives back (its destroy stops sharing): a charge there would
     * outlive the opens, so its memory is uncharged as it is released,
     * the driver the last word on what its openers still map. */
    struct share_state *sh = pool->share && !pool->share->sharer
                                 ? pool->share
                                 : NULL;
    struct ipc_state *st = pool->ipc;
    struct chunk **cs = NULL;
    size_t n = 0, cap = 0;
    /* The chunks under the exports still open (their openers map whole
     * chunks), each once: two objects of one slab, or two carved runs,
     * may share one. */
    for (int b = 0; sh && b < IPC_BUCKETS; b++)
        for (struct ipc_export *e = st->buckets[b]; e; e = e->next) {
            if (!e->opens)
                continue;
            size_t g, len;
            ipc_export_range(e, &g, &len);
            for (size_t x = g; x < g + len;) {
                struct chunk *c = chunks_at(pool, x);
                if (!c) {
                    x++;
                    continue;
                }
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 16;
                    struct chunk **p = realloc(cs, nc * sizeof(*p));
                    if (!p) /* uncharged as before: the driver decides */
                        goto out;
                    cs = p;
                    cap = nc;
                }
                cs[n++] = c;
                x = c->g + c->n;
            }
        }
    if (n)
        qsort(cs, n, sizeof(*cs), cmp_ptr);
    for (size_t i = 0; i < n; i++)
        if ((!i || cs[i] != cs[i - 1]) && cs[i]->device >= 0 &&
            cs[i]->device < pool->ndev)
            sh->kept[cs[i]->device] += (uint64_t)cs[i]->n
                                       << pool->chunk_shift;
out:
    pthread_mutex_unlock(&pool->lock);
    free(cs);
}

void share_fini(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    pool->share = NULL;
    pool->share_ops = NULL;
    pthread_mutex_unlock(&pool->lock);
    if (!sh)
        return;
    /* The destroy released every chunk, uncharging them; those open
     * elsewhere are charged again, until the sharer gives the slot back
     * after their last close (share_reclaim), as for a process killed.
     * Only while the sharer serves and hears the DETACH: else nobody
     * would ever clear the charge (a sharer that stops just after
     * leaves it, counted while this process runs). */
    bool clearable = sh->fd >= 0 && sharer_serves(sh->ledger);
    for (int d = 0; clearable && d < UMP_MAX_DEVICES; d++)
        if (sh->kept[d])
            atomic_fetch_add(&sh->ledger->slot[sh->slot].used[d],
                             sh->kept[d]);
    if (sh->sharer) /* its memory is released: not a process of it now */
        atomic_store(&sh->ledger->slot[0].state, SLOT_GONE);
    state_free(sh); /* an attached one's DETACH */
}

void share_stop_in_child(ump_pool_t *pool)
{
    struct share_state *sh = pool->share;
    if (!sh)
        return;
    pool->share = NULL;
    pool->share_ops = NULL;
    /* The parent's: its socket file and its attachment stay (no DETACH
     * on its connection). */
    if (sh->listener.fd >= 0)
        close(sh->listener.fd);
    if (sh->fd >= 0)
        close(sh->fd);
    sh->fd = -1;
    state_free(sh);
}

/* --- imports at the same address ----------------------------------------- */

int share_hold(ump_pool_t *pool, uint32_t pid, uint64_t key)
{
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    int found = -1;
    for (int k = 0; sh && k < SHARE_SLOTS && found < 0; k++) {
        struct share_slot *s = &sh->ledger->slot[k];
        if (k == sh->slot || atomic_load(&s->state) != SLOT_LIVE ||
            atomic_load(&s->pid) != pid || atomic_load(&s->key) != key)
            continue;
        /* Counted first, then checked again: the slot cannot have been
         * given back (and given to another) after this. */
        atomic_fetch_add(&sh->ledger->slot[sh->slot].holds[k], 1);
        if (atomic_load(&s->state) == SLOT_LIVE &&
            atomic_load(&s->pid) == pid && atomic_load(&s->key) == key)
            found = k;
        else
            atomic_fetch_sub(&sh->ledger->slot[sh->slot].holds[k], 1);
    }
    pthread_mutex_unlock(&pool->lock);
    return found;
}

void share_unhold(ump_pool_t *pool, int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    if (sh)
        atomic_fetch_sub(&sh->ledger->slot[sh->slot].holds[slot], 1);
    pthread_mutex_unlock(&pool->lock);
}

static bool overlaps(const struct share_range *r, size_t n, size_t g,
                     size_t k)
{
    for (size_t i = 0; i < n; i++)
        if (g < r[i].start + r[i].n && r[i].start < g + k)
            return true;
    return false;
}

bool share_claim(ump_pool_t *pool, int slot, uint64_t addr, size_t bytes)
{
    struct vas *v = &pool->vas;
    void *p = (void *)(uintptr_t)addr;
    if (slot < 0 || !bytes || !vas_contains(v, p) ||
        bytes > v->size - (addr - v->base) ||
        (addr | bytes) & (pool->chunk_size - 1))
        return false;
    size_t g = vas_index(v, p), k = bytes >> pool->chunk_shift;
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    bool ok = sh && !overlaps(sh->inplace, sh->ninplace, g, k);
    if (ok && !sh->sharer) {
        ok = !overlaps(sh->own, sh->nown, g, k);
    } else if (ok) { /* every granule in the maker's leases */
        size_t covered = 0;
        for (size_t i = 0; i < sh->nleases; i++) {
            const struct share_range *r = &sh->leases[i];
            if (r->slot != slot || !overlaps(r, 1, g, k))
                continue;
            size_t a = r->start > g ? r->start : g;
            size_t b = r->start + r->n < g + k ? r->start + r->n : g + k;
            covered += b - a;
        }
        ok = covered == k;
    }
    if (ok)
        ok = !range_add(&sh->inplace, &sh->ninplace, &sh->capinplace,
                        (struct share_range){g, k, slot});
    pthread_mutex_unlock(&pool->lock);
    return ok;
}

void share_unclaim(ump_pool_t *pool, uint64_t addr, size_t bytes)
{
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    size_t g = vas_index(&pool->vas, (void *)(uintptr_t)addr);
    for (size_t i = 0; sh && i < sh->ninplace; i++)
        if (sh->inplace[i].start == g &&
            sh->inplace[i].n == bytes >> pool->chunk_shift) {
            sh->inplace[i] = sh->inplace[--sh->ninplace];
            break;
        }
    pthread_mutex_unlock(&pool->lock);
}

/* --- for the statistics segment ----------------------------------------- */

bool share_name(ump_pool_t *pool, char *name, size_t len)
{
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    snprintf(name, len, "%s", sh ? sh->name : "");
    pthread_mutex_unlock(&pool->lock);
    return sh != NULL;
}

int share_processes(ump_pool_t *pool, char *name, size_t len,
                    struct share_proc *out, int cap, int *self_p)
{
    int n = 0;
    *self_p = -1;
    name[0] = '\0';
    pthread_mutex_lock(&pool->lock);
    struct share_state *sh = pool->share;
    if (sh)
        snprintf(name, len, "%s", sh->name);
    bool serving = sh && sharer_serves(sh->ledger);
    for (int k = 0; sh && k < SHARE_SLOTS && n < cap; k++) {
        const struct share_slot *s = &sh->ledger->slot[k];
        uint32_t pid = atomic_load_explicit(&s->pid, memory_order_relaxed);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) !=
                SLOT_LIVE ||
            !pid || pid > INT32_MAX || !counts(sh->ledger, k, serving))
            continue;
        uint64_t bytes = 0;
        for (int d = 0; d < pool->ndev; d++)
            bytes += atomic_load_explicit(&s->used[d], memory_order_relaxed);
        if (k == sh->slot)
            *self_p = n;
        out[n++] = (struct share_proc){(int32_t)pid, (uint32_t)k, bytes};
    }
    pthread_mutex_unlock(&pool->lock);
    return n;
}
