/* BERT encoder (all-MiniLM-L6-v2: 6 layers, E 384, 12 heads, F 1536,
 * V 30522, 512 positions, max_seq_length 256, GELU, LayerNorm eps 1e-12).
 * Matrix products run on the real tokens packed back to back; attention
 * alone sees the batch padded to its longest sequence. */
#include "models/arch/alloc_set.h"
#include "models/arch/bert.h"
#include "models/format/repack.h"
#include "models/format/safetensors.h"
#include "runtime/file.h"
#include "runtime/log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    void *wqkv;         /* (3E, E): query, key, value rows */
    float *bqkv;        /* (3E) */
    void *wo;           /* (E, E) attention output */
    float *bo;          /* (E) */
    float *ln1_g, *ln1_b; /* (E) attention.output.LayerNorm */
    void *wi;           /* (F, E) intermediate */
    float *bi;          /* (F) */
    void *wd;           /* (E, F) output */
    float *bd;          /* (E) */
    float *ln2_g, *ln2_b; /* (E) output.LayerNorm */
} layer;

struct colo_bert {
    colo_bert_hparams hp;
    colo_dtype wt;      /* matrices and embedding tables */
    colo_arena *arena;
    colo_wordpiece *wp;
    void *word, *pos, *type; /* (V, E), (P, E), (TT, E) */
    float *ln_g, *ln_b;      /* (E) embeddings.LayerNorm */
    layer *layers;
    size_t weight_bytes;
    colo_alloc_set allocs; /* every arena allocation, freed at the end */
    bool wp_borrowed;      /* wp is the caller's (colo_bert_config.tokenizer) */
    /* weights mapped from their repack cache file (models/format/repack.h):
     * the mapping, the arena's address space of as many bytes and the
     * charge for them; NULL when they are copies in the arena */
    colo_repack *rp;
    void *map_res;
    size_t map_charged_bytes;
    /* while the weights' layout is laid out in one block (building the
     * cache file, or pointing into it): the block (NULL: counting only),
     * the bytes laid out so far, and whether tensors are only placed, not
     * read from the file */
    bool carving, bind_only;
    uint8_t *carve;
    size_t carve_off;
    /* activations for up to cap_tokens padded tokens and cap_seqs sequences */
    int cap_tokens, cap_seqs;
    void *act;
    float *x, *h, *att, *qkv, *qkv_pad, *att_pad, *ff, *pooled;
    int32_t *d_ids, *d_pos, *d_zero, *d_to_pad, *d_to_packed, *d_lens;
    int32_t *host;      /* host staging of the int arrays above: 5 * cap_tokens + cap_seqs */
};

static colo_status track(colo_bert *m, size_t bytes, void **out)
{
    if (!m->carving)
        return colo_alloc_set_take(&m->allocs, m->arena, bytes, out);
    size_t off = (m->carve_off + 255) & ~(size_t)255; /* as the arena aligns */
    *out = m->carve ? m->carve + off : NULL;
    m->carve_off = off + bytes;
    return COLO_OK;
}

/* ---- configuration files ------------------------------------------------------ */

/* Parses dir/name into *root; a missing optional file gives COLO_OK and NULL. */
static colo_status read_json(const char *dir, const char *name, bool required, json_t **root, char *msg,
                             size_t msglen)
{
    char path[1200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *root = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        if (!required)
            return COLO_OK;
        snprintf(msg, msglen, "%s is missing", name);
        return COLO_EIO;
    }
    FILE *f = colo_file_fopen_regular(path, msg, msglen);
    if (!f)
        return COLO_EIO;
    *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!*root || !json_is_object(*root)) {
        if (*root)
            snprintf(msg, msglen, "%s: not a JSON object", name);
        else
            snprintf(msg, msglen, "%s: %s (line %d)", name, je.text, je.line);
        json_decref(*root);
        *root = NULL;
        return COLO_EFORMAT;
    }
    return COLO_OK;
}

static colo_status get_int(const json_t *o, const char *key, int dflt, int *out, char *msg, size_t msglen)
{
    const json_t *v = json_object_get(o, key);
    if (!v && dflt >= 0) {
        *out = dflt;
        return COLO_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 24)) {
        snprintf(msg, msglen, "config.json: %s is %s", key, v ? "not a positive integer" : "missing");
        return COLO_EFORMAT;
    }
    *out = (int)json_integer_value(v);
    return COLO_OK;
}

static bool str_is(const json_t *o, const char *key, const char *want, bool absent_ok)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return absent_ok;
    return json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

/* Hyperparameters and tokenizer settings from the folder's JSON files. */
static colo_status read_config(const char *dir, const colo_bert_config *cfg, colo_bert_hparams *hp,
                               colo_wordpiece_config *wc, char *msg, size_t msglen)
{
    json_t *c = NULL, *sb = NULL, *tc = NULL, *pool = NULL;
    colo_status st;
    memset(hp, 0, sizeof *hp);
    if ((st = read_json(dir, "config.json", true, &c, msg, msglen)) != COLO_OK)
        return st;
    st = COLO_EFORMAT;
    if (!str_is(c, "model_type", "bert", false)) {
        snprintf(msg, msglen, "config.json: model_type is not \"bert\"");
        goto out_json;
    }
    if (!str_is(c, "hidden_act", "gelu", true) || !str_is(c, "position_embedding_type", "absolute", true)) {
        snprintf(msg, msglen, "config.json: only hidden_act \"gelu\" and absolute positions are supported");
        st = COLO_EUNSUPPORTED;
        goto out_json;
    }
    if (get_int(c, "hidden_size", -1, &hp->n_embd, msg, msglen) ||
        get_int(c, "num_hidden_layers", -1, &hp->n_layer, msg, msglen) ||
        get_int(c, "num_attention_heads", -1, &hp->n_head, msg, msglen) ||
        get_int(c, "intermediate_size", -1, &hp->n_ff, msg, msglen) ||
        get_int(c, "vocab_size", -1, &hp->n_vocab, msg, msglen) ||
        get_int(c, "max_position_embeddings", -1, &hp->n_pos, msg, msglen) ||
        get_int(c, "type_vocab_size", 2, &hp->n_type, msg, msglen))
        goto out_json;
    if (hp->n_embd % hp->n_head) {
        snprintf(msg, msglen, "config.json: %d heads do not divide hidden_size %d", hp->n_head, hp->n_embd);
        goto out_json;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    double E = hp->n_embd, params = (double)(hp->n_vocab + hp->n_pos + hp->n_type) * E +
                                    (double)hp->n_layer * (4 * E * E + 2 * E * hp->n_ff);
    if (params > 1e11) { /* keeps every byte count below (and far from) SIZE_MAX */
        snprintf(msg, msglen, "config.json: %.3g parameters is more than colo supports (1e11)", params);
        st = COLO_EUNSUPPORTED;
        goto out_json;
    }
    const json_t *eps = json_object_get(c, "layer_norm_eps");
    hp->ln_eps = eps ? (float)json_number_value(eps) : 1e-12f;
    if (eps && !(json_is_number(eps) && hp->ln_eps > 0)) {
        snprintf(msg, msglen, "config.json: layer_norm_eps is not a positive number");
        goto out_json;
    }

    if ((st = read_json(dir, "sentence_bert_config.json", false, &sb, msg, msglen)) ||
        (st = read_json(dir, "tokenizer_config.json", false, &tc, msg, msglen)) ||
        (st = read_json(dir, "1_Pooling/config.json", false, &pool, msg, msglen)))
        goto out_json;
    st = COLO_EFORMAT;
    hp->max_len = hp->n_pos < 512 ? hp->n_pos : 512;
    const json_t *msl = sb ? json_object_get(sb, "max_seq_length") : NULL;
    if (msl) {
        if (!json_is_integer(msl) || json_integer_value(msl) < 2 || json_integer_value(msl) > hp->n_pos) {
            snprintf(msg, msglen, "sentence_bert_config.json: max_seq_length is not in [2, %d]", hp->n_pos);
            goto out_json;
        }
        hp->max_len = (int)json_integer_value(msl);
    }
    if (cfg && cfg->max_len) {
        if (cfg->max_len < 2 || cfg->max_len > hp->n_pos) {
            snprintf(msg, msglen, "max_len %d is not in [2, %d]", cfg->max_len, hp->n_pos);
            st = COLO_EINVAL;
            goto out_json;
        }
        hp->max_len = cfg->max_len;
    }
    if (pool && (!json_is_true(json_object_get(pool, "pooling_mode_mean_tokens")) ||
                 json_is_true(json_object_get(pool, "pooling_mode_cls_token")) ||
                 json_is_true(json_object_get(pool, "pooling_mode_max_tokens")))) {
        snprintf(msg, msglen, "1_Pooling/config.json: only mean pooling is supported");
        st = COLO_EUNSUPPORTED;
        goto out_json;
    }
    *wc = colo_wordpiece_default_config(hp->max_len);
    if (tc) {
        const json_t *lc = json_object_get(tc, "do_lower_case"), *sa = json_object_get(tc, "strip_accents"),
                     *cjk = json_object_get(tc, "tokenize_chinese_chars");
        if (json_is_boolean(lc))
            wc->lowercase = json_is_true(lc);
        wc->strip_accents = json_is_boolean(sa) ? json_is_true(sa) : wc->lowercase;
        if (json_is_boolean(cjk))
            wc->chinese_chars = json_is_true(cjk);
    }
    st = COLO_OK;
out_json:
    json_decref(c);
    json_decref(sb);
    json_decref(tc);
    json_decref(pool);
    return st;
}

/* ---- weights ------------------------------------------------------------------- */

typedef struct {
    colo_bert *m;
    const colo_safetensors *f;
    colo_stream *s;
    const char *prefix; /* "" or "bert." */
} loader;

/* Copies tensor name (shape (rows, cols), or (rows) when cols is 0) into
 * dst as type want (F32 or F16), converting on the device. */
static colo_status load_into(loader *ld, const char *name, int rows, int cols, colo_dtype want, void *dst,
                             char *msg, size_t msglen)
{
    char full[160];
    if (ld->m->bind_only) /* the bytes are in the cache file already */
        return COLO_OK;
    snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    const colo_safetensors_tensor *t = colo_safetensors_find(ld->f, full);
    if (!t) {
        snprintf(msg, msglen, "tensor %s is missing", full);
        return COLO_EFORMAT;
    }
    bool ok = cols ? t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols
                   : t->n_dims == 1 && t->shape[0] == rows;
    if (!ok) {
        char got[96] = "";
        for (int i = 0; i < t->n_dims && strlen(got) < 70; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (cols)
            snprintf(msg, msglen, "tensor %s has shape [%s], expected [%d, %d]", full, got, rows, cols);
        else
            snprintf(msg, msglen, "tensor %s has shape [%s], expected [%d]", full, got, rows);
        return COLO_EFORMAT;
    }
    if (!t->computable) {
        snprintf(msg, msglen, "tensor %s has dtype %s (F32, F16 or BF16 expected)", full, t->dtype_name);
        return COLO_EFORMAT;
    }
    colo_status st;
    if (t->type == want) {
        st = colo_memcpy_h2d(ld->s, dst, t->data, t->bytes);
    } else {
        void *tmp;
        if ((st = colo_arena_alloc(ld->m->arena, t->bytes, 256, &tmp)) != COLO_OK) {
            snprintf(msg, msglen, "tensor %s: no room in the memory arena to convert it", full);
            return st;
        }
        if ((st = colo_memcpy_h2d(ld->s, tmp, t->data, t->bytes)) == COLO_OK)
            st = colo_op_dequantize(ld->s, tmp, t->type, dst, want, t->n_elements);
        colo_status st2 = colo_stream_sync(ld->s);
        colo_arena_free(ld->m->arena, tmp);
        if (st == COLO_OK)
            st = st2;
    }
    if (st != COLO_OK) {
        snprintf(msg, msglen, "tensor %s: copy to the device failed (%s)", full, colo_status_str(st));
        return st;
    }
    return COLO_OK;
}

/* Allocates (rows, cols) of type want and loads name into it. */
static colo_status load_new(loader *ld, const char *name, int rows, int cols, colo_dtype want, void **out,
                            char *msg, size_t msglen)
{
    size_t bytes = (size_t)rows * (cols ? (size_t)cols : 1) * (want == COLO_F16 ? 2 : 4);
    colo_status st = track(ld->m, bytes, out);
    if (st != COLO_OK) {
        snprintf(msg, msglen, "tensor %s%s: %zu bytes do not fit in the memory arena (%zu of %zu bytes used)",
                 ld->prefix, name, bytes, colo_arena_used(ld->m->arena), colo_arena_limit(ld->m->arena));
        return st;
    }
    ld->m->weight_bytes += bytes;
    return load_into(ld, name, rows, cols, want, *out, msg, msglen);
}

static colo_status load_layer(loader *ld, int l, layer *L, char *msg, size_t msglen)
{
    const colo_bert_hparams *hp = &ld->m->hp;
    int E = hp->n_embd, F = hp->n_ff;
    colo_dtype wt = ld->m->wt;
    size_t esz = wt == COLO_F16 ? 2 : 4;
    char n[16][96];
    static const char *const sfx[16] = {
        "attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight",
        "attention.self.query.bias", "attention.self.key.bias", "attention.self.value.bias",
        "attention.output.dense.weight", "attention.output.dense.bias", "attention.output.LayerNorm.weight",
        "attention.output.LayerNorm.bias", "intermediate.dense.weight", "intermediate.dense.bias",
        "output.dense.weight", "output.dense.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"};
    for (int i = 0; i < 16; i++)
        snprintf(n[i], sizeof n[i], "encoder.layer.%d.%s", l, sfx[i]);
    colo_status st;
    void *p;
    if ((st = track(ld->m, (size_t)3 * E * E * esz, &p)) != COLO_OK) {
        snprintf(msg, msglen, "tensor %s%s: no room in the memory arena", ld->prefix, n[0]);
        return st;
    }
    L->wqkv = p;
    if ((st = track(ld->m, (size_t)3 * E * 4, &p)) != COLO_OK) {
        snprintf(msg, msglen, "tensor %s%s: no room in the memory arena", ld->prefix, n[3]);
        return st;
    }
    L->bqkv = p;
    ld->m->weight_bytes += (size_t)3 * E * E * esz + (size_t)3 * E * 4;
    for (int i = 0; i < 3; i++)
        if ((st = load_into(ld, n[i], E, E, wt, (char *)L->wqkv + (size_t)i * E * E * esz, msg, msglen)) ||
            (st = load_into(ld, n[3 + i], E, 0, COLO_F32, L->bqkv + (size_t)i * E, msg, msglen)))
            return st;
    if ((st = load_new(ld, n[6], E, E, wt, &L->wo, msg, msglen)) ||
        (st = load_new(ld, n[7], E, 0, COLO_F32, (void **)&L->bo, msg, msglen)) ||
        (st = load_new(ld, n[8], E, 0, COLO_F32, (void **)&L->ln1_g, msg, msglen)) ||
        (st = load_new(ld, n[9], E, 0, COLO_F32, (void **)&L->ln1_b, msg, msglen)) ||
        (st = load_new(ld, n[10], F, E, wt, &L->wi, msg, msglen)) ||
        (st = load_new(ld, n[11], F, 0, COLO_F32, (void **)&L->bi, msg, msglen)) ||
        (st = load_new(ld, n[12], E, F, wt, &L->wd, msg, msglen)) ||
        (st = load_new(ld, n[13], E, 0, COLO_F32, (void **)&L->bd, msg, msglen)) ||
        (st = load_new(ld, n[14], E, 0, COLO_F32, (void **)&L->ln2_g, msg, msglen)) ||
        (st = load_new(ld, n[15], E, 0, COLO_F32, (void **)&L->ln2_b, msg, msglen)))
        return st;
    return COLO_OK;
}

/* "bert." when the file's names carry that prefix. */
static const char *prefix_of(const colo_safetensors *f)
{
    return !colo_safetensors_find(f, "embeddings.word_embeddings.weight") &&
                   colo_safetensors_find(f, "bert.embeddings.word_embeddings.weight")
               ? "bert."
               : "";
}

/* Every weight, in one order: loaded from the file into the arena, or
 * laid out in one block (m->carving: copied into it, or only placed). */
static colo_status load_weights(loader *ldp, char *msg, size_t msglen)
{
    loader ld = *ldp;
    colo_bert *m = ld.m;
    const colo_bert_hparams *hp = &m->hp;
    int E = hp->n_embd;
    colo_status st;
    if ((st = load_new(&ld, "embeddings.word_embeddings.weight", hp->n_vocab, E, m->wt, &m->word, msg, msglen)) ||
        (st = load_new(&ld, "embeddings.position_embeddings.weight", hp->n_pos, E, m->wt, &m->pos, msg, msglen)) ||
        (st = load_new(&ld, "embeddings.token_type_embeddings.weight", hp->n_type, E, m->wt, &m->type, msg,
                       msglen)) ||
        (st = load_new(&ld, "embeddings.LayerNorm.weight", E, 0, COLO_F32, (void **)&m->ln_g, msg, msglen)) ||
        (st = load_new(&ld, "embeddings.LayerNorm.bias", E, 0, COLO_F32, (void **)&m->ln_b, msg, msglen)))
        return st;
    if (!m->layers && !(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers))) {
        snprintf(msg, msglen, "out of memory");
        return COLO_ENOMEM;
    }
    for (int l = 0; l < hp->n_layer; l++)
        if ((st = load_layer(&ld, l, &m->layers[l], msg, msglen)) != COLO_OK)
            return st;
    return COLO_OK;
}

/* Lays the weights out in one block at base (NULL: counts its bytes), reading
 * them from f when f is not NULL, else only placing them. */
static colo_status carve_weights(colo_bert *m, const colo_safetensors *f, colo_stream *s, uint8_t *base,
                                 size_t *bytes, char *msg, size_t msglen)
{
    m->carving = true, m->bind_only = !f, m->carve = base, m->carve_off = 0;
    m->weight_bytes = 0;
    loader ld = {.m = m, .f = f, .s = s, .prefix = f ? prefix_of(f) : ""};
    colo_status st = load_weights(&ld, msg, msglen);
    if (st == COLO_OK && f)
        st = colo_stream_sync(s);
    *bytes = m->carve_off;
    m->carving = m->bind_only = false, m->carve = NULL;
    return st;
}

typedef struct {
    colo_bert *m;
    colo_stream *s;
    const char *path; /* model.safetensors */
} fill_ctx;

/* Writes the repacked weights into the cache file's block. */
static colo_status fill_cache(void *ud, void *dst, size_t bytes, char *err, size_t errlen)
{
    fill_ctx *c = ud;
    colo_safetensors *f = NULL;
    colo_status st = colo_safetensors_open(c->path, &f, err, errlen);
    if (st != COLO_OK)
        return st;
    size_t got;
    if ((st = carve_weights(c->m, f, c->s, dst, &got, err, errlen)) == COLO_OK && got != bytes) {
        colo_set_err(err, errlen, "the weights took %zu bytes, %zu were laid out", got, bytes);
        st = COLO_EFORMAT;
    }
    colo_safetensors_close(f);
    return st;
}

/* Whether the weights are mapped from a repack cache file: on the CPU,
 * unless COLO_WEIGHTS=copy asks for copies in the arena (as llama_load.c). */
static bool weights_mapped(colo_stream *s)
{
    const char *want = getenv("COLO_WEIGHTS");
    return colo_device_kind(colo_stream_device(s)) == COLO_BACKEND_CPU && !(want && !strcmp(want, "copy"));
}

/* The weights from their repack cache file (made first when absent, stale
 * or corrupt): Q, K and V of each layer fused into one (3E, E) matrix and
 * its bias, in weight type wt, as the forward pass reads them. The arena
 * is charged for them as for copies. COLO_EIO when the cache cannot be
 * used (the caller copies instead); another status for a bad file. */
static colo_status map_weights(colo_bert *m, const char *dir, colo_stream *s, char *msg, size_t msglen)
{
    size_t total;
    colo_status st = carve_weights(m, NULL, s, NULL, &total, msg, msglen);
    if (st != COLO_OK)
        return st;
    const colo_bert_hparams *hp = &m->hp;
    int64_t shape[] = {hp->n_layer, hp->n_embd, hp->n_ff, hp->n_vocab, hp->n_pos, hp->n_type, m->wt, (int64_t)total};
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    colo_repack_key key = {.kind = "bert", .src_path = path,
                           .layout = colo_repack_hash(COLO_REPACK_HASH_SEED, shape, sizeof shape)};
    fill_ctx fc = {m, s, path};
    bool built;
    if ((st = colo_repack_map(&key, total, fill_cache, &fc, &m->rp, &built, msg, msglen)) != COLO_OK)
        return st;
    if (built)
        COLO_INFO("%s: weights repacked once into %s", dir, colo_repack_path(m->rp));
    if ((st = colo_arena_reserve(m->arena, total, 256, &m->map_res)) == COLO_OK &&
        (st = colo_arena_charge(m->arena, total)) != COLO_OK) {
        colo_arena_free(m->arena, m->map_res);
        m->map_res = NULL;
    }
    if (st != COLO_OK) {
        snprintf(msg, msglen, "the weights' %zu bytes do not fit in the memory arena (%zu of %zu bytes used): %s",
                 total, colo_arena_used(m->arena), colo_arena_limit(m->arena), colo_status_str(st));
        colo_repack_close(m->rp);
        m->rp = NULL;
        return COLO_ENOMEM;
    }
    m->map_charged_bytes = total;
    size_t placed;
    return carve_weights(m, NULL, s, (uint8_t *)colo_repack_data(m->rp), &placed, msg, msglen);
}

colo_bert *colo_bert_load(const char *dir, const colo_bert_config *cfg, colo_arena *arena, colo_stream *s,
                          char *err, size_t errlen)
{
    char msg[512] = "", path[1200];
    colo_safetensors *f = NULL;
    colo_wordpiece_config wc;
    colo_bert *m = calloc(1, sizeof *m);
    if (!m) {
        colo_set_err(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    m->arena = arena;
    m->wt = cfg && cfg->weight_type ? cfg->weight_type : COLO_F32;
    if (m->wt != COLO_F32 && m->wt != COLO_F16) {
        snprintf(msg, sizeof msg, "weight type must be f32 or f16");
        goto out_msg;
    }
    if (read_config(dir, cfg, &m->hp, &wc, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if (cfg && cfg->tokenizer) /* the caller's, made from the same folder */
        m->wp = (colo_wordpiece *)cfg->tokenizer, m->wp_borrowed = true;
    else if (!(m->wp = colo_wordpiece_load(path, &wc, msg, sizeof msg)))
        goto out_msg;
    if (colo_wordpiece_n_vocab(m->wp) > m->hp.n_vocab) {
        snprintf(msg, sizeof msg, "vocab.txt has %d tokens, more than vocab_size %d", colo_wordpiece_n_vocab(m->wp),
                 m->hp.n_vocab);
        goto out_msg;
    }
    if (weights_mapped(s)) {
        colo_status mst = map_weights(m, dir, s, msg, sizeof msg);
        if (mst == COLO_OK)
            return m;
        if (mst != COLO_EIO)
            goto out_msg;
        COLO_WARN("%s: weights copied into memory: %s", dir, msg);
        msg[0] = 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (colo_safetensors_open(path, &f, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    loader ld = {.m = m, .f = f, .s = s, .prefix = prefix_of(f)};
    if (load_weights(&ld, msg, sizeof msg) != COLO_OK)
        goto out_msg;
    colo_status st = colo_stream_sync(s); /* the mapping is unmapped below */
    if (st != COLO_OK) {
        snprintf(msg, sizeof msg, "copying the weights failed (%s)", colo_status_str(st));
        goto out_msg;
    }
    colo_safetensors_close(f);
    return m;

out_msg:
    /* messages from the safetensors reader and the tokenizer already name their file */
    if (strncmp(msg, dir, strlen(dir)) == 0)
        colo_set_err(err, errlen, "%s", msg);
    else
        colo_set_err(err, errlen, "%s: %s", dir, msg);
    colo_stream_sync(s);
    colo_safetensors_close(f);
    colo_bert_free(m);
    return NULL;
}

void colo_bert_free(colo_bert *m)
{
    if (!m)
        return;
    colo_alloc_set_clear(&m->allocs, m->arena);
    if (m->rp) {
        colo_repack_close(m->rp); /* its pages stay in the page cache, out of the process */
        colo_arena_uncharge(m->arena, m->map_charged_bytes);
        colo_arena_free(m->arena, m->map_res);
    }
    free(m->layers);
    free(m->host);
    if (!m->wp_borrowed)
        colo_wordpiece_free(m->wp);
    free(m);
}

colo_wordpiece *colo_bert_tokenizer_load(const char *dir, const colo_bert_config *cfg, colo_bert_hparams *hp, char *err,
                                         size_t errlen)
{
    char msg[512] = "", path[1200];
    colo_wordpiece_config wc;
    colo_wordpiece *wp = NULL;
    if (read_config(dir, cfg, hp, &wc, msg, sizeof msg) == COLO_OK) {
        snprintf(path, sizeof path, "%s/vocab.txt", dir);
        wp = colo_wordpiece_load(path, &wc, msg, sizeof msg);
    }
    if (!wp)
        colo_set_err(err, errlen, "%s: %s", dir, msg);
    return wp;
}

const colo_bert_hparams *colo_bert_hparams_get(const colo_bert *m) { return &m->hp; }
const colo_wordpiece *colo_bert_tokenizer(const colo_bert *m) { return m->wp; }
int colo_bert_dim(const colo_bert *m) { return m->hp.n_embd; }
colo_arena *colo_bert_arena(const colo_bert *m) { return m->arena; }
size_t colo_bert_weight_bytes(const colo_bert *m) { return m->weight_bytes; }

colo_status colo_bert_memory_need(const char *dir, const colo_bert_config *cfg, int max_batch, int max_len,
                                  colo_bert_memory *out, char *err, size_t errlen)
{
    char msg[512] = "", path[1200];
    colo_wordpiece_config wc;
    memset(out, 0, sizeof *out);
    colo_dtype wt = cfg && cfg->weight_type ? cfg->weight_type : COLO_F32;
    colo_status st = read_config(dir, cfg, &out->hp, &wc, msg, sizeof msg);
    if (st == COLO_OK && (wt != COLO_F32 && wt != COLO_F16)) {
        snprintf(msg, sizeof msg, "weight type must be f32 or f16");
        st = COLO_EINVAL;
    }
    if (st == COLO_OK && (max_batch <= 0 || max_len < 2 || max_len > out->hp.n_pos)) {
        snprintf(msg, sizeof msg, "batch %d x %d tokens is out of range", max_batch, max_len);
        st = COLO_EINVAL;
    }
    colo_safetensors *f = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == COLO_OK && (st = colo_safetensors_open(path, &f, err, errlen)) != COLO_OK)
        return st;
    colo_safetensors_close(f);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "%s: %s", dir, msg);
        return st;
    }
    const colo_bert_hparams *hp = &out->hp;
    size_t E = hp->n_embd, F = hp->n_ff, esz = wt == COLO_F16 ? 2 : 4;
    size_t mat = (hp->n_vocab + hp->n_pos + hp->n_type) * E + hp->n_layer * (4 * E * E + 2 * E * F);
    size_t vec = 2 * E + hp->n_layer * (3 * E + E + 2 * E + F + E + 2 * E);
    out->weight_bytes = mat * esz + vec * 4;
    out->act_bytes = colo_bert_act_bytes(hp, max_batch, max_len);
    return COLO_OK;
}

/* ---- activations ------------------------------------------------------------------ */

/* Scratch for P padded tokens (>= the packed ones) and B sequences. */
static size_t act_bytes(const colo_bert_hparams *hp, size_t P, size_t B)
{
    size_t E = hp->n_embd, F = hp->n_ff;
    size_t floats = P * (E * 3 + E * 6 + E + F) + B * E; /* x h att, qkv qkv_pad, att_pad, ff; pooled */
    return floats * 4 + (P * 5 + B) * 4 + 14 * 256;     /* int arrays; 14 pieces, each 256-byte aligned */
}

size_t colo_bert_act_bytes(const colo_bert_hparams *hp, int max_batch, int max_len)
{
    return act_bytes(hp, (size_t)max_batch * (size_t)max_len, (size_t)max_batch);
}

static colo_status ensure_act(colo_bert *m, int n_tokens, int n_seqs)
{
    if (n_tokens <= m->cap_tokens && n_seqs <= m->cap_seqs)
        return COLO_OK;
    int T = n_tokens > m->cap_tokens ? n_tokens : m->cap_tokens;
    int B = n_seqs > m->cap_seqs ? n_seqs : m->cap_seqs;
    m->cap_tokens = m->cap_seqs = 0;
    size_t E = m->hp.n_embd, F = m->hp.n_ff, P = (size_t)T;
    size_t bytes = act_bytes(&m->hp, P, (size_t)B);
    colo_status st = colo_alloc_set_replace(&m->allocs, m->arena, &m->act, bytes, &m->host, P * 5 + (size_t)B);
    if (st != COLO_OK)
        return st;
    void *p = m->act;
    char *c = p;
    m->x = colo_carve(&c, P * E * sizeof(float));
    m->h = colo_carve(&c, P * E * sizeof(float));
    m->att = colo_carve(&c, P * E * sizeof(float));
    m->qkv = colo_carve(&c, P * 3 * E * sizeof(float));
    m->qkv_pad = colo_carve(&c, P * 3 * E * sizeof(float));
    m->att_pad = colo_carve(&c, P * E * sizeof(float));
    m->ff = colo_carve(&c, P * F * sizeof(float));
    m->pooled = colo_carve(&c, (size_t)B * E * sizeof(float));
    m->d_ids = colo_carve(&c, P * sizeof(int32_t));
    m->d_pos = colo_carve(&c, P * sizeof(int32_t));
    m->d_zero = colo_carve(&c, P * sizeof(int32_t));
    m->d_to_pad = colo_carve(&c, P * sizeof(int32_t));
    m->d_to_packed = colo_carve(&c, P * sizeof(int32_t));
    m->d_lens = colo_carve(&c, (size_t)B * sizeof(int32_t));
    COLO_ASSERT((size_t)(c - (char *)p) <= bytes);
    m->cap_tokens = T;
    m->cap_seqs = B;
    return COLO_OK;
}

colo_status colo_bert_reserve(colo_bert *m, int max_batch, int max_len)
{
    if (max_batch <= 0 || max_len < 1 || max_len > m->hp.max_len || (int64_t)max_batch * max_len > INT32_MAX / 16)
        return COLO_EINVAL;
    return ensure_act(m, max_batch * max_len, max_batch);
}

/* ---- tokenize, forward, encode ------------------------------------------------------ */

colo_status colo_bert_tokenize(const colo_bert *m, const char *text, size_t len, int32_t *ids, int cap, int *n,
                               bool *truncated)
{
    int n_full;
    colo_status st = colo_wordpiece_encode(m->wp, text, len, true, ids, cap, n, &n_full);
    if (st == COLO_OK && truncated)
        *truncated = *n < n_full;
    return st;
}

#define TRY(call)                                                                                           \
    do {                                                                                                    \
        colo_status st_ = (call);                                                                           \
        if (st_ != COLO_OK) {                                                                               \
            colo_stream_sync(s);                                                                            \
            return st_;                                                                                     \
        }                                                                                                   \
    } while (0)

colo_status colo_bert_forward(colo_bert *m, colo_stream *s, int n_seqs, const int32_t *const *ids,
                              const int *lens, float *out, colo_cosched_member *throttle)
{
    const colo_bert_hparams *hp = &m->hp;
    if (n_seqs <= 0 || !ids || !lens || !out)
        return COLO_EINVAL;
    int S = 0;
    int64_t T64 = 0;
    for (int b = 0; b < n_seqs; b++) {
        if (lens[b] < 1 || lens[b] > hp->max_len || !ids[b])
            return COLO_EINVAL;
        for (int j = 0; j < lens[b]; j++)
            if (ids[b][j] < 0 || ids[b][j] >= hp->n_vocab)
                return COLO_EINVAL;
        S = lens[b] > S ? lens[b] : S;
        T64 += lens[b];
    }
    if ((int64_t)n_seqs * S > INT32_MAX / 16)
        return COLO_EINVAL;
    int B = n_seqs, T = (int)T64, P = B * S;
    TRY(ensure_act(m, P, B));

    /* packed token t of sequence b at position j <-> padded row b * S + j */
    int32_t *h_ids = m->host, *h_pos = h_ids + P, *h_zero = h_pos + P, *h_to_pad = h_zero + P,
            *h_to_packed = h_to_pad + P, *h_lens = h_to_packed + P;
    for (int b = 0, t = 0; b < B; b++) {
        int first = t;
        h_lens[b] = lens[b];
        for (int j = 0; j < S; j++) {
            if (j < lens[b]) {
                h_ids[t] = ids[b][j];
                h_pos[t] = j;
                h_zero[t] = 0;
                h_to_packed[t] = b * S + j;
                h_to_pad[b * S + j] = t++;
            } else {
                h_to_pad[b * S + j] = first; /* a padding row: any real row; attention masks it */
            }
        }
    }
    TRY(colo_memcpy_h2d(s, m->d_ids, h_ids, (size_t)T * 4));
    TRY(colo_memcpy_h2d(s, m->d_pos, h_pos, (size_t)T * 4));
    TRY(colo_memcpy_h2d(s, m->d_zero, h_zero, (size_t)T * 4));
    TRY(colo_memcpy_h2d(s, m->d_to_pad, h_to_pad, (size_t)P * 4));
    TRY(colo_memcpy_h2d(s, m->d_to_packed, h_to_packed, (size_t)T * 4));
    TRY(colo_memcpy_h2d(s, m->d_lens, h_lens, (size_t)B * 4));

    int E = hp->n_embd, F = hp->n_ff, H = hp->n_head, D = hp->head_dim;
    float eps = hp->ln_eps, scale = 1.0f / sqrtf((float)D);
    TRY(colo_op_get_rows(s, m->word, m->wt, hp->n_vocab, E, m->d_ids, T, m->x));
    TRY(colo_op_get_rows(s, m->pos, m->wt, hp->n_pos, E, m->d_pos, T, m->h));
    TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)T * E));
    TRY(colo_op_get_rows(s, m->type, m->wt, hp->n_type, E, m->d_zero, T, m->h));
    TRY(colo_op_add(s, m->x, m->h, m->x, (int64_t)T * E));
    TRY(colo_op_layernorm(s, m->x, m->ln_g, m->ln_b, m->x, T, E, eps));
    for (int l = 0; l < hp->n_layer; l++) {
        const layer *L = &m->layers[l];
        if (throttle)
            colo_cosched_throttle(throttle, 15);
        TRY(colo_op_linear(s, L->wqkv, m->wt, L->bqkv, m->x, 0, m->qkv, 0, T, 3 * E, E));
        TRY(colo_op_get_rows(s, m->qkv, COLO_F32, T, 3 * E, m->d_to_pad, P, m->qkv_pad));
        TRY(colo_op_attention_bidir(s, m->qkv_pad, 3 * E, m->qkv_pad + E, 3 * E, m->qkv_pad + 2 * E, 3 * E,
                                    m->att_pad, m->d_lens, B, S, H, D, scale));
        TRY(colo_op_get_rows(s, m->att_pad, COLO_F32, P, E, m->d_to_packed, T, m->att));
        TRY(colo_op_linear(s, L->wo, m->wt, L->bo, m->att, 0, m->h, 0, T, E, E));
        TRY(colo_op_add(s, m->h, m->x, m->h, (int64_t)T * E));
        TRY(colo_op_layernorm(s, m->h, L->ln1_g, L->ln1_b, m->x, T, E, eps));
        TRY(colo_op_linear(s, L->wi, m->wt, L->bi, m->x, 0, m->ff, 0, T, F, E));
        TRY(colo_op_gelu(s, m->ff, m->ff, (int64_t)T * F));
        TRY(colo_op_linear(s, L->wd, m->wt, L->bd, m->ff, 0, m->h, 0, T, E, F));
        TRY(colo_op_add(s, m->h, m->x, m->h, (int64_t)T * E));
        TRY(colo_op_layernorm(s, m->h, L->ln2_g, L->ln2_b, m->x, T, E, eps));
    }
    TRY(colo_op_get_rows(s, m->x, COLO_F32, T, E, m->d_to_pad, P, m->att_pad));
    TRY(colo_op_mean_pool(s, m->att_pad, m->d_lens, m->pooled, B, S, E));
    TRY(colo_op_l2norm(s, m->pooled, B, E));
    TRY(colo_memcpy_d2h(s, out, m->pooled, (size_t)B * E * sizeof(float)));
    return colo_stream_sync(s);
}

colo_status colo_bert_encode(colo_bert *m, colo_stream *s, const char *const *texts, const size_t *lens, int n,
                             int max_batch, float *out)
{
    if (n < 0 || max_batch <= 0 || (n && (!texts || !out)))
        return COLO_EINVAL;
    int ml = m->hp.max_len, E = m->hp.n_embd;
    int chunk = n < max_batch ? n : max_batch;
    colo_status st = COLO_OK;
    int32_t *buf = malloc((size_t)(chunk ? chunk : 1) * ml * sizeof *buf);
    int32_t **rows = malloc((size_t)(chunk ? chunk : 1) * sizeof *rows);
    int *nt = malloc((size_t)(chunk ? chunk : 1) * sizeof *nt);
    if (!buf || !rows || !nt) {
        st = COLO_ENOMEM;
        goto out_free;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int nb = n - i0 < chunk ? n - i0 : chunk;
        for (int i = 0; i < nb; i++) {
            const char *t = texts[i0 + i];
            if (!t) {
                st = COLO_EINVAL;
                goto out_free;
            }
            rows[i] = buf + (size_t)i * ml;
            if ((st = colo_bert_tokenize(m, t, lens ? lens[i0 + i] : strlen(t), rows[i], ml, &nt[i], NULL)))
                goto out_free;
        }
        if ((st = colo_bert_forward(m, s, nb, (const int32_t *const *)rows, nt, out + (size_t)i0 * E, NULL)))
            goto out_free;
    }
out_free:
    free(buf);
    free(rows);
    free(nt);
    return st;
}
