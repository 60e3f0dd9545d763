#include "config.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "util/internal.h"
#include "umpool.h"

#define UMP_STR_(x) #x
#define UMP_STR(x) UMP_STR_(x)

UMP_EXPORT unsigned ump_version(void)
{
    return UMP_VERSION;
}

UMP_EXPORT const char *ump_version_string(void)
{
    return UMP_STR(UMP_VERSION_MAJOR) "." UMP_STR(UMP_VERSION_MINOR) "."
        UMP_STR(UMP_VERSION_PATCH);
}

/* Only static strings: callers may hold the text forever, from any thread. */
UMP_EXPORT const char *ump_strerror(int err)
{
    /* -INT_MIN does not exist; no errno is that large anyway. */
    if (err == INT_MIN)
        return "unknown error";
    int code = err < 0 ? -err : err;

    switch (code) {
    case 0:
        return "success";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory (devices full)";
    case EBUSY:
        return "busy (allocations still live or work still queued)";
    case ENODEV:
        return "no such device (or no usable GPU)";
    case ENOTSUP:
        return "not supported by this backend or build";
    case EPERM:
        return "operation not permitted";
    case EIO:
        return "i/o or driver error (see the log for the driver's message)";
    case ENOSPC:
        return "no space left (address space or tier full)";
    case EAGAIN:
        return "temporarily unavailable, try again";
    case ENOENT:
        return "not found (file, topology or policy)";
    case ENOTRECOVERABLE:
        return "pool inherited across fork(): create a new pool in the child";
    case EEXIST:
        return "already exists";
    case ERANGE:
        return "value out of range";
    case ENOSYS:
        return "not implemented";
    case EACCES:
        return "permission denied";
    case EFAULT:
        return "bad address (not memory of this pool)";
    case EOVERFLOW:
        return "size overflow";
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
    /* Unlike strerror(), it is thread-safe and never formats into a buffer. */
    const char *desc = strerrordesc_np(code);
    if (desc)
        return desc;
#endif
    return "unknown error";
}
