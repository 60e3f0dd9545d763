/*
 * One collective call checked against a reference computed here: the cases
 * of test_coll (sim) and test_coll_cuda (the cuda backend on the fake
 * driver) share them. Inputs are small integers (nccl-tests' verifiable
 * style), exact in float too, so every algorithm's result must be bitwise
 * the reference's. Pool memory is written and read by the CPU (the sim's,
 * and the fake driver's, are host memory).
 */
#ifndef UMP_TESTS_COLL_CASES_H
#define UMP_TESTS_COLL_CASES_H

#include "testutil.h"

#include "coll_call.h"

#include "coll/coll.h"
#include "coll/reduce.h"

#define NR_MAX 8

/* Rank k's input element j. */
static inline int32_t val(int k, size_t j)
{
    return (int32_t)((k * 7 + j * 13) % 97) - 48;
}

/* What rank r's recv element i must hold (SUM of int32 or float32). */
static inline int32_t expect(int coll, int n, size_t c, int root, int r,
                             size_t i)
{
    int32_t sum = 0;
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
    case UMP_COLL_REDUCE:
        for (int k = 0; k < n; k++)
            sum += val(k, i);
        return sum;
    case UMP_COLL_BROADCAST:
        return val(root, i);
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        return val((int)(i / c), i % c);
    case UMP_COLL_REDUCE_SCATTER:
        for (int k = 0; k < n; k++)
            sum += val(k, (size_t)r * c + i);
        return sum;
    case UMP_COLL_ALLTOALL:
        return val((int)(i / c), (size_t)r * c + i % c);
    default: /* scatter */
        return val(root, (size_t)r * c + i);
    }
}

/* The same with SUM, done before it returns. */
static inline int call(ump_comm_t *comm, int coll, const void **send,
                       void **recv, size_t c, ump_dtype_t dt, int root)
{
    return coll_case_call(comm, coll, send, recv, c, dt, UMP_SUM, root,
                          NULL);
}

/* Does rank r receive anything in coll? */
static inline bool receives(int coll, int r, int root)
{
    return !(coll == UMP_COLL_REDUCE || coll == UMP_COLL_GATHER) || r == root;
}

/* One collective on comm, checked against expect(). */
static inline void run_case(ump_pool_t *pool, ump_comm_t *comm, int coll,
                            int n, size_t c, ump_dtype_t dt, bool inplace,
                            const char *algo)
{
    int root = coll_rooted(coll) ? n - 1 : 0;
    size_t sn, rn;
    sizes(coll, n, c, &sn, &rn);
    void *sbuf[NR_MAX], *rbuf[NR_MAX];
    const void *send[NR_MAX];
    void *recv[NR_MAX];
    for (int r = 0; r < n; r++) {
        /* In place: one buffer, the send part inside the recv (or the other
         * way round), as NCCL has it. */
        bool ip = inplace && receives(coll, r, root) &&
                  (!coll_rooted(coll) || r == root ||
                   coll == UMP_COLL_BROADCAST);
        size_t big = sn > rn ? sn : rn;
        rbuf[r] = tu_alloc(pool, big * 4, r);
        sbuf[r] = ip ? NULL : tu_alloc(pool, sn * 4, r);
        memset(rbuf[r], 0x5a, big * 4);
        recv[r] = rbuf[r];
        send[r] = sbuf[r];
        if (ip) {
            if (coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_GATHER)
                send[r] = (char *)rbuf[r] + (size_t)r * c * 4;
            else if (coll == UMP_COLL_REDUCE_SCATTER ||
                     coll == UMP_COLL_SCATTER) {
                send[r] = rbuf[r];
                recv[r] = (char *)rbuf[r] + (size_t)r * c * 4;
            } else {
                send[r] = rbuf[r];
            }
        }
        size_t fill = sn;
        for (size_t j = 0; j < fill; j++) {
            int32_t v = val(r, j);
            if (dt == UMP_FLOAT32) {
                float f = (float)v;
                memcpy((char *)send[r] + j * 4, &f, 4);
            } else {
                memcpy((char *)send[r] + j * 4, &v, 4);
            }
        }
    }
    int rc = call(comm, coll, send, recv, c, dt, root);
    if (rc)
        fail_msg("coll %d algo %s n %d count %zu: %s", coll, algo, n, c,
                 ump_strerror(rc));
    for (int r = 0; r < n; r++) {
        if (!receives(coll, r, root))
            continue;
        size_t got_n = coll == UMP_COLL_REDUCE_SCATTER ||
                               coll == UMP_COLL_SCATTER
                           ? c
                           : rn;
        for (size_t i = 0; i < got_n; i++) {
            int32_t want = expect(coll, n, c, root, r, i), got;
            if (dt == UMP_FLOAT32) {
                float f;
                memcpy(&f, (char *)recv[r] + i * 4, 4);
                got = (int32_t)f;
                if (f != (float)want)
                    got = INT32_MIN;
            } else {
                memcpy(&got, (char *)recv[r] + i * 4, 4);
            }
            if (got != want)
                fail_msg("coll %d algo %s n %d count %zu %s rank %d element "
                         "%zu: %d, expected %d", coll, algo, n, c,
                         inplace ? "in place" : "out of place", r, i, got,
                         want);
        }
    }
    for (int r = 0; r < n; r++) {
        tu_free(pool, rbuf[r]);
        if (sbuf[r])
            tu_free(pool, sbuf[r]);
    }
}

/* What rank r of n must receive in coll (count elements of dt, op, root),
 * from each rank's send buffer hs[k] (host memory), into want; false when r
 * receives nothing. The reductions are coll_reduce over the ranks in order
 * (bitwise what every algorithm must give on inputs whose folds are exact,
 * and what one-shot and two-shot give on any). */
static inline bool coll_case_reference(int coll, int dt, int op, int root,
                                       int n, int r, size_t count,
                                       const char *const *hs, char *want)
{
    size_t s = count * coll_dtype_size(dt);
    const void *src[UMP_MAX_DEVICES];
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
    case UMP_COLL_REDUCE:
        if (coll == UMP_COLL_REDUCE && r != root)
            return false;
        for (int k = 0; k < n; k++)
            src[k] = hs[k];
        coll_reduce(dt, op, want, src, n, count);
        return true;
    case UMP_COLL_REDUCE_SCATTER:
        for (int k = 0; k < n; k++)
            src[k] = hs[k] + (size_t)r * s;
        coll_reduce(dt, op, want, src, n, count);
        return true;
    case UMP_COLL_BROADCAST:
        memcpy(want, hs[root], s);
        return true;
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_GATHER:
        if (coll == UMP_COLL_GATHER && r != root)
            return false;
        for (int k = 0; k < n; k++)
            memcpy(want + (size_t)k * s, hs[k], s);
        return true;
    case UMP_COLL_ALLTOALL:
        for (int k = 0; k < n; k++)
            memcpy(want + (size_t)k * s, hs[k] + (size_t)r * s, s);
        return true;
    default: /* scatter */
        memcpy(want, hs[root] + (size_t)r * s, s);
        return true;
    }
}

/* Writes an element of type dt at p: f for the floating types (rounded to
 * the half types), else the low bytes of bits (little-endian: two's
 * complement cut to the width). */
static inline void coll_case_put(void *p, int dt, float f, uint64_t bits)
{
    uint16_t h;
    double d = f;
    switch (dt) {
    case UMP_FLOAT16:
        h = coll_float_to_half(f);
        memcpy(p, &h, 2);
        break;
    case UMP_BFLOAT16:
        h = coll_float_to_bf16(f);
        memcpy(p, &h, 2);
        break;
    case UMP_FLOAT32:
        memcpy(p, &f, 4);
        break;
    case UMP_FLOAT64:
        memcpy(p, &d, 8);
        break;
    default:
        memcpy(p, &bits, coll_dtype_size(dt));
    }
}

#endif
