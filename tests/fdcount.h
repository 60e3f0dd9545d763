/* How many file descriptors this process has open: the tests that pass
 * descriptors between processes check that none leaks. */
#ifndef UMP_TESTS_FDCOUNT_H
#define UMP_TESTS_FDCOUNT_H

#include <stdio.h>
#include <unistd.h>

static inline int open_fds(void)
{
    int n = 0;
    char path[64];
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n += access(path, F_OK) == 0;
    }
    return n;
}

#endif
