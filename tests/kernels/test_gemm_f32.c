/* The row-invariant F32 gemm of linear's tile path (kernels/cpu/gemm_f32.c):
 * within float bounds of a float64 reference, the same bits as its scalar
 * fallback, and one row's output the same bits whatever rows come with it
 * and however many (1..70 rows, the row at different positions); and the
 * unpacked chains of decode (colo_cpu_gemv_chain) the same bits as the
 * gemm, for F32 weights and for F16 ones widened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant.h"
#include "tests/test_seed.h"

static uint64_t rng_state;

static void seed_from_env(void)
{
    uint64_t seed = colo_test_seed("test_gemm_f32", 25);
    rng_state = seed * 2654435761u + 1;
}

static float rng_normal(void)
{
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        s += (rng_state >> 11) * (1.0 / 9007199254740992.0) - 0.5;
    }
    return (float)(s * 1.7320508);
}

static void fill(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = rng_normal();
}

/* 32-byte aligned packed weights of w (n, k). */
static float *pack(const float *w, int n, int k)
{
    float *p = aligned_alloc(64, (colo_cpu_gemm_packed_floats(n, k) * sizeof(float) + 63) & ~(size_t)63);
    assert_non_null(p);
    colo_cpu_gemm_pack(w, k, n, k, p);
    return p;
}

static void test_against_float64_and_scalar(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {7, 16, 33}, {13, 45, 256}, {6, 17, 576}, {70, 64, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *x = malloc((size_t)m * k * 4), *w = malloc((size_t)n * k * 4);
        float *y = malloc((size_t)m * n * 4), *ys = malloc((size_t)m * n * 4);
        assert_true(x && w && y && ys);
        fill(x, (size_t)m * k), fill(w, (size_t)n * k);
        float *p = pack(w, n, k);
        colo_cpu_gemm_f32(m, n, k, x, k, p, y, n);
        colo_cpu_gemm_f32_scalar(m, n, k, x, k, p, ys, n);
        assert_memory_equal(y, ys, (size_t)m * n * 4);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int kk = 0; kk < k; kk++) {
                    ref += (double)x[(size_t)i * k + kk] * w[(size_t)j * k + kk];
                    mag += fabs((double)x[(size_t)i * k + kk] * w[(size_t)j * k + kk]);
                }
                double got = y[(size_t)i * n + j];
                /* A chain of k roundings: at most k u sum|x w| (u = 2^-24), doubled. */
                if (fabs(got - ref) > 1.2e-7 * k * mag)
                    fail_msg("m=%d n=%d k=%d y[%d][%d] = %.9g, float64 %.9g", m, n, k, i, j, got, ref);
            }
        free(p), free(x), free(w), free(y), free(ys);
    }
}

/* Row r of x alone, then the same row among m - 1 random others at position
 * pos, for every m in 1..70 and several positions: the same bits, with and
 * without a stride larger than k. */
static void test_row_invariance(void **state)
{
    (void)state;
    const int n = 45, k = 300, max_m = 70, x_stride = k + 5, y_stride = n + 3;
    float *w = malloc((size_t)n * k * 4), *row = malloc((size_t)k * 4), *alone = malloc((size_t)n * 4);
    float *x = malloc((size_t)max_m * x_stride * 4), *y = malloc((size_t)max_m * y_stride * 4);
    assert_true(w && row && alone && x && y);
    fill(w, (size_t)n * k), fill(row, (size_t)k);
    float *p = pack(w, n, k);
    colo_cpu_gemm_f32(1, n, k, row, k, p, alone, n);
    for (int m = 1; m <= max_m; m++) {
        int positions[] = {0, m - 1, m / 2, (m * 7 + 3) % m};
        for (int pi = 0; pi < 4; pi++) {
            int pos = positions[pi];
            fill(x, (size_t)m * x_stride);
            memcpy(x + (size_t)pos * x_stride, row, (size_t)k * 4);
            colo_cpu_gemm_f32(m, n, k, x, x_stride, p, y, y_stride);
            if (memcmp(y + (size_t)pos * y_stride, alone, (size_t)n * 4))
                fail_msg("row at position %d of %d rows differs from the row alone", pos, m);
        }
    }
    free(p), free(w), free(row), free(alone), free(x), free(y);
}

/* colo_cpu_gemv_chain reads W's rows as they are (F32, or F16 when f16,
 * with a row stride past k) and gives every output the gemm's bits: rows
 * of x 1..9, W rows not a multiple of 8, k not a multiple of 8, and for
 * one row of x (passes of 4 groups of 8 outputs at once), W rows that
 * leave 1, 2 or 3 groups and a partial one (passes of 2 and 1). */
static void test_chain_unpacked(void **state)
{
    (void)state;
    const int shapes[][2] = {{45, 300}, {8, 8}, {3, 5}, {64, 256}, {19, 77}, {100, 40}, {24, 16}, {59, 24}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int f16 = 0; f16 < 2; f16++) {
            int n = shapes[si][0], k = shapes[si][1], ws = k + 3, xs = k + 1, ys = n + 2, max_m = 9;
            float *w = malloc((size_t)n * k * 4), *wrows = malloc((size_t)n * ws * 4);
            uint16_t *w16 = malloc((size_t)n * ws * 2);
            float *x = malloc((size_t)max_m * xs * 4), *y = malloc((size_t)max_m * ys * 4);
            float *ref = malloc((size_t)max_m * n * 4);
            assert_true(w && wrows && w16 && x && y && ref);
            fill(w, (size_t)n * k), fill(x, (size_t)max_m * xs);
            for (int j = 0; j < n; j++)
                for (int kk = 0; kk < k; kk++) {
                    w16[(size_t)j * ws + kk] = colo_f32_to_fp16(w[(size_t)j * k + kk]);
                    if (f16) /* the gemm gets the widened values */
                        w[(size_t)j * k + kk] = colo_fp16_to_f32(w16[(size_t)j * ws + kk]);
                    wrows[(size_t)j * ws + kk] = w[(size_t)j * k + kk];
                }
            float *p = pack(w, n, k);
            for (int m = 1; m <= max_m; m++) {
                colo_cpu_gemm_f32(m, n, k, x, xs, p, ref, n);
                if (f16)
                    colo_cpu_gemv_chain(m, n, k, x, xs, w16, (size_t)ws * 2, true, y, ys);
                else
                    colo_cpu_gemv_chain(m, n, k, x, xs, wrows, (size_t)ws * 4, false, y, ys);
                for (int i = 0; i < m; i++)
                    if (memcmp(y + (size_t)i * ys, ref + (size_t)i * n, (size_t)n * 4))
                        fail_msg("%s n=%d k=%d: row %d of %d differs from the gemm's", f16 ? "F16" : "F32", n, k, i,
                                 m);
            }
            free(p), free(w), free(wrows), free(w16), free(x), free(y), free(ref);
        }
}

int main(void)
{
    seed_from_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_float64_and_scalar),
        cmocka_unit_test(test_row_invariance),
        cmocka_unit_test(test_chain_unpacked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
