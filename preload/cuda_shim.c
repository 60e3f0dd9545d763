/*
 * libumpool-preload-cuda.so: what dlopen("libcuda.so.1") returns under the
 * preload (preload.c). It defines nothing; its dependencies do the work, in
 * order: libumpool-preload.so (umpool's versions of the intercepted calls,
 * and cuGetProcAddress), then libcuda.so.1, the real driver (every other
 * symbol). dlsym on this handle searches it, then them, breadth first.
 *
 * The two references below are what keeps both dependencies, in that
 * order: a linker that drops the libraries a shared object does not use
 * (--as-needed, the toolchain's default here) would otherwise leave them
 * out (a weak reference does not count). Both symbols are always there:
 * cuDriverGetVersion is one of the driver's oldest exports.
 */
#include "config.h"

extern void *umpool_preload_pool(void);
extern int cuDriverGetVersion(int *);

__attribute__((used)) static void *const umpool_preload_cuda_deps[] = {
    (void *)umpool_preload_pool, (void *)cuDriverGetVersion};
