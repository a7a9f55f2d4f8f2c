/* runtime/status.h: the small set of status codes every colo layer returns.
 *
 * Action functions return colo_status; predicates return bool; constructors
 * return NULL on failure and explain through an (err, errlen) out-parameter.
 * COLO_ASSERT aborts only on a broken invariant of colo's own code, never on
 * bad input or a device error. */
#ifndef COLO_RUNTIME_STATUS_H
#define COLO_RUNTIME_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef enum colo_status {
    COLO_OK = 0,
    COLO_ERR = -1,          /* generic failure; the message says why */
    COLO_ENOMEM = -2,       /* allocation failed: arena limit or host memory */
    COLO_EINVAL = -3,       /* bad argument or bad input */
    COLO_EAGAIN = -4,       /* not now: try again later (queue full, not ready) */
    COLO_EIO = -5,          /* file or socket I/O failed */
    COLO_EFORMAT = -6,      /* malformed file or data */
    COLO_EUNSUPPORTED = -7, /* not available on this backend / build */
    COLO_EDEVICE = -8,      /* device error contained to the work that hit it */
    COLO_EFATAL = -9,       /* device context poisoned: every model on it failed */
    COLO_ECANCELED = -10,   /* work canceled by its owner */
    COLO_ETIMEDOUT = -11,   /* a deadline passed */
    COLO_ETOOLONG = -12,    /* input longer than a limit allows (a prompt past the model's context) */
} colo_status;

/* Static string naming the status ("ENOMEM"...). Never NULL. */
const char *colo_status_str(colo_status st);

#define COLO_ASSERT(cond)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "colo: assertion failed: %s (%s:%d)\n", #cond,       \
                    __FILE__, __LINE__);                                         \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* Writes a formatted message into (err, errlen) when err is not NULL. */
void colo_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
