/*
 * The tier layer's shared state: what every file of lib/tier/ reads (the
 * front end sees only offload.h). One struct offload per pool
 * (pool->off), one struct res per tracked run (run->res) with one struct
 * seg per chunk the run was built from.
 *
 * Locks. pool->lock guards all of it, except the NVMe store and its slots
 * (off->io_lock, never taken under pool->lock for long: see xfer.h) and the
 * list of slots freed under pool->lock (off->dead_lock, a leaf). Copies and
 * disk I/O of a move run with pool->lock dropped while the segment is
 * claimed (res_move_begin): its fields other than pins and the LRU links
 * belong to the mover meanwhile.
 *
 * Files: residency.c (segments, claims, LRU, accounting), backing.c (the
 * memory behind a segment), host.c (pinned host pieces, the reserve),
 * xfer.c (the NVMe store and transfers), move.c (copy-then-switch),
 * evict.c (what moves where, room making), worker.c (background threads),
 * offload.c (set-up, and the calls the front end makes).
 */
#ifndef UMP_TIER_TIER_H
#define UMP_TIER_TIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/pool.h"
#include "mem/vas.h"
#include "util/list.h"

/* A pinned host chunk. Free ones wait in off->host_free; one backing a
 * segment sits in that segment's list, at granule offset off. Each is also
 * mapped, from its pinning to its release, at granule win of the host
 * window (off->win), for every device and the CPU: the tier's copies and
 * its disk I/O go there, so that no move maps it anywhere but at the
 * segment's own address (host.c says why). */
struct hpiece {
    ump_handle_t handle;
    int node;
    size_t n;   /* granules */
    size_t off; /* granule offset in its segment while it backs one */
    size_t win; /* granule of off->win where it is mapped */
    struct hpiece *next;
};

struct seg {
    size_t g, n;          /* granules of the pool's addresses */
    int home;             /* device the policy placed it on */
    int dev;              /* device holding it when tier is DEVICE */
    int tier;             /* UMP_TIER_*: where its data is */
    int dest;             /* while moving up: the device it goes to */
    unsigned pins;
    bool moving;          /* claimed: a move runs, maybe with the lock dropped */
    bool discard;         /* UMP_ADVISE_DONTNEED: moves skip the data */
    bool in_lru;
    /* Tier HOST: its pieces are not mapped at its address, because the
     * driver refused to map them back after a failed move (logged). The
     * data is whole in them; the next move maps them or their successor,
     * and a free gives them back, neither unmapping them (backing.c). */
    bool unmapped;
    /* What the eviction order (evict.c) knows of its future, in logical
     * times of offload->clock. */
    bool cold;            /* COLD or DONTNEED advice since its last use */
    uint64_t t_used;      /* last touched: acquire, release, prefetch, HOT */
    uint64_t t_acq;       /* its last acquire; 0: none yet */
    uint64_t gap;         /* between its last two acquires; 0: unknown */
    uint64_t t_want;      /* a prefetch asked for it, not acquired since */
    uint64_t pf_mark;     /* == offload->pf_epoch: queued for prefetch */
    struct hpiece *host;  /* tier HOST: its pieces */
    uint64_t *slots;      /* tier NVME: one per granule; NULL if discarded */
    struct res *res;
    struct ump_list_node lru; /* in offload's LRU while in_lru */
};

struct res {
    struct run *run;
    unsigned busy;  /* operations in progress that dropped the lock */
    bool dead;      /* freed meanwhile: the last of them tears it down */
    size_t nseg;
    struct seg seg[];
};

/* Per home device: what ump_stats reports of the tiers. */
struct tier_ctr {
    size_t host_bytes, nvme_bytes;
    uint64_t spill_count, spill_bytes, restore_count, restore_bytes;
    uint64_t evictions;
};

#define TIER_DEST_HOME (-4) /* a prefetch destination: the segment's home */

struct prefetch {
    void *ptr;
    size_t size;
    int device; /* a device, UMP_LOC_HOST or TIER_DEST_HOME */
    uint64_t t; /* offload->clock when asked: a segment acquired since
                   had the use it was for (worker.c) */
    struct prefetch *next;
};

/*
 * Two background workers, so that a spill and a restore run at the same
 * time, as a GPU's copy engines do them (and as a full-duplex link carries
 * them): one runs the prefetches (moves up), the other the watermarks
 * (moves down) and the host reserve (worker.c).
 */
enum { W_PREFETCH, W_EVICT, W_COUNT };

struct worker {
    pthread_cond_t wake; /* work for it; with pool->lock */
    pthread_t thread;
    bool on;
    bool kicked; /* woken while busy: look again before sleeping */
};

/* A device's internal streams: moves down and moves up apart, so that the
 * two workers' copies do not queue behind each other. */
enum { DIR_DOWN, DIR_UP };

struct dead_slots;

struct offload {
    pthread_cond_t moved; /* a move ended, or host memory got pinned;
                             with pool->lock */
    struct worker w[W_COUNT];
    bool stopping;
    unsigned moving;     /* segments claimed by a move now (residency.c) */
    unsigned hold;       /* checkpoints waiting for a still pool: no new
                            move starts (offload_hold) */
    struct ump_list lru; /* first most recently used */
    size_t lru_len;      /* segments in it */
    /* The eviction order's logical time: one tick per acquire, release,
     * prefetch request, advice and tracked run (evict.c says why). */
    uint64_t clock;
    uint64_t pf_epoch;   /* the latest marking of queued prefetches */
    uint64_t swaps;      /* moves up made as swaps (move_swap), for tests */
    void **stream;        /* [device * 2 + DIR_*], made on first use */
    struct tier_ctr *ctr; /* per home device */
    bool *draining;       /* per device: above high, not yet at low */
    size_t *evicting;     /* per device: granules moving down from it */
    bool full;            /* a move down found no room: the watermarks
                             wait until a tier gives space back */
    /* The front end's (offload_set_reclaim): what threads cache on a
     * device goes back to its cached blocks; NULL: parked runs only. */
    void (*reclaim)(ump_pool_t *pool, int device);
    /* host tier (host.c) */
    size_t host_limit, host_reserve;
    size_t host_created, host_used, host_peak, host_free_bytes;
    size_t host_pinning;  /* of host_created: being pinned, lock dropped */
    size_t host_returning; /* in use by moves up under way, free at their
                              end: the reserve counts them (host.c) */
    uint64_t host_segs;
    struct hpiece *host_free;
    /* The host window: addresses of their own (reserved on the first pin,
     * host_limit long) where every pinned piece stays mapped. */
    struct vas win;
    bool win_on;          /* reserved; win is set up */
    bool cpu_access;      /* config host_cpu_access: the CPU also reaches
                             the host tier at the segments' addresses */
    bool host_in_use;     /* refill the reserve only once it is used */
    size_t host_hint;     /* granules of the last request: the reserve's
                             pieces (host.c) */
    int host_fault;       /* test hook: the nth next creation fails */
    /* NVMe tier (xfer.c) */
    pthread_mutex_t io_lock;   /* the store: I/O, slots */
    pthread_mutex_t dead_lock; /* dead (a leaf: nothing taken inside) */
    struct dead_slots *dead;
    struct nvme_store *nvme;
    void *arena_registered; /* the store's bounce buffers, page-locked */
    size_t nvme_limit, nvme_used, nvme_peak;
    uint64_t nvme_segs;
    unsigned qd;
    /* prefetch queue (worker.c) */
    struct prefetch *pf_head, *pf_tail;
    struct prefetch *pf_cur; /* the one the worker runs, out of the queue */
    bool pf_hold;            /* test hook: the worker takes none */
};

/* Bytes of n granules. */
static inline size_t tier_bytes(const ump_pool_t *pool, size_t n)
{
    return n << pool->chunk_shift;
}

#endif
