/*
 * What the pool knows of a pointer: ump_ptr_info and ump_ptr_lookup (the
 * allocation, its place and tier), ump_pool_range, and the internal
 * lookups the other layers ask (front.h: pool_ptr_info, pool_ptr_movable,
 * pool_ptr_on_host). Read from the granule tags that the allocator
 * (alloc.c, free.c) keeps.
 */
#include "config.h"

#include <errno.h>

#include "front/check.h"
#include "front/failure.h"
#include "front/front.h"
#include "mem/chunks.h"
#include "mem/slab.h"
#include "tier/offload.h"
#include "util/log.h"

bool pool_ptr_on_host(ump_pool_t *pool, const void *ptr)
{
    if (!vas_contains(&pool->vas, ptr))
        return false;
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, ptr));
    if (vas_tag_kind(tag) == VAS_SLAB)
        return ((struct slab *)vas_tag_owner(tag))->device == place_host(pool);
    if (vas_tag_kind(tag) == VAS_RUN)
        return ((struct run *)vas_tag_owner(tag))->device == place_host(pool);
    return false;
}

bool pool_ptr_movable(ump_pool_t *pool, const void *ptr)
{
    if (!vas_contains(&pool->vas, ptr))
        return false;
    bool movable = false;
    pthread_mutex_lock(&pool->lock);
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, ptr));
    if (vas_tag_kind(tag) == VAS_RUN) {
        struct run *r = vas_tag_owner(tag);
        movable = r->res ||
                  (atomic_load_explicit(&r->flags, memory_order_relaxed) &
                   UMP_HINT_OFFLOAD);
    }
    pthread_mutex_unlock(&pool->lock);
    return movable;
}

int pool_ptr_info(ump_pool_t *pool, const void *ptr, ump_ptr_info_t *info_p,
                  const char **why_p)
{
    if (!vas_contains(&pool->vas, ptr)) {
        *why_p = "not a pointer of this pool";
        return -EINVAL;
    }
    ump_ptr_info_t info;
    int rc;
    bool tracked = false;
    size_t g = vas_index(&pool->vas, ptr);
    pthread_mutex_lock(&pool->lock);
    uintptr_t tag = vas_tag(&pool->vas, g);
    rc = -EINVAL;
    if (vas_tag_kind(tag) == VAS_SLAB) {
        struct slab *s = vas_tag_owner(tag);
        size_t idx = (size_t)((const char *)ptr - s->base) / s->size;
        uint32_t w = idx < s->nobj ? atomic_load(&s->word[idx]) : 0;
        if (obj_live(w)) {
            info.base = s->base + idx * s->size;
            info.size = obj_req(w);
            info.device = s->device;
            info.kind = s->device == place_host(pool) ? UMP_KIND_HOST
                                                      : UMP_KIND_DEVICE;
            rc = 0;
        }
    } else if (vas_tag_kind(tag) == VAS_RUN) {
        struct run *r = vas_tag_owner(tag);
        if (obj_state(atomic_load(&r->word)) == OBJ_LIVE) {
            info.base = vas_addr(&pool->vas, r->start);
            info.size = atomic_load(&r->size);
            info.kind = r->device == place_host(pool) ? UMP_KIND_HOST
                                                      : UMP_KIND_DEVICE;
            if (r->res) { /* it may be on another tier */
                offload_ptr_info(pool, r, g, &info);
                tracked = true;
            } else {
                info.device = chunks_device(pool, g);
            }
            rc = 0;
        }
    }
    if (!rc && vas_tag_kind(tag) == VAS_SLAB &&
        ((struct slab *)vas_tag_owner(tag))->away) { /* suspended */
        struct slab *s = vas_tag_owner(tag);
        info.chunk_base = s->base;
        info.chunk_size = pool->chunk_size;
        info.tier = s->away;
        tracked = true;
    }
    if (!rc)
        info.lost = pool_ptr_lost(pool, ptr);
    if (!rc && !tracked) {
        const struct chunk *c = chunks_at(pool, g);
        info.chunk_base = vas_addr(&pool->vas, c->g);
        info.chunk_size = c->n << pool->chunk_shift;
        info.tier = UMP_TIER_DEVICE;
        if (place_is_host(pool, info.device)) { /* pinned host memory */
            info.device = -1;
            info.tier = UMP_TIER_HOST;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    if (rc || (size_t)((const char *)ptr - (char *)info.base) >= info.size) {
        *why_p = "not inside a live allocation";
        return -EINVAL;
    }
    *info_p = info;
    return 0;
}

/* ump_ptr_info and ump_ptr_lookup: the same lookup, said or not. */
static int ptr_info(ump_pool_t *pool, const void *ptr, ump_ptr_info_t *info_p,
                    const char *fn, bool quiet)
{
    int rc = pool_check(pool, fn);
    if (rc)
        return rc;
    if (!info_p) {
        ump_log_error("%s: info_p is NULL", fn);
        return -EINVAL;
    }
    const char *why;
    rc = pool_ptr_info(pool, ptr, info_p, &why);
    if (rc && quiet)
        return -ENOENT;
    return rc ? pool_bad_pointer(ptr, fn, why) : 0;
}

UMP_EXPORT int ump_pool_range(ump_pool_t *pool, void **base_p,
                              size_t *size_p)
{
    int rc = pool_check(pool, "ump_pool_range");
    if (rc)
        return rc;
    if (!base_p || !size_p) {
        ump_log_error("ump_pool_range: %s is NULL",
                      base_p ? "size_p" : "base_p");
        return -EINVAL;
    }
    /* Set at creation and never moved: no lock. */
    *base_p = (void *)pool->vas.base;
    *size_p = pool->vas.size;
    return 0;
}

UMP_EXPORT int ump_ptr_info(ump_pool_t *pool, const void *ptr,
                            ump_ptr_info_t *info_p)
{
    return ptr_info(pool, ptr, info_p, "ump_ptr_info", false);
}

UMP_EXPORT int ump_ptr_lookup(ump_pool_t *pool, const void *ptr,
                              ump_ptr_info_t *info_p)
{
    return ptr_info(pool, ptr, info_p, "ump_ptr_lookup", true);
}
