/*
 * umpool-bench offload: Belady's optimum for the loop's accesses (contract
 * in offload_opt.h). With the whole sequence known, evicting the item used
 * farthest ahead is optimal (Belady 1966; Mattson et al. 1970), so its
 * miss count is the fewest restores any policy can make: the honest
 * baseline for what the pool moved. Sizes are tiny (tens of items, a few
 * hundred accesses): O(n * cap) is plenty.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>

#include "offload_opt.h"

size_t opt_loop_refs(int tensors, int rounds, int prefetch, int *refs)
{
    size_t n = 0;

    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < tensors; i++) {
            for (int k = 1; k <= prefetch; k++, n++)
                if (refs)
                    refs[n] = (i + k) % tensors;
            if (refs)
                refs[n] = i;
            n++;
        }
    return n;
}

/* The slot of cache[0..len) whose next access is farthest. */
static int farthest(const size_t *next, int len)
{
    int v = 0;

    for (int j = 1; j < len; j++)
        if (next[j] > next[v])
            v = j;
    return v;
}

long opt_misses(const int *refs, size_t n, int nitems, int cap,
                const int *init, int ninit)
{
    bool best = ninit == OPT_BEST_START;

    if (best)
        ninit = 0;
    if (cap < 1 || nitems < 1 || ninit < 0 || ninit > cap ||
        (ninit && !init))
        return -1;
    for (size_t t = 0; t < n; t++)
        if (refs[t] < 0 || refs[t] >= nitems)
            return -1;
    for (int j = 0; j < ninit; j++)
        if (init[j] < 0 || init[j] >= nitems)
            return -1;
    /* after[t]: the next access to refs[t]'s item after t (n: none);
     * first[x]: item x's first access. */
    size_t *after = malloc((n ? n : 1) * sizeof(*after));
    size_t *first = malloc((size_t)nitems * sizeof(*first));
    int *slot = malloc((size_t)nitems * sizeof(*slot)); /* -1: not cached */
    int *cache = malloc((size_t)cap * sizeof(*cache));
    size_t *next = malloc((size_t)cap * sizeof(*next));
    long misses = -1;
    int len = 0;

    if (!after || !first || !slot || !cache || !next)
        goto out;
    for (int x = 0; x < nitems; x++) {
        first[x] = n;
        slot[x] = -1;
    }
    for (size_t t = n; t-- > 0;) {
        after[t] = first[refs[t]];
        first[refs[t]] = t;
    }
    for (int j = 0; j < ninit; j++) {
        if (slot[init[j]] >= 0)
            continue; /* listed twice */
        slot[init[j]] = len;
        cache[len] = init[j];
        next[len++] = first[init[j]];
    }
    misses = 0;
    for (size_t t = 0; t < n; t++) {
        int x = refs[t];

        if (slot[x] >= 0) {
            next[slot[x]] = after[t];
            continue;
        }
        /* Filling a cache that is not full yet: free for the best start
         * (which holds exactly these), a restore otherwise. */
        if (len < cap) {
            misses += !best;
            slot[x] = len;
            cache[len] = x;
            next[len++] = after[t];
            continue;
        }
        int v = farthest(next, len);
        misses++;
        slot[cache[v]] = -1;
        slot[x] = v;
        cache[v] = x;
        next[v] = after[t];
    }
out:
    free(after);
    free(first);
    free(slot);
    free(cache);
    free(next);
    return misses;
}
