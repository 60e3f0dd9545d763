/*
 * umpool-bench replay: what its two files share. replay.c reads the trace,
 * replays it through the pool and prints; replay_es.c replays it through a
 * model of PyTorch's caching allocator with expandable segments, the
 * competitor on the same trace.
 */
#ifndef UMP_BENCH_REPLAY_H
#define UMP_BENCH_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drvpace.h"

struct op {
    uint32_t id;
    bool alloc;
    size_t bytes;
};

struct trace {
    struct op *ops;
    size_t n, cap;
    uint32_t nids;     /* IDs are below this */
    size_t peak_live;  /* requested bytes */
    uint64_t nallocs;
};

/* One replay of the model (replay_es.c). */
struct es_result {
    size_t peak_reserved;  /* bytes of pages mapped at the peak */
    uint64_t failures;     /* allocations that found no memory */
    uint64_t pages;        /* handles created */
    double wall_s;
    struct drv_pace drv;   /* its driver calls and their modeled time */
};

/*
 * Replays t through the model on a device of capacity bytes; its driver
 * calls are paced with scale (drvpace.h: 0 sums their modeled costs only).
 * 0, or -ENOMEM when the model's own memory ran out.
 */
int es_replay(const struct trace *t, size_t capacity, unsigned scale,
              struct es_result *r);

#endif
