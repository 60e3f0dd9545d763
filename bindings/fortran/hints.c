/*
 * For the Fortran module (bindings/fortran/umpool.f90): UMP_HINTS_INIT is
 * a macro, which does not cross into Fortran; this fills a ump_hints_t with
 * it, so the module never repeats its values.
 */
#include "config.h"

#include "umpool.h"
#include "umpool_bindings.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT void umpool_hints_init(ump_hints_t *h)
{
    if (h)
        *h = (ump_hints_t)UMP_HINTS_INIT;
}
