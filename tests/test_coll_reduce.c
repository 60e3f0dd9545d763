/* The reductions of the collectives (lib/coll/reduce.c) against a plain
 * element-by-element reference of the contract in reduce.h, the integer and
 * floating corner cases, in place, determinism, and the half conversions
 * for every input. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/reduce.h"

/* ---- reference conversions, written independently of reduce.h --------- */

/* m * 2^e, exact (powers of two), without libm: the tests link no -lm. */
static double scale2(double m, int e)
{
    for (; e > 0; e--)
        m *= 2;
    for (; e < 0; e++)
        m /= 2;
    return m;
}

/* The next float away from zero (up) or toward zero (down), by its bits. */
static float float_step(float f, int dir)
{
    return coll_f32_from_bits(coll_f32_bits(f) + (uint32_t)dir);
}

/* The value of a half (fp16 or bf16) from its fields, in double (exact). */
static double ref_half_value(uint16_t h, int mant_bits, int bias)
{
    int exp_bits = 15 - mant_bits;
    unsigned e = (h >> mant_bits) & ((1u << exp_bits) - 1);
    unsigned m = h & ((1u << mant_bits) - 1);
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (e == (1u << exp_bits) - 1)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * scale2(m, 1 - bias - mant_bits);
    return sign * scale2(m + (1u << mant_bits), (int)e - bias - mant_bits);
}

static double ref_f16_value(uint16_t h) { return ref_half_value(h, 10, 15); }
static double ref_bf16_value(uint16_t h) { return ref_half_value(h, 7, 127); }

/* Round a finite or infinite x to the half type, nearest even, by search:
 * the positive halves 0 .. inf are ordered like their bits; inf stands for
 * the next binade's first value (2^16 for fp16, 2^128 for bf16), so that
 * the midpoint past the largest finite half ties to it, as IEEE overflows. */
static uint16_t ref_round(double x, uint16_t inf_bits, double inf_as,
                          double (*value)(uint16_t))
{
    uint16_t sign = signbit(x) ? 0x8000u : 0;
    double a = fabs(x);
    if (a >= inf_as)
        return sign | inf_bits;
    unsigned lo = 0, hi = inf_bits; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = value((uint16_t)lo);
    double vhi = hi == inf_bits ? inf_as : value((uint16_t)hi);
    /* exact in double: the values are close and have few bits */
    double dlo = a - vlo, dhi = vhi - a;
    unsigned r = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u) ? hi : lo;
    return (uint16_t)(sign | r);
}

static uint16_t ref_to_f16(float f)
{
    if (isnan(f))
        return 0x7e00u;
    return ref_round(f, 0x7c00u, 65536.0, ref_f16_value);
}

static uint16_t ref_to_bf16(float f)
{
    if (isnan(f))
        return 0x7fc0u;
    return ref_round(f, 0x7f80u, scale2(1.0, 128), ref_bf16_value);
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
static bool bf16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

/* ---- the reference reduction ------------------------------------------ */

static bool dt_signed(int dt)
{
    return dt == UMP_INT8 || dt == UMP_INT32 || dt == UMP_INT64;
}

static bool dt_float(int dt) { return dt >= UMP_FLOAT16 && dt <= UMP_BFLOAT16; }

/* Integer element i of buf as 64 bits (sign-extended for signed types). */
static uint64_t load_int(int dt, const void *buf, size_t i)
{
    switch (dt) {
    case UMP_INT8: return (uint64_t)(int64_t)((const int8_t *)buf)[i];
    case UMP_UINT8: return ((const uint8_t *)buf)[i];
    case UMP_INT32: return (uint64_t)(int64_t)((const int32_t *)buf)[i];
    case UMP_UINT32: return ((const uint32_t *)buf)[i];
    case UMP_INT64: return (uint64_t)((const int64_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

/* v truncated to the width of dt, sign-extended for signed types. */
static uint64_t wrap(int dt, uint64_t v)
{
    unsigned bits = (unsigned)coll_dtype_size(dt) * 8;
    if (bits == 64)
        return v;
    uint64_t m = ((uint64_t)1 << bits) - 1;
    v &= m;
    if (dt_signed(dt) && (v >> (bits - 1)))
        v |= ~m;
    return v;
}

static int64_t as_signed(uint64_t v)
{
    int64_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

static uint64_t ref_int(int dt, int op, const void *const *src, int n,
                        size_t i)
{
    uint64_t acc = load_int(dt, src[0], i);
    for (int k = 1; k < n; k++) {
        uint64_t x = load_int(dt, src[k], i);
        bool gt = dt_signed(dt) ? as_signed(x) > as_signed(acc) : x > acc;
        bool lt = dt_signed(dt) ? as_signed(x) < as_signed(acc) : x < acc;
        switch (op) {
        case UMP_SUM:
        case UMP_AVG: acc = wrap(dt, acc + x); break;
        case UMP_PROD: acc = wrap(dt, acc * x); break;
        case UMP_MAX: acc = gt ? x : acc; break;
        case UMP_MIN: acc = lt ? x : acc; break;
        }
    }
    if (op == UMP_AVG && n > 1)
        acc = dt_signed(dt) ? (uint64_t)(as_signed(acc) / n) : acc / (uint64_t)n;
    return acc;
}

/* reduce.h's maximum and minimum, spelled with the C library. */
static double ref_max(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    if (a != b)
        return a > b ? a : b;
    return signbit(a) ? b : a;
}

static double ref_min(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    if (a != b)
        return a < b ? a : b;
    return signbit(a) ? a : b;
}

/* Floating element i converted exactly to double. */
static double load_fp(int dt, const void *buf, size_t i)
{
    switch (dt) {
    case UMP_FLOAT16: return ref_f16_value(((const uint16_t *)buf)[i]);
    case UMP_BFLOAT16: return ref_bf16_value(((const uint16_t *)buf)[i]);
    case UMP_FLOAT32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

/* The float-accumulated reference of fp16, bf16 and float: each term is an
 * exact float, every operation rounds to float (the assignments do), then
 * one rounding to the stored type. */
static float ref_float_acc(int dt, int op, const void *const *src, int n,
                           size_t i)
{
    float acc = (float)load_fp(dt, src[0], i);
    for (int k = 1; k < n; k++) {
        float x = (float)load_fp(dt, src[k], i);
        switch (op) {
        case UMP_SUM:
        case UMP_AVG: acc = acc + x; break;
        case UMP_PROD: acc = acc * x; break;
        case UMP_MAX: acc = (float)ref_max(acc, x); break;
        case UMP_MIN: acc = (float)ref_min(acc, x); break;
        }
    }
    if (op == UMP_AVG && n > 1)
        acc = acc / (float)n;
    return acc;
}

static double ref_double(int op, const void *const *src, int n, size_t i)
{
    double acc = load_fp(UMP_FLOAT64, src[0], i);
    for (int k = 1; k < n; k++) {
        double x = load_fp(UMP_FLOAT64, src[k], i);
        switch (op) {
        case UMP_SUM:
        case UMP_AVG: acc = acc + x; break;
        case UMP_PROD: acc = acc * x; break;
        case UMP_MAX: acc = ref_max(acc, x); break;
        case UMP_MIN: acc = ref_min(acc, x); break;
        }
    }
    if (op == UMP_AVG && n > 1)
        acc = acc / n;
    return acc;
}

/* Element i of got equals the reference: bitwise, or both NaN (reduce.h
 * leaves a NaN's sign and payload unspecified). n == 1 is a bit copy. */
static bool element_ok(int dt, int op, const void *got,
                       const void *const *src, int n, size_t i)
{
    if (n == 1) {
        size_t sz = coll_dtype_size(dt);
        return memcmp((const char *)got + i * sz,
                      (const char *)src[0] + i * sz, sz) == 0;
    }
    if (!dt_float(dt))
        return load_int(dt, got, i) == ref_int(dt, op, src, n, i);
    if (dt == UMP_FLOAT64) {
        double want = ref_double(op, src, n, i);
        double g = ((const double *)got)[i];
        return isnan(want) ? isnan(g) : memcmp(&g, &want, sizeof g) == 0;
    }
    float acc = ref_float_acc(dt, op, src, n, i);
    if (dt == UMP_FLOAT32) {
        float g = ((const float *)got)[i];
        return isnan(acc) ? isnan(g) : memcmp(&g, &acc, sizeof g) == 0;
    }
    uint16_t g = ((const uint16_t *)got)[i];
    if (dt == UMP_FLOAT16)
        return isnan(acc) ? f16_is_nan(g) : g == ref_to_f16(acc);
    return isnan(acc) ? bf16_is_nan(g) : g == ref_to_bf16(acc);
}

/* ---- inputs ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    /* xorshift64*: fixed seed, so a failure reproduces */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Fill count elements: integers with random bits (so sums and products
 * wrap); floating types mostly with values of a few bits at varied scales
 * (so sums round, and half sums land on ties), one in 32 random bit
 * patterns (NaN, inf, subnormals reach the whole path). */
static void fill(int dt, void *buf, size_t count)
{
    size_t sz = coll_dtype_size(dt);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rnd();
        if (!dt_float(dt) || (r & 31) == 0) {
            memcpy((char *)buf + i * sz, &r, sz); /* little or big end alike */
            continue;
        }
        double v = scale2((double)((int64_t)(r >> 40) % 2048 - 1024),
                         (int)((r >> 8) % 24) - 16);
        switch (dt) {
        case UMP_FLOAT16: ((uint16_t *)buf)[i] = ref_to_f16((float)v); break;
        case UMP_BFLOAT16: ((uint16_t *)buf)[i] = ref_to_bf16((float)v); break;
        case UMP_FLOAT32: ((float *)buf)[i] = (float)v; break;
        default: ((double *)buf)[i] = v; break;
        }
    }
}

/* ---- every type x op x n x count --------------------------------------- */

#define MAXN 5

static void check_all(const void *got, int dt, int op,
                      const void *const *src, int n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (!element_ok(dt, op, got, src, n, i)) {
            fail_msg("%s %s n=%d count=%zu: element %zu differs",
                     coll_dtype_name(dt), coll_op_name(op), n, count, i);
        }
    }
}

static void test_every_type_op(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 7, 1023, 65537};
    const size_t maxc = 65537;
    /* one element of slack: odd sources start one element in, so vector
     * loads are unaligned too */
    char *bufs[MAXN], *dst = malloc((maxc + 1) * 8), *dst2 = malloc(maxc * 8);
    char *inplace = malloc((maxc + 1) * 8);
    assert_non_null(dst);
    assert_non_null(dst2);
    assert_non_null(inplace);
    for (int k = 0; k < MAXN; k++)
        assert_non_null(bufs[k] = malloc((maxc + 1) * 8));
    for (int dt = 0; dt < COLL_NDTYPE; dt++) {
        size_t sz = coll_dtype_size(dt);
        const void *src[MAXN];
        for (int k = 0; k < MAXN; k++) {
            src[k] = bufs[k] + (k & 1) * sz;
            fill(dt, (void *)src[k], maxc);
        }
        for (int op = 0; op < COLL_NOP; op++)
            for (int n = 1; n <= MAXN; n++)
                for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                    size_t count = counts[c];
                    memset(dst, 0xa5, (maxc + 1) * 8);
                    coll_reduce(dt, op, dst, src, n, count);
                    check_all(dst, dt, op, src, n, count);
                    /* nothing past count is written */
                    assert_int_equal((unsigned char)dst[count * sz], 0xa5);
                    /* the same call, the same bytes */
                    coll_reduce(dt, op, dst2, src, n, count);
                    if (count)
                        assert_memory_equal(dst, dst2, count * sz);
                    /* in place on the first and on the last source */
                    for (int at = 0; at < 2; at++) {
                        int k = at ? n - 1 : 0;
                        const void *isrc[MAXN];
                        memcpy(isrc, src, sizeof isrc);
                        char *ip = inplace + (k & 1) * sz;
                        memcpy(ip, src[k], count * sz);
                        isrc[k] = ip;
                        coll_reduce(dt, op, ip, isrc, n, count);
                        if (count)
                            assert_memory_equal(ip, dst, count * sz);
                    }
                }
    }
    for (int k = 0; k < MAXN; k++)
        free(bufs[k]);
    free(inplace);
    free(dst2);
    free(dst);
}

/* ---- streamed stores ---------------------------------------------------- */

/* coll_reduce_multi_stream with stream on stores around the caches (where
 * the destination is 16-byte aligned) and must give the same bytes as the
 * cached stores: to two destinations, one aligned and one not, a partial
 * last block, and in place on the first source. */
static void test_streamed_stores(void **state)
{
    (void)state;
    const size_t count = 65537, bytes = (count * 8 / 64 + 2) * 64;
    char *bufs[3], *out[2][2], *ip[2];
    for (int k = 0; k < 3; k++)
        assert_non_null(bufs[k] = aligned_alloc(64, bytes));
    for (int s = 0; s < 2; s++) {
        for (int o = 0; o < 2; o++)
            assert_non_null(out[s][o] = aligned_alloc(64, bytes));
        assert_non_null(ip[s] = aligned_alloc(64, bytes));
    }
    for (int dt = 0; dt < COLL_NDTYPE; dt++) {
        size_t sz = coll_dtype_size(dt);
        const void *src[3] = {bufs[0], bufs[1], bufs[2]};
        for (int k = 0; k < 3; k++)
            fill(dt, bufs[k], count);
        for (int op = 0; op < COLL_NOP; op++) {
            for (int s = 0; s < 2; s++) {
                void *dst[2] = {out[s][0], out[s][1] + sz}; /* 2nd unaligned */
                memset(out[s][0], 0xa5, bytes);
                memset(out[s][1], 0xa5, bytes);
                coll_reduce_multi_stream(dt, op, dst, 2, src, 3, count, s);
                check_all(dst[0], dt, op, src, 3, count);
                assert_memory_equal(dst[0], dst[1], count * sz);
                assert_int_equal((unsigned char)out[s][0][count * sz], 0xa5);
                assert_int_equal((unsigned char)out[s][1][sz - 1], 0xa5);
                assert_int_equal(
                    (unsigned char)out[s][1][(count + 1) * sz], 0xa5);
                /* in place: the first source is also the destination */
                memcpy(ip[s], src[0], count * sz);
                const void *isrc[3] = {ip[s], src[1], src[2]};
                void *idst[1] = {ip[s]};
                coll_reduce_multi_stream(dt, op, idst, 1, isrc, 3, count, s);
                assert_memory_equal(ip[s], dst[0], count * sz);
            }
            assert_memory_equal(out[0][0], out[1][0], count * sz);
        }
    }
    for (int k = 0; k < 3; k++)
        free(bufs[k]);
    for (int s = 0; s < 2; s++) {
        free(out[s][0]);
        free(out[s][1]);
        free(ip[s]);
    }
}

/* ---- names and sizes --------------------------------------------------- */

static void test_names_and_sizes(void **state)
{
    (void)state;
    static const char *const dnames[] = {"int8",   "uint8", "int32", "uint32",
                                         "int64",  "uint64", "half", "float",
                                         "double", "bfloat16"};
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    for (int dt = 0; dt < COLL_NDTYPE; dt++) {
        assert_true(coll_dtype_valid(dt));
        assert_string_equal(coll_dtype_name(dt), dnames[dt]);
        assert_int_equal(coll_dtype_size(dt), sizes[dt]);
    }
    assert_string_equal(coll_op_name(UMP_SUM), "sum");
    assert_string_equal(coll_op_name(UMP_PROD), "prod");
    assert_string_equal(coll_op_name(UMP_MAX), "max");
    assert_string_equal(coll_op_name(UMP_MIN), "min");
    assert_string_equal(coll_op_name(UMP_AVG), "avg");
    assert_false(coll_dtype_valid(-1));
    assert_false(coll_dtype_valid(10));
    assert_int_equal(coll_dtype_size(10), 0);
    assert_null(coll_dtype_name(-1));
    assert_false(coll_op_valid(5));
    assert_false(coll_op_valid(-1));
    assert_null(coll_op_name(5));
    /* invalid input does nothing (the callers validate first) */
    int32_t a = 1, b = 2, d = 7;
    const void *src[2] = {&a, &b};
    coll_reduce(10, UMP_SUM, &d, src, 2, 1);
    coll_reduce(UMP_INT32, 5, &d, src, 2, 1);
    coll_reduce(UMP_INT32, UMP_SUM, &d, src, 0, 1);
    assert_int_equal(d, 7);
}

/* ---- integer corner cases ---------------------------------------------- */

/* r_T(op, x, y): coll_reduce of the two one-element sources x, y. */
#define DEFINE_R2(NAME, T, DT)                                                 \
    static T NAME(int op, T x, T y)                                            \
    {                                                                          \
        T d;                                                                   \
        const void *src[2] = {&x, &y};                                         \
        coll_reduce(DT, op, &d, src, 2, 1);                                    \
        return d;                                                              \
    }

DEFINE_R2(r_u8, uint8_t, UMP_UINT8)
DEFINE_R2(r_u32, uint32_t, UMP_UINT32)
DEFINE_R2(r_u64, uint64_t, UMP_UINT64)
DEFINE_R2(r_i64, int64_t, UMP_INT64)

static int32_t r_i32(int op, int32_t x, int32_t y)
{
    int32_t d;
    coll_reduce2(UMP_INT32, op, &d, &x, &y, 1);
    int32_t s[2] = {x, y}, d2;
    const void *src[2] = {&s[0], &s[1]};
    coll_reduce(UMP_INT32, op, &d2, src, 2, 1);
    if (op != UMP_AVG)
        assert_int_equal(d, d2); /* the step is the two-source reduce */
    return d2;
}

static int8_t r_i8(int op, int n, const int8_t *v)
{
    const void *src[8];
    for (int k = 0; k < n; k++)
        src[k] = &v[k];
    int8_t d;
    coll_reduce(UMP_INT8, op, &d, src, n, 1);
    return d;
}

static void test_integer_wrapping(void **state)
{
    (void)state;
    assert_int_equal(r_i32(UMP_SUM, INT32_MAX, 1), INT32_MIN);
    assert_int_equal(r_i32(UMP_SUM, INT32_MIN, -1), INT32_MAX);
    assert_int_equal(r_i32(UMP_PROD, 65536, 65536), 0);
    assert_int_equal(r_i32(UMP_PROD, INT32_MIN, -1), INT32_MIN);
    assert_int_equal(r_i32(UMP_MAX, -5, -3), -3);
    assert_int_equal(r_i32(UMP_MAX, -5, 3), 3);
    assert_int_equal(r_i32(UMP_MIN, -5, 3), -5);
    assert_int_equal(r_i32(UMP_MIN, INT32_MIN, INT32_MAX), INT32_MIN);

    int8_t p1[] = {16, 16}, p2[] = {-128, -1}, p3[] = {100, 3},
           p4[] = {-3, 5, 7};
    assert_int_equal(r_i8(UMP_PROD, 2, p1), 0);     /* 256 wraps */
    assert_int_equal(r_i8(UMP_PROD, 2, p2), -128);  /* 128 wraps */
    assert_int_equal(r_i8(UMP_PROD, 2, p3), 44);    /* 300 - 256 */
    assert_int_equal(r_i8(UMP_PROD, 3, p4), -105);
    int8_t s1[] = {127, 1}, m1[] = {-128, 127, -1};
    assert_int_equal(r_i8(UMP_SUM, 2, s1), -128);
    assert_int_equal(r_i8(UMP_MAX, 3, m1), 127);
    assert_int_equal(r_i8(UMP_MIN, 3, m1), -128);

    /* unsigned compares as unsigned: 0xff is the largest uint8 */
    uint8_t u = r_u8(UMP_MAX, 0xff, 1);
    assert_int_equal(u, 0xff);
    u = r_u8(UMP_MIN, 0xff, 1);
    assert_int_equal(u, 1);
    u = r_u8(UMP_SUM, 0xff, 2);
    assert_int_equal(u, 1);
    uint32_t u32 = r_u32(UMP_MAX, 0x80000000u, 1);
    assert_int_equal(u32, 0x80000000u);
    u32 = r_u32(UMP_SUM, UINT32_MAX, 1);
    assert_int_equal(u32, 0);
    uint64_t u64 = r_u64(UMP_MAX, UINT64_MAX, 1);
    assert_true(u64 == UINT64_MAX);
    int64_t i64 = r_i64(UMP_MAX, INT64_MIN, -1);
    assert_true(i64 == -1);
    i64 = r_i64(UMP_MIN, INT64_MIN, 1);
    assert_true(i64 == INT64_MIN);
    i64 = r_i64(UMP_SUM, INT64_MAX, 1);
    assert_true(i64 == INT64_MIN);
    u64 = r_u64(UMP_PROD, (uint64_t)1 << 32,
                  (uint64_t)1 << 32);
    assert_true(u64 == 0);
}

static void test_integer_avg(void **state)
{
    (void)state;
    /* truncation toward zero, not floor */
    assert_int_equal(r_i32(UMP_AVG, -7, 0), -3);
    assert_int_equal(r_i32(UMP_AVG, 7, 0), 3);
    int8_t a1[] = {-5, 0, 0}, a2[] = {-7, -1, -1}, a3[] = {100, 100};
    assert_int_equal(r_i8(UMP_AVG, 3, a1), -1);
    assert_int_equal(r_i8(UMP_AVG, 3, a2), -3);
    /* the wrapped sum (200 is -56 in int8) is divided, as NCCL */
    assert_int_equal(r_i8(UMP_AVG, 2, a3), -28);
    uint8_t u = r_u8(UMP_AVG, 200, 100);
    assert_int_equal(u, 22); /* 300 wraps to 44 */
    uint32_t u32 = r_u32(UMP_AVG, 0xfffffffeu, 0);
    assert_int_equal(u32, 0x7fffffffu); /* unsigned: no sign */
    int64_t i64 = r_i64(UMP_AVG, -9, 0);
    assert_true(i64 == -4);
    /* step-wise: coll_reduce2 sums, coll_avg_finish divides once */
    int32_t x = -7, y = 0, d;
    coll_reduce2(UMP_INT32, UMP_AVG, &d, &x, &y, 1);
    assert_int_equal(d, -7);
    coll_avg_finish(UMP_INT32, &d, 1, 2);
    assert_int_equal(d, -3);
    int8_t b = -56;
    coll_avg_finish(UMP_INT8, &b, 1, 2);
    assert_int_equal(b, -28);
    coll_avg_finish(UMP_INT8, &b, 1, 1);
    assert_int_equal(b, -28);
}

/* Integer results are bitwise the same step-wise (coll_reduce2 in another
 * order, then coll_avg_finish) as from coll_reduce: what reduce.h promises
 * so that every algorithm agrees. */
static void test_integer_steps_match(void **state)
{
    (void)state;
    enum { N = 5, C = 1031 };
    static uint64_t bufs[N][C], want[C], got[C];
    for (int dt = 0; dt < COLL_NDTYPE; dt++) {
        if (dt_float(dt))
            continue;
        const void *src[N];
        for (int k = 0; k < N; k++) {
            fill(dt, bufs[k], C);
            src[k] = bufs[k];
        }
        for (int op = 0; op < COLL_NOP; op++) {
            coll_reduce(dt, op, want, src, N, C);
            /* a "ring" order: 3, 4, 0, 1, 2, in place */
            coll_reduce2(dt, op, got, bufs[3], bufs[4], C);
            for (int k = 0; k < 3; k++)
                coll_reduce2(dt, op, got, got, bufs[k], C);
            if (op == UMP_AVG)
                coll_avg_finish(dt, got, C, N);
            assert_memory_equal(got, want, C * coll_dtype_size(dt));
        }
    }
}

/* ---- floating corner cases --------------------------------------------- */

static float r_f32(int op, float x, float y)
{
    float d;
    const void *src[2] = {&x, &y};
    coll_reduce(UMP_FLOAT32, op, &d, src, 2, 1);
    return d;
}

static uint16_t r_half(int dt, int op, int n, const uint16_t *v)
{
    const void *src[8];
    for (int k = 0; k < n; k++)
        src[k] = &v[k];
    uint16_t d;
    coll_reduce(dt, op, &d, src, n, 1);
    return d;
}

#define assert_bits_f32(got, want)                                             \
    do {                                                                       \
        float g_ = (got), w_ = (want);                                         \
        assert_memory_equal(&g_, &w_, sizeof g_);                              \
    } while (0)

static void test_float_specials(void **state)
{
    (void)state;
    /* MAX and MIN: NaN wins in either position, -0 < +0 in either order */
    assert_true(isnan(r_f32(UMP_MAX, NAN, 1.0f)));
    assert_true(isnan(r_f32(UMP_MAX, 1.0f, NAN)));
    assert_true(isnan(r_f32(UMP_MIN, NAN, 1.0f)));
    assert_true(isnan(r_f32(UMP_MIN, 1.0f, NAN)));
    assert_bits_f32(r_f32(UMP_MAX, -0.0f, 0.0f), 0.0f);
    assert_bits_f32(r_f32(UMP_MAX, 0.0f, -0.0f), 0.0f);
    assert_bits_f32(r_f32(UMP_MIN, -0.0f, 0.0f), -0.0f);
    assert_bits_f32(r_f32(UMP_MIN, 0.0f, -0.0f), -0.0f);
    assert_bits_f32(r_f32(UMP_MAX, -INFINITY, -3.0f), -3.0f);
    assert_bits_f32(r_f32(UMP_MIN, INFINITY, -3.0f), -3.0f);
    assert_bits_f32(r_f32(UMP_MAX, INFINITY, 1e38f), INFINITY);
    /* SUM: IEEE as it is */
    assert_true(isnan(r_f32(UMP_SUM, INFINITY, -INFINITY)));
    assert_bits_f32(r_f32(UMP_SUM, -0.0f, -0.0f), -0.0f);
    assert_bits_f32(r_f32(UMP_SUM, -0.0f, 0.0f), 0.0f);
    assert_bits_f32(r_f32(UMP_SUM, 3e38f, 3e38f), INFINITY);
    assert_bits_f32(r_f32(UMP_SUM, 0x1p-149f, 0x1p-149f), 0x1p-148f); /* subnormal */
    assert_bits_f32(r_f32(UMP_AVG, 1.0f, 2.0f), 1.5f);
    double dd, da = -0.0, db = 0.0;
    const void *ds[2] = {&da, &db};
    coll_reduce(UMP_FLOAT64, UMP_MAX, &dd, ds, 2, 1);
    assert_false(signbit(dd));
    coll_reduce(UMP_FLOAT64, UMP_MIN, &dd, ds, 2, 1);
    assert_true(signbit(dd));
    da = NAN;
    coll_reduce(UMP_FLOAT64, UMP_MIN, &dd, ds, 2, 1);
    assert_true(isnan(dd));

    /* fp16: 0x7bff = 65504 (the largest), 0x7c00 inf, 0x7e00 NaN,
     * 0x8000 -0, 0x0001 the smallest subnormal 2^-24 */
    uint16_t ovf[] = {0x7bff, 0x7bff};
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 2, ovf), 0x7c00);
    uint16_t tie[] = {0x7bff, 0x4c00}; /* 65504 + 16: the tie to inf */
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 2, tie), 0x7c00);
    uint16_t below[] = {0x7bff, 0x4bff}; /* 65504 + 15.99: stays */
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 2, below), 0x7bff);
    uint16_t back[] = {0x7bff, 0x7bff, 0xfbff}; /* fp32 holds the excursion */
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 3, back), 0x7bff);
    uint16_t sub[] = {0x0001, 0x0001, 0x0001};
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 3, sub), 0x0003);
    uint16_t prod_under[] = {0x0001, 0x3800}; /* 2^-24 * 0.5: tie to 0 */
    assert_int_equal(r_half(UMP_FLOAT16, UMP_PROD, 2, prod_under), 0x0000);
    uint16_t nan_[] = {0x3c00, 0x7e00, 0x3c00};
    assert_true(f16_is_nan(r_half(UMP_FLOAT16, UMP_SUM, 3, nan_)));
    assert_true(f16_is_nan(r_half(UMP_FLOAT16, UMP_MAX, 3, nan_)));
    assert_true(f16_is_nan(r_half(UMP_FLOAT16, UMP_MIN, 3, nan_)));
    uint16_t infs[] = {0x7c00, 0xfc00};
    assert_true(f16_is_nan(r_half(UMP_FLOAT16, UMP_SUM, 2, infs)));
    assert_int_equal(r_half(UMP_FLOAT16, UMP_MAX, 2, infs), 0x7c00);
    uint16_t zeros[] = {0x8000, 0x0000};
    assert_int_equal(r_half(UMP_FLOAT16, UMP_MAX, 2, zeros), 0x0000);
    assert_int_equal(r_half(UMP_FLOAT16, UMP_MIN, 2, zeros), 0x8000);
    /* AVG: fp32 sum / n, rounded once: (1 + 2^-10 + 0) / 2 rounds to
     * 0.5 + 2^-11, which is exact in fp16 */
    uint16_t avg[] = {0x3c01, 0x0000};
    assert_int_equal(r_half(UMP_FLOAT16, UMP_AVG, 2, avg), 0x3801);

    /* bf16: 0x7f7f the largest, 0x7f80 inf */
    uint16_t bovf[] = {0x7f7f, 0x7f7f};
    assert_int_equal(r_half(UMP_BFLOAT16, UMP_SUM, 2, bovf), 0x7f80);
    uint16_t bnan[] = {0x3f80, 0x7fc0};
    assert_true(bf16_is_nan(r_half(UMP_BFLOAT16, UMP_MIN, 2, bnan)));
    uint16_t bz[] = {0x0000, 0x8000};
    assert_int_equal(r_half(UMP_BFLOAT16, UMP_MAX, 2, bz), 0x0000);
    assert_int_equal(r_half(UMP_BFLOAT16, UMP_MIN, 2, bz), 0x8000);
}

/* The half types accumulate in fp32 and round once; coll_reduce2 steps
 * round each time (reduce.h's bound): 2048 + 1 + 1 in fp16. */
static void test_half_single_rounding(void **state)
{
    (void)state;
    uint16_t v[] = {0x6800 /* 2048 */, 0x3c00 /* 1 */, 0x3c00};
    assert_int_equal(r_half(UMP_FLOAT16, UMP_SUM, 3, v), 0x6801); /* 2050 */
    uint16_t d;
    coll_reduce2(UMP_FLOAT16, UMP_SUM, &d, &v[0], &v[1], 1);
    assert_int_equal(d, 0x6800); /* 2049 ties to even: 2048 */
    coll_reduce2(UMP_FLOAT16, UMP_SUM, &d, &d, &v[2], 1);
    assert_int_equal(d, 0x6800);
    /* bf16: 256 + 1 + 1 (8 bits: 1 is half an ulp at 256) */
    uint16_t b[] = {0x4380 /* 256 */, 0x3f80 /* 1 */, 0x3f80};
    assert_int_equal(r_half(UMP_BFLOAT16, UMP_SUM, 3, b), 0x4381); /* 258 */
    coll_reduce2(UMP_BFLOAT16, UMP_SUM, &d, &b[0], &b[1], 1);
    assert_int_equal(d, 0x4380);
    /* the finish of a half AVG: through fp32, rounded once */
    uint16_t h = 0x4200; /* 3 */
    coll_avg_finish(UMP_FLOAT16, &h, 1, 2);
    assert_int_equal(h, 0x3e00); /* 1.5 */
    /* each step is correctly rounded: every pair of a grid of fp16 values,
     * summed by coll_reduce2, is the exact sum rounded once */
    for (uint32_t x = 0; x < 0x10000; x += 97)
        for (uint32_t y = 0; y < 0x10000; y += 89) {
            uint16_t hx = (uint16_t)x, hy = (uint16_t)y;
            if (f16_is_nan(hx) || f16_is_nan(hy))
                continue;
            double s = ref_f16_value(hx) + ref_f16_value(hy); /* exact */
            coll_reduce2(UMP_FLOAT16, UMP_SUM, &d, &hx, &hy, 1);
            if (isnan(s))
                assert_true(f16_is_nan(d));
            else
                assert_int_equal(d, ref_round(s, 0x7c00u, 65536.0,
                                              ref_f16_value));
        }
}

/* ---- conversions -------------------------------------------------------- */

static void test_half_conversions(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 0x10000; i++) {
        uint16_t h = (uint16_t)i;
        float f = coll_half_to_float(h);
        if (f16_is_nan(h)) {
            assert_true(isnan(f));
            /* a quiet NaN comes back with its bits; a signaling one comes
             * back quiet */
            assert_int_equal(coll_float_to_half(f), h | 0x0200u);
        } else {
            assert_true((double)f == ref_f16_value(h));
            assert_int_equal(signbit(f) != 0, (h & 0x8000u) != 0);
            assert_int_equal(coll_float_to_half(f), h);
        }
        float bf = coll_bf16_to_float(h);
        if (bf16_is_nan(h)) {
            assert_true(isnan(bf));
            assert_int_equal(coll_float_to_bf16(bf), h | 0x0040u);
        } else {
            assert_true((double)bf == ref_bf16_value(h));
            assert_int_equal(signbit(bf) != 0, (h & 0x8000u) != 0);
            assert_int_equal(coll_float_to_bf16(bf), h);
        }
    }
}

static void check_to_half(float f)
{
    uint16_t h = coll_float_to_half(f), b = coll_float_to_bf16(f);
    if (isnan(f)) {
        assert_true(f16_is_nan(h));
        assert_true(bf16_is_nan(b));
        return;
    }
    if (h != ref_to_f16(f))
        fail_msg("fp16 of %a (0x%08x): 0x%04x, want 0x%04x", (double)f,
                 coll_f32_bits(f), h, ref_to_f16(f));
    if (b != ref_to_bf16(f))
        fail_msg("bf16 of %a (0x%08x): 0x%04x, want 0x%04x", (double)f,
                 coll_f32_bits(f), b, ref_to_bf16(f));
}

/* float to half against the search reference: around every midpoint
 * between two neighbouring halves (the tie itself, one float ulp on each
 * side), and a stride over all floats. */
static void test_float_to_half_rounding(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 0x7c00; i++) {
        double mid = (ref_f16_value((uint16_t)i) +
                      (i + 1 == 0x7c00 ? 65536.0
                                       : ref_f16_value((uint16_t)(i + 1)))) / 2;
        float m = (float)mid; /* exact: 12 bits */
        assert_true((double)m == mid);
        for (int s = 0; s < 2; s++) {
            float ms = s ? -m : m;
            check_to_half(ms);
            check_to_half(float_step(ms, 1));
            check_to_half(float_step(ms, -1));
        }
    }
    for (uint32_t i = 0; i < 0x7f80; i++) {
        double hi = i + 1 == 0x7f80 ? scale2(1.0, 128)
                                    : ref_bf16_value((uint16_t)(i + 1));
        double mid = (ref_bf16_value((uint16_t)i) + hi) / 2;
        if (mid >= scale2(1.0, 128))
            continue; /* past float's range */
        float m = (float)mid;
        assert_true((double)m == mid);
        check_to_half(m);
        check_to_half(float_step(m, 1));
        check_to_half(float_step(m, -1));
        check_to_half(-m);
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4093)
        check_to_half(coll_f32_from_bits((uint32_t)u));
    check_to_half(INFINITY);
    check_to_half(-INFINITY);
    check_to_half(FLT_MAX);
    check_to_half(-FLT_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_every_type_op),
        cmocka_unit_test(test_streamed_stores),
        cmocka_unit_test(test_integer_wrapping),
        cmocka_unit_test(test_integer_avg),
        cmocka_unit_test(test_integer_steps_match),
        cmocka_unit_test(test_float_specials),
        cmocka_unit_test(test_half_single_rounding),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_float_to_half_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
