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
 *
 * nvme_open_file makes a store of the same kind on one named file instead
 * (a checkpoint's data), its slots from a base offset on.
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
/* A store on one named file, for a checkpoint's data: slot s at byte
 * offset base + s * slot_size (base a multiple of 4096), through the same
 * engines as nvme_open's stores (cfg->dirs and cfg->ndirs are ignored;
 * cfg->limit too). create: path is made (O_CREAT | O_EXCL, mode 0600,
 * O_DIRECT where the file system takes it) and slots are handed out by
 * nvme_slot_alloc in order 0, 1, 2, ...; the file is never unlinked by the
 * store (the caller renames or removes it), but a file made by a call that
 * then fails is removed. nslots is ignored. Else path is opened read-only
 * with nslots slots, holding no valid data until nvme_slot_expect; there
 * nvme_slot_alloc and nvme_write fail with -EBADF. Reading a slot that the
 * file does not hold whole (truncated) fails at once with -EIO. The thread
 * engine is used where io_uring is not available. Logs nothing; -errno of
 * open, -ENOMEM, -EINVAL for bad arguments. */
int nvme_open_file(const struct nvme_config *cfg, const char *path,
                   bool create, uint64_t base, uint64_t nslots,
                   struct nvme_store **st_p);
/* Closes files and rings: nothing is left on disk, except the named file of
 * a store from nvme_open_file, left as it is (never truncated). The caller
 * has freed its buffers first (arena ones become invalid here). NULL is
 * allowed. */
void nvme_close(struct nvme_store *st);

/* Reserves a slot (-ENOSPC at the limit or when the disk is full). */
int nvme_slot_alloc(struct nvme_store *st, uint64_t *slot_p);
/* Releases a slot; its data is forgotten. */
void nvme_slot_free(struct nvme_store *st, uint64_t slot);
/* The crc32c of slot's data, once written successfully (or as given to
 * nvme_slot_expect); 0 for a slot holding no valid data. */
uint32_t nvme_slot_crc(const struct nvme_store *st, uint64_t slot);
/* Slot holds data whose crc32c is crc (read from a checkpoint's index):
 * nvme_read then checks it (-EIO on a mismatch). Ignored for a slot not in
 * use. */
void nvme_slot_expect(struct nvme_store *st, uint64_t slot, uint32_t crc);

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
