/* Fuzz target: HTTP/1.1 parsing, the connection state machine and routing
 * (server/http/http.h, server/http/router.h). A real colo_http_server, created once
 * with small limits and a router, adopts one end of a socket pair per input
 * as a new connection; the input is written to the other end, whose write
 * side is then shut, and the loop runs until the server has closed the
 * connection. Responses are read and discarded. Handlers answer at once, in
 * a stream of Server-Sent Events, or later from a queued call, so that
 * pipelined requests meet each state of the connection. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/http/http_impl.h"
#include "server/http/http_json.h"
#include "server/http/router.h"
#include "fuzz_common.h"

static colo_http_server *srv;
static colo_router *router;

/* ---- handlers ---------------------------------------------------------------------------- */

static void on_health(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_http_respond(req, 200, "text/plain", "ok\n", 3);
}

/* The body as JSON, echoed back with the request's parts. */
static void on_echo(colo_http_req *req, void *ud)
{
    (void)ud;
    json_t *body = colo_http_req_json(req);
    if (!body)
        return; /* answered 400 */
    json_t *out = json_pack("{s:o, s:s, s:s, s:s, s:i}", "body", body, "method", colo_http_req_method(req), "path",
                            colo_http_req_path(req), "query", colo_http_req_query(req), "headers",
                            colo_http_req_header_count(req));
    colo_http_respond_json(req, 200, out);
}

/* A path parameter and every header. */
static void on_model(colo_http_req *req, void *ud)
{
    (void)ud;
    const char *name = colo_http_req_param(req, "name");
    if (!name) {
        colo_http_error(req, 500, NULL, "no name parameter");
        return;
    }
    colo_http_req_set_model(req, name);
    json_t *headers = json_object();
    for (int i = 0; headers && i < colo_http_req_header_count(req); i++) {
        const char *k, *v;
        colo_http_req_header_at(req, i, &k, &v);
        json_object_set_new(headers, k, json_string(v));
    }
    colo_http_add_header(req, "X-Model", name);
    colo_http_respond_json(req, 200, json_pack("{s:s, s:o*}", "name", name, "headers", headers));
}

/* The body sent back as events, one per line of it. */
static void on_stream(colo_http_req *req, void *ud)
{
    (void)ud;
    size_t len;
    const char *body = colo_http_req_body(req, &len);
    if (colo_http_stream_begin(req, 200, "text/event-stream") == COLO_OK) {
        colo_http_sse_send(req, "start", colo_http_req_param(req, "name"));
        colo_http_sse_send(req, NULL, body);
        colo_http_stream_write(req, body, len);
    }
    colo_http_stream_end(req);
}

static void answer_later(void *ud)
{
    colo_http_req *req = ud;
    if (colo_http_req_aborted(req))
        colo_http_respond(req, 499, "text/plain", "", 0);
    else
        colo_http_respond(req, 202, "text/plain", "later\n", 6);
}

/* Answered from the call queue, as work on another thread answers. */
static void on_later(colo_http_req *req, void *ud)
{
    (void)ud;
    if (colo_http_server_call(srv, answer_later, req) != COLO_OK)
        colo_http_error(req, 503, NULL, "cannot queue");
}

static void dispatch(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_router_dispatch(router, req);
}

static void teardown(void)
{
    colo_http_server_free(srv);
    colo_router_free(router);
}

static void build(void)
{
    char err[256];
    colo_http_config cfg = {.host = "127.0.0.1",
                            .port = 0,
                            .max_body_bytes = 4096,
                            .max_header_bytes = 2048,
                            .max_connections = 4,
                            .read_timeout_ms = 1000,
                            .write_timeout_ms = 1000,
                            .idle_timeout_ms = 1000,
                            .linger_ms = 1000,
                            .log_requests = false};
    router = colo_router_create();
    if (!router || !(srv = colo_http_server_create(&cfg, dispatch, NULL, err, sizeof err)))
        abort();
    if (colo_router_add(router, "GET", "/health/live", on_health, NULL, COLO_ROUTE_PUBLIC) ||
        colo_router_add(router, "POST", "/v1/echo", on_echo, NULL, 0) ||
        colo_router_add(router, "PUT", "/v1/echo", on_echo, NULL, 0) ||
        colo_router_add(router, "GET", "/v1/models/{name}", on_model, NULL, 0) ||
        colo_router_add(router, "POST", "/v1/models/{name}/infer", on_echo, NULL, 0) ||
        colo_router_add(router, "POST", "/v1/models/{name}/stream", on_stream, NULL, 0) ||
        colo_router_add(router, "POST", "/v1/later", on_later, NULL, 0) ||
        colo_router_add(router, "GET", "/v1/later", on_later, NULL, 0))
        abort();
    atexit(teardown);
}

/* ---- one connection -------------------------------------------------------------------- */

typedef struct client {
    const uint8_t *data;
    size_t size, sent;
    bool shut;
    struct event *ev;
} client;

/* The client's side: writes the input as the socket takes it; reads and
 * drops whatever the server answers. */
static void on_client(evutil_socket_t fd, short what, void *arg)
{
    client *c = arg;
    if (what & EV_WRITE) {
        while (c->sent < c->size) {
            ssize_t w = send(fd, c->data + c->sent, c->size - c->sent, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            c->sent += (size_t)w;
        }
        if (c->sent == c->size || (errno != EAGAIN && errno != EINTR)) {
            c->sent = c->size; /* the server has gone: nothing more to send */
            event_del(c->ev);
            event_assign(c->ev, colo_http_server_base(srv), fd, EV_READ | EV_PERSIST, on_client, c);
            event_add(c->ev, NULL);
        }
    }
    if (what & EV_READ) {
        char buf[16384];
        ssize_t r;
        while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
        }
        if (r == 0 || (errno != EAGAIN && errno != EINTR))
            event_del(c->ev); /* the server has closed its side */
    }
}

/* The client shuts its write side once everything is sent and the server
 * waits for bytes that will not come (so pipelined requests are all
 * answered first, and no iteration waits for a timeout). */
static void maybe_shut(client *c, int client_fd, int server_fd)
{
    if (c->shut || c->sent < c->size || !srv->conns)
        return;
    http_conn *conn = srv->conns;
    switch (conn->state) {
    case CONN_IDLE:
    case CONN_READING_HEADERS:
    case CONN_READING_BODY:
    case CONN_LINGERING:
        break;
    default:
        return; /* a response is on its way */
    }
    int unread = 0;
    if (evbuffer_get_length(bufferevent_get_input(conn->bev)) || ioctl(server_fd, FIONREAD, &unread) || unread)
        return;
    shutdown(client_fd, SHUT_WR);
    c->shut = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(build);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
        abort();
    struct event_base *base = colo_http_server_base(srv);
    client c = {.data = data, .size = size};
    c.ev = event_new(base, sv[1], EV_READ | EV_WRITE | EV_PERSIST, on_client, &c);
    if (!c.ev)
        abort();
    event_add(c.ev, NULL);
    http_conn_accept(srv, sv[0]); /* the server owns sv[0] now */
    while (srv->n_conns > 0) {
        maybe_shut(&c, sv[1], sv[0]);
        if (event_base_loop(base, EVLOOP_ONCE) < 0)
            abort();
    }
    /* Queued calls of requests whose connection went away, and the deferred
     * closing of the server's socket. */
    event_del(c.ev);
    for (int i = 0; i < 4; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    event_free(c.ev);
    close(sv[1]);
    return 0;
}
