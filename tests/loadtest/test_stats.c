/* tests/loadtest/test_stats.c: percentiles, summaries, impacts, SLA parsing
 * and evaluation, prompts files, URLs: the load tester's pure functions. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadtest/engine.h"
#include "loadtest/report.h"
#include "loadtest/sla.h"
#include "loadtest/stats.h"
#include "loadtest/workload.h"

static uint64_t seed;

static void test_percentile_nearest_rank(void **state)
{
    (void)state;
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = i + 1; /* 1..100 */
    assert_true(lt_percentile(v, 100, 0.50) == 50.0);
    assert_true(lt_percentile(v, 100, 0.90) == 90.0);
    assert_true(lt_percentile(v, 100, 0.99) == 99.0);
    assert_true(lt_percentile(v, 100, 1.00) == 100.0);
    assert_true(lt_percentile(v, 100, 0.0) == 1.0);
    assert_true(lt_percentile(v, 100, 0.001) == 1.0);
    double w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_true(lt_percentile(w, 10, 0.5) == 5.0);
    assert_true(lt_percentile(w, 10, 0.51) == 6.0);
    assert_true(lt_percentile(w, 10, 0.99) == 10.0);
    double one = 7.5;
    assert_true(lt_percentile(&one, 1, 0.5) == 7.5);
    assert_true(lt_percentile(&one, 1, 0.99) == 7.5);
    assert_true(isnan(lt_percentile(NULL, 0, 0.5)));
}

/* Shuffled random samples: the summary matches a direct computation. */
static void test_summary_random(void **state)
{
    (void)state;
    uint64_t rng = seed;
    for (int round = 0; round < 20; round++) {
        size_t n = 1 + lt_rand_next(&rng) % 5000;
        lt_samples s = {0};
        double *ref = malloc(n * sizeof *ref);
        assert_non_null(ref);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            ref[i] = lt_rand_unit(&rng) * 1000.0;
            sum += ref[i];
            assert_int_equal(lt_samples_push(&s, ref[i]), LT_OK);
        }
        /* count how many are <= the reported p99: must be >= 99% and the next smaller fails */
        lt_summary sm;
        lt_summarize(&s, &sm);
        assert_int_equal(sm.n, n);
        for (size_t i = 1; i < n; i++)
            assert_true(s.v[i - 1] <= s.v[i]);
        size_t le = 0, lt = 0;
        for (size_t i = 0; i < n; i++) {
            le += ref[i] <= sm.p99;
            lt += ref[i] < sm.p99;
        }
        assert_true((double)le >= 0.99 * (double)n - 1e-9);
        assert_true((double)lt < 0.99 * (double)n);
        assert_true(fabs(sm.mean - sum / (double)n) < 1e-6);
        assert_true(sm.min <= sm.p50 && sm.p50 <= sm.p90 && sm.p90 <= sm.p95 && sm.p95 <= sm.p99 &&
                    sm.p99 <= sm.max);
        lt_samples_free(&s);
        free(ref);
    }
}

static void test_result_errors_and_rates(void **state)
{
    (void)state;
    lt_result r;
    lt_result_init(&r, "m", "single");
    for (int i = 0; i < 90; i++) {
        r.ok++;
        lt_samples_push(&r.latency_ms, 10.0);
    }
    lt_result_count_status(&r, 500);
    lt_result_count_status(&r, 500);
    lt_result_count_status(&r, 503);
    r.timeouts = 3;
    r.connect_errors = 2;
    r.io_errors = 2;
    r.window_ok = 90;
    r.window_s = 3.0;
    lt_result_finish(&r);
    assert_int_equal(r.http_errors, 3);
    assert_int_equal(r.n_status, 2);
    assert_int_equal(r.by_status[0].status, 500);
    assert_int_equal(r.by_status[0].count, 2);
    assert_int_equal(lt_result_errors(&r), 10);
    assert_true(fabs(r.error_rate - 0.1) < 1e-12);
    assert_true(fabs(r.rps - 30.0) < 1e-12);
    assert_true(r.lat.p99 == 10.0);
    lt_result_fini(&r);
}

static void test_impact(void **state)
{
    (void)state;
    assert_true(fabs(lt_impact_pct(100, 150) - 50.0) < 1e-12);
    assert_true(fabs(lt_impact_pct(20, 15) + 25.0) < 1e-12);
    assert_true(isnan(lt_impact_pct(0, 15)));
    assert_true(isnan(lt_impact_pct(NAN, 15)));
}

static void test_sla_parse(void **state)
{
    (void)state;
    char err[256];
    lt_sla_set set = {0};
    assert_int_equal(lt_sla_parse_arg("chat:p99_ms=800,ttft_ms=300,min_rps=2,max_error_rate=0.01", &set, err,
                                      sizeof err), LT_OK);
    assert_int_equal(lt_sla_parse_arg("embed:p99_ms=50", &set, err, sizeof err), LT_OK);
    assert_int_equal(lt_sla_parse_arg("chat:p99_ms=900", &set, err, sizeof err), LT_OK); /* merges */
    assert_int_equal(set.n, 2);
    const lt_sla *c = lt_sla_find(&set, "chat");
    assert_non_null(c);
    assert_true(c->p99_ms == 900 && c->ttft_ms == 300 && c->min_rps == 2 && c->max_error_rate == 0.01);
    const lt_sla *e = lt_sla_find(&set, "embed");
    assert_true(e->p99_ms == 50 && isnan(e->ttft_ms) && isnan(e->min_rps));
    assert_int_equal(lt_sla_parse_arg("chat", &set, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_sla_parse_arg("chat:p98_ms=1", &set, err, sizeof err), LT_EINVAL);
    assert_non_null(strstr(err, "p98_ms"));
    assert_int_equal(lt_sla_parse_arg("chat:p99_ms=abc", &set, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_sla_parse_arg("chat:max_error_rate=2", &set, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_sla_parse_arg(":p99_ms=1", &set, err, sizeof err), LT_EINVAL);
    lt_sla_set_free(&set);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_sla_yaml(void **state)
{
    (void)state;
    char path[] = "/tmp/colo-lt-slaXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    lt_sla_set set = {0};
    write_file(path, "server: { listen: \"127.0.0.1:8080\" }\n"
                     "models:\n"
                     "  - name: chat\n"
                     "    kind: llama\n"
                     "    sla: { p99_ms: 800, ttft_ms: 300, min_rps: 2, max_error_rate: 0.01 }\n"
                     "  - name: embed\n"
                     "    kind: bert\n");
    assert_int_equal(lt_sla_load_file(path, &set, err, sizeof err), LT_OK);
    assert_int_equal(set.n, 1);
    assert_true(lt_sla_find(&set, "chat")->ttft_ms == 300);
    lt_sla_set_free(&set);

    write_file(path, "chat: { p99_ms: 100 }\nembed:\n  min_rps: 5\n");
    assert_int_equal(lt_sla_load_file(path, &set, err, sizeof err), LT_OK);
    assert_int_equal(set.n, 2);
    assert_true(lt_sla_find(&set, "embed")->min_rps == 5);
    lt_sla_set_free(&set);

    write_file(path, "chat:\n  p99_ms: 100\n  p42: 3\n");
    assert_int_equal(lt_sla_load_file(path, &set, err, sizeof err), LT_EFORMAT);
    assert_non_null(strstr(err, ":3:")); /* names the line */
    lt_sla_set_free(&set);

    write_file(path, "chat: [1, 2\n");
    assert_int_equal(lt_sla_load_file(path, &set, err, sizeof err), LT_EFORMAT);
    lt_sla_set_free(&set);
    unlink(path);
    assert_int_equal(lt_sla_load_file(path, &set, err, sizeof err), LT_EIO);
}

static void test_sla_evaluate(void **state)
{
    (void)state;
    char err[256];
    lt_sla_set set = {0};
    assert_int_equal(lt_sla_parse_arg("a:p99_ms=20,min_rps=5,max_error_rate=0.05,ttft_ms=1", &set, err, sizeof err),
                     LT_OK);
    lt_result r[2];
    lt_result_init(&r[0], "a", "concurrent");
    lt_result_init(&r[1], "b", "concurrent");
    for (int i = 0; i < 100; i++)
        lt_samples_push(&r[0].latency_ms, i < 98 ? 10.0 : 30.0); /* p99 = 30 */
    r[0].ok = 100;
    r[0].window_ok = 100;
    r[0].window_s = 10; /* 10 rps */
    lt_result_finish(&r[0]);
    lt_result_finish(&r[1]);
    lt_sla_check *checks;
    size_t n;
    assert_int_equal(lt_sla_evaluate(&set, r, 2, false, &checks, &n), LT_OK);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(checks[i].constraint, "p99_ms") == 0) {
            assert_false(checks[i].pass);
            assert_true(checks[i].measured == 30.0 && checks[i].bound == 20.0);
        } else if (strcmp(checks[i].constraint, "ttft_ms") == 0) {
            assert_true(checks[i].skipped && checks[i].pass);
        } else {
            assert_true(checks[i].pass);
        }
    }
    free(checks);
    /* streamed but no TTFT measured: fails */
    assert_int_equal(lt_sla_evaluate(&set, r, 2, true, &checks, &n), LT_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(checks[i].constraint, "ttft_ms") == 0)
            assert_false(checks[i].pass);
    free(checks);
    lt_result_fini(&r[0]);
    lt_result_fini(&r[1]);
    lt_sla_set_free(&set);
}

/* STP sums each model's throughput together over alone; a model that
 * completed nothing alone makes it unknown (NAN, null in JSON), not the
 * other models' sum. */
static void test_stp_unknown_without_a_model(void **state)
{
    (void)state;
    lt_result ind[2], conc[2];
    const char *names[2] = {"hi", "be"};
    for (int k = 0; k < 2; k++) {
        lt_result_init(&ind[k], names[k], "individual");
        lt_result_init(&conc[k], names[k], "concurrent");
        ind[k].window_s = conc[k].window_s = 10;
        ind[k].window_ok = k == 0 ? 20 : 10;
        conc[k].window_ok = k == 0 ? 15 : 5;
        lt_result_finish(&ind[k]);
        lt_result_finish(&conc[k]);
    }
    lt_phase phases[3] = {{"individual", &ind[0], 1}, {"individual", &ind[1], 1}, {"concurrent", conc, 2}};
    lt_report rep = {.phases = phases, .n_phases = 3};
    assert_int_equal(lt_report_compare(&rep), LT_OK);
    assert_int_equal(rep.n_cmp, 2);
    assert_true(fabs(rep.stp - (0.75 + 0.5)) < 1e-12);
    lt_report_fini(&rep);
    /* be completed nothing alone (its answers outlasted the phase) */
    ind[1].window_ok = 0;
    lt_result_finish(&ind[1]);
    lt_report rep2 = {.phases = phases, .n_phases = 3};
    assert_int_equal(lt_report_compare(&rep2), LT_OK);
    assert_true(isnan(rep2.stp));
    lt_report_fini(&rep2);
    for (int k = 0; k < 2; k++) {
        lt_result_fini(&ind[k]);
        lt_result_fini(&conc[k]);
    }
}

static void test_prompts_file(void **state)
{
    (void)state;
    char path[] = "/tmp/colo-lt-promptsXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "{\"prompt\": \"hello\"}\n"
                     "\n"
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"model\": \"chat\"}\n"
                     "{\"inputs\": [\"a\", \"b\"], \"model\": \"embed\"}\n"
                     "{\"body\": {\"prompt\": \"raw\", \"max_tokens\": 3, \"temperature\": 0}}\n");
    char err[256];
    lt_bodies b;
    lt_body_opts o = {8, true};
    assert_int_equal(lt_bodies_from_file(path, "chat", &o, &b, err, sizeof err), LT_OK);
    assert_int_equal(b.n, 3);
    json_t *j = json_loads(b.v[1], 0, NULL);
    assert_non_null(j);
    assert_null(json_object_get(j, "model"));
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 8);
    assert_true(json_is_true(json_object_get(j, "stream")));
    json_decref(j);
    j = json_loads(b.v[2], 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 8); /* --max-tokens overrides */
    json_decref(j);
    lt_bodies_free(&b);
    assert_int_equal(lt_bodies_from_file(path, "embed", &o, &b, err, sizeof err), LT_OK);
    assert_int_equal(b.n, 3);
    j = json_loads(b.v[1], 0, NULL);
    assert_null(json_object_get(j, "stream")); /* encoders do not stream */
    assert_null(json_object_get(j, "max_tokens"));
    json_decref(j);
    lt_bodies_free(&b);
    write_file(path, "{\"prompt\": \"x\"}\n{\"nothing\": 1}\n");
    assert_int_equal(lt_bodies_from_file(path, "chat", &o, &b, err, sizeof err), LT_EFORMAT);
    assert_non_null(strstr(err, ":2:"));
    write_file(path, "{\"prompt\": \"x\", \"model\": \"other\"}\n");
    assert_int_equal(lt_bodies_from_file(path, "chat", &o, &b, err, sizeof err), LT_EFORMAT);
    write_file(path, "not json\n");
    assert_int_equal(lt_bodies_from_file(path, "chat", &o, &b, err, sizeof err), LT_EFORMAT);
    unlink(path);
    assert_int_equal(lt_bodies_from_file(path, "chat", &o, &b, err, sizeof err), LT_EIO);
}

static void test_builtin_bodies_and_requests(void **state)
{
    (void)state;
    char err[256];
    lt_target t;
    assert_int_equal(lt_target_parse("http://127.0.0.1:8080/api/", &t, err, sizeof err), LT_OK);
    assert_string_equal(t.host, "127.0.0.1");
    assert_string_equal(t.port, "8080");
    assert_string_equal(t.base_path, "/api");
    lt_bodies b;
    lt_body_opts o = {-1, false};
    assert_int_equal(lt_bodies_builtin(LT_KIND_GENERATIVE, &o, &b, err, sizeof err), LT_OK);
    assert_true(b.n > 1);
    json_t *j = json_loads(b.v[0], 0, NULL);
    assert_true(json_is_string(json_object_get(j, "prompt")));
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 16);
    json_decref(j);
    lt_requests rq;
    assert_int_equal(lt_requests_build(&t, "POST", "/v1/models/chat/infer", &b, "k3y", &rq, err, sizeof err),
                     LT_OK);
    assert_int_equal(rq.n, b.n);
    assert_true(strncmp(rq.v[0], "POST /api/v1/models/chat/infer HTTP/1.1\r\n", 41) == 0);
    assert_non_null(strstr(rq.v[0], "Host: 127.0.0.1:8080\r\n"));
    assert_non_null(strstr(rq.v[0], "Authorization: Bearer k3y\r\n"));
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n\r\n", strlen(b.v[0]));
    assert_non_null(strstr(rq.v[0], cl));
    assert_int_equal(rq.len[0], strlen(rq.v[0]));
    lt_requests_free(&rq);
    lt_bodies_free(&b);
    assert_int_equal(lt_bodies_builtin(LT_KIND_ENCODER, &o, &b, err, sizeof err), LT_OK);
    j = json_loads(b.v[0], 0, NULL);
    assert_true(json_array_size(json_object_get(j, "inputs")) >= 2);
    json_decref(j);
    lt_bodies_free(&b);

    assert_int_equal(lt_target_parse("http://[::1]:9/", &t, err, sizeof err), LT_OK);
    assert_string_equal(t.host, "::1");
    assert_int_equal(lt_target_parse("https://x", &t, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_target_parse("http://", &t, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_target_parse("http://h:99999", &t, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_target_parse("http://h:80x", &t, err, sizeof err), LT_EINVAL);
}

static void test_rand_seeded(void **state)
{
    (void)state;
    uint64_t a = seed, b = seed;
    for (int i = 0; i < 100; i++)
        assert_true(lt_rand_next(&a) == lt_rand_next(&b));
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = lt_rand_unit(&a);
        assert_true(u > 0 && u < 1);
        sum += -log(u);
    }
    assert_true(fabs(sum / 100000 - 1.0) < 0.02); /* exponential mean 1 */
}

int main(void)
{
    const char *env = getenv("COLO_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : 12345;
    printf("COLO_TEST_SEED=%llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_nearest_rank),
        cmocka_unit_test(test_summary_random),
        cmocka_unit_test(test_result_errors_and_rates),
        cmocka_unit_test(test_impact),
        cmocka_unit_test(test_sla_parse),
        cmocka_unit_test(test_sla_yaml),
        cmocka_unit_test(test_sla_evaluate),
        cmocka_unit_test(test_stp_unknown_without_a_model),
        cmocka_unit_test(test_prompts_file),
        cmocka_unit_test(test_builtin_bodies_and_requests),
        cmocka_unit_test(test_rand_seeded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
