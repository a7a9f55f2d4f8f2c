/* models/tokenizer/tokenizer_impl.h: what the tokenizer facade (models/tokenizer/tokenizer.h)
 * shares with its backends (models/tokenizer/bpe.h, models/tokenizer/spm.h): a growing id
 * array and an open-addressing table from byte strings to ids. Only those
 * three files include it. */
#ifndef COLO_MODELS_TOKENIZER_IMPL_H
#define COLO_MODELS_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Token ids being written; oom is set (and later pushes are dropped) when
 * an allocation fails. ids is malloc'd, its owner frees it. */
typedef struct colo_tok_ids {
    int32_t *ids;
    int n, cap;
    bool oom;
} colo_tok_ids;

static inline void colo_tok_push(colo_tok_ids *o, int32_t id)
{
    if (o->oom)
        return;
    if (o->n == o->cap) {
        if (o->cap > INT32_MAX / 4) {
            o->oom = true;
            return;
        }
        int cap = o->cap ? o->cap * 2 : 64;
        int32_t *p = realloc(o->ids, (size_t)cap * sizeof *p);
        if (!p) {
            o->oom = true;
            return;
        }
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
}

/* String -> int32 table; the strings are not copied (they live in the
 * owner's pool). */
typedef struct {
    const char *s;
    uint32_t len;
    int32_t val;
} colo_tok_hent;

typedef struct {
    colo_tok_hent *e;
    size_t cap; /* power of two */
} colo_tok_htab;

static inline uint64_t colo_tok_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Room for n entries; false when out of memory. */
static inline bool colo_tok_ht_init(colo_tok_htab *t, size_t n)
{
    t->cap = 16;
    while (t->cap < n * 2)
        t->cap *= 2;
    t->e = calloc(t->cap, sizeof *t->e);
    return t->e != NULL;
}

/* Adds s -> val; an existing s keeps its value unless replace. */
static inline void colo_tok_ht_put(colo_tok_htab *t, const char *s, uint32_t len, int32_t val, bool replace)
{
    size_t i = colo_tok_hash(s, len) & (t->cap - 1);
    while (t->e[i].s) {
        if (t->e[i].len == len && !memcmp(t->e[i].s, s, len)) {
            if (replace)
                t->e[i].val = val;
            return;
        }
        i = (i + 1) & (t->cap - 1);
    }
    t->e[i] = (colo_tok_hent){s, len, val};
}

/* The value of s, or -1. */
static inline int32_t colo_tok_ht_get(const colo_tok_htab *t, const char *s, size_t len)
{
    size_t i = colo_tok_hash(s, len) & (t->cap - 1);
    while (t->e[i].s) {
        if (t->e[i].len == len && !memcmp(t->e[i].s, s, len))
            return t->e[i].val;
        i = (i + 1) & (t->cap - 1);
    }
    return -1;
}

/* The vocabulary arrays as a GGUF holds them: strings are (u64 length,
 * bytes) one after the other, already validated by the GGUF reader. */
static inline size_t colo_tok_pool_bytes(const uint8_t *p, uint64_t n)
{
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        bytes += len + 1;
        p += 8 + len;
    }
    return bytes;
}

#endif
