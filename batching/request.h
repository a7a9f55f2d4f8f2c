/* batching/request.h: one inference request as a served model sees it.
 *
 * The front end (server/) fills a colo_request, submits it to a served model
 * (batching/served.h) and, when submit returned COLO_OK, gets exactly one
 * on_done call back: on the model's executor thread, or on the thread that
 * called colo_served_cancel while the request was still queued. After
 * on_done the model never touches the request again; the front end owns and
 * frees it.
 *
 * The identity (id, model, priority) travels with the request through the
 * queue, the batcher and the scheduler, and into the logs. */
#ifndef COLO_BATCHING_REQUEST_H
#define COLO_BATCHING_REQUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/queue.h"
#include "runtime/backend.h"

#define COLO_REQ_MAX_STOP 8

typedef struct colo_req_identity {
    char id[72];    /* request id (X-Request-Id or generated) */
    char model[64]; /* served model name */
    colo_priority priority;
} colo_req_identity;

typedef struct colo_req_params {
    int max_tokens;    /* >= 1 */
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    uint64_t seed;
    const char *stop[COLO_REQ_MAX_STOP]; /* stop strings, not emitted; copied at admission */
    int n_stop;
    bool stream;       /* the front end wants on_token calls */
} colo_req_params;

/* Outcome, valid during on_done only (copy what you keep). */
typedef struct colo_req_result {
    colo_status status;        /* COLO_OK, or why it failed (see colo_served_submit) */
    const char *error;         /* message when status != OK */
    /* generation */
    const char *text;          /* generated text (UTF-8, stop strings removed) */
    size_t text_len;
    const int32_t *tokens;     /* generated token ids */
    int n_tokens;
    int n_prompt_tokens;
    const char *finish_reason; /* "stop" | "length"; NULL on error */
    /* embeddings */
    const float *embeddings;   /* (n_inputs, dim), L2-normalised */
    int n_inputs;
    int dim;
    int n_input_tokens;
    /* timing, milliseconds */
    double queue_ms;   /* submit -> first scheduled */
    double prefill_ms; /* first scheduled -> first token (generation) or compute (embeddings) */
    double decode_ms;  /* first token -> last token */
    double total_ms;   /* submit -> done */
    double ttft_ms;    /* submit -> first token (generation) */
} colo_req_result;

typedef struct colo_req_callbacks {
    /* A generated piece of text (complete UTF-8 only; may be empty while
     * text is held back for a possible stop string) and its token; only
     * when params.stream. Executor thread; must not block. */
    void (*on_token)(void *ud, int32_t token, const char *piece, size_t len);
    /* Exactly once after a successful submit. Must not block. */
    void (*on_done)(void *ud, const colo_req_result *res);
    void *ud;
} colo_req_callbacks;

typedef enum colo_req_kind { COLO_REQ_GENERATE, COLO_REQ_EMBED } colo_req_kind;

typedef struct colo_request {
    colo_req_identity who;
    colo_req_kind kind;
    /* generation: the prompt text; special tokens ("<|im_start|>") are
     * recognised when special is true (chat templates) */
    const char *prompt;
    size_t prompt_len;
    bool special;
    colo_req_params params;
    /* embeddings: n_inputs texts */
    const char *const *inputs;
    const size_t *input_lens;
    int n_inputs;
    uint64_t timeout_ns; /* queue deadline from submit; 0 = the model's queue_timeout_ms */
    colo_req_callbacks cb;

    /* ---- owned by the served model from submit to on_done ---- */
    colo_queue_item qi;
    atomic_int canceled; /* set by colo_served_cancel */
    void *priv;          /* executor's per-request state */
    uint64_t submit_ns;
} colo_request;

#endif
