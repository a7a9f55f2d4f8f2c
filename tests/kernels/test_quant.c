/* Block formats as GGML defines them, fp16/bf16 conversions, and the int8
 * dot products of the CPU linear op (AVX2 and scalar fallback alike)
 * against float64 references. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant.h"

#include <strings.h>
#include "tests/test_seed.h"

/* How much larger than GGML's (with its search) this quantizer's rms error may be. */
#define QUANT_ERR_RATIO 1.25

static uint64_t rng_state;

static void seed_from_env(void)
{
    uint64_t seed = colo_test_seed("test_quant", 30);
    rng_state = seed * 2654435761u + 1;
}

static uint64_t rng_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float rng_normal(void)
{
    double u = ((rng_u64() >> 11) + 1.0) / 9007199254740993.0, v = (rng_u64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- fp16 / bf16 ------------------------------------------------------------------------ */

static void test_fp16_facts_and_round_trip(void **state)
{
    (void)state;
    assert_int_equal(colo_f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(colo_f32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(colo_f32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(colo_f32_to_fp16(65520.0f), 0x7c00);                /* rounds to +inf */
    assert_int_equal(colo_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);         /* tie: to even */
    assert_int_equal(colo_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);     /* tie: to even */
    assert_int_equal(colo_f32_to_fp16(0x1p-24f), 0x0001);                /* smallest subnormal */
    assert_true(colo_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(colo_fp16_to_f32(0x3555) == 0x1.554p-2f);
    /* Every finite and infinite half survives the round trip; NaNs stay NaN. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = colo_fp16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_true((colo_f32_to_fp16(f) & 0x7fff) > 0x7c00);
        } else {
            assert_int_equal(colo_f32_to_fp16(f), h);
        }
    }
}

static void test_bf16_facts_and_round_trip(void **state)
{
    (void)state;
    assert_int_equal(colo_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(colo_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie: to even */
    assert_int_equal(colo_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: to even */
    assert_int_equal(colo_f32_to_bf16(-3.0f), 0xc040);
    assert_true(colo_bf16_to_f32(0x4049) == 3.140625f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = colo_bf16_to_f32((uint16_t)h);
        assert_int_equal(f32_bits(f), h << 16);
        if (isnan(f))
            assert_true(isnan(colo_bf16_to_f32(colo_f32_to_bf16(f))));
        else
            assert_int_equal(colo_f32_to_bf16(f), h);
    }
}

/* ---- block layouts -------------------------------------------------------------------------- */

static void test_q4_0_q4_1_q8_0_layouts(void **state)
{
    (void)state;
    float y[32];
    /* Q4_1: element j = (qs[j] & 15) d + m, element j + 16 = (qs[j] >> 4) d + m. */
    colo_blk_q4_1 b1 = {.d = colo_f32_to_fp16(0.5f), .m = colo_f32_to_fp16(-1.0f)};
    for (int j = 0; j < 16; j++)
        b1.qs[j] = (uint8_t)(j | (15 - j) << 4);
    colo_dequantize_row(COLO_Q4_1, &b1, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == j * 0.5f - 1.0f);
        assert_true(y[j + 16] == (15 - j) * 0.5f - 1.0f);
    }
    /* Q4_0: x = (q - 8) d, same nibble order. */
    colo_blk_q4_0 b0 = {.d = colo_f32_to_fp16(0.25f)};
    for (int j = 0; j < 16; j++)
        b0.qs[j] = (uint8_t)((15 - j) | j << 4);
    colo_dequantize_row(COLO_Q4_0, &b0, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (15 - j - 8) * 0.25f);
        assert_true(y[j + 16] == (j - 8) * 0.25f);
    }
    /* Q8_0: x = q d. */
    colo_blk_q8_0 b8 = {.d = colo_f32_to_fp16(0.125f)};
    for (int j = 0; j < 32; j++)
        b8.qs[j] = (int8_t)(j * 8 - 128);
    colo_dequantize_row(COLO_Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == (j * 8 - 128) * 0.125f);
    assert_int_equal(sizeof(colo_blk_q4_0), 18);
    assert_int_equal(sizeof(colo_blk_q4_1), 20);
    assert_int_equal(sizeof(colo_blk_q8_0), 34);
    assert_int_equal(offsetof(colo_blk_q6_k, d), 208);
}

/* GGML's sizes and field offsets of the 5-bit formats and the K-quants. */
static void test_q5_k_quant_layouts(void **state)
{
    (void)state;
    assert_int_equal(sizeof(colo_blk_q5_0), 22);
    assert_int_equal(offsetof(colo_blk_q5_0, qs), 6);
    assert_int_equal(sizeof(colo_blk_q5_1), 24);
    assert_int_equal(offsetof(colo_blk_q5_1, qs), 8);
    assert_int_equal(sizeof(colo_blk_q2_k), 84);
    assert_int_equal(offsetof(colo_blk_q2_k, d), 80);
    assert_int_equal(sizeof(colo_blk_q3_k), 110);
    assert_int_equal(offsetof(colo_blk_q3_k, scales), 96);
    assert_int_equal(offsetof(colo_blk_q3_k, d), 108);
    assert_int_equal(sizeof(colo_blk_q4_k), 144);
    assert_int_equal(offsetof(colo_blk_q4_k, qs), 16);
    assert_int_equal(sizeof(colo_blk_q5_k), 176);
    assert_int_equal(offsetof(colo_blk_q5_k, qh), 16);
    assert_int_equal(offsetof(colo_blk_q5_k, qs), 48);
    const colo_dtype types[] = {COLO_Q5_0, COLO_Q5_1, COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K};
    const size_t bytes[] = {22, 24, 84, 110, 144, 176};
    for (size_t t = 0; t < 6; t++) {
        assert_int_equal(colo_dtype_block_bytes(types[t]), bytes[t]);
        assert_int_equal(colo_dtype_block_elems(types[t]), t < 2 ? 32 : 256);
        assert_true(colo_dtype_is_weight(types[t]));
    }
    /* One element at a time through Q4_K and Q5_K: only element e is nonzero
     * (code 1, every scale 1, every min 0); for Q5_K the code is 16 (fifth bit). */
    for (int e = 0; e < 256; e += 5) {
        colo_blk_q4_k b4;
        colo_blk_q5_k b5;
        memset(&b4, 0, sizeof b4);
        memset(&b5, 0, sizeof b5);
        b4.d = b5.d = colo_f32_to_fp16(1.0f);
        for (int j = 0; j < 4; j++)
            b4.scales[j] = b5.scales[j] = 1, b4.scales[j + 8] = b5.scales[j + 8] = 1; /* sc[0..7] = 1 */
        b4.qs[32 * (e / 64) + e % 32] = (uint8_t)(1 << (4 * ((e % 64) / 32)));
        b5.qh[e % 32] = (uint8_t)(1 << (e / 32));
        float y4[256], y5[256];
        colo_dequantize_row(COLO_Q4_K, &b4, y4, 256);
        colo_dequantize_row(COLO_Q5_K, &b5, y5, 256);
        for (int i = 0; i < 256; i++) {
            assert_true(y4[i] == (i == e ? 1.0f : 0.0f));
            assert_true(y5[i] == (i == e ? 16.0f : 0.0f));
        }
    }
}

/* ---- against GGML's own quantizers and dequantizers -------------------------------------- */

/* tests/data/quant/quant_ref.txt (README.md there): per type, input floats,
 * the blocks GGML's quantizer made of them, and GGML's dequantization. */
typedef struct {
    char name[16];
    int n;
    float *x, *y;
    unsigned char *q;
    size_t q_bytes;
} ggml_ref;

static bool read_ref(FILE *f, ggml_ref *r)
{
    if (fscanf(f, "%15s %d", r->name, &r->n) != 2 || r->n <= 0 || r->n > 1 << 16)
        return false;
    r->x = malloc((size_t)r->n * 4), r->y = malloc((size_t)r->n * 4), r->q = malloc((size_t)r->n * 4);
    for (int i = 0; i < r->n; i++)
        if (fscanf(f, "%a", &r->x[i]) != 1)
            return false;
    char hex[3] = {0};
    r->q_bytes = 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n')
        ;
    while (c != EOF && c != '\n' && r->q_bytes < (size_t)r->n * 4) {
        hex[0] = (char)c, hex[1] = (char)fgetc(f);
        r->q[r->q_bytes++] = (unsigned char)strtoul(hex, NULL, 16);
        c = fgetc(f);
    }
    for (int i = 0; i < r->n; i++)
        if (fscanf(f, "%a", &r->y[i]) != 1)
            return false;
    return true;
}

static colo_dtype dtype_named(const char *ggml_name)
{
    const colo_dtype all[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1, COLO_Q8_0,
                              COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcasecmp(colo_dtype_name(all[i]), ggml_name))
            return all[i];
    return COLO_I32;
}

static double rms_err(const float *a, const float *b, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / n);
}

/* For every type: GGML's blocks dequantize here to GGML's values; the int8
 * dot products read them as GGML does; this quantizer's error on the same
 * input stays within a factor of GGML's (which searches for its scales). */
static void test_ggml_reference_blocks(void **state)
{
    (void)state;
    FILE *f = fopen(COLO_SOURCE_DIR "/tests/data/quant/quant_ref.txt", "r");
    assert_non_null(f);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f)); /* the header comment */
    int n_types = 0;
    ggml_ref r;
    while (read_ref(f, &r)) {
        colo_dtype t = dtype_named(r.name);
        if (t == COLO_I32)
            fail_msg("reference type %s unknown", r.name);
        n_types++;
        assert_int_equal(r.q_bytes, colo_dtype_row_bytes(t, r.n));
        float *y = malloc((size_t)r.n * 4), *mine = malloc((size_t)r.n * 4);
        unsigned char *q = malloc(r.q_bytes);
        colo_dequantize_row(t, r.q, y, r.n);
        double ymax = 0;
        for (int i = 0; i < r.n; i++)
            ymax = fabs(r.y[i]) > ymax ? fabs(r.y[i]) : ymax;
        for (int i = 0; i < r.n; i++)
            if (!(fabs(y[i] - r.y[i]) <= 0x1p-22 * ymax))
                fail_msg("%s: element %d: %a, GGML %a", r.name, i, y[i], r.y[i]);
        /* Dot products of GGML's blocks with 8-bit activations (blocks of 32,
         * or of 256 for the K-quants). */
        int nb = r.n / 32, nbk = r.n / 256;
        float *x = malloc((size_t)r.n * 4);
        colo_blk_q8x *xq = malloc((size_t)r.n / 32 * sizeof *xq);
        colo_blk_q8k *xk = malloc(((size_t)r.n / 256 + 1) * sizeof *xk);
        for (int i = 0; i < r.n; i++)
            x[i] = rng_normal();
        colo_cpu_quantize_q8x(x, xq, r.n);
        if (nbk)
            colo_cpu_quantize_q8k(x, xk, r.n);
        bool k_quant = colo_cpu_vec_dot_k_for(t) != NULL;
        double ref = 0, mag = 0;
        for (int i = 0; i < r.n; i++) {
            double xv = k_quant ? (double)xk[i / 256].qs[i % 256] * xk[i / 256].d : (double)xq[i / 32].qs[i % 32] * xq[i / 32].d;
            double p = (double)r.y[i] * xv;
            ref += p, mag += fabs(p);
        }
        float got;
        if (k_quant)
            colo_cpu_vec_dot_k_for(t)(r.n, r.q, xk, nbk, 1, &got);
        else
            colo_cpu_vec_dot_for(t)(r.n, r.q, xq, nb, 1, &got);
        if (!(fabs(got - ref) <= 1e-5 * mag + 1e-6))
            fail_msg("%s: dot %.9g, reference %.9g", r.name, got, ref);
        /* This quantizer against GGML's on the same input. */
        assert_int_equal(colo_quantize_row(t, r.x, q, r.n), COLO_OK);
        colo_dequantize_row(t, q, mine, r.n);
        double e_mine = rms_err(mine, r.x, r.n), e_ggml = rms_err(r.y, r.x, r.n);
        printf("  %-5s rms error %.3g (GGML %.3g, ratio %.2f)\n", r.name, e_mine, e_ggml, e_mine / e_ggml);
        if (!(e_mine <= QUANT_ERR_RATIO * e_ggml))
            fail_msg("%s: quantizer rms error %.3g > %.1f x GGML's %.3g", r.name, e_mine, QUANT_ERR_RATIO, e_ggml);
        free(y), free(mine), free(q), free(x), free(xq), free(xk);
        free(r.x), free(r.y), free(r.q);
    }
    fclose(f);
    assert_int_equal(n_types, 10);
}

/* GGML's dequantize_row_q6_K, restated: per half of 128 elements (ql += 64,
 * qh += 32, sc += 8), for l < 32 with is = l / 16:
 *   y[l]      = d sc[is]     ((ql[l]      & 15) | ((qh[l] >> 0) & 3) << 4) - 32)
 *   y[l + 32] = d sc[is + 2] ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32)
 *   y[l + 64] = d sc[is + 4] ((ql[l]      >> 4) | ((qh[l] >> 4) & 3) << 4) - 32)
 *   y[l + 96] = d sc[is + 6] ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32) */
static void ref_q6_k(const colo_blk_q6_k *b, double *y)
{
    double d = colo_fp16_to_f32(b->d);
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
        const int8_t *sc = b->scales + 8 * half;
        double *o = y + 128 * half;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            o[l] = d * sc[is] * (((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32);
            o[l + 32] = d * sc[is + 2] * (((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32);
            o[l + 64] = d * sc[is + 4] * (((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            o[l + 96] = d * sc[is + 6] * (((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
    }
}

static void random_q6_k(colo_blk_q6_k *b)
{
    unsigned char *p = (unsigned char *)b;
    for (size_t i = 0; i < sizeof *b; i++)
        p[i] = (unsigned char)rng_u64();
    b->d = colo_f32_to_fp16(0.001f + 0.003f * (float)(rng_u64() % 1000) / 1000);
}

static void test_q6_k_layout(void **state)
{
    (void)state;
    /* One element at a time: only element e is nonzero (q = 33, scale 1). */
    for (int e = 0; e < 256; e += 7) {
        colo_blk_q6_k b;
        memset(&b, 0, sizeof b);
        b.d = colo_f32_to_fp16(1.0f);
        for (int i = 0; i < 16; i++)
            b.scales[i] = 1;
        /* all q = 32 (zero): low nibble 0, high bits 2 */
        memset(b.qh, 0xaa, sizeof b.qh);
        int half = e / 128, j = (e % 128) / 32, l = e % 32;
        b.ql[64 * half + l + 32 * (j & 1)] |= (uint8_t)(1 << (4 * (j >> 1)));
        float y[256];
        colo_dequantize_row(COLO_Q6_K, &b, y, 256);
        for (int i = 0; i < 256; i++)
            assert_true(y[i] == (i == e ? 1.0f : 0.0f));
    }
    /* Random blocks against the restated GGML loop. */
    for (int t = 0; t < 50; t++) {
        colo_blk_q6_k b[2];
        random_q6_k(&b[0]), random_q6_k(&b[1]);
        float y[512];
        double ref[512];
        colo_dequantize_row(COLO_Q6_K, b, y, 512);
        ref_q6_k(&b[0], ref), ref_q6_k(&b[1], ref + 256);
        for (int i = 0; i < 512; i++)
            assert_true(fabs(y[i] - ref[i]) <= 1e-6 * fabs(ref[i]));
    }
}

/* quantize then dequantize: the error each format's rounding allows. */
static void test_quantize_round_trip(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q8_0, COLO_F16, COLO_BF16, COLO_Q5_0, COLO_Q5_1};
    enum { N = 32 * 40 };
    float x[N], y[N];
    unsigned char q[N * 4];
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        for (int i = 0; i < N; i++)
            x[i] = rng_normal() * (1 + (i / 32) % 5);
        assert_int_equal(colo_quantize_row(types[t], x, q, N), COLO_OK);
        colo_dequantize_row(types[t], q, y, N);
        for (int b = 0; b < N / 32; b++) {
            float lo = x[b * 32], hi = x[b * 32], amax = 0;
            for (int j = 0; j < 32; j++) {
                float v = x[b * 32 + j];
                lo = v < lo ? v : lo, hi = v > hi ? v : hi, amax = fabsf(v) > amax ? fabsf(v) : amax;
            }
            for (int j = 0; j < 32; j++) {
                float v = x[b * 32 + j];
                /* Rounding to the code, plus d (and m) stored as fp16 (relative 2^-11). */
                double bound;
                switch (types[t]) {
                case COLO_Q4_0: bound = amax / 8 * 1.01 + amax * 0x1p-11; break; /* d = max / -8; 16 clamps to 15 */
                case COLO_Q4_1: bound = (hi - lo) / 30 * 1.01 + (hi - lo + fabsf(lo)) * 0x1p-11; break;
                case COLO_Q8_0: bound = amax / 254 * 1.01 + amax * 0x1p-11; break;
                case COLO_Q5_0: bound = amax / 16 * 1.01 + amax * 0x1p-11; break; /* d = max / -16; 32 clamps to 31 */
                case COLO_Q5_1: bound = (hi - lo) / 62 * 1.01 + (hi - lo + fabsf(lo)) * 0x1p-11; break;
                /* Below 2^-14, F16 is subnormal: half a step is 2^-25 absolute. */
                case COLO_F16: bound = fmax(fabsf(v) * 0x1p-11, 0x1p-25); break;
                default: bound = fabsf(v) * 0x1p-8; break;
                }
                if (!(fabs(y[b * 32 + j] - v) <= bound))
                    fail_msg("%s: element %d: %g -> %g (bound %g)", colo_dtype_name(types[t]), b * 32 + j, v,
                             y[b * 32 + j], bound);
            }
        }
    }
    assert_int_equal(colo_quantize_row(COLO_I32, x, q, 256), COLO_EUNSUPPORTED);
}

/* The K-quants' round trip on normal rows whose spread changes every 32
 * elements: the rms error relative to the rms of the input stays within
 * 1.25x of what this quantizer measured (about 0.33, 0.15, 0.08, 0.04,
 * 0.019 for Q2_K..Q6_K; test_ggml_reference_blocks compares it with GGML's),
 * and no element leaves the range of its sub-block by much. */
static void test_quantize_round_trip_k(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    const double rel[] = {0.41, 0.19, 0.1, 0.05, 0.024};
    enum { N = 256 * 8 };
    static float x[N], y[N];
    static unsigned char q[N * 4];
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        double sx = 0;
        for (int i = 0; i < N; i++) {
            x[i] = rng_normal() * (1 + (i / 32) % 5) + ((i / 64) % 3 == 1 ? 0.5f : 0.0f);
            sx += (double)x[i] * x[i];
        }
        assert_int_equal(colo_quantize_row(types[t], x, q, N), COLO_OK);
        colo_dequantize_row(types[t], q, y, N);
        double e = rms_err(y, x, N) / sqrt(sx / N);
        printf("  %-5s relative rms error %.3g\n", colo_dtype_name(types[t]), e);
        if (!(e <= rel[t]))
            fail_msg("%s: relative rms error %.3g > %.3g", colo_dtype_name(types[t]), e, rel[t]);
        for (int b = 0; b < N / 16; b++) {
            float lo = 0, hi = 0;
            for (int j = 0; j < 16; j++)
                lo = fminf(lo, x[b * 16 + j]), hi = fmaxf(hi, x[b * 16 + j]);
            for (int j = 0; j < 16; j++) {
                float v = y[b * 16 + j], slack = (hi - lo) * 0.6f;
                if (!(v >= lo - slack && v <= hi + slack))
                    fail_msg("%s: element %d: %g outside [%g, %g]", colo_dtype_name(types[t]), b * 16 + j, v, lo, hi);
            }
        }
    }
}

/* ---- activations to 8 bits, and the integer dot products --------------------------------------- */

static void test_quantize_activations(void **state)
{
    (void)state;
    enum { K = 32 * 24 };
    float x[K];
    colo_blk_q8x a[K / 32], b[K / 32];
    for (int i = 0; i < K; i++)
        x[i] = rng_normal() * (float)(1 + (i / 32) % 7);
    for (int j = 0; j < 32; j++) /* an all-zero block */
        x[64 + j] = 0;
    colo_cpu_quantize_q8x(x, a, K);
    colo_cpu_quantize_q8x_scalar(x, b, K);
    assert_memory_equal(a, b, sizeof a); /* SIMD and scalar round the same way */
    for (int bl = 0; bl < K / 32; bl++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            /* rounding to the nearest step, up to the float error of x * (1/d)
             * (two roundings of a value below 128 steps: 127 * 2^-22 steps) */
            double slack = 127.0 * 0x1p-22;
            assert_true(fabs(x[bl * 32 + j] - a[bl].qs[j] * (double)a[bl].d) <= a[bl].d * (0.5 + slack));
            assert_true(a[bl].qs[j] >= -127 && a[bl].qs[j] <= 127);
            sum += a[bl].qs[j];
        }
        assert_true(a[bl].s == a[bl].d * (float)sum);
    }
    assert_true(a[2].d == 0 && a[2].s == 0);
}

/* Random bytes as a row of k elements of type t, with small finite fp16
 * scales (any other bytes make a valid block); false for the types other
 * than Q5_0, Q5_1, Q2_K..Q5_K. */
static bool random_blocks(colo_dtype t, unsigned char *w, int k)
{
    /* Offsets of the fp16 scales in each block (-1: none). */
    int d_off, m_off;
    switch (t) {
    case COLO_Q5_0: d_off = 0, m_off = -1; break;
    case COLO_Q5_1: d_off = 0, m_off = 2; break;
    case COLO_Q2_K: d_off = 80, m_off = 82; break;
    case COLO_Q3_K: d_off = 108, m_off = -1; break;
    case COLO_Q4_K: case COLO_Q5_K: d_off = 0, m_off = 2; break;
    default: return false;
    }
    size_t bb = colo_dtype_block_bytes(t), nb = (size_t)k / (size_t)colo_dtype_block_elems(t);
    for (size_t i = 0; i < bb * nb; i++)
        w[i] = (unsigned char)rng_u64();
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = colo_f32_to_fp16(0.001f + 0.003f * (float)(rng_u64() % 1000) / 1000);
        uint16_t m = colo_f32_to_fp16((t == COLO_Q5_1 ? -0.5f : 0.002f) * (float)(rng_u64() % 1000) / 1000);
        memcpy(w + b * bb + d_off, &d, 2);
        if (m_off >= 0)
            memcpy(w + b * bb + m_off, &m, 2);
    }
    return true;
}

/* Weights (n rows of k) of type t and their exact values. */
static void *weights(colo_dtype t, int n, int k, double *deq)
{
    size_t rb = colo_dtype_row_bytes(t, k);
    unsigned char *w = malloc(rb * n);
    float *row = malloc((size_t)k * sizeof(float));
    for (int r = 0; r < n; r++) {
        unsigned char *wr = w + rb * r;
        if (t == COLO_Q6_K) {
            for (int b = 0; b < k / 256; b++) {
                random_q6_k((colo_blk_q6_k *)wr + b);
                ref_q6_k((colo_blk_q6_k *)wr + b, deq + (size_t)r * k + b * 256);
            }
        } else if (random_blocks(t, wr, k)) {
            /* Every bit pattern of the codes and packed scales; the values
             * from the dequantizer, which the GGML reference test checks. */
            colo_dequantize_row(t, wr, row, k);
            for (int j = 0; j < k; j++)
                deq[(size_t)r * k + j] = row[j];
        } else {
            for (int j = 0; j < k; j++)
                row[j] = rng_normal();
            assert_int_equal(colo_quantize_row(t, row, wr, k), COLO_OK);
            colo_dequantize_row(t, wr, row, k);
            for (int j = 0; j < k; j++)
                deq[(size_t)r * k + j] = row[j];
        }
    }
    free(row);
    return w;
}

/* Every kernel, SIMD and scalar, for 1..COLO_CPU_DOT_ROWS activation rows,
 * against the float64 dot of the exact weights with the exact quantized
 * activations: only float rounding remains, bound 1e-5 sum|w x| + 1e-6.
 * A row's SIMD result is the same bits whatever the row count. */
static void test_int8_dot_products(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q8_0, COLO_Q5_0, COLO_Q5_1};
    const int ks[] = {256, 512, 32 * 41};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            int k = ks[ki], n = 5, nb = k / 32;
            if (k % colo_dtype_block_elems(types[t]))
                continue;
            double *wd = malloc((size_t)n * k * sizeof(double));
            unsigned char *w = weights(types[t], n, k, wd);
            size_t rb = colo_dtype_row_bytes(types[t], k);
            float *x = malloc((size_t)COLO_CPU_DOT_ROWS * k * sizeof(float));
            colo_blk_q8x *xq = malloc((size_t)COLO_CPU_DOT_ROWS * nb * sizeof *xq);
            for (int i = 0; i < COLO_CPU_DOT_ROWS * k; i++)
                x[i] = rng_normal() * 2;
            for (int r = 0; r < COLO_CPU_DOT_ROWS; r++)
                colo_cpu_quantize_q8x(x + (size_t)r * k, xq + (size_t)r * nb, k);
            colo_cpu_vec_dot_fn simd = colo_cpu_vec_dot_for(types[t]);
            colo_cpu_vec_dot_fn scalar = types[t] == COLO_Q4_0   ? colo_cpu_vec_dot_q4_0_scalar
                                         : types[t] == COLO_Q4_1 ? colo_cpu_vec_dot_q4_1_scalar
                                         : types[t] == COLO_Q8_0 ? colo_cpu_vec_dot_q8_0_scalar
                                         : types[t] == COLO_Q5_0 ? colo_cpu_vec_dot_q5_0_scalar
                                                                 : colo_cpu_vec_dot_q5_1_scalar;
            for (int row = 0; row < n; row++) {
                const unsigned char *wr = w + rb * row;
                float single[COLO_CPU_DOT_ROWS];
                for (int r = 0; r < COLO_CPU_DOT_ROWS; r++)
                    simd(k, wr, xq + (size_t)r * nb, nb, 1, &single[r]);
                for (int nr = 1; nr <= COLO_CPU_DOT_ROWS; nr++) {
                    float got[COLO_CPU_DOT_ROWS], got_s[COLO_CPU_DOT_ROWS];
                    simd(k, wr, xq, nb, nr, got);
                    scalar(k, wr, xq, nb, nr, got_s);
                    for (int r = 0; r < nr; r++) {
                        double ref = 0, mag = 0;
                        for (int j = 0; j < k; j++) {
                            const colo_blk_q8x *b = xq + (size_t)r * nb + j / 32;
                            double p = wd[(size_t)row * k + j] * ((double)b->qs[j % 32] * b->d);
                            ref += p, mag += fabs(p);
                        }
                        double bound = 1e-5 * mag + 1e-6;
                        if (!(fabs(got[r] - ref) <= bound) || !(fabs(got_s[r] - ref) <= bound))
                            fail_msg("%s k=%d row %d nr=%d r=%d: simd %.9g scalar %.9g ref %.9g bound %.3g",
                                     colo_dtype_name(types[t]), k, row, nr, r, got[r], got_s[r], ref, bound);
                        assert_int_equal(f32_bits(got[r]), f32_bits(single[r]));
                    }
                }
            }
            free(wd), free(w), free(x), free(xq);
        }
}

/* Activations for the K-quants: one scale per 256, each quant within half
 * a step, the sums per 16 exact. */
static void test_quantize_activations_k(void **state)
{
    (void)state;
    enum { K = 256 * 3 };
    float x[K];
    colo_blk_q8k a[K / 256], s[K / 256];
    for (int i = 0; i < K; i++)
        x[i] = rng_normal() * (float)(1 + (i / 32) % 7);
    for (int j = 0; j < 256; j++) /* an all-zero block */
        x[256 + j] = 0;
    colo_cpu_quantize_q8k(x, a, K);
    colo_cpu_quantize_q8k_scalar(x, s, K);
    assert_memory_equal(a, s, sizeof a); /* SIMD and scalar round the same way */
    for (int b = 0; b < K / 256; b++) {
        float amax = 0;
        for (int j = 0; j < 256; j++)
            amax = fabsf(x[b * 256 + j]) > amax ? fabsf(x[b * 256 + j]) : amax;
        assert_true(a[b].d == amax / 127);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                int j = 16 * g + l;
                assert_true(fabs(x[b * 256 + j] - a[b].qs[j] * (double)a[b].d) <= a[b].d * 0.5 * (1 + 1e-6));
                sum += a[b].qs[j];
            }
            assert_int_equal(a[b].bsums[g], sum);
        }
    }
    assert_true(a[1].d == 0);
}

/* The K-quant kernels (SIMD and scalar) against the float64 dot of the
 * exact weights with the exact quantized activations, 1..COLO_CPU_DOT_ROWS
 * rows; a row's SIMD result is the same bits whatever the row count. */
static void test_int8_dot_products_k(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    colo_cpu_vec_dot_k_fn scalars[] = {colo_cpu_vec_dot_k_q2_k_scalar, colo_cpu_vec_dot_k_q3_k_scalar,
                                       colo_cpu_vec_dot_k_q4_k_scalar, colo_cpu_vec_dot_k_q5_k_scalar,
                                       colo_cpu_vec_dot_k_q6_k_scalar};
    const int ks[] = {256, 512, 256 * 5};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            int k = ks[ki], n = 5, nb = k / 256;
            assert_null(colo_cpu_vec_dot_for(types[t]));
            double *wd = malloc((size_t)n * k * sizeof(double));
            unsigned char *w = weights(types[t], n, k, wd);
            size_t rb = colo_dtype_row_bytes(types[t], k);
            float *x = malloc((size_t)COLO_CPU_DOT_ROWS * k * sizeof(float));
            colo_blk_q8k *xq = malloc((size_t)COLO_CPU_DOT_ROWS * nb * sizeof *xq);
            for (int i = 0; i < COLO_CPU_DOT_ROWS * k; i++)
                x[i] = rng_normal() * 2;
            for (int r = 0; r < COLO_CPU_DOT_ROWS; r++)
                colo_cpu_quantize_q8k(x + (size_t)r * k, xq + (size_t)r * nb, k);
            colo_cpu_vec_dot_k_fn simd = colo_cpu_vec_dot_k_for(types[t]);
            assert_non_null(simd);
            for (int row = 0; row < n; row++) {
                const unsigned char *wr = w + rb * row;
                float single[COLO_CPU_DOT_ROWS];
                for (int r = 0; r < COLO_CPU_DOT_ROWS; r++)
                    simd(k, wr, xq + (size_t)r * nb, nb, 1, &single[r]);
                for (int nr = 1; nr <= COLO_CPU_DOT_ROWS; nr++) {
                    float got[COLO_CPU_DOT_ROWS], got_s[COLO_CPU_DOT_ROWS];
                    simd(k, wr, xq, nb, nr, got);
                    scalars[t](k, wr, xq, nb, nr, got_s);
                    for (int r = 0; r < nr; r++) {
                        double ref = 0, mag = 0;
                        for (int j = 0; j < k; j++) {
                            const colo_blk_q8k *b = xq + (size_t)r * nb + j / 256;
                            double p = wd[(size_t)row * k + j] * ((double)b->qs[j % 256] * b->d);
                            ref += p, mag += fabs(p);
                        }
                        double bound = 1e-5 * mag + 1e-6;
                        if (!(fabs(got[r] - ref) <= bound) || !(fabs(got_s[r] - ref) <= bound))
                            fail_msg("%s k=%d row %d nr=%d r=%d: simd %.9g scalar %.9g ref %.9g bound %.3g",
                                     colo_dtype_name(types[t]), k, row, nr, r, got[r], got_s[r], ref, bound);
                        assert_int_equal(f32_bits(got[r]), f32_bits(single[r]));
                    }
                }
            }
            free(wd), free(w), free(x), free(xq);
        }
}

static void test_float_dots(void **state)
{
    (void)state;
    for (int n = 1; n < 80; n += 3) {
        float a[80], b[80];
        uint16_t h[80];
        double ref = 0, ref16 = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            a[i] = rng_normal(), b[i] = rng_normal(), h[i] = colo_f32_to_fp16(a[i]);
            ref += (double)a[i] * b[i];
            ref16 += (double)colo_fp16_to_f32(h[i]) * b[i];
            mag += fabs((double)a[i] * b[i]);
        }
        assert_true(fabs(colo_cpu_dot_f32(a, b, n) - ref) <= 1e-6 * mag + 1e-7);
        assert_true(fabs(colo_cpu_dot_f16(h, b, n) - ref16) <= 1e-6 * mag + 1e-6);
    }
}

int main(void)
{
    seed_from_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_facts_and_round_trip), cmocka_unit_test(test_bf16_facts_and_round_trip),
        cmocka_unit_test(test_q4_0_q4_1_q8_0_layouts),    cmocka_unit_test(test_q6_k_layout),
        cmocka_unit_test(test_q5_k_quant_layouts),        cmocka_unit_test(test_ggml_reference_blocks),
        cmocka_unit_test(test_quantize_round_trip),       cmocka_unit_test(test_quantize_round_trip_k),
        cmocka_unit_test(test_quantize_activations),
        cmocka_unit_test(test_int8_dot_products),         cmocka_unit_test(test_quantize_activations_k),
        cmocka_unit_test(test_int8_dot_products_k),         cmocka_unit_test(test_float_dots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
