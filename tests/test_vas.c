/* The range allocator of the VA manager: first fit, coalescing, tags. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>

#include "mem/vas.h"

#define G ((size_t)2 << 20)

/* A fake base: the VA manager never touches the reserved memory itself. */
static void *base = (void *)(uintptr_t)0x100000000000ull;

static void check_sorted(const struct vas *v)
{
    for (size_t i = 0; i + 1 < v->nfree; i++)
        assert_true(v->free[i].start + v->free[i].n < v->free[i + 1].start);
    for (size_t i = 0; i < v->nfree; i++)
        assert_true(v->free[i].n > 0);
}

static void test_take_and_give_coalesce(void **state)
{
    (void)state;
    struct vas v;
    assert_int_equal(vas_init(&v, base, 64 * G, G), 0);
    assert_int_equal(v.ngran, 64);
    size_t a, b, c;
    assert_int_equal(vas_take(&v, 10, &a), 0);
    assert_int_equal(vas_take(&v, 20, &b), 0);
    assert_int_equal(vas_take(&v, 34, &c), 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 10);
    assert_int_equal(c, 30);
    size_t x;
    assert_int_equal(vas_take(&v, 1, &x), -ENOMEM);
    assert_int_equal(vas_largest_free(&v), 0);
    /* give back out of order: ranges must coalesce into one */
    assert_int_equal(vas_give(&v, b, 20), 0);
    assert_int_equal(v.nfree, 1);
    assert_int_equal(vas_give(&v, c, 34), 0);
    assert_int_equal(v.nfree, 1);
    assert_int_equal(vas_give(&v, a, 10), 0);
    assert_int_equal(v.nfree, 1);
    assert_int_equal(v.free[0].start, 0);
    assert_int_equal(v.free[0].n, 64);
    vas_fini(&v);
}

static void test_first_fit_and_holes(void **state)
{
    (void)state;
    struct vas v;
    assert_int_equal(vas_init(&v, base, 100 * G, G), 0);
    size_t s[50];
    for (int i = 0; i < 50; i++)
        assert_int_equal(vas_take(&v, 2, &s[i]), 0);
    for (int i = 0; i < 50; i += 2)
        assert_int_equal(vas_give(&v, s[i], 2), 0);
    check_sorted(&v);
    assert_int_equal(v.nfree, 25);
    assert_int_equal(vas_largest_free(&v), 2);
    size_t x;
    assert_int_equal(vas_take(&v, 3, &x), -ENOMEM);
    assert_int_equal(vas_take(&v, 2, &x), 0);
    assert_int_equal(x, s[0]); /* first fit: lowest address */
    /* freeing the odd ones joins everything except the range taken back */
    for (int i = 1; i < 50; i += 2)
        assert_int_equal(vas_give(&v, s[i], 2), 0);
    check_sorted(&v);
    assert_int_equal(v.nfree, 1);
    assert_int_equal(vas_largest_free(&v), 98);
    vas_fini(&v);
}

static void test_random_against_bitmap(void **state)
{
    (void)state;
    enum { N = 512 };
    struct vas v;
    assert_int_equal(vas_init(&v, base, N * G, G), 0);
    unsigned char used[N] = {0};
    struct { size_t s, n; } live[N];
    int nlive = 0;
    srand(7);
    for (int it = 0; it < 20000; it++) {
        if (nlive && (rand() % 2 || nlive == N)) {
            int k = rand() % nlive;
            assert_int_equal(vas_give(&v, live[k].s, live[k].n), 0);
            for (size_t g = live[k].s; g < live[k].s + live[k].n; g++)
                used[g] = 0;
            live[k] = live[--nlive];
        } else {
            size_t n = 1 + (size_t)rand() % 16, s;
            int rc = vas_take(&v, n, &s);
            /* a first fit exists iff the bitmap has n free in a row */
            size_t run = 0, first = N;
            for (size_t g = 0; g < N && first == N; g++) {
                run = used[g] ? 0 : run + 1;
                if (run == n)
                    first = g + 1 - n;
            }
            if (first == N) {
                assert_int_equal(rc, -ENOMEM);
                continue;
            }
            assert_int_equal(rc, 0);
            assert_int_equal(s, first);
            for (size_t g = s; g < s + n; g++)
                used[g] = 1;
            live[nlive].s = s;
            live[nlive].n = n;
            nlive++;
        }
        if (it % 1000 == 0)
            check_sorted(&v);
    }
    vas_fini(&v);
}

static void test_tags_and_addresses(void **state)
{
    (void)state;
    struct vas v;
    assert_int_equal(vas_init(&v, base, 8 * G, G), 0);
    int owner;
    vas_set(&v, 2, 3, VAS_RUN, &owner);
    for (size_t g = 0; g < 8; g++) {
        uintptr_t t = vas_tag(&v, g);
        if (g >= 2 && g < 5) {
            assert_int_equal(vas_tag_kind(t), VAS_RUN);
            assert_ptr_equal(vas_tag_owner(t), &owner);
        } else {
            assert_int_equal(vas_tag_kind(t), VAS_FREE);
        }
    }
    char *p = vas_addr(&v, 3);
    assert_true(vas_contains(&v, p));
    assert_int_equal(vas_index(&v, p + G - 1), 3);
    assert_false(vas_contains(&v, (char *)base + 8 * G));
    assert_false(vas_contains(&v, (char *)base - 1));
    vas_fini(&v);
}

static void test_bad_init(void **state)
{
    (void)state;
    struct vas v;
    assert_int_equal(vas_init(&v, base, 8 * G, 3 << 20), -EINVAL);
    assert_int_equal(vas_init(&v, base, 8 * G + 1, G), -EINVAL);
    assert_int_equal(vas_init(&v, base, 0, G), -EINVAL);
}

/* Growing a range in place: the free range right after it, exactly. */
static void test_free_at_and_take_at(void **state)
{
    (void)state;
    struct vas v;
    assert_int_equal(vas_init(&v, base, 64 * G, G), 0);
    size_t a, b;
    assert_int_equal(vas_take(&v, 10, &a), 0);
    assert_int_equal(vas_take(&v, 10, &b), 0);
    assert_int_equal(vas_give(&v, a, 10), 0); /* free: [0,10) [20,64) */
    assert_int_equal(vas_free_at(&v, 0), 10);
    assert_int_equal(vas_free_at(&v, 20), 44);
    assert_int_equal(vas_free_at(&v, 21), 0); /* inside a range: none */
    assert_int_equal(vas_free_at(&v, 10), 0); /* taken */
    assert_int_equal(vas_take_at(&v, 20, 45), -ENOMEM);
    assert_int_equal(vas_take_at(&v, 21, 1), -ENOMEM);
    assert_int_equal(vas_take_at(&v, 20, 4), 0);
    assert_int_equal(vas_free_at(&v, 24), 40);
    assert_int_equal(vas_take_at(&v, 0, 10), 0); /* the whole range */
    assert_int_equal(v.nfree, 1);
    check_sorted(&v);
    assert_int_equal(vas_take_at(&v, 24, 40), 0);
    assert_int_equal(v.nfree, 0);
    assert_int_equal(vas_free_at(&v, 24), 0);
    vas_fini(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_and_give_coalesce),
        cmocka_unit_test(test_first_fit_and_holes),
        cmocka_unit_test(test_random_against_bitmap),
        cmocka_unit_test(test_tags_and_addresses),
        cmocka_unit_test(test_bad_init),
        cmocka_unit_test(test_free_at_and_take_at),
    };
    return cmocka_run_group_tests_name("vas", tests, NULL, NULL);
}
