/*
 * umpool-bench: timings and a narrated demo, on the public API only.
 *
 *   alloc  alloc+free latency of a cached size: ump_alloc/ump_free next to
 *          glibc malloc/free and jemalloc mallocx/dallocx, 1 and N threads;
 *          on the cuda backend also next to cudaMalloc/cudaFree and
 *          cudaMallocAsync/cudaFreeAsync, and the cold first allocation of
 *          each size next to the raw driver VMM sequence.
 *   demo   a short narrated tour of a simulated 8-GPU node: placement, a
 *          tensor spanning GPUs, stitching, statistics, trim.
 *   placement  each policy on each simulated machine: where a synthetic
 *          multi-GPU workload lands and its modeled bandwidth
 *          (bench_placement.c).
 *   offload  the tiers: spill and restore throughput next to raw copies
 *          and disk I/O of the same run, and an oversubscribed loop
 *          (bench_offload.c).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "umpool.h"

/* The CUDA baselines need the toolkit's headers at build time only: the
 * runtime and the driver are loaded at run time (dlopen), so the tool runs
 * where neither is installed and shows n/a. */
#if defined(HAVE_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>) && __has_include(<cuda_runtime_api.h>)
#define BENCH_CUDA 1
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define EXIT_USAGE 2
#define MAX_SIZES 32
#define MAX_THREADS 256

/* Timing method of the alloc scenario; printed with every result. */
#define BATCH_PAIRS 64
#define WARMUP_PAIRS (4 * BATCH_PAIRS)
#define WARMUP_MAX_NS 50000000ull
/* Batches of slow pairs are shortened to about this. */
#define BATCH_MAX_NS 1000000ull
#define DEFAULT_ITERS 200000
/* Slow cells (an allocator that maps on every call) stop early, so that the
 * default run stays short; the pair count actually timed is reported. */
#define CELL_MAX_NS 500000000ull

/* Cold allocations: the median of this many, each after ump_trim. */
#define COLD_REPEATS 7

#define ALLOC_CONFIG "backend:sim,sim_devices:1,sim_device_mem:8G"
#define DEMO_CONFIG "backend:sim,sim_topology:dgx-h200,sim_device_mem:2G"
#define STITCH_CONFIG "backend:sim,sim_devices:1,sim_device_mem:256M"

struct opts {
    bool json;
    const char *config; /* NULL: the scenario's default */
    const char *scenario;
    size_t sizes[MAX_SIZES];
    int nsizes;
    bool sizes_set; /* --sizes given: no backend-dependent default */
    int threads;
    uint64_t iters;
    bool alloc_opts; /* an alloc-only option was given */
    struct bench_offload_opts off;
    bool offload_opts; /* an offload-only option was given */
};

/* ---- small helpers ------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
            "       umpool-bench --help\n"
            "\n"
            "scenarios:\n"
            "  alloc   alloc+free latency of a cached size: ump_alloc/\n"
            "          ump_free, glibc malloc/free and jemalloc mallocx/\n"
            "          dallocx (loaded with dlopen), with 1 and N threads\n"
            "          on the cuda backend also cudaMalloc/cudaFree and\n"
            "          cudaMallocAsync/cudaFreeAsync (libcudart, dlopen), and\n"
            "          the first allocation after ump_trim next to raw\n"
            "          cuMemCreate+cuMemMap+cuMemSetAccess (libcuda, dlopen)\n"
            "    --sizes LIST   comma-separated sizes, K/M/G suffixes\n"
            "                   (default 256,64K,1M,64M; on cuda also 1G)\n"
            "    --threads N    threads of the second run (default 2)\n"
            "    --iters N      timed pairs per thread and cell (default %d)\n"
            "  demo    narrated run over a simulated 8-GPU node\n"
            "  placement  each placement policy on each simulated machine:\n"
            "          a synthetic workload's spread over the devices and its\n"
            "          modeled read bandwidth\n"
            "  offload the host and NVMe tiers: spill and restore throughput\n"
            "          device<->host and host<->NVMe next to raw baselines of\n"
            "          the same run (memcpy on sim, pinned cuMemcpy on cuda;\n"
            "          fio when in PATH, else io_uring with O_DIRECT), and a\n"
            "          loop over offloadable tensors 3x the device budget\n"
            "    --dir DIR      spill directory (default $TMPDIR unless it is\n"
            "                   tmpfs, else /var/tmp)\n"
            "    --size BYTES   bytes per transfer, a multiple of 1M, min 4M\n"
            "                   (default 256M; 1G with backend:cuda)\n"
            "    --budget BYTES the loop's device budget (default --size / 2,\n"
            "                   min 8M)\n"
            "    --reps N       repetitions; medians are shown (default 5)\n"
            "\n"
            "options:\n"
            "  --json         one JSON object on stdout instead of text\n"
            "  --config STR   pool configuration \"key:value,...\"\n"
            "                 (alloc: \"%s\",\n"
            "                  demo: \"%s\";\n"
            "                  offload: appended to its own keys)\n"
            "  --help         this text\n"
            "\n"
            "exit status: 0 ok, 1 failure, 2 usage error\n",
            DEFAULT_ITERS, ALLOC_CONFIG, DEMO_CONFIG);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    fputs("usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
          "scenarios: alloc, demo, placement, offload; see umpool-bench "
          "--help\n",
          stderr);
}

/* Parses a decimal count; false on junk, sign, or overflow. */
static bool parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *v_p = v;
    return true;
}

/* Parses "256", "64K", "1M", "2GiB" (binary units). */
static bool parse_size(const char *s, size_t *size_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return false;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v == 0 || v > (SIZE_MAX >> shift))
        return false;
    *size_p = (size_t)v << shift;
    return true;
}

static bool parse_sizes(const char *list, struct opts *o)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    if (strlen(list) >= sizeof(buf))
        return false;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_SIZES || !parse_size(tok, &o->sizes[n]))
            return false;
        n++;
    }
    if (n == 0)
        return false;
    o->nsizes = n;
    return true;
}

/* One of offload's options into off; 0, or -EINVAL after printing why. */
static int parse_offload_opt(const char *name, const char *val,
                             struct bench_offload_opts *off)
{
    if (!strcmp(name, "--dir")) {
        /* ',' would end the value inside the pool's config string. */
        if (!*val || strchr(val, ',')) {
            usage_error("bad --dir '%s' (a directory, without ',')", val);
            return -EINVAL;
        }
        off->dir = val;
    } else if (!strcmp(name, "--size")) {
        if (!parse_size(val, &off->size) ||
            off->size < BENCH_OFFLOAD_MIN_SIZE || off->size % MiB) {
            usage_error("bad --size '%s' (a multiple of 1M, at least %zuM)",
                        val, BENCH_OFFLOAD_MIN_SIZE / MiB);
            return -EINVAL;
        }
    } else if (!strcmp(name, "--budget")) {
        if (!parse_size(val, &off->budget) ||
            off->budget < BENCH_OFFLOAD_MIN_BUDGET) {
            usage_error("bad --budget '%s' (at least %zuM)", val,
                        BENCH_OFFLOAD_MIN_BUDGET / MiB);
            return -EINVAL;
        }
    } else {
        uint64_t v;

        if (!parse_u64(val, &v) || v < 1 || v > BENCH_OFFLOAD_MAX_REPS) {
            usage_error("bad --reps '%s' (1..%d)", val,
                        BENCH_OFFLOAD_MAX_REPS);
            return -EINVAL;
        }
        off->reps = (int)v;
    }
    return 0;
}

/* 0 on success, EXIT_USAGE after printing why, -1 after --help. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    static const size_t default_sizes[] = {256, 64 * KiB, 1 * MiB, 64 * MiB};

    memset(o, 0, sizeof(*o));
    o->threads = 2;
    o->iters = DEFAULT_ITERS;
    o->nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
    memcpy(o->sizes, default_sizes, sizeof(default_sizes));

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        bool takes_value;

        if (a[0] != '-' || a[1] == '\0') {
            if (o->scenario) {
                usage_error("unexpected argument '%s'", a);
                return EXIT_USAGE;
            }
            o->scenario = a;
            continue;
        }
        /* "--opt=value" and "--opt value" both work. */
        if (eq && (size_t)(eq - a) < sizeof(name)) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a);
        }
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(name, "--json")) {
            if (val) {
                usage_error("--json takes no value");
                return EXIT_USAGE;
            }
            o->json = true;
            continue;
        }
        takes_value = !strcmp(name, "--config") || !strcmp(name, "--sizes") ||
                      !strcmp(name, "--threads") || !strcmp(name, "--iters") ||
                      !strcmp(name, "--dir") || !strcmp(name, "--size") ||
                      !strcmp(name, "--budget") || !strcmp(name, "--reps");
        if (!takes_value) {
            usage_error("unknown option '%s'", a);
            return EXIT_USAGE;
        }
        if (!val) {
            if (i + 1 >= argc) {
                usage_error("%s needs a value", name);
                return EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (!strcmp(name, "--config")) {
            o->config = val;
        } else if (!strcmp(name, "--dir") || !strcmp(name, "--size") ||
                   !strcmp(name, "--budget") || !strcmp(name, "--reps")) {
            if (parse_offload_opt(name, val, &o->off))
                return EXIT_USAGE;
            o->offload_opts = true;
        } else if (!strcmp(name, "--sizes")) {
            if (!parse_sizes(val, o)) {
                usage_error("bad --sizes '%s' (sizes > 0 like 256,64K,1M, "
                            "at most %d)", val, MAX_SIZES);
                return EXIT_USAGE;
            }
            o->sizes_set = true;
            o->alloc_opts = true;
        } else if (!strcmp(name, "--threads")) {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > MAX_THREADS) {
                usage_error("bad --threads '%s' (1..%d)", val, MAX_THREADS);
                return EXIT_USAGE;
            }
            o->threads = (int)v;
            o->alloc_opts = true;
        } else {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > (1ull << 32)) {
                usage_error("bad --iters '%s' (1..%llu)", val, 1ull << 32);
                return EXIT_USAGE;
            }
            o->iters = v;
            o->alloc_opts = true;
        }
    }
    if (!o->scenario) {
        usage_error("no scenario given");
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- alloc: the allocators ---------------------------------------------- */

/* The CUDA kinds run only when the pool's backend is cuda. */
enum alloc_kind {
    A_UMP,
    A_MALLOC,
    A_JEMALLOC,
    A_CUDA_MALLOC,
    A_CUDA_ASYNC,
    A_COUNT
};
#define A_HOST_COUNT (A_JEMALLOC + 1)
static const char *const kind_name[A_COUNT] = {
    "ump", "malloc", "jemalloc", "cuda_malloc", "cuda_malloc_async"};
static const char *const kind_calls[A_COUNT] = {
    "ump_alloc/ump_free", "malloc/free", "mallocx/dallocx",
    "cudaMalloc/cudaFree", "cudaMallocAsync/cudaFreeAsync"};

typedef void *(*mallocx_fn)(size_t size, int flags);
typedef void (*dallocx_fn)(void *ptr, int flags);

/* The CUDA runtime, for the cudaMalloc and cudaMallocAsync baselines. */
struct cuda_rt {
    void *handle; /* NULL: not available, see why */
    char lib[512];
    char why[1024];
    int version;
#ifdef BENCH_CUDA
    cudaError_t (*malloc_fn)(void **ptr, size_t size);
    cudaError_t (*free_fn)(void *ptr);
    cudaError_t (*malloc_async)(void **ptr, size_t size, cudaStream_t s);
    cudaError_t (*free_async)(void *ptr, cudaStream_t s);
    cudaError_t (*stream_create)(cudaStream_t *s, unsigned int flags);
    cudaError_t (*stream_sync)(cudaStream_t s);
    cudaError_t (*stream_destroy)(cudaStream_t s);
    cudaError_t (*set_device)(int device);
    cudaError_t (*default_pool)(cudaMemPool_t *pool, int device);
    cudaError_t (*pool_set_attr)(cudaMemPool_t pool, enum cudaMemPoolAttr a,
                                 void *value);
    cudaError_t (*pool_trim)(cudaMemPool_t pool, size_t keep);
    cudaError_t (*runtime_version)(int *version);
    const char *(*error_string)(cudaError_t err);
    cudaMemPool_t mempool;
#endif
};

/* The driver's VMM calls, for the raw cold column. */
struct raw_vmm {
    void *handle; /* NULL: not available, see why */
    char why[1024];
    size_t gran; /* minimum granularity of device 0 */
#ifdef BENCH_CUDA
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*ctx_retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*ctx_release)(CUdevice dev);
    CUresult (*ctx_set_current)(CUcontext ctx);
    CUresult (*granularity)(size_t *gran, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags flags);
    CUresult (*reserve)(CUdeviceptr *va, size_t size, size_t align,
                        CUdeviceptr addr, unsigned long long flags);
    CUresult (*unreserve)(CUdeviceptr va, size_t size);
    CUresult (*create)(CUmemGenericAllocationHandle *h, size_t size,
                       const CUmemAllocationProp *prop,
                       unsigned long long flags);
    CUresult (*map)(CUdeviceptr va, size_t size, size_t offset,
                    CUmemGenericAllocationHandle h, unsigned long long flags);
    CUresult (*set_access)(CUdeviceptr va, size_t size,
                           const CUmemAccessDesc *desc, size_t count);
    CUresult (*unmap)(CUdeviceptr va, size_t size);
    CUresult (*release)(CUmemGenericAllocationHandle h);
    CUresult (*error_name)(CUresult err, const char **name);
    CUdevice dev;
    bool retained; /* holds device 0's primary context */
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
#endif
};

struct bench_ctx {
    ump_pool_t *pool;
    void *je_handle; /* NULL: jemalloc not available, see je_why */
    mallocx_fn je_mallocx;
    dallocx_fn je_dallocx;
    char je_why[512];
    bool cuda_cols; /* the pool runs on cuda: CUDA baselines shown */
    int nkinds;     /* A_HOST_COUNT, or A_COUNT with cuda_cols */
    struct cuda_rt rt;
    struct raw_vmm vmm;
};

#define REEXEC_ENV "UMPOOL_BENCH_STATIC_TLS"
#define TLS_TUNABLE "glibc.rtld.optional_static_tls=65536"

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

/* ---- alloc: CUDA baselines, loaded at run time -------------------------- */

#ifdef BENCH_CUDA
/* A function pointer of a struct, filled by name. */
struct sym {
    const char *name;
    size_t off;
};

typedef void *(*lookup_fn)(void *arg, const char *name);

/* Fills obj's function pointers listed in syms; NULL, or the name that was
 * not found. memcpy: POSIX makes data and function pointers the same size,
 * and this keeps the compiler from seeing a cast between them. */
static const char *load_syms(void *obj, const struct sym *syms, size_t n,
                             lookup_fn lookup, void *arg)
{
    for (size_t i = 0; i < n; i++) {
        void *fn = lookup(arg, syms[i].name);

        if (!fn)
            return syms[i].name;
        memcpy((char *)obj + syms[i].off, &fn, sizeof(fn));
    }
    return NULL;
}

static void *dlsym_lookup(void *handle, const char *name)
{
    return dlsym(handle, name);
}

#define RT_SYM(name, field) {name, offsetof(struct cuda_rt, field)}
static const struct sym cudart_syms[] = {
    RT_SYM("cudaMalloc", malloc_fn),
    RT_SYM("cudaFree", free_fn),
    RT_SYM("cudaMallocAsync", malloc_async),
    RT_SYM("cudaFreeAsync", free_async),
    RT_SYM("cudaStreamCreateWithFlags", stream_create),
    RT_SYM("cudaStreamSynchronize", stream_sync),
    RT_SYM("cudaStreamDestroy", stream_destroy),
    RT_SYM("cudaSetDevice", set_device),
    RT_SYM("cudaDeviceGetDefaultMemPool", default_pool),
    RT_SYM("cudaMemPoolSetAttribute", pool_set_attr),
    RT_SYM("cudaMemPoolTrimTo", pool_trim),
    RT_SYM("cudaRuntimeGetVersion", runtime_version),
    RT_SYM("cudaGetErrorString", error_string),
};
#undef RT_SYM

/* The runtime's sonames on the loader's path, then in the toolkit's
 * directory, which the path often lacks. */
static void *cudart_open(char *lib, size_t len)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so"};
    const char *dirs[] = {NULL, getenv("CUDA_HOME"), "/usr/local/cuda"};

    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
        if (d > 0 && (!dirs[d] || !*dirs[d]))
            continue;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            char path[512];
            void *h;

            if (d == 0)
                snprintf(path, sizeof(path), "%s", names[i]);
            else
                snprintf(path, sizeof(path), "%s/lib64/%s", dirs[d],
                         names[i]);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) {
                snprintf(lib, len, "%s", path);
                return h;
            }
        }
    }
    return NULL;
}

/*
 * Loads the runtime and readies device 0's default mempool with its release
 * threshold at UINT64_MAX, so that cudaFreeAsync keeps the memory for the
 * next cudaMallocAsync (the pool's best case). The library stays loaded:
 * the runtime tears itself down at exit.
 */
static void cudart_load(struct cuda_rt *rt)
{
    uint64_t threshold = UINT64_MAX;
    const char *missing;
    cudaError_t e;
    void *h = cudart_open(rt->lib, sizeof(rt->lib));

    if (!h) {
        snprintf(rt->why, sizeof(rt->why), "no libcudart.so.13, .so.12 or "
                 ".so could be loaded");
        return;
    }
    missing = load_syms(rt, cudart_syms,
                        sizeof(cudart_syms) / sizeof(cudart_syms[0]),
                        dlsym_lookup, h);
    if (missing) {
        snprintf(rt->why, sizeof(rt->why), "%s has no %s", rt->lib, missing);
        return;
    }
    if ((e = rt->set_device(0)) != cudaSuccess ||
        (e = rt->default_pool(&rt->mempool, 0)) != cudaSuccess ||
        (e = rt->pool_set_attr(rt->mempool, cudaMemPoolAttrReleaseThreshold,
                               &threshold)) != cudaSuccess) {
        snprintf(rt->why, sizeof(rt->why), "%s: %s", rt->lib,
                 rt->error_string(e));
        return;
    }
    if (rt->runtime_version(&rt->version) != cudaSuccess)
        rt->version = 0;
    rt->handle = h;
}

/* Gives the mempool's memory back to the device (the threshold keeps it). */
static void cudart_trim(struct cuda_rt *rt)
{
    if (rt->handle)
        rt->pool_trim(rt->mempool, 0);
}

typedef CUresult (*getproc_v2_fn)(const char *symbol, void **fn, int version,
                                  cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status);
typedef CUresult (*getproc_v1_fn)(const char *symbol, void **fn, int version,
                                  cuuint64_t flags);

struct getproc {
    getproc_v2_fn v2;
    getproc_v1_fn v1;
};

/* The VMM entry points as of CUDA 12.0: none has changed since, and older
 * 12.x drivers know that version. */
#define VMM_API_VERSION 12000

static void *driver_lookup(void *arg, const char *name)
{
    const struct getproc *gp = arg;
    CUdriverProcAddressQueryResult status;
    void *fn = NULL;
    CUresult r;

    if (gp->v2)
        r = gp->v2(name, &fn, VMM_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
                   &status);
    else
        r = gp->v1(name, &fn, VMM_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
    return r == CUDA_SUCCESS ? fn : NULL;
}

#define VMM_SYM(name, field) {name, offsetof(struct raw_vmm, field)}
static const struct sym vmm_syms[] = {
    VMM_SYM("cuGetErrorName", error_name),
    VMM_SYM("cuInit", init),
    VMM_SYM("cuDeviceGet", device_get),
    VMM_SYM("cuDevicePrimaryCtxRetain", ctx_retain),
    VMM_SYM("cuDevicePrimaryCtxRelease", ctx_release),
    VMM_SYM("cuCtxSetCurrent", ctx_set_current),
    VMM_SYM("cuMemGetAllocationGranularity", granularity),
    VMM_SYM("cuMemAddressReserve", reserve),
    VMM_SYM("cuMemAddressFree", unreserve),
    VMM_SYM("cuMemCreate", create),
    VMM_SYM("cuMemMap", map),
    VMM_SYM("cuMemSetAccess", set_access),
    VMM_SYM("cuMemUnmap", unmap),
    VMM_SYM("cuMemRelease", release),
};
#undef VMM_SYM

static const char *vmm_err(const struct raw_vmm *v, CUresult r)
{
    const char *name = NULL;

    if (v->error_name && v->error_name(r, &name) == CUDA_SUCCESS && name)
        return name;
    return "unknown CUDA error";
}

/*
 * Loads the driver (dlopen libcuda.so.1, entry points by cuGetProcAddress)
 * and readies device 0: its primary context current on this thread (the one
 * the pool and the runtime use too) and the properties of a plain pinned
 * device allocation. The library stays loaded; raw_vmm_unload releases the
 * context.
 */
static void raw_vmm_load(struct raw_vmm *v)
{
    struct getproc gp;
    const char *missing, *what;
    CUcontext cuctx;
    CUresult r;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        snprintf(v->why, sizeof(v->why), "libcuda.so.1 could not be loaded");
        return;
    }
    gp.v2 = (getproc_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    gp.v1 = (getproc_v1_fn)dlsym(h, "cuGetProcAddress");
    if (!gp.v2 && !gp.v1) {
        snprintf(v->why, sizeof(v->why), "libcuda.so.1 has no "
                 "cuGetProcAddress (driver too old)");
        return;
    }
    missing = load_syms(v, vmm_syms, sizeof(vmm_syms) / sizeof(vmm_syms[0]),
                        driver_lookup, &gp);
    if (missing) {
        snprintf(v->why, sizeof(v->why), "libcuda.so.1 has no %s", missing);
        v->error_name = NULL;
        return;
    }
    if ((r = v->init(0)) != CUDA_SUCCESS) {
        what = "cuInit";
        goto fail;
    }
    if ((r = v->device_get(&v->dev, 0)) != CUDA_SUCCESS) {
        what = "cuDeviceGet";
        goto fail;
    }
    if ((r = v->ctx_retain(&cuctx, v->dev)) != CUDA_SUCCESS) {
        what = "cuDevicePrimaryCtxRetain";
        goto fail;
    }
    v->retained = true;
    if ((r = v->ctx_set_current(cuctx)) != CUDA_SUCCESS) {
        what = "cuCtxSetCurrent";
        goto fail_ctx;
    }
    memset(&v->prop, 0, sizeof(v->prop));
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = v->dev;
    memset(&v->access, 0, sizeof(v->access));
    v->access.location = v->prop.location;
    v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = v->granularity(&v->gran, &v->prop,
                            CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
        CUDA_SUCCESS) {
        what = "cuMemGetAllocationGranularity";
        goto fail_ctx;
    }
    v->handle = h;
    return;
fail_ctx:
    v->ctx_release(v->dev);
    v->retained = false;
fail:
    snprintf(v->why, sizeof(v->why), "%s: %s", what, vmm_err(v, r));
}

static void raw_vmm_unload(struct raw_vmm *v)
{
    if (v->retained)
        v->ctx_release(v->dev);
    v->retained = false;
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

    r = v->reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        goto fail;
    for (i = 0; i < COLD_REPEATS; i++) {
        CUmemGenericAllocationHandle h;
        uint64_t t0 = now_ns(), t1;

        if ((r = v->create(&h, bytes, &v->prop, 0)) != CUDA_SUCCESS) {
            what = "cuMemCreate";
            break;
        }
        if ((r = v->map(va, bytes, 0, h, 0)) != CUDA_SUCCESS) {
            what = "cuMemMap";
            v->release(h);
            break;
        }
        if ((r = v->set_access(va, bytes, &v->access, 1)) != CUDA_SUCCESS)
            what = "cuMemSetAccess";
        t1 = now_ns();
        ns[i] = (double)(t1 - t0);
        v->unmap(va, bytes);
        v->release(h);
        if (r != CUDA_SUCCESS)
            break;
    }
    v->unreserve(va, bytes);
    if (r != CUDA_SUCCESS)
        goto fail;
    *med_ns_p = median(ns, COLD_REPEATS);
    *bytes_p = bytes;
    return 0;
fail:
    snprintf(v->why, sizeof(v->why), "%s of %zu bytes: %s", what, bytes,
             vmm_err(v, r));
    return -EIO;
}
#endif /* BENCH_CUDA */

/*
 * The CUDA baselines, when the pool runs on cuda: the runtime for the
 * cudaMalloc columns, the driver for the raw cold column. What cannot be
 * loaded shows as n/a with the reason.
 */
static void cuda_load(struct bench_ctx *ctx)
{
    const char *be = ump_backend_name(ctx->pool);

    ctx->cuda_cols = be && !strcmp(be, "cuda");
    ctx->nkinds = ctx->cuda_cols ? A_COUNT : A_HOST_COUNT;
    if (!ctx->cuda_cols) {
        snprintf(ctx->vmm.why, sizeof(ctx->vmm.why), "the %s backend has no "
                 "driver VMM", be ? be : "pool's");
        return;
    }
#ifdef BENCH_CUDA
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
#ifdef BENCH_CUDA
    cudart_trim(&ctx->rt);
    raw_vmm_unload(&ctx->vmm);
#else
    (void)ctx;
#endif
}

#ifdef BENCH_CUDA
/* A runtime error as a negative errno; its code goes to *cuda_err_p. */
static int cuda_fail(cudaError_t e, int *cuda_err_p)
{
    *cuda_err_p = (int)e;
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}
#endif

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
#ifdef BENCH_CUDA
    case A_CUDA_MALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            cudaError_t e = ctx->rt.malloc_fn(&p, size);

            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
            sink = p;
            e = ctx->rt.free_fn(p);
            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
        }
        break;
    case A_CUDA_ASYNC:
        /* Same stream: the pool hands the block back at once, without
         * waiting for the GPU (nothing runs on the stream). */
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            cudaError_t e = ctx->rt.malloc_async(&p, size, stream);

            if (e != cudaSuccess)
                return cuda_fail(e, cuda_err_p);
            sink = p;
            e = ctx->rt.free_async(p, stream);
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
#ifdef BENCH_CUDA
    if (w->kind == A_CUDA_ASYNC) {
        cudaStream_t s;
        cudaError_t e =
            w->ctx->rt.stream_create(&s, cudaStreamNonBlocking);

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
#ifdef BENCH_CUDA
    if (w->stream) {
        w->ctx->rt.stream_sync(w->stream);
        w->ctx->rt.stream_destroy(w->stream);
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

struct cell {
    bool valid;
    double med_ns, p99_ns;
    double mpairs_s; /* all threads together */
    uint64_t pairs;  /* timed, all threads together */
    size_t batches;
    uint64_t batch_pairs; /* smallest batch of the cell's threads */
    bool capped;     /* stopped by CELL_MAX_NS before --iters pairs */
};

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

/* ---- alloc: the scenario ------------------------------------------------ */

struct alloc_row {
    size_t size;
    int threads;
    struct cell cell[A_COUNT];
};

/* The first allocation of one size with nothing cached. */
struct cold_row {
    size_t size;
    bool ump_ok, raw_ok;
    double ump_ns, raw_ns; /* medians */
    size_t raw_bytes;      /* the size rounded to the driver's granularity */
};

static const size_t cuda_default_sizes[] = {256, 64 * KiB, 1 * MiB, 64 * MiB,
                                            1024 * MiB};

static void print_num_or_na(double v, bool ok, int width, int prec)
{
    if (ok)
        printf(" %*.*f", width, prec, v);
    else
        printf(" %*s", width, "n/a");
}

/* a's median over b's, or n/a. */
static void print_ratio(const struct cell *a, const struct cell *b, int width)
{
    if (a->valid && b->valid && b->med_ns > 0)
        printf(" %#*.3g", width, a->med_ns / b->med_ns);
    else
        printf(" %*s", width, "n/a");
}

static void json_ratio(double num, double den, bool ok)
{
    if (ok && den > 0)
        printf("%.3g", num / den);
    else
        printf("null");
}

static void json_cell(const struct cell *c, const struct cell *one)
{
    if (!c->valid) {
        printf("null");
        return;
    }
    printf("{\"median_ns\": %.1f, \"p99_ns\": %.1f, \"mpairs_per_s\": %.3f, "
           "\"pairs\": %" PRIu64 ", \"batches\": %zu, \"batch_pairs\": %"
           PRIu64 ", \"capped\": %s",
           c->med_ns, c->p99_ns, c->mpairs_s, c->pairs, c->batches,
           c->batch_pairs, c->capped ? "true" : "false");
    if (one && one->valid && one->mpairs_s > 0)
        printf(", \"scaling\": %.2f", c->mpairs_s / one->mpairs_s);
    printf("}");
}

static void json_reason(const char *why)
{
    printf(", \"reason\": ");
    json_string(stdout, why);
}

static void json_cold(const struct bench_ctx *ctx, const struct cold_row *cold,
                      int ncold)
{
    printf(", \"cold\": {\"repeats\": %d, \"method\": \"ump: ump_trim, then "
           "one ump_alloc timed; raw_vmm: cuMemCreate + cuMemMap + "
           "cuMemSetAccess of the size rounded to the granularity on a "
           "reserved range; medians\", \"raw_vmm\": {\"available\": %s",
           COLD_REPEATS, ctx->vmm.handle ? "true" : "false");
    if (ctx->vmm.handle)
        printf(", \"granularity\": %zu", ctx->vmm.gran);
    else
        json_reason(ctx->vmm.why);
    printf("}, \"results\": [");
    for (int i = 0; i < ncold; i++) {
        const struct cold_row *c = &cold[i];

        printf("%s\n  {\"size\": %zu, \"ump_median_ns\": ", i ? "," : "",
               c->size);
        if (c->ump_ok)
            printf("%.1f", c->ump_ns);
        else
            printf("null");
        printf(", \"raw_vmm_median_ns\": ");
        if (c->raw_ok)
            printf("%.1f, \"raw_vmm_bytes\": %zu", c->raw_ns, c->raw_bytes);
        else
            printf("null, \"raw_vmm_bytes\": null");
        printf(", \"ump_over_raw_vmm\": ");
        json_ratio(c->ump_ns, c->raw_ns, c->ump_ok && c->raw_ok);
        printf("}");
    }
    printf("\n]}");
}

static void alloc_print_json(const struct opts *o, const char *config,
                             const struct bench_ctx *ctx,
                             const struct alloc_row *rows, int nrows,
                             const struct cold_row *cold, int ncold)
{
    printf("{\"scenario\": \"alloc\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, config);
    printf(", \"backend\": ");
    json_string(stdout, ump_backend_name(ctx->pool));
    printf(", \"method\": {\"warmup_pairs\": %d, \"warmup_max_s\": %.2f, "
           "\"batch_pairs\": %d, \"batch_max_s\": %.3f, \"iters\": %" PRIu64
           ", \"cell_max_s\": %.1f, \"clock\": \"CLOCK_MONOTONIC\", "
           "\"stats\": \"median and p99 of ns per pair over batches\"}",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, BATCH_PAIRS,
           (double)BATCH_MAX_NS / 1e9, o->iters, (double)CELL_MAX_NS / 1e9);
    printf(", \"threads\": %d, \"jemalloc\": {\"available\": %s",
           o->threads, ctx->je_handle ? "true" : "false");
    if (!ctx->je_handle) {
        json_reason(ctx->je_why);
    } else if (getenv(REEXEC_ENV)) {
        printf(", \"glibc_tunables\": \"" TLS_TUNABLE "\"");
    }
    printf("}");
    if (ctx->cuda_cols) {
        printf(", \"cuda_runtime\": {\"available\": %s",
               ctx->rt.handle ? "true" : "false");
        if (ctx->rt.handle) {
            printf(", \"library\": ");
            json_string(stdout, ctx->rt.lib);
            printf(", \"version\": %d, \"device\": 0, "
                   "\"mempool_release_threshold\": \"UINT64_MAX\"",
                   ctx->rt.version);
        } else {
            json_reason(ctx->rt.why);
        }
        printf("}");
    }
    printf(", \"results\": [");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct alloc_row *one = row->threads > 1 ? &rows[r - 1] : NULL;
        const struct cell *u = &row->cell[A_UMP];

        printf("%s\n  {\"size\": %zu, \"threads\": %d", r ? "," : "",
               row->size, row->threads);
        for (int k = 0; k < ctx->nkinds; k++) {
            printf(", \"%s\": ", kind_name[k]);
            json_cell(&row->cell[k], one ? &one->cell[k] : NULL);
        }
        for (int k = A_JEMALLOC; k < ctx->nkinds; k++) {
            const struct cell *c = &row->cell[k];

            printf(", \"ump_over_%s\": ", kind_name[k]);
            json_ratio(u->med_ns, c->med_ns, u->valid && c->valid);
        }
        printf("}");
    }
    printf("\n]");
    json_cold(ctx, cold, ncold);
    printf("}\n");
}

/* The CUDA baselines of the same run, next to ump's median. */
static void print_cuda_table(const struct bench_ctx *ctx,
                             const struct alloc_row *rows, int nrows)
{
    const struct cuda_rt *rt = &ctx->rt;
    char sz[32];

    if (rt->handle)
        printf("\nCUDA baselines on device 0, from %s (runtime %d.%d): "
               "cudaMalloc/cudaFree, and\ncudaMallocAsync/cudaFreeAsync on "
               "one stream per thread from the device's default\nmempool, "
               "its release threshold at UINT64_MAX (freed memory is kept)"
               "\n", rt->lib, rt->version / 1000, rt->version % 1000 / 10);
    else
        printf("\nCUDA baselines: n/a (%s)\n", rt->why);
    printf("%10s %3s | %10s | %14s %10s | %15s %10s | %14s %10s\n", "size",
           "thr", "ump med", "cudaMalloc med", "p99", "cudaMallocAsync",
           "p99", "ump/cudaMalloc", "ump/async");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct cell *u = &row->cell[A_UMP];
        const struct cell *m = &row->cell[A_CUDA_MALLOC];
        const struct cell *a = &row->cell[A_CUDA_ASYNC];

        printf("%10s %3d |", fmt_size(row->size, sz, sizeof(sz)),
               row->threads);
        print_num_or_na(u->med_ns, u->valid, 10, 1);
        printf(" |");
        print_num_or_na(m->med_ns, m->valid, 14, 1);
        print_num_or_na(m->p99_ns, m->valid, 10, 1);
        printf(" |");
        print_num_or_na(a->med_ns, a->valid, 15, 1);
        print_num_or_na(a->p99_ns, a->valid, 10, 1);
        printf(" |");
        print_ratio(u, m, 14);
        print_ratio(u, a, 10);
        printf("\n");
    }
}

static void print_cold_table(const struct bench_ctx *ctx,
                             const struct cold_row *cold, int ncold)
{
    char sz[32], gran[32];

    printf("\ncold: the first allocation of a size with nothing cached "
           "(ump_trim, then one\nump_alloc timed), median of %d", COLD_REPEATS);
    if (ctx->vmm.handle)
        printf("; raw VMM: cuMemCreate + cuMemMap + cuMemSetAccess\nof the "
               "size rounded up to %s on a range reserved beforehand, "
               "median of %d\n", fmt_size(ctx->vmm.gran, gran, sizeof(gran)),
               COLD_REPEATS);
    else
        printf("; raw VMM: n/a (%s)\n", ctx->vmm.why);
    printf("%10s | %12s | %12s %10s | %8s\n", "size", "ump cold us",
           "raw VMM us", "raw bytes", "ump/raw");
    for (int i = 0; i < ncold; i++) {
        const struct cold_row *c = &cold[i];

        printf("%10s |", fmt_size(c->size, sz, sizeof(sz)));
        print_num_or_na(c->ump_ns / 1e3, c->ump_ok, 12, 1);
        printf(" |");
        print_num_or_na(c->raw_ns / 1e3, c->raw_ok, 12, 1);
        if (c->raw_ok)
            printf(" %10s |", fmt_size(c->raw_bytes, sz, sizeof(sz)));
        else
            printf(" %10s |", "n/a");
        if (c->ump_ok && c->raw_ok && c->raw_ns > 0)
            printf(" %#8.3g\n", c->ump_ns / c->raw_ns);
        else
            printf(" %8s\n", "n/a");
    }
}

static void alloc_print_table(const struct opts *o, const char *config,
                              const struct bench_ctx *ctx,
                              const struct alloc_row *rows, int nrows,
                              const struct cold_row *cold, int ncold)
{
    char sz[32];
    bool capped = false, multi = o->threads > 1;

    printf("umpool-bench alloc (umpool %s): pool config \"%s\", backend %s\n",
           ump_version_string(), config, ump_backend_name(ctx->pool));
    printf("method: per cell and thread, %d warm-up pairs (at most %.2f s), "
           "then %" PRIu64 " alloc+free\n"
           "  pairs timed in batches of %d with "
           "clock_gettime(CLOCK_MONOTONIC), at most %.1f s per cell\n"
           "  (smaller batches when a pair is slow, so that a batch lasts "
           "about %.0f ms);\n"
           "  ns per pair = batch time / pairs in the batch; median and p99 "
           "over batches;\n"
           "  N threads: each runs the same loop, all start together, their "
           "batches pooled;\n"
           "  the allocations are not touched (the allocator alone is "
           "timed).\n",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, o->iters, BATCH_PAIRS,
           (double)CELL_MAX_NS / 1e9, (double)BATCH_MAX_NS / 1e6);
    if (ctx->je_handle)
        printf("jemalloc: mallocx/dallocx from libjemalloc.so.2 (dlopen%s)\n",
               getenv(REEXEC_ENV) ? ", GLIBC_TUNABLES=" TLS_TUNABLE : "");
    else
        printf("jemalloc: n/a (%s)\n", ctx->je_why);

    printf("\nlatency, ns per alloc+free pair\n");
    printf("%10s %3s | %10s %10s | %10s %10s | %12s %10s | %12s\n", "size",
           "thr", "ump med", "p99", "malloc med", "p99", "jemalloc med", "p99",
           "ump/jemalloc");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct cell *u = &row->cell[A_UMP], *m = &row->cell[A_MALLOC];
        const struct cell *j = &row->cell[A_JEMALLOC];

        printf("%10s %3d |", fmt_size(row->size, sz, sizeof(sz)),
               row->threads);
        print_num_or_na(u->med_ns, u->valid, 10, 1);
        print_num_or_na(u->p99_ns, u->valid, 10, 1);
        printf(" |");
        print_num_or_na(m->med_ns, m->valid, 10, 1);
        print_num_or_na(m->p99_ns, m->valid, 10, 1);
        printf(" |");
        print_num_or_na(j->med_ns, j->valid, 12, 1);
        print_num_or_na(j->p99_ns, j->valid, 10, 1);
        printf(" |");
        print_ratio(u, j, 12);
        printf("\n");
        for (int k = 0; k < ctx->nkinds; k++)
            capped |= row->cell[k].capped;
    }
    if (ctx->cuda_cols)
        print_cuda_table(ctx, rows, nrows);

    printf("\nthroughput, M pairs/s (all threads)");
    if (multi)
        printf("; scaling = %d-thread / 1-thread", o->threads);
    printf("\n%10s |", "size");
    for (int k = 0; k < ctx->nkinds; k++) {
        printf(" %8s 1T", kind_name[k]);
        if (multi)
            printf(" %6dT %7s", o->threads, "scaling");
        printf(" |");
    }
    printf("\n");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *one = &rows[r];
        const struct alloc_row *many = multi ? &rows[r + 1] : NULL;

        if (one->threads != 1)
            continue;
        printf("%10s |", fmt_size(one->size, sz, sizeof(sz)));
        for (int k = 0; k < ctx->nkinds; k++) {
            const struct cell *c1 = &one->cell[k];
            const struct cell *cn = many ? &many->cell[k] : NULL;
            bool ok = c1->valid && cn && cn->valid && c1->mpairs_s > 0;
            int w = (int)strlen(kind_name[k]) + 3;

            print_num_or_na(c1->mpairs_s, c1->valid, w < 11 ? 11 : w, 3);
            if (multi) {
                print_num_or_na(cn->mpairs_s, cn->valid, 7, 3);
                print_num_or_na(ok ? cn->mpairs_s / c1->mpairs_s : 0, ok, 7,
                                2);
            }
            printf(" |");
        }
        printf("\n");
    }
    print_cold_table(ctx, cold, ncold);
    if (capped)
        printf("\nnote: some cells hit the %.1f s limit before %" PRIu64
               " pairs per thread;\n      --json shows the pairs timed.\n",
               (double)CELL_MAX_NS / 1e9, o->iters);
}

/*
 * The first allocation of size with nothing cached: ump_trim, then one
 * ump_alloc timed; the median of COLD_REPEATS. 0 or a negative errno.
 */
static int ump_cold(ump_pool_t *pool, size_t size, double *med_ns_p)
{
    double ns[COLD_REPEATS];

    for (int i = 0; i < COLD_REPEATS; i++) {
        uint64_t t0, t1;
        void *p;
        int rc = ump_trim(pool);

        if (rc)
            return rc;
        t0 = now_ns();
        rc = ump_alloc(pool, size, NULL, &p);
        t1 = now_ns();
        if (rc)
            return rc;
        ns[i] = (double)(t1 - t0);
        rc = ump_free(pool, p);
        if (rc)
            return rc;
    }
    *med_ns_p = median(ns, COLD_REPEATS);
    return 0;
}

/* The text of a cell's failure. */
static const char *cell_error(const struct bench_ctx *ctx, int kind, int rc,
                              int cuda_err)
{
    if (kind == A_UMP)
        return ump_strerror(rc);
#ifdef BENCH_CUDA
    if (cuda_err)
        return ctx->rt.error_string((cudaError_t)cuda_err);
#else
    (void)ctx;
    (void)cuda_err;
#endif
    return strerror(-rc);
}

/* Runs every latency cell; 0, or 1 after printing why ump (or a host
 * allocator) failed. A failing CUDA baseline only leaves its cell n/a. */
static int alloc_cells(const struct opts *o, const struct bench_ctx *ctx,
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
                        "thread(s): %s\n", kind_calls[k],
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
        rc = ump_cold(ctx->pool, c->size, &c->ump_ns);
        if (rc) {
            fprintf(stderr, "umpool-bench: alloc: cold ump_alloc of %s: %s\n",
                    fmt_size(c->size, sz, sizeof(sz)), ump_strerror(rc));
            return 1;
        }
        c->ump_ok = true;
#ifdef BENCH_CUDA
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

static int scenario_alloc(const struct opts *o, char **argv)
{
    const char *config = o->config ? o->config : ALLOC_CONFIG;
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
    cuda_load(&ctx);
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
#ifdef BENCH_CUDA
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

/* ---- demo --------------------------------------------------------------- */

struct demo {
    const struct opts *o;
    ump_pool_t *pool;
    int ndev;
    void **tensor;  /* one per device */
    size_t tensor_size;
    void *big;
    size_t big_size;
    ump_pool_t *spool; /* the stitching pool */
    void **holes;
    size_t nholes, holes_cap;
    void *stitched;
    /* For --json. */
    ump_stats_t *dev_stats;
    ump_stats_t total;
    bool stitch_ok;
    size_t stitch_bytes;
    uint64_t chunks_before, chunks_after;
    size_t cached_before, cached_after;
};

static void say(const struct demo *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const struct demo *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o->json)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* Reports a failed call; returns 1, the exit status. */
static int demo_fail(const char *what, int rc)
{
    fprintf(stderr, "umpool-bench: demo: %s: %s\n", what, ump_strerror(rc));
    if (rc == -ENOENT)
        fprintf(stderr, "umpool-bench: demo: (simulated topologies are read "
                "from UMPOOL_TOPOLOGY_DIR when set)\n");
    return 1;
}

static int demo_broken(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int demo_broken(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: demo: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    return 1;
}

static int demo_create(struct demo *d)
{
    const char *config = d->o->config ? d->o->config : DEMO_CONFIG;
    int rc;

    say(d, "== (a) create the pool\n");
    rc = ump_pool_create(config, &d->pool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_device_count(d->pool);
    if (rc < 0)
        return demo_fail("ump_device_count", rc);
    if (rc == 0)
        return demo_broken("the pool has no device");
    d->ndev = rc;
    if (!d->o->config)
        say(d, "Simulated node: the DGX H200 topology (8 GPUs on NVSwitch) "
               "with each GPU's memory\nshrunk to 2 GiB so that the demo "
               "runs in a second.\nConfig: \"%s\"\n", config);
    else
        say(d, "Pool created with config \"%s\".\n", config);
    say(d, "ump_device_count: the pool spans %d device(s), one virtual "
           "address space.\n\n", d->ndev);
    d->tensor = calloc((size_t)d->ndev, sizeof(*d->tensor));
    d->dev_stats = calloc((size_t)d->ndev, sizeof(*d->dev_stats));
    if (!d->tensor || !d->dev_stats)
        return demo_fail("calloc", -ENOMEM);
    return 0;
}

static int demo_place(struct demo *d)
{
    ump_stats_t st;
    char sz[32];
    int rc;

    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    /* Small enough for any device the user may configure. */
    d->tensor_size = st.capacity / 32 < 64 * MiB ? st.capacity / 32 : 64 * MiB;
    if (d->tensor_size == 0)
        d->tensor_size = 1;
    say(d, "== (b) one %s tensor on each device\n",
        fmt_size(d->tensor_size, sz, sizeof(sz)));
    say(d, "Each ump_alloc gets hints.device = d; ump_ptr_info tells where "
           "the bytes are.\n");
    for (int dev = 0; dev < d->ndev; dev++) {
        ump_hints_t hints = UMP_HINTS_INIT;
        ump_ptr_info_t info;

        hints.device = dev;
        rc = ump_alloc(d->pool, d->tensor_size, &hints, &d->tensor[dev]);
        if (rc)
            return demo_fail("ump_alloc", rc);
        rc = ump_ptr_info(d->pool, d->tensor[dev], &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        say(d, "  asked for GPU %d: %p, ump_ptr_info: device %d\n", dev,
            d->tensor[dev], info.device);
        if (info.device != dev || info.tier != UMP_TIER_DEVICE)
            return demo_broken("tensor asked for GPU %d landed on device %d "
                               "(tier %d)", dev, info.device, info.tier);
    }
    say(d, "\n");
    return 0;
}

/* Prints one run of same-device chunks of the big tensor. */
static void demo_run(const struct demo *d, size_t start, size_t end, int dev,
                     unsigned chunks)
{
    char sz[32];

    say(d, "  [%p, +%s) on ", (void *)((char *)d->big + start),
        fmt_size(end - start, sz, sizeof(sz)));
    if (dev >= 0)
        say(d, "GPU %d", dev);
    else
        say(d, "no device (tier %d)", -dev - 1);
    say(d, " (%u chunk%s)\n", chunks, chunks == 1 ? "" : "s");
}

/* Copies a pattern from the host across [lo, hi) of the big tensor and back
 * (copies on a stream, not the CPU: pool memory is not CPU-accessible on
 * cuda); 0 when every byte came back. */
static int demo_pattern(struct demo *d, size_t lo, size_t hi)
{
    size_t len = hi - lo, n = len / sizeof(uint64_t);
    uint64_t *buf = malloc(len), *back = malloc(len);
    ump_stream_t s;
    int ret = 0, rc;

    if (!buf || !back) {
        ret = demo_fail("malloc", -ENOMEM);
        goto out;
    }
    rc = ump_stream_create(d->pool, 0, &s);
    if (rc) {
        ret = demo_fail("ump_stream_create", rc);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (lo / sizeof(uint64_t) + i) * 0x9e3779b97f4a7c15ull;
    memset(back, 0, len);
    rc = ump_memcpy_async(d->pool, (char *)d->big + lo, buf,
                          n * sizeof(uint64_t), s);
    if (!rc)
        rc = ump_memcpy_async(d->pool, back, (char *)d->big + lo,
                              n * sizeof(uint64_t), s);
    if (!rc)
        rc = ump_stream_synchronize(d->pool, s);
    if (rc)
        ret = demo_fail("ump_memcpy_async", rc);
    else if (memcmp(back, buf, n * sizeof(uint64_t)) != 0)
        ret = demo_broken("pattern read back differs from what was written");
    rc = ump_stream_destroy(d->pool, s);
    if (rc && !ret)
        ret = demo_fail("ump_stream_destroy", rc);
out:
    free(back);
    free(buf);
    return ret;
}

static int demo_span(struct demo *d)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    ump_stats_t st;
    size_t off = 0, run_start = 0, boundary = 0, lo, hi;
    unsigned run_chunks = 0;
    int run_dev = 0, runs = 0, first_dev = 0, second_dev = 0, rc;
    char a[32], b[32];

    say(d, "== (c) a tensor larger than one device\n");
    if (d->ndev < 2) {
        say(d, "Only one device: nothing to span, skipped.\n\n");
        return 0;
    }
    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->big_size = st.capacity + st.capacity / 2;
    say(d, "GPU 0 has %s free of %s. ",
        fmt_size(st.capacity - st.mapped_bytes, a, sizeof(a)),
        fmt_size(st.capacity, b, sizeof(b)));
    say(d, "Asking GPU 0 for %s: when GPU 0 is full,\nthe allocation "
           "continues on the nearest devices, at the next addresses.\n",
        fmt_size(d->big_size, a, sizeof(a)));
    hints.device = 0;
    rc = ump_alloc(d->pool, d->big_size, &hints, &d->big);
    if (rc)
        return demo_fail("ump_alloc", rc);
    say(d, "Walking it chunk by chunk with ump_ptr_info (chunk_base, "
           "chunk_size):\n");
    while (off < d->big_size) {
        ump_ptr_info_t info;
        size_t next;
        int dev;

        rc = ump_ptr_info(d->pool, (char *)d->big + off, &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        if (info.base != d->big || info.size != d->big_size)
            return demo_broken("ump_ptr_info of byte %zu gives base %p size "
                               "%zu, not %p size %zu", off, info.base,
                               info.size, d->big, d->big_size);
        next = (size_t)((char *)info.chunk_base + info.chunk_size -
                        (char *)d->big);
        if (info.chunk_size == 0 || next <= off)
            return demo_broken("ump_ptr_info of byte %zu gives an empty chunk",
                               off);
        if (next > d->big_size)
            next = d->big_size;
        dev = info.tier == UMP_TIER_DEVICE ? info.device : -1 - info.tier;
        if (run_chunks && dev != run_dev) {
            demo_run(d, run_start, off, run_dev, run_chunks);
            if (runs++ == 0) {
                boundary = off;
                first_dev = run_dev;
                second_dev = dev;
            }
            run_start = off;
            run_chunks = 0;
        }
        run_dev = dev;
        run_chunks++;
        off = next;
    }
    demo_run(d, run_start, off, run_dev, run_chunks);
    runs++;

    /* Touch a window, not 3 GiB: the boundary is what is interesting. */
    lo = boundary > 4 * MiB ? boundary - 4 * MiB : 0;
    hi = boundary + 4 * MiB < d->big_size ? boundary + 4 * MiB : d->big_size;
    if (demo_pattern(d, lo, hi))
        return 1;
    if (runs > 1)
        say(d, "A copy wrote a pattern of %s across the GPU %d / GPU %d "
               "boundary (at +%s)\nthrough the pointer and read every byte "
               "back intact: one pointer, %d devices.\n\n",
            fmt_size(hi - lo, a, sizeof(a)), first_dev, second_dev,
            fmt_size(boundary, b, sizeof(b)), runs);
    else
        say(d, "It fit on one device; a copy wrote a pattern over its first "
               "%s and read it back intact.\n\n", fmt_size(hi, a, sizeof(a)));
    return 0;
}

static int demo_stitch(struct demo *d)
{
    ump_stats_t st;
    size_t nfreed = 0;
    char a[32], b[32];
    int rc;

    say(d, "== (d) stitching freed holes into one allocation\n");
    rc = ump_pool_create(STITCH_CONFIG, &d->spool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_stats(d->spool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    for (;;) {
        void *p;

        /* A device that never says -ENOMEM would loop forever. */
        if (d->nholes > st.capacity / (2 * MiB) + 64)
            return demo_broken("%zu allocations of 2 MiB on a %s device and "
                               "still no -ENOMEM", d->nholes,
                               fmt_size(st.capacity, a, sizeof(a)));
        if (d->nholes == d->holes_cap) {
            size_t cap = d->holes_cap ? d->holes_cap * 2 : 64;
            void **h = realloc(d->holes, cap * sizeof(*h));

            if (!h)
                return demo_fail("realloc", -ENOMEM);
            d->holes = h;
            d->holes_cap = cap;
        }
        rc = ump_alloc(d->spool, 2 * MiB, NULL, &p);
        if (rc == -ENOMEM)
            break;
        if (rc)
            return demo_fail("ump_alloc", rc);
        d->holes[d->nholes++] = p;
    }
    say(d, "A fresh pool, \"%s\":\nfilled its device with %zu "
           "allocations of 2 MiB until -ENOMEM.\n", STITCH_CONFIG, d->nholes);
    for (size_t i = 0; i < d->nholes; i += 2) {
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
        nfreed++;
    }
    d->stitch_bytes = nfreed * 2 * MiB;
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_before = st.chunks_created;
    say(d, "Freed every other one: %zu holes of 2 MiB, %s in all, none of "
           "them adjacent.\n", nfreed, fmt_size(d->stitch_bytes, a, sizeof(a)));
    if (d->stitch_bytes == 0)
        return demo_broken("nothing could be allocated on the stitching pool");
    rc = ump_alloc(d->spool, d->stitch_bytes, NULL, &d->stitched);
    if (rc == -ENOMEM)
        return demo_broken("stitching failed: one allocation of %s did not "
                           "fit in %zu freed holes of 2 MiB",
                           fmt_size(d->stitch_bytes, a, sizeof(a)), nfreed);
    if (rc)
        return demo_fail("ump_alloc", rc);
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_after = st.chunks_created;
    say(d, "Allocating %s in one piece: chunks_created before %" PRIu64
           ", after %" PRIu64 ".\n", fmt_size(d->stitch_bytes, b, sizeof(b)),
        d->chunks_before, d->chunks_after);
    if (d->chunks_after > d->chunks_before)
        return demo_broken("stitching created %" PRIu64 " new chunks instead "
                           "of reusing the freed ones",
                           d->chunks_after - d->chunks_before);
    d->stitch_ok = true;
    say(d, "Stitching works: the %s allocation succeeded at %p,\nbuilt "
           "from the %zu freed chunks; no new physical memory was created."
           "\n\n",
        fmt_size(d->stitch_bytes, a, sizeof(a)), d->stitched, nfreed);

    rc = ump_free(d->spool, d->stitched);
    if (rc)
        return demo_fail("ump_free", rc);
    d->stitched = NULL;
    for (size_t i = 0; i < d->nholes; i++) {
        if (!d->holes[i])
            continue;
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
    }
    rc = ump_pool_destroy(d->spool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->spool = NULL;
    return 0;
}

static void demo_stats_row(const struct demo *d, const char *name,
                           const ump_stats_t *st)
{
    char c[32], l[32], m[32], k[32], p[32];

    say(d, "%6s | %9s %9s %9s %9s %9s | %6" PRIu64 " %6" PRIu64 " %6" PRIu64
           " | %6" PRIu64 " %6" PRIu64 "\n", name,
        fmt_size(st->capacity, c, sizeof(c)),
        fmt_size(st->live_bytes, l, sizeof(l)),
        fmt_size(st->mapped_bytes, m, sizeof(m)),
        fmt_size(st->cached_bytes, k, sizeof(k)),
        fmt_size(st->peak_bytes, p, sizeof(p)), st->live_count,
        st->alloc_count, st->free_count, st->chunks_created,
        st->chunks_released);
}

static int demo_stats(struct demo *d)
{
    char name[16];
    int rc;

    say(d, "== (e) statistics (ump_stats), per device and for the whole "
           "pool\n");
    say(d, "%6s | %9s %9s %9s %9s %9s | %6s %6s %6s | %6s %6s\n", "device",
        "capacity", "live", "mapped", "cached", "peak", "live#", "allocs",
        "frees", "chunk+", "chunk-");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_stats(d->pool, dev, &d->dev_stats[dev]);
        if (rc)
            return demo_fail("ump_stats", rc);
        snprintf(name, sizeof(name), "GPU %d", dev);
        demo_stats_row(d, name, &d->dev_stats[dev]);
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &d->total);
    if (rc)
        return demo_fail("ump_stats", rc);
    demo_stats_row(d, "pool", &d->total);
    say(d, "\n");
    return 0;
}

static int demo_trim(struct demo *d)
{
    ump_stats_t st;
    char a[32], b[32];
    int rc;

    say(d, "== (f) trim\n");
    if (d->big) {
        rc = ump_free(d->pool, d->big);
        if (rc)
            return demo_fail("ump_free", rc);
        d->big = NULL;
        say(d, "Freed the big tensor: its chunks stay mapped and cached for "
               "the next allocation.\n");
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_before = st.cached_bytes;
    rc = ump_trim(d->pool);
    if (rc)
        return demo_fail("ump_trim", rc);
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_after = st.cached_bytes;
    say(d, "ump_trim gave cached memory back to the devices: cached %s "
           "before, %s after.\n",
        fmt_size(d->cached_before, a, sizeof(a)),
        fmt_size(d->cached_after, b, sizeof(b)));
    if (d->cached_before > 0 && d->cached_after >= d->cached_before)
        return demo_broken("ump_trim released no cached memory");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_free(d->pool, d->tensor[dev]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->tensor[dev] = NULL;
    }
    rc = ump_pool_destroy(d->pool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->pool = NULL;
    say(d, "Freed every tensor and destroyed the pool.\n");
    return 0;
}

static void json_stats(const ump_stats_t *st)
{
    printf("{\"capacity\": %zu, \"live_bytes\": %zu, \"mapped_bytes\": %zu, "
           "\"cached_bytes\": %zu, \"peak_bytes\": %zu, "
           "\"live_count\": %" PRIu64 ", \"alloc_count\": %" PRIu64
           ", \"free_count\": %" PRIu64 ", \"chunks_created\": %" PRIu64
           ", \"chunks_released\": %" PRIu64 "}",
           st->capacity, st->live_bytes, st->mapped_bytes, st->cached_bytes,
           st->peak_bytes, st->live_count, st->alloc_count, st->free_count,
           st->chunks_created, st->chunks_released);
}

static void demo_print_json(const struct demo *d)
{
    printf("{\"scenario\": \"demo\", \"config\": ");
    json_string(stdout, d->o->config ? d->o->config : DEMO_CONFIG);
    printf(", \"devices\": %d, \"stitching\": {\"ok\": %s, \"bytes\": %zu, "
           "\"chunks_created_before\": %" PRIu64 ", \"chunks_created_after\": %"
           PRIu64 "}, \"trim\": {\"cached_before\": %zu, \"cached_after\": %zu}"
           ", \"stats\": {\"per_device\": [",
           d->ndev, d->stitch_ok ? "true" : "false", d->stitch_bytes,
           d->chunks_before, d->chunks_after, d->cached_before,
           d->cached_after);
    for (int dev = 0; dev < d->ndev; dev++) {
        printf("%s\n  ", dev ? "," : "");
        json_stats(&d->dev_stats[dev]);
    }
    printf("\n], \"total\": ");
    json_stats(&d->total);
    printf("}}\n");
}

/* Frees whatever a failed step left behind, in reverse order of creation. */
static void demo_cleanup(struct demo *d)
{
    if (d->spool) {
        if (d->stitched)
            ump_free(d->spool, d->stitched);
        for (size_t i = 0; i < d->nholes; i++)
            if (d->holes[i])
                ump_free(d->spool, d->holes[i]);
        ump_pool_destroy(d->spool);
    }
    if (d->pool) {
        if (d->big)
            ump_free(d->pool, d->big);
        for (int dev = 0; d->tensor && dev < d->ndev; dev++)
            if (d->tensor[dev])
                ump_free(d->pool, d->tensor[dev]);
        ump_pool_destroy(d->pool);
    }
    free(d->holes);
    free(d->dev_stats);
    free(d->tensor);
}

static int scenario_demo(const struct opts *o)
{
    struct demo d;
    int ret;

    memset(&d, 0, sizeof(d));
    d.o = o;
    ret = demo_create(&d);
    if (!ret)
        ret = demo_place(&d);
    if (!ret)
        ret = demo_span(&d);
    if (!ret)
        ret = demo_stitch(&d);
    if (!ret)
        ret = demo_stats(&d);
    if (!ret)
        ret = demo_trim(&d);
    if (!ret && o->json)
        demo_print_json(&d);
    demo_cleanup(&d);
    return ret;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);

    if (rc < 0)
        return 0;
    if (rc)
        return rc;
    if (o.offload_opts && strcmp(o.scenario, "offload")) {
        usage_error("--dir, --size, --budget and --reps belong to offload");
        return EXIT_USAGE;
    }
    if (!strcmp(o.scenario, "alloc"))
        rc = scenario_alloc(&o, argv);
    else if (!strcmp(o.scenario, "demo")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        rc = scenario_demo(&o);
    } else if (!strcmp(o.scenario, "placement")) {
        if (o.alloc_opts || o.config) {
            usage_error("placement takes only --json");
            return EXIT_USAGE;
        }
        rc = bench_placement(NULL, NULL, o.json);
    } else if (!strcmp(o.scenario, "offload")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        o.off.config = o.config;
        o.off.json = o.json;
        rc = bench_offload(&o.off);
    } else {
        usage_error("unknown scenario '%s'", o.scenario);
        return EXIT_USAGE;
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "umpool-bench: writing output: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}
