/*
 * The cuda backend without a GPU: its messages and fallback when no driver
 * is usable, the CUDA error mapping, the sysfs readers on a fake tree, and,
 * through tests/fake_cuda.c (a fake driver emulating VMM on the CPU, found
 * through UMPOOL_FAKE_CUDA_LIB or UMPOOL_TEST_PLUGINS), whole pools on
 * backend:cuda, topology discovery and the driver checks. Without the fake
 * driver (no cuda.h at configure time) those tests are reported as skipped.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "testutil.h"
#include "fakecuda_util.h"

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "util/log.h"

#define NO_DRIVER "/nonexistent/libcuda.so.1"
#ifdef HAVE_CUDA_H
#define NO_DRIVER_TEXT "no CUDA driver"
#else
#define NO_DRIVER_TEXT "built without CUDA headers"
#endif

/* --- helpers ------------------------------------------------------------ */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Lines of captured text that contain needle. */
static int count_lines_with(const char *buf, const char *needle)
{
    int n = 0;

    for (const char *line = buf; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char tmp[2048];

        snprintf(tmp, sizeof(tmp), "%.*s", (int)len, line);
        if (strstr(tmp, needle))
            n++;
        if (!nl)
            break;
        line = nl + 1;
    }
    return n;
}

/* Creates a pool with stderr captured; returns the result and the text. */
static int create_captured(const char *conf, ump_pool_t **pool_p, char *buf,
                           size_t len)
{
    struct tu_capture cap;
    int rc;

    tu_capture_start(&cap);
    rc = ump_pool_create(conf, pool_p);
    tu_capture_stop(&cap, buf, len);
    return rc;
}

static int test_setup(void **state)
{
    (void)state;
    unsetenv("UMPOOL_FAKE_CUDA");
    return setenv("UMPOOL_CUDA_DRIVER", NO_DRIVER, 1);
}

/* --- no driver ------------------------------------------------------------ */

static void test_cuda_no_driver(void **state)
{
    (void)state;
    char buf[4096];
    ump_pool_t *pool = NULL;
    int fds = count_fds();

    int rc = create_captured("backend:cuda,log_level:debug", &pool, buf,
                             sizeof(buf));
    assert_int_equal(rc, -ENODEV);
    assert_null(pool);
    if (tu_count_log_lines(buf) != 1)
        fail_msg("want one log line, got:\n%s", buf);
    assert_int_equal(count_lines_with(buf, "umpool: error: backend cuda: "
                                           NO_DRIVER_TEXT), 1);
    assert_int_equal(count_fds(), fds);
    assert_non_null(strstr(cuda_unavailable_reason(), NO_DRIVER_TEXT));
}

static void test_auto_falls_back(void **state)
{
    (void)state;
    char buf[4096];
    ump_pool_t *pool = NULL;

    int rc = create_captured("backend:auto,log_level:info", &pool, buf,
                             sizeof(buf));
    assert_int_equal(rc, 0);
    assert_string_equal(ump_backend_name(pool), "sim");
    if (tu_count_log_lines(buf) != 1)
        fail_msg("want one log line, got:\n%s", buf);
    assert_int_equal(count_lines_with(buf, "umpool: info: "), 1);
    assert_int_equal(count_lines_with(buf, NO_DRIVER_TEXT), 1);
    tu_pool_destroy(pool);

    /* At the default level (warn) the fallback says nothing. */
    rc = create_captured("backend:auto", &pool, buf, sizeof(buf));
    assert_int_equal(rc, 0);
    assert_int_equal(tu_count_log_lines(buf), 0);
    tu_pool_destroy(pool);
}

#ifdef HAVE_CUDA_H
/* --- error mapping ------------------------------------------------------- */

static void test_errno_mapping(void **state)
{
    (void)state;
    static const struct {
        CUresult res;
        int err;
    } map[] = {
        {CUDA_SUCCESS, 0},
        {CUDA_ERROR_OUT_OF_MEMORY, -ENOMEM},
        {CUDA_ERROR_INVALID_VALUE, -EINVAL},
        {CUDA_ERROR_INVALID_HANDLE, -EINVAL},
        {CUDA_ERROR_NOT_SUPPORTED, -ENOTSUP},
        {CUDA_ERROR_NO_DEVICE, -ENODEV},
        {CUDA_ERROR_INVALID_DEVICE, -ENODEV},
        {CUDA_ERROR_NOT_INITIALIZED, -ENODEV},
        {CUDA_ERROR_DEINITIALIZED, -ENODEV},
        {CUDA_ERROR_NOT_PERMITTED, -EPERM},
        {CUDA_ERROR_NOT_READY, -EAGAIN},
        {CUDA_ERROR_ALREADY_MAPPED, -EEXIST},
        {CUDA_ERROR_ILLEGAL_ADDRESS, -EIO},
        {CUDA_ERROR_LAUNCH_FAILED, -EIO},
        {CUDA_ERROR_ECC_UNCORRECTABLE, -EIO},
        {CUDA_ERROR_UNKNOWN, -EIO},
        {(CUresult)12345, -EIO},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (cudrv_errno(map[i].res) != map[i].err)
            fail_msg("CUresult %d maps to %d, want %d", (int)map[i].res,
                     cudrv_errno(map[i].res), map[i].err);
}

#else
static void test_errno_mapping(void **state)
{
    (void)state;
    skip();
}
#endif

/* --- sysfs ---------------------------------------------------------------- */

static void test_busid_and_rates(void **state)
{
    (void)state;
    char out[32];
    double v = 0;

    assert_int_equal(cuda_pci_busid_norm("0000:1A:00.0", out, sizeof(out)),
                     0);
    assert_string_equal(out, "0000:1a:00.0");
    assert_int_equal(cuda_pci_busid_norm("00000000:AB:1F.3", out,
                                         sizeof(out)), 0);
    assert_string_equal(out, "0000:ab:1f.3");
    assert_int_equal(cuda_pci_busid_norm("10000:01:00.0", out, sizeof(out)),
                     0);
    assert_string_equal(out, "10000:01:00.0");
    assert_int_equal(cuda_pci_busid_norm("0000:1A:00", out, sizeof(out)),
                     -EINVAL);
    assert_int_equal(cuda_pci_busid_norm("0000:100:00.0", out, sizeof(out)),
                     -EINVAL);
    assert_int_equal(cuda_pci_busid_norm("0000:1a:00.0x", out, sizeof(out)),
                     -EINVAL);

    assert_int_equal(cuda_parse_gts("32.0 GT/s PCIe", &v), 0);
    assert_true(v == 32.0);
    assert_int_equal(cuda_parse_gts("2.5 GT/s", &v), 0);
    assert_true(v == 2.5);
    assert_int_equal(cuda_parse_gts("8 GT/s", &v), 0);
    assert_true(v == 8.0);
    assert_int_equal(cuda_parse_gts("Unknown", &v), -EINVAL);
    assert_int_equal(cuda_parse_gts("16.0 MB/s", &v), -EINVAL);
    assert_int_equal(cuda_parse_gts("", &v), -EINVAL);

    /* Gen 5 x16: 32 GT/s x 16 lanes x 128/130 / 8 bits. */
    assert_float_equal(cuda_pcie_gbs(32, 16), 32.0 * 16 * 128 / 130 / 8,
                       1e-9);
    assert_float_equal(cuda_pcie_gbs(16, 8), 16.0 * 8 * 128 / 130 / 8, 1e-9);
    /* Gen 2 x16: 8b/10b coding. */
    assert_float_equal(cuda_pcie_gbs(5, 16), 8.0, 1e-9);

    assert_float_equal(cuda_nvlink_link_gbs(1), 20, 0);
    assert_float_equal(cuda_nvlink_link_gbs(4), 25, 0);
    assert_float_equal(cuda_nvlink_link_gbs(6), 25, 0); /* NVLink 4.0 */
    assert_float_equal(cuda_nvlink_link_gbs(7), 50, 0); /* NVLink 5.0 */
    assert_float_equal(cuda_nvlink_link_gbs(0), 25, 0);
    /* H100/H200: 18 links of NVLink 4.0. */
    assert_float_equal(18 * cuda_nvlink_link_gbs(6), 450, 0);
}

/* A fake /sys for the fake driver's four devices: 0 and 1 behind one PCIe
 * switch (0's link capped by its switch port), 2 on another root port of
 * the same host bridge with no NUMA affinity, 3 on the other socket. */
struct fake_sys {
    char root[64];
};

static void put_file(const char *root, const char *rel, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_dirs(const char *root, const char *rel)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

static void put_device(const char *root, const char *dir, const char *busid,
                       const char *numa)
{
    char rel[PATH_MAX], link[PATH_MAX], target[PATH_MAX];

    snprintf(rel, sizeof(rel), "devices/%s", dir);
    make_dirs(root, rel);
    snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, busid);
    snprintf(target, sizeof(target), "../../../devices/%s", dir);
    assert_int_equal(symlink(target, link), 0);
    snprintf(rel, sizeof(rel), "devices/%s/numa_node", dir);
    put_file(root, rel, numa);
}

#define SW0 "pci0000:10/0000:10:01.0/0000:11:00.0"
#define DEV0 SW0 "/0000:12:00.0/0000:1a:00.0"
#define DEV1 SW0 "/0000:12:01.0/0000:2a:00.0"
#define DEV2 "pci0000:10/0000:10:02.0/0000:3a:00.0"
#define DEV3 "pci0000:80/0000:80:01.0/0000:4a:00.0"

static void fake_sys_make(struct fake_sys *fs)
{
    snprintf(fs->root, sizeof(fs->root), "/tmp/umpool-sysfs-XXXXXX");
    assert_non_null(mkdtemp(fs->root));
    make_dirs(fs->root, "bus/pci/devices");
    put_device(fs->root, DEV0, "0000:1a:00.0", "0\n");
    put_device(fs->root, DEV1, "0000:2a:00.0", "0\n");
    put_device(fs->root, DEV2, "0000:3a:00.0", "-1\n");
    put_device(fs->root, DEV3, "0000:4a:00.0", "1\n");
    put_device(fs->root, "pci0000:80/0000:80:02.0/0000:5a:00.0",
               "0000:5a:00.0", "node 1\n");

    /* Device 0: a gen 5 card, idle at 2.5 GT/s, behind a gen 4 port. */
    put_file(fs->root, "devices/" DEV0 "/max_link_speed", "32.0 GT/s PCIe\n");
    put_file(fs->root, "devices/" DEV0 "/max_link_width", "16\n");
    put_file(fs->root, "devices/" DEV0 "/current_link_speed",
             "2.5 GT/s PCIe\n");
    put_file(fs->root, "devices/" DEV0 "/current_link_width", "16\n");
    put_file(fs->root, "devices/" SW0 "/0000:12:00.0/max_link_speed",
             "16.0 GT/s PCIe\n");
    put_file(fs->root, "devices/" SW0 "/0000:12:00.0/max_link_width", "16\n");
    /* Device 1: gen 5 on a gen 5 port. */
    put_file(fs->root, "devices/" DEV1 "/max_link_speed", "32.0 GT/s PCIe\n");
    put_file(fs->root, "devices/" DEV1 "/max_link_width", "16\n");
    put_file(fs->root, "devices/" SW0 "/0000:12:01.0/max_link_speed",
             "32.0 GT/s PCIe\n");
    /* Device 2: only the current values (gen 3 x8). */
    put_file(fs->root, "devices/" DEV2 "/current_link_speed",
             "8.0 GT/s PCIe\n");
    put_file(fs->root, "devices/" DEV2 "/current_link_width", "8\n");
    /* Device 3: gen 5 x16, its port says nothing. */
    put_file(fs->root, "devices/" DEV3 "/max_link_speed", "32.0 GT/s PCIe\n");
    put_file(fs->root, "devices/" DEV3 "/max_link_width", "16\n");
}

static void fake_sys_remove(struct fake_sys *fs)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fs->root);
    assert_int_equal(system(cmd), 0);
}

static const double gen3x8 = 8.0 * 8 * 128 / 130 / 8;
static const double gen4x16 = 16.0 * 16 * 128 / 130 / 8;
static const double gen5x16 = 32.0 * 16 * 128 / 130 / 8;

/* cuda_topology_virtualize on a made-up machine (no driver needed): 3
 * GPUs with a long model name, 4 devices each; 9 x 4 is too many. */
static void test_virtualize_topology(void **state)
{
    (void)state;
    struct ump_topology *t = calloc(1, sizeof(*t));
    const char *long_model = "A-Very-Long-Model-Name-0123456789";

    assert_non_null(t);
    topo_make_uniform(t, 3, 64 * TU_MIB);
    snprintf(t->name, sizeof(t->name), "cuda-3xLong");
    for (int d = 0; d < 3; d++) {
        /* a model name that fills the field: cut, as the backend's own
         * copy of the driver's name would be */
        size_t m = sizeof(t->dev[d].model) - 1;
        memcpy(t->dev[d].model, long_model, m);
        t->dev[d].model[m] = '\0';
        snprintf(t->dev[d].pci, sizeof(t->dev[d].pci), "0000:%d0:00.0", d + 1);
        t->dev[d].numa = d;
    }
    t->link[0][2].bw_gbs = 12; /* one link to recognise */
    assert_int_equal(cuda_topology_virtualize(t, 1), 0);
    assert_int_equal(t->ndev, 3);
    assert_int_equal(cuda_topology_virtualize(t, 4), 0);
    assert_int_equal(t->ndev, 12);
    assert_string_equal(t->name, "cuda-3xLong-v4");
    for (int v = 0; v < 12; v++) {
        char suffix[8], pci[32];

        snprintf(suffix, sizeof(suffix), "/v%d", v % 4);
        snprintf(pci, sizeof(pci), "0000:%d0:00.0", v / 4 + 1);
        assert_int_equal(strlen(t->dev[v].model), 31);
        assert_string_equal(t->dev[v].model + 31 - strlen(suffix), suffix);
        assert_int_equal(strncmp(t->dev[v].model, long_model,
                                 31 - strlen(suffix)), 0);
        assert_string_equal(t->dev[v].pci, pci);
        assert_int_equal(t->dev[v].mem, 16 * TU_MIB);
        assert_int_equal(t->dev[v].numa, v / 4);
        for (int w = 0; w < 12; w++) {
            const struct topo_link *l = &t->link[v][w];

            assert_true(l->peer);
            if (v == w)
                assert_int_equal(l->kind, UMP_LINK_SELF);
            else if (v / 4 == w / 4)
                assert_true(l->kind == UMP_LINK_NVLINK && l->hops == 1 &&
                            l->bw_gbs == t->local_bw_gbs);
        }
    }
    assert_float_equal(t->link[1][9].bw_gbs, 12, 1e-9); /* GPU 0 -> 2 */
    /* Nearest first: the other three of the same GPU. */
    int order[11];
    assert_int_equal(topo_nearest(t, 5, order), 11);
    assert_int_equal(order[0], 4);
    assert_int_equal(order[1], 6);
    assert_int_equal(order[2], 7);

    char buf[4096];
    struct tu_capture cap;
    topo_make_uniform(t, 9, 64 * TU_MIB);
    tu_capture_start(&cap);
    int rc = cuda_topology_virtualize(t, 4);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(t->ndev, 9);
    free(t);
}

static void test_sysfs_tree(void **state)
{
    (void)state;
    struct fake_sys fs;
    char a[PATH_MAX], b[PATH_MAX];
    double gbs = 0;

    fake_sys_make(&fs);
    assert_int_equal(cuda_sysfs_numa_node(fs.root, "0000:1a:00.0"), 0);
    assert_int_equal(cuda_sysfs_numa_node(fs.root, "0000:3a:00.0"), 0);
    assert_int_equal(cuda_sysfs_numa_node(fs.root, "0000:4a:00.0"), 1);
    assert_int_equal(cuda_sysfs_numa_node(fs.root, "0000:5a:00.0"), -EINVAL);
    assert_int_equal(cuda_sysfs_numa_node(fs.root, "0000:ff:00.0"), -ENOENT);

    assert_int_equal(cuda_sysfs_link_gbs(fs.root, "0000:1a:00.0", &gbs), 0);
    assert_float_equal(gbs, gen4x16, 1e-9);
    assert_int_equal(cuda_sysfs_link_gbs(fs.root, "0000:2a:00.0", &gbs), 0);
    assert_float_equal(gbs, gen5x16, 1e-9);
    assert_int_equal(cuda_sysfs_link_gbs(fs.root, "0000:3a:00.0", &gbs), 0);
    assert_float_equal(gbs, gen3x8, 1e-9);
    assert_int_equal(cuda_sysfs_link_gbs(fs.root, "0000:4a:00.0", &gbs), 0);
    assert_float_equal(gbs, gen5x16, 1e-9);
    assert_int_equal(cuda_sysfs_link_gbs(fs.root, "0000:5a:00.0", &gbs),
                     -ENOENT);

    assert_int_equal(cuda_sysfs_pci_path(fs.root, "0000:1a:00.0", a,
                                         sizeof(a)), 0);
    assert_string_equal(a, DEV0);
    assert_int_equal(cuda_sysfs_pci_path(fs.root, "0000:2a:00.0", b,
                                         sizeof(b)), 0);
    assert_true(cuda_pci_same_switch(a, b));
    assert_int_equal(cuda_sysfs_pci_path(fs.root, "0000:3a:00.0", b,
                                         sizeof(b)), 0);
    assert_false(cuda_pci_same_switch(a, b));
    assert_int_equal(cuda_sysfs_pci_path(fs.root, "0000:4a:00.0", b,
                                         sizeof(b)), 0);
    assert_false(cuda_pci_same_switch(a, b));
    assert_int_equal(cuda_sysfs_pci_path(fs.root, "0000:ff:00.0", b,
                                         sizeof(b)), -ENOENT);
    /* Flat virtual machine buses: no root port in common, no switch. */
    assert_false(cuda_pci_same_switch("pci0000:00/0000:00:05.0",
                                      "pci0000:00/0000:00:06.0"));
    fake_sys_remove(&fs);
}

#ifdef HAVE_CUDA_H
/* --- the fake driver: no GPU usable ----------------------------------------*/

/* Nothing of a destroyed pool is left in the driver. */
static void assert_fake_clean(void)
{
    assert_int_equal(fake_count("allocs"), 0);
    assert_int_equal(fake_count("maps"), 0);
    assert_int_equal(fake_count("resvs"), 0);
    assert_int_equal(fake_count("ctx_refs"), 0);
    assert_int_equal(fake_count("streams"), 0);
    assert_int_equal(fake_count("events"), 0);
    assert_int_equal(fake_count("host_regs"), 0);
    assert_int_equal(fake_count("current"), 0);
    assert_int_equal(fake_count("hostfn_calls"), 0);
}


/* backend:cuda fails with err and one error line holding text; backend:auto
 * falls back to sim with one info line. Nothing stays in the driver. */
static void check_unusable(int err, const char *text)
{
    char buf[4096];
    ump_pool_t *pool = NULL;

    int rc = create_captured("backend:cuda,log_level:info", &pool, buf,
                             sizeof(buf));
    assert_int_equal(rc, err);
    assert_null(pool);
    if (tu_count_log_lines(buf) != 1 || count_lines_with(buf, text) != 1 ||
        count_lines_with(buf, "umpool: error: backend cuda: ") != 1)
        fail_msg("want one error line with '%s', got:\n%s", text, buf);

    rc = create_captured("backend:auto,log_level:info", &pool, buf,
                         sizeof(buf));
    assert_int_equal(rc, 0);
    assert_string_equal(ump_backend_name(pool), "sim");
    if (tu_count_log_lines(buf) != 1 || count_lines_with(buf, text) != 1 ||
        count_lines_with(buf, "umpool: info: ") != 1)
        fail_msg("want one info line with '%s', got:\n%s", text, buf);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

static void test_fake_old_driver(void **state)
{
    (void)state;
    use_fake("driver=11020");
    check_unusable(-ENOTSUP, "CUDA driver 11.2 is too old");
    use_fake("driver=10010");
    check_unusable(-ENOTSUP, "CUDA driver 10.1 is too old");
}

static void test_fake_no_device(void **state)
{
    (void)state;
    use_fake("devices=0");
    check_unusable(-ENODEV, "no CUDA device");
}

static void test_fake_no_vmm(void **state)
{
    (void)state;
    use_fake("devices=2,novmm");
    check_unusable(-ENOTSUP, "device 0 (NVIDIA Fake GPU) does not support "
                             "virtual memory management");
}

static void test_not_a_driver(void **state)
{
    (void)state;
    char buf[4096];
    ump_pool_t *pool = NULL;

    assert_int_equal(setenv("UMPOOL_CUDA_DRIVER", "libm.so.6", 1), 0);
    int rc = create_captured("backend:cuda", &pool, buf, sizeof(buf));
    assert_int_equal(rc, -ENODEV);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(count_lines_with(buf, "is not a CUDA driver"), 1);
}

/* --- the fake driver: whole pools --------------------------------------- */

static void test_fake_pool(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_device_props_t props;
    ump_link_props_t link;

    assert_string_equal(ump_backend_name(pool), "cuda");
    assert_int_equal(ump_device_count(pool), 2);
    assert_int_equal(ump_device_props(pool, 1, &props), 0);
    assert_string_equal(props.model, "Fake-GPU");
    assert_string_equal(props.pci_bus_id, "0000:2a:00.0");
    assert_int_equal(props.capacity, 64 * TU_MIB);
    assert_int_equal(ump_link_props(pool, 0, 1, &link), 0);
    assert_true(link.peer);
    assert_int_equal(ump_link_props(pool, 1, 1, &link), 0);
    assert_int_equal(link.kind, UMP_LINK_SELF);
    assert_float_equal(link.bandwidth_gbs, 64, 1e-9);
    /* The 12.0 ABI was asked for, and every chunk is shareable. */
    assert_int_equal(fake_count("abi"), 12000);
    assert_int_equal(fake_count("ctx_refs"), 2);

    const size_t sizes[] = {256, 4000, 100 * TU_KIB, 3 * TU_MIB,
                            20 * TU_MIB};
    void *p[5];
    long creates = fake_count("creates"), fds = fake_count("fd_creates");
    for (int i = 0; i < 5; i++) {
        p[i] = tu_alloc(pool, sizes[i], i % 2);
        tu_fill(p[i], sizes[i], 10 + (uint64_t)i);
        assert_int_equal(tu_info(pool, p[i]).device, i % 2);
    }
    for (int i = 0; i < 5; i++)
        tu_assert_pattern(p[i], sizes[i], 10 + (uint64_t)i);
    assert_true(fake_count("creates") > creates);
    assert_int_equal(fake_count("creates") - creates,
                     fake_count("fd_creates") - fds);
    assert_int_equal(fake_count("current"), 0);
    for (int i = 0; i < 5; i++)
        tu_free(pool, p[i]);

    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(st.chunks_created, (uint64_t)fake_count("allocs"));
    /* Driver time is measured around the VMM calls, for the pool as a
     * whole (a call may cover several devices' handles). */
    assert_true(st.driver_ns > 0);
    assert_int_equal(tu_stats(pool, 0).driver_ns, 0);
    assert_int_equal(tu_stats(pool, 1).driver_ns, 0);
    assert_int_equal(st.reserved_bytes,
                     tu_stats(pool, 0).reserved_bytes +
                         tu_stats(pool, 1).reserved_bytes);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(fake_count("allocs"), 0);
    assert_int_equal(fake_count("maps"), 0);
    /* Unmap and release were timed too; nothing is held any more. */
    ump_stats_t trimmed = tu_stats(pool, UMP_DEVICE_ALL);
    assert_true(trimmed.driver_ns > st.driver_ns);
    assert_int_equal(trimmed.reserved_bytes, 0);
    assert_true(trimmed.peak_reserved_bytes > 0);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* A pool with both tiers on the fake driver set up by fake, spilling into
 * a new directory made from the template dir. */
/* A pool on the fake driver with tiers, config extra added. */
static ump_pool_t *tiers_open_with(const char *fake, const char *extra,
                                   char *dir)
{
    char conf[320];
    use_fake(fake);
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "backend:cuda,max_chunk:2M,host_limit:64M,"
             "host_reserve:0,nvme_dir:%s%s", dir, extra);
    return tu_pool_create(conf);
}

static ump_pool_t *tiers_open(const char *fake, char *dir)
{
    return tiers_open_with(fake, "", dir);
}

/* Destroys it: nothing may be left in the driver or in dir. */
static void tiers_close(ump_pool_t *pool, char *dir)
{
    tu_pool_destroy(pool);
    assert_fake_clean();
    assert_int_equal(tu_count_entries(dir), 0);
    rmdir(dir);
}

/* Tiers on backend:cuda: chunks moved to HOST_NUMA chunks remapped at the
 * same address (readable there by the CPU), to NVMe, and back, under an
 * oversubscribed device; nothing is left in the driver or on disk. */
static void test_fake_tiers(void **state)
{
    (void)state;
    char dir[] = "/var/tmp/umpool-test-cuda-XXXXXX";
    /* host_cpu_access: the CPU reads the host tier at the pointer below */
    ump_pool_t *pool = tiers_open_with("devices=1,mem=32,hostmem=128",
                                       ",host_cpu_access:true", dir);
    /* the NVMe store's bounce buffers, page-locked for device copies */
    assert_int_equal(fake_count("host_regs"), 1);
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_OFFLOAD;
    enum { N = 6 }; /* 48 MiB through a 32 MiB device */
    void *t[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(ump_alloc(pool, 8 * TU_MIB, &h, &t[i]), 0);
        assert_int_equal(ump_acquire(pool, t[i], 0, 0, NULL), 0);
        tu_fill(t[i], 8 * TU_MIB, 40 + (uint64_t)i);
        assert_int_equal(ump_release(pool, t[i], 0), 0);
    }
    assert_true(fake_count("host_allocs") > 0);
    assert_int_equal(ump_evict(pool, t[0], 0, UMP_TIER_HOST), 0);
    assert_int_equal(tu_info(pool, t[0]).tier, UMP_TIER_HOST);
    tu_assert_pattern(t[0], 8 * TU_MIB, 40); /* the CPU, same pointer */
    assert_int_equal(ump_evict(pool, t[0], 0, UMP_TIER_NVME), 0);
    assert_int_equal(tu_info(pool, t[0]).tier, UMP_TIER_NVME);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            assert_int_equal(ump_acquire(pool, t[i], 0, 0, NULL), 0);
            assert_int_equal(tu_info(pool, t[i]).tier, UMP_TIER_DEVICE);
            tu_assert_pattern(t[i], 8 * TU_MIB, 40 + (uint64_t)i);
            assert_int_equal(ump_release(pool, t[i], 0), 0);
        }
    ump_stats_t st = tu_stats(pool, 0);
    assert_true(st.spill_count > 0 && st.restore_count > 0);
    for (int i = 0; i < N; i++)
        tu_free(pool, t[i]);
    tiers_close(pool, dir);
    assert_int_equal(fake_count("host_allocs"), 0);
}

/* May the CPU read the byte at p? write() says EFAULT rather than fault. */
static bool cpu_reads(const void *p)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    bool ok = write(fd[1], p, 1) == 1;
    close(fd[0]);
    close(fd[1]);
    return ok;
}

/* The host tier by default, on a driver as strict as a GPU's about the
 * CPU (nocpu): host-tier memory is mapped at the allocation's address for
 * the devices only (the CPU's mapping costs a move more than its copy),
 * yet every move, the disk I/O from the host tier included (done in the
 * tier's window), keeps every byte. With host_cpu_access the CPU reads it
 * at the pointer. */
static void test_fake_tiers_nocpu(void **state)
{
    (void)state;
    for (int cpu = 0; cpu < 2; cpu++) {
        char dir[] = "/var/tmp/umpool-test-cuda-XXXXXX";
        ump_pool_t *pool = tiers_open_with(
            "devices=1,mem=32,hostmem=128,nocpu",
            cpu ? ",host_cpu_access:true" : "", dir);
        ump_hints_t h = tu_hints(0);
        h.flags = UMP_HINT_OFFLOAD;
        enum { N = 6, SZ = 8 * TU_MIB }; /* 48 MiB through a 32 MiB device */
        void *t[N], *buf = malloc(SZ);
        assert_non_null(buf);
        for (int i = 0; i < N; i++) {
            assert_int_equal(ump_alloc(pool, SZ, &h, &t[i]), 0);
            assert_int_equal(ump_acquire(pool, t[i], 0, 0, NULL), 0);
            assert_false(cpu_reads(t[i])); /* device memory */
            tu_fill(buf, SZ, 60 + (uint64_t)i);
            assert_int_equal(tu_pool_copy(pool, t[i], buf, SZ), 0);
            assert_int_equal(ump_release(pool, t[i], 0), 0);
        }
        assert_int_equal(ump_evict(pool, t[0], 0, UMP_TIER_HOST), 0);
        assert_int_equal(tu_info(pool, t[0]).tier, UMP_TIER_HOST);
        assert_int_equal(cpu_reads(t[0]), cpu == 1);
        if (cpu)
            tu_assert_pattern(t[0], SZ, 60);
        memset(buf, 0, SZ); /* the devices read it there */
        assert_int_equal(tu_pool_copy(pool, buf, t[0], SZ), 0);
        tu_assert_pattern(buf, SZ, 60);
        assert_int_equal(ump_evict(pool, t[0], 0, UMP_TIER_NVME), 0);
        assert_int_equal(tu_info(pool, t[0]).tier, UMP_TIER_NVME);
        for (int round = 0; round < 2; round++)
            for (int i = 0; i < N; i++) {
                assert_int_equal(ump_acquire(pool, t[i], 0, 0, NULL), 0);
                memset(buf, 0, SZ);
                assert_int_equal(tu_pool_copy(pool, buf, t[i], SZ), 0);
                tu_assert_pattern(buf, SZ, 60 + (uint64_t)i);
                assert_int_equal(ump_release(pool, t[i], 0), 0);
            }
        ump_stats_t st = tu_stats(pool, 0);
        assert_true(st.spill_count > 0 && st.restore_count > 0);
        free(buf);
        for (int i = 0; i < N; i++)
            tu_free(pool, t[i]);
        tiers_close(pool, dir);
    }
}

/* Checkpoint, restore and suspend/resume on backend:cuda: device memory
 * goes through the store's bounce buffers and the device's copies (the
 * CPU gets no view of it), the restored pool reserves its old range with
 * cuMemAddressReserve's hint, and every byte comes back at its address:
 * device runs on both devices, slab objects, pinned host memory, an
 * offloadable run on the host tier and one on NVMe. */
static void test_fake_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/var/tmp/umpool-test-cuda-XXXXXX";
    ump_pool_t *pool = tiers_open("devices=2,mem=64,hostmem=256", dir);
    enum { N = 8 };
    void *p[N];
    size_t size[N] = {6 * TU_MIB, 4 * TU_MIB, 3000, 70000, 8192,
                      4 * TU_MIB, 4 * TU_MIB, 100};
    for (int i = 0; i < N; i++) {
        ump_hints_t h = tu_hints(i % 2);
        h.flags = i == 5 || i == 6 ? UMP_HINT_OFFLOAD : 0;
        int rc = i == 4 ? ump_host_alloc(pool, size[i], &p[i])
                        : ump_alloc(pool, size[i], &h, &p[i]);
        assert_int_equal(rc, 0);
        tu_fill(p[i], size[i], 500 + (uint64_t)i); /* fake: host memory */
    }
    assert_int_equal(ump_evict(pool, p[5], 0, UMP_TIER_HOST), 0);
    assert_int_equal(ump_evict(pool, p[6], 0, UMP_TIER_NVME), 0);
    char ck[sizeof(dir) + 16];
    snprintf(ck, sizeof(ck), "%s/pool.ckpt", dir);
    assert_int_equal(ump_pool_checkpoint(pool, ck), 0);
    assert_int_equal(ump_pool_suspend(pool, UMP_TIER_HOST), 0);
    assert_int_equal(tu_stats(pool, 0).reserved_bytes, 0);
    assert_int_equal(tu_stats(pool, 1).reserved_bytes, 0);
    assert_int_equal(ump_pool_resume(pool), 0);
    for (int i = 0; i < N; i++)
        if (i != 6) /* on NVMe: unmapped */
            tu_assert_pattern(p[i], size[i], 500 + (uint64_t)i);
    for (int i = 0; i < N; i++)
        assert_int_equal(i == 4 ? ump_host_free(pool, p[i])
                                : ump_free(pool, p[i]),
                         0);
    tu_pool_destroy(pool);
    assert_fake_clean();

    char conf[256];
    snprintf(conf, sizeof(conf), "nvme_dir:%s", dir);
    assert_int_equal(ump_pool_restore(ck, conf, &pool), 0);
    assert_string_equal(ump_backend_name(pool), "cuda");
    assert_int_equal(tu_info(pool, p[6]).tier, UMP_TIER_NVME);
    assert_int_equal(ump_acquire(pool, p[6], 0, 0, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(tu_info(pool, p[i]).size,
                         i == 4 ? 8192 : size[i]);
        tu_assert_pattern(p[i], size[i], 500 + (uint64_t)i);
    }
    assert_int_equal(ump_release(pool, p[6], 0), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(i == 4 ? ump_host_free(pool, p[i])
                                : ump_free(pool, p[i]),
                         0);
    unlink(ck);
    tiers_close(pool, dir);
}

/* More than one device holds: the allocation is stitched from both. */
/* A driver that refuses to page-lock the bounce buffers: the pool goes on
 * with them unlocked (slower copies), and device <-> NVMe moves still keep
 * every byte. */
static void test_fake_hostreg_refused(void **state)
{
    (void)state;
    char dir[] = "/var/tmp/umpool-test-cuda-XXXXXX";
    ump_pool_t *pool = tiers_open(
        "devices=1,mem=32,hostmem=128,fail=cuMemHostRegister:1:2", dir);
    assert_int_equal(fake_count("host_regs"), 0);
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_OFFLOAD;
    void *p;
    assert_int_equal(ump_alloc(pool, 8 * TU_MIB, &h, &p), 0);
    tu_fill(p, 8 * TU_MIB, 77);
    assert_int_equal(ump_evict(pool, p, 0, UMP_TIER_NVME), 0);
    assert_int_equal(tu_info(pool, p).tier, UMP_TIER_NVME);
    assert_int_equal(ump_acquire(pool, p, 0, 0, NULL), 0);
    tu_assert_pattern(p, 8 * TU_MIB, 77);
    assert_int_equal(ump_release(pool, p, 0), 0);
    tu_free(pool, p);
    tiers_close(pool, dir);
}

static void test_fake_stitch(void **state)
{
    (void)state;
    use_fake("devices=2,mem=16");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    size_t size = 24 * TU_MIB;
    void *p = tu_alloc(pool, size, 0);
    bool dev[2] = {false, false};

    for (size_t off = 0; off < size;) {
        ump_ptr_info_t info = tu_info(pool, (char *)p + off);
        assert_in_range(info.device, 0, 1);
        dev[info.device] = true;
        off = (size_t)((char *)info.chunk_base - (char *)p) + info.chunk_size;
    }
    assert_true(dev[0] && dev[1]);
    tu_fill(p, size, 77);
    tu_assert_pattern(p, size, 77);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* Filling the devices ends in -ENOMEM; the pool goes on working. */
static void test_fake_full(void **state)
{
    (void)state;
    use_fake("devices=2,mem=16");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_hints_t h = tu_hints(0);
    void *p[64], *q = NULL;
    int n = 0, rc;

    while (n < 64 && (rc = ump_alloc(pool, 2 * TU_MIB, &h, &p[n])) == 0)
        n++;
    assert_int_equal(rc, -ENOMEM);
    assert_int_equal(n, 16); /* 32 MiB in 2 MiB pieces */
    tu_free(pool, p[n - 1]);
    assert_int_equal(ump_alloc(pool, 2 * TU_MIB, &h, &q), 0);
    tu_fill(q, 2 * TU_MIB, 5);
    tu_assert_pattern(q, 2 * TU_MIB, 5);
    p[n - 1] = q;
    for (int i = 0; i < n; i++)
        tu_free(pool, p[i]);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* A driver failure in the middle of growing the pool: the call fails with
 * the mapped errno and one line naming the driver's error; nothing half
 * built stays, and the pool keeps working. */
static void check_fault(const char *mode, const char *name, int err)
{
    char buf[8192];
    struct tu_capture cap;
    void *p = NULL;

    use_fake(mode);
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    tu_capture_start(&cap);
    int rc = ump_alloc(pool, 24 * TU_MIB, NULL, &p);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, err);
    assert_null(p);
    if (count_lines_with(buf, name) != 1)
        fail_msg("want one line naming %s, got:\n%s", name, buf);
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(st.live_count, 0);
    assert_int_equal(fake_count("map_bytes"), (long)st.mapped_bytes);

    p = tu_alloc(pool, 8 * TU_MIB, 0);
    tu_fill(p, 8 * TU_MIB, 3);
    tu_assert_pattern(p, 8 * TU_MIB, 3);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

static void test_fake_faults(void **state)
{
    (void)state;
    /* 24 MiB on two devices of 16: two chunks, two mappings, two access
     * calls; the second of each fails. */
    check_fault("devices=2,mem=16,fail=cuMemMap:2:700",
                "CUDA_ERROR_ILLEGAL_ADDRESS", -EIO);
    check_fault("devices=2,mem=16,fail=cuMemSetAccess:2:1",
                "CUDA_ERROR_INVALID_VALUE", -EINVAL);
    check_fault("devices=2,mem=16,fail=cuMemCreate:2:999", "CUDA error 999",
                -EIO);
}

/* A GPU lost (the driver's CUDA_ERROR_ECC_UNCORRECTABLE on cuMemCreate):
 * the pool marks the device failed, and the allocation that met it goes
 * to the other one. */
static void test_fake_device_lost(void **state)
{
    (void)state;
    use_fake("devices=2,mem=16,fail=cuMemCreate:1:214");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    void *p = tu_alloc(pool, 4 * TU_MIB, 0);
    assert_int_equal(tu_info(pool, p).device, 1);
    assert_int_equal(tu_stats(pool, 0).failed_devices, 1);
    assert_int_equal(tu_stats(pool, 0).capacity, 0);
    assert_int_equal(tu_stats(pool, 1).failed_devices, 0);
    tu_fill(p, 4 * TU_MIB, 9);
    tu_assert_pattern(p, 4 * TU_MIB, 9);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* Shareable handles advertised but refused: chunks come without them. */
static void test_fake_no_fd(void **state)
{
    (void)state;
    use_fake("nofd");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    long fds = fake_count("fd_creates");
    void *p = tu_alloc(pool, 6 * TU_MIB, 0);

    tu_fill(p, 6 * TU_MIB, 9);
    tu_assert_pattern(p, 6 * TU_MIB, 9);
    assert_int_equal(fake_count("fd_creates"), fds);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* Without peer access each device gets access to its own memory only, and
 * stitching still works. */
static void test_fake_no_peer(void **state)
{
    (void)state;
    use_fake("devices=2,mem=16,nopeer");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_link_props_t link;

    assert_int_equal(ump_link_props(pool, 0, 1, &link), 0);
    assert_false(link.peer);
    /* device 1 cannot reach device 0's memory: nothing spills there */
    ump_hints_t h = UMP_HINTS_INIT;
    h.device = 1;
    void *q = NULL;
    assert_int_equal(ump_alloc(pool, 24 * TU_MIB, &h, &q), -ENOMEM);
    assert_null(q);
    void *p = tu_alloc(pool, 12 * TU_MIB, 1);
    assert_int_equal(tu_info(pool, p).device, 1);
    tu_fill(p, 12 * TU_MIB, 4);
    tu_assert_pattern(p, 12 * TU_MIB, 4);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

static void count_up(void *arg)
{
    (*(int *)arg)++;
}

/* --- cuda_virtual_devices --------------------------------------------- */

/* One fake GPU of 64 MiB shown as 4 devices: a quarter of the memory each,
 * the GPU's PCI id and NUMA node, a model telling them apart, peer links
 * at the GPU's own bandwidth; one context; chunks created on GPU 0 and
 * made accessible to it once whatever the pool's device list. */
static void test_fake_virtual(void **state)
{
    (void)state;
    use_fake("devices=1,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:4");
    ump_device_props_t props;
    ump_link_props_t link;
    char model[32];
    void *p[4];

    assert_string_equal(ump_backend_name(pool), "cuda");
    assert_int_equal(ump_device_count(pool), 4);
    assert_int_equal(fake_count("ctx_refs"), 1); /* one GPU, one context */
    for (int d = 0; d < 4; d++) {
        assert_int_equal(ump_device_props(pool, d, &props), 0);
        snprintf(model, sizeof(model), "Fake-GPU/v%d", d);
        assert_string_equal(props.model, model);
        assert_string_equal(props.pci_bus_id, "0000:1a:00.0");
        assert_int_equal(props.capacity, 16 * TU_MIB);
        for (int e = 0; e < 4; e++) {
            assert_int_equal(ump_link_props(pool, d, e, &link), 0);
            assert_true(link.peer);
            assert_float_equal(link.bandwidth_gbs, 64, 1e-9);
            assert_int_equal(link.kind,
                             d == e ? UMP_LINK_SELF : UMP_LINK_NVLINK);
        }
    }

    /* Placed on virtual device 3: created on GPU 0, accessible to the
     * GPU once (the pool names all four devices, which reach it). */
    long dups = fake_count("access_dups");
    p[3] = tu_alloc(pool, 12 * TU_MIB, 3);
    assert_int_equal(tu_info(pool, p[3]).device, 3);
    assert_int_equal(fake_count("last_dev_loc"), 0);
    assert_int_equal(fake_count("last_access_devs"), 1);
    tu_fill(p[3], 12 * TU_MIB, 31);
    for (int d = 0; d < 3; d++) {
        p[d] = tu_alloc(pool, 3 * TU_MIB, d);
        assert_int_equal(tu_info(pool, p[d]).device, d);
        assert_int_equal(fake_count("last_dev_loc"), 0);
        tu_fill(p[d], 3 * TU_MIB, 40 + (uint64_t)d);
    }
    assert_int_equal(fake_count("access_dups"), dups);
    tu_assert_pattern(p[3], 12 * TU_MIB, 31);

    /* A stream on each virtual device: copies between the devices' buffers
     * and a memset, all in the GPU's context. */
    for (int d = 0; d < 4; d++) {
        ump_stream_t s = NULL;
        int calls = 0;

        assert_int_equal(ump_stream_create(pool, d, &s), 0);
        assert_non_null(s);
        assert_int_equal(ump_memcpy_async(pool, p[(d + 1) % 4], p[d],
                                          TU_MIB, s), 0);
        assert_int_equal(ump_memset_async(pool, (char *)p[d] + TU_MIB, d,
                                          4096, s), 0);
        assert_int_equal(ump_launch_host_func(pool, s, count_up, &calls), 0);
        assert_int_equal(ump_stream_synchronize(pool, s), 0);
        assert_int_equal(calls, 1);
        assert_int_equal(memcmp(p[(d + 1) % 4], p[d], TU_MIB), 0);
        assert_int_equal(((unsigned char *)p[d])[TU_MIB + 4095], d);
        assert_int_equal(ump_free_async(pool, p[d], s), 0);
        assert_int_equal(ump_stream_destroy(pool, s), 0);
    }
    assert_int_equal(fake_count("current"), 0);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* Two GPUs, two devices each: 0 and 1 are GPU 0, 2 and 3 GPU 1. Links
 * across GPUs are the GPUs' own; access goes to each GPU once. */
static void test_fake_virtual_two_gpus(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *plain = tu_pool_create("backend:cuda,cuda_virtual_devices:1");
    ump_link_props_t phys, link;

    assert_int_equal(ump_link_props(plain, 0, 1, &phys), 0);
    tu_pool_destroy(plain);

    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:2");
    ump_device_props_t props;

    assert_int_equal(ump_device_count(pool), 4);
    assert_int_equal(fake_count("ctx_refs"), 2);
    assert_int_equal(ump_device_props(pool, 3, &props), 0);
    assert_string_equal(props.model, "Fake-GPU/v1");
    assert_string_equal(props.pci_bus_id, "0000:2a:00.0");
    assert_int_equal(props.capacity, 32 * TU_MIB);
    for (int a = 0; a < 2; a++) {
        for (int b = 2; b < 4; b++) {
            assert_int_equal(ump_link_props(pool, a, b, &link), 0);
            assert_int_equal(link.kind, phys.kind);
            assert_float_equal(link.bandwidth_gbs, phys.bandwidth_gbs, 1e-9);
            assert_int_equal(link.peer, phys.peer);
        }
    }
    assert_int_equal(ump_link_props(pool, 2, 3, &link), 0);
    assert_int_equal(link.kind, UMP_LINK_NVLINK);
    assert_true(link.peer);

    void *p = tu_alloc(pool, 4 * TU_MIB, 2);
    assert_int_equal(tu_info(pool, p).device, 2);
    assert_int_equal(fake_count("last_dev_loc"), 1);
    assert_int_equal(fake_count("last_access_devs"), 2); /* both GPUs */
    tu_fill(p, 4 * TU_MIB, 7);
    tu_assert_pattern(p, 4 * TU_MIB, 7);
    void *q = tu_alloc(pool, 4 * TU_MIB, 1);
    assert_int_equal(fake_count("last_dev_loc"), 0);
    tu_free(pool, q);
    tu_free(pool, p);
    assert_int_equal(fake_count("access_dups"), 0);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* More than UMP_MAX_DEVICES in all: -EINVAL, one line, nothing retained.
 * A value out of 1..8: the configuration's own error. Sim ignores it. */
static void test_fake_virtual_limits(void **state)
{
    (void)state;
    char buf[4096];
    ump_pool_t *pool = NULL;

    use_fake("devices=5,mem=16");
    int rc = create_captured("backend:cuda,cuda_virtual_devices:7", &pool,
                             buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_null(pool);
    if (tu_count_log_lines(buf) != 1 ||
        count_lines_with(buf, "cuda_virtual_devices:7 on 5 GPUs makes 35 "
                              "devices, more than the 32") != 1)
        fail_msg("want one line on the device limit, got:\n%s", buf);
    assert_fake_clean();

    /* 4 x 8 = 32 fits exactly. */
    use_fake("devices=4,mem=16");
    pool = tu_pool_create("backend:cuda,cuda_virtual_devices:8");
    assert_int_equal(ump_device_count(pool), 32);
    tu_pool_destroy(pool);
    assert_fake_clean();

    rc = create_captured("backend:cuda,cuda_virtual_devices:9", &pool, buf,
                         sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(count_lines_with(buf, "cuda_virtual_devices"), 1);

    pool = tu_pool_create("backend:sim,sim_devices:2,cuda_virtual_devices:4");
    assert_int_equal(ump_device_count(pool), 2);
    tu_pool_destroy(pool);
}

/* N = 1 is the default, and the pool is what it was: the GPU's model. */
static void test_fake_virtual_one(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:1");
    ump_device_props_t props;

    assert_int_equal(ump_device_count(pool), 2);
    assert_int_equal(ump_device_props(pool, 1, &props), 0);
    assert_string_equal(props.model, "Fake-GPU");
    assert_int_equal(props.capacity, 64 * TU_MIB);
    void *p = tu_alloc(pool, 4 * TU_MIB, 1);
    assert_int_equal(fake_count("last_dev_loc"), 1);
    assert_int_equal(fake_count("last_access_devs"), 2);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

static void test_fake_streams(void **state)
{
    (void)state;
    use_fake("devices=2,mem=32,evdelay=2");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_stream_t s1 = NULL;
    size_t size = 3 * TU_MIB;
    int calls = 0;

    assert_int_equal(ump_stream_create(pool, 1, &s1), 0);
    assert_non_null(s1);
    char *a = tu_alloc(pool, size, 0), *b = tu_alloc(pool, size, 1);
    char *host = malloc(size);
    assert_non_null(host);
    tu_fill(host, size, 21);
    assert_int_equal(ump_memcpy_async(pool, a, host, size, s1), 0);
    assert_int_equal(ump_memset_async(pool, b, 0x5a, size, s1), 0);
    assert_int_equal(ump_memcpy_async(pool, b + 100, a, 1000, NULL), 0);
    assert_int_equal(ump_launch_host_func(pool, s1, count_up, &calls), 0);
    assert_int_equal(ump_stream_synchronize(pool, s1), 0);
    assert_int_equal(ump_stream_synchronize(pool, NULL), 0);
    assert_int_equal(calls, 1);
    tu_assert_pattern(a, size, 21);
    assert_int_equal(memcmp(b + 100, a, 1000), 0);
    assert_int_equal((unsigned char)b[99], 0x5a);
    assert_int_equal((unsigned char)b[size - 1], 0x5a);

    /* Deferred frees: recorded on a stream of device 1, then the same
     * event (reused by the pool) on the default stream of device 0. */
    assert_int_equal(ump_free_async(pool, a, s1), 0);
    assert_int_equal(ump_free_async(pool, b, NULL), 0);
    void *c = tu_alloc(pool, size, 0);
    tu_fill(c, size, 22);
    assert_int_equal(ump_free_async(pool, c, s1), 0);
    assert_int_equal(fake_count("current"), 0);

    /* Only streams the pool made can be destroyed through it. */
    char buf[4096];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_stream_destroy(pool, (ump_stream_t)host);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(count_lines_with(buf, "not created by this pool"), 1);
    assert_int_equal(ump_stream_destroy(pool, s1), 0);
    free(host);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* A stream the caller leaves is destroyed at close. */
static void test_fake_stream_left(void **state)
{
    (void)state;
    use_fake("devices=1");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_stream_t s = NULL;

    assert_int_equal(ump_stream_create(pool, 0, &s), 0);
    assert_int_equal(fake_count("streams"), 1);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* ump_stream_wrap of a bad handle: rc, one log line (or none: -EEXIST),
 * *stream_p untouched, and the handle still not one of the pool's. */
static void expect_wrap_refused(ump_pool_t *pool, int device, void *native,
                                int rc_want, const char *text)
{
    char buf[4096];
    struct tu_capture cap;
    ump_stream_t w = (ump_stream_t)0x5a5a5a5a;

    tu_capture_start(&cap);
    int rc = ump_stream_wrap(pool, device, native, &w);
    tu_capture_stop(&cap, buf, sizeof(buf));
    if (rc != rc_want)
        fail_msg("ump_stream_wrap(device %d, %p) = %d, expected %d", device,
                 native, rc, rc_want);
    assert_ptr_equal(w, (ump_stream_t)0x5a5a5a5a);
    int lines = tu_count_log_lines(buf);
    if (lines != (text ? 1 : 0) || (text && !strstr(buf, text)))
        fail_msg("ump_stream_wrap(device %d, %p): want %s, got:\n%s",
                 device, native, text ? text : "no log line", buf);
}

/* Bad handles for ump_stream_wrap, and what the pool then says of them. */
static void expect_not_pools(ump_pool_t *pool, void *stream)
{
    char buf[4096];
    struct tu_capture cap;

    tu_capture_start(&cap);
    int rc = ump_stream_synchronize(pool, stream);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(count_lines_with(buf, "not created by this pool"), 1);
}

/* A stream the application made with the driver (PyTorch's side streams),
 * wrapped: every call that takes a stream accepts it; twice is -EEXIST;
 * handles that are no stream of the device's primary context are refused;
 * destroying it only unregisters it, and the native stream lives on, also
 * past the pool. */
static void test_fake_stream_wrap(void **state)
{
    (void)state;
    use_fake("devices=2,mem=32,evdelay=2");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    ump_pool_t *other = tu_pool_create("backend:cuda");
    CUstream n0 = fake_native_stream(0), n1 = fake_native_stream(1);
    ump_stream_t w = NULL, made = NULL;
    size_t size = 3 * TU_MIB;
    int calls = 0;

    expect_not_pools(pool, n0); /* as before: not the pool's */
    assert_int_equal(ump_stream_wrap(pool, 0, n0, &w), 0);
    assert_ptr_equal(w, n0);
    assert_int_equal(fake_count("streams"), 2); /* the pool made none */
    assert_int_equal(fake_count("current"), 0);

    /* Copies, sets, host functions, synchronize, deferred frees. */
    char *a = tu_alloc(pool, size, 0), *b = tu_alloc(pool, size, 0);
    char *host = malloc(size);
    assert_non_null(host);
    tu_fill(host, size, 31);
    assert_int_equal(ump_memcpy_async(pool, a, host, size, w), 0);
    assert_int_equal(ump_memset_async(pool, b, 0x6b, size, w), 0);
    assert_int_equal(ump_memcpy_async(pool, b + 100, a, 1000, w), 0);
    assert_int_equal(ump_launch_host_func(pool, w, count_up, &calls), 0);
    assert_int_equal(ump_stream_synchronize(pool, w), 0);
    assert_int_equal(calls, 1);
    tu_assert_pattern(a, size, 31);
    assert_int_equal(memcmp(b + 100, a, 1000), 0);
    assert_int_equal((unsigned char)b[99], 0x6b);
    long events = fake_count("events");
    assert_int_equal(ump_free_async(pool, a, w), 0);
    assert_true(fake_count("events") > events); /* recorded on n0 */
    /* Not yet done (evdelay): the memory is not handed out again. */
    char *c = tu_alloc(pool, size, 0);
    assert_ptr_not_equal(c, a);
    tu_free(pool, c);
    assert_int_equal(ump_free_async(pool, b, w), 0);
    assert_int_equal(fake_count("current"), 0);

    /* Twice, and a stream the pool made: -EEXIST, nothing logged. */
    expect_wrap_refused(pool, 0, n0, -EEXIST, NULL);
    expect_wrap_refused(pool, 1, n0, -EEXIST, NULL);
    assert_int_equal(ump_stream_create(pool, 0, &made), 0);
    expect_wrap_refused(pool, 0, made, -EEXIST, NULL);
    /* Another pool does not know it until it wraps it too. */
    expect_not_pools(other, n0);

    /* Handles that are not a stream of the device's primary context. */
    expect_wrap_refused(pool, 0, n1, -EINVAL, "not a stream of device 0");
    char junk[64] = {0};
    expect_wrap_refused(pool, 0, junk, -EINVAL, "cuStreamGetCtx");
    CUstream dead = fake_native_stream(0);
    assert_int_equal(fake_native_destroy(dead), CUDA_SUCCESS);
    expect_wrap_refused(pool, 0, dead, -EINVAL, "cuStreamGetCtx");
    expect_wrap_refused(pool, 0, CU_STREAM_LEGACY, -EINVAL,
                        "default stream's handle");
    expect_wrap_refused(pool, 0, CU_STREAM_PER_THREAD, -EINVAL,
                        "default stream's handle");
    expect_wrap_refused(pool, 0, NULL, -EINVAL, "native is NULL");
    expect_wrap_refused(pool, 2, n1, -EINVAL, "device 2 out of range");
    expect_wrap_refused(pool, -1, n1, -EINVAL, "device -1 out of range");
    for (size_t i = 0; i < 3; i++) {
        void *bad[] = {n1, junk, dead};
        expect_not_pools(pool, bad[i]);
    }
    assert_int_equal(ump_stream_wrap(pool, 0, n0, NULL), -EINVAL);
    assert_int_equal(ump_stream_wrap(NULL, 0, n0, &w), -EINVAL);
    /* Its own device's: accepted, and a collective runs on the two
     * wrapped streams, each its rank's device's (checked). */
    ump_stream_t w1 = NULL;
    assert_int_equal(ump_stream_wrap(pool, 1, n1, &w1), 0);
    assert_ptr_equal(w1, n1);
    ump_comm_t *comm = NULL;
    assert_int_equal(ump_comm_create(pool, 2, NULL, NULL, &comm), 0);
    int32_t *root = tu_alloc(pool, 64 * sizeof(int32_t), 0);
    void *rb[2] = {tu_alloc(pool, 64 * sizeof(int32_t), 0),
                   tu_alloc(pool, 64 * sizeof(int32_t), 1)};
    for (int i = 0; i < 64; i++)
        root[i] = 1000 + i;
    const void *send[2] = {root, rb[1]};
    const ump_stream_t st[2] = {n0, n1}, swapped[2] = {n1, n0};
    assert_int_equal(ump_broadcast(comm, send, rb, 64, UMP_INT32, 0, st), 0);
    assert_int_equal(ump_stream_synchronize(pool, n0), 0);
    assert_int_equal(ump_stream_synchronize(pool, n1), 0);
    assert_int_equal(memcmp(rb[1], root, 64 * sizeof(int32_t)), 0);
    char cbuf[4096];
    struct tu_capture ccap;
    tu_capture_start(&ccap);
    int crc = ump_broadcast(comm, send, rb, 64, UMP_INT32, 0, swapped);
    tu_capture_stop(&ccap, cbuf, sizeof(cbuf));
    assert_int_equal(crc, -EINVAL);
    assert_int_equal(tu_count_log_lines(cbuf), 1);
    assert_int_equal(count_lines_with(cbuf, "is a stream of device 1"), 1);
    assert_int_equal(ump_comm_destroy(comm), 0);
    tu_free(pool, root);
    tu_free(pool, rb[0]);
    tu_free(pool, rb[1]);

    /* Destroy unregisters: the driver's stream lives on, usable by the
     * application and wrappable again; the pool refuses it meanwhile. */
    assert_int_equal(ump_stream_synchronize(pool, w), 0);
    assert_int_equal(ump_stream_destroy(pool, w), 0);
    assert_int_equal(fake_count("streams"), 3); /* n0, n1, made */
    assert_int_equal(fake_native_sync(0, n0), CUDA_SUCCESS);
    expect_not_pools(pool, n0);
    char buf[4096];
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_stream_destroy(pool, n0);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(ump_stream_wrap(pool, 0, n0, &w), 0);
    assert_int_equal(ump_stream_wrap(other, 0, n0, &w), 0);
    assert_int_equal(ump_stream_synchronize(other, n0), 0);

    /* Left wrapped at the pools' end: they leave the native streams. */
    assert_int_equal(ump_stream_destroy(pool, made), 0);
    free(host);
    tu_pool_destroy(pool);
    tu_pool_destroy(other);
    assert_int_equal(fake_count("streams"), 2);
    assert_int_equal(fake_native_sync(0, n0), CUDA_SUCCESS);
    assert_int_equal(fake_native_sync(1, n1), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(n0), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(n1), CUDA_SUCCESS);
    assert_fake_clean();
}

/* Virtual devices share their GPU's context: a stream of it wraps as any
 * of them. */
static void test_fake_stream_wrap_virtual(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda,cuda_virtual_devices:2");
    assert_int_equal(ump_device_count(pool), 4);
    CUstream n0 = fake_native_stream(0), n1 = fake_native_stream(1);
    ump_stream_t w = NULL;

    assert_int_equal(ump_stream_wrap(pool, 1, n0, &w), 0);
    expect_wrap_refused(pool, 1, n1, -EINVAL, "not a stream of device 1");
    assert_int_equal(ump_stream_wrap(pool, 3, n1, &w), 0);
    assert_int_equal(ump_stream_synchronize(pool, n0), 0);
    assert_int_equal(ump_stream_synchronize(pool, n1), 0);
    assert_int_equal(ump_stream_destroy(pool, n0), 0);
    tu_pool_destroy(pool); /* n1 still wrapped: left to its owner */
    assert_int_equal(fake_native_destroy(n0), CUDA_SUCCESS);
    assert_int_equal(fake_native_destroy(n1), CUDA_SUCCESS);
    assert_fake_clean();
}

/* A device chunk's POSIX descriptor (cuMemExportToShareableHandle) is
 * imported as a chunk of the same GPU's memory, mapped elsewhere: one
 * memory at two addresses. A descriptor of another GPU's memory, no
 * chunk's, or a part of one is refused; a chunk made without a shareable
 * handle is -ENOTSUP. The driver holds nothing after the releases. */
static void test_fake_chunk_share(void **state)
{
    (void)state;
    const struct backend_ops *be = &cuda_backend_ops;
    struct ump_topology *topo = calloc(1, sizeof(*topo));
    struct ump_config cfg;
    void *ctx = NULL;
    ump_handle_t h, h2, hx;
    uint64_t off = 7;
    char *va, *vb;
    int fd = -1, devs[2] = {0, 1};

    assert_non_null(topo);
    for (int nofd = 0; nofd < 2; nofd++) {
        use_fake(nofd ? "devices=2,nofd" : "devices=2");
        conf_defaults(&cfg);
        cfg.backend = UMP_BACKEND_CUDA;
        assert_int_equal(be->open(&cfg, topo, &ctx), 0);
        size_t g = be->granularity(ctx, 1);
        assert_int_equal(be->reserve(ctx, 2 * g, 0, (void **)&va), 0);
        vb = va + g;
        assert_int_equal(be->chunk_create(ctx, 1, g, &h), 0);
        assert_int_equal(be->map(ctx, va, g, h), 0);
        assert_int_equal(be->set_access(ctx, va, g, devs, 2), 0);
        memset(va, 0x5c, g);
        if (nofd) {
            assert_int_equal(be->chunk_export(ctx, h, &fd, &off), -ENOTSUP);
        } else {
            assert_int_equal(be->chunk_export(ctx, h, &fd, &off), 0);
            assert_int_equal(off, 0);
            assert_int_equal(be->chunk_import(ctx, fd, 0, g, 0, &hx),
                             -EINVAL);
            assert_int_equal(be->chunk_import(ctx, fd, g / 2, g, 1, &hx),
                             -EINVAL);
            int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
            assert_int_equal(be->chunk_import(ctx, other, 0, g, 1, &hx),
                             -EINVAL);
            close(other);
            assert_int_equal(be->chunk_import(ctx, fd, 0, g, 1, &h2), 0);
            close(fd); /* the driver's handle keeps the memory */
            assert_int_equal(be->map(ctx, vb, g, h2), 0);
            assert_int_equal(be->set_access(ctx, vb, g, devs, 2), 0);
            assert_int_equal(vb[g - 1], 0x5c);
            vb[3] = 1;
            assert_int_equal(va[3], 1);
            assert_int_equal(be->unmap(ctx, vb, g), 0);
            assert_int_equal(be->chunk_release(ctx, h2), 0);
        }
        assert_int_equal(be->unmap(ctx, va, g), 0);
        assert_int_equal(be->chunk_release(ctx, h), 0);
        assert_int_equal(be->unreserve(ctx, va, 2 * g), 0);
        be->close(ctx);
        assert_fake_clean();
    }
    free(topo);
}

/* IPC handles on the driver: a pool's allocation (a run, a slab object)
 * opened by another pool (of this process: the fake driver's memory is
 * one per process), its chunks exported as POSIX descriptors and imported; without shareable
 * chunks the open says why. */
static void test_fake_ipc(void **state)
{
    (void)state;
    char dir[] = "/tmp/umpool-ipc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(setenv("XDG_RUNTIME_DIR", dir, 1), 0);
    for (int nofd = 0; nofd < 2; nofd++) {
        use_fake(nofd ? "devices=2,mem=64,nofd" : "devices=2,mem=64");
        ump_pool_t *a = tu_pool_create("backend:cuda");
        ump_pool_t *b = tu_pool_create("backend:cuda");
        ump_ipc_handle_t h;
        void *q = NULL;
        char *p = tu_alloc(a, 6 * TU_MIB, 1);
        tu_fill(p, 6 * TU_MIB, 7);
        assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
        if (nofd) {
            assert_int_equal(ump_ipc_open(b, &h, &q), -ENOTSUP);
            assert_null(q);
        } else {
            assert_int_equal(ump_ipc_open(b, &h, &q), 0);
            assert_ptr_not_equal(q, p);
            tu_assert_pattern(q, 6 * TU_MIB, 7);
            ((char *)q)[5] = 1;
            assert_int_equal(p[5], 1);
            assert_int_equal(ump_ipc_close(b, q), 0);
            /* A slab object: its slab's chunk travels, the pointer lands
             * inside it. */
            char *o = tu_alloc(a, 3000, 1);
            tu_fill(o, 3000, 9);
            assert_int_equal(ump_ipc_get_handle(a, o, &h), 0);
            assert_int_equal(ump_ipc_open(b, &h, &q), 0);
            tu_assert_pattern(q, 3000, 9);
            assert_int_equal(ump_ipc_close(b, q), 0);
            tu_free(a, o);
        }
        tu_free(a, p);
        tu_pool_destroy(b);
        tu_pool_destroy(a);
        assert_fake_clean();
    }
    unsetenv("XDG_RUNTIME_DIR");
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* An event follows its stream's context: recorded on a stream of device 1,
 * then on the default stream (device 0's context here), then back. */
static void test_fake_event_contexts(void **state)
{
    (void)state;
    const struct backend_ops *be = &cuda_backend_ops;
    struct ump_topology *topo = calloc(1, sizeof(*topo));
    struct ump_config cfg;
    void *ctx = NULL, *s1 = NULL, *ev = NULL;

    assert_non_null(topo);
    use_fake("devices=2,evdelay=1");
    conf_defaults(&cfg);
    cfg.backend = UMP_BACKEND_CUDA;
    assert_int_equal(be->open(&cfg, topo, &ctx), 0);
    assert_int_equal(topo->ndev, 2);
    assert_int_equal(be->stream_create(ctx, 1, &s1), 0);
    assert_int_equal(be->event_create(ctx, &ev), 0);
    assert_int_equal(be->event_query(ctx, ev), 0); /* never recorded */
    assert_int_equal(fake_count("events"), 0);

    void *streams[3] = {s1, NULL, s1};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(be->event_record(ctx, ev, streams[i]), 0);
        assert_int_equal(fake_count("events"), 1);
        assert_int_equal(be->event_query(ctx, ev), -EAGAIN);
        assert_int_equal(be->event_query(ctx, ev), 0);
    }
    /* cudaStreamPerThread and cudaStreamLegacy are default streams too. */
    assert_int_equal(be->event_record(ctx, ev, CU_STREAM_PER_THREAD), 0);
    assert_int_equal(be->event_query(ctx, ev), -EAGAIN);
    assert_int_equal(be->event_record(ctx, ev, CU_STREAM_LEGACY), 0);
    char byte = 1;
    assert_int_equal(be->memset_async(ctx, &byte, 0x33, 1,
                                      CU_STREAM_PER_THREAD), 0);
    assert_int_equal(be->stream_sync(ctx, CU_STREAM_LEGACY), 0);
    assert_int_equal(byte, 0x33);
    assert_int_equal(be->event_sync(ctx, ev), 0);
    assert_int_equal(be->event_query(ctx, ev), 0);
    assert_int_equal(fake_count("current"), 0);

    /* Left for close, as the pool leaves its events. */
    void *ev2 = NULL;
    assert_int_equal(be->event_create(ctx, &ev2), 0);
    assert_int_equal(be->event_record(ctx, ev2, s1), 0);
    assert_int_equal(be->event_destroy(ctx, ev), 0);
    assert_int_equal(fake_count("events"), 1);
    assert_int_equal(be->stream_destroy(ctx, s1), 0);
    be->close(ctx);
    free(topo);
    assert_fake_clean();
}

struct worker {
    ump_pool_t *pool;
    uint64_t seed;
    int failed;
    long current; /* the thread's current context at its end */
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    uint64_t r = w->seed;

    for (int i = 0; i < 200 && !w->failed; i++) {
        size_t size = 64 + tu_rand(&r) % (3 * TU_MIB);
        ump_hints_t h = tu_hints((int)(tu_rand(&r) % 2));
        void *p = NULL;

        if (ump_alloc(w->pool, size, &h, &p) || !p) {
            w->failed = 1;
            break;
        }
        tu_fill(p, size < 4096 ? size : 4096, (uint64_t)i);
        if (tu_check(p, size < 4096 ? size : 4096, (uint64_t)i) !=
                (size < 4096 ? size : 4096) ||
            ump_free(w->pool, p))
            w->failed = 2;
    }
    w->current = fake_count("current");
    return NULL;
}

/* Threads allocating at once: every driver call finds its context, and
 * every thread's current context is put back. */
static void test_fake_threads(void **state)
{
    (void)state;
    use_fake("devices=2,mem=64");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    pthread_t th[4];
    struct worker w[4];

    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){pool, 100 + (uint64_t)i, 0, -1};
        assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].failed, 0);
        assert_int_equal(w[i].current, 0);
    }
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* backend:auto takes the GPU when there is one, silently. */
static void test_fake_auto(void **state)
{
    (void)state;
    char buf[4096];
    ump_pool_t *pool = NULL;

    use_fake("devices=1");
    assert_int_equal(create_captured("backend:auto", &pool, buf, sizeof(buf)),
                     0);
    assert_string_equal(ump_backend_name(pool), "cuda");
    assert_int_equal(tu_count_log_lines(buf), 0);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* In a forked child the inherited pool is dropped without a driver call. */
static void test_fake_fork(void **state)
{
    (void)state;
    use_fake("devices=2");
    ump_pool_t *pool = tu_pool_create("backend:cuda");
    void *p = tu_alloc(pool, 4 * TU_MIB, 0), *q = NULL;
    int status = 0;

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The refusal below logs a line: not for the test's output. */
        if (!freopen("/dev/null", "w", stderr))
            _exit(101);
        int bad = ump_alloc(pool, 100, NULL, &q) != -ENOTRECOVERABLE;
        bad |= ump_pool_destroy(pool) != 0;
        _exit(bad ? 100 : (int)fake_count("child_calls"));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    tu_fill(p, 4 * TU_MIB, 8);
    tu_assert_pattern(p, 4 * TU_MIB, 8);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* --- the fake driver: pinned host chunks --------------------------------- */

struct backend {
    const struct backend_ops *be;
    struct ump_topology *topo;
    void *ctx;
};

static void backend_open(struct backend *b, const char *mode)
{
    struct ump_config cfg;

    use_fake(mode);
    b->be = &cuda_backend_ops;
    b->topo = calloc(1, sizeof(*b->topo));
    b->ctx = NULL;
    assert_non_null(b->topo);
    conf_defaults(&cfg);
    cfg.backend = UMP_BACKEND_CUDA;
    assert_int_equal(b->be->open(&cfg, b->topo, &b->ctx), 0);
}

static void backend_close(struct backend *b)
{
    b->be->close(b->ctx);
    free(b->topo);
    assert_fake_clean();
}

/* Logs of one host_chunk_create, which returns rc. */
static void check_host_create(struct backend *b, int node, size_t size,
                              int rc, const char *text)
{
    char buf[4096];
    struct tu_capture cap;
    ump_handle_t h = 0;

    tu_capture_start(&cap);
    int got = b->be->host_chunk_create(b->ctx, node, size, &h);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(got, rc);
    if (rc == 0) {
        assert_int_equal(b->be->chunk_release(b->ctx, h), 0);
        return;
    }
    assert_int_equal(h, 0);
    if (tu_count_log_lines(buf) != (text ? 1 : 0) ||
        (text && count_lines_with(buf, text) != 1))
        fail_msg("want %s '%s', got:\n%s", text ? "one line with" : "no line",
                 text ? text : "", buf);
}

static void test_fake_host_chunks(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    int devs[2] = {0, 1};
    ump_handle_t h0, h1, hd;
    char *va, buf[4096];
    struct tu_capture cap;

    backend_open(&b, "devices=2,mem=16,hostmem=8,nopeer");
    const struct backend_ops *be = b.be;
    int nnuma = b.topo->nnuma;
    long creates = fake_count("creates"), fds = fake_count("fd_creates");

    /* Refused before the driver is asked. */
    check_host_create(&b, nnuma, 2 * M, -EINVAL, "no NUMA node");
    check_host_create(&b, -2, 2 * M, -EINVAL, "no NUMA node");
    check_host_create(&b, 0, 0, -EINVAL, "granularity");
    check_host_create(&b, 0, M, -EINVAL, "granularity");
    assert_int_equal(fake_count("creates"), creates);

    /* On a node, shareable like device chunks; without one, the driver
     * wants no handle type. */
    assert_int_equal(be->host_chunk_create(b.ctx, 0, 4 * M, &h0), 0);
    assert_int_equal(fake_count("fd_creates"), fds + 1);
    assert_int_equal(be->host_chunk_create(b.ctx, -1, 2 * M, &h1), 0);
    assert_int_equal(fake_count("fd_creates"), fds + 1);
    assert_int_equal(fake_count("host_allocs"), 2);
    assert_int_equal(fake_count("host_bytes"), (long)(6 * M));
    /* The host tier full: not an error worth a line. */
    check_host_create(&b, 0, 4 * M, -ENOMEM, NULL);
    assert_int_equal(be->chunk_create(b.ctx, 1, 2 * M, &hd), 0);

    assert_int_equal(be->reserve(b.ctx, 16 * M, 0, (void **)&va), 0);
    assert_int_equal(be->map(b.ctx, va, 4 * M, h0), 0);
    assert_int_equal(be->map(b.ctx, va + 4 * M, 2 * M, h1), 0);
    assert_int_equal(be->map(b.ctx, va + 8 * M, 2 * M, hd), 0);
    /* Every device reaches host memory, peers or not, and the CPU too; one
     * call per location type (HOST_NUMA h0, HOST h1), as cuda.h wants the
     * CPU named by the allocation's own type. */
    assert_int_equal(be->set_access_host(b.ctx, va, 4 * M, devs, 2), 0);
    assert_int_equal(be->set_access_host(b.ctx, va + 4 * M, 2 * M, devs, 2),
                     0);
    tu_fill(va, 6 * M, 31);
    assert_int_equal(be->set_access(b.ctx, va, 6 * M, devs, 2), 0);
    assert_int_equal(be->set_access_host(b.ctx, va, 4 * M, NULL, 0), 0);
    assert_int_equal(be->set_access_host(b.ctx, va + 4 * M, 2 * M, NULL, 0),
                     0);
    /* Host access to a device's memory is the driver's to refuse. */
    tu_capture_start(&cap);
    int rc = be->set_access_host(b.ctx, va + 8 * M, 2 * M, devs + 1, 1);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -EINVAL);
    if (tu_count_log_lines(buf) != 1 ||
        count_lines_with(buf, "CUDA_ERROR_INVALID_VALUE") != 1)
        fail_msg("want one line naming the driver's error, got:\n%s", buf);
    assert_int_equal(be->set_access_host(b.ctx, va, 6 * M, devs, 3),
                     -EINVAL);

    /* A second view of h0 shows the same memory. */
    assert_int_equal(be->map(b.ctx, va + 12 * M, 4 * M, h0), 0);
    assert_int_equal(be->set_access_host(b.ctx, va + 12 * M, 4 * M, devs, 2),
                     0);
    tu_assert_pattern(va + 12 * M, 4 * M, 31);
    strcpy(va + 12 * M + 5, "both");
    assert_string_equal(va + 5, "both");
    assert_int_equal(fake_count("current"), 0);

    /* Released and unmapped, the host memory goes back: all of it can be
     * had again. */
    assert_int_equal(be->chunk_release(b.ctx, h0), 0);
    assert_int_equal(be->chunk_release(b.ctx, h1), 0);
    assert_int_equal(be->chunk_release(b.ctx, hd), 0);
    assert_int_equal(be->unmap(b.ctx, va, 6 * M), 0);
    assert_int_equal(fake_count("host_bytes"), (long)(4 * M));
    assert_int_equal(be->unmap(b.ctx, va + 8 * M, 2 * M), 0);
    assert_int_equal(be->unmap(b.ctx, va + 12 * M, 4 * M), 0);
    assert_int_equal(fake_count("host_bytes"), 0);
    check_host_create(&b, nnuma - 1, 8 * M, 0, NULL);
    assert_int_equal(be->unreserve(b.ctx, va, 16 * M), 0);
    backend_close(&b);
}

/* The driver's side: granularity, shareable handles refused, the CPU named
 * by another location type, failures, and drivers before 12.2. */
static void test_fake_host_driver(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    ump_handle_t h, hd;
    char *va;

    backend_open(&b, "hostgran=4");
    long creates = fake_count("creates");
    check_host_create(&b, 0, 2 * M, -EINVAL, "granularity 4194304");
    check_host_create(&b, -1, 6 * M, -EINVAL, "granularity 4194304");
    assert_int_equal(fake_count("creates"), creates);
    check_host_create(&b, 0, 4 * M, 0, NULL);
    backend_close(&b);

    backend_open(&b, "nofd");
    long fds = fake_count("fd_creates");
    check_host_create(&b, 0, 2 * M, 0, NULL);
    check_host_create(&b, 0, 2 * M, 0, NULL);
    assert_int_equal(fake_count("fd_creates"), fds);
    backend_close(&b);

    /* A driver that wants HOST for the CPU even on HOST_NUMA memory: the
     * chunk's own type is tried first, then the other, on every call (not
     * learnt pool-wide: another chunk may be of the other type). */
    backend_open(&b, "cpuhost");
    assert_int_equal(b.be->reserve(b.ctx, 4 * M, 0, (void **)&va), 0);
    assert_int_equal(b.be->host_chunk_create(b.ctx, 0, 2 * M, &h), 0);
    assert_int_equal(b.be->chunk_create(b.ctx, 0, 2 * M, &hd), 0);
    assert_int_equal(b.be->map(b.ctx, va, 2 * M, h), 0);
    assert_int_equal(b.be->map(b.ctx, va + 2 * M, 2 * M, hd), 0);
    long calls = fake_count("set_access_calls");
    assert_int_equal(b.be->set_access_host(b.ctx, va, 2 * M, (int[]){0}, 1),
                     0);
    assert_int_equal(fake_count("set_access_calls"), calls + 2);
    assert_int_equal(b.be->set_access_host(b.ctx, va, 2 * M, (int[]){0}, 1),
                     0);
    assert_int_equal(fake_count("set_access_calls"), calls + 4);
    va[0] = 1;
    assert_int_equal(b.be->set_access_host(b.ctx, va + 2 * M, 2 * M,
                                           (int[]){0}, 1), -EINVAL);
    assert_int_equal(b.be->unmap(b.ctx, va, 4 * M), 0);
    assert_int_equal(b.be->chunk_release(b.ctx, h), 0);
    assert_int_equal(b.be->chunk_release(b.ctx, hd), 0);
    assert_int_equal(b.be->unreserve(b.ctx, va, 4 * M), 0);
    backend_close(&b);

    backend_open(&b, "fail=cuMemCreate:1:2");
    check_host_create(&b, 0, 2 * M, -ENOMEM, NULL);
    backend_close(&b);
    backend_open(&b, "fail=cuMemCreate:1:999");
    check_host_create(&b, 0, 2 * M, -EIO, "CUDA error 999");
    backend_close(&b);

    backend_open(&b, "driver=12010");
    check_host_create(&b, 0, 2 * M, -ENOTSUP, "needs 12.2");
    assert_int_equal(b.be->set_access_host(b.ctx, NULL, 2 * M, NULL, 0),
                     -ENOTSUP);
    backend_close(&b);
}

/* GPU readiness 1: the host tier is gated per device on the driver's
 * HOST_NUMA_ / HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED attributes, not on
 * the driver's version: where a device says 0, host chunks of that type
 * are -ENOTSUP without asking cuMemCreate, and why is said once. */
static void test_fake_host_gate(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    const char *numa_attr =
        "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED";

    /* The second device lacks it (the first has it): the whole host
     * tier's node chunks go, and why names the second device. */
    backend_open(&b, "devices=2,nohostnuma=1");
    long creates = fake_count("creates");
    check_host_create(&b, 0, 2 * M, -ENOTSUP,
                      "device 1 (NVIDIA Fake GPU) does not support pinned "
                      "host memory on a NUMA node");
    check_host_create(&b, 0, 2 * M, -ENOTSUP, NULL); /* said once */
    assert_int_equal(fake_count("creates"), creates);
    check_host_create(&b, -1, 2 * M, 0, NULL); /* HOST still supported */
    backend_close(&b);

    backend_open(&b, "nohostvmm");
    creates = fake_count("creates");
    check_host_create(&b, -1, 2 * M, -ENOTSUP,
                      "CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_"
                      "SUPPORTED: is 0");
    check_host_create(&b, -1, 2 * M, -ENOTSUP, NULL);
    assert_int_equal(fake_count("creates"), creates);
    check_host_create(&b, 0, 2 * M, 0, NULL);
    backend_close(&b);

    backend_open(&b, "nohostnuma,nohostvmm");
    check_host_create(&b, 0, 2 * M, -ENOTSUP, numa_attr);
    assert_int_equal(b.be->set_access_host(b.ctx, NULL, 2 * M, NULL, 0),
                     -ENOTSUP);
    backend_close(&b);

    /* The plain form: every device says 0; why names the first. */
    backend_open(&b, "devices=2,nohostnuma");
    check_host_create(&b, 0, 2 * M, -ENOTSUP,
                      "device 0 (NVIDIA Fake GPU) does not support pinned "
                      "host memory on a NUMA node");
    backend_close(&b);
}

/* A driver that has host memory in VMM (12.2) but predates the attributes
 * that say so per device answers CUDA_ERROR_INVALID_VALUE to them: support
 * is unknown, not refused, and the driver's version decides (on). */
static void test_fake_host_gate_old_driver(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    ump_handle_t h;

    for (int i = 0; i < 2; i++) {
        backend_open(&b, i ? "driver=13000,devices=2"
                           : "driver=12020,devices=2");
        long creates = fake_count("creates");
        check_host_create(&b, 0, 2 * M, 0, NULL);
        check_host_create(&b, -1, 2 * M, 0, NULL);
        assert_int_equal(fake_count("creates"), creates + 2);
        assert_int_equal(b.be->host_chunk_create(b.ctx, 0, 2 * M, &h), 0);
        assert_int_equal(fake_count("last_host_node"), 0);
        assert_int_equal(b.be->chunk_release(b.ctx, h), 0);
        backend_close(&b);
    }

    /* 12.4 knows HOST_NUMA's attribute, not HOST's: a 0 from the first
     * still turns node chunks off; HOST stays on the version's word. */
    backend_open(&b, "driver=12040,devices=2,nohostnuma=1");
    check_host_create(&b, 0, 2 * M, -ENOTSUP, "device 1 (");
    check_host_create(&b, -1, 2 * M, 0, NULL);
    backend_close(&b);
}

/* The host tier of a pool whose device refuses host chunks: an eviction
 * to the host is -ENOTSUP, the data stays on the device intact, and the
 * pool goes on and closes clean. */
static void test_fake_host_gate_pool(void **state)
{
    (void)state;
    char buf[8192];
    ump_pool_t *pool = NULL;
    void *p;

    use_fake("devices=1,mem=32,hostmem=64,nohostnuma,nohostvmm");
    assert_int_equal(ump_pool_create("backend:cuda,host_limit:32M", &pool),
                     0);
    ump_hints_t h = tu_hints(0);
    h.flags = UMP_HINT_OFFLOAD;
    assert_int_equal(ump_alloc(pool, 4 * TU_MIB, &h, &p), 0);
    assert_int_equal(ump_acquire(pool, p, 0, 0, NULL), 0);
    tu_fill(p, 4 * TU_MIB, 77);
    assert_int_equal(ump_release(pool, p, 0), 0);
    struct tu_capture cap;
    tu_capture_start(&cap);
    int rc = ump_evict(pool, p, 0, UMP_TIER_HOST);
    int rc2 = ump_evict(pool, p, 0, UMP_TIER_HOST);
    tu_capture_stop(&cap, buf, sizeof(buf));
    assert_int_equal(rc, -ENOTSUP);
    assert_int_equal(rc2, -ENOTSUP);
    if (count_lines_with(buf, "the host tier is off") != 1)
        fail_msg("want the host tier's reason once, got:\n%s", buf);
    assert_int_equal(tu_info(pool, p).tier, UMP_TIER_DEVICE);
    assert_int_equal(ump_acquire(pool, p, 0, 0, NULL), 0);
    tu_assert_pattern(p, 4 * TU_MIB, 77);
    assert_int_equal(ump_release(pool, p, 0), 0);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_fake_clean();
}

/* A fake sysfs tree of host NUMA nodes only: node 0 with memory, node 1
 * without (the GPU's), node 2 with memory and nearer node 1 than node 0. */
static void fake_nodes_make(struct fake_sys *fs)
{
    snprintf(fs->root, sizeof(fs->root), "/tmp/umpool-sysfs-XXXXXX");
    assert_non_null(mkdtemp(fs->root));
    make_dirs(fs->root, "devices/system/node/node0");
    make_dirs(fs->root, "devices/system/node/node1");
    make_dirs(fs->root, "devices/system/node/node2");
    put_file(fs->root, "devices/system/node/node0/meminfo",
             "Node 0 MemTotal:       16384 kB\nNode 0 MemFree: 1 kB\n");
    put_file(fs->root, "devices/system/node/node1/meminfo",
             "Node 1 MemTotal:           0 kB\nNode 1 MemFree: 0 kB\n");
    put_file(fs->root, "devices/system/node/node2/meminfo",
             "Node 2 MemTotal:        8192 kB\n");
    put_file(fs->root, "devices/system/node/node0/distance", "10 20 30\n");
    put_file(fs->root, "devices/system/node/node1/distance", "20 10 15\n");
    put_file(fs->root, "devices/system/node/node2/distance", "30 15 10\n");
}

/* GPU readiness 2: the device's host node comes from the driver's
 * HOST_NUMA_ID, and host chunks for a node without memory are created on
 * the nearest node with memory (cuMemCreate on a memoryless HOST_NUMA node
 * crashes drivers before r595), said once. */
static void test_fake_host_memoryless_node(void **state)
{
    (void)state;
    struct fake_sys fs;
    struct backend b;
    const size_t M = TU_MIB;
    char buf[4096];
    ump_handle_t h;

    assert_int_equal(cuda_sysfs_node_has_memory("/nonexistent", 0), -ENOENT);
    fake_nodes_make(&fs);
    assert_int_equal(cuda_sysfs_node_has_memory(fs.root, 0), 1);
    assert_int_equal(cuda_sysfs_node_has_memory(fs.root, 1), 0);
    assert_int_equal(cuda_sysfs_node_has_memory(fs.root, 3), 0);
    assert_int_equal(cuda_sysfs_node_distance(fs.root, 1, 2), 15);
    assert_int_equal(cuda_sysfs_node_distance(fs.root, 1, 3), -1);
    assert_int_equal(setenv("UMPOOL_SYSFS_ROOT", fs.root, 1), 0);
    int level = log_get_level();
    log_set_level(UMP_LOG_INFO);

    backend_open(&b, "hostnuma=1");
    assert_int_equal(b.topo->dev[0].numa, 1);
    assert_true(b.topo->nnuma >= 2);
    for (int i = 0; i < 2; i++) {
        struct tu_capture cap;
        tu_capture_start(&cap);
        int rc = b.be->host_chunk_create(b.ctx, 1, 2 * M, &h);
        tu_capture_stop(&cap, buf, sizeof(buf));
        assert_int_equal(rc, 0);
        assert_int_equal(fake_count("last_host_node"), 2); /* nearest */
        if (count_lines_with(buf, "node 1 has no memory") != (i == 0) ||
            tu_count_log_lines(buf) != (i == 0))
            fail_msg("want one line the first time only, got:\n%s", buf);
        assert_int_equal(b.be->chunk_release(b.ctx, h), 0);
    }
    /* A node with memory is taken as asked. */
    assert_int_equal(b.be->host_chunk_create(b.ctx, 0, 2 * M, &h), 0);
    assert_int_equal(fake_count("last_host_node"), 0);
    assert_int_equal(b.be->chunk_release(b.ctx, h), 0);
    backend_close(&b);

    /* A meminfo that cannot be read, or says no MemTotal, is unknown, not
     * "no memory": the node keeps its chunks. A FIFO is refused at once
     * (no wait for a writer), a directory too. */
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/devices/system/node/node1/meminfo",
             fs.root);
    assert_int_equal(unlink(fifo), 0);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_true(cuda_sysfs_node_has_memory(fs.root, 1) < 0);
    assert_true(cuda_sysfs_node_has_memory(fs.root, 1) != -ENOENT);
    assert_int_equal(unlink(fifo), 0);
    assert_int_equal(mkdir(fifo, 0755), 0);
    assert_true(cuda_sysfs_node_has_memory(fs.root, 1) < 0);
    assert_int_equal(rmdir(fifo), 0);
    put_file(fs.root, "devices/system/node/node1/meminfo",
             "Node 1 MemFree: 0 kB\n");
    assert_int_equal(cuda_sysfs_node_has_memory(fs.root, 1), -ENODATA);
    make_dirs(fs.root, "devices/system/node/node3");
    assert_true(cuda_sysfs_node_has_memory(fs.root, 3) < 0);
    assert_true(cuda_sysfs_node_has_memory(fs.root, 3) != -ENOENT);
    assert_int_equal(cuda_sysfs_node_has_memory(fs.root, 4), 0);

    backend_open(&b, "hostnuma=1");
    {
        struct tu_capture cap;
        tu_capture_start(&cap);
        int rc = b.be->host_chunk_create(b.ctx, 1, 2 * M, &h);
        tu_capture_stop(&cap, buf, sizeof(buf));
        assert_int_equal(rc, 0);
        assert_int_equal(fake_count("last_host_node"), 1); /* kept */
        if (tu_count_log_lines(buf) != 0)
            fail_msg("want no line, got:\n%s", buf);
        assert_int_equal(b.be->chunk_release(b.ctx, h), 0);
    }
    backend_close(&b);

    log_set_level(level);
    unsetenv("UMPOOL_SYSFS_ROOT");
    fake_sys_remove(&fs);
}

/* GPU readiness 3: the CPU's access descriptor has the location type of
 * the host chunk it is for (cuda.h refuses HOST_NUMA access to HOST
 * memory), from the first call on and whatever chunk came before. */
static void test_fake_cpu_access_type(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    ump_handle_t hn, hh;
    char *va;

    backend_open(&b, "devices=1");
    assert_int_equal(b.be->reserve(b.ctx, 4 * M, 0, (void **)&va), 0);
    assert_int_equal(b.be->host_chunk_create(b.ctx, 0, 2 * M, &hn), 0);
    assert_int_equal(b.be->host_chunk_create(b.ctx, -1, 2 * M, &hh), 0);
    assert_int_equal(b.be->map(b.ctx, va, 2 * M, hn), 0);
    assert_int_equal(b.be->map(b.ctx, va + 2 * M, 2 * M, hh), 0);
    long calls = fake_count("set_access_calls");
    long refused = fake_count("cpu_refused");
    for (int round = 0; round < 2; round++) {
        assert_int_equal(b.be->set_access_host(b.ctx, va + 2 * M, 2 * M,
                                               (int[]){0}, 1), 0);
        assert_int_equal(fake_count("last_cpu_type"),
                         CU_MEM_LOCATION_TYPE_HOST);
        assert_int_equal(b.be->set_access_host(b.ctx, va, 2 * M, NULL, 0),
                         0);
        assert_int_equal(fake_count("last_cpu_type"),
                         CU_MEM_LOCATION_TYPE_HOST_NUMA);
    }
    /* One call each, none refused. */
    assert_int_equal(fake_count("set_access_calls"), calls + 4);
    assert_int_equal(fake_count("cpu_refused"), refused);
    va[0] = 1;
    va[2 * M] = 2;
    assert_int_equal(b.be->unmap(b.ctx, va, 4 * M), 0);
    assert_int_equal(b.be->chunk_release(b.ctx, hn), 0);
    assert_int_equal(b.be->chunk_release(b.ctx, hh), 0);
    assert_int_equal(b.be->unreserve(b.ctx, va, 4 * M), 0);
    backend_close(&b);
}

/* --- the fake driver: reserve_at ----------------------------------------- */

/* reserve_at through the backend, with stderr captured into buf. */
static int reserve_at_captured(struct backend *b, void *va, size_t size,
                               size_t align, char *buf, size_t len)
{
    struct tu_capture cap;

    tu_capture_start(&cap);
    int rc = b->be->reserve_at(b->ctx, va, size, align);
    tu_capture_stop(&cap, buf, len);
    return rc;
}

static void assert_taken_line(const char *buf, const void *va, size_t size)
{
    char want[128];

    snprintf(want, sizeof(want), "cuda: reserve_at: [%p, +%zu) is taken", va,
             size);
    if (tu_count_log_lines(buf) != 1 || count_lines_with(buf, want) != 1)
        fail_msg("want one line with '%s', got:\n%s", want, buf);
}

/* The range a reservation had, given back, is had again exactly; a range
 * the driver would place elsewhere (a reservation still held, a mapping of
 * the process) is -EADDRINUSE with one line, and the range it offered goes
 * back. */
static void test_fake_reserve_at(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    int dev = 0;
    ump_handle_t h;
    char buf[4096], *va, *raw, *q;

    backend_open(&b, "devices=1");
    const struct backend_ops *be = b.be;
    assert_non_null(be->reserve_at);

    assert_int_equal(be->reserve(b.ctx, 8 * M, 0, (void **)&va), 0);
    assert_int_equal(be->unreserve(b.ctx, va, 8 * M), 0);
    assert_int_equal(be->reserve_at(b.ctx, va, 8 * M, 0), 0);
    assert_int_equal(fake_count("resvs"), 1);
    assert_int_equal(be->chunk_create(b.ctx, 0, 4 * M, &h), 0);
    assert_int_equal(be->map(b.ctx, va + 4 * M, 4 * M, h), 0);
    assert_int_equal(be->set_access(b.ctx, va + 4 * M, 4 * M, &dev, 1), 0);
    assert_int_equal(be->memset_async(b.ctx, va + 4 * M, 9, 4 * M, NULL), 0);
    assert_int_equal(be->stream_sync(b.ctx, NULL), 0);

    /* Taken by the reservation itself, whole or in part. */
    assert_int_equal(reserve_at_captured(&b, va, 8 * M, 0, buf, sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, va, 8 * M);
    assert_int_equal(reserve_at_captured(&b, va + 4 * M, 8 * M, 0, buf,
                                         sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, va + 4 * M, 8 * M);
    assert_int_equal(fake_count("resvs"), 1);
    /* Misaligned: refused before the driver is asked. */
    assert_int_equal(reserve_at_captured(&b, va + 4096, 8 * M, 0, buf,
                                         sizeof(buf)),
                     -EINVAL);
    assert_int_equal(tu_count_log_lines(buf), 1);
    assert_int_equal(be->reserve_at(b.ctx, NULL, 8 * M, 0), -EINVAL);
    assert_int_equal(fake_count("resvs"), 1);

    assert_int_equal(be->unmap(b.ctx, va + 4 * M, 4 * M), 0);
    assert_int_equal(be->chunk_release(b.ctx, h), 0);
    assert_int_equal(be->unreserve(b.ctx, va, 8 * M), 0);

    /* Over an ordinary mapping of the process, which stays as it was. */
    raw = mmap(NULL, 6 * M, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(raw != MAP_FAILED);
    q = (char *)(((uintptr_t)raw + 2 * M - 1) & ~(uintptr_t)(2 * M - 1));
    tu_fill(q, 4 * M, 17);
    assert_int_equal(reserve_at_captured(&b, q, 4 * M, 0, buf, sizeof(buf)),
                     -EADDRINUSE);
    assert_taken_line(buf, q, 4 * M);
    tu_assert_pattern(q, 4 * M, 17);
    assert_int_equal(fake_count("resvs"), 0);
    assert_int_equal(munmap(raw, 6 * M), 0);
    backend_close(&b);
}

/* A reservation the driver may place goes first to the window of
 * backend/va_window.c (at 32 TiB; under TSan its own), the same in every
 * process, so that another process finds the range free: two held at once
 * never touch (a guard between them). A driver that takes no hints still
 * gives a range, and every range it offered for a hint goes back. */
static void test_fake_reserve_window(void **state)
{
    (void)state;
    struct backend b;
    const size_t M = TU_MIB;
    const uintptr_t G = (uintptr_t)1 << 30;
    char *va, *vb;

    backend_open(&b, "devices=1");
    assert_int_equal(b.be->reserve(b.ctx, 8 * M, 0, (void **)&va), 0);
    assert_int_equal(b.be->reserve(b.ctx, 8 * M, 0, (void **)&vb), 0);
    /* 32 slots of 1 TiB from 32 TiB, a few candidates from the first:
     * below 65 TiB, where the kernel puts nothing of its own choosing. */
    for (int i = 0; !TU_UNDER_TSAN && i < 2; i++) {
        uintptr_t at = (uintptr_t)(i ? vb : va);
        assert_true(at >= (uintptr_t)32 << 40 && at < (uintptr_t)65 << 40);
    }
    uintptr_t lo = (uintptr_t)(va < vb ? va : vb);
    uintptr_t hi = (uintptr_t)(va < vb ? vb : va);
    assert_true(hi - lo >= 8 * M + G);
    assert_int_equal(fake_count("resvs"), 2);
    assert_int_equal(b.be->unreserve(b.ctx, va, 8 * M), 0);
    assert_int_equal(b.be->unreserve(b.ctx, vb, 8 * M), 0);
    backend_close(&b);

    backend_open(&b, "devices=1,nohint");
    assert_int_equal(b.be->reserve(b.ctx, 8 * M, 0, (void **)&va), 0);
    assert_non_null(va);
    assert_int_equal(fake_count("resvs"), 1);
    assert_int_equal(b.be->unreserve(b.ctx, va, 8 * M), 0);
    backend_close(&b);
}

/* --- the fake driver: topology discovery -------------------------------- */

struct opened {
    struct cudrv_api api;
    CUcontext ctx[4];
    int ndev;
};

static void open_fake(struct opened *o, const char *mode, int ndev)
{
    char why[256];

    use_fake(mode);
    assert_int_equal(cudrv_load(fake_path(), &o->api, why, sizeof(why)),
                     0);
    assert_int_equal(o->api.cuInit(0), CUDA_SUCCESS);
    o->ndev = ndev;
    for (int d = 0; d < ndev; d++)
        assert_int_equal(o->api.cuDevicePrimaryCtxRetain(&o->ctx[d], d),
                         CUDA_SUCCESS);
}

static void close_fake(struct opened *o)
{
    for (int d = 0; d < o->ndev; d++)
        assert_int_equal(o->api.cuDevicePrimaryCtxRelease(d), CUDA_SUCCESS);
    dlclose(o->api.lib);
}

static void assert_link(const struct ump_topology *t, int a, int b, int kind,
                        double gbs)
{
    const struct topo_link *l = &t->link[a][b];

    if (l->kind != kind || l->bw_gbs < gbs - 1e-9 || l->bw_gbs > gbs + 1e-9 ||
        l->hops != kind || !l->peer)
        fail_msg("link %d -> %d: kind %d at %.3f GB/s, %d hops, peer %d; "
                 "want kind %d at %.3f GB/s", a, b, l->kind, l->bw_gbs,
                 l->hops, l->peer, kind, gbs);
}

static void test_fake_topology_pcie(void **state)
{
    (void)state;
    struct fake_sys fs;
    struct opened o;
    struct ump_topology *t = calloc(1, sizeof(*t));

    assert_non_null(t);
    open_fake(&o, "devices=4,mem=64", 4);
    fake_sys_make(&fs);
    assert_int_equal(cuda_topology_discover(&o.api, 4, o.ctx, fs.root,
                                            "/nonexistent/libnvidia-ml.so.1",
                                            t), 0);
    assert_string_equal(t->name, "cuda-4xFake-GPU");
    assert_string_equal(t->source, "discovered");
    assert_int_equal(t->ndev, 4);
    assert_true(t->nnuma >= 2);
    assert_float_equal(t->local_bw_gbs, 64, 1e-9);
    const int numa[4] = {0, 0, 0, 1};
    const char *pci[4] = {"0000:1a:00.0", "0000:2a:00.0", "0000:3a:00.0",
                          "0000:4a:00.0"};
    for (int d = 0; d < 4; d++) {
        assert_string_equal(t->dev[d].model, "Fake-GPU");
        assert_string_equal(t->dev[d].pci, pci[d]);
        assert_int_equal(t->dev[d].mem, 64 * TU_MIB);
        assert_int_equal(t->dev[d].numa, numa[d]);
        assert_link(t, d, d, UMP_LINK_SELF, 64);
    }
    assert_link(t, 0, 1, UMP_LINK_PCIE, gen4x16);
    assert_link(t, 1, 0, UMP_LINK_PCIE, gen4x16);
    assert_link(t, 0, 2, UMP_LINK_HOST, gen3x8);
    assert_link(t, 1, 2, UMP_LINK_HOST, gen3x8);
    assert_link(t, 0, 3, UMP_LINK_SYS, gen4x16);
    assert_link(t, 1, 3, UMP_LINK_SYS, gen5x16);
    assert_link(t, 3, 2, UMP_LINK_SYS, gen3x8);
    /* What the pool sees is what a topology file gives. */
    int order[3];
    assert_int_equal(topo_nearest(t, 1, order), 3);
    assert_int_equal(order[0], 3); /* 63 GB/s beats 31.5 */
    fake_sys_remove(&fs);
    close_fake(&o);
    free(t);
    assert_fake_clean();
}

static void test_fake_topology_nvlink(void **state)
{
    (void)state;
    struct fake_sys fs;
    struct opened o;
    struct ump_topology *t = calloc(1, sizeof(*t));

    assert_non_null(t);
    fake_sys_make(&fs);

    /* Every GPU on an NVSwitch with 18 links of NVLink 4.0: 450 GB/s. */
    open_fake(&o, "devices=4,nvswitch=18", 4);
    assert_int_equal(cuda_topology_discover(&o.api, 4, o.ctx, fs.root,
                                            fake_path(), t), 0);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            if (a != b)
                assert_link(t, a, b, UMP_LINK_NVLINK, 450);
    close_fake(&o);

    /* Pairs bridged by 4 links of NVLink 5.0; the rest over PCIe. */
    open_fake(&o, "devices=4,nvpair=4,nvver=7", 4);
    assert_int_equal(cuda_topology_discover(&o.api, 4, o.ctx, fs.root,
                                            fake_path(), t), 0);
    assert_link(t, 0, 1, UMP_LINK_NVLINK, 200);
    assert_link(t, 2, 3, UMP_LINK_NVLINK, 200);
    assert_link(t, 0, 2, UMP_LINK_HOST, gen3x8);
    assert_link(t, 1, 3, UMP_LINK_SYS, gen5x16);
    close_fake(&o);

    fake_sys_remove(&fs);
    free(t);
    assert_fake_clean();
}

#else /* without cuda.h there is no fake driver */
NO_FAKE(test_not_a_driver)
NO_FAKE(test_fake_old_driver)
NO_FAKE(test_fake_no_device)
NO_FAKE(test_fake_no_vmm)
NO_FAKE(test_fake_pool)
NO_FAKE(test_fake_stitch)
NO_FAKE(test_fake_full)
NO_FAKE(test_fake_faults)
NO_FAKE(test_fake_device_lost)
NO_FAKE(test_fake_no_fd)
NO_FAKE(test_fake_no_peer)
NO_FAKE(test_fake_streams)
NO_FAKE(test_fake_stream_left)
NO_FAKE(test_fake_stream_wrap)
NO_FAKE(test_fake_stream_wrap_virtual)
NO_FAKE(test_fake_event_contexts)
NO_FAKE(test_fake_chunk_share)
NO_FAKE(test_fake_ipc)
NO_FAKE(test_fake_threads)
NO_FAKE(test_fake_auto)
NO_FAKE(test_fake_fork)
NO_FAKE(test_fake_host_chunks)
NO_FAKE(test_fake_host_driver)
NO_FAKE(test_fake_host_gate)
NO_FAKE(test_fake_host_gate_old_driver)
NO_FAKE(test_fake_host_gate_pool)
NO_FAKE(test_fake_host_memoryless_node)
NO_FAKE(test_fake_cpu_access_type)
NO_FAKE(test_fake_reserve_at)
NO_FAKE(test_fake_reserve_window)
NO_FAKE(test_fake_tiers)
NO_FAKE(test_fake_tiers_nocpu)
NO_FAKE(test_fake_hostreg_refused)
NO_FAKE(test_fake_checkpoint)
NO_FAKE(test_fake_topology_pcie)
NO_FAKE(test_fake_topology_nvlink)
NO_FAKE(test_fake_virtual)
NO_FAKE(test_fake_virtual_two_gpus)
NO_FAKE(test_fake_virtual_limits)
NO_FAKE(test_fake_virtual_one)
#endif /* HAVE_CUDA_H */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_cuda_no_driver, test_setup),
        cmocka_unit_test_setup(test_auto_falls_back, test_setup),
        cmocka_unit_test(test_errno_mapping),
        cmocka_unit_test(test_busid_and_rates),
        cmocka_unit_test(test_sysfs_tree),
        cmocka_unit_test(test_virtualize_topology),
        cmocka_unit_test_setup(test_not_a_driver, test_setup),
        cmocka_unit_test_setup(test_fake_old_driver, test_setup),
        cmocka_unit_test_setup(test_fake_no_device, test_setup),
        cmocka_unit_test_setup(test_fake_no_vmm, test_setup),
        cmocka_unit_test_setup(test_fake_pool, test_setup),
        cmocka_unit_test_setup(test_fake_tiers, test_setup),
        cmocka_unit_test_setup(test_fake_tiers_nocpu, test_setup),
        cmocka_unit_test_setup(test_fake_hostreg_refused, test_setup),
        cmocka_unit_test_setup(test_fake_checkpoint, test_setup),
        cmocka_unit_test_setup(test_fake_stitch, test_setup),
        cmocka_unit_test_setup(test_fake_full, test_setup),
        cmocka_unit_test_setup(test_fake_faults, test_setup),
        cmocka_unit_test_setup(test_fake_device_lost, test_setup),
        cmocka_unit_test_setup(test_fake_no_fd, test_setup),
        cmocka_unit_test_setup(test_fake_no_peer, test_setup),
        cmocka_unit_test_setup(test_fake_virtual, test_setup),
        cmocka_unit_test_setup(test_fake_virtual_two_gpus, test_setup),
        cmocka_unit_test_setup(test_fake_virtual_limits, test_setup),
        cmocka_unit_test_setup(test_fake_virtual_one, test_setup),
        cmocka_unit_test_setup(test_fake_streams, test_setup),
        cmocka_unit_test_setup(test_fake_stream_left, test_setup),
        cmocka_unit_test_setup(test_fake_stream_wrap, test_setup),
        cmocka_unit_test_setup(test_fake_stream_wrap_virtual, test_setup),
        cmocka_unit_test_setup(test_fake_event_contexts, test_setup),
        cmocka_unit_test_setup(test_fake_chunk_share, test_setup),
        cmocka_unit_test_setup(test_fake_ipc, test_setup),
        cmocka_unit_test_setup(test_fake_threads, test_setup),
        cmocka_unit_test_setup(test_fake_auto, test_setup),
        cmocka_unit_test_setup(test_fake_fork, test_setup),
        cmocka_unit_test_setup(test_fake_host_chunks, test_setup),
        cmocka_unit_test_setup(test_fake_host_driver, test_setup),
        cmocka_unit_test_setup(test_fake_host_gate, test_setup),
        cmocka_unit_test_setup(test_fake_host_gate_old_driver, test_setup),
        cmocka_unit_test_setup(test_fake_host_gate_pool, test_setup),
        cmocka_unit_test_setup(test_fake_host_memoryless_node, test_setup),
        cmocka_unit_test_setup(test_fake_cpu_access_type, test_setup),
        cmocka_unit_test_setup(test_fake_reserve_at, test_setup),
        cmocka_unit_test_setup(test_fake_reserve_window, test_setup),
        cmocka_unit_test_setup(test_fake_topology_pcie, test_setup),
        cmocka_unit_test_setup(test_fake_topology_nvlink, test_setup),
    };
    return cmocka_run_group_tests_name("cuda", tests, group_setup,
                                       group_teardown);
}
