/* Decoder-only transformers from GGUF: llama (Llama 2/3, Mistral,
 * SmolLM2, DeepSeek-R1-Distill-Llama), qwen2 (QKV biases), qwen3 (q/k
 * norms), phi3 (fused QKV and gate+up, long/short rope factors) and gemma3
 * (scaled embeddings, q/k norms, post-norms, GeGLU, sliding-window layers
 * with their own rope base). One forward pass for all: each architecture
 * is a set of tensors present or absent and a few hyperparameters, read
 * from the file; a tensor or key that would change the computation and is
 * not applied here is refused with its name. */
#include "models/alloc_set.h"
#include "models/llama.h"
#include "models/kv_cache.h"
#include "models/progress.h"
#include "runtime/log.h"
#include "runtime/staging.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *attn_norm;          /* (E) f32 */
    const void *wq, *wk, *wv;       /* (Q, E), (KV, E), (KV, E); views into a fused attn_qkv when present */
    const float *bq, *bk, *bv;      /* biases or NULL */
    const void *q_norm, *k_norm;    /* (head_dim) f32 or NULL (qwen3, gemma3) */
    const void *wo;                 /* (E, Q) */
    const float *bo;
    const void *post_attn_norm;     /* (E) or NULL (gemma3) */
    const void *ffn_norm;           /* (E) */
    const void *w_gate, *w_up;      /* (F, E); views into a fused ffn_up (phi3) */
    const float *b_gate, *b_up;
    const void *w_down;             /* (E, F) */
    const float *b_down;
    const void *post_ffn_norm;      /* (E) or NULL (gemma3) */
    colo_dtype tq, tk, tv, to, tg, tu, td;
    bool swa;                       /* sliding-window layer (gemma3's local layers) */
} layer;

struct colo_llama {
    colo_llama_hparams hp;
    colo_arena *arena;
    colo_tokenizer *tok;
    const void *tok_embd; /* (V, E) */
    colo_dtype t_embd;
    const void *out_norm; /* (E) f32 */
    const void *output;   /* (V, E): output.weight or the tied token embedding */
    colo_dtype t_out;
    const float *rope_freqs;                     /* (n_rot/2) or NULL: Llama 3's scaling */
    const float *rope_long, *rope_short;         /* phi3's factors or NULL */
    const float *rope_factors;                   /* the ones in use */
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
    int graph_failures; /* decode steps whose recording as a graph failed; at 3, no more graphs */
};

static const char *const arch_names[] = {"llama", "qwen2", "qwen3", "phi3", "gemma3"};

const char *colo_llama_arch_name(colo_llama_arch a)
{
    return (unsigned)a < sizeof arch_names / sizeof *arch_names ? arch_names[a] : "?";
}

colo_status colo_llama_arch_parse(const char *name, colo_llama_arch *out)
{
    for (size_t i = 0; name && i < sizeof arch_names / sizeof *arch_names; i++)
        if (!strcmp(name, arch_names[i])) {
            *out = (colo_llama_arch)i;
            return COLO_OK;
        }
    return COLO_EINVAL;
}

static colo_status track(colo_llama *m, size_t bytes, void **out)
{
    return colo_alloc_set_take(&m->allocs, m->arena, bytes, out);
}

static void untrack(colo_llama *m, void *p) { colo_alloc_set_give(&m->allocs, m->arena, p); }

/* ---- hyperparameters ------------------------------------------------------------------ */

/* "<arch>.<suffix>" */
static const char *akey(const colo_llama_hparams *hp, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", colo_llama_arch_name(hp->arch), suffix);
    return buf;
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

/* An optional count: *out unchanged when absent. */
static colo_status opt_hparam(const colo_gguf *g, const char *key, int *out, char *err, size_t errlen)
{
    return colo_gguf_find(g, key) ? hparam(g, key, out, err, errlen) : COLO_OK;
}

/* An optional float: *out unchanged when absent. */
static colo_status opt_float(const colo_gguf *g, const char *key, float *out, char *err, size_t errlen)
{
    if (!colo_gguf_find(g, key))
        return COLO_OK;
    if (colo_gguf_get_f32(g, key, out) != COLO_OK || !isfinite(*out)) {
        colo_set_err(err, errlen, "key %s is not a finite float", key);
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

/* Whether layer l of a gemma3 file is a sliding-window one: the file's
 * sliding_window_pattern (a bool per layer, or a period n: every n-th
 * layer is global), else a period of 6. */
static colo_status swa_layers(const colo_gguf *g, const colo_llama_hparams *hp, bool *swa, char *err, size_t errlen)
{
    char k[96];
    akey(hp, "attention.sliding_window_pattern", k, sizeof k);
    const colo_gguf_kv *kv = colo_gguf_find(g, k);
    int period = 6;
    if (kv) {
        colo_gguf_type t;
        uint64_t n;
        const uint8_t *data;
        if (colo_gguf_get_arr(g, k, &t, &n, &data) == COLO_OK) {
            if (t != COLO_GGUF_BOOL || n != (uint64_t)hp->n_layer) {
                colo_set_err(err, errlen, "key %s is not an array of %d bools", k, hp->n_layer);
                return COLO_EFORMAT;
            }
            for (int l = 0; l < hp->n_layer; l++)
                swa[l] = data[l] != 0;
            return COLO_OK;
        }
        if (hparam(g, k, &period, err, errlen))
            return COLO_EFORMAT;
    }
    for (int l = 0; l < hp->n_layer; l++)
        swa[l] = l % period < period - 1;
    return COLO_OK;
}

/* Every hyperparameter but the vocabulary (the tokenizer's) from g; a
 * message naming the key otherwise. */
static colo_status read_hparams(const colo_gguf *g, colo_llama_hparams *hp, char *msg, size_t msglen)
{
    colo_gguf_str arch;
    char k[96];
    memset(hp, 0, sizeof *hp);
    if (colo_gguf_get_str(g, "general.architecture", &arch) != COLO_OK) {
        snprintf(msg, msglen, "key general.architecture is missing");
        return COLO_EFORMAT;
    }
    int a = -1;
    for (int i = 0; i < (int)(sizeof arch_names / sizeof *arch_names); i++)
        if (arch.len == strlen(arch_names[i]) && !memcmp(arch.ptr, arch_names[i], arch.len))
            a = i;
    if (a < 0) {
        snprintf(msg, msglen, "architecture '%.*s' is not supported (colo runs llama, qwen2, qwen3, phi3, gemma3)",
                 (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        return COLO_EFORMAT;
    }
    hp->arch = (colo_llama_arch)a;
    if (hparam(g, akey(hp, "block_count", k, sizeof k), &hp->n_layer, msg, msglen) ||
        hparam(g, akey(hp, "embedding_length", k, sizeof k), &hp->n_embd, msg, msglen) ||
        hparam(g, akey(hp, "feed_forward_length", k, sizeof k), &hp->n_ff, msg, msglen) ||
        hparam(g, akey(hp, "attention.head_count", k, sizeof k), &hp->n_head, msg, msglen) ||
        hparam(g, akey(hp, "context_length", k, sizeof k), &hp->n_ctx, msg, msglen))
        return COLO_EFORMAT;
    hp->n_kv_head = hp->n_head;
    if (opt_hparam(g, akey(hp, "attention.head_count_kv", k, sizeof k), &hp->n_kv_head, msg, msglen))
        return COLO_EFORMAT;
    if (hp->n_embd % hp->n_head || hp->n_head % hp->n_kv_head) {
        snprintf(msg, msglen, "heads (%d, %d kv) do not divide the embedding (%d)", hp->n_head, hp->n_kv_head,
                 hp->n_embd);
        return COLO_EFORMAT;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    int v_len = 0;
    if (opt_hparam(g, akey(hp, "attention.key_length", k, sizeof k), &hp->head_dim, msg, msglen) ||
        opt_hparam(g, akey(hp, "attention.value_length", k, sizeof k), &v_len, msg, msglen))
        return COLO_EFORMAT;
    if ((v_len && v_len != hp->head_dim) || hp->head_dim % 2 || hp->head_dim > 256) {
        snprintf(msg, msglen, "head size %d (values %d) is not supported: keys and values must have the same even "
                              "size of at most 256", hp->head_dim, v_len ? v_len : hp->head_dim);
        return COLO_EFORMAT;
    }
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->n_rot = hp->head_dim;
    if (opt_hparam(g, akey(hp, "rope.dimension_count", k, sizeof k), &hp->n_rot, msg, msglen))
        return COLO_EFORMAT;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 || (hp->arch == COLO_ARCH_LLAMA && hp->n_rot != hp->head_dim)) {
        snprintf(msg, msglen, "%s %d is invalid for heads of %d", k, hp->n_rot, hp->head_dim);
        return COLO_EFORMAT;
    }
    hp->rope_neox = hp->arch != COLO_ARCH_LLAMA;
    hp->rope_base = 10000.0f;
    hp->rope_base_swa = 10000.0f;
    hp->rope_scale = 1.0f;
    hp->rope_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx;
    if (opt_float(g, akey(hp, "rope.freq_base", k, sizeof k), &hp->rope_base, msg, msglen) ||
        opt_float(g, akey(hp, "rope.scaling.attn_factor", k, sizeof k), &hp->rope_attn_factor, msg, msglen) ||
        opt_hparam(g, akey(hp, "rope.scaling.original_context_length", k, sizeof k), &hp->n_ctx_orig, msg, msglen))
        return COLO_EFORMAT;
    if (!(hp->rope_base > 0) || !(hp->rope_attn_factor > 0)) {
        snprintf(msg, msglen, "rope.freq_base and rope.scaling.attn_factor must be positive");
        return COLO_EFORMAT;
    }
    /* Rope scaling: none or linear (with a factor); the others change the
     * angles in ways not applied here. */
    colo_gguf_str st = {"linear", 6};
    if (colo_gguf_find(g, akey(hp, "rope.scaling.type", k, sizeof k)) && colo_gguf_get_str(g, k, &st) != COLO_OK) {
        snprintf(msg, msglen, "key %s is not a string", k);
        return COLO_EFORMAT;
    }
    bool none = st.len == 4 && !memcmp(st.ptr, "none", 4), linear = st.len == 6 && !memcmp(st.ptr, "linear", 6);
    if (!none && !linear) {
        snprintf(msg, msglen, "%s '%.*s' is not supported (colo applies none and linear, and Llama 3's rope_freqs)",
                 k, (int)(st.len > 32 ? 32 : st.len), st.ptr);
        return COLO_EFORMAT;
    }
    float factor = 0.0f;
    if (opt_float(g, akey(hp, "rope.scaling.factor", k, sizeof k), &factor, msg, msglen))
        return COLO_EFORMAT;
    if (linear && factor != 0.0f) {
        if (!(factor > 0)) {
            snprintf(msg, msglen, "%s %g is invalid", k, factor);
            return COLO_EFORMAT;
        }
        hp->rope_scale = 1.0f / factor;
    }
    /* Keys that change the computation and are not applied here. */
    static const char *const refused[] = {"expert_count", "attn_logit_softcapping", "final_logit_softcapping",
                                          "rope.scaling.factor_swa", "attention.key_length_swa"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const colo_gguf_kv *kv = colo_gguf_find(g, akey(hp, refused[i], k, sizeof k));
        uint32_t u = 1;
        float f = 1.0f;
        if (kv && !(colo_gguf_get_u32(g, k, &u) == COLO_OK && u == 0) &&
            !(colo_gguf_get_f32(g, k, &f) == COLO_OK && f == 0.0f)) {
            snprintf(msg, msglen, "key %s is set: %s is not supported", k,
                     i == 0 ? "a mixture of experts" : "what it asks for");
            return COLO_EFORMAT;
        }
    }
    int n_swa = 0;
    if (opt_hparam(g, akey(hp, "attention.sliding_window", k, sizeof k), &n_swa, msg, msglen)) {
        /* 0 means none */
        uint32_t z;
        if (colo_gguf_get_u32(g, k, &z) != COLO_OK || z != 0)
            return COLO_EFORMAT;
        *msg = '\0';
    }
    if (hp->arch == COLO_ARCH_GEMMA3) {
        hp->n_swa = n_swa;
        if (opt_float(g, akey(hp, "rope.freq_base_swa", k, sizeof k), &hp->rope_base_swa, msg, msglen))
            return COLO_EFORMAT;
        hp->embd_scale = sqrtf((float)hp->n_embd);
        /* As llama.cpp: Gemma 3 27B (62 layers) scales queries by the
         * embedding per head, the others by the head size. */
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim));
    } else {
        /* Phi-3's files carry a sliding window that llama.cpp does not
         * apply (the 3.5 models' is past their context); colo does as
         * llama.cpp. Elsewhere a window inside the context is refused. */
        if (hp->arch != COLO_ARCH_PHI3 && n_swa > 0 && n_swa < hp->n_ctx) {
            snprintf(msg, msglen, "key %s is %d: a sliding window is not supported for %s", k, n_swa,
                     colo_llama_arch_name(hp->arch));
            return COLO_EFORMAT;
        }
        hp->embd_scale = 1.0f;
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    }
    if (colo_gguf_get_f32(g, akey(hp, "attention.layer_norm_rms_epsilon", k, sizeof k), &hp->rms_eps) ||
        !(hp->rms_eps > 0)) {
        snprintf(msg, msglen, "key %s is missing or invalid", k);
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

/* ---- tensors --------------------------------------------------------------------------------- */

/* One tensor the architecture reads: its name, shape, whether it must be
 * F32 (norms, biases, rope factors; matrices may be any weight type),
 * whether it must exist, and where it goes. */
typedef struct {
    char name[64];
    int64_t ne0, ne1;
    bool f32, required;
    const void **dst;
    colo_dtype *type;
} tensor_spec;

typedef struct {
    tensor_spec *v;
    int n, cap;
} spec_list;

static bool spec_add(spec_list *l, const char *name, int64_t ne0, int64_t ne1, bool f32, bool required,
                     const void **dst, colo_dtype *type)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        tensor_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        l->v = v, l->cap = cap;
    }
    tensor_spec *t = &l->v[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne0 = ne0, t->ne1 = ne1, t->f32 = f32, t->required = required, t->dst = dst, t->type = type;
    return true;
}

/* Fused tensors (attn_qkv, phi3's 2F-row ffn_up) are loaded whole and
 * split afterwards; fused[l] receives them. */
typedef struct {
    const void *qkv, *qkv_b, *up2;
    colo_dtype t_qkv, t_up2;
} fused;

/* The tensors of the model described by hp, in g (which decides between
 * fused and separate forms). dst pointers go into m/layers/fz, which may
 * be scratch when only the list is wanted. */
static bool build_specs(const colo_gguf *g, const colo_llama_hparams *hp, colo_llama *m, layer *layers, fused *fz,
                        spec_list *l)
{
    int64_t E = hp->n_embd, Q = hp->q_dim, KV = (int64_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff,
            V = hp->n_vocab, HD = hp->head_dim, R2 = hp->n_rot / 2;
    bool ok = spec_add(l, "token_embd.weight", E, V, false, true, &m->tok_embd, &m->t_embd) &&
              spec_add(l, "output_norm.weight", E, 1, true, true, &m->out_norm, NULL) &&
              spec_add(l, "output.weight", E, V, false, false, &m->output, &m->t_out);
    if (hp->arch == COLO_ARCH_LLAMA)
        ok = ok && spec_add(l, "rope_freqs.weight", R2, 1, true, false, (const void **)&m->rope_freqs, NULL);
    if (hp->arch == COLO_ARCH_PHI3)
        ok = ok && spec_add(l, "rope_factors_long.weight", R2, 1, true, false, (const void **)&m->rope_long, NULL) &&
             spec_add(l, "rope_factors_short.weight", R2, 1, true, false, (const void **)&m->rope_short, NULL);
    bool qk_norm = hp->arch == COLO_ARCH_QWEN3 || hp->arch == COLO_ARCH_GEMMA3;
    bool post_norms = hp->arch == COLO_ARCH_GEMMA3;
    for (int i = 0; ok && i < hp->n_layer; i++) {
        layer *L = &layers[i];
        fused *f = &fz[i];
        char n[64];
#define NM(sfx) (snprintf(n, sizeof n, "blk.%d.%s", i, sfx), n)
        ok = spec_add(l, NM("attn_norm.weight"), E, 1, true, true, &L->attn_norm, NULL);
        bool has_qkv = colo_gguf_find_tensor(g, NM("attn_qkv.weight")) != NULL;
        if (has_qkv)
            ok = ok && spec_add(l, NM("attn_qkv.weight"), E, Q + 2 * KV, false, true, &f->qkv, &f->t_qkv) &&
                 spec_add(l, NM("attn_qkv.bias"), Q + 2 * KV, 1, true, false, &f->qkv_b, NULL);
        else
            ok = ok && spec_add(l, NM("attn_q.weight"), E, Q, false, true, &L->wq, &L->tq) &&
                 spec_add(l, NM("attn_k.weight"), E, KV, false, true, &L->wk, &L->tk) &&
                 spec_add(l, NM("attn_v.weight"), E, KV, false, true, &L->wv, &L->tv) &&
                 spec_add(l, NM("attn_q.bias"), Q, 1, true, false, (const void **)&L->bq, NULL) &&
                 spec_add(l, NM("attn_k.bias"), KV, 1, true, false, (const void **)&L->bk, NULL) &&
                 spec_add(l, NM("attn_v.bias"), KV, 1, true, false, (const void **)&L->bv, NULL);
        if (qk_norm)
            ok = ok && spec_add(l, NM("attn_q_norm.weight"), HD, 1, true, true, &L->q_norm, NULL) &&
                 spec_add(l, NM("attn_k_norm.weight"), HD, 1, true, true, &L->k_norm, NULL);
        ok = ok && spec_add(l, NM("attn_output.weight"), Q, E, false, true, &L->wo, &L->to) &&
             spec_add(l, NM("attn_output.bias"), E, 1, true, false, (const void **)&L->bo, NULL) &&
             spec_add(l, NM("ffn_norm.weight"), E, 1, true, true, &L->ffn_norm, NULL);
        if (post_norms)
            ok = ok && spec_add(l, NM("post_attention_norm.weight"), E, 1, true, true, &L->post_attn_norm, NULL) &&
                 spec_add(l, NM("post_ffw_norm.weight"), E, 1, true, true, &L->post_ffn_norm, NULL);
        if (hp->arch == COLO_ARCH_PHI3)
            ok = ok && spec_add(l, NM("ffn_up.weight"), E, 2 * F, false, true, &f->up2, &f->t_up2);
        else
            ok = ok && spec_add(l, NM("ffn_gate.weight"), E, F, false, true, &L->w_gate, &L->tg) &&
                 spec_add(l, NM("ffn_up.weight"), E, F, false, true, &L->w_up, &L->tu) &&
                 spec_add(l, NM("ffn_gate.bias"), F, 1, true, false, (const void **)&L->b_gate, NULL) &&
                 spec_add(l, NM("ffn_up.bias"), F, 1, true, false, (const void **)&L->b_up, NULL);
        ok = ok && spec_add(l, NM("ffn_down.weight"), F, E, false, true, &L->w_down, &L->td) &&
             spec_add(l, NM("ffn_down.bias"), E, 1, true, false, (const void **)&L->b_down, NULL);
#undef NM
    }
    return ok;
}

/* Checks a tensor of the list against the file: present when required,
 * its shape and type class. *t NULL for an absent optional one. */
static colo_status check_tensor(const colo_gguf *g, const tensor_spec *sp, const colo_gguf_tensor **t, char *msg,
                                size_t msglen)
{
    *t = colo_gguf_find_tensor(g, sp->name);
    if (!*t) {
        if (sp->required)
            snprintf(msg, msglen, "tensor %s is missing", sp->name);
        return sp->required ? COLO_EFORMAT : COLO_OK;
    }
    const colo_gguf_tensor *x = *t;
    if (x->ne[0] != sp->ne0 || x->ne[1] != sp->ne1 || x->ne[2] != 1 || x->ne[3] != 1) {
        snprintf(msg, msglen, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", sp->name,
                 (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2], (long long)x->ne[3],
                 (long long)sp->ne0, (long long)sp->ne1);
        return COLO_EFORMAT;
    }
    if ((sp->f32 && x->type != COLO_F32) || !colo_dtype_is_weight(x->type)) {
        snprintf(msg, msglen, "tensor %s has type %s, which is not supported there", sp->name,
                 colo_dtype_name(x->type) ? colo_dtype_name(x->type) : "?");
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

/* Every tensor of the file must be one the architecture reads: one that
 * is not would change the computation. */
static colo_status check_unused(const colo_gguf *g, const colo_llama_hparams *hp, const spec_list *l, char *msg,
                                size_t msglen)
{
    int n = colo_gguf_n_tensors(g);
    bool *used = calloc((size_t)n + 1, 1);
    if (!used) {
        snprintf(msg, msglen, "out of memory");
        return COLO_ENOMEM;
    }
    const colo_gguf_tensor *base = n ? colo_gguf_tensor_at(g, 0) : NULL;
    for (int i = 0; i < l->n; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, l->v[i].name);
        if (t)
            used[t - base] = true;
    }
    colo_status st = COLO_OK;
    for (int i = 0; i < n && st == COLO_OK; i++)
        if (!used[i]) {
            snprintf(msg, msglen, "tensor %s is not part of the %s architecture as colo runs it (refused: it would "
                                  "change the computation)", colo_gguf_tensor_at(g, i)->name,
                     colo_llama_arch_name(hp->arch));
            st = COLO_EFORMAT;
        }
    free(used);
    return st;
}

/* The hyperparameters, the vocabulary size and the tensor list of path,
 * checked against each other. */
static colo_status plan(const colo_gguf *g, colo_llama_hparams *hp, colo_llama *m, layer *layers, fused *fz,
                        spec_list *l, char *msg, size_t msglen)
{
    colo_gguf_type tt;
    uint64_t n_tok;
    const uint8_t *tdata;
    if (colo_gguf_get_arr(g, "tokenizer.ggml.tokens", &tt, &n_tok, &tdata) || tt != COLO_GGUF_STRING || !n_tok ||
        n_tok > INT32_MAX) {
        snprintf(msg, msglen, "tokenizer.ggml.tokens is missing or not a string array");
        return COLO_EFORMAT;
    }
    hp->n_vocab = (int)n_tok;
    /* Every layer has at least 6 tensors (two norms, fused QKV, output,
     * fused gate and up, down): a block count past what the file holds is
     * refused here, before tensor names are listed for millions of layers. */
    if ((int64_t)hp->n_layer * 6 > colo_gguf_n_tensors(g)) {
        snprintf(msg, msglen, "%s.block_count is %d, but the file has %d tensors (at least 6 per layer)",
                 colo_llama_arch_name(hp->arch), hp->n_layer, colo_gguf_n_tensors(g));
        return COLO_EFORMAT;
    }
    if (!build_specs(g, hp, m, layers, fz, l)) {
        snprintf(msg, msglen, "out of memory");
        return COLO_ENOMEM;
    }
    for (int i = 0; i < l->n; i++) {
        const colo_gguf_tensor *t;
        if (check_tensor(g, &l->v[i], &t, msg, msglen))
            return COLO_EFORMAT;
    }
    return check_unused(g, hp, l, msg, msglen);
}

/* Uploads one tensor of the list (nothing for an absent optional one)
 * through stg: on the device once stg is finished. */
static colo_status load_tensor(colo_llama *m, const colo_gguf *g, colo_staging *stg, const tensor_spec *sp,
                               char *err, size_t errlen)
{
    const colo_gguf_tensor *t = colo_gguf_find_tensor(g, sp->name);
    if (!t)
        return COLO_OK;
    void *d;
    colo_status st = track(m, t->bytes, &d);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "tensor %s: %zu bytes do not fit in the memory arena (%zu of %zu bytes used)",
                     sp->name, t->bytes, colo_arena_used(m->arena), colo_arena_limit(m->arena));
        return st;
    }
    if ((st = colo_staging_copy(stg, d, t->data, t->bytes)) != COLO_OK) {
        colo_set_err(err, errlen, "tensor %s: copy to the device failed (%s)", sp->name, colo_status_str(st));
        return st;
    }
    colo_gguf_release(g, t); /* read: the file's pages are not needed twice */
    m->weight_bytes += t->bytes;
    *sp->dst = d;
    if (sp->type)
        *sp->type = t->type;
    return COLO_OK;
}

/* Views into the fused tensors: rows [r0, r0 + n) of a matrix are
 * contiguous in every block format. */
static void split_fused(colo_llama *m, const fused *fz)
{
    const colo_llama_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, Q = hp->q_dim, KV = (int64_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff;
    for (int i = 0; i < hp->n_layer; i++) {
        layer *L = &m->layers[i];
        const fused *f = &fz[i];
        if (f->qkv) {
            size_t rb = colo_dtype_row_bytes(f->t_qkv, E);
            L->wq = f->qkv, L->wk = (const char *)f->qkv + (size_t)Q * rb, L->wv = (const char *)f->qkv + (size_t)(Q + KV) * rb;
            L->tq = L->tk = L->tv = f->t_qkv;
            if (f->qkv_b)
                L->bq = f->qkv_b, L->bk = (const float *)f->qkv_b + Q, L->bv = (const float *)f->qkv_b + Q + KV;
        }
        if (f->up2) {
            size_t rb = colo_dtype_row_bytes(f->t_up2, E);
            L->w_gate = f->up2, L->w_up = (const char *)f->up2 + (size_t)F * rb; /* silu(first half) * second half */
            L->tg = L->tu = f->t_up2;
        }
    }
}

colo_llama *colo_llama_load(const char *path, colo_arena *arena, colo_stream *s, char *err, size_t errlen)
{
    char msg[512] = "";
    spec_list specs = {0};
    fused *fz = NULL;
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
    if (!(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers)) ||
        !(fz = calloc((size_t)hp->n_layer, sizeof *fz))) {
        snprintf(msg, sizeof msg, "out of memory");
        goto out_msg;
    }
    if (plan(g, hp, m, m->layers, fz, &specs, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    if (hp->arch == COLO_ARCH_GEMMA3 && hp->n_swa > 0) {
        bool *swa = calloc((size_t)hp->n_layer, sizeof *swa);
        if (!swa || swa_layers(g, hp, swa, msg, sizeof msg) != COLO_OK) {
            if (!swa)
                snprintf(msg, sizeof msg, "out of memory");
            free(swa);
            goto out_msg;
        }
        for (int l = 0; l < hp->n_layer; l++)
            m->layers[l].swa = swa[l];
        free(swa);
    }
    if (!(m->tok = colo_tokenizer_from_gguf(g, msg, sizeof msg)))
        goto out_msg;
    if (colo_tokenizer_n_vocab(m->tok) != hp->n_vocab) {
        snprintf(msg, sizeof msg, "the tokenizer has %d tokens, tokenizer.ggml.tokens %d",
                 colo_tokenizer_n_vocab(m->tok),
                 hp->n_vocab);
        goto out_msg;
    }
    /* A model of several GiB takes a while to copy: a percentage on a terminal. */
    colo_progress progress;
    char what[300];
    snprintf(what, sizeof what, "loading %s", path);
    colo_progress_begin(&progress, what, colo_gguf_file_size(g) - colo_gguf_data_offset(g), 1ull << 30);
    /* Through page-locked buffers where the device has them, so that reading
     * the file and the transfer overlap (runtime/staging.h). */
    colo_staging *stg = colo_staging_create(s, (size_t)16 << 20);
    if (!stg) {
        colo_progress_end(&progress);
        snprintf(msg, sizeof msg, "out of memory (staging buffers for the weights)");
        goto out_msg;
    }
    for (int i = 0; i < specs.n; i++) {
        size_t before = m->weight_bytes;
        if (load_tensor(m, g, stg, &specs.v[i], msg, sizeof msg)) {
            colo_staging_free(stg);
            colo_progress_end(&progress);
            goto out_msg;
        }
        colo_progress_add(&progress, m->weight_bytes - before);
    }
    colo_status st = colo_staging_finish(stg); /* the mapping is unmapped below */
    colo_staging_free(stg);
    colo_progress_end(&progress);
    if (st != COLO_OK) {
        snprintf(msg, sizeof msg, "copying the weights failed (%s)", colo_status_str(st));
        goto out_msg;
    }
    if (!m->output) {
        m->output = m->tok_embd;
        m->t_out = m->t_embd;
    }
    split_fused(m, fz);
    m->rope_factors = m->rope_freqs ? m->rope_freqs : m->rope_short;
    free(fz);
    free(specs.v);
    colo_gguf_close(g);
    return m;

out_msg:
    colo_set_err(err, errlen, "%s: %s", path, msg);
    colo_stream_sync(s);
    colo_llama_free(m);
out_gguf:
    free(fz);
    free(specs.v);
    colo_gguf_close(g);
    return NULL;
}

void colo_llama_set_seq_len(colo_llama *m, int max_seq_len)
{
    /* phi3: the long factors when a sequence may pass the original context (as llama.cpp) */
    if (m->rope_long && m->rope_short)
        m->rope_factors = max_seq_len > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}

colo_status colo_llama_memory_need(const char *path, colo_dtype kv_type, colo_llama_memory *out, char *err,
                                   size_t errlen)
{
    char msg[512] = "";
    memset(out, 0, sizeof *out);
    if (kv_type != COLO_F16 && kv_type != COLO_F32) {
        colo_set_err(err, errlen, "KV cache type must be f16 or f32");
        return COLO_EINVAL;
    }
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return COLO_EFORMAT;
    colo_llama_hparams *hp = &out->hp;
    colo_status st = COLO_EFORMAT;
    spec_list specs = {0};
    colo_llama scratch = {0};
    layer *layers = NULL;
    fused *fz = NULL;
    if (read_hparams(g, hp, msg, sizeof msg) != COLO_OK)
        goto out;
    if (!(layers = calloc((size_t)hp->n_layer, sizeof *layers)) || !(fz = calloc((size_t)hp->n_layer, sizeof *fz))) {
        snprintf(msg, sizeof msg, "out of memory");
        goto out;
    }
    if (plan(g, hp, &scratch, layers, fz, &specs, msg, sizeof msg) != COLO_OK)
        goto out;
    for (int i = 0; i < specs.n; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, specs.v[i].name);
        if (t) {
            out->weight_bytes += t->bytes;
            out->n_tensors++;
        }
    }
    out->kv_bytes_per_token = colo_kv_cache_token_bytes(hp->n_layer, hp->n_kv_head * hp->head_dim, kv_type);
    out->act_bytes_per_token = colo_llama_act_bytes(hp, 1, 0, 0) - 16 * 256;
    out->act_bytes_per_logit = colo_llama_act_bytes(hp, 0, 1, 0) - 16 * 256;
    st = COLO_OK;
out:
    if (st != COLO_OK)
        colo_set_err(err, errlen, "%s: %s", path, msg);
    free(layers);
    free(fz);
    free(specs.v);
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
    colo_tokenizer_free(m->tok);
    free(m);
}

const colo_llama_hparams *colo_llama_hparams_get(const colo_llama *m) { return &m->hp; }
const colo_tokenizer *colo_llama_tokenizer(const colo_llama *m) { return m->tok; }
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
    size_t E = hp->n_embd, Q = hp->q_dim, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    size_t floats = T * (E * 2 + Q * 2 + KV * 2 + F * 2) + L * (E + V);
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
    size_t E = hp->n_embd, Q = hp->q_dim, KV = (size_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
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
    m->q = colo_carve(&c, T * Q * sizeof(float));
    m->att = colo_carve(&c, T * Q * sizeof(float));
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
                           colo_cosched_member *throttle, bool decode);

colo_status colo_llama_forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                               colo_cosched_member *throttle)
{
    /* Decode rows: the leading tokens that are each their sequence's only
     * one in the step and the leading logit rows (a sequence's next
     * token). All of them: a decode step; some: a mixed step, whose decode
     * rows get a decode step's products (colo_stream_set_decode_rows). */
    int d = 0;
    while (d < b->n_tokens && d < b->n_logits && b->logit_rows[d] == d &&
           (d == 0 || b->seq[d] != b->seq[d - 1]) && (d + 1 == b->n_tokens || b->seq[d + 1] != b->seq[d]))
        d++;
    bool decode = b->n_tokens > 0 && d == b->n_tokens;
    if (decode)
        colo_stream_set_decode(s, true);
    else
        colo_stream_set_decode_rows(s, d);
    colo_status st = forward(m, s, b, logits, throttle, decode);
    colo_stream_set_decode(s, false);
    return st;
}

static colo_status compute(colo_llama *m, colo_stream *s, const colo_llama_batch *b, int bs, colo_dtype kv_type,
                           int max_pos, colo_cosched_member *throttle);

#define COLO_LLAMA_GRAPH_FAILURES 3

/* A graph key for a decode step of n sequences (colo_stream_graph_end):
 * steps whose kernels are the same functions share a graph, updated in
 * place; linear's mat-vec kernel is specialised for 1, 2, 4 and 8 or more
 * rows. A key that groups unlike steps costs a rebuild, not a wrong result. */
static int graph_key(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

static colo_status forward(colo_llama *m, colo_stream *s, const colo_llama_batch *b, float *logits,
                           colo_cosched_member *throttle, bool decode)
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

    /* Decode steps as one graph where the device records them
     * (colo_device_config.cuda_graphs). A recording that fails ran nothing,
     * and the step is queued as usual; it may fail once for a cause that
     * passes (a stream's scratch growing, which cannot happen while
     * recording), so graphs stop only after COLO_LLAMA_GRAPH_FAILURES. */
    bool graph = decode && m->graph_failures < COLO_LLAMA_GRAPH_FAILURES && colo_stream_graph_begin(s) == COLO_OK;
    colo_status st = compute(m, s, b, bs, kv_type, max_pos, throttle);
    if (graph) {
        colo_status ge = colo_stream_graph_end(s, st == COLO_OK ? graph_key(n) : -1);
        if (ge != COLO_OK) {
            if (++m->graph_failures == COLO_LLAMA_GRAPH_FAILURES)
                COLO_WARN("llama: decode steps of this model run without graphs: recording one failed %d times "
                          "(last: %s)",
                          COLO_LLAMA_GRAPH_FAILURES, colo_status_str(st != COLO_OK ? st : ge));
            st = compute(m, s, b, bs, kv_type, max_pos, throttle);
        }
    }
    if (st == COLO_OK && b->n_logits)
        st = colo_memcpy_d2h(s, logits, m->logits, (size_t)b->n_logits * hp->n_vocab * sizeof(float));
    colo_status ss = colo_stream_sync(s);
    return st != COLO_OK ? st : ss;
}

#undef TRY
/* Inside compute, which may be recording a graph: no synchronisation on
 * failure (forward ends the recording first). */
#define TRY(call)                                                                                           \
    do {                                                                                                    \
        colo_status st_ = (call);                                                                           \
        if (st_ != COLO_OK)                                                                                 \
            return st_;                                                                                     \
    } while (0)

/* The step's kernels: embeddings, the layers, the logits' rows on the
 * device (m->logits). Queues work only (no copy to the host, no wait). */
static colo_status compute(colo_llama *m, colo_stream *s, const colo_llama_batch *b, int bs, colo_dtype kv_type,
                           int max_pos, colo_cosched_member *throttle)
{
    const colo_llama_hparams *hp = &m->hp;
    int n = b->n_tokens;
    int E = hp->n_embd, Q = hp->q_dim, KV = hp->n_kv_head * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    TRY(colo_op_get_rows(s, m->tok_embd, m->t_embd, V, E, m->d_tokens, n, m->x));
    if (hp->embd_scale != 1.0f)
        TRY(colo_op_scale(s, m->x, hp->embd_scale, (int64_t)n * E));
    colo_attn_desc ad = {.n_tokens = n, .n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                         .block_size = bs, .max_blocks = b->max_blocks, .max_pos = max_pos,
                         .scale = hp->attn_scale, .kv_type = kv_type, .tok_seq = m->d_seq,
                         .tok_pos = m->d_pos, .block_table = m->d_table};
    colo_rope_desc rq = {.n_heads = hp->n_head, .head_dim = hp->head_dim, .n_rot = hp->n_rot, .neox = hp->rope_neox,
                         .freq_base = hp->rope_base, .freq_scale = hp->rope_scale,
                         .attn_factor = hp->rope_attn_factor, .freq_factors = m->rope_factors};
    for (int l = 0; l < hp->n_layer; l++) {
        const layer *L = &m->layers[l];
        if (throttle)
            colo_cosched_throttle(throttle, 14);
        TRY(colo_op_rmsnorm(s, m->x, L->attn_norm, m->h, n, E, hp->rms_eps));
        /* One product op per shared input: h is prepared (quantized) once. */
        colo_linear_out qkv[3] = {{L->wq, L->tq, L->bq, m->q, 0, Q}, {L->wk, L->tk, L->bk, m->k, 0, KV},
                                  {L->wv, L->tv, L->bv, m->v, 0, KV}};
        TRY(colo_op_linear_multi(s, m->h, 0, n, E, qkv, 3));
        if (L->q_norm) { /* per head */
            TRY(colo_op_rmsnorm(s, m->q, L->q_norm, m->q, n * hp->n_head, hp->head_dim, hp->rms_eps));
            TRY(colo_op_rmsnorm(s, m->k, L->k_norm, m->k, n * hp->n_kv_head, hp->head_dim, hp->rms_eps));
        }
        colo_rope_desc r = rq;
        if (L->swa) /* gemma3's local layers: their own base, no scaling */
            r.freq_base = hp->rope_base_swa, r.freq_scale = 1.0f;
        TRY(colo_op_rope(s, m->q, 0, m->d_pos, n, &r));
        r.n_heads = hp->n_kv_head;
        TRY(colo_op_rope(s, m->k, 0, m->d_pos, n, &r));
        void *kc = colo_kv_cache_k(m->kv, l), *vc = colo_kv_cache_v(m->kv, l);
        TRY(colo_op_kv_store(s, m->k, 0, m->v, 0, kc, vc, kv_type, m->d_slot, n, KV));
        ad.window = L->swa ? hp->n_swa : 0;
        TRY(colo_op_attention(s, &ad, m->q, kc, vc, m->att));
        TRY(colo_op_linear(s, L->wo, L->to, L->bo, m->att, 0, m->h, 0, n, E, Q));
        if (L->post_attn_norm)
            TRY(colo_op_rmsnorm(s, m->h, L->post_attn_norm, m->h, n, E, hp->rms_eps));
        TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)n * E));
        TRY(colo_op_rmsnorm(s, m->x, L->ffn_norm, m->h, n, E, hp->rms_eps));
        colo_linear_out gate_up[2] = {{L->w_gate, L->tg, L->b_gate, m->g, 0, F}, {L->w_up, L->tu, L->b_up, m->u, 0, F}};
        TRY(colo_op_linear_multi(s, m->h, 0, n, E, gate_up, 2));
        if (hp->arch == COLO_ARCH_GEMMA3)
            TRY(colo_op_geglu(s, m->g, m->u, m->g, (int64_t)n * F));
        else
            TRY(colo_op_swiglu(s, m->g, m->u, m->g, (int64_t)n * F));
        TRY(colo_op_linear(s, L->w_down, L->td, L->b_down, m->g, 0, m->h, 0, n, E, F));
        if (L->post_ffn_norm)
            TRY(colo_op_rmsnorm(s, m->h, L->post_ffn_norm, m->h, n, E, hp->rms_eps));
        TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)n * E));
    }
    if (b->n_logits) {
        if (throttle)
            colo_cosched_throttle(throttle, 4);
        TRY(colo_op_get_rows(s, m->x, COLO_F32, n, E, m->d_rows, b->n_logits, m->lx));
        TRY(colo_op_rmsnorm(s, m->lx, m->out_norm, m->lx, b->n_logits, E, hp->rms_eps));
        TRY(colo_op_linear(s, m->output, m->t_out, NULL, m->lx, 0, m->logits, 0, b->n_logits, V, E));
    }
    return COLO_OK;
}
