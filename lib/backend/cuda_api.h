/*
 * Internal to the cuda backend: the driver entry points it loads at run time
 * and what cuda.c (memory, streams) and cuda_topology.c (discovery) share.
 * Nothing outside lib/backend/cuda*.c and tests/test_cuda.c includes this.
 *
 * The sysfs helpers need no CUDA headers; everything else exists only when
 * cuda.h was found at configure time (HAVE_CUDA_H).
 */
#ifndef UMP_CUDA_API_H
#define UMP_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>

#include "../topology.h"

/* --- sysfs (cuda_topology.c); root is "/sys" outside the tests ------------ */

/* Rewrites a PCI bus id as sysfs names it ("0000:1a:00.0", lowercase, four
 * domain digits at least). -EINVAL when busid is not domain:bus:dev.fn. */
int cuda_pci_busid_norm(const char *busid, char *out, size_t len);
/* The device's NUMA node from <root>/bus/pci/devices/<busid>/numa_node;
 * "-1" (no affinity) reads as node 0. A negative errno when unreadable. */
int cuda_sysfs_numa_node(const char *root, const char *busid);
/* The device's place in the PCI tree: the target of the sysfs link from
 * "pciDDDD:BB/" on ("pci0000:10/0000:10:01.0/.../0000:1a:00.0"). */
int cuda_sysfs_pci_path(const char *root, const char *busid, char *path,
                        size_t len);
/* True when two such paths meet below a root port, i.e. in a PCIe switch. */
bool cuda_pci_same_switch(const char *path_a, const char *path_b);
/* "32.0 GT/s PCIe", "8 GT/s": the rate in GT/s. -EINVAL for "Unknown". */
int cuda_parse_gts(const char *text, double *gts_p);
/* Payload bandwidth of a link in GB/s per direction. */
double cuda_pcie_gbs(double gts, int width);
/* The bandwidth of the device's PCIe link, GB/s per direction. */
int cuda_sysfs_link_gbs(const char *root, const char *busid, double *gbs_p);
/* GB/s per direction of one NVLink link of an NVML version (an enum, not
 * the marketing number: 6 is NVLink 4.0); unknown versions get 25. */
double cuda_nvlink_link_gbs(unsigned nvml_version);

#ifdef HAVE_CUDA_H
#include <cuda.h>

/* The driver's library, for tests to override (read with secure_getenv). */
#define CUDA_DRIVER_ENV "UMPOOL_CUDA_DRIVER"
#define CUDA_DRIVER_DEFAULT "libcuda.so.1"
#define CUDA_NVML_DEFAULT "libnvidia-ml.so.1"
/* VMM came with 10.2, but the entry points are found through
 * cuGetProcAddress, which came with 11.3. */
#define CUDA_MIN_DRIVER 11030
/* The ABI asked of cuGetProcAddress: the signatures of cuda.h as of 12.0,
 * which the members below are declared with. */
#define CUDA_ABI_VERSION 12000

/*
 * One member per entry point, named and typed after cuda.h's prototype so
 * that the types cannot drift (cuda.h maps a few names to their _v2 ABI,
 * e.g. cuMemGetInfo, which is the version cuGetProcAddress returns for
 * CUDA_ABI_VERSION). Filled by cuda_api_load; never called before.
 */
#define CUDA_API_ENTRY(name) __typeof__(name) *name
struct cuda_api {
    void *lib;          /* dlopen handle */
    int driver_version; /* 1000 * major + 10 * minor */
    CUDA_API_ENTRY(cuInit);
    CUDA_API_ENTRY(cuDriverGetVersion);
    CUDA_API_ENTRY(cuGetErrorName);
    CUDA_API_ENTRY(cuGetErrorString);
    CUDA_API_ENTRY(cuDeviceGetCount);
    CUDA_API_ENTRY(cuDeviceGet);
    CUDA_API_ENTRY(cuDeviceGetAttribute);
    CUDA_API_ENTRY(cuDeviceGetName);
    CUDA_API_ENTRY(cuDeviceGetPCIBusId);
    CUDA_API_ENTRY(cuDeviceCanAccessPeer);
    CUDA_API_ENTRY(cuDeviceGetP2PAttribute);
    CUDA_API_ENTRY(cuDevicePrimaryCtxRetain);
    CUDA_API_ENTRY(cuDevicePrimaryCtxRelease);
    CUDA_API_ENTRY(cuCtxGetCurrent);
    CUDA_API_ENTRY(cuCtxSetCurrent);
    CUDA_API_ENTRY(cuMemGetInfo);
    CUDA_API_ENTRY(cuMemGetAllocationGranularity);
    CUDA_API_ENTRY(cuMemAddressReserve);
    CUDA_API_ENTRY(cuMemAddressFree);
    CUDA_API_ENTRY(cuMemCreate);
    CUDA_API_ENTRY(cuMemRelease);
    CUDA_API_ENTRY(cuMemMap);
    CUDA_API_ENTRY(cuMemUnmap);
    CUDA_API_ENTRY(cuMemSetAccess);
    CUDA_API_ENTRY(cuStreamCreate);
    CUDA_API_ENTRY(cuStreamDestroy);
    CUDA_API_ENTRY(cuStreamSynchronize);
    CUDA_API_ENTRY(cuStreamGetCtx);
    CUDA_API_ENTRY(cuMemcpyAsync);
    CUDA_API_ENTRY(cuMemHostRegister);
    CUDA_API_ENTRY(cuMemHostUnregister);
    CUDA_API_ENTRY(cuMemsetD8Async);
    CUDA_API_ENTRY(cuLaunchHostFunc);
    CUDA_API_ENTRY(cuEventCreate);
    CUDA_API_ENTRY(cuEventRecord);
    CUDA_API_ENTRY(cuEventQuery);
    CUDA_API_ENTRY(cuEventSynchronize);
    CUDA_API_ENTRY(cuEventDestroy);
};

/* The driver's result as a negative errno (0 for CUDA_SUCCESS). */
int cuda_errno(CUresult res);
/* Logs "cuda: <what>: <CUDA_ERROR_NAME> (<driver's text>)" at level and
 * returns cuda_errno(res). */
int cuda_fail(const struct cuda_api *api, CUresult res, int level,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Loads the driver at path and resolves every entry point. On failure the
 * library is unloaded again, nothing is logged, and why says what went
 * wrong: -ENODEV (no driver) or -ENOTSUP (driver too old). */
int cuda_api_load(const char *path, struct cuda_api *api, char *why,
                  size_t len);
/* Makes ctx current on the calling thread and returns the one it replaces
 * in *saved_p, for cuda_ctx_leave. Logs its failure. */
int cuda_ctx_enter(const struct cuda_api *api, CUcontext ctx,
                   CUcontext *saved_p);
void cuda_ctx_leave(const struct cuda_api *api, CUcontext ctx,
                    CUcontext saved);

/* Fills topo for the ndev devices whose primary contexts are ctxs: driver
 * queries, then sysfs under sysfs_root, then NVML from nvml_path (skipped
 * when it does not load). Logs its failures; topo is written on success. */
int cuda_topology_discover(const struct cuda_api *api, int ndev,
                           const CUcontext *ctxs, const char *sysfs_root,
                           const char *nvml_path, struct ump_topology *topo);
#endif /* HAVE_CUDA_H */

#endif
