/* batching/request.h: the one record of an inference request, from the
 * HTTP handler to the response.
 *
 * The front end (server/) creates a colo_request, fills its identity,
 * parameters and input from its own memory pool, and submits it to a served
 * model (batching/served.h). The model's kind tokenizes the input (applying
 * its chat template) before the request is queued, so the exact token
 * count is known at admission; the executor writes the outcome into the
 * same record and calls on_done exactly once. After on_done the model never
 * touches the request again; the front end frees it with colo_request_free,
 * which frees everything allocated for it (one pool).
 *
 * Ownership by phase: the front end's thread until colo_served_submit; the
 * served model (its preparing or executor thread) from a successful submit
 * until on_done; the front end again after. Only `canceled` and the
 * callbacks' own state cross threads. */
#ifndef COLO_BATCHING_REQUEST_H
#define COLO_BATCHING_REQUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/model_cfg.h"
#include "batching/queue.h"
#include "runtime/backend.h"
#include "runtime/pool.h"

#define COLO_REQ_MAX_STOP 8
#define COLO_REQ_MAX_CHOICES 16

/* What the request asks of its model (a model kind serves one task). */
typedef enum colo_task { COLO_TASK_GENERATE = 0, COLO_TASK_EMBED = 1 } colo_task;

/* Who asked, and with what standing: read by the queue, the scheduler, the
 * logs, and the tenants' quotas and accounting. */
typedef struct colo_req_identity {
    char id[72];          /* request id (X-Request-Id or generated) */
    char model[64];       /* served model name */
    char organisation[64]; /* "" until tenants exist */
    char project[64];
    char key_id[24];      /* a short, non-secret id of the API key; "" = none */
    colo_priority priority;
    uint64_t deadline_ns; /* queue deadline (monotonic); 0 = the model's queue_timeout_ms from submit */
} colo_req_identity;

/* A function the model may call (tools), and one call of it. */
typedef struct colo_req_tool {
    const char *name;
    const char *description; /* "" when none */
    const char *parameters;  /* its arguments' JSON Schema, as JSON text */
} colo_req_tool;

typedef struct colo_req_tool_call {
    const char *id;          /* "call_..." (OpenAI) or "toolu_..." (Anthropic) */
    const char *name;
    const char *arguments;   /* a JSON object, as text */
} colo_req_tool_call;

typedef enum colo_tool_choice {
    COLO_TOOLS_AUTO = 0,     /* the model decides */
    COLO_TOOLS_NONE = 1,     /* no call (the tools are not shown to the model) */
    COLO_TOOLS_REQUIRED = 2, /* one call of any tool, forced by the grammar */
    COLO_TOOLS_NAMED = 3,    /* one call of params.tool_name, forced */
} colo_tool_choice;

typedef struct colo_chat_message {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content; /* NUL-terminated UTF-8 ("" when an assistant turn only calls tools) */
    const colo_req_tool_call *tool_calls; /* assistant: the calls it made */
    int n_tool_calls;
    const char *tool_call_id; /* tool: the call this answers (NULL: none given) */
    const char *name;         /* tool: the function's name, when known (NULL: none) */
} colo_chat_message;

typedef struct colo_req_logit_bias {
    int32_t token;
    float bias; /* added to the logit; -100 or less: never */
} colo_req_logit_bias;

#define COLO_REQ_MAX_LOGPROBS 20

/* One generated token's log-probabilities (the model's distribution, before
 * penalties, biases and temperature). */
typedef struct colo_req_token_logprobs {
    float logprob;                         /* of the chosen token */
    int n_top;
    int32_t top_ids[COLO_REQ_MAX_LOGPROBS]; /* best first */
    float top_logprobs[COLO_REQ_MAX_LOGPROBS];
} colo_req_token_logprobs;

typedef struct colo_req_params {
    int max_tokens;      /* >= 1 */
    bool max_tokens_set; /* given by the client (else the default, shortened to what the context leaves) */
    float temperature;   /* 0 = greedy */
    float top_p;         /* (0, 1]; 1 = off */
    int top_k;           /* 0 = off */
    uint64_t seed;
    const char *stop[COLO_REQ_MAX_STOP]; /* stop strings, not emitted */
    int n_stop;
    int32_t stop_ids[COLO_REQ_MAX_STOP]; /* tokens that end it, besides the model's own */
    int n_stop_ids;
    float presence_penalty;  /* OpenAI's, over the generated tokens; 0 = off */
    float frequency_penalty; /* 0 = off */
    float repetition_penalty; /* llama.cpp's, over the last 64 tokens; 1 = off */
    float min_p;             /* 0 = off */
    const colo_req_logit_bias *logit_bias; /* n_logit_bias entries */
    int n_logit_bias;
    int logprobs;            /* -1: none; 0..COLO_REQ_MAX_LOGPROBS: the chosen token's and this many top ones */
    bool echo;               /* the prompt's text before the output (completions) */
    bool json_object;        /* constrained decoding: the output is a JSON object */
    const char *json_schema; /* ... or valid against this JSON Schema (text; response_format json_schema) */
    const colo_req_tool *tools; /* functions the model may call (n_tools) */
    int n_tools;
    colo_tool_choice tool_choice;
    const char *tool_name;   /* COLO_TOOLS_NAMED: which */
    bool stream;         /* the front end wants on_token calls */
    bool truncate;       /* embeddings: an input past the model's window is cut (else refused) */
    int n;               /* choices, 1..COLO_REQ_MAX_CHOICES (0 = 1): one prompt, n sequences forked from it */
    bool no_spec;        /* "speculative": false: plain decoding, no drafted tokens (the output is the same) */
} colo_req_params;

/* The input as the client sent it; exactly one of the three forms. */
typedef struct colo_req_input {
    const char *prompt;                /* generation: raw text (no template, special tokens are text) */
    size_t prompt_len;
    const colo_chat_message *messages; /* generation: a chat, templated by the model's kind */
    int n_messages;
    const char *const *texts;          /* embeddings: n_texts inputs */
    const size_t *text_lens;
    int n_texts;
    /* embeddings given as token ids (n_texts inputs, no special tokens;
     * texts NULL): the kind adds its own, as it does to a text's */
    const int32_t *const *token_inputs;
    const int *token_lens;
} colo_req_input;

/* Tokens, filled by the model's kind before the request is queued. */
typedef struct colo_req_tokens {
    const int32_t *ids;    /* generation: the prompt; embeddings: every input, one after another */
    int n;                 /* total */
    const int *text_lens;  /* embeddings: tokens of each input (n_texts) */
} colo_req_tokens;

/* One of n choices (params.n > 1). */
typedef struct colo_req_choice {
    const char *text;          /* UTF-8, stop strings removed */
    size_t text_len;
    const int32_t *tokens;
    int n_tokens;
    const char *finish_reason; /* "stop" | "length" */
    const char *stop_sequence; /* or NULL */
    const colo_req_token_logprobs *logprobs; /* (n_tokens) when params.logprobs >= 0 */
    const char *reasoning;     /* a reasoning model's thinking, held out of text (NULL: none) */
    size_t reasoning_len;
} colo_req_choice;

/* Outcome, written by the executor before on_done; pointers live in the
 * request's pool (or are static strings). */
typedef struct colo_req_outcome {
    colo_status status;        /* COLO_OK, or why it failed (see colo_served_submit) */
    const char *error;         /* message when status != OK */
    /* generation */
    const char *text;          /* generated text (UTF-8, stop strings removed) */
    size_t text_len;
    const char *reasoning;     /* a reasoning model's thinking (<think>...</think>), held out of text; NULL: none */
    size_t reasoning_len;
    const int32_t *tokens;     /* generated token ids */
    int n_tokens;
    const char *finish_reason; /* "stop" | "length" | "tool_calls"; NULL on error */
    const colo_req_tool_call *tool_calls; /* parsed from the output when params.tools were given (then
                                           * text is what came before the calls) */
    int n_tool_calls;
    const char *stop_sequence; /* the stop string (params.stop) that ended it, or NULL */
    const colo_req_token_logprobs *logprobs; /* per generated token (n_tokens) when params.logprobs >= 0 */
    int n_preempted;
    /* params.n > 1: every choice, index 0 being the one in the fields above
     * (NULL otherwise); generated tokens of every choice (usage) */
    const colo_req_choice *choices;
    int n_choices;
    int n_completion_tokens;
    /* embeddings */
    const float *embeddings;   /* (n_texts, dim), L2-normalised */
    int dim;
    /* prompt or input tokens computed */
    int n_input_tokens;
    int n_cached_tokens;     /* of them, found in the prefix cache: not computed (generation) */
    /* timing, milliseconds */
    double queue_ms;   /* submit -> first scheduled */
    double prefill_ms; /* first scheduled -> first token (generation) or compute (embeddings) */
    double decode_ms;  /* first token -> last token */
    double total_ms;   /* submit -> done */
    double ttft_ms;    /* submit -> first token (generation) */
    /* device time: each step's (or batch's) time shared among its requests
     * in proportion to their tokens in it (batching/share.h), seconds */
    double device_s;
} colo_req_outcome;

/* Its SLA's deadlines (batching/admission.h): admission's verdict and the
 * executor's token times. */
typedef struct colo_req_slo {
    bool best_effort;     /* admission found a deadline it cannot meet; served anyway (on_overload: serve) */
    bool refused;         /* refused by admission (on_overload: reject) */
    int retry_after_s;    /* when refused */
    const char *reason;   /* when infeasible: why (static or in the pool) */
    uint64_t last_token_ns; /* executor: its latest token (0: none yet) */
    double max_gap_ms;      /* the longest time between two of its tokens */
} colo_req_slo;

typedef struct colo_request colo_request;

typedef struct colo_req_callbacks {
    /* A generated piece of text (complete UTF-8 only; may be empty while
     * text is held back for a possible stop string) and its token; only
     * when params.stream. Executor thread; must not block. Returns false to
     * stop the request (a client that does not read its stream): it then
     * ends with COLO_ECANCELED. */
    bool (*on_token)(colo_request *r, int32_t token, const char *piece, size_t len);
    /* Exactly once after a successful submit, with r->out filled. Any
     * thread; must not block. */
    void (*on_done)(colo_request *r);
    void *ud;
} colo_req_callbacks;

struct colo_request {
    colo_pool *pool;        /* everything below that is allocated lives here */
    colo_req_identity who;
    colo_task task;
    colo_req_params params;
    colo_req_input in;
    colo_req_tokens tok;
    colo_req_outcome out;
    colo_req_callbacks cb;
    void *front;            /* the front end's per-request context (from the pool) */
    /* A LoRA adapter of the model to run, by name (batching/served.h;
     * NULL: the model itself), and the SLA its deadlines follow (NULL: the
     * model's; set by the served model for an adapter with its own). */
    const char *adapter;
    const colo_sla_cfg *sla;
    /* The logprobs of the token cb.on_token is called with, when asked for
     * (NULL otherwise); valid during that call. */
    const colo_req_token_logprobs *token_logprobs;
    /* The choice (0..params.n - 1) of the token cb.on_token is called with. */
    int token_choice;
    /* The piece cb.on_token is called with is reasoning, not answer text. */
    bool token_reasoning;
    /* Set by the model's kind when it admits the request: the output
     * begins with reasoning (a reasoning model's chat), which its pieces
     * and the outcome's reasoning carry apart from the text. */
    bool reasons;

    /* ---- owned by the served model from submit to on_done ---- */
    colo_queue_item qi;
    atomic_int canceled;    /* set by colo_served_cancel */
    void *priv;             /* executor's per-request state */
    uint64_t submit_ns;
    struct colo_step_share *share; /* the step it is in (batching/share.h) */
    double share_w;                /* its tokens in that step */
    struct colo_request *prep_next; /* waiting to be tokenized off the caller's thread */
    colo_req_slo slo;               /* set at admission, read by the front end after on_done */
    int adapter_index;              /* 1 + its adapter's entry in the model (0: none) */
    int adapter_slot;               /* the adapter's slot in the model's kind */
};

/* A zeroed request with its own pool (params at their defaults:
 * temperature 1, top_p 1). NULL when out of memory. */
colo_request *colo_request_create(void);
/* Frees the request and its pool. Accepts NULL. */
void colo_request_free(colo_request *r);

const char *colo_task_name(colo_task t);

#endif
