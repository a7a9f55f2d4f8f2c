/* Fault isolation end to end: colo-server with two models (a and b, the
 * same file) and faults injected into a through COLO_FAULTS
 * (runtime/fault.h). A failed allocation, a failed launch or a math-library
 * error fails only a's request (503) while b keeps answering, and a serves
 * again afterwards; a fault that poisons the device fails every model on it
 * (not ready, 503) while the process stays up, answers health checks and
 * exits cleanly; a fault while loading stops startup naming the model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static const char *yaml =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 256MiB }\n"
    "scheduler: { policy: spatial }\n"
    "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n";

static const char *body = "{\"prompt\":\"fault line\",\"max_tokens\":6,\"seed\":21}";

static void start(srv_fixture *f, const char *faults)
{
    static char env[256];
    snprintf(env, sizeof env, "COLO_FAULTS=%s", faults);
    assert_true(srv_tmpdir(f));
    assert_true(srv_mkmodel(f, "m.gguf", 2, 64, 512, 256));
    if (!srv_start_env(f, yaml, env)) {
        char *log = srv_log(f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
}

/* POSTs body to model's infer; returns the status and, for 200, the tokens
 * (else the error code) in *out (caller decrefs / frees). */
static int infer(srv_fixture *f, const char *model, json_t **tokens, char **code)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s/infer", model);
    srv_resp r;
    assert_true(srv_http(f, "POST", path, body, &r));
    json_t *j = srv_json(&r);
    assert_non_null(j);
    if (tokens)
        *tokens = r.status == 200 ? json_incref(json_object_get(j, "tokens")) : NULL;
    if (code) {
        json_t *c = json_object_get(json_object_get(j, "error"), "code");
        *code = strdup(json_is_string(c) ? json_string_value(c) : "");
    }
    json_decref(j);
    int st = r.status;
    srv_resp_free(&r);
    return st;
}

static const char *model_state(srv_fixture *f, const char *model, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", model);
    int status;
    json_t *j = srv_get_json(f, path, &status);
    assert_int_equal(status, 200);
    snprintf(buf, cap, "%s", json_string_value(json_object_get(j, "state")));
    json_decref(j);
    return buf;
}

static int get_status(srv_fixture *f, const char *path)
{
    srv_resp r;
    assert_true(srv_http(f, "GET", path, NULL, &r));
    int st = r.status;
    srv_resp_free(&r);
    return st;
}

/* count faults on a: a's next `count` requests fail with code; b answers
 * in between; then a answers again with b's tokens (same file, same seed). */
static void contained(const char *faults, int count, const char *want_code)
{
    srv_fixture f;
    start(&f, faults);
    json_t *want;
    assert_int_equal(infer(&f, "b", &want, NULL), 200);
    for (int i = 0; i < count; i++) {
        char *code;
        assert_int_equal(infer(&f, "a", NULL, &code), 503);
        assert_string_equal(code, want_code);
        free(code);
        json_t *got;
        assert_int_equal(infer(&f, "b", &got, NULL), 200);
        assert_true(json_equal(got, want));
        json_decref(got);
        char st[32];
        assert_string_equal(model_state(&f, "a", st, sizeof st), "ready");
        assert_int_equal(get_status(&f, "/health/ready"), 200);
    }
    json_t *got;
    assert_int_equal(infer(&f, "a", &got, NULL), 200);
    assert_true(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    char *log = srv_log(&f);
    assert_non_null(strstr(log, "injected fault"));
    free(log);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_alloc_failure_contained(void **state)
{
    (void)state;
    contained("alloc@a:count=2", 2, "out_of_memory");
}

static void test_launch_failure_contained(void **state)
{
    (void)state;
    contained("launch@a:skip=10", 1, "model_failed");
}

static void test_blas_failure_contained(void **state)
{
    (void)state;
    contained("blas@a:skip=5:count=2", 2, "model_failed");
}

/* A fault in the middle of a streamed generation ends that stream with an
 * error event and [DONE]; the model serves the next request. */
static void test_fault_mid_stream(void **state)
{
    (void)state;
    srv_fixture f;
    start(&f, "launch@a:skip=300");
    srv_resp r;
    assert_true(srv_http(&f, "POST", "/v1/models/a/infer",
                         "{\"prompt\":\"long story\",\"max_tokens\":240,\"seed\":3,\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    char *names[512], *data[512];
    int n = srv_sse(r.body, names, data, 512);
    srv_resp_free(&r);
    assert_true(n >= 3);
    assert_string_equal(data[n - 1], "[DONE]");
    json_t *e = json_loads(data[n - 2], 0, NULL);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "code")), "model_failed");
    json_decref(e);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }
    assert_int_equal(infer(&f, "a", NULL, NULL), 200);
    assert_int_equal(infer(&f, "b", NULL, NULL), 200);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A poisoned device fails every model on it: both become failed and not
 * ready, requests get 503, the server still answers and exits 0. */
static void test_poison_fails_every_model(void **state)
{
    (void)state;
    srv_fixture f;
    start(&f, "poison@a");
    char *code;
    assert_int_equal(infer(&f, "a", NULL, &code), 503);
    assert_string_equal(code, "model_failed");
    free(code);
    char st[32];
    bool b_failed = false;
    for (int i = 0; i < 100 && !b_failed; i++) {
        b_failed = !strcmp(model_state(&f, "b", st, sizeof st), "failed");
        if (!b_failed)
            srv_sleep_ms(20);
    }
    assert_true(b_failed);
    assert_string_equal(model_state(&f, "a", st, sizeof st), "failed");
    assert_int_equal(infer(&f, "b", NULL, &code), 503);
    assert_string_equal(code, "model_not_ready");
    free(code);
    assert_int_equal(get_status(&f, "/health/ready"), 503);
    assert_int_equal(get_status(&f, "/health/live"), 200);
    srv_resp r;
    assert_true(srv_http(&f, "GET", "/v1/models/b", NULL, &r));
    assert_non_null(strstr(r.body, "device context was lost"));
    srv_resp_free(&r);
    assert_true(srv_http(&f, "GET", "/metrics", NULL, &r));
    assert_non_null(strstr(r.body, "colo_model_ready{model=\"a\"} 0"));
    assert_non_null(strstr(r.body, "colo_model_ready{model=\"b\"} 0"));
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A fault while loading stops startup (exit 1) naming the model; a bad
 * COLO_FAULTS is a usage error (exit 2). */
static void test_load_failure_and_bad_spec(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    static const struct {
        const char *env, *want;
        int code;
    } cases[] = {
        {"COLO_FAULTS=arena@b:skip=3", "model b", 1},
        {"COLO_FAULTS=meltdown@b", "COLO_FAULTS", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        f.exit_code = -1;
        bool started = srv_start_env(&f, yaml, cases[i].env);
        if (started)
            srv_stop(&f);
        assert_false(started);
        char *log = srv_log(&f);
        if (f.exit_code != cases[i].code || !strstr(log, cases[i].want))
            fprintf(stderr, "case %zu: exit %d, log:\n%s\n", i, f.exit_code, log);
        assert_int_equal(f.exit_code, cases[i].code);
        assert_non_null(strstr(log, cases[i].want));
        free(log);
    }
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_failure_contained),  cmocka_unit_test(test_launch_failure_contained),
        cmocka_unit_test(test_blas_failure_contained),   cmocka_unit_test(test_fault_mid_stream),
        cmocka_unit_test(test_poison_fails_every_model), cmocka_unit_test(test_load_failure_and_bad_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
