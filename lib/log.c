#include "config.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "internal.h"
#include "log.h"

static atomic_int log_level = UMP_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(int level)
{
    if (level >= UMP_LOG_ERROR && level <= UMP_LOG_DEBUG)
        atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int log_get_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

const char *log_level_name(int level)
{
    if (level < UMP_LOG_ERROR || level > UMP_LOG_DEBUG)
        return NULL;
    return level_names[level];
}

void ump_log_at(int level, const char *fmt, ...)
{
    if (level > log_get_level())
        return;
    /* One fprintf per line: stdio locks the stream, so lines from several
     * threads never interleave. */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "umpool: %s: %s\n", level_names[level], msg);
}
