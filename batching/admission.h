/* batching/admission.h: deadlines from a model's SLA, the step times they
 * are estimated with, and admission against them (docs/SCHEDULING.md,
 * "Deadlines").
 *
 * A generative request of a model with an `sla:` has deadlines: its first
 * token by arrival + ttft_ms, each next token by the previous one +
 * tpot_ms, its end by arrival + p99_ms (each only when set). The model's
 * executor records every step's time by batch size (a small table, one
 * entry per power-of-two bucket, an exponential average of 0.2 after the
 * first sample); admission estimates a new request's times from it and the
 * requests ahead of it:
 *
 *   b      = min(ahead + 1, max_batch_size)          the batch it will run in
 *   t(b)   = the measured step time of b's bucket (else the nearest measured bucket)
 *   waves  = ceil((ahead + 1 - max_batch_size) / max_batch_size) when ahead + 1 > max_batch_size, else 0
 *   ttft   = waves * max_tokens * t(max_batch_size) + ceil(prompt / max_batch_prefill_tokens) * t(b)
 *   tpot   = t(b)
 *   e2e    = ttft + (max_tokens - 1) * t(b)
 *
 * (the requests ahead are taken to generate as many tokens as this one).
 * An estimate past an objective makes the request infeasible: refused
 * (429 with Retry-After and the reason) when the model sets
 * `on_overload: reject`, else served best-effort: it gives its model no
 * urgency under policy deadline, and is counted missed if it ends late.
 * Without a step measured yet, every request is admitted.
 *
 * Thread rules: colo_admission_record_step on the executor thread,
 * colo_admission_check on any thread (a mutex guards the table). */
#ifndef COLO_BATCHING_ADMISSION_H
#define COLO_BATCHING_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "batching/model_cfg.h"
#include "batching/request.h"

#define COLO_ADMISSION_BUCKETS 12 /* batch 1, 2, 3-4, 5-8, ... 1025-2048 */

typedef struct colo_admission colo_admission;

/* What admission found for one request (times in milliseconds). */
typedef struct colo_admission_verdict {
    bool fits;            /* every objective of the SLA can be met (or nothing is measured yet) */
    bool measured;        /* a step time was known */
    double ttft_ms, tpot_ms, e2e_ms;
    int retry_after_s;    /* when not fits: the estimate's excess, whole seconds, at least 1 */
    char reason[256];     /* when not fits: the objective, the estimate and the target */
} colo_admission_verdict;

/* The model's SLA and batching settings are copied. NULL when out of memory. */
colo_admission *colo_admission_create(const colo_model_cfg *mc);
void colo_admission_free(colo_admission *a); /* accepts NULL */

/* A step of batch sequences took step_ms. */
void colo_admission_record_step(colo_admission *a, int batch, double step_ms);
/* The estimated time of a step of batch sequences; -1 before any step was
 * measured. */
double colo_admission_step_ms(colo_admission *a, int batch);

/* The estimate above for a request of prompt_tokens and max_tokens with
 * ahead requests running or queued before it. */
void colo_admission_check(colo_admission *a, int ahead, int prompt_tokens, int max_tokens,
                          colo_admission_verdict *v);

/* Admission of r (generative, tokenized) against its own SLA (r->sla: a
 * LoRA adapter's) or else the model's: fills r->slo. Returns false when
 * r must be refused (infeasible and on_overload: reject); r->slo.reason
 * (in r's pool) and r->slo.retry_after_s say why and when to retry. */
bool colo_admission_admit(colo_admission *a, colo_request *r, int ahead);

/* The executor saw r's next token at now_ns (keeps the longest gap). */
void colo_admission_on_token(colo_request *r, uint64_t now_ns);

/* A prompt token's prefill time (ns; the model's measured average), for
 * the latest starts below. */
void colo_admission_set_prefill(colo_admission *a, double tok_ns);

/* The urgency of a model's next step under policy deadline: the earliest
 * latest start (monotonic ns) among live requests that are not
 * best-effort. A request's next deadline comes from its own SLA (r->sla)
 * or else model_sla: its first token by arrival + ttft, the next by the
 * last + tpot, never past arrival + p99. Its latest start is that less
 * the work before the token: its prompt's prefill (tokens times the
 * measured prefill time) before the first, a step of the batch (its
 * measured time) after. What is not measured yet counts nothing; a start
 * already past is 1 (as urgent as can be). 0 when none has a deadline.
 * a may be NULL (the deadlines themselves). */
uint64_t colo_admission_latest_start(colo_admission *a, const colo_sla_cfg *model_sla, colo_request *const *live,
                                     int n);
/* The same among the requests queued in q (whose items' owners are
 * requests) that are not lines of batches, each less before_ns more (the
 * wake to come): the urgency a model woken for them works to before any
 * of them runs. */
uint64_t colo_admission_queued_start(colo_admission *a, const colo_sla_cfg *model_sla, colo_queue *q,
                                     uint64_t before_ns);

/* Which objectives r met, once it ended (r->out filled): bit 0 ttft, 1
 * tpot, 2 e2e, for the objectives the SLA sets (*set, same bits). A
 * request that failed or was refused met none. */
unsigned colo_admission_slo_met(const colo_sla_cfg *sla, const colo_request *r, unsigned *set);

#endif
