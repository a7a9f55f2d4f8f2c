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

typedef struct lt_report {
    const char *url;
    const char *scenario;
    const char *load_desc;    /* e.g. "concurrency 4" or "rate 10/s (poisson)" */
    double warmup_s, duration_s, timeout_s;
    unsigned long long requests;
    bool streamed;
    lt_phase *phases;
    size_t n_phases;
    lt_compare *cmp;          /* individual-vs-concurrent only */
    size_t n_cmp;
    double stp;               /* sum of norm_throughput over models */
    bool has_sla;
    lt_sla_check *checks;
    size_t n_checks;
    bool sla_pass;
} lt_report;

/* Builds the comparison from the phases named "individual" (one per model)
 * and "concurrent". */
lt_status lt_report_compare(lt_report *rep);
void lt_report_fini(lt_report *rep);

/* Percent change from base to value; NAN when base is 0 or either is NAN. */
double lt_impact_pct(double base, double value);

void lt_report_table(FILE *out, const lt_report *rep);
lt_status lt_report_json(const char *path, const lt_report *rep, char *err, size_t errlen);
lt_status lt_report_csv(const char *path, const lt_report *rep, char *err, size_t errlen);
lt_status lt_report_html(const char *path, const lt_report *rep, char *err, size_t errlen);

/* The CSV header line (without newline), for tests. */
extern const char lt_csv_header[];

#endif
