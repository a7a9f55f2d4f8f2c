/* Adapters, names and sleeping models against a real colo-server, as a
 * careless operator and a hostile client would use them:
 * - names are one namespace (models, aliases, adapters): a model loaded
 *   at run time, or added by SIGHUP, that brings a name an adapter holds,
 *   or an adapter that takes another model's name, is refused, and the
 *   name keeps answering as before;
 * - an adapter's state is its own: a request to a failed adapter gets 503
 *   naming the adapter, its state and its error, without Retry-After; the
 *   adapters of a run-time model whose load failed are failed too;
 * - SIGHUP that cannot apply an adapter's new file keeps the one serving,
 *   and one that can replaces it;
 * - an adapter whose alpha is not finite, or absurd, is refused naming the
 *   file and the key; a model whose logits are not finite fails the
 *   request with a 500-class error, whole or streamed, never an answer;
 * - tokenize, detokenize and count_tokens answer on a sleeping model
 *   without waking it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "models/format/gguf.h"
#include "server_fixture.h"
#include "lora_fixture.h"

#define SERVER "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 268435456 }\n"

/* base.gguf, a1..a3.gguf (ranks 4, 8, 16), odd.gguf (of a wider model) and
 * inf.gguf (alpha infinite): lora_fixture.h. */
static void write_files(srv_fixture *f) { srv_lora_files(f, 3, true); }

static const char *YAML = SERVER "models:\n"
                                 "  - name: b\n"
                                 "    kind: llama\n"
                                 "    path: base.gguf\n"
                                 "    memory_fraction: 0.4\n"
                                 "    adapter_memory_bytes: 4194304\n"
                                 "    adapters:\n"
                                 "      - { name: a1, path: a1.gguf }\n"
                                 "      - { name: a2, path: a2.gguf }\n";

static json_t *call(srv_fixture *f, const char *method, const char *path, const char *body, int *status,
                    char *retry_after, size_t cap)
{
    srv_resp r;
    assert_true(srv_http(f, method, path, body, &r));
    *status = r.status;
    if (retry_after && !srv_header(&r, "Retry-After", retry_after, cap))
        retry_after[0] = 0;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    return j;
}

static const char *error_message(json_t *j)
{
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    return m ? m : "";
}

/* The greedy tokens of /infer on name. */
static json_t *infer(srv_fixture *f, const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/models/%s/infer", name);
    int st;
    json_t *j = call(f, "POST", path, "{\"prompt\":\"tale\",\"max_tokens\":6,\"temperature\":0}", &st, NULL, 0);
    if (st != 200)
        fail_msg("%s: %d %s", path, st, j ? error_message(j) : "");
    json_t *t = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    return t;
}

/* How many entries of GET /v1/models have id; the kind of the last. */
static int listed(srv_fixture *f, const char *id, char *kind, size_t cap)
{
    int st, n = 0;
    json_t *j = srv_get_json(f, "/v1/models", &st), *e;
    size_t i;
    json_array_foreach(json_object_get(j, "data"), i, e) if (!strcmp(json_string_value(json_object_get(e, "id")), id))
    {
        n++;
        const char *k = json_string_value(json_object_get(e, "kind"));
        snprintf(kind, cap, "%s", k ? k : "");
    }
    json_decref(j);
    return n;
}

static void test_names_are_one_namespace(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start_logged(&f, YAML));
    static const struct {
        const char *body, *says;
    } taken[] = {
        {"{\"name\":\"a1\",\"kind\":\"llama\",\"path\":\"base.gguf\",\"memory_fraction\":0.1}", "adapter a1 of model b"},
        {"{\"name\":\"m2\",\"aliases\":[\"a2\"],\"kind\":\"llama\",\"path\":\"base.gguf\",\"memory_fraction\":0.1}",
         "adapter a2 of model b"},
        {"{\"name\":\"m3\",\"kind\":\"llama\",\"path\":\"base.gguf\",\"memory_fraction\":0.1,"
         "\"adapters\":[{\"name\":\"a1\",\"path\":\"a3.gguf\"}]}",
         "adapter a1 of model b"},
        {"{\"name\":\"m4\",\"kind\":\"llama\",\"path\":\"base.gguf\",\"memory_fraction\":0.1,"
         "\"adapters\":[{\"name\":\"b\",\"path\":\"a3.gguf\"}]}",
         "model b"},
    };
    for (size_t k = 0; k < sizeof taken / sizeof *taken; k++) {
        int st;
        char ra[16];
        json_t *j = call(&f, "POST", "/admin/models", taken[k].body, &st, ra, sizeof ra);
        if (st != 409 || !strstr(error_message(j), taken[k].says))
            fail_msg("%s: %d %s (want 409, \"%s\")", taken[k].body, st, error_message(j), taken[k].says);
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "model_exists");
        assert_string_equal(ra, ""); /* what holds it serves on: no point in retrying */
        json_decref(j);
    }
    char kind[32];
    assert_int_equal(listed(&f, "a1", kind, sizeof kind), 1);
    assert_string_equal(kind, "lora");
    assert_int_equal(listed(&f, "a2", kind, sizeof kind), 1);
    assert_int_equal(listed(&f, "m3", kind, sizeof kind), 0);
    /* an adapter cannot take a model's alias or another model's adapter */
    int st;
    json_t *j = call(&f, "POST", "/admin/models",
                     "{\"name\":\"m5\",\"aliases\":[\"al5\"],\"kind\":\"llama\",\"path\":\"base.gguf\","
                     "\"memory_fraction\":0.1,\"adapters\":[{\"name\":\"c5\",\"path\":\"a3.gguf\"}]}",
                     &st, NULL, 0);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(&f, "m5", "ready");
    srv_wait_state(&f, "c5", "ready");
    j = call(&f, "POST", "/admin/models/b/adapters", "{\"name\":\"al5\",\"path\":\"a3.gguf\"}", &st, NULL, 0);
    assert_int_equal(st, 409);
    assert_non_null(strstr(error_message(j), "model m5"));
    json_decref(j);
    j = call(&f, "POST", "/admin/models/b/adapters", "{\"name\":\"c5\",\"path\":\"a3.gguf\"}", &st, NULL, 0);
    assert_int_equal(st, 409);
    assert_non_null(strstr(error_message(j), "adapter c5 of model m5"));
    json_decref(j);
    /* SIGHUP: the file adds a model named as an adapter, and an adapter
     * named as a model loaded at run time: neither is applied */
    char y[2048];
    snprintf(y, sizeof y,
             "%s      - { name: m5, path: a3.gguf }\n"
             "  - { name: c5, kind: llama, path: base.gguf, memory_fraction: 0.1 }\n",
             YAML);
    assert_true(srv_write(&f, "config.yaml", y));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(srv_log_has(&f, "reload: model b: adapter m5: not added: the name m5 is taken by model m5"));
    assert_true(srv_log_has(&f, "reload: model c5: not added: the name c5 is taken by adapter c5 of model m5"));
    assert_int_equal(listed(&f, "c5", kind, sizeof kind), 1);
    assert_string_equal(kind, "lora");
    assert_int_equal(listed(&f, "m5", kind, sizeof kind), 1);
    assert_string_not_equal(kind, "lora");
    json_decref(infer(&f, "c5"));
    json_decref(infer(&f, "m5"));
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_adapter_states(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_write(&f, "junk.gguf", "not a model file at all"));
    char y[2048];
    snprintf(y, sizeof y, "%s", YAML);
    char *r = strstr(y, "    adapter_memory_bytes:"); /* no room kept: an adapter added now fails */
    memmove(r, strchr(r, '\n') + 1, strlen(strchr(r, '\n') + 1) + 1);
    assert_true(srv_start_logged(&f, y));
    int st;
    char ra[16];
    json_t *j = call(&f, "POST", "/admin/models/b/adapters", "{\"name\":\"a3\",\"path\":\"a3.gguf\"}", &st, NULL, 0);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(&f, "a3", "failed");
    j = call(&f, "POST", "/v1/models/a3/infer", "{\"prompt\":\"x\",\"max_tokens\":2}", &st, ra, sizeof ra);
    assert_int_equal(st, 503);
    if (!strstr(error_message(j), "adapter a3 of model b is failed") ||
        !strstr(error_message(j), "adapter_memory_bytes"))
        fail_msg("%s", error_message(j));
    assert_string_equal(ra, ""); /* it does not recover by waiting */
    json_decref(j);
    j = call(&f, "POST", "/v1/chat/completions",
             "{\"model\":\"a3\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}", &st, NULL, 0);
    assert_int_equal(st, 503);
    assert_non_null(strstr(error_message(j), "adapter a3 of model b is failed"));
    json_decref(j);
    /* a model loaded at run time that fails: its adapters fail with it */
    j = call(&f, "POST", "/admin/models",
             "{\"name\":\"bad\",\"kind\":\"llama\",\"path\":\"junk.gguf\",\"memory_fraction\":0.1,"
             "\"adapters\":[{\"name\":\"ba\",\"path\":\"a1.gguf\"}]}",
             &st, NULL, 0);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(&f, "bad", "failed");
    srv_wait_state(&f, "ba", "failed");
    j = srv_get_json(&f, "/v1/models/ba", &st);
    assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "model bad did not load"));
    json_decref(j);
    json_decref(infer(&f, "a1")); /* the rest serve on */
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_sighup_keeps_a_working_adapter(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start_logged(&f, YAML));
    json_t *before = infer(&f, "a1");
    char y[2048];
    snprintf(y, sizeof y, "%s", YAML);
    memcpy(strstr(y, "path: a1.gguf"), "path: odd.gguf", 14); /* a file that does not fit the base */
    assert_true(srv_write(&f, "config.yaml", y));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(srv_log_has(&f, "adapter a1: not replaced"));
    char s[32];
    srv_model_state(&f, "a1", s, sizeof s);
    assert_string_equal(s, "ready");
    json_t *after = infer(&f, "a1");
    assert_true(json_equal(before, after));
    json_decref(after);
    json_decref(before);
    /* one that fits replaces it: the new file's rank, and its tokens */
    memcpy(strstr(y, "path: odd.gguf"), "path: a3.gguf ", 14);
    assert_true(srv_write(&f, "config.yaml", y));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    int st = 0;
    for (int i = 0; i < 500; i++) {
        json_t *j = srv_get_json(&f, "/v1/models/a1", &st);
        bool done = json_integer_value(json_object_get(j, "rank")) == 16 &&
                    !strcmp(json_string_value(json_object_get(j, "state")), "ready");
        json_decref(j);
        if (done)
            break;
        assert_true(i < 499);
        srv_sleep_ms(20);
    }
    json_decref(infer(&f, "a1"));
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* Writes NaN over every value of the F32 or F16 tensor name of the file. */
static void poison_tensor(const char *path, const char *name)
{
    char err[256];
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g);
    const colo_gguf_tensor *t = colo_gguf_find_tensor(g, name);
    assert_non_null(t);
    assert_true(t->type == COLO_F32 || t->type == COLO_F16);
    size_t off = colo_gguf_data_offset(g) + t->offset, n = t->bytes;
    bool f32 = t->type == COLO_F32;
    colo_gguf_close(g);
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i += f32 ? 4 : 2) {
        uint32_t v32 = 0x7fc00000u;
        uint16_t v16 = 0x7e00u;
        memcpy(buf + i, f32 ? (void *)&v32 : (void *)&v16, f32 ? 4 : 2);
    }
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
    free(buf);
}

static void test_non_finite(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/nan.gguf", f.dir);
    assert_int_equal(colo_mkmodel_write(path, &srv_lora_base, err, sizeof err), COLO_OK);
    poison_tensor(path, "output_norm.weight");
    char y[2048];
    snprintf(y, sizeof y, "%s  - { name: n, kind: llama, path: nan.gguf, memory_fraction: 0.2 }\n", YAML);
    assert_true(srv_start_logged(&f, y));
    int st;
    json_t *j = call(&f, "POST", "/admin/models/b/adapters", "{\"name\":\"ai\",\"path\":\"inf.gguf\"}", &st, NULL, 0);
    assert_int_equal(st, 400);
    if (!strstr(error_message(j), "inf.gguf") || !strstr(error_message(j), "adapter.lora.alpha"))
        fail_msg("%s", error_message(j));
    json_decref(j);
    static const char *const calls[][2] = {
        {"/v1/models/n/infer", "{\"prompt\":\"x\",\"max_tokens\":4,\"temperature\":0}"},
        {"/v1/models/n/infer", "{\"prompt\":\"x\",\"max_tokens\":4,\"logprobs\":2}"},
        {"/v1/completions", "{\"model\":\"n\",\"prompt\":\"x\",\"max_tokens\":4,\"n\":3,\"temperature\":0.7}"},
        {"/v1/chat/completions", "{\"model\":\"n\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                 "\"max_tokens\":4,\"response_format\":{\"type\":\"json_object\"}}"},
    };
    for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
        j = call(&f, "POST", calls[k][0], calls[k][1], &st, NULL, 0);
        if (st < 500 || !strstr(error_message(j), "not a finite number"))
            fail_msg("%s %s: %d %s", calls[k][0], calls[k][1], st, j ? json_dumps(j, 0) : "");
        json_decref(j);
    }
    /* streamed: an error event, never a finish */
    srv_resp r;
    assert_true(srv_http(&f, "POST", "/v1/completions",
                         "{\"model\":\"n\",\"prompt\":\"x\",\"max_tokens\":4,\"stream\":true}", &r));
    if (r.status == 200 && (!strstr(r.body, "not a finite number") || strstr(r.body, "finish_reason\":\"")))
        fail_msg("%s", r.body);
    assert_true(r.status == 200 || r.status >= 500);
    srv_resp_free(&r);
    json_decref(infer(&f, "b")); /* the other model serves on */
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_tokens_of_a_sleeping_model(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start_logged(&f, YAML));
    int st;
    json_t *awake = call(&f, "POST", "/v1/models/b/tokenize", "{\"prompt\":\"hello there\"}", &st, NULL, 0);
    assert_int_equal(st, 200);
    json_t *j = call(&f, "POST", "/admin/models/b/sleep", "", &st, NULL, 0);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(&f, "b", "sleeping");
    json_t *asleep = call(&f, "POST", "/v1/models/b/tokenize", "{\"prompt\":\"hello there\"}", &st, NULL, 0);
    if (st != 200)
        fail_msg("tokenize: %d %s", st, error_message(asleep));
    assert_true(json_equal(awake, asleep));
    char body[512];
    char *ids = json_dumps(json_object_get(asleep, "tokens"), JSON_COMPACT);
    snprintf(body, sizeof body, "{\"tokens\":%s}", ids);
    free(ids);
    j = call(&f, "POST", "/v1/models/b/detokenize", body, &st, NULL, 0);
    if (st != 200)
        fail_msg("detokenize: %d %s", st, error_message(j));
    assert_non_null(strstr(json_string_value(json_object_get(j, "text")), "hello there"));
    json_decref(j);
    j = call(&f, "POST", "/v1/messages/count_tokens",
             "{\"model\":\"b\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}", &st, NULL, 0);
    if (st != 200)
        fail_msg("count_tokens: %d %s", st, error_message(j));
    assert_true(json_integer_value(json_object_get(j, "input_tokens")) > 0);
    json_decref(j);
    j = call(&f, "POST", "/v1/messages/count_tokens",
             "{\"model\":\"a1\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}", &st, NULL, 0);
    assert_int_equal(st, 200);
    json_decref(j);
    char s[32];
    srv_model_state(&f, "b", s, sizeof s);
    assert_string_equal(s, "sleeping"); /* none of it woke the model */
    json_decref(awake);
    json_decref(asleep);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_are_one_namespace),
        cmocka_unit_test(test_adapter_states),
        cmocka_unit_test(test_sighup_keeps_a_working_adapter),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_tokens_of_a_sleeping_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
