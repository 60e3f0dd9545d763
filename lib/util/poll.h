/*
 * Bounded polling before a sleep, for the hand-offs that stand in for a
 * GPU's on the sim: a stream's worker taking queued work, a sync, one
 * stream waiting for another, a collective's ranks meeting.
 *
 * A sleeper's wake-up costs tens of microseconds on a virtual machine's
 * idle vCPU (45 to 60 us seen on the 2-core CI machines), where a GPU's
 * stream starts queued work, a kernel's ranks meet at a flag and a sync
 * returns within a microsecond or two (the CUDA driver spins by default).
 * So a wait polls for a while first; one longer than that sleeps and
 * costs no CPU.
 *
 * The pollers must not take the cores from the threads they wait for,
 * which on the sim are the process's own stream workers:
 *  - a process's pollers and its workers running work (ump_poll_busy) are
 *    counted, and a wait polls only while they fit its online CPUs (else
 *    it sleeps at once, as before);
 *  - a poller yields every few microseconds, so that a runnable thread on
 *    its core runs.
 * Other processes' threads are not counted: a core they keep busy can
 * cost a poller a time slice where it yields, and a hand-off then waits
 * about what a sleeper's wake-up does.
 */
#ifndef UMP_UTIL_POLL_H
#define UMP_UTIL_POLL_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"

/* A hand-off's poll: long enough for a copy or a rank's step of a small
 * collective, short enough that an idle wait soon sleeps. */
#define UMP_POLL_NS 20000u

/* The process's threads polling or running work now; whether this thread
 * is counted as running work; how many may be (the online CPUs). */
extern _Atomic int ump_pollers;
extern _Thread_local bool ump_poll_counted;
int ump_poll_cpus(void);

/* One spin of a polling loop: tells the core (and a hyperthread beside
 * it) that this thread only waits. */
static inline void ump_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Around the work of a thread that stands in for a GPU engine (a sim
 * stream's worker): it needs a core, so it is counted with the pollers. */
static inline void ump_poll_busy(bool busy)
{
    ump_poll_counted = busy;
    if (busy)
        atomic_fetch_add(&ump_pollers, 1);
    else
        atomic_fetch_sub(&ump_pollers, 1);
}

/* Spins until done(arg) holds, at most ns nanoseconds; true when it did.
 * False at once when the count would pass the CPUs (a busy thread is
 * counted already). done reads only atomics: the caller holds no lock
 * while it polls, and waits as before (a lock and a condition) on false. */
static inline bool ump_poll(bool (*done)(const void *), const void *arg,
                            uint64_t ns)
{
    if (done(arg))
        return true;
    bool add = !ump_poll_counted;
    if (add ? atomic_fetch_add(&ump_pollers, 1) >= ump_poll_cpus()
            : atomic_load(&ump_pollers) > ump_poll_cpus()) {
        if (add)
            atomic_fetch_sub(&ump_pollers, 1);
        return false;
    }
    uint64_t start = 0;
    bool ok = false;
    for (unsigned i = 0;; i++) {
        if (done(arg)) {
            ok = true;
            break;
        }
        if ((i & 63) == 0) {
            uint64_t t = ump_clock_ns();
            if (!start)
                start = t;
            else if (t - start > ns)
                break;
            sched_yield();
        }
        ump_cpu_relax();
    }
    if (add)
        atomic_fetch_sub(&ump_pollers, 1);
    return ok;
}

#endif
