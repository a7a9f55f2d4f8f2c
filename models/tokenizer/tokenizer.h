/* models/tokenizer/tokenizer.h: a generative model's tokenizer, made from its GGUF's
 * tokenizer.ggml.* keys, as llama.cpp reads them.
 *
 * tokenizer.ggml.model picks the algorithm: "gpt2" is byte-level BPE with
 * the pre-tokenizer tokenizer.ggml.pre names (models/tokenizer/bpe.h), "llama" is
 * SentencePiece-style BPE over token scores with byte fallback
 * (models/tokenizer/spm.h). Any other model or pre-tokenizer is refused with its
 * name. Here: token types (control, user-defined, unknown, byte), special
 * tokens written in the text, BOS/EOS (tokenizer.ggml.add_bos_token,
 * add_eos_token; by default SentencePiece and the Llama 3 pre-tokenizer add
 * a BOS, other BPE files do not), SentencePiece's leading space
 * (tokenizer.ggml.add_space_prefix, default on), the end-of-generation
 * tokens, and the chat template text (models/sample/chat.h).
 *
 * Never fails on arbitrary input bytes; decoding the ids of a text without
 * special tokens gives the text back (for SentencePiece, after the leading
 * space it adds, and with U+2581 read back as a space). Thread safety:
 * read-only after creation. Tokenizers made from one unchanged file (its
 * colo_gguf_identity) are one, shared: each colo_tokenizer_from_gguf is
 * paired with a colo_tokenizer_free, the last of which frees it. */
#ifndef COLO_MODELS_TOKENIZER_H
#define COLO_MODELS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/format/gguf.h"

typedef struct colo_tokenizer colo_tokenizer;

/* The most end-of-generation tokens colo keeps for one model. */
#define COLO_TOKENIZER_MAX_EOG 16

/* NULL with a message naming the missing or malformed key, or the model or
 * pre-tokenizer colo lacks. */
colo_tokenizer *colo_tokenizer_from_gguf(const colo_gguf *g, char *err, size_t errlen);
void colo_tokenizer_free(colo_tokenizer *t); /* accepts NULL */

/* "gpt2" or "llama" (tokenizer.ggml.model). */
const char *colo_tokenizer_model(const colo_tokenizer *t);
/* The pre-tokenizer's name ("default" when the file gives none). */
const char *colo_tokenizer_pre(const colo_tokenizer *t);
int colo_tokenizer_n_vocab(const colo_tokenizer *t);
/* Special ids; -1 when the model has none. EOT is the end of a chat turn
 * (tokenizer.ggml.eot_token_id, or a token named like <|eot_id|>,
 * <|im_end|>, <|end|>, <end_of_turn>). */
int colo_tokenizer_bos(const colo_tokenizer *t);
int colo_tokenizer_eos(const colo_tokenizer *t);
int colo_tokenizer_eot(const colo_tokenizer *t);
int colo_tokenizer_unk(const colo_tokenizer *t);
bool colo_tokenizer_add_bos(const colo_tokenizer *t);
bool colo_tokenizer_add_eos(const colo_tokenizer *t);
/* SentencePiece: a space is put before text that starts the prompt or
 * follows a special token (tokenizer.ggml.add_space_prefix). */
bool colo_tokenizer_add_space_prefix(const colo_tokenizer *t);
/* The end-of-generation tokens (EOS, EOT, EOM and the tokens llama.cpp
 * names so); *n gets their count, the array is owned by t. */
const int32_t *colo_tokenizer_eog(const colo_tokenizer *t, int *n);
bool colo_tokenizer_is_eog(const colo_tokenizer *t, int id);

/* Id of the token whose text is exactly s (as the vocabulary stores it),
 * or -1. */
int colo_tokenizer_find(const colo_tokenizer *t, const char *s);
/* Control, user-defined and unknown tokens: the ones matched whole in text. */
bool colo_tokenizer_is_special(const colo_tokenizer *t, int id);
/* The token's text as the vocabulary stores it (GPT-2 byte-level code
 * points, or U+2581 for spaces), NUL-terminated, owned by t; NULL for an id
 * out of range. */
const char *colo_tokenizer_token_text(const colo_tokenizer *t, int id);
/* tokenizer.chat_template, NUL-terminated, owned by t; NULL when absent. */
const char *colo_tokenizer_chat_template(const colo_tokenizer *t);

/* Encodes len bytes of text into *out (malloc'd, the caller frees, valid
 * even when *n is 0) and *n.
 * add_special: the BOS (and EOS) the file asks for; no second BOS when the
 * text already starts with the BOS token and parse_special is set (a chat
 * template that writes it).
 * parse_special: control tokens written in the text (<|im_start|>) become
 * their ids; otherwise they are plain text. User-defined tokens always
 * become their ids, as in llama.cpp.
 * COLO_ENOMEM when out of memory. Time: O(len log len). */
colo_status colo_tokenizer_encode(const colo_tokenizer *t, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t **out, int *n);
/* The same with parse_special for the bytes whose plain[i] is 0 only: a
 * control token that overlaps a byte marked 1 (a client's message text,
 * colo_chat_prompt_marked) stays plain text. plain NULL: parse_special
 * everywhere. */
colo_status colo_tokenizer_encode_marked(const colo_tokenizer *t, const char *text, size_t len, bool add_special,
                                         const uint8_t *plain, int32_t **out, int *n);
/* The bytes token id stands for (llama.cpp's token_to_piece with special
 * tokens rendered), into buf (cap bytes; a token is at most a few times its
 * text's length); *len gets the count. Control and user-defined tokens give
 * their text. COLO_EINVAL for an id out of range, COLO_ENOMEM when cap is
 * too small. */
colo_status colo_tokenizer_decode(const colo_tokenizer *t, int id, char *buf, size_t cap, size_t *len);

#endif
