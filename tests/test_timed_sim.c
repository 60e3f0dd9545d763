/*
 * sim_driver_costs:h200-timed: the sim takes what an H200 takes
 * (lib/backend/sim/sim_timed.c, the costs of topo/drivercost.c).
 *
 * What the model charges is checked exactly, with no clock: the cost of
 * every virtual-memory call (sim_timed_vmm_ns), and when a copy, a memset
 * or a sync would end given when it was queued and started (sim_copy_end
 * and friends, on times far from now). The waits themselves are checked
 * against the clock only where that cannot be flaky: a call never returns
 * before its modeled time (a lower bound holds on any machine, however
 * loaded), and not grossly after it (three times the modeled time plus
 * 50 ms: a wait charged twice, or not scaled, or slept on while holding a
 * lock the other side needs, shows; a loaded machine or a sanitizer does
 * not). The figures of the H200 itself are not timed here: that is
 * umpool-bench offload's job (README: The sim's H200 model).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "topo/drivercost.h"
#include "util/clock.h"
#include "util/conf.h"

#define MiB ((size_t)1 << 20)
#define G (2 * MiB)
#define MS 1000000ull

static const struct backend_ops *B = &sim_backend_ops;
static const struct drvcost_misc *M = &drvcost_h200;

static void *open_mode(int costs, int scale, int ndev)
{
    struct ump_topology topo;
    struct ump_config cfg;
    void *ctx = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.sim_devices = ndev;
    cfg.sim_device_mem = 64 * MiB;
    cfg.host_limit = 32 * MiB;
    cfg.sim_driver_costs = costs;
    cfg.sim_time_scale = scale;
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    return ctx;
}

static void *open_timed(int scale, int ndev)
{
    return open_mode(UMP_SIM_COSTS_H200_TIMED, scale, ndev);
}

/* Took at least want ns and not grossly more (see the top). */
static void assert_took(uint64_t took, uint64_t want)
{
    if (took < want || took > 3 * want + 50 * MS)
        fail_msg("took %llu ns, the model says %llu ns",
                 (unsigned long long)took, (unsigned long long)want);
}

/* Every call adds the H200's cost of each handle it touched, device and
 * host alike (host handles: linear in the bytes, the CPU's access its own
 * entry); refused calls add nothing; driver_ns counts the device handles,
 * as with sim_driver_costs:h200. */
static void test_vmm_costs(void **state)
{
    void *ctx = open_timed(1, 2);
    int devs[2] = {0, 1};
    ump_handle_t d0, d1, h0, h1, h2;
    uint64_t want = 0, dev = 0;
    char *va;

    (void)state;
    assert_int_equal(sim_timed_vmm_ns(ctx), 0);
    assert_int_equal(B->reserve(ctx, 64 * G, 0, (void **)&va), 0);
    want += M->reserve_ns;
    assert_int_equal(sim_timed_vmm_ns(ctx), want);

    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &d0), 0);
    assert_int_equal(B->chunk_create(ctx, 1, G, &d1), 0);
    dev += drvcost_ns(DRV_CREATE, 2 * G) + drvcost_ns(DRV_CREATE, G);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h0), 0);
    assert_int_equal(B->host_chunk_create(ctx, -1, 4 * G, &h1), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, 2 * G, &h2), 0);
    want += dev + drvcost_host_ns(DRV_CREATE, G) +
            drvcost_host_ns(DRV_CREATE, 4 * G) +
            drvcost_host_ns(DRV_CREATE, 2 * G);
    assert_int_equal(sim_timed_vmm_ns(ctx), want);

    assert_int_equal(B->map(ctx, va, 2 * G, d0), 0);
    assert_int_equal(B->map(ctx, va + 2 * G, G, d1), 0);
    assert_int_equal(B->map(ctx, va + 8 * G, G, h0), 0);
    assert_int_equal(B->map(ctx, va + 9 * G, 4 * G, h1), 0);
    assert_int_equal(B->map(ctx, va + 16 * G, 2 * G, h2), 0);
    want += 2 * drvcost_ns(DRV_MAP, G) + drvcost_host_ns(DRV_MAP, G) +
            drvcost_host_ns(DRV_MAP, 4 * G) + drvcost_host_ns(DRV_MAP, 2 * G);
    dev += 2 * drvcost_ns(DRV_MAP, G);
    /* One call over two device handles, one over two host handles with
     * the CPU, one over one of them for the devices only (the CPU keeps
     * its access), one over the third host handle for the devices only. */
    assert_int_equal(B->set_access(ctx, va, 3 * G, devs, 2), 0);
    assert_int_equal(B->set_access_host(ctx, va + 8 * G, 5 * G, devs, 2), 0);
    assert_int_equal(B->set_access(ctx, va + 8 * G, G, devs, 1), 0);
    assert_int_equal(B->set_access(ctx, va + 16 * G, 2 * G, devs, 2), 0);
    want += drvcost_ns(DRV_SET_ACCESS, 2 * G) + drvcost_ns(DRV_SET_ACCESS, G) +
            drvcost_host_ns(DRV_SET_ACCESS_CPU, G) +
            drvcost_host_ns(DRV_SET_ACCESS_CPU, 4 * G) +
            drvcost_host_ns(DRV_SET_ACCESS, G) +
            drvcost_host_ns(DRV_SET_ACCESS, 2 * G);
    dev += drvcost_ns(DRV_SET_ACCESS, 2 * G) + drvcost_ns(DRV_SET_ACCESS, G);
    assert_int_equal(sim_timed_vmm_ns(ctx), want);

    /* Refused: nothing. */
    assert_int_equal(B->map(ctx, va, 2 * G, d0), -EINVAL);
    assert_int_equal(B->unmap(ctx, va + G, G), -EINVAL);
    assert_int_equal(sim_timed_vmm_ns(ctx), want);

    assert_int_equal(B->unmap(ctx, va, 3 * G), 0);
    assert_int_equal(B->unmap(ctx, va + 8 * G, 5 * G), 0);
    /* No CPU mapping to tear down: a device handle's unmap. */
    assert_int_equal(B->unmap(ctx, va + 16 * G, 2 * G), 0);
    want += drvcost_ns(DRV_UNMAP, 2 * G) + drvcost_ns(DRV_UNMAP, G) +
            drvcost_host_ns(DRV_UNMAP, G) + drvcost_host_ns(DRV_UNMAP, 4 * G) +
            drvcost_ns(DRV_UNMAP, 2 * G);
    assert_true(drvcost_ns(DRV_UNMAP, 2 * G) <
                drvcost_host_ns(DRV_UNMAP, 2 * G));
    dev += drvcost_ns(DRV_UNMAP, 2 * G) + drvcost_ns(DRV_UNMAP, G);
    assert_int_equal(B->chunk_release(ctx, d0), 0);
    assert_int_equal(B->chunk_release(ctx, d1), 0);
    assert_int_equal(B->chunk_release(ctx, h0), 0);
    assert_int_equal(B->chunk_release(ctx, h1), 0);
    assert_int_equal(B->chunk_release(ctx, h2), 0);
    want += drvcost_ns(DRV_RELEASE, 2 * G) + drvcost_ns(DRV_RELEASE, G) +
            drvcost_host_ns(DRV_RELEASE, G) +
            drvcost_host_ns(DRV_RELEASE, 4 * G) +
            drvcost_host_ns(DRV_RELEASE, 2 * G);
    dev += drvcost_ns(DRV_RELEASE, 2 * G) + drvcost_ns(DRV_RELEASE, G);
    assert_int_equal(sim_timed_vmm_ns(ctx), want);
    assert_int_equal(B->driver_ns(ctx, -1), dev);
    assert_int_equal(B->unreserve(ctx, va, 64 * G), 0);
    B->close(ctx);

    /* Accounting only (h200) and off: nothing is waited for. */
    for (int costs = UMP_SIM_COSTS_OFF; costs <= UMP_SIM_COSTS_H200;
         costs++) {
        ctx = open_mode(costs, 1, 1);
        assert_int_equal(B->host_chunk_create(ctx, 0, G, &h0), 0);
        assert_int_equal(B->chunk_release(ctx, h0), 0);
        assert_int_equal(sim_timed_vmm_ns(ctx), 0);
        assert_int_equal(sim_copy_end(ctx, &h0, &h1, 8, 1, 1), 0);
        assert_int_equal(sim_set_end(ctx, &h0, 8, 1, 1), 0);
        assert_int_equal(sim_sync_end(ctx, 1), 0);
        B->close(ctx);
    }
}

/* The calls wait for their cost times the scale, from their start. */
static void test_vmm_waits(void **state)
{
    const unsigned s = 20;
    void *ctx = open_timed((int)s, 1);
    int dev = 0;
    ump_handle_t h, d[8];
    uint64_t t0;
    char *va;

    (void)state;
    assert_int_equal(B->reserve(ctx, 16 * G, 0, (void **)&va), 0);
    t0 = ump_clock_ns();
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h), 0);
    assert_took(ump_clock_ns() - t0, s * drvcost_host_ns(DRV_CREATE, G));
    assert_int_equal(B->map(ctx, va, G, h), 0);
    t0 = ump_clock_ns();
    assert_int_equal(B->set_access_host(ctx, va, G, &dev, 1), 0);
    assert_took(ump_clock_ns() - t0,
                s * drvcost_host_ns(DRV_SET_ACCESS_CPU, G));
    t0 = ump_clock_ns();
    assert_int_equal(B->unmap(ctx, va, G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_took(ump_clock_ns() - t0, s * (drvcost_host_ns(DRV_UNMAP, G) +
                                          drvcost_host_ns(DRV_RELEASE, G)));
    /* Per handle, also in one call: eight handles, eight times one. */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(B->chunk_create(ctx, 0, G, &d[i]), 0);
        assert_int_equal(B->map(ctx, va + (size_t)i * G, G, d[i]), 0);
    }
    t0 = ump_clock_ns();
    assert_int_equal(B->set_access(ctx, va, 8 * G, &dev, 1), 0);
    assert_took(ump_clock_ns() - t0, s * 8 * drvcost_ns(DRV_SET_ACCESS, G));
    assert_int_equal(B->unmap(ctx, va, 8 * G), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(B->chunk_release(ctx, d[i]), 0);
    assert_int_equal(B->unreserve(ctx, va, 16 * G), 0);
    B->close(ctx);
}

struct caller {
    void *ctx;
    char *va;
};

static void *access_thread(void *arg)
{
    struct caller *k = arg;
    int dev = 0;

    assert_int_equal(B->set_access_host(k->ctx, k->va, G, &dev, 1), 0);
    return NULL;
}

/* Copies a few bytes and syncs, again and again, counting, until stop. */
struct looper {
    void *ctx, *st;
    char *src;
    char buf[64];
    _Atomic bool stop;
    _Atomic unsigned copies;
};

static void *copy_loop(void *arg)
{
    struct looper *l = arg;

    while (!atomic_load(&l->stop)) {
        assert_int_equal(B->memcpy_async(l->ctx, l->buf, l->src,
                                         sizeof(l->buf), l->st), 0);
        assert_int_equal(B->stream_sync(l->ctx, l->st), 0);
        atomic_fetch_add(&l->copies, 1);
    }
    return NULL;
}

/* One virtual-memory call at a time, as on the driver: two threads' set
 * accesses take twice one. A copy on a stream does not wait for them: the
 * calls wait with none of the sim's own locks held. */
static void test_vmm_serialize(void **state)
{
    const unsigned s = 100;
    void *ctx = open_timed((int)s, 1);
    struct caller k[2];
    struct looper l;
    pthread_t th[2];
    ump_handle_t h[2], dh;
    char *va;
    void *st;
    uint64_t one = s * drvcost_host_ns(DRV_SET_ACCESS_CPU, G), t0;
    int dev = 0;

    (void)state;
    assert_int_equal(B->reserve(ctx, 16 * G, 0, (void **)&va), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[i]), 0);
        assert_int_equal(B->map(ctx, va + (size_t)i * G, G, h[i]), 0);
        k[i] = (struct caller){ctx, va + (size_t)i * G};
    }
    t0 = ump_clock_ns();
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, access_thread, &k[i]),
                         0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_took(ump_clock_ns() - t0, 2 * one);

    /* A device chunk with access, for a copy during a long call. */
    assert_int_equal(B->chunk_create(ctx, 0, G, &dh), 0);
    assert_int_equal(B->map(ctx, va + 4 * G, G, dh), 0);
    assert_int_equal(B->set_access(ctx, va + 4 * G, G, &dev, 1), 0);
    assert_int_equal(B->stream_create(ctx, 0, &st), 0);
    memset(&l, 0, sizeof(l));
    l.ctx = ctx;
    l.st = st;
    l.src = va + 4 * G;
    assert_int_equal(pthread_create(&th[0], NULL, copy_loop, &l), 0);
    /* The call holds the driver for 16.4 ms (x 100), a copy and its sync
     * take 0.9 ms: some must end meanwhile. */
    unsigned before = atomic_load(&l.copies);
    assert_int_equal(B->set_access_host(ctx, va, G, &dev, 1), 0);
    unsigned during = atomic_load(&l.copies) - before;
    atomic_store(&l.stop, true);
    assert_int_equal(pthread_join(th[0], NULL), 0);
    assert_true(during >= 2);

    assert_int_equal(B->stream_destroy(ctx, st), 0);
    assert_int_equal(B->unmap(ctx, va, 2 * G), 0);
    assert_int_equal(B->unmap(ctx, va + 4 * G, G), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(B->chunk_release(ctx, h[i]), 0);
    assert_int_equal(B->chunk_release(ctx, dh), 0);
    assert_int_equal(B->unreserve(ctx, va, 16 * G), 0);
    B->close(ctx);
}

/* The mapped memory of a copy model: device 0's and 1's chunks and a host
 * chunk, each of n granules, with access. */
struct mem3 {
    char *va, *d0, *d1, *host;
    ump_handle_t h[3];
    size_t n;
};

static void mem3_map(void *ctx, struct mem3 *m, size_t n)
{
    int devs[2] = {0, 1};

    m->n = n;
    assert_int_equal(B->reserve(ctx, 3 * n * G, 0, (void **)&m->va), 0);
    m->d0 = m->va;
    m->d1 = m->va + n * G;
    m->host = m->va + 2 * n * G;
    assert_int_equal(B->chunk_create(ctx, 0, n * G, &m->h[0]), 0);
    assert_int_equal(B->chunk_create(ctx, 1, n * G, &m->h[1]), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, n * G, &m->h[2]), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(B->map(ctx, m->va + (size_t)i * n * G, n * G,
                                m->h[i]), 0);
    assert_int_equal(B->set_access(ctx, m->va, 2 * n * G, devs, 2), 0);
    assert_int_equal(B->set_access_host(ctx, m->host, n * G, devs, 2), 0);
}

static void mem3_unmap(void *ctx, struct mem3 *m)
{
    assert_int_equal(B->unmap(ctx, m->va, 3 * m->n * G), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(B->chunk_release(ctx, m->h[i]), 0);
    assert_int_equal(B->unreserve(ctx, m->va, 3 * m->n * G), 0);
}

/* When copies end, by the model, with no clock: times of 1000 s and on,
 * far past anything the links hold from the setup's copies. */
static void test_copy_model(void **state)
{
    const uint64_t s = 3, sec = 1000000000ull;
    void *ctx = open_timed((int)s, 2);
    uint64_t lat = s * M->copy_lat_ns, gap = s * M->copy_gap_ns, t, e1, e2;
    size_t n = 2 * G;
    char *plain = malloc(n);
    struct mem3 m;

    (void)state;
    assert_non_null(plain);
    mem3_map(ctx, &m, 2);
    /* Device 0 to a host chunk: latency, then the gap and the bytes at
     * the VMM host rate on device 0's link to the host. */
    t = 1000 * sec;
    e1 = sim_copy_end(ctx, m.host, m.d0, n, t, t);
    assert_int_equal(e1, t + lat + gap + s * drvcost_bytes_ns(n, 54.0));
    /* A second one on that link waits for it; the other direction and
     * the other device's link do not. */
    e2 = sim_copy_end(ctx, m.host, m.d0, n, t, t);
    assert_int_equal(e2, e1 + gap + s * drvcost_bytes_ns(n, 54.0));
    assert_int_equal(sim_copy_end(ctx, m.d0, m.host, n, t, t), e1);
    assert_int_equal(sim_copy_end(ctx, m.host, m.d1, n, t, t), e1);
    /* Memory outside the reservations: pinned, 55.2 GB/s. */
    t = 1001 * sec;
    assert_int_equal(sim_copy_end(ctx, plain, m.d1, n, t, t),
                     t + lat + gap + s * drvcost_bytes_ns(n, 55.2));
    /* Device to device: the topology's link (450 GB/s between two
     * devices of sim_devices), and one device's own memory, read and
     * written (3.9 TB/s of traffic). */
    assert_int_equal(sim_copy_end(ctx, m.d1, m.d0, n, t, t),
                     t + lat + gap + s * drvcost_bytes_ns(n, 450.0));
    assert_int_equal(sim_copy_end(ctx, m.d0 + G, m.d0, G, t, t),
                     t + lat + gap + s * drvcost_bytes_ns(G, 1950.0));
    /* Host to host: the CPU's, the latency only. */
    assert_int_equal(sim_copy_end(ctx, plain, m.host, n, t, t), t + lat);
    /* A memset of device memory writes it once. */
    t = 1002 * sec;
    assert_int_equal(sim_set_end(ctx, m.d1, n, t, t),
                     t + lat + gap + s * drvcost_bytes_ns(n, 3900.0));
    assert_int_equal(sim_set_end(ctx, m.host, n, t, t), t + lat);
    /* Queued long before its stream got to it: its latency has passed. */
    t = 1003 * sec;
    assert_int_equal(sim_copy_end(ctx, m.d1, m.host, n, t - 1000000, t),
                     t + gap + s * drvcost_bytes_ns(n, 54.0));
    /* A copy over two devices' chunks to the host: both links at once. */
    t = 1005 * sec;
    assert_int_equal(sim_copy_end(ctx, plain, m.d0 + G, 2 * G, t, t),
                     t + lat + gap + s * drvcost_bytes_ns(G, 55.2));
    /* A sync: the empty one's cost. */
    assert_int_equal(sim_sync_end(ctx, t), t + s * M->sync_ns);
    mem3_unmap(ctx, &m);
    free(plain);
    B->close(ctx);
}

struct copier {
    void *ctx, *st;
    char *dst, *src;
    size_t n;
};

static void *copy_thread(void *arg)
{
    struct copier *k = arg;

    assert_int_equal(B->memcpy_async(k->ctx, k->dst, k->src, k->n, k->st), 0);
    assert_int_equal(B->stream_sync(k->ctx, k->st), 0);
    return NULL;
}

/* Two copies at once on two streams, from t0: how long until both ended. */
static uint64_t copy_pair(struct copier k[2])
{
    pthread_t th[2];
    uint64_t t0 = ump_clock_ns();

    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, copy_thread, &k[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    return ump_clock_ns() - t0;
}

/* Copies on streams and the default stream wait for their modeled end;
 * each direction of a link is one copy at a time, the two directions run
 * at once; syncs cost the empty one's time. The data arrives. Host memory
 * outside the reservations (pinned, 55.2 GB/s): no host chunk to pay for
 * at this scale. */
static void test_copy_waits(void **state)
{
    const uint64_t s = 1000;
    void *ctx = open_timed((int)s, 1);
    uint64_t one = s * (M->copy_lat_ns + M->copy_gap_ns +
                        drvcost_bytes_ns(G, M->pinned_gbs)),
             t0;
    char *va, *host = malloc(2 * G);
    struct copier k[2];
    ump_handle_t h;
    int dev = 0;
    void *st[2];

    (void)state;
    assert_non_null(host);
    assert_int_equal(B->reserve(ctx, 2 * G, 0, (void **)&va), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &h), 0);
    assert_int_equal(B->map(ctx, va, 2 * G, h), 0);
    assert_int_equal(B->set_access(ctx, va, 2 * G, &dev, 1), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(B->stream_create(ctx, 0, &st[i]), 0);
    memset(va, 0x11, G);
    t0 = ump_clock_ns();
    assert_int_equal(B->memcpy_async(ctx, host, va, G, st[0]), 0);
    assert_int_equal(B->stream_sync(ctx, st[0]), 0);
    /* the sync's own 0.3 us pass while the copy runs */
    assert_took(ump_clock_ns() - t0, one);
    assert_int_equal(host[G - 1], 0x11);
    /* the default stream: in the caller */
    memset(host + G, 0x22, G);
    t0 = ump_clock_ns();
    assert_int_equal(B->memcpy_async(ctx, va + G, host + G, G, NULL), 0);
    assert_took(ump_clock_ns() - t0, one);
    assert_int_equal(va[G], 0x22);
    t0 = ump_clock_ns();
    assert_int_equal(B->stream_sync(ctx, st[1]), 0);
    assert_int_equal(B->stream_sync(ctx, NULL), 0);
    assert_took(ump_clock_ns() - t0, 2 * s * M->sync_ns);

    /* Device 0 to the host on two streams: the bytes one after the other
     * (their latencies overlap). */
    k[0] = (struct copier){ctx, st[0], host, va, G};
    k[1] = (struct copier){ctx, st[1], host + G, va + G, G};
    uint64_t same = copy_pair(k);
    assert_true(same >= 2 * one - s * M->copy_lat_ns);
    /* To the host and from it: at once (and far from twice one). */
    k[1] = (struct copier){ctx, st[1], va + G, host + G, G};
    uint64_t both = copy_pair(k);
    assert_took(both, one);
    assert_true(both < same * 3 / 4);

    for (int i = 0; i < 2; i++)
        assert_int_equal(B->stream_destroy(ctx, st[i]), 0);
    assert_int_equal(B->unmap(ctx, va, 2 * G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, va, 2 * G), 0);
    free(host);
    B->close(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vmm_costs),
        cmocka_unit_test(test_vmm_waits),
        cmocka_unit_test(test_vmm_serialize),
        cmocka_unit_test(test_copy_model),
        cmocka_unit_test(test_copy_waits),
    };
    return cmocka_run_group_tests_name("timed_sim", tests, NULL, NULL);
}
