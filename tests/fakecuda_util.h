/*
 * The fake CUDA driver (tests/fake_cuda.c) as the tests that run the cuda
 * backend on it use it: found, loaded once per program (group_setup), put
 * in place with its mode for a test (use_fake, which skips the test when
 * there is no fake driver: built without cuda.h), its counters read, and
 * streams made with it directly, as an application (PyTorch) makes its
 * own.
 */
#ifndef UMP_TESTS_FAKECUDA_UTIL_H
#define UMP_TESTS_FAKECUDA_UTIL_H

#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "testutil.h"

#ifdef HAVE_CUDA_H
#include <cuda.h>
#endif

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

/* A driver entry point of the fake, found as an application finds it
 * (cuGetProcAddress_v2), into the function pointer fp. */
#define FAKE_PROC(fp, name)                                                    \
    do {                                                                       \
        void *fake_fn_ = fake_proc(name);                                      \
        memcpy(&(fp), &fake_fn_, sizeof(fp));                                  \
    } while (0)

static inline void *fake_proc(const char *name)
{
    CUresult (*gpa)(const char *, void **, int, cuuint64_t,
                    CUdriverProcAddressQueryResult *);
    void *sym = dlsym(fake_handle, "cuGetProcAddress_v2"), *fn = NULL;

    assert_non_null(sym);
    memcpy(&gpa, &sym, sizeof(gpa));
    assert_int_equal(gpa(name, &fn, 12000, 0, NULL), CUDA_SUCCESS);
    if (!fn)
        fail_msg("the fake driver has no %s", name);
    return fn;
}

/* Makes GPU dev's primary context current on the calling thread, as an
 * application does before its own driver calls; fake_ctx_leave puts the
 * one it replaced (in *saved_p) back. */
static inline void fake_ctx_enter(int dev, CUcontext *saved_p)
{
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*get)(CUcontext *);
    CUresult (*set)(CUcontext);
    CUcontext ctx = NULL;

    FAKE_PROC(retain, "cuDevicePrimaryCtxRetain");
    FAKE_PROC(get, "cuCtxGetCurrent");
    FAKE_PROC(set, "cuCtxSetCurrent");
    assert_int_equal(get(saved_p), CUDA_SUCCESS);
    assert_int_equal(retain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(set(ctx), CUDA_SUCCESS);
}

static inline void fake_ctx_leave(int dev, CUcontext saved)
{
    CUresult (*release)(CUdevice);
    CUresult (*set)(CUcontext);

    FAKE_PROC(release, "cuDevicePrimaryCtxRelease");
    FAKE_PROC(set, "cuCtxSetCurrent");
    assert_int_equal(set(saved), CUDA_SUCCESS);
    assert_int_equal(release(dev), CUDA_SUCCESS);
}

/* A stream the application makes with the driver itself in GPU dev's
 * primary context, non-blocking (as PyTorch makes its side streams): no
 * pool's. */
static inline CUstream fake_native_stream(int dev)
{
    CUresult (*create)(CUstream *, unsigned);
    CUcontext saved;
    CUstream s = NULL;

    FAKE_PROC(create, "cuStreamCreate");
    fake_ctx_enter(dev, &saved);
    CUresult res = create(&s, CU_STREAM_NON_BLOCKING);
    fake_ctx_leave(dev, saved);
    assert_int_equal(res, CUDA_SUCCESS);
    assert_non_null(s);
    return s;
}

/* cuStreamSynchronize of a stream of GPU dev, by the application. */
static inline CUresult fake_native_sync(int dev, CUstream s)
{
    CUresult (*sync)(CUstream);
    CUcontext saved;

    FAKE_PROC(sync, "cuStreamSynchronize");
    fake_ctx_enter(dev, &saved);
    CUresult res = sync(s);
    fake_ctx_leave(dev, saved);
    return res;
}

/* cuStreamDestroy, by the application (no context needed). */
static inline CUresult fake_native_destroy(CUstream s)
{
    CUresult (*destroy)(CUstream);

    FAKE_PROC(destroy, "cuStreamDestroy");
    return destroy(s);
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
