/* BERT WordPiece: normalizer, pre-tokenizer and greedy WordPiece, one pass
 * over the text with no intermediate strings. */
#include "models/tokenizer/wordpiece.h"
#include "models/tokenizer/unicode.h"
#include "runtime/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* models/tokenizer/unicode_nfd_table.c */
extern const colo_cp_range colo_bert_removed[], colo_bert_space[], colo_bert_punct[], colo_bert_cjk[];
extern const int colo_bert_removed_n, colo_bert_space_n, colo_bert_punct_n, colo_bert_cjk_n;
extern const uint32_t colo_bert_strip_map[][3], colo_bert_lower_map[][3];
extern const int colo_bert_strip_map_n, colo_bert_lower_map_n;
extern const uint32_t colo_bert_strip_pool[], colo_bert_lower_pool[];

#define N_SPECIAL 5
static const char *const special_names[N_SPECIAL] = {"[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]"};

struct colo_wordpiece {
    colo_wordpiece_config cfg;
    int n;
    char **tok;       /* (n) into blob */
    char *blob;
    int32_t *slots;   /* open-addressing hash of ids, -1 = empty */
    uint32_t mask;
    int cls, sep, unk, pad;
    int special_id[N_SPECIAL]; /* -1 when absent */
};

/* The replacement of cp in a {cp, pool offset, length} map, or NULL. */
static const uint32_t *map_find(const uint32_t (*map)[3], int n, const uint32_t *pool, uint32_t cp, int *len)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (cp < map[mid][0])
            hi = mid - 1;
        else if (cp > map[mid][0])
            lo = mid + 1;
        else {
            *len = (int)map[mid][2];
            return pool + map[mid][1];
        }
    }
    return NULL;
}

static uint32_t hash_bytes(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int lookup(const colo_wordpiece *wp, const char *s, size_t len)
{
    for (uint32_t i = hash_bytes(s, len) & wp->mask;; i = (i + 1) & wp->mask) {
        int32_t id = wp->slots[i];
        if (id < 0)
            return -1;
        const char *t = wp->tok[id];
        /* s may hold NUL bytes: t[len] is read only when t is that long */
        if (strnlen(t, len + 1) == len && memcmp(t, s, len) == 0)
            return id;
    }
}

colo_wordpiece_config colo_wordpiece_default_config(int max_len)
{
    colo_wordpiece_config c = {.lowercase = true, .strip_accents = true, .chinese_chars = true, .clean_text = true,
                               .max_len = max_len, .max_chars_per_word = 100};
    return c;
}

colo_wordpiece *colo_wordpiece_create(const char *const *tokens, int n, const colo_wordpiece_config *cfg, char *err,
                                      size_t errlen)
{
    if (n <= 0 || !cfg || cfg->max_len < 2 || cfg->max_chars_per_word < 1) {
        colo_set_err(err, errlen, "wordpiece: empty vocabulary or invalid configuration");
        return NULL;
    }
    colo_wordpiece *wp = calloc(1, sizeof *wp);
    if (!wp)
        goto out_nomem;
    wp->cfg = *cfg;
    wp->n = n;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += strlen(tokens[i]) + 1;
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u)
        cap *= 2;
    wp->mask = cap - 1;
    wp->tok = malloc((size_t)n * sizeof *wp->tok);
    wp->blob = malloc(total);
    wp->slots = malloc((size_t)cap * sizeof *wp->slots);
    if (!wp->tok || !wp->blob || !wp->slots)
        goto out_nomem;
    memset(wp->slots, 0xFF, (size_t)cap * sizeof *wp->slots);
    char *p = wp->blob;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(tokens[i]);
        memcpy(p, tokens[i], l + 1);
        wp->tok[i] = p;
        p += l + 1;
        uint32_t h = hash_bytes(wp->tok[i], l) & wp->mask;
        while (wp->slots[h] >= 0 && strcmp(wp->tok[wp->slots[h]], wp->tok[i]))
            h = (h + 1) & wp->mask;
        wp->slots[h] = i; /* a duplicate replaces the earlier id */
    }
    for (int k = 0; k < N_SPECIAL; k++)
        wp->special_id[k] = lookup(wp, special_names[k], strlen(special_names[k]));
    wp->cls = wp->special_id[0];
    wp->sep = wp->special_id[1];
    wp->unk = wp->special_id[2];
    wp->pad = wp->special_id[3] >= 0 ? wp->special_id[3] : 0;
    if (wp->cls < 0 || wp->sep < 0 || wp->unk < 0) {
        colo_set_err(err, errlen, "wordpiece: the vocabulary lacks [CLS], [SEP] or [UNK]");
        colo_wordpiece_free(wp);
        return NULL;
    }
    return wp;

out_nomem:
    colo_set_err(err, errlen, "wordpiece: out of memory");
    colo_wordpiece_free(wp);
    return NULL;
}

colo_wordpiece *colo_wordpiece_load(const char *vocab_path, const colo_wordpiece_config *cfg, char *err,
                                    size_t errlen)
{
    colo_wordpiece *wp = NULL;
    char *buf = NULL, **lines = NULL;
    FILE *f = colo_file_fopen_regular(vocab_path, err, errlen);
    if (!f)
        return NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || size > (64l << 20) || fseek(f, 0, SEEK_SET) != 0) {
        colo_set_err(err, errlen, "%s: cannot read or larger than 64 MiB", vocab_path);
        goto out_file;
    }
    if (!(buf = malloc((size_t)size + 1)) || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        colo_set_err(err, errlen, "%s: %s", vocab_path, buf ? "read failed" : "out of memory");
        goto out_buf;
    }
    buf[size] = '\0';
    int n = 0;
    for (long i = 0; i < size; i++)
        n += buf[i] == '\n';
    if (size > 0 && buf[size - 1] != '\n')
        n++;
    if (!(lines = malloc((size_t)(n ? n : 1) * sizeof *lines))) {
        colo_set_err(err, errlen, "%s: out of memory", vocab_path);
        goto out_buf;
    }
    int k = 0;
    for (char *p = buf; k < n; k++) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r')
            p[l - 1] = '\0';
        lines[k] = p;
        p = nl ? nl + 1 : p + l;
    }
    char msg[256];
    if (!(wp = colo_wordpiece_create((const char *const *)lines, n, cfg, msg, sizeof msg)))
        colo_set_err(err, errlen, "%s: %s", vocab_path, msg);
    free(lines);
out_buf:
    free(buf);
out_file:
    fclose(f);
    return wp;
}

void colo_wordpiece_free(colo_wordpiece *wp)
{
    if (!wp)
        return;
    free(wp->tok);
    free(wp->blob);
    free(wp->slots);
    free(wp);
}

int colo_wordpiece_n_vocab(const colo_wordpiece *wp) { return wp->n; }
int colo_wordpiece_max_len(const colo_wordpiece *wp) { return wp->cfg.max_len; }
int colo_wordpiece_find(const colo_wordpiece *wp, const char *s) { return lookup(wp, s, strlen(s)); }
const char *colo_wordpiece_token(const colo_wordpiece *wp, int id) { return id >= 0 && id < wp->n ? wp->tok[id] : NULL; }
int colo_wordpiece_cls(const colo_wordpiece *wp) { return wp->cls; }
int colo_wordpiece_sep(const colo_wordpiece *wp) { return wp->sep; }
int colo_wordpiece_unk(const colo_wordpiece *wp) { return wp->unk; }
int colo_wordpiece_pad(const colo_wordpiece *wp) { return wp->pad; }

/* ---- encoding ------------------------------------------------------------------ */

typedef struct {
    const colo_wordpiece *wp;
    int32_t *ids;     /* the caller's, ids[0] is [CLS] */
    int limit;        /* word tokens that fit */
    int stored, total;
    char *word;       /* the current word, UTF-8, and the "##" piece after it */
    size_t wlen, wcap;
    uint32_t *off;    /* (nch + 1) byte offsets of the word's characters */
    int32_t *pieces;  /* (nch) */
    int nch, ccap;
    colo_status st;
} enc;

static void emit(enc *e, int32_t id)
{
    if (e->stored < e->limit)
        e->ids[1 + e->stored++] = id;
    e->total++;
}

static void word_push(enc *e, uint32_t cp)
{
    if (e->st != COLO_OK)
        return;
    if (e->wlen + 4 > e->wcap || e->nch + 2 > e->ccap) {
        size_t wcap = e->wcap ? e->wcap * 2 : 256;
        int ccap = e->ccap ? e->ccap * 2 : 64;
        char *w = realloc(e->word, wcap * 2 + 2); /* the word, then room for "##" + any piece of it */
        if (w)
            e->word = w;
        uint32_t *o = realloc(e->off, (size_t)ccap * sizeof *o);
        if (o)
            e->off = o;
        int32_t *pc = realloc(e->pieces, (size_t)ccap * sizeof *pc);
        if (pc)
            e->pieces = pc;
        if (!w || !o || !pc) {
            e->st = COLO_ENOMEM;
            return;
        }
        e->wcap = wcap;
        e->ccap = ccap;
    }
    e->off[e->nch++] = (uint32_t)e->wlen;
    e->wlen += (size_t)colo_utf8_encode(cp, e->word + e->wlen);
    e->off[e->nch] = (uint32_t)e->wlen;
}

/* Greedy longest-match-first WordPiece of the current word. */
static void word_flush(enc *e)
{
    const colo_wordpiece *wp = e->wp;
    int nch = e->nch;
    e->nch = 0;
    e->wlen = 0;
    if (!nch || e->st != COLO_OK)
        return;
    if (nch > wp->cfg.max_chars_per_word) {
        emit(e, wp->unk);
        return;
    }
    char *piece = e->word + e->off[nch];
    int np = 0;
    for (int start = 0; start < nch;) {
        int id = -1, end = nch;
        for (; end > start; end--) {
            size_t b0 = e->off[start], len = e->off[end] - b0;
            if (start == 0) {
                id = lookup(wp, e->word, len);
            } else {
                piece[0] = piece[1] = '#';
                memcpy(piece + 2, e->word + b0, len);
                id = lookup(wp, piece, len + 2);
            }
            if (id >= 0)
                break;
        }
        if (id < 0) {
            emit(e, wp->unk);
            return;
        }
        e->pieces[np++] = id;
        start = end;
    }
    for (int i = 0; i < np; i++)
        emit(e, e->pieces[i]);
}

static bool is_ws(uint32_t cp)
{
    return cp == ' ' || (cp >= 9 && cp <= 13) || cp == 0x85 || colo_cp_in_ranges(colo_bert_space, colo_bert_space_n, cp);
}

/* Pre-tokenizer: whitespace ends a word, punctuation is a word of its own. */
static void pretok(enc *e, uint32_t cp)
{
    if (is_ws(cp)) {
        word_flush(e);
    } else if (colo_cp_in_ranges(colo_bert_punct, colo_bert_punct_n, cp)) {
        word_flush(e);
        word_push(e, cp);
        word_flush(e);
    } else {
        word_push(e, cp);
    }
}

static void stage_lower(enc *e, uint32_t cp)
{
    int n;
    const uint32_t *rep;
    if (e->wp->cfg.lowercase && (rep = map_find(colo_bert_lower_map, colo_bert_lower_map_n, colo_bert_lower_pool, cp, &n))) {
        for (int i = 0; i < n; i++)
            pretok(e, rep[i]);
    } else {
        pretok(e, cp);
    }
}

static void stage_strip(enc *e, uint32_t cp)
{
    int n;
    const uint32_t *rep;
    if (!e->wp->cfg.strip_accents) {
        stage_lower(e, cp);
    } else if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable: L V [T] jamo */
        uint32_t s = cp - 0xAC00;
        stage_lower(e, 0x1100 + s / 588);
        stage_lower(e, 0x1161 + s % 588 / 28);
        if (s % 28)
            stage_lower(e, 0x11A7 + s % 28);
    } else if ((rep = map_find(colo_bert_strip_map, colo_bert_strip_map_n, colo_bert_strip_pool, cp, &n))) {
        for (int i = 0; i < n; i++)
            stage_lower(e, rep[i]);
    } else {
        stage_lower(e, cp);
    }
}

static void normalize_cp(enc *e, uint32_t cp)
{
    const colo_wordpiece_config *c = &e->wp->cfg;
    if (cp == UINT32_MAX) /* invalid UTF-8: U+FFFD, which clean text removes */
        return;
    if (c->clean_text) {
        if (cp == 0 || cp == 0xFFFD || colo_cp_in_ranges(colo_bert_removed, colo_bert_removed_n, cp))
            return;
        if (is_ws(cp))
            cp = ' ';
    }
    if (c->chinese_chars && colo_cp_in_ranges(colo_bert_cjk, colo_bert_cjk_n, cp)) {
        word_flush(e);
        stage_strip(e, cp);
        word_flush(e);
    } else {
        stage_strip(e, cp);
    }
}

/* Id of the special token written at text[0, left), or -1; *len its length. */
static int match_special(const colo_wordpiece *wp, const char *text, size_t left, size_t *len)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        size_t l = strlen(special_names[k]);
        if (wp->special_id[k] >= 0 && l <= left && memcmp(text, special_names[k], l) == 0) {
            *len = l;
            return wp->special_id[k];
        }
    }
    return -1;
}

colo_status colo_wordpiece_encode(const colo_wordpiece *wp, const char *text, size_t len, bool allow_special,
                                  int32_t *ids, int cap, int *n, int *n_full)
{
    if (cap < 2 || (!text && len))
        return COLO_EINVAL;
    int max = cap < wp->cfg.max_len ? cap : wp->cfg.max_len;
    enc e = {.wp = wp, .ids = ids, .limit = max - 2, .st = COLO_OK};
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len && e.st == COLO_OK;) {
        size_t sl;
        int id;
        if (allow_special && s[i] == '[' && (id = match_special(wp, text + i, len - i, &sl)) >= 0) {
            word_flush(&e);
            emit(&e, id);
            i += sl;
            continue;
        }
        uint32_t cp;
        i += (size_t)colo_utf8_decode(s + i, len - i, &cp);
        normalize_cp(&e, cp);
    }
    word_flush(&e);
    free(e.word);
    free(e.off);
    free(e.pieces);
    if (e.st != COLO_OK)
        return e.st;
    ids[0] = wp->cls;
    ids[1 + e.stored] = wp->sep;
    *n = e.stored + 2;
    if (n_full)
        *n_full = e.total + 2;
    return COLO_OK;
}
