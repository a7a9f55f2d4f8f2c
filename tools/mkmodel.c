#include "tools/mkmodel.h"
#include "kernels/quant.h"
#include "tools/gguf_write.h"
#include "models/arch/llama_impl.h"
#include "models/format/progress.h"
#include "models/tokenizer/unicode.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const merges[] = {"Ġ t", "t h", "h e", "Ġ a", "i n", "e r", "o n", "Ġ s", "r e", "Ġt he"};
#define N_MERGES (int)(sizeof merges / sizeof *merges)
static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* ChatML as a Jinja template, the form SmolLM2's file stores it in. */
static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* llama.cpp's file-type ids ("mostly" this type). */
static uint32_t file_type(colo_dtype t, bool k_mix)
{
    if (k_mix)
        return t == COLO_Q5_K ? 17 : 15; /* Q5_K_M, Q4_K_M */
    switch (t) {
    case COLO_F32: return 0;
    case COLO_F16: return 1;
    case COLO_Q4_0: return 2;
    case COLO_Q4_1: return 3;
    case COLO_Q8_0: return 7;
    case COLO_Q5_0: return 8;
    case COLO_Q5_1: return 9;
    case COLO_Q2_K: return 10;
    case COLO_Q3_K: return 11;
    case COLO_Q4_K: return 14;
    case COLO_Q5_K: return 16;
    case COLO_Q6_K: return 18;
    case COLO_BF16: return 32;
    default: return 0;
    }
}

/* Files smaller than this are written without a progress line. */
#define PROGRESS_MIN_BYTES (256ull << 20)

colo_status colo_mkmodel_type_parse(const char *name, colo_dtype *type, bool *k_mix)
{
    static const colo_dtype types[] = {COLO_F32,  COLO_F16,  COLO_BF16, COLO_Q4_0, COLO_Q4_1,
                                       COLO_Q5_0, COLO_Q5_1, COLO_Q8_0, COLO_Q2_K, COLO_Q3_K,
                                       COLO_Q4_K, COLO_Q5_K, COLO_Q6_K};
    if (!name)
        return COLO_EINVAL;
    *k_mix = !strcmp(name, "q4_k_m") || !strcmp(name, "q5_k_m");
    if (*k_mix) {
        *type = name[1] == '4' ? COLO_Q4_K : COLO_Q5_K;
        return COLO_OK;
    }
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(name, colo_dtype_name(types[i]))) {
            *type = types[i];
            return COLO_OK;
        }
    return COLO_EINVAL;
}

int colo_mkmodel_min_vocab(void) { return 256 + N_MERGES + 3; }

/* What a tensor holds: a matrix, a norm's weights (near 1), a bias or
 * rope frequency factors. */
typedef enum { T_MATRIX, T_NORM, T_BIAS, T_FACTORS } tensor_kind;

typedef struct {
    const colo_mkmodel_config *c;
    int n_tensors;
    colo_dtype *types;  /* (max_tensors) */
    int64_t *row_len;   /* elements per row */
    tensor_kind *kind;
    uint64_t total_bytes; /* of every tensor */
    colo_progress progress;
} fill_ctx;

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rows [r0, r1) of a matrix: values ~ N(0, 1/row length), seeded per row
 * so the result does not depend on how rows are split among threads. The
 * normal is Irwin-Hall's sum of four 16-bit uniforms (one 64-bit draw),
 * rescaled to unit variance: cheap, and bounded at 3.46 sigma. */
typedef struct {
    colo_dtype type;
    int64_t k;          /* row length */
    uint64_t seed;
    char *dst;          /* row r0 */
    int64_t r0, r1;
    colo_status st;
} rows_job;

static void *fill_rows(void *arg)
{
    rows_job *j = arg;
    size_t rb = colo_dtype_row_bytes(j->type, j->k);
    float *row = malloc((size_t)j->k * sizeof *row);
    if (!row) {
        j->st = COLO_ENOMEM;
        return NULL;
    }
    const float scale = 1.7320508f / 65536.0f / sqrtf((float)j->k); /* the sum has sd 2^16 / sqrt(3) */
    for (int64_t r = j->r0; r < j->r1; r++) {
        uint64_t s = mix(j->seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull));
        for (int64_t i = 0; i < j->k; i++) {
            s = mix(s);
            int32_t sum = (int32_t)(s & 0xFFFF) + (int32_t)((s >> 16) & 0xFFFF) + (int32_t)((s >> 32) & 0xFFFF) +
                          (int32_t)(s >> 48) - 2 * 65535;
            row[i] = (float)sum * scale;
        }
        colo_status st = colo_quantize_row(j->type, row, j->dst + (size_t)(r - j->r0) * rb, j->k);
        if (st != COLO_OK) {
            j->st = st;
            break;
        }
    }
    free(row);
    return NULL;
}

/* Tensor i: norms (ones with a little noise) or matrices, rows spread over
 * up to 8 threads. */
static colo_status fill(void *ctx, int index, void *buf, size_t bytes)
{
    fill_ctx *f = ctx;
    colo_dtype t = f->types[index];
    int64_t k = f->row_len[index];
    uint64_t s = mix(f->c->seed * 1315423911u + (uint64_t)index);
    if (k < 0) { /* Llama 3.1's rope frequency factors */
        float *w = buf;
        double base = f->c->rope_base > 0 ? f->c->rope_base : 10000.0;
        int half = (int)-k, n_rot = 2 * half;
        for (int i = 0; i < half; i++) {
            double freq = pow(base, -(double)(2 * i) / n_rot), wavelen = 2 * M_PI / freq;
            double low = 8192.0 / 1.0, high = 8192.0 / 4.0;
            if (wavelen < high)
                w[i] = 1.0f;
            else if (wavelen > low)
                w[i] = 8.0f;
            else {
                double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
                w[i] = (float)(1.0 / ((1 - smooth) / 8.0 + smooth));
            }
        }
        colo_progress_add(&f->progress, bytes);
        return COLO_OK;
    }
    if (f->kind[index] != T_MATRIX) {
        float *w = buf;
        for (int64_t i = 0; i < k; i++) {
            s = mix(s);
            float u = (float)(s >> 40) / (1 << 24); /* [0, 1) */
            w[i] = f->kind[index] == T_NORM   ? 1.0f + (u - 0.5f) * 0.2f
                   : f->kind[index] == T_BIAS ? (u - 0.5f) * 0.5f
                                              : 1.0f + u * 15.0f;
        }
        colo_progress_add(&f->progress, bytes);
        return COLO_OK;
    }
    size_t rb = colo_dtype_row_bytes(t, k);
    int64_t rows = (int64_t)(bytes / rb);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    if (rows < 64 * nt)
        nt = 1;
    rows_job jobs[8];
    pthread_t tid[8];
    bool started[8] = {false};
    for (int i = 0; i < nt; i++) {
        int64_t r0 = rows * i / nt, r1 = rows * (i + 1) / nt;
        jobs[i] = (rows_job){t, k, s, (char *)buf + (size_t)r0 * rb, r0, r1, COLO_OK};
        if (i > 0)
            started[i] = pthread_create(&tid[i], NULL, fill_rows, &jobs[i]) == 0;
        if (i > 0 && !started[i])
            fill_rows(&jobs[i]); /* no thread: do it here */
    }
    fill_rows(&jobs[0]);
    colo_status st = COLO_OK;
    for (int i = 0; i < nt; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        if (jobs[i].st != COLO_OK)
            st = jobs[i].st;
    }
    colo_progress_add(&f->progress, bytes);
    return st;
}

static colo_status check_config(const colo_mkmodel_config *c, char *err, size_t errlen)
{
    int hd = c->head_dim ? c->head_dim : c->n_head > 0 ? c->n_embd / c->n_head : 0;
    if (c->n_layer < 1 || c->n_embd < 32 || c->n_head < 1 || c->n_kv_head < 1 || c->n_ff < 32 || c->n_ctx < 8 ||
        (!c->head_dim && c->n_embd % c->n_head) || c->n_head % c->n_kv_head || hd % 2 || hd > 256 ||
        c->n_layer > 1000 || !colo_llama_traits(c->arch)) {
        colo_set_err(err, errlen, "inconsistent shape: need layers >= 1, dim >= 32 divisible by heads (or a head "
                                  "size), heads divisible by kv-heads, an even head size of at most 256, ffn >= 32, "
                                  "ctx >= 8");
        return COLO_EINVAL;
    }
    if (!colo_dtype_is_weight(c->type) || (c->k_mix && c->type != COLO_Q4_K && c->type != COLO_Q5_K)) {
        colo_set_err(err, errlen, "--type must be a weight type (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                                  "q2_k, q3_k, q4_k, q5_k, q6_k) or q4_k_m / q5_k_m");
        return COLO_EINVAL;
    }
    int be = colo_dtype_block_elems(c->type);
    if (c->n_embd % be || c->n_ff % be || (c->n_head * hd) % be) {
        colo_set_err(err, errlen, "dim, ffn and heads x head size must be multiples of %d for %s", be,
                     colo_dtype_name(c->type));
        return COLO_EINVAL;
    }
    if (c->n_vocab < colo_mkmodel_min_vocab()) {
        colo_set_err(err, errlen, "--vocab must be at least %d (256 bytes, %d merges, 3 specials)",
                     colo_mkmodel_min_vocab(), N_MERGES);
        return COLO_EINVAL;
    }
    return COLO_OK;
}

/* The tokenizer's vocabulary: byte tokens in GPT-2's byte-to-code-point
 * order, then the merges' results, the specials (the first is EOS) and
 * padding up to n_vocab. toks (n_vocab, each owned) and types (n_vocab)
 * come zeroed. false when out of memory. */
static bool build_vocab(const colo_mkmodel_config *c, char **toks, int32_t *types, int *eos)
{
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
            return false;
        memcpy(toks[n], merges[i], a);
        strcpy(toks[n] + a, sp + 1);
        types[n++] = 1;
    }
    *eos = n;
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
            return false;
    return true;
}

/* Hyperparameters, tokenizer and chat template, as llama.cpp names them. */
static colo_status add_metadata(colo_gguf_writer *w, const colo_mkmodel_config *c, char *const *toks,
                                const int32_t *types, int eos)
{
    const colo_llama_arch_traits *tr = colo_llama_traits(c->arch);
    const char *an = tr->name;
    char name[64], k[96];
    /* (not the architecture's name: llama.cpp treats a name with "phi3" in it as Phi-3's vocabulary) */
    snprintf(name, sizeof name, "colo synthetic %dL-%dd", c->n_layer, c->n_embd);
    int hd = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
    float base = c->rope_base > 0 ? c->rope_base : tr->default_rope_base;
#define K(sfx) (snprintf(k, sizeof k, "%s.%s", an, sfx), k)
    if (colo_gguf_writer_add_str(w, "general.architecture", an) ||
        colo_gguf_writer_add_str(w, "general.name", name) ||
        colo_gguf_writer_add_u32(w, K("block_count"), (uint32_t)c->n_layer) ||
        colo_gguf_writer_add_u32(w, K("context_length"), (uint32_t)c->n_ctx) ||
        colo_gguf_writer_add_u32(w, K("embedding_length"), (uint32_t)c->n_embd) ||
        colo_gguf_writer_add_u32(w, K("feed_forward_length"), (uint32_t)c->n_ff) ||
        colo_gguf_writer_add_u32(w, K("attention.head_count"), (uint32_t)c->n_head) ||
        colo_gguf_writer_add_u32(w, K("attention.head_count_kv"), (uint32_t)c->n_kv_head) ||
        colo_gguf_writer_add_f32(w, K("rope.freq_base"), base) ||
        colo_gguf_writer_add_f32(w, K("attention.layer_norm_rms_epsilon"), tr->default_rms_eps) ||
        colo_gguf_writer_add_u32(w, K("rope.dimension_count"), (uint32_t)hd) ||
        colo_gguf_writer_add_u32(w, K("vocab_size"), (uint32_t)c->n_vocab))
        return COLO_ENOMEM;
    if (c->head_dim && (colo_gguf_writer_add_u32(w, K("attention.key_length"), (uint32_t)hd) ||
                        colo_gguf_writer_add_u32(w, K("attention.value_length"), (uint32_t)hd)))
        return COLO_ENOMEM;
    if (tr->rope_factors == COLO_ROPE_FACTORS_LONG_SHORT && /* Phi-3.5's: long factors past 1/32 of the context */
        (colo_gguf_writer_add_u32(w, K("rope.scaling.original_context_length"), (uint32_t)(c->n_ctx / 32 + 1)) ||
         colo_gguf_writer_add_f32(w, K("rope.scaling.attn_factor"), 1.1902380714238083f)))
        return COLO_ENOMEM;
    if (tr->swa == COLO_SWA_IGNORED && /* as Phi-3.5's files: a window past the context */
        colo_gguf_writer_add_u32(w, K("attention.sliding_window"), (uint32_t)c->n_ctx * 2))
        return COLO_ENOMEM;
    if (tr->swa == COLO_SWA_LAYERS &&
        (colo_gguf_writer_add_u32(w, K("attention.sliding_window"), (uint32_t)(c->n_swa ? c->n_swa : 512)) ||
         colo_gguf_writer_add_f32(w, K("rope.freq_base_swa"), 10000.0f)))
        return COLO_ENOMEM;
#undef K
    if (colo_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        colo_gguf_writer_add_str(w, "tokenizer.ggml.pre", "smollm") ||
        colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)c->n_vocab) ||
        colo_gguf_writer_add_i32_arr(w, "tokenizer.ggml.token_type", types, (uint64_t)c->n_vocab) ||
        colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, N_MERGES) ||
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)eos + 1) ||
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos) ||
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)eos) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false) ||
        colo_gguf_writer_add_str(w, "tokenizer.chat_template", chatml_template) ||
        colo_gguf_writer_add_u32(w, "general.file_type", file_type(c->type, c->k_mix)) ||
        colo_gguf_writer_add_u32(w, "general.quantization_version", 2))
        return COLO_ENOMEM;
    return COLO_OK;
}

/* A matrix of rows of k elements, or (norm) an F32 vector of k. */
static colo_status add_tensor(colo_gguf_writer *w, fill_ctx *f, const char *name, colo_dtype type, int64_t k,
                              int64_t rows, tensor_kind kind)
{
    bool vec = kind != T_MATRIX;
    int64_t ne[2] = {k, vec ? 1 : rows};
    colo_status st = colo_gguf_writer_add_tensor(w, name, vec ? COLO_F32 : type, vec ? 1 : 2, ne);
    if (st != COLO_OK)
        return st;
    f->types[f->n_tensors] = vec ? COLO_F32 : type;
    f->kind[f->n_tensors] = kind;
    f->row_len[f->n_tensors++] = k;
    f->total_bytes += colo_dtype_row_bytes(vec ? COLO_F32 : type, k) * (uint64_t)(vec ? 1 : rows);
    return COLO_OK;
}

/* Llama 3.1's rope scaling as convert_hf_to_gguf writes it: factor 8,
 * low/high frequency factors 1 and 4, original context 8192. */
static colo_status add_llama3_freqs(colo_gguf_writer *w, fill_ctx *f, int n_rot)
{
    int64_t ne[1] = {n_rot / 2};
    colo_status st = colo_gguf_writer_add_tensor(w, "rope_freqs.weight", COLO_F32, 1, ne);
    if (st != COLO_OK)
        return st;
    f->types[f->n_tensors] = COLO_F32;
    f->kind[f->n_tensors] = T_FACTORS; /* values written by fill_llama3 */
    f->row_len[f->n_tensors++] = -(n_rot / 2);
    f->total_bytes += (uint64_t)(n_rot / 2) * 4;
    return COLO_OK;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third between. */
static bool more_bits(int l, int n) { return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2; }

/* A matrix's type: the file's, or under a _K_M mix Q6_K for the output
 * (the token embedding when it is tied), and attn_v/ffn_down of the layers
 * more_bits picks, as llama.cpp's quantizer does. */
static colo_dtype matrix_type(const colo_mkmodel_config *c, const char *what, int l)
{
    if (!c->k_mix)
        return c->type;
    if (!strcmp(what, "output") || (!strcmp(what, "token_embd") && !c->untied))
        return COLO_Q6_K;
    if ((!strcmp(what, "attn_v") || !strcmp(what, "ffn_down")) && more_bits(l, c->n_layer))
        return COLO_Q6_K;
    if (!strcmp(what, "attn_qkv"))
        return c->type == COLO_Q4_K ? COLO_Q5_K : COLO_Q6_K;
    return c->type;
}

/* The architecture's tensors in llama.cpp's names and order; the token
 * embedding is Q8_0 in Q4_1 models, as in SmolLM2's file. */
static colo_status add_tensors(colo_gguf_writer *w, const colo_mkmodel_config *c, fill_ctx *f)
{
    int hd = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
    int64_t E = c->n_embd, Q = (int64_t)c->n_head * hd, KV = (int64_t)c->n_kv_head * hd, F = c->n_ff, V = c->n_vocab;
    colo_dtype t = c->type;
    const colo_llama_arch_traits *tr = colo_llama_traits(c->arch);
    colo_status st;
    if ((st = add_tensor(w, f, "token_embd.weight", t == COLO_Q4_1 ? COLO_Q8_0 : matrix_type(c, "token_embd", 0), E,
                         V, T_MATRIX)) ||
        (st = add_tensor(w, f, "output_norm.weight", COLO_F32, E, 1, T_NORM)))
        return st;
    if (c->untied && (st = add_tensor(w, f, "output.weight", matrix_type(c, "output", 0), E, V, T_MATRIX)))
        return st;
    if (tr->rope_factors == COLO_ROPE_FACTORS_FREQS && c->llama3_rope && (st = add_llama3_freqs(w, f, hd)))
        return st;
    if (tr->rope_factors == COLO_ROPE_FACTORS_LONG_SHORT &&
        ((st = add_tensor(w, f, "rope_factors_long.weight", COLO_F32, hd / 2, 1, T_FACTORS)) ||
         (st = add_tensor(w, f, "rope_factors_short.weight", COLO_F32, hd / 2, 1, T_FACTORS))))
        return st;
    for (int l = 0; l < c->n_layer; l++) {
        char nm[64];
#define ADD(sfx, type, k, rows, kind) \
    (snprintf(nm, sizeof nm, "blk.%d.%s", l, sfx), (st = add_tensor(w, f, nm, type, k, rows, kind)) != COLO_OK)
        if (ADD("attn_norm.weight", COLO_F32, E, 1, T_NORM))
            return st;
        if (tr->fused_qkv) {
            if (ADD("attn_qkv.weight", matrix_type(c, "attn_qkv", l), E, Q + 2 * KV, T_MATRIX))
                return st;
        } else if (ADD("attn_q.weight", t, E, Q, T_MATRIX) || ADD("attn_k.weight", t, E, KV, T_MATRIX) ||
                   ADD("attn_v.weight", matrix_type(c, "attn_v", l), E, KV, T_MATRIX)) {
            return st;
        }
        if (tr->qkv_bias && (ADD("attn_q.bias", COLO_F32, Q, 1, T_BIAS) || ADD("attn_k.bias", COLO_F32, KV, 1, T_BIAS) ||
                             ADD("attn_v.bias", COLO_F32, KV, 1, T_BIAS)))
            return st;
        if (tr->qk_norm &&
            (ADD("attn_q_norm.weight", COLO_F32, hd, 1, T_NORM) || ADD("attn_k_norm.weight", COLO_F32, hd, 1, T_NORM)))
            return st;
        if (ADD("attn_output.weight", t, Q, E, T_MATRIX))
            return st;
        if (tr->post_norms && ADD("post_attention_norm.weight", COLO_F32, E, 1, T_NORM))
            return st;
        if (ADD("ffn_norm.weight", COLO_F32, E, 1, T_NORM))
            return st;
        if (tr->fused_up) {
            if (ADD("ffn_up.weight", t, E, 2 * F, T_MATRIX))
                return st;
        } else if (ADD("ffn_gate.weight", t, E, F, T_MATRIX) || ADD("ffn_up.weight", t, E, F, T_MATRIX)) {
            return st;
        }
        if (ADD("ffn_down.weight", matrix_type(c, "ffn_down", l), F, E, T_MATRIX))
            return st;
        if (tr->post_norms && ADD("post_ffw_norm.weight", COLO_F32, E, 1, T_NORM))
            return st;
#undef ADD
    }
    return COLO_OK;
}

/* A fill context for up to n_tensors tensors of c; NULL when out of memory. */
static fill_ctx *fill_ctx_new(const colo_mkmodel_config *c, size_t n_tensors)
{
    fill_ctx *fc = calloc(1, sizeof *fc);
    if (!fc)
        return NULL;
    fc->c = c;
    fc->types = calloc(n_tensors, sizeof *fc->types);
    fc->row_len = calloc(n_tensors, sizeof *fc->row_len);
    fc->kind = calloc(n_tensors, sizeof *fc->kind);
    if (fc->types && fc->row_len && fc->kind)
        return fc;
    free(fc->types);
    free(fc->row_len);
    free(fc->kind);
    free(fc);
    return NULL;
}

static void fill_ctx_free(fill_ctx *fc)
{
    if (!fc)
        return;
    free(fc->types);
    free(fc->row_len);
    free(fc->kind);
    free(fc);
}

colo_status colo_mkmodel_write(const char *path, const colo_mkmodel_config *c, char *err, size_t errlen)
{
    colo_status st = check_config(c, err, errlen);
    if (st != COLO_OK)
        return st;
    st = COLO_ENOMEM;
    colo_gguf_writer *w = colo_gguf_writer_create();
    char **toks = calloc((size_t)c->n_vocab, sizeof *toks);
    int32_t *types = calloc((size_t)c->n_vocab, sizeof *types);
    fill_ctx *fc = fill_ctx_new(c, 6 + 16 * (size_t)c->n_layer);
    int eos;
    if (!w || !toks || !types || !fc || !build_vocab(c, toks, types, &eos) ||
        add_metadata(w, c, toks, types, eos) != COLO_OK || add_tensors(w, c, fc) != COLO_OK)
        goto out;
    char what[300];
    snprintf(what, sizeof what, "writing %s", path);
    colo_progress_begin(&fc->progress, what, fc->total_bytes, PROGRESS_MIN_BYTES);
    st = colo_gguf_writer_finish(w, path, fill, fc, err, errlen);
    colo_progress_end(&fc->progress);
out:
    if (st == COLO_ENOMEM)
        colo_set_err(err, errlen, "out of memory");
    if (toks)
        for (int i = 0; i < c->n_vocab; i++)
            free(toks[i]);
    free(toks);
    free(types);
    fill_ctx_free(fc);
    colo_gguf_writer_free(w);
    return st;
}

/* ---- LoRA adapters -------------------------------------------------------------------- */

/* One product's pair: lora_a (in, rank) and lora_b (rank, out). */
static colo_status add_pair(colo_gguf_writer *w, fill_ctx *f, int l, const char *what, colo_dtype t, int r,
                            int64_t in, int64_t out)
{
    char nm[96];
    colo_status st;
    snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_a", l, what);
    if ((st = add_tensor(w, f, nm, t, in, r, T_MATRIX)) != COLO_OK)
        return st;
    snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_b", l, what);
    return add_tensor(w, f, nm, t, r, out, T_MATRIX);
}

static colo_status add_lora_tensors(colo_gguf_writer *w, const colo_mkmodel_config *c, const colo_mkmodel_lora *a,
                                    fill_ctx *f)
{
    int hd = c->head_dim ? c->head_dim : c->n_embd / c->n_head, r = a->rank;
    int64_t E = c->n_embd, Q = (int64_t)c->n_head * hd, KV = (int64_t)c->n_kv_head * hd, F = c->n_ff;
    const colo_llama_arch_traits *tr = colo_llama_traits(c->arch);
    colo_dtype t = a->type;
    colo_status st = COLO_OK;
    for (int l = 0; l < c->n_layer; l++) {
        if (tr->fused_qkv)
            st = add_pair(w, f, l, "attn_qkv", t, r, E, Q + 2 * KV);
        else if ((st = add_pair(w, f, l, "attn_q", t, r, E, Q)) == COLO_OK &&
                 (st = add_pair(w, f, l, "attn_k", t, r, E, KV)) == COLO_OK)
            st = add_pair(w, f, l, "attn_v", t, r, E, KV);
        if (st == COLO_OK)
            st = add_pair(w, f, l, "attn_output", t, r, Q, E);
        if (st != COLO_OK)
            return st;
        if (a->attention_only)
            continue;
        if (tr->fused_up)
            st = add_pair(w, f, l, "ffn_up", t, r, E, 2 * F);
        else if ((st = add_pair(w, f, l, "ffn_gate", t, r, E, F)) == COLO_OK)
            st = add_pair(w, f, l, "ffn_up", t, r, E, F);
        if (st == COLO_OK)
            st = add_pair(w, f, l, "ffn_down", t, r, F, E);
        if (st != COLO_OK)
            return st;
    }
    return st;
}

colo_status colo_mkmodel_write_lora(const char *path, const colo_mkmodel_config *base, const colo_mkmodel_lora *a,
                                    char *err, size_t errlen)
{
    colo_status st = check_config(base, err, errlen);
    if (st != COLO_OK)
        return st;
    if (a->rank < 1 || a->rank > 256 || (a->type != COLO_F32 && a->type != COLO_F16)) {
        colo_set_err(err, errlen, "an adapter's rank is 1 to 256 and its type f32 or f16");
        return COLO_EINVAL;
    }
    colo_mkmodel_config c = *base;
    c.seed = base->seed * 0x9E3779B1u + a->seed + 0x10A;
    st = COLO_ENOMEM;
    colo_gguf_writer *w = colo_gguf_writer_create();
    fill_ctx *fc = fill_ctx_new(&c, 16 * (size_t)c.n_layer);
    if (!w || !fc)
        goto out;
    if (colo_gguf_writer_add_str(w, "general.architecture", colo_llama_traits(c.arch)->name) ||
        colo_gguf_writer_add_str(w, "general.type", "adapter") ||
        colo_gguf_writer_add_str(w, "general.name", "colo synthetic adapter") ||
        colo_gguf_writer_add_str(w, "adapter.type", "lora") ||
        colo_gguf_writer_add_f32(w, "adapter.lora.alpha", a->alpha > 0 ? a->alpha : a->rank / 2.0f) ||
        add_lora_tensors(w, &c, a, fc) != COLO_OK)
        goto out;
    colo_progress_begin(&fc->progress, path, fc->total_bytes, PROGRESS_MIN_BYTES);
    st = colo_gguf_writer_finish(w, path, fill, fc, err, errlen);
    colo_progress_end(&fc->progress);
out:
    if (st == COLO_ENOMEM)
        colo_set_err(err, errlen, "out of memory");
    fill_ctx_free(fc);
    colo_gguf_writer_free(w);
    return st;
}
