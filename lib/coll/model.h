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
 * coll_model_exec_us charges the schedule a call actually ran (its ranks'
 * transfer logs) to the same resources with the same constants: the sim's
 * virtual-time link model, which checks the executors against these
 * assumptions (tests/test_coll_vtime.c: they agree to float rounding).
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

/* The fan (model.c): a small call run in one launch by one rank over every
 * rank's buffers, with no barrier between the ranks. Calls whose largest
 * buffer per rank is at most COLL_FAN_MAX bytes (nccl-tests' size), where
 * every rank maps every other's memory: allreduce under one-shot,
 * broadcast, reduce, allgather and reduce-scatter under direct. The model
 * charges such a call the cheaper of the fan and the algorithm's schedule
 * (coll_model_us); coll_model_fan says which: the rank that runs the fan
 * (the root of broadcast and reduce, else rank 0), or -1 when the
 * schedule is as cheap or the fan does not apply (or t, coll or a is not
 * valid, or the root of broadcast or reduce; the others' root is
 * ignored). Both executors follow it (the sim's: run.c and fan.c; the
 * GPU's: gpu.c, where the kernel exists and every device reaches every
 * other). */
#define COLL_FAN_MAX ((size_t)1 << 20)
int coll_model_fan(const struct coll_topo *t, int coll, enum coll_algo a,
                   size_t bytes, int root);

/* The fastest applicable algorithm for coll on bytes, its time in *us_p
 * (may be NULL). Ties go to the first in the order oneshot, direct,
 * twoshot, tree, ring: fewest synchronisation rounds first. COLL_NALGO and
 * INFINITY when nothing applies (coll or t not valid). */
enum coll_algo coll_model_choose(const struct coll_topo *t, int coll,
                                 size_t bytes, double *us_p);
/* The same among the algorithms whose bit (1u << a) is set in algos: the
 * cuda executor runs fewer than the sim (gpu.c). */
#define COLL_ALGOS_ALL ((1u << COLL_NALGO) - 1)
enum coll_algo coll_model_choose_among(const struct coll_topo *t, int coll,
                                       size_t bytes, unsigned algos,
                                       double *us_p);

/* For the executors' virtual-time link model, the same figures the model
 * uses: the bandwidth in GB/s of the path from rank i to rank j (a pair
 * without peer access goes through pinned host memory: the slower of its
 * legs), and the latency in microseconds of one hop on it (the LL protocol's,
 * which the peer-pointer algorithms' flags and loads pay). */
double coll_model_path_gbs(const struct coll_topo *t, int i, int j);
double coll_model_hop_us(const struct coll_topo *t, int i, int j);

/* One transfer of an executed schedule, as a rank logs it (algo.c): bytes
 * from rank `from` to rank `to` in step `step`, the number of barriers the
 * logging rank had passed in the call (the first one included). from == to
 * is local work: the bytes of the rank's own memory read and written. */
struct coll_xfer {
    unsigned step;
    int from, to;
    size_t bytes;
};

/* The sim's virtual-time link model: the modeled microseconds of a
 * schedule that ran with algorithm a, from every rank's log (log[r], nlog[r]
 * entries) and the number of barriers each rank passed (nsteps). Each
 * resource of the analytic model (a pair's path, each rank's NVLink and
 * PCIe port per direction, its memory) keeps a clock that its transfers
 * advance by bytes / bandwidth; latencies and barriers are charged as the
 * analytic model charges them (model.c says how), so that for the schedule
 * the model assumes the two agree. Deterministic: the logs are read in a
 * fixed order, whatever order the ranks ran in. NAN for a bad topology,
 * algorithm or log entry. */
double coll_model_exec_us(const struct coll_topo *t, enum coll_algo a,
                          const struct coll_xfer *const log[],
                          const size_t nlog[], unsigned nsteps);

/* The same for a fan (above): the one launch, the slowest hop it loads or
 * stores over, and every transfer of the fan's one log on the resources it
 * crosses. NAN for a bad topology or log entry. */
double coll_model_exec_fan_us(const struct coll_topo *t,
                              const struct coll_xfer *log, size_t nlog);

#endif
