/*
 * umpool-inspect topo: the matrix `nvidia-smi topo -m` prints, from the
 * model every pool has (ump_device_props, ump_link_props), so that a
 * simulated machine reads like a real one.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "inspect_fmt.h"
#include "umpool.h"

/* nvidia-smi's names for the link kinds, by UMP_LINK_*. */
static const char *const link_code[] = {"X", "NV", "PIX", "PHB", "SYS"};

static const char *code(int kind)
{
    return kind >= 0 && kind < (int)ARRAY_LEN(link_code) ? link_code[kind]
                                                          : "?";
}

static void topo_text(FILE *out, ump_pool_t *pool, int n, const char *what)
{
    char s[FMT_SIZE_LEN];
    fprintf(out, "%s: %d device%s, backend %s\n\n", what, n, n == 1 ? "" : "s",
            ump_backend_name(pool));
    fprintf(out, "%-7s", "");
    for (int j = 0; j < n; j++)
        fprintf(out, " GPU%-4d", j);
    fprintf(out, " %-5s %-16s %s\n", "NUMA", "MODEL", "MEMORY");
    bool nopeer = false;
    for (int i = 0; i < n; i++) {
        ump_device_props_t p;
        if (ump_device_props(pool, i, &p))
            memset(&p, 0, sizeof(p));
        fprintf(out, "GPU%-4d", i);
        for (int j = 0; j < n; j++) {
            ump_link_props_t l;
            char cell[16];
            if (ump_link_props(pool, i, j, &l)) {
                snprintf(cell, sizeof(cell), "?");
            } else {
                snprintf(cell, sizeof(cell), "%s%s", code(l.kind),
                         i != j && !l.peer ? "*" : "");
                nopeer |= i != j && !l.peer;
            }
            fprintf(out, " %-7s", cell);
        }
        fprintf(out, " %-5d %-16s %s\n", p.numa_node,
                p.model[0] ? p.model : "-", fmt_size(s, p.capacity));
    }
    fprintf(out, "\nBandwidth, GB/s per direction:\n%-7s", "");
    for (int j = 0; j < n; j++)
        fprintf(out, j + 1 < n ? " GPU%-4d" : " GPU%d", j);
    fputc('\n', out);
    for (int i = 0; i < n; i++) {
        fprintf(out, "GPU%-4d", i);
        for (int j = 0; j < n; j++) {
            ump_link_props_t l;
            char cell[32] = "?";
            if (!ump_link_props(pool, i, j, &l))
                snprintf(cell, sizeof(cell), "%g", l.bandwidth_gbs);
            fprintf(out, j + 1 < n ? " %-7s" : " %s", cell);
        }
        fputc('\n', out);
    }
    fprintf(out, "\nLegend:\n"
            "  X    = the device itself (its own memory's bandwidth)\n"
            "  NV   = NVLink, direct or through NVSwitch\n"
            "  PIX  = PCIe through a switch, on one CPU socket\n"
            "  PHB  = PCIe through the CPU's host bridge, on one socket\n"
            "  SYS  = across the CPU sockets' interconnect\n");
    if (nopeer)
        fprintf(out, "  *    = no peer access: copies go through host "
                "memory\n");
}

static void topo_json(FILE *out, ump_pool_t *pool, int n, const char *what)
{
    fprintf(out, "{\n  \"machine\": ");
    fmt_json_string(out, what);
    fprintf(out, ",\n  \"backend\": ");
    fmt_json_string(out, ump_backend_name(pool));
    fprintf(out, ",\n  \"devices\": [\n");
    for (int i = 0; i < n; i++) {
        ump_device_props_t p;
        if (ump_device_props(pool, i, &p))
            memset(&p, 0, sizeof(p));
        fprintf(out, "    {\"device\": %d, \"model\": ", i);
        fmt_json_string(out, p.model);
        fprintf(out, ", \"pci_bus_id\": ");
        fmt_json_string(out, p.pci_bus_id);
        fprintf(out, ", \"capacity\": %zu, \"numa_node\": %d}%s\n", p.capacity,
                p.numa_node, i + 1 < n ? "," : "");
    }
    fprintf(out, "  ],\n  \"links\": [\n");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            ump_link_props_t l;
            if (ump_link_props(pool, i, j, &l))
                memset(&l, 0, sizeof(l));
            fprintf(out, "    {\"from\": %d, \"to\": %d, \"kind\": \"%s\", "
                    "\"bandwidth_gbs\": %g, \"hops\": %d, \"peer\": %s}%s\n",
                    i, j, ump_link_kind_name(l.kind), l.bandwidth_gbs, l.hops,
                    l.peer ? "true" : "false",
                    i + 1 < n || j + 1 < n ? "," : "");
        }
    fprintf(out, "  ]\n}\n");
}

int fmt_topo(FILE *out, const char *topology, bool json)
{
    char conf[4200];
    if (topology && strchr(topology, ',')) {
        fprintf(stderr, "umpool-inspect: topo: a topology file name may not "
                "hold ',' (%s)\n", topology);
        return 1;
    }
    /* Statistics off: this short-lived pool is not worth a segment. */
    if (topology)
        snprintf(conf, sizeof(conf), "backend:sim,publish:false,"
                 "sim_topology:%s", topology);
    else
        snprintf(conf, sizeof(conf), "publish:false");
    ump_pool_t *pool;
    int rc = ump_pool_create(conf, &pool);
    if (rc) {
        fprintf(stderr, "umpool-inspect: topo: cannot open %s: %s\n",
                topology ? topology : "this machine's devices",
                ump_strerror(rc));
        return 1;
    }
    int n = ump_device_count(pool);
    const char *what = topology ? topology
                       : strcmp(ump_backend_name(pool), "sim")
                           ? "this machine"
                           : "no usable GPU here: the sim backend's machine";
    if (n > 0 && json)
        topo_json(out, pool, n, what);
    else if (n > 0)
        topo_text(out, pool, n, what);
    ump_pool_destroy(pool);
    if (n <= 0) {
        fprintf(stderr, "umpool-inspect: topo: no device (%s)\n",
                ump_strerror(n));
        return 1;
    }
    return 0;
}
