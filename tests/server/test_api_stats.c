/* GET /v1/stats, GET /dashboard and the device metrics, end to end: the
 * real colo-server with two synthetic models; the figures must be those of
 * the requests the test sent, unknown device values absent (not zero), a
 * past point readable again by its number, and the page and the figures
 * behind the API key when one is set (the page also with a browser's Basic
 * credentials). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"
#include "server/core/server.h"

#include <math.h>
#include "tests/test_seed.h"

static const char *config =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB,\n"
    "          telemetry_interval_ms: 200 }\n"
    "scheduler: { policy: spatial }\n"
    "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: high,\n"
    "      sla: { p99_ms: 60000, ttft_ms: 60000 } }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.1, priority: low,\n"
    "      batching: { max_batch_size: 4 }, sla: { p99_ms: 0.001 } }\n";

static srv_fixture shared;

static int setup(void **state)
{
    *state = &shared;
    if (!srv_tmpdir(&shared) || !srv_mkmodel(&shared, "m.gguf", 2, 64, 512, 256) || !srv_start_logged(&shared, config))
        return -1;
    return 0;
}

static int teardown(void **state) { return srv_group_teardown(*state); }

/* histogram_quantile over one series' cumulative buckets in /metrics text,
 * as Prometheus computes it: linear within the bucket, the highest finite
 * bound past it. */
static double metrics_quantile(const char *metrics, const char *family, const char *model, double q)
{
    double le[64], cum[64];
    int n = 0;
    char key[160];
    int kl = snprintf(key, sizeof key, "%s_bucket{model=\"%s\",le=\"", family, model);
    for (const char *p = strstr(metrics, key); p && n < 64; p = strstr(p + 1, key)) {
        p += kl;
        le[n] = strncmp(p, "+Inf", 4) ? strtod(p, NULL) : INFINITY;
        cum[n++] = strtod(strchr(p, ' ') + 1, NULL);
    }
    assert_true(n >= 2);
    double rank = q * cum[n - 1];
    for (int b = 0; b < n; b++)
        if (cum[b] >= rank) {
            if (isinf(le[b]))
                return le[b - 1];
            double lo = b ? le[b - 1] : 0, below = b ? cum[b - 1] : 0;
            return lo + (le[b] - lo) * (rank - below) / (cum[b] - below);
        }
    return NAN;
}

static json_t *model_of(json_t *stats, const char *name)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(stats, "models"), i, m)
        if (!strcmp(json_string_value(json_object_get(m, "name")), name))
            return m;
    fail_msg("no model %s in /v1/stats", name);
    return NULL;
}

static double num(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "/"); k; k = strtok(NULL, "/"))
        o = json_object_get(o, k);
    if (!json_is_number(o))
        fail_msg("%s is not a number", path);
    return json_number_value(o);
}

/* The figures are the requests sent: counts exact, tokens exact, rates and
 * percentiles present and consistent, memory as /v1/models reports it. */
static void test_stats_follow_requests(void **state)
{
    srv_fixture *f = *state;
    int na = 5 + rand() % 6, nb = 2 + rand() % 4, max_tokens = 3 + rand() % 6;
    char body[128];
    snprintf(body, sizeof body, "{\"prompt\":\"count me\",\"max_tokens\":%d,\"seed\":3}", max_tokens);
    long tokens_a = 0;
    for (int i = 0; i < na + nb; i++) {
        srv_resp r;
        assert_true(srv_http(f, "POST", i < na ? "/v1/models/a/infer" : "/v1/models/b/infer", body, &r));
        assert_int_equal(r.status, 200);
        json_t *j = srv_json(&r);
        if (i < na)
            tokens_a += (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        json_decref(j);
        srv_resp_free(&r);
    }
    srv_resp r;
    assert_true(srv_http(f, "POST", "/v1/models/b/infer", "{\"prompt\":\"x\",\"max_tokens\":0}", &r)); /* a 400 */
    assert_int_equal(r.status, 400);
    srv_resp_free(&r);

    json_t *s = srv_fresh_stats(f);
    assert_string_equal(json_string_value(json_object_get(json_object_get(s, "scheduler"), "policy")), "spatial");
    assert_true(num(s, "interval_seconds") == 0.2);
    json_t *a = model_of(s, "a"), *b = model_of(s, "b");
    assert_int_equal((int)num(a, "totals/requests"), na);
    assert_int_equal((int)num(b, "totals/requests"), nb + 1);
    assert_int_equal((long)num(a, "totals/tokens"), tokens_a);
    assert_int_equal((int)num(b, "window/errors"), 1);
    assert_int_equal((int)num(a, "window/errors"), 0);
    assert_string_equal(json_string_value(json_object_get(a, "state")), "ready");
    assert_string_equal(json_string_value(json_object_get(a, "priority")), "high");
    assert_string_equal(json_string_value(json_object_get(b, "priority")), "low");
    assert_int_equal((int)num(b, "max_batch_size"), 4);
    assert_int_equal((int)num(a, "queue_depth"), 0);
    /* the window (60 s) holds every request of this test */
    assert_int_equal((int)num(a, "window/requests"), na);
    double p50 = num(a, "window/latency_p50_seconds"), p99 = num(a, "window/latency_p99_seconds");
    assert_true(p50 > 0 && p50 <= p99);
    assert_true(num(a, "window/ttft_p50_seconds") <= p99);
    assert_true(num(a, "window/batch_size_mean") >= 1);
    assert_true(num(a, "window/slo/latency_attainment_ratio") == 1.0); /* a 60 s target */
    assert_true(num(a, "window/slo/latency_target_seconds") == 60.0);
    assert_true(num(b, "window/slo/latency_attainment_ratio") == 0.0); /* a 1 us target */
    assert_null(json_object_get(json_object_get(json_object_get(b, "window"), "slo"), "ttft_attainment_ratio"));
    assert_true(num(a, "window/slo/ttft_attainment_ratio") == 1.0);
    /* the same counts in /metrics */
    srv_resp mr;
    assert_true(srv_http(f, "GET", "/metrics", NULL, &mr));
    char line[256];
    snprintf(line, sizeof line, "colo_model_slo_requests_total{model=\"a\",slo=\"e2e\",result=\"met\"} %d\n", na);
    assert_non_null(strstr(mr.body, line));
    snprintf(line, sizeof line, "colo_model_slo_requests_total{model=\"a\",slo=\"ttft\",result=\"met\"} %d\n", na);
    assert_non_null(strstr(mr.body, line));
    snprintf(line, sizeof line, "colo_model_slo_requests_total{model=\"b\",slo=\"e2e\",result=\"missed\"} %d\n", nb);
    assert_non_null(strstr(mr.body, line));
    assert_null(strstr(mr.body, "colo_model_slo_requests_total{model=\"a\",slo=\"e2e\",result=\"missed\"}"));
    /* every objective met: goodput; b met none */
    snprintf(line, sizeof line, "colo_model_goodput_requests_total{model=\"a\"} %d\n", na);
    assert_non_null(strstr(mr.body, line));
    assert_null(strstr(mr.body, "colo_model_goodput_requests_total{model=\"b\"}"));
    /* the window holds every request so far: its percentiles are those of the whole histograms */
    const char *fam[] = {"colo_model_request_duration_seconds", "colo_model_time_to_first_token_seconds"};
    const char *key[][2] = {{"window/latency_p50_seconds", "window/latency_p99_seconds"},
                            {"window/ttft_p50_seconds", "window/ttft_p99_seconds"}};
    for (int k = 0; k < 2; k++) {
        double w50 = metrics_quantile(mr.body, fam[k], "a", 0.5), w99 = metrics_quantile(mr.body, fam[k], "a", 0.99);
        assert_true(fabs(num(a, key[k][0]) - w50) <= 1e-6 * w50);
        assert_true(fabs(num(a, key[k][1]) - w99) <= 1e-6 * w99);
    }
    assert_non_null(strstr(mr.body, "colo_model_queue_capacity{model=\"b\"} 256\n"));
    srv_resp_free(&mr);
    double secs = num(a, "window/seconds");
    assert_true(fabs(num(a, "window/requests_per_second") * secs - na) < 1e-6 * na + 1e-6);
    /* history: one rate per step; over the window they add up to the requests */
    json_t *rps = json_object_get(json_object_get(a, "history"), "requests_per_second");
    json_t *times = json_object_get(json_object_get(s, "history"), "time_ms");
    assert_int_equal(json_array_size(rps), json_array_size(times));
    assert_true(json_array_size(rps) >= 2);
    /* memory as /v1/models says */
    int status;
    json_t *ma = srv_get_json(f, "/v1/models/a", &status);
    assert_int_equal(status, 200);
    assert_true(num(a, "memory/guaranteed_bytes") == num(ma, "memory/guaranteed_bytes"));
    assert_true(num(a, "memory/free_bytes") == num(ma, "memory/ceiling_bytes") - num(a, "memory/used_bytes"));
    assert_true(num(a, "memory/kv_cache_bytes") > 0);
    /* nobody borrows here (tests/server/test_serve_elastic.c borrows) */
    assert_true(num(a, "memory/borrowed_bytes") == 0 && num(a, "memory/lent_bytes") == 0);
    json_decref(ma);
    /* the device: CPU workers and memory; no power, clocks or temperature */
    json_t *d = json_object_get(s, "device");
    assert_string_equal(json_string_value(json_object_get(d, "kind")), "cpu");
    assert_int_equal(json_array_size(json_object_get(d, "workers")), 2);
    assert_true(num(d, "memory_total_bytes") > num(d, "process_memory_bytes"));
    assert_true(num(d, "process_memory_bytes") > num(a, "memory/weights_bytes"));
    assert_true(num(d, "utilization_ratio") >= 0 && num(d, "utilization_ratio") <= 1);
    assert_null(json_object_get(d, "power_watts"));
    assert_null(json_object_get(d, "temperature_celsius"));
    json_decref(s);
}

/* A past point answers again by its number, identically; unknown and bad
 * numbers are refused. */
static void test_stats_by_seq(void **state)
{
    srv_fixture *f = *state;
    srv_resp r1, r2;
    assert_true(srv_http(f, "GET", "/v1/stats", NULL, &r1));
    json_t *s = srv_json(&r1);
    char path[64];
    snprintf(path, sizeof path, "/v1/stats?seq=%lld", (long long)json_integer_value(json_object_get(s, "seq")));
    srv_sleep_ms(450); /* two more points */
    assert_true(srv_http(f, "GET", path, NULL, &r2));
    assert_int_equal(r2.status, 200);
    assert_string_equal(r1.body, r2.body);
    json_decref(s);
    srv_resp_free(&r1);
    srv_resp_free(&r2);
    int status;
    json_t *j = srv_get_json(f, "/v1/stats?seq=999999999", &status);
    assert_int_equal(status, 404);
    json_decref(j);
    j = srv_get_json(f, "/v1/stats?seq=x", &status);
    assert_int_equal(status, 400);
    json_decref(j);
}

/* Device gauges in /metrics: known values present with the device label,
 * unknown ones absent (no series at all). */
static void test_device_metrics(void **state)
{
    srv_fixture *f = *state;
    srv_resp r;
    assert_true(srv_http(f, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    const char *present[] = {"colo_device_utilization_ratio{device=\"cpu\"} ",
                             "colo_device_memory_used_bytes{device=\"cpu\"} ",
                             "colo_device_memory_total_bytes{device=\"cpu\"} ",
                             "colo_device_process_memory_bytes{device=\"cpu\"} ",
                             "colo_device_worker_utilization_ratio{device=\"cpu\",worker=\"1\"} ",
                             "colo_device_info{device=\"cpu\","};
    for (size_t i = 0; i < sizeof present / sizeof *present; i++)
        if (!strstr(r.body, present[i]))
            fail_msg("/metrics lacks %s", present[i]);
    const char *absent[] = {"colo_device_power_watts{", "colo_device_temperature_celsius{",
                            "colo_device_sm_clock_hertz{", "colo_device_memory_bandwidth_utilization_ratio{"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
        if (strstr(r.body, absent[i]))
            fail_msg("/metrics has %s on the CPU", absent[i]);
    srv_resp_free(&r);
}

/* The page: HTML, self-contained (no external script, style, font or image). */
static void test_dashboard_page(void **state)
{
    srv_fixture *f = *state;
    srv_resp r;
    assert_true(srv_http(f, "GET", "/dashboard", NULL, &r));
    assert_int_equal(r.status, 200);
    char ct[128];
    assert_non_null(srv_header(&r, "Content-Type", ct, sizeof ct));
    assert_true(!strncmp(ct, "text/html", 9));
    assert_non_null(strstr(r.body, "/v1/stats"));
    assert_null(strstr(r.body, "src=\"http"));
    assert_null(strstr(r.body, "href=\"http"));
    assert_null(strstr(r.body, "@import"));
    assert_null(strstr(r.body, "url("));
    srv_resp_free(&r);
}

/* With a key: /v1/stats and /dashboard need it; the page challenges a
 * browser for Basic credentials, whose password is the key. */
static void test_key(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    assert_true(srv_start_env(&f,
                              "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 1, cpu_memory_bytes: 256MiB,"
                              " api_key_env: STATS_KEY }\n"
                              "models:\n  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n",
                              "STATS_KEY=s3cret"));
    srv_resp r;
    char h[128];
    assert_true(srv_http(&f, "GET", "/v1/stats", NULL, &r));
    assert_int_equal(r.status, 401);
    srv_resp_free(&r);
    assert_true(srv_http(&f, "GET", "/dashboard", NULL, &r));
    assert_int_equal(r.status, 401);
    assert_non_null(srv_header(&r, "WWW-Authenticate", h, sizeof h));
    assert_true(!strncmp(h, "Basic ", 6));
    srv_resp_free(&r);
    /* "admin:s3cret" and "x:wrong" in base64 */
    assert_true(srv_http_h(&f, "GET", "/dashboard", "Authorization: Basic YWRtaW46czNjcmV0\r\n", NULL, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "GET", "/v1/stats", "Authorization: Basic YWRtaW46czNjcmV0\r\n", NULL, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "GET", "/dashboard", "Authorization: Basic eDp3cm9uZw==\r\n", NULL, &r));
    assert_int_equal(r.status, 401);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "GET", "/v1/stats", "Authorization: Bearer s3cret\r\n", NULL, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* The admin key opens the admin routes as Bearer only (docs/API.md): a
 * browser's Basic credentials carrying it are refused. */
static void test_auth_basic(void **state)
{
    (void)state;
    assert_true(colo_server_auth_ok("Bearer s3cret", "s3cret"));
    assert_true(colo_server_auth_ok("bearer  s3cret", "s3cret"));
    assert_false(colo_server_auth_ok("Basic YWRtaW46czNjcmV0", "s3cret")); /* admin:s3cret */
    assert_false(colo_server_auth_ok("basic OnMzY3JldA==", "s3cret"));     /* :s3cret */
    assert_false(colo_server_auth_ok("Basic YWRtaW46czNjcmVU", "s3cret")); /* admin:s3creT */
    assert_false(colo_server_auth_ok("Basic ", "s3cret"));
    assert_false(colo_server_auth_ok("Digest YWRtaW46czNjcmV0", "s3cret"));
}

int main(void)
{
    srand((unsigned)colo_test_seed("test_api_stats", 345));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_follow_requests),
        cmocka_unit_test(test_stats_by_seq),
        cmocka_unit_test(test_device_metrics),
        cmocka_unit_test(test_dashboard_page),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_auth_basic),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed + cmocka_run_group_tests(alone, NULL, NULL);
}
