/*
 * The host tier: pinned host memory (HOST_NUMA chunks of the backend) in
 * power-of-two pieces, within host_limit, with host_reserve bytes pinned
 * ahead of need once the tier is used (pinning runs at a few GB/s), each
 * mapped in the tier's window for every device and the CPU. Pool
 * lock held for all; host_pin and what calls it drop it while pinning.
 */
#ifndef UMP_TIER_HOST_H
#define UMP_TIER_HOST_H

#include "tier/tier.h"

/* A new pinned piece of at most n granules on node, within host_limit.
 * -ENOSPC at the limit, -ENOMEM when the memory cannot be pinned. The lock
 * is dropped while the memory is pinned (counted in host_pinning). */
int host_pin(ump_pool_t *pool, int node, size_t n, struct hpiece **p_p);
/* Where piece p is mapped for every device and the CPU (its window). */
char *host_addr(const ump_pool_t *pool, const struct hpiece *p);
/* The CPU's addresses (in the window) of the granules [from, from+m) of a
 * segment backed by list (pieces at their offsets), into out[0..m). */
void host_cpu_addrs(const ump_pool_t *pool, const struct hpiece *list,
                    size_t from, size_t m, void **out);
/* Unreserves the window (destroy, after host_trim). */
void host_win_fini(ump_pool_t *pool);
/* Releases a piece's memory (and its window mapping) and frees it. */
void host_release(ump_pool_t *pool, struct hpiece *p);
/* Puts a list of pieces on the free list. */
void host_put(ump_pool_t *pool, struct hpiece *list);
/* Pieces adding up to n granules, each placed at its offset: free ones
 * first, then new ones (host_pin); a free piece too big for what is left
 * is released when the limit leaves no room. On error nothing is held. */
int host_get(ump_pool_t *pool, int node, size_t n, struct hpiece **list_p);
/* Bytes the tier could still give: free pieces and room to pin. */
size_t host_room(const ump_pool_t *pool);
/* Keeps host_reserve bytes pinned ahead of need, once the tier is used,
 * in pieces of the last request's size. */
void host_refill(ump_pool_t *pool);
/* Releases every free piece (ump_trim, destroy). */
void host_trim(ump_pool_t *pool);
/* After fork(), in the child: frees the free list's memory only. */
void host_forget(ump_pool_t *pool);

#endif
