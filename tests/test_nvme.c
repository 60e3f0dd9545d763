/* The NVMe store: crc32c, round trips on both engines, batches deeper than
 * the queue, limits, injected faults, and nothing left behind. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/crc32c.h"
#include "tier/nvme.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

/* A fresh spill directory under base; NULL when base is not usable. */
static char *make_dir(const char *base)
{
    char *path = malloc(strlen(base) + 32);

    assert_non_null(path);
    sprintf(path, "%s/umpool-nvme-test-XXXXXX", base);
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static void drop_dir(char *path)
{
    assert_int_equal(tu_count_entries(path), 0);
    assert_int_equal(rmdir(path), 0);
    free(path);
}

static void fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t *w = buf;

    for (size_t i = 0; i < len / sizeof(*w); i++)
        w[i] = seed * 0x9E3779B97F4A7C15ull + i;
}

static void check(const void *buf, size_t len, uint64_t seed)
{
    const uint64_t *w = buf;

    for (size_t i = 0; i < len / sizeof(*w); i++)
        if (w[i] != seed * 0x9E3779B97F4A7C15ull + i)
            fail_msg("seed %llu: word %zu differs", (unsigned long long)seed,
                     i);
}

static void test_crc32c_vectors(void **state)
{
    unsigned char zeros[32] = { 0 };
    unsigned char big[4099];

    (void)state;
    assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(crc32c(0, zeros, sizeof(zeros)), 0x8A9136AAu);
    assert_int_equal(crc32c_sw(0, zeros, sizeof(zeros)), 0x8A9136AAu);
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 31 + 7);
    /* both paths agree, at odd lengths and when extended piecewise */
    for (size_t n = 0; n < 24; n++)
        assert_int_equal(crc32c(0, big + 1, n), crc32c_sw(0, big + 1, n));
    assert_int_equal(crc32c(crc32c(0, big, 1000), big + 1000, 3099),
                     crc32c_sw(0, big, sizeof(big)));
}

/* Buffers long enough for the three-lane path (blocks of 3 x 4096 bytes),
 * at lengths around the block edges, misaligned, and extended piecewise
 * from a non-zero crc. */
static void test_crc32c_lanes(void **state)
{
    enum { LEN = 5 * 3 * 4096 + 777 };
    static const size_t lens[] = {12287, 12288, 12289, 24576, 24583,
                                  LEN - 1};
    unsigned char *b = malloc(LEN);

    (void)state;
    assert_non_null(b);
    for (size_t i = 0; i < LEN; i++)
        b[i] = (unsigned char)(i * 131 + (i >> 9) * 7 + 3);
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
        assert_int_equal(crc32c(0, b + 1, lens[k]),
                         crc32c_sw(0, b + 1, lens[k]));
    assert_int_equal(crc32c(crc32c(0, b, 5000), b + 5000, LEN - 5000),
                     crc32c_sw(0, b, LEN));
    /* one flipped bit in the last lane of a block changes the result */
    uint32_t good = crc32c(0, b, LEN);
    b[2 * 4096 + 100] ^= 0x10;
    assert_int_not_equal(crc32c(0, b, LEN), good);
    assert_int_equal(crc32c(0, b, LEN), crc32c_sw(0, b, LEN));
    free(b);
}

struct store_case {
    const char *base;
    bool force_threads;
    unsigned qd;
};

/* Writes nslots distinct patterns in batches of batch, reads them back. */
static void round_trip(struct nvme_store *st, size_t slot_size, int nslots,
                       int batch)
{
    uint64_t *slot = calloc((size_t)nslots, sizeof(*slot));
    struct nvme_io *io = calloc((size_t)batch, sizeof(*io));

    assert_non_null(slot);
    assert_non_null(io);
    for (int i = 0; i < batch; i++) {
        io[i].buf = nvme_buffer_alloc(st, slot_size);
        assert_non_null(io[i].buf);
    }
    for (int i = 0; i < nslots; i++)
        assert_int_equal(nvme_slot_alloc(st, &slot[i]), 0);
    for (int b = 0; b < nslots; b += batch) {
        int n = nslots - b < batch ? nslots - b : batch;

        for (int i = 0; i < n; i++) {
            io[i].slot = slot[b + i];
            fill(io[i].buf, slot_size, slot[b + i] + 1);
        }
        assert_int_equal(nvme_write(st, io, (size_t)n), 0);
        for (int i = 0; i < n; i++)
            assert_int_equal(io[i].res, 0);
    }
    /* read back in reverse batches so no buffer still holds its data */
    for (int b = 0; b < nslots; b += batch) {
        int n = nslots - b < batch ? nslots - b : batch;

        for (int i = 0; i < n; i++) {
            io[i].slot = slot[nslots - 1 - b - i];
            memset(io[i].buf, 0xee, slot_size);
        }
        assert_int_equal(nvme_read(st, io, (size_t)n), 0);
        for (int i = 0; i < n; i++) {
            assert_int_equal(io[i].res, 0);
            check(io[i].buf, slot_size, io[i].slot + 1);
        }
    }
    for (int i = 0; i < nslots; i++)
        nvme_slot_free(st, slot[i]);
    for (int i = 0; i < batch; i++)
        nvme_buffer_free(st, io[i].buf);
    free(io);
    free(slot);
}

static void run_case(const struct store_case *c)
{
    int fds = tu_count_fds();
    char *dir = make_dir(c->base);

    if (!dir) {
        print_message("nvme: %s not usable, case skipped\n", c->base);
        skip();
    }

    const char *dirs[] = { dir };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 1, .slot_size = MIB,
                               .queue_depth = c->qd,
                               .force_threads = c->force_threads };
    struct nvme_store *st;

    assert_int_equal(nvme_open(&cfg, &st), 0);
    print_message("nvme: %s (qd %u%s): engine %s\n", c->base, c->qd,
                  c->force_threads ? ", forced threads" : "",
                  nvme_engine(st));
    if (c->force_threads)
        assert_string_equal(nvme_engine(st), "threads");
    /* a batch deeper than the queue, then slot reuse with new patterns */
    round_trip(st, MIB, 48, 40);
    round_trip(st, MIB, 24, 7);
    nvme_close(st);
    drop_dir(dir);
    assert_int_equal(tu_count_fds(), fds);
}

static void test_tmp(void **state)
{
    struct store_case c = { .base = "/tmp", .qd = 8 };

    (void)state;
    run_case(&c);
}

static void test_tmp_default_qd(void **state)
{
    struct store_case c = { .base = "/tmp", .qd = 0 };

    (void)state;
    run_case(&c);
}

static void test_shm(void **state)
{
    struct store_case c = { .base = "/dev/shm", .qd = 8 };

    (void)state;
    run_case(&c);
}

static void test_forced_threads(void **state)
{
    struct store_case c = { .base = "/tmp", .qd = 8, .force_threads = true };

    (void)state;
    run_case(&c);
}

static void test_two_dirs(void **state)
{
    char *a = make_dir("/tmp"), *b = make_dir("/tmp");
    const char *dirs[] = { a, b };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 2, .slot_size = 2 * MIB,
                               .queue_depth = 4 };
    struct nvme_store *st;
    uint64_t s0, s1;

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(nvme_open(&cfg, &st), 0);
    /* round-robin: consecutive slots land in different directories */
    assert_int_equal(nvme_slot_alloc(st, &s0), 0);
    assert_int_equal(nvme_slot_alloc(st, &s1), 0);
    assert_int_not_equal(s0 % 2, s1 % 2);
    nvme_slot_free(st, s0);
    nvme_slot_free(st, s1);
    round_trip(st, 2 * MIB, 20, 9);
    nvme_close(st);
    drop_dir(a);
    drop_dir(b);
}

static void test_limit(void **state)
{
    char *dir = make_dir("/tmp");
    const char *dirs[] = { dir };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 1, .slot_size = MIB,
                               .limit = 5 * MIB };
    struct nvme_store *st;
    uint64_t s[5], extra;

    (void)state;
    assert_non_null(dir);
    assert_int_equal(nvme_open(&cfg, &st), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(nvme_slot_alloc(st, &s[i]), 0);
    extra = 12345;
    assert_int_equal(nvme_slot_alloc(st, &extra), -ENOSPC);
    assert_int_equal(extra, 12345);     /* untouched on failure */
    nvme_slot_free(st, s[2]);
    assert_int_equal(nvme_slot_alloc(st, &extra), 0);
    assert_int_equal(extra, s[2]);      /* the freed slot is reused */
    nvme_close(st);
    drop_dir(dir);
}

static void test_bad_input(void **state)
{
    const char *dirs[] = { "/tmp" };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 1, .slot_size = 4096 };
    struct nvme_store *st = NULL;
    const char *missing[] = { "/nonexistent/umpool" };
    struct nvme_config bad = { .dirs = missing, .ndirs = 1, .slot_size = MIB };

    (void)state;
    assert_int_equal(nvme_open(&cfg, &st), -EINVAL);
    assert_null(st);
    assert_int_equal(nvme_open(NULL, &st), -EINVAL);
    assert_int_equal(nvme_open(&bad, &st), -ENOENT);
    assert_null(st);
}

/* Four written slots; a fault on the nth I/O of a batch over them. */
static void fault_case(const char *what, bool threads)
{
    char *dir = make_dir("/tmp");
    const char *dirs[] = { dir };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 1, .slot_size = MIB,
                               .queue_depth = 4, .force_threads = threads };
    struct nvme_store *st;
    struct nvme_io io[4];
    bool fails = strcmp(what, "corrupt") && strcmp(what, "short_write");

    assert_non_null(dir);
    assert_int_equal(nvme_open(&cfg, &st), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(nvme_slot_alloc(st, &io[i].slot), 0);
        io[i].buf = nvme_buffer_alloc(st, MIB);
        assert_non_null(io[i].buf);
        fill(io[i].buf, MIB, io[i].slot + 100);
    }
    assert_int_equal(nvme_write(st, io, 4), 0);
    /* rewrite all four with new patterns, the third one faulty */
    for (int i = 0; i < 4; i++)
        fill(io[i].buf, MIB, io[i].slot + 200);
    assert_int_equal(nvme_inject_fault(st, what, 3), 0);
    int ret = nvme_write(st, io, 4);

    if (fails) {
        int want = strcmp(what, "eio") == 0 ? -EIO : -ENOSPC;

        assert_int_equal(ret, want);
        assert_int_equal(io[2].res, want);
    } else {
        assert_int_equal(ret, 0);
    }
    for (int i = 0; i < 4; i++) {
        if (i != 2 || !fails)
            assert_int_equal(io[i].res, 0);
        memset(io[i].buf, 0, MIB);
    }
    ret = nvme_read(st, io, 4);
    if (strcmp(what, "short_write") == 0)
        assert_int_equal(ret, 0);
    else if (strcmp(what, "corrupt") == 0)
        assert_int_equal(ret, -EIO);
    else
        assert_int_equal(ret, -ENODATA);  /* the failed write left nothing */
    for (int i = 0; i < 4; i++) {
        if (i == 2 && strcmp(what, "short_write")) {
            assert_true(io[i].res < 0);
            continue;
        }
        assert_int_equal(io[i].res, 0);
        check(io[i].buf, MIB, io[i].slot + 200);
    }
    /* the slot is usable again once rewritten */
    fill(io[2].buf, MIB, 7);
    assert_int_equal(nvme_write(st, &io[2], 1), 0);
    memset(io[2].buf, 0, MIB);
    assert_int_equal(nvme_read(st, &io[2], 1), 0);
    check(io[2].buf, MIB, 7);
    for (int i = 0; i < 4; i++)
        nvme_buffer_free(st, io[i].buf);
    nvme_close(st);
    drop_dir(dir);
}

static void test_fault_eio(void **state)
{
    (void)state;
    fault_case("eio", false);
    fault_case("eio", true);
}

static void test_fault_enospc(void **state)
{
    (void)state;
    fault_case("enospc", false);
    fault_case("enospc", true);
}

static void test_fault_short_write(void **state)
{
    (void)state;
    fault_case("short_write", false);
    fault_case("short_write", true);
}

static void test_fault_corrupt(void **state)
{
    (void)state;
    fault_case("corrupt", false);
    fault_case("corrupt", true);
}

static void test_fault_bad_kind(void **state)
{
    char *dir = make_dir("/tmp");
    const char *dirs[] = { dir };
    struct nvme_config cfg = { .dirs = dirs, .ndirs = 1, .slot_size = MIB };
    struct nvme_store *st;

    (void)state;
    assert_int_equal(nvme_open(&cfg, &st), 0);
    assert_int_equal(nvme_inject_fault(st, "melt", 1), -EINVAL);
    assert_int_equal(nvme_inject_fault(st, "eio", -1), -EINVAL);
    assert_int_equal(nvme_inject_fault(st, "eio", 1), 0);
    assert_int_equal(nvme_inject_fault(st, NULL, 0), 0);   /* cleared */

    struct nvme_io io = { .buf = nvme_buffer_alloc(st, MIB) };

    assert_int_equal(nvme_slot_alloc(st, &io.slot), 0);
    memset(io.buf, 3, MIB);
    assert_int_equal(nvme_write(st, &io, 1), 0);
    /* a misaligned buffer is refused, not half-written */
    io.buf = (char *)io.buf + 1;
    assert_int_equal(nvme_write(st, &io, 1), -EINVAL);
    io.buf = (char *)io.buf - 1;
    nvme_buffer_free(st, io.buf);
    nvme_close(st);
    drop_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_lanes),
        cmocka_unit_test(test_tmp),
        cmocka_unit_test(test_tmp_default_qd),
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_forced_threads),
        cmocka_unit_test(test_two_dirs),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_fault_eio),
        cmocka_unit_test(test_fault_enospc),
        cmocka_unit_test(test_fault_short_write),
        cmocka_unit_test(test_fault_corrupt),
        cmocka_unit_test(test_fault_bad_kind),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
