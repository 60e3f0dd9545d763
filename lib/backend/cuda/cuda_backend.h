/*
 * Internal to the cuda backend: what its files share. cuda.c opens and
 * closes the backend and holds the ops table; vmm.c owns addresses, chunks
 * and mappings (device and host); cuda_stream.c streams and events (not
 * "stream.c": libtool archives objects by base name, and lib/front/ has a
 * stream.c); cuda_topology.c discovery; driver.c (driver.h) loads the driver. Nothing
 * outside lib/backend/cuda/ and tests/test_cuda.c includes this.
 *
 * The sysfs helpers need no CUDA headers; everything else exists only when
 * cuda.h was found at configure time (HAVE_CUDA_H).
 */
#ifndef UMP_CUDA_BACKEND_H
#define UMP_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "topo/topology.h"

/* The root of sysfs: "/sys", or for tests the value of this variable (read
 * with secure_getenv at open), a directory holding a fake tree with
 * bus/pci/devices/... and devices/system/node/... as the kernel lays them
 * out. Internal: not a configuration key, not documented to users. */
#define CUDA_SYSFS_ENV "UMPOOL_SYSFS_ROOT"
#define CUDA_SYSFS_DEFAULT "/sys"

/* --- sysfs (cuda_topology.c) ---------------------------------------------- */

/* Rewrites a PCI bus id as sysfs names it ("0000:1a:00.0", lowercase, four
 * domain digits at least). -EINVAL when busid is not domain:bus:dev.fn. */
int cuda_pci_busid_norm(const char *busid, char *out, size_t len);
/* Turns t, the topology of t->ndev physical GPUs, into that of the pool's
 * t->ndev * nvirt devices (cuda_virtual_devices): pool device v is GPU
 * v / nvirt (the virtual devices of one GPU are consecutive). Each gets
 * 1/nvirt of its GPU's memory, its NUMA node and PCI bus id, and a model
 * name ending in "/v<k>", k = v % nvirt (cut to fit, the suffix kept). Two
 * virtual devices of one GPU are linked as NVLink at the GPU's own memory
 * bandwidth (local_bw_gbs), peer: their memory is the same memory, reached
 * without a link, and NVLink (hops 1) is the kind the policies (domain)
 * and the collectives' model group and treat as direct peers; SELF is
 * kept for a device and itself. Virtual devices of two GPUs have the GPUs'
 * link. The name gets "-v<nvirt>". -EINVAL (logged) when the devices
 * would be more than UMP_MAX_DEVICES; nvirt 1 leaves t as it is. */
int cuda_topology_virtualize(struct ump_topology *t, int nvirt);
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
/* Whether host NUMA node has memory, from
 * <root>/devices/system/node/node<N>/meminfo ("MemTotal" above 0): 1 yes,
 * 0 no (or no such node), -ENOENT when sysfs shows no NUMA nodes at all
 * (a kernel without NUMA: nothing to say), another negative errno when
 * the node is there but its meminfo cannot be read (not a regular file,
 * no permission) or has no MemTotal (-ENODATA): unknown, which callers
 * must not take for "no memory". */
int cuda_sysfs_node_has_memory(const char *root, int node);
/* The node's distance to node to (<root>/devices/system/node/node<N>/
 * distance, the table libnuma's numa_distance reads), or -1 unknown. */
int cuda_sysfs_node_distance(const char *root, int node, int to);

#ifdef HAVE_CUDA_H
#include <pthread.h>
#include <stdatomic.h>

#include "util/conf.h"
#include "util/list.h"
#include "backend/backend.h"
#include "backend/cuda/driver.h"

#define CUDA_NVML_DEFAULT "libnvidia-ml.so.1"

/* Fills topo for the ndev devices whose primary contexts are ctxs: driver
 * queries, then sysfs under sysfs_root, then NVML from nvml_path (skipped
 * when it does not load). A device's NUMA node is the driver's
 * CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID where it says one, else sysfs's. Logs
 * its failures; topo is written on success. */
int cuda_topology_discover(const struct cudrv_api *api, int ndev,
                           const CUcontext *ctxs, const char *sysfs_root,
                           const char *nvml_path, struct ump_topology *topo);

/* Host memory in VMM (HOST_NUMA, HOST) came with CUDA 12.2. */
#define CUDA_HOST_VMM_VERSION 12020

struct custream_node;
struct custream_event;
struct cukernel_module;

/* The backend's context, one per pool. Written at open, read-only after
 * except the atomics (learnt from the driver) and the two lists (lock).
 *
 * Devices: the pool's devices (what every backend call's "device" means,
 * 0 .. ndev-1) are the physical GPUs (0 .. nphys-1, CUDA ordinals) each
 * shown nvirt times (cuda_virtual_devices): pool device v is GPU v / nvirt
 * (cuda_phys). With nvirt 1 they are the same. Everything the driver
 * holds is per GPU, hence indexed by physical ordinal: dev, pctx, gran,
 * fd_handles. The virtual devices of a GPU share its primary context, so
 * their streams, events and copies are the GPU's. */
struct cuda_ctx {
    struct cudrv_api api;
    int ndev;  /* the pool's devices: nphys * nvirt */
    int nphys; /* physical GPUs used */
    int nvirt; /* pool devices per GPU, 1..8 */
    CUdevice dev[UMP_MAX_DEVICES];   /* by physical ordinal */
    CUcontext pctx[UMP_MAX_DEVICES]; /* retained primary contexts, same */
    size_t gran[UMP_MAX_DEVICES];    /* same */
    /* Cleared when the driver refuses shareable handles on the GPU. */
    atomic_bool fd_handles[UMP_MAX_DEVICES];
    atomic_bool host_fd_handles; /* the same, for host NUMA chunks */

    /* The host tier (vmm.c, cuvmm_host_setup). 0 when every device
     * supports host chunks of that location type in VMM, else why not:
     * a negative errno, with the text to log once in host_why[]. */
    int host_numa_off, host_any_off;
    char host_numa_why[512], host_any_why[512];
    atomic_bool host_numa_said, host_any_said;
    int nnuma; /* host NUMA nodes: 0 .. nnuma-1 */
    /* The node host chunks asked for on node n are created on: n itself,
     * or the nearest node with memory when n has none. */
    int host_node[UMP_MAX_NUMA];
    atomic_bool host_node_said[UMP_MAX_NUMA];
    atomic_bool cpu_type_said;

    /* Wall time spent in the VMM calls on device chunks (vmm.c), ns: the
     * statistics' driver_ns. Not per device: one cuMemSetAccess or
     * cuMemUnmap may cover several devices' handles. */
    _Atomic uint64_t drv_ns;
    /* The pool's word of failed devices (watch_failures), or NULL. */
    _Atomic(_Atomic uint32_t *) watch;

    pthread_mutex_t lock; /* guards the two lists below and kmod */
    struct custream_node *streams;
    struct ump_list events; /* of struct custream_event, by link */
    /* Loaded module images, per physical GPU (cuda_kernel.c). */
    struct cukernel_module *kmod[UMP_MAX_DEVICES];
};

/* Device 0's context (GPU 0's, whatever nvirt) serves the calls that are not about one device (the
 * address space is shared by all). */
#define CUDA_ANY_DEVICE 0

/* --- cuda.c --------------------------------------------------------------- */

/* True when device is one of the pool's; else logs (op: the caller). */
bool cuda_device_ok(const struct cuda_ctx *c, int device, const char *op);

/* A driver call on GPU phys (a physical ordinal), or in context ctx when
 * phys is -1, returned res: when res says the GPU is lost
 * (cudrv_device_lost), every pool device on it is marked failed in the
 * watching pool's word. */
void cuda_note_result(struct cuda_ctx *c, int phys, CUcontext ctx,
                      CUresult res);
void cuda_watch_failures(void *ctx, _Atomic uint32_t *mask);

/* The physical GPU (CUDA ordinal, index of dev/pctx/gran) behind pool
 * device device, which the caller has checked. */
static inline int cuda_phys(const struct cuda_ctx *c, int device)
{
    return device / c->nvirt;
}

/* --- vmm.c: addresses, chunks, mappings ----------------------------------- */

/* Learns GPU d's (a physical ordinal) granularity and handle types; d's
 * context is current.
 * Logs its failures. */
int cuvmm_device_setup(struct cuda_ctx *c, int d);
/* Decides, once at open, whether the host tier can work (per device
 * attributes) and on which node each NUMA node's host chunks go. Never
 * fails: what it finds is said when the host tier is first used. */
void cuvmm_host_setup(struct cuda_ctx *c, const struct ump_topology *topo,
                      const char *sysfs_root);
size_t cuvmm_granularity(void *ctx, int device);
int cuvmm_reserve(void *ctx, size_t size, size_t align, void **va_p);
int cuvmm_reserve_at(void *ctx, void *va, size_t size, size_t align);
int cuvmm_unreserve(void *ctx, void *va, size_t size);
int cuvmm_chunk_create(void *ctx, int device, size_t size, ump_handle_t *h_p);
int cuvmm_chunk_release(void *ctx, ump_handle_t h);
int cuvmm_chunk_export(void *ctx, ump_handle_t h, int *fd_p, uint64_t *off_p);
int cuvmm_chunk_import(void *ctx, int fd, uint64_t off, size_t size,
                       int device, ump_handle_t *h_p);
int cuvmm_host_chunk_create(void *ctx, int numa_node, size_t size,
                            ump_handle_t *h_p);
int cuvmm_host_register(void *ctx, void *p, size_t size);
int cuvmm_host_unregister(void *ctx, void *p);
int cuvmm_map(void *ctx, void *va, size_t size, ump_handle_t h);
int cuvmm_unmap(void *ctx, void *va, size_t size);
int cuvmm_set_access(void *ctx, void *va, size_t size, const int *devices,
                     int ndevices);
int cuvmm_set_access_host(void *ctx, void *va, size_t size,
                          const int *devices, int ndevices);
uint64_t cuvmm_driver_ns(void *ctx, int device);

/* --- cuda_kernel.c: modules and kernel launches ------------------------- */

int cukernel_launch(void *ctx, void *stream, const void *image,
                    const char *name, unsigned grid, unsigned block,
                    void *arg);
/* Unloads every module, each in its GPU's context (at close). */
void cukernel_close(struct cuda_ctx *c);
/* Frees the records without the driver (in a forked child). */
void cukernel_free(struct cuda_ctx *c);

/* --- cuda_stream.c: streams and events ----------------------------------- */

int custream_create(void *ctx, int device, void **stream_p);
int custream_destroy(void *ctx, void *stream);
/* A CUstream the caller made: 0 when it is one of device's primary
 * context, else -EINVAL (logged). */
int custream_adopt(void *ctx, int device, void *native);
int custream_sync(void *ctx, void *stream);
int custream_memcpy_async(void *ctx, void *dst, const void *src, size_t size,
                          void *stream);
int custream_memset_async(void *ctx, void *dst, int value, size_t size,
                          void *stream);
int custream_host_func(void *ctx, void *stream, void (*fn)(void *),
                       void *arg);
int custream_wait_event(void *ctx, void *stream, void *event);
/* Makes current the context stream's work runs in (for a default stream,
 * the caller's current context, else device 0's) and returns it in
 * *sctx_p, and the one it replaced in *saved_p. */
int custream_enter(struct cuda_ctx *c, CUstream stream, CUcontext *sctx_p,
                   CUcontext *saved_p);
int custream_event_create(void *ctx, void **event_p);
int custream_event_destroy(void *ctx, void *event);
int custream_event_record(void *ctx, void *event, void *stream);
int custream_event_query(void *ctx, void *event);
int custream_event_sync(void *ctx, void *event);
/* At close, before the contexts go: destroys in the driver every event and
 * stream the caller left. The lists stay for custream_free. */
void custream_close(struct cuda_ctx *c);
/* Frees the lists' memory without the driver (close, and a forked child). */
void custream_free(struct cuda_ctx *c);
#endif /* HAVE_CUDA_H */

#endif
