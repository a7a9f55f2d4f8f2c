/* runtime/utf8.h: UTF-8, for every layer that reads or writes text
 * (tokenizers, the JSON automaton, JSON answers, streamed pieces). */
#ifndef COLO_RUNTIME_UTF8_H
#define COLO_RUNTIME_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s (n >= 1 bytes left) into *cp; returns its
 * length (1-4). An invalid, overlong, surrogate or truncated sequence gives
 * a length of 1 and *cp = UINT32_MAX. */
int colo_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes); returns the length. */
int colo_utf8_encode(uint32_t cp, char *out);
/* Length of the longest prefix of s[0, n) that is whole UTF-8 sequences
 * (an incomplete sequence at the end is left out). */
size_t colo_utf8_complete_prefix(const char *s, size_t n);

/* UTF-8 as RFC 3629 has it (no overlong forms, surrogates or code points
 * past U+10FFFF): the continuation bytes lead byte c needs (0: c does not
 * start a multi-byte character), and in *range which bytes the first of
 * them may be. */
static inline int colo_utf8_lead(unsigned c, uint8_t *range)
{
    *range = c == 0xE0 ? 1 : c == 0xED ? 2 : c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0;
    if (c >= 0xC2 && c <= 0xDF)
        return 1;
    if (c >= 0xE0 && c <= 0xEF)
        return 2;
    if (c >= 0xF0 && c <= 0xF4)
        return 3;
    return 0;
}

static inline bool colo_utf8_cont_ok(unsigned c, uint8_t range)
{
    static const uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80}, hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    return range < 5 && c >= lo[range] && c <= hi[range];
}

#endif
