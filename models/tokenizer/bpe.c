/* GPT-2 byte-level BPE and its pre-tokenizers. */
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/heap.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How text is cut into pieces before BPE (tokenizer.ggml.pre). */
typedef enum {
    PRE_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRE_SMOLLM, /* every digit alone, then PRE_GPT2 on the text between */
    PRE_LLAMA3, /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRE_QWEN2,  /* PRE_LLAMA3 with \p{N} one digit at a time */
} pre_kind;

/* The names llama.cpp gives each pattern (src/llama-vocab.cpp), and
 * whether a piece that is a whole token skips the merges (ignore_merges;
 * the same names add a BOS when the file does not say). */
static const struct {
    const char *name;
    pre_kind kind;
    bool ignore_merges;
} pre_names[] = {
    {"default", PRE_GPT2, false},  /* also an absent key; see colo_bpe_from_gguf */
    {"gpt-2", PRE_GPT2, false},      {"gpt2", PRE_GPT2, false},       {"phi-2", PRE_GPT2, false},
    {"mpt", PRE_GPT2, false},        {"olmo", PRE_GPT2, false},       {"jais", PRE_GPT2, false},
    {"jina-es", PRE_GPT2, false},    {"jina-de", PRE_GPT2, false},    {"jina-v2-es", PRE_GPT2, false},
    {"jina-v2-de", PRE_GPT2, false}, {"gigachat", PRE_GPT2, false},   {"exaone4", PRE_GPT2, false},
    {"mellum", PRE_GPT2, false},     {"trillion", PRE_GPT2, false},   {"granite-docling", PRE_GPT2, false},
    {"a.x-4.0", PRE_GPT2, false},
    {"smollm", PRE_SMOLLM, false},   {"starcoder", PRE_SMOLLM, false}, {"refact", PRE_SMOLLM, false},
    {"command-r", PRE_SMOLLM, false}, {"codeshell", PRE_SMOLLM, false}, {"exaone", PRE_SMOLLM, false},
    {"minerva-7b", PRE_SMOLLM, false}, {"mellum2", PRE_SMOLLM, false},
    {"llama-bpe", PRE_LLAMA3, true}, {"llama3", PRE_LLAMA3, true},    {"llama-v3", PRE_LLAMA3, true},
    {"falcon3", PRE_LLAMA3, true},   {"falcon-h1", PRE_LLAMA3, true}, {"pixtral", PRE_LLAMA3, true},
    {"midm-2.0", PRE_LLAMA3, true},  {"lfm2", PRE_LLAMA3, true},      {"dbrx", PRE_LLAMA3, false},
    {"smaug-bpe", PRE_LLAMA3, false},
    {"qwen2", PRE_QWEN2, false},     {"deepseek-r1-qwen", PRE_QWEN2, false}, {"megrez", PRE_QWEN2, false},
    {"hunyuan", PRE_QWEN2, false},   {"solar-open", PRE_QWEN2, false}, {"grok-2", PRE_QWEN2, false},
    {"laguna", PRE_QWEN2, false},    {"kormo", PRE_QWEN2, false},     {"f2llmv2", PRE_QWEN2, false},
};

struct colo_bpe {
    int n_vocab;
    char *pool;        /* every token and merge string */
    const char **tok;  /* (n_vocab) */
    uint32_t *tok_len; /* (n_vocab) */
    colo_tok_htab vocab;  /* token text -> id */
    colo_tok_htab merges; /* "left right" -> rank */
    pre_kind pre;
    bool ignore_merges;
    char pre_name[32];
    uint16_t byte_cp[256];  /* byte -> GPT-2 code point */
    int32_t byte_tok[256];  /* byte -> its token, -1 if the vocabulary has none */
    int32_t replacement;    /* the token of U+FFFD, -1 if none */
    int16_t cp_byte[512];   /* code point (< 512) -> byte, -1 if none */
};

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

/* tokenizer.ggml.pre names the pattern; no key means "default", which
 * colo (like its earlier versions) cuts with the GPT-2 pattern. */
static bool read_pre(colo_bpe *b, const colo_gguf *g, char *err, size_t errlen)
{
    colo_gguf_str pre = {"default", 7};
    if (colo_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == COLO_EFORMAT) {
        colo_set_err(err, errlen, "tokenizer.ggml.pre is not a string");
        return false;
    }
    for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++) {
        if (strlen(pre_names[i].name) == pre.len && !memcmp(pre_names[i].name, pre.ptr, pre.len)) {
            b->pre = pre_names[i].kind;
            b->ignore_merges = pre_names[i].ignore_merges;
            snprintf(b->pre_name, sizeof b->pre_name, "%s", pre_names[i].name);
            return true;
        }
    }
    colo_set_err(err, errlen,
                 "tokenizer.ggml.pre '%.*s' is not supported (colo knows llama-bpe, qwen2, deepseek-r1-qwen, "
                 "smollm, gpt-2 and their aliases; see docs/MODELS.md)",
                 (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
    return false;
}

typedef struct {
    const uint8_t *tokens, *merges;
    uint64_t n_tok, n_merge;
} vocab_arrays;

static bool read_arrays(const colo_gguf *g, vocab_arrays *a, char *err, size_t errlen)
{
    colo_gguf_type tt, mt;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &tt, &a->n_tok, &a->tokens) || tt != COLO_GGUF_STRING ||
        !a->n_tok || a->n_tok > (1u << 24)) {
        colo_set_err(err, errlen, "tokenizer.ggml.tokens is missing or not a string array");
        return false;
    }
    if (colo_gguf_get_arr(g, "tokenizer.ggml.merges", &mt, &a->n_merge, &a->merges) || mt != COLO_GGUF_STRING) {
        colo_set_err(err, errlen, "tokenizer.ggml.merges is missing or not a string array");
        return false;
    }
    return true;
}

static bool alloc_tables(colo_bpe *b, const vocab_arrays *a)
{
    size_t pool = colo_tok_pool_bytes(a->tokens, a->n_tok) + colo_tok_pool_bytes(a->merges, a->n_merge);
    b->pool = malloc(pool ? pool : 1);
    b->tok = malloc(a->n_tok * sizeof *b->tok);
    b->tok_len = malloc(a->n_tok * sizeof *b->tok_len);
    return b->pool && b->tok && b->tok_len && colo_tok_ht_init(&b->vocab, a->n_tok) &&
           colo_tok_ht_init(&b->merges, a->n_merge + 1);
}

/* Copies the tokens into the pool from *w on, and advances *w. A text
 * that appears twice maps to its last id, as in llama.cpp. */
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
        colo_tok_ht_put(&b->vocab, *w, (uint32_t)len, (int32_t)i, true);
        *w += len + 1;
        p += 8 + len;
    }
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
        colo_tok_ht_put(&b->merges, w, (uint32_t)len, (int32_t)i, false);
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
        b->byte_tok[c] = colo_tok_ht_get(&b->vocab, t, (size_t)colo_utf8_encode(b->byte_cp[c], t));
    }
    char fffd[8];
    int fl = colo_utf8_encode(b->byte_cp[0xEF], fffd);
    fl += colo_utf8_encode(b->byte_cp[0xBF], fffd + fl);
    fl += colo_utf8_encode(b->byte_cp[0xBD], fffd + fl);
    b->replacement = colo_tok_ht_get(&b->vocab, fffd, (size_t)fl);
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
    if (!read_pre(b, g, err, errlen) || !read_arrays(g, &a, err, errlen))
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
    free(b->vocab.e);
    free(b->merges.e);
    free(b);
}

int colo_bpe_n_vocab(const colo_bpe *b) { return b->n_vocab; }
bool colo_bpe_default_add_bos(const colo_bpe *b) { return b->ignore_merges; }
const char *colo_bpe_pre_name(const colo_bpe *b) { return b->pre_name; }
int colo_bpe_find(const colo_bpe *b, const char *s, size_t len) { return colo_tok_ht_get(&b->vocab, s, len); }

const char *colo_bpe_token_text(const colo_bpe *b, int id, size_t *len)
{
    if (id < 0 || id >= b->n_vocab)
        return NULL;
    if (len)
        *len = b->tok_len[id];
    return b->tok[id];
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

COLO_HEAP_DEFINE(heap, cand, cand_less)

/* Rank of merging symbols l and r, or -1. */
static int32_t merge_rank(const colo_bpe *b, const char *enc, const sym *l, const sym *r, char *key)
{
    memcpy(key, enc + l->estart, (size_t)l->elen);
    key[l->elen] = ' ';
    memcpy(key + l->elen + 1, enc + r->estart, (size_t)r->elen);
    return colo_tok_ht_get(&b->merges, key, (size_t)(l->elen + 1 + r->elen));
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
                       colo_tok_ids *out)
{
    for (int i = s->start; i < s->start + s->len; i++) {
        int32_t id = b->byte_tok[piece[i]];
        if (id < 0 && invalid[i])
            id = b->replacement;
        if (id >= 0)
            colo_tok_push(out, id);
    }
}

static void bpe_piece(const colo_bpe *b, const unsigned char *piece, size_t n, colo_tok_ids *out)
{
    if (n == 0)
        return;
    if (n == 1 && b->byte_tok[piece[0]] >= 0) { /* common: punctuation, digits, spaces */
        colo_tok_push(out, b->byte_tok[piece[0]]);
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
        int32_t id = colo_tok_ht_get(&b->vocab, enc + s[i].estart, (size_t)s[i].elen);
        if (id >= 0)
            colo_tok_push(out, id);
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


/* ---- pre-tokenizers ------------------------------------------------------------------- */

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


static bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

static int ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? (int)(c + 32) : (int)c; }

/* Length of the match at i of the Llama 3 pattern (digits: at most
 * max_digits in a piece: 3 for llama-bpe, 1 for qwen2). */
static size_t llama3_match(span t, size_t i, int max_digits)
{
    int l, l2;
    uint32_t c = cp_at(t, i, &l);
    if (c == '\'' && i + 1 < t.n) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        int c1 = ascii_lower(t.s[i + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return 2;
        if (i + 2 < t.n) {
            int c2 = ascii_lower(t.s[i + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return 3;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = i;
    if (!colo_is_letter(c) && !is_crlf(c) && !colo_is_number(c) && i + (size_t)l < t.n &&
        colo_is_letter(cp_at(t, i + (size_t)l, &l2)))
        j = i + (size_t)l;
    if (colo_is_letter(cp_at(t, j, &l2))) {
        size_t k = j;
        while (k < t.n && colo_is_letter(cp_at(t, k, &l2)))
            k += (size_t)l2;
        return k - i;
    }
    if (colo_is_number(c)) { /* \p{N}{1,max_digits} */
        size_t k = i;
        for (int d = 0; d < max_digits && k < t.n && colo_is_number(cp_at(t, k, &l2)); d++)
            k += (size_t)l2;
        return k - i;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    j = i;
    if (c == ' ' && i + 1 < t.n && is_other(cp_at(t, i + 1, &l2)))
        j = i + 1;
    if (is_other(cp_at(t, j, &l2))) {
        size_t k = j;
        while (k < t.n && is_other(cp_at(t, k, &l2)))
            k += (size_t)l2;
        while (k < t.n && is_crlf(t.s[k]))
            k++;
        return k - i;
    }
    /* \s*[\r\n]+ | \s+(?!\S) | \s+ */
    size_t k = i, last = i, after_nl = 0;
    while (k < t.n) {
        uint32_t c2 = cp_at(t, k, &l2);
        if (!colo_is_space(c2))
            break;
        last = k;
        k += (size_t)l2;
        if (is_crlf(c2))
            after_nl = k;
    }
    if (after_nl)
        return after_nl - i;
    if (k == i)
        return (size_t)l; /* cannot happen: every code point is in one class */
    if (k == t.n || last == i)
        return k - i;
    return last - i; /* leave the last space for the next piece */
}

static void piece_out(const colo_bpe *b, const unsigned char *s, size_t n, colo_tok_ids *out)
{
    if (b->ignore_merges && n > 1) {
        /* the piece's byte-level text, when it is a token, is that token */
        char st[256];
        size_t cap = n * 2;
        char *enc = cap <= sizeof st ? st : malloc(cap);
        if (!enc) {
            out->oom = true;
            return;
        }
        size_t e = 0;
        for (size_t i = 0; i < n; i++)
            e += (size_t)colo_utf8_encode(b->byte_cp[s[i]], enc + e);
        int32_t id = colo_tok_ht_get(&b->vocab, enc, e);
        if (enc != st)
            free(enc);
        if (id >= 0) {
            colo_tok_push(out, id);
            return;
        }
    }
    bpe_piece(b, s, n, out);
}

/* Cuts the text between digits with the GPT-2 pattern. */
static void gpt2_span(const colo_bpe *b, span t, colo_tok_ids *out)
{
    for (size_t k = 0; k < t.n;) {
        size_t m = gpt2_match(t, k);
        piece_out(b, t.s + k, m, out);
        k += m;
    }
}

void colo_bpe_encode_text(const colo_bpe *b, const char *text, size_t n, colo_tok_ids *out)
{
    const unsigned char *s = (const unsigned char *)text;
    if (b->pre == PRE_LLAMA3 || b->pre == PRE_QWEN2) {
        span t = {s, n};
        int digits = b->pre == PRE_LLAMA3 ? 3 : 1;
        for (size_t k = 0; k < n && !out->oom;) {
            size_t m = llama3_match(t, k, digits);
            piece_out(b, s + k, m, out);
            k += m;
        }
        return;
    }
    size_t i = 0;
    while (i < n && !out->oom) {
        /* smollm: every digit is its own piece; the GPT-2 pattern runs on the text between. */
        size_t j = b->pre == PRE_SMOLLM ? i : n;
        int l = 1;
        while (j < n) {
            uint32_t cp;
            l = colo_utf8_decode(s + j, n - j, &cp);
            if (colo_is_number(cp))
                break;
            j += (size_t)l;
        }
        gpt2_span(b, (span){s + i, j - i}, out);
        if (j < n) {
            piece_out(b, s + j, (size_t)l, out);
            j += (size_t)l;
        }
        i = j;
    }
}

colo_status colo_bpe_decode(const colo_bpe *b, int id, char *buf, size_t cap, size_t *len)
{
    if (id < 0 || id >= b->n_vocab)
        return COLO_EINVAL;
    const char *t = b->tok[id];
    size_t tl = b->tok_len[id];
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
