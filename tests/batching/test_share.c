/* Device time shared among a step's requests by their tokens
 * (batching/share.c): proportions, requests ending inside a step, batches,
 * and that the shares of a step sum to the step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "batching/share.h"

#define N 6

/* Which requests have their prompt computed: the test's own table. */
static bool started_table[N];
static colo_request *reqs[N];

static bool started(void *inst, const colo_request *r)
{
    (void)inst;
    for (int i = 0; i < N; i++)
        if (reqs[i] == r)
            return started_table[i];
    return false;
}

static void make(void)
{
    for (int i = 0; i < N; i++) {
        reqs[i] = colo_request_create();
        assert_non_null(reqs[i]);
        reqs[i]->tok.n = 1 + rand() % 200;
        started_table[i] = rand() % 2;
    }
}

static void drop(void)
{
    for (int i = 0; i < N; i++)
        colo_request_free(reqs[i]);
}

static void test_step_proportional(void **state)
{
    (void)state;
    make();
    colo_step_share s;
    uint64_t t0 = 1000000000ull, dt = 1000 + (uint64_t)(rand() % 5000000);
    colo_share_step_begin(&s, reqs, N, t0, started, NULL);
    double w[N], total = 0;
    for (int i = 0; i < N; i++) {
        w[i] = started_table[i] ? 1 : reqs[i]->tok.n;
        total += w[i];
    }
    colo_share_step_end(&s, reqs, N, t0 + dt);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        double want = (double)dt / 1e9 * w[i] / total;
        assert_true(fabs(reqs[i]->out.device_s - want) <= 1e-12 + 1e-9 * want);
        sum += reqs[i]->out.device_s;
    }
    assert_true(fabs(sum - (double)dt / 1e9) <= 1e-12);
    /* a second step adds; ending a step twice charges once */
    colo_share_step_end(&s, reqs, N, t0 + 2 * dt);
    double again = 0;
    for (int i = 0; i < N; i++)
        again += reqs[i]->out.device_s;
    assert_true(fabs(again - sum) <= 1e-15);
    drop();
}

static void test_request_ending_inside_step(void **state)
{
    (void)state;
    make();
    colo_step_share s;
    uint64_t t0 = 5000, dt = 1000000;
    colo_share_step_begin(&s, reqs, N, t0, started, NULL);
    double total = s.total_w, w0 = reqs[0]->share_w;
    colo_share_close(reqs[0], t0 + dt / 2); /* ends half way: leaves the live set */
    colo_share_step_end(&s, reqs + 1, N - 1, t0 + dt);
    assert_true(fabs(reqs[0]->out.device_s - (double)dt / 2 / 1e9 * w0 / total) <= 1e-15);
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += reqs[i]->out.device_s;
    assert_true(sum < (double)dt / 1e9 && sum >= (double)dt / 1e9 * (1 - w0 / total) - 1e-15);
    colo_share_close(reqs[0], t0 + dt); /* no longer in a step: nothing more */
    assert_true(fabs(reqs[0]->out.device_s - (double)dt / 2 / 1e9 * w0 / total) <= 1e-15);
    drop();
}

static void test_batch(void **state)
{
    (void)state;
    make();
    uint64_t dt = 1 + (uint64_t)(rand() % 100000000);
    colo_share_batch(reqs, N, dt);
    double tokens = 0, sum = 0;
    for (int i = 0; i < N; i++)
        tokens += reqs[i]->tok.n;
    for (int i = 0; i < N; i++) {
        assert_true(fabs(reqs[i]->out.device_s - (double)dt / 1e9 * reqs[i]->tok.n / tokens) <= 1e-12);
        sum += reqs[i]->out.device_s;
    }
    assert_true(fabs(sum - (double)dt / 1e9) <= 1e-12);
    drop();
}

int main(void)
{
    srand((unsigned)time(NULL));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_proportional),
        cmocka_unit_test(test_request_ending_inside_step),
        cmocka_unit_test(test_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
