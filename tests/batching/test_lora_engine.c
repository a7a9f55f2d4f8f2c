/* LoRA adapters in the generation engine (batching/engine.h), on a
 * synthetic model with Q8_0 weights (whose default products give a row the
 * same bits whatever shares its step):
 * - nine sequences of eight adapters and the bare model, run together in
 *   one engine, give each the tokens and log-probabilities (to the bit) it
 *   gets alone;
 * - the prefix cache keeps each adapter's blocks to itself: a prompt that
 *   another adapter (or the bare model) computed is not found, the same
 *   adapter's is, with the same tokens as with the cache off;
 * - n choices of an adapter's prompt fork with the adapter: greedy, each
 *   is the n = 1 answer;
 * - a KV cache too small for every sequence at once preempts and
 *   recomputes adapters' sequences with their adapters: the same tokens;
 * - a sequence that names an empty slot is refused. */
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
#include "engine_fixture.h"
#include "models/arch/lora.h"

enum { N_ADAPTERS = 8, BS = 4, MAX_TOKENS = 12 };

static char adapter_path[N_ADAPTERS][320];

static int setup(void **state)
{
    if (engine_fixture_open("lora-engine", 31) != 0)
        return -1;
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128, .n_vocab = 320,
                             .n_ctx = 256, .type = COLO_Q8_0, .seed = 31};
    char e0[256];
    if (colo_mkmodel_write(model_path, &c, e0, sizeof e0) != COLO_OK) { /* the fixture's, in Q8_0 */
        fprintf(stderr, "%s\n", e0);
        return -1;
    }
    for (int a = 0; a < N_ADAPTERS; a++) {
        char err[256];
        colo_mkmodel_lora l = {.rank = 4 + 4 * (a % 4), .type = COLO_F32, .seed = (uint64_t)a + 1,
                               .attention_only = a == 5};
        snprintf(adapter_path[a], sizeof adapter_path[a], "%s.lora%d", model_path, a);
        if (colo_mkmodel_write_lora(adapter_path[a], &c, &l, err, sizeof err) != COLO_OK) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    }
    (void)state;
    return 0;
}

static int teardown(void **state)
{
    for (int a = 0; a < N_ADAPTERS; a++)
        unlink(adapter_path[a]);
    return engine_fixture_close(state);
}

typedef struct {
    colo_arena *arena;
    colo_stream *s;
    colo_llama *m;
    colo_engine *e;
    int slot[N_ADAPTERS];
} rig;

static void rig_open_blocks(rig *r, int max_running, bool cache, int n_blocks);
static void rig_open(rig *r, int max_running, bool cache) { rig_open_blocks(r, max_running, cache, 256); }

static void rig_open_blocks(rig *r, int max_running, bool cache, int n_blocks)
{
    char err[256];
    assert_non_null(r->arena = colo_arena_create_bytes(dev, "lora", (size_t)64 << 20, err, sizeof err));
    assert_non_null(r->s = colo_stream_create(dev, NULL, err, sizeof err));
    assert_non_null(r->m = colo_llama_load(model_path, r->arena, r->s, err, sizeof err));
    for (int a = 0; a < N_ADAPTERS; a++)
        if (colo_llama_lora_load(r->m, r->s, adapter_path[a], 1.0f, &r->slot[a], err, sizeof err) != COLO_OK)
            fail_msg("adapter %d: %s", a, err);
    colo_engine_config gc = {.max_running = max_running, .max_step_tokens = 256, .block_size = BS,
                             .kv_type = COLO_F32, .n_blocks = n_blocks, .no_prefix_cache = !cache};
    if (!(r->e = colo_engine_create(r->m, r->s, &gc, err, sizeof err)))
        fail_msg("engine: %s", err);
}

static void rig_close(rig *r)
{
    colo_engine_free(r->e);
    colo_llama_free(r->m);
    assert_int_equal(colo_arena_used(r->arena), 0);
    colo_stream_destroy(r->s);
    colo_arena_destroy(r->arena);
}

/* adapter: an index into r->slot, or -1 for the bare model. */
static void add(rig *r, const int32_t *ids, int n, int adapter, engine_result *out)
{
    colo_engine_params p = {.max_tokens = MAX_TOKENS, .top_p = 1, .logprobs = true,
                            .has_adapter = adapter >= 0, .adapter_slot = adapter >= 0 ? r->slot[adapter] : 0};
    colo_engine_callbacks cb = {NULL, engine_on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    if (!colo_engine_add(r->e, ids, n, &p, &cb, err, sizeof err))
        fail_msg("add: %s", err);
}

static void prompt_of(int i, int32_t *ids, int n)
{
    for (int k = 0; k < n; k++)
        ids[k] = (int32_t)((i * 53 + k * 29 + 7) % 256);
}

static void test_mixed_adapters_match_alone(void **state)
{
    (void)state;
    enum { N = N_ADAPTERS + 1, LEN = 10 };
    engine_result alone[N], together[N];
    int32_t ids[N][LEN];
    rig r;
    rig_open(&r, N, false);
    for (int i = 0; i < N; i++) {
        prompt_of(i, ids[i], LEN);
        add(&r, ids[i], LEN - (i % 3), i < N_ADAPTERS ? i : -1, &alone[i]);
        engine_run_all(r.e);
    }
    for (int i = N - 1; i >= 0; i--) /* together, added in the other order */
        add(&r, ids[i], LEN - (i % 3), i < N_ADAPTERS ? i : -1, &together[i]);
    engine_run_all(r.e);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        engine_assert_same(&alone[i], &together[i]);
        assert_memory_equal(alone[i].lps, together[i].lps, (size_t)alone[i].n * sizeof *alone[i].lps);
        differ += i > 0 && memcmp(alone[i].lps, alone[0].lps, sizeof alone[0].lps[0]) != 0;
    }
    assert_true(differ > 0);
    rig_close(&r);
}

/* hit tokens of the prefix cache since the last call */
static uint64_t hits(rig *r, uint64_t *last)
{
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(r->e, &pi);
    uint64_t d = pi.hit_tokens - *last;
    *last = pi.hit_tokens;
    return d;
}

static void test_prefix_cache_per_adapter(void **state)
{
    (void)state;
    enum { LEN = 24 };
    int32_t ids[LEN];
    prompt_of(3, ids, LEN);
    rig off, on;
    rig_open(&off, 4, false);
    engine_result ref0, ref1, base;
    add(&off, ids, LEN, 0, &ref0);
    add(&off, ids, LEN, 1, &ref1);
    add(&off, ids, LEN, -1, &base);
    engine_run_all(off.e);
    rig_close(&off);
    assert_true(memcmp(ref0.lps, base.lps, sizeof *ref0.lps) != 0); /* the adapter changes the model */

    rig_open(&on, 4, true);
    uint64_t last = 0;
    engine_result got;
    add(&on, ids, LEN, -1, &got); /* the bare model caches the prompt */
    engine_run_all(on.e);
    engine_assert_same(&got, &base);
    assert_int_equal(hits(&on, &last), 0);
    add(&on, ids, LEN, 0, &got); /* adapter 0 finds none of it */
    engine_run_all(on.e);
    assert_int_equal(hits(&on, &last), 0);
    engine_assert_same(&got, &ref0);
    assert_memory_equal(got.lps, ref0.lps, (size_t)got.n * sizeof *got.lps);
    add(&on, ids, LEN, 1, &got); /* nor does adapter 1 find adapter 0's */
    engine_run_all(on.e);
    assert_int_equal(hits(&on, &last), 0);
    engine_assert_same(&got, &ref1);
    add(&on, ids, LEN, 0, &got); /* adapter 0 finds its own */
    engine_run_all(on.e);
    assert_true(hits(&on, &last) >= (uint64_t)(LEN - 2) / BS * BS);
    engine_assert_same(&got, &ref0);
    assert_memory_equal(got.lps, ref0.lps, (size_t)got.n * sizeof *got.lps);
    add(&on, ids, LEN, -1, &got); /* and the bare model its own */
    engine_run_all(on.e);
    assert_true(hits(&on, &last) > 0);
    engine_assert_same(&got, &base);
    colo_engine_prefix_flush(on.e);
    rig_close(&on);
}

static void test_n_choices_fork_with_adapter(void **state)
{
    (void)state;
    enum { N = 4, LEN = 9 };
    int32_t ids[LEN];
    prompt_of(5, ids, LEN);
    rig r;
    rig_open(&r, 8, true);
    engine_result one, many[N];
    add(&r, ids, LEN, 2, &one);
    engine_run_all(r.e);
    colo_engine_params p = {.max_tokens = MAX_TOKENS, .top_p = 1, .logprobs = true, .has_adapter = true,
                            .adapter_slot = r.slot[2]};
    colo_engine_callbacks cbs[N];
    colo_engine_seq *seqs[N];
    engine_results_reset(many, cbs, N);
    char err[256];
    assert_int_equal(colo_engine_add_n(r.e, ids, LEN, &p, N, cbs, seqs, err, sizeof err), COLO_OK);
    engine_run_all(r.e);
    for (int i = 0; i < N; i++)
        engine_assert_same(&one, &many[i]);
    colo_engine_prefix_flush(r.e);
    rig_close(&r);
}

/* Eight sequences of four adapters in a cache of 14 blocks of 4 tokens
 * (each needs up to 6): sequences are preempted and recomputed, and each
 * ends with the tokens it has alone. */
static void test_preemption_keeps_adapter(void **state)
{
    (void)state;
    enum { N = 8, LEN = 10 };
    int32_t ids[N][LEN];
    engine_result alone[N], squeezed[N];
    rig r;
    rig_open(&r, N, false);
    for (int i = 0; i < N; i++) {
        prompt_of(i + 20, ids[i], LEN);
        add(&r, ids[i], LEN, i % 4, &alone[i]);
        engine_run_all(r.e);
    }
    rig_close(&r);
    rig_open_blocks(&r, N, false, 14);
    for (int i = 0; i < N; i++)
        add(&r, ids[i], LEN, i % 4, &squeezed[i]);
    engine_run_all(r.e);
    int preempted = 0;
    for (int i = 0; i < N; i++) {
        engine_assert_same(&alone[i], &squeezed[i]);
        preempted += squeezed[i].n_preempted;
    }
    assert_true(preempted > 0);
    rig_close(&r);
}

static void test_empty_slot_refused(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, 2, true);
    int32_t ids[4] = {1, 2, 3, 4};
    colo_engine_params p = {.max_tokens = 2, .top_p = 1, .has_adapter = true, .adapter_slot = COLO_LORA_SLOTS - 1};
    engine_result out;
    colo_engine_callbacks cb = {NULL, engine_on_done, &out};
    char err[256] = "";
    assert_null(colo_engine_add(r.e, ids, 4, &p, &cb, err, sizeof err));
    assert_non_null(strstr(err, "no adapter is loaded in slot"));
    colo_llama_lora_unload(r.m, r.s, r.slot[2]);
    p.adapter_slot = r.slot[2];
    assert_null(colo_engine_add(r.e, ids, 4, &p, &cb, err, sizeof err));
    rig_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_adapters_match_alone),
        cmocka_unit_test(test_prefix_cache_per_adapter),
        cmocka_unit_test(test_n_choices_fork_with_adapter),
        cmocka_unit_test(test_preemption_keeps_adapter),
        cmocka_unit_test(test_empty_slot_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
