/*
 * holder: a program that holds a pool for umpool-inspect's live test. It
 * makes a pool on the simulated 4-GPU PCIe box, allocates known sizes,
 * moves one offloadable allocation to the host tier, prints what it did
 * and READY, and holds everything until SIGUSR1, SIGTERM or SIGINT; then
 * it frees it all, destroys the pool and prints DONE.
 *
 *   holder [CONFIG]      (default: backend:sim,sim_topology:pcie-4gpu)
 *
 * Output, one item a line: "ALLOC <device> <size> <flags>" for each
 * allocation ump_largest_allocs lists, "SLAB <device> <size>" for the
 * small one, "EVICTED <0|1>" (whether the move to the host tier worked),
 * "ALLREDUCE <ranks> <bytes>" (a one-shot allreduce over every device, its
 * buffers freed again: it leaves only its traffic behind), then
 * "READY <pid>".
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "umpool.h"

#define MIB ((size_t)1 << 20)

static const struct {
    int device;
    size_t size;
    unsigned flags;
} runs[] = {
    {0, 64 * MIB, 0},
    {1, 10 * MIB, UMP_HINT_NO_SPILL},
    {2, 3 * MIB + 1, 0},
    {0, 8 * MIB, UMP_HINT_OFFLOAD}, /* the one moved to the host tier */
};
#define NRUNS (sizeof(runs) / sizeof(runs[0]))
#define SLAB_DEVICE 3
#define SLAB_SIZE 100000

static int fail(const char *what, int rc)
{
    fprintf(stderr, "holder: %s: %s\n", what, ump_strerror(rc));
    return 1;
}

/* One allreduce of COLL_BYTES per rank, a rank on every device, in which
 * every rank reads each peer's whole buffer (one-shot): COLL_BYTES on every
 * link between two devices. */
#define COLL_BYTES MIB
static int allreduce(ump_pool_t *pool)
{
    int n = ump_device_count(pool), rc = n < 0 ? n : 0;
    void *send[UMP_MAX_DEVICES] = {0}, *recv[UMP_MAX_DEVICES] = {0};
    ump_comm_t *comm = NULL;
    for (int r = 0; !rc && r < n; r++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = r;
        rc = ump_alloc(pool, COLL_BYTES, &h, &send[r]);
        if (!rc)
            rc = ump_alloc(pool, COLL_BYTES, &h, &recv[r]);
        if (!rc)
            rc = ump_memset_async(pool, send[r], 0, COLL_BYTES, NULL);
    }
    if (!rc)
        rc = ump_comm_create(pool, n, NULL, "coll_algo:oneshot", &comm);
    if (!rc)
        rc = ump_allreduce(comm, (const void *const *)send, recv,
                           COLL_BYTES / sizeof(float), UMP_FLOAT32, UMP_SUM,
                           NULL);
    if (comm)
        ump_comm_destroy(comm);
    for (int r = 0; r < n; r++) {
        ump_free(pool, send[r]);
        ump_free(pool, recv[r]);
    }
    if (!rc)
        printf("ALLREDUCE %d %zu\n", n, COLL_BYTES);
    return rc;
}

int main(int argc, char **argv)
{
    const char *conf = argc > 1 ? argv[1]
                                : "backend:sim,sim_topology:pcie-4gpu";
    /* Blocked before any thread starts, so that only sigwait sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);

    ump_pool_t *pool;
    int rc = ump_pool_create(conf, &pool);
    if (rc)
        return fail("ump_pool_create", rc);
    void *p[NRUNS], *slab;
    for (size_t i = 0; i < NRUNS; i++) {
        ump_hints_t h = UMP_HINTS_INIT;
        h.device = runs[i].device;
        h.flags = runs[i].flags;
        rc = ump_alloc(pool, runs[i].size, &h, &p[i]);
        if (rc)
            return fail("ump_alloc", rc);
        printf("ALLOC %d %zu %u\n", runs[i].device, runs[i].size,
               runs[i].flags);
    }
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = SLAB_DEVICE;
    rc = ump_alloc(pool, SLAB_SIZE, &h, &slab);
    if (rc)
        return fail("ump_alloc", rc);
    printf("SLAB %d %d\n", SLAB_DEVICE, SLAB_SIZE);
    printf("EVICTED %d\n",
           ump_evict(pool, p[NRUNS - 1], 0, UMP_TIER_HOST) == 0);
    if ((rc = allreduce(pool)))
        return fail("the allreduce", rc);
    printf("READY %d\n", (int)getpid());
    fflush(stdout);

    int sig;
    sigwait(&set, &sig);
    for (size_t i = 0; i < NRUNS; i++)
        if ((rc = ump_free(pool, p[i])))
            return fail("ump_free", rc);
    if ((rc = ump_free(pool, slab)))
        return fail("ump_free", rc);
    if ((rc = ump_pool_destroy(pool)))
        return fail("ump_pool_destroy", rc);
    printf("DONE\n");
    return 0;
}
