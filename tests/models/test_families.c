/* Every architecture against llama.cpp, and what colo refuses.
 *
 * Synthetic models of each family and
 * weight type (colo-mkmodel, seeded, so the same files as the reference's)
 * run a fixed prompt and then llama.cpp's 16 greedy tokens, teacher-forced;
 * at every step colo's logits must agree with llama.cpp's
 * (tests/data/families, made by scripts/ref/make_family_ref.py; README
 * there) within a tolerance, and colo's greedy token must equal llama.cpp's
 * wherever llama.cpp's top-2 margin is wider than twice that tolerance.
 *
 * Tolerances (max |colo - llama.cpp| over the vocabulary): F32 weights
 * 0.01 (both use F16 KV caches; llama.cpp's products are F32 too); F16 and
 * BF16 0.05 (llama.cpp rounds activations to the weights' type); quantized
 * weights 0.25: llama.cpp rounds activations to 8 bits in every product,
 * colo only in single-row (decode) products, so prefill differs by that
 * rounding (docs/MODELS.md). Measured: 0.0025, 0.027 and 0.165. With
 * exact activations (what the CUDA kernels compute: test_families_cuda.c,
 * which shares families_fixture.h) quantized weights measure 0.15. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "families_fixture.h"
#include "models/format/gguf.h"
#include "tools/gguf_write.h"
#include "models/arch/llama.h"
#include "tools/mkmodel.h"
#include "runtime/backend.h"

static colo_device *dev;
static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    return family_setup(&dev, tmpdir, sizeof tmpdir, "families");
}

static int teardown(void **state)
{
    (void)state;
    return family_teardown(dev, tmpdir);
}

/* One case with a KV cache of kv: returns the largest logit difference
 * seen; *vs_f16 (may be NULL) gets the largest against the same model with
 * an F16 cache. */
static double run_case_kv(const char *file, colo_dtype kv, double *vs_f16)
{
    family_case fc;
    family_case_load(file, &fc);
    char path[400];
    snprintf(path, sizeof path, "%s/model.gguf", tmpdir);
    int V = fc.n_vocab;
    float *logits = malloc((size_t)fc.n_steps * V * sizeof *logits);
    assert_non_null(logits);
    family_run(dev, path, &fc, kv, logits);
    if (vs_f16) {
        float *f16 = malloc((size_t)fc.n_steps * V * sizeof *f16);
        assert_non_null(f16);
        family_run(dev, path, &fc, COLO_F16, f16);
        *vs_f16 = family_max_diff(logits, f16, fc.n_steps * V);
        free(f16);
    }
    double tol = family_tolerance(fc.c.type) + (kv == COLO_F16 ? 0 : KV_Q8_0_ALLOWANCE), worst = 0;
    for (int st = 0; st < fc.n_steps; st++) {
        const float *got = logits + (size_t)st * V;
        double d = family_max_diff(got, fc.ref_logits + (size_t)st * V, V);
        int best = family_argmax(got, V);
        if (d > tol)
            fail_msg("%s: step %d: logits differ from llama.cpp's by up to %.4f (tolerance %.2f)", file, st, d, tol);
        if (fc.ref_margin[st] > 2 * tol && best != fc.ref_tok[st])
            fail_msg("%s: step %d: colo's greedy token %d, llama.cpp's %d (margin %.3f)", file, st, best,
                     fc.ref_tok[st], fc.ref_margin[st]);
        worst = d > worst ? d : worst;
    }
    free(logits);
    family_case_free(&fc);
    return worst;
}

static double run_case(const char *file) { return run_case_kv(file, COLO_F16, NULL); }

static void one_case(const char *file, const char *name)
{
    printf("%-24s max |logit - llama.cpp| %.4f\n", name, run_case(file));
}

static void test_families(void **state)
{
    (void)state;
    family_each(one_case);
}

/* The same teacher-forced steps with a Q8_0 KV cache (kv_cache.dtype
 * q8_0): within the weight type's tolerance plus KV_Q8_0_ALLOWANCE of
 * llama.cpp's logits (made with an F16 cache), and the greedy token
 * llama.cpp's where its margin is wider than twice that. */
static void one_case_q8_0(const char *file, const char *name)
{
    double vs_f16, d = run_case_kv(file, COLO_Q8_0, &vs_f16);
    printf("%-24s KV q8_0: max |logit - llama.cpp| %.4f, |logit - colo's with KV f16| %.4f\n", name, d, vs_f16);
}

static void test_families_kv_q8_0(void **state)
{
    (void)state;
    family_each(one_case_q8_0);
}

/* ---- refusals ---------------------------------------------------------------------- */

static colo_status zero_fill(void *ctx, int index, void *buf, size_t bytes)
{
    (void)ctx, (void)index;
    memset(buf, 0, bytes);
    return COLO_OK;
}

/* A minimal one-layer file of arch (llama-shaped tensors, F32, E 64,
 * 4 heads, F 128, V 64); variant adds one thing colo must refuse. */
typedef enum {
    V_NONE,
    V_ARCH,
    V_YARN,
    V_EXPERTS,
    V_SOFTCAP,
    V_EXTRA_TENSOR,
    V_MISSING,
    V_SHAPE,
    V_SWA,
    V_LAYERS /* a block count of millions over one layer's tensors */
} variant;

static void write_minimal(const char *path, const char *arch, variant v)
{
    colo_gguf_writer *w = colo_gguf_writer_create();
    assert_non_null(w);
    char k[96];
    const char *a = v == V_ARCH ? "mamba" : arch;
#define K(sfx) (snprintf(k, sizeof k, "%s.%s", a, sfx), k)
    assert_int_equal(colo_gguf_writer_add_str(w, "general.architecture", a), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, K("block_count"), v == V_LAYERS ? 1u << 24 : 1), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, K("context_length"), 128), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, K("embedding_length"), 64), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, K("feed_forward_length"), 128), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_u32(w, K("attention.head_count"), 4), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f), COLO_OK);
    if (v == V_YARN)
        assert_int_equal(colo_gguf_writer_add_str(w, K("rope.scaling.type"), "yarn"), COLO_OK);
    if (v == V_EXPERTS)
        assert_int_equal(colo_gguf_writer_add_u32(w, K("expert_count"), 8), COLO_OK);
    if (v == V_SOFTCAP)
        assert_int_equal(colo_gguf_writer_add_f32(w, K("final_logit_softcapping"), 30.0f), COLO_OK);
    if (v == V_SWA)
        assert_int_equal(colo_gguf_writer_add_u32(w, K("attention.sliding_window"), 32), COLO_OK);
#undef K
    const char *toks[64];
    char buf[64][8];
    for (int i = 0; i < 64; i++)
        snprintf(buf[i], sizeof buf[i], "t%d", i), toks[i] = buf[i];
    assert_int_equal(colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 64), COLO_OK);
    struct {
        const char *name;
        int64_t ne0, ne1;
    } t[] = {{"token_embd.weight", 64, 64},         {"output_norm.weight", 64, 1},
             {"blk.0.attn_norm.weight", 64, 1},     {"blk.0.attn_q.weight", 64, 64},
             {"blk.0.attn_k.weight", 64, 64},       {"blk.0.attn_v.weight", 64, 64},
             {"blk.0.attn_output.weight", 64, 64},  {"blk.0.ffn_norm.weight", 64, 1},
             {"blk.0.ffn_gate.weight", 64, 128},    {"blk.0.ffn_up.weight", 64, 128},
             {"blk.0.ffn_down.weight", v == V_SHAPE ? 64 : 128, 64}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        if (v == V_MISSING && i == 5)
            continue;
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        assert_int_equal(colo_gguf_writer_add_tensor(w, t[i].name, COLO_F32, t[i].ne1 > 1 ? 2 : 1, ne), COLO_OK);
    }
    if (v == V_EXTRA_TENSOR) {
        int64_t ne[2] = {64, 8};
        assert_int_equal(colo_gguf_writer_add_tensor(w, "blk.0.ffn_gate_inp.weight", COLO_F32, 2, ne), COLO_OK);
    }
    char err[256];
    assert_int_equal(colo_gguf_writer_finish(w, path, zero_fill, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);
}

/* What would change the computation and is not applied is refused, with
 * its name, before anything is allocated (colo_llama_memory_need: what
 * --check-config runs). */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        variant v;
        const char *want;
    } cases[] = {{V_ARCH, "architecture 'mamba' is not supported"},
                 {V_YARN, "llama.rope.scaling.type 'yarn' is not supported"},
                 {V_EXPERTS, "key llama.expert_count is set"},
                 {V_SOFTCAP, "key llama.final_logit_softcapping is set"},
                 {V_EXTRA_TENSOR, "tensor blk.0.ffn_gate_inp.weight is not part of the llama architecture"},
                 {V_MISSING, "tensor blk.0.attn_v.weight is missing"},
                 {V_SHAPE, "tensor blk.0.ffn_down.weight has shape [64, 64"},
                 {V_SWA, "key llama.attention.sliding_window is 32"},
                 {V_LAYERS, "llama.block_count is 16777216, but the file has 11 tensors"}};
    char path[400], err[512];
    snprintf(path, sizeof path, "%s/minimal.gguf", tmpdir);
    colo_llama_memory mem;
    write_minimal(path, "llama", V_NONE);
    if (colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err) != COLO_OK)
        fail_msg("the minimal file is refused: %s", err);
    assert_int_equal(mem.n_tensors, 11);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_minimal(path, "llama", cases[i].v);
        assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_EFORMAT);
        if (!strstr(err, cases[i].want))
            fail_msg("case %zu: message '%s' does not say '%s'", i, err, cases[i].want);
    }
    /* A qwen3 file must have its q/k norms. */
    write_minimal(path, "qwen3", V_NONE);
    assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_EFORMAT);
    assert_non_null(strstr(err, "tensor blk.0.attn_q_norm.weight is missing"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_families), cmocka_unit_test(test_families_kv_q8_0),
                                       cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
