/* WordPiece on a small vocabulary written here: normalization, splitting,
 * ## continuations, [UNK], truncation, special tokens, and arbitrary bytes.
 * (Exact agreement with the Hugging Face tokenizer on the real vocabulary is
 * checked in test_bert_minilm.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer/wordpiece.h"

static const char *const vocab[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",",   "!",
                                    "un",    "##aff", "##able", "aff",  "cafe",  "北",    "京",    "a",     "##a",
                                    "the",   "##s",   ".",     "i",     "##ı",   "ß",     "-",     "naive"};
enum { PAD, UNK, CLS, SEP, MASK, HELLO, WORLD, COMMA, BANG, UN, XAFF, XABLE, AFF, CAFE, BEI, JING, A, XA, THE, XS,
       DOT, I_, XDOTLESS, SZ, DASH, NAIVE };
#define NV ((int)(sizeof vocab / sizeof vocab[0]))

static colo_wordpiece *make(int max_len)
{
    char err[256];
    colo_wordpiece_config c = colo_wordpiece_default_config(max_len);
    colo_wordpiece *wp = colo_wordpiece_create(vocab, NV, &c, err, sizeof err);
    if (!wp)
        fail_msg("create: %s", err);
    return wp;
}

/* Encodes text and compares with want (n ids, [CLS]/[SEP] included). */
static void expect(const colo_wordpiece *wp, const char *text, size_t len, const int *want, int n)
{
    int32_t got[512];
    int gn, full;
    assert_int_equal(colo_wordpiece_encode(wp, text, len, true, got, 512, &gn, &full), COLO_OK);
    bool same = gn == n;
    for (int i = 0; same && i < n; i++)
        same = got[i] == want[i];
    if (!same) {
        fprintf(stderr, "\"%s\": got", text);
        for (int i = 0; i < gn; i++)
            fprintf(stderr, " %s", colo_wordpiece_token(wp, got[i]));
        fprintf(stderr, "\n");
    }
    assert_true(same);
    assert_int_equal(full, gn);
}
#define EXPECT(wp, text, ...)                                                                                \
    do {                                                                                                     \
        const int w_[] = {__VA_ARGS__};                                                                      \
        expect(wp, text, strlen(text), w_, (int)(sizeof w_ / sizeof w_[0]));                                 \
    } while (0)

static void test_basic(void **state)
{
    (void)state;
    colo_wordpiece *wp = make(64);
    assert_int_equal(colo_wordpiece_n_vocab(wp), NV);
    assert_int_equal(colo_wordpiece_cls(wp), CLS);
    assert_int_equal(colo_wordpiece_sep(wp), SEP);
    assert_int_equal(colo_wordpiece_unk(wp), UNK);
    assert_int_equal(colo_wordpiece_pad(wp), PAD);
    assert_int_equal(colo_wordpiece_find(wp, "hello"), HELLO);
    assert_int_equal(colo_wordpiece_find(wp, "hell"), -1);
    assert_string_equal(colo_wordpiece_token(wp, WORLD), "world");
    assert_null(colo_wordpiece_token(wp, NV));
    EXPECT(wp, "Hello, World!", CLS, HELLO, COMMA, WORLD, BANG, SEP);
    EXPECT(wp, "  hello\t\n world  ", CLS, HELLO, WORLD, SEP);
    EXPECT(wp, "", CLS, SEP);
    EXPECT(wp, " \t\r\n ", CLS, SEP);
    EXPECT(wp, "hello,world.the", CLS, HELLO, COMMA, WORLD, DOT, THE, SEP);
    colo_wordpiece_free(wp);
    colo_wordpiece_free(NULL);
}

static void test_continuations_and_unk(void **state)
{
    (void)state;
    colo_wordpiece *wp = make(256);
    EXPECT(wp, "unaffable", CLS, UN, XAFF, XABLE, SEP);
    EXPECT(wp, "affable", CLS, AFF, XABLE, SEP);
    EXPECT(wp, "the thes", CLS, THE, THE, XS, SEP);
    EXPECT(wp, "xyz", CLS, UNK, SEP);
    EXPECT(wp, "unaffablex hello", CLS, UNK, HELLO, SEP); /* no match at the end: the whole word is [UNK] */
    EXPECT(wp, "aaa", CLS, A, XA, XA, SEP);
    /* 100 characters are split; 101 are one [UNK] */
    char w[128];
    memset(w, 'a', 101);
    w[100] = '\0';
    int32_t ids[256];
    int n, full;
    assert_int_equal(colo_wordpiece_encode(wp, w, 100, true, ids, 256, &n, &full), COLO_OK);
    assert_int_equal(n, 102);
    assert_int_equal(ids[1], A);
    for (int i = 2; i < 101; i++)
        assert_int_equal(ids[i], XA);
    EXPECT(wp, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
           CLS, UNK, SEP);
    colo_wordpiece_free(wp);
}

static void test_normalization(void **state)
{
    (void)state;
    colo_wordpiece *wp = make(64);
    EXPECT(wp, "CAFÉ Café cafe\xcc\x81", CLS, CAFE, CAFE, CAFE, SEP); /* precomposed and combining accents */
    EXPECT(wp, "Naïve NAÏVE", CLS, NAIVE, NAIVE, SEP);
    EXPECT(wp, "北京", CLS, BEI, JING, SEP);                          /* ideographs become words */
    EXPECT(wp, "hello北京world", CLS, HELLO, BEI, JING, WORLD, SEP);
    EXPECT(wp, "hello\xe2\x80\x94world", CLS, HELLO, UNK, WORLD, SEP); /* em dash: punctuation, not in the vocab */
    EXPECT(wp, "hello-world", CLS, HELLO, DASH, WORLD, SEP);
    EXPECT(wp, "hel\x01lo wor\xc2\xadld", CLS, HELLO, WORLD, SEP);  /* control and soft hyphen removed */
    EXPECT(wp, "hello\xe3\x80\x80world\xc2\xa0!", CLS, HELLO, WORLD, BANG, SEP); /* ideographic space, nbsp */
    EXPECT(wp, "hel\xfflo", CLS, HELLO, SEP);                        /* an invalid byte is dropped */
    EXPECT(wp, "\xc4\xb0", CLS, I_, SEP);                            /* İ: I + dot above, the mark stripped */
    EXPECT(wp, "STRASSE \xc3\x9f", CLS, UNK, SZ, SEP);
    const char nul[] = "hello\0world";
    const int want[] = {CLS, UNK, SEP};
    expect(wp, nul, sizeof nul - 1, want, 3); /* NUL removed, not a space: "helloworld" is one unknown word */
    colo_wordpiece_free(wp);
}

static void test_special_tokens(void **state)
{
    (void)state;
    colo_wordpiece *wp = make(64);
    EXPECT(wp, "hello[SEP]world [MASK]!", CLS, HELLO, SEP, WORLD, MASK, BANG, SEP);
    EXPECT(wp, "[sep]", CLS, UNK, UNK, UNK, SEP); /* special tokens match case-sensitively, before lower-casing */
    int32_t ids[16];
    int n;
    assert_int_equal(colo_wordpiece_encode(wp, "[SEP]", 5, false, ids, 16, &n, NULL), COLO_OK);
    assert_int_equal(n, 5); /* [ sep ] as text: three [UNK] */
    assert_int_equal(ids[2], UNK);
    colo_wordpiece_free(wp);
}

static void test_truncation(void **state)
{
    (void)state;
    colo_wordpiece *wp = make(5);
    int32_t ids[16];
    int n, full;
    assert_int_equal(colo_wordpiece_encode(wp, "hello world hello world", 23, true, ids, 16, &n, &full), COLO_OK);
    assert_int_equal(n, 5);
    assert_int_equal(full, 6);
    const int32_t want[] = {CLS, HELLO, WORLD, HELLO, SEP};
    assert_memory_equal(ids, want, sizeof want);
    /* a smaller buffer cuts further */
    assert_int_equal(colo_wordpiece_encode(wp, "hello world hello world", 23, true, ids, 3, &n, &full), COLO_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], HELLO);
    assert_int_equal(ids[2], SEP);
    assert_int_equal(colo_wordpiece_encode(wp, "hello", 5, true, ids, 1, &n, &full), COLO_EINVAL);
    colo_wordpiece_free(wp);
}

static void test_load_vocab_file(void **state)
{
    (void)state;
    char path[] = "/tmp/colo_vocab_XXXXXX", err[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < NV; i++)
        fprintf(f, "%s%s", vocab[i], i == NV - 1 ? "" : (i % 2 ? "\r\n" : "\n")); /* CRLF and no final newline */
    fclose(f);
    colo_wordpiece_config c = colo_wordpiece_default_config(32);
    colo_wordpiece *wp = colo_wordpiece_load(path, &c, err, sizeof err);
    assert_non_null(wp);
    assert_int_equal(colo_wordpiece_n_vocab(wp), NV);
    assert_int_equal(colo_wordpiece_find(wp, "naive"), NAIVE);
    EXPECT(wp, "Hello, World!", CLS, HELLO, COMMA, WORLD, BANG, SEP);
    colo_wordpiece_free(wp);
    f = fopen(path, "w");
    fputs("[PAD]\n[UNK]\nhello\n", f);
    fclose(f);
    assert_null(colo_wordpiece_load(path, &c, err, sizeof err));
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "[CLS]"));
    unlink(path);
    assert_null(colo_wordpiece_load("/nonexistent/vocab.txt", &c, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/vocab.txt"));
}

/* Arbitrary bytes (random, and UTF-8 fragments) never crash, and the output
 * is always [CLS] valid ids [SEP] within the limit. */
static void test_random_bytes(void **state)
{
    (void)state;
    unsigned seed = 4242;
    const char *env = getenv("COLO_TEST_SEED");
    if (env)
        seed = (unsigned)strtoul(env, NULL, 10);
    printf("seed %u\n", seed);
    srand(seed);
    colo_wordpiece *wp = make(48);
    static const char *const frags[] = {"\xe5\x8c\x97", "\xc3\xa9", "a", " ", "[SEP]", "[", "\xf0\x9f\x98",
                                        "\xcc\x81",     "##",       "!", "\x00", "\xed\xa0\x80", "\xf4\x90\x80\x80"};
    for (int iter = 0; iter < 3000; iter++) {
        char buf[600];
        size_t len = 0, want = (size_t)rand() % 500;
        while (len < want) {
            if (rand() % 2) {
                buf[len++] = (char)(rand() & 0xFF);
            } else {
                const char *fr = frags[rand() % (int)(sizeof frags / sizeof frags[0])];
                size_t fl = fr[0] ? strlen(fr) : 1;
                memcpy(buf + len, fr, fl);
                len += fl;
            }
        }
        int32_t ids[64];
        int n, full;
        assert_int_equal(colo_wordpiece_encode(wp, buf, len, rand() % 2, ids, 64, &n, &full), COLO_OK);
        assert_true(n >= 2 && n <= 48 && full >= n);
        assert_int_equal(ids[0], CLS);
        assert_int_equal(ids[n - 1], SEP);
        for (int i = 0; i < n; i++)
            assert_true(ids[i] >= 0 && ids[i] < NV);
    }
    colo_wordpiece_free(wp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),          cmocka_unit_test(test_continuations_and_unk),
        cmocka_unit_test(test_normalization),  cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_truncation),     cmocka_unit_test(test_load_vocab_file),
        cmocka_unit_test(test_random_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
