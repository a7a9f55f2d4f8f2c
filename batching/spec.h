/* batching/spec.h: drafting tokens for speculative decoding, without a
 * draft model.
 *
 * Prompt lookup: the end of a sequence (its prompt and what it generated)
 * is matched against every earlier place in the same tokens, and the
 * tokens that followed the longest match (up to COLO_SPEC_MATCH_MAX tokens
 * compared; among equals the one nearest where the sequence was copying,
 * else the latest) are the draft. Text that copies its input (an edit of
 * a paragraph, fields pulled out of a document, quotes) drafts long runs
 * that the model accepts; free text drafts little, and from short
 * matches, whose drafts are kept less often (acceptance is kept apart by
 * the match's length, and for short matches by whether the last token
 * always went on the same way).
 *
 * The engine (batching/engine.h) verifies a draft in one step: the
 * sequence's next token and each drafted one are computed as rows of the
 * step, and every row's logits are the bits plain decoding would give that
 * position (one numeric path, docs/ARCHITECTURE.md "Precision").
 *
 * How much to draft is a bet: a step of more rows costs more (on a CPU
 * with AVX512-VNNI a step of 2 rows costs about 1.1 times what one row
 * does, 4 rows about 1.5 times and 8 about 2.2; with AVX2 alone each row adds about
 * half a row's time; on a GPU rows are nearly free up to the tens), and a
 * drafted token pays only when it is accepted.
 * colo_spec_plan picks each step's draft lengths to get the most tokens
 * per second from what the engine measured: the time of its decode steps
 * by their rows (colo_spec_costs) and each sequence's recent acceptance.
 * Pure host code. */
#ifndef COLO_BATCHING_SPEC_H
#define COLO_BATCHING_SPEC_H

#include <stdbool.h>
#include <stdint.h>

/* Prompt lookup compares at most this many tokens of a match. */
#define COLO_SPEC_MATCH_MAX 16
/* Drafted tokens per step when the config's speculative.tokens is not given. */
#define COLO_SPEC_DEFAULT_TOKENS 8
/* The most tokens one sequence drafts in a step (config tokens: 1..this). */
#define COLO_SPEC_MAX_TOKENS 16
/* A step with this many decoding sequences or more drafts nothing: its
 * products already have enough rows that verifying drafts costs about
 * what it saves (docs/CONFIG.md, speculative). */
#define COLO_SPEC_MAX_DECODES 8

/* A step of more rows than this drafts nothing more. */
#define COLO_SPEC_MAX_ROWS 32

/* A row count not measured in this many decode steps is measured again. */
#define COLO_SPEC_STALE_STEPS 32

/* A decode step's time by its rows (sequences' tokens and drafted ones),
 * learned as steps run: per row count a moving average that follows a
 * faster step at once and a slower one slowly, and when it was last
 * measured. Zeroed: nothing known. */
typedef struct colo_spec_costs {
    double ns[COLO_SPEC_MAX_ROWS + 1];        /* 0: not seen */
    uint64_t seen_at[COLO_SPEC_MAX_ROWS + 1]; /* steps counted when last seen */
    uint64_t steps;                           /* decode steps added */
} colo_spec_costs;

/* Adds a decode step of rows rows that took ns nanoseconds (ignored past
 * COLO_SPEC_MAX_ROWS). */
void colo_spec_costs_add(colo_spec_costs *c, int rows, uint64_t ns);
/* What colo_spec_plan takes a step of rows rows to cost: its average when
 * measured in the last COLO_SPEC_STALE_STEPS steps; else, when rows - 1
 * is, that one's (optimistic, so that one more row is tried and measured:
 * the plan grows a row at a time and stops growing where a row stops
 * paying); else 0, unknown. */
double colo_spec_cost(const colo_spec_costs *c, int rows);

/* A sequence's acceptance, apart for drafts from a match of 1, 2, 3-4
 * and 5 or more tokens (a longer match is likelier to go on as before),
 * the first three also apart when the match is split (colo_spec_match:
 * the last token went on in more than one way, and a draft from it is
 * kept far less often), for drafts from the suffix cache
 * (batching/spec_suffix.h) and for drafts of a draft model
 * (batching/spec_draft.h): the chance that a drafted token is accepted
 * given the one before it was, as a decaying count of successes over
 * trials. colo_spec_accept_init gives the priors (0.45, 0.6, 0.6 and
 * 0.75; split 0.2, 0.3 and 0.3; 0.5 and 0.7; of the weight of one trial).
 * The functions below take a draft's match length, COLO_SPEC_FROM_SUFFIX
 * or COLO_SPEC_FROM_MODEL, and whether the match was split (ignored but
 * for matches under 5 tokens). */
#define COLO_SPEC_FROM_SUFFIX (-1)
#define COLO_SPEC_FROM_MODEL (-2)
#define COLO_SPEC_CLASSES 9
typedef struct colo_spec_accept {
    float hits[COLO_SPEC_CLASSES], trials[COLO_SPEC_CLASSES];
} colo_spec_accept;
void colo_spec_accept_init(colo_spec_accept *a);
/* After verifying n_draft drafted tokens from a match of ngram tokens, of
 * which the first kept were accepted. */
void colo_spec_accept_add(colo_spec_accept *a, int ngram, bool split, int n_draft, int kept);
/* A step the sequence drafted nothing in: its estimates drift back toward
 * the priors, so that a sequence whose drafts failed tries again later. */
void colo_spec_accept_idle(colo_spec_accept *a);
float colo_spec_accept_rate(const colo_spec_accept *a, int ngram, bool split);

/* Draft lengths for a step of n_decodes decoding sequences, of which
 * n_cand have drafts: cand i at most avail[i] tokens, accepted at rate[i]
 * each. Fills len[i] (0..avail[i]) to make the expected tokens of the
 * step (n_decodes + the expected accepted) per its cost (c) the most,
 * with at most max_total drafted tokens and n_decodes + the total within
 * COLO_SPEC_MAX_ROWS; returns the total. Only totals whose cost is known
 * (colo_spec_cost) are weighed: with the step's plain cost unknown,
 * nothing is drafted, so that it is measured. */
int colo_spec_plan(const colo_spec_costs *c, int n_decodes, int n_cand, const int *avail, const float *rate,
                   int max_total, int *len);
/* The same where drafting costs too: each token drafted for cand i adds
 * tok_ns[i] nanoseconds to the step (a draft model's pass; 0 for prompt
 * lookup and the suffix cache), and its first once_ns[i] more (what the
 * draft model must compute before it can draft: a new prompt's catching
 * up, as colo_spec_amortize shares it); either NULL: nothing. */
int colo_spec_plan_costed(const colo_spec_costs *c, int n_decodes, int n_cand, const int *avail, const float *rate,
                          const double *tok_ns, const double *once_ns, int max_total, int *len);

/* A cost paid once that pays for the drafts of the rest of a sequence
 * (a draft model catching up with its prompt) is charged to one step as
 * its share over the steps left: ns over the steps that remaining tokens
 * (at most COLO_SPEC_CATCHUP_HORIZON: an answer often stops long before
 * max_tokens) take when each drafts k tokens accepted at rate. */
#define COLO_SPEC_CATCHUP_HORIZON 256
double colo_spec_amortize(double ns, int remaining, float rate, int k);

/* Prompt lookup's match: its length (0: none; at most
 * COLO_SPEC_MATCH_MAX), where in the tokens its draft starts (-1: none),
 * and whether it is split: the last token occurs earlier followed by
 * another token than the draft's first. */
typedef struct colo_spec_match {
    int ngram;
    int from;
    bool split;
} colo_spec_match;

/* Up to k tokens (k <= COLO_SPEC_MAX_TOKENS) into out that followed the
 * earlier place in tokens[0..n_tokens) that matches the most of its last
 * tokens (at least 1, at most COLO_SPEC_MATCH_MAX compared), the match
 * into *mt; returns how many (0: no match, or k <= 0). Among places that
 * match as much, the one whose draft starts nearest hint (-1: none), else
 * the latest: hint is where the text a sequence was copying goes on (the
 * last match's from plus the tokens the sequence has gained since), so
 * that after a token the model changed (a spelling fixed, a field
 * renamed) the copy resumes where it was rather than at the last place of
 * a common token. */
int colo_spec_lookup(const int32_t *tokens, int n_tokens, int k, int hint, int32_t *out, colo_spec_match *mt);

#endif
