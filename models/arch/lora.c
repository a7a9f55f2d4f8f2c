/* LoRA adapters of the llama family: reading and checking the file against
 * the base, the adapter's memory in the base's arena, and the slot table
 * the forward pass reads (models/arch/llama.c). */
#include "models/arch/lora.h"
#include "kernels/quant.h"
#include "models/arch/llama_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the base looks like to an adapter. */
typedef struct {
    colo_llama_arch arch;
    int n_layer;
    int64_t E, Q, KV, F;
    bool fused_qkv, fused_up;
} base_shape;

/* The products an adapter file may name, and their (in, out). */
enum { F_Q, F_K, F_V, F_QKV, F_O, F_GATE, F_UP, F_DOWN, F_N };
static const char *const file_names[F_N] = {"attn_q",      "attn_k",   "attn_v", "attn_qkv",
                                            "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

/* (in, out) of product f in the base; false when the base has no such product. */
static bool product_dims(const base_shape *b, int f, int64_t *in, int64_t *out)
{
    *in = b->E;
    switch (f) {
    case F_Q: *out = b->Q; return !b->fused_qkv;
    case F_K:
    case F_V: *out = b->KV; return !b->fused_qkv;
    case F_QKV: *out = b->Q + 2 * b->KV; return b->fused_qkv;
    case F_O: *in = b->Q, *out = b->E; return true;
    case F_GATE: *out = b->F; return !b->fused_up;
    case F_UP: *out = b->fused_up ? 2 * b->F : b->F; return true;
    case F_DOWN: *in = b->F, *out = b->E; return true;
    }
    return false;
}

typedef struct {
    const colo_gguf_tensor *a, *b;
} tensor_pair;

/* An adapter read from its file: for each layer and product its pair of
 * tensors (either NULL: not adapted). */
typedef struct {
    tensor_pair *p; /* (n_layer * F_N) */
    colo_lora_info info;
} adapter_plan;

static bool parse_name(const char *name, int n_layer, int *layer, int *f, bool *is_b)
{
    int l, n = 0;
    char prod[32];
    if (sscanf(name, "blk.%d.%31[a-z_].weight.lora_%n", &l, prod, &n) != 2 || !n || l < 0 || l >= n_layer)
        return false;
    const char *ab = name + n;
    if (strcmp(ab, "a") && strcmp(ab, "b"))
        return false;
    for (int i = 0; i < F_N; i++)
        if (!strcmp(prod, file_names[i])) {
            *layer = l, *f = i, *is_b = ab[0] == 'b';
            return true;
        }
    return false;
}

/* The adapter's keys: an adapter of lora type for the base's architecture. */
static colo_status check_keys(const colo_gguf *g, const char *path, const base_shape *b, float *alpha, char *err,
                              size_t errlen)
{
    colo_gguf_str s;
    if (colo_gguf_get_str(g, "general.type", &s) != COLO_OK || s.len != 7 || memcmp(s.ptr, "adapter", 7)) {
        colo_set_err(err, errlen, "%s: general.type is not \"adapter\" (not a LoRA adapter file)", path);
        return COLO_EFORMAT;
    }
    if (colo_gguf_get_str(g, "adapter.type", &s) != COLO_OK || s.len != 4 || memcmp(s.ptr, "lora", 4)) {
        colo_set_err(err, errlen, "%s: adapter.type is not \"lora\"", path);
        return COLO_EFORMAT;
    }
    colo_llama_arch arch;
    if (colo_gguf_get_str(g, "general.architecture", &s) != COLO_OK ||
        colo_llama_arch_parse_n(s.ptr, (size_t)s.len, &arch) != COLO_OK || arch != b->arch) {
        colo_set_err(err, errlen, "%s: general.architecture is not the base model's (%s)", path,
                     colo_llama_arch_name(b->arch));
        return COLO_EFORMAT;
    }
    *alpha = 0.0f;
    if (colo_gguf_find(g, "adapter.lora.alpha") && colo_gguf_get_f32(g, "adapter.lora.alpha", alpha) != COLO_OK) {
        colo_set_err(err, errlen, "%s: adapter.lora.alpha is not a float32", path);
        return COLO_EFORMAT;
    }
    /* (NaN fails both comparisons) */
    if (!(*alpha >= 0.0f && *alpha <= COLO_LORA_MAX_ALPHA)) {
        colo_set_err(err, errlen, "%s: adapter.lora.alpha %g is not a number from 0 to %g", path, (double)*alpha,
                     (double)COLO_LORA_MAX_ALPHA);
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

/* Every value of tensor t is finite: a NaN or infinity in an adapter
 * would turn every output it touches into NaN. */
static colo_status check_values(const colo_gguf_tensor *t, const char *path, char *err, size_t errlen)
{
    int64_t k = t->ne[0], rows = t->ne[1];
    size_t rb = colo_dtype_row_bytes(t->type, k);
    float *row = malloc((size_t)k * sizeof *row);
    if (!row) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        return COLO_ENOMEM;
    }
    colo_status st = COLO_OK;
    for (int64_t r = 0; r < rows && st == COLO_OK; r++) {
        colo_dequantize_row(t->type, (const char *)t->data + (size_t)r * rb, row, k);
        for (int64_t i = 0; i < k; i++)
            if (!isfinite(row[i])) {
                colo_set_err(err, errlen, "%s: tensor %s: element %lld of row %lld is %s", path, t->name,
                             (long long)i, (long long)r, isnan(row[i]) ? "NaN" : "infinite");
                st = COLO_EFORMAT;
                break;
            }
    }
    free(row);
    return st;
}

/* One pair against the base: A (in, rank), B (rank, out), 2-D, a type
 * that converts to F32. */
static colo_status check_pair(const base_shape *b, int l, int f, const tensor_pair *tp, const char *path, int *rank,
                              char *err, size_t errlen)
{
    int64_t in, out;
    const char *nm = file_names[f];
    if (!tp->a || !tp->b) {
        colo_set_err(err, errlen, "%s: blk.%d.%s.weight.lora_%s is missing (lora_a and lora_b come in pairs)", path, l,
                     nm, tp->a ? "b" : "a");
        return COLO_EFORMAT;
    }
    if (!product_dims(b, f, &in, &out)) {
        colo_set_err(err, errlen, "%s: tensor %s: the base model has no blk.%d.%s.weight", path, tp->a->name, l, nm);
        return COLO_EFORMAT;
    }
    const colo_gguf_tensor *ts[2] = {tp->a, tp->b};
    for (int i = 0; i < 2; i++)
        if (ts[i]->n_dims != 2 || !colo_dtype_is_weight(ts[i]->type)) {
            colo_set_err(err, errlen, "%s: tensor %s: a 2-D matrix of a weight type is expected", path, ts[i]->name);
            return COLO_EFORMAT;
        }
    int64_t r = tp->a->ne[1];
    if (tp->a->ne[0] != in || tp->b->ne[1] != out) {
        colo_set_err(err, errlen,
                     "%s: tensors %s (%lld x %lld) and %s (%lld x %lld) do not fit the base's %s (%lld inputs, %lld "
                     "outputs)",
                     path, tp->a->name, (long long)tp->a->ne[0], (long long)tp->a->ne[1], tp->b->name,
                     (long long)tp->b->ne[0], (long long)tp->b->ne[1], nm, (long long)in, (long long)out);
        return COLO_EFORMAT;
    }
    if (tp->b->ne[0] != r || r < 1 || r > COLO_LORA_MAX_RANK ||
        (colo_dtype_block_elems(tp->b->type) > 1 && r % colo_dtype_block_elems(tp->b->type))) {
        colo_set_err(err, errlen, "%s: tensor %s: rank %lld does not match %s's %lld (or is over %d)", path,
                     tp->b->name, (long long)tp->b->ne[0], tp->a->name, (long long)r, COLO_LORA_MAX_RANK);
        return COLO_EFORMAT;
    }
    *rank = (int)r;
    return COLO_OK;
}

/* Every tensor of g placed in the plan and checked; p->info filled. */
static colo_status read_plan(const colo_gguf *g, const char *path, const base_shape *b, adapter_plan *p, char *err,
                             size_t errlen)
{
    memset(&p->info, 0, sizeof p->info);
    colo_status st = check_keys(g, path, b, &p->info.alpha, err, errlen);
    if (st != COLO_OK)
        return st;
    if (!(p->p = calloc((size_t)b->n_layer * F_N, sizeof *p->p))) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        return COLO_ENOMEM;
    }
    int n = colo_gguf_n_tensors(g);
    for (int i = 0; i < n; i++) {
        const colo_gguf_tensor *t = colo_gguf_tensor_at(g, i);
        int l, f;
        bool is_b;
        if (!parse_name(t->name, b->n_layer, &l, &f, &is_b)) {
            colo_set_err(err, errlen,
                         "%s: tensor %s: not a LoRA tensor colo applies (blk.N.<product>.weight.lora_a/lora_b of "
                         "attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down; N < %d)",
                         path, t->name, b->n_layer);
            return COLO_EFORMAT;
        }
        const colo_gguf_tensor **dst = is_b ? &p->p[l * F_N + f].b : &p->p[l * F_N + f].a;
        if (*dst) {
            colo_set_err(err, errlen, "%s: tensor %s appears twice", path, t->name);
            return COLO_EFORMAT;
        }
        *dst = t;
    }
    for (int l = 0; l < b->n_layer; l++)
        for (int f = 0; f < F_N; f++) {
            tensor_pair *tp = &p->p[l * F_N + f];
            if (!tp->a && !tp->b)
                continue;
            int r;
            if ((st = check_pair(b, l, f, tp, path, &r, err, errlen)) != COLO_OK ||
                (st = check_values(tp->a, path, err, errlen)) != COLO_OK ||
                (st = check_values(tp->b, path, err, errlen)) != COLO_OK)
                return st;
            p->info.rank = r > p->info.rank ? r : p->info.rank;
            p->info.n_products++;
        }
    if (!p->info.n_products) {
        colo_set_err(err, errlen, "%s: no LoRA tensors", path);
        return COLO_EFORMAT;
    }
    p->info.f16 = true; /* kept as the file has it when all are F16, else converted to F32 */
    for (int i = 0; i < b->n_layer * F_N; i++)
        if (p->p[i].a && (p->p[i].a->type != COLO_F16 || p->p[i].b->type != COLO_F16))
            p->info.f16 = false;
    size_t es = p->info.f16 ? 2 : 4;
    for (int l = 0; l < b->n_layer; l++)
        for (int f = 0; f < F_N; f++) {
            const tensor_pair *tp = &p->p[l * F_N + f];
            int64_t in, out;
            if (!tp->a || !product_dims(b, f, &in, &out))
                continue;
            size_t r = (size_t)tp->a->ne[1];
            p->info.bytes += (r * (size_t)in * es + 63) / 64 * 64 + (r * (size_t)out * es + 63) / 64 * 64;
        }
    return COLO_OK;
}

colo_status colo_lora_check(const char *base_path, const char *path, colo_lora_info *out, char *err, size_t errlen)
{
    colo_gguf *bg = colo_gguf_open(base_path, err, errlen);
    if (!bg)
        return COLO_EIO;
    colo_llama_hparams hp;
    char msg[256];
    if (colo_llama_read_hparams(bg, &hp, msg, sizeof msg) != COLO_OK) {
        colo_set_err(err, errlen, "%s: %s", base_path, msg);
        colo_gguf_close(bg);
        return COLO_EFORMAT;
    }
    base_shape b = {hp.arch, hp.n_layer, hp.n_embd, hp.q_dim, (int64_t)hp.n_kv_head * hp.head_dim, hp.n_ff,
                    colo_gguf_find_tensor(bg, "blk.0.attn_qkv.weight") != NULL, colo_llama_traits(hp.arch)->fused_up};
    colo_gguf_close(bg);
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return COLO_EIO;
    adapter_plan p = {0};
    colo_status st = read_plan(g, path, &b, &p, err, errlen);
    if (st == COLO_OK && out)
        *out = p.info;
    free(p.p);
    colo_gguf_close(g);
    return st;
}

/* ---- in the base's arena ------------------------------------------------------------ */

struct colo_lora_adapter {
    void *mem;      /* one arena allocation: every product's A and B^T */
    colo_lora_info info;
};

static _Atomic uint64_t next_uid = 1;

static base_shape shape_of(const colo_llama *m)
{
    const colo_llama_hparams *hp = &m->hp;
    return (base_shape){hp->arch, hp->n_layer, hp->n_embd, hp->q_dim, (int64_t)hp->n_kv_head * hp->head_dim,
                        hp->n_ff, m->n_layers_fused_qkv > 0, m->traits->fused_up};
}

/* Tensor t (rows of row_len) into dst, transposed (dst (row_len, rows))
 * when transpose: as F16 when f16 (t is F16), else as F32. */
static colo_status copy_tensor(const colo_gguf_tensor *t, void *dst, bool transpose, bool f16)
{
    int64_t k = t->ne[0], rows = t->ne[1];
    if (f16) {
        const uint16_t *src = t->data;
        uint16_t *d = dst;
        if (!transpose)
            memcpy(d, src, (size_t)k * rows * 2);
        for (int64_t r = 0; transpose && r < rows; r++)
            for (int64_t i = 0; i < k; i++)
                d[i * rows + r] = src[r * k + i];
        return COLO_OK;
    }
    float *df = dst;
    size_t rb = colo_dtype_row_bytes(t->type, k);
    float *row = malloc((size_t)k * sizeof *row);
    if (!row)
        return COLO_ENOMEM;
    for (int64_t r = 0; r < rows; r++) {
        colo_dequantize_row(t->type, (const char *)t->data + (size_t)r * rb, transpose ? row : df + r * k, k);
        if (transpose)
            for (int64_t i = 0; i < k; i++)
                df[i * rows + r] = row[i];
    }
    free(row);
    return COLO_OK;
}

/* A view: A at a, B^T from column col of bt (element size es: 2 F16, 4 F32). */
static colo_lora_slot view(const char *a, const char *bt, int64_t col, size_t es, int r, int64_t out, float s)
{
    colo_lora_slot v = {.rank = r, .b_stride = (int)out, .scale = s};
    if (es == 2)
        v.a16 = (const uint16_t *)a, v.b16 = (const uint16_t *)(bt + col * 2);
    else
        v.a = (const float *)a, v.b = (const float *)(bt + col * 4);
    return v;
}

/* The slots of layer l's forward products (COLO_LORA_PRODUCTS) for a pair
 * of file product f: A at a (rank, in), B^T at bt (rank, out). */
static void set_views(colo_lora_slot *row, int f, const char *a, const char *bt, size_t es, int r, float s,
                      const base_shape *b)
{
    int64_t in, out;
    product_dims(b, f, &in, &out);
    colo_lora_slot v = view(a, bt, 0, es, r, out, s);
    switch (f) {
    case F_Q: row[COLO_LORA_Q * COLO_LORA_SLOTS] = v; break;
    case F_K: row[COLO_LORA_K * COLO_LORA_SLOTS] = v; break;
    case F_V: row[COLO_LORA_V * COLO_LORA_SLOTS] = v; break;
    case F_QKV:
        row[COLO_LORA_Q * COLO_LORA_SLOTS] = v;
        row[COLO_LORA_K * COLO_LORA_SLOTS] = view(a, bt, b->Q, es, r, out, s);
        row[COLO_LORA_V * COLO_LORA_SLOTS] = view(a, bt, b->Q + b->KV, es, r, out, s);
        break;
    case F_O: row[COLO_LORA_O * COLO_LORA_SLOTS] = v; break;
    case F_GATE: row[COLO_LORA_GATE * COLO_LORA_SLOTS] = v; break;
    case F_UP:
        if (b->fused_up) { /* gate is the first half, as the base's views (llama_load.c) */
            row[COLO_LORA_GATE * COLO_LORA_SLOTS] = v;
            v = view(a, bt, b->F, es, r, out, s);
        }
        row[COLO_LORA_UP * COLO_LORA_SLOTS] = v;
        break;
    case F_DOWN: row[COLO_LORA_DOWN * COLO_LORA_SLOTS] = v; break;
    }
}

/* The model's adapter state, made on the first load. */
static colo_status ensure_state(colo_llama *m)
{
    if (m->lora)
        return COLO_OK;
    colo_llama_loras *L = calloc(1, sizeof *L);
    size_t n = (size_t)m->hp.n_layer * COLO_LORA_PRODUCTS * COLO_LORA_SLOTS;
    if (!L || !(L->h_table = calloc(n, sizeof *L->h_table))) {
        free(L);
        return COLO_ENOMEM;
    }
    void *t;
    colo_status st = colo_llama_track(m, n * sizeof *L->h_table, &t);
    if (st != COLO_OK) {
        free(L->h_table);
        free(L);
        return st;
    }
    L->table = t;
    m->lora = L;
    return COLO_OK;
}

/* The table on the device again, after a load or an unload. */
static colo_status upload_table(colo_llama *m, colo_stream *s)
{
    colo_llama_loras *L = m->lora;
    size_t n = (size_t)m->hp.n_layer * COLO_LORA_PRODUCTS * COLO_LORA_SLOTS;
    L->max_rank = 0;
    for (int i = 0; i < COLO_LORA_SLOTS; i++)
        if (L->by_slot[i] && L->by_slot[i]->info.rank > L->max_rank)
            L->max_rank = L->by_slot[i]->info.rank;
    colo_status st = colo_memcpy_h2d(s, L->table, L->h_table, n * sizeof *L->h_table);
    colo_status ss = colo_stream_sync(s);
    return st != COLO_OK ? st : ss;
}

/* Every pair of p as F32 into host memory laid out as the adapter's
 * arena allocation at dev, and the slot views into dev. */
static colo_status fill_adapter(colo_llama *m, const adapter_plan *p, const base_shape *b, float scale, int slot,
                                char *host, char *dev)
{
    size_t off = 0;
    for (int l = 0; l < b->n_layer; l++)
        for (int f = 0; f < F_N; f++) {
            const tensor_pair *tp = &p->p[l * F_N + f];
            if (!tp->a)
                continue;
            int64_t in, out;
            product_dims(b, f, &in, &out);
            int r = (int)tp->a->ne[1];
            size_t es = p->info.f16 ? 2 : 4, ab = (size_t)r * in * es, bb = (size_t)r * out * es;
            size_t ab_pad = (ab + 63) / 64 * 64;
            colo_status st;
            if ((st = copy_tensor(tp->a, host + off, false, p->info.f16)) != COLO_OK ||
                (st = copy_tensor(tp->b, host + off + ab_pad, true, p->info.f16)) != COLO_OK)
                return st;
            float sl = p->info.alpha != 0.0f ? scale * p->info.alpha / (float)r : scale;
            colo_lora_slot *row = m->lora->h_table + (size_t)l * COLO_LORA_PRODUCTS * COLO_LORA_SLOTS + slot;
            set_views(row, f, dev + off, dev + off + ab_pad, es, r, sl, b);
            off += ab_pad + (bb + 63) / 64 * 64;
        }
    return COLO_OK;
}

static void clear_views(colo_llama *m, int slot)
{
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p < COLO_LORA_PRODUCTS; p++)
            m->lora->h_table[((size_t)l * COLO_LORA_PRODUCTS + p) * COLO_LORA_SLOTS + slot] = (colo_lora_slot){0};
}

colo_status colo_llama_lora_load(colo_llama *m, colo_stream *s, const char *path, float scale, int *slot,
                                 char *err, size_t errlen)
{
    int sl = -1;
    for (int i = 0; i < COLO_LORA_SLOTS && sl < 0; i++)
        if (!m->lora || !m->lora->by_slot[i])
            sl = i;
    if (sl < 0) {
        colo_set_err(err, errlen, "%s: the model holds %d adapters already", path, COLO_LORA_SLOTS);
        return COLO_ENOMEM;
    }
    colo_status st = colo_llama_lora_load_in(m, s, path, scale, sl, err, errlen);
    if (st == COLO_OK)
        *slot = sl;
    return st;
}

colo_status colo_llama_lora_load_in(colo_llama *m, colo_stream *s, const char *path, float scale, int sl,
                                    char *err, size_t errlen)
{
    if (sl < 0 || sl >= COLO_LORA_SLOTS || (m->lora && m->lora->by_slot[sl])) {
        colo_set_err(err, errlen, "%s: adapter slot %d is not free", path, sl);
        return COLO_EINVAL;
    }
    base_shape b = shape_of(m);
    colo_gguf *g = colo_gguf_open(path, err, errlen);
    if (!g)
        return COLO_EIO;
    adapter_plan p = {0};
    struct colo_lora_adapter *a = NULL;
    char *host = NULL;
    colo_status st = read_plan(g, path, &b, &p, err, errlen);
    if (st != COLO_OK)
        goto out;
    if ((st = ensure_state(m)) != COLO_OK) {
        colo_set_err(err, errlen, "%s: out of memory for the adapter table", path);
        goto out;
    }
    st = COLO_ENOMEM;
    if (!(a = calloc(1, sizeof *a)) || !(host = malloc(p.info.bytes))) {
        colo_set_err(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if ((st = colo_llama_track(m, p.info.bytes, &a->mem)) != COLO_OK) {
        colo_set_err(err, errlen, "%s: %zu bytes do not fit in the model's memory arena (%zu of %zu bytes used)", path,
                     p.info.bytes, colo_arena_used(m->arena), colo_arena_limit(m->arena));
        goto out;
    }
    a->info = p.info;
    a->info.scale = scale;
    a->info.uid = atomic_fetch_add(&next_uid, 1);
    if ((st = fill_adapter(m, &p, &b, scale, sl, host, a->mem)) != COLO_OK ||
        (st = colo_memcpy_h2d(s, a->mem, host, p.info.bytes)) != COLO_OK ||
        (st = colo_stream_sync(s)) != COLO_OK) {
        colo_set_err(err, errlen, "%s: copying the adapter to the device failed (%s)", path, colo_status_str(st));
        clear_views(m, sl);
        goto out;
    }
    m->lora->by_slot[sl] = a;
    if ((st = upload_table(m, s)) != COLO_OK) {
        colo_set_err(err, errlen, "%s: copying the adapter table to the device failed (%s)", path,
                     colo_status_str(st));
        m->lora->by_slot[sl] = NULL;
        clear_views(m, sl);
        goto out;
    }
    a = NULL;
out:
    if (a && a->mem)
        colo_llama_untrack(m, a->mem);
    free(a);
    free(host);
    free(p.p);
    colo_gguf_close(g);
    return st;
}

void colo_llama_lora_unload(colo_llama *m, colo_stream *s, int slot)
{
    if (!m->lora || slot < 0 || slot >= COLO_LORA_SLOTS || !m->lora->by_slot[slot])
        return;
    clear_views(m, slot);
    struct colo_lora_adapter *a = m->lora->by_slot[slot];
    m->lora->by_slot[slot] = NULL;
    upload_table(m, s); /* synchronises: no step reads the adapter afterwards */
    colo_llama_untrack(m, a->mem);
    free(a);
    colo_llama_loras *L = m->lora;
    if (L->max_rank < L->cap_rank) { /* the scratch as the adapters left need it (colo_lora_room_bytes) */
        colo_llama_untrack(m, L->step_mem);
        L->step_mem = NULL;
        L->d_row = NULL;
        L->tmp = NULL;
        L->cap_rows = L->cap_rank = 0;
    }
}

colo_status colo_llama_lora_get(const colo_llama *m, int slot, colo_lora_info *out)
{
    if (!m->lora || slot < 0 || slot >= COLO_LORA_SLOTS || !m->lora->by_slot[slot])
        return COLO_EINVAL;
    *out = m->lora->by_slot[slot]->info;
    return COLO_OK;
}

size_t colo_llama_lora_bytes(const colo_llama *m)
{
    size_t n = 0;
    for (int i = 0; m->lora && i < COLO_LORA_SLOTS; i++)
        if (m->lora->by_slot[i])
            n += m->lora->by_slot[i]->info.bytes;
    return n;
}

static size_t arena_round(size_t bytes)
{
    return (bytes + COLO_ARENA_GRAIN_BYTES - 1) / COLO_ARENA_GRAIN_BYTES * COLO_ARENA_GRAIN_BYTES;
}

size_t colo_lora_arena_bytes(const colo_lora_info *info) { return arena_round(info->bytes); }

size_t colo_lora_room_bytes(const colo_llama_hparams *hp, size_t adapter_bytes, int max_rank, int max_rows)
{
    if (!adapter_bytes)
        return 0;
    size_t table = (size_t)hp->n_layer * COLO_LORA_PRODUCTS * COLO_LORA_SLOTS * sizeof(colo_lora_slot);
    return adapter_bytes + arena_round(table) + arena_round(colo_lora_step_bytes(max_rows, max_rank));
}

void colo_llama_lora_fini(colo_llama *m)
{
    if (!m->lora)
        return;
    for (int i = 0; i < COLO_LORA_SLOTS; i++)
        free(m->lora->by_slot[i]); /* their memory goes with the model's allocations */
    free(m->lora->h_table);
    free(m->lora->h_row);
    free(m->lora);
    m->lora = NULL;
}
