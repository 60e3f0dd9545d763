/* The cuda backend without a GPU: placeholder until the backend lands. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>

#include "umpool.h"

static void test_cuda_backend_absent(void **state)
{
    (void)state;
    ump_pool_t *pool = NULL;
    assert_int_equal(ump_pool_create("backend:cuda,log_level:error", &pool), -ENODEV);
    assert_null(pool);
    assert_int_equal(ump_pool_create("backend:auto", &pool), 0);
    assert_string_equal(ump_backend_name(pool), "sim");
    assert_int_equal(ump_pool_destroy(pool), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_backend_absent),
    };
    return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
