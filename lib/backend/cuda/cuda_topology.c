/*
 * Topology discovery on the cuda backend: the same struct ump_topology a
 * topology file gives the sim backend, learnt from the machine.
 *
 *  - Devices: model (cuDeviceGetName without "NVIDIA ", blanks made '-', so
 *    that it is one word as in a file), PCI bus id in sysfs form, memory
 *    (what is free at open, in the device's context), NUMA node (the driver's
 *    CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, else sysfs: the driver sees it where a
 *    virtual machine's PCI tree does not).
 *  - A device reading its own memory: memory clock x bus width x 2 (double
 *    data rate); the topology keeps the slowest device's figure.
 *  - Pairs: NVLink when NVML (loaded at run time) shows active links between
 *    them, directly or through NVSwitch; otherwise PCIe, classified by the
 *    sysfs tree: different NUMA nodes "sys", a PCIe switch below a root
 *    port in common "pcie", else "host"; bandwidth from the slower of the
 *    two devices' links. Peer access from cuDeviceCanAccessPeer; the
 *    driver's performance rank is logged at debug level (it has no place in
 *    the model, and its scale differs between platforms).
 *  - Host NUMA nodes from libnuma when configure found it.
 *
 * The sysfs readers take the sysfs root as a parameter and need no CUDA
 * headers, so that tests run them on a fake tree.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/internal.h"
#include "util/log.h"
#include "backend/cuda/cuda_backend.h"

/* --- sysfs ------------------------------------------------------------- */

/* 1 to max hex digits at *s, then the separator sep (or the end for 0). */
static int parse_hex(const char **s, int max, char sep, unsigned *v_p)
{
    unsigned v = 0;
    int n = 0;

    for (; n < max; n++, (*s)++) {
        char c = **s;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            break;
        v = v * 16 + (unsigned)d;
    }
    if (!n || **s != sep)
        return -EINVAL;
    if (sep)
        (*s)++;
    *v_p = v;
    return 0;
}

/* domain:bus:device.function, as the driver and sysfs write it. */
static int parse_busid(const char *busid, unsigned v[4])
{
    const char *s = busid;

    if (!s || parse_hex(&s, 8, ':', &v[0]) || parse_hex(&s, 2, ':', &v[1]) ||
        parse_hex(&s, 2, '.', &v[2]) || parse_hex(&s, 1, '\0', &v[3]) ||
        v[2] > 0x1f || v[3] > 7)
        return -EINVAL;
    return 0;
}

int cuda_pci_busid_norm(const char *busid, char *out, size_t len)
{
    unsigned v[4];
    int n;

    if (parse_busid(busid, v))
        return -EINVAL;
    n = snprintf(out, len, "%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Reads <root>/<rel> into buf, without trailing blanks; what does not fit
 * in len - 1 bytes is left out. Only a regular file is read: O_NONBLOCK so
 * that opening a FIFO planted in the tree does not wait for a writer, and
 * anything fstat does not call regular (a FIFO, a device, a socket, which
 * could block a read or never end) is -EINVAL. */
static int sysfs_read(const char *root, const char *rel, char *buf,
                      size_t len)
{
    char path[PATH_MAX];
    struct stat st;
    size_t got = 0;
    int fd, n, err = 0;

    n = snprintf(path, sizeof(path), "%s/%s", root, rel);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st))
        err = -errno;
    else if (!S_ISREG(st.st_mode))
        err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    while (!err && got + 1 < len) {
        ssize_t r = read(fd, buf + got, len - 1 - got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            err = -errno;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (err)
        return err;
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' '))
        got--;
    buf[got] = '\0';
    return 0;
}

/* Reads the PCI device's <root>/bus/pci/devices/<busid>/<leaf>. */
static int pci_read(const char *root, const char *busid, const char *leaf,
                    char *buf, size_t len)
{
    char rel[PATH_MAX];
    int n = snprintf(rel, sizeof(rel), "bus/pci/devices/%s/%s", busid, leaf);

    if (n < 0 || (size_t)n >= sizeof(rel))
        return -ENAMETOOLONG;
    return sysfs_read(root, rel, buf, len);
}

/* Reads the host node's <root>/devices/system/node/node<node>/<leaf>. */
static int node_read(const char *root, int node, const char *leaf, char *buf,
                     size_t len)
{
    char rel[PATH_MAX];
    int n = snprintf(rel, sizeof(rel), "devices/system/node/node%d/%s", node,
                     leaf);

    if (n < 0 || (size_t)n >= sizeof(rel))
        return -ENAMETOOLONG;
    return sysfs_read(root, rel, buf, len);
}

int cuda_sysfs_numa_node(const char *root, const char *busid)
{
    char buf[32], *end;
    long node;
    int err = pci_read(root, busid, "numa_node", buf, sizeof(buf));

    if (err)
        return err;
    errno = 0;
    node = strtol(buf, &end, 10);
    if (errno || end == buf || *end || node < -1 || node > INT_MAX)
        return -EINVAL;
    return node < 0 ? 0 : (int)node;
}

int cuda_sysfs_node_has_memory(const char *root, int node)
{
    char path[PATH_MAX], buf[4096];
    const char *p;
    unsigned long long kb;
    int err;

    if (node < 0)
        return 0;
    err = node_read(root, node, "meminfo", buf, sizeof(buf));
    if (err) {
        /* No node directory at all: a kernel without NUMA says nothing. */
        snprintf(path, sizeof(path), "%s/devices/system/node", root);
        if (access(path, F_OK) != 0)
            return -ENOENT;
        /* No such node: it has no memory to give. */
        snprintf(path, sizeof(path), "%s/devices/system/node/node%d", root,
                 node);
        if (access(path, F_OK) != 0 && errno == ENOENT)
            return 0;
        /* The node is there and its meminfo cannot be read: unknown. */
        return err == -ENOENT ? -ENODATA : err;
    }
    /* "Node 0 MemTotal:       16384 kB"; without it, unknown. */
    p = strstr(buf, "MemTotal:");
    if (!p || sscanf(p + strlen("MemTotal:"), "%llu", &kb) != 1)
        return -ENODATA;
    return kb > 0;
}

int cuda_sysfs_node_distance(const char *root, int node, int to)
{
    char buf[1024], *s = buf, *end;

    if (node < 0 || to < 0 || node_read(root, node, "distance", buf,
                                        sizeof(buf)))
        return -1;
    /* One figure per node, in node order ("10 21"). */
    for (int i = 0;; i++) {
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT_MAX)
            return -1;
        if (i == to)
            return (int)v;
        s = end;
    }
}

int cuda_sysfs_pci_path(const char *root, const char *busid, char *path,
                        size_t len)
{
    char link[PATH_MAX], target[PATH_MAX];
    const char *p;
    ssize_t n;

    n = snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, busid);
    if (n < 0 || (size_t)n >= sizeof(link))
        return -ENAMETOOLONG;
    n = readlink(link, target, sizeof(target) - 1);
    if (n < 0)
        return -errno;
    target[n] = '\0';
    p = strstr(target, "devices/pci");
    if (!p)
        return -EINVAL;
    p += strlen("devices/");
    if (strlen(p) >= len)
        return -ENAMETOOLONG;
    memcpy(path, p, strlen(p) + 1);
    return 0;
}

/* Components the two paths share before their last one (the devices). */
static int common_ancestors(const char *a, const char *b)
{
    int n = 0;

    for (;;) {
        const char *ea = strchr(a, '/'), *eb = strchr(b, '/');

        if (!ea || !eb || ea - a != eb - b || memcmp(a, b, (size_t)(ea - a)))
            return n;
        n++;
        a = ea + 1;
        b = eb + 1;
    }
}

/* The first component is the host bridge ("pci0000:10"), the second a root
 * port; a root port has one link, so two devices below the same one meet in
 * a switch further down. */
bool cuda_pci_same_switch(const char *path_a, const char *path_b)
{
    return common_ancestors(path_a, path_b) >= 2;
}

int cuda_parse_gts(const char *text, double *gts_p)
{
    const char *s = text;
    double v;

    while (*s == ' ')
        s++;
    s = topo_parse_decimal(s, 1e6, &v);
    if (!s)
        return -EINVAL;
    while (*s == ' ')
        s++;
    if (v <= 0 || strncmp(s, "GT/s", 4) != 0)
        return -EINVAL;
    *gts_p = v;
    return 0;
}

/* "16" or "x16" lanes. */
static int parse_width(const char *text, double *w_p)
{
    const char *s = text;
    double v;

    if (*s == 'x')
        s++;
    s = topo_parse_decimal(s, 1e6, &v);
    if (!s || *s || v < 1 || v > 64 || v != (int)v)
        return -EINVAL;
    *w_p = v;
    return 0;
}

double cuda_pcie_gbs(double gts, int width)
{
    /* 8b/10b coding up to 5 GT/s (gen 1 and 2), 128b/130b from gen 3. */
    double coding = gts < 8 ? 8.0 / 10 : 128.0 / 130;

    return gts * width * coding / 8;
}

/* The link's rate (GT/s) or width (lanes). What both ends can do (max_link_*
 * of the device and of the port above it) comes first: GPUs slow an idle
 * link down, and current_link_speed then reads 2.5 GT/s. The current value
 * serves when the maxima cannot be read. */
static int link_value(const char *root, const char *busid, bool speed,
                      double *v_p)
{
    int (*parse)(const char *, double *) = speed ? cuda_parse_gts
                                                 : parse_width;
    const char *max = speed ? "max_link_speed" : "max_link_width";
    const char *cur = speed ? "current_link_speed" : "current_link_width";
    char buf[64], up[64];
    double dev, port;

    if (!pci_read(root, busid, max, buf, sizeof(buf)) && !parse(buf, &dev)) {
        snprintf(up, sizeof(up), "../%s", max);
        if (!pci_read(root, busid, up, buf, sizeof(buf)) &&
            !parse(buf, &port) && port < dev)
            dev = port;
        *v_p = dev;
        return 0;
    }
    if (!pci_read(root, busid, cur, buf, sizeof(buf)) && !parse(buf, &dev)) {
        *v_p = dev;
        return 0;
    }
    return -ENOENT;
}

int cuda_sysfs_link_gbs(const char *root, const char *busid, double *gbs_p)
{
    double gts, width;

    if (link_value(root, busid, true, &gts) ||
        link_value(root, busid, false, &width))
        return -ENOENT;
    *gbs_p = cuda_pcie_gbs(gts, (int)width);
    return 0;
}

/* NVML numbers versions as an enum (nvmlNvlinkVersion_t: 1 NVLink 1.0, 2
 * and 3 2.x, 4 and 5 3.x, 6 4.0, 7 5.0); older drivers returned the plain
 * major, which lands on the same rates except for 5.0, whose GPUs need the
 * newer drivers. Unknown versions count as the common 25 GB/s. */
double cuda_nvlink_link_gbs(unsigned nvml_version)
{
    if (nvml_version == 1)
        return 20;
    if (nvml_version >= 7)
        return 50;
    return 25;
}

/* --- virtual devices (cuda_virtual_devices) ---------------------------- */

int cuda_topology_virtualize(struct ump_topology *t, int nvirt)
{
    struct ump_topology *p;
    int nphys = t->ndev, keep;
    char tail[16];

    if (nvirt <= 1)
        return 0;
    if (nphys < 1 || nphys > UMP_MAX_DEVICES / nvirt) {
        ump_log_error("cuda: %d virtual devices on each of %d GPUs are "
                      "more than the %d a pool holds", nvirt, nphys,
                      UMP_MAX_DEVICES);
        return -EINVAL;
    }
    /* The physical one is read while t is rewritten. */
    p = malloc(sizeof(*p));
    if (!p) {
        ump_log_error("cuda: out of host memory for the topology");
        return -ENOMEM;
    }
    *p = *t;
    t->ndev = nphys * nvirt;
    for (int v = 0; v < t->ndev; v++) {
        const struct topo_device *pd = &p->dev[v / nvirt];
        struct topo_device *vd = &t->dev[v];
        char suffix[16];

        /* "H200/v3": the GPU's model, the index within the GPU; the PCI
         * bus id (the GPU's) says which GPU. The model is cut, not the
         * suffix, when both do not fit. */
        snprintf(suffix, sizeof(suffix), "/v%d", v % nvirt);
        keep = (int)(sizeof(vd->model) - 1 - strlen(suffix));
        snprintf(vd->model, sizeof(vd->model), "%.*s%s", keep, pd->model,
                 suffix);
        memcpy(vd->pci, pd->pci, sizeof(vd->pci));
        vd->mem = pd->mem / (size_t)nvirt;
        vd->numa = pd->numa;
        vd->host_bw_gbs = pd->host_bw_gbs; /* the GPU's one PCIe link */
        for (int w = 0; w < t->ndev; w++) {
            struct topo_link *l = &t->link[v][w];

            if (v == w)
                *l = p->link[v / nvirt][v / nvirt]; /* SELF */
            else if (v / nvirt == w / nvirt)
                /* One memory: the device's own bandwidth, always peer
                 * (every virtual device maps every chunk of its GPU). */
                *l = (struct topo_link){UMP_LINK_NVLINK, t->local_bw_gbs,
                                        1, true};
            else
                *l = p->link[v / nvirt][w / nvirt];
        }
    }
    /* "cuda-1xH200-v4"; the GPUs' name is cut, not the tail. */
    snprintf(tail, sizeof(tail), "-v%d", nvirt);
    keep = (int)(sizeof(t->name) - 1 - strlen(tail));
    snprintf(t->name, sizeof(t->name), "%.*s%s", keep, p->name, tail);
    free(p);
    return 0;
}

#ifdef HAVE_CUDA_H

#include <dlfcn.h>
#ifdef HAVE_LIBNUMA
#include <numa.h>
#endif

/* Generation 4 x16, for a device whose link sysfs does not show. */
#define PCIE_UNKNOWN_GTS 16.0
#define PCIE_UNKNOWN_WIDTH 16
/* What a topology file assumes when it does not say. */
#define LOCAL_BW_UNKNOWN 4000.0

static const int kind_hops[UMP_LINK_KINDS] = {0, 1, 2, 3, 4};

/* Work space of one discovery (too large for a stack). */
struct discovery {
    CUdevice dev[UMP_MAX_DEVICES];
    unsigned pci[UMP_MAX_DEVICES][4]; /* domain, bus, device, function */
    bool have_pci[UMP_MAX_DEVICES];
    char path[UMP_MAX_DEVICES][PATH_MAX]; /* "" when unknown */
    double pcie_gbs[UMP_MAX_DEVICES];
    double local_gbs[UMP_MAX_DEVICES]; /* 0 when unknown */
    double nvl_direct[UMP_MAX_DEVICES][UMP_MAX_DEVICES];
    double nvl_switch[UMP_MAX_DEVICES];
};

/* "NVIDIA H100 80GB HBM3" -> "H100-80GB-HBM3". */
static void model_name(const char *raw, char *out, size_t len)
{
    size_t n = 0;

    if (strncmp(raw, "NVIDIA ", 7) == 0)
        raw += 7;
    for (; *raw && n + 1 < len; raw++)
        out[n++] = *raw == ' ' || *raw == '\t' ? '-' : *raw;
    out[n] = '\0';
    if (!n)
        snprintf(out, len, "gpu");
}

#if CUDA_VERSION >= 13000
#define ATTR_HOST_NUMA_ID CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
#else /* the number is ABI; the name came with 12.2 */
#define ATTR_HOST_NUMA_ID ((CUdevice_attribute)134)
#endif

/* CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, or -1 when the driver does not know it
 * (older than 12.2, or no NUMA). */
static int device_host_numa(const struct cudrv_api *api, CUdevice dev)
{
    int node = -1;

    if (api->cuDeviceGetAttribute(&node, ATTR_HOST_NUMA_ID, dev) !=
            CUDA_SUCCESS ||
        node < 0)
        return -1;
    return node;
}

static int device_info(const struct cudrv_api *api, CUcontext ctx, int d,
                       const char *root, struct discovery *ds,
                       struct ump_topology *t)
{
    struct topo_device *td = &t->dev[d];
    char raw[256] = "", bus[64] = "";
    int clock = 0, width = 0, host_numa, err;
    size_t free_b = 0, total_b = 0;
    CUcontext saved;
    CUresult res;

    res = api->cuDeviceGet(&ds->dev[d], d);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(api, res, UMP_LOG_ERROR, "cuDeviceGet(%d)", d);
    if (api->cuDeviceGetName(raw, sizeof(raw), ds->dev[d]) != CUDA_SUCCESS)
        raw[0] = '\0';
    model_name(raw, td->model, sizeof(td->model));

    err = cudrv_ctx_enter(api, ctx, &saved);
    if (err)
        return err;
    res = api->cuMemGetInfo(&free_b, &total_b);
    cudrv_ctx_leave(api, ctx, saved);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(api, res, UMP_LOG_ERROR,
                         "cuMemGetInfo of device %d", d);
    td->mem = free_b;

    if (!api->cuDeviceGetAttribute(
            &clock, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, ds->dev[d]) &&
        !api->cuDeviceGetAttribute(
            &width, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, ds->dev[d]) &&
        clock > 0 && width > 0) /* kHz x bits x 2 transfers / 8 bits */
        ds->local_gbs[d] = (double)clock * 1e3 * width * 2 / 8 / 1e9;

    /* The host node nearest the device, as the driver sees it (12.2): what
     * the driver itself goes by for HOST_NUMA memory, and known where
     * sysfs is not (a virtual machine's PCI tree). -1: no NUMA. */
    host_numa = device_host_numa(api, ds->dev[d]);
    if (host_numa >= 0)
        td->numa = host_numa;
    ds->pcie_gbs[d] = cuda_pcie_gbs(PCIE_UNKNOWN_GTS, PCIE_UNKNOWN_WIDTH);
    if (api->cuDeviceGetPCIBusId(bus, sizeof(bus), ds->dev[d]) !=
            CUDA_SUCCESS ||
        cuda_pci_busid_norm(bus, td->pci, sizeof(td->pci)) ||
        parse_busid(td->pci, ds->pci[d])) {
        ump_log_debug("cuda: device %d: no usable PCI bus id ('%s')", d, bus);
        td->pci[0] = '\0';
        return 0;
    }
    ds->have_pci[d] = true;
    if (host_numa >= 0) {
        td->numa = host_numa;
    } else {
        err = cuda_sysfs_numa_node(root, td->pci);
        td->numa = err < 0 ? 0 : err;
        if (err < 0)
            ump_log_debug("cuda: device %d (%s): no NUMA node in sysfs: %s",
                          d, td->pci, strerror(-err));
    }
    if (cuda_sysfs_link_gbs(root, td->pci, &ds->pcie_gbs[d]))
        ump_log_debug("cuda: device %d (%s): PCIe link unknown, assuming "
                      "%.0f GT/s x%d", d, td->pci, PCIE_UNKNOWN_GTS,
                      PCIE_UNKNOWN_WIDTH);
    if (cuda_sysfs_pci_path(root, td->pci, ds->path[d], PATH_MAX))
        ds->path[d][0] = '\0';
    return 0;
}

/* --- NVML ---------------------------------------------------------------- */

/* The few NVML declarations needed (nvml.h is not part of the toolkit
 * headers); layouts as documented for nvmlPciInfo_t. */
typedef struct nvml_device *nvml_device_t;
struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
#define NVML_SUCCESS 0
#define NVML_FEATURE_ENABLED 1
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2
#define NVML_NVLINK_MAX_LINKS 18 /* of current nvml.h (Hopper, Blackwell) */

struct nvml {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_pci)(const char *, nvml_device_t *);
    int (*state)(nvml_device_t, unsigned, int *);
    int (*remote_pci)(nvml_device_t, unsigned, struct nvml_pci_info *);
    int (*version)(nvml_device_t, unsigned, unsigned *);
    int (*remote_type)(nvml_device_t, unsigned, int *); /* may be absent */
};

static void nvml_sym(void *lib, const char *name, void *fn_p, size_t size)
{
    void *sym = dlsym(lib, name);

    memcpy(fn_p, &sym, size);
}

#define NVML_SYM(n, member, name) nvml_sym((n)->lib, name, &(n)->member,   \
                                           sizeof((n)->member))

/* Loads and initialises NVML; false (logged at debug) when it cannot. */
static bool nvml_open(const char *path, struct nvml *n)
{
    int rc;

    memset(n, 0, sizeof(*n));
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *e = dlerror();
        ump_log_debug("cuda: no NVML (%s): links from PCIe only",
                      e ? e : path);
        return false;
    }
    NVML_SYM(n, init, "nvmlInit_v2");
    NVML_SYM(n, shutdown, "nvmlShutdown");
    NVML_SYM(n, by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    NVML_SYM(n, state, "nvmlDeviceGetNvLinkState");
    NVML_SYM(n, remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    NVML_SYM(n, version, "nvmlDeviceGetNvLinkVersion");
    NVML_SYM(n, remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    if (!n->init || !n->shutdown || !n->by_pci || !n->state ||
        !n->remote_pci || !n->version) {
        ump_log_debug("cuda: %s lacks NVLink queries: links from PCIe only",
                      path);
        goto err_close;
    }
    rc = n->init();
    if (rc != NVML_SUCCESS) {
        ump_log_debug("cuda: nvmlInit_v2 failed (%d): links from PCIe only",
                      rc);
        goto err_close;
    }
    return true;

err_close:
    dlclose(n->lib);
    return false;
}

/* Our device at that PCI address, or -1. */
static int device_at(const struct discovery *ds, int ndev,
                     const struct nvml_pci_info *pci)
{
    for (int d = 0; d < ndev; d++)
        if (ds->have_pci[d] && ds->pci[d][0] == pci->domain &&
            ds->pci[d][1] == pci->bus && ds->pci[d][2] == pci->device)
            return d;
    return -1;
}

/* Adds up device d's active links: to another of our devices (direct), or
 * to an NVSwitch, which reaches every other device on the switch fabric. */
static void nvml_device_links(const struct nvml *n, struct discovery *ds,
                              int ndev, int d, const char *pci)
{
    nvml_device_t h;
    int rc = n->by_pci(pci, &h);

    if (rc != NVML_SUCCESS) {
        ump_log_debug("cuda: NVML does not know device %d (%s): error %d", d,
                      pci, rc);
        return;
    }
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        struct nvml_pci_info remote;
        unsigned version = 0;
        int active = 0, type = -1, peer;
        double gbs;

        if (n->state(h, l, &active) != NVML_SUCCESS ||
            active != NVML_FEATURE_ENABLED)
            continue;
        memset(&remote, 0, sizeof(remote));
        if (n->remote_pci(h, l, &remote) != NVML_SUCCESS)
            continue;
        if (n->version(h, l, &version) != NVML_SUCCESS)
            version = 0;
        gbs = cuda_nvlink_link_gbs(version);
        peer = device_at(ds, ndev, &remote);
        if (peer >= 0 && peer != d) {
            ds->nvl_direct[d][peer] += gbs;
            continue;
        }
        /* Without the type query, a remote that is none of our GPUs is
         * taken for a switch; with it, hidden GPUs and CPUs are not. */
        if (n->remote_type && n->remote_type(h, l, &type) == NVML_SUCCESS &&
            type != NVML_NVLINK_DEVICE_TYPE_SWITCH)
            continue;
        if (peer < 0)
            ds->nvl_switch[d] += gbs;
    }
}

/* Overlays NVLink on the PCIe links when NVML can tell. */
static void nvlink_links(const char *nvml_path, struct discovery *ds,
                         struct ump_topology *t)
{
    struct nvml n;

    if (t->ndev < 2 || !nvml_open(nvml_path, &n))
        return;
    for (int d = 0; d < t->ndev; d++)
        if (ds->have_pci[d])
            nvml_device_links(&n, ds, t->ndev, d, t->dev[d].pci);
    n.shutdown();
    dlclose(n.lib);

    for (int a = 0; a < t->ndev; a++) {
        for (int b = 0; b < t->ndev; b++) {
            double sw = ds->nvl_switch[a] < ds->nvl_switch[b]
                            ? ds->nvl_switch[a] : ds->nvl_switch[b];
            double bw = ds->nvl_direct[a][b] + sw;
            struct topo_link *l = &t->link[a][b];

            if (a == b || bw <= 0)
                continue;
            l->kind = UMP_LINK_NVLINK;
            l->bw_gbs = bw;
            l->hops = kind_hops[UMP_LINK_NVLINK];
        }
    }
}

/* --- the whole machine ------------------------------------------------- */

static int host_numa_nodes(void)
{
#ifdef HAVE_LIBNUMA
    if (numa_available() >= 0)
        return numa_max_node() + 1;
#endif
    return 1;
}

static void pcie_links(const struct cudrv_api *api, struct discovery *ds,
                       struct ump_topology *t)
{
    for (int a = 0; a < t->ndev; a++) {
        t->dev[a].host_bw_gbs = ds->pcie_gbs[a]; /* its own PCIe link */
        for (int b = 0; b < t->ndev; b++) {
            struct topo_link *l = &t->link[a][b];
            int can = 0, rank = -1, kind;

            if (a == b) {
                *l = (struct topo_link){UMP_LINK_SELF, t->local_bw_gbs, 0,
                                        true};
                continue;
            }
            if (api->cuDeviceCanAccessPeer(&can, ds->dev[a], ds->dev[b]) !=
                CUDA_SUCCESS)
                can = 0;
            if (api->cuDeviceGetP2PAttribute(
                    &rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
                    ds->dev[a], ds->dev[b]) == CUDA_SUCCESS)
                ump_log_debug("cuda: devices %d -> %d: peer access %s, "
                              "performance rank %d", a, b, can ? "yes" : "no",
                              rank);
            if (t->dev[a].numa != t->dev[b].numa)
                kind = UMP_LINK_SYS;
            else if (ds->path[a][0] && ds->path[b][0] &&
                     cuda_pci_same_switch(ds->path[a], ds->path[b]))
                kind = UMP_LINK_PCIE;
            else
                kind = UMP_LINK_HOST;
            *l = (struct topo_link){
                kind,
                ds->pcie_gbs[a] < ds->pcie_gbs[b] ? ds->pcie_gbs[a]
                                                  : ds->pcie_gbs[b],
                kind_hops[kind], can != 0};
        }
    }
}

static void name_machine(struct ump_topology *t)
{
    bool same = true;

    for (int d = 1; d < t->ndev; d++)
        if (strcmp(t->dev[d].model, t->dev[0].model) != 0)
            same = false;
    snprintf(t->name, sizeof(t->name), "cuda-%dx%s", t->ndev,
             same ? t->dev[0].model : "mixed");
    snprintf(t->source, sizeof(t->source), "discovered");
}

int cuda_topology_discover(const struct cudrv_api *api, int ndev,
                           const CUcontext *ctxs, const char *sysfs_root,
                           const char *nvml_path, struct ump_topology *topo)
{
    struct discovery *ds;
    struct ump_topology *t;
    int err = -ENOMEM, nnuma;

    if (ndev < 1 || ndev > UMP_MAX_DEVICES) {
        ump_log_error("cuda: cannot describe %d devices", ndev);
        return -EINVAL;
    }
    ds = calloc(1, sizeof(*ds));
    t = calloc(1, sizeof(*t));
    if (!ds || !t) {
        ump_log_error("cuda: out of host memory for the topology");
        goto out;
    }
    t->ndev = ndev;
    for (int d = 0; d < ndev; d++) {
        err = device_info(api, ctxs[d], d, sysfs_root, ds, t);
        if (err)
            goto out;
    }

    nnuma = host_numa_nodes();
    for (int d = 0; d < ndev; d++) {
        if (t->dev[d].numa >= UMP_MAX_NUMA) {
            ump_log_debug("cuda: device %d: NUMA node %d is beyond the %d "
                          "the model holds; counted as node 0", d,
                          t->dev[d].numa, UMP_MAX_NUMA);
            t->dev[d].numa = 0;
        }
        if (t->dev[d].numa >= nnuma)
            nnuma = t->dev[d].numa + 1;
    }
    t->nnuma = nnuma < UMP_MAX_NUMA ? nnuma : UMP_MAX_NUMA;

    t->local_bw_gbs = 0;
    for (int d = 0; d < ndev; d++)
        if (ds->local_gbs[d] > 0 &&
            (t->local_bw_gbs == 0 || ds->local_gbs[d] < t->local_bw_gbs))
            t->local_bw_gbs = ds->local_gbs[d];
    if (t->local_bw_gbs == 0)
        t->local_bw_gbs = LOCAL_BW_UNKNOWN;

    pcie_links(api, ds, t);
    nvlink_links(nvml_path, ds, t);
    name_machine(t);
    *topo = *t;
    err = 0;
out:
    free(t);
    free(ds);
    return err;
}

#endif /* HAVE_CUDA_H */
