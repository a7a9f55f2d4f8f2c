/* models/tokenizer/unicode.h: UTF-8 decoding and the character classes tokenizers need. */
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


/* Whether cp lies in one of the n sorted, disjoint ranges r. */
bool colo_cp_in_ranges(const colo_cp_range *r, int n, uint32_t cp);
bool colo_is_letter(uint32_t cp);
bool colo_is_number(uint32_t cp);
bool colo_is_space(uint32_t cp);

#endif
