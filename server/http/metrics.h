/* server/http/metrics.h: a small Prometheus metrics registry (text format 0.0.4).
 *
 * A family has a name, help text, a type (counter, gauge, histogram) and up
 * to COLO_METRICS_MAX_LABELS label names; a series is one set of label
 * values, created on first use. Names follow Prometheus: base units in the
 * name (_seconds, _bytes), counters end in _total.
 *
 * Threads: every function may be called from any thread (one mutex per
 * registry); colo_metrics_render is meant for the loop thread. Families and
 * series live as long as the registry; the pointers stay valid. */
#ifndef COLO_SERVER_METRICS_H
#define COLO_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

#define COLO_METRICS_MAX_LABELS 4
#define COLO_METRICS_MAX_BUCKETS 32

typedef struct colo_metrics colo_metrics;
typedef struct colo_metric colo_metric; /* a family */

typedef enum colo_metric_type { COLO_METRIC_COUNTER, COLO_METRIC_GAUGE, COLO_METRIC_HISTOGRAM } colo_metric_type;

colo_metrics *colo_metrics_create(void);
void colo_metrics_free(colo_metrics *m);

/* Registers a family; label_names has n_labels entries (copied). NULL on a
 * bad name, a duplicate, too many labels or no memory. For histograms,
 * buckets are the n_buckets ascending upper bounds (+Inf is implicit). */
colo_metric *colo_metrics_counter(colo_metrics *m, const char *name, const char *help, int n_labels,
                                  const char *const *label_names);
colo_metric *colo_metrics_gauge(colo_metrics *m, const char *name, const char *help, int n_labels,
                                const char *const *label_names);
colo_metric *colo_metrics_histogram(colo_metrics *m, const char *name, const char *help, int n_labels,
                                    const char *const *label_names, const double *buckets, int n_buckets);

/* Updates; label_values has the family's n_labels entries (NULL when it has
 * none). COLO_EINVAL for the wrong kind of family or a negative counter
 * increment; COLO_ENOMEM when a new series cannot be made. */
colo_status colo_metric_add(colo_metric *f, const char *const *label_values, double v);      /* counter, gauge */
/* gauge; or a counter mirroring a monotonic count kept elsewhere */
colo_status colo_metric_set(colo_metric *f, const char *const *label_values, double v);
colo_status colo_metric_observe(colo_metric *f, const char *const *label_values, double v);  /* histogram */

/* Removes the series with these label values, so that a value that became
 * unknown is absent rather than stale. COLO_OK also when there was none. */
colo_status colo_metric_remove(colo_metric *f, const char *const *label_values);

/* Reads back what the registry holds, summed over every series whose
 * labels match label_values (n_labels entries; a NULL entry matches any
 * value; label_values itself may be NULL to match all). Counters and gauges
 * fill value; histograms fill counts (per bucket, not cumulative: the
 * family's n_buckets bounds then +Inf, at most COLO_METRICS_MAX_BUCKETS + 1),
 * count and sum. Returns the number of series that matched (0: none, the
 * reading is zero). */
typedef struct colo_metric_reading {
    double value;
    uint64_t counts[COLO_METRICS_MAX_BUCKETS + 1];
    uint64_t count;
    double sum;
} colo_metric_reading;
int colo_metric_read(colo_metric *f, const char *const *label_values, colo_metric_reading *out);
/* A histogram's bucket upper bounds (the *n finite ones; +Inf follows). */
const double *colo_metric_buckets(const colo_metric *f, int *n);

/* Called at the start of each render (under no lock): set gauges from live
 * state there (open connections, memory in use). */
colo_status colo_metrics_on_render(colo_metrics *m, void (*fn)(void *ud), void *ud);

/* The exposition text (malloc'd, NUL-terminated, caller frees) or NULL. */
char *colo_metrics_render(colo_metrics *m, size_t *len);

/* Buckets for request latencies in seconds (1 ms .. 60 s). */
extern const double colo_metrics_latency_buckets[];
extern const int colo_metrics_latency_buckets_n;

#endif
