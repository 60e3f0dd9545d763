/*
 * The statistics snapshot a pool publishes for umpool-inspect: one
 * shared-memory segment per pool,
 * /dev/shm/umpool-<uid>-<pid namespace>-<pid>-<pool id>, mode 0600, with
 * the fixed layout below (the namespace keeps apart the pids of containers
 * that share /dev/shm). The library writes it
 * (lib/publish.c); the tool and the fuzz target read it. This file and
 * snapshot.c are all they share: no other library internals, no logging.
 *
 * Layout (native byte order and alignment; every offset a multiple of 8):
 *   struct snap_header            written once, at creation
 *   struct snap_data              rewritten at every refresh ...
 *   struct snap_device[ndev]      ...
 *   struct snap_alloc[max_allocs] ... (the first nalloc in use)
 *   struct snap_map[ndev][map_cap] ... (the first map_count of each device)
 *   struct snap_link[nloc][nloc]  ... (nloc = snap_nloc(ndev))
 * Everything after the header is written under a seqlock (header.seq is
 * odd while a refresh is being written): a reader copies the segment and
 * keeps the copy only when seq was even and unchanged around the copy.
 * The writer never maps the segment nor reads it back: anyone who can
 * write the file (any process of the user) could otherwise make it write
 * out of bounds, or kill it with SIGBUS by shrinking the file.
 * magic, version, byte_order, total_size, seq and request keep their
 * offsets in every version, so that any reader can tell versions apart.
 *
 * A reader never trusts a segment: another user may have planted one under
 * a name with our uid, a crashed writer may have left one half-written.
 * snap_parse checks everything on a private copy before anything reads it.
 */
#ifndef UMP_SNAPSHOT_H
#define UMP_SNAPSHOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SNAP_MAGIC "UMPSNAP" /* 8 bytes with its NUL */
/* 2: reserved_bytes, peak_reserved_bytes and driver_ns (issue 12), at the
 * end of snap_data and snap_device. A reader reads its own version only
 * (-EPROTO otherwise): tool and library come from one build. */
/* 3: failed, lost_count and lost_bytes at the end of snap_device (a failed
 * device, issue 17). */
/* 4: the link traffic table after the maps and the collectives' counters
 * at the end of snap_data (issue 18). */
/* 5: a shared pool's name and processes at the end of snap_data (issue
 * 32). */
#define SNAP_VERSION 5u
#define SNAP_BYTE_ORDER 0x01020304u
#define SNAP_PREFIX "umpool-"
#define SNAP_DIR "/dev/shm"

/* Limits a reader accepts (a writer uses at most these). */
#define SNAP_MAX_DEVICES 32
#define SNAP_MAX_ALLOCS 256
#define SNAP_MAX_MAP 4096
/* What the library publishes: the largest allocations, and the entries
 * of each device's map. */
#define SNAP_ALLOCS 16
#define SNAP_MAP_ENTRIES 1024

/* The state of a stretch of a device's memory in its map. */
enum snap_state {
    SNAP_USED = 0,   /* live allocations on the device */
    SNAP_CACHED = 1, /* mapped or created, held for reuse (ump_trim) */
    SNAP_FREE = 2,   /* capacity with no chunk created */
    SNAP_HOST = 3,   /* the device's allocations now on the host tier */
    SNAP_NVME = 4,   /* ... and on NVMe */
    SNAP_NSTATES = 5,
};

enum { SNAP_TIER_HOST = 0, SNAP_TIER_NVME = 1, SNAP_NTIERS = 2 };

struct snap_header {
    char magic[8];            /* SNAP_MAGIC */
    uint32_t version;         /* SNAP_VERSION */
    uint32_t byte_order;      /* SNAP_BYTE_ORDER as the writer stores it */
    uint64_t total_size;      /* bytes of the whole segment */
    _Atomic uint64_t seq;     /* seqlock: odd while a refresh is written */
    _Atomic uint32_t request; /* readers add 1 and wake it (a futex) to ask
                                 for a refresh */
    uint32_t header_size;     /* sizeof(struct snap_header) */
    uint32_t uid;             /* of the writing process */
    int32_t pid;
    uint64_t pid_start;       /* pid's start time, clock ticks after boot
                                 (/proc/PID/stat), 0: unknown */
    uint64_t pool_id;
    uint32_t ndev;
    uint32_t max_allocs;      /* rows of the allocation table */
    uint32_t map_cap;         /* map entries per device */
    uint32_t pid_ns;          /* inode of the writer's pid namespace
                                 (/proc/self/ns/pid), 0: unknown */
    uint64_t created_ns;      /* CLOCK_REALTIME */
    char program[32];
    char backend[16];
    char topology[64];
};

struct snap_tier {
    uint64_t capacity, used_bytes, reserve_bytes, peak_bytes, chunks;
    uint32_t present; /* the pool has this tier (ump_tier_stats said so) */
    uint32_t reserved;
};

/* A collective's counters (ump_coll_stats_t), per UMP_COLL_*. */
#define SNAP_NCOLL 8
struct snap_coll {
    uint64_t calls, bytes, timed_calls, timed_bus_bytes, timed_ns;
};

/* One process of a shared pool (ump_pool_share), from its ledger. */
#define SNAP_SHARE_PROCS 64
struct snap_share_proc {
    int32_t pid;
    uint32_t slot;   /* its ledger slot: 0 is the sharer */
    uint64_t bytes;  /* device memory it holds, all devices */
};

struct snap_data {
    uint64_t generation; /* refreshes written so far */
    uint64_t updated_ns; /* CLOCK_REALTIME of this refresh */
    uint64_t chunk_size;
    uint64_t va_size;
    uint64_t peak_bytes; /* pool-wide high-water mark of memory in use */
    uint64_t largest_free;  /* pool-wide, as ump_stats(UMP_DEVICE_ALL) */
    double fragmentation;   /* ... says them */
    uint32_t nalloc;     /* rows of the allocation table in use */
    uint32_t reserved;
    struct snap_tier tier[SNAP_NTIERS];
    /* Version 2: the pool-wide figures that are not sums of the devices'
     * (as ump_stats(UMP_DEVICE_ALL) says them). */
    uint64_t peak_reserved_bytes; /* high-water mark of reserved bytes */
    uint64_t driver_ns;           /* driver time of VMM calls */
    /* Version 4. */
    struct snap_coll coll[SNAP_NCOLL];
    /* Version 5: the pool shared by processes this one is of ("": none),
     * and those processes now (the first share_nproc rows). */
    char share_name[72];
    uint32_t share_nproc;
    int32_t share_self;  /* the writer's row, -1: none */
    struct snap_share_proc share_proc[SNAP_SHARE_PROCS];
};

/* One device: its ump_stats figures, and its picture. */
struct snap_device {
    char model[32];
    char pci[32];
    int32_t numa;
    uint32_t map_count;  /* entries of this device's map in use */
    uint64_t map_unit;   /* bytes of one unit of its map entries */
    uint64_t capacity, live_bytes, mapped_bytes, cached_bytes, peak_bytes;
    uint64_t live_count, alloc_count, free_count;
    uint64_t chunks_created, chunks_released;
    uint64_t host_bytes, nvme_bytes;
    uint64_t spill_count, spill_bytes, restore_count, restore_bytes;
    uint64_t evictions;
    uint64_t largest_free;
    double fragmentation;
    uint64_t state_bytes[SNAP_NSTATES]; /* exact, by enum snap_state */
    /* Version 2. */
    uint64_t reserved_bytes, peak_reserved_bytes;
    uint64_t driver_ns; /* 0 on cuda: only the pool's total is known */
    /* Version 3: 1 when the device has failed, and the allocations lost
     * with failed devices, at their home device (ump_stats). */
    uint64_t failed;
    uint64_t lost_count, lost_bytes;
};

/* One of the largest live allocations (ump_alloc_info_t). */
struct snap_alloc {
    uint64_t addr, size;
    int32_t device, ndevices, tier;
    uint32_t flags;
    double age_s;
};

/* The link table's locations: the devices 0..ndev-1, then these. */
enum { SNAP_LOC_HOST = 0, SNAP_LOC_NVME = 1, SNAP_LOC_NET = 2,
       SNAP_LOC_EXTRA = 3 };
static inline uint32_t snap_nloc(uint32_t ndev)
{
    return ndev + SNAP_LOC_EXTRA;
}
/* One link direction, from location i to location j at [i][j]
 * (ump_link_stats_t); all 0 on the diagonal. */
struct snap_link {
    uint64_t tier_bytes, coll_bytes;
    double bandwidth_gbs; /* 0: not known */
};

/* units * map_unit bytes of one state; a device's entries go in address
 * order, then its idle chunks (cached), then what it never created (free). */
struct snap_map {
    uint32_t state, units;
};

/* ---- writer ---------------------------------------------------------------- */

/* Bytes of a segment with these table sizes. */
size_t snap_size(uint32_t ndev, uint32_t max_allocs, uint32_t map_cap);
/* The largest segment a reader accepts. */
size_t snap_size_max(void);
/* Offsets of the tables (after the header). */
size_t snap_off_dev(void);
size_t snap_off_alloc(uint32_t ndev);
size_t snap_off_map(uint32_t ndev, uint32_t max_allocs);
size_t snap_off_link(uint32_t ndev, uint32_t max_allocs, uint32_t map_cap);

/* Fills the header's layout fields (magic to map_cap, seq 0); the caller
 * sets who wrote it. h is a zeroed header. */
void snap_header_init(struct snap_header *h, uint32_t ndev,
                      uint32_t max_allocs, uint32_t map_cap);
/* Writes body (len bytes: snap_data and the tables, after the header)
 * into the segment open on fd under the seqlock, with pwrite alone. *seq_p
 * is the writer's own copy of seq, never read back from the file. One
 * writer at a time. 0, or a negative errno. */
int snap_write(int fd, uint64_t *seq_p, const void *body, size_t len);

/* A run of n granules of one state, in a device's fine-grained map. */
struct snap_run {
    uint32_t state;
    uint64_t n;
};
/* Turns a device's fine map (runs of granules, address order) into at
 * most cap entries: as it is (a unit is a granule) when it fits, else in
 * units of ceil(T / cap) granules (T: all of them), each taking the state
 * most of its granules have, free only when all of them are (so that
 * nothing in use vanishes from the picture). Writes the entries to out,
 * the granules per unit to *per_unit_p, and returns how many entries. */
uint32_t snap_map_encode(const struct snap_run *fine, size_t nfine,
                         uint32_t cap, struct snap_map *out,
                         uint64_t *per_unit_p);

/* ---- reader ---------------------------------------------------------------- */

/* A consistent copy of a mapped segment of len bytes (the file's length,
 * at least a header's worth) into dst: 0, or -EAGAIN when a refresh was
 * under way (try again). */
int snap_copy(const struct snap_header *seg, size_t len, void *dst);
/* The segment's seqlock counter now. */
uint64_t snap_seq(const struct snap_header *seg);

/* What the reader knows independently of the segment's contents. */
struct snap_expect {
    uint32_t uid;      /* the reader's (effective) */
    uint32_t file_uid; /* the owner of the segment file */
    int32_t pid;       /* from the file's name; 0: any */
    uint64_t pool_id;  /* from the file's name; 0: any */
    uint32_t pid_ns;   /* from the file's name; checked when pid is */
};

/* A checked snapshot, in memory of its own. */
struct snap_view {
    const struct snap_header *hdr;
    const struct snap_data *data;
    const struct snap_device *dev;   /* hdr->ndev */
    const struct snap_alloc *alloc;  /* data->nalloc */
    const struct snap_map *map;      /* map + d * hdr->map_cap: device d */
    const struct snap_link *link;    /* link + i * nloc + j: i to j */
    void *buf;
};

/* Checks the owner alone (before a reader maps anything): 0, or -EPERM
 * with why in err. */
int snap_check_owner(const struct snap_expect *ex, char *err, size_t errlen);
/* Checks len bytes of a segment (any bytes at all) and, when they hold a
 * valid snapshot of this version owned by the reader, copies them into a
 * view (free with snap_view_free): 0. Else a negative errno and one line
 * saying why in err (-EPERM: another owner, -EPROTO: another version,
 * -EINVAL: anything else wrong, -ENOMEM). Strings in the view are
 * NUL-terminated, printable ASCII. */
int snap_parse(const void *data, size_t len, const struct snap_expect *ex,
               struct snap_view *view_p, char *err, size_t errlen);
void snap_view_free(struct snap_view *v);

/* ---- names and processes --------------------------------------------------- */

/* What a segment's name says. */
struct snap_name {
    uint32_t uid;     /* the writer's effective uid */
    uint32_t pid_ns;  /* inode of its pid namespace, 0: unknown */
    int32_t pid;      /* in that namespace */
    uint64_t pool_id;
};
/* "umpool-<uid>-<pid ns>-<pid>-<pool id>" into buf: 0, or -ENAMETOOLONG. */
int snap_name(char *buf, size_t len, const struct snap_name *n);
/* Reads such a name back; false for any other name (pid and pool id are
 * never 0). */
bool snap_name_parse(const char *name, struct snap_name *n_p);
/* The inode of this process's pid namespace: 0, or a negative errno (no
 * /proc). */
int snap_pid_ns(uint32_t *ns_p);
/* The start time of a process (field 22 of /proc/PID/stat, clock ticks
 * after boot): 0, or a negative errno (-ENOENT: no such process). */
int snap_proc_start(int32_t pid, uint64_t *start_p);

/* A location of the link table: "0".."31" (into buf), "host", "nvme",
 * "net". */
const char *snap_loc_name(uint32_t ndev, uint32_t i, char *buf, size_t len);
/* "used", "cached", "free", "host", "nvme"; "?" for anything else. */
const char *snap_state_name(unsigned state);
/* "device", "host", "nvme" (UMP_TIER_*); "?" for anything else. */
const char *snap_tier_name(int tier);

#endif
