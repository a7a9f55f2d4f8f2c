#include "batching/admission.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EWMA_WEIGHT 0.2

struct colo_admission {
    colo_sla_cfg sla;
    int max_batch;      /* max_batch_size */
    int prefill_tokens; /* max_batch_prefill_tokens */
    pthread_mutex_t mu;
    double step_ms[COLO_ADMISSION_BUCKETS]; /* exponential average per bucket */
    uint64_t n[COLO_ADMISSION_BUCKETS];     /* samples */
    double prefill_tok_ns;                  /* colo_admission_set_prefill; 0: not measured */
};

colo_admission *colo_admission_create(const colo_model_cfg *mc)
{
    colo_admission *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->sla = mc->sla;
    a->max_batch = mc->batching.max_batch_size > 0 ? mc->batching.max_batch_size : 32;
    a->prefill_tokens = mc->batching.max_batch_prefill_tokens > 0 ? mc->batching.max_batch_prefill_tokens : 512;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void colo_admission_free(colo_admission *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* 1 -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3, ... */
static int bucket_of(int batch)
{
    int k = 0;
    while (k < COLO_ADMISSION_BUCKETS - 1 && (1 << k) < batch)
        k++;
    return k;
}

void colo_admission_record_step(colo_admission *a, int batch, double step_ms)
{
    if (!a || batch < 1 || !(step_ms >= 0))
        return;
    int k = bucket_of(batch);
    pthread_mutex_lock(&a->mu);
    a->step_ms[k] = a->n[k] ? a->step_ms[k] + EWMA_WEIGHT * (step_ms - a->step_ms[k]) : step_ms;
    a->n[k]++;
    pthread_mutex_unlock(&a->mu);
}

/* Under mu: the bucket's time, else the nearest measured bucket's (the
 * larger on a tie: an estimate errs long). */
static double step_ms_locked(const colo_admission *a, int batch)
{
    int k = bucket_of(batch);
    for (int d = 0; d < COLO_ADMISSION_BUCKETS; d++) {
        if (k + d < COLO_ADMISSION_BUCKETS && a->n[k + d])
            return a->step_ms[k + d];
        if (k - d >= 0 && a->n[k - d])
            return a->step_ms[k - d];
    }
    return -1;
}

double colo_admission_step_ms(colo_admission *a, int batch)
{
    if (!a || batch < 1)
        return -1;
    pthread_mutex_lock(&a->mu);
    double t = step_ms_locked(a, batch);
    pthread_mutex_unlock(&a->mu);
    return t;
}

/* Records the first objective the estimate misses. */
static void miss(colo_admission_verdict *v, const char *what, double est_ms, double target_ms, int ahead, int b,
                 double t_ms)
{
    if (!v->fits)
        return;
    v->fits = false;
    double over_s = (est_ms - target_ms) / 1e3;
    v->retry_after_s = over_s < 1 ? 1 : (int)ceil(over_s);
    snprintf(v->reason, sizeof v->reason,
             "the request cannot meet its %s objective: estimated %.0f ms against %.0f ms (%d requests ahead, a step "
             "of batch %d takes %.1f ms)",
             what, est_ms, target_ms, ahead, b, t_ms);
}

static void check_sla(colo_admission *a, const colo_sla_cfg *s, int ahead, int prompt_tokens, int max_tokens,
                      colo_admission_verdict *v);

void colo_admission_check(colo_admission *a, int ahead, int prompt_tokens, int max_tokens,
                          colo_admission_verdict *v)
{
    check_sla(a, &a->sla, ahead, prompt_tokens, max_tokens, v);
}

/* The check against SLA s (the model's, or a request's own). */
static void check_sla(colo_admission *a, const colo_sla_cfg *s, int ahead, int prompt_tokens, int max_tokens,
                      colo_admission_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->fits = true;
    if (ahead < 0)
        ahead = 0;
    if (max_tokens < 1)
        max_tokens = 1;
    if (prompt_tokens < 1)
        prompt_tokens = 1;
    int B = a->max_batch, b = ahead + 1 < B ? ahead + 1 : B;
    pthread_mutex_lock(&a->mu);
    double t = step_ms_locked(a, b), t_full = step_ms_locked(a, B);
    pthread_mutex_unlock(&a->mu);
    if (t < 0)
        return; /* nothing measured: admit */
    v->measured = true;
    int waves = ahead + 1 > B ? (ahead + 1 - B + B - 1) / B : 0;
    int prefill_steps = (prompt_tokens + a->prefill_tokens - 1) / a->prefill_tokens;
    v->ttft_ms = waves * (double)max_tokens * t_full + prefill_steps * t;
    v->tpot_ms = t;
    v->e2e_ms = v->ttft_ms + (max_tokens - 1) * t;
    if (s->ttft_ms > 0 && v->ttft_ms > s->ttft_ms)
        miss(v, "time-to-first-token", v->ttft_ms, s->ttft_ms, ahead, b, t);
    if (s->tpot_ms > 0 && v->tpot_ms > s->tpot_ms)
        miss(v, "time-per-output-token", v->tpot_ms, s->tpot_ms, ahead, b, t);
    if (s->p99_ms > 0 && v->e2e_ms > s->p99_ms)
        miss(v, "end-to-end", v->e2e_ms, s->p99_ms, ahead, b, t);
}

bool colo_admission_admit(colo_admission *a, colo_request *r, int ahead)
{
    memset(&r->slo, 0, sizeof r->slo);
    const colo_sla_cfg *s = r->sla ? r->sla : a ? &a->sla : NULL; /* an adapter's own, else the model's */
    if (!a || r->task != COLO_TASK_GENERATE || !(s->ttft_ms > 0 || s->tpot_ms > 0 || s->p99_ms > 0))
        return true;
    if (r->qi.batch) { /* a batch's line answers to its batch's window, not to the SLA */
        r->slo.best_effort = true;
        return true;
    }
    colo_admission_verdict v;
    check_sla(a, s, ahead, r->tok.n, r->params.max_tokens, &v);
    if (v.fits)
        return true;
    const char *why = colo_pool_strndup(r->pool, v.reason, strlen(v.reason));
    r->slo.reason = why ? why : "the request cannot meet its SLA";
    r->slo.retry_after_s = v.retry_after_s;
    if (s->reject_late) {
        r->slo.refused = true;
        return false;
    }
    r->slo.best_effort = true;
    return true;
}

void colo_admission_on_token(colo_request *r, uint64_t now_ns)
{
    if (r->slo.last_token_ns && now_ns > r->slo.last_token_ns) {
        double gap = (double)(now_ns - r->slo.last_token_ns) / 1e6;
        if (gap > r->slo.max_gap_ms)
            r->slo.max_gap_ms = gap;
    }
    r->slo.last_token_ns = now_ns;
}

void colo_admission_set_prefill(colo_admission *a, double tok_ns)
{
    if (!a || !(tok_ns >= 0))
        return;
    pthread_mutex_lock(&a->mu);
    a->prefill_tok_ns = tok_ns;
    pthread_mutex_unlock(&a->mu);
}

/* r's next deadline by its SLA: its first token by arrival + ttft, the
 * next by the last + tpot, never past arrival + p99; 0: none. */
static uint64_t deadline_of(const colo_sla_cfg *sla, const colo_request *r)
{
    uint64_t d = 0;
    if (!r->slo.last_token_ns && sla->ttft_ms > 0)
        d = r->submit_ns + (uint64_t)(sla->ttft_ms * 1e6);
    else if (r->slo.last_token_ns && sla->tpot_ms > 0)
        d = r->slo.last_token_ns + (uint64_t)(sla->tpot_ms * 1e6);
    if (sla->p99_ms > 0) {
        uint64_t e = r->submit_ns + (uint64_t)(sla->p99_ms * 1e6);
        d = d && d < e ? d : e;
    }
    return d;
}

/* The work (ns) before r's next token: its prompt's prefill before the
 * first, a step of step_ms after; what is not measured counts nothing. */
static uint64_t work_of(const colo_request *r, double prefill_tok_ns, double step_ms)
{
    if (!r->slo.last_token_ns)
        return (uint64_t)(r->tok.n * prefill_tok_ns);
    return step_ms > 0 ? (uint64_t)(step_ms * 1e6) : 0;
}

/* The earliest latest start among the n requests in live, each less
 * before_ns of other work too. */
static uint64_t earliest_start(const colo_sla_cfg *model_sla, colo_request *const *live, int n, double prefill_tok_ns,
                               double step_ms, uint64_t before_ns)
{
    uint64_t best = 0;
    for (int i = 0; i < n; i++) {
        const colo_request *r = live[i];
        if (r->slo.best_effort)
            continue;
        uint64_t d = deadline_of(r->sla ? r->sla : model_sla, r);
        if (!d)
            continue;
        uint64_t w = work_of(r, prefill_tok_ns, step_ms) + before_ns;
        d = d > w ? d - w : 1; /* already late: as urgent as can be */
        if (!best || d < best)
            best = d;
    }
    return best;
}

uint64_t colo_admission_latest_start(colo_admission *a, const colo_sla_cfg *model_sla, colo_request *const *live,
                                     int n)
{
    double tok_ns = 0, step_ms = -1;
    if (a && n > 0) {
        pthread_mutex_lock(&a->mu);
        tok_ns = a->prefill_tok_ns;
        step_ms = step_ms_locked(a, n);
        pthread_mutex_unlock(&a->mu);
    }
    return earliest_start(model_sla, live, n, tok_ns, step_ms, 0);
}

typedef struct queued_start {
    const colo_sla_cfg *sla;
    double prefill_tok_ns;
    uint64_t before_ns;
    uint64_t best;
} queued_start;

static void earliest_queued(const colo_queue_item *it, void *ud)
{
    queued_start *qs = ud;
    if (it->batch)
        return;
    colo_request *r = it->owner;
    uint64_t d = earliest_start(qs->sla, &r, 1, qs->prefill_tok_ns, -1, qs->before_ns);
    if (d && (!qs->best || d < qs->best))
        qs->best = d;
}

uint64_t colo_admission_queued_start(colo_admission *a, const colo_sla_cfg *model_sla, colo_queue *q,
                                     uint64_t before_ns)
{
    queued_start qs = {model_sla, 0, before_ns, 0};
    if (a) {
        pthread_mutex_lock(&a->mu);
        qs.prefill_tok_ns = a->prefill_tok_ns;
        pthread_mutex_unlock(&a->mu);
    }
    colo_queue_visit(q, earliest_queued, &qs);
    return qs.best;
}

unsigned colo_admission_slo_met(const colo_sla_cfg *sla, const colo_request *r, unsigned *set)
{
    unsigned s = 0, met = 0;
    bool gen = r->task == COLO_TASK_GENERATE;
    if (sla->ttft_ms > 0 && gen)
        s |= 1;
    if (sla->tpot_ms > 0 && gen)
        s |= 2;
    if (sla->p99_ms > 0)
        s |= 4;
    *set = s;
    const colo_req_outcome *o = &r->out;
    if (o->status != COLO_OK || r->slo.refused)
        return 0;
    if ((s & 1) && o->n_tokens > 0 && o->ttft_ms <= sla->ttft_ms)
        met |= 1;
    if ((s & 2) && r->slo.max_gap_ms <= sla->tpot_ms)
        met |= 2;
    if ((s & 4) && o->total_ms <= sla->p99_ms)
        met |= 4;
    return met;
}
