/* Method + path routing: a list of split patterns, matched segment by segment. */
#include "server/http/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUTE_MAX_SEGMENTS 16

typedef struct route {
    char method[16];
    char *pattern;
    char *segs[ROUTE_MAX_SEGMENTS]; /* "{name}" for parameters */
    int n_segs;
    colo_http_handler_fn fn;
    void *ud;
    unsigned flags;
    struct route *next;
} route;

struct colo_router {
    route *routes; /* in insertion order */
};

colo_router *colo_router_create(void) { return calloc(1, sizeof(colo_router)); }

static void route_free(route *rt)
{
    if (!rt)
        return;
    for (int i = 0; i < rt->n_segs; i++)
        free(rt->segs[i]);
    free(rt->pattern);
    free(rt);
}

void colo_router_free(colo_router *r)
{
    if (!r)
        return;
    for (route *rt = r->routes, *next; rt; rt = next) {
        next = rt->next;
        route_free(rt);
    }
    free(r);
}

static bool is_param(const char *seg) { return seg[0] == '{'; }

/* Splits "/a/b/" into segments "a", "b" (empty segments kept, except none for "/"). */
static int split(const char *path, char segs[][256], int max)
{
    if (path[0] != '/')
        return -1;
    if (!path[1])
        return 0;
    int n = 0;
    const char *p = path + 1;
    for (;;) {
        size_t len = strcspn(p, "/");
        if (n == max || len >= 256)
            return -1;
        memcpy(segs[n], p, len);
        segs[n++][len] = 0;
        if (!p[len])
            return n;
        p += len + 1;
    }
}

colo_status colo_router_add(colo_router *r, const char *method, const char *pattern, colo_http_handler_fn fn,
                            void *ud, unsigned flags)
{
    char segs[ROUTE_MAX_SEGMENTS][256];
    int n = split(pattern, segs, ROUTE_MAX_SEGMENTS);
    if (n < 0 || !fn || strlen(method) >= 16)
        return COLO_EINVAL;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(segs[i]);
        bool open = strchr(segs[i], '{') != NULL, close = strchr(segs[i], '}') != NULL;
        if ((open || close) && !(segs[i][0] == '{' && segs[i][len - 1] == '}' && len > 2))
            return COLO_EINVAL;
    }
    for (route *rt = r->routes; rt; rt = rt->next)
        if (!strcmp(rt->method, method) && !strcmp(rt->pattern, pattern))
            return COLO_EINVAL;
    route *rt = calloc(1, sizeof *rt);
    if (!rt || !(rt->pattern = strdup(pattern)))
        goto out_free;
    snprintf(rt->method, sizeof rt->method, "%s", method);
    for (int i = 0; i < n; i++) {
        if (!(rt->segs[i] = strdup(segs[i])))
            goto out_free;
        rt->n_segs++;
    }
    rt->fn = fn;
    rt->ud = ud;
    rt->flags = flags;
    route **tail = &r->routes;
    while (*tail)
        tail = &(*tail)->next;
    *tail = rt;
    return COLO_OK;

out_free:
    route_free(rt);
    return COLO_ENOMEM;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s in place; false on a malformed escape or a NUL byte. */
static bool decode(char *s)
{
    char *w = s;
    for (const char *p = s; *p; p++) {
        if (*p == '%') {
            int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            *w++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = 0;
    return true;
}

/* Score: exact segments matched (higher wins), -1 for no match. */
static int route_score(const route *rt, char segs[][256], int n)
{
    if (rt->n_segs != n)
        return -1;
    int score = 0;
    for (int i = 0; i < n; i++) {
        if (is_param(rt->segs[i])) {
            if (!segs[i][0])
                return -1;
        } else if (!strcmp(rt->segs[i], segs[i])) {
            score++;
        } else {
            return -1;
        }
    }
    return score;
}

void colo_router_match(const colo_router *r, const char *method, const char *path, colo_http_req *req,
                       colo_route_match *out)
{
    memset(out, 0, sizeof *out);
    out->status = 404;
    char segs[ROUTE_MAX_SEGMENTS][256];
    int n = split(path, segs, ROUTE_MAX_SEGMENTS);
    if (n < 0)
        return;
    const route *best = NULL;
    int best_score = -1;
    for (const route *rt = r->routes; rt; rt = rt->next) {
        int sc = route_score(rt, segs, n);
        if (sc < 0)
            continue;
        /* HEAD is GET without the body (the response layer drops it) */
        bool head_get = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
        if (!strcmp(rt->method, method) || head_get) {
            if (sc > best_score) {
                best = rt;
                best_score = sc;
            }
        } else if (!strstr(out->allow, rt->method)) {
            size_t used = strlen(out->allow);
            snprintf(out->allow + used, sizeof out->allow - used, "%s%s%s", used ? ", " : "", rt->method,
                     strcmp(rt->method, "GET") ? "" : ", HEAD");
        }
    }
    if (!best) {
        if (out->allow[0])
            out->status = 405;
        return;
    }
    out->status = 0;
    out->fn = best->fn;
    out->ud = best->ud;
    out->flags = best->flags;
    out->pattern = best->pattern;
    if (!req)
        return;
    colo_http_req_set_route(req, best->pattern);
    for (int i = 0; i < n; i++) {
        if (!is_param(best->segs[i]))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)strlen(best->segs[i]) - 2, best->segs[i] + 1);
        if (!decode(segs[i])) {
            out->status = 400;
            out->fn = NULL;
            return;
        }
        if (colo_http_req_set_param(req, name, segs[i]) != COLO_OK) {
            out->status = 500;
            out->fn = NULL;
            return;
        }
    }
}

static bool path_has_flag(const colo_router *r, const char *path, unsigned flag)
{
    char segs[ROUTE_MAX_SEGMENTS][256];
    int n = split(path, segs, ROUTE_MAX_SEGMENTS);
    for (const route *rt = r->routes; n >= 0 && rt; rt = rt->next)
        if ((rt->flags & flag) && route_score(rt, segs, n) >= 0)
            return true;
    return false;
}

bool colo_router_is_public(const colo_router *r, const char *path) { return path_has_flag(r, path, COLO_ROUTE_PUBLIC); }

bool colo_router_knows(const colo_router *r, const char *path)
{
    char segs[ROUTE_MAX_SEGMENTS][256];
    int n = split(path, segs, ROUTE_MAX_SEGMENTS);
    for (const route *rt = r->routes; n >= 0 && rt; rt = rt->next)
        if (route_score(rt, segs, n) >= 0)
            return true;
    return false;
}
bool colo_router_is_operator(const colo_router *r, const char *path)
{
    return path_has_flag(r, path, COLO_ROUTE_OPERATOR);
}

void colo_router_dispatch(const colo_router *r, colo_http_req *req)
{
    colo_route_match m;
    colo_router_match(r, colo_http_req_method(req), colo_http_req_path(req), req, &m);
    switch (m.status) {
    case 0:
        m.fn(req, m.ud);
        return;
    case 405:
        colo_http_add_header(req, "Allow", m.allow);
        colo_http_error(req, 405, "method_not_allowed", "%s is not allowed on %s (allowed: %s)",
                        colo_http_req_method(req), colo_http_req_path(req), m.allow);
        return;
    case 400:
        colo_http_error(req, 400, "bad_request", "malformed percent-encoding in the path");
        return;
    case 500:
        colo_http_error(req, 500, "internal_error", "out of memory");
        return;
    default:
        colo_http_error(req, 404, "not_found", "no route for %s %s", colo_http_req_method(req),
                        colo_http_req_path(req));
        return;
    }
}
