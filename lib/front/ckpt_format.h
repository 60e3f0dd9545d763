/*
 * The checkpoint file, version 1 (ump_pool_checkpoint, ump_pool_restore;
 * documented for users in docs/CHECKPOINT.md). Integers are little-endian
 * (the byte order of every machine the pool runs on; the header's magic
 * and version catch a file of another order), structs have no padding.
 *
 *   [0, 4096)                  the header (struct ckpt_header, then zeros)
 *   [index_off, +index_len)    the index: nrec records, each followed by
 *                              its nsub entries; then nblocks crc32c values
 *                              (uint32), one per data block; then the
 *                              pool's configuration, "key:value,...", NUL
 *                              terminated
 *   [data_off, +nblocks * granule)  the data blocks, one granule each, in
 *                              the order of the records and of their
 *                              granules (granules with no data have none)
 *
 * index_off and data_off are multiples of 4096 (data is written with
 * O_DIRECT). The header is written last, after the data and the index are
 * on disk, into a temporary file renamed over the path, so that a crash
 * leaves the old checkpoint or the new one, never a mix.
 */
#ifndef UMP_FRONT_CKPT_FORMAT_H
#define UMP_FRONT_CKPT_FORMAT_H

#include <stdint.h>

#define CKPT_MAGIC "UMPCKPT\n"
#define CKPT_VERSION 1
#define CKPT_HEADER_BLOCK 4096

struct ckpt_header {
    char magic[8];          /* CKPT_MAGIC */
    uint32_t version;       /* CKPT_VERSION */
    uint32_t header_bytes;  /* sizeof(struct ckpt_header) */
    uint64_t granule;       /* the pool's chunk_size: one data block */
    uint64_t va_base;       /* the pool's address range */
    uint64_t va_size;
    uint32_t ndev;          /* devices of the pool that wrote it */
    uint32_t flags;         /* 0 */
    uint64_t nrec;          /* allocation records in the index */
    uint64_t nblocks;       /* data blocks */
    uint64_t index_off, index_len;
    uint64_t data_off;
    uint64_t live_bytes;    /* bytes the allocations asked for (information) */
    uint64_t root;          /* ump_pool_set_root's pointer, 0: none */
    uint32_t index_crc;     /* crc32c of the index */
    uint32_t header_crc;    /* crc32c of the whole 4096-byte header block,
                               this field 0 */
};

/* What a record is. */
enum {
    CKPT_RUN = 1,     /* whole chunks, untracked; entries: struct ckpt_part */
    CKPT_TRACKED = 2, /* whole chunks the tiers track; struct ckpt_tseg */
    CKPT_SLAB = 3,    /* one chunk of small objects; struct ckpt_obj */
};

/* Places that are not devices, as records name them (device numbers are
 * 0 .. ndev-1): the pinned host memory of ump_host_alloc, and overflowed
 * device allocations (overflow:host). */
#define CKPT_PLACE_HOST (-1)
#define CKPT_PLACE_OVERFLOW (-2)

struct ckpt_rec {
    uint64_t g;       /* first granule: address va_base + g * granule */
    uint64_t n;       /* granules */
    uint64_t size;    /* RUN, TRACKED: bytes requested; SLAB: object size */
    uint32_t kind;    /* CKPT_* */
    uint32_t flags;   /* RUN, TRACKED: the UMP_HINT_* flags; SLAB: class */
    int32_t place;    /* SLAB: its place; RUN, TRACKED: the first chunk's */
    uint32_t nsub;    /* entries that follow */
};

/* RUN: chunks of one place, in address order. */
struct ckpt_part {
    uint64_t n;       /* granules */
    int32_t place;    /* a device or CKPT_PLACE_* */
    uint32_t zero;
};

/* TRACKED: one segment of the tiers (UMP_TIER_* as in umpool.h). */
struct ckpt_tseg {
    uint64_t n;       /* granules */
    int32_t home;     /* the device its policy placed it on */
    int32_t tier;     /* where its data was */
    int32_t dev;      /* tier DEVICE: the device holding it, else -1 */
    uint32_t nodata;  /* 1: discarded (DONTNEED, then moved down): no block */
};

/* SLAB: one live object. */
struct ckpt_obj {
    uint32_t idx;     /* its index in the slab */
    uint32_t req;     /* bytes requested */
};

_Static_assert(sizeof(struct ckpt_header) == 112, "header layout");
_Static_assert(sizeof(struct ckpt_rec) == 40, "record layout");
_Static_assert(sizeof(struct ckpt_part) == 16, "part layout");
_Static_assert(sizeof(struct ckpt_tseg) == 24, "segment layout");
_Static_assert(sizeof(struct ckpt_obj) == 8, "object layout");

#endif
