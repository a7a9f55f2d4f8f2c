/* batching/request.h: one inference request as the batching layer sees it.
 *
 * The front end (server/) fills a colo_request, submits it to a served model
 * (batching/served.h) and gets exactly one on_done call back, on the model's
 * executor thread, unless submit failed or colo_served_cancel() returned
 * true (then the request was never started and there is no callback). After
 * on_done the executor never touches the request again; the front end owns
 * and frees it.
 *
 * The identity (id, tenant, model, priority) travels with the request
 * through the queue, the batcher and the scheduler, and into usage
 * accounting. */
#ifndef COLO_BATCHING_REQUEST_H
#define COLO_BATCHING_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/queue.h"
#include "runtime/backend.h"

#define COLO_MAX_STOP 8

typedef struct colo_req_identity {
    char id[64];     /* request id (X-Request-Id or generated) */
    char tenant[64]; /* API key's tenant ("" without auth) */
    char model[64];  /* served model name */
    colo_priority priority;
} colo_req_identity;

typedef struct colo_chat_message {
    const char *role;    /* "system" | "user" | "assistant" */
    const char *content; /* UTF-8 */
} colo_chat_message;

typedef struct colo_gen_params {
    int max_tokens;    /* >= 1 */
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    uint64_t seed;
    bool has_seed;     /* false: a random seed */
    const char *stop[COLO_MAX_STOP]; /* stop strings, not emitted */
    int n_stop;
    bool stream;       /* the front end wants on_token calls */
} colo_gen_params;

/* Outcome, valid during on_done only (copy what you keep). */
typedef struct colo_req_result {
    colo_status status;       /* COLO_OK, or why it failed */
    const char *error;        /* message when status != OK */
    /* generation */
    const char *text;         /* generated text (UTF-8, stop strings removed) */
    size_t text_len;
    const int32_t *tokens;    /* generated token ids */
    int n_tokens;
    int n_prompt_tokens;
    const char *finish_reason; /* "stop" | "length" | NULL on error */
    /* embeddings */
    const float *embeddings;  /* (n_inputs, dim), L2-normalised */
    int n_inputs;
    int dim;
    int n_input_tokens;
    /* timing, milliseconds */
    double queue_ms;   /* submit -> first scheduled */
    double prefill_ms; /* first scheduled -> first token (generation) or compute (embeddings) */
    double decode_ms;  /* first token -> last token */
    double total_ms;   /* submit -> done */
    double ttft_ms;    /* submit -> first token */
} colo_req_result;

typedef struct colo_req_callbacks {
    /* A generated piece of text (complete UTF-8 sequences only) and its
     * token; only when params.stream. Executor thread; must not block. */
    void (*on_token)(void *ud, int32_t token, const char *piece, size_t len);
    /* Exactly once. Executor thread; must not block. */
    void (*on_done)(void *ud, const colo_req_result *res);
    void *ud;
} colo_req_callbacks;

typedef enum colo_req_kind { COLO_REQ_GENERATE, COLO_REQ_EMBED } colo_req_kind;

typedef struct colo_request {
    colo_req_identity who;
    colo_req_kind kind;
    /* input: generation takes prompt or messages; embeddings take inputs */
    const char *prompt;
    const colo_chat_message *messages;
    int n_messages;
    const char *const *inputs;
    int n_inputs;
    colo_gen_params params;
    uint64_t timeout_ns; /* queue deadline from submit; 0 = the model's default */
    colo_req_callbacks cb;

    /* ---- owned by the batching layer from submit to on_done ---- */
    colo_queue_item qi;
    int canceled;        /* atomic: set by colo_served_cancel */
    void *priv;          /* executor's per-request state */
    uint64_t submit_ns;
} colo_request;

#endif
