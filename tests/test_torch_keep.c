/*
 * The PyTorch entry points' kept blocks (bindings/torch.c): each thread
 * keeps its last few freed blocks for its stream, and umpool_torch_reset
 * (torch.cuda.empty_cache) takes every thread's, not only its caller's,
 * while those threads go on allocating and freeing. A block taken from a
 * list its owner still used would be handed out twice: each thread writes
 * its own pattern into what it holds and checks it before the free.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "testutil.h"
#include "umpool_bindings.h"

#define CONF "backend:sim,sim_devices:1,sim_device_mem:1G,publish:false"
#define NTHREADS 3
#define OPS 100000
#define HELD 4
#define EDGE 256 /* bytes checked at each end of a block */

static const size_t sizes[] = {256, 4096, 65536, TU_MIB, 3 * TU_MIB};

struct shared {
    atomic_int done;    /* workers past their loop, keeping blocks */
    atomic_bool go_on;  /* they may allocate again, then exit */
    atomic_int broken;  /* patterns found changed */
    atomic_int failed;  /* allocations that failed */
};

struct held {
    unsigned char *p;
    size_t size;
    uint64_t seed;
};

/* Each end of a block: EDGE bytes, or half of a smaller block. */
static size_t edge(const struct held *h)
{
    return h->size < 2 * EDGE ? h->size / 2 : EDGE;
}

static void mark(const struct held *h)
{
    size_t e = edge(h);
    tu_fill(h->p, e, h->seed);
    tu_fill(h->p + h->size - e, e, h->seed + 1);
}

static bool intact(const struct held *h)
{
    size_t e = edge(h);
    return tu_check(h->p, e, h->seed) == e &&
           tu_check(h->p + h->size - e, e, h->seed + 1) == e;
}

static void drop(struct shared *sh, struct held *h)
{
    if (!intact(h))
        atomic_fetch_add(&sh->broken, 1);
    umpool_torch_free(h->p, h->size, 0, NULL);
    h->p = NULL;
}

struct worker {
    struct shared *sh;
    int id;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    struct held held[HELD] = {{0}};
    uint64_t x = tu_mix((uint64_t)w->id + 1);
    for (int i = 0; i < OPS; i++) {
        struct held *h = &held[i % HELD];
        if (h->p)
            drop(sh, h);
        x = tu_mix(x);
        size_t size = sizes[x % (sizeof(sizes) / sizeof(sizes[0]))];
        h->p = umpool_torch_alloc(size, 0, NULL);
        if (!h->p) {
            atomic_fetch_add(&sh->failed, 1);
            continue;
        }
        h->size = size;
        h->seed = ((uint64_t)w->id << 40) + (uint64_t)i * 2;
        mark(h);
    }
    for (int i = 0; i < HELD; i++)
        if (held[i].p)
            drop(sh, &held[i]);
    atomic_fetch_add(&sh->done, 1);
    while (!atomic_load(&sh->go_on))
        sched_yield();
    /* The list an empty_cache emptied still works. */
    struct held h = {umpool_torch_alloc(4096, 0, NULL), 4096,
                     (uint64_t)w->id << 40};
    if (!h.p) {
        atomic_fetch_add(&sh->failed, 1);
        return NULL;
    }
    mark(&h);
    drop(sh, &h); /* kept: its thread's exit gives it back */
    return NULL;
}

static ump_pool_t *process_pool(void)
{
    ump_pool_t *pool = NULL;
    assert_int_equal(ump_process_pool(CONF, &pool), 0);
    return pool;
}

/* Resets race with the workers' allocations and frees; once the workers
 * only keep, one reset leaves nothing live. */
static void test_reset_while_others_free(void **state)
{
    (void)state;
    ump_pool_t *pool = process_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    struct shared sh = {0};
    struct worker w[NTHREADS];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){&sh, i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    int resets = 0;
    while (atomic_load(&sh.done) < NTHREADS) {
        umpool_torch_reset();
        resets++;
        sched_yield();
    }
    ump_stats_t kept = tu_stats(pool, 0);
    assert_true(kept.live_count > base); /* the workers keep blocks */
    umpool_torch_reset();
    ump_stats_t after = tu_stats(pool, 0);
    assert_int_equal(after.live_count, base);
    assert_true(after.reserved_bytes < kept.reserved_bytes);
    atomic_store(&sh.go_on, true);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(atomic_load(&sh.broken), 0);
    assert_int_equal(atomic_load(&sh.failed), 0);
    assert_true(resets > 0);
    assert_int_equal(tu_stats(pool, 0).live_count, base); /* exits gave */
}

static void *keep_one_and_exit(void *arg)
{
    void *p = umpool_torch_alloc(3 * TU_MIB, 0, NULL);
    if (p)
        umpool_torch_free(p, 3 * TU_MIB, 0, NULL);
    *(bool *)arg = p != NULL;
    return NULL;
}

/* A thread that exits gives its kept blocks back and leaves the chain of
 * lists: a reset afterwards does not touch what it left. */
static void test_exit_gives_back(void **state)
{
    (void)state;
    ump_pool_t *pool = process_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    for (int round = 0; round < 20; round++) {
        bool ok = false;
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, keep_one_and_exit, &ok),
                         0);
        if (round % 2)
            umpool_torch_reset(); /* while it may be exiting */
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_true(ok);
        assert_int_equal(tu_stats(pool, 0).live_count, base);
    }
    umpool_torch_reset();
    assert_int_equal(tu_stats(pool, 0).live_count, base);
}

int main(void)
{
    if (tu_on_cuda()) {
        printf("SKIP: test_torch_keep on cuda: it writes pool memory from "
               "the CPU\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset_while_others_free),
        cmocka_unit_test(test_exit_gives_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
