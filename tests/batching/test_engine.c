/* The generation engine on a small synthetic model (F32 weights, so every
 * matrix path computes in float, one FMA chain per output in a decode step
 * and in a prefill alike): a sequence's tokens and their log-probabilities,
 * to the bit, do not depend on what else is in the batch, on chunked
 * prefill, or on being preempted and recomputed; stop strings, max_tokens
 * and cancellation behave. */
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
#include "runtime/cosched.h"
#include "engine_fixture.h"
#include "tools/mkmodel.h"

static int setup(void **state)
{
    (void)state;
    return engine_fixture_open("engine", 11);
}

typedef engine_rig rig;

static void rig_open(rig *r, int max_running, int step_tokens, int n_blocks)
{
    engine_rig_arena(r, dev, "engine", 64 << 20);
    colo_engine_config gc = {.max_running = max_running, .max_step_tokens = step_tokens, .block_size = 4,
                          .kv_type = COLO_F32, .n_blocks = n_blocks};
    engine_rig_start(r, &gc);
}

typedef struct {
    int32_t toks[256];
    float lps[256];
    int n;
    char text[4096];
    size_t text_len;
    char streamed[4096];
    size_t streamed_len;
    const char *finish;
    colo_status status;
    int n_preempted;
    int done;
} result;

static void on_token(void *ud, int32_t tok, const char *piece, size_t len)
{
    (void)tok;
    result *r = ud;
    memcpy(r->streamed + r->streamed_len, piece, len);
    r->streamed_len += len;
}

static void on_done(void *ud, const colo_engine_outcome *o)
{
    result *r = ud;
    r->n = o->n_tokens;
    memcpy(r->toks, o->tokens, (size_t)o->n_tokens * 4);
    if (o->logprobs)
        memcpy(r->lps, o->logprobs, (size_t)o->n_tokens * 4);
    memcpy(r->text, o->text, o->text_len);
    r->text_len = o->text_len;
    r->finish = o->finish_reason;
    r->status = o->status;
    r->n_preempted = o->n_preempted;
    r->done++;
}

static void prompt_ids(int which, int32_t *ids, int *n)
{
    *n = 3 + which * 7;
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)((which * 31 + i * 17) % 256);
}

static void run_all(rig *r)
{
    int n;
    for (int guard = 0; guard < 10000; guard++) {
        assert_int_equal(colo_engine_step(r->e, NULL, &n), COLO_OK);
        if (!n && !colo_engine_n_running(r->e) && !colo_engine_n_waiting(r->e))
            return;
    }
    fail_msg("engine did not finish");
}

/* Runs n_seqs prompts to the end in one engine; returns its preemptions. */
static uint64_t generate(int max_running, int step_tokens, int n_blocks, int n_seqs, int max_tokens, result *out)
{
    rig r;
    rig_open(&r, max_running, step_tokens, n_blocks);
    colo_engine_params p = {.max_tokens = max_tokens, .temperature = 0, .top_p = 1, .logprobs = true};
    char err[256];
    for (int i = 0; i < n_seqs; i++) {
        int32_t ids[64];
        int n;
        prompt_ids(i, ids, &n);
        colo_engine_callbacks cb = {on_token, on_done, &out[i]};
        memset(&out[i], 0, sizeof out[i]);
        assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
    }
    run_all(&r);
    uint64_t preemptions = colo_engine_preemptions(r.e);
    engine_rig_close(&r);
    return preemptions;
}

static void assert_same(const result *a, const result *b)
{
    assert_int_equal(a->done, 1);
    assert_int_equal(b->done, 1);
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->toks, b->toks, (size_t)a->n * 4);
    assert_memory_equal(a->lps, b->lps, (size_t)a->n * 4);
    assert_int_equal(a->text_len, b->text_len);
}

static void test_batch_and_chunk_invariance(void **state)
{
    (void)state;
    result alone[4], batch[4], chunked[4];
    /* Alone: each prompt in an engine of its own. */
    for (int i = 0; i < 4; i++) {
        rig r;
        rig_open(&r, 1, 256, 0);
        colo_engine_params p = {.max_tokens = 24, .temperature = 0, .top_p = 1, .logprobs = true};
        int32_t ids[64];
        int n;
        char err[256];
        prompt_ids(i, ids, &n);
        memset(&alone[i], 0, sizeof alone[i]);
        colo_engine_callbacks cb = {on_token, on_done, &alone[i]};
        assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
        run_all(&r);
        engine_rig_close(&r);
    }
    generate(4, 256, 0, 4, 24, batch);   /* all four in one batch */
    generate(4, 5, 0, 4, 24, chunked);   /* 5-token steps: prefill in chunks */
    for (int i = 0; i < 4; i++) {
        assert_same(&alone[i], &batch[i]);
        assert_same(&alone[i], &chunked[i]);
        assert_string_equal(alone[i].finish, "length");
        /* Streamed pieces add up to the final text. */
        assert_int_equal(batch[i].streamed_len, batch[i].text_len);
        assert_memory_equal(batch[i].streamed, batch[i].text, batch[i].text_len);
    }
}

/* A cache far too small for four sequences at once: sequences wait and get
 * preempted, and still produce exactly the tokens they produce alone. */
static void test_preemption_recomputes_exactly(void **state)
{
    (void)state;
    result roomy[4], tight[4];
    assert_int_equal(generate(4, 64, 0, 4, 30, roomy), 0);
    uint64_t preemptions = generate(4, 64, 16, 4, 30, tight); /* 16 blocks of 4 tokens = 64 slots */
    /* Without a preemption this would compare two runs that never differed. */
    assert_true(preemptions > 0);
    uint64_t seq_preemptions = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(roomy[i].n_preempted, 0);
        seq_preemptions += (uint64_t)tight[i].n_preempted;
        assert_same(&roomy[i], &tight[i]);
    }
    assert_int_equal(seq_preemptions, preemptions);
}

/* cfg.yield for the test: true on every third call. */
static int yield_calls;
static bool yield_third(void *ud)
{
    (void)ud;
    return ++yield_calls % 3 == 0;
}

/* Runs n_seqs prompts of the batch class (interactive ones when batch is
 * false) with yield_third as the engine's yield (none when !yield); the
 * steps it abandoned into *abandoned. */
static void generate_class(bool batch, bool yield, int n_seqs, result *out, uint64_t *abandoned)
{
    rig r;
    engine_rig_arena(&r, dev, "engine", 64 << 20);
    colo_engine_config gc = {.max_running = 4, .max_step_tokens = 64, .block_size = 4, .kv_type = COLO_F32,
                             .yield = yield ? yield_third : NULL};
    engine_rig_start(&r, &gc);
    colo_engine_params p = {.max_tokens = 20, .temperature = 0, .top_p = 1, .logprobs = true, .batch = batch};
    char err[256];
    for (int i = 0; i < n_seqs; i++) {
        int32_t ids[64];
        int n;
        prompt_ids(i, ids, &n);
        colo_engine_callbacks cb = {on_token, on_done, &out[i]};
        memset(&out[i], 0, sizeof out[i]);
        assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
    }
    run_all(&r);
    colo_engine_step_stats st;
    colo_engine_get_step_stats(r.e, &st);
    *abandoned = st.abandoned;
    engine_rig_close(&r);
}

/* A step of batch-class work alone is abandoned between layers when the
 * engine's yield says so: nothing of it is kept, and the sequences give
 * the tokens they give in steps that were never abandoned. A step of
 * interactive work never asks. */
static void test_abandoned_batch_steps(void **state)
{
    (void)state;
    result plain[3], yielded[3], interactive[3];
    uint64_t abandoned;
    generate_class(true, false, 3, plain, &abandoned);
    assert_int_equal(abandoned, 0);
    yield_calls = 0;
    generate_class(true, true, 3, yielded, &abandoned);
    assert_true(abandoned > 0);
    assert_int_equal(abandoned, (uint64_t)yield_calls / 3);
    for (int i = 0; i < 3; i++) {
        assert_same(&plain[i], &yielded[i]);
        assert_string_equal(yielded[i].finish, "length");
    }
    yield_calls = 0;
    generate_class(false, true, 3, interactive, &abandoned);
    assert_int_equal(yield_calls, 0);
    assert_int_equal(abandoned, 0);
    for (int i = 0; i < 3; i++)
        assert_same(&plain[i], &interactive[i]);
}

/* One interactive sequence of 40 tokens beside one batch line of 4 on a
 * co-scheduler member whose batch floor is floor_share: the results, the
 * order they ended in (order[0] the first to end: 0 interactive, 1 the
 * line), and the engine's and the member's step counts. */
typedef struct {
    int order[2];
    int n_done;
    result res[2];
} ordered;

static ordered *ordered_of;
static void on_done_ordered(void *ud, const colo_engine_outcome *o)
{
    on_done(ud, o);
    result *r = ud;
    ordered_of->order[ordered_of->n_done++] = r == &ordered_of->res[0] ? 0 : 1;
}

static void generate_beside(double floor_share, ordered *out, colo_engine_step_stats *st,
                            colo_cosched_member_stats *mst)
{
    char err[256];
    colo_cosched_config cc = {.policy = COLO_SCHED_SPATIAL, .best_effort_max_ops = 8, .batch_min_share = floor_share};
    colo_cosched *cs = colo_cosched_create(&cc, err, sizeof err);
    assert_non_null(cs);
    colo_cosched_member *member = colo_cosched_join(cs, "engine", COLO_PRIO_HIGH);
    assert_non_null(member);
    rig r;
    rig_open(&r, 4, 64, 0);
    memset(out, 0, sizeof *out);
    ordered_of = out;
    for (int i = 0; i < 2; i++) {
        colo_engine_params p = {.max_tokens = i ? 4 : 40, .temperature = 0, .top_p = 1, .logprobs = true,
                                .batch = i == 1};
        int32_t ids[64];
        int n;
        prompt_ids(i, ids, &n);
        colo_engine_callbacks cb = {on_token, on_done_ordered, &out->res[i]};
        assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
    }
    int n, guard = 0;
    do {
        assert_int_equal(colo_engine_step(r.e, member, &n), COLO_OK);
        assert_true(++guard < 1000);
    } while (n || colo_engine_n_running(r.e) || colo_engine_n_waiting(r.e));
    colo_engine_get_step_stats(r.e, st);
    colo_cosched_member_get_stats(member, mst);
    engine_rig_close(&r);
    colo_cosched_leave(member);
    colo_cosched_destroy(cs);
}

/* A step's class: steps of batch lines alone are COLO_STEP_BATCH to the
 * co-scheduler, a step with an interactive sequence is interactive even
 * when it carries lines. Without a floor the line waits for the
 * interactive sequence to end; with one it progresses beside it in steps
 * that carry both (and ends first here), with the tokens it has alone. */
static void test_step_class_and_batch_floor(void **state)
{
    (void)state;
    ordered none, floored;
    colo_engine_step_stats st;
    colo_cosched_member_stats mst;
    generate_beside(0, &none, &st, &mst);
    assert_int_equal(none.n_done, 2);
    assert_int_equal(none.order[0], 0); /* the line waited */
    assert_int_equal(st.floor_steps, 0);
    assert_true(st.batch_steps >= 6);   /* its prompt (3 chunks of 4) and decodes, alone */
    assert_int_equal(mst.batch_steps, st.batch_steps);
    uint64_t all = st.steps[0] + st.steps[1] + st.steps[2];
    assert_int_equal(mst.steps, all);

    generate_beside(0.25, &floored, &st, &mst);
    assert_int_equal(floored.n_done, 2);
    assert_int_equal(floored.order[0], 1); /* the line ended while the interactive one ran */
    assert_true(st.floor_steps >= 6);
    assert_int_equal(st.batch_steps, 0); /* every step carried the interactive sequence */
    assert_int_equal(mst.batch_steps, 0);
    for (int i = 0; i < 2; i++) {
        assert_same(&none.res[i], &floored.res[i]);
        assert_string_equal(floored.res[i].finish, "length");
    }
}

static void test_stop_strings_and_limits(void **state)
{
    (void)state;
    result base[1];
    generate(1, 256, 0, 1, 40, base);
    assert_true(base[0].text_len > 6);
    /* A stop string taken from the middle of the text, spanning tokens or not. */
    char stop[8];
    size_t at = base[0].text_len / 2;
    memcpy(stop, base[0].text + at, 3);
    stop[3] = 0;
    rig r;
    rig_open(&r, 2, 256, 0);
    result res;
    memset(&res, 0, sizeof res);
    colo_engine_params p = {.max_tokens = 40, .temperature = 0, .top_p = 1, .n_stop = 1};
    p.stop[0] = stop;
    int32_t ids[64];
    int n;
    char err[256];
    prompt_ids(0, ids, &n);
    colo_engine_callbacks cb = {on_token, on_done, &res};
    assert_non_null(colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err));
    run_all(&r);
    char *first = memmem(base[0].text, base[0].text_len, stop, 3);
    assert_non_null(first);
    assert_string_equal(res.finish, "stop");
    assert_int_equal(res.text_len, (size_t)(first - base[0].text));
    assert_memory_equal(res.text, base[0].text, res.text_len);
    /* Nothing of the stop string was streamed. */
    assert_int_equal(res.streamed_len, res.text_len);

    /* max_tokens, and a prompt that leaves no room. */
    result short_res;
    memset(&short_res, 0, sizeof short_res);
    colo_engine_params p2 = {.max_tokens = 3, .temperature = 0, .top_p = 1};
    colo_engine_callbacks cb2 = {on_token, on_done, &short_res};
    assert_non_null(colo_engine_add(r.e, ids, n, &p2, &cb2, err, sizeof err));
    run_all(&r);
    assert_int_equal(short_res.n, 3);
    assert_string_equal(short_res.finish, "length");
    int32_t big[300] = {0};
    assert_null(colo_engine_add(r.e, big, 256, &p2, &cb2, err, sizeof err));
    assert_non_null(strstr(err, "context"));
    assert_null(colo_engine_add(r.e, big, 0, &p2, &cb2, err, sizeof err));
    engine_rig_close(&r);
}

static void test_cancel_frees_blocks(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, 4, 64, 0);
    int total = colo_engine_kv_free_blocks(r.e);
    result res[3];
    colo_engine_seq *seqs[3];
    colo_engine_params p = {.max_tokens = 50, .temperature = 0.9f, .top_p = 0.9f, .top_k = 20, .seed = 7};
    char err[256];
    for (int i = 0; i < 3; i++) {
        int32_t ids[64];
        int n;
        prompt_ids(i, ids, &n);
        memset(&res[i], 0, sizeof res[i]);
        colo_engine_callbacks cb = {on_token, on_done, &res[i]};
        seqs[i] = colo_engine_add(r.e, ids, n, &p, &cb, err, sizeof err);
    }
    int n;
    for (int k = 0; k < 3; k++)
        colo_engine_step(r.e, NULL, &n);
    assert_true(colo_engine_kv_free_blocks(r.e) < total);
    colo_engine_cancel(r.e, seqs[1]);
    assert_int_equal(res[1].done, 1);
    assert_int_equal(res[1].status, COLO_ECANCELED);
    run_all(&r);
    assert_int_equal(colo_engine_kv_free_blocks(r.e), total);
    assert_int_equal(res[0].done, 1);
    assert_int_equal(res[2].done, 1);
    engine_rig_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_and_chunk_invariance),
        cmocka_unit_test(test_preemption_recomputes_exactly),
        cmocka_unit_test(test_abandoned_batch_steps),
        cmocka_unit_test(test_step_class_and_batch_floor),
        cmocka_unit_test(test_stop_strings_and_limits),
        cmocka_unit_test(test_cancel_frees_blocks),
    };
    return cmocka_run_group_tests(tests, setup, engine_fixture_close);
}
