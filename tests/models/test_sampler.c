/* Sampling: greedy, seeds, top-k, top-p, and the distribution it draws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models/sample/sampler.h"

static void random_logits(float *x, int n, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 8 - 4;
}

static void test_greedy_and_top_k_1(void **state)
{
    (void)state;
    float x[1000];
    random_logits(x, 1000, 1);
    int best = colo_argmax(x, 1000);
    for (int i = 0; i < 1000; i++)
        assert_true(x[i] <= x[best]);
    colo_sampler g, k1;
    colo_sampler_init(&g, 0, 1, 0, 5);
    colo_sampler_init(&k1, 1.3f, 1, 1, 5);
    for (int t = 0; t < 20; t++) {
        assert_int_equal(colo_sampler_sample(&g, x, 1000), best);
        assert_int_equal(colo_sampler_sample(&k1, x, 1000), best);
    }
    colo_sampler_free(&g);
    colo_sampler_free(&k1);
}

/* The first index of the largest (x[i] > x[best]), as the plain loop. */
static int argmax_ref(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The vectorized argmax agrees with the plain loop on ties, signed zeros,
 * infinities, negative values and NaNs anywhere; colo_all_finite sees a
 * NaN or an infinity at every position. */
static void test_argmax_matches_loop(void **state)
{
    (void)state;
    enum { N = 1037 };
    float x[N];
    unsigned seed = 7;
    for (int round = 0; round < 400; round++) {
        int n = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 8) % N;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            int kind = (int)(seed >> 24) % 16;
            float v = (float)((int)(seed >> 9) % 9 - 6); /* few values: many ties, negatives */
            x[i] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : v;
        }
        if (round % 5 == 1) /* an infinity */
            x[(seed >> 4) % (unsigned)n] = round % 2 ? INFINITY : -INFINITY;
        if (round % 7 == 2) /* a NaN somewhere, x[0] included */
            x[round % 3 == 0 ? 0 : (seed >> 5) % (unsigned)n] = round % 2 ? NAN : -NAN;
        if (round % 11 == 3) /* all negative zeros and zeros */
            for (int i = 0; i < n; i++)
                x[i] = i % 3 ? 0.0f : -0.0f;
        assert_int_equal(colo_argmax(x, n), argmax_ref(x, n));
        bool finite = true;
        for (int i = 0; i < n; i++)
            finite = finite && isfinite(x[i]);
        assert_true(colo_all_finite(x, n) == finite);
    }
    for (int i = 0; i < N; i++)
        x[i] = (float)i;
    assert_true(colo_all_finite(x, N));
    for (int at = 0; at < N; at += 97) {
        float keep = x[at];
        x[at] = at % 2 ? NAN : -INFINITY;
        assert_false(colo_all_finite(x, N));
        x[at] = keep;
    }
}

static void test_seed_reproduces(void **state)
{
    (void)state;
    float x[500];
    random_logits(x, 500, 2);
    colo_sampler a, b, c;
    colo_sampler_init(&a, 1.0f, 0.95f, 40, 1234);
    colo_sampler_init(&b, 1.0f, 0.95f, 40, 1234);
    colo_sampler_init(&c, 1.0f, 0.95f, 40, 4321);
    int same_c = 0;
    for (int t = 0; t < 200; t++) {
        int ta = colo_sampler_sample(&a, x, 500), tb = colo_sampler_sample(&b, x, 500);
        assert_int_equal(ta, tb);
        same_c += colo_sampler_sample(&c, x, 500) == ta;
    }
    assert_true(same_c < 200); /* another seed gives another sequence */
    colo_sampler_free(&a);
    colo_sampler_free(&b);
    colo_sampler_free(&c);
}

/* Draw frequencies follow softmax(x / T) within a few standard errors. */
static void test_distribution(void **state)
{
    (void)state;
    float x[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
    const float T = 0.8f;
    double p[6], z = 0;
    for (int i = 0; i < 6; i++)
        z += (p[i] = exp(x[i] / T));
    colo_sampler s;
    colo_sampler_init(&s, T, 1, 0, 99);
    int count[6] = {0};
    const int N = 50000;
    for (int t = 0; t < N; t++)
        count[colo_sampler_sample(&s, x, 6)]++;
    for (int i = 0; i < 6; i++) {
        double want = p[i] / z, got = (double)count[i] / N, se = sqrt(want * (1 - want) / N);
        if (fabs(got - want) > 5 * se + 1e-4)
            fail_msg("token %d: frequency %.4f, expected %.4f", i, got, want);
    }
    colo_sampler_free(&s);
}

/* top-k keeps only the k most likely; top-p the smallest set reaching p. */
static void test_top_k_and_top_p_cut(void **state)
{
    (void)state;
    float x[8] = {3, 2.9f, 2.8f, 0, 0, 0, 0, 0};
    colo_sampler k, pp;
    colo_sampler_init(&k, 5.0f, 1, 3, 7);
    colo_sampler_init(&pp, 1.0f, 0.5f, 0, 7);
    /* probabilities at T=1: ~0.29 0.26 0.24 then ~0.04 each: top-p 0.5 keeps 2 */
    for (int t = 0; t < 3000; t++) {
        assert_true(colo_sampler_sample(&k, x, 8) < 3);
        assert_true(colo_sampler_sample(&pp, x, 8) < 2);
    }
    colo_sampler_free(&k);
    colo_sampler_free(&pp);
}

/* Penalties and biases change the greedy choice as their definitions say. */
static void test_shape_greedy(void **state)
{
    (void)state;
    colo_sampler s;
    colo_sampler_init(&s, 0, 1, 0, 1);
    float l[5] = {1.0f, 3.0f, 2.9f, 0.5f, -1.0f};
    int32_t hist[4] = {4, 1, 1, 0}; /* prompt: 4; generated: 1, 1, 0 */
    colo_sampler_shape none = {0};
    assert_int_equal(colo_sampler_sample_shaped(&s, l, 5, &none, hist, 4, 1), 1);
    assert_false(colo_sampler_shape_active(&none));
    /* frequency 0.1 x 2 occurrences: token 1 at 2.8 < 2.9 */
    colo_sampler_shape f = {.frequency = 0.1f};
    assert_int_equal(colo_sampler_sample_shaped(&s, l, 5, &f, hist, 4, 1), 2);
    /* presence counts once: 3.0 - 0.05 > 2.9 */
    colo_sampler_shape pr = {.presence = 0.05f};
    assert_int_equal(colo_sampler_sample_shaped(&s, l, 5, &pr, hist, 4, 1), 1);
    /* the prompt's tokens are not penalized by presence: token 4 stays at -1 */
    colo_sampler_shape rep = {.repetition = 2.0f}; /* 3.0 / 2 = 1.5 < 2.9 */
    assert_int_equal(colo_sampler_sample_shaped(&s, l, 5, &rep, hist, 4, 1), 2);
    colo_sampler_bias b[2] = {{1, -100}, {3, 2.6f}}; /* 1 never; 3 at 3.1 */
    colo_sampler_shape bias = {.bias = b, .n_bias = 2};
    assert_int_equal(colo_sampler_sample_shaped(&s, l, 5, &bias, hist, 4, 1), 3);
    /* the logits given are not changed */
    assert_true(l[1] == 3.0f && l[3] == 0.5f);
    colo_sampler_free(&s);
}

/* min-p drops what is less likely than min_p x the best; a -100 bias is never drawn. */
static void test_shape_sampling(void **state)
{
    (void)state;
    colo_sampler s;
    colo_sampler_init(&s, 1.0f, 1, 0, 42);
    float l[4] = {0.0f, -0.5f, -3.0f, 1.0f};
    colo_sampler_bias never = {3, -100};
    colo_sampler_shape sh = {.min_p = 0.3f, .bias = &never, .n_bias = 1};
    int seen[4] = {0};
    for (int i = 0; i < 2000; i++) {
        int t = colo_sampler_sample_shaped(&s, l, 4, &sh, NULL, 0, 0);
        assert_true(t >= 0 && t < 4);
        seen[t]++;
    }
    /* p(2)/p(0) = e^-3 < 0.3: dropped; 3 is banned; 0 and 1 both drawn */
    assert_int_equal(seen[2], 0);
    assert_int_equal(seen[3], 0);
    assert_true(seen[0] > 0 && seen[1] > 0);
    colo_sampler_free(&s);
}

/* Log-probabilities: log-softmax of the logits; the top ones sorted, the
 * chosen one among them when it is the best. */
static void test_logprobs(void **state)
{
    (void)state;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    float lp, top[4];
    int32_t ids[4];
    colo_logprobs(l, 6, 1, 4, &lp, ids, top);
    double z = 0;
    for (int i = 0; i < 6; i++)
        z += exp(l[i]);
    assert_true(fabs(lp - (2.0 - log(z))) < 1e-5);
    assert_int_equal(ids[0], 1); /* ties: the lower id first */
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 4);
    assert_int_equal(ids[3], 0);
    double sum = 0;
    for (int k = 0; k < 4; k++) {
        assert_true(fabs(top[k] - (l[ids[k]] - log(z))) < 1e-5);
        if (k)
            assert_true(top[k] <= top[k - 1]);
        sum += exp(top[k]);
    }
    assert_true(sum <= 1.0 + 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_top_k_1),
        cmocka_unit_test(test_argmax_matches_loop),
        cmocka_unit_test(test_seed_reproduces),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_top_k_and_top_p_cut),
        cmocka_unit_test(test_shape_greedy),
        cmocka_unit_test(test_shape_sampling),
        cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
