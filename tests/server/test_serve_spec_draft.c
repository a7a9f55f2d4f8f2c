/* A draft model end to end: model big (Q8_0) drafts with model small, a
 * Q4_1 copy of the same synthetic weights, served beside it. Greedy
 * answers are the same tokens as with "speculative": false, and the
 * drafted and accepted tokens show in /v1/stats; with small asleep, big
 * answers the same by plain decoding (and small stays asleep). A load
 * through POST /admin/models whose draft is unknown, itself or of another
 * vocabulary is refused with 400 naming the models, and so is a server
 * whose config pairs models of different vocabularies. With small
 * unloaded big decodes plainly, and drafts again once small is loaded
 * again through the admin routes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "server_fixture.h"

#define ADMIN_H "Authorization: Bearer admin-secret\r\n"

static srv_fixture fx;

static bool write_model(const char *file, colo_dtype type, int vocab)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", fx.dir, file);
    colo_mkmodel_config c = {.n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .n_ff = 128,
                             .n_vocab = vocab, .n_ctx = 256, .type = type, .seed = 5};
    if (colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return false;
    }
    return true;
}

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&fx) || !write_model("t.gguf", COLO_Q8_0, 512) || !write_model("d.gguf", COLO_Q4_1, 512) ||
        !write_model("o.gguf", COLO_Q4_1, 544))
        return -1;
    return srv_start_env(&fx,
                         "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2,\n"
                         "          telemetry_interval_ms: 100 }\n"
                         "models:\n"
                         "  - name: big\n    kind: llama\n    path: t.gguf\n    memory_fraction: 0.1\n"
                         "    speculative: { draft: small, tokens: 4 }\n"
                         "  - name: small\n    kind: llama\n    path: d.gguf\n    memory_fraction: 0.1\n",
                         "COLO_ADMIN_KEY=admin-secret")
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

#define PROMPT "a quiet harbour town"

static json_t *infer(bool speculative)
{
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"" PROMPT "\",\"max_tokens\":160,\"temperature\":0%s}",
             speculative ? "" : ",\"speculative\":false");
    json_t *j = srv_post_json(&fx, "/v1/models/big/infer", body);
    assert_non_null(j);
    assert_non_null(json_object_get(j, "tokens"));
    return j;
}

/* big's drafted and accepted tokens in /v1/stats, once it has moved on
 * past what was asked before (its seq twice). */
static void drafted(json_int_t *n_drafted, json_int_t *n_accepted)
{
    json_t *stats = srv_fresh_stats(&fx);
    json_t *models = json_object_get(stats, "models"), *m;
    size_t i;
    *n_drafted = *n_accepted = -1;
    json_array_foreach(models, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "name")) ?: "", "big"))
            continue;
        json_t *sp = json_object_get(m, "speculative");
        *n_drafted = json_integer_value(json_object_get(sp, "drafted_tokens"));
        *n_accepted = json_integer_value(json_object_get(sp, "accepted_tokens"));
    }
    json_decref(stats);
    assert_true(*n_drafted >= 0);
}

static const char *state_of(const char *name)
{
    static char s[32];
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    int st;
    json_t *m = srv_get_json(&fx, path, &st);
    assert_int_equal(st, 200);
    snprintf(s, sizeof s, "%s", json_string_value(json_object_get(m, "state")) ?: "");
    json_decref(m);
    return s;
}

static void test_draft_then_asleep(void **state)
{
    (void)state;
    json_t *spec = infer(true), *plain = infer(false);
    assert_true(json_equal(json_object_get(spec, "tokens"), json_object_get(plain, "tokens")));
    json_int_t d0, a0;
    drafted(&d0, &a0);
    assert_true(d0 > 0);
    assert_true(a0 > 0 && a0 <= d0);

    /* small asleep: big decodes plainly, the same tokens */
    srv_resp r;
    assert_true(srv_http_h(&fx, "POST", "/admin/models/small/sleep", ADMIN_H, NULL, &r));
    assert_int_equal(r.status, 202);
    srv_resp_free(&r);
    for (int i = 0; i < 500 && strcmp(state_of("small"), "sleeping"); i++)
        srv_sleep_ms(10);
    assert_string_equal(state_of("small"), "sleeping");
    json_t *asleep = infer(true);
    assert_true(json_equal(json_object_get(asleep, "tokens"), json_object_get(plain, "tokens")));
    json_int_t d1, a1;
    drafted(&d1, &a1);
    assert_int_equal(d1, d0);
    assert_string_equal(state_of("small"), "sleeping");

    /* awake again: drafts again */
    assert_true(srv_http_h(&fx, "POST", "/admin/models/small/wake", ADMIN_H, NULL, &r));
    assert_int_equal(r.status, 202);
    srv_resp_free(&r);
    for (int i = 0; i < 500 && strcmp(state_of("small"), "ready"); i++)
        srv_sleep_ms(10);
    assert_string_equal(state_of("small"), "ready");
    json_t *awake = infer(true);
    assert_true(json_equal(json_object_get(awake, "tokens"), json_object_get(plain, "tokens")));
    json_int_t d2, a2;
    drafted(&d2, &a2);
    assert_true(d2 > d1);
    json_decref(spec);
    json_decref(plain);
    json_decref(asleep);
    json_decref(awake);
}

/* The value of name{labels} in a /metrics page; -1 when absent. */
static double metric(const char *text, const char *name, const char *labels)
{
    char key[200];
    snprintf(key, sizeof key, "\n%s{%s} ", name, labels);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

/* After a drafted request, /metrics shows what /v1/stats shows: the
 * tokens drafted and accepted, all of them from the draft model (big has
 * no other source: no lookup or suffix series), and the draft model's
 * passes and their time. */
static void test_metrics_match_stats(void **state)
{
    (void)state;
    json_t *spec = infer(true);
    json_decref(spec);
    json_t *stats = srv_fresh_stats(&fx);
    json_t *sp = NULL, *m;
    size_t i;
    json_array_foreach(json_object_get(stats, "models"), i, m)
    {
        if (!strcmp(json_string_value(json_object_get(m, "name")) ?: "", "big"))
            sp = json_object_get(m, "speculative");
    }
    assert_non_null(sp);
    json_int_t drafted = json_integer_value(json_object_get(sp, "drafted_tokens"));
    json_int_t accepted = json_integer_value(json_object_get(sp, "accepted_tokens"));
    json_t *src = json_object_get(json_object_get(sp, "sources"), "draft");
    assert_non_null(src);
    assert_null(json_object_get(json_object_get(sp, "sources"), "lookup"));
    assert_null(json_object_get(json_object_get(sp, "sources"), "suffix"));
    json_int_t passes = json_integer_value(json_object_get(sp, "draft_passes"));
    double seconds = json_real_value(json_object_get(sp, "draft_seconds"));
    assert_true(drafted > 0 && accepted > 0);
    assert_int_equal(json_integer_value(json_object_get(src, "drafted_tokens")), drafted);
    assert_int_equal(json_integer_value(json_object_get(src, "accepted_tokens")), accepted);
    /* a pass drafts a token of each sequence, and the first of a draft
     * comes from catching up: at most one pass per drafted token */
    assert_true(passes > 0 && passes <= drafted);
    assert_true(seconds > 0);

    srv_resp r;
    assert_true(srv_http(&fx, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    const char *b = r.body;
    assert_true(metric(b, "colo_model_speculative_drafted_tokens_total", "model=\"big\"") == (double)drafted);
    assert_true(metric(b, "colo_model_speculative_accepted_tokens_total", "model=\"big\"") == (double)accepted);
    assert_true(metric(b, "colo_model_speculative_source_drafted_tokens_total", "model=\"big\",source=\"draft\"") ==
                (double)drafted);
    assert_true(metric(b, "colo_model_speculative_source_accepted_tokens_total", "model=\"big\",source=\"draft\"") ==
                (double)accepted);
    assert_true(metric(b, "colo_model_speculative_source_drafted_tokens_total", "model=\"big\",source=\"lookup\"") < 0);
    assert_true(metric(b, "colo_model_speculative_draft_passes_total", "model=\"big\"") == (double)passes);
    assert_true(metric(b, "colo_model_speculative_draft_seconds_total", "model=\"big\"") == seconds);
    /* the draft model itself drafts nothing: no series */
    assert_true(metric(b, "colo_model_speculative_draft_passes_total", "model=\"small\"") < 0);
    srv_resp_free(&r);
    json_decref(stats);
}

/* POST /admin/models with a draft it cannot have: 400, naming them. */
static void admin_refused(const char *body, const char *what1, const char *what2)
{
    srv_resp r;
    assert_true(srv_http_h(&fx, "POST", "/admin/models", ADMIN_H, body, &r));
    if (r.status != 400 || !strstr(r.body, what1) || !strstr(r.body, what2))
        fail_msg("%d %s: wanted 400 naming '%s' and '%s'", r.status, r.body, what1, what2);
    srv_resp_free(&r);
}

static void test_admin_refuses(void **state)
{
    (void)state;
    admin_refused("{\"name\":\"big2\",\"kind\":\"llama\",\"path\":\"o.gguf\",\"memory_fraction\":0.1,"
                  "\"speculative\":{\"draft\":\"small\"}}",
                  "big2", "small");
    admin_refused("{\"name\":\"big2\",\"kind\":\"llama\",\"path\":\"o.gguf\",\"memory_fraction\":0.1,"
                  "\"speculative\":{\"draft\":\"small\"}}",
                  "vocabulary", "544");
    admin_refused("{\"name\":\"big3\",\"kind\":\"llama\",\"path\":\"t.gguf\",\"memory_fraction\":0.1,"
                  "\"speculative\":{\"draft\":\"tiny\"}}",
                  "big3", "tiny");
    admin_refused("{\"name\":\"big4\",\"kind\":\"llama\",\"path\":\"t.gguf\",\"memory_fraction\":0.1,"
                  "\"speculative\":{\"draft\":\"big4\"}}",
                  "big4", "itself");
    admin_refused("{\"name\":\"big5\",\"kind\":\"llama\",\"path\":\"t.gguf\",\"memory_fraction\":0.1,"
                  "\"speculative\":{\"draft\":\"big\"}}",
                  "big", "of its own");
    /* nothing was listed */
    int st;
    json_t *m = srv_get_json(&fx, "/v1/models/big2", &st);
    assert_int_equal(st, 404);
    json_decref(m);
}

/* small unloaded: big decodes plainly; small loaded again through the
 * admin routes: big drafts with the new one. */
static void test_draft_unloaded_and_back(void **state)
{
    (void)state;
    json_t *plain = infer(false);
    srv_resp r;
    assert_true(srv_http_h(&fx, "DELETE", "/admin/models/small", ADMIN_H, NULL, &r));
    assert_int_equal(r.status, 202);
    srv_resp_free(&r);
    int st = 200;
    for (int i = 0; i < 500 && st != 404; i++) {
        json_t *m = srv_get_json(&fx, "/v1/models/small", &st);
        json_decref(m);
        if (st != 404)
            srv_sleep_ms(10);
    }
    assert_int_equal(st, 404);
    json_int_t d0, a0;
    drafted(&d0, &a0);
    json_t *gone = infer(true);
    assert_true(json_equal(json_object_get(gone, "tokens"), json_object_get(plain, "tokens")));
    json_int_t d1, a1;
    drafted(&d1, &a1);
    assert_int_equal(d1, d0);

    assert_true(srv_http_h(&fx, "POST", "/admin/models", ADMIN_H,
                           "{\"name\":\"small\",\"kind\":\"llama\",\"path\":\"d.gguf\",\"memory_fraction\":0.1}", &r));
    assert_int_equal(r.status, 202);
    srv_resp_free(&r);
    for (int i = 0; i < 1000 && strcmp(state_of("small"), "ready"); i++)
        srv_sleep_ms(10);
    assert_string_equal(state_of("small"), "ready");
    json_t *back = infer(true);
    assert_true(json_equal(json_object_get(back, "tokens"), json_object_get(plain, "tokens")));
    json_int_t d2, a2;
    drafted(&d2, &a2);
    assert_true(d2 > d1);
    json_decref(plain);
    json_decref(gone);
    json_decref(back);
}

/* A config whose draft has another vocabulary does not start. */
static void test_config_refused(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
             "models:\n"
             "  - name: big\n    kind: llama\n    path: %s/t.gguf\n    memory_fraction: 0.1\n"
             "    speculative: { draft: other }\n"
             "  - name: other\n    kind: llama\n    path: %s/o.gguf\n    memory_fraction: 0.1\n",
             fx.dir, fx.dir);
    int code = srv_run_to_exit(&f, yaml);
    assert_true(code > 0);
    assert_true(srv_log_has(&f, "big and its draft model other do not share a vocabulary"));
    /* --check-config says so too, with the place, and exits 2 */
    assert_true(srv_write(&f, "check.yaml", yaml));
    char cmd[1200], out[4096] = "";
    snprintf(cmd, sizeof cmd, "'%s/colo-server' --config '%s/check.yaml' --check-config 2>&1", COLO_BINARY_DIR, f.dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = 0;
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 2);
    if (!strstr(out, "check.yaml:7:") || !strstr(out, "models[0].speculative.draft: model big and its draft model other"))
        fail_msg("--check-config said: %s", out);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_then_asleep),
        cmocka_unit_test(test_metrics_match_stats),
        cmocka_unit_test(test_admin_refuses),
        cmocka_unit_test(test_draft_unloaded_and_back),
        cmocka_unit_test(test_config_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
