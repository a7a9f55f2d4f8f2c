/* batching/spec_draft.h: drafting tokens for speculative decoding with a
 * draft model: another served llama model with the same vocabulary (a
 * quantized copy of the target is the usual one).
 *
 * The target's engine (batching/engine.h) runs the draft model itself, on
 * its own executor thread and its own stream, inside co-scheduler steps of
 * its own membership: the device sees drafting as the target's work at the
 * target's priority. What belongs to the draft model stays there: its
 * weights, and the KV blocks a drafting sequence holds, which come from
 * the draft model's KV cache (its memory, counted against its budget).
 *
 * Per sequence the draft keeps the K/V of the tokens it has seen
 * (colo_spec_draft_seq): before each draft it keeps the longest prefix of
 * them that the sequence still has (its accepted tokens; the rest is
 * rolled back, as the target's verification rolls its own back), computes
 * what is new, then proposes k tokens greedily, one forward pass each.
 * The sequences of one step draft together (colo_spec_draft_run_batch):
 * one pass computes the next draft token of each, so a step of s drafting
 * sequences costs k passes of s rows, not s * k passes of one; a row's
 * numbers do not depend on the rows beside it, so each sequence drafts
 * exactly the tokens it drafts alone.
 * Whatever the draft proposes, the target's verification decides every
 * token, so the output is the target's own (greedy: the same bits).
 *
 * The draft model is reached through a colo_spec_draft_src, which lends it
 * for a while (its executor is then between steps) or not at all (asleep,
 * unloaded, busy with its own step): then nothing is drafted and the
 * target decodes plainly. An epoch names the draft model's KV cache: when
 * it changes (the draft slept and woke, or another model took its place),
 * the blocks held from the old one are forgotten, never given back.
 *
 * Not thread-safe: one engine (its thread) owns a drafter. */
#ifndef COLO_BATCHING_SPEC_DRAFT_H
#define COLO_BATCHING_SPEC_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/arch/llama.h"
#include "runtime/cosched.h"

/* Lends the draft model (batching/served.c for served models). get: the
 * model, locked for the caller until put (NULL: not available now, and put
 * is not called), and the epoch of its KV cache (never 0); wait: wait for
 * the draft's own step to end, else give up at once when it runs one.
 * Any thread; ud outlives the drafter. */
typedef struct colo_spec_draft_src {
    colo_llama *(*get)(void *ud, bool wait, uint64_t *epoch);
    void (*put)(void *ud);
    void *ud;
} colo_spec_draft_src;

/* One sequence's state on the draft model. Zeroed: holds nothing. */
typedef struct colo_spec_draft_seq {
    uint64_t epoch;  /* the KV cache its blocks are from; 0: none */
    int32_t *blocks; /* (max_blocks) block table, n_blocks in use */
    int n_blocks, max_blocks;
    int32_t *tokens; /* (cap) the tokens at positions 0..n_kv whose K/V the blocks hold */
    int n_kv, cap;
} colo_spec_draft_seq;

typedef struct colo_spec_drafter colo_spec_drafter;

/* A drafter for sequences of up to max_seq_len tokens of a target of
 * n_vocab tokens, its logits in host memory of dev; NULL when out of
 * memory. src is copied. */
colo_spec_drafter *colo_spec_drafter_create(const colo_spec_draft_src *src, colo_device *dev, int n_vocab,
                                            int max_seq_len);
/* Gives back (waiting for the draft) what its sequences held. Accepts NULL. */
void colo_spec_drafter_free(colo_spec_drafter *d);

/* Borrows the draft model for this step's drafts (without waiting); false:
 * not available now. Pair with colo_spec_drafter_end. */
bool colo_spec_drafter_begin(colo_spec_drafter *d);
void colo_spec_drafter_end(colo_spec_drafter *d);

/* Between begin and end: up to k tokens (k <= COLO_SPEC_MAX_TOKENS) into
 * out that the draft model picks greedily after tokens[0..n_tokens), the
 * sequence's whole text, using and updating ds. The passes run on s
 * inside co-scheduler steps of member (may be NULL). Returns how many (0:
 * none, e.g. no KV block free in the draft model, a context the draft
 * cannot hold, or a failed pass: never an error of the sequence). */
int colo_spec_draft_run(colo_spec_drafter *d, colo_spec_draft_seq *ds, colo_stream *s, colo_cosched_member *member,
                        const int32_t *tokens, int n_tokens, int k, int32_t *out);

/* The most sequences that share a draft pass; a batch of more runs in
 * groups of this many. A pass's rows then stay within the decode steps
 * whose numerics do not depend on their row count on any CPU. */
#define COLO_SPEC_DRAFT_MAX_SEQS 8

/* One sequence's draft in colo_spec_draft_run_batch. */
typedef struct colo_spec_draft_req {
    colo_spec_draft_seq *ds;  /* its state, used and updated */
    const int32_t *tokens;    /* (n_tokens) the sequence's whole text */
    int n_tokens;
    int k;                    /* tokens wanted (at most COLO_SPEC_MAX_TOKENS are drafted) */
    int32_t *out;             /* (k) the drafted tokens */
    int n_out;                /* set: how many were drafted (0: none) */
} colo_spec_draft_req;

/* Between begin and end: colo_spec_draft_run for n sequences at once (of
 * distinct ds), their passes shared: each request's out and n_out are what
 * colo_spec_draft_run gives it alone, and its ds ends the same. */
void colo_spec_draft_run_batch(colo_spec_drafter *d, colo_spec_draft_req *reqs, int n, colo_stream *s,
                               colo_cosched_member *member);

/* ds's sequence is done: its blocks go back to the draft model (now when
 * it is free, else at the next begin or at colo_spec_drafter_free), and ds
 * is zeroed. Accepts a zeroed ds. */
void colo_spec_draft_seq_release(colo_spec_drafter *d, colo_spec_draft_seq *ds);

/* Nanoseconds spent in the draft model's passes, and the passes. */
uint64_t colo_spec_drafter_ns(const colo_spec_drafter *d);
uint64_t colo_spec_drafter_passes(const colo_spec_drafter *d);
/* What one drafted token costs (ns): a draft's passes over the tokens it
 * drafted (passes shared by several sequences over all their tokens), the
 * tokens accepted since the last one computed first, a moving average of
 * those measured (drafts after a new prompt aside); 0 before the first
 * with the current epoch. */
double colo_spec_drafter_token_ns(const colo_spec_drafter *d);
/* What a token of a catch-up pass costs (ns; a new prompt's tokens, in
 * passes of up to 128 of them): a moving average; 0 before the first with
 * the current epoch. */
double colo_spec_drafter_catchup_ns(const colo_spec_drafter *d);
/* Between begin and end: how many tokens of tokens[0..n_tokens) the draft
 * model computes before it can draft for ds's sequence (its whole text
 * for a sequence that never drafted, 1 or 2 after a step that did). */
int colo_spec_drafter_pending(const colo_spec_drafter *d, const colo_spec_draft_seq *ds, const int32_t *tokens,
                              int n_tokens);

#endif
