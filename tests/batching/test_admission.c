/* Deadlines from a model's SLA: the step-time table, admission's estimate
 * (step times chosen so that every sum is exact), refusal against serving
 * best-effort, the earliest deadline of a batch, and SLO attainment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "batching/admission.h"

static colo_model_cfg model(double ttft_ms, double tpot_ms, double p99_ms, bool reject)
{
    colo_model_cfg mc;
    memset(&mc, 0, sizeof mc);
    snprintf(mc.name, sizeof mc.name, "m");
    mc.batching.max_batch_size = 4;
    mc.batching.max_batch_prefill_tokens = 64;
    mc.sla.ttft_ms = ttft_ms;
    mc.sla.tpot_ms = tpot_ms;
    mc.sla.p99_ms = p99_ms;
    mc.sla.reject_late = reject;
    return mc;
}

static void test_step_table(void **state)
{
    (void)state;
    colo_model_cfg mc = model(0, 0, 0, false);
    colo_admission *a = colo_admission_create(&mc);
    assert_non_null(a);
    assert_true(colo_admission_step_ms(a, 1) < 0); /* nothing measured */
    colo_admission_record_step(a, 1, 10);
    colo_admission_record_step(a, 3, 20); /* bucket 3-4 */
    assert_true(colo_admission_step_ms(a, 1) == 10);
    assert_true(colo_admission_step_ms(a, 4) == 20);
    assert_true(colo_admission_step_ms(a, 2) == 20);  /* nearest bucket, the longer on a tie */
    assert_true(colo_admission_step_ms(a, 32) == 20); /* nearest measured below */
    colo_admission_record_step(a, 4, 30);             /* an exponential average of 0.2 */
    assert_true(colo_admission_step_ms(a, 4) == 22);
    colo_admission_record_step(a, 0, 1e9); /* ignored */
    colo_admission_record_step(a, 2, -1);
    assert_true(colo_admission_step_ms(a, 2) == 22);
    colo_admission_free(a);
    colo_admission_free(NULL);
}

/* max_batch_size 4, 64 prefill tokens per step; a step of 1 takes 10 ms, of
 * 3-4 takes 20 ms. */
static void test_estimate_is_exact(void **state)
{
    (void)state;
    colo_model_cfg mc = model(220, 20, 200, true);
    colo_admission *a = colo_admission_create(&mc);
    colo_admission_verdict v;
    colo_admission_check(a, 5, 10, 10, &v);
    assert_true(v.fits && !v.measured); /* nothing measured: admitted */
    colo_admission_record_step(a, 1, 10);
    colo_admission_record_step(a, 4, 20);

    colo_admission_check(a, 0, 64, 10, &v); /* alone: 1 prefill step, 9 more */
    assert_true(v.fits && v.measured);
    assert_true(v.ttft_ms == 10 && v.tpot_ms == 10 && v.e2e_ms == 100);
    colo_admission_check(a, 3, 64, 10, &v); /* in a batch of 4 */
    assert_true(v.ttft_ms == 20 && v.tpot_ms == 20 && v.e2e_ms == 200);
    assert_true(v.fits); /* e2e exactly 200 */
    colo_admission_check(a, 3, 64, 11, &v); /* one token more: 220 */
    assert_false(v.fits);
    assert_non_null(strstr(v.reason, "end-to-end objective: estimated 220 ms against 200 ms"));
    assert_int_equal(v.retry_after_s, 1);
    colo_admission_check(a, 3, 65, 10, &v); /* two prefill steps: ttft 40, e2e 220 */
    assert_true(v.ttft_ms == 40 && v.e2e_ms == 220);
    assert_false(v.fits);
    colo_admission_free(a);

    /* time to first token behind a full batch: waves of max_tokens steps */
    mc = model(220, 0, 0, true);
    a = colo_admission_create(&mc);
    colo_admission_record_step(a, 1, 10);
    colo_admission_record_step(a, 4, 20);
    colo_admission_check(a, 4, 64, 10, &v); /* one wave: 10 x 20 + 20 */
    assert_true(v.ttft_ms == 220 && v.fits);
    colo_admission_check(a, 7, 64, 10, &v); /* still one wave */
    assert_true(v.ttft_ms == 220 && v.fits);
    colo_admission_check(a, 8, 64, 10, &v); /* two waves: 420 */
    assert_true(v.ttft_ms == 420);
    assert_false(v.fits);
    assert_non_null(strstr(v.reason, "time-to-first-token"));
    colo_admission_check(a, 4, 64, 11, &v); /* 11 x 20 + 20 = 240 */
    assert_false(v.fits);
    colo_admission_free(a);

    /* time per output token */
    mc = model(0, 15, 0, true);
    a = colo_admission_create(&mc);
    colo_admission_record_step(a, 1, 10);
    colo_admission_record_step(a, 4, 20);
    colo_admission_check(a, 0, 8, 100, &v);
    assert_true(v.fits);
    colo_admission_check(a, 2, 8, 100, &v);
    assert_false(v.fits);
    assert_non_null(strstr(v.reason, "time-per-output-token objective: estimated 20 ms against 15 ms"));
    colo_admission_free(a);
}

static colo_request *gen_request(int prompt, int max_tokens)
{
    colo_request *r = colo_request_create();
    assert_non_null(r);
    r->task = COLO_TASK_GENERATE;
    r->tok.n = prompt;
    r->params.max_tokens = max_tokens;
    return r;
}

/* on_overload: reject refuses what cannot fit, with the reason and a
 * Retry-After; serve admits it best-effort. */
static void test_reject_or_serve(void **state)
{
    (void)state;
    for (int reject = 1; reject >= 0; reject--) {
        colo_model_cfg mc = model(0, 0, 200, reject);
        colo_admission *a = colo_admission_create(&mc);
        colo_admission_record_step(a, 4, 20);
        colo_request *ok = gen_request(10, 10), *late = gen_request(10, 2000);
        assert_true(colo_admission_admit(a, ok, 3));
        assert_false(ok->slo.refused || ok->slo.best_effort);
        assert_int_equal(colo_admission_admit(a, late, 3), !reject);
        assert_int_equal(late->slo.refused, reject);
        assert_int_equal(late->slo.best_effort, !reject);
        assert_non_null(late->slo.reason);
        /* 2000 tokens of 20 ms: 40,000 ms against 200 */
        assert_int_equal(late->slo.retry_after_s, 40);
        colo_request_free(ok);
        colo_request_free(late);
        colo_admission_free(a);
    }
    /* no SLA, or an encoder: always admitted */
    colo_model_cfg mc = model(0, 0, 0, true);
    colo_admission *a = colo_admission_create(&mc);
    colo_admission_record_step(a, 1, 1000);
    colo_request *r = gen_request(10, 100);
    assert_true(colo_admission_admit(a, r, 100));
    colo_request_free(r);
    colo_admission_free(a);
}

/* Nothing measured: the batch's earliest deadline: first token by arrival
 * + ttft, next by the last + tpot, never past arrival + p99; best-effort
 * requests give none. */
static void test_next_deadline(void **state)
{
    (void)state;
    colo_sla_cfg sla = {.ttft_ms = 100, .tpot_ms = 10, .p99_ms = 1000};
    colo_request *r[3] = {gen_request(1, 1), gen_request(1, 1), gen_request(1, 1)};
    const uint64_t ms = 1000000;
    r[0]->submit_ns = 1000 * ms; /* no token yet: 1100 */
    r[1]->submit_ns = 500 * ms;  /* last token at 1085: 1095 */
    r[1]->slo.last_token_ns = 1085 * ms;
    r[2]->submit_ns = 0; /* next token by 1005, end by 1000: 1000, but best-effort */
    r[2]->slo.last_token_ns = 995 * ms;
    r[2]->slo.best_effort = true;
    assert_true(colo_admission_latest_start(NULL, &sla, r, 3) == 1095 * ms);
    assert_true(colo_admission_latest_start(NULL, &sla, r, 1) == 1100 * ms);
    r[2]->slo.best_effort = false; /* its end comes first */
    assert_true(colo_admission_latest_start(NULL, &sla, r, 3) == 1000 * ms);
    colo_sla_cfg none = {0};
    assert_true(colo_admission_latest_start(NULL, &none, r, 3) == 0);
    for (int i = 0; i < 3; i++)
        colo_request_free(r[i]);
}

/* A model woken for queued requests works to the earliest deadline among
 * them: lines of batches and best-effort requests give none, and an empty
 * queue none at all. */
static void test_queued_deadline(void **state)
{
    (void)state;
    colo_sla_cfg sla = {.ttft_ms = 100, .p99_ms = 1000};
    colo_queue *q = colo_queue_create(8);
    assert_non_null(q);
    assert_true(colo_admission_queued_start(NULL, &sla, q, 0) == 0);
    const uint64_t ms = 1000000;
    colo_request *r[4];
    const uint64_t submit_ms[4] = {10, 20, 30, 40};
    for (int i = 0; i < 4; i++) {
        r[i] = gen_request(1, 1);
        r[i]->submit_ns = submit_ms[i] * ms;
        r[i]->qi.owner = r[i];
        r[i]->qi.priority = i == 3 ? COLO_PRIO_HIGH : COLO_PRIO_NORMAL;
    }
    r[0]->qi.batch = true;          /* a line: 110 ms, but below the SLA */
    r[1]->slo.best_effort = true;   /* 120 ms, infeasible: no urgency */
    for (int i = 0; i < 4; i++)
        assert_int_equal(colo_queue_push(q, &r[i]->qi), COLO_OK);
    assert_true(colo_admission_queued_start(NULL, &sla, q, 0) == 130 * ms); /* the oldest that counts, whatever its level */
    colo_sla_cfg none = {0};
    assert_true(colo_admission_queued_start(NULL, &none, q, 0) == 0);
    const int taken[3] = {3, 1, 2}; /* high first, then normal in order, the line last */
    const uint64_t left_ms[3] = {130, 130, 0};
    for (int i = 0; i < 3; i++) {
        colo_queue_item *it = colo_queue_pop(q);
        assert_non_null(it);
        assert_ptr_equal(it->owner, r[taken[i]]);
        assert_true(colo_admission_queued_start(NULL, &sla, q, 0) == left_ms[i] * ms);
    }
    assert_non_null(colo_queue_pop(q));
    colo_queue_destroy(q);
    for (int i = 0; i < 4; i++)
        colo_request_free(r[i]);
}

/* Measured, the work before each deadline comes off it: a prompt's
 * prefill (tokens times the time of one) before the first token, a step
 * of the batch before the next, and a wake to come before a queued
 * request's; a start already past is 1. */
static void test_latest_start(void **state)
{
    (void)state;
    colo_model_cfg mc = model(1000, 100, 0, false);
    colo_admission *a = colo_admission_create(&mc);
    assert_non_null(a);
    const uint64_t ms = 1000000;
    colo_request *cold = gen_request(200, 8), *warm = gen_request(10, 8);
    cold->submit_ns = 1000 * ms; /* first token by 2000 */
    warm->submit_ns = 0;
    warm->slo.last_token_ns = 1850 * ms; /* next by 1950 */
    colo_request *both[2] = {cold, warm};
    assert_true(colo_admission_latest_start(a, &mc.sla, both, 2) == 1950 * ms); /* nothing measured */
    colo_admission_record_step(a, 2, 30);
    colo_admission_set_prefill(a, 2 * ms); /* 200 tokens: 400 ms */
    assert_true(colo_admission_latest_start(a, &mc.sla, both, 2) == 1600 * ms);
    assert_true(colo_admission_latest_start(a, &mc.sla, &warm, 1) == 1920 * ms);
    colo_admission_set_prefill(a, -1); /* ignored */
    assert_true(colo_admission_latest_start(a, &mc.sla, &cold, 1) == 1600 * ms);

    colo_queue *q = colo_queue_create(4);
    assert_non_null(q);
    cold->qi.owner = cold;
    assert_int_equal(colo_queue_push(q, &cold->qi), COLO_OK);
    assert_true(colo_admission_queued_start(a, &mc.sla, q, 0) == 1600 * ms);
    assert_true(colo_admission_queued_start(a, &mc.sla, q, 250 * ms) == 1350 * ms); /* the wake too */
    assert_true(colo_admission_queued_start(a, &mc.sla, q, 5000 * ms) == 1);           /* late already */
    assert_non_null(colo_queue_pop(q));
    colo_queue_destroy(q);
    colo_request_free(cold);
    colo_request_free(warm);
    colo_admission_free(a);
}

/* Attainment per objective; the longest gap decides tpot; a refused or
 * failed request meets nothing. */
static void test_slo_met(void **state)
{
    (void)state;
    colo_sla_cfg sla = {.ttft_ms = 100, .tpot_ms = 10, .p99_ms = 300};
    colo_request *r = gen_request(4, 8);
    const uint64_t ms = 1000000;
    uint64_t t[4] = {50 * ms, 58 * ms, 66 * ms, 77 * ms}; /* gaps 8, 8, 11 */
    for (int i = 0; i < 4; i++)
        colo_admission_on_token(r, t[i]);
    assert_true(r->slo.max_gap_ms > 10.99 && r->slo.max_gap_ms < 11.01);
    r->out.status = COLO_OK;
    r->out.n_tokens = 4;
    r->out.ttft_ms = 50;
    r->out.total_ms = 77;
    unsigned set, met = colo_admission_slo_met(&sla, r, &set);
    assert_int_equal(set, 7);
    assert_int_equal(met, 1 | 4); /* tpot missed by the 11 ms gap */
    r->out.total_ms = 301;
    assert_int_equal(colo_admission_slo_met(&sla, r, &set), 1);
    r->out.status = COLO_ETIMEDOUT;
    assert_int_equal(colo_admission_slo_met(&sla, r, &set), 0);
    r->out.status = COLO_OK;
    r->slo.refused = true;
    assert_int_equal(colo_admission_slo_met(&sla, r, &set), 0);
    colo_sla_cfg e2e_only = {.p99_ms = 300};
    r->task = COLO_TASK_EMBED;
    r->slo.refused = false;
    r->out.total_ms = 20;
    assert_int_equal(colo_admission_slo_met(&e2e_only, r, &set), 4);
    assert_int_equal(set, 4);
    colo_request_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_table),
        cmocka_unit_test(test_estimate_is_exact),
        cmocka_unit_test(test_reject_or_serve),
        cmocka_unit_test(test_next_deadline),
        cmocka_unit_test(test_queued_deadline),
        cmocka_unit_test(test_latest_start),
        cmocka_unit_test(test_slo_met),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
