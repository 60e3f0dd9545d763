/*
 * What the scenarios that run a peer process share (ipc.c, share.c): the
 * peer is this program run again (a fresh process, as a real user's
 * would be: CUDA does not survive fork), talking over two pipes.
 */
#ifndef UMPOOL_BENCH_PEER_H
#define UMPOOL_BENCH_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "umpool.h"

/* Exactly n bytes from fd, or to it; -1 when the other end is gone. */
int peer_read(int fd, void *buf, size_t n);
int peer_write(int fd, const void *buf, size_t n);
/* Runs "/proc/self/exe MODE ARGS... IN OUT" (IN, OUT: the peer's ends of
 * two pipes, appended); *to_p and *from_p are this process's ends. */
pid_t peer_spawn(const char *const *args, int *to_p, int *from_p);
/* Ends the exchange: closes this process's ends (to: -1 when closed
 * already), waits for the peer and returns fail, made 1 (said, naming
 * who) when the peer ended badly. */
int peer_finish(pid_t pid, int to, int from, int fail, const char *who);
/* The median of n times (ns, sorted in place), in microseconds. */
double peer_median_us(uint64_t *v, int n);
/* A copy of size bytes on s, waited for; its time into *t_p. */
int peer_copy(ump_pool_t *pool, void *dst, const void *src, size_t size,
              ump_stream_t s, uint64_t *t_p);

#endif
