/*
 * umpool-bench placement: for each simulated machine and each policy, the
 * same synthetic multi-GPU workload, and where its memory lands:
 *   - every device allocates its own private tensors (3 x 512 MiB, read by
 *     that device only);
 *   - device 0 allocates shared tensors (2 x 256 MiB, group 1, read by all);
 *   - device 0 allocates one large tensor (1.5 x a device's memory, read by
 *     every device: too big for one device, it must be spread).
 * Each device offers 8 GiB (sim_device_mem), so the large tensor (12 GiB)
 * and the private ones compete for room. The table gives, per policy, the
 * GiB each device holds and the modeled read bandwidth (ump_model_read_bw,
 * see the cost model in README): the private tensors read by their owners,
 * the shared ones by every device (worst and mean), the large one by every
 * device (worst and mean).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "umpool.h"

#define DEV_MEM "8G"
#define NPRIV 3
#define NSHARED 2

struct result {
    int ndev;
    double gib[UMP_MAX_DEVICES];
    double priv_mean, shared_min, shared_mean, big_min, big_mean;
    int failed; /* allocations that got -ENOMEM */
};

struct stat {
    double min, sum;
    int n;
};

static void stat_add(struct stat *s, double v)
{
    if (!s->n || v < s->min)
        s->min = v;
    s->sum += v;
    s->n++;
}

/* Modeled bandwidth of every reader in [first, last] reading p into st. */
static int read_bw(ump_pool_t *pool, void *p, int first, int last,
                   struct stat *st)
{
    for (int r = first; r <= last; r++) {
        double bw;
        int rc = ump_model_read_bw(pool, p, r, &bw);
        if (rc)
            return rc;
        stat_add(st, bw);
    }
    return 0;
}

static void *alloc_on(ump_pool_t *pool, size_t size, int dev, unsigned group,
                      int access, int *failed)
{
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = dev;
    h.group = group;
    h.access = access;
    void *p = NULL;
    int rc = ump_alloc(pool, size, &h, &p);
    if (rc) {
        (*failed)++;
        return NULL;
    }
    return p;
}

static int run_one(const char *topo, const char *policy, struct result *res)
{
    char config[512];
    snprintf(config, sizeof(config),
             "backend:sim,sim_topology:%s,sim_device_mem:%s,policy:%s",
             topo, DEV_MEM, policy);
    ump_pool_t *pool;
    int rc = ump_pool_create(config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: placement: %s: %s\n", config,
                ump_strerror(rc));
        return rc;
    }
    memset(res, 0, sizeof(*res));
    int ndev = ump_device_count(pool);
    res->ndev = ndev;
    void *ptrs[UMP_MAX_DEVICES * NPRIV + NSHARED + 1] = {0};
    int np = 0;
    struct stat priv = {0}, shared = {0}, big = {0};

    /* the large tensor first: the policy decides how it is spread */
    void *large = alloc_on(pool, 12 * GiB, 0, 2, UMP_ACCESS_SHARED,
                           &res->failed);
    ptrs[np++] = large;
    for (int s = 0; s < NSHARED; s++)
        ptrs[np++] = alloc_on(pool, 256 * MiB, 0, 1, UMP_ACCESS_SHARED,
                              &res->failed);
    int priv_first = np;
    for (int d = 0; d < ndev; d++)
        for (int k = 0; k < NPRIV; k++)
            ptrs[np++] = alloc_on(pool, 512 * MiB, d, 0, UMP_ACCESS_PRIVATE,
                                  &res->failed);

    rc = 0;
    if (large)
        rc = read_bw(pool, large, 0, ndev - 1, &big);
    for (int s = 1; !rc && s <= NSHARED; s++)
        if (ptrs[s])
            rc = read_bw(pool, ptrs[s], 0, ndev - 1, &shared);
    for (int i = priv_first; !rc && i < np; i++) {
        int owner = (i - priv_first) / NPRIV;
        if (ptrs[i])
            rc = read_bw(pool, ptrs[i], owner, owner, &priv);
    }
    for (int d = 0; !rc && d < ndev; d++) {
        ump_stats_t st;
        rc = ump_stats(pool, d, &st);
        res->gib[d] = (double)st.live_bytes / (double)GiB;
    }
    res->priv_mean = priv.n ? priv.sum / priv.n : 0;
    res->shared_min = shared.min;
    res->shared_mean = shared.n ? shared.sum / shared.n : 0;
    res->big_min = big.min;
    res->big_mean = big.n ? big.sum / big.n : 0;
    for (int i = 0; i < np; i++)
        if (ptrs[i])
            ump_free(pool, ptrs[i]);
    int drc = ump_pool_destroy(pool);
    if (rc)
        fprintf(stderr, "umpool-bench: placement: %s\n", ump_strerror(rc));
    return rc ? rc : drc;
}

static void print_row(const char *topo, const char *policy,
                      const struct result *r)
{
    printf("%-18s %-11s |", topo, policy);
    char spread[256] = "";
    size_t used = 0;
    for (int d = 0; d < r->ndev; d++)
        used += (size_t)snprintf(spread + used, sizeof(spread) - used,
                                 "%s%.1f", d ? " " : "", r->gib[d]);
    printf(" %-40s | %7.0f | %7.0f %7.0f | %7.0f %7.0f | %d\n", spread,
           r->priv_mean, r->shared_min, r->shared_mean, r->big_min,
           r->big_mean, r->failed);
}

static void print_json_row(bool first, const char *topo, const char *policy,
                           const struct result *r)
{
    printf("%s\n  {\"topology\": \"%s\", \"policy\": \"%s\", \"gib_per_device\": [",
           first ? "" : ",", topo, policy);
    for (int d = 0; d < r->ndev; d++)
        printf("%s%.3f", d ? ", " : "", r->gib[d]);
    printf("], \"private_gbs_mean\": %.1f, \"shared_gbs_min\": %.1f, "
           "\"shared_gbs_mean\": %.1f, \"large_gbs_min\": %.1f, "
           "\"large_gbs_mean\": %.1f, \"enomem\": %d}",
           r->priv_mean, r->shared_min, r->shared_mean, r->big_min,
           r->big_mean, r->failed);
}

int bench_placement(const char *topologies, const char *policies, bool json)
{
    char tlist[512], plist[512];
    snprintf(tlist, sizeof(tlist), "%s",
             topologies ? topologies
                        : "dgx-h200,pcie-4gpu,nvlink-pairs-4gpu");
    snprintf(plist, sizeof(plist), "%s",
             policies ? policies : "local,interleave,balanced,domain");
    if (json)
        printf("{\"scenario\": \"placement\", \"device_mem\": \"%s\", "
               "\"results\": [", DEV_MEM);
    else
        printf("umpool-bench placement: per device %s; workload: %d x 512 MiB "
               "private per device,\n  %d x 256 MiB shared (group 1) and one "
               "12 GiB tensor read by all, from device 0.\n  Bandwidth: "
               "modeled read GB/s (ump_model_read_bw).\n\n"
               "%-18s %-11s | %-40s | %7s | %15s | %15s | %s\n",
               DEV_MEM, NPRIV, NSHARED, "topology", "policy",
               "GiB per device (0 1 2 ...)", "private", "shared min/mean",
               "large min/mean", "ENOMEM");
    bool first = true;
    int failed = 0;
    char *tsave = NULL;
    for (char *t = strtok_r(tlist, ",", &tsave); t;
         t = strtok_r(NULL, ",", &tsave)) {
        char pcopy[512];
        snprintf(pcopy, sizeof(pcopy), "%s", plist);
        char *psave = NULL;
        for (char *p = strtok_r(pcopy, ",", &psave); p;
             p = strtok_r(NULL, ",", &psave)) {
            struct result r;
            if (run_one(t, p, &r)) {
                failed = 1;
                continue;
            }
            if (json)
                print_json_row(first, t, p, &r);
            else
                print_row(t, p, &r);
            first = false;
        }
    }
    if (json)
        printf("\n]}\n");
    return failed;
}
