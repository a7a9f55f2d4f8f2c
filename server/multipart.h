/* server/multipart.h: multipart/form-data bodies (RFC 7578), as
 * POST /v1/files receives them. Pure functions over the body's bytes. */
#ifndef COLO_SERVER_MULTIPART_H
#define COLO_SERVER_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/status.h"

/* One part; every pointer points into the body, nothing is copied. */
typedef struct colo_multipart_part {
    const char *name;     /* Content-Disposition's name ("" when none) */
    size_t name_len;
    const char *filename; /* its filename; NULL when none */
    size_t filename_len;
    const char *data;     /* the part's bytes */
    size_t len;
} colo_multipart_part;

/* Splits body (len bytes) by the boundary of content_type
 * ("multipart/form-data; boundary=..."), into at most max parts: their
 * count, or -1 with a message (not multipart/form-data, no boundary, a
 * part without its headers' end, no closing delimiter, more than max). */
int colo_multipart_parse(const char *content_type, const char *body, size_t len, colo_multipart_part *parts, int max,
                         char *err, size_t errlen);

/* The part named name, or NULL. */
const colo_multipart_part *colo_multipart_find(const colo_multipart_part *parts, int n, const char *name);

#endif
