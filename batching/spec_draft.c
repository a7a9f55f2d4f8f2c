#include "batching/spec_draft.h"

#include "batching/spec.h"
#include "models/sample/sampler.h"
#include "runtime/clock.h"

#include <stdlib.h>
#include <string.h>

/* Tokens of one sequence's catch-up pass (a new prompt, tokens accepted
 * since). A batched pass holds the chunk of one sequence beside the
 * single tokens of up to COLO_SPEC_DRAFT_MAX_SEQS others. */
#define DRAFT_CHUNK 128
#define DRAFT_ROWS (DRAFT_CHUNK + COLO_SPEC_DRAFT_MAX_SEQS)
/* A catch-up pass of this many rows or more measures a prompt token's cost. */
#define CATCHUP_ROWS 16

struct colo_spec_drafter {
    colo_spec_draft_src src;
    bool cpu;            /* the device records no graphs: passes need no stop hook */
    int n_vocab, max_seq_len;
    colo_device *dev;
    float *logits;       /* (COLO_SPEC_DRAFT_MAX_SEQS, n_vocab) a pass's logits rows, host memory of dev */
    int32_t tok[DRAFT_ROWS], pos[DRAFT_ROWS], seq[DRAFT_ROWS];
    int32_t rows[COLO_SPEC_DRAFT_MAX_SEQS]; /* a pass's logits rows */
    int32_t *table;      /* (cap_table) the block tables of a batch's sequences, one row each */
    size_t cap_table;
    colo_llama *m;       /* borrowed between begin and end, else NULL */
    uint64_t epoch;      /* its KV cache's */
    /* blocks of finished sequences not yet given back, of the KV cache of
     * pending_epoch */
    int32_t *pending;
    int n_pending, cap_pending;
    uint64_t pending_epoch;
    uint64_t ns, passes;
    double token_ns; /* a drafted token, catching up included: a moving average */
    double catchup_ns; /* a token of a catch-up pass (a prompt's): a moving average */
};

colo_spec_drafter *colo_spec_drafter_create(const colo_spec_draft_src *src, colo_device *dev, int n_vocab,
                                            int max_seq_len)
{
    colo_spec_drafter *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->src = *src;
    d->dev = dev;
    d->cpu = colo_device_kind(dev) == COLO_BACKEND_CPU;
    d->n_vocab = n_vocab;
    d->max_seq_len = max_seq_len;
    if (!(d->logits = colo_host_alloc(dev, (size_t)COLO_SPEC_DRAFT_MAX_SEQS * n_vocab * sizeof(float)))) {
        free(d);
        return NULL;
    }
    return d;
}

/* The pending blocks go back to m, whose KV cache is of epoch; blocks of
 * another epoch are forgotten (their cache is gone). */
static void flush_pending(colo_spec_drafter *d, colo_llama *m, uint64_t epoch)
{
    if (d->n_pending && d->pending_epoch == epoch)
        colo_llama_kv_free(m, d->pending, d->n_pending);
    d->n_pending = 0;
}

void colo_spec_drafter_free(colo_spec_drafter *d)
{
    if (!d)
        return;
    uint64_t epoch;
    colo_llama *m = d->n_pending ? d->src.get(d->src.ud, true, &epoch) : NULL;
    if (m) {
        flush_pending(d, m, epoch);
        d->src.put(d->src.ud);
    }
    free(d->pending);
    free(d->table);
    colo_host_free(d->dev, d->logits);
    free(d);
}

bool colo_spec_drafter_begin(colo_spec_drafter *d)
{
    uint64_t was = d->epoch;
    if (!(d->m = d->src.get(d->src.ud, false, &d->epoch)))
        return false;
    if (d->epoch != was)
        d->token_ns = d->catchup_ns = 0; /* another model, or woken: measured again */
    flush_pending(d, d->m, d->epoch);
    return true;
}

void colo_spec_drafter_end(colo_spec_drafter *d)
{
    if (!d->m)
        return;
    d->m = NULL;
    d->src.put(d->src.ud);
}

uint64_t colo_spec_drafter_ns(const colo_spec_drafter *d) { return d->ns; }
uint64_t colo_spec_drafter_passes(const colo_spec_drafter *d) { return d->passes; }
double colo_spec_drafter_token_ns(const colo_spec_drafter *d) { return d->token_ns; }
double colo_spec_drafter_catchup_ns(const colo_spec_drafter *d) { return d->catchup_ns; }

/* How many of tokens[0..n_tokens) ds's K/V still holds: the longest
 * prefix it saw, short of the last token (computed again for its logits). */
static int kept_prefix(const colo_spec_draft_seq *ds, uint64_t epoch, const int32_t *tokens, int n_tokens)
{
    if (ds->epoch != epoch)
        return 0;
    int keep = 0, upto = ds->n_kv < n_tokens - 1 ? ds->n_kv : n_tokens - 1;
    while (keep < upto && ds->tokens[keep] == tokens[keep])
        keep++;
    return keep;
}

int colo_spec_drafter_pending(const colo_spec_drafter *d, const colo_spec_draft_seq *ds, const int32_t *tokens,
                              int n_tokens)
{
    return n_tokens > 0 ? n_tokens - kept_prefix(ds, d->epoch, tokens, n_tokens) : 0;
}

void colo_spec_draft_seq_release(colo_spec_drafter *d, colo_spec_draft_seq *ds)
{
    /* Epochs grow (a later draft model or a later wake has a larger one):
     * blocks of an older cache than the pending ones' are gone. */
    if (ds->n_blocks && ds->epoch >= d->pending_epoch) {
        if (ds->epoch > d->pending_epoch)
            d->n_pending = 0;
        d->pending_epoch = ds->epoch;
        int need = d->n_pending + ds->n_blocks;
        if (need > d->cap_pending) {
            int32_t *p = realloc(d->pending, (size_t)need * 2 * sizeof *p);
            if (p) {
                d->pending = p;
                d->cap_pending = need * 2;
            }
        }
        /* (out of memory: the blocks stay with the draft model until it sleeps) */
        if (need <= d->cap_pending) {
            memcpy(d->pending + d->n_pending, ds->blocks, (size_t)ds->n_blocks * sizeof *ds->blocks);
            d->n_pending = need;
        }
    }
    free(ds->blocks);
    free(ds->tokens);
    memset(ds, 0, sizeof *ds);
    if (!d->n_pending)
        return;
    if (d->m) {
        flush_pending(d, d->m, d->epoch);
        return;
    }
    uint64_t epoch;
    colo_llama *m = d->src.get(d->src.ud, false, &epoch);
    if (m) {
        flush_pending(d, m, epoch);
        d->src.put(d->src.ud);
    }
}

/* A device that records graphs records none of a pass that has a stop
 * hook: drafts are another model's passes on the target's stream. */
static bool never_stop(void *ud)
{
    (void)ud;
    return false;
}

/* One pass of the draft over n tokens in d->tok/pos/seq of n_seqs
 * sequences (rows of d->table, max_blocks each), the logits of the
 * n_logits rows in d->rows into d->logits. */
static colo_status pass(colo_spec_drafter *d, colo_stream *s, colo_cosched_member *member, int n_seqs,
                        int max_blocks, int n, int n_logits)
{
    colo_llama_batch b = {.n_tokens = n, .tokens = d->tok, .pos = d->pos, .seq = d->seq, .n_seqs = n_seqs,
                          .max_blocks = max_blocks, .block_table = d->table, .n_logits = n_logits,
                          .logit_rows = d->rows};
    if (!d->cpu)
        b.stop = never_stop;
    uint64_t t0 = colo_now_ns();
    colo_status st = colo_llama_forward(d->m, s, &b, d->logits, member);
    d->ns += colo_now_ns() - t0;
    d->passes++;
    return st;
}

/* Room in ds for a context of limit tokens in blocks of bs: false when
 * out of memory. */
static bool seq_room(colo_spec_draft_seq *ds, int limit, int bs)
{
    int mb = (limit + bs - 1) / bs;
    if (ds->max_blocks < mb) {
        int32_t *b = calloc((size_t)mb, sizeof *b);
        if (!b)
            return false;
        if (ds->n_blocks)
            memcpy(b, ds->blocks, (size_t)ds->n_blocks * sizeof *b);
        free(ds->blocks);
        ds->blocks = b;
        ds->max_blocks = mb;
    }
    if (ds->cap < limit) {
        int32_t *t = realloc(ds->tokens, (size_t)limit * sizeof *t);
        if (!t)
            return false;
        ds->tokens = t;
        ds->cap = limit;
    }
    return true;
}

/* r's sequence ready to draft: its blocks for the tokens and the draft
 * (allocated from the draft model), its K/V rolled back to what the
 * sequence still has. Returns how many tokens it may draft (0: none). */
static int prepare(colo_spec_drafter *d, const colo_spec_draft_req *r)
{
    colo_llama *m = d->m;
    colo_spec_draft_seq *ds = r->ds;
    int k = r->k, n_tokens = r->n_tokens;
    if (n_tokens <= 0 || k <= 0)
        return 0;
    if (k > COLO_SPEC_MAX_TOKENS)
        k = COLO_SPEC_MAX_TOKENS;
    const colo_llama_hparams *hp = colo_llama_hparams_get(m);
    int bs = colo_llama_kv_block_size(m);
    if (bs <= 0 || hp->n_vocab != d->n_vocab)
        return 0;
    if (ds->epoch != d->epoch) { /* another cache: what it held is gone */
        ds->n_blocks = 0;
        ds->n_kv = 0;
        ds->epoch = d->epoch;
    }
    int limit = d->max_seq_len + COLO_SPEC_MAX_TOKENS;
    if (limit > hp->n_ctx)
        limit = hp->n_ctx;
    if (!seq_room(ds, limit, bs))
        return 0;
    /* positions 0 .. n_tokens + k - 2 (the last drafted token is not computed) */
    int avail = (ds->n_blocks + colo_llama_kv_n_free(m)) * bs;
    if (avail > ds->max_blocks * bs)
        avail = ds->max_blocks * bs;
    if (avail > limit)
        avail = limit;
    if (k > avail - n_tokens + 1)
        k = avail - n_tokens + 1;
    if (k <= 0)
        return 0;
    int need = (n_tokens + k - 1 + bs - 1) / bs;
    if (need > ds->n_blocks) {
        if (colo_llama_kv_alloc(m, need - ds->n_blocks, ds->blocks + ds->n_blocks) != COLO_OK)
            return 0;
        ds->n_blocks = need;
    }
    /* roll back to what the sequence still has; the last token is computed
     * again for its logits */
    ds->n_kv = kept_prefix(ds, d->epoch, r->tokens, n_tokens);
    return k;
}

/* A sequence of a batch while it drafts. */
typedef struct draft_slot {
    colo_spec_draft_req *r;
    int k;      /* tokens it drafts */
    int chunk;  /* rows in this pass; 0: none */
    int row;    /* its logits row in this pass; -1: none */
    int n_new;  /* tokens it computed before drafting */
} draft_slot;

/* Adds the chunk of slot i (sequence i of the pass) from its next token
 * to the pass of *n rows and *n_logits logits rows. */
static void add_chunk(colo_spec_drafter *d, draft_slot *sl, int i, int *n, int *n_logits)
{
    colo_spec_draft_seq *ds = sl->r->ds;
    int left = sl->r->n_tokens - ds->n_kv;
    sl->chunk = left < DRAFT_CHUNK ? left : DRAFT_CHUNK;
    for (int j = 0; j < sl->chunk; j++, (*n)++) {
        d->tok[*n] = sl->r->tokens[ds->n_kv + j];
        d->pos[*n] = ds->n_kv + j;
        d->seq[*n] = i;
    }
    sl->row = -1;
    if (sl->chunk == left) { /* its last: the logits of its last token */
        sl->row = *n_logits;
        d->rows[(*n_logits)++] = *n - 1;
    }
}

/* Drafts for the ns sequences of sl (at most COLO_SPEC_DRAFT_MAX_SEQS,
 * each prepared) in shared passes: first what each has not computed, in
 * the chunks it would have alone (a sequence's single last token first
 * in the pass, as a decode row, the longer chunks after it as a
 * prefill's rows, one of them per pass), then one token of each per pass
 * until each has its k. Each row's numbers depend on nothing else in the
 * pass (docs/ARCHITECTURE.md, "Precision"), so every sequence drafts
 * what it drafts alone. */
static void run_group(colo_spec_drafter *d, draft_slot *sl, int ns, colo_stream *s, colo_cosched_member *member)
{
    int max_blocks = 0;
    for (int i = 0; i < ns; i++)
        if (sl[i].r->ds->max_blocks > max_blocks)
            max_blocks = sl[i].r->ds->max_blocks;
    size_t cells = (size_t)ns * (size_t)max_blocks;
    if (cells > d->cap_table) {
        int32_t *t = realloc(d->table, cells * sizeof *t);
        if (!t)
            return; /* (drafts nothing: the target decodes plainly) */
        d->table = t;
        d->cap_table = cells;
    }
    for (int i = 0; i < ns; i++) {
        colo_spec_draft_seq *ds = sl[i].r->ds;
        int32_t *row = d->table + (size_t)i * max_blocks;
        memcpy(row, ds->blocks, (size_t)ds->n_blocks * sizeof *row);
        memset(row + ds->n_blocks, 0, (size_t)(max_blocks - ds->n_blocks) * sizeof *row);
        sl[i].n_new = sl[i].r->n_tokens - ds->n_kv;
    }
    int V = d->n_vocab;
    for (;;) { /* catching up */
        int n = 0, n_logits = 0;
        for (int i = 0; i < ns; i++) {
            sl[i].chunk = 0;
            if (sl[i].r->n_tokens - sl[i].r->ds->n_kv == 1)
                add_chunk(d, &sl[i], i, &n, &n_logits);
        }
        for (int i = 0; i < ns; i++) {
            int left = sl[i].r->n_tokens - sl[i].r->ds->n_kv;
            if (left > 1 && n + (left < DRAFT_CHUNK ? left : DRAFT_CHUNK) <= DRAFT_ROWS)
                add_chunk(d, &sl[i], i, &n, &n_logits);
        }
        if (!n)
            break;
        uint64_t t0 = colo_now_ns();
        if (pass(d, s, member, ns, max_blocks, n, n_logits) != COLO_OK)
            return; /* (those caught up keep their first token, as drafted) */
        if (n >= CATCHUP_ROWS) { /* a prompt's chunk: what a token of one costs */
            double per = (double)(colo_now_ns() - t0) / n;
            d->catchup_ns = d->catchup_ns > 0 ? 0.8 * d->catchup_ns + 0.2 * per : per;
        }
        for (int i = 0; i < ns; i++) {
            colo_spec_draft_seq *ds = sl[i].r->ds;
            if (!sl[i].chunk)
                continue;
            memcpy(ds->tokens + ds->n_kv, sl[i].r->tokens + ds->n_kv, (size_t)sl[i].chunk * sizeof *ds->tokens);
            ds->n_kv += sl[i].chunk;
            if (sl[i].row >= 0)
                sl[i].r->out[sl[i].r->n_out++] = colo_argmax(d->logits + (size_t)sl[i].row * V, V);
        }
    }
    for (;;) { /* one token of each per pass */
        int n = 0;
        for (int i = 0; i < ns; i++) {
            colo_spec_draft_req *r = sl[i].r;
            sl[i].row = -1;
            if (r->n_out < 1 || r->n_out >= sl[i].k)
                continue;
            d->tok[n] = r->out[r->n_out - 1];
            d->pos[n] = r->ds->n_kv;
            d->seq[n] = i;
            d->rows[n] = n;
            sl[i].row = n++;
        }
        if (!n || pass(d, s, member, ns, max_blocks, n, n) != COLO_OK)
            return;
        for (int i = 0; i < ns; i++) {
            colo_spec_draft_req *r = sl[i].r;
            if (sl[i].row < 0)
                continue;
            r->ds->tokens[r->ds->n_kv++] = r->out[r->n_out - 1];
            r->out[r->n_out++] = colo_argmax(d->logits + (size_t)sl[i].row * V, V);
        }
    }
}

void colo_spec_draft_run_batch(colo_spec_drafter *d, colo_spec_draft_req *reqs, int n, colo_stream *s,
                               colo_cosched_member *member)
{
    for (int i = 0; i < n; i++)
        reqs[i].n_out = 0;
    if (!d->m)
        return;
    for (int at = 0; at < n;) {
        draft_slot sl[COLO_SPEC_DRAFT_MAX_SEQS];
        int ns = 0;
        for (; at < n && ns < COLO_SPEC_DRAFT_MAX_SEQS; at++) {
            int k = prepare(d, &reqs[at]);
            if (k > 0)
                sl[ns++] = (draft_slot){.r = &reqs[at], .k = k};
        }
        if (!ns)
            continue;
        if (member)
            colo_cosched_step_begin(member);
        uint64_t t0 = colo_now_ns();
        run_group(d, sl, ns, s, member);
        if (member)
            colo_cosched_step_end(member);
        /* what a drafted token costs after a step: the tokens accepted
         * since are computed first (1 or 2 of them, the latter a dearer
         * pass), a new prompt's catching up aside; the passes' time shared
         * by the tokens of every sequence in them */
        int total = 0, caught_up = 1;
        for (int i = 0; i < ns; i++) {
            total += sl[i].r->n_out;
            caught_up &= sl[i].n_new <= 2;
        }
        if (total > 0 && caught_up) {
            double per = (double)(colo_now_ns() - t0) / total;
            d->token_ns = d->token_ns > 0 ? 0.8 * d->token_ns + 0.2 * per : per;
        }
    }
}

int colo_spec_draft_run(colo_spec_drafter *d, colo_spec_draft_seq *ds, colo_stream *s, colo_cosched_member *member,
                        const int32_t *tokens, int n_tokens, int k, int32_t *out)
{
    colo_spec_draft_req r = {.ds = ds, .tokens = tokens, .n_tokens = n_tokens, .k = k, .out = out};
    colo_spec_draft_run_batch(d, &r, 1, s, member);
    return r.n_out;
}
