/*
 * umpool-bench offload: the fewest restores any eviction policy needs for
 * the oversubscribed loop's accesses (Belady's rule), the baseline its
 * ideal is computed from. No pool here: tests/test_offload.c checks it on
 * cases whose optimum is known.
 */
#ifndef UMP_BENCH_OFFLOAD_OPT_H
#define UMP_BENCH_OFFLOAD_OPT_H

#include <stddef.h>

/* The loop's accesses in order into refs (when not NULL): in each of
 * `rounds` rounds, for visit i of `tensors`, the next `prefetch` tensors
 * (ump_prefetch brings each one up, so each is an access), then tensor i
 * (ump_acquire). Returns their number, rounds * tensors * (prefetch + 1). */
size_t opt_loop_refs(int tensors, int rounds, int prefetch, int *refs);

/* ninit of opt_misses: the best start there is. */
#define OPT_BEST_START (-1)

/* Misses of Belady's rule (at a miss, evict the item whose next access is
 * farthest) for refs[0..n), items 0..nitems-1, through a cache of cap
 * items: the fewest that any policy can have (Belady, 1966). The cache
 * starts holding init[0..ninit) (0 <= ninit <= cap; 0: empty, every first
 * access a miss), or with ninit OPT_BEST_START the best contents there
 * are: the first cap distinct items accessed, whose loads are not counted
 * (a lower bound whatever state an earlier phase left). -1 on bad
 * arguments or out of memory. */
long opt_misses(const int *refs, size_t n, int nitems, int cap,
                const int *init, int ninit);

#endif
