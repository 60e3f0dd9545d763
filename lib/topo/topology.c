/*
 * Topology files: the machine model of the sim backend.
 *
 * A file is read line by line; '#' starts a comment that runs to the end of
 * the line, blank lines are ignored, words are separated by blanks. One
 * directive per line:
 *
 *   name <word>            name of the machine (default: the file name
 *                          without ".topo")
 *   numa <count>           host NUMA nodes 0..count-1 (default 1, at most
 *                          UMP_MAX_NUMA)
 *   local_bw <GB/s>        a device reading its own memory (default 4000)
 *   pcie_bw <GB/s>         bandwidth of the pairs no link line names,
 *                          and of every device's link to the host
 *                          (default 55)
 *   device <id|a-b> mem <size> numa <node> [model <word>] [pci <busid>]
 *                          one device, or a range of identical ones (no pci
 *                          for a range). Ids come in order 0, 1, 2... without
 *                          gaps, below UMP_MAX_DEVICES. Sizes take K/M/G/T
 *                          (binary units), at most 1 PiB per device.
 *   link <set> <set> <kind> <GB/s> [nopeer]
 *                          sets the link of every pair (a, b), a from the
 *                          first set, b from the second, a != b, in both
 *                          directions. A set is "3", "0-7", "0,2,5", a mix
 *                          such as "0-1,4", or "all" (the devices declared so
 *                          far). kind: nvlink | pcie | host | sys. A later
 *                          line overrides an earlier one for the same pair.
 *
 * name, numa, local_bw and pcie_bw may appear once each, anywhere. A link
 * line may only name devices declared above it. Pairs no link line names get
 * "host" at pcie_bw on the same NUMA node and "sys" at pcie_bw across nodes,
 * both with peer access. Hops follow the kind: self 0, nvlink 1, pcie 2,
 * host 3, sys 4. Numbers are plain decimals ("450", "25.6"), parsed without
 * the locale so that a program's setlocale() cannot change their meaning.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/conf.h"
#include "util/internal.h"
#include "topo/topology.h"

#ifndef UMP_TOPOLOGY_DIR
#define UMP_TOPOLOGY_DIR "/usr/local/share/umpool/topologies"
#endif

#define TOPO_FILE_MAX (1u << 20)
#define TOPO_MAX_WORDS 16
#define TOPO_MEM_MAX ((size_t)1 << 50)
/* Far above any real link; keeps every sum a policy makes finite. */
#define TOPO_BW_MAX 1e6
#define TOPO_COUNT_MAX 1000000L

_Static_assert(UMP_MAX_DEVICES <= 64, "device sets are 64-bit masks");

static const char *const kind_names[UMP_LINK_KINDS] = {
    "self", "nvlink", "pcie", "host", "sys",
};

static const int kind_hops[UMP_LINK_KINDS] = {0, 1, 2, 3, 4};

struct parser {
    const char *origin;
    int line;
    bool have_name, have_numa, have_local_bw, have_pcie_bw;
    double pcie_bw;
    int dev_line[UMP_MAX_DEVICES];
    bool linked[UMP_MAX_DEVICES][UMP_MAX_DEVICES];
    struct ump_topology t;
};

__attribute__((format(printf, 2, 3)))
static int perr(const struct parser *p, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ump_log_error("%s:%d: %s", p->origin, p->line, msg);
    return -EINVAL;
}

/* Copies src into dst[size], cutting it if needed; dst is always terminated. */
static void copy_str(char *dst, size_t size, const char *src, size_t n)
{
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Decimal digits only, at most TOPO_COUNT_MAX. */
static int parse_count(const char *s, size_t n, long *v_p)
{
    long v = 0;

    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (s[i] - '0');
        if (v > TOPO_COUNT_MAX)
            return -EINVAL;
    }
    *v_p = v;
    return 0;
}

const char *topo_parse_decimal(const char *s, double max, double *v_p)
{
    double v = 0, scale = 1;
    bool dot = false, digit = false;

    for (; *s; s++) {
        if (*s == '.' && !dot) {
            dot = true;
        } else if (*s >= '0' && *s <= '9') {
            digit = true;
            if (dot) {
                scale /= 10;
                v += (*s - '0') * scale;
            } else {
                v = v * 10 + (*s - '0');
            }
            if (v > max)
                return NULL;
        } else {
            break;
        }
    }
    if (!digit)
        return NULL;
    *v_p = v;
    return s;
}

/* "450" or "25.6": positive, at most TOPO_BW_MAX. */
static int parse_bw(const char *s, double *bw_p)
{
    double v;
    const char *end = topo_parse_decimal(s, TOPO_BW_MAX, &v);
    if (!end || *end || v <= 0)
        return -EINVAL;
    *bw_p = v;
    return 0;
}

/* "3" or "0-7" (first <= last); n characters of s. */
static int parse_range(const char *s, size_t n, long *first_p, long *last_p)
{
    const char *dash = memchr(s, '-', n);
    long a, b;

    if (!dash) {
        if (parse_count(s, n, &a))
            return -EINVAL;
        b = a;
    } else if (parse_count(s, (size_t)(dash - s), &a) ||
               parse_count(dash + 1, n - (size_t)(dash - s) - 1, &b) ||
               a > b) {
        return -EINVAL;
    }
    *first_p = a;
    *last_p = b;
    return 0;
}

static int parse_set(const struct parser *p, const char *word,
                     uint64_t *set_p)
{
    const char *s = word;
    uint64_t set = 0;

    if (p->t.ndev == 0)
        return perr(p, "link before any device is declared");
    if (strcmp(s, "all") == 0) {
        *set_p = p->t.ndev == 64 ? UINT64_MAX : (UINT64_C(1) << p->t.ndev) - 1;
        return 0;
    }
    for (;;) {
        size_t n = strcspn(s, ",");
        long a, b;

        if (parse_range(s, n, &a, &b))
            return perr(p, "bad device set '%s' (want 3, 0-7, 0,2,5 or all)",
                        word);
        if (b >= p->t.ndev)
            return perr(p, "link to undeclared device %ld (%d declared so far)",
                        a > p->t.ndev ? a : (long)p->t.ndev, p->t.ndev);
        for (long i = a; i <= b; i++)
            set |= UINT64_C(1) << i;
        if (s[n] == '\0')
            break;
        s += n + 1;
    }
    *set_p = set;
    return 0;
}

static int once(const struct parser *p, bool *seen, const char *what)
{
    if (*seen)
        return perr(p, "duplicate %s", what);
    *seen = true;
    return 0;
}

static int do_name(struct parser *p, int nw, char **w)
{
    if (nw != 2)
        return perr(p, "usage: name <word>");
    if (strlen(w[1]) >= sizeof(p->t.name))
        return perr(p, "name longer than %zu characters",
                    sizeof(p->t.name) - 1);
    if (once(p, &p->have_name, "name"))
        return -EINVAL;
    copy_str(p->t.name, sizeof(p->t.name), w[1], strlen(w[1]));
    return 0;
}

static int do_numa(struct parser *p, int nw, char **w)
{
    long n;

    if (nw != 2)
        return perr(p, "usage: numa <count>");
    if (parse_count(w[1], strlen(w[1]), &n) || n < 1)
        return perr(p, "bad numa count '%s'", w[1]);
    if (n > UMP_MAX_NUMA)
        return perr(p, "numa count %ld exceeds the maximum of %d", n,
                    UMP_MAX_NUMA);
    if (once(p, &p->have_numa, "numa"))
        return -EINVAL;
    p->t.nnuma = (int)n;
    return 0;
}

static int do_bw(struct parser *p, int nw, char **w, bool *seen, double *bw)
{
    if (nw != 2)
        return perr(p, "usage: %s <GB/s>", w[0]);
    if (parse_bw(w[1], bw))
        return perr(p, "bad bandwidth '%s' (want GB/s, above 0, at most "
                       "%.0f)", w[1], TOPO_BW_MAX);
    return once(p, seen, w[0]);
}

static int do_local_bw(struct parser *p, int nw, char **w)
{
    return do_bw(p, nw, w, &p->have_local_bw, &p->t.local_bw_gbs);
}

static int do_pcie_bw(struct parser *p, int nw, char **w)
{
    return do_bw(p, nw, w, &p->have_pcie_bw, &p->pcie_bw);
}

static int do_device(struct parser *p, int nw, char **w)
{
    const char *mem = NULL, *numa = NULL, *model = NULL, *pci = NULL;
    long first, last, node;
    size_t size;

    if (nw < 2)
        return perr(p, "usage: device <id|range> mem <size> numa <node> "
                       "[model <word>] [pci <busid>]");
    if (parse_range(w[1], strlen(w[1]), &first, &last))
        return perr(p, "bad device id '%s' (want 3 or 0-7)", w[1]);
    if (last >= UMP_MAX_DEVICES)
        return perr(p, "device id %ld exceeds the maximum of %d", last,
                    UMP_MAX_DEVICES - 1);
    if (first != p->t.ndev)
        return perr(p, "device %ld declared out of order (expected %d)",
                    first, p->t.ndev);
    for (int i = 2; i < nw; i += 2) {
        const char **slot;

        if (strcmp(w[i], "mem") == 0)
            slot = &mem;
        else if (strcmp(w[i], "numa") == 0)
            slot = &numa;
        else if (strcmp(w[i], "model") == 0)
            slot = &model;
        else if (strcmp(w[i], "pci") == 0)
            slot = &pci;
        else
            return perr(p, "unknown device attribute '%s'", w[i]);
        if (i + 1 >= nw)
            return perr(p, "%s needs a value", w[i]);
        if (*slot)
            return perr(p, "duplicate %s", w[i]);
        *slot = w[i + 1];
    }
    if (!mem)
        return perr(p, "device %s: missing mem", w[1]);
    if (!numa)
        return perr(p, "device %s: missing numa", w[1]);
    if (conf_parse_size(mem, &size) || size == 0 || size > TOPO_MEM_MAX)
        return perr(p, "bad mem '%s' (want a size such as 80G, at most 1024T)",
                    mem);
    if (parse_count(numa, strlen(numa), &node) || node >= UMP_MAX_NUMA)
        return perr(p, "bad numa node '%s'", numa);
    if (model && strlen(model) >= sizeof(p->t.dev[0].model))
        return perr(p, "model longer than %zu characters",
                    sizeof(p->t.dev[0].model) - 1);
    if (pci && first != last)
        return perr(p, "pci is not allowed for a range of devices");
    if (pci && strlen(pci) >= sizeof(p->t.dev[0].pci))
        return perr(p, "pci longer than %zu characters",
                    sizeof(p->t.dev[0].pci) - 1);

    if (!model)
        model = "unknown";
    for (long i = first; i <= last; i++) {
        struct topo_device *d = &p->t.dev[i];

        copy_str(d->model, sizeof(d->model), model, strlen(model));
        if (pci)
            copy_str(d->pci, sizeof(d->pci), pci, strlen(pci));
        d->mem = size;
        d->numa = (int)node;
        p->dev_line[i] = p->line;
    }
    p->t.ndev = (int)last + 1;
    return 0;
}

static int parse_kind(const char *s)
{
    for (int k = UMP_LINK_NVLINK; k < UMP_LINK_KINDS; k++)
        if (strcmp(s, kind_names[k]) == 0)
            return k;
    return -1;
}

static int do_link(struct parser *p, int nw, char **w)
{
    uint64_t from, to;
    double bw;
    int kind, pairs = 0;

    if (nw != 5 && nw != 6)
        return perr(p, "usage: link <set> <set> <kind> <GB/s> [nopeer]");
    if (parse_set(p, w[1], &from) || parse_set(p, w[2], &to))
        return -EINVAL;
    kind = parse_kind(w[3]);
    if (kind < 0)
        return perr(p, "unknown link kind '%s' (want nvlink, pcie, host or "
                       "sys)", w[3]);
    if (parse_bw(w[4], &bw))
        return perr(p, "bad bandwidth '%s' (want GB/s, above 0, at most "
                       "%.0f)", w[4], TOPO_BW_MAX);
    if (nw == 6 && strcmp(w[5], "nopeer") != 0)
        return perr(p, "unexpected '%s' (only nopeer may follow the "
                       "bandwidth)", w[5]);

    struct topo_link l = {.kind = kind, .bw_gbs = bw, .hops = kind_hops[kind],
                          .peer = nw == 5};
    for (int a = 0; a < p->t.ndev; a++) {
        if (!(from >> a & 1))
            continue;
        for (int b = 0; b < p->t.ndev; b++) {
            if (!(to >> b & 1) || a == b)
                continue;
            p->t.link[a][b] = p->t.link[b][a] = l;
            p->linked[a][b] = p->linked[b][a] = true;
            pairs++;
        }
    }
    if (pairs == 0)
        return perr(p, "link names no pair of different devices");
    return 0;
}

static const struct {
    const char *word;
    int (*fn)(struct parser *p, int nw, char **w);
} directives[] = {
    {"name", do_name},         {"numa", do_numa},
    {"local_bw", do_local_bw}, {"pcie_bw", do_pcie_bw},
    {"device", do_device},     {"link", do_link},
};

/* line is modified in place (comment cut, words terminated). */
static int parse_line(struct parser *p, char *line)
{
    static const char blanks[] = " \t\r\v\f";
    char *w[TOPO_MAX_WORDS];
    int nw = 0;

    line[strcspn(line, "#")] = '\0';
    for (char *s = line + strspn(line, blanks); *s;
         s += strspn(s, blanks)) {
        size_t n = strcspn(s, blanks);

        if (nw == TOPO_MAX_WORDS)
            return perr(p, "more than %d words on one line", TOPO_MAX_WORDS);
        w[nw++] = s;
        s += n;
        if (*s)
            *s++ = '\0';
    }
    if (nw == 0)
        return 0;
    for (size_t i = 0; i < UMP_ARRAY_SIZE(directives); i++)
        if (strcmp(w[0], directives[i].word) == 0)
            return directives[i].fn(p, nw, w);
    return perr(p, "unknown directive '%s'", w[0]);
}

/* The file name without folders and without ".topo": the default name. */
static void default_name(char *dst, size_t size, const char *origin)
{
    const char *base = strrchr(origin, '/');
    size_t n;

    base = base ? base + 1 : origin;
    n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".topo") == 0)
        n -= 5;
    if (n == 0) {
        base = "unnamed";
        n = strlen(base);
    }
    copy_str(dst, size, base, n);
}

static int finish(struct parser *p)
{
    struct ump_topology *t = &p->t;

    if (t->ndev == 0) {
        if (p->line == 0)
            p->line = 1;
        return perr(p, "no devices declared");
    }
    for (int i = 0; i < t->ndev; i++) {
        if (t->dev[i].numa >= t->nnuma) {
            p->line = p->dev_line[i];
            return perr(p, "device %d: numa node %d, but numa count is %d", i,
                        t->dev[i].numa, t->nnuma);
        }
    }
    if (!p->have_name)
        default_name(t->name, sizeof(t->name), p->origin);
    copy_str(t->source, sizeof(t->source), p->origin, strlen(p->origin));

    for (int a = 0; a < t->ndev; a++) {
        t->dev[a].host_bw_gbs = p->pcie_bw; /* every device's host link */
        for (int b = 0; b < t->ndev; b++) {
            struct topo_link *l = &t->link[a][b];

            if (a == b) {
                *l = (struct topo_link){UMP_LINK_SELF, t->local_bw_gbs, 0,
                                        true};
            } else if (!p->linked[a][b]) {
                int kind = t->dev[a].numa == t->dev[b].numa ? UMP_LINK_HOST
                                                            : UMP_LINK_SYS;
                *l = (struct topo_link){kind, p->pcie_bw, kind_hops[kind],
                                        true};
            }
        }
    }
    return 0;
}

/* Parses text, which is modified in place, into topo (written on success). */
static int parse_buffer(char *text, const char *origin,
                        struct ump_topology *topo)
{
    struct parser *p = calloc(1, sizeof(*p));
    int ret = 0;

    if (!p) {
        ump_log_error("out of memory parsing topology %s", origin);
        return -ENOMEM;
    }
    p->origin = origin;
    p->t.nnuma = 1;
    p->t.local_bw_gbs = 4000;
    p->pcie_bw = 55;

    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');

        if (end)
            *end = '\0';
        p->line++;
        ret = parse_line(p, line);
        if (ret)
            goto out;
        if (!end)
            break;
        line = end + 1;
    }
    ret = finish(p);
    if (ret)
        goto out;
    *topo = p->t;
out:
    free(p);
    return ret;
}

int topo_parse(const char *text, const char *origin, struct ump_topology *topo)
{
    char *copy;
    int ret;

    if (!origin)
        origin = "<topology>";
    if (!text || !topo) {
        ump_log_error("%s: no topology text or no result", origin);
        return -EINVAL;
    }
    copy = strdup(text);
    if (!copy) {
        ump_log_error("out of memory parsing topology %s", origin);
        return -ENOMEM;
    }
    ret = parse_buffer(copy, origin, topo);
    free(copy);
    return ret;
}

/* Reads at most TOPO_FILE_MAX bytes of fd into a terminated buffer the
 * caller frees; reads until EOF, not st_size, so that /proc files (which
 * say 0 bytes) work too. */
static int read_all(int fd, const char *path, char **buf_p, size_t *len_p)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int ret;

    if (!buf)
        goto nomem;
    for (;;) {
        ssize_t n;

        if (len > TOPO_FILE_MAX)
            goto too_big;
        if (len == cap - 1) {
            char *bigger = realloc(buf, cap * 2);

            if (!bigger)
                goto nomem;
            buf = bigger;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            ret = -errno;
            ump_log_error("cannot read topology file %s: %s", path,
                          strerror(-ret));
            goto out_free;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > TOPO_FILE_MAX)
        goto too_big;
    buf[len] = '\0';
    *buf_p = buf;
    *len_p = len;
    return 0;
too_big:
    ump_log_error("%s: topology file larger than %u bytes", path,
                  TOPO_FILE_MAX);
    ret = -EFBIG;
    goto out_free;
nomem:
    ump_log_error("out of memory reading topology file %s", path);
    ret = -ENOMEM;
out_free:
    free(buf);
    return ret;
}

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a folder";
    if (S_ISFIFO(mode))
        return "a fifo";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

/* 0 when fd is a regular file; else logs why and gives -EISDIR for a
 * folder, -EINVAL for anything else. */
static int check_regular(int fd, const char *path)
{
    struct stat st;

    if (fstat(fd, &st)) {
        int ret = -errno;
        ump_log_error("cannot stat topology file %s: %s", path,
                      strerror(-ret));
        return ret;
    }
    if (S_ISREG(st.st_mode))
        return 0;
    ump_log_error("topology file %s is %s, not a regular file", path,
                  file_kind(st.st_mode));
    return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
}

int topo_load_file(const char *path, struct ump_topology *topo)
{
    char *buf = NULL, *nul;
    size_t len = 0;
    int fd, ret;

    if (!path || !topo) {
        ump_log_error("topo_load_file: no path or no result");
        return -EINVAL;
    }
    /* O_NONBLOCK: opening a FIFO planted under the name must not wait for
     * a writer, and only a regular file is read (a FIFO, a device or a
     * socket could block a read or never end). */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        ret = -errno;
        ump_log_error("cannot open topology file %s: %s", path,
                      strerror(-ret));
        return ret;
    }
    ret = check_regular(fd, path);
    if (ret)
        goto out_close;
    ret = read_all(fd, path, &buf, &len);
    if (ret)
        goto out_close;
    nul = memchr(buf, '\0', len);
    if (nul) {
        int line = 1;

        for (const char *c = buf; c < nul; c++)
            line += *c == '\n';
        ump_log_error("%s:%d: nul byte in a text file", path, line);
        ret = -EINVAL;
        goto out_free;
    }
    ret = parse_buffer(buf, path, topo);
    if (ret == 0)
        ump_log_debug("topology %s from %s: %d devices, %d numa nodes",
                      topo->name, path, topo->ndev, topo->nnuma);
out_free:
    free(buf);
out_close:
    close(fd);
    return ret;
}

/* 0 when path names a readable regular file; -EISDIR for a folder, -EINVAL
 * for another kind of file (a fifo, a device, a socket). */
static int check_readable(const char *path)
{
    struct stat st;

    if (stat(path, &st))
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if (access(path, R_OK))
        return -errno;
    return 0;
}

static int give_path(const char *found, char *path, size_t len)
{
    size_t n = strlen(found);

    if (n >= len) {
        ump_log_error("topology path %s longer than the %zu bytes given",
                      found, len);
        return -ENAMETOOLONG;
    }
    memcpy(path, found, n + 1);
    return 0;
}

int topo_resolve(const char *name, char *path, size_t len)
{
    static const char *const suffixes[] = {"", ".topo"};
    const char *dirs[2];
    char where[512] = "";
    char cand[4096];
    int ndirs = 0;

    if (!name || !*name || !path) {
        ump_log_error("no topology name given");
        return -EINVAL;
    }
    if (strchr(name, '/')) {
        int ret = check_readable(name);

        if (ret) {
            ump_log_error("topology file %s: %s", name,
                          ret == -EINVAL ? "not a regular file"
                                         : strerror(-ret));
            return ret;
        }
        return give_path(name, path, len);
    }

    const char *env = secure_getenv("UMPOOL_TOPOLOGY_DIR");
    if (env && *env)
        dirs[ndirs++] = env;
    dirs[ndirs++] = UMP_TOPOLOGY_DIR;

    for (int d = 0; d < ndirs; d++) {
        for (size_t s = 0; s < UMP_ARRAY_SIZE(suffixes); s++) {
            int n = snprintf(cand, sizeof(cand), "%s/%s%s", dirs[d], name,
                             suffixes[s]);

            if (n > 0 && (size_t)n < sizeof(cand) &&
                check_readable(cand) == 0)
                return give_path(cand, path, len);
        }
        size_t used = strlen(where);
        snprintf(where + used, sizeof(where) - used, "%s%s", d ? ", " : "",
                 dirs[d]);
    }
    ump_log_error("topology '%s' not found: looked for %s and %s.topo in %s",
                  name, name, name, where);
    return -ENOENT;
}

void topo_make_uniform(struct ump_topology *topo, int n, size_t mem)
{
    /* void by contract: callers check n; clamping keeps the arrays safe. */
    if (n < 1)
        n = 1;
    if (n > UMP_MAX_DEVICES)
        n = UMP_MAX_DEVICES;
    memset(topo, 0, sizeof(*topo));
    snprintf(topo->name, sizeof(topo->name), "sim-%d", n);
    snprintf(topo->source, sizeof(topo->source), "generated");
    topo->ndev = n;
    topo->nnuma = 1;
    topo->local_bw_gbs = 4000;
    for (int a = 0; a < n; a++) {
        snprintf(topo->dev[a].model, sizeof(topo->dev[a].model), "sim");
        topo->dev[a].mem = mem;
        topo->dev[a].numa = 0;
        topo->dev[a].host_bw_gbs = 55; /* PCIe Gen5 x16 (DESIGN.md) */
        for (int b = 0; b < n; b++)
            topo->link[a][b] = a == b
                ? (struct topo_link){UMP_LINK_SELF, topo->local_bw_gbs, 0, true}
                : (struct topo_link){UMP_LINK_NVLINK, 450, 1, true};
    }
}

static bool nearer(const struct topo_link *from, int a, int b)
{
    if (from[a].bw_gbs != from[b].bw_gbs)
        return from[a].bw_gbs > from[b].bw_gbs;
    if (from[a].hops != from[b].hops)
        return from[a].hops < from[b].hops;
    return a < b;
}

int topo_nearest(const struct ump_topology *topo, int dev, int *order)
{
    const struct topo_link *from;
    int n = 0;

    if (!topo || !order || dev < 0 || dev >= topo->ndev) {
        ump_log_error("topo_nearest: no device %d", dev);
        return -EINVAL;
    }
    from = topo->link[dev];
    /* Insertion sort: at most UMP_MAX_DEVICES - 1 entries. */
    for (int d = 0; d < topo->ndev; d++) {
        int i;

        if (d == dev)
            continue;
        i = n++;
        while (i > 0 && nearer(from, d, order[i - 1])) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = d;
    }
    return n;
}

const char *topo_link_kind_name(int kind)
{
    if (kind < 0 || kind >= UMP_LINK_KINDS)
        return "unknown";
    return kind_names[kind];
}
