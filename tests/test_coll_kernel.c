/*
 * The collectives' GPU kernel checked on the host against the host
 * reduction (tests/coll_kernel_host.cu runs its body thread by thread):
 * every type, every op, 1 to 8 sources (batches of 4 and the rest), one
 * destination or one per source (two-shot), none, all or some of them in
 * place, 16-byte aligned (vectors and the scalar rest) and not (scalar
 * only), with one pointer an element off the others, one thread and grids
 * that do not divide the work. Bits must be equal (any NaN matching any
 * NaN), and no byte outside the destinations may change. Built without
 * nvcc there is no kernel: SKIP.
 */
#include "config.h"

#include "testutil.h"

#include "coll/kernel.h"
#include "coll/reduce.h"

#ifdef HAVE_KERNEL_HOST_TEST
size_t coll_kernel_host_case(int dt, int op, int n, int ndst, size_t count,
                             size_t off, int skew, size_t nthreads,
                             unsigned inplace, char *why, size_t len);
size_t coll_kernel_host_seg_case(int dt, int op, int mode, int n, size_t seg,
                                 size_t off, size_t nthreads, bool inplace,
                                 char *why, size_t len);
size_t coll_kernel_host_avgn_case(int dt, int div, int ndst, size_t count,
                                  size_t off, size_t nthreads, bool inplace,
                                  char *why, size_t len);

/* The shapes of a case: destinations (1, or n: two-shot), which of them
 * are in place (none, all, every other: mixed), and a pointer one element
 * off (none, the last source, the last destination). */
static void test_every_case(void **state)
{
    (void)state;
    static const int ns[] = {1, 2, 3, 4, 5, 8};
    static const size_t counts[] = {0, 1, 15, 16, 17, 1000, 4099};
    static const size_t threads[] = {1, 7, 256};
    for (int dt = 0; dt < COLL_NDTYPE; dt++)
        for (int op = 0; op < COLL_NOP; op++)
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]);
                     ci++)
                    for (int shape = 0; shape < 9; shape++) {
                        int n = ns[ni];
                        int ndst = shape % 3 == 0 ? 1 : n;
                        unsigned ip = shape % 3 == 1   ? 0
                                      : shape % 3 == 2 ? 0x55555555u
                                                       : (ci & 1u);
                        int skew = shape / 3 == 0   ? -1
                                   : shape / 3 == 1 ? n - 1
                                                    : n + ndst - 1;
                        size_t off = (ci + ni) % 3 ? 0
                                                   : coll_dtype_size(dt);
                        size_t nth = threads[(ci + (size_t)op) % 3];
                        char why[160] = "";
                        size_t bad = coll_kernel_host_case(
                            dt, op, n, ndst, counts[ci], off, skew, nth, ip,
                            why, sizeof(why));
                        if (bad)
                            fail_msg("%s %s, %d sources, %d destinations "
                                     "(in place: %#x), %zu elements at "
                                     "offset %zu, skew %d, %zu threads: %zu "
                                     "differ, first at %s",
                                     coll_dtype_name(dt), coll_op_name(op),
                                     n, ndst, ip, counts[ci], off, skew, nth,
                                     bad, why);
                    }
}

/* The segmented shapes (allgather and reduce-scatter in one launch): every
 * type, a few ops, 1 to 5 ranks, segments of whole vectors and not, at a
 * 16-byte boundary and an element off it, in place and not. */
static void test_segments(void **state)
{
    (void)state;
    static const int ns[] = {1, 2, 3, 4, 5};
    static const size_t segs[] = {0, 1, 7, 16, 33, 1024};
    static const size_t threads[] = {1, 5, 256};
    for (int dt = 0; dt < COLL_NDTYPE; dt++)
        for (int op = 0; op < COLL_NOP; op += 2)
            for (int mode = COLL_KGATHER; mode <= COLL_KSPLIT; mode++)
                for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                    for (size_t si = 0; si < sizeof(segs) / sizeof(segs[0]);
                         si++)
                        for (int shape = 0; shape < 4; shape++) {
                            bool ip = shape & 1;
                            size_t off = shape & 2 ? coll_dtype_size(dt) : 0;
                            size_t nth = threads[(si + ni) % 3];
                            char why[160] = "";
                            size_t bad = coll_kernel_host_seg_case(
                                dt, op, mode, ns[ni], segs[si], off, nth, ip,
                                why, sizeof(why));
                            if (bad)
                                fail_msg("%s %s %s, %d ranks, segments of "
                                         "%zu at offset %zu%s, %zu threads: "
                                         "%zu differ, first at %s",
                                         mode == COLL_KGATHER ? "gather"
                                                              : "split",
                                         coll_dtype_name(dt),
                                         coll_op_name(op), ns[ni], segs[si],
                                         off, ip ? ", in place" : "", nth,
                                         bad, why);
                        }
}

/* AVG's own divisor (kernel.h: avgn, one source): coll_avg_finish's bits
 * for every type, divisors 1 (a bit copy) to 7, one destination or
 * several, in place and not, aligned and an element off. */
static void test_avg_divisor(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 17, 1000};
    for (int dt = 0; dt < COLL_NDTYPE; dt++)
        for (int div = 1; div <= 7; div += 2)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]);
                 ci++)
                for (int shape = 0; shape < 4; shape++) {
                    bool ip = shape & 1;
                    int ndst = shape & 2 ? 3 : 1;
                    size_t off = (ci + (size_t)div) % 2 ? coll_dtype_size(dt)
                                                        : 0;
                    char why[160] = "";
                    size_t bad = coll_kernel_host_avgn_case(
                        dt, div, ndst, counts[ci], off, ci % 2 ? 7 : 256, ip,
                        why, sizeof(why));
                    if (bad)
                        fail_msg("%s avg / %d, %zu elements at offset %zu, "
                                 "%d destinations%s: %zu differ, first at "
                                 "%s", coll_dtype_name(dt), div, counts[ci],
                                 off, ndst, ip ? " (in place)" : "", bad,
                                 why);
                }
}
#else
static void test_every_case(void **state)
{
    (void)state;
    skip(); /* built without nvcc: no kernel */
}

static void test_segments(void **state)
{
    (void)state;
    skip();
}

static void test_avg_divisor(void **state)
{
    (void)state;
    skip();
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case),
        cmocka_unit_test(test_segments),
        cmocka_unit_test(test_avg_divisor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
