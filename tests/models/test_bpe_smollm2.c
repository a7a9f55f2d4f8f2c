/* The byte-level BPE on SmolLM2's real tokenizer (from the GGUF in the model
 * cache) against reference token ids made by llama.cpp and by Hugging Face
 * `tokenizers` (tests/data/bpe/README.md), and byte-exact round trips of
 * random text through the 49,152-token vocabulary. Skipped when the weights
 * are not in the model cache (scripts/fetch-models.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer/tokenizer.h"
#include "models/sample/chat.h"
#include "models/format/model_cache.h"

#define SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"

typedef struct {
    colo_gguf *g;
    colo_tokenizer *bpe;
} fixture;

static int setup(void **state)
{
    char path[4096], err[512];
    *state = NULL;
    if (!colo_model_cache_path(SMOLLM2, path, sizeof path))
        return 0; /* each test skips */
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->g = colo_gguf_open(path, err, sizeof err);
    if (f->g)
        f->bpe = colo_tokenizer_from_gguf(f->g, err, sizeof err);
    if (!f->bpe) {
        fprintf(stderr, "%s\n", err);
        colo_gguf_close(f->g);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f) {
        colo_tokenizer_free(f->bpe);
        colo_gguf_close(f->g);
        free(f);
    }
    return 0;
}

static void decode_all(const colo_tokenizer *b, const int32_t *ids, int n, char *buf, size_t cap, size_t *len)
{
    size_t o = 0;
    for (int k = 0; k < n; k++) {
        size_t l;
        assert_int_equal(colo_tokenizer_decode(b, ids[k], buf + o, cap - o, &l), COLO_OK);
        o += l;
    }
    *len = o;
}

static void test_reference_ids(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    json_error_t jerr;
    json_t *j = json_load_file(COLO_SOURCE_DIR "/tests/data/bpe/smollm2_tokens.json", 0, &jerr);
    if (!j)
        fail_msg("smollm2_tokens.json: %s", jerr.text);
    json_t *cases = json_object_get(j, "cases"), *c;
    assert_true(json_array_size(cases) >= 20);
    size_t i;
    int wrong = 0;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        bool special = json_is_true(json_object_get(c, "special"));
        json_t *ids = json_object_get(c, "ids");
        assert_non_null(text);
        int32_t *got;
        int n;
        assert_int_equal(colo_tokenizer_encode(f->bpe, text, strlen(text), true, special, &got, &n), COLO_OK);
        bool same = (size_t)n == json_array_size(ids);
        for (int k = 0; same && k < n; k++)
            same = got[k] == json_integer_value(json_array_get(ids, (size_t)k));
        if (!same) {
            wrong++;
            fprintf(stderr, "case %zu (special %d) \"%s\"\n  got ", i, special, text);
            for (int k = 0; k < n; k++)
                fprintf(stderr, " %d", got[k]);
            fprintf(stderr, "\n  want");
            for (size_t k = 0; k < json_array_size(ids); k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ids, k)));
            fprintf(stderr, "\n");
        }
        char buf[8192];
        size_t len;
        decode_all(f->bpe, got, n, buf, sizeof buf, &len);
        assert_int_equal(len, strlen(text));
        assert_memory_equal(buf, text, len);
        free(got);
    }
    json_decref(j);
    assert_int_equal(wrong, 0);
}

static void test_metadata(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    assert_int_equal(colo_tokenizer_n_vocab(f->bpe), 49152);
    assert_false(colo_tokenizer_add_bos(f->bpe));
    int eos = colo_tokenizer_eos(f->bpe);
    assert_true(eos >= 0);
    assert_true(colo_tokenizer_is_special(f->bpe, eos));
    const char *names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 3; i++) {
        int id = colo_tokenizer_find(f->bpe, names[i]);
        assert_true(id >= 0);
        assert_true(colo_tokenizer_is_special(f->bpe, id));
        assert_string_equal(colo_tokenizer_token_text(f->bpe, id), names[i]);
    }
    assert_null(colo_tokenizer_token_text(f->bpe, 49152));
    /* A ChatML prompt: specials whole, the roles and contents as text. */
    colo_chat_msg m[2] = {{"system", "You are helpful."}, {"user", "What is 2+2?"}};
    char *p = colo_chatml_prompt(m, 2);
    assert_non_null(p);
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(f->bpe, p, strlen(p), true, true, &ids, &n), COLO_OK);
    int im_start = colo_tokenizer_find(f->bpe, "<|im_start|>"), im_end = colo_tokenizer_find(f->bpe, "<|im_end|>");
    int starts = 0, ends = 0;
    for (int k = 0; k < n; k++) {
        starts += ids[k] == im_start;
        ends += ids[k] == im_end;
    }
    assert_int_equal(ids[0], im_start);
    assert_int_equal(starts, 3);
    assert_int_equal(ends, 2);
    free(ids);
    free(p);
}

/* Random mixes of ASCII, multi-byte UTF-8, digits, whitespace and invalid
 * bytes decode to exactly what was encoded, with and without specials.
 * (Only bytes the vocabulary has a token for: see test_bytes_without_token.) */
static void test_random_round_trip(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)strtoul(getenv("COLO_TEST_SEED"), NULL, 10) : 2024u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    static const char *const atoms[] = {"a", "the", " ", "  ", "\n", "\r\n", "\t", "7", "42", "'s", "'ll", "é",
                                        "日本", "😀", "\xe2\x80\x8d", "<|im_end|>", "<|endoftext|>", "-", "...",
                                        "\xe2\x80", "\xc3", "\x80", "\xf0\x9f", "Ж", "٣"};
    const int n_atoms = (int)(sizeof atoms / sizeof *atoms);
    char text[2048], out[2048 * 4];
    for (int it = 0; it < 500; it++) {
        size_t len = 0;
        int parts = rand() % 60;
        for (int k = 0; k < parts; k++) {
            const char *a = atoms[rand() % n_atoms];
            size_t l = strlen(a);
            memcpy(text + len, a, l);
            len += l;
        }
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            int n;
            assert_int_equal(colo_tokenizer_encode(f->bpe, text, len, true, special, &ids, &n), COLO_OK);
            size_t olen;
            decode_all(f->bpe, ids, n, out, sizeof out, &olen);
            assert_int_equal(olen, len);
            assert_memory_equal(out, text, len);
            for (int k = 0; k < n; k++)
                assert_true(ids[k] >= 0 && ids[k] < colo_tokenizer_n_vocab(f->bpe));
            free(ids);
        }
    }
}

/* SmolLM2's vocabulary lacks 21 of the 256 byte tokens (e.g. 0x04, 0x1D,
 * 0xC0, 0xFF). Such a byte is dropped inside valid UTF-8, as both reference
 * tokenizers do ("a\x04b" is [81, 82] = "a", "b" in llama.cpp and in HF
 * tokenizers), and becomes U+FFFD's token when it is not UTF-8 (llama.cpp
 * gives that token for every invalid byte; colo keeps the invalid bytes
 * that have a token, so they decode back exactly). */
static void test_bytes_without_token(void **state)
{
    fixture *f = *state;
    if (!f)
        skip();
    int32_t *ids;
    int n;
    int a = colo_tokenizer_find(f->bpe, "a"), b = colo_tokenizer_find(f->bpe, "b"), fffd = colo_tokenizer_find(f->bpe, "ï¿½");
    assert_int_equal(a, 81);
    assert_int_equal(b, 82);
    assert_true(fffd >= 0);
    assert_int_equal(colo_tokenizer_encode(f->bpe, "a\x04" "b", 3, true, false, &ids, &n), COLO_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], a);
    assert_int_equal(ids[1], b);
    free(ids);
    assert_int_equal(colo_tokenizer_encode(f->bpe, "a\xff" "b\xc0", 4, true, false, &ids, &n), COLO_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], a);
    assert_int_equal(ids[1], fffd);
    assert_int_equal(ids[2], b);
    assert_int_equal(ids[3], fffd);
    free(ids);
    /* Every single byte and every pair of bytes: no crash, ids in range. */
    for (int x = 0; x < 256; x++) {
        for (int y = 0; y < 256; y += 17) {
            char t[2] = {(char)x, (char)y};
            assert_int_equal(colo_tokenizer_encode(f->bpe, t, 2, true, true, &ids, &n), COLO_OK);
            assert_true(n <= 2);
            for (int k = 0; k < n; k++)
                assert_true(ids[k] >= 0 && ids[k] < colo_tokenizer_n_vocab(f->bpe));
            free(ids);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_ids),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_bytes_without_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
