/*
 * The CUDA driver loader (see driver.h for the contract): dlopen of
 * libcuda, the table of entry points filled through cuGetProcAddress, the
 * mapping of CUresult to errno with the driver's own error names, and
 * entering and leaving a context around a call.
 *
 * Why cuGetProcAddress rather than dlsym: the exported symbols of libcuda
 * are the oldest ABI of each call (cuMemGetInfo is the 32-bit one), while
 * cuGetProcAddress returns the version that matches the cuda.h a caller was
 * built with. It is also how the CUDA runtime itself finds the driver, so
 * this is the path an interposer sees.
 *
 * Nothing here knows about pools or backends; it logs through util/log.h
 * only.
 */
#include "config.h"

#ifdef HAVE_CUDA_H

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/internal.h"
#include "util/log.h"
#include "backend/cuda/driver.h"

/* --- errors ------------------------------------------------------------ */

int cudrv_errno(CUresult res)
{
    switch (res) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return -ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_NOT_MAPPED:
        return -EINVAL;
    case CUDA_ERROR_NOT_SUPPORTED:
        return -ENOTSUP;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        return -ENODEV;
    case CUDA_ERROR_NOT_PERMITTED:
        return -EPERM;
    case CUDA_ERROR_NOT_READY:
        return -EAGAIN;
    case CUDA_ERROR_ALREADY_MAPPED:
        return -EEXIST;
    default: /* ILLEGAL_ADDRESS, LAUNCH_FAILED, ECC_UNCORRECTABLE, ... */
        return -EIO;
    }
}

bool cudrv_device_lost(CUresult res)
{
    switch (res) {
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
        return true;
    default:
        return false;
    }
}

void cudrv_error_text(const struct cudrv_api *api, CUresult res, char *buf,
                      size_t len)
{
    const char *name = NULL, *text = NULL;

    if (api->cuGetErrorName && api->cuGetErrorName(res, &name) != CUDA_SUCCESS)
        name = NULL;
    if (api->cuGetErrorString &&
        api->cuGetErrorString(res, &text) != CUDA_SUCCESS)
        text = NULL;
    if (name)
        snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
    else
        snprintf(buf, len, "CUDA error %d", (int)res);
}

__attribute__((format(printf, 4, 0)))
static int fail_v(const struct cudrv_api *api, CUresult res, int level,
                  const char *fmt, va_list ap)
{
    char what[384], why[256];

    vsnprintf(what, sizeof(what), fmt, ap);
    cudrv_error_text(api, res, why, sizeof(why));
    log_at(level, "cuda: %s: %s", what, why);
    return cudrv_errno(res);
}

int cudrv_fail(const struct cudrv_api *api, CUresult res, int level,
               const char *fmt, ...)
{
    va_list ap;
    int err;

    va_start(ap, fmt);
    err = fail_v(api, res, level, fmt, ap);
    va_end(ap);
    return err;
}

/* --- loading the driver ------------------------------------------------ */

typedef CUresult get_proc_v2_fn(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult get_proc_v1_fn(const char *, void **, int, cuuint64_t);

#define CUDRV_TABLE(name) {#name, offsetof(struct cudrv_api, name)}
static const struct {
    const char *name; /* the base name cuGetProcAddress takes */
    size_t offset;
} entries[] = {
    CUDRV_TABLE(cuInit),
    CUDRV_TABLE(cuDriverGetVersion),
    CUDRV_TABLE(cuGetErrorName),
    CUDRV_TABLE(cuGetErrorString),
    CUDRV_TABLE(cuDeviceGetCount),
    CUDRV_TABLE(cuDeviceGet),
    CUDRV_TABLE(cuDeviceGetAttribute),
    CUDRV_TABLE(cuDeviceGetName),
    CUDRV_TABLE(cuDeviceGetPCIBusId),
    CUDRV_TABLE(cuDeviceCanAccessPeer),
    CUDRV_TABLE(cuDeviceGetP2PAttribute),
    CUDRV_TABLE(cuDevicePrimaryCtxRetain),
    CUDRV_TABLE(cuDevicePrimaryCtxRelease),
    CUDRV_TABLE(cuCtxGetCurrent),
    CUDRV_TABLE(cuCtxSetCurrent),
    CUDRV_TABLE(cuMemGetInfo),
    CUDRV_TABLE(cuMemGetAllocationGranularity),
    CUDRV_TABLE(cuMemAddressReserve),
    CUDRV_TABLE(cuMemAddressFree),
    CUDRV_TABLE(cuMemCreate),
    CUDRV_TABLE(cuMemRelease),
    CUDRV_TABLE(cuMemMap),
    CUDRV_TABLE(cuMemUnmap),
    CUDRV_TABLE(cuMemSetAccess),
    CUDRV_TABLE(cuMemRetainAllocationHandle),
    CUDRV_TABLE(cuMemGetAllocationPropertiesFromHandle),
    CUDRV_TABLE(cuMemExportToShareableHandle),
    CUDRV_TABLE(cuMemImportFromShareableHandle),
    CUDRV_TABLE(cuStreamCreate),
    CUDRV_TABLE(cuStreamDestroy),
    CUDRV_TABLE(cuStreamSynchronize),
    CUDRV_TABLE(cuStreamGetCtx),
    CUDRV_TABLE(cuMemcpyAsync),
    CUDRV_TABLE(cuMemHostRegister),
    CUDRV_TABLE(cuMemHostUnregister),
    CUDRV_TABLE(cuMemsetD8Async),
    CUDRV_TABLE(cuLaunchHostFunc),
    CUDRV_TABLE(cuEventCreate),
    CUDRV_TABLE(cuEventRecord),
    CUDRV_TABLE(cuEventQuery),
    CUDRV_TABLE(cuEventSynchronize),
    CUDRV_TABLE(cuEventDestroy),
    CUDRV_TABLE(cuStreamWaitEvent),
    CUDRV_TABLE(cuModuleLoadData),
    CUDRV_TABLE(cuModuleUnload),
    CUDRV_TABLE(cuModuleGetFunction),
    CUDRV_TABLE(cuLaunchKernel),
};

/* dlsym's object pointer as a function pointer, the way POSIX allows. */
static void sym_to(void *sym, void *fn_p, size_t size)
{
    memcpy(fn_p, &sym, size);
}

int cudrv_load(const char *path, struct cudrv_api *api, char *why,
               size_t len)
{
    get_proc_v2_fn *get_v2 = NULL;
    get_proc_v1_fn *get_v1 = NULL;
    struct cudrv_api a;
    int version = 0, abi, err;
    CUresult res;

    memset(&a, 0, sizeof(a));
    a.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
        const char *e = dlerror();
        snprintf(why, len, "no CUDA driver (%s)", e ? e : path);
        return -ENODEV;
    }
    /* Stable exports since the first drivers: the version comes first, so
     * that an old driver is named as such. */
    sym_to(dlsym(a.lib, "cuDriverGetVersion"), &a.cuDriverGetVersion,
           sizeof(a.cuDriverGetVersion));
    if (!a.cuDriverGetVersion) {
        snprintf(why, len, "%s is not a CUDA driver (no cuDriverGetVersion)",
                 path);
        err = -ENODEV;
        goto err_close;
    }
    res = a.cuDriverGetVersion(&version);
    if (res != CUDA_SUCCESS) {
        snprintf(why, len, "cuDriverGetVersion failed with CUDA error %d",
                 (int)res);
        err = -ENODEV;
        goto err_close;
    }
    /* cuGetProcAddress_v2 (12.0) adds a status argument; the plain export
     * keeps the 11.3 signature for old binaries. */
    sym_to(dlsym(a.lib, "cuGetProcAddress_v2"), &get_v2, sizeof(get_v2));
    if (!get_v2)
        sym_to(dlsym(a.lib, "cuGetProcAddress"), &get_v1, sizeof(get_v1));
    if (version < CUDRV_MIN_DRIVER || (!get_v2 && !get_v1)) {
        snprintf(why, len, "CUDA driver %d.%d is too old: virtual memory "
                 "management needs 10.2, and this backend %d.%d "
                 "(cuGetProcAddress)", version / 1000, version % 1000 / 10,
                 CUDRV_MIN_DRIVER / 1000, CUDRV_MIN_DRIVER % 1000 / 10);
        err = -ENOTSUP;
        goto err_close;
    }
    /* Asking for a version above the driver's is an error. */
    abi = version < CUDRV_ABI_VERSION ? version : CUDRV_ABI_VERSION;
    for (size_t i = 0; i < UMP_ARRAY_SIZE(entries); i++) {
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
        void *fn = NULL;

        /* Legacy default stream: NULL means what it means to cuda.h users
         * who did not ask for per-thread default streams. */
        if (get_v2)
            res = get_v2(entries[i].name, &fn, abi,
                         CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
        else
            res = get_v1(entries[i].name, &fn, abi,
                         CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        if (res != CUDA_SUCCESS || !fn ||
            status != CU_GET_PROC_ADDRESS_SUCCESS) {
            snprintf(why, len, "CUDA driver %d.%d has no %s for CUDA %d.%d "
                     "(cuGetProcAddress: error %d, status %d)",
                     version / 1000, version % 1000 / 10, entries[i].name,
                     abi / 1000, abi % 1000 / 10, (int)res, (int)status);
            err = -ENOTSUP;
            goto err_close;
        }
        memcpy((char *)&a + entries[i].offset, &fn, sizeof(fn));
    }
    a.driver_version = version;
    *api = a;
    return 0;

err_close:
    dlclose(a.lib);
    return err;
}

/* --- contexts ---------------------------------------------------------- */

int cudrv_ctx_enter(const struct cudrv_api *api, CUcontext ctx,
                    CUcontext *saved_p)
{
    CUcontext cur = NULL;
    CUresult res = api->cuCtxGetCurrent(&cur);

    if (res != CUDA_SUCCESS)
        return cudrv_fail(api, res, UMP_LOG_ERROR, "cuCtxGetCurrent");
    /* Setting the context costs a driver call: skipped when it is the one
     * already current, the common case on a single device. */
    if (cur != ctx) {
        res = api->cuCtxSetCurrent(ctx);
        if (res != CUDA_SUCCESS)
            return cudrv_fail(api, res, UMP_LOG_ERROR, "cuCtxSetCurrent");
    }
    *saved_p = cur;
    return 0;
}

void cudrv_ctx_leave(const struct cudrv_api *api, CUcontext ctx,
                     CUcontext saved)
{
    if (saved != ctx)
        api->cuCtxSetCurrent(saved);
}

int cudrv_leave_check(const struct cudrv_api *api, CUcontext ctx,
                      CUcontext saved, CUresult res, const char *fmt, ...)
{
    va_list ap;
    int err;

    /* The caller's context first: the log line must not run with ours. */
    cudrv_ctx_leave(api, ctx, saved);
    if (res == CUDA_SUCCESS)
        return 0;
    va_start(ap, fmt);
    err = fail_v(api, res, UMP_LOG_ERROR, fmt, ap);
    va_end(ap);
    return err;
}

#endif /* HAVE_CUDA_H */
