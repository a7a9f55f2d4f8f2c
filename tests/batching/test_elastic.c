/* Elastic memory with real sequences on the CPU backend: two models share
 * one memory pool. A model borrows the idle guarantee of the other and runs
 * more sequences at once than its own guarantee allows; when the owner
 * bursts, the borrower gives its memory back within one of its steps; the
 * preempted sequences finish with the tokens they make alone (greedy), and
 * no request fails; also with Q8_0 caches. */
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
#include "tools/mkmodel.h"

#define BS 4          /* tokens per KV block */
#define PROMPT 8      /* tokens per prompt */
#define GEN 16        /* generated tokens per sequence */
#define SEQ_BLOCKS ((PROMPT + GEN) / BS)
#define N_A 8         /* the borrower's sequences */
#define N_B 6         /* the owner's burst */

static uint64_t seed;
/* The KV cache of every rig and one token's K (or V) row: F32 on the
 * fixture's model (kv_dim 32), Q8_0 on a wider one (kv_dim 64: heads of 32,
 * whole blocks) in test_borrow_and_reclaim_q8_0. */
static colo_dtype kv_type = COLO_F32;
static int kv_dim = 32;

static int setup(void **state)
{
    (void)state;
    seed = (uint64_t)getpid() * 2654435761u;
    return engine_fixture_open("elastic", seed);
}

typedef engine_rig rig;

static void rig_start(rig *r, int max_running, int n_blocks)
{
    colo_engine_config gc = {.max_running = max_running, .max_step_tokens = 256, .block_size = BS,
                          .kv_type = kv_type, .n_blocks = n_blocks};
    engine_rig_start(r, &gc);
}

static void rig_fixed(rig *r, int max_running, int n_blocks)
{
    engine_rig_arena(r, dev, "fixed", 64 << 20);
    rig_start(r, max_running, n_blocks);
}

static void rig_elastic(rig *r, colo_mem_pool *pool, const char *name, size_t guarantee, size_t ceiling,
                        int max_running, int n_blocks)
{
    char err[256];
    r->arena = colo_arena_create_elastic(dev, name, pool, guarantee, ceiling, err, sizeof err);
    if (!r->arena)
        fail_msg("arena: %s", err);
    rig_start(r, max_running, n_blocks);
}

typedef struct {
    int32_t toks[64];
    int n;
    colo_status status;
    const char *finish;
    int n_preempted;
    int done;
} result;

static void on_token(void *ud, int32_t tok, const char *piece, size_t len)
{
    (void)ud, (void)tok, (void)piece, (void)len;
}

static void on_done(void *ud, const colo_engine_outcome *o)
{
    result *r = ud;
    r->n = o->n_tokens < 64 ? o->n_tokens : 64;
    memcpy(r->toks, o->tokens, (size_t)r->n * 4);
    r->status = o->status;
    r->finish = o->finish_reason;
    r->n_preempted = o->n_preempted;
    r->done++;
}

/* Prompt i of model `which` (n tokens): fresh tokens each run (seeded by the pid). */
static void prompt_ids_n(int which, int i, int32_t *ids, int n)
{
    uint64_t x = seed ^ ((uint64_t)(which * 100 + i + 1) * 0x9E3779B97F4A7C15ull);
    for (int k = 0; k < n; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[k] = (int32_t)(x % 256);
    }
}

static void prompt_ids(int which, int i, int32_t *ids) { prompt_ids_n(which, i, ids, PROMPT); }

static void add(rig *r, int which, int i, result *out)
{
    int32_t ids[PROMPT];
    prompt_ids(which, i, ids);
    colo_engine_params p = {.max_tokens = GEN, .temperature = 0, .top_p = 1};
    colo_engine_callbacks cb = {on_token, on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    assert_non_null(colo_engine_add(r->e, ids, PROMPT, &p, &cb, err, sizeof err));
}

/* A prompt that fills a sequence's blocks but the last (its full blocks are
 * what the prefix cache keeps: blocks of generated text are not cached), and
 * one generated token. */
static void add_filling(rig *r, int which, int i, result *out)
{
    int32_t ids[SEQ_BLOCKS * BS - 1];
    prompt_ids_n(which, i, ids, SEQ_BLOCKS * BS - 1);
    colo_engine_params p = {.max_tokens = 1, .temperature = 0, .top_p = 1};
    colo_engine_callbacks cb = {on_token, on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    assert_non_null(colo_engine_add(r->e, ids, SEQ_BLOCKS * BS - 1, &p, &cb, err, sizeof err));
}

static bool idle(rig *r) { return !colo_engine_n_running(r->e) && !colo_engine_n_waiting(r->e); }

static void step(rig *r)
{
    int n;
    assert_int_equal(colo_engine_step(r->e, NULL, &n), COLO_OK);
}

/* Each prompt alone, in an engine of its own with a fixed arena. */
static void reference(int which, int n, result *out)
{
    for (int i = 0; i < n; i++) {
        rig r;
        rig_fixed(&r, 1, 64);
        add(&r, which, i, &out[i]);
        for (int guard = 0; guard < 1000 && !idle(&r); guard++)
            step(&r);
        assert_int_equal(out[i].done, 1);
        engine_rig_close(&r);
    }
}

static void assert_same(const result *got, const result *want)
{
    assert_int_equal(got->done, 1);
    assert_int_equal(got->status, COLO_OK);
    assert_int_equal(got->n, want->n);
    assert_memory_equal(got->toks, want->toks, (size_t)got->n * 4);
    assert_string_equal(got->finish, want->finish);
}

/* Bytes a loaded model and its engine charge before any KV block. */
static size_t fixed_bytes(int max_running, int n_blocks)
{
    colo_mem_pool *pool = colo_mem_pool_create((size_t)256 << 20);
    rig r;
    rig_elastic(&r, pool, "probe", (size_t)64 << 20, (size_t)64 << 20, max_running, n_blocks);
    size_t fixed = colo_arena_used(r.arena);
    engine_rig_close(&r);
    colo_mem_pool_destroy(pool);
    return fixed;
}

static size_t block_bytes(void)
{
    return (size_t)BS * 2 /* layers */ * 2 /* K, V */ * colo_dtype_row_bytes(kv_type, kv_dim);
}

static void test_borrow_and_reclaim(void **state)
{
    (void)state;
    result ref_a[N_A], ref_b[N_B], got_a[N_A], got_b[N_B];
    reference(0, N_A, ref_a);
    reference(1, N_B, ref_b);

    const int a_blocks = N_A * SEQ_BLOCKS, b_blocks = N_B * SEQ_BLOCKS;
    size_t bb = block_bytes(), slack = 64 << 10;
    size_t fixed_a = fixed_bytes(N_A, a_blocks), fixed_b = fixed_bytes(N_B, b_blocks);
    /* A is guaranteed one sequence's blocks, B its whole burst; the pool
     * holds exactly the guarantees. */
    size_t g_a = fixed_a + SEQ_BLOCKS * bb, g_b = fixed_b + (size_t)b_blocks * bb;
    colo_mem_pool *pool = colo_mem_pool_create(g_a + g_b);
    rig a, b;
    rig_elastic(&a, pool, "a", g_a, fixed_a + (size_t)a_blocks * bb + slack, N_A, a_blocks);
    rig_elastic(&b, pool, "b", g_b, g_b + slack, N_B, b_blocks);
    assert_int_equal(colo_arena_used(a.arena), fixed_a);

    /* B idle: A borrows B's guarantee and runs every sequence at once. */
    for (int i = 0; i < N_A; i++)
        add(&a, 0, i, &got_a[i]);
    int peak_running = 0;
    for (int i = 0; i < 4; i++) {
        step(&a);
        /* a sequence may end at once (its first token is EOS): it ran too */
        int done = 0;
        for (int j = 0; j < N_A; j++)
            done += got_a[j].done;
        if (colo_engine_n_running(a.e) + done > peak_running)
            peak_running = colo_engine_n_running(a.e) + done;
    }
    colo_arena_stats sa, sb;
    colo_arena_get_stats(a.arena, &sa);
    colo_arena_get_stats(b.arena, &sb);
    if (peak_running != N_A)
        fprintf(stderr, "peak %d, a used %zu of guarantee %zu, pool %zu of %zu, waiting %d\n", peak_running,
                sa.used_bytes, g_a, colo_mem_pool_used(pool), colo_mem_pool_budget(pool), colo_engine_n_waiting(a.e));
    assert_int_equal(peak_running, N_A);
    assert_true(sa.borrowed_bytes > 0);
    assert_true(sa.used_bytes > g_a);
    assert_true(sb.lent_bytes > 0);
    assert_int_equal(sb.lent_bytes, sa.borrowed_bytes); /* nothing unassigned: all of it is B's */

    /* B bursts. Every time it finds its guarantee lent, A's very next step
     * gives it back. */
    for (int i = 0; i < N_B; i++)
        add(&b, 1, i, &got_b[i]);
    int asked = 0, b_all_in = -1;
    for (int guard = 0; guard < 2000 && !(idle(&a) && idle(&b)); guard++) {
        step(&b);
        if (!colo_engine_n_waiting(b.e) && b_all_in < 0)
            b_all_in = guard; /* every one of B's sequences admitted */
        bool wanted = colo_arena_reclaim_wanted_bytes(a.arena) > 0;
        asked += wanted;
        step(&a);
        assert_int_equal(colo_arena_reclaim_wanted_bytes(a.arena), 0);
        assert_true(colo_mem_pool_used(pool) <= colo_mem_pool_budget(pool));
    }
    assert_true(idle(&a) && idle(&b));
    assert_true(asked > 0);
    /* The owner's whole burst is in within two of its steps: the first
     * finds its guarantee lent and asks, A gives it back in between. */
    assert_true(b_all_in >= 0 && b_all_in <= 1);
    assert_true(colo_engine_kv_reclaimed_blocks(a.e) > 0);
    colo_arena_get_stats(a.arena, &sa);
    assert_true(sa.reclaims > 0);

    int preempted = 0;
    for (int i = 0; i < N_A; i++) {
        assert_same(&got_a[i], &ref_a[i]);
        preempted += got_a[i].n_preempted;
    }
    for (int i = 0; i < N_B; i++) {
        assert_same(&got_b[i], &ref_b[i]);
        assert_int_equal(got_b[i].n_preempted, 0); /* the owner never loses what is guaranteed */
    }
    assert_true(preempted > 0); /* otherwise the comparison proved nothing */
    /* Idle, A keeps no borrowed memory, not even for cached prefixes; a
     * flush of both prefix caches leaves only the fixed parts charged. */
    colo_arena_get_stats(a.arena, &sa);
    assert_int_equal(sa.borrowed_bytes, 0);
    colo_engine_prefix_flush(a.e);
    colo_engine_prefix_flush(b.e);
    assert_int_equal(colo_mem_pool_used(pool), fixed_a + fixed_b);
    engine_rig_close(&a);
    engine_rig_close(&b);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    colo_mem_pool_destroy(pool);
}

/* Borrowing and reclaiming with Q8_0 caches (kv_cache.dtype q8_0): the
 * guarantees are sized in quantized blocks (34 bytes per 32 elements), so
 * a cache that charged F16 or F32 bytes could not run A's sequences at once
 * within what it borrows, nor give B exactly its guarantee back. */
static void test_borrow_and_reclaim_q8_0(void **state)
{
    char saved[sizeof model_path], err[256];
    memcpy(saved, model_path, sizeof saved);
    snprintf(model_path, sizeof model_path, "%.280s-q8.gguf", saved);
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 128, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = 320, .n_ctx = 256, .type = COLO_F32, .seed = seed};
    if (colo_mkmodel_write(model_path, &c, err, sizeof err) != COLO_OK)
        fail_msg("mkmodel: %s", err);
    kv_type = COLO_Q8_0, kv_dim = 64;
    assert_int_equal(block_bytes(), (size_t)BS * 2 * 2 * 68);
    test_borrow_and_reclaim(state);
    kv_type = COLO_F32, kv_dim = 32;
    unlink(model_path);
    memcpy(model_path, saved, sizeof saved);
}

/* The same borrower with a fixed guarantee (ceiling = guarantee): it cannot
 * run more sequences than its guarantee holds, and still finishes all. */
static void test_static_guarantee_limits_concurrency(void **state)
{
    (void)state;
    result ref[N_A], got[N_A];
    reference(0, N_A, ref);
    size_t bb = block_bytes();
    size_t fixed = fixed_bytes(N_A, SEQ_BLOCKS);
    size_t g = fixed + SEQ_BLOCKS * bb;
    colo_mem_pool *pool = colo_mem_pool_create(2 * g);
    rig a;
    rig_elastic(&a, pool, "a", g, g + (64 << 10), N_A, SEQ_BLOCKS);
    for (int i = 0; i < N_A; i++)
        add(&a, 0, i, &got[i]);
    int peak = 0;
    for (int guard = 0; guard < 4000 && !idle(&a); guard++) {
        step(&a);
        if (colo_engine_n_running(a.e) > peak)
            peak = colo_engine_n_running(a.e);
    }
    assert_true(idle(&a));
    assert_true(peak <= SEQ_BLOCKS * BS / PROMPT); /* admission reserves the prompt's blocks */
    for (int i = 0; i < N_A; i++)
        assert_same(&got[i], &ref[i]);
    engine_rig_close(&a);
    colo_mem_pool_destroy(pool);
}

/* A borrower facing a full pool takes memory an idle model holds only as
 * its prefix cache (within that model's guarantee): the idle model is
 * asked to drop cached blocks and does at its next step (colo-server's
 * executor steps an idle model that is asked), and the borrower runs all
 * its sequences at once, with the tokens they make alone. */
static void test_borrow_takes_idle_cache(void **state)
{
    (void)state;
    enum { NB = 4 };
    result ref_b[NB], got_b[NB], fill[4];
    reference(1, NB, ref_b);
    const int a_blocks = 4 * SEQ_BLOCKS, b_blocks = NB * SEQ_BLOCKS;
    size_t bb = block_bytes(), slack = 64 << 10;
    size_t fixed_a = fixed_bytes(1, a_blocks), fixed_b = fixed_bytes(NB, b_blocks);
    /* A is guaranteed four sequences' blocks, B one; the pool holds exactly the guarantees */
    size_t g_a = fixed_a + (size_t)a_blocks * bb, g_b = fixed_b + SEQ_BLOCKS * bb;
    colo_mem_pool *pool = colo_mem_pool_create(g_a + g_b);
    rig a, b;
    rig_elastic(&a, pool, "a", g_a, g_a + slack, 1, a_blocks);
    rig_elastic(&b, pool, "b", g_b, fixed_b + (size_t)b_blocks * bb + slack, NB, b_blocks);
    /* A runs four sequences, one after another: their full prompt blocks stay cached */
    for (int i = 0; i < 4; i++) {
        add_filling(&a, 0, i, &fill[i]);
        for (int guard = 0; guard < 1000 && !idle(&a); guard++)
            step(&a);
        assert_int_equal(fill[i].done, 1);
    }
    colo_engine_prefix_info pa;
    colo_engine_prefix_stats(a.e, &pa);
    assert_true(pa.evictable_blocks >= 3 * (SEQ_BLOCKS - 1)); /* most of A's guarantee is cache */
    assert_true(colo_arena_used(a.arena) > fixed_a + (size_t)(a_blocks - SEQ_BLOCKS) * bb);
    /* B bursts: past its guarantee it borrows what A only caches */
    for (int i = 0; i < NB; i++)
        add(&b, 1, i, &got_b[i]);
    int peak = 0;
    for (int guard = 0; guard < 2000 && !idle(&b); guard++) {
        step(&b);
        int done = 0;
        for (int j = 0; j < NB; j++)
            done += got_b[j].done;
        if (colo_engine_n_running(b.e) + done > peak)
            peak = colo_engine_n_running(b.e) + done;
        step(&a); /* idle: it only drops what it is asked to */
        assert_true(colo_mem_pool_used(pool) <= colo_mem_pool_budget(pool));
    }
    assert_true(idle(&b));
    colo_engine_prefix_stats(a.e, &pa);
    assert_true(pa.evicted_blocks > 0);
    assert_int_equal(peak, NB); /* with A's cache counted as used, B would run one at a time */
    for (int i = 0; i < NB; i++)
        assert_same(&got_b[i], &ref_b[i]);
    colo_engine_prefix_flush(a.e);
    colo_engine_prefix_flush(b.e);
    assert_int_equal(colo_mem_pool_used(pool), fixed_a + fixed_b);
    engine_rig_close(&a);
    engine_rig_close(&b);
    colo_mem_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_borrow_and_reclaim),
        cmocka_unit_test(test_borrow_and_reclaim_q8_0),
        cmocka_unit_test(test_static_guarantee_limits_concurrency),
        cmocka_unit_test(test_borrow_takes_idle_cache),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
