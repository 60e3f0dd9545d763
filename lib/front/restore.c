/*
 * ump_pool_restore: a new pool from a checkpoint file (ckpt_format.h), at
 * the same addresses. Everything in the file is checked before the pool is
 * made (header, sizes against the file's length, the index's crc32c and
 * its consistency), so that a bad file is refused whole; the data blocks
 * are checked (crc32c) as they are read, and a failure there frees what
 * was restored and destroys the pool: the caller gets a whole pool or
 * none.
 *
 * Placement: each allocation goes back where it was when that place exists
 * here and has room; otherwise the pool's policy places it (at its old
 * address: only the memory behind it changes), and a tracked run's segment
 * goes down a tier; what fits nowhere is -ENOSPC, named.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "front/ckpt.h"
#include "front/ckpt_format.h"
#include "front/front.h"
#include "front/lifecycle.h"
#include "front/tcache.h"
#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/sizeclass.h"
#include "mem/slab.h"
#include "tier/ckpt.h"
#include "tier/nvme.h"
#include "util/crc32c.h"

static const char fn[] = "ump_pool_restore";

/* The largest granule: chunk_size's largest (util/conf.c). */
#define CKPT_GRANULE_MAX ((uint64_t)1 << 31)

/* The index, parsed and checked against the header. */
struct index {
    const struct ckpt_header *h;
    const char *p;          /* the index bytes */
    size_t recs_len;        /* bytes of the records and their entries */
    const uint32_t *crcs;   /* nblocks, unaligned: read with memcpy */
    const char *config;
};

static int bad(const char *path, int rc, const char *why)
{
    ump_log_error("%s: %s: %s", fn, path, why);
    return rc;
}

static int read_all(int fd, void *p, size_t n, off_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = pread(fd, (char *)p + done, n - done, off + (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return -EIO; /* the file ends early */
        done += (size_t)k;
    }
    return 0;
}

/* The header: a checkpoint this library reads, whole, its parts inside a
 * file of `size` bytes, its figures those of a pool (front/pool.c makes
 * them so: a chunk_size conf.c accepts, at least two granules of
 * addresses, one device or more). */
static int check_header(const char *path, const char *block,
                        const struct ckpt_header *h, uint64_t size)
{
    if (memcmp(h->magic, CKPT_MAGIC, sizeof(h->magic)))
        return bad(path, -EINVAL, "not an umpool checkpoint");
    if (h->version != CKPT_VERSION) {
        ump_log_error("%s: %s: checkpoint version %u; this library reads "
                      "version %u", fn, path, h->version, CKPT_VERSION);
        return -EINVAL;
    }
    char copy[CKPT_HEADER_BLOCK];
    struct ckpt_header c = *h;
    c.header_crc = 0;
    memcpy(copy, block, sizeof(copy));
    memcpy(copy, &c, sizeof(c));
    if (h->header_bytes != sizeof(*h) ||
        crc32c(0, copy, sizeof(copy)) != h->header_crc)
        return bad(path, -EINVAL, "the header is corrupt");
    uint64_t g = h->granule;
    const char *why = NULL;
    if (!g || (g & (g - 1)) || g % ((uint64_t)1 << 20) ||
        g > CKPT_GRANULE_MAX)
        why = "the granule is not a power of two from 1 MiB to 2 GiB";
    else if (!h->va_base || h->va_base % g || h->va_size % g ||
             h->va_size < 2 * g || h->va_size > UINT64_MAX - h->va_base)
        why = "the address range is not one a pool has";
    else if (!h->ndev || h->ndev > UMP_MAX_DEVICES)
        why = "the device count is out of range";
    else if (h->flags)
        why = "flags are set (version 1 has none)";
    else if (h->index_off != CKPT_HEADER_BLOCK ||
             h->index_len > UINT64_MAX - CKPT_HEADER_BLOCK - h->index_off ||
             h->data_off != UMP_ALIGN_UP(h->index_off + h->index_len,
                                         (uint64_t)CKPT_HEADER_BLOCK))
        why = "the index and the data are not where the header says";
    else if (h->nblocks > (UINT64_MAX - h->data_off) / g ||
             h->nrec > h->index_len / sizeof(struct ckpt_rec) ||
             h->nblocks > h->index_len / sizeof(uint32_t) ||
             h->nblocks > h->va_size / g || h->nrec > h->va_size / g)
        why = "more records or data blocks than the index or the range "
              "holds";
    else if (h->root && (h->root < h->va_base ||
                         h->root - h->va_base >= h->va_size))
        why = "the root is outside the address range";
    if (why) {
        ump_log_error("%s: %s: the header's figures are inconsistent: %s", fn,
                      path, why);
        return -EINVAL;
    }
    uint64_t end = h->data_off + h->nblocks * g;
    if (size < end) {
        ump_log_error("%s: %s is truncated: %llu bytes, %llu expected", fn,
                      path, (unsigned long long)size,
                      (unsigned long long)end);
        return -EIO;
    }
    if (size > end) {
        ump_log_error("%s: %s has %llu bytes past the end of its data", fn,
                      path, (unsigned long long)(size - end));
        return -EINVAL;
    }
    return 0;
}

/*
 * The rules an index follows, from how the pool makes allocations: what a
 * record says must be an allocation the pool could have made itself, so
 * that the one the restore builds is exactly that (every granule of it
 * reachable, counted and freed as the pool's own).
 */
struct rules {
    const char *path;
    const struct ckpt_header *h;
    uint64_t ngran;    /* granules of the address range */
    unsigned nsmall;   /* size classes of the granule (pool.c) */
    uint64_t small_max; /* the largest size served from slabs */
    uint64_t next_g;   /* the first granule past the record before */
    uint64_t live;     /* bytes asked for, summed */
    uint64_t blocks;   /* data blocks, summed */
};

/* Logs one line naming record i and why it is refused: -EINVAL. */
__attribute__((format(printf, 4, 5))) static int
refuse(const struct rules *c, uint64_t i, const struct ckpt_rec *r,
       const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    ump_log_error("%s: %s: the index is inconsistent: record %llu (granule "
                  "%llu, kind %u): %s", fn, c->path, (unsigned long long)i,
                  (unsigned long long)r->g, r->kind, why);
    return -EINVAL;
}

/* A place as records name them: a device of the pool that wrote the file,
 * or a host place. */
static bool valid_place(const struct rules *c, int32_t place)
{
    return (place >= 0 && (uint32_t)place < c->h->ndev) ||
           place == CKPT_PLACE_HOST || place == CKPT_PLACE_OVERFLOW;
}

/* Pinned host memory (ump_host_alloc) comes in whole pages, and pages are
 * 4 KiB or a multiple. */
#define HOST_PAGE_MIN 4096u

/* A run of whole chunks (RUN or TRACKED): its size and flags as ump_alloc
 * or ump_host_alloc make them (front/alloc.c). */
static int check_run(const struct rules *c, uint64_t i,
                     const struct ckpt_rec *r)
{
    uint64_t g = c->h->granule;
    uint64_t need = r->size / g + (r->size % g != 0);
    if (r->size > c->h->va_size - g) /* alloc_at: -ENOMEM */
        return refuse(c, i, r, "size %llu is more than a range of %llu "
                      "bytes holds", (unsigned long long)r->size,
                      (unsigned long long)c->h->va_size);
    if (need != r->n)
        return refuse(c, i, r, "size %llu needs %llu granule(s) of %llu "
                      "bytes; the record has %llu",
                      (unsigned long long)r->size, (unsigned long long)need,
                      (unsigned long long)g, (unsigned long long)r->n);
    if (r->flags & ~(UMP_HINT_NO_SPILL | UMP_HINT_OFFLOAD))
        return refuse(c, i, r, "unknown hint flags 0x%x", r->flags);
    bool offload = r->flags & UMP_HINT_OFFLOAD;
    if (r->size <= c->small_max && !offload)
        return refuse(c, i, r, "size %llu is a slab object's (up to %llu), "
                      "not a run's", (unsigned long long)r->size,
                      (unsigned long long)c->small_max);
    if (offload && r->kind != CKPT_TRACKED)
        return refuse(c, i, r, "an offloadable run is tracked by the tiers "
                      "from its allocation (kind %u)", CKPT_TRACKED);
    if (r->kind == CKPT_TRACKED && r->place < 0)
        return refuse(c, i, r, "tracked memory is device memory, not host "
                      "place %d", (int)r->place);
    if (r->place == CKPT_PLACE_HOST && r->flags)
        return refuse(c, i, r, "pinned host memory takes no hints (flags "
                      "0x%x)", r->flags);
    if (r->place == CKPT_PLACE_HOST && r->size % HOST_PAGE_MIN)
        return refuse(c, i, r, "pinned host memory of %llu bytes is not "
                      "whole pages", (unsigned long long)r->size);
    return 0;
}

/* RUN: the chunks of each place in address order, one entry per stretch
 * of one place (the writer merges them); a device run's parts on devices,
 * a host place's run in one part. */
static int check_parts(const struct rules *c, uint64_t i,
                       const struct ckpt_rec *r, const char *subs,
                       uint64_t *sum)
{
    int32_t prev = 0;
    for (uint32_t k = 0; k < r->nsub; k++) {
        struct ckpt_part x;
        memcpy(&x, subs + k * sizeof(x), sizeof(x));
        if (!x.n || x.n > r->n - *sum)
            return refuse(c, i, r, "part %u: %llu granules; the parts "
                          "must add up to the record's %llu", k,
                          (unsigned long long)x.n, (unsigned long long)r->n);
        if (!valid_place(c, x.place) || x.zero)
            return refuse(c, i, r, "part %u: place %d, padding %u: no "
                          "place of a pool of %u devices", k, (int)x.place,
                          x.zero, c->h->ndev);
        if (k == 0 && x.place != r->place)
            return refuse(c, i, r, "the first part is on place %d, the "
                          "record says %d", (int)x.place, (int)r->place);
        if (k > 0 && x.place == prev)
            return refuse(c, i, r, "parts %u and %u are both on place %d",
                          k - 1, k, (int)x.place);
        if ((x.place < 0 || r->place < 0) && x.place != r->place)
            return refuse(c, i, r, "part %u on place %d: a run is on "
                          "devices or all on one host place", k,
                          (int)x.place);
        prev = x.place;
        *sum += x.n;
    }
    return 0;
}

/* TRACKED: its segments in address order, each where the tiers keep it. */
static int check_segs(const struct rules *c, uint64_t i,
                      const struct ckpt_rec *r, const char *subs,
                      uint64_t *sum, uint64_t *blocks)
{
    int32_t ndev = (int32_t)c->h->ndev;
    for (uint32_t k = 0; k < r->nsub; k++) {
        struct ckpt_tseg x;
        memcpy(&x, subs + k * sizeof(x), sizeof(x));
        if (!x.n || x.n > r->n - *sum)
            return refuse(c, i, r, "segment %u: %llu granules; the "
                          "segments must add up to the record's %llu", k,
                          (unsigned long long)x.n, (unsigned long long)r->n);
        if (x.home < 0 || x.home >= ndev)
            return refuse(c, i, r, "segment %u: home %d is no device of "
                          "%d", k, (int)x.home, (int)ndev);
        if (k == 0 && x.home != r->place)
            return refuse(c, i, r, "the first segment's home is device %d, "
                          "the record says %d", (int)x.home, (int)r->place);
        if (x.tier < UMP_TIER_DEVICE || x.tier > UMP_TIER_NVME)
            return refuse(c, i, r, "segment %u: tier %d", k, (int)x.tier);
        if (x.tier == UMP_TIER_DEVICE ? x.dev < 0 || x.dev >= ndev
                                      : x.dev != -1)
            return refuse(c, i, r, "segment %u: device %d on tier %d (a "
                          "device of %d on the device tier, else -1)", k,
                          (int)x.dev, (int)x.tier, (int)ndev);
        if (x.nodata > 1 || (x.nodata && x.tier != UMP_TIER_NVME))
            return refuse(c, i, r, "segment %u: nodata %u on tier %d (only "
                          "NVMe segments are discarded)", k, x.nodata,
                          (int)x.tier);
        *sum += x.n;
        *blocks += x.nodata ? 0 : x.n;
    }
    return 0;
}

/* SLAB: one granule of one size class of the granule, its live objects in
 * index order, each of a size its class serves (alloc_small: sc_index). */
static int check_slab(struct rules *c, uint64_t i, const struct ckpt_rec *r,
                      const char *subs)
{
    if (r->n != 1)
        return refuse(c, i, r, "a slab is one granule, not %llu",
                      (unsigned long long)r->n);
    if (r->flags >= c->nsmall)
        return refuse(c, i, r, "size class %u: granules of %llu bytes have "
                      "%u", r->flags, (unsigned long long)c->h->granule,
                      c->nsmall);
    uint64_t size = sc_size(r->flags);
    if (r->size != size)
        return refuse(c, i, r, "object size %llu is not size class %u's "
                      "(%llu)", (unsigned long long)r->size, r->flags,
                      (unsigned long long)size);
    uint64_t nobj = c->h->granule / size, lo = r->flags ?
                                                 sc_size(r->flags - 1) : 0;
    int64_t prev = -1;
    for (uint32_t k = 0; k < r->nsub; k++) {
        struct ckpt_obj x;
        memcpy(&x, subs + k * sizeof(x), sizeof(x));
        if (x.idx >= nobj || (int64_t)x.idx <= prev)
            return refuse(c, i, r, "object %u: index %u (the slab has %llu "
                          "objects, listed once each in index order)", k,
                          x.idx, (unsigned long long)nobj);
        if (x.req <= lo || x.req > size)
            return refuse(c, i, r, "object %u: %u bytes are not of size "
                          "class %u (%llu to %llu)", k, x.req, r->flags,
                          (unsigned long long)lo + 1,
                          (unsigned long long)size);
        if (r->place == CKPT_PLACE_HOST && x.req % HOST_PAGE_MIN)
            return refuse(c, i, r, "object %u: pinned host memory of %u "
                          "bytes is not whole pages", k, x.req);
        prev = x.idx;
        c->live += x.req;
    }
    c->blocks += 1;
    return 0;
}

/* The record i at *off, checked against the rules; *off moves past its
 * entries, and its bytes and data blocks are added up in c. */
static int check_record(struct rules *c, uint64_t i, const char *p,
                        size_t len, size_t *off)
{
    struct ckpt_rec r;
    if (len - *off < sizeof(r)) {
        ump_log_error("%s: %s: the index is inconsistent: record %llu runs "
                      "past its end", fn, c->path, (unsigned long long)i);
        return -EINVAL;
    }
    memcpy(&r, p + *off, sizeof(r));
    *off += sizeof(r);
    size_t each = r.kind == CKPT_RUN      ? sizeof(struct ckpt_part)
                  : r.kind == CKPT_TRACKED ? sizeof(struct ckpt_tseg)
                  : r.kind == CKPT_SLAB    ? sizeof(struct ckpt_obj)
                                           : 0;
    if (!each)
        return refuse(c, i, &r, "no such kind (RUN %u, TRACKED %u, SLAB "
                      "%u)", CKPT_RUN, CKPT_TRACKED, CKPT_SLAB);
    if (!r.nsub || r.nsub > (len - *off) / each)
        return refuse(c, i, &r, "%u entries: none, or past the index's end",
                      r.nsub);
    const char *subs = p + *off;
    *off += r.nsub * each;
    if (!r.n || r.g >= c->ngran || r.n > c->ngran - r.g)
        return refuse(c, i, &r, "granules [%llu, +%llu) leave the range of "
                      "%llu", (unsigned long long)r.g,
                      (unsigned long long)r.n, (unsigned long long)c->ngran);
    if (r.g < c->next_g)
        return refuse(c, i, &r, "it overlaps the record before, or comes "
                      "before it (records are in address order)");
    if (!r.size)
        return refuse(c, i, &r, "size 0");
    if (!valid_place(c, r.place))
        return refuse(c, i, &r, "place %d: no place of a pool of %u devices",
                      (int)r.place, c->h->ndev);
    c->next_g = r.g + r.n;
    if (r.kind == CKPT_SLAB)
        return check_slab(c, i, &r, subs);
    int rc = check_run(c, i, &r);
    uint64_t sum = 0, blocks = 0;
    if (!rc)
        rc = r.kind == CKPT_RUN
                 ? check_parts(c, i, &r, subs, &sum)
                 : check_segs(c, i, &r, subs, &sum, &blocks);
    if (rc)
        return rc;
    if (sum != r.n)
        return refuse(c, i, &r, "the entries add up to %llu granules, the "
                      "record has %llu", (unsigned long long)sum,
                      (unsigned long long)r.n);
    c->blocks += r.kind == CKPT_RUN ? r.n : blocks;
    c->live += r.size;
    return 0;
}

static int check_index(const char *path, const struct ckpt_header *h,
                       const char *p, struct index *ix)
{
    if (crc32c(0, p, h->index_len) != h->index_crc)
        return bad(path, -EIO, "the index is corrupt (crc32c)");
    unsigned nsmall = sc_count_for_chunk(h->granule);
    struct rules c = {.path = path, .h = h, .ngran = h->va_size / h->granule,
                      .nsmall = nsmall,
                      .small_max = nsmall ? sc_size(nsmall - 1) : 0};
    size_t off = 0;
    for (uint64_t i = 0; i < h->nrec; i++) {
        int rc = check_record(&c, i, p, h->index_len, &off);
        if (rc)
            return rc;
    }
    size_t crc_bytes = h->nblocks * sizeof(uint32_t);
    const char *why = NULL;
    if (c.blocks != h->nblocks)
        why = "the records' data blocks are not the header's";
    else if (c.live != h->live_bytes)
        why = "the records' sizes do not add up to the header's live bytes";
    else if (h->index_len - off < crc_bytes + 1)
        why = "no room for the blocks' crcs and the configuration";
    else if (strnlen(p + off + crc_bytes, h->index_len - off - crc_bytes) !=
             h->index_len - off - crc_bytes - 1) /* no NUL: strnlen stops */
        why = "the configuration is not one string ending the index";
    if (why) {
        ump_log_error("%s: %s: the index is inconsistent: %s", fn, path, why);
        return -EINVAL;
    }
    *ix = (struct index){.h = h, .p = p, .recs_len = off,
                         .crcs = (const uint32_t *)(const void *)(p + off),
                         .config = p + off + crc_bytes};
    return 0;
}

/* The record at *off of a checked index and its entries; *off moves past
 * them, its data blocks are added to *blocks_p. */
static void next_record(const char *p, size_t *off, struct ckpt_rec *r,
                        const char **subs_p, uint64_t *blocks_p)
{
    memcpy(r, p + *off, sizeof(*r));
    *off += sizeof(*r);
    *subs_p = p + *off;
    if (r->kind == CKPT_SLAB) {
        *off += r->nsub * sizeof(struct ckpt_obj);
        *blocks_p += 1;
    } else if (r->kind == CKPT_RUN) {
        *off += r->nsub * sizeof(struct ckpt_part);
        *blocks_p += r->n;
    } else {
        for (uint32_t k = 0; k < r->nsub; k++) {
            struct ckpt_tseg x;
            memcpy(&x, p + *off, sizeof(x));
            *off += sizeof(x);
            *blocks_p += x.nodata ? 0 : x.n;
        }
    }
}

/* --- rebuilding ------------------------------------------------------- */

/* A place of the record in this pool, or -1 when this machine lacks it. */
static int place_of(const ump_pool_t *pool, int32_t code)
{
    if (code == CKPT_PLACE_HOST)
        return place_host(pool);
    if (code == CKPT_PLACE_OVERFLOW)
        return place_overflow(pool);
    return code < pool->ndev ? code : -1;
}

/* The plan of pool's policy inst for n chunks asked from near device. */
static int plan(ump_pool_t *pool, struct policy_inst *inst, size_t n,
                int device, unsigned flags, ump_place_part_t **parts_p,
                size_t *np_p)
{
    size_t avail[UMP_MAX_DEVICES];
    chunks_available_all(pool, avail);
    ump_place_request_t req = {.size = n << pool->chunk_shift, .chunks = n,
                               .chunk_size = pool->chunk_size,
                               .device = device < pool->ndev ? device
                                                             : pool->ndev - 1,
                               .flags = flags, .access = UMP_ACCESS_PRIVATE};
    return policy_plan(&pool->place, inst, &req, avail, parts_p, np_p);
}

/* Does device memory that fits on no device go to pinned host memory
 * (overflow:host), as ump_alloc sends it? Offloadable memory never does. */
static bool overflows(const ump_pool_t *pool, unsigned flags)
{
    return pool->cfg.overflow == UMP_OVERFLOW_HOST &&
           !(flags & UMP_HINT_OFFLOAD);
}

static int no_room(ump_pool_t *pool, const struct ckpt_rec *r, int rc)
{
    if (rc != -ENOMEM && rc != -ENOSPC)
        return rc;
    ump_log_error("%s: the allocation at %p (%llu bytes, on %s %d when "
                  "saved) fits nowhere in this pool (%d devices)", fn,
                  vas_addr(&pool->vas, r->g), (unsigned long long)r->size,
                  r->place < 0 ? "host place" : "device", (int)r->place,
                  pool->ndev);
    return -ENOSPC;
}

static int restore_slab(ump_pool_t *pool, struct tcache *tc,
                        const struct ckpt_rec *r, const char *subs,
                        struct slab **s_p)
{
    uint32_t *live = malloc(r->nsub * sizeof(*live));
    uint32_t *req = malloc(r->nsub * sizeof(*req));
    int rc = live && req ? 0 : -ENOMEM;
    if (!rc && (r->flags >= pool->nsmall || sc_size(r->flags) != r->size)) {
        ump_log_error("%s: a slab of %llu-byte objects does not match this "
                      "pool's size classes", fn, (unsigned long long)r->size);
        rc = -EINVAL;
    }
    for (uint32_t i = 0; i < r->nsub && !rc; i++) {
        struct ckpt_obj o;
        memcpy(&o, subs + i * sizeof(o), sizeof(o));
        live[i] = o.idx;
        req[i] = o.req;
    }
    int place = place_of(pool, r->place);
    if (!rc) {
        rc = place >= 0 ? slab_build_at(pool, place, r->flags, r->g, live,
                                        req, r->nsub, s_p)
                        : -ENOMEM;
        if (rc == -ENOMEM && !place_is_host(pool, place)) {
            ump_place_part_t *parts;
            size_t np;
            rc = plan(pool, pool->place.local, 1, r->place, 0, &parts, &np);
            if (!rc) {
                rc = slab_build_at(pool, parts[0].device, r->flags, r->g,
                                   live, req, r->nsub, s_p);
                free(parts);
            }
            if (rc == -ENOMEM && overflows(pool, 0)) /* as ump_alloc would */
                rc = slab_build_at(pool, place_overflow(pool), r->flags, r->g,
                                   live, req, r->nsub, s_p);
        }
    }
    for (uint32_t i = 0; i < r->nsub && !rc; i++)
        alloc_adopt_object(tc, *s_p);
    free(live);
    free(req);
    return no_room(pool, r, rc);
}

static int restore_run(ump_pool_t *pool, const struct ckpt_rec *r,
                       const char *subs, struct run **r_p)
{
    ump_place_part_t *parts = malloc(r->nsub * sizeof(*parts));
    if (!parts)
        return -ENOMEM;
    bool here = true;
    for (uint32_t i = 0; i < r->nsub; i++) {
        struct ckpt_part x;
        memcpy(&x, subs + i * sizeof(x), sizeof(x));
        parts[i] = (ump_place_part_t){.device = place_of(pool, x.place),
                                      .chunks = x.n};
        here &= parts[i].device >= 0;
    }
    int rc = here ? runs_build_at(pool, r->g, parts, r->nsub, r->flags, r_p)
                  : -ENOMEM;
    free(parts);
    int first = place_of(pool, r->place);
    if (rc == -ENOMEM && (first < 0 || !place_is_host(pool, first))) {
        size_t np;
        rc = plan(pool, pool->place.dflt, r->n, r->place, r->flags, &parts,
                  &np);
        if (!rc) {
            rc = runs_build_at(pool, r->g, parts, np, r->flags, r_p);
            free(parts);
        }
        if (rc == -ENOMEM && overflows(pool, r->flags)) {
            ump_place_part_t over = {.device = place_overflow(pool),
                                     .chunks = r->n};
            rc = runs_build_at(pool, r->g, &over, 1, r->flags, r_p);
        }
    }
    return no_room(pool, r, rc);
}

static int restore_tracked(ump_pool_t *pool, const struct ckpt_rec *r,
                           const char *subs, struct run **r_p)
{
    struct ckpt_seg *segs = calloc(r->nsub, sizeof(*segs));
    struct run *run = runs_get(pool);
    int rc = segs && run ? 0 : -ENOMEM;
    for (uint32_t i = 0; i < r->nsub && !rc; i++) {
        struct ckpt_tseg x;
        memcpy(&x, subs + i * sizeof(x), sizeof(x));
        segs[i] = (struct ckpt_seg){.n = x.n, .home = x.home, .tier = x.tier,
                                    .dev = x.dev, .nodata = x.nodata};
        /* A home this machine lacks: where the policy would place it. */
        if (segs[i].home >= pool->ndev) {
            ump_place_part_t *parts;
            size_t np;
            segs[i].home = 0;
            if (!plan(pool, pool->place.dflt, x.n, x.home, r->flags, &parts,
                      &np)) {
                segs[i].home = parts[0].device;
                free(parts);
            }
        }
        if (segs[i].tier == UMP_TIER_DEVICE && segs[i].dev >= pool->ndev)
            segs[i].dev = segs[i].home;
    }
    if (!rc)
        rc = ckpt_restore_run(pool, run, r->g, segs, r->nsub, r->flags);
    if (rc && run)
        runs_put(pool, run);
    else
        *r_p = run;
    free(segs);
    return no_room(pool, r, rc);
}

/* The data of record r from its blocks at slots. A tracked run's
 * discarded segments have no block: they are skipped, wherever their
 * memory now is (a pool without NVMe gives them some). */
static int load_data(ump_pool_t *pool, struct nvme_store *ck,
                     const struct ckpt_rec *r, const char *subs,
                     const uint64_t *slots)
{
    if (r->kind != CKPT_TRACKED)
        return ckpt_data(pool, ck, r->g, r->n, slots, false);
    int rc = 0;
    size_t g = r->g;
    for (uint32_t i = 0; i < r->nsub && !rc; i++) {
        struct ckpt_tseg x;
        memcpy(&x, subs + i * sizeof(x), sizeof(x));
        if (!x.nodata) {
            rc = ckpt_data(pool, ck, g, x.n, slots, false);
            slots += x.n;
        }
        g += x.n;
    }
    return rc;
}

/* ptr, with its low bit set when it is ump_host_alloc's (place): the
 * free that takes it (pointers are 256-byte aligned). */
static void *tag_host(const ump_pool_t *pool, void *ptr, int place)
{
    return (char *)ptr + (place == place_host(pool));
}

/* Every record's memory and data, adopted as live as it is made: on error
 * *made_p allocations are live (the caller frees them). Pool lock held. */
static int rebuild(ump_pool_t *pool, struct tcache *tc,
                   const struct index *ix, struct nvme_store *ck, void **made,
                   size_t *made_p)
{
    uint64_t *slots = malloc((ix->h->nblocks ? ix->h->nblocks : 1) *
                             sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (uint64_t b = 0; b < ix->h->nblocks; b++) {
        uint32_t crc;
        memcpy(&crc, &ix->crcs[b], sizeof(crc));
        nvme_slot_expect(ck, b, crc);
        slots[b] = b;
    }
    size_t off = 0;
    uint64_t at = 0;
    int rc = 0;
    for (uint64_t i = 0; i < ix->h->nrec && !rc; i++) {
        struct ckpt_rec r;
        const char *subs;
        uint64_t blocks = 0;
        next_record(ix->p, &off, &r, &subs, &blocks);
        if (r.kind == CKPT_SLAB) {
            struct slab *s;
            rc = restore_slab(pool, tc, &r, subs, &s);
            for (uint32_t j = 0; j < r.nsub && !rc; j++) {
                struct ckpt_obj o;
                memcpy(&o, subs + j * sizeof(o), sizeof(o));
                made[(*made_p)++] = tag_host(pool, s->base +
                                                       (size_t)o.idx * s->size,
                                             s->device);
            }
        } else {
            struct run *run;
            rc = r.kind == CKPT_RUN ? restore_run(pool, &r, subs, &run)
                                    : restore_tracked(pool, &r, subs, &run);
            if (!rc) {
                alloc_adopt_run(pool, tc, run, r.size);
                made[(*made_p)++] = tag_host(pool, vas_addr(&pool->vas, r.g),
                                             run->device);
            }
        }
        if (!rc)
            rc = load_data(pool, ck, &r, subs, slots + at);
        if (rc == -EADDRINUSE) { /* the index passed its crc */
            ump_log_error("%s: records overlap at %p: the index is "
                          "inconsistent", fn, vas_addr(&pool->vas, r.g));
            rc = -EINVAL;
        }
        if (rc == -EIO)
            ump_log_error("%s: the data at %p does not read back whole "
                          "(crc32c or the disk)", fn,
                          vas_addr(&pool->vas, r.g));
        at += blocks;
    }
    free(slots);
    return rc;
}

/* How many allocations the index lists (slab objects one by one). */
static size_t count_allocs(const struct index *ix)
{
    size_t off = 0, n = 0;
    for (uint64_t i = 0; i < ix->h->nrec; i++) {
        struct ckpt_rec r;
        const char *subs;
        uint64_t blocks = 0;
        next_record(ix->p, &off, &r, &subs, &blocks);
        n += r.kind == CKPT_SLAB ? r.nsub : 1;
    }
    return n;
}

static int restore_into(ump_pool_t *pool, const char *path,
                        const struct index *ix)
{
    struct nvme_store *ck = NULL;
    int rc = ckpt_store_open(pool, path, false, ix->h->data_off,
                             ix->h->nblocks, &ck);
    if (rc)
        return bad(path, rc, "cannot open its data");
    size_t n = count_allocs(ix), made = 0;
    void **ptrs = malloc((n ? n : 1) * sizeof(*ptrs));
    struct tcache *tc = tcache_get(pool); /* takes the pool lock */
    rc = ptrs && tc ? 0 : -ENOMEM;
    if (!rc) {
        pthread_mutex_lock(&pool->lock);
        rc = rebuild(pool, tc, ix, ck, ptrs, &made);
        pthread_mutex_unlock(&pool->lock);
    }
    ckpt_store_close(pool, ck);
    /* A half pool is no use: what was made goes. */
    for (size_t i = 0; rc && i < made; i++) {
        uintptr_t host = (uintptr_t)ptrs[i] & 1;
        void *p = (char *)ptrs[i] - host;
        if (host ? ump_host_free(pool, p) : ump_free(pool, p))
            ump_log_error("%s: cannot undo the allocation at %p", fn, p);
    }
    free(ptrs);
    return rc;
}

int pool_restore(const char *path, const char *config,
                 const struct pool_observer *obs, ump_pool_t **pool_p)
{
    if (!path || !pool_p) {
        ump_log_error("%s: %s is NULL", fn, !path ? "path" : "pool_p");
        return -EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        ump_log_error("%s: cannot open %s: %s", fn, path, ump_strerror(rc));
        return rc;
    }
    char block[CKPT_HEADER_BLOCK];
    struct ckpt_header h;
    struct stat st;
    char *index = NULL;
    struct ump_config *cfg = malloc(sizeof(*cfg));
    struct index ix;
    int rc = cfg ? 0 : -ENOMEM;
    if (!rc && fstat(fd, &st))
        rc = -errno;
    if (!rc && read_all(fd, block, sizeof(block), 0))
        rc = bad(path, -EINVAL, "too short for a checkpoint's header");
    if (!rc) {
        memcpy(&h, block, sizeof(h));
        rc = check_header(path, block, &h, (uint64_t)st.st_size);
    }
    if (!rc && !(index = malloc(h.index_len ? h.index_len : 1)))
        rc = -ENOMEM;
    if (!rc && read_all(fd, index, h.index_len, (off_t)h.index_off))
        rc = bad(path, -EIO, "cannot read the index");
    if (!rc)
        rc = check_index(path, &h, index, &ix);
    close(fd);
    if (!rc)
        rc = conf_load_over(ix.config, "checkpoint", config, cfg);
    if (!rc && cfg->chunk_size != h.granule) {
        ump_log_error("%s: chunk_size %zu differs from the checkpoint's "
                      "%llu", fn, cfg->chunk_size,
                      (unsigned long long)h.granule);
        rc = -EINVAL;
    }
    ump_pool_t *pool = NULL;
    if (!rc) {
        rc = pool_create_at(cfg, (void *)(uintptr_t)h.va_base, h.va_size, obs,
                            &pool);
        if (rc == -EADDRINUSE)
            ump_log_error("%s: the checkpoint's addresses [%p, +%llu) are "
                          "taken in this process (by another pool or a "
                          "mapping); restore it in a fresh process", fn,
                          (void *)(uintptr_t)h.va_base,
                          (unsigned long long)h.va_size);
    }
    if (!rc) {
        rc = restore_into(pool, path, &ix);
        atomic_store(&pool->root, (void *)(uintptr_t)h.root);
        if (rc) {
            pool_destroy(pool);
            pool = NULL;
        }
    }
    free(index);
    free(cfg);
    if (!rc)
        *pool_p = pool;
    return rc;
}
