/*
 * NVMe transfers: the pool's use of the store in nvme.c (its set-up from the
 * configuration, slots, and moving granules between the pool's memory and
 * slots, directly or through bounce buffers).
 *
 * Locks: off->io_lock serialises the store and may be held for a whole
 * transfer, so it is never waited for under pool->lock; slots freed with
 * pool->lock held wait in a list (off->dead_lock, a leaf) for the store's
 * next user. Each function says which lock it wants.
 */
#ifndef UMP_TIER_XFER_H
#define UMP_TIER_XFER_H

#include "tier/tier.h"

/* Opens the store of nvme_dir into o (nothing when it is not set); one log
 * line on error, and then o has no store. Pool lock not needed. */
int xfer_open(ump_pool_t *pool, struct offload *o);
/* Frees waiting slots, unregisters the bounce buffers and closes the store
 * (nothing is left on disk). No other user of the store is left. */
void xfer_close(ump_pool_t *pool, struct offload *o);
/* Frees the lists only (after fork, or once the store is closed). */
void xfer_forget(struct offload *o);

/* n slots, or -ENOSPC at the limit or when the disk is full (logged at
 * debug: the caller says what it was for). Neither lock held. */
int xfer_slots_alloc(ump_pool_t *pool, size_t n, uint64_t **slots_p);
/* Frees slots (and the array) now; NULL is fine. Neither lock held. */
void xfer_slots_free(ump_pool_t *pool, uint64_t *slots, size_t n);
/* Frees slots with the pool lock held: later, by the store's next user. */
void xfer_slots_free_later(ump_pool_t *pool, uint64_t *slots, size_t n);

/* Writes (or reads) the n granules at va to (from) slots. cpu: where the
 * CPU reaches each granule (cpu[i] for granule i), used as the I/O buffers;
 * NULL, or a driver refusing direct I/O there: the data goes through bounce
 * buffers copied on stream from or to va. Pool lock not held. */
int xfer_run(ump_pool_t *pool, char *va, void *const *cpu, uint64_t *slots,
             size_t n, bool write, void *stream);

/* xfer_run's data path on any store st the caller has to itself (a
 * checkpoint's file: tier/ckpt.c), with up to qd bounce buffers. */
int xfer_store_run(ump_pool_t *pool, struct nvme_store *st, unsigned qd,
                   char *va, void *const *cpu, const uint64_t *slots,
                   size_t n, bool write, void *stream);

/* Copies n granules file to file between the tier's slots and a
 * checkpoint store's ck_slots (to_ck: into the checkpoint), through ck's
 * bounce buffers, never through a device. Takes io_lock: pool lock held
 * only while the pool is quiesced (no move holds io_lock). */
int xfer_copy_slots(ump_pool_t *pool, struct nvme_store *ck,
                    const uint64_t *ck_slots, const uint64_t *slots,
                    size_t n, bool to_ck);

/* nvme_inject_fault on the store (-ENODEV without one). Pool lock not
 * held. */
int xfer_inject_fault(ump_pool_t *pool, const char *what, int nth);

#endif
