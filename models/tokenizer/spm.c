/* SentencePiece-style BPE over the scores of a GGUF vocabulary. */
#include "models/tokenizer/spm.h"
#include "models/tokenizer/heap.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

struct colo_spm {
    int n_vocab;
    char *pool;        /* every token's text */
    const char **tok;  /* (n_vocab) */
    uint32_t *tok_len; /* (n_vocab) */
    float *score;      /* (n_vocab) */
    uint8_t *is_byte;  /* (n_vocab): token type 6, <0xNN> */
    colo_tok_htab vocab; /* token text -> id */
    int32_t byte_tok[256]; /* byte -> <0xNN>, or the one-byte token, or -1 */
};

static bool read_scores(colo_spm *s, const colo_gguf *g, uint64_t n_tok, char *err, size_t errlen)
{
    colo_gguf_type t;
    uint64_t n;
    const uint8_t *p;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.scores", &t, &n, &p) != COLO_OK) {
        return true; /* all zero, as llama.cpp reads it */
    }
    if ((t != COLO_GGUF_F32 && t != COLO_GGUF_I32) || n < n_tok) {
        colo_set_err(err, errlen, "tokenizer.ggml.scores is not a float array as long as the tokens");
        return false;
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        if (t == COLO_GGUF_F32) {
            memcpy(&s->score[i], p + 4 * i, 4);
        } else {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            s->score[i] = (float)v;
        }
    }
    return true;
}

static bool read_types(colo_spm *s, const colo_gguf *g, uint64_t n_tok, char *err, size_t errlen)
{
    colo_gguf_type t;
    uint64_t n;
    const uint8_t *p;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.token_type", &t, &n, &p) != COLO_OK)
        return true;
    if (t != COLO_GGUF_I32 || n < n_tok) {
        colo_set_err(err, errlen, "tokenizer.ggml.token_type does not match the tokens");
        return false;
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        s->is_byte[i] = v == 6 && s->tok_len[i] == 6 && !memcmp(s->tok[i], "<0x", 3);
    }
    return true;
}

colo_spm *colo_spm_from_gguf(const colo_gguf *g, char *err, size_t errlen)
{
    colo_spm *s = calloc(1, sizeof *s);
    if (!s) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    colo_gguf_type tt;
    uint64_t n_tok;
    const uint8_t *p;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &tt, &n_tok, &p) || tt != COLO_GGUF_STRING || !n_tok ||
        n_tok > (1u << 24)) {
        colo_set_err(err, errlen, "tokenizer.ggml.tokens is missing or not a string array");
        goto out_free;
    }
    s->n_vocab = (int)n_tok;
    size_t pool = colo_tok_pool_bytes(p, n_tok);
    s->pool = malloc(pool ? pool : 1);
    s->tok = malloc(n_tok * sizeof *s->tok);
    s->tok_len = malloc(n_tok * sizeof *s->tok_len);
    s->score = calloc(n_tok, sizeof *s->score);
    s->is_byte = calloc(n_tok, 1);
    if (!s->pool || !s->tok || !s->tok_len || !s->score || !s->is_byte || !colo_tok_ht_init(&s->vocab, n_tok)) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    char *w = s->pool;
    for (uint64_t i = 0; i < n_tok; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        memcpy(w, p + 8, len);
        w[len] = 0;
        s->tok[i] = w;
        s->tok_len[i] = (uint32_t)len;
        colo_tok_ht_put(&s->vocab, w, (uint32_t)len, (int32_t)i, true);
        w += len + 1;
        p += 8 + len;
    }
    if (!read_scores(s, g, n_tok, err, errlen) || !read_types(s, g, n_tok, err, errlen))
        goto out_free;
    for (int c = 0; c < 256; c++) {
        char hex[8], one[1] = {(char)c};
        snprintf(hex, sizeof hex, "<0x%02X>", c);
        s->byte_tok[c] = colo_tok_ht_get(&s->vocab, hex, 6);
        if (s->byte_tok[c] < 0)
            s->byte_tok[c] = colo_tok_ht_get(&s->vocab, one, 1);
    }
    return s;

out_free:
    colo_spm_free(s);
    return NULL;
}

void colo_spm_free(colo_spm *s)
{
    if (!s)
        return;
    free(s->pool);
    free(s->tok);
    free(s->tok_len);
    free(s->score);
    free(s->is_byte);
    free(s->vocab.e);
    free(s);
}

int colo_spm_n_vocab(const colo_spm *s) { return s->n_vocab; }
int colo_spm_find(const colo_spm *s, const char *t, size_t len) { return colo_tok_ht_get(&s->vocab, t, len); }

const char *colo_spm_token_text(const colo_spm *s, int id, size_t *len)
{
    if (id < 0 || id >= s->n_vocab)
        return NULL;
    if (len)
        *len = s->tok_len[id];
    return s->tok[id];
}

/* ---- merging --------------------------------------------------------------------------- */

typedef struct {
    int start, len;  /* bytes of the escaped text; len 0 once merged away */
    int prev, next;  /* -1 at the ends */
} sym;

/* A candidate merge of left with its right neighbour into a token of
 * score; valid while the two still have size bytes together. */
typedef struct {
    float score;
    int left, right, size;
} cand;

static bool cand_before(const cand *x, const cand *y)
{
    return x->score != y->score ? x->score > y->score : x->left < y->left;
}

COLO_HEAP_DEFINE(heap, cand, cand_before)

static void try_pair(const colo_spm *s, const char *t, const sym *sy, int left, int right, cand *h, int *nh)
{
    if (left < 0 || right < 0)
        return;
    int size = sy[left].len + sy[right].len;
    int32_t id = colo_tok_ht_get(&s->vocab, t + sy[left].start, (size_t)size);
    if (id >= 0)
        heap_push(h, nh, (cand){s->score[id], left, right, size});
}

void colo_spm_encode_text(const colo_spm *s, const char *text, size_t len, bool space_prefix, colo_tok_ids *out)
{
    /* The escaped text: a space marker for the prefix and for every space. */
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++)
        n_sp += text[i] == ' ';
    if (len > INT32_MAX / 4) {
        out->oom = true;
        return;
    }
    size_t n = len + n_sp * 2 + (space_prefix ? 3 : 0);
    if (n == 0)
        return;
    char *t = malloc(n);
    sym *sy = malloc(n * sizeof *sy);
    cand *heap = malloc(3 * n * sizeof *heap); /* n - 1 at first, at most two per merge */
    if (!t || !sy || !heap) {
        out->oom = true;
        goto out_free;
    }
    size_t o = 0;
    if (space_prefix) {
        memcpy(t, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t + o, SPACE_MARK, 3);
            o += 3;
        } else {
            t[o++] = text[i];
        }
    }
    int ns = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = colo_utf8_decode((const unsigned char *)t + i, n - i, &cp);
        sy[ns] = (sym){(int)i, l, ns - 1, -1};
        if (ns > 0)
            sy[ns - 1].next = ns;
        ns++;
        i += (size_t)l;
    }
    int nh = 0;
    for (int i = 1; i < ns; i++)
        try_pair(s, t, sy, i - 1, i, heap, &nh);
    while (nh > 0) {
        cand c = heap_pop(heap, &nh);
        sym *l = &sy[c.left], *r = &sy[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size || l->next != c.right)
            continue; /* stale: one side has merged since */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = c.left;
        try_pair(s, t, sy, l->prev, c.left, heap, &nh);
        try_pair(s, t, sy, c.left, l->next, heap, &nh);
    }
    for (int i = 0; i >= 0; i = sy[i].next) {
        int32_t id = colo_tok_ht_get(&s->vocab, t + sy[i].start, (size_t)sy[i].len);
        if (id >= 0) {
            colo_tok_push(out, id);
            continue;
        }
        /* a character in no token: its bytes (a merged symbol is always a token) */
        for (int k = 0; k < sy[i].len; k++) {
            int32_t b = s->byte_tok[(unsigned char)t[sy[i].start + k]];
            if (b >= 0)
                colo_tok_push(out, b);
        }
    }
out_free:
    free(t);
    free(sy);
    free(heap);
}

colo_status colo_spm_decode(const colo_spm *s, int id, char *buf, size_t cap, size_t *len)
{
    if (id < 0 || id >= s->n_vocab)
        return COLO_EINVAL;
    const char *t = s->tok[id];
    size_t tl = s->tok_len[id];
    if (s->is_byte[id]) {
        if (cap < 1)
            return COLO_ENOMEM;
        buf[0] = (char)strtol(t + 3, NULL, 16);
        *len = 1;
        return COLO_OK;
    }
    size_t o = 0;
    for (size_t i = 0; i < tl;) {
        if (i + 3 <= tl && !memcmp(t + i, SPACE_MARK, 3)) {
            if (o >= cap)
                return COLO_ENOMEM;
            buf[o++] = ' ';
            i += 3;
            continue;
        }
        if (o >= cap)
            return COLO_ENOMEM;
        buf[o++] = t[i++];
    }
    *len = o;
    return COLO_OK;
}
