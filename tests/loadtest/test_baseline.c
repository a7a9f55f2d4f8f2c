/* tests/loadtest/test_baseline.c: --baseline separate. The derived configs
 * (one model each, a free port, absolute model paths, everything else as
 * written), and the whole experiment against the real colo-server on two
 * synthetic models written by colo-mkmodel (skipped when either program
 * is not built). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadtest/baseline.h"
#include "loadtest/loadtest.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-lt-baseXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 21];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_config_derive(void **state)
{
    (void)state;
    char cfg[128], out[128], err[512];
    snprintf(cfg, sizeof cfg, "%s/colo.yaml", dir);
    snprintf(out, sizeof out, "%s/one.yaml", dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("# two models\n"
          "server: { listen: \"0.0.0.0:8080\", device: cpu, threads: 2 }\n"
          "scheduler: { policy: fair }\n"
          "models:\n"
          "  - name: a\n    kind: llama\n    path: weights/a.gguf\n    memory_fraction: 0.125\n"
          "    sla: { p99_ms: 800, ttft_ms: 300 }\n"
          "  - name: b\n    kind: llama\n    path: /abs/b.gguf\n    memory_fraction: 0.25\n"
          "    batching: { max_batch_size: 4 }\n"
          "    adapters: [ { name: tone, path: tone.gguf } ]\n",
          f);
    fclose(f);
    char names[4][128];
    size_t n;
    assert_int_equal(lt_config_models(cfg, names, 4, &n, err, sizeof err), LT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "a");
    assert_string_equal(names[1], "b");
    /* a LoRA adapter answers as a model; a model is not an adapter */
    assert_true(lt_config_has_adapter(cfg, "tone"));
    assert_false(lt_config_has_adapter(cfg, "a"));
    assert_false(lt_config_has_adapter(cfg, "nope"));

    assert_int_equal(lt_config_derive(cfg, "a", out, err, sizeof err), LT_OK);
    assert_int_equal(lt_config_models(out, names, 4, &n, err, sizeof err), LT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], "a");
    char *text = slurp(out);
    assert_non_null(strstr(text, "127.0.0.1:0"));
    assert_null(strstr(text, "8080"));
    assert_non_null(strstr(text, "0.125"));
    assert_non_null(strstr(text, "fair"));
    assert_non_null(strstr(text, "threads"));
    assert_non_null(strstr(text, "ttft_ms"));
    char abs[256];
    snprintf(abs, sizeof abs, "%s/weights/a.gguf", dir);
    assert_non_null(strstr(text, abs)); /* a relative path, made absolute */
    assert_null(strstr(text, "b.gguf"));

    assert_int_equal(lt_config_derive(cfg, NULL, out, err, sizeof err), LT_OK);
    assert_int_equal(lt_config_models(out, names, 4, &n, err, sizeof err), LT_OK);
    assert_int_equal(n, 2);
    text = slurp(out);
    assert_non_null(strstr(text, "/abs/b.gguf")); /* absolute paths stay */
    assert_non_null(strstr(text, "max_batch_size"));

    /* no server: block at all gets one */
    f = fopen(cfg, "w");
    fputs("models:\n  - { name: z, kind: llama, path: z.gguf, memory_fraction: 0.5 }\n", f);
    fclose(f);
    assert_int_equal(lt_config_derive(cfg, NULL, out, err, sizeof err), LT_OK);
    assert_non_null(strstr(slurp(out), "127.0.0.1:0"));

    /* not a config */
    f = fopen(cfg, "w");
    fputs("- just\n- a list\n", f);
    fclose(f);
    assert_int_equal(lt_config_models(cfg, names, 4, &n, err, sizeof err), LT_EFORMAT);
    f = fopen(cfg, "w");
    fputs("models: [ {kind: llama} ]\n", f);
    fclose(f);
    assert_int_equal(lt_config_models(cfg, names, 4, &n, err, sizeof err), LT_EFORMAT);
    assert_non_null(strstr(err, "no name"));
}

static bool run_prog(const char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void test_baseline_end_to_end(void **state)
{
    (void)state;
    const char *bin = getenv("COLO_BINARY_DIR") ? getenv("COLO_BINARY_DIR") : COLO_BINARY_DIR;
    char server[512], mkmodel[512], model[128], cfg[128], json_path[128], html_path[128];
    snprintf(server, sizeof server, "%s/colo-server", bin);
    snprintf(mkmodel, sizeof mkmodel, "%s/colo-mkmodel", bin);
    if (access(server, X_OK) != 0 || access(mkmodel, X_OK) != 0) {
        printf("colo-server or colo-mkmodel not built in %s\n", bin);
        skip();
    }
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    const char *mk[] = {mkmodel, "--out", model, "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                        "--ffn", "128", "--vocab", "512", "--ctx", "256", NULL};
    assert_true(run_prog(mk));
    snprintf(cfg, sizeof cfg, "%s/two.yaml", dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("server: { listen: \"127.0.0.1:8080\", device: cpu, threads: 1 }\n"
          "models:\n"
          "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.01, sla: { p99_ms: 20000 } }\n"
          "  - { name: b, kind: llama, path: m.gguf, memory_fraction: 0.01, sla: { p99_ms: 20000 } }\n",
          f);
    fclose(f);
    snprintf(json_path, sizeof json_path, "%s/b.json", dir);
    snprintf(html_path, sizeof html_path, "%s/b.html", dir);
    char *argv[] = {"colo-loadtest", "--baseline", "separate", "--config", cfg, "--server", server,
                    "--concurrency", "2", "--requests", "12", "--max-tokens", "4", "--stream",
                    "--device-hourly-cost", "2.5", "--json", json_path, "--html", html_path, NULL};
    fflush(stdout);
    assert_int_equal(loadtest_main((int)(sizeof argv / sizeof *argv) - 1, argv), 0);
    /* every server was stopped and reaped */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);

    json_t *root = json_load_file(json_path, 0, NULL);
    assert_non_null(root);
    json_t *phases = json_object_get(root, "phases");
    assert_int_equal(json_array_size(phases), 6);
    const char *want[] = {"separate-individual", "separate-individual", "separate-concurrent", "individual",
                          "individual", "concurrent"};
    for (size_t i = 0; i < 6; i++) {
        json_t *p = json_array_get(phases, i);
        assert_string_equal(json_string_value(json_object_get(p, "name")), want[i]);
        json_t *models = json_object_get(p, "models");
        for (size_t k = 0; k < json_array_size(models); k++) {
            json_t *m = json_array_get(models, k);
            assert_int_equal(json_integer_value(json_object_get(m, "completed")), 12);
            assert_int_equal(json_integer_value(json_object_get(m, "failed")), 0);
            assert_true(json_real_value(json_object_get(m, "mean_ttft_ms")) > 0);
            /* the config's sla: is goodput's default */
            assert_true(json_real_value(json_object_get(json_object_get(m, "goodput_slo"), "e2e_ms")) == 20000);
        }
    }
    json_t *sep = json_object_get(root, "baseline_separate"), *colo = json_object_get(root, "comparison");
    assert_int_equal(json_array_size(json_object_get(sep, "models")), 2);
    assert_int_equal(json_array_size(json_object_get(colo, "models")), 2);
    assert_true(json_real_value(json_object_get(sep, "stp")) > 0);
    assert_true(json_real_value(json_object_get(colo, "stp")) > 0);
    json_t *setups = json_object_get(json_object_get(root, "cost"), "setups");
    assert_int_equal(json_array_size(setups), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(setups, 1), "setup")),
                        "separate servers, shared");
    assert_true(json_real_value(json_object_get(json_array_get(setups, 0), "usd_per_hour")) == 5.0);
    json_decref(root);
    char *html = slurp(html_path);
    assert_non_null(strstr(html, "Separate servers vs colo"));
    assert_non_null(strstr(html, "time to first token CDF"));
    assert_non_null(strstr(html, "time per output token CDF"));
    assert_non_null(strstr(html, "<h2>Cost</h2>"));
    assert_null(strstr(html, "<script"));
}

/* The trace scenario with --config: colo-loadtest starts colo-server,
 * samples its memory and sees a model with a short keep-alive sleep and
 * wake: its request after a long idle is cold, the server's wake counted. */
static void test_trace_started_server(void **state)
{
    (void)state;
    const char *bin = getenv("COLO_BINARY_DIR") ? getenv("COLO_BINARY_DIR") : COLO_BINARY_DIR;
    char server[512], mkmodel[512], model[128], cfg[128], trace[128], json_path[128];
    snprintf(server, sizeof server, "%s/colo-server", bin);
    snprintf(mkmodel, sizeof mkmodel, "%s/colo-mkmodel", bin);
    if (access(server, X_OK) != 0 || access(mkmodel, X_OK) != 0) {
        printf("colo-server or colo-mkmodel not built in %s\n", bin);
        skip();
    }
    snprintf(model, sizeof model, "%s/t.gguf", dir);
    const char *mk[] = {mkmodel, "--out", model, "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                        "--ffn", "128", "--vocab", "512", "--ctx", "256", NULL};
    assert_true(run_prog(mk));
    snprintf(cfg, sizeof cfg, "%s/trace.yaml", dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("server: { listen: \"127.0.0.1:8080\", device: cpu, threads: 1 }\n"
          "models:\n"
          "  - { name: a, kind: llama, path: t.gguf, memory_fraction: 0.01 }\n"
          "  - { name: b, kind: llama, path: t.gguf, memory_fraction: 0.01, keep_alive_ms: 200 }\n",
          f);
    assert_int_equal(fclose(f), 0);
    /* b, then a while b idles past its keep-alive, then b again */
    snprintf(trace, sizeof trace, "%s/trace.jsonl", dir);
    f = fopen(trace, "w");
    assert_non_null(f);
    fputs("{\"timestamp\": 0, \"model\": \"b\", \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
          "{\"timestamp\": 0.2, \"model\": \"a\", \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
          "{\"timestamp\": 0.4, \"model\": \"a\", \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
          "{\"timestamp\": 1.8, \"model\": \"b\", \"prompt_tokens\": 4, \"output_tokens\": 2}\n",
          f);
    assert_int_equal(fclose(f), 0);
    snprintf(json_path, sizeof json_path, "%s/trace.json", dir);
    char *argv[] = {"colo-loadtest", "--scenario", "trace", "--config", cfg, "--server", server, "--trace", trace,
                    "--stream", "--poll-interval", "0.05", "--goodput", "ttft:30000", "--quiet", "--json", json_path,
                    NULL};
    fflush(stdout);
    assert_int_equal(loadtest_main((int)(sizeof argv / sizeof *argv) - 1, argv), 0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* the server was stopped and reaped */
    json_t *root = json_load_file(json_path, 0, NULL);
    assert_non_null(root);
    json_t *tr = json_object_get(root, "trace");
    assert_true(json_integer_value(json_object_get(tr, "server_pid")) > 0);
    assert_true(json_integer_value(json_object_get(tr, "peak_rss_bytes")) > 1000000);
    assert_true(json_integer_value(json_object_get(tr, "vm_hwm_bytes")) >=
                json_integer_value(json_object_get(tr, "peak_rss_bytes")));
    json_t *a = json_array_get(json_object_get(tr, "models"), 0), *b = json_array_get(json_object_get(tr, "models"), 1);
    assert_string_equal(json_string_value(json_object_get(a, "model")), "a");
    assert_int_equal(json_integer_value(json_object_get(a, "warm")), 2);
    assert_int_equal(json_integer_value(json_object_get(a, "cold")), 0);
    assert_int_equal(json_integer_value(json_object_get(b, "scheduled")), 2);
    assert_true(json_integer_value(json_object_get(b, "cold")) >= 1);
    assert_true(json_integer_value(json_object_get(b, "wakes")) >= 1);
    assert_true(json_integer_value(json_object_get(b, "unloads_seen")) >= 1);
    assert_true(json_real_value(json_object_get(json_object_get(tr, "overall"), "attainment_pct")) == 100.0);
    json_decref(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_derive),
        cmocka_unit_test(test_baseline_end_to_end),
        cmocka_unit_test(test_trace_started_server),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
