/* Parity cases: every op of kernels/ops.h on one device against a float64
 * reference computed here, on fresh random inputs. Included by
 * test_ops_parity.c (CPU) and test_ops_parity_cuda.c (CUDA).
 *
 * Tolerances (|got - ref| <= bound):
 *   element-wise, norms, softmax, rope, pooling:  1e-5 * scale + 1e-6
 *   linear / gemm, F32 weights:  1e-5 * sum|w x|
 *   linear, F16/BF16/quantized weights:  1e-5 * sum|w x| against the
 *     dequantized weights (the weight rounding is part of the reference)
 *   linear with 8-bit-quantized activations (block-format weights,
 *     a device without exact_activations): plus ||w||_2 * sqrt(sum over
 *     blocks b of 32 (of 256 for the K-quants, whose activations take one
 *     scale per 256) of 32 (256) (amax_b / 254)^2), the largest error rounding x
 *     to 8 bits can cause (each x_j moves by at most amax_b / 254; Cauchy-
 *     Schwarz), times qerr_scale (1/128 where two digits of 8 bits are
 *     expected); on a device with exact_activations the 1e-5 bound holds
 *   attention: 1e-4 with F32 caches, 2e-3 with F16 caches (values rounded)
 *   gemm with F16 inputs: 1e-5 * sum|a b| (inputs exact in F16)
 * Every output buffer is poisoned with NaN before the op runs, so an element
 * the op does not write fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "tests/test_seed.h"

static uint64_t rng_state;

static void rng_seed_from_env(void)
{
    uint64_t seed = colo_test_seed("parity", 35);
    rng_state = seed * 2654435761u + 1;
}

static uint64_t rng_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float rng_uniform(void) { return (float)((rng_u64() >> 11) * (1.0 / 9007199254740992.0)); }
static float rng_normal(void)
{
    /* u in (0, 1] in double: a float u could round up to 1 and past it. */
    double u = ((double)(rng_u64() >> 11) + 1.0) / 9007199254740992.0, v = (double)(rng_u64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
static void fill_normal(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal() * scale;
}

/* ---- device memory helpers ---------------------------------------------------------- */

typedef struct {
    colo_device *dev;
    colo_stream *s;
    colo_stream *exact_s; /* a stream of a device opened with exact_activations, or NULL */
    colo_buffer *bufs[64];
    int n_bufs;
} ctx_t;

static void *dalloc(ctx_t *c, size_t bytes)
{
    char err[256];
    colo_buffer *b = colo_buffer_alloc(c->dev, bytes ? bytes : 4, err, sizeof err);
    assert_non_null(b);
    c->bufs[c->n_bufs++] = b;
    return colo_buffer_ptr(b);
}

static void *dput(ctx_t *c, const void *host, size_t bytes)
{
    void *d = dalloc(c, bytes);
    assert_int_equal(colo_memcpy_h2d(c->s, d, host, bytes), COLO_OK);
    return d;
}

/* A NaN-poisoned output buffer. */
static void *dpoison(ctx_t *c, size_t bytes)
{
    void *d = dalloc(c, bytes);
    assert_int_equal(colo_memset(c->s, d, 0xff, bytes), COLO_OK);
    return d;
}

static void dget(ctx_t *c, void *host, const void *dev, size_t bytes)
{
    assert_int_equal(colo_memcpy_d2h(c->s, host, dev, bytes), COLO_OK);
    assert_int_equal(colo_stream_sync(c->s), COLO_OK);
}

static void dfree_all(ctx_t *c)
{
    colo_stream_sync(c->s);
    for (int i = 0; i < c->n_bufs; i++)
        colo_buffer_free(c->bufs[i]);
    c->n_bufs = 0;
}

static void check_close(const char *what, const float *got, const double *ref, const double *bound, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= bound[i])) {
            fail_msg("%s: element %lld: got %.9g, reference %.9g, error %.3g > bound %.3g", what, (long long)i,
                     (double)got[i], ref[i], err, bound[i]);
        }
    }
}

static void check_close_uniform(const char *what, const float *got, const double *ref, int64_t n, double rel,
                                double abs_tol)
{
    double *b = malloc((size_t)n * sizeof *b);
    for (int64_t i = 0; i < n; i++)
        b[i] = rel * fabs(ref[i]) + abs_tol;
    check_close(what, got, ref, b, n);
    free(b);
}

/* ---- weights of every dtype ------------------------------------------------------------ */

/* Random weights (n, k) of type t; *deq gets the exact values they hold. */
static void *make_weights(colo_dtype t, int n, int k, float **deq)
{
    size_t rb = colo_dtype_row_bytes(t, k);
    unsigned char *w = malloc(rb * (size_t)n);
    *deq = malloc((size_t)n * k * sizeof(float));
    float *row = malloc((size_t)k * sizeof(float));
    for (int r = 0; r < n; r++) {
        unsigned char *wr = w + rb * (size_t)r;
        int d_off = -1, m_off = -1; /* offsets of the fp16 scales in a block */
        switch (t) {
        case COLO_Q6_K: d_off = 208; break;
        case COLO_Q3_K: d_off = 108; break;
        case COLO_Q2_K: d_off = 80, m_off = 82; break;
        case COLO_Q4_K: case COLO_Q5_K: d_off = 0, m_off = 2; break;
        default: break;
        }
        if (d_off >= 0) {
            /* Any bytes are a valid K-quant block once d (and dmin) are
             * small finite halves: every code and packed scale occurs. */
            size_t bb = colo_dtype_block_bytes(t);
            for (size_t i = 0; i < rb; i++)
                wr[i] = (unsigned char)rng_u64();
            for (int b = 0; b < k / 256; b++) {
                uint16_t d = colo_f32_to_fp16(0.001f + 0.004f * rng_uniform()), m = colo_f32_to_fp16(0.003f * rng_uniform());
                memcpy(wr + b * bb + d_off, &d, 2);
                if (m_off >= 0)
                    memcpy(wr + b * bb + m_off, &m, 2);
            }
        } else {
            fill_normal(row, k, 0.5f);
            assert_int_equal(colo_quantize_row(t, row, wr, k), COLO_OK);
        }
        colo_dequantize_row(t, wr, *deq + (size_t)r * k, k);
    }
    free(row);
    return w;
}

/* blk: elements per activation scale (32; 256 for the K-quants). */
/* The share of qerr_bound an int8 product may reach (test_ops_parity.c
 * lowers it for gemm_q8's two digits). */
static double qerr_scale = 1.0;

static double qerr_bound(const float *x, int k, int blk)
{
    double s = 0;
    for (int b = 0; b < k / blk; b++) {
        double amax = 0;
        for (int j = 0; j < blk; j++)
            amax = fabs(x[b * blk + j]) > amax ? fabs(x[b * blk + j]) : amax;
        s += blk * (amax / 254) * (amax / 254);
    }
    return sqrt(s);
}

/* linear on stream s; int8: the op may round x to 8-bit blocks (quantized
 * weights on a device without exact_activations). */
static void case_linear(ctx_t *c, colo_stream *s, bool int8, colo_dtype t, int m, int n, int k, bool bias)
{
    float *wd;
    void *w = make_weights(t, n, k, &wd);
    float *x = malloc((size_t)m * k * sizeof(float));
    float *b = malloc((size_t)n * sizeof(float));
    fill_normal(x, (int64_t)m * k, 1.0f);
    fill_normal(b, n, 1.0f);
    int xs = k + 3, ys = n + 5; /* strided rows */
    float *xpad = calloc((size_t)m * xs, sizeof(float));
    for (int i = 0; i < m; i++)
        memcpy(xpad + (size_t)i * xs, x + (size_t)i * k, (size_t)k * sizeof(float));
    void *dw = dput(c, w, colo_dtype_row_bytes(t, k) * (size_t)n);
    float *dx = dput(c, xpad, (size_t)m * xs * sizeof(float));
    float *db = bias ? dput(c, b, (size_t)n * sizeof(float)) : NULL;
    float *dy = dpoison(c, (size_t)m * ys * sizeof(float));
    assert_int_equal(colo_stream_sync(c->s), COLO_OK);
    assert_int_equal(colo_op_linear(s, dw, t, db, dx, xs, dy, ys, m, n, k), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    float *y = malloc((size_t)m * ys * sizeof(float));
    dget(c, y, dy, (size_t)m * ys * sizeof(float));
    int8 = int8 && t != COLO_F32 && t != COLO_F16 && t != COLO_BF16;
    double *ref = malloc((size_t)m * n * sizeof(double)), *bound = malloc((size_t)m * n * sizeof(double));
    float *got = malloc((size_t)m * n * sizeof(float));
    for (int i = 0; i < m; i++) {
        double qe = int8 ? qerr_bound(x + (size_t)i * k, k, colo_dtype_block_elems(t) == 256 ? 256 : 32) : 0;
        for (int r = 0; r < n; r++) {
            double acc = 0, mag = 0, wn = 0;
            for (int j = 0; j < k; j++) {
                double wv = wd[(size_t)r * k + j], xv = x[(size_t)i * k + j];
                acc += wv * xv;
                mag += fabs(wv * xv);
                wn += wv * wv;
            }
            if (bias)
                acc += b[r];
            ref[(size_t)i * n + r] = acc;
            bound[(size_t)i * n + r] = 1e-5 * (mag + (bias ? fabs(b[r]) : 0)) + sqrt(wn) * qe * qerr_scale * 1.001 + 1e-6;
            got[(size_t)i * n + r] = y[(size_t)i * ys + r];
        }
    }
    char what[96];
    snprintf(what, sizeof what, "linear %s m=%d n=%d k=%d%s%s", colo_dtype_name(t), m, n, k, bias ? " +bias" : "",
             int8 ? "" : " (exact activations)");
    check_close(what, got, ref, bound, (int64_t)m * n);
    free(w), free(wd), free(x), free(b), free(xpad), free(y), free(ref), free(bound), free(got);
    dfree_all(c);
}

static void test_linear_all_types(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_F32,  COLO_F16,  COLO_BF16, COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1,
                                COLO_Q8_0, COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    /* Row counts around the kernels' groups of 4 rows and their path limits. */
    const int shapes[][3] = {{1, 1, 256},  {1, 67, 512},  {2, 9, 768},   {3, 5, 256},  {5, 33, 768},
                             {7, 130, 256}, {15, 19, 256}, {16, 70, 512}, {17, 67, 512}, {33, 129, 256}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            case_linear(c, c->s, true, types[t], shapes[s][0], shapes[s][1], shapes[s][2], s % 2 == 1);
            if (c->exact_s)
                case_linear(c, c->exact_s, false, types[t], shapes[s][0], shapes[s][1], shapes[s][2], s % 2 == 0);
        }
}

static void test_gemm(void **state)
{
    ctx_t *c = *state;
    for (int type = 0; type < 2; type++) {
        colo_dtype t = type ? COLO_F16 : COLO_F32;
        size_t es = type ? 2 : 4;
        for (int tr = 0; tr < 4; tr++) {
            bool ta = tr & 1, tb = tr & 2;
            int m = 5 + (int)(rng_u64() % 20), n = 3 + (int)(rng_u64() % 20), k = 4 + (int)(rng_u64() % 40),
                batch = 3;
            int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            int lda = ac + 2, ldb = bc + 1, ldc = n + 3;
            int64_t sa = (int64_t)ar * lda + 7, sb = (int64_t)br * ldb + 5, sc = (int64_t)m * ldc + 2;
            float *a = malloc((size_t)(sa * batch) * 4), *b = malloc((size_t)(sb * batch) * 4);
            fill_normal(a, sa * batch, 1), fill_normal(b, sb * batch, 1);
            if (type) { /* values exact in F16 */
                for (int64_t i = 0; i < sa * batch; i++)
                    a[i] = colo_fp16_to_f32(colo_f32_to_fp16(a[i]));
                for (int64_t i = 0; i < sb * batch; i++)
                    b[i] = colo_fp16_to_f32(colo_f32_to_fp16(b[i]));
            }
            void *ha = malloc((size_t)(sa * batch) * es), *hb = malloc((size_t)(sb * batch) * es);
            colo_quantize_row(t, a, ha, sa * batch);
            colo_quantize_row(t, b, hb, sb * batch);
            float *c0 = malloc((size_t)(sc * batch) * 4);
            fill_normal(c0, sc * batch, 1);
            float alpha = 0.5f + rng_uniform(), beta = rng_uniform();
            void *da = dput(c, ha, (size_t)(sa * batch) * es), *db = dput(c, hb, (size_t)(sb * batch) * es);
            float *dc = dput(c, c0, (size_t)(sc * batch) * 4);
            assert_int_equal(colo_op_gemm(c->s, ta, tb, m, n, k, alpha, da, lda, sa, db, ldb, sb, t, beta, dc, ldc,
                                          sc, batch),
                             COLO_OK);
            float *cg = malloc((size_t)(sc * batch) * 4);
            dget(c, cg, dc, (size_t)(sc * batch) * 4);
            int64_t cnt = (int64_t)batch * m * n;
            double *ref = malloc((size_t)cnt * 8), *bound = malloc((size_t)cnt * 8);
            float *got = malloc((size_t)cnt * 4);
            int64_t idx = 0;
            for (int bi = 0; bi < batch; bi++)
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++, idx++) {
                        double acc = 0, mag = 0;
                        for (int l = 0; l < k; l++) {
                            double av = ta ? a[bi * sa + (int64_t)l * lda + i] : a[bi * sa + (int64_t)i * lda + l];
                            double bv = tb ? b[bi * sb + (int64_t)j * ldb + l] : b[bi * sb + (int64_t)l * ldb + j];
                            acc += av * bv;
                            mag += fabs(av * bv);
                        }
                        double cv = c0[bi * sc + (int64_t)i * ldc + j];
                        ref[idx] = alpha * acc + beta * cv;
                        bound[idx] = 1e-5 * (alpha * mag + fabs(beta * cv)) + 1e-6;
                        got[idx] = cg[bi * sc + (int64_t)i * ldc + j];
                    }
            char what[64];
            snprintf(what, sizeof what, "gemm %s ta=%d tb=%d", colo_dtype_name(t), ta, tb);
            check_close(what, got, ref, bound, cnt);
            free(a), free(b), free(ha), free(hb), free(c0), free(cg), free(ref), free(bound), free(got);
            dfree_all(c);
        }
    }
}

static void test_dequantize_and_get_rows(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_F32,  COLO_F16,  COLO_BF16, COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1,
                                COLO_Q8_0, COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        int rows = 9, k = 512;
        float *wd;
        void *w = make_weights(types[t], rows, k, &wd);
        size_t bytes = colo_dtype_row_bytes(types[t], k) * rows;
        void *dw = dput(c, w, bytes);
        float *d32 = dpoison(c, (size_t)rows * k * 4);
        uint16_t *d16 = dpoison(c, (size_t)rows * k * 2);
        assert_int_equal(colo_op_dequantize(c->s, dw, types[t], d32, COLO_F32, (int64_t)rows * k), COLO_OK);
        assert_int_equal(colo_op_dequantize(c->s, dw, types[t], d16, COLO_F16, (int64_t)rows * k), COLO_OK);
        int32_t ids[5] = {8, 0, 3, 3, 7};
        int32_t *dids = dput(c, ids, sizeof ids);
        float *dg = dpoison(c, 5 * (size_t)k * 4);
        assert_int_equal(colo_op_get_rows(c->s, dw, types[t], rows, k, dids, 5, dg), COLO_OK);
        float *h32 = malloc((size_t)rows * k * 4), *g = malloc(5 * (size_t)k * 4);
        uint16_t *h16 = malloc((size_t)rows * k * 2);
        dget(c, h32, d32, (size_t)rows * k * 4);
        dget(c, h16, d16, (size_t)rows * k * 2);
        dget(c, g, dg, 5 * (size_t)k * 4);
        for (int64_t i = 0; i < (int64_t)rows * k; i++) {
            if (h32[i] != wd[i])
                fail_msg("dequantize %s -> f32: element %lld: %g != %g", colo_dtype_name(types[t]), (long long)i,
                         h32[i], wd[i]);
            if (h16[i] != colo_f32_to_fp16(wd[i]))
                fail_msg("dequantize %s -> f16: element %lld", colo_dtype_name(types[t]), (long long)i);
        }
        for (int r = 0; r < 5; r++)
            if (memcmp(g + (size_t)r * k, wd + (size_t)ids[r] * k, (size_t)k * 4))
                fail_msg("get_rows %s: row %d", colo_dtype_name(types[t]), r);
        /* An id out of range is reported by the stream. */
        int32_t bad[2] = {1, rows};
        int32_t *dbad = dput(c, bad, sizeof bad);
        assert_int_equal(colo_stream_sync(c->s), COLO_OK);
        assert_int_equal(colo_op_get_rows(c->s, dw, types[t], rows, k, dbad, 2, dg), COLO_OK);
        assert_int_equal(colo_stream_sync(c->s), COLO_EINVAL);
        free(w), free(wd), free(h32), free(h16), free(g);
        dfree_all(c);
    }
}

typedef enum { RW_RMS, RW_LAYER, RW_SOFTMAX, RW_L2 } rw_kind;

static void case_rows(ctx_t *c, rw_kind kind, int rows, int n)
{
    float *x = malloc((size_t)rows * n * 4), *w = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    fill_normal(x, (int64_t)rows * n, 2.0f), fill_normal(w, n, 1.0f), fill_normal(b, n, 1.0f);
    float eps = 1e-5f, scale = 0.7f;
    float *dx = dput(c, x, (size_t)rows * n * 4), *dw = dput(c, w, (size_t)n * 4), *db = dput(c, b, (size_t)n * 4);
    float *dy = kind == RW_SOFTMAX || kind == RW_L2 ? dx : dpoison(c, (size_t)rows * n * 4);
    colo_status st = kind == RW_RMS     ? colo_op_rmsnorm(c->s, dx, dw, dy, rows, n, eps)
                     : kind == RW_LAYER ? colo_op_layernorm(c->s, dx, dw, db, dy, rows, n, eps)
                     : kind == RW_SOFTMAX ? colo_op_softmax(c->s, dx, rows, n, scale)
                                          : colo_op_l2norm(c->s, dx, rows, n);
    assert_int_equal(st, COLO_OK);
    float *y = malloc((size_t)rows * n * 4);
    dget(c, y, dy, (size_t)rows * n * 4);
    double *ref = malloc((size_t)rows * n * 8);
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        double *o = ref + (size_t)r * n, s1 = 0, s2 = 0, mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            s1 += xr[j];
            s2 += (double)xr[j] * xr[j];
            mx = scale * xr[j] > mx ? scale * xr[j] : mx;
        }
        double mean = s1 / n, var = s2 / n - mean * mean, se = 0;
        for (int j = 0; j < n; j++)
            se += exp(scale * xr[j] - mx);
        for (int j = 0; j < n; j++) {
            switch (kind) {
            case RW_RMS: o[j] = xr[j] / sqrt(s2 / n + eps) * w[j]; break;
            case RW_LAYER: o[j] = (xr[j] - mean) / sqrt(var + eps) * w[j] + b[j]; break;
            case RW_SOFTMAX: o[j] = exp(scale * xr[j] - mx) / se; break;
            case RW_L2: o[j] = xr[j] / sqrt(s2); break;
            }
        }
    }
    static const char *names[] = {"rmsnorm", "layernorm", "softmax", "l2norm"};
    check_close_uniform(names[kind], y, ref, (int64_t)rows * n, 1e-5, 1e-6);
    free(x), free(w), free(b), free(y), free(ref);
    dfree_all(c);
}

static void test_row_ops(void **state)
{
    ctx_t *c = *state;
    const int shapes[][2] = {{1, 1}, {3, 7}, {64, 576}, {5, 1000}};
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < 4; s++)
            case_rows(c, (rw_kind)k, shapes[s][0], shapes[s][1]);
}

static void test_elementwise(void **state)
{
    ctx_t *c = *state;
    static const char *names[] = {"swiglu", "silu", "gelu", "add", "geglu", "scale"};
    for (int op = 0; op < 6; op++) {
        int64_t n = 1 + (int64_t)(rng_u64() % 5000);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        fill_normal(a, n, 3.0f), fill_normal(b, n, 3.0f);
        float alpha = 0.5f + rng_uniform() * 30.0f;
        float *da = dput(c, a, (size_t)n * 4), *db = dput(c, b, (size_t)n * 4), *dy = dpoison(c, (size_t)n * 4);
        colo_status st = op == 0   ? colo_op_swiglu(c->s, da, db, dy, n)
                         : op == 1 ? colo_op_silu(c->s, da, dy, n)
                         : op == 2 ? colo_op_gelu(c->s, da, dy, n)
                         : op == 3 ? colo_op_add(c->s, da, db, dy, n)
                         : op == 4 ? colo_op_geglu(c->s, da, db, dy, n)
                                   : colo_op_scale(c->s, dy = da, alpha, n);
        assert_int_equal(st, COLO_OK);
        dget(c, y, dy, (size_t)n * 4);
        double *ref = malloc((size_t)n * 8);
        double scale = 1.0;
        for (int64_t i = 0; i < n; i++) {
            double x = a[i], silu = x / (1 + exp(-x));
            double gelu_tanh = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
            ref[i] = op == 0   ? silu * b[i]
                     : op == 1 ? silu
                     : op == 2 ? 0.5 * x * (1 + erf(x / sqrt(2.0)))
                     : op == 3 ? x + b[i]
                     : op == 4 ? gelu_tanh * b[i]
                               : x * alpha;
        }
        if (op == 5)
            scale = alpha;
        check_close_uniform(names[op], y, ref, n, 1e-5 * scale, 1e-6);
        free(a), free(b), free(y), free(ref);
        dfree_all(c);
    }
}

/* Variants: GGML's normal and neox pairings, partial rotation, linear
 * scaling, per-frequency factors (Llama 3's rope_freqs, Phi-3's long and
 * short factors) and an attention factor. */
static void test_rope(void **state)
{
    ctx_t *c = *state;
    int rows = 7, heads = 3, hd = 64, stride = heads * hd + 10;
    for (int variant = 0; variant < 5; variant++) {
        int n_rot = variant == 1 || variant == 4 ? 32 : hd;
        bool neox = variant >= 2;
        float base = variant == 1 ? 100000.0f : 10000.0f;
        float freq_scale = variant == 3 ? 0.125f : 1.0f, attn_factor = variant == 4 ? 1.19f : 1.0f;
        float factors[32];
        for (int i = 0; i < n_rot / 2; i++)
            factors[i] = 1.0f + rng_uniform() * 30.0f;
        bool use_factors = variant == 2 || variant == 4;
        float *x = malloc((size_t)rows * stride * 4);
        fill_normal(x, (int64_t)rows * stride, 1.0f);
        int32_t pos[7] = {0, 1, 5, 100, 2047, 3, 8191};
        float *dx = dput(c, x, (size_t)rows * stride * 4);
        int32_t *dp = dput(c, pos, sizeof pos);
        colo_rope_desc rd = {.n_heads = heads, .head_dim = hd, .n_rot = n_rot, .neox = neox, .freq_base = base,
                             .freq_scale = freq_scale, .attn_factor = attn_factor,
                             .freq_factors = use_factors ? dput(c, factors, sizeof factors) : NULL};
        assert_int_equal(colo_op_rope(c->s, dx, stride, dp, rows, &rd), COLO_OK);
        float *y = malloc((size_t)rows * stride * 4);
        dget(c, y, dx, (size_t)rows * stride * 4);
        double *ref = malloc((size_t)rows * stride * 8);
        for (size_t i = 0; i < (size_t)rows * stride; i++) /* what does not rotate stays */
            ref[i] = x[i];
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < heads; h++)
                for (int j = 0; j < n_rot / 2; j++) {
                    size_t row = (size_t)r * stride + (size_t)h * hd;
                    size_t i0 = row + (neox ? j : 2 * j), i1 = row + (neox ? j + n_rot / 2 : 2 * j + 1);
                    double a = x[i0], b = x[i1];
                    double th = pos[r] * (double)freq_scale * pow(base, -(double)(2 * j) / n_rot);
                    if (use_factors)
                        th /= factors[j];
                    ref[i0] = (a * cos(th) - b * sin(th)) * attn_factor;
                    ref[i1] = (a * sin(th) + b * cos(th)) * attn_factor;
                }
        check_close_uniform("rope", y, ref, (int64_t)rows * stride, 1e-5, 2e-5);
        free(x), free(y), free(ref);
        dfree_all(c);
    }
}

/* kv_store into a quantized cache: each row comes back, block by block,
 * within the format's rounding of the original (Q8_0: half a step of
 * max|x| / 127, Q4_0: one step of max|x| / 8 for the clamped extreme,
 * plus the fp16 rounding of the scale), all-zero blocks as zeros, and the
 * slots not written keep their bytes. k and v come with row strides, as
 * the model's fused QKV output gives them. */
static void case_kv_store_quantized(ctx_t *c, colo_dtype t, int kv_dim)
{
    enum { N_TOK = 7, N_SLOTS = 16, STRIDE_PAD = 32 };
    int stride = kv_dim + STRIDE_PAD;
    size_t rb = colo_dtype_row_bytes(t, kv_dim);
    float *k = malloc((size_t)N_TOK * stride * 4), *v = malloc((size_t)N_TOK * stride * 4);
    float *back = malloc((size_t)kv_dim * 4);
    unsigned char *kc = malloc(rb * N_SLOTS), *vc = malloc(rb * N_SLOTS);
    assert_non_null(k), assert_non_null(v), assert_non_null(back), assert_non_null(kc), assert_non_null(vc);
    fill_normal(k, (int64_t)N_TOK * stride, 1), fill_normal(v, (int64_t)N_TOK * stride, 3);
    for (int i = 0; i < 32; i++)
        k[2 * stride + i] = 0; /* an all-zero block */
    for (int i = 0; i < kv_dim; i++)
        v[5 * stride + i] *= 1000; /* large values: the scale is per block */
    int32_t slot[N_TOK] = {3, 0, 15, 8, 9, 1, 12};
    void *dkc = dpoison(c, rb * N_SLOTS), *dvc = dpoison(c, rb * N_SLOTS);
    assert_int_equal(colo_op_kv_store(c->s, dput(c, k, (size_t)N_TOK * stride * 4), stride,
                                      dput(c, v, (size_t)N_TOK * stride * 4), stride, dkc, dvc, t,
                                      dput(c, slot, sizeof slot), N_TOK, kv_dim),
                     COLO_OK);
    dget(c, kc, dkc, rb * N_SLOTS), dget(c, vc, dvc, rb * N_SLOTS);
    bool written[N_SLOTS] = {false};
    double step_frac = t == COLO_Q8_0 ? 0.5 / 127 : 1.0 / 8;
    for (int r = 0; r < N_TOK; r++) {
        written[slot[r]] = true;
        for (int which = 0; which < 2; which++) {
            const float *x = (which ? v : k) + (size_t)r * stride;
            colo_dequantize_row(t, (which ? vc : kc) + rb * slot[r], back, kv_dim);
            for (int b = 0; b < kv_dim / 32; b++) {
                double amax = 0;
                for (int i = 0; i < 32; i++)
                    amax = fmax(amax, fabs(x[32 * b + i]));
                double bound = amax * (step_frac + 2.0 / 1024) + 1e-30;
                for (int i = 32 * b; i < 32 * b + 32; i++)
                    if (!(fabs(back[i] - x[i]) <= bound))
                        fail_msg("kv_store %s: token %d %s element %d: %.6g back as %.6g (bound %.3g)",
                                 colo_dtype_name(t), r, which ? "V" : "K", i, x[i], back[i], bound);
            }
        }
    }
    for (int sl = 0; sl < N_SLOTS; sl++)
        for (size_t i = 0; !written[sl] && i < rb; i++)
            if (kc[rb * sl + i] != 0xff || vc[rb * sl + i] != 0xff)
                fail_msg("kv_store %s: slot %d was not written but changed", colo_dtype_name(t), sl);
    free(k), free(v), free(back), free(kc), free(vc);
    dfree_all(c);
}

static void test_kv_store_quantized(void **state)
{
    case_kv_store_quantized(*state, COLO_Q8_0, 64);
    case_kv_store_quantized(*state, COLO_Q8_0, 3 * 64); /* SmolLM2's row */
    case_kv_store_quantized(*state, COLO_Q4_0, 96);
}

/* Paged GQA attention: sequences of different lengths whose blocks are
 * scattered through the cache; K/V written with kv_store. Queries: every
 * token of every sequence (prefill), or with last_only the last token of
 * each (a decode step). */
typedef struct {
    int n_head, n_kv, hd, bs, lens[3];
    bool last_only;
} attn_shape;

/* ref (n_query_tokens, n_head, hd) = attention in float64 over K and V rows
 * k, v (total, kv_dim) of the shape's sequences, laid end to end. */
static void attention_ref(const attn_shape *sh, int window, float scale, const float *q, const float *k,
                          const float *v, double *ref)
{
    enum { NSEQ = 3 };
    int n_head = sh->n_head, n_kv = sh->n_kv, hd = sh->hd, kv_dim = n_kv * hd;
    int max_len = 0;
    for (int s = 0; s < NSEQ; s++)
        max_len = sh->lens[s] > max_len ? sh->lens[s] : max_len;
    double *sc = malloc((size_t)max_len * 8);
    assert_non_null(sc);
    int base = 0, t = 0;
    for (int s = 0; s < NSEQ; base += sh->lens[s], s++)
        for (int p = sh->last_only ? sh->lens[s] - 1 : 0; p < sh->lens[s]; p++, t++)
            for (int h = 0; h < n_head; h++) {
                int kvh = h / (n_head / n_kv);
                double mx = -INFINITY, se = 0;
                int j0 = window && p >= window ? p - window + 1 : 0;
                for (int j = j0; j <= p; j++) {
                    double dot = 0;
                    for (int e = 0; e < hd; e++)
                        dot += (double)q[((size_t)t * n_head + h) * hd + e] * k[(size_t)(base + j) * kv_dim + kvh * hd + e];
                    sc[j] = dot * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = j0; j <= p; j++)
                    se += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = j0; j <= p; j++)
                        acc += sc[j] / se * v[(size_t)(base + j) * kv_dim + kvh * hd + e];
                    ref[((size_t)t * n_head + h) * hd + e] = acc;
                }
            }
    free(sc);
}

/* The rows x (n, kv_dim) as a cache of type t holds them: quantized per
 * 32-element block and expanded again (F16: rounded). */
static void kv_round_trip(colo_dtype t, float *x, int64_t n, int kv_dim)
{
    if (t == COLO_F32)
        return;
    void *row = malloc(colo_dtype_row_bytes(t, kv_dim));
    assert_non_null(row);
    for (int64_t r = 0; r < n; r++) {
        assert_int_equal(colo_quantize_row(t, x + r * kv_dim, row, kv_dim), COLO_OK);
        colo_dequantize_row(t, row, x + r * kv_dim, kv_dim);
    }
    free(row);
}

static void case_attention_shape(ctx_t *c, colo_dtype kv_type, int window, const attn_shape *sh)
{
    enum { NSEQ = 3 };
    int n_head = sh->n_head, n_kv = sh->n_kv, hd = sh->hd, kv_dim = n_kv * hd, BS = sh->bs;
    const int *lens = sh->lens;
    int MAXB = 0, max_len = 0;
    for (int s = 0; s < NSEQ; s++)
        max_len = lens[s] > max_len ? lens[s] : max_len;
    MAXB = (max_len + BS - 1) / BS + 1;
    int NBLK = NSEQ * MAXB;
    int32_t *table = malloc((size_t)NBLK * 4);
    int *perm = malloc((size_t)NBLK * sizeof(int));
    for (int i = 0; i < NBLK; i++)
        perm[i] = i;
    for (int i = NBLK - 1; i > 0; i--) {
        int j = (int)(rng_u64() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < NSEQ * MAXB; i++)
        table[i] = perm[i];
    int total = 0;
    for (int s = 0; s < NSEQ; s++)
        total += lens[s];
    float *k = malloc((size_t)total * kv_dim * 4), *v = malloc((size_t)total * kv_dim * 4);
    fill_normal(k, (int64_t)total * kv_dim, 1), fill_normal(v, (int64_t)total * kv_dim, 1);
    /* k0, v0: the values before the cache rounds them; k, v: what it holds */
    float *k0 = malloc((size_t)total * kv_dim * 4), *v0 = malloc((size_t)total * kv_dim * 4);
    assert_non_null(k0), assert_non_null(v0);
    memcpy(k0, k, (size_t)total * kv_dim * 4), memcpy(v0, v, (size_t)total * kv_dim * 4);
    kv_round_trip(kv_type, k, total, kv_dim), kv_round_trip(kv_type, v, total, kv_dim);
    int32_t *slot = malloc((size_t)total * 4), *tseq = malloc((size_t)total * 4), *tpos = malloc((size_t)total * 4);
    for (int s = 0, t = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++, t++) {
            slot[t] = table[s * MAXB + p / BS] * BS + p % BS;
            tseq[t] = s, tpos[t] = p;
        }
    size_t cache_bytes = (size_t)NBLK * BS * colo_dtype_row_bytes(kv_type, kv_dim);
    void *kc = dpoison(c, cache_bytes), *vc = dpoison(c, cache_bytes);
    float *dk = dput(c, k0, (size_t)total * kv_dim * 4), *dv = dput(c, v0, (size_t)total * kv_dim * 4);
    int32_t *dslot = dput(c, slot, (size_t)total * 4);
    assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, kv_type, dslot, total, kv_dim), COLO_OK);
    /* Queries of token rows qt (nq of them) at the positions of tpos. */
    int nq = sh->last_only ? NSEQ : total;
    int32_t *qseq = malloc((size_t)nq * 4), *qpos = malloc((size_t)nq * 4);
    for (int s = 0, i = 0, base = 0; s < NSEQ; base += lens[s], s++)
        for (int p = sh->last_only ? lens[s] - 1 : 0; p < lens[s]; p++, i++)
            qseq[i] = tseq[base + p], qpos[i] = tpos[base + p];
    float *q = malloc((size_t)nq * n_head * hd * 4);
    fill_normal(q, (int64_t)nq * n_head * hd, 1);
    float *dq = dput(c, q, (size_t)nq * n_head * hd * 4), *dout = dpoison(c, (size_t)nq * n_head * hd * 4);
    colo_attn_desc d = {.n_tokens = nq, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS,
                        .max_blocks = MAXB, .max_pos = max_len - 1, .scale = 1.0f / sqrtf((float)hd),
                        .kv_type = kv_type, .tok_seq = dput(c, qseq, (size_t)nq * 4),
                        .tok_pos = dput(c, qpos, (size_t)nq * 4), .block_table = dput(c, table, (size_t)NBLK * 4),
                        .window = window};
    colo_stream_set_decode(c->s, sh->last_only); /* one token per sequence: keys may be split */
    assert_int_equal(colo_op_attention(c->s, &d, dq, kc, vc, dout), COLO_OK);
    colo_stream_set_decode(c->s, false);
    float *out = malloc((size_t)nq * n_head * hd * 4);
    dget(c, out, dout, (size_t)nq * n_head * hd * 4);
    double *ref = malloc((size_t)nq * n_head * hd * 8);
    assert_non_null(ref);
    /* The kernel against the values the cache holds: only the order of
     * F32 sums differs. */
    attention_ref(sh, window, d.scale, q, k, v, ref);
    char what[64];
    snprintf(what, sizeof what, "attention %s cache", colo_dtype_name(kv_type));
    check_close_uniform(what, out, ref, (int64_t)nq * n_head * hd, 1e-4, kv_type == COLO_F32 ? 1e-4 : 2e-3);
    if (kv_type == COLO_Q8_0 || kv_type == COLO_Q4_0) {
        /* and against the values before quantization. Q8_0 moves an element
         * by at most max|x| / 254 of its block, Q4_0 by max|x| / 8 (the
         * opposite extreme clamps): with unit-variance K and V (max|x| of 32
         * rarely past 4.5) an output moves by at most 0.05 and 0.75. Seen:
         * up to 0.019 and 0.25. */
        attention_ref(sh, window, d.scale, q, k0, v0, ref);
        snprintf(what, sizeof what, "attention %s cache vs unquantized K, V", colo_dtype_name(kv_type));
        check_close_uniform(what, out, ref, (int64_t)nq * n_head * hd, 0, kv_type == COLO_Q8_0 ? 0.05 : 0.75);
    }
    free(k), free(v), free(k0), free(v0), free(slot), free(tseq), free(tpos), free(q), free(out), free(ref);
    free(qseq), free(qpos), free(table), free(perm);
    dfree_all(c);
}

static void case_attention(ctx_t *c, colo_dtype kv_type, int window)
{
    attn_shape sh = {.n_head = 6, .n_kv = 2, .hd = 16, .bs = 4, .lens = {1, 13, 29}};
    case_attention_shape(c, kv_type, window, &sh);
}

static void test_attention(void **state)
{
    case_attention(*state, COLO_F32, 0);
    case_attention(*state, COLO_F16, 0);
    case_attention(*state, COLO_F32, 5); /* sliding window (Gemma 3's local layers) */
    case_attention(*state, COLO_F16, 1);
    /* Decode steps over long sequences, whose keys are split into segments
     * merged afterwards (SmolLM2's and Gemma 3's head shapes), and a
     * prefill whose tiles of keys cross blocks. */
    attn_shape smol = {.n_head = 9, .n_kv = 3, .hd = 64, .bs = 16, .lens = {1500, 700, 37}, .last_only = true};
    case_attention_shape(*state, COLO_F16, 0, &smol);
    case_attention_shape(*state, COLO_F32, 300, &smol);
    attn_shape gemma = {.n_head = 4, .n_kv = 1, .hd = 256, .bs = 16, .lens = {900, 2, 513}, .last_only = true};
    case_attention_shape(*state, COLO_F16, 512, &gemma);
    attn_shape prefill = {.n_head = 8, .n_kv = 2, .hd = 32, .bs = 16, .lens = {100, 45, 71}};
    case_attention_shape(*state, COLO_F16, 0, &prefill);
    /* One KV head for 72 query heads (multi-query), head_dim 8. */
    attn_shape mqa = {.n_head = 72, .n_kv = 1, .hd = 8, .bs = 4, .lens = {9, 150, 3}, .last_only = true};
    case_attention_shape(*state, COLO_F16, 0, &mqa);
    case_attention_shape(*state, COLO_F32, 0, &mqa);
    /* Quantized caches (kv_cache.dtype q8_0, q4_0): head sizes of 32 and
     * up, prefill and split decode, windows. */
    attn_shape q32 = {.n_head = 6, .n_kv = 2, .hd = 32, .bs = 4, .lens = {1, 13, 29}};
    case_attention_shape(*state, COLO_Q8_0, 0, &q32);
    case_attention_shape(*state, COLO_Q8_0, 5, &q32);
    case_attention_shape(*state, COLO_Q4_0, 0, &q32);
    case_attention_shape(*state, COLO_Q8_0, 0, &smol);
    case_attention_shape(*state, COLO_Q8_0, 300, &smol);
    case_attention_shape(*state, COLO_Q4_0, 0, &smol);
    case_attention_shape(*state, COLO_Q8_0, 512, &gemma);
    case_attention_shape(*state, COLO_Q8_0, 0, &prefill);
    attn_shape odd_group = {.n_head = 7, .n_kv = 1, .hd = 96, .bs = 16, .lens = {70, 5, 130}};
    case_attention_shape(*state, COLO_Q8_0, 0, &odd_group);
}

static void test_encoder_ops(void **state)
{
    ctx_t *c = *state;
    int batch = 3, seq = 9, n_head = 4, hd = 8, dm = n_head * hd, qs = 3 * dm;
    int32_t len[3] = {9, 1, 5};
    float *qkv = malloc((size_t)batch * seq * qs * 4);
    fill_normal(qkv, (int64_t)batch * seq * qs, 1);
    float *dqkv = dput(c, qkv, (size_t)batch * seq * qs * 4);
    int32_t *dlen = dput(c, len, sizeof len);
    float *dout = dpoison(c, (size_t)batch * seq * dm * 4), *dpool = dpoison(c, (size_t)batch * dm * 4);
    float scale = 1.0f / sqrtf((float)hd);
    assert_int_equal(colo_op_attention_bidir(c->s, dqkv, qs, dqkv + dm, qs, dqkv + 2 * dm, qs, dout, dlen, batch, seq,
                                             n_head, hd, scale),
                     COLO_OK);
    assert_int_equal(colo_op_mean_pool(c->s, dout, dlen, dpool, batch, seq, dm), COLO_OK);
    float *out = malloc((size_t)batch * seq * dm * 4), *pool = malloc((size_t)batch * dm * 4);
    dget(c, out, dout, (size_t)batch * seq * dm * 4);
    dget(c, pool, dpool, (size_t)batch * dm * 4);
    double *ref = calloc((size_t)batch * seq * dm, 8), *pref = calloc((size_t)batch * dm, 8);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < len[b]; i++)
            for (int h = 0; h < n_head; h++) {
                const float *q = qkv + ((size_t)b * seq + i) * qs + h * hd;
                double sc[16], mx = -INFINITY, se = 0;
                for (int j = 0; j < len[b]; j++) {
                    const float *kk = qkv + ((size_t)b * seq + j) * qs + dm + h * hd;
                    double dot = 0;
                    for (int e = 0; e < hd; e++)
                        dot += (double)q[e] * kk[e];
                    sc[j] = dot * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < len[b]; j++)
                    se += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = 0; j < len[b]; j++)
                        acc += sc[j] / se * qkv[((size_t)b * seq + j) * qs + 2 * dm + h * hd + e];
                    ref[((size_t)b * seq + i) * dm + h * hd + e] = acc;
                    pref[(size_t)b * dm + h * hd + e] += acc / len[b];
                }
            }
    check_close_uniform("attention_bidir", out, ref, (int64_t)batch * seq * dm, 1e-5, 1e-5);
    check_close_uniform("mean_pool", pool, pref, (int64_t)batch * dm, 1e-5, 1e-5);
    free(qkv), free(out), free(pool), free(ref), free(pref);
    dfree_all(c);
}

static void test_dispatch_validation(void **state)
{
    ctx_t *c = *state;
    /* The dispatcher finds the op table by the device's backend kind. */
    colo_device *dev = colo_stream_device(c->s);
    assert_ptr_equal(colo_device_ops(dev),
                     colo_device_kind(dev) == COLO_BACKEND_CPU ? &colo_cpu_ops : &colo_cuda_ops);
    assert_null(colo_device_ops(NULL));
    float *buf = dalloc(c, 4096);
    assert_int_equal(colo_op_linear(c->s, buf, COLO_Q4_1, NULL, buf, 0, buf, 0, 1, 1, 33), COLO_EINVAL);
    assert_int_equal(colo_op_linear(c->s, buf, (colo_dtype)99, NULL, buf, 0, buf, 0, 1, 1, 32), COLO_EUNSUPPORTED);
    assert_int_equal(colo_op_linear(c->s, buf, COLO_F32, NULL, buf, 0, buf, 0, 0, 1, 32), COLO_EINVAL);
    assert_int_equal(colo_op_rmsnorm(c->s, NULL, buf, buf, 1, 1, 1e-5f), COLO_EINVAL);
    colo_rope_desc odd = {.n_heads = 1, .head_dim = 8, .n_rot = 7, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
    assert_int_equal(colo_op_rope(c->s, buf, 0, (int32_t *)buf, 1, &odd), COLO_EINVAL);
    colo_rope_desc noscale = {.n_heads = 1, .head_dim = 8, .n_rot = 8, .freq_base = 10000, .attn_factor = 1};
    assert_int_equal(colo_op_rope(c->s, buf, 0, (int32_t *)buf, 1, &noscale), COLO_EINVAL);
    assert_int_equal(colo_op_gemm(c->s, false, false, 2, 2, 2, 1, buf, 1, 0, buf, 2, 0, COLO_F32, 0, buf, 2, 0, 1),
                     COLO_EINVAL);
    assert_int_equal(colo_op_dequantize(c->s, buf, COLO_Q8_0, buf, COLO_Q4_1, 32), COLO_EUNSUPPORTED);
    assert_int_equal(colo_op_linear(c->s, buf, COLO_Q6_K, NULL, buf, 0, buf, 0, 1, 1, 32), COLO_EINVAL);
    assert_int_equal(colo_op_linear(c->s, buf, COLO_F32, NULL, buf, 31, buf, 0, 1, 1, 32), COLO_EINVAL);
    assert_int_equal(colo_op_linear(c->s, buf, COLO_I32, NULL, buf, 0, buf, 0, 1, 1, 32), COLO_EUNSUPPORTED);
    assert_int_equal(colo_op_get_rows(c->s, buf, (colo_dtype)99, 4, 32, (int32_t *)buf, 1, buf), COLO_EUNSUPPORTED);
    assert_int_equal(colo_op_get_rows(c->s, buf, COLO_Q8_0, 4, 48, (int32_t *)buf, 1, buf), COLO_EINVAL);
    assert_int_equal(colo_op_gemm(c->s, false, false, 2, 2, 2, 1, buf, 2, 0, buf, 2, 0, COLO_Q4_1, 0, buf, 2, 0, 1),
                     COLO_EUNSUPPORTED);
    assert_int_equal(colo_op_kv_store(c->s, buf, 0, buf, 0, buf, buf, COLO_Q4_1, (int32_t *)buf, 1, 8),
                     COLO_EUNSUPPORTED);
    /* a block type needs whole blocks in a row */
    assert_int_equal(colo_op_kv_store(c->s, buf, 0, buf, 0, buf, buf, COLO_Q8_0, (int32_t *)buf, 1, 48), COLO_EINVAL);
    assert_int_equal(colo_op_softmax(c->s, buf, 0, 4, 1.0f), COLO_EINVAL);
    assert_int_equal(colo_op_layernorm(c->s, buf, buf, buf, buf, 1, 4, -1.0f), COLO_EINVAL);
    colo_attn_desc d = {0};
    assert_int_equal(colo_op_attention(c->s, &d, buf, buf, buf, buf), COLO_EINVAL);
    int32_t *ib = (int32_t *)buf;
    colo_attn_desc ok = {.n_tokens = 1, .n_head = 2, .n_kv_head = 1, .head_dim = 4, .block_size = 4, .max_blocks = 1,
                         .max_pos = 3, .scale = 1, .kv_type = COLO_Q4_1, .tok_seq = ib, .tok_pos = ib,
                         .block_table = ib};
    assert_int_equal(colo_op_attention(c->s, &ok, buf, buf, buf, buf), COLO_EUNSUPPORTED);
    ok.kv_type = COLO_Q8_0; /* head_dim 4: not whole blocks */
    assert_int_equal(colo_op_attention(c->s, &ok, buf, buf, buf, buf), COLO_EINVAL);
    ok.n_kv_head = 3; /* n_head not a multiple */
    ok.kv_type = COLO_F32;
    assert_int_equal(colo_op_attention(c->s, &ok, buf, buf, buf, buf), COLO_EINVAL);
    assert_int_equal(colo_op_add(NULL, buf, buf, buf, 1), COLO_EINVAL);
    assert_int_equal(colo_stream_sync(c->s), COLO_OK);
    dfree_all(c);
}

static void test_dtype_facts(void **state)
{
    (void)state;
    assert_int_equal(colo_dtype_row_bytes(COLO_Q4_1, 64), 40);
    assert_int_equal(colo_dtype_row_bytes(COLO_Q8_0, 32), 34);
    assert_int_equal(colo_dtype_row_bytes(COLO_Q4_0, 32), 18);
    assert_int_equal(colo_dtype_row_bytes(COLO_Q6_K, 256), 210);
    assert_int_equal(colo_dtype_row_bytes(COLO_F16, 3), 6);
    assert_int_equal(colo_dtype_row_bytes(COLO_Q4_1, 33), 0);
    assert_int_equal(sizeof(colo_blk_q4_1), 20);
    assert_int_equal(sizeof(colo_blk_q6_k), 210);
    assert_string_equal(colo_dtype_name(COLO_Q4_1), "q4_1");
    assert_null(colo_dtype_name((colo_dtype)77));
    assert_false(colo_dtype_is_weight(COLO_I32));
}

/* ---- LoRA: segmented low-rank updates ------------------------------------------------ */

/* m rows over three adapters of ranks 4, 16 (in F16) and 64 (the last a
 * slice of a wider B, as a fused product's): rows with slot -1, 3 (past n_slots) and
 * a slot with no weights keep y; the others get y + scale B (A x) within
 * 1e-5 * (sum |terms|). Strided x and y. Then each row's bits alone equal
 * its bits in the batch, where eleven rows share slot 1. */
static void test_lora(void **state)
{
    ctx_t *c = *state;
    rng_seed_from_env();
    enum { M = 21, K = 96, N = 84, XS = 100, YS = 88, MAXR = 64, NS = 4 };
    static const int ranks[3] = {4, 16, 64};
    static const float scales[3] = {0.5f, 1.0f, 0.125f};
    float *x = malloc(M * XS * sizeof *x), *y0 = malloc(M * YS * sizeof *y0), *y = malloc(M * YS * sizeof *y);
    float *a[3], *bt[3];
    uint16_t *h16 = NULL; /* slot 1's F16 copy: read by the queued copies, freed at the end */
    colo_lora_slot slots[NS] = {{0}};
    for (int j = 0; j < 3; j++) {
        int stride = j == 2 ? N + 24 : N;
        a[j] = malloc((size_t)ranks[j] * K * sizeof *a[j]);
        bt[j] = malloc((size_t)ranks[j] * stride * sizeof *bt[j]);
        fill_normal(a[j], (int64_t)ranks[j] * K, 0.3f);
        fill_normal(bt[j], (int64_t)ranks[j] * stride, 0.3f);
        slots[j] = (colo_lora_slot){.rank = ranks[j], .b_stride = stride, .scale = scales[j]};
        if (j == 1) { /* F16: the reference takes the rounded values */
            size_t na = (size_t)ranks[j] * K, nb = (size_t)ranks[j] * stride;
            uint16_t *h = h16 = malloc((na + nb) * sizeof *h);
            for (size_t i = 0; i < na + nb; i++) {
                float *v = i < na ? &a[j][i] : &bt[j][i - na];
                h[i] = colo_f32_to_fp16(*v), *v = colo_fp16_to_f32(h[i]);
            }
            slots[j].a16 = dput(c, h, na * 2), slots[j].b16 = dput(c, h + na, nb * 2);
        } else {
            slots[j].a = dput(c, a[j], (size_t)ranks[j] * K * 4);
            slots[j].b = (const float *)dput(c, bt[j], (size_t)ranks[j] * stride * 4) + (j == 2 ? 24 : 0);
        }
    }
    /* slot 3: present but empty (an adapter that leaves this product alone) */
    /* slot 1 on eleven rows: more than the CPU kernel takes together */
    int32_t rs[M] = {0, 1, 2, -1, 2, 1, 0, 3, 7, 2, 0, -1, 1, 1, 1, 1, 1, 1, 1, 2, 1};
    fill_normal(x, M * XS, 1.0f);
    fill_normal(y0, M * YS, 1.0f);
    double *ref = malloc(M * N * sizeof *ref), *bound = malloc(M * N * sizeof *bound);
    for (int i = 0; i < M; i++)
        for (int o = 0; o < N; o++) {
            int sl = rs[i];
            double v = y0[i * YS + o], mag = fabs(v);
            if (sl >= 0 && sl < 3) {
                int stride = sl == 2 ? N + 24 : N, off = sl == 2 ? 24 : 0;
                for (int r = 0; r < ranks[sl]; r++) {
                    double t = 0, tm = 0;
                    for (int j = 0; j < K; j++)
                        t += (double)a[sl][r * K + j] * x[i * XS + j], tm += fabs((double)a[sl][r * K + j] * x[i * XS + j]);
                    double w = bt[sl][r * stride + off + o] * scales[sl];
                    v += t * w, mag += tm * fabs(w);
                }
            }
            ref[i * N + o] = v, bound[i * N + o] = 1e-5 * mag + 1e-6;
        }
    float *dx = dput(c, x, M * XS * 4), *dy = dput(c, y0, M * YS * 4), *tmp = dalloc(c, M * MAXR * 4);
    int32_t *drs = dput(c, rs, sizeof rs);
    colo_lora_slot *ds = dput(c, slots, sizeof slots);
    assert_int_equal(colo_op_lora(c->s, dx, XS, M, K, dy, YS, N, drs, ds, NS, tmp, MAXR), COLO_OK);
    dget(c, y, dy, M * YS * 4);
    float *packed = malloc(M * N * sizeof *packed);
    for (int i = 0; i < M; i++) {
        memcpy(packed + i * N, y + i * YS, N * sizeof *packed);
        for (int o = N; o < YS; o++) /* past n: untouched */
            assert_memory_equal(&y[i * YS + o], &y0[i * YS + o], sizeof *y);
    }
    check_close("lora", packed, ref, bound, M * N);
    /* one row at a time: the same bits */
    for (int i = 0; i < M; i++) {
        float *d1 = dput(c, y0 + i * YS, YS * 4), one[YS];
        assert_int_equal(colo_op_lora(c->s, dx + i * XS, XS, 1, K, d1, YS, N, drs + i, ds, NS, tmp, MAXR), COLO_OK);
        dget(c, one, d1, YS * 4);
        assert_memory_equal(one, y + i * YS, N * sizeof *one);
    }
    for (int j = 0; j < 3; j++)
        free(a[j]), free(bt[j]);
    free(x), free(y0), free(y), free(ref), free(bound), free(packed);
    dfree_all(c);
    free(h16);
}

/* linear_multi: several products of one x, each the same bits as linear
 * gives it alone (and within linear's float64 bounds, which case_linear
 * checks), on the int8 path (a decode step of few rows, weights of both
 * activation formats and a bias; more rows) and, where the context has
 * one, on a stream with exact activations. */
static void test_linear_multi(void **state)
{
    ctx_t *c = *state;
    enum { K = 512, N_OUT = 3 };
    const colo_dtype types[N_OUT] = {COLO_Q4_K, COLO_Q8_0, COLO_Q6_K};
    const int ns[N_OUT] = {67, 16, 33};
    const int rows[] = {1, 5, 20};
    colo_stream *streams[] = {c->s, c->exact_s};
    for (size_t si = 0; si < (c->exact_s ? 2u : 1u); si++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            colo_stream *s = streams[si];
            int m = rows[ri];
            float *x = malloc((size_t)m * K * 4), *bias = malloc(16 * 4);
            fill_normal(x, (int64_t)m * K, 1.0f);
            fill_normal(bias, 16, 1.0f);
            float *dx = dput(c, x, (size_t)m * K * 4), *db = dput(c, bias, 16 * 4);
            colo_linear_out out[N_OUT];
            float *dsep[N_OUT], *wd[N_OUT];
            void *w[N_OUT];
            for (int i = 0; i < N_OUT; i++) {
                w[i] = make_weights(types[i], ns[i], K, &wd[i]);
                void *dw = dput(c, w[i], colo_dtype_row_bytes(types[i], K) * (size_t)ns[i]);
                out[i] = (colo_linear_out){dw, types[i], i == 1 ? db : NULL, dpoison(c, (size_t)m * (ns[i] + 3) * 4),
                                           ns[i] + 3, ns[i]};
                dsep[i] = dpoison(c, (size_t)m * (ns[i] + 3) * 4);
            }
            assert_int_equal(colo_stream_sync(c->s), COLO_OK);
            for (int i = 0; i < N_OUT; i++)
                free(w[i]), free(wd[i]);
            colo_stream_set_decode(s, true);
            assert_int_equal(colo_op_linear_multi(s, dx, 0, m, K, out, N_OUT), COLO_OK);
            for (int i = 0; i < N_OUT; i++)
                assert_int_equal(colo_op_linear(s, out[i].w, types[i], out[i].bias, dx, 0, dsep[i], ns[i] + 3, m,
                                                ns[i], K),
                                 COLO_OK);
            colo_stream_set_decode(s, false);
            assert_int_equal(colo_stream_sync(s), COLO_OK);
            for (int i = 0; i < N_OUT; i++) {
                size_t bytes = (size_t)m * (ns[i] + 3) * 4;
                float *a = malloc(bytes), *b = malloc(bytes);
                dget(c, a, out[i].y, bytes);
                dget(c, b, dsep[i], bytes);
                for (int r = 0; r < m; r++) {
                    for (int j = 0; j < ns[i]; j++)
                        if (!isfinite(a[(size_t)r * (ns[i] + 3) + j]))
                            fail_msg("linear_multi: %s stream, %d rows, product %d: row %d col %d not written (%g, alone %g)",
                                     si ? "exact" : "int8", m, i, r, j, a[(size_t)r * (ns[i] + 3) + j], b[(size_t)r * (ns[i] + 3) + j]);
                    assert_memory_equal(a + (size_t)r * (ns[i] + 3), b + (size_t)r * (ns[i] + 3),
                                        (size_t)ns[i] * 4);
                }
                free(a), free(b);
            }
            free(x), free(bias);
            dfree_all(c);
        }
    /* More products than the op takes, and a bad one. */
    colo_linear_out four[4] = {{0}};
    assert_int_equal(colo_op_linear_multi(c->s, (const float *)four, 0, 1, 256, four, 4), COLO_EINVAL);
    assert_int_equal(colo_op_linear_multi(c->s, (const float *)four, 0, 1, 256, four, 1), COLO_EINVAL);
}

#define PARITY_TESTS                                                                                            \
    cmocka_unit_test(test_dtype_facts), cmocka_unit_test(test_dispatch_validation),                             \
        cmocka_unit_test(test_linear_all_types), cmocka_unit_test(test_gemm),                                   \
        cmocka_unit_test(test_dequantize_and_get_rows), cmocka_unit_test(test_row_ops),                         \
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_rope), cmocka_unit_test(test_attention),      \
        cmocka_unit_test(test_encoder_ops), cmocka_unit_test(test_kv_store_quantized),                          \
        cmocka_unit_test(test_lora), cmocka_unit_test(test_linear_multi)
