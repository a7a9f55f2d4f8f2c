/* The endpoint dialects (server/api/api_impl.h, api_dialect): colo's own
 * /infer, OpenAI's completions, chat completions and embeddings,
 * Anthropic's Messages API, and the token routes. Each is one row of the
 * table at the end; what differs between them is in its slots, not in
 * checks of which endpoint a request came by. */
#include "server/api/api_impl.h"
#include "server/api/api_tools.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---- SSE ------------------------------------------------------------------------------ */

colo_status colo_api_sse_event(api_call *c, const char *event, json_t *j)
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

colo_status colo_api_sse_json(api_call *c, json_t *j) { return colo_api_sse_event(c, NULL, j); }

const char *colo_api_outcome_code(const api_call *c)
{
    return c->cut && c->r->out.status == COLO_ECANCELED ? "shutting_down" : colo_api_status_code(c->r->out.status);
}

const char *colo_api_outcome_error(const api_call *c)
{
    if (c->cut && c->r->out.status == COLO_ECANCELED)
        return "the server is shutting down";
    return c->r->out.error ? c->r->out.error : "failed";
}

/* colo's error event: {"error":{"code","message","request_id"}}. */
static void fail_colo(api_call *c)
{
    colo_api_sse_json(c, json_pack("{s:{s:s,s:s,s:s}}", "error", "code", colo_api_outcome_code(c), "message",
                                   colo_api_outcome_error(c), "request_id", colo_http_req_id(c->http)));
}

/* ---- /infer ------------------------------------------------------------------------------ */

static void infer_open(api_call *c) { (void)c; }

static void infer_piece(api_call *c, const api_piece *p)
{
    json_t *ev = json_pack("{s:s,s:i,s:o}", "id", colo_http_req_id(c->http), "token", p->token, "text",
                           colo_api_json_text(p->text, p->len));
    if (ev && p->reasoning)
        json_object_set_new(ev, "reasoning", json_true());
    if (ev && c->r->params.n > 1)
        json_object_set_new(ev, "index", json_integer(p->choice));
    if (ev && p->lp)
        json_object_set_new(ev, "logprobs", colo_api_infer_logprobs_json(c, &p->token, p->lp, 1, 0));
    colo_api_sse_json(c, ev);
}

/* The whole answer as the "done" event. */
static void infer_close(api_call *c, bool held)
{
    (void)held;
    json_t *j = colo_api_infer_json(c);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (s)
        colo_http_sse_send(c->http, "done", s);
    free(s);
}

/* ---- OpenAI: completions and chat completions --------------------------------------------- */

static int n_choices(const api_call *c) { return c->r->params.n > 1 ? c->r->params.n : 1; }

/* Each chat choice begins with its role. */
static void chat_open(api_call *c)
{
    for (int i = 0; i < n_choices(c); i++)
        colo_api_sse_json(c, c->d->chunk(c, i, "", 0, NULL, true, NULL));
}

/* With echo, each completion choice begins with the prompt. */
static void completion_open(api_call *c)
{
    for (int i = 0; c->r->params.echo && c->r->in.prompt && i < n_choices(c); i++) {
        colo_api_sse_json(c, c->d->chunk(c, i, c->r->in.prompt, c->r->in.prompt_len, NULL, false, NULL));
        *(i ? &c->choice_sent[i] : &c->text_sent) = c->r->in.prompt_len;
    }
}

static void openai_piece(api_call *c, const api_piece *p)
{
    if (colo_api_tools_hold_stream(c->r))
        return; /* held until the output is known to be a call or text (close) */
    if (p->lp && p->token >= 0) /* every token gets its chunk, text or not */
        colo_api_sse_json(c, c->d->chunk(c, p->choice, p->text, p->len, NULL, false,
                                         c->d->logprobs(c, &p->token, p->lp, 1, p->sent)));
    else if (p->len)
        colo_api_sse_json(c, c->d->chunk(c, p->choice, p->text, p->len, NULL, false, NULL));
}

/* Chat: a reasoning model's thinking goes as delta.reasoning_content. */
static void chat_piece(api_call *c, const api_piece *p)
{
    if (!p->reasoning) {
        openai_piece(c, p);
        return;
    }
    if (!p->len)
        return;
    json_t *ch = c->d->chunk(c, p->choice, NULL, 0, NULL, false, NULL);
    json_t *delta = json_object_get(json_array_get(json_object_get(ch, "choices"), 0), "delta");
    if (delta)
        json_object_set_new(delta, "reasoning_content", colo_api_json_text(p->text, p->len));
    colo_api_sse_json(c, ch);
}

/* A held stream's output, now whole: its text, then a chunk naming each
 * call and one with its arguments. */
static void openai_held(api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    if (o->text_len)
        colo_api_sse_json(c, c->d->chunk(c, 0, o->text, o->text_len, NULL, false, NULL));
    for (int i = 0; i < o->n_tool_calls; i++) {
        const colo_req_tool_call *t = &o->tool_calls[i];
        json_t *first = json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", i, "id", t->id, "type", "function",
                                  "function", "name", t->name, "arguments", "");
        json_t *args = json_pack("{s:i,s:{s:s}}", "index", i, "function", "arguments", t->arguments);
        json_t *ch1 = c->d->chunk(c, 0, NULL, 0, NULL, false, NULL), *ch2 = c->d->chunk(c, 0, NULL, 0, NULL, false, NULL);
        json_t *d1 = json_object_get(json_array_get(json_object_get(ch1, "choices"), 0), "delta");
        json_t *d2 = json_object_get(json_array_get(json_object_get(ch2, "choices"), 0), "delta");
        if (d1 && first)
            json_object_set_new(d1, "tool_calls", json_pack("[O]", first));
        if (d2 && args)
            json_object_set_new(d2, "tool_calls", json_pack("[O]", args));
        json_decref(first);
        json_decref(args);
        colo_api_sse_json(c, ch1);
        colo_api_sse_json(c, ch2);
    }
}

/* The held output (tool calls are read from the first choice; the others
 * go as text), each choice's finish reason, and the usage chunk when
 * stream_options.include_usage asked for it. */
static void openai_close(api_call *c, bool held)
{
    const colo_req_outcome *o = &c->r->out;
    if (held) {
        openai_held(c);
        for (int i = 1; o->choices && i < o->n_choices; i++)
            if (o->choices[i].text_len)
                colo_api_sse_json(c, c->d->chunk(c, i, o->choices[i].text, o->choices[i].text_len, NULL, false, NULL));
    }
    for (int i = 0; i < (o->choices ? o->n_choices : 1); i++) {
        const char *fin = i && o->choices ? o->choices[i].finish_reason : o->finish_reason;
        colo_api_sse_json(c, c->d->chunk(c, i, NULL, 0, fin ? fin : "stop", false, NULL));
    }
    if (c->in.include_usage)
        colo_api_sse_json(c, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", c->oid, "object", c->d->chunk_object,
                                       "created", (json_int_t)c->created, "model", c->name, "choices", "usage",
                                       colo_api_usage_json(c)));
}

/* ---- Anthropic's Messages API ---------------------------------------------------------------- */

static void block_start(api_call *c, int index, bool thinking)
{
    c->block = index;
    c->thinking = thinking;
    colo_api_sse_event(c, "content_block_start",
                       thinking ? json_pack("{s:s,s:i,s:{s:s,s:s,s:s}}", "type", "content_block_start", "index", index,
                                            "content_block", "type", "thinking", "thinking", "", "signature", "")
                                : json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", index,
                                            "content_block", "type", "text", "text", ""));
}

static json_t *block_stop(int index)
{
    return json_pack("{s:s,s:i}", "type", "content_block_stop", "index", index);
}

/* A reasoning model's stream begins with a thinking block; the text block
 * opens when the answer begins. */
static void messages_open(api_call *c)
{
    colo_api_sse_event(c, "message_start", colo_api_anthropic_start_json(c));
    block_start(c, 0, c->r->reasons);
    colo_api_sse_event(c, "ping", json_pack("{s:s}", "type", "ping"));
}

/* The thinking block ends (colo signs nothing: its signature is empty) and
 * the text block begins. */
static void end_thinking(api_call *c)
{
    if (!c->thinking)
        return;
    colo_api_sse_event(c, "content_block_delta",
                       json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", c->block, "delta",
                                 "type", "signature_delta", "signature", ""));
    colo_api_sse_event(c, "content_block_stop", block_stop(c->block));
    block_start(c, c->block + 1, false);
}

static void messages_piece(api_call *c, const api_piece *p)
{
    if (p->reasoning) {
        if (c->thinking && p->len)
            colo_api_sse_event(c, "content_block_delta",
                               json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", c->block,
                                         "delta", "type", "thinking_delta", "thinking",
                                         colo_api_json_text(p->text, p->len)));
        return;
    }
    end_thinking(c);
    if (!colo_api_tools_hold_stream(c->r) && p->len)
        colo_api_sse_event(c, "content_block_delta", colo_api_anthropic_delta_json(c->block, p->text, p->len));
}

/* A held stream's output, now whole: its text, then a tool_use block per
 * call, its input as one input_json_delta. */
static void messages_held(api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    if (o->text_len)
        colo_api_sse_event(c, "content_block_delta", colo_api_anthropic_delta_json(c->block, o->text, o->text_len));
    colo_api_sse_event(c, "content_block_stop", block_stop(c->block));
    json_t *blocks = json_array();
    if (!blocks || colo_api_tool_use_blocks(o, blocks) != COLO_OK) {
        json_decref(blocks);
        return;
    }
    for (int i = 0; i < o->n_tool_calls; i++) {
        json_t *b = json_array_get(blocks, (size_t)i);
        int index = c->block + 1 + i;
        colo_api_sse_event(c, "content_block_start",
                           json_pack("{s:s,s:i,s:{s:s,s:O,s:O,s:{}}}", "type", "content_block_start", "index", index,
                                     "content_block", "type", "tool_use", "id", json_object_get(b, "id"), "name",
                                     json_object_get(b, "name"), "input"));
        colo_api_sse_event(c, "content_block_delta",
                           json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", index, "delta",
                                     "type", "input_json_delta", "partial_json", o->tool_calls[i].arguments));
        colo_api_sse_event(c, "content_block_stop", block_stop(index));
    }
    json_decref(blocks);
}

/* No [DONE]: message_stop ends it. */
static void messages_close(api_call *c, bool held)
{
    end_thinking(c); /* (an answer that never left its thinking has an empty text block) */
    if (held)
        messages_held(c);
    else
        colo_api_sse_event(c, "content_block_stop", block_stop(c->block));
    colo_api_sse_event(c, "message_delta", colo_api_anthropic_end_json(c));
    colo_api_sse_event(c, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void messages_fail(api_call *c)
{
    colo_api_sse_event(c, "error",
                       colo_api_anthropic_error_json(colo_api_status_http(c->r->out.status), colo_api_outcome_error(c)));
}

/* ---- the table ---------------------------------------------------------------------------------- */

#define INFER_STREAM .open = infer_open, .piece = infer_piece, .close = infer_close, .fail = fail_colo, .done_marker = true
#define OPENAI_STREAM .piece = openai_piece, .close = openai_close, .fail = fail_colo, .done_marker = true

static const api_dialect dialects[] = {
    {"POST", "/v1/models/{name}/infer", &colo_api_body_infer, .model_in_path = true, .id_prefix = "cmpl-",
     .errors = COLO_HTTP_ERRORS_OPENAI, .whole = colo_api_infer_json,
     .logprobs = colo_api_infer_logprobs_json, INFER_STREAM},
    {"POST", "/v1/completions", &colo_api_body_completions, .id_prefix = "cmpl-",
     .errors = COLO_HTTP_ERRORS_OPENAI, .whole = colo_api_completion_json,
     .chunk = colo_api_completion_chunk_json, .chunk_object = "text_completion",
     .logprobs = colo_api_completion_logprobs_json, .open = completion_open, OPENAI_STREAM},
    {"POST", "/v1/chat/completions", &colo_api_body_chat, .id_prefix = "chatcmpl-",
     .errors = COLO_HTTP_ERRORS_OPENAI, .whole = colo_api_chat_json,
     .chunk = colo_api_chat_chunk_json, .chunk_object = "chat.completion.chunk",
     .logprobs = colo_api_chat_logprobs_json, .open = chat_open, .piece = chat_piece,
     .close = openai_close, .fail = fail_colo, .done_marker = true},
    /* embeddings never stream */
    {"POST", "/v1/embeddings", &colo_api_body_embeddings, .id_prefix = "cmpl-",
     .errors = COLO_HTTP_ERRORS_OPENAI, .whole = colo_api_embeddings_json},
    {"POST", "/v1/messages", &colo_api_body_messages, .id_prefix = "msg_",
     .errors = COLO_HTTP_ERRORS_ANTHROPIC, .whole = colo_api_anthropic_json,
     .open = messages_open,
     .piece = messages_piece, .close = messages_close, .fail = messages_fail},
    {"POST", "/v1/messages/count_tokens", &colo_api_body_count_tokens, .id_prefix = "msg_",
     .errors = COLO_HTTP_ERRORS_ANTHROPIC, .now = colo_api_count_tokens_now},
    {"POST", "/v1/models/{name}/tokenize", &colo_api_body_tokenize, .model_in_path = true,
     .id_prefix = "cmpl-", .errors = COLO_HTTP_ERRORS_OPENAI, .now = colo_api_tokenize_now},
    {"POST", "/v1/models/{name}/detokenize", &colo_api_body_detokenize, .model_in_path = true,
     .id_prefix = "cmpl-", .errors = COLO_HTTP_ERRORS_OPENAI, .now = colo_api_detokenize_now},
    /* named events, no [DONE]: response.completed ends it */
    {"POST", "/v1/responses", &colo_api_body_responses, .id_prefix = "resp_",
     .errors = COLO_HTTP_ERRORS_OPENAI, .whole = colo_api_responses_json,
     .open = colo_api_responses_open, .piece = colo_api_responses_piece,
     .close = colo_api_responses_close, .fail = colo_api_responses_fail,
     .words = colo_api_responses_words, .stores = true},
};

const api_dialect *colo_api_dialects(int *n)
{
    *n = (int)(sizeof dialects / sizeof *dialects);
    return dialects;
}

_Static_assert(sizeof dialects / sizeof *dialects <= COLO_API_MAX_DIALECTS, "COLO_API_MAX_DIALECTS is too small");
