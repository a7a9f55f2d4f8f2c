/* loadtest/stats.c: samples, nearest-rank percentiles, per-model results. */
#include "loadtest/stats.h"

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
        out->min = out->mean = out->p50 = out->p90 = out->p95 = out->p99 = out->max = NAN;
        return;
    }
    double sum = 0.0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    out->min = s->v[0];
    out->max = s->v[s->n - 1];
    out->mean = sum / (double)s->n;
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

void lt_result_finish(lt_result *r)
{
    lt_summarize(&r->latency_ms, &r->lat);
    lt_summarize(&r->ttft_ms, &r->ttft);
    lt_summarize(&r->itl_ms, &r->itl);
    r->rps = r->window_s > 0 ? (double)r->window_ok / r->window_s : 0.0;
    r->tokens_per_s = r->window_s > 0 && r->has_tokens ? (double)r->window_tokens / r->window_s : 0.0;
    uint64_t errors = lt_result_errors(r);
    r->error_rate = r->ok + errors ? (double)errors / (double)(r->ok + errors) : 0.0;
}

void lt_result_fini(lt_result *r)
{
    if (!r)
        return;
    lt_samples_free(&r->latency_ms);
    lt_samples_free(&r->ttft_ms);
    lt_samples_free(&r->itl_ms);
}
