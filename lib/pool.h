/*
 * The pool: what ties the layers together. One struct ump_pool per
 * ump_pool_create; its slow-path state is guarded by one mutex (pool->lock),
 * while the hot path (cached sizes) runs on per-thread caches (tcache.h).
 *
 * Memory states, per device:
 *   created = mapped + idle
 *   mapped  = in use (slabs and runs) + cached blocks
 *   in use includes runs and slab objects parked in thread caches and the
 *   freed runs parked whole on the device (pool_run_free).
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
#include "conf.h"
#include "internal.h"
#include "sizeclass.h"
#include "topology.h"
#include "vas.h"
#include "umpool.h"

/* Runs of up to this many chunks are cached per thread (64 MiB at 2 MiB). */
#define RUN_TCACHE_MAX 32
/* Freed runs parked per device, whole, for the next allocation of a size. */
#define RUN_PARK_MAX 8
/* Fully free slabs kept per device and class before their chunk goes back. */
#define SLAB_EMPTY_KEEP 1

struct slab;
struct tcache;
struct policy_inst;

/* A physical chunk: one backend handle of n granules (a power of two, at
 * most max_chunk bytes), mapped at granules [g, g+n) or idle. */
struct chunk {
    ump_handle_t handle;
    int device;
    size_t n;
    size_t g;
    struct chunk *next; /* idle list */
};

/* A run: one allocation of whole chunks, possibly from several devices.
 * Cache-line aligned: its word and size are written on every allocation,
 * by whichever thread holds it. */
struct __attribute__((aligned(UMP_CACHELINE))) run {
    size_t start, n;       /* granules */
    _Atomic size_t size;   /* as requested */
    int device;            /* the first chunk's device (the home device) */
    bool mixed;            /* chunks from more than one device */
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
    struct block *prev, *next; /* in the device's cached list */
};

/* The state of a slab object or a run, for double-free detection, packed
 * with a slab object's requested size into one word: one cache line to
 * touch per object, and one compare-and-swap decides between racing frees. */
enum { OBJ_FREE = 0, OBJ_LIVE = 1, OBJ_PENDING = 2 };
#define OBJ_STATE_SHIFT 30
#define OBJ_REQ_MASK ((1u << OBJ_STATE_SHIFT) - 1)
static inline uint32_t obj_word(unsigned state, size_t req)
{
    return ((uint32_t)state << OBJ_STATE_SHIFT) | (uint32_t)req;
}
static inline unsigned obj_state(uint32_t w) { return w >> OBJ_STATE_SHIFT; }
static inline uint32_t obj_req(uint32_t w) { return w & OBJ_REQ_MASK; }

struct slab_list {
    struct slab *head;
    size_t count;
};

/* Per device, under pool->lock. */
struct dev_state {
    size_t capacity;          /* bytes the device offers ... */
    size_t capacity_max;      /* ... unless the driver said less */
    size_t created;           /* bytes of chunks created */
    size_t mapped;            /* bytes of chunks mapped */
    size_t cached;            /* bytes in cached blocks */
    size_t peak;              /* high-water mark of mapped - cached */
    size_t idle_n;            /* granules of the idle chunks */
    struct chunk *idle;       /* created, not mapped */
    struct block *blocks;     /* cached blocks, most recently freed first */
    struct block *blocks_tail; /* ... and the least recently freed */
    struct run *runs;         /* freed runs parked whole (pool_run_free) */
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
    pthread_mutex_t lock; /* everything below marked (L) */
    struct ump_config cfg;
    const struct backend_ops *be;
    void *bctx;
    struct ump_topology topo;
    int ndev;
    size_t chunk_size;    /* the granule: unit of addresses, slabs, stitching */
    unsigned chunk_shift;
    size_t max_chunk_n;   /* largest chunk, in granules */
    unsigned nsmall;      /* small classes used (fit twice in a chunk) */
    unsigned nbins;       /* nsmall + RUN_TCACHE_MAX */
    size_t small_max;     /* largest size served from slabs */
    void *va;
    struct vas vas;       /* (L) except the tags */
    struct dev_state *dev;   /* (L) */
    size_t peak;             /* (L) pool-wide high-water mark of in use */
    struct run *free_runs;   /* (L) */
    struct slab **free_slabs; /* (L) retired slabs, per class (slab.c) */
    struct pending *pending; /* (L) */
    struct pending *spare_pending; /* (L) recycled, each with its event */
    struct tcache *tcaches;  /* (L) every thread cache of this pool */
    struct counters *folded; /* (L) counters of thread caches gone, per device */
    struct ump_pool *reg_next; /* registry of live pools (fork.c) */
    struct policy_inst *policies;       /* (L) instances, by text */
    struct policy_inst *local_policy;   /* "local" */
    struct policy_inst *default_policy; /* the config's `policy` */
    ump_device_props_t *props;          /* the policies' view, per device */
    ump_link_props_t *links;            /* ... and per pair */
    struct offload *off;                /* tiers and residency (offload.c) */
    uint64_t clock_base;     /* CLOCK_MONOTONIC at creation, ns */
    _Atomic uint32_t clock;  /* tenths of a second since: ticked by the
                                publisher and the slow path (stats.c) */
};

/* What the slow path of an allocation needs to place it. */
struct place_req {
    ump_place_request_t req;
    struct policy_inst *policy;
};

/* alloc paths shared by alloc.c and tcache.c. Pool lock held for all. */
int pool_run_alloc(ump_pool_t *pool, const struct place_req *pr,
                   struct run **run_p);
void pool_run_free(ump_pool_t *pool, struct run *run);
/* A run struct no longer used goes back to the free list. */
void pool_run_put(ump_pool_t *pool, struct run *r);
/* Frees what ump_free_async deferred once its event is done; all: wait. */
void pool_poll_pending(ump_pool_t *pool, bool wait);
/* Everything parked (thread caches, parked runs) goes back to the pool's
 * slabs and cached blocks. */
void pool_flush_tcaches(ump_pool_t *pool);
/* Gives cached physical memory back (ump_trim); thread caches flushed. */
void pool_trim_locked(ump_pool_t *pool);
/* Updates the device's peak after its in-use memory grew. */
void pool_note_in_use(ump_pool_t *pool, int device);

/* Logs and returns -EINVAL for a pointer the pool cannot free. */
int pool_bad_pointer(ump_pool_t *pool, const void *ptr, const char *what,
                     const char *why);

/* fork.c: the registry of live pools and fork handling. */
extern _Atomic uint64_t fork_generation;
int registry_add(ump_pool_t *pool);
void registry_remove(ump_pool_t *pool);
/* Calls fn(pool, arg) under the registry lock if the pool is alive. */
bool registry_with_pool(ump_pool_t *pool, uint64_t id,
                        void (*fn)(ump_pool_t *, void *), void *arg);
/* Calls fn(pool, arg) for every live pool, under the registry lock. */
void registry_for_each(void (*fn)(ump_pool_t *, void *), void *arg);

/* Logs why a pool was refused (NULL, or inherited across fork). */
int pool_refused(int rc, const char *fn);

/* The common check at the top of every public call: NULL pool is -EINVAL,
 * a pool inherited across fork() -ENOTRECOVERABLE, each with a log line. */
static inline int pool_check(const ump_pool_t *pool, const char *fn)
{
    int rc = 0;
    if (ump_unlikely(!pool))
        rc = -EINVAL;
    else if (ump_unlikely(pool->fork_gen !=
                          atomic_load_explicit(&fork_generation,
                                               memory_order_relaxed)))
        rc = -ENOTRECOVERABLE;
    return ump_likely(!rc) ? 0 : pool_refused(rc, fn);
}

#endif
