#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "coll/gpu.h"
#include "coll/job.h"
#include "coll/model.h"
#include "coll/reduce.h"
#include "coll/run.h"
#include "coll/world.h"
#include "front/check.h"
#include "util/internal.h"
#include "util/log.h"

size_t coll_bytes(int coll, size_t count, size_t esz, int n)
{
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
    case UMP_COLL_BROADCAST:
    case UMP_COLL_REDUCE:
        return count * esz;
    default: /* the whole buffer of n slices */
        return count * esz * (size_t)n;
    }
}

int coll_comm_algo(const ump_comm_t *c, int coll, size_t bytes, double *us_p)
{
    if (c->force >= 0 && coll_algo_applies(coll, c->force) &&
        (c->algos[coll] & 1u << c->force)) {
        *us_p = coll_model_us(&c->topo, coll, c->force, bytes);
        return c->force;
    }
    return (int)coll_model_choose_among(&c->topo, coll, bytes,
                                        c->algos[coll], us_p);
}

/* One "key:value" of the communicator's configuration. */
static int config_item(ump_comm_t *c, const char *key, size_t klen,
                       const char *val, const char *fn)
{
#define KEY(k) (klen == sizeof(k) - 1 && !strncmp(key, k, klen))
    if (KEY("coll_algo")) {
        int a = strcmp(val, "auto") ? coll_algo_lookup(val) : -1;
        if (a < 0 && strcmp(val, "auto")) {
            ump_log_error("%s: unknown algorithm '%s' (known: auto, oneshot, "
                          "twoshot, ring, tree, direct)", fn, val);
            return -EINVAL;
        }
        c->force = a;
        return 0;
    }
    if (KEY("coll_engine")) {
        static const char *const names[] = {"auto", "mpi", "nccl"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(val, names[i])) {
                c->engine_pref = i;
                return 0;
            }
        ump_log_error("%s: unknown engine '%s' (known: auto, mpi, nccl)", fn,
                      val);
        return -EINVAL;
    }
    if (KEY("coll_schedule")) {
        static const char *const names[] = {"auto", "flat", "hierarchical"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(val, names[i])) {
                c->sched = i;
                return 0;
            }
        ump_log_error("%s: unknown schedule '%s' (known: auto, flat, "
                      "hierarchical)", fn, val);
        return -EINVAL;
    }
    if (KEY("comm_timeout")) {
        char *end;
        double t = strtod(val, &end);
        if (end == val || *end || !(t > 0) || t > 1e6) {
            ump_log_error("%s: comm_timeout '%s' is not a number of seconds "
                          "in (0, 1e6]", fn, val);
            return -EINVAL;
        }
        c->timeout_s = t;
        return 0;
    }
#undef KEY
    ump_log_error("%s: bad config item '%.*s' (known: coll_algo, coll_engine, "
                  "coll_schedule, comm_timeout)", fn, (int)klen, key);
    return -EINVAL;
}

int coll_comm_config(ump_comm_t *c, const char *config, const char *fn)
{
    c->force = -1;
    c->engine_pref = COLL_ENGINE_AUTO;
    c->timeout_s = 60;
    c->sched = COLL_SCHED_AUTO;
    if (!config)
        return 0;
    const char *p = config;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        char val[32];
        size_t klen = colon ? (size_t)(colon - p) : len;
        size_t vlen = colon ? len - klen - 1 : 0;
        if (!colon || vlen >= sizeof(val)) {
            ump_log_error("%s: bad config item '%.*s' (key:value; known: "
                          "coll_algo, coll_engine, coll_schedule, "
                          "comm_timeout)", fn,
                          (int)len, p);
            return -EINVAL;
        }
        memcpy(val, colon + 1, vlen);
        val[vlen] = '\0';
        int rc = config_item(c, p, klen, val, fn);
        if (rc)
            return rc;
        p += len + (end != NULL);
    }
    return 0;
}

/* Devices of the communicator into c->dev: in range, each once. */
static int set_devices(ump_comm_t *c, int ndev, const int *devices,
                       const char *fn)
{
    int have = ump_device_count(c->pool);
    if (have < 0)
        return have;
    if (ndev < 1 || ndev > COLL_MAX_RANKS || (!devices && ndev != have)) {
        ump_log_error("%s: %d ranks for a pool of %d devices%s", fn, ndev,
                      have, devices ? "" : " (devices NULL: one rank "
                      "per device)");
        return -EINVAL;
    }
    bool seen[UMP_MAX_DEVICES] = {false};
    for (int r = 0; r < ndev; r++) {
        int d = devices ? devices[r] : r;
        if (d < 0 || d >= have || seen[d]) {
            ump_log_error("%s: rank %d: device %d %s", fn, r, d,
                          d < 0 || d >= have ? "is not a device of the pool"
                                             : "has a rank already");
            return -EINVAL;
        }
        seen[d] = true;
        c->dev[r] = d;
    }
    c->n = c->nall = ndev;
    return 0;
}

int coll_comm_alloc(ump_pool_t *pool, int ndev, const int *devices,
                    const char *config, const char *fn, ump_comm_t **c_p)
{
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    ump_comm_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->pool = pool;
    rc = coll_comm_config(c, config, fn);
    if (!rc)
        rc = set_devices(c, ndev, devices, fn);
    if (rc) {
        free(c);
        return rc;
    }
    *c_p = c;
    return 0;
}

int coll_comm_make(ump_pool_t *pool, int ndev, const int *devices,
                     const char *config, const ump_comm_t *like,
                     const char *fn, ump_comm_t **comm_p)
{
    ump_comm_t *c;
    int rc = coll_comm_alloc(pool, ndev, devices, like ? NULL : config, fn,
                             &c);
    if (rc)
        return rc;
    if (like) {
        c->force = like->force;
        c->engine_pref = like->engine_pref;
        c->timeout_s = like->timeout_s;
        c->sched = like->sched;
    }
    rc = coll_topo_from(&pool->topo, c->n, c->dev, &c->topo);
    int made = 0;
    for (; !rc && made < c->n; made++)
        rc = ump_stream_create(pool, c->dev[made], &c->own[made]);
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->done_lock, NULL);
    c->last_us = NAN;
    /* A backend that runs kernels runs the collectives there (gpu.c). */
    c->gpu = pool->be->kernel_launch && pool->be->stream_wait_event;
    if (!rc)
        rc = c->gpu ? coll_gpu_init(c) : coll_run_init(c);
    for (int k = 0; k < COLL_NCOLL; k++)
        c->algos[k] = c->gpu ? coll_gpu_algos(c, k) : COLL_ALGOS_ALL;
    if (rc) {
        while (made-- > 0)
            if (c->own[made])
                ump_stream_destroy(pool, c->own[made]);
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->done_lock);
        free(c);
        return rc;
    }
    atomic_fetch_add(&pool->comms, 1);
    *comm_p = c;
    return 0;
}

UMP_EXPORT int ump_comm_create(ump_pool_t *pool, int ndev, const int *devices,
                               const char *config, ump_comm_t **comm_p)
{
    if (!comm_p) {
        ump_log_error("ump_comm_create: comm_p is NULL");
        return -EINVAL;
    }
    return coll_comm_make(pool, ndev, devices, config, NULL,
                          "ump_comm_create", comm_p);
}

/* ump_comm_shrink's arguments, the same checks on every process: 0,
 * -EINVAL (a bad list) or -EIO (a kept rank of this process has a failed
 * device), logged. keep[g]: global rank g stays. */
static int shrink_args(const ump_comm_t *c, int nexclude, const int *exclude,
                       ump_comm_t **newcomm_p, bool *keep)
{
    const char *fn = "ump_comm_shrink";
    if (!newcomm_p || nexclude < 0 || (nexclude && !exclude)) {
        ump_log_error("%s: %s", fn, !newcomm_p  ? "newcomm_p is NULL"
                                    : nexclude < 0 ? "nexclude < 0"
                                                   : "exclude is NULL");
        return -EINVAL;
    }
    for (int g = 0; g < c->nall; g++)
        keep[g] = true;
    for (int i = 0; i < nexclude; i++) {
        int g = exclude[i];
        if (g < 0 || g >= c->nall || !keep[g]) {
            ump_log_error("%s: exclude[%d] = %d %s", fn, i, g,
                          g < 0 || g >= c->nall
                              ? "is not a rank of the communicator"
                              : "is listed twice");
            return -EINVAL;
        }
        keep[g] = false;
    }
    if (nexclude == c->nall) {
        ump_log_error("%s: every rank (%d) is excluded: no communicator "
                      "left", fn, c->nall);
        return -EINVAL;
    }
    /* A kept rank of this process on a failed device: the new
     * communicator could not run a call either. Said before anything is
     * made, so that across processes every process learns it from the
     * verdicts (world.c) and none is left with a communicator the others
     * could not make. */
    for (int r = 0; r < c->n; r++)
        if (keep[c->first + r] && coll_rank_failed(c, r)) {
            ump_log_error("%s: rank %d is kept, but its device %d has "
                          "failed: exclude it too", fn, c->first + r,
                          c->dev[r]);
            return -EIO;
        }
    return 0;
}

UMP_EXPORT int ump_comm_shrink(ump_comm_t *comm, int nexclude,
                               const int *exclude, ump_comm_t **newcomm_p)
{
    if (!comm) {
        ump_log_error("ump_comm_shrink: comm is NULL");
        return -EINVAL;
    }
    int rc = pool_check(comm->pool, "ump_comm_shrink");
    if (rc)
        return rc;
    bool *keep = calloc((size_t)comm->nall, sizeof(*keep));
    if (!keep)
        return -ENOMEM;
    rc = shrink_args(comm, nexclude, exclude, newcomm_p, keep);
    if (comm->world) {
        /* Every process takes part, bad arguments or not: the others
         * learn it and fail the same way rather than wait (world.c). */
        rc = coll_world_shrink(comm, rc, nexclude, exclude, keep, newcomm_p);
        free(keep);
        return rc;
    }
    int dev[COLL_MAX_RANKS], n = 0;
    for (int r = 0; !rc && r < comm->n; r++)
        if (keep[r])
            dev[n++] = comm->dev[r];
    free(keep);
    if (rc)
        return rc;
    ump_comm_t *c;
    rc = coll_comm_make(comm->pool, n, dev, NULL, comm, "ump_comm_shrink",
                        &c);
    if (rc)
        return rc;
    ump_log_info("ump_comm_shrink: %d of %d ranks kept", n, comm->n);
    *newcomm_p = c;
    return 0;
}

UMP_EXPORT int ump_comm_destroy(ump_comm_t *comm)
{
    if (!comm) {
        ump_log_error("ump_comm_destroy: comm is NULL");
        return -EINVAL;
    }
    int rc = pool_check(comm->pool, "ump_comm_destroy");
    return rc ? rc : coll_comm_free(comm);
}

int coll_comm_free(ump_comm_t *comm)
{
    int rc = 0;
    atomic_fetch_sub(&comm->pool->comms, 1);
    if (comm->world) {
        coll_world_destroy(comm);
        return 0;
    }
    if (comm->gpu)
        coll_gpu_fini(comm);
    else
        coll_run_fini(comm);
    for (int r = 0; r < comm->n; r++) {
        int e = ump_stream_destroy(comm->pool, comm->own[r]);
        if (e && !rc)
            rc = e;
    }
    /* After the streams (their destroy joins the ranks): a job a rank
     * finished meanwhile is reaped too. */
    coll_comm_reap(comm);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->done_lock);
    free(comm);
    return rc;
}

UMP_EXPORT int ump_comm_size(ump_comm_t *comm, int *nranks_p)
{
    if (!comm || !nranks_p) {
        ump_log_error("ump_comm_size: %s is NULL",
                      comm ? "nranks_p" : "comm");
        return -EINVAL;
    }
    *nranks_p = comm->nall;
    return 0;
}

UMP_EXPORT int ump_comm_plan(ump_comm_t *c, int coll, size_t count,
                             ump_dtype_t dt, ump_coll_plan_t *plan_p)
{
    if (!c || !plan_p || coll < 0 || coll >= COLL_NCOLL ||
        !coll_dtype_valid(dt)) {
        ump_log_error("ump_comm_plan: %s", !c        ? "comm is NULL"
                                           : !plan_p ? "plan_p is NULL"
                                           : coll < 0 || coll >= COLL_NCOLL
                                               ? "unknown collective"
                                               : "unknown data type");
        return -EINVAL;
    }
    size_t esz = coll_dtype_size(dt);
    if (count > SIZE_MAX / esz / (size_t)c->nall) {
        ump_log_error("ump_comm_plan: count %zu overflows", count);
        return -EINVAL;
    }
    if (c->world) {
        double us;
        plan_p->algorithm = coll_world_plan(c, coll, count, dt, &us);
        plan_p->modeled_us = us;
        return 0;
    }
    return coll_comm_plan_local(c, coll, count, dt, plan_p);
}

int coll_comm_plan_local(const ump_comm_t *c, int coll, size_t count, int dt,
                         ump_coll_plan_t *plan_p)
{
    double us;
    size_t bytes = coll_bytes(coll, count, coll_dtype_size(dt), c->n);
    int a = coll_comm_algo(c, coll, bytes, &us);
    if (a == COLL_NALGO) {
        ump_log_error("ump_comm_plan: the reductions need the GPU kernel, "
                      "and this library was built without nvcc");
        return -ENOTSUP;
    }
    plan_p->algorithm = coll_algo_name(a);
    plan_p->modeled_us = us;
    return 0;
}

bool coll_rank_failed(const ump_comm_t *c, int r)
{
    ump_pool_t *p = c->pool;
    uint32_t bad = atomic_load_explicit(&p->failing, memory_order_relaxed) |
                   atomic_load_explicit(&p->failed, memory_order_relaxed);
    return c->dev[r] < 32 && (bad & (1u << c->dev[r]));
}

int coll_comm_failed_rank(const ump_comm_t *c)
{
    for (int r = 0; r < c->n; r++)
        if (coll_rank_failed(c, r))
            return r;
    return -1;
}

int coll_comm_check_failed(const ump_comm_t *c, const char *fn)
{
    int r = coll_comm_failed_rank(c);
    if (r < 0)
        return 0;
    ump_log_error("%s: rank %d's device %d has failed: the communicator "
                  "runs no more collectives (-EIO; ump_comm_shrink makes one "
                  "of the other ranks)", fn, c->first + r, c->dev[r]);
    return -EIO;
}

void coll_comm_set_last_us(ump_comm_t *c, double us)
{
    pthread_mutex_lock(&c->done_lock);
    c->last_us = us;
    pthread_mutex_unlock(&c->done_lock);
}

int coll_comm_last_us(ump_comm_t *c, double *us_p)
{
    pthread_mutex_lock(&c->done_lock);
    double us = c->last_us;
    pthread_mutex_unlock(&c->done_lock);
    if (isnan(us))
        return -ENODATA;
    *us_p = us;
    return 0;
}

UMP_EXPORT int ump_comm_last_modeled_us(ump_comm_t *c, double *us_p)
{
    if (!c || !us_p) {
        ump_log_error("ump_comm_last_modeled_us: %s is NULL",
                      c ? "us_p" : "comm");
        return -EINVAL;
    }
    return coll_comm_last_us(c, us_p);
}
