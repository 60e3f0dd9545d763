/* Bounded polling before a sleep (util/poll.h): the poll, the count of
 * polling and busy threads it keeps, the CPUs it counts against. */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/poll.h"

/* A yield that took this long lost the core to a time slice of another
 * thread (a scheduler's slice is milliseconds; a worker's step of a
 * small call, microseconds), and every poll then stops this long. */
#define POLL_LOST_NS 250000u
#define POLL_OFF_NS 100000000u

_Atomic int ump_pollers;
_Thread_local bool ump_poll_counted;
_Atomic uint64_t ump_poll_off_until;
/* Work the process's workers began or ended (ump_poll_busy): a long yield
 * that saw none went to a thread running no worker's operation. */
static _Atomic uint64_t steps;

static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static int cpus = 1;

/* The CPUs this process may run on (its affinity: a job bound to cores
 * by mpirun or taskset), read at the first poll, not at load: no
 * constructor does work (the library may be preloaded into programs that
 * never create a pool). */
static void cpus_read(void)
{
    cpu_set_t set;
    long n;
    /* the process's main thread's: the first poller may be a thread
     * bound to one core */
    if (sched_getaffinity(getpid(), sizeof(set), &set))
        n = sysconf(_SC_NPROCESSORS_ONLN);
    else
        n = CPU_COUNT(&set);
    cpus = n > 1 ? (int)n : 1;
}

int ump_poll_cpus(void)
{
    pthread_once(&cpus_once, cpus_read);
    return cpus;
}

/* The child's one thread is the forking one; the parent's other threads
 * are not there to take themselves off the count. */
void ump_poll_forked(void)
{
    atomic_store(&ump_pollers, ump_poll_counted ? 1 : 0);
}

void ump_poll_busy(bool busy)
{
    ump_poll_counted = busy;
    atomic_fetch_add_explicit(&steps, 1, memory_order_relaxed);
    if (busy)
        atomic_fetch_add(&ump_pollers, 1);
    else
        atomic_fetch_sub(&ump_pollers, 1);
}

bool ump_poll(bool (*done)(const void *), const void *arg, uint64_t ns)
{
    if (done(arg))
        return true;
    uint64_t start = ump_clock_ns();
    if (start < atomic_load_explicit(&ump_poll_off_until, memory_order_relaxed))
        return false;
    bool add = !ump_poll_counted;
    if (add ? atomic_fetch_add(&ump_pollers, 1) >= ump_poll_cpus()
            : atomic_load(&ump_pollers) > ump_poll_cpus()) {
        if (add)
            atomic_fetch_sub(&ump_pollers, 1);
        return false;
    }
    bool ok = false;
    for (unsigned i = 1;; i++) {
        if (done(arg)) {
            ok = true;
            break;
        }
        if ((i & 63) == 0) {
            uint64_t t = ump_clock_ns();
            if (t - start > ns)
                break;
            uint64_t seen = atomic_load_explicit(&steps, memory_order_relaxed);
            sched_yield();
            uint64_t back = ump_clock_ns();
            if (back - t > POLL_LOST_NS &&
                seen == atomic_load_explicit(&steps, memory_order_relaxed)) {
                /* the core went to a thread that is no worker */
                atomic_store_explicit(&ump_poll_off_until, back + POLL_OFF_NS,
                                      memory_order_relaxed);
                ok = done(arg);
                break;
            }
        }
        ump_cpu_relax();
    }
    if (add)
        atomic_fetch_sub(&ump_pollers, 1);
    return ok;
}
