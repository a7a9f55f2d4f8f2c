/* server/api/api_tools.h: structured output and tools in request bodies
 * (OpenAI's response_format, tools, tool_choice, tool messages; Anthropic's
 * tools, tool_choice, tool_use and tool_result blocks) and tool calls in
 * answers. Decoding fills the request record (strings in its pool);
 * messages name the field ("tools[1].function.name: ..."). */
#ifndef COLO_SERVER_API_TOOLS_H
#define COLO_SERVER_API_TOOLS_H

#include "batching/request.h"

/* Tools a request may declare, and calls one assistant turn may hold. */
#define COLO_API_MAX_TOOLS 128

typedef struct json_t json_t;

/* response_format: {"type":"text"|"json_object"|"json_schema", ...}. */
colo_status colo_api_response_format(colo_request *r, json_t *v, char *err, size_t errlen);
/* OpenAI's tools: [{"type":"function","function":{"name","description","parameters"}}]. */
colo_status colo_api_openai_tools(colo_request *r, json_t *v, char *err, size_t errlen);
/* OpenAI's tool_choice: "auto" | "none" | "required" | {"type":"function","function":{"name"}}. */
colo_status colo_api_openai_tool_choice(colo_request *r, json_t *v, char *err, size_t errlen);
/* An OpenAI assistant message's tool_calls into m. */
colo_status colo_api_openai_message_calls(colo_request *r, json_t *calls, colo_chat_message *m, char *err,
                                          size_t errlen);
/* Anthropic's tools: [{"name","description","input_schema"}]. */
colo_status colo_api_anthropic_tools(colo_request *r, json_t *v, char *err, size_t errlen);
/* Anthropic's tool_choice: {"type":"auto"|"any"|"none"|"tool","name"}. */
colo_status colo_api_anthropic_tool_choice(colo_request *r, json_t *v, char *err, size_t errlen);

/* The outcome's calls as OpenAI's tool_calls array (new reference; NULL
 * when out of memory). stream: with "index" per call. */
json_t *colo_api_tool_calls_json(const colo_req_outcome *out, bool stream);
/* The outcome's calls as Anthropic tool_use blocks, appended to content. */
colo_status colo_api_tool_use_blocks(const colo_req_outcome *out, json_t *content);
/* Whether the request's output is held back from the stream until it is
 * known whether it is a tool call. */
bool colo_api_tools_hold_stream(const colo_request *r);

#endif
