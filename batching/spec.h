/* batching/spec.h: drafting tokens for speculative decoding, without a
 * draft model.
 *
 * Prompt lookup: the last n tokens of a sequence (its prompt and what it
 * generated) are looked for earlier in the same tokens, longest n first
 * (COLO_SPEC_NGRAM_MAX down to COLO_SPEC_NGRAM_MIN), the latest occurrence
 * first; the tokens that followed it are the draft. Text that copies its
 * input (an edit of a paragraph, fields pulled out of a document, quotes)
 * drafts long runs that the model accepts; free text drafts little.
 *
 * The engine (batching/engine.h) verifies a draft in one step: the
 * sequence's next token and each drafted one are computed as rows of the
 * step, and every row's logits are the bits plain decoding would give that
 * position (one numeric path, docs/ARCHITECTURE.md "Precision"). Pure host
 * code, no state. */
#ifndef COLO_BATCHING_SPEC_H
#define COLO_BATCHING_SPEC_H

#include <stdint.h>

#define COLO_SPEC_NGRAM_MAX 3
#define COLO_SPEC_NGRAM_MIN 1
/* Drafted tokens per step when the config's speculative.tokens is not given. */
#define COLO_SPEC_DEFAULT_TOKENS 8
/* The most tokens one sequence drafts in a step (config tokens: 1..this). */
#define COLO_SPEC_MAX_TOKENS 16
/* A step with this many decoding sequences or more drafts nothing: its
 * products already have enough rows that verifying drafts costs about
 * what it saves (docs/CONFIG.md, speculative). */
#define COLO_SPEC_MAX_DECODES 8

/* Up to k tokens (k <= COLO_SPEC_MAX_TOKENS) into out that followed the
 * latest earlier occurrence of the last n tokens of tokens[0..n_tokens),
 * for the longest n in [COLO_SPEC_NGRAM_MIN, COLO_SPEC_NGRAM_MAX] that
 * occurs; returns how many (0: no match, or k <= 0). */
int colo_spec_lookup(const int32_t *tokens, int n_tokens, int k, int32_t *out);

#endif
