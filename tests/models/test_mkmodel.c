/* colo-mkmodel: synthetic llama GGUFs read back with the reader: SmolLM2's
 * metadata keys and tensor names, shapes and types per --type, weights that
 * are the same seeded values in every type (within each format's rounding),
 * sensible scales, determinism, and a tokenizer that loads and encodes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "models/tokenizer/tokenizer.h"
#include "tools/mkmodel.h"

#define L 2
#define E 64
#define H 4
#define KVH 2
#define F 96
#define V 300

static char dir[256];
static const colo_dtype types[] = {COLO_F32, COLO_F16, COLO_Q4_1, COLO_Q8_0};
static const char *const type_names[] = {"f32", "f16", "q4_1", "q8_0"};

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/colo-test-mkmodel-XXXXXX", tmp);
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static colo_gguf *make(int ti, uint64_t seed, char *path, size_t len)
{
    char err[512];
    snprintf(path, len, "%s/%s-%llu.gguf", dir, type_names[ti], (unsigned long long)seed);
    colo_mkmodel_config c = {.n_layer = L, .n_embd = E, .n_head = H, .n_kv_head = KVH, .n_ff = F,
                             .n_vocab = V, .n_ctx = 512, .type = types[ti], .seed = seed};
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK)
        fail_msg("write: %s", err);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    if (!g)
        fail_msg("open: %s", err);
    return g;
}

static uint32_t u32(const colo_gguf *g, const char *key)
{
    uint32_t v;
    if (colo_gguf_get_u32(g, key, &v) != COLO_OK)
        fail_msg("key %s missing or not an integer", key);
    return v;
}

static void check_tensor(const colo_gguf *g, const char *name, colo_dtype type, int64_t ne0, int64_t ne1)
{
    const colo_gguf_tensor *t = colo_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("tensor %s missing", name);
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->n_dims != (ne1 > 1 ? 2 : 1))
        fail_msg("tensor %s: %s [%lld, %lld], want %s [%lld, %lld]", name, colo_dtype_name(t->type),
                 (long long)t->ne[0], (long long)t->ne[1], colo_dtype_name(type), (long long)ne0, (long long)ne1);
    assert_int_equal(t->bytes, colo_dtype_row_bytes(type, ne0) * (size_t)ne1);
}

/* The keys and tensors SmolLM2's GGUF has, with this model's values. */
static void test_layout_per_type(void **state)
{
    (void)state;
    for (int ti = 0; ti < 4; ti++) {
        char path[512];
        colo_gguf *g = make(ti, 1, path, sizeof path);
        colo_gguf_str s;
        assert_int_equal(colo_gguf_get_str(g, "general.architecture", &s), COLO_OK);
        assert_int_equal(s.len, 5);
        assert_memory_equal(s.ptr, "llama", 5);
        assert_int_equal(u32(g, "llama.block_count"), L);
        assert_int_equal(u32(g, "llama.context_length"), 512);
        assert_int_equal(u32(g, "llama.embedding_length"), E);
        assert_int_equal(u32(g, "llama.feed_forward_length"), F);
        assert_int_equal(u32(g, "llama.attention.head_count"), H);
        assert_int_equal(u32(g, "llama.attention.head_count_kv"), KVH);
        assert_int_equal(u32(g, "llama.rope.dimension_count"), E / H);
        assert_int_equal(u32(g, "llama.vocab_size"), V);
        float f;
        assert_int_equal(colo_gguf_get_f32(g, "llama.rope.freq_base", &f), COLO_OK);
        assert_true(f > 0);
        assert_int_equal(colo_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), COLO_OK);
        assert_true(f > 0 && f < 1e-3f);
        assert_int_equal(colo_gguf_get_str(g, "tokenizer.ggml.model", &s), COLO_OK);
        assert_memory_equal(s.ptr, "gpt2", 4);
        assert_int_equal(colo_gguf_get_str(g, "tokenizer.ggml.pre", &s), COLO_OK);
        assert_memory_equal(s.ptr, "smollm", 6);
        colo_gguf_type at;
        uint64_t n;
        const uint8_t *d;
        assert_int_equal(colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &at, &n, &d), COLO_OK);
        assert_int_equal(at, COLO_GGUF_STRING);
        assert_int_equal(n, V);
        assert_int_equal(colo_gguf_get_arr(g, "tokenizer.ggml.token_type", &at, &n, &d), COLO_OK);
        assert_int_equal(at, COLO_GGUF_I32);
        assert_int_equal(n, V);
        assert_int_equal(colo_gguf_get_arr(g, "tokenizer.ggml.merges", &at, &n, &d), COLO_OK);
        assert_true(n >= 5);
        assert_true(u32(g, "tokenizer.ggml.eos_token_id") < V);
        assert_true(u32(g, "tokenizer.ggml.bos_token_id") < V);
        static const uint32_t ftype[] = {0, 1, 3, 7}; /* llama.cpp's file types */
        assert_int_equal(u32(g, "general.file_type"), ftype[ti]);
        assert_int_equal(u32(g, "tokenizer.ggml.padding_token_id"), u32(g, "tokenizer.ggml.eos_token_id"));
        assert_int_equal(colo_gguf_get_str(g, "tokenizer.chat_template", &s), COLO_OK);
        assert_true(s.len > 20 && memmem(s.ptr, s.len, "<|im_start|>", 12));
        bool add_bos = true;
        assert_int_equal(colo_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), COLO_OK);
        assert_false(add_bos);

        /* Tied embeddings as in SmolLM2: no output.weight; Q4_1 models keep
         * the embedding in Q8_0 as SmolLM2's file does. */
        colo_dtype mt = types[ti], et = mt == COLO_Q4_1 ? COLO_Q8_0 : mt;
        int64_t hd = E / H;
        assert_int_equal(colo_gguf_n_tensors(g), 2 + 9 * L);
        assert_null(colo_gguf_find_tensor(g, "output.weight"));
        check_tensor(g, "token_embd.weight", et, E, V);
        check_tensor(g, "output_norm.weight", COLO_F32, E, 1);
        for (int l = 0; l < L; l++) {
            char nm[64];
#define CHECK(sfx, ty, a, b) (snprintf(nm, sizeof nm, "blk.%d." sfx ".weight", l), check_tensor(g, nm, ty, a, b))
            CHECK("attn_norm", COLO_F32, E, 1);
            CHECK("attn_q", mt, E, E);
            CHECK("attn_k", mt, E, KVH * hd);
            CHECK("attn_v", mt, E, KVH * hd);
            CHECK("attn_output", mt, E, E);
            CHECK("ffn_norm", COLO_F32, E, 1);
            CHECK("ffn_gate", mt, E, F);
            CHECK("ffn_up", mt, E, F);
            CHECK("ffn_down", mt, F, E);
#undef CHECK
        }
        colo_gguf_close(g);
    }
}

static void dequant(const colo_gguf_tensor *t, float *out)
{
    size_t rb = colo_dtype_row_bytes(t->type, t->ne[0]);
    for (int64_t r = 0; r < t->ne[1]; r++)
        colo_dequantize_row(t->type, (const char *)t->data + (size_t)r * rb, out + r * t->ne[0], t->ne[0]);
}

/* One seed gives the same weights in every type: each quantized tensor is
 * the F32 one within its format's rounding (GGML block definitions), and
 * the F32 values have the scale asked for. */
static void test_values_across_types(void **state)
{
    (void)state;
    char path[512];
    colo_gguf *ref = make(0, 42, path, sizeof path);
    float *a = malloc(sizeof(float) * V * E), *b = malloc(sizeof(float) * V * E);
    assert_non_null(a);
    assert_non_null(b);
    /* Matrices: mean ~0, standard deviation ~1/sqrt(row length). */
    const colo_gguf_tensor *q = colo_gguf_find_tensor(ref, "blk.0.ffn_down.weight");
    dequant(q, a);
    double sum = 0, sq = 0;
    int64_t cnt = q->ne[0] * q->ne[1];
    for (int64_t i = 0; i < cnt; i++)
        sum += a[i], sq += (double)a[i] * a[i];
    double mean = sum / (double)cnt, sd = sqrt(sq / (double)cnt - mean * mean);
    assert_true(fabs(mean) < 0.01);
    assert_true(fabs(sd * sqrt((double)F) - 1.0) < 0.05);
    /* Norms near 1. */
    const colo_gguf_tensor *nt = colo_gguf_find_tensor(ref, "blk.1.ffn_norm.weight");
    for (int64_t i = 0; i < E; i++) {
        float w = ((const float *)nt->data)[i];
        assert_true(w > 0.85f && w < 1.15f);
    }
    static const char *const names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.1.attn_v.weight",
                                        "blk.1.ffn_down.weight"};
    for (int ti = 1; ti < 4; ti++) {
        char p2[512];
        colo_gguf *g = make(ti, 42, p2, sizeof p2);
        for (int k = 0; k < 4; k++) {
            const colo_gguf_tensor *x = colo_gguf_find_tensor(ref, names[k]), *y = colo_gguf_find_tensor(g, names[k]);
            dequant(x, a);
            dequant(y, b);
            int64_t n = x->ne[0] * x->ne[1];
            /* Error bound per 32-block: F16 relative 2^-11; Q8_0 d/2 with d =
             * amax/127; Q4_1 d/2 with d = (max - min)/15; both plus the fp16
             * rounding of d (and m), under amax/1024. */
            for (int64_t blk = 0; blk < n; blk += 32) {
                float lo = a[blk], hi = a[blk], amax = 0;
                for (int j = 0; j < 32; j++) {
                    lo = fminf(lo, a[blk + j]), hi = fmaxf(hi, a[blk + j]);
                    amax = fmaxf(amax, fabsf(a[blk + j]));
                }
                float tol = y->type == COLO_F16    ? amax / 1024.0f
                            : y->type == COLO_Q8_0 ? amax / 127.0f * 0.5f + amax / 1024.0f
                                                   : (hi - lo) / 15.0f * 0.5f * 1.02f + amax / 1024.0f;
                for (int j = 0; j < 32; j++)
                    if (fabsf(a[blk + j] - b[blk + j]) > tol)
                        fail_msg("%s %s element %lld: %g vs %g (tolerance %g)", type_names[ti], names[k],
                                 (long long)(blk + j), a[blk + j], b[blk + j], tol);
            }
        }
        colo_gguf_close(g);
    }
    colo_gguf_close(ref);
    free(a);
    free(b);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void test_deterministic(void **state)
{
    (void)state;
    char p1[512], p2[512], p3[512];
    colo_gguf_close(make(2, 7, p1, sizeof p1));
    char moved[600];
    snprintf(moved, sizeof moved, "%s.first", p1);
    assert_int_equal(rename(p1, moved), 0);
    colo_gguf_close(make(2, 7, p2, sizeof p2));
    colo_gguf_close(make(2, 8, p3, sizeof p3));
    size_t n1, n2, n3;
    uint8_t *a = slurp(moved, &n1), *b = slurp(p2, &n2), *c = slurp(p3, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_int_equal(n1, n3);
    assert_memory_not_equal(a, c, n1);
    free(a);
    free(b);
    free(c);
}

/* Tokenizers of one unchanged file are one, shared until the last holder
 * frees it; a file written again (another identity) gets its own. */
static void test_tokenizer_shared(void **state)
{
    (void)state;
    char path[512], err[512];
    colo_gguf *g1 = make(0, 21, path, sizeof path);
    colo_gguf *g2 = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g2);
    colo_tokenizer *a = colo_tokenizer_from_gguf(g1, err, sizeof err);
    colo_tokenizer *b = colo_tokenizer_from_gguf(g2, err, sizeof err);
    assert_non_null(a);
    assert_ptr_equal(a, b);
    colo_gguf_close(g1);
    colo_gguf_close(g2);
    colo_tokenizer_free(a); /* b still holds it */
    assert_int_equal(colo_tokenizer_n_vocab(b), V);
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(b, "hello", 5, true, false, &ids, &n), COLO_OK);
    assert_true(n >= 1);
    free(ids);
    /* the file written again with another vocabulary size */
    colo_mkmodel_config c = {.n_layer = L, .n_embd = E, .n_head = H, .n_kv_head = KVH, .n_ff = F,
                             .n_vocab = V + 8, .n_ctx = 512, .type = COLO_F32, .seed = 21};
    unlink(path);
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_OK);
    colo_gguf *g3 = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g3);
    colo_tokenizer *d = colo_tokenizer_from_gguf(g3, err, sizeof err);
    assert_non_null(d);
    assert_ptr_not_equal(d, b);
    assert_int_equal(colo_tokenizer_n_vocab(d), V + 8);
    colo_gguf_close(g3);
    colo_tokenizer_free(b);
    colo_tokenizer_free(d);
}

static void test_tokenizer(void **state)
{
    (void)state;
    char path[512], err[512];
    colo_gguf *g = make(1, 3, path, sizeof path);
    colo_tokenizer *bpe = colo_tokenizer_from_gguf(g, err, sizeof err);
    if (!bpe)
        fail_msg("%s", err);
    assert_int_equal(colo_tokenizer_n_vocab(bpe), V);
    int eos = colo_tokenizer_eos(bpe);
    assert_int_equal(eos, colo_tokenizer_find(bpe, "<|endoftext|>"));
    assert_true(colo_tokenizer_is_special(bpe, colo_tokenizer_find(bpe, "<|im_start|>")));
    assert_true(colo_tokenizer_is_special(bpe, colo_tokenizer_find(bpe, "<|im_end|>")));
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(bpe, "hello world", 11, true, false, &ids, &n), COLO_OK);
    /* "hello" uses the merge h+e; " world" is byte tokens. */
    assert_true(n >= 2 && n < 11);
    char buf[64];
    size_t o = 0;
    for (int k = 0; k < n; k++) {
        size_t l;
        assert_true(ids[k] >= 0 && ids[k] < V);
        assert_false(colo_tokenizer_is_special(bpe, ids[k]));
        assert_int_equal(colo_tokenizer_decode(bpe, ids[k], buf + o, sizeof buf - o, &l), COLO_OK);
        o += l;
    }
    assert_int_equal(o, 11);
    assert_memory_equal(buf, "hello world", 11);
    assert_int_equal(ids[0], colo_tokenizer_find(bpe, "he"));
    assert_int_equal(ids[1], colo_tokenizer_find(bpe, "l"));
    free(ids);
    /* Every byte has its token: arbitrary bytes round-trip. */
    for (int c = 0; c < 256; c++) {
        char t = (char)c;
        assert_int_equal(colo_tokenizer_encode(bpe, &t, 1, true, false, &ids, &n), COLO_OK);
        assert_int_equal(n, 1);
        size_t l;
        assert_int_equal(colo_tokenizer_decode(bpe, ids[0], buf, sizeof buf, &l), COLO_OK);
        assert_int_equal(l, 1);
        assert_int_equal((unsigned char)buf[0], c);
        free(ids);
    }
    colo_tokenizer_free(bpe);
    colo_gguf_close(g);
}

static void test_bad_shapes(void **state)
{
    (void)state;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    colo_mkmodel_config ok = {.n_layer = 1, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 64,
                              .n_vocab = 300, .n_ctx = 64, .type = COLO_Q8_0, .seed = 1};
    colo_mkmodel_config c = ok;
    c.n_vocab = colo_mkmodel_min_vocab() - 1;
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "vocab"));
    c = ok, c.n_head = 5; /* 64 % 5 */
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_EINVAL);
    c = ok, c.n_kv_head = 3; /* 4 % 3 */
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_EINVAL);
    c = ok, c.n_ff = 48; /* not whole Q8_0 blocks */
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_EINVAL);
    c = ok, c.type = COLO_Q6_K;
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_EINVAL);
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    c = ok, c.n_vocab = colo_mkmodel_min_vocab();
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_OK);
}

/* The program: exit codes and the file it writes. */
static int run(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/colo-mkmodel' %s >/dev/null 2>&1", COLO_BINARY_DIR, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_program(void **state)
{
    (void)state;
    char bin[600], args[1024], path[512], err[512];
    snprintf(bin, sizeof bin, "%s/colo-mkmodel", COLO_BINARY_DIR);
    if (access(bin, X_OK) != 0)
        skip(); /* not built in this tree */
    snprintf(path, sizeof path, "%s/cli.gguf", dir);
    assert_int_equal(run("--help"), 0);
    assert_int_equal(run(""), 2);
    snprintf(args, sizeof args, "--out '%s' --layers 1 --dim 64 --heads 4 --kv-heads 2 --ffn 64 --vocab 10", path);
    assert_int_equal(run(args), 2); /* vocab too small */
    snprintf(args, sizeof args, "--out '%s' --layers 1 --dim 64 --heads 4 --kv-heads 2 --ffn 64 --vocab 300 "
                                "--type q9_9", path);
    assert_int_equal(run(args), 2); /* unknown type */
    snprintf(args, sizeof args, "--out '%s' --layers 1 --dim 64 --heads 4 --kv-heads 2 --ffn 64 --vocab 300 "
                                "--type q4_k_m", path);
    assert_int_equal(run(args), 2); /* 64 is not a multiple of Q4_K's 256 */
    snprintf(args, sizeof args, "--out '%s' --layers 1 --dim 64 --heads 4 --kv-heads 2 --ffn 64 --vocab 300 "
                                "--arch mamba", path);
    assert_int_equal(run(args), 2); /* unknown architecture */
    snprintf(args, sizeof args, "--out '%s' --layers 3 --dim 64 --heads 4 --kv-heads 1 --ffn 128 --vocab 400 "
                                "--ctx 1024 --type q4_1 --seed 9", path);
    assert_int_equal(run(args), 0);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    if (!g)
        fail_msg("%s", err);
    assert_int_equal(u32(g, "llama.block_count"), 3);
    assert_int_equal(u32(g, "llama.context_length"), 1024);
    assert_int_equal(u32(g, "llama.attention.head_count_kv"), 1);
    check_tensor(g, "blk.2.ffn_up.weight", COLO_Q4_1, 64, 128);
    check_tensor(g, "token_embd.weight", COLO_Q8_0, 64, 400);
    colo_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_per_type), cmocka_unit_test(test_values_across_types),
        cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_tokenizer_shared),
        cmocka_unit_test(test_bad_shapes),      cmocka_unit_test(test_program),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
