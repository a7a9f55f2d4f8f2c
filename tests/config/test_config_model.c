/* One model's entry on its own (colo_config_parse_model: the body of
 * POST /admin/models, JSON being YAML) and the lifecycle keys: the same
 * values and the same messages, with the place, as in a config file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static colo_status parse(const char *t, colo_model_cfg *m, char *err, size_t n)
{
    return colo_config_parse_model(t, strlen(t), "body", "/models", m, err, n);
}

static void test_json_entry(void **state)
{
    (void)state;
    colo_model_cfg m;
    char err[512] = "";
    const char *j = "{\"name\":\"chat-2\",\"kind\":\"llama\",\"path\":\"a/b.gguf\",\"memory_fraction\":0.25,"
                    "\"memory_max_fraction\":0.5,\"priority\":\"low\",\"pinned\":true,\"keep_alive_ms\":1500,"
                    "\"max_seq_len\":512,\"kv_cache\":{\"dtype\":\"f32\",\"block_size\":32},"
                    "\"batching\":{\"max_batch_size\":4,\"max_queue\":9},\"sla\":{\"p99_ms\":800}}";
    assert_int_equal(parse(j, &m, err, sizeof err), COLO_OK);
    assert_string_equal(m.name, "chat-2");
    assert_string_equal(m.kind, "llama");
    assert_string_equal(m.path, "/models/a/b.gguf");
    assert_true(m.memory_fraction == 0.25 && m.memory_max_fraction == 0.5);
    assert_int_equal(m.priority, COLO_PRIO_LOW);
    assert_true(m.pinned);
    assert_int_equal(m.keep_alive_ms, 1500);
    assert_int_equal(m.max_seq_len, 512);
    assert_int_equal(m.kv_dtype, COLO_F32);
    assert_int_equal(m.kv_block_size, 32);
    assert_int_equal(m.batching.max_batch_size, 4);
    assert_int_equal(m.batching.max_queue, 9);
    assert_true(m.sla.p99_ms == 800);
    /* defaults as in a file */
    assert_int_equal(parse("{\"name\":\"e\",\"kind\":\"bert\",\"path\":\"/abs\",\"memory_fraction\":1}", &m, err,
                           sizeof err),
                     COLO_OK);
    assert_false(m.pinned);
    assert_int_equal(m.priority, COLO_PRIO_NORMAL);
    assert_string_equal(m.path, "/abs");
    assert_int_equal(m.batching.max_batch_size, 32);
    assert_int_equal(m.batching.queue_timeout_ms, 30000);
    assert_int_equal(m.schema_max_length, 256);
    assert_int_equal(m.schema_max_items, 16);
    /* the bounds structured output leaves open; 0: none */
    assert_int_equal(parse("{\"name\":\"s\",\"kind\":\"llama\",\"path\":\"/a\",\"memory_fraction\":1,"
                           "\"structured_output\":{\"max_string_length\":64,\"max_array_items\":0}}",
                           &m, err, sizeof err),
                     COLO_OK);
    assert_int_equal(m.schema_max_length, 64);
    assert_int_equal(m.schema_max_items, 0);
    /* YAML too, and the same value in a whole file */
    assert_int_equal(parse("name: y\nkind: llama\npath: x.gguf\nmemory_fraction: 0.1\npinned: false\n", &m, err,
                           sizeof err),
                     COLO_OK);
    static colo_config c;
    const char *y = "models:\n  - {name: a, kind: llama, path: /a.gguf, memory_fraction: 0.2, pinned: true}\n"
                    "  - {name: b, kind: llama, path: /a.gguf, memory_fraction: 0.2}\n";
    assert_int_equal(colo_config_parse(y, strlen(y), "t.yaml", &c, err, sizeof err), COLO_OK);
    assert_true(c.models[0].pinned);
    assert_false(c.models[1].pinned);
}

static void expect(const char *t, const char *where, const char *what)
{
    colo_model_cfg m;
    char err[512] = "";
    assert_int_not_equal(parse(t, &m, err, sizeof err), COLO_OK);
    if (!strstr(err, where) || !strstr(err, what))
        fail_msg("for %s: got '%s', want '%s' and '%s'", t, err, where, what);
}

static void test_errors(void **state)
{
    (void)state;
    /* a name is a string that starts with a letter or a digit */
    expect("{\"name\":null,\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model.name:",
           "expected a string, got null");
    expect("{\"name\":5,\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model.name:",
           "expected a string, got 5");
    expect("{\"name\":true,\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model.name:",
           "expected a string");
    expect("{\"name\":-1.5e3,\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model.name:",
           "expected a string");
    expect("name: ~\nkind: llama\npath: x\nmemory_fraction: 0.1\n", "model.name:", "expected a string");
    const char *bad[] = {".", "..", "-", "-x", ".hidden", "_"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char t[160];
        snprintf(t, sizeof t, "{\"name\":\"%s\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", bad[i]);
        expect(t, "model.name:", "starts with a letter or a digit");
    }
    colo_model_cfg m;
    char err[512] = "";
    const char *good[] = {"5", "7b", "a..b", "x-1.2_q", "null-model", "nan", "meta-llama/Llama-3.1-8B-Instruct",
                          "llama3:8b"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char t[160];
        snprintf(t, sizeof t, "{\"name\":\"%s\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", good[i]);
        if (parse(t, &m, err, sizeof err) != COLO_OK)
            fail_msg("%s refused: %s", good[i], err);
        assert_string_equal(m.name, good[i]);
    }
    assert_int_equal(parse("name: 7b\nkind: llama\npath: x\nmemory_fraction: 0.1\n", &m, err, sizeof err), COLO_OK);
    assert_false(m.message_control_tokens);
    assert_int_equal(parse("{\"name\":\"c\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,"
                           "\"message_control_tokens\":true}", &m, err, sizeof err),
                     COLO_OK);
    assert_true(m.message_control_tokens);
    assert_false(m.exact_activations);
    assert_int_equal(parse("name: e\nkind: llama\npath: x\nmemory_fraction: 0.1\nexact_activations: true\n", &m, err,
                           sizeof err),
                     COLO_OK);
    assert_true(m.exact_activations);
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"exact_activations\":1}",
           "model.exact_activations:", "expected true or false");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":\"half\"}",
           "body:1:57: model.memory_fraction:", "expected a number, got 'half'");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"colour\":1}",
           "body:1:61: model.colour:", "unknown key");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"pinned\":\"yes\"}",
           "model.pinned:", "expected true or false");
    expect("{\"name\":\"a b\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model.name:",
           "letters, digits");
    /* aliases: names clients write, by the same rules, none taken twice */
    assert_int_equal(parse("{\"name\":\"c\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,"
                           "\"aliases\":[\"org/c:latest\",\"c2\"]}",
                           &m, err, sizeof err),
                     COLO_OK);
    assert_int_equal(m.n_aliases, 2);
    assert_string_equal(m.aliases[0], "org/c:latest");
    assert_true(colo_model_cfg_named(&m, "c2") && colo_model_cfg_named(&m, "c") && !colo_model_cfg_named(&m, "d"));
    expect("{\"name\":\"c\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"aliases\":[\"c\"]}", "model:",
           "aliases: 'c' is the model's name or another alias");
    expect("{\"name\":\"c\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"aliases\":[\"a\\nb\"]}",
           "model.aliases:", "letters, digits");
    expect("{\"name\":\"c\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"aliases\":[\"/c\"]}",
           "model.aliases:", "starts with a letter or a digit");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"memory_fraction\":0.1}", "body:1:1: model:", "path:");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\"}", "body:1:1: model:", "memory_fraction: is required");
    expect("{\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1}", "model:", "name: is required");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.5,\"memory_max_fraction\":0.2}",
           "model.memory_max_fraction:", "below memory_fraction");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"batching\":{\"max_batch_size\":0}}",
           "model.batching.max_batch_size:", "");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,\"name\":\"b\"}", "model:",
           "appears twice");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,"
           "\"structured_output\":{\"max_array_items\":70000}}",
           "model.structured_output.max_array_items:", "outside [0, 65535]");
    expect("{\"name\":\"a\",\"kind\":\"llama\",\"path\":\"x\",\"memory_fraction\":0.1,"
           "\"structured_output\":{\"max_items\":3}}",
           "model.structured_output.max_items:", "unknown key");
    expect("[1,2]", "body:1:1: model:", "expected a mapping");
    expect("{\"name\":", "body:", "syntax error");
    expect("", "body:1:1", "empty");
}

/* speculative: lookup, suffix, its memory, a draft model's name and
 * tokens read; an empty draft name and an encoder refused, with the line */
static void test_speculative(void **state)
{
    (void)state;
    colo_model_cfg m;
    char err[512] = "";
    assert_int_equal(parse("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\n", &m, err, sizeof err), COLO_OK);
    assert_false(m.speculative.lookup);
    assert_int_equal(m.speculative.tokens, 0);
    assert_int_equal(parse("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\n"
                           "speculative: {lookup: true, suffix: false, tokens: 6}\n",
                           &m, err, sizeof err),
                     COLO_OK);
    assert_true(m.speculative.lookup);
    assert_false(m.speculative.suffix);
    assert_int_equal(m.speculative.tokens, 6);
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative: {lookup: true, tokens: 17}\n",
           "body:5:", "model.speculative.tokens:");
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative: {lookup: true, tokens: 0}\n",
           "model.speculative.tokens:", "1");
    assert_int_equal(parse("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\n"
                           "speculative: {suffix: true, suffix_memory_bytes: 1MiB}\n",
                           &m, err, sizeof err),
                     COLO_OK);
    assert_false(m.speculative.lookup);
    assert_true(m.speculative.suffix);
    assert_int_equal(m.speculative.suffix_memory_bytes, 1 << 20);
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\n"
           "speculative: {suffix: true, suffix_memory_bytes: 1000}\n",
           "model.speculative.suffix_memory_bytes:", "65536");
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\n"
           "speculative: {suffix: true, suffix_memory_bytes: 2GiB}\n",
           "body:5:", "more than a suffix cache may take");
    expect("name: e\nkind: bert\npath: x\nmemory_fraction: 0.1\nspeculative: {suffix: true}\n", "body:5:",
           "does not generate text");
    assert_int_equal(parse("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative:\n  draft: small\n"
                           "  tokens: 4\n",
                           &m, err, sizeof err),
                     COLO_OK);
    assert_string_equal(m.speculative.draft, "small");
    assert_int_equal(m.speculative.tokens, 4);
    assert_false(m.speculative.lookup);
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative:\n  draft: ''\n", "body:6:",
           "must not be empty");
    expect("name: e\nkind: bert\npath: x\nmemory_fraction: 0.1\nspeculative: {draft: s}\n", "body:5:",
           "does not generate text");
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative: {lookup: yes please}\n",
           "model.speculative.lookup:", "expected true or false");
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative: {ngram: 3}\n",
           "model.speculative.ngram:", "unknown key");
    expect("name: s\nkind: llama\npath: x\nmemory_fraction: 0.1\nspeculative: true\n", "model.speculative:",
           "expected a mapping");
    expect("name: e\nkind: bert\npath: x\nmemory_fraction: 0.1\nspeculative: {lookup: true}\n", "body:5:",
           "does not generate text");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_entry),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_speculative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
