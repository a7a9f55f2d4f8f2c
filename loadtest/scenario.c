/* loadtest/scenario.c: colo-loadtest's scenarios (single, individual vs
 * concurrent, sweeps, the separate-process baseline), goodput, cost and the
 * outputs, from the options cli.c parsed. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loadtest/cli_impl.h"
#include "loadtest/engine.h"

/* Output files must be writable before minutes of measuring. */
static bool outputs_writable(const cli *c)
{
    const char *paths[] = {c->json, c->csv, c->html, c->requests_out};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        if (!paths[i])
            continue;
        FILE *f = fopen(paths[i], "a");
        if (!f) {
            fprintf(stderr, "colo-loadtest: cannot write %s: %s\n", paths[i], strerror(errno));
            return false;
        }
        fclose(f);
    }
    return true;
}

static bool is_sweep(const cli *c) { return strcmp(c->scenario, "sweep") == 0; }

int lt_cli_openai_endpoint(const cli *c)
{
    if (!c->path)
        return 0;
    if (strcmp(c->path, "/v1/chat/completions") == 0)
        return 2;
    return strcmp(c->path, "/v1/completions") == 0 ? 1 : 0;
}

int lt_cli_server_dir(const cli *c, char *server, size_t server_cap, char *dir, size_t dir_cap)
{
    if (c->server_bin)
        snprintf(server, server_cap, "%s", c->server_bin);
    else if (!lt_server_beside_self(server, server_cap)) {
        fprintf(stderr, "colo-loadtest: no colo-server beside colo-loadtest; set --server PATH\n");
        return EXIT_USAGE;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dir_cap, "%s/colo-loadtest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "colo-loadtest: cannot create a folder for the configs: %s\n", strerror(errno));
        dir[0] = '\0';
        return EXIT_FAILED;
    }
    return -1;
}

void lt_cli_request_path(const cli *c, size_t m, char *out, size_t cap)
{
    if (c->path)
        snprintf(out, cap, "%s", c->path);
    else
        snprintf(out, cap, "/v1/models/%s/infer", c->models[m]);
}

/* A model's bodies: the prompts file, synthetic lengths or the built-in
 * ones for its kind (asked from its server when not given). -1 to go on,
 * else an exit code. */
static int model_bodies(const cli *c, size_t m, const lt_target *t, lt_bodies *bodies)
{
    char err[512];
    lt_body_opts bo = {c->max_tokens, c->stream};
    if (c->prompts) {
        if (lt_bodies_from_file(c->prompts, c->models[m], &bo, bodies, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
        return -1;
    }
    lt_kind kind = c->kinds[m];
    if (kind == LT_KIND_AUTO && c->path)
        kind = LT_KIND_GENERATIVE;
    if (kind == LT_KIND_AUTO) {
        lt_status st = lt_model_probe(t, c->models[m], c->api_key, c->timeout_s < 10 ? c->timeout_s : 10, &kind, err,
                                      sizeof err);
        if (st == LT_EINVAL || st == LT_ERR) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_FAILED;
        }
        if (st != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s; assuming '%s' is generative (set --kind)\n", err, c->models[m]);
            kind = LT_KIND_GENERATIVE;
        }
    }
    lt_status st;
    if (c->input_len && kind == LT_KIND_GENERATIVE) {
        lt_synth_opts so = {
            .input_len = c->input_len,
            .output_len = c->max_tokens > 0 ? c->max_tokens : c->output_len,
            .spread = c->len_spread,
            .count = 1024,
            .seed = c->seed + m,
            .stream = c->stream,
        };
        st = lt_bodies_synthetic(&so, bodies, err, sizeof err);
    } else {
        st = lt_bodies_builtin(kind, &bo, bodies, err, sizeof err);
    }
    if (st != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        return EXIT_USAGE;
    }
    return -1;
}

/* Builds each model's requests for its target; -1 to go on, else an exit code. */
static int prepare(const cli *c, model_work *w)
{
    char err[512];
    for (size_t m = 0; m < c->n_models; m++) {
        lt_bodies bodies = {0};
        lt_requests_free(&w[m].requests);
        if (strcmp(c->method, "GET") != 0) {
            int rc = model_bodies(c, m, &w[m].target, &bodies);
            if (rc >= 0)
                return rc;
            int ep = lt_cli_openai_endpoint(c);
            if (ep && lt_bodies_openai(&bodies, c->models[m], ep == 2, err, sizeof err) != LT_OK) {
                lt_bodies_free(&bodies);
                fprintf(stderr, "colo-loadtest: %s\n", err);
                return EXIT_FAILED;
            }
        }
        char path[512];
        lt_cli_request_path(c, m, path, sizeof path);
        lt_status st = lt_requests_build(&w[m].target, c->method, path, &bodies, c->api_key, &w[m].requests, err,
                                         sizeof err);
        lt_bodies_free(&bodies);
        if (st != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
    }
    return -1;
}

lt_status lt_cli_phase(const cli *c, model_work *w, const size_t *idx, size_t n, unsigned concurrency, double rate,
                       const char *name, lt_phase *p)
{
    char err[256], label[160];
    lt_load loads[LT_MAX_MODELS];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->results = calloc(n, sizeof *p->results);
    if (!p->results)
        return LT_ENOMEM;
    p->n = n;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        lt_result_init(&p->results[i], c->models[idx[i]], name);
        memset(&loads[i], 0, sizeof loads[i]);
        loads[i].model = c->models[idx[i]];
        loads[i].requests = &w[idx[i]].requests;
        loads[i].target = &w[idx[i]].target;
        loads[i].concurrency = concurrency;
        loads[i].rate_per_s = rate;
        if (c->conc_of[idx[i]] || c->rate_of[idx[i]] > 0) { /* the model's own load */
            loads[i].concurrency = c->conc_of[idx[i]];
            loads[i].rate_per_s = c->rate_of[idx[i]];
        }
        loads[i].poisson = c->poisson;
        loads[i].burstiness = c->burstiness;
        loads[i].seed = c->seed + idx[i];
        loads[i].stream = c->stream;
        total += c->requests;
    }
    if (n == 1)
        snprintf(label, sizeof label, "%s %s", name, c->models[idx[0]]);
    else
        snprintf(label, sizeof label, "%s (%zu models)", name, n);
    lt_run_opts o = {
        .warmup_s = c->warmup_s,
        .duration_s = c->duration_s,
        .requests = c->requests,
        .timeout_s = c->timeout_s,
        .max_connections = c->max_connections,
        .progress = !c->quiet && isatty(STDERR_FILENO),
        .phase = label,
        .total_requests = total,
    };
    lt_status st = lt_engine_run(&w[idx[0]].target, loads, n, &o, p->results, err, sizeof err);
    if (st != LT_OK)
        fprintf(stderr, "colo-loadtest: %s\n", err);
    for (size_t i = 0; i < n; i++)
        lt_result_finish(&p->results[i]);
    return st;
}

/* The load of the run in words, for the report. */
static void describe_load(const cli *c, char *out, size_t len)
{
    char arrivals[48] = "";
    if (c->burstiness > 0)
        snprintf(arrivals, sizeof arrivals, " (gamma, burstiness %g)", c->burstiness);
    else if (c->poisson)
        snprintf(arrivals, sizeof arrivals, " (poisson)");
    if (c->concurrency)
        snprintf(out, len, "concurrency %u", c->concurrency);
    else
        snprintf(out, len, "rate %g/s%s", c->rate, arrivals);
    if (c->n_load_args)
        snprintf(out, len, "per-model loads");
    if (is_sweep(c))
        snprintf(out, len, "sweep of %s%s", c->sweep_rate ? "rate" : "concurrency", arrivals);
    if (strcmp(c->scenario, "trace") == 0) {
        if (c->trace)
            snprintf(out, len, "trace %s at %gx", c->trace, c->trace_speed);
        else
            snprintf(out, len, "total rate %g/s%s, zipf %g over %zu models", c->rate, arrivals, c->zipf_s,
                     c->n_models);
    }
    if (c->input_len) {
        size_t o = strlen(out);
        snprintf(out + o, len - o, ", prompts ~%d words, max_tokens %d, spread %g", c->input_len,
                 c->max_tokens > 0 ? c->max_tokens : c->output_len, c->len_spread);
    }
}

/* individual (each model alone) then concurrent phases, names prefixed. */
static lt_status run_ind_conc(const cli *c, model_work *w, const char *prefix, lt_phase *phases, size_t *n_phases)
{
    size_t all[LT_MAX_MODELS];
    char name[64];
    for (size_t m = 0; m < c->n_models; m++)
        all[m] = m;
    lt_status st = LT_OK;
    snprintf(name, sizeof name, "%sindividual", prefix);
    for (size_t m = 0; m < c->n_models && st == LT_OK; m++)
        st = lt_cli_phase(c, w, &all[m], 1, c->concurrency, c->rate, name, &phases[(*n_phases)++]);
    snprintf(name, sizeof name, "%sconcurrent", prefix);
    if (st == LT_OK)
        st = lt_cli_phase(c, w, all, c->n_models, c->concurrency, c->rate, name, &phases[(*n_phases)++]);
    return st;
}

/* Runs the scenario's phases into phases[0..*n_phases). */
static lt_status run_scenario(const cli *c, model_work *w, lt_phase *phases, size_t *n_phases)
{
    size_t all[LT_MAX_MODELS];
    for (size_t m = 0; m < c->n_models; m++)
        all[m] = m;
    lt_status st = LT_OK;
    if (is_sweep(c)) {
        for (size_t i = 0; i < c->n_sweep && st == LT_OK; i++) {
            char name[64];
            if (c->sweep_rate)
                snprintf(name, sizeof name, "rate=%g", c->sweep[i]);
            else
                snprintf(name, sizeof name, "c=%u", (unsigned)c->sweep[i]);
            st = lt_cli_phase(c, w, all, c->n_models, c->sweep_rate ? 0 : (unsigned)c->sweep[i],
                           c->sweep_rate ? c->sweep[i] : 0, name, &phases[(*n_phases)++]);
        }
    } else if (strcmp(c->scenario, "individual-vs-concurrent") == 0) {
        st = run_ind_conc(c, w, "", phases, n_phases);
    } else {
        st = lt_cli_phase(c, w, all, c->n_models, c->concurrency, c->rate, "single", &phases[(*n_phases)++]);
    }
    return st;
}

/* ---- the separate-process baseline ------------------------------------------------ */

/* Removes the baseline's folder and the files colo-loadtest put there. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[1024];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Points every model's target at url. */
static lt_status target_all(const cli *c, model_work *w, const char *url)
{
    char err[256];
    for (size_t m = 0; m < c->n_models; m++)
        if (lt_target_parse(url, &w[m].target, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return LT_ERR;
        }
    return LT_OK;
}

/* One colo-server per model (all running: the baseline is processes that
 * share the device), alone and together; then one colo-server with every
 * model, alone and together. -1 to go on, else an exit code. */
static int run_baseline(const cli *c, model_work *w, lt_phase *phases, size_t *n_phases)
{
    char err[2048], server[1024], dir[512], cfg[640], colo_log[640];
    lt_server servers[LT_MAX_MODELS], colo;
    memset(servers, 0, sizeof servers);
    memset(&colo, 0, sizeof colo);
    int rc = lt_cli_server_dir(c, server, sizeof server, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    snprintf(colo_log, sizeof colo_log, "%s/colo.log", dir);
    size_t started = 0;
    for (size_t m = 0; m < c->n_models && rc < 0; m++) {
        char log[640];
        snprintf(cfg, sizeof cfg, "%s/separate-%zu.yaml", dir, m);
        snprintf(log, sizeof log, "%s/separate-%zu.log", dir, m);
        if (!c->quiet)
            fprintf(stderr, "colo-loadtest: starting colo-server for %s alone\n", c->models[m]);
        if (lt_config_derive(c->config, c->models[m], cfg, err, sizeof err) != LT_OK ||
            lt_server_start(server, cfg, log, c->startup_timeout_s, &servers[m], err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            rc = EXIT_FAILED;
            break;
        }
        started = m + 1;
        if (lt_target_parse(servers[m].url, &w[m].target, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            rc = EXIT_FAILED;
        }
    }
    if (rc < 0)
        rc = prepare(c, w);
    if (rc < 0 && run_ind_conc(c, w, "separate-", phases, n_phases) != LT_OK)
        rc = EXIT_FAILED;
    for (size_t m = 0; m < started; m++)
        lt_server_stop(&servers[m]);
    if (rc < 0) {
        if (!c->quiet)
            fprintf(stderr, "colo-loadtest: starting colo-server with every model\n");
        snprintf(cfg, sizeof cfg, "%s/colo.yaml", dir);
        if (lt_config_derive(c->config, NULL, cfg, err, sizeof err) != LT_OK ||
            lt_server_start(server, cfg, colo_log, c->startup_timeout_s, &colo, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            rc = EXIT_FAILED;
        }
    }
    if (rc < 0 && target_all(c, w, colo.url) != LT_OK)
        rc = EXIT_FAILED;
    if (rc < 0)
        rc = prepare(c, w);
    if (rc < 0 && run_ind_conc(c, w, "", phases, n_phases) != LT_OK)
        rc = EXIT_FAILED;
    lt_server_stop(&colo);
    if (rc >= 0 && access(servers[0].log_path, F_OK) == 0) /* a server ran: its log may say why */
        fprintf(stderr, "colo-loadtest: the servers' configs and logs are kept in %s\n", dir);
    else
        remove_dir(dir);
    return rc;
}

/* ---- verdicts and outputs -------------------------------------------------------- */

/* The goodput SLOs of a model: --goodput, else its SLA's ttft_ms (TTFT) and
 * p99_ms (end-to-end, per request). */
static bool slo_of(const cli *c, const char *model, lt_slo *out)
{
    *out = lt_slo_none();
    if (c->has_goodput) {
        *out = c->goodput;
        return true;
    }
    const lt_sla *s = lt_sla_find(&c->sla, model);
    if (!s)
        s = lt_sla_find(&c->config_sla, model);
    if (!s)
        return false;
    out->ttft_ms = s->ttft_ms;
    out->e2e_ms = s->p99_ms;
    if (!c->stream)
        out->ttft_ms = NAN; /* not measured without streaming: the SLA check reports it skipped */
    return lt_slo_any(out);
}

/* Goodput per result, comparisons, sweep limits and cost; the SLAs against
 * the last phase (rep->has_sla, rep->sla_pass). LT_ENOMEM when out of memory. */
static lt_status judge(const cli *c, lt_report *rep)
{
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++) {
            lt_result *r = &rep->phases[i].results[k];
            lt_slo slo;
            if (slo_of(c, r->model, &slo)) {
                lt_result_goodput(r, &slo);
                rep->has_goodput = true;
            }
        }
    if (strcmp(c->scenario, "individual-vs-concurrent") == 0 && lt_report_compare(rep) != LT_OK)
        return LT_ENOMEM;
    if (is_sweep(c) && c->sweep_rate && lt_report_sweep_max(rep) != LT_OK)
        return LT_ENOMEM;
    if (c->hourly_cost > 0)
        lt_report_cost(rep, c->hourly_cost, c->device_count);
    if (!c->has_sla)
        return LT_OK;
    const lt_phase *judged = &rep->phases[rep->n_phases - 1]; /* concurrent, the only one, or the last step */
    if (lt_sla_evaluate(&c->sla, judged->results, judged->n, c->stream, &rep->checks, &rep->n_checks) != LT_OK)
        return LT_ENOMEM;
    rep->has_sla = true;
    rep->sla_pass = true;
    for (size_t i = 0; i < rep->n_checks; i++)
        if (!rep->checks[i].pass)
            rep->sla_pass = false;
    return LT_OK;
}

/* The table on stdout, failed SLAs and models without a success on
 * stderr, then the requested files. Returns rc, made worse by what failed. */
static int report(const cli *c, const lt_report *rep, int rc)
{
    char err[512];
    if (!c->quiet)
        lt_report_table(stdout, rep);
    fflush(stdout);
    for (size_t i = 0; i < rep->n_checks; i++) {
        const lt_sla_check *k = &rep->checks[i];
        if (!k->pass)
            fprintf(stderr, "colo-loadtest: SLA failed: %s %s measured %.3f, bound %s %g\n", k->model,
                    k->constraint, k->measured, strcmp(k->constraint, "min_rps") ? "<=" : ">=", k->bound);
        else if (k->skipped)
            fprintf(stderr, "colo-loadtest: SLA %s %s not checked: run with --stream\n", k->model, k->constraint);
    }
    for (size_t i = 0; i < rep->n_phases; i++)
        for (size_t k = 0; k < rep->phases[i].n; k++)
            if (rep->phases[i].results[k].ok == 0) {
                const lt_result *r = &rep->phases[i].results[k];
                if (r->late_ok > 0)
                    fprintf(stderr,
                            "colo-loadtest: %s got no successful response in phase %s: %llu answers ended after "
                            "its window, so they take longer than warm-up + duration (raise --duration or lower "
                            "--max-tokens)\n",
                            r->model, rep->phases[i].name, (unsigned long long)r->late_ok);
                else
                    fprintf(stderr, "colo-loadtest: %s got no successful response in phase %s\n", r->model,
                            rep->phases[i].name);
                rc = EXIT_FAILED;
            }
    if (c->json && lt_report_json(c->json, rep, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_USAGE;
    }
    if (c->csv && lt_report_csv(c->csv, rep, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_USAGE;
    }
    if (c->html && lt_report_html(c->html, rep, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_USAGE;
    }
    if (c->requests_out && lt_report_requests(c->requests_out, rep, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_USAGE;
    }
    return rc;
}

int lt_cli_run(cli *c)
{
    model_work *w = NULL;
    lt_phase *phases = NULL;
    size_t n_phases = 0;
    lt_report rep;
    memset(&rep, 0, sizeof rep);
    char err[512], load_desc[192];
    int rc = -1;
    bool trace = strcmp(c->scenario, "trace") == 0;
    trace_run tr;
    memset(&tr, 0, sizeof tr);
    static lt_spec_row spec_before[LT_MAX_MODELS], spec_after[LT_MAX_MODELS], spec_run[LT_MAX_MODELS];
    if (!outputs_writable(c))
        return EXIT_USAGE;
    w = calloc(c->n_models, sizeof *w);
    size_t max_phases = c->n_sweep ? c->n_sweep : 2 * (c->n_models + 1);
    phases = calloc(max_phases, sizeof *phases);
    if (!w || !phases) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_FAILED;
        goto out_free;
    }
    for (size_t m = 0; m < c->n_models; m++)
        if (lt_target_parse(c->url, &w[m].target, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            rc = EXIT_USAGE;
            goto out_free;
        }
    if (c->baseline) {
        rc = run_baseline(c, w, phases, &n_phases);
    } else if (trace) {
        rc = lt_trace_run(c, w, &tr, &phases[0]);
        n_phases = 1;
    } else if (strcmp(c->scenario, "batch") == 0) {
        rc = prepare(c, w);
        if (rc < 0)
            rc = lt_batch_scenario(c, w);
    } else {
        rc = prepare(c, w);
        /* the server's drafting counters before and after (none from a
         * server without them: no rows) */
        if (rc < 0)
            lt_spec_fetch(&w[0].target, c->api_key, c->models, c->n_models, spec_before, err, sizeof err);
        if (rc < 0 && run_scenario(c, w, phases, &n_phases) != LT_OK)
            rc = EXIT_FAILED;
        if (rc < 0 && lt_spec_fetch(&w[0].target, c->api_key, c->models, c->n_models, spec_after, err,
                                    sizeof err) == LT_OK) {
            lt_spec_delta(spec_before, spec_after, c->n_models, spec_run);
            rep.spec = spec_run;
            rep.n_spec = c->n_models;
        }
    }
    if (rc >= 0)
        goto out_free;
    describe_load(c, load_desc, sizeof load_desc);
    rep.url = c->baseline ? "separate servers vs colo" : tr.server.pid ? tr.server.url : c->url;
    rep.baseline_config = c->baseline ? c->config : NULL;
    rep.scenario = c->scenario;
    rep.load_desc = load_desc;
    rep.warmup_s = c->warmup_s;
    rep.duration_s = c->duration_s;
    rep.timeout_s = c->timeout_s;
    rep.requests = c->requests;
    rep.streamed = c->stream;
    rep.burstiness = c->burstiness > 0 ? c->burstiness : c->poisson ? 1.0 : 0.0;
    rep.attainment_target = c->attainment;
    rep.phases = phases;
    rep.n_phases = n_phases;
    if (judge(c, &rep) != LT_OK || (trace && lt_trace_finish(c, &tr, &phases[0]) != LT_OK)) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_FAILED;
        goto out_free;
    }
    if (trace)
        rep.trace = &tr.report;
    rc = report(c, &rep, rep.has_sla && !rep.sla_pass ? EXIT_FAILED : EXIT_OK);
out_free:
    lt_trace_run_fini(&tr, trace && rc != EXIT_OK);
    free(rep.checks);
    lt_report_fini(&rep);
    for (size_t i = 0; phases && i < n_phases; i++) {
        for (size_t k = 0; k < phases[i].n; k++)
            lt_result_fini(&phases[i].results[k]);
        free(phases[i].results);
    }
    free(phases);
    for (size_t m = 0; w && m < c->n_models; m++)
        lt_requests_free(&w[m].requests);
    free(w);
    return rc;
}
