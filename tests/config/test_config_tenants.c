/* The tenants:, usage: and pricing: sections: a full hierarchy, defaults,
 * and errors with their file:line:column (a model that does not exist, a
 * bad hash, duplicates, unknown keys). */
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

#define H1 "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define H2 "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"

#define MODELS                                                                                                        \
    "models:\n"                                                                                                       \
    "  - { name: chat, kind: llama, path: a.gguf, memory_fraction: 0.3 }\n"                                           \
    "  - { name: emb, kind: bert, path: b, memory_fraction: 0.1 }\n"

static int parse(const char *y, char *err, size_t n) { return colo_config_parse(y, strlen(y), "dir/t.yaml", &cfg, err, n); }

static void test_full_hierarchy(void **state)
{
    (void)state;
    char err[512] = "";
    const char *y = MODELS "tenants:\n"
                           "  - organization: acme\n"
                           "    quotas: { requests_per_minute: 600, tokens_per_minute: 200000, concurrent: 32 }\n"
                           "    weight: 3\n"
                           "    projects:\n"
                           "      - name: search\n"
                           "        weight: 2\n"
                           "        models: [chat, emb]\n"
                           "        max_priority: normal\n"
                           "        quotas: { requests_per_minute: 60, tokens_per_minute: 20000, concurrent: 4 }\n"
                           "        keys: [ { name: ci, sha256: \"" H1 "\" },\n"
                           "                { name: dev, sha256: \"" H2 "\", quotas: { concurrent: 0 } } ]\n"
                           "  - organization: globex\n"
                           "    projects: [ { name: bi, keys: [] } ]\n"
                           "usage: { db: /var/lib/colo/usage.sqlite }\n"
                           "pricing:\n"
                           "  currency: EUR\n"
                           "  models: { chat: { per_device_hour: 2.5 }, emb: { per_million_tokens: 0.02 } }\n";
    assert_int_equal(parse(y, err, sizeof err), COLO_OK);
    const colo_tenants_cfg *t = &cfg.tenants;
    assert_int_equal(t->n_orgs, 2);
    assert_int_equal(t->n_projects, 2);
    assert_int_equal(t->n_keys, 2);
    assert_string_equal(t->orgs[0].l.name, "acme");
    assert_int_equal(t->orgs[0].l.quotas.requests_per_minute, 600);
    assert_int_equal(t->orgs[0].l.quotas.tokens_per_minute, 200000);
    assert_int_equal(t->orgs[0].l.quotas.concurrent, 32);
    assert_true(t->orgs[0].l.weight == 3);
    assert_string_equal(t->projects[0].l.name, "search");
    assert_int_equal(t->projects[0].org, 0);
    assert_int_equal(t->projects[0].l.n_models, 2);
    assert_string_equal(t->projects[0].l.models[1], "emb");
    assert_int_equal(t->projects[0].l.max_priority, COLO_PRIO_NORMAL);
    assert_int_equal(t->projects[1].org, 1);
    assert_int_equal(t->projects[1].l.quotas.requests_per_minute, -1); /* unset: no limit */
    assert_true(t->projects[1].l.weight == 1);
    assert_int_equal(t->projects[1].l.max_priority, COLO_PRIO_HIGH);
    assert_int_equal(t->keys[0].project, 0);
    assert_int_equal(t->keys[0].sha256[0], 0x9f);
    assert_int_equal(t->keys[0].sha256[31], 0x08);
    assert_int_equal(t->keys[1].l.quotas.concurrent, 0); /* 0 is a quota: nothing */
    assert_string_equal(cfg.usage.db, "/var/lib/colo/usage.sqlite");
    assert_true(cfg.usage.enabled);
    assert_string_equal(cfg.pricing.currency, "EUR");
    assert_int_equal(cfg.pricing.n_models, 2);
    assert_true(cfg.pricing.models[0].per_device_hour == 2.5);
    assert_true(cfg.pricing.models[1].per_million_tokens == 0.02);
}

static void test_defaults(void **state)
{
    (void)state;
    char err[512] = "";
    /* runtime state: never beside the config (often in a source tree) while a state folder is known */
    setenv("XDG_STATE_HOME", "/state", 1);
    setenv("HOME", "/home/u", 1);
    assert_int_equal(parse(MODELS, err, sizeof err), COLO_OK);
    assert_int_equal(cfg.tenants.n_orgs, 0);
    assert_string_equal(cfg.usage.db, "/state/colo/usage.sqlite");
    setenv("XDG_STATE_HOME", "relative", 1); /* the XDG specification: relative paths are ignored */
    assert_int_equal(parse(MODELS, err, sizeof err), COLO_OK);
    assert_string_equal(cfg.usage.db, "/home/u/.local/state/colo/usage.sqlite");
    unsetenv("XDG_STATE_HOME");
    assert_int_equal(parse(MODELS, err, sizeof err), COLO_OK);
    assert_string_equal(cfg.usage.db, "/home/u/.local/state/colo/usage.sqlite");
    unsetenv("HOME");
    assert_int_equal(parse(MODELS, err, sizeof err), COLO_OK);
    assert_string_equal(cfg.usage.db, "dir/usage.sqlite"); /* beside the config, where no state folder is known */
    assert_string_equal(cfg.pricing.currency, "USD");
    assert_int_equal(parse(MODELS "usage: { db: u.db, enabled: false }\n", err, sizeof err), COLO_OK);
    assert_string_equal(cfg.usage.db, "dir/u.db");
    assert_false(cfg.usage.enabled);
}

static void expect_error(const char *y, const char *where)
{
    char err[512] = "";
    assert_int_equal(parse(y, err, sizeof err), COLO_EINVAL);
    if (!strstr(err, where))
        fail_msg("expected '%s' in: %s", where, err);
}

static void test_errors(void **state)
{
    (void)state;
    /* a model that is not served, listed before the models: line 4, column 29 */
    expect_error("tenants:\n"
                 "  - organization: acme\n"
                 "    projects:\n"
                 "      - { name: p, models: [nosuch], keys: [] }\n" MODELS,
                 "dir/t.yaml:4:29: tenants.models: 'nosuch' (of p) is not a model (or adapter) in models:");
    expect_error(MODELS "tenants:\n  - organization: acme\n    models: [chat, gone]\n",
                 "dir/t.yaml:6:20: tenants.models: 'gone' (of acme)");
    expect_error(MODELS "tenants:\n  - organization: acme\n    projects: [ { name: p, keys: [ { name: k, sha256: abc } ] } ]\n",
                 "dir/t.yaml:6:55: tenants[0].projects[0].keys[0].sha256: expected 64 hex digits");
    expect_error(MODELS "tenants:\n  - organization: acme\n    projects: [ { name: p, keys: [ { name: k } ] } ]\n",
                 "dir/t.yaml:6:36: tenants[0].projects[0].keys[0]: sha256: is required");
    expect_error(MODELS "tenants:\n  - organization: acme\n    projects:\n"
                        "      - { name: p, keys: [ { name: k, sha256: \"" H1 "\" } ] }\n"
                        "      - { name: q, keys: [ { name: k, sha256: \"" H1 "\" } ] }\n",
                 "dir/t.yaml:8:28: tenants[0].projects[1].keys[0]: the same key is already given at line 7");
    expect_error(MODELS "tenants:\n  - organization: acme\n  - organization: acme\n",
                 "dir/t.yaml:6:5: tenants[1]: organization 'acme' is already used at line 5");
    expect_error(MODELS "tenants:\n  - organization: default\n", "dir/t.yaml:5:19: tenants[0].organization: 'default'");
    expect_error(MODELS "tenants:\n  - organization: a\n    quotas: { requests_per_minute: -1 }\n",
                 "dir/t.yaml:6:36: tenants[0].quotas.requests_per_minute: expected a count");
    expect_error(MODELS "tenants:\n  - organization: a\n    quotas: { burst: 3 }\n",
                 "dir/t.yaml:6:15: tenants[0].quotas.burst: unknown key");
    expect_error(MODELS "tenants:\n  - organization: a\n    weight: 0\n", "dir/t.yaml:6:13: tenants[0].weight: 0 is outside");
    expect_error(MODELS "tenants:\n  - organization: a\n    models: []\n", "tenants[0].models: an empty list allows no model");
    expect_error(MODELS "tenants:\n  - organization: a\n    max_priority: urgent\n",
                 "dir/t.yaml:6:19: tenants[0].max_priority: expected one of low, normal, high");
    expect_error(MODELS "tenants:\n  - projects: []\n", "dir/t.yaml:5:5: tenants[0]: organization: is required");
    expect_error(MODELS "usage: { path: x }\n", "dir/t.yaml:4:10: usage.path: unknown key");
    expect_error(MODELS "pricing: { models: { chat: { per_hour: 1 } } }\n",
                 "dir/t.yaml:4:30: pricing.models.chat.per_hour: unknown key");
}

static void test_quota_unlimited(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(parse(MODELS "tenants:\n  - organization: a\n    quotas: { requests_per_minute: unlimited, concurrent: 0 }\n",
                           err, sizeof err),
                     COLO_OK);
    assert_int_equal(cfg.tenants.orgs[0].l.quotas.requests_per_minute, -1);
    assert_int_equal(cfg.tenants.orgs[0].l.quotas.concurrent, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_hierarchy),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_quota_unlimited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
