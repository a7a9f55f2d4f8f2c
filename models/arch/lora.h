/* models/arch/lora.h: LoRA adapters of a llama-family model (models/arch/llama.h),
 * as llama.cpp writes and reads them: a GGUF file with general.type
 * "adapter", adapter.type "lora", adapter.lora.alpha, general.architecture
 * the base's, and per adapted product blk.N.<name>.weight.lora_a (GGML
 * order (in, rank)) and .lora_b ((rank, out)), where <name> is attn_q,
 * attn_k, attn_v, attn_qkv (a fused base), attn_output, ffn_gate, ffn_up
 * (gate and up fused in phi3's) or ffn_down. Any product may be left out.
 * Each adapted product gets y += s B (A x), s = scale * alpha / rank (scale
 * alone when alpha is 0), as llama.cpp applies it.
 *
 * An adapter lives in its base's arena, in F16 when every tensor of its
 * file is F16 and in F32 otherwise (A as (rank, in) rows, B transposed as
 * (rank, out) rows), under a slot number: a step's batch
 * says which slot each sequence uses (colo_llama_batch.seq_adapter), so one
 * step mixes sequences of several adapters and of the bare model. A
 * sequence's logits do not depend on what else is in its step.
 *
 * Threads: load and unload on the model's thread (its executor), between
 * steps; colo_lora_check on any. */
#ifndef COLO_MODELS_LORA_H
#define COLO_MODELS_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "models/arch/llama.h"

/* Adapters one model holds at once. */
#define COLO_LORA_SLOTS 64
/* The largest adapter.lora.alpha taken (llama.cpp's converter writes the
 * training's alpha, a small multiple of the rank): a larger one, a
 * negative one or one that is not a finite number is refused. */
#define COLO_LORA_MAX_ALPHA 65536.0f

typedef struct colo_lora_info {
    int rank;          /* the largest of its products' ranks */
    float alpha;       /* adapter.lora.alpha; 0: none */
    float scale;       /* the caller's */
    int n_products;    /* adapted products, over every layer */
    bool f16;          /* kept in F16: every tensor of the file is F16 (else F32) */
    size_t bytes;      /* in the arena */
    uint64_t uid;      /* unique for this load (the prefix cache's key for it) */
} colo_lora_info;

/* Checks path as an adapter of the model in base_path, from the files
 * alone: COLO_EFORMAT with a message naming the file and the key or tensor
 * (a missing or other architecture, a tensor the base does not have, a
 * shape or rank that does not match, a rank over COLO_LORA_MAX_RANK, an
 * alpha that is not a number in [0, COLO_LORA_MAX_ALPHA], a tensor
 * value that is not finite),
 * COLO_EIO when a file cannot be read. out (may be NULL) gets its figures. */
colo_status colo_lora_check(const char *base_path, const char *path, colo_lora_info *out, char *err, size_t errlen);

/* Loads path into m's arena (copied with s) under a free slot (*slot),
 * with the checks of colo_lora_check against the loaded model. COLO_ENOMEM
 * when the arena cannot hold it or every slot is taken. */
colo_status colo_llama_lora_load(colo_llama *m, colo_stream *s, const char *path, float scale, int *slot,
                                 char *err, size_t errlen);
/* The same into slot, which must be free (COLO_EINVAL otherwise): an
 * adapter loaded again where it was (a model woken from sleep). */
colo_status colo_llama_lora_load_in(colo_llama *m, colo_stream *s, const char *path, float scale, int slot,
                                    char *err, size_t errlen);
/* Frees slot's adapter (no sequence may use it any more). Nothing for an
 * empty slot. */
void colo_llama_lora_unload(colo_llama *m, colo_stream *s, int slot);
/* COLO_EINVAL for an empty slot. */
colo_status colo_llama_lora_get(const colo_llama *m, int slot, colo_lora_info *out);
/* Bytes of every loaded adapter. */
size_t colo_llama_lora_bytes(const colo_llama *m);

/* What adapters take of their model's arena, counted one way wherever
 * their room is planned or checked (a model's load, an adapter added at
 * run time, a wake): colo_lora_arena_bytes is one adapter's bytes as the
 * arena takes them; colo_lora_room_bytes is the total for adapters whose
 * colo_lora_arena_bytes sum to adapter_bytes, the largest rank max_rank:
 * with any adapter, the slot table and the scratch of a step of max_rows
 * tokens come with them (0 for none). */
size_t colo_lora_arena_bytes(const colo_lora_info *info);
size_t colo_lora_room_bytes(const colo_llama_hparams *hp, size_t adapter_bytes, int max_rank, int max_rows);

#endif
