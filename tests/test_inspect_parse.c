/*
 * The snapshot layout's reader (lib/snapshot.c): every way a segment can
 * be wrong gives an error and one line saying why, never a crash; names,
 * the map encoding, the seqlock copy; and a corpus of truncated and
 * mutated snapshots through the fuzz target's entry point (so that make
 * check exercises it without libFuzzer).
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
#include <unistd.h>

#include <cmocka.h>

#include "fuzz_entry.h"
#include "inspect_fmt.h"
#include "snapgen.h"
#include "snapshot.h"

static const struct snapgen_opts gen = {FUZZ_UID, 4242, 0, 3};
static const struct snap_expect ex_ok = {FUZZ_UID, FUZZ_UID, 0, 0};

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
    uint32_t uid;
    int32_t pid;
    uint64_t id;
    assert_int_equal(snap_name(name, sizeof(name), 1000, 4242, 7), 0);
    assert_string_equal(name, "umpool-1000-4242-7");
    assert_true(snap_name_parse(name, &uid, &pid, &id));
    assert_int_equal(uid, 1000);
    assert_int_equal(pid, 4242);
    assert_int_equal(id, 7);
    assert_int_equal(snap_name(name, 10, 1000, 4242, 7), -ENAMETOOLONG);
    assert_true(snap_name_parse("umpool-0-1-18446744073709551615", &uid, &pid,
                                &id));
    assert_int_equal(id, UINT64_MAX);
    static const char *const bad[] = {
        "umpool-1000-4242",       "umpool-1000-4242-",
        "umpool-1000-4242-7x",    "umpool--4242-7",
        "umpool-+1-4242-7",       "umpool-1000-0-7",
        "umpool-1000-4242-0",     "umpool-4294967296-1-1",
        "umpool-1-2147483648-1",  "umpool-1-1-18446744073709551616",
        "xmpool-1000-4242-7",     "umpool-1000-4242-7-8",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (snap_name_parse(bad[i], &uid, &pid, &id))
            fail_msg("accepted the name '%s'", bad[i]);
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

static void test_seqlock_copy(void **state)
{
    (void)state;
    size_t len;
    char *seg = build(&len);
    char *copy = malloc(len);
    assert_non_null(copy);
    struct snap_header *h = hdr(seg);
    assert_int_equal(snap_copy(h, len, copy), 0);
    assert_memory_equal(copy, seg, len);
    atomic_store(&h->seq, 5); /* a writer at work */
    assert_int_equal(snap_copy(h, len, copy), -EAGAIN);
    char *body = malloc(len - sizeof(*h));
    assert_non_null(body);
    memset(body, 0x5a, len - sizeof(*h));
    atomic_store(&h->seq, 6);
    snap_publish(h, body);
    assert_int_equal(snap_seq(h), 8);
    assert_int_equal(snap_copy(h, len, copy), 0);
    assert_memory_equal(copy + sizeof(*h), body, len - sizeof(*h));
    free(body);
    free(copy);
    free(seg);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
