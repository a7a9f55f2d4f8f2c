/* Prefix caching and n choices in the generation engine, on a synthetic
 * model with F32 weights (every matrix path computes in float, so a
 * sequence's tokens do not depend on what else shares its step), and on
 * SmolLM2 with exact activations when its weights are present:
 * - greedy tokens are the same with the prefix cache on and off (on
 *   quantized weights with the default precision too, log-probabilities
 *   to the bit), for
 *   sequences that come after a cached prompt and for those that start
 *   while another with the same prefix still runs; hits are counted in
 *   tokens;
 * - a cache full of cached prefixes is evicted under memory pressure
 *   without changing a running sequence's tokens;
 * - every reference goes when the sequences end, and a flush frees every
 *   block;
 * - n choices: greedy gives n copies of the n = 1 answer; sampled choice i
 *   with seed s is the n = 1 answer with seed s + i. */
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
#include "models/cache/kv_cache.h"
#include "engine_fixture.h"
#include "tools/mkmodel.h"

#define BS 4 /* tokens per KV block */

static int setup(void **state)
{
    (void)state;
    return engine_fixture_open("prefix", 23);
}

typedef engine_rig rig;

static void rig_open_on(rig *r, colo_device *d, const char *path, size_t arena_bytes, int max_running, int n_blocks,
                        int block_size, bool cache)
{
    engine_rig_arena(r, d, "prefix", arena_bytes);
    colo_engine_config gc = {.max_running = max_running, .max_step_tokens = 256, .block_size = block_size,
                          .kv_type = COLO_F32, .n_blocks = n_blocks, .no_prefix_cache = !cache};
    engine_rig_start_on(r, d, path, &gc);
}

static void rig_open(rig *r, int max_running, int n_blocks, bool cache)
{
    rig_open_on(r, dev, model_path, (size_t)64 << 20, max_running, n_blocks, BS, cache);
}

/* After every sequence ended: no block is referenced, and a flush leaves
 * every block free and nothing cached. */
static void assert_all_released(rig *r)
{
    colo_kv_cache *kv = colo_llama_kv_cache(r->m);
    int n = colo_kv_cache_n_blocks(kv);
    for (int i = 0; i < n; i++)
        if (colo_kv_cache_refs(kv, i))
            fail_msg("block %d still has %d references", i, colo_kv_cache_refs(kv, i));
    assert_int_equal(colo_kv_cache_n_free(kv), n);
    colo_engine_prefix_flush(r->e);
    assert_int_equal(colo_kv_cache_n_cached(kv), 0);
    assert_int_equal(colo_kv_cache_n_evictable(kv), 0);
    assert_int_equal(colo_kv_cache_n_free(kv), n);
}

static void rig_close(rig *r)
{
    assert_int_equal(colo_engine_n_running(r->e) + colo_engine_n_waiting(r->e), 0);
    assert_all_released(r);
    engine_rig_close(r);
}

static void add_lp(rig *r, const int32_t *ids, int n, int max_tokens, float temp, uint64_t seed, bool logprobs,
                   engine_result *out)
{
    colo_engine_params p = {.max_tokens = max_tokens, .temperature = temp, .top_p = 1, .seed = seed,
                         .logprobs = logprobs};
    colo_engine_callbacks cb = {NULL, engine_on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    if (!colo_engine_add(r->e, ids, n, &p, &cb, err, sizeof err))
        fail_msg("add: %s", err);
}

static void add(rig *r, const int32_t *ids, int n, int max_tokens, float temp, uint64_t seed, engine_result *out)
{
    add_lp(r, ids, n, max_tokens, temp, seed, false, out);
}

static void add_n(rig *r, const int32_t *ids, int n_ids, int n, int max_tokens, float temp, uint64_t seed,
                  engine_result *out)
{
    colo_engine_params p = {.max_tokens = max_tokens, .temperature = temp, .top_p = 1, .seed = seed};
    colo_engine_callbacks cbs[COLO_ENGINE_MAX_CHOICES];
    colo_engine_seq *seqs[COLO_ENGINE_MAX_CHOICES];
    engine_results_reset(out, cbs, n);
    char err[256];
    if (colo_engine_add_n(r->e, ids, n_ids, &p, n, cbs, seqs, err, sizeof err) != COLO_OK)
        fail_msg("add_n: %s", err);
}

static void step(rig *r, int n_steps)
{
    int n;
    for (int i = 0; i < n_steps; i++)
        assert_int_equal(colo_engine_step(r->e, NULL, &n), COLO_OK);
}

/* A shared prefix of n_prefix random tokens, then a suffix of n_suffix of
 * sequence i's own (its first token differs from every other's). */
static int prompt(int32_t *ids, const int32_t *prefix, int n_prefix, int i, int n_suffix)
{
    memcpy(ids, prefix, (size_t)n_prefix * 4);
    ids[n_prefix] = 256 + i; /* distinct */
    for (int k = 1; k < n_suffix; k++)
        ids[n_prefix + k] = rand() % 256;
    return n_prefix + n_suffix;
}

static void random_tokens(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = rand() % 256;
}

static void test_cache_on_and_off_agree(void **state)
{
    (void)state;
    srand((unsigned)getpid());
    enum { NP = 40, NS = 4, MT = 20 };
    int32_t prefix[NP], ids[NS][NP + 16];
    int n[NS];
    random_tokens(prefix, NP);
    for (int i = 0; i < NS; i++)
        n[i] = prompt(ids[i], prefix, NP, i, 3 + i * 2);
    for (int concurrent = 0; concurrent < 2; concurrent++) {
        engine_result off[NS], on[NS];
        for (int cache = 0; cache < 2; cache++) {
            engine_result *res = cache ? on : off;
            rig r;
            rig_open(&r, 8, 0, cache);
            add(&r, ids[0], n[0], MT, 0, 0, &res[0]);
            if (concurrent)
                step(&r, 3); /* the first decodes while the others come */
            else
                engine_run_all(r.e);
            for (int i = 1; i < NS; i++)
                add(&r, ids[i], n[i], MT, 0, 0, &res[i]);
            engine_run_all(r.e);
            colo_engine_prefix_info pi;
            colo_engine_prefix_stats(r.e, &pi);
            assert_int_equal(pi.enabled, cache);
            assert_int_equal(pi.queries, cache ? NS : 0);
            /* each later sequence finds the shared prefix, in whole blocks, and nothing more */
            assert_int_equal(pi.hit_tokens, cache ? (uint64_t)(NS - 1) * (NP / BS * BS) : 0);
            rig_close(&r);
        }
        for (int i = 0; i < NS; i++)
            engine_assert_same(&off[i], &on[i]);
    }
}

/* The same on quantized weights (Q4_0, Q4_1) with the default precision,
 * where decode rounds activations to 8 bits and amplifies any difference
 * in the last bits: the rest of a prompt after a cache hit (a step of 2 or
 * more tokens) must get exactly the bits the whole prompt's prefill gives
 * it. Prompts of lengths that are no multiple of the block size, one after
 * the other, and a whole prompt repeated; the tokens' log-probabilities
 * must agree to the bit too (the greedy tokens of a small model rarely
 * turn on a last-bit difference). */
static void test_cache_on_and_off_agree_quantized(void **state)
{
    (void)state;
    const colo_dtype types[] = {COLO_Q4_0, COLO_Q4_1};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        char path[320];
        snprintf(path, sizeof path, "%s.q%zu", model_path, ti);
        colo_mkmodel_config mc = {.n_layer = 2, .n_embd = 128, .n_head = 4, .n_kv_head = 2, .n_ff = 256,
                                  .n_vocab = 320, .n_ctx = 256, .type = types[ti], .seed = 41 + (uint64_t)ti};
        char err[256];
        if (colo_mkmodel_write(path, &mc, err, sizeof err) != COLO_OK)
            fail_msg("mkmodel: %s", err);
        srand((unsigned)getpid() + (unsigned)ti);
        enum { NP = 37, NS = 5, MT = 24 };
        int32_t prefix[NP], ids[NS + 1][NP + 32];
        int n[NS + 1];
        random_tokens(prefix, NP);
        for (int i = 0; i < NS; i++)
            n[i] = prompt(ids[i], prefix, NP, i, 2 + i * 5); /* 39, 44, 49, 54, 59 tokens */
        memcpy(ids[NS], ids[2], sizeof ids[2]); /* the third prompt again */
        n[NS] = n[2];
        engine_result off[NS + 2], on[NS + 2];
        int32_t turn2[NP + 32 + MT + 3], more[3];
        random_tokens(more, 3);
        for (int cache = 0; cache < 2; cache++) {
            engine_result *res = cache ? on : off;
            rig r;
            rig_open_on(&r, dev, path, (size_t)64 << 20, 8, 0, BS, cache);
            for (int i = 0; i <= NS; i++) {
                add_lp(&r, ids[i], n[i], MT, 0, 0, true, &res[i]);
                engine_run_all(r.e);
            }
            /* A next turn: the first prompt, its answer and three more tokens.
             * The answer's blocks were computed by decode steps and are not
             * cached, so this prompt computes them as a prefill either way. */
            memcpy(turn2, ids[0], (size_t)n[0] * 4);
            memcpy(turn2 + n[0], res[0].toks, (size_t)res[0].n * 4);
            memcpy(turn2 + n[0] + res[0].n, more, sizeof more);
            add_lp(&r, turn2, n[0] + res[0].n + 3, MT, 0, 0, true, &res[NS + 1]);
            engine_run_all(r.e);
            colo_engine_prefix_info pi;
            colo_engine_prefix_stats(r.e, &pi);
            assert_int_equal(pi.enabled, cache);
            if (cache)
                assert_true(pi.hit_tokens >= (uint64_t)NS * (NP / BS * BS));
            rig_close(&r);
        }
        for (int i = 0; i <= NS + 1; i++) { /* the same tokens, and log-probabilities to the bit */
            engine_assert_same(&off[i], &on[i]);
            assert_memory_equal(off[i].lps, on[i].lps, (size_t)off[i].n * 4);
        }
        unlink(path);
    }
}

/* A prompt whose every block is cached still computes its last token (a
 * block it would write into is never a shared one), and repeating a whole
 * prompt gives the same answer. */
static void test_whole_prompt_cached(void **state)
{
    (void)state;
    int32_t ids[4 * BS];
    random_tokens(ids, 4 * BS);
    engine_result a, b, c;
    rig r;
    rig_open(&r, 4, 0, true);
    add(&r, ids, 4 * BS, 12, 0, 0, &a);
    engine_run_all(r.e);
    add(&r, ids, 4 * BS, 12, 0, 0, &b);
    add(&r, ids, 4 * BS, 12, 0, 0, &c); /* in the same step as b */
    engine_run_all(r.e);
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(r.e, &pi);
    assert_int_equal(pi.queries, 3);
    assert_int_equal(pi.hit_tokens, 2 * 3 * BS); /* three of four blocks each */
    engine_assert_same(&a, &b);
    engine_assert_same(&a, &c);
    rig_close(&r);
}

/* Fill a small cache with cached prefixes, then run sequences that need
 * the memory: evictions (and preemptions) happen, and each sequence's tokens
 * equal those of a run with room to spare and no prefix cache. Then the
 * fillers' prompts again: what was evicted is not found (its blocks hold
 * other sequences' K/V now), what is left is. */
static void test_eviction_under_pressure(void **state)
{
    (void)state;
    enum { NF = 6, NR = 4, MT = 24 };
    int32_t fill[NF][28], run[NR][32];
    int nrun[NR];
    for (int i = 0; i < NF; i++) {
        random_tokens(fill[i], 28);
        fill[i][24] = 300; /* the fillers run on their first 24 tokens, later on all 28 */
    }
    int32_t shared[12];
    random_tokens(shared, 12);
    for (int i = 0; i < NR; i++)
        nrun[i] = prompt(run[i], i < 2 ? fill[0] : shared, 12, i, 9); /* two share a cached prefix */
    engine_result roomy[NR], tight[NR], filler[NF], again_roomy[NF], again_tight[NF];
    rig r;
    rig_open(&r, 4, 0, false);
    for (int i = 0; i < NR; i++)
        add(&r, run[i], nrun[i], MT, 0, 0, &roomy[i]);
    engine_run_all(r.e);
    for (int i = 0; i < NF; i++)
        add(&r, fill[i], 28, 8, 0, 0, &again_roomy[i]);
    engine_run_all(r.e);
    rig_close(&r);

    rig_open(&r, 4, 40, true); /* 40 blocks of 4: 160 slots */
    for (int i = 0; i < NF; i++) {
        add(&r, fill[i], 24, 2, 0, 0, &filler[i]);
        engine_run_all(r.e);
    }
    colo_engine_prefix_info before;
    colo_engine_prefix_stats(r.e, &before);
    assert_int_equal(before.cached_blocks, NF * 6); /* every full block of every filler */
    assert_int_equal(before.evictable_blocks, NF * 6);
    assert_int_equal(colo_engine_kv_free_blocks(r.e), 40); /* cached blocks count as free */
    for (int i = 0; i < NR; i++)
        add(&r, run[i], nrun[i], MT, 0, 0, &tight[i]);
    engine_run_all(r.e);
    colo_engine_prefix_info after;
    colo_engine_prefix_stats(r.e, &after);
    assert_true(after.evicted_blocks > 0); /* the pressure was real */
    assert_true(after.hit_tokens >= 12);   /* the two sequences on fill[0]'s prefix found it */
    for (int i = 0; i < NR; i++)
        engine_assert_same(&roomy[i], &tight[i]);
    for (int i = 0; i < NF; i++)
        add(&r, fill[i], 28, 8, 0, 0, &again_tight[i]);
    engine_run_all(r.e);
    for (int i = 0; i < NF; i++)
        engine_assert_same(&again_roomy[i], &again_tight[i]);
    rig_close(&r);
}

/* A cache too small for four sequences: they are preempted and find their
 * own blocks again when readmitted (their prompts share nothing). */
static void test_preempted_find_their_prefix(void **state)
{
    (void)state;
    enum { NR = 4, MT = 30 };
    int32_t ids[NR][20];
    engine_result roomy[NR], tight[NR];
    for (int i = 0; i < NR; i++) {
        random_tokens(ids[i], 20);
        ids[i][0] = 256 + i;
    }
    rig r;
    rig_open(&r, 4, 0, false);
    for (int i = 0; i < NR; i++)
        add(&r, ids[i], 20, MT, 0, 0, &roomy[i]);
    engine_run_all(r.e);
    rig_close(&r);
    rig_open(&r, 4, 30, true);
    for (int i = 0; i < NR; i++)
        add(&r, ids[i], 20, MT, 0, 0, &tight[i]);
    engine_run_all(r.e);
    assert_true(colo_engine_preemptions(r.e) > 0);
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(r.e, &pi);
    assert_true(pi.queries > NR);  /* readmissions */
    assert_true(pi.hit_tokens > 0); /* only their own blocks can match */
    for (int i = 0; i < NR; i++)
        engine_assert_same(&roomy[i], &tight[i]);
    rig_close(&r);
}

static void test_n_greedy_copies(void **state)
{
    (void)state;
    /* prompts ending inside a block (its rows are copied) and on a block's end */
    int lens[] = {4 * BS + 3, 5 * BS};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        for (int cache = 0; cache < 2; cache++) {
            int32_t ids[64];
            random_tokens(ids, lens[li]);
            engine_result one, many[5], other;
            rig r;
            rig_open(&r, 8, 0, cache);
            add(&r, ids, lens[li], 16, 0, 0, &one);
            engine_run_all(r.e);
            int32_t ids2[64];
            random_tokens(ids2, 9);
            add(&r, ids2, 9, 16, 0, 0, &other); /* in the same batch */
            add_n(&r, ids, lens[li], 5, 16, 0, 0, many);
            engine_run_all(r.e);
            for (int i = 0; i < 5; i++)
                engine_assert_same(&one, &many[i]);
            assert_int_equal(other.done, 1);
            rig_close(&r);
        }
    }
}

static void test_n_seeded(void **state)
{
    (void)state;
    int32_t ids[30];
    random_tokens(ids, 30);
    enum { N = 4 };
    engine_result a[N], b[N], single[N];
    rig r;
    rig_open(&r, 8, 0, false);
    add_n(&r, ids, 30, N, 20, 1.0f, 77, a);
    engine_run_all(r.e);
    add_n(&r, ids, 30, N, 20, 1.0f, 77, b);
    engine_run_all(r.e);
    for (int i = 0; i < N; i++) {
        add(&r, ids, 30, 20, 1.0f, 77 + (uint64_t)i, &single[i]);
        engine_run_all(r.e);
    }
    int differ = 0;
    for (int i = 0; i < N; i++) {
        engine_assert_same(&a[i], &b[i]);      /* reproducible */
        engine_assert_same(&a[i], &single[i]); /* choice i draws from seed + i */
        differ += a[i].n != a[0].n || memcmp(a[i].toks, a[0].toks, (size_t)a[0].n * 4) != 0;
    }
    assert_true(differ > 0); /* the choices are not copies of one another */
    rig_close(&r);
}

/* More choices than the batch has room for: the rest wait and are computed
 * when admitted (the prompt from the prefix cache), with the same answer. */
static void test_n_past_batch(void **state)
{
    (void)state;
    int32_t ids[26];
    random_tokens(ids, 26);
    for (int cache = 0; cache < 2; cache++) {
        engine_result one, many[6];
        rig r;
        rig_open(&r, 2, 0, cache);
        add(&r, ids, 26, 10, 0, 0, &one);
        engine_run_all(r.e);
        add_n(&r, ids, 26, 6, 10, 0, 0, many);
        engine_run_all(r.e);
        for (int i = 0; i < 6; i++)
            engine_assert_same(&one, &many[i]);
        rig_close(&r);
    }
}

/* Canceling choices, the first (which computes the prompt) included,
 * before and after the fork: the others finish, every block comes back. */
static void test_n_cancel(void **state)
{
    (void)state;
    int32_t ids[22];
    random_tokens(ids, 22);
    engine_result one, many[4];
    rig r;
    rig_open(&r, 8, 0, true);
    add(&r, ids, 22, 12, 0, 0, &one);
    engine_run_all(r.e);
    colo_engine_params p = {.max_tokens = 12, .temperature = 0, .top_p = 1};
    colo_engine_callbacks cbs[4];
    colo_engine_seq *seqs[4];
    engine_results_reset(many, cbs, 4);
    char err[256];
    assert_int_equal(colo_engine_add_n(r.e, ids, 22, &p, 4, cbs, seqs, err, sizeof err), COLO_OK);
    colo_engine_cancel(r.e, seqs[0]); /* before its prompt ran: choice 1 computes it */
    assert_int_equal(many[0].status, COLO_ECANCELED);
    step(&r, 2);
    /* after the fork; a choice whose drafts were all kept may have ended
     * already, and its handle with it: it must then hold the whole answer */
    bool cancelled = !many[2].done;
    if (cancelled)
        colo_engine_cancel(r.e, seqs[2]);
    engine_run_all(r.e);
    if (cancelled)
        assert_int_equal(many[2].status, COLO_ECANCELED);
    else
        engine_assert_same(&one, &many[2]);
    engine_assert_same(&one, &many[1]);
    engine_assert_same(&one, &many[3]);
    rig_close(&r);
}

/* SmolLM2 (the default activations: 8-bit digits): a shared system
 * prompt, cache on and off. */
static void test_smollm2(void **state)
{
    (void)state;
    char path[512];
    const char *cache = getenv("XDG_CACHE_HOME");
    if (cache && *cache)
        snprintf(path, sizeof path, "%s/colo/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/colo/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "");
    if (access(path, R_OK) != 0) {
        printf("SmolLM2 weights absent (%s): skipped\n", path);
        skip();
    }
    char err[256];
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    colo_device *d = colo_device_open(&dc, err, sizeof err);
    assert_non_null(d);
    static const char *sys = "<|im_start|>system\nYou are a careful assistant. You answer in one short sentence, "
                             "you never invent facts, and when a question is ambiguous you say so and name the "
                             "two readings you see.<|im_end|>\n<|im_start|>user\n";
    static const char *users[] = {"What is the capital of France?", "Name a prime number above ten.",
                                  "Why is the sky blue?"};
    enum { NU = 3, MT = 16 };
    engine_result off[NU], on[NU], many[3];
    int32_t *ids[NU];
    int n[NU];
    for (int cache_on = 0; cache_on < 2; cache_on++) {
        rig r;
        rig_open_on(&r, d, path, (size_t)384 << 20, 8, 0, 16, cache_on);
        const colo_tokenizer *t = colo_llama_tokenizer(r.m);
        for (int i = 0; i < NU; i++) {
            char text[1024];
            snprintf(text, sizeof text, "%s%s<|im_end|>\n<|im_start|>assistant\n", sys, users[i]);
            if (!cache_on)
                assert_int_equal(colo_tokenizer_encode(t, text, strlen(text), true, true, &ids[i], &n[i]), COLO_OK);
        }
        engine_result *res = cache_on ? on : off;
        add(&r, ids[0], n[0], MT, 0, 0, &res[0]);
        step(&r, 2);
        for (int i = 1; i < NU; i++)
            add(&r, ids[i], n[i], MT, 0, 0, &res[i]);
        if (cache_on)
            add_n(&r, ids[1], n[1], 3, MT, 0, 0, many);
        engine_run_all(r.e);
        colo_engine_prefix_info pi;
        colo_engine_prefix_stats(r.e, &pi);
        if (cache_on)
            assert_true(pi.hit_tokens >= 2 * 32); /* the system prompt is more than two blocks */
        rig_close(&r);
    }
    for (int i = 0; i < NU; i++) {
        engine_assert_same(&off[i], &on[i]);
        free(ids[i]);
    }
    for (int i = 0; i < 3; i++)
        engine_assert_same(&off[1], &many[i]);
    colo_device_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_on_and_off_agree),
        cmocka_unit_test(test_cache_on_and_off_agree_quantized),
        cmocka_unit_test(test_whole_prompt_cached),
        cmocka_unit_test(test_eviction_under_pressure),
        cmocka_unit_test(test_preempted_find_their_prefix),
        cmocka_unit_test(test_n_greedy_copies),
        cmocka_unit_test(test_n_seeded),
        cmocka_unit_test(test_n_past_batch),
        cmocka_unit_test(test_n_cancel),
        cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
