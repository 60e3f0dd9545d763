#include "config.h"

#include "costmodel.h"
#include "policy.h"

double cost_read_bw(const ump_place_view_t *view, const size_t *chunks,
                    int reader)
{
    double total = 0, t_local = 0, t_remote = 0;
    for (int d = 0; d < view->ndev; d++) {
        if (!chunks[d])
            continue;
        double bw = view->links[reader * view->ndev + d].bandwidth_gbs;
        if (bw <= 0)
            return 0;
        total += (double)chunks[d];
        if (d == reader)
            t_local = (double)chunks[d] / bw;
        else
            t_remote += (double)chunks[d] / bw;
    }
    double t = t_local > t_remote ? t_local : t_remote;
    return t > 0 ? total / t : 0;
}

UMP_EXPORT int ump_model_read_bw(ump_pool_t *pool, const void *ptr, int reader,
                                 double *gbs_p)
{
    int rc = pool_check(pool, "ump_model_read_bw");
    if (rc)
        return rc;
    if (!gbs_p || reader < 0 || reader >= pool->ndev) {
        ump_log_error("ump_model_read_bw: %s",
                      gbs_p ? "reader out of range" : "gbs_p is NULL");
        return -EINVAL;
    }
    ump_ptr_info_t info;
    rc = ump_ptr_info(pool, ptr, &info);
    if (rc)
        return rc;
    /* chunks per device, walked like a user would, chunk by chunk */
    size_t chunks[UMP_MAX_DEVICES] = {0};
    const char *p = info.base, *end = p + info.size;
    while (p < end) {
        ump_ptr_info_t c;
        rc = ump_ptr_info(pool, p, &c);
        if (rc)
            return rc;
        if (c.device < 0) { /* the model knows device links only */
            ump_log_error("ump_model_read_bw: %p is on the %s tier, not on a "
                          "device", p, c.tier == UMP_TIER_HOST ? "host"
                                                               : "NVMe");
            return -EAGAIN;
        }
        const char *cend = (const char *)c.chunk_base + c.chunk_size;
        if (cend > end)
            cend = end;
        chunks[c.device] += (size_t)(cend - p);
        p = cend;
    }
    size_t avail[UMP_MAX_DEVICES];
    ump_place_view_t view;
    pthread_mutex_lock(&pool->lock);
    policy_view(pool, &view, avail);
    pthread_mutex_unlock(&pool->lock);
    *gbs_p = cost_read_bw(&view, chunks, reader);
    return 0;
}
