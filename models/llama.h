/* models/llama.h: the llama architecture (SmolLM2 and llama-shaped
 * synthetic models) from a GGUF file.
 *
 * Weights live in the model's arena in their file type (Q4_1 stays Q4_1).
 * The KV cache is paged: n_blocks blocks of block_size tokens for every
 * layer, handed out by a block allocator (colo_llama_kv_alloc/free) that a
 * continuous batcher drives. One forward pass takes a batch of tokens from
 * several sequences at once (prefill chunks and decode steps alike).
 *
 * Threads: a model is used by one thread at a time (its executor); the
 * hyperparameters and tokenizer may be read from any thread. */
#ifndef COLO_MODELS_LLAMA_H
#define COLO_MODELS_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "models/bpe.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"

typedef struct colo_llama_hparams {
    int n_layer;
    int n_embd;    /* E */
    int n_ff;      /* F */
    int n_head;
    int n_kv_head;
    int head_dim;  /* E / n_head */
    int n_rot;     /* rotary dims per head */
    int n_vocab;   /* V */
    int n_ctx;     /* trained context length */
    float rope_base;
    float rms_eps;
} colo_llama_hparams;

typedef struct colo_llama colo_llama;

/* Loads path into arena (weights copied with s). NULL with a message naming
 * the file and the key or tensor that is missing or malformed. The GGUF
 * file is closed once loaded. */
colo_llama *colo_llama_load(const char *path, colo_arena *arena, colo_stream *s, char *err, size_t errlen);
void colo_llama_free(colo_llama *m); /* returns its memory to the arena; accepts NULL */

const colo_llama_hparams *colo_llama_hparams_get(const colo_llama *m);
const colo_bpe *colo_llama_tokenizer(const colo_llama *m);
colo_arena *colo_llama_arena(const colo_llama *m);
size_t colo_llama_weight_bytes(const colo_llama *m);
/* Bytes of one KV block (K and V, every layer) of block_size tokens. */
size_t colo_llama_kv_block_bytes(const colo_llama_hparams *hp, int block_size, colo_dtype kv_type);

/* Allocates the paged KV cache: n_blocks blocks of block_size tokens.
 * COLO_ENOMEM (with err) when the arena cannot hold it. */
colo_status colo_llama_kv_init(colo_llama *m, int n_blocks, int block_size, colo_dtype kv_type, char *err,
                               size_t errlen);
int colo_llama_kv_n_blocks(const colo_llama *m);
int colo_llama_kv_block_size(const colo_llama *m);
int colo_llama_kv_n_free(const colo_llama *m);
/* All or nothing: COLO_ENOMEM when fewer than n blocks are free. */
colo_status colo_llama_kv_alloc(colo_llama *m, int n, int32_t *ids);
void colo_llama_kv_free(colo_llama *m, const int32_t *ids, int n);

/* Reserves activation memory for steps of up to n_tokens tokens, n_logits
 * logits and n_seqs sequences of max_blocks blocks, so that later steps of
 * that size need no allocation. COLO_ENOMEM when the arena cannot hold it. */
colo_status colo_llama_reserve(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks);

/* One step. Host arrays: token t of the batch is tokens[t] at position
 * pos[t] of sequence seq[t] (a row of block_table, (n_seqs, max_blocks));
 * its K/V are written to the cache and it attends to positions 0..pos[t]
 * of its sequence. Logits (n_logits, V) are produced for the tokens listed
 * in logit_rows and copied to the host array logits. */
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
} colo_llama_batch;

/* throttle (may be NULL): the executor's co-scheduler membership; the pass
 * calls colo_cosched_throttle before each layer. */
colo_status colo_llama_forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                               colo_cosched_member *throttle);

#endif
