/* loadtest/stats.c: samples, nearest-rank percentiles, per-model results. */
#include "loadtest/stats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lt_status lt_samples_push(lt_samples *s, double value)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return LT_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = value;
    return LT_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void lt_samples_sort(lt_samples *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
}

void lt_samples_free(lt_samples *s)
{
    if (!s)
        return;
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

double lt_percentile(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return NAN;
    if (q <= 0.0)
        return sorted[0];
    if (q >= 1.0)
        return sorted[n - 1];
    /* the small epsilon keeps q * n = 50.000000001 from rounding up a rank */
    double rank = ceil(q * (double)n - 1e-9);
    size_t i = rank < 1.0 ? 0 : (size_t)rank - 1;
    return sorted[i < n ? i : n - 1];
}

void lt_summarize(lt_samples *s, lt_summary *out)
{
    lt_samples_sort(s);
    out->n = s->n;
    if (s->n == 0) {
        out->min = out->mean = out->p50 = out->p90 = out->p95 = out->p99 = out->max = out->std = NAN;
        return;
    }
    double sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    out->min = s->v[0];
    out->max = s->v[s->n - 1];
    out->mean = sum / (double)s->n;
    for (size_t i = 0; i < s->n; i++)
        sq += (s->v[i] - out->mean) * (s->v[i] - out->mean);
    out->std = sqrt(sq / (double)s->n);
    out->p50 = lt_percentile(s->v, s->n, 0.50);
    out->p90 = lt_percentile(s->v, s->n, 0.90);
    out->p95 = lt_percentile(s->v, s->n, 0.95);
    out->p99 = lt_percentile(s->v, s->n, 0.99);
}

void lt_result_init(lt_result *r, const char *model, const char *phase)
{
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model ? model : "");
    snprintf(r->phase, sizeof r->phase, "%s", phase ? phase : "");
}

void lt_result_count_status(lt_result *r, int status)
{
    r->http_errors++;
    for (size_t i = 0; i < r->n_status; i++) {
        if (r->by_status[i].status == status) {
            r->by_status[i].count++;
            return;
        }
    }
    if (r->n_status < LT_MAX_STATUS) {
        r->by_status[r->n_status].status = status;
        r->by_status[r->n_status].count = 1;
        r->n_status++;
    } else {
        r->by_status[LT_MAX_STATUS - 1].count++;
    }
}

uint64_t lt_result_errors(const lt_result *r)
{
    return r->http_errors + r->connect_errors + r->timeouts + r->io_errors;
}

lt_status lt_result_add_req(lt_result *r, const lt_req_rec *rec)
{
    if (r->n_reqs == r->cap_reqs) {
        size_t cap = r->cap_reqs ? r->cap_reqs * 2 : 256;
        lt_req_rec *v = realloc(r->reqs, cap * sizeof *v);
        if (!v)
            return LT_ENOMEM;
        r->reqs = v;
        r->cap_reqs = cap;
    }
    r->reqs[r->n_reqs++] = *rec;
    return LT_OK;
}

void lt_result_finish(lt_result *r)
{
    lt_summarize(&r->latency_ms, &r->lat);
    lt_summarize(&r->ttft_ms, &r->ttft);
    lt_summarize(&r->itl_ms, &r->itl);
    lt_summarize(&r->tpot_ms, &r->tpot);
    r->rps = r->window_s > 0 ? (double)r->window_ok / r->window_s : 0.0;
    r->tokens_per_s = r->window_s > 0 && r->has_tokens ? (double)r->window_tokens / r->window_s : 0.0;
    uint64_t errors = lt_result_errors(r);
    r->error_rate = r->ok + errors ? (double)errors / (double)(r->ok + errors) : 0.0;
}

void lt_result_goodput(lt_result *r, const lt_slo *slo)
{
    r->has_slo = true;
    r->slo = *slo;
    r->good = r->window_good = 0;
    for (size_t i = 0; i < r->n_reqs; i++) {
        lt_req_rec *q = &r->reqs[i];
        q->good = lt_slo_met(slo, q);
        r->good += q->good;
        r->window_good += q->good && q->in_window;
    }
    uint64_t total = r->ok + lt_result_errors(r);
    r->attainment = total ? (double)r->good / (double)total : NAN;
    r->goodput_rps = r->window_s > 0 ? (double)r->window_good / r->window_s : 0.0;
}

double lt_max_rate_at(const double *rates, const double *attainment, size_t n, double target, bool *bounded)
{
    *bounded = false;
    if (n == 0)
        return NAN;
    for (size_t i = 0; i < n; i++) {
        double a = isnan(attainment[i]) ? 0.0 : attainment[i];
        if (a >= target)
            continue;
        *bounded = true;
        if (i == 0)
            return NAN;
        double a0 = isnan(attainment[i - 1]) ? 0.0 : attainment[i - 1];
        /* a0 >= target > a: the line through both points crosses target between them */
        return rates[i - 1] + (rates[i] - rates[i - 1]) * (a0 - target) / (a0 - a);
    }
    return rates[n - 1];
}

const char *lt_outcome_name(lt_outcome o)
{
    switch (o) {
    case LT_OUT_OK: return "ok";
    case LT_OUT_HTTP: return "http";
    case LT_OUT_CONNECT: return "connect";
    case LT_OUT_TIMEOUT: return "timeout";
    case LT_OUT_IO: return "io";
    }
    return "?";
}

lt_slo lt_slo_none(void)
{
    lt_slo s = {NAN, NAN, NAN};
    return s;
}

bool lt_slo_any(const lt_slo *s)
{
    return !isnan(s->ttft_ms) || !isnan(s->tpot_ms) || !isnan(s->e2e_ms);
}

lt_status lt_slo_parse(const char *arg, lt_slo *s, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    char *end;
    if (!colon) {
        lt_set_err(err, errlen, "goodput '%s': expected ttft:MS, tpot:MS or e2e:MS", arg);
        return LT_EINVAL;
    }
    errno = 0;
    double v = strtod(colon + 1, &end);
    if (colon[1] == '\0' || *end != '\0' || errno || !isfinite(v) || v <= 0) {
        lt_set_err(err, errlen, "goodput '%s': the bound must be a positive number of milliseconds", arg);
        return LT_EINVAL;
    }
    size_t klen = (size_t)(colon - arg);
    if (klen == 4 && !strncmp(arg, "ttft", 4))
        s->ttft_ms = v;
    else if (klen == 4 && !strncmp(arg, "tpot", 4))
        s->tpot_ms = v;
    else if ((klen == 3 && !strncmp(arg, "e2e", 3)) || (klen == 4 && !strncmp(arg, "e2el", 4)))
        s->e2e_ms = v;
    else {
        lt_set_err(err, errlen, "goodput '%s': unknown metric (ttft, tpot, e2e)", arg);
        return LT_EINVAL;
    }
    return LT_OK;
}

bool lt_slo_met(const lt_slo *s, const lt_req_rec *q)
{
    if (q->outcome != LT_OUT_OK)
        return false;
    if (!isnan(s->e2e_ms) && !(q->e2e_ms <= s->e2e_ms))
        return false;
    /* a response that generated nothing was first and last at once */
    double ttft = isnan(q->ttft_ms) && q->output_tokens == 0 ? q->e2e_ms : q->ttft_ms;
    if (!isnan(s->ttft_ms) && !(ttft <= s->ttft_ms))
        return false;
    if (!isnan(s->tpot_ms)) {
        if (isnan(ttft))
            return false;
        if (!isnan(q->tpot_ms) && !(q->tpot_ms <= s->tpot_ms))
            return false;
    }
    return true;
}

void lt_result_fini(lt_result *r)
{
    if (!r)
        return;
    free(r->reqs);
    r->reqs = NULL;
    r->n_reqs = r->cap_reqs = 0;
    lt_samples_free(&r->tpot_ms);
    lt_samples_free(&r->latency_ms);
    lt_samples_free(&r->ttft_ms);
    lt_samples_free(&r->itl_ms);
}
