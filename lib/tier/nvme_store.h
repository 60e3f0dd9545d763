/*
 * The NVMe store's insides, shared by its two files: nvme.c (opening
 * stores, slots, buffers) and nvme_io.c (the engines that read and write
 * batches, and the fault hook). Nothing outside lib/tier/nvme*.c includes
 * it; the store's contract is nvme.h.
 */
#ifndef UMP_TIER_NVME_STORE_H
#define UMP_TIER_NVME_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "util/crc32c.h"
#include "tier/nvme.h"

#define NVME_MIB ((size_t)1 << 20)
#define NVME_ALIGN_MIN 4096
#define NVME_QD_DEFAULT 32
#define NVME_QD_MAX 4096
/* File space grows this many slots at a time, so that fallocate is rare. */
#define NVME_GROW_SLOTS 16
/* A file grows by its own size (a spill of many slots costs a few calls,
 * not one every NVME_GROW_SLOTS), at most this much at once. */
#define NVME_GROW_MAX_BYTES ((uint64_t)1 << 30)
/* The registered arena pins memory: keep it bounded. */
#define NVME_ARENA_MAX ((size_t)256 << 20)
/* One submission moves at most this much; the rest is resumed. */
#define NVME_MAX_XFER ((size_t)1 << 30)
#define NVME_RETRIES 1000
#define NVME_THREADS 4

enum nvme_fault { NVME_F_NONE, NVME_F_EIO, NVME_F_ENOSPC, NVME_F_SHORT,
                  NVME_F_CORRUPT };

struct nvme_dir {
    char *path;
    int fd;
    bool direct;
    uint64_t file_slots;      /* slots covered by allocated file space */
#ifdef HAVE_LIBURING
    struct io_uring ring;
    bool ring_ok;
    unsigned inflight;
    unsigned queued;          /* prepared, not yet submitted */
#endif
};

struct nvme_slot {
    bool used;
    bool valid;               /* holds data written successfully */
    uint32_t crc;
};

struct nvme_store {
    struct nvme_dir *dirs;
    int ndirs;
    uint64_t base;            /* byte offset of slot space in each file */
    bool rdonly;              /* a file store opened read-only */
    size_t slot_size;
    size_t align;
    unsigned qd;
    bool limited;
    uint64_t limit_slots;
    uint64_t nused;
    struct nvme_slot *slots;
    uint64_t cap;
    int rr;
    bool uring;
    bool fixed;               /* arena registered with every ring */
    unsigned char *arena;
    size_t arena_len;
    unsigned arena_n;
    bool *arena_busy;
    enum nvme_fault fault;
    int fault_nth;
};

struct nvme_req {
    struct nvme_io *io;
    struct nvme_dir *dir;
    off_t off;
    size_t done;
    int retries;
    enum nvme_fault fault;
    bool write;
    bool summed;   /* write: crc computed */
    uint32_t crc;  /* write: of the buffer, recorded once it is on disk */
};

/* A request's crc32c is computed while it is written and checked once it
 * has been read, each overlapping the I/O of the others instead of adding
 * a pass over the whole batch: the io_uring engine sums what it has just
 * submitted, and checks what it has reaped after submitting the next
 * requests (the data in flight does not change: the caller owns it). */
static inline void nvme_req_sum(const struct nvme_store *st, struct nvme_req *rq)
{
    if (rq->write && !rq->summed) {
        rq->crc = crc32c(0, rq->io->buf, st->slot_size);
        rq->summed = true;
    }
}

static inline size_t nvme_max(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Byte offset of the idx-th slot of a file (slot s is the (s / ndirs)-th of
 * directory s % ndirs): the one place that turns slots into file space. */
static inline off_t nvme_file_off(const struct nvme_store *st, uint64_t idx)
{
    return (off_t)(st->base + idx * st->slot_size);
}

static inline struct nvme_dir *nvme_slot_dir(const struct nvme_store *st,
                                      uint64_t slot, off_t *off_p)
{
    *off_p = nvme_file_off(st, slot / (uint64_t)st->ndirs);
    return &st->dirs[slot % (uint64_t)st->ndirs];
}

/* Is p one of the arena's buffers (its index in *idx_p)? */
static inline bool nvme_in_arena(const struct nvme_store *st, const void *p,
                          unsigned *idx_p)
{
    const unsigned char *b = p;

    if (!st->arena || b < st->arena || b >= st->arena + st->arena_len)
        return false;
    *idx_p = (unsigned)((size_t)(b - st->arena) / st->slot_size);
    return true;
}

#endif
