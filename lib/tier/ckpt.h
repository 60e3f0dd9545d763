/*
 * The tier layer's part of checkpoints (front/checkpoint.c writes them,
 * front/restore.c reads them): the data of granules to and from a
 * checkpoint file's store (tier/nvme.h, nvme_open_file), wherever the data
 * is: a device's chunks (through the store's bounce buffers, on the
 * device's internal stream), pinned host memory at the pool's addresses
 * (the I/O buffer itself), or a tracked run's NVMe slots (file to file,
 * never through a device); and a tracked run rebuilt with each segment on
 * the tier its data was saved from.
 *
 * Every call runs with pool->lock held on a quiesced pool: no move runs
 * (offload_quiesce, offload.h), so no one else holds the NVMe store's io_lock, which
 * these calls take under the pool lock.
 */
#ifndef UMP_TIER_CKPT_H
#define UMP_TIER_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/pool.h"

struct nvme_store;

/* One segment of a tracked run as a checkpoint records it. */
struct ckpt_seg {
    size_t n;     /* granules */
    int home;     /* the device its policy placed it on */
    int tier;     /* UMP_TIER_*: where its data is */
    int dev;      /* tier DEVICE: the device holding it */
    bool nodata;  /* discarded (DONTNEED, moved down): no bytes to keep */
};


/* The store of a checkpoint file at path (nvme_open_file): one granule
 * per slot, the NVMe tier's queue depth and engine, its bounce buffers
 * page-locked for the devices' copies. create: a new file (slots handed
 * out in order), else nslots slots of an existing one from byte base on.
 * -EINVAL when the granule is not a multiple of 1 MiB (the store's
 * slots); nothing logged. */
int ckpt_store_open(ump_pool_t *pool, const char *path, bool create,
                    uint64_t base, uint64_t nslots, struct nvme_store **st_p);
/* Closes it (NULL is fine); the file stays. */
void ckpt_store_close(ump_pool_t *pool, struct nvme_store *st);
/* The segments of tracked run r, in address order, into *segs_p
 * (malloc'ed: the caller frees) and their number; -ENOMEM. */
int ckpt_run_segs(const struct run *r, struct ckpt_seg **segs_p,
                  size_t *n_p);
/* Writes the data of granules [g, g+n) to slots[0..n) of ck (write true),
 * or reads it back from them. A granule of a tracked run's NVMe segment
 * with no data (discarded) is skipped; the caller gives it no slot. */
int ckpt_data(ump_pool_t *pool, struct nvme_store *ck, size_t g, size_t n,
              const uint64_t *slots, bool write);
/* A tracked run at granules [start, start + the segments' n): the memory
 * of each segment made on its tier (a device's chunks, host-tier pieces,
 * NVMe slots: where the pool has no NVMe tier, the host tier, then the
 * home device), mapped where it is memory, counted, hot. r comes from
 * runs_get; it is tagged and not live. No data is in it yet (ckpt_data).
 * -EADDRINUSE when the addresses are taken, -ENOSPC when a segment fits
 * nowhere; then nothing is held. */
int ckpt_restore_run(ump_pool_t *pool, struct run *r, size_t start,
                     const struct ckpt_seg *segs, size_t nseg, unsigned flags);

#endif
