/* n choices and the prefix cache through colo-server, on a synthetic model:
 * - chat with n = 3 at temperature 0: three choices, indexes 0..2, each the
 *   n = 1 answer; usage counts the prompt once and every choice's tokens;
 * - completions with n = 2, a seed and temperature 1, streamed: chunks
 *   tagged with their index add up to the whole answer's choices, each
 *   choice with its finish chunk; /infer lists its choices;
 * - a repeated long prompt hits the prefix cache: the metrics count the
 *   hit tokens, /v1/models shows the same, and the answer's
 *   usage.prompt_tokens_details.cached_tokens (streamed too); a model with
 *   prefix_cache: false never hits and gives the same answer. */
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
    if (!srv_tmpdir(&fx) || !srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 2048))
        return -1;
    return srv_start_logged(&fx, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
                                 "models:\n"
                                 "  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.05, prefix_cache: true }\n"
                                 "  - { name: off, kind: llama, path: m.gguf, memory_fraction: 0.05, prefix_cache: false }\n") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

static char *post_raw(const char *path, const char *body)
{
    srv_resp r;
    assert_true(srv_http(&fx, "POST", path, body, &r));
    if (r.status != 200)
        fail_msg("POST %s %s -> %d %s", path, body, r.status, r.body);
    char *b = r.body;
    r.body = NULL;
    srv_resp_free(&r);
    return b;
}

static json_t *post(const char *path, const char *body)
{
    char *b = post_raw(path, body);
    json_t *j = json_loads(b, 0, NULL);
    free(b);
    assert_non_null(j);
    return j;
}

static json_int_t usage(json_t *j, const char *k) { return json_integer_value(json_object_get(json_object_get(j, "usage"), k)); }

static void test_chat_n_greedy(void **state)
{
    (void)state;
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"tell me about the sea\"}],\"max_tokens\":12,"
                       "\"temperature\":0";
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",%s}", msgs);
    json_t *one = post("/v1/chat/completions", body);
    snprintf(body, sizeof body, "{\"model\":\"m\",%s,\"n\":3}", msgs);
    json_t *three = post("/v1/chat/completions", body);
    json_t *c1 = json_object_get(one, "choices"), *c3 = json_object_get(three, "choices");
    assert_int_equal(json_array_size(c1), 1);
    assert_int_equal(json_array_size(c3), 3);
    const char *want = json_string_value(json_object_get(json_object_get(json_array_get(c1, 0), "message"), "content"));
    assert_non_null(want);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(c3, i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
        assert_string_equal(json_string_value(json_object_get(json_object_get(c, "message"), "content")), want);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                            json_string_value(json_object_get(json_array_get(c1, 0), "finish_reason")));
    }
    assert_int_equal(usage(three, "prompt_tokens"), usage(one, "prompt_tokens"));
    assert_int_equal(usage(three, "completion_tokens"), 3 * usage(one, "completion_tokens"));
    assert_int_equal(usage(three, "total_tokens"), usage(three, "prompt_tokens") + usage(three, "completion_tokens"));
    /* logprobs per choice: greedy, each choice's are the n = 1 answer's */
    snprintf(body, sizeof body, "{\"model\":\"m\",%s,\"n\":2,\"logprobs\":true,\"top_logprobs\":2}", msgs);
    json_t *lp2 = post("/v1/chat/completions", body);
    snprintf(body, sizeof body, "{\"model\":\"m\",%s,\"logprobs\":true,\"top_logprobs\":2}", msgs);
    json_t *lp1 = post("/v1/chat/completions", body);
    json_t *want_lp = json_object_get(json_array_get(json_object_get(lp1, "choices"), 0), "logprobs");
    assert_int_equal(json_array_size(json_object_get(want_lp, "content")), usage(one, "completion_tokens"));
    /* (the same tokens; the values to float precision: two choices decode
     * as a step of two rows, which sums in another order than one row) */
    json_t *wc = json_object_get(want_lp, "content");
    for (size_t i = 0; i < 2; i++) {
        json_t *gc = json_object_get(json_object_get(json_array_get(json_object_get(lp2, "choices"), i), "logprobs"),
                                     "content");
        assert_int_equal(json_array_size(gc), json_array_size(wc));
        for (size_t t = 0; t < json_array_size(wc); t++) {
            json_t *g = json_array_get(gc, t), *w = json_array_get(wc, t);
            assert_string_equal(json_string_value(json_object_get(g, "token")),
                                json_string_value(json_object_get(w, "token")));
            double d = json_real_value(json_object_get(g, "logprob")) - json_real_value(json_object_get(w, "logprob"));
            if (d > 1e-3 || d < -1e-3)
                fail_msg("choice %zu token %zu: logprob %f, alone %f", i, t,
                         json_real_value(json_object_get(g, "logprob")), json_real_value(json_object_get(w, "logprob")));
            assert_int_equal(json_array_size(json_object_get(g, "top_logprobs")), 2);
        }
    }
    json_decref(lp1);
    json_decref(lp2);
    json_decref(one);
    json_decref(three);
}

static void test_completions_n_stream(void **state)
{
    (void)state;
    const char *base = "{\"model\":\"m\",\"prompt\":\"once upon a time\",\"max_tokens\":10,\"temperature\":1,"
                       "\"seed\":5,\"n\":2";
    char body[512];
    snprintf(body, sizeof body, "%s}", base);
    json_t *whole = post("/v1/completions", body);
    json_t *chs = json_object_get(whole, "choices");
    assert_int_equal(json_array_size(chs), 2);
    snprintf(body, sizeof body, "%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", base);
    char *sse = post_raw("/v1/completions", body);
    char *names[512], *data[512];
    int n = srv_sse(sse, names, data, 512);
    char text[2][1024] = {"", ""};
    int finishes[2] = {0, 0};
    bool done = false, got_usage = false;
    for (int i = 0; i < n; i++) {
        if (!strcmp(data[i], "[DONE]")) {
            done = true;
        } else if (data[i][0]) {
            json_t *ev = json_loads(data[i], 0, NULL);
            assert_non_null(ev);
            json_t *evc = json_object_get(ev, "choices");
            if (json_array_size(evc) == 0) { /* the usage chunk */
                assert_int_equal(usage(ev, "completion_tokens"), usage(whole, "completion_tokens"));
                got_usage = true;
            }
            for (size_t k = 0; k < json_array_size(evc); k++) {
                json_t *c = json_array_get(evc, k);
                json_int_t idx = json_integer_value(json_object_get(c, "index"));
                assert_true(idx == 0 || idx == 1);
                strncat(text[idx], json_string_value(json_object_get(c, "text")),
                        sizeof text[idx] - strlen(text[idx]) - 1);
                if (json_is_string(json_object_get(c, "finish_reason"))) {
                    finishes[idx]++;
                    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                                        json_string_value(json_object_get(json_array_get(chs, idx), "finish_reason")));
                }
            }
            json_decref(ev);
        }
        free(names[i]);
        free(data[i]);
    }
    free(sse);
    assert_true(done);
    assert_true(got_usage);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(finishes[i], 1);
        assert_string_equal(text[i], json_string_value(json_object_get(json_array_get(chs, i), "text")));
    }
    /* usage: every choice's tokens */
    assert_true(usage(whole, "completion_tokens") > 10);

    /* /infer: the first choice at the top, every choice in "choices", each seed + i */
    json_t *inf = post("/v1/models/m/infer",
                       "{\"prompt\":\"once upon a time\",\"max_tokens\":10,\"temperature\":1,\"seed\":5,\"n\":2}");
    json_t *ic = json_object_get(inf, "choices");
    assert_int_equal(json_array_size(ic), 2);
    assert_true(json_equal(json_object_get(inf, "tokens"), json_object_get(json_array_get(ic, 0), "tokens")));
    json_t *seed6 =
        post("/v1/models/m/infer", "{\"prompt\":\"once upon a time\",\"max_tokens\":10,\"temperature\":1,\"seed\":6}");
    assert_true(json_equal(json_object_get(seed6, "tokens"), json_object_get(json_array_get(ic, 1), "tokens")));
    for (int i = 0; i < 2; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(ic, i), "text")),
                            json_string_value(json_object_get(json_array_get(chs, i), "text")));
    /* streamed /infer: every token event names its choice, and each choice's
     * tokens in order are its tokens in the answer */
    char *isse = post_raw("/v1/models/m/infer", "{\"prompt\":\"once upon a time\",\"max_tokens\":10,"
                                                "\"temperature\":1,\"seed\":5,\"n\":2,\"stream\":true}");
    char *in2[512], *id2[512];
    int ne = srv_sse(isse, in2, id2, 512);
    json_t *streamed[2] = {json_array(), json_array()};
    for (int i = 0; i < ne; i++) {
        json_t *ev = json_loads(id2[i], 0, NULL);
        if (ev && !strcmp(in2[i], "") && json_object_get(ev, "token")) {
            json_int_t idx = json_integer_value(json_object_get(ev, "index"));
            assert_true(json_is_integer(json_object_get(ev, "index")) && (idx == 0 || idx == 1));
            json_array_append(streamed[idx], json_object_get(ev, "token"));
        }
        json_decref(ev);
        free(in2[i]);
        free(id2[i]);
    }
    free(isse);
    for (int i = 0; i < 2; i++) {
        assert_true(json_equal(streamed[i], json_object_get(json_array_get(ic, i), "tokens")));
        json_decref(streamed[i]);
    }
    json_decref(seed6);
    json_decref(inf);
    json_decref(whole);
}

/* The value of a metric line "name{model="m"} value" in the /metrics text. */
static double metric(const char *name, const char *model)
{
    srv_resp r;
    assert_true(srv_http(&fx, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    char key[256];
    snprintf(key, sizeof key, "\n%s{model=\"%s\"} ", name, model);
    const char *p = strstr(r.body, key);
    if (!p)
        fail_msg("no %s for %s in /metrics", name, model);
    double v = strtod(p + strlen(key), NULL);
    srv_resp_free(&r);
    return v;
}

static json_int_t model_field(const char *model, const char *k)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", model);
    int status;
    json_t *j = srv_get_json(&fx, path, &status);
    assert_int_equal(status, 200);
    json_t *v = json_object_get(json_object_get(j, "prefix_cache"), k);
    json_int_t x = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
    json_decref(j);
    return x;
}

static void test_prefix_cache_counted(void **state)
{
    (void)state;
    /* a long shared prompt: byte-level tokens, well over a few blocks */
    char sys[1200];
    size_t o = 0;
    for (int i = 0; o < 700; i++)
        o += (size_t)snprintf(sys + o, sizeof sys - o, "rule %d: answer briefly. ", i);
    char body[4096], prompts[2][1400];
    json_t *answers[2][2];
    const char *models[] = {"m", "off"};
    /* the hit the second prompt should find: the tokens both prompts start
     * with, in whole 16-token blocks, short of its last two tokens */
    json_t *toks[2];
    for (int k = 0; k < 2; k++) {
        snprintf(prompts[k], sizeof prompts[k], "%s question %d", sys, k);
        snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", prompts[k]);
        json_t *t = post("/v1/models/m/tokenize", body);
        toks[k] = json_incref(json_object_get(t, "tokens"));
        json_decref(t);
    }
    size_t common = 0, n1 = json_array_size(toks[1]);
    while (common < json_array_size(toks[0]) && common < n1 &&
           json_equal(json_array_get(toks[0], common), json_array_get(toks[1], common)))
        common++;
    size_t cap = (n1 - 2) / 16;
    json_int_t want_hit = (json_int_t)((common / 16 < cap ? common / 16 : cap) * 16);
    assert_true(want_hit >= 400); /* (the prompts are what this test means them to be) */
    for (int mi = 0; mi < 2; mi++) {
        double q0 = metric("colo_model_prefix_cache_queries_total", models[mi]);
        double h0 = metric("colo_model_prefix_cache_hits_total", models[mi]);
        for (int k = 0; k < 2; k++) {
            snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":6,\"temperature\":0}",
                     models[mi], prompts[k]);
            answers[mi][k] = post("/v1/completions", body);
        }
        double q1 = metric("colo_model_prefix_cache_queries_total", models[mi]);
        double h1 = metric("colo_model_prefix_cache_hits_total", models[mi]);
        if (mi == 0) {
            assert_true(q1 - q0 == 2);
            assert_int_equal((json_int_t)(h1 - h0), want_hit);
            assert_true(metric("colo_model_prefix_cache_bytes", "m") > 0);
            assert_int_equal(model_field("m", "enabled"), 1);
            assert_int_equal(model_field("m", "hit_tokens"), (json_int_t)h1);
            assert_int_equal(model_field("m", "queries"), (json_int_t)q1);
            assert_true(model_field("m", "cached_bytes") > 0);
        } else {
            assert_true(h1 == 0 && q1 == 0);
            assert_int_equal(model_field("off", "enabled"), 0);
            assert_int_equal(model_field("off", "cached_bytes"), 0);
        }
    }
    json_decref(toks[0]);
    json_decref(toks[1]);
    /* each answer's usage says how much of its prompt the cache held */
    for (int mi = 0; mi < 2; mi++)
        for (int k = 0; k < 2; k++) {
            json_t *d = json_object_get(json_object_get(answers[mi][k], "usage"), "prompt_tokens_details");
            assert_int_equal(json_integer_value(json_object_get(d, "cached_tokens")), mi == 0 && k == 1 ? want_hit : 0);
        }
    /* streamed, in the usage chunk too */
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"prompt\":\"%s\",\"max_tokens\":2,\"temperature\":0,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}",
             prompts[1]);
    char *sse = post_raw("/v1/completions", body);
    assert_non_null(sse);
    const char *cached = strstr(sse, "\"cached_tokens\":");
    assert_non_null(cached);
    assert_true(atoi(cached + strlen("\"cached_tokens\":")) >= want_hit);
    free(sse);
    for (int k = 0; k < 2; k++) { /* cache on or off: the same answers */
        json_t *a = json_array_get(json_object_get(answers[0][k], "choices"), 0);
        json_t *b = json_array_get(json_object_get(answers[1][k], "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(a, "text")), json_string_value(json_object_get(b, "text")));
        json_decref(answers[0][k]);
        json_decref(answers[1][k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_n_greedy),
        cmocka_unit_test(test_completions_n_stream),
        cmocka_unit_test(test_prefix_cache_counted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
