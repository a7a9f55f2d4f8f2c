/* What the dashboard shows: the device's telemetry as metric families, a
 * short history of every model's counters, and GET /v1/stats, GET
 * /dashboard (docs/OBSERVABILITY.md).
 *
 * The history is a ring of points, one per telemetry interval, taken by a
 * timer on the loop thread: each point copies counters the metrics registry
 * already keeps (requests, tokens, the latency histograms' buckets) and the
 * models' gauges. Rates and percentiles over the last minute are the
 * difference of two points, so nothing is added to a request's path, and
 * /v1/stats renders only when someone asks. */
#include "server/api/api_impl.h"
#include "server/tenants/tenants.h"

#include <event2/event.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/telemetry.h"
#include "server/api/dashboard.h"

#define HISTORY_SECONDS 300 /* the time chart's span */
#define WINDOW_SECONDS 60   /* rates and percentiles */
#define MAX_POINTS 600
#define NB (COLO_METRICS_MAX_BUCKETS + 1)

/* One model at one point. Counters are cumulative since start. */
typedef struct model_point {
    colo_served_state state;
    int queue_depth, running;
    size_t limit_bytes, used_bytes, peak_bytes, weight_bytes, kv_bytes, kv_used_bytes;
    size_t guaranteed_bytes, borrowed_bytes, lent_bytes; /* elastic memory (fixed: guaranteed = limit) */
    double requests, ok, tokens;           /* tokens: generated (generation) or input (embeddings) */
    double batch_sum, batch_count;
    uint64_t spec_drafted, spec_accepted;  /* speculative decoding's tokens */
    uint64_t spec_src_drafted[COLO_SPEC_SOURCES], spec_src_accepted[COLO_SPEC_SOURCES]; /* of them by source */
    uint64_t spec_draft_passes, spec_draft_ns;          /* the draft model's passes */
    uint64_t dur[NB], ttft[NB];            /* latency histograms, per bucket */
    double slo_met[2], slo_total[2];       /* colo_model_slo_requests_total: slo e2e, ttft */
    double batch_queued, batch_running, batch_done; /* lines of batches (colo_api_set_batch_metrics) */
} model_point;

typedef struct point {
    uint64_t seq;
    uint64_t t_ns;  /* colo_now_ns */
    int64_t unix_ms; /* wall clock, for the page's axis */
    colo_device_sample dev;
    model_point *m; /* n_models entries */
    json_t *tenants; /* per tenant usage at this point (colo_tenants_stats_json) */
} point;

struct api_stats {
    colo_device *dev;
    colo_device_info info;
    colo_telemetry *tel;
    struct event *timer;
    int interval_ms;
    int n_models; /* at watch time */
    point ring[MAX_POINTS];
    int cap, head, len; /* head: next slot */
    uint64_t seq;
    colo_metric *m_util, *m_bw, *m_mem_used, *m_mem_total, *m_proc_mem, *m_power, *m_sm_clock, *m_mem_clock,
        *m_temp, *m_worker, *m_info;
    /* the host worker pool's time (colo_device_worker_stats) and the
     * process's CPU time */
    colo_metric *m_pool_time, *m_pool_ops, *m_pool_chunks, *m_pool_lock_waits, *m_pool_lock_wait, *m_loop_cpu,
        *m_proc_cpu;
};

/* ---- device metric families ------------------------------------------------------- */

/* Known values are set; unknown ones have no series (removed if a
 * reading that worked before now fails). */
static void set_known(colo_metric *f, const char *device, double v)
{
    if (isnan(v))
        colo_metric_remove(f, (const char *const[]){device});
    else
        colo_metric_set(f, (const char *const[]){device}, v);
}

/* Before each /metrics render: the latest device sample into the gauges.
 * Unknown values are never set, so their series stay absent. */
static void on_render_device(void *ud)
{
    api_stats *st = ud;
    if (!st->tel)
        return; /* stopped: the gauges keep their last values */
    colo_device_sample s;
    colo_telemetry_latest(st->tel, &s);
    const char *d = s.device;
    set_known(st->m_util, d, s.utilization_ratio);
    set_known(st->m_bw, d, s.memory_bandwidth_utilization_ratio);
    set_known(st->m_mem_used, d, s.memory_used_bytes);
    set_known(st->m_mem_total, d, s.memory_total_bytes);
    set_known(st->m_proc_mem, d, s.process_memory_bytes);
    set_known(st->m_power, d, s.power_watts);
    set_known(st->m_sm_clock, d, s.sm_clock_hz);
    set_known(st->m_mem_clock, d, s.memory_clock_hz);
    set_known(st->m_temp, d, s.temperature_celsius);
    for (int i = 0; i < s.n_workers; i++) {
        char w[16];
        snprintf(w, sizeof w, "%d", i);
        if (isnan(s.worker_utilization_ratio[i]))
            colo_metric_remove(st->m_worker, (const char *const[]){d, w});
        else
            colo_metric_set(st->m_worker, (const char *const[]){d, w}, s.worker_utilization_ratio[i]);
    }
    colo_metric_set(st->m_info, (const char *const[]){d, st->info.name, s.source}, 1);
    colo_worker_stats ws;
    if (colo_device_worker_stats(st->dev, &ws) == COLO_OK) {
        static const char *const states[] = {"busy", "ready", "barrier", "starved"};
        const uint64_t ns[] = {ws.busy_ns, ws.ready_ns, ws.barrier_ns, ws.starved_ns};
        for (int i = 0; i < 4; i++)
            colo_metric_set(st->m_pool_time, (const char *const[]){d, states[i]}, (double)ns[i] / 1e9);
        colo_metric_set(st->m_pool_ops, (const char *const[]){d}, (double)ws.ops);
        colo_metric_set(st->m_pool_chunks, (const char *const[]){d}, (double)ws.chunks);
        colo_metric_set(st->m_pool_lock_waits, (const char *const[]){d}, (double)ws.lock_waits);
        colo_metric_set(st->m_pool_lock_wait, (const char *const[]){d}, (double)ws.lock_wait_ns / 1e9);
    }
    /* renders run on the loop thread: its own CPU time */
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        colo_metric_set(st->m_loop_cpu, NULL, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        colo_metric_set(st->m_proc_cpu, NULL,
                        (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                            (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
}

static colo_status register_device_metrics(colo_api *a, api_stats *st)
{
    colo_metrics *m = a->metrics;
    const char *const L[] = {"device"}, *const LW[] = {"device", "worker"},
                      *const LI[] = {"device", "name", "source"};
    st->m_util = colo_metrics_gauge(m, "colo_device_utilization_ratio",
                                    "Device busy: SM utilisation (NVML) or the CPU pool's time running chunks.", 1, L);
    st->m_bw = colo_metrics_gauge(m, "colo_device_memory_bandwidth_utilization_ratio",
                                  "Time the device memory was read or written (NVML).", 1, L);
    st->m_mem_used = colo_metrics_gauge(m, "colo_device_memory_used_bytes",
                                        "Device memory in use by every process (CPU: the host's).", 1, L);
    st->m_mem_total = colo_metrics_gauge(m, "colo_device_memory_total_bytes", "Device memory (CPU: the host's).", 1,
                                         L);
    st->m_proc_mem = colo_metrics_gauge(m, "colo_device_process_memory_bytes",
                                        "colo-server's own memory on the device (CPU: resident).", 1, L);
    st->m_power = colo_metrics_gauge(m, "colo_device_power_watts", "Power draw.", 1, L);
    st->m_sm_clock = colo_metrics_gauge(m, "colo_device_sm_clock_hertz", "SM clock.", 1, L);
    st->m_mem_clock = colo_metrics_gauge(m, "colo_device_memory_clock_hertz", "Memory clock.", 1, L);
    st->m_temp = colo_metrics_gauge(m, "colo_device_temperature_celsius", "Device temperature.", 1, L);
    st->m_worker = colo_metrics_gauge(m, "colo_device_worker_utilization_ratio",
                                      "CPU pool worker busy: its thread's CPU time over wall time.", 2, LW);
    st->m_info = colo_metrics_gauge(m, "colo_device_info", "The device (always 1), its name and telemetry source.",
                                    3, LI);
    const char *const LS[] = {"device", "state"};
    st->m_pool_time = colo_metrics_counter(m, "colo_device_worker_seconds_total",
                                           "CPU pool worker time by state (busy: running chunks; ready: idle while a "
                                           "chunk waited to be handed out; barrier: idle while every queued op's "
                                           "chunks were out; starved: idle with no op queued).",
                                           2, LS);
    st->m_pool_ops = colo_metrics_counter(m, "colo_device_pool_ops_total", "Ops the CPU pool finished.", 1, L);
    st->m_pool_chunks = colo_metrics_counter(m, "colo_device_pool_chunks_total", "Chunks the CPU pool ran.", 1, L);
    st->m_pool_lock_waits = colo_metrics_counter(m, "colo_device_pool_lock_waits_total",
                                                 "Acquisitions of the CPU pool's lock that had to wait.", 1, L);
    st->m_pool_lock_wait = colo_metrics_counter(m, "colo_device_pool_lock_wait_seconds_total",
                                                "Time spent waiting for the CPU pool's lock.", 1, L);
    st->m_loop_cpu = colo_metrics_counter(m, "colo_server_loop_cpu_seconds_total",
                                          "CPU time of the HTTP event loop's thread.", 0, NULL);
    st->m_proc_cpu = colo_metrics_counter(m, "process_cpu_seconds_total", "User and system CPU time of the process.",
                                          0, NULL);
    colo_metric *all[] = {st->m_util, st->m_bw, st->m_mem_used, st->m_mem_total, st->m_proc_mem, st->m_power,
                          st->m_sm_clock, st->m_mem_clock, st->m_temp, st->m_worker, st->m_info, st->m_pool_time,
                          st->m_pool_ops, st->m_pool_chunks, st->m_pool_lock_waits, st->m_pool_lock_wait,
                          st->m_loop_cpu, st->m_proc_cpu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!all[i])
            return COLO_ENOMEM;
    return colo_metrics_on_render(m, on_render_device, st);
}

/* ---- the history ---------------------------------------------------------------------- */

static void take_model(colo_api *a, colo_registry_model *am, model_point *p)
{
    colo_served_info in;
    colo_served_get_info(am->m, &in);
    p->state = in.state;
    p->queue_depth = in.queue_depth;
    p->running = in.running;
    p->limit_bytes = in.mem.limit_bytes;
    p->guaranteed_bytes = in.mem.guaranteed_bytes;
    p->borrowed_bytes = in.mem.borrowed_bytes;
    p->lent_bytes = in.mem.lent_bytes;
    p->used_bytes = in.mem.used_bytes;
    p->peak_bytes = in.mem.peak_bytes;
    p->weight_bytes = in.weight_bytes;
    p->kv_bytes = in.kv_bytes;
    p->kv_used_bytes = in.kv_used_bytes;
    p->spec_drafted = in.spec_drafted;
    p->spec_accepted = in.spec_accepted;
    memcpy(p->spec_src_drafted, in.spec_src_drafted, sizeof p->spec_src_drafted);
    memcpy(p->spec_src_accepted, in.spec_src_accepted, sizeof p->spec_src_accepted);
    p->spec_draft_passes = in.spec_draft_passes;
    p->spec_draft_ns = in.spec_draft_ns;
    const char *lm[] = {am->name}, *lall[] = {am->name, NULL}, *lok[] = {am->name, "200"};
    colo_metric_reading r;
    colo_metric_read(a->m_requests, lall, &r);
    p->requests = r.value;
    colo_metric_read(a->m_requests, lok, &r);
    p->ok = r.value;
    colo_metric_read(in.task == COLO_TASK_GENERATE ? a->m_gen_tokens : a->m_prompt_tokens, lm, &r);
    p->tokens = r.value;
    colo_metric_read(a->m_batch, lm, &r);
    p->batch_sum = r.sum;
    p->batch_count = (double)r.count;
    colo_metric_read(a->m_duration, lm, &r);
    memcpy(p->dur, r.counts, sizeof p->dur);
    colo_metric_read(a->m_ttft, lm, &r);
    memcpy(p->ttft, r.counts, sizeof p->ttft);
    if (a->m_batch_queued) {
        colo_metric_read(a->m_batch_queued, lm, &r);
        p->batch_queued = r.value;
        colo_metric_read(a->m_batch_running, lm, &r);
        p->batch_running = r.value;
        colo_metric_read(a->m_batch_done, lall, &r);
        p->batch_done = r.value;
    }
    static const char *const objectives[2] = {"e2e", "ttft"};
    for (int k = 0; k < 2; k++) {
        colo_metric_read(a->m_slo, (const char *const[]){am->name, objectives[k], "met"}, &r);
        p->slo_met[k] = r.value;
        colo_metric_read(a->m_slo, (const char *const[]){am->name, objectives[k], NULL}, &r);
        p->slo_total[k] = r.value;
    }
}

static void take_point(colo_api *a)
{
    api_stats *st = a->stats;
    point *p = &st->ring[st->head];
    p->seq = ++st->seq;
    p->t_ns = colo_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    p->unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    colo_telemetry_latest(st->tel, &p->dev);
    for (int i = 0; i < st->n_models; i++)
        take_model(a, colo_registry_slot(a->reg, i), &p->m[i]);
    json_decref(p->tenants);
    p->tenants = colo_tenants_stats_json(colo_server_tenants(a->srv)); /* (the loop thread) */
    st->head = (st->head + 1) % st->cap;
    if (st->len < st->cap)
        st->len++;
}

static void on_timer(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    take_point(ud);
}

/* The k-th newest point (0 = newest); k < len. */
static const point *nth_newest(const api_stats *st, int k)
{
    return &st->ring[(st->head - 1 - k + 2 * st->cap) % st->cap];
}

/* ---- /v1/stats --------------------------------------------------------------------------- */

/* The value below which a fraction q of the window's observations fall,
 * interpolated within its bucket as Prometheus's histogram_quantile does;
 * NAN without observations. */
static double quantile(const double *bounds, int nb, const uint64_t *now, const uint64_t *then, double q)
{
    double total = 0;
    for (int b = 0; b <= nb; b++)
        total += (double)(now[b] - then[b]);
    if (total <= 0)
        return NAN;
    double rank = q * total, cum = 0;
    for (int b = 0; b <= nb; b++) {
        double c = (double)(now[b] - then[b]);
        if (cum + c >= rank && c > 0) {
            if (b == nb)
                return bounds[nb - 1]; /* past the last bound: its bound, as Prometheus */
            double lo = b ? bounds[b - 1] : 0;
            return lo + (bounds[b] - lo) * (rank - cum) / c;
        }
        cum += c;
    }
    return bounds[nb - 1];
}

/* Met over all in the window for SLO objective k; NAN without requests. */
static double attainment(const model_point *n, const model_point *t, int k)
{
    double all = n->slo_total[k] - t->slo_total[k];
    return all > 0 ? (n->slo_met[k] - t->slo_met[k]) / all : NAN;
}

/* Sets key to v unless v is unknown (NAN). */
static void put_real(json_t *o, const char *key, double v)
{
    if (!isnan(v))
        json_object_set_new(o, key, json_real(v));
}

/* Byte counts as integers (exact past 2^53 is not needed; 9 digits of a real are not enough). */
static void put_bytes(json_t *o, const char *key, double v)
{
    if (!isnan(v))
        json_object_set_new(o, key, json_integer((json_int_t)v));
}

static json_t *device_json(const api_stats *st, const point *p)
{
    const colo_device_sample *s = &p->dev;
    json_t *d = json_pack("{s:s, s:s, s:s, s:s}", "device", s->device, "name", st->info.name, "kind",
                          st->info.kind == COLO_BACKEND_CUDA ? "cuda" : "cpu", "source", s->source);
    if (!d)
        return NULL;
    put_real(d, "utilization_ratio", s->utilization_ratio);
    put_real(d, "memory_bandwidth_utilization_ratio", s->memory_bandwidth_utilization_ratio);
    put_bytes(d, "memory_used_bytes", s->memory_used_bytes);
    put_bytes(d, "memory_total_bytes", s->memory_total_bytes);
    put_bytes(d, "process_memory_bytes", s->process_memory_bytes);
    put_real(d, "power_watts", s->power_watts);
    put_real(d, "sm_clock_hz", s->sm_clock_hz);
    put_real(d, "memory_clock_hz", s->memory_clock_hz);
    put_real(d, "temperature_celsius", s->temperature_celsius);
    if (s->n_workers > 0) {
        json_t *w = json_array();
        for (int i = 0; w && i < s->n_workers; i++) {
            json_t *o = json_pack("{s:i}", "worker", i);
            put_real(o, "utilization_ratio", s->worker_utilization_ratio[i]);
            json_array_append_new(w, o);
        }
        json_object_set_new(d, "workers", w);
    }
    return d;
}

/* The window's figures of model i between points then and now. */
static json_t *window_json(const colo_api *a, int i, const point *now, const point *then)
{
    const model_point *n = &now->m[i], *t = &then->m[i];
    double secs = (double)(now->t_ns - then->t_ns) / 1e9;
    json_t *w = json_pack("{s:f, s:I, s:I}", "seconds", secs, "requests", (json_int_t)(n->requests - t->requests),
                          "errors", (json_int_t)((n->requests - n->ok) - (t->requests - t->ok)));
    if (!w)
        return NULL;
    if (secs > 0) {
        put_real(w, "requests_per_second", (n->requests - t->requests) / secs);
        put_real(w, "tokens_per_second", (n->tokens - t->tokens) / secs);
    }
    int nb, nt;
    const double *lb = colo_metric_buckets(a->m_duration, &nb), *tb = colo_metric_buckets(a->m_ttft, &nt);
    put_real(w, "latency_p50_seconds", quantile(lb, nb, n->dur, t->dur, 0.5));
    put_real(w, "latency_p99_seconds", quantile(lb, nb, n->dur, t->dur, 0.99));
    put_real(w, "ttft_p50_seconds", quantile(tb, nt, n->ttft, t->ttft, 0.5));
    put_real(w, "ttft_p99_seconds", quantile(tb, nt, n->ttft, t->ttft, 0.99));
    double bc = n->batch_count - t->batch_count;
    if (bc > 0)
        put_real(w, "batch_size_mean", (n->batch_sum - t->batch_sum) / bc);
    const colo_sla_cfg *sla = &colo_served_config(colo_registry_slot(a->reg, i)->m)->sla;
    if (sla->p99_ms > 0 || sla->ttft_ms > 0) {
        json_t *slo = json_object();
        if (sla->p99_ms > 0) {
            json_object_set_new(slo, "latency_target_seconds", json_real(sla->p99_ms / 1e3));
            put_real(slo, "latency_attainment_ratio", attainment(n, t, 0));
        }
        if (sla->ttft_ms > 0) {
            json_object_set_new(slo, "ttft_target_seconds", json_real(sla->ttft_ms / 1e3));
            put_real(slo, "ttft_attainment_ratio", attainment(n, t, 1));
        }
        json_object_set_new(w, "slo", slo);
    }
    return w;
}

static json_t *model_json(const colo_api *a, const api_stats *st, int i, int end, const point *then)
{
    const point *now = nth_newest(st, end);
    const model_point *p = &now->m[i];
    const colo_registry_model *e = colo_registry_slot(a->reg, i);
    const colo_model_cfg *mc = colo_served_config(e->m);
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "name", e->name, "kind", mc->kind, "state",
                          colo_served_state_name(p->state), "priority", colo_priority_name(mc->priority),
                          "queue_depth", p->queue_depth, "running", p->running, "max_batch_size",
                          mc->batching.max_batch_size);
    size_t free_bytes = p->limit_bytes > p->used_bytes ? p->limit_bytes - p->used_bytes : 0;
    json_t *mem = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "guaranteed_bytes", (json_int_t)p->guaranteed_bytes,
                            "used_bytes", (json_int_t)p->used_bytes, "free_bytes", (json_int_t)free_bytes, "peak_bytes",
                            (json_int_t)p->peak_bytes, "weights_bytes", (json_int_t)p->weight_bytes, "borrowed_bytes",
                            (json_int_t)p->borrowed_bytes, "lent_bytes", (json_int_t)p->lent_bytes);
    if (!m || !mem || (a->m_batch_queued &&
                       json_object_set_new(m, "batch_lines",
                                           json_pack("{s:i, s:i, s:i}", "queued", (int)p->batch_queued, "running",
                                                     (int)p->batch_running, "completed", (int)p->batch_done)))) {
        json_decref(m);
        json_decref(mem);
        return NULL;
    }
    if (p->kv_bytes) {
        json_object_set_new(mem, "kv_cache_bytes", json_integer((json_int_t)p->kv_bytes));
        json_object_set_new(mem, "kv_cache_used_bytes", json_integer((json_int_t)p->kv_used_bytes));
    }
    json_object_set_new(m, "memory", mem);
    if (mc->sm_share > 0)
        json_object_set_new(m, "sm_share", json_real(mc->sm_share));
    json_object_set_new(m, "totals", json_pack("{s:I, s:I}", "requests", (json_int_t)p->requests, "tokens", (json_int_t)p->tokens));
    if (mc->speculative.lookup || mc->speculative.suffix || mc->speculative.draft[0]) {
        json_t *sp = json_pack("{s:I, s:I}", "drafted_tokens", (json_int_t)p->spec_drafted, "accepted_tokens",
                               (json_int_t)p->spec_accepted);
        if (sp && p->spec_drafted)
            json_object_set_new(sp, "acceptance_ratio", json_real((double)p->spec_accepted / (double)p->spec_drafted));
        if (sp && mc->speculative.draft[0]) {
            json_object_set_new(sp, "draft", json_string(mc->speculative.draft));
            json_object_set_new(sp, "draft_passes", json_integer((json_int_t)p->spec_draft_passes));
            json_object_set_new(sp, "draft_seconds", json_real((double)p->spec_draft_ns / 1e9));
        }
        /* by source, those the config turns on */
        const bool on[COLO_SPEC_SOURCES] = {[COLO_SPEC_SOURCE_LOOKUP] = mc->speculative.lookup,
                                            [COLO_SPEC_SOURCE_SUFFIX] = mc->speculative.suffix,
                                            [COLO_SPEC_SOURCE_DRAFT] = mc->speculative.draft[0] != 0};
        json_t *by = sp ? json_object() : NULL;
        for (int k = 0; by && k < COLO_SPEC_SOURCES; k++)
            if (on[k])
                json_object_set_new(by, colo_spec_source_name((colo_spec_source)k),
                                    json_pack("{s:I, s:I}", "drafted_tokens", (json_int_t)p->spec_src_drafted[k],
                                              "accepted_tokens", (json_int_t)p->spec_src_accepted[k]));
        if (by)
            json_object_set_new(sp, "sources", by);
        json_object_set_new(m, "speculative", sp);
    }
    json_object_set_new(m, "window", window_json(a, i, now, then));
    /* per-interval rates, oldest first, one per history step */
    json_t *rps = json_array(), *tps = json_array();
    for (int k = st->len - 2; k >= end; k--) {
        const point *b = nth_newest(st, k + 1), *e = nth_newest(st, k);
        double secs = (double)(e->t_ns - b->t_ns) / 1e9;
        json_array_append_new(rps, json_real(secs > 0 ? (e->m[i].requests - b->m[i].requests) / secs : 0));
        json_array_append_new(tps, json_real(secs > 0 ? (e->m[i].tokens - b->m[i].tokens) / secs : 0));
    }
    json_object_set_new(m, "history", json_pack("{s:o, s:o}", "requests_per_second", rps, "tokens_per_second", tps));
    return m;
}

/* The whole answer as of the point end steps before the newest. */
static json_t *stats_json(const colo_api *a, const api_stats *st, int end)
{
    const point *now = nth_newest(st, end);
    /* the window starts at the oldest point within WINDOW_SECONDS */
    int start = end;
    while (start + 1 < st->len &&
           (double)(now->t_ns - nth_newest(st, start + 1)->t_ns) / 1e9 <= WINDOW_SECONDS + 1e-3)
        start++;
    const point *then = nth_newest(st, start);
    json_t *o = json_pack("{s:I, s:I, s:f, s:f, s:i, s:{s:s}}", "seq", (json_int_t)now->seq, "time_ms",
                          (json_int_t)now->unix_ms, "interval_seconds", st->interval_ms / 1e3, "window_seconds",
                          (double)(now->t_ns - then->t_ns) / 1e9, "history_seconds", HISTORY_SECONDS, "scheduler",
                          "policy", a->policy);
    json_t *models = json_array(), *times = json_array(), *util = json_array();
    if (!o || !models || !times || !util) {
        json_decref(o);
        json_decref(models);
        json_decref(times);
        json_decref(util);
        return NULL;
    }
    for (int k = st->len - 2; k >= end; k--) {
        const point *e = nth_newest(st, k);
        json_array_append_new(times, json_integer(e->unix_ms));
        json_array_append_new(util, isnan(e->dev.utilization_ratio) ? json_null() : json_real(e->dev.utilization_ratio));
    }
    json_object_set_new(o, "device", device_json(st, now));
    json_object_set_new(o, "history", json_pack("{s:o, s:o}", "time_ms", times, "device_utilization_ratio", util));
    for (int i = 0; i < st->n_models; i++)
        json_array_append_new(models, model_json(a, st, i, end, then));
    json_object_set_new(o, "models", models);
    /* per tenant usage at the point */
    json_object_set_new(o, "tenants", now->tenants ? json_incref(now->tenants) : json_array());
    return o;
}

static void h_stats(colo_http_req *req, void *ud)
{
    colo_api *a = ud;
    api_stats *st = a->stats;
    int end = 0;
    const char *q = colo_http_req_query(req);
    if (!strncmp(q, "seq=", 4)) {
        char *e;
        unsigned long long want = strtoull(q + 4, &e, 10);
        if (e == q + 4 || (*e && *e != '&')) {
            colo_http_error(req, 400, "invalid_request", "seq must be a point's number");
            return;
        }
        while (end < st->len && nth_newest(st, end)->seq != want)
            end++;
        if (end == st->len) {
            colo_http_error(req, 404, "not_found", "that point is no longer (or not yet) in the history");
            return;
        }
    }
    json_t *o = stats_json(a, st, end);
    if (!o) {
        colo_http_error(req, 500, "internal_error", "could not render the statistics");
        return;
    }
    colo_http_respond_json(req, 200, o);
}

static void h_dashboard(colo_http_req *req, void *ud)
{
    (void)ud;
    colo_http_add_header(req, "Cache-Control", "no-cache");
    colo_http_add_header(req, "Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                         "connect-src 'self'; img-src data:");
    colo_http_respond(req, 200, "text/html; charset=utf-8", colo_dashboard_html, colo_dashboard_html_len);
}

/* ---- life ------------------------------------------------------------------------------------ */

colo_status colo_api_watch(colo_api *a, colo_device *dev, int interval_ms, char *err, size_t errlen)
{
    api_stats *st = calloc(1, sizeof *st);
    if (!st) {
        colo_set_err(err, errlen, "out of memory");
        return COLO_ENOMEM;
    }
    a->stats = st;
    st->interval_ms = interval_ms;
    st->n_models = colo_registry_start_models(a->reg);
    st->cap = HISTORY_SECONDS * 1000 / interval_ms + 2;
    st->cap = st->cap > MAX_POINTS ? MAX_POINTS : st->cap;
    st->dev = dev;
    colo_device_get_info(dev, &st->info);
    for (int i = 0; i < st->cap; i++)
        if (!(st->ring[i].m = calloc((size_t)(st->n_models ? st->n_models : 1), sizeof(model_point)))) {
            colo_set_err(err, errlen, "out of memory");
            return COLO_ENOMEM;
        }
    if (!(st->tel = colo_telemetry_start(dev, interval_ms, err, errlen)))
        return COLO_ERR;
    if (register_device_metrics(a, st) != COLO_OK) {
        colo_set_err(err, errlen, "cannot register the device metrics");
        return COLO_ENOMEM;
    }
    struct timeval tv = {interval_ms / 1000, (interval_ms % 1000) * 1000};
    st->timer = event_new(colo_http_server_base(a->http), -1, EV_PERSIST, on_timer, a);
    if (!st->timer || event_add(st->timer, &tv)) {
        colo_set_err(err, errlen, "cannot start the statistics timer");
        return COLO_ERR;
    }
    take_point(a);
    if (colo_server_route(a->srv, "GET", "/v1/stats", h_stats, a, COLO_ROUTE_OPERATOR) != COLO_OK ||
        colo_server_route(a->srv, "GET", "/dashboard", h_dashboard, a, COLO_ROUTE_OPERATOR) != COLO_OK) {
        colo_set_err(err, errlen, "cannot add the statistics routes");
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

void colo_api_unwatch(colo_api *a)
{
    api_stats *st = a ? a->stats : NULL;
    if (!st)
        return;
    if (st->timer)
        event_free(st->timer);
    st->timer = NULL;
    colo_telemetry_stop(st->tel);
    st->tel = NULL;
}

void colo_api_stats_free(colo_api *a)
{
    api_stats *st = a->stats;
    if (!st)
        return;
    colo_api_unwatch(a);
    for (int i = 0; i < st->cap; i++) {
        free(st->ring[i].m);
        json_decref(st->ring[i].tenants);
    }
    free(st);
    a->stats = NULL;
}
