/*
 * umpool-bench plugin: what the framework entry points of libumpool cost
 * (include/umpool_bindings.h), side by side with ump_alloc + ump_free on
 * the same pool in the same run, for cached sizes:
 *
 *   torch   umpool_torch_alloc + umpool_torch_free on one stream, as
 *           PyTorch's pluggable allocator calls them (target: at most
 *           1.2x the direct pair)
 *   cupy    umpool_cupy_malloc + umpool_cupy_free
 *   direct  ump_alloc + ump_free
 *
 * The pool is the process's (ump_process_pool), from --config or
 * "backend:sim,sim_devices:1". Times are medians of 5 batches of --iters
 * pairs (200000 by default).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "umpool.h"
#include "umpool_bindings.h"

enum { DIRECT, TORCH, CUPY };

/* ns per pair, median of 5 batches of n; -1 when a call fails. */
static double pair_ns(ump_pool_t *pool, int kind, size_t size, void *stream,
                      long n)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = 0;
    double t[5];
    for (int b = 0; b < 5; b++) {
        double t0 = (double)now_ns();
        for (long i = 0; i < n; i++) {
            void *p = NULL;
            if (kind == DIRECT) {
                if (ump_alloc(pool, size, &h, &p) || ump_free(pool, p))
                    return -1;
            } else if (kind == TORCH) {
                if (!(p = umpool_torch_alloc(size, 0, stream)))
                    return -1;
                umpool_torch_free(p, size, 0, stream);
            } else {
                if (!(p = umpool_cupy_malloc(NULL, size, 0)))
                    return -1;
                umpool_cupy_free(NULL, p, 0);
            }
        }
        t[b] = ((double)now_ns() - t0) / (double)n;
    }
    return median(t, 5);
}

int bench_plugin(const struct bench_opts *o)
{
    const char *config = o->config ? o->config : "backend:sim,sim_devices:1";
    ump_pool_t *pool;
    int rc = ump_process_pool(config, &pool);
    ump_stream_t s = NULL;
    if (!rc)
        rc = ump_stream_create(pool, 0, &s);
    if (rc) {
        fprintf(stderr, "umpool-bench plugin: %s\n", ump_strerror(rc));
        return 1;
    }
    long n = o->alloc_opts && o->iters < 100000000 ? (long)o->iters : 200000;
    static const size_t sizes[] = {512, 4096, 65536, (size_t)1 << 20,
                                   (size_t)16 << 20};
    printf("# umpool-bench plugin: the process's pool (%s, \"%s\"), device "
           "0; ns per alloc+free pair, median of 5 batches of %ld\n",
           ump_backend_name(pool), config, n);
    printf("%10s %10s %10s %10s %12s %12s\n", "size", "direct", "torch",
           "cupy", "torch/dir", "cupy/dir");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t sz = sizes[i];
        pair_ns(pool, TORCH, sz, s, 100); /* warm: the size cached */
        double d = pair_ns(pool, DIRECT, sz, s, n);
        double t = pair_ns(pool, TORCH, sz, s, n);
        double c = pair_ns(pool, CUPY, sz, s, n);
        if (d < 0 || t < 0 || c < 0) {
            fprintf(stderr, "umpool-bench plugin: an allocation of %zu bytes "
                    "failed\n", sz);
            return 1;
        }
        printf("%10zu %10.0f %10.0f %10.0f %12.2f %12.2f\n", sz, d, t, c,
               t / d, c / d);
    }
    printf("# target: torch/dir <= 1.2\n");
    umpool_torch_reset(); /* the kept blocks back to the pool */
    ump_stream_synchronize(pool, s);
    ump_stream_destroy(pool, s);
    return 0;
}
