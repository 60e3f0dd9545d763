/*
 * Virtual memory management on the cuda backend: the pool's address
 * reservation, chunks of physical memory (cuMemCreate) on a device or in
 * pinned host memory, their mappings (cuMemMap, cuMemUnmap) and who may use
 * them (cuMemSetAccess); and page-locking of ordinary host memory.
 *
 * Contract (backend.h's, plus):
 *  - Handles are the driver's own (CUmemGenericAllocationHandle). Chunks
 *    are created with POSIX file descriptor handles where the device says
 *    it supports them, so that another process can later import them; when
 *    the driver then refuses them (containers, some VMs), without.
 *  - Calls not about one device run in device 0's primary context (the
 *    address space is shared by all); the caller's context is put back.
 *  - Host chunks (CUDA 12.2) are pinned host memory on a HOST_NUMA location
 *    (HOST without a node), mapped like device chunks and made usable by
 *    every device and the CPU in one cuMemSetAccess. The host tier works
 *    only when every device of the pool says it supports that location
 *    type in VMM (CU_DEVICE_ATTRIBUTE_HOST_NUMA_/HOST_VIRTUAL_MEMORY_
 *    MANAGEMENT_SUPPORTED): host chunks are mapped for all devices, so one
 *    that cannot reach them would lose the data spilt from it. Otherwise
 *    the host chunk calls return -ENOTSUP, and the first says why, once.
 *  - A host chunk asked for on a NUMA node without memory (sysfs MemTotal
 *    0) is created on the nearest node that has memory: cuMemCreate on a
 *    memoryless HOST_NUMA node crashes drivers before r595
 *    (NVIDIA/nccl#2106). Said once per node.
 *  - set_access_host names the CPU with the location type of the chunk
 *    mapped at the start of the range (cuda.h: HOST_NUMA access only to
 *    HOST_NUMA allocations), so a range holds host chunks of one location
 *    type; the pool's host tier only creates HOST_NUMA chunks.
 *  - A full device or host (out of memory) is normal for the pool and
 *    logged at debug level only.
 *  - Devices given by the pool are pool devices; with cuda_virtual_devices
 *    several are one GPU (cuda_phys). A chunk is created on the GPU, so
 *    the virtual devices of a GPU draw on its memory together (the pool
 *    keeps each to its share, the capacity the topology gives it); access
 *    is given to GPUs, each named once: the access descriptors are per
 *    location, and the same location twice is not something to ask of
 *    the driver.
 */
#include "config.h"

#ifdef HAVE_CUDA_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/internal.h"
#include "util/log.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/va_window.h"

/* --- driver time (driver_ns) ------------------------------------------- */

/* Adds the wall time since t0 (ump_clock_ns) to the driver time. Timed:
 * cuMemCreate of device chunks, cuMemMap, cuMemSetAccess for devices,
 * cuMemUnmap and cuMemRelease; failed calls too (their time was spent).
 * Not timed: host chunks' creation and access (pinning host memory is no
 * per-handle cost, and sim leaves them out alike), nor the context
 * switches around the calls. Map, unmap and release cannot tell a host
 * chunk's handle from a device's without asking the driver, so the host
 * tier's few of those are in. */
static void drv_time(struct cuda_ctx *c, uint64_t t0)
{
    atomic_fetch_add_explicit(&c->drv_ns, ump_clock_ns() - t0,
                              memory_order_relaxed);
}

uint64_t cuvmm_driver_ns(void *ctx, int device)
{
    struct cuda_ctx *c = ctx;

    return device < 0 ? atomic_load_explicit(&c->drv_ns, memory_order_relaxed)
                      : 0;
}

/* --- devices ----------------------------------------------------------- */

/* d: a GPU (physical ordinal). */
int cuvmm_device_setup(struct cuda_ctx *c, int d)
{
    const struct cudrv_api *api = &c->api;
    CUmemAllocationProp prop;
    size_t min = 0, rec = 0;
    int fd = 0;
    CUresult res;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = d;
    res = api->cuMemGetAllocationGranularity(&min, &prop,
                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(api, res, UMP_LOG_ERROR,
                          "cuMemGetAllocationGranularity of device %d", d);
    if (!ump_is_pow2(min)) {
        ump_log_error("cuda: device %d has granularity %zu, not a power of "
                      "two", d, min);
        return -EIO;
    }
    if (api->cuMemGetAllocationGranularity(
            &rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS)
        ump_log_debug("cuda: device %d: granularity %zu, recommended %zu", d,
                      min, rec);
    c->gran[d] = min;
    res = api->cuDeviceGetAttribute(
        &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        c->dev[d]);
    atomic_init(&c->fd_handles[d], res == CUDA_SUCCESS && fd);
    return 0;
}

size_t cuvmm_granularity(void *ctx, int device)
{
    struct cuda_ctx *c = ctx;

    return c->gran[device >= 0 && device < c->ndev ? cuda_phys(c, device)
                                                   : 0];
}

/* --- addresses --------------------------------------------------------- */

/* The largest of align and the GPUs' granularities: a range's start must
 * meet it. */
static size_t resv_align(const struct cuda_ctx *c, size_t align)
{
    size_t al = align;
    for (int d = 0; d < c->nphys; d++)
        if (c->gran[d] > al)
            al = c->gran[d];
    return al;
}

/* Window candidates asked for before the driver chooses: each costs a
 * reservation and, when the driver offers another range (the candidate is
 * taken, or this driver does not take hints there), its release. */
#define CUDA_VA_TRIES 8

/* A candidate of the window: the driver's range when it is exactly the
 * one asked for; any other it offers is given back. Errors are not logged
 * (the caller goes on to the next, then lets the driver choose). */
static bool reserve_hint(struct cuda_ctx *c, CUdeviceptr want, size_t size,
                         size_t align)
{
    CUdeviceptr got = 0;

    if (c->api.cuMemAddressReserve(&got, size, align, want, 0) !=
        CUDA_SUCCESS)
        return false;
    if (got == want)
        return true;
    if (c->api.cuMemAddressFree(got, size) != CUDA_SUCCESS)
        ump_log_error("cuda: cuMemAddressFree of [%p, +%zu), offered for a "
                      "reservation at %p, failed: a leak of addresses",
                      (void *)(uintptr_t)got, size, (void *)(uintptr_t)want);
    return false;
}

/* First in the window of backend/va_window.c (why: there), so that the
 * processes of a shared pool and a checkpoint restored in a fresh process
 * find the range free; then wherever the driver likes. Only the range
 * between a candidate's guards is reserved (the driver frees a
 * reservation only whole, so the guards could not be trimmed off as the
 * sim trims its mmap): the pools keep their spacing, but nothing keeps
 * the driver's other ranges out of the guards. */
int cuvmm_reserve(void *ctx, size_t size, size_t align, void **va_p)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUdeviceptr va = 0;
    CUresult res = CUDA_SUCCESS;
    struct va_window w;
    uintptr_t at;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    va_window_start(&w, size, resv_align(c, align), CUDA_VA_TRIES);
    while (!va && va_window_next(&w, &at))
        if (reserve_hint(c, at + w.guard, size, align))
            va = at + w.guard;
    if (!va)
        res = c->api.cuMemAddressReserve(&va, size, align, 0, 0);
    err = cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                            "cuMemAddressReserve of %zu bytes (alignment "
                            "%zu)", size, align);
    if (!err)
        *va_p = (void *)(uintptr_t)va;
    return err;
}

/* cuMemAddressReserve takes the address for a hint: the range is ours only
 * when the driver hands back va itself; any other range it offers is given
 * back. va is checked against the alignment here (the largest of align and
 * the GPUs' granularities), so that a misaligned one is -EINVAL rather than
 * a hint the driver cannot take. */
int cuvmm_reserve_at(void *ctx, void *va, size_t size, size_t align)
{
    struct cuda_ctx *c = ctx;
    CUdeviceptr want = (CUdeviceptr)(uintptr_t)va, got = 0;
    size_t al = resv_align(c, align);
    CUcontext saved;
    CUresult res;
    int err;

    if (!want || (al && want % al)) {
        ump_log_error("cuda: reserve_at: %p is not an address aligned to %zu",
                      va, al);
        return -EINVAL;
    }
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemAddressReserve(&got, size, align, want, 0);
    if (res == CUDA_SUCCESS && got != want) {
        /* A failure to give it back is a line of its own (a leak). */
        res = c->api.cuMemAddressFree(got, size);
        (void)cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                                "cuMemAddressFree of [%p, +%zu), offered "
                                "for reserve_at", (void *)(uintptr_t)got,
                                size);
        ump_log_error("cuda: reserve_at: [%p, +%zu) is taken (the driver "
                      "offered %p)", va, size, (void *)(uintptr_t)got);
        return -EADDRINUSE;
    }
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemAddressReserve of [%p, +%zu) (alignment "
                             "%zu)", va, size, align);
}

int cuvmm_unreserve(void *ctx, void *va, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemAddressFree of [%p, +%zu)", va, size);
}

/* --- ordinary host memory ---------------------------------------------- */

/* PORTABLE: page-locked for every context, hence every device. DEVICEMAP:
 * mapped into the devices' address space, so that kernels may read it
 * (the collectives' staging) where the device uses the host pointer for
 * registered memory, as every 64-bit unified-addressing platform does. */
int cuvmm_host_register(void *ctx, void *p, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE |
                                                CU_MEMHOSTREGISTER_DEVICEMAP);
    cudrv_ctx_leave(&c->api, c->pctx[CUDA_ANY_DEVICE], saved);
    /* The caller goes on without it (copies are slower): a warning. */
    return res == CUDA_SUCCESS
               ? 0
               : cudrv_fail(&c->api, res, UMP_LOG_WARN,
                            "cuMemHostRegister of [%p, +%zu)", p, size);
}

int cuvmm_host_unregister(void *ctx, void *p)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemHostUnregister(p);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemHostUnregister of %p", p);
}

/* --- device chunks ----------------------------------------------------- */

int cuvmm_chunk_create(void *ctx, int device, size_t size, ump_handle_t *h_p)
{
    struct cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    CUcontext saved;
    CUresult res;
    bool fd;
    int err, g;

    if (!cuda_device_ok(c, device, "chunk_create"))
        return -EINVAL;
    g = cuda_phys(c, device); /* the GPU: location, context, flags */
    if (!size || size % c->gran[g]) {
        ump_log_error("cuda: chunk_create: size %zu is not a positive "
                      "multiple of device %d's granularity %zu", size, device,
                      c->gran[g]);
        return -EINVAL;
    }
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g;
    fd = atomic_load_explicit(&c->fd_handles[g], memory_order_relaxed);
    prop.requestedHandleTypes = fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                   : CU_MEM_HANDLE_TYPE_NONE;
    err = cudrv_ctx_enter(&c->api, c->pctx[g], &saved);
    if (err)
        return err;
    uint64_t t0 = ump_clock_ns();
    res = c->api.cuMemCreate(&h, size, &prop, 0);
    /* The attribute can promise what the system then refuses (containers,
     * some virtual machines; NOT_SUPPORTED or NOT_PERMITTED are both seen):
     * sharing is for later, memory is for now. */
    if ((res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_NOT_PERMITTED) &&
        fd) {
        atomic_store_explicit(&c->fd_handles[g], false,
                              memory_order_relaxed);
        ump_log_debug("cuda: GPU %d refuses shareable handles; chunks "
                      "are created without them", g);
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        res = c->api.cuMemCreate(&h, size, &prop, 0);
    }
    drv_time(c, t0);
    cudrv_ctx_leave(&c->api, c->pctx[g], saved);
    cuda_note_result(c, g, NULL, res);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(&c->api, res,
                          res == CUDA_ERROR_OUT_OF_MEMORY ? UMP_LOG_DEBUG
                                                          : UMP_LOG_ERROR,
                          "cuMemCreate of %zu bytes on device %d (GPU %d)",
                          size, device, g);
    *h_p = (ump_handle_t)h;
    return 0;
}

/* Device and host chunks alike. */
int cuvmm_chunk_release(void *ctx, ump_handle_t h)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    uint64_t t0 = ump_clock_ns();
    res = c->api.cuMemRelease((CUmemGenericAllocationHandle)h);
    drv_time(c, t0);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemRelease of handle %#llx",
                             (unsigned long long)h);
}

/* --- chunks shared with another process -------------------------------- */

/* The chunk's properties (its GPU, its handle types); logs. */
static int chunk_props(struct cuda_ctx *c, CUmemGenericAllocationHandle h,
                       CUmemAllocationProp *prop, const char *op)
{
    CUresult res = c->api.cuMemGetAllocationPropertiesFromHandle(prop, h);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                          "%s: handle %#llx", op, (unsigned long long)h);
    return 0;
}

int cuvmm_chunk_export(void *ctx, ump_handle_t h, int *fd_p, uint64_t *off_p)
{
    struct cuda_ctx *c = ctx;
    CUmemAllocationProp prop;
    CUcontext saved;
    int fd = -1, err;

    if (!fd_p || !off_p) {
        ump_log_error("cuda: chunk_export: NULL result pointer");
        return -EINVAL;
    }
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    err = chunk_props(c, (CUmemGenericAllocationHandle)h, &prop,
                      "chunk_export");
    if (!err && prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        ump_log_error("cuda: chunk_export: handle %#llx is not device "
                      "memory", (unsigned long long)h);
        err = -EINVAL;
    } else if (!err && !(prop.requestedHandleTypes &
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        ump_log_error("cuda: chunk_export: GPU %d made the chunk without a "
                      "shareable handle (the driver refused them here)",
                      prop.location.id);
        err = -ENOTSUP;
    } else if (!err) {
        CUresult res = c->api.cuMemExportToShareableHandle(
            &fd, (CUmemGenericAllocationHandle)h,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        cuda_note_result(c, prop.location.id, NULL, res);
        if (res != CUDA_SUCCESS)
            err = cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                             "cuMemExportToShareableHandle of %#llx",
                             (unsigned long long)h);
    }
    cudrv_ctx_leave(&c->api, c->pctx[CUDA_ANY_DEVICE], saved);
    if (err)
        return err;
    *fd_p = fd;
    *off_p = 0; /* the file is the chunk */
    return 0;
}

int cuvmm_chunk_import(void *ctx, int fd, uint64_t off, size_t size,
                       int device, ump_handle_t *h_p)
{
    struct cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop;
    CUcontext saved;
    int err;

    if (!h_p || !cuda_device_ok(c, device, "chunk_import"))
        return -EINVAL;
    if (off || !size || size % c->gran[cuda_phys(c, device)]) {
        ump_log_error("cuda: chunk_import: [%llu, +%zu) is not a whole "
                      "exported chunk", (unsigned long long)off, size);
        return -EINVAL;
    }
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    CUresult res = c->api.cuMemImportFromShareableHandle(
        &h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    cuda_note_result(c, cuda_phys(c, device), NULL, res);
    if (res != CUDA_SUCCESS) {
        err = cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                         "cuMemImportFromShareableHandle of descriptor %d",
                         fd);
        if (err == -EINVAL || err == -ENOTSUP)
            err = -EINVAL; /* not an exported chunk: the caller's input */
    } else if (!(err = chunk_props(c, h, &prop, "chunk_import")) &&
               (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
                prop.location.id != cuda_phys(c, device))) {
        ump_log_error("cuda: chunk_import: descriptor %d is not memory of "
                      "device %d (GPU %d)", fd, device, cuda_phys(c, device));
        err = -EINVAL;
    }
    if (err && res == CUDA_SUCCESS)
        c->api.cuMemRelease(h);
    cudrv_ctx_leave(&c->api, c->pctx[CUDA_ANY_DEVICE], saved);
    if (!err)
        *h_p = (ump_handle_t)h;
    return err;
}

/* --- mappings and access ----------------------------------------------- */

int cuvmm_map(void *ctx, void *va, size_t size, ump_handle_t h)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    uint64_t t0 = ump_clock_ns();
    res = c->api.cuMemMap((CUdeviceptr)(uintptr_t)va, size, 0,
                          (CUmemGenericAllocationHandle)h, 0);
    drv_time(c, t0);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemMap of handle %#llx at [%p, +%zu)",
                             (unsigned long long)h, va, size);
}

int cuvmm_unmap(void *ctx, void *va, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    uint64_t t0 = ump_clock_ns();
    res = c->api.cuMemUnmap((CUdeviceptr)(uintptr_t)va, size);
    drv_time(c, t0);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemUnmap of [%p, +%zu)", va, size);
}

/* Read-write descriptors for the GPUs behind the listed pool devices into
 * desc[], each GPU once, in the order first named (with nvirt 1: the list
 * itself); returns how many, or -1 (logged by cuda_device_ok) when one is
 * not a device of the pool. */
static int device_access(struct cuda_ctx *c, CUmemAccessDesc *desc,
                         const int *devices, int ndevices, const char *op)
{
    bool named[UMP_MAX_DEVICES] = {false};
    int n = 0;

    for (int i = 0; i < ndevices; i++) {
        int g;

        if (!cuda_device_ok(c, devices[i], op))
            return -1;
        g = cuda_phys(c, devices[i]);
        if (named[g])
            continue;
        named[g] = true;
        desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[n].location.id = g;
        desc[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        n++;
    }
    return n;
}

/* One call for the whole range: the driver charges per handle, not per
 * call, but every call also has a fixed cost. */
int cuvmm_set_access(void *ctx, void *va, size_t size, const int *devices,
                     int ndevices)
{
    struct cuda_ctx *c = ctx;
    CUmemAccessDesc desc[UMP_MAX_DEVICES];
    CUcontext saved;
    CUresult res;
    int err, ndesc;

    if (!devices || ndevices <= 0 || ndevices > c->ndev) {
        ump_log_error("cuda: set_access: %d devices given (have %d)",
                      ndevices, c->ndev);
        return -EINVAL;
    }
    memset(desc, 0, sizeof(desc));
    ndesc = device_access(c, desc, devices, ndevices, "set_access");
    if (ndesc < 0)
        return -EINVAL;
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    uint64_t t0 = ump_clock_ns();
    res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                (size_t)ndesc);
    drv_time(c, t0);
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemSetAccess of [%p, +%zu) for %d devices",
                             va, size, ndevices);
}

/* --- host chunks ------------------------------------------------------- */

/* Says, once per location type, why the host tier is off; -ENOTSUP. */
static int host_off(struct cuda_ctx *c, bool numa)
{
    atomic_bool *said = numa ? &c->host_numa_said : &c->host_any_said;

    if (!atomic_exchange(said, true))
        ump_log_warn("cuda: the host tier is off: %s",
                     numa ? c->host_numa_why : c->host_any_why);
    return numa ? c->host_numa_off : c->host_any_off;
}

#if CUDA_VERSION >= CUDA_HOST_VMM_VERSION

/* cuda.h gained these after 12.2; the numbers are ABI and do not change. */
#if CUDA_VERSION >= 13000
#define ATTR_HOST_NUMA_VMM                                                     \
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#define ATTR_HOST_VMM CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#else
#define ATTR_HOST_NUMA_VMM ((CUdevice_attribute)141)
#define ATTR_HOST_VMM ((CUdevice_attribute)145)
#endif

/* 0 unless a device says it does not support host chunks of this location
 * type: then -ENOTSUP and why (naming the first such device). The caller
 * has checked the driver's version. A driver older than the attribute
 * (HOST_NUMA's came after 12.2, HOST's with 13.0) does not know it and
 * answers an error (CUDA_ERROR_INVALID_VALUE): support is then unknown,
 * and the driver's version decides. */
static int host_attr_check(struct cuda_ctx *c, CUdevice_attribute attr,
                           const char *attr_name, const char *what,
                           char *why, size_t len)
{
    for (int d = 0; d < c->nphys; d++) {
        char name[128] = "?", text[160];
        int v = 0;
        CUresult res = c->api.cuDeviceGetAttribute(&v, attr, c->dev[d]);

        if (res != CUDA_SUCCESS) {
            cudrv_error_text(&c->api, res, text, sizeof(text));
            ump_log_debug("cuda: device %d: %s unknown to the driver (%s); "
                          "%s goes by the driver's version", d, attr_name,
                          text, what);
            continue;
        }
        if (v)
            continue;
        if (c->api.cuDeviceGetName(name, sizeof(name), c->dev[d]) !=
            CUDA_SUCCESS)
            snprintf(name, sizeof(name), "?");
        snprintf(why, len, "device %d (%s) does not support %s in virtual "
                 "memory management (%s: is 0)", d, name, what, attr_name);
        return -ENOTSUP;
    }
    return 0;
}

/* The node host chunks for node n go to: n when it has memory (or sysfs
 * cannot tell), else the nearest node with memory by the kernel's distance
 * table, the lowest such node where distances are unknown; n again when no
 * node has memory (nothing better to do). */
static int host_node_pick(const char *root, int n)
{
    int best = -1, best_d = -1;
    int has = cuda_sysfs_node_has_memory(root, n);

    if (has < 0 && has != -ENOENT)
        ump_log_debug("cuda: whether host NUMA node %d has memory is "
                      "unknown (%s): its host chunks stay on it", n,
                      strerror(-has));
    if (has != 0)
        return n;
    for (int m = 0; m < UMP_MAX_NUMA; m++) {
        int d;

        if (m == n || cuda_sysfs_node_has_memory(root, m) != 1)
            continue;
        d = cuda_sysfs_node_distance(root, n, m);
        if (best < 0 || (d >= 0 && (best_d < 0 || d < best_d))) {
            best = m;
            best_d = d;
        }
    }
    return best >= 0 ? best : n;
}

void cuvmm_host_setup(struct cuda_ctx *c, const struct ump_topology *topo,
                      const char *sysfs_root)
{
    int v = c->api.driver_version;

    c->nnuma = topo->nnuma > 0 ? topo->nnuma : 1;
    /* Host chunks ask for what device 0's chunks ask for, and fall back on
     * their own. */
    atomic_init(&c->host_fd_handles, atomic_load(&c->fd_handles[0]));
    if (v < CUDA_HOST_VMM_VERSION) {
        c->host_numa_off = c->host_any_off = -ENOTSUP;
        snprintf(c->host_numa_why, sizeof(c->host_numa_why),
                 "CUDA driver %d.%d has no pinned host memory in virtual "
                 "memory management (needs %d.%d)", v / 1000, v % 1000 / 10,
                 CUDA_HOST_VMM_VERSION / 1000,
                 CUDA_HOST_VMM_VERSION % 1000 / 10);
        memcpy(c->host_any_why, c->host_numa_why, sizeof(c->host_any_why));
    } else {
        /* The driver's version is not enough: a virtual machine's GPU,
         * or a platform, may lack it (the attribute says so per device). */
        c->host_numa_off = host_attr_check(
            c, ATTR_HOST_NUMA_VMM,
            "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_"
            "SUPPORTED", "pinned host memory on a NUMA node",
            c->host_numa_why, sizeof(c->host_numa_why));
        c->host_any_off = host_attr_check(
            c, ATTR_HOST_VMM,
            "CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
            "pinned host memory without a NUMA node", c->host_any_why,
            sizeof(c->host_any_why));
    }
    for (int n = 0; n < UMP_MAX_NUMA; n++)
        c->host_node[n] = n < c->nnuma && !c->host_numa_off
                              ? host_node_pick(sysfs_root, n)
                              : n;
}

/* cuMemCreate of pinned host memory, with the shareable-handle fallback of
 * chunk_create. Device 0's context is current. */
static CUresult host_create(struct cuda_ctx *c, CUmemAllocationProp *prop,
                            size_t size, CUmemGenericAllocationHandle *h)
{
    /* HOST allocations cannot be shared: the driver wants no handle type. */
    bool fd = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA &&
              atomic_load_explicit(&c->host_fd_handles, memory_order_relaxed);
    CUresult res;

    prop->requestedHandleTypes = fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                    : CU_MEM_HANDLE_TYPE_NONE;
    res = c->api.cuMemCreate(h, size, prop, 0);
    if ((res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_NOT_PERMITTED) &&
        fd) {
        atomic_store_explicit(&c->host_fd_handles, false,
                              memory_order_relaxed);
        ump_log_debug("cuda: host memory refuses shareable handles; host "
                      "chunks are created without them");
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        res = c->api.cuMemCreate(h, size, prop, 0);
    }
    return res;
}

int cuvmm_host_chunk_create(void *ctx, int numa_node, size_t size,
                            ump_handle_t *h_p)
{
    struct cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUcontext saved;
    CUresult res;
    int err, node;

    if (numa_node < 0 ? c->host_any_off : c->host_numa_off)
        return host_off(c, numa_node >= 0);
    if (numa_node < -1 || numa_node >= c->nnuma) {
        ump_log_error("cuda: host_chunk_create: no NUMA node %d (have %d)",
                      numa_node, c->nnuma);
        return -EINVAL;
    }
    node = numa_node < 0 ? 0 : c->host_node[numa_node];
    if (numa_node >= 0 && node != numa_node &&
        !atomic_exchange(&c->host_node_said[numa_node], true))
        ump_log_info("cuda: host NUMA node %d has no memory: its host chunks "
                     "come from node %d", numa_node, node);
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = numa_node < 0 ? CU_MEM_LOCATION_TYPE_HOST
                                       : CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = node;
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemGetAllocationGranularity(
        &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (res != CUDA_SUCCESS) {
        err = cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                         "cuMemGetAllocationGranularity of host node %d",
                         node);
        goto out;
    }
    if (!size || !gran || size % gran) {
        ump_log_error("cuda: host_chunk_create: size %zu is not a positive "
                      "multiple of host node %d's granularity %zu", size,
                      node, gran);
        err = -EINVAL;
        goto out;
    }
    res = host_create(c, &prop, size, &h);
    /* Out of pinnable memory is the host tier being full: debug only. */
    if (res != CUDA_SUCCESS)
        err = cudrv_fail(&c->api, res,
                         res == CUDA_ERROR_OUT_OF_MEMORY ? UMP_LOG_DEBUG
                                                         : UMP_LOG_ERROR,
                         "cuMemCreate of %zu bytes on host node %d", size,
                         node);
out:
    cudrv_ctx_leave(&c->api, c->pctx[CUDA_ANY_DEVICE], saved);
    if (!err)
        *h_p = (ump_handle_t)h;
    return err;
}

/* The location of the chunk mapped at va (the driver's own record of it),
 * for naming the CPU in its access descriptor. A context is current. On
 * failure, HOST_NUMA: the documented type, and the driver will say what is
 * wrong with the range in the cuMemSetAccess that follows. */
static CUmemLocation chunk_location(struct cuda_ctx *c, void *va)
{
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 0};
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop;
    CUresult res;

    res = c->api.cuMemRetainAllocationHandle(&h, va);
    if (res != CUDA_SUCCESS) {
        cudrv_fail(&c->api, res, UMP_LOG_DEBUG,
                   "cuMemRetainAllocationHandle of %p", va);
        return loc;
    }
    memset(&prop, 0, sizeof(prop));
    res = c->api.cuMemGetAllocationPropertiesFromHandle(&prop, h);
    if (res == CUDA_SUCCESS)
        loc = prop.location;
    else
        cudrv_fail(&c->api, res, UMP_LOG_DEBUG,
                   "cuMemGetAllocationPropertiesFromHandle of %p", va);
    c->api.cuMemRelease(h); /* the reference the retain took */
    return loc;
}

/* One call: a descriptor per device, and the CPU's last, of the type of
 * the host chunk mapped there (cuda.h: HOST_NUMA access is refused to
 * allocations of other location types). Should the driver refuse that as
 * an invalid value all the same, the other host type is tried for this
 * call, and said once: a driver that wants it is worth knowing about. */
int cuvmm_set_access_host(void *ctx, void *va, size_t size,
                          const int *devices, int ndevices)
{
    struct cuda_ctx *c = ctx;
    CUmemAccessDesc desc[UMP_MAX_DEVICES + 1];
    CUmemLocationType cpu, other;
    CUmemLocation loc;
    CUcontext saved;
    CUresult res;
    int err;

    if (c->host_numa_off && c->host_any_off)
        return host_off(c, true);
    if (ndevices < 0 || ndevices > c->ndev || (ndevices && !devices)) {
        ump_log_error("cuda: set_access_host: %d devices given (have %d)",
                      ndevices, c->ndev);
        return -EINVAL;
    }
    memset(desc, 0, sizeof(desc));
    /* From here on ndevices counts descriptors: GPUs, each once. */
    ndevices = device_access(c, desc, devices, ndevices, "set_access_host");
    if (ndevices < 0)
        return -EINVAL;
    err = cudrv_ctx_enter(&c->api, c->pctx[CUDA_ANY_DEVICE], &saved);
    if (err)
        return err;
    loc = chunk_location(c, va);
    cpu = loc.type == CU_MEM_LOCATION_TYPE_HOST ? CU_MEM_LOCATION_TYPE_HOST
                                                : CU_MEM_LOCATION_TYPE_HOST_NUMA;
    other = cpu == CU_MEM_LOCATION_TYPE_HOST ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                             : CU_MEM_LOCATION_TYPE_HOST;
    desc[ndevices].location.type = cpu;
    /* ignored by the driver for host locations; the node, for the record */
    desc[ndevices].location.id =
        cpu == CU_MEM_LOCATION_TYPE_HOST_NUMA && loc.id >= 0 ? loc.id : 0;
    desc[ndevices].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                (size_t)ndevices + 1);
    if (res == CUDA_ERROR_INVALID_VALUE) {
        desc[ndevices].location.type = other;
        desc[ndevices].location.id = 0;
        res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                    (size_t)ndevices + 1);
        if (res == CUDA_SUCCESS && !atomic_exchange(&c->cpu_type_said, true))
            ump_log_info("cuda: the driver names the CPU with location type "
                         "%d, not %d, for host chunks of type %d", (int)other,
                         (int)cpu, (int)loc.type);
    }
    return cudrv_leave_check(&c->api, c->pctx[CUDA_ANY_DEVICE], saved, res,
                             "cuMemSetAccess of [%p, +%zu) for %d devices and "
                             "the CPU (host memory)", va, size, ndevices);
}

#else /* cuda.h older than 12.2: no host locations to ask for */

void cuvmm_host_setup(struct cuda_ctx *c, const struct ump_topology *topo,
                      const char *sysfs_root)
{
    (void)sysfs_root;
    c->nnuma = topo->nnuma > 0 ? topo->nnuma : 1;
    c->host_numa_off = c->host_any_off = -ENOTSUP;
    snprintf(c->host_numa_why, sizeof(c->host_numa_why),
             "built with a cuda.h older than 12.2, which has no pinned host "
             "memory in VMM");
    memcpy(c->host_any_why, c->host_numa_why, sizeof(c->host_any_why));
}

int cuvmm_host_chunk_create(void *ctx, int numa_node, size_t size,
                            ump_handle_t *h_p)
{
    (void)size;
    (void)h_p;
    return host_off(ctx, numa_node >= 0);
}

int cuvmm_set_access_host(void *ctx, void *va, size_t size,
                          const int *devices, int ndevices)
{
    (void)va;
    (void)size;
    (void)devices;
    (void)ndevices;
    return host_off(ctx, true);
}

#endif /* CUDA_VERSION >= CUDA_HOST_VMM_VERSION */

#endif /* HAVE_CUDA_H */
