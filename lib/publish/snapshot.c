#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "publish/snapshot.h"

/* The layout is an interface between processes built apart: pin it. */
_Static_assert(sizeof(struct snap_header) == 200, "snap_header layout");
_Static_assert(offsetof(struct snap_header, seq) == 24, "seq moved");
_Static_assert(offsetof(struct snap_header, request) == 32, "request moved");
_Static_assert(offsetof(struct snap_header, pid_ns) == 76, "pid_ns moved");
_Static_assert(sizeof(struct snap_data) == 1600, "snap_data layout");
_Static_assert(sizeof(struct snap_share_proc) == 16, "snap_share_proc layout");
_Static_assert(sizeof(struct snap_link) == 24, "snap_link layout");
_Static_assert(sizeof(struct snap_device) == 320, "snap_device layout");
_Static_assert(sizeof(struct snap_alloc) == 40, "snap_alloc layout");
_Static_assert(sizeof(struct snap_map) == 8, "snap_map layout");

size_t snap_off_dev(void)
{
    return sizeof(struct snap_header) + sizeof(struct snap_data);
}

size_t snap_off_alloc(uint32_t ndev)
{
    return snap_off_dev() + (size_t)ndev * sizeof(struct snap_device);
}

size_t snap_off_map(uint32_t ndev, uint32_t max_allocs)
{
    return snap_off_alloc(ndev) + (size_t)max_allocs * sizeof(struct snap_alloc);
}

size_t snap_off_link(uint32_t ndev, uint32_t max_allocs, uint32_t map_cap)
{
    return snap_off_map(ndev, max_allocs) +
           (size_t)ndev * map_cap * sizeof(struct snap_map);
}

size_t snap_size(uint32_t ndev, uint32_t max_allocs, uint32_t map_cap)
{
    size_t nloc = snap_nloc(ndev);
    return snap_off_link(ndev, max_allocs, map_cap) +
           nloc * nloc * sizeof(struct snap_link);
}

size_t snap_size_max(void)
{
    return snap_size(SNAP_MAX_DEVICES, SNAP_MAX_ALLOCS, SNAP_MAX_MAP);
}

void snap_header_init(struct snap_header *h, uint32_t ndev,
                      uint32_t max_allocs, uint32_t map_cap)
{
    memcpy(h->magic, SNAP_MAGIC, sizeof(h->magic));
    h->version = SNAP_VERSION;
    h->byte_order = SNAP_BYTE_ORDER;
    h->total_size = snap_size(ndev, max_allocs, map_cap);
    atomic_store_explicit(&h->seq, 0, memory_order_relaxed);
    h->header_size = sizeof(*h);
    h->ndev = ndev;
    h->max_allocs = max_allocs;
    h->map_cap = map_cap;
}

static int pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    while (len) {
        ssize_t k = pwrite(fd, p, len, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        p += k;
        len -= (size_t)k;
        off += k;
    }
    return 0;
}

/* The seqlock's writer half. Each pwrite to tmpfs copies under the page's
 * lock, whose release and the next acquire order the three writes as
 * readers see them through their mappings; readers copy plain bytes
 * between an acquire load of seq and an acquire fence (Boehm, "Can seqlocks
 * get along with programming language memory models?"), and keep the copy
 * only when seq was even and is unchanged. pwrite cannot fault: a file
 * shrunk by someone else just grows back. */
int snap_write(int fd, uint64_t *seq_p, const void *body, size_t len)
{
    const off_t at = offsetof(struct snap_header, seq);
    uint64_t odd = *seq_p + 1, even = *seq_p + 2;
    int rc = pwrite_all(fd, &odd, sizeof(odd), at);
    if (!rc)
        rc = pwrite_all(fd, body, len, sizeof(struct snap_header));
    if (!rc)
        rc = pwrite_all(fd, &even, sizeof(even), at);
    *seq_p = even;
    return rc;
}

uint64_t snap_seq(const struct snap_header *seg)
{
    return atomic_load_explicit((_Atomic uint64_t *)&seg->seq,
                                memory_order_acquire);
}

int snap_copy(const struct snap_header *seg, size_t len, void *dst)
{
    _Atomic uint64_t *seq = (_Atomic uint64_t *)&seg->seq;
    uint64_t s1 = atomic_load_explicit(seq, memory_order_acquire);
    if (s1 & 1)
        return -EAGAIN;
    memcpy(dst, (const void *)seg, len);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(seq, memory_order_relaxed);
    return s1 == s2 ? 0 : -EAGAIN;
}

/* Appends n units of state to out, merging with the last entry. */
static void map_add(struct snap_map *out, uint32_t *count, uint32_t state,
                    uint32_t n)
{
    if (*count && out[*count - 1].state == state)
        out[*count - 1].units += n;
    else
        out[(*count)++] = (struct snap_map){state, n};
}

uint32_t snap_map_encode(const struct snap_run *fine, size_t nfine,
                         uint32_t cap, struct snap_map *out,
                         uint64_t *per_unit_p)
{
    uint64_t total = 0, run = 0;
    size_t entries = 0;
    uint32_t last = UINT32_MAX;
    bool fits = true;
    for (size_t i = 0; i < nfine; i++) {
        if (!fine[i].n)
            continue;
        if (fine[i].state != last) {
            entries++;
            run = 0;
            last = fine[i].state;
        }
        run += fine[i].n;
        fits &= run <= UINT32_MAX;
        total += fine[i].n;
    }
    uint32_t count = 0;
    *per_unit_p = 1;
    if (!cap || !total)
        return 0;
    if (fits && entries <= cap) {
        for (size_t i = 0; i < nfine; i++)
            if (fine[i].n)
                map_add(out, &count, fine[i].state, (uint32_t)fine[i].n);
        return count;
    }
    uint64_t per = (total + cap - 1) / cap;
    size_t i = 0;
    uint64_t left = fine[0].n; /* granules left in fine[i] */
    for (uint64_t done = 0; done < total;) {
        uint64_t want = total - done < per ? total - done : per;
        uint64_t votes[SNAP_NSTATES] = {0};
        done += want;
        while (want) {
            while (!left) /* total counts these, so i stays in range */
                left = fine[++i].n;
            uint64_t take = left < want ? left : want;
            if (fine[i].state < SNAP_NSTATES)
                votes[fine[i].state] += take;
            left -= take;
            want -= take;
        }
        /* The state most of the unit's memory has, but free only when all
         * of it is: a picture that hid a device's only allocation in a sea
         * of free memory would mislead more than one that rounds it up. */
        uint32_t st = SNAP_FREE;
        for (uint32_t s = 0; s < SNAP_NSTATES; s++)
            if (s != SNAP_FREE && votes[s] &&
                (st == SNAP_FREE || votes[s] > votes[st]))
                st = s;
        map_add(out, &count, st, 1);
    }
    *per_unit_p = per;
    return count;
}

/* ---- parsing ----------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static int
fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int snap_check_owner(const struct snap_expect *ex, char *err, size_t errlen)
{
    if (ex->file_uid != ex->uid)
        return fail(err, errlen, -EPERM,
                    "owned by uid %" PRIu32 ", not by you (uid %" PRIu32 ")",
                    ex->file_uid, ex->uid);
    return 0;
}

/* A string field must end within its array; what it holds is shown to
 * people, so anything but printable ASCII becomes '?'. */
static bool clean_string(char *s, size_t size)
{
    char *end = memchr(s, '\0', size);
    if (!end)
        return false;
    for (char *p = s; p < end; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    return true;
}

static bool finite_in(double v, double lo, double hi)
{
    return isfinite(v) && v >= lo && v <= hi;
}

/* Checks the fixed header of a copy of len bytes (the copy holds at least
 * a header). */
static int check_header(struct snap_header *h, size_t len,
                        const struct snap_expect *ex, char *err,
                        size_t errlen)
{
    if (h->header_size != sizeof(*h))
        return fail(err, errlen, -EINVAL,
                    "bad header size %" PRIu32 " (version %u has %zu)",
                    h->header_size, SNAP_VERSION, sizeof(*h));
    if (h->total_size != len)
        return fail(err, errlen, -EINVAL,
                    "%s: %zu bytes, the header says %" PRIu64,
                    h->total_size > len ? "truncated" : "size mismatch", len,
                    h->total_size);
    if (h->uid != ex->uid)
        return fail(err, errlen, -EPERM,
                    "written by uid %" PRIu32 ", not by you (uid %" PRIu32 ")",
                    h->uid, ex->uid);
    if (h->pid <= 0 || (ex->pid && h->pid != ex->pid))
        return fail(err, errlen, -EINVAL,
                    "pid %" PRId32 " does not match the segment's name", h->pid);
    if (ex->pid && h->pid_ns != ex->pid_ns)
        return fail(err, errlen, -EINVAL,
                    "pid namespace %" PRIu32 " does not match the segment's "
                    "name", h->pid_ns);
    if (!h->pool_id || (ex->pool_id && h->pool_id != ex->pool_id))
        return fail(err, errlen, -EINVAL,
                    "pool id %" PRIu64 " does not match the segment's name",
                    h->pool_id);
    if (h->ndev < 1 || h->ndev > SNAP_MAX_DEVICES)
        return fail(err, errlen, -EINVAL,
                    "device count %" PRIu32 " out of range (1..%d)", h->ndev,
                    SNAP_MAX_DEVICES);
    if (h->max_allocs > SNAP_MAX_ALLOCS)
        return fail(err, errlen, -EINVAL,
                    "allocation table of %" PRIu32 " rows (at most %d)",
                    h->max_allocs, SNAP_MAX_ALLOCS);
    if (h->map_cap < 1 || h->map_cap > SNAP_MAX_MAP)
        return fail(err, errlen, -EINVAL,
                    "map of %" PRIu32 " entries per device (1..%d)",
                    h->map_cap, SNAP_MAX_MAP);
    size_t want = snap_size(h->ndev, h->max_allocs, h->map_cap);
    if (h->total_size != want)
        return fail(err, errlen, -EINVAL,
                    "size %" PRIu64 " does not match its tables (%zu)",
                    h->total_size, want);
    if (!clean_string(h->program, sizeof(h->program)) ||
        !clean_string(h->backend, sizeof(h->backend)) ||
        !clean_string(h->topology, sizeof(h->topology)))
        return fail(err, errlen, -EINVAL, "unterminated name in the header");
    return 0;
}

static int check_device(struct snap_device *d, unsigned i,
                        const struct snap_header *h, const struct snap_map *map,
                        char *err, size_t errlen)
{
    if (!clean_string(d->model, sizeof(d->model)) ||
        !clean_string(d->pci, sizeof(d->pci)))
        return fail(err, errlen, -EINVAL, "device %u: unterminated name", i);
    if (d->numa < -1 || d->numa > 4095)
        return fail(err, errlen, -EINVAL,
                    "device %u: NUMA node %" PRId32 " out of range", i, d->numa);
    if (!finite_in(d->fragmentation, 0.0, 1.0))
        return fail(err, errlen, -EINVAL,
                    "device %u: fragmentation out of range (0..1)", i);
    if (d->map_count > h->map_cap)
        return fail(err, errlen, -EINVAL,
                    "device %u: %" PRIu32 " map entries, at most %" PRIu32, i,
                    d->map_count, h->map_cap);
    if (d->map_count && !d->map_unit)
        return fail(err, errlen, -EINVAL, "device %u: map units of 0 bytes", i);
    for (uint32_t k = 0; k < d->map_count; k++)
        if (map[k].state >= SNAP_NSTATES || !map[k].units)
            return fail(err, errlen, -EINVAL,
                        "device %u: bad map entry %" PRIu32, i, k);
    return 0;
}

static int check_alloc(const struct snap_alloc *a, unsigned i,
                       const struct snap_header *h, char *err, size_t errlen)
{
    if (a->device < 0 || (uint32_t)a->device >= h->ndev)
        return fail(err, errlen, -EINVAL,
                    "allocation %u: device %" PRId32 " out of range", i,
                    a->device);
    if (a->ndevices < 1 || (uint32_t)a->ndevices > h->ndev)
        return fail(err, errlen, -EINVAL,
                    "allocation %u: spans %" PRId32 " devices", i, a->ndevices);
    if (a->tier < 0 || a->tier > 2)
        return fail(err, errlen, -EINVAL,
                    "allocation %u: tier %" PRId32 " unknown", i, a->tier);
    if (!finite_in(a->age_s, 0.0, 1e12))
        return fail(err, errlen, -EINVAL, "allocation %u: bad age", i);
    return 0;
}

/* Bandwidths a link may have, GB/s (a reader prints them). */
static int check_links(const struct snap_link *l, uint32_t ndev, char *err,
                       size_t errlen)
{
    uint32_t n = snap_nloc(ndev);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            const struct snap_link *x = &l[i * n + j];
            if (!finite_in(x->bandwidth_gbs, 0.0, 1e6))
                return fail(err, errlen, -EINVAL,
                            "link %" PRIu32 " to %" PRIu32 ": bandwidth out "
                            "of range", i, j);
            if (i == j && (x->tier_bytes || x->coll_bytes))
                return fail(err, errlen, -EINVAL,
                            "link %" PRIu32 " to itself carries bytes", i);
        }
    return 0;
}

int snap_parse(const void *data, size_t len, const struct snap_expect *ex,
               struct snap_view *view_p, char *err, size_t errlen)
{
    int rc = snap_check_owner(ex, err, errlen);
    if (rc)
        return rc;
    const char *bytes = data;
    struct snap_header probe;
    if (len < sizeof(probe.magic) ||
        memcmp(bytes, SNAP_MAGIC, sizeof(probe.magic)))
        return fail(err, errlen, -EINVAL,
                    len < sizeof(probe.magic) ? "truncated: %zu bytes"
                                              : "not an umpool snapshot "
                                                "(bad magic, %zu bytes)",
                    len);
    if (len < offsetof(struct snap_header, total_size))
        return fail(err, errlen, -EINVAL, "truncated: %zu bytes", len);
    memcpy(&probe, bytes, offsetof(struct snap_header, total_size));
    if (probe.byte_order != SNAP_BYTE_ORDER)
        return fail(err, errlen, -EINVAL,
                    "written with another byte order");
    if (probe.version != SNAP_VERSION)
        return fail(err, errlen, -EPROTO,
                    "snapshot version %" PRIu32 ", this tool reads version %u",
                    probe.version, SNAP_VERSION);
    if (len < sizeof(struct snap_header))
        return fail(err, errlen, -EINVAL,
                    "truncated: %zu bytes, a header takes %zu", len,
                    sizeof(struct snap_header));
    if (len > snap_size_max())
        return fail(err, errlen, -EINVAL,
                    "%zu bytes, more than any snapshot (%zu)", len,
                    snap_size_max());

    /* Everything below reads a private, aligned copy: nobody can change it
     * between a check and a use. */
    void *buf = aligned_alloc(8, (len + 7) & ~(size_t)7);
    if (!buf)
        return fail(err, errlen, -ENOMEM, "out of memory for %zu bytes", len);
    memcpy(buf, data, len);
    struct snap_header *h = buf;
    struct snap_data *d = (struct snap_data *)(h + 1);
    rc = check_header(h, len, ex, err, errlen);
    if (rc)
        goto out;
    struct snap_device *dev = (struct snap_device *)((char *)buf +
                                                     snap_off_dev());
    struct snap_alloc *alloc =
        (struct snap_alloc *)((char *)buf + snap_off_alloc(h->ndev));
    struct snap_map *map = (struct snap_map *)(
        (char *)buf + snap_off_map(h->ndev, h->max_allocs));
    rc = -EINVAL;
    if (d->nalloc > h->max_allocs) {
        fail(err, errlen, rc, "%" PRIu32 " allocations, the table has %" PRIu32,
             d->nalloc, h->max_allocs);
        goto out;
    }
    if (!d->chunk_size) {
        fail(err, errlen, rc, "chunk size 0");
        goto out;
    }
    if (!finite_in(d->fragmentation, 0.0, 1.0)) {
        fail(err, errlen, rc, "fragmentation out of range (0..1)");
        goto out;
    }
    if (!clean_string(d->share_name, sizeof(d->share_name)) ||
        d->share_nproc > SNAP_SHARE_PROCS ||
        (d->share_nproc && (!d->share_name[0] || d->share_self < -1 ||
                            d->share_self >= (int32_t)d->share_nproc))) {
        fail(err, errlen, rc, "a bad shared pool's table");
        goto out;
    }
    for (uint32_t i = 0; i < d->share_nproc; i++)
        if (d->share_proc[i].pid <= 0 ||
            d->share_proc[i].slot >= SNAP_SHARE_PROCS) {
            fail(err, errlen, rc, "shared pool: bad process %" PRIu32, i);
            goto out;
        }
    for (unsigned t = 0; t < SNAP_NTIERS; t++)
        if (d->tier[t].present > 1) {
            fail(err, errlen, rc, "tier %u: bad presence flag", t);
            goto out;
        }
    for (uint32_t i = 0; i < h->ndev; i++) {
        rc = check_device(&dev[i], i, h, map + (size_t)i * h->map_cap, err,
                          errlen);
        if (rc)
            goto out;
    }
    for (uint32_t i = 0; i < d->nalloc; i++) {
        rc = check_alloc(&alloc[i], i, h, err, errlen);
        if (rc)
            goto out;
    }
    struct snap_link *link = (struct snap_link *)(
        (char *)buf + snap_off_link(h->ndev, h->max_allocs, h->map_cap));
    rc = check_links(link, h->ndev, err, errlen);
    if (rc)
        goto out;
    *view_p = (struct snap_view){.hdr = h, .data = d, .dev = dev,
                                 .alloc = alloc, .map = map, .link = link,
                                 .buf = buf};
    return 0;
out:
    free(buf);
    return rc;
}

void snap_view_free(struct snap_view *v)
{
    free(v->buf);
    memset(v, 0, sizeof(*v));
}

/* ---- names and processes ----------------------------------------------- */

int snap_name(char *buf, size_t len, const struct snap_name *n)
{
    int k = snprintf(buf, len,
                     SNAP_PREFIX "%" PRIu32 "-%" PRIu32 "-%" PRId32 "-%" PRIu64,
                     n->uid, n->pid_ns, n->pid, n->pool_id);
    return k < 0 || (size_t)k >= len ? -ENAMETOOLONG : 0;
}

/* A decimal number of 1..20 digits, no sign, ending at *end_p. */
static bool read_number(const char *s, char stop, uint64_t max, uint64_t *v_p,
                        const char **end_p)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (v > (max - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    if (p == s || *p != stop)
        return false;
    *v_p = v;
    *end_p = p;
    return true;
}

bool snap_name_parse(const char *name, struct snap_name *n_p)
{
    size_t plen = strlen(SNAP_PREFIX);
    uint64_t uid, ns, pid, id;
    const char *p;
    if (strncmp(name, SNAP_PREFIX, plen) ||
        !read_number(name + plen, '-', UINT32_MAX, &uid, &p) ||
        !read_number(p + 1, '-', UINT32_MAX, &ns, &p) ||
        !read_number(p + 1, '-', INT32_MAX, &pid, &p) ||
        !read_number(p + 1, '\0', UINT64_MAX, &id, &p) || !pid || !id)
        return false;
    *n_p = (struct snap_name){(uint32_t)uid, (uint32_t)ns, (int32_t)pid, id};
    return true;
}

int snap_pid_ns(uint32_t *ns_p)
{
    struct stat st;
    if (stat("/proc/self/ns/pid", &st))
        return -errno;
    *ns_p = (uint32_t)st.st_ino;
    return 0;
}

int snap_proc_start(int32_t pid, uint64_t *start_p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%" PRId32 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int saved = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? -saved : -EIO;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: count
     * fields after its last ')'. Field 3 follows it; starttime is 22. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -EIO;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return -EIO;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (errno || end == p + 1)
        return -EIO;
    *start_p = v;
    return 0;
}

const char *snap_loc_name(uint32_t ndev, uint32_t i, char *buf, size_t len)
{
    static const char *const names[SNAP_LOC_EXTRA] = {"host", "nvme", "net"};
    if (i >= ndev)
        return i - ndev < SNAP_LOC_EXTRA ? names[i - ndev] : "?";
    snprintf(buf, len, "%" PRIu32, i);
    return buf;
}

const char *snap_state_name(unsigned state)
{
    static const char *const names[SNAP_NSTATES] = {"used", "cached", "free",
                                                    "host", "nvme"};
    return state < SNAP_NSTATES ? names[state] : "?";
}

const char *snap_tier_name(int tier)
{
    static const char *const names[] = {"device", "host", "nvme"};
    return tier >= 0 && tier < 3 ? names[tier] : "?";
}
