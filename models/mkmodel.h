/* models/mkmodel.h: writes llama-shaped GGUF files with seeded random
 * weights and a small byte-level BPE tokenizer (256 byte tokens, a few
 * merges, ChatML specials, <|endoftext|> as EOS), so that text and chat
 * requests work on synthetic models of any size. */
#ifndef COLO_MODELS_MKMODEL_H
#define COLO_MODELS_MKMODEL_H

#include <stdint.h>

#include "kernels/ops.h"

typedef struct colo_mkmodel_config {
    int n_layer, n_embd, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
    colo_dtype type; /* matrices: F32, F16, Q4_1 or Q8_0; norms are F32 */
    uint64_t seed;
    float rope_base;
} colo_mkmodel_config;

/* Tokens the built-in tokenizer needs; --vocab must be at least this. */
int colo_mkmodel_min_vocab(void);
/* Writes path. COLO_EINVAL with a message for inconsistent shapes. */
colo_status colo_mkmodel_write(const char *path, const colo_mkmodel_config *cfg, char *err, size_t errlen);

#endif
