/* colo-server's drain on SIGTERM (server.drain_delay_ms), as a load
 * balancer or Kubernetes sees it: /health/ready turns 503 "draining" at
 * once while the server still accepts and answers, then it shuts down
 * gracefully and exits 0; a second SIGTERM skips the rest of the delay; a
 * bad value is a configuration error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static const char *config_fmt =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 256MiB, drain_delay_ms: %d }\n"
    "models: [ { name: a, kind: llama, path: m.gguf, memory_fraction: 0.5 } ]\n";

static void start(srv_fixture *f, int drain_delay_ms)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, config_fmt, drain_delay_ms);
    assert_true(srv_tmpdir(f));
    assert_true(srv_mkmodel(f, "m.gguf", 2, 64, 512, 256));
    if (!srv_start(f, yaml)) {
        char *log = srv_log(f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
}

/* Polls /health/ready until it answers 503; returns the error code it gave. */
static char *wait_not_ready(srv_fixture *f)
{
    uint64_t t0 = srv_now_ms();
    while (srv_now_ms() - t0 < 10000) {
        int status;
        json_t *j = srv_get_json(f, "/health/ready", &status);
        if (status == 503) {
            json_t *code = json_object_get(json_object_get(j, "error"), "code");
            char *s = strdup(json_is_string(code) ? json_string_value(code) : "");
            json_decref(j);
            return s;
        }
        json_decref(j);
        srv_sleep_ms(10);
    }
    return NULL;
}

/* Waits up to 30 s for the server to exit; its exit code, -1 otherwise. */
static int wait_exit(srv_fixture *f)
{
    int st = 0;
    uint64_t t0 = srv_now_ms();
    pid_t r;
    while ((r = waitpid(f->pid, &st, WNOHANG)) == 0 && srv_now_ms() - t0 < 30000)
        srv_sleep_ms(10);
    if (r != f->pid)
        return -1;
    f->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* During the delay: not ready, but alive, and a new request on a new
 * connection is answered in full; afterwards it exits 0 and refuses. */
static void test_drain_not_ready_still_serving(void **state)
{
    (void)state;
    srv_fixture f;
    start(&f, 5000);
    int status;
    json_t *j = srv_get_json(&f, "/health/ready", &status);
    json_decref(j);
    assert_int_equal(status, 200);

    assert_int_equal(kill(f.pid, SIGTERM), 0);
    char *code = wait_not_ready(&f);
    assert_non_null(code);
    assert_string_equal(code, "draining");
    free(code);

    j = srv_get_json(&f, "/health/live", &status);
    json_decref(j);
    assert_int_equal(status, 200);
    srv_resp r;
    assert_true(srv_http(&f, "POST", "/v1/models/a/infer", "{\"prompt\":\"still here\",\"max_tokens\":8,\"seed\":1}",
                         &r));
    assert_int_equal(r.status, 200);
    j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 8);
    json_decref(j);

    assert_int_equal(wait_exit(&f), 0);
    assert_true(srv_connect(f.port) < 0);
    char *log = srv_log(&f);
    assert_non_null(strstr(log, "draining"));
    free(log);
    srv_cleanup(&f);
}

/* A second SIGTERM ends a long delay at once. */
static void test_second_sigterm_stops(void **state)
{
    (void)state;
    srv_fixture f;
    start(&f, 600000);
    assert_int_equal(kill(f.pid, SIGTERM), 0);
    char *code = wait_not_ready(&f);
    assert_non_null(code);
    free(code);
    assert_int_equal(kill(f.pid, SIGTERM), 0);
    assert_int_equal(wait_exit(&f), 0);
    srv_cleanup(&f);
}

/* Without a delay (the default) SIGTERM stops at once, as before. */
static void test_no_delay(void **state)
{
    (void)state;
    srv_fixture f;
    start(&f, 0);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_bad_delay(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    char yaml[512];
    snprintf(yaml, sizeof yaml, config_fmt, -5);
    assert_int_equal(srv_run_to_exit(&f, yaml), 2);
    char *log = srv_log(&f);
    assert_non_null(strstr(log, "drain_delay_ms"));
    free(log);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drain_not_ready_still_serving),
        cmocka_unit_test(test_second_sigterm_stops),
        cmocka_unit_test(test_no_delay),
        cmocka_unit_test(test_bad_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
