#include "models/mkmodel.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "models/progress.h"
#include "models/unicode.h"

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
static uint32_t file_type(colo_dtype t)
{
    switch (t) {
    case COLO_F32: return 0;
    case COLO_F16: return 1;
    case COLO_Q4_1: return 3;
    case COLO_Q8_0: return 7;
    default: return 0;
    }
}

/* Files smaller than this are written without a progress line. */
#define PROGRESS_MIN_BYTES (256ull << 20)

int colo_mkmodel_min_vocab(void) { return 256 + N_MERGES + 3; }

typedef struct {
    const colo_mkmodel_config *c;
    int n_tensors;
    colo_dtype *types;  /* (2 + 9 * n_layer) */
    int64_t *row_len;   /* elements per row */
    bool *norm;
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
    if (f->norm[index]) {
        float *w = buf;
        for (int64_t i = 0; i < k; i++) {
            s = mix(s);
            w[i] = 1.0f + ((float)(s >> 40) / (1 << 24) - 0.5f) * 0.2f;
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
        colo_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)eos) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false) ||
        colo_gguf_writer_add_str(w, "tokenizer.chat_template", chatml_template) ||
        colo_gguf_writer_add_u32(w, "general.file_type", file_type(c->type)) ||
        colo_gguf_writer_add_u32(w, "general.quantization_version", 2))
        return COLO_ENOMEM;
    return COLO_OK;
}

/* A matrix of rows of k elements, or (norm) an F32 vector of k. */
static colo_status add_tensor(colo_gguf_writer *w, fill_ctx *f, const char *name, colo_dtype type, int64_t k,
                              int64_t rows, bool norm)
{
    int64_t ne[2] = {k, rows};
    colo_status st = colo_gguf_writer_add_tensor(w, name, type, norm ? 1 : 2, ne);
    if (st != COLO_OK)
        return st;
    f->types[f->n_tensors] = type;
    f->norm[f->n_tensors] = norm;
    f->row_len[f->n_tensors++] = k;
    f->total_bytes += colo_dtype_row_bytes(type, k) * (uint64_t)(norm ? 1 : rows);
    return COLO_OK;
}

/* llama's tensors in llama.cpp's names and order; the token embedding is
 * Q8_0 in Q4_1 models, as in SmolLM2's file. */
static colo_status add_tensors(colo_gguf_writer *w, const colo_mkmodel_config *c, fill_ctx *f)
{
    int64_t E = c->n_embd, KV = (int64_t)c->n_kv_head * (c->n_embd / c->n_head), F = c->n_ff, V = c->n_vocab;
    colo_dtype t = c->type;
    colo_status st;
    if ((st = add_tensor(w, f, "token_embd.weight", t == COLO_Q4_1 ? COLO_Q8_0 : t, E, V, false)) ||
        (st = add_tensor(w, f, "output_norm.weight", COLO_F32, E, 1, true)))
        return st;
    static const struct {
        const char *name;
        bool norm;
        char k, rows; /* 'E' embedding, 'K' kv, 'F' ffn */
    } per_layer[] = {{"attn_norm", true, 'E', '1'}, {"attn_q", false, 'E', 'E'},      {"attn_k", false, 'E', 'K'},
                     {"attn_v", false, 'E', 'K'},   {"attn_output", false, 'E', 'E'}, {"ffn_norm", true, 'E', '1'},
                     {"ffn_gate", false, 'E', 'F'}, {"ffn_up", false, 'E', 'F'},      {"ffn_down", false, 'F', 'E'}};
    for (int l = 0; l < c->n_layer; l++) {
        for (size_t i = 0; i < sizeof per_layer / sizeof *per_layer; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, per_layer[i].name);
            int64_t k = per_layer[i].k == 'F' ? F : E;
            char r = per_layer[i].rows;
            int64_t rows = r == 'E' ? E : r == 'K' ? KV : r == 'F' ? F : 1;
            bool norm = per_layer[i].norm;
            if ((st = add_tensor(w, f, nm, norm ? COLO_F32 : t, k, rows, norm)))
                return st;
        }
    }
    return COLO_OK;
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
    fill_ctx *fc = calloc(1, sizeof *fc);
    if (!w || !toks || !types || !fc)
        goto out;
    size_t n_t = 2 + 9 * (size_t)c->n_layer;
    fc->c = c;
    fc->types = calloc(n_t, sizeof *fc->types);
    fc->row_len = calloc(n_t, sizeof *fc->row_len);
    fc->norm = calloc(n_t, sizeof *fc->norm);
    int eos;
    if (!fc->types || !fc->row_len || !fc->norm || !build_vocab(c, toks, types, &eos) ||
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
    if (fc) {
        free(fc->types);
        free(fc->row_len);
        free(fc->norm);
    }
    free(fc);
    colo_gguf_writer_free(w);
    return st;
}
