/*
 * The CUDA runtime and driver as umpool-bench's baselines use them, loaded
 * at run time (dlopen), so that the tool runs where neither is installed
 * and shows n/a. The toolkit's headers are needed at build time only.
 *
 * The one copy of these loaders in tools/: alloc (cudaMalloc columns, raw
 * VMM cold column) and offload (pinned cuMemcpy baseline) both use it. The
 * library has its own driver loader in lib/backend/cuda/, which tools, on
 * the public API only, do not reach.
 */
#ifndef UMP_BENCH_CUDA_LOADER_H
#define UMP_BENCH_CUDA_LOADER_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/* BENCH_CUDA: cuda.h is there (the driver baselines);
 * BENCH_CUDART: cuda_runtime_api.h too (the runtime baselines). */
#if defined(HAVE_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>)
#define BENCH_CUDA 1
#include <cuda.h>
#if __has_include(<cuda_runtime_api.h>)
#define BENCH_CUDART 1
#include <cuda_runtime_api.h>
#endif
#endif
#endif

#ifdef BENCH_CUDA
/* libcuda's entry points, as of CUDA 12.0 (cuGetProcAddress), and device
 * 0's primary context. */
struct bench_cu {
    void *lib;     /* libcuda.so.1, once every entry point is found */
    bool retained; /* holds device 0's primary context */
    CUdevice dev;
    CUresult (*error_name)(CUresult err, const char **name);
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*ctx_retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*ctx_release)(CUdevice dev);
    CUresult (*ctx_set_current)(CUcontext ctx);
    /* BENCH_CU_VMM: alloc's raw cold column. */
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
    /* BENCH_CU_COPY: offload's device<->host baseline. */
    CUresult (*mem_alloc)(CUdeviceptr *dptr, size_t size);
    CUresult (*mem_free)(CUdeviceptr dptr);
    CUresult (*mem_alloc_host)(void **p, size_t size);
    CUresult (*mem_free_host)(void *p);
    CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t size);
    CUresult (*htod)(CUdeviceptr dst, const void *src, size_t size);
    /* BENCH_CU_EVENT: coll's GPU timing (events on the pool's streams). */
    CUresult (*event_create)(CUevent *e, unsigned int flags);
    CUresult (*event_record)(CUevent e, CUstream s);
    CUresult (*event_sync)(CUevent e);
    CUresult (*event_elapsed)(float *ms, CUevent start, CUevent end);
    CUresult (*event_destroy)(CUevent e);
    CUresult (*stream_wait_event)(CUstream s, CUevent e, unsigned int flags);
    CUresult (*stream_get_ctx)(CUstream s, CUcontext *ctx);
};

/* Groups of entry points beyond the context calls, for bench_cu_load. */
#define BENCH_CU_VMM 1u  /* granularity .. release */
#define BENCH_CU_COPY 2u /* mem_alloc .. htod */
#define BENCH_CU_EVENT 4u /* event_create .. stream_get_ctx */

/* Loads the driver (dlopen libcuda.so.1; the context calls and the groups
 * in want by cuGetProcAddress, the others stay NULL) and makes device 0's
 * primary context current on this thread: the one the pool and the runtime
 * use too. 0, or a negative errno with why written. The library stays
 * loaded; bench_cu_unload releases the context. */
int bench_cu_load(struct bench_cu *cu, unsigned want, char *why,
                  size_t len);
void bench_cu_unload(struct bench_cu *cu);

/* The name of a driver error, for messages. */
const char *bench_cu_err(const struct bench_cu *cu, CUresult r);
#endif /* BENCH_CUDA */

#ifdef BENCH_CUDART
/* The runtime's calls that alloc's cudaMalloc columns use. */
struct bench_cudart {
    void *lib;      /* once every entry point is found */
    char path[512]; /* the soname or path it was loaded as */
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
};

/* Loads libcudart (.so.13, .so.12 or .so, on the loader's path, then under
 * $CUDA_HOME and /usr/local/cuda) and its calls above. 0, or a negative
 * errno with why written. The library stays loaded: the runtime tears
 * itself down at exit. */
int bench_cudart_load(struct bench_cudart *rt, char *why, size_t len);
#endif /* BENCH_CUDART */

#endif
