/* Elastic memory through colo-server: model a is guaranteed about one and
 * a half full-length sequences of KV cache and may grow to the whole
 * budget (memory_max_fraction: 1.0); model b is guaranteed the rest. With
 * b idle, a borrows b's guarantee and runs all eight of its long
 * generations at once; then b bursts, a gives the memory back (its
 * sequences preempted and recomputed), b's burst runs at once, and every
 * request of both models answers 200 with the tokens it gets alone. F32
 * weights and KV cache, so recomputation is exact. EOS is biased away and
 * the weights' seed is fixed: a sequence that ended early would leave the
 * budget unfilled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

#define N_A 8
#define N_B 6
#define GEN 240   /* a's generations */
#define GEN_B 100 /* b's */

static bool need_of(srv_fixture *f, double *need, double *kv)
{
    return srv_check_config_need(f,
                                 "server: { device: cpu, cpu_memory_bytes: 512MiB }\nmodels:\n"
                                 "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.00001,\n"
                                 "      kv_cache: { dtype: f32 }, batching: { max_batch_size: 8 } }\n",
                                 need, kv);
}

static json_int_t jint(json_t *o, const char *k1, const char *k2)
{
    json_t *v = json_object_get(o, k1);
    return json_integer_value(k2 ? json_object_get(v, k2) : v);
}

static json_t *info(srv_fixture *f, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    int status;
    json_t *j = srv_get_json(f, path, &status);
    assert_int_equal(status, 200);
    assert_non_null(j);
    return j;
}

/* Model NAME's memory in the newest point of /v1/stats (the telemetry
 * sampler's copy): field K, or -1 when absent. */
static json_int_t stats_memory(srv_fixture *f, const char *name, const char *k)
{
    int status;
    json_t *s = srv_get_json(f, "/v1/stats", &status);
    assert_int_equal(status, 200);
    json_int_t v = -1;
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(s, "models"), i, m) {
        json_t *x = json_object_get(json_object_get(m, "memory"), k);
        if (!strcmp(json_string_value(json_object_get(m, "name")), name) && json_is_integer(x))
            v = json_integer_value(x);
    }
    json_decref(s);
    return v;
}

static int send_req(srv_fixture *f, const char *model, int seed)
{
    char body[200], path[64];
    int gen = model[0] == 'a' ? GEN : GEN_B;
    /* (the first special token is the synthetic vocabulary's EOS) */
    snprintf(body, sizeof body,
             "{\"prompt\":\"story %d\",\"max_tokens\":%d,\"seed\":%d,\"temperature\":0,"
             "\"logit_bias\":{\"%d\":-100}}",
             seed, gen, seed, colo_mkmodel_min_vocab() - 3);
    snprintf(path, sizeof path, "/v1/models/%s/infer", model);
    char *raw = srv_post_raw(path, NULL, body);
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    return fd;
}

/* The answer's tokens (a new reference); fails unless 200. */
static json_t *recv_tokens(int fd)
{
    size_t len;
    char *buf = srv_read_all(fd, 60000, &len);
    close(fd);
    srv_resp r;
    assert_true(buf && srv_parse(buf, len, &r) > 0);
    free(buf);
    if (r.status != 200)
        fprintf(stderr, "%d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    /* (generated text may hold U+0000, which jansson refuses by default) */
    json_t *j = r.body ? json_loads(r.body, JSON_ALLOW_NUL, NULL) : NULL;
    srv_resp_free(&r);
    assert_non_null(j);
    json_t *t = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    return t;
}

static void test_borrow_and_give_back(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/m.gguf", f.dir);
    colo_mkmodel_config mc = {.n_layer = 4, .n_embd = 256, .n_head = 4, .n_kv_head = 2, .n_ff = 512,
                              .n_vocab = 512, .n_ctx = 256, .type = COLO_F32, .seed = 101};
    assert_int_equal(colo_mkmodel_write(path, &mc, err, sizeof err), COLO_OK);
    double need = 0, kv = 0;
    assert_true(need_of(&f, &need, &kv));
    /* a: its need and 1.5 sequences; b: its need and room for its burst
     * (each of its sequences reaches 100 tokens and a little); nothing
     * else. a's eight sequences of 240 tokens need more than all of it. */
    double budget = 2 * need + (1.5 + 0.45 * N_B) * kv;
    double fa = (need + 1.5 * kv) / budget, fb = 1.0 - fa - 1e-9;
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: %.0f,\n"
             "          telemetry_interval_ms: 100 }\n"
             "scheduler: { policy: spatial }\nmodels:\n"
             "  - { name: a, kind: llama, path: m.gguf, memory_fraction: %.9f, memory_max_fraction: 1.0,\n"
             "      kv_cache: { dtype: f32 }, batching: { max_batch_size: 8 } }\n"
             "  - { name: b, kind: llama, path: m.gguf, memory_fraction: %.9f, kv_cache: { dtype: f32 },\n"
             "      batching: { max_batch_size: 8 } }\n",
             budget, fa, fb);
    if (!srv_start(&f, yaml)) {
        char *log = srv_log(&f);
        fprintf(stderr, "colo-server did not start:\n%s\n", log);
        free(log);
        fail();
    }
    json_t *ia = info(&f, "a");
    json_int_t guaranteed = jint(ia, "memory", "guaranteed_bytes"), used0 = jint(ia, "memory", "used_bytes");
    assert_true(jint(ia, "memory", "ceiling_bytes") > guaranteed);
    json_decref(ia);
    /* Guarantee left for KV after weights and activations: under three
     * full-length sequences (the need has some slack), far from eight. */
    assert_true((double)(guaranteed - used0) < 3 * kv);

    /* References: each request alone. */
    json_t *ref_a[N_A], *ref_b[N_B];
    for (int i = 0; i < N_A; i++)
        ref_a[i] = recv_tokens(send_req(&f, "a", 10 + i));
    for (int i = 0; i < N_B; i++)
        ref_b[i] = recv_tokens(send_req(&f, "b", 50 + i));

    /* a alone: it borrows b's idle guarantee, runs all eight at once and
     * fills the budget. */
    int fa_fd[N_A], fb_fd[N_B];
    for (int i = 0; i < N_A; i++)
        fa_fd[i] = send_req(&f, "a", 10 + i);
    json_int_t peak_borrowed = 0, peak_running = 0, peak_lent = 0;
    double block = kv / 16; /* 16-token blocks of a 256-token context */
    bool full = false;
    double min_free = budget;
    /* bounded by time, not by polls: under sanitizers on a loaded machine
     * the eight sequences take many seconds to grow */
    for (uint64_t t0 = srv_now_ms(); !full && srv_now_ms() - t0 < 90000;) {
        json_t *m = info(&f, "a"), *mb = info(&f, "b");
        if (jint(m, "memory", "borrowed_bytes") > peak_borrowed)
            peak_borrowed = jint(m, "memory", "borrowed_bytes");
        if (jint(mb, "memory", "lent_bytes") > peak_lent)
            peak_lent = jint(mb, "memory", "lent_bytes");
        if (jint(m, "kv_cache", "running_sequences") > peak_running)
            peak_running = jint(m, "kv_cache", "running_sequences");
        /* b's burst cannot be admitted without a giving memory back */
        double free_bytes = budget - (double)jint(m, "memory", "used_bytes") - (double)jint(mb, "memory", "used_bytes");
        full = free_bytes < N_B * block && peak_running == N_A;
        min_free = free_bytes < min_free ? free_bytes : min_free;
        json_decref(m);
        json_decref(mb);
        if (!full)
            srv_sleep_ms(1);
    }
    if (!full)
        fprintf(stderr, "a never filled the budget: %lld running at most, %.0f bytes free at least, %.0f wanted\n",
                (long long)peak_running, min_free, N_B * block);
    assert_true(full);
    assert_true(peak_borrowed > 0);
    assert_int_equal(peak_running, N_A);
    /* /v1/stats (and the dashboard's bar) show it too, once sampled: a
     * borrows until b's burst takes its memory back */
    json_int_t stats_borrowed = 0, stats_lent = 0;
    for (uint64_t t0 = srv_now_ms(); (stats_borrowed <= 0 || stats_lent <= 0) && srv_now_ms() - t0 < 5000;) {
        stats_borrowed = stats_memory(&f, "a", "borrowed_bytes");
        stats_lent = stats_memory(&f, "b", "lent_bytes");
        srv_sleep_ms(5);
    }
    assert_true(stats_borrowed > 0);
    assert_true(stats_lent > 0);
    /* b bursts while a holds its guarantee. */
    for (int i = 0; i < N_B; i++)
        fb_fd[i] = send_req(&f, "b", 50 + i);
    for (int i = 0; i < N_B; i++) {
        json_t *got = recv_tokens(fb_fd[i]);
        assert_true(json_equal(got, ref_b[i]));
        json_decref(got);
    }
    for (int i = 0; i < N_A; i++) {
        json_t *got = recv_tokens(fa_fd[i]);
        assert_true(json_equal(got, ref_a[i]));
        json_decref(got);
    }
    json_t *m = info(&f, "a");
    json_int_t reclaims = jint(m, "memory", "reclaims"), preempted = jint(m, "kv_cache", "preemptions");
    fprintf(stderr, "a: borrowed up to %lld bytes (b lent %lld), %lld reclaims, %lld preemptions\n",
            (long long)peak_borrowed, (long long)peak_lent, (long long)reclaims, (long long)preempted);
    assert_true(reclaims > 0);
    assert_true(preempted > 0);
    json_decref(m);
    /* Everything goes back to the fixed parts, but for a prefix cache's
     * blocks (within the guarantee: an idle model borrows nothing). */
    for (int t = 0; t < 200; t++) {
        m = info(&f, "a");
        bool back = jint(m, "memory", "used_bytes") == used0 + jint(m, "prefix_cache", "cached_bytes");
        json_decref(m);
        if (back)
            break;
        srv_sleep_ms(10);
    }
    m = info(&f, "a");
    assert_int_equal(jint(m, "memory", "used_bytes"), used0 + jint(m, "prefix_cache", "cached_bytes"));
    assert_int_equal(jint(m, "memory", "borrowed_bytes"), 0);
    json_decref(m);
    char metrics_path[] = "/metrics";
    srv_resp r;
    assert_true(srv_http(&f, "GET", metrics_path, NULL, &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "colo_model_memory_guaranteed_bytes{model=\"a\"}"));
    assert_non_null(strstr(r.body, "colo_model_kv_reclaims_total{model=\"a\"}"));
    srv_resp_free(&r);
    for (int i = 0; i < N_A; i++)
        json_decref(ref_a[i]);
    for (int i = 0; i < N_B; i++)
        json_decref(ref_b[i]);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_borrow_and_give_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
