/* SentencePiece-style BPE (models/tokenizer/spm.h) through the tokenizer facade, on a
 * hand-made vocabulary: merges by score (not by position), byte fallback,
 * the space marker and the leading space, special and user-defined tokens,
 * BOS, and byte-exact decoding of random text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer/tokenizer.h"
#include "tests/test_seed.h"
#include "tools/gguf_write.h"

enum { UNK, BOS, EOS, BYTE0 = 3, SP = 259, A, B, AB, SP_A, SP_AB, BA, CTRL, USER, N_TOK };

/* Writes the vocabulary (add_space_prefix: -1 no key, else its value) and
 * opens its tokenizer; *gout must be closed after it. */
static colo_tokenizer *make(int add_space_prefix, colo_gguf **gout)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/colo-test-spm-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    static char bytes[256][8];
    const char *tok[N_TOK];
    float score[N_TOK];
    int32_t type[N_TOK];
    for (int i = 0; i < N_TOK; i++) {
        score[i] = -10;
        type[i] = 1;
    }
    tok[UNK] = "<unk>", type[UNK] = 2;
    tok[BOS] = "<s>", type[BOS] = 3;
    tok[EOS] = "</s>", type[EOS] = 3;
    for (int c = 0; c < 256; c++) {
        snprintf(bytes[c], sizeof bytes[c], "<0x%02X>", c);
        tok[BYTE0 + c] = bytes[c];
        type[BYTE0 + c] = 6;
        score[BYTE0 + c] = 0;
    }
    tok[SP] = "\xe2\x96\x81", tok[A] = "a", tok[B] = "b";
    tok[AB] = "ab", score[AB] = -1;
    tok[BA] = "ba", score[BA] = -0.5f; /* higher than "ab": "aba" is "a" "ba" */
    tok[SP_A] = "\xe2\x96\x81" "a", score[SP_A] = -2;
    tok[SP_AB] = "\xe2\x96\x81" "ab", score[SP_AB] = -1.5f;
    tok[CTRL] = "<ctrl>", type[CTRL] = 3;
    tok[USER] = "<user>", type[USER] = 4;
    colo_gguf_writer *w = colo_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(colo_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama"), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", tok, N_TOK), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_f32_arr(w, "tokenizer.ggml.scores", score, N_TOK), COLO_OK);
    assert_int_equal(colo_gguf_writer_add_i32_arr(w, "tokenizer.ggml.token_type", type, N_TOK), COLO_OK);
    if (add_space_prefix >= 0)
        assert_int_equal(colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", add_space_prefix), COLO_OK);
    assert_int_equal(colo_gguf_writer_finish(w, path, NULL, NULL, err, sizeof err), COLO_OK);
    colo_gguf_writer_free(w);
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    unlink(path);
    assert_non_null(g);
    colo_tokenizer *t = colo_tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    *gout = g;
    return t;
}

static void expect(const colo_tokenizer *t, const char *text, bool add_special, bool parse_special, const int *want,
                   int n_want)
{
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(t, text, strlen(text), add_special, parse_special, &ids, &n), COLO_OK);
    if (n != n_want)
        fail_msg("\"%s\": %d tokens, expected %d", text, n, n_want);
    for (int i = 0; i < n; i++)
        if (ids[i] != want[i])
            fail_msg("\"%s\": token %d is %d, expected %d", text, i, ids[i], want[i]);
    free(ids);
}

static void test_merges_bytes_and_spaces(void **state)
{
    (void)state;
    colo_gguf *g;
    colo_tokenizer *t = make(-1, &g);
    assert_string_equal(colo_tokenizer_model(t), "llama");
    assert_true(colo_tokenizer_add_bos(t)); /* SentencePiece's default */
    assert_true(colo_tokenizer_add_space_prefix(t));
    assert_int_equal(colo_tokenizer_bos(t), BOS);
    assert_int_equal(colo_tokenizer_eos(t), EOS);
    assert_true(colo_tokenizer_is_eog(t, EOS));
    /* the leading space, then the highest score first: "ab" (-1) before "▁a" (-2), then "▁ab" */
    expect(t, "ab", true, false, (int[]){BOS, SP_AB}, 2);
    expect(t, "ab", false, false, (int[]){SP_AB}, 1);
    /* "ba" (-0.5) beats "ab" (-1) though it starts later */
    expect(t, "aba", false, false, (int[]){SP_A, BA}, 2);
    /* a character in no token: its UTF-8 bytes */
    expect(t, "\xc3\xa9", false, false, (int[]){SP, BYTE0 + 0xC3, BYTE0 + 0xA9}, 3);
    /* spaces are the marker; two in a row stay apart */
    expect(t, "a  b", false, false, (int[]){SP_A, SP, SP, B}, 4);
    /* control tokens only when parsed, then the text after them gets a space too */
    expect(t, "ab<ctrl>ab", false, true, (int[]){SP_AB, CTRL, SP_AB}, 3);
    int plain[] = {SP_AB, BYTE0 + '<', BYTE0 + 'c', BYTE0 + 't', BYTE0 + 'r', BYTE0 + 'l', BYTE0 + '>', AB};
    expect(t, "ab<ctrl>ab", false, false, plain, 8);
    /* user-defined tokens always */
    expect(t, "<user>b", false, false, (int[]){USER, SP, B}, 3);
    /* a prompt that starts with BOS gets no second one */
    expect(t, "<s>ab", true, true, (int[]){BOS, SP_AB}, 2);
    expect(t, "", true, false, (int[]){BOS}, 1);
    expect(t, "", false, false, NULL, 0);
    char buf[16];
    size_t len;
    assert_int_equal(colo_tokenizer_decode(t, SP_AB, buf, sizeof buf, &len), COLO_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, " ab", 3);
    assert_int_equal(colo_tokenizer_decode(t, BYTE0 + 0xC3, buf, sizeof buf, &len), COLO_OK);
    assert_int_equal(len, 1);
    assert_int_equal((unsigned char)buf[0], 0xC3);
    assert_int_equal(colo_tokenizer_decode(t, CTRL, buf, sizeof buf, &len), COLO_OK);
    assert_memory_equal(buf, "<ctrl>", 6);
    assert_int_equal(colo_tokenizer_decode(t, N_TOK, buf, sizeof buf, &len), COLO_EINVAL);
    assert_int_equal(colo_tokenizer_decode(t, SP_AB, buf, 2, &len), COLO_ENOMEM);
    colo_tokenizer_free(t);
    colo_gguf_close(g);

    t = make(0, &g); /* add_space_prefix false, as Gemma 3 */
    assert_false(colo_tokenizer_add_space_prefix(t));
    expect(t, "ab", false, false, (int[]){AB}, 1);
    expect(t, " ab", false, false, (int[]){SP_AB}, 1);
    colo_tokenizer_free(t);
    colo_gguf_close(g);
}

/* Any bytes, valid or not as UTF-8 (but no U+2581, which decodes to a
 * space, and no special tokens, after which the text gets a space): the
 * tokens decode to the text after the leading space. */
static void test_random_round_trip(void **state)
{
    (void)state;
    colo_gguf *g;
    colo_tokenizer *t = make(-1, &g);
    unsigned seed = (unsigned)colo_test_seed("test_spm", 146);
    srand(seed);
    static const char *const pieces[] = {"a", "b", " ", "  ", "\xc3\xa9", "\xe2\x96", "<", "\xff", "\n"};
    for (int iter = 0; iter < 200; iter++) {
        char text[256];
        size_t n = 0;
        int k = rand() % 40;
        for (int i = 0; i < k; i++) {
            const char *p = pieces[rand() % 9];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        int32_t *ids;
        int m;
        assert_int_equal(colo_tokenizer_encode(t, text, n, false, false, &ids, &m), COLO_OK);
        char out[1024];
        size_t o = 0, len;
        for (int i = 0; i < m; i++) {
            assert_int_equal(colo_tokenizer_decode(t, ids[i], out + o, sizeof out - o, &len), COLO_OK);
            o += len;
        }
        size_t skip = n > 0;
        if (o != n + skip || memcmp(out + skip, text, n))
            fail_msg("iteration %d: \"%.*s\" decoded to \"%.*s\"", iter, (int)n, text, (int)o, out);
        free(ids);
    }
    colo_tokenizer_free(t);
    colo_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_bytes_and_spaces),
        cmocka_unit_test(test_random_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
