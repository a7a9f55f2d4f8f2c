#include "models/mkmodel.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "models/unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const merges[] = {"Ġ t", "t h", "h e", "Ġ a", "i n", "e r", "o n", "Ġ s", "r e", "Ġt he"};
#define N_MERGES (int)(sizeof merges / sizeof *merges)
static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

int colo_mkmodel_min_vocab(void) { return 256 + N_MERGES + 3; }

typedef struct {
    const colo_mkmodel_config *c;
    int n_tensors;
    colo_dtype types[1024];
    int64_t row_len[1024]; /* elements per row */
    bool norm[1024];
} fill_ctx;

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Tensor i: norms (ones with a little noise) or matrices (normal / sqrt(row length)). */
static colo_status fill(void *ctx, int index, void *buf, size_t bytes)
{
    fill_ctx *f = ctx;
    colo_dtype t = f->types[index];
    int64_t k = f->row_len[index];
    uint64_t s = mix(f->c->seed * 1315423911u + (uint64_t)index);
    if (f->norm[index]) {
        float *w = buf;
        for (int64_t i = 0; i < k; i++) {
            s = mix(s);
            w[i] = 1.0f + ((float)(s >> 40) / (1 << 24) - 0.5f) * 0.2f;
        }
        return COLO_OK;
    }
    size_t rb = colo_dtype_row_bytes(t, k);
    float scale = 1.0f / sqrtf((float)k);
    float *row = malloc((size_t)k * sizeof *row);
    if (!row)
        return COLO_ENOMEM;
    for (size_t r = 0; r < bytes / rb; r++) {
        for (int64_t i = 0; i < k; i += 2) { /* Box-Muller pairs */
            s = mix(s);
            double u = ((s >> 11) + 0.5) / 9007199254740992.0;
            s = mix(s);
            double v = (double)(s >> 11) / 9007199254740992.0;
            double m = sqrt(-2 * log(u));
            row[i] = (float)(m * cos(6.283185307179586 * v)) * scale;
            if (i + 1 < k)
                row[i + 1] = (float)(m * sin(6.283185307179586 * v)) * scale;
        }
        colo_quantize_row(t, row, (char *)buf + r * rb, k);
    }
    free(row);
    return COLO_OK;
}

colo_status colo_mkmodel_write(const char *path, const colo_mkmodel_config *c, char *err, size_t errlen)
{
    if (c->n_layer < 1 || c->n_embd < 32 || c->n_head < 1 || c->n_kv_head < 1 || c->n_ff < 32 || c->n_ctx < 8 ||
        c->n_embd % c->n_head || c->n_head % c->n_kv_head || (c->n_embd / c->n_head) % 2 || c->n_layer > 1000) {
        colo_set_err(err, errlen, "inconsistent shape: need layers >= 1, dim >= 32 divisible by heads, heads "
                                  "divisible by kv-heads, an even head size, ffn >= 32, ctx >= 8");
        return COLO_EINVAL;
    }
    if (c->type != COLO_F32 && c->type != COLO_F16 && c->type != COLO_Q4_1 && c->type != COLO_Q8_0) {
        colo_set_err(err, errlen, "--type must be f32, f16, q4_1 or q8_0");
        return COLO_EINVAL;
    }
    int be = colo_dtype_block_elems(c->type);
    if (c->n_embd % be || c->n_ff % be) {
        colo_set_err(err, errlen, "dim and ffn must be multiples of %d for %s", be, colo_dtype_name(c->type));
        return COLO_EINVAL;
    }
    if (c->n_vocab < colo_mkmodel_min_vocab()) {
        colo_set_err(err, errlen, "--vocab must be at least %d (256 bytes, %d merges, 3 specials)",
                     colo_mkmodel_min_vocab(), N_MERGES);
        return COLO_EINVAL;
    }
    colo_status st = COLO_ENOMEM;
    colo_gguf_writer *w = colo_gguf_writer_create();
    char **toks = calloc((size_t)c->n_vocab, sizeof *toks);
    int32_t *types = calloc((size_t)c->n_vocab, sizeof *types);
    fill_ctx *fc = calloc(1, sizeof *fc);
    if (!w || !toks || !types || !fc)
        goto out;
    /* Byte tokens in GPT-2's byte-to-code-point order, then merges, specials, padding. */
    int n = 0, extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = printable ? (uint32_t)b : 256u + (uint32_t)extra++;
        char s[5] = {0};
        colo_utf8_encode(cp, s);
        toks[n] = strdup(s);
        types[n++] = 1;
    }
    for (int i = 0; i < N_MERGES; i++) {
        const char *sp = strchr(merges[i], ' ');
        size_t a = (size_t)(sp - merges[i]);
        toks[n] = malloc(strlen(merges[i]));
        if (!toks[n])
            goto out;
        memcpy(toks[n], merges[i], a);
        strcpy(toks[n] + a, sp + 1);
        types[n++] = 1;
    }
    int eos = n;
    for (int i = 0; i < 3; i++) {
        toks[n] = strdup(specials[i]);
        types[n++] = 3;
    }
    for (; n < c->n_vocab; n++) {
        char s[32];
        snprintf(s, sizeof s, "<pad_%d>", n);
        toks[n] = strdup(s);
        types[n] = 5; /* unused */
    }
    for (int i = 0; i < c->n_vocab; i++)
        if (!toks[i])
            goto out;
    char name[64];
    snprintf(name, sizeof name, "colo synthetic %dL-%dd", c->n_layer, c->n_embd);
    int hd = c->n_embd / c->n_head;
    if (colo_gguf_writer_add_str(w, "general.architecture", "llama") ||
        colo_gguf_writer_add_str(w, "general.name", name) ||
        colo_gguf_writer_add_u32(w, "llama.block_count", (uint32_t)c->n_layer) ||
        colo_gguf_writer_add_u32(w, "llama.context_length", (uint32_t)c->n_ctx) ||
        colo_gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)c->n_embd) ||
        colo_gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)c->n_ff) ||
        colo_gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)c->n_head) ||
        colo_gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_head) ||
        colo_gguf_writer_add_f32(w, "llama.rope.freq_base", c->rope_base > 0 ? c->rope_base : 10000.0f) ||
        colo_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f) ||
        colo_gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)hd) ||
        colo_gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)c->n_vocab) ||
        colo_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        colo_gguf_writer_add_str(w, "tokenizer.ggml.pre", "smollm") ||
        colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)c->n_vocab) ||
        colo_gguf_writer_add_i32_arr(w, "tokenizer.ggml.token_type", types, (uint64_t)c->n_vocab) ||
        colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, N_MERGES) ||
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)eos + 1) ||
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false))
        goto out;
    fc->c = c;
    int64_t E = c->n_embd, KV = (int64_t)c->n_kv_head * hd, F = c->n_ff, V = c->n_vocab;
#define T2(nm, tt, a, b)                                                                                      \
    do {                                                                                                      \
        int64_t ne_[2] = {a, b};                                                                              \
        if (colo_gguf_writer_add_tensor(w, nm, tt, 2, ne_))                                                   \
            goto out;                                                                                         \
        fc->types[fc->n_tensors] = tt;                                                                        \
        fc->row_len[fc->n_tensors++] = a;                                                                     \
    } while (0)
#define T1(nm)                                                                                                \
    do {                                                                                                      \
        int64_t ne_[1] = {E};                                                                                 \
        if (colo_gguf_writer_add_tensor(w, nm, COLO_F32, 1, ne_))                                             \
            goto out;                                                                                         \
        fc->types[fc->n_tensors] = COLO_F32;                                                                  \
        fc->norm[fc->n_tensors] = true;                                                                       \
        fc->row_len[fc->n_tensors++] = E;                                                                     \
    } while (0)
    T2("token_embd.weight", c->type == COLO_Q4_1 ? COLO_Q8_0 : c->type, E, V);
    T1("output_norm.weight");
    for (int l = 0; l < c->n_layer && fc->n_tensors + 9 < 1024; l++) {
        char nm[64];
#define LN(sfx) (snprintf(nm, sizeof nm, "blk.%d." sfx ".weight", l), nm)
        T1(LN("attn_norm"));
        T2(LN("attn_q"), c->type, E, E);
        T2(LN("attn_k"), c->type, E, KV);
        T2(LN("attn_v"), c->type, E, KV);
        T2(LN("attn_output"), c->type, E, E);
        T1(LN("ffn_norm"));
        T2(LN("ffn_gate"), c->type, E, F);
        T2(LN("ffn_up"), c->type, E, F);
        T2(LN("ffn_down"), c->type, F, E);
#undef LN
    }
    if (c->n_layer * 9 + 2 > 1024) {
        colo_set_err(err, errlen, "at most 113 layers");
        st = COLO_EINVAL;
        goto out;
    }
    st = colo_gguf_writer_finish(w, path, fill, fc, err, errlen);
out:
    if (st == COLO_ENOMEM)
        colo_set_err(err, errlen, "out of memory");
    if (toks)
        for (int i = 0; i < c->n_vocab; i++)
            free(toks[i]);
    free(toks);
    free(types);
    free(fc);
    colo_gguf_writer_free(w);
    return st;
}
