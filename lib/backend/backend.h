/*
 * The backend interface: the only code that talks to a driver. It mirrors
 * the CUDA driver's virtual memory management (reserve, create, map, set
 * access) plus streams, events, copies and memset. lib/backend/sim.c emulates
 * all of it on the CPU; lib/backend/cuda.c implements it on the driver.
 *
 * Contracts shared by every backend:
 *  - every call returns 0 or a negative errno and logs its own failures once;
 *  - map() requires an unmapped, reserved, granularity-aligned range and a
 *    chunk of exactly that size; unmap() takes exactly what map() mapped;
 *  - memory becomes usable only after set_access() on the mapped range;
 *  - stream NULL is the default stream: on sim, its work is done before the
 *    call returns;
 *  - all calls are thread-safe.
 */
#ifndef UMP_BACKEND_H
#define UMP_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "util/conf.h"
#include "topo/topology.h"

typedef uint64_t ump_handle_t; /* a physical chunk */

struct backend_ops {
    const char *name;
    /* Opens the backend and fills topo (read from the configuration on sim,
     * discovered on cuda). -ENODEV when the backend cannot run here. */
    int (*open)(const struct ump_config *cfg, struct ump_topology *topo,
                void **ctx_p);
    /* Releases everything the backend still holds. */
    void (*close)(void *ctx);
    /* After fork(), in the child: drop process-local state (mappings, fds,
     * memory) without touching any device or thread. */
    void (*close_in_child)(void *ctx);
    /* Smallest chunk size and alignment for the device. */
    size_t (*granularity)(void *ctx, int device);

    int (*reserve)(void *ctx, size_t size, size_t align, void **va_p);
    int (*unreserve)(void *ctx, void *va, size_t size);
    /* Optional (NULL: -ENOTSUP by the caller). Reserves exactly
     * [va, va + size), both aligned to align, like reserve(): -EADDRINUSE
     * when any of it is taken (a mapping of the process on sim, another
     * reservation of the driver on cuda) or the driver would place it
     * elsewhere; then nothing is held. Released with unreserve(). */
    int (*reserve_at)(void *ctx, void *va, size_t size, size_t align);
    /* -ENOMEM when the device is full. */
    int (*chunk_create)(void *ctx, int device, size_t size, ump_handle_t *h_p);
    int (*chunk_release)(void *ctx, ump_handle_t h);
    /* Optional (NULL: -ENOTSUP by the caller). A new file descriptor (the
     * caller closes it) through which another process of the same user
     * imports device chunk h, and where in that file the chunk starts. On
     * cuda cuMemExportToShareableHandle (a POSIX file descriptor, offset
     * 0; -ENOTSUP where the chunk was made without one); on sim the
     * device's memfd at the chunk's extent. */
    int (*chunk_export)(void *ctx, ump_handle_t h, int *fd_p, uint64_t *off_p);
    /* Optional. A chunk of this context, of size bytes on device, from
     * what chunk_export gave in another process (fd stays the caller's).
     * Mapped, given access and released as the context's own; the
     * exporter keeps its chunk until the importers have released theirs
     * (on sim its release gives the memory back for reuse). -EINVAL,
     * logged, when fd is not that: another file, another device's memory,
     * an extent out of its bounds (on cuda, where the file is the whole
     * chunk, a size other than the chunk's is refused by map). */
    int (*chunk_import)(void *ctx, int fd, uint64_t off, size_t size,
                        int device, ump_handle_t *h_p);
    /* Pinned host memory on NUMA node numa_node (-1: no preference), a chunk
     * like a device's: mapped with map(), made usable with set_access_host().
     * -ENOMEM when it cannot be had. On cuda: cuMemCreate with
     * CU_MEM_LOCATION_TYPE_HOST_NUMA (HOST without a node). */
    int (*host_chunk_create)(void *ctx, int numa_node, size_t size,
                             ump_handle_t *h_p);
    /* Optional. Where the CPU should do file I/O on [va, va + size), a
     * range inside one mapped host chunk: another address of the same
     * memory, or NULL for va itself. On sim, the memfd window, whose page
     * tables stay filled while the pool's own mapping is made afresh at
     * every move. */
    void *(*io_view)(void *ctx, void *va, size_t size);
    /* Optional. Page-locks ordinary host memory [p, p + size) for every
     * device's copies (cuMemHostRegister), so that copies between it and
     * device memory run at the link's speed and on their stream, not staged
     * through the driver's own buffers. NULL: nothing to do (sim). */
    int (*host_register)(void *ctx, void *p, size_t size);
    int (*host_unregister)(void *ctx, void *p);
    int (*map)(void *ctx, void *va, size_t size, ump_handle_t h);
    int (*unmap)(void *ctx, void *va, size_t size);
    /* Read-write access for the listed devices (and the CPU on sim). */
    int (*set_access)(void *ctx, void *va, size_t size, const int *devices,
                      int ndevices);
    /* Read-write access for the listed devices and the CPU, to a range where
     * only host chunks are mapped (every device may reach host memory);
     * ndevices may be 0: the CPU only. */
    int (*set_access_host)(void *ctx, void *va, size_t size,
                           const int *devices, int ndevices);

    int (*stream_create)(void *ctx, int device, void **stream_p);
    /* Only streams stream_create made. */
    int (*stream_destroy)(void *ctx, void *stream);
    /* Optional (NULL on sim, which has no native streams: -ENOTSUP by the
     * caller). Checks that native, a stream the backend did not make, is
     * one device's work can be queued on (on cuda: a CUstream of the
     * device's primary context, asked with cuStreamGetCtx); -EINVAL, logged,
     * when it is not. Takes nothing: every stream op then accepts native,
     * and nothing here ever destroys it. */
    int (*stream_adopt)(void *ctx, int device, void *native);
    int (*stream_sync)(void *ctx, void *stream);
    int (*memcpy_async)(void *ctx, void *dst, const void *src, size_t size,
                        void *stream);
    int (*memset_async)(void *ctx, void *dst, int value, size_t size,
                        void *stream);
    int (*host_func)(void *ctx, void *stream, void (*fn)(void *), void *arg);

    int (*event_create)(void *ctx, void **event_p);
    int (*event_destroy)(void *ctx, void *event);
    /* Captures the work queued on stream so far. */
    int (*event_record)(void *ctx, void *event, void *stream);
    /* 0 when that work is done, -EAGAIN while it is not. */
    int (*event_query)(void *ctx, void *event);
    int (*event_sync)(void *ctx, void *event);
    /* Optional. The work queued on stream from now on waits, on the
     * device (sim: in the stream's worker), for the work event captured
     * (cuStreamWaitEvent); event may be of another device. */
    int (*stream_wait_event)(void *ctx, void *stream, void *event);
    /* Optional (NULL on sim). Queues kernel `name` of the module image (a
     * fatbin or PTX, loaded once per GPU on first use and kept until
     * close) on stream: grid blocks of block threads, one argument passed
     * by value, read from *arg when the call queues it. */
    int (*kernel_launch)(void *ctx, void *stream, const void *image,
                         const char *name, unsigned grid, unsigned block,
                         void *arg);
    /* Optional (NULL on sim). Makes device's context current on the
     * calling thread, and leaves it so: for a library that works on the
     * CUDA runtime's current device (NCCL's communicator set-up). */
    int (*make_current)(void *ctx, int device);

    /* Optional (NULL: 0). Nanoseconds of driver time spent so far in the
     * virtual-memory calls on device chunks (chunk_create, map,
     * set_access, unmap, chunk_release), for device (its chunks), or for
     * all devices with device < 0. On sim, modeled: the per-handle costs
     * of topo/drivercost.h when sim_driver_costs says so, else 0. On
     * cuda, measured: CLOCK_MONOTONIC around the driver's calls; one call
     * may cover several devices' handles, so the time is not split: 0 for
     * every single device. Counters only (atomics): no lock, any thread. */
    uint64_t (*driver_ns)(void *ctx, int device);
    /* Optional (NULL: failures are not told). The backend sets bit d of
     * *mask (an atomic OR, from any thread) when device d has failed: a
     * lost GPU, an uncorrectable memory error, a driver error of that
     * class, after which every operation of the device is -EIO. Chunk
     * release and unmap still succeed, so that the memory can be given
     * back. mask outlives the context. */
    void (*watch_failures)(void *ctx, _Atomic uint32_t *mask);
};

extern const struct backend_ops sim_backend_ops;
/* The CUDA driver's VMM, loaded at run time (dlopen libcuda.so.1). Built
 * without cuda.h, its open() returns -ENODEV. With cfg->backend auto, open
 * logs nothing when no GPU is usable and cuda_unavailable_reason() says why
 * (the pool logs one line and falls back to sim); with backend cuda it logs
 * the reason as an error. */
extern const struct backend_ops cuda_backend_ops;
const char *cuda_unavailable_reason(void);

/* Sim fault injection, for tests: the nth next call (1 = the next one) of
 * the named operation ("chunk_create", "host_chunk_create", "map", "set_access",
 * "unmap", "reserve": reserve and reserve_at together) fails
 * with err. n = 0 clears it. */
int sim_inject_fault(void *ctx, const char *op, int nth, int err);
/* Sim device failure, for tests (config sim_fail_device does the same at
 * open): device fails at its nth operation from now (chunk create, map,
 * set access naming it, a copy or memset touching its memory, work on its
 * streams); nth 0: now. From then on those are -EIO, its chunks' memory
 * reads as a poison pattern, and watch_failures' mask says so. A failed
 * device stays failed. */
int sim_fail_device(void *ctx, int device, int nth);

#endif
