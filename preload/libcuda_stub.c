/*
 * Link-time stand-in for libcuda.so.1 (soname libcuda.so.1): the one
 * symbol libumpool-preload-cuda.so refers to, so that it names libcuda.so.1
 * among its dependencies, which the real driver (or, in the tests, the
 * fake one) satisfies at run time. Built, never installed, like the CUDA
 * toolkit's own stubs.
 */
int cuDriverGetVersion(int *version);
int cuDriverGetVersion(int *version)
{
    (void)version;
    return 3; /* CUDA_ERROR_NOT_INITIALIZED: never called */
}
