/* tests/loadtest/test_goodput.c: the per-request metrics (TTFT, TPOT, ITL,
 * end-to-end, token counts) against a stub server with injected first-token
 * and inter-token delays, goodput counting, the interpolated highest rate of
 * a sweep, gamma arrivals and synthetic prompt lengths.
 *
 * Timing bounds: a measured time can never be below the delay the stub
 * injects (the lower bounds catch TPOT taken as ITL, ITL counted from the
 * request start, a units error); the upper bounds leave room for a loaded
 * 2-core machine, and the definitions are checked exactly per request. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadtest/engine.h"
#include "loadtest/http_client.h"
#include "tests/loadtest/stub_server.h"

typedef struct fixture {
    stub_server *s;
    lt_target t;
    lt_requests rq;
} fixture;

static void fixture_start(fixture *f, const stub_cfg *cfg)
{
    char url[64], err[256];
    f->s = stub_start(cfg);
    assert_non_null(f->s);
    stub_url(f->s, url, sizeof url);
    assert_int_equal(lt_target_parse(url, &f->t, err, sizeof err), LT_OK);
    lt_bodies b;
    lt_body_opts o = {8, cfg->sse};
    assert_int_equal(lt_bodies_builtin(LT_KIND_GENERATIVE, &o, &b, err, sizeof err), LT_OK);
    assert_int_equal(lt_requests_build(&f->t, "POST", "/v1/models/m/infer", &b, NULL, &f->rq, err, sizeof err),
                     LT_OK);
    lt_bodies_free(&b);
}

static void fixture_stop(fixture *f)
{
    stub_stop(f->s);
    lt_requests_free(&f->rq);
}

static void run(fixture *f, const lt_load *l, const lt_run_opts *o, lt_result *r)
{
    char err[256];
    lt_result_init(r, "m", "test");
    assert_int_equal(lt_engine_run(&f->t, l, 1, o, r, err, sizeof err), LT_OK);
    lt_result_finish(r);
}

/* Streamed: first token after F ms, then E-1 more every G ms, [DONE] G ms
 * after the last. TTFT = F, ITL = G, e2e = F + E*G, TPOT = (e2e - TTFT) / (E - 1)
 * = E*G / (E-1) (vllm's definition: the tail after the last token counts). */
static void test_stream_metrics(void **state)
{
    (void)state;
    const int F = 40, G = 10, E = 6;
    fixture f;
    stub_cfg cfg = {.sse = true, .sse_first_ms = F, .sse_gap_ms = G, .sse_events = E, .prompt_tokens = 9};
    fixture_start(&f, &cfg);
    lt_load l = {.model = "m", .requests = &f.rq, .concurrency = 2, .seed = 5, .stream = true};
    lt_run_opts o = {.requests = 30, .timeout_s = 10, .max_connections = 8};
    lt_result r;
    run(&f, &l, &o, &r);
    printf("  ttft mean %.2f median %.2f std %.2f p99 %.2f | tpot mean %.2f p99 %.2f | itl median %.2f | e2e median "
           "%.2f\n", r.ttft.mean, r.ttft.p50, r.ttft.std, r.ttft.p99, r.tpot.mean, r.tpot.p99, r.itl.p50, r.lat.p50);
    assert_int_equal(r.ok, 30);
    assert_int_equal(r.n_reqs, 30);
    assert_int_equal(r.ttft.n, 30);
    assert_int_equal(r.tpot.n, 30);
    assert_int_equal(r.itl.n, 30 * (E - 1));
    assert_true(r.has_tokens && r.tokens == 30u * E);
    assert_true(r.has_prompt_tokens && r.prompt_tokens == 30u * 9);
    /* TTFT: within [F, F + 25] ms */
    assert_true(r.ttft.min >= F - 0.5 && r.ttft.p50 <= F + 40);
    assert_true(r.ttft.mean >= r.ttft.min && r.ttft.mean <= r.ttft.max);
    assert_true(r.ttft.std >= 0 && r.ttft.std <= r.ttft.max - r.ttft.min);
    /* ITL: the stub's gap, not the time from the start */
    assert_true(r.itl.p50 >= G - 0.5 && r.itl.p50 <= G + 15);
    /* e2e: first token, E gaps */
    double e2e = F + E * G;
    assert_true(r.lat.min >= e2e - 0.5 && r.lat.p50 <= e2e + 60);
    /* TPOT = E*G/(E-1) = 12 ms: not G (the tail counts), not e2e / E. A
     * first token seen late by d on a loaded machine (and the rest on
     * time) leaves d/(E-1) less per token after it. */
    double tpot = (double)E * G / (E - 1), late = r.ttft.p50 > F ? r.ttft.p50 - F : 0;
    assert_true(r.tpot.p50 >= tpot - 0.5 - late / (E - 1) && r.tpot.p50 <= tpot + 15);
    for (size_t i = 0; i < r.n_reqs; i++) {
        const lt_req_rec *q = &r.reqs[i];
        assert_int_equal(q->outcome, LT_OUT_OK);
        assert_int_equal(q->status, 200);
        assert_int_equal(q->output_tokens, E);
        assert_int_equal(q->prompt_tokens, 9);
        /* per request, the definition holds exactly */
        assert_true(fabs(q->tpot_ms - (q->e2e_ms - q->ttft_ms) / (E - 1)) < 1e-9);
        assert_true(q->done_s >= q->sent_s && q->sent_s >= q->intended_s);
        assert_true(fabs((q->done_s - q->intended_s) * 1e3 - q->e2e_ms) < 0.01);
    }
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Every 4th request's first token is slow (120 ms against 15 ms): a TTFT
 * SLO of 70 ms is met by exactly the fast ones. */
static void test_goodput_ttft(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.sse = true, .sse_first_ms = 15, .sse_gap_ms = 2, .sse_events = 3, .slow_every = 4,
                    .slow_ms = 120};
    fixture_start(&f, &cfg);
    /* one connection: the stub's request counter is the order of the requests */
    lt_load l = {.model = "m", .requests = &f.rq, .concurrency = 1, .seed = 1, .stream = true};
    lt_run_opts o = {.requests = 40, .timeout_s = 10, .max_connections = 4};
    lt_result r;
    run(&f, &l, &o, &r);
    lt_slo slo = lt_slo_none();
    char err[128];
    assert_int_equal(lt_slo_parse("ttft:70", &slo, err, sizeof err), LT_OK);
    lt_result_goodput(&r, &slo);
    printf("  good %llu of %llu, attainment %.3f, goodput %.2f/s over %.2f s\n", (unsigned long long)r.good,
           (unsigned long long)r.ok, r.attainment, r.goodput_rps, r.window_s);
    /* one connection: record i is the stub's request i + 1, and every 4th is slow */
    assert_int_equal(r.n_reqs, 40);
    uint64_t fast_good = 0, within = 0;
    for (size_t i = 0; i < r.n_reqs; i++) {
        const lt_req_rec *q = &r.reqs[i];
        bool slow = (i + 1) % 4 == 0;
        if (slow) {
            assert_true(q->ttft_ms >= 120 - 0.5); /* never faster than injected */
            assert_false(q->good);
        } else {
            fast_good += q->good;
        }
        assert_true(q->good == (q->ttft_ms <= 70));
        within += q->ttft_ms <= 70;
    }
    assert_int_equal(r.good, within);
    assert_true(r.good <= 30);
    assert_true(fast_good >= 15); /* most fast ones, even on a stalled machine */
    assert_true(fabs(r.attainment - (double)r.good / 40.0) < 1e-12);
    assert_true(fabs(r.goodput_rps - (double)r.window_good / r.window_s) < 1e-9);
    assert_int_equal(r.window_good, r.good); /* requests mode: every recorded request is in the window */
    /* an end-to-end bound on top: nothing changes at 5 s, nothing is good at 1 ms */
    uint64_t ttft_only = r.good;
    lt_slo both = slo;
    assert_int_equal(lt_slo_parse("e2e:5000", &both, err, sizeof err), LT_OK);
    lt_result_goodput(&r, &both);
    assert_int_equal(r.good, ttft_only);
    assert_int_equal(lt_slo_parse("e2e:1", &both, err, sizeof err), LT_OK);
    lt_result_goodput(&r, &both);
    assert_int_equal(r.good, 0);
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Errors are never good, and count in the attainment's denominator. */
static void test_goodput_errors(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 2, .error_every = 5, .tokens = 1};
    fixture_start(&f, &cfg);
    lt_load l = {.model = "m", .requests = &f.rq, .concurrency = 1, .seed = 1};
    lt_run_opts o = {.requests = 50, .timeout_s = 10, .max_connections = 4};
    lt_result r;
    run(&f, &l, &o, &r);
    lt_slo slo = lt_slo_none();
    slo.e2e_ms = 10000;
    lt_result_goodput(&r, &slo);
    assert_int_equal(r.ok, 40);
    assert_int_equal(r.http_errors, 10);
    assert_int_equal(r.good, 40);
    assert_true(fabs(r.attainment - 0.8) < 1e-12);
    /* a TTFT bound without streaming: nothing measured, nothing good */
    lt_slo t = lt_slo_none();
    t.ttft_ms = 10000;
    lt_result_goodput(&r, &t);
    assert_int_equal(r.good, 0);
    lt_result_fini(&r);
    fixture_stop(&f);
}

static void test_slo_rules(void **state)
{
    (void)state;
    char err[128];
    lt_slo s = lt_slo_none();
    assert_false(lt_slo_any(&s));
    assert_int_equal(lt_slo_parse("ttft:300", &s, err, sizeof err), LT_OK);
    assert_int_equal(lt_slo_parse("tpot:50", &s, err, sizeof err), LT_OK);
    assert_int_equal(lt_slo_parse("e2el:2000", &s, err, sizeof err), LT_OK);
    assert_true(s.ttft_ms == 300 && s.tpot_ms == 50 && s.e2e_ms == 2000);
    assert_int_equal(lt_slo_parse("e2e:1500", &s, err, sizeof err), LT_OK);
    assert_true(s.e2e_ms == 1500);
    assert_int_equal(lt_slo_parse("itl:5", &s, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_slo_parse("ttft", &s, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_slo_parse("ttft:-1", &s, err, sizeof err), LT_EINVAL);
    assert_int_equal(lt_slo_parse("ttft:abc", &s, err, sizeof err), LT_EINVAL);
    lt_req_rec q = {.outcome = LT_OUT_OK, .e2e_ms = 1000, .ttft_ms = 200, .tpot_ms = 40, .output_tokens = 21};
    assert_true(lt_slo_met(&s, &q));
    q.tpot_ms = 60;
    assert_false(lt_slo_met(&s, &q));
    q.tpot_ms = 40;
    q.ttft_ms = 301;
    assert_false(lt_slo_met(&s, &q));
    q.ttft_ms = 200;
    q.e2e_ms = 1600;
    assert_false(lt_slo_met(&s, &q));
    /* one output token: no TPOT, the bound holds */
    q.e2e_ms = 250;
    q.tpot_ms = NAN;
    q.output_tokens = 1;
    assert_true(lt_slo_met(&s, &q));
    /* nothing generated: its end-to-end time is its TTFT */
    q.ttft_ms = NAN;
    q.output_tokens = 0;
    assert_true(lt_slo_met(&s, &q));
    q.e2e_ms = 400;
    assert_false(lt_slo_met(&s, &q));
    q.outcome = LT_OUT_HTTP;
    q.e2e_ms = 1;
    assert_false(lt_slo_met(&s, &q));
}

static void test_max_rate_interpolated(void **state)
{
    (void)state;
    bool bounded;
    const double r1[] = {1, 2, 4}, a1[] = {1.0, 0.95, 0.70};
    /* the crossing of 0.9 between 2 (0.95) and 4 (0.70): 2 + 2 * 0.05 / 0.25 = 2.4 */
    assert_true(fabs(lt_max_rate_at(r1, a1, 3, 0.9, &bounded) - 2.4) < 1e-12);
    assert_true(bounded);
    /* every rate meets it: the highest tested, unbounded */
    const double a2[] = {1.0, 0.99, 0.95};
    assert_true(lt_max_rate_at(r1, a2, 3, 0.9, &bounded) == 4.0);
    assert_false(bounded);
    /* the lowest already misses */
    const double a3[] = {0.5, 0.4, 0.1};
    assert_true(isnan(lt_max_rate_at(r1, a3, 3, 0.9, &bounded)));
    assert_true(bounded);
    /* the first crossing counts, even if a higher rate recovers */
    const double r4[] = {1, 2, 3}, a4[] = {1.0, 0.8, 0.95};
    assert_true(fabs(lt_max_rate_at(r4, a4, 3, 0.9, &bounded) - 1.5) < 1e-12);
    /* exactly at the target meets it */
    const double a5[] = {1.0, 0.9, 0.5};
    assert_true(fabs(lt_max_rate_at(r4, a5, 3, 0.9, &bounded) - 2.0) < 1e-12);
    /* random monotone curves: the result lies between the bracketing rates
     * and the line through them hits the target there */
    uint64_t rng = 77;
    for (int trial = 0; trial < 200; trial++) {
        double rates[8], att[8], a = 1.0, r = 0;
        for (int i = 0; i < 8; i++) {
            r += 0.5 + lt_rand_unit(&rng) * 3;
            a -= lt_rand_unit(&rng) * 0.2;
            rates[i] = r;
            att[i] = a < 0 ? 0 : a;
        }
        double target = 0.3 + lt_rand_unit(&rng) * 0.65;
        double m = lt_max_rate_at(rates, att, 8, target, &bounded);
        int first_miss = -1;
        for (int i = 0; i < 8 && first_miss < 0; i++)
            if (att[i] < target)
                first_miss = i;
        if (first_miss < 0) {
            assert_true(m == rates[7] && !bounded);
        } else if (first_miss == 0) {
            assert_true(isnan(m));
        } else {
            int i = first_miss;
            assert_true(m >= rates[i - 1] - 1e-9 && m <= rates[i] + 1e-9);
            double a_at = att[i - 1] + (att[i] - att[i - 1]) * (m - rates[i - 1]) / (rates[i] - rates[i - 1]);
            assert_true(fabs(a_at - target) < 1e-9);
        }
    }
}

/* Gamma gaps: mean 1/rate and squared coefficient of variation
 * 1/burstiness, over a long seeded sequence. */
static void test_gamma_gaps(void **state)
{
    (void)state;
    const double shapes[] = {0.25, 0.5, 1.0, 2.0, 4.0};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        uint64_t rng = 1234 + k;
        const size_t n = 200000;
        const double rate = 50.0;
        double sum = 0, sq = 0;
        for (size_t i = 0; i < n; i++) {
            double g = lt_arrival_gap_s(&rng, rate, shapes[k]);
            assert_true(g >= 0);
            sum += g;
            sq += g * g;
        }
        double mean = sum / n, var = sq / n - mean * mean, cv2 = var / (mean * mean);
        printf("  burstiness %.2f: mean rate %.3f/s, cv^2 %.3f (expect %.3f)\n", shapes[k], 1.0 / mean, cv2,
               1.0 / shapes[k]);
        assert_true(fabs(1.0 / mean - rate) / rate < 0.02);
        assert_true(fabs(cv2 - 1.0 / shapes[k]) / (1.0 / shapes[k]) < 0.06);
    }
    uint64_t rng = 9;
    assert_true(lt_arrival_gap_s(&rng, 4.0, 0) == 0.25); /* constant */
}

/* The engine's open loop with gamma arrivals: the intended send times of a
 * long seeded run have the asked rate and dispersion. */
static void test_gamma_engine(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 0};
    fixture_start(&f, &cfg);
    lt_load l = {.model = "m", .requests = &f.rq, .rate_per_s = 1500, .burstiness = 0.5, .seed = 42};
    lt_run_opts o = {.requests = 3000, .timeout_s = 10, .max_connections = 256};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.n_reqs, 3000);
    double *t = malloc(r.n_reqs * sizeof *t);
    assert_non_null(t);
    for (size_t i = 0; i < r.n_reqs; i++)
        t[i] = r.reqs[i].intended_s;
    /* records are in completion order; the schedule is in intended order */
    for (size_t i = 1; i < r.n_reqs; i++)
        for (size_t j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    double sum = 0, sq = 0;
    size_t n = r.n_reqs - 1;
    for (size_t i = 0; i < n; i++) {
        double g = t[i + 1] - t[i];
        sum += g;
        sq += g * g;
    }
    double mean = sum / n, cv2 = (sq / n - mean * mean) / (mean * mean);
    printf("  engine: %zu gaps, mean rate %.1f/s, cv^2 %.3f (expect 2), ok %llu\n", n, 1.0 / mean, cv2,
           (unsigned long long)r.ok);
    assert_true(fabs(1.0 / mean - 1500) / 1500 < 0.08);
    assert_true(cv2 > 1.6 && cv2 < 2.4);
    free(t);
    lt_result_fini(&r);
    fixture_stop(&f);
}

static void test_synthetic_lengths(void **state)
{
    (void)state;
    char err[256];
    lt_synth_opts o = {.input_len = 100, .output_len = 40, .spread = 0.25, .count = 2000, .seed = 3, .stream = true};
    lt_bodies b;
    assert_int_equal(lt_bodies_synthetic(&o, &b, err, sizeof err), LT_OK);
    assert_int_equal(b.n, 2000);
    double in_sum = 0, out_sum = 0;
    int in_min = 1 << 30, in_max = 0, out_min = 1 << 30, out_max = 0;
    for (size_t i = 0; i < b.n; i++) {
        json_t *j = json_loads(b.v[i], 0, NULL);
        assert_non_null(j);
        const char *p = json_string_value(json_object_get(j, "prompt"));
        assert_non_null(p);
        int words = 1;
        for (const char *c = p; *c; c++)
            words += *c == ' ';
        int mt = (int)json_integer_value(json_object_get(j, "max_tokens"));
        assert_true(json_is_true(json_object_get(j, "stream")));
        in_sum += words;
        out_sum += mt;
        in_min = words < in_min ? words : in_min;
        in_max = words > in_max ? words : in_max;
        out_min = mt < out_min ? mt : out_min;
        out_max = mt > out_max ? mt : out_max;
        json_decref(j);
    }
    printf("  input %d..%d mean %.1f, output %d..%d mean %.1f\n", in_min, in_max, in_sum / b.n, out_min, out_max,
           out_sum / b.n);
    assert_true(in_min >= 75 && in_max <= 125 && in_min <= 78 && in_max >= 122);
    assert_true(out_min >= 30 && out_max <= 50);
    assert_true(fabs(in_sum / b.n - 100) < 2 && fabs(out_sum / b.n - 40) < 1);
    lt_bodies_free(&b);
    /* spread 0: exact lengths; bad options refused */
    o.spread = 0;
    o.count = 5;
    assert_int_equal(lt_bodies_synthetic(&o, &b, err, sizeof err), LT_OK);
    for (size_t i = 0; i < b.n; i++)
        assert_non_null(strstr(b.v[i], "\"max_tokens\":40"));
    lt_bodies_free(&b);
    o.spread = 1.0;
    assert_int_equal(lt_bodies_synthetic(&o, &b, err, sizeof err), LT_EINVAL);
}

/* OpenAI endpoints: the model named, chat as messages, usage asked for. */
static void test_openai_bodies(void **state)
{
    (void)state;
    char err[256];
    lt_bodies b;
    lt_body_opts o = {12, true};
    assert_int_equal(lt_bodies_builtin(LT_KIND_GENERATIVE, &o, &b, err, sizeof err), LT_OK);
    assert_int_equal(lt_bodies_openai(&b, "smol", true, err, sizeof err), LT_OK);
    json_t *j = json_loads(b.v[0], 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "smol");
    assert_null(json_object_get(j, "prompt"));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "messages"), 0), "role")),
                        "user");
    assert_true(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    json_decref(j);
    lt_bodies_free(&b);
}

/* Token events: role-only, usage-only and named events are not tokens. */
static void test_sse_token_events(void **state)
{
    (void)state;
    const char *resp =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n%s";
    const char *body =
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n"
        "data: {\"choices\":[{\"text\":\"!\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3}}\n\n"
        "event: done\ndata: {\"text\":\"Hello!\",\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3}}\n\n"
        "data: [DONE]\n\n";
    char buf[2048];
    snprintf(buf, sizeof buf, resp, strlen(body), body);
    lt_http_response r;
    lt_http_response_init(&r);
    lt_http_response_reset(&r, lt_now_ns());
    assert_int_equal(lt_http_response_feed(&r, buf, strlen(buf)), LT_OK);
    assert_true(r.complete);
    assert_int_equal(r.events, 3);
    assert_int_equal(r.itl_ms.n, 2);
    uint64_t tok, prompt;
    assert_true(lt_http_response_tokens(&r, &tok));
    assert_int_equal(tok, 3);
    assert_true(lt_http_response_prompt_tokens(&r, &prompt));
    assert_int_equal(prompt, 11);
    lt_http_response_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_metrics),
        cmocka_unit_test(test_goodput_ttft),
        cmocka_unit_test(test_goodput_errors),
        cmocka_unit_test(test_slo_rules),
        cmocka_unit_test(test_max_rate_interpolated),
        cmocka_unit_test(test_gamma_gaps),
        cmocka_unit_test(test_gamma_engine),
        cmocka_unit_test(test_synthetic_lengths),
        cmocka_unit_test(test_openai_bodies),
        cmocka_unit_test(test_sse_token_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
