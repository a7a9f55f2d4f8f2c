/* server/api_request.h: decoding the JSON bodies of the model endpoints.
 *
 * Pure functions (no server state), so that they can be tested and fuzzed
 * alone. Every error is COLO_EINVAL with a message naming the field, for a
 * 400 answer. docs/API.md lists the fields of each endpoint:
 *  - /v1/models/{name}/infer is strict: unknown fields are refused.
 *  - The OpenAI-compatible endpoints accept OpenAI's other fields where
 *    ignoring them is harmless (n: 1, user, stream_options, logprobs: false,
 *    presence/frequency_penalty: 0, ...) and refuse the rest. */
#ifndef COLO_SERVER_API_REQUEST_H
#define COLO_SERVER_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "batching/request.h"
#include "config/config.h"
#include "runtime/backend.h"

typedef struct json_t json_t;

typedef enum colo_api_endpoint {
    COLO_API_INFER = 0,       /* POST /v1/models/{name}/infer */
    COLO_API_COMPLETIONS = 1, /* POST /v1/completions */
    COLO_API_CHAT = 2,        /* POST /v1/chat/completions */
    COLO_API_EMBEDDINGS = 3,  /* POST /v1/embeddings */
} colo_api_endpoint;

/* Limits a request is checked against (from the model). */
typedef struct colo_api_limits {
    int max_seq_len;       /* tokens: max_tokens may not exceed it */
    int n_vocab;           /* top_k bound */
    size_t max_prompt_bytes; /* prompt or messages, after templating; 0 = no byte limit */
    int max_inputs;        /* embeddings per request */
} colo_api_limits;

typedef struct colo_api_input {
    /* generation */
    char *prompt;          /* the prompt, chat template applied (malloc'd) */
    size_t prompt_len;
    bool special;          /* the prompt holds template tokens (chat) */
    colo_req_params params;
    char *stop_buf[COLO_REQ_MAX_STOP];
    bool has_priority;
    colo_priority priority;
    bool include_usage;    /* stream_options.include_usage */
    /* embeddings */
    char **inputs;
    size_t *input_lens;
    int n_inputs;
    bool base64;           /* encoding_format: "base64" */
} colo_api_input;

/* The "model" field of an OpenAI-style body: its string, or NULL with a
 * message when absent or not a string. */
const char *colo_api_model_field(json_t *body, char *err, size_t errlen);

/* Decodes body for endpoint ep addressed to a model of kind. *in is
 * zeroed first and must be released with colo_api_input_free whatever the
 * result. COLO_EINVAL with the message for a 400. */
colo_status colo_api_decode(colo_api_endpoint ep, colo_model_kind kind, json_t *body, const colo_api_limits *lim,
                            colo_api_input *in, char *err, size_t errlen);
void colo_api_input_free(colo_api_input *in);

/* "high" | "normal" | "low". */
colo_status colo_priority_parse(const char *s, colo_priority *out);
const char *colo_priority_name(colo_priority p);

#endif
