/* server/http/router.h: method + path routing for colo's HTTP server.
 *
 * Patterns are exact ("/health/live") or have parameters in whole segments
 * ("/v1/models/{name}/infer"); a parameter matches one non-empty segment,
 * percent-decoded, and reaches the handler through colo_http_req_param.
 * Exact segments win over parameters when both match. A path that matches
 * some route but not with this method answers 405 with an Allow header; no
 * match answers 404 (JSON error bodies). Routes are added before the server
 * runs; matching is then read-only (loop thread). */
#ifndef COLO_SERVER_ROUTER_H
#define COLO_SERVER_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "server/http/http.h"

typedef struct colo_router colo_router;

/* Route flags. */
#define COLO_ROUTE_PUBLIC 1u   /* no API key needed (health checks) */
#define COLO_ROUTE_OPERATOR 2u /* only the operator's key: what it shows spans every tenant */

colo_router *colo_router_create(void);
void colo_router_free(colo_router *r);

/* method: "GET", "POST"...; pattern and method are copied. COLO_EINVAL for a
 * malformed pattern ("/a/{", no leading '/') or a duplicate. */
colo_status colo_router_add(colo_router *r, const char *method, const char *pattern, colo_http_handler_fn fn,
                            void *ud, unsigned flags);

typedef struct colo_route_match {
    colo_http_handler_fn fn; /* NULL: no route for this method (see status) */
    void *ud;
    unsigned flags;
    const char *pattern;     /* the route's pattern (owned by the router) */
    int status;              /* 0 matched; 404 or 405 */
    char allow[128];         /* for 405: the methods the path accepts, "GET, POST" */
} colo_route_match;

/* Finds the route for method and path (no query); on a match with req not
 * NULL, stores the parameters on req and sets its route. */
void colo_router_match(const colo_router *r, const char *method, const char *path, colo_http_req *req,
                       colo_route_match *out);

/* Matches req and calls the handler, or answers 404/405. */
void colo_router_dispatch(const colo_router *r, colo_http_req *req);

/* True when a route for path (any method) is public. */
bool colo_router_is_public(const colo_router *r, const char *path);
/* Whether some route, of any method, matches path. */
bool colo_router_knows(const colo_router *r, const char *path);
/* True when a route for path (any method) is the operator's only. */
bool colo_router_is_operator(const colo_router *r, const char *path);

#endif
