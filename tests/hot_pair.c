/*
 * The allocation hot path as a program calls it, for tests/test_hot_path.sh
 * to count its instructions under callgrind: one sim device, n cached pairs
 * of ump_alloc(size) + ump_free through the public API of the shared
 * library. The first pair fills the thread's cache; the script takes the
 * difference of two run lengths, so start-up and teardown cancel out.
 * With "hints", every ump_alloc has the interposer's (libumpool-preload:
 * the device, UMP_HINT_NO_SPILL, policy "local").
 *   hot_pair N [SIZE [hints]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umpool.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hot_pair N [SIZE [hints]]\n");
        return 2;
    }
    long n = atol(argv[1]);
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 256;
    ump_hints_t h = UMP_HINTS_INIT, *hp = NULL;
    if (argc > 3 && !strcmp(argv[3], "hints")) {
        h.device = 0;
        h.flags = UMP_HINT_NO_SPILL;
        h.policy = "local";
        hp = &h;
    }
    ump_pool_t *pool;
    int rc = ump_pool_create("backend:sim,sim_devices:1,sim_device_mem:1G,"
                             "publish:false", &pool);
    if (rc) {
        fprintf(stderr, "ump_pool_create: %s\n", ump_strerror(rc));
        return 1;
    }
    void *p;
    for (long i = 0; i <= n; i++) {
        if ((rc = ump_alloc(pool, size, hp, &p)) ||
            (rc = ump_free(pool, p))) {
            fprintf(stderr, "pair %ld: %s\n", i, ump_strerror(rc));
            return 1;
        }
    }
    return ump_pool_destroy(pool) ? 1 : 0;
}
