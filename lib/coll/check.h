/*
 * The arguments of a collective, checked before anything runs (check.c):
 * every bad one is -EINVAL with one log line naming the call, the rank and
 * the buffer.
 */
#ifndef UMP_COLL_CHECK_H
#define UMP_COLL_CHECK_H

#include "coll/comm.h"

/* One collective call's arguments. */
struct coll_args {
    const char *fn;
    int coll;
    const void *const *send;
    void *const *recv;
    size_t count;
    int dt, op, root;
    const ump_stream_t *streams;
};

/* A buffer of one rank, as a call uses it. */
struct coll_buf {
    const char *p;
    size_t len;
    int rank;
    bool recv;
};

/* Whether global rank g of nall uses its send (used[0]) and receive
 * buffer (used[1]) in call a, and the bytes of each (s: bytes of count
 * elements). */
void coll_buf_use(const struct coll_args *a, int g, int nall, size_t s,
                  bool used[2], size_t len[2]);
/* The buffers rank r passes that the call touches (s: bytes of count
 * elements), into b; how many (0 to 2). */
int coll_buffers(const ump_comm_t *c, const struct coll_args *a, int r,
                 size_t s, struct coll_buf *b);

/* Type, op, root, counts and every buffer: pool memory, aligned to the
 * element size for the reducing collectives, big enough, on
 * devices the rank reaches (or the host tier), not on NVMe, and no two
 * ranks' buffers overlapping (a rank's own send and recv only as in place:
 * the same pointer, or its slice of the other for allgather, gather,
 * reduce-scatter and scatter). *inplace_p: some rank works in place. With
 * count 0 no buffer is looked at. */
int coll_check(ump_comm_t *c, const struct coll_args *a, bool *inplace_p);

/* coll_check, and the streams given: each a stream of its rank's device
 * (two ranks on one stream would wait for each other forever). */
int coll_check_call(ump_comm_t *c, const struct coll_args *a, bool *inplace_p);

#endif
