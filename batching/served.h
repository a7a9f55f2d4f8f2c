/* batching/served.h: one model being served: its kind (batching/kind.h),
 * arena, stream, queue, co-scheduler membership and executor thread.
 *
 * colo_served_load asks the model's kind what the model needs (weights,
 * activations of the largest step, one full-length sequence's KV cache),
 * checks that it fits memory_fraction of the device budget (the message
 * gives the bytes needed and available), creates the arena, the stream
 * (priority and compute units from the caller) and loads the model into
 * the arena. colo_served_start runs the executor thread, picked by the
 * kind's task:
 *  - generation (served_continuous.c): continuous batching through the
 *    kind's admit/step. Requests are admitted from the queue while fewer
 *    than max_batch_size are live; when the KV cache is full, new requests
 *    wait in the queue (their queue deadline still runs: COLO_ETIMEDOUT at
 *    the end), running sequences are never failed for memory.
 *  - embeddings (served_dynamic.c): the dynamic batcher
 *    (colo_queue_form_batch with max_batch_size, preferred sizes and
 *    max_queue_delay_us), the kind's run_batch per batch.
 * Every step is bracketed by the co-scheduler (runtime/cosched.h).
 *
 * A request is tokenized by the model's kind when it is submitted, before
 * it is queued, so its exact length is known: one that can never run is
 * refused at once with the token counts. Inputs longer than
 * COLO_SERVED_INLINE_TOKENIZE_BYTES are tokenized on the model's preparing
 * thread instead, so that a long prompt never stalls the caller (the event
 * loop): the outcome of that tokenization then arrives through on_done.
 *
 * Outcome statuses (r->out.status): COLO_OK; COLO_EINVAL (the input can
 * never run: prompt plus max_tokens longer than the context or the whole
 * KV cache, inputs the tokenizer refuses); COLO_EAGAIN (the queue was full
 * when a long input had been tokenized); COLO_ETIMEDOUT (queue deadline
 * passed before the request started); COLO_ECANCELED (colo_served_cancel,
 * a stream its client did not read, or the model stopped); COLO_ENOMEM,
 * COLO_EDEVICE, COLO_EFATAL (the step failed; EFATAL: the device context
 * is lost and the model is now failed).
 *
 * Thread safety: submit, cancel, info and the state may be called from any
 * thread; load, start, stop and free from one controlling thread. */
#ifndef COLO_BATCHING_SERVED_H
#define COLO_BATCHING_SERVED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/request.h"
#include "batching/model_cfg.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"

typedef enum colo_served_state {
    COLO_SERVED_LOADING = 0,
    COLO_SERVED_READY = 1,
    COLO_SERVED_FAILED = 2,   /* a device error lost the model; requests get 503 */
    COLO_SERVED_STOPPING = 3, /* shutting down; no new requests */
    COLO_SERVED_SLEEPING = 4, /* KV cache and weights dropped; a request wakes it */
    COLO_SERVED_WAKING = 5,   /* loading its weights again; requests wait in the queue */
    COLO_SERVED_DRAINING = 6, /* finishing what it has before it is unloaded; no new requests */
} colo_served_state;

const char *colo_served_state_name(colo_served_state s);

/* Where a speculative draft came from (config speculative: lookup, suffix,
 * draft). */
typedef enum colo_spec_source {
    COLO_SPEC_SOURCE_LOOKUP, /* the sequence's own prompt and output */
    COLO_SPEC_SOURCE_SUFFIX, /* the model's suffix cache of its tenant's outputs */
    COLO_SPEC_SOURCE_DRAFT,  /* the draft model */
    COLO_SPEC_SOURCES
} colo_spec_source;

/* "lookup", "suffix", "draft": the config's keys, also /metrics' and
 * /v1/stats' names. */
const char *colo_spec_source_name(colo_spec_source s);

/* Called on the executor thread after every step (for metrics). */
typedef struct colo_served_hooks {
    /* batch: requests (bert) or sequences (llama) in the step; tokens computed */
    void (*on_step)(void *ud, const char *model, int batch, int tokens, double step_ms, double sched_wait_ms);
    /* after the model woke (may be NULL): how long the wake took */
    void (*on_wake)(void *ud, const char *model, double wake_s);
    void *ud;
} colo_served_hooks;

typedef struct colo_served_env {
    colo_device *dev;
    colo_cosched *cs;              /* may be NULL: no co-scheduling */
    size_t budget_bytes;           /* the budget fractions apply to; 0 = colo_arena_device_budget */
    colo_stream_config stream;     /* the model's stream (priority, compute units) */
    colo_served_hooks hooks;
    /* the device-wide memory pool (runtime/arena.h) the model's arena
     * joins, guaranteed memory_fraction and growing to memory_max_fraction;
     * NULL: a fixed arena of memory_fraction */
    colo_mem_pool *pool;
    /* with a pool: the models that may be put to sleep to make room for
     * this one's guarantee (batching/evictor.h); NULL: none */
    struct colo_evictor *evictor;
} colo_served_env;

typedef struct colo_served colo_served;

/* Inputs up to this many bytes are tokenized on the submitting thread. */
#define COLO_SERVED_INLINE_TOKENIZE_BYTES 4096

/* Checks, from the model's file headers alone, that mc's model fits
 * memory_fraction of budget_bytes (the checks of colo_served_load before it
 * allocates). COLO_EINVAL for an unknown kind (the message lists the
 * known ones), COLO_EFORMAT / COLO_EIO for a file that cannot be read as
 * the kind, COLO_ENOMEM with the bytes needed and available. */
colo_status colo_served_check(const colo_model_cfg *mc, size_t budget_bytes, char *err, size_t errlen);
/* The same, and on success the plan in plan (one line: weights, KV cache
 * per sequence of max_seq_len and for the whole batch, activations, what
 * memory_fraction gives); plan may be NULL. */
colo_status colo_served_plan(const colo_model_cfg *mc, size_t budget_bytes, char *plan, size_t plan_len, char *err,
                             size_t errlen);

/* Loads mc's model. NULL with a message naming the model, the file and
 * the problem (memory, missing tensor...). The model is not serving yet. */
colo_served *colo_served_load(const colo_model_cfg *mc, const colo_served_env *env, char *err, size_t errlen);
/* The same in two steps, for a load at run time: colo_served_create makes
 * the model in state LOADING (it answers info and refuses requests; NULL
 * with a message for an unknown kind or no memory); colo_served_load_in,
 * on any one thread, loads it (with an evictor, first making room for its
 * guarantee: COLO_ENOMEM with the bytes needed and available). On
 * failure the model is FAILED with the message as its error, and can be
 * unloaded or freed as any other. */
colo_served *colo_served_create(const colo_model_cfg *mc, const colo_served_env *env, char *err, size_t errlen);
colo_status colo_served_load_in(colo_served *m, char *err, size_t errlen);
/* A model that will not load (its loading thread could not start): FAILED with msg. */
void colo_served_set_failed(colo_served *m, const char *msg);
/* Whether a sleeping model's guarantee can be had again, counting the
 * models that may be put to sleep for it (batching/evictor.h): COLO_ENOMEM
 * with the bytes needed and available; COLO_OK when it holds it already. */
colo_status colo_served_wake_fits(colo_served *m, size_t *need_bytes, size_t *avail_bytes);
/* Starts the executor; the model is then ready. */
colo_status colo_served_start(colo_served *m, char *err, size_t errlen);
/* Refuses new requests, cancels queued and running ones (their on_done
 * runs with COLO_ECANCELED) and joins the executor. Idempotent. */
void colo_served_stop(colo_served *m);
/* Stops it and frees everything. Accepts NULL. */
void colo_served_free(colo_served *m);

/* Sleep and wake (any thread; they ask the executor, which acts between
 * steps). colo_served_sleep: once the requests it runs have finished (it
 * admits no new ones meanwhile), the model drops its KV cache and weights
 * (the kind's sleep), gives its guarantee back to the pool and is
 * SLEEPING; a queued request, or colo_served_wake, wakes it (its guarantee
 * taken again, by eviction if need be; WAKING, then READY). A wake whose
 * guarantee cannot be had leaves it SLEEPING and answers what is queued
 * with COLO_ENOMEM and the bytes. COLO_EUNSUPPORTED when
 * the kind cannot sleep, COLO_ECANCELED when the model is not serving
 * (failed, draining, stopping). */
colo_status colo_served_sleep(colo_served *m, char *err, size_t errlen);
colo_status colo_served_wake(colo_served *m, char *err, size_t errlen);
/* ---- eviction (batching/evictor.h asks; served_evict.c answers) -------------------
 * The evictor reads a model through a view and asks it to lend or sleep
 * through these functions; the model's own state is written by served
 * alone. Any thread. */
typedef struct colo_served_evict_view {
    const char *name;          /* the config's; lives as long as the model */
    colo_priority priority;
    colo_served_state state;
    bool sleepable;            /* READY, not pinned or draining, of a kind that sleeps, holding a guarantee */
    bool busy;                 /* requests running or queued */
    bool asked;                /* asked to lend or sleep, not done (nor refused) yet */
    bool stopping;             /* being stopped: a claim of its own gives up */
    bool can_trim;             /* its kind can drop its cached KV blocks */
    int running, queued;
    uint64_t last_used_ns;     /* the last request submitted (or the start) */
    uint64_t resident_since_ns; /* when it last woke or started */
    size_t guarantee_now;      /* its guarantee now: what it gives back asleep */
    size_t guarantee_idle;     /* of which unused, its cached blocks counted unused: what it lends awake */
} colo_served_evict_view;
void colo_served_evict_view_of(colo_served *m, colo_served_evict_view *v);
/* Asks m to drop its cached KV blocks and lend the rest of its unused
 * guarantee, staying awake. */
void colo_served_evict_trim(colo_served *m);
/* Asks m to sleep to make room: it admits nothing new, finishes what
 * runs, then sleeps. Counted as an eviction, and as a preemption when it
 * is busy (its queued requests wake it again). True when it was busy. */
bool colo_served_evict_sleep(colo_served *m);

/* Refuses new requests (COLO_ECANCELED) while what is queued and running
 * finishes; colo_served_drained then says when it is done. */
void colo_served_drain(colo_served *m);
bool colo_served_drained(colo_served *m);
/* Stops the model and frees its instance, stream and arena (its memory
 * goes back to the device and the pool); the struct stays, for
 * colo_served_free, and answers info with nothing in memory. Controlling
 * thread; after colo_served_drained, or to cancel what is left. */
void colo_served_unload(colo_served *m);

/* Tokenizes r (filled by the caller; r->who.priority orders it) and queues
 * it. COLO_OK: on_done will run exactly once. COLO_EINVAL: r can never run
 * on this model (the message says why, with the token counts; answer 400).
 * COLO_EAGAIN: the queue is full (429). COLO_ECANCELED: the model is not
 * ready, failed or stopping, or r->adapter is not listed or not ready
 * (503; the front end tells which by colo_served_adapter_get). COLO_ENOMEM: out of memory. On an error
 * no callback runs. */
colo_status colo_served_submit(colo_served *m, colo_request *r, char *err, size_t errlen);
/* Any thread: the client went away. A queued request is removed and its
 * on_done (COLO_ECANCELED) runs on the calling thread before this returns;
 * a running one is stopped by the executor soon, which then runs on_done. */
void colo_served_cancel(colo_served *m, colo_request *r);

/* Tokenizes r on the calling thread (r->tok, chat template applied), with
 * the checks colo_served_submit makes first, without queuing it.
 * COLO_ECANCELED when the model is not ready. */
colo_status colo_served_tokenize(colo_served *m, colo_request *r, char *err, size_t errlen);
/* The text of token ids, in pool. COLO_EUNSUPPORTED for a kind without
 * text output (encoders), COLO_EINVAL for an id outside the vocabulary. */
colo_status colo_served_detokenize(colo_served *m, const int32_t *ids, int n, colo_pool *pool, const char **text,
                                   size_t *len, char *err, size_t errlen);

/* ---- LoRA adapters (a llama model's; models/arch/lora.h) ---------------------------------
 * An adapter is served under its own name: a request names it in
 * r->adapter and runs on this model's weights with the adapter's low-rank
 * updates, in the same steps as the model's other requests, with the
 * adapter's priority (the front end's) and SLA (r->sla). The adapters of
 * the config are loaded with the model; others are added and removed at
 * run time: the executor loads an added one between steps (LOADING, then
 * READY or FAILED), and a removed one refuses new requests while those it
 * runs finish (UNLOADING), then frees its memory. */
#define COLO_SERVED_MAX_ADAPTERS 64

typedef enum colo_adapter_state {
    COLO_ADAPTER_LOADING = 1,
    COLO_ADAPTER_READY = 2,
    COLO_ADAPTER_FAILED = 3,
    COLO_ADAPTER_UNLOADING = 4,
} colo_adapter_state;

const char *colo_adapter_state_name(colo_adapter_state s);

typedef struct colo_served_adapter_info {
    colo_adapter_cfg cfg;
    colo_adapter_state state;
    char error[256];   /* why it failed */
    int rank;          /* 0 until loaded */
    size_t bytes;      /* in the model's arena (while it is awake) */
    int running;       /* requests submitted and not answered */
    uint64_t requests; /* submitted since it was added */
    double load_ms;
} colo_served_adapter_info;

/* Any thread. COLO_EUNSUPPORTED for a kind without adapters, COLO_EINVAL
 * for a name another adapter of the model holds, COLO_ENOMEM when
 * COLO_SERVED_MAX_ADAPTERS are listed, COLO_ECANCELED when the model is not
 * serving; with a message. The file is read by the executor: its problems
 * show as the adapter's FAILED state and error. */
colo_status colo_served_adapter_add(colo_served *m, const colo_adapter_cfg *a, char *err, size_t errlen);
/* Checks a's file against base's model from the files alone (any thread):
 * COLO_EFORMAT naming the file and the key or tensor that does not fit,
 * COLO_EIO when one cannot be read, COLO_EUNSUPPORTED for a kind that
 * takes no adapters. */
colo_status colo_served_adapter_check(const colo_model_cfg *base, const colo_adapter_cfg *a, char *err,
                                      size_t errlen);
/* Any thread: a's file (or scale) in place of the listed adapter of its
 * name, which serves on until the new one has loaded and is then unloaded
 * (as colo_served_adapter_remove does); a replacement that fails to load
 * is dropped, with the failure logged, and the listed one stays. With no
 * adapter of that name listed, colo_served_adapter_add. The errors of
 * colo_served_adapter_add. */
colo_status colo_served_adapter_replace(colo_served *m, const colo_adapter_cfg *a, char *err, size_t errlen);
/* Any thread. COLO_EINVAL when no adapter of that name is listed. */
colo_status colo_served_adapter_remove(colo_served *m, const char *name, char *err, size_t errlen);
/* Applies a's priority and SLA to the listed adapter of its name (a
 * reload that changes only those). False when there is none. */
bool colo_served_adapter_update(colo_served *m, const colo_adapter_cfg *a);
/* The listed adapter named name (the one not unloading, if two), into out
 * (may be NULL); false when there is none. Any thread. */
bool colo_served_adapter_get(colo_served *m, const char *name, colo_served_adapter_info *out);
/* Up to max listed adapters into out, in the order they were added;
 * returns how many. Any thread. */
int colo_served_adapter_list(colo_served *m, colo_served_adapter_info *out, int max);

/* ---- draft models (speculative.draft; batching/spec_draft.h) ---------------------------
 * A model whose config names a draft model drafts with it while the draft
 * is awake and between its own steps; else it decodes plainly. */
/* Whether draft's model can draft for target's, from the files alone:
 * COLO_EINVAL when it is target itself, drafts with a model of its own
 * (a chain), is of another kind or of a kind without drafting, or has
 * another vocabulary (the message names both models); COLO_EFORMAT /
 * COLO_EIO for a file that cannot be read. Any thread. */
colo_status colo_served_draft_check(const colo_model_cfg *target, const colo_model_cfg *draft, char *err,
                                    size_t errlen);
/* Sets target's draft model (NULL: none), which the caller has checked
 * with colo_served_draft_check; waits for a draft target is making with
 * the one before. The caller keeps draft alive until it is set to another
 * (an unload sets NULL first). Any thread. */
void colo_served_set_draft(colo_served *target, colo_served *draft);
/* target's draft model as last set (NULL: none). Any thread. */
colo_served *colo_served_get_draft(colo_served *target);

typedef struct colo_served_info {
    const char *name;
    const char *kind;          /* the kind's name ("llama", "bert") */
    colo_task task;
    colo_served_state state;
    const char *error;         /* why it failed ("" otherwise) */
    colo_priority priority;
    colo_arena_stats mem;      /* limit, used, peak */
    size_t weight_bytes;       /* of mem.used: weights */
    size_t act_bytes;          /* activation scratch */
    size_t kv_bytes;           /* KV cache reserved (generation) */
    size_t kv_used_bytes;      /* of which blocks in use */
    int kv_tokens;             /* tokens the whole KV cache holds */
    int queue_depth;
    int max_queue;
    int running;               /* sequences or requests in the executor */
    int kv_blocks, kv_free_blocks, kv_block_size; /* llama */
    int max_seq_len;           /* llama: tokens; bert: tokens per input */
    int dim;                   /* bert: embedding size */
    int n_vocab;
    uint64_t preemptions;
    uint64_t sleeps, wakes;    /* times it went to sleep and woke */
    double last_wake_ms;       /* the last wake's duration */
    int keep_alive_ms;         /* idle time before it sleeps by itself; 0 = never */
    bool pinned;               /* never put to sleep to make room for another */
    uint64_t evictions;        /* times it was put to sleep to make room */
    uint64_t sleep_preemptions; /* of which with requests running or queued, for a higher-priority model */
    uint64_t trims;            /* times, idle, it lent its unused guarantee (cached KV dropped) to make room */
    int in_batch;              /* llama: sequences in the running batch (the rest of running wait for KV space) */
    bool prefix_cache;         /* llama: prompts reuse cached KV blocks */
    uint64_t prefix_queries, prefix_hit_tokens; /* sequences admitted; prompt tokens found cached */
    size_t prefix_cached_bytes; /* KV blocks in the prefix cache's index */
    double load_ms;
    uint64_t steps;
    uint64_t sched_wait_ns;    /* co-scheduler wait, total */
    uint64_t sched_cold_steps; /* steps that were the first of a request that woke the model (colo_cosched_cold) */
    /* where the steps went (generation; batching/engine.h colo_engine_step_stats) */
    uint64_t steps_by_kind[3];  /* decode, prefill, mixed */
    uint64_t tokens_by_kind[3];
    uint64_t plan_ns, forward_ns, sample_ns;
    /* speculative decoding (generation): tokens drafted and verified, of
     * which accepted, and the sequences' steps that verified a draft */
    uint64_t spec_drafted, spec_accepted, spec_steps;
    /* of them by source: prompt lookup, the suffix cache, the draft model
     * (speculative.draft); and the draft model's passes for this model's
     * drafts (one computes a token of every sequence drafting in the step)
     * and their time */
    uint64_t spec_src_drafted[COLO_SPEC_SOURCES], spec_src_accepted[COLO_SPEC_SOURCES];
    bool spec_src_on[COLO_SPEC_SOURCES]; /* the sources the config turns on */
    uint64_t spec_draft_passes, spec_draft_ns;
    colo_stream_stats stream;   /* the model's stream: ops, chunks, worker time, sync waits */
    size_t adapter_bytes;       /* of mem.used: LoRA adapters */
    int n_adapters;             /* listed */
} colo_served_info;

void colo_served_get_info(colo_served *m, colo_served_info *out);
/* Settings that apply at once, without a reload (any thread). */
void colo_served_set_live(colo_served *m, int keep_alive_ms, bool pinned);
colo_served_state colo_served_get_state(const colo_served *m);
const colo_model_cfg *colo_served_config(const colo_served *m);
colo_task colo_served_task(const colo_served *m);

#endif
