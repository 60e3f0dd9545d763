/*
 * Topology files: the shipped machines, the grammar, every error with its
 * line number, name resolution and the generated uniform machine.
 *
 * The shipped files are found through UMPOOL_TOPOLOGY_DIR (set by the test
 * harness) or, when it is unset, UMP_TEST_TOPOLOGY_DIR if the build defines
 * it. Without either the tests that need them are skipped and the program
 * exits 77 (SKIP) once the others have passed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/log.h"
#include "topo/topology.h"
#include "umpool.h"

#define GiB ((size_t)1 << 30)

/* The library's fallback when the build does not name the folder. */
#ifndef UMP_TOPOLOGY_DIR
#define UMP_TOPOLOGY_DIR "/usr/local/share/umpool/topologies"
#endif

static bool shipped_missing;

/* --- stderr capture ------------------------------------------------------ */

struct capture {
    int saved;
    int fds[2];
    char text[8192];
};

static void capture_begin(struct capture *c)
{
    fflush(stderr);
    assert_int_equal(pipe(c->fds), 0);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(c->fds[1], STDERR_FILENO) >= 0);
    close(c->fds[1]);
}

/* Restores stderr and leaves what was written in c->text. The pipe holds
 * 64 KiB, far more than the few lines a call logs. */
static void capture_end(struct capture *c)
{
    size_t len = 0;
    ssize_t n;

    fflush(stderr);
    assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
    close(c->saved);
    while (len < sizeof(c->text) - 1 &&
           (n = read(c->fds[0], c->text + len, sizeof(c->text) - 1 - len)) > 0)
        len += (size_t)n;
    c->text[len] = '\0';
    close(c->fds[0]);
}

static int captured_ret;

/* Runs expr with stderr captured into c->text and gives its value. stderr is
 * restored before any assertion on the value can jump out of the test. */
#define CAPTURE(c, expr)                                                       \
    (capture_begin(c), captured_ret = (expr), capture_end(c), captured_ret)

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* --- helpers ------------------------------------------------------------- */

static struct ump_topology *new_topo(void)
{
    struct ump_topology *t = malloc(sizeof(*t));

    assert_non_null(t);
    memset(t, 0xa5, sizeof(*t));
    return t;
}

static void parse_ok(const char *text, struct ump_topology *t)
{
    struct capture c;
    int ret;

    ret = CAPTURE(&c, topo_parse(text, "ok.topo", t));
    if (ret)
        fprintf(stderr, "unexpected failure: %s", c.text);
    assert_int_equal(ret, 0);
    assert_string_equal(c.text, "");
}

/* Parses text that must fail at line with one log line holding what, and
 * leave the result untouched. */
static void parse_bad(const char *text, int line, const char *what)
{
    struct ump_topology *t = new_topo(), *before = new_topo();
    char where[64];
    struct capture c;
    int ret;

    ret = CAPTURE(&c, topo_parse(text, "bad.topo", t));
    snprintf(where, sizeof(where), "bad.topo:%d: ", line);
    if (ret != -EINVAL || !strstr(c.text, where) || !strstr(c.text, what))
        fprintf(stderr, "text:\n%s\nwant %d at %s'%s', got %d: %s", text,
                -EINVAL, where, what, ret, c.text);
    assert_int_equal(ret, -EINVAL);
    assert_non_null(strstr(c.text, "umpool: error: "));
    assert_non_null(strstr(c.text, where));
    assert_non_null(strstr(c.text, what));
    assert_int_equal(count_lines(c.text), 1);
    assert_memory_equal(t, before, sizeof(*t));
    free(before);
    free(t);
}

static void assert_link(const struct ump_topology *t, int a, int b, int kind,
                        double bw, bool peer)
{
    static const int hops[UMP_LINK_KINDS] = {0, 1, 2, 3, 4};

    if (t->link[a][b].kind != kind || t->link[a][b].bw_gbs != bw)
        fprintf(stderr, "link[%d][%d]: %s %g, want %s %g\n", a, b,
                topo_link_kind_name(t->link[a][b].kind), t->link[a][b].bw_gbs,
                topo_link_kind_name(kind), bw);
    for (int dir = 0; dir < 2; dir++) {
        const struct topo_link *l = dir ? &t->link[b][a] : &t->link[a][b];

        assert_int_equal(l->kind, kind);
        assert_true(l->bw_gbs == bw);
        assert_int_equal(l->hops, hops[kind]);
        assert_int_equal(l->peer, peer);
    }
}

/* Invariants every parsed machine keeps: a self diagonal at local_bw and a
 * symmetric matrix. */
static void assert_sane(const struct ump_topology *t)
{
    assert_true(t->ndev >= 1 && t->ndev <= UMP_MAX_DEVICES);
    assert_true(t->nnuma >= 1 && t->nnuma <= UMP_MAX_NUMA);
    for (int a = 0; a < t->ndev; a++) {
        assert_true(t->dev[a].numa >= 0 && t->dev[a].numa < t->nnuma);
        assert_true(t->dev[a].mem > 0);
        assert_link(t, a, a, UMP_LINK_SELF, t->local_bw_gbs, true);
        for (int b = 0; b < t->ndev; b++) {
            assert_int_equal(t->link[a][b].kind, t->link[b][a].kind);
            assert_true(t->link[a][b].bw_gbs == t->link[b][a].bw_gbs);
            assert_int_equal(t->link[a][b].peer, t->link[b][a].peer);
        }
    }
}

static void assert_nearest(const struct ump_topology *t, int dev,
                           const int *want, int n)
{
    int order[UMP_MAX_DEVICES];

    assert_int_equal(topo_nearest(t, dev, order), n);
    for (int i = 0; i < n; i++) {
        if (order[i] != want[i])
            fprintf(stderr, "nearest to %d: position %d is %d, want %d\n",
                    dev, i, order[i], want[i]);
        assert_int_equal(order[i], want[i]);
    }
}

/* Loads a shipped file by name and checks what every machine must keep. */
static void load_shipped(const char *name, struct ump_topology *t,
                         char *path, size_t len)
{
    char want[PATH_MAX];

    assert_int_equal(topo_resolve(name, path, len), 0);
    snprintf(want, sizeof(want), "%s/%s.topo", getenv("UMPOOL_TOPOLOGY_DIR"),
             name);
    assert_string_equal(path, want);
    assert_int_equal(topo_load_file(path, t), 0);
    assert_string_equal(t->source, path);
    assert_string_equal(t->name, name);
    assert_sane(t);
}

/* Before anything is allocated: skip() does not return. */
static void need_shipped(void)
{
    if (shipped_missing)
        skip();
}

/* --- shipped machines ---------------------------------------------------- */

static void test_dgx_h200(void **state)
{
    struct ump_topology *t;
    char path[PATH_MAX];
    (void)state;

    need_shipped();
    t = new_topo();

    load_shipped("dgx-h200", t, path, sizeof(path));
    assert_int_equal(t->ndev, 8);
    assert_int_equal(t->nnuma, 2);
    assert_true(t->local_bw_gbs > 4000);
    for (int i = 0; i < 8; i++) {
        assert_true(t->dev[i].mem == 141 * GiB);
        assert_int_equal(t->dev[i].numa, i < 4 ? 0 : 1);
        assert_string_equal(t->dev[i].model, "H200");
        assert_int_equal(strlen(t->dev[i].pci), 12);
        for (int j = 0; j < 8; j++)
            if (i != j)
                assert_link(t, i, j, UMP_LINK_NVLINK, 450, true);
    }
    assert_string_equal(t->dev[0].pci, "0000:18:00.0");
    assert_link(t, 0, 7, UMP_LINK_NVLINK, 450, true);
    /* All equal: index order, self left out. */
    assert_nearest(t, 0, (int[]){1, 2, 3, 4, 5, 6, 7}, 7);
    assert_nearest(t, 5, (int[]){0, 1, 2, 3, 4, 6, 7}, 7);
    free(t);
}

static void test_pcie_4gpu(void **state)
{
    struct ump_topology *t;
    char path[PATH_MAX];
    (void)state;

    need_shipped();
    t = new_topo();

    load_shipped("pcie-4gpu", t, path, sizeof(path));
    assert_int_equal(t->ndev, 4);
    assert_int_equal(t->nnuma, 2);
    for (int i = 0; i < 4; i++) {
        assert_true(t->dev[i].mem == 48 * GiB);
        assert_int_equal(t->dev[i].numa, i / 2);
        assert_string_equal(t->dev[i].model, "L40S");
        assert_string_equal(t->dev[i].pci, "");
    }
    assert_link(t, 0, 1, UMP_LINK_PCIE, 25, true);
    assert_link(t, 2, 3, UMP_LINK_PCIE, 25, true);
    for (int a = 0; a < 2; a++)
        for (int b = 2; b < 4; b++)
            assert_link(t, a, b, UMP_LINK_SYS, 20, false);
    assert_nearest(t, 0, (int[]){1, 2, 3}, 3);
    assert_nearest(t, 2, (int[]){3, 0, 1}, 3);
    assert_nearest(t, 3, (int[]){2, 0, 1}, 3);
    free(t);
}

static void test_nvlink_pairs(void **state)
{
    struct ump_topology *t;
    char path[PATH_MAX];
    (void)state;

    need_shipped();
    t = new_topo();

    load_shipped("nvlink-pairs-4gpu", t, path, sizeof(path));
    assert_int_equal(t->ndev, 4);
    assert_int_equal(t->nnuma, 2);
    for (int i = 0; i < 4; i++) {
        assert_true(t->dev[i].mem == 94 * GiB);
        assert_int_equal(t->dev[i].numa, i / 2);
    }
    assert_link(t, 0, 1, UMP_LINK_NVLINK, 300, true);
    assert_link(t, 2, 3, UMP_LINK_NVLINK, 300, true);
    assert_link(t, 0, 2, UMP_LINK_SYS, 40, true);
    assert_link(t, 1, 3, UMP_LINK_SYS, 40, true);
    assert_nearest(t, 1, (int[]){0, 2, 3}, 3);
    assert_nearest(t, 3, (int[]){2, 0, 1}, 3);
    free(t);
}

/* --- grammar ------------------------------------------------------------- */

static void test_defaults(void **state)
{
    struct ump_topology *t = new_topo();
    (void)state;

    parse_ok("device 0 mem 1G numa 0\n", t);
    assert_int_equal(t->ndev, 1);
    assert_int_equal(t->nnuma, 1);
    assert_true(t->local_bw_gbs == 4000);
    assert_string_equal(t->name, "ok");
    assert_string_equal(t->source, "ok.topo");
    assert_string_equal(t->dev[0].model, "unknown");
    assert_string_equal(t->dev[0].pci, "");
    assert_link(t, 0, 0, UMP_LINK_SELF, 4000, true);

    /* Unlisted pairs: host on one node, sys across, both at pcie_bw. */
    parse_ok("numa 2\n"
             "device 0-1 mem 1G numa 0\n"
             "device 2 mem 1G numa 1\n", t);
    assert_link(t, 0, 1, UMP_LINK_HOST, 55, true);
    assert_link(t, 0, 2, UMP_LINK_SYS, 55, true);
    assert_link(t, 1, 2, UMP_LINK_SYS, 55, true);

    /* Order of the one-shot directives does not matter. */
    parse_ok("device 0-1 mem 1G numa 1\n"
             "pcie_bw 12.5\n"
             "local_bw 900\n"
             "numa 2\n"
             "name late\n", t);
    assert_string_equal(t->name, "late");
    assert_int_equal(t->nnuma, 2);
    assert_link(t, 1, 0, UMP_LINK_HOST, 12.5, true);
    assert_link(t, 1, 1, UMP_LINK_SELF, 900, true);
    assert_sane(t);
    free(t);
}

static void test_ranges_and_lists(void **state)
{
    struct ump_topology *t = new_topo();
    (void)state;

    parse_ok("  # leading comment\n"
             "\n"
             "name\tranges   # trailing comment\n"
             "device 0-2 mem 2G numa 0 model A100 \n"
             "device 3 mem 512M numa 0 pci 0000:c1:00.0 model A100\n"
             "device 4-5 mem 1T numa 0\n"
             "link 0,2,4 1,3,5 pcie 30\n"
             "link 0-1 4-5 host 7\n"
             "link 0-1,4 3 sys 2.5 nopeer\n", t);
    assert_sane(t);
    assert_string_equal(t->name, "ranges");
    assert_int_equal(t->ndev, 6);
    assert_true(t->dev[0].mem == 2 * GiB && t->dev[2].mem == 2 * GiB);
    assert_true(t->dev[3].mem == 512 * ((size_t)1 << 20));
    assert_true(t->dev[5].mem == 1024 * GiB);
    assert_string_equal(t->dev[2].model, "A100");
    assert_string_equal(t->dev[3].pci, "0000:c1:00.0");
    assert_string_equal(t->dev[2].pci, "");
    assert_string_equal(t->dev[4].model, "unknown");

    assert_link(t, 0, 1, UMP_LINK_PCIE, 30, true);
    assert_link(t, 2, 5, UMP_LINK_PCIE, 30, true);
    assert_link(t, 1, 4, UMP_LINK_HOST, 7, true);
    assert_link(t, 0, 5, UMP_LINK_HOST, 7, true);     /* pcie, then host */
    assert_link(t, 0, 3, UMP_LINK_SYS, 2.5, false);
    assert_link(t, 4, 3, UMP_LINK_SYS, 2.5, false);
    assert_link(t, 2, 3, UMP_LINK_PCIE, 30, true);    /* not in the last */
    assert_link(t, 0, 2, UMP_LINK_HOST, 55, true);    /* never listed */
    assert_link(t, 1, 3, UMP_LINK_SYS, 2.5, false);

    /* CRLF files and a last line without a newline. */
    parse_ok("device 0-1 mem 1G numa 0\r\nlink all all nvlink 100\r\n"
             "local_bw 10", t);
    assert_link(t, 0, 1, UMP_LINK_NVLINK, 100, true);
    assert_true(t->local_bw_gbs == 10);
    free(t);
}

static void test_override_order(void **state)
{
    struct ump_topology *t = new_topo();
    (void)state;

    parse_ok("device 0-3 mem 1G numa 0\n"
             "link all all pcie 20\n"
             "link 1 2 nvlink 100 nopeer\n"
             "link 2 1 sys 5\n"
             "link 0 3 nvlink 300\n", t);
    assert_link(t, 1, 2, UMP_LINK_SYS, 5, true);
    assert_link(t, 0, 3, UMP_LINK_NVLINK, 300, true);
    assert_link(t, 0, 1, UMP_LINK_PCIE, 20, true);
    assert_link(t, 2, 3, UMP_LINK_PCIE, 20, true);

    /* The other way round: the specific line loses to a later "all". */
    parse_ok("device 0-3 mem 1G numa 0\n"
             "link 1 2 nvlink 100\n"
             "link all all pcie 20 nopeer\n", t);
    assert_link(t, 1, 2, UMP_LINK_PCIE, 20, false);
    free(t);
}

static void test_errors(void **state)
{
    static const char dev2[] = "device 0-1 mem 1G numa 0\n";
    char text[1024];
    (void)state;

    parse_bad("name x\nfrobnicate 1\n", 2, "unknown directive 'frobnicate'");
    parse_bad("# c\n\n  Device 0 mem 1G numa 0\n", 3, "unknown directive");
    parse_bad("# 1\n\n# 3\nname x\n\n \t \ndevice 0 mem 1G numa 0 x\n"
              "device 1 mem 1G numa 0\n", 7, "unknown device attribute 'x'");

    /* bad numbers */
    parse_bad("device 0 mem 1G numa 0\nlocal_bw abc\n", 2, "bad bandwidth");
    parse_bad("pcie_bw 0\n", 1, "bad bandwidth");
    parse_bad("pcie_bw -5\n", 1, "bad bandwidth");
    parse_bad("pcie_bw 1e3\n", 1, "bad bandwidth");
    parse_bad("pcie_bw 1.2.3\n", 1, "bad bandwidth");
    parse_bad("pcie_bw 99999999\n", 1, "bad bandwidth");
    parse_bad("pcie_bw\n", 1, "usage: pcie_bw");
    parse_bad("numa two\n", 1, "bad numa count");
    parse_bad("numa 0\n", 1, "bad numa count");
    parse_bad("numa 99999999999\n", 1, "bad numa count");
    parse_bad("\ndevice 0 mem 12Q numa 0\n", 2, "bad mem '12Q'");
    parse_bad("device 0 mem 0 numa 0\n", 1, "bad mem");
    parse_bad("device 0 mem 2048T numa 0\n", 1, "bad mem");
    parse_bad("device 0 mem 1G numa -1\n", 1, "bad numa node");
    parse_bad("device x mem 1G numa 0\n", 1, "bad device id");
    parse_bad("device 3-1 mem 1G numa 0\n", 1, "bad device id");
    parse_bad("device 0-1 mem 1G numa 0\nlink 0 1 nvlink fast\n", 2,
              "bad bandwidth");

    /* device ids */
    parse_bad("device 0 mem 1G numa 0\n\ndevice 2 mem 1G numa 0\n", 3,
              "device 2 declared out of order (expected 1)");
    parse_bad("device 0 mem 1G numa 0\ndevice 0 mem 1G numa 0\n", 2,
              "out of order");
    parse_bad("device 1 mem 1G numa 0\n", 1, "out of order");
    parse_bad("device 0-32 mem 1G numa 0\n", 1, "exceeds the maximum");
    snprintf(text, sizeof(text), "device 0-%d mem 1G numa 0\n"
             "device %d mem 1G numa 0\n", UMP_MAX_DEVICES - 1,
             UMP_MAX_DEVICES);
    parse_bad(text, 2, "exceeds the maximum");

    /* numa nodes, also when the count comes after the device */
    parse_bad("numa 2\ndevice 0 mem 1G numa 2\n", 2, "numa node 2");
    parse_bad("device 0 mem 1G numa 0\ndevice 1 mem 1G numa 1\nnuma 1\n", 2,
              "numa count is 1");
    parse_bad("device 0 mem 1G numa 16\n", 1, "bad numa node");
    parse_bad("numa 17\n", 1, "exceeds the maximum of 16");

    /* device attributes */
    parse_bad("# c\ndevice 0 numa 0\n", 2, "missing mem");
    parse_bad("device 0 mem 1G\n", 1, "missing numa");
    parse_bad("device 0 mem 1G numa 0 colour red\n", 1,
              "unknown device attribute 'colour'");
    parse_bad("device 0 mem 1G numa 0 model\n", 1, "model needs a value");
    parse_bad("device 0 mem 1G mem 2G numa 0\n", 1, "duplicate mem");
    parse_bad("device 0-1 mem 1G numa 0 pci 0000:01:00.0\n", 1,
              "pci is not allowed for a range");
    parse_bad("device 0 mem 1G numa 0 model "
              "a-model-name-of-more-than-31-characters\n", 1, "model longer");
    parse_bad("device 0 mem 1G numa 0 pci "
              "0000:01:00.0.and.more.than.31.characters\n", 1, "pci longer");
    parse_bad("device\n", 1, "usage: device");

    /* links */
    snprintf(text, sizeof(text), "%slink 0 2 nvlink 100\n", dev2);
    parse_bad(text, 2, "link to undeclared device 2");
    snprintf(text, sizeof(text), "%slink 0-5 1 nvlink 100\n", dev2);
    parse_bad(text, 2, "link to undeclared device 2");
    parse_bad("link all all nvlink 100\ndevice 0-1 mem 1G numa 0\n", 1,
              "link before any device");
    snprintf(text, sizeof(text), "%slink 0 1 self 100\n", dev2);
    parse_bad(text, 2, "unknown link kind 'self'");
    snprintf(text, sizeof(text), "%slink 0 1 NVLink 100\n", dev2);
    parse_bad(text, 2, "unknown link kind");
    snprintf(text, sizeof(text), "%slink 0 1 nvlink 100 peer\n", dev2);
    parse_bad(text, 2, "unexpected 'peer'");
    snprintf(text, sizeof(text), "%slink 0 1 nvlink\n", dev2);
    parse_bad(text, 2, "usage: link");
    snprintf(text, sizeof(text), "%slink 1 1 nvlink 100\n", dev2);
    parse_bad(text, 2, "no pair");
    static const char *const bad_sets[] = {"0-", "-1", "1-0", "0,,1", "0,",
                                           ",1", "x", "ALL", "0;1", ""};
    for (size_t i = 0; i < sizeof(bad_sets) / sizeof(bad_sets[0]); i++) {
        snprintf(text, sizeof(text), "%s\n%slink %s 1 pcie 1\n", "name s",
                 dev2, bad_sets[i]);
        char what[64];
        snprintf(what, sizeof(what), "bad device set '%s'", bad_sets[i]);
        parse_bad(text, 3, *bad_sets[i] ? what : "usage: link");
    }

    /* whole file */
    parse_bad("name x\n", 1, "no devices");
    parse_bad("", 1, "no devices");
    parse_bad("# only a comment\n\n", 2, "no devices");
    parse_bad("name a\ndevice 0 mem 1G numa 0\nname b\n", 3, "duplicate name");
    parse_bad("numa 1\nnuma 1\n", 2, "duplicate numa");
    parse_bad("local_bw 1\nlocal_bw 1\n", 2, "duplicate local_bw");
    parse_bad("name a b\n", 1, "usage: name");
    parse_bad("name "
              "a-name-of-more-than-sixty-three-characters-is-too-long-for-the-"
              "struct\n", 1, "name longer");
    parse_bad("device 0 mem 1G numa 0 model a model b model c pci d pci e "
              "pci f\n", 1, "more than 16 words");
}

static void test_null_args(void **state)
{
    struct ump_topology *t = new_topo();
    struct capture c;
    int order[UMP_MAX_DEVICES];
    char path[8];
    (void)state;

    assert_int_equal(CAPTURE(&c, topo_parse(NULL, "x", t)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(CAPTURE(&c, topo_parse("device 0 mem 1G numa 0", "x",
                                            NULL)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(CAPTURE(&c, topo_load_file(NULL, t)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(CAPTURE(&c, topo_resolve(NULL, path, sizeof(path))),
                     -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(CAPTURE(&c, topo_resolve("", path, sizeof(path))),
                     -EINVAL);
    assert_int_equal(count_lines(c.text), 1);

    /* A missing origin still gives a usable message and source. */
    assert_int_equal(CAPTURE(&c, topo_parse("bogus", NULL, t)), -EINVAL);
    assert_non_null(strstr(c.text, ":1: unknown directive"));
    assert_int_equal(topo_parse("device 0 mem 1G numa 0", NULL, t), 0);
    assert_true(t->source[0] != '\0');

    assert_int_equal(CAPTURE(&c, topo_nearest(t, 1, order)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(CAPTURE(&c, topo_nearest(t, -1, order)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    free(t);
}

/* --- nearest, kinds, uniform --------------------------------------------- */

static void test_nearest_order(void **state)
{
    struct ump_topology *t = new_topo();
    (void)state;

    parse_ok("numa 2\n"
             "device 0-4 mem 1G numa 0\n"
             "device 5 mem 1G numa 1\n"
             "link 0 1 host 50\n"
             "link 0 2 nvlink 50\n"  /* same bandwidth, fewer hops */
             "link 0 3 pcie 100\n"
             "link 0 4 sys 10\n"
             "link 0 5 pcie 10\n", t); /* same bandwidth, fewer hops */
    /* 0 -> 3 (100), 2 (50, 1 hop), 1 (50, 3 hops), 5 (10, 2), 4 (10, 4) */
    assert_nearest(t, 0, (int[]){3, 2, 1, 5, 4}, 5);
    /* From 1: 2, 3, 4 are host at 55 (index order), 0 at 50, 5 sys 55. */
    assert_nearest(t, 1, (int[]){2, 3, 4, 5, 0}, 5);
    free(t);
}

static void test_kind_names(void **state)
{
    (void)state;
    assert_string_equal(topo_link_kind_name(UMP_LINK_SELF), "self");
    assert_string_equal(topo_link_kind_name(UMP_LINK_NVLINK), "nvlink");
    assert_string_equal(topo_link_kind_name(UMP_LINK_PCIE), "pcie");
    assert_string_equal(topo_link_kind_name(UMP_LINK_HOST), "host");
    assert_string_equal(topo_link_kind_name(UMP_LINK_SYS), "sys");
    assert_non_null(topo_link_kind_name(UMP_LINK_KINDS));
    assert_non_null(topo_link_kind_name(-1));
}

static void test_uniform(void **state)
{
    struct ump_topology *t = new_topo();
    (void)state;

    topo_make_uniform(t, 4, 3 * GiB);
    assert_sane(t);
    assert_string_equal(t->name, "sim-4");
    assert_string_equal(t->source, "generated");
    assert_int_equal(t->ndev, 4);
    assert_int_equal(t->nnuma, 1);
    assert_true(t->local_bw_gbs == 4000);
    for (int i = 0; i < 4; i++) {
        assert_true(t->dev[i].mem == 3 * GiB);
        assert_int_equal(t->dev[i].numa, 0);
        assert_string_equal(t->dev[i].model, "sim");
        assert_string_equal(t->dev[i].pci, "");
        for (int j = 0; j < 4; j++)
            if (i != j)
                assert_link(t, i, j, UMP_LINK_NVLINK, 450, true);
    }
    assert_nearest(t, 2, (int[]){0, 1, 3}, 3);

    topo_make_uniform(t, UMP_MAX_DEVICES, GiB);
    assert_sane(t);
    assert_int_equal(t->ndev, UMP_MAX_DEVICES);
    assert_link(t, 0, UMP_MAX_DEVICES - 1, UMP_LINK_NVLINK, 450, true);

    topo_make_uniform(t, 1, GiB);
    assert_sane(t);
    assert_string_equal(t->name, "sim-1");
    assert_int_equal(topo_nearest(t, 0, (int[1]){0}), 0);
    free(t);
}

/* --- files and resolution ------------------------------------------------ */

/* A scratch folder per test, removed by the teardown even when an assertion
 * ends the test early; the environment is restored with it. */
struct scratch {
    char dir[32];
    char *saved_env;
    struct ump_topology *t;
    char *text;
};

static const char *const scratch_files[] = {
    "err.topo", "nul.topo", "max.topo", "big.topo", "mine.topo", "plain",
    "fifo.topo",
};

static int scratch_setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    const char *env = getenv("UMPOOL_TOPOLOGY_DIR");

    if (!s)
        return -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/umpool-topo-XXXXXX");
    s->t = malloc(sizeof(*s->t));
    s->saved_env = env ? strdup(env) : NULL;
    if (!s->t || (env && !s->saved_env) || !mkdtemp(s->dir)) {
        free(s->saved_env);
        free(s->t);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    struct scratch *s = *state;
    char path[96];

    for (size_t i = 0; i < sizeof(scratch_files) / sizeof(*scratch_files);
         i++) {
        snprintf(path, sizeof(path), "%s/%s", s->dir, scratch_files[i]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/dirname", s->dir);
    rmdir(path);
    if (s->saved_env)
        setenv("UMPOOL_TOPOLOGY_DIR", s->saved_env, 1);
    else
        unsetenv("UMPOOL_TOPOLOGY_DIR");
    int ret = rmdir(s->dir);
    free(s->saved_env);
    free(s->text);
    free(s->t);
    free(s);
    return ret;
}

static void write_file(const char *dir, const char *name, const char *text,
                       size_t len)
{
    char path[96];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static const char small_topo[] = "device 0-1 mem 1G numa 0\n";

static void test_load_file(void **state)
{
    struct scratch *s = *state;
    struct ump_topology *t = s->t;
    const char *dir = s->dir;
    size_t big = (1u << 20) + 1;
    char path[96], where[128];
    struct capture c;

    /* A missing file names the path. */
    snprintf(path, sizeof(path), "%s/absent.topo", dir);
    assert_int_equal(CAPTURE(&c, topo_load_file(path, t)), -ENOENT);
    assert_non_null(strstr(c.text, path));
    assert_int_equal(count_lines(c.text), 1);

    /* An error in a file carries the path and the line. */
    static const char err_text[] = "name e\n\ndevice 0 mem 1G numa 0 numa 0\n";
    write_file(dir, "err.topo", err_text, sizeof(err_text) - 1);
    snprintf(path, sizeof(path), "%s/err.topo", dir);
    assert_int_equal(CAPTURE(&c, topo_load_file(path, t)), -EINVAL);
    snprintf(where, sizeof(where), "%s:3: duplicate numa", path);
    assert_non_null(strstr(c.text, where));

    /* A nul byte is refused at its line. */
    static const char nul_text[] = "device 0 mem 1G numa 0\n# \0x\n";
    write_file(dir, "nul.topo", nul_text, sizeof(nul_text) - 1);
    snprintf(path, sizeof(path), "%s/nul.topo", dir);
    assert_int_equal(CAPTURE(&c, topo_load_file(path, t)), -EINVAL);
    snprintf(where, sizeof(where), "%s:2: ", path);
    assert_non_null(strstr(c.text, where));

    /* Exactly 1 MiB is accepted; one byte more is not. */
    s->text = malloc(big);
    assert_non_null(s->text);
    memset(s->text, '#', big);
    memcpy(s->text, small_topo, sizeof(small_topo) - 1);
    s->text[big - 2] = '\n';
    write_file(dir, "max.topo", s->text, big - 1);
    snprintf(path, sizeof(path), "%s/max.topo", dir);
    assert_int_equal(topo_load_file(path, t), 0);
    assert_int_equal(t->ndev, 2);
    assert_string_equal(t->name, "max");
    assert_string_equal(t->source, path);

    write_file(dir, "big.topo", s->text, big);
    snprintf(path, sizeof(path), "%s/big.topo", dir);
    memset(t, 0x5a, sizeof(*t));
    assert_int_equal(CAPTURE(&c, topo_load_file(path, t)), -EFBIG);
    assert_non_null(strstr(c.text, path));
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(t->ndev, 0x5a5a5a5a);

    /* A folder is not a file. */
    assert_true(CAPTURE(&c, topo_load_file(dir, t)) < 0);
    assert_int_equal(count_lines(c.text), 1);
}

static void test_resolve(void **state)
{
    struct scratch *s = *state;
    const char *dir = s->dir;
    char want[96], path[96], sub[96];
    struct capture c;

    write_file(dir, "mine.topo", small_topo, sizeof(small_topo) - 1);
    write_file(dir, "plain", small_topo, sizeof(small_topo) - 1);
    assert_int_equal(setenv("UMPOOL_TOPOLOGY_DIR", dir, 1), 0);

    snprintf(want, sizeof(want), "%s/mine.topo", dir);
    assert_int_equal(topo_resolve("mine", path, sizeof(path)), 0);
    assert_string_equal(path, want);
    memset(path, 0, sizeof(path));
    assert_int_equal(topo_resolve("mine.topo", path, sizeof(path)), 0);
    assert_string_equal(path, want);
    assert_int_equal(topo_load_file(path, s->t), 0);
    assert_string_equal(s->t->name, "mine");

    snprintf(want, sizeof(want), "%s/plain", dir);
    assert_int_equal(topo_resolve("plain", path, sizeof(path)), 0);
    assert_string_equal(path, want);

    /* A name with a '/' is a path, used as it is. */
    memset(path, 0, sizeof(path));
    assert_int_equal(topo_resolve(want, path, sizeof(path)), 0);
    assert_string_equal(path, want);

    /* Too small a buffer: an error, and nothing written. */
    memset(path, 'z', sizeof(path));
    assert_int_equal(CAPTURE(&c, topo_resolve("mine", path, strlen(dir) + 5)),
                     -ENAMETOOLONG);
    assert_int_equal(count_lines(c.text), 1);
    assert_int_equal(path[0], 'z');

    /* Not found: one line naming the name and both folders. */
    assert_int_equal(CAPTURE(&c, topo_resolve("no-such-machine", path,
                                              sizeof(path))), -ENOENT);
    assert_int_equal(count_lines(c.text), 1);
    assert_non_null(strstr(c.text, "no-such-machine"));
    assert_non_null(strstr(c.text, dir));
    assert_non_null(strstr(c.text, UMP_TOPOLOGY_DIR));

    /* A missing path, and a folder given as a path. */
    snprintf(want, sizeof(want), "%s/absent.topo", dir);
    assert_int_equal(CAPTURE(&c, topo_resolve(want, path, sizeof(path))),
                     -ENOENT);
    assert_non_null(strstr(c.text, want));
    assert_int_equal(CAPTURE(&c, topo_resolve(dir, path, sizeof(path))),
                     -EISDIR);
    assert_int_equal(count_lines(c.text), 1);

    /* A folder that has the topology's name is not a match. */
    snprintf(sub, sizeof(sub), "%s/dirname", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(CAPTURE(&c, topo_resolve("dirname", path, sizeof(path))),
                     -ENOENT);
}

/* A test that would block forever fails instead: SIGALRM ends the program
 * with a message (the harness counts it as a failure). */
static void on_alarm(int sig)
{
    static const char msg[] = "test_topology: blocked on a fifo for 10 s\n";

    (void)sig;
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(99);
}

/* A FIFO (or any file that is not regular) is refused at once, with one
 * line: opening it for reading used to wait for a writer forever. */
static void test_not_regular(void **state)
{
    struct scratch *s = *state;
    struct ump_topology *t = s->t;
    char path[96], out[96];
    struct capture c;

    snprintf(path, sizeof(path), "%s/fifo.topo", s->dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    signal(SIGALRM, on_alarm);
    alarm(10);

    memset(t, 0x5a, sizeof(*t));
    assert_int_equal(CAPTURE(&c, topo_load_file(path, t)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_non_null(strstr(c.text, path));
    assert_non_null(strstr(c.text, "fifo"));
    assert_int_equal(t->ndev, 0x5a5a5a5a);

    /* Named as a path: refused by the resolution already. */
    assert_int_equal(CAPTURE(&c, topo_resolve(path, out, sizeof(out))),
                     -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_non_null(strstr(c.text, "not a regular file"));

    /* Found by name in a folder: not a match. */
    assert_int_equal(setenv("UMPOOL_TOPOLOGY_DIR", s->dir, 1), 0);
    assert_int_equal(CAPTURE(&c, topo_resolve("fifo", out, sizeof(out))),
                     -ENOENT);
    assert_int_equal(count_lines(c.text), 1);

    /* A character device. */
    assert_int_equal(CAPTURE(&c, topo_load_file("/dev/null", t)), -EINVAL);
    assert_int_equal(count_lines(c.text), 1);
    assert_non_null(strstr(c.text, "device"));

    /* And through the public API: the pool is refused, not stuck. */
    char conf[160];
    ump_pool_t *pool = NULL;
    snprintf(conf, sizeof(conf), "backend:sim,sim_topology:%s", path);
    assert_true(CAPTURE(&c, ump_pool_create(conf, &pool)) < 0);
    assert_null(pool);
    assert_non_null(strstr(c.text, path));

    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_h200),
        cmocka_unit_test(test_pcie_4gpu),
        cmocka_unit_test(test_nvlink_pairs),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_ranges_and_lists),
        cmocka_unit_test(test_override_order),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_null_args),
        cmocka_unit_test(test_nearest_order),
        cmocka_unit_test(test_kind_names),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test_setup_teardown(test_load_file, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_resolve, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_not_regular, scratch_setup,
                                        scratch_teardown),
    };
    const char *dir = getenv("UMPOOL_TOPOLOGY_DIR");
    int failed;

#ifdef UMP_TEST_TOPOLOGY_DIR
    if (!dir || !*dir) {
        setenv("UMPOOL_TOPOLOGY_DIR", UMP_TEST_TOPOLOGY_DIR, 1);
        dir = UMP_TEST_TOPOLOGY_DIR;
    }
#endif
    if (!dir || !*dir) {
        shipped_missing = true;
        fprintf(stderr, "test_topology: UMPOOL_TOPOLOGY_DIR is not set: the "
                        "shipped topology files are skipped\n");
    }
    log_set_level(UMP_LOG_WARN);
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed ? failed : shipped_missing ? 77 : 0;
}
