/* loadtest/engine.h: the load generator (one thread, libevent, many
 * keep-alive HTTP/1.1 connections, responses parsed with llhttp).
 *
 * A phase drives one or more loads at once, one per model. A load is either
 * closed loop (a fixed number of connections, each sending its next request
 * when the previous one ends) or open loop (requests intended at a constant,
 * Poisson or gamma rate, or at the times of a given schedule; a request
 * that finds no idle connection opens a new one
 * up to max_connections, else waits in a queue). Latency always counts from
 * the intended send time, so a queued request's wait is part of it (no
 * coordinated omission).
 *
 * Requests intended before the warm-up ends are sent but not recorded. The
 * phase stops issuing at warm-up + duration (or after `requests` recorded
 * requests per load) and then lets what is in flight finish (each request is
 * bounded by the timeout). Throughput counts the successful completions that
 * fall inside [warm-up end, warm-up end + duration) (duration mode) or all
 * recorded successes over the time to the last one (requests mode).
 * Times come from lt_now_ns (loadtest/clock.h). Not thread-safe: call from one thread. */
#ifndef COLO_LOADTEST_ENGINE_H
#define COLO_LOADTEST_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "loadtest/clock.h"
#include "loadtest/monitor.h"
#include "loadtest/stats.h"
#include "loadtest/workload.h"

typedef struct lt_load {
    const char *model;            /* label for results and progress */
    const lt_requests *requests;  /* picked round-robin from a seeded start */
    unsigned concurrency;         /* > 0: closed loop with this many connections */
    double rate_per_s;            /* > 0 (and concurrency 0): open loop */
    bool poisson;                 /* open loop: exponential gaps, else constant */
    double burstiness;            /* > 0: open loop with gamma gaps of this shape (1 = Poisson), as
                                     vllm bench serve's --burstiness; overrides poisson */
    uint64_t seed;
    const lt_target *target;      /* this load's server; NULL: the run's */
    bool stream;                  /* parse text/event-stream bodies for TTFT and ITL */
    const double *schedule_s;     /* n_schedule > 0: open loop with request k (requests->v[k], in order)
                                     intended at schedule_s[k] seconds after the phase's start (ascending);
                                     the load ends after the last; rate_per_s is then only a label */
    size_t n_schedule;
} lt_load;

typedef struct lt_run_opts {
    double warmup_s;
    double duration_s;            /* used when requests == 0 */
    uint64_t requests;            /* > 0: recorded requests per load */
    double timeout_s;             /* per request, from its intended send time */
    unsigned max_connections;     /* per load, open loop */
    bool progress;                /* \r-updated line on stderr */
    const char *phase;            /* label for progress */
    uint64_t total_requests;      /* progress only: requests expected in the run (0: unknown) */
    struct lt_monitor *monitor;   /* NULL, or polled during the run; each request's record says whether
                                     its model was resident when it was sent (lt_req_rec.cold) */
} lt_run_opts;

/* Runs one phase. results[i] must be initialised (lt_result_init) and
 * receives load i's measurements; the caller calls lt_result_finish and
 * lt_result_fini. Returns LT_OK even when every request failed (failures
 * are results); an error only when the generator itself cannot run. */
lt_status lt_engine_run(const lt_target *t, const lt_load *loads, size_t n_loads,
                        const lt_run_opts *o, lt_result *results, char *err, size_t errlen);

/* The gap before the next arrival, seconds, for rate_per_s: constant
 * (burstiness <= 0), exponential (burstiness 1) or gamma with shape
 * burstiness and scale 1 / (rate * burstiness), so the mean rate stays
 * rate_per_s and the squared coefficient of variation of the gaps is
 * 1 / burstiness (below 1 burstier than Poisson, above 1 steadier). */
double lt_arrival_gap_s(uint64_t *rng, double rate_per_s, double burstiness);
/* A Gamma(shape, 1) variate (Marsaglia and Tsang), shape > 0. */
double lt_rand_gamma(uint64_t *rng, double shape);

/* splitmix64; the seeded generator for Poisson gaps and prompt offsets. */
uint64_t lt_rand_next(uint64_t *state);
/* Uniform in (0, 1). */
double lt_rand_unit(uint64_t *state);

#endif
