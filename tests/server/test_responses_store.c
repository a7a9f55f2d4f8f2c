/* The Responses API's stored responses end to end (docs/API.md): a
 * response is kept (OpenAI's default) and read back whole, continued with
 * previous_response_id (its conversation before the new input; its
 * prompt counted, the prefix cache's part reported), its own input items
 * listed, deleted; another tenant's ids are 404; store: false keeps
 * nothing; past responses.retention_s it is gone; responses.enabled:
 * false refuses store and previous_response_id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/tenants/sha256.h"
#include "tests/server/server_fixture.h"

static char *config_text(const char *responses)
{
    char ha[65], hb[65];
    srv_key_sha256("ka", ha), srv_key_sha256("kb", hb);
    char *y = malloc(4096);
    snprintf(y, 4096,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 1GiB }\n"
             "models:\n"
             "  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: search, keys: [ { name: a, sha256: \"%s\" } ] }\n"
             "  - organization: globex\n"
             "    projects:\n"
             "      - { name: bi, keys: [ { name: b, sha256: \"%s\" } ] }\n"
             "responses: { %s }\n",
             ha, hb, responses);
    return y;
}

static json_t *call(srv_fixture *f, const char *method, const char *key, const char *path, const char *body,
                    int *status)
{
    char h[256];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", key);
    srv_resp r;
    *status = 0;
    if (!srv_http_h(f, method, path, h, body, &r))
        return NULL;
    *status = r.status;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    return j;
}

/* POST /v1/responses: the answer (200 asserted). */
static json_t *respond(srv_fixture *f, const char *key, const char *extra, const char *input)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"input\":\"%s\",\"max_output_tokens\":6,\"temperature\":0%s}", input,
             extra);
    int st;
    json_t *j = call(f, "POST", key, "/v1/responses", body, &st);
    if (st != 200)
        fprintf(stderr, "%s -> %d %s\n", body, st, j ? json_dumps(j, 0) : "");
    assert_int_equal(st, 200);
    return j;
}

static const char *id_of(const json_t *j) { return json_string_value(json_object_get(j, "id")); }

static int64_t usage(const json_t *r, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(r, "usage"), key));
}

static void test_kept_continued_listed_deleted(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("retention_s: 3600");
    assert_true(srv_start_logged(&f, y));
    free(y);
    json_t *r1 = respond(&f, "ka", "", "hello there, how are you today");
    assert_true(json_is_true(json_object_get(r1, "store")));
    char path[256];
    snprintf(path, sizeof path, "/v1/responses/%s", id_of(r1));
    int st;
    json_t *got = call(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_equal(got, r1));
    json_decref(got);
    /* continued: the first turn and its answer come before the new input */
    char extra[256];
    snprintf(extra, sizeof extra, ",\"previous_response_id\":\"%s\"", id_of(r1));
    json_t *r2 = respond(&f, "ka", extra, "and tomorrow?");
    assert_string_equal(json_string_value(json_object_get(r2, "previous_response_id")), id_of(r1));
    json_t *alone = respond(&f, "ka", ",\"store\":false", "and tomorrow?");
    assert_false(json_is_true(json_object_get(alone, "store")));
    assert_true(usage(r2, "input_tokens") > usage(r1, "input_tokens"));
    assert_true(usage(r2, "input_tokens") > usage(alone, "input_tokens"));
    int64_t cached = json_integer_value(
        json_object_get(json_object_get(json_object_get(r2, "usage"), "input_tokens_details"), "cached_tokens"));
    assert_true(cached >= 0 && cached < usage(r2, "input_tokens"));
    /* its own input items: one message, the new one */
    snprintf(path, sizeof path, "/v1/responses/%s/input_items", id_of(r2));
    json_t *items = call(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    json_t *data = json_object_get(items, "data");
    assert_int_equal(json_array_size(data), 1);
    json_t *it = json_array_get(data, 0);
    assert_string_equal(json_string_value(json_object_get(it, "role")), "user");
    assert_true(!strncmp(json_string_value(json_object_get(it, "id")), "msg_", 4));
    json_t *part = json_array_get(json_object_get(it, "content"), 0);
    assert_string_equal(json_string_value(json_object_get(part, "text")), "and tomorrow?");
    json_decref(items);
    /* a chain of three: the third sees both earlier turns */
    snprintf(extra, sizeof extra, ",\"previous_response_id\":\"%s\"", id_of(r2));
    json_t *r3 = respond(&f, "ka", extra, "and after?");
    assert_true(usage(r3, "input_tokens") > usage(r2, "input_tokens"));
    /* store: false is not kept */
    snprintf(path, sizeof path, "/v1/responses/%s", id_of(alone));
    json_decref(call(&f, "GET", "ka", path, NULL, &st));
    assert_int_equal(st, 404);
    /* another tenant: 404 for reading, deleting and continuing */
    snprintf(path, sizeof path, "/v1/responses/%s", id_of(r1));
    json_decref(call(&f, "GET", "kb", path, NULL, &st));
    assert_int_equal(st, 404);
    json_decref(call(&f, "DELETE", "kb", path, NULL, &st));
    assert_int_equal(st, 404);
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"%s\"}", id_of(r1));
    json_t *e = call(&f, "POST", "kb", "/v1/responses", body, &st);
    assert_int_equal(st, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "param")),
                        "previous_response_id");
    json_decref(e);
    /* deleted: gone, and cannot be continued */
    json_t *del = call(&f, "DELETE", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_is_true(json_object_get(del, "deleted")));
    json_decref(del);
    json_decref(call(&f, "GET", "ka", path, NULL, &st));
    assert_int_equal(st, 404);
    json_decref(call(&f, "POST", "ka", "/v1/responses", body, &st));
    assert_int_equal(st, 404);
    json_decref(r1), json_decref(r2), json_decref(r3), json_decref(alone);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_retention_and_off(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("retention_s: 1, store_default: false");
    assert_true(srv_start_logged(&f, y));
    free(y);
    json_t *plain = respond(&f, "ka", "", "hi");
    assert_false(json_is_true(json_object_get(plain, "store")));
    json_t *kept = respond(&f, "ka", ",\"store\":true", "hi");
    char path[256];
    int st;
    snprintf(path, sizeof path, "/v1/responses/%s", id_of(kept));
    json_decref(call(&f, "GET", "ka", path, NULL, &st));
    assert_int_equal(st, 200);
    srv_sleep_ms(2100); /* past its retention */
    json_decref(call(&f, "GET", "ka", path, NULL, &st));
    assert_int_equal(st, 404);
    json_decref(plain), json_decref(kept);
    assert_int_equal(srv_stop(&f), 0);
    y = config_text("enabled: false");
    assert_true(srv_start_logged(&f, y));
    free(y);
    json_t *e = call(&f, "POST", "ka", "/v1/responses", "{\"model\":\"m\",\"input\":\"x\",\"store\":true}", &st);
    assert_int_equal(st, 400);
    json_decref(e);
    e = call(&f, "POST", "ka", "/v1/responses", "{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
             &st);
    assert_int_equal(st, 400);
    json_decref(e);
    json_t *ok = respond(&f, "ka", "", "hi"); /* no store asked: answered, not kept */
    assert_false(json_is_true(json_object_get(ok, "store")));
    json_decref(ok);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_continued_listed_deleted),
        cmocka_unit_test(test_retention_and_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
