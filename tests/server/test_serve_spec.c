/* Speculative decoding end to end on a synthetic model served with
 * speculative: {lookup: true}: the same tokens as a request that opts out
 * with "speculative": false (native and OpenAI routes, whole and
 * streamed), usage counting generated tokens only, and the drafted and
 * accepted tokens in /metrics and /v1/stats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "server_fixture.h"

static srv_fixture fx;

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&fx) || !srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 256))
        return -1;
    return srv_start_logged(&fx, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2,\n"
                                 "          telemetry_interval_ms: 200 }\n"
                                 "models:\n"
                                 "  - name: m\n    kind: llama\n    path: m.gguf\n    memory_fraction: 0.1\n"
                                 "    speculative: { lookup: true, tokens: 6 }\n")
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

/* A prompt that repeats itself, so that lookup drafts. */
#define PROMPT "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"

/* The value of the metric line that starts with name{model="m"}, or -1. */
static double metric(const char *text, const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "\n%s{model=\"m\"} ", name);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

static void test_same_tokens_and_counted(void **state)
{
    (void)state;
    json_t *spec = srv_post_json(&fx, "/v1/models/m/infer",
                                 "{\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"temperature\":0}");
    json_t *plain = srv_post_json(&fx, "/v1/models/m/infer",
                                  "{\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"temperature\":0,\"speculative\":false}");
    assert_non_null(spec);
    assert_non_null(plain);
    assert_true(json_equal(json_object_get(spec, "tokens"), json_object_get(plain, "tokens")));
    /* usage: the same counts (the second found its prompt in the prefix cache) */
    const char *counts[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "usage"), counts[i])),
                         json_integer_value(json_object_get(json_object_get(plain, "usage"), counts[i])));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "usage"), "completion_tokens")),
                     json_array_size(json_object_get(spec, "tokens")));
    /* seeded sampling: the same tokens too */
    json_t *s1 = srv_post_json(&fx, "/v1/completions",
                               "{\"model\":\"m\",\"prompt\":\"" PROMPT "\",\"max_tokens\":30,\"temperature\":0.7,"
                               "\"seed\":5}");
    json_t *s2 = srv_post_json(&fx, "/v1/completions",
                               "{\"model\":\"m\",\"prompt\":\"" PROMPT "\",\"max_tokens\":30,\"temperature\":0.7,"
                               "\"seed\":5,\"speculative\":false}");
    assert_non_null(s1);
    assert_non_null(s2);
    json_t *c1 = json_array_get(json_object_get(s1, "choices"), 0), *c2 = json_array_get(json_object_get(s2, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c1, "text")), json_string_value(json_object_get(c2, "text")));
    /* streamed: the same text */
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/models/m/infer",
                         "{\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"temperature\":0,\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    json_t *done = NULL;
    for (char *p = r.body; (p = strstr(p, "data: {")) != NULL; p++) {
        json_t *ev = json_loads(p + 6, JSON_DISABLE_EOF_CHECK, NULL);
        if (ev && json_object_get(ev, "finish_reason") && !json_is_null(json_object_get(ev, "finish_reason"))) {
            json_decref(done);
            done = ev;
        } else {
            json_decref(ev);
        }
    }
    srv_resp_free(&r);
    if (done && json_object_get(done, "text"))
        assert_string_equal(json_string_value(json_object_get(done, "text")),
                            json_string_value(json_object_get(plain, "text")));
    json_decref(done);
    /* bad values are refused with the field's name */
    assert_true(srv_http(&fx, "POST", "/v1/models/m/infer", "{\"prompt\":\"x\",\"speculative\":1}", &r));
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "speculative"));
    srv_resp_free(&r);

    /* the counters */
    assert_true(srv_http(&fx, "GET", "/metrics", NULL, &r));
    double drafted = metric(r.body, "colo_model_speculative_drafted_tokens_total");
    double accepted = metric(r.body, "colo_model_speculative_accepted_tokens_total");
    double verifications = metric(r.body, "colo_model_speculative_verifications_total");
    /* by source: all from prompt lookup, the only source m has */
    const char *lookup = "\ncolo_model_speculative_source_accepted_tokens_total{model=\"m\",source=\"lookup\"} ";
    const char *pl = strstr(r.body, lookup);
    assert_non_null(pl);
    assert_true(strtod(pl + strlen(lookup), NULL) == accepted);
    assert_null(strstr(r.body, "source=\"draft\""));
    srv_resp_free(&r);
    assert_true(drafted > 0);
    assert_true(accepted > 0 && accepted <= drafted);
    assert_true(verifications > 0);
    /* /v1/stats: a point taken after the requests (its seq moves on twice) */
    json_t *stats = srv_fresh_stats(&fx);
    json_t *m0 = json_array_get(json_object_get(stats, "models"), 0);
    json_t *sp = json_object_get(m0, "speculative");
    assert_non_null(sp);
    assert_true(json_integer_value(json_object_get(sp, "drafted_tokens")) > 0);
    assert_true(json_integer_value(json_object_get(sp, "accepted_tokens")) > 0);
    double ratio = json_real_value(json_object_get(sp, "acceptance_ratio"));
    assert_true(ratio > 0 && ratio <= 1);
    json_decref(stats);
    json_decref(spec);
    json_decref(plain);
    json_decref(s1);
    json_decref(s2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_tokens_and_counted)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
