/*
 * Collectives (lib/coll/): what the files of the layer share. The layer sits
 * above the pool (front): it checks buffers with the pool's lookups, runs
 * each rank's share of the work on its device's stream, and chooses the
 * algorithm with the cost model (model.c) fed by the pool's topology.
 *
 *   reduce.c   element types, and the exact reductions (fp16/bf16 in fp32,
 *              fixed order, integers wrapping)
 *   model.c    the cost model: time = latency + bytes / bandwidth per
 *              algorithm, NCCL's form, and the choice
 *   comm.c     communicators: create, destroy, size, plan, configuration
 *   check.c    the arguments of a call, checked before anything runs
 *   calls.c    the public collective calls, on top: to run.c, or to hier.c
 *              across processes; counted in ump_coll_stats
 *   run.c      a call on one process's ranks: check, choose, queue on the
 *              streams (also hier.c's in-process phases)
 *   job.c      one call in flight: its ranks' barrier (job.h)
 *   algo.c     each algorithm as one rank runs it
 */
#ifndef UMP_COLL_H
#define UMP_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "umpool.h"

#define COLL_NCOLL 8 /* UMP_COLL_ALLREDUCE .. UMP_COLL_SCATTER */

/* The algorithms. Not every one applies to every collective (model.c says
 * which: coll_model_us is infinite for the others). */
enum coll_algo {
    COLL_ONESHOT, /* allreduce: every rank reads all peers and reduces */
    COLL_TWOSHOT, /* allreduce: reduce-scatter then all-gather over peer
                     pointers, each rank owning one slice (executed in one
                     pass: a rank stores its reduced slice to every rank) */
    COLL_RING,    /* every collective: n-1 steps around a ring */
    COLL_TREE,    /* allreduce, broadcast, reduce: a binary tree, log depth */
    COLL_DIRECT,  /* data movement and the rooted collectives: each rank
                     reads or writes its peers' buffers directly */
    COLL_NALGO
};

/* Allreduce, reduce and reduce-scatter: the collectives that reduce. */
static inline bool coll_reducing(int coll)
{
    return coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_REDUCE ||
           coll == UMP_COLL_REDUCE_SCATTER;
}

/* Broadcast, reduce, gather and scatter: the collectives with a root. */
static inline bool coll_rooted(int coll)
{
    return coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE ||
           coll == UMP_COLL_GATHER || coll == UMP_COLL_SCATTER;
}

/* "oneshot", "twoshot", "ring", "tree", "direct"; NULL when out of range. */
const char *coll_algo_name(enum coll_algo a);
/* The algorithm named s (-1 when none is). */
int coll_algo_lookup(const char *s);

/* What the cost model sees of a communicator: its ranks and the links
 * between their devices, from the pool's topology. */
#define COLL_MAX_RANKS UMP_MAX_DEVICES
struct coll_topo {
    int nranks;
    /* GB/s per direction from rank i to rank j, as the topology gives it;
     * peer[i][j]: i can map j's memory (else they exchange through pinned
     * host memory). */
    double bw[COLL_MAX_RANKS][COLL_MAX_RANKS];
    bool peer[COLL_MAX_RANKS][COLL_MAX_RANKS];
    int kind[COLL_MAX_RANKS][COLL_MAX_RANKS]; /* UMP_LINK_* */
    double local_bw; /* a device reading its own memory, GB/s */
    /* Added for the cost model (model.c fills them in coll_topo_from): */
    int dev[COLL_MAX_RANKS]; /* rank r's device in the pool */
    /* What a rank's device can push (and take) per direction over all its
     * NVLinks together, GB/s; 0: no NVLink. Every NVLink peer shares it: on
     * an NVSwitch node the topology gives each pair the whole 450 GB/s, but
     * that is the GPU's port to the switch, not a link per peer. */
    double nvl_port[COLL_MAX_RANKS];
    /* The same for the device's PCIe uplink, shared by its PCIe peers and
     * by the host path of its pairs without peer access; 0: unknown (only
     * NVLink in the topology, so nothing crosses PCIe). */
    double pcie_port[COLL_MAX_RANKS];
};

#endif
