/* The tokenizer facade: special tokens, BOS/EOS and token types over the
 * BPE and SentencePiece backends. */
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/spm.h"
#include "models/tokenizer/tokenizer_impl.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_BPE, KIND_SPM };

/* Token attributes (llama.cpp's, for what colo uses). */
enum { A_CONTROL = 1, A_USER = 2, A_UNKNOWN = 4, A_BYTE = 8, A_RSTRIP = 16, A_LSTRIP = 32 };

struct colo_tokenizer {
    /* shared by every holder made from one unchanged file (under share_mu) */
    colo_gguf_id file;
    int refs;
    struct colo_tokenizer *next_shared;
    int kind;
    colo_bpe *bpe; /* KIND_BPE */
    colo_spm *spm; /* KIND_SPM */
    int n_vocab;
    uint8_t *attr;   /* (n_vocab) A_* */
    colo_tok_htab special; /* text of a special token -> id */
    int *special_lens;     /* distinct lengths of special texts, longest first */
    int n_special_lens;
    uint8_t first_byte[256]; /* a special text starts with this byte */
    int bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix;
    int32_t eog[COLO_TOKENIZER_MAX_EOG];
    int n_eog;
    char *chat_template;
};

static const char *tok_text(const colo_tokenizer *t, int id, size_t *len)
{
    return t->kind == KIND_BPE ? colo_bpe_token_text(t->bpe, id, len) : colo_spm_token_text(t->spm, id, len);
}

static int find_len(const colo_tokenizer *t, const char *s, size_t len)
{
    return t->kind == KIND_BPE ? colo_bpe_find(t->bpe, s, len) : colo_spm_find(t->spm, s, len);
}

static bool read_model(colo_tokenizer *t, const colo_gguf *g, char *err, size_t errlen)
{
    colo_gguf_str model;
    if (colo_gguf_get_str(g, "tokenizer.ggml.model", &model) != COLO_OK) {
        colo_set_err(err, errlen, "tokenizer.ggml.model is missing");
        return false;
    }
    if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) {
        t->kind = KIND_BPE;
        t->bpe = colo_bpe_from_gguf(g, err, errlen);
        return t->bpe != NULL;
    }
    if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) {
        t->kind = KIND_SPM;
        t->spm = colo_spm_from_gguf(g, err, errlen);
        return t->spm != NULL;
    }
    colo_set_err(err, errlen,
                 "tokenizer.ggml.model '%.*s' is not supported (gpt2: byte-level BPE, llama: SentencePiece-style BPE)",
                 (int)(model.len < 64 ? model.len : 64), model.ptr);
    return false;
}

static bool read_types(colo_tokenizer *t, const colo_gguf *g, char *err, size_t errlen)
{
    colo_gguf_type ty;
    uint64_t n;
    const uint8_t *p;
    t->attr = calloc((size_t)t->n_vocab, 1);
    if (!t->attr) {
        colo_set_err(err, errlen, "out of memory");
        return false;
    }
    if (colo_gguf_get_arr(g, "tokenizer.ggml.token_type", &ty, &n, &p) != COLO_OK)
        return true;
    if (ty != COLO_GGUF_I32 || n < (uint64_t)t->n_vocab) {
        colo_set_err(err, errlen, "tokenizer.ggml.token_type does not match the tokens");
        return false;
    }
    for (int i = 0; i < t->n_vocab; i++) {
        int32_t v;
        memcpy(&v, p + 4 * (size_t)i, 4);
        t->attr[i] = v == 2 ? A_UNKNOWN : v == 3 ? A_CONTROL : v == 4 ? A_USER : v == 6 ? A_BYTE : 0;
    }
    return true;
}

static int read_id(const colo_gguf *g, const char *key, int dflt, int n_vocab)
{
    uint32_t v;
    if (colo_gguf_get_u32(g, key, &v) == COLO_OK)
        return v < (uint32_t)n_vocab ? (int)v : dflt;
    return dflt >= 0 && dflt < n_vocab ? dflt : -1;
}

static void add_eog(colo_tokenizer *t, int id)
{
    if (id < 0 || t->n_eog >= COLO_TOKENIZER_MAX_EOG)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    t->eog[t->n_eog++] = id;
}

/* Tokens that end a turn or the generation whatever their type says, as
 * llama.cpp finds them by name (src/llama-vocab.cpp); they become control
 * tokens, so they are plain text unless special tokens are parsed. */
static const char *const eot_names[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>",   "<|end_of_text|>", "<EOT>", "_<EOT>",
                                        "[EOT]",           "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
static const char *const eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["};

static void read_specials(colo_tokenizer *t, const colo_gguf *g)
{
    bool spm = t->kind == KIND_SPM;
    t->bos = read_id(g, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, t->n_vocab);
    t->eos = read_id(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, t->n_vocab);
    t->unk = read_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, t->n_vocab);
    t->eot = read_id(g, "tokenizer.ggml.eot_token_id", -1, t->n_vocab);
    t->eom = read_id(g, "tokenizer.ggml.eom_token_id", -1, t->n_vocab);
    for (size_t i = 0; i < sizeof eot_names / sizeof eot_names[0] && t->eot < 0; i++)
        t->eot = find_len(t, eot_names[i], strlen(eot_names[i]));
    if (t->eom < 0)
        t->eom = find_len(t, "<|eom_id|>", 10);
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        int id = find_len(t, eog_names[i], strlen(eog_names[i]));
        add_eog(t, id);
        if (id >= 0)
            t->attr[id] |= A_CONTROL;
    }
    if (t->eot >= 0)
        t->attr[t->eot] |= A_CONTROL;
}

/* BOS/EOS and the leading space: llama.cpp's defaults, then the file's keys. */
static void read_flags(colo_tokenizer *t, const colo_gguf *g)
{
    bool spm = t->kind == KIND_SPM;
    t->add_bos = spm || colo_bpe_default_add_bos(t->bpe);
    t->add_bos = t->add_bos && t->bos >= 0; /* a default only; the key below must name a BOS */
    t->add_eos = false;
    t->add_space_prefix = spm;
    bool v;
    if (colo_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v) == COLO_OK)
        t->add_bos = v;
    if (colo_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &v) == COLO_OK)
        t->add_eos = v;
    if (spm && colo_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &v) == COLO_OK)
        t->add_space_prefix = v;
}

/* Phi-3's special tokens eat the white space after them (llama.cpp sets
 * this by the model's name, general.name). */
static void read_strip(colo_tokenizer *t, const colo_gguf *g)
{
    colo_gguf_str name;
    if (colo_gguf_get_str(g, "general.name", &name) != COLO_OK)
        return;
    char low[128];
    size_t n = name.len < sizeof low - 1 ? name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (A_CONTROL | A_USER | A_UNKNOWN))
            t->attr[i] |= A_RSTRIP;
    int id;
    if ((id = find_len(t, "</s>", 4)) >= 0)
        t->attr[id] |= A_RSTRIP;
    const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < 3; i++)
        if ((id = find_len(t, keep[i], strlen(keep[i]))) >= 0)
            t->attr[id] &= (uint8_t)~A_RSTRIP;
}

static int cmp_int_desc(const void *a, const void *b) { return *(const int *)b - *(const int *)a; }

static bool index_specials(colo_tokenizer *t)
{
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        n += (t->attr[i] & (A_CONTROL | A_USER | A_UNKNOWN)) != 0;
    if (!colo_tok_ht_init(&t->special, (size_t)n + 1) || !(t->special_lens = malloc(((size_t)n + 1) * sizeof(int))))
        return false;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t len;
        const char *s = tok_text(t, i, &len);
        if (!(t->attr[i] & (A_CONTROL | A_USER | A_UNKNOWN)) || len == 0)
            continue;
        colo_tok_ht_put(&t->special, s, (uint32_t)len, i, false);
        t->first_byte[(unsigned char)s[0]] = 1;
        int k = 0;
        while (k < t->n_special_lens && t->special_lens[k] != (int)len)
            k++;
        if (k == t->n_special_lens)
            t->special_lens[t->n_special_lens++] = (int)len;
    }
    qsort(t->special_lens, (size_t)t->n_special_lens, sizeof(int), cmp_int_desc);
    return true;
}

static bool read_template(colo_tokenizer *t, const colo_gguf *g)
{
    colo_gguf_str s;
    if (colo_gguf_get_str(g, "tokenizer.chat_template", &s) != COLO_OK)
        return true;
    t->chat_template = malloc(s.len + 1);
    if (!t->chat_template)
        return false;
    memcpy(t->chat_template, s.ptr, s.len);
    t->chat_template[s.len] = 0;
    return true;
}

/* Tokenizers are read-only once made, and making one is much of a
 * model's wake (a vocabulary of 262,144 tokens takes tens of ms): holders
 * of one unchanged file share one, counted. */
static pthread_mutex_t share_mu = PTHREAD_MUTEX_INITIALIZER;
static colo_tokenizer *shared;

static bool same_file(colo_gguf_id a, colo_gguf_id b)
{
    return a.ino && a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
}

static colo_tokenizer *share_find(colo_gguf_id id)
{
    for (colo_tokenizer *t = shared; t; t = t->next_shared)
        if (same_file(t->file, id)) {
            t->refs++;
            return t;
        }
    return NULL;
}

static colo_tokenizer *make(const colo_gguf *g, char *err, size_t errlen);

colo_tokenizer *colo_tokenizer_from_gguf(const colo_gguf *g, char *err, size_t errlen)
{
    colo_gguf_id id = colo_gguf_identity(g);
    pthread_mutex_lock(&share_mu);
    colo_tokenizer *t = share_find(id);
    pthread_mutex_unlock(&share_mu);
    if (t)
        return t;
    colo_tokenizer *made = make(g, err, errlen); /* outside the lock: it takes a while */
    if (!made || !id.ino)
        return made;
    pthread_mutex_lock(&share_mu);
    if (!(t = share_find(id))) { /* (another thread may have made one meanwhile) */
        t = made, made = NULL;
        t->file = id;
        t->next_shared = shared;
        shared = t;
    }
    pthread_mutex_unlock(&share_mu);
    colo_tokenizer_free(made);
    return t;
}

static colo_tokenizer *make(const colo_gguf *g, char *err, size_t errlen)
{
    colo_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    t->refs = 1;
    if (!read_model(t, g, err, errlen))
        goto out_free;
    t->n_vocab = t->kind == KIND_BPE ? colo_bpe_n_vocab(t->bpe) : colo_spm_n_vocab(t->spm);
    if (!read_types(t, g, err, errlen))
        goto out_free;
    read_specials(t, g);
    read_flags(t, g);
    read_strip(t, g);
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0)) {
        colo_set_err(err, errlen, "the tokenizer adds a %s token but the file names none",
                     t->add_bos && t->bos < 0 ? "BOS" : "EOS");
        goto out_free;
    }
    if (!index_specials(t) || !read_template(t, g)) {
        colo_set_err(err, errlen, "out of memory");
        goto out_free;
    }
    return t;

out_free:
    colo_tokenizer_free(t);
    return NULL;
}

void colo_tokenizer_free(colo_tokenizer *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&share_mu);
    bool last = --t->refs == 0;
    if (last)
        for (colo_tokenizer **p = &shared; *p; p = &(*p)->next_shared)
            if (*p == t) {
                *p = t->next_shared;
                break;
            }
    pthread_mutex_unlock(&share_mu);
    if (!last)
        return;
    colo_bpe_free(t->bpe);
    colo_spm_free(t->spm);
    free(t->attr);
    free(t->special.e);
    free(t->special_lens);
    free(t->chat_template);
    free(t);
}

const char *colo_tokenizer_model(const colo_tokenizer *t) { return t->kind == KIND_BPE ? "gpt2" : "llama"; }
const char *colo_tokenizer_pre(const colo_tokenizer *t)
{
    return t->kind == KIND_BPE ? colo_bpe_pre_name(t->bpe) : "default";
}
int colo_tokenizer_n_vocab(const colo_tokenizer *t) { return t->n_vocab; }
int colo_tokenizer_bos(const colo_tokenizer *t) { return t->bos; }
int colo_tokenizer_eos(const colo_tokenizer *t) { return t->eos; }
int colo_tokenizer_eot(const colo_tokenizer *t) { return t->eot; }
int colo_tokenizer_unk(const colo_tokenizer *t) { return t->unk; }
bool colo_tokenizer_add_bos(const colo_tokenizer *t) { return t->add_bos; }
bool colo_tokenizer_add_eos(const colo_tokenizer *t) { return t->add_eos; }
bool colo_tokenizer_add_space_prefix(const colo_tokenizer *t) { return t->add_space_prefix; }
const char *colo_tokenizer_chat_template(const colo_tokenizer *t) { return t->chat_template; }

const int32_t *colo_tokenizer_eog(const colo_tokenizer *t, int *n)
{
    *n = t->n_eog;
    return t->eog;
}

bool colo_tokenizer_is_eog(const colo_tokenizer *t, int id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

int colo_tokenizer_find(const colo_tokenizer *t, const char *s) { return find_len(t, s, strlen(s)); }

bool colo_tokenizer_is_special(const colo_tokenizer *t, int id)
{
    return id >= 0 && id < t->n_vocab && (t->attr[id] & (A_CONTROL | A_USER | A_UNKNOWN));
}

const char *colo_tokenizer_token_text(const colo_tokenizer *t, int id) { return tok_text(t, id, NULL); }

/* ---- encoding ---------------------------------------------------------------------------- */

typedef struct {
    int pos, id;
} match;

static int cmp_match(const void *a, const void *b)
{
    const match *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Accepts the matches of one length, each where its bytes are still free. */
static void take(const colo_tokenizer *t, const unsigned char *s, size_t n, size_t L, const match *m, size_t nm,
                 int32_t *tok_at, uint8_t *taken)
{
    for (size_t k = 0; k < nm; k++) {
        size_t p = (size_t)m[k].pos;
        if (memchr(taken + p, 1, L))
            continue;
        memset(taken + p, 1, L);
        tok_at[p] = m[k].id;
        if (t->attr[m[k].id] & A_RSTRIP)
            for (size_t j = p + L; j < n && !taken[j] && isspace(s[j]); j++)
                taken[j] = 1;
        if (t->attr[m[k].id] & A_LSTRIP)
            for (size_t j = p; j > 0 && !taken[j - 1] && isspace(s[j - 1]); j--)
                taken[j - 1] = 1;
    }
}

/* Where special tokens stand in s: tok_at[i] is the token that starts at i
 * or -1, taken[i] marks bytes of a token or white space it strips. As in
 * llama.cpp, longer tokens are matched first, each at its leftmost free
 * places. Memory: one match per byte of s, per length. */
/* Whether any of plain[i, i + L) is set. */
static bool overlaps_plain(const uint8_t *plain, size_t i, size_t L)
{
    for (size_t j = 0; plain && j < L; j++)
        if (plain[i + j])
            return true;
    return false;
}

static bool find_specials(const colo_tokenizer *t, const unsigned char *s, size_t n, bool parse_special,
                          const uint8_t *plain, int32_t *tok_at, uint8_t *taken)
{
    for (size_t i = 0; i < n; i++) {
        tok_at[i] = -1;
        taken[i] = 0;
    }
    match *m = NULL;
    for (int k = 0; k < t->n_special_lens; k++) {
        size_t L = (size_t)t->special_lens[k], nm = 0;
        if (L > n)
            continue;
        for (size_t i = 0; i + L <= n; i++) {
            if (!t->first_byte[s[i]] || taken[i])
                continue;
            int32_t id = colo_tok_ht_get(&t->special, (const char *)s + i, L);
            if (id < 0 || ((!parse_special || overlaps_plain(plain, i, L)) && (t->attr[id] & (A_CONTROL | A_UNKNOWN))))
                continue;
            if (!m && !(m = malloc(n * sizeof *m)))
                return false;
            m[nm++] = (match){(int)i, id};
        }
        if (nm > 1)
            qsort(m, nm, sizeof *m, cmp_match);
        take(t, s, n, L, m, nm, tok_at, taken);
    }
    free(m);
    return true;
}

static void encode_text(const colo_tokenizer *t, const char *s, size_t n, bool prev_special, colo_tok_ids *out)
{
    if (t->kind == KIND_BPE)
        colo_bpe_encode_text(t->bpe, s, n, out);
    else
        colo_spm_encode_text(t->spm, s, n, t->add_space_prefix && prev_special, out);
}

static colo_status encode(const colo_tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, const uint8_t *plain, int32_t **out, int *n)
{
    colo_tok_ids o = {0};
    const unsigned char *s = (const unsigned char *)text;
    int32_t *tok_at = len ? malloc(len * sizeof *tok_at) : NULL;
    uint8_t *taken = len ? malloc(len) : NULL;
    if (len && (!tok_at || !taken || !find_specials(t, s, len, parse_special, plain, tok_at, taken)))
        goto out_oom;
    if (add_special && t->add_bos && !(len && tok_at[0] == t->bos))
        colo_tok_push(&o, t->bos);
    bool prev_special = true; /* SentencePiece: a space before the text that starts the prompt */
    size_t start = 0;
    for (size_t i = 0; i <= len && !o.oom; i++) {
        if (i < len && !taken[i])
            continue;
        if (i > start) {
            encode_text(t, text + start, i - start, prev_special, &o);
            prev_special = false;
        }
        if (i < len && tok_at[i] >= 0) {
            colo_tok_push(&o, tok_at[i]);
            prev_special = true;
        }
        start = i + 1;
    }
    if (add_special && t->add_eos)
        colo_tok_push(&o, t->eos);
    if (o.oom)
        goto out_oom;
    free(tok_at);
    free(taken);
    if (!o.ids)
        o.ids = malloc(sizeof *o.ids); /* a valid pointer even for no tokens */
    *out = o.ids;
    *n = o.n;
    return o.ids ? COLO_OK : COLO_ENOMEM;

out_oom:
    free(tok_at);
    free(taken);
    free(o.ids);
    return COLO_ENOMEM;
}

colo_status colo_tokenizer_encode(const colo_tokenizer *t, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t **out, int *n)
{
    return encode(t, text, len, add_special, parse_special, NULL, out, n);
}

colo_status colo_tokenizer_encode_marked(const colo_tokenizer *t, const char *text, size_t len, bool add_special,
                                         const uint8_t *plain, int32_t **out, int *n)
{
    return encode(t, text, len, add_special, true, plain, out, n);
}

colo_status colo_tokenizer_decode(const colo_tokenizer *t, int id, char *buf, size_t cap, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return COLO_EINVAL;
    if (t->attr[id] & (A_CONTROL | A_USER | A_UNKNOWN)) {
        size_t tl;
        const char *s = tok_text(t, id, &tl);
        if (tl > cap)
            return COLO_ENOMEM;
        memcpy(buf, s, tl);
        *len = tl;
        return COLO_OK;
    }
    return t->kind == KIND_BPE ? colo_bpe_decode(t->bpe, id, buf, cap, len) : colo_spm_decode(t->spm, id, buf, cap, len);
}
