/* JSON request bodies: a nesting pre-scan, then jansson. */
#include "server/http/http_json.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* The deepest nesting of [ and { outside strings; stops early past limit. */
static int nesting_depth(const char *buf, size_t len, int limit)
{
    int depth = 0, max = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > limit)
                return max;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}

json_t *colo_json_parse(const char *buf, size_t len, int max_depth, char *err, size_t errlen)
{
    if (!buf || len == 0) {
        colo_set_err(err, errlen, "the body is empty; a JSON object is expected");
        return NULL;
    }
    if (nesting_depth(buf, len, max_depth) > max_depth) {
        colo_set_err(err, errlen, "JSON nested deeper than %d levels", max_depth);
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!v)
        colo_set_err(err, errlen, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    return v;
}

json_t *colo_http_req_json(colo_http_req *req)
{
    size_t len;
    const char *body = colo_http_req_body(req, &len);
    char err[256];
    json_t *v = colo_json_parse(body, len, COLO_JSON_MAX_DEPTH, err, sizeof err);
    if (!v) {
        colo_http_error(req, 400, "invalid_json", "%s", err);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        colo_http_error(req, 400, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    return v;
}
