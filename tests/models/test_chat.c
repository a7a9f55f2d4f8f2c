/* Chat templates (models/sample/chat.h): the family recognised in real templates
 * and the prompt colo renders, byte for byte against jinja2's rendering of
 * the same templates (tests/data/chat, README there), overrides, errors,
 * and the stop tokens a real tokenizer gives. Templates come from the model
 * cache (scripts/fetch-models.sh); each is skipped when it is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sample/chat.h"
#include "models/format/model_cache.h"
#include "models/tokenizer/tokenizer.h"

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* The template's text from the model cache: a .jinja file, or a GGUF's
 * tokenizer.chat_template. NULL when absent. */
static char *template_text(const char *name)
{
    char file[256], path[4096], err[512];
    size_t nl = strlen(name);
    if (nl > 5 && !strcmp(name + nl - 5, ".gguf")) {
        if (!colo_model_cache_path(name, path, sizeof path))
            return NULL;
        colo_gguf *g = colo_gguf_open(path, err, sizeof err);
        assert_non_null(g);
        colo_tokenizer *t = colo_tokenizer_from_gguf(g, err, sizeof err);
        assert_non_null(t);
        const char *j = colo_tokenizer_chat_template(t);
        char *s = j ? strdup(j) : NULL;
        colo_tokenizer_free(t);
        colo_gguf_close(g);
        return s;
    }
    snprintf(file, sizeof file, "llama-vocab/templates/%s", name);
    if (!colo_model_cache_path(file, path, sizeof path))
        return NULL;
    return read_file(path);
}

static void test_real_templates(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *doc = json_load_file(COLO_SOURCE_DIR "/tests/data/chat/templates.json", 0, &jerr);
    if (!doc)
        fail_msg("templates.json: %s", jerr.text);
    json_t *tpls = json_object_get(doc, "templates"), *e;
    size_t i;
    int tested = 0, rendered = 0, wrong = 0;
    json_array_foreach(tpls, i, e) {
        const char *name = json_string_value(json_object_get(e, "template"));
        const char *family = json_string_value(json_object_get(e, "family"));
        char *j = template_text(name);
        if (!j)
            continue;
        tested++;
        colo_chat_template t;
        char err[512];
        if (colo_chat_template_from_text(&t, j, NULL, json_string_value(json_object_get(e, "bos")),
                                         json_string_value(json_object_get(e, "eos")), err, sizeof err) != COLO_OK)
            fail_msg("%s: %s", name, err);
        if (strcmp(colo_chat_format_name(t.format), family))
            fail_msg("%s: recognised as %s, not %s", name, colo_chat_format_name(t.format), family);
        json_t *cases = json_object_get(e, "cases"), *c;
        size_t k;
        json_array_foreach(cases, k, c) {
            const char *want = json_string_value(json_object_get(c, "prompt"));
            if (!strcmp(want, "error"))
                continue; /* the template refuses the conversation */
            json_t *msgs = json_object_get(c, "messages");
            colo_chat_msg m[8];
            int n = (int)json_array_size(msgs);
            assert_true(n <= 8);
            for (int q = 0; q < n; q++) {
                json_t *mq = json_array_get(msgs, (size_t)q);
                m[q] = (colo_chat_msg){json_string_value(json_object_get(mq, "role")),
                                       json_string_value(json_object_get(mq, "content"))};
            }
            char *got = colo_chat_prompt(&t, m, n);
            assert_non_null(got);
            rendered++;
            if (strcmp(got, want)) {
                wrong++;
                fprintf(stderr, "%s, conversation %zu:\n  colo:  \"%s\"\n  jinja: \"%s\"\n", name, k, got, want);
            }
            free(got);
        }
        free(j);
    }
    json_decref(doc);
    fprintf(stderr, "%d templates, %d prompts, %d differ from jinja2\n", tested, rendered, wrong);
    if (!tested)
        skip();
    assert_int_equal(wrong, 0);
}

/* Markers: each family from a short template; unknown ones refused. */
static void test_detection_and_overrides(void **state)
{
    (void)state;
    static const struct {
        const char *jinja, *family;
    } cases[] = {
        {"{{'<|im_start|>' + message['role']}}", "chatml"},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", "llama3"},
        {"{{ '<start_of_turn>' + role }}", "gemma"},
        {"{{'<|user|>\\n' + m + '<|end|>\\n'}}{{'<|assistant|>\\n'}}", "phi3"},
        {"{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}", "mistral-v1"},
        {"{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}", "mistral-v3"},
        {"{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", "mistral-v3-tekken"},
        {"{{'<｜User｜>' + c}}{{'<｜Assistant｜>'}}", "deepseek-r1"},
    };
    char err[512];
    colo_chat_template t;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(colo_chat_template_from_text(&t, cases[i].jinja, NULL, "<s>", "</s>", err, sizeof err),
                         COLO_OK);
        assert_string_equal(colo_chat_format_name(t.format), cases[i].family);
    }
    /* Llama 2's <<SYS>> and unknown templates are refused, naming the way out */
    const char *unknown[] = {"{{ '[INST] <<SYS>>\\n' }}", "{% for m in messages %}{{ m.content }}{% endfor %}"};
    for (int i = 0; i < 2; i++) {
        err[0] = 0;
        assert_int_equal(colo_chat_template_from_text(&t, unknown[i], NULL, "", "", err, sizeof err), COLO_EINVAL);
        assert_non_null(strstr(err, "chat_template:"));
    }
    /* an override wins over the file; an unknown override names itself */
    assert_int_equal(colo_chat_template_from_text(&t, unknown[1], "gemma", "<bos>", "<eos>", err, sizeof err), COLO_OK);
    assert_int_equal(t.format, COLO_CHAT_GEMMA);
    colo_chat_msg m[] = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
    char *p = colo_chat_prompt(&t, m, 4);
    assert_string_equal(p, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello"
                           "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    free(p);
    assert_int_equal(colo_chat_template_from_text(&t, NULL, "vicuna", "", "", err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "vicuna"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_true(colo_chat_format_known(cases[i].family));
    assert_true(colo_chat_format_known("mistral"));
    assert_false(colo_chat_format_known("vicuna"));
    /* no template and no override: no chat, no error */
    assert_int_equal(colo_chat_template_from_text(&t, NULL, NULL, "", "", err, sizeof err), COLO_OK);
    assert_int_equal(t.format, COLO_CHAT_NONE);
    assert_null(colo_chat_prompt(&t, m, 1));
}

/* A real model's template and stop tokens: SmolLM2 (ChatML, with its own
 * default system message). */
static void test_smollm2(void **state)
{
    (void)state;
    char path[4096], err[512];
    if (!colo_model_cache_path("SmolLM2-135M-Instruct.Q4_1.gguf", path, sizeof path))
        skip();
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    assert_non_null(g);
    colo_tokenizer *tok = colo_tokenizer_from_gguf(g, err, sizeof err);
    assert_non_null(tok);
    colo_chat_template t;
    assert_int_equal(colo_chat_template_init(&t, tok, NULL, err, sizeof err), COLO_OK);
    assert_int_equal(t.format, COLO_CHAT_CHATML);
    assert_string_equal(t.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    bool has_end = false, has_eos = false;
    for (int i = 0; i < t.n_stop_ids; i++) {
        has_end |= t.stop_ids[i] == colo_tokenizer_find(tok, "<|im_end|>");
        has_eos |= t.stop_ids[i] == colo_tokenizer_eos(tok);
    }
    assert_true(has_end && has_eos);
    /* the prompt encodes with its special tokens, and no BOS (the file adds none) */
    colo_chat_msg m = {"user", "Hi"};
    char *p = colo_chat_prompt(&t, &m, 1);
    int32_t *ids;
    int n;
    assert_int_equal(colo_tokenizer_encode(tok, p, strlen(p), true, true, &ids, &n), COLO_OK);
    assert_int_equal(ids[0], colo_tokenizer_find(tok, "<|im_start|>"));
    assert_int_equal(ids[n - 1], colo_tokenizer_find(tok, "\xc4\x8a")); /* "\n" */
    free(ids);
    free(p);
    /* an override replaces the file's template */
    assert_int_equal(colo_chat_template_init(&t, tok, "phi3", err, sizeof err), COLO_OK);
    assert_int_equal(t.format, COLO_CHAT_PHI3);
    colo_tokenizer_free(tok);
    colo_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
        cmocka_unit_test(test_detection_and_overrides),
        cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
