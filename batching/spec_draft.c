#include "batching/spec_draft.h"

#include "batching/spec.h"
#include "models/sample/sampler.h"
#include "runtime/clock.h"

#include <stdlib.h>
#include <string.h>

/* Tokens of one catch-up pass (a new prompt, tokens accepted since). */
#define DRAFT_CHUNK 128

struct colo_spec_drafter {
    colo_spec_draft_src src;
    bool cpu;            /* the device records no graphs: passes need no stop hook */
    int n_vocab, max_seq_len;
    colo_device *dev;
    float *logits;       /* (1, n_vocab) a pass's last row, host memory of dev */
    int32_t tok[DRAFT_CHUNK], pos[DRAFT_CHUNK], seq[DRAFT_CHUNK];
    colo_llama *m;       /* borrowed between begin and end, else NULL */
    uint64_t epoch;      /* its KV cache's */
    /* blocks of finished sequences not yet given back, of the KV cache of
     * pending_epoch */
    int32_t *pending;
    int n_pending, cap_pending;
    uint64_t pending_epoch;
    uint64_t ns, passes;
    double token_ns; /* a drafted token, catching up included: a moving average */
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
    if (!(d->logits = colo_host_alloc(dev, (size_t)n_vocab * sizeof(float)))) {
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
    colo_host_free(d->dev, d->logits);
    free(d);
}

bool colo_spec_drafter_begin(colo_spec_drafter *d)
{
    uint64_t was = d->epoch;
    if (!(d->m = d->src.get(d->src.ud, false, &d->epoch)))
        return false;
    if (d->epoch != was)
        d->token_ns = 0; /* another model, or woken: measured again */
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

/* One pass of the draft over n tokens in d->tok/pos/seq, the last row's
 * logits into d->logits when logits. */
static colo_status pass(colo_spec_drafter *d, colo_spec_draft_seq *ds, colo_stream *s, colo_cosched_member *member,
                        int n, bool logits)
{
    int32_t last = n - 1;
    colo_llama_batch b = {.n_tokens = n, .tokens = d->tok, .pos = d->pos, .seq = d->seq, .n_seqs = 1,
                          .max_blocks = ds->max_blocks, .block_table = ds->blocks, .n_logits = logits ? 1 : 0,
                          .logit_rows = &last};
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

int colo_spec_draft_run(colo_spec_drafter *d, colo_spec_draft_seq *ds, colo_stream *s, colo_cosched_member *member,
                        const int32_t *tokens, int n_tokens, int k, int32_t *out)
{
    colo_llama *m = d->m;
    if (!m || n_tokens <= 0 || k <= 0)
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
    int keep = 0, upto = ds->n_kv < n_tokens - 1 ? ds->n_kv : n_tokens - 1;
    while (keep < upto && ds->tokens[keep] == tokens[keep])
        keep++;
    ds->n_kv = keep;
    if (member)
        colo_cosched_step_begin(member);
    int n_out = 0, n_new = n_tokens - keep;
    uint64_t t0 = colo_now_ns();
    for (int from = keep; from < n_tokens;) {
        int n = n_tokens - from < DRAFT_CHUNK ? n_tokens - from : DRAFT_CHUNK;
        for (int i = 0; i < n; i++) {
            d->tok[i] = tokens[from + i];
            d->pos[i] = from + i;
            d->seq[i] = 0;
        }
        if (pass(d, ds, s, member, n, from + n == n_tokens) != COLO_OK)
            goto out;
        memcpy(ds->tokens + from, tokens + from, (size_t)n * sizeof *tokens);
        from += n;
        ds->n_kv = from;
    }
    out[n_out++] = colo_argmax(d->logits, d->n_vocab);
    while (n_out < k) {
        d->tok[0] = out[n_out - 1];
        d->pos[0] = ds->n_kv;
        d->seq[0] = 0;
        if (pass(d, ds, s, member, 1, true) != COLO_OK)
            break;
        ds->tokens[ds->n_kv++] = out[n_out - 1];
        out[n_out++] = colo_argmax(d->logits, d->n_vocab);
    }
out:
    if (member)
        colo_cosched_step_end(member);
    /* what a drafted token costs after a step: the tokens accepted since
     * are computed first (1 or 2 of them, the latter a dearer pass), a
     * new prompt's catching up aside */
    if (n_out > 0 && n_new <= 2) {
        double per = (double)(colo_now_ns() - t0) / n_out;
        d->token_ns = d->token_ns > 0 ? 0.8 * d->token_ns + 0.2 * per : per;
    }
    return n_out;
}
