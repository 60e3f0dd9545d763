/*
 * The reductions of the collectives (the contract is in reduce.h).
 *
 * Speed: the sim's allreduce must run near memory speed, so the dispatch on
 * (type, op) happens once per call, through a table of functions that a
 * macro generates one per pair, and the inner loops are plain loops of one
 * operation that gcc -O2 vectorizes. gcc 12's -O2 cost model ("very cheap")
 * vectorizes a loop only when no scalar epilogue is needed, so the work runs
 * in blocks of COLL_BLK elements, a constant trip count, with a second
 * instance of the same body for the last, partial block.
 *
 * In place: a block is first folded into acc, a local array (L1 resident),
 * reading every source, and only then stored to dst, so dst may be any of
 * the sources. acc is also the accumulation type (float for the half types,
 * unsigned for the wrapping integer ops).
 *
 * Large outputs are stored with non-temporal stores where the CPU has
 * them (x86's SSE2): a plain store first reads the line it writes (read
 * for ownership), so a reduction of n inputs into n outputs moved half as
 * many bytes again as the memcpy of the same outputs, and ran at 0.55 of
 * it with 4 ranks on this 2-core machine (0.8-0.9 streamed). But a
 * streamed line goes to DRAM: a reader right after fetches it back. The
 * schedule across processes reads what it folds at once (it sends it, and
 * broadcasts it): streamed from 1 MiB, its allreduce at 1-4 MiB ran at
 * 1.4-1.5 GB/s, against 2.0-2.5 cached. So the stores stream only when the
 * collective call writes COLL_STREAM_MIN bytes or more, all its ranks
 * together (reduce.h): more than the caches keep for that reader. The
 * stores are fenced before the call returns (the ranks' barrier then
 * publishes them).
 */
#include "config.h"

#include "coll/reduce.h"
#include "coll/kernel.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* 512 elements: acc is 2-4 KiB, well inside L1 next to the streamed
 * sources, and long enough that the loop overhead per block is nothing. */
#define COLL_BLK 512

/* Stores a block of bytes (a multiple of 16, from a 16-byte aligned src)
 * at dst: around the caches when stream (and dst is aligned), else
 * memcpy. */
static inline void store_block(void *dst, const void *src, size_t bytes,
                               bool stream)
{
#if defined(__SSE2__)
    if (stream && ((uintptr_t)dst & 15) == 0 && (bytes & 15) == 0) {
        __m128i *d = dst;
        const __m128i *s = src;
        for (size_t k = 0; k < bytes / 16; k++)
            _mm_stream_si128(d + k, _mm_load_si128(s + k));
        return;
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, bytes);
}

/* Orders the streamed stores before what follows (a barrier's unlock). */
static inline void store_fence(bool stream)
{
#if defined(__SSE2__)
    if (stream)
        _mm_sfence();
#else
    (void)stream;
#endif
}

static const size_t dtype_size[COLL_NDTYPE] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const dtype_name[COLL_NDTYPE] = {
    "int8", "uint8",  "int32", "uint32", "int64",
    "uint64", "half", "float", "double", "bfloat16"};
static const char *const op_name[COLL_NOP] = {"sum", "prod", "max", "min",
                                              "avg"};

bool coll_dtype_valid(int dt) { return dt >= 0 && dt < COLL_NDTYPE; }

bool coll_op_valid(int op) { return op >= 0 && op < COLL_NOP; }

size_t coll_dtype_size(int dt)
{
    return coll_dtype_valid(dt) ? dtype_size[dt] : 0;
}

const char *coll_dtype_name(int dt)
{
    return coll_dtype_valid(dt) ? dtype_name[dt] : NULL;
}

const char *coll_op_name(int op)
{
    return coll_op_valid(op) ? op_name[op] : NULL;
}

/* ---- the element operations (the floating MAX/MIN are reduce.h's) ----- */

/* The cast back to the unsigned type wraps: uint8_t operands are promoted
 * to int, where 255 * 255 still fits. */
#define OP_SUM(A, a, b) ((A)((a) + (b)))
#define OP_PROD(A, a, b) ((A)((a) * (b)))
#define OP_MAX(A, a, b) ((a) > (b) ? (a) : (b))
#define OP_MIN(A, a, b) ((a) < (b) ? (a) : (b))
#define OP_FMAX(A, a, b) coll_max_f32(a, b)
#define OP_FMIN(A, a, b) coll_min_f32(a, b)
#define OP_DMAX(A, a, b) coll_max_f64(a, b)
#define OP_DMIN(A, a, b) coll_min_f64(a, b)

#define LD_ID(x) (x)
#define ST_ID(x) (x)
#define LD_HALF(x) coll_half_to_float(x)
#define ST_HALF(x) coll_float_to_half(x)
#define LD_BF16(x) coll_bf16_to_float(x)
#define ST_BF16(x) coll_float_to_bf16(x)

/* The end of an element: nothing, or AVG's one division by n (the int n in
 * scope where these expand; the operands are promoted, never n narrowed to
 * a small type). Signed integer AVG reads the wrapped sum as signed (S), so
 * that -7 / 2 is -3, as NCCL. */
#define FIN_ID(S, x) (x)
#define FIN_DIV(S, x) ((x) / n)
#define FIN_SDIV(S, x) ((S)(x) / n)
#define FIN_FDIV(S, x) ((x) / (S)n) /* n < 2^24: exact in float */

/* One block of M elements from offset i: fold every source into acc, then
 * convert into out and store that to every destination (while the block
 * is in L1). n >= 2 starts with the first two sources in one pass. */
#define REDUCE_BLOCK(T, A, S, LD, ST, OP, FIN, M)                              \
    do {                                                                       \
        A acc[COLL_BLK];                                                       \
        const T *s0 = (const T *)src[0] + i;                                   \
        const T *s1 = (const T *)src[1] + i;                                   \
        for (size_t j = 0; j < (M); j++)                                       \
            acc[j] = OP(A, (A)LD(s0[j]), (A)LD(s1[j]));                        \
        for (int k = 2; k < n; k++) {                                          \
            const T *sk = (const T *)src[k] + i;                               \
            for (size_t j = 0; j < (M); j++)                                   \
                acc[j] = OP(A, acc[j], (A)LD(sk[j]));                          \
        }                                                                      \
        _Alignas(16) T out[COLL_BLK];                                          \
        for (size_t j = 0; j < (M); j++)                                       \
            out[j] = (T)ST(FIN(S, acc[j]));                                    \
        for (int o = 0; o < ndst; o++)                                         \
            store_block((T *)dst[o] + i, out, (M) * sizeof(T), stream);       \
    } while (0)

/* reduce_NAME(dst, ndst, src, n, count), n >= 2: T the stored type, A the
 * accumulation type, S the type AVG divides in. */
#define DEFINE_REDUCE(NAME, T, A, S, LD, ST, OP, FIN)                          \
    static void reduce_##NAME(void *const *dst, int ndst,                      \
                              const void *const *src, int n, size_t count,     \
                              bool stream)                                     \
    {                                                                          \
        size_t i = 0;                                                          \
        for (; count - i >= COLL_BLK; i += COLL_BLK)                           \
            REDUCE_BLOCK(T, A, S, LD, ST, OP, FIN, COLL_BLK);                  \
        if (i < count)                                                         \
            REDUCE_BLOCK(T, A, S, LD, ST, OP, FIN, count - i);                 \
        store_fence(stream);                                                   \
    }

/* The five ops of an integer type: U its unsigned twin (SUM, PROD, AVG's
 * sum wrap there), C the type MAX and MIN compare in, S AVG's division. */
#define DEFINE_INT(NAME, U, C, S, FINAVG)                                      \
    DEFINE_REDUCE(NAME##_sum, U, U, S, LD_ID, ST_ID, OP_SUM, FIN_ID)           \
    DEFINE_REDUCE(NAME##_prod, U, U, S, LD_ID, ST_ID, OP_PROD, FIN_ID)         \
    DEFINE_REDUCE(NAME##_max, C, C, S, LD_ID, ST_ID, OP_MAX, FIN_ID)           \
    DEFINE_REDUCE(NAME##_min, C, C, S, LD_ID, ST_ID, OP_MIN, FIN_ID)           \
    DEFINE_REDUCE(NAME##_avg, U, U, S, LD_ID, ST_ID, OP_SUM, FINAVG)

DEFINE_INT(i8, uint8_t, int8_t, int8_t, FIN_SDIV)
DEFINE_INT(u8, uint8_t, uint8_t, uint8_t, FIN_DIV)
DEFINE_INT(i32, uint32_t, int32_t, int32_t, FIN_SDIV)
DEFINE_INT(u32, uint32_t, uint32_t, uint32_t, FIN_DIV)
DEFINE_INT(i64, uint64_t, int64_t, int64_t, FIN_SDIV)
DEFINE_INT(u64, uint64_t, uint64_t, uint64_t, FIN_DIV)

/* The floating types: T stored, A accumulated (and divided) in. */
#define DEFINE_FLOAT(NAME, T, A, LD, ST, MAX, MIN)                             \
    DEFINE_REDUCE(NAME##_sum, T, A, A, LD, ST, OP_SUM, FIN_ID)                 \
    DEFINE_REDUCE(NAME##_prod, T, A, A, LD, ST, OP_PROD, FIN_ID)               \
    DEFINE_REDUCE(NAME##_max, T, A, A, LD, ST, MAX, FIN_ID)                    \
    DEFINE_REDUCE(NAME##_min, T, A, A, LD, ST, MIN, FIN_ID)                    \
    DEFINE_REDUCE(NAME##_avg, T, A, A, LD, ST, OP_SUM, FIN_FDIV)

DEFINE_FLOAT(f16, uint16_t, float, LD_HALF, ST_HALF, OP_FMAX, OP_FMIN)
DEFINE_FLOAT(f32, float, float, LD_ID, ST_ID, OP_FMAX, OP_FMIN)
DEFINE_FLOAT(f64, double, double, LD_ID, ST_ID, OP_DMAX, OP_DMIN)
DEFINE_FLOAT(bf16, uint16_t, float, LD_BF16, ST_BF16, OP_FMAX, OP_FMIN)

typedef void reduce_fn(void *const *dst, int ndst, const void *const *src,
                       int n, size_t count, bool stream);

#define OPS(NAME)                                                              \
    {reduce_##NAME##_sum, reduce_##NAME##_prod, reduce_##NAME##_max,          \
     reduce_##NAME##_min, reduce_##NAME##_avg}

/* Indexed by ump_dtype_t, then ump_redop_t. */
static reduce_fn *const reduce_table[COLL_NDTYPE][COLL_NOP] = {
    OPS(i8),  OPS(u8),  OPS(i32), OPS(u32), OPS(i64),
    OPS(u64), OPS(f16), OPS(f32), OPS(f64), OPS(bf16)};

void coll_reduce_multi(int dt, int op, void *const *dst, int ndst,
                       const void *const *src, int n, size_t count)
{
    size_t out = coll_dtype_valid(dt) && ndst > 0
                     ? (size_t)ndst * count * dtype_size[dt]
                     : 0;
    coll_reduce_multi_stream(dt, op, dst, ndst, src, n, count,
                             out >= COLL_STREAM_MIN);
}

void coll_reduce_multi_stream(int dt, int op, void *const *dst, int ndst,
                              const void *const *src, int n, size_t count,
                              bool stream)
{
    if (!coll_dtype_valid(dt) || !coll_op_valid(op) || n < 1 || ndst < 1 ||
        count == 0)
        return;
    if (n == 1) {
        /* memmove: a dst is src[0] when in place (then nothing moves) */
        for (int o = 0; o < ndst; o++)
            if (dst[o] != src[0])
                memmove(dst[o], src[0], count * dtype_size[dt]);
        return;
    }
    reduce_table[dt][op](dst, ndst, src, n, count, stream);
}

void coll_reduce_shape(int dt, int op, int mode, void *const *dst, int ndst,
                       const void *const *src, int n, size_t count,
                       size_t seg)
{
    if (mode == COLL_KFOLD) {
        coll_reduce_multi(dt, op, dst, ndst, src, n, count);
        return;
    }
    /* Segment j: GATHER copies source j into segment j of every
     * destination, SPLIT folds segment j of every source into destination
     * j. In place, a destination segment is its source's own bytes
     * (coll_reduce_multi allows that). */
    bool gather = mode == COLL_KGATHER;
    size_t esz = coll_dtype_size(dt), nseg = gather ? (size_t)n : (size_t)ndst;
    if (!esz || !seg || n < 1 || ndst < 1 || n > UMP_MAX_DEVICES ||
        ndst > UMP_MAX_DEVICES)
        return;
    for (size_t j = 0; j < nseg && j * seg < count; j++) {
        void *d[UMP_MAX_DEVICES];
        const void *x[UMP_MAX_DEVICES];
        for (int o = 0; o < ndst; o++)
            d[o] = (char *)dst[o] + (gather ? j * seg * esz : 0);
        for (int k = 0; k < n; k++)
            x[k] = (const char *)src[k] + (gather ? 0 : j * seg * esz);
        if (gather)
            coll_reduce_multi(dt, op, d, ndst, &x[j], 1, seg);
        else
            coll_reduce_multi(dt, op, &d[j], 1, x, n, seg);
    }
}

void coll_reduce(int dt, int op, void *dst, const void *const *src, int n,
                 size_t count)
{
    coll_reduce_multi(dt, op, &dst, 1, src, n, count);
}

void coll_reduce2(int dt, int op, void *dst, const void *a, const void *b,
                  size_t count)
{
    const void *src[2] = {a, b};
    coll_reduce(dt, op == UMP_AVG ? UMP_SUM : op, dst, src, 2, count);
}

/* buf[i] = FIN(LD(buf[i])) in place, one function per type: element by
 * element, so reading and writing the same place is safe. */
#define DEFINE_FINISH(NAME, T, A, S, LD, ST, FIN)                              \
    static void finish_##NAME(void *buf, size_t count, int n)                  \
    {                                                                          \
        T *b = buf;                                                            \
        for (size_t i = 0; i < count; i++)                                     \
            b[i] = (T)ST(FIN(S, (A)LD(b[i])));                                 \
    }

DEFINE_FINISH(i8, uint8_t, uint8_t, int8_t, LD_ID, ST_ID, FIN_SDIV)
DEFINE_FINISH(u8, uint8_t, uint8_t, uint8_t, LD_ID, ST_ID, FIN_DIV)
DEFINE_FINISH(i32, uint32_t, uint32_t, int32_t, LD_ID, ST_ID, FIN_SDIV)
DEFINE_FINISH(u32, uint32_t, uint32_t, uint32_t, LD_ID, ST_ID, FIN_DIV)
DEFINE_FINISH(i64, uint64_t, uint64_t, int64_t, LD_ID, ST_ID, FIN_SDIV)
DEFINE_FINISH(u64, uint64_t, uint64_t, uint64_t, LD_ID, ST_ID, FIN_DIV)
DEFINE_FINISH(f16, uint16_t, float, float, LD_HALF, ST_HALF, FIN_FDIV)
DEFINE_FINISH(f32, float, float, float, LD_ID, ST_ID, FIN_FDIV)
DEFINE_FINISH(f64, double, double, double, LD_ID, ST_ID, FIN_FDIV)
DEFINE_FINISH(bf16, uint16_t, float, float, LD_BF16, ST_BF16, FIN_FDIV)

typedef void finish_fn(void *buf, size_t count, int n);

static finish_fn *const finish_table[COLL_NDTYPE] = {
    finish_i8,  finish_u8,  finish_i32, finish_u32, finish_i64,
    finish_u64, finish_f16, finish_f32, finish_f64, finish_bf16};

void coll_avg_finish(int dt, void *buf, size_t count, int n)
{
    /* n == 1: x / 1 is x, and skipping keeps the bits exactly (a signaling
     * NaN's too), as coll_reduce's copy for one source does */
    if (!coll_dtype_valid(dt) || n <= 1 || count == 0)
        return;
    finish_table[dt](buf, count, n);
}
