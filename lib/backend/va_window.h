/*
 * Where a backend puts a pool's address range when it may choose: first
 * in a window of its own, the same in every process, then wherever the
 * kernel or the driver likes. Shared by the sim (mmap) and the cuda
 * backend (cuMemAddressReserve's hint).
 */
#ifndef UMP_BACKEND_VA_WINDOW_H
#define UMP_BACKEND_VA_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One walk over the window's candidate ranges for one reservation. */
struct va_window {
    uintptr_t at;    /* the next candidate's first address (its guard's) */
    uintptr_t span;  /* guard + size + guard, aligned */
    uintptr_t guard; /* free addresses kept on each side */
    uintptr_t al;    /* the alignment of every part */
    unsigned left;   /* candidates still to try */
    bool wrapped;
};

/* Starts a walk for size bytes aligned to al (a power of two), at most
 * tries candidates. */
void va_window_start(struct va_window *w, size_t size, size_t al,
                     unsigned tries);

/* The next candidate: *at_p is the start of [guard][size][guard], each
 * part aligned to al, so the range itself is *at_p + w->guard. false when
 * the walk is over (the caller lets the kernel or driver choose). */
bool va_window_next(struct va_window *w, uintptr_t *at_p);

#endif
