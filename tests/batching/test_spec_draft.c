/* Speculative decoding with a draft model (batching/spec_draft.h): a
 * Q4_1 copy drafts for a Q8_0 target of the same synthetic weights
 * (colo-mkmodel, one seed). Greedy and seeded outputs are the target's
 * own, bit for bit (tokens and log-probabilities), alone, several at once,
 * and preempted in a KV cache too small for them; a draft model that is
 * not there (asleep, unloaded, busy) leaves plain decoding; the draft's
 * KV blocks all go back to it, also when its cache was replaced (a new
 * epoch) under running sequences; and colo_served_draft_check refuses a
 * draft of another vocabulary, the target itself and a chain. The same
 * on SmolLM2 when its weights are in the model cache (a Q8_0 target when
 * there is one, else the Q4_1 file drafting for itself). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/engine.h"
#include "batching/served.h"
#include "batching/spec.h"
#include "batching/spec_draft.h"
#include "engine_fixture.h"
#include "models/format/model_cache.h"
#include "tests/test_seed.h"

static char target_path[300], draft_path[300], other_path[300];

/* A draft model on its own arena and engine (which made its KV cache),
 * lent while available; epoch as set. */
typedef struct draft_rig {
    engine_rig r;
    bool available;
    uint64_t epoch;
    int gets, puts;
} draft_rig;

static colo_llama *rig_get(void *ud, bool wait, uint64_t *epoch)
{
    (void)wait;
    draft_rig *d = ud;
    if (!d->available)
        return NULL;
    d->gets++;
    *epoch = d->epoch;
    return d->r.m;
}

static void rig_put(void *ud)
{
    draft_rig *d = ud;
    d->puts++;
}

static void draft_open(draft_rig *d, const char *path)
{
    memset(d, 0, sizeof *d);
    d->available = true;
    d->epoch = 1;
    engine_rig_arena(&d->r, dev, "draft", 1ull << 30);
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 128, .block_size = 16, .n_blocks = 256};
    engine_rig_start_on(&d->r, dev, path, &gc);
}

static void draft_close(draft_rig *d)
{
    assert_int_equal(d->gets, d->puts);
    engine_rig_close(&d->r);
}

typedef struct run_out {
    engine_result res[3];
    colo_engine_step_stats st;
    uint64_t preemptions;
} run_out;

/* n prompts at once on the target at path (n_blocks KV blocks of 16, 0:
 * roomy), temperature temp (seeded), drafting k tokens with d (NULL:
 * plain decoding). */
static void run(const char *path, int n, int32_t (*prompts)[24], int n_prompt, float temp, int k,
                draft_rig *d, int n_blocks, int max_tokens, run_out *out)
{
    memset(out, 0, sizeof *out);
    engine_rig r = {0};
    engine_rig_arena(&r, dev, "target", 1ull << 30);
    colo_spec_draft_src src = {rig_get, rig_put, d};
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 128, .block_size = 16, .n_blocks = n_blocks,
                             .spec_tokens = d ? k : 0, .spec_always = true, .spec_no_lookup = true,
                             .draft = d ? &src : NULL};
    engine_rig_start_on(&r, dev, path, &gc);
    colo_engine_callbacks cbs[3];
    engine_results_reset(out->res, cbs, n);
    char err[256];
    for (int i = 0; i < n; i++) {
        colo_engine_params p = {.max_tokens = max_tokens, .temperature = temp, .top_p = 1, .seed = 7 + (uint64_t)i,
                                .logprobs = true};
        assert_non_null(colo_engine_add(r.e, prompts[i], n_prompt, &p, &cbs[i], err, sizeof err));
    }
    engine_run_all(r.e);
    colo_engine_get_step_stats(r.e, &out->st);
    out->preemptions = colo_engine_preemptions(r.e);
    engine_rig_close(&r);
    if (d) /* every block the target's sequences held is back in the draft's cache */
        assert_int_equal(colo_engine_kv_free_blocks(d->r.e), colo_engine_kv_blocks(d->r.e));
}

static void assert_same(const run_out *a, const run_out *b, int n)
{
    for (int i = 0; i < n; i++) {
        engine_assert_same(&a->res[i], &b->res[i]);
        assert_memory_equal(a->res[i].lps, b->res[i].lps, (size_t)a->res[i].n * 4);
    }
}

static int32_t prompts[3][24];

static void random_prompts(int n_vocab)
{
    uint64_t seed = colo_test_seed("test_spec_draft", 48);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 24; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][j] = (int32_t)((seed >> 33) % (uint64_t)n_vocab);
        }
}

/* Greedy: the target's tokens with the draft, alone and three at once;
 * the draft's tokens were mostly accepted (the same weights). */
static void test_greedy_bit_identical(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    run_out plain, spec;
    for (int k = 1; k <= 6; k += 5) {
        run(target_path, 1, prompts, 24, 0, k, NULL, 0, 64, &plain);
        run(target_path, 1, prompts, 24, 0, k, &d, 0, 64, &spec);
        assert_same(&plain, &spec, 1);
        assert_true(spec.st.spec_model_drafted > 0);
        assert_true(spec.st.spec_model_passes > 0);
    }
    run(target_path, 3, prompts, 24, 0, 0, NULL, 0, 64, &plain);
    run(target_path, 3, prompts, 24, 0, 4, &d, 0, 64, &spec);
    assert_same(&plain, &spec, 3);
    assert_int_equal(spec.st.spec_model_drafted, spec.st.spec_drafted);
    assert_true(spec.st.spec_model_accepted > 0);
    /* the three drafted in shared passes: fewer than each alone took (the
     * same drafts, one pass for a token of each) */
    uint64_t passes_alone = 0;
    for (int i = 0; i < 3; i++) {
        run_out one;
        run(target_path, 1, prompts + i, 24, 0, 4, &d, 0, 64, &one);
        engine_assert_same(&spec.res[i], &one.res[0]);
        passes_alone += one.st.spec_model_passes;
    }
    if (spec.st.spec_model_passes >= passes_alone)
        fail_msg("three at once took %llu draft passes, alone %llu in all", (unsigned long long)spec.st.spec_model_passes,
                 (unsigned long long)passes_alone);
    printf("draft passes: %llu for three at once, %llu for each alone in all\n",
           (unsigned long long)spec.st.spec_model_passes, (unsigned long long)passes_alone);
    uint64_t plain_steps = plain.st.steps[0] + plain.st.steps[1] + plain.st.steps[2];
    uint64_t spec_steps = spec.st.steps[0] + spec.st.steps[1] + spec.st.steps[2];
    assert_true(spec_steps < plain_steps);
    printf("synthetic Q4_1 draft for Q8_0: drafted %llu, accepted %llu, steps %llu (plain %llu)\n",
           (unsigned long long)spec.st.spec_model_drafted, (unsigned long long)spec.st.spec_model_accepted,
           (unsigned long long)spec_steps, (unsigned long long)plain_steps);
    draft_close(&d);
}

/* Four sequences drafting in shared passes draft what each drafts alone,
 * and their draft state ends the same: a first draft (a prompt longer
 * than a catch-up chunk beside short ones), then rounds in which each
 * accepts 0, 1 or 2 of its drafted tokens and goes on with another, so
 * that a pass holds single tokens (decode rows) beside chunks of two and
 * three (a prefill's rows). The shared passes are fewer. */
static void test_batch_same_as_alone(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    colo_spec_draft_src src = {rig_get, rig_put, &d};
    colo_spec_drafter *alone = colo_spec_drafter_create(&src, dev, 320, 200);
    colo_spec_drafter *together = colo_spec_drafter_create(&src, dev, 320, 200);
    assert_non_null(alone);
    assert_non_null(together);
    enum { N = 4 };
    int32_t text[N][216];
    int len[N] = {150, 24, 41, 3};
    uint64_t seed = colo_test_seed("test_spec_draft batch", 7);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < len[i]; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            text[i][j] = (int32_t)((seed >> 33) % 320);
        }
    colo_spec_draft_seq da[N] = {{0}}, dt[N] = {{0}};
    for (int round = 0; round < 4; round++) {
        int32_t out_a[N][COLO_SPEC_MAX_TOKENS], out_t[N][COLO_SPEC_MAX_TOKENS];
        int n_a[N], k[N];
        assert_true(colo_spec_drafter_begin(alone));
        uint64_t p0 = colo_spec_drafter_passes(alone);
        for (int i = 0; i < N; i++) {
            k[i] = 3 + (i + round) % 4;
            n_a[i] = colo_spec_draft_run(alone, &da[i], d.r.s, NULL, text[i], len[i], k[i], out_a[i]);
            assert_int_equal(n_a[i], k[i]);
        }
        colo_spec_drafter_end(alone);
        uint64_t passes_alone = colo_spec_drafter_passes(alone) - p0;
        colo_spec_draft_req reqs[N];
        for (int i = 0; i < N; i++)
            reqs[i] = (colo_spec_draft_req){.ds = &dt[i], .tokens = text[i], .n_tokens = len[i], .k = k[i],
                                            .out = out_t[i]};
        assert_true(colo_spec_drafter_begin(together));
        p0 = colo_spec_drafter_passes(together);
        colo_spec_draft_run_batch(together, reqs, N, d.r.s, NULL);
        colo_spec_drafter_end(together);
        uint64_t passes_together = colo_spec_drafter_passes(together) - p0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(reqs[i].n_out, n_a[i]);
            assert_memory_equal(out_t[i], out_a[i], (size_t)n_a[i] * sizeof **out_a);
            assert_int_equal(dt[i].n_kv, da[i].n_kv);
            assert_memory_equal(dt[i].tokens, da[i].tokens, (size_t)da[i].n_kv * sizeof *da[i].tokens);
        }
        if (passes_together >= passes_alone)
            fail_msg("round %d: %llu shared passes, %llu alone", round, (unsigned long long)passes_together,
                     (unsigned long long)passes_alone);
        /* each keeps the first (i + round) % 3 of its draft and goes on
         * with a token the draft did not pick */
        for (int i = 0; i < N; i++) {
            int a = (i + round) % 3;
            memcpy(text[i] + len[i], out_a[i], (size_t)a * sizeof **out_a);
            len[i] += a;
            text[i][len[i]] = (out_a[i][a] + 1) % 320;
            len[i]++;
        }
    }
    for (int i = 0; i < N; i++) {
        colo_spec_draft_seq_release(alone, &da[i]);
        colo_spec_draft_seq_release(together, &dt[i]);
    }
    colo_spec_drafter_free(alone);
    colo_spec_drafter_free(together);
    assert_int_equal(colo_engine_kv_free_blocks(d.r.e), colo_engine_kv_blocks(d.r.e));
    draft_close(&d);
}

/* What a sequence's next draft makes the draft model compute first
 * (colo_spec_drafter_pending, which the engine's plan charges): its whole
 * text before its first draft; after a draft of k whose first a tokens
 * were kept, then another token, 1 (a < k: the draft's K/V reaches as
 * far) or 2 (a = k: its K/V holds k - 1 drafted tokens, not the last);
 * its whole text again under a new epoch (the draft's cache replaced).
 * A catch-up pass of a prompt's tokens gives the catch-up token cost,
 * forgotten with the epoch. */
static void test_pending(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    colo_spec_draft_src src = {rig_get, rig_put, &d};
    colo_spec_drafter *dr = colo_spec_drafter_create(&src, dev, 320, 200);
    assert_non_null(dr);
    int32_t text[64], out[COLO_SPEC_MAX_TOKENS];
    memcpy(text, prompts[0], 24 * sizeof *text);
    int len = 24;
    colo_spec_draft_seq ds = {0};
    assert_true(colo_spec_drafter_begin(dr));
    assert_int_equal(colo_spec_drafter_pending(dr, &ds, text, len), 24);
    assert_true(colo_spec_drafter_catchup_ns(dr) == 0);
    const int k = 4, keep[3] = {0, 2, 4}, want[3] = {1, 1, 2};
    assert_int_equal(colo_spec_draft_run(dr, &ds, d.r.s, NULL, text, len, k, out), k);
    assert_true(colo_spec_drafter_catchup_ns(dr) > 0); /* 24 rows: a prompt's chunk */
    for (int i = 0; i < 3; i++) {
        memcpy(text + len, out, (size_t)keep[i] * sizeof *out);
        len += keep[i];
        text[len] = keep[i] < k ? (out[keep[i]] + 1) % 320 : 7; /* not what the draft picked */
        len++;
        assert_int_equal(colo_spec_drafter_pending(dr, &ds, text, len), want[i]);
        assert_int_equal(colo_spec_draft_run(dr, &ds, d.r.s, NULL, text, len, k, out), k);
    }
    colo_spec_drafter_end(dr);
    d.epoch = 2;
    assert_true(colo_spec_drafter_begin(dr));
    assert_int_equal(colo_spec_drafter_pending(dr, &ds, text, len), len);
    assert_true(colo_spec_drafter_catchup_ns(dr) == 0);
    colo_spec_drafter_end(dr);
    colo_spec_draft_seq_release(dr, &ds);
    colo_spec_drafter_free(dr);
    draft_close(&d);
}

/* Seeded sampling draws each token from the target's own row with the
 * sequence's own random stream: the same tokens as plain decoding. */
static void test_sampled_same_stream(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    run_out plain, spec;
    run(target_path, 3, prompts, 24, 0.8f, 0, NULL, 0, 48, &plain);
    run(target_path, 3, prompts, 24, 0.8f, 4, &d, 0, 48, &spec);
    assert_same(&plain, &spec, 3);
    assert_true(spec.st.spec_model_drafted > 0);
    draft_close(&d);
}

/* A cache of 9 blocks for three sequences of up to 24 + 100 tokens:
 * sequences are preempted and recomputed, and their drafts rolled back
 * with them; the output is plain decoding's. */
static void test_preempted(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    run_out plain, spec;
    run(target_path, 3, prompts, 24, 0, 0, NULL, 0, 100, &plain);
    run(target_path, 3, prompts, 24, 0, 5, &d, 9, 100, &spec);
    assert_true(spec.preemptions > 0);
    assert_same(&plain, &spec, 3);
    assert_true(spec.st.spec_model_accepted > 0);
    draft_close(&d);
}

/* No draft model to be had: plain decoding, no drafts, no error; one
 * that comes back (a new epoch: its cache replaced) drafts again, from
 * the start of each sequence. */
static void test_draft_unavailable(void **state)
{
    (void)state;
    draft_rig d;
    draft_open(&d, draft_path);
    d.available = false;
    run_out plain, spec;
    run(target_path, 2, prompts, 24, 0, 0, NULL, 0, 40, &plain);
    run(target_path, 2, prompts, 24, 0, 4, &d, 0, 40, &spec);
    assert_same(&plain, &spec, 2);
    assert_int_equal(spec.st.spec_drafted, 0);
    assert_int_equal(d.gets, 0);

    /* available for part of the run, then gone, then back as a new epoch */
    d.available = true;
    engine_rig r = {0};
    engine_rig_arena(&r, dev, "target", 1ull << 30);
    colo_spec_draft_src src = {rig_get, rig_put, &d};
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 128, .block_size = 16, .spec_tokens = 4,
                             .spec_always = true, .spec_no_lookup = true, .draft = &src};
    engine_rig_start_on(&r, dev, target_path, &gc);
    colo_engine_callbacks cbs[2];
    engine_results_reset(spec.res, cbs, 2);
    char err[256];
    for (int i = 0; i < 2; i++) {
        colo_engine_params p = {.max_tokens = 40, .temperature = 0, .top_p = 1, .logprobs = true};
        assert_non_null(colo_engine_add(r.e, prompts[i], 24, &p, &cbs[i], err, sizeof err));
    }
    int n, steps = 0;
    uint64_t drafted_at_gone = 0;
    for (; steps < 20000; steps++) {
        if (steps == 4) {
            d.available = false;
            colo_engine_step_stats st;
            colo_engine_get_step_stats(r.e, &st);
            drafted_at_gone = st.spec_drafted;
            assert_true(drafted_at_gone > 0);
            /* the draft's cache replaced: what the sequences held there is gone */
            colo_engine_prefix_flush(d.r.e);
            colo_engine_free(d.r.e);
            colo_llama_free(d.r.m);
            d.r.m = colo_llama_load(draft_path, d.r.arena, d.r.s, err, sizeof err);
            assert_non_null(d.r.m);
            colo_engine_config dc = {.max_running = 4, .max_step_tokens = 128, .block_size = 16, .n_blocks = 256};
            d.r.e = colo_engine_create(d.r.m, d.r.s, &dc, err, sizeof err);
            assert_non_null(d.r.e);
        }
        if (steps == 8) {
            colo_engine_step_stats st;
            colo_engine_get_step_stats(r.e, &st);
            assert_int_equal(st.spec_drafted, drafted_at_gone); /* nothing drafted meanwhile */
            d.available = true;
            d.epoch = 2;
        }
        assert_int_equal(colo_engine_step(r.e, NULL, &n), COLO_OK);
        if (!n && !colo_engine_n_running(r.e) && !colo_engine_n_waiting(r.e))
            break;
    }
    colo_engine_step_stats st;
    colo_engine_get_step_stats(r.e, &st);
    assert_true(st.spec_drafted > drafted_at_gone);
    engine_rig_close(&r);
    assert_same(&plain, &spec, 2);
    assert_int_equal(colo_engine_kv_free_blocks(d.r.e), colo_engine_kv_blocks(d.r.e));
    draft_close(&d);
}

static void cfg_of(colo_model_cfg *m, const char *name, const char *path)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->kind, sizeof m->kind, "llama");
    snprintf(m->path, sizeof m->path, "%s", path);
    m->memory_fraction = 0.1;
    m->kv_dtype = COLO_F16;
}

/* The vocabulary check reads both files; the message names both models. */
static void test_draft_check(void **state)
{
    (void)state;
    colo_model_cfg t, d, o, e;
    cfg_of(&t, "big", target_path);
    cfg_of(&d, "small", draft_path);
    cfg_of(&o, "other", other_path);
    char err[512] = "";
    assert_int_equal(colo_served_draft_check(&t, &d, err, sizeof err), COLO_OK);
    assert_int_equal(colo_served_draft_check(&t, &o, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "big"));
    assert_non_null(strstr(err, "other"));
    assert_non_null(strstr(err, "vocabulary"));
    assert_int_equal(colo_served_draft_check(&t, &t, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "itself"));
    snprintf(d.speculative.draft, sizeof d.speculative.draft, "other");
    assert_int_equal(colo_served_draft_check(&t, &d, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "of its own"));
    cfg_of(&e, "emb", "/nonexistent");
    snprintf(e.kind, sizeof e.kind, "bert");
    assert_int_equal(colo_served_draft_check(&t, &e, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "emb"));
    cfg_of(&e, "gone", "/nonexistent/x.gguf");
    assert_int_not_equal(colo_served_draft_check(&t, &e, err, sizeof err), COLO_OK);
    assert_non_null(strstr(err, "gone"));
}

/* SmolLM2: chat prompts, greedy, with the Q4_1 file drafting. */
static void test_smollm2(void **state)
{
    (void)state;
    char q4[1024], q8[1024];
    if (!colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", q4, sizeof q4))
        skip();
    const char *target = colo_model_cache_path("SmolLM2-135M-Instruct.Q8_0.gguf", q8, sizeof q8) ? q8 : q4;
    draft_rig d;
    draft_open(&d, q4);
    const colo_tokenizer *tok = colo_llama_tokenizer(d.r.m);
    static const char *const asks[] = {
        "<|im_start|>user\nWrite three sentences about a harbour town in the north.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<|im_start|>user\nList five fruits and their colours.<|im_end|>\n<|im_start|>assistant\n",
    };
    int32_t p[2][24];
    int n_prompt = 24;
    for (int i = 0; i < 2; i++) {
        int32_t *ids;
        int n_ids;
        assert_int_equal(colo_tokenizer_encode(tok, asks[i], strlen(asks[i]), true, true, &ids, &n_ids), COLO_OK);
        assert_true(n_ids >= 16);
        n_prompt = n_ids < n_prompt ? n_ids : n_prompt;
        memcpy(p[i], ids, (size_t)(n_ids < 24 ? n_ids : 24) * 4);
        free(ids);
    }
    run_out plain, spec;
    run(target, 2, p, n_prompt, 0, 0, NULL, 0, 48, &plain);
    run(target, 2, p, n_prompt, 0, 4, &d, 0, 48, &spec);
    assert_same(&plain, &spec, 2);
    assert_true(spec.st.spec_model_accepted > 0);
    printf("SmolLM2 (%s target): drafted %llu, accepted %llu\n", target == q8 ? "Q8_0" : "Q4_1",
           (unsigned long long)spec.st.spec_model_drafted, (unsigned long long)spec.st.spec_model_accepted);
    draft_close(&d);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(target_path, sizeof target_path, "%s/colo-test-spec-draft-q8-%d.gguf", tmp, (int)getpid());
    snprintf(draft_path, sizeof draft_path, "%s/colo-test-spec-draft-q4-%d.gguf", tmp, (int)getpid());
    snprintf(other_path, sizeof other_path, "%s/colo-test-spec-draft-other-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = 320, .n_ctx = 256, .type = COLO_Q8_0, .seed = 11};
    char err[256];
    if (colo_mkmodel_write(target_path, &c, err, sizeof err) != COLO_OK)
        goto fail;
    c.type = COLO_Q4_1;
    if (colo_mkmodel_write(draft_path, &c, err, sizeof err) != COLO_OK)
        goto fail;
    c.n_vocab = 352;
    if (colo_mkmodel_write(other_path, &c, err, sizeof err) != COLO_OK)
        goto fail;
    random_prompts(320);
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    dev = colo_device_open(&dc, err, sizeof err);
    if (dev)
        return 0;
fail:
    fprintf(stderr, "%s\n", err);
    return -1;
}

static int teardown(void **state)
{
    unlink(target_path);
    unlink(draft_path);
    unlink(other_path);
    return engine_fixture_close(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_bit_identical), cmocka_unit_test(test_batch_same_as_alone),
        cmocka_unit_test(test_pending),
        cmocka_unit_test(test_sampled_same_stream),
        cmocka_unit_test(test_preempted),            cmocka_unit_test(test_draft_unavailable),
        cmocka_unit_test(test_draft_check),          cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
