/*
 * The processes' barrier (xbar.h). Sense by generation: a process reads
 * the generation before it counts itself in; the last to arrive resets
 * the count, then moves the generation on and wakes the others, so that a
 * process that sees the new generation sees the count reset too (both
 * sequentially consistent). A waiter whose time runs out marks the
 * generation it waited on as aborted instead, by the same compare-and-swap
 * from that generation: either the release or the abort happens, never
 * both, so every process of a barrier agrees on its outcome. Waiters poll
 * briefly (the others are usually a few microseconds behind), then sleep
 * on the word with a futex that is not process-private: it lies in shared
 * memory.
 */
#include "config.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll/xbar.h"
#include "util/clock.h"
#include "util/poll.h"

/* Polls before a sleep: a few microseconds, without sched_yield, which
 * on a core shared with a busy thread (more processes than cores, a
 * build beside the job) gives that thread a whole time slice, milliseconds
 * a barrier; a sleeper on the futex is woken as soon as the last one
 * arrives instead. */
#define XBAR_SPINS 2000
#define XBAR_NAP_NS 10000000L /* a sleep's longest: the deadline's check */

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
    struct timespec ts = {0, XBAR_NAP_NS};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

bool xbar_aborted(struct xbar *b)
{
    return atomic_load(&b->gen) & XBAR_ABORT;
}

void xbar_abort(struct xbar *b)
{
    atomic_fetch_or(&b->gen, XBAR_ABORT);
    futex_wake_all(&b->gen);
}

bool xbar_wait(struct xbar *b, uint32_t n, double timeout_s)
{
    uint32_t gen = atomic_load(&b->gen);
    if (gen & XBAR_ABORT)
        return false;
    if (atomic_fetch_add(&b->count, 1) + 1 == n) {
        atomic_store(&b->count, 0);
        uint32_t want = gen;
        bool won = atomic_compare_exchange_strong(&b->gen, &want,
                                                  (gen + 1) & ~XBAR_ABORT);
        futex_wake_all(&b->gen);
        return won;
    }
    uint64_t deadline = ump_clock_ns() + (uint64_t)(timeout_s * 1e9);
    /* Released when the generation moved on, even if the next one was
     * given up before this waiter looked: the abort is of gen + 1's
     * wait, not of this one (every process agrees this one passed). */
    for (unsigned spin = 0;; spin++) {
        uint32_t now = atomic_load(&b->gen);
        if (now != gen)
            return (now & ~XBAR_ABORT) != gen;
        if (spin < XBAR_SPINS) {
            ump_cpu_relax();
            continue;
        }
        if (ump_clock_ns() > deadline) {
            uint32_t want = gen;
            if (atomic_compare_exchange_strong(&b->gen, &want,
                                               gen | XBAR_ABORT)) {
                futex_wake_all(&b->gen);
                return false;
            }
            return (want & ~XBAR_ABORT) != gen; /* released first? */
        }
        futex_wait(&b->gen, gen);
    }
}
