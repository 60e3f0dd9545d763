#include "config.h"

#include "front/check.h"

/* Out of line and cold: the checks stay two compares on the hot path. */
__attribute__((noinline, cold)) int pool_refused(int rc, const char *fn)
{
    if (rc == -EINVAL)
        ump_log_error("%s: the pool is NULL", fn);
    else
        ump_log_error("%s: this pool was created before fork(); create a "
                      "new pool in the child", fn);
    return rc;
}

__attribute__((noinline, cold)) int pool_bad_pointer(const void *ptr,
                                                     const char *fn,
                                                     const char *why)
{
    ump_log_error("%s: %p is %s", fn, ptr, why);
    return -EINVAL;
}
