/*
 * umpool-inspect: looks at the pools of this user's running programs
 * through the snapshots each pool publishes in /dev/shm (lib/publish.c,
 * layout in lib/snapshot.h): tables, a live view, JSON, Prometheus
 * metrics, a memory map picture, and the machine's device topology.
 *
 * It never trusts a segment (lib/snapshot.c checks every one) and never
 * touches a program beyond asking its pool, through the segment, for a
 * fresh snapshot.
 *
 * Options kept out of the usage text, for tests: --from FILE (show, map:
 * read a snapshot from a file) and --shm-dir DIR (where to look).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "inspect_fmt.h"
#include "inspect_serve.h"
#include "inspect_seg.h"

#define STALE_NS 3000000000ull /* a running writer refreshes every second */

enum {
    O_PID = 1 << 0,
    O_POOL = 1 << 1,
    O_JSON = 1 << 2,
    O_PROM = 1 << 3,
    O_CLEAN = 1 << 4,
    O_SVG = 1 << 5,
    O_TOPOLOGY = 1 << 6,
    O_FROM = 1 << 7,
    O_DIR = 1 << 8,
    O_COUNT = 1 << 9,
    O_INTERVAL = 1 << 10,
    O_LISTEN = 1 << 11,
};

struct opts {
    const char *cmd;
    unsigned given; /* O_* */
    int32_t pid;
    uint64_t pool;
    const char *svg, *topology, *from, *dir, *listen;
    unsigned long count;
    double interval;
};

static void usage(FILE *out)
{
    fprintf(out,
"Usage: umpool-inspect COMMAND [OPTIONS]\n"
"\n"
"Shows the memory pools (libumpool) of your running programs. Every pool\n"
"publishes its statistics in " SNAP_DIR " unless its configuration says\n"
"publish:false.\n"
"\n"
"Commands:\n"
"  list [--json] [--clean]\n"
"      processes and pools, one line each; --clean removes what programs\n"
"      that exited without destroying their pools left behind\n"
"  show [PID] [--pool ID] [--json | --prometheus]\n"
"      per-device and per-tier tables, spill counters and the largest\n"
"      allocations; every running program's pools when PID is left out;\n"
"      --prometheus prints the text exposition format (umpool_* metrics)\n"
"  watch [PID] [--pool ID] [--interval SEC] [--count N]\n"
"      show, refreshed every second (or SEC) until Ctrl-C (or N times)\n"
"  topo [--topology FILE] [--json]\n"
"      how the devices are connected, like nvidia-smi topo -m: this\n"
"      machine's, or a simulated machine's topology file\n"
"  serve [--listen ADDR:PORT]\n"
"      an HTTP exporter for Prometheus: /metrics, refreshed at every\n"
"      scrape, with every running program's pools (show --prometheus);\n"
"      on 127.0.0.1:9466 unless told; until SIGINT or SIGTERM\n"
"  map PID --svg FILE [--pool ID]\n"
"      a picture of each device's memory, coloured by state (used, cached,\n"
"      free, on host, on NVMe); FILE - writes to stdout\n"
"  help\n"
"      this text\n"
"\n"
"Sizes are binary (1 KiB = 1024 bytes). Exit status: 0 when all went well,\n"
"1 when something could not be read or written, 2 for a usage error.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("umpool-inspect: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'umpool-inspect help'.\n", stderr);
    return 2;
}

/* ---- arguments ----------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned allowed;
} commands[] = {
    {"list", O_JSON | O_CLEAN | O_DIR},
    {"show", O_PID | O_POOL | O_JSON | O_PROM | O_FROM | O_DIR},
    {"watch", O_PID | O_POOL | O_COUNT | O_INTERVAL | O_DIR},
    {"topo", O_TOPOLOGY | O_JSON},
    {"map", O_PID | O_POOL | O_SVG | O_FROM | O_DIR},
    {"serve", O_LISTEN | O_DIR},
};

static const struct {
    const char *name;
    unsigned bit;
    bool arg;
} options[] = {
    {"--json", O_JSON, false},         {"--prometheus", O_PROM, false},
    {"--clean", O_CLEAN, false},       {"--svg", O_SVG, true},
    {"--pool", O_POOL, true},          {"--topology", O_TOPOLOGY, true},
    {"--from", O_FROM, true},          {"--shm-dir", O_DIR, true},
    {"--count", O_COUNT, true},        {"-n", O_COUNT, true},
    {"--interval", O_INTERVAL, true}, {"--listen", O_LISTEN, true},
};

static bool parse_u64(const char *s, uint64_t max, uint64_t *v_p)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *v_p = v;
    return true;
}

static int set_option(struct opts *o, unsigned bit, const char *val)
{
    uint64_t v;
    char *end;
    switch (bit) {
    case O_SVG: o->svg = val; break;
    case O_TOPOLOGY: o->topology = val; break;
    case O_FROM: o->from = val; break;
    case O_DIR: o->dir = val; break;
    case O_LISTEN: o->listen = val; break;
    case O_POOL:
        if (!parse_u64(val, UINT64_MAX, &v) || !v)
            return usage_error("bad pool id '%s'", val);
        o->pool = v;
        break;
    case O_COUNT:
        if (!parse_u64(val, 1000000000, &v) || !v)
            return usage_error("bad count '%s'", val);
        o->count = (unsigned long)v;
        break;
    case O_INTERVAL:
        errno = 0;
        o->interval = strtod(val, &end);
        if (errno || *end || end == val || !(o->interval >= 0.1) ||
            o->interval > 3600)
            return usage_error("bad interval '%s' (0.1 to 3600 seconds)",
                               val);
        break;
    default:
        break;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    unsigned allowed = 0;
    for (size_t c = 0; c < ARRAY_LEN(commands); c++)
        if (!strcmp(argv[1], commands[c].name)) {
            o->cmd = commands[c].name;
            allowed = commands[c].allowed;
        }
    if (!o->cmd)
        return usage_error("unknown command '%s'", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            uint64_t pid;
            if ((o->given & O_PID) || !parse_u64(a, INT32_MAX, &pid) || !pid)
                return usage_error("unexpected argument '%s'", a);
            if (!(allowed & O_PID))
                return usage_error("this command takes no PID ('%s')", a);
            o->pid = (int32_t)pid;
            o->given |= O_PID;
            continue;
        }
        size_t k = 0;
        const char *val = NULL;
        for (; k < ARRAY_LEN(options); k++) {
            size_t len = strlen(options[k].name);
            if (!strncmp(a, options[k].name, len) &&
                (!a[len] || (options[k].arg && a[len] == '='))) {
                val = a[len] ? a + len + 1 : NULL;
                break;
            }
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (k == ARRAY_LEN(options))
            return usage_error("unknown option '%s'", a);
        if (!(allowed & options[k].bit))
            return usage_error("%s does not go with this command", a);
        if (options[k].arg && !val) {
            if (i + 1 == argc)
                return usage_error("%s needs a value", a);
            val = argv[++i];
        }
        o->given |= options[k].bit;
        int rc = set_option(o, options[k].bit, val);
        if (rc)
            return rc;
    }
    if ((o->given & O_JSON) && (o->given & O_PROM))
        return usage_error("%s", "--json and --prometheus exclude each other");
    return 0;
}

/* ---- loading pools ------------------------------------------------------- */

struct loaded {
    struct seg *segs;
    size_t n;
    bool failed; /* a selected segment could not be read */
};

static bool selected(const struct opts *o, const struct seg *s)
{
    if (s->hidden)
        return false;
    if (o->pid)
        return s->pid == o->pid && (!o->pool || s->pool_id == o->pool);
    return !o->pool || s->pool_id == o->pool;
}

/* Scans and reads the segments the options select (hidden ones too with
 * `hidden`); reports each that cannot be read on stderr, and once per run
 * those left out because another user owns them. */
static int load(const struct opts *o, bool hidden, struct loaded *l)
{
    static bool warned;
    char err[256], foreign[512];
    struct seg *all;
    size_t n, nforeign;
    int rc = seg_scan(o->dir ? o->dir : SNAP_DIR, (uint32_t)geteuid(), hidden,
                      &all, &n, &nforeign, foreign, sizeof(foreign), err,
                      sizeof(err));
    if (rc) {
        fprintf(stderr, "umpool-inspect: %s\n", err);
        return 1;
    }
    if (nforeign && !warned) {
        fprintf(stderr, "umpool-inspect: warning: skipped %zu segment%s "
                "named for you but owned by another user (%s)\n", nforeign,
                nforeign > 1 ? "s" : "", foreign);
        warned = true;
    }
    uint32_t pid_ns;
    if (snap_pid_ns(&pid_ns))
        pid_ns = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((hidden && all[i].hidden) || selected(o, &all[i]))
            all[k++] = all[i];
    seg_load_all(all, k, true, pid_ns);
    /* A pool destroyed since the scan is gone, not an error. */
    size_t kept = 0;
    for (size_t i = 0; i < k; i++) {
        if (all[i].rc == -ENOENT && !all[i].hidden)
            continue;
        all[kept++] = all[i];
    }
    k = kept;
    l->segs = all;
    l->n = k;
    l->failed = false;
    for (size_t i = 0; i < k; i++) {
        if (!all[i].rc || all[i].hidden)
            continue;
        /* Left by an exited process of another umpool version (an
         * upgrade): nothing running is hidden from us, so a note, not a
         * failure. */
        bool old = all[i].rc == -EPROTO && (all[i].status == SEG_EXITED ||
                                            all[i].status == SEG_REUSED);
        fprintf(stderr, "umpool-inspect: %s%s: %s%s\n",
                old ? "note: " : "", all[i].path, all[i].err,
                old ? "; its process exited (list --clean removes it)" : "");
        l->failed |= !old;
    }
    return 0;
}

static const char *status_name(int status)
{
    return status == SEG_RUNNING  ? "running"
           : status == SEG_EXITED ? "exited"
           : status == SEG_REUSED ? "exited (pid reused)"
                                  : "unknown (other pid namespace)";
}

/* A note for people about a pool's snapshot, or NULL. */
static const char *note(const struct seg *s, char *buf, size_t len)
{
    if (s->status == SEG_EXITED || s->status == SEG_REUSED)
        return "its process exited: the last snapshot it wrote";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t at = s->view.data->updated_ns;
    bool stale = now > at && now - at > STALE_NS;
    if (s->status == SEG_UNKNOWN && stale)
        snprintf(buf, len, "written in another pid namespace, %.0f s ago: "
                 "its process may have exited", (double)(now - at) / 1e9);
    else if (s->status == SEG_UNKNOWN)
        snprintf(buf, len, "written in another pid namespace: whether its "
                 "process runs is unknown");
    else if (stale)
        snprintf(buf, len, "stale: written %.0f s ago (is the program "
                 "stopped?)", (double)(now - at) / 1e9);
    else
        return NULL;
    return buf;
}

/* ---- list ---------------------------------------------------------------- */

static int cmd_list(const struct opts *o)
{
    struct loaded l;
    bool clean = o->given & O_CLEAN, json = o->given & O_JSON;
    if (load(o, clean, &l))
        return 1;
    int rc = l.failed;
    size_t shown = 0;
    if (json)
        printf("{\n  \"pools\": [");
    else
        printf("%7s %6s  %-16s %-7s %7s %10s %10s %10s  %s\n", "PID", "POOL",
               "PROGRAM", "BACKEND", "DEVICES", "CAPACITY", "LIVE", "CACHED",
               "STATUS");
    for (size_t i = 0; i < l.n; i++) {
        struct seg *s = &l.segs[i];
        bool removed = false;
        if (clean && seg_removable(s, (uint32_t)geteuid())) {
            int err = seg_remove(s, (uint32_t)geteuid());
            if (err == 0) {
                removed = true;
                fprintf(stderr, "umpool-inspect: removed %s (process %" PRId32
                        " %s)\n", s->path, s->pid, status_name(s->status));
            } else if (err == -ESTALE) { /* a new process took the name */
                fprintf(stderr, "umpool-inspect: kept %s: replaced since it "
                        "was checked\n", s->path);
            } else if (err != -ENOENT) { /* ENOENT: its exit beat us */
                fprintf(stderr, "umpool-inspect: cannot remove %s: %s\n",
                        s->path, strerror(-err));
                rc = 1;
            }
        }
        if (s->rc)
            continue;
        const struct snap_header *h = s->view.hdr;
        uint64_t cap = 0, live = 0, cached = 0;
        for (uint32_t d = 0; d < h->ndev; d++) {
            cap += s->view.dev[d].capacity;
            live += s->view.dev[d].live_bytes;
            cached += s->view.dev[d].cached_bytes;
        }
        if (json) {
            printf("%s\n    {\"pid\": %" PRId32 ", \"pid_ns\": %" PRIu32
                   ", \"pool\": %" PRIu64 ", \"program\": ",
                   shown ? "," : "", h->pid, h->pid_ns, h->pool_id);
            fmt_json_string(stdout, h->program);
            printf(", \"backend\": ");
            fmt_json_string(stdout, h->backend);
            printf(", \"topology\": ");
            fmt_json_string(stdout, h->topology);
            printf(", \"devices\": %" PRIu32 ", \"capacity\": %" PRIu64
                   ", \"live_bytes\": %" PRIu64 ", \"cached_bytes\": %" PRIu64
                   ", \"status\": \"%s\", \"removed\": %s, \"segment\": ",
                   h->ndev, cap, live, cached,
                   s->status == SEG_RUNNING   ? "running"
                   : s->status == SEG_UNKNOWN ? "unknown"
                                              : "exited",
                   removed ? "true" : "false");
            fmt_json_string(stdout, s->path);
            printf("}");
        } else {
            char a[FMT_SIZE_LEN], b[FMT_SIZE_LEN], c[FMT_SIZE_LEN];
            printf("%7" PRId32 " %6" PRIu64 "  %-16s %-7s %7" PRIu32
                   " %10s %10s %10s  %s%s\n", h->pid, h->pool_id, h->program,
                   h->backend, h->ndev, fmt_size(a, cap), fmt_size(b, live),
                   fmt_size(c, cached), status_name(s->status),
                   removed ? ", removed" : "");
        }
        shown++;
    }
    if (json)
        printf("%s  ]\n}\n", shown ? "\n" : "");
    else if (!shown)
        printf("(no pools)\n");
    seg_free_all(l.segs, l.n);
    return rc;
}

/* ---- show and watch ------------------------------------------------------ */

/* The pools of l that show prints: every readable one for a PID, without
 * one those that run or may (another pid namespace's). */
static size_t pick(const struct opts *o, const struct loaded *l,
                   struct fmt_pool *out, char (*notes)[128])
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct seg *s = &l->segs[i];
        if (s->rc || (!o->pid && s->status != SEG_RUNNING &&
                      s->status != SEG_UNKNOWN))
            continue;
        out[k].v = &s->view;
        out[k].note = note(s, notes[k], sizeof(notes[k]));
        k++;
    }
    return k;
}

static void print_pools(const struct opts *o, const struct fmt_pool *p,
                        size_t n)
{
    if (o->given & O_JSON) {
        fmt_show_json(stdout, p, n);
    } else if (o->given & O_PROM) {
        fmt_prometheus(stdout, p, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (i)
                printf("\n");
            fmt_show(stdout, &p[i]);
        }
    }
}

static int show_from_file(const struct opts *o)
{
    struct snap_view v;
    char err[256];
    if (seg_load_file(o->from, &v, err, sizeof(err))) {
        fprintf(stderr, "umpool-inspect: %s: %s\n", o->from, err);
        return 1;
    }
    struct fmt_pool p = {&v, NULL};
    print_pools(o, &p, 1);
    snap_view_free(&v);
    return 0;
}

static int no_pool(const struct opts *o)
{
    if (o->pool)
        fprintf(stderr, "umpool-inspect: pid %" PRId32 " has no pool %" PRIu64
                " (see umpool-inspect list)\n", o->pid, o->pool);
    else
        fprintf(stderr, "umpool-inspect: pid %" PRId32 " publishes no pool "
                "(is it running, with publish on?)\n", o->pid);
    return 1;
}

/* What show and serve print: the pools load() reads, picked. */
struct picked {
    struct loaded l;
    struct fmt_pool *p;
    char (*notes)[128];
    size_t n;
};

/* 0, or 1 when nothing could be loaded or out of memory (said). */
static int load_picked(const struct opts *o, struct picked *k)
{
    if (load(o, false, &k->l))
        return 1;
    size_t cap = k->l.n ? k->l.n : 1;
    k->p = calloc(cap, sizeof(*k->p));
    k->notes = calloc(cap, sizeof(*k->notes));
    if (!k->p || !k->notes) {
        fprintf(stderr, "umpool-inspect: out of memory\n");
        free(k->notes);
        free(k->p);
        seg_free_all(k->l.segs, k->l.n);
        return 1;
    }
    k->n = pick(o, &k->l, k->p, k->notes);
    return 0;
}

static void picked_free(struct picked *k)
{
    free(k->notes);
    free(k->p);
    seg_free_all(k->l.segs, k->l.n);
}

static int cmd_show(const struct opts *o)
{
    if (o->from)
        return show_from_file(o);
    struct picked k;
    if (load_picked(o, &k))
        return 1;
    int rc = k.l.failed;
    if (k.n || !o->pid)
        print_pools(o, k.p, k.n);
    if (!k.n && o->pid && !k.l.failed)
        rc = no_pool(o);
    else if (!k.n && !o->pid && !(o->given & (O_JSON | O_PROM)))
        printf("(no pools)\n");
    picked_free(&k);
    return rc;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int cmd_watch(const struct opts *o)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool tty = isatty(STDOUT_FILENO);
    double interval = o->given & O_INTERVAL ? o->interval : 1.0;
    struct fmt_prev prev[64];
    size_t nprev = 0;
    int rc = 0;
    for (unsigned long round = 0; !interrupted; round++) {
        struct loaded l;
        if (load(o, false, &l))
            return 1;
        struct fmt_pool *p = calloc(l.n ? l.n : 1, sizeof(*p));
        char (*notes)[128] = calloc(l.n ? l.n : 1, sizeof(*notes));
        if (!p || !notes) {
            free(p);
            free(notes);
            seg_free_all(l.segs, l.n);
            fprintf(stderr, "umpool-inspect: out of memory\n");
            return 1;
        }
        size_t n = pick(o, &l, p, notes);
        time_t t = time(NULL);
        char when[32];
        strftime(when, sizeof(when), "%H:%M:%S", localtime(&t));
        /* Like top: home and clear on a terminal; a rule when piped. */
        if (tty)
            fputs("\033[H\033[2J", stdout);
        else if (round)
            fputs("----\n", stdout);
        printf("umpool-inspect watch, %s, every %g s (Ctrl-C quits)\n\n",
               when, interval);
        for (size_t i = 0; i < n; i++) {
            if (i)
                printf("\n");
            fmt_show(stdout, &p[i]);
            fmt_rates(stdout, p[i].v, prev, &nprev, ARRAY_LEN(prev));
        }
        if (!n)
            printf(o->pid ? "pid %" PRId32 " publishes no pool (yet)\n"
                          : "(no pools)\n", o->pid);
        fflush(stdout);
        rc = l.failed;
        free(notes);
        free(p);
        seg_free_all(l.segs, l.n);
        if (o->count && round + 1 >= o->count)
            break;
        /* Sleep in small steps so that Ctrl-C ends it at once. */
        for (double slept = 0; slept < interval && !interrupted; slept += 0.05)
            nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return rc;
}

/* ---- map --------------------------------------------------------------- */

static int write_svg(const char *path, const struct snap_view *v)
{
    bool to_stdout = !strcmp(path, "-");
    FILE *f = to_stdout ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, "umpool-inspect: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fmt_svg(f, v);
    if (to_stdout ? fflush(f) : fclose(f)) {
        fprintf(stderr, "umpool-inspect: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int cmd_map(const struct opts *o)
{
    if (!o->svg)
        return usage_error("%s", "map needs --svg FILE");
    if (!o->from && !o->pid)
        return usage_error("%s", "map needs a PID");
    if (o->from) {
        struct snap_view v;
        char err[256];
        if (seg_load_file(o->from, &v, err, sizeof(err))) {
            fprintf(stderr, "umpool-inspect: %s: %s\n", o->from, err);
            return 1;
        }
        int rc = write_svg(o->svg, &v);
        snap_view_free(&v);
        return rc;
    }
    struct loaded l;
    if (load(o, false, &l))
        return 1;
    const struct seg *one = NULL;
    size_t readable = 0;
    for (size_t i = 0; i < l.n; i++)
        if (!l.segs[i].rc) {
            readable++;
            one = one ? one : &l.segs[i];
        }
    int rc;
    if (readable > 1) {
        fprintf(stderr, "umpool-inspect: pid %" PRId32 " has %zu pools; pick "
                "one with --pool ID:", o->pid, readable);
        for (size_t i = 0; i < l.n; i++)
            if (!l.segs[i].rc)
                fprintf(stderr, " %" PRIu64, l.segs[i].pool_id);
        fputc('\n', stderr);
        rc = 1;
    } else if (!one) {
        rc = l.failed ? 1 : no_pool(o);
    } else {
        rc = write_svg(o->svg, &one->view) | l.failed;
    }
    seg_free_all(l.segs, l.n);
    return rc;
}

/* ---- serve ----------------------------------------------------------------- */

/* One scrape's page: show --prometheus of every running program's pools. */
static int render_metrics(void *arg, FILE *out)
{
    struct picked k;
    if (load_picked(arg, &k))
        return 1;
    fmt_prometheus(out, k.p, k.n);
    picked_free(&k);
    return k.l.failed;
}

static int cmd_serve(struct opts *o)
{
    return serve_run(o->listen ? o->listen : "127.0.0.1:9466",
                     render_metrics, o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    struct opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (!strcmp(o.cmd, "list"))
        return cmd_list(&o);
    if (!strcmp(o.cmd, "show"))
        return cmd_show(&o);
    if (!strcmp(o.cmd, "watch"))
        return cmd_watch(&o);
    if (!strcmp(o.cmd, "serve"))
        return cmd_serve(&o);
    if (!strcmp(o.cmd, "topo"))
        return fmt_topo(stdout, o.topology, o.given & O_JSON);
    return cmd_map(&o);
}
