/* The admin routes through colo-server: sleep and wake under traffic to the
 * same and another model (every request answered, answers unchanged,
 * memory given back while asleep), keep_alive_ms, concurrent wakes, and the
 * hostile inputs (unknown model, wrong key, the API key, no key on a
 * public listener), each a clear 4xx that changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

#define ADMIN_H "Authorization: Bearer admin-secret\r\n"
#define USER_H "Authorization: Bearer user-secret\r\n"

static const char *yaml_models =
    "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3, kv_cache: { dtype: f32 } }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.3, kv_cache: { dtype: f32 } }\n"
    "  - { name: c, kind: llama, path: m.gguf, memory_fraction: 0.3, keep_alive_ms: 300 }\n";

static bool start(srv_fixture *f, const char *listen, const char *env)
{
    char path[512], err[256], yaml[1024];
    snprintf(path, sizeof path, "%s/m.gguf", f->dir);
    colo_mkmodel_config mc = {.n_layer = 2, .n_embd = 128, .n_head = 4, .n_kv_head = 2, .n_ff = 256,
                              .n_vocab = 512, .n_ctx = 256, .type = COLO_F32, .seed = 101};
    if (colo_mkmodel_write(path, &mc, err, sizeof err) != COLO_OK)
        return false;
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"%s\", device: cpu, threads: 2, cpu_memory_bytes: 256MiB, api_key_env: "
             "COLO_TEST_USER_KEY }\n%s",
             listen, yaml_models);
    if (!srv_start_env(f, yaml, env)) {
        char *log = srv_log(f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log ? log : "");
        free(log);
        return false;
    }
    return true;
}

static int status_of(srv_fixture *f, const char *method, const char *path, const char *headers, const char *code)
{
    srv_resp r;
    assert_true(srv_http_h(f, method, path, headers, "", &r));
    int s = r.status;
    if (code) {
        json_t *j = srv_json(&r);
        assert_non_null(j);
        const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        assert_non_null(got);
        assert_string_equal(got, code);
        json_decref(j);
    }
    srv_resp_free(&r);
    return s;
}

static json_t *model(srv_fixture *f, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    srv_resp r;
    assert_true(srv_http_h(f, "GET", path, USER_H, NULL, &r));
    assert_int_equal(r.status, 200);
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    return j;
}

static const char *state_of(json_t *m) { return json_string_value(json_object_get(m, "state")); }

static bool wait_state(srv_fixture *f, const char *name, const char *want)
{
    for (int i = 0; i < 500; i++) {
        json_t *m = model(f, name);
        bool ok = !strcmp(state_of(m), want);
        json_decref(m);
        if (ok)
            return true;
        srv_sleep_ms(10);
    }
    return false;
}

/* The steps of model name that /metrics counts cold: first steps of
 * requests that woke it (colo_scheduler_cold_steps_total); -1 when absent. */
static double cold_steps(srv_fixture *f, const char *name)
{
    srv_resp r;
    assert_true(srv_http_h(f, "GET", "/metrics", USER_H, NULL, &r));
    assert_int_equal(r.status, 200);
    char series[160];
    snprintf(series, sizeof series, "\ncolo_scheduler_cold_steps_total{model=\"%s\",policy=\"spatial\"} ", name);
    const char *p = strstr(r.body, series);
    double v = p ? strtod(p + strlen(series), NULL) : -1;
    srv_resp_free(&r);
    return v;
}

static int send_infer(srv_fixture *f, const char *name, int seed, int max_tokens)
{
    char body[160], path[64];
    snprintf(body, sizeof body, "{\"prompt\":\"tale %d\",\"max_tokens\":%d,\"temperature\":0}", seed, max_tokens);
    snprintf(path, sizeof path, "/v1/models/%s/infer", name);
    char *raw = srv_post_raw(path, USER_H, body);
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    return fd;
}

static json_t *recv_tokens(int fd)
{
    size_t len;
    char *buf = srv_read_all(fd, 60000, &len);
    close(fd);
    srv_resp r;
    assert_true(buf && srv_parse(buf, len, &r) > 0);
    free(buf);
    if (r.status != 200)
        fprintf(stderr, "%d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    /* (generated text may hold U+0000, which jansson refuses by default) */
    json_t *j = r.body ? json_loads(r.body, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *t = json_incref(json_object_get(j, "tokens"));
    if (!t)
        fprintf(stderr, "no tokens in: %s\n", r.body ? r.body : "(no body)");
    srv_resp_free(&r);
    json_decref(j);
    assert_non_null(t);
    return t;
}

static json_t *infer(srv_fixture *f, const char *name, int seed) { return recv_tokens(send_infer(f, name, seed, 40)); }

static void test_sleep_wake_under_traffic(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    setenv("COLO_TEST_USER_KEY", "user-secret", 1); /* inherited by colo-server */
    assert_true(start(&f, "127.0.0.1:0", "COLO_ADMIN_KEY=admin-secret"));
    json_t *ref_a = infer(&f, "a", 1), *ref_b = infer(&f, "b", 2);
    json_t *ref_long = recv_tokens(send_infer(&f, "a", 5, 200));

    /* Hostile: no key, the API key, a wrong key, an unknown model, an
     * unknown route; nothing changes. */
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", NULL, "unauthorized"), 401);
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", USER_H, "unauthorized"), 401);
    /* the admin key as a Basic password: the admin routes take Bearer only */
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", "Authorization: Basic YWRtaW46YWRtaW4tc2VjcmV0\r\n",
                               "unauthorized"),
                     401);
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", "Authorization: Bearer admin-secreT\r\n",
                               "unauthorized"), 401);
    assert_int_equal(status_of(&f, "GET", "/admin/models", USER_H, "unauthorized"), 401);
    assert_int_equal(status_of(&f, "POST", "/admin/models/zzz/sleep", ADMIN_H, "model_not_found"), 404);
    /* a path under /admin/ that is no admin route: 404 to the admin key,
     * 401 to any other (the API key tells nothing about the admin routes) */
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/nap", ADMIN_H, "not_found"), 404);
    assert_int_equal(status_of(&f, "GET", "/admin/nothing", ADMIN_H, "not_found"), 404);
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/nap", USER_H, "unauthorized"), 401);
    assert_int_equal(status_of(&f, "GET", "/admin/nothing", NULL, "unauthorized"), 401);
    assert_int_equal(status_of(&f, "GET", "/admin/models/a", ADMIN_H, "method_not_allowed"), 405);
    json_t *ma = model(&f, "a");
    assert_string_equal(state_of(ma), "ready");
    json_decref(ma);
    assert_int_equal(status_of(&f, "GET", "/admin/models", ADMIN_H, NULL), 200);

    /* Sleep a while four of its requests run: they finish first, all 200
     * and unchanged; b answers as before throughout. */
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = send_infer(&f, "a", 5, 200);
    for (int i = 0; i < 200; i++) { /* until they run */
        json_t *m = model(&f, "a");
        int running = (int)json_integer_value(json_object_get(m, "running"));
        json_decref(m);
        if (running > 0)
            break;
        srv_sleep_ms(2);
    }
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", ADMIN_H, NULL), 202);
    ma = model(&f, "a");
    bool still_running = json_integer_value(json_object_get(ma, "running")) > 0;
    json_decref(ma);
    json_t *got = infer(&f, "b", 2);
    assert_true(json_equal(got, ref_b));
    json_decref(got);
    for (int i = 0; i < 4; i++) {
        got = recv_tokens(fds[i]);
        assert_true(json_equal(got, ref_long));
        json_decref(got);
    }
    if (!still_running)
        fprintf(stderr, "note: a's requests had finished before the sleep was asked\n");
    /* (a request still queued when the sleep came wakes it again at once;
     * asking once more with nothing queued puts it to sleep for good) */
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", ADMIN_H, NULL), 202);
    if (!wait_state(&f, "a", "sleeping")) {
        char *log = srv_log(&f);
        fprintf(stderr, "%s\n", log ? log : "");
        free(log);
        fail();
    }
    ma = model(&f, "a");
    json_t *mem = json_object_get(ma, "memory");
    assert_int_equal(json_integer_value(json_object_get(mem, "used_bytes")), 0);
    assert_int_equal(json_integer_value(json_object_get(mem, "weights_bytes")), 0);
    json_decref(ma);
    /* /health/ready stays 200: a sleeping model serves. */
    assert_int_equal(status_of(&f, "GET", "/health/ready", NULL, NULL), 200);
    /* A request wakes it, with the same answer; its first step was cold
     * (it went by the request's deadline and at the next step boundary),
     * and only that one. */
    double cold_before = cold_steps(&f, "a");
    assert_true(cold_before >= 0);
    got = infer(&f, "a", 1);
    assert_true(json_equal(got, ref_a));
    json_decref(got);
    assert_true(cold_steps(&f, "a") == cold_before + 1);
    ma = model(&f, "a");
    assert_string_equal(state_of(ma), "ready");
    assert_true(json_integer_value(json_object_get(json_object_get(ma, "memory"), "weights_bytes")) > 0);
    json_decref(ma);

    /* Concurrent wakes of a sleeping model: each answered, one wake. */
    assert_int_equal(status_of(&f, "POST", "/admin/models/b/sleep", ADMIN_H, NULL), 202);
    assert_true(wait_state(&f, "b", "sleeping"));
    int wfd[3];
    for (int i = 0; i < 3; i++) {
        char *raw = srv_post_raw("/admin/models/b/wake", ADMIN_H, "");
        wfd[i] = srv_connect(f.port);
        assert_true(wfd[i] >= 0 && srv_send_all(wfd[i], raw, strlen(raw)));
        free(raw);
    }
    for (int i = 0; i < 3; i++) {
        size_t len;
        char *buf = srv_read_all(wfd[i], 10000, &len);
        close(wfd[i]);
        srv_resp r;
        assert_true(buf && srv_parse(buf, len, &r) > 0);
        free(buf);
        assert_int_equal(r.status, 202);
        srv_resp_free(&r);
    }
    assert_true(wait_state(&f, "b", "ready"));
    got = infer(&f, "b", 2);
    assert_true(json_equal(got, ref_b));
    json_decref(got);

    /* keep_alive_ms: c sleeps by itself once idle, and wakes for a request. */
    json_decref(infer(&f, "c", 3));
    assert_true(wait_state(&f, "c", "sleeping"));
    json_decref(infer(&f, "c", 3));

    srv_resp r;
    assert_true(srv_http_h(&f, "GET", "/metrics", USER_H, NULL, &r));
    assert_int_equal(r.status, 200);
    ma = model(&f, "a");
    json_int_t wakes = json_integer_value(json_object_get(json_object_get(ma, "lifecycle"), "wakes"));
    assert_true(wakes >= 1);
    json_decref(ma);
    char line[128];
    snprintf(line, sizeof line, "colo_model_wake_seconds_count{model=\"a\"} %lld", (long long)wakes);
    assert_non_null(strstr(r.body, line));
    assert_non_null(strstr(r.body, "colo_model_wake_seconds_count{model=\"b\"} 1"));
    assert_non_null(strstr(r.body, "colo_model_state{model=\"a\",state=\"ready\"} 1"));
    srv_resp_free(&r);
    json_decref(ref_a);
    json_decref(ref_b);
    json_decref(ref_long);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
    unsetenv("COLO_TEST_USER_KEY");
}

/* Without an admin key the routes answer only on a loopback listener. */
static void test_no_key_needs_loopback(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, "0.0.0.0:0", NULL));
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", NULL, "forbidden"), 403);
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", ADMIN_H, "forbidden"), 403);
    json_t *ma = model(&f, "a");
    assert_string_equal(state_of(ma), "ready");
    json_decref(ma);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);

    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, "127.0.0.1:0", NULL));
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", NULL, NULL), 202);
    assert_true(wait_state(&f, "a", "sleeping"));
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* DELETE /admin/models/{name} under traffic: what runs finishes (200),
 * new requests get 503 with Retry-After while it drains, then the model is
 * gone (404) and the others answer as before. */
static void test_unload_under_traffic(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    setenv("COLO_TEST_USER_KEY", "user-secret", 1);
    assert_true(start(&f, "127.0.0.1:0", "COLO_ADMIN_KEY=admin-secret"));
    json_t *ref_b = infer(&f, "b", 2), *ref_long = recv_tokens(send_infer(&f, "a", 5, 200));
    assert_int_equal(status_of(&f, "DELETE", "/admin/models/zzz", ADMIN_H, "model_not_found"), 404);
    assert_int_equal(status_of(&f, "DELETE", "/admin/models/a", USER_H, "unauthorized"), 401);
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = send_infer(&f, "a", 5, 200);
    for (int i = 0; i < 500; i++) {
        json_t *m = model(&f, "a");
        int running = (int)json_integer_value(json_object_get(m, "running"));
        json_decref(m);
        if (running > 0)
            break;
        srv_sleep_ms(2);
    }
    assert_int_equal(status_of(&f, "DELETE", "/admin/models/a", ADMIN_H, NULL), 202);
    /* while it drains: a second unload, a sleep, a wake are refused; a request gets 503 */
    bool draining = false;
    srv_resp r;
    assert_true(srv_http_h(&f, "GET", "/v1/models/a", USER_H, NULL, &r));
    if (r.status == 200) {
        json_t *j = srv_json(&r);
        draining = !strcmp(state_of(j), "draining");
        json_decref(j);
    }
    srv_resp_free(&r);
    if (draining) {
        assert_int_equal(status_of(&f, "DELETE", "/admin/models/a", ADMIN_H, "model_not_serving"), 409);
        assert_int_equal(status_of(&f, "POST", "/admin/models/a/sleep", ADMIN_H, "model_not_serving"), 409);
        assert_int_equal(status_of(&f, "POST", "/admin/models/a/wake", ADMIN_H, "model_not_serving"), 409);
        char *raw = srv_post_raw("/v1/models/a/infer", USER_H, "{\"prompt\":\"x\",\"max_tokens\":2}");
        assert_true(srv_raw(f.port, raw, strlen(raw), &r));
        free(raw);
        assert_int_equal(r.status, 503);
        char h[16];
        assert_non_null(srv_header(&r, "Retry-After", h, sizeof h));
        srv_resp_free(&r);
    } else {
        fprintf(stderr, "note: a drained before it could be probed\n");
    }
    json_t *got = infer(&f, "b", 2);
    assert_true(json_equal(got, ref_b));
    json_decref(got);
    for (int i = 0; i < 3; i++) {
        got = recv_tokens(fds[i]);
        assert_true(json_equal(got, ref_long));
        json_decref(got);
    }
    int st = 0;
    for (int i = 0; i < 500 && st != 404; i++) {
        assert_true(srv_http_h(&f, "GET", "/v1/models/a", USER_H, NULL, &r));
        st = r.status;
        srv_resp_free(&r);
        if (st != 404)
            srv_sleep_ms(10);
    }
    assert_int_equal(st, 404);
    assert_true(srv_http_h(&f, "GET", "/v1/models", USER_H, NULL, &r));
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "\"id\":\"a\""));
    assert_non_null(strstr(r.body, "\"id\":\"b\""));
    srv_resp_free(&r);
    assert_int_equal(status_of(&f, "POST", "/admin/models/a/wake", ADMIN_H, "model_not_found"), 404);
    assert_int_equal(status_of(&f, "GET", "/health/ready", NULL, NULL), 200);
    got = infer(&f, "b", 2);
    assert_true(json_equal(got, ref_b));
    json_decref(got);
    json_decref(ref_b);
    json_decref(ref_long);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
    unsetenv("COLO_TEST_USER_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sleep_wake_under_traffic),
        cmocka_unit_test(test_no_key_needs_loopback),
        cmocka_unit_test(test_unload_under_traffic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
