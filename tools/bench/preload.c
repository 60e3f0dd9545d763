/*
 * umpool-bench preload: what an interposed allocation costs. In one run,
 * on the driver the process loads as libcuda.so.1 (the H200's on a GPU
 * host, the fake one in the tests), for cached sizes:
 *
 *   interposed  cuMemAlloc + cuMemFree as libumpool-preload serves them
 *               (its exports, the entry points a preloaded program gets)
 *   direct      ump_alloc + ump_free on the same pool (the floor)
 *   driver      cuMemAlloc + cuMemFree of the real driver (the competitor)
 *
 * with interposed / direct (target: at most 1.5, issue 31) and driver /
 * interposed (target on the H200, whose pair costs about 90 us: at least
 * 100); and
 * the same three for pinned host memory:
 *
 *   interposed  cuMemHostAlloc + cuMemFreeHost as the preload serves them
 *   direct      ump_host_alloc + ump_host_free on the same pool
 *   driver      cuMemHostAlloc + cuMemFreeHost of the real driver, which
 *               pins new memory each time (about 4 GB/s on the H200 host)
 *
 * with driver / interposed (target on the H200: at least 1000). The
 * preload is loaded with dlopen here (UMPOOL_PRELOAD_LIB, else beside
 * libumpool.so, else the build tree's), not preloaded: the calls are the
 * same functions a preloaded program reaches through cuGetProcAddress.
 * Times are medians of 5 batches of --iters pairs (2000 by default; a
 * tenth of that for the driver's pairs of 16 MiB, which take milliseconds).
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "umpool.h"

typedef int cu_alloc_fn(uint64_t *, size_t);
typedef int cu_free_fn(uint64_t);
typedef int cu_host_alloc_fn(void **, size_t, unsigned);
typedef int cu_host_free_fn(void *);
typedef int cu_getproc_fn(const char *, void **, int, uint64_t, int *);

/* libumpool-preload.so: UMPOOL_PRELOAD_LIB, beside libumpool.so
 * (installed), or the build tree's (lib/.libs -> preload/.libs). */
static void *open_preload(char *path, size_t len)
{
    const char *env = getenv("UMPOOL_PRELOAD_LIB");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    Dl_info info;
    if (!dladdr((void *)ump_pool_create, &info) || !info.dli_fname)
        return NULL;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *tries[] = {"%s/libumpool-preload.so",
                           "%s/../../preload/.libs/libumpool-preload.so"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, len, tries[i], slash ? dir : ".");
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

static void *sym(void *h, const char *name)
{
    return h ? dlsym(h, name) : NULL;
}

/* The pairs timed: the preload's, umpool's own, the driver's; device and
 * host. */
struct calls {
    cu_alloc_fn *ia, *ra;
    cu_free_fn *ifr, *rf;
    cu_host_alloc_fn *iha, *rha;
    cu_host_free_fn *ihf, *rhf;
    ump_pool_t *pool;
};
enum { INTERPOSED, DIRECT, DRIVER }; /* the columns */

/* One alloc+free pair of a column, device or host memory. */
static int one_pair(const struct calls *c, int kind, bool host, size_t size)
{
    uint64_t d = 0;
    void *p = NULL;
    int rc;
    if (kind == DIRECT) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = 0;
        rc = host ? ump_host_alloc(c->pool, size, &p)
                  : ump_alloc(c->pool, size, &h, &p);
        return rc ? rc : host ? ump_host_free(c->pool, p)
                              : ump_free(c->pool, p);
    }
    bool in = kind == INTERPOSED;
    if (host) {
        rc = (in ? c->iha : c->rha)(&p, size, 0);
        return rc ? rc : (in ? c->ihf : c->rhf)(p);
    }
    rc = (in ? c->ia : c->ra)(&d, size);
    return rc ? rc : (in ? c->ifr : c->rf)(d);
}

/* ns per pair, median of 5 batches of n; -1 with *err set on a failure. */
static double pair_ns(const struct calls *c, int kind, bool host, size_t size,
                      int n, int *err)
{
    double t[5];
    for (int b = 0; b < 5; b++) {
        double t0 = (double)now_ns();
        for (int i = 0; i < n; i++) {
            int rc = one_pair(c, kind, host, size);
            if (rc) {
                *err = rc;
                return -1;
            }
        }
        t[b] = ((double)now_ns() - t0) / n;
    }
    return median(t, 5);
}

/* The table of device or pinned host memory; 0, or the failing call's
 * error. */
static int table(const struct calls *c, bool host, int n)
{
    static const size_t sizes[] = {4096, 65536, (size_t)1 << 20,
                                   (size_t)16 << 20};
    printf("%s\n%10s %14s %10s %10s %12s %14s\n",
           host ? "# pinned host: cuMemHostAlloc + cuMemFreeHost (direct: "
                  "ump_host_alloc + ump_host_free)"
                : "# device: cuMemAlloc + cuMemFree (direct: ump_alloc + "
                  "ump_free)",
           "size", "interposed", "direct", "driver", "int/direct",
           "driver/int");
    /* The interposed calls must be the pool's, not forwarded. */
    uint64_t dp = 0;
    void *p = NULL;
    ump_ptr_info_t in;
    int err = host ? c->iha(&p, 4096, 0) : c->ia(&dp, 4096);
    if (!host)
        p = (void *)(uintptr_t)dp;
    bool pooled = !err && ump_ptr_lookup(c->pool, p, &in) == 0 &&
                  (in.tier == UMP_TIER_HOST) == host;
    if (!err)
        err = host ? c->ihf(p) : c->ifr(dp);
    if (!err && !pooled) {
        fprintf(stderr, "umpool-bench preload: the preload did not serve "
                "%s memory from the pool\n", host ? "pinned host" : "device");
        return -ENOTSUP;
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && !err; i++) {
        size_t sz = sizes[i];
        /* Warm: the size's memory cached in the pool. */
        pair_ns(c, INTERPOSED, host, sz, 10, &err);
        double a = pair_ns(c, INTERPOSED, host, sz, n, &err);
        double b = pair_ns(c, DIRECT, host, sz, n, &err);
        double d = pair_ns(c, DRIVER, host, sz,
                           sz >= ((size_t)16 << 20) ? n / 10 + 1 : n, &err);
        if (err)
            return err;
        printf("%10zu %14.0f %10.0f %10.0f %12.2f %14.1f\n", sz, a, b, d,
               a / b, d / a);
    }
    return 0;
}

int bench_preload(const struct bench_opts *o)
{
    char path[4200];
    void *pre = open_preload(path, sizeof(path));
    if (!pre) {
        fprintf(stderr, "umpool-bench preload: libumpool-preload.so does not "
                "load (%s); set UMPOOL_PRELOAD_LIB\n", dlerror());
        return 1;
    }
    struct calls c;
    ump_pool_t *(*pool_of)(void);
    void *s = sym(pre, "cuMemAlloc_v2");
    memcpy(&c.ia, &s, sizeof(c.ia));
    s = sym(pre, "cuMemFree_v2");
    memcpy(&c.ifr, &s, sizeof(c.ifr));
    s = sym(pre, "cuMemHostAlloc");
    memcpy(&c.iha, &s, sizeof(c.iha));
    s = sym(pre, "cuMemFreeHost");
    memcpy(&c.ihf, &s, sizeof(c.ihf));
    s = sym(pre, "umpool_preload_pool");
    memcpy(&pool_of, &s, sizeof(pool_of));
    /* The real driver, by the name a program asks for. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cu_getproc_fn *gp;
    s = sym(drv, "cuGetProcAddress_v2");
    memcpy(&gp, &s, sizeof(gp));
    if (!c.ia || !c.ifr || !c.iha || !c.ihf || !pool_of || !gp) {
        fprintf(stderr, "umpool-bench preload: %s\n",
                !drv ? "no CUDA driver (libcuda.so.1)" : "missing symbols");
        return 1;
    }
    int (*init)(unsigned), (*dev_get)(int *, int), (*retain)(void **, int),
        (*set)(void *);
    struct {
        const char *n;
        void *p;
    } t[] = {{"cuInit", &init},         {"cuDeviceGet", &dev_get},
             {"cuDevicePrimaryCtxRetain", &retain},
             {"cuCtxSetCurrent", &set}, {"cuMemAlloc", &c.ra},
             {"cuMemFree", &c.rf},      {"cuMemHostAlloc", &c.rha},
             {"cuMemFreeHost", &c.rhf}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        void *fn = NULL;
        gp(t[i].n, &fn, 12000, 0, NULL);
        if (!fn) {
            fprintf(stderr, "umpool-bench preload: the driver has no %s\n",
                    t[i].n);
            return 1;
        }
        memcpy(t[i].p, &fn, sizeof(fn));
    }
    int dev;
    void *ctx;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set(ctx)) {
        fprintf(stderr, "umpool-bench preload: no context on device 0\n");
        return 1;
    }
    /* The first interposed call makes the pool (from UMPOOL_CONF). */
    uint64_t d;
    if (c.ia(&d, 4096) || c.ifr(d) || !pool_of()) {
        fprintf(stderr, "umpool-bench preload: the preload made no pool\n");
        return 1;
    }
    c.pool = pool_of();
    /* --iters: pairs per batch (alloc's option; 2000 by default here). */
    int n = o->alloc_opts && o->iters < 1000000 ? (int)o->iters : 2000;
    printf("# umpool-bench preload: device 0, pool from UMPOOL_CONF (%s), "
           "preload %s; ns per alloc+free pair, median of 5 batches of %d\n",
           ump_backend_name(c.pool), path, n);
    int err = table(&c, false, n);
    if (!err)
        err = table(&c, true, n);
    if (err) {
        fprintf(stderr, "umpool-bench preload: a call failed (%d)\n", err);
        return 1;
    }
    printf("# targets: int/direct <= 1.5; driver/int >= 100 (device) and "
           ">= 1000 (pinned host) on an H200 (a fake driver's allocations "
           "are mallocs: no target there)\n");
    return 0;
}
