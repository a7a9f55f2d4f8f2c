/* gemm_q8's versions (kernels/cpu/gemm_q8.c): the AVX2 one gives the same
 * bits as the AVX512-VNNI one, for x's packing and for every output, in
 * every block format, for 1 to 70 rows of x (its narrow kernel and its
 * wide one, groups of 16 rows, partial groups), odd numbers of weight rows
 * and ranges of them, several k, strides and a bias or none; and both give
 * the bits of kernels/q8_digits.h's products, one output at a time (so the
 * AVX2 version is checked on CPUs without AVX512-VNNI too). The version in
 * use follows COLO_CPU_GEMM_Q8 and colo_cpu_gemm_q8_set_isa. */
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

/* Byte offsets of a block's half-precision scale and minimum (-1: none). */
static void scale_offsets(colo_dtype t, int *d_off, int *m_off)
{
    *d_off = 0, *m_off = -1;
    switch (t) {
    case COLO_Q4_1: case COLO_Q5_1: *m_off = 2; break;
    case COLO_Q2_K: *d_off = 80, *m_off = 82; break;
    case COLO_Q3_K: *d_off = 108; break;
    case COLO_Q4_K: case COLO_Q5_K: *m_off = 2; break;
    case COLO_Q6_K: *d_off = 208; break;
    default: break;
    }
}

/* n rows of k weights of type t: random bytes (every code, every packed
 * scale, Q8_0's -128 too) with small finite scales and minimums. */
static uint8_t *make_rows(colo_dtype t, int n, int k)
{
    size_t rb = colo_dtype_row_bytes(t, k), bb = colo_dtype_block_bytes(t);
    uint8_t *w = malloc(rb * (size_t)n);
    assert_non_null(w);
    int d_off, m_off;
    scale_offsets(t, &d_off, &m_off);
    for (size_t i = 0; i < rb * (size_t)n; i++)
        w[i] = (uint8_t)rng_u64();
    for (size_t b = 0; b < rb * (size_t)n / bb; b++) {
        uint16_t d = colo_f32_to_fp16(0.001f + 0.004f * (float)(rng_u64() % 1000) / 1000);
        uint16_t m = colo_f32_to_fp16(0.003f * ((float)(rng_u64() % 1000) / 1000 - 0.5f));
        memcpy(w + b * bb + d_off, &d, 2);
        if (m_off >= 0)
            memcpy(w + b * bb + m_off, &m, 2);
    }
    return w;
}

/* m rows of k (stride x_stride) with blocks of many magnitudes: zero
 * blocks, single spikes, values near the digits' rounding ties. */
static float *make_x(int m, int k, int x_stride)
{
    float *x = malloc((size_t)m * x_stride * 4);
    assert_non_null(x);
    for (int i = 0; i < m; i++)
        for (int b = 0; b < k / 32; b++) {
            float *xb = x + (size_t)i * x_stride + 32 * b;
            int kind = (int)(rng_u64() % 8);
            float scale = powf(10.0f, (float)((int)(rng_u64() % 9) - 4));
            for (int e = 0; e < 32; e++)
                xb[e] = kind == 0 ? 0.0f : rng_normal() * scale;
            if (kind == 1) /* one spike */
                xb[rng_u64() % 32] = 1000.0f * scale;
            if (kind == 2) { /* a unit of scale and halves of it: near the high digit's ties */
                for (int e = 1; e < 32; e++)
                    xb[e] = ((float)((int)(rng_u64() % 254) - 127) + 0.5f) * scale;
                xb[0] = -127.0f * scale;
            }
        }
    for (int i = 0; i < m; i++)
        for (int j = k; j < x_stride; j++)
            x[(size_t)i * x_stride + j] = NAN; /* read by nobody */
    return x;
}

static void *alloc64(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    assert_non_null(p);
    return p;
}

typedef struct {
    colo_dtype t;
    int m, n, k, x_stride, y_stride;
    int64_t r0, r1;
    bool bias;
} shape;

/* y of one version for shape s: packed x in xp, outputs (all of y, the
 * rows and columns it must not write poisoned) in y. */
static void run_version(bool vnni, const shape *s, const uint8_t *w, const float *x, const float *bias,
                        colo_q8_xblk *xp, float *y, void *scratch)
{
    int groups = (s->m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP;
    memset(y, 0xff, (size_t)s->m * s->y_stride * 4);
    if (vnni) {
        colo_cpu_gemm_q8_pack_x_vnni(x, s->x_stride, s->m, s->k, 0, groups, xp);
        colo_cpu_gemm_q8_vnni(w, s->t, s->r0, s->r1, s->k, xp, s->m, s->bias ? bias : NULL, y, s->y_stride, scratch);
    } else {
        colo_cpu_gemm_q8_pack_x_avx2(x, s->x_stride, s->m, s->k, 0, groups, xp);
        colo_cpu_gemm_q8_avx2(w, s->t, s->r0, s->r1, s->k, xp, s->m, s->bias ? bias : NULL, y, s->y_stride, scratch);
    }
}

/* kernels/q8_digits.h's outputs for shape s into ref (rows [r0, r1)). */
static void reference(const shape *s, const uint8_t *w, const float *x, const float *bias, float *ref)
{
    int nb = s->k / 32;
    colo_q8_digits *xd = malloc((size_t)nb * sizeof *xd);
    assert_non_null(xd);
    size_t rb = colo_dtype_row_bytes(s->t, s->k);
    for (int i = 0; i < s->m; i++) {
        for (int b = 0; b < nb; b++)
            colo_q8_digits_of(x + (size_t)i * s->x_stride + 32 * b, xd + b);
        for (int64_t r = s->r0; r < s->r1; r++)
            ref[(size_t)i * s->n + r] = colo_q8_dot(s->t, w + rb * (size_t)r, s->k, xd, s->bias ? bias[r] : 0.0f);
    }
    free(xd);
}

/* Both versions (the VNNI one where the CPU has it) and the reference on
 * shape s: the same bits everywhere, and nothing written outside. */
static void check_shape(const shape *s, bool with_vnni)
{
    uint8_t *w = make_rows(s->t, s->n, s->k);
    float *x = make_x(s->m, s->k, s->x_stride), *bias = malloc((size_t)s->n * 4);
    float *ref = malloc((size_t)s->m * s->n * 4);
    size_t y_bytes = (size_t)s->m * s->y_stride * 4, x_bytes = colo_cpu_gemm_q8_x_bytes(s->m, s->k);
    float *ya = alloc64(y_bytes), *yv = alloc64(y_bytes);
    colo_q8_xblk *xa = alloc64(x_bytes), *xv = alloc64(x_bytes);
    void *scratch = alloc64(colo_cpu_gemm_q8_scratch_bytes(s->k));
    assert_true(bias && ref);
    for (int r = 0; r < s->n; r++)
        bias[r] = rng_normal();
    run_version(false, s, w, x, bias, xa, ya, scratch);
    reference(s, w, x, bias, ref);
    const char *name = colo_dtype_name(s->t);
    for (int i = 0; i < s->m; i++)
        for (int j = 0; j < s->y_stride; j++) {
            float got = ya[(size_t)i * s->y_stride + j];
            uint32_t bits;
            memcpy(&bits, &got, 4);
            if (j < s->r0 || j >= s->r1) {
                if (bits != 0xffffffffu)
                    fail_msg("%s m=%d n=%d k=%d: AVX2 wrote (%d, %d) outside rows [%lld, %lld)", name, s->m, s->n,
                             s->k, i, j, (long long)s->r0, (long long)s->r1);
            } else if (memcmp(&got, &ref[(size_t)i * s->n + j], 4)) {
                fail_msg("%s m=%d n=%d k=%d output (%d, %d): AVX2 %.9g, q8_digits %.9g", name, s->m, s->n, s->k, i,
                         j, got, ref[(size_t)i * s->n + j]);
            }
        }
    if (with_vnni) {
        run_version(true, s, w, x, bias, xv, yv, scratch);
        if (memcmp(xa, xv, x_bytes))
            fail_msg("%s m=%d k=%d: x packed by AVX2 differs from VNNI's", name, s->m, s->k);
        for (size_t e = 0; e < y_bytes / 4; e++)
            if (memcmp(&ya[e], &yv[e], 4))
                fail_msg("%s m=%d n=%d k=%d r=[%lld, %lld) output (%zu, %zu): AVX2 %.9g, VNNI %.9g", name, s->m,
                         s->n, s->k, (long long)s->r0, (long long)s->r1, e / (size_t)s->y_stride,
                         e % (size_t)s->y_stride, ya[e], yv[e]);
    }
    free(w), free(x), free(bias), free(ref), free(ya), free(yv), free(xa), free(xv), free(scratch);
}

static void test_avx2_same_bits_as_vnni(void **state)
{
    (void)state;
    /* what the CPU runs, whatever COLO_CPU_GEMM_Q8 says */
    colo_cpu_q8_isa was = colo_cpu_gemm_q8_isa();
    bool avx2 = colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_AVX2), vnni = colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_VNNI);
    assert_true(colo_cpu_gemm_q8_set_isa(was));
    if (!avx2)
        skip(); /* no AVX2, FMA and F16C here */
    if (!vnni)
        print_message("no AVX512-VNNI here: AVX2 against kernels/q8_digits.h only\n");
    const int ks32[] = {32, 96, 544}, ks256[] = {256, 768}, ns[] = {1, 7, 17, 33, 45};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        colo_dtype t = types[ti];
        bool super = colo_dtype_block_bytes(t) == colo_dtype_row_bytes(t, 256);
        const int *ks = super ? ks256 : ks32;
        int nk = super ? 2 : 3;
        for (int m = 1; m <= 70; m++)
            for (int ki = 0; ki < nk; ki++) {
                int n = ns[(m + ki) % 5], k = ks[ki];
                shape s = {.t = t, .m = m, .n = n, .k = k, .x_stride = k, .y_stride = n, .r0 = 0, .r1 = n,
                           .bias = (m + ki) % 2 == 0};
                if (m % 3 == 1) /* strides past the row, and a range of weight rows */
                    s.x_stride = k + 7, s.y_stride = n + 5, s.r0 = n / 3, s.r1 = n - n / 4;
                check_shape(&s, vnni);
            }
        if (vnni) /* the formats VNNI's narrow kernel reads in place */
            assert_int_equal(colo_cpu_gemm_q8_in_place_vnni(t), t == COLO_Q4_0 || t == COLO_Q4_1 || t == COLO_Q8_0);
    }
}

/* An x too large to stay in L2 while the weight tiles pass over it is
 * taken a span of groups at a time (gemm_q8_impl.h): the same bits as the
 * reference, the last span short, on both versions. */
static void test_x_in_spans(void **state)
{
    (void)state;
    colo_cpu_q8_isa was = colo_cpu_gemm_q8_isa();
    bool avx2 = colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_AVX2), vnni = colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_VNNI);
    assert_true(colo_cpu_gemm_q8_set_isa(was));
    if (!avx2)
        skip();
    const colo_dtype ts[] = {COLO_Q4_1, COLO_Q8_0, COLO_Q6_K};
    for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++) {
        /* 144 blocks a row: 180 KiB of packed x a group, spans of 2 groups of 16 rows */
        shape s = {.t = ts[ti], .m = 75, .n = 19, .k = 4608, .x_stride = 4608, .y_stride = 19, .r0 = 0, .r1 = 19,
                   .bias = true};
        check_shape(&s, vnni);
    }
}

/* COLO_CPU_GEMM_Q8 names the version; set_isa refuses what the CPU lacks
 * and makes gemm_q8 call the version it sets. */
static void test_choice(void **state)
{
    (void)state;
    colo_cpu_q8_isa was = colo_cpu_gemm_q8_isa();
    const char *env = getenv("COLO_CPU_GEMM_Q8");
    if (env && !strcmp(env, "off"))
        assert_int_equal(was, COLO_CPU_Q8_OFF);
    if (env && !strcmp(env, "avx2"))
        assert_true(was <= COLO_CPU_Q8_AVX2);
    assert_true(colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_OFF));
    assert_false(colo_cpu_gemm_q8_cpu());
    bool avx2 = colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_AVX2);
    assert_int_equal(colo_cpu_gemm_q8_isa(), avx2 ? COLO_CPU_Q8_AVX2 : COLO_CPU_Q8_OFF);
    if (colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_VNNI))
        assert_true(avx2); /* every CPU with AVX512-VNNI has AVX2 */
    /* the public entry points follow the setting, with the same bits */
    if (avx2) {
        const shape s = {.t = COLO_Q5_1, .m = 9, .n = 19, .k = 64, .x_stride = 64, .y_stride = 19, .r0 = 0, .r1 = 19};
        uint8_t *w = make_rows(s.t, s.n, s.k);
        float *x = make_x(s.m, s.k, s.k), *y0 = alloc64((size_t)s.m * s.n * 4), *y1 = alloc64((size_t)s.m * s.n * 4);
        colo_q8_xblk *xp = alloc64(colo_cpu_gemm_q8_x_bytes(s.m, s.k));
        void *scratch = alloc64(colo_cpu_gemm_q8_scratch_bytes(s.k));
        run_version(false, &s, w, x, NULL, xp, y0, scratch);
        for (int v = COLO_CPU_Q8_AVX2; v <= COLO_CPU_Q8_VNNI; v++) {
            if (!colo_cpu_gemm_q8_set_isa((colo_cpu_q8_isa)v))
                continue;
            memset(xp, 0, colo_cpu_gemm_q8_x_bytes(s.m, s.k));
            colo_cpu_gemm_q8_pack_x(x, s.k, s.m, s.k, 0, 1, xp);
            colo_cpu_gemm_q8(w, s.t, 0, s.n, s.k, xp, s.m, NULL, y1, s.n, scratch);
            assert_memory_equal(y0, y1, (size_t)s.m * s.n * 4);
        }
        free(w), free(x), free(y0), free(y1), free(xp), free(scratch);
    }
    assert_true(colo_cpu_gemm_q8_set_isa(was));
}

int main(void)
{
    rng = colo_test_rng_from(colo_test_seed("test_gemm_q8", 53));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx2_same_bits_as_vnni),
        cmocka_unit_test(test_x_in_spans),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
