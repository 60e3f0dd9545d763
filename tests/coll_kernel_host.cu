/*
 * The collectives' GPU kernel run on the host: this file includes
 * lib/coll/kernels.cu, whose body is __host__ __device__, and calls it for
 * every thread of a made-up grid, one after the other, so that the kernel's
 * logic (type dispatch, 16-byte vectors and the scalar rest, batches of
 * sources, several destinations, in place) is checked here, without a GPU,
 * against coll_reduce_multi, the host reduction whose bits it promises.
 * tests/test_coll_kernel.c holds main; built only with nvcc.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/coll/kernels.cu"

namespace {

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Inputs that reach the corners: random bits, and for the floating types
 * also zeros of both signs, infinities, NaNs and subnormals. */
void fill(unsigned char *p, size_t bytes, int dt, uint64_t seed)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)mix(seed ^ i);
    size_t esz = coll_dtype_size(dt);
    bool fp = dt >= UMP_FLOAT16;
    for (size_t i = 0; fp && i + esz <= bytes; i += esz) {
        uint64_t r = mix(seed * 31 + i) % 16;
        if (r > 3)
            continue;
        /* 0: +0/-0, 1: inf, 2: NaN, 3: the smallest subnormal */
        if (dt == UMP_FLOAT16) {
            static const uint16_t v[4] = {0x8000, 0x7c00, 0x7e01, 0x0001};
            memcpy(p + i, &v[r], 2);
        } else if (dt == UMP_BFLOAT16) {
            static const uint16_t v[4] = {0x8000, 0xff80, 0x7fc1, 0x0001};
            memcpy(p + i, &v[r], 2);
        } else if (dt == UMP_FLOAT32) {
            static const uint32_t v[4] = {0x80000000u, 0x7f800000u,
                                          0x7fc00001u, 0x00000001u};
            memcpy(p + i, &v[r], 4);
        } else {
            static const uint64_t v[4] = {0x8000000000000000ull,
                                          0xfff0000000000000ull,
                                          0x7ff8000000000001ull, 1ull};
            memcpy(p + i, &v[r], 8);
        }
    }
}

bool is_nan(const unsigned char *p, int dt)
{
    uint16_t h;
    uint32_t f;
    uint64_t d;
    switch (dt) {
    case UMP_FLOAT16:
        memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case UMP_BFLOAT16:
        memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    case UMP_FLOAT32:
        memcpy(&f, p, 4);
        return (f & 0x7fffffffu) > 0x7f800000u;
    case UMP_FLOAT64:
        memcpy(&d, p, 8);
        return (d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default:
        return false;
    }
}

} // namespace

/* One case: n sources of count elements, ndst destinations, the grid of
 * nthreads run thread by thread. Every pointer starts at byte off of its
 * buffer, but the one named by skew one element further (skew k < n: source
 * k; skew n + o: destination o; -1: none), so that the kernel must notice a
 * single misaligned pointer. Destination o is source o itself where bit o
 * of inplace is set. Compares every destination with coll_reduce_multi's
 * (NaN matching NaN) and checks that no byte outside the destinations'
 * ranges changed. Returns the number of differences and says where the
 * first is in why. */
extern "C" size_t coll_kernel_host_case(int dt, int op, int n, int ndst,
                                        size_t count, size_t off, int skew,
                                        size_t nthreads, unsigned inplace,
                                        char *why, size_t len)
{
    size_t esz = coll_dtype_size(dt), bytes = count * esz;
    size_t cap = bytes + off + esz + 32;
    size_t room = (cap + 63) / 64 * 64; /* aligned_alloc wants a multiple */
    unsigned char *src[UMP_MAX_DEVICES], *dst[UMP_MAX_DEVICES];
    unsigned char *ref[UMP_MAX_DEVICES], *in[UMP_MAX_DEVICES];
    const void *inp[UMP_MAX_DEVICES];
    void *refp[UMP_MAX_DEVICES];
    size_t soff[UMP_MAX_DEVICES], doff[UMP_MAX_DEVICES], bad = 0;
    coll_kargs a;
    memset(&a, 0, sizeof(a));
    a.count = count;
    a.n = n;
    a.ndst = ndst;
    a.dt = dt;
    a.op = op;
    for (int k = 0; k < n; k++) {
        soff[k] = off + (skew == k ? esz : 0);
        src[k] = (unsigned char *)aligned_alloc(64, room);
        fill(src[k], room, dt, (uint64_t)k << 32 ^ (uint64_t)dt << 8 ^
                                   (uint64_t)op);
        a.src[k] = src[k] + soff[k];
        /* the reference's inputs, and the bytes around them, kept aside
         * (in place overwrites the sources) */
        in[k] = (unsigned char *)malloc(room);
        memcpy(in[k], src[k], room);
        inp[k] = in[k] + soff[k];
    }
    for (int o = 0; o < ndst; o++) {
        bool ip = inplace >> o & 1;
        doff[o] = ip ? soff[o] : off + (skew == n + o ? esz : 0);
        ref[o] = (unsigned char *)malloc(room);
        dst[o] = ip ? src[o] : (unsigned char *)aligned_alloc(64, room);
        if (!ip)
            memset(dst[o], 0xa5, room);
        memcpy(ref[o], dst[o], room); /* the bytes around the range */
        a.dst[o] = dst[o] + doff[o];
        refp[o] = ref[o] + doff[o];
    }
    coll_reduce_multi(dt, op, refp, ndst, inp, n, count);
    for (size_t t = 0; t < nthreads; t++)
        coll_kernel_body(a, t, nthreads);
    for (int o = 0; o < ndst; o++)
        for (size_t b = 0; b < room; b++) {
            bool inside = b >= doff[o] && b < doff[o] + bytes;
            if (inside) {
                if ((b - doff[o]) % esz)
                    continue;
                const unsigned char *g = dst[o] + b, *w = ref[o] + b;
                if (!memcmp(g, w, esz) || (is_nan(g, dt) && is_nan(w, dt)))
                    continue;
                if (!bad++)
                    snprintf(why, len, "destination %d element %zu", o,
                             (b - doff[o]) / esz);
            } else if (dst[o][b] != ref[o][b] && !bad++) {
                snprintf(why, len, "destination %d byte %zu, outside its "
                         "%zu bytes at %zu", o, b, bytes, doff[o]);
            }
        }
    for (int k = 0; k < n; k++) /* sources not written in place: intact */
        if (!(k < ndst && (inplace >> k & 1)) && memcmp(src[k], in[k], room) &&
            !bad++)
            snprintf(why, len, "source %d changed", k);
    for (int k = 0; k < n; k++) {
        free(src[k]);
        free(in[k]);
    }
    for (int o = 0; o < ndst; o++) {
        if (!(inplace >> o & 1))
            free(dst[o]);
        free(ref[o]);
    }
    return bad;
}

/* The segmented shapes (kernel.h) as allgather and reduce-scatter use
 * them: n ranks, seg elements a segment. GATHER: n sources of seg
 * elements, n destinations of n x seg; SPLIT: n sources of n x seg, n
 * destinations of seg. In place (NCCL's layouts), rank j's segment of the
 * bigger buffer is the smaller buffer itself: the source of GATHER, the
 * destination of SPLIT. Every pointer starts off bytes into its buffer.
 * The reference is coll_reduce_multi segment by segment, on copies. */
extern "C" size_t coll_kernel_host_seg_case(int dt, int op, int mode, int n,
                                            size_t seg, size_t off,
                                            size_t nthreads, bool inplace,
                                            char *why, size_t len)
{
    size_t esz = coll_dtype_size(dt), sb = seg * esz;
    bool gather = mode == COLL_KGATHER;
    /* big: the n x seg buffers (destinations of GATHER, sources of SPLIT) */
    size_t room = ((size_t)n * sb + off + 32 + 63) / 64 * 64;
    unsigned char *big[UMP_MAX_DEVICES], *small[UMP_MAX_DEVICES];
    unsigned char *ref[UMP_MAX_DEVICES], *in[UMP_MAX_DEVICES];
    size_t bad = 0;
    coll_kargs a;
    memset(&a, 0, sizeof(a));
    a.count = (uint64_t)n * seg;
    a.seg = seg;
    a.n = a.ndst = n;
    a.dt = dt;
    a.op = op;
    a.mode = mode;
    for (int j = 0; j < n; j++) {
        big[j] = (unsigned char *)aligned_alloc(64, room);
        small[j] = (unsigned char *)aligned_alloc(64, room);
        fill(big[j], room, dt, (uint64_t)j << 32 ^ (uint64_t)dt << 8 ^ 77);
        fill(small[j], room, dt, (uint64_t)j << 40 ^ (uint64_t)op << 8 ^ 5);
        unsigned char *sm = inplace ? big[j] + j * sb : small[j] + off;
        if (gather) {
            a.src[j] = sm;
            a.dst[j] = big[j] + off;
        } else {
            a.src[j] = big[j] + off;
            a.dst[j] = sm;
        }
    }
    if (inplace) /* the small buffers are inside the big ones, at off */
        for (int j = 0; j < n; j++) {
            if (gather)
                a.src[j] = (const char *)a.src[j] + off;
            else
                a.dst[j] = (char *)a.dst[j] + off;
        }
    /* the reference: the whole buffers copied, then each segment made */
    for (int j = 0; j < n; j++) {
        unsigned char *d = gather ? big[j] : (inplace ? big[j] : small[j]);
        ref[j] = (unsigned char *)malloc(room);
        in[j] = (unsigned char *)malloc(room);
        memcpy(ref[j], d, room);
        memcpy(in[j], gather ? (inplace ? big[j] : small[j]) : big[j], room);
    }
    for (int j = 0; j < n; j++) {
        /* the sources' bytes before the kernel: in[k] at the same place */
        const void *x[UMP_MAX_DEVICES];
        void *d[UMP_MAX_DEVICES];
        for (int k = 0; k < n; k++) {
            unsigned char *base = gather ? (inplace ? big[k] : small[k])
                                         : big[k];
            x[k] = in[k] + ((const unsigned char *)a.src[k] - base);
            unsigned char *dbase = gather || inplace ? big[k] : small[k];
            d[k] = ref[k] + ((unsigned char *)a.dst[k] - dbase);
        }
        if (gather) {
            void *dj[UMP_MAX_DEVICES];
            for (int o = 0; o < n; o++)
                dj[o] = (char *)d[o] + j * sb;
            coll_reduce_multi(dt, op, dj, n, &x[j], 1, seg);
        } else {
            const void *xj[UMP_MAX_DEVICES];
            for (int k = 0; k < n; k++)
                xj[k] = (const char *)x[k] + j * sb;
            coll_reduce_multi(dt, op, &d[j], 1, xj, n, seg);
        }
    }
    for (size_t t = 0; t < nthreads; t++)
        coll_kernel_body(a, t, nthreads);
    for (int j = 0; j < n && !bad; j++) {
        unsigned char *d = gather || inplace ? big[j] : small[j];
        for (size_t b = 0; b < room; b++) {
            if (d[b] == ref[j][b])
                continue;
            size_t e = b / esz * esz;
            if (is_nan(d + e, dt) && is_nan(ref[j] + e, dt))
                continue;
            if (!bad++)
                snprintf(why, len, "rank %d's %s buffer, byte %zu", j,
                         gather ? "receive" : inplace ? "send" : "receive",
                         b);
        }
    }
    for (int j = 0; j < n; j++) { /* sources not written: intact */
        unsigned char *sb0 = gather ? small[j] : big[j];
        if (!inplace && memcmp(sb0, in[j], room) && !bad++)
            snprintf(why, len, "rank %d's send buffer changed", j);
        free(big[j]);
        free(small[j]);
        free(ref[j]);
        free(in[j]);
    }
    return bad;
}

/* AVG's own divisor (kernel.h: avgn): one source of count elements at off
 * bytes into its buffer, divided by div into ndst destinations (the first
 * the source itself when inplace). The reference is coll_avg_finish on a
 * copy of the source, whose bits the kernel promises; bytes outside the
 * destinations' ranges must not change. */
extern "C" size_t coll_kernel_host_avgn_case(int dt, int div, int ndst,
                                             size_t count, size_t off,
                                             size_t nthreads, bool inplace,
                                             char *why, size_t len)
{
    size_t esz = coll_dtype_size(dt), bytes = count * esz;
    size_t room = (bytes + off + 32 + 63) / 64 * 64, bad = 0;
    unsigned char *src = (unsigned char *)aligned_alloc(64, room);
    unsigned char *ref = (unsigned char *)malloc(room);
    unsigned char *dst[UMP_MAX_DEVICES];
    coll_kargs a;
    memset(&a, 0, sizeof(a));
    a.count = count;
    a.n = 1;
    a.ndst = ndst;
    a.dt = dt;
    a.op = UMP_AVG;
    a.avgn = div;
    fill(src, room, dt, (uint64_t)dt << 16 ^ (uint64_t)div);
    memcpy(ref, src, room);
    coll_avg_finish(dt, ref + off, count, div);
    a.src[0] = src + off;
    for (int o = 0; o < ndst; o++) {
        dst[o] = inplace && !o ? src : (unsigned char *)aligned_alloc(64, room);
        if (dst[o] != src) {
            /* outside the range: the reference's bytes, to compare below */
            memcpy(dst[o], ref, room);
            memset(dst[o] + off, 0xa5, bytes);
        }
        a.dst[o] = dst[o] + off;
    }
    for (size_t t = 0; t < nthreads; t++)
        coll_kernel_body(a, t, nthreads);
    for (int o = 0; o < ndst; o++)
        for (size_t b = 0; b < room; b++) {
            if (dst[o][b] == ref[b])
                continue;
            size_t e = b < off ? b : off + (b - off) / esz * esz;
            if (b >= off && b < off + bytes && is_nan(dst[o] + e, dt) &&
                is_nan(ref + e, dt))
                continue;
            if (!bad++)
                snprintf(why, len, "destination %d byte %zu", o, b);
        }
    for (int o = 0; o < ndst; o++)
        if (dst[o] != src)
            free(dst[o]);
    if (!inplace && memcmp(src, ref, off) && !bad++)
        snprintf(why, len, "the source's bytes before it changed");
    free(src);
    free(ref);
    return bad;
}
