/* Bounded polling before a sleep (lib/util/poll.h): its bound, its count
 * of polling and busy threads against the CPUs, polls off and the yield
 * that turns them off, a fork child's count, and the count back at zero
 * once the sim's streams and collectives are idle. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
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
    t0 = ump_clock_ns();
    assert_false(ump_poll(flag_set, &no, 200000)); /* it polls: 1 <= cpus */
    if (!atomic_load(&ump_poll_off_until)) /* unless a yield lost the core */
        assert_true(ump_clock_ns() - t0 >= 200000);
    atomic_store(&ump_poll_off_until, 0);
    assert_int_equal(atomic_load(&ump_pollers), 1);
    ump_poll_busy(false);
    assert_int_equal(atomic_load(&ump_pollers), 0);
    assert_false(ump_poll_counted);
}

/* A fork child keeps only its own thread's count: the library's fork
 * handler (registered with the first pool) resets it. */
static void test_forked(void **state)
{
    (void)state;
    ump_pool_t *pool =
        tu_pool_create("backend:sim,sim_devices:1,sim_device_mem:64M");
    atomic_store(&ump_pollers, 3); /* as if other threads polled */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (!pid) {
        int bad = atomic_load(&ump_pollers) != 0;
        ump_poll_busy(true); /* a forking thread that was counted */
        ump_poll_forked();
        bad |= (atomic_load(&ump_pollers) != 1) << 1;
        _exit(bad);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    atomic_store(&ump_pollers, 0);
    tu_pool_destroy(pool);
}

struct spinner {
    int cpu;
    uint64_t ns;
    _Atomic bool started;
};

static bool pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/* A busy thread that runs no worker's operation, on the poller's core. */
static void *spin_main(void *arg)
{
    struct spinner *k = arg;
    pin(k->cpu);
    atomic_store(&k->started, true);
    uint64_t until = ump_clock_ns() + k->ns;
    while (ump_clock_ns() < until)
        ;
    return NULL;
}

/* A yield that hands the core to a busy thread for a time slice, no worker
 * moving meanwhile, turns polls off: the poll ends early and the next one
 * is refused at once. Both threads on one core; tried a few times, since
 * the scheduler decides whom a yield runs. */
static void test_off_switch(void **state)
{
    (void)state;
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &mine))
        cpu++;
    _Atomic bool no = false;
    bool fired = false;
    for (int attempt = 0; attempt < 5 && !fired; attempt++) {
        atomic_store(&ump_poll_off_until, 0);
        struct spinner k = {cpu, 300000000ull, false};
        pthread_t t;
        assert_true(pin(cpu));
        assert_int_equal(pthread_create(&t, NULL, spin_main, &k), 0);
        while (!atomic_load(&k.started))
            sched_yield();
        uint64_t t0 = ump_clock_ns();
        bool got = ump_poll(flag_set, &no, 200000000ull);
        uint64_t took = ump_clock_ns() - t0;
        assert_false(got);
        fired = atomic_load(&ump_poll_off_until) > t0;
        if (fired) {
            assert_true(took < 200000000ull); /* it stopped early */
            t0 = ump_clock_ns();
            assert_false(ump_poll(flag_set, &no, 200000000ull));
            assert_true(ump_clock_ns() - t0 < 100000000ull);
        }
        pthread_join(t, NULL);
        pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
    }
    assert_true(fired);
    assert_int_equal(atomic_load(&ump_pollers), 0);
    atomic_store(&ump_poll_off_until, 0);
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

/* Each test from a clean count, polls on: one that failed half way says
 * nothing about the next. */
static int fresh(void **state)
{
    (void)state;
    atomic_store(&ump_pollers, 0);
    atomic_store(&ump_poll_off_until, 0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bound, fresh),
        cmocka_unit_test_setup(test_sees_other_thread, fresh),
        cmocka_unit_test_setup(test_cap, fresh),
        cmocka_unit_test_setup(test_forked, fresh),
        cmocka_unit_test_setup(test_off_switch, fresh),
        cmocka_unit_test_setup(test_idle_sim, fresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
