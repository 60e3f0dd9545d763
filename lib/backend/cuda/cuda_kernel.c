/*
 * Kernels of the cuda backend: module images loaded into each GPU's primary
 * context on first use, their functions looked up once, launches.
 *
 * Contract:
 *  - The caller owns the image (a fatbin or PTX that lives as long as the
 *    process: the library's embedded one); the backend keys its modules by
 *    the image's address, one per GPU, and unloads them at close.
 *  - The virtual devices of one GPU (cuda_virtual_devices) share its
 *    context, hence its modules.
 *  - Lookups and loads happen under the context's lock; a launch itself
 *    does not hold it (the driver's launch is thread-safe).
 */
#include "config.h"

#ifdef HAVE_CUDA_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "backend/cuda/cuda_backend.h"

#define CUKERNEL_MAX_FN 8

/* One image loaded into one GPU's context. */
struct cukernel_module {
    const void *image;
    CUmodule mod;
    int nfn;
    struct {
        const char *name; /* the caller's string, compared by content */
        CUfunction fn;
    } fn[CUKERNEL_MAX_FN];
    struct cukernel_module *next;
};

/* The physical GPU whose primary context is ctx, or -1. */
static int gpu_of(const struct cuda_ctx *c, CUcontext ctx)
{
    for (int p = 0; p < c->nphys; p++)
        if (c->pctx[p] == ctx)
            return p;
    return -1;
}

/* name's function of image in GPU p's context, which is current: loaded
 * and looked up on first use. Called with c->lock held. */
static int find_fn(struct cuda_ctx *c, int p, const void *image,
                   const char *name, CUfunction *fn_p)
{
    struct cukernel_module *m;
    CUresult res;

    for (m = c->kmod[p]; m && m->image != image; m = m->next)
        ;
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m) {
            ump_log_error("cuda: out of host memory for a module");
            return -ENOMEM;
        }
        res = c->api.cuModuleLoadData(&m->mod, image);
        if (res != CUDA_SUCCESS) {
            free(m);
            return cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                              "cuModuleLoadData of the collectives' kernels "
                              "on GPU %d (built for sm_90 and compute_90 "
                              "PTX)", p);
        }
        m->image = image;
        m->next = c->kmod[p];
        c->kmod[p] = m;
    }
    for (int i = 0; i < m->nfn; i++)
        if (!strcmp(m->fn[i].name, name)) {
            *fn_p = m->fn[i].fn;
            return 0;
        }
    if (m->nfn == CUKERNEL_MAX_FN) {
        ump_log_error("cuda: more than %d kernels in one module",
                      CUKERNEL_MAX_FN);
        return -ENOMEM;
    }
    res = c->api.cuModuleGetFunction(&m->fn[m->nfn].fn, m->mod, name);
    if (res != CUDA_SUCCESS)
        return cudrv_fail(&c->api, res, UMP_LOG_ERROR,
                          "cuModuleGetFunction of %s", name);
    m->fn[m->nfn].name = name;
    *fn_p = m->fn[m->nfn++].fn;
    return 0;
}

int cukernel_launch(void *ctx, void *stream, const void *image,
                    const char *name, unsigned grid, unsigned block,
                    void *arg)
{
    struct cuda_ctx *c = ctx;
    CUcontext sctx, saved;
    CUfunction fn = NULL;
    CUresult res;
    int err, p;

    if (!image || !name || !grid || !block)
        return -EINVAL;
    err = custream_enter(c, stream, &sctx, &saved);
    if (err)
        return err;
    p = gpu_of(c, sctx);
    if (p < 0) {
        cudrv_ctx_leave(&c->api, sctx, saved);
        ump_log_error("cuda: kernel %s: stream %p is not in a context of "
                      "the pool's GPUs", name, stream);
        return -EINVAL;
    }
    pthread_mutex_lock(&c->lock);
    err = find_fn(c, p, image, name, &fn);
    pthread_mutex_unlock(&c->lock);
    if (err) {
        cudrv_ctx_leave(&c->api, sctx, saved);
        return err;
    }
    void *params[] = {arg};
    res = c->api.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream,
                                params, NULL);
    cuda_note_result(c, -1, sctx, res);
    return cudrv_leave_check(&c->api, sctx, saved, res,
                             "cuLaunchKernel of %s (%u x %u) on stream %p",
                             name, grid, block, stream);
}

void cukernel_close(struct cuda_ctx *c)
{
    for (int p = 0; p < c->nphys; p++) {
        CUcontext saved;

        if (!c->kmod[p] || cudrv_ctx_enter(&c->api, c->pctx[p], &saved))
            continue;
        for (struct cukernel_module *m = c->kmod[p]; m; m = m->next) {
            CUresult res = c->api.cuModuleUnload(m->mod);
            if (res != CUDA_SUCCESS)
                cudrv_fail(&c->api, res, UMP_LOG_WARN,
                           "cuModuleUnload at close");
        }
        cudrv_ctx_leave(&c->api, c->pctx[p], saved);
    }
}

void cukernel_free(struct cuda_ctx *c)
{
    for (int p = 0; p < UMP_MAX_DEVICES; p++)
        while (c->kmod[p]) {
            struct cukernel_module *m = c->kmod[p];
            c->kmod[p] = m->next;
            free(m);
        }
}

#endif /* HAVE_CUDA_H */
