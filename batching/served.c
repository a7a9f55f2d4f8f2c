/* A served model's lifecycle, queue and submission; the executors are in
 * served_continuous.c and served_dynamic.c. */
#include "batching/served_impl.h"
#include "batching/evictor.h"
#include "batching/share.h"
#include "runtime/fault.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* how long a wake that found no room waits before it tries again */
#define WAKE_RETRY_NS (20ull * 1000 * 1000)

const char *colo_spec_source_name(colo_spec_source s)
{
    switch (s) {
    case COLO_SPEC_SOURCE_LOOKUP: return "lookup";
    case COLO_SPEC_SOURCE_SUFFIX: return "suffix";
    case COLO_SPEC_SOURCE_DRAFT: return "draft";
    case COLO_SPEC_SOURCES: break;
    }
    return "unknown";
}

const char *colo_served_state_name(colo_served_state s)
{
    switch (s) {
    case COLO_SERVED_LOADING: return "loading";
    case COLO_SERVED_READY: return "ready";
    case COLO_SERVED_FAILED: return "failed";
    case COLO_SERVED_STOPPING: return "stopping";
    case COLO_SERVED_SLEEPING: return "sleeping";
    case COLO_SERVED_WAKING: return "waking";
    case COLO_SERVED_DRAINING: return "draining";
    }
    return "unknown";
}

static double ms_between(uint64_t a, uint64_t b) { return b > a && a ? (double)(b - a) / 1e6 : 0.0; }

/* ---- loading ------------------------------------------------------------------ */

static size_t budget_of(const colo_served_env *env)
{
    return env->budget_bytes ? env->budget_bytes : colo_arena_device_budget(env->dev);
}

static const colo_model_kind *kind_of(const colo_model_cfg *mc, char *err, size_t errlen)
{
    const colo_model_kind *k = colo_kind_find(mc->kind);
    if (!k) {
        char names[256];
        colo_kind_names(names, sizeof names);
        colo_set_err(err, errlen, "unknown kind '%s' (known: %s)", mc->kind, names);
    }
    return k;
}

colo_status colo_served_check(const colo_model_cfg *mc, size_t budget_bytes, char *err, size_t errlen)
{
    return colo_served_plan(mc, budget_bytes, NULL, 0, err, errlen);
}

static double mib(size_t b) { return (double)b / (1 << 20); }

colo_status colo_served_plan(const colo_model_cfg *mc, size_t budget_bytes, char *plan, size_t plan_len, char *err,
                             size_t errlen)
{
    const colo_model_kind *k = kind_of(mc, err, errlen);
    if (!k)
        return COLO_EINVAL;
    size_t limit = (size_t)((double)budget_bytes * mc->memory_fraction);
    colo_kind_memory mem;
    colo_status st = k->memory_need(mc, &mem, err, errlen);
    if (st != COLO_OK)
        return st;
    size_t need = mem.weight_bytes + mem.act_bytes + mem.kv_min_bytes + mem.overhead_bytes;
    if (need <= limit) {
        if (plan && k->task == COLO_TASK_GENERATE) {
            size_t rest = limit - (need - mem.kv_min_bytes);
            double full = (double)mem.kv_min_bytes * mem.max_batch;
            snprintf(plan, plan_len,
                     "%s: weights %.1f MiB, activations %.1f MiB (%d tokens per step), KV cache (%s) %.1f MiB per "
                     "%d-token sequence, %.1f MiB for %d full-length sequences; memory_fraction %g gives %.1f MiB, "
                     "%.1f MiB of it for the KV cache (%.1f full-length sequences)",
                     mem.what ? mem.what : k->name, mib(mem.weight_bytes), mib(mem.act_bytes), mem.step_tokens,
                     colo_dtype_name(mc->kv_dtype), mib(mem.kv_min_bytes), mem.max_seq_len, full / (1 << 20), mem.max_batch, mc->memory_fraction,
                     mib(limit), mib(rest), mem.kv_min_bytes ? (double)rest / mem.kv_min_bytes : 0.0);
        } else if (plan) {
            snprintf(plan, plan_len,
                     "%s: weights %.1f MiB, activations %.1f MiB (batches of %d inputs of %d tokens); "
                     "memory_fraction %g gives %.1f MiB",
                     mem.what ? mem.what : k->name, mib(mem.weight_bytes), mib(mem.act_bytes), mem.max_batch,
                     mem.max_seq_len, mc->memory_fraction, mib(limit));
        }
        return COLO_OK;
    }
    if (k->task == COLO_TASK_GENERATE)
        colo_set_err(err, errlen,
                     "needs %zu bytes (weights %zu, activations for %d tokens per step %zu, KV cache for one "
                     "%d-token sequence %zu) but memory_fraction %g gives %zu bytes",
                     need, mem.weight_bytes, mem.step_tokens, mem.act_bytes, mem.max_seq_len, mem.kv_min_bytes,
                     mc->memory_fraction, limit);
    else
        colo_set_err(err, errlen,
                     "needs %zu bytes (weights %zu, activations for batches of %d inputs of %d tokens %zu) but "
                     "memory_fraction %g gives %zu bytes",
                     need, mem.weight_bytes, mem.max_seq_len ? mem.step_tokens / mem.max_seq_len : 0,
                     mem.max_seq_len, mem.act_bytes, mc->memory_fraction, limit);
    return COLO_ENOMEM;
}

static void sink_done(void *ud, colo_request *r, uint64_t first_step_ns, uint64_t first_token_ns, uint64_t done_ns);
static bool sink_token(void *ud, colo_request *r, int32_t token, const char *piece, size_t len);
/* Interactive requests queued: a step of lines of batches gives way to them. */
static bool sink_yield(void *ud) { return colo_queue_len_interactive(((colo_served *)ud)->q) > 0; }
static void *prep_main(void *arg);

/* The draft model's (kind_llama's draft_model), locked: target's
 * draft_mu, so that it stays target's draft, and the draft's exec_mu, so
 * that its executor stays between steps, until sink_draft_put. */
static void *sink_draft_get(void *ud, bool wait, uint64_t *epoch)
{
    colo_served *t = ud;
    pthread_mutex_lock(&t->draft_mu);
    colo_served *d = t->draft;
    void *dm = NULL;
    if (!d || (wait ? pthread_mutex_lock(&d->exec_mu) : pthread_mutex_trylock(&d->exec_mu)) != 0)
        goto out_none;
    if (atomic_load(&d->state) == COLO_SERVED_READY && d->inst && d->kind->draft_model)
        dm = d->kind->draft_model(d->inst);
    if (!dm) {
        pthread_mutex_unlock(&d->exec_mu);
        goto out_none;
    }
    /* a later model or a later wake: a larger epoch (batching/spec_draft.h) */
    *epoch = d->uid << 32 | (atomic_load(&d->wakes) & 0xffffffffu);
    atomic_store(&d->last_used_ns, colo_now_ns());
    return dm;
out_none:
    pthread_mutex_unlock(&t->draft_mu);
    return NULL;
}

static void sink_draft_put(void *ud)
{
    colo_served *t = ud;
    pthread_mutex_unlock(&t->draft->exec_mu);
    pthread_mutex_unlock(&t->draft_mu);
}

colo_status colo_served_draft_check(const colo_model_cfg *target, const colo_model_cfg *draft, char *err,
                                    size_t errlen)
{
    const colo_model_kind *kt = colo_kind_find(target->kind), *kd = colo_kind_find(draft->kind);
    if (colo_model_cfg_named(target, draft->name)) {
        colo_set_err(err, errlen, "model %s: speculative.draft: a model cannot draft for itself", target->name);
        return COLO_EINVAL;
    }
    if (draft->speculative.draft[0]) {
        colo_set_err(err, errlen,
                     "model %s: speculative.draft: the draft model %s drafts with a model of its own (%s): a draft "
                     "model decodes plainly",
                     target->name, draft->name, draft->speculative.draft);
        return COLO_EINVAL;
    }
    if (!kt || kt != kd || !kt->draft_check) {
        colo_set_err(err, errlen,
                     "model %s: speculative.draft: model %s (kind %s) cannot draft for a model of kind %s: a draft "
                     "model is a generative model of the same kind",
                     target->name, draft->name, draft->kind, target->kind);
        return COLO_EINVAL;
    }
    return kt->draft_check(target, draft, err, errlen);
}

void colo_served_set_draft(colo_served *target, colo_served *draft)
{
    pthread_mutex_lock(&target->draft_mu);
    target->draft = draft;
    pthread_mutex_unlock(&target->draft_mu);
}

colo_served *colo_served_get_draft(colo_served *target)
{
    pthread_mutex_lock(&target->draft_mu);
    colo_served *d = target->draft;
    pthread_mutex_unlock(&target->draft_mu);
    return d;
}

colo_served *colo_served_create(const colo_model_cfg *mc, const colo_served_env *env, char *err, size_t errlen)
{
    colo_served *m = calloc(1, sizeof *m);
    if (!m) {
        colo_set_err(err, errlen, "model %s: out of memory", mc->name);
        return NULL;
    }
    m->cfg = *mc;
    m->env = *env;
    m->state = COLO_SERVED_LOADING;
    atomic_store(&m->pinned, mc->pinned);
    atomic_store(&m->keep_alive_ms, mc->keep_alive_ms);
    pthread_mutex_init(&m->info_mu, NULL);
    pthread_mutex_init(&m->prep_mu, NULL);
    pthread_mutex_init(&m->exec_mu, NULL);
    pthread_mutex_init(&m->draft_mu, NULL);
    static _Atomic uint64_t uids;
    m->uid = atomic_fetch_add(&uids, 1) + 1;
    pthread_cond_init(&m->prep_cv, NULL);
    char e[512] = "";
    if (!(m->kind = kind_of(mc, e, sizeof e)) ||
        !(m->q = colo_queue_create(mc->batching.max_queue > 0 ? mc->batching.max_queue : 256)) ||
        !(m->adm = colo_admission_create(mc)) || colo_served_adapters_create(m) != COLO_OK) {
        colo_set_err(err, errlen, "model %s: %s", mc->name, e[0] ? e : "out of memory");
        colo_served_free(m);
        return NULL;
    }
    colo_queue_set_max_tokens(m->q, mc->batching.max_queue_tokens);
    return m;
}

/* The arena: elastic in the pool (making room for its guarantee first
 * when an evictor is given), else fixed. */
static colo_arena *make_arena(colo_served *m, size_t budget, char *e, size_t elen, colo_status *st)
{
    const colo_model_cfg *mc = &m->cfg;
    const colo_served_env *env = &m->env;
    *st = COLO_ERR;
    if (!env->pool)
        return colo_arena_create(env->dev, mc->name, mc->memory_fraction, budget, e, elen);
    double ceil_f = mc->memory_max_fraction > mc->memory_fraction ? mc->memory_max_fraction : mc->memory_fraction;
    size_t g = (size_t)((double)budget * mc->memory_fraction);
    /* what the model holds outside its arena is counted against the budget too */
    colo_kind_memory mem;
    if ((*st = m->kind->memory_need(mc, &mem, e, elen)) != COLO_OK)
        return NULL;
    size_t host = colo_device_kind(env->dev) == COLO_BACKEND_CPU ? mem.host_bytes : 0; /* CUDA: not device memory */
    bool claimed = false;
    if (env->evictor) { /* even when it fits: see take_guarantee */
        if (colo_evictor_claim(env->evictor, g + colo_mem_pool_hold_cost(env->pool, host), m, mc->name, e, elen) !=
            COLO_OK) {
            *st = COLO_ENOMEM;
            return NULL;
        }
        claimed = true;
    }
    colo_arena *a = NULL;
    if ((*st = colo_mem_pool_hold(env->pool, host)) != COLO_OK)
        snprintf(e, elen, "its host memory (%.1f MiB: tokenizer, executor) and its guarantee (%.1f MiB) do not fit "
                          "the budget beside the other models' guarantees",
                 mib(host), mib(g));
    else if (!(a = colo_arena_create_elastic(env->dev, mc->name, env->pool, g, (size_t)((double)budget * ceil_f), e,
                                             elen)))
        colo_mem_pool_unhold(env->pool, host);
    else
        m->host_held = host;
    if (claimed)
        colo_evictor_unclaim(env->evictor);
    if (!a)
        *st = COLO_ENOMEM;
    return a;
}

/* Leaves the co-scheduler and frees the stream and the arena (the model's
 * memory goes back to the device and the pool). */
static void leave_device(colo_served *m)
{
    colo_cosched_leave(m->member);
    m->member = NULL;
    colo_stream_destroy(m->stream);
    m->stream = NULL;
    colo_arena_destroy(m->arena);
    m->arena = NULL;
    colo_mem_pool_unhold(m->env.pool, m->host_held);
    m->host_held = 0;
}

colo_status colo_served_load_in(colo_served *m, char *err, size_t errlen)
{
    uint64_t t0 = colo_now_ns();
    const colo_model_cfg *mc = &m->cfg;
    const colo_served_env *env = &m->env;
    char e[768] = "";
    size_t budget = budget_of(env);
    char plan[512];
    colo_status st = colo_served_plan(mc, budget, plan, sizeof plan, e, sizeof e);
    if (st != COLO_OK)
        goto fail;
    COLO_INFO("model %s: %s", mc->name, plan);
    if (!(m->arena = make_arena(m, budget, e, sizeof e, &st)))
        goto fail;
    st = COLO_ERR;
    colo_stream_config sc = env->stream;
    sc.exact_activations = mc->exact_activations;
    if (!(m->stream = colo_stream_create(env->dev, &sc, e, sizeof e))) {
        if (!e[0])
            snprintf(e, sizeof e, "out of memory");
        goto fail;
    }
    /* the model's own priority: best-effort under priority, the deadline weight under deadline */
    if (env->cs && !(m->member = colo_cosched_join(env->cs, mc->name, mc->priority))) {
        snprintf(e, sizeof e, "cannot join the co-scheduler");
        goto fail;
    }
    colo_kind_sink sink = {.token = sink_token, .done = sink_done, .yield = sink_yield, .ud = m};
    if (mc->speculative.draft[0]) {
        sink.draft_get = sink_draft_get;
        sink.draft_put = sink_draft_put;
    }
    if (!(m->inst = m->kind->load(&m->cfg, m->arena, m->stream, &sink, e, sizeof e)))
        goto fail;
    colo_kind_info in;
    m->kind->info(m->inst, &in);
    pthread_mutex_lock(&m->info_mu);
    m->info = in;
    pthread_mutex_unlock(&m->info_mu);
    m->load_ms = ms_between(t0, colo_now_ns());
    colo_served_adapters_loaded(m);
    return COLO_OK;

fail:
    colo_set_err(err, errlen, "model %s (%s): %s", mc->name, mc->path, e);
    leave_device(m);
    snprintf(m->error, sizeof m->error, "%s", e);
    m->state = COLO_SERVED_FAILED;
    colo_served_adapters_failed(m, e);
    return st;
}

void colo_served_set_failed(colo_served *m, const char *msg)
{
    snprintf(m->error, sizeof m->error, "%s", msg);
    m->state = COLO_SERVED_FAILED;
    colo_served_adapters_failed(m, msg);
}

colo_status colo_served_wake_fits(colo_served *m, size_t *need_bytes, size_t *avail_bytes)
{
    *need_bytes = *avail_bytes = 0;
    if (!m->env.pool || m->state != COLO_SERVED_SLEEPING || !m->arena)
        return COLO_OK;
    colo_arena_stats st;
    colo_arena_get_stats(m->arena, &st);
    size_t full = colo_arena_guarantee_full(m->arena);
    if (st.guaranteed_bytes >= full)
        return COLO_OK;
    *need_bytes = full - st.guaranteed_bytes;
    *avail_bytes = m->env.evictor ? colo_evictor_available(m->env.evictor, m) : colo_mem_pool_unguaranteed(m->env.pool);
    return *need_bytes > *avail_bytes ? COLO_ENOMEM : COLO_OK;
}

colo_served *colo_served_load(const colo_model_cfg *mc, const colo_served_env *env, char *err, size_t errlen)
{
    colo_served *m = colo_served_create(mc, env, err, errlen);
    if (m && colo_served_load_in(m, err, errlen) != COLO_OK) {
        colo_served_free(m);
        return NULL;
    }
    return m;
}

/* ---- finishing requests --------------------------------------------------------- */

void colo_served_finish(colo_served *m, colo_request *r, colo_status st, const char *msg)
{
    colo_served_adapter_release(m, r);
    uint64_t now = colo_now_ns();
    r->out.status = st;
    r->out.error = msg;
    r->out.total_ms = ms_between(r->submit_ns, now);
    r->out.queue_ms = r->out.total_ms;
    r->cb.on_done(r);
}

static void sink_done(void *ud, colo_request *r, uint64_t first_step_ns, uint64_t first_token_ns, uint64_t done_ns)
{
    colo_served *m = ud;
    for (int i = 0; i < m->n_live; i++)
        if (m->live[i] == r) {
            m->live[i] = m->live[--m->n_live];
            break;
        }
    m->running = m->n_live; /* before the answer is out: a client that has it sees the model idle */
    colo_share_close(r, done_ns); /* its part of the step it ends in */
    colo_req_outcome *o = &r->out;
    uint64_t first = first_step_ns ? first_step_ns : done_ns;
    o->queue_ms = ms_between(r->submit_ns, first);
    o->prefill_ms = first_token_ns ? ms_between(first, first_token_ns) : 0;
    o->decode_ms = first_token_ns ? ms_between(first_token_ns, done_ns) : 0;
    o->total_ms = ms_between(r->submit_ns, done_ns);
    o->ttft_ms = first_token_ns ? ms_between(r->submit_ns, first_token_ns) : 0;
    colo_served_adapter_release(m, r);
    r->cb.on_done(r);
}

static bool sink_token(void *ud, colo_request *r, int32_t token, const char *piece, size_t len)
{
    (void)ud;
    colo_admission_on_token(r, colo_now_ns());
    if (!r->params.stream || !r->cb.on_token)
        return true;
    return r->cb.on_token(r, token, piece, len);
}

void colo_served_expire_queued(colo_served *m)
{
    colo_queue_item *items[64];
    int n;
    while ((n = colo_queue_take_expired(m->q, colo_now_ns(), items, 64)) > 0)
        for (int i = 0; i < n; i++)
            colo_served_finish(m, items[i]->owner, COLO_ETIMEDOUT, "the request waited in the queue past its deadline");
}

void colo_served_drain_queue(colo_served *m, colo_status st, const char *msg)
{
    colo_queue_item *it;
    while ((it = colo_queue_pop(m->q)))
        colo_served_finish(m, it->owner, st, msg);
}

void colo_served_mark_failed(colo_served *m, const char *msg)
{
    snprintf(m->error, sizeof m->error, "%s", msg);
    m->state = COLO_SERVED_FAILED;
    colo_queue_close(m->q);
    COLO_ERROR("model %s: failed: %s", m->cfg.name, msg);
}

bool colo_served_device_lost(colo_served *m)
{
    if (!colo_device_poisoned(m->env.dev))
        return false;
    colo_served_mark_failed(m, "the device context was lost");
    return true;
}

void colo_served_refresh_info(colo_served *m)
{
    colo_kind_info in;
    m->kind->info(m->inst, &in);
    colo_admission_set_prefill(m->adm, in.prefill_tok_ns);
    colo_stream_stats ss;
    colo_stream_get_stats(m->stream, &ss);
    pthread_mutex_lock(&m->info_mu);
    m->info = in;
    m->stream_stats = ss;
    pthread_mutex_unlock(&m->info_mu);
}

void colo_served_count_step(colo_served *m, int batch, int tokens, uint64_t t0_ns, uint64_t t1_ns, uint64_t wait_ns)
{
    m->steps++;
    colo_admission_record_step(m->adm, batch, ms_between(t0_ns, t1_ns));
    if (m->env.hooks.on_step)
        m->env.hooks.on_step(m->env.hooks.ud, m->cfg.name, batch, tokens, ms_between(t0_ns, t1_ns),
                             (double)wait_ns / 1e6);
}

/* ---- executor and preparing threads ---------------------------------------------- */

static void *executor(void *arg)
{
    colo_served *m = arg;
    if (m->kind->task == COLO_TASK_GENERATE)
        colo_served_run_continuous(m);
    else
        colo_served_run_dynamic(m);
    colo_served_drain_queue(m, COLO_ECANCELED, "the server is shutting down");
    return NULL;
}

colo_status colo_served_start(colo_served *m, char *err, size_t errlen)
{
    colo_stream_set_label(m->stream, m->cfg.name); /* stream faults (runtime/fault.h) apply from now */
    int rc = pthread_create(&m->prep_thread, NULL, prep_main, m);
    if (rc) {
        m->state = COLO_SERVED_FAILED;
        colo_set_err(err, errlen, "model %s: cannot start its preparing thread: %s", m->cfg.name, strerror(rc));
        return COLO_ERR;
    }
    m->prep_started = true;
    atomic_store(&m->last_used_ns, colo_now_ns());
    atomic_store(&m->resident_since_ns, colo_now_ns());
    m->state = atomic_load(&m->draining) ? COLO_SERVED_DRAINING : COLO_SERVED_READY; /* unloaded while loading */
    rc = pthread_create(&m->thread, NULL, executor, m);
    if (rc) {
        m->state = COLO_SERVED_FAILED;
        colo_set_err(err, errlen, "model %s: cannot start its executor thread: %s", m->cfg.name, strerror(rc));
        return COLO_ERR;
    }
    m->started = true;
    return COLO_OK;
}

static void stop_prep(colo_served *m)
{
    pthread_mutex_lock(&m->prep_mu);
    m->prep_stop = true;
    pthread_cond_signal(&m->prep_cv);
    pthread_mutex_unlock(&m->prep_mu);
    if (m->prep_started) {
        pthread_join(m->prep_thread, NULL);
        m->prep_started = false;
    }
}

void colo_served_stop(colo_served *m)
{
    if (!m || !m->q)
        return;
    int s = m->state;
    if (s != COLO_SERVED_FAILED)
        m->state = COLO_SERVED_STOPPING;
    atomic_store(&m->stopping, true);
    stop_prep(m);
    colo_queue_close(m->q);
    if (m->started) {
        pthread_join(m->thread, NULL);
        m->started = false;
    }
    colo_served_drain_queue(m, COLO_ECANCELED, "the server is shutting down");
}

void colo_served_unload(colo_served *m)
{
    if (!m)
        return;
    colo_served_stop(m);
    pthread_mutex_lock(&m->exec_mu);
    if (m->kind)
        m->kind->free(m->inst);
    m->inst = NULL;
    pthread_mutex_unlock(&m->exec_mu);
    leave_device(m);
    pthread_mutex_lock(&m->info_mu);
    memset(&m->info, 0, sizeof m->info);
    pthread_mutex_unlock(&m->info_mu);
    COLO_INFO("model %s: unloaded", m->cfg.name);
}

void colo_served_free(colo_served *m)
{
    if (!m)
        return;
    colo_served_stop(m);
    pthread_mutex_lock(&m->exec_mu);
    if (m->kind && m->inst)
        m->kind->free(m->inst);
    m->inst = NULL;
    pthread_mutex_unlock(&m->exec_mu);
    colo_cosched_leave(m->member);
    colo_queue_destroy(m->q);
    colo_stream_destroy(m->stream);
    colo_arena_destroy(m->arena);
    colo_mem_pool_unhold(m->env.pool, m->host_held);
    pthread_mutex_destroy(&m->info_mu);
    pthread_mutex_destroy(&m->prep_mu);
    pthread_mutex_destroy(&m->exec_mu);
    pthread_mutex_destroy(&m->draft_mu);
    pthread_cond_destroy(&m->prep_cv);
    free(m->live);
    colo_admission_free(m->adm);
    colo_served_adapters_free(m);
    free(m);
}

/* ---- submission ------------------------------------------------------------------ */

static size_t input_bytes(const colo_request *r)
{
    if (r->task == COLO_TASK_EMBED) {
        size_t n = 0;
        for (int i = 0; i < r->in.n_texts; i++)
            n += r->in.token_inputs ? (size_t)r->in.token_lens[i] * 4
                 : r->in.text_lens   ? r->in.text_lens[i]
                                     : strlen(r->in.texts[i]);
        return n;
    }
    if (!r->in.messages)
        return r->in.prompt_len;
    size_t n = 0;
    for (int i = 0; i < r->in.n_messages; i++)
        n += strlen(r->in.messages[i].content);
    return n;
}

/* Queues a tokenized request. */
/* States in which a model takes requests (a sleeping one wakes for them). */
static bool accepting(const colo_served *m)
{
    int s = m->state;
    return !atomic_load(&m->draining) &&
           (s == COLO_SERVED_READY || s == COLO_SERVED_SLEEPING || s == COLO_SERVED_WAKING);
}

static colo_status enqueue(colo_served *m, colo_request *r)
{
    if (!accepting(m))
        return COLO_ECANCELED;
    uint64_t to = (uint64_t)m->cfg.batching.queue_timeout_ms * 1000000u;
    r->qi.priority = r->who.priority;
    r->qi.deadline_ns = r->who.deadline_ns ? r->who.deadline_ns : to ? r->submit_ns + to : 0;
    r->qi.owner = r;
    r->qi.length = r->tok.n;
    /* what is ahead of it: the batch class is ahead of nothing */
    int ahead = colo_queue_len_interactive(m->q) + atomic_load(&m->running) - atomic_load(&m->running_batch);
    if (!colo_admission_admit(m->adm, r, ahead))
        return COLO_EAGAIN; /* cannot meet its SLA (on_overload: reject): r->slo says why */
    if (colo_queue_push(m->q, &r->qi) != COLO_OK)
        return colo_queue_closed(m->q) ? COLO_ECANCELED : COLO_EAGAIN;
    return COLO_OK;
}

static const char *enqueue_error(colo_status st)
{
    return st == COLO_EAGAIN ? "the queue is full (requests or tokens)" : "the model is not serving";
}

static void *prep_main(void *arg)
{
    colo_served *m = arg;
    char err[512];
    pthread_mutex_lock(&m->prep_mu);
    for (;;) {
        while (!m->prep_head && !m->prep_stop)
            pthread_cond_wait(&m->prep_cv, &m->prep_mu);
        colo_request *r = m->prep_head;
        if (!r)
            break;
        m->prep_head = r->prep_next;
        if (!m->prep_head)
            m->prep_tail = NULL;
        pthread_mutex_unlock(&m->prep_mu);
        colo_status st = COLO_ECANCELED;
        const char *msg = "the server is shutting down";
        if (atomic_load(&r->canceled)) {
            msg = "canceled";
        } else if (!m->prep_stop) {
            err[0] = 0;
            st = m->kind->tokenize(m->inst, r, err, sizeof err);
            if (st == COLO_OK)
                st = enqueue(m, r);
            msg = st == COLO_OK ? NULL
                  : err[0] && (st == COLO_EINVAL || st == COLO_ETOOLONG || st == COLO_ENOMEM)
                      ? colo_pool_strndup(r->pool, err, strlen(err))
                  : r->slo.refused                                    ? r->slo.reason
                                                                       : enqueue_error(st);
            if (!msg)
                msg = "out of memory";
        }
        if (st != COLO_OK)
            colo_served_finish(m, r, st, msg);
        pthread_mutex_lock(&m->prep_mu);
    }
    pthread_mutex_unlock(&m->prep_mu);
    return NULL;
}

/* r asks for what m's kind does not do (COLO_EINVAL), or m does not serve
 * now (COLO_ECANCELED): the error, with its message. */
static colo_status wrong_task(const colo_served *m, const colo_request *r, char *err, size_t errlen)
{
    colo_set_err(err, errlen, "model %s serves %s, not %s", m->cfg.name, colo_task_name(m->kind->task),
                 colo_task_name(r->task));
    return COLO_EINVAL;
}

static colo_status not_serving(const colo_served *m, char *err, size_t errlen)
{
    colo_set_err(err, errlen, "model %s is %s", m->cfg.name, colo_served_state_name(m->state));
    return COLO_ECANCELED;
}

colo_status colo_served_submit(colo_served *m, colo_request *r, char *err, size_t errlen)
{
    if (r->task != m->kind->task)
        return wrong_task(m, r, err, errlen);
    if (!accepting(m))
        return not_serving(m, err, errlen);
    if (r->adapter && colo_fault_hit(COLO_FAULT_GONE, r->adapter))
        colo_served_adapter_vanish(m, r->adapter);
    colo_status ast = colo_served_adapter_acquire(m, r, err, errlen);
    if (ast != COLO_OK)
        return ast;
    r->submit_ns = colo_now_ns();
    atomic_store(&m->last_used_ns, r->submit_ns);
    atomic_store(&r->canceled, 0);
    memset(&r->out, 0, sizeof r->out);
    if (input_bytes(r) > COLO_SERVED_INLINE_TOKENIZE_BYTES) {
        pthread_mutex_lock(&m->prep_mu);
        bool stopping = m->prep_stop;
        if (!stopping) {
            r->prep_next = NULL;
            if (m->prep_tail)
                m->prep_tail->prep_next = r;
            else
                m->prep_head = r;
            m->prep_tail = r;
            pthread_cond_signal(&m->prep_cv);
        }
        pthread_mutex_unlock(&m->prep_mu);
        if (stopping) {
            colo_served_adapter_release(m, r);
            colo_set_err(err, errlen, "model %s is stopping", m->cfg.name);
            return COLO_ECANCELED;
        }
        return COLO_OK;
    }
    colo_status st = m->kind->tokenize(m->inst, r, err, errlen);
    if (st == COLO_OK && (st = enqueue(m, r)) != COLO_OK)
        colo_set_err(err, errlen, "model %s: %s", m->cfg.name, r->slo.refused ? r->slo.reason : enqueue_error(st));
    if (st != COLO_OK)
        colo_served_adapter_release(m, r);
    return st;
}

/* The kind keeps its tokenizer while the model sleeps and wakes (a
 * submitted request is tokenized then too): tokenizing needs no wake. */
static bool has_tokenizer(const colo_served *m)
{
    int s = m->state;
    return m->inst && (s == COLO_SERVED_READY || s == COLO_SERVED_SLEEPING || s == COLO_SERVED_WAKING);
}

colo_status colo_served_tokenize(colo_served *m, colo_request *r, char *err, size_t errlen)
{
    if (r->task != m->kind->task)
        return wrong_task(m, r, err, errlen);
    if (!has_tokenizer(m))
        return not_serving(m, err, errlen);
    return m->kind->tokenize(m->inst, r, err, errlen);
}

colo_status colo_served_detokenize(colo_served *m, const int32_t *ids, int n, colo_pool *pool, const char **text,
                                   size_t *len, char *err, size_t errlen)
{
    if (!colo_kind_can(m->kind, COLO_KIND_CAN_DETOKENIZE)) {
        colo_set_err(err, errlen, "model %s (%s) has no text output", m->cfg.name, m->kind->name);
        return COLO_EUNSUPPORTED;
    }
    if (!has_tokenizer(m))
        return not_serving(m, err, errlen);
    return m->kind->detokenize(m->inst, ids, n, pool, text, len, err, errlen);
}

void colo_served_cancel(colo_served *m, colo_request *r)
{
    atomic_store(&r->canceled, 1);
    if (colo_queue_remove(m->q, &r->qi)) {
        colo_served_finish(m, r, COLO_ECANCELED, "canceled");
        return;
    }
    colo_queue_wake(m->q);
}

/* ---- information ----------------------------------------------------------------- */

void colo_served_get_info(colo_served *m, colo_served_info *out)
{
    memset(out, 0, sizeof *out);
    out->name = m->cfg.name;
    out->kind = m->kind ? m->kind->name : m->cfg.kind;
    out->task = m->kind ? m->kind->task : COLO_TASK_GENERATE;
    out->state = (colo_served_state)m->state;
    out->error = m->state == COLO_SERVED_FAILED ? m->error : "";
    out->priority = m->cfg.priority;
    out->pinned = atomic_load(&m->pinned);
    out->evictions = atomic_load(&m->evictions);
    out->sleep_preemptions = atomic_load(&m->sleep_preemptions);
    out->trims = atomic_load(&m->trims);
    out->keep_alive_ms = atomic_load(&m->keep_alive_ms);
    if (out->state == COLO_SERVED_LOADING)
        return; /* a load at run time is filling in the rest on another thread */
    if (m->arena)
        colo_arena_get_stats(m->arena, &out->mem);
    out->queue_depth = m->q ? colo_queue_len(m->q) : 0;
    out->max_queue = m->q ? colo_queue_max_len(m->q) : 0;
    out->running = m->running;
    pthread_mutex_lock(&m->info_mu);
    colo_kind_info in = m->info;
    out->stream = m->stream_stats;
    pthread_mutex_unlock(&m->info_mu);
    out->weight_bytes = in.weight_bytes;
    out->act_bytes = in.act_bytes;
    out->kv_bytes = in.kv_bytes;
    out->kv_used_bytes = in.kv_used_bytes;
    out->kv_tokens = in.kv_tokens;
    out->kv_blocks = in.kv_blocks;
    out->kv_free_blocks = in.kv_free_blocks;
    out->kv_block_size = in.kv_block_size;
    out->max_seq_len = in.max_seq_len;
    out->dim = in.dim;
    out->n_vocab = in.n_vocab;
    out->preemptions = in.preemptions;
    out->sleeps = atomic_load(&m->sleeps);
    out->wakes = atomic_load(&m->wakes);
    out->last_wake_ms = (double)atomic_load(&m->last_wake_ns) / 1e6;
    out->in_batch = in.in_batch;
    out->prefix_cache = in.prefix_cache;
    out->prefix_queries = in.prefix_queries;
    out->prefix_hit_tokens = in.prefix_hit_tokens;
    out->prefix_cached_bytes = in.prefix_cached_bytes;
    out->adapter_bytes = in.adapter_bytes;
    out->n_adapters = m->adapters ? (int)colo_served_adapters_count(m) : 0;
    out->load_ms = m->load_ms;
    out->steps = m->steps;
    for (int i = 0; i < 3; i++)
        out->steps_by_kind[i] = in.steps_by_kind[i], out->tokens_by_kind[i] = in.tokens_by_kind[i];
    out->plan_ns = in.plan_ns, out->forward_ns = in.forward_ns, out->sample_ns = in.sample_ns;
    out->spec_drafted = in.spec_drafted, out->spec_accepted = in.spec_accepted, out->spec_steps = in.spec_steps;
    out->spec_src_drafted[COLO_SPEC_SOURCE_LOOKUP] = in.spec_lookup_drafted;
    out->spec_src_accepted[COLO_SPEC_SOURCE_LOOKUP] = in.spec_lookup_accepted;
    out->spec_src_drafted[COLO_SPEC_SOURCE_SUFFIX] = in.spec_suffix_drafted;
    out->spec_src_accepted[COLO_SPEC_SOURCE_SUFFIX] = in.spec_suffix_accepted;
    out->spec_src_drafted[COLO_SPEC_SOURCE_DRAFT] = in.spec_draft_drafted;
    out->spec_src_accepted[COLO_SPEC_SOURCE_DRAFT] = in.spec_draft_accepted;
    out->spec_src_on[COLO_SPEC_SOURCE_LOOKUP] = m->cfg.speculative.lookup;
    out->spec_src_on[COLO_SPEC_SOURCE_SUFFIX] = m->cfg.speculative.suffix;
    out->spec_src_on[COLO_SPEC_SOURCE_DRAFT] = m->cfg.speculative.draft[0] != 0;
    out->spec_draft_passes = in.spec_draft_passes, out->spec_draft_ns = in.spec_draft_ns;
    if (m->member) {
        colo_cosched_member_stats st;
        colo_cosched_member_get_stats(m->member, &st);
        out->sched_wait_ns = st.wait_ns;
        out->sched_cold_steps = st.cold_steps;
    }
}

void colo_served_set_live(colo_served *m, int keep_alive_ms, bool pinned)
{
    atomic_store(&m->keep_alive_ms, keep_alive_ms);
    atomic_store(&m->pinned, pinned);
    colo_queue_wake(m->q);
}

colo_served_state colo_served_get_state(const colo_served *m) { return (colo_served_state)m->state; }
const colo_model_cfg *colo_served_config(const colo_served *m) { return &m->cfg; }
colo_task colo_served_task(const colo_served *m) { return m->kind->task; }

/* ---- the request record ------------------------------------------------------------ */

colo_request *colo_request_create(void)
{
    colo_pool *p = colo_pool_create();
    colo_request *r = p ? colo_pool_calloc(p, 1, sizeof *r) : NULL;
    if (!r) {
        colo_pool_destroy(p);
        return NULL;
    }
    r->pool = p;
    r->params.temperature = 1.0f;
    r->params.top_p = 1.0f;
    r->params.repetition_penalty = 1.0f;
    r->params.logprobs = -1;
    return r;
}

void colo_request_free(colo_request *r)
{
    if (r)
        colo_pool_destroy(r->pool); /* r lives in its pool */
}

const char *colo_task_name(colo_task t) { return t == COLO_TASK_EMBED ? "embeddings" : "generation"; }

/* ---- sleep, wake, drain ------------------------------------------------------------ */

/* Whether m may be asked to sleep or wake now: its kind can, and it serves. */
static colo_status may_sleep_or_wake(colo_served *m, char *err, size_t errlen)
{
    if (!colo_kind_can(m->kind, COLO_KIND_CAN_SLEEP)) {
        colo_set_err(err, errlen, "model %s: its kind (%s) cannot sleep", m->cfg.name, m->kind->name);
        return COLO_EUNSUPPORTED;
    }
    if (!accepting(m))
        return not_serving(m, err, errlen);
    return COLO_OK;
}

void colo_served_wish_sleep(colo_served *m)
{
    atomic_store(&m->want_wake, false);
    atomic_store(&m->want_sleep, true);
    colo_queue_wake(m->q);
}

colo_status colo_served_sleep(colo_served *m, char *err, size_t errlen)
{
    colo_status st = may_sleep_or_wake(m, err, errlen);
    if (st == COLO_OK)
        colo_served_wish_sleep(m);
    return st;
}

colo_status colo_served_wake(colo_served *m, char *err, size_t errlen)
{
    colo_status st = may_sleep_or_wake(m, err, errlen);
    if (st != COLO_OK)
        return st;
    atomic_store(&m->want_sleep, false);
    atomic_store(&m->evict_asked, false);
    atomic_store(&m->want_wake, true);
    colo_queue_wake(m->q);
    return COLO_OK;
}

void colo_served_drain(colo_served *m)
{
    atomic_store(&m->draining, true);
    int s = COLO_SERVED_READY;
    /* a sleeping or waking model becomes draining when it is awake */
    atomic_compare_exchange_strong(&m->state, &s, COLO_SERVED_DRAINING);
    colo_queue_wake(m->q);
}

bool colo_served_drained(colo_served *m)
{
    if (!atomic_load(&m->draining))
        return false;
    pthread_mutex_lock(&m->prep_mu);
    bool prep_idle = !m->prep_head;
    pthread_mutex_unlock(&m->prep_mu);
    return prep_idle && colo_queue_len(m->q) == 0 && m->running == 0;
}

/* ---- sleeping and waking (executor thread) ----------------------------------------- */

/* Drops the KV cache and the weights and gives the guarantee back to the
 * pool; false when the kind could not. */
static bool go_to_sleep(colo_served *m)
{
    char e[256] = "";
    pthread_mutex_lock(&m->exec_mu);
    colo_status st = m->kind->sleep(m->inst, e, sizeof e);
    pthread_mutex_unlock(&m->exec_mu);
    if (st != COLO_OK) {
        atomic_store(&m->evict_asked, false);
        COLO_WARN("model %s: cannot sleep: %s", m->cfg.name, e[0] ? e : colo_status_str(st));
        return false;
    }
    if (m->env.pool) {
        colo_arena_release_guarantee(m->arena);
        m->guarantee_given_back = true;
    }
    m->state = COLO_SERVED_SLEEPING;
    atomic_fetch_add(&m->sleeps, 1);
    atomic_store(&m->evict_asked, false);
    colo_served_refresh_info(m);
    COLO_INFO("model %s: asleep (KV cache and weights dropped)", m->cfg.name);
    return true;
}

/* Takes the model's guarantee back from the pool, putting idle models to
 * sleep when it does not fit. With an evictor even a guarantee that fits
 * is taken inside a claim: the room a claim makes by putting models to
 * sleep is its claimant's, and a wake that took it on the way would leave
 * the claimant waiting for memory that never comes. */
static bool take_guarantee(colo_served *m, char *e, size_t elen)
{
    if (!m->guarantee_given_back)
        return true;
    size_t need = 0, avail = 0;
    colo_evictor *ev = m->env.evictor;
    bool held = ev && colo_evictor_claim(ev, 0, m, m->cfg.name, e, elen) == COLO_OK;
    colo_status st = colo_arena_restore_guarantee(m->arena, &need, &avail);
    if (held)
        colo_evictor_unclaim(ev);
    if (st != COLO_OK && ev && colo_evictor_claim(ev, need, m, m->cfg.name, e, elen) == COLO_OK) {
        st = colo_arena_restore_guarantee(m->arena, &need, &avail);
        colo_evictor_unclaim(ev);
    }
    if (st != COLO_OK) {
        if (!e[0])
            colo_set_err(e, elen, "needs %zu bytes of guaranteed memory, %zu available", need, avail);
        return false;
    }
    m->guarantee_given_back = false;
    return true;
}

/* May a wake that found no room try again? While requests are queued, the
 * models holding the memory are busy now and would make room once idle
 * (not when they are pinned), and the first refusal is younger than the
 * queue timeout. A wake with nothing queued (asked through the admin
 * route) does not wait. */
static bool wake_may_wait(colo_served *m, const char *why)
{
    uint64_t now = colo_now_ns();
    int timeout_ms = m->cfg.batching.queue_timeout_ms > 0 ? m->cfg.batching.queue_timeout_ms : 30000;
    /* a model put to sleep for a higher-priority one owes its queue an
     * answer: its requests wait (until their own deadlines) for it to wake */
    bool owed = atomic_load(&m->preempted);
    if (!colo_queue_len(m->q) || atomic_load(&m->stopping) || !m->env.evictor ||
        (!owed && colo_evictor_available_later(m->env.evictor, m) < colo_arena_guarantee_full(m->arena)))
        return false;
    if (!m->wake_blocked_since_ns) {
        m->wake_blocked_since_ns = now;
        COLO_INFO("model %s waits for memory to wake: %s", m->cfg.name, why);
    }
    return owed || now - m->wake_blocked_since_ns < (uint64_t)timeout_ms * 1000000u;
}

/* Answers every queued request with st: the model could not wake. */
static void refuse_queued(colo_served *m, colo_status st, const char *why)
{
    colo_queue_item *it;
    while ((it = colo_queue_pop(m->q))) {
        colo_request *r = it->owner;
        const char *msg = colo_pool_strndup(r->pool, why, strlen(why));
        colo_served_finish(m, r, st, msg ? msg : "the model could not wake");
    }
}

/* The kind's wake failed with st (why): the kind left the model asleep,
 * and so it stays, its guarantee given back; what waits is answered with
 * the reason, and the next request or wake tries again. Only a lost
 * device fails the model. */
static void stay_asleep(colo_served *m, colo_status st, const char *e)
{
    char why[640];
    snprintf(why, sizeof why, "model %s cannot wake: %s", m->cfg.name, e[0] ? e : colo_status_str(st));
    COLO_ERROR("%s", why);
    atomic_store(&m->want_wake, false);
    if (colo_served_device_lost(m)) {
        colo_served_drain_queue(m, COLO_EFATAL, "the model could not wake: the device context was lost");
        return;
    }
    if (m->env.pool) {
        colo_arena_release_guarantee(m->arena);
        m->guarantee_given_back = true;
    }
    m->state = COLO_SERVED_SLEEPING;
    refuse_queued(m, st == COLO_ENOMEM ? COLO_ENOMEM : COLO_ECANCELED, why);
    colo_served_refresh_info(m);
}

void colo_served_idle(colo_served *m) { colo_cosched_idle(m->member, m->stream); }

/* Loads the weights again. A wake that finds memory short (others borrowed
 * the model's guarantee and are giving it back) is retried; a guarantee
 * that does not fit, or a wake that fails, leaves it asleep and answers
 * what waits. */
static bool wake_up(colo_served *m)
{
    uint64_t t0 = colo_now_ns();
    char e[512] = "";
    if (!take_guarantee(m, e, sizeof e)) {
        if (wake_may_wait(m, e)) {
            colo_sleep_ns(WAKE_RETRY_NS);
            return false;
        }
        m->wake_blocked_since_ns = 0;
        char why[640];
        snprintf(why, sizeof why, "model %s cannot wake: %s", m->cfg.name, e);
        COLO_WARN("%s", why);
        atomic_store(&m->want_wake, false);
        refuse_queued(m, COLO_ENOMEM, why);
        return false;
    }
    m->wake_blocked_since_ns = 0;
    m->state = COLO_SERVED_WAKING;
    /* The request that woke the model is cold: what the wake queues on the
     * stream and the first step go by its latest start (its deadline less
     * the wake, as long as the last one, and its prefill), not behind
     * other models' running decodes, and its first step does not wait for
     * another model's turn. */
    colo_cosched_cold(m->member, m->stream,
                      colo_admission_queued_start(m->adm, &m->cfg.sla, m->q, atomic_load(&m->last_wake_ns)));
    for (;;) {
        e[0] = 0;
        pthread_mutex_lock(&m->exec_mu);
        colo_status st = m->kind->wake(m->inst, e, sizeof e);
        pthread_mutex_unlock(&m->exec_mu);
        if (st == COLO_OK)
            break;
        if (st != COLO_ENOMEM || atomic_load(&m->stopping) ||
            colo_now_ns() - t0 > (uint64_t)(m->cfg.batching.queue_timeout_ms > 0 ? m->cfg.batching.queue_timeout_ms
                                                                                   : 30000) * 1000000u) {
            stay_asleep(m, st, e);
            return false;
        }
        colo_sleep_ns(2 * 1000 * 1000);
    }
    uint64_t dt = colo_now_ns() - t0;
    atomic_store(&m->resident_since_ns, colo_now_ns());
    atomic_store(&m->preempted, false);
    atomic_store(&m->last_wake_ns, dt);
    atomic_fetch_add(&m->wakes, 1);
    atomic_store(&m->want_wake, false);
    m->state = atomic_load(&m->draining) ? COLO_SERVED_DRAINING : COLO_SERVED_READY;
    colo_served_refresh_info(m);
    if (m->env.hooks.on_wake)
        m->env.hooks.on_wake(m->env.hooks.ud, m->cfg.name, (double)dt / 1e9);
    COLO_INFO("model %s: awake in %.1f ms", m->cfg.name, (double)dt / 1e6);
    return true;
}

/* Asked to lend its unused guarantee: an idle, awake model drops its
 * cached KV blocks and keeps only the guarantee it charges; a busy one
 * declines (the claim then looks elsewhere). */
static void trim(colo_served *m, bool idle)
{
    atomic_store(&m->want_trim, false);
    if (idle && m->state == COLO_SERVED_READY && !atomic_load(&m->draining) && m->env.pool) {
        pthread_mutex_lock(&m->exec_mu);
        if (m->kind->trim)
            m->kind->trim(m->inst);
        pthread_mutex_unlock(&m->exec_mu);
        size_t lent = colo_arena_lend_guarantee(m->arena);
        if (lent) {
            m->guarantee_given_back = true;
            atomic_fetch_add(&m->trims, 1);
            COLO_INFO("model %s: idle, lent %.1f MiB of its memory guarantee (cached KV blocks dropped)",
                      m->cfg.name, (double)lent / (1 << 20));
        }
        colo_served_refresh_info(m);
    }
    atomic_store(&m->evict_asked, false);
}

/* An awake model that lent part of its guarantee takes it back before it
 * runs (putting idle models to sleep if need be); while it cannot, it
 * runs on what it can borrow and tries again every WAKE_RETRY_NS. */
static void regain(colo_served *m)
{
    uint64_t now = colo_now_ns();
    if (now - m->regain_tried_ns < WAKE_RETRY_NS)
        return;
    m->regain_tried_ns = now;
    char e[512] = "";
    if (!take_guarantee(m, e, sizeof e))
        COLO_DEBUG("model %s: runs on borrowed memory: %s", m->cfg.name, e);
}

bool colo_served_sleep_or_wake(colo_served *m)
{
    if (!colo_kind_can(m->kind, COLO_KIND_CAN_SLEEP))
        return true;
    uint64_t now = colo_now_ns();
    bool queued = colo_queue_len(m->q) > 0;
    if (m->n_live || queued)
        m->idle_since_ns = 0;
    else if (!m->idle_since_ns)
        m->idle_since_ns = now;
    if (atomic_load(&m->want_trim))
        trim(m, !m->n_live && !queued);
    /* (not when asked to sleep: the claim that asked waits for it) */
    if (m->state == COLO_SERVED_READY && m->guarantee_given_back && (m->n_live || queued) &&
        !atomic_load(&m->want_sleep))
        regain(m);
    int keep_alive_ms = atomic_load(&m->keep_alive_ms);
    if (m->state == COLO_SERVED_READY && !m->n_live && !atomic_load(&m->draining)) {
        bool idle_long = keep_alive_ms > 0 && !queued && m->idle_since_ns &&
                         now - m->idle_since_ns >= (uint64_t)keep_alive_ms * 1000000u;
        if ((atomic_load(&m->want_sleep) || idle_long) && go_to_sleep(m))
            atomic_store(&m->want_sleep, false);
    }
    if (m->state == COLO_SERVED_SLEEPING) {
        if (!atomic_load(&m->want_wake) && !colo_queue_len(m->q)) {
            colo_queue_wait(m->q, 100u * 1000 * 1000);
            return false;
        }
        return wake_up(m);
    }
    return true;
}
