/* models/tokenizer/bpe.h: GPT-2 byte-level BPE from GGUF metadata
 * (tokenizer.ggml.model "gpt2": tokenizer.ggml.tokens / merges / pre), one
 * of the backends of models/tokenizer/tokenizer.h, which handles special tokens,
 * BOS/EOS and token types; callers use that facade.
 *
 * Pre-tokenizers (tokenizer.ggml.pre), as llama.cpp names them:
 *   gpt-2 (and gpt2, default or no key, mpt, olmo, phi-2, ...): the GPT-2
 *     pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   smollm (and starcoder, refact, command-r, ...): every digit alone, then
 *     the GPT-2 pattern;
 *   llama-bpe (Llama 3; and llama3, falcon3, pixtral, dbrx, ...):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ , where a piece
 *     that is a whole token skips the merges;
 *   qwen2 (and deepseek-r1-qwen, megrez, ...): the same with \p{N} alone.
 * Others are refused with their name. Unicode classes come from tables
 * generated from Unicode 14.0 (scripts/ref/make_unicode_tables.py).
 *
 * Never fails on arbitrary input bytes: invalid UTF-8 is tokenized byte by
 * byte, and decoding returns exactly the bytes that were encoded.
 * Thread safety: read-only after creation. */
#ifndef COLO_MODELS_BPE_H
#define COLO_MODELS_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/format/gguf.h"

typedef struct colo_bpe colo_bpe;
typedef struct colo_tok_ids colo_tok_ids; /* models/tokenizer/tokenizer_impl.h */

/* NULL with a message naming the missing or malformed key, or the
 * pre-tokenizer colo lacks. */
colo_bpe *colo_bpe_from_gguf(const colo_gguf *g, char *err, size_t errlen);
void colo_bpe_free(colo_bpe *b); /* accepts NULL */

int colo_bpe_n_vocab(const colo_bpe *b);
/* Whether llama.cpp adds a BOS for this pre-tokenizer when the file has no
 * tokenizer.ggml.add_bos_token (the Llama 3 family does). */
bool colo_bpe_default_add_bos(const colo_bpe *b);
/* The pre-tokenizer's name as the file gives it ("default" when absent). */
const char *colo_bpe_pre_name(const colo_bpe *b);
/* Id of the token whose vocabulary text is s[0, len), or -1. */
int colo_bpe_find(const colo_bpe *b, const char *s, size_t len);
/* The token's text as the vocabulary stores it (byte-level code points),
 * NUL-terminated, owned by b, its length in *len (may be NULL); NULL for
 * an id out of range. */
const char *colo_bpe_token_text(const colo_bpe *b, int id, size_t *len);

/* Appends the tokens of len bytes of plain text (no special tokens) to
 * out; out->oom is set when out of memory. Time: O(len log len). */
void colo_bpe_encode_text(const colo_bpe *b, const char *text, size_t len, colo_tok_ids *out);
/* The bytes token id's byte-level text stands for, into buf (cap bytes);
 * *len gets the count. COLO_EINVAL for an id out of range, COLO_ENOMEM
 * when cap is too small. */
colo_status colo_bpe_decode(const colo_bpe *b, int id, char *buf, size_t cap, size_t *len);

#endif
