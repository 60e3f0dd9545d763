/*
 * Helpers shared by the cmocka tests of the public API (sim backend).
 * Include after config.h; everything is static inline so that a test uses
 * what it needs without unused-function warnings.
 */
#ifndef UMP_TESTUTIL_H
#define UMP_TESTUTIL_H

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
/* The default chunk size of the pool, and the largest slab-served size. */
#define TU_CHUNK (2 * TU_MIB)
/* Big allocations are made of chunks of a power-of-two number of 2 MiB
 * granules, at most max_chunk (1 GiB by default). */
#define TU_MAX_CHUNK ((size_t)1 << 30)
#define tu_assert_chunk_size(sz)                                               \
    do {                                                                       \
        size_t tu_cs_ = (sz);                                                  \
        assert_true(tu_cs_ >= TU_CHUNK && tu_cs_ <= TU_MAX_CHUNK);             \
        assert_int_equal(tu_cs_ & (tu_cs_ - 1), 0);                            \
    } while (0)
#define TU_SLAB_MAX TU_MIB
#define TU_ALIGN 256

#define TU_ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))

/* Creates a pool or fails the test, printing the configuration and error. */
static inline ump_pool_t *tu_pool_create(const char *config)
{
    ump_pool_t *pool = NULL;
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
