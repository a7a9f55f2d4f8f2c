/* loadtest/status.h: the status codes and error messages of colo-loadtest.
 *
 * colo-loadtest is a plain HTTP client and shares no code with the server:
 * these are its own. Action functions return lt_status; constructors and
 * parsers explain a failure through an (err, errlen) out-parameter. */
#ifndef COLO_LOADTEST_STATUS_H
#define COLO_LOADTEST_STATUS_H

#include <stddef.h>

typedef enum lt_status {
    LT_OK = 0,
    LT_ERR = -1,     /* generic failure; the message says why */
    LT_ENOMEM = -2,  /* out of memory */
    LT_EINVAL = -3,  /* bad argument or input (URL, SLA, option) */
    LT_EIO = -5,     /* file or socket I/O failed; server unreachable */
    LT_EFORMAT = -6, /* malformed file or response */
} lt_status;

/* Formats into (err, errlen) when err is not NULL and errlen > 0. */
void lt_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
