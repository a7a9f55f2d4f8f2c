/* The sampling and output fields end to end on a synthetic model: logprobs
 * (the greedy token is the most likely; the top ones are sorted and sum to
 * at most 1; the tokens equal a run without logprobs; streamed equal
 * whole), logit_bias, stop token ids, penalties and echo. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>

#include "models/sample/json_fsm.h"
#include "server_fixture.h"

static srv_fixture fx;

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&fx) || !srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 256))
        return -1;
    return srv_start_logged(&fx, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
                                 "models:\n  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

static json_t *post(const char *path, const char *body)
{
    json_t *j = srv_post_json(&fx, path, body);
    assert_non_null(j);
    return j;
}

static void test_logprobs(void **state)
{
    (void)state;
    json_t *plain = post("/v1/models/m/infer", "{\"prompt\":\"the cat\",\"max_tokens\":12,\"temperature\":0}");
    json_t *j = post("/v1/models/m/infer",
                     "{\"prompt\":\"the cat\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":5}");
    json_t *toks = json_object_get(j, "tokens"), *lps = json_object_get(j, "logprobs");
    assert_int_equal(json_array_size(toks), 12);
    assert_int_equal(json_array_size(lps), 12);
    assert_true(json_equal(toks, json_object_get(plain, "tokens"))); /* logprobs change nothing */
    for (size_t i = 0; i < 12; i++) {
        json_t *e = json_array_get(lps, i), *top = json_object_get(e, "top");
        assert_int_equal(json_array_size(top), 5);
        assert_int_equal(json_integer_value(json_object_get(e, "token")), json_integer_value(json_array_get(toks, i)));
        /* greedy: the chosen token is the most likely one */
        assert_int_equal(json_integer_value(json_object_get(json_array_get(top, 0), "token")),
                         json_integer_value(json_array_get(toks, i)));
        assert_true(json_real_value(json_object_get(e, "logprob")) ==
                    json_real_value(json_object_get(json_array_get(top, 0), "logprob")));
        double sum = 0, prev = 0;
        for (size_t k = 0; k < 5; k++) {
            double v = json_real_value(json_object_get(json_array_get(top, k), "logprob"));
            assert_true(v <= 0);
            if (k)
                assert_true(v <= prev);
            prev = v;
            sum += exp(v);
        }
        assert_true(sum <= 1.0 + 1e-5);
    }
    /* Streamed: the same tokens and logprobs, one event per token. */
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/models/m/infer",
                         "{\"prompt\":\"the cat\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":5,\"stream\":true}",
                         &r));
    assert_int_equal(r.status, 200);
    int n = 0;
    for (char *p = r.body; (p = strstr(p, "data: {")) != NULL; p++) {
        json_t *ev = json_loads(p + 6, JSON_DISABLE_EOF_CHECK, NULL);
        assert_non_null(ev);
        json_t *lp = json_object_get(ev, "finish_reason") ? NULL : json_object_get(ev, "logprobs"); /* not "done" */
        if (lp) { /* (streamed events carry 9 significant digits) */
            json_t *a = json_array_get(lp, 0), *b = json_array_get(lps, (size_t)n);
            assert_int_equal(json_integer_value(json_object_get(a, "token")), json_integer_value(json_object_get(b, "token")));
            assert_true(fabs(json_real_value(json_object_get(a, "logprob")) - json_real_value(json_object_get(b, "logprob"))) <
                        1e-6);
            json_t *ta = json_object_get(a, "top"), *tb = json_object_get(b, "top");
            assert_int_equal(json_array_size(ta), json_array_size(tb));
            for (size_t k = 0; k < json_array_size(ta); k++)
                assert_int_equal(json_integer_value(json_object_get(json_array_get(ta, k), "token")),
                                 json_integer_value(json_object_get(json_array_get(tb, k), "token")));
            n++;
        }
        json_decref(ev);
    }
    assert_int_equal(n, 12);
    srv_resp_free(&r);
    json_decref(j);
    json_decref(plain);

    /* Chat: an entry per generated token, with the top ones. */
    j = post("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                     "\"max_tokens\":6,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}");
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"),
                                      "content");
    assert_int_equal(json_array_size(content),
                     json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")));
    assert_int_equal(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")), 3);
    json_decref(j);
}

static void test_bias_stop_echo(void **state)
{
    (void)state;
    json_t *plain = post("/v1/models/m/infer", "{\"prompt\":\"the cat\",\"max_tokens\":6,\"temperature\":0}");
    json_int_t first = json_integer_value(json_array_get(json_object_get(plain, "tokens"), 0));
    json_int_t second = json_integer_value(json_array_get(json_object_get(plain, "tokens"), 1));
    char body[256];
    /* The greedy first token banned: another one comes first. */
    snprintf(body, sizeof body,
             "{\"prompt\":\"the cat\",\"max_tokens\":6,\"temperature\":0,\"logit_bias\":{\"%lld\":-100}}",
             (long long)first);
    json_t *j = post("/v1/models/m/infer", body);
    assert_int_not_equal(json_integer_value(json_array_get(json_object_get(j, "tokens"), 0)), first);
    json_decref(j);
    /* A stop token id: it ends the output before it (when the second token differs from the first). */
    if (second != first) {
        snprintf(body, sizeof body, "{\"prompt\":\"the cat\",\"max_tokens\":6,\"temperature\":0,\"stop\":[%lld]}",
                 (long long)second);
        j = post("/v1/models/m/infer", body);
        assert_int_equal(json_array_size(json_object_get(j, "tokens")), 1);
        assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "stop");
        json_decref(j);
    }
    /* A strong frequency penalty: no token repeats. */
    j = post("/v1/models/m/infer",
             "{\"prompt\":\"the cat\",\"max_tokens\":16,\"temperature\":0,\"frequency_penalty\":2,\"presence_penalty\":2}");
    json_t *t = json_object_get(j, "tokens");
    for (size_t a = 0; a < json_array_size(t); a++)
        for (size_t b = a + 1; b < json_array_size(t); b++)
            assert_int_not_equal(json_integer_value(json_array_get(t, a)), json_integer_value(json_array_get(t, b)));
    json_decref(j);
    json_decref(plain);
    /* echo: the prompt, then the completion. */
    j = post("/v1/completions", "{\"model\":\"m\",\"prompt\":\"the cat\",\"max_tokens\":3,\"temperature\":0,\"echo\":true}");
    const char *text = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(text);
    assert_int_equal(strncmp(text, "the cat", 7), 0);
    json_decref(j);
}

/* response_format json_object: every output is a valid JSON prefix, and a
 * whole object (that parses) whenever it stopped on its own; greedy and
 * sampled, on a model of random weights that would never write JSON. */
static void test_json_object(void **state)
{
    (void)state;
    int complete = 0;
    for (int i = 0; i < 8; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"json\"}],\"max_tokens\":96,"
                 "\"temperature\":%s,\"seed\":%d,\"response_format\":{\"type\":\"json_object\"}}",
                 i == 0 ? "0" : "1", i);
        json_t *j = post("/v1/chat/completions", body);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        const char *text = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
        const char *fin = json_string_value(json_object_get(c, "finish_reason"));
        assert_non_null(text);
        colo_json_fsm fsm;
        colo_json_fsm_init(&fsm);
        if (!colo_json_fsm_feed(&fsm, text, strlen(text)))
            fail_msg("not a JSON prefix: %s", text);
        if (!strcmp(fin, "stop")) {
            assert_true(colo_json_fsm_done(&fsm));
            json_t *doc = json_loads(text, JSON_ALLOW_NUL, NULL);
            if (!json_is_object(doc))
                fail_msg("does not parse as an object: %s", text);
            json_decref(doc);
            complete++;
        }
        json_decref(j);
    }
    printf("%d of 8 outputs complete objects\n", complete);
    /* a json_schema without a name is refused, naming it */
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/chat/completions",
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}",
                         &r));
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "json_schema"));
    srv_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_logprobs), cmocka_unit_test(test_bias_stop_echo),
                                       cmocka_unit_test(test_json_object)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
