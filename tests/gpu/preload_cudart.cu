// An unchanged CUDA runtime program for libumpool-preload on a GPU host
// (scripts/gpu-check builds it twice, --cudart static and shared, and runs
// it under LD_PRELOAD=libumpool-preload.so against the real driver). It
// knows nothing of umpool, except that at the end it asks, through dlsym,
// whether its allocations came from the preload's pool.
//
// Checks: cudaMalloc of several sizes written by a kernel and read back;
// cudaFree; cudaMallocAsync/cudaFreeAsync on a stream; cudaMemGetInfo
// consistent (free <= total, total <= the GPU's size from the driver's
// device attribute); cudaPointerGetAttributes of an interior pointer;
// pinned host memory (cudaMallocHost, cudaHostAlloc mapped, cudaFreeHost)
// from the pool, written by a kernel through its device address, copied
// at the link's speed, reused. Exit 0 on success, 1 on a failed check, 77
// without a GPU.
//
//   preload_cudart            the checks above
//   preload_cudart overflow   with UMPOOL_CONF ...,overflow:host: 1.3x the
//                             device's memory (cudaMemGetInfo's total) in
//                             256 MiB pieces, each filled by a kernel and
//                             checked; the pieces beyond on pinned host
//                             memory
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
static pool_fn *pool_of;
static lookup_fn *lookup;

// Where the preload's pool has p: 0 device, 1 pinned host, -1 not its.
static int where(const void *p)
{
    ump_ptr_info_t in;
    ump_pool_t *pool = pool_of ? pool_of() : NULL;
    if (!pool || !lookup || lookup(pool, p, &in))
        return -1;
    return in.tier == UMP_TIER_HOST ? 1 : 0;
}

// The first element of n that a kernel's fill with seed did not write, or
// n; read on the host.
static size_t first_wrong(const unsigned *h, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != (unsigned)i * 2654435761u + seed)
            return i;
    return n;
}

static void pinned(void)
{
    const size_t s = 8 << 20, cnt = s / sizeof(unsigned);
    unsigned *h = NULL, *m = NULL, *d = NULL;
    CHECK(cudaMallocHost(&h, s) == cudaSuccess && where(h) == 1,
          "cudaMallocHost: not the pool's pinned host memory");
    CHECK(cudaHostAlloc(&m, s, cudaHostAllocMapped) == cudaSuccess &&
              where(m) == 1,
          "cudaHostAlloc(Mapped): not the pool's pinned host memory");
    CHECK(cudaMalloc(&d, s) == cudaSuccess, "cudaMalloc");
    if (failures)
        return;
    // A kernel writes mapped host memory through its device address.
    unsigned *md = NULL;
    CHECK(cudaHostGetDevicePointer(&md, m, 0) == cudaSuccess && md == m,
          "cudaHostGetDevicePointer: %p for %p", (void *)md, (void *)m);
    fill<<<64, 256>>>(md, cnt, 9);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    CHECK(first_wrong(m, cnt, 9) == cnt, "a kernel's writes to mapped "
          "pinned memory");
    // Copies both ways through pinned memory, on a stream, timed.
    fill<<<64, 256>>>(d, cnt, 4);
    cudaStream_t st;
    cudaEvent_t e0, e1;
    cudaStreamCreate(&st);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaDeviceSynchronize();
    cudaEventRecord(e0, st);
    CHECK(cudaMemcpyAsync(h, d, s, cudaMemcpyDeviceToHost, st) ==
              cudaSuccess, "cudaMemcpyAsync D2H");
    cudaEventRecord(e1, st);
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    CHECK(first_wrong(h, cnt, 4) == cnt, "D2H into pinned memory");
    printf("pinned: 8 MiB D2H into pool pinned memory %.1f GB/s\n",
           ms > 0 ? s / (ms * 1e6) : 0.0);
    // Reused: the same size comes back.
    for (int i = 0; i < 100; i++) {
        unsigned *again = NULL;
        CHECK(cudaFreeHost(h) == cudaSuccess, "cudaFreeHost");
        CHECK(cudaMallocHost(&again, s) == cudaSuccess && again == h,
              "a freed pinned size was not reused");
        h = again;
    }
    CHECK(cudaFree(h) != cudaSuccess, "cudaFree of pinned memory accepted");
    cudaGetLastError();
    CHECK(cudaFreeHost(h) == cudaSuccess && cudaFreeHost(m) == cudaSuccess,
          "cudaFreeHost");
    cudaFree(d);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(st);
}

static int overflow(void)
{
    size_t f = 0, t = 0;
    CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess, "cudaMemGetInfo");
    const size_t piece = (size_t)256 << 20, cnt = piece / sizeof(unsigned);
    size_t n = t / piece * 13 / 10, on_host = 0;
    unsigned **p = (unsigned **)calloc(n, sizeof(*p));
    unsigned *h = (unsigned *)malloc(piece);
    for (size_t i = 0; i < n && !failures; i++) {
        CHECK(cudaMalloc(&p[i], piece) == cudaSuccess,
              "piece %zu of %zu (1.3x of %zu bytes)", i, n, t);
        if (!p[i])
            break;
        on_host += where(p[i]) == 1;
        fill<<<256, 256>>>(p[i], cnt, (unsigned)i);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    for (size_t i = 0; i < n && p[i]; i++) {
        cudaMemcpy(h, p[i], piece, cudaMemcpyDeviceToHost);
        CHECK(first_wrong(h, cnt, (unsigned)i) == cnt, "piece %zu", i);
        cudaFree(p[i]);
    }
    CHECK(on_host > 0, "nothing overflowed to the host");
    printf("%s: preload_cudart overflow, %zu pieces of 256 MiB (1.3x of "
           "%zu MiB), %zu on pinned host memory\n",
           failures ? "FAIL" : "PASS", n, t >> 20, on_host);
    free(p);
    free(h);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    pool_of = (pool_fn *)dlsym(RTLD_DEFAULT, "umpool_preload_pool");
    lookup = (lookup_fn *)dlsym(RTLD_DEFAULT, "ump_ptr_lookup");
    if (argc > 1 && !strcmp(argv[1], "overflow"))
        return overflow();
    const size_t sizes[] = {256, 4096, 1 << 20, 64 << 20};
    for (size_t s : sizes) {
        unsigned *d = NULL;
        CHECK(cudaMalloc(&d, s) == cudaSuccess, "cudaMalloc(%zu)", s);
        size_t cnt = s / sizeof(unsigned);
        fill<<<64, 256>>>(d, cnt, 7);
        unsigned *h = (unsigned *)malloc(s);
        CHECK(cudaMemcpy(h, d, s, cudaMemcpyDeviceToHost) == cudaSuccess,
              "cudaMemcpy");
        CHECK(first_wrong(h, cnt, 7) == cnt, "size %zu: element %zu wrong",
              s, first_wrong(h, cnt, 7));
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, (char *)d + s / 2) == cudaSuccess &&
                  a.type == cudaMemoryTypeDevice,
              "cudaPointerGetAttributes");
        CHECK(where(d) == 0,
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
    pinned();
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
