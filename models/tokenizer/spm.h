/* models/tokenizer/spm.h: SentencePiece-style BPE as GGUF stores it
 * (tokenizer.ggml.model "llama": tokenizer.ggml.tokens / scores /
 * token_type), as Llama 2, Mistral, Phi-3 and Gemma 3 use it; one of the
 * backends of models/tokenizer/tokenizer.h, which handles special tokens, BOS/EOS and
 * the leading space; callers use that facade.
 *
 * Spaces become U+2581 (the space marker); adjacent pieces merge while their
 * concatenation is a token, the highest score first (leftmost on ties); a
 * character that ends up in no token becomes its byte tokens <0xNN>.
 * Thread safety: read-only after creation. */
#ifndef COLO_MODELS_SPM_H
#define COLO_MODELS_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/format/gguf.h"

typedef struct colo_spm colo_spm;
typedef struct colo_tok_ids colo_tok_ids; /* models/tokenizer/tokenizer_impl.h */

/* NULL with a message naming the missing or malformed key. */
colo_spm *colo_spm_from_gguf(const colo_gguf *g, char *err, size_t errlen);
void colo_spm_free(colo_spm *s); /* accepts NULL */

int colo_spm_n_vocab(const colo_spm *s);
/* Id of the token whose vocabulary text is t[0, len), or -1. */
int colo_spm_find(const colo_spm *s, const char *t, size_t len);
/* The token's text as the vocabulary stores it (spaces as U+2581),
 * NUL-terminated, owned by s, its length in *len (may be NULL); NULL for an
 * id out of range. */
const char *colo_spm_token_text(const colo_spm *s, int id, size_t *len);

/* Appends the tokens of len bytes of plain text to out, with a space put
 * in front when space_prefix; out->oom is set when out of memory.
 * Time: O(len log len). */
void colo_spm_encode_text(const colo_spm *s, const char *text, size_t len, bool space_prefix, colo_tok_ids *out);
/* The bytes token id stands for: a byte token <0xNN> its byte, others
 * their text with U+2581 as a space. COLO_EINVAL for an id out of range,
 * COLO_ENOMEM when cap is too small. */
colo_status colo_spm_decode(const colo_spm *s, int id, char *buf, size_t cap, size_t *len);

#endif
