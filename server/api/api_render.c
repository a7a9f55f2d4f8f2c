/* JSON bodies and SSE events of the model endpoints. */
#include "server/api/api_impl.h"
#include "server/api/api_tools.h"
#include "runtime/utf8.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int colo_api_status_http(colo_status st)
{
    switch (st) {
    case COLO_OK: return 200;
    case COLO_EINVAL:
    case COLO_ETOOLONG: return 400;
    case COLO_EAGAIN: return 429;
    case COLO_ERR: return 500; /* the request's own computation failed (a non-finite output) */
    default: return 503;
    }
}

const char *colo_api_status_code(colo_status st)
{
    switch (st) {
    case COLO_EINVAL: return "invalid_request";
    case COLO_ETOOLONG: return "context_length_exceeded";
    case COLO_EAGAIN: return "queue_full";
    case COLO_ETIMEDOUT: return "queue_timeout";
    case COLO_ENOMEM: return "out_of_memory";
    case COLO_ECANCELED: return "canceled";
    case COLO_EDEVICE:
    case COLO_EFATAL: return "model_failed";
    default: return "internal_error";
    }
}

json_t *colo_api_json_text(const char *t, size_t n)
{
    json_t *j = json_stringn(t ? t : "", t ? n : 0);
    if (j || !t)
        return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = colo_utf8_decode((const unsigned char *)t + i, n - i, &cp);
        if (cp == UINT32_MAX || cp == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += (size_t)l;
            continue;
        }
        memcpy(buf + o, t + i, (size_t)l);
        o += (size_t)l;
        i += (size_t)l;
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

json_t *colo_api_usage_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    if (c->r->task == COLO_TASK_EMBED)
        return json_pack("{s:i,s:i}", "prompt_tokens", o->n_input_tokens, "total_tokens", o->n_input_tokens);
    int completion = o->n_choices > 1 ? o->n_completion_tokens : o->n_tokens; /* n choices: all of them */
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", o->n_input_tokens, "completion_tokens", completion,
                     "total_tokens", o->n_input_tokens + completion, "prompt_tokens_details", "cached_tokens",
                     o->n_cached_tokens);
}

static json_t *timing_json(const colo_req_outcome *o)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "queue_ms", o->queue_ms, "prefill_ms", o->prefill_ms, "decode_ms",
                     o->decode_ms, "total_ms", o->total_ms, "ttft_ms", o->ttft_ms);
}

static json_t *tokens_json(const int32_t *t, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(t[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static char *base64_floats(const float *v, int n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = (const unsigned char *)v; /* little-endian host */
    size_t len = (size_t)n * 4, o = 0;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        out[o++] = tbl[x >> 18 & 63];
        out[o++] = tbl[x >> 12 & 63];
        out[o++] = i + 1 < len ? tbl[x >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? tbl[x & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static json_t *embedding_json(const float *v, int dim, bool b64)
{
    if (b64) {
        char *s = base64_floats(v, dim);
        json_t *j = s ? json_string(s) : NULL;
        free(s);
        return j;
    }
    json_t *a = json_array();
    for (int i = 0; a && i < dim; i++)
        if (json_array_append_new(a, json_real(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *colo_api_infer_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    json_t *j = json_pack("{s:s,s:s}", "id", colo_http_req_id(c->http), "model", c->name);
    if (!j)
        return NULL;
    int bad = 0;
    if (c->r->task == COLO_TASK_GENERATE) {
        bad |= json_object_set_new(j, "text", colo_api_json_text(o->text ? o->text : "", o->text_len));
        bad |= json_object_set_new(j, "tokens", tokens_json(o->tokens, o->n_tokens));
        bad |= json_object_set_new(j, "finish_reason", json_string(o->finish_reason ? o->finish_reason : "stop"));
        if (c->r->reasons)
            bad |= json_object_set_new(j, "reasoning",
                                       colo_api_json_text(o->reasoning ? o->reasoning : "", o->reasoning_len));
        if (c->r->params.logprobs >= 0 && o->logprobs)
            bad |= json_object_set_new(j, "logprobs", colo_api_infer_logprobs_json(c, o->tokens, o->logprobs, o->n_tokens, 0));
        if (o->choices) { /* n > 1: every choice (the first is also above) */
            json_t *chs = json_array();
            for (int i = 0; chs && i < o->n_choices; i++) {
                const colo_req_choice *ch = &o->choices[i];
                json_t *e = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text",
                                      colo_api_json_text(ch->text ? ch->text : "", ch->text_len), "tokens",
                                      tokens_json(ch->tokens, ch->n_tokens), "finish_reason",
                                      ch->finish_reason ? ch->finish_reason : "stop");
                if (e && c->r->params.logprobs >= 0 && ch->logprobs)
                    json_object_set_new(e, "logprobs",
                                        colo_api_infer_logprobs_json(c, ch->tokens, ch->logprobs, ch->n_tokens, 0));
                bad |= json_array_append_new(chs, e);
            }
            bad |= json_object_set_new(j, "choices", chs);
        }
    } else {
        json_t *arr = json_array();
        for (int i = 0; arr && i < c->r->in.n_texts; i++)
            bad |= json_array_append_new(arr, embedding_json(o->embeddings + (size_t)i * o->dim, o->dim, false));
        bad |= json_object_set_new(j, "embeddings", arr);
        bad |= json_object_set_new(j, "dim", json_integer(o->dim));
    }
    bad |= json_object_set_new(j, "usage", colo_api_usage_json(c));
    bad |= json_object_set_new(j, "timing", timing_json(o));
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *colo_api_embeddings_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    json_t *data = json_array();
    int bad = !data;
    for (int i = 0; data && i < c->r->in.n_texts; i++)
        bad |= json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i,
                                                     "embedding",
                                                     embedding_json(o->embeddings + (size_t)i * o->dim, o->dim,
                                                                    c->in.base64)));
    json_t *j = json_pack("{s:s,s:o,s:s,s:o}", "object", "list", "data", data, "model", c->name, "usage",
                          colo_api_usage_json(c));
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* A chat completion (chat) or a completion: the choices, each with its
 * text (after the prompt with echo), finish reason and logprobs. */
static json_t *choices_json(const api_call *c, bool chat)
{
    const colo_req_outcome *o = &c->r->out;
    bool echo = !chat && c->r->params.echo && c->r->in.prompt;
    size_t pl = echo ? c->r->in.prompt_len : 0;
    colo_req_choice one = {o->text,     o->text_len,    o->tokens,    o->n_tokens,       o->finish_reason,
                           o->stop_sequence, o->logprobs, o->reasoning, o->reasoning_len};
    const colo_req_choice *chs = o->choices ? o->choices : &one;
    int n = o->choices ? o->n_choices : 1;
    json_t *choices = json_array();
    for (int i = 0; choices && i < n; i++) {
        const colo_req_choice *ch = &chs[i];
        const char *fin = ch->finish_reason ? ch->finish_reason : "stop";
        json_t *text;
        if (echo) {
            char *both = colo_pool_alloc(c->r->pool, pl + ch->text_len + 1);
            if (both) {
                memcpy(both, c->r->in.prompt, pl);
                memcpy(both + pl, ch->text ? ch->text : "", ch->text_len);
            }
            text = both ? colo_api_json_text(both, pl + ch->text_len) : NULL;
        } else {
            text = colo_api_json_text(ch->text ? ch->text : "", ch->text_len);
        }
        json_t *lp = c->r->params.logprobs >= 0 && ch->logprobs
                         ? c->d->logprobs(c, ch->tokens, ch->logprobs, ch->n_tokens, pl)
                         : json_null();
        json_t *choice;
        if (chat && i == 0 && o->n_tool_calls > 0) { /* (calls are read from the first choice) */
            if (ch->text_len == 0)
                json_decref(text), text = json_null();
            choice = json_pack("{s:i,s:{s:s,s:o,s:o},s:s,s:o}", "index", i, "message", "role", "assistant",
                               "content", text, "tool_calls", colo_api_tool_calls_json(o, false), "finish_reason", fin,
                               "logprobs", lp);
        } else if (chat)
            choice = json_pack("{s:i,s:{s:s,s:o},s:s,s:o}", "index", i, "message", "role", "assistant", "content",
                               text, "finish_reason", fin, "logprobs", lp);
        else
            choice = json_pack("{s:i,s:o,s:s,s:o}", "index", i, "text", text, "finish_reason", fin, "logprobs", lp);
        /* a reasoning model's thinking, held out of content (DeepSeek's and vLLM's field) */
        json_t *msg = chat && c->r->reasons ? json_object_get(choice, "message") : NULL;
        if (msg)
            json_object_set_new(msg, "reasoning_content",
                                colo_api_json_text(ch->reasoning ? ch->reasoning : "", ch->reasoning_len));
        if (json_array_append_new(choices, choice)) {
            json_decref(choices);
            choices = NULL;
        }
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", c->oid, "object", chat ? "chat.completion" : "text_completion",
                     "created", (json_int_t)c->created, "model", c->name, "choices", choices, "usage",
                     colo_api_usage_json(c));
}

json_t *colo_api_chat_json(const api_call *c) { return choices_json(c, true); }
json_t *colo_api_completion_json(const api_call *c) { return choices_json(c, false); }

json_t *colo_api_chat_chunk_json(const api_call *c, int index, const char *delta_text, size_t len, const char *finish,
                                 bool role, json_t *logprobs)
{
    if (!logprobs)
        logprobs = json_null();
    json_t *delta = json_object();
    if (delta && role)
        json_object_set_new(delta, "role", json_string("assistant"));
    if (delta && delta_text)
        json_object_set_new(delta, "content", colo_api_json_text(delta_text, len));
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", c->oid, "object",
                     "chat.completion.chunk", "created", (json_int_t)c->created, "model", c->name,
                     "choices", "index", index, "delta", delta ? delta : json_null(), "finish_reason",
                     finish ? json_string(finish) : json_null(), "logprobs", logprobs);
}

json_t *colo_api_completion_chunk_json(const api_call *c, int index, const char *delta_text, size_t len,
                                       const char *finish, bool role, json_t *logprobs)
{
    (void)role;
    if (!logprobs)
        logprobs = json_null();
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", c->oid, "object", "text_completion",
                     "created", (json_int_t)c->created, "model", c->name, "choices", "index", index, "text",
                     colo_api_json_text(delta_text ? delta_text : "", delta_text ? len : 0), "finish_reason",
                     finish ? json_string(finish) : json_null(), "logprobs", logprobs);
}

static json_t *memory_json(const colo_served_info *in)
{
    json_t *m = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "limit_bytes", (json_int_t)in->mem.limit_bytes, "used_bytes",
                          (json_int_t)in->mem.used_bytes, "peak_bytes", (json_int_t)in->mem.peak_bytes,
                          "weights_bytes", (json_int_t)in->weight_bytes, "activations_bytes",
                          (json_int_t)in->act_bytes, "free_bytes",
                          (json_int_t)(in->mem.limit_bytes > in->mem.used_bytes
                                           ? in->mem.limit_bytes - in->mem.used_bytes
                                           : 0));
    if (m) {
        /* elastic memory: the guarantee, the ceiling (limit_bytes) and what is lent either way */
        json_object_set_new(m, "guaranteed_bytes", json_integer((json_int_t)in->mem.guaranteed_bytes));
        json_object_set_new(m, "ceiling_bytes", json_integer((json_int_t)in->mem.limit_bytes));
        json_object_set_new(m, "borrowed_bytes", json_integer((json_int_t)in->mem.borrowed_bytes));
        json_object_set_new(m, "lent_bytes", json_integer((json_int_t)in->mem.lent_bytes));
        json_object_set_new(m, "reclaims", json_integer((json_int_t)in->mem.reclaims));
    }
    if (m && in->task == COLO_TASK_GENERATE)
        json_object_set_new(m, "kv_cache",
                            json_pack("{s:I,s:I,s:i}", "reserved_bytes", (json_int_t)in->kv_bytes, "in_use_bytes",
                                      (json_int_t)in->kv_used_bytes, "tokens", in->kv_tokens));
    return m;
}

json_t *colo_api_model_json(const colo_api *a, const colo_registry_model *am)
{
    colo_served_info in;
    colo_served_get_info(am->m, &in);
    const colo_model_cfg *mc = colo_served_config(am->m);
    const colo_batching_cfg *b = &mc->batching;
    json_t *pref = json_array();
    for (int i = 0; pref && i < b->n_preferred; i++)
        json_array_append_new(pref, json_integer(b->preferred_batch_size[i]));
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:s,s:o,s:{s:i,s:o,s:i,s:i,s:i,s:i,s:i},s:i,s:i,s:i,s:i,s:f}", "id", in.name,
        "object", "model", "created", (json_int_t)a->created, "owned_by", "colo", "kind", in.kind, "task",
        colo_task_name(in.task), "state", colo_served_state_name(in.state), "priority",
        colo_priority_name(in.priority), "memory", memory_json(&in), "batching", "max_batch_size", b->max_batch_size,
        "preferred_batch_size", pref ? pref : json_null(), "max_queue_delay_us", b->max_queue_delay_us, "max_queue",
        b->max_queue, "max_queue_tokens", b->max_queue_tokens, "queue_timeout_ms", b->queue_timeout_ms, "max_batch_prefill_tokens",
        b->max_batch_prefill_tokens, "queue_depth", in.queue_depth, "running", in.running, "max_seq_len",
        in.max_seq_len, "n_vocab", in.n_vocab, "load_ms", in.load_ms);
    if (!o)
        return NULL;
    json_object_set_new(o, "lifecycle",
                        json_pack("{s:I,s:I,s:f,s:i,s:b,s:I,s:I,s:I}", "sleeps", (json_int_t)in.sleeps, "wakes",
                                  (json_int_t)in.wakes, "last_wake_ms", in.last_wake_ms, "keep_alive_ms",
                                  in.keep_alive_ms, "pinned", in.pinned, "evictions", (json_int_t)in.evictions,
                                  "sleep_preemptions", (json_int_t)in.sleep_preemptions, "guarantee_lends",
                                  (json_int_t)in.trims));
    if (in.task == COLO_TASK_GENERATE)
        json_object_set_new(o, "kv_cache",
                            json_pack("{s:s,s:i,s:i,s:i,s:I,s:i}", "dtype", colo_dtype_name(mc->kv_dtype), "blocks",
                                      in.kv_blocks, "free_blocks", in.kv_free_blocks,
                                      "block_size", in.kv_block_size, "preemptions", (json_int_t)in.preemptions,
                                      "running_sequences", in.in_batch));
    if (in.task == COLO_TASK_GENERATE)
        json_object_set_new(o, "prefix_cache",
                            json_pack("{s:b,s:I,s:I,s:I}", "enabled", in.prefix_cache, "queries",
                                      (json_int_t)in.prefix_queries, "hit_tokens", (json_int_t)in.prefix_hit_tokens,
                                      "cached_bytes", (json_int_t)in.prefix_cached_bytes));
    else
        json_object_set_new(o, "dim", json_integer(in.dim));
    json_t *slo = colo_api_slo_json(a, am);
    if (slo)
        json_object_set_new(o, "slo", slo);
    if (in.n_adapters) {
        colo_served_adapter_info *ads = malloc(COLO_SERVED_MAX_ADAPTERS * sizeof *ads);
        json_t *names = json_array();
        int n = ads ? colo_served_adapter_list(am->m, ads, COLO_SERVED_MAX_ADAPTERS) : 0;
        for (int i = 0; names && i < n; i++)
            json_array_append_new(names, json_string(ads[i].cfg.name));
        free(ads);
        json_object_set_new(o, "adapters", names ? names : json_null());
        json_object_set_new(json_object_get(o, "memory"), "adapter_bytes", json_integer((json_int_t)in.adapter_bytes));
    }
    if (in.error[0])
        json_object_set_new(o, "error", json_string(in.error));
    return o;
}

json_t *colo_api_adapter_json(const colo_api *a, const colo_registry_model *base,
                              const colo_served_adapter_info *ad)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:f,s:{s:I},s:i,s:I,s:f}", "id", ad->cfg.name,
                          "object", "model", "created", (json_int_t)a->created, "owned_by", "colo", "kind", "lora",
                          "base", base->name, "task", "generation", "state", colo_adapter_state_name(ad->state),
                          "priority", colo_priority_name(ad->cfg.priority), "rank", ad->rank, "scale", ad->cfg.scale,
                          "memory", "bytes", (json_int_t)ad->bytes, "running", ad->running, "requests",
                          (json_int_t)ad->requests, "load_ms", ad->load_ms);
    if (!o)
        return NULL;
    json_object_set_new(o, "base_state", json_string(colo_served_state_name(colo_served_get_state(base->m))));
    json_t *slo = colo_api_slo_json_of(a, ad->cfg.name, &ad->cfg.sla);
    if (slo)
        json_object_set_new(o, "slo", slo);
    if (ad->error[0])
        json_object_set_new(o, "error", json_string(ad->error));
    return o;
}

/* ---- log-probabilities ---------------------------------------------------------------- */

/* A token's text and bytes (OpenAI's "token" and "bytes"). The text is
 * decoded into a pool of this call's own, not the request's: a stream's
 * events are rendered on the loop thread while its executor still
 * allocates from the request's pool, which has no lock (and a long stream
 * would grow it by every top logprob's text). */
static json_t *token_text(const api_call *c, int32_t id, json_t **bytes)
{
    const char *t = "";
    size_t n = 0;
    char err[128];
    colo_pool *scratch = colo_pool_create();
    if (!scratch || colo_served_detokenize(c->am->m, &id, 1, scratch, &t, &n, err, sizeof err) != COLO_OK)
        t = "", n = 0;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; *bytes && i < n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)t[i]));
    }
    json_t *j = colo_api_json_text(t, n);
    colo_pool_destroy(scratch);
    return j;
}

/* Chat's entry for one token: {token, logprob, bytes, top_logprobs: [...]}. */
static json_t *chat_lp_entry(const api_call *c, int32_t id, const colo_req_token_logprobs *lp)
{
    json_t *bytes = NULL, *top = json_array();
    json_t *t = token_text(c, id, &bytes);
    json_t *e = json_pack("{s:o,s:f,s:o,s:o}", "token", t, "logprob", (double)lp->logprob, "bytes",
                          bytes ? bytes : json_null(), "top_logprobs", top ? top : json_array());
    for (int k = 0; top && k < lp->n_top; k++) {
        json_t *b = NULL;
        json_t *tt = token_text(c, lp->top_ids[k], &b);
        json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", tt, "logprob", (double)lp->top_logprobs[k],
                                             "bytes", b ? b : json_null()));
    }
    return e;
}

json_t *colo_api_chat_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps, int n,
                                    size_t text_offset)
{
    (void)text_offset;
    json_t *content = json_array();
    for (int i = 0; content && i < n; i++)
        json_array_append_new(content, chat_lp_entry(c, ids[i], &lps[i]));
    return json_pack("{s:o}", "content", content ? content : json_array());
}

json_t *colo_api_infer_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps, int n,
                                     size_t text_offset)
{
    (void)c, (void)text_offset;
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        json_t *top = json_array();
        for (int k = 0; top && k < lps[i].n_top; k++)
            json_array_append_new(top, json_pack("{s:i,s:f}", "token", lps[i].top_ids[k], "logprob",
                                                 (double)lps[i].top_logprobs[k]));
        json_array_append_new(a, json_pack("{s:i,s:f,s:o}", "token", ids[i], "logprob", (double)lps[i].logprob,
                                           "top", top ? top : json_array()));
    }
    return a;
}

json_t *colo_api_completion_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps,
                                          int n, size_t text_offset)
{
    json_t *toks = json_array(), *lp = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = text_offset;
    for (int i = 0; toks && lp && tops && offs && i < n; i++) {
        json_t *t = token_text(c, ids[i], NULL);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(t);
        json_array_append_new(toks, t);
        json_array_append_new(lp, json_real(lps[i].logprob));
        json_t *top = json_object();
        for (int k = 0; top && k < lps[i].n_top; k++) {
            json_t *tt = token_text(c, lps[i].top_ids[k], NULL);
            if (tt && !json_object_get(top, json_string_value(tt)))
                json_object_set_new(top, json_string_value(tt), json_real(lps[i].top_logprobs[k]));
            json_decref(tt);
        }
        json_array_append_new(tops, top ? top : json_object());
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks ? toks : json_array(), "token_logprobs",
                     lp ? lp : json_array(), "top_logprobs", tops ? tops : json_array(), "text_offset",
                     offs ? offs : json_array());
}
