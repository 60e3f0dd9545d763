/*
 * The snapshot layout's reader (lib/snapshot.c): every way a segment can
 * be wrong gives an error and one line saying why, never a crash; names,
 * the map encoding, the seqlock (its writer through pwrite); a corpus of
 * truncated and mutated snapshots through the fuzz target's entry point
 * (so that make check exercises it without libFuzzer); and the tool's
 * handling of segments (tools/inspect/inspect_seg.c: other owners, other pid
 * namespaces, --clean against a replaced file) and of watch's rates.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fuzz_entry.h"
#include "inspect_fmt.h"
#include "inspect_seg.h"
#include "snapgen.h"
#include "publish/snapshot.h"

static const struct snapgen_opts gen = {FUZZ_UID, 4242, 0, 3, 0, 0, 0, 0};
static const struct snap_expect ex_ok = {FUZZ_UID, FUZZ_UID, 0, 0, 0};

static char *build(size_t *len_p)
{
    char *buf = snapgen_build(&gen, len_p);
    assert_non_null(buf);
    return buf;
}

static struct snap_header *hdr(char *buf) { return (struct snap_header *)buf; }
static struct snap_data *data(char *buf)
{
    return (struct snap_data *)(buf + sizeof(struct snap_header));
}
static struct snap_device *dev(char *buf, uint32_t d)
{
    return (struct snap_device *)(buf + snap_off_dev()) + d;
}
static struct snap_alloc *alloc_row(char *buf, uint32_t i)
{
    return (struct snap_alloc *)(buf + snap_off_alloc(hdr(buf)->ndev)) + i;
}
static struct snap_map *map_of(char *buf, uint32_t d)
{
    struct snap_header *h = hdr(buf);
    return (struct snap_map *)(buf + snap_off_map(h->ndev, h->max_allocs)) +
           (size_t)d * h->map_cap;
}

/* The link from location i to j (devices, then host, nvme, net). */
static struct snap_link *link_of(char *buf, uint32_t i, uint32_t j)
{
    struct snap_header *h = hdr(buf);
    return (struct snap_link *)(buf + snap_off_link(h->ndev, h->max_allocs,
                                                    h->map_cap)) +
           (size_t)i * snap_nloc(h->ndev) + j;
}

/* Parses and expects rc with a one-line message containing want. */
static void expect_error(const char *buf, size_t len,
                         const struct snap_expect *ex, int rc,
                         const char *want)
{
    struct snap_view v;
    char err[256] = "";
    int got = snap_parse(buf, len, ex, &v, err, sizeof(err));
    if (got == 0)
        snap_view_free(&v);
    if (got != rc || !strstr(err, want) || strchr(err, '\n'))
        fail_msg("parse gave %d \"%s\", expected %d with \"%s\"", got, err,
                 rc, want);
}

static void test_valid(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    struct snap_view v;
    char err[256];
    struct snap_expect ex = ex_ok;
    ex.pid = 4242;
    ex.pool_id = 3;
    assert_int_equal(snap_parse(buf, len, &ex, &v, err, sizeof(err)), 0);
    assert_int_equal(v.hdr->ndev, 4);
    assert_int_equal(v.data->nalloc, 3);
    assert_string_equal(v.hdr->program, "trainer");
    assert_int_equal(v.alloc[0].size, 2ull << 30);
    assert_int_equal(v.dev[1].capacity, 48ull << 30);
    /* A view is a private copy: the source may change or go. */
    assert_ptr_not_equal(v.buf, buf);
    memset(buf, 0, len);
    assert_string_equal(v.hdr->program, "trainer");
    snap_view_free(&v);
    free(buf);
}

static void test_owner(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    struct snap_expect ex = ex_ok;
    ex.file_uid = FUZZ_UID + 1; /* a file someone else owns */
    expect_error(buf, len, &ex, -EPERM, "owned by uid 1001, not by you");
    char err[64];
    assert_int_equal(snap_check_owner(&ex, err, sizeof(err)), -EPERM);
    ex = ex_ok;
    hdr(buf)->uid = 0; /* a file of ours claiming another writer */
    expect_error(buf, len, &ex, -EPERM, "written by uid 0");
    free(buf);
}

static void test_name_mismatch(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    struct snap_expect ex = ex_ok;
    ex.pid = 4243;
    expect_error(buf, len, &ex, -EINVAL, "pid 4242 does not match");
    ex = ex_ok;
    ex.pool_id = 9;
    expect_error(buf, len, &ex, -EINVAL, "pool id 3 does not match");
    /* The name's pid namespace is checked with its pid. */
    ex = ex_ok;
    ex.pid = 4242;
    ex.pid_ns = 4026531836u;
    expect_error(buf, len, &ex, -EINVAL, "pid namespace 0 does not match");
    hdr(buf)->pid_ns = ex.pid_ns;
    struct snap_view v;
    char err[256];
    assert_int_equal(snap_parse(buf, len, &ex, &v, err, sizeof(err)), 0);
    assert_int_equal(v.hdr->pid_ns, 4026531836u);
    snap_view_free(&v);
    free(buf);
}

/* One field broken at a time: each has its own message. */
static void test_broken_fields(void **state)
{
    (void)state;
    size_t len;
    char *good = build(&len);
    char *b = malloc(len + 16);
    assert_non_null(b);
    /* One statement breaks a fresh copy; the parse must say want. */
#define BROKEN(want, rc, stmt)                                                 \
    do {                                                                       \
        memcpy(b, good, len);                                                  \
        char *buf = b;                                                         \
        stmt;                                                                  \
        expect_error(b, len, &ex_ok, rc, want);                                \
    } while (0)
    BROKEN("bad magic", -EINVAL, memcpy(hdr(buf)->magic, "UMPSNAQ", 8));
    BROKEN("another byte order", -EINVAL,
           hdr(buf)->byte_order = 0x04030201u);
    BROKEN("snapshot version 7", -EPROTO, hdr(buf)->version = 7);
    BROKEN("snapshot version 0", -EPROTO, hdr(buf)->version = 0);
    /* Version 1 (before reserved and driver time): refused, said so. */
    BROKEN("snapshot version 1, this tool reads version 5", -EPROTO,
           hdr(buf)->version = 1);
    BROKEN("snapshot version 4, this tool reads version 5", -EPROTO,
           hdr(buf)->version = 4);
    BROKEN("bad header size", -EINVAL, hdr(buf)->header_size = 8);
    BROKEN("truncated", -EINVAL, hdr(buf)->total_size = len + 8);
    BROKEN("size mismatch", -EINVAL, hdr(buf)->total_size = len - 8);
    BROKEN("pid 0", -EINVAL, hdr(buf)->pid = 0);
    BROKEN("pool id 0", -EINVAL, hdr(buf)->pool_id = 0);
    BROKEN("device count 0", -EINVAL, hdr(buf)->ndev = 0);
    BROKEN("device count 33", -EINVAL, hdr(buf)->ndev = 33);
    BROKEN("does not match its tables", -EINVAL, hdr(buf)->ndev = 3);
    BROKEN("allocation table of 257", -EINVAL, hdr(buf)->max_allocs = 257);
    BROKEN("map of 0 entries", -EINVAL, hdr(buf)->map_cap = 0);
    BROKEN("map of 4097 entries", -EINVAL, hdr(buf)->map_cap = 4097);
    BROKEN("unterminated name", -EINVAL,
           memset(hdr(buf)->program, 'x', sizeof(hdr(buf)->program)));
    BROKEN("unterminated name", -EINVAL,
           memset(hdr(buf)->topology, 'x', sizeof(hdr(buf)->topology)));
    BROKEN("17 allocations, the table has 16", -EINVAL,
           data(buf)->nalloc = 17);
    BROKEN("chunk size 0", -EINVAL, data(buf)->chunk_size = 0);
    BROKEN("fragmentation out of range", -EINVAL,
           data(buf)->fragmentation = NAN);
    /* A shared pool's table (version 5; the good one has 3 rows). */
    BROKEN("a bad shared pool's table", -EINVAL,
           data(buf)->share_nproc = SNAP_SHARE_PROCS + 1);
    BROKEN("a bad shared pool's table", -EINVAL,
           data(buf)->share_name[0] = '\0');  /* rows, and no name */
    BROKEN("a bad shared pool's table", -EINVAL,
           memset(data(buf)->share_name, 'x', 72));
    BROKEN("a bad shared pool's table", -EINVAL,
           data(buf)->share_self = 3);   /* a row past the table */
    BROKEN("shared pool: bad process 0", -EINVAL,
           data(buf)->share_proc[0].pid = 0);
    BROKEN("shared pool: bad process 2", -EINVAL,
           data(buf)->share_proc[2].slot = SNAP_SHARE_PROCS);
    BROKEN("tier 1: bad presence", -EINVAL, data(buf)->tier[1].present = 2);
    BROKEN("device 2: unterminated name", -EINVAL,
           memset(dev(buf, 2)->model, 'x', sizeof(dev(buf, 2)->model)));
    BROKEN("device 1: NUMA node", -EINVAL, dev(buf, 1)->numa = -2);
    BROKEN("device 3: fragmentation", -EINVAL,
           dev(buf, 3)->fragmentation = -0.5);
    BROKEN("device 0: fragmentation", -EINVAL,
           dev(buf, 0)->fragmentation = INFINITY);
    BROKEN("device 1: 257 map entries", -EINVAL, dev(buf, 1)->map_count = 257);
    BROKEN("device 0: map units of 0 bytes", -EINVAL,
           dev(buf, 0)->map_unit = 0);
    BROKEN("device 0: bad map entry 0", -EINVAL,
           map_of(buf, 0)[0].state = SNAP_NSTATES);
    BROKEN("device 0: bad map entry 1", -EINVAL, map_of(buf, 0)[1].units = 0);
    BROKEN("allocation 1: device 4", -EINVAL, alloc_row(buf, 1)->device = 4);
    BROKEN("allocation 0: device -1", -EINVAL, alloc_row(buf, 0)->device = -1);
    BROKEN("allocation 2: spans 0", -EINVAL, alloc_row(buf, 2)->ndevices = 0);
    BROKEN("allocation 2: spans 5", -EINVAL, alloc_row(buf, 2)->ndevices = 5);
    BROKEN("allocation 0: tier 3", -EINVAL, alloc_row(buf, 0)->tier = 3);
    BROKEN("allocation 1: bad age", -EINVAL, alloc_row(buf, 1)->age_s = -1);
    BROKEN("allocation 1: bad age", -EINVAL, alloc_row(buf, 1)->age_s = NAN);
    BROKEN("link 1 to 6: bandwidth out of range", -EINVAL,
           link_of(buf, 1, 6)->bandwidth_gbs = NAN);
    BROKEN("link 0 to 5: bandwidth out of range", -EINVAL,
           link_of(buf, 0, 5)->bandwidth_gbs = -1);
    BROKEN("link 2 to itself carries bytes", -EINVAL,
           link_of(buf, 2, 2)->coll_bytes = 1);
    /* Rows past nalloc are not looked at. */
    memcpy(b, good, len);
    alloc_row(b, 5)->tier = 99;
    struct snap_view v;
    char err[256];
    assert_int_equal(snap_parse(b, len, &ex_ok, &v, err, sizeof(err)), 0);
    snap_view_free(&v);
    /* Too big for any snapshot: refused before it is copied. */
    char *huge = calloc(1, snap_size_max() + 1);
    assert_non_null(huge);
    memcpy(huge, good, sizeof(struct snap_header));
    expect_error(huge, snap_size_max() + 1, &ex_ok, -EINVAL,
                 "more than any snapshot");
    free(huge);
    free(b);
    free(good);
}

static void test_short(void **state)
{
    (void)state;
    size_t len;
    char *good = build(&len);
    expect_error(good, 0, &ex_ok, -EINVAL, "truncated: 0 bytes");
    expect_error(good, 7, &ex_ok, -EINVAL, "truncated: 7 bytes");
    expect_error(good, 12, &ex_ok, -EINVAL, "truncated: 12 bytes");
    expect_error(good, 100, &ex_ok, -EINVAL, "a header takes 200");
    expect_error(good, 300, &ex_ok, -EINVAL, "truncated: 300 bytes, the "
                 "header says");
    expect_error("garbage!garbage!", 16, &ex_ok, -EINVAL, "bad magic");
    free(good);
}

/* What people read is printable ASCII, whatever the writer put there. */
static void test_strings_cleaned(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    strcpy(hdr(buf)->program, "a\033[2Jb\xc3\xa9");
    strcpy(dev(buf, 0)->model, "x\ny");
    struct snap_view v;
    char err[256];
    assert_int_equal(snap_parse(buf, len, &ex_ok, &v, err, sizeof(err)), 0);
    assert_string_equal(v.hdr->program, "a?[2Jb??");
    assert_string_equal(v.dev[0].model, "x?y");
    snap_view_free(&v);
    free(buf);
}

static void test_names(void **state)
{
    (void)state;
    char name[64];
    struct snap_name n = {1000, 4026531836u, 4242, 7}, got;
    assert_int_equal(snap_name(name, sizeof(name), &n), 0);
    assert_string_equal(name, "umpool-1000-4026531836-4242-7");
    assert_true(snap_name_parse(name, &got));
    assert_int_equal(got.uid, 1000);
    assert_int_equal(got.pid_ns, 4026531836u);
    assert_int_equal(got.pid, 4242);
    assert_int_equal(got.pool_id, 7);
    assert_int_equal(snap_name(name, 10, &n), -ENAMETOOLONG);
    assert_true(snap_name_parse("umpool-0-0-1-18446744073709551615", &got));
    assert_int_equal(got.pool_id, UINT64_MAX);
    assert_int_equal(got.pid_ns, 0);
    static const char *const bad[] = {
        "umpool-1000-4242-7", /* the form without a namespace */
        "umpool-1000-1-4242",        "umpool-1000-1-4242-",
        "umpool-1000-1-4242-7x",     "umpool--1-4242-7",
        "umpool-1000--4242-7",       "umpool-+1-1-4242-7",
        "umpool-1000-1-0-7",         "umpool-1000-1-4242-0",
        "umpool-4294967296-1-1-1",   "umpool-1-4294967296-1-1",
        "umpool-1-1-2147483648-1",   "umpool-1-1-1-18446744073709551616",
        "xmpool-1000-1-4242-7",      "umpool-1000-1-4242-7-8",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (snap_name_parse(bad[i], &got))
            fail_msg("accepted the name '%s'", bad[i]);
    uint32_t ns = 0;
    assert_int_equal(snap_pid_ns(&ns), 0);
    assert_true(ns != 0);
}

static uint64_t units_of(const struct snap_map *m, uint32_t n)
{
    uint64_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        c += m[i].units;
    return c;
}

static void test_map_encode(void **state)
{
    (void)state;
    struct snap_map out[64];
    uint64_t per;
    /* Fits: as it is, neighbours of one state merged, empty runs gone. */
    const struct snap_run small[] = {{SNAP_USED, 3}, {SNAP_USED, 2},
                                     {SNAP_CACHED, 0}, {SNAP_FREE, 10}};
    uint32_t n = snap_map_encode(small, 4, 64, out, &per);
    assert_int_equal(per, 1);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].state, SNAP_USED);
    assert_int_equal(out[0].units, 5);
    assert_int_equal(out[1].state, SNAP_FREE);
    assert_int_equal(out[1].units, 10);
    /* Few entries of many granules: still exact, one granule in 10000. */
    const struct snap_run big[] = {{SNAP_USED, 1000}, {SNAP_CACHED, 1},
                                   {SNAP_HOST, 300}, {SNAP_FREE, 8699}};
    n = snap_map_encode(big, 4, 64, out, &per);
    assert_int_equal(per, 1);
    assert_int_equal(n, 4);
    assert_int_equal(out[1].state, SNAP_CACHED);
    assert_int_equal(out[1].units, 1);
    assert_int_equal(units_of(out, n), 10000);
    /* More entries than fit: units of ceil(T / cap) granules, each of the
     * state most of it has (ties: the first state), at most cap. */
    struct snap_run many[301];
    for (int i = 0; i < 300; i++)
        many[i] = (struct snap_run){i % 2 ? SNAP_CACHED : SNAP_USED, 1};
    many[300] = (struct snap_run){SNAP_FREE, 29700};
    n = snap_map_encode(many, 301, 64, out, &per);
    assert_int_equal(per, (30000 + 63) / 64);
    assert_true(n <= 64);
    assert_int_equal(units_of(out, n), (30000 + per - 1) / per);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].state, SNAP_USED);
    assert_int_equal(out[0].units, 1);
    assert_int_equal(out[1].state, SNAP_FREE);
    /* A few cached granules in each unit of free ones: they show. */
    struct snap_run sparse[100];
    for (int i = 0; i < 100; i++)
        sparse[i] = (struct snap_run){i % 2 ? SNAP_CACHED : SNAP_FREE,
                                      i % 2 ? 1 : 999};
    n = snap_map_encode(sparse, 100, 10, out, &per);
    assert_int_equal(per, 5000);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].state, SNAP_CACHED);
    assert_int_equal(out[0].units, 10);
    /* Nothing at all. */
    assert_int_equal(snap_map_encode(NULL, 0, 64, out, &per), 0);
}

/* The writer's half goes through a file descriptor; the reader's copies
 * from a mapping of the same file. */
static void test_seqlock_copy(void **state)
{
    (void)state;
    size_t len;
    char *img = build(&len);
    int fd = memfd_create("snap", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, img, len), (ssize_t)len);
    struct snap_header *h = mmap(NULL, len, PROT_READ | PROT_WRITE,
                                 MAP_SHARED, fd, 0);
    assert_true(h != MAP_FAILED);
    char *copy = malloc(len);
    char *body = malloc(len - sizeof(*h));
    assert_non_null(copy);
    assert_non_null(body);
    assert_int_equal(snap_copy(h, len, copy), 0);
    assert_memory_equal(copy, img, len);
    atomic_store(&h->seq, 5); /* a writer at work */
    assert_int_equal(snap_copy(h, len, copy), -EAGAIN);
    memset(body, 0x5a, len - sizeof(*h));
    /* The writer's count is its own: what the file says is not read. */
    uint64_t seq = 6;
    assert_int_equal(snap_write(fd, &seq, body, len - sizeof(*h)), 0);
    assert_int_equal(seq, 8);
    assert_int_equal(snap_seq(h), 8);
    assert_int_equal(snap_copy(h, len, copy), 0);
    assert_memory_equal(copy + sizeof(*h), body, len - sizeof(*h));
    /* The header around seq is left as it was. */
    assert_memory_equal(copy, img, offsetof(struct snap_header, seq));
    assert_memory_equal(copy + offsetof(struct snap_header, request),
                        img + offsetof(struct snap_header, request),
                        sizeof(*h) - offsetof(struct snap_header, request));
    /* A file shrunk under the writer: it writes, it does not fault. */
    assert_int_equal(ftruncate(fd, 100), 0);
    assert_int_equal(snap_write(fd, &seq, body, len - sizeof(*h)), 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, len);
    munmap(h, len);
    close(fd);
    free(body);
    free(copy);
    free(img);
}

static void test_proc_start(void **state)
{
    (void)state;
    uint64_t a = 0, b = 0;
    assert_int_equal(snap_proc_start(getpid(), &a), 0);
    assert_int_equal(snap_proc_start(getpid(), &b), 0);
    assert_true(a > 0);
    assert_int_equal(a, b);
    assert_int_equal(snap_proc_start(INT32_MAX, &a), -ENOENT);
}

/* The outputs on the fixed snapshot: every Prometheus line is a comment
 * or a umpool_ sample, the SVG has five state groups per device. */
static void test_formats(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    struct snap_view v;
    char err[256], *text = NULL;
    size_t tlen = 0;
    assert_int_equal(snap_parse(buf, len, &ex_ok, &v, err, sizeof(err)), 0);
    struct fmt_pool p = {&v, NULL};
    FILE *f = open_memstream(&text, &tlen);
    assert_non_null(f);
    fmt_prometheus(f, &p, 1);
    fclose(f);
    int samples = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# HELP umpool_", 14) ||
            !strncmp(line, "# TYPE umpool_", 14))
            continue;
        if (strncmp(line, "umpool_", 7) || !strstr(line, "pid=\"4242\""))
            fail_msg("bad exposition line: %s", line);
        samples++;
    }
    assert_true(samples > 50);
    free(text);
    f = open_memstream(&text, &tlen);
    assert_non_null(f);
    fmt_svg(f, &v);
    fclose(f);
    int groups = 0;
    for (char *s = text; (s = strstr(s, "<g class=\"state\"")); s++)
        groups++;
    assert_int_equal(groups, 4 * SNAP_NSTATES);
    free(text);
    char sz[FMT_SIZE_LEN];
    assert_string_equal(fmt_size(sz, 0), "0 B");
    assert_string_equal(fmt_size(sz, 1023), "1023 B");
    assert_string_equal(fmt_size(sz, 1024), "1.0 KiB");
    assert_string_equal(fmt_size(sz, 1536), "1.5 KiB");
    assert_string_equal(fmt_size(sz, (1ull << 20) - 1), "1.0 MiB");
    assert_string_equal(fmt_size(sz, UINT64_MAX), "16.0 EiB");
    snap_view_free(&v);
    free(buf);
}

/* The fuzz target's entry on truncated and mutated snapshots. */
static void test_corpus(void **state)
{
    (void)state;
    size_t len;
    char *good = build(&len);
    assert_int_equal(fuzz_snapshot_one((uint8_t *)good, len), 0);
    /* Every proper prefix is refused (the size is in the header). */
    for (size_t k = 0; k < len; k += k < 1024 ? 1 : 61)
        if (fuzz_snapshot_one((uint8_t *)good, k) == 0)
            fail_msg("accepted a prefix of %zu bytes", k);
    /* Each byte of the header, data and devices, set to telling values;
     * the tables and maps sampled. */
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    char *b = malloc(len);
    assert_non_null(b);
    size_t accepted = 0, refused = 0;
    for (size_t off = 0; off < len; off += off < snap_off_alloc(4) ? 1 : 7)
        for (size_t i = 0; i < sizeof(values); i++) {
            memcpy(b, good, len);
            if ((uint8_t)b[off] == values[i])
                continue;
            b[off] = (char)values[i];
            if (fuzz_snapshot_one((uint8_t *)b, len) == 0)
                accepted++;
            else
                refused++;
        }
    /* Random bytes in random places, a fixed seed. */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 3000; round++) {
        memcpy(b, good, len);
        for (int k = 1 + round % 8; k > 0; k--) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b[(x >> 8) % len] = (char)x;
        }
        if (fuzz_snapshot_one((uint8_t *)b, len) == 0)
            accepted++;
        else
            refused++;
    }
    /* Both kinds happened: counters and sizes take any value, the layout
     * fields do not. */
    assert_true(accepted > 1000);
    assert_true(refused > 100);
    free(b);
    free(good);
}

/* A map unit of UINT64_MAX bytes: a pixel is worth more than 2^64 bytes,
 * which the legend shows as the most it can say. */
static void test_svg_huge_unit(void **state)
{
    (void)state;
    size_t len;
    char *buf = build(&len);
    dev(buf, 0)->map_unit = UINT64_MAX;
    struct snap_view v;
    char err[256], *text = NULL;
    size_t tlen = 0;
    assert_int_equal(snap_parse(buf, len, &ex_ok, &v, err, sizeof(err)), 0);
    FILE *f = open_memstream(&text, &tlen);
    assert_non_null(f);
    fmt_svg(f, &v);
    fclose(f);
    char *dev0 = strstr(text, "device 0: ");
    assert_non_null(dev0);
    char *end = strstr(dev0, "</text>");
    assert_non_null(end);
    *end = '\0';
    if (!strstr(dev0, "; 1 px = 16.0 EiB"))
        fail_msg("legend: %s", dev0);
    free(text);
    snap_view_free(&v);
    free(buf);
}

/* A parsed copy of buf (which the caller frees). */
static struct snap_view view_of(const char *buf, size_t len)
{
    struct snap_view v;
    char err[256];
    if (snap_parse(buf, len, &ex_ok, &v, err, sizeof(err)))
        fail_msg("snap_parse: %s", err);
    return v;
}

/* The rate line fmt_rates prints for buf after the rounds in prev. */
static char *rate_line(const char *buf, size_t len, struct fmt_prev *prev,
                       size_t *n)
{
    struct snap_view v = view_of(buf, len);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    assert_non_null(f);
    fmt_rates(f, &v, prev, n, 4);
    fclose(f);
    snap_view_free(&v);
    return text;
}

/* watch's rates: counters per second between rounds; counters that went
 * back (another process under the same pid and pool id) start afresh. */
static void test_rates(void **state)
{
    (void)state;
    size_t len, n = 0;
    struct fmt_prev prev[4];
    char *buf = build(&len);
    char *line = rate_line(buf, len, prev, &n);
    assert_string_equal(line, "rates: (from the next refresh on)\n");
    free(line);
    assert_int_equal(n, 1);
    /* Two seconds later: 1000 more allocations and 6 more spills. */
    data(buf)->updated_ns += 2000000000ull;
    dev(buf, 0)->alloc_count += 600;
    dev(buf, 3)->alloc_count += 400;
    dev(buf, 1)->spill_count += 6;
    line = rate_line(buf, len, prev, &n);
    assert_string_equal(line, "rates: 500 allocs/s, 0 frees/s, 3 spills/s, "
                              "0 restores/s\n");
    free(line);
    /* A new process under the same pid and pool id: fewer spills than
     * before, allocations and frees as they were. */
    data(buf)->updated_ns += 1000000000ull;
    dev(buf, 1)->spill_count -= 7;
    line = rate_line(buf, len, prev, &n);
    assert_string_equal(line,
                        "rates: restarted (from the next refresh on)\n");
    free(line);
    /* ... and from there on, rates again. */
    data(buf)->updated_ns += 1000000000ull;
    dev(buf, 2)->restore_count += 5;
    line = rate_line(buf, len, prev, &n);
    assert_string_equal(line, "rates: 0 allocs/s, 0 frees/s, 0 spills/s, "
                              "5 restores/s\n");
    free(line);
    /* Created anew, counters up: a restart too. */
    hdr(buf)->created_ns += 1;
    data(buf)->updated_ns += 1000000000ull;
    dev(buf, 0)->alloc_count += 10;
    line = rate_line(buf, len, prev, &n);
    assert_string_equal(line,
                        "rates: restarted (from the next refresh on)\n");
    free(line);
    /* Another pool is another row. */
    hdr(buf)->pool_id = 4;
    line = rate_line(buf, len, prev, &n);
    assert_string_equal(line, "rates: (from the next refresh on)\n");
    free(line);
    assert_int_equal(n, 2);
    free(buf);
}

/* ---- the tool's segments (tools/inspect/inspect_seg.c) ------------------------- */

struct shm_dir {
    char path[64];
    uint32_t uid, ns;
};

static void shm_dir_make(struct shm_dir *d)
{
    snprintf(d->path, sizeof(d->path), "/tmp/test_inspect_seg.XXXXXX");
    assert_non_null(mkdtemp(d->path));
    d->uid = (uint32_t)geteuid();
    assert_int_equal(snap_pid_ns(&d->ns), 0);
}

static void shm_dir_remove(struct shm_dir *d)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
    assert_int_equal(system(cmd), 0);
}

/* Writes a valid segment of pid in namespace ns under its name (hidden:
 * with a dot) into path_out. */
static void put_segment(const struct shm_dir *d, uint32_t ns, int32_t pid,
                        uint64_t pool, bool hidden, char *path_out,
                        size_t pathlen)
{
    struct snapgen_opts o = {d->uid, pid, 0, pool, ns, 0, 0, 0};
    size_t len;
    char *img = snapgen_build(&o, &len);
    assert_non_null(img);
    char name[96];
    struct snap_name sn = {d->uid, ns, pid, pool};
    assert_int_equal(snap_name(name, sizeof(name), &sn), 0);
    snprintf(path_out, pathlen, "%s/%s%s", d->path, hidden ? "." : "", name);
    FILE *f = fopen(path_out, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(img);
}

/* A pid that no process has (one that just exited). */
static int32_t dead_pid(void)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    return (int32_t)child;
}

static void scan(const struct shm_dir *d, struct seg **segs, size_t *n,
                 size_t *foreign)
{
    char err[256], one[512];
    int rc = seg_scan(d->path, d->uid, true, segs, n, foreign, one,
                      sizeof(one), err, sizeof(err));
    if (rc)
        fail_msg("seg_scan: %s", err);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Files named for us but owned by someone else (hidden ones too) are left
 * out of the scan: not read (another user's unreadable file made every
 * reader fail), never removed. Needs root to give a file away. */
static void test_scan_foreign(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* only root can give a file to someone else */
    struct shm_dir d;
    shm_dir_make(&d);
    int32_t dead = dead_pid();
    char mine[256], theirs[256], hidden[256];
    put_segment(&d, d.ns, dead, 1, false, mine, sizeof(mine));
    put_segment(&d, d.ns, dead, 2, false, theirs, sizeof(theirs));
    put_segment(&d, d.ns, dead, 3, true, hidden, sizeof(hidden));
    assert_int_equal(chown(theirs, d.uid + 4242, (gid_t)-1), 0);
    assert_int_equal(chmod(theirs, 0), 0);
    assert_int_equal(chown(hidden, d.uid + 4242, (gid_t)-1), 0);
    struct seg *segs;
    size_t n, foreign;
    scan(&d, &segs, &n, &foreign);
    assert_int_equal(n, 1);
    assert_int_equal(foreign, 2);
    assert_int_equal(segs[0].pool_id, 1);
    seg_load_all(segs, n, false, d.ns);
    assert_int_equal(segs[0].rc, 0);
    assert_int_equal(segs[0].status, SEG_EXITED);
    assert_true(seg_removable(&segs[0], d.uid));
    /* Removal checks the owner again, on the file it opens. */
    assert_false(seg_removable(&segs[0], d.uid + 1));
    assert_int_equal(seg_remove(&segs[0], d.uid + 1), -ESTALE);
    assert_true(exists(mine));
    assert_int_equal(seg_remove(&segs[0], d.uid), 0);
    assert_false(exists(mine));
    assert_true(exists(theirs));
    assert_true(exists(hidden));
    seg_free_all(segs, n);
    shm_dir_remove(&d);
}

/* --clean decides, then removes: a file that took the name in between (a
 * new process under the same pid) is kept. */
static void test_clean_replaced(void **state)
{
    (void)state;
    struct shm_dir d;
    shm_dir_make(&d);
    int32_t dead = dead_pid();
    char path[256], hidden[256];
    put_segment(&d, d.ns, dead, 1, false, path, sizeof(path));
    put_segment(&d, d.ns, dead, 2, true, hidden, sizeof(hidden));
    struct seg *segs, *segs2;
    size_t n, n2, foreign;
    scan(&d, &segs, &n, &foreign);
    assert_int_equal(n, 2);
    assert_int_equal(foreign, 0);
    seg_load_all(segs, n, false, d.ns);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(segs[i].status, SEG_EXITED);
        assert_true(seg_removable(&segs[i], d.uid));
    }
    /* Both names now lead to new files (made before the old ones go, so
     * that their inodes differ). */
    char other[256];
    put_segment(&d, d.ns, dead, 9, false, other, sizeof(other));
    assert_int_equal(rename(other, path), 0);
    put_segment(&d, d.ns, dead, 9, false, other, sizeof(other));
    assert_int_equal(rename(other, hidden), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(seg_remove(&segs[i], d.uid), -ESTALE);
    assert_true(exists(path));
    assert_true(exists(hidden));
    /* The same file, changed since: a writer at work, kept too. */
    scan(&d, &segs2, &n2, &foreign);
    seg_load_all(segs2, n2, false, d.ns);
    assert_int_equal(n2, 2);
    struct timespec pause = {0, 20 * 1000 * 1000}; /* past a clock tick */
    nanosleep(&pause, NULL);
    assert_int_equal(chmod(path, 0600), 0); /* a new ctime */
    for (size_t i = 0; i < n2; i++)
        if (!segs2[i].hidden)
            assert_int_equal(seg_remove(&segs2[i], d.uid), -ESTALE);
    assert_true(exists(path));
    seg_free_all(segs2, n2);
    /* A symbolic link under the name is not followed. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(hidden, path), 0);
    assert_int_equal(seg_remove(&segs[0], d.uid), -ESTALE);
    assert_true(exists(path));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(seg_remove(&segs[0], d.uid), -ENOENT);
    seg_free_all(segs, n);
    shm_dir_remove(&d);
}

/* A segment written in another pid namespace (a container sharing
 * /dev/shm): its pid says nothing here, so it is neither running nor
 * exited, and never removed. */
static void test_other_namespace(void **state)
{
    (void)state;
    struct shm_dir d;
    shm_dir_make(&d);
    int32_t dead = dead_pid();
    char mine[256], theirs[256];
    put_segment(&d, d.ns, dead, 1, false, mine, sizeof(mine));
    put_segment(&d, d.ns + 1, dead, 1, false, theirs, sizeof(theirs));
    /* Our own pid in another namespace: not running here either. */
    put_segment(&d, d.ns + 1, (int32_t)getpid(), 2, false, theirs,
                sizeof(theirs));
    struct seg *segs;
    size_t n, foreign;
    scan(&d, &segs, &n, &foreign);
    assert_int_equal(n, 3);
    seg_load_all(segs, n, false, d.ns);
    int unknown = 0;
    for (size_t i = 0; i < n; i++) {
        const struct seg *s = &segs[i];
        assert_int_equal(s->rc, 0);
        if (s->pid_ns == d.ns) {
            assert_int_equal(s->status, SEG_EXITED);
            assert_true(seg_removable(s, d.uid));
        } else {
            assert_int_equal(s->status, SEG_UNKNOWN);
            assert_int_equal(s->view.hdr->pid_ns, d.ns + 1);
            assert_false(seg_removable(s, d.uid));
            unknown++;
        }
    }
    assert_int_equal(unknown, 2);
    seg_free_all(segs, n);
    /* The header must say the namespace the name says. */
    struct snapgen_opts o = {d.uid, dead, 0, 5, d.ns, 0, 0, 0};
    size_t len;
    char *img = snapgen_build(&o, &len);
    assert_non_null(img);
    char name[96], path[256];
    struct snap_name sn = {d.uid, d.ns + 7, dead, 5};
    assert_int_equal(snap_name(name, sizeof(name), &sn), 0);
    snprintf(path, sizeof(path), "%s/%s", d.path, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(img);
    scan(&d, &segs, &n, &foreign);
    seg_load_all(segs, n, false, d.ns);
    bool seen = false;
    for (size_t i = 0; i < n; i++)
        if (segs[i].pool_id == 5) {
            seen = true;
            assert_int_equal(segs[i].rc, -EINVAL);
            assert_non_null(strstr(segs[i].err, "pid namespace"));
        }
    assert_true(seen);
    seg_free_all(segs, n);
    shm_dir_remove(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_owner),
        cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_broken_fields),
        cmocka_unit_test(test_short),
        cmocka_unit_test(test_strings_cleaned),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_map_encode),
        cmocka_unit_test(test_seqlock_copy),
        cmocka_unit_test(test_proc_start),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_svg_huge_unit),
        cmocka_unit_test(test_rates),
        cmocka_unit_test(test_scan_foreign),
        cmocka_unit_test(test_clean_replaced),
        cmocka_unit_test(test_other_namespace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
