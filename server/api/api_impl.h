/* server/api/api_impl.h: what the model endpoints' files share: api.c
 * (handlers and the bridge from executors to the loop), api_render.c
 * (JSON bodies and SSE events) and api_metrics.c (metric families). */
#ifndef COLO_SERVER_API_IMPL_H
#define COLO_SERVER_API_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/api/api.h"
#include "server/api/api_request.h"
#include "server/http/http.h"
#include "server/http/http_json.h"
#include "server/core/registry.h"

/* A streaming client that does not read is not rendered for, nor
 * buffered for. The loop renders a stream's tokens as events (JSON) only
 * while its connection holds less than COLO_API_STREAM_QUEUED_BYTES
 * unsent; past it the tokens wait, unrendered, until the connection has
 * written all it holds. Its request is canceled and its connection closed
 * (unsent output dropped) when
 *  - its unsent bytes pass COLO_API_STREAM_MAX_BYTES: the generated tokens
 *    waiting to be rendered plus the events queued on its connection; or
 *  - the server's unsent bytes (every connection's output plus every
 *    stream's tokens waiting) pass server.max_unsent_bytes, and its own
 *    pass COLO_API_STREAM_SLOW_BYTES (it is not keeping up).
 * Rendering is bounded per turn of the loop: a pass renders at most
 * COLO_API_RENDER_PASS_BYTES of events, each stream at most
 * COLO_API_RENDER_SLICE_BYTES before the next stream's turn; what is left
 * is rendered on the next turn, after the network has been served. */
#define COLO_API_STREAM_MAX_BYTES (1u << 20)
#define COLO_API_STREAM_SLOW_BYTES (256u << 10)
#define COLO_API_STREAM_QUEUED_BYTES (256u << 10)
#define COLO_API_RENDER_PASS_BYTES (256u << 10)
#define COLO_API_RENDER_SLICE_BYTES (32u << 10)

typedef struct api_stats api_stats; /* api_stats.c */
struct api_dialect;

/* A dialect's route: what its handler is called with. */
typedef struct api_route {
    colo_api *a;
    const struct api_dialect *d;
} api_route;

#define COLO_API_MAX_DIALECTS 16

struct colo_api {
    colo_server *srv;
    colo_http_server *http;
    colo_metrics *metrics;
    const char *policy;
    colo_registry *reg; /* the models served */
    api_route routes[COLO_API_MAX_DIALECTS];
    long created;
    _Atomic uint64_t seed_counter;
    colo_metric *m_requests, *m_duration, *m_queue, *m_prefill, *m_decode, *m_ttft, *m_itl;
    colo_metric *m_gen_tokens, *m_prompt_tokens, *m_batch, *m_step, *m_depth, *m_running;
    colo_metric *m_mem_used, *m_mem_limit, *m_mem_peak, *m_kv_total, *m_kv_free, *m_ready, *m_preempt;
    colo_metric *m_prefix_queries, *m_prefix_hits, *m_prefix_bytes; /* the prefix cache */
    colo_metric *m_spec_drafted, *m_spec_accepted, *m_spec_steps;   /* speculative decoding */
    colo_metric *m_spec_src_drafted, *m_spec_src_accepted;           /* of them by source */
    colo_metric *m_spec_draft_passes, *m_spec_draft_time;            /* the draft model's passes */
    /* where each model's steps went (colo_served_info's step counters) */
    colo_metric *m_steps_kind, *m_step_tokens, *m_step_time, *m_dev_busy, *m_ops, *m_chunks;
    colo_metric *m_mem_weights, *m_kv_bytes, *m_kv_used_bytes;
    colo_metric *m_kv_usage; /* blocks in use / blocks, 0 to 1 (what inference gateways read) */
    colo_metric *m_queue_cap, *m_slo, *m_info, *m_sched_info;
    colo_metric *m_goodput; /* colo_model_goodput_requests_total */
    api_stats *stats; /* NULL until colo_api_watch */
    colo_metric *m_mem_guaranteed, *m_mem_borrowed, *m_mem_lent, *m_kv_reclaims; /* elastic memory */
    colo_metric *m_sched_wait, *m_sched_steps, *m_sched_cold;
    colo_metric *m_wake, *m_state; /* lifecycle */
    colo_metric *m_evictions;
    colo_metric *m_sleep_preemptions;
    colo_metric *m_trims;
    size_t max_unsent_bytes;     /* server.max_unsent_bytes */
    _Atomic size_t tok_bytes;    /* every stream's generated tokens waiting for the loop */
    colo_metric *m_stream_cut;   /* streams canceled because their client did not read */
    /* streams with tokens to render (loop thread), rendered by one pass a turn */
    struct api_call *render_head, *render_tail;
    colo_http_call render_call;  /* the pass, deferred to the next turn */
    bool render_armed;           /* render_call is deferred */
    size_t render_peak_bytes;    /* the most one pass rendered */
    colo_metric *m_render_deferred, *m_render_held, *m_render_peak;
    colo_api_response_store rs;  /* the Responses API's stored responses; fn NULLs: none */
    colo_metric *m_batch_queued, *m_batch_running, *m_batch_done; /* lines of batches; NULL: none */
};

/* Generated pieces waiting for the loop thread: records of
 * (int32 token, uint32 length, bytes), appended by the executor. Two
 * buffers swap between the executor and the loop, so a stream allocates
 * only while its buffers grow. */
typedef struct tok_buf {
    char *data;
    size_t len, cap;
} tok_buf;

typedef struct api_call api_call;

/* One generated piece of a stream, as the loop hands it to a dialect. */
typedef struct api_piece {
    int32_t token;                       /* -1: text without a token */
    const char *text;
    size_t len;
    int choice;                          /* 0..n-1 */
    const colo_req_token_logprobs *lp;   /* NULL: none */
    size_t sent;                         /* bytes of this choice's text sent before it */
    bool reasoning;                      /* a reasoning model's thinking, not answer text */
} api_piece;

/* Logprobs of n tokens in a dialect's shape (text_offset: completions'
 * offset of the first token in the text). */
typedef json_t *(*api_logprobs_fn)(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps, int n,
                                   size_t text_offset);

/* A dialect: one family of endpoints and everything that differs between
 * them. How a request names its model, how its body is read (body, for
 * colo_api_decode), the id prefix, the shape of a whole answer, of a
 * streamed chunk and of logprobs, how a stream opens, carries a piece,
 * ends and fails, and the error object. Every question of which endpoint
 * a request came by is one of these slots; the table is api_dialect.c's
 * (docs/ARCHITECTURE.md, "Adding an endpoint dialect"). */
typedef struct api_dialect {
    const char *method, *pattern; /* its route */
    const colo_api_body *body;    /* how colo_api_decode reads the body (api_request.c) */
    bool model_in_path;           /* {name} in the path, else "model" in the body */
    const char *id_prefix;        /* of the answer's id ("" for none of its own) */
    colo_http_error_style errors; /* the error object's shape */
    /* Answered on the loop thread without generating (count_tokens,
     * tokenize, detokenize): the body, or NULL with *st and err. NULL: the
     * request is queued on the model. */
    json_t *(*now)(api_call *c, colo_status *st, char *err, size_t errlen);
    json_t *(*whole)(const api_call *c); /* the answer, not streamed */
    /* A streamed chunk of choice index: delta text, or the finish reason;
     * role: the chunk that opens a chat choice; logprobs stolen (NULL:
     * null). NULL where the dialect streams no chunks of this shape. */
    json_t *(*chunk)(const api_call *c, int index, const char *text, size_t len, const char *finish, bool role,
                     json_t *logprobs);
    const char *chunk_object;             /* the chunks' "object" */
    api_logprobs_fn logprobs;
    void (*open)(api_call *c);                      /* a stream's first events */
    void (*piece)(api_call *c, const api_piece *p); /* one generated piece */
    void (*close)(api_call *c, bool held);          /* a stream that succeeded (held: tool calls held back) */
    void (*fail)(api_call *c);                      /* a stream that failed: its error event */
    bool done_marker;                               /* data: [DONE] ends its streams */
    bool stores;                                    /* store and previous_response_id (colo_api_response_store) */
    /* A 400's message about the fields its body was read as, in the
     * client's words, in place (NULL: they are its own). */
    void (*words)(char *err, size_t errlen);
} api_dialect;

/* Every dialect, for the routes: n of them. */
const api_dialect *colo_api_dialects(int *n);

/* The front end's part of one request (in the request's pool). */
struct api_call {
    colo_request *r;
    colo_api *api;
    colo_registry_model *am;
    const char *name;  /* what the client called: am's name, or one of its LoRA adapters' */
    colo_http_req *http;
    const api_dialect *d;
    colo_api_input in; /* options: include_usage, base64 */
    int tenant_key;    /* the caller's key (server/tenants/tenants.h) */
    bool admitted;     /* holds a tenant slot until accounted */
    bool started;      /* SSE stream begun */
    size_t text_sent;  /* bytes of text streamed (completions' logprobs text_offset) */
    int seq_no;        /* the Responses API's next event's sequence_number */
    tok_buf said;      /* the Responses API: the text its stream sent (a failed stream's output) */
    int block;         /* Anthropic: the content block open now */
    bool thinking;     /* Anthropic: that block is a thinking block */
    size_t choice_sent[COLO_REQ_MAX_CHOICES]; /* the same for choices 1..n-1 (params.n > 1) */
    bool aborted;
    bool cut;          /* the server's shutdown deadline ended it */
    long created;
    char oid[96];      /* OpenAI object id */
    /* token stream: executor -> loop */
    pthread_mutex_t mu;
    tok_buf fill;      /* the executor appends here (under mu) */
    tok_buf drain;     /* the loop reads here */
    bool tok_posted;   /* tok_call is queued (under mu) */
    size_t drain_off;  /* drain is rendered up to here (loop) */
    /* its connection's pending output plus drain's unrendered tokens, as
     * the loop last saw them */
    _Atomic size_t unsent_bytes;
    atomic_bool overflow;        /* its client did not read: canceled, the connection to be closed */
    colo_http_call tok_call, done_call;
    /* loop thread: the render queue */
    bool done;          /* the executor finished: answered once its tokens are rendered */
    bool render_queued; /* in the api's render queue */
    bool render_held;   /* its connection holds COLO_API_STREAM_QUEUED_BYTES: waits for it to drain */
    struct api_call *render_prev, *render_next;
    const char *kept_own, *kept_context; /* a stored response's input items (colo_api_response_store) */
};

/* Tokens generated for r, every choice, whatever became of the request or
 * its connection (what is billed and counted); 0 for other tasks. */
static inline int64_t colo_api_completion_tokens(const colo_request *r)
{
    return r->task == COLO_TASK_GENERATE && r->out.n_completion_tokens > 0 ? r->out.n_completion_tokens : 0;
}

/* ---- api_render.c -------------------------------------------------------------- */
/* A JSON string of text as UTF-8; invalid byte sequences become U+FFFD. */
json_t *colo_api_json_text(const char *t, size_t n);
/* Whole answers: /infer, chat completions, completions, embeddings. */
json_t *colo_api_infer_json(const api_call *c);
json_t *colo_api_chat_json(const api_call *c);
json_t *colo_api_completion_json(const api_call *c);
json_t *colo_api_embeddings_json(const api_call *c);
json_t *colo_api_usage_json(const api_call *c);
/* Streamed chunks (api_dialect's chunk). */
json_t *colo_api_chat_chunk_json(const api_call *c, int index, const char *text, size_t len, const char *finish,
                                 bool role, json_t *logprobs);
json_t *colo_api_completion_chunk_json(const api_call *c, int index, const char *text, size_t len, const char *finish,
                                       bool role, json_t *logprobs);
/* Logprobs: chat {"content":[...]}; completions {"tokens",
 * "token_logprobs","top_logprobs","text_offset"}; /infer [{"token",
 * "logprob","top":[{"token","logprob"}]}]. */
json_t *colo_api_chat_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps, int n,
                                    size_t text_offset);
json_t *colo_api_completion_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps,
                                          int n, size_t text_offset);
json_t *colo_api_infer_logprobs_json(const api_call *c, const int32_t *ids, const colo_req_token_logprobs *lps, int n,
                                     size_t text_offset);
int colo_api_status_http(colo_status st);
const char *colo_api_status_code(colo_status st);

/* ---- api_dialect.c: the dialects and their streams -------------------------------- */
/* An SSE event of JSON (stolen), unnamed or named. */
colo_status colo_api_sse_json(api_call *c, json_t *j);
colo_status colo_api_sse_event(api_call *c, const char *event, json_t *j);
/* The error code and message of a failed outcome. */
const char *colo_api_outcome_code(const api_call *c);
const char *colo_api_outcome_error(const api_call *c);
/* The endpoints answered without generating (api.c). */
json_t *colo_api_count_tokens_now(api_call *c, colo_status *st, char *err, size_t errlen);
json_t *colo_api_tokenize_now(api_call *c, colo_status *st, char *err, size_t errlen);
json_t *colo_api_detokenize_now(api_call *c, colo_status *st, char *err, size_t errlen);

/* ---- api_responses.c: OpenAI's Responses API ------------------------------------- */
json_t *colo_api_responses_json(const api_call *c);
void colo_api_responses_open(api_call *c);
void colo_api_responses_piece(api_call *c, const api_piece *p);
void colo_api_responses_close(api_call *c, bool held);
void colo_api_responses_fail(api_call *c);

/* ---- api_anthropic.c ------------------------------------------------------------ */
json_t *colo_api_anthropic_json(const api_call *c);
/* Streamed event data: message_start, a text delta, message_delta (stop
 * reason and output tokens), an error. */
json_t *colo_api_anthropic_start_json(const api_call *c);
json_t *colo_api_anthropic_delta_json(int index, const char *text, size_t len);
json_t *colo_api_anthropic_end_json(const api_call *c);
json_t *colo_api_anthropic_error_json(int http_status, const char *message);

/* ---- api_usage.c: tenants' admission and accounting, GET /v1/usage ------------ */
/* Identifies the caller into c->r->who and admits it (quotas, allowed model,
 * priority ceiling); sets who.priority and the queue item's fair-share
 * fields. False: answered (401/403/429) and accounted. */
bool colo_api_admit(api_call *c);
/* A request that was admitted ends with http_status: the ledger (before
 * the answer is sent), the tenant metrics and the quotas' slots. */
void colo_api_account(api_call *c, int http_status);
colo_status colo_api_usage_routes(colo_api *a);

/* ---- api_metrics.c ------------------------------------------------------------- */
colo_status colo_api_register_metrics(colo_api *a);
void colo_api_count_request(colo_api *a, const char *model, int http_status);
/* Counts a finished request and, when it succeeded, its latencies and tokens. */
void colo_api_record(const api_call *c, int http_status);
/* SLO attainment of a finished or refused request (also called by
 * colo_api_record). */
void colo_api_record_slo(const api_call *c);
/* A model's "slo" object of /v1/models, or NULL when it has no SLA. */
json_t *colo_api_slo_json(const colo_api *a, const colo_registry_model *am);
/* The same for the model or adapter name with SLA sla. */
json_t *colo_api_slo_json_of(const colo_api *a, const char *name, const colo_sla_cfg *sla);
void colo_api_on_step(void *ud, const char *model, int batch, int tokens, double step_ms, double wait_ms);
void colo_api_on_wake(void *ud, const char *model, double wake_s);

/* ---- api_stats.c --------------------------------------------------------------- */
/* Stops watching (colo_api_unwatch) and frees the history. Accepts a->stats NULL. */
void colo_api_stats_free(colo_api *a);

#endif
