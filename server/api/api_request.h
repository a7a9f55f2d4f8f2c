/* server/api/api_request.h: decoding the JSON bodies of the model endpoints.
 *
 * Pure functions (no server state), so that they can be tested and fuzzed
 * alone. Every error is COLO_EINVAL with a message naming the field, for a
 * 400 answer. docs/API.md lists the fields of each endpoint:
 *  - /v1/models/{name}/infer is strict: unknown fields are refused.
 *  - The OpenAI-compatible endpoints accept OpenAI's other fields where
 *    ignoring them is harmless (n: 1, user, stream_options, logprobs: false,
 *    presence/frequency_penalty: 0, ...) and refuse the rest.
 *  - /v1/messages and /v1/messages/count_tokens take Anthropic's fields
 *    (system, messages of text blocks, max_tokens, stop_sequences, ...);
 *    tools, images, documents and thinking are refused by name.
 *  - tokenize takes a prompt or messages (then the chat template applies),
 *    detokenize a token array. */
#ifndef COLO_SERVER_API_REQUEST_H
#define COLO_SERVER_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "batching/request.h"
#include "runtime/backend.h"

typedef struct json_t json_t;

/* How one endpoint's body is read: its fields for a generative model and
 * for an encoder and what reading them means. One per endpoint dialect,
 * named in the dialect's row (server/api/api_dialect.c), which holds everything
 * else about it. */
typedef struct colo_api_body colo_api_body;
extern const colo_api_body colo_api_body_infer;        /* POST /v1/models/{name}/infer */
extern const colo_api_body colo_api_body_completions;  /* POST /v1/completions */
extern const colo_api_body colo_api_body_chat;         /* POST /v1/chat/completions */
extern const colo_api_body colo_api_body_embeddings;   /* POST /v1/embeddings */
extern const colo_api_body colo_api_body_messages;     /* POST /v1/messages (Anthropic's Messages API) */
extern const colo_api_body colo_api_body_count_tokens; /* POST /v1/messages/count_tokens */
extern const colo_api_body colo_api_body_tokenize;     /* POST /v1/models/{name}/tokenize */
extern const colo_api_body colo_api_body_detokenize;   /* POST /v1/models/{name}/detokenize */
extern const colo_api_body colo_api_body_responses;    /* POST /v1/responses (OpenAI's Responses API) */

/* Limits a request is checked against (from the model). */
typedef struct colo_api_limits {
    int max_seq_len;       /* tokens: max_tokens may not exceed it */
    int n_vocab;           /* top_k bound */
    size_t max_prompt_bytes; /* prompt or messages, after templating; 0 = no byte limit */
    int max_inputs;        /* embeddings per request */
} colo_api_limits;

/* What decoding fills: the request record (params and input, allocated
 * from r->pool) and the options that only the front end reads. */
typedef struct colo_api_input {
    colo_request *r;       /* set by the caller before decoding */
    bool has_priority;
    colo_priority priority;
    bool include_usage;    /* stream_options.include_usage */
    bool base64;           /* encoding_format: "base64" */
    const int32_t *tokens; /* detokenize: the ids (in r's pool) */
    int n_tokens;
    /* the Responses API: the request's fields its response object repeats
     * as they were sent (instructions, tools, tool_choice, text, ...), a
     * JSON object in r's pool; NULL: none */
    const char *echo;
    /* the Responses API: store (keep the response: GET /v1/responses/{id})
     * and the response it continues (in r's pool; NULL: none) */
    bool store;
    const char *previous_response_id;
} colo_api_input;

/* The "model" field of an OpenAI-style body: its string, or NULL with a
 * message when absent or not a string. */
const char *colo_api_model_field(json_t *body, char *err, size_t errlen);

/* Decodes body as `how` reads it, addressed to a model serving task, into
 * in->r (task, params, input; everything in in->r->pool, freed with the
 * request) and in's options. COLO_EINVAL with the message for a 400. */
colo_status colo_api_decode(const colo_api_body *how, colo_task task, json_t *body, const colo_api_limits *lim,
                            colo_api_input *in, char *err, size_t errlen);

/* A message about the chat completion a Responses body is read as, in
 * the Responses API's words (response_format -> text.format, messages ->
 * input, ...), in place. */
void colo_api_responses_words(char *err, size_t errlen);

/* (the priorities' names: colo_priority_parse, runtime/backend.h) */

#endif
