/*
 * The collectives' cost model: for each algorithm, NCCL's form
 *     time = latency + bytes on the bottleneck / its bandwidth
 * (NCCL src/graph/tuning.cc), fed by the pool's topology, and the choice of
 * the fastest algorithm. Pure functions: no pool, no I/O.
 *
 * bytes is nccl-tests' S for the collective: allreduce, broadcast, reduce:
 * the buffer; allgather, gather: the whole receive buffer (nranks *
 * sendcount * element size); reduce-scatter, scatter: the whole send buffer;
 * alltoall: one rank's whole buffer. Rooted collectives are modeled with
 * root rank 0 unless coll_model_root_us names another (ump_comm_plan has no
 * root).
 *
 * The schedules the model assumes, which the executors follow so that the
 * sim's virtual-time link model agrees with the plan:
 *   ring    rank r sends to rank r+1 (mod n), in the communicator's order;
 *           rooted collectives run a chain root, root+1, ..., root+n-1
 *   tree    a binary heap rooted at the root: position k (rank
 *           (root + k) mod n) has parent (k-1)/2; allreduce pipelines the
 *           reduction up and the broadcast down at once
 *   oneshot every rank reads the whole buffer of every peer and reduces
 *   twoshot rank r reduces slice r (reading it from every peer), then reads
 *           every other reduced slice from its owner
 *   direct  every rank reads (or the root reads or writes) exactly the
 *           peer data it needs, all peers at once
 */
#ifndef UMP_COLL_MODEL_H
#define UMP_COLL_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "coll/coll.h"
#include "topo/topology.h"

/* The communicator's view of topo: rank r on device devices[r] (devices
 * NULL: rank r on device r). -EINVAL, logged once, for no topology or
 * output, nranks outside 1..min(topo's devices, COLL_MAX_RANKS), a device
 * the topology does not have, or a device named twice; out is written only
 * on success. */
int coll_topo_from(const struct ump_topology *topo, int nranks,
                   const int *devices, struct coll_topo *out);

/* Does algorithm a exist for collective coll (UMP_COLL_*)? oneshot and
 * twoshot: allreduce only; tree: allreduce, broadcast, reduce; ring: every
 * collective; direct: every collective but allreduce (there oneshot and
 * twoshot are the direct algorithms). */
bool coll_algo_applies(int coll, enum coll_algo a);

/* Modeled microseconds of collective coll run with algorithm a on bytes
 * (S, above), root rank 0. INFINITY when a does not apply to coll, or t or
 * coll is not valid. One rank: every applicable algorithm is a local copy. */
double coll_model_us(const struct coll_topo *t, int coll, enum coll_algo a,
                     size_t bytes);
/* The same with the root of broadcast, reduce, gather and scatter given
 * (ignored by the others); INFINITY also for a root out of range. */
double coll_model_root_us(const struct coll_topo *t, int coll,
                          enum coll_algo a, size_t bytes, int root);

/* The fastest applicable algorithm for coll on bytes, its time in *us_p
 * (may be NULL). Ties go to the first in the order oneshot, direct,
 * twoshot, tree, ring: fewest synchronisation rounds first. COLL_NALGO and
 * INFINITY when nothing applies (coll or t not valid). */
enum coll_algo coll_model_choose(const struct coll_topo *t, int coll,
                                 size_t bytes, double *us_p);

/* For the executors' virtual-time link model, the same figures the model
 * uses: the bandwidth in GB/s of the path from rank i to rank j (a pair
 * without peer access goes through pinned host memory: the slower of its
 * legs), and the latency in microseconds of one hop on it (the LL protocol's,
 * which the peer-pointer algorithms' flags and loads pay). */
double coll_model_path_gbs(const struct coll_topo *t, int i, int j);
double coll_model_hop_us(const struct coll_topo *t, int i, int j);

#endif
