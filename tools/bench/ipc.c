/*
 * umpool-bench ipc: one allocation used by another process (ump_ipc_*).
 * The maker (this process) allocates each size on device 0 and fills it;
 * a peer (this program run again, "umpool-bench ipc-peer", a fresh
 * process as a real user's would be: CUDA does not survive fork) gets the
 * handle over a pipe and, per round:
 *
 *   open    ump_ipc_open: connect (first round only), the chunks'
 *           descriptors over the socket, import, map, access
 *   close   ump_ipc_close
 *   first   a device copy (ump_memcpy_async + sync) of the whole
 *           allocation from the imported pointer into the peer's own
 *           memory, right after the open (on sim the CPU's page faults
 *           of the fresh mapping are in it: a GPU has none, its driver
 *           charges the mapping to the open), then
 *   read    the same copy again, beside
 *   local   the same copy from an allocation of the peer's own pool (the
 *           baseline: the same copy engine on memory that is not shared)
 *
 * and checks the bytes. The maker times ump_ipc_get_handle. Medians of
 * --iters rounds (default 20). On sim the copies are the CPU's memcpy;
 * on cuda (--config backend:cuda) the GPU's copy engine, both processes
 * on one GPU.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "peer.h"
#include "umpool.h"

#define IPC_CONFIG "backend:sim,sim_devices:1,sim_device_mem:4G"
#define IPC_ROUNDS 20

/* What the peer sends back per size. */
struct peer_result {
    int rc;       /* 0, or the failing step's error */
    int wrong;    /* bytes not the maker's */
    int same_address;
    double open_us, close_us, first_us, read_us, local_us, first_open_us;
};

static unsigned char pat(size_t i, size_t size)
{
    return (unsigned char)(i * 131 + size);
}

/* A pool of config and a stream on its device 0; 1 (said) when not. */
static int open_pool(const char *config, const char *who, ump_pool_t **pool_p,
                     ump_stream_t *s_p)
{
    int rc = ump_pool_create(config, pool_p);
    if (!rc)
        rc = ump_stream_create(*pool_p, 0, s_p);
    if (rc)
        fprintf(stderr, "%s: %s\n", who, ump_strerror(rc));
    return rc ? 1 : 0;
}

/* The peer: for each (handle, size) read from in, the rounds above, the
 * result written to out. */
static int peer(const char *config, int rounds, int in, int out)
{
    ump_pool_t *pool;
    ump_stream_t s;
    if (open_pool(config, "ipc-peer", &pool, &s))
        return 1;
    ump_ipc_handle_t h[IPC_ROUNDS * 4];
    uint64_t size, addr;
    bool first = true;
    while (peer_read(in, &size, sizeof(size)) == 0) {
        struct peer_result r = {0};
        uint64_t t_open[IPC_ROUNDS * 4], t_close[IPC_ROUNDS * 4];
        uint64_t t_read[IPC_ROUNDS * 4], t_local[IPC_ROUNDS * 4];
        uint64_t t_first[IPC_ROUNDS * 4];
        void *dst = NULL, *own = NULL, *q = NULL;
        unsigned char *host = malloc(size);
        if (peer_read(in, &addr, sizeof(addr)) ||
            peer_read(in, h, sizeof(h[0]) * (size_t)rounds) || !host)
            return 1;
        r.rc = ump_alloc(pool, size, NULL, &dst);
        if (!r.rc)
            r.rc = ump_alloc(pool, size, NULL, &own);
        for (int i = 0; i < rounds && !r.rc; i++) {
            uint64_t t0 = now_ns();
            r.rc = ump_ipc_open(pool, &h[i], &q);
            uint64_t t1 = now_ns();
            if (first) {
                r.first_open_us = (double)(t1 - t0) / 1e3;
                first = false;
            }
            t_open[i] = t1 - t0;
            if (r.rc)
                break;
            r.same_address = (uintptr_t)q == addr;
            uint64_t t;
            r.rc = peer_copy(pool, dst, q, size, s, &t_first[i]);
            if (!r.rc)
                r.rc = peer_copy(pool, dst, q, size, s, &t_read[i]);
            if (!r.rc)
                r.rc = peer_copy(pool, dst, own, size, s, &t_local[i]);
            if (!r.rc && i == rounds - 1) { /* the bytes, once */
                r.rc = peer_copy(pool, host, q, size, s, &t);
                for (size_t k = 0; !r.rc && k < size; k++)
                    r.wrong += host[k] != pat(k, size);
            }
            t0 = now_ns();
            int rc2 = ump_ipc_close(pool, q);
            t_close[i] = now_ns() - t0;
            if (!r.rc)
                r.rc = rc2;
        }
        if (!r.rc) {
            r.open_us = peer_median_us(t_open, rounds);
            r.close_us = peer_median_us(t_close, rounds);
            r.first_us = peer_median_us(t_first, rounds);
            r.read_us = peer_median_us(t_read, rounds);
            r.local_us = peer_median_us(t_local, rounds);
        }
        ump_free(pool, dst);
        ump_free(pool, own);
        free(host);
        if (peer_write(out, &r, sizeof(r)))
            return 1;
    }
    ump_stream_destroy(pool, s);
    return ump_pool_destroy(pool) ? 1 : 0;
}

int bench_ipc_peer(int argc, char **argv)
{
    /* argv: ipc-peer CONFIG ROUNDS IN OUT */
    if (argc != 6)
        return 2;
    int rounds = atoi(argv[3]);
    if (rounds < 1 || rounds > IPC_ROUNDS * 4)
        return 2;
    return peer(argv[2], rounds, atoi(argv[4]), atoi(argv[5]));
}

int bench_ipc(const struct bench_opts *o)
{
    static const size_t defaults[] = {2 * MiB, 16 * MiB, 64 * MiB,
                                      256 * MiB};
    const char *config = o->config ? o->config : IPC_CONFIG;
    int rounds = o->iters && o->iters <= IPC_ROUNDS * 4 ? (int)o->iters
                                                        : IPC_ROUNDS;
    const size_t *sizes = o->sizes_set ? o->sizes : defaults;
    int nsizes = o->sizes_set ? o->nsizes : 4;
    ump_pool_t *pool;
    ump_stream_t s;
    int rc;
    if (open_pool(config, "umpool-bench ipc", &pool, &s))
        return 1;
    char n[16];
    snprintf(n, sizeof(n), "%d", rounds);
    const char *args[] = {"ipc-peer", config, n, NULL};
    int to, from;
    pid_t pid = peer_spawn(args, &to, &from);
    if (pid < 0)
        return 1;
    printf("# umpool-bench ipc: %s; a peer process opens each handle, "
           "copies it into its own memory, closes (medians of %d rounds)\n",
           config, rounds);
    printf("# %10s %9s %9s %9s %9s %9s %9s %9s %6s %s\n", "size",
           "handle_us", "open_us", "close_us", "first_us", "read_us",
           "local_us", "read_GB/s", "ratio", "wrong");
    int fail = 0;
    for (int k = 0; k < nsizes && !fail; k++) {
        size_t size = sizes[k];
        void *p;
        uint64_t t_handle[IPC_ROUNDS * 4];
        ump_ipc_handle_t h[IPC_ROUNDS * 4];
        unsigned char *host = malloc(size);
        rc = host ? ump_alloc(pool, size, NULL, &p) : -ENOMEM;
        for (size_t i = 0; !rc && i < size; i++)
            host[i] = pat(i, size);
        if (!rc)
            rc = ump_memcpy_async(pool, p, host, size, s);
        if (!rc)
            rc = ump_stream_synchronize(pool, s);
        free(host);
        for (int i = 0; i < rounds && !rc; i++) {
            uint64_t t0 = now_ns();
            rc = ump_ipc_get_handle(pool, p, &h[i]);
            t_handle[i] = now_ns() - t0;
        }
        if (rc) {
            fprintf(stderr, "umpool-bench ipc: %zu bytes: %s\n", size,
                    ump_strerror(rc));
            fail = 1;
            break;
        }
        uint64_t sz = size, addr = (uint64_t)(uintptr_t)p;
        struct peer_result r;
        if (peer_write(to, &sz, sizeof(sz)) ||
            peer_write(to, &addr, sizeof(addr)) ||
            peer_write(to, h, sizeof(h[0]) * (size_t)rounds) ||
            peer_read(from, &r, sizeof(r))) {
            fprintf(stderr, "umpool-bench ipc: the peer is gone\n");
            fail = 1;
            break;
        }
        char b[32];
        if (r.rc) {
            fprintf(stderr, "umpool-bench ipc: the peer failed at %s: %s\n",
                    fmt_size(size, b, sizeof(b)), ump_strerror(r.rc));
            fail = 1;
        } else {
            printf("  %10s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.2f %6.2f "
                   "%d%s\n",
                   fmt_size(size, b, sizeof(b)), peer_median_us(t_handle, rounds),
                   r.open_us, r.close_us, r.first_us, r.read_us, r.local_us,
                   (double)size / (r.read_us * 1e3), r.local_us / r.read_us,
                   r.wrong, r.same_address ? "" : " (elsewhere)");
            if (r.wrong)
                fail = 1;
        }
        if (k == 0 && !r.rc)
            printf("#   the first open connects to the maker: %.1f us\n",
                   r.first_open_us);
        ump_free(pool, p);
    }
    fail = peer_finish(pid, to, from, fail, "ipc");
    printf("# ratio: local_us / read_us (1.0: the imported memory reads as "
           "fast as the peer's own)\n");
    ump_stream_destroy(pool, s);
    ump_pool_destroy(pool);
    return fail;
}
