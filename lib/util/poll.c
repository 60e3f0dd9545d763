/* The process's count of polling threads and its CPUs (util/poll.h). */
#include "config.h"

#include <pthread.h>
#include <unistd.h>

#include "util/poll.h"

_Atomic int ump_pollers;
_Thread_local bool ump_poll_counted;

static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static int cpus = 1;

/* At the first poll, not at load: no constructor does work (the library
 * may be preloaded into programs that never create a pool). */
static void cpus_read(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpus = n > 1 ? (int)n : 1;
}

int ump_poll_cpus(void)
{
    pthread_once(&cpus_once, cpus_read);
    return cpus;
}
