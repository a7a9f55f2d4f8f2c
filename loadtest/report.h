/* loadtest/report.h: what a run measured, and its outputs (aligned text
 * table, JSON, CSV with perf_analyzer's columns, a self-contained HTML page).
 *
 * The report borrows everything it points to; it owns only the comparison
 * rows that lt_report_compare allocates (freed by lt_report_fini). */
#ifndef COLO_LOADTEST_REPORT_H
#define COLO_LOADTEST_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "loadtest/sla.h"
#include "loadtest/stats.h"

typedef struct lt_phase {
    char name[64];            /* "single", "individual", "concurrent", "c=4", "rate=2" */
    lt_result *results;       /* one per model in this phase */
    size_t n;
} lt_phase;

/* One model of the individual-vs-concurrent scenario. Impacts are percent:
 * (concurrent - individual) / individual * 100; NAN when undefined. */
typedef struct lt_compare {
    const lt_result *ind, *conc;
    double p50_impact_pct, p90_impact_pct, p99_impact_pct;
    double rps_impact_pct, tps_impact_pct;
    double norm_throughput;   /* conc rps / ind rps; NAN when ind rps is 0 */
} lt_compare;

/* The highest rate of a rate sweep at which a model's attainment stays at
 * or above the target (lt_max_rate_at). */
typedef struct lt_sweep_max {
    char model[128];
    double max_rate;          /* requests/s; NAN when even the lowest rate misses */
    bool bounded;             /* false: no tested rate missed, max_rate is the highest tested ("at least") */
} lt_sweep_max;

/* One way of serving the models, priced. */
typedef struct lt_cost_row {
    const char *setup;        /* static: "one device per model", "separate servers, shared", "colo, shared" */
    double devices;
    double usd_per_hour;
    double rps, tokens_per_s; /* all models together; tokens NAN when not reported */
    double usd_per_m_tokens;  /* per million output tokens; NAN without tokens */
    double usd_per_k_requests;
    double savings_pct;       /* against "one device per model", on tokens (requests without tokens) */
    double worst_p99_impact_pct;  /* the latency price: the worst model's p99 latency change vs alone */
    double worst_ttft_impact_pct; /* the same on p99 TTFT (streamed runs); NAN otherwise */
    double worst_tpot_impact_pct; /* the same on p99 TPOT */
} lt_cost_row;

typedef struct lt_report {
    const char *url;
    const char *scenario;
    const char *load_desc;    /* e.g. "concurrency 4" or "rate 10/s (poisson)" */
    double warmup_s, duration_s, timeout_s;
    unsigned long long requests;
    bool streamed;
    lt_phase *phases;
    size_t n_phases;
    lt_compare *cmp;          /* individual-vs-concurrent only (with a baseline: colo's) */
    size_t n_cmp;
    double stp;               /* sum of norm_throughput over models */
    lt_compare *base_cmp;     /* --baseline separate: the separate servers' comparison */
    size_t n_base_cmp;
    double base_stp;
    const char *baseline_config; /* the config the baseline ran from; NULL without one */
    double burstiness;        /* the arrival process: 0 constant or closed loop, 1 Poisson, else gamma */
    bool has_goodput;         /* some result has goodput SLOs */
    double attainment_target; /* 0..1, for the sweep's max rate */
    lt_sweep_max *sweep_max;  /* rate sweeps with SLOs: per model */
    size_t n_sweep_max;
    bool has_cost;
    double hourly_cost_usd;
    unsigned device_count;
    lt_cost_row cost[3];
    size_t n_cost;
    bool has_sla;
    lt_sla_check *checks;
    size_t n_checks;
    bool sla_pass;
} lt_report;

/* Builds the comparison from the phases named "individual" (one per model)
 * and "concurrent", and the baseline's from "separate-individual" and
 * "separate-concurrent" when there are such phases. */
lt_status lt_report_compare(lt_report *rep);
/* Per model, the highest swept rate meeting rep->attainment_target (from
 * phases named "rate=R" whose results have goodput SLOs). */
lt_status lt_report_sweep_max(lt_report *rep);
/* Prices the comparisons at usd_per_hour per device, device_count devices
 * per deployment (after lt_report_compare). */
void lt_report_cost(lt_report *rep, double usd_per_hour, unsigned device_count);
/* One JSON object per recorded request and phase (JSON Lines). */
lt_status lt_report_requests(const char *path, const lt_report *rep, char *err, size_t errlen);
void lt_report_fini(lt_report *rep);

/* Percent change from base to value; NAN when base is 0 or either is NAN. */
double lt_impact_pct(double base, double value);

void lt_report_table(FILE *out, const lt_report *rep);
/* The comparison's rows as the tables print them, for report_html.c. */
const lt_compare *lt_report_compare_for(const lt_report *rep, const lt_result *r);
lt_status lt_report_json(const char *path, const lt_report *rep, char *err, size_t errlen);
lt_status lt_report_csv(const char *path, const lt_report *rep, char *err, size_t errlen);
lt_status lt_report_html(const char *path, const lt_report *rep, char *err, size_t errlen);

/* The CSV header line (without newline), for tests. */
extern const char lt_csv_header[];

#endif
