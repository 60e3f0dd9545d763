/*
 * Bytes between processes. With a data engine (MPI from libumpool-mpi,
 * NCCL) every transfer of a step is started at once and the requests are
 * polled, never waited on, until they are done or the communicator's
 * timeout passes: a process that left makes its peers fail in bounded
 * time, and no thread sits in a blocking wait that the engine's progress
 * needs (NCCL's advice for MPI). Without an engine the oob's allgather
 * carries the step: every process packs what it sends, every process gets
 * every pack and takes what is addressed to it. That is a collective, so it
 * serves the collectives only (point-to-point needs an engine).
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define UMP_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UMP_LSAN 1
#endif
#endif
#ifndef UMP_LSAN
#define UMP_LSAN 0
#endif
#if UMP_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "coll/world.h"
#include "front/front.h"
#include "util/internal.h"
#include "util/log.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int broken(ump_comm_t *c, int rc)
{
    c->world->broken = rc;
    return rc;
}

static int engine_xchg(ump_comm_t *c, struct coll_msg *m, int nm,
                       const char *fn)
{
    struct coll_world *w = c->world;
    void **req = calloc((size_t)nm, sizeof(*req));
    if (!req)
        return -ENOMEM;
    int k = 0, rc = 0;
    /* Receives first, so that an eager send finds its buffer posted. */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < nm && !rc; i++) {
            if (m[i].send != (pass == 1))
                continue;
            rc = m[i].send ? w->eng.isend(w->eng.ctx, m[i].buf, m[i].bytes,
                                          m[i].proc, m[i].tag, &req[k])
                           : w->eng.irecv(w->eng.ctx, m[i].buf, m[i].bytes,
                                          m[i].proc, m[i].tag, &req[k]);
            if (!rc)
                k++;
        }
    if (rc) {
        ump_log_error("%s: %s could not start a transfer (%s): the "
                      "communicator is unusable", fn, w->eng.name,
                      ump_strerror(rc));
        w->eng.cancel(w->eng.ctx, k, req);
        free(req);
        return broken(c, -EIO);
    }
    double deadline = now_s() + c->timeout_s;
    for (;;) {
        int t = w->eng.testall(w->eng.ctx, k, req);
        if (t == 1)
            break;
        if (t < 0) {
            ump_log_error("%s: a transfer of %s failed (%s)%s: the "
                          "communicator is unusable", fn, w->eng.name,
                          ump_strerror(t),
                          t == -EMSGSIZE ? ": a process sent other than "
                                           "the bytes expected (counts or "
                                           "types differ between processes?)"
                                         : "");
            free(req);
            return broken(c, -EIO);
        }
        if (now_s() > deadline) {
            int peer = nm ? m[0].proc : -1;
            ump_log_error("%s: no answer within comm_timeout (%g s) from "
                          "process %d%s: did it leave the communicator? It "
                          "is unusable now", fn, c->timeout_s, peer,
                          nm > 1 ? " or another peer of this step" : "");
            w->eng.cancel(w->eng.ctx, k, req);
            free(req);
            return broken(c, -ETIMEDOUT);
        }
        sched_yield();
    }
    free(req);
    return 0;
}

/* A message's header in a process's pack. */
struct pack_hdr {
    int32_t proc, tag;
    uint64_t bytes;
};

static int oob_xchg(ump_comm_t *c, struct coll_msg *m, int nm,
                    const char *fn)
{
    struct coll_world *w = c->world;
    uint64_t mine = 0;
    for (int i = 0; i < nm; i++)
        if (m[i].send)
            mine += sizeof(struct pack_hdr) + m[i].bytes;
    uint64_t *sz = calloc((size_t)w->nproc, sizeof(*sz));
    if (!sz)
        return broken(c, -ENOMEM);
    int rc = w->oob.allgather(w->oob.ctx, &mine, sz, sizeof(mine));
    uint64_t max = 0;
    for (int p = 0; !rc && p < w->nproc; p++)
        max = sz[p] > max ? sz[p] : max;
    char *send = NULL, *all = NULL;
    if (!rc && max > SIZE_MAX / (size_t)w->nproc)
        rc = -EOVERFLOW;
    if (!rc) {
        send = calloc(1, max ? max : 1);
        all = malloc(max * (size_t)w->nproc + 1);
        rc = send && all ? 0 : -ENOMEM;
    }
    if (rc) {
        /* The others are in the second allgather now, or failed in the
         * first: no way to agree any more. */
        ump_log_error("%s: the oob's allgather failed (%s): the "
                      "communicator is unusable", fn, ump_strerror(rc));
        free(sz);
        free(send);
        free(all);
        return broken(c, -EIO);
    }
    char *p = send;
    for (int i = 0; i < nm; i++) {
        if (!m[i].send)
            continue;
        struct pack_hdr h = {m[i].proc, m[i].tag, m[i].bytes};
        memcpy(p, &h, sizeof(h));
        memcpy(p + sizeof(h), m[i].buf, m[i].bytes);
        p += sizeof(h) + m[i].bytes;
    }
    rc = w->oob.allgather(w->oob.ctx, send, all, max);
    free(send);
    if (rc) {
        ump_log_error("%s: the oob's allgather failed (%s): the "
                      "communicator is unusable", fn, ump_strerror(rc));
        free(sz);
        free(all);
        return broken(c, -EIO);
    }
    /* Each receive takes the next message from its process with its tag:
     * in order per pair, as an engine matches. */
    size_t *cur = calloc((size_t)w->nproc, sizeof(*cur));
    rc = cur ? 0 : -ENOMEM;
    for (int i = 0; !rc && i < nm; i++) {
        if (m[i].send)
            continue;
        int src = m[i].proc;
        const char *base = all + (size_t)src * max;
        bool found = false;
        while (cur[src] < sz[src]) {
            struct pack_hdr h;
            memcpy(&h, base + cur[src], sizeof(h));
            const char *data = base + cur[src] + sizeof(h);
            cur[src] += sizeof(h) + h.bytes;
            if (h.proc != w->me || h.tag != m[i].tag)
                continue;
            if (h.bytes != m[i].bytes) {
                ump_log_error("%s: process %d sent %llu bytes where %zu were "
                              "expected (counts differ between processes?)",
                              fn, src, (unsigned long long)h.bytes,
                              m[i].bytes);
                rc = -EINVAL;
                break;
            }
            memcpy(m[i].buf, data, h.bytes);
            found = true;
            break;
        }
        if (!rc && !found) {
            ump_log_error("%s: process %d sent nothing for this step "
                          "(processes calling different collectives?)", fn,
                          src);
            rc = -EINVAL;
        }
    }
    free(cur);
    free(sz);
    free(all);
    return rc;
}

int coll_xchg(ump_comm_t *c, struct coll_msg *m, int nm, const char *fn)
{
    struct coll_world *w = c->world;
    if (w->broken) {
        ump_log_error("%s: the communicator failed earlier (%s); destroy it",
                      fn, ump_strerror(w->broken));
        return w->broken;
    }
    for (int i = 0; i < nm; i++)
        if (m[i].proc < 0 || m[i].proc >= w->nproc || m[i].proc == w->me)
            return -EINVAL; /* a schedule's bug, not the caller's */
    int rc = w->engine ? engine_xchg(c, m, nm, fn) : oob_xchg(c, m, nm, fn);
    if (!rc)
        coll_xchg_traffic(c, m, nm);
    return rc;
}

void coll_xchg_traffic(ump_comm_t *c, const struct coll_msg *m, int nm)
{
    for (int i = 0; i < nm; i++) {
        int at = coll_loc(c->pool, m[i].buf);
        coll_traffic(c->pool, m[i].send ? at : TRAFFIC_NET,
                     m[i].send ? TRAFFIC_NET : at, m[i].bytes);
    }
}

int coll_loc(ump_pool_t *pool, const void *p)
{
    ump_ptr_info_t in;
    const char *why;
    if (pool_ptr_info(pool, p, &in, &why) || in.tier != UMP_TIER_DEVICE)
        return TRAFFIC_HOST;
    return in.device;
}

bool coll_host_ok(ump_pool_t *pool, const void *p)
{
    if (!strcmp(pool->be->name, "sim"))
        return true;
    ump_ptr_info_t in;
    const char *why;
    return !pool_ptr_info(pool, p, &in, &why) && in.tier == UMP_TIER_HOST;
}

/* Memory left to the process on purpose, not a leak to report (sanitizer
 * builds). */
static void lsan_ignore(const void *p)
{
#if UMP_LSAN
    __lsan_ignore_object(p);
#else
    (void)p;
#endif
}

void *coll_stage_alloc(ump_pool_t *pool, size_t len)
{
    void *h = NULL;
    /* Out of pinned memory (pinned_limit) is an info line, not an error:
     * pageable memory still works, at the slower copies. The sim has no
     * pinning to save. */
    if (strcmp(pool->be->name, "sim") && ump_host_alloc(pool, len, &h))
        h = NULL;
    return h ? h : malloc(len ? len : 1);
}

void coll_stage_free(ump_pool_t *pool, void *h)
{
    ump_ptr_info_t in;
    const char *why;
    if (h && !pool_ptr_info(pool, h, &in, &why) && in.kind == UMP_KIND_HOST)
        ump_host_free(pool, h);
    else
        free(h);
}

int coll_stage_in(ump_comm_t *c, void *p, size_t len, bool copy, void **h)
{
    ump_pool_t *pool = c->pool;
    if (coll_host_ok(pool, p)) {
        *h = p;
        return 0;
    }
    void *b = coll_stage_alloc(pool, len);
    if (!b)
        return -ENOMEM;
    int rc = copy ? ump_memcpy_async(pool, b, p, len, NULL) : 0;
    if (!rc && copy)
        rc = ump_stream_synchronize(pool, NULL);
    if (rc) {
        coll_stage_free(pool, b);
        return rc;
    }
    if (copy)
        coll_traffic(pool, coll_loc(pool, p), TRAFFIC_HOST, len);
    *h = b;
    return 0;
}

void coll_stage_drop(ump_comm_t *c, void *h)
{
    /* Once the communicator failed, an abandoned send may still read h
     * (MPI cannot take a send back): malloc'd memory is left to the
     * process; the pool's pinned memory goes back to the pool, where it
     * stays mapped (a late read reads stale bytes) until the pool trims
     * it or is destroyed; kept live, it would keep the pool from being
     * destroyed at all. */
    if (c->world && c->world->broken && !pool_ptr_on_host(c->pool, h)) {
        lsan_ignore(h);
        return;
    }
    coll_stage_free(c->pool, h);
}

int coll_stage_out(ump_comm_t *c, void *p, void *h, size_t len, bool copy)
{
    if (h == p)
        return 0;
    int rc = copy ? ump_memcpy_async(c->pool, p, h, len, NULL) : 0;
    if (!rc && copy)
        rc = ump_stream_synchronize(c->pool, NULL);
    if (!rc && copy)
        coll_traffic(c->pool, TRAFFIC_HOST, coll_loc(c->pool, p), len);
    coll_stage_drop(c, h);
    return rc;
}
