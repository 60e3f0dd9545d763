/*
 * umpool-bench alloc: alloc+free latency of a cached size, ump_alloc/
 * ump_free next to glibc malloc/free and jemalloc mallocx/dallocx (loaded
 * with dlopen), with 1 and N threads; on the cuda backend also next to
 * cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync, and the first
 * allocation of each size after ump_trim next to the raw driver VMM
 * sequence (cuMemCreate + cuMemMap + cuMemSetAccess). The runtime and the
 * driver come from cuda_loader.c; the output is alloc_report.c's.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "topo/drivercost.h"
#include "bench.h"
#include "cuda_loader.h"
#include "drvpace.h"
#include "offload.h"
#include "umpool.h"

const char *const alloc_kind_name[A_COUNT] = {
    "ump", "malloc", "jemalloc", "cuda_malloc", "cuda_malloc_async"};
const char *const alloc_kind_calls[A_COUNT] = {
    "ump_alloc/ump_free", "malloc/free", "mallocx/dallocx",
    "cudaMalloc/cudaFree", "cudaMallocAsync/cudaFreeAsync"};

static const size_t cuda_default_sizes[] = {256, 64 * KiB, 1 * MiB, 64 * MiB,
                                            1024 * MiB};

/* ---- jemalloc ----------------------------------------------------------- */


/*
 * libjemalloc.so.2 uses initial-exec TLS, which dlopen can place only in the
 * static TLS room glibc reserves at start-up, usually too small for it. The
 * room is a start-up tunable, so the one way to get it is to run again with
 * GLIBC_TUNABLES extended; it does not change glibc's malloc. Returns only
 * when that cannot be done.
 */
static void reexec_for_tls(char **argv)
{
    const char *old = getenv("GLIBC_TUNABLES");
    char *val;
    size_t len;

    if (getenv(REEXEC_ENV))
        return;
    len = (old ? strlen(old) + 1 : 0) + sizeof(TLS_TUNABLE);
    val = malloc(len);
    if (!val)
        return;
    snprintf(val, len, "%s%s%s", old ? old : "", old ? ":" : "", TLS_TUNABLE);
    if (setenv("GLIBC_TUNABLES", val, 1) == 0 &&
        setenv(REEXEC_ENV, "1", 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", argv);
    }
    /* Still here: carry on without jemalloc, with the environment as it was. */
    if (old)
        setenv("GLIBC_TUNABLES", old, 1);
    else
        unsetenv("GLIBC_TUNABLES");
    unsetenv(REEXEC_ENV);
    free(val);
}

/*
 * jemalloc is loaded at run time, RTLD_LOCAL: linking it would replace
 * glibc's malloc in the whole process and spoil the malloc column. Call it
 * before anything that an exec would lose (pools, threads, output).
 */
static void jemalloc_load(struct bench_ctx *ctx, char **argv)
{
    const char *err;
    void *h;

    dlerror();
    h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h && (err = dlerror()) && strstr(err, "static TLS")) {
        reexec_for_tls(argv);
        h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        err = dlerror();
        snprintf(ctx->je_why, sizeof(ctx->je_why), "%s",
                 err ? err : "dlopen libjemalloc.so.2 failed");
        return;
    }
    ctx->je_mallocx = (mallocx_fn)dlsym(h, "mallocx");
    ctx->je_dallocx = (dallocx_fn)dlsym(h, "dallocx");
    if (!ctx->je_mallocx || !ctx->je_dallocx) {
        snprintf(ctx->je_why, sizeof(ctx->je_why),
                 "libjemalloc.so.2 has no mallocx/dallocx");
        dlclose(h);
        return;
    }
    ctx->je_handle = h;
}

/* ---- the CUDA baselines ------------------------------------------------- */

#ifdef BENCH_CUDART
/*
 * Loads the runtime and readies device 0's default mempool with its release
 * threshold at UINT64_MAX, so that cudaFreeAsync keeps the memory for the
 * next cudaMallocAsync (the pool's best case).
 */
static void cudart_load(struct cuda_rt *rt)
{
    struct bench_cudart *api = &rt->api;
    uint64_t threshold = UINT64_MAX;
    cudaError_t e;

    if (bench_cudart_load(api, rt->why, sizeof(rt->why)))
        return;
    snprintf(rt->lib, sizeof(rt->lib), "%s", api->path);
    if ((e = api->set_device(0)) != cudaSuccess ||
        (e = api->default_pool(&rt->mempool, 0)) != cudaSuccess ||
        (e = api->pool_set_attr(rt->mempool, cudaMemPoolAttrReleaseThreshold,
                                &threshold)) != cudaSuccess) {
        snprintf(rt->why, sizeof(rt->why), "%s: %s", rt->lib,
                 api->error_string(e));
        return;
    }
    if (api->runtime_version(&rt->version) != cudaSuccess)
        rt->version = 0;
    rt->handle = api->lib;
}

/* Gives the mempool's memory back to the device (the threshold keeps it). */
static void cudart_trim(struct cuda_rt *rt)
{
    if (rt->handle)
        rt->api.pool_trim(rt->mempool, 0);
}

/*
 * Loads the driver with device 0's primary context current on this thread
 * (the one the pool and the runtime use too) and the properties of a plain
 * pinned device allocation. raw_vmm_unload releases the context.
 */
static void raw_vmm_load(struct raw_vmm *v)
{
    struct bench_cu *cu = &v->cu;
    CUresult r;

    if (bench_cu_load(cu, BENCH_CU_VMM, v->why, sizeof(v->why)))
        return;
    memset(&v->prop, 0, sizeof(v->prop));
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = cu->dev;
    memset(&v->access, 0, sizeof(v->access));
    v->access.location = v->prop.location;
    v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = cu->granularity(&v->gran, &v->prop,
                             CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
        CUDA_SUCCESS) {
        snprintf(v->why, sizeof(v->why), "cuMemGetAllocationGranularity: %s",
                 bench_cu_err(cu, r));
        bench_cu_unload(cu);
        return;
    }
    v->handle = cu->lib;
}

static void raw_vmm_unload(struct raw_vmm *v)
{
    bench_cu_unload(&v->cu);
}

/*
 * The raw driver sequence behind one cold allocation of size bytes (rounded
 * to the granularity): cuMemCreate + cuMemMap + cuMemSetAccess on a range
 * reserved beforehand, timed like ump's cold allocation, then unmapped and
 * released. Writes the median and the bytes; 0 or -EIO with why set.
 */
static int raw_vmm_cold(struct raw_vmm *v, size_t size, double *med_ns_p,
                        size_t *bytes_p)
{
    size_t bytes = (size + v->gran - 1) / v->gran * v->gran;
    double ns[COLD_REPEATS];
    const char *what = "cuMemAddressReserve";
    CUdeviceptr va;
    CUresult r;
    int i;

    r = v->cu.reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        goto fail;
    for (i = 0; i < COLD_REPEATS; i++) {
        CUmemGenericAllocationHandle h;
        uint64_t t0 = now_ns(), t1;

        if ((r = v->cu.create(&h, bytes, &v->prop, 0)) != CUDA_SUCCESS) {
            what = "cuMemCreate";
            break;
        }
        if ((r = v->cu.map(va, bytes, 0, h, 0)) != CUDA_SUCCESS) {
            what = "cuMemMap";
            v->cu.release(h);
            break;
        }
        if ((r = v->cu.set_access(va, bytes, &v->access, 1)) != CUDA_SUCCESS)
            what = "cuMemSetAccess";
        t1 = now_ns();
        ns[i] = (double)(t1 - t0);
        v->cu.unmap(va, bytes);
        v->cu.release(h);
        if (r != CUDA_SUCCESS)
            break;
    }
    v->cu.unreserve(va, bytes);
    if (r != CUDA_SUCCESS)
        goto fail;
    *med_ns_p = median(ns, COLD_REPEATS);
    *bytes_p = bytes;
    return 0;
fail:
    snprintf(v->why, sizeof(v->why), "%s of %zu bytes: %s", what, bytes,
             bench_cu_err(&v->cu, r));
    return -EIO;
}
#endif /* BENCH_CUDART */

/* The H200's granularity (DESIGN.md), the handle size the raw sequence
 * rounds to on the modeled driver. */
#define MODEL_GRAN (2 * MiB)

/*
 * The raw sequence on the timed sim: what the modeled H200 charges for one
 * cold allocation of size bytes made straight on the driver, one handle of
 * the size rounded up to the granularity, created, mapped and given device
 * access, each call waiting for its cost as the sim's own calls do
 * (drvpace.h). The physical limit of a cold allocation on that driver:
 * nothing an allocator does can make fewer calls. The median of
 * COLD_REPEATS, like the pool's.
 */
static void raw_model_cold(const struct raw_vmm *v, size_t size,
                           double *med_ns_p, size_t *bytes_p)
{
    size_t bytes = (size + v->gran - 1) / v->gran * v->gran;
    double ns[COLD_REPEATS];

    for (int i = 0; i < COLD_REPEATS; i++) {
        struct drv_pace p = {.scale = v->pace};
        uint64_t t0 = now_ns();

        pace_create(&p, bytes);
        pace_map(&p, bytes);
        pace_access(&p, 1, bytes);
        ns[i] = (double)(now_ns() - t0);
    }
    *med_ns_p = median(ns, COLD_REPEATS);
    *bytes_p = bytes;
}

/*
 * The CUDA baselines, when the pool runs on cuda: the runtime for the
 * cudaMalloc columns, the driver for the raw cold column. What cannot be
 * loaded shows as n/a with the reason. On the timed sim the raw cold
 * column is the modeled driver's (raw_model_cold).
 */
static void cuda_load(struct bench_ctx *ctx, const char *config)
{
    const char *be = ump_backend_name(ctx->pool);

    ctx->cuda_cols = be && !strcmp(be, "cuda");
    ctx->nkinds = ctx->cuda_cols ? A_COUNT : A_HOST_COUNT;
    if (!ctx->cuda_cols) {
        ctx->vmm.pace = offload_pace(config, be);
        ctx->vmm.gran = MODEL_GRAN;
        snprintf(ctx->vmm.why, sizeof(ctx->vmm.why), "the %s backend has no "
                 "driver VMM%s", be ? be : "pool's",
                 be && !strcmp(be, "sim") ? " (sim_driver_costs:h200-timed "
                 "models one)" : "");
        return;
    }
#ifdef BENCH_CUDART
    cudart_load(&ctx->rt);
    raw_vmm_load(&ctx->vmm);
#else
    snprintf(ctx->rt.why, sizeof(ctx->rt.why), "umpool-bench was built "
             "without cuda.h");
    snprintf(ctx->vmm.why, sizeof(ctx->vmm.why), "umpool-bench was built "
             "without cuda.h");
#endif
}

static void cuda_unload(struct bench_ctx *ctx)
{
#ifdef BENCH_CUDART
    cudart_trim(&ctx->rt);
    raw_vmm_unload(&ctx->vmm);
#else
    (void)ctx;
#endif
}

#ifdef BENCH_CUDART
/* A runtime error as a negative errno; its code goes to *cuda_err_p. */
static int cuda_fail(cudaError_t e, int *cuda_err_p)
{
    *cuda_err_p = (int)e;
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}
#endif


/* ---- timing ------------------------------------------------------------- */

/*
 * Runs n alloc+free pairs; 0 or a negative errno (for the CUDA kinds, with
 * the runtime's error in *cuda_err_p). The pointer goes to a volatile local
 * so that the compiler keeps every call, and stays in this thread's stack so
 * that threads share no cache line. stream: cudaMallocAsync's, per thread.
 */
static int run_pairs(const struct bench_ctx *ctx, enum alloc_kind kind,
                     size_t size, uint64_t n, void *stream, int *cuda_err_p)
{
    void *volatile sink = NULL;

    switch (kind) {
    case A_UMP:
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            int rc = ump_alloc(ctx->pool, size, NULL, &p);

            if (rc)
                return rc;
            sink = p;
            rc = ump_free(ctx->pool, p);
            if (rc)
                return rc;
        }
        break;
    case A_MALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p = malloc(size);

            if (!p)
                return -ENOMEM;
            sink = p;
            free(p);
        }
        break;
    case A_JEMALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p = ctx->je_mallocx(size, 0);

            if (!p)
                return -ENOMEM;
            sink = p;
            ctx->je_dallocx(p, 0);
        }
        break;
#ifdef BENCH_CUDART
    case A_CUDA_MALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            cudaError_t e = ctx->rt.api.malloc_fn(&p, size);

            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
            sink = p;
            e = ctx->rt.api.free_fn(p);
            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
        }
        break;
    case A_CUDA_ASYNC:
        /* Same stream: the pool hands the block back at once, without
         * waiting for the GPU (nothing runs on the stream). */
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            cudaError_t e = ctx->rt.api.malloc_async(&p, size, stream);

            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
            sink = p;
            e = ctx->rt.api.free_async(p, stream);
            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
        }
        break;
#endif
    default:
        (void)stream;
        (void)cuda_err_p;
        return -EINVAL;
    }
    (void)sink;
    return 0;
}

/* The workers of one cell wait at this gate so that all start together. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;
    bool open;
};

struct worker {
    const struct bench_ctx *ctx;
    struct gate *gate;
    enum alloc_kind kind;
    size_t size;
    uint64_t pairs;
    uint64_t batch;   /* pairs per batch */
    double *batch_ns; /* ns per pair of each batch; the worker allocates it */
    size_t nbatches;
    uint64_t done;
    uint64_t t_start, t_end;
    int err;
    void *stream; /* A_CUDA_ASYNC: this thread's stream */
    int cuda_err; /* the runtime's error behind err, or 0 */
};

/*
 * Warms up (the first calls fill the caches under test) and picks the batch
 * size: BATCH_PAIRS, fewer when a pair is so slow that a batch would last
 * over BATCH_MAX_NS (the clock's cost is then negligible anyway, and the
 * cell's time limit is checked often enough).
 */
static int warm_up(struct worker *w)
{
    uint64_t t0 = now_ns(), t1 = t0, deadline = t0 + WARMUP_MAX_NS;
    uint64_t n = 0, per_pair;
    int rc;

    while (n < WARMUP_PAIRS && t1 < deadline) {
        rc = run_pairs(w->ctx, w->kind, w->size, 1, w->stream, &w->cuda_err);
        if (rc)
            return rc;
        /* The first pair fills caches: not a sample of the steady state. */
        if (n++ == 0)
            t0 = now_ns();
        t1 = now_ns();
    }
    per_pair = n > 1 ? (t1 - t0) / (n - 1) : t1 - t0;
    w->batch = BATCH_PAIRS;
    if (per_pair * BATCH_PAIRS > BATCH_MAX_NS)
        w->batch = per_pair < BATCH_MAX_NS ? BATCH_MAX_NS / per_pair : 1;
    return 0;
}

/* Each cudaMallocAsync thread gets its own stream, as a real one would. */
static int stream_open(struct worker *w)
{
#ifdef BENCH_CUDART
    if (w->kind == A_CUDA_ASYNC) {
        cudaStream_t s;
        cudaError_t e =
            w->ctx->rt.api.stream_create(&s, cudaStreamNonBlocking);

        if (e != cudaSuccess)
            return cuda_fail(e, &w->cuda_err);
        w->stream = s;
    }
#else
    (void)w;
#endif
    return 0;
}

static void stream_close(struct worker *w)
{
#ifdef BENCH_CUDART
    if (w->stream) {
        w->ctx->rt.api.stream_sync(w->stream);
        w->ctx->rt.api.stream_destroy(w->stream);
        w->stream = NULL;
    }
#else
    (void)w;
#endif
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t left = w->pairs, deadline;
    size_t nb = 0;

    w->err = stream_open(w);
    if (!w->err)
        w->err = warm_up(w);
    if (!w->err) {
        w->batch_ns = malloc((size_t)((w->pairs + w->batch - 1) / w->batch) *
                             sizeof(*w->batch_ns));
        if (!w->batch_ns)
            w->err = -ENOMEM;
    }
    pthread_mutex_lock(&w->gate->lock);
    w->gate->ready++;
    pthread_cond_broadcast(&w->gate->cond);
    while (!w->gate->open)
        pthread_cond_wait(&w->gate->cond, &w->gate->lock);
    pthread_mutex_unlock(&w->gate->lock);

    w->t_start = now_ns();
    deadline = w->t_start + CELL_MAX_NS;
    while (!w->err && left) {
        uint64_t n = left < w->batch ? left : w->batch;
        uint64_t b0 = now_ns();
        int rc = run_pairs(w->ctx, w->kind, w->size, n, w->stream,
                           &w->cuda_err);
        uint64_t b1 = now_ns();

        if (rc) {
            w->err = rc;
            break;
        }
        w->batch_ns[nb++] = (double)(b1 - b0) / (double)n;
        left -= n;
        if (b1 >= deadline)
            break;
    }
    w->t_end = now_ns();
    stream_close(w);
    w->nbatches = nb;
    w->done = w->pairs - left;
    return NULL;
}

static int gate_init(struct gate *g)
{
    int rc = pthread_mutex_init(&g->lock, NULL);

    if (rc)
        return -rc;
    rc = pthread_cond_init(&g->cond, NULL);
    if (rc) {
        pthread_mutex_destroy(&g->lock);
        return -rc;
    }
    g->ready = 0;
    g->open = false;
    return 0;
}

static void gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

/* Waits for the started workers to warm up, then lets them all go. */
static void gate_open(struct gate *g, int started)
{
    pthread_mutex_lock(&g->lock);
    while (g->ready < started)
        pthread_cond_wait(&g->cond, &g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* One allocator, one size, nthreads threads; fills *c. 0 or negative errno,
 * with the CUDA runtime's error in *cuda_err_p when it came from there. */
static int run_cell(const struct bench_ctx *ctx, enum alloc_kind kind,
                    size_t size, int nthreads, uint64_t pairs, struct cell *c,
                    int *cuda_err_p)
{
    struct worker *w;
    pthread_t *tid;
    double *all = NULL;
    struct gate gate;
    uint64_t t0 = UINT64_MAX, t1 = 0, done = 0, batch = BATCH_PAIRS;
    size_t nb = 0;
    int started = 0, rc;

    w = calloc((size_t)nthreads, sizeof(*w));
    tid = calloc((size_t)nthreads, sizeof(*tid));
    if (!w || !tid) {
        rc = -ENOMEM;
        goto out_free;
    }
    rc = gate_init(&gate);
    if (rc)
        goto out_free;
    for (int i = 0; i < nthreads; i++) {
        w[i] = (struct worker){.ctx = ctx, .gate = &gate, .kind = kind,
                               .size = size, .pairs = pairs};
        rc = pthread_create(&tid[i], NULL, worker_main, &w[i]);
        if (rc) {
            rc = -rc;
            break;
        }
        started++;
    }
    gate_open(&gate, started);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    gate_destroy(&gate);
    for (int i = 0; !rc && i < started; i++) {
        rc = w[i].err;
        *cuda_err_p = w[i].cuda_err;
        nb += w[i].nbatches;
    }
    if (rc)
        goto out_free;

    /* All threads' batches in one array, so that one sort covers them. */
    all = malloc(nb * sizeof(*all));
    if (!all) {
        rc = -ENOMEM;
        goto out_free;
    }
    nb = 0;
    for (int i = 0; i < nthreads; i++) {
        memcpy(all + nb, w[i].batch_ns, w[i].nbatches * sizeof(*all));
        nb += w[i].nbatches;
        done += w[i].done;
        t0 = w[i].t_start < t0 ? w[i].t_start : t0;
        t1 = w[i].t_end > t1 ? w[i].t_end : t1;
        batch = w[i].batch < batch ? w[i].batch : batch;
    }
    c->valid = true;
    c->med_ns = median(all, nb);
    /* Nearest rank: the smallest batch time at or above 99 % of batches. */
    c->p99_ns = all[(nb * 99 + 99) / 100 - 1];
    c->mpairs_s = t1 > t0 ? (double)done * 1e3 / (double)(t1 - t0) : 0;
    c->pairs = done;
    c->batches = nb;
    c->batch_pairs = batch;
    c->capped = done < pairs * (uint64_t)nthreads;
    rc = 0;
out_free:
    free(all);
    for (int i = 0; w && i < started; i++)
        free(w[i].batch_ns);
    free(tid);
    free(w);
    return rc;
}

/* ---- the scenario ------------------------------------------------------- */


/*
 * The first allocation of size with nothing cached: ump_trim, then one
 * ump_alloc timed; the median of COLD_REPEATS. 0 or a negative errno.
 */
static int ump_cold(ump_pool_t *pool, size_t size, double *med_ns_p,
                    double *drv_ns_p)
{
    double ns[COLD_REPEATS], drv[COLD_REPEATS];

    for (int i = 0; i < COLD_REPEATS; i++) {
        uint64_t t0, t1;
        ump_stats_t a, b;
        void *p;
        int rc = ump_trim(pool);

        if (!rc)
            rc = ump_stats(pool, UMP_DEVICE_ALL, &a);
        if (rc)
            return rc;
        t0 = now_ns();
        rc = ump_alloc(pool, size, NULL, &p);
        t1 = now_ns();
        if (!rc)
            rc = ump_stats(pool, UMP_DEVICE_ALL, &b);
        if (rc)
            return rc;
        ns[i] = (double)(t1 - t0);
        drv[i] = (double)(b.driver_ns - a.driver_ns);
        rc = ump_free(pool, p);
        if (rc)
            return rc;
    }
    *med_ns_p = median(ns, COLD_REPEATS);
    *drv_ns_p = median(drv, COLD_REPEATS);
    return 0;
}

/* The text of a cell's failure. */
static const char *cell_error(const struct bench_ctx *ctx, int kind, int rc,
                              int cuda_err)
{
    if (kind == A_UMP)
        return ump_strerror(rc);
#ifdef BENCH_CUDART
    if (cuda_err)
        return ctx->rt.api.error_string((cudaError_t)cuda_err);
#else
    (void)ctx;
    (void)cuda_err;
#endif
    return strerror(-rc);
}

/* Runs every latency cell; 0, or 1 after printing why ump (or a host
 * allocator) failed. A failing CUDA baseline only leaves its cell n/a. */
static int alloc_cells(const struct bench_opts *o, const struct bench_ctx *ctx,
                       struct alloc_row *rows, const size_t *sizes,
                       int nsizes, int nthr)
{
    char sz[32];

    for (int s = 0; s < nsizes; s++) {
        for (int t = 0; t < nthr; t++) {
            struct alloc_row *row = &rows[s * nthr + t];

            row->size = sizes[s];
            row->threads = t ? o->threads : 1;
            /* The allocators take turns at each size and thread count, so
             * that a noisy moment hurts one cell, not one column. */
            for (int k = 0; k < ctx->nkinds; k++) {
                int cuda_err = 0, rc;

                if (k == A_JEMALLOC && !ctx->je_handle)
                    continue;
                if (k >= A_CUDA_MALLOC && !ctx->rt.handle)
                    continue;
                rc = run_cell(ctx, (enum alloc_kind)k, row->size,
                              row->threads, o->iters, &row->cell[k],
                              &cuda_err);
                if (!rc)
                    continue;
                fprintf(stderr, "umpool-bench: alloc: %s of %s with %d "
                        "thread(s): %s\n", alloc_kind_calls[k],
                        fmt_size(row->size, sz, sizeof(sz)), row->threads,
                        cell_error(ctx, k, rc, cuda_err));
                if (k < A_CUDA_MALLOC)
                    return 1;
                fprintf(stderr, "umpool-bench: alloc: (shown as n/a)\n");
            }
        }
    }
    return 0;
}

/* The cold column of every size; 0, or 1 after printing why ump failed. */
static int alloc_cold(struct bench_ctx *ctx, struct cold_row *cold,
                      const size_t *sizes, int nsizes)
{
    char sz[32];

    for (int s = 0; s < nsizes; s++) {
        struct cold_row *c = &cold[s];
        int rc;

        c->size = sizes[s];
        rc = ump_cold(ctx->pool, c->size, &c->ump_ns, &c->ump_drv_ns);
        c->model_ns = (double)drvcost_create_ns((c->size + 2 * MiB - 1) &
                                                ~(2 * MiB - 1));
        if (rc) {
            fprintf(stderr, "umpool-bench: alloc: cold ump_alloc of %s: %s\n",
                    fmt_size(c->size, sz, sizeof(sz)), ump_strerror(rc));
            return 1;
        }
        c->ump_ok = true;
        if (ctx->vmm.pace) {
            raw_model_cold(&ctx->vmm, c->size, &c->raw_ns, &c->raw_bytes);
            c->raw_ok = true;
        }
#ifdef BENCH_CUDART
        if (ctx->vmm.handle) {
            rc = raw_vmm_cold(&ctx->vmm, c->size, &c->raw_ns, &c->raw_bytes);
            if (rc)
                fprintf(stderr, "umpool-bench: alloc: raw VMM: %s (shown as "
                        "n/a)\n", ctx->vmm.why);
            c->raw_ok = rc == 0;
        }
#endif
    }
    return 0;
}

int bench_alloc(const struct bench_opts *o, char **argv)
{
    const char *config = o->config ? o->config : BENCH_ALLOC_CONFIG;
    int nthr = o->threads > 1 ? 2 : 1;
    int nsizes = o->nsizes, nrows, ret = 1, rc;
    const size_t *sizes = o->sizes;
    struct bench_ctx ctx;
    struct alloc_row *rows = NULL;
    struct cold_row *cold = NULL;

    memset(&ctx, 0, sizeof(ctx));
    jemalloc_load(&ctx, argv);
    rc = ump_pool_create(config, &ctx.pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: ump_pool_create(\"%s\"): %s\n", config,
                ump_strerror(rc));
        goto out_je;
    }
    cuda_load(&ctx, config);
    if (ctx.cuda_cols && !o->sizes_set) {
        sizes = cuda_default_sizes;
        nsizes = (int)(sizeof(cuda_default_sizes) /
                       sizeof(cuda_default_sizes[0]));
    }
    nrows = nsizes * nthr;
    rows = calloc((size_t)nrows, sizeof(*rows));
    cold = calloc((size_t)nsizes, sizeof(*cold));
    if (!rows || !cold) {
        fprintf(stderr, "umpool-bench: out of memory\n");
        goto out_cuda;
    }
    if (alloc_cells(o, &ctx, rows, sizes, nsizes, nthr))
        goto out_cuda;
#ifdef BENCH_CUDART
    /* What the baselines keep cached is the device's again. */
    cudart_trim(&ctx.rt);
#endif
    if (alloc_cold(&ctx, cold, sizes, nsizes))
        goto out_cuda;
    if (o->json)
        alloc_print_json(o, config, &ctx, rows, nrows, cold, nsizes);
    else
        alloc_print_table(o, config, &ctx, rows, nrows, cold, nsizes);
    ret = 0;
out_cuda:
    cuda_unload(&ctx);
    free(cold);
    free(rows);
    rc = ump_pool_destroy(ctx.pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: ump_pool_destroy: %s\n",
                ump_strerror(rc));
        ret = 1;
    }
out_je:
    if (ctx.je_handle)
        dlclose(ctx.je_handle);
    return ret;
}
