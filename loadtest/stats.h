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
} lt_summary;

/* Sorts s in place and fills out. */
void lt_summarize(lt_samples *s, lt_summary *out);

#define LT_MAX_STATUS 16

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
    double window_s;          /* measurement window length, seconds */

    lt_samples latency_ms;    /* intended send -> response complete, ok only */
    lt_samples ttft_ms;       /* intended send -> first SSE data event */
    lt_samples itl_ms;        /* gaps between consecutive SSE data events */
    double client_queue_ms_sum; /* sum over ok of (actual send - intended send) */
    double first_byte_ms_sum;   /* sum over ok of (first response byte - actual send) */
    double recv_ms_sum;         /* sum over ok of (complete - first response byte) */

    /* derived by lt_result_finish */
    lt_summary lat, ttft, itl;
    double rps;               /* window_ok / window_s */
    double tokens_per_s;      /* window_tokens / window_s; 0 without tokens */
    double error_rate;        /* errors / (ok + errors) */
} lt_result;

void lt_result_init(lt_result *r, const char *model, const char *phase);
void lt_result_count_status(lt_result *r, int status);
uint64_t lt_result_errors(const lt_result *r);
/* Sorts the samples and computes the derived fields. */
void lt_result_finish(lt_result *r);
/* Frees the samples. Accepts NULL. */
void lt_result_fini(lt_result *r);

#endif
