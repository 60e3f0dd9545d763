#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "util/internal.h"
#include "util/log.h"

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

size_t log_escape(char *dst, size_t size, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    if (!size)
        return 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char e[4];
        size_t n = 2;

        e[0] = '\\';
        if (*p == '\n')
            e[1] = 'n';
        else if (*p == '\r')
            e[1] = 'r';
        else if (*p == '\t')
            e[1] = 't';
        else if (*p < 0x20 || *p == 0x7f) {
            e[1] = 'x';
            e[2] = hex[*p >> 4];
            e[3] = hex[*p & 15];
            n = 4;
        } else {
            e[0] = (char)*p;
            n = 1;
        }
        if (o + n >= size)
            break;
        memcpy(dst + o, e, n);
        o += n;
    }
    dst[o] = '\0';
    return o;
}

/* Per thread: log_mute's count. */
static _Thread_local int muted;

void log_mute(bool on)
{
    muted += on ? 1 : -1;
}

void log_at(int level, const char *fmt, ...)
{
    if (level > log_get_level() || muted)
        return;
    /* One fprintf per line: stdio locks the stream, so lines from several
     * threads never interleave. */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Messages quote what users gave (configuration values, paths): a
     * control byte there must not start a forged line or move the cursor,
     * so the line is printed with them escaped. */
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) {
            char esc[4 * sizeof(msg)];
            log_escape(esc, sizeof(esc), msg);
            fprintf(stderr, "umpool: %s: %s\n", level_names[level], esc);
            return;
        }
    fprintf(stderr, "umpool: %s: %s\n", level_names[level], msg);
}
