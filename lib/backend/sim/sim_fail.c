/*
 * Device failures on sim: what a lost GPU or an uncorrectable ECC error
 * does to a process, emulated so that the pool's handling of it is tested
 * without a GPU (config sim_fail_device / sim_fail_after, or
 * sim_fail_device() from a test).
 *
 * A device fails at its Nth operation: chunk create, map of one of its
 * chunks, set access naming it, a copy or memset touching its memory,
 * work queued on or synchronised with one of its streams. From that one on
 * they return -EIO, as the driver's sticky errors do (cuda maps that class
 * to -EIO too). Unmap and release still succeed, so the pool can give the
 * memory back. Its chunks' memory is overwritten with a poison pattern at
 * the moment of failure: the data is gone, and a byte that the pool
 * wrongly reports as surviving reads as poison in the tests. The piece of
 * a copy a stream is moving meanwhile (up to a chunk: a copy runs chunk by
 * chunk) ends first, and the poison waits for it (sim_bytes_hold), so that
 * the two never write the same bytes at once; later pieces of that copy
 * move what is there then, poison or not, as a DMA in flight when a GPU
 * falls off the bus moves what it finds.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "backend/sim/sim_vmm.h"
#include "util/log.h"

#define POISON 0xdb

/* Device d fails now. Lock held. */
static void fail_now(struct sim_ctx *c, int d)
{
    c->failed |= 1u << d;
    c->fail_dev = -1;
    ump_log_error("sim: device %d failed (injected): its memory is lost and "
                  "its operations are -EIO from now on", d);
    pthread_rwlock_wrlock(&c->bytes);
    for (size_t i = 0; i < c->slots_touched; i++) {
        struct sim_chunk *ch = &c->slots[i];
        if (ch->device == d && !ch->host && !ch->released && !ch->imported)
            memset(c->dev[d].win + ch->off, POISON, ch->size);
    }
    pthread_rwlock_unlock(&c->bytes);
    if (c->watch)
        atomic_fetch_or(c->watch, 1u << d);
}

void sim_bytes_hold(void *ctx)
{
    pthread_rwlock_rdlock(&((struct sim_ctx *)ctx)->bytes);
}

void sim_bytes_drop(void *ctx)
{
    pthread_rwlock_unlock(&((struct sim_ctx *)ctx)->bytes);
}

int sim_dev_op(struct sim_ctx *c, int device)
{
    if (device < 0 || device >= c->ndev)
        return 0;
    if (c->failed & (1u << device))
        return -EIO;
    if (device == c->fail_dev && --c->fail_left <= 0) {
        fail_now(c, device);
        return -EIO;
    }
    return 0;
}

int sim_device_op(void *ctx, int device)
{
    struct sim_ctx *c = ctx;
    pthread_mutex_lock(&c->lock);
    int err = sim_dev_op(c, device);
    pthread_mutex_unlock(&c->lock);
    return err;
}

int sim_range_op(void *ctx, const void *p, size_t size)
{
    struct sim_ctx *c = ctx;
    uintptr_t a = (uintptr_t)p, e = a + size;
    uint32_t touched = 0;
    int err = 0;
    if (!size)
        return 0;
    pthread_mutex_lock(&c->lock);
    /* No failure scheduled or past: nothing to count, no walk (every copy
     * and memset comes here). */
    if (c->fail_dev < 0 && !c->failed) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    for (struct sim_resv *r = c->resv; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->va, re = b + r->size;
        if (e <= b || a >= re)
            continue;
        size_t lo = ((a > b ? a : b) - b) / SIM_GRAN;
        size_t hi = ((e < re ? e : re) - 1 - b) / SIM_GRAN;
        for (size_t i = lo; i <= hi; i++) {
            const struct sim_chunk *ch = r->g[i].chunk;
            if (ch && !ch->host)
                touched |= 1u << ch->device;
        }
    }
    for (int d = 0; d < c->ndev; d++)
        if ((touched & (1u << d)) && !err)
            err = sim_dev_op(c, d);
    pthread_mutex_unlock(&c->lock);
    return err;
}

int sim_fail_device(void *ctx, int device, int nth)
{
    struct sim_ctx *c = ctx;
    if (!c || nth < 0) {
        ump_log_error("sim_fail_device: %s", c ? "nth < 0" : "no context");
        return -EINVAL;
    }
    pthread_mutex_lock(&c->lock);
    int err = 0;
    if (device < 0 || device >= c->ndev) {
        ump_log_error("sim_fail_device: no device %d (have %d)", device,
                      c->ndev);
        err = -EINVAL;
    } else if (nth == 0) {
        if (!(c->failed & (1u << device)))
            fail_now(c, device);
    } else {
        c->fail_dev = device;
        c->fail_left = nth;
    }
    pthread_mutex_unlock(&c->lock);
    return err;
}

void sim_watch_failures(void *ctx, _Atomic uint32_t *mask)
{
    struct sim_ctx *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->watch = mask;
    if (c->failed)
        atomic_fetch_or(mask, c->failed);
    pthread_mutex_unlock(&c->lock);
}
