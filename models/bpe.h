/* models/bpe.h: GPT-2 byte-level BPE from GGUF metadata
 * (tokenizer.ggml.tokens / merges / token_type / bos / eos / add_bos_token /
 * pre), special tokens matched whole (chat templates: models/chat.h). Pre-tokenizers
 * (tokenizer.ggml.pre): "smollm" (digits one by one, then the GPT-2
 * pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)
 * and "gpt2"/"default"/absent (the pattern alone); others are refused.
 * Unicode classes come from tables generated from Unicode 14.0
 * (scripts/ref/make_unicode_tables.py).
 *
 * Never fails on arbitrary input bytes: invalid UTF-8 is tokenized byte by
 * byte, and decoding returns exactly the bytes that were encoded.
 * Thread safety: read-only after creation. */
#ifndef COLO_MODELS_BPE_H
#define COLO_MODELS_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/gguf.h"

typedef struct colo_bpe colo_bpe;

typedef struct colo_chat_msg {
    const char *role;
    const char *content;
} colo_chat_msg;

/* NULL with a message naming the missing or malformed key. */
colo_bpe *colo_bpe_from_gguf(const colo_gguf *g, char *err, size_t errlen);
void colo_bpe_free(colo_bpe *b); /* accepts NULL */

int colo_bpe_n_vocab(const colo_bpe *b);
int colo_bpe_bos(const colo_bpe *b);  /* -1 when none */
int colo_bpe_eos(const colo_bpe *b);
bool colo_bpe_add_bos(const colo_bpe *b);
/* Id of the token whose text is exactly s, or -1. */
int colo_bpe_find(const colo_bpe *b, const char *s);
/* Control/special tokens (token_type 3 or 4). */
bool colo_bpe_is_special(const colo_bpe *b, int id);
/* The token's text as the vocabulary stores it (byte-level code points, not
 * the bytes it decodes to), NUL-terminated, owned by b; NULL for an id out
 * of range. */
const char *colo_bpe_token_text(const colo_bpe *b, int id);

/* Encodes len bytes of text into *out (malloc'd, the caller frees, valid
 * even when *n is 0) and *n. Starts with the BOS token when
 * colo_bpe_add_bos(b). allow_special: control tokens written in the text
 * (e.g. <|im_start|>) become their ids, longest first; otherwise they are
 * plain text. COLO_ENOMEM when out of memory. Time: O(len log len). */
colo_status colo_bpe_encode(const colo_bpe *b, const char *text, size_t len, bool allow_special, int32_t **out,
                            int *n);
/* The bytes token id stands for (token_to_piece), into buf (cap bytes; a
 * token is at most a few times its text's length); *len gets the count.
 * Special tokens give their text. COLO_EINVAL for an id out of range,
 * COLO_ENOMEM when cap is too small. */
colo_status colo_bpe_decode(const colo_bpe *b, int id, char *buf, size_t cap, size_t *len);


#endif
