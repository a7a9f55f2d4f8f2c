/* loadtest/report.c: comparison, text table, JSON and CSV outputs. */
#include "loadtest/report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loadtest/workload.h"

const char lt_csv_header[] =
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait,"
    "model,phase,latency_impact_pct,throughput_impact_pct,request_rate";

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

lt_status lt_report_compare(lt_report *rep)
{
    const lt_phase *conc = phase_find(rep, "concurrent", NULL);
    if (!conc)
        return LT_EINVAL;
    rep->cmp = calloc(conc->n ? conc->n : 1, sizeof *rep->cmp);
    if (!rep->cmp)
        return LT_ENOMEM;
    rep->n_cmp = 0;
    rep->stp = 0.0;
    for (size_t k = 0; k < conc->n; k++) {
        const lt_result *c = &conc->results[k];
        const lt_result *i = result_find(phase_find(rep, "individual", c->model), c->model);
        if (!i)
            continue;
        lt_compare *m = &rep->cmp[rep->n_cmp++];
        m->ind = i;
        m->conc = c;
        m->p50_impact_pct = lt_impact_pct(i->lat.p50, c->lat.p50);
        m->p90_impact_pct = lt_impact_pct(i->lat.p90, c->lat.p90);
        m->p99_impact_pct = lt_impact_pct(i->lat.p99, c->lat.p99);
        m->rps_impact_pct = lt_impact_pct(i->rps, c->rps);
        m->tps_impact_pct = i->has_tokens && c->has_tokens ? lt_impact_pct(i->tokens_per_s, c->tokens_per_s) : NAN;
        m->norm_throughput = i->rps > 0 ? c->rps / i->rps : NAN;
        if (!isnan(m->norm_throughput))
            rep->stp += m->norm_throughput;
    }
    return LT_OK;
}

void lt_report_fini(lt_report *rep)
{
    if (!rep)
        return;
    free(rep->cmp);
    rep->cmp = NULL;
    rep->n_cmp = 0;
}

/* ---- text table ---------------------------------------------------------------- */

static void fmt_num(char *buf, size_t len, double v, int prec)
{
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.*f", prec, v);
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

void lt_report_table(FILE *out, const lt_report *rep)
{
    fprintf(out, "colo-loadtest  %s  scenario %s  %s  warm-up %gs  %s\n\n", rep->url, rep->scenario,
            rep->load_desc ? rep->load_desc : "", rep->warmup_s, rep->streamed ? "streaming" : "");
    fprintf(out, "%-12s %-16s %8s %8s %7s %7s %9s %9s %9s %9s %9s %9s %9s %9s", "phase", "model",
            "load", "ok", "errors", "timeout", "req/s", "tok/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms",
            "max ms", "mean ms");
    if (rep->streamed)
        fprintf(out, " %9s %9s %9s %9s", "ttft p50", "ttft p99", "itl p50", "itl p99");
    fputc('\n', out);
    for (size_t i = 0; i < rep->n_phases; i++) {
        const lt_phase *p = &rep->phases[i];
        for (size_t k = 0; k < p->n; k++) {
            const lt_result *r = &p->results[k];
            char load[32], v[14][24];
            fmt_load(load, sizeof load, r);
            fmt_num(v[0], sizeof v[0], r->rps, 2);
            fmt_num(v[1], sizeof v[1], r->has_tokens ? r->tokens_per_s : NAN, 1);
            fmt_num(v[2], sizeof v[2], r->lat.p50, 2);
            fmt_num(v[3], sizeof v[3], r->lat.p90, 2);
            fmt_num(v[4], sizeof v[4], r->lat.p95, 2);
            fmt_num(v[5], sizeof v[5], r->lat.p99, 2);
            fmt_num(v[6], sizeof v[6], r->lat.max, 2);
            fmt_num(v[7], sizeof v[7], r->lat.mean, 2);
            fprintf(out, "%-12s %-16s %8s %8llu %7llu %7llu %9s %9s %9s %9s %9s %9s %9s %9s", p->name,
                    r->model, load, (unsigned long long)r->ok,
                    (unsigned long long)(r->http_errors + r->connect_errors + r->io_errors),
                    (unsigned long long)r->timeouts, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
            if (rep->streamed) {
                fmt_num(v[8], sizeof v[8], r->ttft.p50, 2);
                fmt_num(v[9], sizeof v[9], r->ttft.p99, 2);
                fmt_num(v[10], sizeof v[10], r->itl.p50, 2);
                fmt_num(v[11], sizeof v[11], r->itl.p99, 2);
                fprintf(out, " %9s %9s %9s %9s", v[8], v[9], v[10], v[11]);
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
    if (rep->n_cmp) {
        fprintf(out, "\nindividual vs concurrent (impact = (concurrent - individual) / individual)\n");
        fprintf(out, "%-16s %9s %9s %8s %9s %9s %8s %9s %9s %8s %9s %9s %8s %7s\n", "model", "p50 ind",
                "p50 conc", "impact", "p99 ind", "p99 conc", "impact", "rps ind", "rps conc", "impact",
                "tok/s ind", "tok/s con", "impact", "errors");
        for (size_t i = 0; i < rep->n_cmp; i++) {
            const lt_compare *m = &rep->cmp[i];
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
            fprintf(out, "%-16s %9s %9s %8s %9s %9s %8s %9s %9s %8s %9s %9s %8s %3llu/%-3llu\n",
                    m->conc->model, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10],
                    v[11], (unsigned long long)lt_result_errors(m->ind),
                    (unsigned long long)lt_result_errors(m->conc));
        }
        fprintf(out, "STP (sum of concurrent/individual throughput) = %.3f of %zu (%zu = no interference)\n",
                rep->stp, rep->n_cmp, rep->n_cmp);
    }
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

/* ---- JSON ---------------------------------------------------------------- */

static json_t *jnum(double v)
{
    return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static json_t *summary_json(const lt_summary *s)
{
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "n", (json_int_t)s->n, "min", jnum(s->min),
                     "mean", jnum(s->mean), "p50", jnum(s->p50), "p90", jnum(s->p90), "p95", jnum(s->p95),
                     "p99", jnum(s->p99), "max", jnum(s->max));
}

static json_t *result_json(const lt_result *r)
{
    json_t *by_status = json_object();
    for (size_t s = 0; by_status && s < r->n_status; s++) {
        char key[16];
        snprintf(key, sizeof key, "%d", r->by_status[s].status);
        json_object_set_new(by_status, key, json_integer((json_int_t)r->by_status[s].count));
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:o,s:I,s:{s:I,s:o,s:I,s:I,s:I},s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "model", r->model,
        "phase", r->phase, "concurrency", (json_int_t)r->concurrency, "rate_per_s",
        r->concurrency ? json_null() : jnum(r->rate_per_s), "ok", (json_int_t)r->ok, "errors", "http",
        (json_int_t)r->http_errors, "http_by_status", by_status ? by_status : json_object(), "connect",
        (json_int_t)r->connect_errors, "timeout", (json_int_t)r->timeouts, "io", (json_int_t)r->io_errors,
        "error_rate", jnum(r->error_rate), "window_s", jnum(r->window_s), "throughput_rps", jnum(r->rps),
        "tokens_per_s", r->has_tokens ? jnum(r->tokens_per_s) : json_null(), "latency_ms",
        summary_json(&r->lat), "ttft_ms", summary_json(&r->ttft), "itl_ms", summary_json(&r->itl),
        "tokens", r->has_tokens ? json_integer((json_int_t)r->tokens) : json_null());
    return o;
}

static lt_status json_build(const lt_report *rep, json_t **out)
{
    json_t *root = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:I,s:b}", "tool", "colo-loadtest", "url", rep->url,
                             "scenario", rep->scenario, "load", rep->load_desc ? rep->load_desc : "",
                             "warmup_s", jnum(rep->warmup_s), "duration_s",
                             rep->requests ? json_null() : jnum(rep->duration_s), "timeout_s",
                             jnum(rep->timeout_s), "requests", (json_int_t)rep->requests, "stream",
                             rep->streamed);
    json_t *phases = json_array();
    if (!root || !phases)
        goto out_nomem;
    json_object_set_new(root, "phases", phases);
    for (size_t i = 0; i < rep->n_phases; i++) {
        json_t *models = json_array();
        json_t *ph = json_pack("{s:s,s:o}", "name", rep->phases[i].name, "models", models);
        if (!ph || json_array_append_new(phases, ph))
            goto out_nomem;
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            json_t *r = result_json(&rep->phases[i].results[k]);
            if (!r || json_array_append_new(models, r))
                goto out_nomem;
        }
    }
    if (rep->n_cmp) {
        json_t *rows = json_array();
        json_t *cmp = json_pack("{s:o,s:o}", "models", rows, "stp", jnum(rep->stp));
        if (!cmp || json_object_set_new(root, "comparison", cmp))
            goto out_nomem;
        for (size_t i = 0; i < rep->n_cmp; i++) {
            const lt_compare *m = &rep->cmp[i];
            json_t *row = json_pack(
                "{s:s,s:{s:o,s:o,s:o},s:{s:o,s:o,s:o},s:{s:o,s:o,s:o},s:{s:o,s:o},s:{s:o,s:o},s:o,s:o,s:o,s:I,s:I}",
                "model", m->conc->model,
                "individual_ms", "p50", jnum(m->ind->lat.p50), "p90", jnum(m->ind->lat.p90), "p99", jnum(m->ind->lat.p99),
                "concurrent_ms", "p50", jnum(m->conc->lat.p50), "p90", jnum(m->conc->lat.p90), "p99", jnum(m->conc->lat.p99),
                "latency_impact_pct", "p50", jnum(m->p50_impact_pct), "p90", jnum(m->p90_impact_pct), "p99", jnum(m->p99_impact_pct),
                "throughput_rps", "individual", jnum(m->ind->rps), "concurrent", jnum(m->conc->rps),
                "tokens_per_s", "individual", m->ind->has_tokens ? jnum(m->ind->tokens_per_s) : json_null(),
                "concurrent", m->conc->has_tokens ? jnum(m->conc->tokens_per_s) : json_null(),
                "throughput_impact_pct", jnum(m->rps_impact_pct), "tokens_impact_pct", jnum(m->tps_impact_pct),
                "normalised_throughput", jnum(m->norm_throughput),
                "errors_individual", (json_int_t)lt_result_errors(m->ind),
                "errors_concurrent", (json_int_t)lt_result_errors(m->conc));
            if (!row || json_array_append_new(rows, row))
                goto out_nomem;
        }
    }
    if (rep->has_sla) {
        json_t *checks = json_array();
        json_t *sla = json_pack("{s:b,s:o}", "pass", rep->sla_pass, "checks", checks);
        if (!sla || json_object_set_new(root, "sla", sla))
            goto out_nomem;
        for (size_t i = 0; i < rep->n_checks; i++) {
            const lt_sla_check *c = &rep->checks[i];
            json_t *row = json_pack("{s:s,s:s,s:o,s:o,s:b,s:b}", "model", c->model, "constraint",
                                    c->constraint, "measured", jnum(c->measured), "bound", jnum(c->bound),
                                    "pass", c->pass, "skipped", c->skipped);
            if (!row || json_array_append_new(checks, row))
                goto out_nomem;
        }
    }
    *out = root;
    return LT_OK;
out_nomem:
    json_decref(root);
    return LT_ENOMEM;
}

lt_status lt_report_json(const char *path, const lt_report *rep, char *err, size_t errlen)
{
    json_t *root = NULL;
    if (json_build(rep, &root) != LT_OK) {
        lt_set_err(err, errlen, "out of memory building JSON");
        return LT_ENOMEM;
    }
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc != 0) {
        lt_set_err(err, errlen, "cannot write %s", path);
        return LT_EIO;
    }
    return LT_OK;
}

/* ---- CSV ---------------------------------------------------------------- */

static long long us(double ms)
{
    return isnan(ms) ? 0 : llround(ms * 1000.0);
}

static double mean_of(double sum, uint64_t n)
{
    return n ? sum / (double)n : NAN;
}

static const lt_compare *compare_for(const lt_report *rep, const lt_result *r)
{
    for (size_t i = 0; i < rep->n_cmp; i++)
        if (rep->cmp[i].conc == r)
            return &rep->cmp[i];
    return NULL;
}

lt_status lt_report_csv(const char *path, const lt_report *rep, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    fprintf(f, "%s\n", lt_csv_header);
    for (size_t i = 0; i < rep->n_phases; i++) {
        const lt_phase *p = &rep->phases[i];
        for (size_t k = 0; k < p->n; k++) {
            const lt_result *r = &p->results[k];
            double send = mean_of(r->client_queue_ms_sum, r->ok);
            double wait = mean_of(r->first_byte_ms_sum, r->ok);
            double recv = mean_of(r->recv_ms_sum, r->ok);
            const lt_compare *m = compare_for(rep, r);
            char lat_imp[32] = "", tput_imp[32] = "", rate[32] = "";
            if (m && !isnan(m->p99_impact_pct))
                snprintf(lat_imp, sizeof lat_imp, "%.2f", m->p99_impact_pct);
            if (m && !isnan(m->rps_impact_pct))
                snprintf(tput_imp, sizeof tput_imp, "%.2f", m->rps_impact_pct);
            if (!r->concurrency)
                snprintf(rate, sizeof rate, "%g", r->rate_per_s);
            /* a model name needing quotes (comma, quote) is quoted, as RFC 4180 says */
            bool quote = strpbrk(r->model, ",\"\r\n") != NULL;
            char model[300];
            size_t o = 0;
            if (quote)
                model[o++] = '"';
            for (const char *m = r->model; *m && o < sizeof model - 3; m++) {
                if (*m == '"')
                    model[o++] = '"';
                model[o++] = *m;
            }
            if (quote)
                model[o++] = '"';
            model[o] = '\0';
            fprintf(f, "%u,%.2f,%lld,%lld,0,0,0,0,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%s,%s,%s,%s\n",
                    r->concurrency, r->rps, us(send), us(wait), us(recv), us(r->lat.p50), us(r->lat.p90),
                    us(r->lat.p95), us(r->lat.p99), us(r->lat.mean),
                    isnan(wait) ? 0 : us(wait + recv), us(wait), model, p->name, lat_imp, tput_imp, rate);
        }
    }
    if (fclose(f) != 0) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    return LT_OK;
}
