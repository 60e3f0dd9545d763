/*
 * Link-time stand-in for libnvidia-ml.so.1 (soname libnvidia-ml.so.1), as
 * libcuda_stub.c is for libcuda: the one symbol libumpool-preload-nvml.so
 * refers to. Built, never installed.
 */
int nvmlInit_v2(void);
int nvmlInit_v2(void)
{
    return 1; /* NVML_ERROR_UNINITIALIZED: never called */
}
