/* Fuzz target: the model endpoints' JSON bodies (server/api_request.h),
 * parsed as the server parses them (colo_json_parse, server/http_json.h).
 * The first byte picks the endpoint and model kind (bits 0-2) and the
 * limits (bit 3: a large model or a tiny one); the rest is the body. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_request.h"
#include "server/http_json.h"
#include "fuzz_common.h"

static const colo_api_limits limits[2] = {
    {.max_seq_len = 2048, .n_vocab = 49152, .max_prompt_bytes = 2048 * 32, .max_inputs = 64},
    {.max_seq_len = 16, .n_vocab = 300, .max_prompt_bytes = 64, .max_inputs = 2},
};

/* What a decoded request promises the executors. */
static void check(colo_api_endpoint ep, colo_model_kind kind, const colo_api_limits *lim, const colo_api_input *in)
{
    (void)ep;
    if (kind == COLO_KIND_BERT) {
        if (in->n_inputs < 1 || in->n_inputs > lim->max_inputs || !in->inputs || !in->input_lens)
            abort();
        for (int i = 0; i < in->n_inputs; i++)
            if (!in->inputs[i] || strlen(in->inputs[i]) != in->input_lens[i] ||
                in->input_lens[i] > lim->max_prompt_bytes)
                abort();
        return;
    }
    if (!in->prompt || !in->prompt_len || strlen(in->prompt) != in->prompt_len ||
        in->prompt_len > lim->max_prompt_bytes)
        abort();
    if (in->params.max_tokens < 1 || in->params.max_tokens > lim->max_seq_len || in->params.top_k < 0 ||
        in->params.top_k > lim->n_vocab || in->params.n_stop < 0 || in->params.n_stop > COLO_REQ_MAX_STOP)
        abort();
    for (int i = 0; i < in->params.n_stop; i++)
        if (!in->params.stop[i])
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(NULL);
    if (size < 1)
        return 0;
    colo_api_endpoint ep = (colo_api_endpoint)(data[0] & 3);
    colo_model_kind kind = data[0] & 4 ? COLO_KIND_BERT : COLO_KIND_LLAMA;
    const colo_api_limits *lim = &limits[(data[0] >> 3) & 1];
    char err[512];
    json_t *body = colo_json_parse((const char *)data + 1, size - 1, COLO_JSON_MAX_DEPTH, err, sizeof err);
    if (!body)
        return 0;
    err[0] = 0;
    const char *model = colo_api_model_field(body, err, sizeof err);
    if (!model && !err[0])
        abort();
    colo_api_input in;
    colo_status st = colo_api_decode(ep, kind, body, lim, &in, err, sizeof err);
    if (st == COLO_OK)
        check(ep, kind, lim, &in);
    else if (st != COLO_EINVAL)
        abort(); /* every refusal is a 400 */
    colo_api_input_free(&in);
    json_decref(body);
    return 0;
}
