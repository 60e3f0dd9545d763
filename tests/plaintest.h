/*
 * Checks for the plain-C test programs (not cmocka: the MPI tests, whose
 * processes count their failures and sum them; the preload's, which must
 * look like an ordinary program). A failed CHECK prints FAIL with the
 * prefix (e.g. "[process 2] ") and counts.
 */
#ifndef UMP_TESTS_PLAINTEST_H
#define UMP_TESTS_PLAINTEST_H

#include <stdarg.h>
#include <stdio.h>

static int failures;
static char fail_prefix[32];

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: %s", fail_prefix);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            fail(__VA_ARGS__);                                                 \
    } while (0)

#endif
