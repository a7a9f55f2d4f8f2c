/* LoRA adapters served by a real colo-server (synthetic llama base and
 * adapters that colo-mkmodel writes):
 * - each adapter answers under its own name on /infer, OpenAI's chat and
 *   completions, Anthropic's messages and the Responses API, is listed in
 *   /v1/models with its base, and is counted, metered and written to the
 *   ledger under its name; greedy output is its own, and the same again;
 *   a request refused because its adapter went away after it was looked
 *   up is 404 to the client, in the access log and in the ledger alike;
 * - the admin routes add one at run time (loading, then ready) and remove
 *   one while a request runs on it (that request finishes; new ones get
 *   503, then 404), and refuse hostile bodies with clear errors: a file
 *   that does not fit the base names the tensor;
 * - a tenant allowed an adapter alone gets it, and not the base;
 * - SIGHUP adds, removes and changes adapters without reloading the base;
 * - a base put to sleep and woken by an adapter's request has its adapters
 *   again (the same tokens), those added at run time too, and its context
 *   and KV cache, also after the config's adapter was removed and a larger
 *   one added; a wake that fails leaves it asleep, to wake at the next
 *   request;
 * - a config whose adapter does not fit its base stops the server with a
 *   message naming the file and the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/tenants/sha256.h"
#include "server_fixture.h"
#include "lora_fixture.h"

/* base.gguf, a1..a4.gguf (ranks 4, 8, 16, 8) and odd.gguf (lora_fixture.h). */
static void write_files(srv_fixture *f) { srv_lora_files(f, 4, false); }

static const char *YAML1 = "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 268435456 }\n"
                           "models:\n"
                           "  - name: b\n"
                           "    kind: llama\n"
                           "    path: base.gguf\n"
                           "    memory_fraction: 0.5\n"
                           "    prefix_cache: true\n"
                           "    adapter_memory_bytes: 4194304\n"
                           "    adapters:\n"
                           "      - { name: a1, path: a1.gguf, priority: high }\n"
                           "      - { name: a2, path: a2.gguf, sla: { ttft_ms: 60000 } }\n";

static json_t *post(srv_fixture *f, const char *path, const char *body, int *status)
{
    srv_resp r;
    assert_true(srv_http(f, "POST", path, body, &r));
    *status = r.status;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    return j;
}

static int del(srv_fixture *f, const char *path)
{
    srv_resp r;
    assert_true(srv_http(f, "DELETE", path, NULL, &r));
    int s = r.status;
    srv_resp_free(&r);
    return s;
}

/* The greedy tokens of /infer on model name (a prompt of seed). */
static json_t *infer(srv_fixture *f, const char *name, int seed, int max_tokens)
{
    char body[160], path[96];
    snprintf(body, sizeof body, "{\"prompt\":\"tale %d\",\"max_tokens\":%d,\"temperature\":0}", seed, max_tokens);
    snprintf(path, sizeof path, "/v1/models/%s/infer", name);
    int st;
    json_t *j = post(f, path, body, &st);
    if (st != 200)
        fail_msg("%s: %d %s", path, st, j ? json_dumps(j, 0) : "");
    assert_string_equal(json_string_value(json_object_get(j, "model")), name);
    json_t *t = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    return t;
}

static void test_routes_listing_accounting(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start(&f, YAML1));
    int st;
    json_t *models = srv_get_json(&f, "/v1/models", &st), *e;
    size_t i;
    int seen = 0;
    json_array_foreach(json_object_get(models, "data"), i, e) {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (!strcmp(id, "a1") || !strcmp(id, "a2")) {
            seen++;
            assert_string_equal(json_string_value(json_object_get(e, "kind")), "lora");
            assert_string_equal(json_string_value(json_object_get(e, "base")), "b");
            assert_string_equal(json_string_value(json_object_get(e, "state")), "ready");
            assert_int_equal(json_integer_value(json_object_get(e, "rank")), !strcmp(id, "a1") ? 4 : 8);
            assert_string_equal(json_string_value(json_object_get(e, "priority")), !strcmp(id, "a1") ? "high" : "normal");
            assert_true(json_integer_value(json_object_get(json_object_get(e, "memory"), "bytes")) > 0);
        } else if (!strcmp(id, "b")) {
            assert_int_equal(json_array_size(json_object_get(e, "adapters")), 2);
            assert_true(json_integer_value(json_object_get(json_object_get(e, "memory"), "adapter_bytes")) > 0);
        }
    }
    json_decref(models);
    assert_int_equal(seen, 2);
    json_t *tb = infer(&f, "b", 1, 16), *t1 = infer(&f, "a1", 1, 16), *t1b = infer(&f, "a1", 1, 16),
           *t2 = infer(&f, "a2", 1, 16);
    assert_true(json_equal(t1, t1b));
    assert_false(json_equal(t1, tb));
    assert_false(json_equal(t2, tb));
    assert_false(json_equal(t1, t2));
    json_decref(tb), json_decref(t1), json_decref(t1b), json_decref(t2);
    /* every dialect, under the adapter's name */
    static const char *const calls[][2] = {
        {"/v1/chat/completions", "{\"model\":\"a1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}"},
        {"/v1/completions", "{\"model\":\"a2\",\"prompt\":\"hi\",\"max_tokens\":4}"},
        {"/v1/messages", "{\"model\":\"a1\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"},
        {"/v1/responses", "{\"model\":\"a2\",\"input\":\"hi\",\"max_output_tokens\":4}"},
    };
    for (size_t c = 0; c < sizeof calls / sizeof *calls; c++) {
        json_t *j = post(&f, calls[c][0], calls[c][1], &st);
        if (st != 200)
            fail_msg("%s: %d", calls[c][0], st);
        assert_string_equal(json_string_value(json_object_get(j, "model")), c % 2 ? "a2" : "a1");
        json_decref(j);
    }
    json_t *j = post(&f, "/v1/embeddings", "{\"model\":\"a1\",\"input\":\"hi\"}", &st);
    assert_int_equal(st, 400);
    json_decref(j);
    /* metrics and the ledger under each adapter's name */
    srv_resp r;
    assert_true(srv_http(&f, "GET", "/metrics", NULL, &r));
    assert_non_null(strstr(r.body, "model=\"a1\""));
    assert_non_null(strstr(r.body, "model=\"a2\""));
    srv_resp_free(&r);
    json_t *u = srv_get_json(&f, "/v1/usage?group_by=model", &st);
    assert_int_equal(st, 200);
    int rows = 0;
    json_array_foreach(json_object_get(u, "data"), i, e) {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m && (!strcmp(m, "a1") || !strcmp(m, "a2"))) {
            rows++;
            assert_true(json_integer_value(json_object_get(e, "requests")) >= 3);
            assert_true(json_real_value(json_object_get(e, "device_seconds")) > 0);
        }
    }
    assert_int_equal(rows, 2);
    json_decref(u);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A request of many tokens to name on its own connection (read later). */
static int send_long(srv_fixture *f, const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/models/%s/infer", name);
    char *raw = srv_post_raw(path, "", "{\"prompt\":\"a long one\",\"max_tokens\":300,\"temperature\":0}");
    int fd = srv_connect(f->port);
    assert_true(fd >= 0 && srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    return fd;
}

static void test_admin_add_remove(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    char y[2048];
    snprintf(y, sizeof y, "%s    batching: { max_batch_size: 1 }\n", YAML1);
    assert_true(srv_start(&f, y));
    int st;
    json_t *j = post(&f, "/admin/models/b/adapters", "{\"name\":\"a3\",\"path\":\"a3.gguf\",\"scale\":0.5}", &st);
    assert_int_equal(st, 202);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "loading");
    json_decref(j);
    srv_wait_state(&f, "a3", "ready");
    json_t *t = infer(&f, "a3", 2, 8);
    json_decref(t);
    /* removed while a request of it is queued (one sequence at a time,
     * behind a long one of the base): it is unloading until that request
     * has finished, with the tokens it gets when nothing happens */
    int fd = send_long(&f, "a3");
    size_t len;
    char *buf = srv_read_all(fd, 60000, &len);
    close(fd);
    srv_resp r;
    assert_true(buf && srv_parse(buf, len, &r) > 0);
    free(buf);
    json_t *ref = srv_json(&r);
    srv_resp_free(&r);
    assert_true(json_array_size(json_object_get(ref, "tokens")) > 20);
    int fd_base = send_long(&f, "b");
    srv_sleep_ms(5);
    fd = send_long(&f, "a3");
    srv_sleep_ms(5);
    assert_int_equal(del(&f, "/admin/models/b/adapters/a3"), 202);
    char s[32];
    assert_string_equal(srv_model_state(&f, "a3", s, sizeof s), "unloading");
    j = post(&f, "/v1/models/a3/infer", "{\"prompt\":\"x\",\"max_tokens\":2}", &st);
    assert_true(st == 503 || st == 404);
    json_decref(j);
    buf = srv_read_all(fd, 60000, &len);
    close(fd);
    assert_true(buf && srv_parse(buf, len, &r) > 0);
    free(buf);
    assert_int_equal(r.status, 200);
    json_t *done = srv_json(&r);
    assert_true(json_equal(json_object_get(done, "tokens"), json_object_get(ref, "tokens")));
    json_decref(done);
    json_decref(ref);
    srv_resp_free(&r);
    buf = srv_read_all(fd_base, 60000, &len);
    close(fd_base);
    free(buf);
    srv_resp_free(&r);
    srv_wait_state(&f, "a3", "absent");
    /* hostile bodies and names */
    static const struct {
        const char *path, *body;
        int status;
        const char *says;
    } bad[] = {
        {"/admin/models/nope/adapters", "{\"name\":\"x\",\"path\":\"a3.gguf\"}", 404, "no model named 'nope'"},
        {"/admin/models/b/adapters", "not json", 400, "must be a JSON object"},
        {"/admin/models/b/adapters", "[]", 400, "must be a JSON object"},
        {"/admin/models/b/adapters", "{\"path\":\"a3.gguf\"}", 400, "name: is required"},
        {"/admin/models/b/adapters", "{\"name\":\"x\"}", 400, "path: is required"},
        {"/admin/models/b/adapters", "{\"name\":\"x\",\"path\":\"a3.gguf\",\"rank\":3}", 400, "unknown key"},
        {"/admin/models/b/adapters", "{\"name\":\"../x\",\"path\":\"a3.gguf\"}", 400, "starts with a letter"},
        {"/admin/models/b/adapters", "{\"name\":\"x\",\"path\":\"missing.gguf\"}", 400, "missing.gguf"},
        {"/admin/models/b/adapters", "{\"name\":\"x\",\"path\":\"base.gguf\"}", 400, "general.type"},
        {"/admin/models/b/adapters", "{\"name\":\"x\",\"path\":\"odd.gguf\"}", 400, "blk.0.attn_q.weight.lora_a"},
        {"/admin/models/b/adapters", "{\"name\":\"a1\",\"path\":\"a3.gguf\"}", 409, "taken by adapter a1 of model b"},
        {"/admin/models/b/adapters", "{\"name\":\"b\",\"path\":\"a3.gguf\"}", 409, "taken by model b"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        assert_true(srv_http(&f, "POST", bad[k].path, bad[k].body, &r));
        if (r.status != bad[k].status || !strstr(r.body, bad[k].says))
            fail_msg("%s %s: %d %s (want %d, \"%s\")", bad[k].path, bad[k].body, r.status, r.body, bad[k].status,
                     bad[k].says);
        srv_resp_free(&r);
    }
    assert_int_equal(del(&f, "/admin/models/b/adapters/zzz"), 404);
    assert_int_equal(del(&f, "/admin/models/nope/adapters/a1"), 404);
    /* the others kept serving throughout */
    t = infer(&f, "a1", 3, 4);
    json_decref(t);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_tenant_allow_list(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    char h[65], y[2048];
    srv_key_sha256("k-support", h);
    snprintf(y, sizeof y,
             "%stenants:\n"
             "  - organization: acme\n"
             "    projects: [ { name: support, models: [a1], keys: [ { name: bot, sha256: \"%s\" } ] } ]\n",
             YAML1, h);
    assert_true(srv_start(&f, y));
    srv_resp r;
    const char *auth = "Authorization: Bearer k-support\r\n";
    assert_true(srv_http_h(&f, "POST", "/v1/models/a1/infer", auth, "{\"prompt\":\"x\",\"max_tokens\":2}", &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "POST", "/v1/models/b/infer", auth, "{\"prompt\":\"x\",\"max_tokens\":2}", &r));
    assert_int_equal(r.status, 403);
    assert_non_null(strstr(r.body, "model_not_allowed"));
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "POST", "/v1/models/a2/infer", auth, "{\"prompt\":\"x\",\"max_tokens\":2}", &r));
    assert_int_equal(r.status, 403);
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_sighup(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start(&f, YAML1));
    json_t *before = infer(&f, "a1", 4, 8);
    const char *y2 = "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 268435456 }\n"
                     "models:\n"
                     "  - name: b\n"
                     "    kind: llama\n"
                     "    path: base.gguf\n"
                     "    memory_fraction: 0.5\n"
                     "    prefix_cache: true\n"
                     "    adapter_memory_bytes: 4194304\n"
                     "    adapters:\n"
                     "      - { name: a1, path: a1.gguf, priority: low }\n"
                     "      - { name: a4, path: a4.gguf }\n";
    assert_true(srv_write(&f, "config.yaml", y2));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    srv_wait_state(&f, "a4", "ready");
    srv_wait_state(&f, "a2", "absent");
    assert_true(srv_log_has(&f, "adapter a1: priority and SLA applied in place"));
    int st;
    json_t *j = srv_get_json(&f, "/v1/models/a1", &st);
    assert_string_equal(json_string_value(json_object_get(j, "priority")), "low");
    json_decref(j);
    j = srv_get_json(&f, "/v1/models/b", &st);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "lifecycle"), "wakes")), 0);
    json_decref(j);
    json_t *after = infer(&f, "a1", 4, 8); /* the base was not reloaded: the same adapter, the same tokens */
    assert_true(json_equal(before, after));
    json_decref(before), json_decref(after);
    char *lg = srv_log(&f);
    assert_true(lg && !strstr(lg, "model b: changed")); /* the base stayed as it was */
    free(lg);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* With adapter_memory_bytes; without it, an adapter added at run time
 * fails, its error naming the key, and the others serve on. */
static void sleep_wake(bool reserve)
{
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    char y[2048];
    snprintf(y, sizeof y, "%s", YAML1);
    if (!reserve) {
        char *r = strstr(y, "    adapter_memory_bytes:");
        memmove(r, strchr(r, '\n') + 1, strlen(strchr(r, '\n') + 1) + 1);
    }
    assert_true(srv_start(&f, y));
    int st;
    json_t *j = post(&f, "/admin/models/b/adapters", "{\"name\":\"a4\",\"path\":\"a4.gguf\"}", &st);
    assert_int_equal(st, 202);
    json_decref(j);
    if (!reserve) {
        srv_wait_state(&f, "a4", "failed");
        j = srv_get_json(&f, "/v1/models/a4", &st);
        assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "adapter_memory_bytes"));
        json_decref(j);
        j = post(&f, "/v1/models/a4/infer", "{\"prompt\":\"x\",\"max_tokens\":2}", &st);
        assert_int_equal(st, 503);
        json_decref(j);
        assert_int_equal(del(&f, "/admin/models/b/adapters/a4"), 202);
        srv_wait_state(&f, "a4", "absent");
        json_decref(infer(&f, "a1", 6, 8));
        assert_int_equal(srv_stop(&f), 0);
        srv_cleanup(&f);
        return;
    }
    srv_wait_state(&f, "a4", "ready");
    json_t *t1 = infer(&f, "a1", 6, 8), *t4 = infer(&f, "a4", 6, 8);
    j = post(&f, "/admin/models/b/sleep", "", &st);
    assert_int_equal(st, 202);
    json_decref(j);
    char s[32] = "";
    for (int i = 0; i < 500 && strcmp(srv_model_state(&f, "b", s, sizeof s), "sleeping"); i++)
        srv_sleep_ms(20);
    assert_string_equal(s, "sleeping");
    json_t *w1 = infer(&f, "a1", 6, 8), *w4 = infer(&f, "a4", 6, 8); /* the first wakes the base */
    assert_true(json_equal(t1, w1));
    assert_true(json_equal(t4, w4));
    json_decref(t1), json_decref(t4), json_decref(w1), json_decref(w4);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_sleep_wake_keeps_adapters(void **state)
{
    (void)state;
    sleep_wake(true);
    sleep_wake(false);
}

/* The model's KV cache blocks and context as GET /v1/models/b reports them. */
static void kv_of(srv_fixture *f, int *blocks, int *ctx)
{
    int st;
    json_t *j = srv_get_json(f, "/v1/models/b", &st);
    assert_int_equal(st, 200);
    *blocks = (int)json_integer_value(json_object_get(json_object_get(j, "kv_cache"), "blocks"));
    *ctx = (int)json_integer_value(json_object_get(j, "max_seq_len"));
    json_decref(j);
}

static void sleep_b(srv_fixture *f)
{
    int st;
    json_t *j = post(f, "/admin/models/b/sleep", "", &st);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(f, "b", "sleeping");
}

/* The config's adapter removed and a larger one added at run time (it
 * takes the freed slot): the model sleeps and wakes with the context and
 * KV cache it was loaded with and serves the new adapter as before. */
static void test_wake_after_adapter_swap(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start(&f, YAML1));
    int blocks0, ctx0, blocks, ctx, st;
    kv_of(&f, &blocks0, &ctx0);
    assert_true(blocks0 > 0);
    assert_int_equal(del(&f, "/admin/models/b/adapters/a1"), 202);
    srv_wait_state(&f, "a1", "absent");
    json_t *j = post(&f, "/admin/models/b/adapters", "{\"name\":\"a3\",\"path\":\"a3.gguf\"}", &st);
    assert_int_equal(st, 202);
    json_decref(j);
    srv_wait_state(&f, "a3", "ready");
    json_t *t3 = infer(&f, "a3", 3, 8), *t2 = infer(&f, "a2", 3, 8);
    for (int round = 0; round < 2; round++) {
        sleep_b(&f);
        json_t *w3 = infer(&f, "a3", 3, 8), *w2 = infer(&f, "a2", 3, 8); /* the first wakes the base */
        assert_true(json_equal(t3, w3));
        assert_true(json_equal(t2, w2));
        json_decref(w3), json_decref(w2);
        kv_of(&f, &blocks, &ctx);
        assert_int_equal(blocks, blocks0);
        assert_int_equal(ctx, ctx0);
    }
    json_decref(t3), json_decref(t2);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A wake that fails (the base's file replaced by one that is no model)
 * leaves the model asleep: what waited gets 503 with the reason, and once
 * the file is back the next request wakes it as it was. */
static void test_failed_wake_stays_asleep(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start(&f, YAML1));
    json_t *t1 = infer(&f, "a1", 5, 8);
    sleep_b(&f);
    char base[600], kept[600];
    snprintf(base, sizeof base, "%s/base.gguf", f.dir);
    snprintf(kept, sizeof kept, "%s/base.kept", f.dir);
    assert_int_equal(rename(base, kept), 0);
    assert_true(srv_write(&f, "base.gguf", "not a model file at all"));
    int st;
    json_t *j = post(&f, "/v1/models/a1/infer", "{\"prompt\":\"tale 5\",\"max_tokens\":8,\"temperature\":0}", &st);
    assert_int_equal(st, 503);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (!msg || !strstr(msg, "cannot wake") || !strstr(msg, "base.gguf"))
        fail_msg("%s", msg ? msg : "(no message)");
    json_decref(j);
    char s[32];
    assert_string_equal(srv_model_state(&f, "b", s, sizeof s), "sleeping");
    assert_int_equal(rename(kept, base), 0);
    /* A wake begun before the file came back (a retry of the failed one)
     * may still answer 503 once: the model wakes on a following request. */
    for (int tries = 0; tries < 50; tries++) {
        json_t *r =
            post(&f, "/v1/models/a1/infer", "{\"prompt\":\"tale 5\",\"max_tokens\":8,\"temperature\":0}", &st);
        json_decref(r);
        if (st == 200)
            break;
        assert_int_equal(st, 503);
        usleep(100 * 1000);
    }
    json_t *w1 = infer(&f, "a1", 5, 8);
    assert_true(json_equal(t1, w1));
    assert_string_equal(srv_model_state(&f, "b", s, sizeof s), "ready");
    json_decref(t1), json_decref(w1);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* The ledger's requests of model with status. */
static long ledger_requests(srv_fixture *f, const char *model, int status)
{
    int st;
    json_t *u = srv_get_json(f, "/v1/usage?group_by=model,status", &st), *e;
    assert_int_equal(st, 200);
    long n = 0;
    size_t i;
    json_array_foreach(json_object_get(u, "data"), i, e) {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m && !strcmp(m, model) && json_integer_value(json_object_get(e, "status")) == status)
            n += (long)json_integer_value(json_object_get(e, "requests"));
    }
    json_decref(u);
    return n;
}

/* An adapter removed between the front end finding it and the model
 * taking the request (fault "gone"): the client gets 404, and the access
 * log and the ledger say 404 too. */
static void test_adapter_gone_refusal_accounted(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    assert_true(srv_start_env(&f, YAML1, "COLO_FAULTS=gone@a2"));
    int st;
    json_t *j = post(&f, "/v1/models/a2/infer", "{\"prompt\":\"tale\",\"max_tokens\":4}", &st);
    assert_int_equal(st, 404);
    json_decref(j);
    char s[32];
    assert_string_equal(srv_model_state(&f, "a2", s, sizeof s), "absent");
    for (int i = 0; i < 100 && ledger_requests(&f, "a2", 404) == 0; i++)
        srv_sleep_ms(20);
    assert_int_equal(ledger_requests(&f, "a2", 404), 1);
    assert_int_equal(ledger_requests(&f, "a2", 503), 0);
    assert_true(srv_log_has(&f, "path=/v1/models/a2/infer model=a2 status=404"));
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_bad_adapter_in_config(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    write_files(&f);
    const char *y = "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 268435456 }\n"
                    "models:\n"
                    "  - name: b\n"
                    "    kind: llama\n"
                    "    path: base.gguf\n"
                    "    memory_fraction: 0.5\n"
                    "    adapters: [ { name: w, path: odd.gguf } ]\n";
    assert_int_not_equal(srv_run_to_exit(&f, y), 0);
    char *log = srv_log(&f);
    assert_non_null(log);
    if (!strstr(log, "odd.gguf") || !strstr(log, "blk.0.attn_q.weight.lora_a"))
        fail_msg("the log does not name the file and tensor:\n%s", log);
    free(log);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_listing_accounting),
        cmocka_unit_test(test_admin_add_remove),
        cmocka_unit_test(test_tenant_allow_list),
        cmocka_unit_test(test_sighup),
        cmocka_unit_test(test_sleep_wake_keeps_adapters),
        cmocka_unit_test(test_wake_after_adapter_swap),
        cmocka_unit_test(test_failed_wake_stays_asleep),
        cmocka_unit_test(test_adapter_gone_refusal_accounted),
        cmocka_unit_test(test_bad_adapter_in_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
