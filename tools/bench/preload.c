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
 * with interposed / direct (target: at most 2) and driver / interposed
 * (target on the H200, whose pair costs about 90 us: at least 100). The
 * preload is loaded with dlopen here (UMPOOL_PRELOAD_LIB, else beside
 * libumpool.so, else the build tree's), not preloaded: the calls are the
 * same functions a preloaded program reaches through cuGetProcAddress.
 * Times are medians of 5 batches of --iters pairs (2000 by default).
 *
 * Pinned host allocations (cuMemHostAlloc + cuMemFreeHost against the
 * pool's cached pinned memory) are not measured yet: umpool does not serve
 * them yet (issue 15's ump_host_alloc).
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
typedef int cu_getproc_fn(const char *, void **, int, uint64_t, int *);

static double clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

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

/* ns per pair, median of 5 batches of n. kind: 0 interposed, 1 direct,
 * 2 driver. */
static double pair_ns(int kind, size_t size, int n, cu_alloc_fn *ia,
                      cu_free_fn *ifr, cu_alloc_fn *ra, cu_free_fn *rf,
                      ump_pool_t *pool, int *err)
{
    double t[5];
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = 0;
    for (int b = 0; b < 5; b++) {
        double t0 = clock_ns();
        for (int i = 0; i < n; i++) {
            uint64_t d = 0;
            void *p = NULL;
            int rc;
            switch (kind) {
            case 0:
                rc = ia(&d, size);
                rc = rc ? rc : ifr(d);
                break;
            case 1:
                rc = ump_alloc(pool, size, &h, &p);
                rc = rc ? rc : ump_free(pool, p);
                break;
            default:
                rc = ra(&d, size);
                rc = rc ? rc : rf(d);
                break;
            }
            if (rc) {
                *err = rc;
                return -1;
            }
        }
        t[b] = (clock_ns() - t0) / n;
    }
    qsort(t, 5, sizeof(t[0]), cmp_d);
    return t[2];
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
    cu_alloc_fn *ia;
    cu_free_fn *ifr;
    ump_pool_t *(*pool_of)(void);
    void *s = sym(pre, "cuMemAlloc_v2");
    memcpy(&ia, &s, sizeof(ia));
    s = sym(pre, "cuMemFree_v2");
    memcpy(&ifr, &s, sizeof(ifr));
    s = sym(pre, "umpool_preload_pool");
    memcpy(&pool_of, &s, sizeof(pool_of));
    /* The real driver, by the name a program asks for. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cu_getproc_fn *gp;
    s = sym(drv, "cuGetProcAddress_v2");
    memcpy(&gp, &s, sizeof(gp));
    if (!ia || !ifr || !pool_of || !gp) {
        fprintf(stderr, "umpool-bench preload: %s\n",
                !drv ? "no CUDA driver (libcuda.so.1)" : "missing symbols");
        return 1;
    }
    int (*init)(unsigned), (*dev_get)(int *, int), (*retain)(void **, int),
        (*set)(void *);
    cu_alloc_fn *ra;
    cu_free_fn *rf;
    struct {
        const char *n;
        void *p;
    } t[] = {{"cuInit", &init},         {"cuDeviceGet", &dev_get},
             {"cuDevicePrimaryCtxRetain", &retain},
             {"cuCtxSetCurrent", &set}, {"cuMemAlloc", &ra},
             {"cuMemFree", &rf}};
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
    if (ia(&d, 4096) || ifr(d) || !pool_of()) {
        fprintf(stderr, "umpool-bench preload: the preload made no pool\n");
        return 1;
    }
    ump_pool_t *pool = pool_of();
    /* --iters: pairs per batch (alloc's option; 2000 by default here). */
    int n = o->alloc_opts && o->iters < 1000000 ? (int)o->iters : 2000;
    static const size_t sizes[] = {4096, 65536, (size_t)1 << 20,
                                   (size_t)16 << 20};
    printf("# umpool-bench preload: device 0, pool from UMPOOL_CONF (%s), "
           "preload %s; ns per alloc+free pair, median of 5 batches of %d\n",
           ump_backend_name(pool), path, n);
    printf("%10s %14s %10s %10s %12s %14s\n", "size", "interposed", "direct",
           "driver", "int/direct", "driver/int");
    int err = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && !err; i++) {
        size_t sz = sizes[i];
        /* Warm: the size's memory cached in the pool. */
        pair_ns(0, sz, 10, ia, ifr, ra, rf, pool, &err);
        double a = pair_ns(0, sz, n, ia, ifr, ra, rf, pool, &err);
        double b = pair_ns(1, sz, n, ia, ifr, ra, rf, pool, &err);
        double c = pair_ns(2, sz, sz >= ((size_t)16 << 20) ? n / 10 + 1 : n,
                           ia, ifr, ra, rf, pool, &err);
        if (err)
            break;
        printf("%10zu %14.0f %10.0f %10.0f %12.2f %14.1f\n", sz, a, b, c,
               a / b, c / a);
    }
    if (err) {
        fprintf(stderr, "umpool-bench preload: a call failed (%d)\n", err);
        return 1;
    }
    printf("# targets: int/direct <= 2; driver/int >= 100 on an H200 (a "
           "fake driver's cuMemAlloc is a malloc: no target there)\n");
    return 0;
}
