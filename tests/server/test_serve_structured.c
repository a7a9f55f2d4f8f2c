/* Structured output and tools end to end on a synthetic model (random
 * weights: whatever it writes, the grammar must hold): response_format
 * json_schema at temperature 0 and 1 gives documents that parse and keep
 * the schema (the schema bounds every string, number and array, so each
 * ends before max_tokens); an unsupported keyword is a 400 naming it;
 * forced tool calls (OpenAI's required / named, Anthropic's tool / any)
 * come back as tool_calls / tool_use whose arguments keep the function's
 * schema, streamed the same as whole; tool results and assistant calls are
 * accepted on the way back; Llama 3 and Mistral templates make and read
 * calls in their own forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "server_fixture.h"

static srv_fixture fx;

static int setup(void **state)
{
    (void)state;
    if (!srv_tmpdir(&fx) || !srv_mkmodel(&fx, "m.gguf", 2, 64, 512, 2048))
        return -1;
    return srv_start_logged(&fx, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2 }\n"
                                 "models:\n  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.1 }\n"
                                 "  - { name: l3, kind: llama, path: m.gguf, memory_fraction: 0.1, chat_template: llama3 }\n"
                                 "  - { name: mi, kind: llama, path: m.gguf, memory_fraction: 0.1, chat_template: mistral-v3 }\n") ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return srv_group_teardown(&fx);
}

static json_t *post(const char *path, const char *body)
{
    json_t *j = srv_post_json(&fx, path, body);
    assert_non_null(j);
    return j;
}

/* Every string, number and array is bounded: a document is at most a few
 * hundred bytes, so it ends well within max_tokens. */
#define PERSON_SCHEMA                                                                                           \
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"                    \
    "\"age\":{\"type\":\"integer\"},\"role\":{\"enum\":[\"admin\",\"user\",null]},"                           \
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z]{1,4}$\"},\"maxItems\":3}," \
    "\"home\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/pt\"}]}},"                                  \
    "\"required\":[\"name\",\"age\",\"role\",\"tags\",\"home\"],\"additionalProperties\":false,"             \
    "\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"                     \
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"x\"],\"additionalProperties\":false}}}"

static void check_person(const char *text)
{
    json_error_t je;
    json_t *d = json_loads(text, 0, &je);
    if (!json_is_object(d))
        fail_msg("not an object: %s (%s)", text, je.text);
    assert_int_equal(json_object_size(d), 5);
    const char *name = json_string_value(json_object_get(d, "name"));
    assert_non_null(name);
    assert_true(json_is_integer(json_object_get(d, "age")));
    json_t *role = json_object_get(d, "role");
    assert_true(json_is_null(role) || (json_is_string(role) && (!strcmp(json_string_value(role), "admin") ||
                                                                !strcmp(json_string_value(role), "user"))));
    json_t *tags = json_object_get(d, "tags"), *t;
    size_t i;
    assert_true(json_is_array(tags) && json_array_size(tags) <= 3);
    json_array_foreach(tags, i, t)
    {
        const char *s = json_string_value(t);
        assert_non_null(s);
        assert_true(strlen(s) >= 1 && strlen(s) <= 4 && strspn(s, "abcdefghijklmnopqrstuvwxyz") == strlen(s));
    }
    json_t *home = json_object_get(d, "home");
    if (!json_is_null(home)) {
        assert_true(json_is_object(home));
        assert_true(json_is_number(json_object_get(home, "x")));
        json_t *ok = json_object_get(home, "ok");
        assert_true(!ok || json_is_boolean(ok));
    }
    json_decref(d);
}

static void test_json_schema(void **state)
{
    (void)state;
    for (int i = 0; i < 6; i++) {
        char body[4096];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a person %d\"}],"
                 "\"max_tokens\":400,\"temperature\":%s,\"seed\":%d,\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":" PERSON_SCHEMA "}}}",
                 i, i < 2 ? "0" : "1", i);
        json_t *j = post("/v1/chat/completions", body);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        const char *text = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
        assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
        check_person(text);
        json_decref(j);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *format, *msg;
    } r[] = {
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"properties\":"
         "{\"a\":{\"type\":\"object\",\"patternProperties\":{}}}}}}",
         "unsupported keyword 'patternProperties' at #/properties/a"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"array\"}}}",
         "the root must be an object"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\"}}}", "name"},
        {"{\"type\":\"xml\"}", "response_format"},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":%s}",
                 r[i].format);
        srv_resp resp;
        assert_true(srv_http(&fx, "POST", "/v1/chat/completions", body, &resp));
        assert_int_equal(resp.status, 400);
        if (!strstr(resp.body, r[i].msg))
            fail_msg("%s: %s lacks %s", body, resp.body, r[i].msg);
        srv_resp_free(&resp);
    }
}

/* A pattern of 20,000 nested groups (40 KB, what any key may send)
 * overflowed the pattern parser's stack and killed the server; it is a 400
 * naming the limit, in response_format and in a forced tool call, and the
 * server goes on serving. */
static void test_deep_pattern(void **state)
{
    (void)state;
    enum { DEPTH = 20000 };
    char *pat = malloc(2 * DEPTH + 4);
    assert_non_null(pat);
    char *p = pat;
    *p++ = '^';
    memset(p, '(', DEPTH), p += DEPTH;
    *p++ = 'a';
    memset(p, ')', DEPTH), p += DEPTH;
    *p++ = '$', *p = 0;
    size_t cap = 2 * DEPTH + 1024;
    char *body = malloc(cap);
    assert_non_null(body);
    for (int form = 0; form < 2; form++) {
        if (form == 0)
            snprintf(body, cap,
                     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                     "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\","
                     "\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"%s\"}}}}}}",
                     pat);
        else
            snprintf(body, cap,
                     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
                     "\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"%s\"}}}}}]}",
                     pat);
        srv_resp resp;
        assert_true(srv_http(&fx, "POST", "/v1/chat/completions", body, &resp));
        assert_int_equal(resp.status, 400);
        if (!strstr(resp.body, "nests groups too deeply (at most 32 levels)"))
            fail_msg("form %d: %.300s", form, resp.body);
        srv_resp_free(&resp);
        assert_true(srv_http(&fx, "GET", "/health/live", NULL, &resp));
        assert_int_equal(resp.status, 200);
        srv_resp_free(&resp);
    }
    free(body);
    free(pat);
}

#define TOOLS                                                                                                   \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\","     \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":6},"       \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"     \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\",\"properties\":" \
    "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],"                   \
    "\"additionalProperties\":false}}}]"

static void check_call(json_t *call, const char *want_name)
{
    const char *name = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
    const char *args = json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
    assert_non_null(name);
    assert_non_null(args);
    if (want_name)
        assert_string_equal(name, want_name);
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    assert_true(!strncmp(json_string_value(json_object_get(call, "id")), "call_", 5));
    json_t *a = json_loads(args, 0, NULL);
    if (!json_is_object(a))
        fail_msg("arguments are not an object: %s", args);
    if (!strcmp(name, "get_weather")) {
        const char *city = json_string_value(json_object_get(a, "city"));
        const char *unit = json_string_value(json_object_get(a, "unit"));
        assert_non_null(city);
        assert_non_null(unit);
        assert_true(!strcmp(unit, "c") || !strcmp(unit, "f"));
    } else {
        assert_string_equal(name, "add");
        assert_true(json_is_integer(json_object_get(a, "a")) && json_is_integer(json_object_get(a, "b")));
    }
    json_decref(a);
}

/* The chat's SSE stream: the tool calls its deltas assemble. */
static json_t *stream_calls(const char *body, const char **finish)
{
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/chat/completions", body, &r));
    assert_int_equal(r.status, 200);
    json_t *calls = json_array();
    static char fin[32];
    fin[0] = 0;
    for (char *line = strstr(r.body, "data: "); line; line = strstr(line + 1, "data: ")) {
        char *end = strchr(line, '\n');
        json_t *ev = json_loadb(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6), 0, NULL);
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *tc = json_object_get(json_object_get(ch, "delta"), "tool_calls"), *d;
        size_t i;
        json_array_foreach(tc, i, d)
        {
            size_t idx = (size_t)json_integer_value(json_object_get(d, "index"));
            json_t *fn = json_object_get(d, "function");
            if (idx == json_array_size(calls))
                json_array_append_new(calls, json_pack("{s:O,s:O,s:{s:O,s:s}}", "id", json_object_get(d, "id"),
                                                       "type", json_object_get(d, "type"), "function", "name",
                                                       json_object_get(fn, "name"), "arguments", ""));
            json_t *have = json_object_get(json_array_get(calls, idx), "function");
            const char *more = json_string_value(json_object_get(fn, "arguments"));
            if (have && more && *more) {
                char buf[2048];
                snprintf(buf, sizeof buf, "%s%s", json_string_value(json_object_get(have, "arguments")), more);
                json_object_set_new(have, "arguments", json_string(buf));
            }
        }
        const char *f = json_string_value(json_object_get(ch, "finish_reason"));
        if (f)
            snprintf(fin, sizeof fin, "%s", f);
        json_decref(ev);
    }
    srv_resp_free(&r);
    *finish = fin;
    return calls;
}

static void test_forced_tool_calls(void **state)
{
    (void)state;
    static const char *const choices[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}",
                                          "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"};
    for (int i = 0; i < 3; i++) {
        for (int t = 0; t < 2; t++) {
            char body[4096];
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"call %d\"}],\"max_tokens\":300,"
                     "\"temperature\":%d,\"seed\":%d,\"tools\":" TOOLS ",\"tool_choice\":%s%s}",
                     i, t, i, choices[i], t == 0 ? "" : "");
            json_t *j = post("/v1/chat/completions", body);
            json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
            json_t *calls = json_object_get(json_object_get(ch, "message"), "tool_calls");
            assert_int_equal(json_array_size(calls), 1);
            check_call(json_array_get(calls, 0), i == 0 ? NULL : i == 1 ? "add" : "get_weather");
            if (t == 0) { /* greedy: the stream says the same */
                size_t l = strlen(body);
                snprintf(body + l - 1, sizeof body - l + 1, ",\"stream\":true}");
                const char *fin;
                json_t *sc = stream_calls(body, &fin);
                assert_string_equal(fin, "tool_calls");
                assert_int_equal(json_array_size(sc), 1);
                json_t *a = json_object_get(json_array_get(calls, 0), "function");
                json_t *b = json_object_get(json_array_get(sc, 0), "function");
                assert_string_equal(json_string_value(json_object_get(a, "name")),
                                    json_string_value(json_object_get(b, "name")));
                assert_string_equal(json_string_value(json_object_get(a, "arguments")),
                                    json_string_value(json_object_get(b, "arguments")));
                json_decref(sc);
            }
            json_decref(j);
        }
    }
    /* a function that is not among the tools */
    srv_resp r;
    assert_true(srv_http(&fx, "POST", "/v1/chat/completions",
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS
                         ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
                         &r));
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "nope"));
    srv_resp_free(&r);
}

/* The other families' formats: a forced call in Llama 3's form
 * ({"name", "parameters"}) and in Mistral's, read back as tool_calls, and
 * a conversation with a call and its result rendered for each. */
static void test_families(void **state)
{
    (void)state;
    static const char *const models[] = {"l3", "mi"};
    for (int i = 0; i < 2; i++) {
        char body[4096];
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"add\"}],\"max_tokens\":300,"
                 "\"temperature\":0,\"tools\":" TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":"
                 "{\"name\":\"add\"}}}",
                 models[i]);
        json_t *j = post("/v1/chat/completions", body);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
        check_call(json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0), "add");
        json_decref(j);
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"max_tokens\":4,\"temperature\":0,\"tools\":" TOOLS ",\"messages\":["
                 "{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"1+2?\"},"
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                 "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"3\"}]}",
                 models[i]);
        json_decref(post("/v1/chat/completions", body));
    }
}

static void test_tool_messages_back(void **state)
{
    (void)state;
    /* an assistant turn that called a tool, then the result */
    json_t *j = post("/v1/chat/completions",
                     "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,\"tools\":" TOOLS ",\"messages\":["
                     "{\"role\":\"user\",\"content\":\"weather in Paris?\"},"
                     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"
                     "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":"
                     "\\\"Paris\\\",\\\"unit\\\":\\\"c\\\"}\"}}]},"
                     "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18 degrees\"}]}");
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_non_null(json_object_get(ch, "message"));
    json_decref(j);
    /* the same through the Messages API: tool_use, then tool_result */
    j = post("/v1/messages",
             "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,"
             "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":"
             "{\"type\":\"string\"}},\"required\":[\"city\"]}}],\"messages\":["
             "{\"role\":\"user\",\"content\":\"weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
             "\"input\":{\"city\":\"Paris\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":"
             "\"18 degrees\"}]}]}");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "message");
    json_decref(j);
}

static void test_anthropic_forced(void **state)
{
    (void)state;
    static const char *const choices[] = {"{\"type\":\"any\"}", "{\"type\":\"tool\",\"name\":\"add\"}"};
    for (int i = 0; i < 2; i++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"max_tokens\":300,\"temperature\":0,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"add\"}],\"tools\":[{\"name\":\"add\",\"input_schema\":{\"type\":\"object\","
                 "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":"
                 "[\"a\",\"b\"]}}],\"tool_choice\":%s}",
                 choices[i]);
        json_t *j = post("/v1/messages", body);
        assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
        json_t *content = json_object_get(j, "content"), *b;
        size_t k;
        int uses = 0;
        json_array_foreach(content, k, b)
        {
            if (strcmp(json_string_value(json_object_get(b, "type")), "tool_use"))
                continue;
            uses++;
            assert_string_equal(json_string_value(json_object_get(b, "name")), "add");
            assert_true(!strncmp(json_string_value(json_object_get(b, "id")), "toolu_", 6));
            json_t *in = json_object_get(b, "input");
            assert_true(json_is_integer(json_object_get(in, "a")) && json_is_integer(json_object_get(in, "b")));
        }
        assert_int_equal(uses, 1);
        json_decref(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_schema),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_deep_pattern),
        cmocka_unit_test(test_forced_tool_calls),  cmocka_unit_test(test_tool_messages_back),
        cmocka_unit_test(test_anthropic_forced),  cmocka_unit_test(test_families),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
