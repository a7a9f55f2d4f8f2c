/* loadtest/report.c: comparisons, sweep limits, cost, and the text table. */
#include "loadtest/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loadtest/workload.h"

double lt_impact_pct(double base, double value)
{
    if (isnan(base) || isnan(value) || base == 0.0)
        return NAN;
    return (value - base) / base * 100.0;
}

static const lt_phase *phase_find(const lt_report *rep, const char *name, const char *model)
{
    for (size_t i = 0; i < rep->n_phases; i++) {
        const lt_phase *p = &rep->phases[i];
        if (strcmp(p->name, name) != 0)
            continue;
        if (!model)
            return p;
        for (size_t k = 0; k < p->n; k++)
            if (strcmp(p->results[k].model, model) == 0)
                return p;
    }
    return NULL;
}

static const lt_result *result_find(const lt_phase *p, const char *model)
{
    for (size_t k = 0; p && k < p->n; k++)
        if (strcmp(p->results[k].model, model) == 0)
            return &p->results[k];
    return NULL;
}

static lt_status compare_phases(const lt_report *rep, const char *ind_name, const char *conc_name,
                                lt_compare **out, size_t *n_out, double *stp)
{
    const lt_phase *conc = phase_find(rep, conc_name, NULL);
    if (!conc)
        return LT_EINVAL;
    lt_compare *cmp = calloc(conc->n ? conc->n : 1, sizeof *cmp);
    if (!cmp)
        return LT_ENOMEM;
    *out = cmp;
    *n_out = 0;
    *stp = 0.0;
    for (size_t k = 0; k < conc->n; k++) {
        const lt_result *c = &conc->results[k];
        const lt_result *i = result_find(phase_find(rep, ind_name, c->model), c->model);
        if (!i)
            continue;
        lt_compare *m = &cmp[(*n_out)++];
        m->ind = i;
        m->conc = c;
        m->p50_impact_pct = lt_impact_pct(i->lat.p50, c->lat.p50);
        m->p90_impact_pct = lt_impact_pct(i->lat.p90, c->lat.p90);
        m->p99_impact_pct = lt_impact_pct(i->lat.p99, c->lat.p99);
        m->rps_impact_pct = lt_impact_pct(i->rps, c->rps);
        m->tps_impact_pct = i->has_tokens && c->has_tokens ? lt_impact_pct(i->tokens_per_s, c->tokens_per_s) : NAN;
        m->norm_throughput = i->rps > 0 ? c->rps / i->rps : NAN;
        *stp += m->norm_throughput; /* a model without throughput alone leaves it unknown, not smaller */
    }
    return LT_OK;
}

lt_status lt_report_compare(lt_report *rep)
{
    lt_status st = compare_phases(rep, "individual", "concurrent", &rep->cmp, &rep->n_cmp, &rep->stp);
    if (st != LT_OK)
        return st;
    if (phase_find(rep, "separate-concurrent", NULL))
        st = compare_phases(rep, "separate-individual", "separate-concurrent", &rep->base_cmp, &rep->n_base_cmp,
                            &rep->base_stp);
    return st;
}

const lt_compare *lt_report_compare_for(const lt_report *rep, const lt_result *r)
{
    for (size_t i = 0; i < rep->n_cmp; i++)
        if (rep->cmp[i].conc == r)
            return &rep->cmp[i];
    for (size_t i = 0; i < rep->n_base_cmp; i++)
        if (rep->base_cmp[i].conc == r)
            return &rep->base_cmp[i];
    return NULL;
}

/* ---- sweeps ---------------------------------------------------------------- */

typedef struct rate_point {
    double rate, attainment;
} rate_point;

static int cmp_rate(const void *a, const void *b)
{
    double x = ((const rate_point *)a)->rate, y = ((const rate_point *)b)->rate;
    return (x > y) - (x < y);
}

lt_status lt_report_sweep_max(lt_report *rep)
{
    free(rep->sweep_max);
    rep->sweep_max = NULL;
    rep->n_sweep_max = 0;
    if (!rep->n_phases)
        return LT_OK;
    const lt_phase *first = &rep->phases[0];
    rep->sweep_max = calloc(first->n ? first->n : 1, sizeof *rep->sweep_max);
    rate_point *pts = calloc(rep->n_phases, sizeof *pts);
    double *rates = calloc(rep->n_phases, sizeof *rates), *att = calloc(rep->n_phases, sizeof *att);
    lt_status st = LT_OK;
    if (!rep->sweep_max || !pts || !rates || !att) {
        st = LT_ENOMEM;
        goto out_free;
    }
    for (size_t k = 0; k < first->n; k++) {
        const char *model = first->results[k].model;
        size_t n = 0;
        for (size_t i = 0; i < rep->n_phases; i++) {
            const lt_result *r = result_find(&rep->phases[i], model);
            if (!r || !r->has_slo || r->concurrency || strncmp(rep->phases[i].name, "rate=", 5) != 0)
                continue;
            pts[n].rate = r->rate_per_s;
            pts[n].attainment = r->attainment;
            n++;
        }
        if (!n)
            continue;
        qsort(pts, n, sizeof *pts, cmp_rate);
        for (size_t i = 0; i < n; i++) {
            rates[i] = pts[i].rate;
            att[i] = pts[i].attainment;
        }
        lt_sweep_max *sm = &rep->sweep_max[rep->n_sweep_max++];
        snprintf(sm->model, sizeof sm->model, "%s", model);
        sm->max_rate = lt_max_rate_at(rates, att, n, rep->attainment_target, &sm->bounded);
    }
out_free:
    free(pts);
    free(rates);
    free(att);
    return st;
}

/* ---- cost ---------------------------------------------------------------- */

static void cost_fill(lt_cost_row *row, const char *setup, double devices, double usd_per_device_hour,
                      const lt_compare *cmp, size_t n, bool alone)
{
    memset(row, 0, sizeof *row);
    row->setup = setup;
    row->devices = devices;
    row->usd_per_hour = devices * usd_per_device_hour;
    bool tokens = n > 0;
    row->worst_p99_impact_pct = row->worst_ttft_impact_pct = row->worst_tpot_impact_pct = NAN;
    for (size_t i = 0; i < n; i++) {
        const lt_result *r = alone ? cmp[i].ind : cmp[i].conc;
        row->rps += r->rps;
        if (r->has_tokens)
            row->tokens_per_s += r->tokens_per_s;
        else
            tokens = false;
        if (alone)
            continue;
        double imp[3] = {cmp[i].p99_impact_pct, lt_impact_pct(cmp[i].ind->ttft.p99, cmp[i].conc->ttft.p99),
                         lt_impact_pct(cmp[i].ind->tpot.p99, cmp[i].conc->tpot.p99)};
        double *worst[3] = {&row->worst_p99_impact_pct, &row->worst_ttft_impact_pct, &row->worst_tpot_impact_pct};
        for (int j = 0; j < 3; j++)
            if (!isnan(imp[j]) && (isnan(*worst[j]) || imp[j] > *worst[j]))
                *worst[j] = imp[j];
    }
    if (!tokens)
        row->tokens_per_s = NAN;
    row->usd_per_m_tokens = row->tokens_per_s > 0 ? row->usd_per_hour / (row->tokens_per_s * 3600.0) * 1e6 : NAN;
    row->usd_per_k_requests = row->rps > 0 ? row->usd_per_hour / (row->rps * 3600.0) * 1e3 : NAN;
}

void lt_report_cost(lt_report *rep, double usd_per_hour, unsigned device_count)
{
    rep->has_cost = true;
    rep->hourly_cost_usd = usd_per_hour;
    rep->device_count = device_count;
    rep->n_cost = 0;
    if (!rep->n_cmp)
        return;
    double n_models = (double)rep->n_cmp;
    cost_fill(&rep->cost[rep->n_cost++], "one device per model", n_models * device_count, usd_per_hour, rep->cmp,
              rep->n_cmp, true);
    if (rep->n_base_cmp)
        cost_fill(&rep->cost[rep->n_cost++], "separate servers, shared", device_count, usd_per_hour,
                  rep->base_cmp, rep->n_base_cmp, false);
    cost_fill(&rep->cost[rep->n_cost++], "colo, shared", device_count, usd_per_hour, rep->cmp, rep->n_cmp, false);
    const lt_cost_row *ded = &rep->cost[0];
    for (size_t i = 0; i < rep->n_cost; i++) {
        lt_cost_row *row = &rep->cost[i];
        bool tok = !isnan(row->usd_per_m_tokens) && !isnan(ded->usd_per_m_tokens);
        double base = tok ? ded->usd_per_m_tokens : ded->usd_per_k_requests;
        double v = tok ? row->usd_per_m_tokens : row->usd_per_k_requests;
        row->savings_pct = isnan(base) || isnan(v) || base == 0 ? NAN : (base - v) / base * 100.0;
    }
}

void lt_report_fini(lt_report *rep)
{
    if (!rep)
        return;
    free(rep->cmp);
    rep->cmp = NULL;
    rep->n_cmp = 0;
    free(rep->base_cmp);
    rep->base_cmp = NULL;
    rep->n_base_cmp = 0;
    free(rep->sweep_max);
    rep->sweep_max = NULL;
    rep->n_sweep_max = 0;
}

/* ---- text table ---------------------------------------------------------------- */

static void fmt_num(char *buf, size_t len, double v, int prec)
{
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.*f", prec, v);
}

/* fmt_num of each of x[0..n) into buf[0..n). */
static void fmt_nums(char (*buf)[24], const double *x, size_t n, int prec)
{
    for (size_t i = 0; i < n; i++)
        fmt_num(buf[i], sizeof buf[i], x[i], prec);
}

static void fmt_pct(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "n/a");
    else
        snprintf(buf, len, "%+.1f%%", v);
}

static void fmt_load(char *buf, size_t len, const lt_result *r)
{
    if (r->concurrency)
        snprintf(buf, len, "c=%u", r->concurrency);
    else
        snprintf(buf, len, "%g/s", r->rate_per_s);
}

static void compare_table(FILE *out, const char *title, const lt_compare *cmp, size_t n, double stp)
{
    fprintf(out, "\n%s (impact = (concurrent - individual) / individual)\n", title);
    fprintf(out, "%-16s %9s %9s %8s %9s %9s %8s %9s %9s %8s %9s %9s %8s %7s\n", "model", "p50 ind",
            "p50 conc", "impact", "p99 ind", "p99 conc", "impact", "rps ind", "rps conc", "impact",
            "tok/s ind", "tok/s con", "impact", "errors");
    for (size_t i = 0; i < n; i++) {
        const lt_compare *m = &cmp[i];
        char v[12][24];
        fmt_num(v[0], sizeof v[0], m->ind->lat.p50, 2);
        fmt_num(v[1], sizeof v[1], m->conc->lat.p50, 2);
        fmt_pct(v[2], sizeof v[2], m->p50_impact_pct);
        fmt_num(v[3], sizeof v[3], m->ind->lat.p99, 2);
        fmt_num(v[4], sizeof v[4], m->conc->lat.p99, 2);
        fmt_pct(v[5], sizeof v[5], m->p99_impact_pct);
        fmt_num(v[6], sizeof v[6], m->ind->rps, 2);
        fmt_num(v[7], sizeof v[7], m->conc->rps, 2);
        fmt_pct(v[8], sizeof v[8], m->rps_impact_pct);
        fmt_num(v[9], sizeof v[9], m->ind->has_tokens ? m->ind->tokens_per_s : NAN, 1);
        fmt_num(v[10], sizeof v[10], m->conc->has_tokens ? m->conc->tokens_per_s : NAN, 1);
        fmt_pct(v[11], sizeof v[11], m->tps_impact_pct);
        fprintf(out, "%-16s %9s %9s %8s %9s %9s %8s %9s %9s %8s %9s %9s %8s %3llu/%-3llu\n", m->conc->model, v[0],
                v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11],
                (unsigned long long)lt_result_errors(m->ind), (unsigned long long)lt_result_errors(m->conc));
    }
    if (isnan(stp))
        fprintf(out, "STP (sum of concurrent/individual throughput) unknown: a model completed nothing alone\n");
    else
        fprintf(out, "STP (sum of concurrent/individual throughput) = %.3f of %zu (%zu = no interference)\n", stp, n,
                n);
}

static const lt_compare *cmp_find(const lt_compare *cmp, size_t n, const char *model)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cmp[i].conc->model, model) == 0)
            return &cmp[i];
    return NULL;
}

/* Separate servers and colo side by side, per model. */
static void baseline_table(FILE *out, const lt_report *rep)
{
    fprintf(out, "\nseparate servers vs colo (same models, loads and device; together, against each alone)\n");
    fprintf(out, "%-16s %11s %11s %11s %11s %11s %11s %11s %11s %11s %11s\n", "model", "p99 sep", "p99 colo",
            "ttft99 sep", "ttft99 colo", "retain sep", "retain colo", "tok/s sep", "tok/s colo", "goodput sep",
            "goodput co");
    for (size_t i = 0; i < rep->n_cmp; i++) {
        const lt_compare *c = &rep->cmp[i], *b = cmp_find(rep->base_cmp, rep->n_base_cmp, c->conc->model);
        if (!b)
            continue;
        char v[10][24];
        fmt_pct(v[0], sizeof v[0], b->p99_impact_pct);
        fmt_pct(v[1], sizeof v[1], c->p99_impact_pct);
        fmt_pct(v[2], sizeof v[2], lt_impact_pct(b->ind->ttft.p99, b->conc->ttft.p99));
        fmt_pct(v[3], sizeof v[3], lt_impact_pct(c->ind->ttft.p99, c->conc->ttft.p99));
        fmt_num(v[4], sizeof v[4], b->norm_throughput * 100, 1);
        fmt_num(v[5], sizeof v[5], c->norm_throughput * 100, 1);
        fmt_num(v[6], sizeof v[6], b->conc->has_tokens ? b->conc->tokens_per_s : NAN, 1);
        fmt_num(v[7], sizeof v[7], c->conc->has_tokens ? c->conc->tokens_per_s : NAN, 1);
        fmt_num(v[8], sizeof v[8], b->conc->has_slo ? b->conc->goodput_rps : NAN, 2);
        fmt_num(v[9], sizeof v[9], c->conc->has_slo ? c->conc->goodput_rps : NAN, 2);
        fprintf(out, "%-16s %11s %11s %11s %11s %10s%% %10s%% %11s %11s %11s %11s\n", c->conc->model, v[0], v[1],
                v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]);
    }
    fprintf(out, "STP: separate servers %.3f, colo %.3f (of %zu)\n", rep->base_stp, rep->stp, rep->n_cmp);
    fprintf(out, "(p99/ttft99: latency impact of running together; retain: concurrent throughput as %% of alone;"
                 " goodput: req/s meeting the SLOs, together)\n");
}

static void goodput_table(FILE *out, const lt_report *rep)
{
    fprintf(out, "\ngoodput (requests meeting every SLO)\n%-22s %-16s %-28s %9s %11s %9s\n", "phase", "model",
            "SLOs", "good", "attainment", "goodput");
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            const lt_result *r = &rep->phases[i].results[k];
            if (!r->has_slo)
                continue;
            char slo[96] = "", a[24], g[24];
            size_t o = 0;
            if (!isnan(r->slo.ttft_ms))
                o += (size_t)snprintf(slo + o, sizeof slo - o, "ttft<=%g ", r->slo.ttft_ms);
            if (!isnan(r->slo.tpot_ms) && o < sizeof slo)
                o += (size_t)snprintf(slo + o, sizeof slo - o, "tpot<=%g ", r->slo.tpot_ms);
            if (!isnan(r->slo.e2e_ms) && o < sizeof slo)
                snprintf(slo + o, sizeof slo - o, "e2e<=%g", r->slo.e2e_ms);
            fmt_num(a, sizeof a, r->attainment * 100, 1);
            fmt_num(g, sizeof g, r->goodput_rps, 2);
            fprintf(out, "%-22s %-16s %-28s %9llu %10s%% %9s\n", rep->phases[i].name, r->model, slo,
                    (unsigned long long)r->good, a, g);
        }
}

static void cost_table(FILE *out, const lt_report *rep)
{
    fprintf(out, "\ncost at $%g per device-hour, %u device%s per deployment (at the loads offered)\n",
            rep->hourly_cost_usd, rep->device_count, rep->device_count == 1 ? "" : "s");
    fprintf(out, "%-26s %7s %9s %9s %10s %11s %11s %9s %11s %11s\n", "setup", "devices", "$/hour", "req/s", "tok/s",
            "$/M tokens", "$/1k req", "savings", "worst p99", "worst ttft");
    for (size_t i = 0; i < rep->n_cost; i++) {
        const lt_cost_row *c = &rep->cost[i];
        char v[8][24];
        fmt_num(v[0], sizeof v[0], c->usd_per_hour, 2);
        fmt_num(v[1], sizeof v[1], c->rps, 2);
        fmt_num(v[2], sizeof v[2], c->tokens_per_s, 1);
        fmt_num(v[3], sizeof v[3], c->usd_per_m_tokens, 3);
        fmt_num(v[4], sizeof v[4], c->usd_per_k_requests, 4);
        fmt_pct(v[5], sizeof v[5], c->savings_pct);
        fmt_pct(v[6], sizeof v[6], c->worst_p99_impact_pct);
        fmt_pct(v[7], sizeof v[7], c->worst_ttft_impact_pct);
        fprintf(out, "%-26s %7g %9s %9s %10s %11s %11s %9s %11s %11s\n", c->setup, c->devices, v[0], v[1], v[2], v[3],
                v[4], v[5], v[6], v[7]);
    }
    fprintf(out, "(savings: cost per output token, or per request without token counts, against one device per"
                 " model; worst p99/ttft: the latency price, the worst model's p99 change against running alone)\n");
}

/* One row of the speculative decoding table. */
static void spec_line(FILE *out, const char *model, const char *draft, const char *source, uint64_t drafted,
                      uint64_t accepted)
{
    char a[24];
    fmt_num(a, sizeof a, drafted ? 100.0 * (double)accepted / (double)drafted : NAN, 1);
    fprintf(out, "%-16s %-16s %-8s %12llu %12llu %10s%%\n", model, draft, source, (unsigned long long)drafted,
            (unsigned long long)accepted, a);
}

/* The server's own counters over the run, where it reported them: a
 * model's in all, then by source. */
static void spec_table(FILE *out, const lt_report *rep)
{
    bool header = false;
    for (size_t i = 0; i < rep->n_spec; i++) {
        const lt_spec_row *s = &rep->spec[i];
        if (!s->has)
            continue;
        if (!header)
            fprintf(out,
                    "\nspeculative decoding (the server's /v1/stats over the run)\n%-16s %-16s %-8s %12s %12s %11s\n",
                    "model", "draft", "source", "drafted", "accepted", "acceptance");
        header = true;
        spec_line(out, s->model, s->draft[0] ? s->draft : "(text)", "all", s->drafted, s->accepted);
        for (int k = 0; k < LT_SPEC_SOURCES; k++)
            if (s->src[k].has)
                spec_line(out, s->model, "", lt_spec_source_names[k], s->src[k].drafted, s->src[k].accepted);
    }
}

void lt_report_table(FILE *out, const lt_report *rep)
{
    fprintf(out, "colo-loadtest  %s  scenario %s  %s  warm-up %gs  %s\n\n", rep->url, rep->scenario,
            rep->load_desc ? rep->load_desc : "", rep->warmup_s, rep->streamed ? "streaming" : "");
    fprintf(out, "%-12s %-16s %8s %8s %7s %7s %9s %9s %9s %9s %9s %9s %9s %9s", "phase", "model",
            "load", "ok", "errors", "timeout", "req/s", "tok/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms",
            "max ms", "mean ms");
    if (rep->streamed)
        fprintf(out, " %9s %9s %9s %9s %9s %9s", "ttft p50", "ttft p99", "tpot p50", "tpot p99", "itl p50",
                "itl p99");
    fputc('\n', out);
    for (size_t i = 0; i < rep->n_phases; i++) {
        const lt_phase *p = &rep->phases[i];
        for (size_t k = 0; k < p->n; k++) {
            const lt_result *r = &p->results[k];
            char load[32], v[16][24];
            fmt_load(load, sizeof load, r);
            fmt_num(v[0], sizeof v[0], r->rps, 2);
            fmt_num(v[1], sizeof v[1], r->has_tokens ? r->tokens_per_s : NAN, 1);
            fmt_nums(v + 2, (const double[]){r->lat.p50, r->lat.p90, r->lat.p95, r->lat.p99, r->lat.max, r->lat.mean},
                     6, 2);
            fprintf(out, "%-12s %-16s %8s %8llu %7llu %7llu %9s %9s %9s %9s %9s %9s %9s %9s", p->name,
                    r->model, load, (unsigned long long)r->ok,
                    (unsigned long long)(r->http_errors + r->connect_errors + r->io_errors),
                    (unsigned long long)r->timeouts, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
            if (rep->streamed) {
                fmt_nums(v + 8,
                         (const double[]){r->ttft.p50, r->ttft.p99, r->tpot.p50, r->tpot.p99, r->itl.p50, r->itl.p99},
                         6, 2);
                fprintf(out, " %9s %9s %9s %9s %9s %9s", v[8], v[9], v[10], v[11], v[12], v[13]);
            }
            fputc('\n', out);
        }
    }
    /* errors by kind, only where there were some */
    bool header = false;
    for (size_t i = 0; i < rep->n_phases; i++) {
        const lt_phase *p = &rep->phases[i];
        for (size_t k = 0; k < p->n; k++) {
            const lt_result *r = &p->results[k];
            if (!lt_result_errors(r))
                continue;
            if (!header)
                fprintf(out, "\nerrors (not in the latencies):\n");
            header = true;
            fprintf(out, "  %s %s:", p->name, r->model);
            for (size_t s = 0; s < r->n_status; s++)
                fprintf(out, " HTTP %d x%llu;", r->by_status[s].status, (unsigned long long)r->by_status[s].count);
            fprintf(out, " connect %llu; timeout %llu; closed/malformed %llu; error rate %.2f%%\n",
                    (unsigned long long)r->connect_errors, (unsigned long long)r->timeouts,
                    (unsigned long long)r->io_errors, r->error_rate * 100.0);
        }
    }
    if (rep->n_base_cmp)
        compare_table(out, "separate servers: individual vs concurrent", rep->base_cmp, rep->n_base_cmp,
                      rep->base_stp);
    if (rep->n_cmp)
        compare_table(out, rep->n_base_cmp ? "colo: individual vs concurrent" : "individual vs concurrent",
                      rep->cmp, rep->n_cmp, rep->stp);
    if (rep->n_base_cmp && rep->n_cmp)
        baseline_table(out, rep);
    if (rep->has_goodput)
        goodput_table(out, rep);
    if (rep->trace)
        lt_trace_report_table(out, rep->trace);
    if (rep->n_sweep_max) {
        fprintf(out, "\nhighest rate with attainment >= %.0f%% (interpolated)\n", rep->attainment_target * 100);
        for (size_t i = 0; i < rep->n_sweep_max; i++) {
            const lt_sweep_max *m = &rep->sweep_max[i];
            if (isnan(m->max_rate))
                fprintf(out, "  %-16s below the lowest rate tested\n", m->model);
            else
                fprintf(out, "  %-16s %s%.3f req/s\n", m->model, m->bounded ? "" : ">= ", m->max_rate);
        }
    }
    if (rep->n_cost)
        cost_table(out, rep);
    spec_table(out, rep);
    if (rep->has_sla) {
        fprintf(out, "\nSLA: %s\n", rep->sla_pass ? "PASS" : "FAIL");
        for (size_t i = 0; i < rep->n_checks; i++) {
            const lt_sla_check *c = &rep->checks[i];
            char mv[24];
            fmt_num(mv, sizeof mv, c->measured, 3);
            bool upper = strcmp(c->constraint, "min_rps") != 0;
            fprintf(out, "  %-4s %-16s %-15s measured %-10s %s bound %g%s\n",
                    c->skipped ? "SKIP" : c->pass ? "ok" : "FAIL", c->model, c->constraint, mv,
                    upper ? "<=" : ">=", c->bound, c->skipped ? " (needs --stream)" : "");
        }
    }
}

