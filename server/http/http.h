/* server/http/http.h: colo's HTTP/1.1 server core (libevent + llhttp).
 *
 * One event-loop thread (the thread in colo_http_server_run) does all network
 * I/O. Requests are parsed one at a time per connection; a complete request
 * (headers and body) is handed to the handler, which answers at once or
 * later, always on the loop thread. Pipelined requests are answered in
 * order: the next one is parsed once the previous response is written.
 *
 * Other threads never touch a request: they hand work to the loop thread
 * with colo_http_server_call (a mutex-protected queue woken by event_active),
 * and that work may then respond, or push events to a streaming response.
 *
 * Limits (colo_http_config): 413 from Content-Length before the body is read
 * (at once on `Expect: 100-continue`), 413 when a chunked body grows past the
 * limit, 431 for request line plus headers over max_header_bytes, 408 when a
 * request is not complete read_timeout_ms after its first byte, a write
 * timeout (no progress while output is pending: the connection is dropped),
 * an idle keep-alive timeout (closed silently). HTTP/0.9 -> 400, versions
 * other than 1.0 and 1.1 -> 505. After an error response the connection is
 * closed lingeringly (shutdown(SHUT_WR), input drained briefly) so the client
 * reads the response. At max_connections the oldest idle keep-alive
 * connection is closed to make room; when none is idle the new connection
 * gets a 503 and is closed. On EMFILE the listener pauses briefly.
 *
 * Error bodies are {"error":{"code":"...","message":"...","request_id":"..."}}.
 * Every response carries X-Request-Id; every finished request logs one line:
 *   request id=... method=... path=... model=... status=... tokens=...
 *           queue_ms=... total_ms=... bytes_in=... bytes_out=...
 */
#ifndef COLO_SERVER_HTTP_H
#define COLO_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

struct event_base;
typedef struct json_t json_t; /* jansson's */

typedef struct colo_http_server colo_http_server;
typedef struct colo_http_req colo_http_req;

#define COLO_HTTP_REQUEST_ID_MAX 64 /* bytes of a request id, without the NUL */

typedef struct colo_http_config {
    const char *host;        /* address to bind: "127.0.0.1", "::1", "0.0.0.0", a name */
    int port;                /* 0 = any free port (colo_http_server_port tells which) */
    size_t max_body_bytes;   /* 0 = 1 MiB */
    size_t max_header_bytes; /* request line + headers; 0 = 16 KiB */
    int max_connections;     /* 0 = 4096 */
    int read_timeout_ms;     /* 0 = 30000 */
    int write_timeout_ms;    /* 0 = 30000 */
    int idle_timeout_ms;     /* 0 = 60000 */
    int linger_ms;           /* draining input after an error response; 0 = 1000 */
    bool log_requests;       /* one INFO line per finished request */
} colo_http_config;

/* Called on the loop thread with each complete request. The handler (or
 * work it starts) must finish the request exactly once, on the loop thread,
 * with colo_http_respond*, colo_http_error or colo_http_stream_end; the
 * request stays valid until then and must not be used after. */
typedef void (*colo_http_handler_fn)(colo_http_req *req, void *ud);

/* Called on the loop thread when a request has finished (its response is
 * complete or its connection is gone), before it is freed: for metrics. */
typedef void (*colo_http_done_fn)(const colo_http_req *req, void *ud);

/* ---- server ------------------------------------------------------------------ */

/* Binds and listens (raising RLIMIT_NOFILE to its hard limit and ignoring
 * SIGPIPE, both process-wide). NULL with a message on failure. */
colo_http_server *colo_http_server_create(const colo_http_config *cfg, colo_http_handler_fn handler, void *ud,
                                          char *err, size_t errlen);
/* After run has returned. Runs calls still queued (their requests are
 * aborted, so finishing them only frees them). Accepts NULL. Threads that
 * post with colo_http_server_call must have stopped. */
void colo_http_server_free(colo_http_server *s);
/* The bound port (useful with port 0). */
int colo_http_server_port(const colo_http_server *s);
/* Runs the event loop on the calling thread (the loop thread) until the
 * server has shut down. COLO_ERR if the loop failed. */
colo_status colo_http_server_run(colo_http_server *s);
/* Any thread, any number of times: stop accepting, close idle connections,
 * let requests in flight finish for up to timeout_ms, then make run return.
 * At timeout_ms the requests still in flight that set an on_cut hook are
 * told to end (they may still write a last event and finish); whatever is
 * left COLO_HTTP_CUT_GRACE_MS later is dropped (handlers see on_abort). */
void colo_http_server_shutdown(colo_http_server *s, int timeout_ms);
#define COLO_HTTP_CUT_GRACE_MS 1000
/* Any thread: fn(ud) runs on the loop thread soon, in call order.
 * COLO_ENOMEM if the call could not be queued (fn is then never called). */
colo_status colo_http_server_call(colo_http_server *s, void (*fn)(void *ud), void *ud);

/* A call whose memory the caller provides (embedded in its own record), so
 * that posting it cannot fail. */
typedef struct colo_http_call {
    void (*fn)(void *ud);
    void *ud;
    struct colo_http_call *next; /* the server's, while queued */
    bool heap;                   /* the server's: made by colo_http_server_call */
} colo_http_call;
/* Any thread: c->fn(c->ud) runs on the loop thread soon, in call order
 * with colo_http_server_call's. c must stay valid until fn starts, and may
 * be posted again from then on (not while it is still queued). */
void colo_http_server_post(colo_http_server *s, colo_http_call *c);
/* Loop thread: c->fn(c->ud) runs on a later turn of the loop, after it has
 * polled the network again, in defer order. Work split over turns (a
 * turn's budget spent, the rest deferred) so that other connections are
 * served in between. c must stay valid until fn starts and must not be
 * deferred again while it waits. Calls still waiting when the server is
 * freed run then (their requests aborted, so finishing them only frees). */
void colo_http_server_defer(colo_http_server *s, colo_http_call *c);
/* The loop's event base, for timers and signals of the embedding program. */
struct event_base *colo_http_server_base(colo_http_server *s);
void colo_http_server_on_done(colo_http_server *s, colo_http_done_fn fn, void *ud);

typedef struct colo_http_stats {
    uint64_t connections_open;     /* now */
    uint64_t connections_accepted; /* since start */
    uint64_t connections_rejected; /* 503 at the limit, or accept() failures */
    uint64_t connections_evicted;  /* idle keep-alive connections closed for room */
    uint64_t requests;             /* requests finished */
    uint64_t requests_in_flight;   /* handed to a handler, not finished */
    uint64_t output_pending_bytes; /* queued on all connections, not yet written */
    uint64_t output_pending_peak_bytes; /* the most there were since start */
} colo_http_stats;
/* Any thread. */
void colo_http_server_stats(const colo_http_server *s, colo_http_stats *out);
/* Any thread: bytes queued on all connections and not yet written (rendered
 * responses and stream events a client has not read). */
size_t colo_http_server_pending_bytes(const colo_http_server *s);

/* Bodies of requests to path may hold up to max_body_bytes (file uploads:
 * POST /v1/files) in place of the config's limit; past it, 413 with
 * message. One such path; before run. */
void colo_http_server_set_upload(colo_http_server *s, const char *path, size_t max_body_bytes, const char *message);

/* ---- requests made inside the server (loop thread) -------------------------------- */

struct colo_usage_row; /* server/ledger.h */

/* A request that no client sent: the lines of a batch run through the
 * same front door, routes and handlers as the client's requests, and the
 * answer comes back to on_response instead of a connection. */
typedef struct colo_http_local {
    int principal; /* whom it runs as: the tenants' key index (server/tenants.h) */
    bool batch;    /* a line of a batch: below every interactive request, accounted as batch */
    /* The whole answer (a stream's events are not delivered), once, just
     * before the request is freed; body is not NUL-terminated. */
    void (*on_response)(void *ud, int status, const char *body, size_t len);
    /* The usage row of the request, in place of the ledger's own write
     * (NULL: the ledger's), before on_response; the handler accounts it. */
    void (*on_usage)(void *ud, const struct colo_usage_row *row);
    void *ud;
} colo_http_local;

/* A request of method to path (its query after '?') with body (copied),
 * run as local says (copied); NULL when out of memory. Nothing runs until
 * colo_http_local_run. */
colo_http_req *colo_http_local_new(colo_http_server *s, const char *method, const char *path, const char *body,
                                   size_t len, const colo_http_local *local);
/* Hands r to the server's handler, as a connection hands a request read
 * whole; on_response follows, now or later. */
void colo_http_local_run(colo_http_req *r);
/* What r was made with; NULL for a client's request. */
const colo_http_local *colo_http_req_local(const colo_http_req *r);

/* ---- the request (loop thread) --------------------------------------------------- */

const char *colo_http_req_method(const colo_http_req *r); /* "GET" */
const char *colo_http_req_path(const colo_http_req *r);   /* percent-encoded, without the query */
const char *colo_http_req_query(const colo_http_req *r);  /* after '?', "" if none */
const char *colo_http_req_id(const colo_http_req *r);     /* X-Request-Id (sanitized) or generated */
/* Case-insensitive; the first such header; NULL if absent. */
const char *colo_http_req_header(const colo_http_req *r, const char *name);

/* The request headers colo itself reads, found once as each header
 * arrives (as nginx's headers_in), not by a search for each question. */
typedef enum colo_http_known {
    COLO_HDR_AUTHORIZATION,
    COLO_HDR_X_API_KEY,
    COLO_HDR_X_REQUEST_ID,
    COLO_HDR_EXPECT,
    COLO_HDR_TRANSFER_ENCODING,
    COLO_HDR_ORIGIN,
    COLO_HDR_AC_REQUEST_METHOD,  /* Access-Control-Request-Method */
    COLO_HDR_AC_REQUEST_HEADERS, /* Access-Control-Request-Headers */
    COLO_HDR_HOST,               /* counted: a second one is refused */
    COLO_HDR_N_KNOWN
} colo_http_known;
/* Known header h's first value; NULL if absent. */
const char *colo_http_req_known(const colo_http_req *r, colo_http_known h);
/* How many times the client sent it. */
int colo_http_req_known_count(const colo_http_req *r, colo_http_known h);

/* ---- credentials (http_auth.c): the one parser of Authorization and x-api-key ---- */

/* The token of "Bearer TOKEN" (scheme case-insensitive, spaces after it
 * skipped); NULL for another scheme or NULL. */
const char *colo_http_bearer(const char *authorization);
/* The request's one credential: "Authorization: Bearer KEY", "x-api-key:
 * KEY", or "Authorization: Basic" with the key as the password (any user
 * name), decoded into buf (cap bytes). *key points at it (in the request
 * or buf), without the spaces around it, and *len is its length.
 * COLO_EINVAL with *why (a static string) when there is none, more than
 * one, or an Authorization of another scheme or malformed. */
colo_status colo_http_req_credential(const colo_http_req *r, char *buf, size_t cap, const char **key, size_t *len,
                                     const char **why);
int colo_http_req_header_count(const colo_http_req *r);
/* The i-th header (0-based) in arrival order. */
void colo_http_req_header_at(const colo_http_req *r, int i, const char **name, const char **value);
/* The body, NUL-terminated (the NUL is not counted); "" and 0 if none. */
const char *colo_http_req_body(const colo_http_req *r, size_t *len);
/* A path parameter set by the router ("name" for /v1/models/{name}), NULL if none. */
const char *colo_http_req_param(const colo_http_req *r, const char *name);
/* Monotonic nanoseconds when the request's first byte arrived. */
uint64_t colo_http_req_start_ns(const colo_http_req *r);
int colo_http_req_status(const colo_http_req *r); /* 0 until a response started */
/* True once the client has gone away (after on_abort was called). */
bool colo_http_req_aborted(const colo_http_req *r);

/* For the log line and metrics. Strings are copied. */
void colo_http_req_set_model(colo_http_req *r, const char *model);
/* The status the log line and the done hook report when it differs from
 * the one the response began with: a stream whose headers said 200 but
 * that ended in an error or lost its client. */
void colo_http_req_set_log_status(colo_http_req *r, int status);
void colo_http_req_set_tokens(colo_http_req *r, long tokens);
void colo_http_req_set_queue_ms(colo_http_req *r, double queue_ms);
/* The matched route's pattern ("/v1/models/{name}"); pattern must outlive the request. */
void colo_http_req_set_route(colo_http_req *r, const char *pattern);
/* Adds a path parameter (copied); COLO_ENOMEM / COLO_EINVAL (too many). */
colo_status colo_http_req_set_param(colo_http_req *r, const char *name, const char *value);
const char *colo_http_req_model(const colo_http_req *r); /* "" if not set */
long colo_http_req_tokens(const colo_http_req *r);       /* -1 if not set */
const char *colo_http_req_route(const colo_http_req *r); /* NULL if not set */

/* fn(r, ud) runs on the loop thread if the client goes away before the
 * request is finished: stop the work. The handler must still finish the
 * request (which then only frees it). */
void colo_http_req_on_abort(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud);
/* fn(r, ud) runs on the loop thread if the server's shutdown deadline
 * passes with r unfinished: stop the work and finish r (a stream may still
 * send a last event) within COLO_HTTP_CUT_GRACE_MS, after which the
 * connection is dropped. */
void colo_http_req_on_cut(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud);

/* ---- responding (loop thread) -------------------------------------------------- */

/* Adds a response header ("Name", "value"; copied) before the response
 * starts. Names and values must not contain CR or LF (such calls are ignored). */
void colo_http_add_header(colo_http_req *r, const char *name, const char *value);
/* A whole response; finishes the request. */
void colo_http_respond(colo_http_req *r, int status, const char *content_type, const void *body, size_t len);
/* body is serialized compactly with a trailing newline; the reference is
 * stolen (NULL answers 500). Finishes the request. */
void colo_http_respond_json(colo_http_req *r, int status, json_t *body);
/* OpenAI's error object, {"error":{"message","type","param","code",
 * "request_id"}} (type from the status, colo_http_openai_error_type; param
 * the field a 400's or 404's message starts with, "max_tokens: ...", else null), or
 * the request's other error style (colo_http_req_set_error_style);
 * finishes the request. */
void colo_http_error(colo_http_req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The shape of colo_http_error's bodies for a request. */
typedef enum colo_http_error_style {
    COLO_HTTP_ERRORS_OPENAI = 0, /* {"error":{"message","type","param","code","request_id"}} */
    COLO_HTTP_ERRORS_ANTHROPIC,  /* {"type":"error","error":{"type","message"},"request_id"} */
} colo_http_error_style;
void colo_http_req_set_error_style(colo_http_req *r, colo_http_error_style style);
colo_http_error_style colo_http_req_error_style(const colo_http_req *r);
/* OpenAI's error type for an HTTP status: "invalid_request_error" (4xx but
 * these), "authentication_error" (401), "permission_error" (403),
 * "rate_limit_error" (429), "server_error" (5xx). */
const char *colo_http_openai_error_type(int status);
/* Anthropic's error type for an HTTP status: "invalid_request_error",
 * "authentication_error", "permission_error", "not_found_error",
 * "request_too_large", "rate_limit_error", "api_error", "overloaded_error". */
const char *colo_http_anthropic_error_type(int status);

/* A streaming response: chunked for HTTP/1.1, close-delimited for 1.0.
 * Writes after the client has gone away return COLO_ECANCELED and do
 * nothing; the request must still be ended with colo_http_stream_end. */
colo_status colo_http_stream_begin(colo_http_req *r, int status, const char *content_type);
colo_status colo_http_stream_write(colo_http_req *r, const void *data, size_t len);
/* One Server-Sent Event: "event: <event>\n" (when event is not NULL) and a
 * "data: " line per line of data, then a blank line. */
colo_status colo_http_sse_send(colo_http_req *r, const char *event, const char *data);
/* Ends the stream; finishes the request. */
void colo_http_stream_end(colo_http_req *r);
/* Ends the stream at once for a client that does not read: what is queued
 * and unsent is dropped and the connection closed. Finishes the request. */
void colo_http_stream_abort(colo_http_req *r);
/* Bytes queued on the connection and not yet written (0 if gone): a
 * producer may wait for it to fall before pushing more. */
size_t colo_http_req_pending_bytes(const colo_http_req *r);
/* fn(r, ud) runs once on the loop thread when a streaming response's
 * queued output has all been written to the socket (armed again by each
 * call; NULL disarms). It is never called for a connection that goes away
 * (on_abort is). fn may write to the stream; it must not finish r. */
void colo_http_req_on_drain(colo_http_req *r, void (*fn)(colo_http_req *r, void *ud), void *ud);

/* "Not Found" for 404...; "Unknown" for codes colo never sends. */
const char *colo_http_reason(int status);
/* The error code string colo uses for a status ("not_found"...). */
const char *colo_http_error_code(int status);

#endif
