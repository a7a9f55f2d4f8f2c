/* The architectures of the llama family, one row each (models/arch/llama_impl.h
 * says what every field means). The row is all that loading, the forward
 * pass and colo-mkmodel know of an architecture. */
#include "models/arch/llama_impl.h"

#include <stdio.h>
#include <string.h>

/* As llama.cpp: Gemma 3 27B (62 layers) scales its queries by the
 * embedding per head, the other sizes by the head size. */
static int gemma3_attn_scale_len(const colo_llama_hparams *hp)
{
    return hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim;
}

static const colo_llama_arch_traits traits[] = {
    [COLO_ARCH_LLAMA] = {.name = "llama", .rope_neox = false, .rope_full = true,
                         .rope_factors = COLO_ROPE_FACTORS_FREQS, .act = COLO_LLAMA_ACT_SWIGLU,
                         .swa = COLO_SWA_REFUSED, .default_rope_base = 10000.0f, .default_rms_eps = 1e-5f},
    [COLO_ARCH_QWEN2] = {.name = "qwen2", .rope_neox = true, .act = COLO_LLAMA_ACT_SWIGLU, .swa = COLO_SWA_REFUSED,
                         .qkv_bias = true, .default_rope_base = 10000.0f, .default_rms_eps = 1e-5f},
    [COLO_ARCH_QWEN3] = {.name = "qwen3", .rope_neox = true, .qk_norm = true, .act = COLO_LLAMA_ACT_SWIGLU,
                         .swa = COLO_SWA_REFUSED, .default_rope_base = 10000.0f, .default_rms_eps = 1e-5f},
    [COLO_ARCH_PHI3] = {.name = "phi3", .rope_neox = true, .rope_factors = COLO_ROPE_FACTORS_LONG_SHORT,
                        .fused_up = true, .act = COLO_LLAMA_ACT_SWIGLU, .swa = COLO_SWA_IGNORED, .fused_qkv = true,
                        .default_rope_base = 10000.0f, .default_rms_eps = 1e-5f},
    [COLO_ARCH_GEMMA3] = {.name = "gemma3", .rope_neox = true, .qk_norm = true, .post_norms = true,
                          .act = COLO_LLAMA_ACT_GEGLU, .swa = COLO_SWA_LAYERS, .embd_scale_sqrt = true,
                          .attn_scale_len = gemma3_attn_scale_len, .default_rope_base = 1000000.0f,
                          .default_rms_eps = 1e-6f},
};

#define N_ARCH ((int)(sizeof traits / sizeof *traits))

const colo_llama_arch_traits *colo_llama_traits(colo_llama_arch a)
{
    return (unsigned)a < (unsigned)N_ARCH && traits[a].name ? &traits[a] : NULL;
}

const char *colo_llama_arch_name(colo_llama_arch a)
{
    const colo_llama_arch_traits *t = colo_llama_traits(a);
    return t ? t->name : "?";
}

colo_status colo_llama_arch_parse_n(const char *name, size_t len, colo_llama_arch *out)
{
    for (int i = 0; name && i < N_ARCH; i++)
        if (traits[i].name && len == strlen(traits[i].name) && !memcmp(name, traits[i].name, len)) {
            *out = (colo_llama_arch)i;
            return COLO_OK;
        }
    return COLO_EINVAL;
}

colo_status colo_llama_arch_parse(const char *name, colo_llama_arch *out)
{
    return name ? colo_llama_arch_parse_n(name, strlen(name), out) : COLO_EINVAL;
}

void colo_llama_arch_list(char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        *buf = '\0';
    for (int i = 0; i < N_ARCH; i++)
        if (traits[i].name && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", traits[i].name);
}
