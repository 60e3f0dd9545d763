/*
 * The cuda backend: the backend interface (backend.h) on the CUDA driver's
 * virtual memory management. This file opens and closes it and holds its
 * ops table; the work is in driver.c (loading the driver, errors,
 * contexts), vmm.c (addresses, device and host chunks, mappings, access),
 * cuda_stream.c (streams, events) and cuda_topology.c (discovery).
 *
 * Contract of open and close:
 *  - The driver is loaded at run time (dlopen "libcuda.so.1", or the path
 *    in UMPOOL_CUDA_DRIVER) through driver.h, so libumpool neither links
 *    libcuda nor needs it present; building needs cuda.h only. Once cuInit
 *    has run the driver stays loaded for the life of the process.
 *  - Every device is checked for VMM before any context is retained, so an
 *    unusable machine costs no context creation. Then one primary context
 *    per device is retained, and released at close.
 *  - When no GPU can be used, open returns a negative errno and records
 *    why for cuda_unavailable_reason (the pool's fallback line to sim); it
 *    logs the reason as an error only when the user asked for cuda.
 *  - close_in_child (after fork) frees memory only: the driver cannot be
 *    used in a forked child, and the parent's lock may be held.
 *  - cuda_virtual_devices:N shows each GPU as N devices of the pool (pool
 *    device v is GPU v / N; see struct cuda_ctx and
 *    cuda_topology_virtualize), so that pooling across devices, the
 *    placement policies and the collectives run their multi-device code on
 *    one GPU. Contexts, granularity and the driver's checks stay per GPU;
 *    the pool-device numbers are turned into GPU ordinals where they reach
 *    the driver (chunk_create, set_access, stream_create, granularity).
 *
 * What was verified, and how: this code has NOT run on a GPU yet. It was
 * written against the CUDA 13 cuda.h (every entry point is typed from its
 * prototype there) and the driver API documentation, and is exercised in CI
 * by tests/test_cuda.c against tests/fake_cuda.c, a fake driver that
 * emulates VMM on the CPU as the sim backend does and checks what a driver
 * checks (current context, event and stream of one context, whole-mapping
 * unmap, stale handles, no driver calls in a forked child or inside a host
 * function, the CPU's access type matching a host chunk's location). That
 * covers loading, the version, device and VMM checks, the host tier's
 * per-device gate and memoryless NUMA nodes, the messages, the error
 * mapping, a whole pool (alloc, free, stitching across devices, device
 * full, faults in the middle of growing the pool, streams, copies,
 * deferred frees), context save and restore, fork, and topology discovery
 * from a fake sysfs tree and a fake NVML. What only a GPU can show: that
 * the real driver accepts these calls in this order, the ABI versions
 * returned by cuGetProcAddress, real NVML and sysfs contents, and the
 * timings.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/internal.h"
#include "util/log.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

/* Per thread: the pool reads it right after a failed open on that thread. */
static _Thread_local char unavailable[512] = "the cuda backend was not tried";

const char *cuda_unavailable_reason(void)
{
    return unavailable;
}

__attribute__((format(printf, 1, 0)))
static void set_reason(const char *fmt, va_list ap)
{
    vsnprintf(unavailable, sizeof(unavailable), fmt, ap);
}

/* Records why no GPU can be used (no driver, no device, old driver, no
 * VMM); says it as an error only when the user asked for cuda: with auto
 * the pool says it once, at info level, and goes on with sim. */
__attribute__((format(printf, 3, 4)))
static int unusable(const struct ump_config *cfg, int err, const char *fmt,
                    ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_reason(fmt, ap);
    va_end(ap);
    if (cfg->backend == UMP_BACKEND_CUDA)
        ump_log_error("backend cuda: %s", unavailable);
    return err;
}

#ifndef HAVE_CUDA_H

static int cuda_open(const struct ump_config *cfg, struct ump_topology *topo,
                     void **ctx_p)
{
    (void)topo;
    (void)ctx_p;
    return unusable(cfg, -ENODEV, "built without CUDA headers");
}

const struct backend_ops cuda_backend_ops = {.name = "cuda",
                                             .open = cuda_open};

#else /* HAVE_CUDA_H */

#include <pthread.h>
#include <stdlib.h>

/* A fault on a machine whose GPU should work: the failing call has logged
 * it as an error whatever the backend setting; this keeps the reason for
 * the pool's fallback line. */
__attribute__((format(printf, 2, 3)))
static int broken(int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_reason(fmt, ap);
    va_end(ap);
    return err;
}

/* Pool devices, virtual ones included: what the pool passes. */
bool cuda_device_ok(const struct cuda_ctx *c, int device, const char *op)
{
    if (device >= 0 && device < c->ndev)
        return true;
    ump_log_error("cuda: %s: no device %d (have %d)", op, device, c->ndev);
    return false;
}

static void release_contexts(struct cuda_ctx *c, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        CUresult res = c->api.cuDevicePrimaryCtxRelease(c->dev[d]);
        if (res != CUDA_SUCCESS)
            cudrv_fail(&c->api, res, UMP_LOG_WARN,
                       "cuDevicePrimaryCtxRelease of device %d", d);
    }
}

/* Checks every device before retaining any, so that a device without VMM
 * costs no context creation. */
static int devices_check(struct cuda_ctx *c, const struct ump_config *cfg)
{
    const struct cudrv_api *api = &c->api;
    char text[256];

    for (int d = 0; d < c->nphys; d++) {
        char name[128] = "?";
        int vmm = 0;
        CUresult res = api->cuDeviceGet(&c->dev[d], d);

        if (res != CUDA_SUCCESS) {
            cudrv_error_text(api, res, text, sizeof(text));
            return unusable(cfg, -ENODEV, "cuDeviceGet(%d) failed: %s", d,
                            text);
        }
        api->cuDeviceGetName(name, sizeof(name), c->dev[d]);
        res = api->cuDeviceGetAttribute(
            &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            c->dev[d]);
        if (res != CUDA_SUCCESS || !vmm)
            return unusable(cfg, -ENOTSUP, "device %d (%s) does not support "
                            "virtual memory management", d, name);
    }
    return 0;
}

/* Retains every GPU's primary context (once, however many pool devices it
 * shows) and sets the GPU up. Releases what it retained on failure. */
static int devices_open(struct cuda_ctx *c)
{
    const struct cudrv_api *api = &c->api;
    int d, err;

    for (d = 0; d < c->nphys; d++) {
        CUresult res = api->cuDevicePrimaryCtxRetain(&c->pctx[d], c->dev[d]);
        CUcontext saved;

        if (res != CUDA_SUCCESS) {
            err = cudrv_fail(api, res, UMP_LOG_ERROR,
                             "cuDevicePrimaryCtxRetain of device %d", d);
            release_contexts(c, d);
            return broken(err, "cannot retain device %d's primary context", d);
        }
        /* the device's own context current, as a driver call may expect */
        err = cudrv_ctx_enter(api, c->pctx[d], &saved);
        if (!err) {
            err = cuvmm_device_setup(c, d);
            cudrv_ctx_leave(api, c->pctx[d], saved);
        }
        if (err) {
            release_contexts(c, d + 1);
            return broken(err, "cannot set up device %d", d);
        }
    }
    return 0;
}

static int cuda_open(const struct ump_config *cfg, struct ump_topology *topo,
                     void **ctx_p)
{
    const char *path = secure_getenv(CUDRV_DRIVER_ENV);
    const char *sysfs = secure_getenv(CUDA_SYSFS_ENV);
    struct ump_topology *t;
    char why[384], text[256];
    struct cuda_ctx *c;
    int n = 0, nvirt, err;
    CUresult res;

    if (!path || !*path)
        path = CUDRV_DRIVER_DEFAULT;
    if (!sysfs || !*sysfs)
        sysfs = CUDA_SYSFS_DEFAULT;
    c = calloc(1, sizeof(*c));
    t = malloc(sizeof(*t));
    if (!c || !t) {
        ump_log_error("cuda: out of host memory");
        err = broken(-ENOMEM, "out of host memory");
        goto err_free;
    }
    err = cudrv_load(path, &c->api, why, sizeof(why));
    if (err) {
        unusable(cfg, err, "%s", why);
        goto err_free;
    }
    /* From here on the driver stays loaded (see driver.h). */
    res = c->api.cuInit(0);
    if (res != CUDA_SUCCESS) {
        cudrv_error_text(&c->api, res, text, sizeof(text));
        err = unusable(cfg, -ENODEV, "%s (cuInit: %s)",
                       res == CUDA_ERROR_NO_DEVICE ? "no CUDA device"
                                                   : "the CUDA driver failed",
                       text);
        goto err_free;
    }
    res = c->api.cuDeviceGetCount(&n);
    if (res != CUDA_SUCCESS || n <= 0) {
        err = unusable(cfg, -ENODEV, "no CUDA device");
        goto err_free;
    }
    nvirt = cfg->cuda_virtual_devices > 1 ? cfg->cuda_virtual_devices : 1;
    if (nvirt == 1 && n > UMP_MAX_DEVICES) {
        ump_log_warn("cuda: using the first %d of %d devices",
                     UMP_MAX_DEVICES, n);
        n = UMP_MAX_DEVICES;
    }
    /* A configuration error, said whatever the backend setting (with auto
     * the pool then goes on with sim); checked before any context is
     * retained. Not cut to fit like the plain case: the user asked for
     * this many devices, and fewer GPUs than there are would surprise. */
    if (n > UMP_MAX_DEVICES / nvirt) {
        ump_log_error("config: cuda_virtual_devices:%d on %d GPUs makes %d "
                      "devices, more than the %d a pool holds", nvirt, n,
                      n * nvirt, UMP_MAX_DEVICES);
        err = broken(-EINVAL, "cuda_virtual_devices:%d on %d GPUs makes "
                     "more than %d devices", nvirt, n, UMP_MAX_DEVICES);
        goto err_free;
    }
    c->nphys = n;
    c->nvirt = nvirt;
    c->ndev = n * nvirt;
    err = devices_check(c, cfg);
    if (err)
        goto err_free;
    err = devices_open(c);
    if (err)
        goto err_free;
    err = cuda_topology_discover(&c->api, c->nphys, c->pctx, sysfs,
                                 CUDA_NVML_DEFAULT, t);
    if (err) {
        broken(err, "topology discovery failed");
        goto err_release;
    }
    /* The host tier's setup reads only the NUMA nodes, the same after. */
    err = cuda_topology_virtualize(t, c->nvirt);
    if (err) {
        broken(err, "cannot make %d virtual devices per GPU", c->nvirt);
        goto err_release;
    }
    cuvmm_host_setup(c, t, sysfs);
    err = -pthread_mutex_init(&c->lock, NULL);
    if (err) {
        ump_log_error("cuda: pthread_mutex_init: %s", strerror(-err));
        broken(err, "pthread_mutex_init failed");
        goto err_release;
    }
    ump_log_debug("cuda: driver %d.%d, %d devices on %d GPUs (%s)",
                  c->api.driver_version / 1000,
                  c->api.driver_version % 1000 / 10, c->ndev, c->nphys,
                  t->name);
    *topo = *t;
    free(t);
    *ctx_p = c;
    return 0;

err_release:
    release_contexts(c, c->nphys);
err_free:
    free(t);
    free(c);
    return err;
}

static void cuda_close(void *ctx)
{
    struct cuda_ctx *c = ctx;

    if (!c)
        return;
    /* What the caller left, before the contexts it lives in go. */
    custream_close(c);
    cukernel_close(c);
    release_contexts(c, c->nphys);
    pthread_mutex_destroy(&c->lock);
    custream_free(c);
    cukernel_free(c);
    free(c);
}

/* In a forked child the driver is unusable (and the parent's lock may be
 * held): free memory only. */
static void cuda_close_in_child(void *ctx)
{
    struct cuda_ctx *c = ctx;

    if (!c)
        return;
    custream_free(c);
    cukernel_free(c);
    free(c);
}

/* NCCL's set-up uses the runtime's current device, which is the context
 * current on the thread: the device's primary context, left current. */
static int cuda_make_current(void *ctx, int device)
{
    struct cuda_ctx *c = ctx;
    if (!cuda_device_ok(c, device, "make_current"))
        return -EINVAL;
    CUresult res = c->api.cuCtxSetCurrent(c->pctx[cuda_phys(c, device)]);
    return res == CUDA_SUCCESS ? 0
                               : cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                                            "cuCtxSetCurrent");
}

void cuda_note_result(struct cuda_ctx *c, int phys, CUcontext ctx,
                      CUresult res)
{
    if (res == CUDA_SUCCESS || !cudrv_device_lost(res))
        return;
    _Atomic uint32_t *watch = atomic_load(&c->watch);
    for (int g = 0; g < c->nphys && phys < 0; g++)
        if (c->pctx[g] == ctx)
            phys = g;
    if (!watch || phys < 0)
        return;
    uint32_t bits = 0;
    for (int v = phys * c->nvirt; v < (phys + 1) * c->nvirt; v++)
        bits |= 1u << v;
    atomic_fetch_or(watch, bits);
}

void cuda_watch_failures(void *ctx, _Atomic uint32_t *mask)
{
    atomic_store(&((struct cuda_ctx *)ctx)->watch, mask);
}

const struct backend_ops cuda_backend_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .close_in_child = cuda_close_in_child,
    .granularity = cuvmm_granularity,
    .reserve = cuvmm_reserve,
    .unreserve = cuvmm_unreserve,
    .reserve_at = cuvmm_reserve_at,
    .chunk_create = cuvmm_chunk_create,
    .chunk_release = cuvmm_chunk_release,
    .chunk_export = cuvmm_chunk_export,
    .chunk_import = cuvmm_chunk_import,
    .host_chunk_create = cuvmm_host_chunk_create,
    .host_register = cuvmm_host_register,
    .host_unregister = cuvmm_host_unregister,
    .map = cuvmm_map,
    .unmap = cuvmm_unmap,
    .set_access = cuvmm_set_access,
    .set_access_host = cuvmm_set_access_host,
    .stream_create = custream_create,
    .stream_destroy = custream_destroy,
    .stream_adopt = custream_adopt,
    .stream_sync = custream_sync,
    .memcpy_async = custream_memcpy_async,
    .memset_async = custream_memset_async,
    .host_func = custream_host_func,
    .event_create = custream_event_create,
    .event_destroy = custream_event_destroy,
    .event_record = custream_event_record,
    .event_query = custream_event_query,
    .event_sync = custream_event_sync,
    .stream_wait_event = custream_wait_event,
    .kernel_launch = cukernel_launch,
    .make_current = cuda_make_current,
    .driver_ns = cuvmm_driver_ns,
    .watch_failures = cuda_watch_failures,
};

#endif /* HAVE_CUDA_H */
