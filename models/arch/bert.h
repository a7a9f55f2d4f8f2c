/* models/arch/bert.h: BERT sentence encoders (all-MiniLM-L6-v2) from a
 * Hugging Face / sentence-transformers model folder.
 *
 * The folder holds config.json (model_type bert, hidden_act gelu, absolute
 * positions; every size is read from it), model.safetensors (F32, F16 or
 * BF16 tensors, names with or without a "bert." prefix), vocab.txt, and
 * optionally sentence_bert_config.json (max_seq_length), tokenizer_config.json
 * (do_lower_case) and 1_Pooling/config.json (mean pooling is the only mode
 * supported). Embeddings are the mean of the last hidden states over the
 * real tokens, L2-normalised, as sentence-transformers' Transformer ->
 * Pooling(mean) -> Normalize pipeline computes them.
 *
 * Tensors (safetensors order, rows last): embeddings.word_embeddings (V, E),
 * position_embeddings (P, E), token_type_embeddings (TT, E), LayerNorm
 * weight/bias (E); per layer encoder.layer.N.attention.self.{query,key,value}
 * (E, E) + bias (E), attention.output.dense (E, E) + bias,
 * attention.output.LayerNorm (E), intermediate.dense (F, E) + bias (F),
 * output.dense (E, F) + bias (E), output.LayerNorm (E).
 *
 * Work is split so that a batcher can group requests by length: tokenize
 * each text (any thread), then run colo_bert_forward on a batch of token
 * sequences (the executor's thread). The batch is padded to its longest
 * sequence for attention only; every matrix product runs on the real
 * tokens alone.
 *
 * Threads: a model is used by one thread at a time (its executor); the
 * hyperparameters and the tokenizer may be read from any thread. */
#ifndef COLO_MODELS_BERT_H
#define COLO_MODELS_BERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "models/tokenizer/wordpiece.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"

typedef struct colo_bert_hparams {
    int n_layer;
    int n_embd;    /* E (the embedding dimension) */
    int n_head;
    int head_dim;  /* E / n_head */
    int n_ff;      /* F */
    int n_vocab;   /* V */
    int n_pos;     /* P: max_position_embeddings */
    int n_type;    /* TT: type_vocab_size */
    int max_len;   /* tokens per sequence, [CLS]/[SEP] included: max_seq_length, at most P */
    float ln_eps;
} colo_bert_hparams;

typedef struct colo_bert_config {
    colo_dtype weight_type; /* matrices and embedding tables in memory: COLO_F32 (default, 0) or COLO_F16 */
    int max_len;            /* 0 = the folder's max_seq_length (else min(512, P)); at most P */
    /* NULL: the model makes its own tokenizer from vocab.txt; else the
     * caller's, made from the same folder (colo_bert_tokenizer_load),
     * borrowed for the model's life (a wake then reads no vocabulary) */
    const colo_wordpiece *tokenizer;
} colo_bert_config;

typedef struct colo_bert colo_bert;

/* Loads the folder dir into arena (cfg may be NULL). On the CPU the
 * weights are mapped read-only from a repack cache file (models/format/repack.h:
 * made once from model.safetensors in the forward pass's layout, checked,
 * and made again when stale or corrupt) and the arena is charged for them;
 * elsewhere, with COLO_WEIGHTS=copy, or when the cache folder cannot be
 * written, they are copied into the arena with s.
 * NULL with a message naming the file and the key or tensor that is missing
 * or malformed (a tensor of the wrong shape or of an integer dtype). */
colo_bert *colo_bert_load(const char *dir, const colo_bert_config *cfg, colo_arena *arena, colo_stream *s,
                          char *err, size_t errlen);
void colo_bert_free(colo_bert *m); /* returns its memory to the arena; accepts NULL */

/* The folder's tokenizer alone, made as colo_bert_load makes it, and its
 * hyperparameters into *hp (for a caller that tokenizes while the weights
 * are not loaded). NULL with a message; free with colo_wordpiece_free. */
colo_wordpiece *colo_bert_tokenizer_load(const char *dir, const colo_bert_config *cfg, colo_bert_hparams *hp, char *err,
                                         size_t errlen);
const colo_bert_hparams *colo_bert_hparams_get(const colo_bert *m);
const colo_wordpiece *colo_bert_tokenizer(const colo_bert *m);
int colo_bert_dim(const colo_bert *m); /* floats per embedding (E) */
colo_arena *colo_bert_arena(const colo_bert *m);
size_t colo_bert_weight_bytes(const colo_bert *m);

/* Memory a model needs, from the folder alone (config.json and the
 * safetensors header): weight_bytes at weight_type (plus up to 256 bytes of
 * alignment per tensor), and the activation scratch for batches of up to
 * max_batch sequences of up to max_len tokens (colo_bert_act_bytes). */
typedef struct colo_bert_memory {
    colo_bert_hparams hp;
    size_t weight_bytes;
    size_t act_bytes;
} colo_bert_memory;
colo_status colo_bert_memory_need(const char *dir, const colo_bert_config *cfg, int max_batch, int max_len,
                                  colo_bert_memory *out, char *err, size_t errlen);
/* Bytes of the activation scratch for batches of up to max_batch sequences
 * padded to max_len tokens. */
size_t colo_bert_act_bytes(const colo_bert_hparams *hp, int max_batch, int max_len);

/* Reserves the activation scratch for batches of up to max_batch sequences
 * of up to max_len tokens, so that later forwards of that size need no
 * allocation. COLO_ENOMEM when the arena cannot hold it, COLO_EINVAL for a
 * size out of range. Forwards grow the scratch as needed otherwise. */
colo_status colo_bert_reserve(colo_bert *m, int max_batch, int max_len);

/* Tokenizes text (len bytes) into ids (room for cap >= 2 ids): [CLS] ...
 * [SEP], cut to the model's max_len; *n gets the count, *truncated (may be
 * NULL) whether the text was cut. Special-token names in the text
 * ("[SEP]"...) become their ids, as the reference tokenizer does. Any
 * thread. */
colo_status colo_bert_tokenize(const colo_bert *m, const char *text, size_t len, int32_t *ids, int cap, int *n,
                               bool *truncated);

/* One forward pass over n_seqs token sequences (host arrays ids[i] of
 * lens[i] tokens, 1 <= lens[i] <= max_len, ids in [0, V)) of any lengths;
 * writes n_seqs embeddings (n_seqs, E) to the host array out. COLO_EINVAL
 * (nothing run) for a bad length or id, COLO_ENOMEM when the arena cannot
 * hold the activations. throttle (may be NULL): the executor's
 * co-scheduler membership, consulted before each layer. */
colo_status colo_bert_forward(colo_bert *m, colo_stream *s, int n_seqs, const int32_t *const *ids,
                              const int *lens, float *out, colo_cosched_member *throttle);

/* Convenience: tokenizes n texts (lens NULL = NUL-terminated) and runs
 * them in forward passes of up to max_batch texts, writing (n, E) floats
 * to out. */
colo_status colo_bert_encode(colo_bert *m, colo_stream *s, const char *const *texts, const size_t *lens, int n,
                             int max_batch, float *out);

#endif
