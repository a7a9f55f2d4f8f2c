/* The generation engine over a quantized KV cache (kv_cache.dtype q8_0 and
 * q4_0) on a small synthetic model with F32 weights and heads of 32:
 * - a block is charged at its quantized size (34 bytes per 32 elements for
 *   Q8_0, 18 for Q4_0), in a fixed arena and in an elastic pool;
 * - sequences generate to their limit, and a sequence's greedy tokens do
 *   not depend on the batch, on chunked prefill, on being preempted and
 *   recomputed, on the prefix cache being on or off, or on being one of n
 *   choices forked from one prompt (each row is quantized once, on its
 *   own, when written). */
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
#include "models/cache/kv_cache.h"
#include "tools/mkmodel.h"

#define BS 4      /* tokens per KV block */
#define WIDTH 128 /* 4 heads of 32 on 2 KV heads: kv_dim 64, two blocks of 32 per row */

static uint64_t seed;

static int setup(void **state)
{
    (void)state;
    seed = 11; /* fixed: the model and prompts are the same every run (no EOS before the limits below) */
    return engine_fixture_open_width("kv-quant", seed, WIDTH);
}

typedef engine_rig rig;

static void rig_start(rig *r, colo_dtype kv, int max_running, int step_tokens, int n_blocks, bool cache)
{
    colo_engine_config gc = {.max_running = max_running, .max_step_tokens = step_tokens, .block_size = BS,
                          .kv_type = kv, .n_blocks = n_blocks, .no_prefix_cache = !cache};
    engine_rig_start(r, &gc);
    assert_int_equal(colo_kv_cache_config_get(colo_llama_kv_cache(r->m))->dtype, kv);
}

static void rig_open(rig *r, colo_dtype kv, int max_running, int step_tokens, int n_blocks, bool cache)
{
    engine_rig_arena(r, dev, "kv-quant", 64 << 20);
    rig_start(r, kv, max_running, step_tokens, n_blocks, cache);
}

/* Prompt i of n tokens (the same every run); prompts with the
 * same `family` share their first `shared` tokens. */
static void prompt(int family, int i, int shared, int32_t *ids, int n)
{
    for (int part = 0; part < 2; part++) {
        uint64_t x = seed ^ ((uint64_t)(family * 1000 + (part ? i + 1 : 0) + 1) * 0x9E3779B97F4A7C15ull);
        for (int k = part ? shared : 0; k < (part ? n : shared); k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ids[k] = (int32_t)(x % 256);
        }
    }
}

static void add(rig *r, const int32_t *ids, int n, int max_tokens, engine_result *out)
{
    colo_engine_params p = {.max_tokens = max_tokens, .temperature = 0, .top_p = 1};
    colo_engine_callbacks cb = {NULL, engine_on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    if (!colo_engine_add(r->e, ids, n, &p, &cb, err, sizeof err))
        fail_msg("add: %s", err);
}

/* n_seqs prompts (lengths 5 + 6 i) in one engine; returns its preemptions. */
static uint64_t generate(colo_dtype kv, int max_running, int step_tokens, int n_blocks, int n_seqs, int max_tokens,
                         engine_result *out)
{
    rig r;
    rig_open(&r, kv, max_running, step_tokens, n_blocks, false);
    for (int i = 0; i < n_seqs; i++) {
        int32_t ids[64];
        prompt(i, 0, 0, ids, 5 + 6 * i);
        add(&r, ids, 5 + 6 * i, max_tokens, &out[i]);
    }
    engine_run_all(r.e);
    uint64_t preemptions = colo_engine_preemptions(r.e);
    engine_rig_close(&r);
    return preemptions;
}

static void test_block_bytes(void **state)
{
    (void)state;
    static const struct {
        colo_dtype t;
        size_t row_bytes; /* kv_dim 64 */
    } types[] = {{COLO_F32, 256}, {COLO_F16, 128}, {COLO_Q8_0, 68}, {COLO_Q4_0, 36}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        rig r;
        rig_open(&r, types[i].t, 2, 64, 10, true);
        colo_kv_cache *kv = colo_llama_kv_cache(r.m);
        size_t block = (size_t)BS * 2 /* K, V */ * 2 /* layers */ * types[i].row_bytes;
        assert_int_equal(colo_llama_kv_block_bytes(colo_llama_hparams_get(r.m), BS, types[i].t), block);
        assert_int_equal(colo_kv_cache_bytes(kv), 10 * block);
        engine_rig_close(&r);
    }
}

/* In an elastic pool a KV block is charged as it is handed out, at its
 * quantized size, and every byte goes back when the sequences end and the
 * prefix cache is flushed. */
static void test_elastic_charges_quantized_blocks(void **state)
{
    (void)state;
    size_t block = colo_kv_cache_block_bytes(
        &(colo_kv_cache_config){.n_layer = 2, .kv_dim = 64, .block_size = BS, .n_blocks = 1, .dtype = COLO_Q8_0});
    assert_int_equal(block, (size_t)BS * 2 * 2 * 68);
    colo_mem_pool *pool = colo_mem_pool_create((size_t)64 << 20);
    assert_non_null(pool);
    char err[256];
    rig r;
    r.arena = colo_arena_create_elastic(dev, "kv-quant", pool, (size_t)32 << 20, (size_t)64 << 20, err, sizeof err);
    if (!r.arena)
        fail_msg("arena: %s", err);
    rig_start(&r, COLO_Q8_0, 4, 64, 64, true);
    size_t before = colo_mem_pool_used(pool);
    engine_result out[2];
    int32_t ids[2][40];
    prompt(7, 0, 0, ids[0], 4 * BS + 1), prompt(8, 0, 0, ids[1], 2 * BS);
    add(&r, ids[0], 4 * BS + 1, 8, &out[0]);
    add(&r, ids[1], 2 * BS, 8, &out[1]);
    int n;
    assert_int_equal(colo_engine_step(r.e, NULL, &n), COLO_OK);
    colo_kv_cache *kv = colo_llama_kv_cache(r.m);
    int used = colo_kv_cache_n_used(kv);
    assert_true(used >= 5 + 2);
    assert_int_equal(colo_mem_pool_used(pool) - before, (size_t)used * block);
    engine_run_all(r.e);
    colo_engine_prefix_flush(r.e);
    assert_int_equal(colo_mem_pool_used(pool), before);
    assert_int_equal(out[0].n, 8);
    assert_int_equal(out[1].n, 8);
    engine_rig_close(&r);
    colo_mem_pool_destroy(pool);
}

static void batch_invariance(colo_dtype kv)
{
    engine_result alone[4], batch[4], chunked[4];
    for (int i = 0; i < 4; i++) {
        rig r;
        rig_open(&r, kv, 1, 256, 0, false);
        int32_t ids[64];
        prompt(i, 0, 0, ids, 5 + 6 * i);
        add(&r, ids, 5 + 6 * i, 24, &alone[i]);
        engine_run_all(r.e);
        engine_rig_close(&r);
    }
    generate(kv, 4, 256, 0, 4, 24, batch); /* all four in one batch */
    generate(kv, 4, 5, 0, 4, 24, chunked); /* 5-token steps: prefill in chunks */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(alone[i].n, 24);
        assert_string_equal(alone[i].finish, "length");
        engine_assert_same(&batch[i], &alone[i]);
        engine_assert_same(&chunked[i], &alone[i]);
    }
}

static void test_batch_invariance_q8_0(void **state)
{
    (void)state;
    batch_invariance(COLO_Q8_0);
}

static void test_batch_invariance_q4_0(void **state)
{
    (void)state;
    batch_invariance(COLO_Q4_0);
}

static void test_preemption_recomputes_exactly(void **state)
{
    (void)state;
    engine_result roomy[4], tight[4];
    assert_int_equal(generate(COLO_Q8_0, 4, 64, 0, 4, 30, roomy), 0);
    uint64_t preemptions = generate(COLO_Q8_0, 4, 64, 16, 4, 30, tight); /* 64 slots for four sequences */
    assert_true(preemptions > 0);
    for (int i = 0; i < 4; i++)
        engine_assert_same(&tight[i], &roomy[i]);
}

/* Three prompts sharing 3 blocks and a bit: the later ones find the prefix
 * cached (hits counted) and still get the tokens the cache off gives them;
 * n = 3 greedy choices forked from one prompt (full blocks shared, the
 * partial one copied) are three copies of the one answer. */
static void test_prefix_cache_and_fork(void **state)
{
    (void)state;
    enum { N = 3, LEN = 3 * BS + 6, SHARED = 3 * BS + 2 };
    int32_t ids[N][LEN];
    for (int i = 0; i < N; i++)
        prompt(9, i, SHARED, ids[i], LEN);
    engine_result got[2][N];
    for (int cache = 0; cache < 2; cache++) {
        rig r;
        rig_open(&r, COLO_Q8_0, 4, 256, 0, cache);
        add(&r, ids[0], LEN, 12, &got[cache][0]);
        engine_run_all(r.e);
        for (int i = 1; i < N; i++)
            add(&r, ids[i], LEN, 12, &got[cache][i]);
        engine_run_all(r.e);
        colo_engine_prefix_info pi;
        colo_engine_prefix_stats(r.e, &pi);
        if (cache)
            assert_true(pi.hit_tokens >= (uint64_t)(N - 1) * 3 * BS);
        else
            assert_int_equal(pi.hit_tokens, 0);
        if (cache) {
            engine_result many[N];
            colo_engine_params p = {.max_tokens = 12, .temperature = 0, .top_p = 1};
            colo_engine_callbacks cbs[N];
            colo_engine_seq *seqs[N];
            engine_results_reset(many, cbs, N);
            char err[256];
            int32_t fresh[LEN];
            prompt(10, 0, 0, fresh, LEN); /* not cached: the leader computes it, the others fork */
            engine_result one;
            if (colo_engine_add_n(r.e, fresh, LEN, &p, N, cbs, seqs, err, sizeof err) != COLO_OK)
                fail_msg("add_n: %s", err);
            engine_run_all(r.e);
            colo_engine_prefix_flush(r.e);
            add(&r, fresh, LEN, 12, &one);
            engine_run_all(r.e);
            for (int i = 0; i < N; i++)
                engine_assert_same(&many[i], &one);
        }
        engine_rig_close(&r);
    }
    for (int i = 0; i < N; i++)
        engine_assert_same(&got[1][i], &got[0][i]);
}

/* A model whose head size is not whole blocks cannot have a quantized
 * cache, and says so. */
static void test_head_size_refused(void **state)
{
    (void)state;
    char path[320], err[256] = "";
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/colo-test-kv-quant-hd16-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 1, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 64,
                             .n_vocab = 300, .n_ctx = 64, .type = COLO_F32, .seed = seed};
    assert_int_equal(colo_mkmodel_write(path, &c, err, sizeof err), COLO_OK);
    colo_llama_memory mem;
    assert_int_equal(colo_llama_memory_need(path, COLO_Q8_0, &mem, err, sizeof err), COLO_EUNSUPPORTED);
    assert_non_null(strstr(err, "q8_0"));
    assert_non_null(strstr(err, "is 16"));
    assert_int_equal(colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err), COLO_OK);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_bytes),
        cmocka_unit_test(test_elastic_charges_quantized_blocks),
        cmocka_unit_test(test_batch_invariance_q8_0),
        cmocka_unit_test(test_batch_invariance_q4_0),
        cmocka_unit_test(test_preemption_recomputes_exactly),
        cmocka_unit_test(test_prefix_cache_and_fork),
        cmocka_unit_test(test_head_size_refused),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
