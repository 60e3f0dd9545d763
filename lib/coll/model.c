/*
 * The collectives' cost model (model.h says what it answers and which
 * schedules it assumes). Each algorithm is written down as the bytes it
 * moves between every pair of ranks over the whole collective, plus the
 * bytes each rank reads and writes in its own memory; the bandwidth term is
 * the busiest resource's bytes over its bandwidth, with every phase assumed
 * to overlap the others as NCCL's pipelines do. The resources:
 *   - the path of each ordered pair (its link, or for a pair without peer
 *     access the slower leg of the trip through pinned host memory, as
 *     NCCL's shared-memory transport makes it);
 *   - each rank's NVLink port per direction, shared by all its NVLink peers
 *     (an H200 has 450 GB/s to the NVSwitch in all, not per peer), and its
 *     PCIe uplink per direction, shared by its PCIe peers and host paths;
 *   - each rank's device memory, which serves its peers' reads, takes what
 *     they write, and carries the reduction's own reads and writes.
 * The latency term is NCCL's for ring and tree (base + hops * per-hop
 * latency, for each of LL, LL128 and Simple, the best of the three), and
 * for the peer-pointer algorithms (oneshot, twoshot, direct) a kernel
 * launch plus one barrier per round, whose cost grows with the number of
 * peers each rank must flag.
 *
 * Constants, and where they come from:
 *   NCCL 2.30.7, src/graph/tuning.cc (ncclTunerConstantsDefaults, and the
 *   bandwidth refinements of ncclTopoTuneModel):
 *     base latency, us    tree LL 6.8, LL128 14.0, Simple 8.4
 *                         ring LL 6.6, LL128 14.0, Simple 8.4
 *     hop latency, NVLink tree 0.6 / 1.25 / 4.0, ring 0.6 / 1.9 / 3.4
 *     hop latency, PCIe   tree 1.0 / 1.9 / 4.0, ring 1.0 / 2.5 / 5.7
 *     bandwidth factor    ring LL 0.5, LL128 0.92, Simple 1
 *                         tree LL 1/3.8, LL128 7/9 (one node), Simple 0.92
 *     (8 ranks on NVLink, ring LL: 6.6 + 14 * 0.6 = 15 us, the figure the
 *     issue quotes.) NCCL's per-channel caps (llMaxBw, perChMax*) are not
 *     modeled: the model has no channels.
 *   Host path (no peer access): 2 PCIe hops, one for the sender's write into
 *     pinned host memory and one for the receiver's read. NCCL charges every
 *     intra-node path that is not NVLink (its SHM transport included) the
 *     PCI hop latency; the host path crosses PCIe twice, so it pays twice.
 *   LAUNCH_US 3.0: a kernel launch and its first loads. With one barrier it
 *     makes an 8-rank one-shot of 512 B take 6 us, TensorRT-LLM's measured
 *     one-shot on 8 x H100 (a schedule across processes, whose ranks meet
 *     with flags; in one process the fan takes 3.6 us: a launch and a hop).
 *   FLAG_US 0.35: each peer a rank flags (a remote store and a fenced poll)
 *     in a barrier. Fit to vLLM's custom-allreduce thresholds (one-shot
 *     below 256 KiB at 8 ranks, 512 KiB at 4, always at 2): the model puts
 *     the crossover at 255 KiB for 8 ranks and 484 KiB for 4 on NVSwitch,
 *     and at 2 ranks one-shot moves no more bytes than two-shot, so it
 *     always wins. (Those are the schedules' crossovers; the fan, one
 *     process's one launch, has no barrier and keeps one-shot up to
 *     460 KiB at 8 ranks and 791 KiB at 4.)
 *   Peer-pointer loads run at the path's full bandwidth (factor 1): they
 *   are plain loads, no FIFO and no flags in the data.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "coll/model.h"
#include "util/log.h"

#define LAUNCH_US 3.0
#define FLAG_US 0.35
#define HOST_PATH_HOPS 2.0

/* NCCL's protocols, in its order. */
enum proto { PROTO_LL, PROTO_LL128, PROTO_SIMPLE, NPROTO };
/* NCCL's algorithm rows, in its order (tree first). */
enum { NCCL_TREE, NCCL_RING };

static const double nccl_base_us[2][NPROTO] = {
    {6.8, 14.0, 8.4}, /* tree */
    {6.6, 14.0, 8.4}, /* ring */
};
static const double nccl_hop_nvl_us[2][NPROTO] = {
    {0.6, 1.25, 4.0},
    {0.6, 1.9, 3.4},
};
static const double nccl_hop_pci_us[2][NPROTO] = {
    {1.0, 1.9, 4.0},
    {1.0, 2.5, 5.7},
};
static const double nccl_bw_factor[2][NPROTO] = {
    {1.0 / 3.8, 7.0 / 9.0, 0.92},
    {0.5, 0.92, 1.0},
};

static const char *const algo_names[COLL_NALGO] = {
    [COLL_ONESHOT] = "oneshot", [COLL_TWOSHOT] = "twoshot",
    [COLL_RING] = "ring",       [COLL_TREE] = "tree",
    [COLL_DIRECT] = "direct",
};

const char *coll_algo_name(enum coll_algo a)
{
    return (int)a >= 0 && a < COLL_NALGO ? algo_names[a] : NULL;
}

int coll_algo_lookup(const char *s)
{
    for (int a = 0; s && a < COLL_NALGO; a++)
        if (!strcmp(s, algo_names[a]))
            return a;
    return -1;
}

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

int coll_topo_from(const struct ump_topology *topo, int nranks,
                   const int *devices, struct coll_topo *out)
{
    struct coll_topo t;
    bool seen[UMP_MAX_DEVICES] = {false};

    if (!topo || !out) {
        ump_log_error("collective topology: no topology or no result");
        return -EINVAL;
    }
    if (nranks < 1 || nranks > COLL_MAX_RANKS || nranks > topo->ndev) {
        ump_log_error("collective topology: %d ranks, want 1 to %d (the "
                      "devices of topology %s)",
                      nranks, topo->ndev < COLL_MAX_RANKS ? topo->ndev
                                                          : COLL_MAX_RANKS,
                      topo->name);
        return -EINVAL;
    }
    memset(&t, 0, sizeof(t));
    t.nranks = nranks;
    t.local_bw = topo->local_bw_gbs;
    for (int r = 0; r < nranks; r++) {
        int d = devices ? devices[r] : r;
        if (d < 0 || d >= topo->ndev) {
            ump_log_error("collective topology: rank %d: device %d is not "
                          "one of the %d of topology %s",
                          r, d, topo->ndev, topo->name);
            return -EINVAL;
        }
        if (seen[d]) {
            ump_log_error("collective topology: rank %d: device %d is "
                          "named twice", r, d);
            return -EINVAL;
        }
        seen[d] = true;
        t.dev[r] = d;
        /* The ports are the device's, whoever else is in the communicator:
         * the fastest link of each kind is what the port can carry. */
        for (int e = 0; e < topo->ndev; e++) {
            if (e == d)
                continue;
            const struct topo_link *l = &topo->link[d][e];
            double bw = maxd(l->bw_gbs, topo->link[e][d].bw_gbs);
            if (l->kind == UMP_LINK_NVLINK)
                t.nvl_port[r] = maxd(t.nvl_port[r], bw);
            else
                t.pcie_port[r] = maxd(t.pcie_port[r], bw);
        }
    }
    for (int i = 0; i < nranks; i++)
        for (int j = 0; j < nranks; j++) {
            const struct topo_link *l = &topo->link[t.dev[i]][t.dev[j]];
            t.bw[i][j] = i == j ? topo->local_bw_gbs : l->bw_gbs;
            t.peer[i][j] = i == j || l->peer;
            t.kind[i][j] = i == j ? UMP_LINK_SELF : l->kind;
        }
    *out = t;
    return 0;
}

static bool topo_ok(const struct coll_topo *t)
{
    return t && t->nranks >= 1 && t->nranks <= COLL_MAX_RANKS;
}

static bool rank_ok(const struct coll_topo *t, int r)
{
    return r >= 0 && r < t->nranks;
}

double coll_model_path_gbs(const struct coll_topo *t, int i, int j)
{
    if (!topo_ok(t) || !rank_ok(t, i) || !rank_ok(t, j))
        return 0;
    if (i == j)
        return t->local_bw;
    double bw = t->bw[i][j];
    if (!t->peer[i][j]) {
        /* Through pinned host memory: up the sender's PCIe, down the
         * receiver's; the pair's own figure stands for the crossing
         * between them (the sockets' interconnect). */
        if (t->pcie_port[i] > 0 && t->pcie_port[i] < bw)
            bw = t->pcie_port[i];
        if (t->pcie_port[j] > 0 && t->pcie_port[j] < bw)
            bw = t->pcie_port[j];
    }
    return bw;
}

/* One hop from i to j with the given NVLink and PCIe hop latencies. */
static double hop(const struct coll_topo *t, int i, int j, double nvl,
                  double pci)
{
    if (i == j)
        return 0;
    if (!t->peer[i][j])
        return HOST_PATH_HOPS * pci;
    return t->kind[i][j] == UMP_LINK_NVLINK ? nvl : pci;
}

double coll_model_hop_us(const struct coll_topo *t, int i, int j)
{
    if (!topo_ok(t) || !rank_ok(t, i) || !rank_ok(t, j))
        return 0;
    return hop(t, i, j, nccl_hop_nvl_us[NCCL_RING][PROTO_LL],
               nccl_hop_pci_us[NCCL_RING][PROTO_LL]);
}

bool coll_algo_applies(int coll, enum coll_algo a)
{
    if (coll < 0 || coll >= COLL_NCOLL)
        return false;
    switch (a) {
    case COLL_ONESHOT:
    case COLL_TWOSHOT:
        return coll == UMP_COLL_ALLREDUCE;
    case COLL_TREE:
        return coll == UMP_COLL_ALLREDUCE || coll == UMP_COLL_BROADCAST ||
               coll == UMP_COLL_REDUCE;
    case COLL_RING:
        return true;
    case COLL_DIRECT:
        return coll != UMP_COLL_ALLREDUCE;
    default:
        return false;
    }
}

/* Rank at position k of a chain or tree that starts at root. */
static int pos(int k, int root, int n)
{
    return (k + root) % n;
}

/* What one algorithm does over the whole collective. */
struct sched {
    int n;
    double pair[COLL_MAX_RANKS][COLL_MAX_RANKS]; /* bytes rank i -> j */
    bool used[COLL_MAX_RANKS][COLL_MAX_RANKS];   /* i -> j carries a step */
    double own[COLL_MAX_RANKS]; /* bytes of its own buffers a rank touches */
    int hops;   /* ring, tree: hops on the critical path */
    int rounds; /* oneshot, twoshot, direct: barrier rounds */
};

static void move(struct sched *s, int from, int to, double bytes)
{
    s->pair[from][to] += bytes;
    s->used[from][to] = true;
}

/* The bytes of its own send and receive buffers a rank reads and writes:
 * its input read once, its output written once. */
static double own_bytes(int coll, bool root, double S, double chunk)
{
    switch (coll) {
    case UMP_COLL_ALLREDUCE:
    case UMP_COLL_ALLTOALL:
        return 2 * S;
    case UMP_COLL_BROADCAST:
    case UMP_COLL_REDUCE:
        return root ? 2 * S : S;
    case UMP_COLL_ALLGATHER:
        return chunk + S;
    case UMP_COLL_REDUCE_SCATTER:
        return S + chunk;
    case UMP_COLL_GATHER:
        return root ? chunk + S : chunk;
    default: /* scatter */
        return root ? S + chunk : chunk;
    }
}

static void sched_ring(struct sched *s, int coll, int root, double S,
                       double chunk)
{
    int n = s->n;
    switch (coll) {
    case UMP_COLL_ALLREDUCE: /* reduce-scatter then allgather */
        for (int r = 0; r < n; r++)
            move(s, r, (r + 1) % n, 2.0 * (n - 1) * chunk);
        s->hops = 2 * (n - 1);
        return;
    case UMP_COLL_ALLGATHER:
    case UMP_COLL_REDUCE_SCATTER:
        for (int r = 0; r < n; r++)
            move(s, r, (r + 1) % n, (n - 1) * chunk);
        break;
    case UMP_COLL_ALLTOALL:
        /* Chunks are forwarded: the one for distance d crosses d links, so
         * each link carries sum over d of d chunks. */
        for (int r = 0; r < n; r++)
            move(s, r, (r + 1) % n, n * (n - 1) / 2.0 * chunk);
        break;
    case UMP_COLL_BROADCAST:
        for (int k = 0; k + 1 < n; k++)
            move(s, pos(k, root, n), pos(k + 1, root, n), S);
        break;
    case UMP_COLL_REDUCE:
        for (int k = 1; k < n; k++)
            move(s, pos(k, root, n), pos(k + 1, root, n), S);
        break;
    case UMP_COLL_GATHER: /* the chain grows toward the root */
        for (int k = 1; k < n; k++)
            move(s, pos(k, root, n), pos(k + 1, root, n), k * chunk);
        break;
    default: /* scatter: the chain shrinks away from the root */
        for (int k = 0; k + 1 < n; k++)
            move(s, pos(k, root, n), pos(k + 1, root, n),
                 (n - 1 - k) * chunk);
        break;
    }
    s->hops = n - 1;
}

static void sched_tree(struct sched *s, int coll, int root, double S)
{
    int n = s->n, depth = 0;
    for (int k = n - 1; k > 0; k = (k - 1) / 2)
        depth++;
    for (int k = 1; k < n; k++) {
        int c = pos(k, root, n), p = pos((k - 1) / 2, root, n);
        if (coll != UMP_COLL_BROADCAST)
            move(s, c, p, S); /* reduction up */
        if (coll != UMP_COLL_REDUCE)
            move(s, p, c, S); /* broadcast down */
    }
    s->hops = coll == UMP_COLL_ALLREDUCE ? 2 * depth : depth;
}

static void sched_direct(struct sched *s, int coll, int root, double S,
                         double chunk)
{
    /* The rooted ones move only out of the root (broadcast, scatter) or
     * into it (reduce, gather); the others between every pair. */
    bool from_root = coll == UMP_COLL_BROADCAST || coll == UMP_COLL_SCATTER;
    bool to_root = coll == UMP_COLL_REDUCE || coll == UMP_COLL_GATHER;
    double bytes = coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE
                       ? S
                       : chunk;

    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->n; j++)
            if (i != j && (!from_root || i == root) && (!to_root || j == root))
                move(s, i, j, bytes);
    s->rounds = 1;
}

static void sched_build(struct sched *s, const struct coll_topo *t, int coll,
                        enum coll_algo a, int root, double S)
{
    int n = t->nranks;
    double chunk = S / n;

    memset(s, 0, sizeof(*s));
    s->n = n;
    for (int r = 0; r < n; r++)
        s->own[r] = own_bytes(coll, r == root, S, chunk);
    if (n == 1)
        return;
    switch (a) {
    case COLL_ONESHOT:
    case COLL_TWOSHOT:
        /* One-shot: every rank reads all of every peer. Two-shot: slice r
         * from every peer into rank r, then rank r's reduced slice back to
         * every peer. */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (i != j)
                    move(s, j, i, a == COLL_ONESHOT ? S : 2 * chunk);
        s->rounds = a == COLL_ONESHOT ? 1 : 2;
        break;
    case COLL_RING:
        sched_ring(s, coll, root, S, chunk);
        break;
    case COLL_TREE:
        sched_tree(s, coll, root, S);
        break;
    default:
        sched_direct(s, coll, root, S, chunk);
        break;
    }
}

/* The resources a transfer occupies, as bytes charged to each: the pair's
 * path, the sender's and the receiver's NVLink or PCIe port (the host path
 * and PCIe peers go by PCIe), and both ends' device memory. A transfer
 * from a rank to itself is local work: its memory only. The analytic model
 * (whole schedules) and the sim's executed accounting (coll_model_exec_us)
 * charge through this one rule, so that they can agree. A resource's bytes
 * over its bandwidth is its clock: the transfers on it one after another. */
struct res {
    double path[COLL_MAX_RANKS][COLL_MAX_RANKS];
    double nvl_out[COLL_MAX_RANKS], nvl_in[COLL_MAX_RANKS];
    double pcie_out[COLL_MAX_RANKS], pcie_in[COLL_MAX_RANKS];
    double mem[COLL_MAX_RANKS];
};

static void res_add(struct res *r, const struct coll_topo *t, int i, int j,
                    double b)
{
    if (i == j) {
        r->mem[i] += b;
        return;
    }
    r->path[i][j] += b;
    r->mem[i] += b;
    r->mem[j] += b;
    if (t->peer[i][j] && t->kind[i][j] == UMP_LINK_NVLINK) {
        r->nvl_out[i] += b;
        r->nvl_in[j] += b;
    } else {
        r->pcie_out[i] += b;
        r->pcie_in[j] += b;
    }
}

/* Microseconds the busiest resource needs when links run at factor times
 * their bandwidth (device memory always runs at its own). */
static double res_us(const struct res *r, const struct coll_topo *t,
                     double factor)
{
    double worst = 0; /* bytes / (GB/s) */
    int n = t->nranks;

    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && r->path[i][j] > 0)
                worst = maxd(worst, r->path[i][j] /
                                        (coll_model_path_gbs(t, i, j) *
                                         factor));
    for (int k = 0; k < n; k++) {
        if (t->nvl_port[k] > 0)
            worst = maxd(worst, maxd(r->nvl_out[k], r->nvl_in[k]) /
                                    (t->nvl_port[k] * factor));
        if (t->pcie_port[k] > 0)
            worst = maxd(worst, maxd(r->pcie_out[k], r->pcie_in[k]) /
                                    (t->pcie_port[k] * factor));
        if (t->local_bw > 0)
            worst = maxd(worst, r->mem[k] / t->local_bw);
    }
    return worst / 1e3; /* 1 GB/s moves 1e3 bytes a microsecond */
}

/* The schedule's bytes on every resource, its own buffers included. */
static void sched_res(const struct sched *s, const struct coll_topo *t,
                      struct res *r)
{
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < s->n; i++) {
        r->mem[i] = s->own[i];
        for (int j = 0; j < s->n; j++)
            if (i != j && s->pair[i][j] > 0)
                res_add(r, t, i, j, s->pair[i][j]);
    }
}

/* The slowest hop among the pairs used. */
static double used_hop_us(const bool used[COLL_MAX_RANKS][COLL_MAX_RANKS],
                          const struct coll_topo *t, double nvl, double pci)
{
    double worst = 0;
    for (int i = 0; i < t->nranks; i++)
        for (int j = 0; j < t->nranks; j++)
            if (used[i][j])
                worst = maxd(worst, hop(t, i, j, nvl, pci));
    return worst;
}

/* The slowest hop of the schedule's steps. */
static double sched_hop_us(const struct sched *s, const struct coll_topo *t,
                           double nvl, double pci)
{
    return used_hop_us(s->used, t, nvl, pci);
}

/* A barrier of the peer-pointer algorithms: flag every peer, one store
 * after another, and the last flag arrives one hop later. */
static double barrier_us(const bool used[COLL_MAX_RANKS][COLL_MAX_RANKS],
                         const struct coll_topo *t)
{
    return used_hop_us(used, t, nccl_hop_nvl_us[NCCL_RING][PROTO_LL],
                       nccl_hop_pci_us[NCCL_RING][PROTO_LL]) +
           (t->nranks - 1) * FLAG_US;
}

/* --- the fan: a small call in one launch --------------------------------
 *
 * Rank q (the root; rank 0 for allreduce, allgather and reduce-scatter)
 * runs the whole call in one launch over every rank's buffers: it reads
 * what each peer contributes and stores each peer's result, with no
 * barrier between ranks (the executors join the streams with events, which
 * the launch stands for). Its time is the launch, one hop for the remote
 * loads and stores in flight together, and the bytes on the busiest
 * resource. Every byte crosses q's port: for allreduce that is what each
 * port carries under one-shot anyway, so the fan always beats one-shot's
 * schedule (no barrier), and two-shot, moving less, overtakes it as the
 * buffers grow (at 4 ranks of dgx-h200 past 512 KiB, at 8 past 256 KiB);
 * allgather's fan stores n times what direct reads through one port, so
 * direct takes over early (on 4 NVLink ranks between 16 and 64 KiB a
 * rank). It applies to the calls the GPU's kernel runs in one launch
 * (kernel.h): allreduce under one-shot, broadcast, reduce, allgather and
 * reduce-scatter under direct, where every rank maps every other's memory
 * and the largest buffer is at most COLL_FAN_MAX. */
static bool fan_applies(const struct coll_topo *t, int coll,
                        enum coll_algo a, size_t bytes)
{
    if (t->nranks < 2 || bytes > COLL_FAN_MAX)
        return false;
    for (int i = 0; i < t->nranks; i++)
        for (int j = 0; j < t->nranks; j++)
            if (!t->peer[i][j])
                return false;
    if (coll == UMP_COLL_ALLREDUCE)
        return a == COLL_ONESHOT;
    return a == COLL_DIRECT &&
           (coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE ||
            coll == UMP_COLL_ALLGATHER || coll == UMP_COLL_REDUCE_SCATTER);
}

/* The fan's bytes (the executor logs the same, fan.c): what q reads from
 * each peer (in), what it stores into each (out), and what it touches of
 * its own buffers. */
static void sched_fan(struct sched *s, int coll, int q, double S,
                      double chunk)
{
    double in = S, out = S;
    switch (coll) {
    case UMP_COLL_BROADCAST:
        in = 0;
        break;
    case UMP_COLL_REDUCE:
        out = 0;
        break;
    case UMP_COLL_ALLGATHER:
        in = chunk;
        break;
    case UMP_COLL_REDUCE_SCATTER:
        out = chunk;
        break;
    default:
        break;
    }
    for (int r = 0; r < s->n; r++) {
        s->own[r] = r == q ? own_bytes(coll, true, S, chunk) : 0;
        if (r == q)
            continue;
        if (in > 0)
            move(s, r, q, in);
        if (out > 0)
            move(s, q, r, out);
    }
}

/* The fan's modeled time, INFINITY where it does not apply. */
static double fan_us(const struct coll_topo *t, int coll, enum coll_algo a,
                     size_t bytes, int q)
{
    struct sched s;
    struct res r;
    if (!fan_applies(t, coll, a, bytes))
        return INFINITY;
    memset(&s, 0, sizeof(s));
    s.n = t->nranks;
    sched_fan(&s, coll, q, (double)bytes, (double)bytes / s.n);
    sched_res(&s, t, &r);
    return LAUNCH_US +
           sched_hop_us(&s, t, nccl_hop_nvl_us[NCCL_RING][PROTO_LL],
                        nccl_hop_pci_us[NCCL_RING][PROTO_LL]) +
           res_us(&r, t, 1.0);
}

/* The rank that runs a fan: the root of broadcast and reduce, else 0. */
static int fan_rank(int coll, int root)
{
    return coll == UMP_COLL_BROADCAST || coll == UMP_COLL_REDUCE ? root : 0;
}

static double sched_us(const struct coll_topo *t, int coll, enum coll_algo a,
                       size_t bytes, int root)
{
    struct sched s;
    struct res r;

    sched_build(&s, t, coll, a, root, (double)bytes);
    sched_res(&s, t, &r);
    if (t->nranks == 1) /* a local copy, whatever the algorithm */
        return LAUNCH_US + res_us(&r, t, 1.0);
    if (a == COLL_RING || a == COLL_TREE) {
        int row = a == COLL_RING ? NCCL_RING : NCCL_TREE;
        double best = INFINITY;
        for (int p = 0; p < NPROTO; p++) {
            double lat = nccl_base_us[row][p] +
                         s.hops * sched_hop_us(&s, t, nccl_hop_nvl_us[row][p],
                                               nccl_hop_pci_us[row][p]);
            double us = lat + res_us(&r, t, nccl_bw_factor[row][p]);
            if (us < best)
                best = us;
        }
        return best;
    }
    return LAUNCH_US + s.rounds * barrier_us(s.used, t) + res_us(&r, t, 1.0);
}

int coll_model_fan(const struct coll_topo *t, int coll, enum coll_algo a,
                   size_t bytes, int root)
{
    /* The root matters to the rooted ones only (the others' may be
     * anything: ump_allreduce has none). */
    if (coll != UMP_COLL_BROADCAST && coll != UMP_COLL_REDUCE)
        root = 0;
    if (!topo_ok(t) || !coll_algo_applies(coll, a) || !rank_ok(t, root))
        return -1;
    int q = fan_rank(coll, root);
    double fan = fan_us(t, coll, a, bytes, q);
    return fan <= sched_us(t, coll, a, bytes, root) ? q : -1;
}

double coll_model_root_us(const struct coll_topo *t, int coll,
                          enum coll_algo a, size_t bytes, int root)
{
    if (!topo_ok(t) || !coll_algo_applies(coll, a) || !rank_ok(t, root))
        return INFINITY;
    double us = sched_us(t, coll, a, bytes, root);
    double fan = fan_us(t, coll, a, bytes, fan_rank(coll, root));
    return fan <= us ? fan : us;
}

double coll_model_us(const struct coll_topo *t, int coll, enum coll_algo a,
                     size_t bytes)
{
    return coll_model_root_us(t, coll, a, bytes, 0);
}

enum coll_algo coll_model_choose(const struct coll_topo *t, int coll,
                                 size_t bytes, double *us_p)
{
    return coll_model_choose_among(t, coll, bytes, COLL_ALGOS_ALL, us_p);
}

enum coll_algo coll_model_choose_among(const struct coll_topo *t, int coll,
                                       size_t bytes, unsigned algos,
                                       double *us_p)
{
    /* Ties: fewest synchronisation rounds first. */
    static const enum coll_algo order[COLL_NALGO] = {
        COLL_ONESHOT, COLL_DIRECT, COLL_TWOSHOT, COLL_TREE, COLL_RING};
    enum coll_algo best = COLL_NALGO;
    double best_us = INFINITY;

    for (int k = 0; k < COLL_NALGO; k++) {
        if (!(algos & 1u << order[k]))
            continue;
        double us = coll_model_us(t, coll, order[k], bytes);
        if (us < best_us) {
            best_us = us;
            best = order[k];
        }
    }
    if (us_p)
        *us_p = best_us;
    return best;
}

/* The executed schedule's time (model.h). Two kinds of schedule:
 *
 * Ring and tree are pipelined in NCCL: data moves in chunks, each handed on
 * with a flag as soon as it lands, so the steps overlap and a link is never
 * idle waiting for the others. The sim runs each step on the whole buffer
 * behind a barrier, but the barrier stands for that hand-off, not for a
 * stop: the resources' clocks run on through the steps (each is the sum of
 * its transfers' bytes over its bandwidth, at the protocol's factor), and
 * each step that moves data puts its slowest hop on the critical path. The
 * protocol is the plan's to choose, as NCCL's tuner does: the time is the
 * best of LL, LL128 and Simple, each with its constants.
 *
 * The peer-pointer schedules (oneshot, twoshot, direct) stop at every
 * barrier: within a step the resources' clocks serialize the step's
 * transfers, the step ends when the busiest one does, and the barrier then
 * aligns every clock to that plus its own cost (a hop and a flag per
 * peer). The call's first barrier is the launch (LAUNCH_US): it waits for
 * the streams, which the model does not charge.
 *
 * A hop's latency is charged per step, not per transfer: the transfers of
 * a step are in flight together, so their latencies overlap. */
double coll_model_exec_fan_us(const struct coll_topo *t,
                              const struct coll_xfer *log, size_t nlog)
{
    bool used[COLL_MAX_RANKS][COLL_MAX_RANKS] = {{false}};
    struct res r;

    if (!topo_ok(t) || (nlog && !log))
        return NAN;
    memset(&r, 0, sizeof(r));
    for (size_t e = 0; e < nlog; e++) {
        const struct coll_xfer *x = &log[e];
        if (!rank_ok(t, x->from) || !rank_ok(t, x->to))
            return NAN;
        if (x->from != x->to)
            used[x->from][x->to] = true;
        res_add(&r, t, x->from, x->to, (double)x->bytes);
    }
    return LAUNCH_US +
           used_hop_us(used, t, nccl_hop_nvl_us[NCCL_RING][PROTO_LL],
                       nccl_hop_pci_us[NCCL_RING][PROTO_LL]) +
           res_us(&r, t, 1.0);
}

double coll_model_exec_us(const struct coll_topo *t, enum coll_algo a,
                          const struct coll_xfer *const log[],
                          const size_t nlog[], unsigned nsteps)
{
    bool used[COLL_MAX_RANKS][COLL_MAX_RANKS] = {{false}};
    struct res r;

    if (!topo_ok(t) || !log || !nlog || (int)a < 0 || a >= COLL_NALGO)
        return NAN;
    int n = t->nranks;
    for (int k = 0; k < n; k++)
        for (size_t e = 0; e < nlog[k]; e++) {
            const struct coll_xfer *x = &log[k][e];
            if (!rank_ok(t, x->from) || !rank_ok(t, x->to) ||
                x->step >= nsteps)
                return NAN;
            if (x->from != x->to)
                used[x->from][x->to] = true;
        }
    if ((a == COLL_RING || a == COLL_TREE) && n > 1) {
        int row = a == COLL_RING ? NCCL_RING : NCCL_TREE;
        double best = INFINITY;
        memset(&r, 0, sizeof(r));
        for (int k = 0; k < n; k++)
            for (size_t e = 0; e < nlog[k]; e++)
                res_add(&r, t, log[k][e].from, log[k][e].to,
                        (double)log[k][e].bytes);
        for (int p = 0; p < NPROTO; p++) {
            double us = nccl_base_us[row][p];
            for (unsigned st = 0; st < nsteps; st++) {
                double h = 0;
                for (int k = 0; k < n; k++)
                    for (size_t e = 0; e < nlog[k]; e++)
                        if (log[k][e].step == st)
                            h = maxd(h, hop(t, log[k][e].from, log[k][e].to,
                                            nccl_hop_nvl_us[row][p],
                                            nccl_hop_pci_us[row][p]));
                us += h;
            }
            us += res_us(&r, t, nccl_bw_factor[row][p]);
            if (us < best)
                best = us;
        }
        return best;
    }
    double barrier = barrier_us(used, t), us = LAUNCH_US;
    for (unsigned st = 1; st < nsteps; st++) {
        memset(&r, 0, sizeof(r));
        for (int k = 0; k < n; k++)
            for (size_t e = 0; e < nlog[k]; e++)
                if (log[k][e].step == st)
                    res_add(&r, t, log[k][e].from, log[k][e].to,
                            (double)log[k][e].bytes);
        us += res_us(&r, t, 1.0) + barrier;
    }
    return us;
}
