/* loadtest/cli.c: colo-loadtest's options, scenarios and exit codes. */
#include "loadtest/loadtest.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadtest/engine.h"
#include "loadtest/report.h"
#include "loadtest/sla.h"
#include "loadtest/workload.h"

#define LT_MAX_MODELS 32
#define LT_MAX_SWEEP 64

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

typedef struct cli {
    const char *url, *scenario;
    const char *models[LT_MAX_MODELS];
    lt_kind kinds[LT_MAX_MODELS];
    size_t n_models;
    const char *kind_args[LT_MAX_MODELS];
    size_t n_kind_args;
    unsigned concurrency;
    double rate;
    /* per-model loads (--concurrency NAME=N, --rate NAME=R), resolved after the models */
    const char *load_args[2 * LT_MAX_MODELS];
    bool load_is_rate[2 * LT_MAX_MODELS];
    size_t n_load_args;
    unsigned conc_of[LT_MAX_MODELS];
    double rate_of[LT_MAX_MODELS];
    bool poisson;
    unsigned long long seed;
    double duration_s, warmup_s, timeout_s;
    unsigned long long requests;
    unsigned max_connections;
    const char *prompts;
    int max_tokens;
    bool stream;
    lt_sla_set sla;
    const char *sla_config;
    bool has_sla;
    const char *json, *csv, *html;
    double sweep[LT_MAX_SWEEP];
    size_t n_sweep;
    bool sweep_rate;
    const char *path, *method, *api_key;
    bool quiet;
} cli;

static void usage(FILE *out)
{
    fputs("usage: colo-loadtest --url URL --model NAME [--model NAME ...] [options]\n"
          "\n"
          "scenario and load:\n"
          "  --scenario single|individual-vs-concurrent|sweep   (default single)\n"
          "  --concurrency N          closed loop: N connections, each sends when its last request ends (default 1)\n"
          "  --rate R                 open loop: R requests/s per model, latency from the intended send time\n"
          "  --concurrency NAME=N, --rate NAME=R   that model's own load (the others keep the global one)\n"
          "  --poisson                open loop with exponential gaps (seeded) instead of constant ones\n"
          "  --seed S                 seed for Poisson gaps and prompt order (default 1)\n"
          "  --sweep-concurrency LIST sweep: e.g. 1,2,4,8 (one model)\n"
          "  --sweep-rate LIST        sweep: e.g. 1,2,4 requests/s (one model)\n"
          "  --duration SECONDS       measured time per phase (default 10)\n"
          "  --requests N             measured requests per model per phase, instead of --duration\n"
          "  --warmup SECONDS         sent but not measured, before each phase's measurement (default 0)\n"
          "  --timeout SECONDS        per request, from its intended send time (default 60)\n"
          "  --max-connections N      open loop: connections per model at most (default 1024)\n"
          "\n"
          "requests:\n"
          "  --kind NAME=generative|encoder   request template (default: ask GET /v1/models/NAME)\n"
          "  --prompts FILE           JSON lines: {\"prompt\"|\"messages\"|\"inputs\": ...} or {\"body\": {...}},\n"
          "                           optionally with \"model\"; used round-robin from a seeded start\n"
          "  --max-tokens N           max_tokens of generative requests (built-in prompts: 16)\n"
          "  --stream                 ask for SSE; measures time to first token and inter-token latency\n"
          "  --path PATH              request target instead of /v1/models/NAME/infer (NAME is then a label)\n"
          "  --method POST|GET        (default POST; GET sends no body)\n"
          "  --api-key KEY            Authorization: Bearer KEY (default: $COLO_API_KEY when set)\n"
          "\n"
          "SLA (sets the exit code; checked on the concurrent phase, or the only or last one):\n"
          "  --sla 'NAME:p99_ms=X,ttft_ms=Y,min_rps=Z,max_error_rate=E'   (repeatable)\n"
          "  --sla-config FILE        YAML: a colo config (models: [{name, sla: {...}}]) or NAME -> {...}\n"
          "\n"
          "outputs:\n"
          "  --json FILE  --csv FILE  --html FILE   --quiet (no table)   --help\n"
          "\n"
          "exit codes: 0 ok, 1 SLA failed / model unknown or failed / no successful response, 2 usage\n",
          out);
}

static bool parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!s || *s == '-' || *s == '\0')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_pos(const char *s, double *out, bool allow_zero)
{
    char *end;
    errno = 0;
    if (!s || *s == '\0')
        return false;
    double v = strtod(s, &end);
    if (*end != '\0' || errno || !isfinite(v) || v < 0 || (!allow_zero && v == 0))
        return false;
    *out = v;
    return true;
}

static bool parse_list(const char *s, double *v, size_t *n, bool integers)
{
    char buf[1024];
    if (strlen(s) >= sizeof buf)
        return false;
    strcpy(buf, s);
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned long long u;
        if (*n == LT_MAX_SWEEP)
            return false;
        if (integers) {
            if (!parse_uint(t, 100000, &u) || u == 0)
                return false;
            v[(*n)++] = (double)u;
        } else if (!parse_pos(t, &v[(*n)++], false)) {
            return false;
        }
    }
    return *n > 0;
}

static const struct option long_opts[] = {
    {"url", required_argument, 0, 'u'},
    {"scenario", required_argument, 0, 's'},
    {"model", required_argument, 0, 'm'},
    {"kind", required_argument, 0, 'k'},
    {"concurrency", required_argument, 0, 'c'},
    {"rate", required_argument, 0, 'r'},
    {"poisson", no_argument, 0, 'P'},
    {"seed", required_argument, 0, 'S'},
    {"duration", required_argument, 0, 'd'},
    {"requests", required_argument, 0, 'n'},
    {"warmup", required_argument, 0, 'w'},
    {"timeout", required_argument, 0, 't'},
    {"max-connections", required_argument, 0, 'C'},
    {"prompts", required_argument, 0, 'p'},
    {"max-tokens", required_argument, 0, 'T'},
    {"stream", no_argument, 0, 'x'},
    {"sla", required_argument, 0, 'l'},
    {"sla-config", required_argument, 0, 'L'},
    {"json", required_argument, 0, 'J'},
    {"csv", required_argument, 0, 'V'},
    {"html", required_argument, 0, 'H'},
    {"sweep-concurrency", required_argument, 0, 'W'},
    {"sweep-rate", required_argument, 0, 'R'},
    {"path", required_argument, 0, 'a'},
    {"method", required_argument, 0, 'M'},
    {"api-key", required_argument, 0, 'K'},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static bool is_sweep(const cli *c) { return strcmp(c->scenario, "sweep") == 0; }

static void set_defaults(cli *c)
{
    c->scenario = "single";
    c->seed = 1;
    c->duration_s = 10;
    c->timeout_s = 60;
    c->max_connections = 1024;
    c->max_tokens = -1;
    c->method = "POST";
}

/* Names the option ch in a message about its bad value (optarg). */
static int bad_value(int ch)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == ch)
            fprintf(stderr, "colo-loadtest: bad value '%s' for --%s\n", optarg, o->name);
    return EXIT_USAGE;
}

/* One option from getopt_long (ch, optarg). -1 to go on, else an exit code. */
static int parse_option(cli *c, int ch, bool *have_conc)
{
    char err[256];
    unsigned long long u;
    switch (ch) {
    case 'u': c->url = optarg; break;
    case 's': c->scenario = optarg; break;
    case 'm':
        if (c->n_models == LT_MAX_MODELS) {
            fprintf(stderr, "colo-loadtest: at most %d models\n", LT_MAX_MODELS);
            return EXIT_USAGE;
        }
        c->models[c->n_models++] = optarg;
        break;
    case 'k':
        if (c->n_kind_args == LT_MAX_MODELS) {
            fprintf(stderr, "colo-loadtest: too many --kind\n");
            return EXIT_USAGE;
        }
        c->kind_args[c->n_kind_args++] = optarg;
        break;
    case 'c':
    case 'r':
        if (strchr(optarg, '=')) { /* a model's own load: resolved once the models are known */
            if (c->n_load_args == 2 * LT_MAX_MODELS) {
                fprintf(stderr, "colo-loadtest: too many per-model loads\n");
                return EXIT_USAGE;
            }
            c->load_is_rate[c->n_load_args] = ch == 'r';
            c->load_args[c->n_load_args++] = optarg;
            break;
        }
        if (ch == 'r') {
            if (!parse_pos(optarg, &c->rate, false))
                return bad_value(ch);
            break;
        }
        if (!parse_uint(optarg, 100000, &u) || u == 0)
            return bad_value(ch);
        c->concurrency = (unsigned)u;
        *have_conc = true;
        break;
    case 'P': c->poisson = true; break;
    case 'S':
        if (!parse_uint(optarg, UINT64_MAX, &c->seed))
            return bad_value(ch);
        break;
    case 'd':
        if (!parse_pos(optarg, &c->duration_s, false))
            return bad_value(ch);
        break;
    case 'n':
        if (!parse_uint(optarg, 1000000000ull, &c->requests) || c->requests == 0)
            return bad_value(ch);
        break;
    case 'w':
        if (!parse_pos(optarg, &c->warmup_s, true))
            return bad_value(ch);
        break;
    case 't':
        if (!parse_pos(optarg, &c->timeout_s, false))
            return bad_value(ch);
        break;
    case 'C':
        if (!parse_uint(optarg, 1000000, &u) || u == 0)
            return bad_value(ch);
        c->max_connections = (unsigned)u;
        break;
    case 'p': c->prompts = optarg; break;
    case 'T':
        if (!parse_uint(optarg, 1000000, &u))
            return bad_value(ch);
        c->max_tokens = (int)u;
        break;
    case 'x': c->stream = true; break;
    case 'l':
        if (lt_sla_parse_arg(optarg, &c->sla, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
        c->has_sla = true;
        break;
    case 'L': c->sla_config = optarg; c->has_sla = true; break;
    case 'J': c->json = optarg; break;
    case 'V': c->csv = optarg; break;
    case 'H': c->html = optarg; break;
    case 'W':
    case 'R':
        if (!parse_list(optarg, c->sweep, &c->n_sweep, ch == 'W'))
            return bad_value(ch);
        c->sweep_rate = ch == 'R';
        break;
    case 'a':
        if (optarg[0] != '/')
            return bad_value(ch);
        c->path = optarg;
        break;
    case 'M':
        if (strcmp(optarg, "POST") != 0 && strcmp(optarg, "GET") != 0)
            return bad_value(ch);
        c->method = optarg;
        break;
    case 'K': c->api_key = optarg; break;
    case 'q': c->quiet = true; break;
    case 'h': usage(stdout); return EXIT_OK;
    default: /* getopt printed why */
        fprintf(stderr, "colo-loadtest: see --help\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* The options' combinations (after getopt). -1 when they make sense, else
 * EXIT_USAGE with a message. */
static int check_options(cli *c, int argc, char **argv, bool have_conc)
{
    if (optind < argc) {
        fprintf(stderr, "colo-loadtest: unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!c->url || c->n_models == 0) {
        fprintf(stderr, "colo-loadtest: --url and at least one --model are required (see --help)\n");
        return EXIT_USAGE;
    }
    if (have_conc && c->rate > 0) {
        fprintf(stderr, "colo-loadtest: --concurrency and --rate exclude each other\n");
        return EXIT_USAGE;
    }
    if (c->poisson && !(c->rate > 0) && !(c->n_sweep && c->sweep_rate)) {
        fprintf(stderr, "colo-loadtest: --poisson needs --rate or --sweep-rate\n");
        return EXIT_USAGE;
    }
    bool sweep = is_sweep(c);
    if (!sweep && strcmp(c->scenario, "single") != 0 && strcmp(c->scenario, "individual-vs-concurrent") != 0) {
        fprintf(stderr, "colo-loadtest: unknown scenario '%s' (single, individual-vs-concurrent, sweep)\n",
                c->scenario);
        return EXIT_USAGE;
    }
    if (sweep != (c->n_sweep > 0) || (sweep && c->n_models != 1)) {
        fprintf(stderr, "colo-loadtest: --scenario sweep takes one --model and --sweep-concurrency or "
                        "--sweep-rate (and they need it)\n");
        return EXIT_USAGE;
    }
    if (sweep && (have_conc || c->rate > 0)) {
        fprintf(stderr, "colo-loadtest: a sweep sets the load; drop --concurrency/--rate\n");
        return EXIT_USAGE;
    }
    if (!have_conc && !(c->rate > 0))
        c->concurrency = 1;
    return -1;
}

/* --kind NAME=generative|encoder: the kind of each named model. */
static int resolve_kinds(cli *c)
{
    for (size_t i = 0; i < c->n_kind_args; i++) {
        const char *a = c->kind_args[i], *eq = strchr(a, '=');
        lt_kind kind = LT_KIND_AUTO;
        if (eq && strcmp(eq + 1, "encoder") == 0)
            kind = LT_KIND_ENCODER;
        else if (eq && strcmp(eq + 1, "generative") == 0)
            kind = LT_KIND_GENERATIVE;
        bool found = false;
        for (size_t m = 0; eq && m < c->n_models; m++) {
            if (strlen(c->models[m]) == (size_t)(eq - a) && memcmp(c->models[m], a, (size_t)(eq - a)) == 0) {
                c->kinds[m] = kind;
                found = true;
            }
        }
        if (kind == LT_KIND_AUTO || !found) {
            fprintf(stderr, "colo-loadtest: --kind '%s': expected NAME=generative|encoder for a --model NAME\n", a);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* --concurrency/--rate NAME=VALUE: a model's own load. */
static int resolve_loads(cli *c)
{
    bool sweep = is_sweep(c);
    for (size_t i = 0; i < c->n_load_args; i++) {
        const char *a = c->load_args[i], *eq = strchr(a, '=');
        const char *flag = c->load_is_rate[i] ? "--rate" : "--concurrency";
        size_t m = 0;
        while (m < c->n_models &&
               !(strlen(c->models[m]) == (size_t)(eq - a) && memcmp(c->models[m], a, (size_t)(eq - a)) == 0))
            m++;
        unsigned long long v = 0;
        double r = 0;
        bool ok = m < c->n_models && !sweep;
        if (ok && c->load_is_rate[i]) {
            ok = parse_pos(eq + 1, &r, false);
            c->rate_of[m] = r;
            c->conc_of[m] = 0;
        } else if (ok) {
            ok = parse_uint(eq + 1, 100000, &v) && v > 0;
            c->conc_of[m] = (unsigned)v;
            c->rate_of[m] = 0;
        }
        if (!ok) {
            fprintf(stderr, "colo-loadtest: %s '%s': expected NAME=%s for a --model NAME (not in a sweep)\n", flag,
                    a, c->load_is_rate[i] ? "REQUESTS_PER_S" : "CONNECTIONS");
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* --sla must name models; --sla-config adds its constraints. */
static int resolve_slas(cli *c)
{
    char err[256];
    for (size_t i = 0; i < c->sla.n; i++) {
        bool found = false;
        for (size_t m = 0; m < c->n_models; m++)
            found = found || strcmp(c->sla.v[i].model, c->models[m]) == 0;
        if (!found) {
            fprintf(stderr, "colo-loadtest: --sla names '%s', which is not a --model\n", c->sla.v[i].model);
            return EXIT_USAGE;
        }
    }
    if (c->sla_config && lt_sla_load_file(c->sla_config, &c->sla, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        return EXIT_USAGE;
    }
    return -1;
}

/* Returns -1 to go on, else an exit code. */
static int parse_args(cli *c, int argc, char **argv)
{
    bool have_conc = false;
    set_defaults(c);
    optind = 0; /* GNU: full reset, so loadtest_main can run again */
    opterr = 1;
    int ch, rc;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1)
        if ((rc = parse_option(c, ch, &have_conc)) >= 0)
            return rc;
    if ((rc = check_options(c, argc, argv, have_conc)) >= 0 || (rc = resolve_kinds(c)) >= 0 ||
        (rc = resolve_loads(c)) >= 0 || (rc = resolve_slas(c)) >= 0)
        return rc;
    if (!c->api_key)
        c->api_key = getenv("COLO_API_KEY");
    return -1;
}

/* Output files must be writable before minutes of measuring. */
static bool outputs_writable(const cli *c)
{
    const char *paths[] = {c->json, c->csv, c->html};
    for (size_t i = 0; i < 3; i++) {
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

typedef struct model_work {
    lt_requests requests;
} model_work;

/* Builds each model's requests; -1 to go on, else an exit code. */
static int prepare(const cli *c, const lt_target *t, model_work *w)
{
    char err[512];
    lt_body_opts bo = {c->max_tokens, c->stream};
    for (size_t m = 0; m < c->n_models; m++) {
        lt_bodies bodies = {0};
        bool get = strcmp(c->method, "GET") == 0;
        if (!get && c->prompts) {
            if (lt_bodies_from_file(c->prompts, c->models[m], &bo, &bodies, err, sizeof err) != LT_OK) {
                fprintf(stderr, "colo-loadtest: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (!get) {
            lt_kind kind = c->kinds[m];
            if (kind == LT_KIND_AUTO && c->path)
                kind = LT_KIND_GENERATIVE;
            if (kind == LT_KIND_AUTO) {
                lt_status st = lt_model_probe(t, c->models[m], c->api_key, c->timeout_s < 10 ? c->timeout_s : 10,
                                                &kind, err, sizeof err);
                if (st == LT_EINVAL || st == LT_ERR) {
                    fprintf(stderr, "colo-loadtest: %s\n", err);
                    return EXIT_FAILED;
                }
                if (st != LT_OK) {
                    fprintf(stderr, "colo-loadtest: %s; assuming '%s' is generative (set --kind)\n", err,
                            c->models[m]);
                    kind = LT_KIND_GENERATIVE;
                }
            }
            if (lt_bodies_builtin(kind, &bo, &bodies, err, sizeof err) != LT_OK) {
                fprintf(stderr, "colo-loadtest: %s\n", err);
                return EXIT_USAGE;
            }
        }
        char path[512];
        if (c->path)
            snprintf(path, sizeof path, "%s", c->path);
        else
            snprintf(path, sizeof path, "/v1/models/%s/infer", c->models[m]);
        lt_status st = lt_requests_build(t, c->method, path, &bodies, c->api_key, &w[m].requests, err, sizeof err);
        lt_bodies_free(&bodies);
        if (st != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* Runs one phase over models[idx[0..n)]; fills p. */
static lt_status run_phase(const cli *c, const lt_target *t, model_work *w, const size_t *idx, size_t n,
                           unsigned concurrency, double rate, const char *name, lt_phase *p)
{
    char err[256];
    lt_load loads[LT_MAX_MODELS];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->results = calloc(n, sizeof *p->results);
    if (!p->results)
        return LT_ENOMEM;
    p->n = n;
    for (size_t i = 0; i < n; i++) {
        lt_result_init(&p->results[i], c->models[idx[i]], name);
        memset(&loads[i], 0, sizeof loads[i]);
        loads[i].model = c->models[idx[i]];
        loads[i].requests = &w[idx[i]].requests;
        loads[i].concurrency = concurrency;
        loads[i].rate_per_s = rate;
        if (c->conc_of[idx[i]] || c->rate_of[idx[i]] > 0) { /* the model's own load */
            loads[i].concurrency = c->conc_of[idx[i]];
            loads[i].rate_per_s = c->rate_of[idx[i]];
        }
        loads[i].poisson = c->poisson;
        loads[i].seed = c->seed + idx[i];
        loads[i].stream = c->stream;
    }
    lt_run_opts o = {
        .warmup_s = c->warmup_s,
        .duration_s = c->duration_s,
        .requests = c->requests,
        .timeout_s = c->timeout_s,
        .max_connections = c->max_connections,
        .progress = !c->quiet && isatty(STDERR_FILENO),
        .phase = name,
    };
    lt_status st = lt_engine_run(t, loads, n, &o, p->results, err, sizeof err);
    if (st != LT_OK)
        fprintf(stderr, "colo-loadtest: %s\n", err);
    for (size_t i = 0; i < n; i++)
        lt_result_finish(&p->results[i]);
    return st;
}

/* The load of the run in words, for the report. */
static void describe_load(const cli *c, char *out, size_t len)
{
    if (c->concurrency)
        snprintf(out, len, "concurrency %u", c->concurrency);
    else
        snprintf(out, len, "rate %g/s%s", c->rate, c->poisson ? " (poisson)" : "");
    if (c->n_load_args)
        snprintf(out, len, "per-model loads");
    if (is_sweep(c))
        snprintf(out, len, "sweep of %s%s", c->sweep_rate ? "rate" : "concurrency", c->poisson ? " (poisson)" : "");
}

/* Runs the scenario's phases into phases[0..*n_phases). */
static lt_status run_scenario(const cli *c, const lt_target *t, model_work *w, lt_phase *phases, size_t *n_phases)
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
            st = run_phase(c, t, w, all, 1, c->sweep_rate ? 0 : (unsigned)c->sweep[i],
                           c->sweep_rate ? c->sweep[i] : 0, name, &phases[(*n_phases)++]);
        }
    } else if (strcmp(c->scenario, "individual-vs-concurrent") == 0) {
        for (size_t m = 0; m < c->n_models && st == LT_OK; m++)
            st = run_phase(c, t, w, &all[m], 1, c->concurrency, c->rate, "individual", &phases[(*n_phases)++]);
        if (st == LT_OK)
            st = run_phase(c, t, w, all, c->n_models, c->concurrency, c->rate, "concurrent",
                           &phases[(*n_phases)++]);
    } else {
        st = run_phase(c, t, w, all, c->n_models, c->concurrency, c->rate, "single", &phases[(*n_phases)++]);
    }
    return st;
}

/* Compares phases (individual-vs-concurrent) and checks the SLAs against
 * the last phase (rep->has_sla, rep->sla_pass). LT_ENOMEM when out of memory. */
static lt_status judge(const cli *c, lt_report *rep)
{
    if (strcmp(c->scenario, "individual-vs-concurrent") == 0 && lt_report_compare(rep) != LT_OK)
        return LT_ENOMEM;
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
                fprintf(stderr, "colo-loadtest: %s got no successful response in phase %s\n",
                        rep->phases[i].results[k].model, rep->phases[i].name);
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
    return rc;
}

int loadtest_main(int argc, char **argv)
{
    cli c;
    memset(&c, 0, sizeof c);
    int rc = parse_args(&c, argc, argv);
    lt_target t;
    model_work *w = NULL;
    lt_phase *phases = NULL;
    size_t n_phases = 0;
    lt_report rep;
    memset(&rep, 0, sizeof rep);
    char err[512];
    if (rc >= 0)
        goto out_free_sla;
    if (lt_target_parse(c.url, &t, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        rc = EXIT_USAGE;
        goto out_free_sla;
    }
    if (!outputs_writable(&c)) {
        rc = EXIT_USAGE;
        goto out_free_sla;
    }
    w = calloc(c.n_models, sizeof *w);
    size_t max_phases = c.n_sweep ? c.n_sweep : c.n_models + 1;
    phases = calloc(max_phases, sizeof *phases);
    if (!w || !phases) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_USAGE;
        goto out_free;
    }
    rc = prepare(&c, &t, w);
    if (rc >= 0)
        goto out_free;
    if (run_scenario(&c, &t, w, phases, &n_phases) != LT_OK) {
        rc = EXIT_FAILED;
        goto out_free;
    }
    char load_desc[128];
    describe_load(&c, load_desc, sizeof load_desc);
    rep.url = c.url;
    rep.scenario = c.scenario;
    rep.load_desc = load_desc;
    rep.warmup_s = c.warmup_s;
    rep.duration_s = c.duration_s;
    rep.timeout_s = c.timeout_s;
    rep.requests = c.requests;
    rep.streamed = c.stream;
    rep.phases = phases;
    rep.n_phases = n_phases;
    if (judge(&c, &rep) != LT_OK) {
        fprintf(stderr, "colo-loadtest: out of memory\n");
        rc = EXIT_FAILED;
        goto out_free;
    }
    rc = report(&c, &rep, rep.has_sla && !rep.sla_pass ? EXIT_FAILED : EXIT_OK);
out_free:
    free(rep.checks);
    lt_report_fini(&rep);
    for (size_t i = 0; phases && i < n_phases; i++) {
        for (size_t k = 0; k < phases[i].n; k++)
            lt_result_fini(&phases[i].results[k]);
        free(phases[i].results);
    }
    free(phases);
    for (size_t m = 0; w && m < c.n_models; m++)
        lt_requests_free(&w[m].requests);
    free(w);
out_free_sla:
    lt_sla_set_free(&c.sla);
    return rc;
}
