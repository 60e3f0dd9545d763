/*
 * ump_model_read_bw: the cost model of lib/topo/costmodel.c applied to an
 * allocation as it is placed now (chunk by chunk, through ump_ptr_info).
 */
#include "config.h"

#include <errno.h>

#include "mem/pool.h"
#include "front/check.h"
#include "topo/costmodel.h"

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
    /* The links are fixed at creation; the model reads nothing else. */
    ump_place_view_t view;
    policy_view(&pool->place, NULL, &view);
    *gbs_p = cost_read_bw(&view, chunks, reader);
    return 0;
}
