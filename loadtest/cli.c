/* loadtest/cli.c: colo-loadtest's options and their checks; scenario.c runs them. */
#include "loadtest/loadtest.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadtest/cli_impl.h"

static void usage(FILE *out)
{
    fputs("usage: colo-loadtest --url URL --model NAME [--model NAME ...] [options]\n"
          "       colo-loadtest --baseline separate --config FILE [--model NAME ...] [options]\n"
          "\n"
          "scenario and load:\n"
          "  --scenario single|individual-vs-concurrent|sweep|trace|batch   (default single)\n"
          "  --concurrency N          closed loop: N connections, each sends when its last request ends (default 1)\n"
          "  --rate R                 open loop: R requests/s per model, latency from the intended send time\n"
          "  --concurrency NAME=N, --rate NAME=R   that model's own load (the others keep the global one)\n"
          "  --poisson                open loop with exponential gaps (seeded) instead of constant ones\n"
          "  --burstiness B           open loop with gamma gaps of shape B (1 = Poisson, < 1 burstier), as vllm\n"
          "                           bench serve's --burstiness\n"
          "  --seed S                 seed of the arrival gaps, the prompt order and synthetic prompts (default 1)\n"
          "  --sweep-concurrency LIST sweep: e.g. 1,2,4,8 (every --model at each step, together)\n"
          "  --sweep-rate LIST        sweep: e.g. 1,2,4 requests/s per model; with SLOs, reports the highest rate\n"
          "                           meeting --attainment, per model\n"
          "  --duration SECONDS       measured time per phase (default 10)\n"
          "  --requests N             measured requests per model per phase, instead of --duration\n"
          "  --warmup SECONDS         sent but not measured, before each phase's measurement (default 0)\n"
          "  --timeout SECONDS        per request, from its intended send time (default 60)\n"
          "  --max-connections N      open loop: connections per model at most (default 1024)\n"
          "\n"
          "trace scenario (many models, one stream; --rate R is the total rate, split by popularity):\n"
          "  --zipf S                 model k of the --model list has popularity 1/(k+1)^S (default 1; 0 uniform)\n"
          "  --trace FILE             replay a JSON-lines trace (timestamp, model, prompt_tokens, output_tokens;\n"
          "                           also Azure's TIMESTAMP/ContextTokens/GeneratedTokens and BurstGPT's columns)\n"
          "  --trace-speed F          replay F times as fast (default 1)\n"
          "  --config FILE            start colo-server with FILE (models: the config's) and sample its memory\n"
          "  --server-pid PID         a local server's process: its peak RSS from /proc/PID/status\n"
          "  --poll-interval SECONDS  how often GET /v1/models is read for residency (default 0.1; 0: never)\n"
          "\n"
          "batch scenario (rounds of: the load alone, the load beside an OpenAI batch, the batch alone):\n"
          "  --batch-lines N          lines of each round's batch (POST /v1/files, /v1/batches; default 2000)\n"
          "  --batch-max-tokens N     their max_tokens (default 16)\n"
          "  --batch-model NAME       the batch's model (default the first --model)\n"
          "  --rounds N               rounds, reported each and as medians (default 3)\n"
          "  --metrics-key KEY        the operator's key for GET /metrics (the model's step time; default --api-key)\n"
          "\n"
          "requests:\n"
          "  --kind NAME=generative|encoder   request template (default: ask GET /v1/models/NAME)\n"
          "  --prompts FILE           JSON lines: {\"prompt\"|\"messages\"|\"inputs\": ...} or {\"body\": {...}},\n"
          "                           optionally with \"model\"; used round-robin from a seeded start\n"
          "  --max-tokens N           max_tokens of generative requests (built-in prompts: 16)\n"
          "  --input-len N            synthetic prompts of about N tokens (common words), instead of the built-in ones\n"
          "  --output-len N           their max_tokens (default 16)\n"
          "  --len-spread R           both lengths uniform in [len*(1-R), len*(1+R)], 0 <= R < 1 (default 0)\n"
          "  --stream                 ask for SSE; measures TTFT, TPOT (time per output token) and inter-token latency\n"
          "  --path PATH              request target instead of /v1/models/NAME/infer (NAME is then a label)\n"
          "  --method POST|GET        (default POST; GET sends no body)\n"
          "  --api-key KEY            Authorization: Bearer KEY (default: $COLO_API_KEY when set)\n"
          "\n"
          "SLA (sets the exit code; checked on the concurrent phase, or the only or last one):\n"
          "  --sla 'NAME:p99_ms=X,ttft_ms=Y,min_rps=Z,max_error_rate=E'   (repeatable)\n"
          "  --sla-config FILE        YAML: a colo config (models: [{name, sla: {...}}]) or NAME -> {...}\n"
          "\n"
          "goodput (requests meeting every per-request SLO; default: each model's sla ttft_ms and p99_ms):\n"
          "  --goodput 'ttft:MS tpot:MS e2e:MS'   any subset; also as separate words after --goodput\n"
          "  --attainment PCT         sweep: the share of requests that must meet the SLOs (default 90)\n"
          "\n"
          "separate-process baseline (one command: separate servers, then colo, side by side):\n"
          "  --baseline separate      with --config FILE: one colo-server per model of FILE (same device and\n"
          "                           fractions), alone and together, then one colo-server with every model\n"
          "  --config FILE            the colo config; --model picks some of its models (default all)\n"
          "  --server PATH            colo-server to start (default: beside colo-loadtest)\n"
          "  --startup-timeout S      seconds a server may take to become ready (default 300)\n"
          "\n"
          "cost:\n"
          "  --device-hourly-cost USD price of one device-hour: cost per million output tokens and per 1,000\n"
          "                           requests, one device per model against shared (individual-vs-concurrent)\n"
          "  --device-count N         devices per deployment (default 1)\n"
          "\n"
          "outputs:\n"
          "  --json FILE  --csv FILE  --html FILE   --quiet (no table, no progress line)   --help\n"
          "  --requests-out FILE      one JSON line per recorded request (times, TTFT, TPOT, tokens, outcome)\n"
          "\n"
          "exit codes: 0 ok, 1 SLA failed / model unknown or failed / no successful response / a baseline\n"
          "server did not start, 2 usage\n",
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

enum {
    OPT_BURSTINESS = 256,
    OPT_INPUT_LEN,
    OPT_OUTPUT_LEN,
    OPT_LEN_SPREAD,
    OPT_GOODPUT,
    OPT_ATTAINMENT,
    OPT_REQUESTS_OUT,
    OPT_BASELINE,
    OPT_CONFIG,
    OPT_SERVER,
    OPT_STARTUP_TIMEOUT,
    OPT_HOURLY_COST,
    OPT_DEVICE_COUNT,
    OPT_ZIPF,
    OPT_TRACE,
    OPT_TRACE_SPEED,
    OPT_SERVER_PID,
    OPT_POLL_INTERVAL,
    OPT_BATCH_LINES,
    OPT_BATCH_MAX_TOKENS,
    OPT_BATCH_MODEL,
    OPT_ROUNDS,
    OPT_METRICS_KEY,
};

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
    {"burstiness", required_argument, 0, OPT_BURSTINESS},
    {"input-len", required_argument, 0, OPT_INPUT_LEN},
    {"output-len", required_argument, 0, OPT_OUTPUT_LEN},
    {"len-spread", required_argument, 0, OPT_LEN_SPREAD},
    {"goodput", required_argument, 0, OPT_GOODPUT},
    {"attainment", required_argument, 0, OPT_ATTAINMENT},
    {"requests-out", required_argument, 0, OPT_REQUESTS_OUT},
    {"baseline", required_argument, 0, OPT_BASELINE},
    {"config", required_argument, 0, OPT_CONFIG},
    {"server", required_argument, 0, OPT_SERVER},
    {"startup-timeout", required_argument, 0, OPT_STARTUP_TIMEOUT},
    {"device-hourly-cost", required_argument, 0, OPT_HOURLY_COST},
    {"device-count", required_argument, 0, OPT_DEVICE_COUNT},
    {"zipf", required_argument, 0, OPT_ZIPF},
    {"trace", required_argument, 0, OPT_TRACE},
    {"trace-speed", required_argument, 0, OPT_TRACE_SPEED},
    {"server-pid", required_argument, 0, OPT_SERVER_PID},
    {"poll-interval", required_argument, 0, OPT_POLL_INTERVAL},
    {"batch-lines", required_argument, 0, OPT_BATCH_LINES},
    {"batch-max-tokens", required_argument, 0, OPT_BATCH_MAX_TOKENS},
    {"batch-model", required_argument, 0, OPT_BATCH_MODEL},
    {"rounds", required_argument, 0, OPT_ROUNDS},
    {"metrics-key", required_argument, 0, OPT_METRICS_KEY},
    {0, 0, 0, 0},
};

static bool is_sweep(const cli *c) { return strcmp(c->scenario, "sweep") == 0; }
static bool is_trace(const cli *c) { return strcmp(c->scenario, "trace") == 0; }

static void set_defaults(cli *c)
{
    c->scenario = "single";
    c->seed = 1;
    c->duration_s = 10;
    c->timeout_s = 60;
    c->max_connections = 1024;
    c->max_tokens = -1;
    c->method = "POST";
    c->goodput = lt_slo_none();
    c->attainment = 0.9;
    c->output_len = 16;
    c->startup_timeout_s = 300;
    c->device_count = 1;
    c->zipf_s = 1.0;
    c->trace_speed = 1.0;
    c->poll_interval_s = 0.1;
    c->batch_lines = 2000;
    c->batch_max_tokens = 16;
    c->rounds = 3;
}

/* Names the option ch in a message about its bad value (optarg). */
static int bad_value(int ch)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == ch)
            fprintf(stderr, "colo-loadtest: bad value '%s' for --%s\n", optarg, o->name);
    return EXIT_USAGE;
}

/* The options that set one field of cli by their value's type. */
typedef enum opt_kind {
    O_STR,  /* const char *: the argument */
    O_FLAG, /* bool: true */
    O_POS,  /* double > 0 */
    O_POS0, /* double >= 0 */
    O_UINT, /* unsigned in [1, max] */
    O_INT,  /* int in [1, max] */
    O_INT0, /* int in [0, max] */
} opt_kind;

typedef struct opt_field {
    int ch;
    opt_kind kind;
    size_t off;
    unsigned long long max;
} opt_field;

static const opt_field opt_fields[] = {
    {'u', O_STR, offsetof(cli, url), 0},
    {'s', O_STR, offsetof(cli, scenario), 0},
    {'p', O_STR, offsetof(cli, prompts), 0},
    {'J', O_STR, offsetof(cli, json), 0},
    {'V', O_STR, offsetof(cli, csv), 0},
    {'H', O_STR, offsetof(cli, html), 0},
    {'K', O_STR, offsetof(cli, api_key), 0},
    {OPT_REQUESTS_OUT, O_STR, offsetof(cli, requests_out), 0},
    {OPT_CONFIG, O_STR, offsetof(cli, config), 0},
    {OPT_SERVER, O_STR, offsetof(cli, server_bin), 0},
    {OPT_TRACE, O_STR, offsetof(cli, trace), 0},
    {OPT_BATCH_MODEL, O_STR, offsetof(cli, batch_model), 0},
    {OPT_METRICS_KEY, O_STR, offsetof(cli, metrics_key), 0},
    {'P', O_FLAG, offsetof(cli, poisson), 0},
    {'x', O_FLAG, offsetof(cli, stream), 0},
    {'q', O_FLAG, offsetof(cli, quiet), 0},
    {'w', O_POS0, offsetof(cli, warmup_s), 0},
    {'t', O_POS, offsetof(cli, timeout_s), 0},
    {OPT_BURSTINESS, O_POS, offsetof(cli, burstiness), 0},
    {OPT_STARTUP_TIMEOUT, O_POS, offsetof(cli, startup_timeout_s), 0},
    {OPT_HOURLY_COST, O_POS, offsetof(cli, hourly_cost), 0},
    {OPT_ZIPF, O_POS0, offsetof(cli, zipf_s), 0},
    {OPT_TRACE_SPEED, O_POS, offsetof(cli, trace_speed), 0},
    {OPT_POLL_INTERVAL, O_POS0, offsetof(cli, poll_interval_s), 0},
    {'C', O_UINT, offsetof(cli, max_connections), 1000000},
    {OPT_DEVICE_COUNT, O_UINT, offsetof(cli, device_count), 100000},
    {'T', O_INT0, offsetof(cli, max_tokens), 1000000},
    {OPT_INPUT_LEN, O_INT, offsetof(cli, input_len), 1000000},
    {OPT_OUTPUT_LEN, O_INT, offsetof(cli, output_len), 1000000},
    {OPT_SERVER_PID, O_INT, offsetof(cli, server_pid), 4194304},
    {OPT_BATCH_LINES, O_INT, offsetof(cli, batch_lines), 50000},
    {OPT_BATCH_MAX_TOKENS, O_INT, offsetof(cli, batch_max_tokens), 1000000},
    {OPT_ROUNDS, O_INT, offsetof(cli, rounds), 64},
};

/* Sets the field of an option of opt_fields: -1 to go on, else an exit
 * code; 0 (no exit) when ch is not one of them. */
static int set_field(cli *c, int ch, bool *found)
{
    const opt_field *o = NULL;
    for (size_t i = 0; i < sizeof opt_fields / sizeof *opt_fields && !o; i++)
        if (opt_fields[i].ch == ch)
            o = &opt_fields[i];
    *found = o != NULL;
    if (!o)
        return -1;
    char *m = (char *)c + o->off;
    unsigned long long u;
    switch (o->kind) {
    case O_STR: *(const char **)(void *)m = optarg; return -1;
    case O_FLAG: *(bool *)(void *)m = true; return -1;
    case O_POS:
    case O_POS0: return parse_pos(optarg, (double *)(void *)m, o->kind == O_POS0) ? -1 : bad_value(ch);
    case O_UINT:
    case O_INT:
    case O_INT0:
        if (!parse_uint(optarg, o->max, &u) || (u == 0 && o->kind != O_INT0))
            return bad_value(ch);
        if (o->kind == O_UINT)
            *(unsigned *)(void *)m = (unsigned)u;
        else
            *(int *)(void *)m = (int)u;
        return -1;
    }
    return -1;
}

/* --concurrency and --rate: a number, or a model's own (NAME=N). */
static int parse_load(cli *c, int ch, bool *have_conc)
{
    unsigned long long u;
    if (strchr(optarg, '=')) { /* a model's own load: resolved once the models are known */
        if (c->n_load_args == 2 * LT_MAX_MODELS) {
            fprintf(stderr, "colo-loadtest: too many per-model loads\n");
            return EXIT_USAGE;
        }
        c->load_is_rate[c->n_load_args] = ch == 'r';
        c->load_args[c->n_load_args++] = optarg;
        return -1;
    }
    if (ch == 'r')
        return parse_pos(optarg, &c->rate, false) ? -1 : bad_value(ch);
    if (!parse_uint(optarg, 100000, &u) || u == 0)
        return bad_value(ch);
    c->concurrency = (unsigned)u;
    *have_conc = true;
    return -1;
}

/* --goodput 'ttft:300 tpot:50' as one word, or several words (the rest
 * come as operands). */
static int parse_goodput(cli *c)
{
    char buf[256], err[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", optarg);
    for (char *t = strtok_r(buf, " ,", &save); t; t = strtok_r(NULL, " ,", &save))
        if (lt_slo_parse(t, &c->goodput, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
    c->has_goodput = true;
    return -1;
}

/* One option from getopt_long (ch, optarg). -1 to go on, else an exit code. */
static int parse_option(cli *c, int ch, bool *have_conc)
{
    char err[256];
    bool found;
    int rc = set_field(c, ch, &found);
    if (found)
        return rc;
    switch (ch) {
    case 'm':
        if (c->n_models == LT_MAX_MODELS) {
            fprintf(stderr, "colo-loadtest: at most %d models\n", LT_MAX_MODELS);
            return EXIT_USAGE;
        }
        c->models[c->n_models++] = optarg;
        return -1;
    case 'k':
        if (c->n_kind_args == LT_MAX_MODELS) {
            fprintf(stderr, "colo-loadtest: too many --kind\n");
            return EXIT_USAGE;
        }
        c->kind_args[c->n_kind_args++] = optarg;
        return -1;
    case 'c':
    case 'r': return parse_load(c, ch, have_conc);
    case 'S': return parse_uint(optarg, UINT64_MAX, &c->seed) ? -1 : bad_value(ch);
    case 'd':
        if (!parse_pos(optarg, &c->duration_s, false))
            return bad_value(ch);
        c->duration_set = true;
        return -1;
    case 'n': return parse_uint(optarg, 1000000000ull, &c->requests) && c->requests ? -1 : bad_value(ch);
    case 'l':
        if (lt_sla_parse_arg(optarg, &c->sla, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
        c->has_sla = true;
        return -1;
    case 'L':
        c->sla_config = optarg;
        c->has_sla = true;
        return -1;
    case 'W':
    case 'R':
        if (!parse_list(optarg, c->sweep, &c->n_sweep, ch == 'W'))
            return bad_value(ch);
        c->sweep_rate = ch == 'R';
        return -1;
    case 'a':
        if (optarg[0] != '/')
            return bad_value(ch);
        c->path = optarg;
        return -1;
    case 'M':
        if (strcmp(optarg, "POST") != 0 && strcmp(optarg, "GET") != 0)
            return bad_value(ch);
        c->method = optarg;
        return -1;
    case 'h': usage(stdout); return EXIT_OK;
    case OPT_LEN_SPREAD:
        return parse_pos(optarg, &c->len_spread, true) && c->len_spread < 1 ? -1 : bad_value(ch);
    case OPT_GOODPUT: return parse_goodput(c);
    case OPT_ATTAINMENT:
        if (!parse_pos(optarg, &c->attainment, false) || c->attainment > 100)
            return bad_value(ch);
        c->attainment /= 100.0;
        return -1;
    case OPT_BASELINE:
        if (strcmp(optarg, "separate") != 0)
            return bad_value(ch);
        c->baseline = optarg;
        return -1;
    default: /* getopt printed why */
        fprintf(stderr, "colo-loadtest: see --help\n");
        return EXIT_USAGE;
    }
}

/* --baseline separate --config FILE: the models come from the config, the
 * URLs from the servers it starts. */
static int check_baseline(cli *c)
{
    char err[512];
    if (!c->baseline || !c->config) {
        fprintf(stderr, "colo-loadtest: --baseline separate and --config FILE go together\n");
        return EXIT_USAGE;
    }
    if (c->url) {
        fprintf(stderr, "colo-loadtest: --baseline starts its own servers; drop --url\n");
        return EXIT_USAGE;
    }
    if (strcmp(c->scenario, "single") != 0 && strcmp(c->scenario, "individual-vs-concurrent") != 0) {
        fprintf(stderr, "colo-loadtest: --baseline runs individual-vs-concurrent; drop --scenario %s\n",
                c->scenario);
        return EXIT_USAGE;
    }
    c->scenario = "individual-vs-concurrent";
    size_t n = 0;
    if (lt_config_models(c->config, c->config_models, LT_MAX_MODELS, &n, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        return EXIT_USAGE;
    }
    for (size_t m = 0; m < c->n_models; m++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = strcmp(c->models[m], c->config_models[i]) == 0;
        if (!found) {
            fprintf(stderr, "colo-loadtest: --model %s is not a model of %s\n", c->models[m], c->config);
            return EXIT_USAGE;
        }
    }
    if (c->n_models == 0) {
        for (size_t i = 0; i < n; i++)
            c->models[c->n_models++] = c->config_models[i];
    }
    /* the config's sla: blocks are the goodput SLOs' default (they set the
     * exit code only when given with --sla-config) */
    if (lt_sla_load_file(c->config, &c->config_sla, err, sizeof err) != LT_OK) {
        fprintf(stderr, "colo-loadtest: %s\n", err);
        return EXIT_USAGE;
    }
    c->url = "http://127.0.0.1:1"; /* replaced by each server's own */
    return -1;
}

/* --scenario trace: open loop at a total rate or a trace file's times;
 * with --config, the models of the server it starts. -1 to go on. */
static int check_trace(cli *c, bool have_conc)
{
    char err[512];
    if (c->config) {
        if (c->url) {
            fprintf(stderr, "colo-loadtest: --config starts its own server; drop --url\n");
            return EXIT_USAGE;
        }
        size_t n = 0;
        if (lt_config_models(c->config, c->config_models, LT_MAX_MODELS, &n, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: %s\n", err);
            return EXIT_USAGE;
        }
        for (size_t m = 0; m < c->n_models; m++) {
            bool found = lt_config_has_adapter(c->config, c->models[m]); /* a LoRA adapter: a model too */
            for (size_t i = 0; i < n && !found; i++)
                found = strcmp(c->models[m], c->config_models[i]) == 0;
            if (!found) {
                fprintf(stderr, "colo-loadtest: --model %s is not a model (or adapter) of %s\n", c->models[m],
                        c->config);
                return EXIT_USAGE;
            }
        }
        for (size_t i = 0; c->n_models == 0 && i < n; i++)
            c->models[i] = c->config_models[i];
        if (c->n_models == 0)
            c->n_models = n;
        c->url = "http://127.0.0.1:1"; /* replaced by the started server's */
    }
    if (have_conc || c->n_load_args || c->n_sweep) {
        fprintf(stderr, "colo-loadtest: the trace scenario is open loop at a total --rate; drop --concurrency, "
                        "per-model loads and sweeps\n");
        return EXIT_USAGE;
    }
    if (!c->trace && !(c->rate > 0)) {
        fprintf(stderr, "colo-loadtest: --scenario trace needs --rate R (requests/s over all models) or --trace FILE\n");
        return EXIT_USAGE;
    }
    if (c->trace && (c->rate > 0 || c->burstiness > 0 || c->poisson || c->input_len || c->len_spread > 0)) {
        fprintf(stderr, "colo-loadtest: --trace replays its own times and lengths; drop --rate, --poisson, "
                        "--burstiness, --input-len and --len-spread\n");
        return EXIT_USAGE;
    }
    if (c->prompts || strcmp(c->method, "GET") == 0) {
        fprintf(stderr, "colo-loadtest: the trace scenario sends synthetic prompts of the trace's lengths; drop "
                        "--prompts and --method GET\n");
        return EXIT_USAGE;
    }
    if (!c->trace && !c->input_len)
        c->input_len = 32;
    return -1;
}

/* The options' combinations (after getopt). -1 when they make sense, else
 * EXIT_USAGE with a message. */
static int check_options(cli *c, int argc, char **argv, bool have_conc)
{
    char err[256];
    for (; optind < argc; optind++) {
        /* the further words of --goodput ttft:300 tpot:50 */
        if (!c->has_goodput || lt_slo_parse(argv[optind], &c->goodput, err, sizeof err) != LT_OK) {
            fprintf(stderr, "colo-loadtest: unexpected argument '%s'\n", argv[optind]);
            return EXIT_USAGE;
        }
    }
    if (is_trace(c) && !c->baseline) {
        int rc = check_trace(c, have_conc);
        if (rc >= 0)
            return rc;
    } else if (c->baseline || c->config) {
        int rc = check_baseline(c);
        if (rc >= 0)
            return rc;
    } else if (c->trace || c->server_pid) {
        fprintf(stderr, "colo-loadtest: --trace and --server-pid go with --scenario trace\n");
        return EXIT_USAGE;
    }
    if (!c->url || c->n_models == 0) {
        fprintf(stderr, "colo-loadtest: --url and at least one --model are required (see --help)\n");
        return EXIT_USAGE;
    }
    if (c->burstiness > 0 && !(c->rate > 0) && !(c->n_sweep && c->sweep_rate)) {
        fprintf(stderr, "colo-loadtest: --burstiness needs --rate or --sweep-rate\n");
        return EXIT_USAGE;
    }
    if (c->input_len && c->prompts) {
        fprintf(stderr, "colo-loadtest: --input-len and --prompts exclude each other\n");
        return EXIT_USAGE;
    }
    if (c->has_goodput && !lt_slo_any(&c->goodput)) {
        fprintf(stderr, "colo-loadtest: --goodput needs ttft:MS, tpot:MS or e2e:MS\n");
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
    bool batch = strcmp(c->scenario, "batch") == 0;
    if (!sweep && !is_trace(c) && !batch && strcmp(c->scenario, "single") != 0 &&
        strcmp(c->scenario, "individual-vs-concurrent") != 0) {
        fprintf(stderr, "colo-loadtest: unknown scenario '%s' (single, individual-vs-concurrent, sweep, trace, "
                        "batch)\n",
                c->scenario);
        return EXIT_USAGE;
    }
    if (batch && c->requests) {
        fprintf(stderr, "colo-loadtest: the batch scenario's phases are timed; drop --requests\n");
        return EXIT_USAGE;
    }
    bool batch_model_known = !c->batch_model;
    for (size_t m = 0; m < c->n_models && !batch_model_known; m++)
        batch_model_known = strcmp(c->models[m], c->batch_model) == 0;
    if (!batch_model_known || (!batch && c->batch_model)) {
        fprintf(stderr, "colo-loadtest: --batch-model goes with --scenario batch and names one of the --model\n");
        return EXIT_USAGE;
    }
    if (sweep != (c->n_sweep > 0)) {
        fprintf(stderr, "colo-loadtest: --scenario sweep takes --sweep-concurrency or --sweep-rate (and they "
                        "need it)\n");
        return EXIT_USAGE;
    }
    if (sweep && (have_conc || c->rate > 0)) {
        fprintf(stderr, "colo-loadtest: a sweep sets the load; drop --concurrency/--rate\n");
        return EXIT_USAGE;
    }
    if (!have_conc && !(c->rate > 0) && !is_trace(c))
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

int lt_cli_parse(cli *c, int argc, char **argv)
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

int loadtest_main(int argc, char **argv)
{
    cli c;
    memset(&c, 0, sizeof c);
    int rc = lt_cli_parse(&c, argc, argv);
    if (rc < 0)
        rc = lt_cli_run(&c);
    lt_sla_set_free(&c.sla);
    lt_sla_set_free(&c.config_sla);
    return rc;
}
