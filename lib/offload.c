/*
 * Tiers and residency; see offload.h for the model.
 *
 * A move is copy-then-switch. The destination is made ready and mapped
 * where nothing can see it (a staging range of the pool's addresses, or the
 * unmapped range of a segment on NVMe), the data is copied or read there
 * with the pool lock dropped, and only then is the source unmapped and the
 * destination mapped at the segment's address. If anything fails before
 * the switch, the destination is given back and the data stays where it
 * was; if the switch itself fails, the source (unmapped but not released)
 * is mapped back.
 *
 * Backing of a segment, by tier: device chunks (struct chunk, in the VA
 * manager's granule table, possibly several after a move up); pinned host
 * pieces (struct hpiece, power-of-two chunks from the host tier); NVMe slots
 * of one granule each, the range left unmapped.
 *
 * Locks: pool->lock for all state; off->io_lock serialises the NVMe store
 * (taken inside pool->lock for slot bookkeeping, alone for I/O).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunks.h"
#include "internal.h"
#include "nvme.h"
#include "offload.h"

/* Attempts of a move up that finds no room on its device. */
#define MOVE_UP_ROUNDS 8
/* How often the eviction worker looks at the watermarks. */
#define OFFLOAD_TICK_MS 20

struct hpiece {
    ump_handle_t handle;
    int node;
    size_t n;   /* granules */
    size_t off; /* granule offset in its segment while it backs one */
    struct hpiece *next;
};

struct seg {
    size_t g, n;          /* granules of the pool's addresses */
    int home;             /* device the policy placed it on */
    int dev;              /* device holding it when tier is DEVICE */
    int tier;             /* UMP_TIER_*: where its data is */
    int dest;             /* while moving up: the device it goes to */
    unsigned pins;
    bool moving;          /* a move runs with the lock dropped */
    bool discard;         /* UMP_ADVISE_DONTNEED: moves skip the data */
    bool in_lru;
    struct hpiece *host;  /* tier HOST: its pieces */
    uint64_t *slots;      /* tier NVME: one per granule; NULL if discarded */
    struct res *res;
    struct seg *prev, *next; /* LRU, head most recently used */
};

struct res {
    struct run *run;
    unsigned busy;  /* operations in progress that dropped the lock */
    bool dead;      /* freed meanwhile: the last of them tears it down */
    size_t nseg;
    struct seg seg[];
};

struct tier_ctr {
    size_t host_bytes, nvme_bytes;
    uint64_t spill_count, spill_bytes, restore_count, restore_bytes;
    uint64_t evictions;
};

#define DEST_HOME (-4) /* a prefetch destination: the segment's home */

struct prefetch {
    void *ptr;
    size_t size;
    int device; /* a device, UMP_LOC_HOST or DEST_HOME */
    struct prefetch *next;
};

/*
 * Two background workers, so that a spill and a restore run at the same
 * time, as a GPU's copy engines do them (and as a full-duplex link carries
 * them): one runs the prefetches (moves up), the other the watermarks
 * (moves down) and the host reserve. The eviction worker is woken as soon
 * as a move up maps its destination above the high watermark, so the
 * room the next prefetch needs is made while this one copies.
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

struct offload {
    pthread_cond_t moved; /* a move ended; with pool->lock */
    struct worker w[W_COUNT];
    bool stopping;
    struct seg *lru_head, *lru_tail;
    void **stream;        /* [device * 2 + DIR_*], made on first use */
    struct tier_ctr *ctr; /* per home device */
    bool *draining;       /* per device: above high, not yet at low */
    size_t *evicting;     /* per device: granules moving down from it */
    bool full;            /* a move down found no room: the watermarks
                             wait until a tier gives space back */
    /* host tier */
    size_t host_limit, host_reserve;
    size_t host_created, host_used, host_peak, host_free_bytes;
    uint64_t host_segs;
    struct hpiece *host_free;
    bool host_in_use;     /* refill the reserve only once it is used */
    int host_fault;       /* test hook: the nth next creation fails */
    /* NVMe tier */
    pthread_mutex_t io_lock;  /* the store: I/O, slots */
    pthread_mutex_t dead_lock; /* dead (a leaf: nothing taken inside) */
    struct dead_slots *dead;
    struct nvme_store *nvme;
    void *arena_registered; /* the store's bounce buffers, page-locked */
    size_t nvme_limit, nvme_used, nvme_peak;
    uint64_t nvme_segs;
    unsigned qd;
    struct prefetch *pf_head, *pf_tail;
};

static size_t bytes_of(const ump_pool_t *pool, size_t n)
{
    return n << pool->chunk_shift;
}

/* --- lookup ---------------------------------------------------------------- */

static struct seg *seg_at(struct res *res, size_t g)
{
    size_t lo = 0, hi = res->nseg;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (res->seg[mid].g <= g)
            lo = mid;
        else
            hi = mid;
    }
    return &res->seg[lo];
}

int offload_home(const struct run *r, size_t i)
{
    return seg_at(r->res, r->start + i)->home;
}

/* Logs a bad pointer for fn; fn NULL: quietly -EINVAL. */
static int bad_range(ump_pool_t *pool, const void *ptr, const char *fn,
                     const char *why)
{
    return fn ? pool_bad_pointer(pool, ptr, fn, why) : -EINVAL;
}

/* The live run holding ptr, and the granules [*g0_p, *g1_p) that the range
 * [ptr, ptr+size) touches (size 0: the whole run). -EINVAL when ptr is not
 * in a live allocation or the range leaves it, logged for the public call
 * fn (NULL: not logged); -ENOTSUP for a slab object. Pool lock held. */
static int find_range(ump_pool_t *pool, const char *fn, void *ptr, size_t size,
                      struct run **r_p, size_t *g0_p, size_t *g1_p)
{
    if (!ptr || !vas_contains(&pool->vas, ptr))
        return bad_range(pool, ptr, fn, "not a pointer of this pool");
    size_t g = vas_index(&pool->vas, ptr);
    uintptr_t tag = vas_tag(&pool->vas, g);
    if (vas_tag_kind(tag) == VAS_SLAB)
        return -ENOTSUP;
    struct run *r = vas_tag_kind(tag) == VAS_RUN ? vas_tag_owner(tag) : NULL;
    if (!r || obj_state(atomic_load(&r->word)) != OBJ_LIVE)
        return bad_range(pool, ptr, fn, "not inside a live allocation");
    char *base = vas_addr(&pool->vas, r->start);
    size_t rsize = atomic_load(&r->size);
    size_t off = (size_t)((char *)ptr - base);
    if (!size) {
        off = 0;
        size = rsize;
    }
    if (off >= rsize || size > rsize - off)
        return bad_range(pool, ptr, fn, "the range leaves its allocation");
    *r_p = r;
    *g0_p = r->start + (off >> pool->chunk_shift);
    *g1_p = r->start + ((off + size - 1) >> pool->chunk_shift) + 1;
    return 0;
}

/* --- LRU ------------------------------------------------------------------- */

static void lru_unlink(struct offload *o, struct seg *s)
{
    if (!s->in_lru)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        o->lru_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        o->lru_tail = s->prev;
    s->prev = s->next = NULL;
    s->in_lru = false;
}

/* Puts s at the hot end (head) or the cold end. */
static void lru_touch(struct offload *o, struct seg *s, bool hot)
{
    lru_unlink(o, s);
    if (hot) {
        s->next = o->lru_head;
        if (o->lru_head)
            o->lru_head->prev = s;
        else
            o->lru_tail = s;
        o->lru_head = s;
    } else {
        s->prev = o->lru_tail;
        if (o->lru_tail)
            o->lru_tail->next = s;
        else
            o->lru_head = s;
        o->lru_tail = s;
    }
    s->in_lru = true;
}

/* --- streams --------------------------------------------------------------- */

/* Copies size bytes with the backend on device d's internal stream and
 * waits for them. Pool lock not held. */
static int copy_sync(ump_pool_t *pool, void *stream, void *dst, const void *src,
                     size_t size)
{
    int rc = pool->be->memcpy_async(pool->bctx, dst, src, size, stream);
    int rc2 = pool->be->stream_sync(pool->bctx, stream);
    return rc ? rc : rc2;
}

static void wake(ump_pool_t *pool, int w);

/* Is device d in use (mapped, not in cached blocks) above its high
 * watermark? */
static bool above_high(const ump_pool_t *pool, int d)
{
    const struct dev_state *ds = &pool->dev[d];
    return ds->mapped - ds->cached >
           ds->capacity * (size_t)pool->cfg.high_watermark / 100;
}

/* A move up has mapped its destination on dev: when that put dev above
 * its high watermark, the eviction worker makes the room the next move up
 * will need while this one copies. (Only moves up call it, so the worker,
 * which moves down, never wakes itself.) Pool lock held. */
static void room_ahead(ump_pool_t *pool, int dev)
{
    if (above_high(pool, dev))
        wake(pool, W_EVICT);
}

/* Device d's internal stream for moves in direction dir. Pool lock held. */
static int stream_of(ump_pool_t *pool, int d, int dir, void **s_p)
{
    void **sp = &pool->off->stream[d * 2 + dir];
    if (!*sp) {
        int rc = pool->be->stream_create(pool->bctx, d, sp);
        if (rc)
            return rc;
    }
    *s_p = *sp;
    return 0;
}

/* --- the host tier ----------------------------------------------------------- */

static size_t pow2_floor(size_t x)
{
    return (size_t)1 << (63 - __builtin_clzll(x));
}

static void host_release(ump_pool_t *pool, struct hpiece *p)
{
    struct offload *o = pool->off;
    int rc = pool->be->chunk_release(pool->bctx, p->handle);
    if (rc) { /* still held: it keeps counting against host_limit */
        ump_log_error("cannot release a pinned host chunk: %s",
                      ump_strerror(rc));
    } else {
        o->host_created -= bytes_of(pool, p->n);
    }
    free(p);
}

/* A new pinned piece of at most n granules on node, within host_limit.
 * -ENOSPC at the limit, -ENOMEM when the memory cannot be pinned. Pool
 * lock held; dropped while the memory is pinned. */
static int host_create(ump_pool_t *pool, int node, size_t n,
                       struct hpiece **p_p)
{
    struct offload *o = pool->off;
    size_t room = (o->host_limit - o->host_created) >> pool->chunk_shift;
    if (n > pool->max_chunk_n)
        n = pool->max_chunk_n;
    if (n > room)
        n = room;
    if (!n)
        return -ENOSPC;
    if (o->host_fault && --o->host_fault == 0) {
        ump_log_error("cannot pin host memory: injected fault");
        return -ENOMEM;
    }
    struct hpiece *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    /* Pinning runs at a few GB/s (22 ms for 64 MiB on an H200): not with
     * the pool lock. The budget is taken first, so that nobody else
     * counts on it meanwhile. */
    n = pow2_floor(n);
    size_t budget = bytes_of(pool, n);
    o->host_created += budget;
    pthread_mutex_unlock(&pool->lock);
    int rc;
    for (;; n /= 2) {
        rc = pool->be->host_chunk_create(pool->bctx, node, bytes_of(pool, n),
                                         &p->handle);
        if (rc != -ENOMEM || n == 1)
            break;
    }
    pthread_mutex_lock(&pool->lock);
    o->host_created -= budget;
    if (rc) {
        free(p);
        if (rc == -ENOMEM)
            ump_log_warn("cannot pin %zu bytes of host memory on node %d",
                         bytes_of(pool, n), node);
        return rc;
    }
    p->node = node;
    p->n = n;
    o->host_created += bytes_of(pool, n);
    *p_p = p;
    return 0;
}

/* Takes the free piece of at most max_n granules that is largest (nearest
 * node first), or NULL. */
static struct hpiece *host_take_free(struct offload *o, int node, size_t max_n)
{
    struct hpiece **best = NULL;
    for (struct hpiece **pp = &o->host_free; *pp; pp = &(*pp)->next) {
        struct hpiece *p = *pp;
        if (p->n > max_n)
            continue;
        if (!best || p->n > (*best)->n ||
            (p->n == (*best)->n && p->node == node && (*best)->node != node))
            best = pp;
    }
    if (!best)
        return NULL;
    struct hpiece *p = *best;
    *best = p->next;
    p->next = NULL;
    return p;
}

static void host_put(ump_pool_t *pool, struct hpiece *list)
{
    struct offload *o = pool->off;
    while (list) {
        struct hpiece *p = list;
        list = p->next;
        o->host_free_bytes += bytes_of(pool, p->n);
        p->next = o->host_free;
        o->host_free = p;
    }
}

/* Pieces adding up to n granules, each placed at its offset: free ones
 * first, then new ones; a free piece too big for what is left is released
 * when the limit leaves no room. Pool lock held. */
static int host_get(ump_pool_t *pool, int node, size_t n,
                    struct hpiece **list_p)
{
    struct offload *o = pool->off;
    struct hpiece *list = NULL, **tail = &list;
    size_t off = 0;
    int rc = 0;
    while (off < n) {
        struct hpiece *p = host_take_free(o, node, n - off);
        if (p) {
            o->host_free_bytes -= bytes_of(pool, p->n);
        } else {
            rc = host_create(pool, node, n - off, &p);
            if (rc == -ENOSPC && o->host_free) { /* too big ones: make room */
                struct hpiece *big = o->host_free;
                o->host_free = big->next;
                o->host_free_bytes -= bytes_of(pool, big->n);
                host_release(pool, big);
                continue;
            }
            if (rc)
                break;
        }
        p->off = off;
        off += p->n;
        *tail = p;
        tail = &p->next;
    }
    if (rc) {
        host_put(pool, list);
        return rc;
    }
    *list_p = list;
    return 0;
}

/* --- backings: what holds a segment's data ----------------------------------- */

struct backing {
    int tier;              /* UMP_TIER_DEVICE or UMP_TIER_HOST */
    int dev;               /* DEVICE: the device */
    struct chunk **dc;     /* DEVICE: chunks in address order */
    size_t ndc;
    struct hpiece *host;   /* HOST: pieces */
};

static void backing_clear(struct backing *b)
{
    free(b->dc);
    memset(b, 0, sizeof(*b));
}

/* New memory for n granules on device dev or the host tier (dev < 0: node
 * of `node`). Pool lock held. */
static int backing_get(ump_pool_t *pool, int tier, int dev, int node, size_t n,
                       struct backing *b)
{
    memset(b, 0, sizeof(*b));
    b->tier = tier;
    b->dev = dev;
    if (tier == UMP_TIER_HOST)
        return host_get(pool, node, n, &b->host);
    b->dc = calloc(n, sizeof(*b->dc));
    if (!b->dc)
        return -ENOMEM;
    for (size_t left = n; left;) {
        struct chunk *c;
        int rc = chunks_get(pool, dev, left, &c);
        if (rc) {
            for (size_t i = 0; i < b->ndc; i++)
                chunks_idle_push(pool, b->dc[i]);
            backing_clear(b);
            return rc;
        }
        b->dc[b->ndc++] = c;
        left -= c->n;
    }
    return 0;
}

/* The backing of segment s, which is on a device or the host. */
static int backing_of(ump_pool_t *pool, const struct seg *s, struct backing *b)
{
    memset(b, 0, sizeof(*b));
    b->tier = s->tier;
    b->dev = s->dev;
    if (s->tier == UMP_TIER_HOST) {
        b->host = s->host;
        return 0;
    }
    b->dc = calloc(s->n, sizeof(*b->dc));
    if (!b->dc)
        return -ENOMEM;
    for (size_t g = s->g; g < s->g + s->n; g += chunks_at(pool, g)->n)
        b->dc[b->ndc++] = chunks_at(pool, g);
    return 0;
}

/* Gives an unmapped backing back: chunks become idle, pieces free. */
static void backing_put(ump_pool_t *pool, struct backing *b)
{
    if (b->tier == UMP_TIER_HOST)
        host_put(pool, b->host);
    for (size_t i = 0; i < b->ndc; i++)
        chunks_idle_push(pool, b->dc[i]);
    backing_clear(b);
}

/* Piece i of b: its handle, granules and offset in the segment. */
static void piece(const struct backing *b, size_t i, const struct hpiece **hp,
                  ump_handle_t *h_p, size_t *n_p)
{
    if (b->tier == UMP_TIER_HOST) {
        const struct hpiece *p = *hp ? (*hp)->next : b->host;
        *hp = p;
        *h_p = p->handle;
        *n_p = p->n;
    } else {
        *h_p = b->dc[i]->handle;
        *n_p = b->dc[i]->n;
    }
}

static size_t npieces(const struct backing *b)
{
    size_t k = 0;
    if (b->tier != UMP_TIER_HOST)
        return b->ndc;
    for (const struct hpiece *p = b->host; p; p = p->next)
        k++;
    return k;
}

/* Maps (map true) or unmaps the first k pieces of b from granule g on,
 * in order, keeping the granule table and the device's mapped bytes true
 * to what the driver did; stops at the first failure, with *done_p pieces
 * done. Pool lock held. */
static int pieces_do(ump_pool_t *pool, struct backing *b, size_t g, size_t k,
                     bool map, size_t *done_p)
{
    struct vas *v = &pool->vas;
    const struct hpiece *hp = NULL;
    size_t at = g, i = 0;
    int rc = 0;
    for (; i < k; i++) {
        ump_handle_t h;
        size_t n;
        piece(b, i, &hp, &h, &n);
        void *va = vas_addr(v, at);
        rc = map ? pool->be->map(pool->bctx, va, bytes_of(pool, n), h)
                 : pool->be->unmap(pool->bctx, va, bytes_of(pool, n));
        if (rc)
            break;
        if (b->tier != UMP_TIER_HOST) {
            struct chunk *c = b->dc[i];
            if (map)
                c->g = at;
            for (size_t j = at; j < at + n; j++)
                v->gran[j].chunk = map ? c : NULL;
            if (map)
                pool->dev[b->dev].mapped += bytes_of(pool, n);
            else
                pool->dev[b->dev].mapped -= bytes_of(pool, n);
        }
        at += n;
    }
    *done_p = i;
    return rc;
}

/* Access to the granules [g, g+n) where b is mapped: every device that
 * can reach it, and the CPU for host memory. */
static int backing_access(ump_pool_t *pool, const struct backing *b, size_t g,
                          size_t n)
{
    int devs[UMP_MAX_DEVICES], nd = 0;
    void *va = vas_addr(&pool->vas, g);
    if (b->tier != UMP_TIER_HOST) {
        nd = chunks_accessors(pool, b->dev, devs);
        return pool->be->set_access(pool->bctx, va, bytes_of(pool, n), devs,
                                    nd);
    }
    for (; nd < pool->ndev; nd++)
        devs[nd] = nd;
    return pool->be->set_access_host(pool->bctx, va, bytes_of(pool, n), devs,
                                     nd);
}

/* Granules the first k pieces of b cover. */
static size_t pieces_len(const struct backing *b, size_t k)
{
    const struct hpiece *hp = NULL;
    size_t sum = 0;
    for (size_t i = 0; i < k; i++) {
        ump_handle_t h;
        size_t n;
        piece(b, i, &hp, &h, &n);
        sum += n;
    }
    return sum;
}

/* Maps b at granules [g, g+n) and gives access. All or nothing: on error
 * nothing of b stays mapped (unless the driver refuses to undo, logged).
 * Pool lock held. */
static int backing_map(ump_pool_t *pool, struct backing *b, size_t g, size_t n)
{
    size_t k = npieces(b), done, undone;
    int rc = pieces_do(pool, b, g, k, true, &done);
    if (!rc)
        rc = backing_access(pool, b, g, n);
    if (rc && pieces_do(pool, b, g, done, false, &undone))
        ump_log_error("cannot undo a failed mapping at %p: %zu bytes stay "
                      "mapped", vas_addr(&pool->vas, g),
                      bytes_of(pool, pieces_len(b, done)));
    return rc;
}

/* Unmaps b from granule g on; its memory is kept. All or nothing: when the
 * driver refuses one piece, those unmapped before it are mapped back, so
 * the data stays where it was and usable. Pool lock held. */
static int backing_unmap(ump_pool_t *pool, struct backing *b, size_t g)
{
    size_t done, redone;
    int rc = pieces_do(pool, b, g, npieces(b), false, &done);
    if (!rc || !done)
        return rc;
    size_t n = pieces_len(b, done);
    if (pieces_do(pool, b, g, done, true, &redone) ||
        backing_access(pool, b, g, n))
        ump_log_error("cannot map back %zu bytes at %p after a failed unmap: "
                      "their data is lost", bytes_of(pool, n),
                      vas_addr(&pool->vas, g));
    return rc;
}

/* --- accounting ---------------------------------------------------------------- */

/* Counts segment s in (sign +1) or out of tier. Pool lock held. */
static void note_tier(ump_pool_t *pool, const struct seg *s, int tier, int sign)
{
    struct offload *o = pool->off;
    struct tier_ctr *c = &o->ctr[s->home];
    size_t b = bytes_of(pool, s->n);
    if (sign < 0 && tier != UMP_TIER_DEVICE)
        o->full = false;
    if (tier == UMP_TIER_HOST) {
        c->host_bytes = sign > 0 ? c->host_bytes + b : c->host_bytes - b;
        o->host_used = sign > 0 ? o->host_used + b : o->host_used - b;
        o->host_segs = sign > 0 ? o->host_segs + 1 : o->host_segs - 1;
        if (o->host_used > o->host_peak)
            o->host_peak = o->host_used;
    } else if (tier == UMP_TIER_NVME) {
        c->nvme_bytes = sign > 0 ? c->nvme_bytes + b : c->nvme_bytes - b;
        o->nvme_used = sign > 0 ? o->nvme_used + b : o->nvme_used - b;
        o->nvme_segs = sign > 0 ? o->nvme_segs + 1 : o->nvme_segs - 1;
        if (o->nvme_used > o->nvme_peak)
            o->nvme_peak = o->nvme_used;
    }
}

/* Segment s moved from its tier to tier (on dev when a device). */
static void note_move(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct tier_ctr *c = &pool->off->ctr[s->home];
    size_t b = bytes_of(pool, s->n);
    if (tier > s->tier) {
        c->spill_count++;
        c->spill_bytes += b;
    } else if (tier < s->tier) { /* device to device is neither */
        c->restore_count++;
        c->restore_bytes += b;
    }
    s->discard = false; /* DONTNEED was for this move only */
    note_tier(pool, s, s->tier, -1);
    note_tier(pool, s, tier, +1);
    s->tier = tier;
    s->dev = tier == UMP_TIER_DEVICE ? dev : -1;
    if (tier == UMP_TIER_DEVICE)
        pool_note_in_use(pool, dev);
    if (tier == UMP_TIER_HOST)
        pool->off->host_in_use = true;
}

/* --- tracking ---------------------------------------------------------------- */

static void teardown(ump_pool_t *pool, struct res *res);

/* The run's residency, made on first need: one segment per chunk, all on
 * devices. Pool lock held. */
static int res_get(ump_pool_t *pool, struct run *r, struct res **res_p)
{
    if (r->res) {
        *res_p = r->res;
        return 0;
    }
    size_t nseg = 0;
    for (size_t g = r->start; g < r->start + r->n; g += chunks_at(pool, g)->n)
        nseg++;
    struct res *res = calloc(1, sizeof(*res) + nseg * sizeof(struct seg));
    if (!res)
        return -ENOMEM;
    res->run = r;
    res->nseg = nseg;
    size_t i = 0;
    for (size_t g = r->start; g < r->start + r->n; g += chunks_at(pool, g)->n) {
        struct seg *s = &res->seg[i++];
        const struct chunk *c = chunks_at(pool, g);
        UMP_ASSERT(c->g == g);
        s->g = g;
        s->n = c->n;
        s->home = s->dev = c->device;
        s->tier = UMP_TIER_DEVICE;
        s->dest = -1;
        s->res = res;
        lru_touch(pool->off, s, true);
    }
    r->res = res;
    *res_p = res;
    return 0;
}

static void res_unbusy(ump_pool_t *pool, struct res *res)
{
    if (--res->busy)
        return;
    if (res->dead)
        teardown(pool, res);
    else /* a free may be waiting for it (offload_wait_idle) */
        pthread_cond_broadcast(&pool->off->moved);
}

void offload_wait_idle(ump_pool_t *pool, struct run *r)
{
    while (r->res && r->res->busy)
        pthread_cond_wait(&pool->off->moved, &pool->lock);
}

static void wait_still(ump_pool_t *pool, const struct seg *s)
{
    while (s->moving)
        pthread_cond_wait(&pool->off->moved, &pool->lock);
}

/* A move of s, with everything it needs first (making room drops the
 * lock), runs between claim and unclaim: meanwhile s is no victim and
 * others wait for it. After unclaim s may be gone unless the caller keeps
 * its run busy. Pool lock held. */
static void claim(ump_pool_t *pool, struct seg *s)
{
    wait_still(pool, s);
    s->moving = true;
    s->res->busy++;
}

static void unclaim(ump_pool_t *pool, struct seg *s)
{
    s->moving = false;
    pthread_cond_broadcast(&pool->off->moved);
    res_unbusy(pool, s->res);
}

/* --- NVMe I/O ---------------------------------------------------------------- */

/* Slots freed while the pool lock is held wait here for the next user of
 * the store (io_lock may be held for a whole transfer: never taken under
 * the pool lock). */
struct dead_slots {
    uint64_t *slots;
    size_t n;
    struct dead_slots *next;
};

/* Frees slots of the store; io_lock held. */
static void slots_release(struct offload *o, uint64_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        nvme_slot_free(o->nvme, slots[i]);
    free(slots);
}

/* Frees what waits in the dead list; io_lock held. */
static void slots_drain(struct offload *o)
{
    pthread_mutex_lock(&o->dead_lock);
    struct dead_slots *d = o->dead;
    o->dead = NULL;
    pthread_mutex_unlock(&o->dead_lock);
    while (d) {
        struct dead_slots *next = d->next;
        slots_release(o, d->slots, d->n);
        free(d);
        d = next;
    }
}

/* Frees slots now. Neither the pool lock nor io_lock held. */
static void slots_free(ump_pool_t *pool, uint64_t *slots, size_t n)
{
    struct offload *o = pool->off;
    if (!slots)
        return;
    pthread_mutex_lock(&o->io_lock);
    slots_release(o, slots, n);
    pthread_mutex_unlock(&o->io_lock);
}

/* Frees slots with the pool lock held: later, by the store's next user. */
static void slots_free_later(ump_pool_t *pool, uint64_t *slots, size_t n)
{
    struct offload *o = pool->off;
    if (!slots)
        return;
    struct dead_slots *d = malloc(sizeof(*d));
    if (!d) { /* rare: wait for the store rather than lose the slots */
        pthread_mutex_lock(&o->io_lock);
        slots_release(o, slots, n);
        pthread_mutex_unlock(&o->io_lock);
        return;
    }
    *d = (struct dead_slots){slots, n, NULL};
    pthread_mutex_lock(&o->dead_lock);
    d->next = o->dead;
    o->dead = d;
    pthread_mutex_unlock(&o->dead_lock);
}

/* n slots, or -ENOSPC at the limit or when the disk is full (logged at
 * debug: the caller says what it was for). Neither lock held. */
static int slots_alloc(ump_pool_t *pool, size_t n, uint64_t **slots_p)
{
    struct offload *o = pool->off;
    uint64_t *slots = calloc(n, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    int rc = 0;
    size_t i = 0;
    pthread_mutex_lock(&o->io_lock);
    slots_drain(o);
    for (; i < n && !rc; i++)
        rc = nvme_slot_alloc(o->nvme, &slots[i]);
    if (rc)
        slots_release(o, slots, i - 1);
    pthread_mutex_unlock(&o->io_lock);
    if (rc == -ENOSPC)
        ump_log_debug("the NVMe tier is full (%zu bytes used)", o->nvme_used);
    if (!rc)
        *slots_p = slots;
    return rc;
}

/* Queues the copies between the granules [i, i + m) at va and the bounce
 * buffers buf on stream (to_buf: from va). */
static int bounce_copy(ump_pool_t *pool, char *va, void **buf, size_t i,
                       size_t m, bool to_buf, void *stream)
{
    size_t gran = pool->chunk_size;
    int rc = 0;
    for (size_t j = 0; j < m && !rc; j++) {
        char *at = va + (i + j) * gran;
        rc = to_buf ? pool->be->memcpy_async(pool->bctx, buf[j], at, gran,
                                             stream)
                    : pool->be->memcpy_async(pool->bctx, at, buf[j], gran,
                                             stream);
    }
    return rc;
}

/* One batch of m granules from granule i: slots and buffers into io. */
static void batch_io(struct nvme_io *io, const uint64_t *slots, void **buf,
                     size_t i, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        io[j].slot = slots[i + j];
        io[j].buf = buf[j];
    }
}

/*
 * The n granules at va (device memory) to or from slots through the k
 * bounce buffers, in batches of half of them: the device copy of one batch
 * runs on stream while the disk works on the other, so a move between a
 * device and NVMe takes about as long as its slower leg, not the sum. k is
 * at least 2 unless n is 1. io_lock held.
 */
static int bounce_xfer(ump_pool_t *pool, char *va, uint64_t *slots, size_t n,
                       bool write, void **buf, size_t k, struct nvme_io *io,
                       void *stream)
{
    struct nvme_store *st = pool->off->nvme;
    size_t h = k > 1 ? k / 2 : 1, nb = (n + h - 1) / h;
    void **half[2] = {buf, buf + (k > 1 ? h : 0)};
    int rc, r2;
    /* batch b: granules [b * h, b * h + size(b)) in half[b % 2] */
#define SIZE(b) ((b) * h + h <= n ? h : n - (b) * h)
    if (write) {
        rc = bounce_copy(pool, va, half[0], 0, SIZE(0), true, stream);
        r2 = pool->be->stream_sync(pool->bctx, stream);
        rc = rc ? rc : r2;
        for (size_t b = 0; b < nb && !rc; b++) {
            if (b + 1 < nb)
                rc = bounce_copy(pool, va, half[(b + 1) % 2], (b + 1) * h,
                                 SIZE(b + 1), true, stream);
            batch_io(io, slots, half[b % 2], b * h, SIZE(b));
            if (!rc)
                rc = nvme_write(st, io, SIZE(b));
            r2 = pool->be->stream_sync(pool->bctx, stream);
            rc = rc ? rc : r2;
        }
    } else {
        batch_io(io, slots, half[0], 0, SIZE(0));
        rc = nvme_read(st, io, SIZE(0));
        for (size_t b = 0; b < nb && !rc; b++) {
            rc = bounce_copy(pool, va, half[b % 2], b * h, SIZE(b), false,
                             stream);
            if (!rc && b + 1 < nb) {
                batch_io(io, slots, half[(b + 1) % 2], (b + 1) * h,
                         SIZE(b + 1));
                rc = nvme_read(st, io, SIZE(b + 1));
            }
            r2 = pool->be->stream_sync(pool->bctx, stream);
            rc = rc ? rc : r2;
        }
    }
#undef SIZE
    return rc;
}

/* Where the CPU does file I/O on the host granule at va. */
static void *io_addr(ump_pool_t *pool, char *va)
{
    void *view = pool->be->io_view
                     ? pool->be->io_view(pool->bctx, va, pool->chunk_size)
                     : NULL;
    return view ? view : va;
}

/* Writes (or reads) the n granules at va to (from) slots. direct: va is
 * host memory the CPU reaches, used as the I/O buffer; else the data goes
 * through bounce buffers copied on stream. Pool lock not held. */
static int nvme_xfer(ump_pool_t *pool, char *va, uint64_t *slots, size_t n,
                     bool write, bool direct, void *stream)
{
    struct offload *o = pool->off;
    size_t gran = pool->chunk_size;
    size_t qd = o->qd < 2 ? 2 : o->qd; /* two halves, see bounce_xfer */
    size_t k = direct || n < qd ? n : qd;
    struct nvme_io *io = calloc(k, sizeof(*io));
    void **buf = calloc(k, sizeof(*buf));
    int rc = io && buf ? 0 : -ENOMEM;
    pthread_mutex_lock(&o->io_lock);
    slots_drain(o);
    if (direct) {
        for (size_t i = 0; !rc && i < n; i++) {
            io[i].slot = slots[i];
            io[i].buf = io_addr(pool, va + i * gran);
        }
        if (!rc)
            rc = write ? nvme_write(o->nvme, io, n) : nvme_read(o->nvme, io, n);
    } else {
        for (size_t i = 0; !rc && i < k; i++)
            if (!(buf[i] = nvme_buffer_alloc(o->nvme, gran)))
                rc = -ENOMEM;
        if (!rc)
            rc = bounce_xfer(pool, va, slots, n, write, buf, k, io, stream);
    }
    for (size_t i = 0; buf && !direct && i < k; i++)
        nvme_buffer_free(o->nvme, buf[i]);
    pthread_mutex_unlock(&o->io_lock);
    free(buf);
    free(io);
    /* Pinned memory a driver maps for the GPU may refuse direct I/O. */
    if (rc == -EFAULT && direct)
        return nvme_xfer(pool, va, slots, n, write, false, stream);
    return rc;
}

/* --- moves ---------------------------------------------------------------------- */

/* A device that takes part in a move of s to dev, for its copy stream. */
static int move_stream(ump_pool_t *pool, const struct seg *s, int dev,
                       void **stream_p)
{
    if (dev >= 0)
        return stream_of(pool, dev, DIR_UP, stream_p);
    return stream_of(pool, s->tier == UMP_TIER_DEVICE ? s->dev : s->home,
                     DIR_DOWN, stream_p);
}

/* Moves claimed s, on a device or the host, to device dev (tier DEVICE) or
 * to the host tier. Pool lock held; dropped for the copy. */
static int move_mem(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct vas *v = &pool->vas;
    struct backing dst, src = {0};
    size_t st, n = s->n;
    void *stream;
    int rc = move_stream(pool, s, dev, &stream);
    if (rc)
        return rc;
    rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, n, &dst);
    if (rc)
        return rc;
    if (vas_take(v, n, &st)) {
        ump_log_error("no addresses left to stage a move of %zu bytes",
                      bytes_of(pool, n));
        backing_put(pool, &dst);
        return -ENOMEM;
    }
    rc = backing_map(pool, &dst, st, n);
    if (rc) {
        backing_put(pool, &dst);
        vas_give(v, st, n);
        return rc;
    }
    if (tier == UMP_TIER_DEVICE)
        room_ahead(pool, dev);
    bool copy = !s->discard;
    pthread_mutex_unlock(&pool->lock);
    if (copy)
        rc = copy_sync(pool, stream, vas_addr(v, st), vas_addr(v, s->g),
                       bytes_of(pool, n));
    pthread_mutex_lock(&pool->lock);
    if (!rc)
        rc = backing_of(pool, s, &src);
    if (!rc && (rc = backing_unmap(pool, &src, s->g)))
        backing_clear(&src); /* the driver kept it mapped: nothing moved */
    if (!rc && (rc = backing_map(pool, &dst, s->g, n))) {
        if (backing_map(pool, &src, s->g, n))
            ump_log_error("lost the mapping of %zu bytes at %p", bytes_of(pool, n),
                          vas_addr(v, s->g));
        backing_clear(&src);
    }
    bool staged = backing_unmap(pool, &dst, st) == 0;
    if (staged)
        vas_give(v, st, n);
    else /* still mapped there: neither the memory nor the range is reused */
        ump_log_error("cannot unmap a staging range: %zu bytes of addresses "
                      "lost", bytes_of(pool, n));
    if (rc) {
        if (staged)
            backing_put(pool, &dst);
        else
            backing_clear(&dst);
    } else {
        backing_put(pool, &src);
        note_move(pool, s, tier, dev);
        s->host = dst.host; /* device chunks: in the granule table now */
        backing_clear(&dst);
    }
    return rc;
}

/* Moves claimed s, on a device or the host, to NVMe. Pool lock held;
 * dropped for the write. */
static int move_to_nvme(ump_pool_t *pool, struct seg *s)
{
    uint64_t *slots = NULL;
    struct backing src;
    void *stream = NULL;
    int rc = 0;
    if (!pool->off->nvme) {
        ump_log_error("no NVMe tier: nvme_dir is not set");
        return -ENOSPC;
    }
    /* Host memory needs a stream too: a driver that refuses direct I/O on
     * it sends the data through the bounce buffers (nvme_xfer). */
    rc = move_stream(pool, s, -1, &stream);
    if (rc)
        return rc;
    bool copy = !s->discard;
    pthread_mutex_unlock(&pool->lock);
    if (copy && !(rc = slots_alloc(pool, s->n, &slots))) {
        rc = nvme_xfer(pool, vas_addr(&pool->vas, s->g), slots, s->n, true,
                       s->tier == UMP_TIER_HOST, stream);
        if (rc) {
            slots_free(pool, slots, s->n);
            slots = NULL;
        }
    }
    pthread_mutex_lock(&pool->lock);
    if (!rc)
        rc = backing_of(pool, s, &src);
    if (!rc && (rc = backing_unmap(pool, &src, s->g)))
        backing_clear(&src);
    if (rc) {
        slots_free_later(pool, slots, s->n);
    } else {
        backing_put(pool, &src);
        note_move(pool, s, UMP_TIER_NVME, -1);
        s->host = NULL;
        s->slots = slots;
    }
    return rc;
}

/* Moves claimed s from NVMe to device dev (tier DEVICE) or the host tier; the data
 * is checked (crc32c) before it is used. Pool lock held; dropped for the
 * read. */
static int move_from_nvme(ump_pool_t *pool, struct seg *s, int tier, int dev)
{
    struct backing dst;
    void *stream;
    int rc = move_stream(pool, s, dev, &stream);
    if (rc)
        return rc;
    rc = backing_get(pool, tier, dev, pool->topo.dev[s->home].numa, s->n, &dst);
    if (rc)
        return rc;
    rc = backing_map(pool, &dst, s->g, s->n);
    if (rc) {
        backing_put(pool, &dst);
        return rc;
    }
    if (tier == UMP_TIER_DEVICE)
        room_ahead(pool, dev);
    /* s is claimed: nobody else reads or changes s->slots meanwhile */
    pthread_mutex_unlock(&pool->lock);
    if (s->slots)
        rc = nvme_xfer(pool, vas_addr(&pool->vas, s->g), s->slots, s->n, false,
                       tier == UMP_TIER_HOST, stream);
    if (!rc) /* the data is in place and checked: nothing can undo it */
        slots_free(pool, s->slots, s->n);
    pthread_mutex_lock(&pool->lock);
    if (rc) {
        if (backing_unmap(pool, &dst, s->g))
            ump_log_error("cannot unmap after a failed read: %zu bytes of "
                          "memory lost", bytes_of(pool, s->n));
        else
            backing_put(pool, &dst);
        backing_clear(&dst);
    } else {
        s->slots = NULL;
        note_move(pool, s, tier, dev);
        s->host = dst.host;
        backing_clear(&dst);
    }
    return rc;
}

/* --- policy: what moves where ------------------------------------------------- */

/* May the pool move s by itself? Offloadable, not forbidden to move, and
 * live: a run being freed is waited for, not written to disk. */
static bool movable(const struct seg *s)
{
    const struct run *r = s->res->run;
    unsigned flags = atomic_load_explicit(&r->flags, memory_order_relaxed);
    return !s->res->dead && (flags & UMP_HINT_OFFLOAD) &&
           !(flags & UMP_HINT_NO_SPILL) &&
           obj_state(atomic_load_explicit(&r->word, memory_order_acquire)) ==
               OBJ_LIVE;
}

/* The coldest segment the pool may move by itself from device dev (any
 * when -1): offloadable, unpinned, still. When there is none but one that
 * will free room or become a victim is moving there (evicted, or
 * prefetched up by another thread), *wait_p is set.
 *
 * Waiting cannot cycle: only callers of room_locked wait (for a moving
 * segment, or for the evictions under way); a move down never waits (it
 * falls back to NVMe or fails), and the only unpinned moves up are the
 * prefetch worker's, one at a time. Pool lock held. */
static struct seg *victim(ump_pool_t *pool, int dev, bool *wait_p)
{
    for (struct seg *s = pool->off->lru_tail; s; s = s->prev) {
        if (s->pins || !movable(s))
            continue;
        bool here = s->tier == UMP_TIER_DEVICE && (dev < 0 || s->dev == dev);
        if (here && !s->moving)
            return s;
        if (wait_p && s->moving &&
            (here || (s->dest >= 0 && (dev < 0 || s->dest == dev))))
            *wait_p = true;
    }
    return NULL;
}

/* The coldest host segment the pool may move to NVMe by itself. */
static struct seg *host_victim(ump_pool_t *pool)
{
    for (struct seg *s = pool->off->lru_tail; s; s = s->prev)
        if (s->tier == UMP_TIER_HOST && !s->pins && !s->moving && movable(s))
            return s;
    return NULL;
}

static size_t host_room(const ump_pool_t *pool)
{
    const struct offload *o = pool->off;
    return o->host_limit - o->host_created + o->host_free_bytes;
}

/* Moves offloadable host segments to NVMe until the host tier has room
 * for n granules. Pool lock held. */
static int host_make_room(ump_pool_t *pool, size_t n)
{
    while (host_room(pool) < bytes_of(pool, n)) {
        struct seg *v = pool->off->nvme ? host_victim(pool) : NULL;
        if (!v)
            return -ENOSPC;
        int home = v->home; /* v may be gone after unclaim */
        claim(pool, v);
        int rc = move_to_nvme(pool, v);
        unclaim(pool, v);
        if (rc)
            return rc;
        pool->off->ctr[home].evictions++;
    }
    return 0;
}

/* Moves s down one step the pool chooses: to the host tier while it has
 * (or can make) room, else to NVMe. Pool lock held. */
static int move_down(ump_pool_t *pool, struct seg *s)
{
    struct offload *o = pool->off;
    int rc = -ENOSPC, home = s->home;
    claim(pool, s);
    int from = s->tier == UMP_TIER_DEVICE ? s->dev : -1;
    size_t n = s->n;
    if (from >= 0)
        o->evicting[from] += n;
    if (host_make_room(pool, s->n) == 0)
        rc = s->pins ? -EBUSY : move_mem(pool, s, UMP_TIER_HOST, -1);
    /* ENOTSUP: a driver too old for pinned host chunks (before 12.2). The
     * lock was dropped: s may have been acquired meanwhile. */
    if ((rc == -ENOSPC || rc == -ENOMEM || rc == -ENOTSUP) && o->nvme)
        rc = s->pins ? -EBUSY : move_to_nvme(pool, s);
    if (from >= 0)
        o->evicting[from] -= n;
    unclaim(pool, s);
    if (!rc)
        o->ctr[home].evictions++;
    else if (rc == -ENOSPC || rc == -ENOMEM)
        o->full = true; /* until a tier gives space back */
    return rc;
}

/* Evicts from device dev until n granules could be allocated there (0),
 * or, dev -1, one segment from any device. Pool lock held. */
static int room_locked(ump_pool_t *pool, int dev, size_t n, bool *moved_p)
{
    size_t *evicting = pool->off->evicting;
    for (;;) {
        size_t have = dev >= 0 ? chunks_available(pool, dev) : 0;
        if (dev >= 0 && have >= n)
            return 0;
        /* Enough is on its way down already (the eviction worker): wait
         * for it rather than evict more than needed. */
        if (dev >= 0 && evicting[dev] && have + evicting[dev] >= n) {
            pthread_cond_wait(&pool->off->moved, &pool->lock);
            *moved_p = true;
            continue;
        }
        bool wait = false;
        struct seg *v = victim(pool, dev, &wait);
        if (!v && wait) { /* another thread is making room: see after it */
            pthread_cond_wait(&pool->off->moved, &pool->lock);
            *moved_p = true;
            continue;
        }
        if (!v)
            return -ENOMEM;
        int rc = move_down(pool, v);
        if (rc == -EBUSY) /* acquired while room was made for it: next */
            continue;
        if (rc)
            return rc;
        *moved_p = true;
        if (dev < 0) /* one at a time: the caller counts */
            return 0;
    }
}

/* Chunks every device could supply now. */
static size_t available_all(ump_pool_t *pool)
{
    size_t sum = 0;
    for (int d = 0; d < pool->ndev; d++)
        sum += chunks_available(pool, d);
    return sum;
}

int offload_make_room(ump_pool_t *pool, int device, size_t bytes)
{
    bool moved = false;
    size_t n = (bytes + pool->chunk_size - 1) >> pool->chunk_shift;
    pthread_mutex_lock(&pool->lock);
    if (chunks_available(pool, device) < n) {
        room_locked(pool, device, n, &moved);
    } else {
        /* The device has room, yet the allocation failed: its plan wants
         * other devices too. n chunks more, from any device. */
        size_t want = available_all(pool) + n;
        while (available_all(pool) < want) {
            bool one = false;
            if (room_locked(pool, -1, 1, &one) || !one)
                break;
            moved = true;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return moved ? 0 : -ENOMEM;
}

static bool reaches(const ump_pool_t *pool, int from, int to)
{
    return from == to || pool->topo.link[from][to].peer;
}

/* Brings s onto a device that `device` reaches (see ump_acquire); device
 * may be DEST_HOME. The caller keeps s's run busy. Pool lock held. */
static int move_up(ump_pool_t *pool, struct seg *s, int device)
{
    int to = device == DEST_HOME || reaches(pool, device, s->home) ? s->home
                                                                   : device;
    int rc;
    claim(pool, s);
    /* Room made (or freed by others meanwhile) can be taken by another
     * thread before this one maps it: a few rounds. */
    for (int round = 0;; round++) {
        bool moved = false;
        if (s->tier == UMP_TIER_DEVICE &&
            (device == DEST_HOME || reaches(pool, device, s->dev))) {
            rc = 0;
            break;
        }
        s->dest = to;
        rc = s->tier == UMP_TIER_NVME
                 ? move_from_nvme(pool, s, UMP_TIER_DEVICE, to)
                 : move_mem(pool, s, UMP_TIER_DEVICE, to);
        s->dest = -1;
        if (rc != -ENOMEM)
            break;
        if (round == MOVE_UP_ROUNDS || room_locked(pool, to, s->n, &moved))
            break;
    }
    unclaim(pool, s);
    return rc;
}

/* --- teardown ------------------------------------------------------------------- */

static void teardown(ump_pool_t *pool, struct res *res)
{
    struct run *r = res->run;
    vas_set(&pool->vas, r->start, r->n, VAS_FREE, NULL);
    for (size_t i = 0; i < res->nseg; i++) {
        struct seg *s = &res->seg[i];
        struct backing b;
        lru_unlink(pool->off, s);
        note_tier(pool, s, s->tier, -1);
        if (s->tier == UMP_TIER_NVME) {
            slots_free_later(pool, s->slots, s->n);
        } else if (backing_of(pool, s, &b)) {
            ump_log_error("out of memory: %zu bytes of a freed allocation "
                          "are lost", bytes_of(pool, s->n));
            continue;
        } else if (backing_unmap(pool, &b, s->g)) {
            backing_clear(&b); /* still mapped: its addresses stay taken */
            continue;
        } else {
            backing_put(pool, &b);
        }
        if (vas_give(&pool->vas, s->g, s->n))
            ump_log_error("out of memory for the address range table: %zu "
                          "granules of addresses lost", s->n);
    }
    r->res = NULL;
    free(res);
    pool_run_put(pool, r);
}

void offload_run_free(ump_pool_t *pool, struct run *r)
{
    struct res *res = r->res;
    res->dead = true;
    for (size_t i = 0; i < res->nseg; i++)
        lru_unlink(pool->off, &res->seg[i]);
    if (!res->busy)
        teardown(pool, res);
}

/* --- the background workers ------------------------------------------------------ */

static void prefetch_one(ump_pool_t *pool, struct prefetch *pf)
{
    struct run *r;
    size_t g0, g1;
    /* The allocation may be gone by now: quietly nothing to do. */
    if (find_range(pool, NULL, pf->ptr, pf->size, &r, &g0, &g1) || !r->res)
        return;
    struct res *res = r->res;
    res->busy++;
    for (struct seg *s = seg_at(res, g0); s < res->seg + res->nseg &&
                                          s->g < g1 && !res->dead; s++) {
        if (pf->device == UMP_LOC_HOST) {
            claim(pool, s);
            if (s->tier == UMP_TIER_NVME && !host_make_room(pool, s->n))
                move_from_nvme(pool, s, UMP_TIER_HOST, -1);
            unclaim(pool, s);
        } else {
            move_up(pool, s, pf->device);
        }
        if (!res->dead)
            lru_touch(pool->off, s, true);
    }
    res_unbusy(pool, res);
}

/* Watermarks: a device that went above the high one drains down to the
 * low one, over as many rounds as it takes (what is acquired now may be
 * released later). In use: mapped, not in cached blocks. */
static void watermarks(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    for (int d = 0; d < pool->ndev; d++) {
        struct dev_state *ds = &pool->dev[d];
        size_t low = ds->capacity * (size_t)pool->cfg.low_watermark / 100;
        if (above_high(pool, d))
            o->draining[d] = true;
        while (o->draining[d] && !o->stopping && !o->full) {
            if (ds->mapped - ds->cached <= low) {
                o->draining[d] = false;
                break;
            }
            struct seg *v = victim(pool, d, NULL);
            if (!v || move_down(pool, v))
                break;
        }
    }
}

/* Keeps host_reserve bytes of pinned host chunks made ahead of need, once
 * the host tier is used: pinning runs at a few GB/s. */
static void refill(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o->host_in_use && !o->stopping &&
           o->host_free_bytes < o->host_reserve) {
        struct hpiece *p;
        size_t n = (o->host_reserve - o->host_free_bytes) >> pool->chunk_shift;
        if (!n || host_create(pool, 0, n, &p))
            break;
        host_put(pool, p);
    }
}

/* The prefetch worker: the queue, in order. */
static void *prefetch_main(void *arg)
{
    ump_pool_t *pool = arg;
    struct offload *o = pool->off;
    pthread_mutex_lock(&pool->lock);
    while (!o->stopping) {
        struct prefetch *pf = o->pf_head;
        if (!pf) {
            pthread_cond_wait(&o->w[W_PREFETCH].wake, &pool->lock);
            continue;
        }
        o->pf_head = pf->next;
        if (!o->pf_head)
            o->pf_tail = NULL;
        prefetch_one(pool, pf);
        free(pf);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* The eviction worker: watermarks and the host reserve, when woken and
 * every OFFLOAD_TICK_MS. */
static void *evict_main(void *arg)
{
    ump_pool_t *pool = arg;
    struct offload *o = pool->off;
    struct worker *k = &o->w[W_EVICT];
    pthread_mutex_lock(&pool->lock);
    while (!o->stopping) {
        k->kicked = false;
        watermarks(pool);
        refill(pool);
        if (o->stopping)
            break;
        if (k->kicked)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += OFFLOAD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&k->wake, &pool->lock, &ts);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Wakes worker w, started on first need. Pool lock held. */
static void wake(ump_pool_t *pool, int w)
{
    static const char *const names[W_COUNT] = {"umpool-prefetch",
                                               "umpool-evict"};
    struct offload *o = pool->off;
    struct worker *k = &o->w[w];
    if (!k->on && !o->stopping) {
        int rc = pthread_create(&k->thread, NULL,
                                w == W_PREFETCH ? prefetch_main : evict_main,
                                pool);
        if (rc) {
            ump_log_warn("cannot start the offload thread %s: %s (no "
                         "watermark eviction or prefetch)", names[w],
                         strerror(rc));
            o->stopping = true; /* do not try again */
            return;
        }
        pthread_setname_np(k->thread, names[w]);
        k->on = true;
    }
    k->kicked = true;
    pthread_cond_signal(&k->wake);
}

int offload_track(ump_pool_t *pool, struct run *r)
{
    struct res *res;
    int rc = res_get(pool, r, &res);
    if (!rc) {
        pool->off->full = false; /* new pressure: worth another try */
        wake(pool, W_EVICT);
    }
    return rc;
}

/* --- the public calls ------------------------------------------------------------ */

/* device: an index or UMP_DEVICE_CURRENT (also UMP_LOC_HOST when host_ok),
 * resolved into *dev_p. */
static int read_device(ump_pool_t *pool, const char *fn, int device,
                       bool host_ok, int *dev_p)
{
    if (device == UMP_DEVICE_CURRENT)
        return ump_get_device(pool, dev_p);
    if ((device == UMP_LOC_HOST && host_ok) ||
        (device >= 0 && device < pool->ndev)) {
        *dev_p = device;
        return 0;
    }
    ump_log_error("%s: device %d out of range (0..%d%s)", fn, device,
                  pool->ndev - 1, host_ok ? " or UMP_LOC_HOST" : "");
    return -EINVAL;
}

/* The tracked run for [ptr, ptr+size) and its segments [*s0_p, *s1_p).
 * Slab objects: 1 (they never move). Pool lock held. */
static int lookup(ump_pool_t *pool, const char *fn, void *ptr, size_t size,
                  bool track, struct res **res_p, struct seg **s0_p,
                  struct seg **s1_p)
{
    struct run *r;
    size_t g0, g1;
    int rc = find_range(pool, fn, ptr, size, &r, &g0, &g1);
    if (rc == -ENOTSUP)
        return 1;
    if (rc)
        return rc;
    if (!r->res && !track) {
        *res_p = NULL;
        return 0;
    }
    struct res *res;
    rc = res_get(pool, r, &res);
    if (rc)
        return rc;
    *res_p = res;
    *s0_p = seg_at(res, g0);
    *s1_p = seg_at(res, g1 - 1) + 1;
    return 0;
}

UMP_EXPORT int ump_acquire(ump_pool_t *pool, void *ptr, size_t size,
                           int device, ump_stream_t stream)
{
    int rc = pool_check(pool, "ump_acquire");
    int dev;
    if (!rc)
        rc = read_device(pool, "ump_acquire", device, false, &dev);
    if (rc)
        return rc;
    (void)stream; /* the data is in place when this returns */
    struct res *res;
    struct seg *s0, *s1, *s;
    pthread_mutex_lock(&pool->lock);
    rc = lookup(pool, "ump_acquire", ptr, size, true, &res, &s0, &s1);
    if (rc) {
        pthread_mutex_unlock(&pool->lock);
        return rc > 0 ? 0 : rc;
    }
    res->busy++;
    for (s = s0; s < s1; s++) { /* pinned first: nothing evicts them now */
        s->pins++;
        s->discard = false;
    }
    for (s = s0; s < s1 && !rc; s++)
        rc = move_up(pool, s, dev);
    for (s = s0; s < s1; s++) {
        if (rc)
            s->pins--;
        else
            lru_touch(pool->off, s, true);
    }
    if (rc == -ENOMEM)
        ump_log_error("ump_acquire: no room on device %d for %p, even after "
                      "moving unpinned offloadable memory", dev, ptr);
    res_unbusy(pool, res);
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

UMP_EXPORT int ump_release(ump_pool_t *pool, void *ptr, size_t size)
{
    int rc = pool_check(pool, "ump_release");
    if (rc)
        return rc;
    struct res *res;
    struct seg *s0, *s1, *s;
    pthread_mutex_lock(&pool->lock);
    rc = lookup(pool, "ump_release", ptr, size, false, &res, &s0, &s1);
    if (!rc && res) {
        for (s = s0; s < s1; s++)
            if (!s->pins)
                break;
        if (s == s1) {
            for (s = s0; s < s1; s++) {
                s->pins--;
                lru_touch(pool->off, s, true);
            }
            wake(pool, W_EVICT); /* it may now go below the watermark */
        } else {
            res = NULL;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    if (!rc && !res) {
        ump_log_error("ump_release: %p is not acquired", ptr);
        return -EINVAL;
    }
    return rc > 0 ? 0 : rc;
}

/* Queues a prefetch for the prefetch worker. Pool lock held. */
static int queue_prefetch(ump_pool_t *pool, void *ptr, size_t size, int dest)
{
    struct offload *o = pool->off;
    struct prefetch *pf = malloc(sizeof(*pf));
    if (!pf)
        return -ENOMEM;
    *pf = (struct prefetch){ptr, size, dest, NULL};
    if (o->pf_tail)
        o->pf_tail->next = pf;
    else
        o->pf_head = pf;
    o->pf_tail = pf;
    wake(pool, W_PREFETCH);
    return 0;
}

UMP_EXPORT int ump_prefetch(ump_pool_t *pool, void *ptr, size_t size,
                            int device, ump_stream_t stream)
{
    int rc = pool_check(pool, "ump_prefetch");
    int dev;
    if (!rc)
        rc = read_device(pool, "ump_prefetch", device, true, &dev);
    if (rc)
        return rc;
    (void)stream; /* a hint: ump_acquire is where the data is waited for */
    struct res *res;
    struct seg *s0, *s1;
    pthread_mutex_lock(&pool->lock);
    rc = lookup(pool, "ump_prefetch", ptr, size, false, &res, &s0, &s1);
    if (!rc && res) /* an untracked run never left its devices */
        rc = queue_prefetch(pool, ptr, size, dev);
    pthread_mutex_unlock(&pool->lock);
    return rc > 0 ? 0 : rc;
}

UMP_EXPORT int ump_evict(ump_pool_t *pool, void *ptr, size_t size, int tier)
{
    int rc = pool_check(pool, "ump_evict");
    if (rc)
        return rc;
    if (tier != UMP_TIER_HOST && tier != UMP_TIER_NVME) {
        ump_log_error("ump_evict: tier %d is not UMP_TIER_HOST or "
                      "UMP_TIER_NVME", tier);
        return -EINVAL;
    }
    struct run *r;
    size_t g0, g1;
    pthread_mutex_lock(&pool->lock);
    rc = find_range(pool, "ump_evict", ptr, size, &r, &g0, &g1);
    if (rc == -ENOTSUP)
        ump_log_error("ump_evict: %p is a small allocation (a slab object); "
                      "only allocations of whole chunks move", ptr);
    if (!rc && (r->flags & UMP_HINT_NO_SPILL)) {
        ump_log_error("ump_evict: %p was allocated with UMP_HINT_NO_SPILL",
                      ptr);
        rc = -EPERM;
    }
    struct res *res = NULL;
    if (!rc)
        rc = res_get(pool, r, &res);
    struct seg *s0 = NULL, *s1 = NULL, *s;
    if (!rc) {
        s0 = seg_at(res, g0);
        s1 = seg_at(res, g1 - 1) + 1;
        for (s = s0; s < s1 && !rc; s++)
            if (s->pins)
                rc = -EBUSY;
        if (rc)
            ump_log_error("ump_evict: %p is acquired", ptr);
    }
    if (!rc) {
        res->busy++;
        for (s = s0; s < s1 && !rc; s++) {
            claim(pool, s);
            if (s->pins) {
                ump_log_error("ump_evict: %p was acquired meanwhile", ptr);
                rc = -EBUSY;
            } else if (s->tier >= tier) {
                /* already there */
            } else if (tier == UMP_TIER_NVME) {
                rc = move_to_nvme(pool, s);
                if (rc == -ENOSPC && pool->off->nvme)
                    ump_log_error("ump_evict: the NVMe tier is full (%zu "
                                  "bytes used)", pool->off->nvme_used);
            } else {
                rc = host_make_room(pool, s->n);
                if (!rc)
                    rc = move_mem(pool, s, UMP_TIER_HOST, -1);
                if (rc == -ENOSPC)
                    ump_log_error("ump_evict: the host tier is full "
                                  "(host_limit %zu)", pool->off->host_limit);
            }
            unclaim(pool, s);
        }
        res_unbusy(pool, res);
    }
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

UMP_EXPORT int ump_advise(ump_pool_t *pool, void *ptr, size_t size,
                          int advice)
{
    int rc = pool_check(pool, "ump_advise");
    if (rc)
        return rc;
    if (advice < UMP_ADVISE_HOT || advice > UMP_ADVISE_DONTNEED) {
        ump_log_error("ump_advise: unknown advice %d", advice);
        return -EINVAL;
    }
    struct res *res;
    struct seg *s0, *s1;
    pthread_mutex_lock(&pool->lock);
    /* Untracked runs never move by themselves: only DONTNEED has a use. */
    rc = lookup(pool, "ump_advise", ptr, size, advice == UMP_ADVISE_DONTNEED,
                &res, &s0, &s1);
    if (!rc && res) {
        if (advice == UMP_ADVISE_WILLNEED)
            rc = queue_prefetch(pool, ptr, size, DEST_HOME);
        for (struct seg *s = s0; s < s1 && !rc; s++) {
            s->discard = advice == UMP_ADVISE_DONTNEED || s->discard;
            if (advice != UMP_ADVISE_WILLNEED)
                lru_touch(pool->off, s, advice == UMP_ADVISE_HOT);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return rc > 0 ? 0 : rc;
}

/* --- statistics and introspection ------------------------------------------------- */

void offload_device_stats(ump_pool_t *pool, int d, ump_stats_t *st)
{
    const struct tier_ctr *c = &pool->off->ctr[d];
    st->host_bytes = c->host_bytes;
    st->nvme_bytes = c->nvme_bytes;
    st->spill_count = c->spill_count;
    st->spill_bytes = c->spill_bytes;
    st->restore_count = c->restore_count;
    st->restore_bytes = c->restore_bytes;
    st->evictions = c->evictions;
}

UMP_EXPORT int ump_tier_stats(ump_pool_t *pool, int tier,
                              ump_tier_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_tier_stats");
    if (rc)
        return rc;
    if (!stats_p || (tier != UMP_TIER_HOST && tier != UMP_TIER_NVME)) {
        ump_log_error("ump_tier_stats: %s", stats_p ? "tier is not "
                      "UMP_TIER_HOST or UMP_TIER_NVME" : "stats_p is NULL");
        return -EINVAL;
    }
    const struct offload *o = pool->off;
    ump_tier_stats_t st = {0};
    pthread_mutex_lock(&pool->lock);
    if (tier == UMP_TIER_HOST) {
        st = (ump_tier_stats_t){o->host_limit, o->host_used,
                                o->host_free_bytes, o->host_peak, o->host_segs};
    } else if (o->nvme) {
        st = (ump_tier_stats_t){o->nvme_limit, o->nvme_used, 0, o->nvme_peak,
                                o->nvme_segs};
    }
    pthread_mutex_unlock(&pool->lock);
    *stats_p = st;
    return 0;
}

void offload_ptr_info(ump_pool_t *pool, const struct run *r, size_t g,
                      ump_ptr_info_t *info)
{
    const struct seg *s = seg_at(r->res, g);
    info->tier = s->tier;
    info->device = s->tier == UMP_TIER_DEVICE ? s->dev : -1;
    info->chunk_base = vas_addr(&pool->vas, s->g);
    info->chunk_size = bytes_of(pool, s->n);
}

int offload_gran_tier(ump_pool_t *pool, size_t g)
{
    uintptr_t tag = vas_tag(&pool->vas, g);
    if (vas_tag_kind(tag) != VAS_RUN)
        return UMP_TIER_DEVICE;
    const struct run *r = vas_tag_owner(tag);
    return r->res ? seg_at(r->res, g)->tier : UMP_TIER_DEVICE;
}

int offload_inject_fault(ump_pool_t *pool, const char *what, int nth)
{
    struct offload *o = pool->off;
    if (nth < 0 || !what)
        return -EINVAL;
    if (!strcmp(what, "host_alloc")) {
        pthread_mutex_lock(&pool->lock);
        o->host_fault = nth;
        pthread_mutex_unlock(&pool->lock);
        return 0;
    }
    if (strcmp(what, "eio") && strcmp(what, "enospc") &&
        strcmp(what, "short_write") && strcmp(what, "corrupt"))
        return -EINVAL;
    if (!o->nvme)
        return -ENODEV;
    pthread_mutex_lock(&o->io_lock); /* never under the pool lock */
    int rc = nvme_inject_fault(o->nvme, what, nth);
    pthread_mutex_unlock(&o->io_lock);
    return rc;
}

/* --- set-up and tear-down ------------------------------------------------------- */

static int nvme_setup(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    const struct ump_config *cfg = &pool->cfg;
    const char *dirs[64];
    int ndirs = 0;
    char list[UMP_CONF_PATH_MAX];
    if (!cfg->nvme_dir[0])
        return 0;
    if (pool->chunk_size % ((size_t)1 << 20)) {
        ump_log_error("config: the NVMe tier needs chunk_size of at least 1M "
                      "(it is %zu)", pool->chunk_size);
        return -EINVAL;
    }
    strcpy(list, cfg->nvme_dir);
    for (char *save = NULL, *d = strtok_r(list, ":", &save); d;
         d = strtok_r(NULL, ":", &save)) {
        if (ndirs == (int)UMP_ARRAY_SIZE(dirs)) {
            ump_log_error("config: more than %zu nvme_dir directories",
                          UMP_ARRAY_SIZE(dirs));
            return -EINVAL;
        }
        dirs[ndirs++] = d;
    }
    struct nvme_config nc = {
        .dirs = dirs,
        .ndirs = ndirs,
        .slot_size = pool->chunk_size,
        .limit = cfg->nvme_limit,
        .queue_depth = (unsigned)cfg->nvme_queue_depth,
        .force_threads = cfg->nvme_engine == UMP_NVME_THREADS,
        /* one set of bounce buffers: near the first device */
        .numa_node = pool->topo.dev[0].numa,
    };
    if (!ndirs)
        return 0;
    int rc = nvme_open(&nc, &o->nvme);
    if (rc) {
        ump_log_error("config: cannot use nvme_dir %s: %s", cfg->nvme_dir,
                      ump_strerror(rc));
        return rc;
    }
    if (cfg->nvme_engine == UMP_NVME_IO_URING &&
        strcmp(nvme_engine(o->nvme), "io_uring")) {
        ump_log_error("config: nvme_engine io_uring is not available here");
        nvme_close(o->nvme);
        o->nvme = NULL;
        return -ENOTSUP;
    }
    o->qd = (unsigned)cfg->nvme_queue_depth;
    o->nvme_limit = cfg->nvme_limit;
    /* The bounce buffers take device copies: page-locked for the driver,
     * those copies run at the link's speed and overlap the disk's I/O. */
    size_t len;
    void *arena = nvme_arena(o->nvme, &len);
    if (arena && pool->be->host_register &&
        pool->be->host_register(pool->bctx, arena, len) == 0)
        o->arena_registered = arena;
    return 0;
}

int offload_init(ump_pool_t *pool)
{
    struct offload *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    pool->off = o;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_init(&o->w[w].wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&o->moved, NULL);
    pthread_mutex_init(&o->io_lock, NULL);
    pthread_mutex_init(&o->dead_lock, NULL);
    o->stream = calloc((size_t)pool->ndev * 2, sizeof(*o->stream));
    o->ctr = calloc((size_t)pool->ndev, sizeof(*o->ctr));
    o->draining = calloc((size_t)pool->ndev, sizeof(*o->draining));
    o->evicting = calloc((size_t)pool->ndev, sizeof(*o->evicting));
    if (!o->stream || !o->ctr || !o->draining || !o->evicting)
        return -ENOMEM;
    o->host_limit = pool->cfg.host_limit; /* resolved by pool_setup */
    o->host_reserve = pool->cfg.host_reserve < o->host_limit
                          ? pool->cfg.host_reserve & ~(pool->chunk_size - 1)
                          : o->host_limit;
    return nvme_setup(pool);
}

void offload_stop(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o)
        return;
    bool on[W_COUNT];
    pthread_mutex_lock(&pool->lock);
    o->stopping = true;
    for (int w = 0; w < W_COUNT; w++) {
        pthread_cond_signal(&o->w[w].wake);
        on[w] = o->w[w].on;
        o->w[w].on = false;
    }
    pthread_mutex_unlock(&pool->lock);
    for (int w = 0; w < W_COUNT; w++)
        if (on[w])
            pthread_join(o->w[w].thread, NULL);
}

void offload_trim_locked(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    while (o && o->host_free) {
        struct hpiece *p = o->host_free;
        o->host_free = p->next;
        o->host_free_bytes -= bytes_of(pool, p->n);
        host_release(pool, p);
    }
}

static void free_state(struct offload *o)
{
    while (o->pf_head) {
        struct prefetch *pf = o->pf_head;
        o->pf_head = pf->next;
        free(pf);
    }
    while (o->dead) { /* the store is gone: only the lists are left */
        struct dead_slots *d = o->dead;
        o->dead = d->next;
        free(d->slots);
        free(d);
    }
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_destroy(&o->w[w].wake);
    pthread_cond_destroy(&o->moved);
    pthread_mutex_destroy(&o->io_lock);
    pthread_mutex_destroy(&o->dead_lock);
    free(o->stream);
    free(o->ctr);
    free(o->draining);
    free(o->evicting);
    free(o);
}

void offload_fini(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o)
        return;
    offload_trim_locked(pool);
    if (o->host_created)
        ump_log_warn("%zu bytes of pinned host memory still held at destroy",
                     o->host_created);
    for (int i = 0; o->stream && i < pool->ndev * 2; i++)
        if (o->stream[i])
            pool->be->stream_destroy(pool->bctx, o->stream[i]);
    if (o->nvme) {
        pthread_mutex_lock(&o->io_lock);
        slots_drain(o);
        pthread_mutex_unlock(&o->io_lock);
    }
    if (o->arena_registered)
        pool->be->host_unregister(pool->bctx, o->arena_registered);
    nvme_close(o->nvme);
    free_state(o);
    pool->off = NULL;
}

void offload_fini_in_child(ump_pool_t *pool)
{
    struct offload *o = pool->off;
    if (!o)
        return;
    /* The parent's thread is not here, its locks may be held: memory only.
     * The NVMe store's files are this process's copies of the descriptors. */
    while (o->host_free) {
        struct hpiece *p = o->host_free;
        o->host_free = p->next;
        free(p);
    }
    nvme_close(o->nvme);
    /* The parent's threads may have held these at fork, or slept on the
     * conditions: glibc's pthread_cond_destroy would wait for those
     * sleepers, who do not exist here, forever. */
    pthread_mutex_init(&o->io_lock, NULL);
    pthread_mutex_init(&o->dead_lock, NULL);
    pthread_cond_init(&o->moved, NULL);
    for (int w = 0; w < W_COUNT; w++)
        pthread_cond_init(&o->w[w].wake, NULL);
    free_state(o);
    pool->off = NULL;
}
