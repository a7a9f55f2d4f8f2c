/* models/arch/llama.h: decoder-only transformers from a GGUF file: the
 * architectures llama (Llama 2/3.x, Mistral, SmolLM2, DeepSeek-R1-Distill-
 * Llama), qwen2 (Qwen2.5, DeepSeek-R1-Distill-Qwen), qwen3, phi3
 * (Phi-3/3.5) and gemma3. docs/MODELS.md lists what each reads.
 *
 * Every hyperparameter comes from the file (<arch>.block_count,
 * embedding_length, feed_forward_length, attention.head_count,
 * attention.head_count_kv, attention.key_length, rope.freq_base,
 * rope.dimension_count, rope.scaling.*, attention.sliding_window,
 * attention.layer_norm_rms_epsilon, context_length); the vocabulary is the
 * tokenizer's. Tensors (GGML order, ne0 first) with Q = heads x head size,
 * KV = kv heads x head size: token_embd (E, V), output_norm (E), output (E,
 * V) or, when absent, the token embedding (tied); rope_freqs (llama) or
 * rope_factors_long/short (phi3); per layer attn_norm, attn_q (E, Q),
 * attn_k/attn_v (E, KV) or a fused attn_qkv (E, Q + 2 KV), optional
 * biases, attn_q_norm/attn_k_norm (head size; qwen3, gemma3), attn_output
 * (Q, E), post_attention_norm (gemma3), ffn_norm, ffn_gate/ffn_up (E, F) or
 * a fused ffn_up (E, 2F; phi3), ffn_down (F, E), post_ffw_norm (gemma3).
 * Norms, biases and factors are F32; matrices any weight dtype. A tensor
 * the architecture does not read, or a key asking for what is not applied
 * (other rope scalings, soft-capping, experts), is refused by name.
 *
 * Weights live in the model's arena in their file type (Q4_1 stays Q4_1).
 * The KV cache is paged (models/cache/kv_cache.h): n_blocks blocks of block_size
 * tokens for every layer, handed out by a block allocator
 * (colo_llama_kv_alloc/free, or the cache itself) that a continuous batcher
 * drives. One forward pass takes a batch of tokens from several sequences at
 * once (prefill chunks and decode steps alike).
 *
 * Threads: a model is used by one thread at a time (its executor); the
 * hyperparameters and tokenizer may be read from any thread. */
#ifndef COLO_MODELS_LLAMA_H
#define COLO_MODELS_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "models/tokenizer/tokenizer.h"
#include "models/cache/kv_cache.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"

/* The architectures; each is one row of traits in models/arch/llama_arch.c,
 * which is all that loading and the forward pass know of it. */
typedef enum colo_llama_arch {
    COLO_ARCH_LLAMA,
    COLO_ARCH_QWEN2,
    COLO_ARCH_QWEN3,
    COLO_ARCH_PHI3,
    COLO_ARCH_GEMMA3,
} colo_llama_arch;

typedef struct colo_llama_hparams {
    colo_llama_arch arch;
    int n_layer;
    int n_embd;    /* E */
    int n_ff;      /* F */
    int n_head;
    int n_kv_head;
    int head_dim;  /* attention.key_length, else E / n_head */
    int q_dim;     /* Q = n_head * head_dim */
    int n_rot;     /* rotary dims per head */
    int n_vocab;   /* V */
    int n_ctx;     /* trained context length */
    int n_ctx_orig; /* rope.scaling.original_context_length (phi3's long factors past it) */
    float rope_base;
    float rope_base_swa;    /* gemma3's sliding-window layers */
    float rope_scale;       /* linear scaling: 1 / rope.scaling.factor */
    float rope_attn_factor; /* rope.scaling.attn_factor */
    bool rope_neox;         /* GGML's neox pairing (every architecture but llama) */
    int n_swa;              /* sliding window of gemma3's local layers; 0 none */
    float embd_scale;       /* the token embedding is multiplied by it (gemma3: sqrt(E)) */
    float attn_scale;       /* queries' scale in attention */
    float rms_eps;
} colo_llama_hparams;

typedef struct colo_llama colo_llama;

/* "llama", "qwen2", "qwen3", "phi3", "gemma3". */
const char *colo_llama_arch_name(colo_llama_arch a);
/* The architecture named name; COLO_EINVAL for another name. */
colo_status colo_llama_arch_parse(const char *name, colo_llama_arch *out);
/* "llama, qwen2, ..." (every architecture's name, for messages) into buf,
 * cut to cap bytes (NUL included). */
void colo_llama_arch_list(char *buf, size_t cap);

/* Loads path into arena (weights copied with s). NULL with a message naming
 * the file and the key or tensor that is missing, malformed or not
 * applied by colo. The GGUF file is closed once loaded. */
colo_llama *colo_llama_load(const char *path, colo_arena *arena, colo_stream *s, char *err, size_t errlen);
void colo_llama_free(colo_llama *m); /* returns its memory to the arena; accepts NULL */
/* The longest sequence the model will run: picks phi3's long or short rope
 * factors (long past rope.scaling.original_context_length, as llama.cpp
 * does by its context). Short until called. */
void colo_llama_set_seq_len(colo_llama *m, int max_seq_len);

const colo_llama_hparams *colo_llama_hparams_get(const colo_llama *m);
const colo_tokenizer *colo_llama_tokenizer(const colo_llama *m);
colo_arena *colo_llama_arena(const colo_llama *m);
size_t colo_llama_weight_bytes(const colo_llama *m);
/* Bytes of one KV block (K and V, every layer) of block_size tokens. */
size_t colo_llama_kv_block_bytes(const colo_llama_hparams *hp, int block_size, colo_dtype kv_type);

/* Memory a model needs, from the file alone (for config validation before
 * loading): the arena must hold weight_bytes (plus up to 256 bytes of
 * alignment per tensor), the KV cache (kv_bytes_per_token per cached token,
 * in blocks), and the activation scratch of the largest step
 * (colo_llama_act_bytes). */
typedef struct colo_llama_memory {
    colo_llama_hparams hp;
    size_t weight_bytes;        /* every tensor the model uploads, in its file dtype */
    int n_tensors;              /* how many */
    size_t kv_bytes_per_token;  /* K and V of one token in every layer, at kv_type */
    size_t act_bytes_per_token; /* activation scratch per token of a step */
    size_t act_bytes_per_logit; /* per logits row of a step */
    size_t host_bytes;          /* host memory outside the arena while loaded, at most (tokenizer, tables) */
} colo_llama_memory;

/* COLO_EFORMAT with a message naming the key or tensor when path is not a
 * loadable llama file; COLO_EINVAL for a kv_type colo_dtype_is_kv refuses,
 * COLO_EUNSUPPORTED for a block kv_type (Q8_0, Q4_0) and a head size that
 * is not a multiple of 32. */
colo_status colo_llama_memory_need(const char *path, colo_dtype kv_type, colo_llama_memory *out, char *err,
                                   size_t errlen);
/* Bytes of the activation scratch for steps of n_tokens tokens, n_logits
 * logits rows and a block table of n_table entries (n_seqs * max_blocks). */
size_t colo_llama_act_bytes(const colo_llama_hparams *hp, int n_tokens, int n_logits, int n_table);

/* Allocates the paged KV cache: n_blocks blocks of block_size tokens of
 * kv_type (colo_dtype_is_kv). COLO_ENOMEM (with err) when the arena cannot
 * hold it; COLO_EUNSUPPORTED for a block type and a head size that is not
 * a multiple of 32. */
colo_status colo_llama_kv_init(colo_llama *m, int n_blocks, int block_size, colo_dtype kv_type, char *err,
                               size_t errlen);
/* Returns the KV cache's memory to the arena (every block id becomes
 * invalid); colo_llama_kv_init may then be called again, e.g. by a new
 * engine with another block size. Nothing when there is none. */
void colo_llama_kv_fini(colo_llama *m);
/* The cache (NULL before colo_llama_kv_init); owned by the model. */
colo_kv_cache *colo_llama_kv_cache(const colo_llama *m);
int colo_llama_kv_n_blocks(const colo_llama *m);
int colo_llama_kv_block_size(const colo_llama *m);
int colo_llama_kv_n_free(const colo_llama *m);
/* All or nothing: COLO_ENOMEM when fewer than n blocks are free (EINVAL
 * before kv_init). Same as colo_kv_cache_alloc on colo_llama_kv_cache. */
colo_status colo_llama_kv_alloc(colo_llama *m, int n, int32_t *ids);
void colo_llama_kv_free(colo_llama *m, const int32_t *ids, int n);

/* Reserves activation memory for steps of up to n_tokens tokens, n_logits
 * logits and n_seqs sequences of max_blocks blocks, so that later steps of
 * that size need no allocation. COLO_ENOMEM when the arena cannot hold it. */
colo_status colo_llama_reserve(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks);

/* One step. Host arrays: token t of the batch is tokens[t] at position
 * pos[t] of sequence seq[t] (a row of block_table, (n_seqs, max_blocks));
 * its K/V are written to the cache and it attends to positions 0..pos[t]
 * of its sequence (positions below pos[t] must already be in the cache or
 * earlier in this batch). Logits (n_logits, V) are produced for the tokens
 * listed in logit_rows and copied to the host array logits. COLO_EINVAL
 * (nothing run) for a position at or past the context length or past the
 * table, an unknown token, a block id outside the cache, an adapter slot
 * that holds none, or no KV cache;
 * COLO_ENOMEM when the arena cannot hold the step's activations. */
typedef struct colo_llama_batch {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    int n_seqs;
    int max_blocks;
    const int32_t *block_table;
    int n_logits;
    const int32_t *logit_rows;
    /* (n_seqs) each sequence's adapter slot (models/arch/lora.h), -1 for the
     * bare model; NULL: every sequence runs the bare model */
    const int32_t *seq_adapter;
    /* NULL, or asked before each layer but the first once what the layers
     * before it queued has run: true abandons the step there (the pass
     * returns COLO_EAGAIN; its logits are not written, and the KV rows of
     * its positions may be: they are written again when computed). Such a
     * step is not recorded as a graph. */
    bool (*stop)(void *ud);
    void *stop_ud;
} colo_llama_batch;

/* throttle (may be NULL): the executor's co-scheduler membership; the pass
 * calls colo_cosched_throttle before each layer. */
colo_status colo_llama_forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                               colo_cosched_member *throttle);

#endif
