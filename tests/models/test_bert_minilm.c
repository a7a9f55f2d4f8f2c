/* all-MiniLM-L6-v2 (the real model folder) against sentence-transformers:
 * token ids and embeddings (tests/data/bert/README.md says how the
 * references were made), and batch invariance. Skipped when the weights are
 * not in the model cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "models/arch/bert.h"
#include "models/format/model_cache.h"

#define MIN_COSINE 0.9999   /* every sentence against sentence-transformers (float32 torch) */
#define BATCH_TOL 1e-5      /* batched against one by one, per component */

typedef struct {
    colo_device *dev;
    colo_arena *arena;
    colo_stream *s;
    colo_bert *m;
    json_t *tokens, *embeddings;
} fixture;

static json_t *load_json(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", COLO_SOURCE_DIR, rel);
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j)
        fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

static int setup(void **state)
{
    static fixture f;
    char dir[1024], err[512];
    *state = NULL;
    if (!colo_model_cache_path("all-minilm-l6-v2/model.safetensors", dir, sizeof dir))
        return 0;
    *strrchr(dir, '/') = '\0';
    colo_device_config dc = {.want = "cpu"};
    if (!(f.dev = colo_device_open(&dc, err, sizeof err)) ||
        !(f.arena = colo_arena_create_bytes(f.dev, "minilm", 1ull << 30, err, sizeof err)) ||
        !(f.s = colo_stream_create(f.dev, NULL, err, sizeof err)) ||
        !(f.m = colo_bert_load(dir, NULL, f.arena, f.s, err, sizeof err))) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    if (!(f.tokens = load_json("tests/data/bert/minilm_tokens.json")) ||
        !(f.embeddings = load_json("tests/data/bert/minilm_embeddings.json")))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (!f)
        return 0;
    colo_bert_free(f->m);
    colo_stream_destroy(f->s);
    colo_arena_destroy(f->arena);
    colo_device_close(f->dev);
    json_decref(f->tokens);
    json_decref(f->embeddings);
    return 0;
}

static void test_hparams(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    const colo_bert_hparams *hp = colo_bert_hparams_get(f->m);
    assert_int_equal(hp->n_layer, 6);
    assert_int_equal(hp->n_embd, 384);
    assert_int_equal(hp->n_head, 12);
    assert_int_equal(hp->n_ff, 1536);
    assert_int_equal(hp->n_vocab, 30522);
    assert_int_equal(hp->n_pos, 512);
    assert_int_equal(hp->max_len, 256);
    assert_int_equal(colo_bert_dim(f->m), 384);
}

static void test_tokens_match_reference(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    json_t *cases = json_object_get(f->tokens, "cases"), *c;
    size_t i;
    assert_true(json_array_size(cases) >= 25);
    json_array_foreach(cases, i, c) {
        json_t *text = json_object_get(c, "text"), *ids = json_object_get(c, "ids");
        int32_t got[512];
        int n;
        bool truncated;
        assert_int_equal(colo_bert_tokenize(f->m, json_string_value(text), json_string_length(text), got, 512, &n,
                                            &truncated),
                         COLO_OK);
        bool same = (size_t)n == json_array_size(ids);
        for (int k = 0; same && k < n; k++)
            same = got[k] == json_integer_value(json_array_get(ids, (size_t)k));
        if (!same) {
            fprintf(stderr, "case %zu: got", i);
            for (int k = 0; k < n; k++)
                fprintf(stderr, " %d", got[k]);
            fprintf(stderr, "\n  want");
            for (size_t k = 0; k < json_array_size(ids); k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ids, k)));
            fprintf(stderr, "\n");
        }
        assert_true(same);
        assert_int_equal(truncated, json_integer_value(json_object_get(c, "n_full")) > n);
    }
}

static double cosine(const float *a, const json_t *ref, int d)
{
    double ab = 0, aa = 0, bb = 0;
    for (int k = 0; k < d; k++) {
        double b = json_real_value(json_array_get(ref, (size_t)k));
        ab += a[k] * b;
        aa += (double)a[k] * a[k];
        bb += b * b;
    }
    return ab / sqrt(aa * bb);
}

/* Every reference sentence, encoded one by one and all in one batch. */
static void test_embeddings_match_reference(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    json_t *cases = json_object_get(f->embeddings, "cases");
    int n = (int)json_array_size(cases), d = colo_bert_dim(f->m);
    assert_true(n >= 20);
    const char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    float *one = calloc((size_t)n * d, sizeof *one), *all = calloc((size_t)n * d, sizeof *all);
    assert_non_null(texts && lens && one && all);
    for (int i = 0; i < n; i++) {
        json_t *t = json_object_get(json_array_get(cases, (size_t)i), "text");
        texts[i] = json_string_value(t);
        lens[i] = json_string_length(t);
    }
    assert_int_equal(colo_bert_encode(f->m, f->s, texts, lens, n, 1, one), COLO_OK);
    assert_int_equal(colo_bert_encode(f->m, f->s, texts, lens, n, n, all), COLO_OK);
    double min_cos = 1.0, max_diff = 0;
    for (int i = 0; i < n; i++) {
        json_t *ref = json_object_get(json_array_get(cases, (size_t)i), "embedding");
        assert_int_equal(json_array_size(ref), d);
        double c = cosine(one + (size_t)i * d, ref, d);
        if (c < MIN_COSINE)
            fprintf(stderr, "sentence %d: cosine %.7f\n", i, c);
        min_cos = c < min_cos ? c : min_cos;
        for (int k = 0; k < d; k++) {
            double diff = fabs(one[(size_t)i * d + k] - all[(size_t)i * d + k]);
            max_diff = diff > max_diff ? diff : max_diff;
        }
    }
    printf("min cosine against sentence-transformers %.9f over %d sentences; batch of %d vs one by one: max "
           "|diff| %.2e\n",
           min_cos, n, n, max_diff);
    assert_true(min_cos >= MIN_COSINE);
    assert_true(max_diff <= BATCH_TOL);
    free(texts);
    free(lens);
    free(one);
    free(all);
}

/* Sentences of mixed lengths in different batch groupings and orders give
 * the same embeddings, and each embedding has unit length. */
static void test_batch_invariance(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    const char *texts[] = {"a", "A man is riding a horse.", "",
                           ("Padding must not change what a short sentence means next to a much longer one "
                            "that goes on and on about batching, masks and mean pooling over real tokens."),
                           "北京", "Two men pushed carts through the woods.", "x y z", "Hello, world!"};
    int n = (int)(sizeof texts / sizeof texts[0]), d = colo_bert_dim(f->m);
    float *ref = calloc((size_t)n * d, sizeof *ref), *got = calloc((size_t)n * d, sizeof *got);
    assert_non_null(ref && got);
    assert_int_equal(colo_bert_encode(f->m, f->s, texts, NULL, n, 1, ref), COLO_OK);
    for (int i = 0; i < n; i++) {
        double nn = 0;
        for (int k = 0; k < d; k++)
            nn += (double)ref[(size_t)i * d + k] * ref[(size_t)i * d + k];
        assert_true(fabs(nn - 1.0) < 1e-5);
    }
    for (int bs = 2; bs <= n; bs += 3) {
        memset(got, 0, (size_t)n * d * sizeof *got);
        assert_int_equal(colo_bert_encode(f->m, f->s, texts, NULL, n, bs, got), COLO_OK);
        for (size_t k = 0; k < (size_t)n * d; k++)
            assert_true(fabsf(got[k] - ref[k]) <= BATCH_TOL);
    }
    /* reversed order, one batch, through the tokenize/forward split */
    int32_t ids[8][256];
    const int32_t *rows[8];
    int lens[8];
    for (int i = 0; i < n; i++) {
        const char *t = texts[n - 1 - i];
        assert_int_equal(colo_bert_tokenize(f->m, t, strlen(t), ids[i], 256, &lens[i], NULL), COLO_OK);
        rows[i] = ids[i];
    }
    assert_int_equal(colo_bert_forward(f->m, f->s, n, rows, lens, got, NULL), COLO_OK);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < d; k++)
            assert_true(fabsf(got[(size_t)i * d + k] - ref[(size_t)(n - 1 - i) * d + k]) <= BATCH_TOL);
    free(ref);
    free(got);
}

/* Weights converted to F16 at load stay close to the reference. */
static void test_f16_weights(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    char dir[1024], err[512];
    assert_non_null(colo_model_cache_path("all-minilm-l6-v2", dir, sizeof dir));
    colo_bert_config bc = {.weight_type = COLO_F16};
    colo_bert *m = colo_bert_load(dir, &bc, f->arena, f->s, err, sizeof err);
    if (!m)
        fail_msg("load: %s", err);
    assert_true(colo_bert_weight_bytes(m) < colo_bert_weight_bytes(f->m) * 6 / 10);
    json_t *cases = json_object_get(f->embeddings, "cases");
    int n = (int)json_array_size(cases), d = colo_bert_dim(m);
    float *e = calloc((size_t)d, sizeof *e);
    assert_non_null(e);
    double min_cos = 1;
    for (int i = 0; i < n; i++) {
        json_t *c = json_array_get(cases, (size_t)i), *t = json_object_get(c, "text");
        const char *txt = json_string_value(t);
        size_t len = json_string_length(t);
        assert_int_equal(colo_bert_encode(m, f->s, &txt, &len, 1, 1, e), COLO_OK);
        double cs = cosine(e, json_object_get(c, "embedding"), d);
        min_cos = cs < min_cos ? cs : min_cos;
    }
    printf("f16 weights: min cosine %.6f\n", min_cos);
    assert_true(min_cos >= 0.999);
    free(e);
    colo_bert_free(m);
}

static void test_forward_rejects_bad_input(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    int32_t ids[300] = {101, 102};
    const int32_t *rows[1] = {ids};
    float out[384];
    int len = 0;
    assert_int_equal(colo_bert_forward(f->m, f->s, 1, rows, &len, out, NULL), COLO_EINVAL);
    len = 257; /* past max_len */
    assert_int_equal(colo_bert_forward(f->m, f->s, 1, rows, &len, out, NULL), COLO_EINVAL);
    len = 2;
    ids[1] = 30522; /* past the vocabulary */
    assert_int_equal(colo_bert_forward(f->m, f->s, 1, rows, &len, out, NULL), COLO_EINVAL);
    ids[1] = 102;
    assert_int_equal(colo_bert_forward(f->m, f->s, 1, rows, &len, out, NULL), COLO_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_tokens_match_reference),
        cmocka_unit_test(test_embeddings_match_reference),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_f16_weights),
        cmocka_unit_test(test_forward_rejects_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
