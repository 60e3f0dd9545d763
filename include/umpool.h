/*
 * umpool: one memory pool over several GPUs, host DRAM and NVMe.
 *
 * Conventions: every action returns 0 or a negative errno; results come back
 * through the last parameters, named *_p, which are written only on success.
 * ump_strerror() turns a code into text. Predicates return bool.
 */
#ifndef UMPOOL_H
#define UMPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UMP_VERSION_MAJOR 0
#define UMP_VERSION_MINOR 1
#define UMP_VERSION_PATCH 0
/* One number, comparable: (major << 16) | (minor << 8) | patch. */
#define UMP_VERSION                                                            \
    ((UMP_VERSION_MAJOR << 16) | (UMP_VERSION_MINOR << 8) | UMP_VERSION_PATCH)

/* The version of the library actually loaded, in the UMP_VERSION form. */
unsigned ump_version(void);
/* The same as "major.minor.patch". */
const char *ump_version_string(void);

typedef struct ump_pool ump_pool_t;
/* A CUstream on the cuda backend (made by ump_stream_create, or the
 * application's own registered with ump_stream_wrap); on sim, a stream made
 * by ump_stream_create. NULL is the default stream (on sim: work runs
 * before the call returns). */
typedef void *ump_stream_t;

/* Most devices one pool spans. */
#define UMP_MAX_DEVICES 32

/* Device selectors. */
#define UMP_DEVICE_CURRENT (-1) /* the calling thread's current device */
#define UMP_DEVICE_ALL (-2)     /* ump_stats: the whole pool */
#define UMP_LOC_HOST (-3)       /* ump_prefetch: the host tier; ump_stats:
                                   pinned host memory (ump_host_alloc and
                                   overflow:host) */

/* Where a byte lives (ump_ptr_info_t.tier). */
#define UMP_TIER_DEVICE 0
#define UMP_TIER_HOST 1
#define UMP_TIER_NVME 2

/* Hint flags. */
#define UMP_HINT_NO_SPILL 0x1u /* only where the policy puts it first: never
                                  spilled to other devices, never moved
                                  (ump_evict: -EPERM) */
#define UMP_HINT_OFFLOAD 0x2u  /* the pool may move it to host or NVMe while
                                  it is not acquired (see ump_acquire) */

/* How an allocation will be read (ump_hints_t.access). */
#define UMP_ACCESS_PRIVATE 0   /* by the requesting device (the default) */
#define UMP_ACCESS_SHARED 1    /* by every device */
#define UMP_ACCESS_STREAMING 2 /* once, in order, by the requesting device */

typedef struct ump_hints {
    int device;         /* requesting device, or UMP_DEVICE_CURRENT */
    const char *policy; /* placement policy, NULL: the pool's default */
    unsigned flags;     /* UMP_HINT_* */
    unsigned group;     /* allocations sharing a group id are placed together
                           (policy "domain"); 0: none */
    int access;         /* UMP_ACCESS_* */
    /* Fields added later keep UMP_HINTS_INIT the default. */
} ump_hints_t;
#define UMP_HINTS_INIT {UMP_DEVICE_CURRENT, NULL, 0u, 0u, UMP_ACCESS_PRIVATE}

/* What made an allocation (ump_ptr_info_t.kind). */
#define UMP_KIND_DEVICE 0 /* ump_alloc: device memory, wherever it is now
                             (moved down a tier, or overflow:host) */
#define UMP_KIND_HOST 1   /* ump_host_alloc: pinned host memory */

typedef struct ump_ptr_info {
    void *base;        /* start of the allocation holding the byte */
    size_t size;       /* its size as requested (ump_host_alloc: rounded
                          up to whole pages) */
    int device;        /* device holding the byte, -1 when not on a device */
    int tier;          /* UMP_TIER_* of the byte */
    void *chunk_base;  /* the physical chunk holding the byte ... */
    size_t chunk_size; /* ... and its size: walk an allocation chunk by chunk */
    int kind;          /* UMP_KIND_*: which call made it (and frees it) */
    int lost;          /* 1: its bytes were on a device that failed: every
                          access is -EIO; ump_free still takes it back */
} ump_ptr_info_t;

/* The same for a pointer that may not be the pool's (an interposer sorting
 * the program's pointers): -ENOENT, and no log line, when ptr is in no live
 * allocation of the pool. */
int ump_ptr_lookup(ump_pool_t *pool, const void *ptr, ump_ptr_info_t *info_p);

/* The address range the pool reserved at creation, for its whole life:
 * every pointer it hands out lies in it, and nothing else is mapped there
 * (an interposer tells the pool's pointers from others by it). */
int ump_pool_range(ump_pool_t *pool, void **base_p, size_t *size_p);

/*
 * Pools. config is "key:value,key:value" (see README, or UMPOOL_CONF); it
 * overrides the environment variable UMPOOL_CONF, key by key. NULL: defaults.
 */
int ump_pool_create(const char *config, ump_pool_t **pool_p);
/* -EBUSY (and nothing destroyed) while allocations or communicators are
 * live, and for the process's pool. Streams left are destroyed with it. */
int ump_pool_destroy(ump_pool_t *pool);
/* The process's pool, shared by everything in the process that has no
 * pool of its own to pass: the PyTorch and CuPy plug-ins, libumpool-preload,
 * the Python package's torch and cupy helpers. The first call makes it from
 * config over UMPOOL_CONF (config NULL: UMPOOL_CONF alone); every later
 * call returns the same pool, whatever its config. A failure to make it is
 * kept: later calls return the same error, with no new attempt. It lives
 * until the process ends (at exit, threads and the driver's own handlers
 * may still use it): ump_pool_destroy refuses it. */
int ump_process_pool(const char *config, ump_pool_t **pool_p);

/*
 * Resilience: checkpoints, suspend and resume (README: Checkpoints; file
 * format: docs/CHECKPOINT.md).
 *
 * Writes every live allocation's bytes and the pool's layout (its address
 * range, every allocation's address, size, hints, placement and tier) to a
 * new file at path, atomically (a temporary file renamed into place,
 * fsynced). Quiesces the pool's own work first; the caller guarantees no
 * other work writes pool memory meanwhile. On error path is untouched (an
 * older checkpoint there stays whole). -EBUSY on a suspended pool.
 */
int ump_pool_checkpoint(ump_pool_t *pool, const char *path);
/* A new pool from a checkpoint: the same address range, every allocation
 * at its old address with its bytes, so pointers stored inside the data
 * stay valid. config overrides the saved configuration key by key (then
 * UMPOOL_CONF, then config; chunk_size cannot change). -EADDRINUSE when
 * the range is taken in this process (restore in a fresh one), -ENOSPC
 * (naming the allocation) when something fits nowhere here, -EIO for a
 * corrupt or truncated file, -EINVAL for a bad header; then no pool. */
int ump_pool_restore(const char *path, const char *config,
                     ump_pool_t **pool_p);
/* The pool's root: one pointer (into the pool, or NULL) that checkpoints
 * keep, so that a restored program finds its data again (the first of its
 * structures, holding pointers to the rest), as a persistent-memory pool's
 * root object does. NULL until set. -EINVAL for a pointer outside the
 * pool's range. */
int ump_pool_set_root(ump_pool_t *pool, void *ptr);
int ump_pool_root(ump_pool_t *pool, void **ptr_p);
/* Moves every device allocation's bytes down to tier (UMP_TIER_HOST or
 * UMP_TIER_NVME; dropped for memory advised UMP_ADVISE_DONTNEED) and gives
 * the devices' memory back to the driver, keeping every address reserved.
 * Until ump_pool_resume no pool memory may be touched, and allocations are
 * -EBUSY; frees and statistics work. Pinned host memory (ump_host_alloc,
 * overflow) stays. -EBUSY when already suspended; on another error every
 * allocation stays readable where it is (those moved are moved back). */
int ump_pool_suspend(ump_pool_t *pool, int tier);
/* Brings everything ump_pool_suspend moved back to the devices it was on.
 * -EINVAL when the pool is not suspended; -ENOMEM (still suspended, able to
 * try again) when the devices lack the room. */
int ump_pool_resume(ump_pool_t *pool);

/* Allocations. hints may be NULL. Pointers are aligned to 256 bytes. */
int ump_alloc(ump_pool_t *pool, size_t size, const ump_hints_t *hints,
              void **ptr_p);
/* NULL ptr: 0. A pointer not from this pool, an interior pointer or a second
 * free: -EINVAL, and nothing changes. As with free(), no queued GPU work may
 * still use the memory: for memory a stream may still use, ump_free_async. */
int ump_free(ump_pool_t *pool, void *ptr);
/* Like ump_free, but the memory is reused only once the work queued on stream
 * so far has finished (like cudaFreeAsync). */
int ump_free_async(ump_pool_t *pool, void *ptr, ump_stream_t stream);

/* Pinned (page-locked) host memory, cached: served from the pool's own size
 * classes over pinned host chunks mapped at the pool's addresses, readable
 * and writable by the CPU and by every device of the pool (copies run at
 * the link's speed), so an allocation of a cached size costs what ump_alloc
 * costs, not the milliseconds of pinning. Page-aligned, in whole pages
 * (as cuMemHostAlloc's), NUMA-local to the calling thread where a new
 * chunk is made. All of it, with the overflow of overflow:host, is at most
 * config pinned_limit: -ENOMEM beyond. ump_ptr_info says device -1, tier
 * UMP_TIER_HOST, kind UMP_KIND_HOST. */
int ump_host_alloc(ump_pool_t *pool, size_t size, void **ptr_p);
/* Frees a ump_host_alloc pointer (NULL: 0). Any other pointer, of this pool
 * or not, an interior pointer or a second free: -EINVAL, nothing changes;
 * ump_free and ump_free_async refuse ump_host_alloc's pointers the same
 * way. As with ump_free, no queued work may still use the memory. */
int ump_host_free(ump_pool_t *pool, void *ptr);
int ump_ptr_info(ump_pool_t *pool, const void *ptr, ump_ptr_info_t *info_p);

/* Devices. The current device is per thread and per pool; it starts at 0. */
int ump_set_device(ump_pool_t *pool, int device);
int ump_get_device(ump_pool_t *pool, int *device_p);
int ump_device_count(ump_pool_t *pool); /* the count, or a negative errno */

/* Give cached physical memory back to the devices (all threads' caches). */
int ump_trim(ump_pool_t *pool);

/*
 * Tiers: device memory, pinned host DRAM (config host_limit), NVMe files
 * (config nvme_dir). Memory moves in whole chunks (ump_ptr_info), and a
 * range covers every chunk it touches.
 *
 * Allocations are pinned by default: the pool never moves them by itself,
 * only ump_evict does. An allocation made with UMP_HINT_OFFLOAD may be moved
 * down by the pool (coldest first) whenever it is not acquired, so its user
 * brackets each use with ump_acquire / ump_release. UMP_HINT_NO_SPILL
 * forbids every move. A chunk on the host tier keeps its address and stays
 * usable by every device (at link speed), and by the CPU where config
 * host_cpu_access is set (off by default: the CPU's mapping of pinned
 * memory costs a move more than its copy); a chunk on NVMe is
 * unmapped: touching it without ump_acquire is a fault (SIGSEGV on the CPU,
 * an illegal address on a GPU).
 *
 * ptr may point anywhere inside an allocation; size 0 means the whole
 * allocation. device is an index or UMP_DEVICE_CURRENT: a chunk off the
 * devices comes back to the device the policy placed it on when device can
 * reach that one, else to device. A stream passed to ump_acquire or
 * ump_prefetch must be NULL or one of the pool's (-EINVAL otherwise); it is
 * not waited on.
 */
/* Makes the range resident on the devices and pins it until ump_release
 * (acquires nest). Returns once the data is in place, so work queued on any
 * stream afterwards sees it. -ENOMEM when the devices cannot take it even
 * after moving unpinned offloadable memory down; -EIO when the disk fails
 * or the data read back is corrupt (it then stays on NVMe). On error
 * nothing is pinned. Slab objects never move: 0, and nothing to do. */
int ump_acquire(ump_pool_t *pool, void *ptr, size_t size, int device,
                ump_stream_t stream);
/* Ends one ump_acquire of the same range. -EINVAL when it is not acquired. */
int ump_release(ump_pool_t *pool, void *ptr, size_t size);
/* Starts moving the range up to device (or UMP_LOC_HOST: from NVMe to the
 * host tier) in the background and returns; a later ump_acquire waits for
 * it. A hint: it never fails for lack of room. */
int ump_prefetch(ump_pool_t *pool, void *ptr, size_t size, int device,
                 ump_stream_t stream);
/* Moves the range down to tier (UMP_TIER_HOST or UMP_TIER_NVME) now; chunks
 * already there or lower stay. -EBUSY for an acquired chunk, or for an
 * allocation that shares a chunk with a live one (carved from freed
 * memory: config carve; with only freed memory beside it, it is first
 * given chunks of its own), -EPERM for
 * UMP_HINT_NO_SPILL, -ENOSPC when the tier is full, -EIO when the disk
 * fails: the data then stays where it was. Chunks moved before the error
 * stay moved. Small allocations (slab objects) do not move: -ENOTSUP; so
 * does UMP_TIER_HOST where a device of the pool cannot map pinned host
 * memory (the driver says so; logged once). */
int ump_evict(ump_pool_t *pool, void *ptr, size_t size, int tier);

#define UMP_ADVISE_HOT 0      /* used soon: evicted last */
#define UMP_ADVISE_COLD 1     /* not used for a while: evicted first */
#define UMP_ADVISE_WILLNEED 2 /* ump_prefetch to its device */
#define UMP_ADVISE_DONTNEED 3 /* contents no longer needed: the next move
                                 down skips the copy (the data becomes
                                 undefined); an acquire clears it. Only
                                 chunks (ump_ptr_info) wholly inside the
                                 range: one it covers in part keeps its
                                 data */
int ump_advise(ump_pool_t *pool, void *ptr, size_t size, int advice);

/*
 * The machine the pool runs on: discovered on cuda (driver, sysfs, NVML,
 * libnuma), read from a topology file on sim; the same model either way.
 */
#define UMP_LINK_SELF 0   /* the device itself */
#define UMP_LINK_NVLINK 1 /* NVLink, direct or through NVSwitch */
#define UMP_LINK_PCIE 2   /* PCIe through a switch, one CPU socket */
#define UMP_LINK_HOST 3   /* PCIe through the CPU's host bridge, one socket */
#define UMP_LINK_SYS 4    /* across the CPU sockets' interconnect */

typedef struct ump_device_props {
    char model[32];
    char pci_bus_id[32]; /* "" when unknown */
    size_t capacity;     /* bytes the pool may use on the device */
    int numa_node;       /* host NUMA node nearest the device */
} ump_device_props_t;

typedef struct ump_link_props {
    int kind;             /* UMP_LINK_* */
    double bandwidth_gbs; /* GB/s per direction */
    int hops;             /* 0 self, 1 nvlink, 2 pcie switch, 3 host, 4 sys */
    bool peer;            /* from can map to's memory */
} ump_link_props_t;

/* "sim" or "cuda"; NULL for a NULL pool. */
const char *ump_backend_name(ump_pool_t *pool);
int ump_device_props(ump_pool_t *pool, int device, ump_device_props_t *props_p);
int ump_link_props(ump_pool_t *pool, int from, int to,
                   ump_link_props_t *props_p);
/* The link kind's name: "self", "nvlink", "pcie", "host", "sys". */
const char *ump_link_kind_name(int kind);

/*
 * Placement policies decide which devices supply the chunks of an
 * allocation larger than a slab object (small objects live in slabs on the
 * requesting device). Built in: "local" (the default), "interleave",
 * "balanced", "domain"; see README. A policy is chosen by the config key
 * `policy` (pool default) or per allocation by hints.policy; a name may
 * carry arguments after '=' ("interleave=0+1+2+3"). A path ("/x/libmine.so")
 * loads a plugin that exports `const ump_policy_t umpool_policy`.
 *
 * A policy never touches memory: it returns a plan, parts in address order,
 * which the pool checks (devices exist and the requesting device can reach
 * them, the counts add up and fit in what each device can supply) and
 * carries out. place() runs under the pool's
 * lock: it must not call back into the pool.
 */
#define UMP_POLICY_VERSION 1
#define UMP_POLICY_SYMBOL "umpool_policy"

typedef struct ump_place_request {
    size_t size;       /* bytes asked for */
    size_t chunks;     /* chunks to place (chunk_size bytes each) */
    size_t chunk_size;
    int device;        /* requesting device */
    unsigned group;    /* from the hints */
    int access;        /* UMP_ACCESS_* */
    unsigned flags;    /* UMP_HINT_* */
} ump_place_request_t;

typedef struct ump_place_view {
    int ndev;
    const size_t *free_chunks;         /* per device: chunks it can supply */
    const ump_device_props_t *devices; /* per device */
    const ump_link_props_t *links;     /* [from * ndev + to] */
} ump_place_view_t;

typedef struct ump_place_part {
    int device;
    size_t chunks;
} ump_place_part_t;

typedef struct ump_policy {
    unsigned version; /* UMP_POLICY_VERSION */
    const char *name;
    /* Once per pool and policy text; args: the text after '=', or NULL.
     * May be NULL (no state). */
    int (*init)(const ump_place_view_t *view, const char *args,
                void **state_p);
    /* Writes at most cap parts; 0, -ENOMEM when the request does not fit,
     * or another negative errno (which ump_alloc returns). */
    int (*place)(void *state, const ump_place_request_t *req,
                 const ump_place_view_t *view, ump_place_part_t *parts,
                 size_t cap, size_t *nparts_p);
    void (*fini)(void *state); /* may be NULL */
} ump_policy_t;

/* Modeled read bandwidth, in GB/s, of device `reader` reading the whole
 * allocation at ptr with its current placement (see README: cost model).
 * -EAGAIN while part of it is on the host tier or NVMe. */
int ump_model_read_bw(ump_pool_t *pool, const void *ptr, int reader,
                      double *gbs_p);

/* Statistics, in bytes and counts; see README for the exact meanings. */
typedef struct ump_stats {
    size_t capacity;     /* physical memory the device(s) offer */
    size_t live_bytes;   /* live allocations, rounded to their size class */
    size_t mapped_bytes; /* physical memory mapped in the pool's addresses */
    size_t cached_bytes; /* held for reuse: what ump_trim gives back */
    size_t peak_bytes;   /* high-water mark of mapped_bytes - cached blocks */
    uint64_t live_count;      /* live allocations */
    uint64_t alloc_count;     /* successful ump_alloc calls */
    uint64_t free_count;      /* successful ump_free / ump_free_async calls */
    uint64_t chunks_created;  /* physical chunks created so far */
    uint64_t chunks_released; /* physical chunks given back so far */
    /* Tiers: bytes of the device's allocations now moved off it. */
    size_t host_bytes;       /* on the host tier */
    size_t nvme_bytes;       /* on NVMe */
    uint64_t spill_count;    /* chunk moves down (device to host or NVMe, */
    uint64_t spill_bytes;    /*   host to NVMe) */
    uint64_t restore_count;  /* chunk moves up */
    uint64_t restore_bytes;
    uint64_t evictions;      /* moves the pool decided itself (watermarks,
                                allocations that would not fit) */
    size_t largest_free;     /* largest cached block: the biggest allocation
                                served with no driver call */
    double fragmentation;    /* 1 - largest_free / free cached bytes in
                                blocks (0 when there are none) */
    /* Physical memory held from the driver (PyTorch's "reserved"): chunks
     * created and not released, mapped or idle. It is mapped_bytes plus
     * idle chunks; mapped_bytes - cached_bytes is not it (cached_bytes
     * counts idle chunks too). See README: statistics. */
    size_t reserved_bytes;
    size_t peak_reserved_bytes; /* high-water mark of reserved_bytes; for the
                                   whole pool, the pool-wide mark (not the
                                   sum of the devices') */
    uint64_t driver_ns;      /* driver time of the virtual-memory calls on
                                device chunks (create, map, set access,
                                unmap, release), ns: measured on cuda (for
                                the whole pool only: 0 per device), modeled
                                on sim with sim_driver_costs (else 0) */
    /* Failed devices (a lost GPU, an uncorrectable memory error): how many
     * of those covered (0 or 1 for one device), and the allocations lost
     * with them, live until freed (counted at their home device, bytes
     * rounded as live_bytes). See README: a failed device. */
    int failed_devices;
    uint64_t lost_count;
    size_t lost_bytes;
    /* A shared pool (ump_pool_share, ump_pool_attach): the processes
     * attached now, the sharer included, and the device memory they hold
     * together (this process's share of it: reserved_bytes); 0 and 0 for
     * a pool that is not shared. */
    int share_processes;
    size_t share_bytes;
} ump_stats_t;
/* device: an index, UMP_DEVICE_ALL for every device, or UMP_LOC_HOST for
 * the pinned host memory of ump_host_alloc and overflow:host (capacity:
 * pinned_limit; no tier figures). Overflowed allocations count there, not
 * on the device that asked. */
int ump_stats(ump_pool_t *pool, int device, ump_stats_t *stats_p);

/*
 * Traffic: the bytes the pool itself moved over each link direction since
 * it was created (counters: their rate is the link's bandwidth in use).
 * src and dst are locations: a device index, UMP_LOC_HOST (host DRAM),
 * UMP_LOC_NVME (the NVMe tier) or UMP_LOC_NET (other processes, through a
 * communicator's data engine). Counted:
 *  - tier moves (spills, restores, prefetches, evictions, suspend and
 *    resume): a chunk's bytes once per link it crossed; device to NVMe
 *    crosses the device's host link (into bounce buffers) and then host to
 *    NVMe, and back the same way;
 *  - collectives and point-to-point: each transfer of the schedule that ran,
 *    between the devices of the ranks whose buffers it read and wrote (a
 *    rank's buffers count at its device), on cuda through host memory
 *    where a rank cannot reach a peer, and to or from UMP_LOC_NET for bytes
 *    sent to or received from other processes (their small control
 *    messages included).
 * Not counted: ump_memcpy_async and ump_memset_async (the caller's own
 * copies), checkpoint and restore files. See README: monitoring.
 */
#define UMP_LOC_NVME (-4) /* ump_link_stats: the NVMe tier */
#define UMP_LOC_NET (-5)  /* ump_link_stats: other processes */
typedef struct ump_link_stats {
    uint64_t tier_bytes;  /* moved by the tiers */
    uint64_t coll_bytes;  /* moved by collectives and point-to-point */
    double bandwidth_gbs; /* the link's bandwidth per direction from the
                             topology, GB/s (ump_link_props between devices;
                             a device's host link; 0: not known, as for NVMe
                             and the network) */
} ump_link_stats_t;
/* 0, or -EINVAL for a bad location, src == dst or a NULL stats_p. */
int ump_link_stats(ump_pool_t *pool, int src, int dst,
                   ump_link_stats_t *stats_p);

/* The collectives of every communicator of the pool, per UMP_COLL_* (below):
 * calls that succeeded (ran to the end; queued, for a call on streams), on
 * every backend, in-process and across processes (a call that failed is
 * not counted). */
typedef struct ump_coll_stats {
    uint64_t calls;
    uint64_t bytes;           /* their data as nccl-tests' algorithm bandwidth
                                 counts it: count * element size for
                                 allreduce, broadcast and reduce; the whole
                                 gathered, scattered or exchanged buffer
                                 (nranks * count * size) for the others */
    /* Synchronous calls (streams NULL), timed from the call to its return:
     * with their bytes times the collective's bus factor (allreduce
     * 2(n-1)/n; allgather, reduce-scatter, all-to-all, gather and scatter
     * (n-1)/n; broadcast and reduce 1; n the ranks), their bus bandwidth
     * (nccl-tests' busBw) is timed_bus_bytes / timed_ns. A call queued on
     * streams has no time the host can take without waiting for it. */
    uint64_t timed_calls;
    uint64_t timed_bus_bytes;
    uint64_t timed_ns;
} ump_coll_stats_t;
/* coll: UMP_COLL_*. 0, or -EINVAL. */
int ump_coll_stats(ump_pool_t *pool, int coll, ump_coll_stats_t *stats_p);

/* A live allocation, as ump_largest_allocs reports it. */
typedef struct ump_alloc_info {
    void *ptr;
    size_t size;     /* as requested */
    int device;      /* home device: where its first chunk was placed */
    int ndevices;    /* devices its chunks were placed on */
    int tier;        /* UMP_TIER_* of its first chunk now */
    unsigned flags;  /* UMP_HINT_* it was made with */
    double age_s;    /* seconds since it was allocated (0.1 s resolution) */
} ump_alloc_info_t;
/* The largest live allocations of device (or UMP_DEVICE_ALL), largest
 * first: writes up to max of them and their number to *count_p. Slab
 * objects (the small sizes) are not listed. */
int ump_largest_allocs(ump_pool_t *pool, int device, ump_alloc_info_t *out,
                       size_t max, size_t *count_p);

/* The host and NVMe tiers as a whole. */
typedef struct ump_tier_stats {
    size_t capacity;      /* host_limit or nvme_limit; 0: tier off (host) or
                             no limit but the disk (NVMe) */
    size_t used_bytes;    /* chunks holding allocations' data */
    size_t reserve_bytes; /* host: pinned chunks created ahead, empty */
    size_t peak_bytes;    /* high-water mark of used_bytes */
    uint64_t chunks;      /* chunks holding data */
} ump_tier_stats_t;
/* tier: UMP_TIER_HOST or UMP_TIER_NVME. */
int ump_tier_stats(ump_pool_t *pool, int tier, ump_tier_stats_t *stats_p);

/*
 * Streams and copies, for code that runs on either backend. On cuda a stream
 * is a CUstream of the device's primary context; on sim a worker thread runs
 * each stream's work in order. Every call that takes a stream accepts NULL
 * and the pool's streams: those ump_stream_create made and those
 * ump_stream_wrap registered; any other is -EINVAL.
 */
int ump_stream_create(ump_pool_t *pool, int device, ump_stream_t *stream_p);
/* Makes native, a stream the application made (on cuda a CUstream of
 * device's primary context: a framework's, such as PyTorch's side streams),
 * a stream of the pool, usable by every call that takes one; *stream_p is
 * native itself. The pool never destroys it: ump_stream_destroy only
 * unregisters it, and the caller keeps the native stream alive while it is
 * wrapped. -EINVAL when native is NULL or not a stream of that context
 * (the driver is asked: cuStreamGetCtx); -EEXIST, nothing changed, when it
 * is a stream of the pool already (made or wrapped: usable as it is);
 * -ENOTSUP on sim, which has no native streams. */
int ump_stream_wrap(ump_pool_t *pool, int device, void *native,
                    ump_stream_t *stream_p);
/* Destroys a stream ump_stream_create made (after its queued work), or
 * unregisters one ump_stream_wrap registered (the native stream lives on). */
int ump_stream_destroy(ump_pool_t *pool, ump_stream_t stream);
int ump_stream_synchronize(ump_pool_t *pool, ump_stream_t stream);
int ump_memcpy_async(ump_pool_t *pool, void *dst, const void *src,
                     size_t size, ump_stream_t stream);
int ump_memset_async(ump_pool_t *pool, void *dst, int value, size_t size,
                     ump_stream_t stream);
/* Runs fn(arg) on a host thread once the stream's earlier work is done, and
 * holds the stream's later work until fn returns (cuLaunchHostFunc). fn
 * must not call umpool or CUDA (the driver forbids CUDA calls there). */
int ump_launch_host_func(ump_pool_t *pool, ump_stream_t stream,
                         void (*fn)(void *arg), void *arg);

/*
 * Collectives on pooled buffers across the devices of one pool (one process
 * driving several devices, like ncclCommInitAll). Rank r runs on device
 * devices[r]; every device of the pool maps every chunk at one address, so
 * a rank reads its peers' buffers through the pool's own pointers. Buffers
 * are pool memory; counts are elements. Each call covers every rank of the
 * communicator: send[i] and recv[i] are rank i's buffers, streams[i] rank
 * i's stream (a stream of its device: the call returns once the work is
 * queued); streams NULL: the communicator's own streams, and the call
 * returns when the work is done. In place when send[i] == recv[i].
 * Reductions are exact and reproducible: float16 and bfloat16 accumulate in
 * float32, every rank reads its inputs in one fixed order (all ranks get
 * bitwise the same result, run after run), integers wrap as C unsigned
 * arithmetic, AVG divides once at the end (integers truncate). See README:
 * collectives.
 */
typedef struct ump_comm ump_comm_t;
typedef enum {
    UMP_INT8 = 0, UMP_UINT8 = 1, UMP_INT32 = 2, UMP_UINT32 = 3,
    UMP_INT64 = 4, UMP_UINT64 = 5, UMP_FLOAT16 = 6, UMP_FLOAT32 = 7,
    UMP_FLOAT64 = 8, UMP_BFLOAT16 = 9
} ump_dtype_t; /* NCCL's numbers */
typedef enum {
    UMP_SUM = 0, UMP_PROD = 1, UMP_MAX = 2, UMP_MIN = 3, UMP_AVG = 4
} ump_redop_t;

/* The collectives, for ump_comm_plan. */
#define UMP_COLL_ALLREDUCE 0
#define UMP_COLL_BROADCAST 1
#define UMP_COLL_REDUCE 2
#define UMP_COLL_ALLGATHER 3
#define UMP_COLL_REDUCE_SCATTER 4
#define UMP_COLL_ALLTOALL 5
#define UMP_COLL_GATHER 6
#define UMP_COLL_SCATTER 7

/* ndev ranks; rank r runs on device devices[r] (devices NULL: every device
 * of the pool, rank = device). config: "key:value,..." for the
 * communicator (coll_algo:NAME forces an algorithm; NULL: defaults). */
int ump_comm_create(ump_pool_t *pool, int ndev, const int *devices,
                    const char *config, ump_comm_t **comm_p);
int ump_comm_destroy(ump_comm_t *comm);
/* A communicator of comm's ranks but the nexclude global ranks in exclude
 * (those of failed devices, say), renumbered densely in order, with comm's
 * config; comm stays valid until ump_comm_destroy. Across processes every
 * process of comm calls it with the same exclude list (checked: -EINVAL
 * everywhere when not); a process whose ranks are all excluded gets
 * *newcomm_p = NULL and 0. Bad ranks, duplicates, or excluding every rank:
 * -EINVAL, nothing made. */
int ump_comm_shrink(ump_comm_t *comm, int nexclude, const int *exclude,
                    ump_comm_t **newcomm_p);
int ump_comm_size(ump_comm_t *comm, int *nranks_p);
int ump_allreduce(ump_comm_t *c, const void *const send[], void *const recv[],
                  size_t count, ump_dtype_t dt, ump_redop_t op,
                  const ump_stream_t streams[]);
/* send[] read at root only. */
int ump_broadcast(ump_comm_t *c, const void *const send[], void *const recv[],
                  size_t count, ump_dtype_t dt, int root,
                  const ump_stream_t streams[]);
/* recv[] at root only. */
int ump_reduce(ump_comm_t *c, const void *const send[], void *const recv[],
               size_t count, ump_dtype_t dt, ump_redop_t op, int root,
               const ump_stream_t streams[]);
/* recv[i]: nranks * sendcount elements. */
int ump_allgather(ump_comm_t *c, const void *const send[], void *const recv[],
                  size_t sendcount, ump_dtype_t dt,
                  const ump_stream_t streams[]);
/* send[i]: nranks * recvcount elements. */
int ump_reduce_scatter(ump_comm_t *c, const void *const send[],
                       void *const recv[], size_t recvcount, ump_dtype_t dt,
                       ump_redop_t op, const ump_stream_t streams[]);
/* count elements per peer: send[i] and recv[i] hold nranks * count. */
int ump_alltoall(ump_comm_t *c, const void *const send[], void *const recv[],
                 size_t count, ump_dtype_t dt, const ump_stream_t streams[]);
/* recv[] at root only: nranks * sendcount elements. */
int ump_gather(ump_comm_t *c, const void *const send[], void *const recv[],
               size_t sendcount, ump_dtype_t dt, int root,
               const ump_stream_t streams[]);
/* send[] read at root only: nranks * recvcount elements. */
int ump_scatter(ump_comm_t *c, const void *const send[], void *const recv[],
                size_t recvcount, ump_dtype_t dt, int root,
                const ump_stream_t streams[]);
/* What the communicator would run for a collective of count elements: the
 * algorithm's name and the cost model's time for this topology. */
typedef struct ump_coll_plan {
    const char *algorithm;
    double modeled_us;
} ump_coll_plan_t;
int ump_comm_plan(ump_comm_t *c, int coll, size_t count, ump_dtype_t dt,
                  ump_coll_plan_t *plan_p);
/* The cost model's time for the schedule the last finished call on c ran
 * (sim: each transfer charged to the links it crossed); to set beside
 * the plan's. -ENODATA: no call has finished with one. */
int ump_comm_last_modeled_us(ump_comm_t *c, double *us_p);

/*
 * Communicators across processes (and nodes). Processes meet through an
 * out-of-band channel the caller provides (the shape UCC uses): rank and
 * size of this process, an allgather and a barrier. The library itself
 * links no MPI: libumpool-mpi (umpool_mpi.h) supplies the channel and MPI
 * as the data engine between processes; on cuda, NCCL is used where it
 * loads (coll_engine:auto|mpi|nccl). Global ranks are numbered process by
 * process: this process's ranks follow those of every process before it.
 * The collective calls above take this process's ranks in send[], recv[]
 * and streams[] (index = local rank), with counts, roots and slices
 * counted over every rank of every process. When every process shares one
 * pool (ump_pool_share, ump_pool_attach) on sim, calls run as one job over
 * every rank through the pool's addresses, as in one process (ump_comm_plan
 * says "shared"). See README: processes.
 */
typedef struct ump_oob {
    int rank, size;   /* this process among size processes */
    int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes);   /* recv: size * bytes */
    int (*barrier)(void *ctx);
    void *ctx;
} ump_oob_t;
/* A communicator over the ranks of every process: this process contributes
 * nlocal ranks on devices[0..nlocal). Every process calls it with the same
 * config (checked: a mismatch is -EINVAL on every process). Without a data
 * engine (ump_comm_create_mpi, or NCCL on cuda) the collectives move their
 * data through oob->allgather, which then must stay valid until
 * ump_comm_destroy, and point-to-point between processes is -ENOTSUP. */
int ump_comm_create_oob(ump_pool_t *pool, int nlocal, const int *devices,
                        const ump_oob_t *oob, const char *config,
                        ump_comm_t **comm_p);
/* global rank of local rank `local` */
int ump_comm_rank(ump_comm_t *c, int local, int *rank_p);
/* Point-to-point between any two ranks, matched in order per (source,
 * destination) pair. Calls between ump_group_start() and ump_group_end()
 * are issued together, so paired exchanges cannot deadlock. The work
 * queued on stream before the call is finished before buf is read or
 * written, and the data has arrived when the call (or ump_group_end)
 * returns. A send between two ranks of this process must be in a group
 * with its receive (-EDEADLK otherwise). */
int ump_send(ump_comm_t *c, int local, const void *buf, size_t count,
             ump_dtype_t dt, int peer, ump_stream_t stream);
int ump_recv(ump_comm_t *c, int local, void *buf, size_t count,
             ump_dtype_t dt, int peer, ump_stream_t stream);
int ump_group_start(void);
int ump_group_end(void);

/*
 * A pool shared by the processes of a node (see README, "Sharing a pool
 * between processes"). ump_pool_share publishes pool under name (a plain
 * word: letters, digits, '-', '_'; else -EINVAL) as a Unix socket in the
 * user's own directory ($XDG_RUNTIME_DIR/umpool, else /tmp/umpool-UID;
 * another user's process is refused); -EADDRINUSE when a live pool is
 * shared under that name already (a stale socket of a process that died
 * is replaced). ump_pool_attach joins it from another process of the
 * user: *pool_p is a pool of its own, whose addresses are the shared
 * pool's, reserved at the same base (attach early: -EADDRINUSE when the
 * range is taken here), and whose configuration is the sharer's with
 * UMPOOL_CONF and config on top; chunk_size, the backend or the devices
 * disagreeing is -EINVAL, naming the key. -ENOENT when nothing is shared
 * under name.
 *
 * Every process allocates in its own slices of the addresses (leased by
 * the sharer on demand), so a pointer is the same number in every process
 * and means one allocation. Physical memory is the maker's: another
 * process uses an allocation through ump_ipc_get_handle / ump_ipc_open,
 * which in a process of the same shared pool maps it at the same address.
 * The maker frees; the others close. Device memory is counted across the
 * processes (the devices' capacity holds for all of them together) and
 * per process (config key process_limit; the sharer's holds for every
 * process, which may ask for less): past either, ump_alloc is -ENOMEM.
 * ump_stats gives share_processes and share_bytes.
 *
 * ump_pool_destroy of an attached pool detaches: its own memory goes, what
 * it exported stays valid where it is open; a process that dies the same.
 * Its ledger slot and addresses come back to the pool once no other
 * process has its memory open. The sharer's ump_pool_destroy stops
 * sharing: attached pools keep what they have, and get no more addresses.
 */
int ump_pool_share(ump_pool_t *pool, const char *name);
int ump_pool_attach(const char *name, const char *config, ump_pool_t **pool_p);

/*
 * IPC handles: one allocation used by another process of the same user on
 * the node, in the CUDA IPC style (cudaIpcGetMemHandle). The maker asks
 * for a handle, sends its 64 bytes over any channel, and the other process
 * opens it in a pool of its own: the allocation's physical memory is
 * imported (a POSIX file descriptor of cuMemExportToShareableHandle on
 * cuda, the device's memfd on sim, passed over a Unix socket of the
 * maker's pool) and mapped at the maker's address where that is free in
 * the opener, else elsewhere: *ptr_p says where. Every device of the
 * opener that reaches the memory can use the pointer.
 *
 * Rules (see README, "Sharing an allocation between processes"):
 *  - What can be exported: a device allocation of ump_alloc that never
 *    moves (not made with UMP_HINT_OFFLOAD), of any size. The handle
 *    covers the whole allocation; ptr is its start. A small one (a slab
 *    object: half a chunk, 1 MiB by default, and less) is opened with the
 *    chunk it lies in, as cudaIpcOpenMemHandle maps a whole allocation:
 *    the opener must touch only its object's bytes.
 *    While exported it does not move: ump_evict and ump_pool_suspend are
 *    -EBUSY.
 *  - The maker frees, openers close. The maker's ump_free of an
 *    allocation that is open elsewhere returns at once, and its memory and
 *    addresses stay held until the last opener has closed it (or died).
 *    After the free the handle opens nowhere (-EINVAL).
 *  - A handle is opened once per opening pool: a second ump_ipc_open of
 *    it returns the same pointer and needs a second ump_ipc_close; once
 *    closed, it is refused (-EINVAL: replayed). ump_ipc_get_handle again
 *    gives a fresh one.
 *  - Bad handles (damaged bytes, another backend's, one of a pool that
 *    is gone or never was, one of the opening pool itself, one whose
 *    allocation was freed, one replayed after close): -EINVAL, logged,
 *    nothing mapped. The maker's socket is checked to be this user's.
 *  - ump_pool_destroy of the maker with handles still open elsewhere: the
 *    openers' mappings stay valid until they close them. ump_pool_destroy
 *    of an opener unmaps what it still has open.
 */
typedef struct ump_ipc_handle { unsigned char bytes[64]; } ump_ipc_handle_t;   /* plain bytes: memcpy, write, send */
/* A handle's first 4 bytes, so that a program (the preload) that takes
 * handles of several kinds can tell umpool's. */
#define UMP_IPC_HANDLE_TAG "UMPH"
int ump_ipc_get_handle(ump_pool_t *pool, const void *ptr, ump_ipc_handle_t *handle_p);
int ump_ipc_open(ump_pool_t *pool, const ump_ipc_handle_t *handle, void **ptr_p);
/* ptr: what ump_ipc_open returned. */
int ump_ipc_close(ump_pool_t *pool, void *ptr);

const char *ump_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* UMPOOL_H */
