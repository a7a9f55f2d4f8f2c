/* OpenAI's Responses API against a real colo-server (a synthetic model):
 * the response object repeats the request's instructions, tools,
 * tool_choice and text.format as they were sent (and text.format
 * {"type": "text"} when none was), and a refused body's message names the
 * Responses field (text.format, input), also when the model refuses it
 * after decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static srv_fixture F;

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&F) || !srv_mkmodel(&F, "m.gguf", 2, 64, 512, 1024))
        return -1;
    return srv_start_logged(&F, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
                                "models:\n"
                                "  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n")
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&F);
}

static json_t *respond(const char *body, int *status)
{
    srv_resp r;
    assert_true(srv_http(&F, "POST", "/v1/responses", body, &r));
    *status = r.status;
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    return j;
}

/* Whether the response's field key is the JSON text want. */
static void expect_field(json_t *resp, const char *key, const char *want)
{
    json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
    assert_non_null(w);
    json_t *got = json_object_get(resp, key);
    if (!json_equal(got, w)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        fail_msg("%s: %s, not %s", key, g ? g : "(none)", want);
    }
    json_decref(w);
}

static void test_echoes_what_was_sent(void **state)
{
    (void)state;
    const char *tools = "[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"the weather\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                        "\"required\":[\"city\"]}}]";
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"input\":\"weather in Paris?\",\"instructions\":\"be brief\",\"tools\":%s,"
             "\"tool_choice\":\"required\",\"max_output_tokens\":64,\"temperature\":0}",
             tools);
    int st;
    json_t *j = respond(body, &st);
    if (st != 200)
        fail_msg("%d %s", st, json_dumps(j, 0));
    expect_field(j, "instructions", "\"be brief\"");
    expect_field(j, "tools", tools);
    expect_field(j, "tool_choice", "\"required\"");
    expect_field(j, "text", "{\"format\":{\"type\":\"text\"}}"); /* none was sent: tools do not make one */
    json_decref(j);
    const char *format = "{\"format\":{\"type\":\"json_schema\",\"name\":\"city\",\"strict\":true,"
                         "\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}}}}}";
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"input\":\"a city\",\"text\":%s,\"tool_choice\":{\"type\":\"function\","
             "\"name\":\"get_weather\"},\"tools\":%s,\"max_output_tokens\":8}",
             format, tools);
    j = respond(body, &st);
    if (st != 200)
        fail_msg("%d %s", st, json_dumps(j, 0));
    expect_field(j, "text", format);
    expect_field(j, "tool_choice", "{\"type\":\"function\",\"name\":\"get_weather\"}");
    expect_field(j, "instructions", "null");
    json_decref(j);
    /* streamed: the same object in response.created */
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"be brief\",\"max_output_tokens\":4,"
             "\"stream\":true}");
    srv_resp r;
    assert_true(srv_http(&F, "POST", "/v1/responses", body, &r));
    assert_int_equal(r.status, 200);
    char *names[64] = {0}, *data[64] = {0};
    int n = srv_sse(r.body, names, data, 64);
    assert_true(n > 2);
    assert_string_equal(names[0], "response.created");
    json_t *ev = json_loads(data[0], 0, NULL);
    expect_field(json_object_get(ev, "response"), "instructions", "\"be brief\"");
    json_decref(ev);
    for (int i = 0; i < n; i++)
        free(names[i]), free(data[i]);
    srv_resp_free(&r);
}

static void test_errors_name_the_responses_fields(void **state)
{
    (void)state;
    int st;
    /* refused by the model after decoding */
    json_t *j = respond("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\","
                        "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\","
                        "\"patternProperties\":{}}}}}}}",
                        &st);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_int_equal(st, 400);
    if (!msg || !strstr(msg, "text.format") || strstr(msg, "response_format"))
        fail_msg("%s", msg ? msg : "(no message)");
    json_decref(j);
    /* refused while decoding */
    j = respond("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", &st);
    msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_int_equal(st, 400);
    if (!msg || !strstr(msg, "text.format") || strstr(msg, "response_format"))
        fail_msg("%s", msg ? msg : "(no message)");
    json_decref(j);
    /* more calls in a row than a turn may hold */
    size_t cap = 64 * 1024, o = 0;
    char *body = malloc(cap);
    assert_non_null(body);
    o += (size_t)snprintf(body + o, cap - o, "{\"model\":\"m\",\"input\":[");
    for (int i = 0; i < 200; i++)
        o += (size_t)snprintf(body + o, cap - o,
                              "%s{\"type\":\"function_call\",\"call_id\":\"c%d\",\"name\":\"f\",\"arguments\":\"{}\"}",
                              i ? "," : "", i);
    snprintf(body + o, cap - o, "]}");
    j = respond(body, &st);
    free(body);
    msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_int_equal(st, 400);
    if (!msg || !strstr(msg, "function_call") || strstr(msg, "tool_calls"))
        fail_msg("%s", msg ? msg : "(no message)");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echoes_what_was_sent),
        cmocka_unit_test(test_errors_name_the_responses_fields),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
