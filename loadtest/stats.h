/* loadtest/stats.h: latency samples, percentiles and per-model results.
 *
 * Every latency is kept (no histogram buckets): percentiles come from the
 * sorted samples by the nearest-rank rule, so p99 of 100 samples is the 99th
 * smallest. Times are milliseconds (double) unless a name says otherwise.
 * Not thread-safe; the load generator is single-threaded. */
#ifndef COLO_LOADTEST_STATS_H
#define COLO_LOADTEST_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loadtest/status.h"

/* A growable array of samples. Zero-initialise; lt_samples_free releases. */
typedef struct lt_samples {
    double *v;
    size_t n, cap;
} lt_samples;

lt_status lt_samples_push(lt_samples *s, double value);
void lt_samples_sort(lt_samples *s);
void lt_samples_free(lt_samples *s);

/* Nearest-rank percentile of sorted[0..n) (ascending), q in [0, 1]:
 * sorted[ceil(q * n) - 1], sorted[0] for q = 0. NAN when n == 0. */
double lt_percentile(const double *sorted, size_t n, double q);

typedef struct lt_summary {
    size_t n;
    double min, mean, p50, p90, p95, p99, max; /* NAN when n == 0 */
    double std;                                /* population standard deviation; NAN when n == 0 */
} lt_summary;

/* Sorts s in place and fills out. */
void lt_summarize(lt_samples *s, lt_summary *out);

#define LT_MAX_STATUS 16

/* How a recorded request ended. */
typedef enum lt_outcome {
    LT_OUT_OK = 0,    /* 2xx */
    LT_OUT_HTTP,      /* another status */
    LT_OUT_CONNECT,   /* the connection could not be made */
    LT_OUT_TIMEOUT,   /* no complete response within the timeout */
    LT_OUT_IO,        /* closed mid-response, malformed */
} lt_outcome;

const char *lt_outcome_name(lt_outcome o);

/* One recorded request (intended after the warm-up). Times in seconds are
 * counted from the phase's start; NAN / -1 where not known. */
typedef struct lt_req_rec {
    double intended_s;        /* its scheduled send time */
    double sent_s;            /* when its bytes were handed to the socket (NAN: never sent) */
    double done_s;            /* when it ended (response complete, error, timeout) */
    double e2e_ms;            /* intended send -> last byte; ok only */
    double ttft_ms;           /* intended send -> first token event; streamed ok only */
    double tpot_ms;           /* (e2e - ttft) / (output_tokens - 1); needs ttft and >= 2 tokens */
    double itl_mean_ms;       /* mean gap between token events */
    int64_t prompt_tokens;    /* usage.prompt_tokens; -1 unknown */
    int64_t output_tokens;    /* usage.completion_tokens (or token events); -1 unknown */
    int status;               /* HTTP status; 0 without a response */
    lt_outcome outcome;
    bool in_window;           /* ok and completed inside the measurement window */
    bool good;                /* met every goodput SLO (lt_result_goodput) */
    int8_t cold;              /* 1: its model was not resident when it was sent, 0: resident, -1: unknown */
} lt_req_rec;

/* Per-request service-level objectives for goodput, as `vllm bench serve
 * --goodput` defines them; NAN: not set. A request is good when it
 * succeeded and meets every set bound. A TTFT bound needs a measured TTFT
 * (streaming); a TPOT bound needs a TTFT too and holds for a request of one
 * output token (no decode phase). A streamed response with no token at all
 * counts its end-to-end time as its TTFT. */
typedef struct lt_slo {
    double ttft_ms, tpot_ms, e2e_ms;
} lt_slo;

/* All unset. */
lt_slo lt_slo_none(void);
bool lt_slo_any(const lt_slo *s);
/* Parses one "ttft:MS", "tpot:MS" or "e2e:MS" (also "e2el:MS") into s.
 * LT_EINVAL with a message. */
lt_status lt_slo_parse(const char *arg, lt_slo *s, char *err, size_t errlen);
bool lt_slo_met(const lt_slo *s, const lt_req_rec *rec);

typedef struct lt_status_count {
    int status;
    uint64_t count;
} lt_status_count;

/* What one model measured in one phase. Only requests intended after the
 * warm-up count. Errors never enter the latency samples. */
typedef struct lt_result {
    char model[128];
    char phase[64];
    unsigned concurrency;     /* closed loop: connections; 0 in open loop */
    double rate_per_s;        /* open loop: target rate; 0 in closed loop */

    uint64_t ok;              /* 2xx responses */
    uint64_t http_errors;     /* non-2xx responses, by status below */
    lt_status_count by_status[LT_MAX_STATUS];
    size_t n_status;          /* statuses beyond LT_MAX_STATUS go to the last slot */
    uint64_t connect_errors;  /* connection refused / unreachable */
    uint64_t timeouts;        /* no complete response within --timeout */
    uint64_t io_errors;       /* connection closed mid-response, malformed response */

    uint64_t tokens;          /* usage.completion_tokens summed over ok requests */
    bool has_tokens;          /* some response carried a token count */
    uint64_t window_ok;       /* ok completions inside the measurement window */
    uint64_t window_tokens;   /* their tokens */
    uint64_t late_ok;         /* ok completions after the window's end (warm-up ones too): answers
                                 that outlast the window, when ok stays 0 */
    double window_s;          /* measurement window length, seconds */

    lt_samples latency_ms;    /* intended send -> response complete, ok only */
    lt_samples ttft_ms;       /* intended send -> first SSE data event */
    lt_samples itl_ms;        /* gaps between consecutive SSE token events */
    lt_samples tpot_ms;       /* per request: (e2e - ttft) / (output tokens - 1) */
    lt_req_rec *reqs;         /* every recorded request, in completion order */
    size_t n_reqs, cap_reqs;
    uint64_t prompt_tokens;   /* usage.prompt_tokens summed over ok requests */
    bool has_prompt_tokens;
    uint64_t window_prompt_tokens;
    double client_queue_ms_sum; /* sum over ok of (actual send - intended send) */
    double first_byte_ms_sum;   /* sum over ok of (first response byte - actual send) */
    double recv_ms_sum;         /* sum over ok of (complete - first response byte) */

    /* goodput: set by lt_result_goodput */
    bool has_slo;
    lt_slo slo;
    uint64_t good;            /* recorded requests meeting every SLO */
    uint64_t window_good;     /* of those, completed inside the window */
    double attainment;        /* good / (ok + errors), 0..1; NAN without requests */
    double goodput_rps;       /* window_good / window_s */

    /* derived by lt_result_finish */
    lt_summary lat, ttft, itl, tpot;
    double rps;               /* window_ok / window_s */
    double tokens_per_s;      /* window_tokens / window_s; 0 without tokens */
    double error_rate;        /* errors / (ok + errors) */
} lt_result;

void lt_result_init(lt_result *r, const char *model, const char *phase);
void lt_result_count_status(lt_result *r, int status);
uint64_t lt_result_errors(const lt_result *r);
/* Appends a request record. */
lt_status lt_result_add_req(lt_result *r, const lt_req_rec *rec);
/* Sorts the samples and computes the derived fields. */
void lt_result_finish(lt_result *r);
/* Marks good requests against slo and fills good, window_good, attainment
 * and goodput_rps (after lt_result_finish, which sets window_s). */
void lt_result_goodput(lt_result *r, const lt_slo *slo);

/* A sweep's attainment at each rate, rate-ascending. The highest rate whose
 * attainment is at least target (0..1), as DistServe reads it: walking up
 * from the lowest rate, the first step that falls below target ends the
 * search and the rate is interpolated linearly between it and the step
 * before. Returns NAN when even the lowest rate misses the target; the
 * highest rate tested when none misses (*bounded is then false, meaning
 * "at least"). */
double lt_max_rate_at(const double *rates, const double *attainment, size_t n, double target, bool *bounded);
/* Frees the samples. Accepts NULL. */
void lt_result_fini(lt_result *r);

#endif
