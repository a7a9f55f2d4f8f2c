/* loadtest/spec_stats.h: a server's speculative decoding over a run.
 *
 * colo's GET /v1/stats lists, per model that drafts, "speculative":
 * {"drafted_tokens", "accepted_tokens"} (counted since the model loaded;
 * "draft": the draft model's name when one drafts; "sources": the same
 * counters by where the drafts came from, "lookup", "suffix" and "draft",
 * those the model's config turns on). colo-loadtest reads it before and
 * after a run, and reports per model the tokens drafted and accepted in
 * between and their ratio, in all and by source. A server without such
 * counters (another server, a model that does not draft) has no row.
 *
 * Pure parsing and arithmetic, apart from lt_spec_fetch. */
#ifndef COLO_LOADTEST_SPEC_STATS_H
#define COLO_LOADTEST_SPEC_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loadtest/status.h"
#include "loadtest/workload.h"

/* Where drafts come from: the sequence's own text, the suffix cache of
 * its tenant's outputs, a draft model (the keys of "sources"). */
enum { LT_SPEC_LOOKUP, LT_SPEC_SUFFIX, LT_SPEC_DRAFT, LT_SPEC_SOURCES };
extern const char *const lt_spec_source_names[LT_SPEC_SOURCES];

typedef struct lt_spec_counts {
    bool has;                   /* reported (before and after, in a run's row) */
    uint64_t drafted, accepted;
} lt_spec_counts;

typedef struct lt_spec_row {
    char model[128];
    char draft[128];          /* the draft model's name, "" when it drafts from text */
    bool has;                 /* the server reported the counters (before and after) */
    uint64_t drafted, accepted; /* over the run */
    lt_spec_counts src[LT_SPEC_SOURCES]; /* the same by source, where reported */
} lt_spec_row;

/* Model's counters from a /v1/stats body into row (its model name kept;
 * draft "" for none; a source the body does not list has no counts);
 * false when the body has none for it. */
bool lt_spec_parse(const char *body, const char *model, lt_spec_row *row);
/* GET /v1/stats from t: each of models[0..n)'s counters into rows (has
 * false where there are none). LT_OK, or the request's error. */
lt_status lt_spec_fetch(const lt_target *t, const char *api_key, const char *const *models, size_t n,
                        lt_spec_row *rows, char *err, size_t errlen);
/* after - before, row by row (has only where both have it). */
void lt_spec_delta(const lt_spec_row *before, const lt_spec_row *after, size_t n, lt_spec_row *out);

#endif
