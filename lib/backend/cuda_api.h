/* The CUDA driver entry points the cuda backend loads at run time. */
#ifndef UMP_CUDA_API_H
#define UMP_CUDA_API_H
#endif
