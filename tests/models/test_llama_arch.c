/* The llama family's architecture table (models/arch/llama_arch.c): every
 * architecture has a row whose name parses back to it, the names in
 * messages come from the rows, and the rules each row states are the ones
 * the architectures have (the loader and colo-mkmodel read nothing else). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "models/arch/llama_impl.h"

static const colo_llama_arch all[] = {COLO_ARCH_LLAMA, COLO_ARCH_QWEN2, COLO_ARCH_QWEN3, COLO_ARCH_PHI3,
                                      COLO_ARCH_GEMMA3};
#define N_ALL ((int)(sizeof all / sizeof *all))

static void test_rows_and_names(void **state)
{
    (void)state;
    for (int i = 0; i < N_ALL; i++) {
        const colo_llama_arch_traits *t = colo_llama_traits(all[i]);
        assert_non_null(t);
        assert_non_null(t->name);
        assert_string_equal(colo_llama_arch_name(all[i]), t->name);
        colo_llama_arch a = (colo_llama_arch)-1;
        assert_int_equal(colo_llama_arch_parse(t->name, &a), COLO_OK);
        assert_int_equal(a, all[i]);
        assert_int_equal(colo_llama_arch_parse_n(t->name, strlen(t->name), &a), COLO_OK);
        assert_int_equal(a, all[i]);
        assert_true(t->default_rope_base > 0 && t->default_rms_eps > 0);
    }
    assert_null(colo_llama_traits((colo_llama_arch)N_ALL));
    assert_null(colo_llama_traits((colo_llama_arch)-1));
    assert_string_equal(colo_llama_arch_name((colo_llama_arch)N_ALL), "?");
    colo_llama_arch a;
    assert_int_equal(colo_llama_arch_parse("llam", &a), COLO_EINVAL);
    assert_int_equal(colo_llama_arch_parse_n("llama3", 6, &a), COLO_EINVAL);
    assert_int_equal(colo_llama_arch_parse_n("llama3", 5, &a), COLO_OK); /* the first 5 bytes */
    assert_int_equal(a, COLO_ARCH_LLAMA);
    assert_int_equal(colo_llama_arch_parse(NULL, &a), COLO_EINVAL);
}

static void test_list(void **state)
{
    (void)state;
    char buf[256];
    colo_llama_arch_list(buf, sizeof buf);
    assert_string_equal(buf, "llama, qwen2, qwen3, phi3, gemma3");
    char small[9];
    colo_llama_arch_list(small, sizeof small); /* cut, terminated */
    assert_string_equal(small, "llama, q");
    colo_llama_arch_list(small, 1);
    assert_string_equal(small, "");
}

static void test_rules(void **state)
{
    (void)state;
    const colo_llama_arch_traits *llama = colo_llama_traits(COLO_ARCH_LLAMA),
                                 *qwen2 = colo_llama_traits(COLO_ARCH_QWEN2),
                                 *qwen3 = colo_llama_traits(COLO_ARCH_QWEN3),
                                 *phi3 = colo_llama_traits(COLO_ARCH_PHI3),
                                 *gemma3 = colo_llama_traits(COLO_ARCH_GEMMA3);
    /* rope: adjacent pairs over the whole head only for llama */
    assert_false(llama->rope_neox);
    assert_true(llama->rope_full);
    assert_true(qwen2->rope_neox && qwen3->rope_neox && phi3->rope_neox && gemma3->rope_neox);
    assert_int_equal(llama->rope_factors, COLO_ROPE_FACTORS_FREQS);
    assert_int_equal(phi3->rope_factors, COLO_ROPE_FACTORS_LONG_SHORT);
    assert_int_equal(gemma3->rope_factors, COLO_ROPE_FACTORS_NONE);
    assert_true(qwen3->qk_norm && gemma3->qk_norm && !llama->qk_norm && !qwen2->qk_norm && !phi3->qk_norm);
    assert_true(gemma3->post_norms && !qwen3->post_norms);
    assert_true(phi3->fused_up && phi3->fused_qkv && !gemma3->fused_up);
    assert_true(qwen2->qkv_bias && !qwen3->qkv_bias);
    assert_int_equal(gemma3->act, COLO_LLAMA_ACT_GEGLU);
    assert_int_equal(llama->act, COLO_LLAMA_ACT_SWIGLU);
    assert_int_equal(gemma3->swa, COLO_SWA_LAYERS);
    assert_int_equal(phi3->swa, COLO_SWA_IGNORED);
    assert_int_equal(qwen2->swa, COLO_SWA_REFUSED);
    assert_true(gemma3->embd_scale_sqrt && !llama->embd_scale_sqrt);
    /* Gemma 3 27B (62 layers, E 5376, 32 heads of 128) scales queries by
     * E / heads = 168; the other sizes by the head size. */
    assert_non_null(gemma3->attn_scale_len);
    colo_llama_hparams hp = {.arch = COLO_ARCH_GEMMA3, .n_layer = 62, .n_embd = 5376, .n_head = 32, .head_dim = 128};
    assert_int_equal(gemma3->attn_scale_len(&hp), 168);
    hp.n_layer = 48;
    assert_int_equal(gemma3->attn_scale_len(&hp), 128);
    assert_null(llama->attn_scale_len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_and_names),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
