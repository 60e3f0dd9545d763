/*
 * Peer mappings on a real machine: every chunk is mapped for every device
 * that can reach it, so a kernel on device j reads and writes memory on
 * device i through the pool's pointer, and one allocation spanning devices
 * is usable whole from each of them. With one GPU only the self case runs
 * and the rest reports SKIP. SKIP without a GPU.
 */
#include "config.h"

#include "gpu_util.h"

#define CONF "backend:cuda,device_mem:256M"
#define BUF (4 * TU_MIB)
#define MAX_DEV 64

struct fixture {
    ump_pool_t *pool;
    int ndev;
    ump_stream_t s[MAX_DEV];
    int rt[MAX_DEV];              /* runtime ordinal of each pool device */
    struct gk_result *res[MAX_DEV]; /* one result block per device */
};

static int setup(void **state)
{
    static struct fixture f;
    if (ump_pool_create(CONF, &f.pool) != 0)
        return -1;
    f.ndev = ump_device_count(f.pool);
    if (f.ndev < 1 || f.ndev > MAX_DEV)
        return -1;
    for (int d = 0; d < f.ndev; d++) {
        ump_hints_t h = tu_hints(d);
        if (ump_stream_create(f.pool, d, &f.s[d]) != 0)
            return -1;
        f.rt[d] = gpu_rt_device(f.pool, d);
        if (ump_alloc(f.pool, sizeof(*f.res[d]), &h, (void **)&f.res[d]))
            return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = 0;
    for (int d = 0; d < f->ndev; d++) {
        rc |= ump_stream_synchronize(f->pool, f->s[d]);
        rc |= ump_free(f->pool, f->res[d]);
        rc |= ump_stream_destroy(f->pool, f->s[d]);
    }
    rc |= ump_pool_destroy(f->pool);
    return rc ? -1 : 0;
}

/* Checks [p, p + n) against seed's pattern with a kernel on device d. */
static void check_from(struct fixture *f, int d, const void *p, size_t n,
                       uint64_t seed)
{
    gpu_assert_pattern(f->pool, f->rt[d], f->s[d], f->res[d], p, n, seed);
}

/* The device's own memory, from the device (runs with one GPU too). */
static void test_self(void **state)
{
    struct fixture *f = *state;
    for (int d = 0; d < f->ndev; d++) {
        ump_link_props_t lp;
        ump_ok(ump_link_props(f->pool, d, d, &lp));
        assert_int_equal(lp.kind, UMP_LINK_SELF);
        assert_true(lp.peer);
        void *p = tu_alloc(f->pool, BUF, d);
        assert_int_equal(tu_info(f->pool, p).device, d);
        gpu_ok(gk_fill(f->rt[d], f->s[d], p, BUF, 1));
        check_from(f, d, p, BUF, 1);
        tu_free(f->pool, p);
    }
}

/* For every ordered pair (j, i) with peer access: a kernel on j reads what
 * i wrote into i's memory, then writes it, and i reads that back. The
 * pool's peer flag agrees with the runtime's. */
static void test_peer_pairs(void **state)
{
    struct fixture *f = *state;
    static void *buf[MAX_DEV];
    int pairs = 0, no_peer = 0;

    if (f->ndev < 2) {
        print_message("one GPU: no peer to map\n");
        skip();
    }
    for (int i = 0; i < f->ndev; i++) {
        buf[i] = tu_alloc(f->pool, BUF, i);
        assert_int_equal(tu_info(f->pool, buf[i]).device, i);
    }
    for (int i = 0; i < f->ndev; i++) {
        for (int j = 0; j < f->ndev; j++) {
            ump_link_props_t lp;
            bool rt_peer = false;
            if (i == j)
                continue;
            ump_ok(ump_link_props(f->pool, j, i, &lp));
            gpu_ok(gk_can_access_peer(f->rt[j], f->rt[i], &rt_peer));
            if (lp.peer != rt_peer)
                fail_msg("ump_link_props(%d, %d).peer = %d, the runtime "
                         "says %d", j, i, lp.peer, rt_peer);
            if (!lp.peer) {
                no_peer++;
                continue;
            }
            uint64_t s1 = 100 + (uint64_t)(i * MAX_DEV + j), s2 = s1 + 50000;
            gpu_ok(gk_fill(f->rt[i], f->s[i], buf[i], BUF, s1));
            ump_ok(ump_stream_synchronize(f->pool, f->s[i]));
            check_from(f, j, buf[i], BUF, s1);
            gpu_ok(gk_fill(f->rt[j], f->s[j], buf[i], BUF, s2));
            ump_ok(ump_stream_synchronize(f->pool, f->s[j]));
            check_from(f, i, buf[i], BUF, s2);
            pairs++;
        }
    }
    print_message("%d device pairs with peer access checked, %d without\n",
                  pairs, no_peer);
    for (int i = 0; i < f->ndev; i++)
        tu_free(f->pool, buf[i]);
    if (pairs == 0)
        skip(); /* no two devices can reach each other: nothing mapped */
}

/* One allocation larger than a device spans two (the pool spills only to
 * devices the requesting one reaches); a kernel on each device that reaches
 * all of them writes and reads it whole. */
static void test_spanning(void **state)
{
    struct fixture *f = *state;
    int checked = 0, peers = 0;

    for (int e = 1; e < f->ndev; e++) {
        ump_link_props_t lp;
        ump_ok(ump_link_props(f->pool, 0, e, &lp));
        peers += lp.peer;
    }
    if (peers == 0) {
        print_message("device 0 has no peer: nothing to span\n");
        skip();
    }
    size_t cap = tu_stats(f->pool, 0).capacity;
    size_t n = cap + 64 * TU_MIB;
    void *p = tu_alloc(f->pool, n, 0);
    int first = tu_info(f->pool, p).device;
    int last = tu_info(f->pool, (char *)p + n - 1).device;
    assert_int_equal(first, 0);
    assert_int_not_equal(last, 0);
    for (int d = 0; d < f->ndev; d++) {
        bool all = true;
        for (int e = 0; e < f->ndev; e++) {
            ump_link_props_t lp;
            ump_ok(ump_link_props(f->pool, d, e, &lp));
            all = all && lp.peer;
        }
        if (!all)
            continue;
        uint64_t seed = 7000 + (uint64_t)d;
        gpu_ok(gk_fill(f->rt[d], f->s[d], p, n, seed));
        check_from(f, d, p, n, seed);
        checked++;
    }
    tu_free(f->pool, p);
    print_message("%d devices used the spanning allocation\n", checked);
    if (checked == 0)
        skip();
}

int main(void)
{
    gpu_require("test_gpu_peer");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_peer_pairs),
        cmocka_unit_test(test_spanning),
    };
    return cmocka_run_group_tests_name("gpu_peer", tests, setup, teardown);
}
