/*
 * fork(): in the child, a pool inherited from the parent refuses work with
 * -ENOTRECOVERABLE, can be destroyed (the child's copy only), and new pools
 * work normally; the parent is unaffected by whatever the child did.
 *
 * The child must not run cmocka asserts (a failure would return into the
 * child's copy of the test runner): it checks with CHILD_CHECK and reports
 * the line of the first failed check through its exit status.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

/* Skipped as a whole on cuda (see main), so its pool memory is touched
 * directly: on sim the CPU reaches it. */
#define TU_CUDA_AWARE 1
#include "testutil.h"

/* publish:false: a published pool starts a thread, and TSan (CI) refuses
 * threads started in the child of a process that has some. */
#define CONF "backend:sim,sim_devices:2,sim_device_mem:64M,publish:false"

#define CHILD_CHECK(c)                                                         \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "child: check failed at line %d: %s\n", __LINE__, \
                    #c);                                                       \
            _exit(1);                                                          \
        }                                                                      \
    } while (0)

/* Waits for the child; fails the test unless it exited with status 0. */
static void wait_child(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("child killed by signal %d", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("child failed (exit status %d)", WEXITSTATUS(status));
}

/* A new pool in the child: allocate, write, read, free, destroy. */
static void child_new_pool(void)
{
    ump_pool_t *pool = NULL;
    CHILD_CHECK(ump_pool_create(CONF, &pool) == 0);
    void *p[4] = {NULL};
    const size_t sz[4] = {100, 8192, 3 * TU_MIB, 70 * TU_MIB};
    for (int i = 0; i < 4; i++) {
        CHILD_CHECK(ump_alloc(pool, sz[i], NULL, &p[i]) == 0);
        tu_fill(p[i], sz[i], 900 + (uint64_t)i);
    }
    for (int i = 0; i < 4; i++)
        CHILD_CHECK(tu_check(p[i], sz[i], 900 + (uint64_t)i) == sz[i]);
    ump_stats_t st;
    CHILD_CHECK(ump_stats(pool, UMP_DEVICE_ALL, &st) == 0);
    CHILD_CHECK(st.live_count == 4);
    for (int i = 0; i < 4; i++)
        CHILD_CHECK(ump_free(pool, p[i]) == 0);
    CHILD_CHECK(ump_pool_destroy(pool) == 0);
}

/* Every call on an inherited pool is refused, and nothing out is written. */
static void child_inherited_refuses(ump_pool_t *pool, void *live)
{
    const int E = -ENOTRECOVERABLE;
    void *p = (void *)0x1;
    ump_hints_t h = UMP_HINTS_INIT;
    ump_stats_t st;
    ump_ptr_info_t info;
    int dev = 77;
    ump_stream_t s = (void *)0x2;

    CHILD_CHECK(ump_alloc(pool, 100, NULL, &p) == E);
    CHILD_CHECK(ump_alloc(pool, 4 * TU_MIB, &h, &p) == E);
    CHILD_CHECK(p == (void *)0x1);
    CHILD_CHECK(ump_free(pool, live) == E);
    CHILD_CHECK(ump_free_async(pool, live, NULL) == E);
    CHILD_CHECK(ump_stats(pool, UMP_DEVICE_ALL, &st) == E);
    CHILD_CHECK(ump_stats(pool, 0, &st) == E);
    CHILD_CHECK(ump_ptr_info(pool, live, &info) == E);
    CHILD_CHECK(ump_set_device(pool, 1) == E);
    CHILD_CHECK(ump_get_device(pool, &dev) == E);
    CHILD_CHECK(dev == 77);
    CHILD_CHECK(ump_device_count(pool) == E);
    CHILD_CHECK(ump_trim(pool) == E);
    CHILD_CHECK(ump_stream_create(pool, 0, &s) == E);
    CHILD_CHECK(s == (void *)0x2);
}

struct parent_state {
    ump_pool_t *pool;
    void *small, *big;
    ump_stats_t before;
};

static void parent_setup(struct parent_state *ps)
{
    ps->pool = tu_pool_create(CONF);
    ps->small = tu_alloc(ps->pool, 5000, 0);
    ps->big = tu_alloc(ps->pool, 80 * TU_MIB, 1);
    tu_fill(ps->small, 5000, 1);
    tu_fill(ps->big, 80 * TU_MIB, 2);
    ps->before = tu_stats(ps->pool, UMP_DEVICE_ALL);
}

/* The parent's pool after the child is gone: same figures, same data, and
 * it keeps working. */
static void parent_check(struct parent_state *ps)
{
    ump_stats_t after = tu_stats(ps->pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&ps->before, &after);
    tu_assert_pattern(ps->small, 5000, 1);
    tu_assert_pattern(ps->big, 80 * TU_MIB, 2);
    ump_ptr_info_t info = tu_info(ps->pool, (char *)ps->big + TU_MIB);
    assert_ptr_equal(info.base, ps->big);

    void *p = tu_alloc(ps->pool, 3 * TU_MIB, 0);
    tu_fill(p, 3 * TU_MIB, 3);
    tu_assert_pattern(p, 3 * TU_MIB, 3);
    tu_free(ps->pool, p);
    tu_free(ps->pool, ps->small);
    tu_free(ps->pool, ps->big);
    tu_pool_destroy(ps->pool);
}

static void test_child_refuses_inherited(void **state)
{
    (void)state;
    struct parent_state ps;
    parent_setup(&ps);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a deadlock in the child ends as a signal */
        child_inherited_refuses(ps.pool, ps.big);
        child_inherited_refuses(ps.pool, ps.small);
        _exit(0);
    }
    wait_child(pid);
    parent_check(&ps);
}

/* Destroying the inherited pool in the child, with the parent's allocations
 * live, succeeds and frees only the child's copy. */
static void test_child_destroys_inherited(void **state)
{
    (void)state;
    struct parent_state ps;
    parent_setup(&ps);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        CHILD_CHECK(ump_pool_destroy(ps.pool) == 0);
        _exit(0);
    }
    wait_child(pid);
    parent_check(&ps);
}

/* The same while the parent's offload workers sleep on their conditions
 * (an offloadable allocation starts the eviction worker, a prefetch the
 * other): the child's destroy must not wait for sleepers it does not have. */
static void test_child_destroys_offloading(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    ump_hints_t h = UMP_HINTS_INIT;
    h.flags = UMP_HINT_OFFLOAD;
    void *p;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), 0);
    tu_fill(p, 4 * TU_MIB, 5);
    assert_int_equal(ump_prefetch(pool, p, 0, 0, NULL), 0);
    usleep(50 * 1000); /* both workers asleep again */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        CHILD_CHECK(ump_pool_destroy(pool) == 0);
        _exit(0);
    }
    wait_child(pid);
    tu_assert_pattern(p, 4 * TU_MIB, 5);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* The child makes and uses its own pool, with the inherited one alive or
 * destroyed first. */
static void test_child_new_pool(void **state)
{
    (void)state;
    struct parent_state ps;
    parent_setup(&ps);
    for (int destroy_first = 0; destroy_first < 2; destroy_first++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(20);
            if (destroy_first)
                CHILD_CHECK(ump_pool_destroy(ps.pool) == 0);
            child_new_pool();
            if (!destroy_first) {
                child_inherited_refuses(ps.pool, ps.big);
                CHILD_CHECK(ump_pool_destroy(ps.pool) == 0);
            }
            _exit(0);
        }
        wait_child(pid);
    }
    parent_check(&ps);
}

/* A grandchild: the child's own pool is inherited in turn. */
static void test_grandchild(void **state)
{
    (void)state;
    struct parent_state ps;
    parent_setup(&ps);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        ump_pool_t *mine = NULL;
        void *p = NULL;
        CHILD_CHECK(ump_pool_create(CONF, &mine) == 0);
        CHILD_CHECK(ump_alloc(mine, 1000, NULL, &p) == 0);
        fflush(NULL);
        pid_t g = fork();
        CHILD_CHECK(g >= 0);
        if (g == 0) {
            CHILD_CHECK(ump_free(mine, p) == -ENOTRECOVERABLE);
            CHILD_CHECK(ump_pool_destroy(mine) == 0);
            CHILD_CHECK(ump_pool_destroy(ps.pool) == 0);
            child_new_pool();
            _exit(0);
        }
        int status = 0;
        CHILD_CHECK(waitpid(g, &status, 0) == g);
        CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHILD_CHECK(ump_free(mine, p) == 0);
        CHILD_CHECK(ump_pool_destroy(mine) == 0);
        _exit(0);
    }
    wait_child(pid);
    parent_check(&ps);
}

struct busy {
    ump_pool_t *pool;
    atomic_bool stop;
    atomic_int rounds;
    int failures;
};

static void *busy_thread(void *arg)
{
    struct busy *b = arg;
    void *p[16];
    while (!atomic_load(&b->stop)) {
        for (int i = 0; i < 16; i++)
            if (ump_alloc(b->pool, 64 + (size_t)i * 4000, NULL, &p[i]) != 0) {
                p[i] = NULL;
                b->failures++;
            }
        for (int i = 0; i < 16; i++)
            if (p[i] && ump_free(b->pool, p[i]) != 0)
                b->failures++;
        atomic_fetch_add(&b->rounds, 1);
    }
    return NULL;
}

/* fork while another thread is busy in the pool: the child neither
 * deadlocks nor sees the pool as usable, and its new pool works. */
static void test_fork_while_busy(void **state)
{
    (void)state;
    struct parent_state ps;
    parent_setup(&ps);
    struct busy b = {.pool = ps.pool};
    atomic_init(&b.stop, false);
    atomic_init(&b.rounds, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, busy_thread, &b), 0);

    for (int k = 0; k < 5; k++) {
        while (atomic_load(&b.rounds) < 2 * (k + 1))
            sched_yield();
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(20);
            child_inherited_refuses(ps.pool, ps.big);
            child_new_pool();
            CHILD_CHECK(ump_pool_destroy(ps.pool) == 0);
            _exit(0);
        }
        wait_child(pid);
    }
    atomic_store(&b.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(b.failures, 0);
    /* The busy thread's work is balanced: the figures match again. */
    ump_stats_t after = tu_stats(ps.pool, UMP_DEVICE_ALL);
    assert_int_equal(after.live_count, ps.before.live_count);
    tu_assert_pattern(ps.small, 5000, 1);
    tu_assert_pattern(ps.big, 80 * TU_MIB, 2);
    tu_free(ps.pool, ps.small);
    tu_free(ps.pool, ps.big);
    tu_pool_destroy(ps.pool);
}

int main(void)
{
    if (tu_on_cuda()) {
        printf("SKIP: test_fork on cuda: a CUDA context does not survive "
               "fork()\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_refuses_inherited),
        cmocka_unit_test(test_child_destroys_inherited),
        cmocka_unit_test(test_child_destroys_offloading),
        cmocka_unit_test(test_child_new_pool),
        cmocka_unit_test(test_grandchild),
        cmocka_unit_test(test_fork_while_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
