/* batching/continuous.h: iteration-level (continuous) batching.
 *
 * The planner decides, before every step of a generative model, which
 * tokens of which sequences go into the step:
 *   1. every running sequence that is decoding gets its one new token (a
 *      long prompt never stalls running decodes);
 *   2. running sequences still in prefill get chunks of their prompt;
 *   3. waiting sequences are admitted (highest priority, then oldest;
 *      preempted sequences first within a level) when the KV blocks for
 *      their whole known text can be reserved and the batch has room;
 * all under a token budget per step (max_step_tokens, the chunked-prefill
 * budget). A sequence that cannot get KV space waits: nothing ever fails
 * for memory. When a running sequence needs a block and none is free, the
 * lowest-priority, most recently admitted running sequence is preempted: its
 * blocks are freed, its tokens kept, and it is recomputed once space returns.
 *
 * KV blocks come from an allocator given at creation (the model's paged KV
 * cache, or later a pool shared between models). The planner is pure host
 * logic; one executor thread owns it. */
#ifndef COLO_BATCHING_CONTINUOUS_H
#define COLO_BATCHING_CONTINUOUS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend.h"

typedef struct colo_block_allocator {
    void *ctx;
    /* Blocks free now. */
    int (*n_free)(void *ctx);
    /* Allocates n block ids into out, all or nothing. COLO_ENOMEM: fewer
     * are free, or (elastic memory) the ids are free but the device memory
     * to back them is not: the planner preempts others, or a sequence
     * alone waits. COLO_EAGAIN: memory guaranteed to this model is being
     * given back by borrowers: the sequence waits, nobody is preempted. */
    colo_status (*alloc)(void *ctx, int n, int32_t *out);
    void (*free)(void *ctx, const int32_t *ids, int n);
} colo_block_allocator;

typedef enum colo_seq_state { COLO_SEQ_WAITING = 0, COLO_SEQ_RUNNING, COLO_SEQ_DONE } colo_seq_state;

typedef struct colo_seq {
    /* set by the caller before colo_cb_add */
    void *owner;
    colo_priority priority;
    int32_t *tokens;   /* (cap) prompt then generated tokens; owned by the caller */
    int n_tokens;      /* known tokens */
    int cap;           /* capacity of tokens (the context length) */
    int32_t *blocks;   /* (max_blocks) this sequence's block table; owned by the caller */
    int max_blocks;
    /* kept by the planner */
    int n_cached;      /* tokens whose K/V are in the cache */
    int n_blocks;      /* blocks held */
    colo_seq_state state;
    uint64_t admit_order;
    int n_preempted;   /* times it was preempted */
    struct colo_seq *next; /* planner's lists */
} colo_seq;

typedef struct colo_cb_config {
    int block_size;      /* tokens per KV block */
    int max_running;     /* sequences in the running batch at most */
    int max_step_tokens; /* tokens per step at most (>= max_running) */
    int total_blocks;    /* blocks the allocator holds in all (free or not) */
} colo_cb_config;

/* One sequence's part of a step: tokens [start, start + n) of seq->tokens.
 * logits: the step must produce logits for its last token (it reaches the
 * end of the known text, so the next token is sampled from them). */
typedef struct colo_cb_work {
    colo_seq *seq;
    int start;
    int n;
    bool logits;
} colo_cb_work;

typedef struct colo_cb colo_cb;

colo_cb *colo_cb_create(const colo_cb_config *cfg, const colo_block_allocator *alloc);
/* Every sequence must have been removed. Accepts NULL. */
void colo_cb_destroy(colo_cb *cb);

/* Adds a waiting sequence. COLO_EINVAL when it could never run: it has no
 * tokens, or its known tokens need more blocks than seq->max_blocks or than
 * cfg.total_blocks. NULL from create when cfg is inconsistent. */
colo_status colo_cb_add(colo_cb *cb, colo_seq *seq);

/* Plans the next step into work (room for max_running entries). Sequences
 * that had to stop because even alone they outgrow the cache are put in
 * stopped (room for max_running; state DONE, blocks freed) so the caller can
 * finish them with finish_reason "length". Returns the entries of work. */
int colo_cb_plan(colo_cb *cb, colo_cb_work *work, colo_seq **stopped, int *n_stopped);

/* Preempts running sequences (lowest priority, most recently admitted
 * first; kept and recomputed later) until at least n_blocks blocks are
 * freed or none runs: how a borrower gives memory back at a step
 * boundary. Returns the blocks freed. */
int colo_cb_shed(colo_cb *cb, int n_blocks);

/* After the step ran: the planned tokens are now cached. */
void colo_cb_commit(colo_cb *cb, const colo_cb_work *work, int n_work);

/* Finished or canceled: frees its blocks and forgets it (any state). */
void colo_cb_remove(colo_cb *cb, colo_seq *seq);

int colo_cb_n_running(const colo_cb *cb);
int colo_cb_n_waiting(const colo_cb *cb);
uint64_t colo_cb_n_preemptions(const colo_cb *cb);

#endif
