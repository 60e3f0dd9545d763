/*
 * Helpers shared by the cmocka tests of the public API. Include after
 * config.h; everything is static inline so that a test uses what it needs
 * without unused-function warnings.
 *
 * The tests are written for the sim backend. UMPOOL_TEST_BACKEND=cuda runs
 * the black-box ones (those that define TU_CUDA_AWARE before including this
 * file: audited to reach pool memory only through the helpers below) on
 * the cuda backend instead: tu_pool_create (and
 * tu_config) turn the sim configuration into a cuda one or skip the test,
 * and pool memory, which the CPU cannot reach on cuda, is written and
 * checked only through tu_pool_fill / tu_pool_check / tu_pool_write /
 * tu_assert_pool_pattern (copies through a host buffer). Without the
 * variable nothing changes: those helpers then touch the memory directly.
 */
#ifndef UMP_TESTUTIL_H
#define UMP_TESTUTIL_H

#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "umpool.h"

#define TU_KIB ((size_t)1 << 10)
#define TU_MIB ((size_t)1 << 20)

/* 1 in a ThreadSanitizer build (whose address space differs), else 0. */
#if defined(__SANITIZE_THREAD__)
#define TU_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_UNDER_TSAN 1
#endif
#endif
#ifndef TU_UNDER_TSAN
#define TU_UNDER_TSAN 0
#endif
/* The default chunk size of the pool, and the largest slab-served size. */
#define TU_CHUNK (2 * TU_MIB)
/* Big allocations are made of chunks of a power-of-two number of 2 MiB
 * granules, at most max_chunk (1 GiB by default). */
#define TU_MAX_CHUNK ((size_t)1 << 30)
#define tu_assert_chunk_size(sz)                                               \
    do {                                                                       \
        size_t tu_cs_ = (sz);                                                  \
        assert_true(tu_cs_ >= TU_CHUNK && tu_cs_ <= TU_MAX_CHUNK);             \
        assert_int_equal(tu_cs_ % TU_CHUNK, 0);                                \
    } while (0)
#define TU_SLAB_MAX TU_MIB
#define TU_ALIGN 256

#define TU_ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))

/* ---- the backend the tests run on -------------------------------------- */

/* true under UMPOOL_TEST_BACKEND=cuda in a TU_CUDA_AWARE program. */
static inline bool tu_on_cuda(void)
{
#ifdef TU_CUDA_AWARE
    const char *b = getenv("UMPOOL_TEST_BACKEND");
    return b && strcmp(b, "cuda") == 0;
#else
    return false;
#endif
}

/* Tests skipped so far by tu_config and tu_sim_only. */
static inline int *tu_skip_count(void)
{
    static int n;
    return &n;
}

/* Devices of a cuda pool on this machine, asked once; a negative errno
 * when the cuda backend cannot run here. */
static inline int tu_cuda_devices(void)
{
    static int count;
    if (count == 0) {
        ump_pool_t *pool = NULL;
        count = ump_pool_create("backend:cuda,device_mem:64M", &pool);
        if (count == 0) {
            count = ump_device_count(pool);
            ump_pool_destroy(pool);
        }
        if (count == 0)
            count = -ENODEV;
    }
    return count;
}

/*
 * Writes into buf the cuda form of a sim configuration: backend:cuda,
 * device_mem from sim_device_mem (a device_mem given wins), sim_devices
 * dropped, every other key kept. false, with why, where the test cannot run
 * on cuda here: no usable GPU, a sim_topology, another device count than
 * the machine's, or a configuration too long for buf.
 */
static inline bool tu_cuda_config(const char *config, char *buf, size_t len,
                                  char *why, size_t wlen)
{
    char tmp[512], mem[64] = "";
    bool has_device_mem = false;
    int want = 1, have = tu_cuda_devices();
    size_t used;

    if (have < 0) {
        snprintf(why, wlen, "no usable GPU (backend:cuda gives %s)",
                 ump_strerror(have));
        return false;
    }
    if (strlen(config) >= sizeof(tmp)) {
        snprintf(why, wlen, "configuration too long");
        return false;
    }
    strcpy(tmp, config);
    used = (size_t)snprintf(buf, len, "backend:cuda");
    char *save = NULL;
    for (char *kv = strtok_r(tmp, ",", &save); kv;
         kv = strtok_r(NULL, ",", &save)) {
        const char *colon = strchr(kv, ':');
        const char *val = colon ? colon + 1 : "";
        size_t klen = colon ? (size_t)(colon - kv) : strlen(kv);
#define TU_KEY(k) (klen == strlen(k) && strncmp(kv, k, klen) == 0)
        if (TU_KEY("backend"))
            continue;
        if (TU_KEY("sim_topology")) {
            snprintf(why, wlen, "needs the simulated machine %s", val);
            return false;
        }
        if (TU_KEY("sim_devices")) {
            want = atoi(val) > 0 ? atoi(val) : 1;
            continue;
        }
        if (TU_KEY("sim_device_mem")) {
            snprintf(mem, sizeof(mem), "%s", val);
            continue;
        }
        if (TU_KEY("device_mem"))
            has_device_mem = true;
#undef TU_KEY
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, ",%s", kv);
    }
    if (!has_device_mem && mem[0] && used < len)
        used += (size_t)snprintf(buf + used, len - used, ",device_mem:%s",
                                 mem);
    if (used >= len) {
        snprintf(why, wlen, "configuration too long");
        return false;
    }
    /* Exactly: a cuda pool takes every device, and a test written for N
     * devices may count on spilling to them, or on failing when they are
     * full. */
    if (want != have) {
        snprintf(why, wlen, "needs %d device%s, the machine has %d (see "
                 "CUDA_VISIBLE_DEVICES)", want, want == 1 ? "" : "s", have);
        return false;
    }
    return true;
}

/* The configuration for the backend the tests run on (buf holds it on
 * cuda); skips the test (cmocka skip()) where it cannot run on cuda here.
 * Call it from a test's body: a skip in a setup would count as an error. */
static inline const char *tu_config(const char *config, char *buf, size_t len)
{
    char why[256];
    if (!tu_on_cuda())
        return config;
    if (!tu_cuda_config(config, buf, len, why, sizeof(why))) {
        print_message("skipped on cuda: %s (\"%s\")\n", why, config);
        (*tu_skip_count())++;
        skip();
    }
    return buf;
}

/* Removes a test's scratch directory and all in it (made with mkdtemp);
 * says so on stderr when it cannot. */
static inline void tu_remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd))
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* Skips the test on cuda, saying why: for what only a simulated machine
 * gives (a known topology, links of equal speed). */
static inline void tu_sim_only(const char *why)
{
    if (tu_on_cuda()) {
        print_message("skipped on cuda: %s\n", why);
        (*tu_skip_count())++;
        skip();
    }
}

/* Like tu_config, for a whole program (group fixtures, main): exits with
 * 77 (SKIP) and a line saying why. */
static inline const char *tu_config_or_exit(const char *prog,
                                            const char *config, char *buf,
                                            size_t len)
{
    char why[256];
    if (!tu_on_cuda())
        return config;
    if (!tu_cuda_config(config, buf, len, why, sizeof(why))) {
        printf("SKIP: %s on cuda: %s\n", prog, why);
        exit(77);
    }
    return buf;
}

/* First in main: on cuda without a usable GPU, exits with 77 (SKIP) and a
 * line saying why, rather than skipping test by test. */
static inline void tu_main_begin(const char *prog)
{
    if (tu_on_cuda() && tu_cuda_devices() < 0) {
        printf("SKIP: %s on cuda: no usable GPU (backend:cuda gives %s)\n",
               prog, ump_strerror(tu_cuda_devices()));
        exit(77);
    }
}

/* What main returns after cmocka_run_group_tests(n tests) returned failed:
 * 77 (SKIP) when every test skipped, so that a run that tested nothing is
 * not counted as a pass. */
static inline int tu_main_end(int failed, size_t n)
{
    if (failed == 0 && n > 0 && (size_t)*tu_skip_count() == n) {
        printf("SKIP: all %zu tests skipped\n", n);
        return 77;
    }
    return failed;
}

/* Creates a pool for the backend the tests run on (see tu_config) or fails
 * the test, printing the configuration and error. */
static inline ump_pool_t *tu_pool_create(const char *config)
{
    char buf[512];
    ump_pool_t *pool = NULL;
    config = tu_config(config, buf, sizeof(buf));
    int rc = ump_pool_create(config, &pool);
    if (rc != 0)
        fail_msg("ump_pool_create(\"%s\") = %d (%s)", config, rc,
                 ump_strerror(rc));
    assert_non_null(pool);
    return pool;
}

static inline void tu_pool_destroy(ump_pool_t *pool)
{
    int rc = ump_pool_destroy(pool);
    if (rc != 0)
        fail_msg("ump_pool_destroy = %d (%s)", rc, ump_strerror(rc));
}

/* device: an index or UMP_DEVICE_CURRENT. */
static inline ump_hints_t tu_hints(int device)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = device;
    return h;
}

/* Fails the test unless call returns want, naming the call and both codes. */
#define expect_rc(call, want)                                                  \
    do {                                                                       \
        int rc_ = (call), want_ = (want);                                      \
        if (rc_ != want_)                                                      \
            fail_msg("%s = %d (%s), expected %d (%s)", #call, rc_,             \
                     ump_strerror(rc_), want_, ump_strerror(want_));          \
    } while (0)

/* Allocates or fails the test. */
static inline void *tu_alloc(ump_pool_t *pool, size_t size, int device)
{
    ump_hints_t h = tu_hints(device);
    void *p = NULL;
    int rc = ump_alloc(pool, size, &h, &p);
    if (rc != 0)
        fail_msg("ump_alloc(%zu, device %d) = %d (%s)", size, device, rc,
                 ump_strerror(rc));
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % TU_ALIGN, 0);
    return p;
}

static inline void tu_free(ump_pool_t *pool, void *p)
{
    int rc = ump_free(pool, p);
    if (rc != 0)
        fail_msg("ump_free(%p) = %d (%s)", p, rc, ump_strerror(rc));
}

static inline ump_stats_t tu_stats(ump_pool_t *pool, int device)
{
    ump_stats_t st;
    memset(&st, 0, sizeof(st));
    int rc = ump_stats(pool, device, &st);
    if (rc != 0)
        fail_msg("ump_stats(device %d) = %d (%s)", device, rc,
                 ump_strerror(rc));
    return st;
}

static inline ump_ptr_info_t tu_info(ump_pool_t *pool, const void *p)
{
    ump_ptr_info_t info;
    memset(&info, 0, sizeof(info));
    int rc = ump_ptr_info(pool, p, &info);
    if (rc != 0)
        fail_msg("ump_ptr_info(%p) = %d (%s)", p, rc, ump_strerror(rc));
    return info;
}

/* Fails the test naming the first field that differs. */
static inline void tu_assert_stats_equal(const ump_stats_t *a,
                                         const ump_stats_t *b)
{
#define TU_CMP(f)                                                              \
    do {                                                                       \
        if (a->f != b->f)                                                      \
            fail_msg("stats." #f " changed: %llu -> %llu",                     \
                     (unsigned long long)a->f, (unsigned long long)b->f);      \
    } while (0)
    TU_CMP(capacity);
    TU_CMP(live_bytes);
    TU_CMP(mapped_bytes);
    TU_CMP(cached_bytes);
    TU_CMP(peak_bytes);
    TU_CMP(live_count);
    TU_CMP(alloc_count);
    TU_CMP(free_count);
    TU_CMP(chunks_created);
    TU_CMP(chunks_released);
    TU_CMP(reserved_bytes);
    TU_CMP(peak_reserved_bytes);
#undef TU_CMP
}

/* A well-mixed 64-bit value (splitmix64's finaliser). */
static inline uint64_t tu_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The pattern word covering byte offsets [8 * i, 8 * i + 8): cheap per
 * word (tests fill hundreds of MiB), distinct for distinct seeds. */
static inline uint64_t tu_word_base(uint64_t seed)
{
    return tu_mix(seed);
}

static inline uint64_t tu_word(uint64_t base, size_t i)
{
    return (base ^ (i * 0x9e3779b97f4a7c15ull)) + i;
}

/* Fills n bytes with a pattern that depends on (seed, offset). */
static inline void tu_fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t base = tu_word_base(seed);
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = tu_word(base, i);
        memcpy(b + 8 * i, &w, 8);
    }
    if (n % 8) {
        uint64_t w = tu_word(base, words);
        memcpy(b + 8 * words, &w, n % 8);
    }
}

/* Returns the offset of the first byte that differs from tu_fill's pattern,
 * or n when all match. */
static inline size_t tu_check(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t base = tu_word_base(seed);
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = tu_word(base, i), got;
        memcpy(&got, b + 8 * i, 8);
        if (got != w) {
            const unsigned char *e = (const unsigned char *)&w;
            for (size_t k = 0; k < 8; k++)
                if (b[8 * i + k] != e[k])
                    return 8 * i + k;
        }
    }
    if (n % 8) {
        uint64_t w = tu_word(base, words);
        const unsigned char *e = (const unsigned char *)&w;
        for (size_t k = 0; k < n % 8; k++)
            if (b[8 * words + k] != e[k])
                return 8 * words + k;
    }
    return n;
}

#define tu_assert_pattern(p, n, seed)                                          \
    do {                                                                       \
        size_t tu_n_ = (n);                                                    \
        size_t tu_bad_ = tu_check((p), tu_n_, (seed));                         \
        if (tu_bad_ != tu_n_)                                                  \
            fail_msg("pattern broken at offset %zu of %zu (buffer %p)",       \
                     tu_bad_, tu_n_, (const void *)(p));                       \
    } while (0)

/* ---- pool memory, on either backend ------------------------------------ */

/* Copies n bytes between pool and host memory (either way) on the default
 * stream and waits; 0 or a negative errno. */
static inline int tu_pool_copy(ump_pool_t *pool, void *dst, const void *src,
                               size_t n)
{
    int rc = ump_memcpy_async(pool, dst, src, n, NULL);
    return rc ? rc : ump_stream_synchronize(pool, NULL);
}

/* tu_fill on pool memory: directly on sim, through a host buffer and a copy
 * on cuda. 0 or a negative errno; no cmocka call, so threads may use it. */
static inline int tu_pool_fill(ump_pool_t *pool, void *p, size_t n,
                               uint64_t seed)
{
    if (!tu_on_cuda()) {
        tu_fill(p, n, seed);
        return 0;
    }
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return -ENOMEM;
    tu_fill(buf, n, seed);
    int rc = tu_pool_copy(pool, p, buf, n);
    free(buf);
    return rc;
}

/* tu_check on pool memory: the offset of the first byte that differs, n
 * when all match, SIZE_MAX when the memory could not be read. No cmocka
 * call, so threads may use it. */
static inline size_t tu_pool_check(ump_pool_t *pool, const void *p, size_t n,
                                   uint64_t seed)
{
    if (!tu_on_cuda())
        return tu_check(p, n, seed);
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return SIZE_MAX;
    size_t bad = tu_pool_copy(pool, buf, p, n) ? SIZE_MAX
                                               : tu_check(buf, n, seed);
    free(buf);
    return bad;
}

/* tu_pool_fill or fail the test. */
static inline void tu_pool_write(ump_pool_t *pool, void *p, size_t n,
                                 uint64_t seed)
{
    int rc = tu_pool_fill(pool, p, n, seed);
    if (rc != 0)
        fail_msg("writing %zu bytes at %p: %d (%s)", n, p, rc,
                 ump_strerror(rc));
}

#define tu_assert_pool_pattern(pool, p, n, seed)                               \
    do {                                                                       \
        size_t tu_n_ = (n);                                                    \
        size_t tu_bad_ = tu_pool_check((pool), (p), tu_n_, (seed));            \
        if (tu_bad_ == SIZE_MAX)                                               \
            fail_msg("could not read %zu bytes at %p", tu_n_,                 \
                     (const void *)(p));                                       \
        if (tu_bad_ != tu_n_)                                                  \
            fail_msg("pattern broken at offset %zu of %zu (buffer %p)",       \
                     tu_bad_, tu_n_, (const void *)(p));                       \
    } while (0)

/*
 * Captures what is written to file descriptor 2 between tu_capture_start and
 * tu_capture_stop, so that a test can count log lines. Keep cmocka asserts
 * out of the captured region: their messages would be captured too.
 */
struct tu_capture {
    FILE *tmp;
    int saved_fd;
};

static inline void tu_capture_start(struct tu_capture *c)
{
    fflush(stderr);
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    c->saved_fd = dup(STDERR_FILENO);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fileno(c->tmp), STDERR_FILENO) >= 0);
}

/* Restores stderr and copies what was captured (NUL-terminated, truncated
 * to len - 1 bytes) into buf; returns the captured length. */
static inline size_t tu_capture_stop(struct tu_capture *c, char *buf,
                                     size_t len)
{
    fflush(stderr);
    int rc = dup2(c->saved_fd, STDERR_FILENO);
    close(c->saved_fd);
    assert_true(rc >= 0);
    rewind(c->tmp);
    size_t n = fread(buf, 1, len - 1, c->tmp);
    buf[n] = '\0';
    fclose(c->tmp);
    c->tmp = NULL;
    return n;
}

/* Lines of captured text that are umpool log lines. */
static inline int tu_count_log_lines(const char *buf)
{
    int count = 0;
    const char *line = buf;
    while (*line) {
        if (strncmp(line, "umpool:", 7) == 0)
            count++;
        const char *nl = strchr(line, '\n');
        if (!nl)
            break;
        line = nl + 1;
    }
    return count;
}

/* A small deterministic generator for tests (xorshift64*). */
/* Open file descriptors of the process, not counting the one reading them
 * (compare two counts: no descriptor left behind). */
static inline int tu_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* Entries of a directory, "." and ".." aside; -1 when it cannot be read. */
static inline int tu_count_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static inline uint64_t tu_rand(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x853c49e6748fea9bull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

#endif
