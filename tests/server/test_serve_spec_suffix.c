/* The suffix cache end to end: a synthetic model served with
 * speculative: {suffix: true} (no prompt lookup) and three keys, two of
 * them in one project (one tenant) and one in another project of the same
 * organization. A prompt's output is drafted for the next request of the
 * same tenant, whichever of its keys asks, and for no request of the other
 * tenant; every answer has the tokens plain decoding gives. */
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
    char h[3][65], y[2048];
    const char *keys[] = {"key-search-1", "key-search-2", "key-chat"};
    for (int i = 0; i < 3; i++)
        srv_key_sha256(keys[i], h[i]);
    snprintf(y, sizeof y,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, api_key_env: COLO_TEST_OPERATOR_KEY }\n"
             "models:\n"
             "  - name: m\n    kind: llama\n    path: m.gguf\n    memory_fraction: 0.1\n"
             "    speculative: { suffix: true, suffix_memory_bytes: 256KiB, tokens: 8 }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: search, keys: [ { name: s1, sha256: \"%s\" }, { name: s2, sha256: \"%s\" } ] }\n"
             "      - { name: chat, keys: [ { name: c, sha256: \"%s\" } ] }\n",
             h[0], h[1], h[2]);
    return srv_start_env(&fx, y, "COLO_TEST_OPERATOR_KEY=key-operator") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

/* The drafted tokens counted for model m so far. */
static double drafted(void)
{
    srv_resp r;
    assert_true(srv_http_h(&fx, "GET", "/metrics", "Authorization: Bearer key-operator\r\n", NULL, &r));
    const char *key = "\ncolo_model_speculative_drafted_tokens_total{model=\"m\"} ";
    const char *p = strstr(r.body, key);
    double v = p ? strtod(p + strlen(key), NULL) : -1;
    srv_resp_free(&r);
    assert_true(v >= 0);
    return v;
}

/* The tokens key's request for prompt got (greedy), with speculative on or off. */
static json_t *ask(const char *key, const char *prompt, bool spec)
{
    char h[128], body[512];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0%s}", prompt,
             spec ? "" : ",\"speculative\":false");
    srv_resp r;
    assert_true(srv_http_h(&fx, "POST", "/v1/models/m/infer", h, body, &r));
    if (r.status != 200)
        fprintf(stderr, "%d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    json_t *t = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    assert_true(json_array_size(t) >= 8);
    return t;
}

/* Waits (up to 5 s) for the drafted count to pass before. */
static double drafted_after(double before)
{
    double v = drafted();
    for (int i = 0; i < 250 && v <= before; i++) {
        srv_sleep_ms(20);
        v = drafted();
    }
    return v;
}

static void test_tenants(void **state)
{
    (void)state;
    const char *prompt = "Write one line about the river, the bridge and the old mill by the water.";
    json_t *plain = ask("key-search-1", prompt, false);
    /* the cache holds acme/search's output of this very prompt, none of
     * acme/chat's: no drafts */
    json_t *first = ask("key-chat", prompt, true);
    assert_true(json_equal(first, plain));
    assert_true(drafted() == 0);
    /* acme/search: the output that acme/chat's request and the plain one
     * left are of other requests of its own and of another tenant; its
     * plain request stored its own (a request that opts out still feeds
     * the cache) */
    double d0 = drafted();
    json_t *second = ask("key-search-2", prompt, true);
    assert_true(json_equal(second, plain));
    double d1 = drafted_after(d0);
    assert_true(d1 > d0);
    /* acme/chat again: its own first answer drafts */
    json_t *third = ask("key-chat", prompt, true);
    assert_true(json_equal(third, plain));
    assert_true(drafted_after(d1) > d1);
    /* every drafted token came from the suffix cache (no lookup: no
     * series of it) */
    srv_resp r;
    assert_true(srv_http_h(&fx, "GET", "/metrics", "Authorization: Bearer key-operator\r\n", NULL, &r));
    const char *total = "\ncolo_model_speculative_drafted_tokens_total{model=\"m\"} ";
    const char *suffix = "\ncolo_model_speculative_source_drafted_tokens_total{model=\"m\",source=\"suffix\"} ";
    const char *pt = strstr(r.body, total), *ps = strstr(r.body, suffix);
    assert_non_null(pt);
    assert_non_null(ps);
    assert_true(strtod(ps + strlen(suffix), NULL) == strtod(pt + strlen(total), NULL));
    assert_null(strstr(r.body, "source=\"lookup\""));
    srv_resp_free(&r);
    json_decref(plain);
    json_decref(first);
    json_decref(second);
    json_decref(third);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
