/*
 * Deferred frees (lib/mem/pending.c, ump_free_async): a free queued on an
 * idle stream is done at once, on a busy one it waits until
 * pending_collect sees its event complete; collection keeps the queue's
 * order; recycled structs keep their events; and a ump_free_async that
 * fails leaves the pool's counts as they were (issue 11, defect 4).
 *
 * The pending_* functions run with pool->lock held, as their contract
 * says. They never touch the memory they are given (that is the caller's
 * pending_done), so the white-box tests queue dummy owners and hand the
 * structs back with pending_recycle; no public call that collects deferred
 * frees (allocation slow paths, ump_free_async, ump_trim) is made while
 * such a dummy is queued.
 *
 * Built with -DTP_PUBLIC_ONLY, only the tests that use nothing but
 * include/umpool.h are compiled: that program links against any build of
 * libumpool.so, e.g. an older one, to show the defect there.
 */
#include "config.h"

#include <pthread.h>
#include <time.h>

#include "testutil.h"

#ifndef TP_PUBLIC_ONLY
#include "backend/backend.h"
#include "mem/pending.h"
#include "mem/pool.h"
#endif

#define CONF "backend:sim,sim_devices:1,sim_device_mem:128M"

#ifndef TP_PUBLIC_ONLY
/* ---- a gate that holds a stream --------------------------------------- */

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    bool entered;
};

#define GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, true, \
                   false}
/* Opened by every test's end, so that no stream worker stays stuck. */
static struct gate gates[2] = {GATE_INIT, GATE_INIT};

static void gate_fn(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->entered = true;
    pthread_cond_broadcast(&g->cond);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* Holds stream s until gate_open(g): returns once its worker sits in it. */
static void gate_hold(ump_pool_t *pool, ump_stream_t s, struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = false;
    g->entered = false;
    pthread_mutex_unlock(&g->lock);
    assert_int_equal(ump_launch_host_func(pool, s, gate_fn, g), 0);
    pthread_mutex_lock(&g->lock);
    while (!g->entered)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static int teardown_gates(void **state)
{
    (void)state;
    gate_open(&gates[0]);
    gate_open(&gates[1]);
    return 0;
}
#endif

/* ---- defect 4: public API only ---------------------------------------- */

static void expect_free_async_fails(ump_pool_t *pool, void *ptr,
                                    ump_stream_t bad, const char *what)
{
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    int rc = ump_free_async(pool, ptr, bad);
    if (rc != -EINVAL)
        fail_msg("ump_free_async(%p, %s) = %d, want -EINVAL", ptr, what, rc);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    if (after.alloc_count != before.alloc_count ||
        after.free_count != before.free_count)
        fail_msg("failed ump_free_async(%s) moved the counts: alloc_count "
                 "%llu -> %llu, free_count %llu -> %llu", what,
                 (unsigned long long)before.alloc_count,
                 (unsigned long long)after.alloc_count,
                 (unsigned long long)before.free_count,
                 (unsigned long long)after.free_count);
    tu_assert_stats_equal(&before, &after);
    /* still live, and whole */
    assert_int_equal(tu_info(pool, ptr).base, ptr);
}

/* A ump_free_async that fails (a stream that is none, one destroyed, one
 * of another pool) changes nothing: the allocation stays live, and
 * alloc_count and free_count are exactly as before (defect 4: the undone
 * claim used to count as one more allocation and one more free). Small
 * objects, thread-cacheable runs and runs too big for a thread cache count
 * in different places: all three. */
static void test_failed_free_async_counts(void **state)
{
    (void)state;
    static char not_a_stream[512]; /* zeros: no stream's handle */
    ump_pool_t *pool = tu_pool_create(CONF ",log_level:error");
    ump_pool_t *other = tu_pool_create(CONF ",log_level:error");
    ump_stream_t dead = NULL, foreign = NULL;
    assert_int_equal(ump_stream_create(pool, 0, &dead), 0);
    assert_int_equal(ump_stream_create(other, 0, &foreign), 0);
    assert_int_equal(ump_stream_destroy(pool, dead), 0);

    void *ptrs[3] = {tu_alloc(pool, 1000, 0), tu_alloc(pool, 4 * TU_MIB, 0),
                     tu_alloc(pool, 70 * TU_MIB, 0)};
    ump_stats_t start = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(start.alloc_count, 3);
    assert_int_equal(start.free_count, 0);
    for (int i = 0; i < 3; i++)
        expect_free_async_fails(pool, ptrs[i], not_a_stream, "not a stream");
    for (int i = 0; i < 3; i++)
        expect_free_async_fails(pool, ptrs[i], dead, "destroyed stream");
    for (int i = 0; i < 3; i++)
        expect_free_async_fails(pool, ptrs[i], foreign, "another pool's");
    ump_stats_t mid = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&start, &mid);

    /* Still live: a real free of each works once, and counts once. */
    assert_int_equal(ump_free_async(pool, ptrs[0], NULL), 0);
    tu_free(pool, ptrs[1]);
    assert_int_equal(ump_free_async(pool, ptrs[2], NULL), 0);
    ump_stats_t end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.alloc_count, 3);
    assert_int_equal(end.free_count, 3);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(end.live_bytes, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ump_free(pool, ptrs[i]), -EINVAL);

    assert_int_equal(ump_stream_destroy(other, foreign), 0);
    tu_pool_destroy(other);
    tu_pool_destroy(pool);
}

#ifndef TP_PUBLIC_ONLY

/* ---- white box: the queue ---------------------------------------------- */

/* Owners the queue carries but never touches. */
static char owners[16];

static struct pending *queue(ump_pool_t *pool, int i, ump_stream_t s)
{
    struct pending *done = (struct pending *)&done; /* must be written */
    pthread_mutex_lock(&pool->lock);
    int rc = pending_queue(pool, &owners[i], (uint32_t)i, i % 2 == 0, s,
                           &done);
    pthread_mutex_unlock(&pool->lock);
    assert_int_equal(rc, 0);
    return done;
}

static struct pending *collect(ump_pool_t *pool, bool wait)
{
    pthread_mutex_lock(&pool->lock);
    struct pending *p = pending_collect(pool, wait);
    pthread_mutex_unlock(&pool->lock);
    return p;
}

static void recycle_list(ump_pool_t *pool, struct pending *p)
{
    pthread_mutex_lock(&pool->lock);
    for (struct pending *next; p; p = next) {
        next = p->next;
        pending_recycle(pool, p);
    }
    pthread_mutex_unlock(&pool->lock);
}

static int list_len(const struct pending *p)
{
    int n = 0;
    for (; p; p = p->next)
        n++;
    return n;
}

/* Idle streams (the default one, a new one, one whose work has run): the
 * struct comes back done, carrying what was queued, and nothing waits. */
static void test_idle_completes(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_stream_t s = NULL;
    assert_int_equal(ump_stream_create(pool, 0, &s), 0);
    static char buf[4096];
    assert_int_equal(ump_memset_async(pool, buf, 1, sizeof(buf), s), 0);
    assert_int_equal(ump_stream_synchronize(pool, s), 0);

    const ump_stream_t idle[] = {NULL, s};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++) {
            struct pending *p = queue(pool, i, idle[k]);
            assert_non_null(p);
            assert_ptr_equal(p->meta, &owners[i]);
            assert_int_equal(p->idx, i);
            assert_int_equal(p->is_slab, i % 2 == 0);
            assert_null(pool->pending);
            recycle_list(pool, p);
            assert_ptr_equal(pool->spare_pending, p);
        }
    }
    assert_null(collect(pool, false));
    assert_null(collect(pool, true));
    assert_int_equal(ump_stream_destroy(pool, s), 0);
    tu_pool_destroy(pool);
}

struct opener {
    struct gate *g;
};

static void *open_later(void *arg)
{
    struct opener *o = arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    gate_open(o->g);
    return NULL;
}

/* A busy stream: queued, not collected while the stream is held, collected
 * once its work ran; collecting with wait waits for it. */
static void test_busy_stays_queued(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_stream_t s = NULL;
    assert_int_equal(ump_stream_create(pool, 0, &s), 0);

    gate_hold(pool, s, &gates[0]);
    assert_null(queue(pool, 1, s));
    struct pending *q = pool->pending;
    assert_non_null(q);
    assert_ptr_equal(q->meta, &owners[1]);
    for (int i = 0; i < 3; i++) {
        assert_null(collect(pool, false));
        assert_ptr_equal(pool->pending, q);
    }
    gate_open(&gates[0]);
    assert_int_equal(ump_stream_synchronize(pool, s), 0);
    struct pending *p = collect(pool, false);
    assert_ptr_equal(p, q);
    assert_null(p->next);
    assert_null(pool->pending);
    recycle_list(pool, p);

    /* wait: returns only once the stream let go */
    gate_hold(pool, s, &gates[0]);
    assert_null(queue(pool, 2, s));
    struct opener o = {&gates[0]};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_later, &o), 0);
    p = collect(pool, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_non_null(p);
    assert_ptr_equal(p->meta, &owners[2]);
    assert_null(p->next);
    assert_null(pool->pending);
    recycle_list(pool, p);

    assert_int_equal(ump_stream_destroy(pool, s), 0);
    tu_pool_destroy(pool);
}

/* Frees on two held streams: what one stream's completion releases comes
 * out in the queue's order, the other's stay queued in theirs. */
static void test_collect_order(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    enum { N = 10 };
    ump_stream_t s[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ump_stream_create(pool, 0, &s[k]), 0);
        gate_hold(pool, s[k], &gates[k]);
    }
    for (int i = 0; i < N; i++)
        assert_null(queue(pool, i, s[i % 3 == 0]));
    /* the queue as it stands */
    struct pending *order[N];
    int n = 0;
    for (struct pending *p = pool->pending; p; p = p->next)
        order[n++] = p;
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++) /* each queued once */
        for (int k = 0; k < i; k++)
            assert_ptr_not_equal(order[i]->meta, order[k]->meta);
    assert_null(collect(pool, false));

    for (int round = 0; round < 2; round++) {
        /* round 0: stream 0 (i % 3 != 0) runs; round 1: stream 1 */
        gate_open(&gates[round]);
        assert_int_equal(ump_stream_synchronize(pool, s[round]), 0);
        struct pending *done = collect(pool, false), *p = done;
        struct pending *left = pool->pending;
        for (int i = 0; i < N; i++) {
            int idx = (int)(order[i]->idx);
            bool on_this = (idx % 3 == 0) == (round == 1);
            if (!on_this)
                continue;
            assert_ptr_equal(p, order[i]);
            p = p->next;
        }
        assert_null(p);
        /* the rest, still in their order */
        for (int i = 0; i < N && round == 0; i++) {
            if ((int)order[i]->idx % 3 != 0)
                continue;
            assert_ptr_equal(left, order[i]);
            left = left->next;
        }
        assert_null(left);
        recycle_list(pool, done);
    }
    assert_null(pool->pending);
    for (int k = 0; k < 2; k++)
        assert_int_equal(ump_stream_destroy(pool, s[k]), 0);
    tu_pool_destroy(pool);
}

/* ---- white box: events, counted through a copy of the backend's ops --- */

static const struct backend_ops *real_be;
static struct backend_ops counting_be;
static int n_event_create, n_event_destroy, record_fail;

static int count_event_create(void *ctx, void **event_p)
{
    n_event_create++;
    return real_be->event_create(ctx, event_p);
}

static int count_event_destroy(void *ctx, void *event)
{
    n_event_destroy++;
    return real_be->event_destroy(ctx, event);
}

static int maybe_fail_record(void *ctx, void *event, void *stream)
{
    if (record_fail)
        return record_fail;
    return real_be->event_record(ctx, event, stream);
}

static void count_events(ump_pool_t *pool)
{
    real_be = pool->be;
    counting_be = *real_be;
    counting_be.event_create = count_event_create;
    counting_be.event_destroy = count_event_destroy;
    counting_be.event_record = maybe_fail_record;
    n_event_create = n_event_destroy = record_fail = 0;
    pool->be = &counting_be;
}

/* A recycled struct is reused with its event: no event is made while a
 * spare struct is there, and the pool destroys each event once. */
static void test_recycled_keep_events(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_stream_t s = NULL;
    assert_int_equal(ump_stream_create(pool, 0, &s), 0);
    count_events(pool);

    struct pending *first = queue(pool, 0, s);
    assert_non_null(first);
    void *ev = first->event;
    assert_non_null(ev);
    assert_int_equal(n_event_create, 1);
    recycle_list(pool, first);
    for (int i = 0; i < 100; i++) {
        struct pending *p = queue(pool, i % 16, i % 2 ? s : NULL);
        assert_ptr_equal(p, first);
        assert_ptr_equal(p->event, ev);
        recycle_list(pool, p);
    }
    assert_int_equal(n_event_create, 1);

    /* Three held at once: one spare reused, two made; recycled, all three
     * serve the next three with no new event. */
    void *evs[3];
    for (int round = 0; round < 2; round++) {
        gate_hold(pool, s, &gates[0]);
        for (int i = 0; i < 3; i++)
            assert_null(queue(pool, i, s));
        int k = 0;
        for (struct pending *p = pool->pending; p; p = p->next, k++) {
            if (round == 0)
                evs[k] = p->event;
            else
                assert_true(p->event == evs[0] || p->event == evs[1] ||
                            p->event == evs[2]);
        }
        assert_int_equal(k, 3);
        assert_int_equal(n_event_create, 3);
        assert_true(evs[0] != evs[1] && evs[1] != evs[2] &&
                    evs[0] != evs[2]);
        gate_open(&gates[0]);
        assert_int_equal(ump_stream_synchronize(pool, s), 0);
        struct pending *done = collect(pool, false);
        assert_int_equal(list_len(done), 3);
        recycle_list(pool, done);
    }

    /* Through the public call: many deferred frees, no new event. */
    for (int i = 0; i < 50; i++) {
        void *p = tu_alloc(pool, 100 + (size_t)i * 1000, 0);
        assert_int_equal(ump_free_async(pool, p, i % 2 ? s : NULL), 0);
    }
    gate_hold(pool, s, &gates[0]);
    void *held[3];
    for (int i = 0; i < 3; i++) {
        held[i] = tu_alloc(pool, 5000, 0);
        assert_int_equal(ump_free_async(pool, held[i], s), 0);
    }
    assert_int_equal(list_len(pool->pending), 3);
    assert_int_equal(n_event_create, 3);
    gate_open(&gates[0]);
    assert_int_equal(ump_stream_synchronize(pool, s), 0);
    assert_int_equal(ump_trim(pool), 0); /* collects them */
    assert_null(pool->pending);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.mapped_bytes, 0);

    assert_int_equal(n_event_destroy, 0);
    assert_int_equal(ump_stream_destroy(pool, s), 0);
    tu_pool_destroy(pool); /* pending_fini: each event once */
    assert_int_equal(n_event_destroy, 3);
}

/* An event that cannot be recorded: pending_queue queues nothing and keeps
 * the struct (and its event) for reuse; ump_free_async returns the error,
 * the allocation stays live and the counts do not move. */
static void test_record_failure(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_stream_t s = NULL;
    assert_int_equal(ump_stream_create(pool, 0, &s), 0);
    count_events(pool);

    record_fail = -EIO;
    struct pending *done = (struct pending *)&done;
    pthread_mutex_lock(&pool->lock);
    int rc = pending_queue(pool, &owners[0], 0, true, s, &done);
    pthread_mutex_unlock(&pool->lock);
    assert_int_equal(rc, -EIO);
    assert_ptr_equal(done, (struct pending *)&done); /* not written */
    assert_null(pool->pending);
    struct pending *spare = pool->spare_pending;
    assert_non_null(spare);
    assert_non_null(spare->event);
    assert_int_equal(n_event_create, 1);

    void *ptrs[3] = {tu_alloc(pool, 1000, 0), tu_alloc(pool, 4 * TU_MIB, 0),
                     tu_alloc(pool, 70 * TU_MIB, 0)};
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ump_free_async(pool, ptrs[i], s), -EIO);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    assert_int_equal(after.alloc_count, 3);
    assert_int_equal(after.free_count, 0);
    assert_int_equal(n_event_create, 1); /* the spare served each try */
    assert_ptr_equal(pool->spare_pending, spare);

    record_fail = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(ump_free_async(pool, ptrs[i], s), 0);
    assert_int_equal(ump_stream_synchronize(pool, s), 0);
    assert_int_equal(ump_trim(pool), 0);
    ump_stats_t end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.alloc_count, 3);
    assert_int_equal(end.free_count, 3);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(end.mapped_bytes, 0);
    assert_int_equal(ump_stream_destroy(pool, s), 0);
    tu_pool_destroy(pool);
    assert_int_equal(n_event_destroy, n_event_create);
}

#endif /* TP_PUBLIC_ONLY */

int main(void)
{
#ifndef TP_PUBLIC_ONLY
#define T(f) cmocka_unit_test_teardown(f, teardown_gates)
#else
#define T(f) cmocka_unit_test(f)
#endif
    const struct CMUnitTest tests[] = {
#ifndef TP_PUBLIC_ONLY
        T(test_idle_completes),
        T(test_busy_stays_queued),
        T(test_collect_order),
        T(test_recycled_keep_events),
        T(test_record_failure),
#endif
        T(test_failed_free_async_counts),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
