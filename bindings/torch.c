/*
 * PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)
 * over the process's pool (ump_process_pool): the entry points with the C
 * signatures torch/csrc/cuda/CUDAPluggableAllocator.cpp calls.
 *
 * Frees are stream-ordered: the memory goes back to the pool once the
 * work queued on the freeing stream so far is done (ump_free_async), and,
 * for a block that record_stream named other streams for, once the work
 * of every one of them is done too: a host function on each stream counts
 * down, and the last one hands the block to a list that the next call of
 * these entry points returns to the pool (a host function may not call
 * the driver, which a free may do).
 *
 * Above the public API only, like the tools.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "umpool.h"
#include "umpool_bindings.h"

#define EXPORT __attribute__((visibility("default")))

static ump_pool_t *pool_of_process(void)
{
    ump_pool_t *p;
    return ump_process_pool(NULL, &p) ? NULL : p;
}

/* --- record_stream ------------------------------------------------------ */

/* The streams record_stream named for a live block, by the block's
 * address: a small hash table under one lock (record_stream is rare: a
 * tensor used on a stream other than its own). */
#define REC_BUCKETS 256
#define REC_MAX 8 /* streams per block; more: the free synchronizes them */

struct rec {
    void *ptr;
    int n;
    ump_stream_t streams[REC_MAX];
    bool overflowed;
    struct rec *next;
};
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
            known |= r->streams[i] == stream;
        if (!known && r->n < REC_MAX)
            r->streams[r->n++] = stream;
        else if (!known)
            r->overflowed = true;
    }
    pthread_mutex_unlock(&rec_lock);
}

/* --- frees waiting for several streams ----------------------------------- */

struct waiting {
    void *ptr;
    _Atomic int left; /* streams not there yet */
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
        ump_free(pool, w->ptr);
        free(w);
        w = next;
    }
}

/* A free that waits for the freeing stream and the recorded ones. */
static void free_after(ump_pool_t *pool, void *ptr, ump_stream_t stream,
                       struct rec *r)
{
    struct waiting *w = malloc(sizeof(*w));
    if (!w || r->overflowed) { /* the safe way: wait for them now */
        for (int i = 0; i < r->n; i++)
            ump_stream_synchronize(pool, r->streams[i]);
        ump_free_async(pool, ptr, stream);
        free(w);
        return;
    }
    w->ptr = ptr;
    atomic_init(&w->left, r->n + 2); /* the streams, and this call */
    ump_stream_t all[REC_MAX + 1];
    all[0] = stream;
    for (int i = 0; i < r->n; i++)
        all[i + 1] = r->streams[i];
    for (int i = 0; i <= r->n; i++)
        /* A stream that takes no host function (destroyed meanwhile?):
         * waited for here. */
        if (ump_launch_host_func(pool, all[i], stream_reached, w)) {
            ump_stream_synchronize(pool, all[i]);
            stream_reached(w);
        }
    stream_reached(w);
}

/* --- the entry points ----------------------------------------------------- */

/* memory_fraction's limit per device (0: none), and what these entry
 * points hold there now, in requested bytes. */
static _Atomic size_t limit[UMP_MAX_DEVICES];
static _Atomic size_t held[UMP_MAX_DEVICES];

EXPORT void *umpool_torch_alloc(size_t size, int device, void *stream)
{
    (void)stream; /* the pool hands out only memory no stream still uses */
    ump_pool_t *pool = pool_of_process();
    if (!pool || device < 0 || device >= UMP_MAX_DEVICES)
        return NULL;
    free_ready(pool);
    size_t lim = atomic_load_explicit(&limit[device], memory_order_relaxed);
    if (lim && atomic_load_explicit(&held[device], memory_order_relaxed) +
                       size > lim)
        return NULL; /* PyTorch raises its out-of-memory error */
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    void *p = NULL;
    /* A zero-byte tensor still gets a distinct pointer, as from cudaMalloc. */
    if (ump_alloc(pool, size ? size : 1, &h, &p))
        return NULL;
    if (lim)
        atomic_fetch_add_explicit(&held[device], size, memory_order_relaxed);
    return p;
}

EXPORT void umpool_torch_free(void *ptr, size_t size, int device,
                              void *stream)
{
    ump_pool_t *pool = pool_of_process();
    if (!pool || !ptr)
        return;
    if (device >= 0 && device < UMP_MAX_DEVICES &&
        atomic_load_explicit(&limit[device], memory_order_relaxed))
        atomic_fetch_sub_explicit(&held[device], size, memory_order_relaxed);
    struct rec *r = rec_take(ptr);
    if (r)
        free_after(pool, ptr, stream, r);
    else
        ump_free_async(pool, ptr, stream); /* a bad pointer: logged */
    free(r);
    free_ready(pool);
}

/* Optional hooks (CUDAPluggableAllocator's set_init_fn and kin, for C++
 * users; the Python class takes alloc and free only). */

EXPORT void umpool_torch_init(int device_count)
{
    ump_pool_t *pool = pool_of_process();
    int n = pool ? ump_device_count(pool) : -1;
    if (pool && n != device_count)
        fprintf(stderr, "umpool: PyTorch sees %d devices, the pool %d\n",
                device_count, n);
}

EXPORT void umpool_torch_reset(void)
{
    ump_pool_t *pool = pool_of_process();
    if (pool) {
        free_ready(pool);
        ump_trim(pool);
    }
}

EXPORT void umpool_torch_memory_fraction(double fraction, int device)
{
    ump_pool_t *pool = pool_of_process();
    ump_device_props_t props;
    if (!pool || device < 0 || device >= UMP_MAX_DEVICES || fraction <= 0 ||
        fraction > 1 || ump_device_props(pool, device, &props))
        return;
    atomic_store(&limit[device], fraction >= 1
                                     ? 0
                                     : (size_t)(fraction *
                                                (double)props.capacity));
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
