/* server/core/server.h: colo's HTTP front door, built from a colo_config.
 *
 * Ties the HTTP core (server/http/http.h), the router, API-key authentication,
 * the metrics registry and the built-in endpoints together:
 *   GET /health/live   200 {"status":"live"}                 (no API key)
 *   GET /health/ready  200 {"status":"ready"} or 503 JSON      (no API key;
 *                      503 "draining" once colo_server_drain was called)
 *   GET /metrics       Prometheus text format 0.0.4 (COLO_ROUTE_OPERATOR)
 * Model endpoints are added with colo_server_route before colo_server_run.
 *
 * Authentication: when colo_config_api_key(cfg) gives a key or tenants:
 * lists keys, every route not marked COLO_ROUTE_PUBLIC needs
 * "Authorization: Bearer <key>" with a known key (compared by SHA-256 in
 * constant time; server/tenants/tenants.h), else 401 with WWW-Authenticate: Bearer.
 * Routes marked COLO_ROUTE_OPERATOR (what they show spans every tenant)
 * answer 403 to a tenant's key: only the admin key (server.api_key_env's)
 * may read them.
 * The usage ledger (server/tenants/ledger.h) is opened here when usage.enabled.
 *
 * Metrics kept here (per finished request, labelled by route pattern):
 *   colo_http_requests_total{method,route,status}
 *   colo_http_request_duration_seconds{method,route}   (histogram)
 *   colo_http_request_body_bytes_total, colo_http_response_body_bytes_total
 *   colo_http_connections_open, colo_http_connections_accepted_total,
 *   colo_http_connections_rejected_total, colo_http_connections_evicted_total,
 *   colo_http_requests_in_flight
 * Threads: create, route, set_ready and free on one thread; run on the loop
 * thread; shutdown and colo_server_http's call from any thread. */
#ifndef COLO_SERVER_SERVER_H
#define COLO_SERVER_SERVER_H

#include <stdbool.h>

#include "config/config.h"
#include "server/http/http.h"
#include "server/http/metrics.h"
#include "server/http/router.h"

typedef struct colo_server colo_server;

/* Binds cfg->server.listen with cfg's limits and timeouts; reads the API
 * key from the environment now. NULL with a message on failure. */
colo_server *colo_server_create(const colo_config *cfg, char *err, size_t errlen);
void colo_server_free(colo_server *s);

/* Adds a route (see router.h); before run. */
colo_status colo_server_route(colo_server *s, const char *method, const char *pattern, colo_http_handler_fn fn,
                              void *ud, unsigned flags);
/* Requests whose path starts with prefix and matches no route go to fn
 * (with ud), before the API key's check: a family of routes guarded by
 * a key of its own answers its unknown paths itself (the admin routes:
 * 401 without the admin key, 404 with it). One prefix; before run. */
void colo_server_set_fallback(colo_server *s, const char *prefix, colo_http_handler_fn fn, void *ud);
/* Requests whose path starts with pattern's fixed part (up to its first
 * "{") answer errors in style, those refused before they are routed (no
 * key, no such path) too; the longest such part decides, else OpenAI's
 * shape. Before run. COLO_ENOMEM past 32 of them. */
colo_status colo_server_route_errors(colo_server *s, const char *pattern, colo_http_error_style style);
/* The readiness predicate behind /health/ready (loop thread); ready(ud)
 * returning false answers 503. Without one the server is ready. */
void colo_server_set_ready(colo_server *s, bool (*ready)(void *ud), void *ud);

colo_http_server *colo_server_http(colo_server *s);
colo_metrics *colo_server_metrics(colo_server *s);
struct colo_tenants;
struct colo_ledger;
struct colo_tenants *colo_server_tenants(colo_server *s);
struct colo_ledger *colo_server_ledger(colo_server *s); /* NULL when usage is off */
int colo_server_port(const colo_server *s);

/* Runs the loop until shut down (see colo_http_server_run). */
colo_status colo_server_run(colo_server *s);
/* Any thread: graceful shutdown with the config's shutdown_timeout_ms. */
void colo_server_shutdown(colo_server *s);
/* Loop thread (SIGTERM): /health/ready answers 503 "draining" from now on,
 * the server keeps accepting and serving for the config's drain_delay_ms
 * (so that a load balancer's checks take it out first), then shuts down
 * as colo_server_shutdown does. A second call, or a delay of 0, shuts
 * down at once. */
void colo_server_drain(colo_server *s);

/* Constant-time check of an Authorization header value against key:
 * "Bearer <key>" and no other scheme (the admin routes). */
bool colo_server_auth_ok(const char *authorization, const char *key);

#endif
