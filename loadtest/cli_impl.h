/* loadtest/cli_impl.h: what colo-loadtest's option parser (cli.c) hands to
 * the scenario runner (scenario.c). Private to those two files. */
#ifndef COLO_LOADTEST_CLI_IMPL_H
#define COLO_LOADTEST_CLI_IMPL_H

#include <stdbool.h>

#include "loadtest/baseline.h"
#include "loadtest/report.h"
#include "loadtest/sla.h"
#include "loadtest/stats.h"
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
} cli;

/* One model's requests, built for its target. */
typedef struct model_work {
    lt_target target;
    lt_requests requests;
} model_work;

/* Parses argv into c. -1 to go on, else an exit code (usage printed). */
int lt_cli_parse(cli *c, int argc, char **argv);
/* Runs what c asks and writes the outputs; returns the exit code. */
int lt_cli_run(cli *c);

#endif
