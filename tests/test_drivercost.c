/*
 * The driver's cost table (topo/drivercost): the H200's measured points of
 * DESIGN.md come back exactly, sizes between them are interpolated in
 * log2(size), and sizes beyond them stay flat. Both the sim's modeled
 * driver time and the allocator's remap-or-create choice read it, so its
 * numbers are pinned here.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measured_points),
        cmocka_unit_test(test_interpolation),
        cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_flat_outside),
        cmocka_unit_test(test_sums),
    };
    return cmocka_run_group_tests_name("drivercost", tests, NULL, NULL);
}
