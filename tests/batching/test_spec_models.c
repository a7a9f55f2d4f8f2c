/* Speculative decoding by prompt lookup on the real SmolLM2 and Gemma 3
 * files: greedy output with drafts is the same bits as without (tokens and
 * log-probabilities) on prompts that copy their input, alone and three at
 * once in a cache too small for them (preemption) with a shared system
 * prompt (prefix cache), and with the suffix cache drafting each ask's
 * earlier output. Skipped when the weights are not in the model cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/engine.h"
#include "engine_fixture.h"
#include "models/format/model_cache.h"

typedef struct {
    const char *file;
    const char *user, *mid, *assistant; /* the chat's turn markers */
} model_case;

#define SYSTEM                                                                                          \
    "You are a careful assistant. You copy text exactly as it is given, keep every name, number and "        \
    "punctuation mark, and never add anything of your own."

static const model_case models[] = {
    {"SmolLM2-135M-Instruct.Q4_1.gguf", "<|im_start|>system\n" SYSTEM "<|im_end|>\n<|im_start|>user\n",
     "<|im_end|>\n", "<|im_start|>assistant\n"},
    {"gemma-3-270m-q4_k_m.gguf", "<start_of_turn>user\n" SYSTEM "\n", "<end_of_turn>\n",
     "<start_of_turn>model\n"},
};

static const char *const asks[] = {
    "Repeat this paragraph word for word: The harbour at Kessel opens at six in the morning. Fishing boats "
    "leave first, then the ferry to Aland, and the cargo ships wait for the pilot who comes at eight.",
    "Extract the name, city and year as JSON from: Maria Lindqvist moved to Uppsala in 2014, where she "
    "opened a bakery called Sourdough & Sons on Kungsgatan.",
    "Quote the sentence about the bridge from this text: The old town has three churches. The bridge over "
    "the river was built in 1872 and rebuilt after the flood of 1924. The market is held on Saturdays.",
};

typedef struct {
    engine_result res[3];
    colo_engine_step_stats st;
    uint64_t preemptions, prefix_hits;
} run_out;

/* Runs the asks (n of them, at once) on the model in path, greedy, with
 * spec_tokens drafted tokens and n_blocks KV blocks of 16 (0: roomy). */
static void run(const char *path, const model_case *mc, int n, int spec_tokens, int n_blocks, run_out *out)
{
    memset(out, 0, sizeof *out);
    engine_rig r = {0};
    engine_rig_arena(&r, dev, "spec-models", 1ull << 30);
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 256, .block_size = 16, .kv_type = COLO_F16,
                             .n_blocks = n_blocks, .spec_tokens = spec_tokens, .max_seq_len = 1024,
                             .spec_always = true};
    engine_rig_start_on(&r, dev, path, &gc);
    colo_engine_callbacks cbs[3];
    engine_results_reset(out->res, cbs, n);
    const colo_tokenizer *tok = colo_llama_tokenizer(r.m);
    char err[256];
    for (int i = 0; i < n; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s%s%s", mc->user, asks[i], mc->mid, mc->assistant);
        int32_t *ids;
        int n_ids;
        assert_int_equal(colo_tokenizer_encode(tok, text, strlen(text), true, true, &ids, &n_ids), COLO_OK);
        colo_engine_params p = {.max_tokens = 48, .temperature = 0, .top_p = 1, .logprobs = true};
        assert_non_null(colo_engine_add(r.e, ids, n_ids, &p, &cbs[i], err, sizeof err));
        free(ids);
    }
    engine_run_all(r.e);
    colo_engine_get_step_stats(r.e, &out->st);
    out->preemptions = colo_engine_preemptions(r.e);
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(r.e, &pi);
    out->prefix_hits = pi.hit_tokens;
    colo_engine_free(r.e);
    colo_llama_free(r.m);
    colo_stream_destroy(r.s);
    colo_arena_destroy(r.arena);
}

/* The asks one after another on one engine with the suffix cache (no
 * prompt lookup), twice over, as one tenant: the second round drafts from
 * the first's outputs. out gets the second round's. */
static void run_suffix(const char *path, const model_case *mc, run_out *out)
{
    memset(out, 0, sizeof *out);
    engine_rig r = {0};
    engine_rig_arena(&r, dev, "spec-models", 1ull << 30);
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 256, .block_size = 16, .kv_type = COLO_F16,
                             .spec_tokens = 8, .max_seq_len = 1024, .spec_always = true,
                             .spec_suffix_bytes = 1 << 20, .spec_no_lookup = true};
    engine_rig_start_on(&r, dev, path, &gc);
    const colo_tokenizer *tok = colo_llama_tokenizer(r.m);
    char err[256];
    for (int round = 0; round < 2; round++) {
        colo_engine_callbacks cbs[3];
        engine_results_reset(out->res, cbs, 3);
        for (int i = 0; i < 3; i++) {
            char text[2048];
            snprintf(text, sizeof text, "%s%s%s%s", mc->user, asks[i], mc->mid, mc->assistant);
            int32_t *ids;
            int n_ids;
            assert_int_equal(colo_tokenizer_encode(tok, text, strlen(text), true, true, &ids, &n_ids), COLO_OK);
            colo_engine_params p = {.max_tokens = 48, .temperature = 0, .top_p = 1, .logprobs = true,
                                    .tenant = "org/project"};
            assert_non_null(colo_engine_add(r.e, ids, n_ids, &p, &cbs[i], err, sizeof err));
            free(ids);
            engine_run_all(r.e);
        }
        if (round == 0)
            colo_engine_get_step_stats(r.e, &out->st);
    }
    colo_engine_step_stats after;
    colo_engine_get_step_stats(r.e, &after);
    out->st.spec_drafted = after.spec_drafted - out->st.spec_drafted;
    out->st.spec_accepted = after.spec_accepted - out->st.spec_accepted;
    colo_engine_free(r.e);
    colo_llama_free(r.m);
    colo_stream_destroy(r.s);
    colo_arena_destroy(r.arena);
}

static void assert_same_runs(const run_out *a, const run_out *b, int n)
{
    for (int i = 0; i < n; i++) {
        engine_assert_same(&a->res[i], &b->res[i]);
        assert_memory_equal(a->res[i].lps, b->res[i].lps, (size_t)a->res[i].n * 4);
    }
}

static void check_model(const model_case *mc)
{
    char path[1024];
    if (!colo_model_cache_path(mc->file, path, sizeof path))
        skip();
    run_out plain, spec;
    /* alone */
    run(path, mc, 1, 0, 0, &plain);
    run(path, mc, 1, 4, 0, &spec);
    assert_same_runs(&plain, &spec, 1);
    /* three at once */
    run(path, mc, 3, 0, 0, &plain);
    assert_int_equal(plain.preemptions, 0);
    run(path, mc, 3, 8, 0, &spec);
    assert_same_runs(&plain, &spec, 3);
    assert_true(spec.st.spec_accepted > 0);
    uint64_t plain_steps = plain.st.steps[0] + plain.st.steps[1] + plain.st.steps[2];
    uint64_t spec_steps = spec.st.steps[0] + spec.st.steps[1] + spec.st.steps[2];
    assert_true(spec_steps < plain_steps);
    printf("%s: drafted %llu, accepted %llu, steps %llu (plain %llu)\n", mc->file,
           (unsigned long long)spec.st.spec_drafted, (unsigned long long)spec.st.spec_accepted,
           (unsigned long long)spec_steps, (unsigned long long)plain_steps);
    /* 12 blocks of 16 tokens for three of ~110: preempted and recomputed,
     * the system prompt's blocks found in the prefix cache */
    run(path, mc, 3, 8, 12, &spec);
    assert_true(spec.preemptions > 0);
    assert_true(spec.prefix_hits > 0);
    assert_same_runs(&plain, &spec, 3);
    /* the suffix cache: the second round drafts from the first's outputs
     * (mostly its own ask's: a short match may pick another's), and the
     * outputs are plain decoding's */
    run_suffix(path, mc, &spec);
    assert_same_runs(&plain, &spec, 3);
    assert_true(spec.st.spec_drafted > 0);
    assert_true(spec.st.spec_accepted * 2 > spec.st.spec_drafted);
    printf("%s, suffix cache, second round: drafted %llu, accepted %llu\n", mc->file,
           (unsigned long long)spec.st.spec_drafted, (unsigned long long)spec.st.spec_accepted);
}

static void test_smollm2(void **state)
{
    (void)state;
    check_model(&models[0]);
}

static void test_gemma3(void **state)
{
    (void)state;
    check_model(&models[1]);
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    dev = colo_device_open(&dc, err, sizeof err);
    return dev ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_gemma3),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
