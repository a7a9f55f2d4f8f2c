/* Speculative decoding by prompt lookup (batching/spec.h) on a small
 * synthetic model: the drafter's matches; greedy and seeded sampled output
 * with drafts the same bits as without (tokens and log-probabilities),
 * alone, in a batch, under preemption and with the prefix cache; the KV
 * blocks of rejected drafts given back; a request's opt-out and the
 * switch-off at COLO_SPEC_MAX_DECODES decodes; and a chi-square test of
 * the sampled distribution of a verified position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/engine.h"
#include "batching/spec.h"
#include "engine_fixture.h"
#include "tools/mkmodel.h"

#define VOCAB 320
#define CTX 512

/* The fixture's shape with a longer context, so that a prompt can hold
 * every token of the vocabulary. */
static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/colo-test-spec-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = VOCAB, .n_ctx = CTX, .type = COLO_F32, .seed = 23};
    char err[256];
    if (colo_mkmodel_write(model_path, &c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    colo_device_config dc = {.want = "cpu", .cpu_threads = 2};
    dev = colo_device_open(&dc, err, sizeof err);
    return dev ? 0 : -1;
}

typedef struct {
    int spec_tokens;
    int max_running;
    int step_tokens;
    int n_blocks;
    bool adaptive; /* drafts as colo_spec_plan weighs them (timings), not all lookup finds */
} engine_shape;

static void rig_open(engine_rig *r, const engine_shape *sh)
{
    memset(r, 0, sizeof *r);
    engine_rig_arena(r, dev, "spec", 64 << 20);
    colo_engine_config gc = {.max_running = sh->max_running, .max_step_tokens = sh->step_tokens, .block_size = 4,
                             .kv_type = COLO_F32, .n_blocks = sh->n_blocks, .spec_tokens = sh->spec_tokens,
                             .spec_always = !sh->adaptive};
    engine_rig_start(r, &gc);
}

/* Prompt i: a short pattern repeated, so that lookup finds matches, with
 * a distinct head. */
static int prompt_ids(int i, int32_t *ids)
{
    int n = 0;
    for (int j = 0; j < 3 + i; j++)
        ids[n++] = (int32_t)((i * 37 + j * 11) % 256);
    for (int rep = 0; rep < 4; rep++)
        for (int j = 0; j < 5 + i % 3; j++)
            ids[n++] = (int32_t)((i * 13 + j * 7 + 40) % 256);
    return n;
}

typedef struct {
    engine_shape sh;
    int n_seqs;
    int max_tokens;
    float temperature;
    bool shared_head; /* every prompt starts with the same 24 tokens (prefix cache hits) */
} run_spec;

typedef struct {
    engine_result res[8];
    colo_engine_step_stats st;
    uint64_t preemptions;
    uint64_t prefix_hits;
    int free_blocks, total_blocks;
} run_out;

static void run(const run_spec *rs, run_out *out)
{
    memset(out, 0, sizeof *out);
    engine_rig r;
    rig_open(&r, &rs->sh);
    out->total_blocks = colo_engine_kv_free_blocks(r.e);
    colo_engine_callbacks cbs[8];
    engine_results_reset(out->res, cbs, rs->n_seqs);
    char err[256];
    for (int i = 0; i < rs->n_seqs; i++) {
        int32_t ids[96];
        int n = 0;
        if (rs->shared_head)
            for (; n < 24; n++)
                ids[n] = (int32_t)((n * 29 + 3) % 256);
        n += prompt_ids(i, ids + n);
        colo_engine_params p = {.max_tokens = rs->max_tokens, .temperature = rs->temperature, .top_p = 1,
                                .seed = 1000 + (uint64_t)i, .logprobs = true};
        assert_non_null(colo_engine_add(r.e, ids, n, &p, &cbs[i], err, sizeof err));
    }
    engine_run_all(r.e);
    colo_engine_get_step_stats(r.e, &out->st);
    out->preemptions = colo_engine_preemptions(r.e);
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(r.e, &pi);
    out->prefix_hits = pi.hit_tokens;
    /* every block back (cached ones count as free) */
    out->free_blocks = colo_engine_kv_free_blocks(r.e);
    engine_rig_close(&r);
}

/* Both runs gave every sequence the same tokens and log-probabilities, to the bit. */
static void assert_same_runs(const run_out *a, const run_out *b, int n)
{
    for (int i = 0; i < n; i++) {
        engine_assert_same(&a->res[i], &b->res[i]);
        assert_memory_equal(a->res[i].lps, b->res[i].lps, (size_t)a->res[i].n * 4);
        assert_string_equal(a->res[i].finish, b->res[i].finish);
    }
}

static void test_lookup(void **state)
{
    (void)state;
    int32_t out[COLO_SPEC_MAX_TOKENS];
    colo_spec_match mt;
    /* the latest occurrence of the longest suffix: "1 2 3" at 5, then 9 8 */
    int32_t t[] = {1, 2, 3, 4, 0, 1, 2, 3, 9, 8, 7, 2, 3};
    /* last 3 (7 2 3) does not occur before; last 2 (2 3) latest at 6 */
    assert_int_equal(colo_spec_lookup(t, 13, 4, -1, out, &mt), 4);
    assert_int_equal(mt.ngram, 2);
    assert_int_equal(mt.from, 8);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[1], 8);
    assert_int_equal(out[2], 7);
    assert_int_equal(out[3], 2);
    /* "3" went on as 4 at 2 and as 9 at 7: split */
    assert_true(mt.split);
    /* with a hint near the first place, that one among the equal matches */
    assert_int_equal(colo_spec_lookup(t, 13, 2, 2, out, &mt), 2);
    assert_int_equal(mt.ngram, 2);
    assert_int_equal(mt.from, 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 0);
    /* a hint does not beat a longer match */
    int32_t h[] = {7, 1, 2, 5, 9, 1, 2, 6, 8, 9, 1, 2};
    assert_int_equal(colo_spec_lookup(h, 12, 1, 2, out, &mt), 1);
    assert_int_equal(mt.ngram, 3);
    assert_int_equal(out[0], 6);
    /* a hint as far from two places: the later */
    int32_t e2[] = {4, 1, 4, 2, 4};
    assert_int_equal(colo_spec_lookup(e2, 5, 1, 2, out, &mt), 1);
    assert_int_equal(mt.from, 3);
    assert_int_equal(out[0], 2);
    /* k bounds the draft; the end of the known tokens too */
    assert_int_equal(colo_spec_lookup(t, 13, 1, -1, out, &mt), 1);
    int32_t u[] = {5, 6, 5};
    assert_int_equal(colo_spec_lookup(u, 3, 8, -1, out, &mt), 2); /* 1-gram "5" at 0: 6 5 */
    assert_int_equal(mt.ngram, 1);
    assert_false(mt.split); /* "5" went on one way only */
    assert_int_equal(out[0], 6);
    assert_int_equal(out[1], 5);
    /* a 3-gram wins over a later 1-gram */
    int32_t v[] = {1, 2, 3, 4, 3, 9, 1, 2, 3};
    assert_int_equal(colo_spec_lookup(v, 9, 2, -1, out, &mt), 2);
    assert_int_equal(mt.ngram, 3);
    assert_true(mt.split); /* "3" also went on as 9 */
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 3);
    /* the longest match wins over a later shorter one, measured past 3 */
    int32_t x[] = {5, 6, 7, 8, 9, 40, 41, 0, 7, 8, 9, 50, 51, 6, 7, 8, 9};
    assert_int_equal(colo_spec_lookup(x, 17, 2, -1, out, &mt), 2);
    assert_int_equal(mt.ngram, 4);
    assert_int_equal(out[0], 40);
    assert_int_equal(out[1], 41);
    /* at most COLO_SPEC_MATCH_MAX compared: a run of one token matches
     * that much at its latest place, one before the end */
    int32_t y[2 * COLO_SPEC_MATCH_MAX + 2];
    for (int i = 0; i < 2 * COLO_SPEC_MATCH_MAX + 2; i++)
        y[i] = i == 0 ? 2 : 1;
    assert_int_equal(colo_spec_lookup(y, 2 * COLO_SPEC_MATCH_MAX + 2, 3, -1, out, &mt), 1);
    assert_int_equal(mt.ngram, COLO_SPEC_MATCH_MAX);
    assert_int_equal(mt.from, 2 * COLO_SPEC_MATCH_MAX + 1);
    assert_int_equal(out[0], 1);
    /* as much matched at many places: the one the hint names */
    assert_int_equal(colo_spec_lookup(y, 2 * COLO_SPEC_MATCH_MAX + 2, 3, COLO_SPEC_MATCH_MAX + 4, out, &mt), 3);
    assert_int_equal(mt.ngram, COLO_SPEC_MATCH_MAX);
    assert_int_equal(mt.from, COLO_SPEC_MATCH_MAX + 4);
    int32_t w[] = {1, 2, 3, 4};
    assert_int_equal(colo_spec_lookup(w, 4, 8, -1, out, &mt), 0);
    assert_int_equal(mt.ngram, 0);
    assert_int_equal(mt.from, -1);
    assert_int_equal(colo_spec_lookup(w, 4, 0, -1, out, &mt), 0);
    assert_int_equal(colo_spec_lookup(w, 1, 8, -1, out, &mt), 0);
}

/* Greedy, alone and four at once: the same bits with drafts of 1, 4 and
 * 16 tokens as without, and drafts were both accepted and rejected. */
static void test_greedy_bit_identical(void **state)
{
    (void)state;
    for (int n_seqs = 1; n_seqs <= 4; n_seqs += 3) {
        run_spec plain = {.sh = {0, 4, 256, 0, false}, .n_seqs = n_seqs, .max_tokens = 60};
        run_out a, b;
        run(&plain, &a);
        assert_int_equal(a.st.spec_drafted, 0);
        int ks[] = {1, 4, 16};
        for (int i = 0; i < 3; i++) {
            run_spec spec = plain;
            spec.sh.spec_tokens = ks[i];
            run(&spec, &b);
            assert_same_runs(&a, &b, n_seqs);
            assert_true(b.st.spec_accepted > 0);
            assert_true(b.st.spec_accepted < b.st.spec_drafted);
            assert_int_equal(b.free_blocks, b.total_blocks);
            /* rolled back exactly: what was computed is the prompts, each
             * generated token but the last, and the rejected drafts, no
             * position twice */
            uint64_t computed = b.st.tokens[0] + b.st.tokens[1] + b.st.tokens[2], want = 0;
            for (int q = 0; q < n_seqs; q++) {
                int32_t ids[96];
                assert_string_equal(b.res[q].finish, "length");
                want += (uint64_t)(prompt_ids(q, ids) + b.res[q].n - 1);
            }
            assert_int_equal(computed, want + b.st.spec_drafted - b.st.spec_accepted);
            /* accepted drafts are steps saved */
            uint64_t steps = b.st.steps[0] + b.st.steps[1] + b.st.steps[2];
            uint64_t plain_steps = a.st.steps[0] + a.st.steps[1] + a.st.steps[2];
            assert_true(steps < plain_steps);
        }
    }
}

/* Drafting as the step costs say (what colo-server does): whatever it
 * drafts, the same bits. */
static void test_adaptive_bit_identical(void **state)
{
    (void)state;
    run_spec plain = {.sh = {0, 4, 256, 0, false}, .n_seqs = 4, .max_tokens = 60};
    run_out a, b;
    run(&plain, &a);
    run_spec spec = plain;
    spec.sh.spec_tokens = 8;
    spec.sh.adaptive = true;
    run(&spec, &b);
    assert_same_runs(&a, &b, 4);
    assert_int_equal(b.free_blocks, b.total_blocks);
}

/* colo_spec_plan_costed: a drafted token that costs a pass of a draft
 * model. Rows up to 4 cost 1000 ns; a draft pass of 100 ns leaves the
 * plan as free drafts make it, one of 900 ns makes fewer tokens pay, one
 * that costs what a step does makes none pay even at 0.95; beside it,
 * another sequence's free drafts are taken first. */
static void test_plan_costed(void **state)
{
    (void)state;
    colo_spec_costs c = {0};
    for (int r = 1; r <= COLO_SPEC_MAX_ROWS; r++)
        colo_spec_costs_add(&c, r, r <= 4 ? 1000 : 3000);
    int avail[2] = {3, 3}, len[2];
    float rate[2] = {0.95f, 0.95f};
    double cheap[1] = {100}, dear[1] = {900}, step[1] = {1000};
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, NULL, NULL, 64, len), 3);
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, cheap, NULL, 64, len), 3);
    /* 1.95 per 1900 beats 2.85 per 2800, 3.71 per 3700 and 1 per 1000 */
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, dear, NULL, 64, len), 1);
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, step, NULL, 64, len), 0);
    assert_int_equal(len[0], 0);
    double mixed[2] = {1000, 0};
    assert_int_equal(colo_spec_plan_costed(&c, 2, 2, avail, rate, mixed, NULL, 64, len), 2);
    assert_int_equal(len[0], 0);
    assert_int_equal(len[1], 2);
}

/* colo_spec_plan_costed with a cost paid once, on a sequence's first
 * drafted token (a draft model catching up with a prompt): small, the
 * draft goes on as without it; as dear as five steps, nothing drafted
 * pays; beside a sequence with no such cost, that one's drafts are taken
 * and the other drafts nothing. */
static void test_plan_once(void **state)
{
    (void)state;
    colo_spec_costs c = {0};
    for (int r = 1; r <= COLO_SPEC_MAX_ROWS; r++)
        colo_spec_costs_add(&c, r, r <= 4 ? 1000 : 3000);
    int avail[2] = {3, 3}, len[2];
    float rate[2] = {0.95f, 0.95f};
    double tok[2] = {100, 100}, small[2] = {500, 0}, dear[2] = {5000, 0};
    /* 3.71 tokens per 1000 + 300 + 500 ns beats 1 per 1000 */
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, tok, small, 64, len), 3);
    assert_int_equal(colo_spec_plan_costed(&c, 1, 1, avail, rate, tok, dear, 64, len), 0);
    assert_int_equal(len[0], 0);
    assert_int_equal(colo_spec_plan_costed(&c, 2, 2, avail, rate, tok, dear, 64, len), 2);
    assert_int_equal(len[0], 0);
    assert_int_equal(len[1], 2);
}

/* colo_spec_amortize: a cost over the steps its sequence has left, each
 * giving 1 + rate + ... + rate^k tokens; past the horizon, the horizon's;
 * none left, all of it. */
static void test_amortize(void **state)
{
    (void)state;
    assert_float_equal(colo_spec_amortize(1000, 100, 0.5f, 1), 15.0, 1e-9);
    assert_float_equal(colo_spec_amortize(1750, 100, 0.5f, 2), 30.625, 1e-9);
    assert_float_equal(colo_spec_amortize(2560, 100000, 0, 4), 2560.0 / COLO_SPEC_CATCHUP_HORIZON, 1e-9);
    assert_float_equal(colo_spec_amortize(700, 0, 0.9f, 8), 700, 1e-9);
    assert_float_equal(colo_spec_amortize(0, 50, 0.9f, 8), 0, 1e-9);
}

/* colo_spec_plan on made-up costs: nothing measured drafts nothing; a
 * measured row count lets one more row be tried; a step function of
 * cost drafts up to its edge, or past it when acceptance makes up for
 * it; a poor acceptance drafts nothing; the bounds hold; costs not
 * measured for COLO_SPEC_STALE_STEPS steps are measured again. */
static void test_plan(void **state)
{
    (void)state;
    colo_spec_costs c = {0};
    int avail[2] = {6, 6}, len[2];
    float hi[2] = {0.9f, 0.9f}, lo[2] = {0.1f, 0.1f}, mixed[2] = {0.9f, 0.2f};
    assert_int_equal(colo_spec_plan(&c, 2, 2, avail, hi, 64, len), 0);
    /* one row measured: two are tried */
    colo_spec_costs_add(&c, 1, 1000);
    assert_int_equal(colo_spec_plan(&c, 1, 1, avail, lo, 64, len), 1);
    assert_int_equal(len[0], 1);
    /* up to 4 rows 1000 ns, 5 and more 3000 ns */
    for (int r = 2; r <= COLO_SPEC_MAX_ROWS; r++)
        colo_spec_costs_add(&c, r, r <= 4 ? 1000 : 3000);
    assert_int_equal(colo_spec_plan(&c, 1, 1, avail, lo, 64, len), 3); /* the edge: 3 drafted, 4 rows */
    assert_int_equal(colo_spec_plan(&c, 1, 1, avail, hi, 64, len), 3); /* 3.4 per 1000 beats 5.2 per 3000 */
    assert_int_equal(colo_spec_plan(&c, 1, 1, avail, hi, 2, len), 2);
    float sure[1] = {0.99f};
    int many[1] = {16};
    assert_int_equal(colo_spec_plan(&c, 1, 1, many, sure, 64, len), 16); /* 15.7 per 3000 beats 3.9 per 1000 */
    /* two sequences: the likelier one drafts first */
    assert_int_equal(colo_spec_plan(&c, 2, 2, avail, mixed, 64, len), 2);
    assert_int_equal(len[0], 2);
    assert_int_equal(len[1], 0);
    /* the rows' bound */
    assert_int_equal(colo_spec_plan(&c, COLO_SPEC_MAX_ROWS, 1, avail, hi, 64, len), 0);
    /* a step that costs a row's time more with each row: a poor draft is not worth it */
    colo_spec_costs d = {0};
    for (int r = 1; r <= 4; r++)
        colo_spec_costs_add(&d, r, 1000 * (uint64_t)r);
    assert_int_equal(colo_spec_plan(&d, 1, 1, avail, lo, 64, len), 0);
    assert_int_equal(len[0], 0);
    assert_true(colo_spec_cost(&d, 5) == 4000); /* not measured: as 4 rows, to be tried */
    assert_true(colo_spec_cost(&d, 6) == 0);
    /* only one row measured lately: the rest is stale, two rows tried again */
    for (int i = 0; i < COLO_SPEC_STALE_STEPS; i++)
        colo_spec_costs_add(&d, 1, 1000);
    assert_true(colo_spec_cost(&d, 3) == 0);
    assert_int_equal(colo_spec_plan(&d, 1, 1, avail, lo, 64, len), 1);
    /* acceptance: priors by the match's length; kept runs raise it,
     * rejections lower it, apart for each length; idling drifts back */
    colo_spec_accept a;
    colo_spec_accept_init(&a);
    assert_true(colo_spec_accept_rate(&a, 1, false) == 0.45f);
    assert_true(colo_spec_accept_rate(&a, 1, true) == 0.2f);
    assert_true(colo_spec_accept_rate(&a, 3, false) == 0.6f);
    assert_true(colo_spec_accept_rate(&a, 9, true) == 0.75f); /* a long match: split or not */
    assert_true(colo_spec_accept_rate(&a, 9, false) == 0.75f);
    for (int i = 0; i < 10; i++)
        colo_spec_accept_add(&a, 3, false, 4, 4);
    assert_true(colo_spec_accept_rate(&a, 3, false) > 0.9f);
    assert_true(colo_spec_accept_rate(&a, 4, false) > 0.9f); /* 3 and 4: one class */
    assert_true(colo_spec_accept_rate(&a, 3, true) == 0.3f); /* split: apart */
    assert_true(colo_spec_accept_rate(&a, 2, false) == 0.6f);
    for (int i = 0; i < 20; i++)
        colo_spec_accept_add(&a, 3, false, 4, 0);
    assert_true(colo_spec_accept_rate(&a, 3, false) < 0.2f);
    float before = colo_spec_accept_rate(&a, 3, false);
    for (int i = 0; i < 20; i++)
        colo_spec_accept_idle(&a);
    assert_true(colo_spec_accept_rate(&a, 3, false) > before);
}

/* Sampled at temperature 0.8 with a seed per sequence: each token is drawn
 * from the same row with the same random stream, so the same tokens. */
static void test_sampled_same_tokens(void **state)
{
    (void)state;
    run_spec plain = {.sh = {0, 4, 256, 0, false}, .n_seqs = 4, .max_tokens = 60, .temperature = 0.8f};
    run_out a, b;
    run(&plain, &a);
    run_spec spec = plain;
    spec.sh.spec_tokens = 6;
    run(&spec, &b);
    assert_same_runs(&a, &b, 4);
    assert_true(b.st.spec_drafted > 0);
}

/* A cache too small for the four (preemptions, recomputed) and prompts
 * with a common head (prefix cache hits): the same bits as a roomy run
 * without drafts, every block back at the end. */
static void test_preemption_and_prefix_cache(void **state)
{
    (void)state;
    run_spec roomy = {.sh = {0, 4, 64, 0, false}, .n_seqs = 4, .max_tokens = 40, .shared_head = true};
    run_out a, b;
    run(&roomy, &a);
    assert_int_equal(a.preemptions, 0);
    run_spec tight = roomy;
    tight.sh.spec_tokens = 5;
    tight.sh.n_blocks = 40; /* 160 slots for four of ~75 tokens each */
    run(&tight, &b);
    assert_true(b.preemptions > 0);
    assert_true(b.prefix_hits > 0);
    assert_true(b.st.spec_accepted > 0);
    assert_same_runs(&a, &b, 4);
    assert_int_equal(b.free_blocks, b.total_blocks);
    /* chunked prefill (5-token steps) beside drafting decodes */
    run_spec chunked = tight;
    chunked.sh.step_tokens = 5;
    chunked.sh.n_blocks = 0;
    run(&chunked, &b);
    assert_same_runs(&a, &b, 4);
}

/* A step of COLO_SPEC_MAX_DECODES decoding sequences drafts nothing; a
 * sequence that asked for plain decoding never drafts. */
static void test_switch_off(void **state)
{
    (void)state;
    run_spec many = {.sh = {8, 8, 512, 0, false}, .n_seqs = 8, .max_tokens = 30};
    run_out b;
    run(&many, &b);
    bool all_length = true;
    for (int i = 0; i < 8; i++)
        all_length &= !strcmp(b.res[i].finish, "length");
    if (all_length) /* (they decode in lockstep to the end) */
        assert_int_equal(b.st.spec_drafted, 0);

    engine_rig r;
    engine_shape sh = {8, 4, 256, 0, false};
    rig_open(&r, &sh);
    engine_result res;
    colo_engine_callbacks cb;
    engine_results_reset(&res, &cb, 1);
    int32_t ids[96];
    int n = prompt_ids(2, ids);
    char err[256];
    colo_engine_params p = {.max_tokens = 40, .temperature = 0, .top_p = 1, .no_spec = true};
    assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
    engine_run_all(r.e);
    colo_engine_step_stats st;
    colo_engine_get_step_stats(r.e, &st);
    assert_int_equal(st.spec_drafted, 0);
    assert_int_equal(res.n, 40);
    engine_rig_close(&r);
}

/* P(chi-square with k degrees of freedom >= x): the regularized upper
 * incomplete gamma function Q(k/2, x/2). */
static double chi2_sf(double x, int k)
{
    double a = k / 2.0, z = x / 2.0;
    if (z <= 0)
        return 1;
    double lg = lgamma(a);
    if (z < a + 1) { /* series for P, then 1 - P */
        double sum = 1 / a, term = sum;
        for (int n = 1; n < 1000; n++) {
            term *= z / (a + n);
            sum += term;
            if (term < sum * 1e-15)
                break;
        }
        return 1 - sum * exp(-z + a * log(z) - lg);
    }
    /* continued fraction for Q (Lentz) */
    double b = z + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300)
            d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300)
            c = 1e-300;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return exp(-z + a * log(z) - lg) * h;
}

/* The model's logits after tokens[0..n) (one prefill in blocks of the
 * engine's cache, idle now) into row (V). */
static void logits_after(engine_rig *r, const int32_t *tokens, int n, float *row)
{
    colo_engine_prefix_flush(r->e);
    int bs = colo_llama_kv_block_size(r->m), nb = (n + bs - 1) / bs;
    int32_t blocks[CTX], pos[CTX], seq[CTX], last = n - 1;
    assert_int_equal(colo_llama_kv_alloc(r->m, nb, blocks), COLO_OK);
    for (int i = 0; i < n; i++)
        pos[i] = i, seq[i] = 0;
    colo_llama_batch b = {.n_tokens = n, .tokens = tokens, .pos = pos, .seq = seq, .n_seqs = 1, .max_blocks = nb,
                          .block_table = blocks, .n_logits = 1, .logit_rows = &last};
    assert_int_equal(colo_llama_forward(r->m, r->s, &b, row, NULL), COLO_OK);
    colo_llama_kv_free(r->m, blocks, nb);
}

#define CHI_N 2000
#define CHI_TEMP 0.25f /* a peaked distribution: enough samples of the first token's mode */
static engine_result chi_res[CHI_N];

/* One chi-square test: CHI_N sequences of a prompt that holds every token
 * (so whatever the first token, lookup drafts the second) sample three
 * tokens at temperature CHI_TEMP with seeds base + i. Among those whose first
 * token is the most frequent one, the second token (verified against a
 * draft: kept with its probability, otherwise drawn from the rest) is
 * compared with the model's distribution at that position. Returns the
 * p-value; adds the engine's drafted and accepted tokens. */
static double chi_square_once(uint64_t base, const int32_t *prompt, int n_prompt, uint64_t *drafted,
                              uint64_t *accepted)
{
    engine_rig r;
    engine_shape sh = {4, 4, 512, 0, false};
    rig_open(&r, &sh);
    static colo_engine_callbacks cbs[CHI_N];
    engine_results_reset(chi_res, cbs, CHI_N);
    char err[256];
    for (int i = 0; i < CHI_N; i++) {
        colo_engine_params p = {.max_tokens = 3, .temperature = CHI_TEMP, .top_p = 1,
                                .seed = base + (uint64_t)i};
        assert_non_null(colo_engine_add(r.e, prompt, n_prompt, &p, &cbs[i], err, sizeof err));
    }
    engine_run_all(r.e);
    colo_engine_step_stats st;
    colo_engine_get_step_stats(r.e, &st);
    *drafted += st.spec_drafted;
    *accepted += st.spec_accepted;
    int first[VOCAB] = {0}, mode = 0;
    for (int i = 0; i < CHI_N; i++)
        if (chi_res[i].n >= 2 && ++first[chi_res[i].toks[0]] > first[mode])
            mode = chi_res[i].toks[0];
    int32_t ctx[CTX];
    memcpy(ctx, prompt, (size_t)n_prompt * 4);
    ctx[n_prompt] = mode;
    float row[VOCAB];
    logits_after(&r, ctx, n_prompt + 1, row);
    engine_rig_close(&r);
    double mx = row[0], sum = 0, prob[VOCAB];
    for (int i = 1; i < VOCAB; i++)
        mx = row[i] > mx ? row[i] : mx;
    for (int i = 0; i < VOCAB; i++)
        sum += prob[i] = exp((row[i] - mx) / CHI_TEMP);
    int seen[VOCAB] = {0}, n = 0;
    for (int i = 0; i < CHI_N; i++)
        if (chi_res[i].n >= 2 && chi_res[i].toks[0] == mode)
            seen[chi_res[i].toks[1]]++, n++;
    if (n < 200)
        fail_msg("%d samples of the first token's mode (%d)", n, mode);
    /* a bin per token expected 5 times or more, the rest in one */
    double chi = 0, rest_e = 0;
    int bins = 0, rest_o = 0;
    for (int i = 0; i < VOCAB; i++) {
        double e = n * prob[i] / sum;
        if (e >= 5) {
            chi += (seen[i] - e) * (seen[i] - e) / e;
            bins++;
        } else {
            rest_e += e;
            rest_o += seen[i];
        }
    }
    if (rest_e > 0) {
        chi += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    }
    assert_true(bins >= 3);
    double pv = chi2_sf(chi, bins - 1);
    printf("chi-square seed %llu: %d samples, %d bins, statistic %.2f, p %.3f\n", (unsigned long long)base, n, bins,
           chi, pv);
    return pv;
}

/* Over three seeds, the second token's distribution passes the
 * chi-square test at p > 0.01, drafts were kept and rejected, and the
 * same check on a wrong distribution (a bin's count moved) fails. */
static void test_sampling_distribution(void **state)
{
    (void)state;
    int32_t prompt[VOCAB + 8];
    int n = 0;
    /* every token once, in a scrambled order (317 is prime to VOCAB... a
     * stride coprime with it) */
    for (int i = 0; i < VOCAB; i++)
        prompt[n++] = (int32_t)((i * 97 + 5) % VOCAB);
    uint64_t drafted = 0, accepted = 0;
    for (int s = 0; s < 3; s++)
        assert_true(chi_square_once(7919ull * (uint64_t)(s + 1) * CHI_N, prompt, n, &drafted, &accepted) > 0.01);
    assert_true(drafted > 0);
    assert_true(accepted > 0 && accepted < drafted);
    /* the statistic can fail: a skewed sample is refused */
    assert_true(chi2_sf(30.0, 4) < 0.01);
    assert_true(chi2_sf(3.0, 4) > 0.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_greedy_bit_identical),
        cmocka_unit_test(test_adaptive_bit_identical),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_plan_costed),
        cmocka_unit_test(test_plan_once),
        cmocka_unit_test(test_amortize),
        cmocka_unit_test(test_sampled_same_tokens),
        cmocka_unit_test(test_preemption_and_prefix_cache),
        cmocka_unit_test(test_switch_off),
        cmocka_unit_test(test_sampling_distribution),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
