/*
 * Collectives across the processes of one shared pool (shared.c): when
 * every process of a communicator made with ump_comm_create_oob (or an
 * engine) is a process of the same shared pool (ump_pool_share,
 * ump_pool_attach), every rank's buffer is mapped at the same address in
 * every process, and a call runs as one job over all the ranks, as in one
 * process: no engine, no staging.
 */
#ifndef UMP_COLL_SHARED_H
#define UMP_COLL_SHARED_H

#include "coll/check.h"
#include "coll/world.h"

/* At the communicator's creation, with the caller's oob (every process
 * calls it, once, in the same order): the processes find out whether
 * they all share one pool, and then map one control segment. Nothing is
 * an error: without it (c->world->xs NULL) the calls go between processes
 * as before. 0, or the oob's error. */
int coll_shared_start(ump_comm_t *c, const ump_oob_t *oob);
/* At ump_comm_destroy: what the calls opened of the other processes'
 * memory is closed, the segment unmapped. */
void coll_shared_stop(ump_comm_t *c);

/* Whether calls of coll on c go through the shared addresses when every
 * process can (the plan's "shared"): c's processes share one pool, and
 * on cuda xgpu.c takes coll. */
bool coll_shared_takes(const ump_comm_t *c, int coll);

/* Runs the checked call a across the processes through the shared
 * addresses; 1 when the call is not for it (the processes agree: each
 * then runs the call's usual schedule), else 0 or the call's error. The
 * comm's lock is held. */
int coll_shared_run(ump_comm_t *c, const struct coll_args *a);
/* A call this process returns from before its first barrier (the
 * communicator failed here): the other processes' waits there fail at
 * once. Nothing without a shared pool. */
void coll_shared_give_up(ump_comm_t *c);

#endif
