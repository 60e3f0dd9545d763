/*
 * The CUDA driver loader: the one place in umpool that loads libcuda and
 * hands out its entry points. The cuda backend uses it, and so can code
 * that needs the driver without a pool (an LD_PRELOAD interposer, CUDA
 * collectives): this header depends on cuda.h and libc only, nothing of the
 * backend, the topology or the pool.
 *
 * Contract:
 *  - cudrv_load fills one struct cudrv_api per caller; loading twice is
 *    allowed (dlopen counts references). Once cuInit has run, the caller
 *    must keep the library loaded for the life of the process: the driver
 *    starts threads and holds process state that unloading pulls away.
 *  - Every entry point comes from cuGetProcAddress at CUDRV_ABI_VERSION, so
 *    its type is cuda.h's prototype of that ABI, whatever the driver's own
 *    version (the driver keeps old ABIs for old binaries).
 *  - A driver result becomes a negative errno in cudrv_errno, the one such
 *    mapping; cudrv_fail logs it with the driver's error name and text.
 *
 * Everything here exists only when configure found cuda.h (HAVE_CUDA_H);
 * include config.h first.
 */
#ifndef UMP_CUDA_DRIVER_H
#define UMP_CUDA_DRIVER_H

#ifdef HAVE_CUDA_H
#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>

/* The driver's library, for tests to override (read with secure_getenv). */
#define CUDRV_DRIVER_ENV "UMPOOL_CUDA_DRIVER"
#define CUDRV_DRIVER_DEFAULT "libcuda.so.1"
/* VMM came with 10.2, but the entry points are found through
 * cuGetProcAddress, which came with 11.3. */
#define CUDRV_MIN_DRIVER 11030
/* The ABI asked of cuGetProcAddress: the signatures of cuda.h as of 12.0,
 * which the members below are declared with. */
#define CUDRV_ABI_VERSION 12000

/*
 * One member per entry point, named and typed after cuda.h's prototype so
 * that the types cannot drift (cuda.h maps a few names to their _v2 ABI,
 * e.g. cuMemGetInfo, which is the version cuGetProcAddress returns for
 * CUDRV_ABI_VERSION). Filled by cudrv_load; never called before. Adding
 * one: a member here and a line in driver.c's table (and in the fake
 * driver of tests/fake_cuda.c), as a missing entry point fails the load.
 */
#define CUDRV_ENTRY(name) __typeof__(name) *name
struct cudrv_api {
    void *lib;          /* dlopen handle */
    int driver_version; /* 1000 * major + 10 * minor */
    CUDRV_ENTRY(cuInit);
    CUDRV_ENTRY(cuDriverGetVersion);
    CUDRV_ENTRY(cuGetErrorName);
    CUDRV_ENTRY(cuGetErrorString);
    CUDRV_ENTRY(cuDeviceGetCount);
    CUDRV_ENTRY(cuDeviceGet);
    CUDRV_ENTRY(cuDeviceGetAttribute);
    CUDRV_ENTRY(cuDeviceGetName);
    CUDRV_ENTRY(cuDeviceGetPCIBusId);
    CUDRV_ENTRY(cuDeviceCanAccessPeer);
    CUDRV_ENTRY(cuDeviceGetP2PAttribute);
    CUDRV_ENTRY(cuDevicePrimaryCtxRetain);
    CUDRV_ENTRY(cuDevicePrimaryCtxRelease);
    CUDRV_ENTRY(cuCtxGetCurrent);
    CUDRV_ENTRY(cuCtxSetCurrent);
    CUDRV_ENTRY(cuMemGetInfo);
    CUDRV_ENTRY(cuMemGetAllocationGranularity);
    CUDRV_ENTRY(cuMemAddressReserve);
    CUDRV_ENTRY(cuMemAddressFree);
    CUDRV_ENTRY(cuMemCreate);
    CUDRV_ENTRY(cuMemRelease);
    CUDRV_ENTRY(cuMemMap);
    CUDRV_ENTRY(cuMemUnmap);
    CUDRV_ENTRY(cuMemSetAccess);
    CUDRV_ENTRY(cuMemRetainAllocationHandle);
    CUDRV_ENTRY(cuMemGetAllocationPropertiesFromHandle);
    CUDRV_ENTRY(cuMemExportToShareableHandle);
    CUDRV_ENTRY(cuMemImportFromShareableHandle);
    CUDRV_ENTRY(cuStreamCreate);
    CUDRV_ENTRY(cuStreamDestroy);
    CUDRV_ENTRY(cuStreamSynchronize);
    CUDRV_ENTRY(cuStreamGetCtx);
    CUDRV_ENTRY(cuMemcpyAsync);
    CUDRV_ENTRY(cuMemHostRegister);
    CUDRV_ENTRY(cuMemHostUnregister);
    CUDRV_ENTRY(cuMemsetD8Async);
    CUDRV_ENTRY(cuLaunchHostFunc);
    CUDRV_ENTRY(cuEventCreate);
    CUDRV_ENTRY(cuEventRecord);
    CUDRV_ENTRY(cuEventQuery);
    CUDRV_ENTRY(cuEventSynchronize);
    CUDRV_ENTRY(cuEventDestroy);
    CUDRV_ENTRY(cuStreamWaitEvent);
    CUDRV_ENTRY(cuModuleLoadData);
    CUDRV_ENTRY(cuModuleUnload);
    CUDRV_ENTRY(cuModuleGetFunction);
    CUDRV_ENTRY(cuLaunchKernel);
};

/* Loads the driver at path and resolves every entry point into *api. On
 * failure the library is unloaded again, nothing is logged, and why says
 * what went wrong: -ENODEV (no driver) or -ENOTSUP (driver too old). */
int cudrv_load(const char *path, struct cudrv_api *api, char *why,
               size_t len);

/* The driver's result as a negative errno (0 for CUDA_SUCCESS). */
int cudrv_errno(CUresult res);
/* Does res say that the GPU (or this process's context on it) is gone for
 * good: an uncorrectable ECC or NVLink error, a GPU off the bus, or a
 * sticky error after which every call of the context fails? (-EIO.) */
bool cudrv_device_lost(CUresult res);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or "CUDA error N" when the
 * driver does not know res (or api is not loaded yet). */
void cudrv_error_text(const struct cudrv_api *api, CUresult res, char *buf,
                      size_t len);
/* Logs "cuda: <what>: <CUDA_ERROR_NAME> (<driver's text>)" at level and
 * returns cudrv_errno(res). */
int cudrv_fail(const struct cudrv_api *api, CUresult res, int level,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Makes ctx current on the calling thread and returns the one it replaces
 * in *saved_p, for cudrv_ctx_leave: the application's own current context
 * is never changed behind its back. Logs its failure. */
int cudrv_ctx_enter(const struct cudrv_api *api, CUcontext ctx,
                    CUcontext *saved_p);
void cudrv_ctx_leave(const struct cudrv_api *api, CUcontext ctx,
                     CUcontext saved);
/* The end of most driver calls: puts the caller's context back (what
 * cudrv_ctx_enter saved), then logs a failed res once as an error, what
 * printf-style. 0 or a negative errno. */
int cudrv_leave_check(const struct cudrv_api *api, CUcontext ctx,
                      CUcontext saved, CUresult res, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif /* HAVE_CUDA_H */
#endif
