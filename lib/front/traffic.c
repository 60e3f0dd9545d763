/*
 * ump_link_stats and ump_coll_stats: the pool's traffic counters
 * (mem/traffic.h) as the public API says them. Reads only: the tiers and
 * the collectives count.
 */
#include "config.h"

#include <errno.h>

#include "front/check.h"
#include "mem/pool.h"

/* A public location (a device index, UMP_LOC_*) as a traffic table index;
 * -1 when it is none of the pool's. */
static int loc_index(const ump_pool_t *pool, int loc)
{
    if (loc >= 0 && loc < pool->ndev)
        return loc;
    switch (loc) {
    case UMP_LOC_HOST:
        return TRAFFIC_HOST;
    case UMP_LOC_NVME:
        return TRAFFIC_NVME;
    case UMP_LOC_NET:
        return TRAFFIC_NET;
    default:
        return -1;
    }
}

/* The topology's bandwidth of the link from a to b (table indexes), GB/s;
 * 0 where the model has none (NVMe, the network). */
static double link_gbs(const ump_pool_t *pool, int a, int b)
{
    if (a < UMP_MAX_DEVICES && b < UMP_MAX_DEVICES)
        return pool->topo.link[a][b].bw_gbs;
    if (a < UMP_MAX_DEVICES && b == TRAFFIC_HOST)
        return pool->topo.dev[a].host_bw_gbs;
    if (b < UMP_MAX_DEVICES && a == TRAFFIC_HOST)
        return pool->topo.dev[b].host_bw_gbs;
    return 0;
}

UMP_EXPORT int ump_link_stats(ump_pool_t *pool, int src, int dst,
                              ump_link_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_link_stats");
    if (rc)
        return rc;
    int a = loc_index(pool, src), b = loc_index(pool, dst);
    if (a < 0 || b < 0 || a == b || !stats_p) {
        ump_log_error("ump_link_stats: %s",
                      !stats_p ? "stats_p is NULL"
                      : a < 0 || b < 0
                          ? "a location is neither a device of the pool nor "
                            "UMP_LOC_HOST, UMP_LOC_NVME or UMP_LOC_NET"
                          : "src and dst are the same location");
        return -EINVAL;
    }
    *stats_p = (ump_link_stats_t){
        .tier_bytes = traffic_get(&pool->traffic, TRAFFIC_TIER, a, b),
        .coll_bytes = traffic_get(&pool->traffic, TRAFFIC_COLL, a, b),
        .bandwidth_gbs = link_gbs(pool, a, b),
    };
    return 0;
}

UMP_EXPORT int ump_coll_stats(ump_pool_t *pool, int coll,
                              ump_coll_stats_t *stats_p)
{
    int rc = pool_check(pool, "ump_coll_stats");
    if (rc)
        return rc;
    if (coll < 0 || coll >= TRAFFIC_NCOLL || !stats_p) {
        ump_log_error("ump_coll_stats: %s",
                      stats_p ? "not a collective (UMP_COLL_*)"
                              : "stats_p is NULL");
        return -EINVAL;
    }
    struct coll_ctr *c = &pool->coll_ctr[coll];
    *stats_p = (ump_coll_stats_t){
        .calls = atomic_load_explicit(&c->calls, memory_order_relaxed),
        .bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed),
        .timed_calls = atomic_load_explicit(&c->timed_calls,
                                            memory_order_relaxed),
        .timed_bus_bytes = atomic_load_explicit(&c->timed_bus_bytes,
                                                memory_order_relaxed),
        .timed_ns = atomic_load_explicit(&c->timed_ns, memory_order_relaxed),
    };
    return 0;
}
