/* SLA deadlines end to end: the real colo-server with three synthetic
 * models under policy deadline. "strict" (on_overload: reject) has an
 * end-to-end target no step can meet: its first request is admitted (no
 * step time measured yet) and counted missed, the next is refused at once
 * with 429, Retry-After and the reason; "lenient" has the same target but
 * serves what cannot meet it (best-effort, counted missed); "easy" meets
 * its targets and counts as goodput. /metrics and /v1/models agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static const char *config =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB }\n"
    "scheduler: { policy: deadline }\n"
    "models:\n"
    "  - { name: strict, kind: llama, path: m.gguf, memory_fraction: 0.2, on_overload: reject,\n"
    "      sla: { p99_ms: 0.001 } }\n"
    "  - { name: lenient, kind: llama, path: m.gguf, memory_fraction: 0.2, sla: { p99_ms: 0.001 } }\n"
    "  - { name: easy, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: high,\n"
    "      sla: { ttft_ms: 60000, tpot_ms: 60000, p99_ms: 60000 } }\n";

static const char *body = "{\"prompt\":\"hello\",\"max_tokens\":4,\"temperature\":0}";

static int post(srv_fixture *f, const char *model, srv_resp *r)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/infer", model);
    assert_true(srv_http(f, "POST", path, body, r));
    return r->status;
}

static bool metric_has(const char *metrics, const char *line)
{
    return strstr(metrics, line) != NULL;
}

static void test_admission_and_attainment(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    if (!srv_start(&f, config)) {
        char *log = srv_log(&f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
    srv_resp r;
    /* nothing measured yet: admitted, and late */
    assert_int_equal(post(&f, "strict", &r), 200);
    srv_resp_free(&r);
    /* now its step time is known: refused at once, with the reason */
    assert_int_equal(post(&f, "strict", &r), 429);
    char ra[32];
    assert_non_null(srv_header(&r, "Retry-After", ra, sizeof ra));
    assert_true(atoi(ra) >= 1);
    json_t *j = srv_json(&r);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "slo_unattainable");
    const char *msg = json_string_value(json_object_get(err, "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "end-to-end objective"));
    json_decref(j);
    srv_resp_free(&r);
    /* on_overload: serve: served all the same, and counted missed */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(post(&f, "lenient", &r), 200);
        srv_resp_free(&r);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(post(&f, "easy", &r), 200);
        srv_resp_free(&r);
    }

    assert_true(srv_http(&f, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    assert_true(metric_has(r.body, "colo_model_slo_requests_total{model=\"strict\",slo=\"e2e\",result=\"missed\"} 2\n"));
    assert_false(metric_has(r.body, "colo_model_slo_requests_total{model=\"strict\",slo=\"e2e\",result=\"met\"}"));
    assert_true(metric_has(r.body, "colo_model_slo_requests_total{model=\"lenient\",slo=\"e2e\",result=\"missed\"} 2\n"));
    assert_true(metric_has(r.body, "colo_model_slo_requests_total{model=\"easy\",slo=\"ttft\",result=\"met\"} 3\n"));
    assert_true(metric_has(r.body, "colo_model_slo_requests_total{model=\"easy\",slo=\"tpot\",result=\"met\"} 3\n"));
    assert_true(metric_has(r.body, "colo_model_slo_requests_total{model=\"easy\",slo=\"e2e\",result=\"met\"} 3\n"));
    assert_true(metric_has(r.body, "colo_model_goodput_requests_total{model=\"easy\"} 3\n"));
    assert_false(metric_has(r.body, "colo_model_goodput_requests_total{model=\"strict\"}"));
    assert_true(metric_has(r.body, "colo_model_requests_total{model=\"strict\",status=\"429\"} 1\n"));
    srv_resp_free(&r);

    int status;
    j = srv_get_json(&f, "/v1/models/strict", &status);
    assert_int_equal(status, 200);
    json_t *slo = json_object_get(j, "slo");
    assert_non_null(slo);
    assert_string_equal(json_string_value(json_object_get(slo, "on_overload")), "reject");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(slo, "e2e"), "missed")), 2);
    assert_null(json_object_get(slo, "ttft")); /* not in its SLA */
    json_decref(j);
    j = srv_get_json(&f, "/v1/models/easy", &status);
    slo = json_object_get(j, "slo");
    assert_int_equal(json_integer_value(json_object_get(slo, "goodput_requests")), 3);
    assert_string_equal(json_string_value(json_object_get(slo, "on_overload")), "serve");
    json_decref(j);

    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_and_attainment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
