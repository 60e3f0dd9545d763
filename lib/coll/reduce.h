/*
 * Element types and exact, reproducible reductions of the collectives.
 * Pure functions: no pool, no locks, no allocation; they run on the stream
 * workers of the sim backend (and are the host reference of the GPU tests).
 *
 * dt is a ump_dtype_t (UMP_INT8 .. UMP_BFLOAT16), op a ump_redop_t (UMP_SUM
 * .. UMP_AVG). The entry points take int so that callers can pass values
 * they have not validated yet to coll_dtype_valid / coll_op_valid first;
 * the reductions themselves do nothing for an invalid dt or op (callers
 * check, and user input never reaches an assert).
 *
 * Arithmetic, per type:
 * - Integers: SUM and PROD wrap as C unsigned arithmetic of the same width
 *   (so signed overflow is defined: INT32_MAX + 1 is INT32_MIN); MAX and MIN
 *   compare as signed for the signed types. AVG sums (wrapping), then
 *   divides the sum, read as the signed type for the signed types, by n once,
 *   truncating toward zero (C division, as NCCL). The conversions between a
 *   signed type and its unsigned twin are modulo 2^width (two's complement,
 *   as GCC and Clang define them).
 * - float and double: in their own type, IEEE round-to-nearest-even, no
 *   contraction (there is no a * b + c to fuse). AVG: sum, then divide by n.
 * - half (fp16) and bfloat16: each input is converted exactly to float, the
 *   fold runs in float, and the result is rounded once to the half type,
 *   round-to-nearest-even (overflow goes to inf, subnormals are kept). AVG:
 *   the float sum divided by n in float, then rounded once.
 * - MAX and MIN of floating types (all four): IEEE 754-2019 maximum/minimum:
 *   a NaN input gives a NaN (the first NaN in fold order, so which one is
 *   deterministic), and -0.0 < +0.0 (MAX(-0, +0) = +0, MIN = -0 whatever the
 *   order). Chosen over fmaxf's "ignore NaN" so that a NaN in one rank's
 *   gradients is not hidden by the others, and over "a > b ? a : b" whose
 *   result for NaN and signed zeros depends on the operand order, which
 *   would make the result depend on the algorithm.
 * - NaN results are NaN; their sign and payload are not specified (x86
 *   picks an operand's payload for a + b, and inf - inf gives the default
 *   NaN), so compare NaN results as "is NaN", everything else bitwise.
 *
 * Order: coll_reduce folds strictly left to right, src[0] op src[1] op ...
 * op src[n-1], element by element; calls with the same sources in the same
 * order give the same bits, whatever the rank, the run or the alignment.
 *
 * How results differ between algorithms (coll_reduce in one fold versus
 * coll_reduce2 steps, possibly in another order, then coll_avg_finish):
 * - integers, all ops: bitwise identical (wrapping sums and products are
 *   associative and commutative, and AVG divides once either way);
 * - MAX and MIN, all types: bitwise identical except which NaN comes out
 *   (each step picks one of its inputs, and the order of signed zeros is
 *   fixed);
 * - float and double SUM/PROD: a step-wise chain in the same left-to-right
 *   order is bitwise equal to coll_reduce (both round in the type at every
 *   step); another order differs within the classic bound for recursive
 *   summation: |result - exact| <= gamma(n-1) * sum |x_i|, with
 *   gamma(k) = k*u / (1 - k*u), u = 2^-24 (float) or 2^-53 (double);
 * - half and bfloat16: a step rounds to the half type, coll_reduce only at
 *   the end, so they may differ (2048 + 1 + 1 in fp16: 2050 from
 *   coll_reduce, 2048 step-wise). Each step is correctly rounded: the exact
 *   sum or product of two halves, rounded to float then to the half type,
 *   equals the exact value rounded once to the half type, because float's
 *   24 bits are at least 2p + 2 for p = 11 (fp16) and 8 (bf16), which makes
 *   double rounding innocuous (Figueroa 1995). So each step adds a relative
 *   error of at most u = 2^-11 (fp16) or 2^-8 (bf16), half an ulp, as long
 *   as it neither overflows nor (products only; sums that underflow are
 *   exact) underflows. Hence, for SUM over n inputs x_i, in any order:
 *     |step-wise - exact| <= gamma_h(n-1) * sum |x_i|
 *     |coll_reduce - exact| <= u * |sum x_i| + (1 + u) * gamma_f(n-1) * sum |x_i|
 *   (gamma_h with the half type's u, gamma_f with float's 2^-24), and the
 *   two results differ by at most the sum of the two bounds. AVG adds one
 *   correctly rounded division to either (relative error u, and float's
 *   2^-24 for coll_reduce's division before its rounding).
 *
 * Buffers are aligned to their element size (pool memory is). No FTZ/DAZ
 * floating mode is assumed (-ffast-math would break subnormals).
 */
#ifndef UMP_COLL_REDUCE_H
#define UMP_COLL_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "umpool.h"

/* The conversions and the floating MAX/MIN below are also the GPU kernels'
 * (kernels.cu includes this header): one definition, the same bits on the
 * host and the device. */
#ifdef __CUDACC__
#define COLL_HD __host__ __device__
#else
#define COLL_HD
#endif

#ifdef __cplusplus /* kernels.cu and its host test */
extern "C" {
#endif

#define COLL_NDTYPE 10 /* UMP_INT8 .. UMP_BFLOAT16 */
#define COLL_NOP 5     /* UMP_SUM .. UMP_AVG */

/* Bytes of one element of dt; 0 for an invalid dt. */
size_t coll_dtype_size(int dt);
bool coll_dtype_valid(int dt);
bool coll_op_valid(int op);
/* nccl-tests' names ("int8" .. "bfloat16", "sum" .. "avg"); NULL when
 * invalid. */
const char *coll_dtype_name(int dt);
const char *coll_op_name(int op);

/* dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i] for i < count,
 * folded left to right (AVG: divided by n once at the end). n >= 1; n == 1
 * copies the bytes (for every op: a sum of one term, or that term divided by
 * 1, is itself, and a bit copy also keeps a signaling NaN's bits). dst may be
 * any src[k] itself (in place): every source element is read before the
 * element of dst is written; any other overlap of dst and a source is not
 * allowed. Nothing happens for an invalid dt or op, n < 1 or count 0. */
void coll_reduce(int dt, int op, void *dst, const void *const *src, int n,
                 size_t count);
/* The same result written to ndst >= 1 destinations (two-shot writes a
 * rank's reduced slice into every rank's receive buffer). Each dst[o] may
 * be the source of the same index (dst[o] == src[o], in place) or not
 * overlap any source; a single destination may be any source (as
 * coll_reduce's); destinations do not overlap each other. */
void coll_reduce_multi(int dt, int op, void *const *dst, int ndst,
                       const void *const *src, int n, size_t count);
/* Outputs this large, written by one collective call (all its ranks
 * together), are stored around the caches: more than they keep for the
 * reader that comes next (reduce.c says what it gains and costs). */
#define COLL_STREAM_MIN ((size_t)32 << 20)
/* coll_reduce_multi with its stores chosen by the caller: stream
 * (non-temporal) or cached. coll_reduce_multi (and coll_reduce) stream
 * when their own output, ndst * count elements, reaches COLL_STREAM_MIN:
 * right for a call with one writer. A collective whose ranks all write at
 * once passes its call's total. Same bits either way. */
void coll_reduce_multi_stream(int dt, int op, void *const *dst, int ndst,
                              const void *const *src, int n, size_t count,
                              bool stream);
/* The GPU kernel's work on the host, shape by shape (kernel.h: mode is
 * COLL_KFOLD, COLL_KGATHER or COLL_KSPLIT, count the elements in all, seg
 * those of a segment): the sim's fan (fan.c) and the fake driver's kernel
 * (tests/fake_cuda.c). The caller has checked the arguments as the kernel
 * would (count a multiple of seg for the segmented shapes). */
void coll_reduce_shape(int dt, int op, int mode, void *const *dst, int ndst,
                       const void *const *src, int n, size_t count,
                       size_t seg);
/* One step of a ring or tree: dst = a op b, as coll_reduce of {a, b}, with
 * AVG taken as SUM (the division comes once, in coll_avg_finish). dst may be
 * a or b. Half types round at each step (see above). */
void coll_reduce2(int dt, int op, void *dst, const void *a, const void *b,
                  size_t count);
/* AVG's end after coll_reduce2 steps: buf[i] /= n in place, as coll_reduce's
 * AVG divides (integers truncating toward zero, signed types as signed; half
 * types through float, rounded once). n == 1 leaves buf as it is. */
void coll_avg_finish(int dt, void *buf, size_t count, int n);

/* ---- conversions between the half types and float ------------------------
 * Exact (half to float) and round-to-nearest-even (float to half) for every
 * input, written without branches so that loops of them vectorize: every
 * case is computed and the result picked with masks (gcc does not turn
 * ternaries around float operations into selects, as they may trap). */

static inline COLL_HD uint32_t coll_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline COLL_HD float coll_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp16 (1 sign, 5 exponent bits of bias 15, 10 mantissa bits) to float:
 * exact. NaN stays NaN with its payload. Subnormals go through an integer
 * conversion rather than a float multiply, so that a DAZ mode could not
 * flush them. */
static inline COLL_HD float coll_half_to_float(uint16_t h)
{
    /* int32_t: SSE2 compares only signed integers */
    int32_t em = h & 0x7fff;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    /* normal: rebias the exponent from 15 to 127; inf and NaN (exponent
     * 31) take a second rebias to 255, payload kept */
    uint32_t bits = ((uint32_t)em << 13) + ((uint32_t)(127 - 15) << 23);
    bits += (uint32_t)(127 - 15) << 23 & (0u - (uint32_t)(em >= 0x7c00));
    /* zero and subnormal: em * 2^-24, exact in float */
    uint32_t sub = coll_f32_bits((float)em * 0x1p-24f);
    uint32_t is_sub = 0u - (uint32_t)(em < 0x400);
    return coll_f32_from_bits(((sub & is_sub) | (bits & ~is_sub)) | sign);
}

/* float to fp16, round to nearest even: values from 65520 up (the midpoint
 * past the largest half, 65504, which ties to the even "65536") become inf;
 * NaN becomes a quiet NaN keeping the sign and the payload's top bits.
 * The method of the FP16 library (Marat Dukhan; PyTorch's
 * fp16_ieee_from_fp32_value): scaling by 2^112 then 2^-110 sends what
 * overflows fp16 to inf and keeps the rest exact (times 4); adding the
 * power of two 2^13 ulps of the result above it (its exponent plus 15, no
 * less than that of 2^-14 for the subnormal range) leaves exactly fp16's
 * bits in float's mantissa, so the float addition (round to nearest even)
 * does the rounding, a carry into the exponent included. Only values far
 * below fp16's smallest subnormal pass through float subnormals, so FTZ/DAZ
 * would not change the result. */
static inline COLL_HD uint16_t coll_float_to_half(float f)
{
    uint32_t w = coll_f32_bits(f);
    uint32_t sign = (w >> 16) & 0x8000u;
    int32_t mag = (int32_t)(w & 0x7fffffffu); /* signed compares: SSE2 */
    float base = coll_f32_from_bits((uint32_t)mag) * 0x1p112f * 0x1p-110f;
    int32_t bias = mag & 0x7f800000;
    bias = bias < 0x38800000 ? 0x38800000 : bias; /* 2^-14: subnormals */
    base += coll_f32_from_bits((uint32_t)bias + 0x07800000u);
    uint32_t bits = coll_f32_bits(base);
    uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    uint32_t is_nan = 0u - (uint32_t)(mag > 0x7f800000);
    uint32_t nan = 0x7e00u | ((uint32_t)mag >> 13 & 0x3ffu);
    return (uint16_t)(sign | (nan & is_nan) | (nonsign & ~is_nan));
}

/* bfloat16 is float's top half: exact. */
static inline COLL_HD float coll_bf16_to_float(uint16_t b)
{
    return coll_f32_from_bits((uint32_t)b << 16);
}

/* float to bfloat16, round to nearest even; the carry of the rounding runs
 * into the exponent, up to inf for the largest floats; NaN becomes a quiet
 * NaN with the sign and the payload's top bits (a plain rounding could carry
 * a NaN into inf or drop its payload to inf's bits). */
static inline COLL_HD uint16_t coll_float_to_bf16(float f)
{
    uint32_t u = coll_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- IEEE 754-2019 maximum and minimum (see above for why) ----------------
 * Selects without branches, in few vector operations: m1 and m2 are the
 * plain "a > b ? a : b" both ways round (one maxps each), which agree unless
 * a == b or one is NaN. Equal values are the same bits except +0 and -0,
 * where the AND of the bits (max) picks +0 and the OR (min) -0. With a NaN:
 * when a is one, m2 is a; when only b is, m1 is b; so the first NaN in fold
 * order comes out. */
#define COLL_DEFINE_MAXMIN(NAME, T, U, BITS, FROM, CMP, COMBINE)               \
    static inline COLL_HD T NAME(T a, T b)                                     \
    {                                                                          \
        T m1 = a CMP b ? a : b;                                                \
        T m2 = b CMP a ? b : a;                                                \
        U both = BITS(m1) COMBINE BITS(m2);                                    \
        U a_nan = (U)0 - (U)(a != a);                                          \
        U unord = (U)0 - (U)(a != a || b != b);                                \
        U pick = (BITS(m2) & a_nan) | (BITS(m1) & ~a_nan);                     \
        return FROM((pick & unord) | (both & ~unord));                         \
    }

static inline COLL_HD uint64_t coll_f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline COLL_HD double coll_f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

COLL_DEFINE_MAXMIN(coll_max_f32, float, uint32_t, coll_f32_bits,
                   coll_f32_from_bits, >, &)
COLL_DEFINE_MAXMIN(coll_min_f32, float, uint32_t, coll_f32_bits,
                   coll_f32_from_bits, <, |)
COLL_DEFINE_MAXMIN(coll_max_f64, double, uint64_t, coll_f64_bits,
                   coll_f64_from_bits, >, &)
COLL_DEFINE_MAXMIN(coll_min_f64, double, uint64_t, coll_f64_bits,
                   coll_f64_from_bits, <, |)

#ifdef __cplusplus
}
#endif

#endif
