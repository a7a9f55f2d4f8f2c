/* batching/share.h: a request's device time.
 *
 * Each step (generation) or batch (embeddings) takes device time; it is
 * shared among the requests in it in proportion to their tokens in it: a
 * request not yet started counts its prompt, a started one the one token it
 * decodes. The shares of a step sum to the step's time, so the requests of
 * a model sum to the model's device time. A chunked prefill's later chunks
 * count as one token each (the executor does not see chunk sizes).
 * r->out.device_s accumulates the request's shares.
 *
 * Threads: the model's executor thread. */
#ifndef COLO_BATCHING_SHARE_H
#define COLO_BATCHING_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "batching/request.h"

typedef struct colo_step_share {
    uint64_t t0_ns;  /* the step's start */
    double total_w;  /* tokens in the step, as weighed at its start */
} colo_step_share;

/* Before a step over live[0..n) starting at t0_ns; started(inst, r) tells
 * whether r's prompt is already computed. */
void colo_share_step_begin(colo_step_share *s, colo_request *const *live, int n, uint64_t t0_ns,
                           bool (*started)(void *inst, const colo_request *r), void *inst);
/* After it, at t1_ns: the requests still live get their share. */
void colo_share_step_end(colo_step_share *s, colo_request *const *live, int n, uint64_t t1_ns);
/* r ends inside the step (its done runs before the step returns): its share
 * of the step so far. No-op when r is in no step. */
void colo_share_close(colo_request *r, uint64_t now_ns);
/* A batch of rs[0..n) that took dt_ns: shares by their input tokens. */
void colo_share_batch(colo_request *const *rs, int n, uint64_t dt_ns);

#endif
