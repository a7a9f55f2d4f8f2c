/* The budget bounds the process: many models in one CPU budget that holds
 * about half of them awake, the shape of scripts/bench-trace.sh at small
 * scale. Half the models are in the config and the rest are loaded at run
 * time (POST /admin/models), putting idle models to sleep; then requests
 * go round all of them twice, so that every model sleeps and wakes. The
 * server's peak resident memory (VmHWM, read from /proc/PID/status while
 * it still runs) must stay within the container limit it reported at
 * start: budget plus its fixed overhead. Q8_0 weights, so that the run
 * goes through the quantized kernels; CMakeLists.txt runs this test again
 * on their AVX2 version (COLO_CPU_GEMM_Q8=avx2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

#define N_MODELS 8
#define N_IN_FILE 4
#define BUDGET_BYTES (160u << 20)
#define FRACTION "0.22" /* a model's weights (~11 MiB), activations and some KV cache */

/* Model i: a file of its own (a different seed and vocabulary: its own
 * tokenizer, so that the models' host memory adds up). */
static bool make_models(srv_fixture *f)
{
    for (int i = 0; i < N_MODELS; i++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/m%d.gguf", f->dir, i);
        colo_mkmodel_config mc = {.n_layer = 4, .n_embd = 512, .n_head = 8, .n_kv_head = 4, .n_ff = 1536,
                                  .n_vocab = 8192 + 512 * i, .n_ctx = 512, .type = COLO_Q8_0,
                                  .seed = 300 + (uint64_t)i};
        if (colo_mkmodel_write(path, &mc, err, sizeof err) != COLO_OK) {
            fprintf(stderr, "mkmodel: %s\n", err);
            return false;
        }
    }
    return true;
}

/* VmHWM of pid, bytes (0 when unreadable). */
static size_t peak_rss(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    size_t kb = 0;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1)
            break;
    if (fp)
        fclose(fp);
    return kb * 1024;
}

/* The container limit of the start report ("a container memory limit of
 * N bytes"), 0 when the log lacks it. */
/* The container limit the server reported at start, and the resident
 * memory it counted before any model (*start, bytes). */
static size_t reported_limit(srv_fixture *f, size_t *start)
{
    char *log = srv_log(f);
    const char *p = log ? strstr(log, "a container memory limit of ") : NULL;
    const char *q = log ? strstr(log, "resident before any model ") : NULL;
    size_t n = 0;
    double mib = 0;
    if (p)
        sscanf(p + strlen("a container memory limit of "), "%zu", &n);
    if (q)
        sscanf(q + strlen("resident before any model "), "%lf", &mib);
    *start = (size_t)(mib * (1 << 20));
    free(log);
    return n;
}

static int post(srv_fixture *f, const char *path, const char *body)
{
    srv_resp r;
    assert_true(srv_http(f, "POST", path, body, &r));
    int s = r.status;
    if (s != 200 && s != 202)
        fprintf(stderr, "POST %s: %d %s\n", path, s, r.body ? r.body : "");
    srv_resp_free(&r);
    return s;
}

/* Waits up to 60 s for model name to be ready or sleeping. */
static bool settled(srv_fixture *f, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    for (int i = 0; i < 3000; i++) {
        int status;
        json_t *j = srv_get_json(f, path, &status);
        const char *s = j ? json_string_value(json_object_get(j, "state")) : NULL;
        bool ok = s && (!strcmp(s, "ready") || !strcmp(s, "sleeping"));
        bool failed = s && !strcmp(s, "failed");
        json_decref(j);
        if (ok || failed)
            return ok;
        srv_sleep_ms(20);
    }
    return false;
}

static void test_peak_rss_within_budget_and_overhead(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* a sanitizer's shadow memory and quarantine are no part of colo's */
    skip();
#endif
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(make_models(&f));
    char yaml[2048];
    int n = snprintf(yaml, sizeof yaml,
                     "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: %u }\n"
                     "scheduler: { policy: deadline }\nmodels:\n",
                     BUDGET_BYTES);
    for (int i = 0; i < N_IN_FILE; i++)
        n += snprintf(yaml + n, sizeof yaml - (size_t)n,
                      "  - { name: m%d, kind: llama, path: m%d.gguf, memory_fraction: " FRACTION
                      ", max_seq_len: 256 }\n",
                      i, i);
    assert_true(srv_start(&f, yaml));
    size_t start = 0, limit = reported_limit(&f, &start);
    assert_true(start > 0);
    assert_true(limit > BUDGET_BYTES + start);
    /* Besides what the process holds before any model, the overhead is a
     * fixed few tens of MiB; and what it holds is the program and a few
     * libraries, CUDA's runtime included where it was built with CUDA (not
     * cuBLAS, which a CPU-only process never opens: 140 MiB of it). */
    assert_true(limit < BUDGET_BYTES + start + (48u << 20));
    assert_true(start < (32u << 20));

    for (int i = N_IN_FILE; i < N_MODELS; i++) {
        char body[256], name[16];
        snprintf(name, sizeof name, "m%d", i);
        snprintf(body, sizeof body,
                 "{\"name\":\"%s\",\"kind\":\"llama\",\"path\":\"m%d.gguf\",\"memory_fraction\":" FRACTION
                 ",\"max_seq_len\":256}",
                 name, i);
        assert_int_equal(post(&f, "/admin/models", body), 202);
        assert_true(settled(&f, name));
    }
    /* every model twice, in turn: each request wakes its model and puts
     * another to sleep */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N_MODELS; i++) {
            /* a long prompt and a long answer: the step's activations and
             * the KV cache are touched as far as a sequence reaches */
            char path[64], body[512];
            snprintf(path, sizeof path, "/v1/models/m%d/infer", i);
            snprintf(body, sizeof body,
                     "{\"prompt\":\"%0180d\",\"max_tokens\":64,\"seed\":%d,\"logit_bias\":{\"%d\":-100}}",
                     round * N_MODELS + i, i, colo_mkmodel_min_vocab() - 3);
            assert_int_equal(post(&f, path, body), 200);
        }
    size_t peak = peak_rss(f.pid);
    assert_true(peak > 0);
    fprintf(stderr, "peak RSS %.1f MiB, budget %.1f MiB, reported limit %.1f MiB\n", peak / 1048576.0,
            BUDGET_BYTES / 1048576.0, limit / 1048576.0);
    if (peak > limit) {
        char *log = srv_log(&f);
        fprintf(stderr, "peak RSS %zu bytes past the reported limit %zu bytes\n%s\n", peak, limit, log ? log : "");
        free(log);
    }
    assert_true(peak <= limit);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_rss_within_budget_and_overhead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
