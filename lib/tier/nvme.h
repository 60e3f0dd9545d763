/*
 * NVMe store: fixed-size slots in hidden files (O_TMPFILE, or unlinked at
 * once; mode 0600) under one or more spill directories, read and written in
 * batches through io_uring with O_DIRECT and registered buffers, or through
 * a pread/pwrite thread pool where io_uring or O_DIRECT is not available.
 * Every slot written carries a crc32c that is checked on read-back.
 *
 * Slot s lives in directory s % ndirs at offset (s / ndirs) * slot_size, so
 * consecutive allocations spread over the directories. A store is not
 * thread-safe: the caller serialises every call on one store.
 */
#ifndef UMP_NVME_H
#define UMP_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nvme_store;

struct nvme_config {
    const char *const *dirs;  /* spill directories, one file and ring each */
    int ndirs;
    size_t slot_size;         /* bytes per slot, a multiple of 1 MiB */
    size_t limit;             /* bytes in all slots, 0 = no limit */
    unsigned queue_depth;     /* requests in flight per ring; 0 = 32 */
    bool force_threads;       /* use the pread/pwrite engine (tests) */
    int numa_node;            /* bounce buffers' NUMA node, -1: any */
};

/* One slot-sized transfer: buf holds slot_size bytes from nvme_buffer_alloc;
 * res is set to 0 or a negative errno. */
struct nvme_io {
    uint64_t slot;
    void *buf;
    int res;
};

/* Opens the store; on success *st_p is closed with nvme_close. Logs no
 * error (the caller says what the store was for, in one line). */
int nvme_open(const struct nvme_config *cfg, struct nvme_store **st_p);
/* Closes files and rings: nothing is left on disk. The caller has freed its
 * buffers first (arena ones become invalid here). NULL is allowed. */
void nvme_close(struct nvme_store *st);

/* Reserves a slot (-ENOSPC at the limit or when the disk is full). */
int nvme_slot_alloc(struct nvme_store *st, uint64_t *slot_p);
/* Releases a slot; its data is forgotten. */
void nvme_slot_free(struct nvme_store *st, uint64_t slot);

/* A buffer aligned for O_DIRECT, registered with the rings when it is one of
 * the queue_depth slot-sized arena buffers; NULL when out of memory. */
void *nvme_buffer_alloc(struct nvme_store *st, size_t size);
/* Frees a buffer from nvme_buffer_alloc; NULL is allowed. */
void nvme_buffer_free(struct nvme_store *st, void *p);

/* Writes slot_size bytes of io[i].buf to each io[i].slot (up to queue_depth
 * in flight per ring), records each slot's crc32c; returns 0 or the first
 * error, every io[i].res set. */
int nvme_write(struct nvme_store *st, struct nvme_io *io, size_t n);
/* Reads each io[i].slot into io[i].buf and checks its crc32c: -EIO on a
 * mismatch, -ENODATA for a slot holding no successfully written data. */
int nvme_read(struct nvme_store *st, struct nvme_io *io, size_t n);

/* The arena of bounce buffers, or NULL (*len_p 0) when there is none: for
 * the caller to page-lock for its devices' copies. */
void *nvme_arena(const struct nvme_store *st, size_t *len_p);

/* "io_uring" or "threads". */
const char *nvme_engine(const struct nvme_store *st);

/* Test hook: makes the nth next I/O request (1 = the next one, counting
 * reads and writes) fail or misbehave. what: "eio" or "enospc" (fails with
 * that error), "short_write" (the transfer first completes only partly),
 * "corrupt" (a byte flipped on disk after a write, in the buffer after a
 * read). nth 0 clears. -EINVAL for an unknown kind or negative nth. */
int nvme_inject_fault(struct nvme_store *st, const char *what, int nth);

#endif
