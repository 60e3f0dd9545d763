/*
 * The driver's cost table (topo/drivercost): the H200's measured points of
 * DESIGN.md and of issue 29's probe come back exactly; device handles'
 * sizes between them are interpolated in log2(size) and stay flat beyond
 * them, host handles' are linear in the bytes. The sim's modeled driver
 * time and its timed mode, the allocator's remap-or-create choice and the
 * bench's baselines read it, so its numbers are pinned here.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "topo/drivercost.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* The measured points, and the table's choice of the middle of a range. */
static void test_measured_points(void **state)
{
    (void)state;
    assert_int_equal(drvcost_ns(DRV_CREATE, 2 * MiB), 13500);
    assert_int_equal(drvcost_ns(DRV_CREATE, 64 * MiB), 39000);
    assert_int_equal(drvcost_ns(DRV_CREATE, GiB), 28000);
    assert_int_equal(drvcost_ns(DRV_MAP, 2 * MiB), 1300);       /* 1-1.6 us */
    assert_int_equal(drvcost_ns(DRV_SET_ACCESS, 2 * MiB), 33000); /* 28-38 */
    assert_int_equal(drvcost_ns(DRV_SET_ACCESS, GiB), 86000);
    assert_int_equal(drvcost_ns(DRV_UNMAP, 2 * MiB), 21500);    /* 19-24 */
    assert_int_equal(drvcost_ns(DRV_RELEASE, 2 * MiB), 15000);  /* 14-16 */
}

/* Linear in log2(size) between two points: 8 MiB is 2/5 of the way from
 * 2 MiB to 64 MiB, 256 MiB half way from 64 MiB to 1 GiB, and 3 MiB half
 * way from 2 MiB to 4 MiB (the bits below the top one, linearly). */
static void test_interpolation(void **state)
{
    (void)state;
    assert_int_equal(drvcost_ns(DRV_CREATE, 8 * MiB),
                     13500 + (39000 - 13500) * 2 / 5);
    assert_int_equal(drvcost_ns(DRV_CREATE, 256 * MiB),
                     39000 - (39000 - 28000) / 2);
    assert_int_equal(drvcost_ns(DRV_CREATE, 3 * MiB),
                     13500 + (39000 - 13500) / 10);
    /* 32 MiB: 4/9 of the way from 2 MiB to 1 GiB, rounded down. */
    assert_int_equal(drvcost_ns(DRV_SET_ACCESS, 32 * MiB),
                     33000 + (86000 - 33000) * 4 / 9);
}

/* Creating a handle costs more the larger it is up to 64 MiB (the
 * measurements rise from 13.5 to 39 us), at every granule in between. */
static void test_monotone(void **state)
{
    (void)state;
    uint64_t prev = drvcost_ns(DRV_CREATE, 2 * MiB);
    for (size_t s = 4 * MiB; s <= 64 * MiB; s += 2 * MiB) {
        uint64_t c = drvcost_ns(DRV_CREATE, s);
        assert_true(c >= prev);
        prev = c;
    }
    assert_int_equal(prev, 39000);
    /* set access only rises from 2 MiB to 1 GiB */
    prev = drvcost_ns(DRV_SET_ACCESS, 2 * MiB);
    for (size_t s = 4 * MiB; s <= GiB; s *= 2) {
        uint64_t c = drvcost_ns(DRV_SET_ACCESS, s);
        assert_true(c > prev);
        prev = c;
    }
}

/* Beyond the measured sizes the nearest point holds; unmap, release and
 * map were measured at one size and cost the same at every size. */
static void test_flat_outside(void **state)
{
    (void)state;
    assert_int_equal(drvcost_ns(DRV_CREATE, 64 * KiB), 13500);
    assert_int_equal(drvcost_ns(DRV_CREATE, 1), 13500);
    assert_int_equal(drvcost_ns(DRV_CREATE, 0), 13500);
    assert_int_equal(drvcost_ns(DRV_CREATE, 4 * GiB), 28000);
    assert_int_equal(drvcost_ns(DRV_SET_ACCESS, 64 * GiB), 86000);
    for (size_t s = 64 * KiB; s <= 64 * GiB; s *= 8) {
        assert_int_equal(drvcost_ns(DRV_MAP, s), 1300);
        assert_int_equal(drvcost_ns(DRV_UNMAP, s), 21500);
        assert_int_equal(drvcost_ns(DRV_RELEASE, s), 15000);
    }
    assert_int_equal(drvcost_ns(DRV_NOPS, 2 * MiB), 0);
}

/* The sums the allocator and the sim use. */
static void test_sums(void **state)
{
    (void)state;
    assert_int_equal(drvcost_create_ns(2 * MiB), 13500 + 1300 + 33000);
    assert_int_equal(drvcost_create_ns(GiB), 28000 + 1300 + 86000);
    assert_int_equal(drvcost_remap_ns(2 * MiB), 21500 + 1300 + 33000);
    assert_int_equal(drvcost_drop_ns(GiB), 21500 + 15000);
    /* Why max_chunk is large: one 1 GiB handle is made usable for a
     * fraction of what 512 handles of 2 MiB cost. */
    assert_true(drvcost_create_ns(GiB) * 100 < 512 * drvcost_create_ns(2 * MiB));
}

/* Host handles: the probe's points and DESIGN.md's come back exactly,
 * and the two points solved from umpool's own H200 run. */
static void test_host_points(void **state)
{
    (void)state;
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 2 * MiB), 506000);
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 64 * MiB), 22000000);
    assert_int_equal(drvcost_host_ns(DRV_CREATE, GiB), 336000000);
    assert_int_equal(drvcost_host_ns(DRV_RELEASE, 2 * MiB), 73500);
    assert_int_equal(drvcost_host_ns(DRV_RELEASE, GiB), 31000000);
    assert_int_equal(drvcost_host_ns(DRV_SET_ACCESS_CPU, 2 * MiB), 164000);
    assert_int_equal(drvcost_host_ns(DRV_SET_ACCESS_CPU, GiB), 35000000);
    /* the probe's unmap + map of 26.9 us, less the map */
    assert_int_equal(drvcost_host_ns(DRV_UNMAP, 2 * MiB) +
                         drvcost_host_ns(DRV_MAP, 2 * MiB), 26900);
    assert_int_equal(drvcost_host_ns(DRV_UNMAP, GiB), 22400000);
    /* 84 ms for 1 GiB of 2 MiB handles in one call */
    assert_int_equal(512 * drvcost_host_ns(DRV_SET_ACCESS_CPU, 2 * MiB) /
                         1000000, 83);
}

/* Linear in the bytes between points, the last slope beyond, flat below
 * the granularity; map and device-only access as for device handles. */
static void test_host_interpolation(void **state)
{
    (void)state;
    /* 32 MiB: (32768 - 2048) / (65536 - 2048) KiB of the way */
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 32 * MiB),
                     506000 + (uint64_t)(22000000 - 506000) * 30720 / 63488);
    /* 512 MiB: between 64 MiB and 1 GiB */
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 512 * MiB),
                     22000000 + (uint64_t)(336000000 - 22000000) * 458752 /
                                    983040);
    /* 2 GiB: the 64 MiB..1 GiB rate per byte goes on */
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 2 * GiB),
                     336000000 + (uint64_t)(336000000 - 22000000) * 1048576 /
                                     983040);
    assert_int_equal(drvcost_host_ns(DRV_RELEASE, 2 * GiB),
                     73500 + (uint64_t)(31000000 - 73500) * 2095104 /
                                 1046528);
    /* 256 MiB set access with the CPU: a quarter of the way, nearly */
    assert_int_equal(drvcost_host_ns(DRV_SET_ACCESS_CPU, 256 * MiB),
                     164000 + (uint64_t)(35000000 - 164000) * 260096 /
                                  1046528);
    /* below the granularity: flat */
    assert_int_equal(drvcost_host_ns(DRV_CREATE, 64 * KiB), 506000);
    assert_int_equal(drvcost_host_ns(DRV_UNMAP, 0), 25600);
    for (size_t s = 2 * MiB; s <= 4 * GiB; s *= 4) {
        assert_int_equal(drvcost_host_ns(DRV_MAP, s), 1300);
        assert_int_equal(drvcost_host_ns(DRV_SET_ACCESS, s),
                         drvcost_ns(DRV_SET_ACCESS, s));
        /* no CPU mapping for a device handle */
        assert_int_equal(drvcost_ns(DRV_SET_ACCESS_CPU, s),
                         drvcost_ns(DRV_SET_ACCESS, s));
    }
    assert_int_equal(drvcost_host_ns(DRV_NOPS, 2 * MiB), 0);
}

/* Host handles cost by the byte: more for every granule more, never less
 * per byte for a handle of a quarter of the size; and more than a device
 * handle of the same size, whose cost is the driver's bookkeeping. */
static void test_host_vs_device(void **state)
{
    (void)state;
    static const enum drv_op ops[] = {DRV_CREATE, DRV_UNMAP, DRV_RELEASE,
                                      DRV_SET_ACCESS_CPU};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        uint64_t prev = drvcost_host_ns(ops[i], 2 * MiB);
        for (size_t s = 4 * MiB; s <= 2 * GiB; s += 2 * MiB) {
            uint64_t c = drvcost_host_ns(ops[i], s);
            assert_true(c > prev);
            prev = c;
        }
        for (size_t s = 8 * MiB; s <= 4 * GiB; s *= 2)
            assert_true(drvcost_host_ns(ops[i], s) >=
                        drvcost_host_ns(ops[i], s / 4));
        for (size_t s = 2 * MiB; s <= 4 * GiB; s *= 2)
            assert_true(drvcost_host_ns(ops[i], s) >
                        drvcost_ns(ops[i] == DRV_SET_ACCESS_CPU
                                       ? DRV_SET_ACCESS : ops[i], s));
    }
}

/* The costs that are not per handle, and bytes at a rate. */
static void test_misc(void **state)
{
    (void)state;
    const struct drvcost_misc *m = &drvcost_h200;
    assert_int_equal(m->reserve_ns, 15000);
    assert_int_equal(m->sync_ns, 300);
    /* a small copy and its sync: 8-10 us */
    uint64_t small = m->copy_lat_ns + m->copy_gap_ns +
                     drvcost_bytes_ns(32 * KiB, m->local_gbs / 2) +
                     m->sync_ns;
    assert_true(small >= 8000 && small <= 10000);
    /* 1 GiB at 54 GB/s; in 2 MiB pieces, one gap each: 52 GB/s */
    assert_int_equal(drvcost_bytes_ns(GiB, m->host_vmm_gbs), 19884108);
    double piece = (double)(drvcost_bytes_ns(2 * MiB, m->host_vmm_gbs) +
                            m->copy_gap_ns);
    assert_true((double)(2 * MiB) / piece > 51.9 &&
                (double)(2 * MiB) / piece < 52.1);
    assert_true(m->pinned_gbs > 55.1 && m->pinned_gbs < 55.3);
    assert_true(m->pageable_gbs > 6.8 && m->pageable_gbs < 7.0);
    assert_true(m->local_gbs > 3899 && m->local_gbs < 3901);
    /* cuMemHostRegister of 1 GiB: 38.8 ms */
    assert_true(drvcost_bytes_ns(GiB, m->register_gbs) / 100000 == 387);
    assert_int_equal(drvcost_bytes_ns(GiB, 0), 0);
    assert_int_equal(drvcost_bytes_ns(0, 54), 0);
}

/* The two points solved from umpool's H200 run give its figures back, by
 * the calls its moves of 1 GiB make (one device handle, one host handle):
 * ump_evict to the host 9.55 GB/s, ump_acquire from it 25.25 GB/s, the
 * middles of 8.7-10.4 and 23.4-27.1. A change to any of these costs shows
 * here as a change of what the model says the moves take. */
static void test_moves_on_h200(void **state)
{
    (void)state;
    const struct drvcost_misc *m = &drvcost_h200;
    uint64_t copy = m->copy_lat_ns + m->copy_gap_ns +
                    drvcost_bytes_ns(GiB, m->host_vmm_gbs) + m->sync_ns;
    /* map host at staging + access, copy, unmap device, map host + access
     * at the allocation's address, unmap the staging mapping */
    uint64_t down = 2 * (drvcost_host_ns(DRV_MAP, GiB) +
                         drvcost_host_ns(DRV_SET_ACCESS_CPU, GiB)) +
                    copy + drvcost_ns(DRV_UNMAP, GiB) +
                    drvcost_host_ns(DRV_UNMAP, GiB);
    /* map device at staging + access, copy, unmap host, map device +
     * access at the address, unmap the staging mapping */
    uint64_t up = 2 * (drvcost_ns(DRV_MAP, GiB) +
                       drvcost_ns(DRV_SET_ACCESS, GiB)) +
                  copy + drvcost_host_ns(DRV_UNMAP, GiB) +
                  drvcost_ns(DRV_UNMAP, GiB);
    double down_gbs = (double)GiB / (double)down;
    double up_gbs = (double)GiB / (double)up;
    assert_true(down_gbs > 9.5 && down_gbs < 9.6);
    assert_true(up_gbs > 25.2 && up_gbs < 25.3);
    /* against pinned cuMemcpy, 55.2 GB/s: 0.17 and 0.46 */
    assert_true(down_gbs / m->pinned_gbs > 0.16 &&
                down_gbs / m->pinned_gbs < 0.19);
    assert_true(up_gbs / m->pinned_gbs > 0.43 &&
                up_gbs / m->pinned_gbs < 0.49);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measured_points),
        cmocka_unit_test(test_interpolation),
        cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_flat_outside),
        cmocka_unit_test(test_sums),
        cmocka_unit_test(test_host_points),
        cmocka_unit_test(test_host_interpolation),
        cmocka_unit_test(test_host_vs_device),
        cmocka_unit_test(test_misc),
        cmocka_unit_test(test_moves_on_h200),
    };
    return cmocka_run_group_tests_name("drivercost", tests, NULL, NULL);
}
