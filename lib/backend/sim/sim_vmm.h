/*
 * What the files of the sim backend share: the context, its devices, chunk
 * slots and reservations (sim.c opens and closes them; sim_vmm.c is the
 * emulated VMM over them; sim_stream.c the streams; sim_timed.c the H200's
 * timing). One mutex, c->lock, guards everything but the streams and the
 * timing's two locks (drv_lock before c->lock, link_lock inside it).
 */
#ifndef UMP_BACKEND_SIM_VMM_H
#define UMP_BACKEND_SIM_VMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "topo/drivercost.h"
#include "backend/sim/sim.h"
#include "topo/topology.h"

#define SIM_GRAN ((size_t)2 << 20)          /* like cuMemCreate on an H200 */
#define SIM_DEFAULT_MEM ((size_t)16 << 30)
#define SIM_IMPORTS 4096 /* imported chunks live at once, at most */

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
    /* Imported (sim_chunk_import): off is in fd, another process's (or
     * context's) device memory, which this one holds open; not in the
     * device's memfd, not counted in its capacity, never poisoned here. */
    bool imported;
    int fd;
    /* chunk_export gave its extent to another process, which may still
     * map it when this context releases it (even closes): its memory is
     * left as it is, not punched out, for the other's mapping to keep. */
    bool exported;
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
    bool cpu;                /* a host chunk's, set_access_host gave the CPU
                                access: the CPU's page tables map it */
};

struct sim_resv {
    char *va;
    size_t size;
    size_t nmapped;         /* granules mapped */
    struct sim_granule *g;  /* MAP_NORESERVE: costs nothing until touched */
    size_t gbytes;
    struct sim_resv *next;
};

/* The links a copy occupies (sim_timed.c): each device's to the host and
 * from it, its own memory, and each ordered pair of devices. */
#define SIM_LINKS (3 * UMP_MAX_DEVICES + UMP_MAX_DEVICES * UMP_MAX_DEVICES)

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
    /* The bytes of the chunks' memory: copies and memsets hold it for
     * reading while they move bytes, a device failing takes it for writing
     * to poison its memory (sim_bytes_hold, sim_fail.c). Taken inside the
     * lock by the failure, never held while taking the lock by a copy. */
    pthread_rwlock_t bytes;
    size_t nimported; /* imported chunks live (under the lock) */
    /* sim_driver_costs:h200 and h200-timed: the driver time the calls on
     * device chunks would have taken on an H200, per device of the chunk
     * (sim_vmm.c adds under the lock, sim_driver_ns reads with none). */
    bool drv_costs;
    _Atomic uint64_t drv_ns[UMP_MAX_DEVICES];
    /* sim_driver_costs:h200-timed (sim_timed.c): every call waits for its
     * H200 cost times time_scale. drv_lock is the driver's own lock: one
     * virtual-memory call at a time, held for the call's whole modeled
     * time, and never with c->lock held (taken before it, given back
     * after), so that the streams' copies, which only take c->lock to
     * find their memory, run on meanwhile. link_busy, under link_lock
     * (taken inside c->lock, nothing inside it): when each link is next
     * free, for the copies' pacing. Fixed at open: timed, time_scale. */
    bool timed;
    unsigned time_scale;
    _Atomic uint64_t timed_ns; /* the H200 cost of every call so far */
    pthread_mutex_t drv_lock;
    pthread_mutex_t link_lock;
    uint64_t link_busy[SIM_LINKS];
};

/* The timed mode's state from the configuration, and its locks (open);
 * the locks destroyed (close). 0 or a negative errno, logged. */
int sim_timed_init(struct sim_ctx *c, const struct ump_config *cfg);
void sim_timed_fini(struct sim_ctx *c);

/* A virtual-memory call under h200-timed: when it got the driver, and the
 * H200's cost (ns) of what it has done so far. */
struct sim_call {
    uint64_t t0, ns;
};

/* Starts a call (no lock held): with h200-timed, takes the driver's lock
 * and notes the time; else nothing. */
void sim_call_begin(struct sim_ctx *c, struct sim_call *k);
/* Ends it (no lock held): waits until t0 plus its cost times the scale,
 * then gives the driver's lock back. */
void sim_call_end(struct sim_ctx *c, struct sim_call *k);
/* Where the memory at p lies: a device (>= 0), SIM_LOC_HOST (a host
 * chunk) or SIM_LOC_PLAIN (outside every reservation); in *len_p how many
 * bytes from p lie there, at most max. Lock held. */
#define SIM_LOC_HOST (-1)
#define SIM_LOC_PLAIN (-2)
int sim_loc_of(struct sim_ctx *c, const void *p, size_t max, size_t *len_p);

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
int sim_chunk_export(void *ctx, ump_handle_t h, int *fd_p, uint64_t *off_p);
int sim_chunk_import(void *ctx, int fd, uint64_t off, size_t size, int device,
                     ump_handle_t *h_p);
int sim_map(void *ctx, void *va, size_t size, ump_handle_t h);
int sim_unmap(void *ctx, void *va, size_t size);
int sim_set_access(void *ctx, void *va, size_t size, const int *devices,
                   int ndevices);
int sim_set_access_host(void *ctx, void *va, size_t size, const int *devices,
                        int ndevices);


/* sim_vmm.c's helpers that sim_share.c uses too (lock held): the live
 * chunk of handle h or NULL, a free chunk slot or NULL, the file a
 * chunk's memory is in, and the modeled driver time of op on ch. */
struct sim_chunk *chunk_of(struct sim_ctx *c, ump_handle_t h);
struct sim_chunk *slot_get(struct sim_ctx *c);
int chunk_fd(struct sim_ctx *c, const struct sim_chunk *ch);
void drv_account(struct sim_ctx *c, const struct sim_chunk *ch,
                 enum drv_op op, struct sim_call *k);

#endif
