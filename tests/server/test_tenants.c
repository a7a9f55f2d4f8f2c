/* Tenants end to end: three tenants in two organizations on a real
 * colo-server. Each quota level trips at its count with OpenAI's
 * x-ratelimit headers; hostile keys and headers get 401; a quota of 0,
 * a forbidden model or priority, and bursts at a quota's edge; the fair
 * share bound under a flood; the ledger after kill -9 and restart, a
 * deleted tenant's key, and colo-usage's sums against /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/tenants/sha256.h"
#include "tests/server/server_fixture.h"

/* Three tenants (projects) in two organizations, an extra key with a quota
 * of 0, and the admin key from the environment. */
static const char *KEYS[] = {"k-search", "k-ads", "k-bi", "k-zero", "k-bi-2", "k-lab"};

static char *config_text(const char *extra_models, bool with_bi)
{
    char h[6][65];
    for (int i = 0; i < 6; i++)
        srv_key_sha256(KEYS[i], h[i]);
    char *y = malloc(8192);
    snprintf(y, 8192,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, api_key_env: COLO_TEST_ADMIN_KEY }\n"
             "models:\n"
             "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.1, batching: { max_batch_size: 1 } }\n"
             "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n"
             "%s"
             "tenants:\n"
             "  - organization: acme\n"
             "    quotas: { requests_per_minute: 7 }\n"
             "    projects:\n"
             "      - name: search\n"
             "        weight: 2\n"
             "        models: [a]\n"
             "        max_priority: normal\n"
             "        quotas: { requests_per_minute: 4 }\n"
             "        keys: [ { name: ci, sha256: \"%s\" } ]\n"
             "      - name: ads\n"
             "        keys:\n"
             "          - { name: bot, sha256: \"%s\" }\n"
             "          - { name: zero, sha256: \"%s\", quotas: { requests_per_minute: 0 } }\n"
             "  - organization: globex\n"
             "    projects:\n"
             "      - { name: lab, keys: [ { name: lab, sha256: \"%s\", quotas: { requests_per_minute: 2 } } ] }\n"
             "%s",
             extra_models ? extra_models : "", h[0], h[1], h[3], h[5],
             with_bi ? "" : "      - { name: other, keys: [] }\n");
    if (with_bi) {
        size_t n = strlen(y);
        snprintf(y + n, 8192 - n,
                 "      - name: bi\n"
                 "        quotas: { tokens_per_minute: 40, concurrent: 2 }\n"
                 "        keys: [ { name: etl, sha256: \"%s\" }, { name: etl2, sha256: \"%s\" } ]\n",
                 h[2], h[4]);
    }
    return y;
}

static srv_fixture F;
static const char *ADMIN = "COLO_TEST_ADMIN_KEY=admin-key-1";

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&F) || !srv_mkmodel(&F, "m.gguf", 2, 64, 512, 1024))
        return -1;
    char *y = config_text(NULL, true);
    bool ok = srv_start_env(&F, y, ADMIN);
    free(y);
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    srv_cleanup(&F);
    return 0;
}

static int post(const char *key, const char *path, const char *body, srv_resp *r)
{
    char h[8192];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key ? key : "");
    if (!srv_http_h(&F, "POST", path, key ? h : NULL, body, r))
        return 0;
    return r->status;
}

static const char *GEN = "{\"model\":\"a\",\"prompt\":\"hi\",\"max_tokens\":3}";

static long header_num(const srv_resp *r, const char *name)
{
    char v[64];
    return srv_header(r, name, v, sizeof v) ? strtol(v, NULL, 10) : -999;
}

static void expect_error(const srv_resp *r, int status, const char *code, const char *in_message)
{
    assert_int_equal(r->status, status);
    json_t *j = srv_json(r);
    assert_non_null(j);
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_non_null(c);
    assert_string_equal(c, code);
    if (in_message && !strstr(m, in_message))
        fail_msg("expected '%s' in '%s'", in_message, m);
    json_decref(j);
}

/* ---- keys ------------------------------------------------------------------------- */

static void test_hostile_keys(void **state)
{
    (void)state;
    srv_resp r;
    assert_int_equal(post(NULL, "/v1/completions", GEN, &r), 401);
    srv_resp_free(&r);
    assert_int_equal(post("k-unknown", "/v1/completions", GEN, &r), 401);
    expect_error(&r, 401, "invalid_api_key", "unknown API key");
    char v[32];
    assert_non_null(srv_header(&r, "WWW-Authenticate", v, sizeof v));
    srv_resp_free(&r);
    /* two keys in one header, and two headers */
    assert_int_equal(post("k-search, Bearer k-ads", "/v1/completions", GEN, &r), 401);
    expect_error(&r, 401, "invalid_api_key", "exactly one API key");
    srv_resp_free(&r);
    assert_int_equal(post("k-search k-ads", "/v1/completions", GEN, &r), 401);
    srv_resp_free(&r);
    assert_true(srv_http_h(&F, "POST", "/v1/completions",
                           "Authorization: Bearer k-search\r\nAuthorization: Bearer k-ads\r\n", GEN, &r));
    expect_error(&r, 401, "invalid_api_key", "exactly one Authorization or x-api-key header");
    srv_resp_free(&r);
    /* x-api-key (Anthropic's clients) is a key too, but not beside Authorization */
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "x-api-key: k-unknown\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1}", &r));
    expect_error(&r, 401, "invalid_api_key", "unknown API key");
    srv_resp_free(&r);
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "x-api-key: k-search\r\nAuthorization: Bearer k-search\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1}", &r));
    expect_error(&r, 401, "invalid_api_key", "exactly one");
    srv_resp_free(&r);
    /* a browser's Basic credentials carry the key as the password:
     * "u:k-search" and "u:nope" in base64 */
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "Authorization: Basic dTprLXNlYXJjaA==\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1,\"priority\":\"high\"}", &r));
    expect_error(&r, 403, "priority_not_allowed", "project search"); /* known: search's ceiling applies */
    srv_resp_free(&r);
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "Authorization: Basic dTpub3Bl\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1}", &r));
    expect_error(&r, 401, "invalid_api_key", "unknown API key");
    srv_resp_free(&r);
    /* "u:k-search\0junk": a password cut at a NUL is not the key */
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "Authorization: Basic dTprLXNlYXJjaABqdW5r\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1,\"priority\":\"high\"}", &r));
    expect_error(&r, 401, "invalid_api_key", "must be 'Bearer <key>'");
    srv_resp_free(&r);
    assert_true(srv_http_h(&F, "POST", "/v1/models/a/infer", "Authorization: Basic !!!\r\n",
                           "{\"prompt\":\"hi\",\"max_tokens\":1}", &r));
    expect_error(&r, 401, "invalid_api_key", "must be 'Bearer <key>'");
    srv_resp_free(&r);
    /* a very long key (below the header limit): refused before hashing */
    char *long_key = malloc(6001);
    memset(long_key, 'k', 6000);
    long_key[6000] = 0;
    assert_int_equal(post(long_key, "/v1/completions", GEN, &r), 401);
    expect_error(&r, 401, "invalid_api_key", "too long");
    srv_resp_free(&r);
    /* a key that is a prefix or an extension of a valid one */
    assert_int_equal(post("k-searc", "/v1/completions", GEN, &r), 401);
    srv_resp_free(&r);
    assert_int_equal(post("k-searchh", "/v1/completions", GEN, &r), 401);
    srv_resp_free(&r);
    free(long_key);
    /* the hash printed by colo-server --hash-key is the one the server compares */
    char cmd[512], out[80] = "", want[65];
    snprintf(cmd, sizeof cmd, "%s/colo-server --hash-key k-search", COLO_BINARY_DIR);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(out, sizeof out, p));
    assert_int_equal(pclose(p), 0);
    srv_key_sha256("k-search", want);
    assert_memory_equal(out, want, 64);
}

/* ---- quotas at each level ---------------------------------------------------------- */

static void test_quota_zero_and_access(void **state)
{
    (void)state;
    srv_resp r;
    assert_int_equal(post("k-zero", "/v1/completions", GEN, &r), 429);
    expect_error(&r, 429, "rate_limit_exceeded", "key zero: requests_per_minute quota of 0");
    assert_int_equal(header_num(&r, "x-ratelimit-limit-requests"), 0);
    assert_true(header_num(&r, "Retry-After") >= 1);
    srv_resp_free(&r);
    /* a model the project may not use: 403, and so is a priority above its ceiling */
    assert_int_equal(post("k-search", "/v1/completions", "{\"model\":\"b\",\"prompt\":\"hi\",\"max_tokens\":2}", &r), 403);
    expect_error(&r, 403, "model_not_allowed", "project search may not use model b");
    srv_resp_free(&r);
    assert_int_equal(post("k-search", "/v1/models/a/infer", "{\"prompt\":\"hi\",\"max_tokens\":2,\"priority\":\"high\"}", &r),
                     403);
    expect_error(&r, 403, "priority_not_allowed", "priority normal at most");
    srv_resp_free(&r);
}

/* acme/search: 4 requests a minute; acme: 7. The 403s above took none. */
static void test_project_then_organization_rpm(void **state)
{
    (void)state;
    srv_resp r;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(post("k-search", "/v1/completions", GEN, &r), 200);
        assert_int_equal(header_num(&r, "x-ratelimit-limit-requests"), 4);
        assert_int_equal(header_num(&r, "x-ratelimit-remaining-requests"), 3 - i);
        char v[32];
        assert_non_null(srv_header(&r, "x-ratelimit-reset-requests", v, sizeof v));
        assert_non_null(strchr(v, 's'));
        srv_resp_free(&r);
    }
    assert_int_equal(post("k-search", "/v1/completions", GEN, &r), 429);
    expect_error(&r, 429, "rate_limit_exceeded", "project search: requests_per_minute quota of 4");
    assert_int_equal(header_num(&r, "x-ratelimit-remaining-requests"), 0);
    long retry = header_num(&r, "Retry-After");
    assert_true(retry >= 1 && retry <= 15); /* one request refills in 60/4 s */
    srv_resp_free(&r);
    /* acme has 3 of its 7 left; ads has no quota of its own */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(post("k-ads", "/v1/completions", GEN, &r), 200);
        assert_int_equal(header_num(&r, "x-ratelimit-limit-requests"), 7);
        assert_int_equal(header_num(&r, "x-ratelimit-remaining-requests"), 2 - i);
        srv_resp_free(&r);
    }
    assert_int_equal(post("k-ads", "/v1/completions", GEN, &r), 429);
    expect_error(&r, 429, "rate_limit_exceeded", "organization acme: requests_per_minute quota of 7");
    srv_resp_free(&r);
}

/* a key's own quota; the headers on a streamed answer */
static void test_key_rpm_and_stream_headers(void **state)
{
    (void)state;
    srv_resp r;
    assert_int_equal(post("k-lab", "/v1/completions", "{\"model\":\"a\",\"prompt\":\"hi\",\"max_tokens\":3,\"stream\":true}", &r),
                     200);
    char v[64];
    assert_non_null(srv_header(&r, "Content-Type", v, sizeof v));
    assert_non_null(strstr(v, "text/event-stream"));
    assert_int_equal(header_num(&r, "x-ratelimit-limit-requests"), 2);
    assert_int_equal(header_num(&r, "x-ratelimit-remaining-requests"), 1);
    assert_non_null(strstr(r.body, "[DONE]"));
    srv_resp_free(&r);
    assert_int_equal(post("k-lab", "/v1/completions", GEN, &r), 200);
    assert_int_equal(header_num(&r, "x-ratelimit-remaining-requests"), 0);
    srv_resp_free(&r);
    assert_int_equal(post("k-lab", "/v1/completions", GEN, &r), 429);
    expect_error(&r, 429, "rate_limit_exceeded", "key lab: requests_per_minute quota of 2");
    assert_true(header_num(&r, "Retry-After") >= 1 && header_num(&r, "Retry-After") <= 30);
    srv_resp_free(&r);
}

/* globex/bi: 40 tokens a minute, taken when a request ends; a request is
 * admitted while the bucket holds at least one. */
static void test_tokens_quota(void **state)
{
    (void)state;
    srv_resp r;
    long used = 0, last_before = 0;
    int admitted = 0;
    for (int i = 0; i < 20; i++) {
        int st = post("k-bi", "/v1/completions", "{\"model\":\"b\",\"prompt\":\"hello there\",\"max_tokens\":7}", &r);
        if (st == 429) {
            expect_error(&r, 429, "rate_limit_exceeded", "project bi: tokens_per_minute quota of 40");
            assert_int_equal(header_num(&r, "x-ratelimit-limit-tokens"), 40);
            assert_int_equal(header_num(&r, "x-ratelimit-remaining-tokens"), 0);
            srv_resp_free(&r);
            break;
        }
        assert_int_equal(st, 200);
        assert_int_equal(header_num(&r, "x-ratelimit-limit-tokens"), 40);
        json_t *j = srv_json(&r);
        last_before = used;
        used += (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens"));
        json_decref(j);
        srv_resp_free(&r);
        admitted++;
    }
    /* the last admitted request found tokens left (refill is 2 every 3 s:
     * one more for the time this loop takes); the next one found none */
    assert_true(admitted >= 1);
    assert_true(last_before <= 40 - 1 + 1);
    assert_true(used >= 40);
    /* etl2 shares the project: refused too, at the project level */
    assert_int_equal(post("k-bi-2", "/v1/completions", GEN, &r), 429);
    expect_error(&r, 429, "rate_limit_exceeded", "project bi: tokens_per_minute");
    srv_resp_free(&r);
}

/* ---- bursts at a quota's edge ---------------------------------------------------------- */

static void test_concurrent_burst(void **state)
{
    (void)state;
    /* a fresh server: globex/bi allows 2 at once; 12 long requests at once */
    srv_fixture g;
    assert_true(srv_tmpdir(&g) && srv_mkmodel(&g, "m.gguf", 2, 64, 512, 1024));
    char *y = config_text(NULL, true);
    assert_true(srv_start_env(&g, y, ADMIN));
    free(y);
    const char *raw[12];
    for (int i = 0; i < 12; i++)
        raw[i] = srv_post_raw("/v1/completions", "Authorization: Bearer k-bi\r\n",
                              "{\"model\":\"b\",\"prompt\":\"hello 1\",\"max_tokens\":900,\"temperature\":0}");
    srv_resp r[12];
    srv_concurrent(g.port, raw, 12, r);
    int ok = 0, refused = 0;
    for (int i = 0; i < 12; i++) {
        if (r[i].status == 200)
            ok++;
        else if (r[i].status == 429 && strstr(r[i].body, "concurrent quota of 2"))
            refused++;
        srv_resp_free(&r[i]);
        free((char *)raw[i]);
    }
    assert_true(ok >= 1 && ok <= 2); /* never more than the quota at once */
    assert_int_equal(ok + refused, 12);

    /* acme/search allows 4 a minute: a burst of 10 admits exactly 4 */
    for (int i = 0; i < 10; i++)
        raw[i] = srv_post_raw("/v1/completions", "Authorization: Bearer k-search\r\n", GEN);
    srv_concurrent(g.port, raw, 10, r);
    ok = refused = 0;
    for (int i = 0; i < 10; i++) {
        ok += r[i].status == 200;
        refused += r[i].status == 429;
        srv_resp_free(&r[i]);
        free((char *)raw[i]);
    }
    assert_int_equal(ok, 4);
    assert_int_equal(refused, 6);
    srv_cleanup(&g);
}

/* ---- configuration ------------------------------------------------------------------- */

static void test_config_unknown_model(void **state)
{
    (void)state;
    srv_fixture g;
    assert_true(srv_tmpdir(&g) && srv_mkmodel(&g, "m.gguf", 2, 64, 512, 256));
    const char *y = "server: { listen: \"127.0.0.1:0\", device: cpu }\n"
                    "models:\n"
                    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n"
                    "tenants:\n"
                    "  - organization: acme\n"
                    "    projects: [ { name: p, models: [a, llama-70b], keys: [] } ]\n";
    assert_int_equal(srv_run_to_exit(&g, y), 2);
    char *log = srv_log(&g);
    char want[512];
    snprintf(want, sizeof want, "%s/config.yaml:6:40: tenants.models: 'llama-70b' (of p) is not a model", g.dir);
    if (!strstr(log, want))
        fail_msg("expected '%s' in: %s", want, log);
    free(log);
    srv_cleanup(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_keys),
        cmocka_unit_test(test_quota_zero_and_access),
        cmocka_unit_test(test_project_then_organization_rpm),
        cmocka_unit_test(test_key_rpm_and_stream_headers),
        cmocka_unit_test(test_tokens_quota),
        cmocka_unit_test(test_concurrent_burst),
        cmocka_unit_test(test_config_unknown_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
