/* The HTTP server over real sockets: an in-process colo_server on an
 * ephemeral loopback port, run in a thread, driven by raw requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/http/http_json.h"
#include "server/core/server.h"

#define API_KEY_VAR "COLO_TEST_HTTP_KEY"
#define MAX_CONNS 4
#define READ_TIMEOUT_MS 300

typedef struct fixture {
    colo_config cfg;
    colo_server *srv;
    pthread_t loop;
    int port;
    bool ready;
} fixture;

/* ---- test handlers ------------------------------------------------------------- */

static void h_echo(colo_http_req *req, void *ud)
{
    (void)ud;
    size_t len;
    const char *body = colo_http_req_body(req, &len);
    colo_http_respond(req, 200, "application/octet-stream", body, len);
}

static void h_model(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_http_req_set_model(req, colo_http_req_param(req, "name"));
    colo_http_respond_json(req, 200, json_pack("{s:s}", "name", colo_http_req_param(req, "name")));
}

static void h_json(colo_http_req *req, void *ud)
{
    (void)ud;
    json_t *body = colo_http_req_json(req);
    if (!body)
        return;
    colo_http_respond_json(req, 200, json_pack("{s:i}", "keys", (int)json_object_size(body)));
    json_decref(body);
}

/* SSE fed from a producer thread through colo_http_server_call. */
typedef struct sse_job {
    colo_http_server *http;
    colo_http_req *req;
    int n_events;
    pthread_t thread;
} sse_job;

typedef struct sse_push {
    sse_job *job;
    int i; /* event index; n_events = the end */
} sse_push;

static void sse_on_loop(void *ud)
{
    sse_push *p = ud;
    sse_job *job = p->job;
    if (p->i < job->n_events) {
        char data[64];
        snprintf(data, sizeof data, "{\"i\":%d}\nline2", p->i);
        colo_http_sse_send(job->req, "token", data);
    } else {
        colo_http_sse_send(job->req, NULL, "[DONE]");
        colo_http_stream_end(job->req);
        pthread_detach(job->thread);
        free(job);
    }
    free(p);
}

/* Producers still pushing: the fixture waits for them before freeing the
 * server they push to. */
static atomic_int producers_running;

static void *sse_producer(void *arg)
{
    sse_job *job = arg;
    int n = job->n_events; /* the loop frees job after the last push */
    for (int i = 0; i <= n; i++) {
        sse_push *p = malloc(sizeof *p); /* not cmocka asserts: this is not the test's thread */
        if (!p)
            abort();
        p->job = job;
        p->i = i;
        if (colo_http_server_call(job->http, sse_on_loop, p) != COLO_OK)
            abort();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_sub(&producers_running, 1);
    return NULL;
}

static fixture *g_fx;

static void h_stream(colo_http_req *req, void *ud)
{
    (void)ud;
    sse_job *job = calloc(1, sizeof *job);
    assert_non_null(job);
    job->http = colo_server_http(g_fx->srv);
    job->req = req;
    job->n_events = 5;
    assert_int_equal(colo_http_stream_begin(req, 200, "text/event-stream"), COLO_OK);
    atomic_fetch_add(&producers_running, 1);
    assert_int_equal(pthread_create(&job->thread, NULL, sse_producer, job), 0);
}

static bool is_ready(void *ud) { return ((fixture *)ud)->ready; }

static void *loop_main(void *arg)
{
    fixture *fx = arg;
    assert_int_equal(colo_server_run(fx->srv), COLO_OK);
    return NULL;
}

static const char *g_cors; /* server.cors_allow_origins' one origin for the next start, or NULL */

static fixture *start(bool with_key)
{
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    colo_config_defaults(&fx->cfg);
    colo_server_cfg *sc = &fx->cfg.server;
    sc->listen_port = 0;
    sc->max_body_bytes = 1024;
    sc->max_header_bytes = 1024;
    sc->max_connections = MAX_CONNS;
    sc->read_timeout_ms = READ_TIMEOUT_MS;
    sc->idle_timeout_ms = 5000;
    sc->shutdown_timeout_ms = 2000;
    if (g_cors) {
        snprintf(sc->cors_origins[0], sizeof sc->cors_origins[0], "%s", g_cors);
        sc->n_cors_origins = 1;
    }
    if (with_key) {
        snprintf(sc->api_key_env, sizeof sc->api_key_env, API_KEY_VAR);
        setenv(API_KEY_VAR, "k3y-sekret", 1);
    }
    char err[256];
    fx->srv = colo_server_create(&fx->cfg, err, sizeof err);
    if (!fx->srv)
        fail_msg("colo_server_create: %s", err);
    fx->port = colo_server_port(fx->srv);
    assert_true(fx->port > 0);
    fx->ready = true;
    g_fx = fx;
    colo_server_set_ready(fx->srv, is_ready, fx);
    assert_int_equal(colo_server_route(fx->srv, "POST", "/test/echo", h_echo, NULL, 0), COLO_OK);
    assert_int_equal(colo_server_route(fx->srv, "POST", "/test/json", h_json, NULL, 0), COLO_OK);
    assert_int_equal(colo_server_route(fx->srv, "GET", "/test/stream", h_stream, NULL, 0), COLO_OK);
    assert_int_equal(colo_server_route(fx->srv, "GET", "/v1/models/{name}", h_model, NULL, 0), COLO_OK);
    assert_int_equal(colo_server_route(fx->srv, "POST", "/v1/models/{name}/infer", h_echo, NULL, 0), COLO_OK);
    assert_int_equal(pthread_create(&fx->loop, NULL, loop_main, fx), 0);
    return fx;
}

static void stop(fixture *fx)
{
    for (int i = 0; i < 5000 && atomic_load(&producers_running) > 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&producers_running), 0);
    colo_server_shutdown(fx->srv);
    assert_int_equal(pthread_join(fx->loop, NULL), 0);
    colo_server_free(fx->srv);
    unsetenv(API_KEY_VAR);
    free(fx);
}

static int setup(void **state)
{
    *state = start(false);
    return 0;
}

static int teardown(void **state)
{
    stop(*state);
    return 0;
}

/* ---- a small client ------------------------------------------------------------------ */

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        s += w;
        n -= (size_t)w;
    }
}
#define SEND(fd, s) send_all((fd), (s), strlen(s))

typedef struct conn_buf {
    int fd;
    char buf[1 << 16];
    size_t len;
    bool eof;
} conn_buf;

/* Reads more into cb; false on EOF or after timeout_ms without data. */
static bool fill(conn_buf *cb, int timeout_ms)
{
    struct pollfd p = {cb->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    assert_true(cb->len < sizeof cb->buf);
    ssize_t n = recv(cb->fd, cb->buf + cb->len, sizeof cb->buf - cb->len, 0);
    if (n <= 0) {
        cb->eof = true;
        return false;
    }
    cb->len += (size_t)n;
    return true;
}

typedef struct response {
    int status;
    char headers[4096];
    char body[1 << 15];
    size_t body_len;
} response;

static const char *header(const response *r, const char *name)
{
    static char value[512];
    const char *p = r->headers;
    size_t nl = strlen(name);
    while ((p = strstr(p, "\r\n"))) {
        p += 2;
        if (!strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, "\r");
            snprintf(value, sizeof value, "%.*s", (int)n, v);
            return value;
        }
    }
    return NULL;
}

static void consume(conn_buf *cb, size_t n)
{
    memmove(cb->buf, cb->buf + n, cb->len - n);
    cb->len -= n;
}

/* Reads one response (Content-Length, chunked, or until close). False if the
 * connection closed or went quiet first. */
static bool read_response(conn_buf *cb, response *r)
{
    memset(r, 0, sizeof *r);
    char *end;
    while (!(end = memmem(cb->buf, cb->len, "\r\n\r\n", 4)))
        if (!fill(cb, 3000))
            return false;
    size_t hlen = (size_t)(end - cb->buf) + 4;
    assert_true(hlen < sizeof r->headers);
    memcpy(r->headers, cb->buf, hlen);
    assert_int_equal(sscanf(r->headers, "HTTP/1.1 %d", &r->status), 1);
    consume(cb, hlen);
    const char *cl = header(r, "Content-Length"), *te = header(r, "Transfer-Encoding");
    if (cl) {
        size_t n = strtoul(cl, NULL, 10);
        while (cb->len < n)
            if (!fill(cb, 3000))
                return false;
        memcpy(r->body, cb->buf, n);
        r->body_len = n;
        consume(cb, n);
    } else if (te && !strcasecmp(te, "chunked")) {
        for (;;) {
            char *crlf;
            while (!(crlf = memmem(cb->buf, cb->len, "\r\n", 2)))
                if (!fill(cb, 3000))
                    return false;
            size_t n = strtoul(cb->buf, NULL, 16);
            size_t need = (size_t)(crlf - cb->buf) + 2 + n + 2;
            while (cb->len < need)
                if (!fill(cb, 3000))
                    return false;
            assert_true(r->body_len + n < sizeof r->body);
            memcpy(r->body + r->body_len, crlf + 2, n);
            r->body_len += n;
            consume(cb, need);
            if (n == 0)
                break;
        }
    } else {
        while (fill(cb, 3000))
            ;
        memcpy(r->body, cb->buf, cb->len);
        r->body_len = cb->len;
        cb->len = 0;
    }
    r->body[r->body_len] = 0;
    return true;
}

/* True when the server closes the connection (EOF) within timeout_ms. */
static bool closed_by_server(conn_buf *cb, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms && !cb->eof; waited += 50)
        fill(cb, 50);
    return cb->eof;
}

/* One request on a fresh connection. */
static void request(int port, const char *raw, response *r)
{
    conn_buf *cb = calloc(1, sizeof *cb);
    assert_non_null(cb);
    cb->fd = dial(port);
    SEND(cb->fd, raw);
    assert_true(read_response(cb, r));
    close(cb->fd);
    free(cb);
}

static conn_buf *open_conn(int port)
{
    conn_buf *cb = calloc(1, sizeof *cb);
    assert_non_null(cb);
    cb->fd = dial(port);
    return cb;
}

static void close_conn(conn_buf *cb)
{
    close(cb->fd);
    free(cb);
}

/* The body is a colo error with this code, and names the request id of the headers. */
static void assert_error_body(const response *r, const char *code)
{
    json_error_t je;
    json_t *j = json_loads(r->body, 0, &je);
    if (!j)
        fail_msg("error body is not JSON: '%s'", r->body);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_non_null(json_string_value(json_object_get(e, "message")));
    assert_non_null(json_string_value(json_object_get(e, "type"))); /* OpenAI's error object */
    assert_non_null(json_object_get(e, "param"));
    const char *id = json_string_value(json_object_get(e, "request_id"));
    assert_non_null(id);
    assert_non_null(header(r, "X-Request-Id"));
    assert_string_equal(id, header(r, "X-Request-Id"));
    assert_non_null(strstr(header(r, "Content-Type"), "application/json"));
    json_decref(j);
}

/* The server still answers normally. */
static void assert_alive(int port)
{
    response r;
    request(port, "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"live\"}\n");
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_health(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port, "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"live\"}\n");
    request(fx->port, "GET /health/ready HTTP/1.1\r\nHost: x\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ready\"}\n");
    fx->ready = false;
    request(fx->port, "GET /health/ready HTTP/1.1\r\nHost: x\r\n\r\n", &r);
    assert_int_equal(r.status, 503);
    assert_error_body(&r, "not_ready");
    fx->ready = true;
    /* HTTP/1.0 gets an answer and a close */
    request(fx->port, "GET /health/live HTTP/1.0\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "Connection"), "close");
}

static void test_metrics_promtool(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port, "GET /nowhere HTTP/1.1\r\n\r\n", &r);
    request(fx->port, "GET /health/live HTTP/1.1\r\n\r\n", &r);
    request(fx->port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(header(&r, "Content-Type"), "version=0.0.4"));
    assert_non_null(strstr(r.body, "# TYPE colo_http_requests_total counter"));
    assert_non_null(strstr(r.body, "colo_http_requests_total{method=\"GET\",route=\"/health/live\",status=\"200\"}"));
    assert_non_null(strstr(r.body, "colo_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1"));
    assert_non_null(strstr(r.body, "colo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/health/live\","
                                   "le=\"+Inf\"}"));
    assert_non_null(strstr(r.body, "colo_http_connections_open 1\n"));

    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        printf("promtool not found: format check skipped\n");
        return;
    }
    char path[] = "/tmp/colo_test_metrics_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, r.body, r.body_len), (ssize_t)r.body_len);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    int rc = system(cmd);
    unlink(path);
    assert_int_equal(rc, 0);
}

static void test_keepalive_and_pipelining(void **state)
{
    fixture *fx = *state;
    conn_buf *cb = open_conn(fx->port);
    response r;
    for (int i = 0; i < 5; i++) {
        char req[256];
        snprintf(req, sizeof req, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nbody-%d", i);
        SEND(cb->fd, req);
        assert_true(read_response(cb, &r));
        assert_int_equal(r.status, 200);
        char want[16];
        snprintf(want, sizeof want, "body-%d", i);
        assert_string_equal(r.body, want);
        assert_string_equal(header(&r, "Connection"), "keep-alive");
    }
    /* two requests (and half of a third) in one write: answers in order */
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nfirstGET /v1/models/second HTTP/1.1\r\n\r\n"
                 "POST /test/echo HTTP/1.1\r\nContent-Le");
    assert_true(read_response(cb, &r));
    assert_string_equal(r.body, "first");
    assert_true(read_response(cb, &r));
    assert_string_equal(r.body, "{\"name\":\"second\"}\n");
    SEND(cb->fd, "ngth: 5\r\n\r\nthird");
    assert_true(read_response(cb, &r));
    assert_string_equal(r.body, "third");
    /* Connection: close is honoured */
    SEND(cb->fd, "GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_string_equal(header(&r, "Connection"), "close");
    assert_true(closed_by_server(cb, 2000));
    close_conn(cb);
    /* pipelined requests then a half-close (printf ... | nc -N): every one
     * is answered, then the server closes */
    cb = open_conn(fx->port);
    for (int i = 0; i < 4; i++) {
        char req[256];
        snprintf(req, sizeof req, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nhalf-%d", i);
        SEND(cb->fd, req);
    }
    shutdown(cb->fd, SHUT_WR);
    for (int i = 0; i < 4; i++) {
        char want[16];
        snprintf(want, sizeof want, "half-%d", i);
        assert_true(read_response(cb, &r));
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, want);
    }
    assert_true(closed_by_server(cb, 2000));
    close_conn(cb);
}

static void test_chunked_body_and_expect(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port,
            "POST /test/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n",
            &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello world");

    /* Expect: 100-continue: the interim response comes before the body is sent */
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    while (!memmem(cb->buf, cb->len, "\r\n\r\n", 4))
        assert_true(fill(cb, 3000));
    assert_memory_equal(cb->buf, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    consume(cb, 25);
    SEND(cb->fd, "data");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "data");
    close_conn(cb);

    /* over the limit with Expect: 413 at once, no 100 */
    cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 413);
    assert_error_body(&r, "body_too_large");
    assert_true(closed_by_server(cb, 3000));
    close_conn(cb);
}

static void test_limits(void **state)
{
    fixture *fx = *state;
    response r;
    /* 413 from Content-Length, without sending the body */
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 1025\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 413);
    assert_error_body(&r, "body_too_large");
    assert_string_equal(header(&r, "Connection"), "close");
    assert_true(closed_by_server(cb, 3000));
    close_conn(cb);
    /* exactly the limit is fine */
    char *big = malloc(2048);
    assert_non_null(big);
    int n = snprintf(big, 2048, "POST /test/echo HTTP/1.1\r\nContent-Length: 1024\r\n\r\n");
    memset(big + n, 'a', 1024);
    big[n + 1024] = 0;
    request(fx->port, big, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 1024);
    /* a chunked body over the limit */
    cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n");
    memset(big, 'b', 1024);
    send_all(cb->fd, big, 1024);
    SEND(cb->fd, "\r\n1\r\nx\r\n0\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 413);
    close_conn(cb);
    /* a chunk declared past the limit: 413 from its size line, before its data */
    cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 413);
    assert_error_body(&r, "body_too_large");
    close_conn(cb);
    /* the same after a first chunk within the limit */
    cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n");
    memset(big, 'c', 512);
    send_all(cb->fd, big, 512);
    SEND(cb->fd, "\r\n201\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 413);
    close_conn(cb);
    /* 431: headers over max_header_bytes */
    n = snprintf(big, 2048, "GET /health/live HTTP/1.1\r\nX-Big: ");
    memset(big + n, 'h', 1100);
    strcpy(big + n + 1100, "\r\n\r\n");
    request(fx->port, big, &r);
    assert_int_equal(r.status, 431);
    assert_error_body(&r, "headers_too_large");
    free(big);
    assert_alive(fx->port);
}

static void test_bad_requests(void **state)
{
    fixture *fx = *state;
    static const struct {
        const char *raw;
        int status;
        const char *code;
    } cases[] = {
        {"GARBAGE\r\n\r\n", 400, "bad_request"},
        {"GET /health/live HTTP/1.1 extra\r\n\r\n", 400, "bad_request"},
        {"GET /health/live\r\n\r\n", 400, "bad_request"},           /* HTTP/0.9 */
        {"GET /health/live HTTP/2.0\r\n\r\n", 505, "http_version_not_supported"},
        {"GET /health/live HTTP/1.2\r\n\r\n", 505, "http_version_not_supported"},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "http_version_not_supported"},
        {"GET /health/live HTTP/1.1\r\nBad Header\r\n\r\n", 400, "bad_request"},
        {"POST /test/echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", 400, "bad_request"},
        {"POST /test/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad_request"},
        /* a transfer coding colo does not decode is not read as plain text (RFC 9112, 6.1) */
        {"POST /test/echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", 501,
         "not_implemented"},
        {"POST /test/echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501,
         "not_implemented"},
        {"POST /test/echo HTTP/1.1\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 501,
         "not_implemented"},
        /* a continuation line (obs-fold, RFC 9112 5.2), of any header */
        {"GET /health/live HTTP/1.1\r\nX-Note: one\r\n two\r\n\r\n", 400, "bad_request"},
        {"GET /health/live HTTP/1.1\r\nX-Note: one\r\n\ttwo\r\n\r\n", 400, "bad_request"},
        {"POST /test/echo HTTP/1.1\r\nContent-Type: application/json\r\n ; charset=utf-8\r\nContent-Length: 2\r\n"
         "\r\nab", 400, "bad_request"},
        /* headers a request carries once, twice */
        {"GET /health/live HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "bad_request"},
        {"GET /health/live HTTP/1.1\r\nOrigin: https://a.example\r\norigin: https://b.example\r\n\r\n", 400,
         "bad_request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        response r;
        conn_buf *cb = open_conn(fx->port);
        SEND(cb->fd, cases[i].raw);
        if (!read_response(cb, &r))
            fail_msg("no response to case %zu", i);
        if (r.status != cases[i].status)
            fail_msg("case %zu: status %d, expected %d", i, r.status, cases[i].status);
        assert_error_body(&r, cases[i].code);
        assert_string_equal(header(&r, "Connection"), "close");
        assert_true(closed_by_server(cb, 3000));
        close_conn(cb);
        assert_alive(fx->port);
    }
    /* HTTP/0.9 answered even without a blank line */
    response r;
    request(fx->port, "GET /\r\n", &r);
    assert_int_equal(r.status, 400);
    assert_alive(fx->port);
}

static void test_routes_404_405(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port, "GET /v1/nothing HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 404);
    assert_error_body(&r, "not_found");
    assert_non_null(strstr(r.headers, "404 Not Found"));
    request(fx->port, "DELETE /health/live HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 405);
    assert_error_body(&r, "method_not_allowed");
    assert_string_equal(header(&r, "Allow"), "GET, HEAD");
    assert_non_null(strstr(r.headers, "405 Method Not Allowed"));
    /* parameterized routes: params decoded, exact segments beat parameters */
    request(fx->port, "GET /v1/models/sm%6Fl HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"name\":\"smol\"}\n");
    request(fx->port, "GET /v1/models/ HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 404);
    request(fx->port, "GET /v1/models/a/infer HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(header(&r, "Allow"), "POST");
    request(fx->port, "POST /v1/models/a/infer?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\nok", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok");
    /* 404 keeps the connection open */
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "GET /zzz HTTP/1.1\r\n\r\nGET /health/live HTTP/1.1\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 404);
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 200);
    close_conn(cb);
}

static void test_json_bodies(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port, "POST /test/json HTTP/1.1\r\nContent-Length: 13\r\n\r\n{\"a\":1,\"b\":2}", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"keys\":2}\n");
    static const char *bad[] = {
        "",
        "{\"a\":1,\"a\":2}", /* duplicate keys */
        "{\"a\":",           /* truncated */
        "[1,2]",             /* not an object */
        "{\"a\":\"\xff\"}",  /* invalid UTF-8 */
        "{} {}",             /* trailing data */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char req[256];
        snprintf(req, sizeof req, "POST /test/json HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s", strlen(bad[i]),
                 bad[i]);
        request(fx->port, req, &r);
        if (r.status != 400)
            fail_msg("body %zu: status %d", i, r.status);
        assert_error_body(&r, "invalid_json");
    }
    /* nesting: 64 levels pass, 65 do not */
    char deep[512];
    for (int depth = 64; depth <= 65; depth++) {
        int n = 0;
        n += sprintf(deep + n, "{\"a\":");
        for (int i = 1; i < depth; i++)
            deep[n++] = '[';
        deep[n++] = '1';
        for (int i = 1; i < depth; i++)
            deep[n++] = ']';
        deep[n++] = '}';
        deep[n] = 0;
        char req[700];
        snprintf(req, sizeof req, "POST /test/json HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", n, deep);
        request(fx->port, req, &r);
        assert_int_equal(r.status, depth == 64 ? 200 : 400);
    }
    /* brackets inside strings do not nest */
    char err[128];
    json_t *v = colo_json_parse("[\"[[[[\"]", 8, 1, err, sizeof err);
    assert_non_null(v);
    json_decref(v);
    assert_null(colo_json_parse("[[1]]", 5, 1, err, sizeof err));
}

static void test_request_ids(void **state)
{
    fixture *fx = *state;
    response r;
    request(fx->port, "GET /health/live HTTP/1.1\r\nX-Request-Id: abc-123\r\n\r\n", &r);
    assert_string_equal(header(&r, "X-Request-Id"), "abc-123");
    request(fx->port, "GET /nope HTTP/1.1\r\nX-Request-Id: my.id_42\r\n\r\n", &r);
    assert_string_equal(header(&r, "X-Request-Id"), "my.id_42");
    assert_error_body(&r, "not_found");
    /* unacceptable ids are replaced by generated ones: 16 hex digits, unique */
    char seen[8][32];
    for (int i = 0; i < 8; i++) {
        const char *bad = i % 2 ? "X-Request-Id: has space\r\n" : "X-Request-Id: "
                                                                  "0123456789012345678901234567890123456789"
                                                                  "0123456789012345678901234567890\r\n";
        char req[512];
        snprintf(req, sizeof req, "GET /health/live HTTP/1.1\r\n%s\r\n", i < 2 ? bad : "");
        request(fx->port, req, &r);
        const char *id = header(&r, "X-Request-Id");
        assert_non_null(id);
        assert_int_equal(strlen(id), 16);
        assert_int_equal(strspn(id, "0123456789abcdef"), 16);
        snprintf(seen[i], sizeof seen[i], "%s", id);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(seen[i], seen[j]);
    }
}

static void test_read_timeout_408(void **state)
{
    fixture *fx = *state;
    response r;
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    assert_true(read_response(cb, &r)); /* waits past READ_TIMEOUT_MS */
    assert_int_equal(r.status, 408);
    assert_error_body(&r, "request_timeout");
    assert_true(closed_by_server(cb, 3000));
    close_conn(cb);
    /* a slow header trickle too */
    cb = open_conn(fx->port);
    SEND(cb->fd, "GET /health/live HTTP/1.1\r\n");
    SEND(cb->fd, "X-A: 1\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 408);
    close_conn(cb);
    assert_alive(fx->port);
}

static void test_sse_from_thread(void **state)
{
    fixture *fx = *state;
    response r;
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "GET /test/stream HTTP/1.1\r\nX-Request-Id: sse-1\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "Content-Type"), "text/event-stream");
    assert_string_equal(header(&r, "Transfer-Encoding"), "chunked");
    assert_string_equal(header(&r, "X-Request-Id"), "sse-1");
    char want[1024] = "";
    for (int i = 0; i < 5; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "event: token\ndata: {\"i\":%d}\ndata: line2\n\n",
                 i);
    strcat(want, "data: [DONE]\n\n");
    assert_string_equal(r.body, want);
    /* the connection is reusable after the stream */
    SEND(cb->fd, "GET /health/live HTTP/1.1\r\n\r\n");
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 200);
    close_conn(cb);

    /* HTTP/1.0: close-delimited stream */
    request(fx->port, "GET /test/stream HTTP/1.0\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_null(header(&r, "Transfer-Encoding"));
    assert_string_equal(r.body, want);

    /* a client that leaves mid-stream: the producer's pushes become no-ops */
    cb = open_conn(fx->port);
    SEND(cb->fd, "GET /test/stream HTTP/1.1\r\n\r\n");
    close_conn(cb);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    assert_alive(fx->port);
}

static void test_connection_limit(void **state)
{
    fixture *fx = *state;
    /* MAX_CONNS idle keep-alive connections, oldest first */
    conn_buf *cbs[MAX_CONNS + 1];
    response r;
    for (int i = 0; i < MAX_CONNS; i++) {
        cbs[i] = open_conn(fx->port);
        SEND(cbs[i]->fd, "GET /health/live HTTP/1.1\r\n\r\n");
        assert_true(read_response(cbs[i], &r));
        assert_int_equal(r.status, 200);
    }
    /* one more: the oldest idle one is closed, the new one served */
    cbs[MAX_CONNS] = open_conn(fx->port);
    SEND(cbs[MAX_CONNS]->fd, "GET /health/live HTTP/1.1\r\n\r\n");
    assert_true(read_response(cbs[MAX_CONNS], &r));
    assert_int_equal(r.status, 200);
    assert_true(closed_by_server(cbs[0], 3000));
    for (int i = 1; i <= MAX_CONNS; i++) {
        SEND(cbs[i]->fd, "GET /health/live HTTP/1.1\r\n\r\n");
        assert_true(read_response(cbs[i], &r));
        assert_int_equal(r.status, 200);
    }
    /* all busy (mid-request, not idle): a new connection gets 503 */
    for (int i = 1; i <= MAX_CONNS; i++)
        SEND(cbs[i]->fd, "POST /test/echo HTTP/1.1\r\nContent-Length: 3\r\n\r\n");
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    conn_buf *extra = open_conn(fx->port);
    assert_true(read_response(extra, &r));
    assert_int_equal(r.status, 503);
    close_conn(extra);
    for (int i = 0; i <= MAX_CONNS; i++)
        close_conn(cbs[i]);
    nanosleep(&ts, NULL);
    assert_alive(fx->port);
}

/* Browsers: a preflight from an allowed origin is answered without the API
 * key; answers to it carry Access-Control-Allow-Origin; another origin's
 * preflight gets 403 and its answers no CORS headers. */
static void test_cors(void **state)
{
    (void)state;
    g_cors = "https://app.example";
    fixture *fx = start(true);
    g_cors = NULL;
    response r;
    request(fx->port,
            "OPTIONS /v1/models/m/infer HTTP/1.1\r\nOrigin: https://app.example\r\n"
            "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n",
            &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "https://app.example");
    assert_non_null(strstr(header(&r, "Access-Control-Allow-Methods"), "POST"));
    assert_string_equal(header(&r, "Access-Control-Allow-Headers"), "authorization, content-type");
    assert_null(header(&r, "Content-Length"));
    request(fx->port,
            "OPTIONS /v1/models/m/infer HTTP/1.1\r\nOrigin: https://evil.example\r\n"
            "Access-Control-Request-Method: POST\r\n\r\n",
            &r);
    assert_int_equal(r.status, 403);
    assert_error_body(&r, "origin_not_allowed");
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    /* the request itself still needs the key, and its answer says who may read it */
    request(fx->port,
            "POST /test/echo HTTP/1.1\r\nOrigin: https://app.example\r\nAuthorization: Bearer k3y-sekret\r\n"
            "Content-Length: 2\r\n\r\nhi",
            &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "https://app.example");
    assert_string_equal(header(&r, "Vary"), "Origin");
    request(fx->port, "POST /test/echo HTTP/1.1\r\nOrigin: https://app.example\r\nContent-Length: 2\r\n\r\nhi", &r);
    assert_int_equal(r.status, 401);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "https://app.example"); /* so the page reads why */
    request(fx->port,
            "POST /test/echo HTTP/1.1\r\nOrigin: https://evil.example\r\nAuthorization: Bearer k3y-sekret\r\n"
            "Content-Length: 2\r\n\r\nhi",
            &r);
    assert_int_equal(r.status, 200);
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    stop(fx);
    /* without origins configured, OPTIONS is a method like another: 405 */
    fx = start(false);
    request(fx->port,
            "OPTIONS /v1/models/m/infer HTTP/1.1\r\nOrigin: https://app.example\r\n"
            "Access-Control-Request-Method: POST\r\n\r\n",
            &r);
    assert_int_equal(r.status, 405);
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    stop(fx);
}

static void test_api_key(void **state)
{
    (void)state;
    fixture *fx = start(true);
    response r;
    request(fx->port, "GET /metrics HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 401);
    assert_error_body(&r, "invalid_api_key");
    assert_string_equal(header(&r, "WWW-Authenticate"), "Bearer");
    request(fx->port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer wrong-key!\r\n\r\n", &r);
    assert_int_equal(r.status, 401);
    request(fx->port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer k3y-sekre\r\n\r\n", &r);
    assert_int_equal(r.status, 401);
    request(fx->port, "GET /metrics HTTP/1.1\r\nAuthorization: Basic k3y-sekret\r\n\r\n", &r);
    assert_int_equal(r.status, 401);
    request(fx->port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer k3y-sekret\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    request(fx->port, "GET /v1/models/x HTTP/1.1\r\nAuthorization: bearer k3y-sekret\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    /* health is exempt */
    request(fx->port, "GET /health/live HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    request(fx->port, "GET /health/ready HTTP/1.1\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    stop(fx);

    assert_true(colo_server_auth_ok("Bearer abc", "abc"));
    assert_false(colo_server_auth_ok("Bearer abd", "abc"));
    assert_false(colo_server_auth_ok("Bearer abcd", "abc"));
    assert_false(colo_server_auth_ok("Bearer ", "abc"));
    assert_false(colo_server_auth_ok(NULL, "abc"));
    assert_false(colo_server_auth_ok("Bearer x", ""));
}

static void test_graceful_shutdown(void **state)
{
    (void)state;
    fixture *fx = start(false);
    /* a stream in flight finishes before run returns */
    conn_buf *cb = open_conn(fx->port);
    SEND(cb->fd, "GET /test/stream HTTP/1.1\r\n\r\n");
    while (!memmem(cb->buf, cb->len, "\r\n\r\n", 4))
        assert_true(fill(cb, 3000));
    colo_server_shutdown(fx->srv);
    response r;
    assert_true(read_response(cb, &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    assert_string_equal(header(&r, "Connection"), "keep-alive"); /* sent before the shutdown */
    assert_true(closed_by_server(cb, 3000));
    close_conn(cb);
    assert_int_equal(pthread_join(fx->loop, NULL), 0);
    /* no longer listening */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_not_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
    colo_server_free(fx->srv);
    free(fx);
}

int main(void)
{
    setenv("COLO_LOG_LEVEL", "warn", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_promtool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keepalive_and_pipelining, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunked_body_and_expect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_routes_404_405, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_bodies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_timeout_408, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sse_from_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_limit, setup, teardown),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_cors),
        cmocka_unit_test(test_graceful_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
