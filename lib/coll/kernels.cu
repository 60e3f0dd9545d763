/*
 * The collectives' GPU kernel (its contract: kernel.h). Built by nvcc into
 * a fatbin (sm_90 code, compute_90 PTX for newer GPUs), embedded in the
 * library and loaded with cuModuleLoadData (lib/coll/local.mk): the library
 * links neither libcudart nor libcuda.
 *
 * The element operations are reduce.h's own (half and bfloat16 conversions,
 * IEEE maximum/minimum), compiled for the device, and the fold is
 * coll_reduce's: left to right in the accumulation type, AVG divided once.
 * nvcc runs with -fmad=false -ftz=false -prec-div=true (local.mk): no fused
 * multiply-add could form anyway (each step is one operation), and the
 * other two keep subnormals and IEEE division, as on the host.
 *
 * One launch reduces count elements with a grid-stride loop and stores
 * each result into every destination (or, in the segmented shapes, one
 * such loop per segment); the (type, op) dispatch happens once per
 * thread, outside the loops.
 */
#include "coll/kernel.h"
#include "coll/reduce.h"

namespace {

/* Everything below runs on the device, and on the host in the kernel's
 * host test (tests/test_coll_kernel.cu includes this file), which checks
 * it against coll_reduce_multi for every type, op and alignment. */
#define HD __host__ __device__

enum { CV_ID, CV_HALF, CV_BF16 };

/* Stored type T to accumulation type A and back. */
template <class T, class A, int CV> struct Conv {
    HD static A ld(T x) { return (A)x; }
    HD static T st(A x) { return (T)x; }
};
template <> struct Conv<uint16_t, float, CV_HALF> {
    HD static float ld(uint16_t x) { return coll_half_to_float(x); }
    HD static uint16_t st(float x) { return coll_float_to_half(x); }
};
template <> struct Conv<uint16_t, float, CV_BF16> {
    HD static float ld(uint16_t x) { return coll_bf16_to_float(x); }
    HD static uint16_t st(float x) { return coll_float_to_bf16(x); }
};

/* MAX and MIN: integers compare in their type (signed for the signed
 * ones), the floating types are IEEE maximum/minimum (reduce.h). */
template <class A> HD A vmax(A a, A b) { return a > b ? a : b; }
template <class A> HD A vmin(A a, A b) { return a < b ? a : b; }
template <> HD float vmax(float a, float b) { return coll_max_f32(a, b); }
template <> HD float vmin(float a, float b) { return coll_min_f32(a, b); }
template <> HD double vmax(double a, double b) { return coll_max_f64(a, b); }
template <> HD double vmin(double a, double b) { return coll_min_f64(a, b); }

/* One step of the fold; AVG sums (it divides once, at the end). The cast
 * back to A wraps the integer types as C unsigned arithmetic does. */
template <class A, int OP> HD A step(A a, A b)
{
    switch (OP) {
    case UMP_PROD:
        return (A)(a * b);
    case UMP_MAX:
        return vmax(a, b);
    case UMP_MIN:
        return vmin(a, b);
    default: /* UMP_SUM, UMP_AVG */
        return (A)(a + b);
    }
}

/* AVG's division: integers read the wrapped sum as S (signed for the signed
 * types: -7 / 2 is -3, as NCCL) and truncate; floating types divide in A. */
template <class A, class S> HD A average(A acc, int n)
{
    if constexpr (A(0.5) != A(0))
        return acc / (A)n;
    else
        return (A)((S)acc / n);
}

/* The result of one element from its n inputs x[0..n-1] in fold order. */
template <class T, class A, class S, int CV, int OP> struct Fold {
    typedef Conv<T, A, CV> C;
    A acc;
    HD void take(int k, T x)
    {
        acc = k ? step<A, OP>(acc, C::ld(x)) : C::ld(x);
    }
    /* div: AVG's divisor (n, or kernel.h's avgn) */
    HD T result(int n, int div, T first) const
    {
        if (n == 1 && div <= 1) /* a bit copy, as coll_reduce's (NaNs too) */
            return first;
        return C::st(OP == UMP_AVG ? average<A, S>(acc, div) : acc);
    }
};

/* 16 bytes: one load or store of V elements. */
template <class T> union Vec {
    static const int V = 16 / sizeof(T);
    uint4 u;
    T e[16 / sizeof(T)];
};

/* Memory parallelism: a thread loads this many sources' vectors before it
 * folds them (a GPU hides a load's latency only behind other loads in
 * flight), then the next batch. */
#define BATCH 4

/* One reduction of the first shape (kernel.h): nsrc sources, each soff
 * bytes past its pointer, folded into ndst destinations, each doff bytes
 * past its own; a segment of the other shapes is one of these. */
struct Part {
    const void *const *src;
    void *const *dst;
    size_t soff, doff, count;
    int n, ndst;
    int avgn; /* kernel.h's; 0: n */
};

/* Elements [0, count) of a part, the thread tid of nthreads taking every
 * nthreads-th vector of 16 bytes where every pointer is 16-byte aligned,
 * then every nthreads-th element of what is left. */
template <class T, class A, class S, int CV, int OP>
HD void run(const Part &p, size_t tid, size_t nthreads)
{
    typedef Vec<T> W;
    const int V = W::V, n = p.n, div = p.avgn ? p.avgn : n;
    uintptr_t bits = p.soff | p.doff;
    for (int k = 0; k < n; k++)
        bits |= (uintptr_t)p.src[k];
    for (int o = 0; o < p.ndst; o++)
        bits |= (uintptr_t)p.dst[o];
#define SRC(k) ((const char *)p.src[k] + p.soff)
#define DST(o) ((char *)p.dst[o] + p.doff)
    size_t nvec = bits % 16 ? 0 : p.count / V;
    for (size_t v = tid; v < nvec; v += nthreads) {
        Fold<T, A, S, CV, OP> f[16 / sizeof(T)];
        W first, x[BATCH];
        for (int k0 = 0; k0 < n; k0 += BATCH) {
#pragma unroll
            for (int b = 0; b < BATCH; b++)
                if (k0 + b < n)
                    x[b].u = ((const uint4 *)SRC(k0 + b))[v];
            if (!k0)
                first = x[0];
#pragma unroll
            for (int b = 0; b < BATCH; b++)
                if (k0 + b < n)
#pragma unroll
                    for (int e = 0; e < V; e++)
                        f[e].take(k0 + b, x[b].e[e]);
        }
        W out;
#pragma unroll
        for (int e = 0; e < V; e++)
            out.e[e] = f[e].result(n, div, first.e[e]);
        for (int o = 0; o < p.ndst; o++)
            ((uint4 *)DST(o))[v] = out.u;
    }
    for (size_t i = nvec * V + tid; i < p.count; i += nthreads) {
        Fold<T, A, S, CV, OP> f;
        for (int k = 0; k < n; k++)
            f.take(k, ((const T *)SRC(k))[i]);
        T out = f.result(n, div, ((const T *)SRC(0))[i]);
        for (int o = 0; o < p.ndst; o++)
            ((T *)DST(o))[i] = out;
    }
#undef SRC
#undef DST
}

/* Every part of the call (kernel.h's shapes), one after the other: a
 * thread takes its share of each. */
template <class T, class A, class S, int CV, int OP>
HD void run(const coll_kargs &a, size_t tid, size_t nthreads)
{
    size_t esz = sizeof(T), seg = (size_t)a.seg;
    Part p = {a.src, a.dst, 0, 0, (size_t)a.count, a.n, a.ndst, a.avgn};
    if (a.mode == COLL_KFOLD) {
        run<T, A, S, CV, OP>(p, tid, nthreads);
        return;
    }
    p.count = seg;
    if (a.mode == COLL_KGATHER) /* segment j: source j, every destination */
        for (int j = 0; j < a.n; j++) {
            p.src = &a.src[j];
            p.n = 1;
            p.doff = j * seg * esz;
            run<T, A, S, CV, OP>(p, tid, nthreads);
        }
    else /* COLL_KSPLIT, segment j: every source, destination j */
        for (int j = 0; j < a.ndst; j++) {
            p.dst = &a.dst[j];
            p.ndst = 1;
            p.soff = j * seg * esz;
            run<T, A, S, CV, OP>(p, tid, nthreads);
        }
}

/* The five ops of an integer type: U its unsigned twin (SUM, PROD and
 * AVG's sum wrap there), C the type MAX and MIN compare in. */
template <class U, class C>
HD void run_int(const coll_kargs &a, size_t tid, size_t nth)
{
    switch (a.op) {
    case UMP_SUM: run<U, U, C, CV_ID, UMP_SUM>(a, tid, nth); break;
    case UMP_PROD: run<U, U, C, CV_ID, UMP_PROD>(a, tid, nth); break;
    case UMP_MAX: run<C, C, C, CV_ID, UMP_MAX>(a, tid, nth); break;
    case UMP_MIN: run<C, C, C, CV_ID, UMP_MIN>(a, tid, nth); break;
    case UMP_AVG: run<U, U, C, CV_ID, UMP_AVG>(a, tid, nth); break;
    }
}

/* The five ops of a floating type: T stored, A accumulated in. */
template <class T, class A, int CV>
HD void run_float(const coll_kargs &a, size_t tid, size_t nth)
{
    switch (a.op) {
    case UMP_SUM: run<T, A, A, CV, UMP_SUM>(a, tid, nth); break;
    case UMP_PROD: run<T, A, A, CV, UMP_PROD>(a, tid, nth); break;
    case UMP_MAX: run<T, A, A, CV, UMP_MAX>(a, tid, nth); break;
    case UMP_MIN: run<T, A, A, CV, UMP_MIN>(a, tid, nth); break;
    case UMP_AVG: run<T, A, A, CV, UMP_AVG>(a, tid, nth); break;
    }
}

} // namespace

/* Thread tid of nthreads: its share of the reduction (the kernel's body,
 * callable on the host for the test). */
HD void coll_kernel_body(const coll_kargs &a, size_t tid, size_t nthreads)
{
    switch (a.dt) {
    case UMP_INT8: run_int<uint8_t, int8_t>(a, tid, nthreads); break;
    case UMP_UINT8: run_int<uint8_t, uint8_t>(a, tid, nthreads); break;
    case UMP_INT32: run_int<uint32_t, int32_t>(a, tid, nthreads); break;
    case UMP_UINT32: run_int<uint32_t, uint32_t>(a, tid, nthreads); break;
    case UMP_INT64: run_int<uint64_t, int64_t>(a, tid, nthreads); break;
    case UMP_UINT64: run_int<uint64_t, uint64_t>(a, tid, nthreads); break;
    case UMP_FLOAT16: run_float<uint16_t, float, CV_HALF>(a, tid, nthreads); break;
    case UMP_FLOAT32: run_float<float, float, CV_ID>(a, tid, nthreads); break;
    case UMP_FLOAT64: run_float<double, double, CV_ID>(a, tid, nthreads); break;
    case UMP_BFLOAT16: run_float<uint16_t, float, CV_BF16>(a, tid, nthreads); break;
    }
}

extern "C" __global__ void __launch_bounds__(COLL_KERNEL_THREADS)
ump_coll_reduce(const coll_kargs a)
{
    coll_kernel_body(a, (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                     (size_t)gridDim.x * blockDim.x);
}
