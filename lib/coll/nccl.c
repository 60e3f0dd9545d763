/*
 * NCCL between GPU processes, loaded at run time (dlopen libnccl.so.2,
 * never linked), for a communicator on the cuda backend (coll_engine:auto)
 * or when asked for (coll_engine:nccl). Bootstrapped through the oob, as
 * NCCL's docs show it with MPI: process 0's ncclUniqueId (128 bytes) goes
 * to all in an allgather, then every process calls ncclCommInitRank (one
 * NCCL rank per process, on its first local rank's device). Every step's
 * outcome is exchanged too, so that all processes keep NCCL or all fall
 * back, with one info line, to the data engine they had (MPI, or the oob).
 *
 * What it carries: point-to-point between processes (ump_send/ump_recv),
 * straight from device memory with ncclSend/ncclRecv in a group, every
 * such transfer of the communicator (the two ends must agree on the
 * engine, and only NCCL reaches device memory without a copy). The
 * collectives' steps between processes fold on the CPU (hier.c) and go
 * through the other engine. Waits poll an event, as NCCL's docs ask, with
 * the communicator's timeout; a timeout aborts the NCCL communicator.
 *
 * Not bounded: ncclCommInitRank is blocking and waits for every rank, so a
 * process whose set-up fails inside NCCL after the others' have begun
 * (a GPU refusing on one node only) can leave them waiting there; where
 * every process fails alike (no GPU) they all return and fall back. NCCL's
 * non-blocking set-up (ncclCommInitRankConfig, blocking = 0) with a polled
 * deadline would bound it: to do where a GPU can check it.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/nccl.h"
#include "coll/world.h"
#include "front/front.h"
#include "util/log.h"

/* NCCL's types, as nccl.h has them (not included: it needs the CUDA
 * runtime's headers). */
typedef struct {
    char internal[128];
} nccl_id_t;
enum { NCCL_OK = 0, NCCL_UINT8 = 1 };

struct coll_nccl {
    void *lib;
    int (*get_id)(nccl_id_t *id);
    int (*init_rank)(void **comm, int nranks, nccl_id_t id, int rank);
    int (*destroy)(void *comm);
    int (*abort)(void *comm);
    int (*send)(const void *buf, size_t count, int type, int peer, void *comm,
                void *stream);
    int (*recv)(void *buf, size_t count, int type, int peer, void *comm,
                void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    const char *(*errstr)(int rc);
    void *comm;
    int dev;       /* the pool device NCCL runs on */
    void *stream;  /* a stream of it */
    void *ev;      /* recorded after each group, polled */
};

#define SYM(n, f)                                                              \
    do {                                                                       \
        *(void **)&n->f = dlsym(n->lib, sym_##f);                              \
        if (!n->f) {                                                           \
            snprintf(why, len, "libnccl lacks %s", sym_##f);                   \
            return -ENOENT;                                                    \
        }                                                                      \
    } while (0)

static const char *const sym_get_id = "ncclGetUniqueId",
                         *const sym_init_rank = "ncclCommInitRank",
                         *const sym_destroy = "ncclCommDestroy",
                         *const sym_abort = "ncclCommAbort",
                         *const sym_send = "ncclSend",
                         *const sym_recv = "ncclRecv",
                         *const sym_group_start = "ncclGroupStart",
                         *const sym_group_end = "ncclGroupEnd",
                         *const sym_errstr = "ncclGetErrorString";

/* libnccl.so.2 where UMPOOL_NCCL_LIBRARY says, else the loader's paths,
 * else the CUDA toolkit's lib folders (where the toolkit ships it). */
static int load(struct coll_nccl *n, char *why, size_t len)
{
    const char *env = getenv("UMPOOL_NCCL_LIBRARY");
    const char *paths[] = {env && *env ? env : "libnccl.so.2",
#ifdef UMP_CUDA_DIR
                           UMP_CUDA_DIR "/lib/libnccl.so.2",
                           UMP_CUDA_DIR "/lib64/libnccl.so.2",
#endif
                           NULL};
    for (int i = 0; paths[i] && !n->lib; i++) {
        if (i > 0 && env && *env)
            break; /* asked for one: that one */
        n->lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (!n->lib) {
        snprintf(why, len, "libnccl.so.2 does not load (%s)", dlerror());
        return -ENOENT;
    }
    SYM(n, get_id);
    SYM(n, init_rank);
    SYM(n, destroy);
    SYM(n, abort);
    SYM(n, send);
    SYM(n, recv);
    SYM(n, group_start);
    SYM(n, group_end);
    SYM(n, errstr);
    return 0;
}

static void unload(ump_comm_t *c, struct coll_nccl *n)
{
    if (!n)
        return;
    if (n->ev)
        c->pool->be->event_destroy(c->pool->bctx, n->ev);
    /* libnccl stays loaded: NCCL leaves threads behind (its bootstrap's,
     * even after a failed ncclCommInitRank), which would run in unmapped
     * code after a dlclose. dlopen of the same library again is cheap. */
    free(n);
}

/* States a process reports in the bootstrap's exchanges. */
enum { NOT_WANTED = 0, READY = 1, FAILED = 2 };

static int exchange(const ump_oob_t *oob, int mine, int *all)
{
    return oob->allgather(oob->ctx, &mine, all, sizeof(mine));
}

/* The first process whose state is FAILED (or -1), and whether any wants
 * NCCL at all. */
static int first_failed(const int *all, int np, bool *wanted)
{
    *wanted = false;
    for (int p = 0; p < np; p++)
        *wanted |= all[p] != NOT_WANTED;
    for (int p = 0; p < np; p++)
        if (all[p] != READY)
            return p;
    return -1;
}

int coll_nccl_start(ump_comm_t *c, const ump_oob_t *oob)
{
    struct coll_world *w = c->world;
    const struct backend_ops *be = c->pool->be;
    bool want = c->engine_pref == COLL_ENGINE_NCCL ||
                (c->engine_pref == COLL_ENGINE_AUTO && be->make_current);
    char why[256] = "";
    struct coll_nccl *n = NULL;
    int state = NOT_WANTED;
    if (want) {
        n = calloc(1, sizeof(*n));
        state = n ? READY : FAILED;
        if (n && !be->make_current) {
            snprintf(why, sizeof(why), "the %s backend has no GPU for it",
                     be->name);
            state = FAILED;
        } else if (n && load(n, why, sizeof(why))) {
            state = FAILED;
        }
    }
    int *all = calloc((size_t)w->nproc, sizeof(*all));
    if (!all) {
        unload(c, n);
        return -ENOMEM;
    }
    /* Step 1: who can load NCCL. */
    int rc = exchange(oob, state, all);
    bool wanted = false;
    int bad = rc ? w->me : first_failed(all, w->nproc, &wanted);
    struct {
        int state;
        nccl_id_t id;
    } mine, *got = NULL;
    if (!rc && bad < 0) {
        /* Step 2: process 0's unique id to every process, with each
         * process's readiness (its stream): nobody enters the set-up,
         * which waits for all, unless all can. */
        memset(&mine, 0, sizeof(mine));
        mine.state = READY;
        int e = w->me == 0 ? n->get_id(&mine.id) : NCCL_OK;
        if (e != NCCL_OK) {
            snprintf(why, sizeof(why), "ncclGetUniqueId: %s", n->errstr(e));
            mine.state = FAILED;
        }
        n->dev = c->dev[0];
        e = mine.state == READY ? be->make_current(c->pool->bctx, n->dev) : 0;
        e = e ? e : be->stream_create(c->pool->bctx, n->dev, &n->stream);
        e = e ? e : be->event_create(c->pool->bctx, &n->ev);
        if (e && mine.state == READY) {
            snprintf(why, sizeof(why), "no stream on device %d (%s)", n->dev,
                     ump_strerror(e));
            mine.state = FAILED;
        }
        got = malloc((size_t)w->nproc * sizeof(*got));
        rc = got ? oob->allgather(oob->ctx, &mine, got, sizeof(mine))
                 : -ENOMEM;
        for (int p = 0; !rc && p < w->nproc; p++)
            all[p] = got[p].state;
        bad = rc ? w->me : first_failed(all, w->nproc, &wanted);
    }
    if (!rc && bad < 0) {
        /* Step 3: the set-up, and its outcome everywhere. */
        int r = n->init_rank(&n->comm, w->nproc, got[0].id, w->me);
        if (r != NCCL_OK) {
            snprintf(why, sizeof(why), "ncclCommInitRank: %s", n->errstr(r));
            n->comm = NULL;
        }
        rc = exchange(oob, r == NCCL_OK ? READY : FAILED, all);
        bad = rc ? w->me : first_failed(all, w->nproc, &wanted);
    }
    free(got);
    free(all);
    if (!rc && bad < 0) {
        w->nccl = n;
        ump_log_info("ump_comm_create: NCCL carries point-to-point between "
                     "the %d processes (device %d)", w->nproc, n->dev);
        return 0;
    }
    if (wanted) {
        char other[64];
        snprintf(other, sizeof(other), "process %d could not start it", bad);
        ump_log_info("ump_comm_create: NCCL did not start (%s): data between "
                     "processes goes through %s", *why ? why : other,
                     w->engine ? w->eng.name : "the oob's allgather");
    }
    if (n && n->comm)
        n->destroy(n->comm);
    if (n && n->stream)
        be->stream_destroy(c->pool->bctx, n->stream);
    unload(c, n);
    return rc;
}

void coll_nccl_stop(ump_comm_t *c)
{
    struct coll_nccl *n = c->world->nccl;
    if (!n)
        return;
    if (c->world->broken)
        n->abort(n->comm);
    else
        n->destroy(n->comm);
    c->pool->be->stream_destroy(c->pool->bctx, n->stream);
    unload(c, n);
    c->world->nccl = NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int coll_nccl_xchg(ump_comm_t *c, const struct coll_msg *m, int nm,
                   const char *fn)
{
    struct coll_world *w = c->world;
    struct coll_nccl *n = w->nccl;
    const struct backend_ops *be = c->pool->be;
    int rc = be->make_current(c->pool->bctx, n->dev), r = NCCL_OK;
    if (rc)
        return rc;
    r = n->group_start();
    for (int i = 0; r == NCCL_OK && i < nm; i++)
        r = m[i].send ? n->send(m[i].buf, m[i].bytes, NCCL_UINT8, m[i].proc,
                                n->comm, n->stream)
                      : n->recv(m[i].buf, m[i].bytes, NCCL_UINT8, m[i].proc,
                                n->comm, n->stream);
    int e = n->group_end();
    r = r == NCCL_OK ? e : r;
    if (r != NCCL_OK) {
        ump_log_error("%s: NCCL: %s: the communicator is unusable", fn,
                      n->errstr(r));
        w->broken = -EIO;
        return -EIO;
    }
    rc = be->event_record(c->pool->bctx, n->ev, n->stream);
    double deadline = now_s() + c->timeout_s;
    while (!rc && (rc = be->event_query(c->pool->bctx, n->ev)) == -EAGAIN) {
        if (now_s() > deadline) {
            ump_log_error("%s: NCCL's transfers not done within comm_timeout "
                          "(%g s): a peer left? The communicator is unusable",
                          fn, c->timeout_s);
            w->broken = -ETIMEDOUT;
            return -ETIMEDOUT;
        }
        sched_yield();
    }
    if (rc)
        w->broken = rc;
    return rc;
}
