/*
 * libumpool's entry points for frameworks that take an allocator as C
 * functions, with the exact signatures they call. All use the process's
 * pool (ump_process_pool), except where a parameter names a pool.
 *
 * PyTorch (torch.cuda.memory.CUDAPluggableAllocator, or C++'s
 * CUDAPluggableAllocator with its optional hooks): frees are
 * stream-ordered (a freed block serves the next allocation of its size on
 * the same stream at once, and any other once the work queued on the
 * freeing stream, and on every stream record_stream named, is done).
 *
 * CuPy (cupy.cuda.memory.CFunctionAllocator): param is a pool, or NULL for
 * the process's pool.
 *
 * The Fortran module's helper: UMP_HINTS_INIT, which a macro cannot give.
 */
#ifndef UMPOOL_BINDINGS_H
#define UMPOOL_BINDINGS_H

#include <stddef.h>

#include "umpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when out of memory (PyTorch raises its OutOfMemoryError). */
void *umpool_torch_alloc(size_t size, int device, void *stream);
void umpool_torch_free(void *ptr, size_t size, int device, void *stream);
void umpool_torch_init(int device_count);
/* torch.cuda.empty_cache() (set_reset_fn: PyTorch's emptyCache calls it):
 * every thread's blocks kept for same-stream reuse back to the pool once
 * their stream's work is done (waited for), then ump_trim. */
void umpool_torch_reset(void);
/* Allocations through these entry points on device stop at fraction of
 * its capacity (1: no limit). */
void umpool_torch_memory_fraction(double fraction, int device);
/* The allocation holding ptr: its start, and its size in *size. */
void *umpool_torch_base_alloc(void *ptr, size_t *size);
void umpool_torch_record_stream(void *ptr, void *stream);

void *umpool_cupy_malloc(void *param, size_t size, int device);
void umpool_cupy_free(void *param, void *ptr, int device);

void umpool_hints_init(ump_hints_t *hints);

#ifdef __cplusplus
}
#endif

#endif
