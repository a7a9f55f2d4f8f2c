/* loadtest/trace.h: the request stream of the `trace` scenario.
 *
 * A trace is a list of requests, each with its intended send time, its
 * model and its prompt and output lengths, sorted by time. It is either
 * drawn (lt_trace_generate: each request's model from a Zipf(s) popularity
 * over the models, arrivals at a total rate as a constant, Poisson or gamma
 * process, lengths uniform around a mean) or read from a JSON-lines file
 * (lt_trace_load) and replayed at its own timestamps. Both are pure
 * functions of their inputs and the seed: two runs with the same seed send
 * the same requests at the same times, whatever server answers them.
 *
 * Ownership: an lt_trace owns its array; lt_trace_free releases it and
 * accepts NULL. Not thread-safe. */
#ifndef COLO_LOADTEST_TRACE_H
#define COLO_LOADTEST_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "loadtest/status.h"

typedef struct lt_trace_req {
    double at_s;              /* intended send time, seconds from the phase's start */
    unsigned model;           /* index into the run's model list */
    int prompt_tokens;        /* >= 1: prompt length (synthetic words, about one token each) */
    int output_tokens;        /* >= 1: max_tokens */
} lt_trace_req;

typedef struct lt_trace {
    lt_trace_req *v;
    size_t n, cap;
} lt_trace;

typedef struct lt_trace_opts {
    size_t n_models;          /* >= 1 */
    double zipf_s;            /* >= 0: model k (0-based) has weight 1 / (k + 1)^s; 0 is uniform */
    double rate_per_s;        /* > 0: total arrival rate over all models */
    double burstiness;        /* 0 constant gaps, 1 Poisson, else gamma of this shape (lt_arrival_gap_s) */
    double duration_s;        /* > 0: arrivals in [0, duration_s) */
    uint64_t max_requests;    /* > 0: at most this many requests */
    int input_len, output_len;/* > 0: mean lengths */
    double spread;            /* 0 <= spread < 1: lengths uniform in [len*(1-spread), len*(1+spread)] */
    uint64_t seed;
} lt_trace_opts;

/* The cumulative Zipf(s) distribution over n models: cdf[k] = sum of the
 * weights of models 0..k over all weights; cdf[n-1] == 1. */
void lt_zipf_cdf(size_t n, double s, double *cdf);
/* A model index drawn from cdf[0..n) with one uniform draw of *rng. */
size_t lt_zipf_pick(const double *cdf, size_t n, uint64_t *rng);

/* Draws a trace. LT_EINVAL with a message on bad options, LT_ENOMEM. */
lt_status lt_trace_generate(const lt_trace_opts *o, lt_trace *out, char *err, size_t errlen);

/* Reads a JSON-lines trace file, one request per line, in order:
 *   {"timestamp": 0.25, "model": "chat", "prompt_tokens": 120, "output_tokens": 40}
 * The columns of the common public traces are read where they map:
 * TIMESTAMP / ContextTokens / GeneratedTokens (Azure LLM inference trace),
 * Timestamp / Model / Request tokens / Response tokens (BurstGPT); also
 * "time", "arrival_time", "input_tokens", "prompt_len", "output_len".
 * A timestamp is seconds (a number or a numeric string) or a date-time
 * string "YYYY-MM-DD[ T]HH:MM:SS[.fraction]" (UTC); times are taken
 * relative to the first row and divided by speed (> 0: 2 replays twice as
 * fast), and must not decrease. A row's model is the run's model of that
 * name; a name the run does not have is mapped onto the run's models in the
 * order such names first appear (the first to models[0], the next to
 * models[1], ...); a row without a model draws one from Zipf(zipf_s),
 * seeded. A length of 0 is sent as 1 (traces record failed requests with
 * 0 tokens). Blank lines are skipped. Errors name the file and line. */
lt_status lt_trace_load(const char *path, const char *const *models, size_t n_models, double speed,
                        double zipf_s, uint64_t seed, lt_trace *out, char *err, size_t errlen);

void lt_trace_free(lt_trace *t);

#endif
