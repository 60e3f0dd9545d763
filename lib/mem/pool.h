/*
 * The pool: what ties the layers together. One struct ump_pool per
 * ump_pool_create; its slow-path state is guarded by one mutex (pool->lock),
 * while the hot path (cached sizes) runs on per-thread caches (tcache.h).
 *
 * Memory states, per device:
 *   created = mapped + idle
 *   mapped  = in use (slabs and runs) + cached blocks
 *   in use includes runs and slab objects parked in thread caches and the
 *   freed runs parked whole on the device (runs_free).
 * What ump_trim gives back (cached_bytes): cached blocks, idle chunks, wholly
 * free slabs, and every parked run.
 */
#ifndef UMP_POOL_H
#define UMP_POOL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/conf.h"
#include "util/clock.h"
#include "util/internal.h"
#include "util/list.h"
#include "mem/sizeclass.h"
#include "mem/traffic.h"
#include "topo/topology.h"
#include "mem/vas.h"
#include "place/policy.h"
#include "umpool.h"

/* Runs of up to this many chunks are cached per thread (64 MiB at 2 MiB). */
#define RUN_TCACHE_MAX 32
/* Freed runs parked per device, whole, for the next allocation of a size. */
#define RUN_PARK_MAX 8
/* Fully free slabs kept per device and class before their chunk goes back. */
#define SLAB_EMPTY_KEEP 1

struct slab;
struct tcache;
struct pool_observer;
struct pool_ipc_ops;
struct ipc_state;
struct share_state;

/* A shared pool's hooks (pool->share_ops), pool lock held. charge: bytes
 * of device d's memory this process is about to create (0, or -EDQUOT
 * when the devices' memory is all held by the pool's processes);
 * uncharge: bytes released. lease: at least n more granules of addresses
 * given to this pool's vas (vas_give), or -ENOMEM. */
struct pool_share_ops {
    int (*charge)(struct ump_pool *pool, int d, size_t bytes);
    void (*uncharge)(struct ump_pool *pool, int d, size_t bytes);
    int (*lease)(struct ump_pool *pool, size_t n);
    /* For ump_stats: the pool's processes now (the sharer included) and
     * the bytes of device d (all devices: -1) they hold. */
    void (*figures)(struct ump_pool *pool, int d, int *procs_p,
                    size_t *bytes_p);
};

/* A physical chunk: one backend handle of n granules (at most max_chunk
 * bytes), mapped at granules [g, g+n) or idle. Runs, slabs and cached
 * blocks may each cover part of it (carving: chunks.h). */
struct chunk {
    ump_handle_t handle;
    int device;
    size_t n;
    size_t g;
    size_t ncached;     /* granules in cached blocks (chunks.c: holes) */
    struct chunk *next; /* idle list */
};

/* A run: one allocation of chunks, possibly from several devices; a
 * carved one may share its first and last chunk (chunks.h).
 * Cache-line aligned: its word and size are written on every allocation,
 * by whichever thread holds it. */
struct __attribute__((aligned(UMP_CACHELINE))) run {
    size_t start, n;       /* granules */
    _Atomic size_t size;   /* as requested */
    int device;            /* the first chunk's device (the home device) */
    bool mixed;            /* chunks from more than one device */
    /* An IPC handle names it (lib/ipc): its free takes the full path,
     * which gives it to the layer (pool->ipc_ops) to keep while other
     * processes have it open. Set under pool->lock while it is live, read
     * by the frees after their claim: relaxed. */
    _Atomic bool exported;
    /* Both written as it is handed out, maybe with no lock, and read
     * under the lock by statistics: relaxed atomics. */
    _Atomic unsigned char flags; /* UMP_HINT_* it was allocated with */
    _Atomic uint32_t born; /* pool->clock then (ages) */
    struct res *res;       /* residency, once it may move (offload.c) */
    _Atomic uint32_t word; /* obj_word(OBJ_*, 0) */
    struct run *next;      /* free list of run structs */
};

/* A cached block: free granules that stay mapped, all on one device. */
struct block {
    size_t start, n;
    int device;
    struct ump_list_node link; /* in the device's cached list */
};

/* The state of a slab object or a run, for double-free detection, packed
 * with a slab object's requested size into one word: one cache line to
 * touch per object, and one compare-and-swap decides between racing frees.
 * OBJ_EXPORTED is a live slab object an IPC handle names (lib/ipc): no
 * thread cache's free takes it (they claim OBJ_LIVE only), so its free
 * takes the full path, which gives it to the IPC layer to keep while
 * other processes have it open (front/free.c). Runs say it in their own
 * `exported` flag instead, read by free paths that touch the run anyway. */
enum { OBJ_FREE = 0, OBJ_LIVE = 1, OBJ_PENDING = 2, OBJ_EXPORTED = 3 };
#define OBJ_STATE_SHIFT 30
#define OBJ_REQ_MASK ((1u << OBJ_STATE_SHIFT) - 1)
static inline uint32_t obj_word(unsigned state, size_t req)
{
    return ((uint32_t)state << OBJ_STATE_SHIFT) | (uint32_t)req;
}
static inline unsigned obj_state(uint32_t w) { return w >> OBJ_STATE_SHIFT; }
static inline uint32_t obj_req(uint32_t w) { return w & OBJ_REQ_MASK; }
/* Allocated: live, exported or not. */
static inline bool obj_live(uint32_t w)
{
    return obj_state(w) == OBJ_LIVE || obj_state(w) == OBJ_EXPORTED;
}

/* One allocation as the caches hold it: a slab object (meta = the slab,
 * idx = its index) or a run (meta = the run). */
struct obj_ref {
    void *ptr;
    void *meta;
    uint32_t idx;
};

struct slab_list {
    struct ump_list l;
    size_t count;
};

/* The first slab of a list, or NULL. */
#define slab_list_first(sl)                                                    \
    ump_list_entry_or_null((sl)->l.first, struct slab, link)

/*
 * Places: where chunks come from. Places 0 .. ndev-1 are the devices; then
 * come two places of pinned host memory, mapped at the pool's addresses
 * and reachable by every device: PLACE_HOST (ump_host_alloc) and
 * PLACE_OVERFLOW (device allocations that fit on no device, with
 * overflow:host). Every cache of the memory layer (slabs, runs, cached
 * blocks, idle chunks, thread caches) works per place, so host memory is
 * served from the same size classes as device memory. The two host places
 * are apart so that a free is checked against what was allocated: a
 * ump_host_alloc pointer is not ump_free's, an overflowed device pointer
 * is not ump_host_free's (cuMemFreeHost and cuMemFree under the preload).
 * They draw on one budget, pool->pinned_cap (config pinned_limit).
 * Placement policies see the devices only; host places take no plan.
 */
#define PLACE_EXTRA 2
#define UMP_MAX_PLACES (UMP_MAX_DEVICES + PLACE_EXTRA)
static inline int place_host(const struct ump_pool *pool);
static inline int place_overflow(const struct ump_pool *pool);

/* Per place (a device, or a host place), under pool->lock. */
struct dev_state {
    size_t capacity;          /* bytes the device offers ... */
    size_t capacity_max;      /* ... unless the driver said less */
    size_t created;           /* bytes of chunks created (reserved) */
    size_t created_peak;      /* high-water mark of created */
    size_t mapped;            /* bytes of chunks mapped */
    size_t cached;            /* bytes in cached blocks */
    size_t peak;              /* high-water mark of mapped - cached */
    /* In use at its highest in this release window and the one before
     * (chunks_release_surplus), and the window's number. */
    size_t win_peak[2];
    uint32_t win;
    size_t idle_n;            /* granules of the idle chunks */
    struct chunk *idle;       /* created, not mapped */
    struct ump_list blocks;   /* cached blocks, most recently freed first */
    size_t holes;             /* of those, granules in chunks a live run
                                 shares (chunks.c) */
    struct block *spare_block; /* for a free when malloc fails (chunks.c) */
    struct run *runs;         /* freed runs parked whole (runs_free) */
    size_t nruns, parked;     /* how many, and their bytes */
    uint64_t chunks_created, chunks_released;
    /* slabs by class: with free objects, without, and wholly free */
    struct slab_list *partial, *full, *empty;
};

/* Counters of allocations, kept per thread (no shared cache line on the
 * hot path) and folded into the pool when a thread cache goes away. */
struct counters {
    _Atomic int64_t live_bytes;
    _Atomic uint64_t allocs, frees;
};

/* What the pool knows of one of its live streams (pool->stream_info). */
struct live_stream {
    int device;
    bool wrapped; /* ump_stream_wrap's: destroy only forgets it */
};

/* A deferred free (ump_free_async): reused once the event has completed. */
struct pending {
    void *meta;      /* the slab or the run */
    uint32_t idx;    /* the slab object */
    bool is_slab;
    void *event;     /* kept with the struct when it is recycled */
    struct pending *next;
};

struct ump_pool {
    uint64_t id;          /* unique per process, never reused */
    uint64_t fork_gen;    /* the fork generation the pool belongs to */
    /* Failed devices (bit d: device d). The backend sets bits in failing
     * (backend_ops.watch_failures); the front end handles each once
     * (front/failure.c) and then sets it in failed, which every layer
     * reads with no lock: a failed device is never placed on again. */
    _Atomic uint32_t failing;
    _Atomic uint32_t failed;
    pthread_mutex_t lock; /* everything below marked (L) */
    struct ump_config cfg;
    const struct backend_ops *be;
    void *bctx;
    struct ump_topology topo;
    int ndev;
    int nplace;           /* ndev + PLACE_EXTRA */
    size_t pinned_cap;    /* bytes the host places may hold together */
    size_t chunk_size;    /* the granule: unit of addresses, slabs, stitching */
    unsigned chunk_shift;
    size_t max_chunk_n;   /* largest chunk, in granules */
    size_t warm_chunk_n;  /* largest while freed memory is held (chunks.h) */
    unsigned nsmall;      /* small classes used (fit twice in a chunk) */
    unsigned nbins;       /* nsmall + RUN_TCACHE_MAX */
    size_t small_max;     /* largest size served from slabs */
    void *va;
    struct vas vas;       /* (L) except the tags */
    struct dev_state *dev;   /* (L) per place: [nplace] */
    size_t peak;             /* (L) pool-wide high-water mark of in use */
    bool no_grow;            /* (L) creating chunks answers -EAGAIN: the
                                slow path's first try (front/pool.c) */
    /* (L) ump_pool_suspend moved the devices' data down (front/suspend.c
     * keeps what it needs to bring it back in susp). Allocations are
     * refused meanwhile: read on their path with no lock, hence atomic. */
    _Atomic bool suspended;
    bool suspending;         /* (L) ump_pool_suspend runs (it drops the
                                lock): resume waits for its end */
    struct suspend *susp;
    void *_Atomic root;      /* ump_pool_set_root: kept by checkpoints */
    /* One checkpoint at a time (front/checkpoint.c): each holds moves off
     * while it waits for a still pool, and overlapping ones would keep
     * them off for good. */
    pthread_mutex_t ckpt_lock;
    size_t created;          /* (L) the devices' bytes of chunks created */
    size_t created_peak;     /* (L) and its high-water mark */
    /* (L) High-water marks of the host places together (one budget):
     * chunks created, and in use. */
    size_t pinned_created_peak, pinned_peak;
    struct run *free_runs;   /* (L) */
    struct slab **free_slabs; /* (L) retired slabs, per class (slab.c) */
    struct pending *pending; /* (L) */
    struct pending *spare_pending; /* (L) recycled, each with its event */
    struct tcache *tcaches;  /* (L) every thread cache of this pool */
    struct counters *folded; /* (L) counters of thread caches gone, per place */
    struct ump_pool *reg_next; /* registry of live pools (fork.c) */
    struct policy_set place;            /* (L) policies and their view */
    struct offload *off;                /* tiers and residency (lib/tier) */
    /* Who watches the pool (lib/publish's statistics segment), set at
     * creation by the library's assembly (lib/umpool.c); front calls it,
     * so that it never names a layer above itself. */
    const struct pool_observer *observer;
    void *observer_state;               /* the observer's, or NULL */
    /* IPC handles (lib/ipc): the layer's state and its hooks, both set
     * once under pool->lock at the first ump_ipc_* call (front/lifecycle.h
     * says when front calls them). */
    struct ipc_state *ipc;
    const struct pool_ipc_ops *ipc_ops;
    /* (L) Allocations exported now (runs: r->exported, slab objects:
     * OBJ_EXPORTED) or kept by lib/ipc after their free: other
     * processes map their chunks, so nothing may move them
     * (ump_pool_suspend and ump_evict refuse). */
    size_t exports;
    /* A shared pool (lib/ipc/share.c): its state and the hooks through
     * which mem charges device memory to this process's ledger slot (every
     * process of the pool counts against the devices) and asks for more
     * addresses; NULL when the pool is not shared. Set under pool->lock,
     * called with it held. */
    struct share_state *share;
    const struct pool_share_ops *share_ops;
    /* Live streams (front/stream.c): a hash set of handles, under its own
     * lock, of those ump_stream_create made and those ump_stream_wrap
     * registered (wrapped: the caller's native streams, never destroyed
     * by the pool). */
    pthread_mutex_t streams_lock;
    void **streams;
    struct live_stream *stream_info; /* of streams[i] */
    size_t stream_cap, stream_n;
    /* Communicators made on the pool (lib/coll counts them): the pool is
     * not destroyed under them. */
    _Atomic int comms;
    uint64_t clock_base;     /* CLOCK_MONOTONIC at creation, ns */
    _Atomic uint32_t clock;  /* tenths of a second since: ticked by the
                                publisher and the slow path (stats.c) */
    /* Bytes moved over each link direction, by tier moves and collectives
     * (mem/traffic.h; no lock: relaxed atomics). */
    struct traffic traffic;
    /* Collectives that ran to the end (lib/coll counts them). */
    struct coll_ctr coll_ctr[TRAFFIC_NCOLL];
};

static inline int place_host(const struct ump_pool *pool)
{
    return pool->ndev;
}
static inline int place_overflow(const struct ump_pool *pool)
{
    return pool->ndev + 1;
}
/* Is place d pinned host memory? */
static inline bool place_is_host(const struct ump_pool *pool, int d)
{
    return d >= pool->ndev;
}

/* Has device (a place: host places never fail) failed? */
static inline bool pool_dev_failed(const ump_pool_t *pool, int d)
{
    return d < pool->ndev &&
           ((atomic_load_explicit(&((ump_pool_t *)pool)->failed,
                                  memory_order_acquire) >> d) & 1u);
}
/* Has any device failed? */
static inline bool pool_any_failed(const ump_pool_t *pool)
{
    return atomic_load_explicit(&((ump_pool_t *)pool)->failed,
                                memory_order_acquire) != 0;
}

/* The pool's coarse clock (pool->clock, tenths of a second since
 * creation), which allocations copy into their run with no system call:
 * the publisher ticks it every 100 ms, the slow path of allocations and
 * the readers of ages whenever they run. Racing ticks may store a value a
 * tick old: ages are coarse anyway. */
static inline void pool_clock_init(ump_pool_t *pool)
{
    pool->clock_base = ump_clock_ns();
    atomic_store_explicit(&pool->clock, 0, memory_order_relaxed);
}
static inline uint32_t pool_clock_tick(ump_pool_t *pool)
{
    uint32_t now = (uint32_t)((ump_clock_ns() - pool->clock_base) /
                              100000000ull);
    atomic_store_explicit(&pool->clock, now, memory_order_relaxed);
    return now;
}

/* What the slow path of an allocation needs to place it. */
struct place_req {
    ump_place_request_t req;
    struct policy_inst *policy;
};

#endif
