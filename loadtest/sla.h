/* loadtest/sla.h: per-model service-level constraints and their verdicts.
 *
 * The schema is colo-server's `sla:` block: p99_ms (upper bound on the p99
 * end-to-end latency), ttft_ms (upper bound on the p99 time to first token;
 * measured only with --stream), min_rps (lower bound on successful requests
 * per second), max_error_rate (upper bound on errors / requests, 0..1). */
#ifndef COLO_LOADTEST_SLA_H
#define COLO_LOADTEST_SLA_H

#include <stdbool.h>
#include <stddef.h>

#include "loadtest/stats.h"
#include "loadtest/status.h"

typedef struct lt_sla {
    char model[128];
    double p99_ms, ttft_ms, min_rps, max_error_rate; /* NAN: not set */
} lt_sla;

/* A set of constraints, one entry per model. Zero-initialise; lt_sla_set_free releases. */
typedef struct lt_sla_set {
    lt_sla *v;
    size_t n;
} lt_sla_set;

/* Parses 'NAME:p99_ms=X,ttft_ms=Y,min_rps=Z,max_error_rate=E' (any subset,
 * at least one) and merges it into set. LT_EINVAL with a message. */
lt_status lt_sla_parse_arg(const char *arg, lt_sla_set *set, char *err, size_t errlen);

/* Reads a YAML file: colo-server's config shape (models: [{name, sla: {...}}])
 * or a plain map NAME -> {constraints}. Errors name the file and line. */
lt_status lt_sla_load_file(const char *path, lt_sla_set *set, char *err, size_t errlen);

const lt_sla *lt_sla_find(const lt_sla_set *set, const char *model);
void lt_sla_set_free(lt_sla_set *set);

typedef struct lt_sla_check {
    char model[128];
    const char *constraint;   /* "p99_ms", "ttft_ms", "min_rps", "max_error_rate" (static) */
    double measured;          /* NAN when nothing was measured */
    double bound;
    bool pass;
    bool skipped;             /* ttft_ms without a streamed run: not checked */
} lt_sla_check;

/* Checks every constraint of every model in results[0..n) that set names.
 * *checks is malloc'ed (caller frees). A constraint with nothing measured
 * (no successful request) fails. */
lt_status lt_sla_evaluate(const lt_sla_set *set, const lt_result *results, size_t n,
                          bool streamed, lt_sla_check **checks, size_t *n_checks);

#endif
