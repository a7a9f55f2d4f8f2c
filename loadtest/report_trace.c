/* loadtest/report_trace.c: the trace scenario's rows: SLO attainment,
 * goodput, warm and cold latency, loads and evictions, per model and
 * overall, and attainment over time. */
#include "loadtest/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct split {
    lt_samples ttft_warm, ttft_cold, e2e_warm, e2e_cold;
} split;

static void split_free(split *s)
{
    lt_samples_free(&s->ttft_warm);
    lt_samples_free(&s->ttft_cold);
    lt_samples_free(&s->e2e_warm);
    lt_samples_free(&s->e2e_cold);
}

/* Adds one request to a row, its latencies to sp and its SLO outcome to its bin. */
static lt_status add_req(lt_trace_model *row, split *sp, const lt_req_rec *q, bool has_slo, uint64_t *bin_n,
                         uint64_t *bin_good, double bin_s, size_t n_bins)
{
    row->recorded++;
    if (has_slo && q->good)
        row->good++;
    if (q->cold < 0)
        row->unknown++;
    else if (q->cold)
        row->cold++;
    else
        row->warm++;
    size_t b = bin_s > 0 && q->intended_s >= 0 ? (size_t)(q->intended_s / bin_s) : 0;
    if (b >= n_bins)
        b = n_bins - 1;
    bin_n[b]++;
    if (has_slo && q->good)
        bin_good[b]++;
    if (q->outcome != LT_OUT_OK || q->cold < 0)
        return LT_OK;
    lt_status st = LT_OK;
    if (!isnan(q->ttft_ms))
        st = lt_samples_push(q->cold ? &sp->ttft_cold : &sp->ttft_warm, q->ttft_ms);
    if (st == LT_OK && !isnan(q->e2e_ms))
        st = lt_samples_push(q->cold ? &sp->e2e_cold : &sp->e2e_warm, q->e2e_ms);
    return st;
}

static void finish_row(lt_trace_model *row, split *sp, bool has_slo, const uint64_t *bin_n, const uint64_t *bin_good,
                       size_t n_bins)
{
    lt_summarize(&sp->ttft_warm, &row->ttft_warm);
    lt_summarize(&sp->ttft_cold, &row->ttft_cold);
    lt_summarize(&sp->e2e_warm, &row->e2e_warm);
    lt_summarize(&sp->e2e_cold, &row->e2e_cold);
    row->attainment_pct = has_slo && row->recorded ? 100.0 * (double)row->good / (double)row->recorded : NAN;
    for (size_t b = 0; b < n_bins; b++)
        row->bin_attainment_pct[b] = has_slo && bin_n[b] ? 100.0 * (double)bin_good[b] / (double)bin_n[b] : NAN;
}

lt_status lt_trace_summarize(lt_trace_report *tr, const lt_phase *p, const char *const *models,
                             const uint64_t *scheduled, size_t n_models, const lt_monitor *mon)
{
    lt_status st = LT_OK;
    split *sp = calloc(n_models + 1, sizeof *sp);
    tr->models = calloc(n_models, sizeof *tr->models);
    tr->n = n_models;
    /* about 60 bins over the span, whole seconds */
    tr->bin_s = ceil((tr->span_s > 0 ? tr->span_s : 1.0) / 60.0);
    tr->n_bins = (size_t)(tr->span_s / tr->bin_s) + 1;
    uint64_t *bin_n = calloc(tr->n_bins * 2 * (n_models + 1), sizeof *bin_n);
    if (!sp || !tr->models || !bin_n)
        goto out_nomem;
    lt_trace_model *all = &tr->all;
    snprintf(all->model, sizeof all->model, "all");
    if (!(all->bin_attainment_pct = calloc(tr->n_bins, sizeof(double))))
        goto out_nomem;
    bool all_slo = false;
    all->goodput_rps = 0;
    for (size_t m = 0; m < n_models; m++) {
        lt_trace_model *row = &tr->models[m];
        snprintf(row->model, sizeof row->model, "%s", models[m]);
        row->scheduled = scheduled[m];
        all->scheduled += scheduled[m];
        row->goodput_rps = NAN;
        row->attainment_pct = NAN;
        if (!(row->bin_attainment_pct = calloc(tr->n_bins, sizeof(double))))
            goto out_nomem;
        const lt_monitor_model *mm = lt_monitor_find(mon, models[m]);
        if (mm) {
            row->loads_seen = mm->loads_seen;
            row->unloads_seen = mm->unloads_seen;
            row->has_counters = mm->has_counters;
            row->wakes = mm->wakes_last - mm->wakes_first;
            row->evictions = mm->evictions_last - mm->evictions_first;
            row->changes = mm->changes;
            row->n_changes = mm->n_changes;
            all->loads_seen += row->loads_seen;
            all->unloads_seen += row->unloads_seen;
            all->has_counters |= row->has_counters;
            all->wakes += row->wakes;
            all->evictions += row->evictions;
        }
        uint64_t *mb_n = bin_n + tr->n_bins * 2 * (m + 1), *mb_good = mb_n + tr->n_bins;
        const lt_result *r = NULL;
        for (size_t k = 0; p && k < p->n; k++)
            if (strcmp(p->results[k].model, models[m]) == 0)
                r = &p->results[k];
        if (r) {
            for (size_t j = 0; j < r->n_reqs && st == LT_OK; j++) {
                st = add_req(row, &sp[m], &r->reqs[j], r->has_slo, mb_n, mb_good, tr->bin_s, tr->n_bins);
                if (st == LT_OK)
                    st = add_req(all, &sp[n_models], &r->reqs[j], r->has_slo, bin_n, bin_n + tr->n_bins, tr->bin_s,
                                 tr->n_bins);
            }
            if (r->has_slo) {
                row->goodput_rps = r->goodput_rps;
                all->goodput_rps += r->goodput_rps;
                all_slo = true;
            }
        }
        finish_row(row, &sp[m], r && r->has_slo, mb_n, mb_good, tr->n_bins);
        if (st != LT_OK)
            goto out_nomem;
    }
    if (!all_slo)
        all->goodput_rps = NAN;
    finish_row(all, &sp[n_models], all_slo, bin_n, bin_n + tr->n_bins, tr->n_bins);
    if (mon) {
        tr->monitored = true;
        tr->poll_interval_s = mon->interval_s;
        tr->server_pid = mon->pid;
        tr->has_rss = mon->has_rss;
        tr->rss_max_bytes = mon->rss_max_bytes;
        tr->hwm_bytes = mon->hwm_bytes;
    }
    goto out_free;
out_nomem:
    st = LT_ENOMEM;
out_free:
    for (size_t m = 0; sp && m <= n_models; m++)
        split_free(&sp[m]);
    free(sp);
    free(bin_n);
    return st;
}

void lt_trace_report_fini(lt_trace_report *tr)
{
    if (!tr)
        return;
    for (size_t m = 0; tr->models && m < tr->n; m++)
        free(tr->models[m].bin_attainment_pct);
    free(tr->models);
    free(tr->all.bin_attainment_pct);
    tr->models = NULL;
    tr->all.bin_attainment_pct = NULL;
    tr->n = 0;
}

static void pr(FILE *out, double v, int w, int prec)
{
    if (isnan(v))
        fprintf(out, " %*s", w, "-");
    else
        fprintf(out, " %*.*f", w, prec, v);
}

static void table_row(FILE *out, const lt_trace_model *r, bool ttft)
{
    const lt_summary *w = ttft ? &r->ttft_warm : &r->e2e_warm, *c = ttft ? &r->ttft_cold : &r->e2e_cold;
    fprintf(out, "%-20.20s %8llu %8llu", r->model, (unsigned long long)r->scheduled, (unsigned long long)r->recorded);
    pr(out, r->attainment_pct, 7, 1);
    pr(out, r->goodput_rps, 8, 2);
    fprintf(out, " %6llu %6llu", (unsigned long long)r->warm, (unsigned long long)r->cold);
    pr(out, w->p50, 9, 1);
    pr(out, w->p99, 9, 1);
    pr(out, c->p50, 9, 1);
    pr(out, c->p99, 9, 1);
    if (r->has_counters)
        fprintf(out, " %6llu %6llu", (unsigned long long)r->wakes, (unsigned long long)r->evictions);
    else
        fprintf(out, " %6s %6s", "-", "-");
    fprintf(out, " %5llu %5llu\n", (unsigned long long)r->loads_seen, (unsigned long long)r->unloads_seen);
}

void lt_trace_report_table(FILE *out, const lt_trace_report *tr)
{
    bool ttft = tr->all.ttft_warm.n + tr->all.ttft_cold.n > 0;
    const char *what = ttft ? "TTFT" : "e2e";
    if (strcmp(tr->source, "zipf") == 0)
        fprintf(out, "\ntrace: drawn, Zipf(%g) popularity, total rate %g/s, %s, ", tr->zipf_s, tr->rate_per_s,
                tr->burstiness <= 0 ? "constant gaps" : tr->burstiness == 1 ? "poisson" : "gamma");
    else
        fprintf(out, "\ntrace: %s at %gx, ", tr->source, tr->speed);
    fprintf(out, "seed %llu, span %.1fs%s\n", tr->seed, tr->span_s,
            tr->monitored ? "" : " (residency not polled: warm/cold unknown)");
    fprintf(out, "%-20s %8s %8s %7s %8s %6s %6s %9s %9s %9s %9s %6s %6s %5s %5s\n", "model", "sched", "recorded",
            "attain%", "goodput", "warm", "cold", "warm p50", "warm p99", "cold p50", "cold p99", "wakes", "evict",
            "in", "out");
    for (size_t m = 0; m < tr->n; m++)
        table_row(out, &tr->models[m], ttft);
    table_row(out, &tr->all, ttft);
    fprintf(out, "(latencies: %s; wakes/evict: the server's lifecycle counters; in/out seen: residency changes "
                 "the polls saw)\n", what);
    if (tr->has_rss)
        fprintf(out, "server pid %d: peak RSS sampled %.1f MiB, VmHWM %.1f MiB\n", tr->server_pid,
                (double)tr->rss_max_bytes / 1048576.0, (double)tr->hwm_bytes / 1048576.0);
}
