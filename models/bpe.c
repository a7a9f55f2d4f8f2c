/* GPT-2 byte-level BPE with the smollm pre-tokenizer. */
#include "models/bpe.h"
#include "models/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s; /* into the text pool */
    uint32_t len;
    int32_t val;
} hent;

typedef struct {
    hent *e;
    size_t cap; /* power of two */
} htab;

struct colo_bpe {
    int n_vocab;
    char *pool;        /* every token and merge string */
    const char **tok;  /* (n_vocab) */
    uint32_t *tok_len;
    uint8_t *special;  /* (n_vocab) */
    htab vocab;        /* token text -> id */
    htab merges;       /* "left right" -> rank */
    int *specials;     /* ids of special tokens, longest text first */
    int n_specials;
    int bos, eos;
    bool add_bos;
    bool split_digits;      /* pre-tokenizer "smollm": every digit its own piece */
    uint16_t byte_cp[256];  /* byte -> GPT-2 code point */
    int32_t byte_tok[256];  /* byte -> its token, -1 if the vocabulary has none */
    int32_t replacement;    /* the token of U+FFFD, -1 if none */
    int16_t cp_byte[512];   /* code point (< 512) -> byte, -1 if none */
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool ht_init(htab *t, size_t n)
{
    t->cap = 16;
    while (t->cap < n * 2)
        t->cap *= 2;
    t->e = calloc(t->cap, sizeof *t->e);
    return t->e != NULL;
}

static void ht_put(htab *t, const char *s, uint32_t len, int32_t val)
{
    size_t i = hash_bytes(s, len) & (t->cap - 1);
    while (t->e[i].s) {
        if (t->e[i].len == len && !memcmp(t->e[i].s, s, len))
            return; /* keep the first (lowest id / rank) */
        i = (i + 1) & (t->cap - 1);
    }
    t->e[i] = (hent){s, len, val};
}

static int32_t ht_get(const htab *t, const char *s, size_t len)
{
    size_t i = hash_bytes(s, len) & (t->cap - 1);
    while (t->e[i].s) {
        if (t->e[i].len == len && !memcmp(t->e[i].s, s, len))
            return t->e[i].val;
        i = (i + 1) & (t->cap - 1);
    }
    return -1;
}

static void init_byte_map(colo_bpe *b)
{
    int n = 0;
    for (int i = 0; i < 512; i++)
        b->cp_byte[i] = -1;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        b->byte_cp[c] = (uint16_t)(printable ? c : 256 + n++);
        b->cp_byte[b->byte_cp[c]] = (int16_t)c;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const colo_bpe *t = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    return (int)t->tok_len[y] - (int)t->tok_len[x];
}

/* The tokenizer's model must be gpt2 (byte-level BPE); the pre-tokenizer
 * "smollm" splits digits before the GPT-2 pattern, "gpt2" and "default"
 * (or no key, as llama.cpp assumes) use the pattern alone. Others have
 * patterns of their own that this tokenizer lacks. */
static bool read_kind(colo_bpe *b, const colo_gguf *g, char *err, size_t errlen)
{
    colo_gguf_str model;
    if (colo_gguf_get_str(g, "tokenizer.ggml.model", &model) || model.len != 4 || memcmp(model.ptr, "gpt2", 4)) {
        colo_set_err(err, errlen, "tokenizer.ggml.model is missing or not gpt2 (byte-level BPE)");
        return false;
    }
    colo_gguf_str pre = {"default", 7};
    if (colo_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == COLO_EFORMAT) {
        colo_set_err(err, errlen, "tokenizer.ggml.pre is not a string");
        return false;
    }
    b->split_digits = pre.len == 6 && !memcmp(pre.ptr, "smollm", 6);
    if (!b->split_digits && !(pre.len == 4 && !memcmp(pre.ptr, "gpt2", 4)) &&
        !(pre.len == 7 && !memcmp(pre.ptr, "default", 7))) {
        colo_set_err(err, errlen, "tokenizer.ggml.pre '%.*s' is not supported (smollm, gpt2 or default)",
                     (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
        return false;
    }
    return true;
}

/* The vocabulary arrays as the file holds them: strings are (u64 length,
 * bytes) one after the other, already validated by the GGUF reader. */
typedef struct {
    const uint8_t *tokens, *merges, *types; /* types: (n_tok) i32, NULL when absent */
    uint64_t n_tok, n_merge;
} vocab_arrays;

static bool read_arrays(const colo_gguf *g, vocab_arrays *a, char *err, size_t errlen)
{
    colo_gguf_type tt, mt, ty;
    uint64_t n_type;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &tt, &a->n_tok, &a->tokens) || tt != COLO_GGUF_STRING ||
        !a->n_tok || a->n_tok > (1u << 24)) {
        colo_set_err(err, errlen, "tokenizer.ggml.tokens is missing or not a string array");
        return false;
    }
    if (colo_gguf_get_arr(g, "tokenizer.ggml.merges", &mt, &a->n_merge, &a->merges) || mt != COLO_GGUF_STRING) {
        colo_set_err(err, errlen, "tokenizer.ggml.merges is missing or not a string array");
        return false;
    }
    a->types = NULL;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.token_type", &ty, &n_type, &a->types) != COLO_OK) {
        a->types = NULL;
    } else if (ty != COLO_GGUF_I32 || n_type != a->n_tok) {
        colo_set_err(err, errlen, "tokenizer.ggml.token_type does not match the tokens");
        return false;
    }
    return true;
}

/* Bytes the n strings at p take in the pool, each with its NUL. */
static size_t pool_bytes(const uint8_t *p, uint64_t n)
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

static bool alloc_tables(colo_bpe *b, const vocab_arrays *a)
{
    size_t pool = pool_bytes(a->tokens, a->n_tok) + pool_bytes(a->merges, a->n_merge);
    b->pool = malloc(pool ? pool : 1);
    b->tok = malloc(a->n_tok * sizeof *b->tok);
    b->tok_len = malloc(a->n_tok * sizeof *b->tok_len);
    b->special = calloc(a->n_tok, 1);
    b->specials = malloc(a->n_tok * sizeof *b->specials);
    return b->pool && b->tok && b->tok_len && b->special && b->specials && ht_init(&b->vocab, a->n_tok) &&
           ht_init(&b->merges, a->n_merge + 1);
}

/* Copies the tokens into the pool from *w on, and advances *w. Control and
 * user-defined tokens (types 3 and 4) are special: matched whole in text. */
static void load_tokens(colo_bpe *b, const vocab_arrays *a, char **w)
{
    const uint8_t *p = a->tokens;
    for (uint64_t i = 0; i < a->n_tok; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        memcpy(*w, p + 8, len);
        (*w)[len] = 0;
        b->tok[i] = *w;
        b->tok_len[i] = (uint32_t)len;
        ht_put(&b->vocab, *w, (uint32_t)len, (int32_t)i);
        if (a->types) {
            int32_t type;
            memcpy(&type, a->types + 4 * i, 4);
            if ((type == 3 || type == 4) && len > 0) {
                b->special[i] = 1;
                b->specials[b->n_specials++] = (int)i;
            }
        }
        *w += len + 1;
        p += 8 + len;
    }
    qsort_r(b->specials, (size_t)b->n_specials, sizeof *b->specials, cmp_special, b);
}

/* Copies the merges ("left right", rank = index) into the pool from w on. */
static bool load_merges(colo_bpe *b, const vocab_arrays *a, char *w, char *err, size_t errlen)
{
    const uint8_t *p = a->merges;
    for (uint64_t i = 0; i < a->n_merge; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        memcpy(w, p + 8, len);
        w[len] = 0;
        if (!memchr(w, ' ', len)) {
            colo_set_err(err, errlen, "tokenizer.ggml.merges entry %llu has no space", (unsigned long long)i);
            return false;
        }
        ht_put(&b->merges, w, (uint32_t)len, (int32_t)i);
        w += len + 1;
        p += 8 + len;
    }
    return true;
}

/* Each byte's token, and the token of U+FFFD (what invalid UTF-8 becomes). */
static void map_bytes(colo_bpe *b)
{
    for (int c = 0; c < 256; c++) {
        char t[4];
        b->byte_tok[c] = ht_get(&b->vocab, t, (size_t)colo_utf8_encode(b->byte_cp[c], t));
    }
    char fffd[8];
    int fl = colo_utf8_encode(b->byte_cp[0xEF], fffd);
    fl += colo_utf8_encode(b->byte_cp[0xBF], fffd + fl);
    fl += colo_utf8_encode(b->byte_cp[0xBD], fffd + fl);
    b->replacement = ht_get(&b->vocab, fffd, (size_t)fl);
}

static bool read_bos_eos(colo_bpe *b, const colo_gguf *g, char *err, size_t errlen)
{
    uint32_t v;
    uint32_t n_tok = (uint32_t)b->n_vocab;
    b->bos = colo_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == COLO_OK && v < n_tok ? (int)v : -1;
    b->eos = colo_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == COLO_OK && v < n_tok ? (int)v : -1;
    bool add = false;
    b->add_bos = colo_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add) == COLO_OK ? add : false;
    if (b->add_bos && b->bos < 0) {
        colo_set_err(err, errlen, "tokenizer.ggml.add_bos_token is set but there is no BOS token");
        return false;
    }
    return true;
}

colo_bpe *colo_bpe_from_gguf(const colo_gguf *g, char *err, size_t errlen)
{
    colo_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    init_byte_map(b);
    vocab_arrays a;
    if (!read_kind(b, g, err, errlen) || !read_arrays(g, &a, err, errlen))
        goto out_free;
    b->n_vocab = (int)a.n_tok;
    if (!alloc_tables(b, &a)) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    char *w = b->pool;
    load_tokens(b, &a, &w);
    if (!load_merges(b, &a, w, err, errlen))
        goto out_free;
    map_bytes(b);
    if (!read_bos_eos(b, g, err, errlen))
        goto out_free;
    return b;

out_free:
    colo_bpe_free(b);
    return NULL;
}

void colo_bpe_free(colo_bpe *b)
{
    if (!b)
        return;
    free(b->pool);
    free(b->tok);
    free(b->tok_len);
    free(b->special);
    free(b->specials);
    free(b->vocab.e);
    free(b->merges.e);
    free(b);
}

int colo_bpe_n_vocab(const colo_bpe *b) { return b->n_vocab; }
int colo_bpe_bos(const colo_bpe *b) { return b->bos; }
int colo_bpe_eos(const colo_bpe *b) { return b->eos; }
bool colo_bpe_add_bos(const colo_bpe *b) { return b->add_bos; }
int colo_bpe_find(const colo_bpe *b, const char *s) { return ht_get(&b->vocab, s, strlen(s)); }
bool colo_bpe_is_special(const colo_bpe *b, int id) { return id >= 0 && id < b->n_vocab && b->special[id]; }
const char *colo_bpe_token_text(const colo_bpe *b, int id) { return id >= 0 && id < b->n_vocab ? b->tok[id] : NULL; }

/* ---- output buffer ---------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    int n, cap;
    bool oom;
} idbuf;

static void push(idbuf *o, int32_t id)
{
    if (o->oom)
        return;
    if (o->n == o->cap) {
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

/* ---- BPE on one pre-tokenized piece -------------------------------------------------- */

/* A symbol: a run of the piece's bytes, in a linked list of the symbols left. */
typedef struct {
    int start, len; /* bytes of the piece; their byte-level text is enc[estart, estart + elen) */
    int estart, elen;
    int prev, next; /* -1 at the ends */
} sym;

/* A candidate merge of symbol left with its right neighbour, valid while
 * both still have the lengths they had when it was queued. */
typedef struct {
    int32_t rank;
    int left, left_len, right_len;
} cand;

static bool cand_less(const cand *x, const cand *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->left < y->left; /* then leftmost */
}

static void heap_push(cand *h, int *n, cand c)
{
    int i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, int *n)
{
    cand top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
            c++;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Rank of merging symbols l and r, or -1. */
static int32_t merge_rank(const colo_bpe *b, const char *enc, const sym *l, const sym *r, char *key)
{
    memcpy(key, enc + l->estart, (size_t)l->elen);
    key[l->elen] = ' ';
    memcpy(key + l->elen + 1, enc + r->estart, (size_t)r->elen);
    return ht_get(&b->merges, key, (size_t)(l->elen + 1 + r->elen));
}

static void queue_pair(const colo_bpe *b, const char *enc, const sym *s, int left, char *key, cand *h, int *nh)
{
    int right = s[left].next;
    if (right < 0)
        return;
    int32_t r = merge_rank(b, enc, &s[left], &s[right], key);
    if (r >= 0)
        heap_push(h, nh, (cand){r, left, s[left].elen, s[right].elen});
}

/* Tokens for a symbol the vocabulary lacks: one per byte. A byte with no
 * token of its own is dropped when it belongs to valid UTF-8 (as llama.cpp
 * and Hugging Face tokenizers do) and becomes U+FFFD's token when it is not
 * UTF-8 at all (as llama.cpp does). */
static void push_bytes(const colo_bpe *b, const unsigned char *piece, const uint8_t *invalid, const sym *s,
                       idbuf *out)
{
    for (int i = s->start; i < s->start + s->len; i++) {
        int32_t id = b->byte_tok[piece[i]];
        if (id < 0 && invalid[i])
            id = b->replacement;
        if (id >= 0)
            push(out, id);
    }
}

static void bpe_piece(const colo_bpe *b, const unsigned char *piece, size_t n, idbuf *out)
{
    if (n == 0)
        return;
    if (n == 1 && b->byte_tok[piece[0]] >= 0) { /* common: punctuation, digits, spaces */
        push(out, b->byte_tok[piece[0]]);
        return;
    }
    if (n > INT32_MAX / 4) {
        out->oom = true;
        return;
    }
    /* Every byte becomes one code point of 1-2 UTF-8 bytes; a merge key is
     * two symbols and a space. */
    char enc_st[512], key_st[1040];
    sym syms_st[256];
    cand heap_st[256];
    uint8_t inv_st[256];
    char *enc = n * 2 <= sizeof enc_st ? enc_st : malloc(n * 2);
    char *key = n * 4 + 2 <= sizeof key_st ? key_st : malloc(n * 4 + 2);
    sym *s = n <= 256 ? syms_st : malloc(n * sizeof *s);
    uint8_t *invalid = n <= 256 ? inv_st : malloc(n);
    /* Each merge queues at most two candidates; n - 1 are queued at first. */
    size_t heap_cap = 3 * n;
    cand *heap = heap_cap <= 256 ? heap_st : malloc(heap_cap * sizeof *heap);
    if (!enc || !key || !s || !invalid || !heap) {
        out->oom = true;
        goto out_free;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = colo_utf8_decode(piece + i, n - i, &cp);
        for (int k = 0; k < l; k++)
            invalid[i + (size_t)k] = cp == UINT32_MAX;
        i += (size_t)l;
    }
    int elen = 0, ns = (int)n;
    for (int i = 0; i < ns; i++) {
        int l = colo_utf8_encode(b->byte_cp[piece[i]], enc + elen);
        s[i] = (sym){i, 1, elen, l, i - 1, i + 1 < ns ? i + 1 : -1};
        elen += l;
    }
    int nh = 0;
    for (int i = 0; i + 1 < ns; i++)
        queue_pair(b, enc, s, i, key, heap, &nh);
    while (nh > 0) {
        cand c = heap_pop(heap, &nh);
        sym *l = &s[c.left];
        if (l->len == 0 || l->elen != c.left_len || l->next < 0 || s[l->next].elen != c.right_len)
            continue; /* stale: one side has merged since */
        sym *r = &s[l->next];
        l->len += r->len; /* neighbours are contiguous in the piece and in enc */
        l->elen += r->elen;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = c.left;
        r->len = 0;
        if (l->prev >= 0)
            queue_pair(b, enc, s, l->prev, key, heap, &nh);
        queue_pair(b, enc, s, c.left, key, heap, &nh);
    }
    for (int i = 0; i >= 0; i = s[i].next) {
        int32_t id = ht_get(&b->vocab, enc + s[i].estart, (size_t)s[i].elen);
        if (id >= 0)
            push(out, id);
        else
            push_bytes(b, piece, invalid, &s[i], out);
    }
out_free:
    if (enc != enc_st)
        free(enc);
    if (key != key_st)
        free(key);
    if (s != syms_st)
        free(s);
    if (invalid != inv_st)
        free(invalid);
    if (heap != heap_st)
        free(heap);
}

/* ---- the GPT-2 pattern on a span without digits --------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t n;
} span;

static uint32_t cp_at(span t, size_t i, int *len)
{
    uint32_t cp;
    *len = colo_utf8_decode(t.s + i, t.n - i, &cp);
    return cp;
}

static bool is_other(uint32_t cp) { return !colo_is_space(cp) && !colo_is_letter(cp) && !colo_is_number(cp); }

/* Length of the match at i. */
static size_t gpt2_match(span t, size_t i)
{
    const unsigned char *s = t.s;
    size_t rest = t.n - i;
    if (s[i] == '\'' && rest >= 2) {
        char c = (char)s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd')
            return 2;
        if (rest >= 3 && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') || (c == 'l' && s[i + 2] == 'l')))
            return 3;
    }
    int l;
    size_t j = i;
    if (s[j] == ' ' && j + 1 < t.n)
        j++;
    uint32_t cp = cp_at(t, j, &l);
    bool (*cls)(uint32_t) = colo_is_letter(cp)   ? colo_is_letter
                            : colo_is_number(cp) ? colo_is_number
                            : is_other(cp)       ? is_other
                                                 : NULL;
    if (cls) { /* ' ?\p{L}+' | ' ?\p{N}+' | ' ?[^\s\p{L}\p{N}]+' */
        size_t k = j;
        while (k < t.n && cls(cp_at(t, k, &l)))
            k += (size_t)l;
        return k - i;
    }
    /* \s+(?!\S) | \s+ */
    size_t k = i, last = i;
    while (k < t.n) {
        uint32_t c2 = cp_at(t, k, &l);
        if (!colo_is_space(c2))
            break;
        last = k;
        k += (size_t)l;
    }
    if (k == i)
        return 1; /* cannot happen: every code point is in one class */
    if (k == t.n || last == i)
        return k - i;
    return last - i; /* leave the last space for the next token */
}

static void pretokenize(const colo_bpe *b, const unsigned char *s, size_t n, idbuf *out)
{
    size_t i = 0;
    while (i < n && !out->oom) {
        /* smollm: every digit is its own piece; the GPT-2 pattern runs on the text between. */
        size_t j = b->split_digits ? i : n;
        int l = 1;
        while (j < n) {
            uint32_t cp;
            l = colo_utf8_decode(s + j, n - j, &cp);
            if (colo_is_number(cp))
                break;
            j += (size_t)l;
        }
        span t = {s + i, j - i};
        for (size_t k = 0; k < t.n;) {
            size_t m = gpt2_match(t, k);
            bpe_piece(b, t.s + k, m, out);
            k += m;
        }
        if (j < n) {
            bpe_piece(b, s + j, (size_t)l, out);
            j += (size_t)l;
        }
        i = j;
    }
}

colo_status colo_bpe_encode(const colo_bpe *b, const char *text, size_t len, bool allow_special, int32_t **out,
                            int *n)
{
    idbuf o = {0};
    const unsigned char *s = (const unsigned char *)text;
    size_t start = 0;
    if (b->add_bos)
        push(&o, b->bos);
    for (size_t i = 0; allow_special && i < len; i++) {
        for (int k = 0; k < b->n_specials; k++) {
            int id = b->specials[k];
            uint32_t tl = b->tok_len[id];
            if (tl <= len - i && !memcmp(s + i, b->tok[id], tl)) {
                pretokenize(b, s + start, i - start, &o);
                push(&o, id);
                i += tl - 1;
                start = i + 1;
                break;
            }
        }
    }
    pretokenize(b, s + start, len - start, &o);
    if (o.oom) {
        free(o.ids);
        return COLO_ENOMEM;
    }
    if (!o.ids)
        o.ids = malloc(sizeof *o.ids); /* a valid pointer even for no tokens */
    *out = o.ids;
    *n = o.n;
    return o.ids ? COLO_OK : COLO_ENOMEM;
}

colo_status colo_bpe_decode(const colo_bpe *b, int id, char *buf, size_t cap, size_t *len)
{
    if (id < 0 || id >= b->n_vocab)
        return COLO_EINVAL;
    const char *t = b->tok[id];
    size_t tl = b->tok_len[id];
    if (b->special[id]) {
        if (tl > cap)
            return COLO_ENOMEM;
        memcpy(buf, t, tl);
        *len = tl;
        return COLO_OK;
    }
    size_t o = 0;
    for (size_t i = 0; i < tl;) {
        uint32_t cp;
        int l = colo_utf8_decode((const unsigned char *)t + i, tl - i, &cp);
        if (o >= cap)
            return COLO_ENOMEM;
        if (cp < 512 && b->cp_byte[cp] >= 0) {
            buf[o++] = (char)b->cp_byte[cp];
        } else { /* not a byte-level code point: copy it as it is */
            if (o + (size_t)l > cap)
                return COLO_ENOMEM;
            memcpy(buf + o, t + i, (size_t)l);
            o += (size_t)l;
        }
        i += (size_t)l;
    }
    *len = o;
    return COLO_OK;
}
