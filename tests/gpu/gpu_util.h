/*
 * Helpers shared by the GPU tests (tests/gpu/test_gpu_*.c): the SKIP logic,
 * host staging copies (pool memory is not CPU-accessible on cuda), and
 * pattern checks by kernel or on the host. Include after config.h.
 */
#ifndef UMP_GPU_UTIL_H
#define UMP_GPU_UTIL_H

#include <limits.h>

#include "../testutil.h"
#include "gpu_kernels.h"

#define GPU_EXIT_SKIP 77

/* Fails the test unless a kernel wrapper returned 0 (a cudaError_t else). */
#define gpu_ok(call)                                                           \
    do {                                                                       \
        int gpu_rc_ = (call);                                                  \
        if (gpu_rc_ != 0)                                                      \
            fail_msg("%s = %d (%s)", #call, gpu_rc_, gk_strerror(gpu_rc_));   \
    } while (0)

/* Fails the test unless an umpool call returned 0. */
#define ump_ok(call)                                                           \
    do {                                                                       \
        int ump_rc_ = (call);                                                  \
        if (ump_rc_ != 0)                                                      \
            fail_msg("%s = %d (%s)", #call, ump_rc_, ump_strerror(ump_rc_));  \
    } while (0)

/*
 * Called first in main. Exits with 77 (SKIP) and one line saying why when
 * the kernels were not built, when no pool can be made on the cuda backend
 * here (no GPU, no driver: the library logs its own reason as well), or when
 * the CUDA runtime cannot run the kernels. Any other failure to create a
 * pool is an error (exit 1).
 */
static inline void gpu_require(const char *prog)
{
    ump_pool_t *pool = NULL;
    char why[256];
    int n = 0;

    if (!gk_built) {
        printf("SKIP: %s: built without nvcc (configure found no CUDA "
               "compiler)\n", prog);
        exit(GPU_EXIT_SKIP);
    }
    int rc = ump_pool_create("backend:cuda,device_mem:64M", &pool);
    if (rc == -ENODEV || rc == -ENOTSUP) {
        printf("SKIP: %s: no usable GPU: backend:cuda gives %s\n", prog,
               ump_strerror(rc));
        exit(GPU_EXIT_SKIP);
    }
    if (rc != 0) {
        printf("FAIL: %s: ump_pool_create(\"backend:cuda,device_mem:64M\") = "
               "%d (%s)\n", prog, rc, ump_strerror(rc));
        exit(1);
    }
    rc = ump_pool_destroy(pool);
    if (rc != 0) {
        printf("FAIL: %s: ump_pool_destroy = %d (%s)\n", prog, rc,
               ump_strerror(rc));
        exit(1);
    }
    if (!gk_available(&n, why, sizeof(why))) {
        printf("SKIP: %s: %s\n", prog, why);
        exit(GPU_EXIT_SKIP);
    }
}

/* The CUDA runtime ordinal of the pool's device d: found by PCI bus id, the
 * same index when the pool does not know the bus id. */
static inline int gpu_rt_device(ump_pool_t *pool, int d)
{
    ump_device_props_t props;
    int rt = d;

    ump_ok(ump_device_props(pool, d, &props));
    if (props.pci_bus_id[0])
        gpu_ok(gk_find_device(props.pci_bus_id, &rt));
    return rt;
}

/* Copies n bytes between pool memory and the host (either way) through the
 * stream, and waits for it. */
static inline void gpu_copy(ump_pool_t *pool, ump_stream_t s, void *dst,
                            const void *src, size_t n)
{
    ump_ok(ump_memcpy_async(pool, dst, src, n, s));
    ump_ok(ump_stream_synchronize(pool, s));
}

/* Readies a result block in pool memory for a checking kernel (and waits:
 * the source is on this stack frame). */
static inline void gpu_result_init(ump_pool_t *pool, ump_stream_t s,
                                   struct gk_result *res)
{
    struct gk_result r = {0, ULLONG_MAX};
    gpu_copy(pool, s, res, &r, sizeof(r));
}

/* Waits for the stream and returns the result block's contents. */
static inline struct gk_result gpu_result_read(ump_pool_t *pool,
                                               ump_stream_t s,
                                               const struct gk_result *res)
{
    struct gk_result r;
    gpu_copy(pool, s, &r, res, sizeof(r));
    return r;
}

/* Counts with a kernel the words of [p, p + n) that differ from seed's
 * pattern; res is a result block in pool memory. */
static inline struct gk_result gpu_count_bad(ump_pool_t *pool, int rtdev,
                                             ump_stream_t s,
                                             struct gk_result *res,
                                             const void *p, size_t n,
                                             uint64_t seed)
{
    gpu_result_init(pool, s, res);
    gpu_ok(gk_check(rtdev, s, p, n, seed, res));
    return gpu_result_read(pool, s, res);
}

#define gpu_assert_pattern(pool, rtdev, s, res, p, n, seed)                    \
    do {                                                                       \
        struct gk_result gpu_r_ =                                              \
            gpu_count_bad((pool), (rtdev), (s), (res), (p), (n), (seed));      \
        if (gpu_r_.bad)                                                        \
            fail_msg("%llu of %zu words at %p differ from pattern %llu, the "  \
                     "first at word %llu",                                     \
                     gpu_r_.bad, (size_t)(n) / 8, (const void *)(p),           \
                     (unsigned long long)(seed), gpu_r_.first);               \
    } while (0)

/* Index of the first word of buf (n bytes) that is not seed's pattern, or
 * n / 8 when all are. */
static inline size_t gpu_host_first_bad(const uint64_t *buf, size_t n,
                                        uint64_t seed)
{
    for (size_t i = 0; i < n / 8; i++)
        if (buf[i] != gk_word(seed, i))
            return i;
    return n / 8;
}

static inline void gpu_host_fill(uint64_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n / 8; i++)
        buf[i] = gk_word(seed, i);
}

static inline bool gpu_overlaps(const void *a, size_t an, const void *b,
                                size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* The fixture of the single-device GPU tests: a pool, a stream on device 0
 * and a result block in pool memory. 0, or -1 when any step fails. */
struct gpu_fixture {
    ump_pool_t *pool;
    ump_stream_t s;
    int rtdev;              /* runtime ordinal of pool device 0 */
    struct gk_result *res; /* in pool memory */
};

static inline int gpu_fixture_open(struct gpu_fixture *f, const char *conf)
{
    memset(f, 0, sizeof(*f));
    if (ump_pool_create(conf, &f->pool) != 0)
        return -1;
    if (ump_stream_create(f->pool, 0, &f->s) != 0)
        return -1;
    f->rtdev = gpu_rt_device(f->pool, 0);
    if (ump_alloc(f->pool, sizeof(*f->res), NULL, (void **)&f->res) != 0)
        return -1;
    return 0;
}

static inline int gpu_fixture_close(struct gpu_fixture *f)
{
    int rc = ump_stream_synchronize(f->pool, f->s);
    rc |= ump_free(f->pool, f->res);
    rc |= ump_stream_destroy(f->pool, f->s);
    rc |= ump_pool_destroy(f->pool);
    return rc ? -1 : 0;
}

#endif
