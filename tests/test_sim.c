/* The sim backend: VMM emulation, its strictness, streams, events, faults. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdcount.h"
#include "backend/backend.h"
#include "util/conf.h"
#include "topo/drivercost.h"
#include "topo/topology.h"

#define G ((size_t)2 << 20)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static const struct backend_ops *B = &sim_backend_ops;

static void *open_sim(int ndev, size_t mem, struct ump_topology *topo)
{
    struct ump_config cfg;
    void *ctx = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.sim_devices = ndev;
    cfg.sim_device_mem = mem;
    assert_int_equal(B->open(&cfg, topo, &ctx), 0);
    assert_non_null(ctx);
    return ctx;
}

/* Like open_sim, with a host tier of host_limit bytes (0: the default). */
static void *open_sim_host(int ndev, size_t mem, size_t host_limit,
                           struct ump_topology *topo)
{
    struct ump_config cfg;
    void *ctx = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.sim_devices = ndev;
    cfg.sim_device_mem = mem;
    cfg.host_limit = host_limit;
    assert_int_equal(B->open(&cfg, topo, &ctx), 0);
    assert_non_null(ctx);
    return ctx;
}

/* The permissions of the mapping holding p in /proc/self/maps ("rw-s"),
 * or "" when nothing is mapped there. */
static void prot_of(const void *p, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];

    assert_non_null(f);
    perms[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char pr[5];

        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pr) == 3 &&
            (uintptr_t)p >= lo && (uintptr_t)p < hi) {
            memcpy(perms, pr, 5);
            break;
        }
    }
    fclose(f);
}

static void assert_prot(const void *p, const char *want)
{
    char perms[5];

    prot_of(p, perms);
    assert_string_equal(perms, want);
}

/* Reserve, create, map, grant access: the usual way to get usable memory. */
static void *map_new(void *ctx, int dev, size_t size, ump_handle_t *h_p)
{
    void *va;
    ump_handle_t h;
    int d = dev;

    assert_int_equal(B->reserve(ctx, size, 0, &va), 0);
    assert_int_equal(B->chunk_create(ctx, dev, size, &h), 0);
    assert_int_equal(B->map(ctx, va, size, h), 0);
    assert_int_equal(B->set_access(ctx, va, size, &d, 1), 0);
    *h_p = h;
    return va;
}

static void unmap_free(void *ctx, void *va, size_t size, ump_handle_t h)
{
    assert_int_equal(B->unmap(ctx, va, size), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, va, size), 0);
}

static void test_open_uniform(void **state)
{
    struct ump_topology topo;
    void *ctx;

    (void)state;
    ctx = open_sim(0, 0, &topo);
    assert_int_equal(topo.ndev, 1);
    assert_int_equal(topo.dev[0].mem, 16 * GiB);
    assert_int_equal(B->granularity(ctx, 0), G);
    B->close(ctx);

    ctx = open_sim(4, 0, &topo);
    assert_int_equal(topo.ndev, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(topo.dev[i].mem, 16 * GiB);
    B->close(ctx);
}

static void test_open_mem_override(void **state)
{
    struct ump_topology topo;
    struct ump_config cfg;
    ump_handle_t h;
    void *ctx;

    (void)state;
    ctx = open_sim(3, 64 * MiB, &topo);
    assert_int_equal(topo.ndev, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(topo.dev[i].mem, 64 * MiB);
    /* The override is the capacity too. */
    assert_int_equal(B->chunk_create(ctx, 2, 64 * MiB, &h), 0);
    assert_int_equal(B->chunk_create(ctx, 2, G, &h), -ENOMEM);
    B->close(ctx);

    /* The topology gives the device count: both together are refused. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.sim_devices = 2;
    strcpy(cfg.sim_topology, "dgx-h200");
    ctx = NULL;
    assert_int_equal(B->open(&cfg, &topo, &ctx), -EINVAL);
    assert_null(ctx);
    cfg.sim_topology[0] = '\0';
    cfg.sim_devices = -1;
    assert_int_equal(B->open(&cfg, &topo, &ctx), -EINVAL);
    cfg.sim_devices = UMP_MAX_DEVICES + 1;
    assert_int_equal(B->open(&cfg, &topo, &ctx), -EINVAL);
    assert_null(ctx);
}

/* Needs the topologies folder: make check sets UMPOOL_TOPOLOGY_DIR. */
static void test_open_topology(void **state)
{
    struct ump_topology topo;
    struct ump_config cfg;
    ump_handle_t h;
    void *ctx = NULL;

    (void)state;
    if (!getenv("UMPOOL_TOPOLOGY_DIR"))
        skip();
    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.sim_topology, "pcie-4gpu");
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    assert_int_equal(topo.ndev, 4);
    assert_true(topo.dev[3].mem > 16 * GiB);
    B->close(ctx);

    /* sim_device_mem overrides the file's sizes. */
    cfg.sim_device_mem = 8 * MiB;
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    assert_int_equal(topo.ndev, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(topo.dev[i].mem, 8 * MiB);
    assert_int_equal(B->chunk_create(ctx, 3, 8 * MiB, &h), 0);
    assert_int_equal(B->chunk_create(ctx, 3, G, &h), -ENOMEM);
    B->close(ctx);

    /* Like the driver, access only for peers: on this box GPUs 0 and 2 sit
     * on different sockets without peer access. */
    cfg.sim_device_mem = 8 * MiB;
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    assert_false(topo.link[0][2].peer);
    assert_true(topo.link[3][2].peer);
    char *pva;
    assert_int_equal(B->reserve(ctx, G, 0, (void **)&pva), 0);
    assert_int_equal(B->chunk_create(ctx, 2, G, &h), 0);
    assert_int_equal(B->map(ctx, pva, G, h), 0);
    int nopeer[2] = {2, 0}, peers[2] = {2, 3};
    assert_int_equal(B->set_access(ctx, pva, G, nopeer, 2), -EINVAL);
    assert_int_equal(B->set_access(ctx, pva, G, peers, 2), 0);
    pva[0] = 1;
    assert_int_equal(B->unmap(ctx, pva, G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, pva, G), 0);
    B->close(ctx);

    strcpy(cfg.sim_topology, "no-such-machine");
    ctx = NULL;
    assert_true(B->open(&cfg, &topo, &ctx) < 0);
    assert_null(ctx);
}

static void test_map_access_unmap(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    int devs[2] = {0, 1};
    ump_handle_t h;
    char *va;

    (void)state;
    assert_int_equal(B->reserve(ctx, 8 * G, 0, (void **)&va), 0);
    assert_prot(va, "---p");
    assert_int_equal(B->chunk_create(ctx, 1, 2 * G, &h), 0);
    assert_int_equal(B->map(ctx, va + 2 * G, 2 * G, h), 0);
    /* Mapped but not accessible until set_access, as on CUDA. */
    assert_prot(va + 2 * G, "---s");
    assert_int_equal(B->memset_async(ctx, va + 2 * G, 1, 16, NULL), -EINVAL);
    assert_int_equal(B->set_access(ctx, va + 2 * G, 2 * G, devs, 2), 0);
    assert_prot(va + 2 * G, "rw-s");
    assert_prot(va + 4 * G - 1, "rw-s");
    memset(va + 2 * G, 0x5a, 2 * G);
    assert_int_equal((unsigned char)va[4 * G - 1], 0x5a);
    assert_int_equal(B->unmap(ctx, va + 2 * G, 2 * G), 0);
    /* The reservation stays, inaccessible. */
    assert_prot(va + 2 * G, "---p");
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, va, 8 * G), 0);
    B->close(ctx);
}

/* Driver time as the sim accounts it: device 0's, device 1's, and the
 * total, each as wanted. */
static void assert_driver_ns(void *ctx, const uint64_t want[2])
{
    assert_int_equal(B->driver_ns(ctx, 0), want[0]);
    assert_int_equal(B->driver_ns(ctx, 1), want[1]);
    assert_int_equal(B->driver_ns(ctx, -1), want[0] + want[1]);
}

/* sim_driver_costs:h200: each successful call on a device chunk adds the
 * H200's cost of its handles (topo/drivercost.h) to the device owning
 * them: set access and unmap per handle in the range, whatever the number
 * of calls. Host chunks and refused calls add nothing; nothing sleeps. */
static void test_driver_costs(void **state)
{
    struct ump_topology topo;
    struct ump_config cfg;
    void *ctx = NULL;
    int devs[2] = {0, 1};
    ump_handle_t h0, h1, h2, hh;
    uint64_t want[2] = {0, 0};
    char *va;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.sim_devices = 2;
    cfg.sim_device_mem = 64 * MiB;
    cfg.host_limit = 8 * MiB;
    cfg.sim_driver_costs = UMP_SIM_COSTS_H200;
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    assert_driver_ns(ctx, want);
    assert_int_equal(B->driver_ns(ctx, 2), 0); /* no such device */

    assert_int_equal(B->reserve(ctx, 16 * G, 0, (void **)&va), 0);
    assert_driver_ns(ctx, want); /* not in the table */
    assert_int_equal(B->chunk_create(ctx, 0, 4 * G, &h0), 0);
    assert_int_equal(B->chunk_create(ctx, 1, G, &h1), 0);
    assert_int_equal(B->chunk_create(ctx, 1, G, &h2), 0);
    want[0] += drvcost_ns(DRV_CREATE, 4 * G);
    want[1] += 2 * drvcost_ns(DRV_CREATE, G);
    assert_driver_ns(ctx, want);
    assert_int_equal(B->map(ctx, va, 4 * G, h0), 0);
    assert_int_equal(B->map(ctx, va + 4 * G, G, h1), 0);
    assert_int_equal(B->map(ctx, va + 5 * G, G, h2), 0);
    want[0] += drvcost_ns(DRV_MAP, 4 * G);
    want[1] += 2 * drvcost_ns(DRV_MAP, G);
    assert_driver_ns(ctx, want);
    /* One call, three handles on two devices. */
    assert_int_equal(B->set_access(ctx, va, 6 * G, devs, 2), 0);
    want[0] += drvcost_ns(DRV_SET_ACCESS, 4 * G);
    want[1] += 2 * drvcost_ns(DRV_SET_ACCESS, G);
    assert_driver_ns(ctx, want);
    /* A range starting inside a handle counts that handle once. */
    assert_int_equal(B->set_access(ctx, va + G, 2 * G, devs, 2), 0);
    want[0] += drvcost_ns(DRV_SET_ACCESS, 4 * G);
    assert_driver_ns(ctx, want);

    /* Refused calls: nothing. */
    assert_int_equal(B->map(ctx, va, 4 * G, h0), -EINVAL);
    assert_int_equal(B->unmap(ctx, va + G, G), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 0, 64 * MiB, &hh), -ENOMEM);
    assert_driver_ns(ctx, want);

    /* Host chunks: not in driver_ns, which counts device chunks as the
     * cuda backend times them (h200-timed waits for them: test_timed_sim). */
    assert_int_equal(B->host_chunk_create(ctx, -1, G, &hh), 0);
    assert_int_equal(B->map(ctx, va + 8 * G, G, hh), 0);
    assert_int_equal(B->set_access_host(ctx, va + 8 * G, G, devs, 2), 0);
    assert_int_equal(B->unmap(ctx, va + 8 * G, G), 0);
    assert_int_equal(B->chunk_release(ctx, hh), 0);
    assert_driver_ns(ctx, want);

    /* One unmap for three mappings: per handle, each on its device; a
     * release while mapped counts at the release. */
    assert_int_equal(B->chunk_release(ctx, h1), 0);
    want[1] += drvcost_ns(DRV_RELEASE, G);
    assert_int_equal(B->unmap(ctx, va, 6 * G), 0);
    want[0] += drvcost_ns(DRV_UNMAP, 4 * G);
    want[1] += 2 * drvcost_ns(DRV_UNMAP, G);
    assert_driver_ns(ctx, want);
    assert_int_equal(B->chunk_release(ctx, h0), 0);
    assert_int_equal(B->chunk_release(ctx, h2), 0);
    want[0] += drvcost_ns(DRV_RELEASE, 4 * G);
    want[1] += drvcost_ns(DRV_RELEASE, G);
    assert_driver_ns(ctx, want);
    assert_int_equal(B->unreserve(ctx, va, 16 * G), 0);
    B->close(ctx);

    /* Off (the default): the same calls account nothing. */
    ctx = open_sim(2, 64 * MiB, &topo);
    va = map_new(ctx, 1, 4 * G, &h0);
    unmap_free(ctx, va, 4 * G, h0);
    want[0] = want[1] = 0;
    assert_driver_ns(ctx, want);
    B->close(ctx);
}

/* The same handle at two addresses is legal in CUDA: both show one
 * memory. grant: set_access or set_access_host. */
static void check_two_views(void *ctx, ump_handle_t h,
                            int (*grant)(void *, void *, size_t, const int *,
                                         int))
{
    int dev = 0;
    char *va;

    assert_int_equal(B->reserve(ctx, 8 * G, 0, (void **)&va), 0);
    assert_int_equal(B->map(ctx, va, 2 * G, h), 0);
    assert_int_equal(B->map(ctx, va + 4 * G, 2 * G, h), 0);
    assert_int_equal(grant(ctx, va, 2 * G, &dev, 1), 0);
    assert_int_equal(grant(ctx, va + 4 * G, 2 * G, &dev, 1), 0);
    for (size_t i = 0; i < 2 * G; i += 4096)
        va[i] = (char)(i >> 12);
    for (size_t i = 0; i < 2 * G; i += 4096)
        assert_int_equal(va[4 * G + i], (char)(i >> 12));
    strcpy(va + 4 * G + 100, "back");
    assert_string_equal(va + 100, "back");
    /* Released with two mappings: both keep it until the last unmap. */
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unmap(ctx, va, 2 * G), 0);
    assert_string_equal(va + 4 * G + 100, "back");
    assert_int_equal(B->unmap(ctx, va + 4 * G, 2 * G), 0);
    assert_int_equal(B->unreserve(ctx, va, 8 * G), 0);
}

static void test_two_views(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim_host(1, 64 * MiB, 8 * MiB, &topo);
    ump_handle_t h;

    (void)state;
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &h), 0);
    check_two_views(ctx, h, B->set_access);
    assert_int_equal(B->host_chunk_create(ctx, 0, 2 * G, &h), 0);
    check_two_views(ctx, h, B->set_access_host);
    /* Both went back with their last unmap. */
    assert_int_equal(B->host_chunk_create(ctx, -1, 8 * MiB, &h), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 64 * MiB, &h), 0);
    B->close(ctx);
}

static void test_capacity(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    ump_handle_t h[33], extra;
    int n = 0, err;

    (void)state;
    while ((err = B->chunk_create(ctx, 0, G, &h[n])) == 0) {
        n++;
        assert_true(n <= 32);
    }
    assert_int_equal(err, -ENOMEM);
    assert_int_equal(n, 64 * MiB / G);
    /* A full device does not fill the others. */
    assert_int_equal(B->chunk_create(ctx, 1, 64 * MiB, &extra), 0);
    assert_int_equal(B->chunk_release(ctx, extra), 0);

    assert_int_equal(B->chunk_release(ctx, h[3]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &extra), -ENOMEM);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[3]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &extra), -ENOMEM);

    /* Neighbouring extents coalesce: three released chunks hold a chunk
     * three granules long. */
    assert_int_equal(B->chunk_release(ctx, h[5]), 0);
    assert_int_equal(B->chunk_release(ctx, h[7]), 0);
    assert_int_equal(B->chunk_release(ctx, h[6]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 3 * G, &extra), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[5]), -ENOMEM);
    B->close(ctx);
}

static void test_strictness(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    int dev = 0, bad = 2, neg = -1;
    ump_handle_t h, h2, h4;
    char *va, *other;

    (void)state;
    /* reserve */
    assert_int_equal(B->reserve(ctx, 0, 0, (void **)&va), -EINVAL);
    assert_int_equal(B->reserve(ctx, G + 4096, 0, (void **)&va), -EINVAL);
    assert_int_equal(B->reserve(ctx, G, 3 * G, (void **)&va), -EINVAL);
    assert_int_equal(B->reserve(ctx, 16 * G, 0, (void **)&va), 0);
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&other), 0);

    /* chunk_create: bad device, bad size */
    assert_int_equal(B->chunk_create(ctx, -1, G, &h), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 2, G, &h), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 0, 0, &h), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 0, G / 2, &h), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &h2), 0);
    assert_int_equal(B->chunk_create(ctx, 1, 4 * G, &h4), 0);

    /* map: alignment, reservation, size, handle, overlap */
    assert_int_equal(B->map(ctx, va + 4096, G, h), -EINVAL);
    assert_int_equal(B->map(ctx, va + 16 * G, G, h), -EINVAL);
    assert_int_equal(B->map(ctx, va + 14 * G, 4 * G, h4), -EINVAL);
    assert_int_equal(B->map(ctx, other + 2 * G, 4 * G, h4), -EINVAL);
    assert_int_equal(B->map(ctx, va, 2 * G, h), -EINVAL);
    assert_int_equal(B->map(ctx, va, G, h2), -EINVAL);
    assert_int_equal(B->map(ctx, va, G, 0), -EINVAL);
    assert_int_equal(B->map(ctx, va, G, 12345), -EINVAL);
    assert_int_equal(B->map(ctx, va, G, h + 1), -EINVAL);
    assert_int_equal(B->map(ctx, va + G, 2 * G, h2), 0);
    assert_int_equal(B->map(ctx, va + G, 2 * G, h2), -EINVAL);
    assert_int_equal(B->map(ctx, va + 2 * G, G, h), -EINVAL);
    assert_int_equal(B->map(ctx, va, 4 * G, h4), -EINVAL);
    /* Nothing above changed anything: va is still free. */
    assert_int_equal(B->map(ctx, va, G, h), 0);

    /* set_access: unmapped parts, devices */
    assert_int_equal(B->set_access(ctx, va + 3 * G, G, &dev, 1), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 4 * G, &dev, 1), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 3 * G, &bad, 1), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 3 * G, &neg, 1), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 3 * G, &dev, 0), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 3 * G, NULL, 1), -EINVAL);
    assert_int_equal(B->set_access(ctx, va + 4096, G, &dev, 1), -EINVAL);
    assert_prot(va, "---s");
    /* One call over two mappings is fine. */
    assert_int_equal(B->set_access(ctx, va, 3 * G, &dev, 1), 0);
    assert_prot(va + 2 * G, "rw-s");

    /* unmap: whole mappings only */
    assert_int_equal(B->unmap(ctx, va + G, G), -EINVAL);
    assert_int_equal(B->unmap(ctx, va + 2 * G, G), -EINVAL);
    assert_int_equal(B->unmap(ctx, va, 2 * G), -EINVAL);
    assert_int_equal(B->unmap(ctx, va, 4 * G), -EINVAL);
    assert_int_equal(B->unmap(ctx, va + 8 * G, G), -EINVAL);
    assert_int_equal(B->unmap(ctx, va + 4096, G), -EINVAL);
    assert_prot(va + G, "rw-s");

    /* unreserve: exact, and nothing mapped */
    assert_int_equal(B->unreserve(ctx, va, 16 * G), -EBUSY);
    assert_int_equal(B->unreserve(ctx, va, 8 * G), -EINVAL);
    assert_int_equal(B->unreserve(ctx, va + G, 15 * G), -EINVAL);

    /* release: bad and double */
    assert_int_equal(B->chunk_release(ctx, 0), -EINVAL);
    assert_int_equal(B->chunk_release(ctx, h + 3), -EINVAL);
    assert_int_equal(B->chunk_release(ctx, h4), 0);
    assert_int_equal(B->chunk_release(ctx, h4), -EINVAL);
    assert_int_equal(B->map(ctx, other, 4 * G, h4), -EINVAL);

    /* Two mappings in one unmap call are fine. */
    assert_int_equal(B->unmap(ctx, va, 3 * G), 0);
    assert_int_equal(B->unmap(ctx, va, G), -EINVAL);
    assert_int_equal(B->unreserve(ctx, va, 16 * G), 0);
    assert_int_equal(B->unreserve(ctx, va, 16 * G), -EINVAL);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->chunk_release(ctx, h2), 0);
    assert_int_equal(B->unreserve(ctx, other, 4 * G), 0);
    B->close(ctx);
}

static void test_release_while_mapped(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 2 * G, &topo);
    ump_handle_t h, h2;
    char *va;

    (void)state;
    va = map_new(ctx, 0, 2 * G, &h);
    memset(va, 0x77, 2 * G);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    /* Still readable and writable through the mapping. */
    assert_int_equal(va[0], 0x77);
    assert_int_equal(va[2 * G - 1], 0x77);
    va[5] = 1;
    assert_int_equal(va[5], 1);
    /* The handle is gone, but the memory is not: the device stays full. */
    assert_int_equal(B->chunk_release(ctx, h), -EINVAL);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h2), -ENOMEM);
    assert_int_equal(B->unmap(ctx, va, 2 * G), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &h2), 0);
    assert_int_equal(B->chunk_release(ctx, h2), 0);
    assert_int_equal(B->unreserve(ctx, va, 2 * G), 0);
    B->close(ctx);
}

static void test_punch_hole(void **state)
{
    struct ump_topology topo;
    /* One chunk fills the device, so the next one takes the same offset. */
    void *ctx = open_sim(1, G, &topo);
    ump_handle_t h;
    char *va;

    (void)state;
    va = map_new(ctx, 0, G, &h);
    memset(va, 0xab, G);
    unmap_free(ctx, va, G, h);

    va = map_new(ctx, 0, G, &h);
    for (size_t i = 0; i < G; i += 512)
        assert_int_equal(va[i], 0);
    assert_int_equal(va[G - 1], 0);
    unmap_free(ctx, va, G, h);
    B->close(ctx);
}

static void test_reserve_alignment(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, G, &topo);
    size_t aligns[] = {0, 4096, G, 64 * MiB, GiB};
    void *va[5];

    (void)state;
    for (int i = 0; i < 5; i++) {
        size_t want = aligns[i] > G ? aligns[i] : G;

        assert_int_equal(B->reserve(ctx, 3 * G, aligns[i], &va[i]), 0);
        assert_int_equal((uintptr_t)va[i] % want, 0);
        assert_prot(va[i], "---p");
        assert_prot((char *)va[i] + 3 * G - 1, "---p");
    }
    for (int i = 0; i < 5; i++)
        assert_int_equal(B->unreserve(ctx, va[i], 3 * G), 0);
    B->close(ctx);
}

/* --- reserve_at ---------------------------------------------------------- */

/* reserve_at with stderr captured into buf (len bytes); its result. */
static int reserve_at_logged(void *ctx, void *va, size_t size, size_t align,
                             char *buf, size_t len)
{
    FILE *tmp = tmpfile();
    int saved, rc, back;
    size_t n;

    assert_non_null(tmp);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    rc = B->reserve_at(ctx, va, size, align);
    fflush(stderr);
    back = dup2(saved, STDERR_FILENO);
    close(saved);
    assert_true(back >= 0);
    rewind(tmp);
    n = fread(buf, 1, len - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
    return rc;
}

/* buf holds one log line, and it says that [va, +size) is taken. */
static void assert_taken_line(const char *buf, const void *va, size_t size)
{
    char want[128];
    int lines = 0;

    snprintf(want, sizeof(want), "sim: reserve_at: [%p, +%zu) is taken", va,
             size);
    for (const char *l = buf; *l; l++)
        if ((l == buf || l[-1] == '\n') && strncmp(l, "umpool:", 7) == 0)
            lines++;
    if (lines != 1 || !strstr(buf, want))
        fail_msg("want one log line with '%s', got:\n%s", want, buf);
}

/* The range a reservation had, once given back, can be had again exactly
 * (a checkpoint's restore), and is a reservation like any other. */
static void test_reserve_at_round_trip(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    int dev = 0;
    ump_handle_t h;
    char *va, *va2;

    (void)state;
    assert_non_null(B->reserve_at);
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&va), 0);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), 0);
    assert_int_equal(B->reserve_at(ctx, va, 4 * G, 0), 0);
    assert_prot(va, "---p");
    assert_prot(va + 4 * G - 1, "---p");
    assert_int_equal(B->chunk_create(ctx, 0, 2 * G, &h), 0);
    assert_int_equal(B->map(ctx, va + 2 * G, 2 * G, h), 0);
    assert_int_equal(B->set_access(ctx, va + 2 * G, 2 * G, &dev, 1), 0);
    memset(va + 2 * G, 7, 2 * G);
    assert_int_equal(va[4 * G - 1], 7);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), -EBUSY);
    assert_int_equal(B->unmap(ctx, va + 2 * G, 2 * G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), 0);

    /* An injected "reserve" fault hits reserve_at too, holding nothing. */
    assert_int_equal(sim_inject_fault(ctx, "reserve", 1, -ENOMEM), 0);
    assert_int_equal(B->reserve_at(ctx, va, 4 * G, 0), -ENOMEM);
    assert_int_equal(B->reserve_at(ctx, va, 4 * G, 0), 0);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), 0);

    /* With an alignment above the granularity. */
    assert_int_equal(B->reserve(ctx, 3 * G, 64 * MiB, (void **)&va2), 0);
    assert_int_equal(B->unreserve(ctx, va2, 3 * G), 0);
    assert_int_equal(B->reserve_at(ctx, va2, 3 * G, 64 * MiB), 0);
    assert_prot(va2, "---p");
    assert_int_equal(B->unreserve(ctx, va2, 3 * G), 0);
    B->close(ctx);
}

/* A range of which anything is taken, by a reservation or by a mapping of
 * the process, is -EADDRINUSE with one line; the mapping and the backend
 * stay as they were, and nothing is held. */
static void test_reserve_at_taken(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    int dev = 0;
    ump_handle_t h;
    char buf[4096], *va, *va2, *raw, *q;

    (void)state;
    /* Over a reservation still held, whole or in part. */
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&va), 0);
    assert_int_equal(reserve_at_logged(ctx, va, 4 * G, 0, buf, sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, va, 4 * G);
    assert_int_equal(reserve_at_logged(ctx, va + 2 * G, 4 * G, 0, buf,
                                       sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, va + 2 * G, 4 * G);
    assert_int_equal(reserve_at_logged(ctx, va - 2 * G, 4 * G, 0, buf,
                                       sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, va - 2 * G, 4 * G);
    /* The reservation works on, whole. */
    assert_prot(va, "---p");
    assert_prot(va + 4 * G - 1, "---p");
    assert_int_equal(B->chunk_create(ctx, 0, 4 * G, &h), 0);
    assert_int_equal(B->map(ctx, va, 4 * G, h), 0);
    assert_int_equal(B->set_access(ctx, va, 4 * G, &dev, 1), 0);
    memset(va, 3, 4 * G);
    assert_int_equal(B->unmap(ctx, va, 4 * G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), 0);

    /* Over an ordinary mapping of the process: [q, q + G) a hole, then
     * [q + G, q + 4 * G) mapped, written. A range over both is refused and
     * leaves the hole free: the hole alone is had at once after. */
    raw = mmap(NULL, 5 * G, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(raw != MAP_FAILED);
    q = (char *)(((uintptr_t)raw + G - 1) & ~(uintptr_t)(G - 1));
    memset(q + G, 0x5a, 3 * G);
    assert_int_equal(munmap(q, G), 0);
    assert_int_equal(B->reserve_at(ctx, q, 2 * G, 0), -EADDRINUSE);
    assert_int_equal(B->reserve_at(ctx, q, G, 0), 0);
    assert_int_equal(B->unreserve(ctx, q, G), 0);
    assert_int_equal(reserve_at_logged(ctx, q + G, 2 * G, 0, buf,
                                       sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, q + G, 2 * G);
    assert_prot(q + G, "rw-p");
    for (size_t i = 0; i < 3 * G; i++)
        if (q[G + i] != 0x5a)
            fail_msg("the process's mapping changed at offset %zu", i);

    /* The backend works on. */
    assert_int_equal(B->reserve(ctx, 2 * G, 0, (void **)&va2), 0);
    assert_int_equal(B->unreserve(ctx, va2, 2 * G), 0);
    assert_int_equal(munmap(raw, 5 * G), 0);
    B->close(ctx);
}

/* Misaligned or empty ranges and bad alignments are -EINVAL, and hold
 * nothing. */
static void test_reserve_at_bad_args(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    char *va;
    char *top = (char *)(UINTPTR_MAX & ~(uintptr_t)(G - 1));

    (void)state;
    assert_int_equal(B->reserve(ctx, 2 * G, 64 * MiB, (void **)&va), 0);
    assert_int_equal(B->unreserve(ctx, va, 2 * G), 0);
    assert_int_equal(B->reserve_at(ctx, va + 4096, 2 * G, 0), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, va + G, 2 * G, 64 * MiB), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, va, 2 * G, 3 * G), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, va, G + 4096, 0), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, va, 0, 0), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, NULL, 2 * G, 0), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, top, 2 * G, 0), -EINVAL);
    assert_int_equal(B->reserve_at(ctx, va, 2 * G, 64 * MiB), 0);
    assert_int_equal(B->unreserve(ctx, va, 2 * G), 0);
    B->close(ctx);
}

/* Many small mappings side by side, then one unmap call for all of them. */
static void test_many_mappings(void **state)
{
    enum { N = 8192 };
    struct ump_topology topo;
    void *ctx = open_sim(1, N * G, &topo);
    ump_handle_t *h = calloc(N, sizeof(*h));
    int dev = 0;
    char *va;

    (void)state;
    assert_non_null(h);
    assert_int_equal(B->reserve(ctx, N * G, 0, (void **)&va), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(B->chunk_create(ctx, 0, G, &h[i]), 0);
        assert_int_equal(B->map(ctx, va + i * G, G, h[i]), 0);
        assert_int_equal(B->chunk_release(ctx, h[i]), 0);
    }
    assert_int_equal(B->set_access(ctx, va, N * G, &dev, 1), 0);
    va[(size_t)(N - 1) * G] = 9;
    assert_int_equal(B->unreserve(ctx, va, N * G), -EBUSY);
    assert_int_equal(B->unmap(ctx, va, N * G), 0);
    assert_int_equal(B->unreserve(ctx, va, N * G), 0);
    /* Every release took effect at the unmap: the device is empty. */
    assert_int_equal(B->chunk_create(ctx, 0, N * G, &h[0]), 0);
    free(h);
    B->close(ctx);
}

/* --- host chunks ------------------------------------------------------ */

static void test_host_chunks(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim_host(2, 64 * MiB, 64 * MiB, &topo);
    int devs[2] = {0, 1}, bad = 2;
    ump_handle_t hh, hd, hx;
    char *va;

    (void)state;
    assert_int_equal(topo.nnuma, 1);
    /* Bad node, bad size. */
    assert_int_equal(B->host_chunk_create(ctx, 1, G, &hx), -EINVAL);
    assert_int_equal(B->host_chunk_create(ctx, -2, G, &hx), -EINVAL);
    assert_int_equal(B->host_chunk_create(ctx, 0, 0, &hx), -EINVAL);
    assert_int_equal(B->host_chunk_create(ctx, 0, G / 2, &hx), -EINVAL);

    assert_int_equal(B->reserve(ctx, 8 * G, 0, (void **)&va), 0);
    assert_int_equal(B->host_chunk_create(ctx, -1, 2 * G, &hh), 0);
    assert_int_equal(B->chunk_create(ctx, 1, G, &hd), 0);
    /* The strictness of device chunks holds for host chunks. */
    assert_int_equal(B->map(ctx, va, G, hh), -EINVAL);
    assert_int_equal(B->map(ctx, va, 2 * G, hh), 0);
    assert_int_equal(B->map(ctx, va, 2 * G, hh), -EINVAL);
    assert_int_equal(B->map(ctx, va + 2 * G, G, hd), 0);
    assert_prot(va, "---s");
    assert_int_equal(B->unmap(ctx, va, G), -EINVAL);

    /* Host access needs host memory in every granule of the range, and
     * known devices; the refused calls change nothing. */
    assert_int_equal(B->set_access_host(ctx, va + 2 * G, G, devs, 2),
                     -EINVAL);
    assert_int_equal(B->set_access_host(ctx, va, 3 * G, devs, 2), -EINVAL);
    assert_int_equal(B->set_access_host(ctx, va, 4 * G, devs, 2), -EINVAL);
    assert_int_equal(B->set_access_host(ctx, va, 2 * G, &bad, 1), -EINVAL);
    assert_int_equal(B->set_access_host(ctx, va, 2 * G, NULL, 1), -EINVAL);
    assert_int_equal(B->set_access_host(ctx, va + 4096, G, devs, 2),
                     -EINVAL);
    assert_prot(va, "---s");
    assert_prot(va + 2 * G, "---s");
    assert_int_equal(B->set_access_host(ctx, va, 2 * G, devs, 2), 0);
    assert_prot(va, "rw-s");
    assert_prot(va + 2 * G - 1, "rw-s");
    assert_prot(va + 2 * G, "---s");
    memset(va, 0x3c, 2 * G);
    /* Copies reach it like any accessible memory. */
    assert_int_equal(B->memset_async(ctx, va + 10, 1, 10, NULL), 0);
    assert_int_equal(va[19], 1);
    assert_int_equal((unsigned char)va[20], 0x3c);
    /* The CPU alone may be given access to host memory. */
    assert_int_equal(B->set_access_host(ctx, va, 2 * G, NULL, 0), 0);
    /* set_access works on host memory too, over a mixed range. */
    assert_int_equal(B->set_access(ctx, va, 3 * G, devs, 2), 0);
    assert_prot(va + 2 * G, "rw-s");

    assert_int_equal(B->unmap(ctx, va, 3 * G), 0);
    assert_int_equal(B->chunk_release(ctx, hh), 0);
    assert_int_equal(B->chunk_release(ctx, hh), -EINVAL);
    assert_int_equal(B->chunk_release(ctx, hd), 0);
    assert_int_equal(B->unreserve(ctx, va, 8 * G), 0);
    B->close(ctx);
}

/* The host tier fills up like a device, apart from the devices, and its
 * released memory comes back, scrubbed. */
static void test_host_capacity(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim_host(1, 4 * G, 4 * G, &topo);
    ump_handle_t h[5], hd;
    char *va;
    int n = 0, err;

    (void)state;
    while ((err = B->host_chunk_create(ctx, 0, G, &h[n])) == 0) {
        n++;
        assert_true(n <= 4);
    }
    assert_int_equal(err, -ENOMEM);
    assert_int_equal(n, 4);
    /* A full host tier leaves the device alone, and the other way round. */
    assert_int_equal(B->chunk_create(ctx, 0, 4 * G, &hd), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[4]), -ENOMEM);
    assert_int_equal(B->chunk_release(ctx, hd), 0);

    /* Released while mapped: the memory stays until the unmap. */
    assert_int_equal(B->reserve(ctx, G, 0, (void **)&va), 0);
    assert_int_equal(B->map(ctx, va, G, h[2]), 0);
    assert_int_equal(B->set_access_host(ctx, va, G, (int[]){0}, 1), 0);
    memset(va, 0xab, G);
    assert_int_equal(B->chunk_release(ctx, h[2]), 0);
    assert_int_equal((unsigned char)va[G - 1], 0xab);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[2]), -ENOMEM);
    assert_int_equal(B->unmap(ctx, va, G), 0);
    /* The only free extent is the one just punched: it reads zeros. */
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[2]), 0);
    assert_int_equal(B->map(ctx, va, G, h[2]), 0);
    assert_int_equal(B->set_access_host(ctx, va, G, (int[]){0}, 1), 0);
    for (size_t i = 0; i < G; i += 512)
        assert_int_equal(va[i], 0);
    assert_int_equal(B->unmap(ctx, va, G), 0);
    assert_int_equal(B->unreserve(ctx, va, G), 0);

    /* All released: the whole tier can be had again, in one piece. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(B->chunk_release(ctx, h[i]), 0);
    assert_int_equal(B->host_chunk_create(ctx, -1, 4 * G, &h[0]), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[1]), -ENOMEM);
    B->close(ctx);
}

/* host_limit 0: a quarter of physical memory, in whole granules (sparse:
 * creating it costs no RAM). */
static void test_host_default_limit(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim_host(1, 64 * MiB, 0, &topo);
    size_t want = (size_t)sysconf(_SC_PHYS_PAGES) / 4 *
                  (size_t)sysconf(_SC_PAGESIZE) / G * G;
    ump_handle_t h;

    (void)state;
    assert_true(want > 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, want + G, &h), -ENOMEM);
    assert_int_equal(B->host_chunk_create(ctx, 0, want, &h), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h), -ENOMEM);
    B->close(ctx);
}

/* One host memory per NUMA node of the topology, and host memory reaches
 * devices that are not each other's peers. */
static void test_host_numa(void **state)
{
    struct ump_topology topo;
    struct ump_config cfg;
    ump_handle_t h0, h1, hd, hx;
    void *ctx = NULL;
    char *va;

    (void)state;
    if (!getenv("UMPOOL_TOPOLOGY_DIR"))
        skip();
    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.sim_topology, "pcie-4gpu");
    cfg.sim_device_mem = 8 * MiB;
    cfg.host_limit = 4 * MiB + 4096; /* rounded down to the granule */
    assert_int_equal(B->open(&cfg, &topo, &ctx), 0);
    assert_int_equal(topo.nnuma, 2);
    assert_false(topo.link[0][2].peer);
    assert_int_equal(B->host_chunk_create(ctx, 2, G, &hx), -EINVAL);
    assert_int_equal(B->host_chunk_create(ctx, 1, 6 * MiB, &hx), -ENOMEM);
    assert_int_equal(B->host_chunk_create(ctx, 1, 4 * MiB, &h1), 0);
    assert_int_equal(B->host_chunk_create(ctx, 1, G, &hx), -ENOMEM);
    assert_int_equal(B->host_chunk_create(ctx, 0, 4 * MiB, &h0), 0);
    assert_int_equal(B->chunk_create(ctx, 2, G, &hd), 0);

    assert_int_equal(B->reserve(ctx, 16 * MiB, 0, (void **)&va), 0);
    assert_int_equal(B->map(ctx, va, 4 * MiB, h0), 0);
    assert_int_equal(B->map(ctx, va + 4 * MiB, 4 * MiB, h1), 0);
    assert_int_equal(B->map(ctx, va + 8 * MiB, G, hd), 0);
    int far[2] = {0, 2};
    assert_int_equal(B->set_access(ctx, va + 8 * MiB, G, far, 2), -EINVAL);
    assert_int_equal(B->set_access(ctx, va, 8 * MiB, far, 2), 0);
    assert_int_equal(B->set_access_host(ctx, va, 8 * MiB, far, 2), 0);
    /* Two nodes, two memories. */
    memset(va, 1, 4 * MiB);
    memset(va + 4 * MiB, 2, 4 * MiB);
    assert_int_equal(va[4 * MiB - 1], 1);
    assert_int_equal(va[4 * MiB], 2);
    assert_int_equal(B->unmap(ctx, va, 8 * MiB + G), 0);
    assert_int_equal(B->unreserve(ctx, va, 16 * MiB), 0);
    assert_int_equal(B->chunk_release(ctx, h0), 0);
    assert_int_equal(B->chunk_release(ctx, h1), 0);
    assert_int_equal(B->chunk_release(ctx, hd), 0);
    B->close(ctx);
}

static void test_host_fault(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim_host(1, 8 * MiB, 4 * MiB, &topo);
    ump_handle_t h[2], hd;

    (void)state;
    /* The second call fails, without taking memory; chunk_create's count
     * is its own. */
    assert_int_equal(sim_inject_fault(ctx, "host_chunk_create", 2, -EIO), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &hd), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[0]), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[1]), -EIO);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[1]), 0);
    assert_int_equal(B->chunk_release(ctx, h[0]), 0);
    assert_int_equal(B->chunk_release(ctx, h[1]), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, 4 * MiB, &h[0]), 0);
    assert_int_equal(B->chunk_release(ctx, h[0]), 0);

    assert_int_equal(sim_inject_fault(ctx, "chunk_create", 1, -EIO), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h[0]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[1]), -EIO);
    /* Faults come before the checks, as the driver's failures would. */
    assert_int_equal(sim_inject_fault(ctx, "host_chunk_create", 1, -ENOMEM),
                     0);
    assert_int_equal(B->host_chunk_create(ctx, 5, G, &h[1]), -ENOMEM);
    assert_int_equal(B->host_chunk_create(ctx, 5, G, &h[1]), -EINVAL);
    assert_int_equal(B->chunk_release(ctx, h[0]), 0);
    assert_int_equal(B->chunk_release(ctx, hd), 0);
    B->close(ctx);
}

/* --- streams and events ---------------------------------------------- */

struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool open, entered;
};

static void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    g->open = g->entered = false;
}

static void gate_fini(struct gate *g)
{
    pthread_cond_destroy(&g->c);
    pthread_mutex_destroy(&g->m);
}

/* Host function: blocks its stream until the test opens the gate. */
static void gate_pass(void *arg)
{
    struct gate *g = arg;

    pthread_mutex_lock(&g->m);
    g->entered = true;
    pthread_cond_broadcast(&g->c);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

static void gate_wait_entered(struct gate *g)
{
    pthread_mutex_lock(&g->m);
    while (!g->entered)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->m);
    g->open = true;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

struct probe {
    const unsigned char *a, *b;
    unsigned char seen_a, seen_b;
    int order;
    int *counter;
};

static void probe_run(void *arg)
{
    struct probe *p = arg;

    p->seen_a = p->a[100];
    p->seen_b = p->b[100];
    p->order = ++*p->counter;
}

static void test_stream_order(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    unsigned char *a, *b = malloc(4096);
    struct probe p1 = {0}, p2 = {0};
    struct gate g;
    ump_handle_t h;
    void *s;
    int counter = 0;

    (void)state;
    assert_non_null(b);
    gate_init(&g);
    /* Two granules reserved, the first one usable. */
    assert_int_equal(B->reserve(ctx, 2 * G, 0, (void **)&a), 0);
    assert_int_equal(B->chunk_create(ctx, 1, G, &h), 0);
    assert_int_equal(B->map(ctx, a, G, h), 0);
    assert_int_equal(B->set_access(ctx, a, G, (int[]){1}, 1), 0);
    memset(b, 0, 4096);
    p1.a = p2.a = a;
    p1.b = p2.b = b;
    p1.counter = p2.counter = &counter;

    assert_int_equal(B->stream_create(ctx, 1, &s), 0);
    assert_int_equal(B->host_func(ctx, s, gate_pass, &g), 0);
    assert_int_equal(B->memset_async(ctx, a, 1, 4096, s), 0);
    assert_int_equal(B->host_func(ctx, s, probe_run, &p1), 0);
    assert_int_equal(B->memcpy_async(ctx, b, a, 4096, s), 0);
    assert_int_equal(B->memset_async(ctx, a, 2, 4096, s), 0);
    assert_int_equal(B->host_func(ctx, s, probe_run, &p2), 0);
    /* Nothing after the gate ran yet. */
    gate_wait_entered(&g);
    assert_int_equal(a[100], 0);
    assert_int_equal(counter, 0);
    gate_open(&g);
    assert_int_equal(B->stream_sync(ctx, s), 0);
    assert_int_equal(p1.order, 1);
    assert_int_equal(p1.seen_a, 1);
    assert_int_equal(p1.seen_b, 0);
    assert_int_equal(p2.order, 2);
    assert_int_equal(p2.seen_a, 2);
    assert_int_equal(p2.seen_b, 1);
    assert_int_equal(b[4095], 1);
    assert_int_equal(B->stream_destroy(ctx, s), 0);

    /* Copies are checked when queued: overlap and unmapped memory. */
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    assert_int_equal(B->memcpy_async(ctx, a + 8, a, 16, s), -EINVAL);
    assert_int_equal(B->memcpy_async(ctx, b, a + G, 16, s), -EINVAL);
    assert_int_equal(B->memset_async(ctx, a + G - 8, 0, 16, s), -EINVAL);
    assert_int_equal(B->host_func(ctx, s, NULL, NULL), -EINVAL);
    assert_int_equal(B->stream_create(ctx, 2, &s), -EINVAL);
    /* Destroy waits for the queued work. */
    assert_int_equal(B->memset_async(ctx, b, 7, 4096, s), 0);
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    assert_int_equal(b[4095], 7);
    assert_int_equal(B->unmap(ctx, a, G), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->unreserve(ctx, a, 2 * G), 0);
    gate_fini(&g);
    free(b);
    B->close(ctx);
}

static void test_events(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    void *s, *s2, *ev, *ev2;
    struct gate g;

    (void)state;
    gate_init(&g);
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    assert_int_equal(B->stream_create(ctx, 0, &s2), 0);
    assert_int_equal(B->event_create(ctx, &ev), 0);
    assert_int_equal(B->event_create(ctx, &ev2), 0);
    /* Never recorded: complete. */
    assert_int_equal(B->event_query(ctx, ev), 0);
    assert_int_equal(B->event_sync(ctx, ev), 0);

    assert_int_equal(B->host_func(ctx, s, gate_pass, &g), 0);
    assert_int_equal(B->event_record(ctx, ev, s), 0);
    gate_wait_entered(&g);
    assert_int_equal(B->event_query(ctx, ev), -EAGAIN);
    assert_int_equal(B->event_query(ctx, ev), -EAGAIN);
    /* Re-recording replaces the capture: s2 is idle. */
    assert_int_equal(B->event_record(ctx, ev2, s), 0);
    assert_int_equal(B->event_query(ctx, ev2), -EAGAIN);
    assert_int_equal(B->event_record(ctx, ev2, s2), 0);
    assert_int_equal(B->event_query(ctx, ev2), 0);
    assert_int_equal(B->event_record(ctx, ev2, s), 0);
    assert_int_equal(B->event_query(ctx, ev2), -EAGAIN);
    assert_int_equal(B->event_record(ctx, ev2, NULL), 0);
    assert_int_equal(B->event_query(ctx, ev2), 0);

    gate_open(&g);
    assert_int_equal(B->event_sync(ctx, ev), 0);
    assert_int_equal(B->event_query(ctx, ev), 0);

    /* An event outlives the stream it was recorded on. */
    gate_fini(&g);
    gate_init(&g);
    assert_int_equal(B->host_func(ctx, s2, gate_pass, &g), 0);
    assert_int_equal(B->event_record(ctx, ev, s2), 0);
    gate_wait_entered(&g);
    assert_int_equal(B->event_query(ctx, ev), -EAGAIN);
    gate_open(&g);
    assert_int_equal(B->stream_destroy(ctx, s2), 0);
    assert_int_equal(B->event_query(ctx, ev), 0);

    assert_int_equal(B->event_destroy(ctx, ev2), 0);
    assert_int_equal(B->event_destroy(ctx, ev), 0);
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    gate_fini(&g);
    B->close(ctx);
}

static void set_flag(void *arg)
{
    *(int *)arg = 42;
}

static void copy_flag(void *arg)
{
    int *f = arg;
    f[1] = f[0];
}

/* A stream waits for an event of another stream (cuStreamWaitEvent): the
 * work queued after the wait runs after the work the event captured, and
 * the caller does not wait. */
static void test_stream_wait_event(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    void *s, *s2, *ev, *ev2;
    struct gate g;
    int f[2] = {0, 0};

    (void)state;
    gate_init(&g);
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    assert_int_equal(B->stream_create(ctx, 1, &s2), 0);
    assert_int_equal(B->event_create(ctx, &ev), 0);
    assert_int_equal(B->event_create(ctx, &ev2), 0);
    assert_int_equal(B->host_func(ctx, s, gate_pass, &g), 0);
    assert_int_equal(B->host_func(ctx, s, set_flag, &f[0]), 0);
    assert_int_equal(B->event_record(ctx, ev, s), 0);
    assert_int_equal(B->stream_wait_event(ctx, s2, ev), 0);
    assert_int_equal(B->host_func(ctx, s2, copy_flag, f), 0);
    /* A record after the wait does not change it (ev2: s2's own end). */
    assert_int_equal(B->event_record(ctx, ev, NULL), 0);
    assert_int_equal(B->event_record(ctx, ev2, s2), 0);
    gate_wait_entered(&g);
    usleep(20000);
    assert_int_equal(B->event_query(ctx, ev2), -EAGAIN); /* held back */
    assert_int_equal(f[1], 0);
    gate_open(&g);
    assert_int_equal(B->stream_sync(ctx, s2), 0);
    assert_int_equal(f[1], 42);
    /* Never recorded, or on the waiting stream itself: no wait; on the
     * default stream, the caller waits. */
    void *ev3;
    assert_int_equal(B->event_create(ctx, &ev3), 0);
    assert_int_equal(B->stream_wait_event(ctx, s2, ev3), 0);
    assert_int_equal(B->event_record(ctx, ev3, s2), 0);
    assert_int_equal(B->stream_wait_event(ctx, s2, ev3), 0);
    assert_int_equal(B->event_record(ctx, ev3, s), 0);
    assert_int_equal(B->stream_wait_event(ctx, NULL, ev3), 0);
    assert_int_equal(B->event_query(ctx, ev3), 0);
    assert_int_equal(B->stream_sync(ctx, s2), 0);
    /* Bad handles. */
    assert_int_equal(B->stream_wait_event(ctx, s2, NULL), -EINVAL);
    assert_int_equal(B->stream_wait_event(ctx, s2, f), -EINVAL);
    assert_int_equal(B->stream_wait_event(ctx, f, ev), -EINVAL);
    /* The waited stream destroyed first: the event keeps it. */
    gate_fini(&g);
    gate_init(&g);
    assert_int_equal(B->host_func(ctx, s, gate_pass, &g), 0);
    assert_int_equal(B->event_record(ctx, ev, s), 0);
    assert_int_equal(B->stream_wait_event(ctx, s2, ev), 0);
    f[1] = 0;
    assert_int_equal(B->host_func(ctx, s2, copy_flag, f), 0);
    gate_wait_entered(&g);
    gate_open(&g);
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    assert_int_equal(B->stream_sync(ctx, s2), 0);
    assert_int_equal(f[1], 42);
    assert_int_equal(B->event_destroy(ctx, ev3), 0);
    assert_int_equal(B->event_destroy(ctx, ev2), 0);
    assert_int_equal(B->event_destroy(ctx, ev), 0);
    assert_int_equal(B->stream_destroy(ctx, s2), 0);
    gate_fini(&g);
    B->close(ctx);
}

static void test_default_stream(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    char src[64], dst[64];
    int flag = 0;
    void *ev;

    (void)state;
    memset(src, 3, sizeof(src));
    memset(dst, 0, sizeof(dst));
    /* Stream NULL runs before the call returns. */
    assert_int_equal(B->memcpy_async(ctx, dst, src, sizeof(dst), NULL), 0);
    assert_memory_equal(dst, src, sizeof(dst));
    assert_int_equal(B->memset_async(ctx, dst, 9, 10, NULL), 0);
    assert_int_equal(dst[9], 9);
    assert_int_equal(dst[10], 3);
    assert_int_equal(B->host_func(ctx, NULL, set_flag, &flag), 0);
    assert_int_equal(flag, 42);
    assert_int_equal(B->stream_sync(ctx, NULL), 0);
    assert_int_equal(B->stream_destroy(ctx, NULL), -EINVAL);
    assert_int_equal(B->event_create(ctx, &ev), 0);
    assert_int_equal(B->event_record(ctx, ev, NULL), 0);
    assert_int_equal(B->event_query(ctx, ev), 0);
    assert_int_equal(B->event_destroy(ctx, ev), 0);
    B->close(ctx);
}

struct reentry {
    void *ctx;
    int create_err, sync_err;
};

static void call_backend(void *arg)
{
    struct reentry *r = arg;
    ump_handle_t h;

    r->create_err = B->chunk_create(r->ctx, 0, G, &h);
    r->sync_err = B->stream_sync(r->ctx, NULL);
}

static void test_host_func_no_backend(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    struct reentry r = {ctx, 0, 0};
    ump_handle_t h;
    void *s;

    (void)state;
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    assert_int_equal(B->host_func(ctx, s, call_backend, &r), 0);
    assert_int_equal(B->stream_sync(ctx, s), 0);
    assert_int_equal(r.create_err, -EPERM);
    assert_int_equal(r.sync_err, -EPERM);
    /* The flag is per call: the default stream and this thread are fine. */
    r.create_err = r.sync_err = 1;
    assert_int_equal(B->host_func(ctx, NULL, call_backend, &r), 0);
    assert_int_equal(r.create_err, -EPERM);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h), 0);
    assert_int_equal(B->chunk_release(ctx, h), 0);
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    B->close(ctx);
}

static void test_fault_injection(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    int dev = 0;
    ump_handle_t h[3];
    char *va, *va2;

    (void)state;
    assert_int_equal(sim_inject_fault(ctx, "nonsense", 1, -EIO), -EINVAL);
    assert_int_equal(sim_inject_fault(ctx, "map", -1, -EIO), -EINVAL);
    assert_int_equal(sim_inject_fault(ctx, "map", 1, EIO), -EINVAL);

    /* reserve: the second call fails, without reserving anything. */
    assert_int_equal(sim_inject_fault(ctx, "reserve", 2, -ENOMEM), 0);
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&va), 0);
    va2 = NULL;
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&va2), -ENOMEM);
    assert_null(va2);
    assert_int_equal(B->reserve(ctx, 4 * G, 0, (void **)&va2), 0);
    assert_int_equal(B->unreserve(ctx, va2, 4 * G), 0);

    /* chunk_create: no capacity is used by the failed call. */
    assert_int_equal(sim_inject_fault(ctx, "chunk_create", 1, -EIO), 0);
    assert_int_equal(B->chunk_create(ctx, 0, 32 * G, &h[0]), -EIO);
    assert_int_equal(B->chunk_create(ctx, 0, 32 * G, &h[0]), 0);
    assert_int_equal(B->chunk_release(ctx, h[0]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[0]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[1]), 0);

    /* map */
    assert_int_equal(sim_inject_fault(ctx, "map", 1, -EIO), 0);
    assert_int_equal(B->map(ctx, va, G, h[0]), -EIO);
    assert_int_equal(B->map(ctx, va, G, h[0]), 0);
    assert_int_equal(B->map(ctx, va + G, G, h[1]), 0);

    /* set_access: still inaccessible after the failure */
    assert_int_equal(sim_inject_fault(ctx, "set_access", 1, -EPERM), 0);
    assert_int_equal(B->set_access(ctx, va, 2 * G, &dev, 1), -EPERM);
    assert_prot(va, "---s");
    assert_int_equal(B->set_access(ctx, va, 2 * G, &dev, 1), 0);
    assert_prot(va, "rw-s");

    /* unmap: still mapped after the failure */
    assert_int_equal(sim_inject_fault(ctx, "unmap", 1, -EIO), 0);
    assert_int_equal(B->unmap(ctx, va, G), -EIO);
    va[0] = 1;
    assert_int_equal(B->unmap(ctx, va, G), 0);

    /* nth 0 clears a pending fault. */
    assert_int_equal(sim_inject_fault(ctx, "unmap", 1, -EIO), 0);
    assert_int_equal(sim_inject_fault(ctx, "unmap", 0, 0), 0);
    assert_int_equal(B->unmap(ctx, va + G, G), 0);
    /* A fault counts only calls of its own operation. */
    assert_int_equal(sim_inject_fault(ctx, "chunk_create", 2, -EIO), 0);
    assert_int_equal(B->map(ctx, va, G, h[0]), 0);
    assert_int_equal(B->unmap(ctx, va, G), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[2]), 0);
    assert_int_equal(B->chunk_create(ctx, 0, G, &h[2]), -EIO);

    assert_int_equal(B->chunk_release(ctx, h[0]), 0);
    assert_int_equal(B->chunk_release(ctx, h[1]), 0);
    assert_int_equal(B->unreserve(ctx, va, 4 * G), 0);
    B->close(ctx);
}

/* close frees whatever the caller left behind (ASan reports leaks). */
static void never_run(void *arg)
{
    *(int *)arg = 1;
}

/* Stream handles are looked up in their context before they are touched:
 * another context's stream, a destroyed one and a made-up pointer are
 * -EINVAL everywhere (destroying another context's stream used to return 0
 * and unlink it from the wrong list; a destroyed one used to be read). */
static void test_stream_handles(void **state)
{
    struct ump_topology topo, topo2;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    void *ctx2 = open_sim(1, 64 * MiB, &topo2);
    char buf[64], junk[64];
    void *s, *s2, *ev;
    int ran = 0;

    (void)state;
    memset(junk, 0, sizeof(junk));
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    assert_int_equal(B->stream_create(ctx2, 0, &s2), 0);
    assert_int_equal(B->event_create(ctx2, &ev), 0);

    /* s is ctx's, not ctx2's. */
    assert_int_equal(B->stream_destroy(ctx2, s), -EINVAL);
    assert_int_equal(B->stream_sync(ctx2, s), -EINVAL);
    assert_int_equal(B->memcpy_async(ctx2, buf, junk, 8, s), -EINVAL);
    assert_int_equal(B->memset_async(ctx2, buf, 0, 8, s), -EINVAL);
    assert_int_equal(B->host_func(ctx2, s, never_run, &ran), -EINVAL);
    assert_int_equal(B->event_record(ctx2, ev, s), -EINVAL);
    /* ... and still works in ctx. */
    assert_int_equal(B->memset_async(ctx, buf, 5, sizeof(buf), s), 0);
    assert_int_equal(B->stream_sync(ctx, s), 0);
    assert_int_equal(buf[63], 5);

    /* Destroyed: refused, never read. */
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    assert_int_equal(B->stream_destroy(ctx, s), -EINVAL);
    assert_int_equal(B->stream_sync(ctx, s), -EINVAL);
    assert_int_equal(B->memcpy_async(ctx, buf, junk, 8, s), -EINVAL);
    assert_int_equal(B->memset_async(ctx, buf, 0, 8, s), -EINVAL);
    assert_int_equal(B->host_func(ctx, s, never_run, &ran), -EINVAL);

    /* Made up. */
    assert_int_equal(B->stream_destroy(ctx, junk), -EINVAL);
    assert_int_equal(B->stream_sync(ctx, junk), -EINVAL);
    assert_int_equal(B->event_record(ctx2, ev, junk), -EINVAL);

    /* ctx2 kept its stream through all of it. */
    assert_int_equal(B->event_record(ctx2, ev, s2), 0);
    assert_int_equal(B->event_sync(ctx2, ev), 0);
    assert_int_equal(B->event_destroy(ctx2, ev), 0);
    assert_int_equal(B->stream_destroy(ctx2, s2), 0);
    assert_int_equal(ran, 0);
    B->close(ctx2);
    B->close(ctx);
}

static void test_close_with_leftovers(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(2, 64 * MiB, &topo);
    ump_handle_t h, h2;
    void *s, *ev;
    char *va, *hva;

    (void)state;
    va = map_new(ctx, 0, 2 * G, &h);
    assert_int_equal(B->chunk_create(ctx, 1, G, &h2), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h2), 0);
    assert_int_equal(B->reserve(ctx, 2 * G, 0, (void **)&hva), 0);
    assert_int_equal(B->map(ctx, hva + G, G, h2), 0);
    assert_int_equal(B->set_access_host(ctx, hva + G, G, (int[]){0}, 1), 0);
    hva[G] = 1;
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &h2), 0);
    assert_int_equal(B->stream_create(ctx, 1, &s), 0);
    assert_int_equal(B->event_create(ctx, &ev), 0);
    assert_int_equal(B->memset_async(ctx, va, 1, 2 * G, s), 0);
    assert_int_equal(B->event_record(ctx, ev, s), 0);
    B->close(ctx);
    assert_prot(va, "");
    assert_prot(hva + G, "");
}

static void test_close_in_child(void **state)
{
    struct ump_topology topo;
    void *ctx = open_sim(1, 64 * MiB, &topo);
    ump_handle_t h, hh;
    int status;
    pid_t pid;
    void *s;
    char *va, *hva;

    (void)state;
    va = map_new(ctx, 0, G, &h);
    assert_int_equal(B->reserve(ctx, G, 0, (void **)&hva), 0);
    assert_int_equal(B->host_chunk_create(ctx, 0, G, &hh), 0);
    assert_int_equal(B->map(ctx, hva, G, hh), 0);
    assert_int_equal(B->set_access_host(ctx, hva, G, (int[]){0}, 1), 0);
    assert_int_equal(B->stream_create(ctx, 0, &s), 0);
    va[0] = 5;
    hva[0] = 6;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char perms[5], hperms[5];

        B->close_in_child(ctx);
        prot_of(va, perms);
        prot_of(hva, hperms);
        _exit(perms[0] == '\0' && hperms[0] == '\0' ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent still has everything. */
    assert_int_equal(va[0], 5);
    assert_int_equal(hva[0], 6);
    assert_int_equal(B->stream_destroy(ctx, s), 0);
    unmap_free(ctx, va, G, h);
    unmap_free(ctx, hva, G, hh);
    B->close(ctx);
}

/* A device chunk exported by one context is imported by another process
 * (a forked child, which opens a context of its own) and by another
 * context of this one: both map the exporter's bytes, and writes go both
 * ways. An import is not counted in the importer's capacity, holds one
 * descriptor until released, and a failure of the importer's device does
 * not poison the exporter's memory. */
static void test_chunk_export_import(void **state)
{
    struct ump_topology topo;
    void *a = open_sim(2, 8 * MiB, &topo), *b = open_sim(2, 4 * MiB, &topo);
    int devs[2] = {0, 1}, fd, status;
    ump_handle_t h, hb, hb2;
    uint64_t off;
    char *va, *vb;
    pid_t pid;

    (void)state;
    /* A chunk after another, so that its extent is not at offset 0. */
    ump_handle_t pad;
    assert_int_equal(B->chunk_create(a, 1, G, &pad), 0);
    va = map_new(a, 1, 2 * G, &h);
    for (size_t i = 0; i < 2 * G; i++)
        va[i] = (char)(i * 7 + 3);
    assert_int_equal(B->chunk_export(a, h, &fd, &off), 0);
    assert_true(fd >= 0);
    assert_int_equal(off, G);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* another process, with a context of its own */
        struct ump_topology t2;
        struct ump_config cfg;
        void *c = NULL, *v, *s;
        ump_handle_t hc;
        int bad = 0;

        memset(&cfg, 0, sizeof(cfg));
        cfg.sim_devices = 2;
        cfg.sim_device_mem = 4 * MiB;
        if (B->open(&cfg, &t2, &c) || B->reserve(c, 2 * G, 0, &v) ||
            B->chunk_import(c, fd, off, 2 * G, 1, &hc) ||
            B->map(c, v, 2 * G, hc) || B->set_access(c, v, 2 * G, devs, 2) ||
            B->stream_create(c, 0, &s))
            _exit(2);
        for (size_t i = 0; i < 2 * G; i += 4093)
            bad += ((char *)v)[i] != (char)(i * 7 + 3);
        /* Written by a stream's copy (no window of its own here) and by
         * the CPU: the exporter sees both. */
        static const char mark[] = "from the child";
        if (B->memcpy_async(c, (char *)v + 100, mark, sizeof(mark), s) ||
            B->stream_sync(c, s))
            _exit(3);
        ((char *)v)[2 * G - 1] = 42;
        _exit(bad ? 1 : 0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_string_equal(va + 100, "from the child");
    assert_int_equal(va[2 * G - 1], 42);

    /* Bad imports: another device's memory, a file that is no device's
     * memory, extents out of bounds or unaligned. Nothing is held. */
    int before = open_fds();
    int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(other >= 0);
    assert_int_equal(B->chunk_import(b, fd, off, 2 * G, 0, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, other, 0, 2 * G, 1, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, fd, off + 1, 2 * G, 1, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, fd, off, G + 1, 1, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, fd, off, 0, 1, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, fd, 8 * MiB - G, 2 * G, 1, &hb),
                     -EINVAL);
    assert_int_equal(B->chunk_import(b, fd, off, 2 * G, 2, &hb), -EINVAL);
    assert_int_equal(B->chunk_import(b, -1, off, 2 * G, 1, &hb), -EINVAL);
    close(other);
    assert_int_equal(open_fds(), before);
    /* Bad exports: a released chunk, no chunk, a host chunk. */
    int fd2;
    uint64_t off2;
    assert_int_equal(B->chunk_release(a, pad), 0);
    assert_int_equal(B->chunk_export(a, pad, &fd2, &off2), -EINVAL);
    assert_int_equal(B->chunk_export(a, (ump_handle_t)12345, &fd2, &off2),
                     -EINVAL);
    assert_int_equal(B->chunk_export(a, h, NULL, &off2), -EINVAL);
    assert_int_equal(open_fds(), before);

    /* Another context of this process: its device stays free for its own
     * chunks (4 MiB each), and the import holds a descriptor until it is
     * released and unmapped. */
    assert_int_equal(B->reserve(b, 2 * G, 0, (void **)&vb), 0);
    assert_int_equal(B->chunk_import(b, fd, off, 2 * G, 1, &hb), 0);
    close(fd); /* the import keeps its own in place of it */
    assert_int_equal(open_fds(), before);
    assert_int_equal(B->map(b, vb, 2 * G, hb), 0);
    assert_int_equal(B->set_access(b, vb, 2 * G, &devs[1], 1), 0);
    assert_int_equal(vb[5], (char)(5 * 7 + 3));
    vb[6] = 9;
    assert_int_equal(va[6], 9);
    assert_int_equal(B->chunk_create(b, 1, 4 * MiB, &hb2), 0);
    assert_int_equal(B->chunk_release(b, hb2), 0);
    /* Re-exported from the importer: the same memory. */
    assert_int_equal(B->chunk_export(b, hb, &fd2, &off2), 0);
    assert_int_equal(off2, off);
    close(fd2);
    /* The importer's device fails: its own memory is poisoned, not the
     * exporter's. */
    assert_int_equal(sim_fail_device(b, 1, 0), 0);
    assert_int_equal(va[7], (char)(7 * 7 + 3));
    assert_int_equal(B->chunk_export(b, hb, &fd2, &off2), -EIO);
    assert_int_equal(B->chunk_release(b, hb), 0);
    assert_int_equal(open_fds(), before); /* the mapping holds it */
    assert_int_equal(B->unmap(b, vb, 2 * G), 0);
    assert_int_equal(open_fds(), before - 1);
    assert_int_equal(B->unreserve(b, vb, 2 * G), 0);
    B->close(b);
    unmap_free(a, va, 2 * G, h);
    B->close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_uniform),
        cmocka_unit_test(test_open_mem_override),
        cmocka_unit_test(test_open_topology),
        cmocka_unit_test(test_map_access_unmap),
        cmocka_unit_test(test_driver_costs),
        cmocka_unit_test(test_two_views),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_strictness),
        cmocka_unit_test(test_release_while_mapped),
        cmocka_unit_test(test_punch_hole),
        cmocka_unit_test(test_reserve_alignment),
        cmocka_unit_test(test_reserve_at_round_trip),
        cmocka_unit_test(test_reserve_at_taken),
        cmocka_unit_test(test_reserve_at_bad_args),
        cmocka_unit_test(test_many_mappings),
        cmocka_unit_test(test_host_chunks),
        cmocka_unit_test(test_host_capacity),
        cmocka_unit_test(test_host_default_limit),
        cmocka_unit_test(test_host_numa),
        cmocka_unit_test(test_host_fault),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_stream_wait_event),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_default_stream),
        cmocka_unit_test(test_host_func_no_backend),
        cmocka_unit_test(test_stream_handles),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_close_with_leftovers),
        cmocka_unit_test(test_close_in_child),
        cmocka_unit_test(test_chunk_export_import),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
