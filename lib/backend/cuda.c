/* Placeholder until the driver backend lands: the cuda backend is absent. */
#include "config.h"

#include <errno.h>

#include "../internal.h"
#include "backend.h"

const char *cuda_unavailable_reason(void)
{
    return "the cuda backend is not built yet";
}

static int cuda_open(const struct ump_config *cfg, struct ump_topology *topo,
                     void **ctx_p)
{
    (void)topo;
    (void)ctx_p;
    if (cfg->backend == UMP_BACKEND_CUDA)
        ump_log_error("backend cuda: %s", cuda_unavailable_reason());
    return -ENODEV;
}

const struct backend_ops cuda_backend_ops = {.name = "cuda", .open = cuda_open};
