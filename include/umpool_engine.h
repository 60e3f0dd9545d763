/*
 * umpool's data-engine interface: how a library that moves bytes between
 * processes (MPI in libumpool-mpi) plugs into a communicator made with
 * ump_comm_create_oob. umpool runs its own algorithms (hierarchical: inside
 * each process over pooled memory, between processes over the engine) and
 * asks the engine only for point-to-point transfers of host memory (and of
 * device memory when device_buffers says it can move it).
 *
 * Matching: messages from one process to another with the same tag match
 * in the order they were started (MPI's non-overtaking rule). umpool's
 * tags are below 4096.
 */
#ifndef UMPOOL_ENGINE_H
#define UMPOOL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "umpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ump_engine {
    const char *name;    /* for messages: "mpi" */
    bool device_buffers; /* moves device (cuda) memory itself (CUDA-aware) */
    void *ctx;
    /* Start a transfer to / from process proc (the oob's numbering); *req_p
     * gets its handle. 0, or a negative errno. */
    int (*isend)(void *ctx, const void *buf, size_t bytes, int proc, int tag,
                 void **req_p);
    int (*irecv)(void *ctx, void *buf, size_t bytes, int proc, int tag,
                 void **req_p);
    /* 1 when every one of the n requests is done (they are then freed), 0
     * when some are not yet, a negative errno when one failed (all are
     * then freed). Never blocks: umpool polls, with a deadline. */
    int (*testall)(void *ctx, int n, void **reqs);
    /* Abandons n requests that did not finish in time (cancel and free). */
    void (*cancel)(void *ctx, int n, void **reqs);
    /* The communicator is destroyed: the engine frees ctx. May be NULL. */
    void (*destroy)(void *ctx);
} ump_engine_t;

/* ump_comm_create_oob with engine as the data engine between processes (a
 * copy is kept; engine->ctx lives until engine->destroy). On failure
 * engine->destroy is called too, so the caller frees nothing. oob is used
 * during the call only. */
int ump_comm_create_engine(ump_pool_t *pool, int nlocal, const int *devices,
                           const ump_oob_t *oob, const ump_engine_t *engine,
                           const char *config, ump_comm_t **comm_p);

#ifdef __cplusplus
}
#endif
#endif /* UMPOOL_ENGINE_H */
