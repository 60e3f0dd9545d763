/* The process's count of polling threads and its CPUs (util/poll.h). */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "util/poll.h"

_Atomic int ump_pollers;
_Thread_local bool ump_poll_counted;
_Atomic uint64_t ump_poll_off_until;
_Atomic uint64_t ump_poll_steps;

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
