/*
 * The library's assembly: the one place that knows every layer. The pool's
 * public lifecycle calls live here because creating a pool wires the front
 * end to the statistics publisher above it (lib/publish), which the front
 * end must not name (lib/layers).
 */
#include "config.h"

#include "front/lifecycle.h"
#include "publish/publish.h"

/* Publishes the statistics of pools made with publish:true. */
static int observe_start(ump_pool_t *pool)
{
    return pool->cfg.publish ? publish_start(pool) : 0;
}

static const struct pool_observer publisher = {observe_start, publish_stop};

UMP_EXPORT int ump_pool_create(const char *config, ump_pool_t **pool_p)
{
    return pool_create(config, &publisher, pool_p);
}

UMP_EXPORT int ump_pool_destroy(ump_pool_t *pool)
{
    return pool_destroy(pool);
}
