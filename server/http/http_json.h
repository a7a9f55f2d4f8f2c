/* server/http/http_json.h: request bodies as JSON, for handlers.
 *
 * Bodies are parsed with jansson, rejecting duplicate object keys, invalid
 * UTF-8, trailing data and nesting deeper than COLO_JSON_MAX_DEPTH (checked
 * before parsing, so deep input costs no recursion). Content-Type is not
 * required. Loop thread (they answer on the request). */
#ifndef COLO_SERVER_HTTP_JSON_H
#define COLO_SERVER_HTTP_JSON_H

#include <stddef.h>

#include "server/http/http.h"

#define COLO_JSON_MAX_DEPTH 64

/* Parses buf[0..len) into a new reference (caller decrefs), or NULL with a
 * message naming the problem and its position. max_depth: arrays/objects
 * nested deeper are refused. */
json_t *colo_json_parse(const char *buf, size_t len, int max_depth, char *err, size_t errlen);

/* The request's body as a JSON object (new reference), or NULL after
 * answering 400 (empty body, malformed JSON, not an object, too deep,
 * invalid UTF-8, duplicate keys): the request is then finished. */
json_t *colo_http_req_json(colo_http_req *req);

#endif
