/* Streams that do not end normally, end to end against colo-server: a
 * client that hangs up mid-stream is billed every token generated for it
 * (the ledger, its tokens quota, the model and tenant metrics and the
 * access log agree); a stream cut by the shutdown deadline ends with an
 * error event and [DONE], and is billed too; clients that never read their
 * streams hold at most the server's bound of unsent bytes (counted as
 * rendered JSON) before their streams are canceled and closed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/tenants/sha256.h"
#include "tests/server/server_fixture.h"

static const char *ADMIN_ENV = "COLO_TEST_ADMIN_KEY=op-key";
static const char *ADMIN_H = "Authorization: Bearer op-key\r\n";

/* One tenant, acme/t (key "kt"), with a tokens quota; extra goes into server:. */
static char *config_text(const char *server_extra, int tokens_per_minute)
{
    uint8_t d[32];
    char hex[65];
    colo_sha256("kt", 2, d);
    colo_sha256_hex(d, hex);
    char *y = malloc(4096);
    assert_non_null(y);
    snprintf(y, 4096,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, api_key_env: COLO_TEST_ADMIN_KEY%s }\n"
             "models:\n"
             "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: t, quotas: { tokens_per_minute: %d }, keys: [ { name: k, sha256: \"%s\" } ] }\n",
             server_extra, tokens_per_minute, hex);
    return y;
}

/* A streaming completion that cannot end early: every end-of-turn token is
 * biased away. */
static char *stream_request(const char *id, int max_tokens)
{
    int eos = colo_mkmodel_min_vocab() - 3; /* the synthetic vocabulary's specials */
    char body[512], headers[256];
    snprintf(body, sizeof body,
             "{\"model\":\"a\",\"prompt\":\"once upon a time\",\"max_tokens\":%d,\"stream\":true,\"seed\":5,"
             "\"logit_bias\":{\"%d\":-100,\"%d\":-100,\"%d\":-100}}",
             max_tokens, eos, eos + 1, eos + 2);
    snprintf(headers, sizeof headers, "Authorization: Bearer kt\r\nX-Request-Id: %s\r\n", id);
    return srv_post_raw("/v1/completions", headers, body);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Sends the request and reads until n_events "data: " lines have come. */
static int open_stream(srv_fixture *f, const char *raw, int n_events)
{
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    size_t cap = 1 << 20, have = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while (count(buf, "data: ") < n_events) {
        struct pollfd p = {fd, POLLIN, 0};
        assert_true(poll(&p, 1, 20000) > 0);
        assert_true(have + 1 < cap);
        ssize_t r = recv(fd, buf + have, cap - 1 - have, 0);
        assert_true(r > 0);
        have += (size_t)r;
        buf[have] = 0;
    }
    free(buf);
    return fd;
}

/* Prometheus: the value of a series, 0 when absent. */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return 0;
}

/* The ledger's row of acme/t with status, polled until it appears (the
 * request is accounted once the executor has stopped it). */
static json_t *usage_row(srv_fixture *f, int status)
{
    for (int i = 0; i < 500; i++) {
        srv_resp r;
        assert_true(srv_http_h(f, "GET", "/v1/usage?group_by=tenant,status", ADMIN_H, NULL, &r));
        assert_int_equal(r.status, 200);
        json_t *u = srv_json(&r);
        srv_resp_free(&r);
        size_t k;
        json_t *row;
        json_array_foreach(json_object_get(u, "data"), k, row)
            if (json_integer_value(json_object_get(row, "status")) == status &&
                !strcmp(json_string_value(json_object_get(row, "project")), "t")) {
                json_incref(row);
                json_decref(u);
                return row;
            }
        json_decref(u);
        srv_sleep_ms(20);
    }
    fail_msg("no ledger row with status %d", status);
    return NULL;
}

/* The access log's line for request id (polled: it is written as the request ends). */
static char *log_line(srv_fixture *f, const char *id)
{
    char needle[96];
    snprintf(needle, sizeof needle, "request id=%s ", id);
    for (int i = 0; i < 500; i++) {
        char *log = srv_log(f);
        const char *p = log ? strstr(log, needle) : NULL;
        if (p) {
            size_t n = strcspn(p, "\n");
            char *line = strndup(p, n);
            free(log);
            return line;
        }
        free(log);
        srv_sleep_ms(20);
    }
    fail_msg("no log line for %s", id);
    return NULL;
}

static long log_field(const char *line, const char *name)
{
    const char *p = strstr(line, name);
    assert_non_null(p);
    return strtol(p + strlen(name), NULL, 10);
}

/* A client reads 120 events of a 900-token stream and hangs up (RST): the
 * tokens generated for it are in the ledger (status 499), the tenant's and
 * the model's token counters and the access log (the same status), and its
 * tokens quota is spent, so its next request is refused. */
static void test_abandoned_stream_is_billed(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text("", 100);
    assert_true(srv_start_env(&f, y, ADMIN_ENV));
    free(y);
    char *raw = stream_request("cut-client", 900);
    int fd = open_stream(&f, raw, 120);
    free(raw);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);

    json_t *row = usage_row(&f, 499);
    long billed = (long)json_integer_value(json_object_get(row, "completion_tokens"));
    long prompt = (long)json_integer_value(json_object_get(row, "prompt_tokens"));
    json_decref(row);
    assert_true(billed >= 120); /* at least one token per event it read */
    assert_true(prompt > 0);

    char *line = log_line(&f, "cut-client");
    assert_int_equal(log_field(line, "status="), 499);
    assert_int_equal(log_field(line, "tokens="), billed);
    free(line);

    srv_resp r;
    assert_true(srv_http_h(&f, "GET", "/metrics", ADMIN_H, NULL, &r));
    assert_int_equal(r.status, 200);
    assert_true(metric(r.body, "colo_model_generated_tokens_total{model=\"a\"}") == (double)billed);
    assert_true(metric(r.body, "colo_tenant_tokens_total{tenant=\"acme/t\",model=\"a\",kind=\"completion\"}") ==
                (double)billed);
    srv_resp_free(&r);

    /* 100 tokens a minute, more than 120 spent: refused until it refills */
    assert_true(srv_http_h(&f, "POST", "/v1/completions", "Authorization: Bearer kt\r\n",
                           "{\"model\":\"a\",\"prompt\":\"again\",\"max_tokens\":2}", &r));
    assert_int_equal(r.status, 429);
    assert_non_null(strstr(r.body, "rate_limit_exceeded"));
    srv_resp_free(&r);
    srv_cleanup(&f);
}

/* SIGTERM with a stream in flight and no time to finish it: the stream
 * ends with an error event and [DONE], the server exits 0, and the tokens
 * it generated are in the ledger and the access log with status 503. */
static void test_sigterm_cut_stream_ends_and_is_billed(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 4, 128, 512, 4096));
    char *y = config_text(", drain_delay_ms: 0, shutdown_timeout_ms: 0", 1000000);
    assert_true(srv_start_env(&f, y, ADMIN_ENV));
    char *raw = stream_request("cut-shutdown", 4000);
    int fd = open_stream(&f, raw, 4);
    free(raw);
    assert_int_equal(kill(f.pid, SIGTERM), 0);
    size_t len;
    char *rest = srv_read_all(fd, 20000, &len);
    close(fd);
    assert_non_null(rest);
    const char *err = strstr(rest, "\"code\":\"shutting_down\"");
    assert_non_null(err);
    const char *done = strstr(err, "data: [DONE]\n\n");
    assert_non_null(done);
    assert_null(strstr(rest, "\"finish_reason\":\"length\"")); /* it was cut, not finished */
    free(rest);
    int st = 0;
    assert_int_equal(waitpid(f.pid, &st, 0), f.pid);
    f.pid = 0;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *line = log_line(&f, "cut-shutdown");
    assert_int_equal(log_field(line, "status="), 503);
    long logged = log_field(line, "tokens=");
    free(line);
    assert_true(logged >= 4);

    assert_true(srv_start_env(&f, y, ADMIN_ENV)); /* the ledger as the last run left it */
    free(y);
    json_t *row = usage_row(&f, 503);
    assert_int_equal(json_integer_value(json_object_get(row, "completion_tokens")), logged);
    json_decref(row);
    srv_cleanup(&f);
}

/* A Responses stream cut by SIGTERM: response.failed reports the tokens
 * it is billed (usage.output_tokens, what the access log says) and, as its
 * output, the text its deltas sent. */
static void test_sigterm_cut_responses_stream_reports_its_usage(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 4, 128, 512, 4096));
    char *y = config_text(", drain_delay_ms: 0, shutdown_timeout_ms: 0", 1000000);
    assert_true(srv_start_env(&f, y, ADMIN_ENV));
    free(y);
    char *raw = srv_post_raw("/v1/responses", "Authorization: Bearer kt\r\nX-Request-Id: cut-responses\r\n",
                             "{\"model\":\"a\",\"input\":\"once upon a time\",\"max_output_tokens\":4000,"
                             "\"temperature\":0,\"stream\":true}");
    int fd = open_stream(&f, raw, 8);
    free(raw);
    assert_int_equal(kill(f.pid, SIGTERM), 0);
    size_t len;
    char *rest = srv_read_all(fd, 20000, &len);
    close(fd);
    assert_non_null(rest);
    const char *body = strstr(rest, "event: ");
    int st = 0;
    assert_int_equal(waitpid(f.pid, &st, 0), f.pid);
    f.pid = 0;
    char *line = log_line(&f, "cut-responses");
    long logged = log_field(line, "tokens=");
    free(line);
    /* the events after the first ones read: the deltas sent, then response.failed */
    char *names[4096], *data[4096], said[65536] = "";
    int n = srv_sse(body, names, data, 4096);
    json_t *failed = NULL;
    for (int i = 0; i < n; i++) {
        json_t *ev = json_loads(data[i], 0, NULL);
        if (!strcmp(names[i], "response.output_text.delta"))
            strncat(said, json_string_value(json_object_get(ev, "delta")), sizeof said - strlen(said) - 1);
        if (!strcmp(names[i], "response.failed"))
            failed = json_incref(json_object_get(ev, "response"));
        json_decref(ev);
        free(names[i]), free(data[i]);
    }
    free(rest);
    assert_non_null(failed);
    assert_true(logged >= 4);
    json_t *usage = json_object_get(failed, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "output_tokens")), logged);
    assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")),
                     logged + json_integer_value(json_object_get(usage, "input_tokens")));
    json_t *item = json_array_get(json_object_get(failed, "output"), 0);
    assert_string_equal(json_string_value(json_object_get(item, "status")), "incomplete");
    const char *text = json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
    assert_non_null(text);
    size_t tl = strlen(text), sl = strlen(said);
    assert_true(tl >= sl && !strcmp(text + tl - sl, said)); /* it ends with what this client read after the cut */
    json_decref(failed);
    srv_cleanup(&f);
}

/* N clients ask for streams of 8 choices with 20 top logprobs each (about
 * 1.4 KB of JSON per token) and never read, with receive buffers of 4 KiB:
 * the server's unsent bytes never pass server.max_unsent_bytes by more than
 * what each stream may hold below COLO_API_STREAM_SLOW_BYTES (256 KiB) plus
 * an event, every stream is canceled and billed (503 in the access log),
 * and a client that reads still gets its whole stream afterwards. */
static void test_unread_streams_are_bounded(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 2048));
    const long cap = 3l << 20;
    char *y = config_text(", max_unsent_bytes: 3MiB", 1000000);
    assert_true(srv_start_env(&f, y, ADMIN_ENV));
    free(y);
    int eos = colo_mkmodel_min_vocab() - 3;
    enum { N = 6 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        char body[512], headers[128];
        snprintf(body, sizeof body,
                 "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"tell %d\"}],\"n\":8,"
                 "\"logprobs\":true,\"top_logprobs\":20,\"max_tokens\":1500,\"stream\":true,\"seed\":%d,"
                 "\"logit_bias\":{\"%d\":-100,\"%d\":-100,\"%d\":-100}}",
                 i, i, eos, eos + 1, eos + 2);
        snprintf(headers, sizeof headers, "Authorization: Bearer op-key\r\nX-Request-Id: unread-%d\r\n", i);
        char *raw = srv_post_raw("/v1/chat/completions", headers, body);
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        int rcv = 4096;
        assert_int_equal(setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv), 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
        assert_true(srv_send_all(fds[i], raw, strlen(raw)));
        free(raw);
    }
    /* every stream is canceled for not reading (the model then idles) */
    double cut = 0;
    srv_resp r;
    for (int i = 0; i < 3000 && cut < N; i++) {
        assert_true(srv_http_h(&f, "GET", "/metrics", ADMIN_H, NULL, &r));
        cut = metric(r.body, "colo_model_streams_unread_total{model=\"a\"}");
        srv_resp_free(&r);
        if (cut < N)
            srv_sleep_ms(20);
    }
    assert_true(cut == N);
    assert_true(srv_http_h(&f, "GET", "/metrics", ADMIN_H, NULL, &r));
    double peak = metric(r.body, "colo_http_unsent_peak_bytes");
    srv_resp_free(&r);
    print_message("unsent bytes at most %.0f (server.max_unsent_bytes %ld)\n", peak, cap);
    assert_true(peak > 0);
    assert_true(peak <= cap + N * ((256 << 10) + (64 << 10)));
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "unread-%d", i);
        char *line = log_line(&f, id);
        assert_int_equal(log_field(line, "status="), 503);
        assert_true(log_field(line, "tokens=") > 0);
        free(line);
        close(fds[i]);
    }
    /* a client that reads is served in full */
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"read\"}],\"n\":8,"
             "\"logprobs\":true,\"top_logprobs\":20,\"max_tokens\":200,\"stream\":true,\"seed\":9}");
    assert_true(srv_http_h(&f, "POST", "/v1/chat/completions", ADMIN_H, body, &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    assert_null(strstr(r.body, "\"error\""));
    srv_resp_free(&r);
    srv_cleanup(&f);
}

/* One client that never reads, under the default server bound (256 MiB):
 * its stream is canceled once the events rendered for it and unsent pass
 * 4 MiB (COLO_API_STREAM_MAX_BYTES), within one event. */
static void test_one_unread_stream_stops_at_its_cap(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 4096));
    char *y = config_text("", 1000000);
    assert_true(srv_start_env(&f, y, ADMIN_ENV));
    free(y);
    int eos = colo_mkmodel_min_vocab() - 3;
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],\"n\":16,"
             "\"logprobs\":true,\"top_logprobs\":20,\"max_tokens\":4000,\"stream\":true,\"seed\":3,"
             "\"logit_bias\":{\"%d\":-100,\"%d\":-100,\"%d\":-100}}",
             eos, eos + 1, eos + 2);
    char *raw = srv_post_raw("/v1/chat/completions", "Authorization: Bearer op-key\r\n", body);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int rcv = 4096;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    double cut = 0;
    srv_resp r;
    for (int i = 0; i < 3000 && cut < 1; i++) {
        assert_true(srv_http_h(&f, "GET", "/metrics", ADMIN_H, NULL, &r));
        cut = metric(r.body, "colo_model_streams_unread_total{model=\"a\"}");
        srv_resp_free(&r);
        if (cut < 1)
            srv_sleep_ms(20);
    }
    assert_true(cut == 1);
    assert_true(srv_http_h(&f, "GET", "/metrics", ADMIN_H, NULL, &r));
    double peak = metric(r.body, "colo_http_unsent_peak_bytes");
    assert_true(metric(r.body, "colo_http_unsent_bytes") < 64 << 10); /* its output went with its connection */
    srv_resp_free(&r);
    print_message("unsent bytes at most %.0f\n", peak);
    assert_true(peak > (1 << 20));
    assert_true(peak <= (4 << 20) + (64 << 10));
    close(fd);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abandoned_stream_is_billed),
        cmocka_unit_test(test_sigterm_cut_stream_ends_and_is_billed),
        cmocka_unit_test(test_sigterm_cut_responses_stream_reports_its_usage),
        cmocka_unit_test(test_unread_streams_are_bounded),
        cmocka_unit_test(test_one_unread_stream_stops_at_its_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
