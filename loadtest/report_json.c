/* loadtest/report_json.c: the machine-readable outputs: JSON (with vllm bench
 * serve's field names where they mean the same), CSV (perf_analyzer's
 * columns) and the per-request JSON Lines. */
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

/* ---- JSON ---------------------------------------------------------------- */

static json_t *jnum(double v)
{
    return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static json_t *summary_json(const lt_summary *s)
{
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "n", (json_int_t)s->n, "min", jnum(s->min),
                     "mean", jnum(s->mean), "std", jnum(s->std), "p50", jnum(s->p50), "p90", jnum(s->p90),
                     "p95", jnum(s->p95), "p99", jnum(s->p99), "max", jnum(s->max));
}

/* vllm bench serve's flat names: mean_ttft_ms, median_ttft_ms, std_ttft_ms,
 * p90/p95/p99_ttft_ms, and colo's max_ttft_ms beside them. */
static int flat_metric(json_t *o, const char *name, const lt_summary *s)
{
    const char *stat[] = {"mean", "median", "std", "p90", "p95", "p99", "max"};
    double v[] = {s->mean, s->p50, s->std, s->p90, s->p95, s->p99, s->max};
    int bad = 0;
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char key[48];
        snprintf(key, sizeof key, "%s_%s_ms", stat[i], name);
        bad |= json_object_set_new(o, key, jnum(v[i]));
    }
    return bad;
}

static json_t *slo_json(const lt_slo *s)
{
    return json_pack("{s:o,s:o,s:o}", "ttft_ms", jnum(s->ttft_ms), "tpot_ms", jnum(s->tpot_ms), "e2e_ms",
                     jnum(s->e2e_ms));
}

/* vllm's names for what a result measured, set into o. */
static int vllm_fields(json_t *o, const lt_result *r)
{
    int bad = 0;
    bad |= json_object_set_new(o, "completed", json_integer((json_int_t)r->ok));
    bad |= json_object_set_new(o, "failed", json_integer((json_int_t)lt_result_errors(r)));
    bad |= json_object_set_new(o, "duration", jnum(r->window_s));
    bad |= json_object_set_new(o, "total_input_tokens",
                               r->has_prompt_tokens ? json_integer((json_int_t)r->prompt_tokens) : json_null());
    bad |= json_object_set_new(o, "total_output_tokens",
                               r->has_tokens ? json_integer((json_int_t)r->tokens) : json_null());
    bad |= json_object_set_new(o, "request_throughput", jnum(r->rps));
    bad |= json_object_set_new(o, "output_throughput", r->has_tokens ? jnum(r->tokens_per_s) : json_null());
    double in_tps = r->window_s > 0 ? (double)r->window_prompt_tokens / r->window_s : NAN;
    bad |= json_object_set_new(o, "total_token_throughput",
                               r->has_tokens && r->has_prompt_tokens ? jnum(r->tokens_per_s + in_tps) : json_null());
    bad |= json_object_set_new(o, "request_goodput", r->has_slo ? jnum(r->goodput_rps) : json_null());
    bad |= json_object_set_new(o, "max_concurrency", r->concurrency ? json_integer(r->concurrency) : json_null());
    bad |= json_object_set_new(o, "request_rate", r->concurrency ? json_null() : jnum(r->rate_per_s));
    bad |= flat_metric(o, "ttft", &r->ttft);
    bad |= flat_metric(o, "tpot", &r->tpot);
    bad |= flat_metric(o, "itl", &r->itl);
    bad |= flat_metric(o, "e2el", &r->lat);
    /* colo's additions */
    bad |= json_object_set_new(o, "goodput_slo", r->has_slo ? slo_json(&r->slo) : json_null());
    bad |= json_object_set_new(o, "good", r->has_slo ? json_integer((json_int_t)r->good) : json_null());
    bad |= json_object_set_new(o, "attainment_pct", r->has_slo ? jnum(r->attainment * 100) : json_null());
    bad |= json_object_set_new(o, "tpot_ms", summary_json(&r->tpot));
    return bad;
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
        "{s:s,s:s,s:I,s:o,s:I,s:I,s:{s:I,s:o,s:I,s:I,s:I},s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "model", r->model,
        "phase", r->phase, "concurrency", (json_int_t)r->concurrency, "rate_per_s",
        r->concurrency ? json_null() : jnum(r->rate_per_s), "ok", (json_int_t)r->ok,
        "late_ok", (json_int_t)r->late_ok, "errors", "http",
        (json_int_t)r->http_errors, "http_by_status", by_status ? by_status : json_object(), "connect",
        (json_int_t)r->connect_errors, "timeout", (json_int_t)r->timeouts, "io", (json_int_t)r->io_errors,
        "error_rate", jnum(r->error_rate), "window_s", jnum(r->window_s), "throughput_rps", jnum(r->rps),
        "tokens_per_s", r->has_tokens ? jnum(r->tokens_per_s) : json_null(), "latency_ms",
        summary_json(&r->lat), "ttft_ms", summary_json(&r->ttft), "itl_ms", summary_json(&r->itl),
        "tokens", r->has_tokens ? json_integer((json_int_t)r->tokens) : json_null());
    if (o && vllm_fields(o, r)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int compare_json(json_t *root, const char *key, const lt_compare *cmp, size_t n, double stp)
{
    json_t *rows = json_array();
    json_t *obj = json_pack("{s:o,s:o}", "models", rows, "stp", jnum(stp));
    if (!obj || json_object_set_new(root, key, obj))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const lt_compare *m = &cmp[i];
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
            return -1;
        int bad = json_object_set_new(row, "ttft_p99_impact_pct", jnum(lt_impact_pct(m->ind->ttft.p99, m->conc->ttft.p99)));
        bad |= json_object_set_new(row, "tpot_p99_impact_pct", jnum(lt_impact_pct(m->ind->tpot.p99, m->conc->tpot.p99)));
        bad |= json_object_set_new(row, "request_goodput", json_pack("{s:o,s:o}", "individual",
                                   m->ind->has_slo ? jnum(m->ind->goodput_rps) : json_null(), "concurrent",
                                   m->conc->has_slo ? jnum(m->conc->goodput_rps) : json_null()));
        if (bad)
            return -1;
    }
    return 0;
}

/* One row of the trace scenario: a model's, or "all". */
static json_t *trace_model_json(const lt_trace_report *tr, const lt_trace_model *m)
{
    json_t *o = json_pack("{s:s,s:I,s:I,s:o,s:o,s:o,s:I,s:I,s:I}", "model", m->model, "scheduled",
                          (json_int_t)m->scheduled, "recorded", (json_int_t)m->recorded, "good",
                          isnan(m->attainment_pct) ? json_null() : json_integer((json_int_t)m->good),
                          "attainment_pct", jnum(m->attainment_pct), "request_goodput", jnum(m->goodput_rps),
                          "warm", (json_int_t)m->warm, "cold", (json_int_t)m->cold, "unknown",
                          (json_int_t)m->unknown);
    json_t *bins = json_array(), *changes = json_array();
    if (!o || !bins || !changes ||
        json_object_set_new(o, "ttft_warm_ms", summary_json(&m->ttft_warm)) ||
        json_object_set_new(o, "ttft_cold_ms", summary_json(&m->ttft_cold)) ||
        json_object_set_new(o, "e2el_warm_ms", summary_json(&m->e2e_warm)) ||
        json_object_set_new(o, "e2el_cold_ms", summary_json(&m->e2e_cold)) ||
        json_object_set_new(o, "p50_ttft_warm_ms", jnum(m->ttft_warm.p50)) ||
        json_object_set_new(o, "p99_ttft_warm_ms", jnum(m->ttft_warm.p99)) ||
        json_object_set_new(o, "p50_ttft_cold_ms", jnum(m->ttft_cold.p50)) ||
        json_object_set_new(o, "p99_ttft_cold_ms", jnum(m->ttft_cold.p99)) ||
        json_object_set_new(o, "loads_seen", json_integer((json_int_t)m->loads_seen)) ||
        json_object_set_new(o, "unloads_seen", json_integer((json_int_t)m->unloads_seen)) ||
        json_object_set_new(o, "wakes", m->has_counters ? json_integer((json_int_t)m->wakes) : json_null()) ||
        json_object_set_new(o, "evictions",
                            m->has_counters ? json_integer((json_int_t)m->evictions) : json_null()))
        goto out_nomem;
    json_object_set_new(o, "attainment_over_time_pct", bins);
    for (size_t b = 0; b < tr->n_bins; b++)
        if (json_array_append_new(bins, jnum(m->bin_attainment_pct[b])))
            goto out_nomem_o;
    if (strcmp(m->model, "all") == 0) {
        json_decref(changes);
        return o;
    }
    json_object_set_new(o, "residency", changes);
    for (size_t i = 0; i < m->n_changes; i++)
        if (json_array_append_new(changes, json_pack("{s:o,s:b}", "at_s", jnum(m->changes[i].at_s), "resident",
                                                     m->changes[i].resident)))
            goto out_nomem_o;
    return o;
out_nomem:
    json_decref(bins);
    json_decref(changes);
out_nomem_o:
    json_decref(o);
    return NULL;
}

static json_t *trace_json(const lt_trace_report *tr)
{
    json_t *models = json_array();
    json_t *o = json_pack(
        "{s:s,s:o,s:o,s:o,s:o,s:I,s:o,s:b,s:o,s:o,s:o,s:o,s:o}", "source", tr->source, "zipf_s", jnum(tr->zipf_s),
        "rate_per_s", strcmp(tr->source, "zipf") == 0 ? jnum(tr->rate_per_s) : json_null(), "burstiness",
        tr->burstiness > 0 ? jnum(tr->burstiness) : json_null(), "speed",
        strcmp(tr->source, "zipf") == 0 ? json_null() : jnum(tr->speed), "seed", (json_int_t)tr->seed, "span_s",
        jnum(tr->span_s), "monitored", tr->monitored, "poll_interval_s",
        tr->monitored ? jnum(tr->poll_interval_s) : json_null(), "server_pid",
        tr->server_pid > 0 ? json_integer(tr->server_pid) : json_null(), "peak_rss_bytes",
        tr->has_rss ? json_integer((json_int_t)tr->rss_max_bytes) : json_null(), "vm_hwm_bytes",
        tr->has_rss ? json_integer((json_int_t)tr->hwm_bytes) : json_null(), "bin_s", jnum(tr->bin_s));
    if (!o || !models || json_object_set_new(o, "models", models)) {
        json_decref(o);
        return NULL;
    }
    for (size_t m = 0; m < tr->n; m++)
        if (json_array_append_new(models, trace_model_json(tr, &tr->models[m]))) {
            json_decref(o);
            return NULL;
        }
    json_t *all = trace_model_json(tr, &tr->all);
    if (!all || json_object_set_new(o, "overall", all)) {
        json_decref(o);
        return NULL;
    }
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
    if (root && json_object_set_new(root, "burstiness", rep->burstiness > 0 ? jnum(rep->burstiness) : json_null()))
        goto out_nomem;
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
    if (rep->n_cmp && compare_json(root, "comparison", rep->cmp, rep->n_cmp, rep->stp))
        goto out_nomem;
    if (rep->n_base_cmp && compare_json(root, "baseline_separate", rep->base_cmp, rep->n_base_cmp, rep->base_stp))
        goto out_nomem;
    if (rep->baseline_config && json_object_set_new(root, "baseline_config", json_string(rep->baseline_config)))
        goto out_nomem;
    if (rep->n_sweep_max) {
        json_t *rows = json_array();
        json_t *sw = json_pack("{s:o,s:o}", "attainment_target_pct", jnum(rep->attainment_target * 100), "models",
                               rows);
        if (!sw || json_object_set_new(root, "sweep", sw))
            goto out_nomem;
        for (size_t i = 0; i < rep->n_sweep_max; i++) {
            const lt_sweep_max *m = &rep->sweep_max[i];
            if (json_array_append_new(rows, json_pack("{s:s,s:o,s:b}", "model", m->model, "max_rate_per_s",
                                                      jnum(m->max_rate), "bounded", m->bounded)))
                goto out_nomem;
        }
    }
    if (rep->n_cost) {
        json_t *rows = json_array();
        json_t *cost = json_pack("{s:o,s:I,s:o}", "device_hourly_cost_usd", jnum(rep->hourly_cost_usd),
                                 "device_count", (json_int_t)rep->device_count, "setups", rows);
        if (!cost || json_object_set_new(root, "cost", cost))
            goto out_nomem;
        for (size_t i = 0; i < rep->n_cost; i++) {
            const lt_cost_row *c = &rep->cost[i];
            json_t *row = json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "setup", c->setup, "devices",
                                    jnum(c->devices), "usd_per_hour", jnum(c->usd_per_hour), "request_throughput",
                                    jnum(c->rps), "output_throughput", jnum(c->tokens_per_s),
                                    "usd_per_million_output_tokens", jnum(c->usd_per_m_tokens),
                                    "usd_per_1000_requests", jnum(c->usd_per_k_requests), "savings_pct",
                                    jnum(c->savings_pct), "worst_p99_latency_impact_pct",
                                    jnum(c->worst_p99_impact_pct), "worst_p99_ttft_impact_pct",
                                    jnum(c->worst_ttft_impact_pct), "worst_p99_tpot_impact_pct",
                                    jnum(c->worst_tpot_impact_pct));
            if (!row || json_array_append_new(rows, row))
                goto out_nomem;
        }
    }
    if (rep->n_spec) {
        json_t *rows = json_array();
        if (!rows || json_object_set_new(root, "speculative", rows))
            goto out_nomem;
        for (size_t i = 0; i < rep->n_spec; i++) {
            const lt_spec_row *sp = &rep->spec[i];
            if (!sp->has)
                continue;
            json_t *row = json_pack("{s:s,s:I,s:I,s:o}", "model", sp->model, "drafted_tokens",
                                    (json_int_t)sp->drafted, "accepted_tokens", (json_int_t)sp->accepted,
                                    "acceptance_rate",
                                    sp->drafted ? jnum((double)sp->accepted / (double)sp->drafted) : json_null());
            if (row && sp->draft[0])
                json_object_set_new(row, "draft", json_string(sp->draft));
            json_t *by = row ? json_object() : NULL;
            for (int k = 0; by && k < LT_SPEC_SOURCES; k++) {
                const lt_spec_counts *c = &sp->src[k];
                if (c->has)
                    json_object_set_new(by, lt_spec_source_names[k],
                                        json_pack("{s:I,s:I,s:o}", "drafted_tokens", (json_int_t)c->drafted,
                                                  "accepted_tokens", (json_int_t)c->accepted, "acceptance_rate",
                                                  c->drafted ? jnum((double)c->accepted / (double)c->drafted)
                                                             : json_null()));
            }
            if (by)
                json_object_set_new(row, "sources", by);
            if (!row || json_array_append_new(rows, row))
                goto out_nomem;
        }
    }
    if (rep->trace) {
        json_t *tr = trace_json(rep->trace);
        if (!tr || json_object_set_new(root, "trace", tr))
            goto out_nomem;
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
            const lt_compare *m = lt_report_compare_for(rep, r);
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

/* ---- per-request JSON Lines ------------------------------------------------------------ */

lt_status lt_report_requests(const char *path, const lt_report *rep, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    lt_status st = LT_OK;
    for (size_t i = 0; i < rep->n_phases && st == LT_OK; i++) {
        const lt_phase *p = &rep->phases[i];
        for (size_t k = 0; k < p->n && st == LT_OK; k++) {
            const lt_result *r = &p->results[k];
            for (size_t j = 0; j < r->n_reqs; j++) {
                const lt_req_rec *q = &r->reqs[j];
                json_t *o = json_pack(
                    "{s:s,s:s,s:o,s:o,s:o,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b,s:o}", "phase", p->name, "model",
                    r->model, "intended_s", jnum(q->intended_s), "sent_s", jnum(q->sent_s), "done_s",
                    jnum(q->done_s), "outcome", lt_outcome_name(q->outcome), "status",
                    q->status ? json_integer(q->status) : json_null(), "e2el_ms", jnum(q->e2e_ms), "ttft_ms",
                    jnum(q->ttft_ms), "tpot_ms", jnum(q->tpot_ms), "itl_mean_ms", jnum(q->itl_mean_ms),
                    "prompt_tokens", q->prompt_tokens >= 0 ? json_integer(q->prompt_tokens) : json_null(),
                    "output_tokens", q->output_tokens >= 0 ? json_integer(q->output_tokens) : json_null(),
                    "in_window", q->in_window, "good", r->has_slo ? json_boolean(q->good) : json_null());
                if (o && json_object_set_new(o, "cold", q->cold < 0 ? json_null() : json_boolean(q->cold)))
                    o = (json_decref(o), NULL);
                char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
                json_decref(o);
                if (!line) {
                    lt_set_err(err, errlen, "out of memory");
                    st = LT_ENOMEM;
                    break;
                }
                fputs(line, f);
                fputc('\n', f);
                free(line);
            }
        }
    }
    if (fclose(f) != 0 && st == LT_OK) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        st = LT_EIO;
    }
    return st;
}
