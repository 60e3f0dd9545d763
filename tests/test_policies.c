/*
 * Placement policies: the built-ins' decisions on the shipped topologies
 * (and a few written here), seen through the public API by walking each
 * allocation chunk by chunk with ump_ptr_info and reading ump_stats per
 * device; plugins, good and broken; the cost model; and the built-ins
 * called directly on hand-made views, where every rule of the interface
 * (at most cap parts, counts within what each device supplies) is checked
 * on random requests.
 *
 * Most pools give each device 256 MiB, i.e. 128 chunks of 2 MiB, so that
 * filling a device is cheap.
 */
#include "config.h"

#include <dlfcn.h>
#include <limits.h>

#include "testutil.h"

#include "place/builtin.h"
#include "topo/costmodel.h"

#define DEV_MEM (256 * TU_MIB)
#define DEV_CHUNKS (DEV_MEM / TU_CHUNK)
#define SENTINEL ((void *)0x5a5a5a5a)

/* snprintf into an array, failing the test when it does not fit. */
#define FMT(buf, ...)                                                          \
    assert_true(snprintf((buf), sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

/* --- helpers ----------------------------------------------------------- */

/* A pool on a topology, 256 MiB a device; more: ",key:value..." or "". */
static ump_pool_t *pool_on(const char *topo, const char *more)
{
    char conf[8192];
    FMT(conf,
        "backend:sim,sim_topology:%s,sim_device_mem:256M,"
        "log_level:warn%s",
        topo, more);
    return tu_pool_create(conf);
}

static void *alloc_h(ump_pool_t *pool, size_t size, const ump_hints_t *h)
{
    void *p = NULL;
    int rc = ump_alloc(pool, size, h, &p);
    if (rc != 0)
        fail_msg("ump_alloc(%zu, device %d, policy %s, group %u) = %d (%s)",
                 size, h ? h->device : -9, h && h->policy ? h->policy : "-",
                 h ? h->group : 0u, rc, ump_strerror(rc));
    assert_non_null(p);
    return p;
}

static void *alloc_pol(ump_pool_t *pool, size_t size, int device,
                       const char *policy)
{
    ump_hints_t h = tu_hints(device);
    h.policy = policy;
    return alloc_h(pool, size, &h);
}

static void *alloc_group(ump_pool_t *pool, size_t size, int device,
                         unsigned group)
{
    ump_hints_t h = tu_hints(device);
    h.policy = "domain";
    h.group = group;
    return alloc_h(pool, size, &h);
}

/*
 * Where an allocation lives, granule (2 MiB) by granule in address order,
 * found by walking it chunk by chunk: each chunk must start where the last
 * one ended (a run is whole chunks) and hold device memory.
 */
struct layout {
    size_t n;
    int *dev;
    size_t per_dev[UMP_MAX_DEVICES];
};

static void layout_of(ump_pool_t *pool, void *p, size_t size, struct layout *l)
{
    int ndev = ump_device_count(pool);
    memset(l, 0, sizeof(*l));
    l->n = (size + TU_CHUNK - 1) / TU_CHUNK;
    l->dev = malloc(l->n * sizeof(*l->dev));
    assert_non_null(l->dev);
    size_t off = 0;
    while (off < size) {
        ump_ptr_info_t info = tu_info(pool, (char *)p + off);
        assert_ptr_equal(info.base, p);
        assert_int_equal(info.size, size);
        assert_int_equal(info.tier, UMP_TIER_DEVICE);
        assert_ptr_equal(info.chunk_base, (char *)p + off);
        tu_assert_chunk_size(info.chunk_size);
        assert_true(info.device >= 0 && info.device < ndev);
        for (size_t g = 0; g < info.chunk_size / TU_CHUNK; g++) {
            size_t k = off / TU_CHUNK + g;
            if (k >= l->n)
                break;
            l->dev[k] = info.device;
            l->per_dev[info.device]++;
        }
        off += info.chunk_size;
    }
}

static void layout_free(struct layout *l)
{
    free(l->dev);
    l->dev = NULL;
}

/* Every granule of p on device. */
static void assert_on(ump_pool_t *pool, void *p, size_t size, int device)
{
    struct layout l;
    layout_of(pool, p, size, &l);
    for (size_t k = 0; k < l.n; k++)
        if (l.dev[k] != device)
            fail_msg("granule %zu of %zu is on device %d, expected %d", k, l.n,
                     l.dev[k], device);
    layout_free(&l);
}

/* The device of every granule, in address order. */
static void assert_seq(ump_pool_t *pool, void *p, size_t size,
                       const int *expect, size_t n)
{
    struct layout l;
    layout_of(pool, p, size, &l);
    assert_int_equal(l.n, n);
    for (size_t k = 0; k < n; k++)
        if (l.dev[k] != expect[k])
            fail_msg("granule %zu of %zu is on device %d, expected %d", k, n,
                     l.dev[k], expect[k]);
    layout_free(&l);
}

static size_t mapped(ump_pool_t *pool, int device)
{
    return tu_stats(pool, device).mapped_bytes;
}

/* Bytes the device could still supply (nothing cached in these tests). */
static size_t room(ump_pool_t *pool, int device)
{
    ump_stats_t st = tu_stats(pool, device);
    return st.capacity - st.mapped_bytes;
}

/* Stats of every device and of the whole pool, to compare before/after. */
struct snapshot {
    int ndev;
    ump_stats_t all, dev[UMP_MAX_DEVICES];
};

static void snap(ump_pool_t *pool, struct snapshot *s)
{
    s->ndev = ump_device_count(pool);
    s->all = tu_stats(pool, UMP_DEVICE_ALL);
    for (int d = 0; d < s->ndev; d++)
        s->dev[d] = tu_stats(pool, d);
}

static void assert_snap_equal(const struct snapshot *a,
                              const struct snapshot *b)
{
    tu_assert_stats_equal(&a->all, &b->all);
    for (int d = 0; d < a->ndev; d++)
        tu_assert_stats_equal(&a->dev[d], &b->dev[d]);
}

/* A topology file written for one test, removed after. */
struct tmp_topo {
    char dir[64];
    char path[128];
};

static void topo_write(struct tmp_topo *t, const char *text)
{
    FMT(t->dir, "/tmp/umpool-pol-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    FMT(t->path, "%s/m.topo", t->dir);
    FILE *f = fopen(t->path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void topo_remove(struct tmp_topo *t)
{
    unlink(t->path);
    rmdir(t->dir);
}

/* The folder of the test plugins: UMPOOL_TEST_PLUGINS (set by make check),
 * else .libs next to this program. Skips the test when the plugin is not
 * there. */
static void plugin_path(char *buf, size_t len, const char *name)
{
    const char *env = getenv("UMPOOL_TEST_PLUGINS");
    char dir[PATH_MAX];
    if (env && *env) {
        FMT(dir, "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
        assert_true(n > 0);
        dir[n] = '\0';
        char *slash = strrchr(dir, '/');
        assert_non_null(slash);
        size_t left = sizeof(dir) - (size_t)(slash - dir);
        assert_true(snprintf(slash, left, "/.libs") < (int)left);
    }
    assert_true(snprintf(buf, len, "%s/libpolicy_%s.so", dir, name) < (int)len);
    if (access(buf, R_OK) != 0) {
        print_message("plugin %s not built\n", buf);
        skip();
    }
}

/* ump_alloc that must fail with rc and exactly one log line, containing
 * each of the words given (NULL-terminated), and change nothing. */
static void expect_refused(ump_pool_t *pool, size_t size, const ump_hints_t *h,
                           int rc_expected, ...)
{
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    char buf[8192];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_alloc(pool, size, h, &p);
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (rc != rc_expected)
        fail_msg("ump_alloc(%zu, policy %s) = %d (%s), expected %d; log:\n%s",
                 size, h && h->policy ? h->policy : "-", rc, ump_strerror(rc),
                 rc_expected, buf);
    assert_ptr_equal(p, SENTINEL);
    if (tu_count_log_lines(buf) != 1)
        fail_msg("policy %s: %d log lines, expected 1:\n%s",
                 h && h->policy ? h->policy : "-", tu_count_log_lines(buf),
                 buf);
    const char *missing = NULL;
    va_list ap;
    va_start(ap, rc_expected);
    for (const char *w; !missing && (w = va_arg(ap, const char *));)
        if (!strstr(buf, w))
            missing = w;
    va_end(ap);
    if (missing)
        fail_msg("the log line does not name '%s':\n%s", missing, buf);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
}

/* ump_alloc with its log lines kept out of the test's output. */
static int quiet_alloc(ump_pool_t *pool, size_t size, const ump_hints_t *h,
                       void **p)
{
    char buf[8192];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_alloc(pool, size, h, p);
    tu_capture_stop(&cap, buf, sizeof(buf));
    return rc;
}

/* ump_pool_create that must fail with -EINVAL and one log line. */
static void expect_create_refused(const char *conf, const char *word)
{
    ump_pool_t *pool = SENTINEL;
    char buf[8192];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_pool_create(conf, &pool);
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (rc != -EINVAL)
        fail_msg("ump_pool_create(\"%s\") = %d, expected -EINVAL", conf, rc);
    assert_ptr_equal(pool, SENTINEL);
    if (tu_count_log_lines(buf) != 1)
        fail_msg("\"%s\": %d log lines, expected 1:\n%s", conf,
                 tu_count_log_lines(buf), buf);
    if (word && !strstr(buf, word))
        fail_msg("the log line does not name '%s':\n%s", word, buf);
}

/* The cost model's formula (lib/costmodel.h), from the link properties:
 * t = max(local / local_bw, sum over d != reader of bytes_d / bw(reader, d)),
 * bandwidth = bytes / t. */
static double formula_bw(ump_pool_t *pool, const size_t *bytes, int reader)
{
    int ndev = ump_device_count(pool);
    double total = 0, t_local = 0, t_remote = 0;
    for (int d = 0; d < ndev; d++) {
        if (!bytes[d])
            continue;
        ump_link_props_t l;
        assert_int_equal(ump_link_props(pool, reader, d, &l), 0);
        assert_true(l.bandwidth_gbs > 0);
        total += (double)bytes[d];
        if (d == reader)
            t_local = (double)bytes[d] / l.bandwidth_gbs;
        else
            t_remote += (double)bytes[d] / l.bandwidth_gbs;
    }
    double t = t_local > t_remote ? t_local : t_remote;
    return total / t;
}

static void assert_close(double got, double want)
{
    double diff = got > want ? got - want : want - got;
    if (diff > 1e-9 * (want > 0 ? want : 1))
        fail_msg("got %.12g, expected %.12g", got, want);
}

static double read_bw(ump_pool_t *pool, const void *p, int reader)
{
    double gbs = -1;
    int rc = ump_model_read_bw(pool, p, reader, &gbs);
    if (rc != 0)
        fail_msg("ump_model_read_bw(reader %d) = %d", reader, rc);
    return gbs;
}

static double link_bw(ump_pool_t *pool, int from, int to)
{
    ump_link_props_t l;
    assert_int_equal(ump_link_props(pool, from, to, &l), 0);
    return l.bandwidth_gbs;
}

/* --- local ------------------------------------------------------------- */

static void test_local_stays_on_requesting_device(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("dgx-h200", "");
    const int devs[] = {0, 3, 7};
    void *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = tu_alloc(pool, 64 * TU_MIB, devs[i]);
        assert_on(pool, p[i], 64 * TU_MIB, devs[i]);
    }
    for (int d = 0; d < 8; d++)
        assert_int_equal(mapped(pool, d),
                         d == 0 || d == 3 || d == 7 ? 64 * TU_MIB : 0);
    /* no device in the hints: the thread's current one */
    assert_int_equal(ump_set_device(pool, 5), 0);
    void *q = NULL;
    assert_int_equal(ump_alloc(pool, 10 * TU_MIB, NULL, &q), 0);
    assert_on(pool, q, 10 * TU_MIB, 5);
    assert_int_equal(tu_stats(pool, 5).live_bytes, 10 * TU_MIB);
    tu_free(pool, q);
    for (int i = 0; i < 3; i++)
        tu_free(pool, p[i]);
    tu_pool_destroy(pool);
}

/* What does not fit goes to one NVLink peer, and only past the end of what
 * the requesting device supplied. */
static void test_local_spill_stays_in_nvlink_domain(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("dgx-h200", "");
    const size_t size = DEV_MEM + 44 * TU_MIB;
    void *p = tu_alloc(pool, size, 5);
    struct layout l;
    layout_of(pool, p, size, &l);
    assert_int_equal(l.n, DEV_CHUNKS + 22);
    for (size_t k = 0; k < DEV_CHUNKS; k++)
        assert_int_equal(l.dev[k], 5);
    int other = l.dev[DEV_CHUNKS];
    assert_int_not_equal(other, 5);
    for (size_t k = DEV_CHUNKS; k < l.n; k++)
        assert_int_equal(l.dev[k], other);
    ump_link_props_t lp;
    assert_int_equal(ump_link_props(pool, 5, other, &lp), 0);
    assert_int_equal(lp.kind, UMP_LINK_NVLINK);
    assert_int_equal(room(pool, 5), 0);
    assert_int_equal(mapped(pool, other), 22 * TU_CHUNK);
    layout_free(&l);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* Spill seq: n_here granules on `here`, then the rest on `next`. */
static void assert_spill(ump_pool_t *pool, void *p, size_t size, int here,
                         size_t n_here, int next)
{
    struct layout l;
    layout_of(pool, p, size, &l);
    for (size_t k = 0; k < l.n; k++) {
        int want = k < n_here ? here : next;
        if (l.dev[k] != want)
            fail_msg("granule %zu of %zu on device %d, expected %d", k, l.n,
                     l.dev[k], want);
    }
    layout_free(&l);
}

static void test_local_spill_pcie_same_switch_first(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("pcie-4gpu", "");
    const size_t size = DEV_MEM + 44 * TU_MIB;
    void *a = tu_alloc(pool, size, 0);
    assert_spill(pool, a, size, 0, DEV_CHUNKS, 1);
    void *b = tu_alloc(pool, size, 3);
    assert_spill(pool, b, size, 3, DEV_CHUNKS, 2);
    assert_int_equal(mapped(pool, 1), 44 * TU_MIB);
    assert_int_equal(mapped(pool, 2), 44 * TU_MIB);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_pool_destroy(pool);
}

static void test_local_spill_nvlink_pairs(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    const size_t size = DEV_MEM + 44 * TU_MIB;
    void *a = tu_alloc(pool, size, 0);
    assert_spill(pool, a, size, 0, DEV_CHUNKS, 1);
    void *b = tu_alloc(pool, size, 2);
    assert_spill(pool, b, size, 2, DEV_CHUNKS, 3);
    /* 0 and 2 are full: from 0, its NVLink peer 1 first (106 chunks left),
     * then across the sockets to the one with room (3; 2 is full) */
    size_t left1 = room(pool, 1) / TU_CHUNK;
    assert_int_equal(left1, DEV_CHUNKS - 22);
    void *c = tu_alloc(pool, DEV_MEM, 0);
    assert_spill(pool, c, DEV_MEM, 1, left1, 3);
    assert_int_equal(room(pool, 1), 0);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_pool_destroy(pool);
}

static void test_no_spill_hint(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_NO_SPILL;
    /* with room it changes nothing */
    void *a = alloc_h(pool, 100 * TU_MIB, &h);
    assert_on(pool, a, 100 * TU_MIB, 0);
    void *fill = tu_alloc(pool, DEV_MEM - 100 * TU_MIB, 0);
    assert_int_equal(room(pool, 0), 0);
    /* full: -ENOMEM (an info line, not shown at log level warn) */
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), -ENOMEM);
    assert_int_equal(ump_alloc(pool, 4096, &h, &p), -ENOMEM);
    assert_ptr_equal(p, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    /* without the flag both spill to the NVLink peer */
    void *big = tu_alloc(pool, 4 * TU_MIB, 0);
    assert_on(pool, big, 4 * TU_MIB, 1);
    void *small = tu_alloc(pool, 4096, 0);
    assert_int_equal(tu_info(pool, small).device, 1);
    tu_free(pool, small);
    tu_free(pool, big);
    tu_free(pool, fill);
    tu_free(pool, a);
    tu_pool_destroy(pool);
}

/*
 * A device without peer access cannot map another device's memory, so
 * nothing it asks for may be placed there: spilling from it has nowhere to
 * go. Same for pcie-4gpu's sockets, which have no peer access between them.
 */
static void test_spill_only_to_reachable_devices(void **state)
{
    (void)state;
    struct tmp_topo t;
    topo_write(&t, "name lonely\n"
                   "device 0-3 mem 1G numa 0\n"
                   "link all all pcie 25\n"
                   "link 0 1-3 sys 20 nopeer\n");
    ump_pool_t *pool = pool_on(t.path, "");
    topo_remove(&t); /* read at creation */
    ump_link_props_t lp;
    assert_int_equal(ump_link_props(pool, 0, 1, &lp), 0);
    assert_false(lp.peer);
    assert_int_equal(ump_link_props(pool, 1, 2, &lp), 0);
    assert_true(lp.peer);
    /* its own memory works (access only for itself) */
    void *a = tu_alloc(pool, 64 * TU_MIB, 0);
    assert_on(pool, a, 64 * TU_MIB, 0);
    tu_fill(a, 4096, 1);
    /* the others spill among themselves, never to 0 */
    const size_t size = DEV_MEM + 44 * TU_MIB;
    void *b = tu_alloc(pool, size, 1);
    assert_spill(pool, b, size, 1, DEV_CHUNKS, 2);
    void *fill = tu_alloc(pool, DEV_MEM - 64 * TU_MIB, 0);
    assert_int_equal(room(pool, 0), 0);
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    ump_hints_t h = tu_hints(0);
    int rc = ump_alloc(pool, 4 * TU_MIB, &h, &p);
    if (rc == 0)
        fail_msg("device 0's allocation went to device %d, which device 0 "
                 "cannot access",
                 tu_info(pool, p).device);
    assert_int_equal(rc, -ENOMEM);
    rc = ump_alloc(pool, 4096, &h, &p);
    if (rc == 0)
        fail_msg("device 0's small object went to device %d, which device "
                 "0 cannot access",
                 tu_info(pool, p).device);
    assert_int_equal(rc, -ENOMEM);
    assert_ptr_equal(p, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    tu_assert_pattern(a, 4096, 1);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, fill);
    tu_pool_destroy(pool);

    /* pcie-4gpu: 0 and 1 full, 2 and 3 sit across the sockets, no peers */
    pool = pool_on("pcie-4gpu", "");
    void *c = tu_alloc(pool, 2 * DEV_MEM, 0);
    assert_int_equal(room(pool, 0) + room(pool, 1), 0);
    snap(pool, &before);
    rc = ump_alloc(pool, 4 * TU_MIB, &h, &p);
    if (rc == 0)
        fail_msg("device 0's allocation went to device %d, across the "
                 "sockets without peer access",
                 tu_info(pool, p).device);
    assert_int_equal(rc, -ENOMEM);
    assert_ptr_equal(p, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    tu_free(pool, c);
    tu_pool_destroy(pool);
}

/* Two sockets, no link lines: pairs on one NUMA node are "host" links (3
 * hops), pairs across the nodes "sys" (4 hops), at the same bandwidth; a
 * spill stays on the requesting device's socket first. */
static void test_two_numa_nodes(void **state)
{
    (void)state;
    struct tmp_topo t;
    topo_write(&t, "name twosockets\n"
                   "numa 2\n"
                   "pcie_bw 30\n"
                   "device 0-1 mem 1G numa 0\n"
                   "device 2-3 mem 1G numa 1\n");
    ump_pool_t *pool = pool_on(t.path, "");
    topo_remove(&t);
    ump_device_props_t dp;
    for (int d = 0; d < 4; d++) {
        assert_int_equal(ump_device_props(pool, d, &dp), 0);
        assert_int_equal(dp.numa_node, d / 2);
    }
    ump_link_props_t near, far;
    assert_int_equal(ump_link_props(pool, 2, 3, &near), 0);
    assert_int_equal(ump_link_props(pool, 2, 0, &far), 0);
    assert_int_equal(near.kind, UMP_LINK_HOST);
    assert_int_equal(far.kind, UMP_LINK_SYS);
    assert_true(near.bandwidth_gbs == far.bandwidth_gbs);
    assert_true(near.hops < far.hops);
    const size_t size = DEV_MEM + 44 * TU_MIB;
    void *a = tu_alloc(pool, size, 2);
    assert_spill(pool, a, size, 2, DEV_CHUNKS, 3);
    void *b = tu_alloc(pool, size, 1);
    assert_spill(pool, b, size, 1, DEV_CHUNKS, 0);
    /* the requesting device's socket full: then the other socket */
    void *c = tu_alloc(pool, DEV_MEM, 0);
    assert_spill(pool, c, DEV_MEM, 0, DEV_CHUNKS - 22, 3);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_pool_destroy(pool);

    /* the shipped 8-GPU node: GPUs 0-3 on node 0, 4-7 on node 1 */
    pool = pool_on("dgx-h200", "");
    for (int d = 0; d < 8; d++) {
        assert_int_equal(ump_device_props(pool, d, &dp), 0);
        assert_int_equal(dp.numa_node, d / 4);
    }
    tu_pool_destroy(pool);
}

/* --- interleave -------------------------------------------------------- */

/* 16 GiB over the eight GPUs of a DGX H200 (141 GiB each): one chunk per
 * stripe, starting at the requesting device, 2 GiB on each. */
static void test_interleave_16g_dgx(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_topology:dgx-h200");
    const size_t size = (size_t)16 << 30;
    void *p = alloc_pol(pool, size, 0, "interleave");
    struct layout l;
    layout_of(pool, p, size, &l);
    assert_int_equal(l.n, 8192);
    for (size_t k = 0; k < l.n; k++)
        if (l.dev[k] != (int)(k % 8))
            fail_msg("granule %zu on device %d, expected %d", k, l.dev[k],
                     (int)(k % 8));
    size_t bytes[UMP_MAX_DEVICES] = {0};
    for (int d = 0; d < 8; d++) {
        ump_stats_t st = tu_stats(pool, d);
        assert_int_equal(st.mapped_bytes, (size_t)2 << 30);
        assert_int_equal(st.live_bytes, (size_t)2 << 30);
        bytes[d] = l.per_dev[d] * TU_CHUNK;
    }
    /* device 0 reads 1/8 locally and 7/8 over NVLink */
    assert_close(read_bw(pool, p, 0), formula_bw(pool, bytes, 0));
    layout_free(&l);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

static void test_interleave_starts_at_requesting_device(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("dgx-h200", ",policy:interleave");
    int seq[16];
    for (int k = 0; k < 16; k++)
        seq[k] = (3 + k) % 8;
    void *a = tu_alloc(pool, 32 * TU_MIB, 3);
    assert_seq(pool, a, 32 * TU_MIB, seq, 16);
    /* one chunk: local */
    void *b = tu_alloc(pool, TU_MIB + TU_MIB / 2, 6);
    assert_on(pool, b, TU_MIB + TU_MIB / 2, 6);
    /* a requesting device outside the set: the set's order */
    for (int k = 0; k < 6; k++)
        seq[k] = 2 + k % 2;
    void *c = alloc_pol(pool, 12 * TU_MIB, 0, "interleave=2+3");
    assert_seq(pool, c, 12 * TU_MIB, seq, 6);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_pool_destroy(pool);
}

static void test_interleave_weights(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    int seq[12];
    for (int k = 0; k < 12; k++)
        seq[k] = k % 3 == 2 ? 1 : 0;
    void *a = alloc_pol(pool, 24 * TU_MIB, 0, "interleave=0*2+1");
    assert_seq(pool, a, 24 * TU_MIB, seq, 12);
    assert_int_equal(mapped(pool, 0), 16 * TU_MIB);
    assert_int_equal(mapped(pool, 1), 8 * TU_MIB);
    /* from device 1, the stripes start at 1 */
    for (int k = 0; k < 12; k++)
        seq[k] = k % 3 == 0 ? 1 : 0;
    void *b = alloc_pol(pool, 24 * TU_MIB, 1, "interleave=0*2+1");
    assert_seq(pool, b, 24 * TU_MIB, seq, 12);
    /* from outside the set, at the set's first device */
    for (int k = 0; k < 12; k++)
        seq[k] = k % 3 == 2 ? 1 : 0;
    void *c = alloc_pol(pool, 24 * TU_MIB, 3, "interleave=0*2+1");
    assert_seq(pool, c, 24 * TU_MIB, seq, 12);
    /* 3:1 the other way round */
    for (int k = 0; k < 8; k++)
        seq[k] = k % 4 == 0 ? 2 : 3;
    void *e = alloc_pol(pool, 16 * TU_MIB, 2, "interleave=2+3*3");
    assert_seq(pool, e, 16 * TU_MIB, seq, 8);
    assert_int_equal(mapped(pool, 2), 4 * TU_MIB);
    assert_int_equal(mapped(pool, 3), 12 * TU_MIB);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_free(pool, e);
    tu_pool_destroy(pool);
}

static void test_interleave_full_devices(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *full1 = tu_alloc(pool, DEV_MEM, 1);
    assert_int_equal(room(pool, 1), 0);
    /* a full device of the set is skipped */
    int seq[12];
    for (int k = 0; k < 12; k++)
        seq[k] = k % 2 ? 2 : 0;
    void *a = alloc_pol(pool, 24 * TU_MIB, 0, "interleave=0+1+2");
    assert_seq(pool, a, 24 * TU_MIB, seq, 12);
    /* one that runs out on the way: the rest from the others */
    void *most3 = tu_alloc(pool, DEV_MEM - 4 * TU_MIB, 3);
    assert_int_equal(room(pool, 3), 4 * TU_MIB);
    const int seq2[] = {0, 3, 0, 3, 0, 0, 0, 0};
    void *b = alloc_pol(pool, 16 * TU_MIB, 0, "interleave=0+3");
    assert_seq(pool, b, 16 * TU_MIB, seq2, 8);
    /* the whole set full: -ENOMEM, even with room elsewhere */
    assert_int_equal(room(pool, 3), 0);
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    ump_hints_t h = tu_hints(0);
    h.policy = "interleave=1+3";
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), -ENOMEM);
    assert_ptr_equal(p, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    assert_true(room(pool, 0) > 0 && room(pool, 2) > 0);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, most3);
    tu_free(pool, full1);
    tu_pool_destroy(pool);
}

static void test_bad_policy_args(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *keep = tu_alloc(pool, 8 * TU_MIB, 0);
    tu_fill(keep, 8 * TU_MIB, 7);
    const char *bad[] = {
        "interleave=9",   "interleave=4", "interleave=0+0", "interleave=0*0",
        "interleave=x",   "interleave=",  "interleave=-1",  "interleave=0*2000",
        "interleave=0;1", "domain=x",     "domain=",        "nosuch",
        "nosuch=1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        ump_hints_t h = tu_hints(0);
        h.policy = bad[i];
        char name[32]; /* the log line names at least the policy */
        FMT(name, "%.*s", (int)strcspn(bad[i], "="), bad[i]);
        expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, name, NULL);
        /* small ones are not placed by the policy, but a bad name is
         * still an error */
        expect_refused(pool, 4096, &h, -EINVAL, name, NULL);
    }
    tu_assert_pattern(keep, 8 * TU_MIB, 7);
    void *next = alloc_pol(pool, 8 * TU_MIB, 1, "interleave=0+1");
    tu_free(pool, next);
    tu_free(pool, keep);
    tu_pool_destroy(pool);
    /* as the pool default: the pool is not made */
    expect_create_refused("backend:sim,sim_topology:nvlink-pairs-4gpu,"
                          "policy:interleave=9",
                          "interleave=9");
    expect_create_refused("backend:sim,sim_topology:nvlink-pairs-4gpu,"
                          "policy:domain=x",
                          "domain=x");
    expect_create_refused("backend:sim,sim_devices:2,policy:interleave=0+0",
                          "interleave=0+0");
}

/*
 * Arguments to a policy that takes none are an error, not silently
 * dropped: "balanced=0+1" must not look as if it meant something.
 */
static void test_args_to_policy_without_args(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    const char *bad[] = {"balanced=0+1", "local=x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        ump_hints_t h = tu_hints(0);
        h.policy = bad[i];
        void *p = SENTINEL;
        int rc = ump_alloc(pool, 8 * TU_MIB, &h, &p);
        if (rc == 0)
            tu_free(pool, p);
        if (rc != -EINVAL)
            fail_msg("policy '%s': ump_alloc = %d, expected -EINVAL", bad[i],
                     rc);
    }
    tu_pool_destroy(pool);
}

/* --- balanced ---------------------------------------------------------- */

/* The device balanced should pick: most room, the requesting device on a
 * tie, then the lowest index. */
static int emptiest(ump_pool_t *pool, int req)
{
    int ndev = ump_device_count(pool), best = req;
    for (int d = 0; d < ndev; d++) {
        size_t r = room(pool, d), rb = room(pool, best);
        if (r > rb || (r == rb && best != req && d < best))
            best = d;
    }
    return best;
}

static void test_balanced_emptiest_device(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", ",policy:balanced");
    /* a fresh pool: all tie, so the requesting device; then the others */
    void *p[20];
    p[0] = tu_alloc(pool, 32 * TU_MIB, 2);
    assert_on(pool, p[0], 32 * TU_MIB, 2);
    p[1] = tu_alloc(pool, 32 * TU_MIB, 2);
    assert_on(pool, p[1], 32 * TU_MIB, 0);
    p[2] = tu_alloc(pool, 32 * TU_MIB, 2);
    assert_on(pool, p[2], 32 * TU_MIB, 1);
    p[3] = tu_alloc(pool, 32 * TU_MIB, 2);
    assert_on(pool, p[3], 32 * TU_MIB, 3);
    /* equal tensors from one device: round the devices as they fill */
    for (int i = 4; i < 12; i++) {
        p[i] = tu_alloc(pool, 16 * TU_MIB, 0);
        assert_on(pool, p[i], 16 * TU_MIB, (i - 4) % 4);
    }
    /* mixed sizes from every device: always the emptiest */
    const size_t sizes[] = {48, 16, 64, 8, 40, 24, 32, 56};
    for (int i = 12; i < 20; i++) {
        size_t size = sizes[i - 12] * TU_MIB;
        int req = i % 4, want = emptiest(pool, req);
        p[i] = tu_alloc(pool, size, req);
        assert_on(pool, p[i], size, want);
    }
    size_t total = 0;
    for (int d = 0; d < 4; d++)
        total += mapped(pool, d);
    size_t want = (4 * 32 + 8 * 16) * TU_MIB;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++)
        want += sizes[i] * TU_MIB;
    assert_int_equal(total, want);
    for (int i = 0; i < 20; i++)
        tu_free(pool, p[i]);
    tu_pool_destroy(pool);
}

static void test_balanced_spills_to_next_emptiest(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *a = tu_alloc(pool, 64 * TU_MIB, 1);
    void *b = tu_alloc(pool, 32 * TU_MIB, 3);
    /* room: 0 and 2 full 128 chunks, 3 112, 1 96 */
    const size_t size = DEV_MEM + 20 * TU_MIB;
    void *c = alloc_pol(pool, size, 3, "balanced");
    assert_spill(pool, c, size, 0, DEV_CHUNKS, 2);
    /* with no spill, the emptiest device only: 2 has 118 chunks */
    ump_hints_t h = tu_hints(0);
    h.policy = "balanced";
    h.flags = UMP_HINT_NO_SPILL;
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    assert_int_equal(ump_alloc(pool, 120 * TU_CHUNK, &h, &p), -ENOMEM);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    void *e = alloc_h(pool, 118 * TU_CHUNK, &h);
    assert_on(pool, e, 118 * TU_CHUNK, 2);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_free(pool, e);
    tu_pool_destroy(pool);
}

/* --- domain ------------------------------------------------------------ */

static bool in_pair(int d, int pair_first)
{
    return d == pair_first || d == pair_first + 1;
}

/* Every granule of p inside the NVLink pair starting at pair_first. */
static void assert_in_pair(ump_pool_t *pool, void *p, size_t size,
                           int pair_first)
{
    struct layout l;
    layout_of(pool, p, size, &l);
    for (size_t k = 0; k < l.n; k++)
        if (!in_pair(l.dev[k], pair_first))
            fail_msg("granule %zu on device %d, outside pair %d-%d", k,
                     l.dev[k], pair_first, pair_first + 1);
    layout_free(&l);
}

static void test_domain_group_stays_on_its_pair(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    const int from[] = {0, 2, 3, 1, 2, 0, 3};
    void *p[8];
    for (int i = 0; i < 7; i++) {
        p[i] = alloc_group(pool, 32 * TU_MIB, from[i], 7);
        /* the pair of the first allocation (device 0's); inside it the
         * requesting device first, else the pair's first device */
        assert_on(pool, p[i], 32 * TU_MIB, in_pair(from[i], 0) ? from[i] : 0);
    }
    assert_int_equal(mapped(pool, 2) + mapped(pool, 3), 0);
    /* fill the pair to the last chunk from the other pair's device: it
     * still does not cross */
    size_t left = room(pool, 0) + room(pool, 1);
    p[7] = alloc_group(pool, left, 2, 7);
    assert_in_pair(pool, p[7], left, 0);
    assert_int_equal(room(pool, 0) + room(pool, 1), 0);
    assert_int_equal(mapped(pool, 2) + mapped(pool, 3), 0);
    /* the pair is full: now it spills, to the requesting device first */
    void *q = alloc_group(pool, 4 * TU_MIB, 3, 7);
    assert_on(pool, q, 4 * TU_MIB, 3);
    tu_free(pool, q);
    for (int i = 0; i < 8; i++)
        tu_free(pool, p[i]);
    tu_pool_destroy(pool);
}

static void test_domain_groups_on_different_pairs(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *a = alloc_group(pool, 32 * TU_MIB, 0, 7);
    assert_on(pool, a, 32 * TU_MIB, 0);
    void *b = alloc_group(pool, 32 * TU_MIB, 2, 8);
    assert_on(pool, b, 32 * TU_MIB, 2);
    void *c = alloc_group(pool, 32 * TU_MIB, 0, 8); /* group 8's pair */
    assert_in_pair(pool, c, 32 * TU_MIB, 2);
    void *d = alloc_group(pool, 32 * TU_MIB, 3, 7); /* group 7's pair */
    assert_in_pair(pool, d, 32 * TU_MIB, 0);
    /* a new group too big for the requesting device's pair but not for
     * the other one goes there whole */
    void *fill =
        tu_alloc(pool, room(pool, 0) + room(pool, 1) - 100 * TU_CHUNK, 1);
    assert_int_equal(room(pool, 0) + room(pool, 1), 100 * TU_CHUNK);
    void *e = alloc_group(pool, 150 * TU_CHUNK, 0, 9);
    assert_in_pair(pool, e, 150 * TU_CHUNK, 2);
    assert_int_equal(room(pool, 0) + room(pool, 1), 100 * TU_CHUNK);
    /* and group 9 stays there */
    void *g = alloc_group(pool, 8 * TU_MIB, 1, 9);
    assert_in_pair(pool, g, 8 * TU_MIB, 2);
    void *all[] = {a, b, c, d, fill, e, g};
    for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++)
        tu_free(pool, all[i]);
    tu_pool_destroy(pool);
}

/* A group bigger than any pair fills one pair completely and only then
 * spills; with UMP_HINT_NO_SPILL it is refused. */
static void test_domain_group_bigger_than_a_pair(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    const size_t n = 2 * DEV_CHUNKS + 44, size = n * TU_CHUNK;
    void *a = alloc_group(pool, size, 0, 5);
    struct layout l;
    layout_of(pool, a, size, &l);
    for (size_t k = 0; k < n; k++) {
        if (k < DEV_CHUNKS)
            assert_int_equal(l.dev[k], 0);
        else if (k < 2 * DEV_CHUNKS)
            assert_int_equal(l.dev[k], 1);
        else
            assert_int_equal(l.dev[k], l.dev[2 * DEV_CHUNKS]);
    }
    assert_true(in_pair(l.dev[2 * DEV_CHUNKS], 2));
    layout_free(&l);
    assert_int_equal(room(pool, 0) + room(pool, 1), 0);

    ump_hints_t h = tu_hints(2);
    h.policy = "domain";
    h.group = 6;
    h.flags = UMP_HINT_NO_SPILL;
    struct snapshot before, after;
    snap(pool, &before);
    void *p = SENTINEL;
    assert_int_equal(ump_alloc(pool, size, &h, &p), -ENOMEM);
    assert_ptr_equal(p, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    /* what fits in its pair is fine */
    void *b = alloc_h(pool, 16 * TU_MIB, &h);
    assert_on(pool, b, 16 * TU_MIB, 2);
    tu_free(pool, b);
    tu_free(pool, a);
    tu_pool_destroy(pool);
}

/* Without NVLink every device is its own domain: a group that does not fit
 * on the requesting device goes where the cost model says that device
 * reads it fastest. */
static void test_domain_choice_by_cost_model(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("pcie-4gpu", ",policy:domain");
    void *fill = alloc_pol(pool, DEV_MEM, 0, "local");
    int best = -1;
    for (int d = 1; d < 4; d++)
        if (best < 0 || link_bw(pool, 0, d) > link_bw(pool, 0, best))
            best = d;
    assert_int_equal(best, 1); /* the same switch */
    ump_hints_t h = tu_hints(0);
    h.group = 3;
    void *a = alloc_h(pool, 32 * TU_MIB, &h);
    assert_on(pool, a, 32 * TU_MIB, best);
    /* device 3 sits on the other socket without peer access to device 1:
     * the group's domain is out of its reach, so its allocation stays on
     * what device 3 can use, itself first */
    h.device = 3;
    void *b = alloc_h(pool, 32 * TU_MIB, &h);
    assert_on(pool, b, 32 * TU_MIB, 3);
    /* no group: each allocation on its own, device 3 has room */
    void *c = tu_alloc(pool, 32 * TU_MIB, 3);
    assert_on(pool, c, 32 * TU_MIB, 3);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    tu_free(pool, fill);
    tu_pool_destroy(pool);
}

/* --- the pool's default and per-allocation policies --------------------- */

static void test_config_default_and_hints(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", ",policy:balanced");
    void *a = NULL, *b = NULL;
    assert_int_equal(ump_alloc(pool, 32 * TU_MIB, NULL, &a), 0);
    assert_on(pool, a, 32 * TU_MIB, 0);
    assert_int_equal(ump_alloc(pool, 32 * TU_MIB, NULL, &b), 0);
    assert_on(pool, b, 32 * TU_MIB, 1); /* balanced: not 0 again */
    void *c = alloc_pol(pool, 32 * TU_MIB, 0, "local");
    assert_on(pool, c, 32 * TU_MIB, 0);
    const int seq[] = {2, 3, 2, 3};
    void *d = alloc_pol(pool, 8 * TU_MIB, 0, "interleave=2+3");
    assert_seq(pool, d, 8 * TU_MIB, seq, 4);
    /* small objects live near the requesting device, whatever the policy:
     * balanced would pick device 2 or 3 */
    void *s = tu_alloc(pool, TU_SLAB_MAX, 0);
    assert_int_equal(tu_info(pool, s).device, 0);
    void *s2 = alloc_pol(pool, 4096, 1, "interleave=2+3");
    assert_int_equal(tu_info(pool, s2).device, 1);
    void *all[] = {a, b, c, d, s, s2};
    for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++)
        tu_free(pool, all[i]);
    tu_pool_destroy(pool);

    pool = pool_on("nvlink-pairs-4gpu", ",policy:interleave");
    assert_int_equal(ump_set_device(pool, 1), 0);
    const int seq2[] = {1, 2, 3, 0, 1, 2};
    void *e = NULL;
    assert_int_equal(ump_alloc(pool, 12 * TU_MIB, NULL, &e), 0);
    assert_seq(pool, e, 12 * TU_MIB, seq2, 6);
    ump_hints_t h = UMP_HINTS_INIT;
    h.policy = "local";
    void *f = alloc_h(pool, 12 * TU_MIB, &h);
    assert_on(pool, f, 12 * TU_MIB, 1);
    tu_free(pool, e);
    tu_free(pool, f);
    tu_pool_destroy(pool);
}

/* --- plugins ----------------------------------------------------------- */

/* The example plugin ("round-robin"): the n-th allocation on device
 * (start + n) mod ndev, skipping devices that cannot hold it. */
static void test_plugin_example_by_hint(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 8];
    plugin_path(path, sizeof(path), "example");
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *p[13];
    for (int i = 0; i < 6; i++) {
        p[i] = alloc_pol(pool, 4 * TU_MIB, 0, path);
        assert_on(pool, p[i], 4 * TU_MIB, i % 4);
    }
    /* another text, another instance with its own state */
    FMT(spec, "%s=3", path);
    p[6] = alloc_pol(pool, 4 * TU_MIB, 0, spec);
    assert_on(pool, p[6], 4 * TU_MIB, 3);
    p[7] = alloc_pol(pool, 4 * TU_MIB, 0, path); /* the first went on */
    assert_on(pool, p[7], 4 * TU_MIB, 2);
    /* device 3 cannot hold it: skipped */
    void *fill = tu_alloc(pool, room(pool, 3), 3);
    p[8] = alloc_pol(pool, 4 * TU_MIB, 0, path);
    assert_on(pool, p[8], 4 * TU_MIB, 0);
    p[9] = alloc_pol(pool, 4 * TU_MIB, 0, path);
    assert_on(pool, p[9], 4 * TU_MIB, 1);
    p[10] = alloc_pol(pool, 4 * TU_MIB, 0, path);
    assert_on(pool, p[10], 4 * TU_MIB, 2);
    /* with no spill, only the device whose turn it is: 3, full */
    ump_hints_t h = tu_hints(0);
    h.policy = path;
    h.flags = UMP_HINT_NO_SPILL;
    struct snapshot before, after;
    snap(pool, &before);
    void *q = SENTINEL;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &q), -ENOMEM);
    assert_ptr_equal(q, SENTINEL);
    snap(pool, &after);
    assert_snap_equal(&before, &after);
    p[11] = alloc_pol(pool, 4 * TU_MIB, 0, path);
    assert_on(pool, p[11], 4 * TU_MIB, 0);
    /* small objects stay with the requesting device */
    p[12] = alloc_pol(pool, 4096, 2, path);
    assert_int_equal(tu_info(pool, p[12]).device, 2);
    for (int i = 0; i < 13; i++)
        tu_free(pool, p[i]);
    tu_free(pool, fill);
    tu_pool_destroy(pool);
}

static void test_plugin_example_as_default(void **state)
{
    (void)state;
    char path[PATH_MAX], more[PATH_MAX + 32];
    plugin_path(path, sizeof(path), "example");
    FMT(more, ",policy:%s=1", path);
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", more);
    void *p[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ump_alloc(pool, 4 * TU_MIB, NULL, &p[i]), 0);
        assert_on(pool, p[i], 4 * TU_MIB, (1 + i) % 4);
    }
    /* "local" by hint still works on such a pool */
    void *q = alloc_pol(pool, 4 * TU_MIB, 2, "local");
    assert_on(pool, q, 4 * TU_MIB, 2);
    for (int i = 0; i < 5; i++)
        tu_free(pool, p[i]);
    tu_free(pool, q);
    tu_pool_destroy(pool);

    /* its own argument check: a device out of range */
    FMT(more, "backend:sim,sim_topology:nvlink-pairs-4gpu,policy:%s=4", path);
    expect_create_refused(more, path);
}

/* A plugin that cannot be used: -EINVAL, one log line, the pool as it
 * was, earlier allocations intact, the next allocation fine. */
static void check_broken_plugin(const char *spec, const char *word)
{
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *keep = tu_alloc(pool, 8 * TU_MIB, 0);
    void *keep_small = tu_alloc(pool, 4096, 1);
    tu_fill(keep, 8 * TU_MIB, 11);
    tu_fill(keep_small, 4096, 12);
    ump_hints_t h = tu_hints(0);
    h.policy = spec;
    expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, word, NULL);
    /* once more: still refused, still one line */
    expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, word, NULL);
    tu_assert_pattern(keep, 8 * TU_MIB, 11);
    tu_assert_pattern(keep_small, 4096, 12);
    void *next = tu_alloc(pool, 8 * TU_MIB, 0);
    assert_on(pool, next, 8 * TU_MIB, 0);
    tu_free(pool, next);
    tu_free(pool, keep);
    tu_free(pool, keep_small);
    tu_pool_destroy(pool);
}

static void test_plugin_missing_symbol(void **state)
{
    (void)state;
    char path[PATH_MAX], conf[PATH_MAX + 64];
    plugin_path(path, sizeof(path), "noentry");
    check_broken_plugin(path, UMP_POLICY_SYMBOL);
    FMT(conf, "backend:sim,sim_devices:2,policy:%s", path);
    expect_create_refused(conf, UMP_POLICY_SYMBOL);
}

static void test_plugin_wrong_version(void **state)
{
    (void)state;
    char path[PATH_MAX], conf[PATH_MAX + 64];
    plugin_path(path, sizeof(path), "badversion");
    check_broken_plugin(path, "99");
    FMT(conf, "backend:sim,sim_devices:2,policy:%s", path);
    expect_create_refused(conf, "99");
}

static void test_plugin_not_loadable(void **state)
{
    (void)state;
    check_broken_plugin("/no/such/dir/libpolicy.so", "/no/such/dir");
    /* a file that is not a shared library */
    struct tmp_topo t;
    topo_write(&t, "not an ELF file\n");
    check_broken_plugin(t.path, t.path);
    topo_remove(&t);
}

/* Each kind of broken plan of policy_greedy (see its top comment). */
static void test_plugin_bad_plans(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 16];
    plugin_path(path, sizeof(path), "greedy");
    /* the log line names the policy and, where the pool can tell, the
     * fault; "over": the device and the count */
    const struct {
        const char *arg, *word;
        bool loads; /* init succeeds: the instance exists */
    } kinds[] = {{NULL, "device 0", true},    {"over", "device 0", true},
                 {"short", "add up", true},   {"range", "range", true},
                 {"negative", "range", true}, {"empty", "empty", true},
                 {"none", "no parts", true},  {"wrap", "device 0", true},
                 {"initfail", "initfail", false}};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(*kinds); i++) {
        if (kinds[i].arg)
            FMT(spec, "%s=%s", path, kinds[i].arg);
        else
            FMT(spec, "%s", path);
        ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
        void *keep = tu_alloc(pool, 8 * TU_MIB, 0);
        tu_fill(keep, 8 * TU_MIB, 21);
        ump_hints_t h = tu_hints(0);
        h.policy = spec;
        expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, spec, kinds[i].word,
                       NULL);
        tu_assert_pattern(keep, 8 * TU_MIB, 21);
        if (kinds[i].loads) { /* small objects: not placed by it */
            void *s = alloc_h(pool, 4096, &h);
            assert_int_equal(tu_info(pool, s).device, 0);
            tu_free(pool, s);
        }
        void *next = tu_alloc(pool, 8 * TU_MIB, 1);
        assert_on(pool, next, 8 * TU_MIB, 1);
        tu_free(pool, next);
        tu_free(pool, keep);
        tu_pool_destroy(pool);
    }
    /* a failing place(): its error, logged once */
    FMT(spec, "%s=placefail", path);
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    ump_hints_t h = tu_hints(0);
    h.policy = spec;
    expect_refused(pool, 8 * TU_MIB, &h, -EIO, spec, NULL);
    /* an argument the plugin's init refuses */
    FMT(spec, "%s=bogus", path);
    expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, spec, NULL);
    tu_pool_destroy(pool);
}

/*
 * Parts adding up to more than the request, each device with room: the log
 * line must say what is wrong with the plan.
 */
static void test_plugin_bad_plan_too_many_chunks(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 16];
    plugin_path(path, sizeof(path), "greedy");
    FMT(spec, "%s=excess", path);
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *keep = tu_alloc(pool, 8 * TU_MIB, 0);
    tu_fill(keep, 8 * TU_MIB, 31);
    ump_hints_t h = tu_hints(0);
    h.policy = spec;
    expect_refused(pool, 8 * TU_MIB, &h, -EINVAL, spec, "add up", NULL);
    tu_assert_pattern(keep, 8 * TU_MIB, 31);
    tu_free(pool, keep);
    tu_pool_destroy(pool);
}

/*
 * A plugin claiming more parts than the cap it was given: the pool must
 * refuse the plan without reading past the parts it handed out.
 */
static void test_plugin_bad_plan_past_cap(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 16];
    plugin_path(path, sizeof(path), "greedy");
    FMT(spec, "%s=overcap", path);
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *keep = tu_alloc(pool, 8 * TU_MIB, 0);
    tu_fill(keep, 8 * TU_MIB, 41);
    ump_hints_t h = tu_hints(0);
    h.policy = spec;
    /* once with stderr not captured, so that an ASan report stays visible */
    void *p = SENTINEL;
    assert_int_equal(ump_alloc(pool, 3 * TU_CHUNK, &h, &p), -EINVAL);
    assert_ptr_equal(p, SENTINEL);
    for (size_t n = 1; n <= 4; n++)
        expect_refused(pool, n * TU_CHUNK, &h, -EINVAL, spec, "bad plan", NULL);
    tu_assert_pattern(keep, 8 * TU_MIB, 41);
    tu_free(pool, keep);
    tu_pool_destroy(pool);
}

/* One instance per pool and policy text: init once, fini at destroy. */
static void test_plugin_instances_finalised(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 16];
    plugin_path(path, sizeof(path), "greedy");
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dl);
    int *live = dlsym(dl, "policy_greedy_live");
    assert_non_null(live);
    int base = *live;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    ump_hints_t h = tu_hints(0);
    void *p = NULL;
    FMT(spec, "%s=short", path);
    h.policy = spec;
    for (int i = 0; i < 3; i++)
        assert_int_equal(quiet_alloc(pool, 8 * TU_MIB, &h, &p), -EINVAL);
    assert_int_equal(*live, base + 1);
    FMT(spec, "%s=empty", path);
    assert_int_equal(quiet_alloc(pool, 8 * TU_MIB, &h, &p), -EINVAL);
    assert_int_equal(*live, base + 2);
    ump_pool_t *other = pool_on("nvlink-pairs-4gpu", "");
    assert_int_equal(quiet_alloc(other, 8 * TU_MIB, &h, &p), -EINVAL);
    assert_int_equal(*live, base + 3);
    tu_pool_destroy(pool);
    assert_int_equal(*live, base + 1);
    tu_pool_destroy(other);
    assert_int_equal(*live, base);
    dlclose(dl);
}

/* --- the cost model ---------------------------------------------------- */

static void test_model_local_and_peer(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *a = tu_alloc(pool, 64 * TU_MIB, 0);
    void *b = tu_alloc(pool, 64 * TU_MIB, 1);
    ump_link_props_t self, nv, sys;
    assert_int_equal(ump_link_props(pool, 0, 0, &self), 0);
    assert_int_equal(ump_link_props(pool, 0, 1, &nv), 0);
    assert_int_equal(ump_link_props(pool, 2, 0, &sys), 0);
    assert_int_equal(self.kind, UMP_LINK_SELF);
    assert_int_equal(nv.kind, UMP_LINK_NVLINK);
    assert_int_equal(sys.kind, UMP_LINK_SYS);
    assert_true(self.bandwidth_gbs > nv.bandwidth_gbs &&
                nv.bandwidth_gbs > sys.bandwidth_gbs);
    /* private on its own device: the device's own bandwidth */
    assert_close(read_bw(pool, a, 0), self.bandwidth_gbs);
    /* on the NVLink peer: the link's */
    assert_close(read_bw(pool, b, 0), nv.bandwidth_gbs);
    assert_close(read_bw(pool, a, 1), link_bw(pool, 1, 0));
    assert_close(read_bw(pool, a, 2), sys.bandwidth_gbs);
    /* any byte of the allocation stands for all of it */
    assert_close(read_bw(pool, (char *)b + 5 * TU_MIB + 3, 0),
                 nv.bandwidth_gbs);
    /* spilled: local and remote parts read side by side */
    tu_free(pool, b);
    const size_t size = DEV_MEM - 64 * TU_MIB + 40 * TU_MIB;
    void *c = tu_alloc(pool, size, 0);
    struct layout l;
    layout_of(pool, c, size, &l);
    assert_true(l.per_dev[0] > 0 && l.per_dev[1] > 0);
    size_t bytes[UMP_MAX_DEVICES] = {0};
    for (int d = 0; d < 4; d++)
        bytes[d] = l.per_dev[d] * TU_CHUNK;
    for (int r = 0; r < 4; r++)
        assert_close(read_bw(pool, c, r), formula_bw(pool, bytes, r));
    layout_free(&l);
    tu_free(pool, a);
    tu_free(pool, c);
    tu_pool_destroy(pool);
}

static void test_model_interleaved_dgx(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("dgx-h200", "");
    void *p = alloc_pol(pool, 32 * TU_MIB, 0, "interleave");
    struct layout l;
    layout_of(pool, p, 32 * TU_MIB, &l);
    size_t bytes[UMP_MAX_DEVICES] = {0};
    for (int d = 0; d < 8; d++) {
        assert_int_equal(l.per_dev[d], 2);
        bytes[d] = l.per_dev[d] * TU_CHUNK;
    }
    layout_free(&l);
    double bw = read_bw(pool, p, 0);
    assert_close(bw, formula_bw(pool, bytes, 0));
    /* the remote seven eighths dominate: 8 / 7 of one NVLink link, more
     * than one link gives and less than the local memory */
    assert_close(bw, 8.0 / 7.0 * link_bw(pool, 0, 1));
    assert_true(bw > link_bw(pool, 0, 1) && bw < link_bw(pool, 0, 0));
    for (int r = 1; r < 8; r++)
        assert_close(read_bw(pool, p, r), formula_bw(pool, bytes, r));
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

static void test_model_bad_args(void **state)
{
    (void)state;
    ump_pool_t *pool = pool_on("nvlink-pairs-4gpu", "");
    void *a = tu_alloc(pool, 8 * TU_MIB, 0);
    void *gone = tu_alloc(pool, 8 * TU_MIB, 1);
    tu_free(pool, gone);
    int local = 0;
    const struct {
        ump_pool_t *pool;
        const void *ptr;
        int reader;
    } bad[] = {{pool, a, -1},     {pool, a, 4},    {pool, a, 1000},
               {pool, &local, 0}, {pool, NULL, 0}, {pool, gone, 0},
               {NULL, a, 0}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        double gbs = -7;
        char buf[4096];
        struct tu_capture cap;
        tu_capture_start(&cap);
        int rc =
            ump_model_read_bw(bad[i].pool, bad[i].ptr, bad[i].reader, &gbs);
        tu_capture_stop(&cap, buf, sizeof(buf));
        if (rc != -EINVAL)
            fail_msg("case %zu: %d, expected -EINVAL", i, rc);
        assert_true(gbs == -7);
        if (tu_count_log_lines(buf) != 1)
            fail_msg("case %zu: %d log lines:\n%s", i, tu_count_log_lines(buf),
                     buf);
    }
    char buf[4096];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_model_read_bw(pool, a, 0, NULL);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    double gbs = 0;
    assert_int_equal(ump_model_read_bw(pool, a, 3, &gbs), 0);
    assert_close(gbs, link_bw(pool, 3, 0));
    tu_free(pool, a);
    tu_pool_destroy(pool);
}

/* --- the built-ins on hand-made views ---------------------------------- */

struct hand {
    ump_place_view_t v;
    size_t free[UMP_MAX_DEVICES];
    ump_device_props_t props[UMP_MAX_DEVICES];
    ump_link_props_t links[UMP_MAX_DEVICES * UMP_MAX_DEVICES];
};

static const int kind_hops[] = {0, 1, 2, 3, 4};

/* ndev devices with free_each chunks, all joined by "sys" at 20 GB/s. */
static void hand_init(struct hand *h, int ndev, size_t free_each)
{
    memset(h, 0, sizeof(*h));
    for (int d = 0; d < ndev; d++) {
        h->free[d] = free_each;
        h->props[d].capacity = free_each * TU_CHUNK;
        for (int e = 0; e < ndev; e++)
            h->links[d * ndev + e] =
                d == e ? (ump_link_props_t){UMP_LINK_SELF, 1000, 0, true}
                       : (ump_link_props_t){UMP_LINK_SYS, 20, 4, true};
    }
    h->v = (ump_place_view_t){ndev, h->free, h->props, h->links};
}

static void hand_link(struct hand *h, int a, int b, int kind, double bw)
{
    ump_link_props_t l = {kind, bw, kind_hops[kind], true};
    h->links[a * h->v.ndev + b] = l;
    h->links[b * h->v.ndev + a] = l;
}

#define CANARY 0x7777

/* Runs p->place with cap parts (canaries after them) and checks the
 * interface's rules on success. */
static int hand_place(const ump_policy_t *p, void *st, const struct hand *h,
                      int dev, size_t chunks, unsigned flags, unsigned group,
                      ump_place_part_t *parts, size_t cap, size_t *np)
{
    ump_place_request_t req = {.size = chunks * TU_CHUNK,
                               .chunks = chunks,
                               .chunk_size = TU_CHUNK,
                               .device = dev,
                               .group = group,
                               .flags = flags};
    for (size_t i = 0; i < cap + 4; i++)
        parts[i] = (ump_place_part_t){CANARY, CANARY};
    size_t n = (size_t)-1;
    int rc = p->place(st, &req, &h->v, parts, cap, &n);
    for (size_t i = cap; i < cap + 4; i++)
        if (parts[i].device != CANARY || parts[i].chunks != CANARY)
            fail_msg("%s wrote part %zu, past its cap %zu", p->name, i, cap);
    if (rc) {
        if (rc != -ENOMEM)
            fail_msg("%s: %d, expected 0 or -ENOMEM", p->name, rc);
        return rc;
    }
    assert_true(n >= 1 && n <= cap);
    size_t used[UMP_MAX_DEVICES] = {0}, total = 0;
    for (size_t i = 0; i < n; i++) {
        int d = parts[i].device;
        assert_true(d >= 0 && d < h->v.ndev);
        assert_true(parts[i].chunks > 0);
        used[d] += parts[i].chunks;
        total += parts[i].chunks;
        if (used[d] > h->free[d])
            fail_msg("%s: %zu chunks of device %d, which has %zu", p->name,
                     used[d], d, h->free[d]);
    }
    assert_int_equal(total, chunks);
    *np = n;
    return 0;
}

static void assert_parts(const ump_place_part_t *parts, size_t np,
                         const ump_place_part_t *want, size_t nwant)
{
    assert_int_equal(np, nwant);
    for (size_t i = 0; i < np; i++) {
        if (parts[i].device != want[i].device ||
            parts[i].chunks != want[i].chunks)
            fail_msg("part %zu: {%d, %zu}, expected {%d, %zu}", i,
                     parts[i].device, parts[i].chunks, want[i].device,
                     want[i].chunks);
    }
}

static void test_direct_nearest_order(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 6, 10);
    hand_link(&h, 0, 1, UMP_LINK_PCIE, 25);
    hand_link(&h, 0, 2, UMP_LINK_NVLINK, 300);
    hand_link(&h, 0, 3, UMP_LINK_HOST, 25);
    hand_link(&h, 0, 5, UMP_LINK_PCIE, 25);
    /* bandwidth, then hops, then index */
    int order[UMP_MAX_DEVICES];
    assert_int_equal(pol_nearest(&h.v, 0, order), 5);
    const int want[] = {2, 1, 5, 3, 4};
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], want[i]);
    assert_int_equal(pol_nearest(&h.v, 4, order), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], i == 4 ? 5 : i); /* all alike */
}

static void test_direct_local(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 4, 5);
    hand_link(&h, 0, 2, UMP_LINK_NVLINK, 300);
    h.free[0] = 2;
    ump_place_part_t parts[16];
    size_t np;
    assert_int_equal(
        hand_place(&policy_local, NULL, &h, 0, 6, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{0, 2}, {2, 4}}, 2);
    assert_int_equal(
        hand_place(&policy_local, NULL, &h, 0, 2, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{0, 2}}, 1);
    assert_int_equal(hand_place(&policy_local, NULL, &h, 0, 3,
                                UMP_HINT_NO_SPILL, 0, parts, 8, &np),
                     -ENOMEM);
    /* a plan that would need more parts than allowed */
    assert_int_equal(
        hand_place(&policy_local, NULL, &h, 0, 6, 0, 0, parts, 1, &np),
        -ENOMEM);
    /* nothing anywhere */
    assert_int_equal(
        hand_place(&policy_local, NULL, &h, 1, 18, 0, 0, parts, 8, &np),
        -ENOMEM);
    h.free[0] = 0;
    assert_int_equal(
        hand_place(&policy_local, NULL, &h, 0, 3, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{2, 3}}, 1);
}

static void test_direct_balanced(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 4, 0);
    const size_t fr[] = {5, 7, 7, 3};
    memcpy(h.free, fr, sizeof(fr));
    ump_place_part_t parts[16];
    size_t np;
    /* a tie: the requesting device, else the lower index */
    assert_int_equal(
        hand_place(&policy_balanced, NULL, &h, 2, 3, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{2, 3}}, 1);
    assert_int_equal(
        hand_place(&policy_balanced, NULL, &h, 0, 3, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{1, 3}}, 1);
    assert_int_equal(
        hand_place(&policy_balanced, NULL, &h, 0, 10, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{1, 7}, {2, 3}}, 2);
    assert_int_equal(hand_place(&policy_balanced, NULL, &h, 0, 10,
                                UMP_HINT_NO_SPILL, 0, parts, 8, &np),
                     -ENOMEM);
}

static void test_direct_interleave_args(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 4, 100);
    const char *bad[] = {"4",  "0+0", "0*0",  "0*1025", "x",   "",
                         "-1", "0*",  "0**2", "1+x",    "0,1", "1 +2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        void *st = SENTINEL;
        if (policy_interleave.init(&h.v, bad[i], &st) != -EINVAL)
            fail_msg("interleave=%s accepted", bad[i]);
        assert_ptr_equal(st, SENTINEL);
    }
    void *st = NULL;
    assert_int_equal(policy_interleave.init(&h.v, "0*2+1", &st), 0);
    ump_place_part_t parts[16];
    size_t np;
    assert_int_equal(
        hand_place(&policy_interleave, st, &h, 1, 6, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np,
                 (ump_place_part_t[]){{1, 1}, {0, 2}, {1, 1}, {0, 2}}, 4);
    /* not enough parts allowed for the stripes */
    assert_int_equal(
        hand_place(&policy_interleave, st, &h, 1, 6, 0, 0, parts, 3, &np),
        -ENOMEM);
    policy_interleave.fini(st);
    st = NULL;
    assert_int_equal(policy_interleave.init(&h.v, "3*1024", &st), 0);
    assert_int_equal(
        hand_place(&policy_interleave, st, &h, 0, 50, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{3, 50}}, 1);
    policy_interleave.fini(st);
    /* no arguments: every device, one chunk each in turn */
    st = NULL;
    assert_int_equal(policy_interleave.init(&h.v, NULL, &st), 0);
    h.free[2] = 0;
    assert_int_equal(
        hand_place(&policy_interleave, st, &h, 3, 5, 0, 0, parts, 8, &np), 0);
    assert_parts(parts, np,
                 (ump_place_part_t[]){{3, 1}, {0, 1}, {1, 1}, {3, 1}, {0, 1}},
                 5);
    policy_interleave.fini(st);
}

static void test_direct_domain(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 5, 10);
    hand_link(&h, 0, 1, UMP_LINK_NVLINK, 300);
    hand_link(&h, 2, 3, UMP_LINK_NVLINK, 300);
    void *st = SENTINEL;
    assert_int_equal(policy_domain.init(&h.v, "x", &st), -EINVAL);
    assert_ptr_equal(st, SENTINEL);
    assert_int_equal(policy_domain.init(&h.v, NULL, &st), 0);
    ump_place_part_t parts[16];
    size_t np;
    /* group 1 starts on the lone device 4 */
    assert_int_equal(
        hand_place(&policy_domain, st, &h, 4, 3, 0, 1, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{4, 3}}, 1);
    h.free[4] -= 3;
    /* and stays there, whoever asks */
    assert_int_equal(
        hand_place(&policy_domain, st, &h, 0, 7, 0, 1, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{4, 7}}, 1);
    h.free[4] = 0;
    /* full: the rest spills, the requesting device first */
    assert_int_equal(
        hand_place(&policy_domain, st, &h, 0, 12, 0, 1, parts, 8, &np), 0);
    assert_parts(parts, np, (ump_place_part_t[]){{0, 10}, {1, 2}}, 2);
    assert_int_equal(hand_place(&policy_domain, st, &h, 0, 2, UMP_HINT_NO_SPILL,
                                1, parts, 8, &np),
                     -ENOMEM);
    /* group 2 too big for 0-1 (12 left) but not for 2-3: there, whole */
    h.free[0] = 2;
    assert_int_equal(
        hand_place(&policy_domain, st, &h, 0, 15, 0, 2, parts, 8, &np), 0);
    assert_true(parts[0].device == 2 || parts[0].device == 3);
    for (size_t i = 0; i < np; i++)
        assert_true(parts[i].device == 2 || parts[i].device == 3);
    policy_domain.fini(st);
}

static void test_direct_cost_model(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h, 3, 10);
    hand_link(&h, 0, 1, UMP_LINK_NVLINK, 300);
    size_t c[UMP_MAX_DEVICES] = {10, 0, 0};
    assert_close(cost_read_bw(&h.v, c, 0), 1000);
    c[0] = 0;
    c[1] = 10;
    assert_close(cost_read_bw(&h.v, c, 0), 300);
    c[0] = c[1] = c[2] = 10;
    assert_close(cost_read_bw(&h.v, c, 0),
                 30.0 / (10.0 / 300 + 10.0 / 20)); /* remote dominates */
    c[0] = 1000;
    c[1] = 1;
    c[2] = 0;
    assert_close(cost_read_bw(&h.v, c, 0), 1001.0 / (1000.0 / 1000));
    c[0] = c[1] = c[2] = 0;
    assert_close(cost_read_bw(&h.v, c, 0), 0);
}

/* Random views and requests: every built-in keeps to the interface (at
 * most cap parts, none empty, devices in range, counts adding up and within
 * what each device has) and, given room and parts enough, always finds a
 * plan (with the "local" policy's first part on the requesting device). */
static void test_direct_random_plans(void **state)
{
    (void)state;
    uint64_t rng = 42;
    ump_place_part_t parts[64 + 4];
    for (int iter = 0; iter < 3000; iter++) {
        struct hand h;
        int ndev = 1 + (int)(tu_rand(&rng) % 8);
        hand_init(&h, ndev, 0);
        size_t total = 0;
        for (int d = 0; d < ndev; d++) {
            h.free[d] = tu_rand(&rng) % 21;
            total += h.free[d];
            for (int e = d + 1; e < ndev; e++)
                if (tu_rand(&rng) % 3 == 0)
                    hand_link(&h, d, e, UMP_LINK_NVLINK,
                              100 + (double)(tu_rand(&rng) % 4) * 100);
                else if (tu_rand(&rng) % 2)
                    hand_link(&h, d, e, UMP_LINK_PCIE, 25);
        }
        int which = (int)(tu_rand(&rng) % 4);
        const ump_policy_t *p = pol_builtin((const char *[]){
            "local", "interleave", "balanced", "domain"}[which]);
        assert_non_null(p);
        void *st = NULL;
        if (p->init)
            assert_int_equal(p->init(&h.v, NULL, &st), 0);
        for (int k = 0; k < 4; k++) {
            int dev = (int)(tu_rand(&rng) % (uint64_t)ndev);
            size_t chunks = 1 + tu_rand(&rng) % 40;
            size_t cap = 1 + tu_rand(&rng) % 64;
            unsigned flags = tu_rand(&rng) % 4 == 0 ? UMP_HINT_NO_SPILL : 0;
            unsigned group = (unsigned)(tu_rand(&rng) % 3);
            size_t np = 0;
            int rc = hand_place(p, st, &h, dev, chunks, flags, group, parts,
                                cap, &np);
            if (rc && !flags && cap >= chunks && total >= chunks)
                fail_msg("iteration %d: %s refused %zu chunks with %zu free",
                         iter, p->name, chunks, total);
            if (!rc && which == 0 && h.free[dev])
                assert_int_equal(parts[0].device, dev);
        }
        if (p->fini)
            p->fini(st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_stays_on_requesting_device),
        cmocka_unit_test(test_local_spill_stays_in_nvlink_domain),
        cmocka_unit_test(test_local_spill_pcie_same_switch_first),
        cmocka_unit_test(test_local_spill_nvlink_pairs),
        cmocka_unit_test(test_no_spill_hint),
        cmocka_unit_test(test_spill_only_to_reachable_devices),
        cmocka_unit_test(test_two_numa_nodes),
        cmocka_unit_test(test_interleave_16g_dgx),
        cmocka_unit_test(test_interleave_starts_at_requesting_device),
        cmocka_unit_test(test_interleave_weights),
        cmocka_unit_test(test_interleave_full_devices),
        cmocka_unit_test(test_bad_policy_args),
        cmocka_unit_test(test_args_to_policy_without_args),
        cmocka_unit_test(test_balanced_emptiest_device),
        cmocka_unit_test(test_balanced_spills_to_next_emptiest),
        cmocka_unit_test(test_domain_group_stays_on_its_pair),
        cmocka_unit_test(test_domain_groups_on_different_pairs),
        cmocka_unit_test(test_domain_group_bigger_than_a_pair),
        cmocka_unit_test(test_domain_choice_by_cost_model),
        cmocka_unit_test(test_config_default_and_hints),
        cmocka_unit_test(test_plugin_example_by_hint),
        cmocka_unit_test(test_plugin_example_as_default),
        cmocka_unit_test(test_plugin_missing_symbol),
        cmocka_unit_test(test_plugin_wrong_version),
        cmocka_unit_test(test_plugin_not_loadable),
        cmocka_unit_test(test_plugin_bad_plans),
        cmocka_unit_test(test_plugin_bad_plan_too_many_chunks),
        cmocka_unit_test(test_plugin_instances_finalised),
        cmocka_unit_test(test_model_local_and_peer),
        cmocka_unit_test(test_model_interleaved_dgx),
        cmocka_unit_test(test_model_bad_args),
        cmocka_unit_test(test_direct_nearest_order),
        cmocka_unit_test(test_direct_local),
        cmocka_unit_test(test_direct_balanced),
        cmocka_unit_test(test_direct_interleave_args),
        cmocka_unit_test(test_direct_domain),
        cmocka_unit_test(test_direct_cost_model),
        cmocka_unit_test(test_direct_random_plans),
        /* last: under ASan its library bug ends the program */
        cmocka_unit_test(test_plugin_bad_plan_past_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
