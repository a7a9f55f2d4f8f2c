/* The JSON prefix recognizer: whole documents accepted byte by byte (and
 * every prefix of them kept alive), invalid ones refused at the first byte
 * that cannot continue, and the bounds on whitespace, numbers, depth,
 * strings and containers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "models/sample/json_fsm.h"
#include "tests/test_seed.h"

static bool accepts(const char *doc, bool *done)
{
    colo_json_fsm s;
    colo_json_fsm_init(&s);
    bool ok = colo_json_fsm_feed(&s, doc, strlen(doc));
    *done = ok && colo_json_fsm_done(&s);
    return ok;
}

static void test_valid_documents(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{}",
        "{\"a\":1}",
        "{ \"a\" : [1, -2.5e+3, 0, 0.1, 1E9, true, false, null, \"x\"], \"b\": {\"c\": {}} }",
        "{\"s\":\"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
        "{\"n\":[[[]]],\"e\":[]}",
        "{\"k\":-0}",
        "{\n\"a\": [\n  1,\n                2\n], \"b\"\n:\n0}", /* a newline and up to 16 spaces */
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        bool done;
        if (!accepts(docs[i], &done) || !done)
            fail_msg("refused or incomplete: %s", docs[i]);
        /* every prefix is alive and, but for the whole, not done */
        size_t n = strlen(docs[i]);
        for (size_t k = 0; k < n; k++) {
            colo_json_fsm s;
            colo_json_fsm_init(&s);
            assert_true(colo_json_fsm_feed(&s, docs[i], k));
            assert_false(colo_json_fsm_done(&s));
        }
    }
}

static void test_invalid_documents(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[1]",          /* the top level is an object */
        "\"x\"",
        "{a:1}",
        "{\"a\" 1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":1,}",
        "{\"a\":[1,]}",
        "{\"a\":[1+]}",   /* only a bracket closes an array */
        "{\"a\":\"\xed\xa0\x80\"}", /* UTF-8: a surrogate, an overlong form */
        "{\"a\":\"\xe0\x80\xaf\"}",
        "{\"a\":1e123}",  /* at most 2 exponent digits */
        "{\"a\":tru}x",
        "{\"a\":\"\x01\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12g4\"}",
        "{\"a\":\"\xff\"}",
        "{\"a\":1]",
        "{} ",           /* nothing after the document */
        "{}{}",
        "\n{}",          /* nor before it */
        " {}",
        "{\"a\":  1}",    /* between tokens: one space, */
        "{\"a\":\n\n1}",  /* or one newline */
        "{\"a\": \n1}",
        "{\"a\":\n                 1}", /* and at most 16 spaces */
        "{\"a\":\t1}",    /* no tab, no carriage return */
        "{\"a\":\r\n1}",
        "{\"a\":00}",     /* no leading zero */
        "{\"a\":-01}",
        "{\"a\":[0123]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool done;
        if (accepts(bad[i], &done) && done)
            fail_msg("accepted: %s", bad[i]);
    }
    /* depth */
    char deep[128] = "{\"a\":";
    for (int i = 0; i < COLO_JSON_FSM_MAX_DEPTH; i++)
        strcat(deep, "[");
    bool done;
    assert_false(accepts(deep, &done));
}

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

/* n random digits, the first not 0 */
static void digits(char *out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (char)('0' + (i ? rnd() % 10 : 1 + rnd() % 9));
    out[n] = 0;
}

static bool fsm_accepts(const char *doc)
{
    bool done;
    return accepts(doc, &done);
}

/* A number's parts take 16, 16 and 2 digits; the digit past each is refused
 * where it comes, and what came before still ends. */
static void test_number_bounds(void **state)
{
    (void)state;
    rng ^= colo_test_seed("test_json_fsm", 77) * 2654435761ull;
    char a[32], b[32], doc[128];
    for (int it = 0; it < 50; it++) {
        digits(a, COLO_JSON_MAX_INT_DIGITS);
        digits(b, COLO_JSON_MAX_FRAC_DIGITS);
        bool done;
        snprintf(doc, sizeof doc, "{\"a\":-%s.%se-%02u}", a, b, rnd() % 100);
        assert_true(accepts(doc, &done) && done);
        snprintf(doc, sizeof doc, "{\"a\":[%s%u]", a, rnd() % 10); /* a 17th digit */
        assert_false(fsm_accepts(doc));
        snprintf(doc, sizeof doc, "{\"a\":0.%s%u", b, rnd() % 10);
        assert_false(fsm_accepts(doc));
        snprintf(doc, sizeof doc, "{\"a\":1E+%u%u%u", rnd() % 10, rnd() % 10, rnd() % 10);
        assert_false(fsm_accepts(doc));
        snprintf(doc, sizeof doc, "{\"a\":%u%s", 1 + rnd() % 9, a + 1); /* 16 digits, whichever the first */
        assert_true(fsm_accepts(doc));
        snprintf(doc, sizeof doc, "{\"a\":0%u", rnd() % 10); /* a digit after a leading zero */
        assert_false(fsm_accepts(doc));
    }
}

/* With limits, a string takes max_chars characters (an escape or a
 * multi-byte character is one) and a container max_items members; the
 * byte past is refused, closing is not; 0 is no bound. */
static bool limited(const char *doc, uint16_t max_chars, uint16_t max_items)
{
    colo_json_fsm s;
    colo_json_fsm_init(&s);
    colo_json_fsm_set_limits(&s, max_chars, max_items);
    return colo_json_fsm_feed(&s, doc, strlen(doc));
}

static void test_limits(void **state)
{
    (void)state;
    assert_true(limited("{\"abc\":\"x\\n\xc3\xa9\"}", 3, 2));
    assert_false(limited("{\"abcd\"", 3, 2));                /* a key is a string */
    assert_false(limited("{\"a\":\"x\\n\xc3\xa9y", 3, 2));
    assert_false(limited("{\"a\":\"xy\\u00e9\\", 3, 2));
    assert_true(limited("{\"a\":[[2,3],{\"b\":4,\"c\":5}],\"d\":6}", 3, 2));
    assert_false(limited("{\"a\":[1,2,", 3, 2));
    assert_false(limited("{\"a\":1,\"b\":2,", 3, 2));
    assert_true(limited("{\"a\":[1,2,3,4,5],\"b\":\"longer than three\",\"c\":1}", 0, 0));
    /* every member past the bound is refused, at any depth */
    char doc[256];
    for (int depth = 2; depth < 8; depth++) {
        int n = snprintf(doc, sizeof doc, "{\"a\":");
        for (int i = 1; i < depth; i++)
            n += snprintf(doc + n, sizeof doc - (size_t)n, "[");
        int items = 1 + (int)(rnd() % 6);
        for (int i = 0; i < items; i++)
            n += snprintf(doc + n, sizeof doc - (size_t)n, i ? ",%d" : "%d", i);
        if (!limited(doc, 8, (uint16_t)items))
            fail_msg("%s refused with a bound of %d items", doc, items);
        if (items > 1 && limited(doc, 8, (uint16_t)(items - 1)))
            fail_msg("%s accepted with a bound of %d items", doc, items - 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_valid_documents), cmocka_unit_test(test_invalid_documents),
                                       cmocka_unit_test(test_number_bounds), cmocka_unit_test(test_limits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
