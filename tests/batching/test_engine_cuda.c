/* The generation engine's serving paths on the CUDA device, on the small
 * synthetic model of engine_fixture.h (F32 weights):
 * - continuous batching: several sequences in one batch, and in prefill
 *   chunks of 5 tokens, give each sequence the greedy tokens it gets alone
 *   on CUDA, which agree with the CPU device's;
 * - the prefix cache: sequences after a cached prompt and beside one that
 *   still runs give the tokens of a cold run, and the hits are counted;
 * - n choices fork from the prompt (its full blocks shared, the partly
 *   filled one copied on the device) and give the n = 1 answer, also when
 *   every choice ends at its first token, right after the fork;
 * - elastic memory (where the device reserves address space: the driver's
 *   virtual memory management): a model borrows the idle guarantee of
 *   another, gives it back when the owner bursts (KV blocks committed and
 *   decommitted on the device, sequences preempted and recomputed), and a
 *   model put to sleep (engine, KV cache and weights freed) and woken
 *   again answers as before.
 *
 * How tokens are compared. The CPU computes a sequence's rows the same
 * way whatever else is in its step; CUDA does not: a step of more than 16
 * rows multiplies through cuBLAS, a smaller one through colo's mat-vec
 * kernel, and decode attention splits the keys by the step's shape. So two
 * CUDA runs of one sequence agree to rounding, not to the bit, and a
 * greedy choice between two nearly equal logits may go either way. Each
 * generated token keeps its log-probability and the top two
 * (logprobs on); runs must give the same tokens, with log-probabilities
 * within TOL (CUDA against CUDA) or CPU_TOL (CUDA against the CPU: F32
 * weights, so both compute exact F32 products; F16 KV cache), until the
 * first token where the reference's top-2 margin is under twice that
 * tolerance and the runs chose differently: from there the texts
 * legitimately differ and are not compared. A wrong result (a block table
 * or slot off by one, a copy that did not happen or read freed memory,
 * logits read before the device finished) moves log-probabilities by far
 * more and fails, naming the sequence and token; and at least three
 * quarters of all tokens must have been compared.
 *
 * Skipped (cmocka skip) when no CUDA device is usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cuda_skip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/engine.h"
#include "engine_fixture.h"
#include "models/cache/kv_cache.h"
#include "tools/mkmodel.h"
#include "tests/test_seed.h"

#define BS 4           /* tokens per KV block */
#define TOL 0.01       /* log-probabilities, CUDA against CUDA */
#define CPU_TOL 0.02   /* CUDA against the CPU */
#define MAX_GEN 64

static colo_device *cuda;

static int setup(void **state)
{
    (void)state;
    if (engine_fixture_open("engine-cuda", 31) != 0)
        return -1;
    char err[256];
    colo_device_config dc = {.want = "cuda"};
    if (!(cuda = colo_device_open(&dc, err, sizeof err)))
        fprintf(stderr, "cuda: %s\n", err);
    return cuda ? 0 : -1;
}

static int teardown(void **state)
{
    colo_device_close(cuda);
    return engine_fixture_close(state);
}

typedef struct {
    colo_arena *arena;
    colo_stream *s;
    colo_llama *m;
    colo_engine *e;
} rig;

typedef struct {
    int max_running, step_tokens, n_blocks;
    bool cache;
} rig_cfg;

/* Loads the model and makes its engine in r's arena, on r's stream (a
 * load, or a wake after rig_sleep). */
static void rig_load(rig *r, const rig_cfg *c)
{
    char err[256];
    r->m = colo_llama_load(model_path, r->arena, r->s, err, sizeof err);
    if (!r->m)
        fail_msg("load: %s", err);
    colo_engine_config gc = {.max_running = c->max_running, .max_step_tokens = c->step_tokens ? c->step_tokens : 256,
                          .block_size = BS, .kv_type = COLO_F32, .n_blocks = c->n_blocks,
                          .no_prefix_cache = !c->cache};
    r->e = colo_engine_create(r->m, r->s, &gc, err, sizeof err);
    if (!r->e)
        fail_msg("engine: %s", err);
}

/* A stream on d, then the model and engine in arena (which the rig then owns). */
static void rig_start(rig *r, colo_device *d, colo_arena *arena, const rig_cfg *c)
{
    char err[256];
    r->arena = arena;
    assert_non_null(r->arena);
    r->s = colo_stream_create(d, NULL, err, sizeof err);
    assert_non_null(r->s);
    rig_load(r, c);
}

static void rig_open(rig *r, colo_device *d, const rig_cfg *c)
{
    char err[256];
    colo_arena *a = colo_arena_create_bytes(d, "engine", 64 << 20, err, sizeof err);
    if (!a)
        fail_msg("arena: %s", err);
    rig_start(r, d, a, c);
}

/* What a model's sleep frees: the engine (with its KV cache) and the weights. */
static void rig_sleep(rig *r)
{
    colo_engine_free(r->e);
    colo_llama_free(r->m);
    r->e = NULL;
    r->m = NULL;
}

static void rig_close(rig *r)
{
    assert_int_equal(colo_engine_n_running(r->e) + colo_engine_n_waiting(r->e), 0);
    rig_sleep(r);
    assert_int_equal(colo_arena_used(r->arena), 0); /* everything went back */
    colo_stream_destroy(r->s);
    colo_arena_destroy(r->arena);
}

typedef struct {
    int32_t toks[MAX_GEN];
    float lp[MAX_GEN];     /* the chosen token's log-probability */
    float margin[MAX_GEN]; /* top-1 minus top-2 log-probability */
    int n;
    colo_status status;
    const char *finish;
    int n_preempted;
    int done;
} result;

static void on_done(void *ud, const colo_engine_outcome *o)
{
    result *r = ud;
    r->n = o->n_tokens < MAX_GEN ? o->n_tokens : MAX_GEN;
    memcpy(r->toks, o->tokens, (size_t)r->n * 4);
    for (int i = 0; i < r->n && o->logprobs; i++) {
        r->lp[i] = o->logprobs[i];
        r->margin[i] = o->top_logprobs[2 * i] - o->top_logprobs[2 * i + 1];
    }
    r->status = o->status;
    r->finish = o->finish_reason;
    r->n_preempted = o->n_preempted;
    r->done++;
}

static colo_engine_params greedy(int max_tokens)
{
    return (colo_engine_params){.max_tokens = max_tokens, .temperature = 0, .top_p = 1, .logprobs = true,
                             .top_logprobs = 2};
}

static void add(rig *r, const int32_t *ids, int n, int max_tokens, result *out)
{
    colo_engine_params p = greedy(max_tokens);
    colo_engine_callbacks cb = {NULL, on_done, out};
    char err[256];
    memset(out, 0, sizeof *out);
    if (!colo_engine_add(r->e, ids, n, &p, &cb, err, sizeof err))
        fail_msg("add: %s", err);
}

static void add_n(rig *r, const int32_t *ids, int n_ids, int n, int max_tokens, result *out)
{
    colo_engine_params p = greedy(max_tokens);
    colo_engine_callbacks cbs[COLO_ENGINE_MAX_CHOICES];
    colo_engine_seq *seqs[COLO_ENGINE_MAX_CHOICES];
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        cbs[i] = (colo_engine_callbacks){NULL, on_done, &out[i]};
    }
    char err[256];
    if (colo_engine_add_n(r->e, ids, n_ids, &p, n, cbs, seqs, err, sizeof err) != COLO_OK)
        fail_msg("add_n: %s", err);
}

static bool idle(rig *r) { return !colo_engine_n_running(r->e) && !colo_engine_n_waiting(r->e); }

static void step(rig *r)
{
    int n;
    colo_status st = colo_engine_step(r->e, NULL, &n);
    if (st != COLO_OK)
        fail_msg("step: %s", colo_status_str(st));
}

static void run_all(rig *r)
{
    for (int guard = 0; guard < 20000; guard++) {
        step(r);
        if (idle(r))
            return;
    }
    fail_msg("engine did not finish");
}

/* Tokens compared and tokens in all, over every comparison of a test. */
typedef struct {
    int compared, total;
} tally;

/* got against want (see the header): returns the tokens compared. */
static int compare(const char *what, int i, const result *got, const result *want, double tol, tally *t)
{
    if (got->done != 1 || want->done != 1 || got->status != COLO_OK || want->status != COLO_OK)
        fail_msg("%s, sequence %d: done %d/%d, status %s/%s", what, i, got->done, want->done,
                 colo_status_str(got->status), colo_status_str(want->status));
    int n = got->n < want->n ? got->n : want->n, k = 0;
    for (; k < n; k++) {
        if (got->toks[k] != want->toks[k]) {
            if (want->margin[k] >= 2 * tol)
                fail_msg("%s, sequence %d, token %d: %d, expected %d (top-2 margin %.4f, log-probabilities %.4f "
                         "and %.4f)", what, i, k, got->toks[k], want->toks[k], want->margin[k], got->lp[k],
                         want->lp[k]);
            break; /* a near tie went the other way: the rest is another text */
        }
        if (!(fabsf(got->lp[k] - want->lp[k]) <= tol))
            fail_msg("%s, sequence %d, token %d: log-probability %.5f, expected %.5f (tolerance %.3f)", what, i, k,
                     got->lp[k], want->lp[k], tol);
    }
    /* Equal up to the shorter: the same length, unless one stopped at an end
     * of sequence or got was given fewer tokens. */
    bool shorter_limit = got->n < want->n && !strcmp(got->finish, "length");
    if (k == n && got->n != want->n && strcmp(got->finish, "stop") && strcmp(want->finish, "stop") && !shorter_limit)
        fail_msg("%s, sequence %d: %d tokens, expected %d", what, i, got->n, want->n);
    t->compared += k;
    t->total += n;
    return k;
}

static void assert_mostly_compared(const tally *t)
{
    printf("%d of %d tokens compared\n", t->compared, t->total);
    assert_true(t->total > 0);
    assert_true(4 * t->compared >= 3 * t->total);
}

static void random_tokens(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = rand() % 256;
}

/* ---- continuous batching ----------------------------------------------------------- */

enum { NB = 6, NB_GEN = 24 };

static void batch_prompt(int which, int32_t *ids, int *n)
{
    *n = 3 + which * 7; /* 3 .. 38 tokens, 123 together: steps below and above 64 rows */
    random_tokens(ids, *n);
}

/* Every prompt alone, in an engine of its own on d. */
static void alone(colo_device *d, int32_t ids[][64], const int *n, result *out)
{
    for (int i = 0; i < NB; i++) {
        rig r;
        rig_open(&r, d, &(rig_cfg){.max_running = 1});
        add(&r, ids[i], n[i], NB_GEN, &out[i]);
        run_all(&r);
        rig_close(&r);
    }
}

/* All the prompts in one engine on d; returns the graphs its stream launched. */
static uint64_t together_on(colo_device *d, int step_tokens, int32_t ids[][64], const int *n, result *out)
{
    rig r;
    rig_open(&r, d, &(rig_cfg){.max_running = NB, .step_tokens = step_tokens});
    for (int i = 0; i < NB; i++)
        add(&r, ids[i], n[i], NB_GEN, &out[i]);
    run_all(&r);
    uint64_t graphs = colo_stream_graphs_launched(r.s);
    rig_close(&r);
    return graphs;
}

static void together(int step_tokens, int32_t ids[][64], const int *n, result *out)
{
    together_on(cuda, step_tokens, ids, n, out);
}

static void test_batching(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_engine_cuda", 313));
    int32_t ids[NB][64];
    int n[NB];
    for (int i = 0; i < NB; i++)
        batch_prompt(i, ids[i], &n[i]);
    result cpu_alone[NB], cuda_alone[NB], batch[NB], chunked[NB];
    alone(dev, ids, n, cpu_alone);
    alone(cuda, ids, n, cuda_alone);
    together(256, ids, n, batch);  /* every prompt in one step, then decode steps of NB rows */
    together(5, ids, n, chunked); /* prefill in chunks of 5 tokens beside decoding sequences */
    tally t = {0};
    for (int i = 0; i < NB; i++) {
        compare("CUDA alone against the CPU", i, &cuda_alone[i], &cpu_alone[i], CPU_TOL, &t);
        compare("CUDA batched against alone", i, &batch[i], &cuda_alone[i], TOL, &t);
        compare("CUDA chunked against alone", i, &chunked[i], &cuda_alone[i], TOL, &t);
    }
    assert_mostly_compared(&t);
}

/* Decode steps launched as graphs (cuda_graphs): the same kernels with the
 * same arguments as when queued one by one, so the same bits. With the
 * prefill in chunks of 5 tokens the sequences start decoding at different
 * steps and finish at different ones, so the pure decode steps at the end
 * pass through batch sizes from 6 down to 1 (graphs updated in place and
 * rebuilt). A graph that kept a previous step's arguments (a stale update)
 * or a step that ran twice or not at all changes tokens or their
 * log-probabilities. */
static void test_graphs(void **state)
{
    (void)state;
    char err[256];
    colo_device_config dc = {.want = "cuda", .cuda_graphs = true};
    colo_device *g = colo_device_open(&dc, err, sizeof err);
    if (!g)
        fail_msg("cuda with graphs: %s", err);
    int32_t ids[NB][64];
    int n[NB];
    for (int i = 0; i < NB; i++)
        batch_prompt(i, ids[i], &n[i]);
    result plain[2][NB], graphed[2][NB];
    const int chunk[2] = {256, 5};
    for (int c = 0; c < 2; c++) {
        assert_int_equal(together_on(cuda, chunk[c], ids, n, plain[c]), 0);
        uint64_t launched = together_on(g, chunk[c], ids, n, graphed[c]);
        printf("prefill chunks of %d: %llu decode steps as graphs\n", chunk[c], (unsigned long long)launched);
        if (launched < 8) /* most of NB_GEN decode steps; a recording that fails turns graphs off */
            fail_msg("prefill chunks of %d: only %llu steps ran as graphs", chunk[c], (unsigned long long)launched);
        for (int i = 0; i < NB; i++) {
            const result *a = &graphed[c][i], *b = &plain[c][i];
            assert_int_equal(a->status, COLO_OK);
            assert_int_equal(a->n, b->n);
            if (memcmp(a->toks, b->toks, (size_t)b->n * sizeof(int32_t)) ||
                memcmp(a->lp, b->lp, (size_t)b->n * sizeof(float)))
                fail_msg("prefill chunks of %d, sequence %d: graphs changed the tokens or their log-probabilities",
                         chunk[c], i);
        }
    }
    colo_device_close(g);
}

/* ---- the prefix cache and n choices --------------------------------------------------- */

static void test_prefix_cache(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_engine_cuda", 378));
    enum { NP = 37, NS = 4, MT = 20 };
    int32_t prefix[NP], ids[NS][NP + 16];
    int n[NS];
    random_tokens(prefix, NP);
    for (int i = 0; i < NS; i++) {
        memcpy(ids[i], prefix, sizeof prefix);
        n[i] = NP + 2 + 3 * i;
        ids[i][NP] = 256 + i; /* distinct from here on */
        random_tokens(ids[i] + NP + 1, n[i] - NP - 1);
    }
    tally t = {0};
    for (int concurrent = 0; concurrent < 2; concurrent++) {
        result off[NS], on[NS];
        for (int cache = 0; cache < 2; cache++) {
            result *res = cache ? on : off;
            rig r;
            rig_open(&r, cuda, &(rig_cfg){.max_running = 8, .cache = cache});
            add(&r, ids[0], n[0], MT, &res[0]);
            if (concurrent)
                for (int k = 0; k < 3; k++) /* the first decodes while the others come */
                    step(&r);
            else
                run_all(&r);
            for (int i = 1; i < NS; i++)
                add(&r, ids[i], n[i], MT, &res[i]);
            run_all(&r);
            colo_engine_prefix_info pi;
            colo_engine_prefix_stats(r.e, &pi);
            assert_int_equal(pi.hit_tokens, cache ? (uint64_t)(NS - 1) * (NP / BS * BS) : 0);
            rig_close(&r);
        }
        for (int i = 0; i < NS; i++)
            compare(concurrent ? "cache on against off, concurrent" : "cache on against off", i, &on[i], &off[i],
                    TOL, &t);
    }
    assert_mostly_compared(&t);
}

/* n choices against the n = 1 answer; prompts that end inside a block (its
 * rows are copied on the device) and on a block's end. Then choices that
 * all end at their first token, right after the fork: the copy must be
 * finished before the blocks it reads and writes go back. */
static void test_n_choices(void **state)
{
    (void)state;
    srand((unsigned)colo_test_seed("test_engine_cuda", 424));
    int lens[] = {4 * BS + 3, 5 * BS};
    tally t = {0};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        for (int cache = 0; cache < 2; cache++) {
            int32_t ids[64], other_ids[9];
            random_tokens(ids, lens[li]);
            random_tokens(other_ids, 9);
            result one, many[5], other;
            rig r;
            rig_open(&r, cuda, &(rig_cfg){.max_running = 8, .cache = cache});
            add(&r, ids, lens[li], 16, &one);
            run_all(&r);
            add(&r, other_ids, 9, 16, &other); /* in the same batch */
            add_n(&r, ids, lens[li], 5, 16, many);
            run_all(&r);
            for (int i = 0; i < 5; i++)
                compare("n choices against n = 1", i, &many[i], &one, TOL, &t);
            assert_int_equal(other.done, 1);
            assert_int_equal(other.status, COLO_OK);
            for (int rep = 0; rep < 3; rep++) {
                result first[4];
                add_n(&r, ids, lens[li], 4, 1, first);
                run_all(&r);
                for (int i = 0; i < 4; i++)
                    compare("n choices of one token against n = 1", i, &first[i], &one, TOL, &t);
            }
            rig_close(&r);
        }
    }
    /* The same ends right after the fork in an elastic arena without the
     * prefix cache: the last block given back unmaps the device memory the
     * copy used. */
    if (colo_device_can_reserve(cuda)) {
        int32_t ids[64];
        random_tokens(ids, lens[0]);
        colo_mem_pool *pool = colo_mem_pool_create((size_t)128 << 20);
        char err[256];
        colo_arena *a = colo_arena_create_elastic(cuda, "fork", pool, (size_t)64 << 20, (size_t)64 << 20, err,
                                                  sizeof err);
        if (!a)
            fail_msg("elastic arena: %s", err);
        rig r;
        rig_start(&r, cuda, a, &(rig_cfg){.max_running = 8, .n_blocks = 64});
        result one, first[4];
        add(&r, ids, lens[0], 1, &one);
        run_all(&r);
        for (int rep = 0; rep < 4; rep++) {
            add_n(&r, ids, lens[0], 4, 1, first);
            run_all(&r);
            for (int i = 0; i < 4; i++)
                compare("n choices of one token in an elastic arena", i, &first[i], &one, TOL, &t);
        }
        rig_close(&r);
        colo_mem_pool_destroy(pool);
    }
    assert_mostly_compared(&t);
}

/* ---- elastic memory, sleep and wake ------------------------------------------------------ */

enum { PROMPT = 8, GEN = 16, SEQ_BLOCKS = (PROMPT + GEN) / BS, N_A = 8, N_B = 6 };

static size_t block_bytes(void) { return (size_t)BS * 2 /* layers */ * 2 /* K, V */ * 32 /* kv_dim */ * 4; }

static void elastic_open(rig *r, colo_mem_pool *pool, const char *name, size_t guarantee, size_t ceiling,
                         int max_running, int n_blocks)
{
    char err[256];
    colo_arena *a = colo_arena_create_elastic(cuda, name, pool, guarantee, ceiling, err, sizeof err);
    if (!a)
        fail_msg("elastic arena: %s", err);
    rig_start(r, cuda, a, &(rig_cfg){.max_running = max_running, .n_blocks = n_blocks, .cache = true});
}

/* Bytes a loaded model and its engine charge before any KV block. */
static size_t fixed_bytes(int max_running, int n_blocks)
{
    colo_mem_pool *pool = colo_mem_pool_create((size_t)256 << 20);
    rig r;
    elastic_open(&r, pool, "probe", (size_t)64 << 20, (size_t)64 << 20, max_running, n_blocks);
    size_t fixed = colo_arena_used(r.arena);
    rig_close(&r);
    colo_mem_pool_destroy(pool);
    return fixed;
}

static void test_elastic(void **state)
{
    (void)state;
    if (!colo_device_can_reserve(cuda)) {
        printf("the CUDA device cannot reserve address space (no virtual memory management): skipped\n");
        skip();
    }
    srand((unsigned)colo_test_seed("test_engine_cuda", 518));
    int32_t pa[N_A][PROMPT], pb[N_B][PROMPT];
    for (int i = 0; i < N_A; i++)
        random_tokens(pa[i], PROMPT);
    for (int i = 0; i < N_B; i++)
        random_tokens(pb[i], PROMPT);
    result ref_a[N_A], ref_b[N_B], got_a[N_A], got_b[N_B], again[2];
    rig r;
    rig_open(&r, cuda, &(rig_cfg){.max_running = 1});
    for (int i = 0; i < N_A; i++) {
        add(&r, pa[i], PROMPT, GEN, &ref_a[i]);
        run_all(&r);
    }
    for (int i = 0; i < N_B; i++) {
        add(&r, pb[i], PROMPT, GEN, &ref_b[i]);
        run_all(&r);
    }
    rig_close(&r);

    const int a_blocks = N_A * SEQ_BLOCKS, b_blocks = N_B * SEQ_BLOCKS;
    size_t bb = block_bytes(), slack = 64 << 10;
    size_t fixed_a = fixed_bytes(N_A, a_blocks), fixed_b = fixed_bytes(N_B, b_blocks);
    /* A is guaranteed one sequence's blocks, B its whole burst; the pool
     * holds exactly the guarantees. */
    size_t g_a = fixed_a + SEQ_BLOCKS * bb, g_b = fixed_b + (size_t)b_blocks * bb;
    colo_mem_pool *pool = colo_mem_pool_create(g_a + g_b);
    rig a, b;
    elastic_open(&a, pool, "a", g_a, fixed_a + (size_t)a_blocks * bb + slack, N_A, a_blocks);
    elastic_open(&b, pool, "b", g_b, g_b + slack, N_B, b_blocks);
    /* B idle: A borrows B's guarantee and runs every sequence at once. */
    for (int i = 0; i < N_A; i++)
        add(&a, pa[i], PROMPT, GEN, &got_a[i]);
    for (int i = 0; i < 3; i++)
        step(&a);
    colo_arena_stats sa;
    colo_arena_get_stats(a.arena, &sa);
    assert_true(sa.borrowed_bytes > 0);
    /* B bursts: A gives the memory back at its next step, preempting. */
    for (int i = 0; i < N_B; i++)
        add(&b, pb[i], PROMPT, GEN, &got_b[i]);
    for (int guard = 0; guard < 2000 && !(idle(&a) && idle(&b)); guard++) {
        step(&b);
        step(&a);
        assert_int_equal(colo_arena_reclaim_wanted_bytes(a.arena), 0);
        assert_true(colo_mem_pool_used(pool) <= colo_mem_pool_budget(pool));
    }
    assert_true(idle(&a) && idle(&b));
    assert_true(colo_engine_kv_reclaimed_blocks(a.e) > 0);
    tally t = {0};
    int preempted = 0;
    for (int i = 0; i < N_A; i++) {
        compare("borrower against alone", i, &got_a[i], &ref_a[i], TOL, &t);
        preempted += got_a[i].n_preempted;
    }
    for (int i = 0; i < N_B; i++)
        compare("owner against alone", i, &got_b[i], &ref_b[i], TOL, &t);
    assert_true(preempted > 0); /* otherwise nothing was recomputed */

    /* B sleeps (its device memory goes back) and wakes into the same arena. */
    rig_sleep(&b);
    assert_int_equal(colo_arena_used(b.arena), 0);
    rig_load(&b, &(rig_cfg){.max_running = N_B, .n_blocks = b_blocks, .cache = true});
    for (int i = 0; i < 2; i++)
        add(&b, pb[i], PROMPT, GEN, &again[i]);
    run_all(&b);
    for (int i = 0; i < 2; i++)
        compare("woken against alone", i, &again[i], &ref_b[i], TOL, &t);
    colo_engine_prefix_flush(a.e);
    colo_engine_prefix_flush(b.e);
    rig_close(&a);
    rig_close(&b);
    assert_int_equal(colo_mem_pool_used(pool), 0);
    colo_mem_pool_destroy(pool);
    assert_mostly_compared(&t);
}

int main(void)
{
    COLO_SKIP_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batching),
        cmocka_unit_test(test_graphs),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_elastic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
