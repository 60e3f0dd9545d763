/*
 * Failed devices, as the front end sees them (failure.c): lost
 * allocations and the checks of the calls that touch pool memory.
 */
#ifndef UMP_FRONT_FAILURE_H
#define UMP_FRONT_FAILURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/pool.h"

/* The lost allocations of device (an index, or UMP_DEVICE_ALL): how many,
 * and their bytes (rounded to their size class, as live_bytes). Pool lock
 * held. */
void pool_lost(ump_pool_t *pool, int device, uint64_t *count_p,
               size_t *bytes_p);
/* -EIO, logged "fn: ...", when [ptr, ptr + size) touches an allocation
 * lost with a failed device; else 0 (also for pointers not of the pool,
 * which the caller checks its own way). Takes pool->lock when a device has
 * failed; costs one load when none has. */
int pool_check_lost(ump_pool_t *pool, const void *ptr, size_t size,
                    const char *fn);
/* Is the allocation holding ptr (inside the pool's range) lost? Pool lock
 * held. */
bool pool_ptr_lost(ump_pool_t *pool, const void *ptr);
/* -EIO, logged, when device (an index) has failed. */
int pool_check_device(ump_pool_t *pool, int device, const char *fn);

#endif
