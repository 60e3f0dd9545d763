/* IPC handles (lib/ipc; umpool.h ump_ipc_*): an allocation opened by
 * another pool of this process and by other processes (this program run
 * again as "peer"), the maker's free kept while it is open, replays,
 * damaged and foreign handles, and an opener killed while it holds one. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdcount.h"
#include "rundir.h"
#include "ipc/ipc.h"
#include "ipc/wire.h"
#include "mem/chunks.h"
#include "umpool.h"

#define MiB ((size_t)1 << 20)
#define CONF                                                           \
    "backend:sim,sim_devices:2,sim_device_mem:64M,host_limit:64M,"      \
    "publish:false"

static ump_pool_t *make_pool(const char *conf)
{
    ump_pool_t *p = NULL;
    assert_int_equal(ump_pool_create(conf, &p), 0);
    return p;
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }

static void fill(void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)p)[i] = pattern(i);
}

/* Bytes of p that are not the pattern, sampled. */
static size_t wrong(const void *p, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i += 4093)
        bad += ((const unsigned char *)p)[i] != pattern(i);
    return bad + (((const unsigned char *)p)[n - 1] != pattern(n - 1));
}

/* Exports the maker keeps (live or freed and still open), or with
 * notes, the closes it noted on them (replays it refuses). */
static size_t export_count(ump_pool_t *pool, bool notes)
{
    size_t n = 0;
    pthread_mutex_lock(&pool->lock);
    if (pool->ipc)
        for (int b = 0; b < IPC_BUCKETS; b++)
            for (struct ipc_export *e = pool->ipc->buckets[b]; e; e = e->next)
                n += notes ? e->nclosed : 1;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

static size_t exports(ump_pool_t *pool) { return export_count(pool, false); }
static size_t notes(ump_pool_t *pool) { return export_count(pool, true); }

/* A close names the open by the allocation's address: one that is not
 * the pool's first granule reaches the maker too (its free is then not
 * kept for an opener that closed). */
static void test_close_reaches_maker(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    void *first, *p, *q;
    ump_ipc_handle_t h;
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &first), 0);
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p), 0);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_free(a, first), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

static void test_open_in_process(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    void *p, *q, *q2;
    ump_ipc_handle_t h;
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p), 0);
    fill(p, 8 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    /* Its addresses are a's own here: mapped elsewhere. */
    assert_ptr_not_equal(q, p);
    assert_int_equal(wrong(q, 8 * MiB), 0);
    /* One memory: writes travel both ways, by the CPU and by a copy on
     * the opener's stream. */
    ((char *)q)[100] = 'b';
    assert_int_equal(((char *)p)[100], 'b');
    ((char *)p)[200] = 'a';
    assert_int_equal(((char *)q)[200], 'a');
    ump_stream_t s;
    static const char mark[] = "copied by b";
    assert_int_equal(ump_stream_create(b, 0, &s), 0);
    assert_int_equal(ump_memcpy_async(b, (char *)q + 4096, mark,
                                      sizeof(mark), s), 0);
    assert_int_equal(ump_stream_synchronize(b, s), 0);
    assert_string_equal((char *)p + 4096, mark);
    assert_int_equal(ump_stream_destroy(b, s), 0);
    /* A second open is the same mapping, and needs its own close. */
    assert_int_equal(ump_ipc_open(b, &h, &q2), 0);
    assert_ptr_equal(q2, q);
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(((char *)q)[100], 'b');
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(ump_ipc_close(b, q), -EINVAL);
    /* Replayed after close: refused; a fresh handle opens. */
    assert_int_equal(ump_ipc_open(b, &h, &q), -EINVAL);
    /* The maker's note of the close lives on the export and goes with
     * the connection it came through (here b's, broken as a failed
     * request breaks it): neither a long-lived opener nor a long-lived
     * export keeps notes for ever. */
    assert_int_equal(notes(a), 1);
    struct ipc_peer *peer = b->ipc->peers;
    assert_non_null(peer);
    assert_int_equal(close(peer->fd), 0);
    peer->fd = -1;
    for (int i = 0; i < 1000 && notes(a); i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    assert_int_equal(notes(a), 0);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    assert_int_equal(ump_ipc_close(b, q), 0);
    /* The maker's free with nothing open ends the export: its handles
     * open nowhere. */
    assert_int_equal(exports(a), 1);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), -EINVAL);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* The maker frees what b has open: b's bytes stay, a's next allocations
 * get other memory; b's close frees it. */
static void test_free_while_open(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    void *p, *p2, *p3, *q;
    ump_ipc_handle_t h;
    assert_int_equal(ump_alloc(a, 16 * MiB, NULL, &p), 0);
    fill(p, 16 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    /* Its memory is b's too: it does not move. */
    assert_int_equal(ump_evict(a, p, 0, UMP_TIER_HOST), -EBUSY);
    assert_int_equal(ump_pool_suspend(a, UMP_TIER_HOST), -EBUSY);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_free(a, p), -EINVAL); /* freed is freed */
    assert_int_equal(ump_pool_suspend(a, UMP_TIER_HOST), -EBUSY);
    assert_int_equal(exports(a), 1);
    assert_int_equal(ump_alloc(a, 16 * MiB, NULL, &p2), 0);
    assert_ptr_not_equal(p2, p);
    memset(p2, 0x5a, 16 * MiB);
    assert_int_equal(wrong(q, 16 * MiB), 0);
    /* Not opened again once freed, not even here. */
    ump_ipc_handle_t h2 = h;
    assert_int_equal(ump_ipc_get_handle(a, p, &h2), -EINVAL);
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_pool_suspend(a, UMP_TIER_HOST), 0);
    assert_int_equal(ump_pool_resume(a), 0);
    assert_int_equal(((unsigned char *)p2)[77], 0x5a);
    /* Given back to a's runs: the next allocation of its size takes it. */
    assert_int_equal(ump_alloc(a, 16 * MiB, NULL, &p3), 0);
    assert_ptr_equal(p3, p);
    assert_int_equal(ump_free(a, p2), 0);
    assert_int_equal(ump_free(a, p3), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* Small allocations (slab objects): an opener maps the slab's granule
 * and gets the object inside it; the maker's free of one that is open
 * keeps it (and its slab) until the close, with ump_free_async too; its
 * handles work until its free. */
static void test_small_objects(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    enum { N = 8, SZ = 4096 };
    void *p[N], *q[N], *r;
    ump_ipc_handle_t h[N], h2;
    for (int i = 0; i < N; i++) {
        assert_int_equal(ump_alloc(a, SZ - 100 * (size_t)i, NULL, &p[i]), 0);
        fill(p[i], SZ - 100 * (size_t)i);
        assert_int_equal(ump_ipc_get_handle(a, p[i], &h[i]), 0);
        assert_int_equal(ump_ipc_open(b, &h[i], &q[i]), 0);
        assert_int_equal(wrong(q[i], SZ - 100 * (size_t)i), 0);
    }
    assert_int_equal(exports(a), N);
    /* A second handle of one object is the same export. */
    assert_int_equal(ump_ipc_get_handle(a, p[0], &h2), 0);
    assert_int_equal(exports(a), N);
    /* One memory, both ways; its size is the one asked for. */
    ((char *)q[1])[10] = 'b';
    assert_int_equal(((char *)p[1])[10], 'b');
    ((char *)p[1])[20] = 'a';
    assert_int_equal(((char *)q[1])[20], 'a');
    ump_ptr_info_t info;
    assert_int_equal(ump_ptr_info(a, p[2], &info), 0);
    assert_int_equal(info.size, SZ - 200);
    /* Freed while open (ump_free and ump_free_async): kept, not handed
     * out again, no second free; the other objects of the slab go and
     * the pool trims, yet the opener's bytes stay the maker's. */
    ump_stream_t st;
    assert_int_equal(ump_stream_create(a, 0, &st), 0);
    assert_int_equal(ump_free(a, p[0]), 0);
    assert_int_equal(ump_free_async(a, p[3], st), 0);
    assert_int_equal(ump_stream_synchronize(a, st), 0);
    assert_int_equal(ump_free(a, p[0]), -EINVAL);
    assert_int_equal(ump_free(a, p[3]), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, p[0], &h2), -EINVAL);
    assert_int_equal(exports(a), N);
    void *more[64];
    for (int i = 0; i < 64; i++) {
        assert_int_equal(ump_alloc(a, SZ, NULL, &more[i]), 0);
        assert_ptr_not_equal(more[i], p[0]);
        assert_ptr_not_equal(more[i], p[3]);
    }
    for (int i = 0; i < 64; i++)
        assert_int_equal(ump_free(a, more[i]), 0);
    for (int i = 4; i < N; i++) { /* closed first, then freed */
        assert_int_equal(ump_ipc_close(b, q[i]), 0);
        assert_int_equal(ump_free(a, p[i]), 0);
    }
    assert_int_equal(ump_ipc_close(b, q[1]), 0);
    assert_int_equal(ump_free(a, p[1]), 0);
    assert_int_equal(ump_free(a, p[2]), 0); /* open: kept */
    assert_int_equal(exports(a), 3);
    assert_int_equal(ump_trim(a), 0);
    assert_int_equal(ump_alloc(a, 48 * MiB, NULL, &r), 0);
    memset(r, 0x5a, 48 * MiB);
    assert_int_equal(wrong(q[0], SZ), 0);
    assert_int_equal(wrong(q[3], SZ - 300), 0);
    assert_int_equal(ump_free(a, r), 0);
    /* The closes give them back. */
    assert_int_equal(ump_ipc_close(b, q[0]), 0);
    assert_int_equal(ump_ipc_close(b, q[2]), 0);
    assert_int_equal(ump_ipc_close(b, q[3]), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_ipc_open(b, &h[5], &r), -EINVAL); /* freed */
    ump_stats_t sa;
    assert_int_equal(ump_stats(a, UMP_DEVICE_ALL, &sa), 0);
    assert_int_equal(sa.live_bytes, 0);
    assert_int_equal(ump_stream_destroy(a, st), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* An allocation of more chunks than one message carries (64). */
static void test_many_chunks(void **state)
{
    (void)state;
    const char *conf = "backend:sim,sim_devices:1,sim_device_mem:140M,"
                       "publish:false";
    ump_pool_t *a = make_pool(conf), *b = make_pool(conf);
    void *p[70], *big, *q;
    ump_ipc_handle_t h;
    for (int i = 0; i < 70; i++)
        assert_int_equal(ump_alloc(a, 2 * MiB, NULL, &p[i]), 0);
    for (int i = 0; i < 70; i++)
        assert_int_equal(ump_free(a, p[i]), 0);
    /* No room for new memory: built from the 70 chunks. */
    assert_int_equal(ump_alloc(a, 140 * MiB, NULL, &big), 0);
    pthread_mutex_lock(&a->lock);
    size_t g = vas_index(&a->vas, big), nch = 0;
    for (size_t k = g; k < g + 70; k += chunks_at(a, k)->n)
        nch++;
    pthread_mutex_unlock(&a->lock);
    assert_true(nch > USOCK_MAX_FDS);
    fill(big, 140 * MiB);
    int fds = open_fds();
    assert_int_equal(ump_ipc_get_handle(a, big, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    assert_int_equal(wrong(q, 140 * MiB), 0);
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(ump_free(a, big), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
    assert_true(open_fds() <= fds); /* the connection and the socket went */
}

static void test_bad_input(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    ump_pool_t *c = make_pool("backend:sim,sim_devices:2,sim_device_mem:64M,"
                              "publish:false,host_limit:32M");
    void *p, *small, *host, *off, *hsmall, *q = (void *)1;
    ump_ipc_handle_t h, bad;
    ump_hints_t hints = UMP_HINTS_INIT;
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p), 0);
    assert_int_equal(ump_alloc(a, 4096, NULL, &small), 0);
    assert_int_equal(ump_host_alloc(a, 4 * MiB, &host), 0);
    hints.flags = UMP_HINT_OFFLOAD;
    assert_int_equal(ump_alloc(c, 4 * MiB, &hints, &off), 0);
    /* What cannot be exported. */
    assert_int_equal(ump_ipc_get_handle(NULL, p, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, p, NULL), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, (char *)p + 256, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, &h, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(b, p, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, (char *)small + 8, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(a, host, &h), -EINVAL);
    assert_int_equal(ump_host_alloc(a, 4096, &hsmall), 0);
    assert_int_equal(ump_ipc_get_handle(a, hsmall, &h), -EINVAL);
    assert_int_equal(ump_host_free(a, hsmall), 0);
    assert_int_equal(ump_ipc_get_handle(a, hsmall, &h), -EINVAL);
    assert_int_equal(ump_ipc_get_handle(c, off, &h), -EINVAL);
    assert_int_equal(exports(a), 0);
    /* Bad handles: nothing mapped, nothing held. */
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, NULL, &q), -EINVAL);
    assert_int_equal(ump_ipc_open(b, &h, NULL), -EINVAL);
    for (int i = 0; i < 64; i += 7) {
        bad = h;
        bad.bytes[i] ^= 0x10;
        assert_int_equal(ump_ipc_open(b, &bad, &q), -EINVAL);
    }
    memset(&bad, 0, sizeof(bad));
    assert_int_equal(ump_ipc_open(b, &bad, &q), -EINVAL);
    assert_int_equal(ump_ipc_open(a, &h, &q), -EINVAL); /* its own */
    assert_ptr_equal(q, (void *)1);
    assert_int_equal(ump_ipc_close(b, p), -EINVAL);
    assert_int_equal(ump_ipc_close(b, NULL), -EINVAL);
    /* A pool that is gone. */
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_free(a, small), 0);
    assert_int_equal(ump_host_free(a, host), 0);
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p), 0);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), -EINVAL);
    assert_ptr_equal(q, (void *)1);
    assert_int_equal(ump_free(c, off), 0);
    assert_int_equal(ump_pool_destroy(c), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
}

/* The maker's destroy leaves what b has open as it was (on sim: the
 * extents it exported are not punched out), and b's connection to the
 * gone maker is dropped once nothing is open through it. */
static void test_maker_destroyed(void **state)
{
    (void)state;
    ump_pool_t *b = make_pool(CONF);
    int fds = open_fds();
    ump_pool_t *a = make_pool(CONF);
    void *p, *q;
    ump_ipc_handle_t h;
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p), 0);
    fill(p, 8 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    assert_int_equal(ump_ipc_open(b, &h, &q), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
    assert_int_equal(wrong(q, 8 * MiB), 0);
    ((char *)q)[9] = 9; /* still memory */
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(ump_pool_destroy(b), 0);
}

/* An opener with one device: a handle of the maker's second device is
 * refused (-EINVAL) and given back, and what the opener has open stays
 * held: the connection is kept. */
static void test_opener_cannot_take(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF);
    ump_pool_t *b = make_pool("backend:sim,sim_devices:1,sim_device_mem:64M,"
                              "publish:false");
    void *p0, *p1, *q, *q1 = (void *)1, *p2;
    ump_ipc_handle_t h0, h1;
    ump_hints_t on1 = UMP_HINTS_INIT;
    on1.device = 1;
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p0), 0);
    assert_int_equal(ump_alloc(a, 4 * MiB, &on1, &p1), 0);
    fill(p0, 4 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p0, &h0), 0);
    assert_int_equal(ump_ipc_get_handle(a, p1, &h1), 0);
    assert_int_equal(ump_ipc_open(b, &h0, &q), 0);
    assert_int_equal(ump_free(a, p0), 0);
    assert_int_equal(exports(a), 2);
    assert_int_equal(ump_ipc_open(b, &h1, &q1), -EINVAL);
    assert_ptr_equal(q1, (void *)1);
    assert_int_equal(exports(a), 2); /* p0 still held for b */
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p2), 0);
    memset(p2, 0x77, 4 * MiB);
    assert_int_equal(wrong(q, 4 * MiB), 0);
    assert_int_equal(ump_ipc_close(b, q), 0);
    assert_int_equal(ump_free(a, p1), 0);
    assert_int_equal(ump_free(a, p2), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* Raw requests on the maker's socket, as a buggy or hostile process of
 * the user would send them. */
static int raw_connect(const ump_ipc_handle_t *h)
{
    struct ipc_handle_fields f;
    char name[64];
    int fd;
    assert_int_equal(ipc_handle_unpack(h, &f, "test"), 0);
    ipc_sock_name(f.pid, f.key, name, sizeof(name));
    assert_int_equal(usock_connect(name, &fd), 0);
    return fd;
}

static int raw_send(int fd, int op, const ump_ipc_handle_t *h, uint64_t gen)
{
    struct ipc_handle_fields f;
    assert_int_equal(ipc_handle_unpack(h, &f, "test"), 0);
    struct ipc_req q = {.op = (uint32_t)op, .key = f.key,
                        .gen = gen ? gen : f.gen, .ticket = f.ticket,
                        .addr = f.addr};
    return usock_send(fd, &q, sizeof(q), NULL, 0);
}

/* A process that sends opens and never reads the replies is dropped at
 * once (its opens closed with it), and stalls nobody; one that sends a
 * ticket's open again for another export is refused, its counts intact. */
static void test_bad_peers(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF), *b = make_pool(CONF);
    void *p1, *p2, *q;
    ump_ipc_handle_t h1, h2;
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p1), 0);
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p2), 0);
    assert_int_equal(ump_ipc_get_handle(a, p1, &h1), 0);
    assert_int_equal(ump_ipc_get_handle(a, p2, &h2), 0);
    int stuffer = raw_connect(&h1);
    int sent = 0;
    while (sent < 100000 && raw_send(stuffer, IPC_OPEN, &h1, 0) == 0)
        sent++;
    assert_true(sent > 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ump_ipc_open(b, &h1, &q), 0);
    assert_int_equal(ump_ipc_close(b, q), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 5);
    close(stuffer);
    /* Forged: ticket of h1 with h2's export number. */
    struct ipc_handle_fields f2;
    assert_int_equal(ipc_handle_unpack(&h2, &f2, "test"), 0);
    int forger = raw_connect(&h1);
    struct ipc_open_reply *r = malloc(sizeof(*r));
    int fds[USOCK_MAX_FDS], nfds;
    assert_non_null(r);
    assert_int_equal(raw_send(forger, IPC_OPEN, &h1, 0), 0);
    assert_int_equal(usock_recv(forger, r, sizeof(*r), fds, USOCK_MAX_FDS,
                                &nfds), 0);
    assert_int_equal(r->status, 0);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    assert_int_equal(raw_send(forger, IPC_OPEN, &h1, f2.gen), 0);
    assert_int_equal(usock_recv(forger, r, sizeof(*r), fds, USOCK_MAX_FDS,
                                &nfds), 0);
    assert_int_equal(r->status, -EINVAL);
    free(r);
    /* p1 is held by the forger's one open: kept at its free. */
    assert_int_equal(ump_free(a, p1), 0);
    assert_int_equal(exports(a), 2);
    close(forger);
    for (int i = 0; i < 1000 && exports(a) > 1; i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    assert_int_equal(exports(a), 1);
    assert_int_equal(ump_free(a, p2), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* A peer that keeps the maker's server busy: CLOSEs of nothing open,
 * each answered (-ENOENT, no descriptor), every millisecond until stop. */
struct busy {
    int fd;
    const ump_ipc_handle_t *h;
    atomic_int stop, answered, failed;
};

static void *busy_peer(void *arg)
{
    struct busy *b = arg;
    struct ipc_status_reply r;
    int nfds;
    while (!atomic_load(&b->stop)) {
        if (raw_send(b->fd, IPC_CLOSE, b->h, 0) ||
            usock_recv(b->fd, &r, sizeof(r), NULL, 0, &nfds) ||
            r.status != -ENOENT) {
            atomic_store(&b->failed, 1);
            break;
        }
        atomic_fetch_add(&b->answered, 1);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return NULL;
}

/* The listener rests a while after accepting failed for want of
 * descriptors, and then comes back even while other peers keep the
 * server busy all along (it once waited for a quiet moment). */
static void test_listener_resumes(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF);
    void *p;
    ump_ipc_handle_t h;
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p), 0);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    struct busy b = {.fd = raw_connect(&h), .h = &h};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, busy_peer, &b), 0);
    for (int i = 0; i < 1000 && !atomic_load(&b.answered); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_true(atomic_load(&b.answered) > 0);
    /* One descriptor left, the new connection's: the server's accept of
     * it fails (EMFILE) until the limit is back. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    lim = (struct rlimit){(rlim_t)lowest + 1, old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int fd = raw_connect(&h);
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    /* Answered within 2 s, the busy peer busy all along. */
    assert_int_equal(raw_send(fd, IPC_CLOSE, &h, 0), 0);
    struct pollfd pf = {fd, POLLIN, 0};
    assert_int_equal(poll(&pf, 1, 2000), 1);
    struct ipc_status_reply r;
    int nfds;
    assert_int_equal(usock_recv(fd, &r, sizeof(r), NULL, 0, &nfds), 0);
    assert_int_equal(r.status, -ENOENT);
    atomic_store(&b.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&b.failed), 0);
    close(fd);
    close(b.fd);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* A handle asked for while the pool suspends: either it was made before
 * (and the suspend refuses, -EBUSY) or it is refused; never both made. */
struct racer { ump_pool_t *pool; void *p; atomic_int stop, made; };

static void *handle_racer(void *arg)
{
    struct racer *r = arg;
    ump_ipc_handle_t h;
    while (!atomic_load(&r->stop))
        if (ump_ipc_get_handle(r->pool, r->p, &h) == 0) {
            atomic_store(&r->made, 1);
            break;
        }
    return NULL;
}

static void test_suspend_race(void **state)
{
    (void)state;
    for (int round = 0; round < 5; round++) {
        ump_pool_t *a = make_pool(CONF);
        void *p[6];
        for (int i = 0; i < 6; i++)
            assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p[i]), 0);
        struct racer r = {.pool = a, .p = p[5]};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, handle_racer, &r), 0);
        int rc = ump_pool_suspend(a, UMP_TIER_HOST);
        atomic_store(&r.stop, 1);
        pthread_join(t, NULL);
        if (rc == 0) {
            assert_int_equal(ump_pool_resume(a), 0);
            if (atomic_load(&r.made)) /* made after the resume */
                assert_int_equal(exports(a), 1);
        } else {
            assert_int_equal(rc, -EBUSY);
            assert_int_equal(atomic_load(&r.made), 1);
        }
        for (int i = 0; i < 6; i++)
            assert_int_equal(ump_free(a, p[i]), 0);
        assert_int_equal(exports(a), 0);
        assert_int_equal(ump_pool_destroy(a), 0);
    }
}

/* ---- another process: this program again, as "peer" ---- */

static void hex(const ump_ipc_handle_t *h, char *out)
{
    for (int i = 0; i < 64; i++)
        sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

/* argv: peer MODE HANDLE SIZE. Opens the handle, checks the pattern,
 * writes "peer" at the start; MODE close: closes and exits 0 (10 when
 * the pointer is not the maker's address); MODE hold: says "open" on
 * stdout and waits to be killed. */
static int peer(char **argv)
{
    ump_ipc_handle_t h;
    for (int i = 0; i < 64; i++) {
        unsigned v;
        if (sscanf(argv[3] + 2 * i, "%2x", &v) != 1)
            return 2;
        h.bytes[i] = (unsigned char)v;
    }
    size_t size = (size_t)atoll(argv[4]);
    ump_pool_t *pool;
    void *q;
    if (ump_pool_create(CONF, &pool) || ump_ipc_open(pool, &h, &q))
        return 3;
    if (wrong(q, size))
        return 4;
    unsigned long long addr;
    memcpy(&addr, h.bytes + 40, sizeof(addr)); /* wire.c: OFF_ADDR */
    memcpy(q, "peer", 5);
    if (!strcmp(argv[2], "hold")) {
        printf("open\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (ump_ipc_close(pool, q) || ump_pool_destroy(pool))
        return 5;
    return (uintptr_t)q == addr ? 0 : 10;
}

static pid_t spawn(const char *mode, const ump_ipc_handle_t *h, size_t size,
                   int *out_p)
{
    char hx[129], sz[32];
    int fd[2];
    hex(h, hx);
    snprintf(sz, sizeof(sz), "%zu", size);
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/proc/self/exe", "test_ipc", "peer", mode, hx, sz,
              (char *)NULL);
        _exit(99);
    }
    close(fd[1]);
    *out_p = fd[0];
    return pid;
}

static int wait_exit(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_other_process(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF);
    void *p;
    ump_ipc_handle_t h;
    int out;
    /* Across both devices: 96 MiB where each holds 64. */
    assert_int_equal(ump_alloc(a, 96 * MiB, NULL, &p), 0);
    ump_ptr_info_t info;
    assert_int_equal(ump_ptr_info(a, (char *)p + 95 * MiB, &info), 0);
    assert_int_equal(info.device, 1);
    fill(p, 96 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    pid_t pid = spawn("close", &h, 96 * MiB, &out);
    close(out);
    /* At the maker's address where the peer's own pool is not there: the
     * usual case, though a run without address randomization (some
     * sanitizers') can lay the peer's pool over it; then elsewhere (10),
     * and right all the same. */
    int st = wait_exit(pid);
    if (st != 0 && st != 10)
        fail_msg("the peer failed: %d", st);
    assert_string_equal((char *)p, "peer");
    assert_int_equal(exports(a), 1);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* An opener killed while it holds the allocation: the maker's free waits
 * for it, and its death is the close. */
static void test_opener_killed(void **state)
{
    (void)state;
    ump_pool_t *a = make_pool(CONF);
    void *p, *p2;
    ump_ipc_handle_t h;
    char line[16] = "";
    int out;
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p), 0);
    fill(p, 8 * MiB);
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    pid_t pid = spawn("hold", &h, 8 * MiB, &out);
    FILE *f = fdopen(out, "r");
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_string_equal(line, "open\n");
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(exports(a), 1); /* kept for the peer */
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p2), 0);
    assert_ptr_not_equal(p2, p);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    /* The server hears the connection's end on its own thread. */
    for (int i = 0; i < 1000 && exports(a); i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    assert_int_equal(exports(a), 0);
    assert_int_equal(ump_free(a, p2), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "peer"))
        return peer(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_in_process),
        cmocka_unit_test(test_close_reaches_maker),
        cmocka_unit_test(test_free_while_open),
        cmocka_unit_test(test_small_objects),
        cmocka_unit_test(test_many_chunks),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_maker_destroyed),
        cmocka_unit_test(test_opener_cannot_take),
        cmocka_unit_test(test_bad_peers),
        cmocka_unit_test(test_listener_resumes),
        cmocka_unit_test(test_suspend_race),
        cmocka_unit_test(test_other_process),
        cmocka_unit_test(test_opener_killed),
    };
    return cmocka_run_group_tests(tests, rundir_setup, rundir_teardown);
}
