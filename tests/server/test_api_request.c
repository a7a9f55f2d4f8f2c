/* Decoding the model endpoints' JSON bodies (server/api/api_request.c): the
 * fields each endpoint takes, their defaults and ranges, the OpenAI fields
 * accepted and those refused, and an error naming the field for each bad
 * body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "server/api/api_request.h"

static const colo_api_limits lim = {.max_seq_len = 2048, .n_vocab = 49152, .max_prompt_bytes = 65536,
                                    .max_inputs = 64};

static void in_free(colo_api_input *in)
{
    colo_request_free(in->r);
    in->r = NULL;
}

/* Decodes text for (ep, kind) into a new request (in_free frees it); returns the status, message in err. */
static colo_status dec(const colo_api_body *ep, colo_task kind, const char *text, colo_api_input *in, char *err,
                       size_t errlen)
{
    json_error_t je;
    json_t *body = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je); /* the decoder must cope */
    if (!body)
        fail_msg("bad test JSON %s: %s", text, je.text);
    err[0] = 0;
    in->r = colo_request_create();
    assert_non_null(in->r);
    colo_status st = colo_api_decode(ep, kind, body, &lim, in, err, errlen);
    json_decref(body);
    return st;
}

static void test_infer_defaults(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"hi\"}", &in, err, sizeof err), COLO_OK);
    assert_string_equal(in.r->in.prompt, "hi");
    assert_int_equal(in.r->in.prompt_len, 2);
    assert_null(in.r->in.messages);
    assert_false(in.r->params.max_tokens_set);
    assert_int_equal(in.r->params.max_tokens, 256);
    assert_true(in.r->params.temperature == 1.0f);
    assert_true(in.r->params.top_p == 1.0f);
    assert_int_equal(in.r->params.top_k, 0);
    assert_true(in.r->params.seed == UINT64_MAX);
    assert_int_equal(in.r->params.n_stop, 0);
    assert_false(in.r->params.stream);
    assert_false(in.has_priority);
    in_free(&in);

    /* /v1/completions defaults to OpenAI's 16 tokens; the default never exceeds the context. */
    assert_int_equal(dec(&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":[\"x\"]}", &in, err,
                         sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.max_tokens, 16);
    assert_string_equal(in.r->in.prompt, "x");
    in_free(&in);
    colo_api_limits small = lim;
    small.max_seq_len = 100;
    json_t *b = json_loads("{\"prompt\":\"x\"}", 0, NULL);
    in.r = colo_request_create();
    assert_int_equal(colo_api_decode(&colo_api_body_infer, COLO_TASK_GENERATE, b, &small, &in, err, sizeof err), COLO_OK);
    assert_int_equal(in.r->params.max_tokens, 100);
    in_free(&in);
    json_decref(b);
}

static void test_infer_all_fields(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE,
                         "{\"prompt\":\"p\",\"max_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"top_k\":40,"
                         "\"seed\":123,\"stop\":[\"a\",\"bc\"],\"stream\":true,\"priority\":\"high\"}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.max_tokens, 7);
    assert_true(in.r->params.max_tokens_set);
    assert_true(in.r->params.temperature == 0.0f);
    assert_true(in.r->params.top_p == 0.5f);
    assert_int_equal(in.r->params.top_k, 40);
    assert_true(in.r->params.seed == 123);
    assert_int_equal(in.r->params.n_stop, 2);
    assert_string_equal(in.r->params.stop[0], "a");
    assert_string_equal(in.r->params.stop[1], "bc");
    assert_true(in.r->params.stream);
    assert_true(in.has_priority);
    assert_int_equal(in.priority, COLO_PRIO_HIGH);
    in_free(&in);

    /* A single stop string; messages in the ChatML template with special tokens. */
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE,
                         "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"}],"
                         "\"stop\":\"\\n\"}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.n_stop, 1);
    assert_string_equal(in.r->params.stop[0], "\n");
    /* the messages stay messages: the model's kind applies its template */
    assert_null(in.r->in.prompt);
    assert_int_equal(in.r->in.n_messages, 2);
    assert_string_equal(in.r->in.messages[0].role, "system");
    assert_string_equal(in.r->in.messages[0].content, "S");
    assert_string_equal(in.r->in.messages[1].role, "user");
    assert_string_equal(in.r->in.messages[1].content, "U");
    in_free(&in);
}

/* Each bad body is refused with a message that names the field. */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const colo_api_body *ep;
        colo_task kind;
        const char *body, *field;
    } cases[] = {
        {&colo_api_body_infer, COLO_TASK_GENERATE, "[]", "body"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "\"prompt\"", "body"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"\"}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":null}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":[\"x\"]}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"a\\u0000b\"}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"messages\":[]}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"extra\":1}", "extra"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"model\":\"m\"}", "model"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"user\":\"u\"}", "user"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"max_tokens\":2049}", "max_tokens"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", "max_tokens"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"max_tokens\":-9223372036854775807}", "max_tokens"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"temperature\":1e308}", "temperature"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"top_p\":0}", "top_p"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"top_p\":1.01}", "top_p"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"top_k\":-1}", "top_k"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"top_k\":49153}", "top_k"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"seed\":-1}", "seed"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"stop\":[1.5]}", "stop"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
         "stop"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"stream\":1}", "stream"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"priority\":\"HIGH\"}", "priority"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"messages\":[]}", "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"messages\":{}}", "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"messages\":[{\"role\":\"user\"}]}", "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]}",
         "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE,
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}", "messages"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"inputs\":[\"x\"]}", "inputs"},
        {&colo_api_body_infer, COLO_TASK_EMBED, "{\"prompt\":\"x\"}", "prompt"},
        {&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":[]}", "inputs"},
        {&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":[[1,2]]}", "inputs"},
        {&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":5}", "inputs"},
        {&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":\"x\",\"model\":\"m\"}", "model"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"messages\":[]}", "messages"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":17}", "n"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":0}", "n"},
        {&colo_api_body_chat, COLO_TASK_GENERATE, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":\"2\"}", "n"},
        {&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"n\":17}", "n"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":3}", "best_of"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":1}", "echo"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"presence_penalty\":2.5}",
         "presence_penalty"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"frequency_penalty\":\"1\"}",
         "frequency_penalty"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"repetition_penalty\":0}",
         "repetition_penalty"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"min_p\":1.5}", "min_p"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"x\":5}}",
         "logit_bias"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"49152\":5}}",
         "logit_bias"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"1\":101}}",
         "logit_bias"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[-1]}", "stop"},
        {&colo_api_body_chat, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", "top_logprobs"},
        {&colo_api_body_chat, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}", "logprobs"},
        {&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"s\"}", "suffix"},
        {&colo_api_body_chat, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\"}", "prompt"},
        {&colo_api_body_chat, COLO_TASK_GENERATE, "{\"model\":\"m\"}", "messages"},
        {&colo_api_body_chat, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages"},
        {&colo_api_body_chat, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
         "tools"},
        {&colo_api_body_chat, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}",
         "response_format"},
        {&colo_api_body_chat, COLO_TASK_EMBED, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "model"},
        {&colo_api_body_embeddings, COLO_TASK_GENERATE, "{\"model\":\"m\",\"input\":\"x\"}", "model"},
        {&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\"}", "input"},
        {&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":[[1,\"x\"]]}", "input"},
        {&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":\"x\",\"dimensions\":8}", "dimensions"},
        {&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":\"x\",\"encoding_format\":\"int8\"}",
         "encoding_format"},
        {&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"inputs\":\"x\"}", "inputs"},
#define UM "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\"," UM "}", "max_tokens"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4}", "messages"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":0," UM "}", "max_tokens"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"temperature\":1.5}",
         "temperature"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"stop_sequences\":\"x\"}",
         "stop_sequences"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"stop\":[\"x\"]}", "stop"},
        {&colo_api_body_messages, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "role"},
        {&colo_api_body_messages, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
         "image"},
        {&colo_api_body_messages, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "tool_result"},
        {&colo_api_body_messages, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
         "{\"role\":\"assistant\",\"content\":\"y\"}]}",
         "last message"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"system\":5}", "system"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"tools\":[{\"name\":\"f\"}]}",
         "tools"},
        {&colo_api_body_messages, COLO_TASK_GENERATE,
         "{\"model\":\"m\",\"max_tokens\":4," UM ",\"thinking\":{\"type\":\"deep\"}}",
         "thinking"},
        {&colo_api_body_messages, COLO_TASK_GENERATE, "{\"model\":\"m\",\"max_tokens\":4," UM ",\"n\":1}", "'n'"},
        {&colo_api_body_messages, COLO_TASK_EMBED, "{\"model\":\"m\",\"max_tokens\":4," UM "}", "model"},
        {&colo_api_body_count_tokens, COLO_TASK_GENERATE, "{\"model\":\"m\",\"messages\":[]}", "messages"},
        {&colo_api_body_count_tokens, COLO_TASK_GENERATE, "{\"model\":\"m\"," UM ",\"max_tokens\":4}", "max_tokens"},
        {&colo_api_body_tokenize, COLO_TASK_GENERATE, "{}", "prompt"},
        {&colo_api_body_tokenize, COLO_TASK_GENERATE, "{\"prompt\":\"x\"," UM "}", "prompt"},
        {&colo_api_body_tokenize, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"add_bos\":true}", "add_bos"},
        {&colo_api_body_tokenize, COLO_TASK_EMBED, "{" UM "}", "messages"},
        {&colo_api_body_detokenize, COLO_TASK_GENERATE, "{}", "tokens"},
        {&colo_api_body_detokenize, COLO_TASK_GENERATE, "{\"tokens\":[1,\"2\"]}", "tokens"},
        {&colo_api_body_detokenize, COLO_TASK_GENERATE, "{\"tokens\":[49152]}", "tokens"},
        {&colo_api_body_detokenize, COLO_TASK_GENERATE, "{\"tokens\":[-1]}", "tokens"},
        {&colo_api_body_detokenize, COLO_TASK_EMBED, "{\"tokens\":[1]}", "model"},
#undef UM
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        colo_api_input in;
        char err[256];
        colo_status st = dec(cases[i].ep, cases[i].kind, cases[i].body, &in, err, sizeof err);
        if (st != COLO_EINVAL || !strstr(err, cases[i].field))
            fprintf(stderr, "case %zu (%s): status %d, message \"%s\"; want EINVAL naming %s\n", i, cases[i].body, st,
                    err, cases[i].field);
        assert_int_equal(st, COLO_EINVAL);
        assert_non_null(strstr(err, cases[i].field));
        in_free(&in);
    }
}

/* Sampling fields: penalties, min-p, biases, stop token ids, logprobs, echo. */
static void test_sampling_fields(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_completions, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"prompt\":\"x\",\"presence_penalty\":0.5,\"frequency_penalty\":-1,"
                         "\"repetition_penalty\":1.1,\"min_p\":0.05,\"logit_bias\":{\"7\":-100,\"9\":2.5},"
                         "\"stop\":[\"END\",13,2],\"logprobs\":5,\"echo\":true}",
                         &in, err, sizeof err),
                     COLO_OK);
    colo_req_params *p = &in.r->params;
    assert_true(p->presence_penalty == 0.5f && p->frequency_penalty == -1.0f);
    assert_true(p->repetition_penalty == 1.1f && p->min_p == 0.05f);
    assert_int_equal(p->n_logit_bias, 2);
    assert_int_equal(p->n_stop, 1);
    assert_int_equal(p->n_stop_ids, 2);
    assert_int_equal(p->stop_ids[0], 13);
    assert_int_equal(p->logprobs, 5);
    assert_true(p->echo);
    in_free(&in);
    /* defaults: off */
    assert_int_equal(dec(&colo_api_body_completions, COLO_TASK_GENERATE, "{\"model\":\"m\",\"prompt\":\"x\"}", &in, err,
                         sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.logprobs, -1);
    assert_true(in.r->params.repetition_penalty == 1.0f);
    in_free(&in);
    /* chat: logprobs is a bool, top_logprobs the count */
    assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                         "\"top_logprobs\":4}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.logprobs, 4);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->params.logprobs, 0);
    in_free(&in);
}

/* Anthropic's Messages API: system first, text blocks joined, stop
 * sequences, the sampling fields; count_tokens without max_tokens. */
static void test_anthropic_messages(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_messages, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"max_tokens\":7,\"system\":[{\"type\":\"text\",\"text\":\"Be \"},"
                         "{\"type\":\"text\",\"text\":\"brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
                         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Why?\"}]}],"
                         "\"stop_sequences\":[\"END\",\"\\n\\n\"],\"temperature\":0.5,\"top_k\":40,\"top_p\":0.9,"
                         "\"stream\":true,\"metadata\":{\"user_id\":\"u\"},\"tools\":[]}",
                         &in, err, sizeof err),
                     COLO_OK);
    colo_request *r = in.r;
    assert_int_equal(r->in.n_messages, 4);
    assert_string_equal(r->in.messages[0].role, "system");
    assert_string_equal(r->in.messages[0].content, "Be brief.");
    assert_string_equal(r->in.messages[2].role, "assistant");
    assert_string_equal(r->in.messages[3].content, "Why?");
    assert_int_equal(r->params.max_tokens, 7);
    assert_true(r->params.max_tokens_set);
    assert_int_equal(r->params.n_stop, 2);
    assert_string_equal(r->params.stop[1], "\n\n");
    assert_true(r->params.temperature == 0.5f);
    assert_int_equal(r->params.top_k, 40);
    assert_true(r->params.stream);
    in_free(&in);
    /* extended thinking asked for, and an earlier turn's thinking blocks:
     * accepted; the reasoning is not part of the prompt */
    assert_int_equal(dec(&colo_api_body_messages, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"max_tokens\":7,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":["
                         "{\"type\":\"thinking\",\"thinking\":\"A greeting.\",\"signature\":\"s\"},"
                         "{\"type\":\"redacted_thinking\",\"data\":\"x\"},{\"type\":\"text\",\"text\":\"Hello\"}]},"
                         "{\"role\":\"user\",\"content\":\"Why?\"}]}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_messages, 3);
    assert_string_equal(in.r->in.messages[1].content, "Hello");
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_count_tokens, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_messages, 1);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_detokenize, COLO_TASK_GENERATE, "{\"tokens\":[0,5,49151]}", &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.n_tokens, 3);
    assert_int_equal(in.tokens[2], 49151);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_tokenize, COLO_TASK_EMBED, "{\"prompt\":\"two words\"}", &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_texts, 1);
    assert_string_equal(in.r->in.texts[0], "two words");
    in_free(&in);
}

/* OpenAI fields that are harmless to ignore are accepted. */
static void test_openai_accepted(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},"
                         "{\"role\":\"user\",\"name\":\"bob\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                         "{\"type\":\"text\",\"text\":\"b\"}]}],"
                         "\"n\":1,\"user\":\"u\",\"store\":false,\"metadata\":{\"k\":\"v\"},\"presence_penalty\":0,"
                         "\"frequency_penalty\":0,\"logit_bias\":{},\"logprobs\":false,\"tools\":[],"
                         "\"response_format\":{\"type\":\"text\"},\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true},\"max_completion_tokens\":9}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_true(in.include_usage);
    assert_true(in.r->params.stream);
    assert_int_equal(in.r->params.max_tokens, 9);
    assert_int_equal(in.r->in.n_messages, 2);
    assert_string_equal(in.r->in.messages[0].role, "system"); /* developer is system */
    assert_string_equal(in.r->in.messages[0].content, "d");
    assert_string_equal(in.r->in.messages[1].content, "ab"); /* text parts joined */
    in_free(&in);

    assert_int_equal(dec(&colo_api_body_embeddings, COLO_TASK_EMBED,
                         "{\"model\":\"m\",\"input\":[\"one\",\"two\"],\"encoding_format\":\"base64\",\"user\":\"u\"}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_texts, 2);
    assert_string_equal(in.r->in.texts[1], "two");
    assert_int_equal(in.r->in.text_lens[0], 3);
    assert_true(in.base64);
    in_free(&in);

    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":\"solo\",\"priority\":\"low\"}", &in, err,
                         sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_texts, 1);
    assert_int_equal(in.priority, COLO_PRIO_LOW);
    in_free(&in);
}

/* What chat UIs and agent frameworks send: OpenAI's fields that cannot
 * change colo's answer are accepted (null too), those asking for what colo
 * cannot do are refused, naming the field. */
static void test_openai_lenient(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    const char *head = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    static const char *const ok[] = {
        ",\"reasoning_effort\":\"low\",\"verbosity\":\"medium\",\"modalities\":[\"text\"]}",
        ",\"reasoning_effort\":null,\"verbosity\":null,\"modalities\":null,\"audio\":null,\"prediction\":null,"
        "\"web_search_options\":null,\"parallel_tool_calls\":true,\"service_tier\":\"auto\",\"store\":true}",
        ",\"prediction\":{\"type\":\"content\",\"content\":\"hello\"},\"web_search_options\":{}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char body[512];
        snprintf(body, sizeof body, "%s%s", head, ok[i]);
        if (dec(&colo_api_body_chat, COLO_TASK_GENERATE, body, &in, err, sizeof err) != COLO_OK)
            fail_msg("%s refused: %s", body, err);
        in_free(&in);
    }
    static const struct {
        const char *tail, *want;
    } refused[] = {
        {",\"modalities\":[\"text\",\"audio\"]}", "modalities: \"audio\" output is not supported"},
        {",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio: audio output is not supported"},
        {",\"reasoning_effort\":\"extreme\"}", "reasoning_effort: must be one of"},
        {",\"web_search_options\":{\"search_context_size\":\"low\"}}", "web_search_options: web search"},
        {",\"prediction\":{\"type\":\"guess\"}}", "prediction: must be"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char body[512];
        snprintf(body, sizeof body, "%s%s", head, refused[i].tail);
        assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_EINVAL);
        if (!strstr(err, refused[i].want))
            fail_msg("%s: got '%s', want '%s'", body, err, refused[i].want);
        in_free(&in);
    }
    /* response_format: json_object with a schema follows the schema (as
     * llama.cpp and vLLM do); a key colo does not know is refused, not
     * dropped */
    char body[512];
    snprintf(body, sizeof body, "%s%s", head,
             ",\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"object\","
             "\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}");
    assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_OK);
    assert_false(in.r->params.json_object);
    assert_non_null(in.r->params.json_schema);
    assert_non_null(strstr(in.r->params.json_schema, "\"required\""));
    in_free(&in);
    static const struct {
        const char *tail, *want;
    } formats[] = {
        {",\"response_format\":{\"type\":\"json_object\",\"json_schema\":{}}}", "response_format.json_schema: not a field"},
        {",\"response_format\":{\"type\":\"text\",\"schema\":{}}}", "response_format.schema: not a field"},
        {",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{},"
         "\"strictness\":1}}}", "response_format.json_schema.strictness"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        snprintf(body, sizeof body, "%s%s", head, formats[i].tail);
        assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_EINVAL);
        if (!strstr(err, formats[i].want))
            fail_msg("%s: got '%s', want '%s'", body, err, formats[i].want);
        in_free(&in);
    }
    /* embeddings: token ids, one input or several; truncate asked for */
    assert_int_equal(dec(&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":[5,6,7]}", &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_texts, 1);
    assert_int_equal(in.r->in.token_lens[0], 3);
    assert_int_equal(in.r->in.token_inputs[0][2], 7);
    assert_false(in.r->params.truncate);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":[[5],[6,7]],\"truncate\":true}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_int_equal(in.r->in.n_texts, 2);
    assert_int_equal(in.r->in.token_lens[1], 2);
    assert_true(in.r->params.truncate);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_embeddings, COLO_TASK_EMBED, "{\"model\":\"m\",\"input\":[[5],[99999999]]}", &in, err,
                         sizeof err),
                     COLO_EINVAL);
    assert_non_null(strstr(err, "input[1][0]: not a token id"));
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_EMBED, "{\"inputs\":[\"a\"]}", &in, err, sizeof err), COLO_OK);
    assert_true(in.r->params.truncate); /* /infer cuts, as it always has */
    in_free(&in);
    /* the native route stays strict */
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE, "{\"prompt\":\"x\",\"reasoning_effort\":\"low\"}", &in,
                         err, sizeof err),
                     COLO_EINVAL);
    assert_non_null(strstr(err, "unknown field 'reasoning_effort'"));
    in_free(&in);
}

/* OpenAI's Responses API: read as the chat completion it asks for. */
/* speculative: false asks for plain decoding on every generation route;
 * absent or true leaves the model's config in charge; another value is
 * refused with the field's name. */
static void test_speculative_opt_out(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    static const struct {
        const colo_api_body *ep;
        const char *body; /* with %s: the field */
    } routes[] = {
        {&colo_api_body_infer, "{\"prompt\":\"x\"%s}"},
        {&colo_api_body_completions, "{\"model\":\"m\",\"prompt\":\"x\"%s}"},
        {&colo_api_body_chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]%s}"},
        {&colo_api_body_messages,
         "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]%s}"},
        {&colo_api_body_responses, "{\"model\":\"m\",\"input\":\"x\"%s}"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        char t[512];
        snprintf(t, sizeof t, routes[i].body, ",\"speculative\":false");
        if (dec(routes[i].ep, COLO_TASK_GENERATE, t, &in, err, sizeof err) != COLO_OK)
            fail_msg("%s: %s", t, err);
        assert_true(in.r->params.no_spec);
        in_free(&in);
        snprintf(t, sizeof t, routes[i].body, ",\"speculative\":true");
        assert_int_equal(dec(routes[i].ep, COLO_TASK_GENERATE, t, &in, err, sizeof err), COLO_OK);
        assert_false(in.r->params.no_spec);
        in_free(&in);
        snprintf(t, sizeof t, routes[i].body, "");
        assert_int_equal(dec(routes[i].ep, COLO_TASK_GENERATE, t, &in, err, sizeof err), COLO_OK);
        assert_false(in.r->params.no_spec);
        in_free(&in);
        snprintf(t, sizeof t, routes[i].body, ",\"speculative\":\"off\"");
        assert_int_not_equal(dec(routes[i].ep, COLO_TASK_GENERATE, t, &in, err, sizeof err), COLO_OK);
        if (!strstr(err, "speculative"))
            fail_msg("%s: %s", t, err);
        in_free(&in);
    }
}

static void test_responses(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_responses, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"input\":\"Hi\",\"instructions\":\"Be brief.\",\"max_output_tokens\":9,"
                         "\"temperature\":0.5,\"store\":false,\"reasoning\":{\"effort\":\"low\"},\"truncation\":\"auto\","
                         "\"include\":[],\"metadata\":{\"k\":\"v\"},\"stream\":true}",
                         &in, err, sizeof err),
                     COLO_OK);
    colo_request *r = in.r;
    assert_int_equal(r->in.n_messages, 2);
    assert_string_equal(r->in.messages[0].role, "system");
    assert_string_equal(r->in.messages[0].content, "Be brief.");
    assert_string_equal(r->in.messages[1].content, "Hi");
    assert_int_equal(r->params.max_tokens, 9);
    assert_true(r->params.max_tokens_set);
    assert_true(r->params.temperature == 0.5f);
    assert_true(r->params.stream);
    in_free(&in);
    /* items: messages with text parts, a call and its output; flat tools;
     * text.format json_schema */
    assert_int_equal(dec(&colo_api_body_responses, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                         "\"text\":\"Weather?\"}]},{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"w\","
                         "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"},"
                         "{\"type\":\"reasoning\",\"summary\":[]}],"
                         "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}],"
                         "\"tool_choice\":{\"type\":\"function\",\"name\":\"w\"}}",
                         &in, err, sizeof err),
                     COLO_OK);
    r = in.r;
    assert_int_equal(r->in.n_messages, 3);
    assert_string_equal(r->in.messages[1].role, "assistant");
    assert_int_equal(r->in.messages[1].n_tool_calls, 1);
    assert_string_equal(r->in.messages[1].tool_calls[0].id, "call_1");
    assert_string_equal(r->in.messages[2].role, "tool");
    assert_string_equal(r->in.messages[2].tool_call_id, "call_1");
    assert_int_equal(r->params.n_tools, 1);
    assert_int_equal(r->params.tool_choice, COLO_TOOLS_NAMED);
    in_free(&in);
    assert_int_equal(dec(&colo_api_body_responses, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\","
                         "\"schema\":{\"type\":\"object\"},\"strict\":true}}}",
                         &in, err, sizeof err),
                     COLO_OK);
    assert_non_null(in.r->params.json_schema);
    in_free(&in);
    static const struct {
        const char *body, *want;
    } refused[] = {
        {"{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":7}", "previous_response_id:"},
        {"{\"model\":\"m\",\"input\":\"x\",\"store\":\"yes\"}", "store:"},
        {"{\"model\":\"m\",\"input\":\"x\",\"background\":true}", "background:"},
        {"{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens:"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]: only function tools"},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
         "input[0].content[0]: only text parts"},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"file_search_call\"}]}", "input[0]: items of type 'file_search_call'"},
        {"{\"model\":\"m\"}", "input: required"},
        {"{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format"},
        {"{\"model\":\"m\",\"input\":\"x\",\"colour\":1}", "unknown field 'colour'"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        assert_int_equal(dec(&colo_api_body_responses, COLO_TASK_GENERATE, refused[i].body, &in, err, sizeof err), COLO_EINVAL);
        if (strncmp(err, refused[i].want, strlen(refused[i].want)) && !strstr(err, refused[i].want))
            fail_msg("%s: got '%s', want '%s'", refused[i].body, err, refused[i].want);
        in_free(&in);
    }
}

/* Size limits: prompt bytes, number of inputs, messages. */
static void test_limits(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    size_t n = lim.max_prompt_bytes + 1;
    char *body = malloc(n + 64);
    assert_non_null(body);
    int k = sprintf(body, "{\"prompt\":\"");
    memset(body + k, 'y', n);
    strcpy(body + k + n, "\"}");
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_ETOOLONG);
    assert_non_null(strstr(err, "longer"));
    in_free(&in);
    body[k + n - 1] = 0; /* exactly the limit */
    strcat(body, "\"}");
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_OK);
    assert_int_equal(in.r->in.prompt_len, lim.max_prompt_bytes);
    in_free(&in);
    free(body);

    char many[1024] = "{\"inputs\":[";
    for (int i = 0; i <= lim.max_inputs; i++)
        strcat(many, i ? ",\"a\"" : "\"a\"");
    strcat(many, "]}");
    assert_int_equal(dec(&colo_api_body_infer, COLO_TASK_EMBED, many, &in, err, sizeof err), COLO_EINVAL);
    assert_non_null(strstr(err, "at most 64"));
    in_free(&in);
}

static void test_model_field_and_priority(void **state)
{
    (void)state;
    char err[128];
    json_t *b = json_loads("{\"model\":\"smollm2\"}", 0, NULL);
    assert_string_equal(colo_api_model_field(b, err, sizeof err), "smollm2");
    json_decref(b);
    const char *bad[] = {"{}", "{\"model\":3}", "{\"model\":null}", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        b = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        assert_null(colo_api_model_field(b, err, sizeof err));
        assert_non_null(strstr(err, "model"));
        json_decref(b);
    }
    colo_priority p;
    const char *names[] = {"high", "normal", "low"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(colo_priority_parse(names[i], &p), COLO_OK);
        assert_string_equal(colo_priority_name(p), names[i]);
    }
    assert_int_not_equal(colo_priority_parse("medium", &p), COLO_OK);
    assert_int_not_equal(colo_priority_parse("", &p), COLO_OK);
}

/* response_format json_schema, tools, tool_choice and tool messages, in
 * OpenAI's and Anthropic's shapes, into the request record. */
static void test_structured_and_tools(void **state)
{
    (void)state;
    colo_api_input in;
    char err[256];
    assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                         "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":"
                         "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}}}}",
                         &in, err, sizeof err),
                     COLO_OK);
    /* the schema as text, its properties in the client's order */
    assert_string_equal(in.r->params.json_schema, "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}");
    assert_false(in.r->params.json_object);
    in_free(&in);
    assert_int_equal(
        dec(&colo_api_body_chat, COLO_TASK_GENERATE,
            "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
            "\"parameters\":{\"type\":\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
            "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"messages\":["
            "{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
            "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
            "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]}",
            &in, err, sizeof err),
        COLO_OK);
    assert_int_equal(in.r->params.n_tools, 2);
    assert_string_equal(in.r->params.tools[0].name, "f");
    assert_string_equal(in.r->params.tools[0].description, "d");
    assert_string_equal(in.r->params.tools[0].parameters, "{\"type\":\"object\"}");
    assert_string_equal(in.r->params.tools[1].description, "");
    assert_int_equal(in.r->params.tool_choice, COLO_TOOLS_NAMED);
    assert_string_equal(in.r->params.tool_name, "g");
    assert_int_equal(in.r->in.n_messages, 3);
    assert_string_equal(in.r->in.messages[1].content, "");
    assert_int_equal(in.r->in.messages[1].n_tool_calls, 1);
    assert_string_equal(in.r->in.messages[1].tool_calls[0].name, "f");
    assert_string_equal(in.r->in.messages[1].tool_calls[0].arguments, "{}");
    assert_string_equal(in.r->in.messages[2].role, "tool");
    assert_string_equal(in.r->in.messages[2].tool_call_id, "c1");
    in_free(&in);
    /* Anthropic: tool_use into the assistant's calls, tool_result into a tool message before the text */
    assert_int_equal(
        dec(&colo_api_body_messages, COLO_TASK_GENERATE,
            "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"add\",\"input_schema\":{\"type\":\"object\"}}],"
            "\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"add\"},"
            "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"tool_use\",\"id\":"
            "\"t1\",\"name\":\"add\",\"input\":{\"a\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":"
            "\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"1\"},{\"type\":\"text\",\"text\":\"and?\"}]}]}",
            &in, err, sizeof err),
        COLO_OK);
    assert_int_equal(in.r->params.tool_choice, COLO_TOOLS_REQUIRED);
    assert_int_equal(in.r->in.n_messages, 4);
    assert_string_equal(in.r->in.messages[1].content, "ok");
    assert_int_equal(in.r->in.messages[1].n_tool_calls, 1);
    assert_string_equal(in.r->in.messages[1].tool_calls[0].arguments, "{\"a\":1}");
    assert_string_equal(in.r->in.messages[2].role, "tool");
    assert_string_equal(in.r->in.messages[2].content, "1");
    assert_string_equal(in.r->in.messages[3].content, "and?");
    in_free(&in);
    /* a content block without a type (or not an object) is a 400, whatever blocks come with it */
    static const char *const untyped[] = {
        "[{\"type\":\"text\",\"text\":\"ok\"},{\"text\":\"x\"}]",
        "[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"add\",\"input\":{}},{\"type\":7}]",
        "[1]",
    };
    for (size_t i = 0; i < sizeof untyped / sizeof *untyped; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"assistant\",\"content\":%s}]}",
                 untyped[i]);
        assert_int_equal(dec(&colo_api_body_messages, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_EINVAL);
        assert_non_null(strstr(err, "messages"));
        in_free(&in);
    }
    /* refusals name the field */
    static const char *const bad[][2] = {
        {"\"tool_choice\":\"always\"", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "tools[0]"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\"}}]",
         "a second tool named 'f'"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":[1]}}",
         "response_format.json_schema.schema"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}",
                 bad[i][0]);
        assert_int_equal(dec(&colo_api_body_chat, COLO_TASK_GENERATE, body, &in, err, sizeof err), COLO_EINVAL);
        if (!strstr(err, bad[i][1]))
            fail_msg("%s: '%s' lacks '%s'", body, err, bad[i][1]);
        in_free(&in);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infer_defaults),          cmocka_unit_test(test_infer_all_fields),
        cmocka_unit_test(test_refusals),                cmocka_unit_test(test_openai_accepted),
        cmocka_unit_test(test_limits),                  cmocka_unit_test(test_model_field_and_priority),
        cmocka_unit_test(test_anthropic_messages),      cmocka_unit_test(test_sampling_fields),
        cmocka_unit_test(test_structured_and_tools),    cmocka_unit_test(test_openai_lenient),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_speculative_opt_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
