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
 * A poller must not keep a core from the thread it waits for, which on
 * the sim is one of the process's own stream workers:
 *  - a wait polls only while the process's pollers and its workers
 *    running work (ump_poll_busy) are fewer than its CPUs; else it sleeps
 *    at once, as before. (Workers are counted, never refused: more of them
 *    than CPUs take every slot, and one asleep in a wait keeps its slot.)
 *  - a poller yields every few microseconds, so that a runnable thread of
 *    its core runs;
 *  - a yield that took longer than POLL_LOST_NS (poll.c) while no worker of
 *    the process began or ended work means the core went for a time
 *    slice to a thread that runs no worker's operation: another
 *    process's, or the application's own (no core to spare, either way):
 *    every poll of the process then stops for POLL_OFF_NS, so that a
 *    loaded machine pays that once in a while, not at every hand-off (a
 *    poller yielding to a busy thread at each hand-off made a small
 *    collective take milliseconds). A worker that ends its operation
 *    during such a yield hides it (the count moved), and a poller
 *    preempted between its yields is not seen: the rule catches most
 *    lost slices, not all.
 */
#ifndef UMP_UTIL_POLL_H
#define UMP_UTIL_POLL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A hand-off's poll: long enough for a copy or a rank's step of a small
 * collective, short enough that an idle wait soon sleeps. */
#define UMP_POLL_NS 20000u

/* The process's threads polling or running work now, whether this thread
 * is counted as running work, and until when (ump_clock_ns) polls are
 * off: read and reset by tests. How many may be counted: the CPUs the
 * process may run on. */
extern _Atomic int ump_pollers;
extern _Thread_local bool ump_poll_counted;
extern _Atomic uint64_t ump_poll_off_until;
int ump_poll_cpus(void);

/* In a fork child: its one thread is the only one counted, if it was (the
 * parent's pollers and busy workers are not there to uncount themselves,
 * and would keep the child from polling). */
void ump_poll_forked(void);

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
void ump_poll_busy(bool busy);

/* Spins until done(arg) holds, at most ns nanoseconds; true when it did.
 * False at once while polls are off, or when the count would pass the
 * CPUs (a busy thread is counted already). done reads only atomics, so
 * the caller takes no lock of done's state while it polls; on false it
 * waits as before (a lock and a condition). */
bool ump_poll(bool (*done)(const void *), const void *arg, uint64_t ns);

#endif
