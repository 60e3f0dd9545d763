// An unchanged CUDA runtime program for libumpool-preload on a GPU host
// (scripts/gpu-check builds it twice, --cudart static and shared, and runs
// it under LD_PRELOAD=libumpool-preload.so against the real driver). It
// knows nothing of umpool, except that at the end it asks, through dlsym,
// whether its allocations came from the preload's pool.
//
// Checks: cudaMalloc of several sizes written by a kernel and read back;
// cudaFree; cudaMallocAsync/cudaFreeAsync on a stream; cudaMemGetInfo
// consistent (free <= total, total <= the GPU's size from the driver's
// device attribute); cudaPointerGetAttributes of an interior pointer. Exit
// 0 on success, 1 on a failed check, 77 without a GPU.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umpool.h"

static int failures;
#define CHECK(c, ...)                                                         \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                            \
            fputc('\n', stderr);                                              \
            failures++;                                                       \
        }                                                                     \
    } while (0)

__global__ void fill(unsigned *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned)i * 2654435761u + seed;
}

typedef ump_pool_t *pool_fn(void);
typedef int lookup_fn(ump_pool_t *, const void *, ump_ptr_info_t *);

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    pool_fn *pool_of = (pool_fn *)dlsym(RTLD_DEFAULT, "umpool_preload_pool");
    lookup_fn *lookup = (lookup_fn *)dlsym(RTLD_DEFAULT, "ump_ptr_lookup");
    const size_t sizes[] = {256, 4096, 1 << 20, 64 << 20};
    for (size_t s : sizes) {
        unsigned *d = NULL;
        CHECK(cudaMalloc(&d, s) == cudaSuccess, "cudaMalloc(%zu)", s);
        size_t cnt = s / sizeof(unsigned);
        fill<<<64, 256>>>(d, cnt, 7);
        unsigned *h = (unsigned *)malloc(s);
        CHECK(cudaMemcpy(h, d, s, cudaMemcpyDeviceToHost) == cudaSuccess,
              "cudaMemcpy");
        for (size_t i = 0; i < cnt; i++)
            if (h[i] != (unsigned)i * 2654435761u + 7) {
                CHECK(0, "size %zu: element %zu wrong", s, i);
                break;
            }
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, (char *)d + s / 2) == cudaSuccess &&
                  a.type == cudaMemoryTypeDevice,
              "cudaPointerGetAttributes");
        ump_ptr_info_t in;
        ump_pool_t *pool = pool_of ? pool_of() : NULL;
        CHECK(pool && lookup && lookup(pool, d, &in) == 0,
              "size %zu: not from the preload's pool (preloaded?)", s);
        free(h);
        CHECK(cudaFree(d) == cudaSuccess, "cudaFree");
    }
    cudaStream_t st;
    cudaStreamCreate(&st);
    void *p = NULL;
    CHECK(cudaMallocAsync(&p, 1 << 20, st) == cudaSuccess, "cudaMallocAsync");
    fill<<<64, 256, 0, st>>>((unsigned *)p, (1 << 20) / 4, 3);
    CHECK(cudaFreeAsync(p, st) == cudaSuccess, "cudaFreeAsync");
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    cudaStreamDestroy(st);
    size_t f = 0, t = 0;
    CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess && f <= t, "cudaMemGetInfo");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    CHECK(t <= prop.totalGlobalMem, "cudaMemGetInfo total %zu above the "
          "GPU's %zu", t, (size_t)prop.totalGlobalMem);
    printf("%s: preload_cudart, %d GPU(s), free %zu of %zu\n",
           failures ? "FAIL" : "PASS", n, f, t);
    return failures ? 1 : 0;
}
