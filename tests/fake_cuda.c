/*
 * A fake CUDA driver (and the few NVML calls the topology uses), built as a
 * shared library for tests/test_cuda only and loaded by the cuda backend
 * through UMPOOL_CUDA_DRIVER. It exports what libcuda exports for the
 * backend to find (cuDriverGetVersion, cuGetProcAddress_v2) and hands out
 * the rest through cuGetProcAddress, so the backend's loading code runs as
 * it would on a GPU host.
 *
 * Memory is emulated on the CPU as the sim backend does: a reservation is
 * PROT_NONE memory (at the address asked for when that range is aligned
 * and free, else anywhere: a hint, as for the driver), an allocation a
 * memfd, a mapping that memfd MAP_FIXED (still PROT_NONE), access an
 * mprotect. Pinned host memory (HOST_NUMA, HOST locations) is emulated
 * the same way, from a pool of its own; as in the driver, every device may
 * be given access to it, and only host memory may be given to the CPU.
 * Streams run their work before the
 * call returns. It checks what the real driver checks, strictly: a current
 * context where one is needed, events and streams of one context, exact
 * mappings, live handles, and no calls from a forked child or from inside
 * a host function (those are counted, see fake_cuda_count). It also
 * refuses a cuMemSetAccess naming one device twice (CUDA_ERROR_INVALID_
 * VALUE, counted as "access_dups"): cuda.h does not say what the driver
 * does with that, so the backend must never ask it, and the fake makes
 * sure (cuda_virtual_devices turns several pool devices into one GPU).
 *
 * UMPOOL_FAKE_CUDA, read by cuDriverGetVersion and cuInit (so each pool
 * the backend opens sees the current value), is a comma-separated list:
 *   driver=N      driver version (default 13000)
 *   devices=N     device count, 0..8 (default 1; 0: cuInit finds none)
 *   mem=N         MiB per device (default 64)
 *   novmm         devices say they do not support VMM
 *   nofd          devices advertise file descriptor handles, cuMemCreate
 *                 refuses them
 *   nopeer        no peer access between devices
 *   nopeer=I-J    no peer access between devices I and J only (the others
 *                 have it: peer access need not be transitive)
 *   hostmem=N     MiB of pinnable host memory, all nodes together (default
 *                 64)
 *   hostgran=N    MiB of host memory granularity (default 2)
 *   cpuhost       cuMemSetAccess names the CPU with a HOST location for
 *                 every host allocation (by default, as cuda.h documents,
 *                 the CPU's location type must be the allocation's own:
 *                 HOST_NUMA for HOST_NUMA memory, HOST for HOST memory)
 *   nohostnuma    devices say 0 to HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_
 *                 SUPPORTED (host chunks on a NUMA node)
 *   nohostnuma=D  only device D says 0 to it (the others 1)
 *   nohostvmm     devices say 0 to HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
 *                 (host chunks without a node)
 *   hostnuma=N    devices say N to HOST_NUMA_ID (by default the attribute
 *                 is unknown, as to drivers before 12.2)
 *   nocpu         device memory stays PROT_NONE to the CPU after
 *                 cuMemSetAccess, as on a GPU: a program that loads or
 *                 stores it gets SIGSEGV. The fake's own copies, memsets
 *                 and kernels open the device mappings they touch for the
 *                 length of the call (under the lock). Host allocations
 *                 are the CPU's where a cuMemSetAccess named the CPU for
 *                 them, and PROT_NONE to it elsewhere (mapped for the
 *                 devices only). Off by default: some tests (and the
 *                 stand-in NCCL of tests/mpi/fake_nccl.c) read device
 *                 memory directly.
 *
 * As a real driver, the fake answers CUDA_ERROR_INVALID_VALUE to an
 * attribute newer than its driver version (see attr_since).
 *   fail=CALL:N:CODE  the Nth call of CALL ("cuMemMap") from now fails
 *                 with CUresult CODE
 *   evdelay=N     a recorded event is not ready for its first N queries
 *   nvswitch=N    NVML: N active links from every device to an NVSwitch
 *   nvpair=N      NVML: N links between devices 2k and 2k+1
 *   nvver=N       NVML: the links' version (default 6, NVLink 4.0)
 *   nohint        cuMemAddressReserve places every range itself, never at
 *                 the address asked for (a driver that takes no hints)
 *
 * NVML on its own (umpool-inspect serve's GPU gauges load this library as
 * libnvidia-ml): nvmlInit_v2 reads UMPOOL_FAKE_CUDA when nothing has read
 * it yet, and device d says utilization gpu 10+d %, memory 20+d %,
 * temperature 40+d degrees, UUID GPU-00000000-0000-0000-0000-0000000000dd
 * (d in hex), its bus id as cuDeviceGetPCIBusId's. fail=CALL:N:CODE works
 * for nvmlDeviceGetUtilizationRates, nvmlDeviceGetTemperature and
 * nvmlDeviceGetUUID (CODE an nvmlReturn_t: 3 is NOT_SUPPORTED).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "coll/kernel.h"
#include "coll/reduce.h"

#define FAKE_MAX_DEV 8
#define FAKE_NUMA 8 /* host NUMA nodes */
#define FAKE_GRAN ((size_t)2 << 20)
#define FAKE_NVLINKS 18

/* --- configuration ------------------------------------------------------ */

static struct fake_config {
    int driver, devices;
    size_t mem, hostmem, hostgran;
    bool novmm, nofd, nopeer, cpuhost, nohostvmm, nocpu, nohint;
    int nopeer_i, nopeer_j; /* nopeer=I-J; -1: none */
    int nohostnuma; /* -2: none; -1: every device; else that device */
    int hostnuma; /* -2: HOST_NUMA_ID unknown */
    char fail_call[64];
    int fail_nth, fail_code;
    int evdelay;
    int nvswitch, nvpair;
    unsigned nvver;
} cfg;
static bool cfg_loaded; /* load_config ran */

static void load_config(void)
{
    const char *env = getenv("UMPOOL_FAKE_CUDA");
    char buf[512], *save = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg_loaded = true;
    cfg.driver = 13000;
    cfg.devices = 1;
    cfg.nopeer_i = cfg.nopeer_j = -1;
    cfg.mem = (size_t)64 << 20;
    cfg.hostmem = (size_t)64 << 20;
    cfg.hostgran = (size_t)2 << 20;
    cfg.nvver = 6;
    cfg.hostnuma = -2;
    cfg.nohostnuma = -2;
    snprintf(buf, sizeof(buf), "%s", env ? env : "");
    for (char *w = strtok_r(buf, ",", &save); w;
         w = strtok_r(NULL, ",", &save)) {
        char call[64];
        int n = 0, code = 0;

        if (sscanf(w, "driver=%d", &cfg.driver) == 1 ||
            sscanf(w, "evdelay=%d", &cfg.evdelay) == 1 ||
            sscanf(w, "nvswitch=%d", &cfg.nvswitch) == 1 ||
            sscanf(w, "nvpair=%d", &cfg.nvpair) == 1 ||
            sscanf(w, "nvver=%u", &cfg.nvver) == 1 ||
            sscanf(w, "hostnuma=%d", &cfg.hostnuma) == 1 ||
            sscanf(w, "nohostnuma=%d", &cfg.nohostnuma) == 1)
            continue;
        if (sscanf(w, "devices=%d", &cfg.devices) == 1) {
            if (cfg.devices > FAKE_MAX_DEV)
                cfg.devices = FAKE_MAX_DEV;
        } else if (sscanf(w, "mem=%d", &n) == 1) {
            cfg.mem = (size_t)n << 20;
        } else if (sscanf(w, "hostmem=%d", &n) == 1) {
            cfg.hostmem = (size_t)n << 20;
        } else if (sscanf(w, "hostgran=%d", &n) == 1 && n > 0) {
            cfg.hostgran = (size_t)n << 20;
        } else if (sscanf(w, "fail=%63[^:]:%d:%d", call, &n, &code) == 3) {
            snprintf(cfg.fail_call, sizeof(cfg.fail_call), "%s", call);
            cfg.fail_nth = n;
            cfg.fail_code = code;
        } else if (strcmp(w, "novmm") == 0) {
            cfg.novmm = true;
        } else if (strcmp(w, "nofd") == 0) {
            cfg.nofd = true;
        } else if (strcmp(w, "nopeer") == 0) {
            cfg.nopeer = true;
        } else if (sscanf(w, "nopeer=%d-%d", &n, &code) == 2) {
            cfg.nopeer_i = n;
            cfg.nopeer_j = code;
        } else if (strcmp(w, "cpuhost") == 0) {
            cfg.cpuhost = true;
        } else if (strcmp(w, "nohostnuma") == 0) {
            cfg.nohostnuma = -1;
        } else if (strcmp(w, "nohostvmm") == 0) {
            cfg.nohostvmm = true;
        } else if (strcmp(w, "nocpu") == 0) {
            cfg.nocpu = true;
        } else if (strcmp(w, "nohint") == 0) {
            cfg.nohint = true;
        } else {
            fprintf(stderr, "fake_cuda: unknown setting '%s'\n", w);
        }
    }
}

/* --- objects ------------------------------------------------------------ */

/* The driver's opaque types, completed here. */
struct CUctx_st {
    int dev;
    int refs;
};

struct CUstream_st {
    struct CUctx_st *ctx;
    struct CUstream_st *next;
};

struct CUevent_st {
    struct CUctx_st *ctx;
    int pending; /* queries left that answer "not ready" */
    struct CUevent_st *next;
};

struct fake_alloc {
    int dev, fd, refs; /* refs: the handle and each mapping */
    size_t size;
    bool host;         /* pinned host memory; dev is unused */
    CUmemLocation loc; /* as created */
    int retained;      /* references cuMemRetainAllocationHandle handed out */
    bool released;
    bool shareable;    /* made with a POSIX file descriptor handle type */
    bool imported;     /* another process's memory: not counted here */
    struct fake_alloc *next;
};

struct fake_resv {
    uintptr_t va;
    size_t size;
    struct fake_resv *next;
};

struct fake_map {
    uintptr_t va;
    size_t size;
    struct fake_alloc *a;
    bool access;
    bool cpu; /* a host allocation's mapping that a cuMemSetAccess gave
                 the CPU (HOST or HOST_NUMA descriptor) */
    struct fake_map *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st ctxs[FAKE_MAX_DEV];
static struct CUstream_st *streams;
static struct CUevent_st *events;
static struct fake_alloc *allocs;
static struct fake_resv *resvs;
static struct fake_map *maps;
static size_t used[FAKE_MAX_DEV], used_host;
static bool initialized;
static pid_t init_pid;
static long n_child_calls, n_hostfn_calls, n_creates, n_fd_creates, n_abi;
static long n_set_access, n_cpu_refused, last_cpu_type, last_host_node = -1;
static long n_access_dups, last_access_devs, last_dev_loc = -1;
static long n_launches, n_waits, n_modules, n_syncs;
static _Thread_local struct CUctx_st *current;
static _Thread_local bool in_host_func;

/* Every entry point but the version and error-name queries starts here:
 * takes the lock on success. */
static CUresult begin(void)
{
    if (in_host_func) {
        __atomic_add_fetch(&n_hostfn_calls, 1, __ATOMIC_RELAXED);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if (initialized && getpid() != init_pid) {
        __atomic_add_fetch(&n_child_calls, 1, __ATOMIC_RELAXED);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    return CUDA_SUCCESS;
}

static CUresult end(CUresult res)
{
    pthread_mutex_unlock(&lock);
    return res;
}

#define BEGIN()                                                                \
    do {                                                                       \
        CUresult begin_res_ = begin();                                         \
        if (begin_res_ != CUDA_SUCCESS)                                        \
            return begin_res_;                                                 \
    } while (0)

/* The injected failure of call, when it is due. Lock held. */
static CUresult injected(const char *call)
{
    if (cfg.fail_nth <= 0 || strcmp(call, cfg.fail_call) != 0)
        return CUDA_SUCCESS;
    return --cfg.fail_nth == 0 ? (CUresult)cfg.fail_code : CUDA_SUCCESS;
}

static bool dev_ok(int dev)
{
    return dev >= 0 && dev < cfg.devices;
}

static bool numa_ok(int node)
{
    return node >= 0 && node < FAKE_NUMA;
}

static bool stream_ok(CUstream s)
{
    for (struct CUstream_st *p = streams; p; p = p->next)
        if (p == s)
            return true;
    return false;
}

static bool event_ok(CUevent e)
{
    for (struct CUevent_st *p = events; p; p = p->next)
        if (p == e)
            return true;
    return false;
}

static struct fake_alloc *alloc_of(CUmemGenericAllocationHandle h)
{
    for (struct fake_alloc *a = allocs; a; a = a->next)
        if ((uintptr_t)a == (uintptr_t)h && !a->released)
            return a;
    return NULL;
}

static struct fake_resv *resv_holding(uintptr_t va, size_t size)
{
    for (struct fake_resv *r = resvs; r; r = r->next)
        if (va >= r->va && va + size <= r->va + r->size)
            return r;
    return NULL;
}

static struct fake_map *map_at(uintptr_t va)
{
    for (struct fake_map *m = maps; m; m = m->next)
        if (va >= m->va && va < m->va + m->size)
            return m;
    return NULL;
}

/* [va, va + size) is wholly mapped (and accessible, if asked). */
static bool range_mapped(uintptr_t va, size_t size, bool need_access)
{
    for (uintptr_t p = va; p < va + size;) {
        struct fake_map *m = map_at(p);

        if (!m || (need_access && !m->access))
            return false;
        p = m->va + m->size;
    }
    return true;
}

/* Memory the CPU may touch for a copy: outside every reservation, or
 * mapped with access. */
static bool range_usable(uintptr_t p, size_t n)
{
    for (struct fake_resv *r = resvs; r; r = r->next) {
        uintptr_t lo = p > r->va ? p : r->va;
        uintptr_t hi = p + n < r->va + r->size ? p + n : r->va + r->size;

        if (lo < hi && !range_mapped(lo, hi - lo, true))
            return false;
    }
    return true;
}

/* nocpu: gives the CPU prot on the device mappings (with access) that
 * [p, p + n) touches, whole mappings; false when mprotect fails. Nothing
 * without nocpu (device memory is read-write then). Lock held. */
static bool cpu_window(uintptr_t p, size_t n, int prot)
{
    if (!cfg.nocpu || !n)
        return true;
    for (struct fake_map *m = maps; m; m = m->next)
        if (!(m->a->host && m->cpu) && m->access && p < m->va + m->size &&
            m->va < p + n && mprotect((void *)m->va, m->size, prot) != 0)
            return false;
    return true;
}

static void alloc_put(struct fake_alloc *a)
{
    if (--a->refs > 0)
        return;
    for (struct fake_alloc **pp = &allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    if (a->imported)
        ;
    else if (a->host)
        used_host -= a->size;
    else
        used[a->dev] -= a->size;
    close(a->fd);
    free(a);
}

/* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: the current context's. */
static bool default_stream(CUstream s)
{
    return (uintptr_t)s <= (uintptr_t)CU_STREAM_PER_THREAD;
}

/* The context a stream's work runs in; NULL when there is none. */
static struct CUctx_st *stream_ctx(CUstream s)
{
    return default_stream(s) ? current : s->ctx;
}

/* A stream given to an operation: live, and its context current (a
 * default stream needs a current context). Lock held. */
static CUresult stream_check(CUstream s)
{
    if (!default_stream(s) && !stream_ok(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!current || stream_ctx(s) != current)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* --- initialisation, devices, errors ------------------------------------ */

static CUresult fake_cuInit(unsigned flags)
{
    if (in_host_func)
        return CUDA_ERROR_NOT_PERMITTED;
    load_config();
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (cfg.devices <= 0)
        return CUDA_ERROR_NO_DEVICE;
    if (!initialized) {
        initialized = true;
        init_pid = getpid();
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *version)
{
    load_config();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = cfg.driver;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult res;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     "invalid resource handle"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED",
     "resource already mapped"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED",
     "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     "operation not supported"},
};

static CUresult fake_cuGetErrorName(CUresult res, const char **name)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].res == res) {
            *name = errors[i].name;
            return CUDA_SUCCESS;
        }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuGetErrorString(CUresult res, const char **text)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].res == res) {
            *text = errors[i].text;
            return CUDA_SUCCESS;
        }
    *text = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuDeviceGetCount(int *count)
{
    BEGIN();
    *count = cfg.devices;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGet(CUdevice *dev, int ordinal)
{
    BEGIN();
    if (!dev_ok(ordinal))
        return end(CUDA_ERROR_INVALID_DEVICE);
    *dev = ordinal;
    return end(CUDA_SUCCESS);
}

/* The first driver version that knows the attribute; 0 for those the
 * fake answers whatever its version. The real driver answers
 * CUDA_ERROR_INVALID_VALUE to an attribute it does not know. */
static int attr_since(CUdevice_attribute attr)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        /* Named in cuda.h well after HOST_NUMA memory itself (12.2); 12.4
         * is a plausible first driver to know it, and leaves 12.2 and 12.3
         * as the drivers that have the memory and lack the attribute. */
        return 12040;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        return 13000; /* came with cuda.h 13.0 */
    default:
        return 0;
    }
}

static CUresult fake_cuDeviceGetAttribute(int *v, CUdevice_attribute attr,
                                          CUdevice dev)
{
    BEGIN();
    if (!dev_ok(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    if (cfg.driver < attr_since(attr))
        return end(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *v = !cfg.novmm;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        *v = 1000000; /* kHz */
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        *v = 256; /* with the clock: 64 GB/s */
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *v = cfg.nohostnuma != -1 && cfg.nohostnuma != dev;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *v = !cfg.nohostvmm;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        if (cfg.hostnuma < -1)
            return end(CUDA_ERROR_INVALID_VALUE);
        *v = cfg.hostnuma;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    BEGIN();
    if (!dev_ok(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "NVIDIA Fake GPU");
    return end(CUDA_SUCCESS);
}

/* Buses 0x1a, 0x2a, ...: upper case, as the driver writes them. */
static unsigned fake_bus(int dev)
{
    return 0x1a + 0x10 * (unsigned)dev;
}

static CUresult fake_cuDeviceGetPCIBusId(char *bus, int len, CUdevice dev)
{
    BEGIN();
    if (!dev_ok(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    snprintf(bus, (size_t)len, "0000:%02X:00.0", fake_bus(dev));
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus)
{
    unsigned dom, b, d, f;
    if (!dev || !bus || sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f) != 4)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < cfg.devices; i++)
        if (dom == 0 && b == fake_bus(i) && d == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* May device a map device b's memory (a != b)? */
static bool peers(int a, int b)
{
    return !cfg.nopeer && !(a == cfg.nopeer_i && b == cfg.nopeer_j) &&
           !(a == cfg.nopeer_j && b == cfg.nopeer_i);
}

static CUresult fake_cuDeviceCanAccessPeer(int *can, CUdevice dev,
                                           CUdevice peer)
{
    BEGIN();
    if (!dev_ok(dev) || !dev_ok(peer))
        return end(CUDA_ERROR_INVALID_DEVICE);
    *can = dev != peer && peers(dev, peer);
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGetP2PAttribute(int *v,
                                             CUdevice_P2PAttribute attr,
                                             CUdevice src, CUdevice dst)
{
    BEGIN();
    if (!dev_ok(src) || !dev_ok(dst) || src == dst)
        return end(CUDA_ERROR_INVALID_DEVICE);
    if (attr == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)
        *v = 0;
    else if (attr == CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)
        *v = peers(src, dst);
    else
        return end(CUDA_ERROR_INVALID_VALUE);
    return end(CUDA_SUCCESS);
}

/* --- contexts ------------------------------------------------------------ */

static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    BEGIN();
    if (!dev_ok(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    ctxs[dev].dev = dev;
    ctxs[dev].refs++;
    *ctx = &ctxs[dev];
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    BEGIN();
    if (!dev_ok(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    if (ctxs[dev].refs <= 0)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    ctxs[dev].refs--;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuCtxGetCurrent(CUcontext *ctx)
{
    BEGIN();
    *ctx = current;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuCtxSetCurrent(CUcontext ctx)
{
    BEGIN();
    if (ctx && (ctx < &ctxs[0] || ctx >= &ctxs[FAKE_MAX_DEV] ||
                ctx->refs <= 0))
        return end(CUDA_ERROR_INVALID_CONTEXT);
    current = ctx;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemGetInfo(size_t *free_b, size_t *total_b)
{
    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    *free_b = cfg.mem - used[current->dev];
    *total_b = cfg.mem;
    return end(CUDA_SUCCESS);
}

/* --- virtual memory management ------------------------------------------- */

static CUresult fake_cuMemGetAllocationGranularity(
    size_t *gran, const CUmemAllocationProp *prop,
    CUmemAllocationGranularity_flags flags)
{
    BEGIN();
    if (!prop || flags > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return end(CUDA_ERROR_INVALID_VALUE);
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!dev_ok(prop->location.id))
            return end(CUDA_ERROR_INVALID_VALUE);
        *gran = FAKE_GRAN;
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (!numa_ok(prop->location.id))
            return end(CUDA_ERROR_INVALID_VALUE);
        *gran = cfg.hostgran;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        *gran = cfg.hostgran;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    return end(CUDA_SUCCESS);
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Whether [va, va + size) meets a reservation. Lock held. */
static bool resv_overlaps(uintptr_t va, size_t size)
{
    for (struct fake_resv *r = resvs; r; r = r->next)
        if (va < r->va + r->size && r->va < va + size)
            return true;
    return false;
}

static CUresult fake_cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                         size_t align, CUdeviceptr addr,
                                         unsigned long long flags)
{
    struct fake_resv *r;
    uintptr_t raw, va;
    void *p;

    BEGIN();
    if (!size || size % FAKE_GRAN || flags || (align & (align - 1)))
        return end(CUDA_ERROR_INVALID_VALUE);
    if (align < FAKE_GRAN)
        align = FAKE_GRAN;
    r = calloc(1, sizeof(*r));
    if (!r)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    /* The address asked for, as the driver does, when it is aligned and
     * free (no reservation here, no mapping of the process); else, as
     * without one, anywhere: a hint, never an error. */
    if (addr && !cfg.nohint && addr % align == 0 && addr + size > addr &&
        !resv_overlaps((uintptr_t)addr, size)) {
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                     MAP_FIXED_NOREPLACE,
                 -1, 0);
        if (p != MAP_FAILED && (uintptr_t)p == addr) {
            va = (uintptr_t)p;
            goto found;
        }
        if (p != MAP_FAILED)
            munmap(p, size); /* a kernel that took it for a hint */
    }
    p = mmap(NULL, size + align, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(r);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    raw = (uintptr_t)p;
    va = (raw + align - 1) & ~(uintptr_t)(align - 1);
    if (va > raw)
        munmap(p, va - raw);
    if (raw + align > va)
        munmap((void *)(va + size), raw + align - va);
found:
    r->va = va;
    r->size = size;
    r->next = resvs;
    resvs = r;
    *ptr = (CUdeviceptr)va;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    BEGIN();
    for (struct fake_resv **pp = &resvs, *r; (r = *pp); pp = &r->next) {
        if (r->va != (uintptr_t)ptr)
            continue;
        if (r->size != size)
            return end(CUDA_ERROR_INVALID_VALUE);
        for (struct fake_map *m = maps; m; m = m->next)
            if (m->va >= r->va && m->va < r->va + r->size)
                return end(CUDA_ERROR_INVALID_VALUE);
        *pp = r->next;
        munmap((void *)r->va, r->size);
        free(r);
        return end(CUDA_SUCCESS);
    }
    return end(CUDA_ERROR_INVALID_VALUE);
}

static CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    struct fake_alloc *a;
    bool host = false;
    CUresult res;
    int dev;

    BEGIN();
    res = injected("cuMemCreate");
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!prop || flags || !size ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
         prop->requestedHandleTypes !=
             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return end(CUDA_ERROR_INVALID_VALUE);
    dev = prop->location.id;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (size % FAKE_GRAN)
            return end(CUDA_ERROR_INVALID_VALUE);
        if (!dev_ok(dev))
            return end(CUDA_ERROR_INVALID_DEVICE);
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (size % cfg.hostgran || !numa_ok(dev))
            return end(CUDA_ERROR_INVALID_VALUE);
        host = true;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        /* cuda.h: HOST allocations cannot be shared. */
        if (size % cfg.hostgran || prop->requestedHandleTypes)
            return end(CUDA_ERROR_INVALID_VALUE);
        host = true;
        break;
    default: /* HOST_NUMA_CURRENT included, as documented */
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    if (prop->requestedHandleTypes && cfg.nofd)
        return end(CUDA_ERROR_NOT_SUPPORTED);
    if (host ? size > cfg.hostmem - used_host : size > cfg.mem - used[dev])
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    a = calloc(1, sizeof(*a));
    if (!a)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    /* Named for its place, which an importer reads back (the driver's
     * own handle carries it). */
    char name[32];
    if (host)
        snprintf(name, sizeof(name), "fake-cuda-host");
    else
        snprintf(name, sizeof(name), "fake-cuda-dev%d", dev);
    a->fd = memfd_create(name, MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) != 0) {
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    a->dev = host ? -1 : dev;
    a->host = host;
    a->loc = prop->location;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        last_host_node = dev;
    else if (!host)
        last_dev_loc = dev;
    a->size = size;
    a->refs = 1;
    a->shareable = prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE;
    a->next = allocs;
    allocs = a;
    if (host)
        used_host += size;
    else
        used[dev] += size;
    n_creates++;
    if (prop->requestedHandleTypes)
        n_fd_creates++;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return end(CUDA_SUCCESS);
}

/* The handle, released or not (references retained by address count). */
static struct fake_alloc *alloc_any(CUmemGenericAllocationHandle h)
{
    for (struct fake_alloc *a = allocs; a; a = a->next)
        if ((uintptr_t)a == (uintptr_t)h)
            return a;
    return NULL;
}

static CUresult fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
    struct fake_alloc *a;

    BEGIN();
    a = alloc_any(h);
    if (!a || (a->released && !a->retained))
        return end(CUDA_ERROR_INVALID_VALUE);
    if (a->retained)
        a->retained--;
    else
        a->released = true;
    alloc_put(a);
    return end(CUDA_SUCCESS);
}

/* The same handle value as the mapping's, one more reference. */
static CUresult fake_cuMemRetainAllocationHandle(
    CUmemGenericAllocationHandle *h, void *addr)
{
    struct fake_map *m;

    BEGIN();
    m = map_at((uintptr_t)addr);
    if (!h || !m)
        return end(CUDA_ERROR_INVALID_VALUE);
    m->a->retained++;
    m->a->refs++;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)m->a;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
    struct fake_alloc *a;

    BEGIN();
    a = alloc_any(h);
    if (!prop || !a || (a->released && !a->retained))
        return end(CUDA_ERROR_INVALID_VALUE);
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location = a->loc;
    if (a->shareable)
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return end(CUDA_SUCCESS);
}

/* The allocation's memfd, a new descriptor of it: as the driver's, a
 * POSIX descriptor that another process imports. */
static CUresult fake_cuMemExportToShareableHandle(
    void *shareable, CUmemGenericAllocationHandle h,
    CUmemAllocationHandleType type, unsigned long long flags)
{
    struct fake_alloc *a;
    int fd;

    BEGIN();
    a = alloc_any(h);
    if (!shareable || flags || !a || (a->released && !a->retained) ||
        type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!a->shareable)
        return end(CUDA_ERROR_NOT_SUPPORTED);
    fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    *(int *)shareable = fd;
    return end(CUDA_SUCCESS);
}

/* A new handle on the memory of an exported descriptor (which stays the
 * caller's): a fake allocation of its size on the device its name says. */
static CUresult fake_cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle *h, void *shareable,
    CUmemAllocationHandleType type)
{
    int fd = (int)(intptr_t)shareable, dev;
    char link[64], name[128];
    struct fake_alloc *a;
    struct stat st;
    ssize_t len;

    BEGIN();
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return end(CUDA_ERROR_INVALID_VALUE);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    len = readlink(link, name, sizeof(name) - 1);
    if (len < 0 || fstat(fd, &st) != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    name[len] = '\0';
    if (sscanf(name, "/memfd:fake-cuda-dev%d ", &dev) != 1 || !dev_ok(dev) ||
        st.st_size <= 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    a = calloc(1, sizeof(*a));
    if (!a)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (a->fd < 0) {
        free(a);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    a->dev = dev;
    a->loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a->loc.id = dev;
    a->size = (size_t)st.st_size;
    a->refs = 1;
    a->shareable = a->imported = true;
    a->next = allocs;
    allocs = a;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle h,
                              unsigned long long flags)
{
    uintptr_t va = (uintptr_t)ptr;
    struct fake_alloc *a;
    struct fake_map *m;
    CUresult res;

    BEGIN();
    res = injected("cuMemMap");
    if (res != CUDA_SUCCESS)
        return end(res);
    a = alloc_of(h);
    if (!a || offset || flags || size != a->size || va % FAKE_GRAN ||
        !resv_holding(va, size))
        return end(CUDA_ERROR_INVALID_VALUE);
    for (m = maps; m; m = m->next)
        if (va < m->va + m->size && m->va < va + size)
            return end(CUDA_ERROR_ALREADY_MAPPED);
    m = calloc(1, sizeof(*m));
    if (!m)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    if (mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) ==
        MAP_FAILED) {
        free(m);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    m->va = va;
    m->size = size;
    m->a = a;
    m->next = maps;
    maps = m;
    a->refs++;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uintptr_t va = (uintptr_t)ptr;
    CUresult res;

    BEGIN();
    res = injected("cuMemUnmap");
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!size || !range_mapped(va, size, false))
        return end(CUDA_ERROR_INVALID_VALUE);
    /* Whole mappings only. */
    for (struct fake_map *m = maps; m; m = m->next)
        if (va < m->va + m->size && m->va < va + size &&
            (m->va < va || m->va + m->size > va + size))
            return end(CUDA_ERROR_INVALID_VALUE);
    if (mmap((void *)va, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
             0) == MAP_FAILED)
        return end(CUDA_ERROR_UNKNOWN);
    for (struct fake_map **pp = &maps, *m; (m = *pp);) {
        if (m->va >= va && m->va < va + size) {
            *pp = m->next;
            alloc_put(m->a);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                    const CUmemAccessDesc *desc, size_t count)
{
    uintptr_t va = (uintptr_t)ptr;
    CUresult res;

    BEGIN();
    n_set_access++;
    res = injected("cuMemSetAccess");
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!desc || !count || !size || !range_mapped(va, size, false))
        return end(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++) {
        CUmemLocationType t = desc[i].location.type;
        bool cpu = t == CU_MEM_LOCATION_TYPE_HOST ||
                   t == CU_MEM_LOCATION_TYPE_HOST_NUMA;

        if ((t != CU_MEM_LOCATION_TYPE_DEVICE && !cpu) ||
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return end(CUDA_ERROR_INVALID_VALUE);
        if (!cpu && !dev_ok(desc[i].location.id))
            return end(CUDA_ERROR_INVALID_DEVICE);
        for (size_t j = 0; j < i; j++) {
            if (!cpu && desc[j].location.type == t &&
                desc[j].location.id == desc[i].location.id) {
                n_access_dups++;
                return end(CUDA_ERROR_INVALID_VALUE);
            }
        }
        for (uintptr_t p = va; p < va + size;) {
            struct fake_map *m = map_at(p);

            /* cuda.h: host access only to host allocations, and HOST_NUMA
             * access only to HOST_NUMA ones. */
            if (cpu && (!m->a->host ||
                        t != (cfg.cpuhost ? CU_MEM_LOCATION_TYPE_HOST
                                          : m->a->loc.type))) {
                n_cpu_refused++;
                return end(CUDA_ERROR_INVALID_VALUE);
            }
            /* Without peer access a device may reach its own memory (and
             * host memory) only. */
            if (!cpu && !m->a->host && m->a->dev != desc[i].location.id &&
                !peers(m->a->dev, desc[i].location.id))
                return end(CUDA_ERROR_INVALID_DEVICE);
            p = m->va + m->size;
        }
    }
    /* nocpu: device memory, and host memory the CPU was never given,
     * stays PROT_NONE (see cpu_window). Access is per location: a call
     * naming devices only leaves the CPU's as it was. */
    bool names_cpu = false;
    for (size_t i = 0; i < count; i++)
        names_cpu |= desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE;
    for (uintptr_t p = va; p < va + size;) {
        struct fake_map *m = map_at(p);
        uintptr_t hi = m->va + m->size < va + size ? m->va + m->size
                                                   : va + size;

        m->cpu |= names_cpu && m->a->host;
        if ((!cfg.nocpu || (m->a->host && m->cpu)) &&
            mprotect((void *)p, hi - p, PROT_READ | PROT_WRITE) != 0)
            return end(CUDA_ERROR_UNKNOWN);
        p = hi;
    }
    last_access_devs = 0;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            last_cpu_type = desc[i].location.type;
        else
            last_access_devs++;
    }
    for (uintptr_t p = va; p < va + size;) {
        struct fake_map *m = map_at(p);

        m->access = true;
        p = m->va + m->size;
    }
    return end(CUDA_SUCCESS);
}

/* --- streams, copies, events --------------------------------------------- */

static CUresult fake_cuStreamCreate(CUstream *s, unsigned flags)
{
    struct CUstream_st *st;

    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
        return end(CUDA_ERROR_INVALID_VALUE);
    st = calloc(1, sizeof(*st));
    if (!st)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    st->ctx = current;
    st->next = streams;
    streams = st;
    *s = st;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuStreamDestroy(CUstream s)
{
    BEGIN();
    for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            free(s);
            return end(CUDA_SUCCESS);
        }
    return end(CUDA_ERROR_INVALID_HANDLE);
}

static CUresult fake_cuStreamSynchronize(CUstream s)
{
    BEGIN();
    CUresult r = stream_check(s);
    if (r == CUDA_SUCCESS)
        n_syncs++;
    return end(r);
}

static CUresult fake_cuStreamGetCtx(CUstream s, CUcontext *ctx)
{
    BEGIN();
    if (!default_stream(s) && !stream_ok(s))
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (!stream_ctx(s))
        return end(CUDA_ERROR_INVALID_CONTEXT);
    *ctx = stream_ctx(s);
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src,
                                   size_t n, CUstream s)
{
    CUresult res;

    BEGIN();
    res = stream_check(s);
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!range_usable((uintptr_t)dst, n) || !range_usable((uintptr_t)src, n))
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!cpu_window(dst, n, PROT_READ | PROT_WRITE) ||
        !cpu_window(src, n, PROT_READ | PROT_WRITE))
        return end(CUDA_ERROR_UNKNOWN);
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    if (!cpu_window(dst, n, PROT_NONE) || !cpu_window(src, n, PROT_NONE))
        return end(CUDA_ERROR_UNKNOWN);
    return end(CUDA_SUCCESS);
}

/* The synchronous copies (umpool-bench's device<->host baseline): the
 * same as cuMemcpyAsync on the legacy stream, which the fake runs before
 * the call returns. */
static CUresult fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    return fake_cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, n, NULL);
}

static CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return fake_cuMemcpyAsync(dst, (CUdeviceptr)(uintptr_t)src, n, NULL);
}

/* Page-locked ranges of ordinary host memory (cuMemHostRegister). */
#define FAKE_MAX_HOSTREG 16
static struct {
    uintptr_t p;
    size_t size;
} hostregs[FAKE_MAX_HOSTREG];

static CUresult fake_cuMemHostRegister(void *p, size_t size, unsigned flags)
{
    uintptr_t a = (uintptr_t)p;
    CUresult res;
    int free_i = -1;

    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (!p || !size || a + size < a ||
        (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE |
                             CU_MEMHOSTREGISTER_DEVICEMAP)))
        return end(CUDA_ERROR_INVALID_VALUE);
    res = injected("cuMemHostRegister");
    if (res != CUDA_SUCCESS)
        return end(res);
    for (int i = 0; i < FAKE_MAX_HOSTREG; i++) {
        if (!hostregs[i].size) {
            free_i = free_i < 0 ? i : free_i;
            continue;
        }
        if (a < hostregs[i].p + hostregs[i].size &&
            hostregs[i].p < a + size)
            return end(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    if (free_i < 0)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    hostregs[free_i].p = a;
    hostregs[free_i].size = size;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemHostUnregister(void *p)
{
    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    for (int i = 0; i < FAKE_MAX_HOSTREG; i++)
        if (hostregs[i].size && hostregs[i].p == (uintptr_t)p) {
            hostregs[i].size = 0;
            return end(CUDA_SUCCESS);
        }
    return end(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

static CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char v,
                                     size_t n, CUstream s)
{
    CUresult res;

    BEGIN();
    res = stream_check(s);
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!range_usable((uintptr_t)dst, n))
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!cpu_window(dst, n, PROT_READ | PROT_WRITE))
        return end(CUDA_ERROR_UNKNOWN);
    memset((void *)(uintptr_t)dst, v, n);
    if (!cpu_window(dst, n, PROT_NONE))
        return end(CUDA_ERROR_UNKNOWN);
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg)
{
    CUresult res;

    BEGIN();
    res = stream_check(s);
    if (res == CUDA_SUCCESS && !fn)
        res = CUDA_ERROR_INVALID_VALUE;
    end(res);
    if (res != CUDA_SUCCESS)
        return res;
    in_host_func = true;
    fn(arg);
    in_host_func = false;
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventCreate(CUevent *e, unsigned flags)
{
    struct CUevent_st *ev;

    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (flags & ~(unsigned)CU_EVENT_DISABLE_TIMING)
        return end(CUDA_ERROR_INVALID_VALUE);
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    ev->ctx = current;
    ev->next = events;
    events = ev;
    *e = ev;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuEventRecord(CUevent e, CUstream s)
{
    CUresult res;

    BEGIN();
    if (!event_ok(e))
        return end(CUDA_ERROR_INVALID_HANDLE);
    res = stream_check(s);
    if (res != CUDA_SUCCESS)
        return end(res);
    /* cuda.h: the event and the stream must be of one context. */
    if (stream_ctx(s) != e->ctx)
        return end(CUDA_ERROR_INVALID_HANDLE);
    e->pending = cfg.evdelay;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuEventQuery(CUevent e)
{
    BEGIN();
    if (!event_ok(e))
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (e->pending > 0) {
        e->pending--;
        return end(CUDA_ERROR_NOT_READY);
    }
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuEventSynchronize(CUevent e)
{
    BEGIN();
    if (!event_ok(e))
        return end(CUDA_ERROR_INVALID_HANDLE);
    e->pending = 0;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuEventDestroy(CUevent e)
{
    BEGIN();
    for (struct CUevent_st **pp = &events; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            free(e);
            return end(CUDA_SUCCESS);
        }
    return end(CUDA_ERROR_INVALID_HANDLE);
}

/* Work runs when queued here: no time passes between two events. */
static CUresult fake_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    BEGIN();
    if (!ms)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!event_ok(a) || !event_ok(b))
        return end(CUDA_ERROR_INVALID_HANDLE);
    *ms = 0;
    return end(CUDA_SUCCESS);
}

/* --- modules and kernels -------------------------------------------------
 * A module is the collectives' fatbin (its magic is checked, so the image
 * the library embeds is the one nvcc made), loaded into the current
 * context. Its one kernel, ump_coll_reduce, is emulated with the library's
 * own host reduction (coll_reduce, built into this library): the kernel's
 * contract (lib/coll/kernel.h) is that it gives those bits. What the fake
 * checks is what a GPU would fault on: a launch in the module's context,
 * on a stream of it, every source and the destination mapped and usable. */

#define FATBIN_MAGIC 0xba55ed50u

/* A module's one function lives in it, as long as it. */
struct CUfunc_st {
    struct CUmod_st *mod;
};
struct CUmod_st {
    struct CUctx_st *ctx;
    struct CUfunc_st fn;
    struct CUmod_st *next;
};
static struct CUmod_st *modules;

static CUresult fake_cuModuleLoadData(CUmodule *m, const void *image)
{
    uint32_t magic;

    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (!m || !image)
        return end(CUDA_ERROR_INVALID_VALUE);
    memcpy(&magic, image, sizeof magic);
    if (magic != FATBIN_MAGIC)
        return end(CUDA_ERROR_INVALID_IMAGE);
    struct CUmod_st *mod = calloc(1, sizeof(*mod));
    if (!mod)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    mod->ctx = current;
    mod->next = modules;
    modules = mod;
    n_modules++;
    *m = mod;
    return end(CUDA_SUCCESS);
}

static bool module_ok(CUmodule m)
{
    for (struct CUmod_st *p = modules; p; p = p->next)
        if (p == m)
            return true;
    return false;
}

static CUresult fake_cuModuleUnload(CUmodule m)
{
    BEGIN();
    for (struct CUmod_st **pp = &modules; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            free(m);
            return end(CUDA_SUCCESS);
        }
    return end(CUDA_ERROR_INVALID_HANDLE);
}

static CUresult fake_cuModuleGetFunction(CUfunction *f, CUmodule m,
                                         const char *name)
{
    BEGIN();
    if (!f || !name)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!module_ok(m))
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (strcmp(name, COLL_KERNEL_REDUCE))
        return end(CUDA_ERROR_NOT_FOUND);
    m->fn.mod = m;
    *f = &m->fn;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
                                    unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shmem, CUstream s,
                                    void **params, void **extra)
{
    CUresult res;

    BEGIN();
    res = stream_check(s);
    if (res != CUDA_SUCCESS)
        return end(res);
    if (!f || !module_ok(f->mod) || f->mod->ctx != current)
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 ||
        shmem || extra || !params || !params[0])
        return end(CUDA_ERROR_INVALID_VALUE);
    res = injected("cuLaunchKernel");
    if (res != CUDA_SUCCESS)
        return end(res);
    const struct coll_kargs *a = params[0];
    size_t esz = coll_dtype_size(a->dt);
    if (!esz || !coll_op_valid(a->op) || a->n < 1 ||
        a->n > UMP_MAX_DEVICES || a->ndst < 1 || a->ndst > UMP_MAX_DEVICES ||
        a->mode < COLL_KFOLD || a->mode > COLL_KSPLIT || a->avgn < 0 ||
        (a->avgn && (a->op != UMP_AVG || a->n != 1 || a->mode != COLL_KFOLD)))
        return end(CUDA_ERROR_INVALID_VALUE); /* avgn: kernel.h's rule */
    /* the bytes each pointer covers, by the kernel's shape (kernel.h) */
    size_t nseg = a->mode == COLL_KGATHER  ? (size_t)a->n
                  : a->mode == COLL_KSPLIT ? (size_t)a->ndst
                                           : 1;
    size_t seg = a->mode == COLL_KFOLD ? (size_t)a->count : (size_t)a->seg;
    if (seg * nseg != a->count)
        return end(CUDA_ERROR_INVALID_VALUE);
    size_t sbytes = (a->mode == COLL_KSPLIT ? a->count : seg) * esz;
    size_t dbytes = (a->mode == COLL_KGATHER ? a->count : seg) * esz;
    for (int k = 0; k < a->n; k++)
        if (!a->src[k] || !range_usable((uintptr_t)a->src[k], sbytes))
            return end(CUDA_ERROR_ILLEGAL_ADDRESS);
        else if ((uintptr_t)a->src[k] % esz) /* a GPU faults on it */
            return end(CUDA_ERROR_MISALIGNED_ADDRESS);
    for (int o = 0; o < a->ndst; o++)
        if (!a->dst[o] || !range_usable((uintptr_t)a->dst[o], dbytes))
            return end(CUDA_ERROR_ILLEGAL_ADDRESS);
        else if ((uintptr_t)a->dst[o] % esz)
            return end(CUDA_ERROR_MISALIGNED_ADDRESS);
    int prot = PROT_READ | PROT_WRITE;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < a->n; k++)
            if (!cpu_window((uintptr_t)a->src[k], sbytes, prot))
                return end(CUDA_ERROR_UNKNOWN);
        for (int o = 0; o < a->ndst; o++)
            if (!cpu_window((uintptr_t)a->dst[o], dbytes, prot))
                return end(CUDA_ERROR_UNKNOWN);
        prot = PROT_NONE;
        if (pass)
            break;
        coll_reduce_shape(a->dt, a->op, a->mode, a->dst, a->ndst, a->src,
                          a->n, a->count, seg);
        /* avgn: the one source copied into every destination above, each
         * then divided as coll_avg_finish divides (kernel.h) */
        for (int o = 0; a->avgn && o < a->ndst; o++)
            coll_avg_finish(a->dt, a->dst[o], a->count, a->avgn);
    }
    n_launches++;
    return end(CUDA_SUCCESS);
}

/* Streams run their work at once here: waiting is checking. */
static CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    BEGIN();
    if (!default_stream(s) && !stream_ok(s))
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (!event_ok(e))
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (flags)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!current || stream_ctx(s) != current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    n_waits++;
    return end(CUDA_SUCCESS);
}

/* --- classic allocations (cuMemAlloc and kin) --------------------------- */
/* What a program gets from the driver without umpool, and what the preload
 * forwards to for pointers it does not own: host memory (like all of this
 * fake's), device memory counted in the device's used bytes. */

struct fake_classic {
    char *p;
    size_t size;
    int dev; /* -1: host (cuMemAllocHost, cuMemHostAlloc) */
    struct fake_classic *next;
};
static struct fake_classic *classics;
static long n_classic_alloc, n_classic_host;

static struct fake_classic *classic_holding(uintptr_t p)
{
    for (struct fake_classic *c = classics; c; c = c->next)
        if (p >= (uintptr_t)c->p && p < (uintptr_t)c->p + c->size)
            return c;
    return NULL;
}

static CUresult classic_new(void **pp, size_t size, int dev)
{
    if (!pp || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev >= 0 && used[dev] + size > cfg.mem)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fake_classic *c = calloc(1, sizeof(*c));
    if (!c || !(c->p = aligned_alloc(256, (size + 255) & ~(size_t)255))) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->size = size;
    c->dev = dev;
    c->next = classics;
    classics = c;
    if (dev >= 0) {
        used[dev] += size;
        n_classic_alloc++;
    } else {
        n_classic_host++;
    }
    *pp = c->p;
    return CUDA_SUCCESS;
}

static CUresult classic_free(uintptr_t p, bool host)
{
    for (struct fake_classic **cp = &classics; *cp; cp = &(*cp)->next) {
        struct fake_classic *c = *cp;
        if ((uintptr_t)c->p != p || (c->dev < 0) != host)
            continue;
        *cp = c->next;
        if (c->dev >= 0)
            used[c->dev] -= c->size;
        free(c->p);
        free(c);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* No lock, like the driver's (a read of the thread's current context): an
 * interposer asks it on every allocation. */
static CUresult fake_cuCtxGetDevice(CUdevice *dev)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev = current->dev;
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
    BEGIN();
    if (!current)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    void *p = NULL;
    CUresult res = classic_new(&p, size, current->dev);
    if (res == CUDA_SUCCESS && dptr)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return end(res);
}

static CUresult fake_cuMemFree(CUdeviceptr dptr)
{
    BEGIN();
    return end(classic_free((uintptr_t)dptr, false));
}

static CUresult fake_cuMemAllocAsync(CUdeviceptr *dptr, size_t size,
                                     CUstream s)
{
    (void)s;
    return fake_cuMemAlloc(dptr, size);
}

static CUresult fake_cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    (void)s;
    return fake_cuMemFree(dptr);
}

static CUresult fake_cuMemAllocHost(void **pp, size_t size)
{
    BEGIN();
    return end(classic_new(pp, size, -1));
}

static CUresult fake_cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    (void)flags;
    return fake_cuMemAllocHost(pp, size);
}

static CUresult fake_cuMemFreeHost(void *p)
{
    BEGIN();
    return end(classic_free((uintptr_t)p, true));
}

/* A pinned host allocation of the driver's own, and its device address
 * (the same: unified addressing). */
static CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *d, void *p,
                                               unsigned flags)
{
    BEGIN();
    struct fake_classic *c = classic_holding((uintptr_t)p);
    if (!d || flags || !c || c->dev >= 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    *d = (CUdeviceptr)(uintptr_t)p;
    return end(CUDA_SUCCESS);
}

static CUresult fake_cuMemHostGetFlags(unsigned *flags, void *p)
{
    BEGIN();
    struct fake_classic *c = classic_holding((uintptr_t)p);
    if (!flags || !c || c->dev >= 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    *flags = CU_MEMHOSTALLOC_DEVICEMAP;
    return end(CUDA_SUCCESS);
}

/* A classic allocation's range; a mapping of the address space gives the
 * chunk's (the real driver's answer for VMM memory). */
static CUresult fake_cuMemGetAddressRange(CUdeviceptr *base, size_t *size,
                                          CUdeviceptr dptr)
{
    BEGIN();
    struct fake_classic *c = classic_holding((uintptr_t)dptr);
    struct fake_map *m = c ? NULL : map_at((uintptr_t)dptr);
    if (!c && !m)
        return end(CUDA_ERROR_NOT_FOUND);
    if (base)
        *base = c ? (CUdeviceptr)(uintptr_t)c->p : (CUdeviceptr)m->va;
    if (size)
        *size = c ? c->size : m->size;
    return end(CUDA_SUCCESS);
}

/* Legacy IPC: the fake has none of its own (the real driver's refuses
 * virtual-memory allocations, the only kind a pool makes); counted, so
 * that the preload's tests see what reached the driver. */
static long n_ipc_calls;
static CUresult fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    (void)h;
    (void)p;
    BEGIN();
    n_ipc_calls++;
    return end(CUDA_ERROR_NOT_SUPPORTED);
}
static CUresult fake_cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h,
                                        unsigned flags)
{
    (void)p;
    (void)h;
    (void)flags;
    BEGIN();
    n_ipc_calls++;
    return end(CUDA_ERROR_INVALID_HANDLE);
}
static CUresult fake_cuIpcCloseMemHandle(CUdeviceptr p)
{
    (void)p;
    BEGIN();
    n_ipc_calls++;
    return end(CUDA_ERROR_INVALID_VALUE);
}

static CUresult fake_cuPointerGetAttribute(void *data,
                                           CUpointer_attribute attr,
                                           CUdeviceptr ptr)
{
    CUdeviceptr base;
    size_t size;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = fake_cuMemGetAddressRange(&base, &size, ptr);
    if (res != CUDA_SUCCESS)
        return res;
    if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *(CUdeviceptr *)data = base;
    else if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *(size_t *)data = size;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult fake_cuPointerGetAttributes(unsigned n,
                                            CUpointer_attribute *attrs,
                                            void **data, CUdeviceptr ptr)
{
    for (unsigned i = 0; i < n; i++) {
        CUresult res = fake_cuPointerGetAttribute(data[i], attrs[i], ptr);
        if (res != CUDA_SUCCESS)
            return res;
    }
    return CUDA_SUCCESS;
}

/* Counters for the preload's tests: allocations the fake itself served. */
long fake_cuda_classic(const char *what);
long fake_cuda_classic(const char *what)
{
    return !strcmp(what, "alloc") ? n_classic_alloc
           : !strcmp(what, "host") ? n_classic_host
                                   : -1;
}

/* --- cuGetProcAddress ---------------------------------------------------- */

#define FAKE_ENTRY(name) {#name, (void *)fake_##name}
static const struct {
    const char *name;
    void *fn;
} entries[] = {
    FAKE_ENTRY(cuInit),
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    FAKE_ENTRY(cuGetErrorName),
    FAKE_ENTRY(cuGetErrorString),
    FAKE_ENTRY(cuDeviceGetCount),
    FAKE_ENTRY(cuDeviceGet),
    FAKE_ENTRY(cuDeviceGetAttribute),
    FAKE_ENTRY(cuDeviceGetName),
    FAKE_ENTRY(cuDeviceGetPCIBusId),
    FAKE_ENTRY(cuDeviceGetByPCIBusId),
    FAKE_ENTRY(cuDeviceCanAccessPeer),
    FAKE_ENTRY(cuDeviceGetP2PAttribute),
    FAKE_ENTRY(cuDevicePrimaryCtxRetain),
    FAKE_ENTRY(cuDevicePrimaryCtxRelease),
    FAKE_ENTRY(cuCtxGetCurrent),
    FAKE_ENTRY(cuCtxSetCurrent),
    FAKE_ENTRY(cuMemGetInfo),
    FAKE_ENTRY(cuMemGetAllocationGranularity),
    FAKE_ENTRY(cuMemAddressReserve),
    FAKE_ENTRY(cuMemAddressFree),
    FAKE_ENTRY(cuMemCreate),
    FAKE_ENTRY(cuMemRelease),
    FAKE_ENTRY(cuMemMap),
    FAKE_ENTRY(cuMemUnmap),
    FAKE_ENTRY(cuMemSetAccess),
    FAKE_ENTRY(cuMemRetainAllocationHandle),
    FAKE_ENTRY(cuMemGetAllocationPropertiesFromHandle),
    FAKE_ENTRY(cuMemExportToShareableHandle),
    FAKE_ENTRY(cuMemImportFromShareableHandle),
    FAKE_ENTRY(cuStreamCreate),
    FAKE_ENTRY(cuStreamDestroy),
    FAKE_ENTRY(cuStreamSynchronize),
    FAKE_ENTRY(cuStreamGetCtx),
    FAKE_ENTRY(cuMemcpyAsync),
    FAKE_ENTRY(cuMemcpyDtoH),
    FAKE_ENTRY(cuMemcpyHtoD),
    FAKE_ENTRY(cuMemHostRegister),
    FAKE_ENTRY(cuMemHostUnregister),
    FAKE_ENTRY(cuMemsetD8Async),
    FAKE_ENTRY(cuLaunchHostFunc),
    FAKE_ENTRY(cuEventCreate),
    FAKE_ENTRY(cuEventRecord),
    FAKE_ENTRY(cuEventQuery),
    FAKE_ENTRY(cuEventSynchronize),
    FAKE_ENTRY(cuEventDestroy),
    FAKE_ENTRY(cuStreamWaitEvent),
    FAKE_ENTRY(cuEventElapsedTime),
    FAKE_ENTRY(cuModuleLoadData),
    FAKE_ENTRY(cuModuleUnload),
    FAKE_ENTRY(cuModuleGetFunction),
    FAKE_ENTRY(cuLaunchKernel),
    FAKE_ENTRY(cuCtxGetDevice),
    FAKE_ENTRY(cuMemAlloc),
    FAKE_ENTRY(cuMemFree),
    FAKE_ENTRY(cuMemAllocAsync),
    FAKE_ENTRY(cuMemFreeAsync),
    FAKE_ENTRY(cuMemAllocHost),
    FAKE_ENTRY(cuMemHostAlloc),
    FAKE_ENTRY(cuMemFreeHost),
    FAKE_ENTRY(cuMemHostGetDevicePointer),
    FAKE_ENTRY(cuMemHostGetFlags),
    FAKE_ENTRY(cuMemGetAddressRange),
    FAKE_ENTRY(cuPointerGetAttribute),
    FAKE_ENTRY(cuPointerGetAttributes),
    FAKE_ENTRY(cuIpcGetMemHandle),
    FAKE_ENTRY(cuIpcOpenMemHandle),
    FAKE_ENTRY(cuIpcCloseMemHandle),
};

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn,
                                     int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status)
{
    /* As the driver: the status pointer is optional (cudart's first
     * queries pass none), and the flags are the default (0), legacy or
     * per-thread default stream (this fake has one kind of stream). It may
     * come first, before cuDriverGetVersion (cudart's order). */
    if (!cfg.driver)
        load_config();
    if (!symbol || !pfn || version > cfg.driver ||
        flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    n_abi = version;
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        if (strcmp(entries[i].name, symbol) == 0) {
            *pfn = entries[i].fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

/* --- exports by name ----------------------------------------------------- */
/* A program linked against libcuda binds these names at load time (the
 * preload's tests build one against this fake, named libcuda.so.1): the
 * calls such a program makes, under the real driver's exported names
 * (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on). */
CUresult CUDAAPI cuInit(unsigned f) { return fake_cuInit(f); }
CUresult CUDAAPI cuDeviceGet(CUdevice *d, int i) { return fake_cuDeviceGet(d, i); }
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    return fake_cuDevicePrimaryCtxRetain(c, d);
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) { return fake_cuCtxSetCurrent(c); }
CUresult CUDAAPI cuCtxGetDevice(CUdevice *d) { return fake_cuCtxGetDevice(d); }
CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned f)
{
    return fake_cuStreamCreate(s, f);
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) { return fake_cuStreamDestroy(s); }
CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
    return fake_cuStreamSynchronize(s);
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) { return fake_cuMemAlloc(p, n); }
CUresult CUDAAPI cuMemFree(CUdeviceptr p) { return fake_cuMemFree(p); }
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    return fake_cuMemAllocAsync(p, n, s);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return fake_cuMemFreeAsync(p, s);
}
CUresult CUDAAPI cuMemGetInfo(size_t *f, size_t *t) { return fake_cuMemGetInfo(f, t); }
CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *b, size_t *n, CUdeviceptr p)
{
    return fake_cuMemGetAddressRange(b, n, p);
}
CUresult CUDAAPI cuPointerGetAttribute(void *d, CUpointer_attribute a,
                                       CUdeviceptr p)
{
    return fake_cuPointerGetAttribute(d, a, p);
}
CUresult CUDAAPI cuMemAllocHost(void **p, size_t n) { return fake_cuMemAllocHost(p, n); }
CUresult CUDAAPI cuMemFreeHost(void *p) { return fake_cuMemFreeHost(p); }
CUresult CUDAAPI cuMemHostAlloc(void **p, size_t n, unsigned f)
{
    return fake_cuMemHostAlloc(p, n, f);
}
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *d, void *p,
                                           unsigned f)
{
    return fake_cuMemHostGetDevicePointer(d, p, f);
}
CUresult CUDAAPI cuMemHostGetFlags(unsigned *f, void *p)
{
    return fake_cuMemHostGetFlags(f, p);
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    return fake_cuIpcGetMemHandle(h, p);
}
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h,
                                    unsigned f)
{
    return fake_cuIpcOpenMemHandle(p, h, f);
}
CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr p)
{
    return fake_cuIpcCloseMemHandle(p);
}

/* --- NVML ---------------------------------------------------------------- */

typedef int *nvmlDevice_t;
struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
static int nvml_devs[FAKE_MAX_DEV];

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *h);
int nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned link, int *active);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned link,
                                        struct nvml_pci_info *pci);
int nvmlDeviceGetNvLinkVersion(nvmlDevice_t h, unsigned link,
                               unsigned *version);
int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t h, unsigned link,
                                        int *type);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, struct nvml_pci_info *pci);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h);
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned version;
    unsigned long long total, reserved, free, used;
};
int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, struct nvml_memory *m);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, struct nvml_memory_v2 *m);
long fake_cuda_count(const char *what);

int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h)
{
    if (!h || (int)i >= cfg.devices)
        return 2;
    nvml_devs[i] = (int)i;
    *h = &nvml_devs[i];
    return 0;
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, struct nvml_pci_info *pci)
{
    if (!h || !pci)
        return 2;
    memset(pci, 0, sizeof(*pci));
    pci->bus = fake_bus(*h);
    snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:%02X:00.0",
             fake_bus(*h));
    snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "0000:%02X:00.0",
             fake_bus(*h));
    return 0;
}

/* The device's memory as NVML sees it: every process's use (here, this
 * one's chunks and classic allocations). */
int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, struct nvml_memory *m)
{
    if (!h || !m)
        return 2;
    m->total = cfg.mem;
    m->used = used[*h];
    m->free = cfg.mem - used[*h];
    return 0;
}

int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, struct nvml_memory_v2 *m)
{
    if (!h || !m)
        return 2;
    m->total = cfg.mem;
    m->reserved = 0;
    m->used = used[*h];
    m->free = cfg.mem - used[*h];
    return 0;
}

/* The configuration when no cuInit has read it: NVML loaded on its own.
 * Behind the CUDA calls it is left as they set it, with its injected
 * failures' counts. */
int nvmlInit_v2(void)
{
    pthread_mutex_lock(&lock);
    if (!cfg_loaded)
        load_config();
    pthread_mutex_unlock(&lock);
    return 0;
}

int nvmlShutdown(void)
{
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *h)
{
    unsigned dom, b, d, f;

    if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f) != 4)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    for (int i = 0; i < cfg.devices; i++)
        if (dom == 0 && b == fake_bus(i) && d == 0) {
            nvml_devs[i] = i;
            *h = &nvml_devs[i];
            return 0;
        }
    return 6; /* NVML_ERROR_NOT_FOUND */
}

/* Where link l of device d goes: another device, or -1 for the switch, or
 * -2 when the link is down. */
static int link_peer(int d, unsigned l)
{
    if ((int)l < cfg.nvpair && (d ^ 1) < cfg.devices)
        return d ^ 1;
    if ((int)l < cfg.nvswitch)
        return -1;
    return -2;
}

int nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned link, int *active)
{
    if (link >= FAKE_NVLINKS)
        return 2;
    *active = link_peer(*h, link) != -2;
    return 0;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned link,
                                        struct nvml_pci_info *pci)
{
    int peer;

    if (link >= FAKE_NVLINKS)
        return 2;
    peer = link_peer(*h, link);
    memset(pci, 0, sizeof(*pci));
    pci->bus = peer >= 0 ? fake_bus(peer) : 0xf0 + link % 4;
    snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:%02X:00.0",
             pci->bus);
    return 0;
}

int nvmlDeviceGetNvLinkVersion(nvmlDevice_t h, unsigned link,
                               unsigned *version)
{
    (void)h;
    if (link >= FAKE_NVLINKS)
        return 2;
    *version = cfg.nvver;
    return 0;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t h, unsigned link,
                                        int *type)
{
    if (link >= FAKE_NVLINKS)
        return 2;
    *type = link_peer(*h, link) >= 0 ? 0 : 2; /* GPU : SWITCH */
    return 0;
}

/* The gauges umpool-inspect serve publishes, fixed by the device index so
 * that its test knows every value. */

struct nvml_utilization {
    unsigned gpu, memory;
};
int nvmlDeviceGetCount_v2(unsigned *count);
int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, struct nvml_utilization *u);
int nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *temp);
int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len);
const char *nvmlErrorString(int rc);

/* The failure fail=CALL:N:CODE injects into an NVML query now, or 0. */
static int nvml_injected(const char *call)
{
    CUresult rc;

    pthread_mutex_lock(&lock);
    rc = injected(call);
    pthread_mutex_unlock(&lock);
    return (int)rc;
}

int nvmlDeviceGetCount_v2(unsigned *count)
{
    if (!count)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *count = cfg.devices > 0 ? (unsigned)cfg.devices : 0;
    return 0;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, struct nvml_utilization *u)
{
    int rc;

    if (!h || !u)
        return 2;
    rc = nvml_injected("nvmlDeviceGetUtilizationRates");
    if (rc)
        return rc;
    u->gpu = 10 + (unsigned)*h;
    u->memory = 20 + (unsigned)*h;
    return 0;
}

int nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *temp)
{
    int rc;

    if (!h || !temp || sensor != 0) /* NVML_TEMPERATURE_GPU only */
        return 2;
    rc = nvml_injected("nvmlDeviceGetTemperature");
    if (rc)
        return rc;
    *temp = 40 + (unsigned)*h;
    return 0;
}

int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len)
{
    int rc;

    if (!h || !uuid)
        return 2;
    rc = nvml_injected("nvmlDeviceGetUUID");
    if (rc)
        return rc;
    if (snprintf(uuid, len, "GPU-00000000-0000-0000-0000-0000000000%02x",
                 (unsigned)*h) >= (int)len)
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    return 0;
}

const char *nvmlErrorString(int rc)
{
    switch (rc) {
    case 0:
        return "Success";
    case 2:
        return "Invalid Argument";
    case 3:
        return "Not Supported";
    case 7:
        return "Insufficient Size";
    default:
        return "Unknown Error";
    }
}

/* --- what the tests read ------------------------------------------------- */

/* Live objects and counted events by name; -1 for an unknown name. */
long fake_cuda_count(const char *what)
{
    long n = 0;

    pthread_mutex_lock(&lock);
    if (strcmp(what, "allocs") == 0) {
        for (struct fake_alloc *a = allocs; a; a = a->next)
            n++;
    } else if (strcmp(what, "host_allocs") == 0) {
        for (struct fake_alloc *a = allocs; a; a = a->next)
            n += a->host;
    } else if (strcmp(what, "host_bytes") == 0) {
        n = (long)used_host;
    } else if (strcmp(what, "maps") == 0) {
        for (struct fake_map *m = maps; m; m = m->next)
            n++;
    } else if (strcmp(what, "map_bytes") == 0) {
        for (struct fake_map *m = maps; m; m = m->next)
            n += (long)m->size;
    } else if (strcmp(what, "resvs") == 0) {
        for (struct fake_resv *r = resvs; r; r = r->next)
            n++;
    } else if (strcmp(what, "ctx_refs") == 0) {
        for (int d = 0; d < FAKE_MAX_DEV; d++)
            n += ctxs[d].refs;
    } else if (strcmp(what, "host_regs") == 0) {
        for (int i = 0; i < FAKE_MAX_HOSTREG; i++)
            n += hostregs[i].size != 0;
    } else if (strcmp(what, "streams") == 0) {
        for (struct CUstream_st *s = streams; s; s = s->next)
            n++;
    } else if (strcmp(what, "events") == 0) {
        for (struct CUevent_st *e = events; e; e = e->next)
            n++;
    } else if (strcmp(what, "current") == 0) {
        n = current ? current->dev + 1 : 0;
    } else if (strcmp(what, "child_calls") == 0) {
        n = __atomic_load_n(&n_child_calls, __ATOMIC_RELAXED);
    } else if (strcmp(what, "hostfn_calls") == 0) {
        n = __atomic_load_n(&n_hostfn_calls, __ATOMIC_RELAXED);
    } else if (strcmp(what, "ipc_calls") == 0) {
        n = n_ipc_calls;
    } else if (strcmp(what, "creates") == 0) {
        n = n_creates;
    } else if (strcmp(what, "fd_creates") == 0) {
        n = n_fd_creates;
    } else if (strcmp(what, "set_access_calls") == 0) {
        n = n_set_access;
    } else if (strcmp(what, "cpu_refused") == 0) {
        n = n_cpu_refused; /* CPU descriptors refused for their type */
    } else if (strcmp(what, "last_cpu_type") == 0) {
        n = last_cpu_type; /* of the last cuMemSetAccess that took one */
    } else if (strcmp(what, "last_host_node") == 0) {
        n = last_host_node; /* of the last HOST_NUMA cuMemCreate */
    } else if (strcmp(what, "last_dev_loc") == 0) {
        n = last_dev_loc; /* location id of the last device cuMemCreate */
    } else if (strcmp(what, "access_dups") == 0) {
        n = n_access_dups; /* cuMemSetAccess refused: a device twice */
    } else if (strcmp(what, "last_access_devs") == 0) {
        n = last_access_devs; /* device descriptors of the last accepted */
    } else if (strcmp(what, "abi") == 0) {
        n = n_abi;
    } else if (strcmp(what, "launches") == 0) {
        n = n_launches; /* kernels run (emulated) */
    } else if (strcmp(what, "waits") == 0) {
        n = n_waits; /* cuStreamWaitEvent calls accepted */
    } else if (strcmp(what, "syncs") == 0) {
        n = n_syncs; /* cuStreamSynchronize calls accepted */
    } else if (strcmp(what, "module_loads") == 0) {
        n = n_modules;
    } else if (strcmp(what, "modules") == 0) {
        for (struct CUmod_st *m = modules; m; m = m->next)
            n++;
    } else {
        n = -1;
    }
    pthread_mutex_unlock(&lock);
    return n;
}
