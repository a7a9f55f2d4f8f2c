/* The model endpoints: decode into the request record, submit to the
 * model, and answer on the loop thread from what its executor posts. */
#include "server/api_impl.h"
#include "server/api_tools.h"
#include "runtime/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INPUTS 2048

static api_model *find_model(colo_api *a, const char *name)
{
    for (int i = 0; i < a->n_models; i++)
        if (!a->models[i].unloaded && !strcmp(a->models[i].name, name))
            return &a->models[i];
    return NULL;
}

/* Frees the request and everything it holds (its pool). */
static void call_free(api_call *c)
{
    pthread_mutex_destroy(&c->mu);
    free(c->fill.data);
    free(c->drain.data);
    colo_request_free(c->r);
}

/* ---- executor side: tokens and the outcome, handed to the loop ----------------- */

static void deliver_tokens(void *ud);
static void deliver_done(void *ud);

static bool buf_reserve(tok_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d)
        return false;
    b->data = d;
    b->cap = cap;
    return true;
}

#define TOK_HEAD 10 /* bytes before each piece in a token buffer */

/* Whether a stream with unsent bytes of its own must be canceled (see
 * COLO_API_STREAM_MAX_BYTES). Any thread. */
static bool stream_over(const colo_api *a, size_t unsent)
{
    if (unsent > COLO_API_STREAM_MAX_BYTES)
        return true;
    size_t total = colo_http_server_pending_bytes(a->http) + atomic_load(&a->tok_bytes);
    return total > a->max_unsent_bytes && unsent > COLO_API_STREAM_SLOW_BYTES;
}

static bool exec_on_token(colo_request *r, int32_t token, const char *piece, size_t len)
{
    api_call *c = r->front;
    colo_api *a = c->api;
    bool post = false, ok = true;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->overflow) || stream_over(a, c->fill.len + atomic_load(&c->unsent_bytes))) {
        atomic_store(&c->overflow, true);
        ok = false; /* the client does not read: the executor cancels the request */
    } else if (buf_reserve(&c->fill, TOK_HEAD + len + sizeof(colo_req_token_logprobs))) {
        /* token, length, whether logprobs follow the piece, the choice, the piece, the logprobs */
        uint32_t l = (uint32_t)len;
        uint8_t has_lp = r->token_logprobs != NULL;
        char *o = c->fill.data + c->fill.len;
        memcpy(o, &token, 4);
        memcpy(o + 4, &l, 4);
        o[8] = (char)has_lp;
        o[9] = (char)(r->token_choice > 0 && r->token_choice < COLO_REQ_MAX_CHOICES ? r->token_choice : 0);
        memcpy(o + TOK_HEAD, piece, len);
        if (has_lp)
            memcpy(o + TOK_HEAD + len, r->token_logprobs, sizeof *r->token_logprobs);
        size_t rec = TOK_HEAD + len + (has_lp ? sizeof(colo_req_token_logprobs) : 0);
        c->fill.len += rec;
        atomic_fetch_add(&a->tok_bytes, rec);
        post = !c->tok_posted;
        c->tok_posted = true;
    } /* else: out of memory; the final answer still has the whole text */
    pthread_mutex_unlock(&c->mu);
    if (post)
        colo_http_server_post(c->api->http, &c->tok_call);
    return ok;
}

static void exec_on_done(colo_request *r)
{
    api_call *c = r->front;
    colo_http_server_post(c->api->http, &c->done_call);
}

/* ---- loop side: streaming ------------------------------------------------------- */

static colo_status sse_json(api_call *c, json_t *j)
{
    if (!j)
        return COLO_ENOMEM;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s)
        return COLO_ENOMEM;
    colo_status st = colo_http_sse_send(c->http, NULL, s);
    free(s);
    return st;
}

/* A named event (Anthropic's streams name every event). */
static colo_status sse_event(api_call *c, const char *event, json_t *j)
{
    if (!j)
        return COLO_ENOMEM;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s)
        return COLO_ENOMEM;
    colo_status st = colo_http_sse_send(c->http, event, s);
    free(s);
    return st;
}

static bool begin_stream(api_call *c)
{
    if (c->started)
        return true;
    if (colo_http_stream_begin(c->http, 200, "text/event-stream") != COLO_OK)
        return false;
    c->started = true;
    int n = c->r->params.n > 1 ? c->r->params.n : 1;
    for (int i = 0; i < n; i++) { /* each choice begins with its role (chat) or the prompt (echo) */
        if (c->ep == COLO_API_CHAT)
            sse_json(c, colo_api_chunk_choice_json(c, i, "", 0, NULL, true, NULL));
        if (c->ep == COLO_API_COMPLETIONS && c->r->params.echo && c->r->in.prompt) {
            sse_json(c, colo_api_chunk_choice_json(c, i, c->r->in.prompt, c->r->in.prompt_len, NULL, false, NULL));
            *(i ? &c->choice_sent[i] : &c->text_sent) = c->r->in.prompt_len;
        }
    }
    if (c->ep == COLO_API_MESSAGES) {
        sse_event(c, "message_start", colo_api_anthropic_start_json(c));
        sse_event(c, "content_block_start",
                  json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0, "content_block",
                            "type", "text", "text", ""));
        sse_event(c, "ping", json_pack("{s:s}", "type", "ping"));
    }
    return true;
}

static bool client_gone(const api_call *c) { return c->aborted || colo_http_req_aborted(c->http); }

static void deliver_tokens(void *ud)
{
    api_call *c = ud;
    pthread_mutex_lock(&c->mu);
    tok_buf t = c->fill;
    c->fill = c->drain;
    c->fill.len = 0;
    c->tok_posted = false;
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_sub(&c->api->tok_bytes, t.len);
    for (size_t o = 0; o + TOK_HEAD <= t.len && !client_gone(c) && begin_stream(c);) {
        /* Rendered events are several times the tokens' size: what counts is
         * what is queued. Its client does not read: the request is canceled
         * (unless its executor did so) and deliver_done closes the connection. */
        if (atomic_load(&c->overflow) || stream_over(c->api, colo_http_req_pending_bytes(c->http))) {
            if (!atomic_exchange(&c->overflow, true))
                colo_served_cancel(c->am->m, c->r);
            break;
        }
        int32_t token;
        uint32_t len;
        colo_req_token_logprobs lp;
        memcpy(&token, t.data + o, 4);
        memcpy(&len, t.data + o + 4, 4);
        bool has_lp = t.data[o + 8] != 0;
        int ci = (unsigned char)t.data[o + 9];
        size_t *sent = ci ? &c->choice_sent[ci] : &c->text_sent;
        const char *piece = t.data + o + TOK_HEAD;
        if (has_lp)
            memcpy(&lp, piece + len, sizeof lp);
        if (c->ep == COLO_API_INFER) {
            json_t *ev = json_pack("{s:s,s:i,s:o}", "id", colo_http_req_id(c->http), "token", token, "text",
                                   colo_api_json_text(piece, len));
            if (ev && c->r->params.n > 1)
                json_object_set_new(ev, "index", json_integer(ci));
            if (ev && has_lp)
                json_object_set_new(ev, "logprobs", colo_api_logprobs_json(c, &token, &lp, 1, 0));
            sse_json(c, ev);
        } else if (colo_api_tools_hold_stream(c->r)) {
            /* held until the output is known to be a call or text (finish_stream) */
            o += TOK_HEAD + len + (has_lp ? sizeof lp : 0);
            continue;
        } else if (c->ep == COLO_API_MESSAGES && len) {
            sse_event(c, "content_block_delta", colo_api_anthropic_delta_json(piece, len));
        } else if (has_lp && token >= 0) { /* every token gets its chunk, text or not */
            sse_json(c, colo_api_chunk_choice_json(c, ci, piece, len, NULL, false,
                                                   colo_api_logprobs_json(c, &token, &lp, 1, *sent)));
        } else if (len) {
            sse_json(c, colo_api_chunk_choice_json(c, ci, piece, len, NULL, false, NULL));
        }
        *sent += len;
        o += TOK_HEAD + len + (has_lp ? sizeof lp : 0);
    }
    t.len = 0;
    c->drain = t;
    atomic_store(&c->unsent_bytes, colo_http_req_pending_bytes(c->http));
}

/* ---- loop side: final answers --------------------------------------------------- */

/* A held stream's output, now whole: its text, then its calls (OpenAI:
 * a chunk naming each call, then one with its arguments; Anthropic: a
 * tool_use block each, its input as one input_json_delta). */
static void send_held(api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    if (c->ep == COLO_API_MESSAGES) {
        if (o->text_len)
            sse_event(c, "content_block_delta", colo_api_anthropic_delta_json(o->text, o->text_len));
        sse_event(c, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
        json_t *blocks = json_array();
        if (!blocks || colo_api_tool_use_blocks(o, blocks) != COLO_OK) {
            json_decref(blocks);
            return;
        }
        for (int i = 0; i < o->n_tool_calls; i++) {
            json_t *b = json_array_get(blocks, (size_t)i);
            sse_event(c, "content_block_start",
                      json_pack("{s:s,s:i,s:{s:s,s:O,s:O,s:{}}}", "type", "content_block_start", "index", i + 1,
                                "content_block", "type", "tool_use", "id", json_object_get(b, "id"), "name",
                                json_object_get(b, "name"), "input"));
            sse_event(c, "content_block_delta",
                      json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", i + 1, "delta",
                                "type", "input_json_delta", "partial_json", o->tool_calls[i].arguments));
            sse_event(c, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", i + 1));
        }
        json_decref(blocks);
        return;
    }
    if (o->text_len)
        sse_json(c, colo_api_chunk_json(c, o->text, o->text_len, NULL, false));
    for (int i = 0; i < o->n_tool_calls; i++) {
        const colo_req_tool_call *t = &o->tool_calls[i];
        json_t *first = json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", i, "id", t->id, "type", "function",
                                  "function", "name", t->name, "arguments", "");
        json_t *args = json_pack("{s:i,s:{s:s}}", "index", i, "function", "arguments", t->arguments);
        json_t *ch1 = colo_api_chunk_json(c, NULL, 0, NULL, false), *ch2 = colo_api_chunk_json(c, NULL, 0, NULL, false);
        json_t *d1 = json_object_get(json_array_get(json_object_get(ch1, "choices"), 0), "delta");
        json_t *d2 = json_object_get(json_array_get(json_object_get(ch2, "choices"), 0), "delta");
        if (d1 && first)
            json_object_set_new(d1, "tool_calls", json_pack("[O]", first));
        if (d2 && args)
            json_object_set_new(d2, "tool_calls", json_pack("[O]", args));
        json_decref(first);
        json_decref(args);
        sse_json(c, ch1);
        sse_json(c, ch2);
    }
}

/* The error code and message of a failed outcome. */
static const char *outcome_code(const api_call *c)
{
    return c->cut && c->r->out.status == COLO_ECANCELED ? "shutting_down" : colo_api_status_code(c->r->out.status);
}

static const char *outcome_error(const api_call *c)
{
    if (c->cut && c->r->out.status == COLO_ECANCELED)
        return "the server is shutting down";
    return c->r->out.error ? c->r->out.error : "failed";
}

static void finish_stream(api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    bool held = o->status == COLO_OK && colo_api_tools_hold_stream(c->r);
    if (c->ep == COLO_API_MESSAGES) { /* no [DONE]: message_stop ends it */
        if (o->status != COLO_OK) {
            sse_event(c, "error", colo_api_anthropic_error_json(colo_api_status_http(o->status), outcome_error(c)));
        } else {
            if (held)
                send_held(c);
            else
                sse_event(c, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
            sse_event(c, "message_delta", colo_api_anthropic_end_json(c));
            sse_event(c, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        }
        colo_http_stream_end(c->http);
        return;
    }
    if (o->status != COLO_OK) {
        json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", outcome_code(c), "message", outcome_error(c),
                              "request_id", colo_http_req_id(c->http));
        sse_json(c, e);
    } else if (c->ep == COLO_API_INFER) {
        json_t *j = colo_api_infer_json(c);
        if (j) {
            char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
            json_decref(j);
            if (s)
                colo_http_sse_send(c->http, "done", s);
            free(s);
        }
    } else {
        if (held) { /* (tool calls are read from the first choice; the others go as text) */
            send_held(c);
            for (int i = 1; o->choices && i < o->n_choices; i++)
                if (o->choices[i].text_len)
                    sse_json(c, colo_api_chunk_choice_json(c, i, o->choices[i].text, o->choices[i].text_len, NULL,
                                                           false, NULL));
        }
        for (int i = 0; i < (o->choices ? o->n_choices : 1); i++) {
            const char *fin = i && o->choices ? o->choices[i].finish_reason : o->finish_reason;
            sse_json(c, colo_api_chunk_choice_json(c, i, NULL, 0, fin ? fin : "stop", false, NULL));
        }
        if (c->in.include_usage)
            sse_json(c, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", c->oid, "object",
                                  c->ep == COLO_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)c->created, "model", c->am->name, "choices", "usage",
                                  colo_api_usage_json(c)));
    }
    colo_http_sse_send(c->http, NULL, "[DONE]");
    colo_http_stream_end(c->http);
}

/* An error answer for st (before any stream began). */
static void answer_error(api_call *c, int status, colo_status st, const char *msg)
{
    colo_http_req *h = c->http;
    if (st == COLO_EAGAIN && c->r->slo.refused) { /* admission, after tokenizing off the loop */
        char ra[16];
        snprintf(ra, sizeof ra, "%d", c->r->slo.retry_after_s);
        colo_http_add_header(h, "Retry-After", ra);
        colo_http_error(h, status, "slo_unattainable", "model %s: %s", c->am->name, msg ? msg : "failed");
        return;
    }
    if (st == COLO_ETIMEDOUT || st == COLO_ENOMEM || st == COLO_EAGAIN)
        colo_http_add_header(h, "Retry-After", "1");
    if (c->cut && st == COLO_ECANCELED) {
        colo_http_add_header(h, "Retry-After", "1");
        colo_http_error(h, status, outcome_code(c), "model %s: %s", c->am->name, outcome_error(c));
        return;
    }
    colo_http_error(h, status, colo_api_status_code(st), "model %s: %s", c->am->name, msg ? msg : "failed");
}

static void deliver_done(void *ud)
{
    api_call *c = ud;
    colo_http_req *h = c->http;
    const colo_req_outcome *o = &c->r->out;
    deliver_tokens(c); /* what the executor appended before it finished */
    bool gone = client_gone(c);
    int status = o->status == COLO_OK ? 200 : gone ? 499 : colo_api_status_http(o->status);
    if (o->status == COLO_ECANCELED && !gone && !c->aborted)
        status = 503; /* the model stopped under it, or its client stopped reading */
    colo_api_record(c, status);
    colo_api_account(c, status); /* the ledger, before the answer leaves */
    colo_http_req_set_tokens(h, c->r->task != COLO_TASK_GENERATE ? o->n_input_tokens
                                                                 : (long)colo_api_completion_tokens(c->r));
    colo_http_req_set_queue_ms(h, o->queue_ms);
    if (c->started && status != 200)
        colo_http_req_set_log_status(h, status); /* its headers said 200; the log says what the ledger says */
    if (atomic_load(&c->overflow))
        colo_metric_add(c->api->m_stream_cut, (const char *const[]){c->am->name}, 1);
    if (atomic_load(&c->overflow) && c->started && !gone) {
        colo_http_stream_abort(h); /* it does not read: what it did not read is dropped */
    } else if (gone) {
        if (c->started)
            colo_http_stream_end(h);
        else
            colo_http_error(h, 499, "canceled", "the client went away"); /* only frees */
    } else if (c->started || (c->r->params.stream && o->status == COLO_OK && begin_stream(c))) {
        finish_stream(c);
    } else if (o->status != COLO_OK) {
        answer_error(c, status, o->status, o->error);
    } else {
        colo_http_respond_json(h, 200,
                               c->ep == COLO_API_INFER      ? colo_api_infer_json(c)
                               : c->ep == COLO_API_MESSAGES ? colo_api_anthropic_json(c)
                                                            : colo_api_openai_json(c));
    }
    call_free(c);
}

static void on_abort(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->aborted = true;
    colo_served_cancel(c->am->m, c->r);
}

/* The shutdown deadline: the request ends now, its stream with an error
 * event and [DONE] (deliver_done). */
static void on_cut(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->cut = true;
    colo_served_cancel(c->am->m, c->r);
}

/* ---- handlers -------------------------------------------------------------------- */

static void model_limits(colo_served *m, colo_api_limits *lim)
{
    colo_served_info in;
    colo_served_get_info(m, &in);
    lim->max_seq_len = in.max_seq_len > 0 ? in.max_seq_len : 1;
    lim->n_vocab = in.n_vocab;
    /* Only a bound on the body's work before tokenizing (a token is rarely
     * longer than 32 bytes); the model's kind checks the exact count. */
    lim->max_prompt_bytes = (size_t)lim->max_seq_len * 32;
    lim->max_inputs = MAX_INPUTS;
}

/* A request record with its front-end part, both in one pool. */
static api_call *call_create(colo_api *a, api_model *am, colo_http_req *req, colo_api_endpoint ep)
{
    colo_request *r = colo_request_create();
    api_call *c = r ? colo_pool_calloc(r->pool, 1, sizeof *c) : NULL;
    if (!c) {
        colo_request_free(r);
        return NULL;
    }
    if (pthread_mutex_init(&c->mu, NULL)) {
        colo_request_free(r);
        return NULL;
    }
    c->r = r;
    c->api = a;
    c->am = am;
    c->http = req;
    c->ep = ep;
    c->created = (long)time(NULL);
    c->in.r = r;
    c->tok_call = (colo_http_call){.fn = deliver_tokens, .ud = c};
    c->done_call = (colo_http_call){.fn = deliver_done, .ud = c};
    r->front = c;
    r->cb = (colo_req_callbacks){exec_on_token, exec_on_done, c};
    return c;
}

/* Answers a refused submission at once. */
static void refuse(api_call *c, colo_status st, const char *err)
{
    colo_http_req *req = c->http;
    int status = colo_api_status_http(st);
    colo_api_count_request(c->api, c->am->name, status);
    if (st == COLO_EINVAL) {
        colo_http_error(req, 400, "invalid_request", "%s", err);
    } else if (st == COLO_EAGAIN && c->r->slo.refused) {
        colo_api_record_slo(c);
        char ra[16];
        snprintf(ra, sizeof ra, "%d", c->r->slo.retry_after_s);
        colo_http_add_header(req, "Retry-After", ra);
        colo_http_error(req, 429, "slo_unattainable", "model %s: %s", c->am->name, c->r->slo.reason);
    } else if (st == COLO_EAGAIN) {
        colo_served_info in;
        colo_served_get_info(c->am->m, &in);
        colo_http_add_header(req, "Retry-After", "1");
        int max_tokens = colo_served_config(c->am->m)->batching.max_queue_tokens;
        char tokens[64] = "";
        if (max_tokens > 0)
            snprintf(tokens, sizeof tokens, " or %d prompt tokens", max_tokens);
        colo_http_error(req, 429, "queue_full", "model %s: the queue is full (%d requests%s); retry later",
                        c->am->name, in.max_queue, tokens);
    } else if (st == COLO_ENOMEM) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 503, "out_of_memory", "model %s: %s", c->am->name, err);
    } else {
        colo_served_info in;
        colo_served_get_info(c->am->m, &in);
        colo_http_add_header(req, "Retry-After", "5");
        colo_http_error(req, 503, "model_not_ready", "model %s is %s%s%s", c->am->name,
                        colo_served_state_name(in.state), in.error[0] ? ": " : "", in.error);
    }
}

/* The endpoints answered on the loop thread without generating:
 * count_tokens, tokenize, detokenize. */
static void answer_now(api_call *c)
{
    char err[512] = "";
    colo_request *r = c->r;
    colo_served *m = c->am->m;
    colo_status st;
    json_t *j = NULL;
    if (c->ep == COLO_API_DETOKENIZE) {
        const char *text;
        size_t len;
        st = colo_served_detokenize(m, c->in.tokens, c->in.n_tokens, r->pool, &text, &len, err, sizeof err);
        if (st == COLO_OK)
            j = json_pack("{s:o}", "text", colo_api_json_text(text, len));
    } else {
        st = colo_served_tokenize(m, r, err, sizeof err);
        if (st == COLO_OK && c->ep == COLO_API_COUNT_TOKENS) {
            j = json_pack("{s:i}", "input_tokens", r->tok.n);
        } else if (st == COLO_OK) {
            json_t *ids = json_array();
            for (int i = 0; ids && i < r->tok.n; i++)
                if (json_array_append_new(ids, json_integer(r->tok.ids[i]))) {
                    json_decref(ids);
                    ids = NULL;
                }
            j = ids ? json_pack("{s:o,s:i}", "tokens", ids, "count", r->tok.n) : NULL;
        }
    }
    if (st == COLO_OK) {
        colo_api_count_request(c->api, c->am->name, 200);
        colo_api_account(c, 200);
        colo_http_respond_json(c->http, 200, j);
        return;
    }
    int status = st == COLO_EUNSUPPORTED ? 400 : colo_api_status_http(st);
    colo_api_count_request(c->api, c->am->name, status);
    colo_api_account(c, status);
    if (status == 400)
        colo_http_error(c->http, 400, "invalid_request", "%s", err);
    else
        answer_error(c, status, st, err);
}

/* A model loading at run time, or one that failed, has no limits to check
 * a request against: 503 with Retry-After before decoding. */
static bool not_loaded(colo_api *a, api_model *am, colo_http_req *req)
{
    colo_served_state s = colo_served_get_state(am->m);
    if (s != COLO_SERVED_LOADING && s != COLO_SERVED_FAILED)
        return false;
    colo_served_info in;
    colo_served_get_info(am->m, &in);
    colo_api_count_request(a, am->name, 503);
    colo_http_add_header(req, "Retry-After", "5");
    colo_http_error(req, 503, "model_not_ready", "model %s is %s%s%s", am->name, colo_served_state_name(in.state),
                    in.error[0] ? ": " : "", in.error);
    return true;
}

static void handle(colo_api *a, colo_http_req *req, colo_api_endpoint ep)
{
    json_t *body = colo_http_req_json(req);
    if (!body)
        return; /* answered 400 */
    char err[512];
    bool by_path = ep == COLO_API_INFER || ep == COLO_API_TOKENIZE || ep == COLO_API_DETOKENIZE;
    const char *name = by_path ? colo_http_req_param(req, "name") : colo_api_model_field(body, err, sizeof err);
    if (!name) {
        colo_http_error(req, 400, "invalid_request", "%s", err);
        json_decref(body);
        return;
    }
    api_model *am = find_model(a, name);
    colo_http_req_set_model(req, name);
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s' (GET /v1/models lists them)", name);
        json_decref(body);
        return;
    }
    if (not_loaded(a, am, req)) {
        json_decref(body);
        return;
    }
    api_call *c = call_create(a, am, req, ep);
    if (!c) {
        colo_http_error(req, 503, "out_of_memory", "out of memory");
        json_decref(body);
        return;
    }
    const colo_model_cfg *mc = colo_served_config(am->m);
    colo_api_limits lim;
    model_limits(am->m, &lim);
    colo_status st = colo_api_decode(ep, colo_served_task(am->m), body, &lim, &c->in, err, sizeof err);
    json_decref(body);
    if (st != COLO_OK) {
        colo_api_count_request(a, am->name, 400);
        colo_http_error(req, 400, "invalid_request", "%s", err);
        call_free(c);
        return;
    }
    colo_request *r = c->r;
    snprintf(r->who.id, sizeof r->who.id, "%s", colo_http_req_id(req));
    snprintf(r->who.model, sizeof r->who.model, "%s", am->name);
    r->who.priority = c->in.has_priority ? c->in.priority : mc->priority;
    if (!colo_api_admit(c)) {
        call_free(c);
        return;
    }
    if (r->params.seed == UINT64_MAX)
        r->params.seed = (uint64_t)time(NULL) * 6364136223846793005ull + atomic_fetch_add(&a->seed_counter, 1);
    snprintf(c->oid, sizeof c->oid, "%s%s", ep == COLO_API_CHAT ? "chatcmpl-" : ep == COLO_API_MESSAGES ? "msg_" : "cmpl-",
             r->who.id);
    err[0] = 0;
    if (ep == COLO_API_COUNT_TOKENS || ep == COLO_API_TOKENIZE || ep == COLO_API_DETOKENIZE) {
        answer_now(c);
        call_free(c);
        return;
    }
    st = colo_served_submit(am->m, r, err, sizeof err);
    if (st != COLO_OK) {
        colo_api_account(c, colo_api_status_http(st));
        refuse(c, st, err);
        call_free(c);
        return;
    }
    colo_http_req_on_abort(req, on_abort, c);
    colo_http_req_on_cut(req, on_cut, c);
}

static void h_infer(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_INFER); }
static void h_completions(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_COMPLETIONS); }
static void h_chat(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_CHAT); }
static void h_embeddings(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_EMBEDDINGS); }
static void h_messages(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_MESSAGES); }
static void h_count_tokens(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_COUNT_TOKENS); }
static void h_tokenize(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_TOKENIZE); }
static void h_detokenize(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_DETOKENIZE); }

static void h_models(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    json_t *data = json_array();
    for (int i = 0; data && i < a->n_models; i++)
        if (!a->models[i].unloaded && json_array_append_new(data, colo_api_model_json(a, &a->models[i]))) {
            json_decref(data);
            data = NULL;
        }
    colo_http_respond_json(req, 200, data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL);
}

static void h_model(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    const char *name = colo_http_req_param(req, "name");
    api_model *am = name ? find_model(a, name) : NULL;
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s'", name ? name : "");
        return;
    }
    colo_http_req_set_model(req, name);
    colo_http_respond_json(req, 200, colo_api_model_json(a, am));
}

static bool ready(void *ud)
{
    colo_api *a = ud;
    if (a->n_models < a->n_expected)
        return false;
    for (int i = 0; i < a->n_models; i++) {
        if (a->models[i].unloaded || a->models[i].unloading)
            continue;
        colo_served_state s = colo_served_get_state(a->models[i].m);
        /* a model loaded at run time counts once it has loaded */
        if (i >= a->n_expected && (s == COLO_SERVED_LOADING || s == COLO_SERVED_FAILED))
            continue;
        /* a sleeping model serves: a request wakes it */
        if (s != COLO_SERVED_READY && s != COLO_SERVED_SLEEPING && s != COLO_SERVED_WAKING)
            return false;
    }
    /* and every model the config file names is served, also after a
     * SIGHUP that could not load one again */
    return colo_admin_file_served(a->admin);
}

/* ---- life ------------------------------------------------------------------------- */

colo_api *colo_api_create(colo_server *srv, const colo_config *cfg, char *err, size_t errlen)
{
    colo_api *a = calloc(1, sizeof *a);
    if (!a) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    a->srv = srv;
    a->http = colo_server_http(srv);
    a->metrics = colo_server_metrics(srv);
    a->policy = colo_sched_policy_name(cfg->scheduler.policy);
    a->n_expected = cfg->n_models;
    a->max_unsent_bytes = (size_t)cfg->server.max_unsent_bytes;
    atomic_init(&a->tok_bytes, 0);
    a->created = (long)time(NULL);
    if (colo_api_register_metrics(a) != COLO_OK) {
        colo_set_err(err, errlen, "cannot register the model metrics");
        free(a);
        return NULL;
    }
    struct {
        const char *method, *pattern;
        colo_http_handler_fn fn;
    } routes[] = {{"POST", "/v1/models/{name}/infer", h_infer},
                  {"GET", "/v1/models", h_models},
                  {"GET", "/v1/models/{name}", h_model},
                  {"POST", "/v1/completions", h_completions},
                  {"POST", "/v1/chat/completions", h_chat},
                  {"POST", "/v1/embeddings", h_embeddings},
                  {"POST", "/v1/messages", h_messages},
                  {"POST", "/v1/messages/count_tokens", h_count_tokens},
                  {"POST", "/v1/models/{name}/tokenize", h_tokenize},
                  {"POST", "/v1/models/{name}/detokenize", h_detokenize}};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (colo_server_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, a, 0) != COLO_OK) {
            colo_set_err(err, errlen, "cannot add the route %s %s", routes[i].method, routes[i].pattern);
            free(a);
            return NULL;
        }
    if (colo_api_usage_routes(a) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the route GET /v1/usage");
        free(a);
        return NULL;
    }
    /* the lifecycle routes under /admin/ (server/admin.h) */
    if (!(a->admin = colo_admin_create(srv, a, cfg, err, errlen))) {
        free(a);
        return NULL;
    }
    colo_server_set_ready(srv, ready, a);
    return a;
}

/* ---- the model table -------------------------------------------------------------- */

api_model *colo_api_take_slot(colo_api *a, colo_served *m)
{
    int i = 0;
    while (i < a->n_models && a->models[i].m)
        i++;
    if (i == COLO_API_MAX_MODELS)
        return NULL;
    if (i == a->n_models)
        a->n_models++;
    a->models[i] = (api_model){.m = m, .name = colo_served_config(m)->name};
    return &a->models[i];
}

void colo_api_free_slot(colo_api *a, api_model *am)
{
    *am = (api_model){.unloaded = true};
    while (a->n_models > 0 && !a->models[a->n_models - 1].m)
        a->n_models--;
}

bool colo_api_slot_free(const colo_api *a)
{
    if (a->n_models < COLO_API_MAX_MODELS)
        return true;
    for (int i = 0; i < a->n_models; i++)
        if (!a->models[i].m)
            return true;
    return false;
}

colo_status colo_api_add_model(colo_api *a, colo_served *m)
{
    return colo_api_take_slot(a, m) ? COLO_OK : COLO_EINVAL;
}

colo_admin *colo_api_admin(colo_api *a) { return a->admin; }

colo_served_hooks colo_api_hooks(colo_api *a)
{
    return (colo_served_hooks){.on_step = colo_api_on_step, .on_wake = colo_api_on_wake, .ud = a};
}

void colo_api_free(colo_api *a)
{
    if (!a)
        return;
    colo_admin_free(a->admin);
    colo_api_stats_free(a);
    free(a);
}
