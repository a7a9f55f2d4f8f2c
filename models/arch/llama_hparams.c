/* The hyperparameters of a llama-family GGUF file: every key read, checked
 * and, where the architecture's row says so (models/arch/llama_impl.h), given its
 * architecture's meaning. A key that would change the computation and is not
 * applied here is refused with its name. */
#include "models/arch/llama_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* Whether layer l is a sliding-window one (COLO_SWA_LAYERS): the file's
 * sliding_window_pattern (a bool per layer, or a period n: every n-th
 * layer is global), else a period of 6. */
colo_status colo_llama_swa_layers(const colo_gguf *g, const colo_llama_hparams *hp, bool *swa, char *err, size_t errlen)
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

/* The architecture (general.architecture), its row, and the shape: layers,
 * widths, heads, head size, context. */
static colo_status read_shape(const colo_gguf *g, colo_llama_hparams *hp, char *msg, size_t msglen)
{
    colo_gguf_str arch;
    char k[96];
    if (colo_gguf_get_str(g, "general.architecture", &arch) != COLO_OK) {
        snprintf(msg, msglen, "key general.architecture is missing");
        return COLO_EFORMAT;
    }
    if (colo_llama_arch_parse_n(arch.ptr, arch.len, &hp->arch) != COLO_OK) {
        char list[256];
        colo_llama_arch_list(list, sizeof list);
        snprintf(msg, msglen, "architecture '%.*s' is not supported (colo runs %s)",
                 (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, list);
        return COLO_EFORMAT;
    }
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
    return COLO_OK;
}

/* Rotary dimensions, pairing, base and scaling: none or linear (with a
 * factor); the others change the angles in ways not applied here. */
static colo_status read_rope(const colo_gguf *g, const colo_llama_arch_traits *tr, colo_llama_hparams *hp, char *msg,
                             size_t msglen)
{
    char k[96];
    hp->n_rot = hp->head_dim;
    if (opt_hparam(g, akey(hp, "rope.dimension_count", k, sizeof k), &hp->n_rot, msg, msglen))
        return COLO_EFORMAT;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 || (tr->rope_full && hp->n_rot != hp->head_dim)) {
        snprintf(msg, msglen, "%s %d is invalid for heads of %d", k, hp->n_rot, hp->head_dim);
        return COLO_EFORMAT;
    }
    hp->rope_neox = tr->rope_neox;
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
    return COLO_OK;
}

/* Keys that change the computation and are not applied here. */
static colo_status refuse_keys(const colo_gguf *g, const colo_llama_hparams *hp, char *msg, size_t msglen)
{
    static const char *const refused[] = {"expert_count", "attn_logit_softcapping", "final_logit_softcapping",
                                          "rope.scaling.factor_swa", "attention.key_length_swa"};
    char k[96];
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
    return COLO_OK;
}

/* The sliding window as the row's rule says, and the embedding and
 * attention scales. */
static colo_status read_window_scales(const colo_gguf *g, const colo_llama_arch_traits *tr, colo_llama_hparams *hp,
                                      char *msg, size_t msglen)
{
    char k[96];
    int n_swa = 0;
    if (opt_hparam(g, akey(hp, "attention.sliding_window", k, sizeof k), &n_swa, msg, msglen)) {
        /* 0 means none */
        uint32_t z;
        if (colo_gguf_get_u32(g, k, &z) != COLO_OK || z != 0)
            return COLO_EFORMAT;
        *msg = '\0';
    }
    if (tr->swa == COLO_SWA_LAYERS) {
        hp->n_swa = n_swa;
        if (opt_float(g, akey(hp, "rope.freq_base_swa", k, sizeof k), &hp->rope_base_swa, msg, msglen))
            return COLO_EFORMAT;
    } else if (tr->swa == COLO_SWA_REFUSED && n_swa > 0 && n_swa < hp->n_ctx) {
        /* (COLO_SWA_IGNORED: Phi-3's files carry a window that llama.cpp
         * does not apply, the 3.5 models' past their context; colo does as
         * llama.cpp.) */
        snprintf(msg, msglen, "key %s is %d: a sliding window is not supported for %s", k, n_swa, tr->name);
        return COLO_EFORMAT;
    }
    hp->embd_scale = tr->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)(tr->attn_scale_len ? tr->attn_scale_len(hp) : hp->head_dim));
    return COLO_OK;
}

colo_status colo_llama_read_hparams(const colo_gguf *g, colo_llama_hparams *hp, char *msg, size_t msglen)
{
    char k[96];
    memset(hp, 0, sizeof *hp);
    if (read_shape(g, hp, msg, msglen) != COLO_OK)
        return COLO_EFORMAT;
    const colo_llama_arch_traits *tr = colo_llama_traits(hp->arch);
    if (read_rope(g, tr, hp, msg, msglen) != COLO_OK || refuse_keys(g, hp, msg, msglen) != COLO_OK ||
        read_window_scales(g, tr, hp, msg, msglen) != COLO_OK)
        return COLO_EFORMAT;
    if (colo_gguf_get_f32(g, akey(hp, "attention.layer_norm_rms_epsilon", k, sizeof k), &hp->rms_eps) ||
        !(hp->rms_eps > 0)) {
        snprintf(msg, msglen, "key %s is missing or invalid", k);
        return COLO_EFORMAT;
    }
    return COLO_OK;
}
