/* The NVMe store: crc32c, round trips on both engines, batches deeper than
 * the queue, limits, injected faults, and nothing left behind; stores on one
 * named file (checkpoints): the bytes before base untouched, crcs carried
 * over to a read-only reopen, a flipped byte, a truncated file, faults. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* ---- stores on one named file ------------------------------------------ */

#define FILE_BASE 8192

/* dir/ckpt, for a checkpoint file. */
static char *file_path(const char *dir)
{
    char *path = malloc(strlen(dir) + sizeof("/ckpt"));

    assert_non_null(path);
    sprintf(path, "%s/ckpt", dir);
    return path;
}

static struct nvme_config file_cfg(bool threads)
{
    return (struct nvme_config){ .slot_size = MIB, .queue_depth = 4,
                                 .force_threads = threads, .numa_node = -1 };
}

static unsigned char header_byte(size_t i)
{
    return (unsigned char)(i * 7 + 0x5a);
}

/* The caller's header and index before base, by plain pwrite. */
static void write_header(const char *path)
{
    unsigned char hdr[FILE_BASE];
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    for (size_t i = 0; i < sizeof(hdr); i++)
        hdr[i] = header_byte(i);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
    assert_int_equal(close(fd), 0);
}

/* Makes path with a header written by pwrite before base, then nslots
 * slots (allocated 0, 1, ...) with patterns seed slot + 1, written in one
 * batch deeper than the queue; crc[s] from nvme_slot_crc. */
static void make_file(const char *path, bool threads, uint64_t nslots,
                      uint32_t *crc)
{
    struct nvme_config cfg = file_cfg(threads);
    struct nvme_store *st;
    struct nvme_io *io = calloc(nslots, sizeof(*io));

    assert_non_null(io);
    assert_int_equal(nvme_open_file(&cfg, path, true, FILE_BASE, 0, &st), 0);
    if (threads)
        assert_string_equal(nvme_engine(st), "threads");
    write_header(path);
    for (uint64_t s = 0; s < nslots; s++) {
        assert_int_equal(nvme_slot_alloc(st, &io[s].slot), 0);
        assert_int_equal(io[s].slot, s);
        io[s].buf = nvme_buffer_alloc(st, MIB);
        assert_non_null(io[s].buf);
        fill(io[s].buf, MIB, s + 1);
        assert_int_equal(nvme_slot_crc(st, s), 0);  /* nothing written yet */
    }
    assert_int_equal(nvme_write(st, io, nslots), 0);
    for (uint64_t s = 0; s < nslots; s++) {
        assert_int_equal(io[s].res, 0);
        crc[s] = nvme_slot_crc(st, s);
        assert_int_equal(crc[s], crc32c(0, io[s].buf, MIB));
        nvme_buffer_free(st, io[s].buf);
    }
    nvme_close(st);
    free(io);
}

/* The header is as make_file wrote it, the file at least covers nslots. */
static void check_header(const char *path, uint64_t nslots)
{
    unsigned char hdr[FILE_BASE];
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
    for (size_t i = 0; i < sizeof(hdr); i++)
        if (hdr[i] != header_byte(i))
            fail_msg("header byte %zu overwritten", i);
    assert_int_equal(fstat(fd, &sb), 0);
    assert_true((uint64_t)sb.st_size >= FILE_BASE + nslots * MIB);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(close(fd), 0);
}

/* Reopens path read-only with nslots slots, the crcs expected. */
static struct nvme_store *reopen_file(const char *path, bool threads,
                                      uint64_t nslots, const uint32_t *crc)
{
    struct nvme_config cfg = file_cfg(threads);
    struct nvme_store *st = NULL;

    assert_int_equal(nvme_open_file(&cfg, path, false, FILE_BASE, nslots,
                                    &st), 0);
    assert_non_null(st);
    for (uint64_t s = 0; s < nslots; s++)
        nvme_slot_expect(st, s, crc[s]);
    return st;
}

/* Reads every slot in one batch: ret, and each res (and the data of those
 * read) checked against want[s] (0 or -EIO). */
static int read_all(struct nvme_store *st, uint64_t nslots, const int *want)
{
    struct nvme_io *io = calloc(nslots, sizeof(*io));
    int ret;

    assert_non_null(io);
    for (uint64_t s = 0; s < nslots; s++) {
        io[s].slot = s;
        io[s].buf = nvme_buffer_alloc(st, MIB);
        assert_non_null(io[s].buf);
        memset(io[s].buf, 0xee, MIB);
    }
    ret = nvme_read(st, io, nslots);
    for (uint64_t s = 0; s < nslots; s++) {
        if (io[s].res != want[s])
            fail_msg("slot %llu: %d, not %d", (unsigned long long)s,
                     io[s].res, want[s]);
        if (want[s] == 0)
            check(io[s].buf, MIB, s + 1);
        nvme_buffer_free(st, io[s].buf);
    }
    free(io);
    return ret;
}

static void drop_file(char *dir, char *path)
{
    assert_int_equal(unlink(path), 0);
    free(path);
    drop_dir(dir);
}

static void file_round_trip(const char *base, bool threads)
{
    enum { N = 6 };
    int fds = tu_count_fds();
    char *dir = make_dir(base);
    uint32_t crc[N];
    int want[N] = { 0 };

    if (!dir) {
        print_message("nvme: %s not usable, case skipped\n", base);
        return;
    }

    char *path = file_path(dir);

    make_file(path, threads, N, crc);
    check_header(path, N);   /* closed: the file stays, header and all */

    struct nvme_store *st;
    struct nvme_config cfg = file_cfg(threads);

    assert_int_equal(nvme_open_file(&cfg, path, false, FILE_BASE, N, &st), 0);
    print_message("nvme: file store in %s%s: engine %s\n", base,
                  threads ? " (forced threads)" : "", nvme_engine(st));
    /* nothing valid before the crcs are known */
    struct nvme_io io = { .slot = 1, .buf = nvme_buffer_alloc(st, MIB) };

    assert_non_null(io.buf);
    assert_int_equal(nvme_read(st, &io, 1), -ENODATA);
    /* read-only: no slot to allocate, nothing to write */
    uint64_t extra = 77;

    assert_int_equal(nvme_slot_alloc(st, &extra), -EBADF);
    assert_int_equal(extra, 77);
    nvme_buffer_free(st, io.buf);
    for (uint64_t s = 0; s < N; s++)
        nvme_slot_expect(st, s, crc[s]);
    assert_int_equal(nvme_slot_crc(st, 3), crc[3]);
    assert_int_equal(read_all(st, N, want), 0);
    io.buf = nvme_buffer_alloc(st, MIB);
    io.slot = 2;
    assert_int_equal(nvme_write(st, &io, 1), -EBADF);
    assert_int_equal(read_all(st, N, want), 0);   /* still there */
    nvme_buffer_free(st, io.buf);
    nvme_close(st);
    check_header(path, N);
    drop_file(dir, path);
    assert_int_equal(tu_count_fds(), fds);
}

static void test_file_round_trip(void **state)
{
    (void)state;
    file_round_trip("/tmp", false);
    file_round_trip("/tmp", true);
    file_round_trip("/dev/shm", false);
    file_round_trip("/dev/shm", true);
}

/* A byte flipped in the file: -EIO for that slot only. */
static void test_file_flipped_byte(void **state)
{
    enum { N = 4, BAD = 2 };

    (void)state;
    for (int threads = 0; threads < 2; threads++) {
        char *dir = make_dir("/tmp");

        assert_non_null(dir);

        char *path = file_path(dir);
        uint32_t crc[N];
        int want[N] = { 0 };
        unsigned char b;
        off_t at = FILE_BASE + (off_t)BAD * (off_t)MIB + 12345;
        int fd;

        make_file(path, threads, N, crc);
        fd = open(path, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0x01;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
        assert_int_equal(close(fd), 0);

        struct nvme_store *st = reopen_file(path, threads, N, crc);

        want[BAD] = -EIO;
        assert_int_equal(read_all(st, N, want), -EIO);
        nvme_close(st);
        check_header(path, N);
        drop_file(dir, path);
    }
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The file cut at cut bytes into slot K: slots before K read, K and later
 * -EIO, at once (no retries at the end of the file). */
static void truncated_case(bool threads, off_t cut)
{
    enum { N = 6, K = 3 };
    char *dir = make_dir("/tmp");

    assert_non_null(dir);

    char *path = file_path(dir);
    uint32_t crc[N];
    int want[N];

    make_file(path, threads, N, crc);
    assert_int_equal(truncate(path, FILE_BASE + (off_t)K * (off_t)MIB + cut),
                     0);

    struct nvme_store *st = reopen_file(path, threads, N, crc);
    double t0 = now_s();

    for (int s = 0; s < N; s++)
        want[s] = s < K ? 0 : -EIO;
    assert_int_equal(read_all(st, N, want), -EIO);
    /* each alone too, the slot cut in two first */
    for (int s = N - 1; s >= 0; s--) {
        struct nvme_io io = { .slot = (uint64_t)(s == N - 1 ? K : s),
                              .buf = nvme_buffer_alloc(st, MIB) };

        assert_non_null(io.buf);
        assert_int_equal(nvme_read(st, &io, 1), io.slot < K ? 0 : -EIO);
        assert_int_equal(io.res, io.slot < K ? 0 : -EIO);
        nvme_buffer_free(st, io.buf);
    }
    double dt = now_s() - t0;

    print_message("nvme: truncated at +%lld in slot %d%s: %.3f s\n",
                  (long long)cut, K, threads ? " (forced threads)" : "", dt);
    assert_true(dt < 2.0);
    nvme_close(st);
    check_header(path, K);
    drop_file(dir, path);
}

static void test_file_truncated(void **state)
{
    (void)state;
    for (int threads = 0; threads < 2; threads++) {
        truncated_case(threads, (off_t)MIB / 2 + 100); /* off the alignment */
        truncated_case(threads, (off_t)MIB / 2);       /* on a block */
        truncated_case(threads, 0);                    /* right before K */
    }
}

/* Create over an existing path: -EEXIST, the file untouched; bad calls. */
static void test_file_exists(void **state)
{
    char *dir = make_dir("/tmp");

    (void)state;
    assert_non_null(dir);

    char *path = file_path(dir);
    struct nvme_config cfg = file_cfg(false);
    struct nvme_store *st = NULL;
    uint32_t crc[2];
    int fds = tu_count_fds();

    make_file(path, false, 2, crc);
    for (int threads = 0; threads < 2; threads++) {
        cfg.force_threads = threads;
        assert_int_equal(nvme_open_file(&cfg, path, true, FILE_BASE, 0, &st),
                         -EEXIST);
        assert_null(st);
    }
    check_header(path, 2);
    st = reopen_file(path, false, 2, crc);
    assert_int_equal(read_all(st, 2, (int[]){ 0, 0 }), 0);
    nvme_close(st);
    st = NULL;
    assert_int_equal(nvme_open_file(&cfg, path, false, 4095, 2, &st),
                     -EINVAL);
    assert_int_equal(nvme_open_file(NULL, path, false, 0, 2, &st), -EINVAL);
    assert_int_equal(nvme_open_file(&cfg, NULL, true, 0, 0, &st), -EINVAL);
    cfg.slot_size = 4096;
    assert_int_equal(nvme_open_file(&cfg, path, false, 0, 2, &st), -EINVAL);
    cfg.slot_size = MIB;
    assert_null(st);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(nvme_open_file(&cfg, path, false, FILE_BASE, 2, &st),
                     -ENOENT);
    assert_null(st);
    assert_int_equal(tu_count_fds(), fds);
    free(path);
    drop_dir(dir);
}

/* Injected faults on a file store: an "eio" write leaves its slot without
 * data (no crc), a "short_write" one is resumed; an "eio" read fails that
 * slot only. */
static void file_fault_case(const char *what, bool threads)
{
    enum { N = 4, BAD = 2 };
    char *dir = make_dir("/tmp");

    assert_non_null(dir);

    char *path = file_path(dir);
    struct nvme_config cfg = file_cfg(threads);
    struct nvme_store *st;
    struct nvme_io io[N];
    uint32_t crc[N];
    bool fails = strcmp(what, "eio") == 0;
    int want[N] = { 0 };

    assert_int_equal(nvme_open_file(&cfg, path, true, FILE_BASE, 0, &st), 0);
    write_header(path);
    for (uint64_t s = 0; s < N; s++) {
        assert_int_equal(nvme_slot_alloc(st, &io[s].slot), 0);
        io[s].buf = nvme_buffer_alloc(st, MIB);
        assert_non_null(io[s].buf);
        fill(io[s].buf, MIB, s + 1);
    }
    assert_int_equal(nvme_inject_fault(st, what, BAD + 1), 0);
    assert_int_equal(nvme_write(st, io, N), fails ? -EIO : 0);
    for (uint64_t s = 0; s < N; s++) {
        assert_int_equal(io[s].res, fails && s == BAD ? -EIO : 0);
        crc[s] = nvme_slot_crc(st, s);
        if (fails && s == BAD)
            assert_int_equal(crc[s], 0);
        else
            assert_int_equal(crc[s], crc32c(0, io[s].buf, MIB));
        nvme_buffer_free(st, io[s].buf);
    }
    nvme_close(st);
    check_header(path, N);

    st = reopen_file(path, threads, N, crc);
    if (fails) {
        /* nothing expected of the failed slot: it holds no data */
        nvme_slot_free(st, BAD);
        want[BAD] = -EINVAL;
    }
    assert_int_equal(read_all(st, N, want), fails ? -EINVAL : 0);
    /* a read fault hits the nth request only */
    assert_int_equal(nvme_inject_fault(st, "eio", 2), 0);
    want[1] = -EIO;
    assert_int_equal(read_all(st, N, want), -EIO);
    nvme_close(st);
    drop_file(dir, path);
}

static void test_file_faults(void **state)
{
    (void)state;
    for (int threads = 0; threads < 2; threads++) {
        file_fault_case("eio", threads);
        file_fault_case("short_write", threads);
    }
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
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_file_flipped_byte),
        cmocka_unit_test(test_file_truncated),
        cmocka_unit_test(test_file_exists),
        cmocka_unit_test(test_file_faults),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
