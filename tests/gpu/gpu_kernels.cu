/*
 * Kernels of the GPU tests and their C launch wrappers (see gpu_kernels.h).
 *
 * Built by nvcc for sm_90 plus compute_90 PTX (which newer GPUs JIT), with
 * -fno-exceptions and -fno-threadsafe-statics so that the object needs no
 * C++ runtime: the tests are C programs linked with libcudart_static.
 */
#include <climits>
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

#include "gpu_kernels.h"

namespace {

const int kThreads = 256;

/* Makes a device current for the scope of a launch, then restores the
 * thread's previous device (the pool's backend may rely on it). */
class DeviceScope {
  public:
    explicit DeviceScope(int device)
    {
        err_ = cudaGetDevice(&prev_);
        if (err_ == cudaSuccess && prev_ != device)
            err_ = cudaSetDevice(device);
        else
            prev_ = -1;
    }
    ~DeviceScope()
    {
        if (prev_ >= 0)
            cudaSetDevice(prev_);
    }
    cudaError_t err() const { return err_; }

  private:
    int prev_ = -1;
    cudaError_t err_;
};

__global__ void fill_kernel(uint64_t *dst, size_t nwords, uint64_t seed)
{
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nwords;
         i += step)
        dst[i] = gk_word(seed, i);
}

/* Volatile loads go to L2, which is coherent with copies and memsets from
 * other streams; L1 could still hold this thread's own earlier stores. */
__device__ void check_words(const volatile uint64_t *src, size_t nwords,
                            uint64_t seed, gk_result *res)
{
    size_t step = (size_t)gridDim.x * blockDim.x;
    unsigned long long bad = 0, first = ULLONG_MAX;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nwords;
         i += step) {
        if (src[i] != gk_word(seed, i)) {
            if (bad++ == 0)
                first = i; /* grid-stride: a thread's first is its lowest */
        }
    }
    if (bad) {
        atomicAdd(&res->bad, bad);
        atomicMin(&res->first, first);
    }
}

__global__ void check_kernel(const uint64_t *src, size_t nwords, uint64_t seed,
                             gk_result *res)
{
    check_words(src, nwords, seed, res);
}

__global__ void spin_fill_check_kernel(uint64_t *buf, size_t nwords,
                                       uint64_t seed1, uint64_t seed2,
                                       long long cycles, gk_result *res)
{
    size_t step = (size_t)gridDim.x * blockDim.x;
    size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = start; i < nwords; i += step)
        buf[i] = gk_word(seed1, i);
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    check_words(buf, nwords, seed1, res);
    for (size_t i = start; i < nwords; i += step)
        buf[i] = gk_word(seed2, i);
}

/* Enough blocks for the words, at most `cap`. */
unsigned blocks_for(size_t nwords, unsigned cap)
{
    size_t b = (nwords + kThreads - 1) / kThreads;
    if (b == 0)
        b = 1;
    return b < cap ? (unsigned)b : cap;
}

int sm_count(int device, unsigned *count_p)
{
    int v = 0;
    cudaError_t err =
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess)
        return err;
    *count_p = v > 0 ? (unsigned)v : 1;
    return 0;
}

/* "dddd:bb:dd.f" or "bb:dd.f", hex, any case. */
bool parse_bus_id(const char *s, unsigned v[4])
{
    char tail;
    if (sscanf(s, "%x:%x:%x.%x%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4)
        return true;
    v[0] = 0;
    return sscanf(s, "%x:%x.%x%c", &v[1], &v[2], &v[3], &tail) == 3;
}

} /* namespace */

extern "C" const bool gk_built = true;

extern "C" bool gk_available(int *count_p, char *why, size_t len)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(why, len, "CUDA runtime: %s", cudaGetErrorString(err));
        return false;
    }
    if (n == 0) {
        snprintf(why, len, "CUDA runtime: no device");
        return false;
    }
    /* Fails when the fatbin holds nothing this GPU can run (older than
     * sm_90), which would otherwise surface as a failed launch. */
    for (int d = 0; d < n; d++) {
        DeviceScope scope(d);
        cudaFuncAttributes attr;
        if (scope.err() == cudaSuccess)
            err = cudaFuncGetAttributes(&attr, fill_kernel);
        else
            err = scope.err();
        if (err != cudaSuccess) {
            snprintf(why, len, "test kernels (sm_90) cannot run on device %d: "
                     "%s", d, cudaGetErrorString(err));
            return false;
        }
    }
    *count_p = n;
    return true;
}

extern "C" const char *gk_strerror(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}

extern "C" int gk_find_device(const char *pci_bus_id, int *device_p)
{
    unsigned want[4], have[4];
    int n = 0;
    if (!parse_bus_id(pci_bus_id, want))
        return cudaErrorInvalidValue;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess)
        return err;
    for (int d = 0; d < n; d++) {
        char buf[64];
        err = cudaDeviceGetPCIBusId(buf, (int)sizeof(buf), d);
        if (err != cudaSuccess)
            return err;
        if (parse_bus_id(buf, have) && !memcmp(want, have, sizeof(want))) {
            *device_p = d;
            return 0;
        }
    }
    return cudaErrorInvalidDevice;
}

extern "C" int gk_can_access_peer(int from, int to, bool *yes_p)
{
    int v = 0;
    cudaError_t err = cudaDeviceCanAccessPeer(&v, from, to);
    if (err != cudaSuccess)
        return err;
    *yes_p = v != 0;
    return 0;
}

extern "C" int gk_fill(int device, void *stream, void *dst, size_t n,
                       uint64_t seed)
{
    unsigned sms;
    DeviceScope scope(device);
    if (scope.err() != cudaSuccess)
        return scope.err();
    if (n % 8)
        return cudaErrorInvalidValue;
    int rc = sm_count(device, &sms);
    if (rc)
        return rc;
    fill_kernel<<<blocks_for(n / 8, 4 * sms), kThreads, 0,
                  (cudaStream_t)stream>>>((uint64_t *)dst, n / 8, seed);
    return cudaGetLastError();
}

extern "C" int gk_check(int device, void *stream, const void *src, size_t n,
                        uint64_t seed, struct gk_result *res)
{
    unsigned sms;
    DeviceScope scope(device);
    if (scope.err() != cudaSuccess)
        return scope.err();
    if (n % 8)
        return cudaErrorInvalidValue;
    int rc = sm_count(device, &sms);
    if (rc)
        return rc;
    check_kernel<<<blocks_for(n / 8, 4 * sms), kThreads, 0,
                   (cudaStream_t)stream>>>((const uint64_t *)src, n / 8, seed,
                                           res);
    return cudaGetLastError();
}

extern "C" int gk_spin_fill_check(int device, void *stream, void *buf,
                                  size_t n, uint64_t seed1, uint64_t seed2,
                                  unsigned spin_ms, struct gk_result *res)
{
    unsigned sms;
    int khz = 0;
    DeviceScope scope(device);
    if (scope.err() != cudaSuccess)
        return scope.err();
    if (n % 8)
        return cudaErrorInvalidValue;
    int rc = sm_count(device, &sms);
    if (rc)
        return rc;
    cudaError_t err =
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
    if (err != cudaSuccess)
        return err;
    if (khz <= 0)
        khz = 2000000; /* unknown: 2 GHz, above any GPU's peak */
    /* One block per SM at most, so that every block spins at once and the
     * kernel lasts one spin, not one per wave. */
    spin_fill_check_kernel<<<blocks_for(n / 8, sms), kThreads, 0,
                             (cudaStream_t)stream>>>(
        (uint64_t *)buf, n / 8, seed1, seed2, (long long)spin_ms * khz, res);
    return cudaGetLastError();
}

extern "C" int gk_stream_busy(int device, void *stream)
{
    DeviceScope scope(device);
    if (scope.err() != cudaSuccess)
        return -(int)scope.err();
    cudaError_t err = cudaStreamQuery((cudaStream_t)stream);
    if (err == cudaErrorNotReady)
        return 1;
    return err == cudaSuccess ? 0 : -(int)err;
}
