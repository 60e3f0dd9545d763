/* The one monotonic clock of the library. */
#ifndef UMP_UTIL_CLOCK_H
#define UMP_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC (never jumps with the wall clock). */
static inline uint64_t ump_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
