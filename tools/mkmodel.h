/* tools/mkmodel.h: writes GGUF files of every architecture colo runs
 * (llama, qwen2, qwen3, phi3, gemma3; models/arch/llama.h) with seeded random
 * weights and a small byte-level BPE tokenizer (256 byte tokens, a few
 * merges, ChatML specials, <|endoftext|> as EOS), so that text and chat
 * requests work on synthetic models of any size. The files follow
 * llama.cpp's conversions (names, keys, fused tensors), so llama.cpp loads
 * them too. */
#ifndef COLO_TOOLS_MKMODEL_H
#define COLO_TOOLS_MKMODEL_H

#include <stdint.h>

#include "kernels/ops.h"
#include "models/arch/llama.h"

typedef struct colo_mkmodel_config {
    colo_llama_arch arch; /* default llama */
    int n_layer, n_embd, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
    int head_dim;    /* 0: n_embd / n_head (else written as attention.key_length) */
    colo_dtype type; /* matrices: any weight type (kernels/quant.h); norms are F32 */
    bool k_mix;      /* with Q4_K or Q5_K: llama.cpp's _K_M mix (output, and attn_v/ffn_down of
                        a third of the layers, in Q6_K; phi3's fused QKV one step up) */
    uint64_t seed;
    float rope_base;
    bool untied;     /* an output.weight (else tied to the token embedding) */
    bool llama3_rope; /* llama: Llama 3.1's rope scaling as a rope_freqs tensor */
    int n_swa;       /* gemma3: sliding window (0: 512) */
} colo_mkmodel_config;

/* colo-mkmodel's --type names: a weight type ("q4_k", "f16"...) or a
 * llama.cpp mix ("q4_k_m", "q5_k_m": *k_mix set). COLO_EINVAL otherwise. */
colo_status colo_mkmodel_type_parse(const char *name, colo_dtype *type, bool *k_mix);

/* Tokens the built-in tokenizer needs; --vocab must be at least this. */
int colo_mkmodel_min_vocab(void);
/* Writes path. COLO_EINVAL with a message for inconsistent shapes. */
colo_status colo_mkmodel_write(const char *path, const colo_mkmodel_config *cfg, char *err, size_t errlen);

/* A LoRA adapter of a model colo_mkmodel_write makes (models/arch/lora.h): the
 * files llama.cpp's convert_lora_to_gguf writes, for every product of
 * every layer (attn_q/k/v or the fused attn_qkv, attn_output, ffn_gate and
 * ffn_up or the fused ffn_up, ffn_down; attention_only: the first four).
 * A ~ N(0, 1/in), B ~ N(0, 1/rank), seeded. */
typedef struct colo_mkmodel_lora {
    int rank;
    float alpha;          /* adapter.lora.alpha (0: rank / 2) */
    colo_dtype type;      /* F32 or F16 */
    uint64_t seed;
    bool attention_only;
} colo_mkmodel_lora;

/* Writes an adapter of base's model to path. COLO_EINVAL with a message
 * for inconsistent shapes or a rank out of range. */
colo_status colo_mkmodel_write_lora(const char *path, const colo_mkmodel_config *base, const colo_mkmodel_lora *lora,
                                    char *err, size_t errlen);

#endif
