/* runtime/utf8.h: decoding UTF-8, for every layer that reads text
 * (tokenizers, JSON answers). */
#ifndef COLO_RUNTIME_UTF8_H
#define COLO_RUNTIME_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s (n >= 1 bytes left) into *cp; returns its
 * length (1-4). An invalid, overlong, surrogate or truncated sequence gives
 * a length of 1 and *cp = UINT32_MAX. */
int colo_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif
