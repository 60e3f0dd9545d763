/*
 * umpool-bench's CUDA loaders: the driver (libcuda.so.1, entry points by
 * cuGetProcAddress) and the runtime (libcudart, by dlsym), both dlopen'ed
 * RTLD_LOCAL at run time. See cuda_loader.h.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_loader.h"

#if defined(BENCH_CUDA) || defined(BENCH_CUDART)
/* A function pointer of a struct, filled by name. */
struct sym {
    const char *name;
    size_t off;
};

typedef void *(*lookup_fn)(void *arg, const char *name);

/* Fills obj's function pointers listed in syms; NULL, or the name that was
 * not found. memcpy: POSIX makes data and function pointers the same size,
 * and this keeps the compiler from seeing a cast between them. */
static const char *load_syms(void *obj, const struct sym *syms, size_t n,
                             lookup_fn lookup, void *arg)
{
    for (size_t i = 0; i < n; i++) {
        void *fn = lookup(arg, syms[i].name);

        if (!fn)
            return syms[i].name;
        memcpy((char *)obj + syms[i].off, &fn, sizeof(fn));
    }
    return NULL;
}
#endif

/* ---- the driver --------------------------------------------------------- */

#ifdef BENCH_CUDA
typedef CUresult (*getproc_v2_fn)(const char *symbol, void **fn, int version,
                                  cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status);
typedef CUresult (*getproc_v1_fn)(const char *symbol, void **fn, int version,
                                  cuuint64_t flags);

struct getproc {
    getproc_v2_fn v2;
    getproc_v1_fn v1;
    int version; /* CU_API_VERSION, or the driver's own when older */
};

/* The entry points as of CUDA 12.0: none used here has changed since, and
 * older 12.x drivers know that version. Asked by their base names, so that
 * the driver hands out the versions of 12.0 (cuMemAlloc is cuMemAlloc_v2,
 * cuDevicePrimaryCtxRelease is its _v2, ...), with the legacy default
 * stream's semantics (not the per-thread _ptds variants), as the library's
 * own loader asks (lib/backend/cuda/driver.c). */
#define CU_API_VERSION 12000

static void *driver_lookup(void *arg, const char *name)
{
    const struct getproc *gp = arg;
    CUdriverProcAddressQueryResult status;
    void *fn = NULL;
    CUresult r;

    if (gp->v2)
        r = gp->v2(name, &fn, gp->version,
                   CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    else
        r = gp->v1(name, &fn, gp->version,
                   CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    return r == CUDA_SUCCESS ? fn : NULL;
}

#define CU_SYM(name, field) {name, offsetof(struct bench_cu, field)}
static const struct sym cu_core_syms[] = {
    CU_SYM("cuGetErrorName", error_name),
    CU_SYM("cuInit", init),
    CU_SYM("cuDeviceGet", device_get),
    CU_SYM("cuDevicePrimaryCtxRetain", ctx_retain),
    CU_SYM("cuDevicePrimaryCtxRelease", ctx_release),
    CU_SYM("cuCtxSetCurrent", ctx_set_current),
};
static const struct sym cu_vmm_syms[] = {
    CU_SYM("cuMemGetAllocationGranularity", granularity),
    CU_SYM("cuMemAddressReserve", reserve),
    CU_SYM("cuMemAddressFree", unreserve),
    CU_SYM("cuMemCreate", create),
    CU_SYM("cuMemMap", map),
    CU_SYM("cuMemSetAccess", set_access),
    CU_SYM("cuMemUnmap", unmap),
    CU_SYM("cuMemRelease", release),
};
static const struct sym cu_copy_syms[] = {
    CU_SYM("cuMemAlloc", mem_alloc),
    CU_SYM("cuMemFree", mem_free),
    CU_SYM("cuMemAllocHost", mem_alloc_host),
    CU_SYM("cuMemFreeHost", mem_free_host),
    CU_SYM("cuMemcpyDtoH", dtoh),
    CU_SYM("cuMemcpyHtoD", htod),
};
static const struct sym cu_event_syms[] = {
    CU_SYM("cuEventCreate", event_create),
    CU_SYM("cuEventRecord", event_record),
    CU_SYM("cuEventSynchronize", event_sync),
    CU_SYM("cuEventElapsedTime", event_elapsed),
    CU_SYM("cuEventDestroy", event_destroy),
    CU_SYM("cuStreamWaitEvent", stream_wait_event),
    CU_SYM("cuStreamGetCtx", stream_get_ctx),
};
#undef CU_SYM

const char *bench_cu_err(const struct bench_cu *cu, CUresult r)
{
    const char *name = NULL;

    if (cu->error_name && cu->error_name(r, &name) == CUDA_SUCCESS && name)
        return name;
    return "unknown CUDA error";
}

int bench_cu_load(struct bench_cu *cu, unsigned want, char *why,
                  size_t len)
{
    static const struct {
        unsigned group;
        const struct sym *syms;
        size_t n;
    } groups[] = {
        {0, cu_core_syms, sizeof(cu_core_syms) / sizeof(cu_core_syms[0])},
        {BENCH_CU_VMM, cu_vmm_syms,
         sizeof(cu_vmm_syms) / sizeof(cu_vmm_syms[0])},
        {BENCH_CU_COPY, cu_copy_syms,
         sizeof(cu_copy_syms) / sizeof(cu_copy_syms[0])},
        {BENCH_CU_EVENT, cu_event_syms,
         sizeof(cu_event_syms) / sizeof(cu_event_syms[0])},
    };
    struct getproc gp;
    const char *missing = NULL, *what;
    CUcontext ctx;
    CUresult r;
    void *h;

    memset(cu, 0, sizeof(*cu));
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, len, "libcuda.so.1 could not be loaded");
        return -ENOENT;
    }
    gp.v2 = (getproc_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    gp.v1 = (getproc_v1_fn)dlsym(h, "cuGetProcAddress");
    /* A driver older than 12.0 hands out nothing for a newer version. */
    CUresult (*drv_version)(int *) =
        (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
    int drv = 0;
    gp.version = drv_version && drv_version(&drv) == CUDA_SUCCESS &&
                         drv > 0 && drv < CU_API_VERSION
                     ? drv
                     : CU_API_VERSION;
    if (!gp.v2 && !gp.v1) {
        snprintf(why, len, "libcuda.so.1 has no cuGetProcAddress (driver "
                 "too old)");
        return -ENOENT;
    }
    for (size_t g = 0; !missing && g < sizeof(groups) / sizeof(groups[0]);
         g++)
        if (!groups[g].group || (want & groups[g].group))
            missing = load_syms(cu, groups[g].syms, groups[g].n,
                                driver_lookup, &gp);
    if (missing) {
        snprintf(why, len, "libcuda.so.1 has no %s", missing);
        cu->error_name = NULL;
        return -ENOENT;
    }
    if ((r = cu->init(0)) != CUDA_SUCCESS) {
        what = "cuInit";
        goto fail;
    }
    if ((r = cu->device_get(&cu->dev, 0)) != CUDA_SUCCESS) {
        what = "cuDeviceGet";
        goto fail;
    }
    if ((r = cu->ctx_retain(&ctx, cu->dev)) != CUDA_SUCCESS) {
        what = "cuDevicePrimaryCtxRetain";
        goto fail;
    }
    cu->retained = true;
    if ((r = cu->ctx_set_current(ctx)) != CUDA_SUCCESS) {
        what = "cuCtxSetCurrent";
        goto fail_ctx;
    }
    cu->lib = h;
    return 0;
fail_ctx:
    cu->ctx_release(cu->dev);
    cu->retained = false;
fail:
    snprintf(why, len, "%s: %s", what, bench_cu_err(cu, r));
    return -EIO;
}

void bench_cu_unload(struct bench_cu *cu)
{
    if (cu->retained)
        cu->ctx_release(cu->dev);
    cu->retained = false;
}
#endif /* BENCH_CUDA */

/* ---- the runtime -------------------------------------------------------- */

#ifdef BENCH_CUDART
static void *dlsym_lookup(void *handle, const char *name)
{
    return dlsym(handle, name);
}

#define RT_SYM(name, field) {name, offsetof(struct bench_cudart, field)}
static const struct sym cudart_syms[] = {
    RT_SYM("cudaMalloc", malloc_fn),
    RT_SYM("cudaFree", free_fn),
    RT_SYM("cudaMallocAsync", malloc_async),
    RT_SYM("cudaFreeAsync", free_async),
    RT_SYM("cudaStreamCreateWithFlags", stream_create),
    RT_SYM("cudaStreamSynchronize", stream_sync),
    RT_SYM("cudaStreamDestroy", stream_destroy),
    RT_SYM("cudaSetDevice", set_device),
    RT_SYM("cudaDeviceGetDefaultMemPool", default_pool),
    RT_SYM("cudaMemPoolSetAttribute", pool_set_attr),
    RT_SYM("cudaMemPoolTrimTo", pool_trim),
    RT_SYM("cudaRuntimeGetVersion", runtime_version),
    RT_SYM("cudaGetErrorString", error_string),
};
#undef RT_SYM

/* The runtime's sonames on the loader's path, then in the toolkit's
 * directory, which the path often lacks. */
static void *cudart_open(char *path, size_t len)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so"};
    const char *dirs[] = {NULL, getenv("CUDA_HOME"), "/usr/local/cuda"};

    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
        if (d > 0 && (!dirs[d] || !*dirs[d]))
            continue;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            char p[512];
            void *h;

            if (d == 0)
                snprintf(p, sizeof(p), "%s", names[i]);
            else
                snprintf(p, sizeof(p), "%s/lib64/%s", dirs[d], names[i]);
            h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
            if (h) {
                snprintf(path, len, "%s", p);
                return h;
            }
        }
    }
    return NULL;
}

int bench_cudart_load(struct bench_cudart *rt, char *why, size_t len)
{
    const char *missing;
    void *h;

    memset(rt, 0, sizeof(*rt));
    h = cudart_open(rt->path, sizeof(rt->path));
    if (!h) {
        snprintf(why, len, "no libcudart.so.13, .so.12 or .so could be "
                 "loaded");
        return -ENOENT;
    }
    missing = load_syms(rt, cudart_syms,
                        sizeof(cudart_syms) / sizeof(cudart_syms[0]),
                        dlsym_lookup, h);
    if (missing) {
        snprintf(why, len, "%s has no %s", rt->path, missing);
        return -ENOENT;
    }
    rt->lib = h;
    return 0;
}
#endif /* BENCH_CUDART */
