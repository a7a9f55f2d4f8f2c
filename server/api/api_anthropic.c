/* Anthropic's Messages API (/v1/messages): the response body and the
 * streamed events (message_start, content_block_start, ping,
 * content_block_delta, content_block_stop, message_delta, message_stop,
 * error), from the same request record as the OpenAI endpoints. */
#include "server/api/api_impl.h"
#include "server/api/api_tools.h"

#include <jansson.h>
#include <string.h>

/* "tool_use" (the output called tools), "end_turn" (an end-of-turn token), "stop_sequence" (one of
 * stop_sequences, named in stop_sequence), "max_tokens". */
static const char *stop_reason(const colo_req_outcome *o)
{
    if (o->n_tool_calls > 0)
        return "tool_use";
    if (o->finish_reason && !strcmp(o->finish_reason, "length"))
        return "max_tokens";
    return o->stop_sequence ? "stop_sequence" : "end_turn";
}

/* Anthropic's usage: input_tokens are the prompt tokens computed, those
 * the prefix cache held are cache_read_input_tokens (the three add up to
 * count_tokens'); colo caches without being asked, so none are billed as
 * cache_creation_input_tokens. */
static json_t *usage_json(const colo_req_outcome *o)
{
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", o->n_input_tokens - o->n_cached_tokens,
                     "cache_read_input_tokens", o->n_cached_tokens, "cache_creation_input_tokens", 0,
                     "output_tokens", o->n_tokens);
}

json_t *colo_api_anthropic_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    json_t *content = json_array();
    /* a reasoning model's thinking first (colo signs nothing: the signature is empty) */
    if (content && c->r->reasons &&
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 colo_api_json_text(o->reasoning ? o->reasoning : "", o->reasoning_len),
                                                 "signature", "")))
        json_decref(content), content = NULL;
    if (content && (o->text_len > 0 || o->n_tool_calls == 0) &&
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                 colo_api_json_text(o->text ? o->text : "", o->text_len))))
        json_decref(content), content = NULL;
    if (content && colo_api_tool_use_blocks(o, content) != COLO_OK)
        json_decref(content), content = NULL;
    if (!content)
        return NULL;
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", c->oid, "type", "message", "role", "assistant", "model",
                     c->name, "content", content, "stop_reason", stop_reason(o), "stop_sequence",
                     o->stop_sequence ? json_string(o->stop_sequence) : json_null(), "usage", usage_json(o));
}

json_t *colo_api_anthropic_start_json(const api_call *c)
{
    return json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type", "message_start", "message", "id",
                     c->oid, "type", "message", "role", "assistant", "model", c->name, "content", "stop_reason",
                     "stop_sequence", "usage", "input_tokens", c->r->tok.n, "output_tokens", 0);
}

json_t *colo_api_anthropic_delta_json(int index, const char *text, size_t len)
{
    return json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", index, "delta", "type",
                     "text_delta", "text", colo_api_json_text(text, len));
}

json_t *colo_api_anthropic_end_json(const api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    return json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason", stop_reason(o),
                     "stop_sequence", o->stop_sequence ? json_string(o->stop_sequence) : json_null(), "usage",
                     usage_json(o));
}

json_t *colo_api_anthropic_error_json(int http_status, const char *message)
{
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                     colo_http_anthropic_error_type(http_status), "message", message ? message : "failed");
}
