#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "util/conf.h"
#include "util/log.h"
#include "umpool.h"

#define MIB ((size_t)1 << 20)

/* ---- helpers -------------------------------------------------------------- */

struct capture {
    FILE *file;
    int saved_fd;
};

/* Sends fd 2 to a temporary file until capture_end. */
static void capture_begin(struct capture *c)
{
    c->file = tmpfile();
    assert_non_null(c->file);
    fflush(stderr);
    c->saved_fd = dup(STDERR_FILENO);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

/* Restores fd 2 and returns the number of lines written meanwhile. */
static int capture_end(struct capture *c, char *buf, size_t size)
{
    fflush(stderr);
    dup2(c->saved_fd, STDERR_FILENO);
    close(c->saved_fd);
    rewind(c->file);
    size_t n = fread(buf, 1, size - 1, c->file);
    buf[n] = '\0';
    fclose(c->file);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    return lines;
}

static const struct ump_conf_entry *entry(const char *key)
{
    for (const struct ump_conf_entry *e = conf_table; e->key; e++)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/*
 * Applies str onto a copy of *base, expects -EINVAL, an unchanged config and
 * exactly one error line holding origin and every other given substring.
 */
static void expect_error(const struct ump_config *base, const char *str,
                         const char *origin, ...)
{
    struct ump_config cfg;
    char log[8192];
    struct capture cap;

    memcpy(&cfg, base, sizeof(cfg));
    capture_begin(&cap);
    int rc = conf_apply(&cfg, str, origin);
    int lines = capture_end(&cap, log, sizeof(log));

    if (rc != -EINVAL || lines != 1)
        print_error("input '%s' gave rc %d and log:\n%s", str, rc, log);
    assert_int_equal(rc, -EINVAL);
    assert_memory_equal(&cfg, base, sizeof(cfg));
    assert_int_equal(lines, 1);
    assert_true(strncmp(log, "umpool: error: ", 15) == 0);
    assert_non_null(strstr(log, origin));

    va_list ap;
    va_start(ap, origin);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(log, s)) {
            print_error("'%s' missing from log: %s", s, log);
            fail();
        }
    va_end(ap);
}

static void expect_bad_value(const char *key, const char *value)
{
    struct ump_config base;
    char item[256], quoted[256];

    conf_defaults(&base);
    snprintf(item, sizeof(item), "%s:%s", key, value);
    snprintf(quoted, sizeof(quoted), "bad value '%s' for key '%s'", value,
             key);
    const struct ump_conf_entry *e = entry(key);
    assert_non_null(e);
    expect_error(&base, item, "config", quoted, e->accepted, NULL);
}

static int setup(void **state)
{
    (void)state;
    /* The harness unsets it too, but a test run by hand may inherit one. */
    unsetenv("UMPOOL_CONF");
    return 0;
}

/* ---- the table and the defaults ------------------------------------------ */

static void test_table_complete(void **state)
{
    (void)state;
    static const char *const keys[] = {
        "backend",    "sim_devices", "sim_topology", "sim_device_mem",
        "sim_driver_costs", "sim_time_scale", "sim_fail_device", "sim_fail_after", "device_mem", "process_limit", "share", "attach", "cuda_virtual_devices", "policy", "log_level",
        "chunk_size", "max_chunk", "warm_chunk", "carve", "va_size", "release_threshold",
        "release_window", "tcache",
        "host_limit",
        "host_reserve", "host_cpu_access", "pinned_limit", "overflow", "nvme_dir",  "nvme_limit",   "nvme_queue_depth",
        "nvme_engine", "high_watermark", "low_watermark", "publish"};
    size_t n = 0;

    for (const struct ump_conf_entry *e = conf_table; e->key; e++, n++) {
        assert_non_null(e->dflt);
        assert_non_null(e->accepted);
        assert_non_null(e->doc);
        assert_true(e->accepted[0] && e->doc[0]);
        assert_true(e->offset < sizeof(struct ump_config));
        for (const struct ump_conf_entry *f = conf_table; f != e; f++)
            assert_string_not_equal(f->key, e->key);
    }
    assert_int_equal(n, sizeof(keys) / sizeof(keys[0]));
    for (size_t i = 0; i < n; i++)
        assert_non_null(entry(keys[i]));
}

static void test_defaults_match_table(void **state)
{
    (void)state;
    struct ump_config d, cfg;
    char str[1024];
    size_t used = 0;

    conf_defaults(&d);
    /* The table's default strings, applied as user input onto garbage, must
     * give what conf_defaults gives. */
    for (const struct ump_conf_entry *e = conf_table; e->key; e++)
        used += (size_t)snprintf(str + used, sizeof(str) - used, "%s:%s,",
                                 e->key, e->dflt);
    assert_true(used < sizeof(str));
    memset(&cfg, 0xa5, sizeof(cfg));
    assert_int_equal(conf_apply(&cfg, str, "config"), 0);
    assert_int_equal(cfg.backend, d.backend);
    assert_int_equal(cfg.sim_devices, d.sim_devices);
    assert_string_equal(cfg.sim_topology, d.sim_topology);
    assert_int_equal(cfg.sim_device_mem, d.sim_device_mem);
    assert_int_equal(cfg.sim_driver_costs, d.sim_driver_costs);
    assert_int_equal(cfg.sim_time_scale, d.sim_time_scale);
    assert_int_equal(cfg.device_mem, d.device_mem);
    assert_int_equal(cfg.cuda_virtual_devices, d.cuda_virtual_devices);
    assert_string_equal(cfg.policy, d.policy);
    assert_int_equal(cfg.log_level, d.log_level);
    assert_int_equal(cfg.chunk_size, d.chunk_size);
    assert_int_equal(cfg.max_chunk, d.max_chunk);
    assert_int_equal(cfg.va_size, d.va_size);
    assert_int_equal(cfg.tcache, d.tcache);

    /* And the documented defaults. */
    assert_int_equal(d.backend, UMP_BACKEND_AUTO);
    assert_int_equal(d.sim_devices, 0);
    assert_string_equal(d.sim_topology, "");
    assert_int_equal(d.sim_device_mem, 0);
    assert_int_equal(d.sim_driver_costs, UMP_SIM_COSTS_OFF);
    assert_int_equal(d.sim_time_scale, 1);
    assert_int_equal(d.device_mem, 0);
    assert_string_equal(d.policy, "local");
    assert_int_equal(d.log_level, UMP_LOG_WARN);
    assert_int_equal(d.chunk_size, 2 * MIB);
    assert_int_equal(d.max_chunk, 1024 * MIB);
    assert_int_equal(d.va_size, 0);
    assert_true(d.tcache);

    /* Deterministic, padding included, so callers may memcmp configs. */
    memset(&cfg, 0x5a, sizeof(cfg));
    conf_defaults(&cfg);
    assert_memory_equal(&cfg, &d, sizeof(d));
}

/* ---- every key ------------------------------------------------------------ */

static void test_every_key(void **state)
{
    (void)state;
    struct ump_config cfg;

    conf_defaults(&cfg);
    assert_int_equal(conf_apply(&cfg,
                                "backend:sim,sim_devices:8,"
                                "sim_topology:dgx-h200.topo,"
                                "sim_device_mem:1G,log_level:debug,"
                                "device_mem:512M,max_chunk:256M,"
                                "chunk_size:64K,va_size:1T,tcache:false",
                                "config"),
                     0);
    assert_int_equal(cfg.backend, UMP_BACKEND_SIM);
    assert_int_equal(cfg.sim_devices, 8);
    assert_string_equal(cfg.sim_topology, "dgx-h200.topo");
    assert_int_equal(cfg.sim_device_mem, (size_t)1 << 30);
    assert_int_equal(cfg.log_level, UMP_LOG_DEBUG);
    assert_int_equal(cfg.chunk_size, (size_t)64 << 10);
    assert_int_equal(cfg.device_mem, (size_t)512 << 20);
    assert_int_equal(cfg.max_chunk, (size_t)256 << 20);
    assert_int_equal(cfg.va_size, (size_t)1 << 40);
    assert_false(cfg.tcache);
}

static void test_enums(void **state)
{
    (void)state;
    static const struct {
        const char *str;
        int backend;
    } backends[] = {{"auto", UMP_BACKEND_AUTO}, {"sim", UMP_BACKEND_SIM},
                    {"cuda", UMP_BACKEND_CUDA}, {"CUDA", UMP_BACKEND_CUDA},
                    {"Sim", UMP_BACKEND_SIM}};
    static const struct {
        const char *str;
        int level;
    } levels[] = {{"error", UMP_LOG_ERROR},
                  {"warn", UMP_LOG_WARN},
                  {"info", UMP_LOG_INFO},
                  {"debug", UMP_LOG_DEBUG}};
    struct ump_config cfg;
    char item[64];

    conf_defaults(&cfg);
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        cfg.backend = -1;
        snprintf(item, sizeof(item), "backend:%s", backends[i].str);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.backend, backends[i].backend);
    }
    /* sim_driver_costs: the words follow enum ump_sim_driver_costs. */
    static const struct {
        const char *str;
        int costs;
    } costs[] = {{"off", UMP_SIM_COSTS_OFF}, {"h200", UMP_SIM_COSTS_H200},
                 {"H200", UMP_SIM_COSTS_H200}, {"OFF", UMP_SIM_COSTS_OFF},
                 {"h200-timed", UMP_SIM_COSTS_H200_TIMED},
                 {"H200-Timed", UMP_SIM_COSTS_H200_TIMED}};
    for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
        cfg.sim_driver_costs = -1;
        snprintf(item, sizeof(item), "sim_driver_costs:%s", costs[i].str);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.sim_driver_costs, costs[i].costs);
    }
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        cfg.log_level = -1;
        snprintf(item, sizeof(item), "log_level:%s", levels[i].str);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.log_level, levels[i].level);
        /* The names agree with the logger's. */
        assert_string_equal(log_level_name(cfg.log_level), levels[i].str);
    }
}

static void test_bools(void **state)
{
    (void)state;
    static const char *const trues[] = {"true", "yes", "on", "1", "TRUE",
                                        "Yes"};
    static const char *const falses[] = {"false", "no", "off", "0", "OFF"};
    struct ump_config cfg;
    char item[64];

    conf_defaults(&cfg);
    for (size_t i = 0; i < sizeof(trues) / sizeof(trues[0]); i++) {
        cfg.tcache = false;
        snprintf(item, sizeof(item), "tcache:%s", trues[i]);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_true(cfg.tcache);
    }
    for (size_t i = 0; i < sizeof(falses) / sizeof(falses[0]); i++) {
        cfg.tcache = true;
        snprintf(item, sizeof(item), "tcache:%s", falses[i]);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_false(cfg.tcache);
    }
}

static void test_int_range(void **state)
{
    (void)state;
    const struct ump_conf_entry *e = entry("sim_devices");
    struct ump_config cfg;
    char item[64];

    assert_non_null(e);
    conf_defaults(&cfg);
    for (long long v = e->min; v <= e->max; v++) {
        snprintf(item, sizeof(item), "sim_devices:%lld", v);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.sim_devices, v);
    }
    snprintf(item, sizeof(item), "%lld", e->max + 1);
    expect_bad_value("sim_devices", item);
    snprintf(item, sizeof(item), "%lld", e->min - 1);
    expect_bad_value("sim_devices", item);
}

/* cuda_virtual_devices: 1..8, default 1; 0, 9 and words are refused. */
static void test_cuda_virtual_devices(void **state)
{
    (void)state;
    struct ump_config cfg;
    char item[64];

    conf_defaults(&cfg);
    assert_int_equal(cfg.cuda_virtual_devices, 1);
    for (int v = 1; v <= 8; v++) {
        snprintf(item, sizeof(item), "cuda_virtual_devices:%d", v);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.cuda_virtual_devices, v);
    }
    expect_bad_value("cuda_virtual_devices", "0");
    expect_bad_value("cuda_virtual_devices", "9");
    expect_bad_value("cuda_virtual_devices", "-1");
    expect_bad_value("cuda_virtual_devices", "four");
}

/* ---- sizes ---------------------------------------------------------------- */

static void test_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *str;
        size_t shift; /* value = mult << shift */
        size_t mult;
    } good[] = {
        {"0", 0, 0},       {"123", 0, 123},  {"7B", 0, 7},
        {"4K", 10, 4},     {"4k", 10, 4},    {"4KB", 10, 4},
        {"4KiB", 10, 4},   {"4kib", 10, 4},  {"4kb", 10, 4},
        {"3M", 20, 3},     {"3m", 20, 3},    {"3MiB", 20, 3},
        {"5G", 30, 5},     {"5GB", 30, 5},   {"5gib", 30, 5},
        {"2T", 40, 2},     {"2tb", 40, 2},   {"2TiB", 40, 2},
        {"007K", 10, 7},
    };
    static const char *const bad[] = {
        "",     "K",     "-1",    "+1",  "1.5M", "1X",   "1KK",
        "1 K",  " 1",    "1 ",    "1iB", "1KiBx", "1Ki", "0x10",
        "1P",   "99999999999T",   "18446744073709551616",
        "184467440737095516150",
    };
    char buf[64];
    size_t v;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = 1;
        assert_int_equal(conf_parse_size(good[i].str, &v), 0);
        assert_int_equal(v, good[i].mult << good[i].shift);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 42;
        if (conf_parse_size(bad[i], &v) != -EINVAL)
            print_error("size '%s' was accepted\n", bad[i]);
        assert_int_equal(conf_parse_size(bad[i], &v), -EINVAL);
        assert_int_equal(v, 42); /* untouched on error */
    }
    assert_int_equal(conf_parse_size(NULL, &v), -EINVAL);

    /* The edges of size_t, in bytes and with a unit. */
    snprintf(buf, sizeof(buf), "%zu", SIZE_MAX);
    assert_int_equal(conf_parse_size(buf, &v), 0);
    assert_true(v == SIZE_MAX);
    snprintf(buf, sizeof(buf), "%zuT", SIZE_MAX >> 40);
    assert_int_equal(conf_parse_size(buf, &v), 0);
    assert_true(v == (SIZE_MAX >> 40) << 40);
    snprintf(buf, sizeof(buf), "%zuT", (SIZE_MAX >> 40) + 1);
    assert_int_equal(conf_parse_size(buf, &v), -EINVAL);
    snprintf(buf, sizeof(buf), "%zuK", (SIZE_MAX >> 10) + 1);
    assert_int_equal(conf_parse_size(buf, &v), -EINVAL);

    /* Through conf_apply, with the overflow logged once. */
    expect_bad_value("va_size", "99999999999T");
    expect_bad_value("sim_device_mem", "18446744073709551616");
}

static void test_chunk_size(void **state)
{
    (void)state;
    const struct ump_conf_entry *e = entry("chunk_size");
    struct ump_config cfg;
    char item[64];

    assert_non_null(e);
    conf_defaults(&cfg);
    for (size_t sz = (size_t)e->min; sz <= ((size_t)1 << 30); sz <<= 1) {
        snprintf(item, sizeof(item), "chunk_size:%zu", sz);
        assert_int_equal(conf_apply(&cfg, item, "config"), 0);
        assert_int_equal(cfg.chunk_size, sz);
    }
    snprintf(item, sizeof(item), "%zu", (size_t)e->min / 2);
    expect_bad_value("chunk_size", item); /* power of two, below the min */
    snprintf(item, sizeof(item), "%zu", (size_t)e->min * 3);
    expect_bad_value("chunk_size", item); /* above the min, not pow2 */
    expect_bad_value("chunk_size", "3M");
    expect_bad_value("chunk_size", "0");
}

/* ---- bad input ------------------------------------------------------------ */

static void test_bad_values(void **state)
{
    (void)state;
    expect_bad_value("backend", "fast");
    expect_bad_value("backend", "");
    expect_bad_value("backend", "sim:x"); /* only the first ':' splits */
    expect_bad_value("backend", "autox");
    expect_bad_value("backend", "au");
    /* One log line naming the key, the value and "off|h200|h200-timed". */
    expect_bad_value("sim_driver_costs", "a100");
    expect_bad_value("sim_driver_costs", "on");
    expect_bad_value("sim_driver_costs", "");
    expect_bad_value("sim_driver_costs", "h200x");
    expect_bad_value("sim_driver_costs", "h200-");
    expect_bad_value("sim_driver_costs", "timed");
    expect_bad_value("sim_time_scale", "0");
    expect_bad_value("sim_time_scale", "1001");
    expect_bad_value("sim_time_scale", "2.5");
    expect_bad_value("log_level", "verbose");
    expect_bad_value("log_level", "2");
    expect_bad_value("sim_devices", "abc");
    expect_bad_value("sim_devices", "");
    expect_bad_value("sim_devices", "4x");
    expect_bad_value("sim_devices", "+4");
    expect_bad_value("sim_devices", "99999999999999999999");
    expect_bad_value("sim_device_mem", "-5");
    expect_bad_value("sim_device_mem", "");
    expect_bad_value("va_size", "1Q");
    expect_bad_value("va_size", "1.5G");
    expect_bad_value("tcache", "maybe");
    expect_bad_value("tcache", "");
    expect_bad_value("tcache", "2");
}

static void test_long_string(void **state)
{
    (void)state;
    const size_t prefix = strlen("sim_topology:");
    char *item = malloc(prefix + UMP_CONF_PATH_MAX + 1);
    struct ump_config cfg, base;
    char log[8192];
    struct capture cap;

    assert_non_null(item);
    memcpy(item, "sim_topology:", prefix);

    /* The longest path that fits, with its terminator. */
    memset(item + prefix, 'a', UMP_CONF_PATH_MAX - 1);
    item[prefix + UMP_CONF_PATH_MAX - 1] = '\0';
    conf_defaults(&cfg);
    assert_int_equal(conf_apply(&cfg, item, "config"), 0);
    assert_int_equal(strlen(cfg.sim_topology), UMP_CONF_PATH_MAX - 1);

    /* One more byte: refused, once, and the line stays short enough to show
     * what is accepted. */
    item[prefix + UMP_CONF_PATH_MAX - 1] = 'a';
    item[prefix + UMP_CONF_PATH_MAX] = '\0';
    conf_defaults(&base);
    memcpy(&cfg, &base, sizeof(cfg));
    capture_begin(&cap);
    int rc = conf_apply(&cfg, item, "config");
    int lines = capture_end(&cap, log, sizeof(log));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(lines, 1);
    assert_memory_equal(&cfg, &base, sizeof(cfg));
    assert_non_null(strstr(log, "sim_topology"));
    assert_non_null(strstr(log, entry("sim_topology")->accepted));
    free(item);
}

static void test_unknown_key(void **state)
{
    (void)state;
    struct ump_config base;

    conf_defaults(&base);
    expect_error(&base, "bakend:sim", "UMPOOL_CONF", "unknown key 'bakend'",
                 NULL);
    expect_error(&base, ":sim", "config", "unknown key ''", NULL);
    /* Keys are exact: no case folding, no prefixes. */
    expect_error(&base, "Backend:sim", "config", "unknown key 'Backend'",
                 NULL);
    expect_error(&base, "back:sim", "config", "unknown key 'back'", NULL);
    /* The message lists every key. */
    for (const struct ump_conf_entry *e = conf_table; e->key; e++)
        expect_error(&base, "nope:1", "config", e->key, NULL);
    /* Good items before the bad one are not applied either. */
    expect_error(&base, "backend:sim,chunk_size:4M,bakend:cuda", "config",
                 "'bakend'", NULL);
}

static void test_missing_colon(void **state)
{
    (void)state;
    struct ump_config base;

    conf_defaults(&base);
    expect_error(&base, "backend", "config", "'backend'", NULL);
    expect_error(&base, "backend:sim,tcache", "UMPOOL_CONF", "'tcache'",
                 NULL);
    expect_error(&base, "backend=sim", "config", "'backend=sim'", NULL);
}

/* ---- syntax --------------------------------------------------------------- */

static void test_first_colon(void **state)
{
    (void)state;
    struct ump_config cfg;

    conf_defaults(&cfg);
    assert_int_equal(conf_apply(&cfg,
                                "sim_topology:/tmp/a:b/c::d.topo,"
                                "backend:sim",
                                "config"),
                     0);
    assert_string_equal(cfg.sim_topology, "/tmp/a:b/c::d.topo");
    assert_int_equal(cfg.backend, UMP_BACKEND_SIM);
    /* An empty string value clears a string key. */
    assert_int_equal(conf_apply(&cfg, "sim_topology:", "config"), 0);
    assert_string_equal(cfg.sim_topology, "");
}

static void test_blanks_and_empty_items(void **state)
{
    (void)state;
    static const char *const nothing[] = {"", ",", ",,,", "   ", " , ,\t,"};
    struct ump_config cfg, d;

    conf_defaults(&d);
    memcpy(&cfg, &d, sizeof(cfg));
    assert_int_equal(conf_apply(&cfg, NULL, "config"), 0);
    assert_memory_equal(&cfg, &d, sizeof(d));
    for (size_t i = 0; i < sizeof(nothing) / sizeof(nothing[0]); i++) {
        assert_int_equal(conf_apply(&cfg, nothing[i], "config"), 0);
        assert_memory_equal(&cfg, &d, sizeof(d));
    }

    /* No blank inside a size. */
    expect_error(&d,
                 ",, backend : sim ,\tsim_devices:\t4\t,,"
                 "sim_topology:  my topo.topo  , va_size : 2 G ,",
                 "config", "bad value '2 G' for key 'va_size'", NULL);
    assert_int_equal(conf_apply(&cfg,
                                ",, backend : sim ,\tsim_devices:\t4\t,,"
                                "sim_topology:  my topo.topo  ,"
                                " va_size : 2G ,",
                                "config"),
                     0);
    assert_int_equal(cfg.backend, UMP_BACKEND_SIM);
    assert_int_equal(cfg.sim_devices, 4);
    /* Blanks inside a value are kept, those around it are not. */
    assert_string_equal(cfg.sim_topology, "my topo.topo");
    assert_int_equal(cfg.va_size, (size_t)2 << 30);
    /* Keys not given keep their value. */
    assert_int_equal(cfg.chunk_size, d.chunk_size);
    assert_int_equal(cfg.tcache, d.tcache);
    assert_int_equal(cfg.log_level, d.log_level);
}

static void test_last_wins(void **state)
{
    (void)state;
    struct ump_config cfg;

    conf_defaults(&cfg);
    assert_int_equal(conf_apply(&cfg,
                                "backend:sim,chunk_size:4M,backend:cuda,"
                                "chunk_size:1M",
                                "config"),
                     0);
    assert_int_equal(cfg.backend, UMP_BACKEND_CUDA);
    assert_int_equal(cfg.chunk_size, 1 * MIB);
    assert_int_equal(conf_apply(&cfg, "backend:auto", "config"), 0);
    assert_int_equal(cfg.backend, UMP_BACKEND_AUTO);
    assert_int_equal(cfg.chunk_size, 1 * MIB);
}

/* A list key given again in one string appends; another string replaces. */
static void test_list_append(void **state)
{
    (void)state;
    struct ump_config cfg;

    conf_defaults(&cfg);
    assert_string_equal(cfg.nvme_dir, "");
    assert_int_equal(conf_apply(&cfg, "nvme_dir:/a,backend:sim,nvme_dir:/b:/c",
                                "config"), 0);
    assert_string_equal(cfg.nvme_dir, "/a:/b:/c");
    assert_int_equal(conf_apply(&cfg, "nvme_dir:/d", "config"), 0);
    assert_string_equal(cfg.nvme_dir, "/d");

    /* Too long once appended: an error, and nothing changes. */
    char big[UMP_CONF_PATH_MAX];
    memset(big, 'x', sizeof(big));
    memcpy(big, "nvme_dir:/", 10);
    big[UMP_CONF_PATH_MAX - 200] = '\0';
    char str[2 * UMP_CONF_PATH_MAX];
    snprintf(str, sizeof(str), "%s,%s", big, big);
    assert_int_equal(conf_apply(&cfg, str, "config"), -EINVAL);
    assert_string_equal(cfg.nvme_dir, "/d");
}

/* ---- conf_load: environment, then argument -------------------------------- */

static void test_load_env_and_arg(void **state)
{
    (void)state;
    struct ump_config cfg, d;

    conf_defaults(&d);
    memset(&cfg, 0x33, sizeof(cfg));
    assert_int_equal(conf_load(NULL, &cfg), 0);
    assert_memory_equal(&cfg, &d, sizeof(d));

    assert_int_equal(
        setenv("UMPOOL_CONF", "backend:sim,sim_devices:4,chunk_size:4M", 1),
        0);
    assert_int_equal(conf_load(NULL, &cfg), 0);
    assert_int_equal(cfg.backend, UMP_BACKEND_SIM);
    assert_int_equal(cfg.sim_devices, 4);
    assert_int_equal(cfg.chunk_size, 4 * MIB);
    assert_int_equal(cfg.tcache, d.tcache);

    /* The argument wins key by key; keys it does not name come from the
     * environment, and the rest from the table. */
    assert_int_equal(conf_load("sim_devices:8,tcache:off", &cfg), 0);
    assert_int_equal(cfg.backend, UMP_BACKEND_SIM);
    assert_int_equal(cfg.sim_devices, 8);
    assert_int_equal(cfg.chunk_size, 4 * MIB);
    assert_false(cfg.tcache);
    assert_int_equal(cfg.log_level, d.log_level);
    assert_int_equal(cfg.va_size, d.va_size);

    assert_int_equal(unsetenv("UMPOOL_CONF"), 0);
    assert_int_equal(conf_load("sim_devices:8", &cfg), 0);
    assert_int_equal(cfg.backend, d.backend);
    assert_int_equal(cfg.chunk_size, d.chunk_size);
}

static void expect_load_error(const char *env, const char *arg,
                              const char *origin, const char *what)
{
    struct ump_config cfg, before;
    char log[4096];
    struct capture cap;

    memset(&before, 0x77, sizeof(before));
    memcpy(&cfg, &before, sizeof(cfg));
    if (env)
        assert_int_equal(setenv("UMPOOL_CONF", env, 1), 0);
    else
        assert_int_equal(unsetenv("UMPOOL_CONF"), 0);
    capture_begin(&cap);
    int rc = conf_load(arg, &cfg);
    int lines = capture_end(&cap, log, sizeof(log));
    unsetenv("UMPOOL_CONF");

    assert_int_equal(rc, -EINVAL);
    assert_int_equal(lines, 1);
    assert_memory_equal(&cfg, &before, sizeof(cfg)); /* not written */
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "umpool: error: %s: ", origin);
    assert_true(strncmp(log, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(log, what));
}

static void test_load_errors(void **state)
{
    (void)state;
    expect_load_error("backend:fast", NULL, "UMPOOL_CONF", "'fast'");
    expect_load_error("backend:fast", "backend:sim", "UMPOOL_CONF", "'fast'");
    expect_load_error("backend:sim", "backend:fast", "config", "'fast'");
    expect_load_error(NULL, "bakend:sim", "config", "'bakend'");
    expect_load_error("sim_devices", NULL, "UMPOOL_CONF", "'sim_devices'");
    expect_load_error(NULL, "high_watermark:50,low_watermark:60", "config",
                      "low_watermark 60 is above high_watermark 50");
    expect_load_error("low_watermark:95", NULL, "config",
                      "low_watermark 95 is above high_watermark 90");
}

static void test_message_format(void **state)
{
    (void)state;
    struct ump_config cfg;
    char log[1024];
    struct capture cap;

    conf_defaults(&cfg);
    capture_begin(&cap);
    int rc = conf_apply(&cfg, "backend: fast ", "config");
    int lines = capture_end(&cap, log, sizeof(log));
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(lines, 1);
    assert_string_equal(log, "umpool: error: config: bad value 'fast' for key "
                             "'backend' (accepted: auto|sim|cuda)\n");
}

/* Control bytes in what the user gave are escaped in the log line, so one
 * bad item is one line and cannot forge others or drive the terminal. */
static void test_control_chars_escaped(void **state)
{
    (void)state;
    struct ump_config base, cfg;
    char log[2048];
    struct capture cap;

    conf_defaults(&base);
    /* A bad value that carries two forged lines, a carriage return, an
     * escape sequence, a tab and DEL. */
    memcpy(&cfg, &base, sizeof(cfg));
    capture_begin(&cap);
    int rc = conf_apply(&cfg,
                        "backend:fast\numpool: error: forged\n"
                        "umpool: warn: again\r\x1b[2Kx\ty\x7fz",
                        "config");
    int lines = capture_end(&cap, log, sizeof(log));
    if (lines != 1)
        print_error("log: %s", log);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(lines, 1);
    assert_memory_equal(&cfg, &base, sizeof(cfg));
    assert_string_equal(log, "umpool: error: config: bad value 'fast\\n"
                             "umpool: error: forged\\numpool: warn: again"
                             "\\r\\x1b[2Kx\\ty\\x7fz' for key 'backend' "
                             "(accepted: auto|sim|cuda)\n");

    /* The same for a key and for an item without ':'. */
    expect_error(&base, "bad\nkey:1", "config", "unknown key 'bad\\nkey'",
                 NULL);
    expect_error(&base, "no\ncolon", "config", "'no\\ncolon'", NULL);

    /* The helper: truncated to fit, never in the middle of an escape. */
    char out[8];
    assert_int_equal(log_escape(out, sizeof(out), "a\nb\x01"), 4);
    assert_string_equal(out, "a\\nb");
    assert_int_equal(log_escape(out, sizeof(out), "plain"), 5);
    assert_string_equal(out, "plain");
}

/* ---- ump_strerror and the version ----------------------------------------- */

static const int known_codes[] = {
    EINVAL, ENOMEM,          EBUSY,  ENODEV, ENOTSUP, EPERM,
    EIO,    ENOSPC,          EAGAIN, ENOENT, ENOTRECOVERABLE,
    EEXIST, ERANGE,          ENOSYS, EACCES, EFAULT,  EOVERFLOW,
};

static void test_strerror_known(void **state)
{
    (void)state;
    size_t n = sizeof(known_codes) / sizeof(known_codes[0]);

    assert_string_equal(ump_strerror(0), "success");
    for (size_t i = 0; i < n; i++) {
        const char *neg = ump_strerror(-known_codes[i]);
        const char *pos = ump_strerror(known_codes[i]);
        assert_non_null(neg);
        assert_non_null(pos);
        assert_true(neg[0] != '\0');
        assert_string_equal(neg, pos);
        assert_string_not_equal(neg, "unknown error");
        assert_string_not_equal(neg, "success");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(neg, ump_strerror(-known_codes[j]));
    }
    assert_non_null(strstr(ump_strerror(-ENOTRECOVERABLE), "fork"));
    assert_non_null(strstr(ump_strerror(-ENOMEM), "memory"));
}

static void test_strerror_unknown(void **state)
{
    (void)state;
    static const int odd[] = {INT_MIN, INT_MIN + 1, -99999, 99999, INT_MAX,
                              -4096, 4096};

    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        const char *s = ump_strerror(odd[i]);
        assert_non_null(s);
        assert_string_equal(s, "unknown error");
    }
    /* A code the library does not name still gets the system's text. */
    const char *s = ump_strerror(-ECHILD);
    assert_non_null(s);
    assert_true(s[0] != '\0');
    assert_string_equal(s, ump_strerror(ECHILD));
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
    assert_string_equal(s, strerrordesc_np(ECHILD));
#endif
}

static void *strerror_worker(void *arg)
{
    (void)arg;
    uintptr_t bad = 0;
    for (int round = 0; round < 200; round++)
        for (int code = -300; code <= 300; code++) {
            const char *s = ump_strerror(code);
            bad += !s || !s[0];
        }
    return (void *)bad;
}

static void test_strerror_threads(void **state)
{
    (void)state;
    pthread_t t[4];

    for (size_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, strerror_worker, NULL),
                         0);
    for (size_t i = 0; i < 4; i++) {
        void *bad;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_null(bad);
    }
}

static void test_version(void **state)
{
    (void)state;
    char want[32];
    unsigned v = ump_version();

    assert_int_equal(v, UMP_VERSION);
    assert_int_equal(v >> 16, UMP_VERSION_MAJOR);
    assert_int_equal((v >> 8) & 0xff, UMP_VERSION_MINOR);
    assert_int_equal(v & 0xff, UMP_VERSION_PATCH);

    snprintf(want, sizeof(want), "%d.%d.%d", UMP_VERSION_MAJOR,
             UMP_VERSION_MINOR, UMP_VERSION_PATCH);
    assert_non_null(ump_version_string());
    assert_string_equal(ump_version_string(), want);
    /* configure.ac and umpool.h must be bumped together. */
    assert_string_equal(ump_version_string(), PACKAGE_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_complete),
        cmocka_unit_test(test_defaults_match_table),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_enums),
        cmocka_unit_test(test_bools),
        cmocka_unit_test(test_int_range),
        cmocka_unit_test(test_cuda_virtual_devices),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_chunk_size),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_long_string),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_missing_colon),
        cmocka_unit_test(test_first_colon),
        cmocka_unit_test(test_blanks_and_empty_items),
        cmocka_unit_test(test_last_wins),
        cmocka_unit_test(test_list_append),
        cmocka_unit_test(test_load_env_and_arg),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_message_format),
        cmocka_unit_test(test_control_chars_escaped),
        cmocka_unit_test(test_strerror_known),
        cmocka_unit_test(test_strerror_unknown),
        cmocka_unit_test(test_strerror_threads),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
