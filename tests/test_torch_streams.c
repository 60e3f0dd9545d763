/*
 * The PyTorch entry points (bindings/torch.c) on PyTorch's own streams: a
 * stream the application made with the driver (torch.cuda.Stream()'s side
 * streams are non-blocking streams of PyTorch's stream pool), not one of
 * the pool's. On the cuda backend over the fake driver (tests/fake_cuda.c),
 * whose streams run their work at once but whose events, with evdelay=N,
 * say "not ready" to their first N queries: a deferred free waits that
 * long. A block freed on such a stream used to go back to the pool at once
 * (ump_free_async refused the stream, and the plug-in fell back to
 * ump_free), where another stream's allocation could get it while the GPU
 * still used it.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "testutil.h"
#include "fakecuda_util.h"
#include "umpool_bindings.h"

#include "mem/pool.h"

#define SZ TU_MIB           /* the freed block's size */
#define OTHER (2 * TU_MIB)  /* blocks that push it out of the kept list */
#define KEEP 8              /* blocks each thread keeps (bindings/torch.c) */
#define EVDELAY 50
#define STR_(x) #x
#define STR(x) STR_(x)

#ifdef HAVE_CUDA_H

/* Lines of captured text that contain needle. */
static int lines_with(const char *buf, const char *needle)
{
    int n = 0;
    for (const char *p = buf; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static ump_pool_t *pool;

/* The process's pool, on the fake driver, made by the first test. */
static ump_pool_t *torch_pool(void)
{
    /* 1 GiB (sparse: only what is touched costs memory): the threaded
     * test's frees on side streams wait EVDELAY queries each, and under
     * ASan that many pile up that 128 MiB ran out (an allocation does not
     * wait for deferred frees: the plug-in returns NULL, as PyTorch's
     * out-of-memory path expects). */
    use_fake("devices=1,mem=1024,evdelay=" STR(EVDELAY));
    if (!pool)
        assert_int_equal(ump_process_pool("backend:cuda,publish:false",
                                          &pool), 0);
    assert_string_equal(ump_backend_name(pool), "cuda");
    return pool;
}

/* Deferred frees the pool has queued and not completed. */
static int pending_count(void)
{
    int n = 0;
    pthread_mutex_lock(&pool->lock);
    for (struct pending *p = pool->pending; p; p = p->next)
        n++;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

/* Lets the fake's events come ready (each answers "not ready" EVDELAY
 * times) and the pool complete its deferred frees at its next looks. */
static void drain(void)
{
    for (int i = 0; i < 2 * EVDELAY && pending_count(); i++)
        assert_int_equal(ump_trim(pool), 0);
}

/* Frees KEEP blocks of OTHER bytes on s, allocated first (all at once, so
 * that none is the kept one of another): the oldest kept block goes back
 * to the pool. */
static void push_out(void *s, void *others[KEEP])
{
    for (int i = 0; i < KEEP; i++) {
        others[i] = umpool_torch_alloc(OTHER, 0, s);
        assert_non_null(others[i]);
    }
}

static void free_all(void *s, void *others[KEEP])
{
    for (int i = 0; i < KEEP; i++)
        umpool_torch_free(others[i], OTHER, 0, s);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* A block freed on a side stream and pushed out of the thread's kept list
 * goes back behind that stream's work: queued as a deferred free (no log
 * line: the stream is wrapped, not refused), and no allocation on another
 * stream gets it while the stream's work is not done. Once it is, the
 * block is the pool's again. */
static void test_side_stream_free_is_ordered(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    CUstream side = fake_native_stream(0);
    void *others[KEEP];

    void *p = umpool_torch_alloc(SZ, 0, side);
    assert_non_null(p);
    push_out(side, others);
    char buf[8192];
    struct tu_capture cap;
    tu_capture_start(&cap);
    umpool_torch_free(p, SZ, 0, side); /* kept: the oldest */
    free_all(side, others);            /* the last one pushes p out */
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("freeing on PyTorch's stream logged:\n%s", buf);
    assert_int_equal(pending_count(), 1);

    /* Other streams' allocations, of its size and others, while the
     * stream's work is not done: none overlaps p. */
    enum { N = 12 };
    CUstream other = fake_native_stream(0);
    void *q[N];
    for (int i = 0; i < N; i++) {
        size_t size = i % 2 ? SZ : SZ / 2;
        q[i] = umpool_torch_alloc(size, 0, i % 3 ? NULL : other);
        assert_non_null(q[i]);
        if (overlaps(q[i], size, p, SZ))
            fail_msg("allocation %d (%zu bytes) at %p got the block freed "
                     "at %p on a stream whose work is not done", i, size,
                     q[i], p);
    }
    assert_int_equal(pending_count(), 1);
    for (int i = 0; i < N; i++)
        umpool_torch_free(q[i], i % 2 ? SZ : SZ / 2, 0, i % 3 ? NULL : other);

    /* The stream's work done (the event answers ready), the pool takes
     * the block back at its next look. */
    drain();
    assert_int_equal(pending_count(), 0);
    tu_capture_start(&cap);
    umpool_torch_reset(); /* synchronizes side: wrapped, accepted */
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("empty_cache with blocks of PyTorch's stream logged:\n%s",
                 buf);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    assert_int_equal(fake_native_sync(0, side), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(side), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(other), CUDA_SUCCESS);
}

/* cudaStreamLegacy and cudaStreamPerThread, as ExternalStream may pass
 * them: no stream to wrap, ordered on the legacy default stream (which
 * waits for every blocking stream's work, per-thread ones' included). */
static void test_default_stream_handles(void **state)
{
    (void)state;
    torch_pool();
    void *handles[] = {CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
    char buf[8192];
    struct tu_capture cap;
    uint64_t base = 0;

    for (size_t h = 0; h < 2; h++) {
        umpool_torch_reset(); /* this thread's list empty */
        drain();
        if (!h)
            base = tu_stats(pool, 0).live_count;
        void *s = handles[h], *others[KEEP];
        void *p = umpool_torch_alloc(SZ, 0, s);
        assert_non_null(p);
        push_out(s, others);
        tu_capture_start(&cap);
        umpool_torch_free(p, SZ, 0, s);
        free_all(s, others);
        tu_capture_stop(&cap, buf, sizeof(buf));
        if (tu_count_log_lines(buf) != 0)
            fail_msg("freeing on stream %p logged:\n%s", s, buf);
        assert_int_equal(pending_count(), 1);
        void *q = umpool_torch_alloc(SZ, 0, NULL);
        assert_ptr_not_equal(q, p);
        umpool_torch_free(q, SZ, 0, NULL);
        drain();
        assert_int_equal(pending_count(), 0);
    }
    tu_capture_start(&cap);
    umpool_torch_reset();
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("empty_cache logged:\n%s", buf);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
}

/* empty_cache waits for a side stream's work (it synchronizes it) and
 * gives its kept blocks straight back: nothing left pending, nothing
 * logged, nothing live. */
static void test_reset_synchronizes_side_stream(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    CUstream side = fake_native_stream(0);
    void *b[3];
    for (int i = 0; i < 3; i++)
        assert_non_null(b[i] = umpool_torch_alloc(SZ, 0, side));
    for (int i = 0; i < 3; i++)
        umpool_torch_free(b[i], SZ, 0, side);
    assert_int_equal(tu_stats(pool, 0).live_count, base + 3); /* kept */
    char buf[8192];
    struct tu_capture cap;
    tu_capture_start(&cap);
    umpool_torch_reset();
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("empty_cache logged:\n%s", buf);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    assert_int_equal(pending_count(), 0);
    assert_int_equal(fake_native_destroy(side), CUDA_SUCCESS);
}

/* record_stream naming a side stream: the free waits for it through a host
 * function on it (accepted: wrapped), not through the legacy default
 * stream, and logs nothing. */
static void test_record_side_stream(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    CUstream side = fake_native_stream(0), other = fake_native_stream(0);
    long fns = fake_count("hostfn_calls");
    char buf[8192];
    struct tu_capture cap;

    void *p = umpool_torch_alloc(SZ, 0, side);
    assert_non_null(p);
    tu_capture_start(&cap);
    umpool_torch_record_stream(p, other);
    umpool_torch_free(p, SZ, 0, side);
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("a free after record_stream logged:\n%s", buf);
    /* Host functions are not driver calls from one: none counted. */
    assert_int_equal(fake_count("hostfn_calls"), fns);
    /* The fake runs host functions at once: both streams reached, the
     * block is back at the next call. */
    void *q = umpool_torch_alloc(SZ, 0, NULL);
    assert_non_null(q);
    umpool_torch_free(q, SZ, 0, NULL);
    umpool_torch_reset();
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    assert_int_equal(fake_native_destroy(side), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(other), CUDA_SUCCESS);
}

/* A handle the pool cannot order on (no stream at all) named by
 * record_stream: the block is never handed out again (it may still be in
 * use there), with one line from the wrap and one from the plug-in. */
static void test_unorderable_stream_keeps_block_out(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    char junk[64] = {0};
    char buf[8192];
    struct tu_capture cap;

    void *p = umpool_torch_alloc(SZ, 0, NULL);
    assert_non_null(p);
    tu_capture_start(&cap);
    umpool_torch_record_stream(p, junk);
    umpool_torch_free(p, SZ, 0, NULL);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(lines_with(buf, "stream_adopt"), 1);
    assert_int_equal(lines_with(buf, "kept out of the pool"), 1);
    for (int i = 0; i < 4; i++) {
        void *q = umpool_torch_alloc(SZ, 0, NULL);
        assert_non_null(q);
        assert_ptr_not_equal(q, p);
        umpool_torch_free(q, SZ, 0, NULL);
    }
    umpool_torch_reset();
    assert_int_equal(tu_stats(pool, 0).live_count, base + 1);
    /* Still a live block of the pool (the test knows the fake's streams
     * are idle): freed here, so that nothing is left at exit. */
    assert_int_equal(ump_free(pool, p), 0);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    assert_int_equal(ump_trim(pool), 0);
}

/* A thread that frees on a side stream and exits: its kept blocks go back
 * behind the stream's work, logged nowhere. */
static void *free_and_exit(void *arg)
{
    CUstream s = arg;
    void *p = umpool_torch_alloc(SZ, 0, s);
    if (p)
        umpool_torch_free(p, SZ, 0, s);
    return p;
}

static void test_exit_gives_back_on_side_stream(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    uint64_t base = tu_stats(pool, 0).live_count;
    CUstream side = fake_native_stream(0);
    char buf[8192];
    struct tu_capture cap;
    pthread_t t;
    void *p = NULL;

    tu_capture_start(&cap);
    assert_int_equal(pthread_create(&t, NULL, free_and_exit, side), 0);
    assert_int_equal(pthread_join(t, &p), 0);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_non_null(p);
    if (tu_count_log_lines(buf) != 0)
        fail_msg("a thread's exit logged:\n%s", buf);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    drain();
    assert_int_equal(pending_count(), 0);
    assert_int_equal(fake_native_destroy(side), CUDA_SUCCESS);
}

/* Threads allocating and freeing on side streams of their own and on one
 * they share, recording the shared one now and then, while empty_cache
 * runs: the first sightings of a stream race (one wrap), blocks go back
 * stream-ordered, none is handed out twice (each thread writes its pattern
 * into what it holds and checks it before the free), nothing is logged. */
#define NTHREADS 3
#define OPS 3000
#define HELD 4

struct racer {
    CUstream own, shared;
    int id;
    atomic_int *broken, *failed;
};

static const size_t race_sizes[] = {4096, 65536, SZ, 3 * TU_MIB};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct {
        unsigned char *p;
        size_t size;
        void *stream;
        uint64_t seed;
    } held[HELD] = {{0}};
    uint64_t x = tu_mix((uint64_t)r->id + 7);
    for (int i = 0; i < OPS; i++) {
        int k = i % HELD;
        if (held[k].p) {
            if (tu_check(held[k].p, 256, held[k].seed) != 256)
                atomic_fetch_add(r->broken, 1);
            umpool_torch_free(held[k].p, held[k].size, 0, held[k].stream);
            held[k].p = NULL;
        }
        x = tu_mix(x);
        size_t size = race_sizes[x % 4];
        void *s = (x >> 8) % 3 == 0 ? r->shared : (x >> 8) % 3 == 1 ? r->own
                                                                    : NULL;
        unsigned char *p = umpool_torch_alloc(size, 0, s);
        if (!p) {
            atomic_fetch_add(r->failed, 1);
            continue;
        }
        if ((x >> 16) % 8 == 0)
            umpool_torch_record_stream(p, s == r->own ? r->shared : r->own);
        held[k].p = p;
        held[k].size = size;
        held[k].stream = s;
        held[k].seed = ((uint64_t)r->id << 40) + (uint64_t)i;
        tu_fill(p, 256, held[k].seed);
    }
    for (int k = 0; k < HELD; k++)
        if (held[k].p)
            umpool_torch_free(held[k].p, held[k].size, 0, held[k].stream);
    return NULL;
}

static void test_threads_on_side_streams(void **state)
{
    (void)state;
    torch_pool();
    umpool_torch_reset();
    drain();
    uint64_t base = tu_stats(pool, 0).live_count;
    CUstream shared = fake_native_stream(0);
    struct racer r[NTHREADS];
    pthread_t t[NTHREADS];
    atomic_int broken = 0, failed = 0;
    char buf[16384];
    struct tu_capture cap;

    for (int i = 0; i < NTHREADS; i++)
        r[i] = (struct racer){fake_native_stream(0), shared, i, &broken,
                              &failed};
    tu_capture_start(&cap);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 20; i++) {
        umpool_torch_reset();
        sched_yield();
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    umpool_torch_reset();
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (tu_count_log_lines(buf) != 0)
        fail_msg("threads on side streams logged:\n%s", buf);
    assert_int_equal(atomic_load(&broken), 0);
    assert_int_equal(atomic_load(&failed), 0);
    drain();
    assert_int_equal(pending_count(), 0);
    assert_int_equal(tu_stats(pool, 0).live_count, base);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(fake_native_destroy(r[i].own), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(shared), CUDA_SUCCESS);
}

#else /* without cuda.h there is no fake driver */
NO_FAKE(test_side_stream_free_is_ordered)
NO_FAKE(test_reset_synchronizes_side_stream)
NO_FAKE(test_default_stream_handles)
NO_FAKE(test_record_side_stream)
NO_FAKE(test_unorderable_stream_keeps_block_out)
NO_FAKE(test_exit_gives_back_on_side_stream)
NO_FAKE(test_threads_on_side_streams)
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_side_stream_free_is_ordered),
        cmocka_unit_test(test_reset_synchronizes_side_stream),
        cmocka_unit_test(test_default_stream_handles),
        cmocka_unit_test(test_record_side_stream),
        cmocka_unit_test(test_exit_gives_back_on_side_stream),
        cmocka_unit_test(test_threads_on_side_streams),
        cmocka_unit_test(test_unorderable_stream_keeps_block_out),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
