/* runtime/log.h: leveled logging to stderr, one line per call, thread-safe.
 * Lines look like: 2026-01-02T03:04:05.678Z INFO  message. The level comes
 * from COLO_LOG_LEVEL (debug|info|warn|error) or colo_log_set_level().
 * The message is escaped as colo_log_escape says, so that no field of it
 * (a model name, a path, a header a client sent) can start a line of its
 * own or hide part of one: callers log untrusted text as it is. */
#ifndef COLO_RUNTIME_LOG_H
#define COLO_RUNTIME_LOG_H

#include <stddef.h>

typedef enum { COLO_LOG_DEBUG = 0, COLO_LOG_INFO, COLO_LOG_WARN, COLO_LOG_ERROR } colo_log_level;

void colo_log_set_level(colo_log_level level);
colo_log_level colo_log_get_level(void);
/* Copies in to out (cap bytes, always terminated) with every control byte
 * escaped: \n, \r, \t, other bytes below 0x20 and 0x7f as \xNN, and a
 * backslash doubled, so the escaping can be told from the text. Stops
 * before an escape that would not fit. Returns the bytes written. */
size_t colo_log_escape(char *out, size_t cap, const char *in);
void colo_log(colo_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define COLO_DEBUG(...) colo_log(COLO_LOG_DEBUG, __VA_ARGS__)
#define COLO_INFO(...) colo_log(COLO_LOG_INFO, __VA_ARGS__)
#define COLO_WARN(...) colo_log(COLO_LOG_WARN, __VA_ARGS__)
#define COLO_ERROR(...) colo_log(COLO_LOG_ERROR, __VA_ARGS__)

#endif
