/* batching/engine.h: generation on a llama model with continuous batching.
 *
 * The engine owns the model's paged KV cache and the running sequences.
 * Each colo_engine_step plans a step with the continuous planner
 * (batching/continuous.h), runs one forward pass over every scheduled token,
 * samples the next token of each sequence that reached the end of its known
 * text, and reports text as it becomes final: only complete UTF-8, and never
 * bytes that might still turn out to be part of a stop string.
 *
 * One thread drives an engine (colo-generate's main thread, or a served
 * model's executor); callbacks run on that thread. */
#ifndef COLO_BATCHING_ENGINE_H
#define COLO_BATCHING_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "batching/continuous.h"
#include "batching/spec_draft.h"
#include "models/sample/json_schema.h"
#include "models/arch/llama.h"
#include "models/sample/sampler.h"
#include "runtime/cosched.h"

#define COLO_ENGINE_MAX_STOP 8
#define COLO_ENGINE_MAX_LOGPROBS 20
#define COLO_ENGINE_MAX_CHOICES 16

typedef struct colo_engine_params {
    int max_tokens;      /* >= 1 */
    float temperature;   /* 0 = greedy */
    float top_p;         /* (0, 1] */
    int top_k;           /* 0 = off */
    uint64_t seed;
    const char *stop[COLO_ENGINE_MAX_STOP]; /* copied at colo_engine_add */
    int n_stop;
    int32_t stop_ids[COLO_ENGINE_MAX_STOP]; /* tokens that end it, besides the engine's */
    int n_stop_ids;
    colo_sampler_shape shape;  /* penalties, biases, min-p (biases copied at colo_engine_add) */
    bool json_object;          /* constrained decoding: the output is a JSON object (models/sample/json_schema.h) */
    const char *json_schema;   /* ... or a document valid against this JSON Schema (text, compiled at
                                * colo_engine_add, which refuses one it cannot compile); NULL: none */
    bool logprobs;             /* keep each token's log-probability ... */
    int top_logprobs;          /* ... and this many top ones (0..20) */
    colo_priority priority;
    bool batch;                /* the batch class, below every priority (batching/continuous.h) */
    /* a LoRA adapter of the model (models/arch/lora.h) runs this sequence:
     * has_adapter, in slot adapter_slot; its prompt reuses cached blocks of
     * that adapter's sequences only */
    bool has_adapter;
    int adapter_slot;
    bool no_spec;              /* plain decoding: this sequence drafts nothing (config spec_tokens) */
    /* whose outputs the suffix cache may draft from, and stores this one's
     * under (organization/project; NULL or "": the tenant of requests
     * without one); copied at colo_engine_add */
    const char *tenant;
} colo_engine_params;

typedef struct colo_engine_outcome {
    colo_status status;        /* COLO_OK, COLO_ECANCELED, or the step's error */
    const char *error;         /* when status != OK */
    const char *finish_reason; /* "stop" | "length" when OK */
    int stop_index;            /* the stop string that ended it (index into params.stop), or -1 */
    const int32_t *tokens;     /* generated ids (stop tokens excluded) */
    int n_tokens;
    /* when params.logprobs, per generated token (n_tokens): the chosen
     * token's log-probability, and top_logprobs top ones (ids, values; a
     * row of max(top_logprobs, 1) per token) */
    const float *logprobs;
    const int32_t *top_ids;
    const float *top_logprobs;
    int n_prompt;
    int n_cached_prompt;       /* of them, found in the prefix cache (not computed) when first admitted */
    const char *text;          /* generated text, stop string removed */
    size_t text_len;
    uint64_t added_ns, first_step_ns, first_token_ns, done_ns; /* monotonic */
    int n_preempted;
} colo_engine_outcome;

typedef struct colo_engine_callbacks {
    /* New final text (may be empty when held back) for a generated token. */
    void (*on_token)(void *ud, int32_t token, const char *piece, size_t len);
    /* Exactly once per sequence, after which it is freed. */
    void (*on_done)(void *ud, const colo_engine_outcome *out);
    void *ud;
} colo_engine_callbacks;

typedef struct colo_engine_config {
    int max_running;     /* sequences per step (continuous batch size) */
    int max_step_tokens; /* chunked-prefill token budget per step */
    int block_size;      /* KV block, tokens */
    colo_dtype kv_type;  /* F16 (also for a value colo_dtype_is_kv refuses), F32, Q8_0 or Q4_0 */
    int n_blocks;        /* 0: every block the arena can hold after weights and activations */
    int max_seq_len;     /* 0: the model's context length */
    /* tokens that end generation (the model's EOS and end-of-turn tokens,
     * models/sample/chat.h); none given: the tokenizer's EOS alone */
    int32_t stop_ids[4];
    int n_stop_ids;
    bool no_prefix_cache; /* true: prompts never reuse cached KV blocks (models/cache/kv_cache.h) */
    /* the bounds a response's schema leaves open, copied at create (NULL:
     * COLO_SCHEMA_OPTIONS_DEFAULT) */
    const colo_schema_options *schema;
    /* speculative decoding by prompt lookup (batching/spec.h): a decoding
     * sequence drafts up to spec_tokens tokens (1..COLO_SPEC_MAX_TOKENS)
     * from its own text and the step verifies them, keeping the longest
     * run the sampler picks itself (each row's token drawn as plain
     * decoding draws it: the same tokens, greedy or seeded, and the same
     * distribution); 0: off. No sequence drafts in a step of
     * COLO_SPEC_MAX_DECODES or more decoding sequences, and each step
     * drafts what colo_spec_plan expects to pay for itself by the decode
     * steps' measured times and the sequences' acceptance. */
    int spec_tokens;
    bool spec_always; /* draft whatever lookup finds, up to spec_tokens, whatever it costs */
    /* with spec_tokens > 0: drafts also from a suffix cache of the model's
     * recent outputs in this many bytes (batching/spec_suffix.h; a
     * sequence drafts only from its own tenant's outputs); 0: none */
    size_t spec_suffix_bytes;
    bool spec_no_lookup; /* drafts from the suffix cache only, not from the sequence's own text */
    /* with spec_tokens > 0: drafts also with a draft model
     * (batching/spec_draft.h), lent by this source (copied; its ud
     * outlives the engine) whenever it is free: a sequence's draft is the
     * model's unless its own text or the suffix cache drafted, and their
     * drafts have fared at least as well as the model's; NULL: none */
    const colo_spec_draft_src *draft;
    /* NULL, or asked between the layers of a step that holds only work of
     * the batch class (batching/continuous.h): true abandons the step, so
     * that what waits outside the engine starts sooner; nothing of it is
     * kept and its sequences run in a later step. Executor thread. */
    bool (*yield)(void *ud);
    void *yield_ud;
} colo_engine_config;

/* The prefix cache's counters. */
typedef struct colo_engine_prefix_info {
    bool enabled;
    uint64_t queries;    /* sequences admitted (a preempted one again when readmitted) */
    uint64_t hit_tokens; /* prompt tokens they found cached, not computed */
    int cached_blocks;   /* blocks in the index */
    int evictable_blocks; /* of which nobody references */
    uint64_t evicted_blocks;
} colo_engine_prefix_info;

/* Where the engine's steps went. A step is a decode step when every
 * sequence in it computes its one next token, a prefill step when none
 * does, mixed otherwise (a prompt's chunk beside running decodes: on the
 * CPU its products keep exact activations, docs/API.md). The times split
 * each step: planning and building the batch, the forward pass (queuing
 * the ops and waiting for the device: colo_stream_get_stats tells the
 * wait), sampling and handing the tokens out. */
enum { COLO_ENGINE_STEP_DECODE, COLO_ENGINE_STEP_PREFILL, COLO_ENGINE_STEP_MIXED, COLO_ENGINE_STEP_KINDS };
typedef struct colo_engine_step_stats {
    uint64_t steps[COLO_ENGINE_STEP_KINDS];  /* steps of each kind */
    uint64_t tokens[COLO_ENGINE_STEP_KINDS]; /* tokens computed in them */
    uint64_t plan_ns, forward_ns, sample_ns;
    uint64_t prefill_ns; /* forward time of the prefill steps, among forward_ns */
    /* speculative decoding: tokens drafted and verified, of which accepted
     * (each accepted one is a step saved), and the steps that had drafts */
    uint64_t spec_drafted, spec_accepted, spec_steps;
    /* of them, drafted by the draft model (cfg.draft), and its passes and
     * their time (counted in plan_ns); a pass computes the next draft
     * token of every sequence drafting with the model in the step */
    uint64_t spec_model_drafted, spec_model_accepted, spec_model_passes, spec_model_ns;
    /* of them, drafted by prompt lookup (the sequence's own text) and from
     * the suffix cache (cfg.spec_suffix_bytes) */
    uint64_t spec_lookup_drafted, spec_lookup_accepted, spec_suffix_drafted, spec_suffix_accepted;
    uint64_t abandoned; /* steps of batch-class work given up for others (cfg.yield), among steps */
    uint64_t batch_steps; /* steps of batch-class work alone (the co-scheduler's COLO_STEP_BATCH), among steps */
    uint64_t floor_steps; /* steps that held batch-class work beside others' by the co-scheduler's
                           * batch_min_share (batching/continuous.h), among steps */
} colo_engine_step_stats;

typedef struct colo_engine colo_engine;
typedef struct colo_engine_seq colo_engine_seq;

/* Generated token i's log-probabilities (params.logprobs): false
 * otherwise. ids/lps point into the sequence (valid until it finishes). */
bool colo_engine_seq_logprobs(const colo_engine_seq *q, int i, float *lp, const int32_t **ids, const float **lps, int *k);

colo_engine *colo_engine_create(colo_llama *m, colo_stream *s, const colo_engine_config *cfg, char *err,
                                        size_t errlen);
/* Cancels what is left (on_done with COLO_ECANCELED). Accepts NULL. */
void colo_engine_free(colo_engine *e);

/* Adds a sequence with its prompt tokens. NULL with a message when it can
 * never run (empty, or prompt + 1 longer than the context or the cache, or
 * an adapter slot that holds none). */
colo_engine_seq *colo_engine_add(colo_engine *e, const int32_t *prompt, int n_prompt, const colo_engine_params *p,
                           const colo_engine_callbacks *cb, char *err, size_t errlen);
/* n (1..COLO_ENGINE_MAX_CHOICES) sequences of one prompt: the prompt is
 * computed once, then they fork (sharing its KV blocks) and each samples
 * with its own callbacks cbs[i] and random stream (p->seed + i). seqs gets
 * the n sequences (each finishes on its own). COLO_EINVAL with a message
 * when it can never run, COLO_ENOMEM. */
colo_status colo_engine_add_n(colo_engine *e, const int32_t *prompt, int n_prompt, const colo_engine_params *p, int n,
                           const colo_engine_callbacks *cbs, colo_engine_seq **seqs, char *err, size_t errlen);
/* Finishes seq now with COLO_ECANCELED (its on_done runs before this returns). */
void colo_engine_cancel(colo_engine *e, colo_engine_seq *seq);

/* Runs one step. *n_scheduled gets the tokens computed (0: nothing to do).
 * member (may be NULL) brackets the step for the co-scheduler. A device
 * error fails the sequences of the step (on_done with the status) and is
 * returned. */
colo_status colo_engine_step(colo_engine *e, colo_cosched_member *member, int *n_scheduled);

/* True once seq has been scheduled in a step (its queue wait is over). */
bool colo_engine_seq_started(const colo_engine_seq *seq);

int colo_engine_n_running(const colo_engine *e);
int colo_engine_n_waiting(const colo_engine *e);
int colo_engine_kv_blocks(const colo_engine *e);
int colo_engine_kv_free_blocks(const colo_engine *e);
int colo_engine_max_seq_len(const colo_engine *e);
uint64_t colo_engine_preemptions(const colo_engine *e);
void colo_engine_prefix_stats(const colo_engine *e, colo_engine_prefix_info *out);
/* Evicts every cached block nobody references; returns how many. */
int colo_engine_prefix_flush(colo_engine *e);
/* Constrained decoding: nanoseconds spent masking the vocabulary, and the
 * masks made (one per constrained token), since the engine was made. */
/* The step counters since the engine was created (its thread). */
void colo_engine_get_step_stats(const colo_engine *e, colo_engine_step_stats *out);
uint64_t colo_engine_mask_ns(const colo_engine *e);
uint64_t colo_engine_mask_count(const colo_engine *e);
/* KV blocks given back to other models' guarantees (elastic memory). */
uint64_t colo_engine_kv_reclaimed_blocks(const colo_engine *e);

#endif
