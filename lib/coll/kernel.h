/*
 * The collectives' GPU kernel, as the C side sees it (gpu.c launches it,
 * kernels.cu defines it, the fake driver of the tests emulates it): one
 * kernel, its one argument, and the embedded image that holds it.
 *
 * The kernel is a reduction of n inputs, element by element, with exactly
 * coll_reduce_multi's contract (reduce.h): dst[o][i] = src[0][i] op ... op
 * src[n-1][i] for i < count and every o < ndst, folded left to right in the
 * accumulation type (float for the half types), AVG divided by n once at
 * the end, the same conversions and the same MAX/MIN. So a GPU reduction
 * has the bits the sim gives for the same inputs. A dst may be one of the
 * sources at the same index (every source element is read before its dst
 * elements are written, by the same thread); n == 1 copies. Sources and
 * destinations are pool pointers of devices the launching device reaches,
 * or pinned host memory (gpu.c stages what it cannot reach). Several
 * destinations: two-shot, where a rank stores its reduced slice into every
 * rank's receive buffer.
 *
 * Two more shapes cut the count elements into segments of seg elements
 * (count = seg x the number of segments), so that the small allgather and
 * reduce-scatter are one launch too (gpu.c, the fan):
 *  - COLL_KGATHER: n segments, segment j copied from source j:
 *    dst[o][j * seg + i] = src[j][i], for every o < ndst (allgather: every
 *    rank's send buffer into every rank's receive buffer);
 *  - COLL_KSPLIT: ndst segments, segment j folded into destination j:
 *    dst[j][i] = src[0][j * seg + i] op ... op src[n-1][j * seg + i]
 *    (reduce-scatter: rank j's slice of every send buffer into its own
 *    receive buffer).
 * A segment is a reduction of the first shape over its own pointers, with
 * the same bits; in place (a destination segment that is its source's own
 * bytes, NCCL's in-place layouts) each element is read before it is
 * written, by the same thread, as above.
 *
 * AVG divides by n unless avgn says another divisor. That is only for one
 * source (n == 1, COLL_KFOLD): the division of a sum already folded and
 * rounded to the type, coll_avg_finish's bits (reduce.h), as the
 * processes of a shared pool end an AVG (xgpu.c). avgn keeps the struct's
 * size a multiple of 8 everywhere.
 *
 * This header is C and CUDA: no pool types in it.
 */
#ifndef UMP_COLL_KERNEL_H
#define UMP_COLL_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "umpool.h"

#define COLL_KERNEL_REDUCE "ump_coll_reduce"

/* coll_kargs.mode */
enum { COLL_KFOLD, COLL_KGATHER, COLL_KSPLIT };

/* Passed by value (cuLaunchKernel's kernelParams[0] points at it): 8-byte
 * fields first, no padding that differs between the compilers. */
struct coll_kargs {
    const void *src[UMP_MAX_DEVICES];
    void *dst[UMP_MAX_DEVICES];
    uint64_t count; /* elements, in all (every segment) */
    uint64_t seg;   /* elements of a segment (GATHER, SPLIT); else unused */
    int32_t n;      /* sources used, 1..UMP_MAX_DEVICES */
    int32_t ndst;   /* destinations used, 1..UMP_MAX_DEVICES */
    int32_t dt;     /* ump_dtype_t */
    int32_t op;     /* ump_redop_t */
    int32_t mode;   /* COLL_KFOLD, COLL_KGATHER, COLL_KSPLIT */
    int32_t avgn;   /* AVG's divisor; 0: n (see below) */
};

/* Threads per block, and the most blocks one launch uses (the loop strides
 * over the rest): enough blocks to fill 132 SMs several times over, few
 * enough that a small reduction is one wave. A thread takes 16 bytes of
 * every source at a time where every pointer is 16-byte aligned (one load
 * each, four sources loaded before they are folded, so that enough loads
 * are in flight to keep HBM busy), and single elements elsewhere. */
#define COLL_KERNEL_THREADS 256
#define COLL_KERNEL_MAX_BLOCKS 1056

#ifndef __CUDACC__
/* The fatbin of kernels.cu (sm_90 code and compute_90 PTX), embedded at
 * build time (lib/coll/local.mk); NULL and 0 when the library was built
 * without nvcc: then the reducing collectives are -ENOTSUP on cuda. */
extern const unsigned char *const coll_kernel_image;
extern const size_t coll_kernel_image_size;
#endif

#endif
