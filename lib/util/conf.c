#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/conf.h"
#include "util/internal.h"
#include "util/log.h"
#include "umpool.h"

#define CONF_STR_(x) #x
#define CONF_STR(x) CONF_STR_(x)

#define SIZE_ACCEPTED "a size: digits with an optional unit K, M, G or T"

/*
 * The single source of truth for keys and defaults: conf_defaults() parses
 * the default strings, README and tools print the table.
 * Field types: ENUM and INT -> int, SIZE -> size_t, BOOL -> bool,
 * STRING -> char[UMP_CONF_PATH_MAX]. An enum stores the index of its word in
 * "accepted", so the words follow the order of the C enum they encode.
 * Values cannot contain ',' (it separates items); they may contain ':'.
 */
const struct ump_conf_entry conf_table[] = {
    {"backend", "auto", UMP_CONF_ENUM, "auto|sim|cuda",
     "memory backend: auto picks cuda when a GPU is usable, else sim",
     offsetof(struct ump_config, backend), 0, 0},
    {"sim_devices", "0", UMP_CONF_INT,
     "an integer 0.." CONF_STR(UMP_MAX_DEVICES),
     "N identical, fully NVLinked simulated devices (0: use sim_topology, "
     "or 1 device when no topology is given)",
     offsetof(struct ump_config, sim_devices), 0, UMP_MAX_DEVICES},
    {"sim_topology", "", UMP_CONF_STRING,
     "a file name in topologies/ or a path, shorter than "
     CONF_STR(UMP_CONF_PATH_MAX) " bytes",
     "simulated machine to load (empty: none)",
     offsetof(struct ump_config, sim_topology), 0, 0},
    {"sim_device_mem", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "memory of each simulated device (0: the topology's capacity, or 16G "
     "for sim_devices)",
     offsetof(struct ump_config, sim_device_mem), 0, 0},
    {"sim_driver_costs", "off", UMP_CONF_ENUM, "off|h200|h200-timed",
     "driver time the sim backend accounts for its virtual-memory calls "
     "(statistics' driver_ns): off; h200, the per-handle costs of create, "
     "map, set-access, unmap and release of device chunks measured on an "
     "H200, accounted only, never waited for; h200-timed, the same "
     "accounted, and every call waits for what it costs on an H200: "
     "virtual-memory calls on device and host chunks one at a time in the "
     "calling thread, copies and memsets on their stream at the H200's "
     "link rates, stream syncs (lib/topo/drivercost.c)",
     offsetof(struct ump_config, sim_driver_costs), 0, 0},
    {"sim_time_scale", "1", UMP_CONF_INT, "an integer 1..1000",
     "with sim_driver_costs:h200-timed, every wait is this many times the "
     "H200's cost: for a machine whose memcpy is slower than the modeled "
     "links (54 GB/s to host), so that the sim's own work fits inside the "
     "modeled time and the ratios between modeled times hold",
     offsetof(struct ump_config, sim_time_scale), 1, 1000},
    {"sim_fail_device", "-1", UMP_CONF_INT,
     "a simulated device's index, or -1",
     "fault injection: this simulated device fails, as a lost GPU or an "
     "uncorrectable ECC error would, at its sim_fail_after-th operation "
     "(chunk create, map, set access, a copy or memset touching it, work on "
     "its streams); from then on they are -EIO and its memory is lost "
     "(-1: none)",
     offsetof(struct ump_config, sim_fail_device), -1, UMP_MAX_DEVICES - 1},
    {"sim_fail_after", "1", UMP_CONF_INT, "an integer 1..1000000000",
     "operations of sim_fail_device before it fails (the failing one "
     "included)",
     offsetof(struct ump_config, sim_fail_after), 1, 1000000000},
    {"device_mem", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "most memory the pool takes from each device, on any backend (0: all "
     "of it; on cuda, what is free when the pool is created)",
     offsetof(struct ump_config, device_mem), 0, 0},
    {"process_limit", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "most memory of each device this process may hold, as HAMi-core's "
     "per-process limits (0: none); past it an allocation is -ENOMEM with "
     "one log line naming the limit. In a shared pool (ump_pool_share) the "
     "sharing process's limit holds for every process that attaches, which "
     "may ask for a lower one",
     offsetof(struct ump_config, process_limit), 0, 0},
    {"share", "", UMP_CONF_STRING,
     "a pool name: letters, digits, '-' and '_' (\"\": none)",
     "ump_pool_create and the process's pool (the preload's) join the pool "
     "shared under this name, or make it and share it when there is none: "
     "with UMPOOL_CONF=share:NAME every process of a job uses one pool",
     offsetof(struct ump_config, share), 0, 0},
    {"attach", "", UMP_CONF_STRING,
     "a pool name: letters, digits, '-' and '_' (\"\": none)",
     "ump_pool_create and the process's pool join the pool shared under "
     "this name (ump_pool_attach), and fail when there is none",
     offsetof(struct ump_config, attach), 0, 0},
    {"cuda_virtual_devices", "1", UMP_CONF_INT, "an integer 1..8",
     "devices of the pool per physical GPU on the cuda backend (each gets "
     "1/N of the GPU's memory; pool device v is GPU v / N), so multi-device "
     "code runs on one GPU; at most " CONF_STR(UMP_MAX_DEVICES) " devices "
     "in all; ignored by sim",
     offsetof(struct ump_config, cuda_virtual_devices), 1, 8},
    {"policy", "local", UMP_CONF_STRING,
     "local, interleave[=D*W+...], balanced, domain, or a plugin's path "
     "(shorter than 256 bytes)",
     "default placement policy of allocations bigger than a slab object",
     offsetof(struct ump_config, policy), 0, 0},
    {"log_level", "warn", UMP_CONF_ENUM, "error|warn|info|debug",
     "messages at this level and more severe go to stderr",
     offsetof(struct ump_config, log_level), 0, 0},
    {"chunk_size", "2M", UMP_CONF_SIZE, "a power of two from 64K to 2G",
     "bytes of one physical chunk: the unit of addresses, slabs and "
     "stitching",
     offsetof(struct ump_config, chunk_size), 64 * 1024, 1LL << 31},
    {"max_chunk", "1G", UMP_CONF_SIZE, "a power of two from 64K to 64G",
     "largest chunk made for an allocation on a device that holds no freed "
     "memory (fewer, larger driver handles make a cold allocation cheaper)",
     offsetof(struct ump_config, max_chunk), 64 * 1024, 1LL << 36},
    {"warm_chunk", "64M", UMP_CONF_SIZE, "a power of two from 64K to 64G",
     "largest chunk made while the device holds freed memory: smaller "
     "chunks are reused in more ways (carved, stitched, given back)",
     offsetof(struct ump_config, warm_chunk), 64 * 1024, 1LL << 36},
    {"carve", "true", UMP_CONF_BOOL, "true|false|yes|no|on|off|1|0",
     "plain allocations are carved from freed memory at any chunk_size "
     "boundary, sharing chunks with their neighbours, while the pool has "
     "used at most half of the device (no driver call where sizes change "
     "from step to step); false: every allocation owns whole chunks, so "
     "that any one can be moved between tiers",
     offsetof(struct ump_config, carve), 0, 0},
    {"va_size", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "virtual address space reserved by the pool (0: twice the devices' "
     "memory plus the host tier's and the NVMe tier's limits and "
     "pinned_limit, NVMe without a limit counted as four times the "
     "devices)",
     offsetof(struct ump_config, va_size), 0, 0},
    {"release_threshold", "1G", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "cached memory a device keeps beyond its peak use of the last one to "
     "two release windows; above it, the pool gives cached chunks back to "
     "the driver (least recently freed first) as memory is freed",
     offsetof(struct ump_config, release_threshold), 0, 0},
    {"release_window", "10", UMP_CONF_INT, "an integer 1..3600",
     "seconds of a release window: how long a device's peak use counts as "
     "recent for release_threshold",
     offsetof(struct ump_config, release_window), 1, 3600},
    {"tcache", "true", UMP_CONF_BOOL, "true|false|yes|no|on|off|1|0",
     "per-thread caches of free blocks",
     offsetof(struct ump_config, tcache), 0, 0},
    {"host_limit", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "most pinned host memory the host tier holds (0: a quarter of the "
     "host's physical memory)",
     offsetof(struct ump_config, host_limit), 0, 0},
    {"host_reserve", "64M", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "pinned host chunks created ahead of need (pinning runs at a few GB/s)",
     offsetof(struct ump_config, host_reserve), 0, 0},
    {"host_cpu_access", "false", UMP_CONF_BOOL, "true|false|yes|no|on|off|1|0",
     "the CPU, not only the devices, may read and write memory on the host "
     "tier at its own address; costs each move to and from the host tier "
     "the CPU's mapping of it (on an H200 about 35 ms per GiB to make and "
     "22 ms to undo, against 20 ms for the copy)",
     offsetof(struct ump_config, host_cpu_access), 0, 0},
    {"pinned_limit", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "most pinned host memory that ump_host_alloc and overflow:host hold "
     "together, apart from the host tier's host_limit (0: a quarter of the "
     "host's physical memory)",
     offsetof(struct ump_config, pinned_limit), 0, 0},
    {"overflow", "none", UMP_CONF_ENUM, "none|host",
     "an allocation that fits on no device (after the placement policy and "
     "eviction of offloadable memory): none fails with out of memory, as "
     "the driver would; host places it on pinned host memory at pool "
     "addresses, which every device reaches at link speed",
     offsetof(struct ump_config, overflow), 0, 0},
    {"nvme_dir", "", UMP_CONF_LIST,
     "directories separated by ':', or the key given more than once",
     "spill directories of the NVMe tier (empty: no NVMe tier)",
     offsetof(struct ump_config, nvme_dir), 0, 0},
    {"nvme_limit", "0", UMP_CONF_SIZE, SIZE_ACCEPTED,
     "most bytes the NVMe tier writes (0: what the disks hold)",
     offsetof(struct ump_config, nvme_limit), 0, 0},
    {"nvme_queue_depth", "32", UMP_CONF_INT, "an integer 1..1024",
     "I/O requests in flight per spill directory",
     offsetof(struct ump_config, nvme_queue_depth), 1, 1024},
    {"nvme_engine", "auto", UMP_CONF_ENUM, "auto|io_uring|threads",
     "NVMe I/O: io_uring with O_DIRECT, or a pread/pwrite thread pool "
     "(auto: io_uring where the kernel and the file system allow it)",
     offsetof(struct ump_config, nvme_engine), 0, 0},
    {"high_watermark", "90", UMP_CONF_INT, "an integer 1..100",
     "percent of a device's capacity in use above which the background "
     "thread moves offloadable memory down",
     offsetof(struct ump_config, high_watermark), 1, 100},
    {"low_watermark", "80", UMP_CONF_INT,
     "an integer 0..100, at most high_watermark",
     "percent of a device's capacity in use where that eviction stops",
     offsetof(struct ump_config, low_watermark), 0, 100},
    {"publish", "true", UMP_CONF_BOOL, "true|false|yes|no|on|off|1|0",
     "publish statistics in /dev/shm for umpool-inspect (refreshed at most "
     "every 100 ms)",
     offsetof(struct ump_config, publish), 0, 0},
    {NULL, NULL, UMP_CONF_ENUM, NULL, NULL, 0, 0, 0},
};

/* Long values are cut in log lines so that "accepted" still fits. */
#define CONF_SHOW_MAX 128

static bool is_blank(char c)
{
    return isspace((unsigned char)c);
}

static void trim(const char **s, size_t *len)
{
    while (*len && is_blank(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && is_blank((*s)[*len - 1]))
        (*len)--;
}

static bool ieq(const char *a, size_t alen, const char *b)
{
    return alen == strlen(b) && strncasecmp(a, b, alen) == 0;
}

int conf_parse_size(const char *s, size_t *size_p)
{
    static const char units[] = "KMGT";
    size_t v = 0;
    unsigned shift = 0;
    const char *p = s;

    if (!s || !isdigit((unsigned char)*p))
        return -EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        size_t d = (size_t)(*p - '0');
        if (v > (SIZE_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
    if (u) {
        shift = 10 * (unsigned)(u - units + 1);
        p++;
        if (ieq(p, strlen(p), "iB") || ieq(p, strlen(p), "B"))
            p += strlen(p);
    } else if (ieq(p, strlen(p), "B")) {
        p++;
    }
    if (*p || v > (SIZE_MAX >> shift))
        return -EINVAL;
    *size_p = v << shift;
    return 0;
}

/* Index of s among the '|'-separated words, case-insensitive, or -1. */
static int word_index(const char *words, const char *s)
{
    size_t n = strlen(s);
    int i = 0;

    for (const char *w = words;; i++) {
        size_t wl = strcspn(w, "|");
        if (n && wl == n && strncasecmp(w, s, n) == 0)
            return i;
        if (!w[wl])
            return -1;
        w += wl + 1;
    }
}

static int parse_int(const char *s, long long min, long long max, int *out)
{
    char *end;

    if (!isdigit((unsigned char)s[0]) &&
        !(s[0] == '-' && isdigit((unsigned char)s[1])))
        return -EINVAL;
    int saved = errno;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    bool overflow = errno == ERANGE;
    errno = saved;
    if (overflow || *end || v < min || v > max || v < INT_MIN || v > INT_MAX)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

/* Parses s (already trimmed) for entry e into its field of cfg; logs
 * nothing, so that the caller names the origin. */
static int parse_value(const struct ump_conf_entry *e, const char *s,
                       struct ump_config *cfg)
{
    void *field = (char *)cfg + e->offset;
    size_t sz;
    int idx;

    switch (e->type) {
    case UMP_CONF_ENUM:
        idx = word_index(e->accepted, s);
        if (idx < 0)
            return -EINVAL;
        *(int *)field = idx;
        return 0;
    case UMP_CONF_INT:
        return parse_int(s, e->min, e->max ? e->max : INT_MAX, (int *)field);
    case UMP_CONF_SIZE:
        if (conf_parse_size(s, &sz) < 0)
            return -EINVAL;
        if ((e->min > 0 && sz < (unsigned long long)e->min) ||
            (e->max > 0 && sz > (unsigned long long)e->max))
            return -EINVAL;
        /* The table has no column for it: the VA manager indexes chunks by
         * shifting, so chunk_size must be a power of two. */
        if ((e->offset == offsetof(struct ump_config, chunk_size) ||
             e->offset == offsetof(struct ump_config, max_chunk) ||
             e->offset == offsetof(struct ump_config, warm_chunk)) &&
            !ump_is_pow2(sz))
            return -EINVAL;
        *(size_t *)field = sz;
        return 0;
    case UMP_CONF_STRING:
    case UMP_CONF_LIST:
        if (strlen(s) >= UMP_CONF_PATH_MAX)
            return -EINVAL;
        strcpy((char *)field, s);
        return 0;
    case UMP_CONF_BOOL:
        /* Falses at even indexes, trues at odd ones. */
        idx = word_index("false|true|no|yes|off|on|0|1", s);
        if (idx < 0)
            return -EINVAL;
        *(bool *)field = idx & 1;
        return 0;
    }
    return -EINVAL;
}

static const struct ump_conf_entry *find_key(const char *key, size_t len)
{
    for (const struct ump_conf_entry *e = conf_table; e->key; e++)
        if (strlen(e->key) == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

static void known_keys(char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const struct ump_conf_entry *e = conf_table; e->key; e++) {
        int n = snprintf(buf + used, size - used, "%s%s",
                         e == conf_table ? "" : ", ", e->key);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
}

/* One "key:value" item (not NUL-terminated, len bytes) onto cfg; logs the
 * error itself. cfg may be half-written on error: the caller works on a
 * copy. */
static int apply_item(struct ump_config *cfg, const char *item, size_t len,
                      const char *origin, uint64_t *seen)
{
    char val[UMP_CONF_PATH_MAX];
    char keys[1024]; /* every key, comma-separated: room for twice today's */

    trim(&item, &len);
    if (!len)
        return 0;
    int show = len > CONF_SHOW_MAX ? CONF_SHOW_MAX : (int)len;
    const char *colon = memchr(item, ':', len);
    if (!colon) {
        ump_log_error("%s: item '%.*s%s' has no ':' (expected key:value)",
                      origin, show, item, show < (int)len ? "..." : "");
        return -EINVAL;
    }

    const char *key = item;
    size_t klen = (size_t)(colon - item);
    const char *v = colon + 1;
    size_t vlen = len - klen - 1;
    trim(&key, &klen);
    trim(&v, &vlen);

    const struct ump_conf_entry *e = find_key(key, klen);
    if (!e) {
        known_keys(keys, sizeof(keys));
        show = klen > CONF_SHOW_MAX ? CONF_SHOW_MAX : (int)klen;
        ump_log_error("%s: unknown key '%.*s%s' (known keys: %s)", origin,
                      show, key, show < (int)klen ? "..." : "", keys);
        return -EINVAL;
    }

    int rc = -EINVAL;
    uint64_t bit = 1ull << (e - conf_table);
    char *list = (char *)cfg + e->offset;
    size_t have = e->type == UMP_CONF_LIST && (*seen & bit) && *list
                      ? strlen(list) + 1 : 0; /* appending after a ':' */
    if (have + vlen < sizeof(val)) {
        if (have) {
            memcpy(val, list, have - 1);
            val[have - 1] = ':';
        }
        memcpy(val + have, v, vlen);
        val[have + vlen] = '\0';
        rc = parse_value(e, val, cfg);
    }
    *seen |= bit;
    if (rc < 0) {
        show = vlen > CONF_SHOW_MAX ? CONF_SHOW_MAX : (int)vlen;
        ump_log_error("%s: bad value '%.*s%s' for key '%s' (accepted: %s)",
                      origin, show, v, show < (int)vlen ? "..." : "", e->key,
                      e->accepted);
    }
    return rc;
}

void conf_defaults(struct ump_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (const struct ump_conf_entry *e = conf_table; e->key; e++) {
        int rc = parse_value(e, e->dflt, cfg);
        UMP_ASSERT(rc == 0);
        (void)rc;
    }
}

int conf_apply(struct ump_config *cfg, const char *str, const char *origin)
{
    struct ump_config tmp;

    if (!str)
        return 0;
    if (!origin)
        origin = "config";
    memcpy(&tmp, cfg, sizeof(tmp));
    uint64_t seen = 0; /* keys given so far in str, by index */
    for (const char *p = str;;) {
        size_t len = strcspn(p, ",");
        int rc = apply_item(&tmp, p, len, origin, &seen);
        if (rc < 0)
            return rc;
        if (!p[len])
            break;
        p += len + 1;
    }
    memcpy(cfg, &tmp, sizeof(tmp));
    return 0;
}

/* The n-th of the '|'-separated words, of its length in *len_p. */
static const char *word_at(const char *words, int n, size_t *len_p)
{
    const char *w = words;
    for (; n > 0 && w[strcspn(w, "|")]; n--)
        w += strcspn(w, "|") + 1;
    *len_p = strcspn(w, "|");
    return w;
}

int conf_format(const struct ump_config *cfg, char *buf, size_t len)
{
    size_t used = 0;
    if (!len)
        return -ENOSPC;
    buf[0] = '\0';
    for (const struct ump_conf_entry *e = conf_table; e->key; e++) {
        const void *field = (const char *)cfg + e->offset;
        char val[UMP_CONF_PATH_MAX];
        const char *w;
        size_t wl;
        switch (e->type) {
        case UMP_CONF_ENUM:
            w = word_at(e->accepted, *(const int *)field, &wl);
            snprintf(val, sizeof(val), "%.*s", (int)wl, w);
            break;
        case UMP_CONF_INT:
            snprintf(val, sizeof(val), "%d", *(const int *)field);
            break;
        case UMP_CONF_SIZE:
            snprintf(val, sizeof(val), "%zu", *(const size_t *)field);
            break;
        case UMP_CONF_BOOL:
            snprintf(val, sizeof(val), "%s",
                     *(const bool *)field ? "true" : "false");
            break;
        default: /* strings and lists: an empty value is not written */
            if (!*(const char *)field)
                continue;
            snprintf(val, sizeof(val), "%s", (const char *)field);
            break;
        }
        int n = snprintf(buf + used, len - used, "%s%s:%s", used ? "," : "",
                         e->key, val);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0';
            return -ENOSPC;
        }
        used += (size_t)n;
    }
    return 0;
}

int conf_load(const char *arg, struct ump_config *cfg)
{
    return conf_load_over(NULL, NULL, arg, cfg);
}

int conf_load_over(const char *base, const char *base_origin,
                   const char *arg, struct ump_config *cfg)
{
    struct ump_config tmp;

    conf_defaults(&tmp);
    int rc = conf_apply(&tmp, base, base_origin);
    if (rc < 0)
        return rc;
    rc = conf_apply(&tmp, secure_getenv("UMPOOL_CONF"), "UMPOOL_CONF");
    if (rc < 0)
        return rc;
    rc = conf_apply(&tmp, arg, "config");
    if (rc < 0)
        return rc;
    if (tmp.low_watermark > tmp.high_watermark) {
        ump_log_error("config: low_watermark %d is above high_watermark %d",
                      tmp.low_watermark, tmp.high_watermark);
        return -EINVAL;
    }
    memcpy(cfg, &tmp, sizeof(tmp));
    return 0;
}

/* A quarter of physical memory: the default of both pinned limits. */
static size_t quarter_of_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages / 4 * (size_t)page : 0;
}

size_t conf_host_limit(const struct ump_config *cfg)
{
    return cfg->host_limit ? cfg->host_limit : quarter_of_ram();
}

size_t conf_pinned_limit(const struct ump_config *cfg)
{
    return cfg->pinned_limit ? cfg->pinned_limit : quarter_of_ram();
}
