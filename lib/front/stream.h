/*
 * The streams of the public API (front/stream.c): which stream handles are
 * live in which pool.
 *
 * ump_stream_create records every stream it hands out in the pool's set of
 * handles (pool->streams); ump_stream_destroy takes it out before the
 * backend frees it. ump_stream_wrap records a native stream the backend
 * checked (stream_adopt), marked wrapped: its destroy only takes it out.
 * Every call that takes a stream checks it there first, by value, so a
 * stream of another pool, a destroyed stream or a made-up pointer is
 * -EINVAL with one log line, on every backend, and the handle is never
 * dereferenced to find that out.
 *
 * NULL, the default stream, is valid everywhere except ump_stream_destroy.
 * As with CUDA, using a stream while another thread destroys it is the
 * caller's race: the check and the use are not one atomic step.
 */
#ifndef UMP_FRONT_STREAM_H
#define UMP_FRONT_STREAM_H

#include "mem/pool.h"

/* 0 when stream is NULL or a live stream of pool (made by
 * ump_stream_create, or wrapped by ump_stream_wrap); else -EINVAL, logged
 * once as "fn: stream <stream> was not created by this pool (nor wrapped
 * by ump_stream_wrap), or was destroyed".
 * pool must already have passed pool_check. */
int pool_stream_check(ump_pool_t *pool, ump_stream_t stream, const char *fn);

/* The device of a live stream of pool (made or wrapped), or -1 (NULL,
 * destroyed, not the pool's). */
int pool_stream_device(ump_pool_t *pool, ump_stream_t stream);

#endif
