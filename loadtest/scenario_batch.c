/* loadtest/scenario_batch.c: --scenario batch, interactive load beside an
 * OpenAI batch (POST /v1/files, POST /v1/batches, GET /v1/batches/{id}).
 *
 * Each round runs three phases of --duration, in this order:
 *   no-batch    the interactive load alone; the models' step time
 *               (colo_model_step_duration_seconds_sum of /metrics, every
 *               model's: the batch's model may be another than the load's)
 *               over the phase's time is the share of the device that load
 *               keeps busy;
 *   with-batch  the same load while a batch of --batch-lines lines runs on
 *               --batch-model (created before the phase, in progress when
 *               it starts); its lines per second are the batch's completed
 *               count over the phase;
 *   batch-only  the batch alone: what the device does for the batch when
 *               nothing else runs.
 * then cancels the batch and waits for it to end, so that the next round's
 * no-batch phase runs alone. The report puts the phases side by side, per
 * round and as medians: the interactive TTFT (with --stream) and latency
 * percentiles with and without the batch, and the batch's lines/s beside
 * what the interactive load leaves idle (batch-only lines/s times the idle
 * share of no-batch): the batch's use of idle capacity is their ratio.
 *
 * The batch's own requests are blocking HTTP/1.1 calls with
 * `Connection: close` on the calling thread, between phases; the phases
 * are the load generator's (loadtest/engine.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "loadtest/clock.h"
#include "loadtest/cli_impl.h"

#define BOUNDARY "colo-loadtest-batch-7f3a"
#define MAX_ROUNDS 64

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- blocking HTTP calls ------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static bool buf_add(buf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Whether rsp holds a whole answer: its head, and as many bytes after it as
 * its Content-Length says (an answer without one ends when the server
 * closes the connection). */
static bool answer_complete(const buf *rsp)
{
    size_t head = 0;
    for (size_t i = 0; i + 4 <= rsp->len && !head; i++)
        if (!memcmp(rsp->p + i, "\r\n\r\n", 4))
            head = i + 4;
    if (!head)
        return false;
    for (size_t i = 0; i + 16 < head; i++) {
        unsigned long long n;
        if (rsp->p[i] == '\n' && strncasecmp(rsp->p + i + 1, "Content-Length:", 15) == 0 &&
            sscanf(rsp->p + i + 16, "%llu", &n) == 1)
            return rsp->len - head >= n;
    }
    return false;
}

/* One request; the status (0: no answer) and the body (malloc'd, NUL
 * terminated) into *body. */
static int http_call(const model_work *w, const char *api_key, const char *method, const char *path,
                     const char *ctype, const char *body, size_t body_len, char **out)
{
    *out = NULL;
    const lt_target *t = &w->target;
    int fd = socket(t->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int status = 0;
    buf req = {0}, rsp = {0};
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %zu\r\n%s%s%s%s%s%s\r\n",
                     method, t->base_path, path, t->authority, body_len, ctype ? "Content-Type: " : "",
                     ctype ? ctype : "", ctype ? "\r\n" : "", api_key ? "Authorization: Bearer " : "",
                     api_key ? api_key : "", api_key ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof head)
        goto out_close;
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addrlen) != 0 || !buf_add(&req, head, (size_t)n) ||
        (body_len && !buf_add(&req, body, body_len)) || !send_all(fd, req.p, req.len))
        goto out_close;
    char chunk[16384];
    for (;;) {
        ssize_t k = recv(fd, chunk, sizeof chunk, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (!buf_add(&rsp, chunk, (size_t)k))
            goto out_close;
        if (answer_complete(&rsp)) /* a server that keeps the connection open despite "close" */
            break;
    }
    const char *end = rsp.p ? strstr(rsp.p, "\r\n\r\n") : NULL;
    if (!end || sscanf(rsp.p, "HTTP/1.%*d %d", &status) != 1)
        goto out_close;
    *out = strdup(end + 4);
    if (!*out)
        status = 0;
out_close:
    close(fd);
    free(req.p);
    free(rsp.p);
    return status;
}

/* A call whose answer is JSON: the object (NULL when the call failed or the
 * status is not want; said on stderr). */
static json_t *call_json(const model_work *w, const cli *c, const char *method, const char *path, const char *ctype,
                         const char *body, size_t len, int want)
{
    char *text = NULL;
    int st = http_call(w, c->api_key, method, path, ctype, body, len, &text);
    json_t *j = st == want && text ? json_loads(text, 0, NULL) : NULL;
    if (!j)
        fprintf(stderr, "colo-loadtest: %s %s: %d %s\n", method, path, st, text ? text : "(no answer)");
    free(text);
    return j;
}

/* ---- the batch ------------------------------------------------------------------------------- */

/* The JSONL input: n chat lines for model, of max_tokens each. */
static bool batch_input(buf *b, const char *model, int n, int max_tokens, int round)
{
    static const char *const topics[] = {"a lighthouse", "the tides", "bread", "a violin", "glaciers",
                                         "a city park", "copper", "migrating birds"};
    for (int i = 0; i < n; i++) {
        char id[32], content[96];
        snprintf(id, sizeof id, "line-%d", i);
        snprintf(content, sizeof content, "Write two sentences about %s (%d).", topics[(i + round) % 8], i);
        json_t *line = json_pack("{s:s, s:s, s:s, s:{s:s, s:[{s:s, s:s}], s:i, s:f}}", "custom_id", id, "method",
                                 "POST", "url", "/v1/chat/completions", "body", "model", model, "messages", "role",
                                 "user", "content", content, "max_tokens", max_tokens, "temperature", 0.0);
        char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
        json_decref(line);
        bool ok = s && buf_add(b, s, strlen(s)) && buf_add(b, "\n", 1);
        free(s);
        if (!ok)
            return false;
    }
    return true;
}

/* Uploads the input and creates the batch: its id into bid. */
static bool batch_create(const cli *c, const model_work *w, const char *model, int round, char *bid, size_t cap)
{
    buf in = {0}, form = {0};
    bool ok = false;
    json_t *f = NULL, *b = NULL;
    const char *pre = "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                      "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"lines.jsonl\"\r\n"
                      "Content-Type: application/jsonl\r\n\r\n";
    const char *post = "\r\n--" BOUNDARY "--\r\n";
    if (!batch_input(&in, model, c->batch_lines, c->batch_max_tokens, round) || !buf_add(&form, pre, strlen(pre)) ||
        !buf_add(&form, in.p, in.len) || !buf_add(&form, post, strlen(post)))
        goto out_free;
    f = call_json(w, c, "POST", "/v1/files", "multipart/form-data; boundary=" BOUNDARY, form.p, form.len, 200);
    const char *fid = json_string_value(json_object_get(f, "id"));
    if (!fid)
        goto out_free;
    char body[256];
    snprintf(body, sizeof body,
             "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}", fid);
    b = call_json(w, c, "POST", "/v1/batches", "application/json", body, strlen(body), 200);
    const char *id = json_string_value(json_object_get(b, "id"));
    if (id) {
        snprintf(bid, cap, "%s", id);
        ok = true;
    }
out_free:
    json_decref(f);
    json_decref(b);
    free(in.p);
    free(form.p);
    return ok;
}

/* The batch's status into status and its completed lines; false when it cannot be read. */
static bool batch_poll(const cli *c, const model_work *w, const char *bid, char *status, size_t cap, long *done)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/batches/%s", bid);
    json_t *b = call_json(w, c, "GET", path, NULL, NULL, 0, 200);
    const char *s = json_string_value(json_object_get(b, "status"));
    if (s) {
        snprintf(status, cap, "%s", s);
        json_t *counts = json_object_get(b, "request_counts");
        *done = (long)(json_integer_value(json_object_get(counts, "completed")) +
                       json_integer_value(json_object_get(counts, "failed")));
    }
    json_decref(b);
    return s != NULL;
}

static bool final_status(const char *s)
{
    return !strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled") || !strcmp(s, "expired");
}

/* Polls until the batch is in progress (true) or ended. */
static bool batch_wait_running(const cli *c, const model_work *w, const char *bid)
{
    char status[32];
    long done;
    for (int i = 0; i < 6000; i++) {
        if (!batch_poll(c, w, bid, status, sizeof status, &done))
            return false;
        if (!strcmp(status, "in_progress"))
            return true;
        if (final_status(status))
            return false;
        sleep_ns(50000000ull);
    }
    return false;
}

/* Cancels the batch (unless it ended) and waits for it to end. */
static void batch_stop(const cli *c, const model_work *w, const char *bid)
{
    char path[160], status[32];
    long done;
    if (batch_poll(c, w, bid, status, sizeof status, &done) && final_status(status))
        return;
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", bid);
    json_decref(call_json(w, c, "POST", path, "application/json", "{}", 2, 200));
    for (int i = 0; i < 12000 && batch_poll(c, w, bid, status, sizeof status, &done) && !final_status(status); i++)
        sleep_ns(50000000ull);
}

/* ---- the model's step time ------------------------------------------------------------------ */

/* colo_model_step_duration_seconds_sum of model (seconds its steps took)
 * into *sum. */
/* model NULL: every model's. */
static bool step_seconds(const cli *c, const model_work *w, const char *model, double *sum)
{
    char *text = NULL, label[160] = "";
    int st = http_call(w, c->metrics_key ? c->metrics_key : c->api_key, "GET", "/metrics", NULL, NULL, 0, &text);
    if (model)
        snprintf(label, sizeof label, "model=\"%s\"", model);
    *sum = 0;
    for (char *line = text; st == 200 && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (!strncmp(line, "colo_model_step_duration_seconds_sum{", 37) && strstr(line, label)) {
            const char *sp = strrchr(line, ' ');
            *sum += sp ? strtod(sp + 1, NULL) : 0;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return st == 200; /* (no line: the model has not stepped yet) */
}

/* ---- rounds and report ----------------------------------------------------------------------- */

typedef struct round_row {
    lt_phase alone, with, only;  /* the phases' results (the first model's first) */
    double busy_share;           /* no-batch: the models' step time / the phase's time; NAN unknown */
    double lines_with_s, lines_only_s; /* the batch's lines per second in with-batch, batch-only */
    bool ran_out;                /* the batch ended inside a phase: its rates are low */
} round_row;

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The batch's completed lines per second over a phase run by run(). */
static lt_status timed_phase(const cli *c, model_work *w, size_t bw, const char *bid, const char *name, lt_phase *p,
                             bool interactive, double *rate, bool *ran_out)
{
    char status[32];
    long d0 = 0, d1 = 0;
    if (!batch_poll(c, &w[bw], bid, status, sizeof status, &d0))
        return LT_EIO;
    uint64_t t0 = lt_now_ns();
    lt_status st;
    size_t all[LT_MAX_MODELS];
    for (size_t m = 0; m < c->n_models; m++)
        all[m] = m;
    if (interactive) {
        st = lt_cli_phase(c, w, all, c->n_models, c->concurrency, c->rate, name, p);
    } else {
        snprintf(p->name, sizeof p->name, "%s", name);
        sleep_ns((uint64_t)((c->warmup_s + c->duration_s) * 1e9));
        st = LT_OK;
    }
    if (st != LT_OK || !batch_poll(c, &w[bw], bid, status, sizeof status, &d1))
        return st != LT_OK ? st : LT_EIO;
    *rate = (double)(d1 - d0) / ((double)(lt_now_ns() - t0) / 1e9);
    *ran_out = *ran_out || final_status(status);
    return LT_OK;
}

static lt_status run_round(const cli *c, model_work *w, size_t bw, int round, round_row *row)
{
    char name[64], bid[128];
    size_t all[LT_MAX_MODELS];
    for (size_t m = 0; m < c->n_models; m++)
        all[m] = m;
    double s0, s1;
    bool have = step_seconds(c, &w[bw], NULL, &s0);
    uint64_t t0 = lt_now_ns();
    snprintf(name, sizeof name, "no-batch %d", round + 1);
    lt_status st = lt_cli_phase(c, w, all, c->n_models, c->concurrency, c->rate, name, &row->alone);
    if (st != LT_OK)
        return st;
    double wall_s = (double)(lt_now_ns() - t0) / 1e9;
    row->busy_share = have && step_seconds(c, &w[bw], NULL, &s1) && wall_s > 0 ? (s1 - s0) / wall_s : NAN;
    if (!batch_create(c, &w[bw], c->models[bw], round, bid, sizeof bid) || !batch_wait_running(c, &w[bw], bid)) {
        fprintf(stderr, "colo-loadtest: the batch did not start\n");
        return LT_EIO;
    }
    snprintf(name, sizeof name, "with-batch %d", round + 1);
    st = timed_phase(c, w, bw, bid, name, &row->with, true, &row->lines_with_s, &row->ran_out);
    if (st == LT_OK) {
        snprintf(name, sizeof name, "batch-only %d", round + 1);
        st = timed_phase(c, w, bw, bid, name, &row->only, false, &row->lines_only_s, &row->ran_out);
    }
    batch_stop(c, &w[bw], bid);
    return st;
}

/* Stands for a missing figure in the table. */
static void put(FILE *out, double v)
{
    if (isnan(v))
        fprintf(out, " %9s", "-");
    else
        fprintf(out, " %9.1f", v);
}

static void row_figures(const round_row *r, double *f)
{
    const lt_result *a = &r->alone.results[0], *b = &r->with.results[0];
    double idle = isnan(r->busy_share) ? NAN : r->lines_only_s * (1 - r->busy_share);
    double v[] = {a->ttft.p50, b->ttft.p50, a->ttft.p99, b->ttft.p99, a->lat.p99, b->lat.p99, a->rps, b->rps,
                  r->lines_with_s, r->lines_only_s, isnan(r->busy_share) ? NAN : 100 * r->busy_share,
                  idle > 0 ? 100 * r->lines_with_s / idle : NAN};
    memcpy(f, v, sizeof v);
}

#define N_FIG 12

/* The percentiles of every request of every round pooled (a phase of a
 * few seconds holds too few requests for its own p99): figures 0..5 as
 * row_figures, the rest NAN. */
static lt_status pooled_figures(const round_row *rows, int n, double *f)
{
    lt_samples s[4] = {{0}};
    lt_status st = LT_OK;
    for (int i = 0; i < n && st == LT_OK; i++) {
        const lt_result *a = &rows[i].alone.results[0], *b = &rows[i].with.results[0];
        const lt_samples *from[4] = {&a->ttft_ms, &b->ttft_ms, &a->latency_ms, &b->latency_ms};
        for (int k = 0; k < 4 && st == LT_OK; k++)
            for (size_t j = 0; j < from[k]->n && st == LT_OK; j++)
                st = lt_samples_push(&s[k], from[k]->v[j]);
    }
    for (int k = 0; k < 4; k++)
        lt_samples_sort(&s[k]);
    double v[N_FIG] = {lt_percentile(s[0].v, s[0].n, 0.5), lt_percentile(s[1].v, s[1].n, 0.5),
                       lt_percentile(s[0].v, s[0].n, 0.99), lt_percentile(s[1].v, s[1].n, 0.99),
                       lt_percentile(s[2].v, s[2].n, 0.99), lt_percentile(s[3].v, s[3].n, 0.99)};
    for (int k = 6; k < N_FIG; k++)
        v[k] = NAN;
    memcpy(f, v, sizeof v);
    for (int k = 0; k < 4; k++)
        lt_samples_free(&s[k]);
    return st;
}

static void print_table(FILE *out, const cli *c, const round_row *rows, int n, const double *med, const double *pool)
{
    static const char *const head[N_FIG] = {"ttft50", "ttft50+b", "ttft99", "ttft99+b", "lat99", "lat99+b",
                                            "rps", "rps+b", "lines/s+", "lines/s", "busy%", "idle use%"};
    fprintf(out, "interactive %s (%s), batch of %d lines (max_tokens %d) on %s; %d rounds of %.0f s phases\n",
            c->models[0], c->rate > 0 ? "open loop" : "closed loop", c->batch_lines, c->batch_max_tokens,
            c->batch_model ? c->batch_model : c->models[0], n, c->duration_s);
    fprintf(out, "%-8s", "round");
    for (int k = 0; k < N_FIG; k++)
        fprintf(out, " %9s", head[k]);
    fputc('\n', out);
    for (int i = 0; i <= n; i++) {
        double f[N_FIG];
        if (i < n)
            row_figures(&rows[i], f);
        else
            memcpy(f, med, sizeof f);
        if (i < n)
            fprintf(out, "%-8d", i + 1);
        else
            fprintf(out, "%-8s", "median");
        for (int k = 0; k < N_FIG; k++)
            put(out, f[k]);
        fputs(i < n && rows[i].ran_out ? "  (the batch ended inside a phase)\n" : "\n", out);
    }
    fprintf(out, "%-8s", "pooled");
    for (int k = 0; k < N_FIG; k++)
        put(out, pool[k]);
    fputc('\n', out);
    fprintf(out, "ttft/lat: ms (+b: with the batch); rps: interactive requests/s; lines/s+: the batch's beside the "
                 "load, lines/s: alone;\nbusy%%: the models' step time under the load alone; idle use%%: lines/s+ over "
                 "lines/s x (1 - busy%%); pooled: the percentiles of every round's requests together\n");
}

static int write_json(const cli *c, const round_row *rows, int n, const double *med, const double *pool)
{
    static const char *const keys[N_FIG] = {"ttft_p50_ms", "ttft_p50_ms_with_batch", "ttft_p99_ms",
                                            "ttft_p99_ms_with_batch", "latency_p99_ms",
                                            "latency_p99_ms_with_batch", "rps", "rps_with_batch",
                                            "batch_lines_per_s_with_load", "batch_lines_per_s_alone",
                                            "busy_pct", "idle_use_pct"};
    json_t *root = json_object(), *arr = json_array(), *m = json_object(), *pl = json_object();
    /* (each is the root's once set, and freed with it) */
    bool ok = root && arr && m && pl && json_object_set(root, "rounds", arr) == 0 &&
              json_object_set(root, "median", m) == 0 && json_object_set(root, "pooled", pl) == 0 &&
              json_object_set_new(root, "scenario", json_string("batch")) == 0;
    for (int k = 0; ok && k < 6; k++)
        ok = json_object_set_new(pl, keys[k], isnan(pool[k]) ? json_null() : json_real(pool[k])) == 0;
    for (int i = 0; ok && i <= n; i++) {
        double f[N_FIG];
        json_t *o = i < n ? json_object() : m;
        if (i < n)
            row_figures(&rows[i], f);
        else
            memcpy(f, med, sizeof f);
        ok = o != NULL;
        for (int k = 0; ok && k < N_FIG; k++)
            ok = json_object_set_new(o, keys[k], isnan(f[k]) ? json_null() : json_real(f[k])) == 0;
        if (i < n && o) {
            ok = ok && json_object_set_new(o, "batch_ended_inside", json_boolean(rows[i].ran_out)) == 0;
            ok = json_array_append_new(arr, o) == 0 && ok;
        }
    }
    ok = ok && json_dump_file(root, c->json, JSON_INDENT(2)) == 0;
    json_decref(arr);
    json_decref(m);
    json_decref(pl);
    json_decref(root);
    if (!ok) {
        fprintf(stderr, "colo-loadtest: could not write %s\n", c->json);
        return EXIT_FAILED;
    }
    return EXIT_OK;
}

int lt_batch_scenario(const cli *c, model_work *w)
{
    size_t bw = 0;
    for (size_t m = 0; c->batch_model && m < c->n_models; m++)
        if (!strcmp(c->models[m], c->batch_model))
            bw = m;
    int n = c->rounds < MAX_ROUNDS ? c->rounds : MAX_ROUNDS, done = 0, rc = EXIT_OK;
    round_row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows)
        return EXIT_FAILED;
    for (; done < n; done++)
        if (run_round(c, w, bw, done, &rows[done]) != LT_OK) {
            rc = EXIT_FAILED;
            break;
        }
    double med[N_FIG], col[MAX_ROUNDS];
    for (int k = 0; k < N_FIG; k++) {
        int m = 0;
        for (int i = 0; i < done; i++) {
            double f[N_FIG];
            row_figures(&rows[i], f);
            if (!isnan(f[k]))
                col[m++] = f[k];
        }
        med[k] = median(col, m);
    }
    double pool[N_FIG];
    if (done > 0 && pooled_figures(rows, done, pool) != LT_OK) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_FAILED;
    } else if (done > 0) {
        print_table(stdout, c, rows, done, med, pool);
        if (c->json && write_json(c, rows, done, med, pool) != EXIT_OK)
            rc = EXIT_FAILED;
    }
    for (int i = 0; i < n; i++) {
        lt_phase *ps[] = {&rows[i].alone, &rows[i].with, &rows[i].only};
        for (int k = 0; k < 3; k++) {
            for (size_t r = 0; r < ps[k]->n; r++)
                lt_result_fini(&ps[k]->results[r]);
            free(ps[k]->results);
        }
    }
    free(rows);
    return rc;
}
