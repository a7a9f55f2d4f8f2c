/* The model endpoints' metric families (docs/API.md lists them). */
#include "server/api_impl.h"
#include "batching/admission.h"

#include <jansson.h>

#include <stdio.h>

static const double batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
static const double step_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

void colo_api_count_request(colo_api *a, const char *model, int http_status)
{
    char status[8];
    snprintf(status, sizeof status, "%d", http_status);
    const char *ls[] = {model, status};
    colo_metric_add(a->m_requests, ls, 1);
}

/* Per objective of the model's SLA, met or missed; a request that met every
 * one counts toward goodput. Requests served (also best-effort past an
 * estimate), refused by admission, or timed out in the queue count; client
 * errors and cancellations do not. */
void colo_api_record_slo(const api_call *c)
{
    const colo_request *r = c->r;
    colo_status st = r->out.status;
    if (!(st == COLO_OK || st == COLO_ETIMEDOUT || r->slo.refused))
        return;
    unsigned set, met = colo_admission_slo_met(&colo_served_config(c->am->m)->sla, r, &set);
    if (!set)
        return;
    static const char *const names[3] = {"ttft", "tpot", "e2e"};
    for (int k = 0; k < 3; k++)
        if (set & (1u << k))
            colo_metric_add(c->api->m_slo,
                            (const char *const[]){c->am->name, names[k], met & (1u << k) ? "met" : "missed"}, 1);
    if (met == set)
        colo_metric_add(c->api->m_goodput, (const char *const[]){c->am->name}, 1);
}

/* /v1/models: the model's SLA, what admission does past it, and its
 * attainment so far (the counters above); NULL without an SLA. */
json_t *colo_api_slo_json(const colo_api *a, const api_model *am)
{
    const colo_sla_cfg *sla = &colo_served_config(am->m)->sla;
    const double target[3] = {sla->ttft_ms, sla->tpot_ms, sla->p99_ms};
    if (!(target[0] > 0 || target[1] > 0 || target[2] > 0))
        return NULL;
    static const char *const names[3] = {"ttft", "tpot", "e2e"};
    json_t *o = json_object();
    for (int k = 0; o && k < 3; k++) {
        if (!(target[k] > 0))
            continue;
        colo_metric_reading met, missed;
        colo_metric_read(a->m_slo, (const char *const[]){am->name, names[k], "met"}, &met);
        colo_metric_read(a->m_slo, (const char *const[]){am->name, names[k], "missed"}, &missed);
        json_object_set_new(o, names[k], json_pack("{s:f,s:I,s:I}", "target_ms", target[k], "met",
                                                   (json_int_t)met.value, "missed", (json_int_t)missed.value));
    }
    colo_metric_reading good;
    colo_metric_read(a->m_goodput, (const char *const[]){am->name}, &good);
    if (o) {
        json_object_set_new(o, "goodput_requests", json_integer((json_int_t)good.value));
        json_object_set_new(o, "on_overload", json_string(sla->reject_late ? "reject" : "serve"));
    }
    return o;
}

void colo_api_record(const api_call *c, int http_status)
{
    colo_api *a = c->api;
    const colo_req_outcome *o = &c->r->out;
    const char *model = c->am->name;
    const char *lm[] = {model};
    colo_api_count_request(a, model, http_status);
    colo_api_record_slo(c);
    /* Tokens computed count whatever became of the request (a client that
     * hung up mid-stream, a stream cut at shutdown), as the ledger does. */
    if (o->n_input_tokens > 0)
        colo_metric_add(a->m_prompt_tokens, lm, o->n_input_tokens);
    int64_t generated = colo_api_completion_tokens(c->r);
    if (generated > 0)
        colo_metric_add(a->m_gen_tokens, lm, (double)generated);
    if (o->status != COLO_OK)
        return;
    const char *lq[] = {model, colo_priority_name(c->r->who.priority)};
    colo_metric_observe(a->m_duration, lm, o->total_ms / 1e3);
    colo_metric_observe(a->m_queue, lq, o->queue_ms / 1e3);
    colo_metric_observe(a->m_prefill, lm, o->prefill_ms / 1e3);
    if (c->r->task != COLO_TASK_GENERATE)
        return;
    colo_metric_observe(a->m_decode, lm, o->decode_ms / 1e3);
    if (o->n_tokens > 0)
        colo_metric_observe(a->m_ttft, lm, o->ttft_ms / 1e3);
    /* the mean gap, once per gap: the histogram's sum and count stay exact */
    for (int i = 1; i < o->n_tokens; i++)
        colo_metric_observe(a->m_itl, lm, o->decode_ms / 1e3 / (o->n_tokens - 1));
}

void colo_api_on_step(void *ud, const char *model, int batch, int tokens, double step_ms, double wait_ms)
{
    (void)tokens;
    colo_api *a = ud;
    const char *lm[] = {model};
    const char *lp[] = {model, a->policy};
    colo_metric_observe(a->m_batch, lm, batch);
    colo_metric_observe(a->m_step, lm, step_ms / 1e3);
    colo_metric_add(a->m_sched_steps, lp, 1);
    colo_metric_add(a->m_sched_wait, lp, wait_ms / 1e3);
}

void colo_api_on_wake(void *ud, const char *model, double wake_s)
{
    colo_api *a = ud;
    const char *lm[] = {model};
    colo_metric_observe(a->m_wake, lm, wake_s);
}

static void on_render(void *ud)
{
    colo_api *a = ud;
    colo_metric_set(a->m_sched_info, (const char *const[]){a->policy}, 1);
    for (int i = 0; i < a->n_models; i++) {
        if (a->models[i].unloaded)
            continue;
        colo_served_info in;
        colo_served_get_info(a->models[i].m, &in);
        const char *lm[] = {in.name};
        colo_metric_set(a->m_depth, lm, in.queue_depth);
        colo_metric_set(a->m_queue_cap, lm, in.max_queue);
        colo_metric_set(a->m_info, (const char *const[]){in.name, in.kind, colo_priority_name(in.priority)}, 1);
        colo_metric_set(a->m_running, lm, in.running);
        colo_metric_set(a->m_mem_used, lm, (double)in.mem.used_bytes);
        colo_metric_set(a->m_mem_limit, lm, (double)in.mem.limit_bytes);
        colo_metric_set(a->m_mem_peak, lm, (double)in.mem.peak_bytes);
        colo_metric_set(a->m_ready, lm, in.state == COLO_SERVED_READY);
        colo_metric_set(a->m_mem_weights, lm, (double)in.weight_bytes);
        colo_metric_set(a->m_mem_guaranteed, lm, (double)in.mem.guaranteed_bytes);
        colo_metric_set(a->m_mem_borrowed, lm, (double)in.mem.borrowed_bytes);
        colo_metric_set(a->m_mem_lent, lm, (double)in.mem.lent_bytes);
        colo_metric_set(a->m_kv_reclaims, lm, (double)in.mem.reclaims);
        colo_metric_set(a->m_evictions, lm, (double)in.evictions);
        colo_metric_set(a->m_dev_busy, lm, (double)in.stream.busy_ns / 1e9);
        colo_metric_set(a->m_ops, lm, (double)in.stream.ops);
        colo_metric_set(a->m_chunks, lm, (double)in.stream.chunks);
        static const colo_served_state states[] = {COLO_SERVED_LOADING, COLO_SERVED_READY, COLO_SERVED_SLEEPING,
                                                   COLO_SERVED_WAKING, COLO_SERVED_DRAINING, COLO_SERVED_FAILED};
        for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
            const char *ls[] = {in.name, colo_served_state_name(states[s])};
            colo_metric_set(a->m_state, ls, in.state == states[s]);
        }
        if (in.task == COLO_TASK_GENERATE) {
            colo_metric_set(a->m_kv_bytes, lm, (double)in.kv_bytes);
            colo_metric_set(a->m_kv_used_bytes, lm, (double)in.kv_used_bytes);
            colo_metric_set(a->m_kv_total, lm, in.kv_blocks);
            colo_metric_set(a->m_kv_free, lm, in.kv_free_blocks);
            colo_metric_set(a->m_preempt, lm, (double)in.preemptions);
            if (in.kv_blocks > 0)
                colo_metric_set(a->m_kv_usage, lm, (double)(in.kv_blocks - in.kv_free_blocks) / in.kv_blocks);
            colo_metric_set(a->m_prefix_queries, lm, (double)in.prefix_queries);
            colo_metric_set(a->m_prefix_hits, lm, (double)in.prefix_hit_tokens);
            colo_metric_set(a->m_prefix_bytes, lm, (double)in.prefix_cached_bytes);
            static const char *const kinds[] = {"decode", "prefill", "mixed"};
            for (int k = 0; k < 3; k++) {
                const char *lk[] = {in.name, kinds[k]};
                colo_metric_set(a->m_steps_kind, lk, (double)in.steps_by_kind[k]);
                colo_metric_set(a->m_step_tokens, lk, (double)in.tokens_by_kind[k]);
            }
            /* the forward pass: queuing its ops, then waiting for the device */
            uint64_t wait = in.stream.sync_wait_ns < in.forward_ns ? in.stream.sync_wait_ns : in.forward_ns;
            static const char *const phases[] = {"plan", "queue", "device", "sample"};
            const uint64_t ns[] = {in.plan_ns, in.forward_ns - wait, wait, in.sample_ns};
            for (int k = 0; k < 4; k++)
                colo_metric_set(a->m_step_time, (const char *const[]){in.name, phases[k]}, (double)ns[k] / 1e9);
        }
    }
}

colo_status colo_api_register_metrics(colo_api *a)
{
    colo_metrics *m = a->metrics;
    const char *const L1[] = {"model"}, *const L2s[] = {"model", "status"}, *const L2p[] = {"model", "priority"},
                      *const L2pol[] = {"model", "policy"};
    const double *lb = colo_metrics_latency_buckets;
    int nlb = colo_metrics_latency_buckets_n;
    int nbb = (int)(sizeof batch_buckets / sizeof *batch_buckets);
    int nsb = (int)(sizeof step_buckets / sizeof *step_buckets);
    a->m_requests = colo_metrics_counter(m, "colo_model_requests_total", "Model requests finished, by HTTP status.",
                                         2, L2s);
    a->m_duration = colo_metrics_histogram(m, "colo_model_request_duration_seconds",
                                           "Submit to done, successful requests.", 1, L1, lb, nlb);
    a->m_queue = colo_metrics_histogram(m, "colo_model_queue_duration_seconds",
                                        "Time in the model's queue before the first step.", 2, L2p, lb, nlb);
    a->m_prefill = colo_metrics_histogram(m, "colo_model_prefill_duration_seconds",
                                          "First step to first token (generation) or the batch's compute (encoders).",
                                          1, L1, lb, nlb);
    a->m_decode = colo_metrics_histogram(m, "colo_model_decode_duration_seconds", "First token to last token.", 1,
                                         L1, lb, nlb);
    a->m_ttft = colo_metrics_histogram(m, "colo_model_time_to_first_token_seconds", "Submit to first token.", 1, L1,
                                       lb, nlb);
    a->m_itl = colo_metrics_histogram(m, "colo_model_inter_token_latency_seconds",
                                      "Time between generated tokens (each request's mean gap, once per gap).", 1, L1,
                                      step_buckets, nsb);
    a->m_gen_tokens = colo_metrics_counter(m, "colo_model_generated_tokens_total", "Tokens generated.", 1, L1);
    a->m_prompt_tokens = colo_metrics_counter(m, "colo_model_prompt_tokens_total", "Prompt or input tokens processed.",
                                              1, L1);
    a->m_batch = colo_metrics_histogram(m, "colo_model_batch_size", "Sequences (generation) or requests (encoders) per step.",
                                        1, L1, batch_buckets, nbb);
    a->m_step = colo_metrics_histogram(m, "colo_model_step_duration_seconds", "One executor step.", 1, L1, step_buckets,
                                       nsb);
    a->m_depth = colo_metrics_gauge(m, "colo_model_queue_depth", "Requests waiting in the model's queue.", 1, L1);
    a->m_queue_cap = colo_metrics_gauge(m, "colo_model_queue_capacity",
                                        "Requests the model's queue holds before it answers 429.", 1, L1);
    a->m_info = colo_metrics_gauge(m, "colo_model_info", "A served model (always 1), its kind and priority.", 3,
                                   (const char *const[]){"model", "kind", "priority"});
    a->m_sched_info = colo_metrics_gauge(m, "colo_scheduler_info", "The co-scheduler (always 1) and its policy.", 1,
                                         (const char *const[]){"policy"});
    a->m_slo = colo_metrics_counter(m, "colo_model_slo_requests_total",
                                    "Requests of models with an SLA, by objective (ttft: first token against "
                                    "sla.ttft_ms; tpot: every gap between tokens against sla.tpot_ms; e2e: total "
                                    "time against sla.p99_ms) and result (met; missed, also when refused or "
                                    "timed out).",
                                    3, (const char *const[]){"model", "slo", "result"});
    a->m_goodput = colo_metrics_counter(m, "colo_model_goodput_requests_total",
                                        "Requests that met every objective of their model's SLA.", 1, L1);
    a->m_running = colo_metrics_gauge(m, "colo_model_running", "Requests in the model's executor.", 1, L1);
    a->m_mem_used = colo_metrics_gauge(m, "colo_model_memory_used_bytes", "Bytes in use in the model's arena.", 1, L1);
    a->m_mem_limit = colo_metrics_gauge(m, "colo_model_memory_limit_bytes", "The model's arena size.", 1, L1);
    a->m_mem_peak = colo_metrics_gauge(m, "colo_model_memory_peak_bytes", "Highest use of the model's arena.", 1, L1);
    a->m_mem_weights = colo_metrics_gauge(m, "colo_model_memory_weights_bytes", "Bytes of the model's weights.", 1,
                                          L1);
    a->m_kv_bytes = colo_metrics_gauge(m, "colo_model_kv_cache_bytes", "Bytes reserved for the KV cache.", 1, L1);
    a->m_kv_used_bytes = colo_metrics_gauge(m, "colo_model_kv_cache_used_bytes", "Bytes of KV cache blocks in use.",
                                            1, L1);
    a->m_kv_total = colo_metrics_gauge(m, "colo_model_kv_blocks", "KV cache blocks of the model.", 1, L1);
    a->m_kv_free = colo_metrics_gauge(m, "colo_model_kv_blocks_free", "KV cache blocks free.", 1, L1);
    a->m_kv_usage = colo_metrics_gauge(m, "colo_model_kv_cache_usage_ratio",
                                       "KV cache blocks in use over all blocks, 0 to 1.", 1, L1);
    a->m_ready = colo_metrics_gauge(m, "colo_model_ready", "1 when the model serves requests.", 1, L1);
    a->m_preempt = colo_metrics_counter(m, "colo_model_preemptions_total", "Sequences preempted for cache space.", 1,
                                        L1);
    a->m_sched_wait = colo_metrics_counter(m, "colo_scheduler_wait_seconds_total",
                                           "Time executors waited for the co-scheduler, by policy.", 2, L2pol);
    a->m_sched_steps = colo_metrics_counter(m, "colo_scheduler_steps_total", "Steps granted by the co-scheduler.", 2,
                                            L2pol);
    a->m_mem_guaranteed = colo_metrics_gauge(m, "colo_model_memory_guaranteed_bytes",
                                             "The model's guaranteed memory (memory_fraction).", 1, L1);
    a->m_mem_borrowed = colo_metrics_gauge(m, "colo_model_memory_borrowed_bytes",
                                           "Bytes the model uses past its guarantee.", 1, L1);
    a->m_mem_lent = colo_metrics_gauge(m, "colo_model_memory_lent_bytes",
                                       "Bytes of the model's idle guarantee other models use now.", 1, L1);
    a->m_kv_reclaims = colo_metrics_counter(m, "colo_model_kv_reclaims_total",
                                            "Times the model was asked to give borrowed KV memory back.", 1, L1);
    a->m_wake = colo_metrics_histogram(m, "colo_model_wake_seconds", "Time a sleeping model took to wake.", 1, L1, lb,
                                       nlb);
    const char *const L2st[] = {"model", "state"};
    a->m_state = colo_metrics_gauge(m, "colo_model_state", "1 for the model's current state.", 2, L2st);
    a->m_evictions = colo_metrics_counter(m, "colo_model_evictions_total",
                                          "Times the model was put to sleep to make room for another.", 1, L1);
    a->m_stream_cut = colo_metrics_counter(m, "colo_model_streams_unread_total",
                                           "Streams canceled and closed because their client did not read them.", 1,
                                           L1);
    if (!a->m_evictions || !a->m_stream_cut)
        return COLO_ENOMEM;
    if (!a->m_mem_guaranteed || !a->m_mem_borrowed || !a->m_mem_lent || !a->m_kv_reclaims || !a->m_wake ||
        !a->m_state)
        return COLO_ENOMEM;
    a->m_prefix_queries = colo_metrics_counter(m, "colo_model_prefix_cache_queries_total",
                                               "Sequences admitted that looked up the prefix cache.", 1, L1);
    a->m_prefix_hits = colo_metrics_counter(m, "colo_model_prefix_cache_hits_total",
                                            "Prompt tokens found in the prefix cache (not computed).", 1, L1);
    a->m_prefix_bytes = colo_metrics_gauge(m, "colo_model_prefix_cache_bytes",
                                           "Bytes of KV blocks in the prefix cache (in use or evictable).", 1, L1);
    if (!a->m_prefix_queries || !a->m_prefix_hits || !a->m_prefix_bytes)
        return COLO_ENOMEM;
    const char *const L2k[] = {"model", "step"}, *const L2ph[] = {"model", "phase"};
    a->m_steps_kind = colo_metrics_counter(m, "colo_model_steps_total",
                                           "Generation steps by what they computed: decode (every sequence its next "
                                           "token), prefill (prompt tokens only) or mixed.",
                                           2, L2k);
    a->m_step_tokens = colo_metrics_counter(m, "colo_model_step_tokens_total",
                                            "Tokens computed in generation steps, by the step's kind.", 2, L2k);
    a->m_step_time = colo_metrics_counter(m, "colo_model_step_phase_seconds_total",
                                          "The executor's time in generation steps by phase: plan (the batch), "
                                          "queue (the forward pass's ops), device (waiting for them), sample.",
                                          2, L2ph);
    a->m_dev_busy = colo_metrics_counter(m, "colo_model_device_busy_seconds_total",
                                         "CPU pool worker time spent on the model's ops.", 1, L1);
    a->m_ops = colo_metrics_counter(m, "colo_model_ops_total", "Ops the model's stream finished (CPU pool).", 1, L1);
    a->m_chunks = colo_metrics_counter(m, "colo_model_chunks_total", "Chunks of the model's ops run (CPU pool).", 1,
                                       L1);
    if (!a->m_steps_kind || !a->m_step_tokens || !a->m_step_time || !a->m_dev_busy || !a->m_ops || !a->m_chunks)
        return COLO_ENOMEM;
    colo_metric *all[] = {a->m_requests, a->m_duration, a->m_queue, a->m_prefill, a->m_decode, a->m_ttft,
                          a->m_itl, a->m_gen_tokens, a->m_prompt_tokens, a->m_batch, a->m_step, a->m_depth,
                          a->m_running, a->m_mem_used, a->m_mem_limit, a->m_mem_peak, a->m_kv_total, a->m_kv_free,
                          a->m_ready, a->m_preempt, a->m_sched_wait, a->m_sched_steps, a->m_mem_weights,
                          a->m_kv_bytes, a->m_kv_used_bytes, a->m_queue_cap, a->m_slo, a->m_info, a->m_sched_info, a->m_goodput};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!all[i])
            return COLO_ENOMEM;
    if (!a->m_kv_usage)
        return COLO_ENOMEM;
    return colo_metrics_on_render(m, on_render, a);
}
