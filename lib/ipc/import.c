/*
 * The opener's side of IPC handles: ump_ipc_open and ump_ipc_close. An
 * open asks the maker's server (one connection per maker's pool, kept for
 * the opener pool's life: the server counts opens per connection) for the
 * export's chunks, checks the reply as it would a stranger's, imports each
 * chunk (chunk_import), maps them at the maker's addresses where this
 * process has them free (else anywhere) and gives access to every device
 * that reaches them. Nothing of it is the opener's pool's memory: it is
 * not counted in its statistics, and the maker's ledger keeps it.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>

#include "backend/backend.h"
#include "front/check.h"
#include "ipc/ipc.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "mem/chunks.h"
#include "util/log.h"

static const char fn_open[] = "ump_ipc_open";

/* Is p's maker gone (its connection ended or broke, its process
 * ended)? */
static bool peer_gone(const struct ipc_peer *p)
{
    if (p->fd < 0)
        return true;
    struct pollfd pf[2] = {{p->fd, POLLRDHUP, 0}, {p->pidfd, POLLIN, 0}};
    if (poll(pf, p->pidfd >= 0 ? 2 : 1, 0) <= 0)
        return false;
    return (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) ||
           pf[1].revents;
}

/* Peers through which nothing is open and whose maker is gone are
 * dropped: an opener that outlives many makers (a server fed by short
 * workers) keeps no descriptor for them. A live maker's stays, with what
 * its server remembers of this connection (the handles closed here). */
static void peers_prune(struct ipc_state *st)
{
    for (struct ipc_peer **pp = &st->peers, *p; (p = *pp);) {
        if (p->imports || !peer_gone(p)) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        if (p->fd >= 0)
            close(p->fd);
        if (p->pidfd >= 0)
            close(p->pidfd);
        free(p);
    }
}

/* The connection to the maker's server of f, made when there is none. */
static int peer_get(struct ipc_state *st, const struct ipc_handle_fields *f,
                    struct ipc_peer **p_p)
{
    peers_prune(st);
    for (struct ipc_peer *p = st->peers; p; p = p->next)
        if (p->fd >= 0 && p->pid == f->pid && p->key == f->key) {
            *p_p = p;
            return 0;
        }
    char name[64];
    int fd;
    pid_t pid;
    ipc_sock_name(f->pid, f->key, name, sizeof(name));
    int rc = usock_connect(name, &fd);
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        ump_log_error("%s: the handle's pool (process %u) is gone, or the "
                      "handle never was one", fn_open, (unsigned)f->pid);
        return -EINVAL;
    }
    if (rc)
        return rc;
    rc = usock_peer_check(fd, &pid);
    if (!rc && (uint32_t)pid != f->pid) {
        ump_log_error("%s: the handle's socket is served by process %d, "
                      "not by its maker %u", fn_open, (int)pid,
                      (unsigned)f->pid);
        rc = -EINVAL;
    }
    /* The maker's life, watched while a reply is awaited: a process that
     * inherited the maker's socket (a child it forked) keeps connections
     * queued after the maker is gone, and none would ever be answered. */
    int pidfd = rc ? -1 : usock_peer_pidfd(fd);
    if (pidfd == -ESRCH) {
        ump_log_error("%s: the handle's pool (process %u) is gone", fn_open,
                      (unsigned)f->pid);
        rc = -EINVAL;
    }
    if (pidfd < 0) /* no pidfds here: the connection's end alone */
        pidfd = -1;
    struct ipc_peer *p = rc ? NULL : malloc(sizeof(*p));
    if (!p) {
        close(fd);
        if (pidfd >= 0)
            close(pidfd);
        return rc ? rc : -ENOMEM;
    }
    *p = (struct ipc_peer){.pid = f->pid, .key = f->key, .fd = fd,
                           .pidfd = pidfd, .next = st->peers};
    st->peers = p;
    *p_p = p;
    return 0;
}

/* One message of len bytes from p's maker, with at most maxfds
 * descriptors, waited for with no time-out while the maker lives (a maker
 * that is alive answers, if late: stopped in a debugger, say). */
static int recv_from(struct ipc_peer *p, void *buf, size_t len, int *fds,
                     int maxfds, int *nfds_p)
{
    return usock_recv_watched(p->fd, p->pidfd, buf, len, fds, maxfds,
                              nfds_p);
}

/* A request on p's connection; its reply comes next. A connection that
 * failed is closed (the maker then closes what it had open), and the
 * next open makes a new one. */
static int request(struct ipc_peer *p, int op,
                   const struct ipc_handle_fields *f)
{
    struct ipc_req q = {.op = (uint32_t)op, .key = f->key, .gen = f->gen,
                        .ticket = f->ticket, .addr = f->addr};
    int rc = usock_send(p->fd, &q, sizeof(q), NULL, 0);
    if (rc) {
        close(p->fd);
        p->fd = -1;
    }
    return rc;
}

/* CLOSE or UNDO of f's open; the maker's verdict. */
static int unopen(struct ipc_peer *p, int op,
                  const struct ipc_handle_fields *f)
{
    if (p->fd < 0) /* gone: the maker closed it as it went */
        return 0;
    struct ipc_status_reply r;
    int nfds;
    int rc = request(p, op, f);
    if (!rc)
        rc = recv_from(p, &r, sizeof(r), NULL, 0, &nfds);
    if (rc) {
        if (p->fd >= 0)
            close(p->fd);
        p->fd = -1;
        return 0; /* the connection's end closes it */
    }
    return r.status;
}

/* What ump_ipc_open received and made: the chunks, their descriptors,
 * the reservation and the imports so far. */
struct opening {
    struct ipc_chunk_desc *d;
    int *fds;
    size_t n, nfds;
    uint64_t base, bytes;
    void *va;
    struct ipc_mapped *m;
    size_t nmapped; /* imported (m[i].h), of which nmap also mapped */
    size_t nmap;
    bool in_pool;   /* at its address in this pool's own reservation */
};

static void opening_undo(ump_pool_t *pool, struct opening *o)
{
    const struct backend_ops *be = pool->be;
    for (size_t i = 0; i < o->nmap; i++)
        be->unmap(pool->bctx, (char *)o->va + o->m[i].off, o->m[i].size);
    for (size_t i = 0; i < o->nmapped; i++)
        be->chunk_release(pool->bctx, o->m[i].h);
    if (o->in_pool)
        share_unclaim(pool, o->base, o->bytes);
    else if (o->va)
        be->unreserve(pool->bctx, o->va, o->bytes);
    for (size_t i = 0; i < o->nfds; i++)
        close(o->fds[i]);
    free(o->d);
    free(o->fds);
    free(o->m);
}

/* A reply's chunks checked as a stranger's: one after the other from 0
 * over bytes, each whole granules of a device of this pool, and the
 * allocation inside. */
static int check_chunks(ump_pool_t *pool, const struct opening *o,
                        const struct ipc_handle_fields *f)
{
    uint64_t at = 0;
    for (size_t i = 0; i < o->n; i++) {
        const struct ipc_chunk_desc *d = &o->d[i];
        if (d->device < 0 || d->device >= pool->ndev) {
            ump_log_error("%s: the maker's memory is on its device %d; "
                          "this pool has %d", fn_open, (int)d->device,
                          pool->ndev);
            return -EINVAL;
        }
        size_t gran = pool->be->granularity(pool->bctx, d->device);
        if (d->off != at || !d->size || d->size % gran ||
            d->size > o->bytes - at)
            goto bad;
        at += d->size;
    }
    if (at != o->bytes || o->base % pool->be->granularity(pool->bctx, 0) ||
        f->addr < o->base || f->addr - o->base > o->bytes ||
        f->size > o->bytes - (f->addr - o->base))
        goto bad;
    return 0;
bad:
    ump_log_error("%s: the maker's reply is malformed", fn_open);
    return -EPROTO;
}

/* p's connection can no longer be trusted (a reply cut, malformed or
 * late: the next one read could be this one's rest): closed. The maker
 * then closes every open of this pool through it, so the others are no
 * longer held for us: said once. */
static void peer_break(struct ipc_state *st, struct ipc_peer *p)
{
    size_t held = 0;
    for (struct ipc_import *im = st->imports; im; im = im->next)
        held += im->peer == p;
    if (held)
        ump_log_warn("%s: the connection to process %u broke; its %zu "
                     "allocations open here are no longer held for this "
                     "process", fn_open, (unsigned)p->pid, held);
    close(p->fd);
    p->fd = -1;
}

/* The reply to OPEN, all its messages, into o. *refused_p: the maker said
 * no (its status is returned), and counted nothing. */
static int receive(struct ipc_peer *p, struct opening *o, bool *refused_p)
{
    struct ipc_open_reply *r = malloc(sizeof(*r));
    int rc = r ? 0 : -ENOMEM;
    uint32_t got = 0, total = 1;
    while (!rc && got < total) {
        int fds[USOCK_MAX_FDS], nfds = 0;
        rc = recv_from(p, r, sizeof(*r), fds, USOCK_MAX_FDS, &nfds);
        if (rc)
            break;
        if (!got && r->status) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            *refused_p = true;
            rc = r->status < 0 ? r->status : -EPROTO;
            break;
        }
        if (!got) { /* the first: the sizes of everything */
            total = r->total;
            o->base = r->base;
            o->bytes = r->bytes;
            o->d = total ? calloc(total, sizeof(*o->d)) : NULL;
            o->fds = total ? calloc(total, sizeof(*o->fds)) : NULL;
            if (!o->d || !o->fds)
                rc = total ? -ENOMEM : -EPROTO;
        }
        if (!rc && (r->status || r->total != total || r->first != got ||
                    !r->count || r->count > total - got ||
                    r->count > USOCK_MAX_FDS || (uint32_t)nfds != r->count ||
                    r->base != o->base || r->bytes != o->bytes))
            rc = -EPROTO;
        if (rc) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            break;
        }
        memcpy(o->d + got, r->chunk, r->count * sizeof(*o->d));
        memcpy(o->fds + got, fds, r->count * sizeof(int));
        got += r->count;
        o->n = o->nfds = got;
    }
    free(r);
    if (rc == -EPROTO)
        ump_log_error("%s: the maker's reply is malformed", fn_open);
    return rc;
}

/* Reserves the maker's addresses, else any, and imports, maps and gives
 * access to each chunk. In a shared pool, the maker's addresses (another
 * process's slice of them) are this pool's reservation already: mapped
 * there. */
static int map_all(ump_pool_t *pool, struct opening *o, int slot)
{
    const struct backend_ops *be = pool->be;
    size_t align = be->granularity(pool->bctx, 0);
    void *at = (void *)(uintptr_t)o->base;
    int rc = 0;
    if (share_claim(pool, slot, o->base, o->bytes)) {
        o->va = at;
        o->in_pool = true;
    } else {
        /* A probe: the maker's range is often taken here (by this
         * process's own pool), which is no error; a failure that matters
         * shows again in the reserve that follows. */
        log_mute(true);
        rc = be->reserve_at ? be->reserve_at(pool->bctx, at, o->bytes, align)
                            : -ENOTSUP;
        log_mute(false);
        if (!rc)
            o->va = at;
        else if ((rc = be->reserve(pool->bctx, o->bytes, align, &o->va)))
            return rc;
    }
    o->m = calloc(o->n, sizeof(*o->m));
    if (!o->m)
        return -ENOMEM;
    for (size_t i = 0; i < o->n; i++) {
        const struct ipc_chunk_desc *d = &o->d[i];
        struct ipc_mapped *m = &o->m[i];
        int devs[UMP_MAX_DEVICES];
        m->off = d->off;
        m->size = d->size;
        rc = be->chunk_import(pool->bctx, o->fds[i], d->file_off, d->size,
                              d->device, &m->h);
        if (rc)
            return rc;
        o->nmapped++;
        void *va = (char *)o->va + d->off;
        if ((rc = be->map(pool->bctx, va, d->size, m->h)))
            return rc;
        o->nmap++;
        int nd = chunks_accessors(pool, d->device, devs);
        if ((rc = be->set_access(pool->bctx, va, d->size, devs, nd)))
            return rc;
    }
    return 0;
}

/* A mapping of p's maker over the same chunks as o's (the same range of
 * its addresses: while an import holds them, the maker keeps them), or
 * NULL. imp_lock held. */
static struct ipc_mapping *mapping_of(struct ipc_state *st,
                                      const struct ipc_peer *p,
                                      const struct opening *o)
{
    for (struct ipc_import *im = st->imports; im; im = im->next)
        if (im->peer == p && im->base == o->base &&
            im->map->bytes == o->bytes)
            return im->map;
    return NULL;
}

/* The pool's open of f, or NULL. imp_lock held. */
static struct ipc_import *import_of(struct ipc_state *st,
                                    const struct ipc_handle_fields *f)
{
    for (struct ipc_import *im = st->imports; im; im = im->next)
        if (im->key == f->key && im->gen == f->gen &&
            im->ticket == f->ticket)
            return im;
    return NULL;
}

static int open_locked(ump_pool_t *pool, struct ipc_state *st,
                       const struct ipc_handle_fields *f, void **ptr_p)
{
    struct ipc_import *im = import_of(st, f);
    if (im) {
        im->refs++;
        *ptr_p = im->ptr;
        return 0;
    }
    if (!pool->be->chunk_import) {
        ump_log_error("%s: the %s backend cannot import memory", fn_open,
                      pool->be->name);
        return -ENOTSUP;
    }
    struct ipc_peer *p;
    int rc = peer_get(st, f, &p);
    if (rc)
        return rc;
    /* A maker of this shared pool: its addresses stay its own while this
     * process holds them mapped (counted before it is asked). */
    int slot = share_hold(pool, f->pid, f->key);
    rc = request(p, IPC_OPEN, f);
    if (rc) {
        share_unhold(pool, slot);
        return rc;
    }
    struct opening o = {0};
    bool refused = false;
    rc = receive(p, &o, &refused);
    if (refused && (rc == -ENOENT || rc == -EALREADY)) {
        ump_log_error("%s: %s", fn_open,
                      rc == -ENOENT ? "its maker freed the allocation (or "
                                      "it never was exported)"
                                    : "the handle was opened and closed "
                                      "here already (replayed); ask its "
                                      "maker for a new one");
        opening_undo(pool, &o);
        share_unhold(pool, slot);
        return -EINVAL;
    }
    if (refused && rc) {
        ump_log_error("%s: the maker could not export the allocation: %s",
                      fn_open, ump_strerror(rc));
        opening_undo(pool, &o);
        share_unhold(pool, slot);
        return rc;
    }
    if (rc) { /* cut or malformed: the connection is done for */
        bool gone = rc == -ECONNRESET;
        peer_break(st, p);
        opening_undo(pool, &o);
        share_unhold(pool, slot);
        if (gone)
            ump_log_error("%s: the handle's pool (process %u) ended before "
                          "it answered", fn_open, (unsigned)f->pid);
        return gone ? -EINVAL : rc == -EPROTO ? -EPROTO : -EIO;
    }
    /* Whole: what this pool cannot take is given back, the connection
     * kept (it holds this pool's other opens). The chunks of a mapping
     * this pool has already (another object of the slab) are not mapped
     * twice. */
    rc = check_chunks(pool, &o, f);
    im = rc ? NULL : calloc(1, sizeof(*im));
    struct ipc_mapping *map = im ? mapping_of(st, p, &o) : NULL;
    bool fresh = !map;
    if (im && fresh) {
        map = calloc(1, sizeof(*map));
        rc = map ? map_all(pool, &o, slot) : -ENOMEM;
    } else if (!rc && !im) {
        rc = -ENOMEM;
    }
    if (rc) { /* the maker counted the open: taken back */
        if (fresh)
            free(map);
        free(im);
        opening_undo(pool, &o);
        share_unhold(pool, slot);
        unopen(p, IPC_UNDO, f);
        return rc;
    }
    if (fresh) {
        *map = (struct ipc_mapping){.va = o.va, .bytes = o.bytes,
                                    .in_pool = o.in_pool, .nchunks = o.n,
                                    .chunks = o.m};
    } else {
        free(o.m);
    }
    map->users++;
    for (size_t i = 0; i < o.nfds; i++)
        close(o.fds[i]);
    free(o.d);
    free(o.fds);
    *im = (struct ipc_import){
        .key = f->key, .gen = f->gen, .ticket = f->ticket, .addr = f->addr,
        .base = o.base, .map = map,
        .ptr = (char *)map->va + (f->addr - o.base),
        .refs = 1, .peer = p, .slot = slot, .next = st->imports,
    };
    st->imports = im;
    p->imports++;
    if (map->va != (void *)(uintptr_t)o.base)
        ump_log_info("%s: %#llx is taken here: mapped at %p",
                     fn_open, (unsigned long long)f->addr, im->ptr);
    *ptr_p = im->ptr;
    return 0;
}

UMP_EXPORT int ump_ipc_open(ump_pool_t *pool, const ump_ipc_handle_t *handle,
                            void **ptr_p)
{
    int rc = pool_check(pool, fn_open);
    if (rc)
        return rc;
    if (!handle || !ptr_p) {
        ump_log_error("%s: %s is NULL", fn_open, handle ? "ptr_p" : "handle");
        return -EINVAL;
    }
    struct ipc_handle_fields f;
    if ((rc = ipc_handle_unpack(handle, &f, fn_open)))
        return rc;
    int mine = pool->be == &sim_backend_ops ? IPC_BACKEND_SIM
                                            : IPC_BACKEND_CUDA;
    if (f.backend != mine) {
        ump_log_error("%s: the handle is of a %s pool, this one runs %s",
                      fn_open, f.backend == IPC_BACKEND_SIM ? "sim" : "cuda",
                      pool->be->name);
        return -EINVAL;
    }
    struct ipc_state *st = ipc_state_get(pool);
    if (!st)
        return -ENOMEM;
    if (f.key == st->key && f.pid == st->pid) {
        ump_log_error("%s: the handle is of this pool: use its pointer, "
                      "%#llx", fn_open, (unsigned long long)f.addr);
        return -EINVAL;
    }
    pthread_mutex_lock(&st->imp_lock);
    rc = open_locked(pool, st, &f, ptr_p);
    pthread_mutex_unlock(&st->imp_lock);
    return rc;
}

/* Unmaps and releases im's memory when no other import maps it, and
 * frees im. */
static void import_unmap(ump_pool_t *pool, struct ipc_import *im)
{
    const struct backend_ops *be = pool->be;
    struct ipc_mapping *m = im->map;
    if (!--m->users) {
        for (size_t i = 0; i < m->nchunks; i++) {
            be->unmap(pool->bctx, (char *)m->va + m->chunks[i].off,
                      m->chunks[i].size);
            be->chunk_release(pool->bctx, m->chunks[i].h);
        }
        if (m->in_pool)
            share_unclaim(pool, (uint64_t)(uintptr_t)m->va, m->bytes);
        else
            be->unreserve(pool->bctx, m->va, m->bytes);
        free(m->chunks);
        free(m);
    }
    share_unhold(pool, im->slot);
    free(im);
}

/* ump_ipc_close; op IPC_CLOSE (the maker refuses the handle here from
 * then on) or IPC_UNDO (it does not: nothing noted). */
static int close_import(ump_pool_t *pool, void *ptr, int op)
{
    int rc = pool_check(pool, "ump_ipc_close");
    if (rc)
        return rc;
    struct ipc_state *st = pool->ipc ? ipc_state_get(pool) : NULL;
    struct ipc_import **pp = NULL, *im = NULL;
    if (st) {
        pthread_mutex_lock(&st->imp_lock);
        for (pp = &st->imports; *pp && (*pp)->ptr != ptr; pp = &(*pp)->next)
            ;
        im = *pp;
    }
    if (!im) {
        if (st)
            pthread_mutex_unlock(&st->imp_lock);
        return pool_bad_pointer(ptr, "ump_ipc_close",
                                "not what ump_ipc_open returned here "
                                "(closed already?)");
    }
    if (--im->refs) {
        pthread_mutex_unlock(&st->imp_lock);
        return 0;
    }
    *pp = im->next;
    struct ipc_handle_fields f = {.key = im->key, .gen = im->gen,
                                  .ticket = im->ticket, .addr = im->addr};
    struct ipc_peer *p = im->peer;
    /* Unmapped first: the maker may reuse the memory once it hears. */
    import_unmap(pool, im);
    rc = unopen(p, op, &f);
    p->imports--;
    peers_prune(st);
    pthread_mutex_unlock(&st->imp_lock);
    if (rc)
        ump_log_warn("ump_ipc_close: the maker did not know the open "
                     "(%s); unmapped here", ump_strerror(rc));
    return 0;
}

UMP_EXPORT int ump_ipc_close(ump_pool_t *pool, void *ptr)
{
    return close_import(pool, ptr, IPC_CLOSE);
}

int ipc_close_unnoted(ump_pool_t *pool, void *ptr)
{
    return close_import(pool, ptr, IPC_UNDO);
}

void ipc_imports_drop(ump_pool_t *pool, bool in_child)
{
    struct ipc_state *st = pool->ipc;
    size_t left = 0;
    while (st->imports) {
        struct ipc_import *im = st->imports;
        st->imports = im->next;
        left++;
        if (in_child) { /* the backend drops the mappings itself */
            if (!--im->map->users) {
                free(im->map->chunks);
                free(im->map);
            }
            free(im);
        } else {
            import_unmap(pool, im);
        }
    }
    if (left && !in_child)
        ump_log_warn("ump_pool_destroy: %zu IPC handles were still open "
                     "(ump_ipc_close): unmapped", left);
    while (st->peers) { /* the makers close what was open on hearing EOF */
        struct ipc_peer *p = st->peers;
        st->peers = p->next;
        if (p->fd >= 0)
            close(p->fd);
        if (p->pidfd >= 0)
            close(p->pidfd);
        free(p);
    }
}
