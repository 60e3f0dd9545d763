/* Size classes: every size maps to the smallest class that holds it. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "mem/sizeclass.h"

static void test_classes_increase_and_align(void **state)
{
    (void)state;
    size_t prev = 0;
    for (unsigned i = 0; i < SC_COUNT; i++) {
        size_t s = sc_size(i);
        assert_true(s > prev);
        assert_int_equal(s % SC_QUANTUM, 0);
        /* at most 25% more than the previous class, beyond the first four */
        if (i >= 4)
            assert_true(s * 4 <= prev * 5 + 4 * SC_QUANTUM);
        prev = s;
    }
    assert_int_equal(sc_size(SC_COUNT - 1), SC_MAX);
}

static void test_index_is_smallest_fit(void **state)
{
    (void)state;
    /* every size up to 64 KiB, then samples, against a linear search */
    for (size_t size = 1; size <= SC_MAX; size += size < 65536 ? 1 : 251) {
        unsigned want = 0;
        while (sc_size(want) < size)
            want++;
        unsigned got = sc_index(size);
        if (got != want)
            fail_msg("size %zu: class %u, want %u", size, got, want);
    }
    assert_int_equal(sc_index(SC_MAX), SC_COUNT - 1);
    for (unsigned i = 0; i < SC_COUNT; i++) {
        assert_int_equal(sc_index(sc_size(i)), i);
        assert_int_equal(sc_index(sc_size(i) + 1), i + 1 < SC_COUNT ? i + 1 : SC_COUNT);
    }
}

static void test_count_for_chunk(void **state)
{
    (void)state;
    assert_int_equal(sc_count_for_chunk(2u << 20), SC_COUNT);
    unsigned n = sc_count_for_chunk(64u << 10);
    assert_true(n > 0 && n < SC_COUNT);
    assert_true(sc_size(n - 1) * 2 <= (64u << 10));
    assert_true(sc_size(n) * 2 > (64u << 10));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes_increase_and_align),
        cmocka_unit_test(test_index_is_smallest_fit),
        cmocka_unit_test(test_count_for_chunk),
    };
    return cmocka_run_group_tests_name("sizeclass", tests, NULL, NULL);
}
