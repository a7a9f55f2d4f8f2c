/* colo-bench-lora: what LoRA adapters (models/arch/lora.h) cost on the CPU.
 *
 * - decode: a batch of --seqs sequences (a prompt of --prompt tokens each,
 *   prefilled first, untimed), then --steps greedy decode steps, timed:
 *   tokens/s of those steps (the batch's tokens over its median step
 *   time). With no adapters, and with each adapter setting (8 adapters of
 *   rank 16, 1 adapter of rank 16, 8 of rank 8, 8 of rank 64: every
 *   product, F32), sequence q on adapter q % n, so sequences of one
 *   adapter are not next to each other in the batch. Each setting has its
 *   own batch, and in each of --rounds rounds their steps take turns, so a
 *   busy moment of the machine falls on all of them; each round's rates,
 *   the medians, each median's ratio to no adapters' and the median of the
 *   rounds' own ratios are printed.
 * - load: colo_llama_lora_load of a rank-16 adapter, the file in the page
 *   cache (loaded once before), --loads times with an unload between: the
 *   median, fastest and slowest, and the arena bytes against the file's
 *   tensor bytes (F32).
 *
 *   colo-bench-lora [--model FILE.gguf] [--arch A --layers N --dim E --heads H --kv-heads K --ffn F --vocab V]
 *                   [--seqs 32] [--prompt 32] [--steps 64] [--rounds 3] [--loads 10] [--threads 2] [--dir DIR]
 *
 * The model is SmolLM2-135M-Instruct from the model cache by default. The
 * adapters are written for the model's own shape; the shape flags describe
 * the synthetic model (Q4_1, SmolLM2's shape by default) written when
 * there is no model file. Prints; asserts nothing. */
#include "models/arch/lora.h"
#include "models/format/model_cache.h"
#include "models/sample/sampler.h"
#include "runtime/clock.h"
#include "tools/mkmodel.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 16
#define MAX_ROUNDS 64
#define MAX_SAMPLES 4096

/* The adapter settings measured against no adapters. */
typedef struct {
    int n_adapters, rank;
    int slot[8];
    double tps[MAX_ROUNDS];
} setting;

enum { N_SETTINGS = 5 }; /* none, then the four below */
static const int setting_shape[N_SETTINGS][2] = {{0, 0}, {8, 16}, {1, 16}, {8, 8}, {8, 64}};

/* Every setting has its own sequences (blocks, last tokens, adapters:
 * N_SETTINGS times n_seqs), so that their steps can alternate. */
typedef struct {
    colo_llama *m;
    colo_stream *s;
    int n_seqs, prompt, steps, max_blocks, V;
    int32_t *table, *last, *adapter; /* (N_SETTINGS, n_seqs, max_blocks), (N_SETTINGS, n_seqs) twice */
    int32_t *tok, *pos, *seq, *rows; /* one step's: tokens (n_seqs * prompt), rows (n_seqs) */
    float *logits;                   /* (n_seqs, V) */
    double *step_ns;                 /* (N_SETTINGS, steps) */
    colo_dtype lora_type;            /* the adapters' files: F32 or F16 (kept so in memory) */
} bench;

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-bench-lora [--model FILE.gguf] [--arch A --layers N --dim E --heads H --kv-heads K "
               "--ffn F --vocab V]\n"
               "                       [--seqs N] [--prompt N] [--steps N] [--rounds N] [--loads N] [--threads N] "
               "[--dir DIR] [--lora-type f32|f16]\n"
               "  --model FILE   a llama-family GGUF (default SmolLM2-135M-Instruct.Q4_1.gguf from the model cache;\n"
               "                 without one, a synthetic Q4_1 model of the shape flags' shape, SmolLM2's by default)\n"
               "  --seqs N       sequences in the decode batch (default 32)\n"
               "  --prompt N     prompt tokens of each, prefilled before the timed steps (default 32)\n"
               "  --steps N      timed decode steps (default 64)\n"
               "  --rounds N     rounds, the settings alternating in each (default 3)\n"
               "  --loads N      timed adapter loads (default 10)\n"
               "  --lora-type T  the adapters' tensors, f32 (default) or f16 (kept as F16 in memory)\n"
               "  --threads N    CPU threads (default 2)\n"
               "  --dir DIR      where adapter files are written (default $TMPDIR)\n");
}

/* Step step (0: the prompts) of setting k's sequences, greedy; *ns: the
 * forward pass's time. */
static colo_status step_of(bench *b, int k, int step, uint64_t *ns)
{
    int32_t *last = b->last + (size_t)k * b->n_seqs;
    int nt = 0;
    for (int q = 0; q < b->n_seqs; q++) {
        int len = step == 0 ? b->prompt : 1;
        for (int j = 0; j < len; j++, nt++) {
            b->tok[nt] = step == 0 ? (int32_t)((q * 37 + j * 11 + 1) % b->V) : last[q];
            b->pos[nt] = step == 0 ? j : b->prompt + step - 1;
            b->seq[nt] = q;
        }
        b->rows[q] = nt - 1;
    }
    colo_llama_batch bt = {.n_tokens = nt, .tokens = b->tok, .pos = b->pos, .seq = b->seq, .n_seqs = b->n_seqs,
                           .max_blocks = b->max_blocks,
                           .block_table = b->table + (size_t)k * b->n_seqs * b->max_blocks,
                           .n_logits = b->n_seqs, .logit_rows = b->rows,
                           .seq_adapter = b->adapter + (size_t)k * b->n_seqs};
    uint64_t t0 = colo_now_ns();
    colo_status st = colo_llama_forward(b->m, b->s, &bt, b->logits, NULL);
    *ns = colo_now_ns() - t0;
    for (int q = 0; q < b->n_seqs && st == COLO_OK; q++)
        last[q] = colo_argmax(b->logits + (size_t)q * b->V, b->V);
    return st;
}

/* One round: every setting's prompts (untimed), then b->steps decode
 * steps of each, the settings taking turns step by step (each step
 * starting one further), into b->step_ns. */
static colo_status round_of(bench *b)
{
    int blocks = N_SETTINGS * b->n_seqs * b->max_blocks;
    colo_status st = colo_llama_kv_alloc(b->m, blocks, b->table);
    if (st != COLO_OK)
        return st;
    uint64_t ns;
    for (int k = 0; k < N_SETTINGS && st == COLO_OK; k++)
        st = step_of(b, k, 0, &ns);
    for (int step = 1; step <= b->steps && st == COLO_OK; step++)
        for (int j = 0; j < N_SETTINGS && st == COLO_OK; j++) {
            int k = (j + step) % N_SETTINGS;
            st = step_of(b, k, step, &ns);
            b->step_ns[(size_t)k * b->steps + step - 1] = (double)ns;
        }
    colo_llama_kv_free(b->m, b->table, blocks);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_SAMPLES];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The shape colo_mkmodel_write_lora needs, from the loaded model. */
static colo_mkmodel_config shape_of(const colo_llama_hparams *hp)
{
    return (colo_mkmodel_config){.arch = hp->arch, .n_layer = hp->n_layer, .n_embd = hp->n_embd,
                                 .n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .n_ff = hp->n_ff,
                                 .n_vocab = hp->n_vocab, .n_ctx = hp->n_ctx,
                                 .head_dim = hp->head_dim * hp->n_head == hp->n_embd ? 0 : hp->head_dim,
                                 .type = COLO_F32, .rope_base = hp->rope_base};
}

/* Writes the adapter of rank and seed into dir and loads it (*slot). */
static bool write_load(bench *b, const char *dir, int rank, int seed, int *slot, char *path, size_t len)
{
    char err[512];
    colo_mkmodel_config c = shape_of(colo_llama_hparams_get(b->m));
    colo_mkmodel_lora l = {.rank = rank, .type = b->lora_type, .seed = (uint64_t)seed};
    snprintf(path, len, "%s/colo-bench-lora-r%d-%d.gguf", dir, rank, seed);
    if (colo_mkmodel_write_lora(path, &c, &l, err, sizeof err) != COLO_OK ||
        colo_llama_lora_load(b->m, b->s, path, 1.0f, slot, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-bench-lora: adapter %s: %s\n", path, err);
        return false;
    }
    return true;
}

/* Rounds of every setting in turn; prints each round and the medians. */
static bool decode_bench(bench *b, setting *set, int rounds)
{
    printf("decode: %d sequences, %d prompt tokens prefilled, %d decode steps timed (tokens over the median "
           "step); %d rounds, the settings taking turns step by step\n",
           b->n_seqs, b->prompt, b->steps, rounds);
    for (int k = 0; k < N_SETTINGS; k++)
        for (int q = 0; q < b->n_seqs; q++)
            b->adapter[k * b->n_seqs + q] = set[k].n_adapters ? set[k].slot[q % set[k].n_adapters] : -1;
    for (int r = 0; r < rounds; r++) {
        colo_status st = round_of(b);
        if (st != COLO_OK) {
            fprintf(stderr, "colo-bench-lora: decode: %s\n", colo_status_str(st));
            return false;
        }
        printf("round %d:", r + 1);
        for (int k = 0; k < N_SETTINGS; k++) {
            set[k].tps[r] = b->n_seqs / (median(b->step_ns + (size_t)k * b->steps, b->steps) * 1e-9);
            printf(" %.1f", set[k].tps[r]);
        }
        printf(" tokens/s\n");
        fflush(stdout);
    }
    printf("%-14s %13s %8s %12s   rounds (tokens/s)\n", "adapters", "median tok/s", "ratio", "round ratio");
    double base = median(set[0].tps, rounds);
    for (int k = 0; k < N_SETTINGS; k++) {
        const setting *e = &set[k];
        char name[64];
        if (e->n_adapters)
            snprintf(name, sizeof name, "%d x rank %d", e->n_adapters, e->rank);
        else
            snprintf(name, sizeof name, "none");
        double med = median(e->tps, rounds), ratios[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++)
            ratios[r] = e->tps[r] / set[0].tps[r];
        printf("%-14s %13.1f %8.3f %12.3f  ", name, med, med / base, median(ratios, rounds));
        for (int r = 0; r < rounds; r++)
            printf(" %.1f", e->tps[r]);
        printf("\n");
    }
    return true;
}

/* The F32 bytes of an adapter of rank r on every product of separate
 * Q, K, V, gate and up (not phi3's fused ones): r (in + out) floats each. */
static size_t tensor_bytes(const colo_llama_hparams *hp, int r)
{
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->q_dim, KV = (size_t)hp->n_kv_head * hp->head_dim,
           F = (size_t)hp->n_ff;
    return (size_t)hp->n_layer * r * 4 * ((E + Q) + 2 * (E + KV) + (Q + E) + 2 * (E + F) + (F + E));
}

/* Loads and unloads a rank-16 adapter n times (after one untimed load that
 * puts its file in the page cache); prints the times and bytes. */
static bool load_bench(bench *b, const char *dir, int n)
{
    char path[600];
    int slot;
    if (!write_load(b, dir, 16, 100, &slot, path, sizeof path))
        return false;
    colo_lora_info info;
    colo_status st = colo_llama_lora_get(b->m, slot, &info);
    colo_llama_lora_unload(b->m, b->s, slot);
    struct stat sb;
    if (st != COLO_OK || stat(path, &sb) != 0) {
        fprintf(stderr, "colo-bench-lora: %s: cannot read back the adapter\n", path);
        return false;
    }
    double ms[MAX_SAMPLES], lo = 1e30, hi = 0;
    char err[512];
    for (int i = 0; i < n; i++) {
        uint64_t t0 = colo_now_ns();
        st = colo_llama_lora_load(b->m, b->s, path, 1.0f, &slot, err, sizeof err);
        ms[i] = (colo_now_ns() - t0) * 1e-6;
        if (st != COLO_OK) {
            fprintf(stderr, "colo-bench-lora: %s: %s\n", path, err);
            return false;
        }
        colo_llama_lora_unload(b->m, b->s, slot);
        lo = ms[i] < lo ? ms[i] : lo, hi = ms[i] > hi ? ms[i] : hi;
    }
    const colo_llama_hparams *hp = colo_llama_hparams_get(b->m);
    printf("load: rank-16 adapter, %d products, file %lld bytes; %d loads: median %.2f ms (%.2f to %.2f)\n",
           info.n_products, (long long)sb.st_size, n, median(ms, n), lo, hi);
    if (hp->arch != COLO_ARCH_PHI3) {
        size_t t = tensor_bytes(hp, 16);
        printf("memory: %zu bytes in the arena; its tensors %zu bytes in F32 (%+.3f%%)\n", info.bytes, t,
               100.0 * ((double)info.bytes - (double)t) / (double)t);
    } else {
        printf("memory: %zu bytes in the arena\n", info.bytes);
    }
    unlink(path);
    return true;
}

/* The model to run: --model, else SmolLM2 from the model cache, else a
 * synthetic Q4_1 model of shape c written into dir (path; *written). */
static bool pick_model(const char *model, const colo_mkmodel_config *c, const char *dir, char *path, size_t len,
                       bool *written)
{
    *written = false;
    if (model) {
        snprintf(path, len, "%s", model);
        return true;
    }
    if (colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", path, len))
        return true;
    char err[512];
    snprintf(path, len, "%s/colo-bench-lora-model.gguf", dir);
    if (colo_mkmodel_write(path, c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-bench-lora: %s: %s\n", path, err);
        return false;
    }
    printf("no SmolLM2 in the model cache: a synthetic Q4_1 model, %d layers, dim %d, ffn %d, vocab %d\n",
           c->n_layer, c->n_embd, c->n_ff, c->n_vocab);
    *written = true;
    return true;
}

/* Allocates b's arrays, its KV cache, and every setting's adapters. */
static bool prepare(bench *b, setting *set, const char *dir)
{
    char err[512], path[600];
    b->V = colo_llama_hparams_get(b->m)->n_vocab;
    b->max_blocks = (b->prompt + b->steps + BLOCK - 1) / BLOCK;
    size_t nt = (size_t)b->n_seqs * b->prompt, q = (size_t)b->n_seqs, all = N_SETTINGS * q;
    b->table = malloc(all * b->max_blocks * sizeof *b->table);
    b->tok = malloc(nt * sizeof *b->tok), b->pos = malloc(nt * sizeof *b->pos), b->seq = malloc(nt * sizeof *b->seq);
    b->rows = malloc(q * sizeof *b->rows), b->adapter = malloc(all * sizeof *b->adapter);
    b->last = malloc(all * sizeof *b->last), b->logits = malloc(q * b->V * sizeof *b->logits);
    b->step_ns = malloc((size_t)N_SETTINGS * b->steps * sizeof *b->step_ns);
    if (!b->table || !b->tok || !b->pos || !b->seq || !b->rows || !b->adapter || !b->last || !b->logits ||
        !b->step_ns) {
        fprintf(stderr, "colo-bench-lora: out of memory\n");
        return false;
    }
    if (colo_llama_kv_init(b->m, (int)all * b->max_blocks, BLOCK, COLO_F16, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-bench-lora: KV cache: %s\n", err);
        return false;
    }
    for (int k = 0; k < N_SETTINGS; k++) {
        set[k].n_adapters = setting_shape[k][0], set[k].rank = setting_shape[k][1];
        for (int a = 0; a < set[k].n_adapters; a++) {
            if (!write_load(b, dir, set[k].rank, 10 * k + a + 1, &set[k].slot[a], path, sizeof path))
                return false;
            unlink(path);
        }
    }
    return true;
}

static void bench_free(bench *b)
{
    free(b->table), free(b->tok), free(b->pos), free(b->seq), free(b->rows), free(b->adapter), free(b->last);
    free(b->logits), free(b->step_ns);
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir;
    int threads = 2, rounds = 3, loads = 10;
    bench b = {.n_seqs = 32, .prompt = 32, .steps = 64, .lora_type = COLO_F32};
    colo_mkmodel_config c = {.arch = COLO_ARCH_LLAMA, .n_layer = 30, .n_embd = 576, .n_head = 9, .n_kv_head = 3,
                             .n_ff = 1536, .n_vocab = 49152, .n_ctx = 2048, .type = COLO_Q4_1, .seed = 1,
                             .rope_base = 100000.0f};
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"arch", 1, 0, 'a'},   {"layers", 1, 0, 'l'}, {"dim", 1, 0, 'd'},
        {"heads", 1, 0, 'H'}, {"kv-heads", 1, 0, 'k'}, {"ffn", 1, 0, 'f'},  {"vocab", 1, 0, 'v'},
        {"seqs", 1, 0, 'q'},  {"prompt", 1, 0, 'p'}, {"steps", 1, 0, 'n'},  {"rounds", 1, 0, 'r'},
        {"loads", 1, 0, 'L'}, {"threads", 1, 0, 't'}, {"dir", 1, 0, 'D'},  {"help", 0, 0, 'h'},
        {"lora-type", 1, 0, 'T'},
        {0, 0, 0, 0}};
    int o;
    bool ok = true;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'a': ok = ok && colo_llama_arch_parse(optarg, &c.arch) == COLO_OK; break;
        case 'l': ok = ok && parse_int(optarg, 1, 1000, &c.n_layer); break;
        case 'd': ok = ok && parse_int(optarg, 1, 1 << 16, &c.n_embd); break;
        case 'H': ok = ok && parse_int(optarg, 1, 1024, &c.n_head); break;
        case 'k': ok = ok && parse_int(optarg, 1, 1024, &c.n_kv_head); break;
        case 'f': ok = ok && parse_int(optarg, 1, 1 << 18, &c.n_ff); break;
        case 'v': ok = ok && parse_int(optarg, 1, 1 << 22, &c.n_vocab); break;
        case 'q': ok = ok && parse_int(optarg, 1, 4096, &b.n_seqs); break;
        case 'p': ok = ok && parse_int(optarg, 1, 4096, &b.prompt); break;
        case 'n': ok = ok && parse_int(optarg, 1, MAX_SAMPLES, &b.steps); break;
        case 'r': ok = ok && parse_int(optarg, 1, MAX_ROUNDS, &rounds); break;
        case 'L': ok = ok && parse_int(optarg, 1, MAX_SAMPLES, &loads); break;
        case 't': ok = ok && parse_int(optarg, 1, 1024, &threads); break;
        case 'D': dir = optarg; break;
        case 'T':
            ok = ok && (!strcmp(optarg, "f32") || !strcmp(optarg, "f16"));
            b.lora_type = !strcmp(optarg, "f16") ? COLO_F16 : COLO_F32;
            break;
        case 'h': usage(stdout); return 0;
        default: ok = false;
        }
    }
    if (!ok || optind != argc) {
        usage(stderr);
        return 2;
    }
    char err[512], path[1024];
    bool written;
    if (!pick_model(model, &c, dir, path, sizeof path, &written))
        return 1;
    int rc = 1;
    colo_device_config dc = {.want = "cpu", .cpu_threads = threads};
    colo_device *dev = colo_device_open(&dc, err, sizeof err);
    colo_arena *arena = dev ? colo_arena_create_bytes(dev, "bench-lora", (size_t)3 << 30, err, sizeof err) : NULL;
    b.s = arena ? colo_stream_create(dev, NULL, err, sizeof err) : NULL;
    b.m = b.s ? colo_llama_load(path, arena, b.s, err, sizeof err) : NULL;
    if (written)
        unlink(path);
    setting set[N_SETTINGS] = {{0}};
    if (!b.m) {
        fprintf(stderr, "colo-bench-lora: %s\n", err);
        goto out;
    }
    printf("model %s; %d threads\n", path, threads);
    if (prepare(&b, set, dir) && load_bench(&b, dir, loads) && decode_bench(&b, set, rounds))
        rc = 0;
out:
    bench_free(&b);
    colo_llama_free(b.m);
    colo_stream_destroy(b.s);
    colo_arena_destroy(arena);
    colo_device_close(dev);
    return rc;
}
