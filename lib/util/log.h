/* Logging: one line per event on stderr, "umpool: <level>: <message>". */
#ifndef UMP_LOG_H
#define UMP_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum ump_log_level {
    UMP_LOG_ERROR = 0,
    UMP_LOG_WARN = 1,
    UMP_LOG_INFO = 2,
    UMP_LOG_DEBUG = 3,
};

/* The level is process-wide: the last pool created sets it. Default: warn. */
void log_set_level(int level);
int log_get_level(void);
/* Returns the level's name ("error", ...), or NULL for a bad level. */
const char *log_level_name(int level);

/* Copies src into dst (size bytes, always terminated, truncated to fit)
 * with every control byte escaped: \n, \r, \t, else \xNN. Returns the
 * length written. log_at escapes every line this way, so one message
 * is always one line. */
size_t log_escape(char *dst, size_t size, const char *src);

/* log_mute(true) drops the calling thread's lines until the matching
 * log_mute(false) (they nest): around a probe whose refusal is an answer,
 * not an error (ump_ipc_open asks for the maker's addresses, and takes
 * others when they are taken). */
void log_mute(bool on);

void log_at(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define ump_log_error(...) log_at(UMP_LOG_ERROR, __VA_ARGS__)
#define ump_log_warn(...) log_at(UMP_LOG_WARN, __VA_ARGS__)
#define ump_log_info(...) log_at(UMP_LOG_INFO, __VA_ARGS__)
#define ump_log_debug(...) log_at(UMP_LOG_DEBUG, __VA_ARGS__)

#endif
