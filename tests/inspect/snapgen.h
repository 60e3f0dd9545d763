/*
 * A fixed, made-up snapshot (4 devices of a simulated PCIe box, both
 * tiers, three large allocations) for umpool-inspect's golden tests, its
 * parser tests and the fuzz target's seed corpus. Built with lib/snapshot.c
 * alone, so it follows the layout whatever the library does.
 */
#ifndef SNAPGEN_H
#define SNAPGEN_H

#include <stddef.h>
#include <stdint.h>

struct snapgen_opts {
    uint32_t uid;
    int32_t pid;
    uint64_t pid_start;
    uint64_t pool_id;
    uint32_t pid_ns;
    /* The table sizes; 0: those of the golden snapshot (4 devices, 16
     * allocation rows, 256 map entries). Devices past the fourth repeat
     * the first four. */
    uint32_t ndev, max_allocs, map_cap;
};

/* The snapshot as malloc'ed bytes (free them), *len_p its length; NULL
 * when out of memory. */
void *snapgen_build(const struct snapgen_opts *o, size_t *len_p);

#endif
