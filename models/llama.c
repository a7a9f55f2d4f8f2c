/* The llama architecture. SmolLM2-135M-Instruct (Q4_1 GGUF): 30 layers,
 * E 576, 9 heads, 3 KV heads, F 1536, V 49152, rope base 100000 over 64
 * dims, rms eps 1e-5, context 8192; matrices Q4_1, norms F32, the tied
 * token embedding Q8_0 (no output.weight); tokenizer gpt2/smollm,
 * add_bos_token false. Everything is read from the file. */
#include "models/alloc_set.h"
#include "models/llama.h"
#include "models/kv_cache.h"
#include "models/progress.h"
#include "runtime/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *attn_norm; /* (E) f32 */
    const void *wq;        /* (E, E) rows of E */
    const void *wk;        /* (KV, E), KV = n_kv_head * head_dim */
    const void *wv;        /* (KV, E) */
    const void *wo;        /* (E, E) */
    const void *ffn_norm;  /* (E) f32 */
    const void *w_gate;    /* (F, E) */
    const void *w_up;      /* (F, E) */
    const void *w_down;    /* (E, F) */
    colo_dtype tq, tk, tv, to, tg, tu, td;
} layer;

struct colo_llama {
    colo_llama_hparams hp;
    colo_arena *arena;
    colo_bpe *bpe;
    const void *tok_embd; /* (V, E) */
    colo_dtype t_embd;
    const void *out_norm; /* (E) f32 */
    const void *output;   /* (V, E): output.weight or the tied token embedding */
    colo_dtype t_out;
    layer *layers;
    size_t weight_bytes;
    colo_alloc_set allocs; /* every arena allocation, freed at the end */
    colo_kv_cache *kv;    /* NULL until colo_llama_kv_init */
    /* activations for up to cap_tokens tokens and cap_logits logits */
    int cap_tokens, cap_logits, cap_meta_seqs, cap_meta_blocks;
    void *act;
    float *x, *h, *q, *k, *v, *att, *g, *u, *lx, *logits;
    int32_t *d_tokens, *d_pos, *d_seq, *d_slot, *d_rows, *d_table;
    int32_t *h_slot;
};

static colo_status track(colo_llama *m, size_t bytes, void **out)
{
    return colo_alloc_set_take(&m->allocs, m->arena, bytes, out);
}

static void untrack(colo_llama *m, void *p) { colo_alloc_set_give(&m->allocs, m->arena, p); }

/* Uploads tensor name, checking its type class and shape (ne0, ne1). */
static colo_status load_tensor(colo_llama *m, const colo_gguf *g, colo_stream *s, const char *name, int64_t ne0,
                               int64_t ne1, bool f32_only, const void **out, colo_dtype *type, char *err,
                               size_t errlen)
{
    const colo_gguf_tensor *t = colo_gguf_find_tensor(g, name);
    if (!t) {
        colo_set_err(err, errlen, "tensor %s is missing", name);
        return COLO_EFORMAT;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        colo_set_err(err, errlen, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                     (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                     (long long)ne0, (long long)ne1);
        return COLO_EFORMAT;
    }
    if ((f32_only && t->type != COLO_F32) || !colo_dtype_is_weight(t->type)) {
        colo_set_err(err, errlen, "tensor %s has type %s, which is not supported there", name,
                     colo_dtype_name(t->type) ? colo_dtype_name(t->type) : "?");
        return COLO_EFORMAT;
    }
    void *d;
    colo_status st = track(m, t->bytes, &d);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "tensor %s: %zu bytes do not fit in the memory arena (%zu of %zu bytes used)", name,
                     t->bytes, colo_arena_used(m->arena), colo_arena_limit(m->arena));
        return st;
    }
    if ((st = colo_memcpy_h2d(s, d, t->data, t->bytes)) != COLO_OK || (st = colo_stream_sync(s)) != COLO_OK) {
        colo_set_err(err, errlen, "tensor %s: copy to the device failed (%s)", name, colo_status_str(st));
        return st;
    }
    colo_gguf_release(g, t); /* the file's pages are not needed twice */
    m->weight_bytes += t->bytes;
    *out = d;
    if (type)
        *type = t->type;
    return COLO_OK;
}

static colo_status hparam(const colo_gguf *g, const char *key, int *out, char *err, size_t errlen)
{
    uint32_t v;
    colo_status st = colo_gguf_get_u32(g, key, &v);
    if (st != COLO_OK || v == 0 || v > (1u << 24)) {
        colo_set_err(err, errlen, "key %s is %s", key, st == COLO_EINVAL ? "missing" : "not a valid count");
        return COLO_EFORMAT;
    }
    *out = (int)v;
    return COLO_OK;
}

/* Every hyperparameter but the vocabulary (the tokenizer's) from g; a
 * message naming the key otherwise. */
static colo_status read_hparams(const colo_gguf *g, colo_llama_hparams *hp, char *msg, size_t msglen)
{
    colo_gguf_str arch;
    if (colo_gguf_get_str(g, "general.architecture", &arch) != COLO_OK || arch.len != 5 ||
        memcmp(arch.ptr, "llama", 5)) {
        snprintf(msg, msglen, "general.architecture is not llama");
        return COLO_EFORMAT;
    }
    if (hparam(g, "llama.block_count", &hp->n_layer, msg, msglen) ||
        hparam(g, "llama.embedding_length", &hp->n_embd, msg, msglen) ||
        hparam(g, "llama.feed_forward_length", &hp->n_ff, msg, msglen) ||
        hparam(g, "llama.attention.head_count", &hp->n_head, msg, msglen) ||
        hparam(g, "llama.context_length", &hp->n_ctx, msg, msglen))
        return COLO_EFORMAT;
    if (colo_gguf_find(g, "llama.attention.head_count_kv")) {
        if (hparam(g, "llama.attention.head_count_kv", &hp->n_kv_head, msg, msglen))
            return COLO_EFORMAT;
    } else {
        hp->n_kv_head = hp->n_head;
    }
    if (hp->n_embd % hp->n_head || hp->n_head % hp->n_kv_head || (hp->n_embd / hp->n_head) % 2) {
        snprintf(msg, msglen, "heads (%d, %d kv) do not divide the embedding (%d)", hp->n_head, hp->n_kv_head,
                 hp->n_embd);
        return COLO_EFORMAT;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = hp->head_dim;
    if (colo_gguf_find(g, "llama.rope.dimension_count") &&
        (hparam(g, "llama.rope.dimension_count", &hp->n_rot, msg, msglen) || hp->n_rot > hp->head_dim ||
         hp->n_rot % 2)) {
        if (!*msg)
            snprintf(msg, msglen, "llama.rope.dimension_count %d is invalid", hp->n_rot);
        return COLO_EFORMAT;
    }
    hp->rope_base = 10000.0f;
    if (colo_gguf_find(g, "llama.rope.freq_base") && colo_gguf_get_f32(g, "llama.rope.freq_base", &hp->rope_base)) {
        snprintf(msg, msglen, "llama.rope.freq_base is not a float");
        return COLO_EFORMAT;
    }
    if (colo_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps) || !(hp->rms_eps > 0)) {
        snprintf(msg, msglen, "llama.attention.layer_norm_rms_epsilon is missing or invalid");
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

colo_llama *colo_llama_load(const char *path, colo_arena *arena, colo_stream *s, char *err, size_t errlen)
{
    char msg[512] = "";
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return NULL;
    colo_llama *m = calloc(1, sizeof *m);
    if (!m) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        goto out_gguf;
    }
    m->arena = arena;
    colo_llama_hparams *hp = &m->hp;
    if (read_hparams(g, hp, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    if (!(m->bpe = colo_bpe_from_gguf(g, msg, sizeof msg)))
        goto out_msg;
    hp->n_vocab = colo_bpe_n_vocab(m->bpe);

    int E = hp->n_embd, KV = hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    if (load_tensor(m, g, s, "token_embd.weight", E, V, false, &m->tok_embd, &m->t_embd, msg, sizeof msg) ||
        load_tensor(m, g, s, "output_norm.weight", E, 1, true, &m->out_norm, NULL, msg, sizeof msg))
        goto out_msg;
    if (colo_gguf_find_tensor(g, "output.weight")) {
        if (load_tensor(m, g, s, "output.weight", E, V, false, &m->output, &m->t_out, msg, sizeof msg))
            goto out_msg;
    } else {
        m->output = m->tok_embd;
        m->t_out = m->t_embd;
    }
    if (!(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers))) {
        snprintf(msg, sizeof msg, "out of memory");
        goto out_msg;
    }
    /* A model of several GiB takes a while to copy: a percentage on a terminal. */
    colo_progress progress;
    char what[300];
    snprintf(what, sizeof what, "loading %s", path);
    colo_progress_begin(&progress, what, colo_gguf_file_size(g) - colo_gguf_data_offset(g), 1ull << 30);
    colo_progress_add(&progress, m->weight_bytes);
    for (int l = 0; l < hp->n_layer; l++) {
        size_t before = m->weight_bytes;
        layer *L = &m->layers[l];
        char n[9][64];
        const char *sfx[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                              "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++)
            snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, sfx[i]);
        if (load_tensor(m, g, s, n[0], E, 1, true, &L->attn_norm, NULL, msg, sizeof msg) ||
            load_tensor(m, g, s, n[1], E, E, false, &L->wq, &L->tq, msg, sizeof msg) ||
            load_tensor(m, g, s, n[2], E, KV, false, &L->wk, &L->tk, msg, sizeof msg) ||
            load_tensor(m, g, s, n[3], E, KV, false, &L->wv, &L->tv, msg, sizeof msg) ||
            load_tensor(m, g, s, n[4], E, E, false, &L->wo, &L->to, msg, sizeof msg) ||
            load_tensor(m, g, s, n[5], E, 1, true, &L->ffn_norm, NULL, msg, sizeof msg) ||
            load_tensor(m, g, s, n[6], E, F, false, &L->w_gate, &L->tg, msg, sizeof msg) ||
            load_tensor(m, g, s, n[7], E, F, false, &L->w_up, &L->tu, msg, sizeof msg) ||
            load_tensor(m, g, s, n[8], F, E, false, &L->w_down, &L->td, msg, sizeof msg)) {
            colo_progress_end(&progress);
            goto out_msg;
        }
        colo_progress_add(&progress, m->weight_bytes - before);
    }
    colo_progress_end(&progress);
    colo_status st = colo_stream_sync(s); /* the mapping is unmapped below */
    if (st != COLO_OK) {
        snprintf(msg, sizeof msg, "copying the weights failed (%s)", colo_status_str(st));
        goto out_msg;
    }
    colo_gguf_close(g);
    return m;

out_msg:
    colo_set_err(err, errlen, "%s: %s", path, msg);
    colo_stream_sync(s);
    colo_llama_free(m);
out_gguf:
    colo_gguf_close(g);
    return NULL;
}

colo_status colo_llama_memory_need(const char *path, colo_dtype kv_type, colo_llama_memory *out, char *err,
                                   size_t errlen)
{
    char msg[512] = "";
    colo_status st = COLO_EFORMAT;
    memset(out, 0, sizeof *out);
    if (kv_type != COLO_F16 && kv_type != COLO_F32) {
        colo_set_err(err, errlen, "KV cache type must be f16 or f32");
        return COLO_EINVAL;
    }
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return COLO_EFORMAT;
    colo_llama_hparams *hp = &out->hp;
    colo_gguf_type tt;
    uint64_t n_tok;
    const uint8_t *tdata;
    if (read_hparams(g, hp, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &tt, &n_tok, &tdata) || tt != COLO_GGUF_STRING || !n_tok ||
        n_tok > INT32_MAX) {
        snprintf(msg, sizeof msg, "tokenizer.ggml.tokens is missing or not a string array");
        goto out_msg;
    }
    hp->n_vocab = (int)n_tok;
    static const char *const per_layer[] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                                            "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
    const char *global[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    for (int i = 0; i < 3; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, global[i]);
        if (!t && i < 2) {
            snprintf(msg, sizeof msg, "tensor %s is missing", global[i]);
            goto out_msg;
        }
        out->weight_bytes += t ? t->bytes : 0;
    }
    for (int l = 0; l < hp->n_layer; l++)
        for (int i = 0; i < 9; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, per_layer[i]);
            const colo_gguf_tensor *t = colo_gguf_find_tensor(g, name);
            if (!t) {
                snprintf(msg, sizeof msg, "tensor %s is missing", name);
                goto out_msg;
            }
            out->weight_bytes += t->bytes;
        }
    out->kv_bytes_per_token = colo_kv_cache_token_bytes(hp->n_layer, hp->n_kv_head * hp->head_dim, kv_type);
    out->act_bytes_per_token = colo_llama_act_bytes(hp, 1, 0, 0) - 16 * 256;
    out->act_bytes_per_logit = colo_llama_act_bytes(hp, 0, 1, 0) - 16 * 256;
    colo_gguf_close(g);
    return COLO_OK;

out_msg:
    colo_set_err(err, errlen, "%s: %s", path, msg);
    colo_gguf_close(g);
    return st;
}

void colo_llama_free(colo_llama *m)
{
    if (!m)
        return;
    colo_kv_cache_destroy(m->kv);
    colo_alloc_set_clear(&m->allocs, m->arena);
    free(m->layers);
    free(m->h_slot);
    colo_bpe_free(m->bpe);
    free(m);
}

const colo_llama_hparams *colo_llama_hparams_get(const colo_llama *m) { return &m->hp; }
const colo_bpe *colo_llama_tokenizer(const colo_llama *m) { return m->bpe; }
colo_arena *colo_llama_arena(const colo_llama *m) { return m->arena; }
size_t colo_llama_weight_bytes(const colo_llama *m) { return m->weight_bytes; }

size_t colo_llama_kv_block_bytes(const colo_llama_hparams *hp, int block_size, colo_dtype kv_type)
{
    return (size_t)block_size * colo_kv_cache_token_bytes(hp->n_layer, hp->n_kv_head * hp->head_dim, kv_type);
}

colo_status colo_llama_kv_init(colo_llama *m, int n_blocks, int block_size, colo_dtype kv_type, char *err,
                               size_t errlen)
{
    if (m->kv) {
        colo_set_err(err, errlen, "KV cache: already initialised");
        return COLO_EINVAL;
    }
    if (n_blocks <= 0 || block_size <= 0 || (kv_type != COLO_F16 && kv_type != COLO_F32)) {
        colo_set_err(err, errlen, "KV cache: invalid configuration (%d blocks of %d tokens)", n_blocks, block_size);
        return COLO_EINVAL;
    }
    colo_kv_cache_config kc = {.n_layer = m->hp.n_layer, .kv_dim = m->hp.n_kv_head * m->hp.head_dim,
                               .block_size = block_size, .n_blocks = n_blocks, .dtype = kv_type};
    if (!(m->kv = colo_kv_cache_create(m->arena, &kc, err, errlen)))
        return COLO_ENOMEM;
    return COLO_OK;
}

void colo_llama_kv_fini(colo_llama *m)
{
    colo_kv_cache_destroy(m->kv);
    m->kv = NULL;
}

colo_kv_cache *colo_llama_kv_cache(const colo_llama *m) { return m->kv; }
int colo_llama_kv_n_blocks(const colo_llama *m) { return m->kv ? colo_kv_cache_n_blocks(m->kv) : 0; }
int colo_llama_kv_block_size(const colo_llama *m) { return m->kv ? colo_kv_cache_block_size(m->kv) : 0; }
int colo_llama_kv_n_free(const colo_llama *m) { return m->kv ? colo_kv_cache_n_free(m->kv) : 0; }

colo_status colo_llama_kv_alloc(colo_llama *m, int n, int32_t *ids)
{
    if (!m->kv)
        return COLO_EINVAL;
    return colo_kv_cache_alloc(m->kv, n, ids);
}

void colo_llama_kv_free(colo_llama *m, const int32_t *ids, int n)
{
    if (m->kv)
        colo_kv_cache_release(m->kv, ids, n);
}

size_t colo_llama_act_bytes(const colo_llama_hparams *hp, int n_tokens, int n_logits, int n_table)
{
    size_t T = n_tokens, L = n_logits, B = n_table;
    size_t E = hp->n_embd, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    size_t floats = T * (E * 4 + KV * 2 + F * 2) + L * (E + V);
    size_t ints = T * 4 + L + B;
    return floats * 4 + ints * 4 + 16 * 256; /* 16 pieces, each 256-byte aligned */
}

/* Activation scratch for n_tokens tokens, n_logits logits, a block table of
 * n_seqs x max_blocks; re-allocated in the arena when a step needs more. */
static colo_status ensure_act(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks)
{
    if (n_tokens <= m->cap_tokens && n_logits <= m->cap_logits && n_seqs * max_blocks <= m->cap_meta_blocks)
        return COLO_OK;
    int T = n_tokens > m->cap_tokens ? n_tokens : m->cap_tokens;
    int L = n_logits > m->cap_logits ? n_logits : m->cap_logits;
    int B = n_seqs * max_blocks > m->cap_meta_blocks ? n_seqs * max_blocks : m->cap_meta_blocks;
    const colo_llama_hparams *hp = &m->hp;
    size_t E = hp->n_embd, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    size_t bytes = colo_llama_act_bytes(hp, T, L, B);
    untrack(m, m->act);
    m->act = NULL;
    m->cap_tokens = m->cap_logits = m->cap_meta_blocks = 0;
    void *p;
    colo_status st = track(m, bytes, &p);
    if (st != COLO_OK)
        return st;
    int32_t *hs = realloc(m->h_slot, (size_t)T * sizeof *hs);
    if (!hs) {
        untrack(m, p);
        return COLO_ENOMEM;
    }
    m->h_slot = hs;
    m->act = p;
    char *c = p;
    m->x = colo_carve(&c, T * E * sizeof(float));
    m->h = colo_carve(&c, T * E * sizeof(float));
    m->q = colo_carve(&c, T * E * sizeof(float));
    m->att = colo_carve(&c, T * E * sizeof(float));
    m->k = colo_carve(&c, T * KV * sizeof(float));
    m->v = colo_carve(&c, T * KV * sizeof(float));
    m->g = colo_carve(&c, T * F * sizeof(float));
    m->u = colo_carve(&c, T * F * sizeof(float));
    m->lx = colo_carve(&c, L * E * sizeof(float));
    m->logits = colo_carve(&c, L * V * sizeof(float));
    m->d_tokens = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_pos = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_seq = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_slot = colo_carve(&c, (size_t)T * sizeof(int32_t));
    m->d_rows = colo_carve(&c, (size_t)L * sizeof(int32_t));
    m->d_table = colo_carve(&c, (size_t)B * sizeof(int32_t));
    COLO_ASSERT((size_t)(c - (char *)p) <= bytes);
    m->cap_tokens = T;
    m->cap_logits = L;
    m->cap_meta_blocks = B;
    return COLO_OK;
}

/* On a failure after work was queued, the stream is drained first so the
 * caller may free its host arrays. */
colo_status colo_llama_reserve(colo_llama *m, int n_tokens, int n_logits, int n_seqs, int max_blocks)
{
    if (n_tokens <= 0 || n_logits < 0 || n_seqs <= 0 || max_blocks <= 0)
        return COLO_EINVAL;
    return ensure_act(m, n_tokens, n_logits, n_seqs, max_blocks);
}

#define TRY(call)                                                                                           \
    do {                                                                                                    \
        colo_status st_ = (call);                                                                           \
        if (st_ != COLO_OK) {                                                                               \
            colo_stream_sync(s);                                                                            \
            return st_;                                                                                     \
        }                                                                                                   \
    } while (0)

static colo_status forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                           colo_cosched_member *throttle);

colo_status colo_llama_forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                               colo_cosched_member *throttle)
{
    /* A decode step: every token is its sequence's next one and gets logits. */
    bool decode = b->n_tokens > 0 && b->n_logits == b->n_tokens;
    for (int t = 1; decode && t < b->n_tokens; t++)
        decode = b->seq[t] != b->seq[t - 1];
    colo_stream_set_decode(s, decode);
    colo_status st = forward(m, s, b, logits, throttle);
    colo_stream_set_decode(s, false);
    return st;
}

static colo_status forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                           colo_cosched_member *throttle)
{
    const colo_llama_hparams *hp = &m->hp;
    int n = b->n_tokens;
    if (n <= 0 || b->n_logits < 0 || !m->kv || b->n_seqs <= 0 || b->max_blocks <= 0)
        return COLO_EINVAL;
    int bs = colo_kv_cache_block_size(m->kv), n_blocks = colo_kv_cache_n_blocks(m->kv);
    colo_dtype kv_type = colo_kv_cache_config_get(m->kv)->dtype;
    int max_pos = 0;
    for (int t = 0; t < n; t++) {
        int p = b->pos[t], sq = b->seq[t];
        if (p < 0 || p >= hp->n_ctx || p >= b->max_blocks * bs || sq < 0 || sq >= b->n_seqs || b->tokens[t] < 0 ||
            b->tokens[t] >= hp->n_vocab)
            return COLO_EINVAL;
        int32_t blk = b->block_table[(size_t)sq * b->max_blocks + p / bs];
        if (blk < 0 || blk >= n_blocks)
            return COLO_EINVAL;
        max_pos = p > max_pos ? p : max_pos;
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= n)
            return COLO_EINVAL;
    TRY(ensure_act(m, n, b->n_logits, b->n_seqs, b->max_blocks));
    for (int t = 0; t < n; t++) {
        int p = b->pos[t];
        m->h_slot[t] = b->block_table[(size_t)b->seq[t] * b->max_blocks + p / bs] * bs + p % bs;
    }
    TRY(colo_memcpy_h2d(s, m->d_tokens, b->tokens, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_pos, b->pos, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_seq, b->seq, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_slot, m->h_slot, (size_t)n * 4));
    TRY(colo_memcpy_h2d(s, m->d_table, b->block_table, (size_t)b->n_seqs * b->max_blocks * 4));
    if (b->n_logits)
        TRY(colo_memcpy_h2d(s, m->d_rows, b->logit_rows, (size_t)b->n_logits * 4));

    int E = hp->n_embd, KV = hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    TRY(colo_op_get_rows(s, m->tok_embd, m->t_embd, V, E, m->d_tokens, n, m->x));
    colo_attn_desc ad = {.n_tokens = n, .n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                         .block_size = bs, .max_blocks = b->max_blocks, .max_pos = max_pos,
                         .scale = 1.0f / sqrtf((float)hp->head_dim), .kv_type = kv_type, .tok_seq = m->d_seq,
                         .tok_pos = m->d_pos, .block_table = m->d_table};
    for (int l = 0; l < hp->n_layer; l++) {
        const layer *L = &m->layers[l];
        if (throttle)
            colo_cosched_throttle(throttle, 14);
        TRY(colo_op_rmsnorm(s, m->x, L->attn_norm, m->h, n, E, hp->rms_eps));
        TRY(colo_op_linear(s, L->wq, L->tq, NULL, m->h, 0, m->q, 0, n, E, E));
        TRY(colo_op_linear(s, L->wk, L->tk, NULL, m->h, 0, m->k, 0, n, KV, E));
        TRY(colo_op_linear(s, L->wv, L->tv, NULL, m->h, 0, m->v, 0, n, KV, E));
        colo_rope_desc rq = {.n_heads = hp->n_head, .head_dim = hp->head_dim, .n_rot = hp->n_rot,
                             .freq_base = hp->rope_base, .freq_scale = 1, .attn_factor = 1};
        colo_rope_desc rk = rq;
        rk.n_heads = hp->n_kv_head;
        TRY(colo_op_rope(s, m->q, 0, m->d_pos, n, &rq));
        TRY(colo_op_rope(s, m->k, 0, m->d_pos, n, &rk));
        void *kc = colo_kv_cache_k(m->kv, l), *vc = colo_kv_cache_v(m->kv, l);
        TRY(colo_op_kv_store(s, m->k, 0, m->v, 0, kc, vc, kv_type, m->d_slot, n, KV));
        TRY(colo_op_attention(s, &ad, m->q, kc, vc, m->att));
        TRY(colo_op_linear(s, L->wo, L->to, NULL, m->att, 0, m->h, 0, n, E, E));
        TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)n * E));
        TRY(colo_op_rmsnorm(s, m->x, L->ffn_norm, m->h, n, E, hp->rms_eps));
        TRY(colo_op_linear(s, L->w_gate, L->tg, NULL, m->h, 0, m->g, 0, n, F, E));
        TRY(colo_op_linear(s, L->w_up, L->tu, NULL, m->h, 0, m->u, 0, n, F, E));
        TRY(colo_op_swiglu(s, m->g, m->u, m->g, (int64_t)n * F));
        TRY(colo_op_linear(s, L->w_down, L->td, NULL, m->g, 0, m->h, 0, n, E, F));
        TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)n * E));
    }
    if (b->n_logits) {
        if (throttle)
            colo_cosched_throttle(throttle, 4);
        TRY(colo_op_get_rows(s, m->x, COLO_F32, n, E, m->d_rows, b->n_logits, m->lx));
        TRY(colo_op_rmsnorm(s, m->lx, m->out_norm, m->lx, b->n_logits, E, hp->rms_eps));
        TRY(colo_op_linear(s, m->output, m->t_out, NULL, m->lx, 0, m->logits, 0, b->n_logits, V, E));
        TRY(colo_memcpy_d2h(s, logits, m->logits, (size_t)b->n_logits * V * sizeof(float)));
    }
    return colo_stream_sync(s);
}
