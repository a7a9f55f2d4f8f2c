/* CUDA kernels on shapes the parity cases do not reach, against float64:
 * decode attention over long contexts (keys split across warps and merged),
 * head dims 36 to 256 (Phi-3.5's 96, Gemma 3's 256) in prefills and decode
 * steps, sliding windows, strided q rows, GQA groups of 4; bidirectional
 * attention over several chunks of keys; linear with exact activations
 * with 9..64 rows (the mat-vec kernel in chunks of 8) and past 64 (cuBLAS
 * on expanded tiles), real model widths, plain rows with tails,
 * misaligned weights and more rows than one prefill tile; linear on two
 * 8-bit digits (the default for block formats) the same bits as the host's
 * kernels/q8_digits.h gives each row on its own, at every row count, with
 * misaligned weights and on subnormal activations; kv_store into Q8_0 and
 * Q4_0 caches the bytes of the CPU's quantization; dequantize and
 * get_rows with tails; row ops at 512 threads; rope at head dims 96 to 256.
 * Skipped when no GPU is usable. Random inputs seeded from COLO_TEST_SEED. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cuda_skip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "kernels/q8_digits.h"
#include "kernels/quant.h"
#include "runtime/backend.h"
#include "tests/test_seed.h"

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
    colo_stream *exact; /* a stream with exact_activations */
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
    uint64_t seed = colo_test_seed("test_ops_cuda_shapes", 85);
    rng = seed * 2654435761u + 1;
    colo_device_config cfg = {.want = "cuda"};
    c.dev = colo_device_open(&cfg, err, sizeof err);
    if (!c.dev)
        return -1;
    c.s = colo_stream_create(c.dev, NULL, err, sizeof err);
    colo_stream_config ec = {.priority = COLO_PRIO_NORMAL, .exact_activations = true};
    c.exact = colo_stream_create(c.dev, &ec, err, sizeof err);
    *state = &c;
    return c.s && c.exact ? 0 : -1;
}

static int teardown(void **state)
{
    ctx_t *c = *state;
    colo_stream_destroy(c->exact);
    colo_stream_destroy(c->s);
    colo_device_close(c->dev);
    return 0;
}

/* Paged attention over two sequences whose blocks are interleaved backwards
 * through the cache. Queries: the listed (sequence, position) pairs, or with
 * all every position of both (a prefill); q rows carry q_pad extra elements
 * (q_stride, as a fused QKV buffer gives). */
typedef struct {
    colo_dtype kv_type;
    int hd, n_head, n_kv, window, lens[2], q_pad;
    bool all;
    int nq;
    int32_t qseq[4], qpos[4];
} attn_case;

static void case_attention(ctx_t *c, const attn_case *ac)
{
    enum { NSEQ = 2, BS = 16 };
    int hd = ac->hd, n_head = ac->n_head, n_kv = ac->n_kv, kv_dim = n_kv * hd;
    const int *lens = ac->lens;
    int max_len = lens[0] > lens[1] ? lens[0] : lens[1], MAXB = (max_len + BS - 1) / BS + 1;
    int32_t *table = malloc((size_t)NSEQ * MAXB * 4);
    for (int i = 0; i < NSEQ * MAXB; i++) /* sequence 1's blocks first, interleaved backwards */
        table[i] = i < MAXB ? 2 * (MAXB - 1 - i) : 2 * (i - MAXB) + 1;
    int n_slots = NSEQ * MAXB * BS;
    int total = lens[0] + lens[1];
    float *k = malloc((size_t)total * kv_dim * 4), *v = malloc((size_t)total * kv_dim * 4);
    int32_t *slot = malloc((size_t)total * 4);
    for (int64_t i = 0; i < (int64_t)total * kv_dim; i++) {
        k[i] = rng_normal(), v[i] = rng_normal();
        if (ac->kv_type == COLO_F16)
            k[i] = colo_fp16_to_f32(colo_f32_to_fp16(k[i])), v[i] = colo_fp16_to_f32(colo_f32_to_fp16(v[i]));
    }
    for (int s = 0, t = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++, t++)
            slot[t] = table[s * MAXB + p / BS] * BS + p % BS;
    size_t es = ac->kv_type == COLO_F16 ? 2 : 4;
    void *kc = dput(c, NULL, (size_t)n_slots * kv_dim * es), *vc = dput(c, NULL, (size_t)n_slots * kv_dim * es);
    float *dk = dput(c, k, (size_t)total * kv_dim * 4), *dv = dput(c, v, (size_t)total * kv_dim * 4);
    assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, ac->kv_type, dput(c, slot, (size_t)total * 4),
                                      total, kv_dim),
                     COLO_OK);
    int nt = ac->all ? total : ac->nq;
    int32_t *tseq = malloc((size_t)nt * 4), *tpos = malloc((size_t)nt * 4);
    for (int s = 0, t = 0; ac->all && s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++, t++)
            tseq[t] = s, tpos[t] = p;
    if (!ac->all)
        memcpy(tseq, ac->qseq, (size_t)nt * 4), memcpy(tpos, ac->qpos, (size_t)nt * 4);
    int qd = n_head * hd, qs = qd + ac->q_pad;
    float *q = malloc((size_t)nt * qs * 4), *out = malloc((size_t)nt * qd * 4);
    for (int64_t i = 0; i < (int64_t)nt * qs; i++)
        q[i] = rng_normal();
    float *dq = dput(c, q, (size_t)nt * qs * 4), *dout = dput(c, NULL, (size_t)nt * qd * 4);
    colo_attn_desc d = {.n_tokens = nt, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS,
                        .max_blocks = MAXB, .max_pos = max_len - 1, .scale = 1.0f / sqrtf((float)hd),
                        .kv_type = ac->kv_type, .tok_seq = dput(c, tseq, (size_t)nt * 4),
                        .tok_pos = dput(c, tpos, (size_t)nt * 4), .block_table = dput(c, table, (size_t)NSEQ * MAXB * 4),
                        .q_stride = ac->q_pad ? qs : 0, .window = ac->window};
    assert_int_equal(colo_op_attention(c->s, &d, dq, kc, vc, dout), COLO_OK);
    dget(c, out, dout, (size_t)nt * qd * 4);
    double *sc = malloc((size_t)max_len * sizeof(double));
    for (int t = 0; t < nt; t++) {
        int base = tseq[t] ? lens[0] : 0, p = tpos[t];
        int j0 = ac->window && p >= ac->window ? p - ac->window + 1 : 0;
        for (int h = 0; h < n_head; h++) {
            int kvh = h / (n_head / n_kv);
            double mx = -INFINITY, se = 0;
            for (int j = j0; j <= p; j++) {
                double dot = 0;
                for (int e = 0; e < hd; e++)
                    dot += (double)q[(size_t)t * qs + h * hd + e] * k[(size_t)(base + j) * kv_dim + kvh * hd + e];
                sc[j] = dot * d.scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = j0; j <= p; j++)
                se += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < hd; e++) {
                double ref = 0;
                for (int j = j0; j <= p; j++)
                    ref += sc[j] / se * v[(size_t)(base + j) * kv_dim + kvh * hd + e];
                double got = out[(size_t)t * qd + h * hd + e];
                if (!(fabs(got - ref) <= 1e-4 + 1e-4 * fabs(ref)))
                    fail_msg("attention %s hd=%d window=%d token %d (pos %d) head %d dim %d: got %.7g, reference %.7g",
                             colo_dtype_name(ac->kv_type), hd, ac->window, t, p, h, e, got, ref);
            }
        }
    }
    free(k), free(v), free(slot), free(q), free(out), free(sc), free(tseq), free(tpos), free(table);
    dfree(c);
}

/* Decode-like batches: the last positions of two long sequences and one in
 * the middle, so the keys are split across warps and merged. */
static void case_long_attention(ctx_t *c, colo_dtype kv_type, int hd, int n_head, int n_kv)
{
    attn_case ac = {.kv_type = kv_type, .hd = hd, .n_head = n_head, .n_kv = n_kv, .lens = {1500, 700}, .nq = 3,
                    .qseq = {0, 1, 0}, .qpos = {1499, 699, 1000}};
    case_attention(c, &ac);
}

static void test_long_attention(void **state)
{
    case_long_attention(*state, COLO_F16, 64, 8, 2);
    case_long_attention(*state, COLO_F32, 128, 4, 1);
    case_long_attention(*state, COLO_F16, 128, 6, 3);
    case_long_attention(*state, COLO_F32, 80, 2, 2); /* not a multiple of 32 */
    case_long_attention(*state, COLO_F16, 96, 4, 4); /* Phi-3.5 */
    case_long_attention(*state, COLO_F32, 256, 4, 2);
}

/* Head dims 96 and 256 (Gemma 3) in prefills and decode steps, sliding
 * windows cutting through split ranges, q rows with a stride. */
static void test_attention_head_dims(void **state)
{
    attn_case gemma_local = {.kv_type = COLO_F16, .hd = 256, .n_head = 8, .n_kv = 4, .window = 64,
                             .lens = {300, 97}, .all = true};
    case_attention(*state, &gemma_local);
    attn_case gemma_decode = {.kv_type = COLO_F16, .hd = 256, .n_head = 4, .n_kv = 1, .window = 512,
                              .lens = {1400, 513}, .q_pad = 2 * 256, .nq = 4,
                              .qseq = {0, 1, 0, 1}, .qpos = {1399, 512, 511, 100}};
    case_attention(*state, &gemma_decode);
    attn_case phi_prefill = {.kv_type = COLO_F32, .hd = 96, .n_head = 6, .n_kv = 6, .lens = {170, 33},
                             .q_pad = 3, .all = true};
    case_attention(*state, &phi_prefill);
    attn_case phi_window = {.kv_type = COLO_F16, .hd = 96, .n_head = 8, .n_kv = 2, .window = 300,
                            .lens = {1200, 299}, .nq = 3, .qseq = {0, 1, 0}, .qpos = {1199, 298, 700}};
    case_attention(*state, &phi_window);
    attn_case odd = {.kv_type = COLO_F16, .hd = 36, .n_head = 3, .n_kv = 1, .window = 7, .lens = {90, 41},
                     .all = true}; /* not a multiple of 8: the scalar key path */
    case_attention(*state, &odd);
}

/* Bidirectional attention over several chunks of 32 keys, with padding
 * rows; extra: elements past 3 * n_head * hd in each fused QKV row (odd:
 * the unaligned key path). */
static void case_bidir(ctx_t *c, int hd, int n_head, int seq, int len0, int len1, int extra)
{
    int batch = 2, dm = n_head * hd, qs = 3 * dm + extra;
    int32_t len[2] = {len0, len1};
    size_t rows = (size_t)batch * seq;
    float *qkv = malloc(rows * qs * 4), *out = malloc(rows * dm * 4);
    for (size_t i = 0; i < rows * qs; i++)
        qkv[i] = rng_normal();
    float *dqkv = dput(c, qkv, rows * qs * 4), *dout = dput(c, NULL, rows * dm * 4);
    float scale = 1.0f / sqrtf((float)hd);
    assert_int_equal(colo_op_attention_bidir(c->s, dqkv, qs, dqkv + dm, qs, dqkv + 2 * dm, qs, dout,
                                             dput(c, len, sizeof len), batch, seq, n_head, hd, scale),
                     COLO_OK);
    dget(c, out, dout, rows * dm * 4);
    double *sc = malloc((size_t)seq * 8);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < seq; i++)
            for (int h = 0; h < n_head; h++) {
                const float *qr = qkv + ((size_t)b * seq + i) * qs + h * hd;
                double mx = -INFINITY, se = 0;
                for (int j = 0; j < len[b]; j++) {
                    const float *kr = qkv + ((size_t)b * seq + j) * qs + dm + h * hd;
                    double dot = 0;
                    for (int e = 0; e < hd; e++)
                        dot += (double)qr[e] * kr[e];
                    sc[j] = dot * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < len[b]; j++)
                    se += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double ref = 0;
                    for (int j = 0; i < len[b] && j < len[b]; j++)
                        ref += sc[j] / se * qkv[((size_t)b * seq + j) * qs + 2 * dm + h * hd + e];
                    double got = out[((size_t)b * seq + i) * dm + h * hd + e];
                    if (!(fabs(got - ref) <= 1e-5 + 1e-5 * fabs(ref)))
                        fail_msg("attention_bidir hd=%d seq %d row %d head %d dim %d: got %.7g, reference %.7g", hd,
                                 b, i, h, e, got, ref);
                }
            }
    free(qkv), free(out), free(sc);
    dfree(c);
}

static void test_bidir_attention(void **state)
{
    case_bidir(*state, 64, 4, 100, 100, 37, 0); /* BERT's head dim */
    case_bidir(*state, 96, 2, 70, 45, 70, 1);
    case_bidir(*state, 32, 3, 40, 33, 0, 4);
}

/* Block formats on the default stream: each output the bits the host's
 * kernels/q8_digits.h gives it, row by row (so also whatever rows share
 * the product). dw: the weights on the device, w the same on the host. */
static void check_q8(ctx_t *c, colo_dtype t, const void *dw, const unsigned char *w, const float *x, const float *dx,
                     float *dy, int m, int n, int k)
{
    assert_int_equal(colo_op_linear(c->s, dw, t, NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
    float *y = malloc((size_t)m * n * 4);
    colo_q8_digits *xd = malloc((size_t)(k / 32) * sizeof *xd);
    assert_true(y && xd);
    dget(c, y, dy, (size_t)m * n * 4);
    size_t rb = colo_dtype_row_bytes(t, k);
    for (int i = 0; i < m; i++) {
        for (int b = 0; b < k / 32; b++)
            colo_q8_digits_of(x + (size_t)i * k + 32 * b, xd + b);
        for (int r = 0; r < n; r++) {
            float want = colo_q8_dot(t, w + rb * r, k, xd, 0.0f), got = y[(size_t)i * n + r];
            if (memcmp(&want, &got, 4))
                fail_msg("linear on digits %s m=%d n=%d k=%d (%d, %d): got %.9g, the host's %.9g", colo_dtype_name(t),
                         m, n, k, i, r, got, want);
        }
    }
    free(y), free(xd);
}

/* y = x . W^T with the weights woff bytes into their buffer (an offset that
 * breaks their alignment takes the copying path), on the exact stream
 * against float64, and for block formats on the default stream as well
 * (check_q8). */
static void case_linear_at(ctx_t *c, colo_dtype t, int m, int n, int k, size_t woff)
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
    unsigned char *wpad = calloc(rb * n + woff, 1);
    memcpy(wpad + woff, w, rb * n);
    unsigned char *dw = dput(c, wpad, rb * n + woff);
    float *dx = dput(c, x, (size_t)m * k * 4), *dy = dput(c, NULL, (size_t)m * n * 4);
    assert_int_equal(colo_stream_sync(c->s), COLO_OK); /* the copies, before the exact stream reads them */
    assert_int_equal(colo_op_linear(c->exact, dw + woff, t, NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
    assert_int_equal(colo_stream_sync(c->exact), COLO_OK);
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
                fail_msg("linear %s m=%d n=%d k=%d offset %zu (%d, %d): got %.8g, reference %.8g",
                         colo_dtype_name(t), m, n, k, woff, i, r, y[(size_t)i * n + r], ref);
        }
    if (colo_q8_has(t))
        check_q8(c, t, dw + woff, w, x, dx, dy, m, n, k);
    free(w), free(wpad), free(wd), free(row), free(x), free(y);
    dfree(c);
}

static void case_linear(ctx_t *c, colo_dtype t, int m, int n, int k) { case_linear_at(c, t, m, n, k, 0); }

static void test_linear_rows(void **state)
{
    const colo_dtype types[] = {COLO_F32,  COLO_F16,  COLO_BF16, COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1,
                                COLO_Q8_0, COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        case_linear(*state, types[i], 12, 300, 1536);
        case_linear(*state, types[i], 16, 77, 512);
        case_linear(*state, types[i], 2, 1000, 768);
        case_linear(*state, types[i], 41, 130, 512); /* 6 chunks, the last of 1 row */
        case_linear(*state, types[i], 64, 77, 256);  /* the mat-vec kernel's last row count */
        case_linear(*state, types[i], 65, 70, 512);  /* the first through cuBLAS */
    }
    /* Plain rows with a tail past the last 8, in the mat-vec kernel and
     * (65 rows and more) through cuBLAS, expanded where not F32. */
    case_linear(*state, COLO_F32, 5, 33, 43);
    case_linear(*state, COLO_F16, 20, 31, 21);
    case_linear(*state, COLO_F16, 70, 31, 21);
    case_linear(*state, COLO_BF16, 3, 29, 45);
    case_linear(*state, COLO_BF16, 65, 29, 45);
    case_linear(*state, COLO_F16, 1, 9, 5);
    case_linear(*state, COLO_F32, 66, 7, 3);
}

/* Weights misaligned for their loads: copied tile by tile behind the F32
 * tile, for one row and for many. */
static void test_linear_misaligned(void **state)
{
    case_linear_at(*state, COLO_F32, 1, 37, 64, 2);
    case_linear_at(*state, COLO_F32, 67, 37, 64, 2);
    case_linear_at(*state, COLO_Q8_0, 3, 41, 256, 1);
    case_linear_at(*state, COLO_Q4_K, 24, 41, 512, 1);
    case_linear_at(*state, COLO_Q4_K, 68, 41, 512, 1);
    case_linear_at(*state, COLO_F16, 2, 13, 40, 1);
}

/* More rows of W than one F32 tile of the prefill path holds (64 MiB:
 * 2048 rows of 8192), so the last tile is 2 rows. */
static void test_linear_tiles(void **state) { case_linear(*state, COLO_Q4_0, 65, 2050, 8192); }

/* Plain types with n % 8 != 0: dequantize to F32 and F16, get_rows;
 * bit-exact against the CPU's conversion. */
static void test_plain_tails(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_F32, COLO_F16, COLO_BF16};
    enum { ROWS = 5, LEN = 45 };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        colo_dtype t = types[ti];
        size_t bytes = colo_dtype_row_bytes(t, (int64_t)ROWS * LEN);
        float *src = malloc((size_t)ROWS * LEN * 4), *deq = malloc((size_t)ROWS * LEN * 4);
        unsigned char *h = malloc(bytes);
        for (int i = 0; i < ROWS * LEN; i++)
            src[i] = rng_normal();
        assert_int_equal(colo_quantize_row(t, src, h, (int64_t)ROWS * LEN), COLO_OK);
        colo_dequantize_row(t, h, deq, (int64_t)ROWS * LEN);
        void *dsrc = dput(c, h, bytes);
        float *d32 = dput(c, NULL, (size_t)ROWS * LEN * 4), *dg = dput(c, NULL, 3 * LEN * 4);
        uint16_t *d16 = dput(c, NULL, (size_t)ROWS * LEN * 2);
        assert_int_equal(colo_op_dequantize(c->s, dsrc, t, d32, COLO_F32, (int64_t)ROWS * LEN), COLO_OK);
        assert_int_equal(colo_op_dequantize(c->s, dsrc, t, d16, COLO_F16, (int64_t)ROWS * LEN), COLO_OK);
        int32_t ids[3] = {4, 0, 2};
        assert_int_equal(colo_op_get_rows(c->s, dsrc, t, ROWS, LEN, dput(c, ids, sizeof ids), 3, dg), COLO_OK);
        float *g32 = malloc((size_t)ROWS * LEN * 4), *gg = malloc(3 * LEN * 4);
        uint16_t *g16 = malloc((size_t)ROWS * LEN * 2);
        dget(c, g32, d32, (size_t)ROWS * LEN * 4);
        dget(c, g16, d16, (size_t)ROWS * LEN * 2);
        dget(c, gg, dg, 3 * LEN * 4);
        for (int i = 0; i < ROWS * LEN; i++) {
            if (memcmp(&g32[i], &deq[i], 4))
                fail_msg("dequantize %s -> f32: element %d: %g != %g", colo_dtype_name(t), i, g32[i], deq[i]);
            if (g16[i] != colo_f32_to_fp16(deq[i]))
                fail_msg("dequantize %s -> f16: element %d", colo_dtype_name(t), i);
        }
        for (int r = 0; r < 3; r++)
            if (memcmp(gg + r * LEN, deq + ids[r] * LEN, LEN * 4))
                fail_msg("get_rows %s: row %d", colo_dtype_name(t), r);
        free(src), free(deq), free(h), free(g32), free(gg), free(g16);
        dfree(c);
    }
}

/* kv_store into Q8_0 and Q4_0 caches: each slot's K and V rows the bytes
 * the CPU's colo_quantize_row gives them (blocks of values from 1e-3 to
 * 1e3, an all-zero block whose first element is -0, one of ties). */
static void test_kv_store_bits(void **state)
{
    ctx_t *c = *state;
    enum { NT = 48, KVD = 512, SLOTS = 64 };
    const colo_dtype types[] = {COLO_Q8_0, COLO_Q4_0};
    float *k = malloc((size_t)NT * KVD * 4), *v = malloc((size_t)NT * KVD * 4);
    int32_t slot[NT];
    for (int t = 0; t < NT; t++) {
        slot[t] = (t * 37 + 5) % SLOTS;
        for (int i = 0; i < KVD; i++) {
            float sc = powf(10.0f, (float)((t * KVD + i) / 32 % 7) - 3.0f);
            k[(size_t)t * KVD + i] = rng_normal() * sc, v[(size_t)t * KVD + i] = rng_normal() * sc;
        }
    }
    for (int i = 0; i < 32; i++)
        k[i] = i ? 0.0f : -0.0f, v[i] = (float)(i % 9) - 4.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        colo_dtype t = types[ti];
        size_t rb = colo_dtype_row_bytes(t, KVD);
        unsigned char *want = calloc(SLOTS, rb), *gk = malloc(SLOTS * rb), *gv = malloc(SLOTS * rb);
        void *dk = dput(c, want, SLOTS * rb), *dv = dput(c, want, SLOTS * rb);
        assert_int_equal(colo_op_kv_store(c->s, dput(c, k, (size_t)NT * KVD * 4), 0, dput(c, v, (size_t)NT * KVD * 4),
                                          0, dk, dv, t, dput(c, slot, sizeof slot), NT, KVD),
                         COLO_OK);
        dget(c, gk, dk, SLOTS * rb);
        dget(c, gv, dv, SLOTS * rb);
        for (int tt = 0; tt < NT; tt++) {
            assert_int_equal(colo_quantize_row(t, k + (size_t)tt * KVD, want, KVD), COLO_OK);
            if (memcmp(want, gk + (size_t)slot[tt] * rb, rb))
                fail_msg("kv_store %s: K row of token %d differs from the CPU's", colo_dtype_name(t), tt);
            assert_int_equal(colo_quantize_row(t, v + (size_t)tt * KVD, want, KVD), COLO_OK);
            if (memcmp(want, gv + (size_t)slot[tt] * rb, rb))
                fail_msg("kv_store %s: V row of token %d differs from the CPU's", colo_dtype_name(t), tt);
        }
        free(want), free(gk), free(gv);
        dfree(c);
    }
    free(k), free(v);
}

/* Digit products where activations and the digits' scale are subnormal
 * (blocks of x below 4e-34, a subnormal element beside normal ones): the
 * host's bits, which a device flushing subnormals to zero would not give. */
static void test_linear_subnormal(void **state)
{
    ctx_t *c = *state;
    enum { M = 3, N = 40, K = 256 };
    colo_dtype t = COLO_Q8_0;
    size_t rb = colo_dtype_row_bytes(t, K);
    float *row = malloc(K * 4), x[M * K];
    unsigned char *w = malloc(rb * N);
    for (int r = 0; r < N; r++) {
        for (int j = 0; j < K; j++)
            row[j] = rng_normal();
        assert_int_equal(colo_quantize_row(t, row, w + rb * r, K), COLO_OK);
    }
    for (int i = 0; i < M * K; i++) {
        float sc = (i / 32) % 3 == 0 ? 1e-36f : (i / 32) % 3 == 1 ? 1e-39f : 1.0f;
        x[i] = rng_normal() * sc;
    }
    x[2 * K + 5] = 3e-39f;
    float *dy = dput(c, NULL, (size_t)M * N * 4);
    check_q8(c, t, dput(c, w, rb * N), w, x, dput(c, x, sizeof x), dy, M, N, K);
    check_q8(c, t, dput(c, w, rb * N), w, x, dput(c, x, sizeof x), dy, 1, N, K);
    free(row), free(w);
    dfree(c);
}

/* Row ops at widths that take 512 threads, and a vocabulary-sized softmax. */
static void test_wide_rows(void **state)
{
    ctx_t *c = *state;
    const int shapes[][2] = {{3, 2304}, {2, 4096}, {2, 32000}};
    for (int si = 0; si < 3; si++) {
        int rows = shapes[si][0], n = shapes[si][1];
        float *x = malloc((size_t)rows * n * 4), *w = malloc((size_t)n * 4), *y = malloc((size_t)rows * n * 4);
        for (int i = 0; i < rows * n; i++)
            x[i] = 2.0f * rng_normal();
        for (int i = 0; i < n; i++)
            w[i] = rng_normal();
        float *dx = dput(c, x, (size_t)rows * n * 4), *dw = dput(c, w, (size_t)n * 4);
        float *dy = dput(c, NULL, (size_t)rows * n * 4), *ds = dput(c, x, (size_t)rows * n * 4);
        assert_int_equal(colo_op_rmsnorm(c->s, dx, dw, dy, rows, n, 1e-6f), COLO_OK);
        assert_int_equal(colo_op_softmax(c->s, ds, rows, n, 0.5f), COLO_OK);
        for (int kind = 0; kind < 2; kind++) {
            dget(c, y, kind ? ds : dy, (size_t)rows * n * 4);
            for (int r = 0; r < rows; r++) {
                const float *xr = x + (size_t)r * n;
                double s2 = 0, mx = -INFINITY, se = 0;
                for (int j = 0; j < n; j++) {
                    s2 += (double)xr[j] * xr[j];
                    mx = 0.5 * xr[j] > mx ? 0.5 * xr[j] : mx;
                }
                for (int j = 0; j < n; j++)
                    se += exp(0.5 * xr[j] - mx);
                for (int j = 0; j < n; j++) {
                    double ref = kind ? exp(0.5 * xr[j] - mx) / se : xr[j] / sqrt(s2 / n + 1e-6) * w[j];
                    double got = y[(size_t)r * n + j];
                    if (!(fabs(got - ref) <= 1e-5 * fabs(ref) + 1e-6))
                        fail_msg("%s n=%d row %d element %d: got %.8g, reference %.8g", kind ? "softmax" : "rmsnorm",
                                 n, r, j, got, ref);
                }
            }
        }
        free(x), free(w), free(y);
        dfree(c);
    }
}

/* Rope at head dims 96 (Phi-3.5), 128 with partial rotation and 256
 * (Gemma 3), positions up to 32767. */
static void case_rope(ctx_t *c, int heads, int hd, int n_rot, bool neox, bool factors)
{
    enum { ROWS = 5 };
    int stride = heads * hd;
    int32_t pos[ROWS] = {0, 7, 4095, 20000, 32767};
    float *x = malloc((size_t)ROWS * stride * 4), *y = malloc((size_t)ROWS * stride * 4);
    float *ff = malloc((size_t)n_rot / 2 * 4);
    for (int i = 0; i < ROWS * stride; i++)
        x[i] = rng_normal();
    for (int i = 0; i < n_rot / 2; i++)
        ff[i] = 1.0f + (float)(rng_u64() % 1000) / 40.0f;
    float *dx = dput(c, x, (size_t)ROWS * stride * 4);
    colo_rope_desc rd = {.n_heads = heads, .head_dim = hd, .n_rot = n_rot, .neox = neox, .freq_base = 1000000.0f,
                         .freq_scale = 1.0f, .attn_factor = 1.0f,
                         .freq_factors = factors ? dput(c, ff, (size_t)n_rot / 2 * 4) : NULL};
    assert_int_equal(colo_op_rope(c->s, dx, 0, dput(c, pos, sizeof pos), ROWS, &rd), COLO_OK);
    dget(c, y, dx, (size_t)ROWS * stride * 4);
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < heads; h++) {
            const float *xr = x + (size_t)r * stride + h * hd;
            const float *yr = y + (size_t)r * stride + h * hd;
            for (int e = 0; e < hd; e++) {
                double ref = xr[e];
                if (e < n_rot) {
                    int j = neox ? e % (n_rot / 2) : e / 2;
                    bool first = neox ? e < n_rot / 2 : e % 2 == 0;
                    int i0 = neox ? j : 2 * j, i1 = neox ? j + n_rot / 2 : 2 * j + 1;
                    double th = pos[r] * pow(1000000.0, -(double)(2 * j) / n_rot) / (factors ? ff[j] : 1.0);
                    ref = first ? xr[i0] * cos(th) - xr[i1] * sin(th) : xr[i0] * sin(th) + xr[i1] * cos(th);
                }
                if (!(fabs(yr[e] - ref) <= 1e-5 * fabs(ref) + 2e-5))
                    fail_msg("rope hd=%d n_rot=%d neox=%d row %d head %d dim %d: got %.8g, reference %.8g", hd, n_rot,
                             neox, r, h, e, yr[e], ref);
            }
        }
    free(x), free(y), free(ff);
    dfree(c);
}

static void test_rope_head_dims(void **state)
{
    case_rope(*state, 4, 96, 96, true, true);
    case_rope(*state, 2, 128, 64, false, false);
    case_rope(*state, 2, 128, 32, true, false);
    case_rope(*state, 3, 256, 256, true, true);
}

int main(void)
{
    COLO_SKIP_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_attention),    cmocka_unit_test(test_attention_head_dims),
        cmocka_unit_test(test_bidir_attention),   cmocka_unit_test(test_linear_rows),
        cmocka_unit_test(test_linear_misaligned), cmocka_unit_test(test_linear_tiles),
        cmocka_unit_test(test_plain_tails),       cmocka_unit_test(test_wide_rows),
        cmocka_unit_test(test_rope_head_dims),    cmocka_unit_test(test_kv_store_bits),
        cmocka_unit_test(test_linear_subnormal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
