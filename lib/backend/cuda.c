/*
 * The cuda backend: the backend interface on the CUDA driver's virtual
 * memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess), streams and events.
 *
 *  - The driver is loaded at run time (dlopen "libcuda.so.1", or the path in
 *    UMPOOL_CUDA_DRIVER) and every entry point comes from cuGetProcAddress at
 *    the 12.0 ABI, so libumpool neither links libcuda nor needs it present;
 *    building needs cuda.h only. Once cuInit has run the driver stays loaded
 *    for the life of the process, as the CUDA runtime keeps it: the driver
 *    starts threads and holds process state that unloading would pull away.
 *  - One primary context per device is retained at open and released at
 *    close. A call that needs a context makes the right one current and puts
 *    the caller's back afterwards: the application's own current device
 *    (runtime or driver API) is never changed behind its back.
 *  - Handles are the driver's own (CUmemGenericAllocationHandle). Chunks are
 *    created with POSIX file descriptor handles where the device supports
 *    them, so that another process can later import them.
 *  - Host chunks are pinned host memory in the same address space
 *    (cuMemCreate on a HOST_NUMA location, HOST without a node; CUDA 12.2):
 *    mapped like device chunks, made usable by every device and the CPU in
 *    one cuMemSetAccess.
 *  - Streams are the driver's CUstreams; NULL is the legacy default stream of
 *    the calling thread's current context (device 0's primary context when
 *    there is none). An event is created lazily in the context of the stream
 *    it is first recorded on, and re-created when recorded on a stream of
 *    another context: the driver refuses an event and a stream of different
 *    contexts. close destroys any event still alive.
 *  - Driver results become negative errnos in cuda_errno; each failure is
 *    logged once, where it happens, with the driver's error name and text.
 *    A full device (cuMemCreate's out of memory) is normal for the pool and
 *    logged at debug level only.
 *
 * What was verified, and how: this code has NOT run on a GPU yet. It was
 * written against the CUDA 13 cuda.h (every entry point is typed from its
 * prototype there) and the driver API documentation, and is exercised in CI
 * by tests/test_cuda.c against tests/fake_cuda.c, a fake driver that
 * emulates VMM on the CPU as the sim backend does and checks what a driver
 * checks (current context, event and stream of one context, whole-mapping
 * unmap, stale handles, no driver calls in a forked child or inside a host
 * function). That covers loading, the version, device and VMM checks, the
 * messages, the error mapping, a whole pool (alloc, free, stitching across
 * devices, device full, faults in the middle of growing the pool, streams,
 * copies, deferred frees), context save and restore, fork, and topology
 * discovery from a fake sysfs tree and a fake NVML. What only a GPU can
 * show: that the real driver accepts these calls in this order, the ABI
 * versions returned by cuGetProcAddress, real NVML and sysfs contents, the
 * location type the driver wants for the CPU in cuMemSetAccess on host
 * chunks (both are tried), and the timings.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../internal.h"
#include "../log.h"
#include "backend.h"
#include "cuda_api.h"

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

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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

/* --- errors ------------------------------------------------------------ */

int cuda_errno(CUresult res)
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

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver
 * does not know it. */
static void error_text(const struct cuda_api *api, CUresult res, char *buf,
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

int cuda_fail(const struct cuda_api *api, CUresult res, int level,
              const char *fmt, ...)
{
    char what[384], why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    error_text(api, res, why, sizeof(why));
    ump_log_at(level, "cuda: %s: %s", what, why);
    return cuda_errno(res);
}

/* --- loading the driver ------------------------------------------------ */

typedef CUresult get_proc_v2_fn(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult get_proc_v1_fn(const char *, void **, int, cuuint64_t);

#define CUDA_ENTRY(name) {#name, offsetof(struct cuda_api, name)}
static const struct {
    const char *name; /* the base name cuGetProcAddress takes */
    size_t offset;
} cuda_entries[] = {
    CUDA_ENTRY(cuInit),
    CUDA_ENTRY(cuDriverGetVersion),
    CUDA_ENTRY(cuGetErrorName),
    CUDA_ENTRY(cuGetErrorString),
    CUDA_ENTRY(cuDeviceGetCount),
    CUDA_ENTRY(cuDeviceGet),
    CUDA_ENTRY(cuDeviceGetAttribute),
    CUDA_ENTRY(cuDeviceGetName),
    CUDA_ENTRY(cuDeviceGetPCIBusId),
    CUDA_ENTRY(cuDeviceCanAccessPeer),
    CUDA_ENTRY(cuDeviceGetP2PAttribute),
    CUDA_ENTRY(cuDevicePrimaryCtxRetain),
    CUDA_ENTRY(cuDevicePrimaryCtxRelease),
    CUDA_ENTRY(cuCtxGetCurrent),
    CUDA_ENTRY(cuCtxSetCurrent),
    CUDA_ENTRY(cuMemGetInfo),
    CUDA_ENTRY(cuMemGetAllocationGranularity),
    CUDA_ENTRY(cuMemAddressReserve),
    CUDA_ENTRY(cuMemAddressFree),
    CUDA_ENTRY(cuMemCreate),
    CUDA_ENTRY(cuMemRelease),
    CUDA_ENTRY(cuMemMap),
    CUDA_ENTRY(cuMemUnmap),
    CUDA_ENTRY(cuMemSetAccess),
    CUDA_ENTRY(cuStreamCreate),
    CUDA_ENTRY(cuStreamDestroy),
    CUDA_ENTRY(cuStreamSynchronize),
    CUDA_ENTRY(cuStreamGetCtx),
    CUDA_ENTRY(cuMemcpyAsync),
    CUDA_ENTRY(cuMemHostRegister),
    CUDA_ENTRY(cuMemHostUnregister),
    CUDA_ENTRY(cuMemsetD8Async),
    CUDA_ENTRY(cuLaunchHostFunc),
    CUDA_ENTRY(cuEventCreate),
    CUDA_ENTRY(cuEventRecord),
    CUDA_ENTRY(cuEventQuery),
    CUDA_ENTRY(cuEventSynchronize),
    CUDA_ENTRY(cuEventDestroy),
};

/* dlsym's object pointer as a function pointer, the way POSIX allows. */
static void sym_to(void *sym, void *fn_p, size_t size)
{
    memcpy(fn_p, &sym, size);
}

int cuda_api_load(const char *path, struct cuda_api *api, char *why,
                  size_t len)
{
    get_proc_v2_fn *get_v2 = NULL;
    get_proc_v1_fn *get_v1 = NULL;
    struct cuda_api a;
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
    if (version < CUDA_MIN_DRIVER || (!get_v2 && !get_v1)) {
        snprintf(why, len, "CUDA driver %d.%d is too old: virtual memory "
                 "management needs 10.2, and this backend %d.%d "
                 "(cuGetProcAddress)", version / 1000, version % 1000 / 10,
                 CUDA_MIN_DRIVER / 1000, CUDA_MIN_DRIVER % 1000 / 10);
        err = -ENOTSUP;
        goto err_close;
    }
    /* Asking for a version above the driver's is an error. */
    abi = version < CUDA_ABI_VERSION ? version : CUDA_ABI_VERSION;
    for (size_t i = 0; i < UMP_ARRAY_SIZE(cuda_entries); i++) {
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
        void *fn = NULL;

        /* Legacy default stream: NULL means what it means to cuda.h users
         * who did not ask for per-thread default streams. */
        if (get_v2)
            res = get_v2(cuda_entries[i].name, &fn, abi,
                         CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
        else
            res = get_v1(cuda_entries[i].name, &fn, abi,
                         CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        if (res != CUDA_SUCCESS || !fn ||
            status != CU_GET_PROC_ADDRESS_SUCCESS) {
            snprintf(why, len, "CUDA driver %d.%d has no %s for CUDA %d.%d "
                     "(cuGetProcAddress: error %d, status %d)",
                     version / 1000, version % 1000 / 10,
                     cuda_entries[i].name, abi / 1000, abi % 1000 / 10,
                     (int)res, (int)status);
            err = -ENOTSUP;
            goto err_close;
        }
        memcpy((char *)&a + cuda_entries[i].offset, &fn, sizeof(fn));
    }
    a.driver_version = version;
    *api = a;
    return 0;

err_close:
    dlclose(a.lib);
    return err;
}

/* --- contexts ---------------------------------------------------------- */

int cuda_ctx_enter(const struct cuda_api *api, CUcontext ctx,
                   CUcontext *saved_p)
{
    CUcontext cur = NULL;
    CUresult res = api->cuCtxGetCurrent(&cur);

    if (res != CUDA_SUCCESS)
        return cuda_fail(api, res, UMP_LOG_ERROR, "cuCtxGetCurrent");
    if (cur != ctx) {
        res = api->cuCtxSetCurrent(ctx);
        if (res != CUDA_SUCCESS)
            return cuda_fail(api, res, UMP_LOG_ERROR, "cuCtxSetCurrent");
    }
    *saved_p = cur;
    return 0;
}

void cuda_ctx_leave(const struct cuda_api *api, CUcontext ctx,
                    CUcontext saved)
{
    if (saved != ctx)
        api->cuCtxSetCurrent(saved);
}

/* --- the backend's context --------------------------------------------- */

struct cuda_stream {
    CUstream s;
    struct cuda_stream *next;
};

/* The CUevent exists once recorded, in the context of its stream. */
struct cuda_event {
    CUevent ev;
    CUcontext ctx;
    struct cuda_event *prev, *next;
};

struct cuda_ctx {
    struct cuda_api api;
    int ndev;
    CUdevice dev[UMP_MAX_DEVICES];
    CUcontext pctx[UMP_MAX_DEVICES]; /* retained primary contexts */
    size_t gran[UMP_MAX_DEVICES];
    /* Cleared when the driver refuses shareable handles on the device. */
    atomic_bool fd_handles[UMP_MAX_DEVICES];
    atomic_bool host_fd_handles; /* the same, for host NUMA chunks */
    /* The location type that names the CPU in cuMemSetAccess, learnt from
     * the driver (see cuda_set_access_host). */
    atomic_int cpu_access_type;
    int nnuma; /* host NUMA nodes: 0 .. nnuma-1 */
    pthread_mutex_t lock; /* guards the two lists below */
    struct cuda_stream *streams;
    struct cuda_event *events;
};

/* Host memory in VMM (HOST_NUMA, HOST) came with CUDA 12.2. The CPU is
 * named in cuMemSetAccess by a host location: the documentation speaks of
 * HOST_NUMA (its id ignored), so that is tried first and HOST second. */
#define CUDA_HOST_VMM_VERSION 12020
#if CUDA_VERSION >= CUDA_HOST_VMM_VERSION
#define CPU_ACCESS_FIRST CU_MEM_LOCATION_TYPE_HOST_NUMA
#define CPU_ACCESS_SECOND CU_MEM_LOCATION_TYPE_HOST
#else
#define CPU_ACCESS_FIRST 0
#endif

static bool device_ok(const struct cuda_ctx *c, int device, const char *op)
{
    if (device >= 0 && device < c->ndev)
        return true;
    ump_log_error("cuda: %s: no device %d (have %d)", op, device, c->ndev);
    return false;
}

/* Device 0's context serves the calls that are not about one device (the
 * address space is shared by all). */
#define ANY_DEVICE 0

/* Frees what close and close_in_child both free, without the driver. */
static void ctx_free_memory(struct cuda_ctx *c)
{
    while (c->streams) {
        struct cuda_stream *s = c->streams;
        c->streams = s->next;
        free(s);
    }
    while (c->events) {
        struct cuda_event *e = c->events;
        c->events = e->next;
        free(e);
    }
    free(c);
}

static void release_contexts(struct cuda_ctx *c, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        CUresult res = c->api.cuDevicePrimaryCtxRelease(c->dev[d]);
        if (res != CUDA_SUCCESS)
            cuda_fail(&c->api, res, UMP_LOG_WARN,
                      "cuDevicePrimaryCtxRelease of device %d", d);
    }
}

/* --- open and close ---------------------------------------------------- */

/* Checks every device before retaining any, so that a device without VMM
 * costs no context creation. */
static int devices_check(struct cuda_ctx *c, const struct ump_config *cfg)
{
    const struct cuda_api *api = &c->api;
    char text[256];

    for (int d = 0; d < c->ndev; d++) {
        char name[128] = "?";
        int vmm = 0;
        CUresult res = api->cuDeviceGet(&c->dev[d], d);

        if (res != CUDA_SUCCESS) {
            error_text(api, res, text, sizeof(text));
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

/* Learns the device's granularity and handle types; logs its failures. */
static int device_setup(struct cuda_ctx *c, int d)
{
    const struct cuda_api *api = &c->api;
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
        return cuda_fail(api, res, UMP_LOG_ERROR,
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

/* Retains every device's primary context and sets the device up. Releases
 * what it retained on failure. */
static int devices_open(struct cuda_ctx *c)
{
    const struct cuda_api *api = &c->api;
    int d, err;

    for (d = 0; d < c->ndev; d++) {
        CUresult res = api->cuDevicePrimaryCtxRetain(&c->pctx[d], c->dev[d]);

        if (res != CUDA_SUCCESS) {
            err = cuda_fail(api, res, UMP_LOG_ERROR,
                            "cuDevicePrimaryCtxRetain of device %d", d);
            release_contexts(c, d);
            return broken(err, "cannot retain device %d's primary context", d);
        }
        /* the device's own context current, as a driver call may expect */
        CUcontext saved;
        err = cuda_ctx_enter(api, c->pctx[d], &saved);
        if (!err) {
            err = device_setup(c, d);
            cuda_ctx_leave(api, c->pctx[d], saved);
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
    struct ump_topology *t;
    const char *path = secure_getenv(CUDA_DRIVER_ENV);
    char why[384], text[256];
    struct cuda_ctx *c;
    int n = 0, err;
    CUresult res;

    if (!path || !*path)
        path = CUDA_DRIVER_DEFAULT;
    c = calloc(1, sizeof(*c));
    t = malloc(sizeof(*t));
    if (!c || !t) {
        ump_log_error("cuda: out of host memory");
        err = broken(-ENOMEM, "out of host memory");
        goto err_free;
    }
    err = cuda_api_load(path, &c->api, why, sizeof(why));
    if (err) {
        unusable(cfg, err, "%s", why);
        goto err_free;
    }
    /* From here on the driver stays loaded (see the top of the file). */
    res = c->api.cuInit(0);
    if (res != CUDA_SUCCESS) {
        error_text(&c->api, res, text, sizeof(text));
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
    if (n > UMP_MAX_DEVICES) {
        ump_log_warn("cuda: using the first %d of %d devices",
                     UMP_MAX_DEVICES, n);
        n = UMP_MAX_DEVICES;
    }
    c->ndev = n;
    err = devices_check(c, cfg);
    if (err)
        goto err_free;
    err = devices_open(c);
    if (err)
        goto err_free;
    err = cuda_topology_discover(&c->api, c->ndev, c->pctx, "/sys",
                                 CUDA_NVML_DEFAULT, t);
    if (err) {
        broken(err, "topology discovery failed");
        goto err_release;
    }
    c->nnuma = t->nnuma > 0 ? t->nnuma : 1;
    /* Host chunks ask for what device 0's chunks ask for, and fall back on
     * their own. */
    atomic_init(&c->host_fd_handles, atomic_load(&c->fd_handles[0]));
    atomic_init(&c->cpu_access_type, CPU_ACCESS_FIRST);
    err = -pthread_mutex_init(&c->lock, NULL);
    if (err) {
        ump_log_error("cuda: pthread_mutex_init: %s", strerror(-err));
        broken(err, "pthread_mutex_init failed");
        goto err_release;
    }
    ump_log_debug("cuda: driver %d.%d, %d devices (%s)",
                  c->api.driver_version / 1000,
                  c->api.driver_version % 1000 / 10, c->ndev, t->name);
    *topo = *t;
    free(t);
    *ctx_p = c;
    return 0;

err_release:
    release_contexts(c, c->ndev);
err_free:
    free(t);
    free(c);
    return err;
}

static int stream_enter(struct cuda_ctx *c, CUstream stream,
                        CUcontext *sctx_p, CUcontext *saved_p);

static void cuda_close(void *ctx)
{
    struct cuda_ctx *c = ctx;
    const struct cuda_api *api;
    CUresult res;

    if (!c)
        return;
    api = &c->api;
    /* What the caller left, before the contexts it lives in go; each in
     * its own context. */
    for (struct cuda_event *e = c->events; e; e = e->next) {
        CUcontext saved;
        if (!e->ev || cuda_ctx_enter(api, e->ctx, &saved))
            continue;
        res = api->cuEventDestroy(e->ev);
        cuda_ctx_leave(api, e->ctx, saved);
        if (res != CUDA_SUCCESS)
            cuda_fail(api, res, UMP_LOG_DEBUG, "cuEventDestroy at close");
    }
    for (struct cuda_stream *s = c->streams; s; s = s->next) {
        CUcontext sctx, saved;
        if (stream_enter(c, s->s, &sctx, &saved))
            continue;
        res = api->cuStreamDestroy(s->s);
        cuda_ctx_leave(api, sctx, saved);
        if (res != CUDA_SUCCESS)
            cuda_fail(api, res, UMP_LOG_WARN, "cuStreamDestroy at close");
    }
    release_contexts(c, c->ndev);
    pthread_mutex_destroy(&c->lock);
    ctx_free_memory(c);
}

/* In a forked child the driver is unusable (and the parent's lock may be
 * held): free memory only. */
static void cuda_close_in_child(void *ctx)
{
    if (ctx)
        ctx_free_memory(ctx);
}

static size_t cuda_granularity(void *ctx, int device)
{
    struct cuda_ctx *c = ctx;

    return c->gran[device >= 0 && device < c->ndev ? device : 0];
}

/* --- addresses, chunks, mappings --------------------------------------- */

/* The end of most calls: puts the caller's context back, and logs a failed
 * result (what: printf-style) once. 0 or a negative errno. */
static int cuda_leave_check(struct cuda_ctx *c, CUcontext pctx,
                            CUcontext saved, CUresult res, const char *fmt,
                            ...) __attribute__((format(printf, 5, 6)));
static int cuda_leave_check(struct cuda_ctx *c, CUcontext pctx,
                            CUcontext saved, CUresult res, const char *fmt,
                            ...)
{
    cuda_ctx_leave(&c->api, pctx, saved);
    if (res == CUDA_SUCCESS)
        return 0;
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return cuda_fail(&c->api, res, UMP_LOG_ERROR, "%s", what);
}

static int cuda_reserve(void *ctx, size_t size, size_t align, void **va_p)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUdeviceptr va = 0;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemAddressReserve(&va, size, align, 0, 0);
    err = cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                           "cuMemAddressReserve of %zu bytes (alignment %zu)",
                           size, align);
    if (!err)
        *va_p = (void *)(uintptr_t)va;
    return err;
}

static int cuda_unreserve(void *ctx, void *va, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemAddressFree of [%p, +%zu)", va, size);
}

/* PORTABLE: page-locked for every context, hence every device. */
static int cuda_host_register(void *ctx, void *p, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE);
    cuda_ctx_leave(&c->api, c->pctx[ANY_DEVICE], saved);
    /* The caller goes on without it (copies are slower): a warning. */
    return res == CUDA_SUCCESS
               ? 0
               : cuda_fail(&c->api, res, UMP_LOG_WARN,
                           "cuMemHostRegister of [%p, +%zu)", p, size);
}

static int cuda_host_unregister(void *ctx, void *p)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemHostUnregister(p);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemHostUnregister of %p", p);
}

static int cuda_chunk_create(void *ctx, int device, size_t size,
                             ump_handle_t *h_p)
{
    struct cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    CUcontext saved;
    CUresult res;
    bool fd;
    int err;

    if (!device_ok(c, device, "chunk_create"))
        return -EINVAL;
    if (!size || size % c->gran[device]) {
        ump_log_error("cuda: chunk_create: size %zu is not a positive "
                      "multiple of device %d's granularity %zu", size, device,
                      c->gran[device]);
        return -EINVAL;
    }
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    fd = atomic_load_explicit(&c->fd_handles[device], memory_order_relaxed);
    prop.requestedHandleTypes = fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                   : CU_MEM_HANDLE_TYPE_NONE;
    err = cuda_ctx_enter(&c->api, c->pctx[device], &saved);
    if (err)
        return err;
    res = c->api.cuMemCreate(&h, size, &prop, 0);
    /* The attribute can promise what the system then refuses (containers,
     * some virtual machines; NOT_SUPPORTED or NOT_PERMITTED are both seen):
     * sharing is for later, memory is for now. */
    if ((res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_NOT_PERMITTED) &&
        fd) {
        atomic_store_explicit(&c->fd_handles[device], false,
                              memory_order_relaxed);
        ump_log_debug("cuda: device %d refuses shareable handles; chunks "
                      "are created without them", device);
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        res = c->api.cuMemCreate(&h, size, &prop, 0);
    }
    cuda_ctx_leave(&c->api, c->pctx[device], saved);
    if (res != CUDA_SUCCESS)
        return cuda_fail(&c->api, res,
                         res == CUDA_ERROR_OUT_OF_MEMORY ? UMP_LOG_DEBUG
                                                         : UMP_LOG_ERROR,
                         "cuMemCreate of %zu bytes on device %d", size,
                         device);
    *h_p = (ump_handle_t)h;
    return 0;
}

static int cuda_chunk_release(void *ctx, ump_handle_t h)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemRelease((CUmemGenericAllocationHandle)h);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemRelease of handle %#llx",
                            (unsigned long long)h);
}

static int cuda_map(void *ctx, void *va, size_t size, ump_handle_t h)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemMap((CUdeviceptr)(uintptr_t)va, size, 0,
                          (CUmemGenericAllocationHandle)h, 0);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemMap of handle %#llx at [%p, +%zu)",
                            (unsigned long long)h, va, size);
}

static int cuda_unmap(void *ctx, void *va, size_t size)
{
    struct cuda_ctx *c = ctx;
    CUcontext saved;
    CUresult res;
    int err;

    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemUnmap((CUdeviceptr)(uintptr_t)va, size);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemUnmap of [%p, +%zu)", va, size);
}

/* Read-write descriptors for the listed devices into desc[0..ndevices);
 * false (logged by device_ok) when one is not a device of the pool. */
static bool device_access(struct cuda_ctx *c, CUmemAccessDesc *desc,
                          const int *devices, int ndevices, const char *op)
{
    for (int i = 0; i < ndevices; i++) {
        if (!device_ok(c, devices[i], op))
            return false;
        desc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[i].location.id = devices[i];
        desc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return true;
}

/* One call for the whole range: the driver charges per handle, not per
 * call, but every call also has a fixed cost. */
static int cuda_set_access(void *ctx, void *va, size_t size,
                           const int *devices, int ndevices)
{
    struct cuda_ctx *c = ctx;
    CUmemAccessDesc desc[UMP_MAX_DEVICES];
    CUcontext saved;
    CUresult res;
    int err;

    if (!devices || ndevices <= 0 || ndevices > c->ndev) {
        ump_log_error("cuda: set_access: %d devices given (have %d)",
                      ndevices, c->ndev);
        return -EINVAL;
    }
    memset(desc, 0, sizeof(desc));
    if (!device_access(c, desc, devices, ndevices, "set_access"))
        return -EINVAL;
    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                (size_t)ndevices);
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemSetAccess of [%p, +%zu) for %d devices",
                            va, size, ndevices);
}

#if CUDA_VERSION >= CUDA_HOST_VMM_VERSION

/* False, logged, when the driver predates host memory in VMM. */
static bool host_vmm_ok(const struct cuda_ctx *c, const char *op)
{
    if (c->api.driver_version >= CUDA_HOST_VMM_VERSION)
        return true;
    ump_log_error("cuda: %s: CUDA driver %d.%d has no pinned host memory in "
                  "virtual memory management (needs %d.%d)", op,
                  c->api.driver_version / 1000,
                  c->api.driver_version % 1000 / 10,
                  CUDA_HOST_VMM_VERSION / 1000,
                  CUDA_HOST_VMM_VERSION % 1000 / 10);
    return false;
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

static int cuda_host_chunk_create(void *ctx, int numa_node, size_t size,
                                  ump_handle_t *h_p)
{
    struct cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUcontext saved;
    CUresult res;
    int err;

    if (!host_vmm_ok(c, "host_chunk_create"))
        return -ENOTSUP;
    if (numa_node < -1 || numa_node >= c->nnuma) {
        ump_log_error("cuda: host_chunk_create: no NUMA node %d (have %d)",
                      numa_node, c->nnuma);
        return -EINVAL;
    }
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = numa_node < 0 ? CU_MEM_LOCATION_TYPE_HOST
                                       : CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = numa_node < 0 ? 0 : numa_node;
    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemGetAllocationGranularity(
        &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (res != CUDA_SUCCESS) {
        cuda_ctx_leave(&c->api, c->pctx[ANY_DEVICE], saved);
        return cuda_fail(&c->api, res, UMP_LOG_ERROR,
                         "cuMemGetAllocationGranularity of host node %d",
                         numa_node);
    }
    if (!size || !gran || size % gran) {
        cuda_ctx_leave(&c->api, c->pctx[ANY_DEVICE], saved);
        ump_log_error("cuda: host_chunk_create: size %zu is not a positive "
                      "multiple of host node %d's granularity %zu", size,
                      numa_node, gran);
        return -EINVAL;
    }
    res = host_create(c, &prop, size, &h);
    cuda_ctx_leave(&c->api, c->pctx[ANY_DEVICE], saved);
    /* Out of pinnable memory is the host tier being full: debug only. */
    if (res != CUDA_SUCCESS)
        return cuda_fail(&c->api, res,
                         res == CUDA_ERROR_OUT_OF_MEMORY ? UMP_LOG_DEBUG
                                                         : UMP_LOG_ERROR,
                         "cuMemCreate of %zu bytes on host node %d", size,
                         numa_node);
    *h_p = (ump_handle_t)h;
    return 0;
}

/* One call: a descriptor per device, and the CPU's last. Should the driver
 * refuse the CPU's location type, the other one is tried, and the one that
 * works is kept for the next calls. */
static int cuda_set_access_host(void *ctx, void *va, size_t size,
                                const int *devices, int ndevices)
{
    struct cuda_ctx *c = ctx;
    CUmemAccessDesc desc[UMP_MAX_DEVICES + 1];
    CUmemLocationType cpu, other;
    CUcontext saved;
    CUresult res;
    int err;

    if (!host_vmm_ok(c, "set_access_host"))
        return -ENOTSUP;
    if (ndevices < 0 || ndevices > c->ndev || (ndevices && !devices)) {
        ump_log_error("cuda: set_access_host: %d devices given (have %d)",
                      ndevices, c->ndev);
        return -EINVAL;
    }
    memset(desc, 0, sizeof(desc));
    if (!device_access(c, desc, devices, ndevices, "set_access_host"))
        return -EINVAL;
    cpu = (CUmemLocationType)atomic_load_explicit(&c->cpu_access_type,
                                                  memory_order_relaxed);
    other = cpu == CPU_ACCESS_FIRST ? CPU_ACCESS_SECOND : CPU_ACCESS_FIRST;
    desc[ndevices].location.type = cpu;
    desc[ndevices].location.id = 0; /* ignored for host locations */
    desc[ndevices].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    err = cuda_ctx_enter(&c->api, c->pctx[ANY_DEVICE], &saved);
    if (err)
        return err;
    res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                (size_t)ndevices + 1);
    if (res == CUDA_ERROR_INVALID_VALUE) {
        desc[ndevices].location.type = other;
        res = c->api.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, desc,
                                    (size_t)ndevices + 1);
        if (res == CUDA_SUCCESS) {
            atomic_store_explicit(&c->cpu_access_type, (int)other,
                                  memory_order_relaxed);
            ump_log_debug("cuda: the CPU's access to host chunks is set with "
                          "location type %d", (int)other);
        }
    }
    return cuda_leave_check(c, c->pctx[ANY_DEVICE], saved, res,
                            "cuMemSetAccess of [%p, +%zu) for %d devices and "
                            "the CPU (host memory)", va, size, ndevices);
}

#else /* cuda.h older than 12.2: no host locations to ask for */

static int cuda_host_chunk_create(void *ctx, int numa_node, size_t size,
                                  ump_handle_t *h_p)
{
    (void)ctx;
    (void)numa_node;
    (void)size;
    (void)h_p;
    ump_log_error("cuda: host_chunk_create: built with a cuda.h older than "
                  "12.2, which has no pinned host memory in VMM");
    return -ENOTSUP;
}

static int cuda_set_access_host(void *ctx, void *va, size_t size,
                                const int *devices, int ndevices)
{
    (void)ctx;
    (void)va;
    (void)size;
    (void)devices;
    (void)ndevices;
    ump_log_error("cuda: set_access_host: built with a cuda.h older than "
                  "12.2, which has no pinned host memory in VMM");
    return -ENOTSUP;
}

#endif /* CUDA_VERSION >= CUDA_HOST_VMM_VERSION */

/* --- streams ----------------------------------------------------------- */

/* NULL and the special handles CU_STREAM_LEGACY and CU_STREAM_PER_THREAD
 * (what cudaStreamLegacy and cudaStreamPerThread are) name a default stream
 * of the calling thread's context rather than a stream object. */
static bool default_stream(CUstream stream)
{
    return (uintptr_t)stream <= (uintptr_t)CU_STREAM_PER_THREAD;
}

/* Makes current the context stream's work runs in (for a default stream,
 * the caller's current context, else device 0's) and returns it in
 * *sctx_p, and the one it replaced in *saved_p. */
static int stream_enter(struct cuda_ctx *c, CUstream stream,
                        CUcontext *sctx_p, CUcontext *saved_p)
{
    const struct cuda_api *api = &c->api;
    CUcontext sctx = NULL;
    CUresult res;

    if (!default_stream(stream))
        res = api->cuStreamGetCtx(stream, &sctx);
    else
        res = api->cuCtxGetCurrent(&sctx);
    if (res != CUDA_SUCCESS)
        return cuda_fail(api, res, UMP_LOG_ERROR, "%s of stream %p",
                         default_stream(stream) ? "cuCtxGetCurrent"
                                                : "cuStreamGetCtx",
                         (void *)stream);
    if (!sctx)
        sctx = c->pctx[ANY_DEVICE];
    *sctx_p = sctx;
    return cuda_ctx_enter(api, sctx, saved_p);
}

static int cuda_stream_create(void *ctx, int device, void **stream_p)
{
    struct cuda_ctx *c = ctx;
    struct cuda_stream *node;
    CUstream s = NULL;
    CUcontext saved;
    CUresult res;
    int err;

    if (!device_ok(c, device, "stream_create"))
        return -EINVAL;
    node = malloc(sizeof(*node));
    if (!node) {
        ump_log_error("cuda: out of host memory for a stream");
        return -ENOMEM;
    }
    err = cuda_ctx_enter(&c->api, c->pctx[device], &saved);
    if (err)
        goto err_free;
    res = c->api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    cuda_ctx_leave(&c->api, c->pctx[device], saved);
    if (res != CUDA_SUCCESS) {
        err = cuda_fail(&c->api, res, UMP_LOG_ERROR,
                        "cuStreamCreate on device %d", device);
        goto err_free;
    }
    node->s = s;
    pthread_mutex_lock(&c->lock);
    node->next = c->streams;
    c->streams = node;
    pthread_mutex_unlock(&c->lock);
    *stream_p = s;
    return 0;

err_free:
    free(node);
    return err;
}

static int cuda_stream_destroy(void *ctx, void *stream)
{
    struct cuda_ctx *c = ctx;
    struct cuda_stream **pp, *node;
    CUresult res;

    pthread_mutex_lock(&c->lock);
    for (pp = &c->streams; (node = *pp); pp = &node->next)
        if (node->s == stream)
            break;
    if (node)
        *pp = node->next;
    pthread_mutex_unlock(&c->lock);
    if (!node) {
        ump_log_error("cuda: stream_destroy: stream %p was not created by "
                      "this pool", stream);
        return -EINVAL;
    }
    free(node);
    CUcontext sctx, saved;
    int err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuStreamDestroy(stream);
    return cuda_leave_check(c, sctx, saved, res, "cuStreamDestroy of stream %p",
                            stream);
}

static int cuda_stream_sync(void *ctx, void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuStreamSynchronize(stream);
    return cuda_leave_check(c, sctx, saved, res,
                            "cuStreamSynchronize of stream %p", stream);
}

static int cuda_memcpy_async(void *ctx, void *dst, const void *src,
                             size_t size, void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    if (!size)
        return 0;
    err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    /* Unified addressing: the driver tells host from device pointers. */
    res = c->api.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                               (CUdeviceptr)(uintptr_t)src, size, stream);
    return cuda_leave_check(c, sctx, saved, res,
                            "cuMemcpyAsync of %zu bytes from %p to %p",
                            size, src, dst);
}

static int cuda_memset_async(void *ctx, void *dst, int value, size_t size,
                             void *stream)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    if (!size)
        return 0;
    err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst,
                                 (unsigned char)value, size, stream);
    return cuda_leave_check(c, sctx, saved, res,
                            "cuMemsetD8Async of %zu bytes at %p", size, dst);
}

static int cuda_host_func(void *ctx, void *stream, void (*fn)(void *),
                          void *arg)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    res = c->api.cuLaunchHostFunc(stream, fn, arg);
    return cuda_leave_check(c, sctx, saved, res,
                            "cuLaunchHostFunc on stream %p", stream);
}

/* --- events ------------------------------------------------------------ */

/* No driver call: the CUevent waits for the first record, which knows the
 * context. An event never recorded reads as complete, as in CUDA. */
static int cuda_event_create(void *ctx, void **event_p)
{
    struct cuda_ctx *c = ctx;
    struct cuda_event *e = calloc(1, sizeof(*e));

    if (!e) {
        ump_log_error("cuda: out of host memory for an event");
        return -ENOMEM;
    }
    pthread_mutex_lock(&c->lock);
    e->next = c->events;
    if (c->events)
        c->events->prev = e;
    c->events = e;
    pthread_mutex_unlock(&c->lock);
    *event_p = e;
    return 0;
}

static int cuda_event_destroy(void *ctx, void *event)
{
    struct cuda_ctx *c = ctx;
    struct cuda_event *e = event;
    CUresult res = CUDA_SUCCESS;

    if (!e)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    if (e->prev)
        e->prev->next = e->next;
    else
        c->events = e->next;
    if (e->next)
        e->next->prev = e->prev;
    pthread_mutex_unlock(&c->lock);
    if (e->ev) {
        CUcontext saved;
        int err = cuda_ctx_enter(&c->api, e->ctx, &saved);
        if (!err) {
            res = c->api.cuEventDestroy(e->ev);
            cuda_ctx_leave(&c->api, e->ctx, saved);
        }
    }
    free(e);
    if (res != CUDA_SUCCESS)
        return cuda_fail(&c->api, res, UMP_LOG_ERROR, "cuEventDestroy");
    return 0;
}

/* The caller serialises the uses of one event (the pool holds its lock). */
static int cuda_event_record(void *ctx, void *event, void *stream)
{
    struct cuda_ctx *c = ctx;
    struct cuda_event *e = event;
    CUcontext sctx, saved;
    CUresult res;
    int err;

    err = stream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    if (e->ev && e->ctx != sctx) {
        res = c->api.cuEventDestroy(e->ev);
        if (res != CUDA_SUCCESS) /* its context may be gone: drop it */
            cuda_fail(&c->api, res, UMP_LOG_DEBUG, "cuEventDestroy of an "
                      "event moving to another context");
        e->ev = NULL;
    }
    if (!e->ev) {
        res = c->api.cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING);
        if (res != CUDA_SUCCESS) {
            e->ev = NULL;
            err = cuda_fail(&c->api, res, UMP_LOG_ERROR, "cuEventCreate");
            goto out;
        }
        e->ctx = sctx;
    }
    res = c->api.cuEventRecord(e->ev, stream);
    if (res != CUDA_SUCCESS)
        err = cuda_fail(&c->api, res, UMP_LOG_ERROR,
                        "cuEventRecord on stream %p", stream);
out:
    cuda_ctx_leave(&c->api, sctx, saved);
    return err;
}

/* Asks whether an event's work is done (wait: waits for it). The driver
 * promises event calls from another device's context, not from none: the
 * event's own context is made current. */
static int event_wait(struct cuda_ctx *c, struct cuda_event *e, bool wait)
{
    CUcontext saved;
    if (!e->ev)
        return 0;
    int err = cuda_ctx_enter(&c->api, e->ctx, &saved);
    if (err)
        return err;
    CUresult res = wait ? c->api.cuEventSynchronize(e->ev)
                        : c->api.cuEventQuery(e->ev);
    if (res == CUDA_ERROR_NOT_READY && !wait) {
        cuda_ctx_leave(&c->api, e->ctx, saved);
        return -EAGAIN;
    }
    return cuda_leave_check(c, e->ctx, saved, res, "%s",
                            wait ? "cuEventSynchronize" : "cuEventQuery");
}

static int cuda_event_query(void *ctx, void *event)
{
    return event_wait(ctx, event, false);
}

static int cuda_event_sync(void *ctx, void *event)
{
    return event_wait(ctx, event, true);
}

const struct backend_ops cuda_backend_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .close_in_child = cuda_close_in_child,
    .granularity = cuda_granularity,
    .reserve = cuda_reserve,
    .unreserve = cuda_unreserve,
    .chunk_create = cuda_chunk_create,
    .chunk_release = cuda_chunk_release,
    .host_chunk_create = cuda_host_chunk_create,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .set_access = cuda_set_access,
    .set_access_host = cuda_set_access_host,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .host_func = cuda_host_func,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
};

#endif /* HAVE_CUDA_H */
