/* Every op on the CPU backend against a float64 reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/kernels/parity_cases.h"

#include "kernels/cpu/cpu_kernels.h" /* colo_cpu_int8_max_rows */

static ctx_t ctx;
static colo_device *exact_dev;

static int setup(void **state)
{
    char err[256];
    colo_device_config cfg = {.want = "cpu", .cpu_threads = 2};
    rng_seed_from_env();
    ctx.dev = colo_device_open(&cfg, err, sizeof err);
    if (!ctx.dev)
        return -1;
    ctx.s = colo_stream_create(ctx.dev, NULL, err, sizeof err);
    /* The same ops without 8-bit activations (CPU memory is shared). */
    colo_device_config ecfg = {.want = "cpu", .cpu_threads = 2, .exact_activations = true};
    exact_dev = colo_device_open(&ecfg, err, sizeof err);
    ctx.exact_s = exact_dev ? colo_stream_create(exact_dev, NULL, err, sizeof err) : NULL;
    *state = &ctx;
    return ctx.s && ctx.exact_s ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_stream_destroy(ctx.exact_s);
    colo_device_close(exact_dev);
    colo_stream_destroy(ctx.s);
    colo_device_close(ctx.dev);
    return 0;
}

/* The int8 path for many rows (as decode steps of large batches may take
 * it): groups of 4 x rows, tiles of weight rows, more rows than one group
 * of 32 and weight counts that are no multiple of a tile, each output
 * within the int8 bound; and each row's output the same bits as when it
 * is the only row. */
static void test_linear_int8_many_rows(void **state)
{
    ctx_t *c = *state;
    int saved = colo_cpu_int8_max_rows;
    colo_cpu_int8_max_rows = 1 << 30;
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q5_1, COLO_Q8_0, COLO_Q3_K, COLO_Q4_K, COLO_Q6_K};
    const int shapes[][3] = {{9, 37, 256}, {33, 67, 512}, {70, 17, 256}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            case_linear(c, c->s, true, types[t], shapes[i][0], shapes[i][1], shapes[i][2], i == 1);
    /* Row independence: 37 rows at once against each row alone. */
    int m = 37, n = 45, k = 512;
    float *wd;
    void *w = make_weights(COLO_Q4_K, n, k, &wd);
    float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4), *y1 = malloc((size_t)n * 4);
    fill_normal(x, (int64_t)m * k, 1.0f);
    void *dw = dput(c, w, colo_dtype_row_bytes(COLO_Q4_K, k) * n);
    float *dx = dput(c, x, (size_t)m * k * 4), *dy = dpoison(c, (size_t)m * n * 4);
    assert_int_equal(colo_op_linear(c->s, dw, COLO_Q4_K, NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
    dget(c, y, dy, (size_t)m * n * 4);
    for (int r = 0; r < m; r++) {
        assert_int_equal(colo_op_linear(c->s, dw, COLO_Q4_K, NULL, dx + (size_t)r * k, 0, dy, 0, 1, n, k), COLO_OK);
        dget(c, y1, dy, (size_t)n * 4);
        assert_memory_equal(y1, y + (size_t)r * n, (size_t)n * 4);
    }
    free(w), free(wd), free(x), free(y), free(y1);
    dfree_all(c);
    colo_cpu_int8_max_rows = saved;
}

/* gemm_q8 (every product of block-format weights on CPUs with AVX2,
 * prefill and decode alike): every block format, row counts around its
 * groups of 16 rows and its runs of weight rows, each output within the
 * bound of two 8-bit digits (1/128 of one digit's); and each row of a
 * prefill's product the same bits as the same row alone in a decode step,
 * in any lane of a group. */
static void test_linear_q8_many_rows(void **state)
{
    ctx_t *c = *state;
    if (!colo_cpu_gemm_q8_cpu())
        skip(); /* gemm_q8 does not run on this CPU (or COLO_CPU_GEMM_Q8=off) */
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1, COLO_Q5_0, COLO_Q5_1, COLO_Q8_0,
                                COLO_Q2_K, COLO_Q3_K, COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    const int shapes[][3] = {{1, 37, 256}, {2, 9, 768}, {16, 70, 512}, {17, 67, 512}, {33, 129, 256}, {70, 17, 256}};
    qerr_scale = 1.0 / 128;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            colo_stream_set_decode(c->s, i % 3 == 0);
            case_linear(c, c->s, true, types[t], shapes[i][0], shapes[i][1], shapes[i][2], i % 2 == 1);
        }
    qerr_scale = 1.0;
    colo_stream_set_decode(c->s, false);
    const colo_dtype inv[] = {COLO_Q4_1, COLO_Q6_K, COLO_Q4_K, COLO_Q8_0};
    for (size_t t = 0; t < sizeof inv / sizeof *inv; t++) {
        int m = 37, n = 45, k = 512;
        float *wd;
        void *w = make_weights(inv[t], n, k, &wd);
        float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4), *y1 = malloc((size_t)n * 4);
        assert_true(x && y && y1);
        fill_normal(x, (int64_t)m * k, 1.0f);
        void *dw = dput(c, w, colo_dtype_row_bytes(inv[t], k) * n);
        float *dx = dput(c, x, (size_t)m * k * 4), *dy = dpoison(c, (size_t)m * n * 4);
        assert_int_equal(colo_op_linear(c->s, dw, inv[t], NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
        dget(c, y, dy, (size_t)m * n * 4);
        colo_stream_set_decode(c->s, true);
        for (int r = 0; r < m; r++) {
            assert_int_equal(colo_op_linear(c->s, dw, inv[t], NULL, dx + (size_t)r * k, 0, dy, 0, 1, n, k), COLO_OK);
            dget(c, y1, dy, (size_t)n * 4);
            if (memcmp(y1, y + (size_t)r * n, (size_t)n * 4))
                fail_msg("%s: row %d of a prefill of %d differs from it alone in a decode step",
                         colo_dtype_name(inv[t]), r, m);
        }
        colo_stream_set_decode(c->s, false);
        free(w), free(wd), free(x), free(y), free(y1);
        dfree_all(c);
    }
}

/* A decode step's product packs x in each of its chunks (linear.c,
 * PACK_IN_CHUNK_ROWS); one whose output overwrites its x (y == x) must not,
 * as a later chunk would pack what an earlier one wrote: it gives what the
 * same product into another buffer gives, for linear and linear_multi. */
static void test_linear_q8_in_place(void **state)
{
    ctx_t *c = *state;
    if (!colo_cpu_gemm_q8_cpu())
        skip();
    int m = 2, n = 1024, k = 1024;
    float *wd;
    void *w = make_weights(COLO_Q4_1, n, k, &wd);
    float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4), *z = malloc((size_t)m * n * 4);
    assert_true(x && y && z);
    fill_normal(x, (int64_t)m * k, 1.0f);
    void *dw = dput(c, w, colo_dtype_row_bytes(COLO_Q4_1, k) * n);
    float *dx = dput(c, x, (size_t)m * k * 4), *dy = dpoison(c, (size_t)m * n * 4);
    colo_stream_set_decode(c->s, true);
    assert_int_equal(colo_op_linear(c->s, dw, COLO_Q4_1, NULL, dx, 0, dy, 0, m, n, k), COLO_OK);
    dget(c, y, dy, (size_t)m * n * 4);
    assert_int_equal(colo_op_linear(c->s, dw, COLO_Q4_1, NULL, dx, 0, dx, 0, m, n, k), COLO_OK);
    dget(c, z, dx, (size_t)m * n * 4);
    assert_memory_equal(z, y, (size_t)m * n * 4);
    float *dx2 = dput(c, x, (size_t)m * k * 4);
    colo_linear_out out[2] = {{.w = dw, .w_type = COLO_Q4_1, .y = dy, .n = n},
                              {.w = dw, .w_type = COLO_Q4_1, .y = dx2, .n = n}};
    assert_int_equal(colo_op_linear_multi(c->s, dx2, 0, m, k, out, 2), COLO_OK);
    dget(c, z, dx2, (size_t)m * n * 4);
    assert_memory_equal(z, y, (size_t)m * n * 4);
    colo_stream_set_decode(c->s, false);
    free(w), free(wd), free(x), free(y), free(z);
    dfree_all(c);
}

/* add_rmsnorm (a layer's residual add and the norm after it, in one op)
 * gives the bits of rmsnorm, add and rmsnorm in turn, with and without the
 * norm of what is added, for 1 to 5 rows, its output over h or apart, its
 * sum over x or apart. */
static void test_add_rmsnorm_fused(void **state)
{
    ctx_t *c = *state;
    int n = 576;
    for (int rows = 1; rows <= 5; rows += 2)
        for (int pre = 0; pre < 2; pre++)
            for (int apart = 0; apart < 4; apart++) { /* bit 0: y apart from h; bit 1: x_out apart from x */
                size_t bytes = (size_t)rows * n * 4;
                float *x = malloc(bytes), *h = malloc(bytes), *w = malloc((size_t)n * 4), *w2 = malloc((size_t)n * 4);
                float *want_x = malloc(bytes), *want_y = malloc(bytes), *got = malloc(bytes);
                assert_true(x && h && w && w2 && want_x && want_y && got);
                fill_normal(x, (int64_t)rows * n, 3.0f);
                fill_normal(h, (int64_t)rows * n, 1.0f);
                fill_normal(w, n, 1.0f);
                fill_normal(w2, n, 1.0f);
                float *dx = dput(c, x, bytes), *dh = dput(c, h, bytes), *dw = dput(c, w, (size_t)n * 4);
                float *dw2 = dput(c, w2, (size_t)n * 4), *dy = apart & 1 ? dpoison(c, bytes) : dh;
                if (pre)
                    assert_int_equal(colo_op_rmsnorm(c->s, dh, dw2, dh, rows, n, 1e-6f), COLO_OK);
                assert_int_equal(colo_op_add(c->s, dx, dh, dx, (int64_t)rows * n), COLO_OK);
                assert_int_equal(colo_op_rmsnorm(c->s, dx, dw, dy, rows, n, 1e-6f), COLO_OK);
                dget(c, want_x, dx, bytes);
                dget(c, want_y, dy, bytes);
                float *fx = dput(c, x, bytes), *fh = dput(c, h, bytes), *fy = apart & 1 ? dpoison(c, bytes) : fh;
                float *fxo = apart & 2 ? dpoison(c, bytes) : fx;
                assert_int_equal(colo_op_add_rmsnorm(c->s, fx, fh, pre ? dw2 : NULL, dw, fxo, fy, rows, n, 1e-6f),
                                 COLO_OK);
                dget(c, got, fxo, bytes);
                assert_memory_equal(got, want_x, bytes);
                dget(c, got, fy, bytes);
                assert_memory_equal(got, want_y, bytes);
                if (apart & 2) { /* x itself unchanged */
                    dget(c, got, fx, bytes);
                    assert_memory_equal(got, x, bytes);
                }
                free(x), free(h), free(w), free(w2), free(want_x), free(want_y), free(got);
                dfree_all(c);
            }
    float v = 0;
    assert_int_equal(colo_op_add_rmsnorm(c->s, NULL, &v, NULL, &v, &v, &v, 1, 1, 1e-6f), COLO_EINVAL);
    assert_int_equal(colo_op_add_rmsnorm(c->s, &v, &v, NULL, &v, &v, &v, 0, 1, 1e-6f), COLO_EINVAL);
    assert_int_equal(colo_op_add_rmsnorm(c->s, &v, &v, NULL, &v, NULL, &v, 1, 1, 1e-6f), COLO_EINVAL);
}

/* add_rmsnorm_multi (a residual add, the norm after it and the products of
 * the normed rows, in one op: a decode step's norm formed in each of the
 * products' chunks) gives the residual and the products add_rmsnorm then
 * linear_multi give, bit for bit: 1 to 5 rows (5 takes the two ops), with
 * and without the norm of what is added, 1 to 3 products of formats read
 * in place and not; and refuses a sum over its own input. */
static void test_add_rmsnorm_multi_fused(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_Q4_1, COLO_Q4_K, COLO_Q8_0, COLO_Q5_0, COLO_Q6_K};
    enum { K = 512 };
    const int ns[3] = {96, 40, 72};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (int m = 1; m <= 5; m += 2)
            for (int pre = 0; pre < 2; pre++) {
                int n_out = 1 + (int)((t + (size_t)m) % 3);
                size_t xb = (size_t)m * K * 4;
                float *x = malloc(xb), *h = malloc(xb), *w = malloc(K * 4), *w2 = malloc(K * 4);
                unsigned char *want = malloc(xb + (size_t)m * 208 * 4), *got = malloc(xb + (size_t)m * 208 * 4);
                assert_true(x && h && w && w2 && want && got);
                fill_normal(x, (int64_t)m * K, 3.0f);
                fill_normal(h, (int64_t)m * K, 1.0f);
                fill_normal(w, K, 1.0f);
                fill_normal(w2, K, 1.0f);
                float *dw = dput(c, w, K * 4), *dw2 = dput(c, w2, K * 4);
                void *wts[3];
                float *wd[3];
                colo_linear_out out[3];
                for (int i = 0; i < n_out; i++) {
                    wts[i] = make_weights(types[t], ns[i], K, &wd[i]);
                    out[i] = (colo_linear_out){dput(c, wts[i], colo_dtype_row_bytes(types[t], K) * ns[i]), types[t],
                                               NULL, NULL, 0, ns[i]};
                }
                unsigned char *res[2] = {want, got};
                colo_stream_set_decode(c->s, true);
                for (int fused = 0; fused < 2; fused++) {
                    float *dx = dput(c, x, xb), *dh = dput(c, h, xb), *dxo = dpoison(c, xb);
                    for (int i = 0; i < n_out; i++)
                        out[i].y = dpoison(c, (size_t)m * ns[i] * 4);
                    if (fused) {
                        colo_stream_stats st0, st1;
                        assert_int_equal(colo_stream_sync(c->s), COLO_OK);
                        colo_stream_get_stats(c->s, &st0);
                        assert_int_equal(colo_op_add_rmsnorm_multi(c->s, dx, dh, pre ? dw2 : NULL, dw, dxo, dh, m, K,
                                                                   1e-6f, out, n_out),
                                         COLO_OK);
                        assert_int_equal(colo_stream_sync(c->s), COLO_OK);
                        colo_stream_get_stats(c->s, &st1);
                        if (m <= 4) /* one op: the norm formed in the products' chunks */
                            assert_int_equal(st1.ops - st0.ops, 1);
                    } else {
                        assert_int_equal(colo_op_add_rmsnorm(c->s, dx, dh, pre ? dw2 : NULL, dw, dxo, dh, m, K, 1e-6f),
                                         COLO_OK);
                        assert_int_equal(colo_op_linear_multi(c->s, dh, 0, m, K, out, n_out), COLO_OK);
                    }
                    size_t off = xb;
                    dget(c, res[fused], dxo, xb);
                    for (int i = 0; i < n_out; i++) {
                        dget(c, res[fused] + off, out[i].y, (size_t)m * ns[i] * 4);
                        off += (size_t)m * ns[i] * 4;
                    }
                    if (fused && memcmp(got, want, off))
                        fail_msg("%s, %d rows, %s norm of h, %d products: the fused op differs from the two ops",
                                 colo_dtype_name(types[t]), m, pre ? "with" : "without", n_out);
                }
                colo_stream_set_decode(c->s, false);
                float *dx = dput(c, x, xb), *dh = dput(c, h, xb);
                assert_int_equal(colo_op_add_rmsnorm_multi(c->s, dx, dh, NULL, dw, dx, dh, m, K, 1e-6f, out, n_out),
                                 COLO_EINVAL);
                for (int i = 0; i < n_out; i++)
                    free(wts[i]), free(wd[i]);
                free(x), free(h), free(w), free(w2), free(want), free(got);
                dfree_all(c);
            }
}

/* qk_store (a layer's query and key norms, rope and KV store in one op)
 * gives the bits of rmsnorm, rope and kv_store in turn: with and without
 * the per-head norms, GPT-J and NeoX rotations, F32, F16 and Q8_0 caches,
 * 1 to 5 tokens at scattered positions and slots; and so does it with a
 * table of the rotations it fills (a step's first layer), and with that
 * table read by a later call, which takes its angles from the table alone
 * (here given positions that are all 0). */
static void test_qk_store_fused(void **state)
{
    ctx_t *c = *state;
    enum { NQ = 4, NK = 2, HD = 64, SLOTS = 16 };
    const colo_dtype kv_types[] = {COLO_F32, COLO_F16, COLO_Q8_0};
    for (int rows = 1; rows <= 5; rows += 2)
        for (int norm = 0; norm < 2; norm++)
            for (size_t kt = 0; kt < sizeof kv_types / sizeof *kv_types; kt++) {
                colo_dtype t = kv_types[kt];
                size_t qb = (size_t)rows * NQ * HD * 4, kb = (size_t)rows * NK * HD * 4;
                size_t cb = colo_dtype_row_bytes(t, NK * HD) * SLOTS;
                float *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *wq = malloc(HD * 4), *wk = malloc(HD * 4);
                size_t ob = qb + kb + 2 * cb;
                unsigned char *want = malloc(ob), *got = malloc(3 * ob);
                assert_true(q && k && v && wq && wk && want && got);
                fill_normal(q, (int64_t)rows * NQ * HD, 2.0f);
                fill_normal(k, (int64_t)rows * NK * HD, 2.0f);
                fill_normal(v, (int64_t)rows * NK * HD, 2.0f);
                fill_normal(wq, HD, 1.0f);
                fill_normal(wk, HD, 1.0f);
                int32_t pos[5] = {7, 300, 8191, 0, 42}, slot[5] = {3, 15, 0, 9, 4};
                int32_t zero[5] = {0};
                int32_t *dpos = dput(c, pos, sizeof pos), *dslot = dput(c, slot, sizeof slot);
                int32_t *dzero = dput(c, zero, sizeof zero);
                float *rot = dpoison(c, (size_t)rows * HD * sizeof(float));
                float *dwq = dput(c, wq, HD * 4), *dwk = dput(c, wk, HD * 4);
                colo_qk_desc d = {.rope = {.n_heads = NQ, .head_dim = HD, .n_rot = HD, .neox = rows == 3,
                                           .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f},
                                  .n_kv_heads = NK, .q_norm = norm ? dwq : NULL, .k_norm = norm ? dwk : NULL,
                                  .eps = 1e-6f, .kv_type = t};
                unsigned char *out[4] = {want, got, got + ob, got + 2 * ob};
                for (int fused = 0; fused < 4; fused++) { /* composed; fused; filling the table; reading it */
                    float *dq = dput(c, q, qb), *dk = dput(c, k, kb), *dv = dput(c, v, kb);
                    void *kc = dpoison(c, cb), *vc = dpoison(c, cb);
                    if (fused) {
                        colo_qk_desc df = d;
                        df.rot = fused > 1 ? rot : NULL, df.rot_fill = fused == 2;
                        assert_int_equal(colo_op_qk_store(c->s, &df, dq, dk, dv, fused == 3 ? dzero : dpos, dslot,
                                                          rows, kc, vc),
                                         COLO_OK);
                    } else {
                        if (norm) {
                            assert_int_equal(colo_op_rmsnorm(c->s, dq, dwq, dq, rows * NQ, HD, 1e-6f), COLO_OK);
                            assert_int_equal(colo_op_rmsnorm(c->s, dk, dwk, dk, rows * NK, HD, 1e-6f), COLO_OK);
                        }
                        colo_rope_desc kr = d.rope;
                        kr.n_heads = NK;
                        assert_int_equal(colo_op_rope(c->s, dq, 0, dpos, rows, &d.rope), COLO_OK);
                        assert_int_equal(colo_op_rope(c->s, dk, 0, dpos, rows, &kr), COLO_OK);
                        assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, t, dslot, rows, NK * HD),
                                         COLO_OK);
                    }
                    dget(c, out[fused], dq, qb);
                    dget(c, out[fused] + qb, dk, kb);
                    dget(c, out[fused] + qb + kb, kc, cb);
                    dget(c, out[fused] + qb + kb + cb, vc, cb);
                }
                for (int f = 0; f < 3; f++)
                    assert_memory_equal(got + f * ob, want, ob);
                free(q), free(k), free(v), free(wq), free(wk), free(want), free(got);
                dfree_all(c);
            }
    colo_qk_desc bad = {.rope = {.n_heads = NQ, .head_dim = HD, .n_rot = HD, .freq_base = 10000.0f,
                                 .freq_scale = 1.0f, .attn_factor = 1.0f},
                        .n_kv_heads = NK, .q_norm = (const float *)state, .kv_type = COLO_F16};
    float f = 0;
    int32_t i = 0;
    assert_int_equal(colo_op_qk_store(c->s, &bad, &f, &f, &f, &i, &i, 1, &f, &f), COLO_EINVAL); /* one norm only */
}

/* linear_glu (a decode step's gate and down projection in one op) gives
 * the bits of swiglu or geglu then linear, for 1 to 5 rows (the fifth
 * takes the two ops) of block formats gemm_q8 reads in place and not. */
static void test_linear_glu_fused(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_Q4_1, COLO_Q4_K, COLO_Q8_0, COLO_Q5_K};
    int n = 96, k = 512;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (int m = 1; m <= 5; m += 2)
            for (int tanh_gelu = 0; tanh_gelu < 2; tanh_gelu++) {
                float *wd;
                void *w = make_weights(types[t], n, k, &wd);
                size_t xb = (size_t)m * k * 4, yb = (size_t)m * n * 4;
                float *g = malloc(xb), *u = malloc(xb), *want = malloc(yb), *got = malloc(yb);
                assert_true(g && u && want && got);
                fill_normal(g, (int64_t)m * k, 2.0f);
                fill_normal(u, (int64_t)m * k, 1.0f);
                void *dw = dput(c, w, colo_dtype_row_bytes(types[t], k) * n);
                float *dg = dput(c, g, xb), *du = dput(c, u, xb), *dy = dpoison(c, yb);
                colo_stream_set_decode(c->s, true);
                if (tanh_gelu)
                    assert_int_equal(colo_op_geglu(c->s, dg, du, dg, (int64_t)m * k), COLO_OK);
                else
                    assert_int_equal(colo_op_swiglu(c->s, dg, du, dg, (int64_t)m * k), COLO_OK);
                assert_int_equal(colo_op_linear(c->s, dw, types[t], NULL, dg, 0, dy, 0, m, n, k), COLO_OK);
                dget(c, want, dy, yb);
                float *fg = dput(c, g, xb), *fy = dpoison(c, yb);
                assert_int_equal(colo_op_linear_glu(c->s, dw, types[t], NULL, fg, du, tanh_gelu, fy, m, n, k), COLO_OK);
                dget(c, got, fy, yb);
                colo_stream_set_decode(c->s, false);
                if (memcmp(got, want, yb))
                    fail_msg("%s, %d rows, %s: the fused op differs from the two ops", colo_dtype_name(types[t]), m,
                             tanh_gelu ? "geglu" : "swiglu");
                free(w), free(wd), free(g), free(u), free(want), free(got);
                dfree_all(c);
            }
}

/* A stream created with exact_activations on a device without it (a
 * model's option) computes what a device with exact_activations computes,
 * bit for bit, in prefill and decode, where the device's other streams
 * round activations (their products differ). */
static void test_stream_exact_activations(void **state)
{
    ctx_t *c = *state;
    char err[256];
    colo_stream_config sc = {.priority = COLO_PRIO_NORMAL, .exact_activations = true};
    colo_stream *es = colo_stream_create(c->dev, &sc, err, sizeof err);
    assert_non_null(es);
    const colo_dtype types[] = {COLO_Q4_1, COLO_Q4_K, COLO_Q6_K};
    const int rows[] = {1, 5, 40};
    const int n = 70, k = 512;
    int differ = 0;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            int m = rows[ri];
            float *wd, *x = malloc((size_t)m * k * 4);
            float *ye = malloc((size_t)m * n * 4), *yd = malloc((size_t)m * n * 4), *yq = malloc((size_t)m * n * 4);
            assert_true(x && ye && yd && yq);
            void *w = make_weights(types[t], n, k, &wd);
            fill_normal(x, (int64_t)m * k, 1.0f);
            void *dw = dput(c, w, colo_dtype_row_bytes(types[t], k) * n);
            float *dx = dput(c, x, (size_t)m * k * 4);
            float *de = dpoison(c, (size_t)m * n * 4), *dd = dpoison(c, (size_t)m * n * 4);
            float *dq = dpoison(c, (size_t)m * n * 4);
            assert_int_equal(colo_stream_sync(c->s), COLO_OK); /* the copies and poison, before es reads them */
            colo_stream *ss[3] = {es, c->exact_s, c->s};
            float *outs[3] = {de, dd, dq};
            for (int i = 0; i < 3; i++) {
                colo_stream_set_decode(ss[i], m == 1);
                assert_int_equal(colo_op_linear(ss[i], dw, types[t], NULL, dx, 0, outs[i], 0, m, n, k), COLO_OK);
                assert_int_equal(colo_stream_sync(ss[i]), COLO_OK);
                colo_stream_set_decode(ss[i], false);
            }
            dget(c, ye, de, (size_t)m * n * 4);
            dget(c, yd, dd, (size_t)m * n * 4);
            dget(c, yq, dq, (size_t)m * n * 4);
            if (memcmp(ye, yd, (size_t)m * n * 4))
                fail_msg("%s, %d rows: the exact stream differs from the exact device", colo_dtype_name(types[t]), m);
            differ += memcmp(ye, yq, (size_t)m * n * 4) != 0;
            free(w), free(wd), free(x), free(ye), free(yd), free(yq);
            dfree_all(c);
        }
    /* The default streams round (else this test shows nothing): on gemm_q8
     * every product, elsewhere the single row's (int8). */
    assert_int_equal(differ, colo_cpu_gemm_q8_cpu() ? 9 : 3);
    colo_stream_destroy(es);
}

/* A mixed step (colo_stream_set_decode_rows): the first d rows of a
 * product are computed as a decode step of those d rows alone, the others
 * as a prefill of the rest alone, for linear and linear_multi, for block
 * formats (the int8 and gemm_q8 paths) and F32; decode rows get the 8-bit
 * products, not the prefill's exact ones. */
static void test_linear_mixed_rows(void **state)
{
    ctx_t *c = *state;
    const colo_dtype types[] = {COLO_Q4_1, COLO_Q6_K, COLO_F32};
    const int cases[][2] = {{1, 5}, {2, 3}, {7, 4}, {5, 1}, {12, 9}}; /* decode rows, prefill rows */
    const int n = 70, k = 256;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            int d = cases[ci][0], m = d + cases[ci][1];
            float *wd;
            void *w = make_weights(types[t], n, k, &wd);
            float *x = malloc((size_t)m * k * 4);
            fill_normal(x, (int64_t)m * k, 1.0f);
            void *dw = dput(c, w, colo_dtype_row_bytes(types[t], k) * n);
            float *dx = dput(c, x, (size_t)m * k * 4);
            float *dmix = dpoison(c, (size_t)m * n * 4), *dmulti = dpoison(c, (size_t)m * n * 4);
            float *ddec = dpoison(c, (size_t)d * n * 4), *dpre = dpoison(c, (size_t)(m - d) * n * 4);
            colo_stream_set_decode_rows(c->s, d);
            assert_int_equal(colo_op_linear(c->s, dw, types[t], NULL, dx, 0, dmix, 0, m, n, k), COLO_OK);
            colo_linear_out out = {dw, types[t], NULL, dmulti, 0, n};
            assert_int_equal(colo_op_linear_multi(c->s, dx, 0, m, k, &out, 1), COLO_OK);
            assert_int_equal(colo_stream_decode_rows(c->s), d);
            colo_stream_set_decode(c->s, true);
            assert_int_equal(colo_op_linear(c->s, dw, types[t], NULL, dx, 0, ddec, 0, d, n, k), COLO_OK);
            colo_stream_set_decode(c->s, false);
            assert_int_equal(colo_op_linear(c->s, dw, types[t], NULL, dx + (size_t)d * k, 0, dpre, 0, m - d, n, k),
                             COLO_OK);
            size_t all = (size_t)m * n * 4, dec = (size_t)d * n * 4;
            float *mix = malloc(all), *multi = malloc(all), *want = malloc(all);
            dget(c, mix, dmix, all);
            dget(c, multi, dmulti, all);
            dget(c, want, ddec, dec);
            dget(c, want + (size_t)d * n, dpre, all - dec);
            if (memcmp(mix, want, all) || memcmp(multi, want, all))
                fail_msg("%s, %d decode rows of %d: a mixed step's rows differ from the decode and prefill products",
                         colo_dtype_name(types[t]), d, m);
            free(mix), free(multi), free(want), free(w), free(wd), free(x);
            dfree_all(c);
        }
    colo_stream_set_decode(c->s, false);
}

/* One row's output is the same bits whatever rows come with it and however
 * many (1..70: a decode step's few rows and a prefill's many), at different
 * positions, for quantized, F32 and F16 weights and a bias, with the
 * columns split among the workers, on stream s: the default one (gemm_q8
 * where the CPU has AVX2) and one with exact activations (F32 chains,
 * unpacked below 9 rows and in tiles above). This is what lets a prompt
 * computed in two steps (a prefix-cache hit) match the same prompt
 * computed in one, and a sequence's decode step match whatever shares it.
 * (A single row of quantized weights on the default stream off gemm_q8
 * takes the one-digit int8 path: from 2 rows there.) */
static void rows_invariant(ctx_t *c, colo_stream *s)
{
    const colo_dtype types[] = {COLO_Q4_1, COLO_Q4_0, COLO_Q6_K, COLO_F32, COLO_F16};
    const int n = 83, k = 256, max_m = 70;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        float *wd, *bias = malloc((size_t)n * 4), *row = malloc((size_t)k * 4);
        float *x = malloc((size_t)max_m * k * 4), *y = malloc((size_t)max_m * n * 4), *first = malloc((size_t)n * 4);
        assert_true(bias && row && x && y && first);
        void *w = make_weights(types[t], n, k, &wd);
        fill_normal(bias, n, 1.0f);
        fill_normal(row, k, 1.0f);
        void *dw = dput(c, w, colo_dtype_row_bytes(types[t], k) * n);
        float *db = dput(c, bias, (size_t)n * 4), *dx = dalloc(c, (size_t)max_m * k * 4);
        float *dy = dalloc(c, (size_t)max_m * n * 4);
        assert_int_equal(colo_stream_sync(c->s), COLO_OK); /* the copies above, before s reads them */
        bool plain = types[t] == COLO_F32 || types[t] == COLO_F16;
        int m0 = plain || s == c->exact_s || colo_cpu_gemm_q8_cpu() ? 1 : 2;
        for (int m = m0; m <= max_m; m++) {
            int positions[] = {0, m - 1, (m * 7 + 3) % m};
            for (int pi = 0; pi < 3; pi++) {
                int pos = positions[pi];
                fill_normal(x, (int64_t)m * k, 1.0f);
                memcpy(x + (size_t)pos * k, row, (size_t)k * 4);
                assert_int_equal(colo_memcpy_h2d(s, dx, x, (size_t)m * k * 4), COLO_OK);
                assert_int_equal(colo_op_linear(s, dw, types[t], db, dx, 0, dy, 0, m, n, k), COLO_OK);
                assert_int_equal(colo_stream_sync(s), COLO_OK);
                dget(c, y, dy, (size_t)m * n * 4);
                if (m == m0 && pi == 0)
                    memcpy(first, y, (size_t)n * 4);
                else if (memcmp(first, y + (size_t)pos * n, (size_t)n * 4))
                    fail_msg("%s: the row at position %d of %d differs from it at 0 of %d",
                             colo_dtype_name(types[t]), pos, m, m0);
            }
        }
        free(w), free(wd), free(bias), free(row), free(x), free(y), free(first);
        dfree_all(c);
    }
}

static void test_linear_rows_invariant(void **state)
{
    ctx_t *c = *state;
    rows_invariant(c, c->s);
    rows_invariant(c, c->exact_s);
}

/* Attention in a prefill: the last tokens of a sequence computed in a step
 * of their own (as after a prefix-cache hit: few (token, KV head) pairs,
 * many keys) get the bits they get in the step of the whole sequence. */
static void test_attention_prefill_row_invariant(void **state)
{
    ctx_t *c = *state;
    enum { L = 300, NH = 9, NKV = 3, HD = 64, BS = 16, MAXB = (L + BS - 1) / BS };
    int kv_dim = NKV * HD;
    float *k = malloc((size_t)L * kv_dim * 4), *v = malloc((size_t)L * kv_dim * 4), *q = malloc((size_t)L * NH * HD * 4);
    float *all = malloc((size_t)L * NH * HD * 4), *tail = malloc((size_t)3 * NH * HD * 4);
    int32_t table[MAXB], slot[L], seq[L], pos[L];
    assert_true(k && v && q && all && tail);
    fill_normal(k, (int64_t)L * kv_dim, 1), fill_normal(v, (int64_t)L * kv_dim, 1);
    fill_normal(q, (int64_t)L * NH * HD, 1);
    for (int i = 0; i < MAXB; i++)
        table[i] = MAXB - 1 - i;
    for (int p = 0; p < L; p++)
        slot[p] = table[p / BS] * BS + p % BS, seq[p] = 0, pos[p] = p;
    size_t cache_bytes = (size_t)MAXB * BS * kv_dim * 2;
    void *kc = dpoison(c, cache_bytes), *vc = dpoison(c, cache_bytes);
    float *dk = dput(c, k, (size_t)L * kv_dim * 4), *dv = dput(c, v, (size_t)L * kv_dim * 4);
    assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, COLO_F16, dput(c, slot, sizeof slot), L, kv_dim),
                     COLO_OK);
    colo_attn_desc d = {.n_tokens = L, .n_head = NH, .n_kv_head = NKV, .head_dim = HD, .block_size = BS,
                        .max_blocks = MAXB, .max_pos = L - 1, .scale = 0.125f, .kv_type = COLO_F16,
                        .tok_seq = dput(c, seq, sizeof seq), .tok_pos = dput(c, pos, sizeof pos),
                        .block_table = dput(c, table, sizeof table)};
    float *dq = dput(c, q, (size_t)L * NH * HD * 4), *dout = dpoison(c, (size_t)L * NH * HD * 4);
    assert_int_equal(colo_op_attention(c->s, &d, dq, kc, vc, dout), COLO_OK);
    dget(c, all, dout, (size_t)L * NH * HD * 4);
    for (int n = 1; n <= 3; n++) {
        d.n_tokens = n;
        d.tok_seq = dput(c, seq, (size_t)n * 4), d.tok_pos = dput(c, pos + L - n, (size_t)n * 4);
        float *dqt = dput(c, q + (size_t)(L - n) * NH * HD, (size_t)n * NH * HD * 4);
        assert_int_equal(colo_op_attention(c->s, &d, dqt, kc, vc, dout), COLO_OK);
        dget(c, tail, dout, (size_t)n * NH * HD * 4);
        if (memcmp(tail, all + (size_t)(L - n) * NH * HD, (size_t)n * NH * HD * 4))
            fail_msg("the last %d tokens alone differ from them in the whole prefill", n);
    }
    /* decode steps (whose tokens' keys are split over workers): the last
     * token alone, and among tokens of other lengths, gets the same bits */
    int32_t dpos[4] = {L - 1, 17, 260, 99}, dseq[4] = {0, 0, 0, 0};
    float *dqd = dalloc(c, (size_t)4 * NH * HD * 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(colo_memcpy_h2d(c->s, dqd + (size_t)i * NH * HD, q + (size_t)dpos[i] * NH * HD,
                                         (size_t)NH * HD * 4),
                         COLO_OK);
    colo_stream_set_decode(c->s, true);
    for (int n = 1; n <= 4; n += 3) {
        d.n_tokens = n;
        d.tok_seq = dput(c, dseq, (size_t)n * 4), d.tok_pos = dput(c, dpos, (size_t)n * 4);
        assert_int_equal(colo_op_attention(c->s, &d, dqd, kc, vc, dout), COLO_OK);
        dget(c, tail, dout, (size_t)NH * HD * 4);
        if (memcmp(tail, all + (size_t)(L - 1) * NH * HD, (size_t)NH * HD * 4))
            fail_msg("the last token in a decode step of %d differs from it in the prefill", n);
    }
    colo_stream_set_decode(c->s, false);
    free(k), free(v), free(q), free(all), free(tail);
    dfree_all(c);
}

/* Attention of a group of query heads sharing a KV head (scored in pairs
 * on AVX2): each head gets the bits it gets as the only head of its
 * group, in a prefill (blocks of tokens, keys in tiles cut at each token)
 * and in a decode step, for an even and an odd group. */
static void test_attention_group_heads_alone(void **state)
{
    ctx_t *c = *state;
    enum { L = 45, BS = 16, MAXB = (L + BS - 1) / BS };
    const int shapes[][2] = {{4, 256}, {3, 64}}; /* (group, head_dim), one KV head */
    for (int sh = 0; sh < 2; sh++) {
        int group = shapes[sh][0], hd = shapes[sh][1];
        size_t q_floats = (size_t)L * group * hd;
        float *k = malloc((size_t)L * hd * 4), *v = malloc((size_t)L * hd * 4), *q = malloc(q_floats * 4);
        float *all = malloc(q_floats * 4), *one = malloc((size_t)L * hd * 4);
        int32_t table[MAXB], slot[L], seq[L], pos[L];
        assert_true(k && v && q && all && one);
        fill_normal(k, (int64_t)L * hd, 1), fill_normal(v, (int64_t)L * hd, 1), fill_normal(q, (int64_t)q_floats, 1);
        for (int i = 0; i < MAXB; i++)
            table[i] = i;
        for (int p = 0; p < L; p++)
            slot[p] = p, seq[p] = 0, pos[p] = p;
        size_t cache_bytes = (size_t)MAXB * BS * hd * 2;
        void *kc = dpoison(c, cache_bytes), *vc = dpoison(c, cache_bytes);
        float *dk = dput(c, k, (size_t)L * hd * 4), *dv = dput(c, v, (size_t)L * hd * 4);
        assert_int_equal(colo_op_kv_store(c->s, dk, 0, dv, 0, kc, vc, COLO_F16, dput(c, slot, sizeof slot), L, hd),
                         COLO_OK);
        float *dq = dput(c, q, q_floats * 4), *dout = dpoison(c, q_floats * 4);
        for (int decode = 0; decode < 2; decode++) {
            int n = decode ? 1 : L; /* a decode step: the last token */
            colo_attn_desc d = {.n_tokens = n, .n_head = group, .n_kv_head = 1, .head_dim = hd, .block_size = BS,
                                .max_blocks = MAXB, .max_pos = L - 1, .scale = 0.0625f, .kv_type = COLO_F16,
                                .tok_seq = dput(c, seq, (size_t)n * 4), .tok_pos = dput(c, pos + L - n, (size_t)n * 4),
                                .block_table = dput(c, table, sizeof table)};
            const float *dqn = dq + (size_t)(L - n) * group * hd;
            colo_stream_set_decode(c->s, decode);
            assert_int_equal(colo_op_attention(c->s, &d, dqn, kc, vc, dout), COLO_OK);
            dget(c, all, dout, (size_t)n * group * hd * 4);
            for (int h = 0; h < group; h++) {
                colo_attn_desc dh = d;
                dh.n_head = 1, dh.q_stride = group * hd;
                assert_int_equal(colo_op_attention(c->s, &dh, dqn + (size_t)h * hd, kc, vc, dout), COLO_OK);
                dget(c, one, dout, (size_t)n * hd * 4);
                for (int t = 0; t < n; t++)
                    if (memcmp(one + (size_t)t * hd, all + ((size_t)t * group + h) * hd, (size_t)hd * 4))
                        fail_msg("group of %d x %d, %s: head %d of token %d differs from it alone", group, hd,
                                 decode ? "decode" : "prefill", h, t);
            }
        }
        colo_stream_set_decode(c->s, false);
        free(k), free(v), free(q), free(all), free(one);
        dfree_all(c);
    }
}

/* The tests above that take gemm_q8 run again on its AVX2 version (the
 * version in use is otherwise the CPU's best: AVX512-VNNI where it has it);
 * skipped where the CPU lacks AVX2. */
static colo_cpu_q8_isa isa_before;

static int use_avx2(void **state)
{
    (void)state;
    isa_before = colo_cpu_gemm_q8_isa();
    colo_cpu_gemm_q8_set_isa(COLO_CPU_Q8_AVX2);
    return 0;
}

static int restore_isa(void **state)
{
    (void)state;
    return colo_cpu_gemm_q8_set_isa(isa_before) ? 0 : -1;
}

static bool on_avx2(void) { return colo_cpu_gemm_q8_isa() == COLO_CPU_Q8_AVX2; }

static void test_linear_q8_many_rows_avx2(void **state)
{
    if (!on_avx2())
        skip();
    test_linear_q8_many_rows(state);
}

static void test_linear_mixed_rows_avx2(void **state)
{
    if (!on_avx2())
        skip();
    test_linear_mixed_rows(state);
}

static void test_linear_rows_invariant_avx2(void **state)
{
    if (!on_avx2())
        skip();
    rows_invariant(*state, ((ctx_t *)*state)->s);
}

static void test_linear_multi_avx2(void **state)
{
    if (!on_avx2())
        skip();
    test_linear_multi(state);
}

#define AVX2_TEST(f) cmocka_unit_test_setup_teardown(f, use_avx2, restore_isa)

int main(void)
{
    const struct CMUnitTest tests[] = {PARITY_TESTS, cmocka_unit_test(test_linear_int8_many_rows),
                                       cmocka_unit_test(test_linear_q8_many_rows),
                                       cmocka_unit_test(test_linear_q8_in_place),
                                       cmocka_unit_test(test_add_rmsnorm_fused),
                                       cmocka_unit_test(test_add_rmsnorm_multi_fused),
                                       cmocka_unit_test(test_qk_store_fused),
                                       cmocka_unit_test(test_linear_glu_fused),
                                       cmocka_unit_test(test_stream_exact_activations),
                                       cmocka_unit_test(test_linear_mixed_rows),
                                       cmocka_unit_test(test_linear_rows_invariant),
                                       cmocka_unit_test(test_attention_prefill_row_invariant),
                                       cmocka_unit_test(test_attention_group_heads_alone),
                                       AVX2_TEST(test_linear_q8_many_rows_avx2),
                                       AVX2_TEST(test_linear_mixed_rows_avx2),
                                       AVX2_TEST(test_linear_rows_invariant_avx2),
                                       AVX2_TEST(test_linear_multi_avx2)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
