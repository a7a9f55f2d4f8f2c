/* loadtest/scenario_trace.c: the trace scenario: many models behind one
 * server, each request's model drawn by popularity (or read from a trace),
 * sent at the trace's times; the server's model list polled for residency
 * and its memory sampled. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadtest/cli_impl.h"
#include "loadtest/engine.h"

/* colo-server with the whole --config, on a free port. -1 to go on. */
static int start_server(const cli *c, trace_run *tr)
{
    char err[2048], server[1024], cfg[640], log[640];
    int rc = lt_cli_server_dir(c, server, sizeof server, tr->dir, sizeof tr->dir);
    if (rc >= 0)
        return rc;
    snprintf(cfg, sizeof cfg, "%s/colo.yaml", tr->dir);
    snprintf(log, sizeof log, "%s/colo.log", tr->dir);
    if (!c->quiet)
        fprintf(stderr, "colo-loadtest: starting colo-server with %s\n", c->config);
    if (lt_config_derive(c->config, NULL, cfg, err, sizeof err) != LT_OK ||
        lt_server_start(server, cfg, log, c->startup_timeout_s, &tr->server, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        return EXIT_FAILED;
    }
    return -1;
}

/* The requests: drawn, or read and cut to the measured time. -1 to go on. */
static int build_trace(const cli *c, trace_run *tr)
{
    char err[512];
    uint64_t max = c->requests;
    if (c->trace) {
        if (lt_trace_load(c->trace, c->models, c->n_models, c->trace_speed, c->zipf_s, c->seed, &tr->trace, err,
                          sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
        size_t n = tr->trace.n;
        while (c->duration_set && n > 0 && tr->trace.v[n - 1].at_s >= c->warmup_s + c->duration_s)
            n--;
        if (max && n > max)
            n = (size_t)max;
        tr->trace.n = n;
    } else {
        lt_trace_opts o = {
            .n_models = c->n_models,
            .zipf_s = c->zipf_s,
            .rate_per_s = c->rate,
            .burstiness = c->burstiness > 0 ? c->burstiness : c->poisson ? 1.0 : 0.0,
            .duration_s = c->warmup_s + c->duration_s,
            .max_requests = max,
            .input_len = c->input_len,
            .output_len = c->max_tokens > 0 ? c->max_tokens : c->output_len,
            .spread = c->len_spread,
            .seed = c->seed,
        };
        if (lt_trace_generate(&o, &tr->trace, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (tr->trace.n == 0 || tr->trace.v[tr->trace.n - 1].at_s < c->warmup_s) {
        fprintf(stderr, "colo-loadtest: the trace has no request after the warm-up\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* Model m's requests, in the trace's order, and their intended times. -1 to go on. */
static int model_requests(const cli *c, model_work *w, trace_run *tr, size_t m)
{
    char err[512], path[512];
    size_t n = 0;
    for (size_t i = 0; i < tr->trace.n; i++)
        n += tr->trace.v[i].model == m;
    tr->scheduled[m] = n;
    if (n == 0)
        return -1;
    int *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    tr->schedule_s[m] = malloc(n * sizeof *tr->schedule_s[m]);
    lt_bodies bodies = {0};
    int rc = -1;
    if (!in || !out || !tr->schedule_s[m]) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_FAILED;
        goto out_free;
    }
    for (size_t i = 0, k = 0; i < tr->trace.n; i++) {
        const lt_trace_req *q = &tr->trace.v[i];
        if (q->model != m)
            continue;
        in[k] = q->prompt_tokens;
        out[k] = c->max_tokens > 0 ? c->max_tokens : q->output_tokens;
        tr->schedule_s[m][k++] = q->at_s;
    }
    int ep = lt_cli_openai_endpoint(c);
    if (lt_bodies_sized(in, out, n, c->seed + m, c->stream, &bodies, err, sizeof err) != LT_OK ||
        (ep && lt_bodies_openai(&bodies, c->models[m], ep == 2, err, sizeof err) != LT_OK)) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_FAILED;
        goto out_free;
    }
    lt_cli_request_path(c, m, path, sizeof path);
    lt_requests_free(&w[m].requests);
    if (lt_requests_build(&w[m].target, "POST", path, &bodies, c->api_key, &w[m].requests, err, sizeof err) !=
        LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_FAILED;
    }
out_free:
    lt_bodies_free(&bodies);
    free(in);
    free(out);
    return rc;
}

int lt_trace_run(const cli *c, model_work *w, trace_run *tr, lt_phase *phase)
{
    char err[512];
    int rc = -1;
    if (c->config && (rc = start_server(c, tr)) >= 0)
        return rc;
    for (size_t m = 0; tr->server.pid && m < c->n_models; m++)
        if (lt_target_parse(tr->server.url, &w[m].target, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_FAILED;
        }
    if ((rc = build_trace(c, tr)) >= 0)
        return rc;
    for (size_t m = 0; m < c->n_models; m++)
        if ((rc = model_requests(c, w, tr, m)) >= 0)
            return rc;
    int pid = c->server_pid ? c->server_pid : (int)tr->server.pid;
    if (c->poll_interval_s > 0) {
        tr->mon = lt_monitor_new(&w[0].target, c->api_key, c->models, c->n_models, c->poll_interval_s, pid, err,
                                 sizeof err);
        if (!tr->mon) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_FAILED;
        }
        if (lt_monitor_poll_now(tr->mon, 0, 10, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s: residency unknown, warm and cold not told apart\n", err);
            lt_monitor_free(tr->mon);
            tr->mon = NULL;
        }
    }
    lt_load loads[LT_MAX_MODELS];
    size_t n = 0;
    snprintf(phase->name, sizeof phase->name, "trace");
    phase->results = calloc(c->n_models, sizeof *phase->results);
    if (!phase->results) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        return EXIT_FAILED;
    }
    double span_s = tr->trace.v[tr->trace.n - 1].at_s;
    for (size_t m = 0; m < c->n_models; m++) {
        if (!tr->scheduled[m]) /* the popularity's tail drew nothing */
            continue;
        lt_result_init(&phase->results[n], c->models[m], "trace");
        memset(&loads[n], 0, sizeof loads[n]);
        loads[n].model = c->models[m];
        loads[n].requests = &w[m].requests;
        loads[n].target = &w[m].target;
        loads[n].rate_per_s = span_s > 0 ? (double)tr->scheduled[m] / span_s : 0;
        loads[n].schedule_s = tr->schedule_s[m];
        loads[n].n_schedule = tr->scheduled[m];
        loads[n].seed = c->seed + m;
        loads[n].stream = c->stream;
        n++;
    }
    phase->n = n;
    lt_run_opts o = {
        .warmup_s = c->warmup_s,
        .duration_s = span_s - c->warmup_s + 1e-3, /* every request of the trace is sent */
        .timeout_s = c->timeout_s,
        .max_connections = c->max_connections,
        .progress = !c->quiet && isatty(STDERR_FILENO),
        .phase = "trace",
        .monitor = tr->mon,
    };
    lt_status st = lt_engine_run(&w[0].target, loads, n, &o, phase->results, err, sizeof err);
    if (st != LT_OK)
        fprintf(stderr, "colo-loadtest: %s\n", err);
    for (size_t i = 0; i < n; i++)
        lt_result_finish(&phase->results[i]);
    if (tr->mon && lt_monitor_poll_now(tr->mon, span_s, 10, err, sizeof err) != LT_OK)
        fprintf(stderr, "colo-loadtest: the last poll failed (%s); counters as of the one before\n", err);
    return st == LT_OK ? -1 : EXIT_FAILED;
}

lt_status lt_trace_finish(const cli *c, trace_run *tr, const lt_phase *phase)
{
    lt_trace_report *r = &tr->report;
    r->source = c->trace ? c->trace : "zipf";
    r->zipf_s = c->zipf_s;
    r->rate_per_s = c->rate;
    r->burstiness = c->trace ? 0 : c->burstiness > 0 ? c->burstiness : c->poisson ? 1.0 : 0.0;
    r->speed = c->trace_speed;
    r->seed = c->seed;
    r->span_s = tr->trace.n ? tr->trace.v[tr->trace.n - 1].at_s : 0;
    return lt_trace_summarize(r, phase, c->models, tr->scheduled, c->n_models, tr->mon);
}

void lt_trace_run_fini(trace_run *tr, bool keep_dir)
{
    lt_server_stop(&tr->server);
    if (tr->dir[0]) {
        if (keep_dir) {
            fprintf(stderr, "colo-loadtest: the server's config and log are kept in %s\n", tr->dir);
        } else {
            char path[640];
            snprintf(path, sizeof path, "%s/colo.yaml", tr->dir);
            unlink(path);
            snprintf(path, sizeof path, "%s/colo.log", tr->dir);
            unlink(path);
            rmdir(tr->dir);
        }
    }
    lt_trace_report_fini(&tr->report);
    lt_monitor_free(tr->mon);
    for (size_t m = 0; m < LT_MAX_MODELS; m++)
        free(tr->schedule_s[m]);
    lt_trace_free(&tr->trace);
}
