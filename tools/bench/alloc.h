/*
 * umpool-bench alloc: what its two files share. alloc.c loads the
 * allocators and times them; alloc_report.c prints the results (a table,
 * or JSON).
 */
#ifndef UMP_BENCH_ALLOC_H
#define UMP_BENCH_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "cuda_loader.h"
#include "umpool.h"

/* Timing method; printed with every result. */
#define BATCH_PAIRS 64
#define WARMUP_PAIRS (4 * BATCH_PAIRS)
#define WARMUP_MAX_NS 50000000ull
/* Batches of slow pairs are shortened to about this. */
#define BATCH_MAX_NS 1000000ull
/* Slow cells (an allocator that maps on every call) stop early, so that the
 * default run stays short; the pair count actually timed is reported. */
#define CELL_MAX_NS 500000000ull

/* Cold allocations: the median of this many, each after ump_trim. */
#define COLD_REPEATS 7

/* jemalloc's initial-exec TLS needs more static TLS than glibc reserves:
 * alloc runs again with this tunable (and REEXEC_ENV set, so only once). */
#define REEXEC_ENV "UMPOOL_BENCH_STATIC_TLS"
#define TLS_TUNABLE "glibc.rtld.optional_static_tls=65536"

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
extern const char *const alloc_kind_name[A_COUNT];  /* JSON keys */
extern const char *const alloc_kind_calls[A_COUNT]; /* "malloc/free" */

typedef void *(*mallocx_fn)(size_t size, int flags);
typedef void (*dallocx_fn)(void *ptr, int flags);

/* The CUDA runtime, for the cudaMalloc and cudaMallocAsync baselines. */
struct cuda_rt {
    void *handle; /* NULL: not available, see why */
    char lib[512];
    char why[1024];
    int version;
#ifdef BENCH_CUDART
    struct bench_cudart api;
    cudaMemPool_t mempool;
#endif
};

/* The driver's VMM calls, for the raw cold column: the real driver's on
 * cuda; on the timed sim (sim_driver_costs:h200-timed) the modeled H200's,
 * paced like the sim's own calls (drvpace.h). */
struct raw_vmm {
    void *handle; /* NULL: not available, see why */
    unsigned pace; /* the timed sim's scale: the modeled column; else 0 */
    char why[1024];
    size_t gran; /* minimum granularity of device 0 (the modeled H200's
                    2 MiB on the sim) */
#ifdef BENCH_CUDART
    struct bench_cu cu;
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

/* One allocator at one size and thread count. */
struct cell {
    bool valid;
    double med_ns, p99_ns;
    double mpairs_s; /* all threads together */
    uint64_t pairs;  /* timed, all threads together */
    size_t batches;
    uint64_t batch_pairs; /* smallest batch of the cell's threads */
    bool capped;     /* stopped by CELL_MAX_NS before --iters pairs */
};

struct alloc_row {
    size_t size;
    int threads;
    struct cell cell[A_COUNT];
};

/* Is there a raw column: the real driver's or the timed sim's model? */
static inline bool raw_vmm_shown(const struct raw_vmm *v)
{
    return v->handle || v->pace;
}

/* The first allocation of one size with nothing cached. */
struct cold_row {
    size_t size;
    bool ump_ok, raw_ok;
    double ump_ns, raw_ns; /* medians */
    size_t raw_bytes;      /* the size rounded to the driver's granularity */
    /* Driver time of ump's cold allocation (ump_stats' driver_ns: modeled
     * on sim with sim_driver_costs:h200, measured on cuda), median, and
     * the H200's measured cost of the raw sequence for one handle of the
     * size rounded to 2 MiB (lib/topo/drivercost.c, DESIGN.md's table). */
    double ump_drv_ns, model_ns;
};

/* The results on stdout, as JSON or as a table. */
void alloc_print_json(const struct bench_opts *o, const char *config,
                      const struct bench_ctx *ctx,
                      const struct alloc_row *rows, int nrows,
                      const struct cold_row *cold, int ncold);
void alloc_print_table(const struct bench_opts *o, const char *config,
                       const struct bench_ctx *ctx,
                       const struct alloc_row *rows, int nrows,
                       const struct cold_row *cold, int ncold);

#endif
