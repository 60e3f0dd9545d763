/*
 * A barrier of the processes of a shared pool's communicator (shared.c),
 * in memory they all map: a count and a generation, futex-waited.
 */
#ifndef UMP_COLL_XBAR_H
#define UMP_COLL_XBAR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct xbar {
    _Atomic uint32_t count; /* arrivals of this generation */
    /* The futex word: the generation, and XBAR_ABORT once a process gave
     * up. Release and abort are both a compare-and-swap of it from the
     * generation the waiters saw, so exactly one of them wins. */
    _Atomic uint32_t gen;
};
#define XBAR_ABORT 0x80000000u

/* Waits until n processes have called it as often (each process calls
 * the same sequence of waits on b). false when a process gave up, or
 * when timeout_s passed first (then this one gives up: every process's
 * wait fails, now and later). */
bool xbar_wait(struct xbar *b, uint32_t n, double timeout_s);
/* Gives up: every wait on b fails from now on. */
void xbar_abort(struct xbar *b);
/* Has a process given up? */
bool xbar_aborted(struct xbar *b);

#endif
