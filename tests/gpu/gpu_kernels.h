/*
 * CUDA kernels of the GPU tests, behind C launch wrappers (gpu_kernels.cu,
 * built by nvcc; gpu_kernels_stub.c stands in when there is no nvcc).
 *
 * Wrappers return 0 or a positive cudaError_t (gk_strerror gives its text),
 * never a negative errno, so that the two are not confused. Each launches on
 * a stream made by ump_stream_create for the given device: the stream belongs
 * to that device's primary context, which the CUDA runtime shares. device is
 * a CUDA runtime ordinal (see gk_find_device); the calling thread's current
 * device is left as it was.
 *
 * Buffers are arrays of 64-bit words; sizes must be multiples of 8.
 */
#ifndef UMP_GPU_KERNELS_H
#define UMP_GPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GK_HD __host__ __device__
#else
#define GK_HD
#endif

/* The pattern word at index i for a seed, the same on host and device
 * (splitmix64's finaliser of seed and index: distinct seeds differ almost
 * everywhere, so a stale or foreign word is caught). */
static inline GK_HD uint64_t gk_word(uint64_t seed, uint64_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + i + 1;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* What a checking kernel leaves in device memory: the caller sets bad to 0
 * and first to UINT64_MAX before the launch (gk_result_init). */
struct gk_result {
    unsigned long long bad;   /* words that differ from the pattern */
    unsigned long long first; /* index of the first of them */
};

#ifdef __cplusplus
extern "C" {
#endif

/* false in the stub built without nvcc. */
extern const bool gk_built;
/* false (and why) when the kernels were not built or the CUDA runtime cannot
 * run them here; *count_p: the runtime's device count. */
bool gk_available(int *count_p, char *why, size_t len);
const char *gk_strerror(int err);

/* The runtime ordinal of the device with that PCI bus id ("dddd:bb:dd.f",
 * case and a missing domain tolerated); 0 or a cudaError_t. */
int gk_find_device(const char *pci_bus_id, int *device_p);
/* Whether the runtime lets device `from` access device `to`'s memory. */
int gk_can_access_peer(int from, int to, bool *yes_p);

/* dst[i] = gk_word(seed, i) for every word of n bytes. */
int gk_fill(int device, void *stream, void *dst, size_t n, uint64_t seed);
/* Counts into *res the words of n bytes at src that differ from the
 * pattern, and the index of the first. */
int gk_check(int device, void *stream, const void *src, size_t n,
             uint64_t seed, struct gk_result *res);
/*
 * The long-running kernel of the ump_free_async test: writes seed1's pattern
 * over buf, busy-waits at least spin_ms (clock64 against the peak clock, so
 * never shorter), counts into *res the words no longer holding that pattern
 * (someone else wrote the buffer meanwhile), then writes seed2's pattern.
 */
int gk_spin_fill_check(int device, void *stream, void *buf, size_t n,
                       uint64_t seed1, uint64_t seed2, unsigned spin_ms,
                       struct gk_result *res);
/* 1 while work queued on stream is running, 0 when it is done, or minus a
 * cudaError_t. */
int gk_stream_busy(int device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
