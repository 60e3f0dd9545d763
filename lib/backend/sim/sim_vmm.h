/*
 * What the files of the sim backend share: the context, its devices, chunk
 * slots and reservations (sim.c opens and closes them; sim_vmm.c is the
 * emulated VMM over them; sim_stream.c the streams). One mutex, c->lock,
 * guards everything but the streams.
 */
#ifndef UMP_BACKEND_SIM_VMM_H
#define UMP_BACKEND_SIM_VMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "topo/topology.h"

#define SIM_GRAN ((size_t)2 << 20)          /* like cuMemCreate on an H200 */
#define SIM_DEFAULT_MEM ((size_t)16 << 30)

struct sim_extent {
    size_t off, len;
    struct sim_extent *next;
};

struct sim_chunk {
    int device;               /* -1: the slot is free; a node if host */
    bool host;                /* on a host NUMA node, not a device */
    bool released;            /* chunk_release was called */
    unsigned maps;            /* mappings that still hold the memory */
    size_t size, off;         /* extent in the device's (node's) memfd */
    struct sim_extent *spare; /* gives the extent back without allocating */
    struct sim_chunk *next_free;
};

struct sim_device {
    int fd;
    /* The whole memfd, mapped once: the device's own view of its memory,
     * through which the streams copy and set (see sim_view_of). */
    char *win;
    size_t cap, used;
    struct sim_extent *free; /* sorted by offset, never adjacent */
};

/* One per granule of a reservation; idx 0 marks the start of a mapping. */
struct sim_granule {
    struct sim_chunk *chunk; /* NULL: not mapped */
    uint32_t idx;            /* granule index inside the chunk */
    bool access;
};

struct sim_resv {
    char *va;
    size_t size;
    size_t nmapped;         /* granules mapped */
    struct sim_granule *g;  /* MAP_NORESERVE: costs nothing until touched */
    size_t gbytes;
    struct sim_resv *next;
};

enum { FAULT_CHUNK_CREATE, FAULT_HOST_CHUNK_CREATE, FAULT_MAP,
       FAULT_SET_ACCESS, FAULT_UNMAP, FAULT_RESERVE, FAULT_OPS };

struct sim_ctx {
    pthread_mutex_t lock;
    struct ump_topology topo;
    int ndev;
    struct sim_device dev[UMP_MAX_DEVICES];
    int nhost;                           /* host NUMA nodes, at least 1 */
    struct sim_device host[UMP_MAX_NUMA];
    struct sim_chunk *slots;
    size_t nslots, slots_bytes;
    size_t slots_touched; /* slots handed out at least once */
    struct sim_chunk *free_head, *free_tail;
    struct sim_resv *resv;
    struct {
        int nth, err;
    } fault[FAULT_OPS];
    struct sim_streams streams;
    /* Device failures (sim_fail.c), under the lock: the device that fails
     * at its fail_left-th operation from now (fail_dev -1: none), those
     * failed, and the word of the pool watching (watch_failures). */
    int fail_dev;
    long fail_left;
    uint32_t failed;
    _Atomic uint32_t *watch;
    /* sim_driver_costs:h200: the driver time the calls would have taken
     * on an H200, per device of the chunk (sim_vmm.c adds under the lock,
     * sim_driver_ns reads with none). Only accounted: sim never sleeps. */
    bool drv_costs;
    _Atomic uint64_t drv_ns[UMP_MAX_DEVICES];
};

/* Puts fresh PROT_NONE memory over [va, va + size) of a reservation
 * (sim_resv.c): what an unmap leaves. */
int sim_resv_fill(void *va, size_t size);
/* Counts down an injected fault of op; its error once due, else 0. Lock
 * held. */
int sim_fault_hit(struct sim_ctx *c, int op);
/* An operation of device (chunk create, map, set access, work of its
 * streams) is about to run: -EIO when the device has failed, or fails with
 * it (sim_fail.c); 0 for a host node (device < 0). Lock held. */
int sim_dev_op(struct sim_ctx *c, int device);
/* Frees the slots array and every chunk's extent (close). Lock held. */
void sim_chunk_free(struct sim_ctx *c, struct sim_chunk *ch);

/* The VMM ops (sim_vmm.c). */
uint64_t sim_driver_ns(void *ctx, int device);
void sim_watch_failures(void *ctx, _Atomic uint32_t *mask);
int sim_reserve(void *ctx, size_t size, size_t align, void **va_p);
int sim_reserve_at(void *ctx, void *va, size_t size, size_t align);
int sim_unreserve(void *ctx, void *va, size_t size);
int sim_chunk_create(void *ctx, int device, size_t size, ump_handle_t *h_p);
int sim_host_chunk_create(void *ctx, int numa_node, size_t size,
                          ump_handle_t *h_p);
void *sim_io_view(void *ctx, void *va, size_t size);
int sim_chunk_release(void *ctx, ump_handle_t h);
int sim_map(void *ctx, void *va, size_t size, ump_handle_t h);
int sim_unmap(void *ctx, void *va, size_t size);
int sim_set_access(void *ctx, void *va, size_t size, const int *devices,
                   int ndevices);
int sim_set_access_host(void *ctx, void *va, size_t size, const int *devices,
                        int ndevices);

#endif
