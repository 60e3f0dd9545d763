/*
 * libumpool-preload-nvml.so: what dlopen("libnvidia-ml.so.1") returns under
 * the preload, as libumpool-preload-cuda.so does for libcuda (its comment
 * says how): its dependencies are libumpool-preload.so (NVML's memory
 * calls, answered with the pool's figures) then libnvidia-ml.so.1.
 */
#include "config.h"

extern void *umpool_preload_pool(void);
extern int nvmlInit_v2(void);

__attribute__((used)) static void *const umpool_preload_nvml_deps[] = {
    (void *)umpool_preload_pool, (void *)nvmlInit_v2};
