/* Bounded polling before a sleep (lib/util/poll.h): its bound, its count
 * of polling and busy threads against the CPUs, polls off, a fork child's
 * count, and the count back at zero once the sim's streams and collectives
 * are idle. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "util/clock.h"
#include "util/poll.h"

static bool flag_set(const void *arg)
{
    return atomic_load((const _Atomic bool *)arg);
}

/* True at once when done; false after the bound when never done. */
static void test_bound(void **state)
{
    (void)state;
    _Atomic bool yes = true, no = false;
    assert_true(ump_poll(flag_set, &yes, UMP_POLL_NS));
    atomic_store(&ump_poll_off_until, 0);
    uint64_t t0 = ump_clock_ns();
    assert_false(ump_poll(flag_set, &no, 200000));
    uint64_t took = ump_clock_ns() - t0;
    /* the whole bound, unless a yield lost the core (a loaded host),
     * which stops the poll and every other for a while */
    if (!atomic_load(&ump_poll_off_until))
        assert_true(took >= 200000);
    assert_true(took < 1000000000ull); /* bounded, even on a loaded host */
    assert_int_equal(atomic_load(&ump_pollers), 0);
    atomic_store(&ump_poll_off_until, 0);
}

static void *set_later(void *arg)
{
    uint64_t until = ump_clock_ns() + 100000;
    while (ump_clock_ns() < until)
        ump_cpu_relax();
    atomic_store((_Atomic bool *)arg, true);
    return NULL;
}

/* Another thread's store ends the poll. */
static void test_sees_other_thread(void **state)
{
    (void)state;
    _Atomic bool flag = false;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_later, &flag), 0);
    /* a loaded host may run the setter late, and a poll that loses its
     * core to it stops early: polls again (turned back on) for a while */
    bool seen = false;
    uint64_t deadline = ump_clock_ns() + 5000000000ull;
    while (!seen && ump_clock_ns() < deadline) {
        atomic_store(&ump_poll_off_until, 0);
        seen = ump_poll(flag_set, &flag, 1000000000ull);
    }
    pthread_join(t, NULL);
    atomic_store(&ump_poll_off_until, 0);
    assert_true(seen);
    assert_int_equal(atomic_load(&ump_pollers), 0);
}

/* As many counted as CPUs, or polls off: a poll gives up at once,
 * counting nothing. A busy thread is counted once, polling or not. */
static void test_cap(void **state)
{
    (void)state;
    _Atomic bool no = false;
    int cpus = ump_poll_cpus();
    assert_true(cpus >= 1);
    atomic_store(&ump_pollers, cpus);
    uint64_t t0 = ump_clock_ns();
    assert_false(ump_poll(flag_set, &no, 1000000000ull));
    assert_true(ump_clock_ns() - t0 < 500000000ull); /* not the second */
    assert_int_equal(atomic_load(&ump_pollers), cpus);
    atomic_store(&ump_pollers, 0);

    /* Polls off: false at once, nothing counted. */
    atomic_store(&ump_poll_off_until, ump_clock_ns() + 10000000000ull);
    t0 = ump_clock_ns();
    assert_false(ump_poll(flag_set, &no, 1000000000ull));
    assert_true(ump_clock_ns() - t0 < 500000000ull);
    assert_int_equal(atomic_load(&ump_pollers), 0);
    atomic_store(&ump_poll_off_until, 0);

    ump_poll_busy(true);
    assert_int_equal(atomic_load(&ump_pollers), 1);
    assert_false(ump_poll(flag_set, &no, 100000)); /* it polled: 1 <= cpus */
    assert_int_equal(atomic_load(&ump_pollers), 1);
    ump_poll_busy(false);
    assert_int_equal(atomic_load(&ump_pollers), 0);
    assert_false(ump_poll_counted);
}

/* A fork child keeps only its own thread's count. */
static void test_forked(void **state)
{
    (void)state;
    atomic_store(&ump_pollers, 3);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (!pid) {
        ump_poll_forked();
        int bad = atomic_load(&ump_pollers) != 0;
        ump_poll_busy(true);
        ump_poll_forked();
        bad |= atomic_load(&ump_pollers) != 1;
        _exit(bad);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    atomic_store(&ump_pollers, 0);
}

/* Streams and collectives of a sim pool leave no thread counted once
 * their work is done and their workers' polls have ended. */
static void test_idle_sim(void **state)
{
    (void)state;
    ump_pool_t *pool =
        tu_pool_create("backend:sim,sim_devices:2,sim_device_mem:64M");
    ump_comm_t *comm;
    assert_int_equal(ump_comm_create(pool, 2, NULL, NULL, &comm), 0);
    float *buf[2];
    for (int r = 0; r < 2; r++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = r;
        assert_int_equal(ump_alloc(pool, 4096, &h, (void **)&buf[r]), 0);
        assert_int_equal(ump_memset_async(pool, buf[r], 0, 4096, NULL), 0);
    }
    ump_stream_t st[2];
    for (int r = 0; r < 2; r++)
        assert_int_equal(ump_stream_create(pool, r, &st[r]), 0);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(ump_allreduce(comm, (const void *const *)buf,
                                       (void *const *)buf, 1024, UMP_FLOAT32,
                                       UMP_SUM, i % 2 ? st : NULL),
                         0);
        if (i % 2)
            for (int r = 0; r < 2; r++)
                assert_int_equal(ump_stream_synchronize(pool, st[r]), 0);
    }
    uint64_t deadline = ump_clock_ns() + 2000000000ull;
    while (atomic_load(&ump_pollers) && ump_clock_ns() < deadline)
        usleep(1000);
    assert_int_equal(atomic_load(&ump_pollers), 0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ump_stream_destroy(pool, st[r]), 0);
        assert_int_equal(ump_free(pool, buf[r]), 0);
    }
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_sees_other_thread),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_forked),
        cmocka_unit_test(test_idle_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
