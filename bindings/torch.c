/*
 * PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)
 * over the process's pool (ump_process_pool): the entry points with the C
 * signatures torch/csrc/cuda/CUDAPluggableAllocator.cpp calls.
 *
 * Frees are stream-ordered: a freed block serves the next allocation of
 * its size on the same stream at once (that stream's later work runs after
 * its earlier work), and goes back to the pool once the work queued on the
 * freeing stream so far is done (ump_free_async), and,
 * for a block that record_stream named other streams for, once the work
 * of every one of them is done too: a host function on each stream counts
 * down, and the last one hands the block to a list that the next call of
 * these entry points returns to the pool (a host function may not call
 * the driver, which a free may do).
 *
 * The streams are PyTorch's own (its default stream is NULL; the side
 * streams of torch.cuda.Stream() are non-blocking streams of its stream
 * pool, ExternalStream's the caller's): each is wrapped (ump_stream_wrap)
 * the first time a block of it goes back to the pool, so that the pool
 * orders on it. A block whose stream the pool cannot order on is never
 * handed back while that stream may still use it (unordered()).
 *
 * Above the public API only, like the tools.
 */
#include "config.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "umpool.h"
#include "umpool_bindings.h"

#define EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

static void forget_all(void);

/* The process's pool, asked once: it never changes, except in a child
 * after fork(), which gets a pool of its own (ump_process_pool) and drops
 * what this file knew of the parent's (forget_all). */
static ump_pool_t *_Atomic cached;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, forget_all);
}

static ump_pool_t *pool_of_process(void)
{
    ump_pool_t *p = atomic_load_explicit(&cached, memory_order_acquire);
    if (likely(p != NULL) || ump_process_pool(NULL, &p))
        return p;
    pthread_once(&atfork_once, atfork_register);
    atomic_store_explicit(&cached, p, memory_order_release);
    return p;
}

/* --- PyTorch's streams --------------------------------------------------- */

/* The streams this file wrapped (ump_stream_wrap), so that the pool
 * accepts them: a lock-free open-addressing set of handles, looked up with
 * one acquire load in the common case, added to under seen_lock (a
 * stream's first give-back; PyTorch's pool streams are a few per device
 * and live as long as the process). Slots go from 0 to a handle and stay
 * (until a fork's child drops them all). A stream the pool knew already
 * (made by ump_stream_create, or wrapped by the application: -EEXIST) is
 * not remembered: its registration is its owner's, who may end it, so the
 * pool is asked again each time. Past SEEN_MAX streams nothing more is
 * remembered: those are asked about each time too (-EEXIST), which costs a
 * lookup in the pool, not correctness. */
#define SEEN_BITS 12
#define SEEN_MAX (3 << (SEEN_BITS - 2)) /* three quarters full at most */
static _Atomic uintptr_t seen[1 << SEEN_BITS];
static int seen_n; /* under seen_lock */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t seen_slot(uintptr_t s, size_t i)
{
    uint64_t h = (uint64_t)(s >> 4) * 0x9E3779B97F4A7C15ull;
    return (size_t)((h >> (64 - SEEN_BITS)) + i) &
           (((size_t)1 << SEEN_BITS) - 1);
}

static bool seen_has(void *stream)
{
    uintptr_t s = (uintptr_t)stream;
    for (size_t i = 0;; i++) {
        uintptr_t v = atomic_load_explicit(&seen[seen_slot(s, i)],
                                           memory_order_acquire);
        if (v == s)
            return true;
        if (!v)
            return false;
    }
}

/* seen_lock held; stream not in the set. */
static void seen_add(void *stream)
{
    uintptr_t s = (uintptr_t)stream;
    if (seen_n >= SEEN_MAX)
        return;
    for (size_t i = 0;; i++) {
        _Atomic uintptr_t *slot = &seen[seen_slot(s, i)];
        if (!atomic_load_explicit(slot, memory_order_relaxed)) {
            atomic_store_explicit(slot, s, memory_order_release);
            seen_n++;
            return;
        }
    }
}

/* The stream to hand the pool for PyTorch's stream s. cudaStreamLegacy
 * (CU_STREAM_LEGACY, 0x1) is the legacy default stream, NULL to the pool;
 * so is cudaStreamPerThread (0x2) here, which ump_stream_wrap refuses (it
 * names each thread's own): the legacy default stream waits for every
 * blocking stream's work, per-thread default streams' included, so this
 * orders more, never less. */
static inline void *pool_stream(void *s)
{
    return (uintptr_t)s <= 2 ? NULL : s;
}

/* 0 when the pool orders work on pool_stream(stream) (on device): the
 * default stream, a stream this file wrapped, or one the pool knew
 * already; else ump_stream_wrap's error (it logged why). Lock-free for a
 * stream wrapped here before. */
static int stream_ready(ump_pool_t *pool, int device, void *stream)
{
    stream = pool_stream(stream);
    if (!stream || likely(seen_has(stream)))
        return 0;
    pthread_mutex_lock(&seen_lock);
    int rc = 0;
    if (!seen_has(stream)) {
        ump_stream_t wrapped;
        rc = ump_stream_wrap(pool, device, stream, &wrapped);
        if (!rc)
            seen_add(stream);
        else if (rc == -EEXIST)
            rc = 0;
    }
    pthread_mutex_unlock(&seen_lock);
    return rc;
}

/* Blocks kept out of the pool for good (unordered). */
static _Atomic unsigned long unordered_count;

/* A block freed on a stream the pool cannot order on (rc: why): it goes
 * back at once only where nothing can still run on that stream: on a
 * backend without native streams (-ENOTSUP: sim, where the handle names
 * none), or on a failed device (-EIO: its work is dropped). Anywhere else
 * (a handle the driver says is not a stream of the device, a stream gone,
 * no memory to order the free) the GPU may still use the block: it is
 * never handed out again, as reusing it could corrupt another stream's
 * data. Logged the first time. */
static void unordered(ump_pool_t *pool, void *ptr, void *stream, int rc)
{
    if (rc == -ENOTSUP || rc == -EIO) {
        ump_free(pool, ptr);
        return;
    }
    if (atomic_fetch_add(&unordered_count, 1) == 0)
        fprintf(stderr, "umpool: umpool_torch: the pool cannot order the "
                "free of %p on stream %p (%s): the block is kept out of the "
                "pool, not reused while that stream may use it (this and "
                "later ones are not logged again)\n", ptr, stream,
                ump_strerror(rc));
}

/* --- record_stream ------------------------------------------------------ */

/* The streams record_stream named for a live block, by the block's
 * address: a small hash table under one lock (record_stream is rare: a
 * tensor used on a stream other than its own). */
#define REC_BUCKETS 256

struct rec {
    void *ptr;
    int n, cap;
    ump_stream_t *streams;
    /* 0, or why a stream cannot be waited for (the pool cannot order on
     * it, or no memory to note it): the block then never goes back. */
    int unorderable;
    struct rec *next;
};

static void rec_free(struct rec *r)
{
    if (r)
        free(r->streams);
    free(r);
}
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec *rec_table[REC_BUCKETS];
static _Atomic int rec_count; /* blocks with records: 0 skips the lock */

static struct rec **rec_slot(void *ptr)
{
    uintptr_t h = (uintptr_t)ptr >> 8;
    return &rec_table[(h ^ (h >> 8)) % REC_BUCKETS];
}

/* Takes ptr's record out of the table (NULL: none). */
static struct rec *rec_take(void *ptr)
{
    if (!atomic_load_explicit(&rec_count, memory_order_acquire))
        return NULL;
    pthread_mutex_lock(&rec_lock);
    struct rec *found = NULL;
    for (struct rec **pp = rec_slot(ptr); *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == ptr) {
            found = *pp;
            *pp = found->next;
            atomic_fetch_sub(&rec_count, 1);
            break;
        }
    pthread_mutex_unlock(&rec_lock);
    return found;
}

EXPORT void umpool_torch_record_stream(void *ptr, void *stream)
{
    ump_pool_t *pool = pool_of_process();
    ump_ptr_info_t in;
    if (!pool || !ptr || ump_ptr_lookup(pool, ptr, &in) || in.base != ptr)
        return; /* not ours: nothing to order */
    /* Wrapped now, while PyTorch surely holds the stream (the block's
     * device: PyTorch records streams of the tensor's device). */
    int ready = stream_ready(pool, in.device, stream);
    pthread_mutex_lock(&rec_lock);
    struct rec **pp = rec_slot(ptr), *r = NULL;
    for (struct rec *e = *pp; e && !r; e = e->next)
        if (e->ptr == ptr)
            r = e;
    if (!r && (r = calloc(1, sizeof(*r)))) {
        r->ptr = ptr;
        r->next = *pp;
        *pp = r;
        atomic_fetch_add(&rec_count, 1);
    }
    if (r) {
        bool known = false;
        for (int i = 0; i < r->n; i++)
            known |= r->streams[i] == pool_stream(stream);
        if (!known && r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 4;
            ump_stream_t *grown = realloc(r->streams, cap * sizeof(*grown));
            if (grown) {
                r->streams = grown;
                r->cap = cap;
            }
        }
        if (!known && r->n < r->cap)
            r->streams[r->n++] = pool_stream(stream);
        else if (!known && !r->unorderable)
            r->unorderable = -ENOMEM;
        if (ready && !r->unorderable)
            r->unorderable = ready;
    }
    pthread_mutex_unlock(&rec_lock);
}

/* --- frees waiting for several streams ----------------------------------- */

struct waiting {
    void *ptr;
    _Atomic int left; /* streams not there yet */
    int lost; /* 0, or why lost_on could not be waited for: never freed */
    void *lost_on;
    struct waiting *next;
};
static struct waiting *_Atomic ready; /* every stream there: to free */

static void stream_reached(void *arg)
{
    struct waiting *w = arg;
    if (atomic_fetch_sub(&w->left, 1) != 1)
        return;
    struct waiting *head = atomic_load(&ready);
    do
        w->next = head;
    while (!atomic_compare_exchange_weak(&ready, &head, w));
}

/* Returns the blocks whose streams are all done to the pool. */
static void free_ready(ump_pool_t *pool)
{
    if (!atomic_load_explicit(&ready, memory_order_acquire))
        return;
    struct waiting *w = atomic_exchange(&ready, NULL);
    while (w) {
        struct waiting *next = w->next;
        if (w->lost)
            unordered(pool, w->ptr, w->lost_on, w->lost);
        else
            ump_free(pool, w->ptr);
        free(w);
        w = next;
    }
}

/* A free that waits for the freeing stream (of device) and the recorded
 * ones. Every stream is one the pool orders on (stream_ready), or the
 * block never goes back. */
static void free_after(ump_pool_t *pool, void *ptr, int device,
                       ump_stream_t stream, struct rec *r)
{
    int rc = r->unorderable ? r->unorderable
                            : stream_ready(pool, device, stream);
    if (rc) {
        unordered(pool, ptr, stream, rc);
        return;
    }
    stream = pool_stream(stream);
    struct waiting *w = malloc(sizeof(*w));
    if (!w) {
        /* No memory to wait in the background: every stream's work done
         * now, then the block is free. */
        for (int i = -1; !rc && i < r->n; i++)
            rc = ump_stream_synchronize(pool, i < 0 ? stream : r->streams[i]);
        if (rc)
            unordered(pool, ptr, stream, rc);
        else
            ump_free(pool, ptr);
        return;
    }
    w->ptr = ptr;
    w->lost = 0;
    w->lost_on = NULL;
    atomic_init(&w->left, r->n + 2); /* the streams, and this call */
    for (int i = -1; i < r->n; i++) {
        ump_stream_t s = i < 0 ? stream : r->streams[i];
        /* A stream that takes no host function is waited for here; one
         * that cannot be waited for either (gone, unwrapped meanwhile)
         * may still run: the block stays out. Set before this call's own
         * count below, which publishes it to the last stream's. */
        if (ump_launch_host_func(pool, s, stream_reached, w)) {
            int e = ump_stream_synchronize(pool, s);
            if (e && !w->lost) {
                w->lost = e;
                w->lost_on = s;
            }
            stream_reached(w);
        }
    }
    stream_reached(w);
}

/* --- same-stream reuse ------------------------------------------------------ */

/* A block freed on stream S may serve the next allocation on S at once:
 * work queued on S afterwards runs after everything queued before the
 * free (PyTorch's own caching allocator reuses blocks the same way). Each
 * thread keeps its last few such blocks, checked when freed; a block
 * pushed out, and every block at thread exit, takes the stream-ordered
 * way back to the pool (ump_free_async on its stream). A kept block counts
 * as live in the pool's statistics.
 *
 * empty_cache (umpool_torch_reset) takes every thread's kept blocks, not
 * only its caller's: PyTorch frees on its autograd threads too. The lists
 * are chained, under keeps_lock, from a thread's first kept block to its
 * exit. Taking another thread's list is the asymmetric Dekker handshake of
 * the pool's thread caches (lib/front/tcache.h), so that the owner's side
 * stays as cheap as an unshared list (a spinlock per list, one exchange in
 * each call, made umpool-bench plugin's pair 1.5x slower on sim; this
 * keeps it as it was): the owner stores busy = 1 and then reads
 * `stealing`; empty_cache, under keeps_lock, sets stealing, issues
 * membarrier(2) (a full barrier on every CPU running the process)
 * and waits for busy == 0, so that either it sees the owner busy or the
 * owner sees it stealing (and waits for keeps_lock, then tries again).
 * Without membarrier the owner's store is sequentially consistent instead
 * (one xchg). */
#define KEEP 8

struct kept {
    void *ptr, *stream;
    size_t size;
    int device;
};
struct keep {
    _Atomic int busy; /* its owner is working on it */
    int n;
    bool registered; /* in the chain (its owner's view) */
    bool exited; /* its thread is exiting: frees keep nothing more */
    struct kept k[KEEP]; /* oldest first */
    struct keep *prev, *next; /* the chain, under keeps_lock */
};
static _Thread_local struct keep keep;
static pthread_key_t keep_key;
static pthread_once_t keep_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t keeps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct keep *keeps; /* every thread's list that keeps or kept */
static _Atomic int stealing; /* an empty_cache takes lists: owners wait */
/* membarrier(2) registered: owners store busy with no fence. Set once
 * (keep_once, or a forked child's handler) before any list is chained:
 * every owner of a chained list, and every empty_cache, sees one value. */
static _Atomic bool keep_asym;

/* This thread's list, its address computed once per entry point: the
 * barriers below would otherwise have the compiler ask for the
 * thread-local address again (a call, in a shared library) after each. */
static inline struct keep *my_keep(void)
{
    struct keep *kp = &keep;
    __asm__("" : "+r"(kp));
    return kp;
}

static long membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
}

/* The owner's side, around any use of its own list kp (this thread's). */
static void keep_enter_slow(struct keep *kp)
{
    do {
        atomic_store_explicit(&kp->busy, 0, memory_order_release);
        pthread_mutex_lock(&keeps_lock); /* until the empty_cache is done */
        pthread_mutex_unlock(&keeps_lock);
        atomic_store_explicit(&kp->busy, 1, memory_order_seq_cst);
    } while (atomic_load(&stealing));
}

static inline void keep_enter(struct keep *kp)
{
    if (likely(atomic_load_explicit(&keep_asym, memory_order_relaxed))) {
        atomic_store_explicit(&kp->busy, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst); /* the compiler's only */
    } else {
        atomic_store_explicit(&kp->busy, 1, memory_order_seq_cst);
    }
    if (unlikely(atomic_load(&stealing)))
        keep_enter_slow(kp);
}

static inline void keep_leave(struct keep *kp)
{
    atomic_store_explicit(&kp->busy, 0, memory_order_release);
}

/* Back to the pool behind its stream's work: the stream wrapped first,
 * where the pool does not know it yet. A free the pool cannot queue (no
 * memory for it) waits for the stream's work here instead. */
static void give_back(ump_pool_t *pool, const struct kept *k)
{
    void *s = pool_stream(k->stream);
    int rc = stream_ready(pool, k->device, s);
    if (!rc && !ump_free_async(pool, k->ptr, s))
        return;
    if (!rc && !(rc = ump_stream_synchronize(pool, s)) &&
        !(rc = ump_free(pool, k->ptr)))
        return;
    unordered(pool, k->ptr, k->stream, rc);
}

/* Takes the blocks of kp (this thread's) out into out (room for KEEP):
 * how many. */
static int keep_take_all(struct keep *kp, struct kept *out)
{
    keep_enter(kp);
    int n = kp->n;
    memcpy(out, kp->k, (size_t)n * sizeof(*out));
    kp->n = 0;
    keep_leave(kp);
    return n;
}

/* The blocks of kp (this thread's) back to the pool, stream-ordered. */
static void keep_flush(struct keep *kp)
{
    struct kept out[KEEP];
    int n = keep_take_all(kp, out);
    ump_pool_t *pool = n ? pool_of_process() : NULL;
    for (int i = 0; pool && i < n; i++)
        give_back(pool, &out[i]);
}

static void keep_exit(void *arg)
{
    struct keep *kp = arg;
    /* A free from a later destructor gives its block back at once: kept,
     * it would chain a list whose memory is about to go. */
    kp->exited = true;
    if (kp->registered) { /* out of the chain before its memory goes */
        pthread_mutex_lock(&keeps_lock);
        if (kp->prev)
            kp->prev->next = kp->next;
        else
            keeps = kp->next;
        if (kp->next)
            kp->next->prev = kp->prev;
        pthread_mutex_unlock(&keeps_lock);
        kp->registered = false;
    }
    keep_flush(kp); /* destructors run on the exiting thread */
}

static void keep_key_make(void)
{
    pthread_key_create(&keep_key, keep_exit);
    atomic_store(&keep_asym,
                 !membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED));
}

/* This thread's list into the chain; its exit takes it out. */
static void keep_register(void)
{
    pthread_once(&keep_once, keep_key_make);
    pthread_setspecific(keep_key, &keep);
    pthread_mutex_lock(&keeps_lock);
    keep.prev = NULL;
    keep.next = keeps;
    if (keeps)
        keeps->prev = &keep;
    keeps = &keep;
    pthread_mutex_unlock(&keeps_lock);
    keep.registered = true;
}

/* A block of size for stream on device kept in kp (this thread's list),
 * or NULL. */
static void *keep_take(struct keep *kp, size_t size, int device,
                       void *stream)
{
    void *p = NULL;
    keep_enter(kp);
    for (int i = kp->n - 1; i >= 0; i--) {
        struct kept *k = &kp->k[i];
        if (k->size == size && k->stream == stream && k->device == device) {
            p = k->ptr;
            memmove(k, k + 1, (size_t)(kp->n - 1 - i) * sizeof(*k));
            kp->n--;
            break;
        }
    }
    keep_leave(kp);
    return p;
}

/* Keeps a freed block in kp (this thread's list); the oldest kept one goes
 * back to the pool when there is no room. */
static void keep_put(struct keep *kp, ump_pool_t *pool, void *ptr,
                     size_t size, int device, void *stream)
{
    if (unlikely(!kp->registered)) {
        if (kp->exited) {
            give_back(pool, &(struct kept){ptr, stream, size, device});
            return;
        }
        keep_register();
    }
    struct kept out = {0};
    keep_enter(kp);
    if (kp->n == KEEP) {
        out = kp->k[0];
        memmove(&kp->k[0], &kp->k[1], (KEEP - 1) * sizeof(kp->k[0]));
        kp->n--;
    }
    kp->k[kp->n++] = (struct kept){ptr, stream, size, device};
    keep_leave(kp);
    if (out.ptr)
        give_back(pool, &out);
}

/* Is ptr a block kept in kp (this thread's list: freed already)? */
static bool kept_already(struct keep *kp, const void *ptr)
{
    bool found = false;
    keep_enter(kp);
    for (int i = 0; i < kp->n && !found; i++)
        found = kp->k[i].ptr == ptr;
    keep_leave(kp);
    return found;
}

/* Every thread's kept blocks, taken out of their lists into a new array:
 * *n_p of them. NULL when there is no memory for it. */
static struct kept *keep_take_every(size_t *n_p)
{
    *n_p = 0;
    pthread_mutex_lock(&keeps_lock);
    size_t cap = KEEP, n = 0; /* this thread's, in the chain or not */
    bool others = false;
    for (struct keep *kp = keeps; kp; kp = kp->next) {
        cap += KEEP;
        others |= kp != &keep;
    }
    struct kept *all = malloc(cap * sizeof(*all));
    if (!all) {
        pthread_mutex_unlock(&keeps_lock);
        return NULL;
    }
    /* This thread's own list first: only this thread ever works on it. */
    memcpy(all, keep.k, (size_t)keep.n * sizeof(*all));
    n = (size_t)keep.n;
    keep.n = 0;
    if (others) {
        atomic_store(&stealing, 1);
        /* Registered, so it cannot fail; if it did, an owner's plain store
         * could be missed: leave the others' lists alone. */
        if (atomic_load(&keep_asym) &&
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED))
            others = false;
    }
    for (struct keep *kp = keeps; others && kp; kp = kp->next) {
        if (kp == &keep)
            continue;
        while (atomic_load(&kp->busy))
            sched_yield(); /* its owner finishes what it does */
        memcpy(all + n, kp->k, (size_t)kp->n * sizeof(*all));
        n += (size_t)kp->n;
        kp->n = 0;
    }
    atomic_store_explicit(&stealing, 0, memory_order_release);
    pthread_mutex_unlock(&keeps_lock);
    *n_p = n;
    return all;
}

/* --- blocks handed out ---------------------------------------------------- */

/* The blocks umpool_torch_alloc handed out and no free took back yet: a
 * lock-free open-addressing set of addresses, so that a free checks its
 * pointer with two atomic operations instead of the pool's lock (a
 * lookup). Removing is a compare-and-swap: of two racing frees of one
 * pointer, one wins. A block the set had no room for (OWN_PROBE slots
 * taken) is not in it, and its free asks the pool (ump_ptr_lookup), as
 * every pointer not found does: the set only makes the common case cheap,
 * never decides alone that a pointer is bad. Slots go from 0 (never used)
 * to an address, to TOMB (freed), and back to an address; never to 0
 * again, so a search stops at the first 0. */
#define OWN_BITS 20 /* a million slots (8 MiB), made on first use */
#define OWN_PROBE 16
#define TOMB ((uintptr_t)1)
static _Atomic uintptr_t *_Atomic own;

/* The set, made by the first thread that needs it. */
static _Atomic uintptr_t *own_make(void)
{
    _Atomic uintptr_t *made = calloc((size_t)1 << OWN_BITS, sizeof(*made));
    _Atomic uintptr_t *none = NULL;
    if (made && !atomic_compare_exchange_strong(&own, &none, made)) {
        free(made); /* another thread's came first */
        made = none;
    }
    return made;
}

static size_t own_slot(uintptr_t p, int i)
{
    uint64_t h = (uint64_t)(p >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)((h >> (64 - OWN_BITS)) + (unsigned)i) &
           (((size_t)1 << OWN_BITS) - 1);
}

static void own_add(void *ptr)
{
    _Atomic uintptr_t *set = atomic_load_explicit(&own, memory_order_acquire);
    if (unlikely(!set) && !(set = own_make()))
        return; /* no memory for it: every free asks the pool */
    uintptr_t p = (uintptr_t)ptr;
    for (int i = 0; i < OWN_PROBE; i++) {
        _Atomic uintptr_t *slot = &set[own_slot(p, i)];
        uintptr_t v = atomic_load_explicit(slot, memory_order_relaxed);
        if ((v == 0 || v == TOMB) &&
            atomic_compare_exchange_strong_explicit(
                slot, &v, p, memory_order_release, memory_order_relaxed))
            return;
    }
}

/* Takes ptr out of the set: true when it was there (handed out, not
 * freed since: a live block). */
static bool own_take(void *ptr)
{
    _Atomic uintptr_t *set = atomic_load_explicit(&own, memory_order_acquire);
    uintptr_t p = (uintptr_t)ptr;
    for (int i = 0; set && i < OWN_PROBE; i++) {
        _Atomic uintptr_t *slot = &set[own_slot(p, i)];
        uintptr_t v = atomic_load_explicit(slot, memory_order_acquire);
        if (v == p)
            return atomic_compare_exchange_strong_explicit(
                slot, &v, TOMB, memory_order_acq_rel, memory_order_relaxed);
        if (v == 0)
            return false;
    }
    return false;
}

/* --- the entry points ----------------------------------------------------- */

/* memory_fraction's limit per device: the pool's live bytes there may not
 * grow past it through these entry points. Checked with the pool's
 * statistics under one lock, so that racing threads cannot overshoot it
 * together; a slow path, taken only while a fraction below 1 is set. */
static _Atomic bool limited[UMP_MAX_DEVICES];
static size_t limit[UMP_MAX_DEVICES];
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

/* A new block of size on device within its limit, or NULL. */
static void *alloc_limited(ump_pool_t *pool, size_t size, int device)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    void *p = NULL;
    pthread_mutex_lock(&limit_lock);
    for (int round = 0; round < 2; round++) {
        ump_stats_t st;
        if (ump_stats(pool, device, &st) || st.live_bytes > limit[device] ||
            size > limit[device] - st.live_bytes) {
            keep_flush(my_keep()); /* this thread's count as live */
            continue;
        }
        if (ump_alloc(pool, size, &h, &p))
            p = NULL;
        break;
    }
    pthread_mutex_unlock(&limit_lock);
    return p;
}

EXPORT void *umpool_torch_alloc(size_t size, int device, void *stream)
{
    ump_pool_t *pool = pool_of_process();
    if (!pool || device < 0 || device >= UMP_MAX_DEVICES)
        return NULL;
    free_ready(pool);
    /* The pool hands out only memory no stream still uses; a block kept
     * for this stream is free for it (same-stream order). */
    void *p = keep_take(my_keep(), size, device, stream);
    /* A zero-byte tensor still gets a distinct pointer, as from cudaMalloc. */
    size_t want = size ? size : 1;
    if (!p) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = device;
        if (unlikely(atomic_load_explicit(&limited[device],
                                          memory_order_relaxed)))
            p = alloc_limited(pool, want, device);
        else if (ump_alloc(pool, want, &h, &p))
            p = NULL;
        if (!p)
            return NULL; /* PyTorch raises its out-of-memory error */
    }
    own_add(p);
    return p;
}

EXPORT void umpool_torch_free(void *ptr, size_t size, int device,
                              void *stream)
{
    ump_pool_t *pool = pool_of_process();
    if (!pool || !ptr)
        return;
    /* A pointer that is no live block's start, or one freed already, is
     * refused here (logged), before it could be handed out again. */
    ump_ptr_info_t in;
    struct keep *kp = my_keep();
    bool live = own_take(ptr) ||
                (!kept_already(kp, ptr) &&
                 !ump_ptr_lookup(pool, ptr, &in) &&
                 in.base == ptr && in.kind == UMP_KIND_DEVICE);
    if (!live || device < 0 || device >= UMP_MAX_DEVICES) {
        fprintf(stderr, "umpool: umpool_torch_free: %p is not a live "
                "allocation of the pool (freed twice?)\n", ptr);
        return;
    }
    struct rec *r = rec_take(ptr);
    if (r)
        free_after(pool, ptr, device, stream, r);
    else
        keep_put(kp, pool, ptr, size, device, stream);
    rec_free(r);
    free_ready(pool);
}

/* Optional hooks: CUDAPluggableAllocator's set_init_fn and kin. The Python
 * class takes alloc and free only, but the object its allocator() returns
 * (torch._C._CUDAPluggableAllocator, torch/csrc/cuda/Module.cpp) has the
 * setters too; umpool.torch sets the reset function. */

EXPORT void umpool_torch_init(int device_count)
{
    ump_pool_t *pool = pool_of_process();
    int n = pool ? ump_device_count(pool) : -1;
    if (pool && n != device_count)
        fprintf(stderr, "umpool: PyTorch sees %d devices, the pool %d\n",
                device_count, n);
}

/* torch.cuda.empty_cache(): PyTorch calls it through set_reset_fn (its
 * CUDAPluggableAllocator::emptyCache calls reset_fn_, and nothing else;
 * umpool.torch sets it). Like PyTorch's own empty_cache, which first waits
 * for the events of blocks freed while other streams still used them
 * (DeviceCachingAllocator::release_cached_blocks, then
 * synchronize_and_free_events), it waits: each kept block's stream is
 * synchronized once (wrapped first where the pool does not know it yet:
 * PyTorch's side streams), and the block goes straight back to the pool,
 * so that ump_trim can give its memory to the driver. A stream the pool
 * cannot synchronize (a capture under way) lets its blocks go back behind
 * its work instead; one it cannot order on at all keeps them out
 * (unordered). Blocks waiting for the streams record_stream named come
 * back once those are done (not waited for). */
EXPORT void umpool_torch_reset(void)
{
    ump_pool_t *pool = pool_of_process();
    if (!pool)
        return;
    size_t n;
    struct kept *all = keep_take_every(&n);
    if (!all)
        keep_flush(my_keep()); /* no memory: this thread's list only */
    for (size_t i = 0; i < n; i++) {
        if (!all[i].ptr)
            continue;
        void *s = all[i].stream;
        int rc = stream_ready(pool, all[i].device, s);
        bool done = !rc && !ump_stream_synchronize(pool, pool_stream(s));
        for (size_t j = i; j < n; j++)
            if (all[j].ptr && all[j].stream == s) {
                if (rc)
                    unordered(pool, all[j].ptr, s, rc);
                else if (!done || ump_free(pool, all[j].ptr))
                    give_back(pool, &all[j]);
                all[j].ptr = NULL;
            }
    }
    free(all);
    free_ready(pool);
    ump_trim(pool);
}

EXPORT void umpool_torch_memory_fraction(double fraction, int device)
{
    ump_pool_t *pool = pool_of_process();
    ump_device_props_t props;
    /* PyTorch's range: 0 (nothing more) to 1 (no limit); NaN is outside. */
    if (!pool || device < 0 || device >= UMP_MAX_DEVICES ||
        !(fraction >= 0 && fraction <= 1) ||
        ump_device_props(pool, device, &props)) {
        fprintf(stderr, "umpool: umpool_torch_memory_fraction: fraction %g "
                "or device %d out of range\n", fraction, device);
        return;
    }
    pthread_mutex_lock(&limit_lock);
    limit[device] = (size_t)(fraction * (double)props.capacity);
    atomic_store(&limited[device], fraction < 1);
    pthread_mutex_unlock(&limit_lock);
}

EXPORT void *umpool_torch_base_alloc(void *ptr, size_t *size)
{
    ump_pool_t *pool = pool_of_process();
    ump_ptr_info_t in;
    if (!pool || ump_ptr_lookup(pool, ptr, &in)) {
        if (size)
            *size = 0;
        return NULL;
    }
    if (size)
        *size = in.size;
    return in.base;
}

/* In a child after fork(): the parent's pool is not this process's any
 * more (its memory is the parent's), so nothing kept, recorded, waiting or
 * noted of it may be used; the next call makes the child's pool. What the
 * parent's structures held is left, not freed: another thread of the
 * parent may have been changing them at the fork. */
static void forget_all(void)
{
    atomic_store(&cached, NULL);
    atomic_store(&own, NULL);
    atomic_store(&ready, NULL);
    keep.n = 0;
    atomic_store(&keep.busy, 0);
    keep.registered = false; /* the chain starts again with this thread */
    keep.exited = false;
    keeps = NULL;
    atomic_store(&stealing, 0);
    /* The child's process is another: registered anew (or not at all). */
    atomic_store(&keep_asym,
                 !membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED));
    pthread_mutex_init(&keeps_lock, NULL);
    memset(rec_table, 0, sizeof(rec_table));
    atomic_store(&rec_count, 0);
    pthread_mutex_init(&rec_lock, NULL);
    /* The parent's pool wrapped those streams, not the child's. */
    for (size_t i = 0; i < sizeof(seen) / sizeof(seen[0]); i++)
        atomic_store_explicit(&seen[i], 0, memory_order_relaxed);
    seen_n = 0;
    pthread_mutex_init(&seen_lock, NULL);
    pthread_mutex_init(&limit_lock, NULL);
}
