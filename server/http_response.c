/* The request object and responses: whole, JSON, errors, chunked streams and
 * Server-Sent Events; request ids; the per-request log line. */
#include "server/http_internal.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

const char *colo_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

const char *colo_http_error_code(int status)
{
    switch (status) {
    case 400: return "bad_request";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 409: return "conflict";
    case 411: return "length_required";
    case 413: return "body_too_large";
    case 414: return "uri_too_long";
    case 422: return "unprocessable";
    case 429: return "too_many_requests";
    case 431: return "headers_too_large";
    case 501: return "not_implemented";
    case 503: return "unavailable";
    case 504: return "timeout";
    case 505: return "http_version_not_supported";
    default: return status >= 500 ? "internal_error" : "error";
    }
}

/* ---- request ids ----------------------------------------------------------------- */

static pthread_once_t id_once = PTHREAD_ONCE_INIT;
static uint64_t id_seed;
static atomic_uint_least64_t id_counter;

static void id_init(void)
{
    if (getrandom(&id_seed, sizeof id_seed, GRND_NONBLOCK) != (ssize_t)sizeof id_seed)
        id_seed = colo_now_ns() ^ ((uint64_t)getpid() << 32);
}

/* A bijection of the 64-bit counter (splitmix64's finalizer): distinct
 * counters give distinct ids; the seed makes them differ between runs. */
static uint64_t id_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static bool id_acceptable(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > COLO_HTTP_REQUEST_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
            return false;
    }
    return true;
}

void http_make_id(char *out, size_t cap)
{
    pthread_once(&id_once, id_init);
    uint64_t n = atomic_fetch_add(&id_counter, 1) + 1;
    snprintf(out, cap, "%016llx", (unsigned long long)id_mix(id_seed + n * 0x9e3779b97f4a7c15ull));
}

void http_req_assign_id(colo_http_req *r)
{
    const char *given = colo_http_req_header(r, "X-Request-Id");
    if (given && id_acceptable(given)) {
        memcpy(r->id, given, strlen(given) + 1);
        return;
    }
    http_make_id(r->id, sizeof r->id);
}

/* ---- the request object -------------------------------------------------------------- */

colo_http_req *http_req_new(colo_http_server *s, http_conn *c)
{
    colo_http_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->srv = s;
    r->conn = c;
    r->tokens = -1;
    r->queue_ms = -1;
    r->start_ns = colo_now_ns();
    r->http_minor = 1;
    return r;
}

void http_req_free(colo_http_req *r)
{
    if (!r)
        return;
    free(r->raw);
    free(r->path);
    free(r->query);
    free(r->body);
    for (int i = 0; i < r->n_params; i++) {
        free(r->param_names[i]);
        free(r->param_values[i]);
    }
    for (int i = 0; i < r->n_resp_headers; i++)
        free(r->resp_headers[i]);
    free(r);
}

static void log_request(const colo_http_req *r)
{
    char tokens[32] = "-", queue[32] = "-";
    if (r->tokens >= 0)
        snprintf(tokens, sizeof tokens, "%ld", r->tokens);
    if (r->queue_ms >= 0)
        snprintf(queue, sizeof queue, "%.1f", r->queue_ms);
    COLO_INFO("request id=%s method=%s path=%.200s model=%s status=%d tokens=%s queue_ms=%s total_ms=%.1f "
              "bytes_in=%zu bytes_out=%llu",
              r->id[0] ? r->id : "-", r->method[0] ? r->method : "-", r->path ? r->path : "-",
              r->model[0] ? r->model : "-", r->status, tokens, queue, (double)(colo_now_ns() - r->start_ns) / 1e6,
              r->body_len, (unsigned long long)r->bytes_out);
}

void http_req_retire(colo_http_req *r)
{
    colo_http_server *s = r->srv;
    if (!r->status)
        r->status = 499; /* the client went away before any response */
    if (s->done_fn)
        s->done_fn(r, s->done_ud);
    if (s->cfg.log_requests)
        log_request(r);
    atomic_fetch_add(&s->st_requests, 1);
    if (r->handed)
        atomic_fetch_sub(&s->st_in_flight, 1);
    http_req_free(r);
}

void http_req_abort(colo_http_req *r)
{
    r->conn = NULL;
    if (r->aborted)
        return;
    r->aborted = true;
    if (r->on_abort)
        r->on_abort(r, r->on_abort_ud);
}

/* ---- accessors ------------------------------------------------------------------------- */

const char *colo_http_req_method(const colo_http_req *r) { return r->method; }
const char *colo_http_req_path(const colo_http_req *r) { return r->path ? r->path : ""; }
const char *colo_http_req_query(const colo_http_req *r) { return r->query ? r->query : ""; }
const char *colo_http_req_id(const colo_http_req *r) { return r->id; }
uint64_t colo_http_req_start_ns(const colo_http_req *r) { return r->start_ns; }
int colo_http_req_status(const colo_http_req *r) { return r->status; }
bool colo_http_req_aborted(const colo_http_req *r) { return r->aborted; }
const char *colo_http_req_model(const colo_http_req *r) { return r->model; }
long colo_http_req_tokens(const colo_http_req *r) { return r->tokens; }
const char *colo_http_req_route(const colo_http_req *r) { return r->route; }
int colo_http_req_header_count(const colo_http_req *r) { return r->n_headers; }

const char *colo_http_req_header(const colo_http_req *r, const char *name)
{
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->raw + r->headers[i].name, name))
            return r->raw + r->headers[i].value;
    return NULL;
}

void colo_http_req_header_at(const colo_http_req *r, int i, const char **name, const char **value)
{
    *name = i >= 0 && i < r->n_headers ? r->raw + r->headers[i].name : NULL;
    *value = i >= 0 && i < r->n_headers ? r->raw + r->headers[i].value : NULL;
}

const char *colo_http_req_body(const colo_http_req *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

const char *colo_http_req_param(const colo_http_req *r, const char *name)
{
    for (int i = 0; i < r->n_params; i++)
        if (!strcmp(r->param_names[i], name))
            return r->param_values[i];
    return NULL;
}

colo_status colo_http_req_set_param(colo_http_req *r, const char *name, const char *value)
{
    if (r->n_params == HTTP_MAX_PARAMS)
        return COLO_EINVAL;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return COLO_ENOMEM;
    }
    r->param_names[r->n_params] = n;
    r->param_values[r->n_params++] = v;
    return COLO_OK;
}

void colo_http_req_set_model(colo_http_req *r, const char *model)
{
    snprintf(r->model, sizeof r->model, "%s", model ? model : "");
}
void colo_http_req_set_tokens(colo_http_req *r, long tokens) { r->tokens = tokens; }
void colo_http_req_set_queue_ms(colo_http_req *r, double queue_ms) { r->queue_ms = queue_ms; }
void colo_http_req_set_route(colo_http_req *r, const char *pattern) { r->route = pattern; }

void colo_http_req_on_abort(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud)
{
    r->on_abort = fn;
    r->on_abort_ud = ud;
}

size_t colo_http_req_pending_bytes(const colo_http_req *r)
{
    return r->conn ? evbuffer_get_length(bufferevent_get_output(r->conn->bev)) : 0;
}

/* ---- responses --------------------------------------------------------------------------- */

static bool header_text_ok(const char *s)
{
    for (; *s; s++)
        if (*s == '\r' || *s == '\n')
            return false;
    return true;
}

void colo_http_add_header(colo_http_req *r, const char *name, const char *value)
{
    if (r->status || r->n_resp_headers == HTTP_MAX_RESP_HEADERS || !header_text_ok(name) || !header_text_ok(value))
        return;
    size_t n = strlen(name) + strlen(value) + 5;
    char *line = malloc(n);
    if (!line)
        return;
    snprintf(line, n, "%s: %s\r\n", name, value);
    r->resp_headers[r->n_resp_headers++] = line;
}

/* Whether the connection stays open after this response. */
static bool keep_alive(const colo_http_req *r)
{
    return r->keep_alive && !r->conn->close_after && !r->srv->shutting_down;
}

/* Status line and headers. content_length < 0: a stream. */
static void write_head(colo_http_req *r, struct evbuffer *out, int status, const char *content_type,
                       long long content_length)
{
    r->status = status;
    bool keep = keep_alive(r);
    if (content_length < 0 && r->http_minor == 0)
        keep = false; /* an HTTP/1.0 stream ends with the connection */
    if (!keep)
        r->conn->close_after = true;
    size_t before = evbuffer_get_length(out);
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status, colo_http_reason(status));
    if (content_type)
        evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
    if (content_length >= 0)
        evbuffer_add_printf(out, "Content-Length: %lld\r\n", content_length);
    else if (r->chunked)
        evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n");
    else
        evbuffer_add_printf(out, "Cache-Control: no-cache\r\n");
    evbuffer_add_printf(out, "Connection: %s\r\n", keep ? "keep-alive" : "close");
    if (r->id[0])
        evbuffer_add_printf(out, "X-Request-Id: %s\r\n", r->id);
    for (int i = 0; i < r->n_resp_headers; i++)
        evbuffer_add(out, r->resp_headers[i], strlen(r->resp_headers[i]));
    evbuffer_add(out, "\r\n", 2);
    r->bytes_out += evbuffer_get_length(out) - before;
}

static void finish(colo_http_req *r)
{
    r->finished = true;
    if (r->conn)
        http_conn_request_finished(r->conn);
    else
        http_req_retire(r);
}

void colo_http_respond(colo_http_req *r, int status, const char *content_type, const void *body, size_t len)
{
    if (r->finished)
        return;
    if (r->conn && !r->streaming) {
        struct evbuffer *out = bufferevent_get_output(r->conn->bev);
        write_head(r, out, status, content_type, (long long)len);
        if (len && strcmp(r->method, "HEAD"))
            evbuffer_add(out, body, len);
        r->bytes_out += len;
    } else if (!r->status) {
        r->status = status; /* for the log: what would have been sent */
    }
    finish(r);
}

void colo_http_respond_json(colo_http_req *r, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    if (!text) {
        colo_http_error(r, 500, "internal_error", "could not serialize the response");
        return;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* overwrites the NUL: json_dumps leaves room for it */
    colo_http_respond(r, status, "application/json", text, n + 1);
    free(text);
}

void colo_http_error(colo_http_req *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Messages may quote client input: keep them printable ASCII (valid JSON strings). */
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    json_t *body = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", code ? code : colo_http_error_code(status),
                             "message", msg, "request_id", r->id);
    if (!body) {
        static const char fallback[] = "{\"error\":{\"code\":\"internal_error\",\"message\":\"out of memory\"}}\n";
        colo_http_respond(r, status, "application/json", fallback, sizeof fallback - 1);
        return;
    }
    colo_http_respond_json(r, status, body);
}

/* ---- streams ------------------------------------------------------------------------------- */

colo_status colo_http_stream_begin(colo_http_req *r, int status, const char *content_type)
{
    if (r->finished || r->streaming)
        return COLO_EINVAL;
    r->streaming = true;
    if (!r->conn)
        return COLO_ECANCELED;
    r->chunked = r->http_minor >= 1;
    r->conn->state = CONN_STREAMING;
    write_head(r, bufferevent_get_output(r->conn->bev), status, content_type, -1);
    return COLO_OK;
}

colo_status colo_http_stream_write(colo_http_req *r, const void *data, size_t len)
{
    if (!r->streaming || r->finished)
        return COLO_EINVAL;
    if (!r->conn)
        return COLO_ECANCELED;
    if (!len)
        return COLO_OK;
    struct evbuffer *out = bufferevent_get_output(r->conn->bev);
    size_t before = evbuffer_get_length(out);
    if (r->chunked)
        evbuffer_add_printf(out, "%zx\r\n", len);
    evbuffer_add(out, data, len);
    if (r->chunked)
        evbuffer_add(out, "\r\n", 2);
    r->bytes_out += evbuffer_get_length(out) - before;
    return COLO_OK;
}

colo_status colo_http_sse_send(colo_http_req *r, const char *event, const char *data)
{
    if (!r->streaming || r->finished)
        return COLO_EINVAL;
    if (!r->conn)
        return COLO_ECANCELED;
    struct evbuffer *ev = evbuffer_new();
    if (!ev)
        return COLO_ENOMEM;
    if (event && header_text_ok(event))
        evbuffer_add_printf(ev, "event: %s\n", event);
    const char *p = data ? data : "";
    do {
        size_t n = strcspn(p, "\r\n");
        evbuffer_add(ev, "data: ", 6);
        evbuffer_add(ev, p, n);
        evbuffer_add(ev, "\n", 1);
        p += n;
        if (*p == '\r' && p[1] == '\n')
            p++;
        if (*p)
            p++;
        else
            break;
    } while (1);
    evbuffer_add(ev, "\n", 1);
    size_t n = evbuffer_get_length(ev);
    colo_status st = COLO_ENOMEM;
    unsigned char *flat = evbuffer_pullup(ev, -1);
    if (flat)
        st = colo_http_stream_write(r, flat, n);
    evbuffer_free(ev);
    return st;
}

void colo_http_stream_end(colo_http_req *r)
{
    if (r->finished)
        return;
    if (!r->streaming) {
        colo_http_error(r, 500, "internal_error", "the response ended before it began");
        return;
    }
    if (r->conn && r->chunked) {
        evbuffer_add(bufferevent_get_output(r->conn->bev), "0\r\n\r\n", 5);
        r->bytes_out += 5;
    }
    finish(r);
}
