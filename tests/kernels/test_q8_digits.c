/* Products on two 8-bit digits one output at a time (kernels/q8_digits.h,
 * the arithmetic the CUDA kernels run): for every block format, codes and
 * scales give back the format's dequantized weights; each output is within
 * the two digits' bound of a float64 product; and each output is the same
 * bits as the CPU's gemm_q8 gives it, in its AVX512-VNNI version and in its
 * AVX2 one, for one row of x (its narrow kernel) and for many (its wide
 * one). */
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
#include "kernels/q8_digits.h"
#include "kernels/quant.h"
#include "tests/test_seed.h"

static colo_test_rng rng;

static uint64_t rng_u64(void) { return colo_test_rng_u64(&rng); }
static float rng_normal(void) { return colo_test_rng_normal(&rng); }

static const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1, COLO_Q8_0,
                                   COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};

/* n rows of k weights of type t: quantized from normal values, or, for the
 * K-quants, random bytes with small finite scales (every code and packed
 * scale occurs). */
static uint8_t *make_rows(colo_dtype t, int n, int k)
{
    size_t rb = colo_dtype_row_bytes(t, k);
    uint8_t *w = malloc(rb * (size_t)n);
    float *row = malloc((size_t)k * 4);
    assert_true(w && row);
    int d_off = t == COLO_Q6_K ? 208 : t == COLO_Q3_K ? 108 : t == COLO_Q2_K ? 80 : t == COLO_Q4_K || t == COLO_Q5_K ? 0 : -1;
    int m_off = t == COLO_Q2_K ? 82 : t == COLO_Q4_K || t == COLO_Q5_K ? 2 : -1;
    for (int r = 0; r < n; r++) {
        uint8_t *wr = w + rb * (size_t)r;
        if (d_off < 0) {
            for (int j = 0; j < k; j++)
                row[j] = rng_normal() * 0.5f;
            assert_int_equal(colo_quantize_row(t, row, wr, k), COLO_OK);
            continue;
        }
        size_t bb = colo_dtype_block_bytes(t);
        for (size_t i = 0; i < rb; i++)
            wr[i] = (uint8_t)rng_u64();
        for (int b = 0; b < k / 256; b++) {
            uint16_t d = colo_f32_to_fp16(0.001f + 0.004f * (float)(rng_u64() % 1000) / 1000);
            uint16_t m = colo_f32_to_fp16(0.003f * (float)(rng_u64() % 1000) / 1000);
            memcpy(wr + b * bb + d_off, &d, 2);
            if (m_off >= 0)
                memcpy(wr + b * bb + m_off, &m, 2);
        }
    }
    free(row);
    return w;
}

/* a u + c is the weight colo_dequantize_row gives, element by element. */
static void test_unpack_matches_dequantize(void **state)
{
    (void)state;
    const int k = 512;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        colo_dtype t = types[ti];
        uint8_t *w = make_rows(t, 3, k);
        float *deq = malloc((size_t)k * 4);
        assert_non_null(deq);
        for (int r = 0; r < 3; r++) {
            const uint8_t *row = w + colo_dtype_row_bytes(t, k) * (size_t)r;
            colo_dequantize_row(t, row, deq, k);
            for (int b = 0; b < k / 32; b++) {
                uint32_t uw[8];
                float a[2], c[2];
                int nh = colo_q8_unpack_words(t, row, b, uw, a, c);
                assert_int_equal(nh, t == COLO_Q2_K || t == COLO_Q3_K || t == COLO_Q6_K ? 2 : 1);
                for (int e = 0; e < 32; e++) {
                    int h = e / (32 / nh);
                    double want = deq[32 * b + e], got = (double)a[h] * (uw[e / 4] >> (8 * (e % 4)) & 255) + c[h];
                    if (fabs(got - want) > 1e-6 * (fabs(want) + fabs(c[h])) + 1e-9)
                        fail_msg("%s row %d block %d element %d: a u + c = %.9g, dequantized %.9g",
                                 colo_dtype_name(t), r, b, e, got, want);
                }
            }
        }
        free(w), free(deq);
    }
    assert_false(colo_q8_has(COLO_F32));
    assert_false(colo_q8_has(COLO_F16));
    assert_true(colo_q8_has(COLO_Q4_K));
}

/* Halves: every finite value, subnormals and signed zeros, exact. */
static void test_half(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue; /* inf and NaN: the formats never hold them */
        uint8_t p[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
        float a = colo_q8_half(p), b = colo_fp16_to_f32((uint16_t)h);
        if (memcmp(&a, &b, 4))
            fail_msg("half 0x%04x: %.9g, expected %.9g", h, a, b);
    }
}

/* y (m, n) = x W^T + bias, one output at a time. */
static void q8_products(colo_dtype t, const uint8_t *w, const float *x, const float *bias, int m, int n, int k,
                        float *y)
{
    int nb = k / 32;
    colo_q8_digits *xd = malloc((size_t)nb * sizeof *xd);
    assert_non_null(xd);
    size_t rb = colo_dtype_row_bytes(t, k);
    for (int i = 0; i < m; i++) {
        for (int b = 0; b < nb; b++)
            colo_q8_digits_of(x + (size_t)i * k + 32 * b, xd + b);
        for (int r = 0; r < n; r++)
            y[(size_t)i * n + r] = colo_q8_dot(t, w + rb * (size_t)r, k, xd, bias ? bias[r] : 0.0f);
    }
    free(xd);
}

/* Within float64's product plus the digits' bound: |x - (256 q + r) d| <=
 * D / 512 per element, so |error| <= ||w||_2 * sqrt(sum of (D / 512)^2). */
static void test_against_float64(void **state)
{
    (void)state;
    const int m = 3, n = 9, k = 512;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        colo_dtype t = types[ti];
        uint8_t *w = make_rows(t, n, k);
        float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4), *deq = malloc((size_t)k * 4);
        assert_true(x && y && deq);
        for (int i = 0; i < m * k; i++)
            x[i] = rng_normal();
        q8_products(t, w, x, NULL, m, n, k, y);
        for (int i = 0; i < m; i++) {
            double qe = 0;
            for (int b = 0; b < k / 32; b++) {
                double amax = 0;
                for (int e = 0; e < 32; e++)
                    amax = fmax(amax, fabs(x[(size_t)i * k + 32 * b + e]));
                qe += 32 * (amax / 127 / 512) * (amax / 127 / 512);
            }
            for (int r = 0; r < n; r++) {
                colo_dequantize_row(t, w + colo_dtype_row_bytes(t, k) * (size_t)r, deq, k);
                double ref = 0, mag = 0, wn = 0;
                for (int j = 0; j < k; j++) {
                    ref += (double)deq[j] * x[(size_t)i * k + j];
                    mag += fabs((double)deq[j] * x[(size_t)i * k + j]);
                    wn += (double)deq[j] * deq[j];
                }
                double got = y[(size_t)i * n + r], bound = 1e-5 * mag + sqrt(wn) * sqrt(qe) * 1.001 + 1e-6;
                if (fabs(got - ref) > bound)
                    fail_msg("%s (%d, %d): %.9g, float64 %.9g, bound %.3g", colo_dtype_name(t), i, r, got, ref, bound);
            }
        }
        free(w), free(x), free(y), free(deq);
    }
}

/* The same bits as gemm_q8 (both its kernels), with a bias, in the version
 * in use (colo_cpu_gemm_q8_set_isa). */
static void same_bits_as_cpu_gemm_q8(void)
{
    const int shapes[][3] = {{1, 37, 256}, {3, 20, 512}, {19, 33, 768}};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            colo_dtype t = types[ti];
            int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            uint8_t *w = make_rows(t, n, k);
            float *x = malloc((size_t)m * k * 4), *bias = malloc((size_t)n * 4);
            float *y = malloc((size_t)m * n * 4), *ref = malloc((size_t)m * n * 4);
            void *xp = aligned_alloc(64, (colo_cpu_gemm_q8_x_bytes(m, k) + 63) & ~(size_t)63);
            void *scratch = aligned_alloc(64, (colo_cpu_gemm_q8_scratch_bytes(k) + 63) & ~(size_t)63);
            assert_true(x && bias && y && ref && xp && scratch);
            for (int i = 0; i < m * k; i++)
                x[i] = rng_normal() * (i % 97 == 0 ? 8.0f : 1.0f);
            for (int r = 0; r < n; r++)
                bias[r] = rng_normal();
            colo_cpu_gemm_q8_pack_x(x, k, m, k, 0, (m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP, xp);
            colo_cpu_gemm_q8(w, t, 0, n, k, xp, m, bias, ref, n, scratch);
            q8_products(t, w, x, bias, m, n, k, y);
            for (int i = 0; i < m * n; i++)
                if (memcmp(&y[i], &ref[i], 4))
                    fail_msg("%s m=%d n=%d k=%d output (%d, %d): %.9g, gemm_q8 %.9g", colo_dtype_name(t), m, n, k,
                             i / n, i % n, y[i], ref[i]);
            free(w), free(x), free(bias), free(y), free(ref), free(xp), free(scratch);
        }
}

/* ... in each version the CPU runs: AVX512-VNNI's and AVX2's. */
static void test_same_bits_as_cpu_gemm_q8(void **state)
{
    (void)state;
    colo_cpu_q8_isa was = colo_cpu_gemm_q8_isa();
    int ran = 0;
    for (int v = COLO_CPU_Q8_AVX2; v <= COLO_CPU_Q8_VNNI; v++) {
        if (!colo_cpu_gemm_q8_set_isa((colo_cpu_q8_isa)v))
            continue;
        ran++;
        same_bits_as_cpu_gemm_q8();
    }
    assert_true(colo_cpu_gemm_q8_set_isa(was));
    if (!ran)
        skip(); /* no AVX2 on this CPU: gemm_q8 does not run */
}

int main(void)
{
    rng = colo_test_rng_from(colo_test_seed("test_q8_digits", 41));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_unpack_matches_dequantize),
        cmocka_unit_test(test_against_float64),
        cmocka_unit_test(test_same_bits_as_cpu_gemm_q8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
