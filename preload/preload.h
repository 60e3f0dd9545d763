/*
 * libumpool-preload (LD_PRELOAD interposition at the driver): what its
 * files share. preload.c: the dlopen interposer, the real driver, the
 * process's pool, the counters. intercept.c: the one table of intercepted
 * driver calls and umpool's versions of them.
 *
 * Above the public API only (umpool.h), like the tools.
 */
#ifndef UMP_PRELOAD_H
#define UMP_PRELOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>

#include "umpool.h"

/* The real driver's entry points the interposed calls forward to or use
 * (cuGetProcAddress of the real libcuda, so never umpool's versions). */
struct preload_real {
    CUresult (*getproc)(const char *, void **, int, cuuint64_t,
                        CUdriverProcAddressQueryResult *);
    CUresult (*getproc_v1)(const char *, void **, int, cuuint64_t);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_query)(CUevent);
    CUresult (*event_destroy)(CUevent);
    CUresult (*device_get_default_mem_pool)(CUmemoryPool *, CUdevice);
    CUresult (*device_by_pci)(CUdevice *, const char *);
    CUresult (*stream_get_ctx)(CUstream, CUcontext *);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
};

/* glibc's dlopen (not the interposer). */
void *preload_real_dlopen(const char *file, int flags);

/* Every interposed call reads these two and the counters' switch: once
 * set, each is one load in line (an interposed allocation's own cost is
 * issue 31's), the rest out of line, in preload.c. */
extern const struct preload_real *_Atomic preload_real_ptr;
extern ump_pool_t *_Atomic preload_pool_ptr;
extern _Atomic bool preload_counting;
const struct preload_real *preload_real_load(void);
ump_pool_t *preload_pool_make(void);
void preload_count_add(int entry, bool served);

/* The real driver, loaded once (by the first call that needs it); NULL
 * when there is none (the program's own calls then fail as they would). */
static inline const struct preload_real *preload_real(void)
{
    const struct preload_real *r =
        atomic_load_explicit(&preload_real_ptr, memory_order_acquire);
    return r ? r : preload_real_load();
}

/* The process's pool, made on the first intercepted call from UMPOOL_CONF
 * (default "backend:cuda"); NULL when it cannot be made (logged once: the
 * calls then go to the real driver). */
static inline ump_pool_t *preload_pool(void)
{
    ump_pool_t *p = atomic_load_explicit(&preload_pool_ptr,
                                         memory_order_acquire);
    return p ? p : preload_pool_make();
}
/* UMPOOL_CONF says overflow:host: device allocations may go past the
 * current device (its peers first, then pinned host memory). Set before
 * the pool is published; read after preload_pool() gave the pool. */
extern bool preload_overflow;
/* The pool if made, without making it (exported for tests, to read its
 * statistics: dlsym(RTLD_DEFAULT, "umpool_preload_pool")). */
__attribute__((visibility("default"))) ump_pool_t *umpool_preload_pool(void);

/* True while this thread is inside umpool (making the pool, or in one of
 * the interposed calls): a driver call it makes, or a callback or signal
 * handler it runs, goes to the real driver, never into the pool again. */
extern _Thread_local int preload_depth
    __attribute__((tls_model("initial-exec")));
static inline bool preload_busy(void)
{
    return preload_depth > 0;
}
static inline void preload_enter(void)
{
    preload_depth++;
}
static inline void preload_leave(void)
{
    preload_depth--;
}

/* Counters, printed at exit with UMPOOL_PRELOAD_LOG: per table entry,
 * calls umpool served and calls forwarded to the driver. */
static inline void preload_count(int entry, bool served)
{
    if (__builtin_expect(atomic_load_explicit(&preload_counting,
                                              memory_order_relaxed), 0))
        preload_count_add(entry, served);
}

/* intercept.c: the table's size and names, for the counters' report. */
int intercept_count(void);
const char *intercept_name(int entry);
/* Frees whose stream has reached them (cuMemFreeAsync on the program's
 * streams): returned to the pool. */
void intercept_poll(void);

#endif
