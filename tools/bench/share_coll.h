/*
 * umpool-bench share's allreduce between its two processes (share_coll.c):
 * the sharer and its peer, each with one rank on device 0 of the shared
 * pool, in one communicator over the bench's pipes.
 */
#ifndef UMPOOL_BENCH_SHARE_COLL_H
#define UMPOOL_BENCH_SHARE_COLL_H

#include <stdio.h>

#include "umpool.h"

/* Runs in both processes at once (me 0: the sharer, 1: the peer; in and
 * out: this process's ends of the pipes to the other): per size, rounds
 * timed allreduces through the shared pool's addresses and as many
 * between the processes the usual way, every result checked. Process 0
 * prints the table to out_f (process 1 passes NULL). *wrong_p: the wrong
 * elements this process received (0 when all are right). 0, or a
 * negative errno when a call failed. */
int share_coll(ump_pool_t *pool, int me, int in, int out, int rounds,
               FILE *out_f, long long *wrong_p);

#endif
