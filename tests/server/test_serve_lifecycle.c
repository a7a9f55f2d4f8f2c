/* The model lifecycle at run time through colo-server: a model loaded with
 * POST /admin/models serves like one loaded at start; the hostile inputs
 * (bad JSON, a bad config, an unknown kind, a duplicate name, a load while
 * the old one drains, a wrong key) each get a clear 4xx and change nothing;
 * eviction puts idle models to sleep lowest priority first, least recently
 * used within a priority, never a pinned one, and refuses with 507 and the
 * bytes when even that cannot make room; SIGHUP applies the config file's
 * difference (added, removed, changed, changed in place) under traffic,
 * and a bad file changes nothing, and converges to the file (a model named
 * again while it drains, a failed one, readiness); a FIFO as a model's
 * path fails at once; the model table's slots are reused; bert models
 * sleep and wake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"
#include "models/format/model_cache.h"

#define ADMIN_H "Authorization: Bearer admin-secret\r\n"
#define ADMIN_ENV "COLO_ADMIN_KEY=admin-secret"
#define SERVER_YAML "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 256MiB }\n"

/* m.gguf: a small model, or (big) one whose weights (64 MB) fill most of
 * a 0.3 guarantee, so that idle models lending their unused guarantee
 * cannot make room for a whole one and eviction puts models to sleep. */
static bool start_shape(srv_fixture *f, const char *yaml, bool big)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/m.gguf", f->dir);
    colo_mkmodel_config mc = {.n_layer = 2, .n_embd = 128, .n_head = 4, .n_kv_head = 2, .n_ff = 256,
                              .n_vocab = 512, .n_ctx = 256, .type = COLO_F32, .seed = 101};
    if (big)
        mc.n_layer = 5, mc.n_embd = 512, mc.n_ff = 1536;
    if (colo_mkmodel_write(path, &mc, err, sizeof err) != COLO_OK)
        return false;
    if (!srv_start_env(f, yaml, ADMIN_ENV)) {
        char *log = srv_log(f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log ? log : "");
        free(log);
        return false;
    }
    return true;
}

static bool start(srv_fixture *f, const char *yaml) { return start_shape(f, yaml, false); }


/* One request; the status, and the body's error code when code is given. */
static int call(srv_fixture *f, const char *method, const char *path, const char *headers, const char *body,
                const char *code, json_t **out)
{
    srv_resp r;
    assert_true(srv_http_h(f, method, path, headers, body ? body : "", &r));
    int s = r.status;
    json_t *j = srv_json(&r);
    if (code) {
        assert_non_null(j);
        const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        if (!got || strcmp(got, code))
            fprintf(stderr, "%s %s: %d %s\n", method, path, s, r.body ? r.body : "");
        assert_non_null(got);
        assert_string_equal(got, code);
    }
    if (out)
        *out = j;
    else
        json_decref(j);
    srv_resp_free(&r);
    return s;
}

static json_t *model(srv_fixture *f, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    json_t *j = NULL;
    int s = call(f, "GET", path, NULL, NULL, NULL, &j);
    if (s != 200) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static bool wait_state(srv_fixture *f, const char *name, const char *want)
{
    for (int i = 0; i < 1500; i++) {
        json_t *m = model(f, name);
        bool ok = want ? m && !strcmp(json_string_value(json_object_get(m, "state")), want) : !m;
        json_decref(m);
        if (ok)
            return true;
        srv_sleep_ms(10);
    }
    char *log = srv_log(f);
    fprintf(stderr, "model %s never became %s:\n%s\n", name, want ? want : "gone", log ? log : "");
    free(log);
    return false;
}

static const char *state(srv_fixture *f, const char *name)
{
    static char s[32];
    json_t *m = model(f, name);
    snprintf(s, sizeof s, "%s", m ? json_string_value(json_object_get(m, "state")) : "gone");
    json_decref(m);
    return s;
}

static json_int_t lifecycle(srv_fixture *f, const char *name, const char *key)
{
    json_t *m = model(f, name);
    assert_non_null(m);
    json_t *v = json_object_get(json_object_get(m, "lifecycle"), key);
    json_int_t n = json_is_true(v) ? 1 : json_integer_value(v);
    json_decref(m);
    return n;
}

static int send_infer(srv_fixture *f, const char *name, int seed, int max_tokens)
{
    char body[160], path[64];
    snprintf(body, sizeof body, "{\"prompt\":\"tale %d\",\"max_tokens\":%d,\"temperature\":0}", seed, max_tokens);
    snprintf(path, sizeof path, "/v1/models/%s/infer", name);
    char *raw = srv_post_raw(path, "", body);
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    return fd;
}

/* The tokens of a 200 answer, or NULL for a clear error (503 with
 * Retry-After, when ok_503). */
static json_t *recv_tokens(int fd, bool ok_503)
{
    size_t len;
    char *buf = srv_read_all(fd, 60000, &len);
    close(fd);
    srv_resp r;
    assert_true(buf && srv_parse(buf, len, &r) > 0);
    free(buf);
    char hv[32];
    if (ok_503 && r.status == 503) {
        assert_non_null(srv_header(&r, "Retry-After", hv, sizeof hv));
        srv_resp_free(&r);
        return NULL;
    }
    if (r.status != 200)
        fprintf(stderr, "%d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = r.body ? json_loads(r.body, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *t = json_incref(json_object_get(j, "tokens"));
    srv_resp_free(&r);
    json_decref(j);
    assert_non_null(t);
    return t;
}

static json_t *infer(srv_fixture *f, const char *name, int seed) { return recv_tokens(send_infer(f, name, seed, 24), false); }

static int n_listed(srv_fixture *f)
{
    json_t *j = NULL;
    assert_int_equal(call(f, "GET", "/admin/models", ADMIN_H, NULL, NULL, &j), 200);
    int n = (int)json_array_size(json_object_get(j, "models"));
    json_decref(j);
    return n;
}

static bool log_has(srv_fixture *f, const char *what) { return srv_log_has(f, what); }

static const char *M(const char *name, const char *more)
{
    static char b[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(b[k], sizeof b[k], "{\"name\":\"%s\",\"kind\":\"llama\",\"path\":\"m.gguf\",%s}", name, more);
    return b[k];
}

static void test_load_at_run_time(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
                          "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"));
    json_t *ref = infer(&f, "a", 1);

    /* Hostile: each a clear 4xx; nothing changes. */
    assert_int_equal(call(&f, "POST", "/admin/models", "Authorization: Bearer nope\r\n",
                          M("b", "\"memory_fraction\":0.3"), "unauthorized", NULL), 401);
    assert_int_equal(call(&f, "POST", "/admin/models", "", M("b", "\"memory_fraction\":0.3"), "unauthorized", NULL),
                     401);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, "{\"name\":", "invalid_json", NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, "[1]", "invalid_json", NULL), 400);
    json_t *e = NULL;
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("b", "\"memory_fraction\":\"half\""),
                          "invalid_config", &e), 400);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                           "model.memory_fraction"));
    json_decref(e);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("b", "\"memory_fraction\":0.3,\"colour\":1"),
                          "invalid_config", &e), 400);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                           "model.colour: unknown key"));
    json_decref(e);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, "{\"name\":\"b\",\"path\":\"m.gguf\"}",
                          "invalid_config", NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":\"b\",\"kind\":\"lama\",\"path\":\"m.gguf\",\"memory_fraction\":0.3}",
                          "invalid_config", NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("a", "\"memory_fraction\":0.3"), "model_exists",
                          NULL), 409);
    /* a name that is not a string, or not a name */
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":null,\"kind\":\"llama\",\"path\":\"m.gguf\",\"memory_fraction\":0.3}",
                          "invalid_config", NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":5,\"kind\":\"llama\",\"path\":\"m.gguf\",\"memory_fraction\":0.3}",
                          "invalid_config", NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("..", "\"memory_fraction\":0.3"), "invalid_config",
                          NULL), 400);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("-", "\"memory_fraction\":0.3"), "invalid_config",
                          NULL), 400);
    assert_int_equal(n_listed(&f), 1);
    assert_null(model(&f, "b"));

    /* A load under traffic to a: 202, loading then ready, and it answers
     * as the same file loaded at start does (greedy); a's answers do not
     * change meanwhile. */
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = send_infer(&f, "a", 1, 24);
    json_t *j = NULL;
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("b", "\"memory_fraction\":0.3"), NULL, &j), 202);
    /* loading, or already ready: a CPU model's weights are mapped, not
     * copied, and a small one can load before the answer is written */
    const char *st = json_string_value(json_object_get(j, "state"));
    assert_non_null(st);
    assert_true(!strcmp(st, "loading") || !strcmp(st, "ready"));
    json_decref(j);
    for (int i = 0; i < 4; i++) {
        json_t *t = recv_tokens(fds[i], false);
        assert_true(json_equal(t, ref));
        json_decref(t);
    }
    assert_true(wait_state(&f, "b", "ready"));
    assert_true(log_has(&f, "admin: model b loaded in"));
    json_t *got = infer(&f, "b", 1);
    assert_true(json_equal(got, ref));
    json_decref(got);

    /* A file that is not a model: loading, then failed with the reason. */
    assert_true(srv_write(&f, "bad.gguf", "not a gguf"));
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":\"bad\",\"kind\":\"llama\",\"path\":\"bad.gguf\",\"memory_fraction\":0.1}", NULL,
                          NULL), 202);
    assert_true(wait_state(&f, "bad", "failed"));
    json_t *mb = model(&f, "bad");
    assert_true(strlen(json_string_value(json_object_get(mb, "error"))) > 0);
    json_decref(mb);
    /* a model that failed to load at run time does not make colo-server unready */
    assert_int_equal(call(&f, "GET", "/health/ready", NULL, NULL, NULL, NULL), 200);
    assert_int_equal(call(&f, "DELETE", "/admin/models/bad", ADMIN_H, NULL, NULL, NULL), 202);
    assert_true(wait_state(&f, "bad", NULL));

    /* Deleted while it loads: gone once its load has ended. */
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("c", "\"memory_fraction\":0.1"), NULL, NULL), 202);
    assert_int_equal(call(&f, "DELETE", "/admin/models/c", ADMIN_H, NULL, NULL, NULL), 202);
    /* still unloading (409), or already gone (404): a small CPU model's
     * weights are mapped, not copied, and its load can end first */
    json_t *again = NULL;
    int again_st = call(&f, "DELETE", "/admin/models/c", ADMIN_H, NULL, NULL, &again);
    const char *again_code = json_string_value(json_object_get(json_object_get(again, "error"), "code"));
    assert_true((again_st == 409 && again_code && !strcmp(again_code, "model_not_serving")) ||
                (again_st == 404 && again_code && !strcmp(again_code, "model_not_found")));
    json_decref(again);
    assert_true(wait_state(&f, "c", NULL));

    /* A load while the old model of that name drains: 409 with
     * Retry-After; its running request still gets its whole answer. */
    int fd = send_infer(&f, "b", 5, 200);
    for (int i = 0; i < 500; i++) {
        json_t *m = model(&f, "b");
        json_int_t running = json_integer_value(json_object_get(m, "running"));
        json_decref(m);
        if (running > 0)
            break;
        srv_sleep_ms(2);
    }
    assert_int_equal(call(&f, "DELETE", "/admin/models/b", ADMIN_H, NULL, NULL, NULL), 202);
    srv_resp r;
    char hv[32];
    assert_true(srv_http_h(&f, "POST", "/admin/models", ADMIN_H, M("b", "\"memory_fraction\":0.3"), &r));
    bool drained_first = r.status == 202;
    if (!drained_first) {
        assert_int_equal(r.status, 409);
        assert_non_null(srv_header(&r, "Retry-After", hv, sizeof hv));
    } else {
        fprintf(stderr, "note: b had drained before the second load was asked\n");
    }
    srv_resp_free(&r);
    json_t *long_b = recv_tokens(fd, false);
    assert_true(json_array_size(long_b) > 0);
    json_decref(long_b);
    if (!drained_first) {
        assert_true(wait_state(&f, "b", NULL));
        assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("b", "\"memory_fraction\":0.3"), NULL, NULL),
                         202);
    }
    assert_true(wait_state(&f, "b", "ready"));
    got = infer(&f, "b", 1);
    assert_true(json_equal(got, ref));
    json_decref(got);
    got = infer(&f, "a", 1);
    assert_true(json_equal(got, ref));
    json_decref(got);
    json_decref(ref);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* Eviction order: priority, then least recently used; pinned never; 507
 * with the bytes when nothing can make room, and nothing changes then. */
static void test_eviction_order(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    /* 0.9 of the budget guaranteed; 0.1 free */
    assert_true(start_shape(&f, SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
                          "  - { name: lo, kind: llama, path: m.gguf, memory_fraction: 0.3, priority: low }\n"
                          "  - { name: pin, kind: llama, path: m.gguf, memory_fraction: 0.3, priority: low, pinned: "
                          "true }\n"
                          "  - { name: n1, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n",
                            true));
    json_t *ref = infer(&f, "n1", 3);
    json_decref(infer(&f, "lo", 3)); /* lo used last: LRU alone would pick n1 */
    assert_int_equal(lifecycle(&f, "pin", "pinned"), 1);

    /* room for n2: lo goes (lowest priority), pin stays */
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("n2", "\"memory_fraction\":0.3"), NULL, NULL), 202);
    assert_true(wait_state(&f, "n2", "ready"));
    assert_string_equal(state(&f, "lo"), "sleeping");
    assert_string_equal(state(&f, "pin"), "ready");
    assert_string_equal(state(&f, "n1"), "ready");
    assert_int_equal(lifecycle(&f, "lo", "evictions"), 1);

    /* room for n3: n1 and n2 are normal; n1 was used longer ago */
    json_decref(infer(&f, "n2", 4));
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("n3", "\"memory_fraction\":0.3"), NULL, NULL), 202);
    assert_true(wait_state(&f, "n3", "ready"));
    assert_string_equal(state(&f, "n1"), "sleeping");
    assert_string_equal(state(&f, "n2"), "ready");
    assert_string_equal(state(&f, "pin"), "ready");
    assert_int_equal(lifecycle(&f, "n1", "evictions"), 1);
    assert_int_equal(lifecycle(&f, "pin", "evictions"), 0);

    /* 0.9 cannot fit: 0.1 free plus n2 and n3 (pin is pinned): 507 with
     * the bytes, and nobody is put to sleep */
    json_t *e = NULL;
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("big", "\"memory_fraction\":0.9"),
                          "insufficient_memory", &e), 507);
    json_t *err = json_object_get(e, "error");
    json_int_t need = json_integer_value(json_object_get(err, "needed_bytes"));
    json_int_t avail = json_integer_value(json_object_get(err, "available_bytes"));
    assert_int_equal(need, (json_int_t)(268435456.0 * 0.9));
    assert_true(avail > (json_int_t)(268435456.0 * 0.6) && avail < need);
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)need);
    assert_non_null(strstr(json_string_value(json_object_get(err, "message")), num));
    json_decref(e);
    assert_null(model(&f, "big"));
    assert_string_equal(state(&f, "n2"), "ready");
    assert_string_equal(state(&f, "n3"), "ready");

    /* a sleeping model's wake makes room the same way (n2 is the least
     * recently used now), and it answers as before */
    json_decref(infer(&f, "n3", 4));
    json_t *got = infer(&f, "n1", 3);
    assert_true(json_equal(got, ref));
    json_decref(got);
    assert_string_equal(state(&f, "n2"), "sleeping");
    assert_string_equal(state(&f, "pin"), "ready");

    /* Pinned loads fill the room: p2 then p3 put n1 and n3 to sleep. */
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          M("p2", "\"memory_fraction\":0.3,\"pinned\":true"), NULL, NULL), 202);
    assert_true(wait_state(&f, "p2", "ready"));
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          M("p3", "\"memory_fraction\":0.3,\"pinned\":true"), NULL, NULL), 202);
    assert_true(wait_state(&f, "p3", "ready"));
    assert_string_equal(state(&f, "n1"), "sleeping");
    assert_string_equal(state(&f, "n3"), "sleeping");
    assert_string_equal(state(&f, "pin"), "ready");

    /* Every awake model is pinned: a wake cannot make room. The admin
     * route answers 507 with the bytes, a request 503 with Retry-After and
     * the figures; nothing changes. */
    assert_int_equal(call(&f, "POST", "/admin/models/lo/wake", ADMIN_H, NULL, "insufficient_memory", &e), 507);
    err = json_object_get(e, "error");
    need = json_integer_value(json_object_get(err, "needed_bytes"));
    avail = json_integer_value(json_object_get(err, "available_bytes"));
    assert_true(need > (json_int_t)(268435456.0 * 0.29) && need <= (json_int_t)(268435456.0 * 0.3));
    assert_true(avail < need && avail > (json_int_t)(268435456.0 * 0.09));
    json_decref(e);
    assert_null(recv_tokens(send_infer(&f, "lo", 3, 8), true));
    assert_string_equal(state(&f, "lo"), "sleeping");
    assert_string_equal(state(&f, "p2"), "ready");
    assert_string_equal(state(&f, "p3"), "ready");
    assert_int_equal(lifecycle(&f, "p2", "evictions"), 0);
    assert_true(log_has(&f, "model lo cannot wake: needs"));

    srv_resp r;
    assert_true(srv_http_h(&f, "GET", "/metrics", NULL, NULL, &r));
    assert_non_null(strstr(r.body, "colo_model_evictions_total{model=\"lo\"} 1"));
    assert_non_null(strstr(r.body, "colo_model_evictions_total{model=\"pin\"} 0"));
    assert_non_null(strstr(r.body, "colo_model_sleep_preemptions_total{model=\"lo\"} 0"));
    assert_non_null(strstr(r.body, "colo_model_guarantee_lends_total{model=\"n2\"} 0"));
    assert_non_null(strstr(r.body, "colo_model_state{model=\"lo\",state=\"sleeping\"} 1"));
    assert_non_null(strstr(r.body, "colo_model_state{model=\"p2\",state=\"loading\"} 0"));
    srv_resp_free(&r);
    json_decref(ref);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static const char *reload_yaml_1 =
    SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
    "  - { name: c, kind: llama, path: m.gguf, memory_fraction: 0.2, kv_cache: { dtype: f32 } }\n";
static const char *reload_yaml_2 =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 1, cpu_memory_bytes: 256MiB }\n"
    "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2, keep_alive_ms: 60000, pinned: true }\n"
    "  - { name: c, kind: llama, path: m.gguf, memory_fraction: 0.2, kv_cache: { dtype: f16 } }\n"
    "  - { name: d, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n";
static const char *reload_bad =
    SERVER_YAML "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
    "  - { name: e, kind: llama, path: m.gguf, memory_fraction: lots }\n";

static void test_sighup(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, reload_yaml_1));
    json_t *ref_a = infer(&f, "a", 7), *ref_c = infer(&f, "c", 8);

    /* A bad file changes nothing and says where. */
    assert_true(srv_write(&f, "config.yaml", reload_bad));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "config.yaml:4:"));
    assert_true(log_has(&f, "memory_fraction: expected a number, got 'lots'"));
    assert_true(log_has(&f, "nothing changed"));
    assert_int_equal(n_listed(&f), 3);
    assert_null(model(&f, "e"));
    assert_int_equal(lifecycle(&f, "a", "keep_alive_ms"), 0);

    /* The difference, under traffic to a: b removed, c changed (reloaded),
     * d added, a's keep_alive_ms and pinned applied in place, server
     * settings named and kept. */
    int fds[6], cfd[4];
    for (int i = 0; i < 6; i++)
        fds[i] = send_infer(&f, "a", 7, 24);
    for (int i = 0; i < 4; i++)
        cfd[i] = send_infer(&f, "c", 8, 24);
    assert_true(srv_write(&f, "config.yaml", reload_yaml_2));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    for (int i = 0; i < 6; i++) {
        json_t *got = recv_tokens(fds[i], false);
        assert_true(json_equal(got, ref_a));
        json_decref(got);
    }
    /* c while it drains and loads again: an answer, or 503 with Retry-After */
    int c_ok = 0, c_503 = 0;
    for (int i = 0; i < 4; i++) {
        json_t *got = recv_tokens(cfd[i], true);
        got ? c_ok++ : c_503++;
        json_decref(got);
    }
    for (int i = 0; i < 40; i++) {
        json_t *got = recv_tokens(send_infer(&f, "c", 8, 4), true);
        got ? c_ok++ : c_503++;
        json_decref(got);
    }
    fprintf(stderr, "c during its reload: %d answered, %d refused with Retry-After\n", c_ok, c_503);
    assert_true(wait_state(&f, "b", NULL));
    assert_true(wait_state(&f, "d", "ready"));
    assert_true(log_has(&f, "reload: model b: removed"));
    assert_true(log_has(&f, "reload: model c: changed (kv_cache)"));
    assert_true(log_has(&f, "reload: model d: added"));
    assert_true(log_has(&f, "reload: model a: changed (keep_alive_ms, pinned): applied in place"));
    assert_true(log_has(&f, "server.threads cannot change while colo-server runs"));
    assert_true(log_has(&f, "admin: model c loaded"));
    assert_true(wait_state(&f, "c", "ready"));
    assert_int_equal(lifecycle(&f, "a", "keep_alive_ms"), 60000);
    assert_int_equal(lifecycle(&f, "a", "pinned"), 1);
    json_t *got = infer(&f, "a", 7);
    assert_true(json_equal(got, ref_a));
    json_decref(got);
    got = infer(&f, "c", 8); /* f16 cache now: tokens may differ; it answers */
    assert_true(json_array_size(got) > 0);
    json_decref(got);
    got = infer(&f, "d", 7); /* the same file as a */
    assert_true(json_equal(got, ref_a));
    json_decref(got);

    /* The same file again: no change. */
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "0 model changes"));
    assert_int_equal(n_listed(&f), 3);
    json_decref(ref_a);
    json_decref(ref_c);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A model path that is a FIFO fails its load at once (nothing blocks on
 * it: the name can be deleted and loaded again, and SIGTERM exits); a
 * newline in a path is logged escaped; and the model table's slots are
 * reused: more loads and deletes than it has slots, then a load that
 * serves. */
/* A load that hangs (a stalled read: fault "stall", 60 s) does not hold
 * SIGTERM past server.shutdown_timeout_ms: the server exits long before
 * the load would end. */
static void test_shutdown_bounded_by_stalled_load(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_int_equal(setenv("COLO_FAULTS", "stall@slow", 1), 0);
    bool up = start(&f, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 256MiB, "
                        "shutdown_timeout_ms: 500 }\nmodels:\n"
                        "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n");
    unsetenv("COLO_FAULTS");
    assert_true(up);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("slow", "\"memory_fraction\":0.1"), NULL, NULL),
                     202);
    assert_true(wait_state(&f, "slow", "loading"));
    srv_sleep_ms(300); /* into the stall */
    uint64_t t0 = srv_now_ms();
    kill(f.pid, SIGTERM);
    int st = 0;
    while (waitpid(f.pid, &st, WNOHANG) == 0 && srv_now_ms() - t0 < 30000)
        srv_sleep_ms(10);
    uint64_t took = srv_now_ms() - t0;
    if (!WIFEXITED(st))
        fail_msg("colo-server did not exit within 30 s of SIGTERM with a load stalled for 60 s");
    f.pid = 0;
    assert_true(took < 30000);
    srv_cleanup(&f);
}

static void test_fifo_and_slot_reuse(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
                          "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.3 }\n"));
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/pipe.gguf", f.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":\"fifo\",\"kind\":\"llama\",\"path\":\"pipe.gguf\",\"memory_fraction\":0.1}", NULL,
                          NULL), 202);
    assert_true(wait_state(&f, "fifo", "failed"));
    json_t *m = model(&f, "fifo");
    assert_non_null(strstr(json_string_value(json_object_get(m, "error")), "not a regular file (a FIFO)"));
    json_decref(m);
    assert_int_equal(call(&f, "DELETE", "/admin/models/fifo", ADMIN_H, NULL, NULL, NULL), 202);
    assert_true(wait_state(&f, "fifo", NULL));
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("fifo", "\"memory_fraction\":0.1"), NULL, NULL), 202);
    assert_true(wait_state(&f, "fifo", "ready"));
    assert_int_equal(call(&f, "DELETE", "/admin/models/fifo", ADMIN_H, NULL, NULL, NULL), 202);
    assert_true(wait_state(&f, "fifo", NULL));

    /* a newline in a path cannot start a log line */
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H,
                          "{\"name\":\"nl\",\"kind\":\"llama\",\"path\":\"x\\nFORGED-LINE.gguf\",\"memory_fraction\":0.1}",
                          NULL, NULL), 202);
    assert_true(wait_state(&f, "nl", "failed"));
    assert_true(log_has(&f, "x\\nFORGED-LINE"));
    char *log = srv_log(&f);
    assert_null(strstr(log, "\nFORGED-LINE"));
    free(log);
    assert_int_equal(call(&f, "DELETE", "/admin/models/nl", ADMIN_H, NULL, NULL, NULL), 202);
    assert_true(wait_state(&f, "nl", NULL));

    /* more loads (failing ones, the cheapest) and deletes than the table has slots */
    assert_true(srv_write(&f, "bad.gguf", "not a gguf"));
    for (int b = 0; b < 272 / 16; b++) {
        for (int i = 0; i < 16; i++) {
            char body[160], path[64];
            snprintf(body, sizeof body,
                     "{\"name\":\"s%d\",\"kind\":\"llama\",\"path\":\"bad.gguf\",\"memory_fraction\":0.1}", b * 16 + i);
            assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, body, NULL, NULL), 202);
            snprintf(path, sizeof path, "/admin/models/s%d", b * 16 + i);
            assert_int_equal(call(&f, "DELETE", path, ADMIN_H, NULL, NULL, NULL), 202);
        }
        for (int i = 0; i < 16; i++) {
            char name[16];
            snprintf(name, sizeof name, "s%d", b * 16 + i);
            assert_true(wait_state(&f, name, NULL));
        }
    }
    assert_int_equal(n_listed(&f), 1);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, M("late", "\"memory_fraction\":0.3"), NULL, NULL), 202);
    assert_true(wait_state(&f, "late", "ready"));
    json_t *ref = infer(&f, "a", 3), *got = infer(&f, "late", 3);
    assert_true(json_equal(got, ref));
    json_decref(got);
    json_decref(ref);
    assert_int_equal(call(&f, "GET", "/health/ready", NULL, NULL, NULL, NULL), 200);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static const char *conv_yaml_ab =
    SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.2, batching: { max_batch_size: 1 } }\n";
static const char *conv_yaml_a =
    SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n";
static const char *conv_yaml_a_bad =
    SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
    "  - { name: a, kind: llama, path: bad.gguf, memory_fraction: 0.2 }\n"
    "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.2, batching: { max_batch_size: 1 } }\n";

/* What SIGHUP applies converges to the file: a model removed and named
 * again while it drains is loaded again; a model the file names that
 * cannot be loaded again makes /health/ready 503 until a later file
 * loads it. */
static void test_sighup_converges(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(start(&f, conv_yaml_ab));
    json_t *ref = infer(&f, "b", 9);

    /* b busy (one request at a time), removed, then named again while it drains */
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = send_infer(&f, "b", 20 + i, 200);
    for (int i = 0; i < 500; i++) {
        json_t *m = model(&f, "b");
        json_int_t running = json_integer_value(json_object_get(m, "running"));
        json_decref(m);
        if (running > 0)
            break;
        srv_sleep_ms(2);
    }
    assert_true(srv_write(&f, "config.yaml", conv_yaml_a));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "reload: model b: removed (draining"));
    assert_true(srv_write(&f, "config.yaml", conv_yaml_ab));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "reload: model b: named by the file while being unloaded"));
    for (int i = 0; i < 4; i++) {
        json_t *t = recv_tokens(fds[i], false);
        json_decref(t);
    }
    assert_true(log_has(&f, "admin: model b loaded in"));
    assert_true(wait_state(&f, "b", "ready"));
    json_t *got = infer(&f, "b", 9);
    assert_true(json_equal(got, ref));
    json_decref(got);
    assert_int_equal(call(&f, "GET", "/health/ready", NULL, NULL, NULL, NULL), 200);

    /* a changed to a file that does not load: failed, and not ready */
    assert_true(srv_write(&f, "bad.gguf", "not a gguf"));
    assert_true(srv_write(&f, "config.yaml", conv_yaml_a_bad));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "reload: model a: changed (path/source)"));
    assert_true(wait_state(&f, "a", "failed"));
    assert_int_equal(call(&f, "GET", "/health/ready", NULL, NULL, "not_ready", NULL), 503);
    /* the same file again: a failed model is tried again */
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(log_has(&f, "reload: model a: changed (it had failed)"));
    /* the good file: a serves, and colo-server is ready again */
    assert_true(srv_write(&f, "config.yaml", conv_yaml_ab));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    for (int i = 0; i < 1500 && call(&f, "GET", "/health/ready", NULL, NULL, NULL, NULL) != 200; i++)
        srv_sleep_ms(10);
    assert_int_equal(call(&f, "GET", "/health/ready", NULL, NULL, NULL, NULL), 200);
    assert_string_equal(state(&f, "a"), "ready");
    got = infer(&f, "a", 9);
    assert_true(json_equal(got, ref)); /* the same file as b */
    json_decref(got);
    json_decref(ref);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* A tiny BERT folder with seeded random weights (1 layer, hidden 32, 2
 * heads, FFN 64, a 40-token WordPiece vocabulary), for the bert kind
 * without downloaded weights. */
static bool write_tiny_bert(const char *dir)
{
    enum { E = 32, F = 64, P = 64, L = 1 };
    static const char *const words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on",
                                        "a", "mat", "dog", "ran", "home", "##s", "big", "red", "blue", "and", "is",
                                        "it", "was", "of", "to", "in", "b", "c", "d", "e", "f", "g", "h", "i", "j",
                                        "k", "l", "m", "n", "o", "p"};
    const int V = (int)(sizeof words / sizeof *words);
    char path[700];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    for (int i = 0; i < V; i++)
        fprintf(f, "%s\n", words[i]);
    fclose(f);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(f = fopen(path, "w")))
        return false;
    fprintf(f, "{\"architectures\":[\"BertModel\"],\"model_type\":\"bert\",\"hidden_act\":\"gelu\",\"hidden_size\":%d,"
               "\"intermediate_size\":%d,\"layer_norm_eps\":1e-12,\"max_position_embeddings\":%d,"
               "\"num_attention_heads\":2,\"num_hidden_layers\":%d,\"position_embedding_type\":\"absolute\","
               "\"type_vocab_size\":2,\"vocab_size\":%d}",
            E, F, P, L, V);
    fclose(f);
    struct { char name[96]; int rows, cols; } t[5 + 16 * L];
    int n = 0;
#define T(nm, r, c) (snprintf(t[n].name, sizeof t[n].name, "%s", nm), t[n].rows = (r), t[n].cols = (c), n++)
    T("embeddings.word_embeddings.weight", V, E);
    T("embeddings.position_embeddings.weight", P, E);
    T("embeddings.token_type_embeddings.weight", 2, E);
    T("embeddings.LayerNorm.weight", 0, E);
    T("embeddings.LayerNorm.bias", 0, E);
    static const struct { const char *sfx; int rows, cols; } lt[16] = {
        {"attention.self.query.weight", E, E}, {"attention.self.key.weight", E, E},
        {"attention.self.value.weight", E, E}, {"attention.self.query.bias", 0, E},
        {"attention.self.key.bias", 0, E}, {"attention.self.value.bias", 0, E},
        {"attention.output.dense.weight", E, E}, {"attention.output.dense.bias", 0, E},
        {"attention.output.LayerNorm.weight", 0, E}, {"attention.output.LayerNorm.bias", 0, E},
        {"intermediate.dense.weight", F, E}, {"intermediate.dense.bias", 0, F},
        {"output.dense.weight", E, F}, {"output.dense.bias", 0, E},
        {"output.LayerNorm.weight", 0, E}, {"output.LayerNorm.bias", 0, E}};
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 16; i++) {
            char nm[96];
            snprintf(nm, sizeof nm, "encoder.layer.%d.%s", l, lt[i].sfx);
            T(nm, lt[i].rows, lt[i].cols);
        }
#undef T
    char head[8192];
    size_t o = 0, off = 0;
    o += (size_t)snprintf(head + o, sizeof head - o, "{");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(t[i].rows ? t[i].rows : 1) * t[i].cols * 4;
        if (t[i].rows)
            o += (size_t)snprintf(head + o, sizeof head - o, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                                  "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name, t[i].rows, t[i].cols, off,
                                  off + bytes);
        else
            o += (size_t)snprintf(head + o, sizeof head - o, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
                                  "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name, t[i].cols, off, off + bytes);
        off += bytes;
    }
    o += (size_t)snprintf(head + o, sizeof head - o, "}");
    while (o % 8)
        head[o++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!(f = fopen(path, "wb")))
        return false;
    uint64_t hl = o;
    fwrite(&hl, 8, 1, f);
    fwrite(head, 1, o, f);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < n; i++) {
        bool ln_gain = strstr(t[i].name, "LayerNorm.weight") != NULL;
        size_t cnt = (size_t)(t[i].rows ? t[i].rows : 1) * t[i].cols;
        for (size_t k = 0; k < cnt; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float v = ln_gain ? 1.0f : ((float)(x >> 40) / (float)(1 << 24) - 0.5f) * 0.2f;
            fwrite(&v, 4, 1, f);
        }
    }
    return fclose(f) == 0;
}

/* bert sleeps and wakes with the same embeddings, tokenizing while asleep. */
static void test_bert_sleep_wake(void **state_)
{
    (void)state_;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/bert", f.dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_true(write_tiny_bert(dir));
    assert_true(start(&f, SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
                          "  - { name: enc, kind: bert, path: bert, memory_fraction: 0.2 }\n"
                          "  - { name: gen, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"));
    const char *emb = "{\"model\":\"enc\",\"input\":[\"the cat sat on the mat\",\"a big red dog ran home\"]}";
    json_t *ref = NULL, *got = NULL;
    assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &ref), 200);
    assert_int_equal(json_array_size(json_object_get(ref, "data")), 2);
    json_t *m = model(&f, "enc");
    json_int_t weights = json_integer_value(json_object_get(json_object_get(m, "memory"), "weights_bytes"));
    json_decref(m);
    assert_true(weights > 0);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(call(&f, "POST", "/admin/models/enc/sleep", ADMIN_H, NULL, NULL, NULL), 202);
        assert_true(wait_state(&f, "enc", "sleeping"));
        m = model(&f, "enc");
        json_t *mem = json_object_get(m, "memory");
        assert_int_equal(json_integer_value(json_object_get(mem, "weights_bytes")), 0);
        assert_int_equal(json_integer_value(json_object_get(mem, "used_bytes")), 0);
        assert_int_equal(json_integer_value(json_object_get(m, "dim")), 32);
        json_decref(m);
        if (round == 0) { /* a request wakes it */
            assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &got), 200);
        } else { /* the admin route wakes it */
            assert_int_equal(call(&f, "POST", "/admin/models/enc/wake", ADMIN_H, NULL, NULL, NULL), 202);
            assert_true(wait_state(&f, "enc", "ready"));
            assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &got), 200);
        }
        assert_true(json_equal(json_object_get(got, "data"), json_object_get(ref, "data")));
        json_decref(got);
        assert_string_equal(state(&f, "enc"), "ready");
    }
    assert_int_equal(lifecycle(&f, "enc", "wakes"), 2);
    assert_int_equal(lifecycle(&f, "enc", "sleeps"), 2);
    /* and keep_alive_ms applies to it through SIGHUP, in place */
    assert_true(srv_write(&f, "config.yaml",
                          SERVER_YAML "scheduler: { policy: spatial }\nmodels:\n"
                          "  - { name: enc, kind: bert, path: bert, memory_fraction: 0.2, keep_alive_ms: 200 }\n"
                          "  - { name: gen, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"));
    assert_int_equal(kill(f.pid, SIGHUP), 0);
    assert_true(wait_state(&f, "enc", "sleeping"));
    assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &got), 200);
    assert_true(json_equal(json_object_get(got, "data"), json_object_get(ref, "data")));
    json_decref(got);
    json_decref(ref);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* MiniLM sleeps and wakes with the same embeddings; SmolLM2 loads at run time. */
static void test_real_models(void **state_)
{
    (void)state_;
    char gguf[1024], st[1024], dir[1024];
    if (!colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", gguf, sizeof gguf) ||
        !colo_model_cache_path("all-minilm-l6-v2/model.safetensors", st, sizeof st)) {
        fprintf(stderr, "model weights not cached (scripts/fetch-models.sh)\n");
        skip();
    }
    snprintf(dir, sizeof dir, "%s", st);
    *strrchr(dir, '/') = 0;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\nscheduler: { policy: spatial }\n"
             "models:\n  - { name: minilm, kind: bert, path: \"%s\", memory_fraction: 0.05 }\n",
             dir);
    assert_true(start(&f, yaml));
    const char *emb = "{\"model\":\"minilm\",\"input\":[\"the cat sat\",\"a dog ran home\"]}";
    json_t *ref = NULL, *got = NULL;
    assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &ref), 200);
    assert_int_equal(call(&f, "POST", "/admin/models/minilm/sleep", ADMIN_H, NULL, NULL, NULL), 202);
    assert_true(wait_state(&f, "minilm", "sleeping"));
    json_t *m = model(&f, "minilm");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "memory"), "weights_bytes")), 0);
    json_decref(m);
    assert_int_equal(call(&f, "POST", "/v1/embeddings", NULL, emb, NULL, &got), 200); /* wakes it */
    assert_true(json_equal(json_object_get(got, "data"), json_object_get(ref, "data")));
    json_decref(got);
    assert_int_equal(lifecycle(&f, "minilm", "wakes"), 1);

    char body[1400];
    snprintf(body, sizeof body,
             "{\"name\":\"smollm2\",\"kind\":\"llama\",\"path\":\"%s\",\"memory_fraction\":0.05,\"max_seq_len\":512}",
             gguf);
    assert_int_equal(call(&f, "POST", "/admin/models", ADMIN_H, body, NULL, NULL), 202);
    assert_true(wait_state(&f, "smollm2", "ready"));
    assert_int_equal(call(&f, "POST", "/v1/models/smollm2/infer", NULL,
                          "{\"prompt\":\"The capital of France is\",\"max_tokens\":4,\"temperature\":0}", NULL, &got),
                     200);
    assert_true(json_array_size(json_object_get(got, "tokens")) > 0);
    json_decref(got);
    json_decref(ref);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_at_run_time),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_sighup),
        cmocka_unit_test(test_fifo_and_slot_reuse),
        cmocka_unit_test(test_shutdown_bounded_by_stalled_load),
        cmocka_unit_test(test_sighup_converges),
        cmocka_unit_test(test_bert_sleep_wake),
        cmocka_unit_test(test_real_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
