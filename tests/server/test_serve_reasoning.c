/* A reasoning model's thinking through colo-server: a synthetic model with
 * DeepSeek-R1's chat template (which opens <think>) never writes
 * </think>, so all it writes is reasoning:
 * - chat: message.content is empty and reasoning_content holds the text;
 *   streamed, the deltas are reasoning_content;
 * - Anthropic: a thinking block, then an empty text block, whole and
 *   streamed (thinking_delta events, the text block at index 1);
 * - /infer with messages: "reasoning"; a raw prompt (completions) is not
 *   split: its text is the whole output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "server_fixture.h"

static srv_fixture fx;

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&fx) || !srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 256))
        return -1;
    return srv_start_logged(&fx, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
                                 "models:\n"
                                 "  - { name: r1, kind: llama, path: m.gguf, memory_fraction: 0.05,"
                                 " chat_template: deepseek-r1 }\n")
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

#define ASK "\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}],\"max_tokens\":8,\"temperature\":0"

static void test_chat(void **state)
{
    (void)state;
    json_t *j = srv_post_json(&fx, "/v1/chat/completions", "{\"model\":\"r1\"," ASK "}");
    assert_non_null(j);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "");
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    assert_non_null(reasoning);
    assert_true(strlen(reasoning) > 0);
    char *whole = strdup(reasoning);
    json_decref(j);
    /* streamed: the same text, as reasoning_content deltas */
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/chat/completions", "{\"model\":\"r1\"," ASK ",\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    char got[4096] = "";
    for (const char *p = r.body; (p = strstr(p, "data: {")); p++) {
        json_t *ev = json_loads(p + 6, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, NULL);
        json_t *delta = json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta");
        const char *rc = json_string_value(json_object_get(delta, "reasoning_content"));
        const char *content = json_string_value(json_object_get(delta, "content"));
        if (rc)
            strncat(got, rc, sizeof got - strlen(got) - 1);
        assert_true(!content || !content[0]); /* no answer text */
        json_decref(ev);
    }
    srv_resp_free(&r);
    assert_string_equal(got, whole);
    free(whole);
    /* a raw prompt is not a chat: no split */
    j = srv_post_json(&fx, "/v1/completions", "{\"model\":\"r1\",\"prompt\":\"x\",\"max_tokens\":4,\"temperature\":0}");
    assert_non_null(j);
    assert_true(strlen(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"))) > 0);
    json_decref(j);
    j = srv_post_json(&fx, "/v1/models/r1/infer", "{" ASK "}");
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "text")), "");
    assert_true(strlen(json_string_value(json_object_get(j, "reasoning"))) > 0);
    json_decref(j);
}

static void test_anthropic(void **state)
{
    (void)state;
    json_t *j = srv_post_json(&fx, "/v1/messages", "{\"model\":\"r1\"," ASK "}");
    assert_non_null(j);
    json_t *content = json_object_get(j, "content");
    assert_int_equal(json_array_size(content), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "type")), "thinking");
    assert_true(strlen(json_string_value(json_object_get(json_array_get(content, 0), "thinking"))) > 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 1), "type")), "text");
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 1), "text")), "");
    json_decref(j);
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/messages", "{\"model\":\"r1\"," ASK ",\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    const char *start0 = strstr(r.body, "\"content_block\":{\"type\":\"thinking\"");
    const char *delta = strstr(r.body, "\"type\":\"thinking_delta\"");
    const char *text1 = strstr(r.body, "\"index\":1,\"content_block\":{\"type\":\"text\"");
    const char *stop = strstr(r.body, "event: message_stop");
    assert_non_null(start0);
    assert_non_null(delta);
    assert_non_null(text1);
    assert_non_null(stop);
    assert_true(start0 < delta && delta < text1 && text1 < stop);
    assert_null(strstr(r.body, "\"type\":\"text_delta\"")); /* no answer text */
    srv_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_anthropic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
