/*
 * The fake CUDA driver (tests/fake_cuda.c) as the tests that run the cuda
 * backend on it use it: found, loaded once per program (group_setup), put
 * in place with its mode for a test (use_fake, which skips the test when
 * there is no fake driver: built without cuda.h), and its counters read.
 */
#ifndef UMP_TESTS_FAKECUDA_UTIL_H
#define UMP_TESTS_FAKECUDA_UTIL_H

#include <dlfcn.h>
#include <limits.h>

#include "testutil.h"

/* The fake driver: UMPOOL_FAKE_CUDA_LIB, else libfakecuda.so among the
 * test plugins the build exports (UMPOOL_TEST_PLUGINS); NULL when neither. */
static inline const char *fake_path(void)
{
    static char path[PATH_MAX];
    const char *p = getenv("UMPOOL_FAKE_CUDA_LIB");
    const char *dir = getenv("UMPOOL_TEST_PLUGINS");

    if (p && *p)
        return p;
    if (!dir || !*dir)
        return NULL;
    snprintf(path, sizeof(path), "%s/libfakecuda.so", dir);
    return path;
}

static void *fake_handle;

static inline int group_setup(void **state)
{
    (void)state;
    if (fake_path()) {
        fake_handle = dlopen(fake_path(), RTLD_NOW | RTLD_LOCAL);
#ifdef HAVE_CUDA_H
        if (!fake_handle)
            fprintf(stderr, "cannot load the fake driver: %s\n", dlerror());
#endif
    }
    return 0;
}

static inline int group_teardown(void **state)
{
    (void)state;
    if (fake_handle)
        dlclose(fake_handle);
    return 0;
}

#ifdef HAVE_CUDA_H
/* The fake driver with its mode set, or the test is skipped. */
static inline void use_fake(const char *mode)
{
    if (!fake_handle)
        skip();
    assert_int_equal(setenv("UMPOOL_CUDA_DRIVER", fake_path(), 1), 0);
    assert_int_equal(setenv("UMPOOL_FAKE_CUDA", mode, 1), 0);
}

static inline long fake_count(const char *what)
{
    long (*fn)(const char *);
    void *sym = dlsym(fake_handle, "fake_cuda_count");

    assert_non_null(sym);
    memcpy(&fn, &sym, sizeof(fn));
    long n = fn(what);
    if (n < 0)
        fail_msg("the fake driver does not count '%s'", what);
    return n;
}

#else
/* Without cuda.h there is no fake driver: a test that needs it skips. */
#define NO_FAKE(name)                                                          \
    static void name(void **state)                                             \
    {                                                                          \
        (void)state;                                                           \
        skip();                                                                \
    }
#endif

#endif
