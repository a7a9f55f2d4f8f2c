/* tests/loadtest/test_engine.c: the load generator against a stub server
 * with known injected delays and failures. Bounds are loose enough for a
 * loaded 2-core machine, tight enough to catch a units error or a wrong
 * percentile (a 10 ms service time must read 9..20 ms, not 0.01 or 10000). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "loadtest/engine.h"
#include "tests/loadtest/stub_server.h"

static uint64_t seed;

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
    lt_body_opts o = {4, cfg->sse};
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

static lt_load closed(fixture *f, unsigned concurrency)
{
    lt_load l = {.model = "m", .requests = &f->rq, .concurrency = concurrency, .seed = seed};
    return l;
}

static void run(fixture *f, const lt_load *l, const lt_run_opts *o, lt_result *r)
{
    char err[256];
    lt_result_init(r, "m", "test");
    assert_int_equal(lt_engine_run(&f->t, l, 1, o, r, err, sizeof err), LT_OK);
    lt_result_finish(r);
    printf("  ok %llu http %llu conn %llu timeout %llu io %llu  rps %.1f  p50 %.2f p90 %.2f p99 %.2f max %.2f ms"
           "  ttft p50 %.2f itl p50 %.2f\n",
           (unsigned long long)r->ok, (unsigned long long)r->http_errors, (unsigned long long)r->connect_errors,
           (unsigned long long)r->timeouts, (unsigned long long)r->io_errors, r->rps, r->lat.p50, r->lat.p90,
           r->lat.p99, r->lat.max, r->ttft.p50, r->itl.p50);
}

/* Closed loop, fixed 20 ms: p50 near 20 ms, throughput near concurrency / 20 ms. */
static void test_fixed_delay(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 20, .tokens = 5};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 4);
    lt_run_opts o = {.warmup_s = 0.2, .duration_s = 1.5, .timeout_s = 10, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    long accepted = f.s->accepted;
    assert_int_equal(accepted, 4); /* keep-alive: one connection per slot for the whole run */
    assert_true(r.ok >= 100);
    assert_int_equal(lt_result_errors(&r), 0);
    assert_true(r.lat.p50 >= 19.0 && r.lat.p50 <= 35.0);
    assert_true(r.lat.min >= 19.0);
    assert_true(r.rps >= 80.0 && r.rps <= 4 / 0.020 * 1.05); /* 200/s at most */
    assert_true(r.has_tokens);
    assert_int_equal(r.tokens, r.ok * 5);
    assert_true(r.tokens_per_s >= 5 * 80.0 && r.tokens_per_s <= 5 * 210.0);
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* 90% 10 ms, 10% 50 ms (every 10th request), chunked bodies. */
static void test_bimodal(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 10, .slow_every = 10, .slow_ms = 50, .chunked = true};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 4);
    lt_run_opts o = {.requests = 300, .timeout_s = 10, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.ok, 300);
    assert_int_equal(lt_result_errors(&r), 0);
    long accepted = f.s->accepted;
    assert_int_equal(accepted, 4); /* chunked responses keep the connection too */
    assert_true(r.lat.p50 >= 9.0 && r.lat.p50 <= 20.0);
    assert_true(r.lat.p90 >= 9.0 && r.lat.p90 <= 60.0);
    assert_true(r.lat.p99 >= 49.0 && r.lat.p99 <= 90.0);
    /* between 7 and 13% of the samples are slow */
    size_t slow = 0;
    for (size_t i = 0; i < r.latency_ms.n; i++)
        slow += r.latency_ms.v[i] >= 45.0;
    assert_true(slow >= 21 && slow <= 39);
    /* mean service 14 ms, 4 connections: at most ~286/s */
    assert_true(r.rps >= 60.0 && r.rps <= 300.0);
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* 500s and closed connections are counted apart and stay out of the latencies. */
static void test_errors_counted_apart(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 5, .error_every = 5, .close_every = 7};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 2);
    lt_run_opts o = {.requests = 200, .timeout_s = 10, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    long served = f.s->requests;
    assert_int_equal(r.ok + lt_result_errors(&r), 200);
    assert_true(r.http_errors >= 20);
    assert_int_equal(r.n_status, 1);
    assert_int_equal(r.by_status[0].status, 500);
    assert_true(r.io_errors >= 15);
    assert_int_equal(r.latency_ms.n, r.ok);
    assert_true(r.lat.min >= 4.5); /* 500s answer at once; none of them is a sample */
    assert_true(served >= 200);
    assert_true(fabs(r.error_rate - (double)lt_result_errors(&r) / 200.0) < 1e-12);
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* A request never answered becomes a timeout, not a latency; the loop goes on. */
static void test_timeouts(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 5, .hang_every = 10};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 4);
    lt_run_opts o = {.requests = 60, .timeout_s = 0.3, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.ok + lt_result_errors(&r), 60);
    assert_true(r.timeouts >= 4);
    assert_int_equal(r.timeouts + r.ok, 60);
    assert_true(r.lat.max < 300.0);
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Answers longer than warm-up + duration: nothing is recorded, and the
 * answers that ended after the window say why. */
static void test_answers_outlast_the_window(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 1200, .tokens = 5};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 3);
    lt_run_opts o = {.warmup_s = 0.1, .duration_s = 0.4, .timeout_s = 10, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.ok, 0);
    assert_int_equal(r.window_ok, 0);
    assert_int_equal(lt_result_errors(&r), 0);
    assert_int_equal(r.late_ok, 3); /* the warm-up's three, sent before the window and ended after it */
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Nothing listens: connect errors, no latencies, the run still ends. */
static void test_connect_errors(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 1};
    fixture_start(&f, &cfg);
    stub_stop(f.s); /* the port is closed now */
    f.s = NULL;
    lt_load l = closed(&f, 2);
    lt_run_opts o = {.duration_s = 0.3, .timeout_s = 1, .max_connections = 8};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.ok, 0);
    assert_true(r.connect_errors >= 2);
    assert_int_equal(r.latency_ms.n, 0);
    assert_true(isnan(r.lat.p99));
    lt_result_fini(&r);
    lt_requests_free(&f.rq);
}

/* SSE: first event after 30 ms, then 5 events 10 ms apart. */
static void test_sse_ttft(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.sse = true, .sse_first_ms = 30, .sse_gap_ms = 10, .sse_events = 6};
    fixture_start(&f, &cfg);
    lt_load l = closed(&f, 2);
    l.stream = true;
    lt_run_opts o = {.requests = 20, .timeout_s = 10, .max_connections = 8};
    lt_result r;
    run(&f, &l, &o, &r);
    assert_int_equal(r.ok, 20);
    assert_int_equal(r.ttft_ms.n, 20);
    assert_int_equal(r.itl_ms.n, 20 * 5);
    assert_true(r.ttft.p50 >= 29.0 && r.ttft.p50 <= 60.0);
    assert_true(r.itl.p50 >= 9.0 && r.itl.p50 <= 25.0);
    assert_true(r.lat.p50 >= 79.0 && r.lat.p50 <= 140.0); /* 30 + 5 * 10 + [DONE] 10 */
    assert_int_equal(r.tokens, 20 * 6);                  /* usage of the last event */
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Open loop, server slower than the rate (100 ms service, one connection,
 * 50/s): latency counts from the intended send time, so it grows with the
 * queue; a closed-loop tester would report 100 ms. */
static void test_open_loop_no_coordinated_omission(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 100};
    fixture_start(&f, &cfg);
    lt_load l = {.model = "m", .requests = &f.rq, .rate_per_s = 50, .seed = seed};
    lt_run_opts o = {.duration_s = 0.6, .timeout_s = 30, .max_connections = 1};
    lt_result r;
    run(&f, &l, &o, &r);
    /* 30 intended in 0.6 s; served one by one at 10/s, so all drain in ~3 s */
    assert_int_equal(r.ok, 30);
    assert_true(r.lat.min >= 99.0 && r.lat.min <= 200.0);
    assert_true(r.lat.max >= 2000.0); /* the last waited for the 29 before it: ~3000 - 580 ms */
    assert_true(r.lat.p50 >= 900.0);
    /* in send order (the sample order), latency grows */
    assert_true(r.client_queue_ms_sum / (double)r.ok > 700.0);
    assert_true(r.rps <= 15.0); /* completions inside the 0.6 s window */
    lt_result_fini(&r);
    fixture_stop(&f);
}

/* Open loop below capacity: about rate x duration requests, latency ~ service time. */
static void test_open_loop_poisson_rate(void **state)
{
    (void)state;
    fixture f;
    stub_cfg cfg = {.delay_ms = 5};
    fixture_start(&f, &cfg);
    lt_load l = {.model = "m", .requests = &f.rq, .rate_per_s = 200, .poisson = true, .seed = seed};
    lt_run_opts o = {.warmup_s = 0.2, .duration_s = 1.5, .timeout_s = 10, .max_connections = 64};
    lt_result r;
    run(&f, &l, &o, &r);
    /* Poisson count over 1.5 s at 200/s: mean 300, sd ~17 */
    assert_true(r.ok >= 200 && r.ok <= 400);
    assert_true(r.lat.p50 >= 4.5 && r.lat.p50 <= 30.0);
    assert_true(r.rps >= 130 && r.rps <= 270);
    lt_result_fini(&r);
    fixture_stop(&f);
}

int main(void)
{
    const char *env = getenv("COLO_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : 777;
    printf("COLO_TEST_SEED=%llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_delay),
        cmocka_unit_test(test_bimodal),
        cmocka_unit_test(test_errors_counted_apart),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_answers_outlast_the_window),
        cmocka_unit_test(test_connect_errors),
        cmocka_unit_test(test_sse_ttft),
        cmocka_unit_test(test_open_loop_no_coordinated_omission),
        cmocka_unit_test(test_open_loop_poisson_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
