/* The byte-level BPE on a synthetic model's tokenizer: merges, special
 * tokens, ChatML, and byte-exact round trips of arbitrary bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/bpe.h"
#include "models/mkmodel.h"

static char path[300];
static colo_gguf *g;
static colo_bpe *bpe;

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/colo-test-bpe-%d.gguf", tmp, (int)getpid());
    colo_mkmodel_config c = {.n_layer = 1, .n_embd = 32, .n_head = 2, .n_kv_head = 1, .n_ff = 32,
                             .n_vocab = 300, .n_ctx = 64, .type = COLO_F32};
    char err[256];
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK || !(g = colo_gguf_open(path, err, sizeof err)))
        return -1;
    bpe = colo_bpe_from_gguf(g, err, sizeof err);
    return bpe ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    colo_bpe_free(bpe);
    colo_gguf_close(g);
    unlink(path);
    return 0;
}

static void roundtrip(const char *s, size_t n, bool special)
{
    int32_t *ids;
    int k;
    assert_int_equal(colo_bpe_encode(bpe, s, n, special, &ids, &k), COLO_OK);
    char *out = malloc(n * 16 + 16);
    size_t o = 0;
    for (int i = 0; i < k; i++) {
        size_t len;
        assert_int_equal(colo_bpe_decode(bpe, ids[i], out + o, n * 16 + 16 - o, &len), COLO_OK);
        o += len;
    }
    assert_int_equal(o, n);
    assert_memory_equal(out, s, n);
    free(out);
    free(ids);
}

static void test_merges_and_specials(void **state)
{
    (void)state;
    int32_t *ids;
    int n;
    /* Merges apply by rank, not left to right: in "the", t+h (rank 1) wins
     * over h+e (rank 2), and "th"+"e" is no merge. */
    assert_int_equal(colo_bpe_encode(bpe, "the", 3, false, &ids, &n), COLO_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], colo_bpe_find(bpe, "th"));
    assert_int_equal(ids[1], colo_bpe_find(bpe, "e"));
    free(ids);
    /* " the" becomes one token through the merges Ġ+t, h+e, Ġt+he. */
    assert_int_equal(colo_bpe_encode(bpe, " the", 4, false, &ids, &n), COLO_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], colo_bpe_find(bpe, "Ġthe"));
    free(ids);
    const char *chat = "<|im_start|>user\nhi<|im_end|>\n";
    assert_int_equal(colo_bpe_encode(bpe, chat, strlen(chat), true, &ids, &n), COLO_OK);
    assert_int_equal(ids[0], colo_bpe_find(bpe, "<|im_start|>"));
    bool has_end = false;
    for (int i = 0; i < n; i++)
        has_end |= ids[i] == colo_bpe_find(bpe, "<|im_end|>");
    assert_true(has_end);
    assert_true(colo_bpe_is_special(bpe, ids[0]));
    free(ids);
    /* Without special parsing the markers are plain text. */
    assert_int_equal(colo_bpe_encode(bpe, chat, strlen(chat), false, &ids, &n), COLO_OK);
    for (int i = 0; i < n; i++)
        assert_false(colo_bpe_is_special(bpe, ids[i]));
    free(ids);
    assert_int_equal(colo_bpe_eos(bpe), colo_bpe_find(bpe, "<|endoftext|>"));
    assert_false(colo_bpe_add_bos(bpe));
    char buf[4];
    size_t len;
    assert_int_equal(colo_bpe_decode(bpe, 99999, buf, sizeof buf, &len), COLO_EINVAL);
}

static void test_chatml(void **state)
{
    (void)state;
    colo_chat_msg m[2] = {{"system", "Be brief."}, {"user", "Hello"}};
    char *p = colo_chatml_prompt(m, 2);
    assert_string_equal(p, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(p);
}

static void test_arbitrary_bytes_round_trip(void **state)
{
    (void)state;
    unsigned seed = getenv("COLO_TEST_SEED") ? (unsigned)atoi(getenv("COLO_TEST_SEED")) : 7u;
    printf("seed %u (COLO_TEST_SEED)\n", seed);
    srand(seed);
    char s[512];
    for (int it = 0; it < 2000; it++) {
        size_t n = (size_t)(rand() % 200);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)(rand() % 3 ? "ab cde\n\t9'<|>"[rand() % 14] : rand());
        roundtrip(s, n, false);
    }
    const char *texts[] = {"", " ", "  \n\n ", "12345", "héllo wörld", "日本語", "😀 ok", "don't", "\xff\xfe\xc3"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        roundtrip(texts[i], strlen(texts[i]), false);
}

/* Long pieces (one word of 300,000 letters, a run of 100,000 spaces) and
 * long texts: the merge loop is O(n log n), so this takes milliseconds;
 * the quadratic loop it replaced took minutes. */
static void test_long_inputs(void **state)
{
    (void)state;
    size_t n = 300000;
    char *s = malloc(n);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = "thein"[i % 5];
    roundtrip(s, n, false);
    memset(s, ' ', 100000);
    roundtrip(s, 100000, false);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(i % 7 == 6 ? ' ' : "the rain"[i % 8]);
    roundtrip(s, n, true);
    /* "hehehe...": every h+e merge has the same rank; the result is
     * "he" repeated, leftmost first, whatever the length. */
    for (size_t i = 0; i < 1001; i++)
        s[i] = "he"[i % 2];
    int32_t *ids;
    int k;
    assert_int_equal(colo_bpe_encode(bpe, s, 1001, false, &ids, &k), COLO_OK);
    assert_int_equal(k, 501);
    for (int i = 0; i < 500; i++)
        assert_int_equal(ids[i], colo_bpe_find(bpe, "he"));
    assert_int_equal(ids[500], colo_bpe_find(bpe, "h"));
    free(ids);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_and_specials),
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_arbitrary_bytes_round_trip),
        cmocka_unit_test(test_long_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
