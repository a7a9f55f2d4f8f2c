/* CUDA kernels on shapes the parity cases do not reach, against float64:
 * decode attention over long contexts (keys split across warps and merged),
 * head dims of 64 and 128, GQA groups of 4; linear with 9..16 rows (the
 * mat-vec kernel in chunks of 8) and real model widths. Skipped when no GPU
 * is usable. Random inputs seeded from COLO_TEST_SEED. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/backend.h"

static uint64_t rng;

static uint64_t rng_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float rng_normal(void)
{
    double u = ((rng_u64() >> 11) + 1.0) / 9007199254740993.0, v = (rng_u64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

typedef struct {
    colo_device *dev;
    colo_stream *s;
    colo_buffer *bufs[32];
    int n;
} ctx_t;

static void *dput(ctx_t *c, const void *host, size_t bytes)
{
    char err[256];
    colo_buffer *b = colo_buffer_alloc(c->dev, bytes, err, sizeof err);
    if (!b)
        fail_msg("alloc: %s", err);
    c->bufs[c->n++] = b;
    if (host)
        assert_int_equal(colo_memcpy_h2d(c->s, colo_buffer_ptr(b), host, bytes), COLO_OK);
    else
        assert_int_equal(colo_memset(c->s, colo_buffer_ptr(b), 0xff, bytes), COLO_OK); /* NaN */
    return colo_buffer_ptr(b);
}

static void dget(ctx_t *c, void *host, const void *dev, size_t bytes)
{
    assert_int_equal(colo_memcpy_d2h(c->s, host, dev, bytes), COLO_OK);
    assert_int_equal(colo_stream_sync(c->s), COLO_OK);
}

static void dfree(ctx_t *c)
{
    colo_stream_sync(c->s);
    for (int i = 0; i < c->n; i++)
        colo_buffer_free(c->bufs[i]);
    c->n = 0;
}

static int setup(void **state)
{
    static ctx_t c;
    char err[256];
    const char *e = getenv("COLO_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16));
    printf("cuda shapes: seed %llu (set COLO_TEST_SEED to replay)\n", (unsigned long long)seed);
    rng = seed * 2654435761u + 1;
    colo_device_config cfg = {.want = "cuda"};
    c.dev = colo_device_open(&cfg, err, sizeof err);
    if (!c.dev)
        return -1;
    c.s = colo_stream_create(c.dev, NULL, err, sizeof err);
    *state = &c;
    return c.s ? 0 : -1;
}

static int teardown(void **state)
{
    ctx_t *c = *state;
    colo_stream_destroy(c->s);
    colo_device_close(c->dev);
    return 0;
}

/* Decode-like batch: the last few positions of two long sequences. */
static void case_long_attention(ctx_t *c, colo_dtype kv_type, int hd, int n_head, int n_kv)
{
    enum { NSEQ = 2, BS = 16, MAXB = 128 };
    int lens[NSEQ] = {1500, 700}, kv_dim = n_kv * hd;
    int32_t table[NSEQ * MAXB];
    for (int i = 0; i < NSEQ * MAXB; i++) /* sequence 1's blocks first, interleaved backwards */
        table[i] = i < MAXB ? 2 * (MAXB - 1 - i) : 2 * (i - MAXB) + 1;
    int n_slots = NSEQ * MAXB * BS;
    int total = lens[0] + lens[1];
    float *k = malloc((size_t)total * kv_dim * 4), *v = malloc((size_t)total * kv_dim * 4);
    int32_t *slot = malloc((size_t)total * 4);
    for (int64_t i = 0; i < (int64_t)total * kv_dim; i++) {
        k[i] = rng_normal(), v[i] = rng_normal();
        if (kv_type == COLO_F16)
            k[i] = colo_fp16_to_f32(colo_f32_to_fp16(k[i])), v[i] = colo_fp16_to_f32(colo_f32_to_fp16(v[i]));
    }
    for (int s = 0, t = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++, t++)
            slot[t] = table[s * MAXB + p / BS] * BS + p % BS;
    size_t es = kv_type == COLO_F16 ? 2 : 4;
    void *kc = dput(c, NULL, (size_t)n_slots * kv_dim * es), *vc = dput(c, NULL, (size_t)n_slots * kv_dim * es);
    float *dk = dput(c, k, (size_t)total * kv_dim * 4), *dv = dput(c, v, (size_t)total * kv_dim * 4);
    assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, kv_type, dput(c, slot, (size_t)total * 4), total,
                                      kv_dim),
                     COLO_OK);
    enum { NT = 3 };
    int32_t tseq[NT] = {0, 1, 0}, tpos[NT] = {1499, 699, 1000};
    int qd = n_head * hd;
    float *q = malloc((size_t)NT * qd * 4), *out = malloc((size_t)NT * qd * 4);
    for (int i = 0; i < NT * qd; i++)
        q[i] = rng_normal();
    float *dq = dput(c, q, (size_t)NT * qd * 4), *dout = dput(c, NULL, (size_t)NT * qd * 4);
    colo_attn_desc d = {.n_tokens = NT, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS,
                        .max_blocks = MAXB, .max_pos = 1499, .scale = 1.0f / sqrtf((float)hd), .kv_type = kv_type,
                        .tok_seq = dput(c, tseq, sizeof tseq), .tok_pos = dput(c, tpos, sizeof tpos),
                        .block_table = dput(c, table, sizeof table)};
    assert_int_equal(colo_op_attention(c->s, &d, dq, kc, vc, dout), COLO_OK);
    dget(c, out, dout, (size_t)NT * qd * 4);
    double *sc = malloc(1500 * sizeof(double));
    for (int t = 0; t < NT; t++) {
        int base = tseq[t] ? lens[0] : 0;
        for (int h = 0; h < n_head; h++) {
            int kvh = h / (n_head / n_kv);
            double mx = -INFINITY, se = 0;
            for (int j = 0; j <= tpos[t]; j++) {
                double dot = 0;
                for (int e = 0; e < hd; e++)
                    dot += (double)q[t * qd + h * hd + e] * k[(size_t)(base + j) * kv_dim + kvh * hd + e];
                sc[j] = dot * d.scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= tpos[t]; j++)
                se += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < hd; e++) {
                double ref = 0;
                for (int j = 0; j <= tpos[t]; j++)
                    ref += sc[j] / se * v[(size_t)(base + j) * kv_dim + kvh * hd + e];
                double got = out[t * qd + h * hd + e];
                if (!(fabs(got - ref) <= 1e-4 + 1e-4 * fabs(ref)))
                    fail_msg("attention %s hd=%d token %d head %d dim %d: got %.7g, reference %.7g",
                             colo_dtype_name(kv_type), hd, t, h, e, got, ref);
            }
        }
    }
    free(k), free(v), free(slot), free(q), free(out), free(sc);
    dfree(c);
}

static void test_long_attention(void **state)
{
    case_long_attention(*state, COLO_F16, 64, 8, 2);
    case_long_attention(*state, COLO_F32, 128, 4, 1);
    case_long_attention(*state, COLO_F16, 128, 6, 3);
    case_long_attention(*state, COLO_F32, 80, 2, 2); /* not a multiple of 32 */
}

static void case_linear(ctx_t *c, colo_dtype t, int m, int n, int k)
{
    size_t rb = colo_dtype_row_bytes(t, k);
    unsigned char *w = malloc(rb * n);
    float *wd = malloc((size_t)n * k * 4), *row = malloc((size_t)k * 4), *x = malloc((size_t)m * k * 4);
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < k; j++)
            row[j] = rng_normal() * 0.3f;
        if (t == COLO_Q6_K) {
            for (size_t i = 0; i < rb; i++)
                w[rb * r + i] = (unsigned char)rng_u64();
            for (int b = 0; b < k / 256; b++)
                ((colo_blk_q6_k *)(w + rb * r))[b].d = colo_f32_to_fp16(0.002f);
        } else {
            assert_int_equal(colo_quantize_row(t, row, w + rb * r, k), COLO_OK);
        }
        colo_dequantize_row(t, w + rb * r, wd + (size_t)r * k, k);
    }
    for (int i = 0; i < m * k; i++)
        x[i] = rng_normal();
    void *dw = dput(c, w, rb * n);
    float *dx = dput(c, x, (size_t)m * k * 4), *dy = dput(c, NULL, (size_t)m * n * 4);
    assert_int_equal(colo_op_linear(c->s, dw, t, NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
    float *y = malloc((size_t)m * n * 4);
    dget(c, y, dy, (size_t)m * n * 4);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < k; j++) {
                ref += (double)wd[(size_t)r * k + j] * x[(size_t)i * k + j];
                mag += fabs((double)wd[(size_t)r * k + j] * x[(size_t)i * k + j]);
            }
            if (!(fabs(y[(size_t)i * n + r] - ref) <= 1e-5 * mag + 1e-6))
                fail_msg("linear %s m=%d n=%d k=%d (%d, %d): got %.8g, reference %.8g", colo_dtype_name(t), m, n, k,
                         i, r, y[(size_t)i * n + r], ref);
        }
    free(w), free(wd), free(row), free(x), free(y);
    dfree(c);
}

static void test_linear_rows(void **state)
{
    const colo_dtype types[] = {COLO_F32,  COLO_F16,  COLO_BF16, COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1,
                                COLO_Q8_0, COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        case_linear(*state, types[i], 12, 300, 1536);
        case_linear(*state, types[i], 16, 77, 512);
        case_linear(*state, types[i], 2, 1000, 768);
    }
    case_linear(*state, COLO_F32, 5, 33, 43); /* plain rows with a tail past the last 8 */
    case_linear(*state, COLO_F16, 20, 31, 21);
}

static void test_cuda_present(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    if (!colo_cuda_available()) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_cuda_present)};
        return cmocka_run_group_tests(none, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_long_attention), cmocka_unit_test(test_linear_rows)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
