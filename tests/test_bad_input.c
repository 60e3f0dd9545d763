/*
 * Bad input through the public API: every case returns the documented error,
 * logs one line, leaves the output parameters and the pool untouched.
 */
#include "config.h"

#define TU_CUDA_AWARE 1
#include "testutil.h"

#define CONF "backend:sim,sim_devices:2,sim_device_mem:64M"
#define SENTINEL ((void *)0x5a5a5a5a)

/* Live allocations whose data must survive every bad call. */
struct fixture {
    ump_pool_t *pool;
    ump_pool_t *other;
    void *small;     /* 4096 bytes */
    void *big;       /* 5 MiB */
    void *other_ptr; /* from the other pool */
};

static const size_t small_size = 4096, big_size = 5 * TU_MIB;

/* CONF for the backend the tests run on (set by main). */
static const char *conf;

static int setup(void **state)
{
    static struct fixture f;
    memset(&f, 0, sizeof(f));
    if (ump_pool_create(conf, &f.pool) != 0 ||
        ump_pool_create(conf, &f.other) != 0)
        return -1;
    if (ump_alloc(f.pool, small_size, NULL, &f.small) != 0 ||
        ump_alloc(f.pool, big_size, NULL, &f.big) != 0 ||
        ump_alloc(f.other, small_size, NULL, &f.other_ptr) != 0)
        return -1;
    if (tu_pool_fill(f.pool, f.small, small_size, 1) != 0 ||
        tu_pool_fill(f.pool, f.big, big_size, 2) != 0 ||
        tu_pool_fill(f.other, f.other_ptr, small_size, 3) != 0)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int bad = 0;
    bad |= ump_free(f->pool, f->small);
    bad |= ump_free(f->pool, f->big);
    bad |= ump_free(f->other, f->other_ptr);
    bad |= ump_pool_destroy(f->pool);
    bad |= ump_pool_destroy(f->other);
    return bad ? -1 : 0;
}

static void check_intact(const struct fixture *f)
{
    tu_assert_pool_pattern(f->pool, f->small, small_size, 1);
    tu_assert_pool_pattern(f->pool, f->big, big_size, 2);
    tu_assert_pool_pattern(f->other, f->other_ptr, small_size, 3);
    ump_ptr_info_t info = tu_info(f->pool, f->big);
    assert_ptr_equal(info.base, f->big);
    assert_int_equal(info.size, big_size);
}

enum op { OP_FREE, OP_FREE_ASYNC_NULL, OP_FREE_ASYNC_STREAM, OP_PTR_INFO };

/* Runs one call on a bad pointer: -EINVAL, exactly one log line, no stats
 * change in either pool, other allocations intact. */
static void expect_bad_ptr(struct fixture *f, enum op op, const void *ptr,
                           ump_stream_t stream)
{
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t obefore = tu_stats(f->other, UMP_DEVICE_ALL);
    ump_ptr_info_t info;
    memset(&info, 0x77, sizeof(info));
    ump_ptr_info_t untouched = info;
    char buf[4096];
    struct tu_capture cap;
    int rc = 0;

    tu_capture_start(&cap);
    switch (op) {
    case OP_FREE:
        rc = ump_free(f->pool, (void *)ptr);
        break;
    case OP_FREE_ASYNC_NULL:
        rc = ump_free_async(f->pool, (void *)ptr, NULL);
        break;
    case OP_FREE_ASYNC_STREAM:
        rc = ump_free_async(f->pool, (void *)ptr, stream);
        break;
    case OP_PTR_INFO:
        rc = ump_ptr_info(f->pool, ptr, &info);
        break;
    }
    tu_capture_stop(&cap, buf, sizeof(buf));

    if (rc != -EINVAL)
        fail_msg("op %d on %p: rc %d, expected -EINVAL", (int)op, ptr, rc);
    if (tu_count_log_lines(buf) != 1)
        fail_msg("op %d on %p: %d log lines, expected 1:\n%s", (int)op, ptr,
                 tu_count_log_lines(buf), buf);
    assert_memory_equal(&info, &untouched, sizeof(info));
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t oafter = tu_stats(f->other, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    tu_assert_stats_equal(&obefore, &oafter);
    check_intact(f);
}

/* All the pointers the pool did not hand out, for one operation. */
static void bad_pointers(struct fixture *f, enum op op, ump_stream_t stream)
{
    int on_stack = 0;
    char *heap = malloc(4096);
    assert_non_null(heap);

    expect_bad_ptr(f, op, &on_stack, stream);
    expect_bad_ptr(f, op, heap, stream);
    /* Another pool's pointer is not ours, whatever the operation. */
    expect_bad_ptr(f, op, f->other_ptr, stream);
    if (op != OP_PTR_INFO) {
        /* Interior pointers are fine for ptr_info, not for a free. */
        expect_bad_ptr(f, op, (char *)f->small + 256, stream);
        expect_bad_ptr(f, op, (char *)f->big + TU_CHUNK, stream);
        expect_bad_ptr(f, op, (char *)f->big + 256, stream);
        expect_bad_ptr(f, op, (char *)f->small + 1, stream);
    }
    free(heap);
}

static void test_free_null(void **state)
{
    struct fixture *f = *state;
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_free(f->pool, NULL), 0);
    assert_int_equal(ump_free_async(f->pool, NULL, NULL), 0);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
}

static void test_free_bad_pointers(void **state)
{
    bad_pointers(*state, OP_FREE, NULL);
}

static void test_free_async_bad_pointers(void **state)
{
    bad_pointers(*state, OP_FREE_ASYNC_NULL, NULL);
}

static void test_free_async_stream_bad_pointers(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = NULL;
    assert_int_equal(ump_stream_create(f->pool, 0, &s), 0);
    assert_non_null(s);
    bad_pointers(f, OP_FREE_ASYNC_STREAM, s);
    assert_int_equal(ump_stream_synchronize(f->pool, s), 0);
    assert_int_equal(ump_stream_destroy(f->pool, s), 0);
}

static void test_ptr_info_bad_pointers(void **state)
{
    bad_pointers(*state, OP_PTR_INFO, NULL);
}

/* Interior pointers are valid for ump_ptr_info. */
static void test_ptr_info_interior_ok(void **state)
{
    struct fixture *f = *state;
    ump_ptr_info_t info = tu_info(f->pool, (char *)f->small + 256);
    assert_ptr_equal(info.base, f->small);
    assert_int_equal(info.size, small_size);
    info = tu_info(f->pool, (char *)f->big + TU_CHUNK + 17);
    assert_ptr_equal(info.base, f->big);
    assert_int_equal(info.size, big_size);
}

/* The tier calls on a range that leaves its allocation: -EINVAL and one
 * log line, nothing changed, for a slab object (small) as for a run (big),
 * and for a pool pointer that is no live allocation's. Ranges inside pass
 * (a slab object never moves: 0, nothing done). */
static void expect_bad_range(struct fixture *f, const char *what, int rc,
                             const char *log, const ump_stats_t *before)
{
    if (rc != -EINVAL)
        fail_msg("%s: rc %d, expected -EINVAL", what, rc);
    if (tu_count_log_lines(log) != 1)
        fail_msg("%s: %d log lines, expected 1:\n%s", what,
                 tu_count_log_lines(log), log);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(before, &after);
    check_intact(f);
}

static void test_tier_ranges(void **state)
{
    struct fixture *f = *state;
    struct {
        char *p;
        size_t size;
    } a[] = {{f->small, small_size}, {f->big, big_size}};
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++) {
        struct {
            size_t off, len;
        } bad[] = {{0, a[i].size + 1}, {0, SIZE_MAX}, {a[i].size - 1, 2},
                   {1, a[i].size}, {a[i].size - 8, SIZE_MAX - 4}};
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            char *p = a[i].p + bad[k].off;
            size_t n = bad[k].len;
            for (int op = 0; op < 5; op++) {
                ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
                char buf[4096], what[128];
                struct tu_capture cap;
                int rc = 0;
                tu_capture_start(&cap);
                switch (op) {
                case 0:
                    rc = ump_acquire(f->pool, p, n, UMP_DEVICE_CURRENT, NULL);
                    break;
                case 1:
                    rc = ump_release(f->pool, p, n);
                    break;
                case 2:
                    rc = ump_advise(f->pool, p, n, UMP_ADVISE_COLD);
                    break;
                case 3:
                    rc = ump_prefetch(f->pool, p, n, UMP_DEVICE_CURRENT, NULL);
                    break;
                default:
                    rc = ump_evict(f->pool, p, n, UMP_TIER_HOST);
                    break;
                }
                tu_capture_stop(&cap, buf, sizeof(buf));
                snprintf(what, sizeof(what), "%s op %d at +%zu, %zu bytes",
                         i ? "run" : "slab object", op, bad[k].off, n);
                expect_bad_range(f, what, rc, buf, &before);
            }
        }
        /* Inside: the whole allocation, and its last byte. */
        assert_int_equal(ump_acquire(f->pool, a[i].p, a[i].size,
                                     UMP_DEVICE_CURRENT, NULL), 0);
        assert_int_equal(ump_release(f->pool, a[i].p, a[i].size), 0);
        assert_int_equal(ump_acquire(f->pool, a[i].p + a[i].size - 1, 1,
                                     UMP_DEVICE_CURRENT, NULL), 0);
        assert_int_equal(ump_release(f->pool, a[i].p + a[i].size - 1, 1), 0);
        check_intact(f);
    }
    /* A slab object freed: its range is no allocation's. */
    void *x;
    assert_int_equal(ump_alloc(f->pool, 300, NULL, &x), 0);
    assert_int_equal(ump_free(f->pool, x), 0);
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    char buf[4096];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_acquire(f->pool, x, 1, UMP_DEVICE_CURRENT, NULL);
    tu_capture_stop(&cap, buf, sizeof(buf));
    expect_bad_range(f, "a freed slab object", rc, buf, &before);
}

/* A second free of a small and of a big allocation. */
static void test_double_free(void **state)
{
    struct fixture *f = *state;
    void *s = tu_alloc(f->pool, 300, 0);
    void *b = tu_alloc(f->pool, 3 * TU_MIB, 1);
    tu_free(f->pool, s);
    tu_free(f->pool, b);
    expect_bad_ptr(f, OP_FREE, s, NULL);
    expect_bad_ptr(f, OP_FREE, b, NULL);
    expect_bad_ptr(f, OP_FREE_ASYNC_NULL, s, NULL);
    expect_bad_ptr(f, OP_FREE_ASYNC_NULL, b, NULL);
    /* A freed allocation no longer has an owner to report. */
    expect_bad_ptr(f, OP_PTR_INFO, s, NULL);
    expect_bad_ptr(f, OP_PTR_INFO, b, NULL);
}

/* The slot of a freed small allocation, reused by another one of the same
 * class: the old pointer is the new allocation's, freeing it once is fine,
 * twice is not. */
static void test_double_free_after_reuse(void **state)
{
    struct fixture *f = *state;
    void *a = tu_alloc(f->pool, 1000, 0);
    tu_free(f->pool, a);
    void *b = tu_alloc(f->pool, 1000, 0);
    tu_free(f->pool, b);
    expect_bad_ptr(f, OP_FREE, b, NULL);
    if (a != b)
        expect_bad_ptr(f, OP_FREE, a, NULL);
}

static void test_alloc_bad_args(void **state)
{
    struct fixture *f = *state;
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    void *p = SENTINEL;

    assert_int_equal(ump_alloc(f->pool, 0, NULL, &p), -EINVAL);
    assert_ptr_equal(p, SENTINEL);
    assert_int_equal(ump_alloc(NULL, 100, NULL, &p), -EINVAL);
    assert_ptr_equal(p, SENTINEL);
    assert_int_equal(ump_alloc(f->pool, 100, NULL, NULL), -EINVAL);

    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
}

static void test_alloc_bad_hints(void **state)
{
    struct fixture *f = *state;
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    int ndev = ump_device_count(f->pool);
    assert_int_equal(ndev, 2);
    const int bad_devices[] = {ndev, ndev + 1, 1000, -3, -1000};
    const unsigned bad_flags[] = {4u, 8u, 0x80000000u, ~0u};
    const char *bad_policies[] = {"",           "bogus",        "LOCAL",
                                  "local,",     "interleave=9", "interleave=0+0",
                                  "domain=x",   "/no/such/plugin.so"};
    const int bad_access[] = {-1, 3, 1000};
    void *p = SENTINEL;

    for (size_t i = 0; i < sizeof(bad_devices) / sizeof(bad_devices[0]);
         i++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = bad_devices[i];
        assert_int_equal(ump_alloc(f->pool, 100, &h, &p), -EINVAL);
        assert_int_equal(ump_alloc(f->pool, 4 * TU_MIB, &h, &p), -EINVAL);
        assert_ptr_equal(p, SENTINEL);
    }
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.flags = bad_flags[i];
        assert_int_equal(ump_alloc(f->pool, 100, &h, &p), -EINVAL);
        assert_ptr_equal(p, SENTINEL);
    }
    for (size_t i = 0; i < sizeof(bad_policies) / sizeof(bad_policies[0]);
         i++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.policy = bad_policies[i];
        assert_int_equal(ump_alloc(f->pool, 100, &h, &p), -EINVAL);
        assert_int_equal(ump_alloc(f->pool, 4 * TU_MIB, &h, &p), -EINVAL);
        assert_ptr_equal(p, SENTINEL);
    }
    for (size_t i = 0; i < sizeof(bad_access) / sizeof(bad_access[0]); i++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.access = bad_access[i];
        assert_int_equal(ump_alloc(f->pool, 4 * TU_MIB, &h, &p), -EINVAL);
        assert_ptr_equal(p, SENTINEL);
    }
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);

    /* The accepted ones. */
    ump_hints_t h = UMP_HINTS_INIT;
    h.policy = "local";
    h.device = ndev - 1;
    assert_int_equal(ump_alloc(f->pool, 100, &h, &p), 0);
    tu_free(f->pool, p);
}

/* A bad hint logs one line. */
static void test_alloc_bad_hint_logs_once(void **state)
{
    struct fixture *f = *state;
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = 99;
    void *p = SENTINEL;
    char buf[4096];
    struct tu_capture cap;

    tu_capture_start(&cap);
    int rc = ump_alloc(f->pool, 100, &h, &p);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
}

/* Sizes no device set could hold: an error, no crash, nothing changed. */
static void test_alloc_huge(void **state)
{
    struct fixture *f = *state;
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 255, SIZE_MAX / 2 + 1,
                           (size_t)1 << 40, before.capacity + 1};
    void *p = SENTINEL;
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        int rc = ump_alloc(f->pool, huge[i], NULL, &p);
        if (rc != -ENOMEM && rc != -EINVAL)
            fail_msg("ump_alloc(%zu) = %d", huge[i], rc);
        assert_ptr_equal(p, SENTINEL);
    }
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    check_intact(f);
}

static void test_null_pool(void **state)
{
    (void)state;
    ump_ptr_info_t info;
    ump_stats_t st;
    int dev = 12345;
    int x;
    assert_int_equal(ump_free(NULL, &x), -EINVAL);
    assert_int_equal(ump_free_async(NULL, &x, NULL), -EINVAL);
    assert_int_equal(ump_ptr_info(NULL, &x, &info), -EINVAL);
    assert_int_equal(ump_stats(NULL, UMP_DEVICE_ALL, &st), -EINVAL);
    assert_int_equal(ump_set_device(NULL, 0), -EINVAL);
    assert_int_equal(ump_get_device(NULL, &dev), -EINVAL);
    assert_int_equal(dev, 12345);
    assert_int_equal(ump_device_count(NULL), -EINVAL);
    assert_int_equal(ump_trim(NULL), -EINVAL);
    ump_stream_t s = SENTINEL;
    assert_int_equal(ump_stream_wrap(NULL, 0, &x, &s), -EINVAL);
    assert_ptr_equal(s, SENTINEL);
    assert_int_equal(ump_pool_destroy(NULL), -EINVAL);
}

static void test_null_out(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(ump_ptr_info(f->pool, f->small, NULL), -EINVAL);
    assert_int_equal(ump_stats(f->pool, UMP_DEVICE_ALL, NULL), -EINVAL);
    assert_int_equal(ump_stats(f->pool, 0, NULL), -EINVAL);
    assert_int_equal(ump_get_device(f->pool, NULL), -EINVAL);
    assert_int_equal(ump_stream_create(f->pool, 0, NULL), -EINVAL);
}

static void test_set_device_bad(void **state)
{
    struct fixture *f = *state;
    int ndev = ump_device_count(f->pool);
    assert_int_equal(ump_set_device(f->pool, 1), 0);
    const int bad[] = {ndev, ndev + 7, -2, -100};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ump_set_device(f->pool, bad[i]), -EINVAL);
    int dev = -1;
    assert_int_equal(ump_get_device(f->pool, &dev), 0);
    assert_int_equal(dev, 1);
    assert_int_equal(ump_set_device(f->pool, 0), 0);
}

static void test_stats_bad_device(void **state)
{
    struct fixture *f = *state;
    int ndev = ump_device_count(f->pool);
    ump_stats_t st;
    memset(&st, 0x33, sizeof(st));
    ump_stats_t untouched = st;
    const int bad[] = {ndev, ndev + 1, 64, -4, -100}; /* -3: UMP_LOC_HOST */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ump_stats(f->pool, bad[i], &st), -EINVAL);
    assert_memory_equal(&st, &untouched, sizeof(st));
}

static void test_stream_create_bad_device(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = SENTINEL;
    int ndev = ump_device_count(f->pool);
    assert_int_equal(ump_stream_create(f->pool, ndev, &s), -EINVAL);
    assert_int_equal(ump_stream_create(f->pool, -5, &s), -EINVAL);
    assert_ptr_equal(s, SENTINEL);
}

/* ---- streams that are not the pool's ------------------------------------ */

/* Destroy last: the others leave the stream as it was. */
enum sop { S_SYNC, S_MEMCPY, S_MEMSET, S_HOST_FUNC, S_FREE_ASYNC, S_ACQUIRE,
           S_PREFETCH, S_DESTROY };
static const char *const sop_names[] = {
    "ump_stream_synchronize", "ump_memcpy_async", "ump_memset_async",
    "ump_launch_host_func", "ump_free_async", "ump_acquire", "ump_prefetch",
    "ump_stream_destroy",
};

static int host_func_runs;

static void count_run(void *arg)
{
    (void)arg;
    host_func_runs++;
}

/* One call on f->pool with a stream that is not one of its live streams:
 * -EINVAL, exactly one log line, the stream never touched, nothing queued
 * or freed, both pools' statistics unchanged, the allocations intact. */
static void expect_bad_stream(struct fixture *f, enum sop op, ump_stream_t s)
{
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t obefore = tu_stats(f->other, UMP_DEVICE_ALL);
    char buf[4096];
    struct tu_capture cap;
    int rc = 0;

    tu_capture_start(&cap);
    switch (op) {
    case S_DESTROY:
        rc = ump_stream_destroy(f->pool, s);
        break;
    case S_SYNC:
        rc = ump_stream_synchronize(f->pool, s);
        break;
    case S_MEMCPY: /* size 0: nothing wrong but the stream */
        rc = ump_memcpy_async(f->pool, NULL, NULL, 0, s);
        break;
    case S_MEMSET:
        rc = ump_memset_async(f->pool, NULL, 0, 0, s);
        break;
    case S_HOST_FUNC:
        rc = ump_launch_host_func(f->pool, s, count_run, NULL);
        break;
    case S_FREE_ASYNC:
        rc = ump_free_async(f->pool, f->small, s);
        break;
    case S_ACQUIRE: /* the stream is refused before the range is looked at */
        rc = ump_acquire(f->pool, f->big, 0, UMP_DEVICE_CURRENT, s);
        break;
    case S_PREFETCH:
        rc = ump_prefetch(f->pool, f->big, 0, UMP_DEVICE_CURRENT, s);
        break;
    }
    tu_capture_stop(&cap, buf, sizeof(buf));

    if (rc != -EINVAL)
        fail_msg("%s with stream %p: rc %d, expected -EINVAL", sop_names[op],
                 s, rc);
    if (tu_count_log_lines(buf) != 1)
        fail_msg("%s with stream %p: %d log lines, expected 1:\n%s",
                 sop_names[op], s, tu_count_log_lines(buf), buf);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t oafter = tu_stats(f->other, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    tu_assert_stats_equal(&obefore, &oafter);
    check_intact(f);
}

/* Every call that takes a stream, with s. */
static void expect_bad_stream_everywhere(struct fixture *f, ump_stream_t s)
{
    for (int op = S_SYNC; op <= S_DESTROY; op++)
        expect_bad_stream(f, (enum sop)op, s);
}

/* Destroying another pool's stream used to return 0 and unlink it from the
 * wrong pool's list: destroying either pool then read freed memory. */
static void test_stream_destroy_other_pool(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = NULL;

    assert_int_equal(ump_stream_create(f->other, 0, &s), 0);
    expect_bad_stream(f, S_DESTROY, s);
    /* Still the other pool's, and working there. */
    assert_int_equal(ump_stream_synchronize(f->other, s), 0);
    assert_int_equal(ump_stream_destroy(f->other, s), 0);
}

/* Another pool's stream, in every call that takes a stream. */
static void test_stream_of_other_pool(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = NULL;

    host_func_runs = 0;
    assert_int_equal(ump_stream_create(f->other, 0, &s), 0);
    expect_bad_stream_everywhere(f, s);
    assert_int_equal(ump_stream_synchronize(f->other, s), 0);
    assert_int_equal(host_func_runs, 0);
    assert_int_equal(ump_launch_host_func(f->other, s, count_run, NULL), 0);
    assert_int_equal(ump_stream_destroy(f->other, s), 0);
    assert_int_equal(host_func_runs, 1);
}

/* A destroyed stream is refused without being touched: destroying it twice
 * or synchronizing it used to read the freed stream. */
static void test_stream_destroyed(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = NULL;

    host_func_runs = 0;
    assert_int_equal(ump_stream_create(f->pool, 0, &s), 0);
    assert_int_equal(ump_stream_destroy(f->pool, s), 0);
    expect_bad_stream_everywhere(f, s);
    assert_int_equal(host_func_runs, 0);
}

/* The memory of a destroyed stream reused by a stream of the other pool:
 * the stale handle is still not this pool's (it used to pass for a live
 * stream, and destroying it destroyed the other pool's). */
static void test_stream_stale_handle_reused(void **state)
{
    struct fixture *f = *state;
    ump_stream_t s = NULL, s2 = NULL;

    assert_int_equal(ump_stream_create(f->pool, 0, &s), 0);
    assert_int_equal(ump_stream_destroy(f->pool, s), 0);
    assert_int_equal(ump_stream_create(f->other, 0, &s2), 0);
    /* Whether the allocator reused it is up to malloc; either way: */
    expect_bad_stream_everywhere(f, s);
    assert_int_equal(ump_stream_synchronize(f->other, s2), 0);
    assert_int_equal(ump_stream_destroy(f->other, s2), 0);
}

/* Made-up handles: a pointer to something else, and the default stream
 * where it cannot be used. */
static void test_stream_made_up(void **state)
{
    struct fixture *f = *state;
    char junk[64];

    memset(junk, 0, sizeof(junk));
    expect_bad_stream_everywhere(f, junk);
    expect_bad_stream(f, S_DESTROY, NULL);
}

/* ump_stream_wrap with what it refuses: rc, log lines, *stream_p and both
 * pools untouched, and the handle still not a stream of the pool. */
static void expect_wrap(struct fixture *f, int device, void *native, int want,
                        int lines)
{
    ump_stats_t before = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t obefore = tu_stats(f->other, UMP_DEVICE_ALL);
    ump_stream_t w = SENTINEL;
    char buf[4096];
    struct tu_capture cap;

    tu_capture_start(&cap);
    int rc = ump_stream_wrap(f->pool, device, native, &w);
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (rc != want)
        fail_msg("ump_stream_wrap(device %d, %p) = %d, expected %d", device,
                 native, rc, want);
    if (tu_count_log_lines(buf) != lines)
        fail_msg("ump_stream_wrap(device %d, %p): %d log lines, expected "
                 "%d:\n%s", device, native, tu_count_log_lines(buf), lines,
                 buf);
    assert_ptr_equal(w, SENTINEL);
    ump_stats_t after = tu_stats(f->pool, UMP_DEVICE_ALL);
    ump_stats_t oafter = tu_stats(f->other, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    tu_assert_stats_equal(&obefore, &oafter);
    check_intact(f);
}

/* Wrapping: NULL (the default stream already), a bad device, no stream_p:
 * -EINVAL; a stream of the pool: -EEXIST, told at debug level only; on sim
 * (no native streams) anything else is -ENOTSUP, and stays refused. */
static void test_stream_wrap_bad(void **state)
{
    struct fixture *f = *state;
    int ndev = ump_device_count(f->pool);
    ump_stream_t s = NULL, o = NULL;
    char junk[64];

    memset(junk, 0, sizeof(junk));
    assert_int_equal(ump_stream_create(f->pool, 0, &s), 0);
    assert_int_equal(ump_stream_create(f->other, 0, &o), 0);
    expect_wrap(f, 0, NULL, -EINVAL, 1);
    expect_wrap(f, ndev, s, -EINVAL, 1);
    expect_wrap(f, -1, s, -EINVAL, 1);
    expect_wrap(f, 0, s, -EEXIST, 0);
    expect_wrap(f, 1, s, -EEXIST, 0);
    if (!tu_on_cuda()) { /* the driver is never handed junk */
        expect_wrap(f, 0, junk, -ENOTSUP, 1);
        expect_wrap(f, 0, o, -ENOTSUP, 1); /* another pool's */
        expect_bad_stream_everywhere(f, junk);
        expect_bad_stream(f, S_SYNC, o);
    }
    char buf[4096];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_stream_wrap(f->pool, 0, s, NULL);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    /* The pool's stream works on, once destroyed it is gone. */
    assert_int_equal(ump_stream_synchronize(f->pool, s), 0);
    assert_int_equal(ump_stream_destroy(f->pool, s), 0);
    expect_bad_stream(f, S_SYNC, s);
    assert_int_equal(ump_stream_synchronize(f->other, o), 0);
    assert_int_equal(ump_stream_destroy(f->other, o), 0);
}

static void test_pool_create_bad(void **state)
{
    (void)state;
    ump_pool_t *p = SENTINEL;
    char buf[4096];
    struct tu_capture cap;

    tu_capture_start(&cap);
    int rc = ump_pool_create("backend:sim,no_such_key:1", &p);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_ptr_equal(p, SENTINEL);
    assert_int_equal(tu_count_log_lines(buf), 1);

    assert_int_equal(ump_pool_create("backend:sim", NULL), -EINVAL);
}

/* -EBUSY while anything is live, and the pool keeps working. */
static void test_destroy_busy(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *a = tu_alloc(pool, 100, 0);
    void *b = tu_alloc(pool, 3 * TU_MIB, 1);
    tu_pool_write(pool, a, 100, 10);
    tu_pool_write(pool, b, 3 * TU_MIB, 11);

    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    tu_assert_pool_pattern(pool, a, 100, 10);
    tu_assert_pool_pattern(pool, b, 3 * TU_MIB, 11);
    void *c = tu_alloc(pool, 5000, 0);
    tu_pool_write(pool, c, 5000, 12);
    tu_free(pool, a);
    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    tu_free(pool, b);
    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    tu_assert_pool_pattern(pool, c, 5000, 12);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 1);
    tu_free(pool, c);
    assert_int_equal(ump_pool_destroy(pool), 0);
}

int main(void)
{
    tu_main_begin("test_bad_input");
    char buf[512];
    /* Every fixture needs the two devices: on cuda the whole program runs
     * or skips. */
    conf = tu_config_or_exit("test_bad_input", CONF, buf, sizeof(buf));
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_free_null),
        T(test_free_bad_pointers),
        T(test_free_async_bad_pointers),
        T(test_free_async_stream_bad_pointers),
        T(test_ptr_info_bad_pointers),
        T(test_ptr_info_interior_ok),
        T(test_double_free),
        T(test_tier_ranges),
        T(test_double_free_after_reuse),
        T(test_alloc_bad_args),
        T(test_alloc_bad_hints),
        T(test_alloc_bad_hint_logs_once),
        T(test_alloc_huge),
        T(test_null_out),
        T(test_set_device_bad),
        T(test_stats_bad_device),
        T(test_stream_create_bad_device),
        T(test_stream_destroy_other_pool),
        T(test_stream_of_other_pool),
        T(test_stream_destroyed),
        T(test_stream_stale_handle_reused),
        T(test_stream_made_up),
        T(test_stream_wrap_bad),
        cmocka_unit_test(test_null_pool),
        cmocka_unit_test(test_pool_create_bad),
        cmocka_unit_test(test_destroy_busy),
    };
#undef T
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
