/* Tests of sockets in the user's socket directory (util/unixsock.h): a
 * fresh directory standing for $XDG_RUNTIME_DIR, made by the group's
 * setup and removed by its teardown. */
#ifndef UMP_TESTS_RUNDIR_H
#define UMP_TESTS_RUNDIR_H

#include <stdio.h>
#include <stdlib.h>

static char rundir[64];

static int rundir_setup(void **state)
{
    (void)state;
    snprintf(rundir, sizeof(rundir), "/tmp/umpool-rundir-XXXXXX");
    if (!mkdtemp(rundir))
        return -1;
    return setenv("XDG_RUNTIME_DIR", rundir, 1);
}

static int rundir_teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
