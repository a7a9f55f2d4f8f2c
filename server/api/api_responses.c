/* OpenAI's Responses API (POST /v1/responses): the response object and its
 * stream of named events (response.created, response.in_progress,
 * response.output_item.added, response.content_part.added,
 * response.output_text.delta, ..., response.completed), from the same
 * request record as chat completions. */
#include "server/api/api_impl.h"
#include "server/api/api_tools.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "incomplete" when the output ran into max_output_tokens. */
static bool incomplete(const api_call *c)
{
    const char *f = c->r->out.finish_reason;
    return f && !strcmp(f, "length");
}

/* A failed response reports what was generated for it (what it is
 * billed), whatever became of it. */
static json_t *usage_json(const api_call *c, bool failed)
{
    const colo_req_outcome *o = &c->r->out;
    int out = failed ? (int)colo_api_completion_tokens(c->r) : o->n_tokens;
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", o->n_input_tokens, "input_tokens_details",
                     "cached_tokens", o->n_cached_tokens, "output_tokens", out, "output_tokens_details",
                     "reasoning_tokens", 0, "total_tokens", o->n_input_tokens + out);
}

/* The request's fields as it sent them (colo_api_input.echo) over o's
 * defaults; a text without a format has the default format. */
static colo_status echo(const api_call *c, json_t *o)
{
    if (!c->in.echo)
        return COLO_OK;
    json_t *sent = json_loads(c->in.echo, 0, NULL);
    if (!sent)
        return COLO_ENOMEM;
    json_t *text = json_object_get(sent, "text");
    bool ok = !json_is_object(text) || json_object_get(text, "format") ||
              !json_object_set(text, "format", json_object_get(json_object_get(o, "text"), "format"));
    ok = ok && !json_object_update(o, sent);
    json_decref(sent);
    return ok ? COLO_OK : COLO_ENOMEM;
}

/* The response object: status "in_progress" (no output, no usage yet),
 * "completed", "incomplete" or "failed" (with the error). output stolen. */
static json_t *response_json(const api_call *c, const char *status, json_t *output)
{
    const colo_req_params *p = &c->r->params;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:n,s:n,s:n,s:f,s:f,s:i,s:b,s:s,s:[],s:{s:{s:s}},s:{},"
                          "s:b,s:n,s:{s:n,s:n},s:s}",
                          "id", c->oid, "object", "response", "created_at", (json_int_t)c->created, "status", status,
                          "model", c->name, "output", output ? output : json_array(), "error",
                          "incomplete_details", "instructions", "temperature", (double)p->temperature, "top_p",
                          (double)p->top_p, "max_output_tokens", p->max_tokens, "parallel_tool_calls", 1,
                          "tool_choice", "auto", "tools", "text", "format", "type", "text", "metadata",
                          "store", c->in.store, "previous_response_id", "reasoning", "effort", "summary",
                          "truncation", "disabled");
    if (!o || echo(c, o) != COLO_OK ||
        (c->in.previous_response_id &&
         json_object_set_new(o, "previous_response_id", json_string(c->in.previous_response_id)))) {
        json_decref(o);
        return NULL;
    }
    if (!strcmp(status, "in_progress"))
        json_object_set_new(o, "usage", json_null());
    else
        json_object_set_new(o, "usage", usage_json(c, !strcmp(status, "failed")));
    if (!strcmp(status, "incomplete"))
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (!strcmp(status, "failed"))
        json_object_set_new(o, "error", json_pack("{s:s,s:s}", "code", colo_api_outcome_code(c), "message",
                                                  colo_api_outcome_error(c)));
    return o;
}

static void item_id(const api_call *c, char *out, size_t n) { snprintf(out, n, "msg_%s", c->r->who.id); }

static json_t *text_part(const char *text, size_t len)
{
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", colo_api_json_text(text ? text : "", len),
                     "annotations");
}

/* The message item (status "in_progress" with no content yet, or
 * "completed" with the text). */
static json_t *message_item(const api_call *c, bool done)
{
    const colo_req_outcome *o = &c->r->out;
    char id[96];
    item_id(c, id, sizeof id);
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", done ? "completed" : "in_progress",
                     "role", "assistant", "content", done ? json_pack("[o]", text_part(o->text, o->text_len)) : json_array());
}

static json_t *call_item(const api_call *c, int i, bool done)
{
    const colo_req_tool_call *t = &c->r->out.tool_calls[i];
    char id[128];
    snprintf(id, sizeof id, "fc_%d_%s", i, c->r->who.id);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id", t->id, "name", t->name,
                     "arguments", done ? t->arguments : "", "status", done ? "completed" : "in_progress");
}

/* The output: the text as a message (unless the output is only calls), then
 * each call. */
static json_t *output_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    json_t *out = json_array();
    if (out && (o->text_len > 0 || o->n_tool_calls == 0) && json_array_append_new(out, message_item(c, true)))
        json_decref(out), out = NULL;
    for (int i = 0; out && i < o->n_tool_calls; i++)
        if (json_array_append_new(out, call_item(c, i, true)))
            json_decref(out), out = NULL;
    return out;
}

json_t *colo_api_responses_json(const api_call *c)
{
    json_t *out = output_json(c);
    return out ? response_json(c, incomplete(c) ? "incomplete" : "completed", out) : NULL;
}

/* ---- the stream --------------------------------------------------------------------------- */

/* A named event whose data carries its type and sequence number. */
static void event(api_call *c, const char *type, json_t *data)
{
    if (data && !json_object_set_new(data, "type", json_string(type)) &&
        !json_object_set_new(data, "sequence_number", json_integer(c->seq_no++))) {
        colo_api_sse_event(c, type, data);
        return;
    }
    json_decref(data);
}

static void open_text(api_call *c, int index)
{
    char id[96];
    item_id(c, id, sizeof id);
    event(c, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", index, "item", message_item(c, false)));
    event(c, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", index,
                                                      "content_index", 0, "part", text_part("", 0)));
}

static void text_delta(api_call *c, int index, const char *text, size_t len)
{
    char id[96];
    item_id(c, id, sizeof id);
    event(c, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", index,
                                                     "content_index", 0, "delta", colo_api_json_text(text, len),
                                                     "logprobs"));
}

static void close_text(api_call *c, int index)
{
    const colo_req_outcome *o = &c->r->out;
    char id[96];
    item_id(c, id, sizeof id);
    event(c, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", index,
                                                    "content_index", 0, "text",
                                                    colo_api_json_text(o->text ? o->text : "", o->text_len), "logprobs"));
    event(c, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", index,
                                                     "content_index", 0, "part", text_part(o->text, o->text_len)));
    event(c, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", index, "item", message_item(c, true)));
}

/* response.created and response.in_progress; then, unless the output is
 * held until it is known to be calls or text, the message item opens. */
void colo_api_responses_open(api_call *c)
{
    event(c, "response.created", json_pack("{s:o}", "response", response_json(c, "in_progress", NULL)));
    event(c, "response.in_progress", json_pack("{s:o}", "response", response_json(c, "in_progress", NULL)));
    if (!colo_api_tools_hold_stream(c->r))
        open_text(c, 0);
}

/* (a reasoning model's thinking is held out of the output text, and not sent) */
void colo_api_responses_piece(api_call *c, const api_piece *p)
{
    if (p->reasoning || colo_api_tools_hold_stream(c->r) || !p->len)
        return;
    text_delta(c, 0, p->text, p->len);
    tok_buf *b = &c->said; /* kept for response.failed (out of memory: it goes with what it has) */
    if (b->len + p->len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + p->len)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return;
        b->data = d, b->cap = cap;
    }
    memcpy(b->data + b->len, p->text, p->len);
    b->len += p->len;
}

/* The held output now whole (its text, then each call: added, its
 * arguments, done), or the message item's end; then response.completed. */
void colo_api_responses_close(api_call *c, bool held)
{
    const colo_req_outcome *o = &c->r->out;
    int index = 0;
    if (!held) {
        close_text(c, index++);
    } else if (o->text_len > 0 || o->n_tool_calls == 0) {
        open_text(c, index);
        if (o->text_len)
            text_delta(c, index, o->text, o->text_len);
        close_text(c, index++);
    }
    for (int i = 0; held && i < o->n_tool_calls; i++, index++) {
        json_t *added = call_item(c, i, false);
        json_t *id = json_incref(json_object_get(added, "id"));
        event(c, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", index, "item", added));
        event(c, "response.function_call_arguments.delta",
              json_pack("{s:O,s:i,s:s}", "item_id", id, "output_index", index, "delta", o->tool_calls[i].arguments));
        event(c, "response.function_call_arguments.done",
              json_pack("{s:O,s:i,s:s}", "item_id", id, "output_index", index, "arguments", o->tool_calls[i].arguments));
        event(c, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", index, "item", call_item(c, i, true)));
        json_decref(id);
    }
    bool inc = incomplete(c);
    event(c, inc ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", colo_api_responses_json(c)));
}

/* The output a stream sent before it failed: its message item, incomplete. */
static json_t *said_json(const api_call *c)
{
    if (!c->said.len)
        return json_array();
    char id[96];
    item_id(c, id, sizeof id);
    return json_pack("[{s:s,s:s,s:s,s:s,s:[o]}]", "type", "message", "id", id, "status", "incomplete", "role",
                     "assistant", "content", text_part(c->said.data, c->said.len));
}

void colo_api_responses_fail(api_call *c)
{
    json_t *out = said_json(c);
    event(c, "response.failed", json_pack("{s:o}", "response", out ? response_json(c, "failed", out) : NULL));
}
