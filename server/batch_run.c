/* Running a batch: its input validated line by line, each line sent
 * through the server's own front door as a request of the batch class,
 * each answer committed with its usage row, and the output and error
 * files written at the end (server/batches.h). */
#include "server/batches_impl.h"

#include <event2/event.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fault.h"
#include "runtime/log.h"
#include "server/http/http_json.h"
#include "server/tenants/tenants.h"

#define MAX_MODELS 16        /* distinct models in one batch */
#define RETRY_MAX_MS 5000    /* the longest wait before a line refused for room is tried again */
#define MAX_ERRORS 100       /* validation errors listed in "errors" */
#define TICK_MS 200

typedef enum line_state { LINE_TODO = 0, LINE_RUNNING, LINE_DONE } line_state;

typedef struct run_line run_line;

struct run_batch {
    colo_batches *b;
    run_batch *next;
    json_t *obj;         /* the batch's object, as stored after each change */
    colo_batch_owner owner;
    int key;             /* the tenants' key its lines run as */
    char *input;         /* the input file's bytes */
    size_t input_len;
    int n_lines;
    size_t *off, *len;   /* each line's bytes in input */
    uint8_t *state;      /* line_state of each line */
    uint8_t *attempts;
    int64_t *retry_at_ms; /* a line refused for room waits until then */
    uint8_t *model;      /* each line's index into models */
    char models[MAX_MODELS][64];
    int n_models;
    int cursor;          /* the first line that may still be to do */
    int in_flight;
    int done;
};

struct run_line {
    run_batch *rb;
    int line;
    char request_id[COLO_HTTP_REQUEST_ID_MAX + 1];
    colo_usage_row usage;
    bool has_usage;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sets key of obj (stealing v): jansson fails only out of memory, which
 * leaves the object as it was; that is logged. */
static void put(json_t *obj, const char *key, json_t *v)
{
    if (json_object_set_new(obj, key, v))
        COLO_ERROR("batches: out of memory: '%s' of a batch object not updated", key);
}

static const char *status_of(const run_batch *rb) { return json_string_value(json_object_get(rb->obj, "status")); }

static bool status_is(const run_batch *rb, const char *s) { return !strcmp(status_of(rb), s); }

/* Sets the status and its timestamp ("<status>_at"). */
static void set_status(run_batch *rb, const char *status)
{
    char at[48];
    snprintf(at, sizeof at, "%s_at", status);
    put(rb->obj, "status", json_string(status));
    if (json_object_get(rb->obj, at))
        put(rb->obj, at, json_integer(colo_batches_now_s()));
}

static void set_count(run_batch *rb, const char *which, int64_t v)
{
    put(json_object_get(rb->obj, "request_counts"), which, json_integer(v));
}

static int64_t count_of(const run_batch *rb, const char *which)
{
    return json_integer_value(json_object_get(json_object_get(rb->obj, "request_counts"), which));
}

static void save(run_batch *rb)
{
    if (colo_batch_store_put_batch(rb->b->store, &rb->owner, rb->obj) != COLO_OK)
        COLO_ERROR("batches: batch %s: its state could not be saved", json_string_value(json_object_get(rb->obj, "id")));
}

static void arm(colo_batches *b, int ms);

/* ---- validation ------------------------------------------------------------------------------- */

/* Adds a validation error of line (1-based; 0: none). */
static void add_error(json_t *errors, const char *code, const char *param, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add_error(json_t *errors, const char *code, const char *param, int line, const char *fmt, ...)
{
    if (json_array_size(errors) >= MAX_ERRORS)
        return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:s,s:s,s:s?,s:o}", "code", code, "message", msg, "param", param, "line",
                          line > 0 ? json_integer(line) : json_null());
    if (!e || json_array_append_new(errors, e))
        COLO_ERROR("batches: out of memory: a validation error not listed (line %d)", line);
}

/* The index of model in rb's models (added), or -1 past MAX_MODELS. */
static int model_index(run_batch *rb, const char *model)
{
    for (int i = 0; i < rb->n_models; i++)
        if (!strcmp(rb->models[i], model))
            return i;
    if (rb->n_models == MAX_MODELS)
        return -1;
    snprintf(rb->models[rb->n_models], sizeof rb->models[0], "%s", model);
    return rb->n_models++;
}

/* Checks request i, line `line` of the file (bytes [p, p+n)), as OpenAI
 * does; custom_ids holds those seen. */
static void check_line(run_batch *rb, int i, int line, const char *p, size_t n, json_t *custom_ids, json_t *errors)
{
    const char *endpoint = json_string_value(json_object_get(rb->obj, "endpoint"));
    char err[200];
    json_t *j = colo_json_parse(p, n, COLO_JSON_MAX_DEPTH, err, sizeof err);
    if (!j || !json_is_object(j)) {
        add_error(errors, "invalid_json_line", NULL, line, "This line is not a JSON object%s%s", j ? "" : ": ",
                  j ? "" : err);
        json_decref(j);
        return;
    }
    const char *custom_id = json_string_value(json_object_get(j, "custom_id"));
    const char *method = json_string_value(json_object_get(j, "method"));
    const char *url = json_string_value(json_object_get(j, "url"));
    json_t *body = json_object_get(j, "body");
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!custom_id)
        add_error(errors, "missing_required_parameter", "custom_id", line, "custom_id: missing, or not a string");
    else if (json_object_get(custom_ids, custom_id))
        add_error(errors, "duplicate_custom_id", "custom_id", line, "custom_id '%.64s' is used by an earlier line",
                  custom_id);
    else
        put(custom_ids, custom_id, json_true());
    if (!method || strcmp(method, "POST"))
        add_error(errors, "invalid_method", "method", line, "method: must be POST");
    if (!url || strcmp(url, endpoint))
        add_error(errors, "mismatched_endpoint", "url", line, "url: must be the batch's endpoint %s", endpoint);
    if (!json_is_object(body))
        add_error(errors, "missing_required_parameter", "body", line, "body: missing, or not an object");
    else if (!model)
        add_error(errors, "missing_required_parameter", "body.model", line, "body.model: missing, or not a string");
    else if (!colo_registry_find(rb->b->reg, model) && !colo_registry_find_adapter(rb->b->reg, model, NULL))
        add_error(errors, "model_not_found", "body.model", line, "body.model: no model named '%.64s'", model);
    else if ((rb->model[i] = (uint8_t)model_index(rb, model)) == (uint8_t)-1)
        add_error(errors, "too_many_models", "body.model", line, "a batch may use at most %d models", MAX_MODELS);
    else if (json_is_true(json_object_get(body, "stream")))
        add_error(errors, "invalid_value", "body.stream", line, "body.stream: a batch's lines are not streamed");
    json_decref(j);
}

/* Splits the input into lines (blank ones skipped) and checks each; false
 * when the batch failed (its errors set). */
static bool validate(run_batch *rb)
{
    json_t *errors = json_array(), *ids = json_object();
    if (!errors || !ids) {
        json_decref(errors);
        json_decref(ids);
        return false;
    }
    int line = 0;
    for (size_t o = 0; o < rb->input_len;) {
        line++;
        const char *nl = memchr(rb->input + o, '\n', rb->input_len - o);
        size_t n = nl ? (size_t)(nl - (rb->input + o)) : rb->input_len - o;
        size_t m = n;
        while (m && (rb->input[o + m - 1] == '\r' || rb->input[o + m - 1] == ' '))
            m--;
        if (m) {
            if (rb->n_lines == rb->b->cfg.max_lines) {
                add_error(errors, "too_many_lines", NULL, line, "more than batches.max_lines (%d) requests",
                          rb->b->cfg.max_lines);
                break;
            }
            rb->off[rb->n_lines] = o;
            rb->len[rb->n_lines] = m;
            check_line(rb, rb->n_lines, line, rb->input + o, m, ids, errors);
            rb->n_lines++;
        }
        o += n + 1;
    }
    if (!rb->n_lines && !json_array_size(errors))
        add_error(errors, "empty_file", NULL, 0, "The input file has no lines");
    json_decref(ids);
    if (json_array_size(errors)) {
        put(rb->obj, "errors", json_pack("{s:s,s:o}", "object", "list", "data", errors));
        return false;
    }
    json_decref(errors);
    put(rb->obj, "model", json_string(rb->models[0]));
    return true;
}

/* Reads the input file and sizes the per-line arrays (lines are at most
 * one per two bytes); false when it cannot be read (the batch fails). */
static bool load_input(run_batch *rb)
{
    const char *id = json_string_value(json_object_get(rb->obj, "input_file_id"));
    if (!(rb->input = colo_batches_read_file(rb->b, id, &rb->input_len)))
        return false;
    size_t cap = rb->input_len / 2 + 2;
    if (cap > (size_t)rb->b->cfg.max_lines + 1)
        cap = (size_t)rb->b->cfg.max_lines + 1;
    rb->off = calloc(cap, sizeof *rb->off);
    rb->len = calloc(cap, sizeof *rb->len);
    rb->state = calloc(cap, 1);
    rb->attempts = calloc(cap, 1);
    rb->model = calloc(cap, 1);
    rb->retry_at_ms = calloc(cap, sizeof *rb->retry_at_ms);
    return rb->off && rb->len && rb->state && rb->attempts && rb->model && rb->retry_at_ms;
}

/* ---- metrics ------------------------------------------------------------------------------------ */

static void count_line(run_batch *rb, int i, colo_metric *m, double d)
{
    colo_metric_add(m, (const char *const[]){rb->models[rb->model[i]]}, d);
}

/* The lines still to do leave the queued gauge (the batch ends). */
static void unqueue_rest(run_batch *rb)
{
    for (int i = 0; i < rb->n_lines; i++)
        if (rb->state[i] == LINE_TODO)
            count_line(rb, i, rb->b->m_queued, -1);
}

/* ---- answers ------------------------------------------------------------------------------------- */

/* A line's output line (JSON text, malloc'd). */
static char *output_line(run_batch *rb, const run_line *l, int status, const char *body, size_t len)
{
    char err[128];
    json_t *j = colo_json_parse(rb->input + rb->off[l->line], rb->len[l->line], COLO_JSON_MAX_DEPTH, err, sizeof err);
    json_t *resp = colo_json_parse(body, len, COLO_JSON_MAX_DEPTH, err, sizeof err);
    char id[48];
    colo_batches_new_id("batch_req_", id, sizeof id);
    json_t *out = json_pack("{s:s,s:O?,s:{s:i,s:s,s:o?},s:n}", "id", id, "custom_id", json_object_get(j, "custom_id"),
                            "response", "status_code", status, "request_id", l->request_id, "body",
                            resp ? resp : json_stringn(body, len), "error");
    json_decref(j);
    char *text = out ? json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(out);
    return text;
}

/* Whether an answer says to try the line again later: refused for room
 * (quotas, a full queue, SLO admission) or for the model's state, or cut
 * by a shutdown. */
static bool retryable(int status) { return status == 429 || status == 503 || status == 499; }

static void on_usage(void *ud, const colo_usage_row *row)
{
    run_line *l = ud;
    l->usage = *row;
    l->has_usage = true;
}

static void on_response(void *ud, int status, const char *body, size_t len)
{
    run_line *l = ud;
    run_batch *rb = l->rb;
    colo_batches *b = rb->b;
    int i = l->line;
    rb->in_flight--;
    count_line(rb, i, b->m_running, -1);
    if (b->stopping || retryable(status)) {
        /* not done: run again, until the batch's window ends (after a
         * restart, for a shutdown) */
        rb->state[i] = LINE_TODO;
        if (rb->attempts[i] < 255)
            rb->attempts[i]++;
        int64_t wait = 250ll * rb->attempts[i] * rb->attempts[i];
        rb->retry_at_ms[i] = now_ms() + (wait < RETRY_MAX_MS ? wait : RETRY_MAX_MS);
        if (i < rb->cursor)
            rb->cursor = i;
        count_line(rb, i, b->m_queued, 1);
        free(l);
        arm(b, 0);
        return;
    }
    bool ok = status == 200;
    char *text = output_line(rb, l, status, body, len);
    set_count(rb, ok ? "completed" : "failed", count_of(rb, ok ? "completed" : "failed") + 1);
    if (!text || colo_batch_store_line_done(b->store, &rb->owner, rb->obj, i, ok, text,
                                            l->has_usage ? &l->usage : NULL) != COLO_OK) {
        set_count(rb, ok ? "completed" : "failed", count_of(rb, ok ? "completed" : "failed") - 1);
        rb->state[i] = LINE_TODO; /* nothing of it was committed: run again */
        rb->retry_at_ms[i] = now_ms() + 1000;
        if (i < rb->cursor)
            rb->cursor = i;
        count_line(rb, i, b->m_queued, 1);
    } else {
        rb->state[i] = LINE_DONE;
        rb->done++;
        colo_metric_add(b->m_completed, (const char *const[]){rb->models[rb->model[i]], ok ? "ok" : "failed"}, 1);
        if (colo_fault_hit(COLO_FAULT_KILL, "batch_line"))
            raise(SIGKILL);
    }
    free(text);
    free(l);
    arm(b, 0);
}

/* Sends line i through the front door. */
static bool send_line(run_batch *rb, int i)
{
    colo_batches *b = rb->b;
    char err[64];
    json_t *j = colo_json_parse(rb->input + rb->off[i], rb->len[i], COLO_JSON_MAX_DEPTH, err, sizeof err);
    char *body = j ? json_dumps(json_object_get(j, "body"), JSON_COMPACT) : NULL;
    json_decref(j);
    run_line *l = body ? calloc(1, sizeof *l) : NULL;
    colo_http_req *req = NULL;
    if (l) {
        *l = (run_line){.rb = rb, .line = i};
        colo_http_local local = {.principal = rb->key, .batch = true, .on_response = on_response,
                                 .on_usage = on_usage, .ud = l};
        req = colo_http_local_new(b->http, "POST", json_string_value(json_object_get(rb->obj, "endpoint")), body,
                                  strlen(body), &local);
    }
    free(body);
    if (!req) {
        free(l);
        return false;
    }
    snprintf(l->request_id, sizeof l->request_id, "%s", colo_http_req_id(req));
    rb->state[i] = LINE_RUNNING;
    rb->in_flight++;
    count_line(rb, i, b->m_queued, -1);
    count_line(rb, i, b->m_running, 1);
    colo_http_local_run(req); /* may answer at once (on_response) */
    return true;
}

/* ---- the end ----------------------------------------------------------------------------------- */

typedef struct out_files {
    char *ok, *bad;
    size_t ok_len, bad_len, ok_cap, bad_cap;
    bool failed;
} out_files;

static void append(char **buf, size_t *len, size_t *cap, const char *text, bool *failed)
{
    size_t n = strlen(text);
    if (*len + n + 2 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 2)
            c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb) {
            *failed = true;
            return;
        }
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, text, n);
    (*buf)[*len + n] = '\n';
    *len += n + 1;
}

static void collect(void *ud, int line, bool ok, const char *result)
{
    (void)line;
    out_files *f = ud;
    if (ok)
        append(&f->ok, &f->ok_len, &f->ok_cap, result ? result : "", &f->failed);
    else
        append(&f->bad, &f->bad_len, &f->bad_cap, result ? result : "", &f->failed);
}

/* An expired batch's lines never run, in the error file. */
static void expired_lines(run_batch *rb, out_files *f)
{
    for (int i = 0; i < rb->n_lines; i++) {
        if (rb->state[i] == LINE_DONE)
            continue;
        char err[64], id[48];
        json_t *j = colo_json_parse(rb->input + rb->off[i], rb->len[i], COLO_JSON_MAX_DEPTH, err, sizeof err);
        colo_batches_new_id("batch_req_", id, sizeof id);
        json_t *o = json_pack("{s:s,s:O?,s:n,s:{s:s,s:s}}", "id", id, "custom_id", json_object_get(j, "custom_id"),
                              "response", "error", "code", "batch_expired", "message",
                              "This request could not be executed before the completion window expired.");
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (text)
            append(&f->bad, &f->bad_len, &f->bad_cap, text, &f->failed);
        else
            f->failed = true;
        free(text);
        json_decref(o);
        json_decref(j);
    }
}

/* Writes the output and error files and ends the batch with status. */
static void finalize(run_batch *rb, const char *status)
{
    colo_batches *b = rb->b;
    const char *id = json_string_value(json_object_get(rb->obj, "id"));
    unqueue_rest(rb);
    set_status(rb, "finalizing");
    save(rb);
    out_files f = {0};
    if (colo_batch_store_each_line(b->store, id, collect, &f) != COLO_OK)
        f.failed = true;
    if (!strcmp(status, "expired")) {
        set_count(rb, "failed", count_of(rb, "failed") + (rb->n_lines - rb->done));
        expired_lines(rb, &f);
    }
    char name[96];
    json_t *out = NULL, *err = NULL;
    if (!f.failed && f.ok_len) {
        snprintf(name, sizeof name, "%s_output.jsonl", id);
        f.failed = !(out = colo_batches_write_file(b, &rb->owner, "batch_output", name, f.ok, f.ok_len));
    }
    if (!f.failed && f.bad_len) {
        snprintf(name, sizeof name, "%s_error.jsonl", id);
        f.failed = !(err = colo_batches_write_file(b, &rb->owner, "batch_output", name, f.bad, f.bad_len));
    }
    free(f.ok);
    free(f.bad);
    if (f.failed) {
        json_decref(out);
        json_decref(err);
        COLO_ERROR("batches: batch %s: its output could not be written; tried again on the next start", id);
        return; /* stays finalizing */
    }
    put(rb->obj, "output_file_id", out ? json_incref(json_object_get(out, "id")) : json_null());
    put(rb->obj, "error_file_id", err ? json_incref(json_object_get(err, "id")) : json_null());
    json_decref(out);
    json_decref(err);
    set_status(rb, status);
    save(rb);
    colo_metric_add(b->m_batches, (const char *const[]){status}, 1);
    COLO_INFO("batches: batch %s %s: %lld completed, %lld failed of %lld", id, status,
              (long long)count_of(rb, "completed"), (long long)count_of(rb, "failed"), (long long)count_of(rb, "total"));
}

static void run_free(run_batch *rb)
{
    json_decref(rb->obj);
    free(rb->input);
    free(rb->off);
    free(rb->len);
    free(rb->state);
    free(rb->attempts);
    free(rb->model);
    free(rb->retry_at_ms);
    free(rb);
}

/* Fails the batch at validation with one error (its file, its key). */
static void fail(run_batch *rb, const char *code, const char *message)
{
    json_t *errors = json_array();
    add_error(errors, code, NULL, 0, "%s", message);
    put(rb->obj, "errors", json_pack("{s:s,s:o}", "object", "list", "data", errors));
    set_status(rb, "failed");
    save(rb);
    colo_metric_add(rb->b->m_batches, (const char *const[]){"failed"}, 1);
}

/* ---- the steps ------------------------------------------------------------------------------------- */

/* Moves rb on as far as it can now; true when it has ended (to be freed). */
static bool step(run_batch *rb)
{
    colo_batches *b = rb->b;
    if (b->stopping)
        return false;
    if (status_is(rb, "completed") || status_is(rb, "failed") || status_is(rb, "cancelled") ||
        status_is(rb, "expired"))
        return true;
    if (status_is(rb, "validating")) {
        if (!load_input(rb)) {
            fail(rb, "file_unreadable", "The input file could not be read");
            return true;
        }
        if (!validate(rb)) {
            set_status(rb, "failed");
            save(rb);
            colo_metric_add(b->m_batches, (const char *const[]){"failed"}, 1);
            return true;
        }
        set_count(rb, "total", rb->n_lines);
        set_status(rb, "in_progress");
        save(rb);
        for (int i = 0; i < rb->n_lines; i++)
            count_line(rb, i, b->m_queued, 1);
    }
    if (status_is(rb, "finalizing")) { /* a restart in the middle of it */
        bool all = rb->done == rb->n_lines;
        bool late = colo_batches_now_s() >= json_integer_value(json_object_get(rb->obj, "expires_at"));
        finalize(rb, all ? "completed" : late ? "expired" : "cancelled");
        return true;
    }
    if (status_is(rb, "cancelling")) {
        if (rb->in_flight)
            return false;
        finalize(rb, "cancelled");
        return true;
    }
    if (colo_batches_now_s() >= json_integer_value(json_object_get(rb->obj, "expires_at"))) {
        if (rb->in_flight)
            return false; /* its lines in flight are recorded first */
        finalize(rb, "expired");
        return true;
    }
    int64_t t = now_ms();
    for (int i = rb->cursor; i < rb->n_lines && rb->in_flight < b->cfg.concurrency; i++) {
        if (rb->state[i] != LINE_TODO || rb->retry_at_ms[i] > t)
            continue;
        if (!send_line(rb, i))
            break; /* out of memory: again on the next tick */
    }
    while (rb->cursor < rb->n_lines && rb->state[rb->cursor] == LINE_DONE)
        rb->cursor++;
    if (rb->done == rb->n_lines && !rb->in_flight) {
        finalize(rb, "completed");
        return true;
    }
    return false;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    colo_batches *b = arg;
    b->tick_armed = false;
    if (!b->resumed) { /* the first turn of the loop: every model is loaded */
        b->resumed = true;
        colo_batch_resume(b);
    }
    for (run_batch **p = &b->running; *p;) {
        run_batch *rb = *p;
        if (step(rb) && !rb->in_flight) {
            *p = rb->next;
            run_free(rb);
        } else {
            p = &rb->next;
        }
    }
    if (b->running && !b->stopping)
        arm(b, TICK_MS);
}

/* The next step in ms (0: on the next loop turn). */
static void arm(colo_batches *b, int ms)
{
    if (b->stopping)
        return;
    if (!b->tick && !(b->tick = evtimer_new(colo_http_server_base(b->http), on_tick, b))) {
        COLO_ERROR("batches: cannot make a timer: batches wait");
        return;
    }
    if (b->tick_armed && ms > 0)
        return;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (evtimer_add(b->tick, &tv) == 0)
        b->tick_armed = true;
}

/* ---- what batches.c calls -------------------------------------------------------------------------- */

colo_status colo_batch_run(colo_batches *b, const colo_batch_owner *o, int key, json_t *obj)
{
    run_batch *rb = calloc(1, sizeof *rb);
    if (!rb)
        return COLO_ENOMEM;
    rb->b = b;
    rb->obj = json_incref(obj);
    rb->owner = *o;
    rb->key = key;
    run_batch **tail = &b->running;
    while (*tail)
        tail = &(*tail)->next;
    *tail = rb;
    rb->next = NULL;
    arm(b, 0);
    return COLO_OK;
}

json_t *colo_batch_running(colo_batches *b, const colo_batch_owner *o, const char *id)
{
    for (run_batch *rb = b->running; rb; rb = rb->next)
        if (!strcmp(json_string_value(json_object_get(rb->obj, "id")), id) &&
            !strcmp(rb->owner.organization, o->organization) && !strcmp(rb->owner.project, o->project))
            return rb->obj;
    return NULL;
}

void colo_batch_cancel(colo_batches *b, const char *id)
{
    for (run_batch *rb = b->running; rb; rb = rb->next)
        if (!strcmp(json_string_value(json_object_get(rb->obj, "id")), id) &&
            (status_is(rb, "validating") || status_is(rb, "in_progress"))) {
            set_status(rb, "cancelling"); /* its lines in flight end first */
            save(rb);
            arm(b, 0);
        }
}

/* A line done before the restart. */
static void mark_done(void *ud, int line, bool ok, const char *result)
{
    (void)result;
    run_batch *rb = ud;
    if (line < 0 || line >= rb->n_lines || rb->state[line] == LINE_DONE)
        return;
    rb->state[line] = LINE_DONE;
    rb->done++;
    if (ok)
        set_count(rb, "completed", count_of(rb, "completed") + 1);
    else
        set_count(rb, "failed", count_of(rb, "failed") + 1);
}

/* A batch left unfinished: its lines done are read back from the store. */
static void resume_one(void *ud, const colo_batch_owner *o, json_t *obj)
{
    colo_batches *b = ud;
    int key = colo_tenants_key_named(b->tenants, o->organization, o->project, o->key);
    const char *id = json_string_value(json_object_get(obj, "id"));
    if (colo_batch_run(b, o, key, obj) != COLO_OK)
        return;
    run_batch *rb = b->running;
    while (rb->next)
        rb = rb->next;
    if (key < 0) {
        fail(rb, "key_deleted", "The API key that created the batch is no longer configured");
        return;
    }
    const char *status = status_of(rb);
    COLO_INFO("batches: resuming batch %s (%s)", id, status);
    /* its window is the config's now (batches.window_s) */
    json_int_t created = json_integer_value(json_object_get(rb->obj, "created_at"));
    put(rb->obj, "expires_at", json_integer(created + b->cfg.window_s));
    if (!strcmp(status, "validating"))
        return;
    if (!load_input(rb) || !validate(rb)) {
        fail(rb, "file_unreadable", "The input file could not be read again after a restart");
        return;
    }
    set_count(rb, "completed", 0);
    set_count(rb, "failed", 0);
    set_count(rb, "total", rb->n_lines);
    if (colo_batch_store_each_line(b->store, id, mark_done, rb) != COLO_OK)
        COLO_ERROR("batches: batch %s: its lines done could not be read", id);
    for (int i = 0; i < rb->n_lines; i++)
        if (rb->state[i] == LINE_TODO)
            count_line(rb, i, b->m_queued, 1);
}

void colo_batch_start(colo_batches *b) { arm(b, 0); }

void colo_batch_resume(colo_batches *b)
{
    if (colo_batch_store_each_open(b->store, resume_one, b) != COLO_OK) {
        COLO_WARN("batches: the unfinished batches could not be read (the database is locked?): trying again");
        b->resumed = false;
        arm(b, 1000);
    }
}

void colo_batch_run_free(colo_batches *b)
{
    for (run_batch *rb = b->running, *next; rb; rb = next) {
        next = rb->next;
        run_free(rb);
    }
    b->running = NULL;
}
