/*
 * NCCL between GPU processes (nccl.c): loaded at run time, bootstrapped
 * through the oob, carrying point-to-point between processes.
 */
#ifndef UMP_COLL_NCCL_H
#define UMP_COLL_NCCL_H

#include "coll/world.h"

/* At communicator creation, with every process (oob exchanges): starts
 * NCCL where the configuration wants it (coll_engine:nccl, or auto on a
 * backend with GPUs); where it cannot start on some process, every process
 * goes on without it, after one info line. 0, or the oob's failure. */
int coll_nccl_start(ump_comm_t *c, const ump_oob_t *oob);
/* At destroy (aborts when the communicator failed). */
void coll_nccl_stop(ump_comm_t *c);
/* The transfers of one step, straight from device memory (pool memory,
 * which NCCL's device reaches), in one NCCL group, polled until done or
 * the communicator's timeout. */
int coll_nccl_xchg(ump_comm_t *c, const struct coll_msg *m, int nm,
                   const char *fn);

#endif
