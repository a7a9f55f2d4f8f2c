/* loadtest/report.h: what a run measured, and its outputs (aligned text
 * table, JSON, CSV with perf_analyzer's columns, a self-contained HTML page).
 *
 * The report borrows everything it points to; it owns only the comparison
 * rows that lt_report_compare allocates (freed by lt_report_fini). */
#ifndef COLO_LOADTEST_REPORT_H
#define COLO_LOADTEST_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "loadtest/monitor.h"
#include "loadtest/sla.h"
#include "loadtest/spec_stats.h"
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

/* The trace scenario's view of one model, or of every model together.
 * A request is cold when its model was not resident when it was sent,
 * warm when it was, unknown when the server did not say (lt_req_rec.cold). */
typedef struct lt_trace_model {
    char model[128];          /* "all" for the overall row */
    uint64_t scheduled;       /* requests the trace gave the model */
    uint64_t recorded, good;  /* recorded requests (after the warm-up); those meeting every SLO */
    double attainment_pct;    /* good / recorded * 100; NAN without SLOs or requests */
    double goodput_rps;       /* good completions in the window per second; NAN without SLOs */
    uint64_t warm, cold, unknown; /* recorded requests by residency when sent */
    lt_summary ttft_warm, ttft_cold; /* successful requests' TTFT (streamed runs) */
    lt_summary e2e_warm, e2e_cold;   /* and end-to-end latency */
    uint64_t loads_seen, unloads_seen; /* residency changes the polls saw */
    bool has_counters;        /* the server reported lifecycle counters */
    uint64_t wakes, evictions;/* their change over the phase */
    const lt_residency *changes; /* borrowed from the monitor; NULL without one */
    size_t n_changes;
    double *bin_attainment_pct; /* n_bins: attainment of the requests intended in each bin; NAN: none */
} lt_trace_model;

typedef struct lt_trace_report {
    const char *source;       /* "zipf", or the trace file replayed */
    double zipf_s, rate_per_s, burstiness, speed;
    unsigned long long seed;
    double span_s;            /* the last request's intended time */
    bool monitored;           /* the server's model list was polled */
    double poll_interval_s;
    int server_pid;           /* > 0: its memory was sampled */
    bool has_rss;
    uint64_t rss_max_bytes;   /* largest VmRSS sampled */
    uint64_t hwm_bytes;       /* VmHWM at the end */
    lt_trace_model *models;   /* one per model of the run; owned */
    size_t n;
    lt_trace_model all;
    double bin_s;             /* attainment-over-time bins */
    size_t n_bins;
} lt_trace_report;

/* Fills tr's per-model and overall rows from the trace phase's results
 * (after goodput is judged), the requests scheduled per model
 * (scheduled[i] for models[i]) and the monitor (NULL: residency unknown).
 * tr's source, rates, seed and span are the caller's. */
lt_status lt_trace_summarize(lt_trace_report *tr, const lt_phase *p, const char *const *models,
                             const uint64_t *scheduled, size_t n_models, const lt_monitor *mon);
void lt_trace_report_fini(lt_trace_report *tr);
/* The trace section of the text table. */
void lt_trace_report_table(FILE *out, const lt_trace_report *tr);

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
    double stp;               /* sum of norm_throughput over models; NAN when one has none */
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
    const lt_trace_report *trace; /* the trace scenario's rows; NULL otherwise */
    /* the server's speculative decoding over the run (loadtest/spec_stats.h),
     * one row per model; rows without counters are not reported */
    const lt_spec_row *spec;
    size_t n_spec;
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
