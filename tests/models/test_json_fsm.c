/* The JSON prefix recognizer: whole documents accepted byte by byte (and
 * every prefix of them kept alive), invalid ones refused at the first byte
 * that cannot continue, and the limits on whitespace and depth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "models/json_fsm.h"

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
        "\n{\"k\":-0}",
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
        "{\"a\":       1}", /* more than COLO_JSON_MAX_WS spaces in a row */
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_valid_documents), cmocka_unit_test(test_invalid_documents)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
