/*
 * umpool-bench coll on the cuda backend: times on the GPU with events
 * (coll_gpu.c), as nccl-tests does, next to the device-to-device copy
 * baseline of the same run. The pool's streams are CUstreams, so the
 * driver's events (loaded by cuda_loader.c) are recorded on them directly.
 */
#ifndef UMP_BENCH_COLL_GPU_H
#define UMP_BENCH_COLL_GPU_H

#include <stddef.h>

#include "umpool.h"

struct coll_gpu;

/* A stream per rank (device r of pool for rank r) and the driver's event
 * calls; NULL with why written when the driver cannot be loaded. */
struct coll_gpu *coll_gpu_open(ump_pool_t *pool, int n, char *why,
                               size_t len);
void coll_gpu_close(struct coll_gpu *g);
/* The ranks' streams, for the calls timed. */
const ump_stream_t *coll_gpu_streams(const struct coll_gpu *g);

/* Microseconds per call of call(arg, streams) on the GPU: one call to warm
 * up, then an event on rank 0's stream before and after iters calls queued
 * back to back (every collective begins and ends with all ranks' streams
 * waiting for each other, so rank 0's stream spans them all). NAN when a
 * call or the driver fails (printed). */
double coll_gpu_time(struct coll_gpu *g,
                     int (*call)(void *arg, const ump_stream_t *st),
                     void *arg, int iters);

/* The copy baseline: every rank copies bytes from src[r] to dst[r] (pool
 * memory of its device) on its stream, all at once, started together by
 * an event on rank 0's stream; microseconds from that event to the last
 * copy's end, median of reps after one warm-up. NAN on failure. */
double coll_gpu_copy_us(struct coll_gpu *g, void *const *dst,
                        void *const *src, size_t bytes, int reps);

#endif
