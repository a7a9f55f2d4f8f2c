/* The model endpoints: decode, queue on the model, answer from the loop. */
#include "server/api.h"
#include "server/api_request.h"
#include "server/http_json.h"
#include "models/unicode.h"
#include "runtime/log.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INPUTS 2048

typedef struct api_model {
    colo_served *m;
    const char *name;
} api_model;

struct colo_api {
    colo_server *srv;
    colo_http_server *http;
    colo_metrics *metrics;
    const char *policy;
    int n_expected;
    api_model models[COLO_CFG_MAX_MODELS];
    int n_models;
    long created;
    _Atomic uint64_t seed_counter;
    colo_metric *m_requests, *m_duration, *m_queue, *m_prefill, *m_decode, *m_ttft, *m_itl;
    colo_metric *m_gen_tokens, *m_prompt_tokens, *m_batch, *m_step, *m_depth, *m_running;
    colo_metric *m_mem_used, *m_mem_limit, *m_mem_peak, *m_kv_total, *m_kv_free, *m_ready, *m_preempt;
    colo_metric *m_sched_wait, *m_sched_steps;
};

/* One request from handler to response. */
typedef struct api_call {
    colo_request r; /* first: the executor's view */
    colo_api *api;
    api_model *am;
    colo_http_req *http;
    colo_api_endpoint ep;
    colo_api_input in;
    bool started; /* SSE stream begun */
    bool aborted;
    long created;
    char oid[96]; /* OpenAI object id */
    /* outcome, copied on the executor thread */
    colo_status st;
    char *error;
    char *text;
    size_t text_len;
    int32_t *tokens;
    int n_tokens, n_prompt;
    const char *finish;
    float *emb;
    int n_emb, dim, n_in_tokens;
    double queue_ms, prefill_ms, decode_ms, total_ms, ttft_ms;
} api_call;

typedef struct tok_msg {
    api_call *c;
    int32_t token;
    size_t len;
    char piece[];
} tok_msg;

static const double batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
static const double step_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

/* ---- helpers ------------------------------------------------------------------- */

static api_model *find_model(colo_api *a, const char *name)
{
    for (int i = 0; i < a->n_models; i++)
        if (!strcmp(a->models[i].name, name))
            return &a->models[i];
    return NULL;
}

static void call_free(api_call *c)
{
    colo_api_input_free(&c->in);
    free(c->error);
    free(c->text);
    free(c->tokens);
    free(c->emb);
    free(c);
}

static int status_http(colo_status st)
{
    switch (st) {
    case COLO_OK: return 200;
    case COLO_EINVAL: return 400;
    default: return 503;
    }
}

static const char *status_code(colo_status st)
{
    switch (st) {
    case COLO_EINVAL: return "invalid_request";
    case COLO_ETIMEDOUT: return "queue_timeout";
    case COLO_ENOMEM: return "out_of_memory";
    case COLO_ECANCELED: return "canceled";
    case COLO_EDEVICE:
    case COLO_EFATAL: return "model_failed";
    default: return "internal_error";
    }
}

/* A JSON string of text as UTF-8; a model may generate invalid byte
 * sequences (a token of a lone byte), which become U+FFFD. */
static json_t *json_text(const char *t, size_t n)
{
    json_t *j = json_stringn(t ? t : "", t ? n : 0);
    if (j || !t)
        return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = colo_utf8_decode((const unsigned char *)t + i, n - i, &cp);
        if (cp == UINT32_MAX || cp == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += l > 0 ? (size_t)l : 1;
            continue;
        }
        memcpy(buf + o, t + i, (size_t)l);
        o += (size_t)l;
        i += (size_t)l;
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static json_t *usage_json(const api_call *c)
{
    if (c->r.kind == COLO_REQ_EMBED)
        return json_pack("{s:i,s:i}", "prompt_tokens", c->n_in_tokens, "total_tokens", c->n_in_tokens);
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", c->n_prompt, "completion_tokens", c->n_tokens,
                     "total_tokens", c->n_prompt + c->n_tokens);
}

static json_t *timing_json(const api_call *c)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "queue_ms", c->queue_ms, "prefill_ms", c->prefill_ms, "decode_ms",
                     c->decode_ms, "total_ms", c->total_ms, "ttft_ms", c->ttft_ms);
}

static json_t *tokens_json(const int32_t *t, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(t[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static char *base64_floats(const float *v, int n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = (const unsigned char *)v; /* little-endian host */
    size_t len = (size_t)n * 4, o = 0;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        out[o++] = tbl[x >> 18 & 63];
        out[o++] = tbl[x >> 12 & 63];
        out[o++] = i + 1 < len ? tbl[x >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? tbl[x & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static json_t *embedding_json(const float *v, int dim, bool b64)
{
    if (b64) {
        char *s = base64_floats(v, dim);
        json_t *j = s ? json_string(s) : NULL;
        free(s);
        return j;
    }
    json_t *a = json_array();
    for (int i = 0; a && i < dim; i++)
        if (json_array_append_new(a, json_real(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* ---- metrics ------------------------------------------------------------------- */

static void count_request(colo_api *a, const char *model, int http_status)
{
    char status[8];
    snprintf(status, sizeof status, "%d", http_status);
    const char *ls[] = {model, status};
    colo_metric_add(a->m_requests, ls, 1);
}

static void record(api_call *c, int http_status)
{
    colo_api *a = c->api;
    const char *model = c->am->name;
    const char *lm[] = {model};
    count_request(a, model, http_status);
    if (c->st != COLO_OK)
        return;
    const char *lq[] = {model, colo_priority_name(c->r.who.priority)};
    colo_metric_observe(a->m_duration, lm, c->total_ms / 1e3);
    colo_metric_observe(a->m_queue, lq, c->queue_ms / 1e3);
    colo_metric_observe(a->m_prefill, lm, c->prefill_ms / 1e3);
    if (c->r.kind == COLO_REQ_GENERATE) {
        colo_metric_observe(a->m_decode, lm, c->decode_ms / 1e3);
        if (c->n_tokens > 0)
            colo_metric_observe(a->m_ttft, lm, c->ttft_ms / 1e3);
        /* the mean gap, once per gap: the histogram's sum and count stay exact */
        for (int i = 1; i < c->n_tokens; i++)
            colo_metric_observe(a->m_itl, lm, c->decode_ms / 1e3 / (c->n_tokens - 1));
        colo_metric_add(a->m_gen_tokens, lm, c->n_tokens);
        colo_metric_add(a->m_prompt_tokens, lm, c->n_prompt);
    } else {
        colo_metric_add(a->m_prompt_tokens, lm, c->n_in_tokens);
    }
}

static void on_step(void *ud, const char *model, int batch, int tokens, double step_ms, double wait_ms)
{
    (void)tokens;
    colo_api *a = ud;
    const char *lm[] = {model};
    const char *lp[] = {model, a->policy};
    colo_metric_observe(a->m_batch, lm, batch);
    colo_metric_observe(a->m_step, lm, step_ms / 1e3);
    colo_metric_add(a->m_sched_steps, lp, 1);
    colo_metric_add(a->m_sched_wait, lp, wait_ms / 1e3);
}

static void on_render(void *ud)
{
    colo_api *a = ud;
    for (int i = 0; i < a->n_models; i++) {
        colo_served_info in;
        colo_served_get_info(a->models[i].m, &in);
        const char *lm[] = {in.name};
        colo_metric_set(a->m_depth, lm, in.queue_depth);
        colo_metric_set(a->m_running, lm, in.running);
        colo_metric_set(a->m_mem_used, lm, (double)in.mem.used_bytes);
        colo_metric_set(a->m_mem_limit, lm, (double)in.mem.limit_bytes);
        colo_metric_set(a->m_mem_peak, lm, (double)in.mem.peak_bytes);
        colo_metric_set(a->m_ready, lm, in.state == COLO_SERVED_READY);
        if (in.kind == COLO_KIND_LLAMA) {
            colo_metric_set(a->m_kv_total, lm, in.kv_blocks);
            colo_metric_set(a->m_kv_free, lm, in.kv_free_blocks);
            colo_metric_set(a->m_preempt, lm, (double)in.preemptions);
        }
    }
}

static colo_status register_metrics(colo_api *a)
{
    colo_metrics *m = a->metrics;
    const char *const L1[] = {"model"}, *const L2s[] = {"model", "status"}, *const L2p[] = {"model", "priority"},
                      *const L2pol[] = {"model", "policy"};
    const double *lb = colo_metrics_latency_buckets;
    int nlb = colo_metrics_latency_buckets_n;
    int nbb = (int)(sizeof batch_buckets / sizeof *batch_buckets);
    int nsb = (int)(sizeof step_buckets / sizeof *step_buckets);
    a->m_requests = colo_metrics_counter(m, "colo_model_requests_total", "Model requests finished, by HTTP status.",
                                         2, L2s);
    a->m_duration = colo_metrics_histogram(m, "colo_model_request_duration_seconds",
                                           "Submit to done, successful requests.", 1, L1, lb, nlb);
    a->m_queue = colo_metrics_histogram(m, "colo_model_queue_duration_seconds",
                                        "Time in the model's queue before the first step.", 2, L2p, lb, nlb);
    a->m_prefill = colo_metrics_histogram(m, "colo_model_prefill_duration_seconds",
                                          "First step to first token (generation) or the batch's compute (encoders).",
                                          1, L1, lb, nlb);
    a->m_decode = colo_metrics_histogram(m, "colo_model_decode_duration_seconds", "First token to last token.", 1,
                                         L1, lb, nlb);
    a->m_ttft = colo_metrics_histogram(m, "colo_model_time_to_first_token_seconds", "Submit to first token.", 1, L1,
                                       lb, nlb);
    a->m_itl = colo_metrics_histogram(m, "colo_model_inter_token_latency_seconds",
                                      "Time between generated tokens (each request's mean gap, once per gap).", 1, L1,
                                      step_buckets, nsb);
    a->m_gen_tokens = colo_metrics_counter(m, "colo_model_generated_tokens_total", "Tokens generated.", 1, L1);
    a->m_prompt_tokens = colo_metrics_counter(m, "colo_model_prompt_tokens_total", "Prompt or input tokens processed.",
                                              1, L1);
    a->m_batch = colo_metrics_histogram(m, "colo_model_batch_size", "Sequences (generation) or requests (encoders) per step.",
                                        1, L1, batch_buckets, nbb);
    a->m_step = colo_metrics_histogram(m, "colo_model_step_duration_seconds", "One executor step.", 1, L1, step_buckets,
                                       nsb);
    a->m_depth = colo_metrics_gauge(m, "colo_model_queue_depth", "Requests waiting in the model's queue.", 1, L1);
    a->m_running = colo_metrics_gauge(m, "colo_model_running", "Requests in the model's executor.", 1, L1);
    a->m_mem_used = colo_metrics_gauge(m, "colo_model_memory_used_bytes", "Bytes in use in the model's arena.", 1, L1);
    a->m_mem_limit = colo_metrics_gauge(m, "colo_model_memory_limit_bytes", "The model's arena size.", 1, L1);
    a->m_mem_peak = colo_metrics_gauge(m, "colo_model_memory_peak_bytes", "Highest use of the model's arena.", 1, L1);
    a->m_kv_total = colo_metrics_gauge(m, "colo_model_kv_blocks", "KV cache blocks of the model.", 1, L1);
    a->m_kv_free = colo_metrics_gauge(m, "colo_model_kv_blocks_free", "KV cache blocks free.", 1, L1);
    a->m_ready = colo_metrics_gauge(m, "colo_model_ready", "1 when the model serves requests.", 1, L1);
    a->m_preempt = colo_metrics_counter(m, "colo_model_preemptions_total", "Sequences preempted for cache space.", 1,
                                        L1);
    a->m_sched_wait = colo_metrics_counter(m, "colo_scheduler_wait_seconds_total",
                                           "Time executors waited for the co-scheduler, by policy.", 2, L2pol);
    a->m_sched_steps = colo_metrics_counter(m, "colo_scheduler_steps_total", "Steps granted by the co-scheduler.", 2,
                                            L2pol);
    colo_metric *all[] = {a->m_requests, a->m_duration, a->m_queue, a->m_prefill, a->m_decode, a->m_ttft,
                          a->m_itl, a->m_gen_tokens, a->m_prompt_tokens, a->m_batch, a->m_step, a->m_depth,
                          a->m_running, a->m_mem_used, a->m_mem_limit, a->m_mem_peak, a->m_kv_total, a->m_kv_free,
                          a->m_ready, a->m_preempt, a->m_sched_wait, a->m_sched_steps};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!all[i])
            return COLO_ENOMEM;
    return colo_metrics_on_render(m, on_render, a);
}

/* ---- executor side -------------------------------------------------------------- */

static void deliver_token(void *ud);
static void deliver_done(void *ud);

static void post(colo_api *a, void (*fn)(void *), void *ud)
{
    /* The loop must get the call: retry while memory is short. */
    for (int i = 0; colo_http_server_call(a->http, fn, ud) != COLO_OK; i++) {
        if (i == 0)
            COLO_WARN("api: out of memory posting to the event loop; retrying");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void exec_on_token(void *ud, int32_t token, const char *piece, size_t len)
{
    api_call *c = ud;
    tok_msg *t = malloc(sizeof *t + len + 1);
    if (!t)
        return; /* the final response still has the whole text */
    t->c = c;
    t->token = token;
    t->len = len;
    memcpy(t->piece, piece, len);
    t->piece[len] = 0;
    if (colo_http_server_call(c->api->http, deliver_token, t) != COLO_OK)
        free(t);
}

static void exec_on_done(void *ud, const colo_req_result *res)
{
    api_call *c = ud;
    c->st = res->status;
    if (res->status != COLO_OK)
        c->error = strdup(res->error ? res->error : colo_status_str(res->status));
    if (res->text && res->text_len && (c->text = malloc(res->text_len + 1))) {
        memcpy(c->text, res->text, res->text_len);
        c->text[res->text_len] = 0;
        c->text_len = res->text_len;
    }
    if (res->n_tokens && (c->tokens = malloc((size_t)res->n_tokens * sizeof *c->tokens))) {
        memcpy(c->tokens, res->tokens, (size_t)res->n_tokens * sizeof *c->tokens);
        c->n_tokens = res->n_tokens;
    }
    if (res->status == COLO_OK && res->embeddings &&
        (c->emb = malloc((size_t)res->n_inputs * res->dim * sizeof *c->emb))) {
        memcpy(c->emb, res->embeddings, (size_t)res->n_inputs * res->dim * sizeof *c->emb);
        c->n_emb = res->n_inputs;
        c->dim = res->dim;
    } else if (res->status == COLO_OK && res->embeddings) {
        c->st = COLO_ENOMEM;
        c->error = strdup("out of memory");
    }
    if (res->status == COLO_OK && ((res->text_len && !c->text) || (res->n_tokens && !c->tokens))) {
        c->st = COLO_ENOMEM;
        free(c->error);
        c->error = strdup("out of memory");
    }
    c->finish = res->finish_reason;
    c->n_prompt = res->n_prompt_tokens;
    c->n_in_tokens = res->n_input_tokens;
    c->queue_ms = res->queue_ms;
    c->prefill_ms = res->prefill_ms;
    c->decode_ms = res->decode_ms;
    c->total_ms = res->total_ms;
    c->ttft_ms = res->ttft_ms;
    post(c->api, deliver_done, c);
}

/* ---- loop side: streaming ------------------------------------------------------ */

static json_t *chunk_json(api_call *c, const char *delta_text, size_t len, const char *finish, bool role)
{
    if (c->ep == COLO_API_CHAT) {
        json_t *delta = json_object();
        if (delta && role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (delta && delta_text)
            json_object_set_new(delta, "content", json_text(delta_text, len));
        return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:n}]}", "id", c->oid, "object",
                         "chat.completion.chunk", "created", (json_int_t)c->created, "model", c->am->name,
                         "choices", "index", 0, "delta", delta ? delta : json_null(), "finish_reason",
                         finish ? json_string(finish) : json_null(), "logprobs");
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:n}]}", "id", c->oid, "object", "text_completion",
                     "created", (json_int_t)c->created, "model", c->am->name, "choices", "index", 0, "text",
                     json_text(delta_text ? delta_text : "", delta_text ? len : 0), "finish_reason",
                     finish ? json_string(finish) : json_null(), "logprobs");
}

static colo_status sse_json(api_call *c, json_t *j)
{
    if (!j)
        return COLO_ENOMEM;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s)
        return COLO_ENOMEM;
    colo_status st = colo_http_sse_send(c->http, NULL, s);
    free(s);
    return st;
}

static bool begin_stream(api_call *c)
{
    if (c->started)
        return true;
    if (colo_http_stream_begin(c->http, 200, "text/event-stream") != COLO_OK)
        return false;
    c->started = true;
    if (c->ep == COLO_API_CHAT)
        sse_json(c, chunk_json(c, "", 0, NULL, true));
    return true;
}

static void deliver_token(void *ud)
{
    tok_msg *t = ud;
    api_call *c = t->c;
    if (!c->aborted && !colo_http_req_aborted(c->http) && begin_stream(c)) {
        if (c->ep == COLO_API_INFER)
            sse_json(c, json_pack("{s:s,s:i,s:o}", "id", colo_http_req_id(c->http), "token", t->token, "text",
                                  json_text(t->piece, t->len)));
        else if (t->len)
            sse_json(c, chunk_json(c, t->piece, t->len, NULL, false));
    }
    free(t);
}

/* ---- loop side: final answers --------------------------------------------------- */

static json_t *infer_json(api_call *c)
{
    json_t *o = json_pack("{s:s,s:s}", "id", colo_http_req_id(c->http), "model", c->am->name);
    if (!o)
        return NULL;
    int bad = 0;
    if (c->r.kind == COLO_REQ_GENERATE) {
        bad |= json_object_set_new(o, "text", json_text(c->text ? c->text : "", c->text_len));
        bad |= json_object_set_new(o, "tokens", tokens_json(c->tokens, c->n_tokens));
        bad |= json_object_set_new(o, "finish_reason", json_string(c->finish ? c->finish : "stop"));
    } else {
        json_t *arr = json_array();
        for (int i = 0; arr && i < c->n_emb; i++)
            bad |= json_array_append_new(arr, embedding_json(c->emb + (size_t)i * c->dim, c->dim, false));
        bad |= json_object_set_new(o, "embeddings", arr);
        bad |= json_object_set_new(o, "dim", json_integer(c->dim));
    }
    bad |= json_object_set_new(o, "usage", usage_json(c));
    bad |= json_object_set_new(o, "timing", timing_json(c));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *openai_json(api_call *c)
{
    if (c->ep == COLO_API_EMBEDDINGS) {
        json_t *data = json_array();
        int bad = !data;
        for (int i = 0; data && i < c->n_emb; i++)
            bad |= json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i,
                                                         "embedding",
                                                         embedding_json(c->emb + (size_t)i * c->dim, c->dim,
                                                                        c->in.base64)));
        json_t *o = json_pack("{s:s,s:o,s:s,s:o}", "object", "list", "data", data, "model", c->am->name, "usage",
                              usage_json(c));
        if (bad) {
            json_decref(o);
            return NULL;
        }
        return o;
    }
    const char *fin = c->finish ? c->finish : "stop";
    json_t *choice;
    if (c->ep == COLO_API_CHAT)
        choice = json_pack("{s:i,s:{s:s,s:o},s:s,s:n}", "index", 0, "message", "role", "assistant", "content",
                           json_text(c->text ? c->text : "", c->text_len), "finish_reason", fin, "logprobs");
    else
        choice = json_pack("{s:i,s:o,s:s,s:n}", "index", 0, "text", json_text(c->text ? c->text : "", c->text_len),
                           "finish_reason", fin, "logprobs");
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", c->oid, "object",
                     c->ep == COLO_API_CHAT ? "chat.completion" : "text_completion", "created",
                     (json_int_t)c->created, "model", c->am->name, "choices", choice, "usage", usage_json(c));
}

static void finish_stream(api_call *c)
{
    if (c->st != COLO_OK) {
        json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", status_code(c->st), "message",
                              c->error ? c->error : "failed", "request_id", colo_http_req_id(c->http));
        sse_json(c, e);
    } else if (c->ep == COLO_API_INFER) {
        json_t *o = infer_json(c);
        if (o) {
            char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
            json_decref(o);
            if (s)
                colo_http_sse_send(c->http, "done", s);
            free(s);
        }
    } else {
        sse_json(c, chunk_json(c, NULL, 0, c->finish ? c->finish : "stop", false));
        if (c->in.include_usage)
            sse_json(c, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", c->oid, "object",
                                  c->ep == COLO_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)c->created, "model", c->am->name, "choices", "usage", usage_json(c)));
    }
    colo_http_sse_send(c->http, NULL, "[DONE]");
    colo_http_stream_end(c->http);
}

static void deliver_done(void *ud)
{
    api_call *c = ud;
    colo_http_req *h = c->http;
    int status = c->st == COLO_OK ? 200 : (c->aborted || colo_http_req_aborted(h)) ? 499 : status_http(c->st);
    if (c->st == COLO_ECANCELED && !c->aborted)
        status = 503; /* the model stopped under it */
    record(c, status);
    colo_http_req_set_tokens(h, c->r.kind == COLO_REQ_GENERATE ? c->n_tokens : c->n_in_tokens);
    colo_http_req_set_queue_ms(h, c->queue_ms);
    if (c->aborted || colo_http_req_aborted(h)) {
        if (c->started)
            colo_http_stream_end(h);
        else
            colo_http_error(h, 499, "canceled", "the client went away"); /* only frees */
    } else if (c->started || (c->r.params.stream && c->st == COLO_OK && begin_stream(c))) {
        finish_stream(c);
    } else if (c->st != COLO_OK) {
        if (c->st == COLO_ETIMEDOUT || c->st == COLO_ENOMEM)
            colo_http_add_header(h, "Retry-After", "1");
        colo_http_error(h, status, status_code(c->st), "model %s: %s", c->am->name,
                        c->error ? c->error : "failed");
    } else {
        colo_http_respond_json(h, 200, c->ep == COLO_API_INFER ? infer_json(c) : openai_json(c));
    }
    call_free(c);
}

static void on_abort(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->aborted = true;
    colo_served_cancel(c->am->m, &c->r);
}

/* ---- handlers -------------------------------------------------------------------- */

static void model_limits(colo_served *m, colo_api_limits *lim)
{
    colo_served_info in;
    colo_served_get_info(m, &in);
    lim->max_seq_len = in.max_seq_len > 0 ? in.max_seq_len : 1;
    lim->n_vocab = in.n_vocab;
    /* A token is at least one byte, and few tokens exceed 16 bytes. */
    lim->max_prompt_bytes = (size_t)lim->max_seq_len * 32;
    lim->max_inputs = MAX_INPUTS;
}

static void handle(colo_api *a, colo_http_req *req, colo_api_endpoint ep)
{
    json_t *body = colo_http_req_json(req);
    if (!body)
        return; /* answered 400 */
    char err[512];
    const char *name = ep == COLO_API_INFER ? colo_http_req_param(req, "name") : colo_api_model_field(body, err,
                                                                                                     sizeof err);
    if (!name) {
        colo_http_error(req, 400, "invalid_request", "%s", err);
        json_decref(body);
        return;
    }
    api_model *am = find_model(a, name);
    colo_http_req_set_model(req, name);
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s' (GET /v1/models lists them)", name);
        json_decref(body);
        return;
    }
    api_call *c = calloc(1, sizeof *c);
    if (!c) {
        colo_http_error(req, 503, "out_of_memory", "out of memory");
        json_decref(body);
        return;
    }
    c->api = a;
    c->am = am;
    c->http = req;
    c->ep = ep;
    c->created = (long)time(NULL);
    const colo_model_cfg *mc = colo_served_config(am->m);
    colo_api_limits lim;
    model_limits(am->m, &lim);
    colo_status st = colo_api_decode(ep, mc->kind, body, &lim, &c->in, err, sizeof err);
    json_decref(body);
    if (st != COLO_OK) {
        count_request(a, am->name, 400);
        colo_http_error(req, 400, "invalid_request", "%s", err);
        call_free(c);
        return;
    }
    colo_request *r = &c->r;
    snprintf(r->who.id, sizeof r->who.id, "%s", colo_http_req_id(req));
    snprintf(r->who.model, sizeof r->who.model, "%s", am->name);
    r->who.priority = c->in.has_priority ? c->in.priority : mc->priority;
    r->kind = mc->kind == COLO_KIND_LLAMA ? COLO_REQ_GENERATE : COLO_REQ_EMBED;
    r->prompt = c->in.prompt;
    r->prompt_len = c->in.prompt_len;
    r->special = c->in.special;
    r->params = c->in.params;
    if (r->params.seed == UINT64_MAX)
        r->params.seed = (uint64_t)time(NULL) * 6364136223846793005ull + atomic_fetch_add(&a->seed_counter, 1);
    r->inputs = (const char *const *)c->in.inputs;
    r->input_lens = c->in.input_lens;
    r->n_inputs = c->in.n_inputs;
    r->cb = (colo_req_callbacks){exec_on_token, exec_on_done, c};
    snprintf(c->oid, sizeof c->oid, "%s-%s", ep == COLO_API_CHAT ? "chatcmpl" : "cmpl", r->who.id);
    st = colo_served_submit(am->m, r);
    if (st == COLO_EAGAIN) {
        colo_served_info in;
        colo_served_get_info(am->m, &in);
        count_request(a, am->name, 429);
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 429, "queue_full", "model %s: the queue is full (%d requests); retry later", am->name,
                        in.max_queue);
        call_free(c);
        return;
    }
    if (st != COLO_OK) {
        colo_served_info in;
        colo_served_get_info(am->m, &in);
        count_request(a, am->name, 503);
        colo_http_add_header(req, "Retry-After", "5");
        colo_http_error(req, 503, "model_not_ready", "model %s is %s%s%s", am->name, colo_served_state_name(in.state),
                        in.error[0] ? ": " : "", in.error);
        call_free(c);
        return;
    }
    colo_http_req_on_abort(req, on_abort, c);
}

static void h_infer(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_INFER); }
static void h_completions(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_COMPLETIONS); }
static void h_chat(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_CHAT); }
static void h_embeddings(colo_http_req *req, void *ud) { handle(ud, req, COLO_API_EMBEDDINGS); }

static json_t *model_json(colo_api *a, api_model *am)
{
    colo_served_info in;
    colo_served_get_info(am->m, &in);
    const colo_model_cfg *mc = colo_served_config(am->m);
    const colo_batching_cfg *b = &mc->batching;
    json_t *pref = json_array();
    for (int i = 0; pref && i < b->n_preferred; i++)
        json_array_append_new(pref, json_integer(b->preferred_batch_size[i]));
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:{s:I,s:I,s:I},s:{s:i,s:o,s:i,s:i,s:i,s:i},s:i,s:i,s:i,s:i,s:f}", "id",
        in.name, "object", "model", "created", (json_int_t)a->created, "owned_by", "colo", "kind",
        mc->kind == COLO_KIND_LLAMA ? "llama" : "bert", "state", colo_served_state_name(in.state), "priority",
        colo_priority_name(in.priority), "memory", "limit_bytes", (json_int_t)in.mem.limit_bytes, "used_bytes",
        (json_int_t)in.mem.used_bytes, "peak_bytes", (json_int_t)in.mem.peak_bytes, "batching", "max_batch_size",
        b->max_batch_size, "preferred_batch_size", pref ? pref : json_null(), "max_queue_delay_us",
        b->max_queue_delay_us, "max_queue", b->max_queue, "queue_timeout_ms", b->queue_timeout_ms,
        "max_batch_prefill_tokens", b->max_batch_prefill_tokens, "queue_depth", in.queue_depth, "running", in.running,
        "max_seq_len", in.max_seq_len, "n_vocab", in.n_vocab, "load_ms", in.load_ms);
    if (!o)
        return NULL;
    if (in.kind == COLO_KIND_LLAMA)
        json_object_set_new(o, "kv_cache",
                            json_pack("{s:i,s:i,s:i,s:I}", "blocks", in.kv_blocks, "free_blocks", in.kv_free_blocks,
                                      "block_size", in.kv_block_size, "preemptions", (json_int_t)in.preemptions));
    else
        json_object_set_new(o, "dim", json_integer(in.dim));
    if (in.error[0])
        json_object_set_new(o, "error", json_string(in.error));
    return o;
}

static void h_models(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    json_t *data = json_array();
    for (int i = 0; data && i < a->n_models; i++)
        if (json_array_append_new(data, model_json(a, &a->models[i]))) {
            json_decref(data);
            data = NULL;
        }
    colo_http_respond_json(req, 200, data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL);
}

static void h_model(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    const char *name = colo_http_req_param(req, "name");
    api_model *am = name ? find_model(a, name) : NULL;
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s'", name ? name : "");
        return;
    }
    colo_http_req_set_model(req, name);
    colo_http_respond_json(req, 200, model_json(a, am));
}

static bool ready(void *ud)
{
    colo_api *a = ud;
    if (a->n_models < a->n_expected)
        return false;
    for (int i = 0; i < a->n_models; i++)
        if (colo_served_get_state(a->models[i].m) != COLO_SERVED_READY)
            return false;
    return true;
}

/* ---- life ------------------------------------------------------------------------- */

colo_api *colo_api_create(colo_server *srv, const colo_config *cfg, char *err, size_t errlen)
{
    colo_api *a = calloc(1, sizeof *a);
    if (!a) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    a->srv = srv;
    a->http = colo_server_http(srv);
    a->metrics = colo_server_metrics(srv);
    a->policy = colo_sched_policy_name(cfg->scheduler.policy);
    a->n_expected = cfg->n_models;
    a->created = (long)time(NULL);
    if (register_metrics(a) != COLO_OK) {
        colo_set_err(err, errlen, "cannot register the model metrics");
        free(a);
        return NULL;
    }
    struct {
        const char *method, *pattern;
        colo_http_handler_fn fn;
    } routes[] = {{"POST", "/v1/models/{name}/infer", h_infer},
                  {"GET", "/v1/models", h_models},
                  {"GET", "/v1/models/{name}", h_model},
                  {"POST", "/v1/completions", h_completions},
                  {"POST", "/v1/chat/completions", h_chat},
                  {"POST", "/v1/embeddings", h_embeddings}};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (colo_server_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, a, 0) != COLO_OK) {
            colo_set_err(err, errlen, "cannot add the route %s %s", routes[i].method, routes[i].pattern);
            free(a);
            return NULL;
        }
    colo_server_set_ready(srv, ready, a);
    return a;
}

colo_status colo_api_add_model(colo_api *a, colo_served *m)
{
    if (a->n_models >= COLO_CFG_MAX_MODELS)
        return COLO_EINVAL;
    a->models[a->n_models].m = m;
    a->models[a->n_models].name = colo_served_config(m)->name;
    a->n_models++;
    return COLO_OK;
}

colo_served_hooks colo_api_hooks(colo_api *a) { return (colo_served_hooks){on_step, a}; }

void colo_api_free(colo_api *a) { free(a); }
