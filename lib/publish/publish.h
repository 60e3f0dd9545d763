/*
 * Publication of a pool's statistics for umpool-inspect (the segment's
 * layout is in snapshot.h).
 *
 * A background thread per pool refreshes the segment at most every 100 ms
 * while someone reads it (the reader bumps the segment's request word and
 * wakes the thread through it, a futex), every second otherwise; each
 * refresh holds the pool lock for one walk of the pool's memory, with no
 * allocation under it. Nothing is added to the allocation paths.
 *
 * The segment can be written by any process of the user: the publisher
 * keeps its layout to itself, writes with pwrite() and reads nothing back
 * but the request word, so that a scribbled or shrunk segment can neither
 * corrupt the program's memory nor kill it; it stops publishing (with a
 * warning) when the file is shrunk or removed under it.
 */
#ifndef UMP_PUBLISH_H
#define UMP_PUBLISH_H

#include <stddef.h>

#include "mem/pool.h"
#include "front/stats.h"
#include "publish/snapshot.h"

/* Creates the pool's segment, writes a first snapshot and starts the
 * thread (the caller checks cfg.publish). Logs a warning and returns a
 * negative errno when it cannot: the pool works without it. */
int publish_start(ump_pool_t *pool);
/* Stops the thread and removes the segment; nothing when the pool was
 * not published. In a child after fork() it only drops the child's copy
 * (the thread and the segment belong to the parent). */
void publish_stop(ump_pool_t *pool);

#endif
