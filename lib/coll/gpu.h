/*
 * The collectives on a backend that runs device code (cuda): each rank's
 * share is queued on its stream as copies and launches of the reduction
 * kernel (kernel.h), and the ranks' streams wait for each other with events
 * (gpu.c). The sim runs the same collectives with host functions instead
 * (job.h, algo.c).
 */
#ifndef UMP_COLL_GPU_H
#define UMP_COLL_GPU_H

#include <stdbool.h>

#include "coll/check.h"
#include "coll/comm.h"
#include "coll/kernel.h"

/* The algorithms (bits 1u << enum coll_algo) the GPU executor runs for
 * coll on communicator c: one-shot, and two-shot where every device of the
 * pool reaches every other, for allreduce; direct for the others. 0 for
 * the reducing collectives when the library was built without nvcc (no
 * kernel). */
unsigned coll_gpu_algos(const ump_comm_t *c, int coll);

/* Sets up c's GPU side (events; whether every rank reaches every other)
 * and tears it down (waits for the calls in flight first). */
int coll_gpu_init(ump_comm_t *c);
void coll_gpu_fini(ump_comm_t *c);

/* Queues one checked call (a) with algorithm algo on streams st; wait
 * (streams NULL: st are the communicator's own): returns when its work is
 * done. Called with c->lock held. */
int coll_gpu_run(ump_comm_t *c, const struct coll_args *a, int algo,
                 const ump_stream_t *st, bool wait);

/* Releases the buffers that finished calls acquired; wait: waits for the
 * calls still running first. */
void coll_gpu_reap(ump_comm_t *c, bool wait);

/* Queues the kernel with argument k on stream st: a thread per 16 bytes,
 * up to kernel.h's cap. 0 or the backend's error. */
int coll_gpu_kernel(ump_pool_t *pool, ump_stream_t st,
                    struct coll_kargs *k);

/* Two-shot's slice k of n over count elements of esz bytes starts here:
 * slices are cut in whole 16-byte vectors (the kernel's loads, which it
 * uses only where every pointer of a launch is 16-byte aligned), the last
 * slice taking what is left (k >= n: count). The bits do not depend on
 * where the cuts are: every element is folded from its own inputs. */
size_t coll_gpu_slice_lo(size_t count, size_t esz, int n, int k);

#endif
