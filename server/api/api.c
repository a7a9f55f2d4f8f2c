/* The model endpoints: decode into the request record, submit to the
 * model, and answer on the loop thread from what its executor posts. */
#include "server/api/api_impl.h"
#include "server/api/api_tools.h"
#include "runtime/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INPUTS 2048

/* Frees the request and everything it holds (its pool). */
static void call_free(api_call *c)
{
    pthread_mutex_destroy(&c->mu);
    free(c->fill.data);
    free(c->drain.data);
    free(c->said.data);
    colo_request_free(c->r);
}

/* ---- executor side: tokens and the outcome, handed to the loop ----------------- */

static void deliver_tokens(void *ud);
static void deliver_done(void *ud);

static bool buf_reserve(tok_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d)
        return false;
    b->data = d;
    b->cap = cap;
    return true;
}

#define TOK_HEAD 10 /* bytes before each piece in a token buffer */

/* Whether a stream with unsent bytes of its own must be canceled (see
 * COLO_API_STREAM_MAX_BYTES). Any thread. */
static bool stream_over(const colo_api *a, size_t unsent)
{
    if (unsent > COLO_API_STREAM_MAX_BYTES)
        return true;
    size_t total = colo_http_server_pending_bytes(a->http) + atomic_load(&a->tok_bytes);
    return total > a->max_unsent_bytes && unsent > COLO_API_STREAM_SLOW_BYTES;
}

static bool exec_on_token(colo_request *r, int32_t token, const char *piece, size_t len)
{
    api_call *c = r->front;
    colo_api *a = c->api;
    bool post = false, ok = true;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->overflow) || stream_over(a, c->fill.len + atomic_load(&c->unsent_bytes))) {
        atomic_store(&c->overflow, true);
        ok = false; /* the client does not read: the executor cancels the request */
    } else if (buf_reserve(&c->fill, TOK_HEAD + len + sizeof(colo_req_token_logprobs))) {
        /* The loop is told when the buffer was empty: otherwise its tokens
         * are known to it (posted, or queued to render, or held). */
        post = c->fill.len == 0 && !c->tok_posted;
        /* token, length, whether logprobs follow the piece, the choice, the piece, the logprobs */
        uint32_t l = (uint32_t)len;
        uint8_t has_lp = r->token_logprobs != NULL;
        char *o = c->fill.data + c->fill.len;
        memcpy(o, &token, 4);
        memcpy(o + 4, &l, 4);
        o[8] = (char)(has_lp | (r->token_reasoning ? 2 : 0)); /* bit 1: a reasoning piece */
        o[9] = (char)(r->token_choice > 0 && r->token_choice < COLO_REQ_MAX_CHOICES ? r->token_choice : 0);
        memcpy(o + TOK_HEAD, piece, len);
        if (has_lp)
            memcpy(o + TOK_HEAD + len, r->token_logprobs, sizeof *r->token_logprobs);
        size_t rec = TOK_HEAD + len + (has_lp ? sizeof(colo_req_token_logprobs) : 0);
        c->fill.len += rec;
        atomic_fetch_add(&a->tok_bytes, rec);
        c->tok_posted |= post;
    } /* else: out of memory; the final answer still has the whole text */
    pthread_mutex_unlock(&c->mu);
    if (post)
        colo_http_server_post(c->api->http, &c->tok_call);
    return ok;
}

static void exec_on_done(colo_request *r)
{
    api_call *c = r->front;
    colo_http_server_post(c->api->http, &c->done_call);
}

/* ---- loop side: streaming ------------------------------------------------------- */

static bool begin_stream(api_call *c)
{
    if (c->started)
        return true;
    if (colo_http_stream_begin(c->http, 200, "text/event-stream") != COLO_OK)
        return false;
    c->started = true;
    c->d->open(c);
    return true;
}

static bool client_gone(const api_call *c) { return c->aborted || colo_http_req_aborted(c->http); }

/* ---- loop side: rendering, a bounded pass a turn ------------------------------------ */

static void render_pass(void *ud);

static void render_enqueue(api_call *c)
{
    colo_api *a = c->api;
    if (c->render_queued || c->render_held)
        return;
    c->render_queued = true;
    c->render_next = NULL;
    c->render_prev = a->render_tail;
    if (a->render_tail)
        a->render_tail->render_next = c;
    else
        a->render_head = c;
    a->render_tail = c;
    if (!a->render_armed) {
        a->render_armed = true;
        a->render_call = (colo_http_call){.fn = render_pass, .ud = a};
        colo_http_server_defer(a->http, &a->render_call);
    }
}

static void render_unqueue(api_call *c)
{
    colo_api *a = c->api;
    if (!c->render_queued)
        return;
    if (c->render_prev)
        c->render_prev->render_next = c->render_next;
    else
        a->render_head = c->render_next;
    if (c->render_next)
        c->render_next->render_prev = c->render_prev;
    else
        a->render_tail = c->render_prev;
    c->render_prev = c->render_next = NULL;
    c->render_queued = false;
}

/* Its connection has written all it held: render on. */
static void on_drain(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->render_held = false;
    render_enqueue(c);
}

/* Takes what the executor appended since the last time, once drain is all
 * rendered; false when it appended nothing. */
static bool take_fill(api_call *c)
{
    pthread_mutex_lock(&c->mu);
    bool some = c->fill.len > 0;
    if (some) {
        tok_buf t = c->fill;
        c->drain.len = 0;
        c->fill = c->drain;
        c->drain = t;
        c->drain_off = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return some;
}

/* Drops every token waiting to be rendered (its client is gone or does not read). */
static void drop_tokens(api_call *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->fill.len + (c->drain.len - c->drain_off);
    c->fill.len = 0;
    pthread_mutex_unlock(&c->mu);
    c->drain.len = c->drain_off = 0;
    atomic_fetch_sub(&c->api->tok_bytes, n);
}

static bool tokens_waiting(api_call *c)
{
    pthread_mutex_lock(&c->mu);
    bool some = c->fill.len > 0 || c->drain_off < c->drain.len;
    pthread_mutex_unlock(&c->mu);
    return some;
}

/* Renders the piece at drain_off as its dialect's event. */
static void render_piece(api_call *c)
{
    const char *rec = c->drain.data + c->drain_off;
    int32_t token;
    uint32_t len;
    colo_req_token_logprobs lp;
    memcpy(&token, rec, 4);
    memcpy(&len, rec + 4, 4);
    bool has_lp = (rec[8] & 1) != 0, reasoning = (rec[8] & 2) != 0;
    int ci = (unsigned char)rec[9];
    size_t *sent = ci ? &c->choice_sent[ci] : &c->text_sent;
    const char *piece = rec + TOK_HEAD;
    if (has_lp)
        memcpy(&lp, piece + len, sizeof lp);
    c->d->piece(c, &(api_piece){.token = token, .text = piece, .len = len, .choice = ci, .lp = has_lp ? &lp : NULL,
                                .sent = *sent, .reasoning = reasoning});
    if (!reasoning)
        *sent += len;
    size_t n = TOK_HEAD + len + (has_lp ? sizeof lp : 0);
    c->drain_off += n;
    atomic_fetch_sub(&c->api->tok_bytes, n);
}

typedef enum render_result {
    RENDER_ALL,     /* every token waiting was rendered */
    RENDER_LEFT,    /* its budget was spent with tokens left */
    RENDER_HELD,    /* its connection holds COLO_API_STREAM_QUEUED_BYTES: tokens left */
    RENDER_DROPPED, /* its client is gone or does not read: tokens dropped */
} render_result;

/* Renders c's waiting tokens until budget bytes of events are queued on
 * its connection; *rendered gets the bytes it queued. Rendered events are
 * several times the tokens' size: what counts is what is queued. A client
 * that does not read: the request is canceled (unless its executor did so)
 * and answering it closes the connection. */
static render_result render_tokens(api_call *c, size_t budget, size_t *rendered)
{
    size_t start = colo_http_req_pending_bytes(c->http), pending = start;
    render_result res = RENDER_ALL;
    for (;;) {
        if (c->drain_off + TOK_HEAD > c->drain.len && !take_fill(c))
            break;
        if (client_gone(c) || !begin_stream(c)) {
            res = RENDER_DROPPED;
            break;
        }
        pending = colo_http_req_pending_bytes(c->http);
        if (atomic_load(&c->overflow) || stream_over(c->api, pending + (c->drain.len - c->drain_off))) {
            if (!atomic_exchange(&c->overflow, true))
                colo_served_cancel(c->am->m, c->r);
            res = RENDER_DROPPED;
            break;
        }
        if (pending >= COLO_API_STREAM_QUEUED_BYTES && !c->cut) {
            res = RENDER_HELD;
            break;
        }
        if (pending >= start + budget) {
            res = RENDER_LEFT;
            break;
        }
        render_piece(c);
    }
    pending = colo_http_req_pending_bytes(c->http);
    *rendered = pending > start ? pending - start : 0;
    if (res == RENDER_DROPPED)
        drop_tokens(c);
    atomic_store(&c->unsent_bytes, pending + (c->drain.len - c->drain_off));
    return res;
}

static void answer(api_call *c);

/* A stream's last events (a whole /infer answer among them) wait, as its
 * tokens do, while its connection holds COLO_API_STREAM_QUEUED_BYTES. */
static bool answer_waits(const api_call *c)
{
    return c->started && !c->cut && !client_gone(c) && !atomic_load(&c->overflow) &&
           colo_http_req_pending_bytes(c->http) >= COLO_API_STREAM_QUEUED_BYTES;
}

/* One stream's turn in a pass: returns the bytes it rendered. A stream
 * whose executor has finished is answered once all its tokens are. */
static size_t render_turn(api_call *c, size_t budget)
{
    size_t rendered = 0;
    render_result res = render_tokens(c, budget, &rendered);
    if (res == RENDER_ALL && c->done && answer_waits(c))
        res = RENDER_HELD;
    if (res == RENDER_LEFT) {
        render_enqueue(c); /* at the back: the others' turns first */
    } else if (res == RENDER_HELD) {
        c->render_held = true;
        colo_metric_add(c->api->m_render_held, NULL, 1);
        colo_http_req_on_drain(c->http, on_drain, c);
    } else if (c->done) {
        answer(c);
    }
    return rendered;
}

/* Renders the streams queued, in turns, until COLO_API_RENDER_PASS_BYTES
 * are rendered; the rest waits for the next turn of the loop. */
static void render_pass(void *ud)
{
    colo_api *a = ud;
    a->render_armed = false;
    size_t spent = 0;
    while (a->render_head && spent < COLO_API_RENDER_PASS_BYTES) {
        api_call *c = a->render_head;
        render_unqueue(c);
        size_t left = COLO_API_RENDER_PASS_BYTES - spent;
        spent += render_turn(c, left < COLO_API_RENDER_SLICE_BYTES ? left : COLO_API_RENDER_SLICE_BYTES);
    }
    if (spent > a->render_peak_bytes) {
        a->render_peak_bytes = spent;
        colo_metric_set(a->m_render_peak, NULL, (double)spent);
    }
    if (a->render_head) {
        colo_metric_add(a->m_render_deferred, NULL, 1);
        if (!a->render_armed) { /* (a stream's turn may have deferred it again) */
            a->render_armed = true;
            a->render_call = (colo_http_call){.fn = render_pass, .ud = a};
            colo_http_server_defer(a->http, &a->render_call);
        }
    }
}

/* Posted by the executor when it appended to an empty token buffer. */
static void deliver_tokens(void *ud)
{
    api_call *c = ud;
    pthread_mutex_lock(&c->mu);
    c->tok_posted = false;
    pthread_mutex_unlock(&c->mu);
    render_enqueue(c);
}

/* ---- loop side: final answers --------------------------------------------------- */

static void finish_stream(api_call *c)
{
    const colo_req_outcome *o = &c->r->out;
    if (o->status != COLO_OK)
        c->d->fail(c);
    else
        c->d->close(c, colo_api_tools_hold_stream(c->r));
    if (c->d->done_marker)
        colo_http_sse_send(c->http, NULL, "[DONE]");
    colo_http_stream_end(c->http);
}

/* An error answer for st (before any stream began). */
static void answer_error(api_call *c, int status, colo_status st, const char *msg)
{
    colo_http_req *h = c->http;
    if (st == COLO_EAGAIN && c->r->slo.refused) { /* admission, after tokenizing off the loop */
        char ra[16];
        snprintf(ra, sizeof ra, "%d", c->r->slo.retry_after_s);
        colo_http_add_header(h, "Retry-After", ra);
        colo_http_error(h, status, "slo_unattainable", "model %s: %s", c->name, msg ? msg : "failed");
        return;
    }
    /* (canceled: the model stopped under it, drained for an unload or a reload) */
    if (st == COLO_ETIMEDOUT || st == COLO_ENOMEM || st == COLO_EAGAIN || st == COLO_ECANCELED)
        colo_http_add_header(h, "Retry-After", "1");
    if (c->cut && st == COLO_ECANCELED) {
        colo_http_add_header(h, "Retry-After", "1");
        colo_http_error(h, status, colo_api_outcome_code(c), "model %s: %s", c->name, colo_api_outcome_error(c));
        return;
    }
    char shown[512];
    snprintf(shown, sizeof shown, "%s", msg ? msg : "failed");
    if (status == 400 && c->d->words)
        c->d->words(shown, sizeof shown);
    colo_http_error(h, status, colo_api_status_code(st), "model %s: %s", c->name, shown);
}

/* The request's end, once every token its executor appended is rendered
 * (or dropped): accounted, answered, freed. */
static void answer(api_call *c)
{
    colo_http_req *h = c->http;
    const colo_req_outcome *o = &c->r->out;
    render_unqueue(c);
    drop_tokens(c); /* none left, unless its client is gone or does not read */
    colo_http_req_on_drain(h, NULL, NULL);
    bool gone = client_gone(c);
    int status = o->status == COLO_OK ? 200 : gone ? 499 : colo_api_status_http(o->status);
    if (o->status == COLO_ECANCELED && !gone && !c->aborted)
        status = 503; /* the model stopped under it, or its client stopped reading */
    colo_api_record(c, status);
    colo_api_account(c, status); /* the ledger, before the answer leaves */
    if (status == 200 && c->kept_own && c->api->rs.keep) { /* store: true */
        json_t *kept = colo_api_responses_json(c);
        if (kept)
            c->api->rs.keep(c->api->rs.ud, h, kept, c->kept_own, c->kept_context);
        json_decref(kept);
    }
    colo_http_req_set_tokens(h, c->r->task != COLO_TASK_GENERATE ? o->n_input_tokens
                                                                 : (long)colo_api_completion_tokens(c->r));
    colo_http_req_set_queue_ms(h, o->queue_ms);
    if (c->started && status != 200)
        colo_http_req_set_log_status(h, status); /* its headers said 200; the log says what the ledger says */
    if (atomic_load(&c->overflow))
        colo_metric_add(c->api->m_stream_cut, (const char *const[]){c->name}, 1);
    if (atomic_load(&c->overflow) && c->started && !gone) {
        colo_http_stream_abort(h); /* it does not read: what it did not read is dropped */
    } else if (gone) {
        if (c->started)
            colo_http_stream_end(h);
        else
            colo_http_error(h, 499, "canceled", "the client went away"); /* only frees */
    } else if (c->started || (c->r->params.stream && o->status == COLO_OK && begin_stream(c))) {
        finish_stream(c);
    } else if (o->status != COLO_OK) {
        answer_error(c, status, o->status, o->error);
    } else {
        colo_http_respond_json(h, 200, c->d->whole(c));
    }
    call_free(c);
}

/* The executor finished: what it appended before is rendered first (by
 * the passes, within their budget), then the request is answered. */
static void deliver_done(void *ud)
{
    api_call *c = ud;
    c->done = true;
    if (!client_gone(c) && !atomic_load(&c->overflow) && (tokens_waiting(c) || answer_waits(c))) {
        render_enqueue(c); /* (unless held: its connection's drain queues it) */
        return;
    }
    answer(c);
}

/* A stream held for its connection or queued to render is answered by
 * the next pass (its executor finished) or once its executor finishes. */
static void wake_held(api_call *c)
{
    if (c->render_held) {
        c->render_held = false;
        render_enqueue(c);
    }
}

static void on_abort(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->aborted = true;
    colo_served_cancel(c->am->m, c->r);
    wake_held(c);
}

/* The shutdown deadline: the request ends now, its stream with an error
 * event and [DONE] (deliver_done). */
static void on_cut(colo_http_req *req, void *ud)
{
    (void)req;
    api_call *c = ud;
    c->cut = true;
    colo_served_cancel(c->am->m, c->r);
    wake_held(c); /* its last tokens are rendered, whether it reads or not */
}

/* ---- handlers -------------------------------------------------------------------- */

static void model_limits(colo_served *m, colo_api_limits *lim)
{
    colo_served_info in;
    colo_served_get_info(m, &in);
    lim->max_seq_len = in.max_seq_len > 0 ? in.max_seq_len : 1;
    lim->n_vocab = in.n_vocab;
    /* Only a bound on the body's work before tokenizing (a token is rarely
     * longer than 32 bytes); the model's kind checks the exact count. */
    lim->max_prompt_bytes = (size_t)lim->max_seq_len * 32;
    lim->max_inputs = MAX_INPUTS;
}

/* A request record with its front-end part, both in one pool. */
static api_call *call_create(colo_api *a, colo_registry_model *am, colo_http_req *req, const api_dialect *d)
{
    colo_request *r = colo_request_create();
    api_call *c = r ? colo_pool_calloc(r->pool, 1, sizeof *c) : NULL;
    if (!c) {
        colo_request_free(r);
        return NULL;
    }
    if (pthread_mutex_init(&c->mu, NULL)) {
        colo_request_free(r);
        return NULL;
    }
    c->r = r;
    c->api = a;
    c->am = am;
    c->name = am->name;
    c->http = req;
    c->d = d;
    c->created = (long)time(NULL);
    c->in.r = r;
    c->tok_call = (colo_http_call){.fn = deliver_tokens, .ud = c};
    c->done_call = (colo_http_call){.fn = deliver_done, .ud = c};
    r->front = c;
    r->cb = (colo_req_callbacks){exec_on_token, exec_on_done, c};
    return c;
}

/* A request to one of the model's adapters refused for the adapter's
 * state: 404 when it is gone (removed since it was looked up), 503 with
 * its own state, and with Retry-After only while it loads or unloads (a
 * failed one stays failed: its error says why). Accounted (the ledger,
 * the tenants' counts) with the status it is answered with. */
static bool refuse_adapter(api_call *c)
{
    colo_http_req *req = c->http;
    colo_served_adapter_info in;
    colo_served_state s = colo_served_get_state(c->am->m);
    if (c->am->unloading || (s != COLO_SERVED_READY && s != COLO_SERVED_SLEEPING && s != COLO_SERVED_WAKING))
        return false; /* the model itself is not serving */
    if (!colo_served_adapter_get(c->am->m, c->r->adapter, &in)) {
        colo_api_account(c, 404);
        colo_api_count_request(c->api, c->name, 404);
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s' (GET /v1/models lists them)", c->name);
        return true;
    }
    if (in.state == COLO_ADAPTER_READY)
        return false;
    colo_api_account(c, 503);
    colo_api_count_request(c->api, c->name, 503);
    bool failed = in.state == COLO_ADAPTER_FAILED;
    if (!failed)
        colo_http_add_header(req, "Retry-After", "1");
    colo_http_error(req, 503, failed ? "model_failed" : "model_not_ready", "adapter %s of model %s is %s%s%s", c->name,
                    c->am->name, colo_adapter_state_name(in.state), in.error[0] ? ": " : "", in.error);
    return true;
}

/* Answers a refused submission at once, accounted (the ledger, the
 * tenants' counts) with the status it is answered with, before the answer
 * leaves: the one the client and the access log get. */
static void refuse(api_call *c, colo_status st, const char *err)
{
    if (st == COLO_ECANCELED && c->r->adapter && refuse_adapter(c))
        return;
    colo_http_req *req = c->http;
    int status = st == COLO_EINVAL || st == COLO_ETOOLONG ? 400 : st == COLO_EAGAIN ? 429 : 503; /* as answered below */
    colo_api_account(c, status);
    colo_api_count_request(c->api, c->name, status);
    if (status == 400) {
        char shown[512];
        snprintf(shown, sizeof shown, "%s", err);
        if (c->d->words)
            c->d->words(shown, sizeof shown);
        colo_http_error(req, 400, colo_api_status_code(st), "%s", shown);
    } else if (st == COLO_EAGAIN && c->r->slo.refused) {
        colo_api_record_slo(c);
        char ra[16];
        snprintf(ra, sizeof ra, "%d", c->r->slo.retry_after_s);
        colo_http_add_header(req, "Retry-After", ra);
        colo_http_error(req, 429, "slo_unattainable", "model %s: %s", c->name, c->r->slo.reason);
    } else if (st == COLO_EAGAIN) {
        colo_served_info in;
        colo_served_get_info(c->am->m, &in);
        colo_http_add_header(req, "Retry-After", "1");
        int max_tokens = colo_served_config(c->am->m)->batching.max_queue_tokens;
        char tokens[64] = "";
        if (max_tokens > 0)
            snprintf(tokens, sizeof tokens, " or %d prompt tokens", max_tokens);
        colo_http_error(req, 429, "queue_full", "model %s: the queue is full (%d requests%s); retry later",
                        c->name, in.max_queue, tokens);
    } else if (st == COLO_ENOMEM) {
        colo_http_add_header(req, "Retry-After", "1");
        colo_http_error(req, 503, "out_of_memory", "model %s: %s", c->name, err);
    } else {
        colo_served_info in;
        colo_served_get_info(c->am->m, &in);
        colo_http_add_header(req, "Retry-After", "5");
        colo_http_error(req, 503, "model_not_ready", "model %s is %s%s%s", c->name,
                        colo_served_state_name(in.state), in.error[0] ? ": " : "", in.error);
    }
}

/* ---- the endpoints answered on the loop thread without generating ---------------- */

json_t *colo_api_detokenize_now(api_call *c, colo_status *st, char *err, size_t errlen)
{
    const char *text;
    size_t len;
    *st = colo_served_detokenize(c->am->m, c->in.tokens, c->in.n_tokens, c->r->pool, &text, &len, err, errlen);
    return *st == COLO_OK ? json_pack("{s:o}", "text", colo_api_json_text(text, len)) : NULL;
}

json_t *colo_api_count_tokens_now(api_call *c, colo_status *st, char *err, size_t errlen)
{
    *st = colo_served_tokenize(c->am->m, c->r, err, errlen);
    return *st == COLO_OK ? json_pack("{s:i}", "input_tokens", c->r->tok.n) : NULL;
}

json_t *colo_api_tokenize_now(api_call *c, colo_status *st, char *err, size_t errlen)
{
    colo_request *r = c->r;
    if ((*st = colo_served_tokenize(c->am->m, r, err, errlen)) != COLO_OK)
        return NULL;
    json_t *ids = json_array();
    for (int i = 0; ids && i < r->tok.n; i++)
        if (json_array_append_new(ids, json_integer(r->tok.ids[i]))) {
            json_decref(ids);
            ids = NULL;
        }
    return ids ? json_pack("{s:o,s:i}", "tokens", ids, "count", r->tok.n) : NULL;
}

static void answer_now(api_call *c)
{
    char err[512] = "";
    colo_status st;
    json_t *j = c->d->now(c, &st, err, sizeof err);
    if (st == COLO_OK) {
        colo_api_count_request(c->api, c->name, 200);
        colo_api_account(c, 200);
        colo_http_respond_json(c->http, 200, j);
        return;
    }
    int status = st == COLO_EUNSUPPORTED ? 400 : colo_api_status_http(st);
    colo_api_count_request(c->api, c->name, status);
    colo_api_account(c, status);
    if (status == 400)
        colo_http_error(c->http, 400, st == COLO_EUNSUPPORTED ? "invalid_request" : colo_api_status_code(st), "%s", err);
    else
        answer_error(c, status, st, err);
}

/* A model loading at run time, or one that failed, has no limits to check
 * a request against: 503 with Retry-After before decoding. */
static bool not_loaded(colo_api *a, colo_registry_model *am, colo_http_req *req)
{
    colo_served_state s = colo_served_get_state(am->m);
    if (s != COLO_SERVED_LOADING && s != COLO_SERVED_FAILED)
        return false;
    colo_served_info in;
    colo_served_get_info(am->m, &in);
    colo_api_count_request(a, am->name, 503);
    colo_http_add_header(req, "Retry-After", "5");
    colo_http_error(req, 503, "model_not_ready", "model %s is %s%s%s", am->name, colo_served_state_name(in.state),
                    in.error[0] ? ": " : "", in.error);
    return true;
}

/* The call runs LoRA adapter ad of its model: served and accounted under
 * the adapter's name. False (answered) when the model's task is not
 * generation or the name cannot be kept. */
static bool use_adapter(api_call *c, const colo_served_adapter_info *ad)
{
    char *name = colo_pool_strndup(c->r->pool, ad->cfg.name, strlen(ad->cfg.name));
    if (!name) {
        colo_http_error(c->http, 503, "out_of_memory", "out of memory");
        call_free(c);
        return false;
    }
    c->name = name;
    c->r->adapter = name;
    return true;
}

/* A body that asks to be stored or continues a stored response goes to
 * the response store first (colo_api_response_store): *own and *context
 * set when it is to be kept. False after answering. */
static bool stored_context(colo_api *a, colo_http_req *req, json_t *body, char **own, char **context)
{
    json_t *store = json_object_get(body, "store"), *previous = json_object_get(body, "previous_response_id");
    /* (a batch's lines are kept only when they ask: their output is the batch's) */
    bool keep = json_is_true(store) || (!store && a->rs.expand && a->rs.store_default && !colo_http_req_local(req));
    if (!keep && (!previous || json_is_null(previous)))
        return true;
    if (!a->rs.expand) {
        colo_http_error(req, 400, "invalid_request", "%s: colo keeps no responses here (responses.enabled is false)",
                        json_is_true(store) ? "store" : "previous_response_id");
        return false;
    }
    if (!a->rs.expand(a->rs.ud, req, body, own, context))
        return false;
    if (!keep) { /* continues one, is not kept itself */
        free(*own);
        free(*context);
        *own = *context = NULL;
    }
    return true;
}

void colo_api_set_response_store(colo_api *a, const colo_api_response_store *rs) { a->rs = *rs; }

void colo_api_set_batch_metrics(colo_api *a, colo_metric *queued, colo_metric *running, colo_metric *completed)
{
    a->m_batch_queued = queued;
    a->m_batch_running = running;
    a->m_batch_done = completed;
}

static void handle(colo_http_req *req, void *ud)
{
    const api_route *route = ud;
    colo_api *a = route->a;
    const api_dialect *d = route->d;
    colo_http_req_set_error_style(req, d->errors);
    json_t *body = colo_http_req_json(req);
    if (!body)
        return; /* answered 400 */
    char err[512];
    const char *name = d->model_in_path ? colo_http_req_param(req, "name") : colo_api_model_field(body, err, sizeof err);
    if (!name) {
        colo_http_error(req, 400, "invalid_request", "%s", err);
        json_decref(body);
        return;
    }
    colo_registry_model *am = colo_registry_find(a->reg, name);
    colo_served_adapter_info adapter;
    bool is_adapter = !am && (am = colo_registry_find_adapter(a->reg, name, &adapter)) != NULL;
    colo_http_req_set_model(req, name);
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s' (GET /v1/models lists them)", name);
        json_decref(body);
        return;
    }
    if (not_loaded(a, am, req)) {
        json_decref(body);
        return;
    }
    char *own = NULL, *context = NULL;
    if (d->stores && !stored_context(a, req, body, &own, &context)) {
        json_decref(body);
        return;
    }
    api_call *c = call_create(a, am, req, d);
    if (c && own && (!(c->kept_own = colo_pool_strndup(c->r->pool, own, strlen(own))) ||
                     !(c->kept_context = colo_pool_strndup(c->r->pool, context, strlen(context))))) {
        call_free(c);
        c = NULL;
    }
    free(own);
    free(context);
    if (!c) {
        colo_http_error(req, 503, "out_of_memory", "out of memory");
        json_decref(body);
        return;
    }
    if (is_adapter && !use_adapter(c, &adapter)) {
        json_decref(body);
        return;
    }
    const colo_model_cfg *mc = colo_served_config(am->m);
    colo_api_limits lim;
    model_limits(am->m, &lim);
    colo_status st = colo_api_decode(d->body, colo_served_task(am->m), body, &lim, &c->in, err, sizeof err);
    json_decref(body);
    if (st != COLO_OK) {
        colo_api_count_request(a, c->name, 400);
        colo_http_error(req, 400, colo_api_status_code(st), "%s", err);
        call_free(c);
        return;
    }
    colo_request *r = c->r;
    c->in.store = c->kept_own != NULL; /* what the response object says */
    snprintf(r->who.id, sizeof r->who.id, "%s", colo_http_req_id(req));
    snprintf(r->who.model, sizeof r->who.model, "%s", c->name);
    r->who.priority = c->in.has_priority ? c->in.priority : is_adapter ? adapter.cfg.priority : mc->priority;
    if (!colo_api_admit(c)) {
        call_free(c);
        return;
    }
    const colo_http_local *local = colo_http_req_local(req);
    if (local && local->batch) { /* a batch's line: below every interactive request */
        r->who.priority = COLO_PRIO_LOW;
        r->qi.batch = true;
    }
    if (r->params.seed == UINT64_MAX)
        r->params.seed = (uint64_t)time(NULL) * 6364136223846793005ull + atomic_fetch_add(&a->seed_counter, 1);
    snprintf(c->oid, sizeof c->oid, "%s%s", d->id_prefix, r->who.id);
    err[0] = 0;
    if (d->now) {
        answer_now(c);
        call_free(c);
        return;
    }
    st = colo_served_submit(am->m, r, err, sizeof err);
    if (st != COLO_OK) {
        refuse(c, st, err);
        call_free(c);
        return;
    }
    colo_http_req_on_abort(req, on_abort, c);
    colo_http_req_on_cut(req, on_cut, c);
}

/* e's LoRA adapters appended to data, each as a model of its own. */
static bool list_adapters(colo_api *a, colo_registry_model *e, json_t *data)
{
    colo_served_adapter_info *ads = malloc(COLO_SERVED_MAX_ADAPTERS * sizeof *ads);
    if (!ads)
        return false;
    int n = colo_served_adapter_list(e->m, ads, COLO_SERVED_MAX_ADAPTERS);
    bool ok = true;
    for (int i = 0; ok && i < n; i++)
        ok = json_array_append_new(data, colo_api_adapter_json(a, e, &ads[i])) == 0;
    free(ads);
    return ok;
}

static void h_models(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    json_t *data = json_array();
    for (colo_registry_model *e = NULL; data && (e = colo_registry_next(a->reg, e));) {
        json_t *m = colo_api_model_json(a, e);
        const colo_model_cfg *mc = colo_served_config(e->m);
        bool ok = m && !json_array_append(data, m);
        /* each alias is listed too, as the same model under that id */
        for (int i = 0; ok && i < mc->n_aliases; i++) {
            json_t *alias = json_deep_copy(m);
            ok = alias && !json_object_set_new(alias, "id", json_string(mc->aliases[i])) &&
                 !json_object_set_new(alias, "alias_of", json_string(e->name)) && !json_array_append(data, alias);
            json_decref(alias);
        }
        json_decref(m);
        ok = ok && list_adapters(a, e, data);
        if (!ok) {
            json_decref(data);
            data = NULL;
        }
    }
    colo_http_respond_json(req, 200, data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL);
}

static void h_model(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    const char *name = colo_http_req_param(req, "name");
    colo_registry_model *am = name ? colo_registry_find(a->reg, name) : NULL;
    colo_served_adapter_info ad;
    colo_registry_model *base = !am && name ? colo_registry_find_adapter(a->reg, name, &ad) : NULL;
    if (base) {
        colo_http_req_set_model(req, name);
        colo_http_respond_json(req, 200, colo_api_adapter_json(a, base, &ad));
        return;
    }
    if (!am) {
        colo_http_error(req, 404, "model_not_found", "no model named '%.64s'", name ? name : "");
        return;
    }
    colo_http_req_set_model(req, name);
    colo_http_respond_json(req, 200, colo_api_model_json(a, am));
}

/* ---- life ------------------------------------------------------------------------- */

colo_api *colo_api_create(colo_server *srv, colo_registry *reg, const colo_config *cfg, char *err, size_t errlen)
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
    a->reg = reg;
    a->max_unsent_bytes = (size_t)cfg->server.max_unsent_bytes;
    atomic_init(&a->tok_bytes, 0);
    a->created = (long)time(NULL);
    if (colo_api_register_metrics(a) != COLO_OK) {
        colo_set_err(err, errlen, "cannot register the model metrics");
        free(a);
        return NULL;
    }
    int n = 0;
    const api_dialect *d = colo_api_dialects(&n);
    for (int i = 0; i < n; i++) {
        a->routes[i] = (api_route){.a = a, .d = &d[i]};
        if (colo_server_route(srv, d[i].method, d[i].pattern, handle, &a->routes[i], 0) != COLO_OK ||
            colo_server_route_errors(srv, d[i].pattern, d[i].errors) != COLO_OK) {
            colo_set_err(err, errlen, "cannot add the route %s %s", d[i].method, d[i].pattern);
            free(a);
            return NULL;
        }
    }
    if (colo_server_route(srv, "GET", "/v1/models", h_models, a, 0) != COLO_OK ||
        colo_server_route(srv, "GET", "/v1/models/{name}", h_model, a, 0) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the route GET /v1/models");
        free(a);
        return NULL;
    }
    if (colo_api_usage_routes(a) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the route GET /v1/usage");
        free(a);
        return NULL;
    }
    return a;
}

colo_served_hooks colo_api_hooks(colo_api *a)
{
    return (colo_served_hooks){.on_step = colo_api_on_step, .on_wake = colo_api_on_wake, .ud = a};
}

void colo_api_free(colo_api *a)
{
    if (!a)
        return;
    colo_api_stats_free(a);
    free(a);
}
