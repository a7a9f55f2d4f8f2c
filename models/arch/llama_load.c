/* Loading a llama-family model: the tensors its architecture's row
 * (models/arch/llama_impl.h) reads, checked against the file (shapes, types,
 * and no tensor the architecture does not read), uploaded into the arena;
 * and the memory a file needs, from the same list. */
#include "models/arch/llama_impl.h"
#include "models/format/progress.h"
#include "runtime/log.h"
#include "runtime/staging.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Fused tensors (attn_qkv, a fused_up row's 2F-row ffn_up) are loaded whole and
 * split afterwards; fused[l] receives them. */
typedef struct {
    const void *qkv, *qkv_b, *up2;
    colo_dtype t_qkv, t_up2;
} fused;

/* The tensors of the model described by hp, in g (which decides between
 * fused and separate forms). dst pointers go into m/layers/fz, which may
 * be scratch when only the list is wanted. */
static bool build_specs(const colo_gguf *g, const colo_llama_hparams *hp, colo_llama *m, colo_llama_layer *layers,
                        fused *fz, spec_list *l)
{
    int64_t E = hp->n_embd, Q = hp->q_dim, KV = (int64_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff,
            V = hp->n_vocab, HD = hp->head_dim, R2 = hp->n_rot / 2;
    bool ok = spec_add(l, "token_embd.weight", E, V, false, true, &m->tok_embd, &m->t_embd) &&
              spec_add(l, "output_norm.weight", E, 1, true, true, &m->out_norm, NULL) &&
              spec_add(l, "output.weight", E, V, false, false, &m->output, &m->t_out);
    const colo_llama_arch_traits *tr = colo_llama_traits(hp->arch);
    if (tr->rope_factors == COLO_ROPE_FACTORS_FREQS)
        ok = ok && spec_add(l, "rope_freqs.weight", R2, 1, true, false, (const void **)&m->rope_freqs, NULL);
    if (tr->rope_factors == COLO_ROPE_FACTORS_LONG_SHORT)
        ok = ok && spec_add(l, "rope_factors_long.weight", R2, 1, true, false, (const void **)&m->rope_long, NULL) &&
             spec_add(l, "rope_factors_short.weight", R2, 1, true, false, (const void **)&m->rope_short, NULL);
    for (int i = 0; ok && i < hp->n_layer; i++) {
        colo_llama_layer *L = &layers[i];
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
        if (tr->qk_norm)
            ok = ok && spec_add(l, NM("attn_q_norm.weight"), HD, 1, true, true, &L->q_norm, NULL) &&
                 spec_add(l, NM("attn_k_norm.weight"), HD, 1, true, true, &L->k_norm, NULL);
        ok = ok && spec_add(l, NM("attn_output.weight"), Q, E, false, true, &L->wo, &L->to) &&
             spec_add(l, NM("attn_output.bias"), E, 1, true, false, (const void **)&L->bo, NULL) &&
             spec_add(l, NM("ffn_norm.weight"), E, 1, true, true, &L->ffn_norm, NULL);
        if (tr->post_norms)
            ok = ok && spec_add(l, NM("post_attention_norm.weight"), E, 1, true, true, &L->post_attn_norm, NULL) &&
                 spec_add(l, NM("post_ffw_norm.weight"), E, 1, true, true, &L->post_ffn_norm, NULL);
        if (tr->fused_up)
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
static colo_status plan(const colo_gguf *g, colo_llama_hparams *hp, colo_llama *m, colo_llama_layer *layers,
                        fused *fz, spec_list *l, char *msg, size_t msglen)
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
    colo_status st = colo_llama_track(m, t->bytes, &d);
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

/* Whether the weights are read in place from the file: on the CPU,
 * where the kernels read the file's own layout (every block format is
 * read as stored, and the data section's alignment is at least 32),
 * unless COLO_WEIGHTS=copy asks for copies in the arena (to compare). */
static bool weights_in_place(colo_stream *s)
{
    const char *want = getenv("COLO_WEIGHTS");
    return colo_device_kind(colo_stream_device(s)) == COLO_BACKEND_CPU && !(want && !strcmp(want, "copy"));
}

/* Points every tensor of the list at the file's mapping, charges the
 * arena for them (address space of as many bytes, and the pool), and
 * makes them resident. On failure nothing is charged. */
static colo_status map_weights(colo_llama *m, colo_gguf *g, const spec_list *l, char *msg, size_t msglen)
{
    size_t total = 0;
    for (int i = 0; i < l->n; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, l->v[i].name);
        total += t ? t->bytes : 0;
    }
    colo_status st = colo_arena_reserve(m->arena, total ? total : 1, 256, &m->map_res);
    if (st == COLO_OK && (st = colo_arena_charge(m->arena, total)) != COLO_OK) {
        colo_arena_free(m->arena, m->map_res);
        m->map_res = NULL;
    }
    if (st != COLO_OK) {
        snprintf(msg, msglen, "the weights' %zu bytes do not fit in the memory arena (%zu of %zu bytes used): %s",
                 total, colo_arena_used(m->arena), colo_arena_limit(m->arena), colo_status_str(st));
        return st;
    }
    m->map_charged_bytes = total;
    m->map = g;
    for (int i = 0; i < l->n; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, l->v[i].name);
        if (!t)
            continue;
        *l->v[i].dst = t->data;
        if (l->v[i].type)
            *l->v[i].type = t->type;
        m->weight_bytes += t->bytes;
    }
    /* the header and the tokenizer's arrays are read: only the weights stay */
    colo_gguf_release_range(g, colo_gguf_map_base(g), colo_gguf_data_offset(g));
    const char *data = (const char *)colo_gguf_map_base(g) + colo_gguf_data_offset(g);
    return colo_gguf_prefault(g, data, colo_gguf_file_size(g) - colo_gguf_data_offset(g), msg, msglen);
}

/* Copies every tensor of the list into the arena (a device's memory, or
 * the CPU's when asked). */
static colo_status copy_weights(colo_llama *m, const char *path, colo_gguf *g, colo_stream *s, const spec_list *l,
                                char *msg, size_t msglen)
{
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
        snprintf(msg, msglen, "out of memory (staging buffers for the weights)");
        return COLO_ENOMEM;
    }
    colo_status st = COLO_OK;
    for (int i = 0; i < l->n && st == COLO_OK; i++) {
        size_t before = m->weight_bytes;
        st = load_tensor(m, g, stg, &l->v[i], msg, msglen);
        colo_progress_add(&progress, m->weight_bytes - before);
    }
    if (st != COLO_OK) {
        colo_staging_free(stg);
        colo_progress_end(&progress);
        return st;
    }
    st = colo_staging_finish(stg); /* the mapping is unmapped by the caller */
    colo_staging_free(stg);
    colo_progress_end(&progress);
    if (st != COLO_OK)
        snprintf(msg, msglen, "copying the weights failed (%s)", colo_status_str(st));
    return st;
}

/* Views into the fused tensors: rows [r0, r0 + n) of a matrix are
 * contiguous in every block format. */
static void split_fused(colo_llama *m, const fused *fz)
{
    const colo_llama_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, Q = hp->q_dim, KV = (int64_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff;
    for (int i = 0; i < hp->n_layer; i++) {
        colo_llama_layer *L = &m->layers[i];
        const fused *f = &fz[i];
        if (f->qkv) {
            size_t rb = colo_dtype_row_bytes(f->t_qkv, E);
            L->wq = f->qkv;
            L->wk = (const char *)f->qkv + (size_t)Q * rb;
            L->wv = (const char *)f->qkv + (size_t)(Q + KV) * rb;
            L->tq = L->tk = L->tv = f->t_qkv;
            L->fused_qkv = true;
            m->n_layers_fused_qkv++;
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
    if (colo_llama_read_hparams(g, hp, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    m->traits = colo_llama_traits(hp->arch);
    if (!(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers)) ||
        !(fz = calloc((size_t)hp->n_layer, sizeof *fz))) {
        snprintf(msg, sizeof msg, "out of memory");
        goto out_msg;
    }
    if (plan(g, hp, m, m->layers, fz, &specs, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    if (m->traits->swa == COLO_SWA_LAYERS && hp->n_swa > 0) {
        bool *swa = calloc((size_t)hp->n_layer, sizeof *swa);
        if (!swa || colo_llama_swa_layers(g, hp, swa, msg, sizeof msg) != COLO_OK) {
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
    if (weights_in_place(s) ? map_weights(m, g, &specs, msg, sizeof msg) != COLO_OK
                            : copy_weights(m, path, g, s, &specs, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    if (!m->output) {
        m->output = m->tok_embd;
        m->t_out = m->t_embd;
    }
    split_fused(m, fz);
    m->rope_factors = m->rope_freqs ? m->rope_freqs : m->rope_short;
    free(fz);
    free(specs.v);
    if (!m->map) { /* else the model reads its weights from it until it is freed */
        colo_gguf_release_range(g, colo_gguf_map_base(g), colo_gguf_file_size(g)); /* read (a shared reader stays) */
        colo_gguf_close(g);
    }
    return m;

out_msg:
    colo_set_err(err, errlen, "%s: %s", path, msg);
    colo_stream_sync(s);
    if (m && m->map == g)
        g = NULL; /* closed by colo_llama_free */
    colo_llama_free(m);
out_gguf:
    free(fz);
    free(specs.v);
    colo_gguf_close(g);
    return NULL;
}

void colo_llama_set_seq_len(colo_llama *m, int max_seq_len)
{
    /* COLO_ROPE_FACTORS_LONG_SHORT: the long factors when a sequence may
     * pass the original context (as llama.cpp) */
    if (m->rope_long && m->rope_short)
        m->rope_factors = max_seq_len > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}

colo_status colo_llama_memory_need(const char *path, colo_dtype kv_type, colo_llama_memory *out, char *err,
                                   size_t errlen)
{
    char msg[512] = "";
    memset(out, 0, sizeof *out);
    if (!colo_dtype_is_kv(kv_type)) {
        colo_set_err(err, errlen, "KV cache type must be f16, f32, q8_0 or q4_0");
        return COLO_EINVAL;
    }
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return COLO_EFORMAT;
    colo_llama_hparams *hp = &out->hp;
    colo_status st = COLO_EFORMAT;
    spec_list specs = {0};
    colo_llama scratch = {0};
    colo_llama_layer *layers = NULL;
    fused *fz = NULL;
    if (colo_llama_read_hparams(g, hp, msg, sizeof msg) != COLO_OK)
        goto out;
    if (!(layers = calloc((size_t)hp->n_layer, sizeof *layers)) || !(fz = calloc((size_t)hp->n_layer, sizeof *fz))) {
        snprintf(msg, sizeof msg, "out of memory");
        goto out;
    }
    if (plan(g, hp, &scratch, layers, fz, &specs, msg, sizeof msg) != COLO_OK)
        goto out;
    if (hp->head_dim % colo_dtype_block_elems(kv_type)) {
        snprintf(msg, sizeof msg, "KV cache type %s needs a head size that is a multiple of %d; the model's is %d",
                 colo_dtype_name(kv_type), colo_dtype_block_elems(kv_type), hp->head_dim);
        st = COLO_EUNSUPPORTED;
        goto out;
    }
    for (int i = 0; i < specs.n; i++) {
        const colo_gguf_tensor *t = colo_gguf_find_tensor(g, specs.v[i].name);
        if (t) {
            out->weight_bytes += t->bytes;
            out->n_tensors++;
        }
    }
    out->kv_bytes_per_token = colo_kv_cache_token_bytes(hp->n_layer, hp->n_kv_head * hp->head_dim, kv_type);
    out->act_bytes_per_token = colo_llama_act_bytes(hp, 1, 0, 0) - COLO_LLAMA_ACT_PIECES * 256;
    out->act_bytes_per_logit = colo_llama_act_bytes(hp, 0, 1, 0) - COLO_LLAMA_ACT_PIECES * 256;
    /* The tokenizer is built from the file's metadata (its strings, merges
     * and scores) and the executor's thread, the engine's host arrays and
     * the queue come beside it: a served model's anonymous memory outside
     * its arena measured 4.7, 2.9 and 5.8 times the metadata's bytes for
     * SmolLM2, Gemma 3 270M and a 32k-vocabulary synthetic model, each the
     * first model of a server (docs/CONFIG.md, "Memory"). */
    out->host_bytes = 4 * colo_gguf_data_offset(g) + ((size_t)2 << 20);
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
    colo_llama_lora_fini(m);
    colo_alloc_set_clear(&m->allocs, m->arena);
    if (m->map) {
        /* its pages stay in the page cache, out of the process (a
         * sleeping model's kind keeps the file open: colo_gguf_open) */
        colo_gguf_release_range(m->map, colo_gguf_map_base(m->map), colo_gguf_file_size(m->map));
        colo_gguf_close(m->map);
        colo_arena_uncharge(m->arena, m->map_charged_bytes);
        colo_arena_free(m->arena, m->map_res);
    }
    free(m->layers);
    free(m->h_slot);
    colo_tokenizer_free(m->tok);
    free(m);
}

const colo_llama_hparams *colo_llama_hparams_get(const colo_llama *m) { return &m->hp; }
const colo_tokenizer *colo_llama_tokenizer(const colo_llama *m) { return m->tok; }
colo_arena *colo_llama_arena(const colo_llama *m) { return m->arena; }
size_t colo_llama_weight_bytes(const colo_llama *m) { return m->weight_bytes; }
