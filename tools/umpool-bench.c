/*
 * umpool-bench: timings and a narrated demo, on the public API only.
 *
 *   alloc  alloc+free latency of a cached size: ump_alloc/ump_free next to
 *          glibc malloc/free and jemalloc mallocx/dallocx, 1 and N threads.
 *   demo   a short narrated tour of a simulated 8-GPU node: placement, a
 *          tensor spanning GPUs, stitching, statistics, trim.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "umpool.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define EXIT_USAGE 2
#define MAX_SIZES 32
#define MAX_THREADS 256

/* Timing method of the alloc scenario; printed with every result. */
#define BATCH_PAIRS 64
#define WARMUP_PAIRS (4 * BATCH_PAIRS)
#define WARMUP_MAX_NS 50000000ull
/* Batches of slow pairs are shortened to about this. */
#define BATCH_MAX_NS 1000000ull
#define DEFAULT_ITERS 200000
/* Slow cells (an allocator that maps on every call) stop early, so that the
 * default run stays short; the pair count actually timed is reported. */
#define CELL_MAX_NS 500000000ull

#define ALLOC_CONFIG "backend:sim,sim_devices:1,sim_device_mem:8G"
#define DEMO_CONFIG "backend:sim,sim_topology:dgx-h200,sim_device_mem:2G"
#define STITCH_CONFIG "backend:sim,sim_devices:1,sim_device_mem:256M"

struct opts {
    bool json;
    const char *config; /* NULL: the scenario's default */
    const char *scenario;
    size_t sizes[MAX_SIZES];
    int nsizes;
    int threads;
    uint64_t iters;
    bool alloc_opts; /* an alloc-only option was given */
};

/* ---- small helpers ------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
            "       umpool-bench --help\n"
            "\n"
            "scenarios:\n"
            "  alloc   alloc+free latency of a cached size: ump_alloc/\n"
            "          ump_free, glibc malloc/free and jemalloc mallocx/\n"
            "          dallocx (loaded with dlopen), with 1 and N threads\n"
            "    --sizes LIST   comma-separated sizes, K/M/G suffixes\n"
            "                   (default 256,64K,1M,64M)\n"
            "    --threads N    threads of the second run (default 2)\n"
            "    --iters N      timed pairs per thread and cell (default %d)\n"
            "  demo    narrated run over a simulated 8-GPU node\n"
            "\n"
            "options:\n"
            "  --json         one JSON object on stdout instead of text\n"
            "  --config STR   pool configuration \"key:value,...\"\n"
            "                 (alloc: \"%s\",\n"
            "                  demo: \"%s\")\n"
            "  --help         this text\n"
            "\n"
            "exit status: 0 ok, 1 failure, 2 usage error\n",
            DEFAULT_ITERS, ALLOC_CONFIG, DEMO_CONFIG);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    fputs("usage: umpool-bench [--json] [--config STR] SCENARIO [options]\n"
          "scenarios: alloc, demo; see umpool-bench --help\n", stderr);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Writes size in binary units: "256 B", "64 KiB", "1.5 GiB". */
static const char *fmt_size(size_t size, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    size_t unit = 1;

    while (u + 1 < sizeof(units) / sizeof(units[0]) && size >= unit * 1024) {
        unit *= 1024;
        u++;
    }
    if (size % unit == 0)
        snprintf(buf, len, "%zu %s", size / unit, units[u]);
    else
        snprintf(buf, len, "%.2f %s", (double)size / (double)unit, units[u]);
    return buf;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Parses a decimal count; false on junk, sign, or overflow. */
static bool parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *v_p = v;
    return true;
}

/* Parses "256", "64K", "1M", "2GiB" (binary units). */
static bool parse_size(const char *s, size_t *size_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return false;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v == 0 || v > (SIZE_MAX >> shift))
        return false;
    *size_p = (size_t)v << shift;
    return true;
}

static bool parse_sizes(const char *list, struct opts *o)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    if (strlen(list) >= sizeof(buf))
        return false;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_SIZES || !parse_size(tok, &o->sizes[n]))
            return false;
        n++;
    }
    if (n == 0)
        return false;
    o->nsizes = n;
    return true;
}

/* 0 on success, EXIT_USAGE after printing why, -1 after --help. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    static const size_t default_sizes[] = {256, 64 * KiB, 1 * MiB, 64 * MiB};

    memset(o, 0, sizeof(*o));
    o->threads = 2;
    o->iters = DEFAULT_ITERS;
    o->nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
    memcpy(o->sizes, default_sizes, sizeof(default_sizes));

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        bool takes_value;

        if (a[0] != '-' || a[1] == '\0') {
            if (o->scenario) {
                usage_error("unexpected argument '%s'", a);
                return EXIT_USAGE;
            }
            o->scenario = a;
            continue;
        }
        /* "--opt=value" and "--opt value" both work. */
        if (eq && (size_t)(eq - a) < sizeof(name)) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a);
        }
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(name, "--json")) {
            if (val) {
                usage_error("--json takes no value");
                return EXIT_USAGE;
            }
            o->json = true;
            continue;
        }
        takes_value = !strcmp(name, "--config") || !strcmp(name, "--sizes") ||
                      !strcmp(name, "--threads") || !strcmp(name, "--iters");
        if (!takes_value) {
            usage_error("unknown option '%s'", a);
            return EXIT_USAGE;
        }
        if (!val) {
            if (i + 1 >= argc) {
                usage_error("%s needs a value", name);
                return EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (!strcmp(name, "--config")) {
            o->config = val;
        } else if (!strcmp(name, "--sizes")) {
            if (!parse_sizes(val, o)) {
                usage_error("bad --sizes '%s' (sizes > 0 like 256,64K,1M, "
                            "at most %d)", val, MAX_SIZES);
                return EXIT_USAGE;
            }
            o->alloc_opts = true;
        } else if (!strcmp(name, "--threads")) {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > MAX_THREADS) {
                usage_error("bad --threads '%s' (1..%d)", val, MAX_THREADS);
                return EXIT_USAGE;
            }
            o->threads = (int)v;
            o->alloc_opts = true;
        } else {
            uint64_t v;

            if (!parse_u64(val, &v) || v < 1 || v > (1ull << 32)) {
                usage_error("bad --iters '%s' (1..%llu)", val, 1ull << 32);
                return EXIT_USAGE;
            }
            o->iters = v;
            o->alloc_opts = true;
        }
    }
    if (!o->scenario) {
        usage_error("no scenario given");
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- alloc: the allocators ---------------------------------------------- */

enum alloc_kind { A_UMP, A_MALLOC, A_JEMALLOC, A_COUNT };
static const char *const kind_name[A_COUNT] = {"ump", "malloc", "jemalloc"};
static const char *const kind_calls[A_COUNT] = {"ump_alloc/ump_free",
                                                "malloc/free",
                                                "mallocx/dallocx"};

typedef void *(*mallocx_fn)(size_t size, int flags);
typedef void (*dallocx_fn)(void *ptr, int flags);

struct bench_ctx {
    ump_pool_t *pool;
    void *je_handle; /* NULL: jemalloc not available, see je_why */
    mallocx_fn je_mallocx;
    dallocx_fn je_dallocx;
    char je_why[512];
};

#define REEXEC_ENV "UMPOOL_BENCH_STATIC_TLS"
#define TLS_TUNABLE "glibc.rtld.optional_static_tls=65536"

/*
 * libjemalloc.so.2 uses initial-exec TLS, which dlopen can place only in the
 * static TLS room glibc reserves at start-up, usually too small for it. The
 * room is a start-up tunable, so the one way to get it is to run again with
 * GLIBC_TUNABLES extended; it does not change glibc's malloc. Returns only
 * when that cannot be done.
 */
static void reexec_for_tls(char **argv)
{
    const char *old = getenv("GLIBC_TUNABLES");
    char *val;
    size_t len;

    if (getenv(REEXEC_ENV))
        return;
    len = (old ? strlen(old) + 1 : 0) + sizeof(TLS_TUNABLE);
    val = malloc(len);
    if (!val)
        return;
    snprintf(val, len, "%s%s%s", old ? old : "", old ? ":" : "", TLS_TUNABLE);
    if (setenv("GLIBC_TUNABLES", val, 1) == 0 &&
        setenv(REEXEC_ENV, "1", 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", argv);
    }
    /* Still here: carry on without jemalloc, with the environment as it was. */
    if (old)
        setenv("GLIBC_TUNABLES", old, 1);
    else
        unsetenv("GLIBC_TUNABLES");
    unsetenv(REEXEC_ENV);
    free(val);
}

/*
 * jemalloc is loaded at run time, RTLD_LOCAL: linking it would replace
 * glibc's malloc in the whole process and spoil the malloc column. Call it
 * before anything that an exec would lose (pools, threads, output).
 */
static void jemalloc_load(struct bench_ctx *ctx, char **argv)
{
    const char *err;
    void *h;

    dlerror();
    h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h && (err = dlerror()) && strstr(err, "static TLS")) {
        reexec_for_tls(argv);
        h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        err = dlerror();
        snprintf(ctx->je_why, sizeof(ctx->je_why), "%s",
                 err ? err : "dlopen libjemalloc.so.2 failed");
        return;
    }
    ctx->je_mallocx = (mallocx_fn)dlsym(h, "mallocx");
    ctx->je_dallocx = (dallocx_fn)dlsym(h, "dallocx");
    if (!ctx->je_mallocx || !ctx->je_dallocx) {
        snprintf(ctx->je_why, sizeof(ctx->je_why),
                 "libjemalloc.so.2 has no mallocx/dallocx");
        dlclose(h);
        return;
    }
    ctx->je_handle = h;
}

/*
 * Runs n alloc+free pairs; 0 or a negative errno. The pointer goes to a
 * volatile local so that the compiler keeps every call, and stays in this
 * thread's stack so that threads share no cache line.
 */
static int run_pairs(const struct bench_ctx *ctx, enum alloc_kind kind,
                     size_t size, uint64_t n)
{
    void *volatile sink = NULL;

    switch (kind) {
    case A_UMP:
        for (uint64_t i = 0; i < n; i++) {
            void *p;
            int rc = ump_alloc(ctx->pool, size, NULL, &p);

            if (rc)
                return rc;
            sink = p;
            rc = ump_free(ctx->pool, p);
            if (rc)
                return rc;
        }
        break;
    case A_MALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p = malloc(size);

            if (!p)
                return -ENOMEM;
            sink = p;
            free(p);
        }
        break;
    case A_JEMALLOC:
        for (uint64_t i = 0; i < n; i++) {
            void *p = ctx->je_mallocx(size, 0);

            if (!p)
                return -ENOMEM;
            sink = p;
            ctx->je_dallocx(p, 0);
        }
        break;
    default:
        return -EINVAL;
    }
    (void)sink;
    return 0;
}

/* The workers of one cell wait at this gate so that all start together. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;
    bool open;
};

struct worker {
    const struct bench_ctx *ctx;
    struct gate *gate;
    enum alloc_kind kind;
    size_t size;
    uint64_t pairs;
    uint64_t batch;   /* pairs per batch */
    double *batch_ns; /* ns per pair of each batch; the worker allocates it */
    size_t nbatches;
    uint64_t done;
    uint64_t t_start, t_end;
    int err;
};

/*
 * Warms up (the first calls fill the caches under test) and picks the batch
 * size: BATCH_PAIRS, fewer when a pair is so slow that a batch would last
 * over BATCH_MAX_NS (the clock's cost is then negligible anyway, and the
 * cell's time limit is checked often enough).
 */
static int warm_up(struct worker *w)
{
    uint64_t t0 = now_ns(), t1 = t0, deadline = t0 + WARMUP_MAX_NS;
    uint64_t n = 0, per_pair;
    int rc;

    while (n < WARMUP_PAIRS && t1 < deadline) {
        rc = run_pairs(w->ctx, w->kind, w->size, 1);
        if (rc)
            return rc;
        /* The first pair fills caches: not a sample of the steady state. */
        if (n++ == 0)
            t0 = now_ns();
        t1 = now_ns();
    }
    per_pair = n > 1 ? (t1 - t0) / (n - 1) : t1 - t0;
    w->batch = BATCH_PAIRS;
    if (per_pair * BATCH_PAIRS > BATCH_MAX_NS)
        w->batch = per_pair < BATCH_MAX_NS ? BATCH_MAX_NS / per_pair : 1;
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t left = w->pairs, deadline;
    size_t nb = 0;

    w->err = warm_up(w);
    if (!w->err) {
        w->batch_ns = malloc((size_t)((w->pairs + w->batch - 1) / w->batch) *
                             sizeof(*w->batch_ns));
        if (!w->batch_ns)
            w->err = -ENOMEM;
    }
    pthread_mutex_lock(&w->gate->lock);
    w->gate->ready++;
    pthread_cond_broadcast(&w->gate->cond);
    while (!w->gate->open)
        pthread_cond_wait(&w->gate->cond, &w->gate->lock);
    pthread_mutex_unlock(&w->gate->lock);

    w->t_start = now_ns();
    deadline = w->t_start + CELL_MAX_NS;
    while (!w->err && left) {
        uint64_t n = left < w->batch ? left : w->batch;
        uint64_t b0 = now_ns();
        int rc = run_pairs(w->ctx, w->kind, w->size, n);
        uint64_t b1 = now_ns();

        if (rc) {
            w->err = rc;
            break;
        }
        w->batch_ns[nb++] = (double)(b1 - b0) / (double)n;
        left -= n;
        if (b1 >= deadline)
            break;
    }
    w->t_end = now_ns();
    w->nbatches = nb;
    w->done = w->pairs - left;
    return NULL;
}

struct cell {
    bool valid;
    double med_ns, p99_ns;
    double mpairs_s; /* all threads together */
    uint64_t pairs;  /* timed, all threads together */
    size_t batches;
    uint64_t batch_pairs; /* smallest batch of the cell's threads */
    bool capped;     /* stopped by CELL_MAX_NS before --iters pairs */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int gate_init(struct gate *g)
{
    int rc = pthread_mutex_init(&g->lock, NULL);

    if (rc)
        return -rc;
    rc = pthread_cond_init(&g->cond, NULL);
    if (rc) {
        pthread_mutex_destroy(&g->lock);
        return -rc;
    }
    g->ready = 0;
    g->open = false;
    return 0;
}

static void gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

/* Waits for the started workers to warm up, then lets them all go. */
static void gate_open(struct gate *g, int started)
{
    pthread_mutex_lock(&g->lock);
    while (g->ready < started)
        pthread_cond_wait(&g->cond, &g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* One allocator, one size, nthreads threads; fills *c. 0 or negative errno. */
static int run_cell(const struct bench_ctx *ctx, enum alloc_kind kind,
                    size_t size, int nthreads, uint64_t pairs, struct cell *c)
{
    struct worker *w;
    pthread_t *tid;
    double *all = NULL;
    struct gate gate;
    uint64_t t0 = UINT64_MAX, t1 = 0, done = 0, batch = BATCH_PAIRS;
    size_t nb = 0;
    int started = 0, rc;

    w = calloc((size_t)nthreads, sizeof(*w));
    tid = calloc((size_t)nthreads, sizeof(*tid));
    if (!w || !tid) {
        rc = -ENOMEM;
        goto out_free;
    }
    rc = gate_init(&gate);
    if (rc)
        goto out_free;
    for (int i = 0; i < nthreads; i++) {
        w[i] = (struct worker){.ctx = ctx, .gate = &gate, .kind = kind,
                               .size = size, .pairs = pairs};
        rc = pthread_create(&tid[i], NULL, worker_main, &w[i]);
        if (rc) {
            rc = -rc;
            break;
        }
        started++;
    }
    gate_open(&gate, started);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    gate_destroy(&gate);
    for (int i = 0; !rc && i < started; i++) {
        rc = w[i].err;
        nb += w[i].nbatches;
    }
    if (rc)
        goto out_free;

    /* All threads' batches in one array, so that one sort covers them. */
    all = malloc(nb * sizeof(*all));
    if (!all) {
        rc = -ENOMEM;
        goto out_free;
    }
    nb = 0;
    for (int i = 0; i < nthreads; i++) {
        memcpy(all + nb, w[i].batch_ns, w[i].nbatches * sizeof(*all));
        nb += w[i].nbatches;
        done += w[i].done;
        t0 = w[i].t_start < t0 ? w[i].t_start : t0;
        t1 = w[i].t_end > t1 ? w[i].t_end : t1;
        batch = w[i].batch < batch ? w[i].batch : batch;
    }
    qsort(all, nb, sizeof(*all), cmp_double);
    c->valid = true;
    c->med_ns = nb % 2 ? all[nb / 2] : (all[nb / 2 - 1] + all[nb / 2]) / 2;
    /* Nearest rank: the smallest batch time at or above 99 % of batches. */
    c->p99_ns = all[(nb * 99 + 99) / 100 - 1];
    c->mpairs_s = t1 > t0 ? (double)done * 1e3 / (double)(t1 - t0) : 0;
    c->pairs = done;
    c->batches = nb;
    c->batch_pairs = batch;
    c->capped = done < pairs * (uint64_t)nthreads;
    rc = 0;
out_free:
    free(all);
    for (int i = 0; w && i < started; i++)
        free(w[i].batch_ns);
    free(tid);
    free(w);
    return rc;
}

/* ---- alloc: the scenario ------------------------------------------------ */

struct alloc_row {
    size_t size;
    int threads;
    struct cell cell[A_COUNT];
};

static void print_num_or_na(double v, bool ok, int width, int prec)
{
    if (ok)
        printf(" %*.*f", width, prec, v);
    else
        printf(" %*s", width, "n/a");
}

static void json_cell(const struct cell *c, const struct cell *one)
{
    if (!c->valid) {
        printf("null");
        return;
    }
    printf("{\"median_ns\": %.1f, \"p99_ns\": %.1f, \"mpairs_per_s\": %.3f, "
           "\"pairs\": %" PRIu64 ", \"batches\": %zu, \"batch_pairs\": %"
           PRIu64 ", \"capped\": %s",
           c->med_ns, c->p99_ns, c->mpairs_s, c->pairs, c->batches,
           c->batch_pairs, c->capped ? "true" : "false");
    if (one && one->valid && one->mpairs_s > 0)
        printf(", \"scaling\": %.2f", c->mpairs_s / one->mpairs_s);
    printf("}");
}

static void alloc_print_json(const struct opts *o, const char *config,
                             const struct bench_ctx *ctx,
                             const struct alloc_row *rows, int nrows)
{
    printf("{\"scenario\": \"alloc\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, config);
    printf(", \"method\": {\"warmup_pairs\": %d, \"warmup_max_s\": %.2f, "
           "\"batch_pairs\": %d, \"batch_max_s\": %.3f, \"iters\": %" PRIu64
           ", \"cell_max_s\": %.1f, \"clock\": \"CLOCK_MONOTONIC\", "
           "\"stats\": \"median and p99 of ns per pair over batches\"}",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, BATCH_PAIRS,
           (double)BATCH_MAX_NS / 1e9, o->iters, (double)CELL_MAX_NS / 1e9);
    printf(", \"threads\": %d, \"jemalloc\": {\"available\": %s",
           o->threads, ctx->je_handle ? "true" : "false");
    if (!ctx->je_handle) {
        printf(", \"reason\": ");
        json_string(stdout, ctx->je_why);
    } else if (getenv(REEXEC_ENV)) {
        printf(", \"glibc_tunables\": \"" TLS_TUNABLE "\"");
    }
    printf("}, \"results\": [");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct alloc_row *one = row->threads > 1 ? &rows[r - 1] : NULL;
        const struct cell *u = &row->cell[A_UMP], *j = &row->cell[A_JEMALLOC];

        printf("%s\n  {\"size\": %zu, \"threads\": %d", r ? "," : "",
               row->size, row->threads);
        for (int k = 0; k < A_COUNT; k++) {
            printf(", \"%s\": ", kind_name[k]);
            json_cell(&row->cell[k], one ? &one->cell[k] : NULL);
        }
        printf(", \"ump_over_jemalloc\": ");
        if (u->valid && j->valid && j->med_ns > 0)
            printf("%.3g", u->med_ns / j->med_ns);
        else
            printf("null");
        printf("}");
    }
    printf("\n]}\n");
}

static void alloc_print_table(const struct opts *o, const char *config,
                              const struct bench_ctx *ctx,
                              const struct alloc_row *rows, int nrows)
{
    char sz[32];
    bool capped = false, multi = o->threads > 1;

    printf("umpool-bench alloc (umpool %s): pool config \"%s\"\n",
           ump_version_string(), config);
    printf("method: per cell and thread, %d warm-up pairs (at most %.2f s), "
           "then %" PRIu64 " alloc+free\n"
           "  pairs timed in batches of %d with "
           "clock_gettime(CLOCK_MONOTONIC), at most %.1f s per cell\n"
           "  (smaller batches when a pair is slow, so that a batch lasts "
           "about %.0f ms);\n"
           "  ns per pair = batch time / pairs in the batch; median and p99 "
           "over batches;\n"
           "  N threads: each runs the same loop, all start together, their "
           "batches pooled;\n"
           "  the allocations are not touched (the allocator alone is "
           "timed).\n",
           WARMUP_PAIRS, (double)WARMUP_MAX_NS / 1e9, o->iters, BATCH_PAIRS,
           (double)CELL_MAX_NS / 1e9, (double)BATCH_MAX_NS / 1e6);
    if (ctx->je_handle)
        printf("jemalloc: mallocx/dallocx from libjemalloc.so.2 (dlopen%s)\n",
               getenv(REEXEC_ENV) ? ", GLIBC_TUNABLES=" TLS_TUNABLE : "");
    else
        printf("jemalloc: n/a (%s)\n", ctx->je_why);

    printf("\nlatency, ns per alloc+free pair\n");
    printf("%10s %3s | %10s %10s | %10s %10s | %12s %10s | %12s\n", "size",
           "thr", "ump med", "p99", "malloc med", "p99", "jemalloc med", "p99",
           "ump/jemalloc");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *row = &rows[r];
        const struct cell *u = &row->cell[A_UMP], *m = &row->cell[A_MALLOC];
        const struct cell *j = &row->cell[A_JEMALLOC];

        printf("%10s %3d |", fmt_size(row->size, sz, sizeof(sz)),
               row->threads);
        print_num_or_na(u->med_ns, u->valid, 10, 1);
        print_num_or_na(u->p99_ns, u->valid, 10, 1);
        printf(" |");
        print_num_or_na(m->med_ns, m->valid, 10, 1);
        print_num_or_na(m->p99_ns, m->valid, 10, 1);
        printf(" |");
        print_num_or_na(j->med_ns, j->valid, 12, 1);
        print_num_or_na(j->p99_ns, j->valid, 10, 1);
        printf(" |");
        if (u->valid && j->valid && j->med_ns > 0)
            printf(" %#12.3g\n", u->med_ns / j->med_ns);
        else
            printf(" %12s\n", "n/a");
        for (int k = 0; k < A_COUNT; k++)
            capped |= row->cell[k].capped;
    }

    printf("\nthroughput, M pairs/s (all threads)");
    if (multi)
        printf("; scaling = %d-thread / 1-thread", o->threads);
    printf("\n%10s |", "size");
    for (int k = 0; k < A_COUNT; k++) {
        printf(" %8s 1T", kind_name[k]);
        if (multi)
            printf(" %6dT %7s", o->threads, "scaling");
        printf(" |");
    }
    printf("\n");
    for (int r = 0; r < nrows; r++) {
        const struct alloc_row *one = &rows[r];
        const struct alloc_row *many = multi ? &rows[r + 1] : NULL;

        if (one->threads != 1)
            continue;
        printf("%10s |", fmt_size(one->size, sz, sizeof(sz)));
        for (int k = 0; k < A_COUNT; k++) {
            const struct cell *c1 = &one->cell[k];
            const struct cell *cn = many ? &many->cell[k] : NULL;
            bool ok = c1->valid && cn && cn->valid && c1->mpairs_s > 0;

            print_num_or_na(c1->mpairs_s, c1->valid, 11, 3);
            if (multi) {
                print_num_or_na(cn->mpairs_s, cn->valid, 7, 3);
                print_num_or_na(ok ? cn->mpairs_s / c1->mpairs_s : 0, ok, 7,
                                2);
            }
            printf(" |");
        }
        printf("\n");
    }
    if (capped)
        printf("\nnote: some cells hit the %.1f s limit before %" PRIu64
               " pairs per thread;\n      --json shows the pairs timed.\n",
               (double)CELL_MAX_NS / 1e9, o->iters);
}

static int scenario_alloc(const struct opts *o, char **argv)
{
    const char *config = o->config ? o->config : ALLOC_CONFIG;
    int nthr = o->threads > 1 ? 2 : 1;
    int nrows = o->nsizes * nthr, ret = 1, rc;
    struct bench_ctx ctx;
    struct alloc_row *rows;
    char sz[32];

    memset(&ctx, 0, sizeof(ctx));
    rows = calloc((size_t)nrows, sizeof(*rows));
    if (!rows) {
        fprintf(stderr, "umpool-bench: out of memory\n");
        return 1;
    }
    jemalloc_load(&ctx, argv);
    rc = ump_pool_create(config, &ctx.pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: ump_pool_create(\"%s\"): %s\n", config,
                ump_strerror(rc));
        goto out_je;
    }

    for (int s = 0; s < o->nsizes; s++) {
        for (int t = 0; t < nthr; t++) {
            struct alloc_row *row = &rows[s * nthr + t];

            row->size = o->sizes[s];
            row->threads = t ? o->threads : 1;
            /* The allocators take turns at each size and thread count, so
             * that a noisy moment hurts one cell, not one column. */
            for (int k = 0; k < A_COUNT; k++) {
                if (k == A_JEMALLOC && !ctx.je_handle)
                    continue;
                rc = run_cell(&ctx, (enum alloc_kind)k, row->size,
                              row->threads, o->iters, &row->cell[k]);
                if (rc) {
                    fprintf(stderr, "umpool-bench: alloc: %s of %s with %d "
                            "thread(s): %s\n", kind_calls[k],
                            fmt_size(row->size, sz, sizeof(sz)), row->threads,
                            k == A_UMP ? ump_strerror(rc) : strerror(-rc));
                    goto out_pool;
                }
            }
        }
    }
    if (o->json)
        alloc_print_json(o, config, &ctx, rows, nrows);
    else
        alloc_print_table(o, config, &ctx, rows, nrows);
    ret = 0;
out_pool:
    rc = ump_pool_destroy(ctx.pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: ump_pool_destroy: %s\n",
                ump_strerror(rc));
        ret = 1;
    }
out_je:
    if (ctx.je_handle)
        dlclose(ctx.je_handle);
    free(rows);
    return ret;
}

/* ---- demo --------------------------------------------------------------- */

struct demo {
    const struct opts *o;
    ump_pool_t *pool;
    int ndev;
    void **tensor;  /* one per device */
    size_t tensor_size;
    void *big;
    size_t big_size;
    ump_pool_t *spool; /* the stitching pool */
    void **holes;
    size_t nholes, holes_cap;
    void *stitched;
    /* For --json. */
    ump_stats_t *dev_stats;
    ump_stats_t total;
    bool stitch_ok;
    size_t stitch_bytes;
    uint64_t chunks_before, chunks_after;
    size_t cached_before, cached_after;
};

static void say(const struct demo *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const struct demo *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o->json)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* Reports a failed call; returns 1, the exit status. */
static int demo_fail(const char *what, int rc)
{
    fprintf(stderr, "umpool-bench: demo: %s: %s\n", what, ump_strerror(rc));
    if (rc == -ENOENT)
        fprintf(stderr, "umpool-bench: demo: (simulated topologies are read "
                "from UMPOOL_TOPOLOGY_DIR when set)\n");
    return 1;
}

static int demo_broken(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int demo_broken(const char *fmt, ...)
{
    va_list ap;

    fputs("umpool-bench: demo: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    return 1;
}

static int demo_create(struct demo *d)
{
    const char *config = d->o->config ? d->o->config : DEMO_CONFIG;
    int rc;

    say(d, "== (a) create the pool\n");
    rc = ump_pool_create(config, &d->pool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_device_count(d->pool);
    if (rc < 0)
        return demo_fail("ump_device_count", rc);
    if (rc == 0)
        return demo_broken("the pool has no device");
    d->ndev = rc;
    if (!d->o->config)
        say(d, "Simulated node: the DGX H200 topology (8 GPUs on NVSwitch) "
               "with each GPU's memory\nshrunk to 2 GiB so that the demo "
               "runs in a second.\nConfig: \"%s\"\n", config);
    else
        say(d, "Pool created with config \"%s\".\n", config);
    say(d, "ump_device_count: the pool spans %d device(s), one virtual "
           "address space.\n\n", d->ndev);
    d->tensor = calloc((size_t)d->ndev, sizeof(*d->tensor));
    d->dev_stats = calloc((size_t)d->ndev, sizeof(*d->dev_stats));
    if (!d->tensor || !d->dev_stats)
        return demo_fail("calloc", -ENOMEM);
    return 0;
}

static int demo_place(struct demo *d)
{
    ump_stats_t st;
    char sz[32];
    int rc;

    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    /* Small enough for any device the user may configure. */
    d->tensor_size = st.capacity / 32 < 64 * MiB ? st.capacity / 32 : 64 * MiB;
    if (d->tensor_size == 0)
        d->tensor_size = 1;
    say(d, "== (b) one %s tensor on each device\n",
        fmt_size(d->tensor_size, sz, sizeof(sz)));
    say(d, "Each ump_alloc gets hints.device = d; ump_ptr_info tells where "
           "the bytes are.\n");
    for (int dev = 0; dev < d->ndev; dev++) {
        ump_hints_t hints = UMP_HINTS_INIT;
        ump_ptr_info_t info;

        hints.device = dev;
        rc = ump_alloc(d->pool, d->tensor_size, &hints, &d->tensor[dev]);
        if (rc)
            return demo_fail("ump_alloc", rc);
        rc = ump_ptr_info(d->pool, d->tensor[dev], &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        say(d, "  asked for GPU %d: %p, ump_ptr_info: device %d\n", dev,
            d->tensor[dev], info.device);
        if (info.device != dev || info.tier != UMP_TIER_DEVICE)
            return demo_broken("tensor asked for GPU %d landed on device %d "
                               "(tier %d)", dev, info.device, info.tier);
    }
    say(d, "\n");
    return 0;
}

/* Prints one run of same-device chunks of the big tensor. */
static void demo_run(const struct demo *d, size_t start, size_t end, int dev,
                     unsigned chunks)
{
    char sz[32];

    say(d, "  [%p, +%s) on ", (void *)((char *)d->big + start),
        fmt_size(end - start, sz, sizeof(sz)));
    if (dev >= 0)
        say(d, "GPU %d", dev);
    else
        say(d, "no device (tier %d)", -dev - 1);
    say(d, " (%u chunk%s)\n", chunks, chunks == 1 ? "" : "s");
}

/* Writes a pattern across [lo, hi) of the big tensor from the CPU and reads
 * it back; 0 when every byte came back. */
static int demo_pattern(struct demo *d, size_t lo, size_t hi)
{
    size_t len = hi - lo, n = len / sizeof(uint64_t);
    uint64_t *buf = malloc(len);
    int ret = 0;

    if (!buf)
        return demo_fail("malloc", -ENOMEM);
    for (size_t i = 0; i < n; i++)
        buf[i] = (lo / sizeof(uint64_t) + i) * 0x9e3779b97f4a7c15ull;
    memcpy((char *)d->big + lo, buf, n * sizeof(uint64_t));
    if (memcmp((char *)d->big + lo, buf, n * sizeof(uint64_t)) != 0)
        ret = demo_broken("pattern read back differs from what was written");
    free(buf);
    return ret;
}

static int demo_span(struct demo *d)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    ump_stats_t st;
    size_t off = 0, run_start = 0, boundary = 0, lo, hi;
    unsigned run_chunks = 0;
    int run_dev = 0, runs = 0, first_dev = 0, second_dev = 0, rc;
    char a[32], b[32];

    say(d, "== (c) a tensor larger than one device\n");
    if (d->ndev < 2) {
        say(d, "Only one device: nothing to span, skipped.\n\n");
        return 0;
    }
    rc = ump_stats(d->pool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->big_size = st.capacity + st.capacity / 2;
    say(d, "GPU 0 has %s free of %s. ",
        fmt_size(st.capacity - st.mapped_bytes, a, sizeof(a)),
        fmt_size(st.capacity, b, sizeof(b)));
    say(d, "Asking GPU 0 for %s: when GPU 0 is full,\nthe allocation "
           "continues on the nearest devices, at the next addresses.\n",
        fmt_size(d->big_size, a, sizeof(a)));
    hints.device = 0;
    rc = ump_alloc(d->pool, d->big_size, &hints, &d->big);
    if (rc)
        return demo_fail("ump_alloc", rc);
    say(d, "Walking it chunk by chunk with ump_ptr_info (chunk_base, "
           "chunk_size):\n");
    while (off < d->big_size) {
        ump_ptr_info_t info;
        size_t next;
        int dev;

        rc = ump_ptr_info(d->pool, (char *)d->big + off, &info);
        if (rc)
            return demo_fail("ump_ptr_info", rc);
        if (info.base != d->big || info.size != d->big_size)
            return demo_broken("ump_ptr_info of byte %zu gives base %p size "
                               "%zu, not %p size %zu", off, info.base,
                               info.size, d->big, d->big_size);
        next = (size_t)((char *)info.chunk_base + info.chunk_size -
                        (char *)d->big);
        if (info.chunk_size == 0 || next <= off)
            return demo_broken("ump_ptr_info of byte %zu gives an empty chunk",
                               off);
        if (next > d->big_size)
            next = d->big_size;
        dev = info.tier == UMP_TIER_DEVICE ? info.device : -1 - info.tier;
        if (run_chunks && dev != run_dev) {
            demo_run(d, run_start, off, run_dev, run_chunks);
            if (runs++ == 0) {
                boundary = off;
                first_dev = run_dev;
                second_dev = dev;
            }
            run_start = off;
            run_chunks = 0;
        }
        run_dev = dev;
        run_chunks++;
        off = next;
    }
    demo_run(d, run_start, off, run_dev, run_chunks);
    runs++;

    /* Touch a window, not 3 GiB: the boundary is what is interesting. */
    lo = boundary > 4 * MiB ? boundary - 4 * MiB : 0;
    hi = boundary + 4 * MiB < d->big_size ? boundary + 4 * MiB : d->big_size;
    if (demo_pattern(d, lo, hi))
        return 1;
    if (runs > 1)
        say(d, "The CPU wrote a pattern of %s across the GPU %d / GPU %d "
               "boundary (at +%s)\nthrough the pointer and read every byte "
               "back intact: one pointer, %d devices.\n\n",
            fmt_size(hi - lo, a, sizeof(a)), first_dev, second_dev,
            fmt_size(boundary, b, sizeof(b)), runs);
    else
        say(d, "It fit on one device; the CPU wrote a pattern over its first "
               "%s and read it back intact.\n\n", fmt_size(hi, a, sizeof(a)));
    return 0;
}

static int demo_stitch(struct demo *d)
{
    ump_stats_t st;
    size_t nfreed = 0;
    char a[32], b[32];
    int rc;

    say(d, "== (d) stitching freed holes into one allocation\n");
    rc = ump_pool_create(STITCH_CONFIG, &d->spool);
    if (rc)
        return demo_fail("ump_pool_create", rc);
    rc = ump_stats(d->spool, 0, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    for (;;) {
        void *p;

        /* A device that never says -ENOMEM would loop forever. */
        if (d->nholes > st.capacity / (2 * MiB) + 64)
            return demo_broken("%zu allocations of 2 MiB on a %s device and "
                               "still no -ENOMEM", d->nholes,
                               fmt_size(st.capacity, a, sizeof(a)));
        if (d->nholes == d->holes_cap) {
            size_t cap = d->holes_cap ? d->holes_cap * 2 : 64;
            void **h = realloc(d->holes, cap * sizeof(*h));

            if (!h)
                return demo_fail("realloc", -ENOMEM);
            d->holes = h;
            d->holes_cap = cap;
        }
        rc = ump_alloc(d->spool, 2 * MiB, NULL, &p);
        if (rc == -ENOMEM)
            break;
        if (rc)
            return demo_fail("ump_alloc", rc);
        d->holes[d->nholes++] = p;
    }
    say(d, "A fresh pool, \"%s\":\nfilled its device with %zu "
           "allocations of 2 MiB until -ENOMEM.\n", STITCH_CONFIG, d->nholes);
    for (size_t i = 0; i < d->nholes; i += 2) {
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
        nfreed++;
    }
    d->stitch_bytes = nfreed * 2 * MiB;
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_before = st.chunks_created;
    say(d, "Freed every other one: %zu holes of 2 MiB, %s in all, none of "
           "them adjacent.\n", nfreed, fmt_size(d->stitch_bytes, a, sizeof(a)));
    if (d->stitch_bytes == 0)
        return demo_broken("nothing could be allocated on the stitching pool");
    rc = ump_alloc(d->spool, d->stitch_bytes, NULL, &d->stitched);
    if (rc == -ENOMEM)
        return demo_broken("stitching failed: one allocation of %s did not "
                           "fit in %zu freed holes of 2 MiB",
                           fmt_size(d->stitch_bytes, a, sizeof(a)), nfreed);
    if (rc)
        return demo_fail("ump_alloc", rc);
    rc = ump_stats(d->spool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->chunks_after = st.chunks_created;
    say(d, "Allocating %s in one piece: chunks_created before %" PRIu64
           ", after %" PRIu64 ".\n", fmt_size(d->stitch_bytes, b, sizeof(b)),
        d->chunks_before, d->chunks_after);
    if (d->chunks_after > d->chunks_before)
        return demo_broken("stitching created %" PRIu64 " new chunks instead "
                           "of reusing the freed ones",
                           d->chunks_after - d->chunks_before);
    d->stitch_ok = true;
    say(d, "Stitching works: the %s allocation succeeded at %p,\nbuilt "
           "from the %zu freed chunks; no new physical memory was created."
           "\n\n",
        fmt_size(d->stitch_bytes, a, sizeof(a)), d->stitched, nfreed);

    rc = ump_free(d->spool, d->stitched);
    if (rc)
        return demo_fail("ump_free", rc);
    d->stitched = NULL;
    for (size_t i = 0; i < d->nholes; i++) {
        if (!d->holes[i])
            continue;
        rc = ump_free(d->spool, d->holes[i]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->holes[i] = NULL;
    }
    rc = ump_pool_destroy(d->spool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->spool = NULL;
    return 0;
}

static void demo_stats_row(const struct demo *d, const char *name,
                           const ump_stats_t *st)
{
    char c[32], l[32], m[32], k[32], p[32];

    say(d, "%6s | %9s %9s %9s %9s %9s | %6" PRIu64 " %6" PRIu64 " %6" PRIu64
           " | %6" PRIu64 " %6" PRIu64 "\n", name,
        fmt_size(st->capacity, c, sizeof(c)),
        fmt_size(st->live_bytes, l, sizeof(l)),
        fmt_size(st->mapped_bytes, m, sizeof(m)),
        fmt_size(st->cached_bytes, k, sizeof(k)),
        fmt_size(st->peak_bytes, p, sizeof(p)), st->live_count,
        st->alloc_count, st->free_count, st->chunks_created,
        st->chunks_released);
}

static int demo_stats(struct demo *d)
{
    char name[16];
    int rc;

    say(d, "== (e) statistics (ump_stats), per device and for the whole "
           "pool\n");
    say(d, "%6s | %9s %9s %9s %9s %9s | %6s %6s %6s | %6s %6s\n", "device",
        "capacity", "live", "mapped", "cached", "peak", "live#", "allocs",
        "frees", "chunk+", "chunk-");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_stats(d->pool, dev, &d->dev_stats[dev]);
        if (rc)
            return demo_fail("ump_stats", rc);
        snprintf(name, sizeof(name), "GPU %d", dev);
        demo_stats_row(d, name, &d->dev_stats[dev]);
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &d->total);
    if (rc)
        return demo_fail("ump_stats", rc);
    demo_stats_row(d, "pool", &d->total);
    say(d, "\n");
    return 0;
}

static int demo_trim(struct demo *d)
{
    ump_stats_t st;
    char a[32], b[32];
    int rc;

    say(d, "== (f) trim\n");
    if (d->big) {
        rc = ump_free(d->pool, d->big);
        if (rc)
            return demo_fail("ump_free", rc);
        d->big = NULL;
        say(d, "Freed the big tensor: its chunks stay mapped and cached for "
               "the next allocation.\n");
    }
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_before = st.cached_bytes;
    rc = ump_trim(d->pool);
    if (rc)
        return demo_fail("ump_trim", rc);
    rc = ump_stats(d->pool, UMP_DEVICE_ALL, &st);
    if (rc)
        return demo_fail("ump_stats", rc);
    d->cached_after = st.cached_bytes;
    say(d, "ump_trim gave cached memory back to the devices: cached %s "
           "before, %s after.\n",
        fmt_size(d->cached_before, a, sizeof(a)),
        fmt_size(d->cached_after, b, sizeof(b)));
    if (d->cached_before > 0 && d->cached_after >= d->cached_before)
        return demo_broken("ump_trim released no cached memory");
    for (int dev = 0; dev < d->ndev; dev++) {
        rc = ump_free(d->pool, d->tensor[dev]);
        if (rc)
            return demo_fail("ump_free", rc);
        d->tensor[dev] = NULL;
    }
    rc = ump_pool_destroy(d->pool);
    if (rc)
        return demo_fail("ump_pool_destroy", rc);
    d->pool = NULL;
    say(d, "Freed every tensor and destroyed the pool.\n");
    return 0;
}

static void json_stats(const ump_stats_t *st)
{
    printf("{\"capacity\": %zu, \"live_bytes\": %zu, \"mapped_bytes\": %zu, "
           "\"cached_bytes\": %zu, \"peak_bytes\": %zu, "
           "\"live_count\": %" PRIu64 ", \"alloc_count\": %" PRIu64
           ", \"free_count\": %" PRIu64 ", \"chunks_created\": %" PRIu64
           ", \"chunks_released\": %" PRIu64 "}",
           st->capacity, st->live_bytes, st->mapped_bytes, st->cached_bytes,
           st->peak_bytes, st->live_count, st->alloc_count, st->free_count,
           st->chunks_created, st->chunks_released);
}

static void demo_print_json(const struct demo *d)
{
    printf("{\"scenario\": \"demo\", \"config\": ");
    json_string(stdout, d->o->config ? d->o->config : DEMO_CONFIG);
    printf(", \"devices\": %d, \"stitching\": {\"ok\": %s, \"bytes\": %zu, "
           "\"chunks_created_before\": %" PRIu64 ", \"chunks_created_after\": %"
           PRIu64 "}, \"trim\": {\"cached_before\": %zu, \"cached_after\": %zu}"
           ", \"stats\": {\"per_device\": [",
           d->ndev, d->stitch_ok ? "true" : "false", d->stitch_bytes,
           d->chunks_before, d->chunks_after, d->cached_before,
           d->cached_after);
    for (int dev = 0; dev < d->ndev; dev++) {
        printf("%s\n  ", dev ? "," : "");
        json_stats(&d->dev_stats[dev]);
    }
    printf("\n], \"total\": ");
    json_stats(&d->total);
    printf("}}\n");
}

/* Frees whatever a failed step left behind, in reverse order of creation. */
static void demo_cleanup(struct demo *d)
{
    if (d->spool) {
        if (d->stitched)
            ump_free(d->spool, d->stitched);
        for (size_t i = 0; i < d->nholes; i++)
            if (d->holes[i])
                ump_free(d->spool, d->holes[i]);
        ump_pool_destroy(d->spool);
    }
    if (d->pool) {
        if (d->big)
            ump_free(d->pool, d->big);
        for (int dev = 0; d->tensor && dev < d->ndev; dev++)
            if (d->tensor[dev])
                ump_free(d->pool, d->tensor[dev]);
        ump_pool_destroy(d->pool);
    }
    free(d->holes);
    free(d->dev_stats);
    free(d->tensor);
}

static int scenario_demo(const struct opts *o)
{
    struct demo d;
    int ret;

    memset(&d, 0, sizeof(d));
    d.o = o;
    ret = demo_create(&d);
    if (!ret)
        ret = demo_place(&d);
    if (!ret)
        ret = demo_span(&d);
    if (!ret)
        ret = demo_stitch(&d);
    if (!ret)
        ret = demo_stats(&d);
    if (!ret)
        ret = demo_trim(&d);
    if (!ret && o->json)
        demo_print_json(&d);
    demo_cleanup(&d);
    return ret;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);

    if (rc < 0)
        return 0;
    if (rc)
        return rc;
    if (!strcmp(o.scenario, "alloc"))
        rc = scenario_alloc(&o, argv);
    else if (!strcmp(o.scenario, "demo")) {
        if (o.alloc_opts) {
            usage_error("--sizes, --threads and --iters belong to alloc");
            return EXIT_USAGE;
        }
        rc = scenario_demo(&o);
    } else {
        usage_error("unknown scenario '%s'", o.scenario);
        return EXIT_USAGE;
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "umpool-bench: writing output: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}
