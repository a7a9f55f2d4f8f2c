/* A model's LoRA adapters in the config (adapters:, adapter_memory_bytes)
 * and one adapter's entry on its own (colo_config_parse_adapter: the body
 * of POST /admin/models/{name}/adapters): values, the base's defaults, and
 * the messages, with the place. */
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

static colo_status parse(const char *yaml, char *err, size_t n)
{
    return colo_config_parse(yaml, strlen(yaml), "/etc/colo/c.yaml", &cfg, err, n);
}

static void expect_error(const char *yaml, const char *want)
{
    char err[512] = "";
    assert_int_equal(parse(yaml, err, sizeof err), COLO_EINVAL);
    if (!strstr(err, want))
        fail_msg("\"%s\" does not say \"%s\"", err, want);
}

static void test_adapters(void **state)
{
    (void)state;
    char err[512] = "";
    const char *y = "models:\n"
                    "  - name: base\n"
                    "    kind: llama\n"
                    "    path: base.gguf\n"
                    "    memory_fraction: 0.5\n"
                    "    priority: low\n"
                    "    adapter_memory_bytes: 1048576\n"
                    "    adapters:\n"
                    "      - { name: support, path: lora/support.gguf, priority: high, sla: { ttft_ms: 500 } }\n"
                    "      - { name: summariser, path: /abs/sum.gguf, scale: 0.5, on_overload: reject }\n"
                    "    sla: { p99_ms: 2000, ttft_ms: 900 }\n"
                    "tenants:\n"
                    "  - organization: acme\n"
                    "    projects: [ { name: p, models: [support], keys: [] } ]\n";
    if (parse(y, err, sizeof err) != COLO_OK)
        fail_msg("%s", err);
    const colo_model_cfg *m = &cfg.models[0];
    assert_int_equal(m->n_adapters, 2);
    assert_int_equal(m->adapter_memory_bytes, 1048576);
    const colo_adapter_cfg *a = &m->adapters[0], *b = &m->adapters[1];
    assert_string_equal(a->name, "support");
    assert_string_equal(a->path, "/etc/colo/lora/support.gguf");
    assert_true(a->scale == 1.0);
    assert_int_equal(a->priority, COLO_PRIO_HIGH);
    assert_true(a->sla.ttft_ms == 500 && a->sla.p99_ms == 0); /* its own SLA, whole */
    assert_string_equal(b->path, "/abs/sum.gguf");
    assert_true(b->scale == 0.5);
    assert_int_equal(b->priority, COLO_PRIO_LOW); /* the base's, though sla: came after adapters: */
    assert_true(b->sla.reject_late && b->sla.p99_ms == 0);
    assert_true(colo_model_cfg_adapter(m, "summariser") == b);
    assert_null(colo_model_cfg_adapter(m, "base"));
}

static void test_adapter_defaults_from_base(void **state)
{
    (void)state;
    char err[512] = "";
    const char *y = "models:\n"
                    "  - name: base\n"
                    "    kind: llama\n"
                    "    path: base.gguf\n"
                    "    memory_fraction: 0.5\n"
                    "    adapters: [ { name: a1, path: a1.gguf } ]\n"
                    "    priority: high\n"
                    "    sla: { ttft_ms: 700 }\n";
    if (parse(y, err, sizeof err) != COLO_OK)
        fail_msg("%s", err);
    const colo_adapter_cfg *a = &cfg.models[0].adapters[0];
    assert_int_equal(a->priority, COLO_PRIO_HIGH);
    assert_true(a->sla.ttft_ms == 700);
    assert_false(a->has_priority || a->has_sla);
}

static void test_adapter_errors(void **state)
{
    (void)state;
#define BASE "models:\n  - name: base\n    kind: llama\n    path: b.gguf\n    memory_fraction: 0.5\n"
    expect_error(BASE "    adapters: [ { path: a.gguf } ]\n", "c.yaml:6:17: models[0].adapters[0]: name: is required");
    expect_error(BASE "    adapters: [ { name: a } ]\n", "path: is required");
    expect_error(BASE "    adapters: [ { name: a, path: a.gguf, rank: 8 } ]\n", "adapters[0].rank: unknown key");
    expect_error(BASE "    adapters: [ { name: 'a b', path: a.gguf } ]\n", "'a b': use letters");
    expect_error(BASE "    adapters: [ { name: a, path: a.gguf, priority: urgent } ]\n", "priority");
    expect_error(BASE "    adapters: [ { name: a, path: a.gguf, scale: big } ]\n", "scale");
    expect_error(BASE "    adapters: { name: a }\n", "expected a list of adapters");
    expect_error(BASE "    adapters: [ { name: base, path: a.gguf } ]\n", "'base' (line 6) is the model's name");
    expect_error(BASE "    aliases: [x]\n    adapters: [ { name: x, path: a.gguf } ]\n", "'x' (line 7) is the model's name");
    expect_error(BASE "    adapters: [ { name: a, path: a.gguf }, { name: a, path: b.gguf } ]\n",
                 "or another adapter's already");
    expect_error(BASE "  - { name: other, kind: llama, path: o.gguf, memory_fraction: 0.1,\n"
                      "      adapters: [ { name: base, path: a.gguf } ] }\n",
                 "model name 'base' is already used at line 2");
    expect_error(BASE "    adapters: [ { name: a, path: a.gguf } ]\n"
                      "  - { name: a, kind: llama, path: o.gguf, memory_fraction: 0.1 }\n",
                 "model name 'a' is already used");
    expect_error("models:\n  - { name: e, kind: bert, path: m, memory_fraction: 0.5,\n"
                 "      adapters: [ { name: a, path: a.gguf } ] }\n",
                 "adapters: only llama models take LoRA adapters");
    char many[4096];
    int o = snprintf(many, sizeof many, BASE "    adapters:\n");
    for (int i = 0; i <= COLO_CFG_MAX_ADAPTERS; i++)
        o += snprintf(many + o, sizeof many - (size_t)o, "      - { name: a%d, path: a.gguf }\n", i);
    expect_error(many, "at most 16 adapters");
#undef BASE
}

static void test_adapter_entry(void **state)
{
    (void)state;
    colo_model_cfg base;
    memset(&base, 0, sizeof base);
    base.priority = COLO_PRIO_LOW;
    base.sla.p99_ms = 1000;
    colo_adapter_cfg a;
    char err[512] = "";
    const char *j = "{\"name\":\"tone\",\"path\":\"t.gguf\",\"scale\":2}";
    assert_int_equal(colo_config_parse_adapter(j, strlen(j), "body", "/srv", &base, &a, err, sizeof err), COLO_OK);
    assert_string_equal(a.name, "tone");
    assert_string_equal(a.path, "/srv/t.gguf");
    assert_true(a.scale == 2.0);
    assert_int_equal(a.priority, COLO_PRIO_LOW);
    assert_true(a.sla.p99_ms == 1000);
    j = "{\"name\":\"tone\",\"path\":\"t.gguf\",\"sla\":{\"ttft_ms\":-1}}";
    assert_int_equal(colo_config_parse_adapter(j, strlen(j), "body", "/srv", &base, &a, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "body:1:"));
    assert_non_null(strstr(err, "ttft_ms"));
    j = "{\"name\":\"tone\"";
    assert_int_equal(colo_config_parse_adapter(j, strlen(j), "body", "/srv", &base, &a, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "syntax error"));
    assert_int_equal(colo_config_parse_adapter("", 0, "body", "/srv", &base, &a, err, sizeof err), COLO_EINVAL);
    j = "[1, 2]";
    assert_int_equal(colo_config_parse_adapter(j, strlen(j), "body", "/srv", &base, &a, err, sizeof err), COLO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adapters),
        cmocka_unit_test(test_adapter_defaults_from_base),
        cmocka_unit_test(test_adapter_errors),
        cmocka_unit_test(test_adapter_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
