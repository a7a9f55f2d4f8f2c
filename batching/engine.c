#include "batching/engine.h"

#include "batching/queue.h"
#include "batching/spec.h"
#include "batching/spec_draft.h"
#include "batching/spec_suffix.h"
#include "models/sample/json_schema.h"
#include "models/arch/lora.h"
#include "models/cache/prefix_cache.h"
#include "models/sample/sampler.h"
#include "models/tokenizer/unicode.h"
#include "runtime/fault.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct colo_engine_seq {
    colo_seq cb;              /* planner state; cb.owner = this */
    colo_engine *e;
    int n_prompt;
    colo_engine_params p;
    char *stop_buf[COLO_ENGINE_MAX_STOP];
    size_t max_stop;
    colo_sampler sampler;
    colo_engine_callbacks cbs;
    char *text;
    size_t text_len, text_cap, emitted;
    int32_t *gen;             /* generated ids */
    int n_gen;
    colo_sampler_bias *bias;  /* a copy of p.shape.bias */
    colo_schema *grammar;     /* p.json_schema or p.json_object: what the output must be */
    colo_schema_state *json;  /* the output so far, against grammar */
    float *lp;                /* per generated token, when p.logprobs >= 0 */
    int32_t *top_ids;         /* (max_tokens, p.logprobs) */
    float *top_lps;
    uint64_t added_ns, first_step_ns, first_token_ns;
    colo_engine_seq *prev, *next; /* engine's list of live sequences */
    /* n choices of one prompt: the first (the leader) computes the prompt;
     * the others wait, outside the planner, until its logits exist, then
     * fork from it (colo_continuous_fork) and sample from the same logits */
    colo_engine_seq *leader;      /* a waiting follower's leader, else NULL */
    colo_engine_seq *followers;   /* a leader's waiting followers, in choice order */
    colo_engine_seq *next_follower;
    int32_t *draft;               /* (cfg.spec_tokens) this step's drafted tokens, cb.n_draft of them */
    colo_spec_accept accept;      /* how its drafts fared */
    int draft_ngram;              /* the length of the match its draft followed; COLO_SPEC_FROM_SUFFIX */
    bool draft_split;             /* that match was split (colo_spec_match) */
    int lookup_from, lookup_at;   /* its last prompt lookup's draft start, and its tokens then (from -1: none) */
    char tenant[COLO_SPEC_SUFFIX_TENANT_LEN]; /* p.tenant */
    bool tenant_ok;               /* p.tenant fit in tenant: its output may be stored */
    uint32_t suffix_tag;          /* its tenant's in the suffix cache, 0: drafts nothing from it */
    colo_spec_draft_seq dseq;     /* its K/V in the draft model (cfg.draft) */
};

struct colo_engine {
    colo_llama *m;
    colo_stream *s;
    colo_engine_config cfg;
    colo_schema_options schema; /* cfg's, or the defaults */
    colo_continuous *planner;
    int max_blocks; /* per sequence */
    bool kv_owned;  /* this engine made the model's KV cache */
    int32_t stop_ids[4];
    int n_stop_ids;
    colo_engine_seq *live;
    /* step scratch */
    colo_continuous_work *work;
    colo_seq **stopped;
    int32_t *tok, *pos, *seqi, *table, *rows;
    int32_t *seq_adapter; /* (max_running) each sequence's adapter slot in the step, -1 none */
    int max_logits;       /* logits rows per step: max_running, and the drafted tokens' */
    int max_draft;        /* drafted tokens per step */
    colo_spec_costs costs; /* decode steps' times by rows */
    colo_spec_suffix *suffix; /* the model's recent outputs by tenant (cfg.spec_suffix_bytes), or NULL */
    colo_spec_drafter *drafter; /* the draft model's side (cfg.draft), or NULL */
    /* (max_running) the step's drafting sequences: their drafts' lengths
     * available, acceptance rates, and lengths planned */
    colo_engine_seq **spec_seq;
    int *spec_avail, *spec_len;
    float *spec_rate;
    double *spec_tok_ns;  /* (max_running) what a drafted token costs each: the draft model's pass, or 0 */
    double *spec_once_ns; /* (max_running) the step's share of a draft model's catching up, or 0 */
    colo_spec_draft_req *spec_req; /* (max_running) the step's drafts with the draft model, run together */
    float *logits;        /* (max_logits, V) */
    /* constrained decoding: every token's bytes (built on first use) and a scratch row */
    char **tok_bytes;
    uint16_t *tok_len;
    bool *tok_special;
    float *masked;
    colo_schema_vocab *vocab; /* the same, as the grammar's mask reads it */
    uint8_t *allowed;
    uint64_t mask_ns, mask_count;
    colo_engine_step_stats st; /* colo_engine_get_step_stats */
};

static int kv_n_free(void *ctx) { return colo_llama_kv_n_free(ctx); }
static colo_status kv_alloc(void *ctx, int n, int32_t *out) { return colo_llama_kv_alloc(ctx, n, out); }
static void kv_free(void *ctx, const int32_t *ids, int n) { colo_llama_kv_free(ctx, ids, n); }
static void kv_share(void *ctx, const int32_t *ids, int n) { colo_kv_cache_share(colo_llama_kv_cache(ctx), ids, n); }
static int kv_match(void *ctx, uint64_t root, const int32_t *tokens, int n_tokens, int max_blocks, int32_t *out,
                    uint64_t *last_key)
{
    return colo_kv_cache_prefix_match_from(colo_llama_kv_cache(ctx), root ? root : COLO_PREFIX_ROOT, tokens, n_tokens,
                                           max_blocks, out, last_key);
}
static uint64_t kv_publish(void *ctx, int32_t id, uint64_t parent, const int32_t *tokens)
{
    return colo_kv_cache_prefix_publish(colo_llama_kv_cache(ctx), id, parent, tokens);
}

/* e->cfg's speculative decoding: spec_tokens within bounds, the suffix
 * cache and the draft model's side; false with a message when out of
 * memory. */
static bool spec_create(colo_engine *e, int n_vocab, char *err, size_t errlen)
{
    colo_engine_config *c = &e->cfg;
    const colo_spec_draft_src *draft = c->draft;
    c->draft = NULL; /* (copied into the drafter) */
    if (c->spec_tokens < 0)
        c->spec_tokens = 0;
    if (c->spec_tokens > COLO_SPEC_MAX_TOKENS)
        c->spec_tokens = COLO_SPEC_MAX_TOKENS;
    if (c->spec_tokens > 0 && c->spec_suffix_bytes > 0 &&
        !(e->suffix = colo_spec_suffix_create(c->spec_suffix_bytes))) {
        colo_set_err(err, errlen, "out of memory for the suffix cache (%zu bytes)", c->spec_suffix_bytes);
        return false;
    }
    if (c->spec_tokens > 0 && draft &&
        !(e->drafter = colo_spec_drafter_create(draft, colo_stream_device(e->s), n_vocab, c->max_seq_len))) {
        colo_set_err(err, errlen, "out of memory for drafting");
        return false;
    }
    return true;
}

colo_engine *colo_engine_create(colo_llama *m, colo_stream *s, const colo_engine_config *cfg, char *err,
                                        size_t errlen)
{
    const colo_llama_hparams *hp = colo_llama_hparams_get(m);
    colo_engine *e = calloc(1, sizeof *e);
    if (!e) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    e->m = m;
    e->s = s;
    e->cfg = *cfg;
    e->schema = cfg->schema ? *cfg->schema : COLO_SCHEMA_OPTIONS_DEFAULT;
    e->cfg.schema = NULL;
    colo_engine_config *c = &e->cfg;
    if (c->max_running <= 0)
        c->max_running = 16;
    if (c->max_step_tokens < c->max_running)
        c->max_step_tokens = c->max_running > 256 ? c->max_running : 256;
    if (c->block_size <= 0)
        c->block_size = 16;
    if (!colo_dtype_is_kv(c->kv_type))
        c->kv_type = COLO_F16;
    if (c->max_seq_len <= 0 || c->max_seq_len > hp->n_ctx)
        c->max_seq_len = hp->n_ctx;
    colo_llama_set_seq_len(m, c->max_seq_len);
    e->max_blocks = (c->max_seq_len + c->block_size - 1) / c->block_size;
    int R = c->max_running, T = c->max_step_tokens;
    if (!spec_create(e, hp->n_vocab, err, errlen))
        goto out_free;
    /* drafts are verified in steps of fewer than COLO_SPEC_MAX_DECODES decodes */
    int n_drafting = R < COLO_SPEC_MAX_DECODES - 1 ? R : COLO_SPEC_MAX_DECODES - 1;
    int max_draft = n_drafting * c->spec_tokens < T ? n_drafting * c->spec_tokens : T;
    e->max_logits = R + max_draft;
    e->max_draft = max_draft;
    e->work = calloc((size_t)R, sizeof *e->work);
    e->stopped = calloc((size_t)R, sizeof *e->stopped);
    e->tok = malloc((size_t)T * 4);
    e->pos = malloc((size_t)T * 4);
    e->seqi = malloc((size_t)T * 4);
    e->seq_adapter = malloc((size_t)R * 4);
    e->rows = malloc((size_t)e->max_logits * 4);
    e->spec_seq = calloc((size_t)R, sizeof *e->spec_seq);
    e->spec_avail = calloc((size_t)R, sizeof *e->spec_avail);
    e->spec_len = calloc((size_t)R, sizeof *e->spec_len);
    e->spec_rate = calloc((size_t)R, sizeof *e->spec_rate);
    e->spec_tok_ns = calloc((size_t)R, sizeof *e->spec_tok_ns);
    e->spec_once_ns = calloc((size_t)R, sizeof *e->spec_once_ns);
    e->spec_req = calloc((size_t)R, sizeof *e->spec_req);
    e->table = malloc((size_t)R * e->max_blocks * 4);
    /* the forward copies logits here every step: page-locked on CUDA */
    e->logits = colo_host_alloc(colo_stream_device(s), (size_t)e->max_logits * hp->n_vocab * sizeof(float));
    if (!e->work || !e->stopped || !e->tok || !e->pos || !e->seqi || !e->seq_adapter || !e->rows || !e->table ||
        !e->logits || !e->spec_seq || !e->spec_avail || !e->spec_len || !e->spec_rate ||
        !e->spec_tok_ns || !e->spec_once_ns || !e->spec_req) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    if (colo_llama_reserve(m, T, e->max_logits, R, e->max_blocks) != COLO_OK) {
        colo_set_err(err, errlen, "activations for %d tokens per step do not fit in the memory arena", T);
        goto out_free;
    }
    int n_blocks = c->n_blocks;
    if (n_blocks <= 0) {
        /* Whatever the arena has left, less a little for alignment. */
        size_t bb = colo_llama_kv_block_bytes(hp, c->block_size, c->kv_type);
        colo_arena_stats st;
        colo_arena_get_stats(colo_llama_arena(m), &st);
        size_t avail = st.limit_bytes - st.used_bytes;
        size_t slack = (size_t)hp->n_layer * 2 * 512;
        n_blocks = avail > slack ? (int)((avail - slack) / bb) : 0;
        if (n_blocks > (1 << 22))
            n_blocks = 1 << 22;
    }
    if (n_blocks < 1) {
        colo_set_err(err, errlen, "no memory left in the arena for the KV cache");
        goto out_free;
    }
    char kerr[256];
    if (colo_llama_kv_init(m, n_blocks, c->block_size, c->kv_type, kerr, sizeof kerr) != COLO_OK) {
        colo_set_err(err, errlen, "%s", kerr);
        goto out_free;
    }
    e->kv_owned = true;
    colo_continuous_config pc = {.block_size = c->block_size, .max_running = R, .max_step_tokens = T,
                         .total_blocks = n_blocks, .max_draft_tokens = max_draft};
    colo_block_allocator al = {m, kv_n_free, kv_alloc, kv_free, .share = kv_share};
    if (!c->no_prefix_cache) {
        if (colo_kv_cache_prefix_enable(colo_llama_kv_cache(m)) != COLO_OK) {
            colo_set_err(err, errlen, "out of memory for the prefix cache's index");
            goto out_free;
        }
        al.match = kv_match;
        al.publish = kv_publish;
    }
    if (!(e->planner = colo_continuous_create(&pc, &al))) {
        colo_set_err(err, errlen, "invalid batching configuration");
        goto out_free;
    }
    int32_t eos = colo_tokenizer_eos(colo_llama_tokenizer(m));
    const int32_t *ids = c->n_stop_ids > 0 ? c->stop_ids : &eos;
    int n_ids = c->n_stop_ids > 0 ? c->n_stop_ids : 1;
    for (int i = 0; i < n_ids && i < 4; i++) {
        bool dup = false;
        for (int j = 0; j < e->n_stop_ids; j++)
            dup |= e->stop_ids[j] == ids[i];
        if (ids[i] >= 0 && !dup)
            e->stop_ids[e->n_stop_ids++] = ids[i];
    }
    return e;

out_free:
    colo_engine_free(e);
    return NULL;
}

static void seq_free(colo_engine_seq *q)
{
    for (int i = 0; i < q->p.n_stop; i++)
        free(q->stop_buf[i]);
    colo_sampler_free(&q->sampler);
    free(q->bias);
    free(q->json);
    colo_schema_free(q->grammar);
    free(q->lp);
    free(q->top_ids);
    free(q->top_lps);
    free(q->cb.tokens);
    free(q->cb.blocks);
    free(q->text);
    free(q->gen);
    free(q->draft);
    if (q->e && q->e->drafter)
        colo_spec_draft_seq_release(q->e->drafter, &q->dseq);
    free(q);
}

static void unlink_seq(colo_engine *e, colo_engine_seq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        e->live = q->next;
    if (q->next)
        q->next->prev = q->prev;
}

/* Emits final text: complete UTF-8, held back by max_stop - 1 bytes unless done. */
static void emit(colo_engine_seq *q, int32_t token, bool done)
{
    size_t end = q->text_len;
    if (!done) {
        if (q->max_stop > 1)
            end = end > q->max_stop - 1 ? end - (q->max_stop - 1) : 0;
        end = colo_utf8_complete_prefix(q->text, end);
    }
    if (end < q->emitted)
        end = q->emitted;
    if (q->cbs.on_token && (end > q->emitted || token >= 0))
        q->cbs.on_token(q->cbs.ud, token, q->text + q->emitted, end - q->emitted);
    q->emitted = end;
}

static void finish_at(colo_engine *e, colo_engine_seq *q, colo_status st, const char *reason, const char *error,
                      int stop_index);

static void finish(colo_engine *e, colo_engine_seq *q, colo_status st, const char *reason, const char *error)
{
    finish_at(e, q, st, reason, error, -1);
}

/* q leaves its group of choices: a waiting follower leaves its leader's
 * list; a leader whose followers still wait hands the prompt to the first
 * of them, which is computed in its place. */
static void leave_group(colo_engine *e, colo_engine_seq *q)
{
    if (q->leader) {
        for (colo_engine_seq **pp = &q->leader->followers; *pp; pp = &(*pp)->next_follower)
            if (*pp == q) {
                *pp = q->next_follower;
                break;
            }
        q->leader = NULL;
        return;
    }
    colo_engine_seq *f = q->followers;
    q->followers = NULL;
    if (!f)
        return;
    f->leader = NULL;
    f->followers = f->next_follower;
    f->next_follower = NULL;
    for (colo_engine_seq *o = f->followers; o; o = o->next_follower)
        o->leader = f;
    colo_continuous_add(e->planner, &f->cb); /* (it fit when the leader was added) */
}

static void finish_at(colo_engine *e, colo_engine_seq *q, colo_status st, const char *reason, const char *error,
                      int stop_index)
{
    leave_group(e, q);
    colo_continuous_remove(e->planner, &q->cb);
    unlink_seq(e, q);
    if (!colo_continuous_n_running(e->planner) && !colo_continuous_n_waiting(e->planner) && colo_llama_kv_cache(e->m))
        colo_kv_cache_prefix_trim(colo_llama_kv_cache(e->m)); /* idle: no borrowed memory kept */
    if (st == COLO_OK) {
        /* A length cut may split a character: the text ends on whole UTF-8. */
        size_t whole = colo_utf8_complete_prefix(q->text, q->text_len);
        if (whole >= q->emitted && q->text) {
            q->text_len = whole;
            q->text[whole] = 0;
        }
        if (q->emitted < q->text_len)
            emit(q, -1, true);
    }
    colo_engine_outcome out = {.status = st, .error = error, .finish_reason = st == COLO_OK ? reason : NULL,
                            .stop_index = stop_index, .logprobs = q->lp, .top_ids = q->top_ids,
                            .top_logprobs = q->top_lps, .tokens = q->gen, .n_tokens = q->n_gen, .n_prompt = q->n_prompt,
                            .n_cached_prompt = q->cb.n_hit, .text = q->text,
                            .text_len = q->text_len, .added_ns = q->added_ns, .first_step_ns = q->first_step_ns,
                            .first_token_ns = q->first_token_ns, .done_ns = colo_now_ns(),
                            .n_preempted = q->cb.n_preempted};
    if (q->cbs.on_done)
        q->cbs.on_done(q->cbs.ud, &out);
    if (st == COLO_OK && e->suffix && q->n_gen > 0 && q->tenant_ok)
        colo_spec_suffix_add(e->suffix, q->tenant, q->gen, q->n_gen);
    seq_free(q);
}

static void free_token_bytes(colo_engine *e)
{
    if (e->tok_bytes)
        for (int i = 0; i < colo_llama_hparams_get(e->m)->n_vocab; i++)
            free(e->tok_bytes[i]);
    free(e->tok_bytes);
    free(e->tok_len);
    free(e->tok_special);
    free(e->masked);
    colo_schema_vocab_free(e->vocab);
    free(e->allowed);
    e->vocab = NULL, e->allowed = NULL;
}

void colo_engine_free(colo_engine *e)
{
    if (!e)
        return;
    while (e->live)
        finish(e, e->live, COLO_ECANCELED, NULL, "canceled");
    colo_continuous_destroy(e->planner);
    if (e->kv_owned)
        colo_llama_kv_fini(e->m);
    free(e->work);
    free(e->stopped);
    free(e->tok);
    free(e->pos);
    free(e->seqi);
    free(e->seq_adapter);
    free(e->rows);
    free(e->spec_seq);
    free(e->spec_avail);
    free(e->spec_len);
    free(e->spec_rate);
    free(e->spec_tok_ns);
    free(e->spec_once_ns);
    free(e->spec_req);
    colo_spec_suffix_free(e->suffix);
    colo_spec_drafter_free(e->drafter);
    free(e->table);
    colo_host_free(colo_stream_device(e->s), e->logits);
    free_token_bytes(e);
    free(e);
}

/* Every token's bytes, once: what constrained decoding tries against the
 * grammar. false when out of memory. */
static bool token_bytes(colo_engine *e)
{
    if (e->tok_bytes)
        return true;
    const colo_tokenizer *t = colo_llama_tokenizer(e->m);
    int V = colo_llama_hparams_get(e->m)->n_vocab;
    e->tok_bytes = calloc((size_t)V, sizeof *e->tok_bytes);
    e->tok_len = calloc((size_t)V, sizeof *e->tok_len);
    e->tok_special = calloc((size_t)V, sizeof *e->tok_special);
    e->masked = malloc((size_t)V * sizeof *e->masked);
    if (!e->tok_bytes || !e->tok_len || !e->tok_special || !e->masked) {
        free_token_bytes(e);
        e->tok_bytes = NULL, e->tok_len = NULL, e->tok_special = NULL, e->masked = NULL;
        return false;
    }
    for (int i = 0; i < V; i++) {
        char buf[512];
        size_t n = 0;
        if (colo_tokenizer_decode(t, i, buf, sizeof buf, &n) != COLO_OK)
            n = 0;
        e->tok_special[i] = colo_tokenizer_is_special(t, i);
        e->tok_len[i] = (uint16_t)n;
        if (n && !(e->tok_bytes[i] = malloc(n))) {
            free_token_bytes(e);
            e->tok_bytes = NULL, e->tok_len = NULL, e->tok_special = NULL, e->masked = NULL;
            return false;
        }
        if (n)
            memcpy(e->tok_bytes[i], buf, n);
    }
    e->vocab = colo_schema_vocab_create((const char *const *)e->tok_bytes, e->tok_len, e->tok_special, V);
    e->allowed = malloc((size_t)V);
    if (!e->vocab || !e->allowed) {
        free_token_bytes(e);
        e->tok_bytes = NULL, e->tok_len = NULL, e->tok_special = NULL, e->masked = NULL;
        return false;
    }
    return true;
}

static bool is_stop(const colo_engine *e, const colo_engine_seq *q, int tok)
{
    for (int i = 0; i < e->n_stop_ids; i++)
        if (tok == e->stop_ids[i])
            return true;
    for (int i = 0; i < q->p.n_stop_ids && i < COLO_ENGINE_MAX_STOP; i++)
        if (tok == q->p.stop_ids[i])
            return true;
    return false;
}

/* The logits of row with every token that cannot continue q's JSON masked
 * (-inf): a token must keep the output a valid prefix; a stop token is
 * allowed only once the object is complete, and then only a stop token. */
static const float *json_mask(colo_engine *e, colo_engine_seq *q, const float *row, int V)
{
    bool done = colo_schema_done(q->json);
    int allowed = done ? 0 : colo_schema_mask(q->grammar, q->json, e->vocab, e->allowed);
    for (int i = 0; i < V; i++) {
        bool ok = is_stop(e, q, i) ? done : !done && e->allowed[i];
        e->masked[i] = ok ? row[i] : -INFINITY;
        allowed += ok && done;
    }
    return allowed ? e->masked : row; /* (nothing allowed cannot happen with a byte-level vocabulary) */
}

/* A sequence of the prompt, not yet in the planner; NULL with a message. */
static colo_engine_seq *seq_create(colo_engine *e, const int32_t *prompt, int n_prompt, const colo_engine_params *p,
                                const colo_engine_callbacks *cb, uint64_t seed, char *err, size_t errlen)
{
    int cap = e->cfg.max_seq_len;
    /* (an injected allocation fault stands for a failed host allocation) */
    colo_engine_seq *q = colo_fault_hit(COLO_FAULT_ALLOC, colo_stream_label(e->s)) ? NULL : calloc(1, sizeof *q);
    if (!q)
        goto out_oom;
    q->e = e;
    q->p = *p;
    q->cbs = *cb;
    q->n_prompt = n_prompt;
    q->cb.owner = q;
    q->cb.priority = p->priority;
    q->cb.batch = p->batch;
    q->cb.cap = cap;
    q->cb.max_blocks = e->max_blocks;
    q->cb.state = COLO_SEQ_DONE; /* in no list of the planner yet */
    if (p->has_adapter) {
        colo_lora_info ai;
        if (colo_llama_lora_get(e->m, p->adapter_slot, &ai) != COLO_OK) {
            colo_set_err(err, errlen, "no adapter is loaded in slot %d", p->adapter_slot);
            colo_sampler_init(&q->sampler, 0, 1, 0, 0);
            seq_free(q);
            return NULL;
        }
        int32_t uid[2] = {(int32_t)(ai.uid & 0xffffffffu), (int32_t)(ai.uid >> 32)};
        q->cb.root_key = colo_prefix_key(COLO_PREFIX_ROOT, uid, 2); /* the adapter's own chain */
    }
    q->cb.tokens = malloc((size_t)cap * 4);
    q->cb.blocks = malloc((size_t)e->max_blocks * 4);
    q->gen = malloc((size_t)(p->max_tokens > 0 ? p->max_tokens : 1) * 4);
    if (!q->cb.tokens || !q->cb.blocks || !q->gen)
        goto out_oom;
    if (e->cfg.spec_tokens > 0 && !p->no_spec && !(q->draft = malloc((size_t)e->cfg.spec_tokens * 4)))
        goto out_oom;
    colo_spec_accept_init(&q->accept);
    q->lookup_from = -1;
    /* (a name cut short could be another tenant's: such a one neither
     * drafts from the cache nor stores in it) */
    q->tenant_ok = strlen(p->tenant ? p->tenant : "") < sizeof q->tenant;
    if (q->tenant_ok && p->tenant)
        snprintf(q->tenant, sizeof q->tenant, "%s", p->tenant);
    if (e->suffix && q->draft && q->tenant_ok)
        q->suffix_tag = colo_spec_suffix_tenant(e->suffix, q->tenant);
    q->p.tenant = NULL;
    size_t mt = (size_t)(p->max_tokens > 0 ? p->max_tokens : 1);
    if (q->p.top_logprobs > COLO_ENGINE_MAX_LOGPROBS)
        q->p.top_logprobs = COLO_ENGINE_MAX_LOGPROBS;
    if (q->p.top_logprobs < 0)
        q->p.top_logprobs = 0;
    if (q->p.logprobs) {
        size_t k = q->p.top_logprobs > 0 ? (size_t)q->p.top_logprobs : 1;
        if (!(q->lp = malloc(mt * sizeof *q->lp)) || !(q->top_ids = malloc(mt * k * sizeof *q->top_ids)) ||
            !(q->top_lps = malloc(mt * k * sizeof *q->top_lps)))
            goto out_oom;
    }
    if (p->json_schema) {
        char gerr[200];
        if (!(q->grammar = colo_schema_compile_opts(p->json_schema, strlen(p->json_schema), &e->schema, gerr,
                                                    sizeof gerr))) {
            colo_set_err(err, errlen, "json_schema: %s", gerr);
            colo_sampler_init(&q->sampler, 0, 1, 0, 0);
            seq_free(q);
            return NULL;
        }
    } else if (p->json_object && !(q->grammar = colo_schema_any_object_opts(&e->schema)))
        goto out_oom;
    if (q->grammar) {
        if (!(q->json = malloc(sizeof *q->json)))
            goto out_oom;
        colo_schema_state_init(q->grammar, q->json);
    }
    q->p.json_schema = NULL; /* (compiled; the caller's text need not outlive the call) */
    if (p->shape.n_bias > 0) {
        if (!(q->bias = malloc((size_t)p->shape.n_bias * sizeof *q->bias)))
            goto out_oom;
        memcpy(q->bias, p->shape.bias, (size_t)p->shape.n_bias * sizeof *q->bias);
        q->p.shape.bias = q->bias;
    } else {
        q->p.shape.bias = NULL;
        q->p.shape.n_bias = 0;
    }
    memcpy(q->cb.tokens, prompt, (size_t)n_prompt * 4);
    q->cb.n_tokens = n_prompt;
    for (int i = 0; i < p->n_stop && i < COLO_ENGINE_MAX_STOP; i++) {
        if (!(q->stop_buf[i] = strdup(p->stop[i])))
            goto out_oom;
        q->p.stop[i] = q->stop_buf[i];
        size_t l = strlen(p->stop[i]);
        q->max_stop = l > q->max_stop ? l : q->max_stop;
    }
    colo_sampler_init(&q->sampler, p->temperature, p->top_p, p->top_k, seed);
    return q;

out_oom:
    colo_set_err(err, errlen, "out of memory");
    if (q) {
        colo_sampler_init(&q->sampler, 0, 1, 0, 0);
        seq_free(q);
    }
    return NULL;
}

static void link_live(colo_engine *e, colo_engine_seq *q)
{
    q->added_ns = colo_now_ns();
    q->next = e->live;
    if (e->live)
        e->live->prev = q;
    e->live = q;
}

colo_engine_seq *colo_engine_add(colo_engine *e, const int32_t *prompt, int n_prompt, const colo_engine_params *p,
                           const colo_engine_callbacks *cb, char *err, size_t errlen)
{
    colo_engine_seq *q;
    return colo_engine_add_n(e, prompt, n_prompt, p, 1, cb, &q, err, errlen) == COLO_OK ? q : NULL;
}

colo_status colo_engine_add_n(colo_engine *e, const int32_t *prompt, int n_prompt, const colo_engine_params *p, int n,
                           const colo_engine_callbacks *cbs, colo_engine_seq **seqs, char *err, size_t errlen)
{
    int cap = e->cfg.max_seq_len;
    if (n < 1 || n > COLO_ENGINE_MAX_CHOICES) {
        colo_set_err(err, errlen, "n must be 1 to %d", COLO_ENGINE_MAX_CHOICES);
        return COLO_EINVAL;
    }
    if (n_prompt <= 0) {
        colo_set_err(err, errlen, "the prompt is empty");
        return COLO_EINVAL;
    }
    if (n_prompt >= cap) {
        colo_set_err(err, errlen, "the prompt has %d tokens; the context holds %d (prompt plus at least one new token)",
                     n_prompt, cap);
        return COLO_ETOOLONG;
    }
    for (int i = 0; i < n; i++) {
        /* choice i draws from its own stream: seed + i */
        if (!(seqs[i] = seq_create(e, prompt, n_prompt, p, &cbs[i], p->seed + (uint64_t)i, err, errlen))) {
            while (i-- > 0)
                seq_free(seqs[i]);
            return COLO_ENOMEM;
        }
    }
    if (colo_continuous_add(e->planner, &seqs[0]->cb) != COLO_OK) {
        colo_set_err(err, errlen, "the prompt (%d tokens) does not fit in the KV cache (%d blocks of %d tokens)",
                     n_prompt, colo_llama_kv_n_blocks(e->m), e->cfg.block_size);
        for (int i = 0; i < n; i++)
            seq_free(seqs[i]);
        return COLO_EINVAL;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (i > 0) {
            seqs[i]->leader = seqs[0];
            seqs[i]->next_follower = seqs[0]->followers;
            seqs[0]->followers = seqs[i];
        }
        link_live(e, seqs[i]);
    }
    return COLO_OK;
}

void colo_engine_cancel(colo_engine *e, colo_engine_seq *q) { finish(e, q, COLO_ECANCELED, NULL, "canceled"); }

static bool append_text(colo_engine_seq *q, const char *s, size_t n)
{
    if (q->text_len + n + 1 > q->text_cap) {
        size_t cap = q->text_cap ? q->text_cap * 2 : 256;
        while (cap < q->text_len + n + 1)
            cap *= 2;
        char *t = realloc(q->text, cap);
        if (!t)
            return false;
        q->text = t;
        q->text_cap = cap;
    }
    memcpy(q->text + q->text_len, s, n);
    q->text_len += n;
    q->text[q->text_len] = 0;
    return true;
}

/* Handles the token sampled for q; may finish q (then false: q is freed). */
static bool accept_token(colo_engine *e, colo_engine_seq *q, int32_t tok)
{
    uint64_t now = colo_now_ns();
    if (!q->first_token_ns)
        q->first_token_ns = now;
    if (is_stop(e, q, tok)) {
        finish(e, q, COLO_OK, "stop", NULL);
        return false;
    }
    q->gen[q->n_gen++] = tok;
    q->cb.tokens[q->cb.n_tokens++] = tok;
    char piece[256];
    size_t len = 0;
    if (colo_tokenizer_decode(colo_llama_tokenizer(e->m), tok, piece, sizeof piece, &len) != COLO_OK)
        len = 0;
    size_t before = q->text_len;
    if (!append_text(q, piece, len)) {
        finish(e, q, COLO_ENOMEM, NULL, "out of memory");
        return false;
    }
    for (int i = 0; i < q->p.n_stop; i++) {
        size_t sl = strlen(q->p.stop[i]);
        if (!sl)
            continue;
        size_t from = before + 1 > sl ? before + 1 - sl : 0;
        char *hit = q->text_len >= sl ? memmem(q->text + from, q->text_len - from, q->p.stop[i], sl) : NULL;
        if (hit) {
            q->text_len = (size_t)(hit - q->text);
            q->text[q->text_len] = 0;
            if (q->emitted > q->text_len)
                q->emitted = q->text_len;
            finish_at(e, q, COLO_OK, "stop", NULL, i);
            return false;
        }
    }
    emit(q, tok, false);
    if (q->n_gen >= q->p.max_tokens || q->cb.n_tokens >= q->cb.cap) {
        finish(e, q, COLO_OK, "length", NULL);
        return false;
    }
    return true;
}

/* Samples q's next token from its logits row into *tok and accepts it;
 * false when that finished q (q is freed). */
static bool sample_one(colo_engine *e, colo_engine_seq *q, const float *row, int V, int32_t *tok_out)
{
    /* A NaN or an infinity (weights or an adapter that overflow) gives no
     * token worth answering with: the sequence fails, not the model. */
    if (!colo_all_finite(row, V)) {
        finish(e, q, COLO_ERR, NULL, "the model's output is not a finite number (NaN or infinite logits)");
        return false;
    }
    const float *pick = row;
    if (q->json) {
        if (!token_bytes(e)) {
            finish(e, q, COLO_ENOMEM, NULL, "out of memory");
            return false;
        }
        uint64_t t0 = colo_now_ns();
        pick = json_mask(e, q, row, V);
        e->mask_ns += colo_now_ns() - t0;
        e->mask_count++;
    }
    int tok = colo_sampler_sample_shaped(&q->sampler, pick, V, &q->p.shape, q->cb.tokens, q->cb.n_tokens,
                                         q->n_prompt);
    if (tok >= 0 && q->json && !is_stop(e, q, tok))
        colo_schema_feed(q->grammar, q->json, e->tok_bytes[tok], e->tok_len[tok]);
    if (tok >= 0 && q->lp && q->n_gen < q->p.max_tokens) {
        int k = q->p.top_logprobs;
        colo_logprobs(row, V, tok, k, &q->lp[q->n_gen], q->top_ids + (size_t)q->n_gen * (k ? k : 1),
                      q->top_lps + (size_t)q->n_gen * (k ? k : 1));
    }
    *tok_out = tok;
    if (tok < 0) {
        finish(e, q, COLO_ENOMEM, NULL, "out of memory");
        return false;
    }
    return accept_token(e, q, tok);
}

/* Leader q's prompt is computed: each waiting follower becomes a copy of
 * it (sharing its full blocks, its own copy of the partly filled one) and
 * joins the planner. Returns them, linked by next_follower, to sample. */
static colo_engine_seq *fork_followers(colo_engine *e, colo_engine_seq *q)
{
    colo_engine_seq *f = q->followers, *ok = NULL, **tail = &ok;
    q->followers = NULL;
    colo_kv_cache *kv = colo_llama_kv_cache(e->m);
    bool copied = false;
    colo_status copy_st = COLO_OK; /* of a synchronize before the end */
    char msg[96];
    while (f) {
        colo_engine_seq *next = f->next_follower;
        f->leader = NULL;
        f->next_follower = NULL;
        memcpy(f->cb.tokens, q->cb.tokens, (size_t)q->cb.n_tokens * 4);
        f->first_step_ns = q->first_step_ns;
        int32_t src = -1, dst = -1;
        int rows = 0;
        colo_status st = colo_continuous_fork(e->planner, &q->cb, &f->cb, &src, &dst, &rows);
        if (st == COLO_OK && rows) {
            st = colo_kv_cache_copy(kv, e->s, dst, src, rows);
            copied = true;
        }
        if (st != COLO_OK) {
            /* Copies queued before the failure may still write f's blocks,
             * which finish gives back at once (see below). */
            if (copied) {
                colo_status ss = colo_stream_sync(e->s);
                if (copy_st == COLO_OK)
                    copy_st = ss;
            }
            snprintf(msg, sizeof msg, "could not fork the prompt's KV cache (%s)", colo_status_str(st));
            finish(e, f, st, NULL, msg);
        } else {
            *tail = f;
            tail = &f->next_follower;
        }
        f = next;
    }
    /* The copies run on the stream: they must be done before sampling can
     * end a choice or the leader (a stop token, max_tokens 1), whose blocks
     * then go back at once, and an elastic arena unmaps their memory. */
    colo_status st = copied ? colo_stream_sync(e->s) : COLO_OK;
    if (st == COLO_OK)
        st = copy_st;
    if (st != COLO_OK) {
        snprintf(msg, sizeof msg, "could not fork the prompt's KV cache (%s)", colo_status_str(st));
        while (ok) {
            colo_engine_seq *next = ok->next_follower;
            ok->next_follower = NULL;
            finish(e, ok, st, NULL, msg);
            ok = next;
        }
    }
    return ok;
}

/* Memory lent to this model and wanted back by its owner goes back now,
 * before this step takes any: the sequences on it are preempted and
 * recomputed later. */
static void give_back(colo_engine *e)
{
    colo_kv_cache *kv = colo_llama_kv_cache(e->m);
    int want = kv ? colo_kv_cache_reclaim_wanted(kv) : 0;
    if (want > 0) {
        /* Cached blocks nobody uses go first, then sequences are preempted
         * for the rest (their blocks may stay cached: evicted in turn). */
        int charged = colo_kv_cache_n_used(kv) + colo_kv_cache_n_evictable(kv);
        while (want > 0) {
            if (colo_kv_cache_prefix_evict(kv, want) == 0) {
                if (!colo_continuous_n_running(e->planner))
                    break;
                colo_continuous_shed(e->planner, want);
            }
            want = colo_kv_cache_reclaim_wanted(kv);
        }
        colo_kv_cache_count_reclaimed(kv, charged - colo_kv_cache_n_used(kv) - colo_kv_cache_n_evictable(kv));
    }
    /* Another model would borrow what only the prefix cache holds. */
    int drop = kv ? colo_kv_cache_evict_wanted(kv) : 0;
    if (drop > 0)
        colo_kv_cache_prefix_evict(kv, drop);
}

/* Whether q is decoding: running, its last token known and not computed. */
static bool decoding(const colo_engine_seq *q)
{
    return q->cb.state == COLO_SEQ_RUNNING && q->cb.n_tokens - q->cb.n_cached == 1;
}

/* q's draft of up to k tokens into q->draft (and q->draft_ngram): from
 * its own text (prompt lookup) and from its tenant's outputs in the
 * suffix cache, the one that followed the longer match (its own text
 * when as long, unless the cache's drafts more: the request's context is
 * likelier to go on as it did). */
static int draft_one(colo_engine *e, colo_engine_seq *q, int k)
{
    int found = 0, match = 0;
    q->draft_ngram = 0;
    q->draft_split = false;
    if (!e->cfg.spec_no_lookup) {
        /* the copy goes on from the last match, as far on as q has gone */
        int hint = q->lookup_from >= 0 ? q->lookup_from + q->cb.n_tokens - q->lookup_at : -1;
        colo_spec_match mt;
        found = colo_spec_lookup(q->cb.tokens, q->cb.n_tokens, k, hint, q->draft, &mt);
        q->draft_ngram = mt.ngram, q->draft_split = mt.split;
        if (mt.from >= 0)
            q->lookup_from = mt.from, q->lookup_at = q->cb.n_tokens;
    }
    if (!q->suffix_tag || k <= 0)
        return found;
    int32_t alt[COLO_SPEC_MAX_TOKENS];
    int n = colo_spec_suffix_lookup(e->suffix, q->suffix_tag, q->cb.tokens, q->cb.n_tokens, k, alt, &match);
    if (n > 0 && (!found || match > q->draft_ngram || (match == q->draft_ngram && n > found))) {
        memcpy(q->draft, alt, (size_t)n * sizeof *alt);
        q->draft_ngram = COLO_SPEC_FROM_SUFFIX;
        q->draft_split = false;
        return n;
    }
    return found;
}

/* This step's share of what the draft model computes before q's first
 * draft (its prompt; a step's accepted tokens cost nothing apart, they
 * are in the draft's token cost): the tokens at what a catch-up token of
 * the draft model costs, shared over the steps q has left when it drafts
 * k tokens a step. Unmeasured since the draft model's load or wake: free,
 * as an unmeasured drafted token is, so that the draft catches up once and
 * is measured (an estimate, which no step would then correct, could keep
 * a draft model unused for good). */
static double catchup_share(colo_engine *e, colo_engine_seq *q, int k)
{
    int pending = colo_spec_drafter_pending(e->drafter, &q->dseq, q->cb.tokens, q->cb.n_tokens);
    double per = colo_spec_drafter_catchup_ns(e->drafter);
    if (pending <= 2 || per <= 0)
        return 0;
    return colo_spec_amortize(pending * per, q->p.max_tokens - q->n_gen,
                              colo_spec_accept_rate(&q->accept, COLO_SPEC_FROM_MODEL, false), k);
}

/* Each decoding sequence's draft for the coming step (cb.n_draft): none
 * when the step will have COLO_SPEC_MAX_DECODES decodes or more (its rows
 * already keep the products busy) or the sequence asked for plain
 * decoding; at most what max_tokens and the context leave after the
 * token the step samples anyway; of what lookup finds, what
 * colo_spec_plan expects to pay (all of it with cfg.spec_always). With a
 * draft model free to lend, a sequence whose own text and the suffix
 * cache draft nothing, or whose drafts from them have fared worse than the
 * model's, drafts with the model (after the plan: only what it keeps). */
static void draft_all(colo_engine *e, colo_cosched_member *member)
{
    int n_decoding = 0, n = 0;
    for (colo_engine_seq *q = e->live; q; q = q->next) {
        q->cb.n_draft = 0;
        n_decoding += decoding(q);
    }
    if (e->cfg.spec_tokens <= 0 || n_decoding >= COLO_SPEC_MAX_DECODES || !n_decoding)
        return;
    bool model = e->drafter && colo_spec_drafter_begin(e->drafter);
    for (colo_engine_seq *q = e->live; q && n < e->cfg.max_running; q = q->next) {
        if (!q->draft || !decoding(q) || q->followers || q->leader)
            continue;
        int k = e->cfg.spec_tokens;
        if (k > q->p.max_tokens - q->n_gen - 1)
            k = q->p.max_tokens - q->n_gen - 1;
        if (k > q->cb.cap - q->cb.n_tokens - 1)
            k = q->cb.cap - q->cb.n_tokens - 1;
        int found = draft_one(e, q, k);
        if (model && k > 0 &&
            (!found || colo_spec_accept_rate(&q->accept, q->draft_ngram, q->draft_split) <
                           colo_spec_accept_rate(&q->accept, COLO_SPEC_FROM_MODEL, false))) {
            q->draft_ngram = COLO_SPEC_FROM_MODEL; /* drafted below, as long as the plan says */
            q->draft_split = false;
            found = k;
        }
        if (!found) {
            colo_spec_accept_idle(&q->accept);
            continue;
        }
        e->spec_seq[n] = q;
        e->spec_avail[n] = found;
        e->spec_rate[n] = colo_spec_accept_rate(&q->accept, q->draft_ngram, q->draft_split);
        /* (unmeasured: free, so that the model drafts once and is measured) */
        e->spec_tok_ns[n] = q->draft_ngram == COLO_SPEC_FROM_MODEL ? colo_spec_drafter_token_ns(e->drafter) : 0;
        e->spec_once_ns[n] = q->draft_ngram == COLO_SPEC_FROM_MODEL ? catchup_share(e, q, k) : 0;
        n++;
    }
    if (!e->cfg.spec_always)
        colo_spec_plan_costed(&e->costs, n_decoding, n, e->spec_avail, e->spec_rate, e->spec_tok_ns,
                              e->spec_once_ns, e->max_draft, e->spec_len);
    /* the sequences that draft with the model do so together: one pass
     * of the draft model per drafted token of them all */
    int n_model = 0;
    for (int i = 0; i < n; i++) {
        colo_engine_seq *q = e->spec_seq[i];
        q->cb.n_draft = e->cfg.spec_always ? e->spec_avail[i] : e->spec_len[i];
        if (q->cb.n_draft && q->draft_ngram == COLO_SPEC_FROM_MODEL)
            e->spec_req[n_model++] = (colo_spec_draft_req){.ds = &q->dseq, .tokens = q->cb.tokens,
                                                           .n_tokens = q->cb.n_tokens, .k = q->cb.n_draft,
                                                           .out = q->draft};
    }
    if (n_model) {
        uint64_t passes = colo_spec_drafter_passes(e->drafter), ns = colo_spec_drafter_ns(e->drafter);
        colo_spec_draft_run_batch(e->drafter, e->spec_req, n_model, e->s, member);
        e->st.spec_model_passes += colo_spec_drafter_passes(e->drafter) - passes;
        e->st.spec_model_ns += colo_spec_drafter_ns(e->drafter) - ns;
    }
    for (int i = 0, j = 0; i < n; i++) {
        colo_engine_seq *q = e->spec_seq[i];
        if (q->cb.n_draft && q->draft_ngram == COLO_SPEC_FROM_MODEL)
            q->cb.n_draft = e->spec_req[j++].n_out;
        if (!q->cb.n_draft)
            colo_spec_accept_idle(&q->accept);
    }
    if (model)
        colo_spec_drafter_end(e->drafter);
}

/* The step's batch from the planned work (nw entries): tokens, positions,
 * block tables and logits rows, drafted tokens after their sequence's
 * next one. *n_decode gets the entries that compute one next token. */
static colo_llama_batch build_batch(colo_engine *e, int nw, int *n_decode)
{
    int n = 0, n_logits = 0;
    uint64_t now = colo_now_ns();
    *n_decode = 0;
    for (int w = 0; w < nw; w++) {
        colo_continuous_work *wk = &e->work[w];
        colo_engine_seq *q = wk->seq->owner;
        *n_decode += wk->n == 1 && wk->logits;
        if (!q->first_step_ns)
            q->first_step_ns = now;
        for (int i = 0; i < wk->n; i++, n++) {
            e->tok[n] = wk->seq->tokens[wk->start + i];
            e->pos[n] = wk->start + i;
            e->seqi[n] = w;
        }
        if (wk->logits)
            e->rows[n_logits++] = n - 1;
        for (int i = 0; i < wk->n_draft; i++, n++) {
            e->tok[n] = q->draft[i];
            e->pos[n] = wk->start + wk->n + i;
            e->seqi[n] = w;
            e->rows[n_logits++] = n;
        }
        e->seq_adapter[w] = q->p.has_adapter ? q->p.adapter_slot : -1;
        memcpy(e->table + (size_t)w * e->max_blocks, wk->seq->blocks, (size_t)wk->seq->n_blocks * 4);
        for (int b = wk->seq->n_blocks; b < e->max_blocks; b++)
            e->table[(size_t)w * e->max_blocks + b] = 0;
    }
    return (colo_llama_batch){.n_tokens = n, .tokens = e->tok, .pos = e->pos, .seq = e->seqi, .n_seqs = nw,
                              .max_blocks = e->max_blocks, .block_table = e->table, .n_logits = n_logits,
                              .logit_rows = e->rows, .seq_adapter = e->seq_adapter};
}

/* Samples q's next token from rows[0], then, while the token sampled is
 * the drafted one, the next from the following row: each row is the
 * logits plain decoding would have at that position, so every token is
 * drawn as plain decoding draws it (greedy: the same tokens; sampled: the
 * same random stream, hence the same tokens for a seed, and a drafted
 * token is kept with exactly its probability, the rejection rule for a
 * draft that is one token for sure). The drafted positions past the last
 * match are forgotten and their blocks freed. */
static void sample_verified(colo_engine *e, colo_engine_seq *q, int n_draft, const float *rows, int V)
{
    int kept = 0;
    int32_t tok;
    /* the counters of the draft's source */
    uint64_t *src_drafted = q->draft_ngram == COLO_SPEC_FROM_MODEL    ? &e->st.spec_model_drafted
                            : q->draft_ngram == COLO_SPEC_FROM_SUFFIX ? &e->st.spec_suffix_drafted
                                                                      : &e->st.spec_lookup_drafted;
    uint64_t *src_accepted = q->draft_ngram == COLO_SPEC_FROM_MODEL    ? &e->st.spec_model_accepted
                             : q->draft_ngram == COLO_SPEC_FROM_SUFFIX ? &e->st.spec_suffix_accepted
                                                                       : &e->st.spec_lookup_accepted;
    if (n_draft > 0) {
        e->st.spec_steps++;
        e->st.spec_drafted += (uint64_t)n_draft;
        *src_drafted += (uint64_t)n_draft;
    }
    for (int j = 0;; j++) {
        int32_t want = j < n_draft ? q->draft[j] : -1;
        if (!sample_one(e, q, rows + (size_t)j * V, V, &tok)) {
            uint64_t a = (uint64_t)kept + (want >= 0 && tok == want);
            e->st.spec_accepted += a;
            *src_accepted += a;
            return; /* finished (a stop, max_tokens) */
        }
        if (j == n_draft || tok != want)
            break;
        kept++;
    }
    e->st.spec_accepted += (uint64_t)kept;
    *src_accepted += (uint64_t)kept;
    if (n_draft > 0) {
        colo_spec_accept_add(&q->accept, q->draft_ngram, q->draft_split, n_draft, kept);
        colo_continuous_settle(e->planner, &q->cb, kept);
    }
}

colo_status colo_engine_step(colo_engine *e, colo_cosched_member *member, int *n_scheduled)
{
    uint64_t t_begin = colo_now_ns();
    int n_stopped = 0;
    *n_scheduled = 0;
    give_back(e);
    draft_all(e, member);
    colo_continuous_set_batch_floor(e->planner, colo_cosched_batch_min_share(member));
    int nw = colo_continuous_plan(e->planner, e->work, e->stopped, &n_stopped);
    for (int i = 0; i < n_stopped; i++)
        finish(e, (colo_engine_seq *)e->stopped[i]->owner, COLO_OK, "length", NULL);
    if (nw == 0)
        return COLO_OK;
    int n_decode;
    colo_llama_batch batch = build_batch(e, nw, &n_decode);
    int n = batch.n_tokens;
    bool only_batch = true; /* the step's class: below every model's interactive steps */
    for (int w = 0; w < nw && only_batch; w++)
        only_batch = e->work[w].seq->batch;
    e->st.batch_steps += only_batch;
    if (only_batch && e->cfg.yield) {
        batch.stop = e->cfg.yield;
        batch.stop_ud = e->cfg.yield_ud;
    }
    int kind = n_decode == nw ? COLO_ENGINE_STEP_DECODE : n_decode == 0 ? COLO_ENGINE_STEP_PREFILL : COLO_ENGINE_STEP_MIXED;
    e->st.steps[kind]++;
    e->st.tokens[kind] += (uint64_t)n;
    uint64_t t_fwd = colo_now_ns();
    e->st.plan_ns += t_fwd - t_begin;
    if (member)
        colo_cosched_step_begin_as(member, only_batch ? COLO_STEP_BATCH : COLO_STEP_INTERACTIVE);
    colo_status st = colo_llama_forward(e->m, e->s, &batch, e->logits, member);
    if (member)
        colo_cosched_step_end(member);
    uint64_t t_sample = colo_now_ns();
    e->st.forward_ns += t_sample - t_fwd;
    if (kind == COLO_ENGINE_STEP_DECODE && st == COLO_OK)
        colo_spec_costs_add(&e->costs, n, t_sample - t_fwd);
    if (kind == COLO_ENGINE_STEP_PREFILL && st == COLO_OK)
        e->st.prefill_ns += t_sample - t_fwd;
    int rows, toks;
    colo_continuous_get_batch_share(e->planner, &rows, &toks);
    if (st == COLO_EAGAIN && only_batch) { /* abandoned: the drafts' blocks go back, nothing else moved */
        for (int w = 0; w < nw; w++)
            if (e->work[w].n_draft > 0)
                colo_continuous_settle(e->planner, e->work[w].seq, 0);
        e->st.abandoned++;
        colo_continuous_set_batch_share(e->planner, rows / 2, toks / 2); /* smaller steps fit the gaps */
        return COLO_OK;
    }
    if (st == COLO_OK && only_batch)
        colo_continuous_set_batch_share(e->planner, rows * 2, toks * 2);
    if (st != COLO_OK) {
        char msg[96];
        snprintf(msg, sizeof msg, "model step failed (%s)", colo_status_str(st));
        for (int w = 0; w < nw; w++)
            finish(e, (colo_engine_seq *)e->work[w].seq->owner, st, NULL, msg);
        return st;
    }
    colo_continuous_commit(e->planner, e->work, nw);
    *n_scheduled = n;
    int V = colo_llama_hparams_get(e->m)->n_vocab, li = 0;
    for (int w = 0; w < nw; w++) {
        if (!e->work[w].logits)
            continue;
        colo_engine_seq *q = e->work[w].seq->owner;
        const float *row = e->logits + (size_t)li * V;
        int n_draft = e->work[w].n_draft;
        li += 1 + n_draft;
        colo_engine_seq *forked = q->followers ? fork_followers(e, q) : NULL;
        sample_verified(e, q, n_draft, row, V);
        while (forked) {
            colo_engine_seq *f = forked;
            forked = f->next_follower;
            f->next_follower = NULL;
            int32_t tok;
            sample_one(e, f, row, V, &tok); /* the same logits, its own random stream */
        }
    }
    e->st.sample_ns += colo_now_ns() - t_sample;
    return COLO_OK;
}

void colo_engine_get_step_stats(const colo_engine *e, colo_engine_step_stats *out)
{
    *out = e->st;
    out->floor_steps = colo_continuous_n_floor_steps(e->planner);
}

bool colo_engine_seq_started(const colo_engine_seq *q) { return q->first_step_ns != 0; }

bool colo_engine_seq_logprobs(const colo_engine_seq *q, int i, float *lp, const int32_t **ids, const float **lps, int *k)
{
    if (!q->lp || i < 0 || i >= q->n_gen)
        return false;
    int kk = q->p.top_logprobs;
    *lp = q->lp[i];
    *ids = q->top_ids + (size_t)i * (kk ? kk : 1);
    *lps = q->top_lps + (size_t)i * (kk ? kk : 1);
    *k = kk;
    return true;
}
int colo_engine_n_running(const colo_engine *e) { return colo_continuous_n_running(e->planner); }
int colo_engine_n_waiting(const colo_engine *e) { return colo_continuous_n_waiting(e->planner); }
int colo_engine_kv_blocks(const colo_engine *e) { return colo_llama_kv_n_blocks(e->m); }
int colo_engine_kv_free_blocks(const colo_engine *e) { return colo_llama_kv_n_free(e->m); }
int colo_engine_max_seq_len(const colo_engine *e) { return e->cfg.max_seq_len; }
uint64_t colo_engine_preemptions(const colo_engine *e) { return colo_continuous_n_preemptions(e->planner); }
uint64_t colo_engine_mask_ns(const colo_engine *e) { return e->mask_ns; }
uint64_t colo_engine_mask_count(const colo_engine *e) { return e->mask_count; }

void colo_engine_prefix_stats(const colo_engine *e, colo_engine_prefix_info *out)
{
    colo_kv_cache *kv = colo_llama_kv_cache(e->m);
    out->enabled = kv && colo_kv_cache_prefix_enabled(kv);
    out->queries = colo_continuous_prefix_queries(e->planner);
    out->hit_tokens = colo_continuous_prefix_hit_tokens(e->planner);
    out->cached_blocks = kv ? colo_kv_cache_n_cached(kv) : 0;
    out->evictable_blocks = kv ? colo_kv_cache_n_evictable(kv) : 0;
    out->evicted_blocks = kv ? colo_kv_cache_n_evicted(kv) : 0;
}

int colo_engine_prefix_flush(colo_engine *e)
{
    colo_kv_cache *kv = colo_llama_kv_cache(e->m);
    return kv ? colo_kv_cache_prefix_evict(kv, colo_kv_cache_n_evictable(kv)) : 0;
}

uint64_t colo_engine_kv_reclaimed_blocks(const colo_engine *e)
{
    colo_kv_cache *kv = colo_llama_kv_cache(e->m);
    return kv ? colo_kv_cache_reclaimed(kv) : 0;
}
