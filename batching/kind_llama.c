/* The llama kind: llama-family generative models from GGUF, run by the
 * generation engine (batching/engine.h) with continuous batching. */
#include "batching/engine.h"
#include "batching/kind.h"
#include "batching/spec.h"
#include "batching/spec_suffix.h"
#include "models/sample/chat.h"
#include "models/sample/json_schema.h"
#include "models/sample/tools.h"
#include "models/arch/llama.h"
#include "models/arch/lora.h"
#include "runtime/log.h"

_Static_assert(sizeof(colo_req_logit_bias) == sizeof(colo_sampler_bias) &&
                   offsetof(colo_req_logit_bias, bias) == offsetof(colo_sampler_bias, bias),
               "the request's logit biases are passed to the sampler as they are");

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct llama_kind {
    colo_llama *m;         /* NULL while asleep */
    colo_engine *eng;  /* NULL while asleep */
    /* what tokenize reads (any thread), kept through sleep and wake */
    colo_tokenizer *tok;
    int ctx_tokens, cache_tokens, n_vocab;
    uint64_t preemptions_before; /* of the engines before a sleep */
    uint64_t prefix_queries_before, prefix_hits_before;
    colo_engine_step_stats steps_before; /* of the engines before a sleep */
    /* what wake needs to load again; file: the weights file's reader, held
     * from load to free with no page in the process while asleep, so that a
     * wake neither maps nor parses the file again (unless it changed) */
    colo_gguf *file;
    colo_model_cfg mc;
    colo_arena *arena;
    colo_stream *s;
    colo_chat_template chat;
    colo_kind_sink sink;
    int block_size;
    size_t block_bytes;
    size_t act_bytes;
    /* LoRA adapters by slot (models/arch/lora.h): those it holds, loaded at
     * load and again, the same, when the model wakes */
    struct {
        bool on;
        float scale;
        char path[1024];
        size_t arena_bytes; /* colo_lora_arena_bytes */
        int rank;
    } lora[COLO_LORA_SLOTS];
    /* Arena bytes kept for adapters, from the KV cache (colo_lora_room_bytes
     * of the config's adapters, plus adapter_memory_bytes): set at load,
     * the same at every wake, so that a wake sizes the KV cache as the load
     * did whatever adapters the model holds; the adapters it holds never
     * take more. */
    size_t adapter_room_bytes;
    colo_llama_hparams hp; /* the file's, kept while asleep */
    colo_spec_draft_src draft; /* the draft model through the sink (speculative.draft) */
} llama_kind;

typedef struct llama_job llama_job;

/* One of a request's n choices: a sequence of the engine. */
typedef struct llama_choice {
    llama_job *j;
    int index;
    colo_engine_seq *seq;          /* NULL once it finished */
    int n_emitted;              /* tokens passed to the sink (their index for logprobs) */
    colo_req_token_logprobs lp; /* the one being passed */
    int think;                  /* 0: no reasoning; 1: inside it; 2: past its </think> */
    char held[8];               /* reasoning's last bytes, that may begin </think> */
    int n_held;
} llama_choice;

/* A request admitted into the engine (in the request's pool). */
struct llama_job {
    colo_request *r;
    llama_kind *k;
    colo_status why; /* reported when the engine ends it as canceled */
    const char *why_msg;
    int n, n_done;
    llama_choice *ch;          /* (n) */
    colo_req_choice *out;      /* (n) each choice's outcome */
    colo_status status;        /* the first failure of a choice */
    const char *error;
    uint64_t first_step_ns, first_token_ns, done_ns;
    int n_preempted, n_completion;
};

/* Generated token i's logprobs from the engine into *out; false when not kept. */
static bool token_logprobs(const colo_engine_seq *q, int i, colo_req_token_logprobs *out)
{
    const int32_t *ids;
    const float *lps;
    int k;
    if (!colo_engine_seq_logprobs(q, i, &out->logprob, &ids, &lps, &k))
        return false;
    out->n_top = k;
    memcpy(out->top_ids, ids, (size_t)k * sizeof *ids);
    memcpy(out->top_logprobs, lps, (size_t)k * sizeof *lps);
    return true;
}

static int max_running_of(const colo_model_cfg *mc)
{
    return mc->batching.max_batch_size > 0 ? mc->batching.max_batch_size : 32;
}

static int step_tokens_of(const colo_model_cfg *mc)
{
    int t = mc->batching.max_batch_prefill_tokens > 0 ? mc->batching.max_batch_prefill_tokens : 512;
    int r = max_running_of(mc);
    return t < r ? r : t;
}

/* Tokens a decoding sequence drafts per step (speculative.lookup, suffix
 * or draft), 0: none. */
static int spec_tokens_of(const colo_model_cfg *mc)
{
    if (!mc->speculative.lookup && !mc->speculative.suffix && !mc->speculative.draft[0])
        return 0;
    return mc->speculative.tokens > 0 ? mc->speculative.tokens : COLO_SPEC_DEFAULT_TOKENS;
}

/* The suffix cache's memory (speculative.suffix), 0: none. */
static size_t spec_suffix_bytes_of(const colo_model_cfg *mc)
{
    if (!mc->speculative.suffix)
        return 0;
    return mc->speculative.suffix_memory_bytes ? (size_t)mc->speculative.suffix_memory_bytes
                                               : (size_t)COLO_SPEC_SUFFIX_DEFAULT_BYTES;
}

/* Logits rows of a step: one per running sequence, and what drafted
 * tokens may add (batching/engine.c sizes them the same way). */
static int logit_rows_of(const colo_model_cfg *mc)
{
    int r = max_running_of(mc), t = step_tokens_of(mc), k = spec_tokens_of(mc);
    int drafting = r < COLO_SPEC_MAX_DECODES - 1 ? r : COLO_SPEC_MAX_DECODES - 1;
    return r + (drafting * k < t ? drafting * k : t);
}

/* The file's tokenizer and chat template as loading takes them, so that an
 * unknown tokenizer, pre-tokenizer or template fails before any memory is
 * allocated (and at colo-server --check-config). COLO_EINVAL with the
 * reason. */
static colo_status check_tokenizer(const colo_model_cfg *mc, char *err, size_t errlen)
{
    char msg[512];
    colo_gguf *g = colo_gguf_open(mc->path, msg, sizeof msg);
    if (!g) {
        colo_set_err(err, errlen, "%s", msg);
        return COLO_EFORMAT;
    }
    colo_status st = COLO_OK;
    colo_chat_template chat;
    colo_tokenizer *t = colo_tokenizer_from_gguf(g, msg, sizeof msg);
    if (!t || colo_chat_template_init(&chat, t, mc->chat_template, msg, sizeof msg) != COLO_OK) {
        colo_set_err(err, errlen, "%s", msg); /* the caller names the model */
        st = COLO_EINVAL;
    }
    colo_tokenizer_free(t);
    colo_gguf_close(g);
    return st;
}

static colo_status memory_need(const colo_model_cfg *mc, colo_kind_memory *out, char *err, size_t errlen)
{
    colo_llama_memory mem;
    if (colo_llama_memory_need(mc->path, mc->kv_dtype, &mem, err, errlen) != COLO_OK)
        return COLO_EFORMAT;
    colo_status tst = check_tokenizer(mc, err, errlen);
    if (tst != COLO_OK)
        return tst;
    const colo_llama_hparams *hp = &mem.hp;
    int bs = mc->kv_block_size > 0 ? mc->kv_block_size : 16;
    int seq = mc->max_seq_len > 0 && mc->max_seq_len < hp->n_ctx ? mc->max_seq_len : hp->n_ctx;
    int max_blocks = (seq + bs - 1) / bs;
    int r = max_running_of(mc), t = step_tokens_of(mc);
    /* the config's adapters, checked against the model, and the room for
     * those added at run time: with the weights, as bring_up keeps them */
    size_t adapter_bytes = 0;
    int max_rank = 0;
    for (int i = 0; i < mc->n_adapters; i++) {
        colo_lora_info li;
        char e[512];
        colo_status ast = colo_lora_check(mc->path, mc->adapters[i].path, &li, e, sizeof e);
        if (ast != COLO_OK) {
            colo_set_err(err, errlen, "adapter %s: %s", mc->adapters[i].name, e);
            return ast;
        }
        adapter_bytes += colo_lora_arena_bytes(&li);
        max_rank = li.rank > max_rank ? li.rank : max_rank;
    }
    size_t adapters = mc->adapter_memory_bytes + colo_lora_room_bytes(hp, adapter_bytes, max_rank, t);
    *out = (colo_kind_memory){.weight_bytes = mem.weight_bytes + adapters,
                              .act_bytes = colo_llama_act_bytes(hp, t, logit_rows_of(mc), r * max_blocks),
                              .kv_min_bytes = (size_t)max_blocks * colo_llama_kv_block_bytes(hp, bs, mc->kv_dtype),
                              .overhead_bytes = (size_t)mem.n_tensors * 256 + 64 * 256,
                              .host_bytes = mem.host_bytes,
                              .step_tokens = t,
                              .max_seq_len = seq,
                              .max_batch = r,
                              .what = colo_llama_arch_name(hp->arch)};
    return COLO_OK;
}

/* colo_lora_room_bytes of the adapters the model holds, with one more of
 * info (NULL: none). */
static size_t adapters_room(const llama_kind *k, const colo_lora_info *more)
{
    size_t bytes = more ? colo_lora_arena_bytes(more) : 0;
    int rank = more ? more->rank : 0;
    for (int i = 0; i < COLO_LORA_SLOTS; i++)
        if (k->lora[i].on) {
            bytes += k->lora[i].arena_bytes;
            rank = k->lora[i].rank > rank ? k->lora[i].rank : rank;
        }
    return colo_lora_room_bytes(&k->hp, bytes, rank, step_tokens_of(&k->mc));
}

/* The adapters the model holds into it, slot by slot, into the room the
 * KV cache left them. One that fails on a wake (its file changed or gone)
 * is dropped with an error in the log, and requests to it are refused one
 * by one; at the first load it fails the model (the status is returned). */
static colo_status load_adapters(llama_kind *k, bool waking, char *err, size_t errlen)
{
    for (int i = 0; i < COLO_LORA_SLOTS; i++) {
        colo_status st;
        if (!k->lora[i].on ||
            (st = colo_llama_lora_load_in(k->m, k->s, k->lora[i].path, k->lora[i].scale, i, err, errlen)) == COLO_OK)
            continue;
        if (!waking)
            return st;
        COLO_ERROR("model %s: adapter in slot %d dropped as the model woke: %s", k->mc.name, i, err);
        k->lora[i].on = false;
    }
    return COLO_OK;
}

/* The weights, then the engine, its KV cache sized from what the weights
 * and the adapters' room leave, then the adapters into that room: at load
 * and at every wake alike, so that a wake gets the context and the KV
 * cache of the load (tokenize checked queued requests against them)
 * whatever adapters were removed and added meanwhile. On failure nothing
 * stays loaded. */
static colo_status bring_up(llama_kind *k, bool waking, char *err, size_t errlen)
{
    const colo_model_cfg *mc = &k->mc;
    colo_arena *arena = k->arena;
    colo_stream *s = k->s;
    colo_llama_memory mem;
    colo_status st = colo_llama_memory_need(mc->path, mc->kv_dtype, &mem, err, errlen);
    if (st != COLO_OK) /* the file is gone or no model (COLO_EIO, COLO_EFORMAT): not for memory */
        return st;
    if (!(k->m = colo_llama_load(mc->path, arena, s, err, errlen)))
        return COLO_ENOMEM;
    k->hp = *colo_llama_hparams_get(k->m);
    if (!waking) /* the config's adapters, in slots 0.. (served.c lists them there) */
        k->adapter_room_bytes = mc->adapter_memory_bytes + adapters_room(k, NULL);
    colo_engine_config gc = {.max_running = max_running_of(mc), .max_step_tokens = step_tokens_of(mc),
                          .block_size = mc->kv_block_size, .kv_type = mc->kv_dtype, .max_seq_len = mc->max_seq_len,
                          .n_stop_ids = k->chat.n_stop_ids, .no_prefix_cache = mc->no_prefix_cache,
                          .schema = &(colo_schema_options){mc->schema_max_length, mc->schema_max_items},
                          .spec_tokens = spec_tokens_of(mc), .spec_suffix_bytes = spec_suffix_bytes_of(mc),
                          .spec_no_lookup = !mc->speculative.lookup, .yield = k->sink.yield, .yield_ud = k->sink.ud,
                          .draft = mc->speculative.draft[0] && k->sink.draft_get ? &k->draft : NULL};
    memcpy(gc.stop_ids, k->chat.stop_ids, sizeof gc.stop_ids);
    colo_arena_stats before;
    colo_arena_get_stats(arena, &before);
    size_t keep_bytes = k->adapter_room_bytes;
    void *keep = NULL;
    if (keep_bytes && (st = colo_arena_alloc(arena, keep_bytes, 256, &keep)) != COLO_OK) {
        colo_set_err(err, errlen,
                     "the adapters' room (%zu bytes: adapter_memory_bytes and the config's adapters) does not fit in "
                     "the model's memory (%s)",
                     keep_bytes, colo_status_str(st));
        goto out_free_model;
    }
    k->eng = colo_engine_create(k->m, s, &gc, err, errlen);
    colo_arena_free(arena, keep);
    st = COLO_ENOMEM;
    if (!k->eng)
        goto out_free_model;
    const colo_llama_hparams *hp = colo_llama_hparams_get(k->m);
    k->block_size = colo_llama_kv_block_size(k->m);
    k->block_bytes = colo_llama_kv_block_bytes(hp, k->block_size, mc->kv_dtype);
    colo_arena_stats after;
    colo_arena_get_stats(arena, &after);
    /* An elastic arena charges KV blocks as they are used, not at creation. */
    size_t kv = colo_arena_is_elastic(arena) ? 0 : (size_t)colo_engine_kv_blocks(k->eng) * k->block_bytes;
    size_t grown = after.used_bytes - before.used_bytes; /* (keep is back already) */
    k->act_bytes = grown > kv ? grown - kv : 0;
    k->n_vocab = hp->n_vocab;
    if ((st = load_adapters(k, waking, err, errlen)) == COLO_OK)
        return COLO_OK;
    colo_engine_free(k->eng);
    k->eng = NULL;
out_free_model:
    colo_llama_free(k->m);
    k->m = NULL;
    return st;
}

static void kind_free(void *inst);

/* The sink's draft model as the engine asks for it (batching/spec_draft.h). */
static colo_llama *draft_get(void *ud, bool wait, uint64_t *epoch)
{
    llama_kind *k = ud;
    return k->sink.draft_get(k->sink.ud, wait, epoch);
}

static void draft_put(void *ud)
{
    llama_kind *k = ud;
    k->sink.draft_put(k->sink.ud);
}

static void *load(const colo_model_cfg *mc, colo_arena *arena, colo_stream *s, const colo_kind_sink *sink, char *err,
                  size_t errlen)
{
    llama_kind *k = calloc(1, sizeof *k);
    if (!k) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    k->sink = *sink;
    k->draft = (colo_spec_draft_src){draft_get, draft_put, k};
    k->mc = *mc;
    k->arena = arena;
    k->s = s;
    char msg[512];
    /* The kind's own tokenizer: tokenize runs on any thread, also while
     * the weights are asleep. */
    colo_gguf *g = colo_gguf_open(mc->path, msg, sizeof msg);
    if (g) {
        k->tok = colo_tokenizer_from_gguf(g, msg, sizeof msg);
        colo_gguf_release_range(g, colo_gguf_map_base(g), colo_gguf_file_size(g)); /* read */
    }
    k->file = g;
    if (!k->tok) {
        colo_set_err(err, errlen, "model '%s': %s", mc->name, msg);
        goto fail;
    }
    if (colo_chat_template_init(&k->chat, k->tok, mc->chat_template, msg, sizeof msg) != COLO_OK) {
        colo_set_err(err, errlen, "%s", msg);
        goto fail;
    }
    for (int i = 0; i < mc->n_adapters; i++) {
        colo_lora_info li;
        if (colo_lora_check(mc->path, mc->adapters[i].path, &li, msg, sizeof msg) != COLO_OK) {
            colo_set_err(err, errlen, "adapter %s: %s", mc->adapters[i].name, msg);
            goto fail;
        }
        k->lora[i].on = true;
        k->lora[i].scale = (float)mc->adapters[i].scale;
        k->lora[i].arena_bytes = colo_lora_arena_bytes(&li);
        k->lora[i].rank = li.rank;
        snprintf(k->lora[i].path, sizeof k->lora[i].path, "%s", mc->adapters[i].path);
    }
    if (bring_up(k, false, err, errlen) != COLO_OK)
        goto fail;
    /* read by tokenize on any thread: set once here, never by wake */
    k->ctx_tokens = colo_engine_max_seq_len(k->eng);
    k->cache_tokens = colo_engine_kv_blocks(k->eng) * k->block_size;
    return k;
fail:
    kind_free(k);
    return NULL;
}

/* a += b, counter by counter. */
static void add_step_stats(colo_engine_step_stats *a, const colo_engine_step_stats *b)
{
    for (int i = 0; i < COLO_ENGINE_STEP_KINDS; i++)
        a->steps[i] += b->steps[i], a->tokens[i] += b->tokens[i];
    a->plan_ns += b->plan_ns, a->forward_ns += b->forward_ns, a->sample_ns += b->sample_ns;
    a->prefill_ns += b->prefill_ns;
    a->spec_drafted += b->spec_drafted, a->spec_accepted += b->spec_accepted, a->spec_steps += b->spec_steps;
    a->spec_model_drafted += b->spec_model_drafted, a->spec_model_accepted += b->spec_model_accepted;
    a->spec_model_passes += b->spec_model_passes, a->spec_model_ns += b->spec_model_ns;
    a->spec_lookup_drafted += b->spec_lookup_drafted, a->spec_lookup_accepted += b->spec_lookup_accepted;
    a->spec_suffix_drafted += b->spec_suffix_drafted, a->spec_suffix_accepted += b->spec_suffix_accepted;
}

/* Drops the KV cache and the weights (the arena gets their memory back;
 * physical pages of an elastic arena go back to the device). The weights
 * are read from the file again on wake. Executor thread, nothing admitted. */
static colo_status kind_sleep(void *inst, char *err, size_t errlen)
{
    llama_kind *k = inst;
    if (!k->eng)
        return COLO_OK;
    if (colo_engine_n_running(k->eng) || colo_engine_n_waiting(k->eng)) {
        colo_set_err(err, errlen, "sequences are still running");
        return COLO_EAGAIN;
    }
    k->preemptions_before += colo_engine_preemptions(k->eng);
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(k->eng, &pi);
    k->prefix_queries_before += pi.queries;
    k->prefix_hits_before += pi.hit_tokens;
    colo_engine_step_stats ss;
    colo_engine_get_step_stats(k->eng, &ss);
    add_step_stats(&k->steps_before, &ss);
    colo_engine_free(k->eng);
    colo_llama_free(k->m);
    k->eng = NULL;
    k->m = NULL;
    /* whatever a wake's checks read of the file (its header) leaves the process too */
    colo_gguf_release_range(k->file, colo_gguf_map_base(k->file), colo_gguf_file_size(k->file));
    return COLO_OK;
}

static colo_status kind_wake(void *inst, char *err, size_t errlen)
{
    llama_kind *k = inst;
    if (k->eng)
        return COLO_OK;
    colo_status st = bring_up(k, true, err, errlen);
    if (st == COLO_OK && (colo_engine_max_seq_len(k->eng) != k->ctx_tokens ||
                          colo_engine_kv_blocks(k->eng) * k->block_size < k->cache_tokens)) {
        /* the same config and file make the same sizes (a file changed
         * since can make others); tokenize checked queued requests against
         * them */
        colo_set_err(err, errlen,
                     "the model woke with a smaller context or KV cache (%d and %d tokens) than it was loaded with "
                     "(%d and %d)",
                     colo_engine_max_seq_len(k->eng), colo_engine_kv_blocks(k->eng) * k->block_size, k->ctx_tokens,
                     k->cache_tokens);
        kind_sleep(k, NULL, 0);
        return COLO_EINVAL;
    }
    return st;
}

static void kind_trim(void *inst)
{
    llama_kind *k = inst;
    if (k->eng)
        colo_engine_prefix_flush(k->eng);
}

static void kind_free(void *inst)
{
    llama_kind *k = inst;
    if (!k)
        return;
    colo_engine_free(k->eng);
    colo_llama_free(k->m);
    colo_tokenizer_free(k->tok);
    colo_gguf_close(k->file);
    free(k);
}

/* Whether the request's output is read for tool calls. */
static bool tools_on(const colo_request *r)
{
    return r->params.n_tools > 0 && r->params.tool_choice != COLO_TOOLS_NONE;
}

static bool tools_forced(const colo_request *r)
{
    return tools_on(r) && (r->params.tool_choice == COLO_TOOLS_REQUIRED || r->params.tool_choice == COLO_TOOLS_NAMED);
}

/* The request's tools as models/sample/tools.h takes them (in its pool). */
static colo_tool_def *tool_defs(colo_request *r)
{
    colo_tool_def *d = colo_pool_calloc(r->pool, (size_t)(r->params.n_tools ? r->params.n_tools : 1), sizeof *d);
    for (int i = 0; d && i < r->params.n_tools; i++)
        d[i] = (colo_tool_def){r->params.tools[i].name, r->params.tools[i].description,
                               r->params.tools[i].parameters};
    return d;
}

/* A chat with tools, or with tool calls and results in it. */
static char *tools_prompt(llama_kind *k, colo_request *r, uint8_t **plain)
{
    int n = r->in.n_messages;
    colo_tool_msg *tm = colo_pool_calloc(r->pool, (size_t)n, sizeof *tm);
    colo_tool_def *defs = tool_defs(r);
    if (!tm || !defs)
        return NULL;
    for (int i = 0; i < n; i++) {
        const colo_chat_message *m = &r->in.messages[i];
        tm[i].m = (colo_chat_msg){m->role, m->content};
        tm[i].tool_name = m->name;
        tm[i].tool_call_id = m->tool_call_id;
        if (m->n_tool_calls > 0) {
            const char **names = colo_pool_calloc(r->pool, (size_t)m->n_tool_calls, sizeof *names);
            const char **args = colo_pool_calloc(r->pool, (size_t)m->n_tool_calls, sizeof *args);
            if (!names || !args)
                return NULL;
            for (int c = 0; c < m->n_tool_calls; c++)
                names[c] = m->tool_calls[c].name, args[c] = m->tool_calls[c].arguments;
            tm[i].call_names = names, tm[i].call_args = args, tm[i].n_calls = m->n_tool_calls;
        }
    }
    return colo_tools_prompt_marked(&k->chat, tm, n, defs, tools_on(r) ? r->params.n_tools : 0, tools_forced(r),
                                    plain);
}

/* The prompt's text: the raw prompt, or the chat template over messages
 * (in the request's pool). *special: control tokens are read in it; then
 * *plain (in the pool; NULL: everywhere) marks the messages' text, where
 * they are not, unless the model's config says message_control_tokens.
 * COLO_EINVAL when the model has no template. */
static colo_status prompt_text(llama_kind *k, colo_request *r, const char **text, size_t *len, bool *special,
                               const uint8_t **plain)
{
    *plain = NULL;
    if (!r->in.messages) {
        *text = r->in.prompt;
        *len = r->in.prompt_len;
        *special = false;
        return COLO_OK;
    }
    int n = r->in.n_messages;
    bool with_tools = tools_on(r);
    for (int i = 0; i < n; i++)
        with_tools |= r->in.messages[i].n_tool_calls > 0 || !strcmp(r->in.messages[i].role, "tool");
    if (k->chat.format == COLO_CHAT_NONE)
        return COLO_EINVAL;
    char *p;
    uint8_t *pm = NULL;
    if (with_tools) {
        p = tools_prompt(k, r, &pm);
    } else {
        colo_chat_msg *msgs = colo_pool_calloc(r->pool, (size_t)n, sizeof *msgs);
        if (!msgs)
            return COLO_ENOMEM;
        for (int i = 0; i < n; i++)
            msgs[i] = (colo_chat_msg){r->in.messages[i].role, r->in.messages[i].content};
        p = colo_chat_prompt_marked(&k->chat, msgs, n, NULL, &pm);
    }
    if (!p) {
        free(pm);
        return COLO_ENOMEM;
    }
    *len = strlen(p);
    char *buf = colo_pool_alloc(r->pool, *len + 1);
    uint8_t *pbuf = k->mc.message_control_tokens ? NULL : colo_pool_alloc(r->pool, *len + 1);
    if (buf)
        memcpy(buf, p, *len + 1);
    if (pbuf)
        memcpy(pbuf, pm, *len + 1);
    free(p);
    free(pm);
    if (!buf || (!pbuf && !k->mc.message_control_tokens))
        return COLO_ENOMEM;
    *text = buf;
    *plain = pbuf;
    *special = true;
    return COLO_OK;
}

/* The grammar of the output: a forced call's, or response_format's JSON
 * Schema (kept in r->params.json_schema), checked here so that a schema
 * colo cannot follow is refused before the request waits anywhere. */
static colo_status output_grammar(llama_kind *k, colo_request *r, char *err, size_t errlen)
{
    const char *what = "response_format.json_schema";
    if (tools_forced(r) && r->in.messages) {
        int only = -1;
        if (r->params.tool_choice == COLO_TOOLS_NAMED) {
            for (int i = 0; i < r->params.n_tools; i++)
                if (r->params.tool_name && !strcmp(r->params.tools[i].name, r->params.tool_name))
                    only = i;
            if (only < 0) {
                colo_set_err(err, errlen, "tool_choice: no tool is named '%.64s'",
                             r->params.tool_name ? r->params.tool_name : "");
                return COLO_EINVAL;
            }
        }
        colo_tool_def *defs = tool_defs(r);
        if (!defs)
            return COLO_ENOMEM;
        char *schema = colo_tools_call_schema(&k->chat, defs, r->params.n_tools, only, err, errlen);
        if (!schema)
            return COLO_EINVAL;
        r->params.json_schema = colo_pool_strndup(r->pool, schema, strlen(schema));
        free(schema);
        if (!r->params.json_schema)
            return COLO_ENOMEM;
        what = "tools";
    }
    if (!r->params.json_schema)
        return COLO_OK;
    char gerr[200];
    colo_schema *g = colo_schema_compile(r->params.json_schema, strlen(r->params.json_schema), gerr, sizeof gerr);
    if (!g) {
        colo_set_err(err, errlen, "%s: %s", what, gerr);
        return COLO_EINVAL;
    }
    colo_schema_free(g);
    return COLO_OK;
}

/* Calls in the output of a request with tools: into r->out (ids made from
 * the request's id), the text cut to what came before them. */
static void read_tool_calls(colo_request *r)
{
    colo_tool_def *defs = tool_defs(r);
    colo_tool_call *calls = NULL;
    size_t content_len;
    if (!defs)
        return;
    int n = colo_tools_parse(r->out.text, r->out.text_len, defs, r->params.n_tools, &calls, &content_len);
    if (n <= 0)
        return;
    colo_req_tool_call *rc = colo_pool_calloc(r->pool, (size_t)n, sizeof *rc);
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the request id */
    for (const char *p = r->who.id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (int i = 0; rc && i < n; i++) {
        char id[40];
        snprintf(id, sizeof id, "call_%016llx%02d", (unsigned long long)h, i);
        rc[i].id = colo_pool_strndup(r->pool, id, strlen(id));
        rc[i].name = colo_pool_strndup(r->pool, calls[i].name, strlen(calls[i].name));
        rc[i].arguments = colo_pool_strndup(r->pool, calls[i].arguments, strlen(calls[i].arguments));
        if (!rc[i].id || !rc[i].name || !rc[i].arguments)
            rc = NULL;
    }
    colo_tools_calls_free(calls, n);
    if (!rc)
        return; /* out of memory: the text goes as it is */
    r->out.tool_calls = rc;
    r->out.n_tool_calls = n;
    r->out.finish_reason = "tool_calls";
    r->out.text_len = content_len;
    ((char *)r->out.text)[content_len] = 0;
}

static colo_status tokenize(void *inst, colo_request *r, char *err, size_t errlen)
{
    llama_kind *k = inst;
    const char *text;
    size_t len;
    bool special;
    const uint8_t *plain;
    if (r->task != COLO_TASK_GENERATE) {
        colo_set_err(err, errlen, "this model generates text; it makes no embeddings");
        return COLO_EINVAL;
    }
    colo_status pst = prompt_text(k, r, &text, &len, &special, &plain);
    if (pst == COLO_EINVAL) {
        colo_set_err(err, errlen,
                     "messages: this model's file has no chat template; its config needs chat_template: (or send a "
                     "prompt)");
        return COLO_EINVAL;
    }
    if (pst != COLO_OK)
        goto oom;
    colo_status gst = output_grammar(k, r, err, errlen);
    if (gst == COLO_ENOMEM)
        goto oom;
    if (gst != COLO_OK)
        return gst;
    int32_t *ids = NULL;
    int n = 0;
    colo_status est = special ? colo_tokenizer_encode_marked(k->tok, text, len, true, plain, &ids, &n)
                              : colo_tokenizer_encode(k->tok, text, len, true, false, &ids, &n);
    if (est != COLO_OK) {
        free(ids);
        goto oom;
    }
    int32_t *pids = n ? colo_pool_alloc(r->pool, (size_t)n * sizeof *pids) : NULL;
    if (n && !pids) {
        free(ids);
        goto oom;
    }
    if (n)
        memcpy(pids, ids, (size_t)n * sizeof *pids);
    free(ids);
    r->tok.ids = pids;
    r->tok.n = n;
    const char *what = r->in.messages ? "messages" : "prompt";
    int ctx = k->ctx_tokens;
    int cache = k->cache_tokens;
    int limit = ctx < cache ? ctx : cache;
    const char *limit_name = ctx <= cache ? "the model's context" : "the model's whole KV cache";
    if (n == 0) {
        colo_set_err(err, errlen, "%s: is empty after tokenization", what);
        return COLO_EINVAL;
    }
    if (n >= limit) {
        colo_set_err(err, errlen, "%s: %d tokens; %s holds %d tokens (prompt plus at least one new token)", what, n,
                     limit_name, limit);
        return COLO_ETOOLONG;
    }
    if (n + r->params.max_tokens > limit) {
        if (r->params.max_tokens_set) {
            colo_set_err(err, errlen,
                         "max_tokens: the prompt has %d tokens and max_tokens is %d: %d tokens, but %s holds %d "
                         "(at most %d new tokens for this prompt)",
                         n, r->params.max_tokens, n + r->params.max_tokens, limit_name, limit, limit - n);
            return COLO_ETOOLONG;
        }
        r->params.max_tokens = limit - n;
    }
    return COLO_OK;
oom:
    colo_set_err(err, errlen, "out of memory while tokenizing the prompt");
    return COLO_ENOMEM;
}

static void info(void *inst, colo_kind_info *out)
{
    llama_kind *k = inst;
    memset(out, 0, sizeof *out);
    out->max_seq_len = k->ctx_tokens;
    out->n_vocab = k->n_vocab;
    out->kv_block_size = k->block_size;
    out->preemptions = k->preemptions_before;
    out->prefix_cache = !k->mc.no_prefix_cache;
    out->prefix_queries = k->prefix_queries_before;
    out->prefix_hit_tokens = k->prefix_hits_before;
    colo_engine_step_stats ss = k->steps_before;
    if (k->eng) {
        colo_engine_step_stats now;
        colo_engine_get_step_stats(k->eng, &now);
        add_step_stats(&ss, &now);
    }
    for (int i = 0; i < COLO_ENGINE_STEP_KINDS; i++)
        out->steps_by_kind[i] = ss.steps[i], out->tokens_by_kind[i] = ss.tokens[i];
    out->plan_ns = ss.plan_ns, out->forward_ns = ss.forward_ns, out->sample_ns = ss.sample_ns;
    uint64_t prefilled = ss.tokens[COLO_ENGINE_STEP_PREFILL];
    out->prefill_tok_ns = prefilled ? (double)ss.prefill_ns / (double)prefilled : 0;
    out->spec_drafted = ss.spec_drafted, out->spec_accepted = ss.spec_accepted, out->spec_steps = ss.spec_steps;
    out->spec_lookup_drafted = ss.spec_lookup_drafted, out->spec_lookup_accepted = ss.spec_lookup_accepted;
    out->spec_suffix_drafted = ss.spec_suffix_drafted, out->spec_suffix_accepted = ss.spec_suffix_accepted;
    out->spec_draft_drafted = ss.spec_model_drafted, out->spec_draft_accepted = ss.spec_model_accepted;
    out->spec_draft_passes = ss.spec_model_passes, out->spec_draft_ns = ss.spec_model_ns;
    if (!k->eng)
        return; /* asleep: nothing in memory */
    colo_engine_prefix_info pi;
    colo_engine_prefix_stats(k->eng, &pi);
    out->prefix_queries += pi.queries;
    out->prefix_hit_tokens += pi.hit_tokens;
    out->prefix_cached_bytes = (size_t)pi.cached_blocks * k->block_bytes;
    out->weight_bytes = colo_llama_weight_bytes(k->m);
    out->adapter_bytes = colo_llama_lora_bytes(k->m);
    out->act_bytes = k->act_bytes;
    out->kv_blocks = colo_engine_kv_blocks(k->eng);
    out->kv_free_blocks = colo_engine_kv_free_blocks(k->eng);
    out->kv_block_size = k->block_size;
    out->kv_tokens = out->kv_blocks * k->block_size;
    out->kv_bytes = (size_t)out->kv_blocks * k->block_bytes;
    out->kv_used_bytes = (size_t)(out->kv_blocks - out->kv_free_blocks) * k->block_bytes;
    out->preemptions += colo_engine_preemptions(k->eng);
    out->running = colo_engine_n_running(k->eng) + colo_engine_n_waiting(k->eng);
    out->in_batch = colo_engine_n_running(k->eng);
}

static const char think_end[] = "</think>";

/* Passes a piece to the front end, as reasoning or as answer text. */
static void emit(llama_choice *ch, int32_t token, const char *piece, size_t len, bool reasoning)
{
    llama_job *j = ch->j;
    if (j->why != COLO_OK)
        return;
    j->r->token_reasoning = reasoning;
    if (!j->k->sink.token(j->k->sink.ud, j->r, token, piece, len)) {
        j->why = COLO_ECANCELED;
        j->why_msg = "the client did not read its stream";
        atomic_store(&j->r->canceled, 1); /* the executor ends it before the next step */
    }
}

/* A reasoning model's piece: reasoning until its </think> (the last bytes
 * held back while they may begin one), answer text after it. */
static void think_piece(llama_choice *ch, int32_t token, const char *piece, size_t len)
{
    char buf[256];
    size_t n = (size_t)ch->n_held + len;
    if (n > sizeof buf) { /* (pieces are a token or a held stop-string run: short) */
        emit(ch, -1, ch->held, (size_t)ch->n_held, true);
        ch->n_held = 0;
        emit(ch, token, piece, len, true);
        return;
    }
    memcpy(buf, ch->held, (size_t)ch->n_held);
    memcpy(buf + ch->n_held, piece, len);
    const char *end = memmem(buf, n, think_end, sizeof think_end - 1);
    if (end) {
        size_t r = (size_t)(end - buf), a = r + sizeof think_end - 1;
        while (a < n && (buf[a] == '\n' || buf[a] == ' '))
            a++;
        ch->think = 2;
        ch->n_held = 0;
        emit(ch, token, buf, r, true);
        if (a < n)
            emit(ch, -1, buf + a, n - a, false);
        return;
    }
    size_t keep = n < sizeof ch->held - 1 ? n : sizeof ch->held - 1; /* a partial </think> is at most 7 bytes */
    emit(ch, token, buf, n - keep, true);
    memcpy(ch->held, buf + n - keep, keep);
    ch->n_held = (int)keep;
}

static void job_on_token(void *ud, int32_t token, const char *piece, size_t len)
{
    llama_choice *ch = ud;
    llama_job *j = ch->j;
    if (j->why != COLO_OK)
        return;
    j->r->token_logprobs = NULL;
    j->r->token_choice = ch->index;
    if (token >= 0 && j->r->params.logprobs >= 0 && token_logprobs(ch->seq, ch->n_emitted, &ch->lp))
        j->r->token_logprobs = &ch->lp;
    if (token >= 0)
        ch->n_emitted++;
    if (ch->think == 1)
        think_piece(ch, token, piece, len);
    else
        emit(ch, token, piece, len, false);
}

/* A reasoning model's text into its reasoning (up to </think>) and its
 * answer (after it, leading blank lines dropped); without </think> all of
 * it is reasoning (the output stopped while thinking). */
static void split_reasoning(colo_req_choice *c)
{
    const char *t = c->text ? c->text : "";
    const char *end = memmem(t, c->text_len, think_end, sizeof think_end - 1);
    size_t r = end ? (size_t)(end - t) : c->text_len, a = end ? r + sizeof think_end - 1 : c->text_len;
    while (a < c->text_len && (t[a] == '\n' || t[a] == ' '))
        a++;
    c->reasoning = t;
    c->reasoning_len = r;
    c->text = t + a;
    c->text_len -= a;
}

/* Copies choice o's result into c (the request's pool); false when out of memory. */
static bool keep_choice(colo_request *r, const colo_engine_outcome *o, colo_req_choice *c)
{
    c->finish_reason = o->finish_reason;
    c->stop_sequence = o->stop_index >= 0 && o->stop_index < r->params.n_stop ? r->params.stop[o->stop_index] : NULL;
    char *text = colo_pool_strndup(r->pool, o->text ? o->text : "", o->text ? o->text_len : 0);
    int32_t *toks = colo_pool_alloc(r->pool, (size_t)(o->n_tokens ? o->n_tokens : 1) * sizeof *toks);
    if (!text || !toks)
        return false;
    memcpy(toks, o->tokens, (size_t)o->n_tokens * sizeof *toks);
    if (o->logprobs && o->n_tokens > 0) {
        colo_req_token_logprobs *lp = colo_pool_calloc(r->pool, (size_t)o->n_tokens, sizeof *lp);
        int kk = r->params.logprobs > 0 ? r->params.logprobs : 0, row = kk ? kk : 1;
        for (int i = 0; lp && i < o->n_tokens; i++) {
            lp[i].logprob = o->logprobs[i];
            lp[i].n_top = kk;
            memcpy(lp[i].top_ids, o->top_ids + (size_t)i * row, (size_t)kk * sizeof(int32_t));
            memcpy(lp[i].top_logprobs, o->top_logprobs + (size_t)i * row, (size_t)kk * sizeof(float));
        }
        c->logprobs = lp; /* NULL when out of memory: the answer goes without */
    }
    c->text = text;
    c->text_len = o->text ? o->text_len : 0;
    c->tokens = toks;
    c->n_tokens = o->n_tokens;
    return true;
}

static void job_on_done(void *ud, const colo_engine_outcome *o)
{
    llama_choice *ch = ud;
    llama_job *j = ch->j;
    colo_request *r = j->r;
    ch->seq = NULL;
    if (ch->think == 1 && ch->n_held) { /* it stopped while thinking: the held bytes are reasoning */
        r->token_choice = ch->index;
        r->token_logprobs = NULL;
        emit(ch, -1, ch->held, (size_t)ch->n_held, true);
        ch->n_held = 0;
    }
    if (o->status != COLO_OK && j->status == COLO_OK) {
        j->status = o->status;
        /* the engine's message lives in the sequence, freed after this call */
        j->error = o->error ? colo_pool_strndup(r->pool, o->error, strlen(o->error)) : NULL;
        if (!j->error)
            j->error = "out of memory";
    } else if (o->status == COLO_OK && j->status == COLO_OK && !keep_choice(r, o, &j->out[ch->index])) {
        j->status = COLO_ENOMEM;
        j->error = "out of memory";
    } else if (o->status == COLO_OK && j->status == COLO_OK && ch->think) {
        split_reasoning(&j->out[ch->index]);
    }
    j->n_completion += o->n_tokens;
    j->n_preempted += o->n_preempted;
    if (o->first_step_ns && (!j->first_step_ns || o->first_step_ns < j->first_step_ns))
        j->first_step_ns = o->first_step_ns;
    if (o->first_token_ns && (!j->first_token_ns || o->first_token_ns < j->first_token_ns))
        j->first_token_ns = o->first_token_ns;
    if (o->done_ns > j->done_ns)
        j->done_ns = o->done_ns;
    r->out.n_input_tokens = o->n_prompt;
    if (ch->index == 0)
        r->out.n_cached_tokens = o->n_cached_prompt;
    if (++j->n_done < j->n)
        return;
    /* every choice has finished: the request's outcome */
    colo_req_outcome *out = &r->out;
    out->status = j->status;
    out->error = j->status != COLO_OK ? j->error : NULL;
    if (out->status == COLO_ECANCELED && j->why != COLO_OK) {
        out->status = j->why;
        out->error = j->why_msg;
    }
    out->n_preempted = j->n_preempted;
    out->n_completion_tokens = j->n_completion;
    if (out->status == COLO_OK) {
        const colo_req_choice *c0 = &j->out[0];
        out->finish_reason = c0->finish_reason;
        out->stop_sequence = c0->stop_sequence;
        out->text = c0->text;
        out->text_len = c0->text_len;
        out->reasoning = c0->reasoning;
        out->reasoning_len = c0->reasoning_len;
        out->tokens = c0->tokens;
        out->n_tokens = c0->n_tokens;
        out->logprobs = c0->logprobs;
        out->n_choices = j->n;
        out->choices = j->n > 1 ? j->out : NULL;
        if (tools_on(r) && r->in.messages) {
            read_tool_calls(r); /* (of the first choice, whose text it may shorten) */
            j->out[0].text_len = out->text_len;
            j->out[0].finish_reason = out->finish_reason;
        }
    }
    r->priv = NULL;
    j->k->sink.done(j->k->sink.ud, r, j->first_step_ns, j->first_token_ns, j->done_ns);
}

static colo_status admit(void *inst, colo_request *r, char *err, size_t errlen)
{
    llama_kind *k = inst;
    if (!k->eng) { /* the executor wakes the model before it admits */
        colo_set_err(err, errlen, "the model is asleep");
        return COLO_ECANCELED;
    }
    llama_job *j = colo_pool_calloc(r->pool, 1, sizeof *j);
    if (!j) {
        colo_set_err(err, errlen, "out of memory");
        return COLO_ENOMEM;
    }
    j->r = r;
    j->k = k;
    j->n = r->params.n > 0 ? r->params.n : 1;
    if (j->n > COLO_ENGINE_MAX_CHOICES) {
        colo_set_err(err, errlen, "n: at most %d choices", COLO_ENGINE_MAX_CHOICES);
        return COLO_EINVAL;
    }
    j->ch = colo_pool_calloc(r->pool, (size_t)j->n, sizeof *j->ch);
    j->out = colo_pool_calloc(r->pool, (size_t)j->n, sizeof *j->out);
    if (!j->ch || !j->out) {
        colo_set_err(err, errlen, "out of memory");
        return COLO_ENOMEM;
    }
    colo_engine_params gp = {.max_tokens = r->params.max_tokens, .temperature = r->params.temperature,
                          .top_p = r->params.top_p, .top_k = r->params.top_k, .seed = r->params.seed,
                          .n_stop = r->params.n_stop < COLO_ENGINE_MAX_STOP ? r->params.n_stop : COLO_ENGINE_MAX_STOP,
                          .n_stop_ids = r->params.n_stop_ids < COLO_ENGINE_MAX_STOP ? r->params.n_stop_ids
                                                                                 : COLO_ENGINE_MAX_STOP,
                          .logprobs = r->params.logprobs >= 0,
                          .json_object = r->params.json_object,
                          .json_schema = r->params.json_schema,
                          .top_logprobs = r->params.logprobs > 0 ? r->params.logprobs : 0,
                          .shape = {.presence = r->params.presence_penalty,
                                    .frequency = r->params.frequency_penalty,
                                    .repetition = r->params.repetition_penalty,
                                    .min_p = r->params.min_p,
                                    /* the same layout: {int32 token, float bias} */
                                    .bias = (const colo_sampler_bias *)r->params.logit_bias,
                                    .n_bias = r->params.n_logit_bias},
                          .priority = r->who.priority,
                          .batch = r->qi.batch,
                          .has_adapter = r->adapter_index > 0,
                          .adapter_slot = r->adapter_slot,
                          .no_spec = r->params.no_spec};
    /* the tenant (docs/TENANTS.md): whose outputs the suffix cache shares */
    char tenant[sizeof r->who.organisation + sizeof r->who.project + 1];
    snprintf(tenant, sizeof tenant, "%s/%s", r->who.organisation, r->who.project);
    gp.tenant = tenant;
    for (int i = 0; i < gp.n_stop; i++)
        gp.stop[i] = r->params.stop[i];
    for (int i = 0; i < gp.n_stop_ids; i++)
        gp.stop_ids[i] = r->params.stop_ids[i];
    colo_engine_callbacks cbs[COLO_ENGINE_MAX_CHOICES];
    colo_engine_seq *seqs[COLO_ENGINE_MAX_CHOICES];
    /* a reasoning model's chat: its output begins inside <think> (its
     * template opens it), its reasoning kept apart from the answer */
    r->reasons = r->in.messages && k->chat.format == COLO_CHAT_DEEPSEEK_R1 && !k->chat.close_think;
    for (int i = 0; i < j->n; i++) {
        j->ch[i] = (llama_choice){.j = j, .index = i, .think = r->reasons ? 1 : 0};
        cbs[i] = (colo_engine_callbacks){job_on_token, job_on_done, &j->ch[i]};
    }
    colo_status st = colo_engine_add_n(k->eng, r->tok.ids, r->tok.n, &gp, j->n, cbs, seqs, err, errlen);
    if (st != COLO_OK)
        return st;
    for (int i = 0; i < j->n; i++)
        j->ch[i].seq = seqs[i];
    r->priv = j;
    return COLO_OK;
}

static colo_status step(void *inst, colo_cosched_member *member, int *n_tokens)
{
    llama_kind *k = inst;
    if (!k->eng) {
        *n_tokens = 0;
        return COLO_OK;
    }
    return colo_engine_step(k->eng, member, n_tokens);
}

static void cancel(void *inst, colo_request *r, colo_status status, const char *msg)
{
    llama_kind *k = inst;
    llama_job *j = r->priv;
    if (!j)
        return;
    if (j->why == COLO_OK) {
        j->why = status;
        j->why_msg = msg;
    }
    /* The last choice's end hands the request back (it may be freed at
     * once): take the sequences before ending any. */
    colo_engine_seq *seqs[COLO_ENGINE_MAX_CHOICES];
    int n = 0;
    for (int i = 0; i < j->n; i++)
        if (j->ch[i].seq)
            seqs[n++] = j->ch[i].seq;
    for (int i = 0; i < n; i++)
        colo_engine_cancel(k->eng, seqs[i]);
}

static bool started(void *inst, const colo_request *r)
{
    (void)inst;
    const llama_job *j = r->priv;
    for (int i = 0; j && i < j->n; i++)
        if (!j->ch[i].seq || colo_engine_seq_started(j->ch[i].seq))
            return true;
    return false;
}

static colo_status detokenize(void *inst, const int32_t *ids, int n, colo_pool *pool, const char **text, size_t *len,
                              char *err, size_t errlen)
{
    llama_kind *k = inst;
    const colo_tokenizer *t = k->tok; /* the kind's own: also while asleep */
    size_t cap = (size_t)n * 16 + 1, o = 0;
    char *buf = colo_pool_alloc(pool, cap);
    for (int i = 0; buf && i < n; i++) {
        size_t l;
        colo_status st;
        while ((st = colo_tokenizer_decode(t, ids[i], buf + o, cap - o - 1, &l)) == COLO_ENOMEM) {
            char *bigger = colo_pool_alloc(pool, cap * 2);
            if (!bigger)
                break;
            memcpy(bigger, buf, o);
            buf = bigger, cap *= 2;
        }
        if (st == COLO_EINVAL) {
            colo_set_err(err, errlen, "token %d is not in the vocabulary (%d tokens)", ids[i],
                         colo_tokenizer_n_vocab(t));
            return COLO_EINVAL;
        }
        if (st != COLO_OK)
            buf = NULL;
        else
            o += l;
    }
    if (!buf) {
        colo_set_err(err, errlen, "out of memory");
        return COLO_ENOMEM;
    }
    buf[o] = 0;
    *text = buf;
    *len = o;
    return COLO_OK;
}

/* ---- LoRA adapters ------------------------------------------------------------------ */

static colo_status adapter_add(void *inst, const char *path, float scale, int *slot, char *err, size_t errlen)
{
    llama_kind *k = inst;
    int sl = -1;
    for (int i = 0; i < COLO_LORA_SLOTS && sl < 0; i++)
        if (!k->lora[i].on)
            sl = i;
    if (sl < 0) {
        colo_set_err(err, errlen, "the model holds %d adapters already", COLO_LORA_SLOTS);
        return COLO_ENOMEM;
    }
    if (strlen(path) >= sizeof k->lora[sl].path) {
        colo_set_err(err, errlen, "the adapter's path is too long");
        return COLO_EINVAL;
    }
    /* counted as at load and at wake: awake or asleep, it must fit the
     * adapters' room, so that the model wakes as it was put to sleep */
    colo_lora_info li;
    colo_status st = colo_lora_check(k->mc.path, path, &li, err, errlen);
    if (st != COLO_OK)
        return st;
    size_t held = adapters_room(k, NULL), need = adapters_room(k, &li);
    if (need > k->adapter_room_bytes) {
        colo_set_err(err, errlen,
                     "%s: the adapters would take %zu bytes with it (%zu without), over the %zu kept for them "
                     "(adapter_memory_bytes keeps room for adapters added at run time)",
                     path, need, held, k->adapter_room_bytes);
        return COLO_ENOMEM;
    }
    if (k->m) {
        st = colo_llama_lora_load_in(k->m, k->s, path, scale, sl, err, errlen);
        if (st == COLO_ENOMEM)
            colo_set_err(err + strlen(err), errlen > strlen(err) ? errlen - strlen(err) : 0,
                         " (adapter_memory_bytes keeps room for adapters added at run time)");
        if (st != COLO_OK)
            return st;
        colo_llama_lora_get(k->m, sl, &li); /* the file as loaded */
    }
    k->lora[sl].on = true;
    k->lora[sl].scale = scale;
    k->lora[sl].arena_bytes = colo_lora_arena_bytes(&li);
    k->lora[sl].rank = li.rank;
    snprintf(k->lora[sl].path, sizeof k->lora[sl].path, "%s", path);
    *slot = sl;
    return COLO_OK;
}

static void adapter_remove(void *inst, int slot)
{
    llama_kind *k = inst;
    if (slot < 0 || slot >= COLO_LORA_SLOTS || !k->lora[slot].on)
        return;
    if (k->m)
        colo_llama_lora_unload(k->m, k->s, slot);
    k->lora[slot].on = false;
}

static void adapter_info(void *inst, int slot, int *rank, size_t *bytes)
{
    llama_kind *k = inst;
    colo_lora_info li;
    bool on = k->m && colo_llama_lora_get(k->m, slot, &li) == COLO_OK;
    *rank = on ? li.rank : 0;
    *bytes = on ? li.bytes : 0;
}

/* A file's tokenizer and logits width; NULL with a message. */
static colo_tokenizer *vocab_of(const colo_model_cfg *mc, int *n_logits, colo_status *st, char *err, size_t errlen)
{
    colo_llama_memory mem;
    char msg[512];
    if ((*st = colo_llama_memory_need(mc->path, mc->kv_dtype, &mem, msg, sizeof msg)) != COLO_OK) {
        colo_set_err(err, errlen, "model %s: %s", mc->name, msg);
        return NULL;
    }
    *n_logits = mem.hp.n_vocab;
    colo_gguf *g = colo_gguf_open(mc->path, msg, sizeof msg);
    colo_tokenizer *t = g ? colo_tokenizer_from_gguf(g, msg, sizeof msg) : NULL;
    colo_gguf_close(g);
    if (!t) {
        *st = COLO_EFORMAT;
        colo_set_err(err, errlen, "model %s: %s", mc->name, msg);
    }
    return t;
}

/* The same vocabulary: as many logits and tokens, and every token the
 * same text and kind (special or not), so that an id means one token in
 * both models. */
static colo_status draft_check(const colo_model_cfg *target, const colo_model_cfg *draft, char *err, size_t errlen)
{
    int nt = 0, nd = 0;
    colo_status st = COLO_OK;
    colo_tokenizer *tt = vocab_of(target, &nt, &st, err, errlen), *td = NULL;
    if (!tt || !(td = vocab_of(draft, &nd, &st, err, errlen)))
        goto out;
    st = COLO_EINVAL;
    if (nt != nd || colo_tokenizer_n_vocab(tt) != colo_tokenizer_n_vocab(td)) {
        colo_set_err(err, errlen,
                     "model %s and its draft model %s do not share a vocabulary: %d and %d tokens (%d and %d logits)",
                     target->name, draft->name, colo_tokenizer_n_vocab(tt), colo_tokenizer_n_vocab(td), nt, nd);
        goto out;
    }
    for (int i = 0; i < colo_tokenizer_n_vocab(tt); i++) {
        const char *a = colo_tokenizer_token_text(tt, i), *b = colo_tokenizer_token_text(td, i);
        if (strcmp(a ? a : "", b ? b : "") || colo_tokenizer_is_special(tt, i) != colo_tokenizer_is_special(td, i)) {
            colo_set_err(err, errlen,
                         "model %s and its draft model %s do not share a vocabulary: token %d is '%.40s' in %s and "
                         "'%.40s' in %s",
                         target->name, draft->name, i, a ? a : "", target->name, b ? b : "", draft->name);
            goto out;
        }
    }
    st = COLO_OK;
out:
    colo_tokenizer_free(tt);
    colo_tokenizer_free(td);
    return st;
}

/* The model and its KV cache while awake (executor between steps). */
static void *draft_model(void *inst)
{
    llama_kind *k = inst;
    return k->eng ? k->m : NULL;
}

const colo_model_kind colo_kind_llama = {
    .name = "llama",
    .task = COLO_TASK_GENERATE,
    .memory_need = memory_need,
    .load = load,
    .free = kind_free,
    .tokenize = tokenize,
    .info = info,
    .detokenize = detokenize,
    .admit = admit,
    .step = step,
    .cancel = cancel,
    .started = started,
    .run_batch = NULL,
    .sleep = kind_sleep,
    .wake = kind_wake,
    .trim = kind_trim,
    .adapter_add = adapter_add,
    .adapter_remove = adapter_remove,
    .adapter_info = adapter_info,
    .draft_check = draft_check,
    .draft_model = draft_model,
};
