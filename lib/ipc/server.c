/*
 * A pool's IPC server: one thread, started at the pool's first export,
 * listening on the pool's socket (ipc_sock_name: its pid and key) in the
 * user's socket directory (util/unixsock.h: another user's process is
 * refused). Openers connect once per pool and send requests (wire.h):
 * OPEN answers with the export's chunks as descriptors (chunk_export),
 * CLOSE ends an open and UNDO takes back one that failed in the opener.
 * Opens are counted per connection: a connection that goes (its process
 * closed it, or died) closes what it had open, so the maker frees what
 * only a dead process held. A connection that sends anything malformed
 * is dropped the same way, and so is one that does not read its replies:
 * the server's sockets never block (a full one drops its connection), so
 * no peer can stall the others' opens and closes.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "mem/chunks.h"
#include "util/clock.h"
#include "util/log.h"

/* Connections one server keeps at most (each a descriptor). */
#define IPC_MAX_CONNS 1024
/* How long the listener rests after accepting failed for want of
 * descriptors or memory. */
#define IPC_BACKOFF_MS 100

/* Grows *arr (elements of size each) to hold one more. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 8;
    void *p = realloc(*arr, c * size);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

static int reply_status(int fd, int status)
{
    struct ipc_status_reply r = {.status = status};
    return usock_send(fd, &r, sizeof(r), NULL, 0);
}

/* The chunks of export e's granules (ipc_export_range), pool lock held:
 * their handles and where they lie from the first one's start (*base_p),
 * over *bytes_p. */
static int collect(ump_pool_t *pool, struct ipc_export *e,
                   struct ipc_chunk_desc **d_p, ump_handle_t **h_p,
                   size_t *n_p, uint64_t *base_p, uint64_t *bytes_p)
{
    size_t start, len;
    ipc_export_range(e, &start, &len);
    /* Never once exported (ump_evict and suspends refuse), but a run the
     * tiers track may be away from its chunks: refused, not read. */
    for (size_t g = start; g < start + len; g++)
        if ((e->run && e->run->res) || !chunks_at(pool, g))
            return -EBUSY;
    size_t g0 = chunks_at(pool, start)->g;
    struct chunk *last = chunks_at(pool, start + len - 1);
    size_t end = last->g + last->n, n = 0;
    for (size_t g = g0; g < end; g += chunks_at(pool, g)->n)
        n++;
    struct ipc_chunk_desc *d = calloc(n, sizeof(*d));
    ump_handle_t *h = calloc(n, sizeof(*h));
    if (!d || !h) {
        free(d);
        free(h);
        return -ENOMEM;
    }
    size_t i = 0;
    for (size_t g = g0; g < end; i++) {
        struct chunk *c = chunks_at(pool, g);
        d[i] = (struct ipc_chunk_desc){
            .off = (uint64_t)(g - g0) << pool->chunk_shift,
            .size = (uint64_t)c->n << pool->chunk_shift,
            .device = c->device,
        };
        h[i] = c->handle;
        g += c->n;
    }
    *d_p = d;
    *h_p = h;
    *n_p = n;
    *base_p = (uint64_t)(uintptr_t)vas_addr(&pool->vas, g0);
    *bytes_p = (uint64_t)(end - g0) << pool->chunk_shift;
    return 0;
}

/* c's open of ticket, or NULL; *clash_p when the ticket is open with
 * another export (a forged request: its counts must not mix). */
static struct ipc_open *find_open(struct ipc_conn *c, uint64_t ticket,
                                  uint64_t gen, uint64_t addr, bool *clash_p)
{
    *clash_p = false;
    for (size_t i = 0; i < c->nopens; i++)
        if (c->opens[i].ticket == ticket) {
            if (c->opens[i].gen == gen && c->opens[i].addr == addr)
                return &c->opens[i];
            *clash_p = true;
            return NULL;
        }
    return NULL;
}

/* One open of (gen at addr, in granule g) less, pool lock taken. */
static void unopen(ump_pool_t *pool, size_t g, uint64_t addr, uint64_t gen)
{
    pthread_mutex_lock(&pool->lock);
    struct ipc_export *e =
        ipc_export_find(pool->ipc, g, (void *)(uintptr_t)addr, gen);
    if (e)
        ipc_export_unopen(pool, e);
    pthread_mutex_unlock(&pool->lock);
}

/* Sends the chunks' descriptors in messages of USOCK_MAX_FDS. */
static int send_chunks(int fd, const struct ipc_chunk_desc *d, const int *fds,
                       size_t n, uint64_t base, uint64_t bytes)
{
    struct ipc_open_reply *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    int rc = 0;
    for (size_t first = 0; first < n && !rc; first += USOCK_MAX_FDS) {
        size_t k = n - first < USOCK_MAX_FDS ? n - first : USOCK_MAX_FDS;
        memset(m, 0, sizeof(*m));
        m->total = (uint32_t)n;
        m->first = (uint32_t)first;
        m->count = (uint32_t)k;
        m->base = base;
        m->bytes = bytes;
        memcpy(m->chunk, d + first, k * sizeof(*d));
        rc = usock_send(fd, m, sizeof(*m), fds + first, (int)k);
    }
    free(m);
    return rc;
}

/* OPEN: a status reply for what is refused (the connection stays), else
 * the chunks; a negative return drops the connection. */
static int serve_open(ump_pool_t *pool, struct ipc_conn *c,
                      const struct ipc_req *q)
{
    struct ipc_open_reply no = {0};
    void *addr = (void *)(uintptr_t)q->addr;
    if (grow((void **)&c->opens, &c->capopens, c->nopens,
             sizeof(*c->opens))) {
        no.status = -ENOMEM;
        return usock_send(c->fd, &no, sizeof(no), NULL, 0);
    }
    size_t g = vas_contains(&pool->vas, addr) ? vas_index(&pool->vas, addr)
                                              : 0;
    bool clash;
    struct ipc_open *o = find_open(c, q->ticket, q->gen, q->addr, &clash);
    if (clash) {
        no.status = -EINVAL;
        return usock_send(c->fd, &no, sizeof(no), NULL, 0);
    }
    pthread_mutex_lock(&pool->lock);
    struct ipc_export *e = vas_contains(&pool->vas, addr)
                               ? ipc_export_find(pool->ipc, g, addr, q->gen)
                               : NULL;
    if (!e || e->freed || ipc_export_closed(e, c->id, q->ticket)) {
        pthread_mutex_unlock(&pool->lock);
        no.status = e && !e->freed ? -EALREADY : -ENOENT;
        return usock_send(c->fd, &no, sizeof(no), NULL, 0);
    }
    struct ipc_chunk_desc *d;
    ump_handle_t *h;
    size_t n;
    uint64_t base, bytes;
    int rc = collect(pool, e, &d, &h, &n, &base, &bytes);
    if (!rc)
        e->opens++; /* its chunks stay while the descriptors are made */
    pthread_mutex_unlock(&pool->lock);
    if (rc) {
        no.status = rc;
        return usock_send(c->fd, &no, sizeof(no), NULL, 0);
    }
    if (o)
        o->count++;
    else
        c->opens[c->nopens++] =
            (struct ipc_open){.gen = q->gen, .ticket = q->ticket,
                              .g = g, .addr = q->addr, .count = 1};
    int *fds = malloc(n * sizeof(*fds));
    size_t made = 0;
    rc = fds ? 0 : -ENOMEM;
    for (; !rc && made < n; made++) {
        rc = pool->be->chunk_export(pool->bctx, h[made], &fds[made],
                                    &d[made].file_off);
        if (rc)
            break;
    }
    if (!rc) {
        rc = send_chunks(c->fd, d, fds, n, base, bytes);
        if (rc) /* the opener is gone or stuck: drop it */
            rc = rc < 0 ? rc : -EPIPE;
    } else { /* not made: take the open back, say why */
        o = find_open(c, q->ticket, q->gen, q->addr, &clash);
        if (!--o->count)
            *o = c->opens[--c->nopens];
        unopen(pool, g, q->addr, q->gen);
        no.status = rc;
        rc = usock_send(c->fd, &no, sizeof(no), NULL, 0);
    }
    for (size_t i = 0; i < made; i++)
        close(fds[i]);
    free(fds);
    free(d);
    free(h);
    return rc;
}

/* CLOSE and UNDO: one open of the ticket on this connection less; CLOSE
 * refuses the ticket on it from then on (noted on the export, which this
 * open keeps until then). */
static int serve_close(ump_pool_t *pool, struct ipc_conn *c,
                       const struct ipc_req *q)
{
    void *addr = (void *)(uintptr_t)q->addr;
    size_t g = vas_contains(&pool->vas, addr) ? vas_index(&pool->vas, addr)
                                              : 0;
    bool clash;
    struct ipc_open *o = find_open(c, q->ticket, q->gen, q->addr, &clash);
    if (!o)
        return reply_status(c->fd, -ENOENT);
    if (q->op == IPC_CLOSE) {
        pthread_mutex_lock(&pool->lock);
        struct ipc_export *e = ipc_export_find(pool->ipc, g, addr, q->gen);
        int rc = e ? ipc_export_note_closed(e, c->id, q->ticket) : 0;
        pthread_mutex_unlock(&pool->lock);
        if (rc)
            return reply_status(c->fd, rc);
        c->notes += e != NULL;
    }
    if (!--o->count)
        *o = c->opens[--c->nopens];
    unopen(pool, g, q->addr, q->gen);
    return reply_status(c->fd, 0);
}

/* One request from c; negative: drop the connection. */
static int serve_one(ump_pool_t *pool, struct ipc_conn *c)
{
    struct ipc_req q;
    int nfds;
    int rc = usock_recv(c->fd, &q, sizeof(q), NULL, 0, &nfds);
    if (rc)
        return rc;
    if (q.key != pool->ipc->key)
        return reply_status(c->fd, -ENOENT);
    switch (q.op) {
    case IPC_OPEN:
        return serve_open(pool, c, &q);
    case IPC_CLOSE:
    case IPC_UNDO:
        return serve_close(pool, c, &q);
    default:
        return -EPROTO;
    }
}

/* A connection goes: its opens are closed; on the shared pool's socket,
 * its process detached or died (unless the server itself stops). */
static void drop_conn(ump_pool_t *pool, struct ipc_conn *c, bool stopping)
{
    if (c->share && !stopping)
        share_conn_gone(pool, c);
    for (size_t i = 0; i < c->nopens; i++)
        for (uint32_t k = 0; k < c->opens[i].count; k++)
            unopen(pool, c->opens[i].g, c->opens[i].addr, c->opens[i].gen);
    if (c->notes) { /* its closes: nobody can send them again */
        pthread_mutex_lock(&pool->lock);
        ipc_exports_forget_conn(pool->ipc, c->id);
        pthread_mutex_unlock(&pool->lock);
    }
    /* Ended for the peer too, where a child forked without exec keeps a
     * copy of the descriptor: the peer hears it and never waits for an
     * answer. */
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    free(c->opens);
}

/* A new connection, unless the server is at IPC_MAX_CONNS (one is
 * accepted and closed at once, so the listener does not stay readable).
 * false when accepting fails for a reason that lasts (no descriptors,
 * no memory): the caller stops listening a while. */
static bool accept_one(struct ipc_state *st, struct usock_listener *l,
                       bool share)
{
    int fd;
    int rc = usock_accept(l, &fd);
    if (rc)
        return rc == -EAGAIN || rc == -EPERM;
    if (st->nconns >= IPC_MAX_CONNS ||
        grow((void **)&st->conns, &st->capconns, st->nconns,
             sizeof(*st->conns))) {
        ump_log_warn("ump_ipc: a connection refused: %zu are open",
                     st->nconns);
        close(fd);
        return true;
    }
    st->conns[st->nconns++] = (struct ipc_conn){
        .fd = fd, .share = share, .slot = -1, .id = ++st->next_conn};
    return true;
}

/* The wake pipe's bytes: true when one says stop ('x'); any other
 * byte ('r': ump_pool_share added a socket) only wakes the loop. */
static bool woken_to_stop(int fd)
{
    char buf[16];
    ssize_t n = read(fd, buf, sizeof(buf));
    return n > 0 && memchr(buf, 'x', (size_t)n);
}

static void *serve(void *arg)
{
    ump_pool_t *pool = arg;
    struct ipc_state *st = pool->ipc;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    uint64_t paused_until = 0; /* accepting rests until then; 0: it does not */
    for (;;) {
        bool listening = !paused_until;
        /* The wake pipe, the two listeners, the connections, and the
         * processes behind the shared pool's connections. */
        size_t n = 3 + 2 * st->nconns;
        if (n > cap) {
            struct pollfd *p = realloc(pf, n * sizeof(*pf));
            if (!p) { /* wait for memory: the stop still reaches us */
                poll(&(struct pollfd){st->wake[0], POLLIN, 0}, 1, 100);
                continue;
            }
            pf = p;
            cap = n;
        }
        struct share_state *sh =
            atomic_load_explicit(&st->sharing, memory_order_acquire);
        pf[0] = (struct pollfd){st->wake[0], POLLIN, 0};
        pf[1] = (struct pollfd){listening ? st->listener.fd : -1, POLLIN, 0};
        pf[2] = (struct pollfd){listening && sh ? sh->listener.fd : -1,
                                POLLIN, 0};
        size_t nc = st->nconns;
        for (size_t i = 0; i < nc; i++) {
            pf[3 + i] = (struct pollfd){st->conns[i].fd, POLLIN, 0};
            pf[3 + nc + i] = (struct pollfd){
                share_conn_pidfd(pool, &st->conns[i]), POLLIN, 0};
        }
        /* Not listening: back in IPC_BACKOFF_MS; slots of processes gone
         * waiting for their memory's last close: looked at as often. */
        bool waiting = sh && sh->waiting;
        int k = poll(pf, n, listening && !waiting ? -1 : IPC_BACKOFF_MS);
        if (k < 0)
            continue; /* EINTR */
        if (pf[0].revents && woken_to_stop(st->wake[0]))
            break;
        /* Backwards: a dropped connection takes the last one's place. A
         * process that ended is gone even where a child it forked keeps
         * its connection open. */
        for (size_t i = nc; i-- > 0;) {
            if (!pf[3 + i].revents && !pf[3 + nc + i].revents)
                continue;
            struct ipc_conn *c = &st->conns[i];
            if (!pf[3 + i].revents ||
                (c->share ? share_serve(pool, c) : serve_one(pool, c)) < 0) {
                drop_conn(pool, c, false);
                *c = st->conns[--st->nconns];
            }
        }
        if (waiting)
            share_reclaim(pool);
        /* Back after the rest by the clock, whatever else woke the loop
         * meanwhile: peers busy with their opens must not keep it away
         * for ever. */
        if (paused_until) {
            if (ump_clock_ns() >= paused_until)
                paused_until = 0;
        } else if ((pf[1].revents && !accept_one(st, &st->listener, false)) ||
                   (pf[2].revents && !accept_one(st, &sh->listener, true))) {
            paused_until = ump_clock_ns() + (uint64_t)IPC_BACKOFF_MS * 1000000;
        }
    }
    free(pf);
    return NULL;
}

int ipc_server_start(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    pthread_mutex_lock(&st->srv_lock);
    if (st->serving) {
        pthread_mutex_unlock(&st->srv_lock);
        return 0;
    }
    char name[64];
    ipc_sock_name(st->pid, st->key, name, sizeof(name));
    int rc = usock_listen(name, &st->listener);
    /* Non-blocking: a byte is all that is ever needed there. */
    if (!rc && pipe2(st->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        rc = -errno;
    if (!rc) {
        int fl = fcntl(st->listener.fd, F_GETFL);
        if (fl < 0 || fcntl(st->listener.fd, F_SETFL, fl | O_NONBLOCK) != 0)
            rc = -errno;
    }
    if (!rc)
        rc = -pthread_create(&st->thread, NULL, serve, pool);
    if (rc) {
        ump_log_error("ump_ipc: cannot serve the pool's socket: "
                      "%s", strerror(-rc));
        usock_unlisten_unique(&st->listener);
        for (int i = 0; i < 2; i++)
            if (st->wake[i] >= 0)
                close(st->wake[i]);
        st->wake[0] = st->wake[1] = -1;
    } else {
        st->serving = true;
    }
    pthread_mutex_unlock(&st->srv_lock);
    return rc;
}

/* One byte to the thread's wake pipe (woken_to_stop reads it). */
static void wake(struct ipc_state *st, const char *byte)
{
    ssize_t w;
    do
        w = write(st->wake[1], byte, 1);
    while (w < 0 && errno == EINTR);
}

void ipc_server_rescan(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    pthread_mutex_lock(&st->srv_lock);
    if (st->serving)
        wake(st, "r");
    pthread_mutex_unlock(&st->srv_lock);
}

void ipc_server_stop(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    pthread_mutex_lock(&st->srv_lock);
    if (st->serving) {
        wake(st, "x");
        pthread_join(st->thread, NULL);
        share_note_kept(pool);
        for (size_t i = 0; i < st->nconns; i++)
            drop_conn(pool, &st->conns[i], true);
        st->nconns = 0;
        usock_unlisten_unique(&st->listener);
        close(st->wake[0]);
        close(st->wake[1]);
        st->serving = false;
    }
    free(st->conns);
    st->conns = NULL;
    pthread_mutex_unlock(&st->srv_lock);
}

void ipc_server_drop_in_child(ump_pool_t *pool)
{
    struct ipc_state *st = pool->ipc;
    if (!st->serving)
        return;
    /* The parent's: its socket file stays (its listener is the parent's
     * thread), only the child's copies of its descriptors go. The
     * connections are left alone: the parent's thread may have been
     * changing their list when it forked (they are the child's to keep
     * until it exits; an opener watches the maker's process, not them). */
    close(st->listener.fd);
    close(st->wake[0]);
    close(st->wake[1]);
}
