/*
 * umpool-bench share: a pool shared by processes (ump_pool_share,
 * ump_pool_attach). This process shares a pool; a peer (this program run
 * again, "umpool-bench share-peer") times
 *
 *   attach  ump_pool_attach + ump_pool_destroy (a detach), beside
 *   create  ump_pool_create + ump_pool_destroy of the same configuration
 *           unshared (the baseline: what a private pool costs),
 *
 * then attaches for good and, per size, allocates and fills it and sends
 * --iters handles of it. This process opens each (ump_ipc_open, at the
 * peer's address: the pools share their addresses), copies the peer's
 * bytes into its own memory twice (first: right after the open, which on
 * sim pays the CPU's page faults of the fresh mapping; read: the second),
 * copies its own memory the same way (local, the baseline: the same copy
 * engine on memory that is not shared) and closes. The default configuration makes 2 MiB chunks only
 * (max_chunk:2M), so that an allocation of S is S / 2 MiB chunks and the
 * open's cost per chunk shows. On sim the copies are the CPU's memcpy; on
 * cuda (--config backend:cuda,...) the GPU's copy engine, both processes
 * on one GPU.
 *
 * Last, the two processes time an allreduce between them through the
 * shared pool beside the way between processes that share no pool
 * (share_coll.c). A size of 0 on the pipe starts it in the peer.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "peer.h"
#include "share_coll.h"
#include "umpool.h"

#define SHARE_CONFIG \
    "backend:sim,sim_devices:1,sim_device_mem:4G,max_chunk:2M,warm_chunk:2M"
#define SHARE_ROUNDS 20

static unsigned char pat(size_t i, size_t size)
{
    return (unsigned char)(i * 131 + size);
}

/* What the peer sends first, and per size. */
struct peer_times {
    int rc;
    double attach_us, create_us;
};
struct peer_alloc {
    int rc;
    uint32_t chunks;
    uint64_t addr;
    ump_ipc_handle_t h[SHARE_ROUNDS * 4];
};
/* What the peer says after the allreduce. */
struct peer_coll {
    int32_t rc;
    int64_t wrong;
};

/* The peer's chunks of the allocation at p (walked by ump_ptr_info). */
static uint32_t chunks_of(ump_pool_t *pool, char *p, size_t size)
{
    uint32_t n = 0;
    ump_ptr_info_t info;
    for (char *at = p; at < p + size && !ump_ptr_info(pool, at, &info);
         at = (char *)info.chunk_base + info.chunk_size)
        n++;
    return n;
}

static int peer(const char *name, const char *config, int rounds, int in,
                int out)
{
    struct peer_times t = {0};
    uint64_t ta[SHARE_ROUNDS * 4], tc[SHARE_ROUNDS * 4];
    ump_pool_t *pool;
    for (int i = 0; i < rounds && !t.rc; i++) {
        uint64_t t0 = now_ns();
        t.rc = ump_pool_attach(name, NULL, &pool);
        if (!t.rc)
            t.rc = ump_pool_destroy(pool);
        uint64_t t1 = now_ns();
        if (!t.rc)
            t.rc = ump_pool_create(config, &pool);
        if (!t.rc)
            t.rc = ump_pool_destroy(pool);
        ta[i] = t1 - t0;
        tc[i] = now_ns() - t1;
    }
    if (!t.rc) {
        t.attach_us = peer_median_us(ta, rounds);
        t.create_us = peer_median_us(tc, rounds);
        t.rc = ump_pool_attach(name, NULL, &pool);
    }
    if (peer_write(out, &t, sizeof(t)) || t.rc)
        return 1;
    uint64_t size;
    struct peer_alloc *a = malloc(sizeof(*a));
    if (!a)
        return 1;
    while (peer_read(in, &size, sizeof(size)) == 0) {
        if (!size) { /* the allreduce between the two processes */
            long long wrong = 0;
            struct peer_coll pc = {0, 0};
            pc.rc = share_coll(pool, 1, in, out, rounds, NULL, &wrong);
            pc.wrong = wrong;
            /* Failed: gone at once, so that the sharer's reads end (a
             * reply now could land in the middle of its call's). */
            if (pc.rc || peer_write(out, &pc, sizeof(pc)))
                return 1;
            continue;
        }
        void *p = NULL;
        unsigned char *host = malloc(size);
        ump_stream_t s = NULL;
        memset(a, 0, sizeof(*a));
        a->rc = host ? ump_stream_create(pool, 0, &s) : -ENOMEM;
        if (!a->rc)
            a->rc = ump_alloc(pool, size, NULL, &p);
        for (size_t i = 0; !a->rc && i < size; i++)
            host[i] = pat(i, size);
        if (!a->rc)
            a->rc = ump_memcpy_async(pool, p, host, size, s);
        if (!a->rc)
            a->rc = ump_stream_synchronize(pool, s);
        for (int i = 0; i < rounds && !a->rc; i++)
            a->rc = ump_ipc_get_handle(pool, p, &a->h[i]);
        if (!a->rc) {
            a->chunks = chunks_of(pool, p, size);
            a->addr = (uint64_t)(uintptr_t)p;
        }
        char done;
        if (peer_write(out, a, sizeof(*a)) || peer_read(in, &done, 1))
            return 1;
        if (p)
            ump_free(pool, p);
        if (s)
            ump_stream_destroy(pool, s);
        free(host);
    }
    free(a);
    return ump_pool_destroy(pool) ? 1 : 0;
}

int bench_share_peer(int argc, char **argv)
{
    /* argv: share-peer NAME CONFIG ROUNDS IN OUT */
    if (argc != 7)
        return 2;
    int rounds = atoi(argv[4]);
    if (rounds < 1 || rounds > SHARE_ROUNDS * 4)
        return 2;
    return peer(argv[2], argv[3], rounds, atoi(argv[5]), atoi(argv[6]));
}

/* Opens, reads and closes the peer's allocation rounds times; the row. */
static int one_size(ump_pool_t *pool, ump_stream_t s, size_t size,
                    const struct peer_alloc *a, int rounds)
{
    void *dst = NULL, *own = NULL, *q = NULL;
    uint64_t to[SHARE_ROUNDS * 4], tcl[SHARE_ROUNDS * 4];
    uint64_t tf[SHARE_ROUNDS * 4], tr[SHARE_ROUNDS * 4];
    uint64_t tl[SHARE_ROUNDS * 4], t;
    unsigned char *host = malloc(size);
    size_t wrong = 0;
    bool same = true;
    int rc = host ? ump_alloc(pool, size, NULL, &dst) : -ENOMEM;
    if (!rc)
        rc = ump_alloc(pool, size, NULL, &own);
    for (int i = 0; i < rounds && !rc; i++) {
        uint64_t t0 = now_ns();
        rc = ump_ipc_open(pool, &a->h[i], &q);
        to[i] = now_ns() - t0;
        if (rc)
            break;
        same = same && (uintptr_t)q == a->addr;
        rc = peer_copy(pool, dst, q, size, s, &tf[i]);
        if (!rc)
            rc = peer_copy(pool, dst, q, size, s, &tr[i]);
        if (!rc)
            rc = peer_copy(pool, dst, own, size, s, &tl[i]);
        if (!rc && i == rounds - 1) {
            rc = peer_copy(pool, host, q, size, s, &t);
            for (size_t k = 0; !rc && k < size; k++)
                wrong += host[k] != pat(k, size);
        }
        t0 = now_ns();
        int rc2 = ump_ipc_close(pool, q);
        tcl[i] = now_ns() - t0;
        if (!rc)
            rc = rc2;
    }
    char b[32];
    if (rc) {
        fprintf(stderr, "umpool-bench share: %s: %s\n",
                fmt_size(size, b, sizeof(b)), ump_strerror(rc));
    } else {
        double open = peer_median_us(to, rounds);
        double read = peer_median_us(tr, rounds);
        double local = peer_median_us(tl, rounds);
        printf("  %10s %6u %9.1f %9.2f %9.1f %9.1f %9.1f %9.1f %9.2f %6.2f "
               "%zu%s\n",
               fmt_size(size, b, sizeof(b)), a->chunks, open,
               a->chunks ? open / a->chunks : 0.0,
               peer_median_us(tcl, rounds), peer_median_us(tf, rounds),
               read, local,
               (double)size / (read * 1e3), local / read, wrong,
               same ? "" : " (elsewhere)");
    }
    ump_free(pool, dst);
    ump_free(pool, own);
    free(host);
    return rc || wrong || !same;
}

int bench_share(const struct bench_opts *o)
{
    static const size_t defaults[] = {2 * MiB, 16 * MiB, 64 * MiB,
                                      256 * MiB};
    const char *config = o->config ? o->config : SHARE_CONFIG;
    int rounds = o->iters && o->iters <= SHARE_ROUNDS * 4 ? (int)o->iters
                                                          : SHARE_ROUNDS;
    const size_t *sizes = o->sizes_set ? o->sizes : defaults;
    int nsizes = o->sizes_set ? o->nsizes : 4;
    ump_pool_t *pool;
    ump_stream_t s;
    char name[32], n[16];
    snprintf(name, sizeof(name), "bench-share-%d", (int)getpid());
    int rc = ump_pool_create(config, &pool);
    if (!rc && (rc = ump_pool_share(pool, name)) != 0)
        ump_pool_destroy(pool);
    if (!rc && (rc = ump_stream_create(pool, 0, &s)) != 0)
        ump_pool_destroy(pool);
    if (rc) {
        fprintf(stderr, "umpool-bench share: %s\n", ump_strerror(rc));
        return 1;
    }
    snprintf(n, sizeof(n), "%d", rounds);
    const char *args[] = {"share-peer", name, config, n, NULL};
    int to, from;
    pid_t pid = peer_spawn(args, &to, &from);
    if (pid < 0) {
        ump_stream_destroy(pool, s);
        ump_pool_destroy(pool);
        return 1;
    }
    printf("# umpool-bench share: %s; a peer process attaches, allocates "
           "each size; this one (the sharer) opens it at the peer's "
           "address, copies it into its own memory, closes (medians of %d "
           "rounds)\n", config, rounds);
    struct peer_times t;
    int fail = peer_read(from, &t, sizeof(t)) || t.rc;
    if (fail)
        fprintf(stderr, "umpool-bench share: the peer could not attach: "
                "%s\n", ump_strerror(t.rc));
    else
        printf("# attach_us %.1f (ump_pool_attach + detach) beside "
               "create_us %.1f (ump_pool_create + destroy, unshared): "
               "ratio %.2f\n", t.attach_us, t.create_us,
               t.attach_us / t.create_us);
    printf("# %10s %6s %9s %9s %9s %9s %9s %9s %9s %6s %s\n", "size",
           "chunks", "open_us", "chunk_us", "close_us", "first_us",
           "read_us", "local_us", "read_GB/s", "ratio", "wrong");
    struct peer_alloc *a = malloc(sizeof(*a));
    for (int k = 0; k < nsizes && !fail; k++) {
        uint64_t size = sizes[k];
        if (!a || peer_write(to, &size, sizeof(size)) ||
            peer_read(from, a, sizeof(*a))) {
            fprintf(stderr, "umpool-bench share: the peer is gone\n");
            fail = 1;
            break;
        }
        if (a->rc) {
            fprintf(stderr, "umpool-bench share: the peer's allocation: "
                    "%s\n", ump_strerror(a->rc));
            fail = 1;
            break;
        }
        fail = one_size(pool, s, size, a, rounds);
        if (peer_write(to, "d", 1))
            fail = 1;
    }
    free(a);
    if (!fail) {
        uint64_t coll = 0;
        long long wrong = 0;
        struct peer_coll pc = {-EIO, 0};
        /* A peer that dies must not kill this process mid-write. */
        signal(SIGPIPE, SIG_IGN);
        int crc = peer_write(to, &coll, sizeof(coll))
                      ? -EIO
                      : share_coll(pool, 0, from, to, rounds, stdout, &wrong);
        if (crc) { /* the peer's reads end: it stops and exits */
            close(to);
            to = -1;
        }
        if (peer_read(from, &pc, sizeof(pc)))
            pc.rc = -EIO;
        if (pc.rc)
            fprintf(stderr, "umpool-bench share: the peer's allreduce: %s\n",
                    ump_strerror(pc.rc));
        if (wrong || pc.wrong)
            fprintf(stderr, "umpool-bench share: allreduce: %lld wrong "
                    "elements here, %lld in the peer\n", wrong,
                    (long long)pc.wrong);
        fail = crc || pc.rc || wrong || pc.wrong;
    }
    fail = peer_finish(pid, to, from, fail, "share");
    printf("# chunk_us: open_us / chunks; ratio: local_us / read_us (1.0: "
           "the peer's memory reads as fast as the sharer's own)\n");
    ump_stream_destroy(pool, s);
    ump_pool_destroy(pool);
    return fail;
}
