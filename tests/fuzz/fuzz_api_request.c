/* Fuzz target: the model endpoints' JSON bodies (server/api/api_request.h),
 * parsed as the server parses them (colo_json_parse, server/http/http_json.h).
 * The first byte picks the endpoint (bits 0-1 and 4), the model's task
 * (bit 2) and the limits (bit 3: a large model or a tiny one); the rest is
 * the body. A JSON Schema the request carries is compiled. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/sample/json_schema.h"
#include "server/api/api_request.h"
#include "server/http/http_json.h"
#include "fuzz_common.h"

static const colo_api_limits limits[2] = {
    {.max_seq_len = 2048, .n_vocab = 49152, .max_prompt_bytes = 2048 * 32, .max_inputs = 64},
    {.max_seq_len = 16, .n_vocab = 300, .max_prompt_bytes = 64, .max_inputs = 2},
};

/* What a decoded request promises the models' kinds. */
static void check(const colo_api_body *ep, colo_task task, const colo_api_limits *lim, const colo_api_input *ai)
{
    const colo_request *r = ai->r;
    const colo_req_input *in = &r->in;
    if (r->task != task)
        abort();
    if (ep == &colo_api_body_detokenize) {
        if (ai->n_tokens < 0 || (ai->n_tokens && !ai->tokens))
            abort();
        for (int i = 0; i < ai->n_tokens; i++)
            if (ai->tokens[i] < 0 || ai->tokens[i] >= lim->n_vocab)
                abort();
        return;
    }
    if (task == COLO_TASK_EMBED && in->token_inputs) {
        if (in->n_texts < 1 || in->n_texts > lim->max_inputs || !in->token_lens || in->texts)
            abort();
        for (int i = 0; i < in->n_texts; i++)
            for (int k = 0; k < in->token_lens[i]; k++)
                if (in->token_inputs[i][k] < 0 || in->token_inputs[i][k] >= lim->n_vocab)
                    abort();
        return;
    }
    if (task == COLO_TASK_EMBED) {
        if (in->n_texts < 1 || in->n_texts > lim->max_inputs || !in->texts || !in->text_lens)
            abort();
        for (int i = 0; i < in->n_texts; i++)
            if (!in->texts[i] || strlen(in->texts[i]) != in->text_lens[i] || in->text_lens[i] > lim->max_prompt_bytes)
                abort();
        return;
    }
    if (!in->prompt == !in->messages)
        abort();
    if (in->prompt && (!in->prompt_len || strlen(in->prompt) != in->prompt_len || in->prompt_len > lim->max_prompt_bytes))
        abort();
    for (int i = 0; in->messages && i < in->n_messages; i++)
        if (!in->messages[i].role || !in->messages[i].content)
            abort();
    if (r->params.max_tokens < 1 || r->params.max_tokens > lim->max_seq_len || r->params.top_k < 0 ||
        r->params.top_k > lim->n_vocab || r->params.n_stop < 0 || r->params.n_stop > COLO_REQ_MAX_STOP)
        abort();
    for (int i = 0; i < r->params.n_stop; i++)
        if (!r->params.stop[i])
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(NULL);
    if (size < 1)
        return 0;
    /* the first byte picks the endpoint, in the order the corpus was made with */
    static const colo_api_body *const bodies[] = {
        &colo_api_body_infer,    &colo_api_body_completions, &colo_api_body_chat,
        &colo_api_body_embeddings, &colo_api_body_messages,  &colo_api_body_count_tokens,
        &colo_api_body_tokenize, &colo_api_body_detokenize,  &colo_api_body_responses,
    };
    const colo_api_body *ep = bodies[data[0] % (sizeof bodies / sizeof *bodies)];
    colo_task task = data[0] & 4 ? COLO_TASK_EMBED : COLO_TASK_GENERATE;
    const colo_api_limits *lim = &limits[(data[0] >> 3) & 1];
    char err[512];
    json_t *body = colo_json_parse((const char *)data + 1, size - 1, COLO_JSON_MAX_DEPTH, err, sizeof err);
    if (!body)
        return 0;
    err[0] = 0;
    const char *model = colo_api_model_field(body, err, sizeof err);
    if (!model && !err[0])
        abort();
    colo_request *r = colo_request_create();
    if (!r)
        abort();
    colo_api_input in = {.r = r};
    colo_status st = colo_api_decode(ep, task, body, lim, &in, err, sizeof err);
    if (st == COLO_OK) {
        check(ep, task, lim, &in);
        /* the schema compiler sees what a client sends (the model's
         * preparation compiles it before admission) */
        if (r->params.json_schema) {
            colo_schema *g = colo_schema_compile(r->params.json_schema, strlen(r->params.json_schema), err, sizeof err);
            if (!g && !err[0])
                abort();
            colo_schema_free(g);
        }
    } else if (st != COLO_EINVAL && st != COLO_ETOOLONG)
        abort(); /* every refusal is a 400 (a prompt past the context: context_length_exceeded) */
    colo_request_free(r);
    json_decref(body);
    return 0;
}
