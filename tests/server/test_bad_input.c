/* The bad-input matrix of docs/SECURITY.md, end to end: colo-server with two
 * models and an API key, and for each kind of bad input the status its
 * sender gets, followed by proof that the server still serves others (model
 * b gives its exact answer to an authorised request). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/tcp.h>
#include <sys/resource.h>

#include "server_fixture.h"

#define KEY "k3y-for-tests"
#define AUTH "Authorization: Bearer " KEY "\r\n"

static const char *yaml =
    "server:\n"
    "  listen: \"127.0.0.1:0\"\n"
    "  device: cpu\n"
    "  threads: 2\n"
    "  cpu_memory_bytes: 256MiB\n"
    "  api_key_env: COLO_TEST_KEY\n"
    "  max_body_bytes: 64KiB\n"
    "  max_header_bytes: 8KiB\n"
    "  max_connections: 512\n"
    "  read_timeout_ms: 800\n"
    "scheduler: { policy: spatial }\n"
    "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n";

static srv_fixture srv;
static json_t *b_tokens; /* b's answer to the probe, taken at the start */

static json_t *probe_tokens(void)
{
    srv_resp r;
    if (!srv_http_h(&srv, "POST", "/v1/models/b/infer", AUTH, "{\"prompt\":\"probe\",\"max_tokens\":5,\"seed\":1}", &r))
        return NULL;
    json_t *t = NULL;
    if (r.status == 200) {
        json_t *j = srv_json(&r);
        t = json_incref(json_object_get(j, "tokens"));
        json_decref(j);
    }
    srv_resp_free(&r);
    return t;
}

/* The server still answers others, exactly. */
static void assert_serving(void)
{
    json_t *t = probe_tokens();
    assert_non_null(t);
    assert_true(json_equal(t, b_tokens));
    json_decref(t);
}

static int setup(void **state)
{
    (void)state;
    /* room for the idle-connection case */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048) {
        rl.rlim_cur = rl.rlim_max < 2048 ? rl.rlim_max : 2048;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (!srv_tmpdir(&srv) || !srv_mkmodel(&srv, "m.gguf", 2, 64, 512, 256))
        return -1;
    if (!srv_start_env(&srv, yaml, "COLO_TEST_KEY=" KEY)) {
        char *log = srv_log(&srv);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        return -1;
    }
    b_tokens = probe_tokens();
    return b_tokens ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(b_tokens);
    int code = srv_stop(&srv);
    srv_cleanup(&srv);
    return code == 0 ? 0 : -1;
}

/* Sends raw on a new connection (then shuts the write side when eof) and
 * returns the status of the answer, 0 when the server closed without one. */
static int raw_status(const char *raw, size_t len, bool eof, char *code, size_t code_cap)
{
    int fd = srv_connect(srv.port);
    assert_true(fd >= 0);
    srv_send_all(fd, raw, len);
    if (eof)
        shutdown(fd, SHUT_WR);
    size_t n;
    char *buf = srv_read_all(fd, 10000, &n);
    close(fd);
    srv_resp r;
    int st = buf && srv_parse(buf, n, &r) > 0 ? r.status : 0;
    if (code)
        code[0] = 0;
    if (st) {
        json_t *j = srv_json(&r);
        json_t *c = json_object_get(json_object_get(j, "error"), "code");
        if (code && json_is_string(c))
            snprintf(code, code_cap, "%s", json_string_value(c));
        json_decref(j);
        srv_resp_free(&r);
    }
    free(buf);
    return st;
}

static char *post(const char *path, const char *headers, const char *body, size_t body_len)
{
    size_t cap = body_len + strlen(path) + strlen(headers) + 256;
    char *req = malloc(cap);
    assert_non_null(req);
    int n = snprintf(req, cap, "POST %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
                     path, headers, body_len);
    memcpy(req + n, body, body_len);
    req[n + body_len] = 0;
    return req;
}

/* Malformed HTTP and JSON, wrong types, bad numbers, unknown names, bad keys. */
static void test_matrix(void **state)
{
    (void)state;
    char *nested = malloc(60000 + 64); /* within the 64 KiB body limit */
    assert_non_null(nested);
    memset(nested, '[', 30000);
    memset(nested + 30000, ']', 30000);
    nested[60000] = 0;
    char *nested_field = malloc(20000 + 64);
    assert_non_null(nested_field);
    int k = sprintf(nested_field, "{\"prompt\":\"x\",\"stop\":");
    memset(nested_field + k, '[', 5000);
    memset(nested_field + k + 5000, ']', 5000);
    strcpy(nested_field + k + 10000, "}");
    static const struct {
        const char *name, *path, *headers, *body;
        int status;
        const char *code; /* NULL: any */
    } cases[] = {
        {"invalid UTF-8 in a prompt", "/v1/models/a/infer", AUTH, "{\"prompt\":\"ab\xff\xfe\xc3\"}", 400,
         "invalid_json"},
        {"overlong UTF-8 encoding", "/v1/models/a/infer", AUTH, "{\"prompt\":\"\xc0\xaf\"}", 400, "invalid_json"},
        {"UTF-16 surrogate escape alone", "/v1/models/a/infer", AUTH, "{\"prompt\":\"\\ud800\"}", 400,
         "invalid_json"},
        {"NUL escaped in a prompt", "/v1/models/a/infer", AUTH, "{\"prompt\":\"a\\u0000b\"}", 400, NULL},
        {"truncated JSON", "/v1/models/a/infer", AUTH, "{\"prompt\":\"abc", 400, "invalid_json"},
        {"empty body", "/v1/models/a/infer", AUTH, "", 400, NULL},
        {"duplicate keys", "/v1/models/a/infer", AUTH, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "invalid_json"},
        {"wrong type: prompt array", "/v1/models/a/infer", AUTH, "{\"prompt\":[\"x\"]}", 400, "invalid_request"},
        {"wrong type: max_tokens string", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"max_tokens\":\"9\"}", 400,
         "invalid_request"},
        {"wrong type: body a number", "/v1/models/a/infer", AUTH, "42", 400, NULL},
        {"negative max_tokens", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"max_tokens\":-1}", 400,
         "invalid_request"},
        {"huge max_tokens", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"max_tokens\":9223372036854775807}", 400,
         "invalid_request"},
        {"integer past 64 bits", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"max_tokens\":99999999999999999999999}",
         400, NULL},
        {"huge temperature", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"temperature\":1e308}", 400,
         "invalid_request"},
        {"temperature past double", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"temperature\":1e999}", 400, NULL},
        {"NaN temperature", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"temperature\":NaN}", 400, "invalid_json"},
        {"negative seed", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"seed\":-3}", 400, "invalid_request"},
        {"huge top_k", "/v1/models/a/infer", AUTH, "{\"prompt\":\"x\",\"top_k\":2147483648}", 400, "invalid_request"},
        {"deeply nested JSON", "/v1/models/a/infer", AUTH, NULL /* nested */, 400, NULL},
        {"deeply nested field", "/v1/models/a/infer", AUTH, NULL /* nested_field */, 400, NULL},
        {"unknown model", "/v1/models/nope/infer", AUTH, "{\"prompt\":\"x\"}", 404, "model_not_found"},
        {"unknown model (OpenAI)", "/v1/completions", AUTH, "{\"model\":\"nope\",\"prompt\":\"x\"}", 404,
         "model_not_found"},
        {"model name with ..", "/v1/models/..%2f..%2fetc/infer", AUTH, "{\"prompt\":\"x\"}", 404, NULL},
        {"unknown route", "/v1/models/a/train", AUTH, "{}", 404, NULL},
        {"no API key", "/v1/models/a/infer", "", "{\"prompt\":\"x\"}", 401, NULL},
        {"wrong API key", "/v1/models/a/infer", "Authorization: Bearer k3y-for-tesTs\r\n", "{\"prompt\":\"x\"}", 401,
         NULL},
        {"API key prefix", "/v1/models/a/infer", "Authorization: Bearer k3y\r\n", "{\"prompt\":\"x\"}", 401, NULL},
        {"API key as Basic", "/v1/models/a/infer", "Authorization: Basic " KEY "\r\n", "{\"prompt\":\"x\"}", 401,
         NULL},
        {"empty bearer", "/v1/models/a/infer", "Authorization: Bearer \r\n", "{\"prompt\":\"x\"}", 401, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *b = cases[i].body ? cases[i].body : !strcmp(cases[i].name, "deeply nested JSON") ? nested
                                                                                                     : nested_field;
        char *req = post(cases[i].path, cases[i].headers, b, strlen(b));
        char code[64];
        int st = raw_status(req, strlen(req), false, code, sizeof code);
        free(req);
        if (st != cases[i].status || (cases[i].code && strcmp(code, cases[i].code)))
            fail_msg("%s: got %d %s, want %d %s", cases[i].name, st, code, cases[i].status,
                     cases[i].code ? cases[i].code : "");
        assert_serving();
    }
    free(nested);
    free(nested_field);
}

/* HTTP-level abuse: truncated requests, oversized headers and bodies,
 * request smuggling shapes, protocol versions. */
static void test_http_abuse(void **state)
{
    (void)state;
    char *big_header = malloc(20000);
    assert_non_null(big_header);
    int n = sprintf(big_header, "GET /health/live HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(big_header + n, 'h', 12000);
    strcpy(big_header + n + 12000, "\r\n\r\n");
    char *many_headers = malloc(40000);
    assert_non_null(many_headers);
    n = sprintf(many_headers, "GET /health/live HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 2000; i++)
        n += sprintf(many_headers + n, "X-%d: v\r\n", i);
    strcpy(many_headers + n, "\r\n");
    char *long_url = malloc(20000);
    assert_non_null(long_url);
    n = sprintf(long_url, "GET /");
    memset(long_url + n, 'u', 12000);
    strcpy(long_url + n + 12000, " HTTP/1.1\r\nHost: t\r\n\r\n");
    static const char big_body_head[] = "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\n" AUTH
                                        "Content-Length: 100000000\r\n\r\n{\"prompt\":\"";
    static const char expect_head[] = "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\n" AUTH
                                      "Expect: 100-continue\r\nContent-Length: 5000000\r\n\r\n";
    char *chunked = malloc(200000);
    assert_non_null(chunked);
    n = sprintf(chunked, "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\n" AUTH "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 20; i++) {
        n += sprintf(chunked + n, "1000\r\n");
        memset(chunked + n, 'c', 4096);
        n += 4096;
        n += sprintf(chunked + n, "\r\n");
    }
    strcpy(chunked + n, "0\r\n\r\n");
    const struct {
        const char *name, *raw;
        bool eof;
        int status; /* 0: the server closes without an answer */
    } cases[] = {
        {"request line cut, then EOF", "POST /v1/models/a/inf", true, 0},
        {"headers cut, then EOF", "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\nContent-Le", true, 0},
        {"body cut, then EOF",
         "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\n" AUTH "Content-Length: 50\r\n\r\n{\"prompt\":", true, 0},
        {"binary garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", false, 400},
        {"HTTP/0.9", "GET /health/live\r\n", false, 400},
        {"HTTP/2.0", "GET /health/live HTTP/2.0\r\n\r\n", false, 505},
        {"HTTP/3", "GET /health/live HTTP/3.0\r\n\r\n", false, 505},
        {"header without a colon", "GET /health/live HTTP/1.1\r\nHost t\r\n\r\n", false, 400},
        {"NUL in a header", "GET /health/live HTTP/1.1\r\nX-A: a\x01\x00z\r\n\r\n", false, 400},
        {"two Content-Lengths",
         "POST /v1/models/a/infer HTTP/1.1\r\n" AUTH "Content-Length: 2\r\nContent-Length: 30\r\n\r\n{}", false, 400},
        {"Content-Length and chunked",
         "POST /v1/models/a/infer HTTP/1.1\r\n" AUTH "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         false, 400},
        {"negative Content-Length", "POST /v1/models/a/infer HTTP/1.1\r\n" AUTH "Content-Length: -5\r\n\r\n", false,
         400},
        {"bad chunk size", "POST /v1/models/a/infer HTTP/1.1\r\n" AUTH "Transfer-Encoding: chunked\r\n\r\nzz\r\n", false,
         400},
        {"bad method", "BREW /v1/models/a/infer HTTP/1.1\r\n\r\n", false, 400},
        {"wrong method", "DELETE /v1/models/a/infer HTTP/1.1\r\n" AUTH "\r\n", false, 405},
        {"body over the limit (by Content-Length)", big_body_head, false, 413},
        {"100-continue over the limit", expect_head, false, 413},
        {"chunked body over the limit", chunked, false, 413},
        {"one header over the limit", big_header, false, 431},
        {"2000 headers", many_headers, false, 431},
        {"URL over the limit", long_url, false, 414},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = raw_status(cases[i].raw, strlen(cases[i].raw), cases[i].eof, NULL, 0);
        if (st != cases[i].status)
            fail_msg("%s: got %d, want %d", cases[i].name, st, cases[i].status);
        assert_serving();
    }
    free(big_header);
    free(many_headers);
    free(long_url);
    free(chunked);
}

/* Slowloris: a client trickling its headers gets 408 after read_timeout_ms
 * from its first byte, while others are served all along. */
static void test_slow_client(void **state)
{
    (void)state;
    int fd = srv_connect(srv.port);
    assert_true(fd >= 0);
    const char *req = "POST /v1/models/a/infer HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    uint64_t t0 = srv_now_ms();
    size_t i = 0;
    bool closed = false;
    while (srv_now_ms() - t0 < 5000 && !closed) {
        if (i < strlen(req) && send(fd, req + i, 1, MSG_NOSIGNAL) == 1)
            i++;
        assert_serving(); /* between the trickled bytes */
        struct pollfd p = {fd, POLLIN, 0};
        closed = poll(&p, 1, 50) > 0;
    }
    assert_true(closed);
    uint64_t took = srv_now_ms() - t0;
    size_t n;
    char *buf = srv_read_all(fd, 2000, &n);
    close(fd);
    srv_resp r;
    assert_true(buf && srv_parse(buf, n, &r) > 0);
    assert_int_equal(r.status, 408);
    srv_resp_free(&r);
    free(buf);
    assert_true(took >= 700); /* not before its deadline (800 ms) */
    assert_serving();
}

/* Thousands of idle connections (more than max_connections): the server
 * keeps accepting by closing idle ones, and a new client is served. */
static void test_idle_connections(void **state)
{
    (void)state;
    enum { N = 1500 };
    static int fds[N];
    int opened = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = srv_connect(srv.port);
        if (fds[i] < 0)
            break;
        opened++;
        if (i % 100 == 99)
            srv_sleep_ms(5); /* let the loop accept */
    }
    assert_true(opened >= 1000);
    assert_serving();
    srv_resp r;
    assert_true(srv_http(&srv, "GET", "/health/live", NULL, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    /* the server closed the oldest idle ones to stay within its limit */
    int closed = 0;
    for (int i = 0; i < opened; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        if (poll(&p, 1, 0) > 0)
            closed++;
        close(fds[i]);
    }
    assert_true(closed >= opened - 512);
    assert_serving();
}

/* Clients that vanish mid-stream, many at once, free their sequences. */
static void test_vanishing_clients(void **state)
{
    (void)state;
    int fds[16];
    for (int i = 0; i < 16; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"prompt\":\"long story\",\"max_tokens\":240,\"seed\":%d,\"stream\":true}",
                 i % 2 ? 1 : 3);
        char *req = post(i % 2 ? "/v1/models/a/infer" : "/v1/models/b/infer", AUTH, body, strlen(body));
        fds[i] = srv_connect(srv.port);
        assert_true(fds[i] >= 0);
        srv_send_all(fds[i], req, strlen(req));
        free(req);
    }
    for (int i = 0; i < 16; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        poll(&p, 1, 5000);
        struct linger lg = {1, 0};
        if (i % 2)
            setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fds[i]);
    }
    bool idle = false;
    for (int t = 0; t < 250 && !idle; t++) {
        idle = true;
        for (int m = 0; m < 2; m++) {
            srv_resp r;
            assert_true(srv_http_h(&srv, "GET", m ? "/v1/models/b" : "/v1/models/a", AUTH, NULL, &r));
            json_t *j = srv_json(&r);
            json_t *kv = json_object_get(j, "kv_cache");
            idle = idle && json_integer_value(json_object_get(j, "running")) == 0 &&
                   json_integer_value(json_object_get(kv, "free_blocks")) ==
                       json_integer_value(json_object_get(kv, "blocks"));
            json_decref(j);
            srv_resp_free(&r);
        }
        if (!idle)
            srv_sleep_ms(20);
    }
    assert_true(idle);
    assert_serving();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_http_abuse),
        cmocka_unit_test(test_slow_client),
        cmocka_unit_test(test_idle_connections),
        cmocka_unit_test(test_vanishing_clients),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
