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
 * logic; one executor thread owns it.
 *
 * Prefix caching (when the allocator has match and publish): a sequence
 * admitted takes the longest cached run of full blocks that starts its
 * tokens and computes only the rest: at least its last two tokens (so its
 * logits exist, the blocks it writes are never cached ones, and the rest
 * is computed as a prefill of several rows, whose precision is the whole
 * prompt's: kernels/cpu/linear.c rounds a single row to 8 bits). After each
 * step every block that became full and computed is published, so
 * sequences that come later, and this one after a preemption, find it.
 * Forks (colo_continuous_fork): the sequences of one prompt share its full blocks
 * by reference; the partly filled last block is the child's own copy.
 *
 * Drafts (speculative decoding, batching/spec.h): a decoding sequence may
 * ask for n_draft tokens after its next one. Once decodes, prefill chunks
 * and admissions are planned, what is left of the step's budget (and at
 * most max_draft_tokens in all) goes to them, oldest first, in blocks
 * that are free now: a draft never preempts anyone and never delays a
 * prompt. The drafted positions are computed in the step but not counted
 * as cached by commit; colo_continuous_settle then keeps the ones the
 * caller accepted and gives back the blocks past the known tokens. Drafts
 * lie past the tokens known when a sequence was added or readmitted, so
 * they are never published to the prefix cache.
 *
 * The batch class (colo_seq.batch): sequences below every priority that
 * use only what the others leave of the device:
 *   - a step in which any other sequence runs or waits to be admitted
 *     plans no batch work, so the others' steps are the steps they would
 *     be without the batch (the caller may abandon a step of batch work
 *     alone when others arrive, batching/engine.h); except that with a
 *     floor (colo_continuous_set_batch_floor, F > 0), while the batch has
 *     work and fewer than F of the steps held it, its work joins such a
 *     step: those steps hold both, and are the others' (never abandoned),
 *     so that the batch progresses under load that keeps every step busy;
 *   - in the steps left to it, the batch's prompts get at most
 *     batch_step_tokens of a step (its decodes all run), so that what an
 *     abandoned step throws away stays small;
 *   - a sequence of any priority that waits for a place in the batch
 *     (max_running) or for KV blocks preempts running batch sequences
 *     (the most recently admitted first; kept and recomputed later), and
 *     the cache's own preemption takes batch sequences first. */
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
    /* Drops one reference of each block (frees the unshared ones). */
    void (*free)(void *ctx, const int32_t *ids, int n);
    /* ---- optional: sharing and prefix caching (NULL: off) ---- */
    /* One more reference on each of n held blocks. */
    void (*share)(void *ctx, const int32_t *ids, int n);
    /* References into out on the longest cached run of full blocks that
     * starts tokens (at most max_blocks) in the chain of root (a
     * sequence's root_key); returns its length; *last_key gets the key of
     * its last block (root for none). */
    int (*match)(void *ctx, uint64_t root, const int32_t *tokens, int n_tokens, int max_blocks, int32_t *out,
                 uint64_t *last_key);
    /* Publishes block id (full, computed) as tokens after the prefix whose
     * key is parent; returns its key. */
    uint64_t (*publish)(void *ctx, int32_t id, uint64_t parent, const int32_t *tokens);
} colo_block_allocator;

typedef enum colo_seq_state { COLO_SEQ_WAITING = 0, COLO_SEQ_RUNNING, COLO_SEQ_DONE } colo_seq_state;

typedef struct colo_seq {
    /* set by the caller before colo_continuous_add */
    void *owner;
    colo_priority priority;
    int32_t *tokens;   /* (cap) prompt then generated tokens; owned by the caller */
    int n_tokens;      /* known tokens */
    int cap;           /* capacity of tokens (the context length) */
    int32_t *blocks;   /* (max_blocks) this sequence's block table; owned by the caller */
    int max_blocks;
    uint64_t root_key; /* its prefix chain's root (the allocator's: 0 the model's own; a LoRA
                        * adapter's sequences share cached blocks among themselves only) */
    /* kept by the planner */
    int n_cached;      /* tokens whose K/V are in the cache */
    int n_blocks;      /* blocks held */
    colo_seq_state state;
    uint64_t admit_order;
    int n_preempted;   /* times it was preempted */
    int n_hit;         /* prompt tokens found in the prefix cache when first admitted */
    int n_published;   /* blocks of its table published (or found cached) */
    int n_prompt;      /* tokens known when it was added: only blocks within
                        * them are published (text generated later was
                        * computed by decode steps, whose products round
                        * unlike a prefill's, so a later prompt that found
                        * it cached could be answered differently from one
                        * that computed it) */
    uint64_t last_key; /* the key of block n_published - 1 */
    int n_draft;       /* set by the caller before each plan: tokens it drafted past n_tokens
                        * (0: none); the planner schedules at most that many */
    bool batch;        /* set by the caller before colo_continuous_add: the batch class (a
                        * line of an OpenAI batch), below every priority (see the rules above) */
    struct colo_seq *next; /* planner's lists */
} colo_seq;

typedef struct colo_continuous_config {
    int block_size;      /* tokens per KV block */
    int max_running;     /* sequences in the running batch at most */
    int max_step_tokens; /* tokens per step at most (>= max_running) */
    int total_blocks;    /* blocks the allocator holds in all (free or not) */
    int max_draft_tokens; /* drafted tokens per step at most, all sequences together; 0: no drafts */
    int batch_step_tokens; /* prefill tokens of batch-class sequences per step at most;
                            * 0: max_step_tokens / 16 (at least 1) */
} colo_continuous_config;

/* One sequence's part of a step: tokens [start, start + n) of seq->tokens.
 * logits: the step must produce logits for its last token (it reaches the
 * end of the known text, so the next token is sampled from them).
 * n_draft: a decoding sequence's drafted tokens, positions start + 1 ..
 * start + n_draft, computed after its token, each with logits (their
 * blocks are held). */
typedef struct colo_continuous_work {
    colo_seq *seq;
    int start;
    int n;
    bool logits;
    int n_draft;
} colo_continuous_work;

typedef struct colo_continuous colo_continuous;

colo_continuous *colo_continuous_create(const colo_continuous_config *cfg, const colo_block_allocator *alloc);
/* Every sequence must have been removed. Accepts NULL. */
void colo_continuous_destroy(colo_continuous *cb);

/* Adds a waiting sequence. COLO_EINVAL when it could never run: it has no
 * tokens, or its known tokens need more blocks than seq->max_blocks or than
 * cfg.total_blocks. NULL from create when cfg is inconsistent. */
colo_status colo_continuous_add(colo_continuous *cb, colo_seq *seq);

/* Plans the next step into work (room for max_running entries). Sequences
 * that had to stop because even alone they outgrow the cache are put in
 * stopped (room for max_running; state DONE, blocks freed) so the caller can
 * finish them with finish_reason "length". Returns the entries of work. */
int colo_continuous_plan(colo_continuous *cb, colo_continuous_work *work, colo_seq **stopped, int *n_stopped);

/* Preempts running sequences (lowest priority, most recently admitted
 * first; kept and recomputed later) until at least n_blocks blocks are
 * freed or none runs: how a borrower gives memory back at a step
 * boundary. Returns the blocks freed. */
int colo_continuous_shed(colo_continuous *cb, int n_blocks);

/* After the step ran: the planned tokens are now cached (and the blocks
 * that became full are published when prefix caching is on). */
void colo_continuous_commit(colo_continuous *cb, const colo_continuous_work *work, int n_work);

/* Adds child as a copy of running parent's computed state (the caller
 * filled child->tokens with parent's n_tokens tokens and set owner,
 * priority, cap, blocks, max_blocks). When the batch has room and a block
 * is free, the child runs at once: it shares parent's full blocks and gets
 * a block of its own for the partly filled one, whose first *copy_rows
 * slots the caller copies from block *copy_src to *copy_dst before the
 * next step (*copy_rows 0: nothing to copy). Otherwise it waits and is
 * computed when admitted (COLO_OK either way). COLO_EINVAL when parent is
 * not running or the allocator cannot share. */
colo_status colo_continuous_fork(colo_continuous *cb, colo_seq *parent, colo_seq *child, int32_t *copy_src, int32_t *copy_dst,
                         int *copy_rows);

/* After the step that verified seq's draft (work n_draft > 0) and the
 * caller appended the tokens it accepted: the first n_kept drafted
 * positions are cached (their tokens are the accepted ones), the rest
 * forgotten, and blocks past seq->n_tokens freed. */
void colo_continuous_settle(colo_continuous *cb, colo_seq *seq, int n_kept);

/* What a step may give the batch class: decodes of at most rows batch
 * sequences (1..max_running; the oldest first) and at most tokens of
 * their prompts (1..batch_step_tokens); both at their most at creation.
 * The caller shrinks them when it abandons steps of batch work, so that
 * the batch's steps fit the gaps the others leave. */
void colo_continuous_set_batch_share(colo_continuous *cb, int rows, int tokens);
void colo_continuous_get_batch_share(const colo_continuous *cb, int *rows, int *tokens);

/* The batch's floor: while the batch has work, at least share of the
 * steps hold some of it; steps the others would have alone take it when
 * the steps left to the batch fall short (share in [0, 1); 0, the
 * default: never). The account banks at most one step either way. A floor
 * step that finds no place or block for the batch's work is tried again at
 * the next step. */
void colo_continuous_set_batch_floor(colo_continuous *cb, double share);
/* Steps that held the batch's work beside the others' (by the floor). */
uint64_t colo_continuous_n_floor_steps(const colo_continuous *cb);

/* Prefix caching: sequences admitted, and tokens they found cached. */
uint64_t colo_continuous_prefix_queries(const colo_continuous *cb);
uint64_t colo_continuous_prefix_hit_tokens(const colo_continuous *cb);

/* Finished or canceled: frees its blocks and forgets it (any state). */
void colo_continuous_remove(colo_continuous *cb, colo_seq *seq);

int colo_continuous_n_running(const colo_continuous *cb);
int colo_continuous_n_waiting(const colo_continuous *cb);
uint64_t colo_continuous_n_preemptions(const colo_continuous *cb);

#endif
