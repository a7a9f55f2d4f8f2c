/* models/tokenizer/wordpiece.h: BERT WordPiece tokenization, as Hugging Face's
 * BertTokenizerFast does it.
 *
 * Steps, for each piece of text between special tokens:
 * - special tokens ([CLS], [SEP], [PAD], [UNK], [MASK], when in the vocab)
 *   written literally in the text are matched first, on the raw text, and
 *   become their ids (allow_special);
 * - clean text: NUL, U+FFFD and control/format characters removed,
 *   whitespace made a space (invalid UTF-8 bytes count as U+FFFD: removed);
 * - CJK ideographs padded with spaces;
 * - accents stripped (NFD, then combining marks Mn removed) and lower-cased;
 * - split on whitespace and around every punctuation character (Unicode P*
 *   and the ASCII symbols);
 * - greedy longest-match-first WordPiece per word, "##" before pieces that
 *   continue a word; a word with no match, or of more than
 *   max_chars_per_word characters, becomes one [UNK];
 * - [CLS] tokens [SEP], the tokens cut so that the whole is at most max_len.
 * The character tables (models/tokenizer/unicode_nfd_table.c) are generated from the
 * tokenizers library itself (scripts/ref/make_wordpiece_tables.py).
 *
 * Never fails on arbitrary input bytes. Thread safety: read-only after
 * creation; any thread may encode. */
#ifndef COLO_MODELS_WORDPIECE_H
#define COLO_MODELS_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"

typedef struct colo_wordpiece colo_wordpiece;

typedef struct colo_wordpiece_config {
    bool lowercase;         /* lower-case (BERT uncased: true) */
    bool strip_accents;     /* NFD and drop Mn marks (uncased: true) */
    bool chinese_chars;     /* pad CJK ideographs with spaces (true) */
    bool clean_text;        /* drop controls, map whitespace to ' ' (true) */
    int max_len;            /* tokens per sequence, [CLS] and [SEP] included (>= 2) */
    int max_chars_per_word; /* longer words become [UNK] (BERT: 100) */
} colo_wordpiece_config;

/* BERT-uncased defaults (all true, max_chars_per_word 100) with max_len. */
colo_wordpiece_config colo_wordpiece_default_config(int max_len);

/* Vocabulary from a vocab.txt (one token a line, id = line number, a final
 * newline optional). NULL with a message naming the file when it cannot
 * be read or lacks [CLS], [SEP] or [UNK]. */
colo_wordpiece *colo_wordpiece_load(const char *vocab_path, const colo_wordpiece_config *cfg, char *err,
                                    size_t errlen);
/* Same from n tokens in memory (copied); id = index. On duplicates the
 * last id wins, as in Hugging Face's vocab loader. */
colo_wordpiece *colo_wordpiece_create(const char *const *tokens, int n, const colo_wordpiece_config *cfg, char *err,
                                      size_t errlen);
void colo_wordpiece_free(colo_wordpiece *wp); /* accepts NULL */

int colo_wordpiece_n_vocab(const colo_wordpiece *wp);
int colo_wordpiece_max_len(const colo_wordpiece *wp);
/* Id of the token whose text is exactly s, or -1. */
int colo_wordpiece_find(const colo_wordpiece *wp, const char *s);
/* Text of token id (NUL-terminated, owned by wp), NULL when out of range. */
const char *colo_wordpiece_token(const colo_wordpiece *wp, int id);
int colo_wordpiece_cls(const colo_wordpiece *wp);
int colo_wordpiece_sep(const colo_wordpiece *wp);
int colo_wordpiece_unk(const colo_wordpiece *wp);
int colo_wordpiece_pad(const colo_wordpiece *wp); /* [PAD], or 0 when absent */

/* Encodes len bytes of text into ids (room for cap ids): [CLS], the tokens,
 * [SEP], at most min(cap, max_len) ids in all; *n gets the count. *n_full
 * (may be NULL) gets the count without truncation, so *n < *n_full means
 * the text was cut. COLO_EINVAL when cap < 2; COLO_ENOMEM when a scratch
 * allocation fails. */
colo_status colo_wordpiece_encode(const colo_wordpiece *wp, const char *text, size_t len, bool allow_special,
                                  int32_t *ids, int cap, int *n, int *n_full);

#endif
