/* Responses: whole, JSON, errors, chunked streams and Server-Sent Events;
 * status reasons and error codes. The request object is in http_request.c. */
#include "server/http/http_impl.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
    case 507: return "Insufficient Storage";
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

const char *colo_http_openai_error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

/* The field a 400's (or 404's: an id a field names) message names
 * ("max_tokens: ...", "messages[2]: ..."): the message's start up to ": "
 * when it reads as a field, else NULL. */
static json_t *error_param(int status, const char *msg)
{
    if (status != 400 && status != 404)
        return json_null();
    size_t n = strcspn(msg, ":");
    if (n == 0 || n > 64 || msg[n] != ':' || msg[n + 1] != ' ')
        return json_null();
    for (size_t i = 0; i < n; i++) {
        char c = msg[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '[' || c == ']'))
            return json_null();
    }
    return json_stringn(msg, n);
}

const char *colo_http_anthropic_error_type(int status)
{
    switch (status) {
    case 400: case 405: case 409: case 411: case 414: case 422: case 431: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

void colo_http_req_set_error_style(colo_http_req *r, colo_http_error_style style) { r->error_style = style; }
colo_http_error_style colo_http_req_error_style(const colo_http_req *r) { return r->error_style; }

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
    char *line = colo_pool_alloc(r->pool, n);
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
    if (status == 204 || status == 304)
        ; /* no body, and no Content-Length (RFC 9110, 8.6) */
    else if (content_length >= 0)
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
    if (r->local && r->local->on_response) {
        if (!r->status)
            r->status = status;
        r->local->on_response(r->local->ud, status, body, len);
    }
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
    json_t *body =
        r->error_style == COLO_HTTP_ERRORS_ANTHROPIC
            ? json_pack("{s:s,s:{s:s,s:s},s:s}", "type", "error", "error", "type",
                        colo_http_anthropic_error_type(status), "message", msg, "request_id", r->id)
            : json_pack("{s:{s:s,s:s,s:o,s:s,s:s}}", "error", "message", msg, "type",
                        colo_http_openai_error_type(status), "param", error_param(status, msg), "code",
                        code ? code : colo_http_error_code(status), "request_id", r->id);
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
    int sndbuf = HTTP_STREAM_SNDBUF_BYTES;
    (void)setsockopt(bufferevent_getfd(r->conn->bev), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf); /* best effort */
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

void colo_http_stream_abort(colo_http_req *r)
{
    if (r->finished)
        return;
    /* A socket bufferevent's output cannot be drained by its user: what is
     * unsent goes with the connection, closed on the next loop turn. */
    http_conn *c = r->conn;
    finish(r);
    if (c)
        http_conn_close_later(c);
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
