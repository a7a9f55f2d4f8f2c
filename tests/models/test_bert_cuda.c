/* The BERT encoder on the CUDA device against the CPU device, on a
 * synthetic model folder the test writes (config.json, vocab.txt and a
 * model.safetensors of seeded random weights: 2 layers, width 64, 4 heads,
 * FFN 128, 64 positions), so that it needs no downloaded weights:
 * - every sequence's embedding on CUDA equals the CPU's within CPU_TOL per
 *   component (both compute in F32: the embeddings are unit vectors and the
 *   two devices differ only by summation order, about 1e-6), with F32 and
 *   with F16 weights in memory;
 * - a batch of sequences of different lengths (padded for attention,
 *   products over the real tokens: more than 16 rows go through cuBLAS)
 *   gives each sequence the embedding it gets alone (a few rows: colo's
 *   mat-vec kernel), within BATCH_TOL.
 * A wrong attention mask, pooling over padding, or a layer norm on the
 * wrong rows moves components by 1e-2 or more.
 *
 * Skipped (cmocka skip) when no CUDA device is usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cuda_skip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/arch/bert.h"

#define CPU_TOL 1e-4
#define BATCH_TOL 5e-5

enum { E = 64, HEADS = 4, LAYERS = 2, F = 128, V = 80, P = 64 };

static char dir[256];
static colo_device *cuda, *cpu;

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float rnd(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 23)) - 1.0);
}

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

typedef struct {
    char name[96];
    int rows, cols; /* cols 0: a vector */
    float center, spread;
} tensor;

/* model.safetensors: the tensors in order, F32, values center + spread * U(-1, 1). */
static void write_safetensors(const tensor *t, int n)
{
    size_t cap = 64 * 1024, len = 0, off = 0;
    char *hdr = malloc(cap);
    assert_non_null(hdr);
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * 4;
        if (t[i].cols)
            len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                                    "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name, t[i].rows, t[i].cols,
                                    off, off + bytes);
        else
            len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
                                    "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name, t[i].rows, off,
                                    off + bytes);
        off += bytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    assert_true(len < cap);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = len;
    assert_int_equal(fwrite(&hl, 8, 1, f), 1);
    assert_int_equal(fwrite(hdr, 1, len, f), len);
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (size_t k = 0; k < cnt; k++) {
            float x = t[i].center + t[i].spread * rnd();
            assert_int_equal(fwrite(&x, 4, 1, f), 1);
        }
    }
    assert_int_equal(fclose(f), 0);
    free(hdr);
}

static void write_folder(void)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"model_type\": \"bert\", \"hidden_act\": \"gelu\", \"hidden_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_attention_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": %d, \"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12}",
             E, LAYERS, HEADS, F, V, P);
    put("config.json", text);
    char vocab[V * 8] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (int i = 5; i < V; i++)
        snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "w%d\n", i);
    put("vocab.txt", vocab);
    static tensor t[5 + 16 * LAYERS];
    int n = 0;
    float ws = 1.0f / sqrtf((float)E); /* keeps activations of order one */
    t[n++] = (tensor){"embeddings.word_embeddings.weight", V, E, 0, 0.5f};
    t[n++] = (tensor){"embeddings.position_embeddings.weight", P, E, 0, 0.5f};
    t[n++] = (tensor){"embeddings.token_type_embeddings.weight", 2, E, 0, 0.5f};
    t[n++] = (tensor){"embeddings.LayerNorm.weight", E, 0, 1, 0.1f};
    t[n++] = (tensor){"embeddings.LayerNorm.bias", E, 0, 0, 0.1f};
    for (int l = 0; l < LAYERS; l++) {
        static const struct {
            const char *sfx;
            int rows, cols;
            float center, spread;
        } L[16] = {{"attention.self.query.weight", E, E, 0, 2}, {"attention.self.key.weight", E, E, 0, 2},
                   {"attention.self.value.weight", E, E, 0, 1}, {"attention.self.query.bias", E, 0, 0, 0.1f},
                   {"attention.self.key.bias", E, 0, 0, 0.1f}, {"attention.self.value.bias", E, 0, 0, 0.1f},
                   {"attention.output.dense.weight", E, E, 0, 1}, {"attention.output.dense.bias", E, 0, 0, 0.1f},
                   {"attention.output.LayerNorm.weight", E, 0, 1, 0.1f},
                   {"attention.output.LayerNorm.bias", E, 0, 0, 0.1f}, {"intermediate.dense.weight", F, E, 0, 1},
                   {"intermediate.dense.bias", F, 0, 0, 0.1f}, {"output.dense.weight", E, F, 0, 0.7f},
                   {"output.dense.bias", E, 0, 0, 0.1f}, {"output.LayerNorm.weight", E, 0, 1, 0.1f},
                   {"output.LayerNorm.bias", E, 0, 0, 0.1f}};
        for (int i = 0; i < 16; i++) {
            tensor *x = &t[n++];
            snprintf(x->name, sizeof x->name, "encoder.layer.%d.%s", l, L[i].sfx);
            x->rows = L[i].rows, x->cols = L[i].cols, x->center = L[i].center;
            x->spread = L[i].cols ? L[i].spread * ws * sqrtf(3.0f) : L[i].spread;
        }
    }
    write_safetensors(t, n);
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/colo-test-bert-cuda-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return -1;
    write_folder();
    colo_device_config dc = {.want = "cuda"}, cc = {.want = "cpu", .cpu_threads = 2};
    if (!(cuda = colo_device_open(&dc, err, sizeof err)) || !(cpu = colo_device_open(&cc, err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    colo_device_close(cuda);
    colo_device_close(cpu);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct {
    colo_arena *arena;
    colo_stream *s;
    colo_bert *m;
} rig;

static void rig_open(rig *r, colo_device *d, colo_dtype wt)
{
    char err[512];
    colo_bert_config bc = {.weight_type = wt};
    r->arena = colo_arena_create_bytes(d, "bert", 64 << 20, err, sizeof err);
    assert_non_null(r->arena);
    r->s = colo_stream_create(d, NULL, err, sizeof err);
    assert_non_null(r->s);
    if (!(r->m = colo_bert_load(dir, &bc, r->arena, r->s, err, sizeof err)))
        fail_msg("load: %s", err);
}

static void rig_close(rig *r)
{
    colo_bert_free(r->m);
    assert_int_equal(colo_arena_used(r->arena), 0);
    colo_stream_destroy(r->s);
    colo_arena_destroy(r->arena);
}

enum { NSEQ = 7 };

/* NSEQ sequences of 1 .. P tokens: [CLS] random ids [SEP]. */
static void make_seqs(int32_t ids[NSEQ][P], int *lens)
{
    static const int L[NSEQ] = {1, 2, 5, 17, 33, 40, P};
    for (int i = 0; i < NSEQ; i++) {
        lens[i] = L[i];
        for (int j = 0; j < L[i]; j++)
            ids[i][j] = j == 0 ? 2 : j == L[i] - 1 ? 3 : 5 + (int32_t)((unsigned)(rnd() * 1e6f + 1e6f) % (V - 5));
    }
}

/* Embeddings of the sequences one by one (alone) or all in one batch, on d. */
static void embed(colo_device *d, colo_dtype wt, int32_t ids[NSEQ][P], const int *lens, bool batched, float *out)
{
    rig r;
    rig_open(&r, d, wt);
    const int32_t *rows[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        rows[i] = ids[i];
    colo_status st = COLO_OK;
    if (batched)
        st = colo_bert_forward(r.m, r.s, NSEQ, rows, lens, out, NULL);
    for (int i = 0; !batched && i < NSEQ && st == COLO_OK; i++)
        st = colo_bert_forward(r.m, r.s, 1, rows + i, lens + i, out + (size_t)i * E, NULL);
    if (st != COLO_OK)
        fail_msg("forward: %s", colo_status_str(st));
    rig_close(&r);
}

static void compare(const char *what, const float *got, const float *want, double tol)
{
    for (int i = 0; i < NSEQ; i++) {
        double d = 0, norm = 0;
        for (int k = 0; k < E; k++) {
            float g = got[(size_t)i * E + k], w = want[(size_t)i * E + k];
            double e = isfinite(g) ? fabs((double)g - w) : INFINITY;
            d = e > d ? e : d;
            norm += (double)g * g;
        }
        if (!(d <= tol))
            fail_msg("%s: sequence %d: components differ by up to %.3g (tolerance %.1g)", what, i, d, tol);
        if (fabs(sqrt(norm) - 1.0) > 1e-4)
            fail_msg("%s: sequence %d: the embedding's norm is %.6f", what, i, sqrt(norm));
    }
}

static void test_cuda_against_cpu(void **state)
{
    (void)state;
    static const colo_dtype types[] = {COLO_F32, COLO_F16};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int32_t ids[NSEQ][P];
        int lens[NSEQ];
        make_seqs(ids, lens);
        float c_alone[NSEQ * E], g_alone[NSEQ * E], g_batch[NSEQ * E], c_batch[NSEQ * E];
        embed(cpu, types[ti], ids, lens, false, c_alone);
        embed(cpu, types[ti], ids, lens, true, c_batch);
        embed(cuda, types[ti], ids, lens, false, g_alone);
        embed(cuda, types[ti], ids, lens, true, g_batch);
        const char *tn = types[ti] == COLO_F32 ? "F32" : "F16";
        char what[96];
        snprintf(what, sizeof what, "%s weights: CUDA alone against the CPU", tn);
        compare(what, g_alone, c_alone, CPU_TOL);
        snprintf(what, sizeof what, "%s weights: CUDA batched against the CPU", tn);
        compare(what, g_batch, c_batch, CPU_TOL);
        snprintf(what, sizeof what, "%s weights: CUDA batched against alone", tn);
        compare(what, g_batch, g_alone, BATCH_TOL);
        /* The embeddings are not all alike (the model does depend on its input). */
        double spread = 0;
        for (int k = 0; k < E; k++)
            spread += fabs((double)g_alone[k] - g_alone[(size_t)(NSEQ - 1) * E + k]);
        assert_true(spread > 0.1);
    }
}

int main(void)
{
    COLO_SKIP_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_against_cpu)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
