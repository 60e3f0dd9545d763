/*
 * A failed device (sim_fail_device: a lost GPU, an uncorrectable memory
 * error, at a chosen operation of the device).
 *
 * The random workload allocates (slab objects, runs on one device and
 * interleaved across all, offloadable runs), frees, moves memory down to
 * the host tier and NVMe and back up, copies, and runs allreduces over
 * the four devices, while one device fails
 * at a random operation of its own. The sim poisons the failed device's
 * memory, so a byte the pool wrongly calls surviving reads wrong. After
 * the failure:
 *  - an allocation is reported lost (ump_ptr_info.lost) exactly when it
 *    had memory on the failed device when last seen before the failure
 *    (or was the very one being worked on then); ump_stats' lost_count
 *    counts them;
 *  - every other allocation reads back whole, those on a lower tier come
 *    up on devices that work;
 *  - every access to a lost one is -EIO, ump_free takes it back;
 *  - new allocations never land on the failed device;
 *  - the communicator with a rank there is -EIO; ump_comm_shrink's of
 *    the others computes right;
 *  - once everything is freed, the failed device holds nothing.
 */
#include "config.h"

#include <unistd.h>

#include "testutil.h"

#include "backend/backend.h"
#include "mem/pool.h"

#define MIB TU_MIB
#define NDEV 4
#define NITEMS 48


static char dir[64];
/* What the random rounds met, printed: a round that never exercised a
 * case proves nothing about it. */
static struct {
    unsigned midway, lost, survived, came_up, coll_ok, coll_eio;
} seen;

struct item {
    void *p;
    size_t size;
    uint64_t seed;
    bool offload;
    uint32_t devs; /* devices holding its memory when last seen */
};

struct load {
    struct item it[NITEMS];
    size_t n;
    uint64_t rng, next_seed;
    int failing; /* the device made to fail */
    bool failed; /* the pool has said so */
    /* A communicator over the devices (after the failure, over the
     * others: ump_comm_shrink) and each rank's buffer. */
    ump_comm_t *comm;
    int nr;
    int32_t *cb[NDEV];
};

#define CN 512 /* elements of the collective's buffers */

/* An allreduce of "rank + index" on every rank; checked unless it fails
 * with eio. */
static void coll_step(struct load *l, int eio)
{
    const void *s[NDEV];
    void *r[NDEV];
    for (int i = 0; i < l->nr; i++) {
        for (int j = 0; j < CN; j++)
            l->cb[i][j] = i + j;
        s[i] = r[i] = l->cb[i];
    }
    int rc = ump_allreduce(l->comm, s, r, CN, UMP_INT32, UMP_SUM, NULL);
    if (rc == eio) {
        seen.coll_eio++;
        return;
    }
    expect_rc(rc, 0);
    seen.coll_ok++;
    for (int i = 0; i < l->nr; i++)
        for (int j = 0; j < CN; j++)
            if (l->cb[i][j] != l->nr * j + l->nr * (l->nr - 1) / 2)
                fail_msg("allreduce: rank %d element %d is %d", i, j,
                         (int)l->cb[i][j]);
}

static uint64_t rnd(struct load *l, uint64_t n)
{
    l->rng = tu_mix(l->rng);
    return l->rng % n;
}

static ump_pool_t *make_pool(const char *extra)
{
    char c[512];
    ump_pool_t *pool = NULL;
    snprintf(c, sizeof(c),
             "backend:sim,sim_devices:%d,sim_device_mem:64M,chunk_size:2M,"
             "max_chunk:8M,host_reserve:0,host_limit:128M,nvme_dir:%s,"
             "publish:false,high_watermark:100,low_watermark:99%s%s",
             NDEV, dir, extra ? "," : "", extra ? extra : "");
    expect_rc(ump_pool_create(c, &pool), 0);
    return pool;
}

/* Devices holding the allocation's memory now (0 when all of it is on a
 * lower tier). */
static uint32_t devices_of(ump_pool_t *pool, const struct item *it)
{
    uint32_t m = 0;
    const char *p = it->p, *end = p + it->size;
    while (p < end) {
        ump_ptr_info_t c = tu_info(pool, p);
        if (c.device >= 0)
            m |= 1u << c.device;
        const char *next = (const char *)c.chunk_base + c.chunk_size;
        p = next > p ? next : end;
    }
    return m;
}

static bool failed_now(ump_pool_t *pool)
{
    return tu_stats(pool, UMP_DEVICE_ALL).failed_devices > 0;
}

/* One random operation on the load; the item it worked on in *touched
 * (-1: none). Every call may meet the failure: -EIO is accepted. */
static void step(ump_pool_t *pool, struct load *l, int *touched)
{
    /* Once the failure is handled and the lost allocations freed, the pool
     * works: no call may fail. */
    int eio = l->failed ? 1 : -EIO;
    *touched = -1;
    unsigned op = (unsigned)rnd(l, 11);
    if (op == 10) {
        coll_step(l, eio);
        return;
    }
    if (l->n < NITEMS && (op < 4 || l->n == 0)) {
        struct item it = {.seed = ++l->next_seed};
        ump_hints_t h = tu_hints((int)rnd(l, NDEV));
        switch (rnd(l, 4)) {
        case 0: it.size = 64 + rnd(l, 4096); break;
        case 1: it.size = 2 * MIB + rnd(l, 6 * MIB); break;
        case 2: it.size = 8 * MIB; h.policy = "interleave"; break;
        default:
            it.size = 2 * MIB + rnd(l, 4 * MIB);
            h.flags = UMP_HINT_OFFLOAD;
            it.offload = true;
        }
        int rc = ump_alloc(pool, it.size, &h, &it.p);
        if (rc == eio || rc == -ENOMEM)
            return;
        expect_rc(rc, 0);
        tu_fill(it.p, it.size, it.seed);
        l->it[l->n++] = it;
        *touched = (int)l->n - 1;
        return;
    }
    if (l->n == 0)
        return;
    size_t i = (size_t)rnd(l, l->n);
    struct item *it = &l->it[i];
    *touched = (int)i;
    if (op < 6) { /* free */
        expect_rc(ump_free(pool, it->p), 0);
        l->it[i] = l->it[--l->n];
        *touched = -1;
    } else if (op < 8 && it->offload) { /* down a tier */
        int rc = ump_evict(pool, it->p, 0,
                           rnd(l, 2) ? UMP_TIER_HOST : UMP_TIER_NVME);
        if (rc != eio)
            expect_rc(rc, 0);
    } else if (it->offload) { /* up, used, down the next time */
        int dev = (int)rnd(l, NDEV);
        if (l->failed && dev == l->failing)
            dev = (dev + 1) % NDEV;
        int rc = ump_acquire(pool, it->p, 0, dev, NULL);
        if (rc == eio)
            return;
        expect_rc(rc, 0);
        tu_assert_pattern(it->p, it->size, it->seed);
        expect_rc(ump_release(pool, it->p, 0), 0);
    } else { /* a copy out through the device's stream */
        size_t n = it->size < 4096 ? it->size : 4096;
        char buf[4096];
        int rc = tu_pool_copy(pool, buf, it->p, n);
        if (rc == eio)
            return;
        expect_rc(rc, 0);
        tu_assert_pattern(buf, n, it->seed);
    }
}

/* Reads an allocation that must have survived: offloadable ones come up
 * first, on a device that works. */
static void check_survivor(ump_pool_t *pool, struct load *l, struct item *it)
{
    if (it->offload) {
        int dev = (l->failing + 1 + (int)rnd(l, NDEV - 1)) % NDEV;
        expect_rc(ump_acquire(pool, it->p, 0, dev, NULL), 0);
    }
    uint32_t m = devices_of(pool, it);
    if (m & (1u << l->failing))
        fail_msg("%p (%zu bytes) is not lost but uses failed device %d",
                 it->p, it->size, l->failing);
    tu_assert_pattern(it->p, it->size, it->seed);
    if (it->offload)
        expect_rc(ump_release(pool, it->p, 0), 0);
}

/* Right after the failure was seen: the oracle's checks. */
static void check_after_failure(ump_pool_t *pool, struct load *l, int touched)
{
    int d = l->failing;
    uint64_t lost = 0;
    size_t lost_bytes = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct item *it = &l->it[i];
        ump_ptr_info_t info = tu_info(pool, it->p);
        bool had = it->devs & (1u << d);
        if ((int)i != touched && info.lost != had)
            fail_msg("%p (%zu bytes, devices %#x before) is%s reported lost",
                     it->p, it->size, it->devs, info.lost ? "" : " not");
        if (!info.lost) {
            seen.survived++;
            seen.came_up += it->offload && !it->devs;
            check_survivor(pool, l, it);
            continue;
        }
        seen.lost++;
        lost++;
        lost_bytes += it->size;
        char b[64];
        expect_rc(ump_memset_async(pool, it->p, 0, 1, NULL), -EIO);
        expect_rc(ump_memcpy_async(pool, b, it->p, 1, NULL), -EIO);
        if (it->offload) {
            expect_rc(ump_acquire(pool, it->p, 0, (d + 1) % NDEV, NULL),
                      -EIO);
            expect_rc(ump_evict(pool, it->p, 0, UMP_TIER_HOST), -EIO);
        }
    }
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.failed_devices, 1);
    /* And the failed rank's buffer of the collective. */
    assert_true(tu_info(pool, l->cb[d]).lost);
    assert_int_equal(all.lost_count, lost + 1);
    assert_true(all.lost_bytes >= lost_bytes);
    ump_stats_t st = tu_stats(pool, d);
    assert_int_equal(st.failed_devices, 1);
    assert_int_equal(st.capacity, 0);
    /* Nothing kept for reuse there: what is mapped is lost data. */
    assert_int_equal(st.reserved_bytes, st.mapped_bytes);
    ump_stream_t s;
    expect_rc(ump_stream_create(pool, d, &s), -EIO);
}

static void run_round(uint64_t seed)
{
    struct load l = {.rng = seed, .failing = -1};
    ump_pool_t *pool = make_pool(NULL);
    expect_rc(ump_comm_create(pool, NDEV, NULL, NULL, &l.comm), 0);
    l.nr = NDEV;
    for (int d = 0; d < NDEV; d++)
        l.cb[d] = tu_alloc(pool, CN * sizeof(int32_t), d);
    l.failing = (int)rnd(&l, NDEV);
    int nth = 1 + (int)rnd(&l, 150);
    void *bctx = pool->bctx;
    expect_rc(sim_fail_device(bctx, l.failing, nth), 0);
    int touched = -1;
    for (int k = 0; k < 400 && !l.failed; k++) {
        step(pool, &l, &touched);
        if (failed_now(pool)) {
            l.failed = true;
            seen.midway++;
            break;
        }
        for (size_t i = 0; i < l.n; i++)
            l.it[i].devs = devices_of(pool, &l.it[i]);
    }
    if (!l.failed) { /* it did not do nth operations of it: fail it now */
        expect_rc(sim_fail_device(bctx, l.failing, 0), 0);
        assert_true(failed_now(pool));
        touched = -1;
    }
    check_after_failure(pool, &l, touched);
    for (size_t i = 0; i < l.n;) { /* ump_free takes the lost back */
        if (tu_info(pool, l.it[i].p).lost) {
            expect_rc(ump_free(pool, l.it[i].p), 0);
            l.it[i] = l.it[--l.n];
        } else {
            i++;
        }
    }
    /* The communicator with a rank on the failed device: -EIO; the
     * survivors' one works. */
    coll_step(&l, -EIO);
    expect_rc(ump_allreduce(l.comm, (const void *const *)l.cb,
                            (void *const *)l.cb, CN, UMP_INT32, UMP_SUM,
                            NULL), -EIO);
    ump_comm_t *nc = NULL;
    expect_rc(ump_comm_shrink(l.comm, 1, &l.failing, &nc), 0);
    expect_rc(ump_comm_destroy(l.comm), 0);
    l.comm = nc;
    assert_true(tu_info(pool, l.cb[l.failing]).lost);
    expect_rc(ump_free(pool, l.cb[l.failing]), 0);
    for (int d = l.failing; d < NDEV - 1; d++)
        l.cb[d] = l.cb[d + 1];
    l.nr = NDEV - 1;
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).lost_count, 0);
    /* The pool goes on: new memory never on the failed device. */
    for (int k = 0; k < 100; k++) {
        size_t before = l.n;
        step(pool, &l, &touched);
        if (l.n > before) {
            struct item *it = &l.it[l.n - 1];
            ump_ptr_info_t info = tu_info(pool, it->p);
            assert_false(info.lost);
            if (devices_of(pool, it) & (1u << l.failing))
                fail_msg("new %zu bytes on failed device %d", it->size,
                         l.failing);
        }
    }
    for (size_t i = 0; i < l.n; i++)
        expect_rc(ump_free(pool, l.it[i].p), 0);
    expect_rc(ump_comm_destroy(l.comm), 0);
    for (int d = 0; d < l.nr; d++)
        expect_rc(ump_free(pool, l.cb[d]), 0);
    expect_rc(ump_trim(pool), 0);
    ump_stats_t st = tu_stats(pool, l.failing);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.lost_count, 0);
    for (int d = 0; d < NDEV; d++) { /* no count drifted anywhere */
        assert_int_equal(tu_stats(pool, d).live_count, 0);
        assert_int_equal(tu_stats(pool, d).live_bytes, 0);
    }
    tu_pool_destroy(pool);
}

static void test_random_failures(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 24; seed++)
        run_round(seed * 7919);
    printf("24 rounds: %u failed midway; %u allocations lost, %u survived "
           "(%u of them came up from a lower tier); allreduces: %u right, "
           "%u -EIO\n", seen.midway, seen.lost, seen.survived, seen.came_up,
           seen.coll_ok, seen.coll_eio);
    assert_true(seen.midway > 0 && seen.lost > 0 && seen.came_up > 0);
}

/* Thread caches hold freed objects of the device when it fails: none is
 * handed out again; requests from it spill to a peer, or fail with
 * NO_SPILL. */
static void test_caches_and_spill(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    void *p[32];
    for (int i = 0; i < 32; i++)
        p[i] = tu_alloc(pool, 256, 2);
    for (int i = 0; i < 32; i++)
        tu_free(pool, p[i]);
    void *keep = tu_alloc(pool, 3 * MIB, 2);
    tu_fill(keep, 3 * MIB, 5);
    expect_rc(sim_fail_device(pool->bctx, 2, 0), 0);
    for (int i = 0; i < 32; i++) {
        p[i] = tu_alloc(pool, 256, 2);
        ump_ptr_info_t info = tu_info(pool, p[i]);
        assert_int_not_equal(info.device, 2);
        assert_false(info.lost);
        memset(p[i], 0x5a, 256);
    }
    ump_hints_t h = tu_hints(2);
    h.flags = UMP_HINT_NO_SPILL;
    void *q = NULL;
    expect_rc(ump_alloc(pool, 4 * MIB, &h, &q), -ENOMEM);
    assert_true(tu_info(pool, keep).lost);
    ump_stats_t st = tu_stats(pool, 2);
    assert_int_equal(st.lost_count, 1);
    assert_int_equal(st.lost_bytes, 4 * MIB);
    tu_free(pool, keep);
    expect_rc(ump_free(pool, keep), -EINVAL); /* a second free */
    for (int i = 0; i < 32; i++)
        tu_free(pool, p[i]);
    expect_rc(ump_trim(pool), 0);
    st = tu_stats(pool, 2);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.lost_count, 0);
    tu_pool_destroy(pool);
}

/* A wait on a failed device's stream is -EIO whether it syncs the stream
 * or an event recorded on it, pending work or not, as the driver's sticky
 * error is (a swap's last wait is an event's: move_swap); an event of the
 * default stream names no device. */
static void test_event_sync_fails(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    const struct backend_ops *be = pool->be;
    void *ctx = pool->bctx, *s, *ev, *ev0;
    expect_rc(be->stream_create(ctx, 1, &s), 0);
    expect_rc(be->event_create(ctx, &ev), 0);
    expect_rc(be->event_create(ctx, &ev0), 0);
    expect_rc(be->event_record(ctx, ev, s), 0);
    expect_rc(be->event_record(ctx, ev0, NULL), 0);
    expect_rc(be->event_sync(ctx, ev), 0);
    expect_rc(sim_fail_device(ctx, 1, 0), 0);
    expect_rc(be->event_sync(ctx, ev), -EIO);
    expect_rc(be->stream_sync(ctx, s), -EIO);
    expect_rc(be->event_sync(ctx, ev0), 0);
    expect_rc(be->event_destroy(ctx, ev0), 0);
    expect_rc(be->event_destroy(ctx, ev), 0);
    expect_rc(be->stream_destroy(ctx, s), 0);
    tu_pool_destroy(pool);
}

/* Carved allocations (mem/chunks.h) that share a chunk on the failed
 * device are lost together; the chunk goes back to the driver once the
 * last of them is freed, not before: the others still read through it. A
 * carved one on a device that works keeps its bytes. */
static void test_carved_lost(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool("max_chunk:16M,tcache:false");
    void *p[2];
    char *a[2][3];
    for (int d = 1; d <= 2; d++) {
        p[d - 1] = tu_alloc(pool, 16 * MIB, d);
        tu_free(pool, p[d - 1]);
        for (int k = 0; k < 3; k++) { /* 4 MiB each, in its 16 MiB */
            a[d - 1][k] = tu_alloc(pool, 4 * MIB, d);
            assert_ptr_equal(tu_info(pool, a[d - 1][k]).chunk_base,
                             p[d - 1]);
            tu_fill(a[d - 1][k], 4 * MIB, (uint64_t)(10 * d + k));
        }
    }
    expect_rc(sim_fail_device(pool->bctx, 2, 0), 0);
    for (int k = 0; k < 3; k++) {
        assert_true(tu_info(pool, a[1][k]).lost);
        assert_false(tu_info(pool, a[0][k]).lost);
    }
    ump_stats_t st = tu_stats(pool, 2);
    assert_int_equal(st.lost_count, 3);
    tu_free(pool, a[1][0]);
    tu_free(pool, a[1][2]);
    assert_int_equal(tu_stats(pool, 2).reserved_bytes, 16 * MIB);
    /* the failed device's freed granules serve nobody */
    char *q = tu_alloc(pool, 4 * MIB, 2);
    ump_ptr_info_t iq = tu_info(pool, q);
    assert_int_not_equal(iq.device, 2);
    assert_false(iq.lost);
    tu_fill(q, 4 * MIB, 9);
    tu_assert_pattern(q, 4 * MIB, 9);
    tu_free(pool, q);
    tu_free(pool, a[1][1]);
    st = tu_stats(pool, 2);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.lost_count, 0);
    for (int k = 0; k < 3; k++) {
        tu_assert_pattern(a[0][k], 4 * MIB, (uint64_t)(10 + k));
        tu_free(pool, a[0][k]);
    }
    tu_pool_destroy(pool);
}

/* A device failing while the pool is suspended loses nothing: its data is
 * down a tier, and comes back on the devices that work. */
static void test_fail_while_suspended(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    struct item it[6] = {{.size = 300}, {.size = 5000},
                         {.size = 3 * MIB}, {.size = 8 * MIB},
                         {.size = 2 * MIB, .offload = true}, {.size = 128}};
    for (int i = 0; i < 6; i++) {
        ump_hints_t h = tu_hints(1);
        if (i == 3)
            h.policy = "interleave";
        if (it[i].offload)
            h.flags = UMP_HINT_OFFLOAD;
        it[i].seed = 100 + (uint64_t)i;
        expect_rc(ump_alloc(pool, it[i].size, &h, &it[i].p), 0);
        tu_fill(it[i].p, it[i].size, it[i].seed);
    }
    expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), 0);
    expect_rc(sim_fail_device(pool->bctx, 1, 0), 0);
    expect_rc(ump_pool_resume(pool), 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).lost_count, 0);
    /* Slab objects count where their slab went; runs at their home (the
     * failed device), from allocation to free. */
    assert_int_equal(tu_stats(pool, 1).live_count, 3);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).live_count, 6);
    for (int i = 0; i < 6; i++) {
        ump_ptr_info_t info = tu_info(pool, it[i].p);
        assert_false(info.lost);
        if (devices_of(pool, &it[i]) & 2u)
            fail_msg("item %d came back on the failed device", i);
        tu_assert_pattern(it[i].p, it[i].size, it[i].seed);
        tu_free(pool, it[i].p);
    }
    expect_rc(ump_trim(pool), 0);
    ump_stats_t st = tu_stats(pool, 1);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.capacity, 0); /* ump_trim gives it none back */
    for (int d = 0; d < NDEV; d++) { /* no count left behind anywhere */
        st = tu_stats(pool, d);
        assert_int_equal(st.live_count, 0);
        assert_int_equal(st.live_bytes, 0);
    }
    tu_pool_destroy(pool);
}

/* With a lost allocation live, a checkpoint is -EIO naming the cause (its
 * bytes are gone), and a suspend moves the survivors and leaves the lost
 * one as it is; once it is freed, the checkpoint works. */
static void test_lost_suspend_checkpoint(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    void *lost = tu_alloc(pool, 4 * MIB, 3), *keep = tu_alloc(pool, 4 * MIB, 0);
    void *small = tu_alloc(pool, 1000, 1);
    tu_fill(keep, 4 * MIB, 7);
    tu_fill(small, 1000, 8);
    expect_rc(sim_fail_device(pool->bctx, 3, 0), 0);
    assert_true(tu_info(pool, lost).lost);
    char ck[128];
    snprintf(ck, sizeof(ck), "%s/lost.ckpt", dir);
    expect_rc(ump_pool_checkpoint(pool, ck), -EIO);
    assert_int_equal(access(ck, F_OK), -1);
    expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), 0);
    assert_int_equal(tu_stats(pool, 0).reserved_bytes, 0);
    expect_rc(ump_pool_resume(pool), 0);
    tu_assert_pattern(keep, 4 * MIB, 7);
    tu_assert_pattern(small, 1000, 8);
    assert_true(tu_info(pool, lost).lost);
    tu_free(pool, lost);
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    unlink(ck);
    tu_free(pool, keep);
    tu_free(pool, small);
    tu_pool_destroy(pool);
}

/* The configuration keys make a device fail in a program that cannot call
 * the test hook (another process, the preload library). */
static void test_config_keys(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool("sim_fail_device:1,sim_fail_after:3");
    int fails = 0;
    for (int i = 0; i < 8; i++) {
        void *p = NULL;
        ump_hints_t h = tu_hints(1);
        int rc = ump_alloc(pool, 2 * MIB, &h, &p);
        if (rc == -EIO) {
            fails++;
            continue;
        }
        expect_rc(rc, 0);
        ump_ptr_info_t info = tu_info(pool, p);
        if (failed_now(pool) && !info.lost)
            assert_int_not_equal(info.device, 1);
        tu_free(pool, p);
    }
    assert_true(failed_now(pool));
    assert_true(fails <= 1);
    assert_int_equal(tu_stats(pool, 1).failed_devices, 1);
    assert_int_equal(tu_stats(pool, 0).failed_devices, 0);
    tu_pool_destroy(pool);
    char c[128];
    snprintf(c, sizeof(c), "backend:sim,sim_devices:2,sim_fail_device:2");
    ump_pool_t *bad = NULL;
    assert_int_equal(ump_pool_create(c, &bad), -EINVAL);
    assert_null(bad);
}

int main(void)
{
    tu_sim_only("device failures are injected on sim");
    snprintf(dir, sizeof(dir), "/tmp/umpool-fail-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caches_and_spill),
        cmocka_unit_test(test_carved_lost),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_event_sync_fails),
        cmocka_unit_test(test_fail_while_suspended),
        cmocka_unit_test(test_lost_suspend_checkpoint),
        cmocka_unit_test(test_random_failures),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_remove_tree(dir);
    return failed;
}
