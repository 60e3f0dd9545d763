/*
 * Internal to the sim backend: what sim.c (memory), sim_stream.c (streams
 * and events) and sim_timed.c (the H200's timing) share. Nothing outside
 * lib/backend/sim*.c includes this, but the sim's own tests.
 */
#ifndef UMP_SIM_H
#define UMP_SIM_H

#include <pthread.h>
#include <stdatomic.h>

#include "util/list.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sim_stream;
struct sim_event;

/* Every stream and event of one backend context, so that close can drain
 * and free what the caller did not destroy. Every stream call looks its
 * handle up in this list, by value, before touching it: another context's
 * stream, a destroyed one or any other pointer is -EINVAL, never read. */
struct sim_streams {
    pthread_mutex_t lock; /* guards the two lists; taken before a stream's */
    struct ump_list streams; /* of struct sim_stream, by link */
    struct ump_list events;  /* of struct sim_event, by link */
    int ndev;
    /* For tests (sim_stream_counts): host functions queued, stream waits
     * for an event asked for (queued or, the event complete, not needed),
     * and stream syncs, since the context began. */
    atomic_ulong n_funcs, n_waits, n_syncs;
};

/* The registry of the context (sim.c). */
struct sim_streams *sim_streams_of(void *ctx);
/* 0 when [p, p + size) may be touched by a copy: outside every reservation
 * (host memory), or mapped with access granted. -EINVAL (logged) otherwise.
 * Takes the context's lock. */
int sim_check_range(void *ctx, const void *p, size_t size);

/* Where the device sees p: when p lies in a chunk mapped with access, the
 * same bytes in the window that maps the chunk's memfd whole, and in *len_p
 * how many bytes from p the chunk runs on (at most max). NULL otherwise.
 * Takes the context's lock. */
char *sim_view_of(void *ctx, const void *p, size_t max, size_t *len_p);

/* Logs and returns -EPERM when the calling thread runs a host function:
 * CUDA does not permit driver calls there, so sim refuses them. Else 0. */
int sim_check_caller(const char *op);

/* Around the bytes a copy or memset moves (never around a call that takes
 * the context's lock): a device failing meanwhile poisons its memory only
 * once they are moved (sim_fail.c). */
void sim_bytes_hold(void *ctx);
void sim_bytes_drop(void *ctx);
/* sim_dev_op for the streams, which hold no context lock: an operation on
 * a stream of device. Takes the context's lock. */
int sim_device_op(void *ctx, int device);
/* -EIO when [p, p + size) touches memory of a failed device, after
 * counting one operation of each device whose memory it touches (a copy
 * or memset on the default stream). Takes the context's lock. */
int sim_range_op(void *ctx, const void *p, size_t size);
/* sim_driver_costs:h200-timed (sim_timed.c): whether it is on, and when
 * work started at `start` (ump_clock_ns) ends on an H200: a copy or memset
 * queued at `queued`, whose links it reserves, or a stream sync. 0 when
 * the mode is off. Take the context's locks. */
bool sim_timed(void *ctx);
uint64_t sim_copy_end(void *ctx, void *dst, const void *src, size_t size,
                      uint64_t queued, uint64_t start);
uint64_t sim_set_end(void *ctx, void *dst, size_t size, uint64_t queued,
                     uint64_t start);
uint64_t sim_sync_end(void *ctx, uint64_t start);
/* The H200's cost (ns, unscaled) of every virtual-memory call the timed
 * mode has waited for so far, device and host handles alike (for tests:
 * driver_ns counts device handles only). 0 when the mode is off. */
uint64_t sim_timed_vmm_ns(void *ctx);
int sim_streams_init(struct sim_streams *ss, int ndev);
/* Drains and joins every stream still alive, frees every event. */
void sim_streams_fini(struct sim_streams *ss);
/* In a forked child: frees the memory only; no lock, no join. */
void sim_streams_forget(struct sim_streams *ss);

int sim_stream_create(void *ctx, int device, void **stream_p);
int sim_stream_destroy(void *ctx, void *stream);
int sim_stream_sync(void *ctx, void *stream);
int sim_memcpy_async(void *ctx, void *dst, const void *src, size_t size,
                     void *stream);
int sim_memset_async(void *ctx, void *dst, int value, size_t size,
                     void *stream);
int sim_host_func(void *ctx, void *stream, void (*fn)(void *), void *arg);
int sim_event_create(void *ctx, void **event_p);
int sim_event_destroy(void *ctx, void *event);
int sim_event_record(void *ctx, void *event, void *stream);
int sim_event_query(void *ctx, void *event);
int sim_event_sync(void *ctx, void *event);
int sim_stream_wait_event(void *ctx, void *stream, void *event);
/* What the context's streams were asked to do so far (tests count a
 * collective's launches, waits and syncs with it). */
struct sim_stream_counts {
    unsigned long funcs, waits, syncs;
};
void sim_stream_counts(void *ctx, struct sim_stream_counts *out);

#endif
