/* The front door: config -> HTTP server, routes, auth, health and metrics. */
#include "server/core/server.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "server/tenants/ledger.h"
#include "server/tenants/tenants.h"

struct colo_server {
    colo_http_server *http;
    colo_router *router;
    colo_metrics *metrics;
    colo_tenants *tenants; /* keys, quotas; who is admin */
    colo_ledger *ledger;   /* NULL: usage.enabled false */
    int shutdown_timeout_ms;
    int drain_delay_ms;
    bool draining;             /* SIGTERM seen: not ready, still serving */
    struct event *drain_timer; /* ends the drain delay */
    bool (*ready)(void *ud);
    void *ready_ud;
    colo_metric *m_requests, *m_duration, *m_body_in;
    colo_metric *m_open, *m_accepted, *m_rejected, *m_evicted, *m_in_flight;
    colo_metric *m_ledger_rows, *m_ledger_requests, *m_ledger_retries; /* the ledger's queue */
    colo_metric *m_unsent, *m_unsent_peak;
    char cors[COLO_CFG_MAX_CORS_ORIGINS][256]; /* server.cors_allow_origins */
    int n_cors;
    char fallback_prefix[64]; /* colo_server_set_fallback; "" = none */
    colo_http_handler_fn fallback;
    void *fallback_ud;
    /* The error shapes the routes' dialects chose (colo_server_route_errors):
     * a path's is that of the longest fixed part it starts with. */
    struct {
        char prefix[128];
        colo_http_error_style style;
    } styles[32];
    int n_styles;
};

bool colo_server_auth_ok(const char *authorization, const char *key)
{
    const char *given = colo_http_bearer(authorization);
    if (!given || !key)
        return false;
    size_t gl = strlen(given), kl = strlen(key);
    /* Time depends on the given length only, never on where bytes differ. */
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < gl; i++)
        diff |= (unsigned char)given[i] ^ (unsigned char)(kl ? key[i % kl] : 0);
    return diff == 0 && kl > 0;
}

/* ---- built-in endpoints ---------------------------------------------------------- */

static void h_live(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_http_respond_json(req, 200, json_pack("{s:s}", "status", "live"));
}

static void h_ready(colo_http_req *req, void *ud)
{
    colo_server *s = ud;
    if (s->draining) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 503, "draining", "the server is shutting down");
        return;
    }
    if (s->ready && !s->ready(s->ready_ud)) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 503, "not_ready", "the server is not ready");
        return;
    }
    colo_http_respond_json(req, 200, json_pack("{s:s}", "status", "ready"));
}

static void h_metrics(colo_http_req *req, void *ud)
{
    colo_server *s = ud;
    size_t len;
    char *text = colo_metrics_render(s->metrics, &len);
    if (!text) {
        colo_http_error(req, 500, "internal_error", "could not render the metrics");
        return;
    }
    colo_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

/* ---- every request -------------------------------------------------------------------- */

/* CORS (server.cors_allow_origins): whether origin may read answers. */
static bool origin_allowed(const colo_server *s, const char *origin)
{
    for (int i = 0; origin && i < s->n_cors; i++)
        if (!strcmp(s->cors[i], "*") || !strcasecmp(s->cors[i], origin))
            return true;
    return false;
}

/* A browser's request from an allowed origin gets the CORS headers; a
 * preflight (OPTIONS with Access-Control-Request-Method) is answered here,
 * without the API key, as browsers send it without credentials. True when
 * the request was answered. */
static bool cors(colo_server *s, colo_http_req *req)
{
    const char *origin = colo_http_req_known(req, COLO_HDR_ORIGIN);
    bool preflight = !strcmp(colo_http_req_method(req), "OPTIONS") &&
                     colo_http_req_known(req, COLO_HDR_AC_REQUEST_METHOD);
    if (!origin || !origin_allowed(s, origin)) {
        if (preflight) {
            colo_http_error(req, 403, "origin_not_allowed",
                            "origin %.128s is not in server.cors_allow_origins", origin ? origin : "(none)");
            return true;
        }
        return false;
    }
    colo_http_add_header(req, "Access-Control-Allow-Origin", origin);
    colo_http_add_header(req, "Vary", "Origin");
    if (!preflight) {
        colo_http_add_header(req, "Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
        return false;
    }
    const char *asked = colo_http_req_known(req, COLO_HDR_AC_REQUEST_HEADERS);
    colo_http_add_header(req, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    colo_http_add_header(req, "Access-Control-Allow-Headers",
                         asked && strlen(asked) < 512 && !strpbrk(asked, "\r\n")
                             ? asked
                             : "Authorization, Content-Type, X-Api-Key, Anthropic-Version, X-Request-Id");
    colo_http_add_header(req, "Access-Control-Max-Age", "600");
    colo_http_respond(req, 204, NULL, NULL, 0);
    return true;
}

void colo_server_set_fallback(colo_server *s, const char *prefix, colo_http_handler_fn fn, void *ud)
{
    snprintf(s->fallback_prefix, sizeof s->fallback_prefix, "%s", prefix);
    s->fallback = fn;
    s->fallback_ud = ud;
}

/* The error shape for path, also for errors before it is routed (the key,
 * an unknown path): the dialect's whose route it falls under. */
static colo_http_error_style error_style_of(const colo_server *s, const char *path)
{
    colo_http_error_style style = COLO_HTTP_ERRORS_OPENAI;
    size_t best = 0;
    for (int i = 0; i < s->n_styles; i++) {
        size_t n = strlen(s->styles[i].prefix);
        if (n > best && !strncmp(path, s->styles[i].prefix, n)) {
            best = n;
            style = s->styles[i].style;
        }
    }
    return style;
}

static void on_request(colo_http_req *req, void *ud)
{
    colo_server *s = ud;
    if (s->n_cors && cors(s, req))
        return;
    const char *why = NULL;
    const char *path = colo_http_req_path(req);
    colo_http_req_set_error_style(req, error_style_of(s, path));
    if (s->fallback && !strncmp(path, s->fallback_prefix, strlen(s->fallback_prefix)) &&
        !colo_router_knows(s->router, path)) {
        s->fallback(req, s->fallback_ud);
        return;
    }
    if (colo_tenants_auth_required(s->tenants) && !colo_router_is_public(s->router, path)) {
        int key = colo_tenants_authenticate(s->tenants, req, &why);
        if (key < 0) {
            /* a browser asks for the key (as a password) on the pages meant for it */
            bool page = !strcmp(path, "/dashboard");
            colo_http_add_header(req, "WWW-Authenticate", page ? "Basic realm=\"colo\", charset=\"UTF-8\"" : "Bearer");
            colo_http_error(req, 401, "invalid_api_key", "%s", why);
            return;
        }
        /* metrics, statistics and the dashboard show every tenant's use */
        if (colo_router_is_operator(s->router, path) && !colo_tenants_is_admin(s->tenants, key)) {
            colo_http_error(req, 403, "forbidden",
                            "%.64s shows every tenant's use: it is for the operator's key (server.api_key_env); "
                            "a tenant's usage is at GET /v1/usage",
                            path);
            return;
        }
    }
    colo_router_dispatch(s->router, req);
}

static void on_done(const colo_http_req *req, void *ud)
{
    colo_server *s = ud;
    char status[8];
    snprintf(status, sizeof status, "%d", colo_http_req_status(req));
    const char *route = colo_http_req_route(req) ? colo_http_req_route(req) : "unmatched";
    const char *method = colo_http_req_method(req)[0] ? colo_http_req_method(req) : "unknown";
    colo_metric_add(s->m_requests, (const char *const[]){method, route, status}, 1);
    double secs = (double)(colo_now_ns() - colo_http_req_start_ns(req)) / 1e9;
    colo_metric_observe(s->m_duration, (const char *const[]){method, route}, secs);
    size_t body_len;
    colo_http_req_body(req, &body_len);
    colo_metric_add(s->m_body_in, NULL, (double)body_len);
}

static void on_render(void *ud)
{
    colo_server *s = ud;
    colo_http_stats st;
    colo_http_server_stats(s->http, &st);
    colo_metric_set(s->m_open, NULL, (double)st.connections_open);
    colo_metric_set(s->m_in_flight, NULL, (double)st.requests_in_flight);
    /* counters mirrored from the HTTP core's own monotonic counts */
    colo_metric_set(s->m_accepted, NULL, (double)st.connections_accepted);
    colo_metric_set(s->m_rejected, NULL, (double)st.connections_rejected);
    colo_metric_set(s->m_evicted, NULL, (double)st.connections_evicted);
    colo_metric_set(s->m_unsent, NULL, (double)st.output_pending_bytes);
    colo_metric_set(s->m_unsent_peak, NULL, (double)st.output_pending_peak_bytes);
    if (s->ledger) {
        colo_ledger_backlog b;
        colo_ledger_get_backlog(s->ledger, &b);
        colo_metric_set(s->m_ledger_rows, NULL, (double)b.rows);
        colo_metric_set(s->m_ledger_requests, NULL, (double)b.requests);
        colo_metric_set(s->m_ledger_retries, NULL, (double)b.retries);
    }
}

static colo_status register_metrics(colo_server *s)
{
    colo_metrics *m = s->metrics;
    s->m_requests = colo_metrics_counter(m, "colo_http_requests_total", "HTTP requests finished, by status.", 3,
                                         (const char *const[]){"method", "route", "status"});
    s->m_duration = colo_metrics_histogram(m, "colo_http_request_duration_seconds",
                                           "Time from a request's first byte to its end.", 2,
                                           (const char *const[]){"method", "route"}, colo_metrics_latency_buckets,
                                           colo_metrics_latency_buckets_n);
    s->m_body_in = colo_metrics_counter(m, "colo_http_request_body_bytes_total", "Request body bytes received.", 0,
                                        NULL);
    s->m_open = colo_metrics_gauge(m, "colo_http_connections_open", "Client connections open now.", 0, NULL);
    s->m_in_flight =
        colo_metrics_gauge(m, "colo_http_requests_in_flight", "Requests handed to a handler and not finished.", 0, NULL);
    s->m_accepted = colo_metrics_counter(m, "colo_http_connections_accepted_total", "Client connections accepted.",
                                         0, NULL);
    s->m_rejected = colo_metrics_counter(m, "colo_http_connections_rejected_total",
                                         "Connections refused at the limit, or failed accepts.", 0, NULL);
    s->m_evicted = colo_metrics_counter(m, "colo_http_connections_evicted_total",
                                        "Idle keep-alive connections closed to make room for new ones.", 0, NULL);
    s->m_ledger_rows = colo_metrics_gauge(m, "colo_ledger_backlog_rows",
                                          "Usage ledger rows waiting to be written (the database was locked).", 0,
                                          NULL);
    s->m_ledger_requests = colo_metrics_gauge(m, "colo_ledger_backlog_requests",
                                              "Answered requests whose ledger row is not written yet.", 0, NULL);
    s->m_ledger_retries = colo_metrics_counter(m, "colo_ledger_write_retries_total",
                                               "Failed attempts to write the ledger's waiting rows (each retried).",
                                               0, NULL);
    s->m_unsent = colo_metrics_gauge(m, "colo_http_unsent_bytes",
                                     "Response and stream bytes queued for clients and not yet sent.", 0, NULL);
    s->m_unsent_peak = colo_metrics_gauge(m, "colo_http_unsent_peak_bytes",
                                          "The most response and stream bytes ever queued and unsent at once.", 0,
                                          NULL);
    if (!s->m_requests || !s->m_duration || !s->m_body_in || !s->m_open || !s->m_in_flight || !s->m_accepted ||
        !s->m_rejected || !s->m_evicted || !s->m_ledger_rows || !s->m_ledger_requests || !s->m_ledger_retries ||
        !s->m_unsent || !s->m_unsent_peak)
        return COLO_ENOMEM;
    return colo_metrics_on_render(m, on_render, s);
}

/* ---- life ------------------------------------------------------------------------------- */

/* Makes the folders above PATH that are missing (the ledger's default
 * folder, $XDG_STATE_HOME/colo, may not exist yet), mode 0700 as the XDG
 * base directory specification asks of state. */
static colo_status make_parent_dirs(const char *path, char *err, size_t errlen)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            colo_set_err(err, errlen, "usage.db: cannot make the folder %s: %s", dir, strerror(errno));
            return COLO_EIO;
        }
        *p = '/';
    }
    return COLO_OK;
}

colo_server *colo_server_create(const colo_config *cfg, char *err, size_t errlen)
{
    colo_server *s = calloc(1, sizeof *s);
    if (!s) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    const colo_server_cfg *sc = &cfg->server;
    s->shutdown_timeout_ms = sc->shutdown_timeout_ms;
    s->drain_delay_ms = sc->drain_delay_ms;
    memcpy(s->cors, sc->cors_origins, sizeof s->cors);
    s->n_cors = sc->n_cors_origins;
    s->router = colo_router_create();
    s->metrics = colo_metrics_create();
    if (!s->router || !s->metrics || register_metrics(s) != COLO_OK) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    if (!(s->tenants = colo_tenants_create(cfg, colo_config_api_key(cfg), s->metrics, err, errlen)))
        goto out_free;
    if (cfg->usage.enabled && cfg->usage.db[0] &&
        (make_parent_dirs(cfg->usage.db, err, errlen) != COLO_OK ||
         !(s->ledger = colo_ledger_open(cfg->usage.db, true, cfg->usage.lock_wait_ms, err, errlen))))
        goto out_free;
    if (colo_router_add(s->router, "GET", "/health/live", h_live, s, COLO_ROUTE_PUBLIC) ||
        colo_router_add(s->router, "GET", "/health/ready", h_ready, s, COLO_ROUTE_PUBLIC) ||
        colo_router_add(s->router, "GET", "/metrics", h_metrics, s, COLO_ROUTE_OPERATOR)) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    colo_http_config hc = {
        .host = sc->listen_host,
        .port = sc->listen_port,
        .max_body_bytes = (size_t)sc->max_body_bytes,
        .max_header_bytes = (size_t)sc->max_header_bytes,
        .max_connections = sc->max_connections,
        .read_timeout_ms = sc->read_timeout_ms,
        .write_timeout_ms = sc->write_timeout_ms,
        .idle_timeout_ms = sc->idle_timeout_ms,
        .log_requests = true,
    };
    s->http = colo_http_server_create(&hc, on_request, s, err, errlen);
    if (!s->http)
        goto out_free;
    colo_http_server_on_done(s->http, on_done, s);
    return s;

out_free:
    colo_server_free(s);
    return NULL;
}

void colo_server_free(colo_server *s)
{
    if (!s)
        return;
    if (s->drain_timer)
        event_free(s->drain_timer);
    colo_http_server_free(s->http);
    colo_router_free(s->router);
    colo_metrics_free(s->metrics);
    colo_tenants_free(s->tenants);
    colo_ledger_close(s->ledger);
    free(s);
}

colo_status colo_server_route(colo_server *s, const char *method, const char *pattern, colo_http_handler_fn fn,
                              void *ud, unsigned flags)
{
    return colo_router_add(s->router, method, pattern, fn, ud, flags);
}

colo_status colo_server_route_errors(colo_server *s, const char *pattern, colo_http_error_style style)
{
    size_t n = strcspn(pattern, "{");
    if (s->n_styles == (int)(sizeof s->styles / sizeof *s->styles) || n >= sizeof s->styles[0].prefix)
        return COLO_ENOMEM;
    snprintf(s->styles[s->n_styles].prefix, sizeof s->styles[0].prefix, "%.*s", (int)n, pattern);
    s->styles[s->n_styles++].style = style;
    return COLO_OK;
}

void colo_server_set_ready(colo_server *s, bool (*ready)(void *ud), void *ud)
{
    s->ready = ready;
    s->ready_ud = ud;
}

colo_http_server *colo_server_http(colo_server *s) { return s->http; }
colo_tenants *colo_server_tenants(colo_server *s) { return s->tenants; }
colo_ledger *colo_server_ledger(colo_server *s) { return s->ledger; }
colo_metrics *colo_server_metrics(colo_server *s) { return s->metrics; }
int colo_server_port(const colo_server *s) { return colo_http_server_port(s->http); }
colo_status colo_server_run(colo_server *s) { return colo_http_server_run(s->http); }
void colo_server_shutdown(colo_server *s) { colo_http_server_shutdown(s->http, s->shutdown_timeout_ms); }

static void on_drain_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    colo_server *s = arg;
    COLO_INFO("colo-server: drain delay over: shutting down");
    colo_server_shutdown(s);
}

void colo_server_drain(colo_server *s)
{
    if (s->draining || s->drain_delay_ms <= 0) {
        s->draining = true;
        colo_server_shutdown(s);
        return;
    }
    s->draining = true;
    struct timeval tv = {s->drain_delay_ms / 1000, (s->drain_delay_ms % 1000) * 1000};
    if (!s->drain_timer)
        s->drain_timer = evtimer_new(colo_http_server_base(s->http), on_drain_end, s);
    if (!s->drain_timer || evtimer_add(s->drain_timer, &tv)) {
        COLO_WARN("colo-server: cannot arm the drain timer: shutting down now");
        colo_server_shutdown(s);
        return;
    }
    COLO_INFO("colo-server: draining: not ready, serving for %d ms more", s->drain_delay_ms);
}
