/*
 * Communicators across processes: the processes meet through the caller's
 * out-of-band channel (ump_oob_t, UCC's shape), which exchanges, once, what
 * each brings (its ranks, a digest of its configuration, its host name)
 * so that every process checks the same things and fails the same way. A
 * process whose own part failed (a bad device, a bad config) still takes
 * part in the exchange: the others learn it and fail too, rather than wait
 * for it forever.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/comm.h"
#include "coll/nccl.h"
#include "coll/shared.h"
#include "coll/world.h"
#include "front/check.h"
#include "util/internal.h"
#include "util/log.h"

#define INFO_MAGIC 0x554d5057u /* "UMPW" */

/* What each process brings to the communicator, exchanged once. */
struct proc_info {
    uint32_t magic;
    int32_t rank;   /* the oob's rank it claims: its place in the exchange */
    int32_t rc;     /* this process's own setup: 0, or its error */
    int32_t nlocal;
    int32_t engine; /* 1: it has a data engine */
    uint64_t cfg;   /* FNV-1a of its config string */
    char host[64];
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

void *coll_world_tmp(struct coll_world *w, int slot, size_t bytes)
{
    if (w->tmp_len[slot] < bytes || !w->tmp[slot]) {
        free(w->tmp[slot]);
        w->tmp[slot] = malloc(bytes ? bytes : 1);
        w->tmp_len[slot] = w->tmp[slot] ? bytes : 0;
    }
    return w->tmp[slot];
}

static void world_free(struct coll_world *w)
{
    if (!w)
        return;
    free(w->tmp[0]);
    free(w->tmp[1]);
    free(w->first);
    free(w->nr);
    free(w->node);
    free(w);
}

/* The processes' ranks and nodes, from the exchange. */
static int world_build(struct coll_world *w, const struct proc_info *in)
{
    int np = w->nproc;
    w->first = calloc((size_t)np, sizeof(int));
    w->nr = calloc((size_t)np, sizeof(int));
    w->node = calloc((size_t)np, sizeof(int));
    if (!w->first || !w->nr || !w->node)
        return -ENOMEM;
    int g = 0;
    for (int p = 0; p < np; p++) {
        w->first[p] = g;
        w->nr[p] = in[p].nlocal;
        g += in[p].nlocal;
        w->node[p] = w->nnode;
        for (int q = 0; q < p; q++)
            if (!strncmp(in[p].host, in[q].host, sizeof(in[p].host))) {
                w->node[p] = w->node[q];
                break;
            }
        if (w->node[p] == w->nnode)
            w->nnode++;
    }
    return 0;
}

/* Every process's verdict on the exchange, the same everywhere: the first
 * process whose setup failed, or whose config or engine differs from
 * process 0's. */
static int check_infos(const struct proc_info *in, int np, int me,
                       const char *fn)
{
    for (int p = 0; p < np; p++) {
        if (in[p].magic != INFO_MAGIC) {
            ump_log_error("%s: process %d sent no valid description (is "
                          "every process calling %s?)", fn, p, fn);
            return -EPROTO;
        }
        if (in[p].rank != p) {
            ump_log_error("%s: the oob's allgather put process %d's part "
                          "at %d (oob->rank wrong, or the allgather not in "
                          "rank order)", fn, in[p].rank, p);
            return -EINVAL;
        }
        if (in[p].rc) {
            if (p != me)
                ump_log_error("%s: process %d failed to set up its ranks "
                              "(%s): no communicator", fn, p,
                              ump_strerror(in[p].rc));
            return p == me ? in[p].rc : -EINVAL;
        }
        if (in[p].cfg != in[0].cfg) {
            ump_log_error("%s: process %d's config differs from process 0's "
                          "(every process passes the same config)", fn, p);
            return -EINVAL;
        }
        if (in[p].engine != in[0].engine) {
            ump_log_error("%s: process %d %s a data engine and process 0 %s",
                          fn, p, in[p].engine ? "has" : "has no",
                          in[0].engine ? "has one" : "has none");
            return -EINVAL;
        }
    }
    long total = 0;
    for (int p = 0; p < np; p++)
        total += in[p].nlocal;
    if (total > INT32_MAX / 2) {
        ump_log_error("%s: %ld ranks in all", fn, total);
        return -EINVAL;
    }
    return 0;
}

/* The worlds' ids (world.h: id), in the order this process makes them. */
static atomic_ulong world_ids;

/* This process's part: the communicator of its ranks (checked over every
 * process's later) and the plain one that runs the in-process phases. */
static int local_part(ump_pool_t *pool, int nlocal, const int *devices,
                      const char *config, const char *fn, ump_comm_t **c_p)
{
    ump_comm_t *c;
    int rc = coll_comm_alloc(pool, nlocal, devices, config, fn, &c);
    if (rc)
        return rc;
    c->world = calloc(1, sizeof(*c->world));
    if (!c->world) {
        free(c);
        return -ENOMEM;
    }
    rc = coll_comm_make(pool, nlocal, devices, config, NULL, fn,
                        &c->world->local);
    if (rc) {
        free(c->world);
        free(c);
        return rc;
    }
    /* The in-process reduce of the hierarchical schedules folds the ranks
     * in rank order (direct), whatever the size: the fixed order the flat
     * schedule and every process share (ring and tree fold in their own). */
    c->world->local->algos[UMP_COLL_REDUCE] = 1u << COLL_DIRECT;
    c->world->id = atomic_fetch_add(&world_ids, 1);
    *c_p = c;
    return 0;
}

static void local_free(ump_comm_t *c)
{
    if (!c)
        return;
    coll_comm_free(c->world->local);
    world_free(c->world);
    free(c);
}

/* The caller's engine, shared with the communicators shrunk from this
 * one. */
struct coll_eng_share {
    atomic_int refs;
    ump_engine_t eng;
};

static void share_put(struct coll_eng_share *sh)
{
    if (!sh || atomic_fetch_sub(&sh->refs, 1) != 1)
        return;
    if (sh->eng.destroy)
        sh->eng.destroy(sh->eng.ctx);
    free(sh);
}

static int create(ump_pool_t *pool, int nlocal, const int *devices,
                  const ump_oob_t *oob, const ump_engine_t *engine,
                  const char *config, ump_comm_t **comm_p, const char *fn)
{
    if (!oob || !oob->allgather || oob->size < 1 || oob->rank < 0 ||
        oob->rank >= oob->size) {
        ump_log_error("%s: %s", fn, !oob ? "oob is NULL"
                                    : !oob->allgather ? "oob->allgather is NULL"
                                    : "oob->rank is not in [0, oob->size)");
        if (engine && engine->destroy)
            engine->destroy(engine->ctx);
        return -EINVAL;
    }
    ump_comm_t *c = NULL;
    int rc = 0;
    if (!comm_p) {
        ump_log_error("%s: comm_p is NULL", fn);
        rc = -EINVAL;
    } else if (engine && (!engine->isend || !engine->irecv ||
                          !engine->testall || !engine->cancel)) {
        ump_log_error("%s: the engine lacks isend, irecv, testall or cancel",
                      fn);
        rc = -EINVAL;
    } else {
        rc = local_part(pool, nlocal, devices, config, fn, &c);
    }
    struct proc_info mine = {.magic = INFO_MAGIC, .rank = oob->rank, .rc = rc,
                             .nlocal = nlocal, .engine = engine != NULL,
                             .cfg = fnv1a(config)};
    gethostname(mine.host, sizeof(mine.host) - 1);
    struct proc_info *in = calloc((size_t)oob->size, sizeof(*in));
    int e = in ? oob->allgather(oob->ctx, &mine, in, sizeof(mine)) : -ENOMEM;
    if (e) {
        ump_log_error("%s: the oob's allgather failed (%s)", fn,
                      ump_strerror(e));
        rc = e < 0 ? e : -EIO;
    } else {
        rc = check_infos(in, oob->size, oob->rank, fn);
    }
    struct coll_world *w = c ? c->world : NULL;
    if (!rc) {
        w->nproc = oob->size;
        w->me = oob->rank;
        w->oob = *oob;
        rc = world_build(w, in);
    }
    free(in);
    if (rc) {
        local_free(c);
        if (engine && engine->destroy)
            engine->destroy(engine->ctx);
        return rc;
    }
    if (engine) {
        w->share = malloc(sizeof(*w->share));
        if (!w->share) {
            if (engine->destroy)
                engine->destroy(engine->ctx);
            local_free(c);
            return -ENOMEM;
        }
        atomic_init(&w->share->refs, 1);
        w->share->eng = *engine;
        w->engine = true;
        w->eng = *engine;
        w->eng.destroy = NULL; /* the share's, at the last destroy */
    }
    c->nall = w->first[w->nproc - 1] + w->nr[w->nproc - 1];
    c->first = w->first[w->me];
    rc = coll_nccl_start(c, oob);
    if (rc) {
        ump_log_error("%s: the oob failed while starting NCCL (%s)", fn,
                      ump_strerror(rc));
        share_put(w->share);
        local_free(c);
        return rc;
    }
    rc = coll_shared_start(c, oob);
    if (rc) {
        ump_log_error("%s: the oob failed while looking for a shared pool "
                      "(%s)", fn, ump_strerror(rc));
        coll_nccl_stop(c);
        share_put(w->share);
        local_free(c);
        return rc;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->done_lock, NULL);
    c->last_us = NAN; /* no virtual time across processes */
    atomic_fetch_add(&pool->comms, 1);
    *comm_p = c;
    ump_log_info("%s: process %d of %d, global ranks %d..%d of %d, %d "
                 "node(s), data between processes: %s", fn, w->me, w->nproc,
                 c->first, c->first + c->n - 1, c->nall, w->nnode,
                 w->xs ? "the shared pool's addresses"
                 : engine ? engine->name : "the oob's allgather");
    return 0;
}

void coll_world_destroy(ump_comm_t *c)
{
    struct coll_world *w = c->world;
    coll_shared_stop(c);
    coll_nccl_stop(c);
    if (w->stage_st_made)
        for (int i = 0; i < 2; i++)
            ump_stream_destroy(c->pool, w->stage_st[i]);
    /* A shrunk communicator's own eng (a map) first, then the share. */
    if (w->engine && w->eng.destroy)
        w->eng.destroy(w->eng.ctx);
    share_put(w->share);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->done_lock);
    local_free(c);
}

UMP_EXPORT int ump_comm_create_engine(ump_pool_t *pool, int nlocal,
                                      const int *devices,
                                      const ump_oob_t *oob,
                                      const ump_engine_t *engine,
                                      const char *config, ump_comm_t **comm_p)
{
    if (!engine) {
        ump_log_error("ump_comm_create_engine: engine is NULL (without one: "
                      "ump_comm_create_oob)");
        return -EINVAL;
    }
    return create(pool, nlocal, devices, oob, engine, config, comm_p,
                  engine->name && !strcmp(engine->name, "mpi")
                      ? "ump_comm_create_mpi"
                      : "ump_comm_create_engine");
}

UMP_EXPORT int ump_comm_create_oob(ump_pool_t *pool, int nlocal,
                                   const int *devices, const ump_oob_t *oob,
                                   const char *config, ump_comm_t **comm_p)
{
    return create(pool, nlocal, devices, oob, NULL, config, comm_p,
                  "ump_comm_create_oob");
}

UMP_EXPORT int ump_comm_rank(ump_comm_t *c, int local, int *rank_p)
{
    if (!c || !rank_p || local < 0 || local >= c->n) {
        ump_log_error("ump_comm_rank: %s", !c        ? "comm is NULL"
                                           : !rank_p ? "rank_p is NULL"
                                                     : "local rank out of "
                                                       "range");
        return -EINVAL;
    }
    *rank_p = c->first + local;
    return 0;
}

/* A shrunk world's engine: the caller's, with the new process numbers
 * mapped to the old ones. It is not a new MPI communicator (the engine
 * interface has no way to split one): old and new share the engine's
 * transfers and tags, which is safe because every call completes all of
 * its transfers before it returns; two threads using the old and the new
 * communicator at once could mix their messages. */
struct eng_map {
    struct coll_eng_share *sh;
    int pmap[]; /* new process -> old */
};

static int map_isend(void *ctx, const void *buf, size_t bytes, int proc,
                     int tag, void **req_p)
{
    struct eng_map *m = ctx;
    return m->sh->eng.isend(m->sh->eng.ctx, buf, bytes, m->pmap[proc], tag,
                            req_p);
}

static int map_irecv(void *ctx, void *buf, size_t bytes, int proc, int tag,
                     void **req_p)
{
    struct eng_map *m = ctx;
    return m->sh->eng.irecv(m->sh->eng.ctx, buf, bytes, m->pmap[proc], tag,
                            req_p);
}

static int map_testall(void *ctx, int n, void **reqs)
{
    struct eng_map *m = ctx;
    return m->sh->eng.testall(m->sh->eng.ctx, n, reqs);
}

static void map_cancel(void *ctx, int n, void **reqs)
{
    struct eng_map *m = ctx;
    m->sh->eng.cancel(m->sh->eng.ctx, n, reqs);
}

static void map_destroy(void *ctx)
{
    free(ctx); /* the share is put by coll_world_destroy */
}

/* What each process says about a shrink: its verdict on its arguments and
 * a digest of its exclude list. */
struct shrink_info {
    int32_t rc, nexclude;
    uint64_t digest;
};

/* FNV-1a of the excluded ranks in increasing order (keep), so that two
 * processes listing the same ranks in another order agree. */
static uint64_t keep_digest(const bool *keep, int nall)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int g = 0; g < nall; g++)
        if (!keep[g])
            for (int b = 0; b < 4; b++)
                h = (h ^ (uint8_t)((unsigned)g >> (8 * b))) *
                    0x100000001b3ull;
    return h;
}

/* The new world of the kept ranks, for a process that keeps some. */
static int shrink_build(ump_comm_t *c, const bool *keep, ump_comm_t **c_p)
{
    struct coll_world *w = c->world;
    const char *fn = "ump_comm_shrink";
    int dev[COLL_MAX_RANKS], n = 0;
    for (int r = 0; r < c->n; r++)
        if (keep[c->first + r])
            dev[n++] = c->dev[r];
    ump_comm_t *nc = NULL;
    int rc = coll_comm_alloc(c->pool, n, dev, NULL, fn, &nc);
    if (rc)
        return rc;
    nc->force = c->force;
    nc->engine_pref = c->engine_pref;
    nc->timeout_s = c->timeout_s;
    nc->sched = c->sched;
    struct coll_world *v = nc->world = calloc(1, sizeof(*v));
    if (!v) {
        free(nc);
        return -ENOMEM;
    }
    rc = coll_comm_make(c->pool, n, dev, NULL, c, fn, &v->local);
    if (rc) {
        free(v);
        free(nc);
        return rc;
    }
    v->local->algos[UMP_COLL_REDUCE] = 1u << COLL_DIRECT; /* local_part */
    v->id = atomic_fetch_add(&world_ids, 1);
    int np = 0;
    for (int p = 0; p < w->nproc; p++) {
        int k = 0;
        for (int i = 0; i < w->nr[p]; i++)
            k += keep[w->first[p] + i];
        np += k > 0;
    }
    v->first = calloc((size_t)np, sizeof(int));
    v->nr = calloc((size_t)np, sizeof(int));
    v->node = calloc((size_t)np, sizeof(int));
    struct eng_map *map = w->engine ? malloc(sizeof(*map) +
                                             (size_t)np * sizeof(int))
                                    : NULL;
    int *nodemap = calloc((size_t)w->nnode, sizeof(int));
    if (!v->first || !v->nr || !v->node || !nodemap ||
        (w->engine && !map)) {
        free(map);
        free(nodemap);
        local_free(nc);
        return -ENOMEM;
    }
    for (int i = 0; i < w->nnode; i++)
        nodemap[i] = -1;
    int q = 0, g = 0;
    for (int p = 0; p < w->nproc; p++) {
        int k = 0;
        for (int i = 0; i < w->nr[p]; i++)
            k += keep[w->first[p] + i];
        if (!k)
            continue;
        if (p == w->me)
            v->me = q;
        v->first[q] = g;
        v->nr[q] = k;
        if (nodemap[w->node[p]] < 0)
            nodemap[w->node[p]] = v->nnode++;
        v->node[q] = nodemap[w->node[p]];
        if (map)
            map->pmap[q] = p;
        g += k;
        q++;
    }
    free(nodemap);
    v->nproc = np;
    /* Without an engine the oob's allgather carries the data: it spans
     * every process of the old communicator, which then all stay (checked
     * by the caller). */
    v->oob = w->oob;
    if (w->engine) {
        map->sh = w->share;
        atomic_fetch_add(&w->share->refs, 1);
        v->share = w->share;
        v->engine = true;
        v->eng = w->eng;
        v->eng.ctx = map;
        v->eng.isend = map_isend;
        v->eng.irecv = map_irecv;
        v->eng.testall = map_testall;
        v->eng.cancel = map_cancel;
        v->eng.destroy = map_destroy;
    }
    nc->nall = g;
    nc->first = v->first[v->me];
    pthread_mutex_init(&nc->lock, NULL);
    pthread_mutex_init(&nc->done_lock, NULL);
    nc->last_us = NAN;
    atomic_fetch_add(&c->pool->comms, 1);
    *c_p = nc;
    ump_log_info("%s: process %d of %d, global ranks %d..%d of %d (from %d "
                 "ranks over %d processes)", fn, v->me, v->nproc, nc->first,
                 nc->first + nc->n - 1, nc->nall, c->nall, w->nproc);
    return 0;
}

int coll_world_shrink(ump_comm_t *c, int bad, int nexclude,
                      const int *exclude, const bool *keep,
                      ump_comm_t **newcomm_p)
{
    (void)exclude; /* keep says the same, checked */
    const char *fn = "ump_comm_shrink";
    struct coll_world *w = c->world;
    int np = w->nproc;
    struct shrink_info mine = {bad, bad ? -1 : nexclude,
                               bad ? 0 : keep_digest(keep, c->nall)};
    struct shrink_info *in = calloc((size_t)np, sizeof(*in));
    struct coll_msg *m = calloc(2 * (size_t)np, sizeof(*m));
    int rc = in && m ? 0 : -ENOMEM, k = 0;
    pthread_mutex_lock(&c->lock);
    /* A call on the old communicator like a collective: it counts, and
     * its transfers carry its number (world.h). */
    w->seq++;
    if (in)
        in[w->me] = mine;
    for (int p = 0; !rc && p < np; p++) {
        if (p == w->me)
            continue;
        m[k++] = (struct coll_msg){&mine, sizeof(mine), p, coll_call_tag(w),
                                   true, 0};
        m[k++] = (struct coll_msg){&in[p], sizeof(in[p]), p,
                                   coll_call_tag(w), false, 0};
    }
    if (!rc && np > 1)
        rc = coll_xchg(c, m, k, fn);
    pthread_mutex_unlock(&c->lock);
    free(m);
    /* The same verdict on every process, from the same infos (this
     * process's own error, -EINVAL or -EIO, is its own answer). */
    if (!rc && bad)
        rc = bad;
    for (int p = 0; !rc && p < np; p++) {
        if (in[p].rc) {
            ump_log_error("%s: process %d's arguments were bad (%s): no "
                          "communicator", fn, p, ump_strerror(in[p].rc));
            rc = -EINVAL;
        } else if (in[p].nexclude != in[0].nexclude ||
                   in[p].digest != in[0].digest) {
            ump_log_error("%s: process %d excludes other ranks than process "
                          "0 (every process passes the same exclude list)",
                          fn, p);
            rc = -EINVAL;
        }
    }
    free(in);
    if (rc)
        return rc;
    int kept_procs = 0, mine_kept = 0;
    for (int p = 0; p < np; p++) {
        int kk = 0;
        for (int i = 0; i < w->nr[p]; i++)
            kk += keep[w->first[p] + i];
        kept_procs += kk > 0;
        if (p == w->me)
            mine_kept = kk;
    }
    if (!w->engine && kept_procs < np) {
        ump_log_error("%s: the exclude list leaves a process without ranks, "
                      "and this communicator moves its data through the "
                      "oob's allgather, which every process must join "
                      "(ump_comm_create_mpi has an engine that allows it)",
                      fn);
        return -ENOTSUP;
    }
    if (!mine_kept) {
        ump_log_info("%s: every rank of process %d is excluded: no "
                     "communicator for it", fn, w->me);
        *newcomm_p = NULL;
        return 0;
    }
    return shrink_build(c, keep, newcomm_p);
}
