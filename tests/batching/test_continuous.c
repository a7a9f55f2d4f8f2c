/* Continuous batching: admission under a full KV cache, chunked prefill
 * fairness, preemption and recomputation, priority order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/continuous.h"

/* A block pool for the tests: ids 0..n-1 with an owner map that catches
 * double allocation and double free. */
typedef struct {
    int n;
    int n_free;
    int32_t free_ids[1024];
    int8_t used[1024];
} pool;

static int pool_n_free(void *c) { return ((pool *)c)->n_free; }
static colo_status pool_alloc(void *c, int n, int32_t *out)
{
    pool *p = c;
    if (n > p->n_free)
        return COLO_ENOMEM;
    for (int i = 0; i < n; i++) {
        int32_t id = p->free_ids[--p->n_free];
        assert_int_equal(p->used[id], 0);
        p->used[id] = 1;
        out[i] = id;
    }
    return COLO_OK;
}
static void pool_free(void *c, const int32_t *ids, int n)
{
    pool *p = c;
    for (int i = 0; i < n; i++) {
        assert_int_equal(p->used[ids[i]], 1);
        p->used[ids[i]] = 0;
        p->free_ids[p->n_free++] = ids[i];
    }
}
static void pool_init(pool *p, int n)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    for (int i = 0; i < n; i++)
        p->free_ids[p->n_free++] = n - 1 - i;
}

typedef struct {
    colo_seq s;
    int32_t toks[512];
    int32_t blocks[128];
} tseq;

static void seq_init(tseq *t, int n_prompt, colo_priority prio)
{
    memset(t, 0, sizeof *t);
    t->s.tokens = t->toks;
    t->s.cap = 512;
    t->s.blocks = t->blocks;
    t->s.max_blocks = 128;
    t->s.priority = prio;
    t->s.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++)
        t->toks[i] = i;
}

static colo_continuous *make(pool *p, int bs, int max_running, int budget, int blocks)
{
    pool_init(p, blocks);
    colo_continuous_config cfg = {.block_size = bs, .max_running = max_running, .max_step_tokens = budget,
                          .total_blocks = blocks};
    colo_block_allocator al = {.ctx = p, .n_free = pool_n_free, .alloc = pool_alloc, .free = pool_free};
    colo_continuous *cb = colo_continuous_create(&cfg, &al);
    assert_non_null(cb);
    return cb;
}

static const colo_continuous_work *find(const colo_continuous_work *w, int n, const colo_seq *s)
{
    for (int i = 0; i < n; i++)
        if (w[i].seq == s)
            return &w[i];
    return NULL;
}

/* After a step, every sequence whose logits came back gets a new token. */
static void step_done(colo_continuous *cb, colo_continuous_work *w, int n)
{
    colo_continuous_commit(cb, w, n);
    for (int i = 0; i < n; i++)
        if (w[i].logits) {
            colo_seq *s = w[i].seq;
            s->tokens[s->n_tokens] = 1000 + s->n_tokens;
            s->n_tokens++;
        }
}

static void test_chunked_prefill_keeps_decodes_running(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make(&p, 4, 4, 8, 100);
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq a, b;
    seq_init(&a, 3, COLO_PRIO_NORMAL);
    assert_int_equal(colo_continuous_add(cb, &a.s), COLO_OK);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].start, 0);
    assert_int_equal(w[0].n, 3);
    assert_true(w[0].logits);
    step_done(cb, w, n);

    seq_init(&b, 20, COLO_PRIO_NORMAL); /* a long prompt arrives */
    assert_int_equal(colo_continuous_add(cb, &b.s), COLO_OK);
    for (int step = 0; step < 3; step++) {
        n = colo_continuous_plan(cb, w, stopped, &ns);
        const colo_continuous_work *wa = find(w, n, &a.s), *wb = find(w, n, &b.s);
        assert_non_null(wa); /* the decode is never stalled by the prompt */
        assert_int_equal(wa->n, 1);
        assert_true(wa->logits);
        assert_non_null(wb);
        assert_int_equal(wb->start, step * 7);
        assert_int_equal(wb->n, step < 2 ? 7 : 6);
        assert_int_equal(wb->logits, step == 2);
        assert_true(wa->n + wb->n <= 8);
        step_done(cb, w, n);
    }
    colo_continuous_remove(cb, &a.s);
    colo_continuous_remove(cb, &b.s);
    assert_int_equal(p.n_free, 100);
    colo_continuous_destroy(cb);
}

static void test_full_cache_waits_then_admits(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make(&p, 4, 4, 64, 4); /* 16 token slots */
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq a, b;
    seq_init(&a, 12, COLO_PRIO_NORMAL);
    seq_init(&b, 8, COLO_PRIO_NORMAL);
    colo_continuous_add(cb, &a.s);
    colo_continuous_add(cb, &b.s);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1); /* b does not fit: it waits, nothing fails */
    assert_ptr_equal(w[0].seq, &a.s);
    assert_int_equal(colo_continuous_n_waiting(cb), 1);
    assert_int_equal(b.s.state, COLO_SEQ_WAITING);
    step_done(cb, w, n);
    colo_continuous_remove(cb, &a.s); /* finished: its blocks free at once */
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1);
    assert_ptr_equal(w[0].seq, &b.s);
    assert_int_equal(w[0].n, 8);
    colo_continuous_remove(cb, &b.s);
    colo_continuous_destroy(cb);
}

static void test_preempts_lowest_priority_latest(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make(&p, 4, 4, 64, 6);
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq a, b, c;
    seq_init(&a, 8, COLO_PRIO_NORMAL);
    seq_init(&b, 8, COLO_PRIO_LOW);
    seq_init(&c, 8, COLO_PRIO_LOW);
    colo_continuous_add(cb, &a.s);
    colo_continuous_add(cb, &b.s);
    colo_continuous_add(cb, &c.s);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 3); /* 6 blocks, all held */
    step_done(cb, w, n);    /* each now has 9 tokens: needs a 3rd block */
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(ns, 0);
    /* c (low, admitted last) is preempted; a and b continue. */
    assert_int_equal(c.s.state, COLO_SEQ_WAITING);
    assert_int_equal(c.s.n_preempted, 1);
    assert_int_equal(c.s.n_cached, 0);
    assert_int_equal(c.s.n_tokens, 9); /* its tokens are kept */
    assert_non_null(find(w, n, &a.s));
    assert_non_null(find(w, n, &b.s));
    assert_null(find(w, n, &c.s));
    assert_int_equal(colo_continuous_n_preemptions(cb), 1);
    step_done(cb, w, n);
    colo_continuous_remove(cb, &a.s);
    /* a's blocks are back: c is recomputed from its first token. */
    n = colo_continuous_plan(cb, w, stopped, &ns);
    const colo_continuous_work *wc = find(w, n, &c.s);
    assert_non_null(wc);
    assert_int_equal(wc->start, 0);
    assert_int_equal(wc->n, 9);
    assert_true(wc->logits);
    colo_continuous_remove(cb, &b.s);
    colo_continuous_remove(cb, &c.s);
    assert_int_equal(p.n_free, 6);
    colo_continuous_destroy(cb);
}

static void test_alone_outgrowing_cache_stops(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make(&p, 4, 2, 64, 2);
    colo_continuous_work w[2];
    colo_seq *stopped[2];
    int ns;
    tseq a;
    seq_init(&a, 8, COLO_PRIO_HIGH);
    assert_int_equal(colo_continuous_add(cb, &a.s), COLO_OK);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    step_done(cb, w, n);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 0);
    assert_int_equal(ns, 1);
    assert_ptr_equal(stopped[0], &a.s);
    assert_int_equal(a.s.state, COLO_SEQ_DONE);
    assert_int_equal(p.n_free, 2);
    colo_continuous_remove(cb, &a.s);
    colo_continuous_destroy(cb);
}

static void test_priority_admission_and_limits(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make(&p, 4, 1, 64, 16);
    colo_continuous_work w[1];
    colo_seq *stopped[1];
    int ns;
    tseq lo, hi, big;
    seq_init(&lo, 4, COLO_PRIO_LOW);
    seq_init(&hi, 4, COLO_PRIO_HIGH);
    colo_continuous_add(cb, &lo.s);
    colo_continuous_add(cb, &hi.s);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1);
    assert_ptr_equal(w[0].seq, &hi.s); /* max_running 1: the high one goes first */
    seq_init(&big, 100, COLO_PRIO_NORMAL);
    assert_int_equal(colo_continuous_add(cb, &big.s), COLO_EINVAL); /* 25 blocks > 16 in all */
    tseq empty;
    seq_init(&empty, 0, COLO_PRIO_NORMAL);
    assert_int_equal(colo_continuous_add(cb, &empty.s), COLO_EINVAL);
    colo_continuous_remove(cb, &lo.s);
    colo_continuous_remove(cb, &hi.s);
    colo_continuous_destroy(cb);
}

static colo_continuous *make_batch(pool *p, int bs, int max_running, int budget, int blocks, int batch_tokens)
{
    pool_init(p, blocks);
    colo_continuous_config cfg = {.block_size = bs, .max_running = max_running, .max_step_tokens = budget,
                                  .total_blocks = blocks, .batch_step_tokens = batch_tokens};
    colo_block_allocator al = {.ctx = p, .n_free = pool_n_free, .alloc = pool_alloc, .free = pool_free};
    colo_continuous *cb = colo_continuous_create(&cfg, &al);
    assert_non_null(cb);
    return cb;
}

static void batch_init(tseq *t, int n_prompt)
{
    seq_init(t, n_prompt, COLO_PRIO_LOW);
    t->s.batch = true;
}

/* Runs plans until every one of seqs[0..n) decodes (or max_steps pass). */
static void run_to_decoding(colo_continuous *cb, tseq *seqs, int n, int max_steps)
{
    colo_continuous_work w[8];
    colo_seq *stopped[8];
    int ns;
    for (int step = 0; step < max_steps; step++) {
        bool all = true;
        for (int i = 0; i < n; i++)
            all = all && seqs[i].s.state == COLO_SEQ_RUNNING && seqs[i].s.n_tokens - seqs[i].s.n_cached == 1;
        if (all)
            return;
        int k = colo_continuous_plan(cb, w, stopped, &ns);
        assert_int_equal(ns, 0);
        step_done(cb, w, k);
    }
    fail_msg("the sequences did not reach decoding in %d steps", max_steps);
}

/* Batch lines fill every place; a request of any priority, low included,
 * takes the place of the most recently admitted line at once, and its
 * steps hold nothing of the batch until it ends. */
static void test_batch_yields_place_and_prefill(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make_batch(&p, 4, 2, 16, 100, 16);
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq b[2], x;
    for (int i = 0; i < 2; i++) {
        batch_init(&b[i], 5);
        assert_int_equal(colo_continuous_add(cb, &b[i].s), COLO_OK);
    }
    run_to_decoding(cb, b, 2, 10);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 2); /* alone, the batch decodes */
    step_done(cb, w, n);

    seq_init(&x, 20, COLO_PRIO_LOW); /* 20 tokens: two steps of prefill at 16 */
    assert_int_equal(colo_continuous_add(cb, &x.s), COLO_OK);
    uint64_t pre = colo_continuous_n_preemptions(cb);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1); /* admitted in the place of b[1], and alone in its step */
    assert_ptr_equal(w[0].seq, &x.s);
    assert_int_equal(w[0].n, 16);
    assert_int_equal(b[1].s.state, COLO_SEQ_WAITING);
    assert_int_equal(b[0].s.state, COLO_SEQ_RUNNING);
    assert_int_equal(colo_continuous_n_preemptions(cb), pre + 1);
    step_done(cb, w, n);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1); /* the rest of the prompt: still nothing of the batch */
    assert_ptr_equal(w[0].seq, &x.s);
    assert_int_equal(w[0].n, 4);
    assert_true(w[0].logits);
    step_done(cb, w, n);
    /* x decodes now: its steps are still its own; the running line keeps
     * its place and blocks, the preempted one waits for a place */
    for (int step = 0; step < 3; step++) {
        n = colo_continuous_plan(cb, w, stopped, &ns);
        assert_int_equal(n, 1);
        assert_ptr_equal(w[0].seq, &x.s);
        assert_int_equal(b[0].s.state, COLO_SEQ_RUNNING);
        assert_int_equal(b[1].s.state, COLO_SEQ_WAITING);
        step_done(cb, w, n);
    }
    colo_continuous_remove(cb, &x.s);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 2); /* both lines again, b[1] readmitted once the place is free */
    assert_non_null(find(w, n, &b[0].s));
    assert_non_null(find(w, n, &b[1].s));
    for (int i = 0; i < 2; i++)
        colo_continuous_remove(cb, &b[i].s);
    assert_int_equal(p.n_free, 100);
    colo_continuous_destroy(cb);
}

/* Runs n_steps plans over interactive sequences x and y that decode in
 * every step, and line b; returns the steps that held b's work, failing if
 * a step ever left x or y out. */
static int steps_with_line(colo_continuous *cb, tseq *x, tseq *y, tseq *b, int n_steps)
{
    colo_continuous_work w[8];
    colo_seq *stopped[8];
    int ns, with_b = 0;
    for (int step = 0; step < n_steps; step++) {
        int n = colo_continuous_plan(cb, w, stopped, &ns);
        assert_int_equal(ns, 0);
        if (x)
            assert_non_null(find(w, n, &x->s));
        if (y)
            assert_non_null(find(w, n, &y->s));
        with_b += find(w, n, &b->s) != NULL;
        step_done(cb, w, n);
    }
    return with_b;
}

/* The batch's floor: under interactive sequences that keep every step
 * busy, a line gets no step without a floor and exactly share of the
 * steps with one (beside the others, who lose no step); a line that ran
 * alone banks at most one step of credit against the floor. */
static void test_batch_floor(void **state)
{
    (void)state;
    for (int with_floor = 0; with_floor < 2; with_floor++) {
        pool p;
        colo_continuous *cb = make_batch(&p, 4, 4, 64, 200, 4);
        colo_continuous_set_batch_floor(cb, with_floor ? 0.25 : 0);
        tseq x, y, b;
        seq_init(&x, 3, COLO_PRIO_NORMAL);
        seq_init(&y, 5, COLO_PRIO_HIGH);
        batch_init(&b, 10);
        assert_int_equal(colo_continuous_add(cb, &x.s), COLO_OK);
        assert_int_equal(colo_continuous_add(cb, &y.s), COLO_OK);
        assert_int_equal(colo_continuous_add(cb, &b.s), COLO_OK);
        int with_b = steps_with_line(cb, &x, &y, &b, 100);
        if (!with_floor) {
            assert_int_equal(with_b, 0);
            assert_int_equal(b.s.state, COLO_SEQ_WAITING);
            assert_int_equal(colo_continuous_n_floor_steps(cb), 0);
        } else {
            assert_int_equal(with_b, 25);
            assert_int_equal(colo_continuous_n_floor_steps(cb), 25);
            /* 3 prompt chunks of at most batch_step_tokens, then one token a step */
            assert_int_equal(b.s.n_tokens, 10 + 25 - 2);
            /* the line alone: its own steps, which are not floor steps */
            colo_continuous_remove(cb, &x.s);
            colo_continuous_remove(cb, &y.s);
            assert_int_equal(steps_with_line(cb, NULL, NULL, &b, 30), 30);
            assert_int_equal(colo_continuous_n_floor_steps(cb), 25);
            /* busy again: the credit climbs from at most one step short */
            seq_init(&x, 3, COLO_PRIO_NORMAL);
            assert_int_equal(colo_continuous_add(cb, &x.s), COLO_OK);
            assert_int_equal(steps_with_line(cb, &x, NULL, &b, 7), 0);
            assert_int_equal(steps_with_line(cb, &x, NULL, &b, 1), 1);
            colo_continuous_remove(cb, &x.s);
            colo_continuous_remove(cb, &b.s);
            assert_int_equal(p.n_free, 200);
            colo_continuous_destroy(cb);
            continue;
        }
        colo_continuous_remove(cb, &x.s);
        colo_continuous_remove(cb, &y.s);
        colo_continuous_remove(cb, &b.s);
        assert_int_equal(p.n_free, 200);
        colo_continuous_destroy(cb);
    }
}

/* A batch line's prompt gets at most batch_step_tokens of a step, and
 * none while a sequence of another class runs. */
static void test_batch_prefill_capped(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make_batch(&p, 4, 4, 32, 100, 6);
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq b, x;
    batch_init(&b, 20);
    assert_int_equal(colo_continuous_add(cb, &b.s), COLO_OK);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].n, 6);
    step_done(cb, w, n);
    seq_init(&x, 3, COLO_PRIO_NORMAL);
    assert_int_equal(colo_continuous_add(cb, &x.s), COLO_OK);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1); /* x's prompt: the batch's chunk waits */
    assert_ptr_equal(w[0].seq, &x.s);
    step_done(cb, w, n);
    for (int step = 0; step < 3; step++) { /* x decodes alone */
        n = colo_continuous_plan(cb, w, stopped, &ns);
        assert_int_equal(n, 1);
        assert_ptr_equal(w[0].seq, &x.s);
        assert_int_equal(w[0].n, 1);
        step_done(cb, w, n);
    }
    colo_continuous_remove(cb, &x.s);
    for (int step = 0; step < 3; step++) { /* then b's chunks of 6 again */
        n = colo_continuous_plan(cb, w, stopped, &ns);
        assert_int_equal(n, 1);
        assert_ptr_equal(w[0].seq, &b.s);
        assert_int_equal(w[0].start, 6 + 6 * step);
        assert_int_equal(w[0].n, step < 2 ? 6 : 2);
        step_done(cb, w, n);
    }
    colo_continuous_remove(cb, &b.s);
    assert_int_equal(p.n_free, 100);
    colo_continuous_destroy(cb);
}

/* A step gives the batch what colo_continuous_set_batch_share allows: the
 * oldest lines' decodes and a smaller prompt chunk; the share is bounded. */
static void test_batch_share(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make_batch(&p, 4, 4, 64, 100, 16);
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns, rows, toks;
    tseq b[4];
    for (int i = 0; i < 3; i++) {
        batch_init(&b[i], 3);
        assert_int_equal(colo_continuous_add(cb, &b[i].s), COLO_OK);
    }
    run_to_decoding(cb, b, 3, 10);
    colo_continuous_get_batch_share(cb, &rows, &toks);
    assert_int_equal(rows, 4);
    assert_int_equal(toks, 16);
    colo_continuous_set_batch_share(cb, 2, 5);
    batch_init(&b[3], 12);
    assert_int_equal(colo_continuous_add(cb, &b[3].s), COLO_OK);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 3); /* the two oldest decodes and 5 of the new prompt */
    assert_non_null(find(w, n, &b[0].s));
    assert_non_null(find(w, n, &b[1].s));
    assert_null(find(w, n, &b[2].s));
    assert_int_equal(find(w, n, &b[3].s)->n, 5);
    step_done(cb, w, n);
    colo_continuous_set_batch_share(cb, 0, 0); /* at least one of each */
    colo_continuous_get_batch_share(cb, &rows, &toks);
    assert_int_equal(rows, 1);
    assert_int_equal(toks, 1);
    colo_continuous_set_batch_share(cb, 1000, 1000); /* at most the config's */
    colo_continuous_get_batch_share(cb, &rows, &toks);
    assert_int_equal(rows, 4);
    assert_int_equal(toks, 16);
    for (int i = 0; i < 4; i++)
        colo_continuous_remove(cb, &b[i].s);
    assert_int_equal(p.n_free, 100);
    colo_continuous_destroy(cb);
}

/* The batch holds every KV block: an interactive prompt takes what it
 * needs from the batch's most recent lines, which wait and are recomputed;
 * a batch line waiting for blocks preempts no one. */
static void test_batch_yields_blocks(void **state)
{
    (void)state;
    pool p;
    colo_continuous *cb = make_batch(&p, 4, 4, 64, 6, 64); /* 24 token slots */
    colo_continuous_work w[4];
    colo_seq *stopped[4];
    int ns;
    tseq b[3], x, late;
    for (int i = 0; i < 3; i++) {
        batch_init(&b[i], 7); /* two blocks each: the whole cache */
        assert_int_equal(colo_continuous_add(cb, &b[i].s), COLO_OK);
    }
    run_to_decoding(cb, b, 3, 10);
    assert_int_equal(p.n_free, 0);
    batch_init(&late, 3);
    assert_int_equal(colo_continuous_add(cb, &late.s), COLO_OK);
    int n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(late.s.state, COLO_SEQ_WAITING); /* no block for it, nobody preempted */
    assert_int_equal(colo_continuous_n_preemptions(cb), 0);
    step_done(cb, w, n);
    seq_init(&x, 9, COLO_PRIO_HIGH); /* three blocks: two lines give theirs */
    assert_int_equal(colo_continuous_add(cb, &x.s), COLO_OK);
    n = colo_continuous_plan(cb, w, stopped, &ns);
    assert_int_equal(n, 1);
    assert_ptr_equal(w[0].seq, &x.s);
    assert_int_equal(w[0].n, 9);
    assert_int_equal(b[0].s.state, COLO_SEQ_RUNNING); /* the oldest line keeps running */
    assert_int_equal(b[1].s.state, COLO_SEQ_WAITING);
    assert_int_equal(b[2].s.state, COLO_SEQ_WAITING);
    step_done(cb, w, n);
    colo_continuous_remove(cb, &x.s);
    for (int i = 0; i < 3; i++)
        colo_continuous_remove(cb, &b[i].s);
    colo_continuous_remove(cb, &late.s);
    assert_int_equal(p.n_free, 6);
    colo_continuous_destroy(cb);
}

/* Random arrivals and lengths: invariants hold at every step and every
 * sequence finishes. */
static void test_random_invariants(void **state)
{
    (void)state;
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)strtoul(getenv("COLO_TEST_SEED"), NULL, 0) : 12345u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    enum { N = 40 };
    pool p;
    colo_continuous *cb = make(&p, 4, 6, 24, 30);
    static tseq seqs[N];
    int want[N], done = 0, added = 0;
    colo_continuous_work w[6];
    colo_seq *stopped[6];
    int ns;
    for (int step = 0; step < 5000 && done < N; step++) {
        if (added < N && rand() % 3 == 0) {
            seq_init(&seqs[added], 1 + rand() % 40, (colo_priority)(rand() % 3));
            seqs[added].s.batch = rand() % 4 == 0;
            want[added] = seqs[added].s.n_tokens + 1 + rand() % 30;
            assert_int_equal(colo_continuous_add(cb, &seqs[added].s), COLO_OK);
            added++;
        }
        int n = colo_continuous_plan(cb, w, stopped, &ns);
        int total = 0;
        for (int i = 0; i < n; i++) {
            assert_int_equal(w[i].start, w[i].seq->n_cached);
            assert_true(w[i].n >= 1);
            assert_true(w[i].seq->n_blocks * 4 >= w[i].start + w[i].n);
            total += w[i].n;
        }
        assert_true(total <= 24);
        assert_true(colo_continuous_n_running(cb) <= 6);
        done += ns;
        step_done(cb, w, n);
        for (int i = 0; i < n; i++) {
            tseq *t = (tseq *)w[i].seq;
            if (w[i].logits && t->s.n_tokens >= want[t - seqs]) {
                colo_continuous_remove(cb, &t->s);
                done++;
            }
        }
    }
    assert_int_equal(done, N);
    assert_int_equal(p.n_free, 30);
    colo_continuous_destroy(cb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_keeps_decodes_running),
        cmocka_unit_test(test_full_cache_waits_then_admits),
        cmocka_unit_test(test_preempts_lowest_priority_latest),
        cmocka_unit_test(test_alone_outgrowing_cache_stops),
        cmocka_unit_test(test_priority_admission_and_limits),
        cmocka_unit_test(test_batch_yields_place_and_prefill),
        cmocka_unit_test(test_batch_prefill_capped),
        cmocka_unit_test(test_batch_yields_blocks),
        cmocka_unit_test(test_batch_share),
        cmocka_unit_test(test_batch_floor),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
