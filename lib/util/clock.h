/* The one monotonic clock of the library. */
#ifndef UMP_UTIL_CLOCK_H
#define UMP_UTIL_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC (never jumps with the wall clock). */
static inline uint64_t ump_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Below this a wait spins: a sleep overshoots by the timer slack (50 us by
 * default on Linux) and the scheduler's wake-up. */
#define UMP_CLOCK_SPIN_NS 50000u

/* Returns once ump_clock_ns() has reached deadline (at once when it has):
 * sleeps until UMP_CLOCK_SPIN_NS before it, then spins, so that a model's
 * waits end on time without a core burnt for the long ones. */
static inline void ump_clock_wait_until(uint64_t deadline)
{
    uint64_t now = ump_clock_ns();
    if (now >= deadline)
        return;
    if (deadline - now > UMP_CLOCK_SPIN_NS) {
        uint64_t wake = deadline - UMP_CLOCK_SPIN_NS;
        struct timespec ts = {(time_t)(wake / 1000000000ull),
                              (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR)
            ;
    }
    while (ump_clock_ns() < deadline)
        ;
}

#endif
