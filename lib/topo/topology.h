/*
 * The machine model every layer above the backend sees: devices, their
 * memory and NUMA node, and a link between every pair. The sim backend reads
 * it from a topology file (topologies/NAME.topo); the cuda backend will discover
 * it. Nothing above the backend can tell the two apart.
 */
#ifndef UMP_TOPOLOGY_H
#define UMP_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>

#define UMP_MAX_NUMA 16

#include "umpool.h"

/* Link kinds (UMP_LINK_* in umpool.h), nearest first: the order is the
 * order of preference. */
#define UMP_LINK_KINDS 5

struct topo_link {
    int kind;        /* UMP_LINK_* */
    double bw_gbs;   /* GB/s per direction */
    int hops;        /* 0 self, 1 nvlink, 2 pcie switch, 3 host bridge, 4 sys */
    bool peer;       /* peer access possible (can map the other's memory) */
};

struct topo_device {
    char model[32];
    char pci[32];    /* PCI bus id, "" when unknown */
    size_t mem;      /* bytes */
    int numa;        /* host NUMA node nearest the device */
    double host_bw_gbs; /* its link to host memory, GB/s per direction */
};

struct ump_topology {
    char name[64];
    char source[256];                   /* file it came from, or "generated" */
    int ndev;
    int nnuma;                          /* NUMA nodes: 0 .. nnuma-1 */
    struct topo_device dev[UMP_MAX_DEVICES];
    struct topo_link link[UMP_MAX_DEVICES][UMP_MAX_DEVICES];
    double local_bw_gbs;                /* a device reading its own memory */
};

/* Parses topology text; errors are logged as "<origin>:<line>: <what>".
 * topo is written only on success. */
int topo_parse(const char *text, const char *origin, struct ump_topology *topo);
/* Reads and parses a file. */
int topo_load_file(const char *path, struct ump_topology *topo);
/* Resolves a name ("dgx-h200", "dgx-h200.topo") or a path (with a '/') to a
 * readable file: UMPOOL_TOPOLOGY_DIR, then the installed topologies folder. */
int topo_resolve(const char *name, char *path, size_t len);
/* n identical devices of mem bytes, every pair linked by NVLink, one NUMA
 * node. n is clamped to 1..UMP_MAX_DEVICES; callers validate it. */
void topo_make_uniform(struct ump_topology *topo, int n, size_t mem);
/* Can device `from` use memory of device `to` (itself, or a peer)? The one
 * reachability test of the library's internals; policies, which see only
 * the public view, ask pol_reachable, which reads the same links. */
static inline bool topo_reaches(const struct ump_topology *topo, int from,
                                int to)
{
    return from == to || topo->link[from][to].peer;
}

/* Devices other than dev, nearest first: bandwidth descending, then hops,
 * then index. Returns how many were written to order (ndev - 1), -EINVAL
 * when dev is not a device of topo. */
int topo_nearest(const struct ump_topology *topo, int dev, int *order);
const char *topo_link_kind_name(int kind);
/* A plain decimal ("16", "2.5") read without the locale (a program's
 * setlocale() must not change what a file says), at most max. Returns the
 * end of the number, or NULL when there is none or it is too big. */
const char *topo_parse_decimal(const char *s, double max, double *v_p);

#endif
