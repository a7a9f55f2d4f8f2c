/* The model endpoints' metric families (docs/API.md lists them). */
#include "server/api/api_impl.h"
#include "batching/admission.h"

#include <stddef.h>
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

/* The SLO targets by their bit in colo_admission_slo_met (bit k: slo_names[k]). */
static const char *const slo_names[3] = {"ttft", "tpot", "e2e"};

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
    const colo_sla_cfg *sla = r->sla ? r->sla : &colo_served_config(c->am->m)->sla; /* an adapter's own */
    unsigned set, met = colo_admission_slo_met(sla, r, &set);
    if (!set)
        return;
    for (int k = 0; k < 3; k++)
        if (set & (1u << k))
            colo_metric_add(c->api->m_slo,
                            (const char *const[]){c->name, slo_names[k], met & (1u << k) ? "met" : "missed"}, 1);
    if (met == set)
        colo_metric_add(c->api->m_goodput, (const char *const[]){c->name}, 1);
}

/* /v1/models: the model's SLA, what admission does past it, and its
 * attainment so far (the counters above); NULL without an SLA. */
json_t *colo_api_slo_json(const colo_api *a, const colo_registry_model *am)
{
    return colo_api_slo_json_of(a, am->name, &colo_served_config(am->m)->sla);
}

json_t *colo_api_slo_json_of(const colo_api *a, const char *name, const colo_sla_cfg *sla)
{
    const double target[3] = {sla->ttft_ms, sla->tpot_ms, sla->p99_ms};
    if (!(target[0] > 0 || target[1] > 0 || target[2] > 0))
        return NULL;
    json_t *o = json_object();
    for (int k = 0; o && k < 3; k++) {
        if (!(target[k] > 0))
            continue;
        colo_metric_reading met, missed;
        colo_metric_read(a->m_slo, (const char *const[]){name, slo_names[k], "met"}, &met);
        colo_metric_read(a->m_slo, (const char *const[]){name, slo_names[k], "missed"}, &missed);
        json_object_set_new(o, slo_names[k], json_pack("{s:f,s:I,s:I}", "target_ms", target[k], "met",
                                                   (json_int_t)met.value, "missed", (json_int_t)missed.value));
    }
    colo_metric_reading good;
    colo_metric_read(a->m_goodput, (const char *const[]){name}, &good);
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
    const char *model = c->name;
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
    for (colo_registry_model *e = NULL; (e = colo_registry_next(a->reg, e));) {
        colo_served_info in;
        colo_served_get_info(e->m, &in);
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
        colo_metric_set(a->m_sleep_preemptions, lm, (double)in.sleep_preemptions);
        colo_metric_set(a->m_sched_cold, (const char *const[]){in.name, a->policy}, (double)in.sched_cold_steps);
        colo_metric_set(a->m_trims, lm, (double)in.trims);
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
            colo_metric_set(a->m_spec_drafted, lm, (double)in.spec_drafted);
            colo_metric_set(a->m_spec_accepted, lm, (double)in.spec_accepted);
            colo_metric_set(a->m_spec_steps, lm, (double)in.spec_steps);
            /* by source: the sources the model's config turns on, so that
             * models that do not speculate add no series */
            for (int k = 0; k < COLO_SPEC_SOURCES; k++) {
                const char *ls[] = {in.name, colo_spec_source_name((colo_spec_source)k)};
                if (!in.spec_src_on[k])
                    continue;
                colo_metric_set(a->m_spec_src_drafted, ls, (double)in.spec_src_drafted[k]);
                colo_metric_set(a->m_spec_src_accepted, ls, (double)in.spec_src_accepted[k]);
            }
            if (in.spec_src_on[COLO_SPEC_SOURCE_DRAFT]) {
                colo_metric_set(a->m_spec_draft_passes, lm, (double)in.spec_draft_passes);
                colo_metric_set(a->m_spec_draft_time, lm, (double)in.spec_draft_ns / 1e9);
            }
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

/* The per-model metric families: a handle in colo_api each. */
typedef enum metric_type { M_COUNTER, M_GAUGE, M_LATENCY, M_BATCH, M_STEP } metric_type;

typedef struct metric_def {
    size_t off; /* the colo_metric * in colo_api */
    metric_type type;
    const char *name, *help;
    int n_labels;
    const char *const *labels;
} metric_def;

#define L_MODEL ((const char *const[]){"model"})
#define L_MODEL_STATUS ((const char *const[]){"model", "status"})
#define L_MODEL_PRIORITY ((const char *const[]){"model", "priority"})
#define L_MODEL_POLICY ((const char *const[]){"model", "policy"})
#define L_MODEL_STATE ((const char *const[]){"model", "state"})
#define L_MODEL_STEP ((const char *const[]){"model", "step"})
#define L_MODEL_PHASE ((const char *const[]){"model", "phase"})
#define L_MODEL_SOURCE ((const char *const[]){"model", "source"})

static const metric_def metric_defs[] = {
    {offsetof(colo_api, m_requests), M_COUNTER, "colo_model_requests_total",
     "Model requests finished, by HTTP status.", 2, L_MODEL_STATUS},
    {offsetof(colo_api, m_duration), M_LATENCY, "colo_model_request_duration_seconds",
     "Submit to done, successful requests.", 1, L_MODEL},
    {offsetof(colo_api, m_queue), M_LATENCY, "colo_model_queue_duration_seconds",
     "Time in the model's queue before the first step.", 2, L_MODEL_PRIORITY},
    {offsetof(colo_api, m_prefill), M_LATENCY, "colo_model_prefill_duration_seconds",
     "First step to first token (generation) or the batch's compute (encoders).", 1, L_MODEL},
    {offsetof(colo_api, m_decode), M_LATENCY, "colo_model_decode_duration_seconds",
     "First token to last token.", 1, L_MODEL},
    {offsetof(colo_api, m_ttft), M_LATENCY, "colo_model_time_to_first_token_seconds",
     "Submit to first token.", 1, L_MODEL},
    {offsetof(colo_api, m_itl), M_STEP, "colo_model_inter_token_latency_seconds",
     "Time between generated tokens (each request's mean gap, once per gap).", 1, L_MODEL},
    {offsetof(colo_api, m_gen_tokens), M_COUNTER, "colo_model_generated_tokens_total",
     "Tokens generated.", 1, L_MODEL},
    {offsetof(colo_api, m_prompt_tokens), M_COUNTER, "colo_model_prompt_tokens_total",
     "Prompt or input tokens processed.", 1, L_MODEL},
    {offsetof(colo_api, m_batch), M_BATCH, "colo_model_batch_size",
     "Sequences (generation) or requests (encoders) per step.", 1, L_MODEL},
    {offsetof(colo_api, m_step), M_STEP, "colo_model_step_duration_seconds",
     "One executor step.", 1, L_MODEL},
    {offsetof(colo_api, m_depth), M_GAUGE, "colo_model_queue_depth",
     "Requests waiting in the model's queue.", 1, L_MODEL},
    {offsetof(colo_api, m_queue_cap), M_GAUGE, "colo_model_queue_capacity",
     "Requests the model's queue holds before it answers 429.", 1, L_MODEL},
    {offsetof(colo_api, m_info), M_GAUGE, "colo_model_info",
     "A served model (always 1), its kind and priority.", 3, (const char *const[]){"model", "kind", "priority"}},
    {offsetof(colo_api, m_sched_info), M_GAUGE, "colo_scheduler_info",
     "The co-scheduler (always 1) and its policy.", 1, (const char *const[]){"policy"}},
    {offsetof(colo_api, m_slo), M_COUNTER, "colo_model_slo_requests_total",
     "Requests of models with an SLA, by objective (ttft: first token against sla.ttft_ms; tpot: every gap"
     " between tokens against sla.tpot_ms; e2e: total time against sla.p99_ms) and result (met; missed, "
     "also when refused or timed out).", 3, (const char *const[]){"model", "slo", "result"}},
    {offsetof(colo_api, m_goodput), M_COUNTER, "colo_model_goodput_requests_total",
     "Requests that met every objective of their model's SLA.", 1, L_MODEL},
    {offsetof(colo_api, m_running), M_GAUGE, "colo_model_running",
     "Requests in the model's executor.", 1, L_MODEL},
    {offsetof(colo_api, m_mem_used), M_GAUGE, "colo_model_memory_used_bytes",
     "Bytes in use in the model's arena.", 1, L_MODEL},
    {offsetof(colo_api, m_mem_limit), M_GAUGE, "colo_model_memory_limit_bytes",
     "The model's arena size.", 1, L_MODEL},
    {offsetof(colo_api, m_mem_peak), M_GAUGE, "colo_model_memory_peak_bytes",
     "Highest use of the model's arena.", 1, L_MODEL},
    {offsetof(colo_api, m_mem_weights), M_GAUGE, "colo_model_memory_weights_bytes",
     "Bytes of the model's weights.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_bytes), M_GAUGE, "colo_model_kv_cache_bytes",
     "Bytes reserved for the KV cache.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_used_bytes), M_GAUGE, "colo_model_kv_cache_used_bytes",
     "Bytes of KV cache blocks in use.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_total), M_GAUGE, "colo_model_kv_blocks",
     "KV cache blocks of the model.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_free), M_GAUGE, "colo_model_kv_blocks_free",
     "KV cache blocks free.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_usage), M_GAUGE, "colo_model_kv_cache_usage_ratio",
     "KV cache blocks in use over all blocks, 0 to 1.", 1, L_MODEL},
    {offsetof(colo_api, m_ready), M_GAUGE, "colo_model_ready",
     "1 when the model serves requests.", 1, L_MODEL},
    {offsetof(colo_api, m_preempt), M_COUNTER, "colo_model_preemptions_total",
     "Sequences preempted for cache space.", 1, L_MODEL},
    {offsetof(colo_api, m_sched_wait), M_COUNTER, "colo_scheduler_wait_seconds_total",
     "Time executors waited for the co-scheduler, by policy.", 2, L_MODEL_POLICY},
    {offsetof(colo_api, m_sched_steps), M_COUNTER, "colo_scheduler_steps_total",
     "Steps granted by the co-scheduler.", 2, L_MODEL_POLICY},
    {offsetof(colo_api, m_sched_cold), M_COUNTER, "colo_scheduler_cold_steps_total",
     "Steps that were the first of a request that woke the model (cold), by policy.", 2, L_MODEL_POLICY},
    {offsetof(colo_api, m_mem_guaranteed), M_GAUGE, "colo_model_memory_guaranteed_bytes",
     "The model's guaranteed memory (memory_fraction).", 1, L_MODEL},
    {offsetof(colo_api, m_mem_borrowed), M_GAUGE, "colo_model_memory_borrowed_bytes",
     "Bytes the model uses past its guarantee.", 1, L_MODEL},
    {offsetof(colo_api, m_mem_lent), M_GAUGE, "colo_model_memory_lent_bytes",
     "Bytes of the model's idle guarantee other models use now.", 1, L_MODEL},
    {offsetof(colo_api, m_kv_reclaims), M_COUNTER, "colo_model_kv_reclaims_total",
     "Times the model was asked to give borrowed KV memory back.", 1, L_MODEL},
    {offsetof(colo_api, m_wake), M_LATENCY, "colo_model_wake_seconds",
     "Time a sleeping model took to wake.", 1, L_MODEL},
    {offsetof(colo_api, m_state), M_GAUGE, "colo_model_state",
     "1 for the model's current state.", 2, L_MODEL_STATE},
    {offsetof(colo_api, m_evictions), M_COUNTER, "colo_model_evictions_total",
     "Times the model was put to sleep to make room for another.", 1, L_MODEL},
    {offsetof(colo_api, m_sleep_preemptions), M_COUNTER, "colo_model_sleep_preemptions_total",
     "Of the evictions, times the model was put to sleep with requests running or queued (kept queued) to make "
     "room for a model of higher priority.", 1, L_MODEL},
    {offsetof(colo_api, m_trims), M_COUNTER, "colo_model_guarantee_lends_total",
     "Times the idle model dropped its cached KV blocks and lent its unused guarantee to make room for another.", 1,
     L_MODEL},
    {offsetof(colo_api, m_stream_cut), M_COUNTER, "colo_model_streams_unread_total",
     "Streams canceled and closed because their client did not read them.", 1, L_MODEL},
    {offsetof(colo_api, m_render_deferred), M_COUNTER, "colo_stream_render_deferred_total",
     "Turns of the event loop whose budget for rendering stream events was spent with streams left to render "
     "(rendered on the next turn).", 0, NULL},
    {offsetof(colo_api, m_render_held), M_COUNTER, "colo_stream_render_held_total",
     "Times a stream's events were not rendered because its connection held 256 KiB unsent (rendered once it "
     "has written them).", 0, NULL},
    {offsetof(colo_api, m_render_peak), M_GAUGE, "colo_stream_render_pass_peak_bytes",
     "The most bytes of stream events one turn of the event loop rendered.", 0, NULL},
    {offsetof(colo_api, m_prefix_queries), M_COUNTER, "colo_model_prefix_cache_queries_total",
     "Sequences admitted that looked up the prefix cache.", 1, L_MODEL},
    {offsetof(colo_api, m_prefix_hits), M_COUNTER, "colo_model_prefix_cache_hits_total",
     "Prompt tokens found in the prefix cache (not computed).", 1, L_MODEL},
    {offsetof(colo_api, m_prefix_bytes), M_GAUGE, "colo_model_prefix_cache_bytes",
     "Bytes of KV blocks in the prefix cache (in use or evictable).", 1, L_MODEL},
    {offsetof(colo_api, m_spec_drafted), M_COUNTER, "colo_model_speculative_drafted_tokens_total",
     "Tokens drafted by speculative decoding and verified in a step.", 1, L_MODEL},
    {offsetof(colo_api, m_spec_accepted), M_COUNTER, "colo_model_speculative_accepted_tokens_total",
     "Of the drafted tokens, those the model's own sampling picked (each a step saved).", 1, L_MODEL},
    {offsetof(colo_api, m_spec_steps), M_COUNTER, "colo_model_speculative_verifications_total",
     "Sequences' steps that verified a draft.", 1, L_MODEL},
    {offsetof(colo_api, m_spec_src_drafted), M_COUNTER, "colo_model_speculative_source_drafted_tokens_total",
     "Drafted tokens by where the draft came from: lookup (the sequence's own text), suffix (the suffix cache) "
     "or draft (the draft model).", 2, L_MODEL_SOURCE},
    {offsetof(colo_api, m_spec_src_accepted), M_COUNTER, "colo_model_speculative_source_accepted_tokens_total",
     "Accepted tokens by where their draft came from (lookup, suffix, draft).", 2, L_MODEL_SOURCE},
    {offsetof(colo_api, m_spec_draft_passes), M_COUNTER, "colo_model_speculative_draft_passes_total",
     "Forward passes of the draft model for the model's drafts (one pass computes a token for every sequence "
     "drafting with it in the step).", 1, L_MODEL},
    {offsetof(colo_api, m_spec_draft_time), M_COUNTER, "colo_model_speculative_draft_seconds_total",
     "Time in the draft model's passes for the model's drafts (part of the steps' plan phase).", 1, L_MODEL},
    {offsetof(colo_api, m_steps_kind), M_COUNTER, "colo_model_steps_total",
     "Generation steps by what they computed: decode (every sequence its next token), prefill (prompt "
     "tokens only) or mixed.", 2, L_MODEL_STEP},
    {offsetof(colo_api, m_step_tokens), M_COUNTER, "colo_model_step_tokens_total",
     "Tokens computed in generation steps, by the step's kind.", 2, L_MODEL_STEP},
    {offsetof(colo_api, m_step_time), M_COUNTER, "colo_model_step_phase_seconds_total",
     "The executor's time in generation steps by phase: plan (the batch), queue (the forward pass's ops), "
     "device (waiting for them), sample.", 2, L_MODEL_PHASE},
    {offsetof(colo_api, m_dev_busy), M_COUNTER, "colo_model_device_busy_seconds_total",
     "CPU pool worker time spent on the model's ops.", 1, L_MODEL},
    {offsetof(colo_api, m_ops), M_COUNTER, "colo_model_ops_total",
     "Ops the model's stream finished (CPU pool).", 1, L_MODEL},
    {offsetof(colo_api, m_chunks), M_COUNTER, "colo_model_chunks_total",
     "Chunks of the model's ops run (CPU pool).", 1, L_MODEL},
};

colo_status colo_api_register_metrics(colo_api *a)
{
    colo_metrics *m = a->metrics;
    for (size_t i = 0; i < sizeof metric_defs / sizeof *metric_defs; i++) {
        const metric_def *d = &metric_defs[i];
        colo_metric **h = (colo_metric **)(void *)((char *)a + d->off);
        const double *b = d->type == M_BATCH ? batch_buckets : d->type == M_STEP ? step_buckets
                                                                                : colo_metrics_latency_buckets;
        int nb = d->type == M_BATCH   ? (int)(sizeof batch_buckets / sizeof *batch_buckets)
                 : d->type == M_STEP ? (int)(sizeof step_buckets / sizeof *step_buckets)
                                     : colo_metrics_latency_buckets_n;
        if (d->type == M_COUNTER)
            *h = colo_metrics_counter(m, d->name, d->help, d->n_labels, d->labels);
        else if (d->type == M_GAUGE)
            *h = colo_metrics_gauge(m, d->name, d->help, d->n_labels, d->labels);
        else
            *h = colo_metrics_histogram(m, d->name, d->help, d->n_labels, d->labels, b, nb);
        if (!*h)
            return COLO_ENOMEM;
    }
    return colo_metrics_on_render(m, on_render, a);
}
