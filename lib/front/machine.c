/* The public view of the pool's machine model (lib/topology.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "mem/pool.h"
#include "front/check.h"

UMP_EXPORT const char *ump_backend_name(ump_pool_t *pool)
{
    return pool ? pool->be->name : NULL;
}

static int check_device(ump_pool_t *pool, int d, const char *fn)
{
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (d < 0 || d >= pool->ndev) {
        ump_log_error("%s: device %d out of range (0..%d)", fn, d,
                      pool->ndev - 1);
        return -EINVAL;
    }
    return 0;
}

UMP_EXPORT int ump_device_props(ump_pool_t *pool, int device,
                                ump_device_props_t *props_p)
{
    int rc = check_device(pool, device, "ump_device_props");
    if (rc)
        return rc;
    if (!props_p) {
        ump_log_error("ump_device_props: props_p is NULL");
        return -EINVAL;
    }
    const struct topo_device *d = &pool->topo.dev[device];
    ump_device_props_t p;
    memset(&p, 0, sizeof(p));
    snprintf(p.model, sizeof(p.model), "%s", d->model);
    snprintf(p.pci_bus_id, sizeof(p.pci_bus_id), "%s", d->pci);
    p.capacity = pool->dev[device].capacity;
    p.numa_node = d->numa;
    *props_p = p;
    return 0;
}

UMP_EXPORT int ump_link_props(ump_pool_t *pool, int from, int to,
                              ump_link_props_t *props_p)
{
    int rc = check_device(pool, from, "ump_link_props");
    if (!rc)
        rc = check_device(pool, to, "ump_link_props");
    if (rc)
        return rc;
    if (!props_p) {
        ump_log_error("ump_link_props: props_p is NULL");
        return -EINVAL;
    }
    const struct topo_link *l = &pool->topo.link[from][to];
    *props_p = (ump_link_props_t){l->kind, l->bw_gbs, l->hops, l->peer};
    return 0;
}

UMP_EXPORT const char *ump_link_kind_name(int kind)
{
    return topo_link_kind_name(kind);
}
