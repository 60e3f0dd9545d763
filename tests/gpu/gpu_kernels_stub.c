/*
 * Stands in for gpu_kernels.cu when configure found no nvcc: the GPU tests
 * still build, and gk_available() makes each of them report SKIP.
 */
#include "config.h"

#include <stdio.h>

#include "gpu_kernels.h"

/* cudaErrorNotSupported: the value the wrappers answer with, never seen
 * because no test gets past gk_available(). */
#define STUB_ERR 801

const bool gk_built = false;

bool gk_available(int *count_p, char *why, size_t len)
{
    (void)count_p;
    snprintf(why, len, "built without nvcc (no CUDA kernels)");
    return false;
}

const char *gk_strerror(int err)
{
    (void)err;
    return "built without nvcc";
}

int gk_find_device(const char *pci_bus_id, int *device_p)
{
    (void)pci_bus_id;
    (void)device_p;
    return STUB_ERR;
}

int gk_can_access_peer(int from, int to, bool *yes_p)
{
    (void)from;
    (void)to;
    (void)yes_p;
    return STUB_ERR;
}

int gk_fill(int device, void *stream, void *dst, size_t n, uint64_t seed)
{
    (void)device;
    (void)stream;
    (void)dst;
    (void)n;
    (void)seed;
    return STUB_ERR;
}

int gk_check(int device, void *stream, const void *src, size_t n,
             uint64_t seed, struct gk_result *res)
{
    (void)device;
    (void)stream;
    (void)src;
    (void)n;
    (void)seed;
    (void)res;
    return STUB_ERR;
}

int gk_spin_fill_check(int device, void *stream, void *buf, size_t n,
                       uint64_t seed1, uint64_t seed2, unsigned spin_ms,
                       struct gk_result *res)
{
    (void)device;
    (void)stream;
    (void)buf;
    (void)n;
    (void)seed1;
    (void)seed2;
    (void)spin_ms;
    (void)res;
    return STUB_ERR;
}

int gk_stream_busy(int device, void *stream)
{
    (void)device;
    (void)stream;
    return -STUB_ERR;
}
