/* colo-server end to end: the real binary with two synthetic models (the
 * same GGUF served twice under two names and priorities), driven over real
 * loopback sockets: every model endpoint, streaming, keep-alive and
 * pipelining, the error statuses, request ids, cancellation on disconnect,
 * metrics, and the lifecycle (SIGTERM with a request in flight, startup
 * failures, the API key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

#define MAX_EVENTS 512

static const char *two_models =
    "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 512MiB }\n"
    "scheduler: { policy: priority }\n"
    "models:\n"
    "  - { name: a, kind: llama, path: m.gguf, memory_fraction: 0.2, priority: high }\n"
    "  - name: b\n"
    "    aliases: [acme/model-b:v1, b.latest]\n"
    "    kind: llama\n"
    "    path: m.gguf\n"
    "    memory_fraction: 0.2\n"
    "    priority: low\n"
    "    batching: { max_batch_size: 1, max_queue: 1 }\n"
    "  - { name: c, kind: llama, path: m.gguf, memory_fraction: 0.1,\n"
    "      batching: { max_batch_size: 1, max_queue: 8, queue_timeout_ms: 10 } }\n";

static srv_fixture shared;

static int setup(void **state)
{
    if (!srv_tmpdir(&shared) || !srv_mkmodel(&shared, "m.gguf", 2, 64, 512, 256) ||
        !srv_start_logged(&shared, two_models))
        return -1;
    *state = &shared;
    return 0;
}

static int teardown(void **state) { return srv_group_teardown(*state); }

/* POSTs body to path and returns the parsed JSON answer; asserts the status. */
static json_t *post_json(srv_fixture *f, const char *path, const char *body, int want_status)
{
    srv_resp r;
    assert_true(srv_http(f, "POST", path, body, &r));
    if (r.status != want_status)
        fprintf(stderr, "POST %s %s -> %d %s\n", path, body, r.status, r.body);
    assert_int_equal(r.status, want_status);
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    return j;
}

static json_t *get_json(srv_fixture *f, const char *path)
{
    int status;
    json_t *j = srv_get_json(f, path, &status);
    assert_int_equal(status, 200);
    assert_non_null(j);
    return j;
}

static const char *jstr(json_t *o, const char *path)
{
    json_t *v = json_object_get(o, path);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Both models answer, and the same seed gives the same tokens on each. */
static void test_two_models_generate(void **state)
{
    srv_fixture *f = *state;
    json_t *tok[2];
    const char *paths[2] = {"/v1/models/a/infer", "/v1/models/b/infer"};
    for (int i = 0; i < 2; i++) {
        json_t *j = post_json(f, paths[i], "{\"prompt\":\"hello\",\"max_tokens\":6,\"seed\":3}", 200);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 6);
        tok[i] = json_incref(json_object_get(j, "tokens"));
        json_decref(j);
    }
    assert_true(json_equal(tok[0], tok[1]));
    json_decref(tok[0]);
    json_decref(tok[1]);
}

/* The infer answer's shape: text, tokens, finish_reason, usage, timing, and
 * the request id from X-Request-Id in the header and the body. */
static void test_infer_answer(void **state)
{
    srv_fixture *f = *state;
    srv_resp r;
    assert_true(srv_http_h(f, "POST", "/v1/models/a/infer", "X-Request-Id: req-answer-1\r\n",
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,\"temperature\":0,"
                           "\"top_k\":3,\"top_p\":0.9,\"stop\":[\"\\u0001\"],\"priority\":\"low\"}",
                           &r));
    assert_int_equal(r.status, 200);
    char h[128];
    assert_non_null(srv_header(&r, "X-Request-Id", h, sizeof h));
    assert_string_equal(h, "req-answer-1");
    assert_non_null(srv_header(&r, "Content-Type", h, sizeof h));
    assert_non_null(strstr(h, "application/json"));
    json_t *j = srv_json(&r);
    srv_resp_free(&r);
    assert_non_null(j);
    assert_string_equal(jstr(j, "id"), "req-answer-1");
    assert_string_equal(jstr(j, "model"), "a");
    assert_non_null(jstr(j, "text"));
    json_t *tokens = json_object_get(j, "tokens"), *usage = json_object_get(j, "usage");
    assert_true(json_is_array(tokens));
    json_int_t n = json_integer_value(json_object_get(usage, "completion_tokens"));
    assert_true(n >= 1 && n <= 5);
    assert_int_equal(json_array_size(tokens), n);
    const char *fin = jstr(j, "finish_reason");
    assert_true(!strcmp(fin, n == 5 ? "length" : "stop") || !strcmp(fin, "stop"));
    json_int_t np = json_integer_value(json_object_get(usage, "prompt_tokens"));
    assert_true(np > 2); /* the chat template adds tokens around "hi" */
    assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), np + n);
    json_t *timing = json_object_get(j, "timing");
    const char *keys[] = {"queue_ms", "prefill_ms", "decode_ms", "total_ms"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(timing, keys[i]);
        assert_true(json_is_number(v));
        assert_true(json_number_value(v) >= 0);
    }
    assert_true(json_number_value(json_object_get(timing, "total_ms")) >=
                json_number_value(json_object_get(timing, "prefill_ms")));
    json_decref(j);

    /* Greedy decoding is deterministic whatever the seed. */
    json_t *g1 = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"abc\",\"max_tokens\":8,\"temperature\":0,\"seed\":1}", 200);
    json_t *g2 = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"abc\",\"max_tokens\":8,\"temperature\":0,\"seed\":2}", 200);
    assert_true(json_equal(json_object_get(g1, "tokens"), json_object_get(g2, "tokens")));
    json_decref(g1);
    json_decref(g2);
}

/* stream: true sends one SSE event per token, an "event: done" with the
 * whole answer, then [DONE]; the tokens equal the unstreamed answer's. */
static void test_infer_stream(void **state)
{
    srv_fixture *f = *state;
    json_t *plain = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"stream me\",\"max_tokens\":7,\"seed\":11}", 200);
    srv_resp r;
    assert_true(srv_http_h(f, "POST", "/v1/models/a/infer", "X-Request-Id: s-1\r\n",
                           "{\"prompt\":\"stream me\",\"max_tokens\":7,\"seed\":11,\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    char h[128];
    assert_non_null(srv_header(&r, "Content-Type", h, sizeof h));
    assert_non_null(strstr(h, "text/event-stream"));
    char *names[MAX_EVENTS], *data[MAX_EVENTS];
    int n = srv_sse(r.body, names, data, MAX_EVENTS);
    srv_resp_free(&r);
    json_t *plain_tokens = json_object_get(plain, "tokens");
    size_t nt = json_array_size(plain_tokens);
    assert_int_equal(n, (int)nt + 2);
    for (size_t i = 0; i < nt; i++) {
        assert_string_equal(names[i], "");
        json_t *e = json_loads(data[i], 0, NULL);
        assert_non_null(e);
        assert_string_equal(jstr(e, "id"), "s-1");
        assert_int_equal(json_integer_value(json_object_get(e, "token")),
                         json_integer_value(json_array_get(plain_tokens, i)));
        assert_non_null(jstr(e, "text"));
        json_decref(e);
    }
    assert_string_equal(names[nt], "done");
    json_t *done = json_loads(data[nt], 0, NULL);
    assert_non_null(done);
    assert_true(json_equal(json_object_get(done, "tokens"), plain_tokens));
    assert_string_equal(jstr(done, "text"), jstr(plain, "text"));
    assert_string_equal(data[nt + 1], "[DONE]");
    json_decref(done);
    json_decref(plain);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }
}

/* GET /v1/models is OpenAI's list with colo's fields; GET /v1/models/{name}. */
static void test_models(void **state)
{
    srv_fixture *f = *state;
    json_t *l = get_json(f, "/v1/models");
    assert_string_equal(jstr(l, "object"), "list");
    json_t *data = json_object_get(l, "data");
    assert_int_equal(json_array_size(data), 5); /* a, b, b's two aliases, c */
    static const char *const aliases[2] = {"acme/model-b:v1", "b.latest"};
    for (int i = 0; i < 2; i++) {
        json_t *al = json_array_get(data, (size_t)(2 + i));
        assert_string_equal(jstr(al, "id"), aliases[i]);
        assert_string_equal(jstr(al, "alias_of"), "b");
    }
    const char *names[2] = {"a", "b"}, *prio[2] = {"high", "low"};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_array_get(data, i);
        assert_string_equal(jstr(m, "id"), names[i]);
        assert_string_equal(jstr(m, "object"), "model");
        assert_string_equal(jstr(m, "kind"), "llama");
        assert_string_equal(jstr(m, "state"), "ready");
        assert_string_equal(jstr(m, "priority"), prio[i]);
        json_t *mem = json_object_get(m, "memory");
        json_int_t limit = json_integer_value(json_object_get(mem, "limit_bytes"));
        json_int_t used = json_integer_value(json_object_get(mem, "used_bytes"));
        json_int_t frac = (json_int_t)(0.2 * 512 * 1024 * 1024); /* its fraction, rounded down to 256 B */
        assert_true(limit <= frac && limit > frac - 256);
        assert_true(used > 0 && used <= limit);
        assert_true(json_integer_value(json_object_get(mem, "peak_bytes")) >= used);
        assert_true(json_is_object(json_object_get(m, "batching")));
        assert_true(json_is_integer(json_object_get(m, "queue_depth")));
        json_t *kv = json_object_get(m, "kv_cache");
        assert_true(json_integer_value(json_object_get(kv, "blocks")) > 0);
    }
    json_int_t mb = json_integer_value(
        json_object_get(json_object_get(json_array_get(data, 1), "batching"), "max_batch_size"));
    assert_int_equal(mb, 1);
    json_decref(l);

    json_t *m = get_json(f, "/v1/models/b");
    assert_string_equal(jstr(m, "id"), "b");
    json_decref(m);
    /* a name clients write, in the body and URL-encoded in a path */
    m = get_json(f, "/v1/models/acme%2Fmodel-b%3Av1");
    assert_string_equal(jstr(m, "id"), "b");
    json_decref(m);
    m = post_json(f, "/v1/chat/completions",
                  "{\"model\":\"acme/model-b:v1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"max_tokens\":2}",
                  200);
    assert_non_null(json_object_get(m, "choices"));
    json_decref(m);
    m = post_json(f, "/v1/models/b.latest/infer", "{\"prompt\":\"x\",\"max_tokens\":1}", 200);
    json_decref(m);
    m = get_json(f, "/v1/models/b");
    assert_int_equal(json_integer_value(json_object_get(m, "max_seq_len")), 256);
    assert_int_equal(json_integer_value(json_object_get(m, "n_vocab")), 512);
    json_decref(m);

    /* HEAD: GET's status and headers, no body */
    const char *head = "HEAD /v1/models/a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    int fd = srv_connect(f->port);
    assert_true(fd >= 0 && srv_send_all(fd, head, strlen(head)));
    size_t hn;
    char *hb = srv_read_all(fd, 10000, &hn);
    close(fd);
    assert_non_null(hb);
    assert_true(!strncmp(hb, "HTTP/1.1 200", 12));
    assert_non_null(strcasestr(hb, "\r\nContent-Length: "));
    assert_true(hn > 4 && !strcmp(hb + hn - 4, "\r\n\r\n")); /* nothing after the headers */
    free(hb);

    srv_resp r;
    assert_true(srv_http(f, "GET", "/v1/models/nope", NULL, &r));
    assert_int_equal(r.status, 404);
    json_t *e = srv_json(&r);
    assert_string_equal(jstr(json_object_get(e, "error"), "code"), "model_not_found");
    json_decref(e);
    srv_resp_free(&r);
}

/* OpenAI's /v1/completions and /v1/chat/completions, plain and streamed,
 * with fields colo accepts and ignores. */
static void test_openai(void **state)
{
    srv_fixture *f = *state;
    json_t *c = post_json(f, "/v1/completions",
                          "{\"model\":\"a\",\"prompt\":\"once\",\"max_tokens\":4,\"seed\":5,\"n\":1,\"user\":\"u\","
                          "\"logprobs\":null,\"presence_penalty\":0}",
                          200);
    assert_string_equal(jstr(c, "object"), "text_completion");
    assert_string_equal(jstr(c, "model"), "a");
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    assert_non_null(jstr(ch, "text"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(c, "usage"), "completion_tokens")), 4);
    json_decref(c);

    json_t *chat = post_json(f, "/v1/chat/completions",
                             "{\"model\":\"b\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                             "{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":6,\"seed\":5,"
                             "\"stream_options\":null,\"response_format\":{\"type\":\"text\"}}",
                             200);
    assert_string_equal(jstr(chat, "object"), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(chat, "choices"), 0), "message");
    assert_string_equal(jstr(msg, "role"), "assistant");
    const char *content = jstr(msg, "content");
    assert_non_null(content);
    char *want = strdup(content);
    json_decref(chat);

    /* Streamed chat: a role chunk, content chunks that add up to the same
     * text, a finish chunk, a usage chunk (include_usage), [DONE]. */
    srv_resp r;
    assert_true(srv_http(f, "POST", "/v1/chat/completions",
                         "{\"model\":\"b\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                         "{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":6,\"seed\":5,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true}}",
                         &r));
    assert_int_equal(r.status, 200);
    char *names[MAX_EVENTS], *data[MAX_EVENTS];
    int n = srv_sse(r.body, names, data, MAX_EVENTS);
    srv_resp_free(&r);
    assert_true(n >= 4);
    assert_string_equal(data[n - 1], "[DONE]");
    char text[4096] = "";
    bool saw_role = false, saw_finish = false, saw_usage = false;
    for (int i = 0; i < n - 1; i++) {
        json_t *e = json_loads(data[i], 0, NULL);
        assert_non_null(e);
        assert_string_equal(jstr(e, "object"), "chat.completion.chunk");
        json_t *choice = json_array_get(json_object_get(e, "choices"), 0);
        json_t *delta = json_object_get(choice, "delta");
        if (i == 0) {
            assert_string_equal(jstr(delta, "role"), "assistant");
            saw_role = true;
        }
        if (jstr(delta, "content"))
            strncat(text, jstr(delta, "content"), sizeof text - strlen(text) - 1);
        if (jstr(choice, "finish_reason"))
            saw_finish = true;
        if (json_object_get(e, "usage")) {
            assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "usage"), "completion_tokens")), 6);
            saw_usage = true;
        }
        json_decref(e);
    }
    assert_true(saw_role && saw_finish && saw_usage);
    assert_string_equal(text, want);
    free(want);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }

    /* Streamed completion: text chunks then [DONE]. */
    assert_true(srv_http(f, "POST", "/v1/completions",
                         "{\"model\":\"a\",\"prompt\":\"once\",\"max_tokens\":4,\"seed\":5,\"stream\":true}", &r));
    assert_int_equal(r.status, 200);
    n = srv_sse(r.body, names, data, MAX_EVENTS);
    srv_resp_free(&r);
    assert_true(n >= 2);
    assert_string_equal(data[n - 1], "[DONE]");
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }

    /* Embeddings from a generative model are refused, clearly. */
    json_t *e = post_json(f, "/v1/embeddings", "{\"model\":\"a\",\"input\":\"x\"}", 400);
    assert_string_equal(jstr(json_object_get(e, "error"), "code"), "invalid_request");
    json_decref(e);
}

/* Each bad request gets its status and a JSON error with the request id. */
static void test_errors(void **state)
{
    srv_fixture *f = *state;
    static const struct {
        const char *method, *path, *body;
        int status;
        const char *code;
    } cases[] = {
        {"POST", "/v1/models/a/infer", "{\"prompt\":", 400, "invalid_json"},
        {"POST", "/v1/models/a/infer", "[1,2]", 400, NULL},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"bogus\":1}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"temperature\":9}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":7}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"\"}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"max_tokens\":-5}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"max_tokens\":99999999999}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"temperature\":5}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"temperature\":-1}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"top_p\":0}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"priority\":\"urgent\"}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "invalid_request"},
        {"POST", "/v1/models/a/infer", "{\"prompt\":\"x\",\"best_of\":1}", 400, "invalid_request"}, /* strict */
        {"POST", "/v1/models/a/infer", "{\"inputs\":[\"x\"]}", 400, "invalid_request"},
        {"POST", "/v1/models/zz/infer", "{\"prompt\":\"x\"}", 404, "model_not_found"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\"}", 400, "invalid_request"},
        {"POST", "/v1/completions", "{\"model\":\"zz\",\"prompt\":\"x\"}", 404, "model_not_found"},
        {"POST", "/v1/chat/completions", "{\"model\":\"a\",\"messages\":[]}", 400, "invalid_request"},
        {"POST", "/v1/chat/completions", "{\"model\":\"a\",\"messages\":[{\"role\":\"x\"}]}", 400, "invalid_request"},
        {"POST", "/v1/chat/completions", "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}",
         400, "invalid_request"},
        {"GET", "/v1/models/a/infer", NULL, 405, NULL},
        {"DELETE", "/v1/models", NULL, 405, NULL},
        {"GET", "/v2/anything", NULL, 404, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char hdr[64];
        snprintf(hdr, sizeof hdr, "X-Request-Id: err-%zu\r\n", i);
        srv_resp r;
        assert_true(srv_http_h(f, cases[i].method, cases[i].path, hdr, cases[i].body, &r));
        if (r.status != cases[i].status)
            fprintf(stderr, "case %zu: %s %s %s -> %d %s\n", i, cases[i].method, cases[i].path,
                    cases[i].body ? cases[i].body : "", r.status, r.body);
        assert_int_equal(r.status, cases[i].status);
        json_t *j = srv_json(&r);
        assert_non_null(j);
        json_t *e = json_object_get(j, "error");
        assert_non_null(jstr(e, "message"));
        assert_true(strlen(jstr(e, "message")) > 0);
        if (cases[i].code)
            assert_string_equal(jstr(e, "code"), cases[i].code);
        /* OpenAI's error object: type by status, param (null or the field) */
        assert_string_equal(jstr(e, "type"), cases[i].status == 405 || cases[i].status < 500 ? "invalid_request_error"
                                                                                               : "server_error");
        assert_non_null(json_object_get(e, "param"));
        char want[64];
        snprintf(want, sizeof want, "err-%zu", i);
        assert_string_equal(jstr(e, "request_id"), want);
        json_decref(j);
        srv_resp_free(&r);
    }
    /* param names the field a 400 is about */
    json_t *pe = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"x\",\"temperature\":9}", 400);
    assert_string_equal(jstr(json_object_get(pe, "error"), "param"), "temperature");
    json_decref(pe);
    /* An over-long prompt is refused before it reaches the model. */
    size_t big = 256 * 32 + 100;
    char *body = malloc(big + 64);
    assert_non_null(body);
    int k = sprintf(body, "{\"prompt\":\"");
    memset(body + k, 'x', big);
    strcpy(body + k + big, "\"}");
    json_t *j = post_json(f, "/v1/models/a/infer", body, 400);
    assert_string_equal(jstr(json_object_get(j, "error"), "code"), "context_length_exceeded");
    assert_string_equal(jstr(json_object_get(j, "error"), "param"), "prompt");
    json_decref(j);
    /* A prompt that tokenizes past max_seq_len is refused too. */
    big = 2000;
    k = sprintf(body, "{\"prompt\":\"");
    for (size_t i = 0; i < big / 2; i++)
        memcpy(body + k + 2 * i, "a ", 2);
    strcpy(body + k + big, "\"}");
    j = post_json(f, "/v1/models/a/infer", body, 400);
    const char *msg = jstr(json_object_get(j, "error"), "message");
    assert_non_null(strstr(msg, "tokens"));
    assert_non_null(strstr(msg, "256")); /* the context, in tokens */
    assert_string_equal(jstr(json_object_get(j, "error"), "code"), "context_length_exceeded");
    json_decref(j);
    free(body);
    /* Past 4 KiB the prompt is tokenized off the event loop: the same 400. */
    body = malloc(6000);
    assert_non_null(body);
    k = sprintf(body, "{\"prompt\":\"");
    for (int i = 0; i < 2500; i++)
        memcpy(body + k + 2 * i, "b ", 2);
    strcpy(body + k + 5000, "\"}");
    j = post_json(f, "/v1/models/a/infer", body, 400);
    msg = jstr(json_object_get(j, "error"), "message");
    assert_non_null(strstr(msg, "tokens"));
    assert_non_null(strstr(msg, "256"));
    assert_string_equal(jstr(json_object_get(j, "error"), "code"), "context_length_exceeded");
    json_decref(j);
    free(body);
    /* prompt + max_tokens past the context: 400 with both counts, before queueing */
    j = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"hello\",\"max_tokens\":255}", 400);
    msg = jstr(json_object_get(j, "error"), "message");
    assert_non_null(strstr(msg, "max_tokens is 255"));
    assert_non_null(strstr(msg, "holds 256"));
    json_decref(j);
    j = post_json(f, "/v1/chat/completions",
                  "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":256}", 400);
    assert_non_null(strstr(jstr(json_object_get(j, "error"), "message"), "max_tokens"));
    json_decref(j);
}

/* Keep-alive: three pipelined requests on one connection are answered in
 * order, each with its own id; the connection then serves one more. */
static void test_pipelining(void **state)
{
    srv_fixture *f = *state;
    int fd = srv_connect(f->port);
    assert_true(fd >= 0);
    char req[2048];
    size_t len = 0;
    const char *bodies[3] = {"{\"prompt\":\"one\",\"max_tokens\":3,\"seed\":1}",
                             "{\"prompt\":\"two\",\"max_tokens\":9,\"seed\":1}",
                             "{\"prompt\":\"three\",\"max_tokens\":2,\"seed\":1}"};
    for (int i = 0; i < 3; i++)
        len += (size_t)snprintf(req + len, sizeof req - len,
                                "POST /v1/models/%s/infer HTTP/1.1\r\nHost: t\r\nX-Request-Id: p%d\r\n"
                                "Content-Length: %zu\r\n\r\n%s",
                                i == 1 ? "b" : "a", i, strlen(bodies[i]), bodies[i]);
    assert_true(srv_send_all(fd, req, len));
    size_t have = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(buf);
    int got = 0;
    size_t off = 0;
    uint64_t t0 = srv_now_ms();
    while (got < 3 && srv_now_ms() - t0 < 20000) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t r = recv(fd, buf + have, cap - have - 1, 0);
        assert_true(r > 0);
        have += (size_t)r;
        for (;;) {
            srv_resp resp;
            size_t used = srv_parse(buf + off, have - off, &resp);
            if (!used) {
                srv_resp_free(&resp);
                break;
            }
            assert_int_equal(resp.status, 200);
            json_t *j = srv_json(&resp);
            char want[16];
            snprintf(want, sizeof want, "p%d", got);
            assert_string_equal(jstr(j, "id"), want);
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
                             got == 0 ? 3 : got == 1 ? 9 : 2);
            json_decref(j);
            srv_resp_free(&resp);
            off += used;
            got++;
        }
    }
    assert_int_equal(got, 3);
    /* The connection is still open for another request. */
    const char *more = "GET /v1/models/a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_true(srv_send_all(fd, more, strlen(more)));
    size_t n;
    char *rest = srv_read_all(fd, 10000, &n);
    srv_resp resp;
    assert_true(srv_parse(rest, n, &resp) > 0);
    assert_int_equal(resp.status, 200);
    srv_resp_free(&resp);
    free(rest);
    free(buf);
    close(fd);
}

/* Sends n long generations (this prompt and seed run 240 tokens, about
 * 75 ms here, without an end token) to model at once; each answer must be
 * 200 or refused_status with code and Retry-After. Asserts both happened. */
static void burst(srv_fixture *f, const char *model, int n, int refused_status, const char *code)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/models/%s/infer", model);
    const char *raw[16];
    srv_resp r[16];
    for (int i = 0; i < n; i++)
        raw[i] = srv_post_raw(path, NULL, "{\"prompt\":\"long story\",\"max_tokens\":240,\"seed\":1}");
    srv_concurrent(f->port, raw, n, r);
    int ok = 0, refused = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].status == refused_status) {
            char h[32];
            assert_non_null(srv_header(&r[i], "Retry-After", h, sizeof h));
            assert_true(atoi(h) >= 1);
            json_t *j = srv_json(&r[i]);
            assert_string_equal(jstr(json_object_get(j, "error"), "code"), code);
            json_decref(j);
            refused++;
        } else {
            assert_int_equal(r[i].status, 200);
            ok++;
        }
        srv_resp_free(&r[i]);
        free((char *)raw[i]);
    }
    assert_true(ok >= 1);
    assert_true(refused >= 1);
}

/* A full queue answers 429 with Retry-After (model b: one running, one
 * queued); model a answers meanwhile. */
static void test_queue_full(void **state)
{
    srv_fixture *f = *state;
    burst(f, "b", 8, 429, "queue_full");
    json_t *j = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"still here\",\"max_tokens\":2}", 200);
    json_decref(j);
}

/* A request still queued past its deadline gets 503 queue_timeout with
 * Retry-After (model c: one at a time, 10 ms in the queue at most). Eight
 * at once: the tiny model may answer one in a few milliseconds (or stop at
 * an early end-of-sequence), but not seven in 10 ms. */
static void test_queue_timeout(void **state) { burst(*state, "c", 8, 503, "queue_timeout"); }

/* A client that goes away mid-stream frees its sequence: the model is idle
 * with all its KV blocks free soon after, and serves the next request. */
static void test_disconnect_frees_sequence(void **state)
{
    srv_fixture *f = *state;
    for (int round = 0; round < 2; round++) {
        int fd = srv_connect(f->port);
        assert_true(fd >= 0);
        char *raw = srv_post_raw("/v1/models/a/infer", NULL,
                                 "{\"prompt\":\"long story\",\"max_tokens\":240,\"stream\":true,\"seed\":3}");
        assert_true(srv_send_all(fd, raw, strlen(raw)));
        free(raw);
        /* Wait for the first token event, then vanish. */
        char buf[4096];
        size_t have = 0;
        while (have < sizeof buf - 1) {
            struct pollfd p = {fd, POLLIN, 0};
            assert_true(poll(&p, 1, 10000) > 0);
            ssize_t r = recv(fd, buf + have, sizeof buf - 1 - have, 0);
            assert_true(r > 0);
            have += (size_t)r;
            buf[have] = 0;
            if (strstr(buf, "\"token\""))
                break;
        }
        if (round == 1) { /* an abortive close (RST) as well as an orderly one */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(fd);
        bool idle = false;
        for (int i = 0; i < 200 && !idle; i++) {
            json_t *m = get_json(f, "/v1/models/a");
            json_t *kv = json_object_get(m, "kv_cache");
            idle = json_integer_value(json_object_get(m, "running")) == 0 &&
                   json_integer_value(json_object_get(kv, "free_blocks")) ==
                       json_integer_value(json_object_get(kv, "blocks"));
            json_decref(m);
            if (!idle)
                srv_sleep_ms(20);
        }
        assert_true(idle);
    }
    /* The cancelled request was counted with status 499, not as an error. */
    srv_resp r;
    assert_true(srv_http(f, "GET", "/metrics", NULL, &r));
    assert_non_null(strstr(r.body, "colo_model_requests_total{model=\"a\",status=\"499\"}"));
    srv_resp_free(&r);
    json_t *j = post_json(f, "/v1/models/a/infer", "{\"prompt\":\"after\",\"max_tokens\":3}", 200);
    json_decref(j);
}

/* /metrics has the per-model series with what the tests above did. */
static void test_metrics(void **state)
{
    srv_fixture *f = *state;
    srv_resp r;
    assert_true(srv_http(f, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    const char *want[] = {
        "colo_model_requests_total{model=\"a\",status=\"200\"}",
        "colo_model_requests_total{model=\"b\",status=\"429\"}",
        "colo_model_requests_total{model=\"a\",status=\"400\"}",
        "colo_model_request_duration_seconds_bucket{model=\"a\"",
        "colo_model_queue_duration_seconds_bucket{model=\"b\",priority=\"low\"",
        "colo_model_time_to_first_token_seconds_bucket{model=\"a\"",
        "colo_model_inter_token_latency_seconds_bucket{model=\"a\"",
        "colo_model_generated_tokens_total{model=\"a\"}",
        "colo_model_batch_size_bucket{model=\"a\"",
        "colo_model_memory_limit_bytes{model=\"a\"}",
        "colo_model_memory_used_bytes{model=\"b\"}",
        "colo_model_queue_depth{model=\"a\"}",
        "colo_model_prefill_duration_seconds_bucket{model=\"a\"",
        "colo_model_decode_duration_seconds_bucket{model=\"a\"",
        "colo_model_kv_blocks_free{model=\"a\"}",
        "colo_scheduler_steps_total{model=\"a\",policy=\"priority\"}",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        if (!strstr(r.body, want[i]))
            fprintf(stderr, "missing: %s\n", want[i]);
        assert_non_null(strstr(r.body, want[i]));
    }
    srv_resp_free(&r);
}

/* The value of the series that starts with prefix (its labels included),
 * or -1 when absent. */
static double metric_value(const char *body, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = strstr(body, prefix); p; p = strstr(p + 1, prefix))
        if ((p == body || p[-1] == '\n') && (p[n] == ' ' || p[n] == '{' || prefix[n - 1] == '}')) {
            const char *v = strchr(p + n, ' ');
            return v ? strtod(v + 1, NULL) : -1;
        }
    return -1;
}

/* Where the time went (docs/SCHEDULING.md): the pool's worker time by
 * state, the model's steps by kind and its executor's time by phase, its
 * ops, chunks and worker time, the loop's and the process's CPU time, all
 * moved by the generations above. */
static void test_metrics_where_time_goes(void **state)
{
    srv_fixture *f = *state;
    srv_resp r;
    assert_true(srv_http(f, "GET", "/metrics", NULL, &r));
    assert_int_equal(r.status, 200);
    const char *positive[] = {
        "colo_device_worker_seconds_total{device=\"cpu\",state=\"busy\"}",
        "colo_device_worker_seconds_total{device=\"cpu\",state=\"starved\"}",
        "colo_device_pool_ops_total{device=\"cpu\"}",
        "colo_device_pool_chunks_total{device=\"cpu\"}",
        "colo_model_steps_total{model=\"a\",step=\"decode\"}",
        "colo_model_step_tokens_total{model=\"a\",step=\"decode\"}",
        "colo_model_step_phase_seconds_total{model=\"a\",phase=\"device\"}",
        "colo_model_step_phase_seconds_total{model=\"a\",phase=\"sample\"}",
        "colo_model_device_busy_seconds_total{model=\"a\"}",
        "colo_model_ops_total{model=\"a\"}",
        "colo_model_chunks_total{model=\"a\"}",
        "colo_server_loop_cpu_seconds_total",
        "process_cpu_seconds_total",
    };
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (!(metric_value(r.body, positive[i]) > 0))
            fail_msg("%s: %g", positive[i], metric_value(r.body, positive[i]));
    /* a model's ops are the pool's, and its chunks at least its ops */
    double ops_a = metric_value(r.body, "colo_model_ops_total{model=\"a\"}");
    assert_true(ops_a <= metric_value(r.body, "colo_device_pool_ops_total{device=\"cpu\"}"));
    assert_true(metric_value(r.body, "colo_model_chunks_total{model=\"a\"}") >= ops_a);
    assert_true(metric_value(r.body, "colo_model_steps_total{model=\"a\",step=\"mixed\"}") >= 0);
    srv_resp_free(&r);
}

/* ---- lifecycle: each test runs its own server ---------------------------------------------- */

/* SIGTERM with a generation in flight: the request completes, the server
 * exits 0, and a new connection is refused after. */
static void test_sigterm_finishes_inflight(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    assert_true(srv_start(&f, "server: { listen: \"127.0.0.1:0\", device: cpu, cpu_memory_bytes: 256MiB }\n"
                              "models: [ { name: a, kind: llama, path: m.gguf, memory_fraction: 0.5 } ]\n"));
    int fd = srv_connect(f.port);
    assert_true(fd >= 0);
    char *raw = srv_post_raw("/v1/models/a/infer", NULL,
                             "{\"prompt\":\"long story\",\"max_tokens\":240,\"stream\":true,\"seed\":4}");
    assert_true(srv_send_all(fd, raw, strlen(raw)));
    free(raw);
    struct pollfd p = {fd, POLLIN, 0};
    assert_true(poll(&p, 1, 10000) > 0); /* it started */
    kill(f.pid, SIGTERM);
    size_t n;
    char *buf = srv_read_all(fd, 20000, &n);
    close(fd);
    assert_non_null(buf);
    assert_non_null(strstr(buf, "event: done"));
    assert_non_null(strstr(buf, "data: [DONE]"));
    free(buf);
    int st = 0;
    uint64_t t0 = srv_now_ms();
    while (waitpid(f.pid, &st, WNOHANG) == 0 && srv_now_ms() - t0 < 30000)
        srv_sleep_ms(10);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    f.pid = 0;
    assert_true(srv_connect(f.port) < 0);
    srv_cleanup(&f);
}

/* Startup failures exit 1 (2 for a configuration error) and name the model,
 * the file and what is wrong. */
static void test_startup_failures(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/m.gguf", f.dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    /* a truncated copy of the model */
    snprintf(cmd, sizeof cmd, "head -c %lld '%s' > '%s/cut.gguf'", (long long)sb.st_size / 2, path, f.dir);
    assert_int_equal(system(cmd), 0);
    static const struct {
        const char *yaml, *want1, *want2;
        int code;
    } cases[] = {
        {"models: [ { name: gone, kind: llama, path: missing.gguf, memory_fraction: 0.5 } ]\n", "gone",
         "missing.gguf", 1},
        {"models: [ { name: cut, kind: llama, path: cut.gguf, memory_fraction: 0.5 } ]\n", "cut", "cut.gguf", 1},
        {"models: [ { name: tiny, kind: llama, path: m.gguf, memory_fraction: 0.000001 } ]\n", "tiny", "needs", 1},
        {"models: [ { name: x, kind: llama, path: m.gguf, memory_fraction: 0.5, colour: red } ]\n", "colour",
         "config.yaml:", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "server: { listen: \"127.0.0.1:0\", device: cpu, cpu_memory_bytes: 256MiB }\n%s", cases[i].yaml);
        int code = srv_run_to_exit(&f, yaml);
        char *log = srv_log(&f);
        if (code != cases[i].code || !strstr(log, cases[i].want1) || !strstr(log, cases[i].want2))
            fprintf(stderr, "case %zu: exit %d, log:\n%s\n", i, code, log);
        assert_int_equal(code, cases[i].code); /* 2: a configuration error */
        assert_non_null(strstr(log, cases[i].want1));
        assert_non_null(strstr(log, cases[i].want2));
        free(log);
    }
    srv_cleanup(&f);
}

/* With server.api_key_env set, model routes need "Authorization: Bearer
 * KEY"; the health checks stay open for probes. */
static void test_api_key(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 2, 64, 512, 256));
    assert_true(srv_start_env(&f,
                              "server: { listen: \"127.0.0.1:0\", device: cpu, cpu_memory_bytes: 256MiB,"
                              " api_key_env: COLO_TEST_API_KEY }\n"
                              "models: [ { name: a, kind: llama, path: m.gguf, memory_fraction: 0.5 } ]\n",
                              "COLO_TEST_API_KEY=s3cret-key"));
    const char *body = "{\"prompt\":\"k\",\"max_tokens\":2}";
    srv_resp r;
    assert_true(srv_http(&f, "POST", "/v1/models/a/infer", body, &r));
    assert_int_equal(r.status, 401);
    json_t *j = srv_json(&r);
    assert_non_null(json_object_get(j, "error"));
    json_decref(j);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "POST", "/v1/models/a/infer", "Authorization: Bearer s3cret-kex\r\n", body, &r));
    assert_int_equal(r.status, 401);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "GET", "/v1/models", "Authorization: Bearer s3cret-key-and-more\r\n", NULL, &r));
    assert_int_equal(r.status, 401);
    srv_resp_free(&r);
    assert_true(srv_http_h(&f, "POST", "/v1/models/a/infer", "Authorization: Bearer s3cret-key\r\n", body, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_true(srv_http(&f, "GET", "/health/live", NULL, &r));
    assert_int_equal(r.status, 200);
    srv_resp_free(&r);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest shared_server[] = {
        cmocka_unit_test(test_two_models_generate),
        cmocka_unit_test(test_infer_answer),
        cmocka_unit_test(test_infer_stream),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_openai),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_pipelining),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_queue_timeout),
        cmocka_unit_test(test_disconnect_frees_sequence),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_metrics_where_time_goes),
    };
    const struct CMUnitTest own_server[] = {
        cmocka_unit_test(test_sigterm_finishes_inflight),
        cmocka_unit_test(test_startup_failures),
        cmocka_unit_test(test_api_key),
    };
    int failed = cmocka_run_group_tests_name("shared server", shared_server, setup, teardown);
    failed += cmocka_run_group_tests_name("own server", own_server, NULL, NULL);
    return failed;
}
