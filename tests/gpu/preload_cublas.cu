// cuBLAS on interposed memory (scripts/gpu-check runs it under
// LD_PRELOAD=libumpool-preload.so): an SGEMM whose operands, result and
// cuBLAS's own workspace are cudaMalloc'ed (so from the pool), staged
// through cudaMallocHost memory (the pool's pinned host memory), checked
// against the same product computed on the CPU in double precision.
// Exit 0 on success, 1 on a failed check, 77 without a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "umpool.h"

typedef ump_pool_t *pool_fn(void);
typedef int lookup_fn(ump_pool_t *, const void *, ump_ptr_info_t *);

// Is p the preload's pool's memory?
static bool pooled(const void *p)
{
    pool_fn *pool_of = (pool_fn *)dlsym(RTLD_DEFAULT, "umpool_preload_pool");
    lookup_fn *lookup = (lookup_fn *)dlsym(RTLD_DEFAULT, "ump_ptr_lookup");
    ump_ptr_info_t in;
    ump_pool_t *pool = pool_of ? pool_of() : NULL;
    return pool && lookup && lookup(pool, p, &in) == 0;
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    const int n = 512;
    const size_t bytes = (size_t)n * n * sizeof(float);
    float *a, *b, *c, *ha, *hb, *hc;
    int bad = 0;
    if (cudaMalloc(&a, bytes) || cudaMalloc(&b, bytes) ||
        cudaMalloc(&c, bytes) || cudaMallocHost(&ha, bytes) ||
        cudaMallocHost(&hb, bytes) || cudaMallocHost(&hc, bytes)) {
        printf("FAIL: preload_cublas: allocation\n");
        return 1;
    }
    if (!pooled(a) || !pooled(c) || !pooled(ha) || !pooled(hc)) {
        printf("FAIL: preload_cublas: memory not from the pool "
               "(preloaded?)\n");
        bad++;
    }
    srand(1);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        ha[i] = (float)(rand() % 17 - 8) / 8.0f;
        hb[i] = (float)(rand() % 13 - 6) / 4.0f;
    }
    cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL: preload_cublas: cublasCreate\n");
        return 1;
    }
    const float one = 1.0f, zero = 0.0f;
    // Column-major: C = A * B.
    cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
                                    &one, a, n, b, n, &zero, c, n);
    cudaError_t ce = cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost);
    if (st != CUBLAS_STATUS_SUCCESS || ce != cudaSuccess) {
        printf("FAIL: preload_cublas: sgemm %d, copy %d\n", (int)st, (int)ce);
        return 1;
    }
    // Inputs are multiples of 1/8 and 1/4 with small integers: every
    // product and sum is exact in float (24 bits) unless TF32 rounding is
    // on, which cuBLAS does not use for SGEMM by default; allow 1e-3.
    double worst = 0;
    for (int col = 0; col < n; col++)
        for (int row = 0; row < n; row++) {
            double s = 0;
            for (int k = 0; k < n; k++)
                s += (double)ha[(size_t)k * n + row] *
                     (double)hb[(size_t)col * n + k];
            double e = fabs(s - (double)hc[(size_t)col * n + row]);
            if (e > worst)
                worst = e;
        }
    if (worst > 1e-3) {
        printf("FAIL: preload_cublas: largest error %g\n", worst);
        bad++;
    }
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFreeHost(ha);
    cudaFreeHost(hb);
    cudaFreeHost(hc);
    printf("%s: preload_cublas, SGEMM %dx%d on pool memory, largest error "
           "%g\n", bad ? "FAIL" : "PASS", n, n, worst);
    return bad ? 1 : 0;
}
