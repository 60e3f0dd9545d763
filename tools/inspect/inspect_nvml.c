/*
 * umpool-inspect serve: per-GPU gauges from NVML.
 *
 * NVML is dlopen'ed, never linked, so that the tool builds and runs where
 * no NVIDIA driver is installed; nvml.h is not installed either, so the
 * few declarations needed are written here, with the layouts nvml.h
 * documents (as lib/backend/cuda/cuda_topology.c does). The library is
 * loaded and initialized once, when serve starts, and asked at every
 * scrape, so that a GPU that appears, disappears or stops answering shows
 * on the next page. Scrapes are one at a time (inspect_serve.c), so
 * nothing here locks; NVML itself is thread-safe anyway.
 *
 * A gauge NVML cannot give is left out, never written as 0: 0 % busy or
 * 0 degrees are values a dashboard would believe.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect_nvml.h"

#define NVML_ENV "UMPOOL_NVML_LIBRARY"

/* From nvml.h. */
#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0 /* nvmlTemperatureSensors_t */
#define NVML_UUID_LEN 96       /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
typedef struct nvml_device *nvml_device_t;
struct nvml_utilization { /* nvmlUtilization_t, percent */
    unsigned gpu, memory;
};
struct nvml_pci_info { /* nvmlPciInfo_t */
    char bus_id_legacy[16]; /* "0000:19:00.0" */
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32]; /* "00000000:19:00.0" */
};

/* What was already said on stderr, once for the life of the exporter: a
 * query that fails usually fails at every scrape (a board without a
 * temperature sensor), and a line per scrape would drown stderr. */
enum said {
    SAID_COUNT = 1 << 0,
    SAID_HANDLE = 1 << 1,
    SAID_PCI = 1 << 2,
    SAID_UUID = 1 << 3,
    SAID_UTIL = 1 << 4,
    SAID_TEMP = 1 << 5,
    SAID_NOMEM = 1 << 6,
};

struct nvml_gauges {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int); /* may be absent */
    int (*count)(unsigned *);
    int (*by_index)(unsigned, nvml_device_t *);
    int (*pci)(nvml_device_t, struct nvml_pci_info *);
    int (*uuid)(nvml_device_t, char *, unsigned); /* may be absent */
    int (*utilization)(nvml_device_t, struct nvml_utilization *);
    int (*temperature)(nvml_device_t, int, unsigned *);
    unsigned said; /* enum said */
};

/* One GPU at one scrape. */
struct gpu {
    unsigned index;
    char pci[32];            /* the pools' form; "" when NVML cannot tell */
    char uuid[NVML_UUID_LEN]; /* "" when NVML cannot tell */
    bool have_util, have_temp;
    struct nvml_utilization util;
    unsigned temp;
};

static const struct {
    const char *name, *help;
} families[] = {
    {"umpool_gpu_utilization_ratio",
     "Fraction of the last sample period a kernel ran on the GPU (NVML)"},
    {"umpool_gpu_memory_utilization_ratio",
     "Fraction of the last sample period device memory was read or written "
     "(NVML)"},
    {"umpool_gpu_temperature_celsius", "GPU core temperature (NVML)"},
};

static const char *nvml_error(const struct nvml_gauges *g, int rc)
{
    const char *s = g->error_string ? g->error_string(rc) : NULL;
    return s ? s : "unknown error";
}

/* dlsym into a function pointer of any type (a void * cannot be assigned
 * to one in ISO C). */
static void sym(void *lib, const char *name, void *fn_p, size_t size)
{
    void *p = dlsym(lib, name);
    memcpy(fn_p, &p, size);
}
#define SYM(g, member, name) sym((g)->lib, name, &(g)->member, \
                                 sizeof((g)->member))

struct nvml_gauges *nvml_gauges_open(void)
{
    /* secure_getenv: a library path from the environment is code to run,
     * never to be taken from it in a set-id program. */
    const char *path = secure_getenv(NVML_ENV);
    int rc;
    bool given = path && *path;
    if (!given)
        path = NVML_GAUGES_DEFAULT;
    struct nvml_gauges *g = calloc(1, sizeof(*g));
    if (!g) {
        fprintf(stderr, "umpool-inspect serve: GPU gauges off: out of "
                "memory\n");
        return NULL;
    }
    g->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g->lib) {
        const char *e = dlerror();
        fprintf(stderr, "umpool-inspect serve: GPU gauges off: no NVML "
                "(%s)%s\n", e ? e : path,
                given ? "" : "; " NVML_ENV " names another library");
        free(g);
        return NULL;
    }
    SYM(g, init, "nvmlInit_v2");
    SYM(g, shutdown, "nvmlShutdown");
    SYM(g, error_string, "nvmlErrorString");
    SYM(g, count, "nvmlDeviceGetCount_v2");
    SYM(g, by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(g, pci, "nvmlDeviceGetPciInfo_v3");
    SYM(g, uuid, "nvmlDeviceGetUUID");
    SYM(g, utilization, "nvmlDeviceGetUtilizationRates");
    SYM(g, temperature, "nvmlDeviceGetTemperature");
    static const char *const needed[] = {
        "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature"};
    const bool have[] = {g->init, g->shutdown, g->count, g->by_index,
                         g->pci, g->utilization, g->temperature};
    for (size_t i = 0; i < sizeof(have) / sizeof(have[0]); i++)
        if (!have[i]) {
            fprintf(stderr, "umpool-inspect serve: GPU gauges off: %s has "
                    "no %s (not NVML, or too old)\n", path,
                    needed[i]);
            goto err_close;
        }
    rc = g->init();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "umpool-inspect serve: GPU gauges off: nvmlInit_v2 "
                "of %s failed: %s (error %d)\n", path, nvml_error(g, rc),
                rc);
        goto err_close;
    }
    return g;

err_close:
    dlclose(g->lib);
    free(g);
    return NULL;
}

void nvml_gauges_close(struct nvml_gauges *g)
{
    if (!g)
        return;
    g->shutdown();
    dlclose(g->lib);
    free(g);
}

/* One line on stderr, the first time what fails. */
static void say_once(struct nvml_gauges *g, unsigned what, const char *call,
                     unsigned index, int rc, const char *left_out)
{
    if (g->said & what)
        return;
    g->said |= what;
    fprintf(stderr, "umpool-inspect serve: %s of GPU %u failed: %s (error "
            "%d); %s left out while it fails (said once)\n", call, index,
            nvml_error(g, rc), rc, left_out);
}

/* NVML's bus id ("00000000:19:00.0", 8-digit domain) in the form the
 * pools publish in umpool_device_info's pci_bus_id (cuda_pci_busid_norm
 * in lib/backend/cuda/cuda_topology.c: 4-digit domain at least, lower
 * case), so that a PromQL join on(pci_bus_id) pairs a GPU with the pool
 * devices on it. false when id is not a bus id. */
static bool pci_norm(const char *id, char *out, size_t len)
{
    unsigned dom, bus, dev, fn;
    int end = -1;
    /* Hex digits and separators only: sscanf alone would take blanks,
     * signs and 0x. */
    if (strspn(id, "0123456789abcdefABCDEF:.") != strlen(id) ||
        sscanf(id, "%8x:%2x:%2x.%1x%n", &dom, &bus, &dev, &fn, &end) != 4 ||
        end < 0 || id[end] || dev > 0x1f || fn > 7)
        return false;
    int n = snprintf(out, len, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return n > 0 && (size_t)n < len;
}

/* Asks NVML about GPU i; false when it has no handle for it (then it is
 * left out of the page). */
static bool gpu_query(struct nvml_gauges *g, unsigned i, struct gpu *x)
{
    nvml_device_t h;
    int rc = g->by_index(i, &h);
    memset(x, 0, sizeof(*x));
    x->index = i;
    if (rc != NVML_SUCCESS) {
        say_once(g, SAID_HANDLE, "nvmlDeviceGetHandleByIndex_v2", i, rc,
                 "its gauges are");
        return false;
    }
    struct nvml_pci_info pci;
    memset(&pci, 0, sizeof(pci));
    rc = g->pci(h, &pci);
    if (rc != NVML_SUCCESS) {
        say_once(g, SAID_PCI, "nvmlDeviceGetPciInfo_v3", i, rc,
                 "its pci_bus_id label is");
    } else {
        pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
        pci.bus_id_legacy[sizeof(pci.bus_id_legacy) - 1] = '\0';
        if (!pci_norm(pci.bus_id, x->pci, sizeof(x->pci)) &&
            !pci_norm(pci.bus_id_legacy, x->pci, sizeof(x->pci)))
            x->pci[0] = '\0';
    }
    if (g->uuid) {
        rc = g->uuid(h, x->uuid, sizeof(x->uuid));
        if (rc != NVML_SUCCESS) {
            say_once(g, SAID_UUID, "nvmlDeviceGetUUID", i, rc,
                     "its uuid label is");
            x->uuid[0] = '\0';
        }
        x->uuid[sizeof(x->uuid) - 1] = '\0';
    }
    rc = g->utilization(h, &x->util);
    x->have_util = rc == NVML_SUCCESS;
    if (!x->have_util)
        say_once(g, SAID_UTIL, "nvmlDeviceGetUtilizationRates", i, rc,
                 "its utilization gauges are");
    rc = g->temperature(h, NVML_TEMPERATURE_GPU, &x->temp);
    x->have_temp = rc == NVML_SUCCESS;
    if (!x->have_temp)
        say_once(g, SAID_TEMP, "nvmlDeviceGetTemperature", i, rc,
                 "its temperature gauge is");
    return true;
}

/* A label value in the text format: \, " and newline escaped, other
 * control characters left out (NVML's strings are ASCII; this is only so
 * that a broken one cannot break the page). */
static void label_value(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\' || c == '"')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c >= 0x20 && c != 0x7f)
            fputc(c, out);
    }
}

static void gpu_labels(FILE *out, const struct gpu *x)
{
    fprintf(out, "{gpu=\"%u\"", x->index);
    if (x->pci[0])
        fprintf(out, ",pci_bus_id=\"%s\"", x->pci);
    if (x->uuid[0]) {
        fputs(",uuid=\"", out);
        label_value(out, x->uuid);
        fputc('"', out);
    }
    fputc('}', out);
}

/* Family k's sample of x, when NVML gave it. */
static bool gpu_has(const struct gpu *x, size_t k)
{
    return k < 2 ? x->have_util : x->have_temp;
}

static void gpu_value(FILE *out, const struct gpu *x, size_t k)
{
    if (k == 0)
        fprintf(out, " %.2f\n", (double)x->util.gpu / 100.0);
    else if (k == 1)
        fprintf(out, " %.2f\n", (double)x->util.memory / 100.0);
    else
        fprintf(out, " %u\n", x->temp);
}

void nvml_gauges_render(struct nvml_gauges *g, FILE *out)
{
    if (!g)
        return;
    unsigned n = 0;
    int rc = g->count(&n);
    if (rc != NVML_SUCCESS) {
        if (!(g->said & SAID_COUNT))
            fprintf(stderr, "umpool-inspect serve: nvmlDeviceGetCount_v2 "
                    "failed: %s (error %d); no GPU gauges while it fails "
                    "(said once)\n", nvml_error(g, rc), rc);
        g->said |= SAID_COUNT;
        return;
    }
    if (!n)
        return;
    struct gpu *gpus = calloc(n, sizeof(*gpus));
    if (!gpus) {
        if (!(g->said & SAID_NOMEM))
            fprintf(stderr, "umpool-inspect serve: out of memory for %u "
                    "GPUs' gauges (said once)\n", n);
        g->said |= SAID_NOMEM;
        return;
    }
    size_t m = 0;
    for (unsigned i = 0; i < n; i++)
        if (gpu_query(g, i, &gpus[m]))
            m++;
    /* All samples of a family follow its HELP and TYPE; a family without
     * a sample is left out whole. */
    for (size_t k = 0; k < sizeof(families) / sizeof(families[0]); k++) {
        bool any = false;
        for (size_t j = 0; j < m && !any; j++)
            any = gpu_has(&gpus[j], k);
        if (!any)
            continue;
        fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", families[k].name,
                families[k].help, families[k].name);
        for (size_t j = 0; j < m; j++) {
            if (!gpu_has(&gpus[j], k))
                continue;
            fputs(families[k].name, out);
            gpu_labels(out, &gpus[j]);
            gpu_value(out, &gpus[j], k);
        }
    }
    free(gpus);
}
