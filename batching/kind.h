/* batching/kind.h: the model-kind interface.
 *
 * A model kind (llama-family generative, bert encoder, ...) is one table of
 * functions, filled by each kind as a backend fills its vtable, plus an
 * opaque instance. batching/served.c owns queue, state and lifecycle and
 * calls the table; nothing above batching/ knows a kind's internals.
 *
 * A kind serves one task (generation or embeddings), which picks the
 * executor: generative kinds are driven by the continuous executor
 * (admit / step / cancel), encoders by the dynamic batcher (run_batch).
 *
 * Adding a kind: write batching/kind_<name>.c filling a
 * `const colo_model_kind colo_kind_<name>` and add one line to the table in
 * batching/kinds.c.
 *
 * Threads: memory_need, load and free on the controlling thread;
 * tokenize on any thread, concurrently with the executor (it reads only
 * what load built); the rest on the model's executor thread. */
#ifndef COLO_BATCHING_KIND_H
#define COLO_BATCHING_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/request.h"
#include "batching/model_cfg.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"

/* Bytes a model needs, from its files alone, before anything is allocated. */
typedef struct colo_kind_memory {
    size_t weight_bytes;
    size_t act_bytes;     /* activations of the largest step or batch */
    size_t kv_min_bytes;  /* KV cache of one full-length sequence (0 for encoders) */
    size_t overhead_bytes; /* alignment and small buffers */
    size_t host_bytes;     /* host memory outside the arena while the model is served, at most (its
                            * tokenizer, the executor's state): counted against the budget by
                            * colo_mem_pool_hold, awake or asleep */
    int step_tokens;      /* the step the activations are sized for */
    int max_seq_len;      /* tokens */
    int max_batch;        /* sequences running at once (generation) or inputs per batch (encoders) */
    const char *what;     /* e.g. the architecture ("gemma3"), for messages; may be NULL */
} colo_kind_memory;

/* What a loaded instance reports (executor or any thread; values may be a
 * step old). */
typedef struct colo_kind_info {
    int max_seq_len;       /* generation: prompt + generated tokens; encoders: tokens per input */
    int n_vocab;
    int dim;               /* encoders: floats per embedding */
    size_t weight_bytes;
    size_t act_bytes;      /* activation scratch reserved */
    size_t kv_bytes;       /* KV cache reserved (generation) */
    size_t kv_used_bytes;  /* of which blocks in use */
    int kv_blocks, kv_free_blocks, kv_block_size;
    int kv_tokens;         /* tokens the whole cache holds */
    uint64_t preemptions;
    int running;           /* sequences in the engine */
    int in_batch;          /* of which in the running batch (the rest wait for KV space) */
    /* prefix caching (generation) */
    bool prefix_cache;          /* on */
    uint64_t prefix_queries;    /* sequences admitted */
    uint64_t prefix_hit_tokens; /* prompt tokens found cached */
    size_t prefix_cached_bytes; /* KV blocks in the cache's index */
    /* steps (generation; batching/engine.h), since the model was loaded */
    uint64_t steps_by_kind[3];  /* decode, prefill, mixed */
    uint64_t tokens_by_kind[3]; /* tokens computed in them */
    uint64_t plan_ns, forward_ns, sample_ns;
    double prefill_tok_ns;      /* a prompt token's time in prefill steps, on average (0: none yet) */
    /* speculative decoding (generation): tokens drafted and verified, of
     * which accepted, and the sequences' steps that verified a draft */
    uint64_t spec_drafted, spec_accepted, spec_steps;
    /* of them by source: prompt lookup, the suffix cache, the draft model;
     * and the draft model's passes and their time */
    uint64_t spec_lookup_drafted, spec_lookup_accepted, spec_suffix_drafted, spec_suffix_accepted;
    uint64_t spec_draft_drafted, spec_draft_accepted, spec_draft_passes, spec_draft_ns;
    size_t adapter_bytes;       /* LoRA adapters in the arena */
} colo_kind_info;

/* The executor's side of a running request: the kind reports tokens and
 * the end through these (executor thread). */
typedef struct colo_kind_sink {
    /* false: stop the request (its on_token refused more) */
    bool (*token)(void *ud, colo_request *r, int32_t token, const char *piece, size_t len);
    /* r->out is filled (status, text, tokens, timestamps in ns below) */
    void (*done)(void *ud, colo_request *r, uint64_t first_step_ns, uint64_t first_token_ns, uint64_t done_ns);
    /* optional (NULL: never): true when requests above the batch class wait
     * for the executor, so that a step holding only lines of batches may be
     * abandoned (asked inside a step) */
    bool (*yield)(void *ud);
    /* the model's draft model for speculative decoding (config
     * speculative.draft; batching/spec_draft.h): draft_get lends the draft
     * kind's draft_model, locked until draft_put (NULL: none now, and no
     * draft_put), and the epoch of its KV cache; wait: wait for the draft's
     * own step, else give up at once. NULL when the model has no draft.
     * Any thread. */
    void *(*draft_get)(void *ud, bool wait, uint64_t *epoch);
    void (*draft_put)(void *ud);
    void *ud;
} colo_kind_sink;

typedef struct colo_model_kind {
    const char *name; /* the config's `kind:` */
    colo_task task;

    /* Memory mc's model needs (the batching settings size the activations).
     * COLO_EFORMAT / COLO_EIO with a message naming the file and key or
     * tensor. Required. */
    colo_status (*memory_need)(const colo_model_cfg *mc, colo_kind_memory *out, char *err, size_t errlen);
    /* Loads into arena (weights copied on s) and sizes the rest of the
     * arena (KV cache). NULL with a message. Required. */
    void *(*load)(const colo_model_cfg *mc, colo_arena *arena, colo_stream *s, const colo_kind_sink *sink,
                  char *err, size_t errlen);
    /* Frees what load made; accepts NULL. Required. */
    void (*free)(void *inst);
    /* Tokenizes r->in into r->tok (from r->pool), applying the chat
     * template to messages, and checks it can ever run: COLO_EINVAL with
     * the token counts when it cannot (prompt + max_tokens past the
     * context or the whole KV cache); may shorten a default max_tokens.
     * COLO_ENOMEM when out of memory. Required. */
    colo_status (*tokenize)(void *inst, colo_request *r, char *err, size_t errlen);
    void (*info)(void *inst, colo_kind_info *out); /* required */
    /* The text of token ids (from pool; the bytes the tokens stand for,
     * special tokens as their text). Any thread. Optional (NULL: the kind
     * has no text output). */
    colo_status (*detokenize)(void *inst, const int32_t *ids, int n, colo_pool *pool, const char **text, size_t *len,
                              char *err, size_t errlen);

    /* ---- generation (task COLO_TASK_GENERATE): the continuous executor ---- */
    /* Takes r (tokenized) into the running batch. COLO_ENOMEM / COLO_EINVAL
     * with a message when it cannot; the sink is then not called. */
    colo_status (*admit)(void *inst, colo_request *r, char *err, size_t errlen);
    /* One step over the running batch; *n_tokens gets the tokens computed
     * (0: nothing could run). A device error fails the step's requests
     * through the sink and is returned. */
    colo_status (*step)(void *inst, colo_cosched_member *member, int *n_tokens);
    /* Ends r now with status (the sink's done runs before this returns). */
    void (*cancel)(void *inst, colo_request *r, colo_status status, const char *msg);
    /* True once r has been scheduled in a step (its queue wait is over). */
    bool (*started)(void *inst, const colo_request *r);

    /* ---- embeddings (task COLO_TASK_EMBED): the dynamic batcher ---- */
    /* Runs rs (tokenized) and fills each one's outcome; returns the batch's
     * status (a device error fails them all). *n_steps: forward passes. */
    colo_status (*run_batch)(void *inst, colo_request *const *rs, int n, colo_cosched_member *member, int *n_steps);

    /* ---- lifecycle, optional (NULL: not supported) ---- */
    /* Drops what can be rebuilt (KV cache) and moves weights off the device. */
    colo_status (*sleep)(void *inst, char *err, size_t errlen);
    /* Restores the model as it was put to sleep: the same limits and KV
     * cache, the adapters it held. A wake that fails leaves it asleep
     * (nothing loaded), to be woken again: COLO_ENOMEM when memory was
     * short (retried while others give memory back), another status
     * otherwise, with the reason. */
    colo_status (*wake)(void *inst, char *err, size_t errlen);
    /* Idle, awake: drops what can be rebuilt and is not in use (cached KV
     * blocks), keeping the weights; optional (NULL: nothing to drop). */
    void (*trim)(void *inst);
    /* ---- LoRA adapters (models/arch/lora.h), optional (NULL: the kind takes none) ----
     * load loads mc->adapters into slots 0..n_adapters-1 itself; these add
     * and remove others at run time (executor thread, between steps; a
     * sleeping model loads them as it wakes). Adapters take the room the
     * model keeps for them (the config's and adapter_memory_bytes), counted
     * the same at load, add and wake. adapter_add: COLO_EFORMAT / COLO_EIO
     * naming the file and tensor, COLO_ENOMEM when the room cannot hold it
     * (the message names adapter_memory_bytes), awake or asleep. */
    colo_status (*adapter_add)(void *inst, const char *path, float scale, int *slot, char *err, size_t errlen);
    void (*adapter_remove)(void *inst, int slot); /* no running request may use it */
    /* Its rank and bytes in the arena (0 while the model sleeps). */
    void (*adapter_info)(void *inst, int slot, int *rank, size_t *bytes);
    /* ---- draft models (speculative.draft), optional (NULL: the kind neither drafts nor is drafted for) ----
     * draft_check: whether draft's model can draft for target's, from the
     * files alone: COLO_EINVAL when their vocabularies differ (the message
     * says where), COLO_EFORMAT / COLO_EIO for a file that cannot be read.
     * draft_model: what another instance's engine drafts with (for llama,
     * its colo_llama with its KV cache), NULL while it sleeps; asked with
     * the executor between steps (batching/served.c keeps it there). */
    colo_status (*draft_check)(const colo_model_cfg *target, const colo_model_cfg *draft, char *err, size_t errlen);
    void *(*draft_model)(void *inst);
} colo_model_kind;

/* The kind named name ("llama", "bert"), or NULL. */
const colo_model_kind *colo_kind_find(const char *name);
/* Every kind's name into buf, for messages: "llama, bert". */
void colo_kind_names(char *buf, size_t cap);

/* What a kind can do. Every such question is answered from the kind's
 * table (its optional slots; generation or embeddings is its task), never
 * from its name, so that a new kind is its own file and one line in
 * batching/kinds.c. */
typedef enum colo_kind_cap {
    COLO_KIND_CAN_ADAPTERS,   /* LoRA adapters: adapter_add */
    COLO_KIND_CAN_DETOKENIZE, /* tokens back to text: detokenize */
    COLO_KIND_CAN_SLEEP,      /* sleep and wake */
} colo_kind_cap;
/* False for k NULL. */
bool colo_kind_can(const colo_model_kind *k, colo_kind_cap cap);
/* The same for the kind named name; false for a name no kind has. */
bool colo_kind_named_can(const char *name, colo_kind_cap cap);
/* The names of the kinds that can, into buf, for messages: "llama". */
void colo_kind_names_that_can(colo_kind_cap cap, char *buf, size_t cap_bytes);

#endif
