/* loadtest/cli_impl.h: what colo-loadtest's option parser (cli.c) hands to
 * the scenario runner (scenario.c). Private to those two files. */
#ifndef COLO_LOADTEST_CLI_IMPL_H
#define COLO_LOADTEST_CLI_IMPL_H

#include <stdbool.h>

#include "loadtest/baseline.h"
#include "loadtest/report.h"
#include "loadtest/sla.h"
#include "loadtest/stats.h"
#include "loadtest/trace.h"
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
    double burstiness;               /* > 0: gamma arrivals */
    unsigned long long seed;
    double duration_s, warmup_s, timeout_s;
    unsigned long long requests;
    unsigned max_connections;
    const char *prompts;
    int max_tokens;
    int input_len, output_len;       /* synthetic prompts when input_len > 0 */
    double len_spread;
    bool stream;
    lt_sla_set sla;
    const char *sla_config;
    bool has_sla;
    lt_sla_set config_sla;           /* --baseline: the config's sla: blocks, goodput's default */
    lt_slo goodput;                  /* --goodput: for every model */
    bool has_goodput;
    double attainment;               /* 0..1 */
    const char *json, *csv, *html, *requests_out;
    double sweep[LT_MAX_SWEEP];
    size_t n_sweep;
    bool sweep_rate;
    const char *path, *method, *api_key;
    bool quiet;
    const char *baseline, *config, *server_bin;
    double startup_timeout_s;
    double hourly_cost;              /* > 0: price the setups */
    unsigned device_count;
    char config_models[LT_MAX_MODELS][128]; /* --baseline without --model: the config's */
    /* the trace scenario */
    double zipf_s;                   /* model popularity Zipf(s) */
    const char *trace;               /* a JSON-lines trace to replay; NULL: drawn */
    double trace_speed;
    int server_pid;                  /* > 0: sample its memory */
    double poll_interval_s;          /* residency polls; 0: none */
    bool duration_set;               /* --duration was given */
    /* the batch scenario */
    int batch_lines;                 /* lines of each round's batch */
    int batch_max_tokens;            /* their max_tokens */
    int rounds;                      /* rounds of no-batch, with-batch, batch-only */
    const char *batch_model;         /* the batch's model; NULL: the first --model */
    const char *metrics_key;         /* GET /metrics's key (the operator's); NULL: --api-key */
} cli;

/* One model's requests, built for its target. */
typedef struct model_work {
    lt_target target;
    lt_requests requests;
} model_work;

/* The trace scenario's run: its requests, the server it started (with
 * --config) and what the monitor saw. */
typedef struct trace_run {
    lt_trace trace;
    double *schedule_s[LT_MAX_MODELS]; /* each model's intended times */
    uint64_t scheduled[LT_MAX_MODELS];
    lt_monitor *mon;
    lt_server server;                /* pid 0 when none was started */
    char dir[512];                   /* its config and log; "" when none */
    lt_trace_report report;
} trace_run;

/* The trace scenario (scenario_trace.c): starts the server of --config when
 * asked, builds the trace and each model's requests, and runs one phase
 * "trace" into *phase. -1 to go on, else an exit code. */
int lt_trace_run(const cli *c, model_work *w, trace_run *tr, lt_phase *phase);
/* After goodput is judged: the trace's rows into tr->report. */
lt_status lt_trace_finish(const cli *c, trace_run *tr, const lt_phase *phase);
/* Stops a started server and frees everything. */
void lt_trace_run_fini(trace_run *tr, bool keep_dir);

/* scenario.c: --path's OpenAI endpoint, if it is one (0 none, 1
 * completions, 2 chat), and the path of model m's requests (--path, else
 * the model's infer route) into out. */
int lt_cli_openai_endpoint(const cli *c);
void lt_cli_request_path(const cli *c, size_t m, char *out, size_t cap);
/* scenario.c: the colo-server to start (--server, else the one beside
 * colo-loadtest) into server, and a new folder for its configs and logs
 * into dir ("" when none). -1 to go on, else an exit code (said why). */
int lt_cli_server_dir(const cli *c, char *server, size_t server_cap, char *dir, size_t dir_cap);

/* scenario.c: runs one phase of the load over models[idx[0..n)] into p
 * (the caller frees p->results and each result). */
lt_status lt_cli_phase(const cli *c, model_work *w, const size_t *idx, size_t n, unsigned concurrency, double rate,
                       const char *name, lt_phase *p);
/* The batch scenario (scenario_batch.c): its rounds, table and --json;
 * returns the exit code. */
int lt_batch_scenario(const cli *c, model_work *w);

/* Parses argv into c. -1 to go on, else an exit code (usage printed). */
int lt_cli_parse(cli *c, int argc, char **argv);
/* Runs what c asks and writes the outputs; returns the exit code. */
int lt_cli_run(cli *c);

#endif
