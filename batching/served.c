#include "batching/served.h"
#include "batching/engine.h"
#include "models/bert.h"
#include "models/llama.h"
#include "runtime/fault.h"
#include "runtime/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A generation request admitted into the engine. */
typedef struct gen_job {
    colo_request *r;
    colo_served *m;
    colo_gen_seq *seq;
    uint64_t deadline_ns;
    colo_status why;      /* status reported when the engine cancels it */
    const char *why_msg;
    struct gen_job *prev, *next;
} gen_job;

struct colo_served {
    colo_model_cfg cfg;
    colo_served_env env;
    colo_arena *arena;
    colo_stream *stream;
    colo_cosched_member *member;
    colo_llama *llama;
    colo_gen_engine *eng;
    colo_bert *bert;
    colo_queue *q;
    pthread_t thread;
    bool started;
    _Atomic int state;
    atomic_bool stopping;
    char error[256];
    double load_ms;
    _Atomic uint64_t steps;
    _Atomic int running;
    gen_job *jobs; /* executor thread only */
    int n_jobs;
    /* engine gauges, refreshed by the executor after each step */
    _Atomic int kv_free;
    _Atomic uint64_t preemptions;
};

const char *colo_served_state_name(colo_served_state s)
{
    switch (s) {
    case COLO_SERVED_LOADING: return "loading";
    case COLO_SERVED_READY: return "ready";
    case COLO_SERVED_FAILED: return "failed";
    case COLO_SERVED_STOPPING: return "stopping";
    }
    return "unknown";
}

static double ms_between(uint64_t a, uint64_t b) { return b > a && a ? (double)(b - a) / 1e6 : 0.0; }

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* ---- loading ------------------------------------------------------------------ */

static size_t budget_of(const colo_served_env *env)
{
    return env->budget_bytes ? env->budget_bytes : colo_arena_device_budget(env->dev);
}

static int max_running_of(const colo_model_cfg *mc)
{
    return mc->batching.max_batch_size > 0 ? mc->batching.max_batch_size : 32;
}

static int prefill_budget_of(const colo_model_cfg *mc)
{
    int t = mc->batching.max_batch_prefill_tokens > 0 ? mc->batching.max_batch_prefill_tokens : 512;
    int r = max_running_of(mc);
    return t < r ? r : t;
}

/* Checks that weights, activations and one full-length sequence's KV cache
 * fit in limit bytes. */
static colo_status check_llama_fit(const colo_model_cfg *mc, size_t limit, char *err, size_t errlen)
{
    colo_llama_memory mem;
    char e[512];
    if (colo_llama_memory_need(mc->path, mc->kv_dtype, &mem, e, sizeof e) != COLO_OK) {
        colo_set_err(err, errlen, "%s", e);
        return COLO_EFORMAT;
    }
    const colo_llama_hparams *hp = &mem.hp;
    int bs = mc->kv_block_size > 0 ? mc->kv_block_size : 16;
    int seq = mc->max_seq_len > 0 && mc->max_seq_len < hp->n_ctx ? mc->max_seq_len : hp->n_ctx;
    int max_blocks = (seq + bs - 1) / bs;
    int r = max_running_of(mc), t = prefill_budget_of(mc);
    size_t act = colo_llama_act_bytes(hp, t, r, r * max_blocks);
    size_t kv = (size_t)max_blocks * colo_llama_kv_block_bytes(hp, bs, mc->kv_dtype);
    size_t align = (size_t)(hp->n_layer * 9 + 3) * 256 + 64 * 256;
    size_t need = mem.weight_bytes + act + kv + align;
    if (need > limit) {
        colo_set_err(err, errlen,
                     "needs %zu bytes (weights %zu, activations for %d tokens per step %zu, KV cache for one "
                     "%d-token sequence %zu) but memory_fraction %g gives %zu bytes",
                     need, mem.weight_bytes, t, act, seq, kv, mc->memory_fraction, limit);
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

static colo_status load_llama(colo_served *m, char *err, size_t errlen)
{
    const colo_model_cfg *mc = &m->cfg;
    char e[512];
    if (!(m->llama = colo_llama_load(mc->path, m->arena, m->stream, e, sizeof e))) {
        colo_set_err(err, errlen, "%s", e);
        return COLO_EFORMAT;
    }
    colo_gen_config gc = {.max_running = max_running_of(mc), .max_step_tokens = prefill_budget_of(mc),
                          .block_size = mc->kv_block_size, .kv_type = mc->kv_dtype, .max_seq_len = mc->max_seq_len};
    if (!(m->eng = colo_gen_engine_create(m->llama, m->stream, &gc, e, sizeof e))) {
        colo_set_err(err, errlen, "%s", e);
        return COLO_ENOMEM;
    }
    m->kv_free = colo_gen_kv_free_blocks(m->eng);
    return COLO_OK;
}

static colo_status check_bert_fit(const colo_model_cfg *mc, size_t limit, char *err, size_t errlen)
{
    char e[512];
    colo_bert_config bc = {.weight_type = COLO_F32, .max_len = mc->max_seq_len};
    colo_bert_memory mem;
    int mb = max_running_of(mc);
    if (colo_bert_memory_need(mc->path, &bc, mb, 2, &mem, e, sizeof e) != COLO_OK) {
        colo_set_err(err, errlen, "%s", e);
        return COLO_EFORMAT;
    }
    size_t act = colo_bert_act_bytes(&mem.hp, mb, mem.hp.max_len);
    size_t need = mem.weight_bytes + act + (size_t)(mem.hp.n_layer * 16 + 8) * 256;
    if (need > limit) {
        colo_set_err(err, errlen,
                     "needs %zu bytes (weights %zu, activations for batches of %d inputs of %d tokens %zu) but "
                     "memory_fraction %g gives %zu bytes",
                     need, mem.weight_bytes, mb, mem.hp.max_len, act, mc->memory_fraction, limit);
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

colo_status colo_served_check(const colo_model_cfg *mc, size_t budget_bytes, char *err, size_t errlen)
{
    size_t limit = (size_t)((double)budget_bytes * mc->memory_fraction);
    return mc->kind == COLO_KIND_LLAMA ? check_llama_fit(mc, limit, err, errlen) : check_bert_fit(mc, limit, err, errlen);
}

static colo_status load_bert(colo_served *m, char *err, size_t errlen)
{
    const colo_model_cfg *mc = &m->cfg;
    char e[512];
    colo_bert_config bc = {.weight_type = COLO_F32, .max_len = mc->max_seq_len};
    int mb = max_running_of(mc);
    size_t limit = colo_arena_limit(m->arena);
    if (!(m->bert = colo_bert_load(mc->path, &bc, m->arena, m->stream, e, sizeof e))) {
        colo_set_err(err, errlen, "%s", e);
        return COLO_EFORMAT;
    }
    const colo_bert_hparams *hp = colo_bert_hparams_get(m->bert);
    if (colo_bert_reserve(m->bert, mb, hp->max_len) != COLO_OK) {
        colo_set_err(err, errlen, "activations for batches of %d inputs of %d tokens do not fit in %zu bytes", mb,
                     hp->max_len, limit);
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

colo_served *colo_served_load(const colo_model_cfg *mc, const colo_served_env *env, char *err, size_t errlen)
{
    uint64_t t0 = colo_now_ns();
    colo_served *m = calloc(1, sizeof *m);
    if (!m) {
        colo_set_err(err, errlen, "model %s: out of memory", mc->name);
        return NULL;
    }
    m->cfg = *mc;
    m->env = *env;
    m->state = COLO_SERVED_LOADING;
    char e[768] = "";
    size_t budget = budget_of(env);
    colo_status st = colo_served_check(mc, budget, e, sizeof e);
    if (st != COLO_OK)
        goto fail;
    if (!(m->arena = colo_arena_create(env->dev, mc->name, mc->memory_fraction, budget, e, sizeof e)) ||
        !(m->stream = colo_stream_create(env->dev, &env->stream, e, sizeof e)) ||
        !(m->q = colo_queue_create(mc->batching.max_queue > 0 ? mc->batching.max_queue : 256))) {
        if (!e[0])
            snprintf(e, sizeof e, "out of memory");
        goto fail;
    }
    if (env->cs && !(m->member = colo_cosched_join(env->cs, mc->name, env->stream.priority))) {
        snprintf(e, sizeof e, "cannot join the co-scheduler");
        goto fail;
    }
    st = mc->kind == COLO_KIND_LLAMA ? load_llama(m, e, sizeof e) : load_bert(m, e, sizeof e);
    if (st != COLO_OK)
        goto fail;
    m->load_ms = ms_between(t0, colo_now_ns());
    return m;

fail:
    colo_set_err(err, errlen, "model %s (%s): %s", mc->name, mc->path, e);
    colo_served_free(m);
    return NULL;
}

/* ---- finishing requests --------------------------------------------------------- */

static void finish_plain(colo_request *r, colo_status st, const char *msg)
{
    uint64_t now = colo_now_ns();
    colo_req_result res = {.status = st, .error = msg, .total_ms = ms_between(r->submit_ns, now),
                           .queue_ms = ms_between(r->submit_ns, now)};
    r->cb.on_done(r->cb.ud, &res);
}

static void expire_queued(colo_served *m)
{
    colo_queue_item *items[64];
    int n;
    while ((n = colo_queue_take_expired(m->q, colo_now_ns(), items, 64)) > 0)
        for (int i = 0; i < n; i++)
            finish_plain(items[i]->owner, COLO_ETIMEDOUT, "the request waited in the queue past its deadline");
}

static void drain_queue(colo_served *m, colo_status st, const char *msg)
{
    colo_queue_item *it;
    while ((it = colo_queue_pop(m->q)))
        finish_plain(it->owner, st, msg);
}

/* ---- llama executor ------------------------------------------------------------- */

static void job_on_token(void *ud, int32_t token, const char *piece, size_t len)
{
    gen_job *j = ud;
    if (j->r->params.stream && j->r->cb.on_token)
        j->r->cb.on_token(j->r->cb.ud, token, piece, len);
}

static void job_on_done(void *ud, const colo_gen_outcome *o)
{
    gen_job *j = ud;
    colo_served *m = j->m;
    colo_request *r = j->r;
    if (j->prev)
        j->prev->next = j->next;
    else
        m->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    m->n_jobs--;
    m->running = m->n_jobs;
    colo_status st = o->status;
    const char *msg = o->error;
    if (st == COLO_ECANCELED && j->why != COLO_OK) {
        st = j->why;
        msg = j->why_msg;
    }
    colo_req_result res = {.status = st, .error = msg, .text = o->text ? o->text : "", .text_len = o->text_len,
                           .tokens = o->tokens, .n_tokens = o->n_tokens, .n_prompt_tokens = o->n_prompt,
                           .finish_reason = st == COLO_OK ? o->finish_reason : NULL};
    uint64_t first = o->first_step_ns ? o->first_step_ns : o->done_ns;
    res.queue_ms = ms_between(r->submit_ns, first);
    res.prefill_ms = o->first_token_ns ? ms_between(first, o->first_token_ns) : 0;
    res.decode_ms = o->first_token_ns ? ms_between(o->first_token_ns, o->done_ns) : 0;
    res.total_ms = ms_between(r->submit_ns, o->done_ns);
    res.ttft_ms = o->first_token_ns ? ms_between(r->submit_ns, o->first_token_ns) : 0;
    free(j);
    r->cb.on_done(r->cb.ud, &res);
}

static void admit_llama(colo_served *m, colo_request *r)
{
    if (atomic_load(&r->canceled)) {
        finish_plain(r, COLO_ECANCELED, "canceled");
        return;
    }
    const colo_bpe *bpe = colo_llama_tokenizer(m->llama);
    int32_t *ids = NULL;
    int n = 0;
    if (colo_bpe_encode(bpe, r->prompt, r->prompt_len, r->special, &ids, &n) != COLO_OK) {
        free(ids);
        finish_plain(r, COLO_ENOMEM, "out of memory while tokenizing the prompt");
        return;
    }
    gen_job *j = calloc(1, sizeof *j);
    if (!j) {
        free(ids);
        finish_plain(r, COLO_ENOMEM, "out of memory");
        return;
    }
    j->r = r;
    j->m = m;
    j->deadline_ns = r->qi.deadline_ns;
    colo_gen_params gp = {.max_tokens = r->params.max_tokens, .temperature = r->params.temperature,
                          .top_p = r->params.top_p, .top_k = r->params.top_k, .seed = r->params.seed,
                          .n_stop = r->params.n_stop < COLO_GEN_MAX_STOP ? r->params.n_stop : COLO_GEN_MAX_STOP,
                          .priority = r->who.priority};
    for (int i = 0; i < gp.n_stop; i++)
        gp.stop[i] = r->params.stop[i];
    colo_gen_callbacks cb = {job_on_token, job_on_done, j};
    char e[256];
    j->seq = colo_gen_add(m->eng, ids, n, &gp, &cb, e, sizeof e);
    free(ids);
    if (!j->seq) {
        free(j);
        bool too_long = n <= 0 || n >= colo_gen_max_seq_len(m->eng);
        finish_plain(r, too_long ? COLO_EINVAL : COLO_ENOMEM, e);
        return;
    }
    j->next = m->jobs;
    if (m->jobs)
        m->jobs->prev = j;
    m->jobs = j;
    m->n_jobs++;
    m->running = m->n_jobs;
}

static void fail_all_jobs(colo_served *m, colo_status why, const char *msg)
{
    while (m->jobs) {
        gen_job *j = m->jobs;
        j->why = why;
        j->why_msg = msg;
        colo_gen_cancel(m->eng, j->seq);
    }
}

static void mark_failed(colo_served *m, const char *msg)
{
    snprintf(m->error, sizeof m->error, "%s", msg);
    m->state = COLO_SERVED_FAILED;
    colo_queue_close(m->q);
    COLO_ERROR("model %s: failed: %s", m->cfg.name, msg);
}

/* A poisoned device (another model's error may have poisoned it) fails
 * this model too: marks it failed and fails what waits. True then. */
static bool device_lost(colo_served *m)
{
    if (!colo_device_poisoned(m->env.dev))
        return false;
    mark_failed(m, "the device context was lost");
    return true;
}

static void run_llama(colo_served *m)
{
    int max_live = max_running_of(&m->cfg);
    while (!atomic_load(&m->stopping)) {
        expire_queued(m);
        uint64_t now = colo_now_ns();
        for (gen_job *j = m->jobs, *nx; j; j = nx) {
            nx = j->next;
            if (atomic_load(&j->r->canceled)) {
                colo_gen_cancel(m->eng, j->seq);
            } else if (j->deadline_ns && now > j->deadline_ns && !colo_gen_seq_started(j->seq)) {
                j->why = COLO_ETIMEDOUT;
                j->why_msg = "the KV cache stayed full past the request's queue deadline";
                colo_gen_cancel(m->eng, j->seq);
            }
        }
        colo_queue_item *it;
        while (m->n_jobs < max_live && (it = colo_queue_pop(m->q)))
            admit_llama(m, it->owner);
        m->kv_free = colo_gen_kv_free_blocks(m->eng); /* cancellations free blocks at once */
        if (!m->n_jobs) {
            if (device_lost(m)) {
                drain_queue(m, COLO_EFATAL, "the device context was lost");
                return;
            }
            colo_queue_wait(m->q, 100u * 1000 * 1000);
            continue;
        }
        int n_sched = 0, batch = m->n_jobs;
        uint64_t t0 = colo_now_ns();
        colo_cosched_member_stats before = {0}, after = {0};
        if (m->member)
            colo_cosched_member_get_stats(m->member, &before);
        colo_status st = colo_gen_step(m->eng, m->member, &n_sched);
        uint64_t t1 = colo_now_ns();
        if (m->member)
            colo_cosched_member_get_stats(m->member, &after);
        m->kv_free = colo_gen_kv_free_blocks(m->eng);
        m->preemptions = colo_gen_preemptions(m->eng);
        if (n_sched > 0) {
            m->steps++;
            if (m->env.hooks.on_step)
                m->env.hooks.on_step(m->env.hooks.ud, m->cfg.name, batch, n_sched, ms_between(t0, t1),
                                     (double)(after.wait_ns - before.wait_ns) / 1e6);
        }
        if (st != COLO_OK) {
            COLO_WARN("model %s: step failed: %s", m->cfg.name, colo_status_str(st));
            if (colo_device_poisoned(m->env.dev) || st == COLO_EFATAL) {
                mark_failed(m, "the device context was lost");
                fail_all_jobs(m, COLO_EFATAL, "the device context was lost");
                drain_queue(m, COLO_EFATAL, "the device context was lost");
                return;
            }
        } else if (n_sched == 0) {
            sleep_ns(1000 * 1000); /* every live sequence waits for cache space */
        }
    }
    fail_all_jobs(m, COLO_ECANCELED, "the server is shutting down");
}

/* ---- bert executor ------------------------------------------------------------- */

static void run_bert_batch(colo_served *m, colo_request **rs, int n)
{
    const colo_bert_hparams *hp = colo_bert_hparams_get(m->bert);
    int dim = hp->n_embd, L = hp->max_len;
    int total = 0;
    for (int i = 0; i < n; i++)
        total += rs[i]->n_inputs;
    int32_t *ids = malloc((size_t)total * L * sizeof *ids);
    int *lens = malloc((size_t)total * sizeof *lens);
    const int32_t **rows = malloc((size_t)total * sizeof *rows);
    float *out = malloc((size_t)total * dim * sizeof *out);
    int *ntok = calloc((size_t)n, sizeof *ntok);
    colo_status *bad = calloc((size_t)n, sizeof *bad);
    uint64_t t0 = colo_now_ns();
    if (!ids || !lens || !rows || !out || !ntok || !bad || colo_fault_hit(COLO_FAULT_ALLOC, m->cfg.name)) {
        for (int i = 0; i < n; i++)
            finish_plain(rs[i], COLO_ENOMEM, "out of memory");
        goto out;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < rs[i]->n_inputs; j++, k++) {
            const char *t = rs[i]->inputs[j];
            size_t tl = rs[i]->input_lens ? rs[i]->input_lens[j] : strlen(t);
            rows[k] = ids + (size_t)k * L;
            if (colo_bert_tokenize(m->bert, t, tl, ids + (size_t)k * L, L, &lens[k], NULL) != COLO_OK) {
                bad[i] = COLO_EINVAL;
                lens[k] = 2; /* [CLS] [SEP]: computed, then dropped */
                ids[(size_t)k * L] = ids[(size_t)k * L + 1] = 0;
            }
            ntok[i] += lens[k];
        }
    /* Forward passes of up to max_batch_size inputs. */
    int mb = max_running_of(&m->cfg);
    colo_status st = COLO_OK;
    double wait_ms = 0;
    for (int s = 0; s < total && st == COLO_OK; s += mb) {
        int c = total - s < mb ? total - s : mb;
        if (m->member)
            wait_ms += (double)colo_cosched_step_begin(m->member) / 1e3;
        st = colo_bert_forward(m->bert, m->stream, c, rows + s, lens + s, out + (size_t)s * dim, m->member);
        if (m->member)
            colo_cosched_step_end(m->member);
        m->steps++;
    }
    uint64_t t1 = colo_now_ns();
    if (m->env.hooks.on_step)
        m->env.hooks.on_step(m->env.hooks.ud, m->cfg.name, n, total, ms_between(t0, t1), wait_ms);
    if (st != COLO_OK && (colo_device_poisoned(m->env.dev) || st == COLO_EFATAL))
        mark_failed(m, "the device context was lost");
    k = 0;
    for (int i = 0; i < n; i++) {
        colo_request *r = rs[i];
        colo_req_result res = {.status = st, .n_inputs = r->n_inputs, .dim = dim, .n_input_tokens = ntok[i]};
        if (st != COLO_OK)
            res.error = st == COLO_ENOMEM ? "the batch's activations did not fit in the model's memory"
                                          : "the forward pass failed on the device";
        else if (bad[i]) {
            res.status = bad[i];
            res.error = "an input could not be tokenized";
        }
        res.embeddings = out + (size_t)k * dim;
        res.queue_ms = ms_between(r->submit_ns, t0);
        res.prefill_ms = ms_between(t0, t1);
        res.total_ms = ms_between(r->submit_ns, colo_now_ns());
        k += r->n_inputs;
        r->cb.on_done(r->cb.ud, &res);
    }
out:
    free(ids);
    free(lens);
    free(rows);
    free(out);
    free(ntok);
    free(bad);
}

static void run_bert(colo_served *m)
{
    const colo_batching_cfg *b = &m->cfg.batching;
    colo_batch_policy pol = {.max_batch_size = max_running_of(&m->cfg), .preferred_sizes = b->preferred_batch_size,
                             .n_preferred = b->n_preferred,
                             .max_queue_delay_ns = (uint64_t)(b->max_queue_delay_us > 0 ? b->max_queue_delay_us : 0) * 1000};
    colo_queue_item **items = malloc((size_t)pol.max_batch_size * sizeof *items);
    colo_request **rs = malloc((size_t)pol.max_batch_size * sizeof *rs);
    if (!items || !rs) {
        mark_failed(m, "out of memory");
        drain_queue(m, COLO_ENOMEM, "out of memory");
        free(items);
        free(rs);
        return;
    }
    while (!atomic_load(&m->stopping) && m->state == COLO_SERVED_READY) {
        expire_queued(m);
        uint64_t wait = 0;
        int n = colo_queue_form_batch(m->q, &pol, colo_now_ns(), items, &wait);
        if (n == 0) {
            if (device_lost(m))
                break;
            if (colo_queue_len(m->q) == 0)
                colo_queue_wait(m->q, 100u * 1000 * 1000);
            else
                sleep_ns(wait < 200000 ? (wait ? wait : 1000) : 200000);
            continue;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            colo_request *r = items[i]->owner;
            if (atomic_load(&r->canceled))
                finish_plain(r, COLO_ECANCELED, "canceled");
            else
                rs[k++] = r;
        }
        if (k) {
            m->running = k;
            run_bert_batch(m, rs, k);
            m->running = 0;
        }
    }
    if (m->state == COLO_SERVED_FAILED)
        drain_queue(m, COLO_EFATAL, "the device context was lost");
    free(items);
    free(rs);
}

static void *executor(void *arg)
{
    colo_served *m = arg;
    if (m->cfg.kind == COLO_KIND_LLAMA)
        run_llama(m);
    else
        run_bert(m);
    drain_queue(m, COLO_ECANCELED, "the server is shutting down");
    return NULL;
}

/* ---- control ------------------------------------------------------------------- */

colo_status colo_served_start(colo_served *m, char *err, size_t errlen)
{
    colo_stream_set_label(m->stream, m->cfg.name); /* stream faults (runtime/fault.h) apply from now */
    m->state = COLO_SERVED_READY;
    int rc = pthread_create(&m->thread, NULL, executor, m);
    if (rc) {
        m->state = COLO_SERVED_FAILED;
        colo_set_err(err, errlen, "model %s: cannot start its executor thread: %s", m->cfg.name, strerror(rc));
        return COLO_ERR;
    }
    m->started = true;
    return COLO_OK;
}

void colo_served_stop(colo_served *m)
{
    if (!m || !m->q)
        return;
    if (m->state == COLO_SERVED_READY || m->state == COLO_SERVED_LOADING)
        m->state = COLO_SERVED_STOPPING;
    atomic_store(&m->stopping, true);
    colo_queue_close(m->q);
    if (m->started) {
        pthread_join(m->thread, NULL);
        m->started = false;
    }
    drain_queue(m, COLO_ECANCELED, "the server is shutting down");
}

void colo_served_free(colo_served *m)
{
    if (!m)
        return;
    colo_served_stop(m);
    colo_gen_engine_free(m->eng);
    colo_llama_free(m->llama);
    colo_bert_free(m->bert);
    colo_cosched_leave(m->member);
    colo_queue_destroy(m->q);
    colo_stream_destroy(m->stream);
    colo_arena_destroy(m->arena);
    free(m);
}

colo_status colo_served_submit(colo_served *m, colo_request *r)
{
    if ((r->kind == COLO_REQ_GENERATE) != (m->cfg.kind == COLO_KIND_LLAMA))
        return COLO_EINVAL;
    if (m->state != COLO_SERVED_READY)
        return COLO_ECANCELED;
    r->submit_ns = colo_now_ns();
    atomic_store(&r->canceled, 0);
    uint64_t to = r->timeout_ns ? r->timeout_ns : (uint64_t)m->cfg.batching.queue_timeout_ms * 1000000u;
    r->qi.priority = r->who.priority;
    r->qi.deadline_ns = to ? r->submit_ns + to : 0;
    r->qi.owner = r;
    size_t len = 0;
    if (r->kind == COLO_REQ_GENERATE)
        len = r->prompt_len;
    else
        for (int i = 0; i < r->n_inputs; i++)
            len += r->input_lens ? r->input_lens[i] : strlen(r->inputs[i]);
    r->qi.length = (int)(len / 4 > 1 << 30 ? 1 << 30 : len / 4);
    colo_status st = colo_queue_push(m->q, &r->qi);
    if (st != COLO_OK)
        return colo_queue_closed(m->q) ? COLO_ECANCELED : COLO_EAGAIN;
    return COLO_OK;
}

void colo_served_cancel(colo_served *m, colo_request *r)
{
    atomic_store(&r->canceled, 1);
    if (colo_queue_remove(m->q, &r->qi)) {
        finish_plain(r, COLO_ECANCELED, "canceled");
        return;
    }
    colo_queue_wake(m->q);
}

void colo_served_get_info(colo_served *m, colo_served_info *out)
{
    memset(out, 0, sizeof *out);
    out->name = m->cfg.name;
    out->kind = m->cfg.kind;
    out->state = (colo_served_state)m->state;
    out->error = m->state == COLO_SERVED_FAILED ? m->error : "";
    out->priority = m->cfg.priority;
    if (m->arena)
        colo_arena_get_stats(m->arena, &out->mem);
    out->queue_depth = m->q ? colo_queue_len(m->q) : 0;
    out->max_queue = m->q ? colo_queue_max_len(m->q) : 0;
    out->running = m->running;
    if (m->eng) {
        out->kv_blocks = colo_gen_kv_blocks(m->eng);
        out->kv_free_blocks = m->kv_free;
        out->kv_block_size = colo_llama_kv_block_size(m->llama);
        out->max_seq_len = colo_gen_max_seq_len(m->eng);
        out->n_vocab = colo_llama_hparams_get(m->llama)->n_vocab;
    }
    if (m->bert) {
        out->max_seq_len = colo_bert_hparams_get(m->bert)->max_len;
        out->dim = colo_bert_dim(m->bert);
        out->n_vocab = colo_bert_hparams_get(m->bert)->n_vocab;
    }
    out->preemptions = m->preemptions;
    out->load_ms = m->load_ms;
    out->steps = m->steps;
    if (m->member) {
        colo_cosched_member_stats st;
        colo_cosched_member_get_stats(m->member, &st);
        out->sched_wait_ns = st.wait_ns;
    }
}

colo_served_state colo_served_get_state(const colo_served *m) { return (colo_served_state)m->state; }
const colo_model_cfg *colo_served_config(const colo_served *m) { return &m->cfg; }
