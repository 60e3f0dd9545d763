/*
 * Several threads allocate, check and free at random for a bounded time:
 * mostly small sizes, some of 1-8 MiB, buffers handed to another thread to
 * free, statistics and trims in between. The devices are small so that the
 * pool runs out now and then: -ENOMEM is counted, any other error fails.
 * At each statistics check point, the memory figures' invariants hold
 * while the other threads go on (check_stats).
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

#define TU_CUDA_AWARE 1
#include "testutil.h"

#define NTHREADS 4
#define SLOTS 96
#define INBOX 256

struct item {
    void *p;
    size_t size;
    uint64_t seed;
};

/* Buffers handed to a thread by another, to check and free. */
struct inbox {
    pthread_mutex_t lock;
    int n;
    struct item items[INBOX];
};

struct run_state {
    ump_pool_t *pool;
    double seconds;
    int big_one_in; /* one allocation in this many is 1-8 MiB */
    struct inbox inbox[NTHREADS];
    atomic_ulong allocs, frees, enomem, handed;
    /* check points where the devices' reserved bytes were compared with
     * the pool's, and where chunks came and went too fast to compare */
    atomic_ulong sums_checked, sums_moving;
    atomic_int errors;
    char first_error[256];
    pthread_mutex_t err_lock;
};

struct worker {
    struct run_state *rs;
    int id;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report(struct run_state *rs, const char *what, int rc,
                   const void *p)
{
    if (atomic_fetch_add(&rs->errors, 1) == 0) {
        pthread_mutex_lock(&rs->err_lock);
        snprintf(rs->first_error, sizeof(rs->first_error),
                 "%s: rc %d (%s), ptr %p", what, rc, ump_strerror(rc), p);
        pthread_mutex_unlock(&rs->err_lock);
    }
}

/* Like report, with a message of its own. */
static void report_msg(struct run_state *rs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report_msg(struct run_state *rs, const char *fmt, ...)
{
    if (atomic_fetch_add(&rs->errors, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        pthread_mutex_lock(&rs->err_lock);
        vsnprintf(rs->first_error, sizeof(rs->first_error), fmt, ap);
        pthread_mutex_unlock(&rs->err_lock);
        va_end(ap);
    }
}

/* What one ump_stats call says, whatever the other threads do: it reads
 * the figures under the pool's lock, and every byte live, mapped or cached
 * lies in a chunk created and not released (reserved). live_bytes sums
 * per-thread counters with no lock, but memory only goes back to the
 * driver under the lock after its free was counted. (Nothing here uses
 * the tiers, whose moved allocations stay live without device chunks.) */
static void check_one(struct run_state *rs, const ump_stats_t *st, int dev)
{
    const char *bad = st->mapped_bytes > st->capacity ? "mapped > capacity"
                      : st->live_bytes > st->reserved_bytes
                          ? "live > reserved"
                      : st->mapped_bytes > st->reserved_bytes
                          ? "mapped > reserved"
                      : st->cached_bytes > st->reserved_bytes
                          ? "cached > reserved"
                      : st->reserved_bytes > st->peak_reserved_bytes
                          ? "reserved > peak_reserved"
                      : st->reserved_bytes > st->capacity
                          ? "reserved > capacity"
                          : NULL;
    if (bad)
        report_msg(rs,
                   "ump_stats(%d): %s: capacity %zu live %zu mapped %zu "
                   "cached %zu reserved %zu peak_reserved %zu",
                   dev, bad, st->capacity, st->live_bytes, st->mapped_bytes,
                   st->cached_bytes, st->reserved_bytes,
                   st->peak_reserved_bytes);
}

/* The figures of the devices against the pool's. Each ump_stats call is a
 * lock hold of its own, so other threads create and release chunks in
 * between: the devices' reserved bytes are compared with the pool's only
 * when the pool's chunk counters (which only grow, and move with every
 * create and release) are the same before and after reading the devices,
 * tried a few times, and counted as moving when they never were. The
 * peaks need no such window: the pool's is at least each device's at
 * every moment, and peaks only grow. quiet: no other thread runs, so the
 * first try must do. */
static void check_stats(struct run_state *rs, bool quiet)
{
    int ndev = ump_device_count(rs->pool);
    ump_stats_t a, b, dev[UMP_MAX_DEVICES];
    for (int tries = 0; tries < 8; tries++) {
        int rc = ump_stats(rs->pool, UMP_DEVICE_ALL, &a);
        for (int d = 0; d < ndev && !rc; d++)
            rc = ump_stats(rs->pool, d, &dev[d]);
        if (!rc)
            rc = ump_stats(rs->pool, UMP_DEVICE_ALL, &b);
        if (rc) {
            report(rs, "ump_stats", rc, NULL);
            return;
        }
        check_one(rs, &a, UMP_DEVICE_ALL);
        check_one(rs, &b, UMP_DEVICE_ALL);
        size_t sum = 0;
        for (int d = 0; d < ndev; d++) {
            check_one(rs, &dev[d], d);
            sum += dev[d].reserved_bytes;
            if (dev[d].peak_reserved_bytes > b.peak_reserved_bytes)
                report_msg(rs, "device %d's peak_reserved %zu above the "
                           "pool's %zu", d, dev[d].peak_reserved_bytes,
                           b.peak_reserved_bytes);
        }
        if (a.peak_reserved_bytes > b.peak_reserved_bytes)
            report_msg(rs, "the pool's peak_reserved went down");
        if (a.chunks_created != b.chunks_created ||
            a.chunks_released != b.chunks_released) {
            if (quiet)
                report_msg(rs, "chunks moved with no thread running");
            continue;
        }
        if (sum != a.reserved_bytes || a.reserved_bytes != b.reserved_bytes)
            report_msg(rs, "devices' reserved bytes add up to %zu, the "
                       "pool's are %zu then %zu", sum, a.reserved_bytes,
                       b.reserved_bytes);
        atomic_fetch_add(&rs->sums_checked, 1);
        return;
    }
    atomic_fetch_add(&rs->sums_moving, 1);
}

/* Checks a buffer's data and the pool's view of it, then frees it. */
static void check_and_free(struct run_state *rs, const struct item *it)
{
    if (tu_pool_check(rs->pool, it->p, it->size, it->seed) != it->size)
        report(rs, "pattern broken", 0, it->p);
    ump_ptr_info_t info;
    int rc = ump_ptr_info(rs->pool, (char *)it->p + it->size / 2, &info);
    if (rc != 0)
        report(rs, "ump_ptr_info", rc, it->p);
    else if (info.base != it->p || info.size != it->size ||
             info.tier != UMP_TIER_DEVICE)
        report(rs, "ump_ptr_info: wrong base, size or tier", 0, it->p);
    rc = ump_free(rs->pool, it->p);
    if (rc != 0)
        report(rs, "ump_free", rc, it->p);
    else
        atomic_fetch_add(&rs->frees, 1);
}

static bool inbox_push(struct inbox *ib, const struct item *it)
{
    bool ok = false;
    pthread_mutex_lock(&ib->lock);
    if (ib->n < INBOX) {
        ib->items[ib->n++] = *it;
        ok = true;
    }
    pthread_mutex_unlock(&ib->lock);
    return ok;
}

static bool inbox_pop(struct inbox *ib, struct item *it)
{
    bool ok = false;
    pthread_mutex_lock(&ib->lock);
    if (ib->n > 0) {
        *it = ib->items[--ib->n];
        ok = true;
    }
    pthread_mutex_unlock(&ib->lock);
    return ok;
}

static size_t random_size(struct run_state *rs, uint64_t *rng)
{
    uint64_t r = tu_rand(rng);
    if (r % (uint64_t)rs->big_one_in == 0)
        return TU_MIB + (r >> 8) % (7 * TU_MIB + 1);
    switch ((r >> 4) % 4) {
    case 0:
        return 1 + (r >> 8) % 256;
    case 1:
        return 1 + (r >> 8) % 4096;
    case 2:
        return 1 + (r >> 8) % 65536;
    default:
        return 1 + (r >> 8) % (512 * TU_KIB);
    }
}

static void *worker_thread(void *arg)
{
    struct worker *w = arg;
    struct run_state *rs = w->rs;
    struct item items[SLOTS];
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    uint64_t serial = 0;
    int ndev = ump_device_count(rs->pool);
    double deadline = now_s() + rs->seconds;
    memset(items, 0, sizeof(items));

    int rc = ump_set_device(rs->pool, w->id % ndev);
    if (rc != 0)
        report(rs, "ump_set_device", rc, NULL);

    for (unsigned long iter = 0; atomic_load(&rs->errors) == 0; iter++) {
        if (iter % 64 == 0 && now_s() > deadline)
            break;
        uint64_t r = tu_rand(&rng);
        struct item it;
        if (r % 8 == 0 && inbox_pop(&rs->inbox[w->id], &it)) {
            check_and_free(rs, &it);
            continue;
        }
        if (r % 512 == 1)
            check_stats(rs, false);
        if (r % 4096 == 2 && (rc = ump_trim(rs->pool)) != 0)
            report(rs, "ump_trim", rc, NULL);

        struct item *slot = &items[(r >> 32) % SLOTS];
        if (slot->p) {
            if ((r >> 12) % 8 == 0 &&
                inbox_push(&rs->inbox[(w->id + 1) % NTHREADS], slot)) {
                atomic_fetch_add(&rs->handed, 1);
            } else {
                check_and_free(rs, slot);
            }
            slot->p = NULL;
            continue;
        }
        size_t size = random_size(rs, &rng);
        void *p = NULL;
        rc = ump_alloc(rs->pool, size, NULL, &p);
        if (rc == -ENOMEM) {
            atomic_fetch_add(&rs->enomem, 1);
            continue;
        }
        if (rc != 0 || !p || (uintptr_t)p % TU_ALIGN) {
            report(rs, "ump_alloc", rc, p);
            continue;
        }
        atomic_fetch_add(&rs->allocs, 1);
        slot->p = p;
        slot->size = size;
        slot->seed = ((uint64_t)w->id << 48) ^ ++serial;
        rc = tu_pool_fill(rs->pool, p, size, slot->seed);
        if (rc != 0)
            report(rs, "writing a buffer", rc, p);
    }
    for (int i = 0; i < SLOTS; i++)
        if (items[i].p)
            check_and_free(rs, &items[i]);
    return NULL;
}

static void run_stress(const char *config, double seconds, int big_one_in)
{
    static struct run_state rs;
    memset(&rs, 0, sizeof(rs));
    rs.pool = tu_pool_create(config);
    rs.seconds = seconds;
    rs.big_one_in = big_one_in;
    pthread_mutex_init(&rs.err_lock, NULL);
    for (int i = 0; i < NTHREADS; i++)
        pthread_mutex_init(&rs.inbox[i].lock, NULL);

    pthread_t t[NTHREADS];
    struct worker w[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){&rs, i};
        assert_int_equal(pthread_create(&t[i], NULL, worker_thread, &w[i]),
                         0);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    /* What is still in the inboxes is freed here, by yet another thread. */
    struct item it;
    for (int i = 0; i < NTHREADS; i++)
        while (inbox_pop(&rs.inbox[i], &it))
            check_and_free(&rs, &it);

    check_stats(&rs, true);
    print_message("%lu allocations, %lu frees, %lu handed over, %lu -ENOMEM; "
                  "reserved bytes summed at %lu check points (%lu with "
                  "chunks moving)\n",
                  atomic_load(&rs.allocs), atomic_load(&rs.frees),
                  atomic_load(&rs.handed), atomic_load(&rs.enomem),
                  atomic_load(&rs.sums_checked), atomic_load(&rs.sums_moving));
    if (atomic_load(&rs.errors) != 0)
        fail_msg("%d errors, the first: %s", atomic_load(&rs.errors),
                 rs.first_error);
    assert_true(atomic_load(&rs.allocs) > 0);
    assert_int_equal(atomic_load(&rs.allocs), atomic_load(&rs.frees));

    ump_stats_t st = tu_stats(rs.pool, UMP_DEVICE_ALL);
    assert_int_equal(st.alloc_count, atomic_load(&rs.allocs));
    assert_int_equal(st.free_count, atomic_load(&rs.frees));
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_bytes, 0);
    assert_true(st.mapped_bytes <= st.capacity);
    assert_true(st.peak_reserved_bytes > 0);
    assert_int_equal(ump_trim(rs.pool), 0);
    ump_stats_t trimmed = tu_stats(rs.pool, UMP_DEVICE_ALL);
    assert_int_equal(trimmed.cached_bytes, 0);
    assert_int_equal(trimmed.mapped_bytes, 0);
    assert_int_equal(trimmed.chunks_released, trimmed.chunks_created);
    /* Nothing live: everything goes back to the driver, on every device;
     * the peak stays. */
    assert_int_equal(trimmed.reserved_bytes, 0);
    assert_int_equal(trimmed.peak_reserved_bytes, st.peak_reserved_bytes);
    for (int d = 0; d < ump_device_count(rs.pool); d++)
        assert_int_equal(tu_stats(rs.pool, d).reserved_bytes, 0);
    check_stats(&rs, true);
    if (atomic_load(&rs.errors) != 0)
        fail_msg("after the trim: %s", rs.first_error);
    tu_pool_destroy(rs.pool);
    for (int i = 0; i < NTHREADS; i++)
        pthread_mutex_destroy(&rs.inbox[i].lock);
    pthread_mutex_destroy(&rs.err_lock);
}

/* Two devices with room for most of what the threads hold. */
static void test_stress_mixed(void **state)
{
    (void)state;
    run_stress("backend:sim,sim_devices:2,sim_device_mem:128M", 2.5, 12);
}

/* One device, so that it runs on a one-GPU machine under
 * UMPOOL_TEST_BACKEND=cuda too. */
static void test_stress_one_device(void **state)
{
    (void)state;
    run_stress("backend:sim,sim_devices:1,sim_device_mem:128M", 1.5, 12);
}

/* Devices so small that the pool is often full. */
static void test_stress_tight(void **state)
{
    (void)state;
    run_stress("backend:sim,sim_devices:2,sim_device_mem:32M", 1.0, 6);
}

struct pingpong {
    ump_pool_t *pool;
    struct inbox *box;
    atomic_int *producers_left;
    unsigned long count;
    int errors;
};

static void *producer(void *arg)
{
    struct pingpong *pp = arg;
    for (unsigned long i = 0; i < pp->count; i++) {
        struct item it = {NULL, 16 + i % 3000, i};
        if (ump_alloc(pp->pool, it.size, NULL, &it.p) != 0) {
            pp->errors++;
            continue;
        }
        if (tu_pool_fill(pp->pool, it.p, it.size, it.seed) != 0)
            pp->errors++;
        while (!inbox_push(pp->box, &it))
            sched_yield();
    }
    atomic_fetch_sub(pp->producers_left, 1);
    return NULL;
}

static void consume(struct pingpong *pp, const struct item *it)
{
    if (tu_pool_check(pp->pool, it->p, it->size, it->seed) != it->size)
        pp->errors++;
    if (ump_free(pp->pool, it->p) != 0)
        pp->errors++;
    pp->count++;
}

static void *consumer(void *arg)
{
    struct pingpong *pp = arg;
    struct item it;
    for (;;) {
        if (inbox_pop(pp->box, &it)) {
            consume(pp, &it);
            continue;
        }
        if (atomic_load(pp->producers_left) == 0) {
            /* A producer pushes before it counts itself out: look once
             * more after seeing them all gone. */
            if (!inbox_pop(pp->box, &it))
                break;
            consume(pp, &it);
            continue;
        }
        sched_yield();
    }
    return NULL;
}

/* Two threads allocate, two others free everything: the frees are all from
 * a thread other than the allocating one. */
static void test_cross_thread_pingpong(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:128M");
    static struct inbox box;
    memset(&box, 0, sizeof(box));
    pthread_mutex_init(&box.lock, NULL);
    atomic_int left;
    atomic_init(&left, 2);
    enum { PER = 20000 };
    struct pingpong pp[4] = {
        {pool, &box, &left, PER, 0},
        {pool, &box, &left, PER, 0},
        {pool, &box, &left, 0, 0},
        {pool, &box, &left, 0, 0},
    };
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL,
                                        i < 2 ? producer : consumer, &pp[i]),
                         0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pp[i].errors, 0);
    assert_int_equal(pp[2].count + pp[3].count, 2 * PER);

    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.alloc_count, 2 * PER);
    assert_int_equal(st.free_count, 2 * PER);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).mapped_bytes, 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).reserved_bytes, 0);
    tu_pool_destroy(pool);
    pthread_mutex_destroy(&box.lock);
}

int main(void)
{
    tu_main_begin("test_stress");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_mixed),
        cmocka_unit_test(test_stress_one_device),
        cmocka_unit_test(test_stress_tight),
        cmocka_unit_test(test_cross_thread_pingpong),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return tu_main_end(failed, sizeof(tests) / sizeof(tests[0]));
}
