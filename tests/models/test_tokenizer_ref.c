/* colo's tokenizers (models/tokenizer/tokenizer.h) against llama.cpp on llama.cpp's
 * own vocabulary-only GGUF files: the token ids of a varied set of texts
 * per family (tests/data/tokenizers, made by llama.cpp; README there), the
 * test inputs and ids llama.cpp ships beside each file (.inp/.out), and
 * byte-exact round trips. Each vocabulary is skipped when it is not in the
 * model cache (scripts/fetch-models.sh puts them under llama-vocab/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/format/model_cache.h"
#include "models/tokenizer/tokenizer.h"

/* The vocabularies, the model and pre-tokenizer each names, and the file
 * in the model cache when it is a model's own (NULL: llama.cpp's
 * llama-vocab/ggml-vocab-NAME.gguf). */
static const struct {
    const char *name, *model, *pre, *file;
} vocabs[] = {
    {"llama-bpe", "gpt2", "llama-bpe", NULL},
    {"llama-spm", "llama", "default", NULL},
    {"phi-3", "llama", "default", NULL},
    {"qwen2", "gpt2", "qwen2", NULL},
    {"gpt-2", "gpt2", "gpt-2", NULL},
    {"starcoder", "gpt2", "starcoder", NULL},
    {"refact", "gpt2", "refact", NULL},
    {"mpt", "gpt2", "mpt", NULL},
    {"gemma-3-270m-q4_k_m", "llama", "default", "gemma-3-270m-q4_k_m.gguf"}, /* Gemma 3's 262,144 tokens */
};

typedef struct {
    colo_gguf *g;
    colo_tokenizer *t;
} vocab;

/* Opens vocabulary i from the model cache; false when it is not there. */
static bool open_vocab(size_t i, vocab *v, char *path, size_t cap)
{
    char file[128], err[512];
    if (vocabs[i].file)
        snprintf(file, sizeof file, "%s", vocabs[i].file);
    else
        snprintf(file, sizeof file, "llama-vocab/ggml-vocab-%s.gguf", vocabs[i].name);
    if (!colo_model_cache_path(file, path, cap))
        return false;
    v->g = colo_gguf_open(path, err, sizeof err);
    if (!v->g && vocabs[i].file) {
        /* a whole model whose weights this build cannot read yet: its vocabulary is left out */
        fprintf(stderr, "%s left out: %s\n", vocabs[i].name, err);
        return false;
    }
    if (!v->g)
        fail_msg("%s: %s", path, err);
    v->t = colo_tokenizer_from_gguf(v->g, err, sizeof err);
    if (!v->t)
        fail_msg("%s: %s", path, err);
    return true;
}

static void close_vocab(vocab *v)
{
    colo_tokenizer_free(v->t);
    colo_gguf_close(v->g);
}

static void print_ids(const char *what, const int32_t *ids, int n)
{
    fprintf(stderr, "  %s", what);
    for (int k = 0; k < n; k++)
        fprintf(stderr, " %d", ids[k]);
    fprintf(stderr, "\n");
}

/* Whether text encodes to want[0, n_want); prints the case when not. */
static bool check(const colo_tokenizer *t, const char *name, const char *text, size_t len, bool special,
                  const int32_t *want, int n_want)
{
    int32_t *got;
    int n;
    assert_int_equal(colo_tokenizer_encode(t, text, len, special, special, &got, &n), COLO_OK);
    bool same = n == n_want;
    for (int k = 0; same && k < n; k++)
        same = got[k] == want[k];
    if (!same) {
        fprintf(stderr, "%s (special %d): \"%.*s\"\n", name, special, (int)len, text);
        print_ids("colo:     ", got, n);
        print_ids("llama.cpp:", want, n_want);
    }
    free(got);
    return same;
}

/* Decoding the ids of text (no special tokens) gives the text back, after
 * SentencePiece's leading space. */
static void round_trip(const colo_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(t, text, len, false, false, &ids, &n), COLO_OK);
    size_t cap = len * 4 + 64, o = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int k = 0; k < n; k++) {
        size_t l;
        assert_int_equal(colo_tokenizer_decode(t, ids[k], buf + o, cap - o, &l), COLO_OK);
        o += l;
    }
    size_t skip = colo_tokenizer_add_space_prefix(t) && len > 0 && o > 0 && buf[0] == ' ';
    if (o - skip != len || memcmp(buf + skip, text, len))
        fail_msg("round trip of \"%.*s\" gave \"%.*s\"", (int)len, text, (int)o, buf);
    free(buf);
    free(ids);
}

static void test_reference_ids(void **state)
{
    (void)state;
    int tested = 0, wrong = 0, total = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        vocab vc;
        char path[4096], jpath[4096];
        if (!open_vocab(v, &vc, path, sizeof path))
            continue;
        tested++;
        assert_string_equal(colo_tokenizer_model(vc.t), vocabs[v].model);
        assert_string_equal(colo_tokenizer_pre(vc.t), vocabs[v].pre);
        snprintf(jpath, sizeof jpath, COLO_SOURCE_DIR "/tests/data/tokenizers/%s.json", vocabs[v].name);
        json_error_t jerr;
        json_t *j = json_load_file(jpath, 0, &jerr);
        if (!j)
            fail_msg("%s: %s", jpath, jerr.text);
        json_t *cases = json_object_get(j, "cases"), *c;
        assert_true(json_array_size(cases) >= 40);
        size_t i;
        json_array_foreach(cases, i, c) {
            const char *text = json_string_value(json_object_get(c, "text"));
            bool special = json_is_true(json_object_get(c, "special"));
            json_t *ids = json_object_get(c, "ids");
            assert_non_null(text);
            int n_want = (int)json_array_size(ids);
            int32_t *want = malloc((size_t)n_want * sizeof *want + 1);
            assert_non_null(want);
            for (int k = 0; k < n_want; k++)
                want[k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
            /* colo adds no BOS to a text that starts with it; llama.cpp adds a second */
            int bos = colo_tokenizer_bos(vc.t), skip = 0;
            if (special && n_want >= 2 && want[0] == bos && want[1] == bos && colo_tokenizer_add_bos(vc.t))
                skip = 1;
            total++;
            wrong += !check(vc.t, vocabs[v].name, text, strlen(text), special, want + skip, n_want - skip);
            if (!special)
                round_trip(vc.t, text, strlen(text));
            free(want);
        }
        json_decref(j);
        close_vocab(&vc);
    }
    fprintf(stderr, "%d vocabularies, %d cases, %d differ from llama.cpp\n", tested, total, wrong);
    if (!tested)
        skip();
    assert_int_equal(wrong, 0);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

/* llama.cpp's own tests: NAME.gguf.inp holds texts separated by
 * "\n__ggml_vocab_test__\n", NAME.gguf.out a line of ids per text
 * (tokenized without BOS and without parsing special tokens). */
static void test_llama_cpp_inputs(void **state)
{
    (void)state;
    int tested = 0, wrong = 0, total = 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        vocab vc;
        char path[4096], p2[4200];
        if (!open_vocab(v, &vc, path, sizeof path))
            continue;
        size_t in_len, out_len;
        snprintf(p2, sizeof p2, "%s.inp", path);
        char *inp = read_all(p2, &in_len);
        snprintf(p2, sizeof p2, "%s.out", path);
        char *out = read_all(p2, &out_len);
        if (!inp || !out) {
            free(inp);
            free(out);
            close_vocab(&vc);
            continue;
        }
        tested++;
        char *ip = inp, *op = out;
        while (ip <= inp + in_len && op < out + out_len) {
            char *e = strstr(ip, sep);
            size_t tl = e ? (size_t)(e - ip) : strlen(ip);
            char *nl = strchr(op, '\n');
            if (nl)
                *nl = 0;
            int32_t want[4096];
            int n_want = 0;
            for (char *q = op, *end; n_want < 4096; q = end) {
                long x = strtol(q, &end, 10);
                if (end == q)
                    break;
                want[n_want++] = (int32_t)x;
            }
            total++;
            wrong += !check(vc.t, vocabs[v].name, ip, tl, false, want, n_want);
            round_trip(vc.t, ip, tl);
            if (!e || !nl)
                break;
            ip = e + strlen(sep);
            op = nl + 1;
        }
        free(inp);
        free(out);
        close_vocab(&vc);
    }
    fprintf(stderr, "%d vocabularies, %d of llama.cpp's inputs, %d differ\n", tested, total, wrong);
    if (!tested)
        skip();
    assert_int_equal(wrong, 0);
}

/* What colo cannot tokenize is refused with its name. */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *name, *want;
    } cases[] = {{"deepseek-llm", "deepseek-llm"}, {"bert-bge", "bert"}, {"nomic-bert-moe", "t5"}};
    int tested = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char file[128], path[4096], err[512] = "";
        snprintf(file, sizeof file, "llama-vocab/ggml-vocab-%s.gguf", cases[i].name);
        if (!colo_model_cache_path(file, path, sizeof path))
            continue;
        tested++;
        colo_gguf *g = colo_gguf_open(path, err, sizeof err);
        assert_non_null(g);
        colo_tokenizer *t = colo_tokenizer_from_gguf(g, err, sizeof err);
        assert_null(t);
        if (!strstr(err, cases[i].want))
            fail_msg("%s: '%s' does not name '%s'", cases[i].name, err, cases[i].want);
        colo_gguf_close(g);
    }
    if (!tested)
        skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_ids),
        cmocka_unit_test(test_llama_cpp_inputs),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
