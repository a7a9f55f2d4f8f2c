/* models/unicode.h: UTF-8 decoding and the character classes tokenizers need. */
#ifndef COLO_MODELS_UNICODE_H
#define COLO_MODELS_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/utf8.h"

typedef struct colo_cp_range {
    uint32_t lo, hi;
} colo_cp_range;

extern const colo_cp_range colo_unicode_letter[];
extern const int colo_unicode_letter_n;
extern const colo_cp_range colo_unicode_number[];
extern const int colo_unicode_number_n;
extern const colo_cp_range colo_unicode_space[];
extern const int colo_unicode_space_n;

/* Encodes cp into out (4 bytes); returns the length. */
int colo_utf8_encode(uint32_t cp, char *out);
/* Length of the longest prefix of s[0, n) that is whole UTF-8 sequences
 * (an incomplete sequence at the end is left out). */
size_t colo_utf8_complete_prefix(const char *s, size_t n);

bool colo_is_letter(uint32_t cp);
bool colo_is_number(uint32_t cp);
bool colo_is_space(uint32_t cp);

#endif
