/*
 * libumpool-preload: LD_PRELOAD=libumpool-preload.so program. It
 * interposes dlopen only. CUDA 12/13 programs, static or shared cudart,
 * dlopen("libcuda.so.1") and take every driver entry point through
 * cuGetProcAddress found with dlsym on that handle; so a request for
 * libcuda.so.1 (or libcuda.so) gets the handle of libumpool-preload-cuda.so
 * instead, an empty library whose dependencies are this one, then the real
 * libcuda.so.1: dlsym on it searches breadth first, so it finds umpool's
 * version of an intercepted call here, and every other symbol in the real
 * driver. A program linked against libcuda by name binds to this
 * library's exports the same way (LD_PRELOAD comes first). Both routes lead
 * to cuGetProcAddress here (intercept.c), which answers the intercepted
 * names with umpool's versions and forwards the rest.
 *
 * Lazy: no constructor. A program that never asks for libcuda (or calls
 * an intercepted entry point) loads nothing more and makes no pool. The
 * pool is made on the first intercepted call, from UMPOOL_CONF; its own
 * driver calls go to the real driver through the backend's table (and its
 * dlopen of libcuda passes through here untouched: the thread is marked
 * busy meanwhile).
 *
 * Not covered: a program that opens libcuda with dlmopen or RTLD_DEEPBIND
 * (it gets the real driver), or fetches a driver symbol with dlsym from a
 * handle of the real driver it got otherwise.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

#define EXPORT __attribute__((visibility("default")))

/* Initial-exec: the library is preloaded (its TLS is in the static block),
 * so the flag is one load; read and written around every interposed call. */
_Thread_local int preload_depth __attribute__((tls_model("initial-exec")));

/* --- dlopen ------------------------------------------------------------- */

typedef void *dlopen_fn(const char *, int);

static dlopen_fn *real_dlopen(void)
{
    static dlopen_fn *fn;
    if (!fn) {
        void *sym = dlsym(RTLD_NEXT, "dlopen");
        memcpy(&fn, &sym, sizeof(fn));
    }
    return fn;
}

void *preload_real_dlopen(const char *file, int flags)
{
    return real_dlopen()(file, flags);
}

/* Which of umpool's libraries stands for file: libumpool-preload-cuda.so
 * for libcuda, libumpool-preload-nvml.so for NVML; NULL: none. */
static const char *stand_in(const char *file)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (!strcmp(base, "libcuda.so.1") || !strcmp(base, "libcuda.so"))
        return "libumpool-preload-cuda.so";
    if (!strcmp(base, "libnvidia-ml.so.1") || !strcmp(base, "libnvidia-ml.so"))
        return "libumpool-preload-nvml.so";
    return NULL;
}

/* The folder this library was loaded from: libumpool-preload-cuda.so is
 * installed (and built) beside it. */
static char dir_buf[4096];

static void find_dir(void)
{
    Dl_info info;
    if (!dladdr((void *)find_dir, &info) || !info.dli_fname)
        return;
    snprintf(dir_buf, sizeof(dir_buf), "%s", info.dli_fname);
    char *slash = strrchr(dir_buf, '/');
    if (slash)
        *slash = '\0';
    else
        dir_buf[0] = '\0';
}

/* dlopen of libcuda or NVML, not from umpool itself: the handle of its
 * stand-in, with the caller's flags. Where that does not load (no real
 * driver), the real dlopen of what was asked, so that the program sees the
 * error it would without umpool. */
static void *open_cuda(const char *file, int flags)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s%s%s", dir_buf, dir_buf[0] ? "/" : "",
             stand_in(file));
    /* RTLD_NOLOAD: a handle only if the library is loaded already; then
     * the stand-in's, loaded now if need be. */
    if (flags & RTLD_NOLOAD) {
        void *l = real_dlopen()(file, flags);
        if (!l)
            return NULL;
        flags &= ~RTLD_NOLOAD;
    }
    /* A path names which driver: load that one first, so that the
     * stand-in's dependency (the soname libcuda.so.1) is it. */
    void *pinned = strchr(file, '/') ? real_dlopen()(file, RTLD_NOW |
                                                         RTLD_LOCAL)
                                     : NULL;
    (void)pinned; /* kept loaded: the stand-in depends on it */
    void *h = real_dlopen()(path, flags);
    return h ? h : real_dlopen()(file, flags);
}

/* Which function dlopen(file, flags) is: the real one, or open_cuda. The
 * real one must be reached by a jump, not a call: glibc's dlopen finds the
 * caller (its RUNPATH, its namespace) from its return address, which must
 * stay the program's. */
__attribute__((used)) static void *dlopen_target(const char *file, int flags)
{
    (void)flags;
    if (file && !preload_depth && stand_in(file))
        return (void *)open_cuda;
    return (void *)real_dlopen();
}

#if defined(__x86_64__)
/* dlopen(file, flags): asks dlopen_target with the same arguments, then
 * jumps to its answer with them, leaving the caller's return address in
 * place (a tail call C cannot promise). The stack is aligned for the call:
 * 8 at entry, 3 pushes' worth. */
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, @function\n"
        "dlopen:\n"
        "    push %rdi\n"
        "    push %rsi\n"
        "    sub $8, %rsp\n"
        "    call dlopen_target\n"
        "    add $8, %rsp\n"
        "    pop %rsi\n"
        "    pop %rdi\n"
        "    jmp *%rax\n"
        ".size dlopen, .-dlopen\n");
#else
/* Elsewhere, a plain call: the real dlopen sees this library as the
 * caller (RUNPATH lookups of bare names from the program may differ). */
EXPORT void *dlopen(const char *file, int flags)
{
    dlopen_fn *fn;
    void *t = dlopen_target(file, flags);
    memcpy(&fn, &t, sizeof(fn));
    return fn(file, flags);
}
#endif

/* --- the real driver ---------------------------------------------------- */

static struct preload_real real;
static bool have_real;

static void load_real(void)
{
    preload_enter();
    void *h = real_dlopen()("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        void *sym = dlsym(h, "cuGetProcAddress_v2");
        memcpy(&real.getproc, &sym, sizeof(real.getproc));
        sym = dlsym(h, "cuGetProcAddress");
        memcpy(&real.getproc_v1, &sym, sizeof(real.getproc_v1));
    }
    if (real.getproc) {
        struct {
            const char *name;
            void *p;
        } t[] = {{"cuCtxGetDevice", &real.ctx_get_device},
                 {"cuEventCreate", &real.event_create},
                 {"cuEventRecord", &real.event_record},
                 {"cuEventQuery", &real.event_query},
                 {"cuEventDestroy", &real.event_destroy},
                 {"cuDeviceGetDefaultMemPool",
                  &real.device_get_default_mem_pool},
                 {"cuDeviceGetByPCIBusId", &real.device_by_pci},
                 {"cuStreamGetCtx", &real.stream_get_ctx},
                 {"cuCtxGetCurrent", &real.ctx_get_current},
                 {"cuCtxSetCurrent", &real.ctx_set_current}};
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            void *fn = NULL;
            real.getproc(t[i].name, &fn, 12000, 0, NULL);
            memcpy(t[i].p, &fn, sizeof(fn));
        }
        have_real = real.ctx_get_device != NULL;
    }
    preload_leave();
}

const struct preload_real *_Atomic preload_real_ptr;

const struct preload_real *preload_real_load(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_real);
    if (!have_real)
        return NULL;
    atomic_store_explicit(&preload_real_ptr, &real, memory_order_release);
    return &real;
}

/* --- the pool ----------------------------------------------------------- */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
ump_pool_t *_Atomic preload_pool_ptr;
/* pool_failed: read without the lock by every call once it is set */
static _Atomic bool pool_failed;
static bool pool_made;

#define MAX_ENTRIES 64
static atomic_ulong served[MAX_ENTRIES], forwarded[MAX_ENTRIES];

/* Counted only when reported (UMPOOL_PRELOAD_LOG): an atomic add per call
 * is a tenth of an interposed allocation's time. */
_Atomic bool preload_counting;

void preload_count_add(int entry, bool was_served)
{
    if (entry >= 0 && entry < MAX_ENTRIES)
        atomic_fetch_add_explicit(was_served ? &served[entry]
                                             : &forwarded[entry],
                                  1, memory_order_relaxed);
}

static void report(void)
{
    fprintf(stderr, "umpool-preload: %s\n",
            pool_made ? "calls served by the pool / forwarded to the driver"
                 : "no pool was made; calls forwarded to the driver");
    for (int i = 0; i < intercept_count() && i < MAX_ENTRIES; i++) {
        unsigned long s = served[i], f = forwarded[i];
        if (s || f)
            fprintf(stderr, "umpool-preload:   %-26s %10lu %10lu\n",
                    intercept_name(i), s, f);
    }
}

/* The pool lives until the process ends: at exit another thread may still
 * be inside an interposed call (or a later exit handler, cudart's, may
 * free through it), so destroying it there would pull it from under them.
 * Its published segment is unlinked at exit, as every pool's that was not
 * destroyed (lib/publish). */

bool preload_overflow;

/* Is the last value of key in the configuration string conf (its
 * documented form: "key:value,...", a later item overriding an earlier
 * one) value? */
static bool conf_says(const char *conf, const char *key, const char *value)
{
    bool says = false;
    size_t kl = strlen(key), vl = strlen(value);
    for (const char *item = conf; item && *item;) {
        const char *end = strchr(item, ',');
        size_t len = end ? (size_t)(end - item) : strlen(item);
        if (len > kl && !strncmp(item, key, kl) && item[kl] == ':')
            says = len == kl + 1 + vl && !strncmp(item + kl + 1, value, vl);
        item = end ? end + 1 : NULL;
    }
    return says;
}

ump_pool_t *preload_pool_make(void)
{
    ump_pool_t *p = atomic_load_explicit(&preload_pool_ptr,
                                         memory_order_acquire);
    if (p || pool_failed)
        return p;
    /* Busy before the lock: a signal handler's call meanwhile goes to the
     * driver instead of waiting for the lock its own thread holds. */
    preload_enter();
    pthread_mutex_lock(&pool_lock);
    if (!preload_pool_ptr && !pool_failed) {
        const char *log = getenv("UMPOOL_PRELOAD_LOG");
        if (log && *log && strcmp(log, "0")) {
            preload_counting = true;
            atexit(report);
        }
        /* UMPOOL_CONF is read by ump_pool_create itself; the backend is
         * cuda unless it says otherwise. The policy is local, whatever it
         * says: a cuMemAlloc lands on the current device, as the driver's
         * would (intercept.c adds no spilling unless overflow:host asks
         * to go past the device), and the pool's default
         * policy is what the hot path uses without a look-up by name. */
        const char *conf = getenv("UMPOOL_CONF");
        bool has_backend = conf && strstr(conf, "backend:");
        /* Published with the pool (release): read after it. */
        preload_overflow = conf_says(conf, "overflow", "host");
        ump_pool_t *made = NULL;
        /* The process's pool, shared with the PyTorch and CuPy plug-ins:
         * whoever comes first makes it (their configuration then). */
        int rc = ump_process_pool(has_backend ? "policy:local"
                                              : "policy:local,backend:cuda",
                                  &made);
        if (rc) {
            fprintf(stderr, "umpool-preload: no pool (%s): the program's "
                    "calls go to the driver\n", ump_strerror(rc));
            pool_failed = true;
        } else {
            atomic_store_explicit(&preload_pool_ptr, made,
                                  memory_order_release);
            pool_made = true;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    preload_leave();
    return preload_pool_ptr;
}

/* For tests and tools in the process: the pool the preload made (NULL
 * before the first intercepted call), to read its statistics. */
EXPORT ump_pool_t *umpool_preload_pool(void)
{
    return atomic_load_explicit(&preload_pool_ptr, memory_order_acquire);
}
