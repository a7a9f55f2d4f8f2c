/* Request bodies of the model endpoints -> colo_api_input. */
#include "server/api/api_request.h"

#include "server/api/api_tools.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP_BYTES 256
#define MAX_MESSAGES 1024

const char *colo_api_model_field(json_t *body, char *err, size_t errlen)
{
    json_t *v = json_object_get(body, "model");
    if (!v) {
        colo_set_err(err, errlen, "model: required (the name of a served model)");
        return NULL;
    }
    if (!json_is_string(v)) {
        colo_set_err(err, errlen, "model: must be a string");
        return NULL;
    }
    return json_string_value(v);
}

/* ---- field checks ------------------------------------------------------------- */

typedef struct colo_api_body body_rules;

typedef struct dec {
    const body_rules *rules; /* what the endpoint reads */
    const struct field *const *fields; /* its fields for this model (body_rules) */
    colo_task task;
    const colo_api_limits *lim;
    colo_api_input *in;
    char *err;
    size_t errlen;
    json_t *prompt, *messages, *input, *system, *tokens;
    json_t *chat; /* the Responses API: the chat body it is read as */
    bool max_tokens_set;
    int top_logprobs;  /* chat: top_logprobs (-1: not given) */
    bool logprobs_off; /* chat: logprobs: false */
} dec;

static colo_status bad(dec *d, const char *key, const char *what)
{
    colo_set_err(d->err, d->errlen, "%s: %s", key, what);
    return COLO_EINVAL;
}

/* A string without NUL bytes. */
static bool plain_string(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static colo_status get_int(dec *d, const char *key, json_t *v, long long lo, long long hi, long long *out)
{
    if (!json_is_integer(v))
        return bad(d, key, "must be an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        colo_set_err(d->err, d->errlen, "%s: %lld is out of range [%lld, %lld]", key, x, lo, hi);
        return COLO_EINVAL;
    }
    *out = x;
    return COLO_OK;
}

static colo_status get_num(dec *d, const char *key, json_t *v, double lo, double hi, bool lo_open, double *out)
{
    if (!json_is_number(v))
        return bad(d, key, "must be a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
        colo_set_err(d->err, d->errlen, "%s: %g is out of range %s%g, %g]", key, x, lo_open ? "(" : "[", lo, hi);
        return COLO_EINVAL;
    }
    *out = x;
    return COLO_OK;
}

static colo_status get_bool(dec *d, const char *key, json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return bad(d, key, "must be true or false");
    *out = json_is_true(v);
    return COLO_OK;
}

/* logit_bias: {"token id": bias in [-100, 100]} (at most 1024 entries). */
static colo_status logit_bias(dec *d, json_t *v)
{
    if (!json_is_object(v))
        return bad(d, "logit_bias", "must be an object of \"token id\": bias");
    size_t n = json_object_size(v);
    if (n > 1024)
        return bad(d, "logit_bias", "more than 1024 entries");
    colo_req_logit_bias *b = colo_pool_calloc(d->in->r->pool, n ? n : 1, sizeof *b);
    if (!b)
        return bad(d, "logit_bias", "out of memory");
    const char *k;
    json_t *x;
    size_t i = 0;
    json_object_foreach(v, k, x) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= d->lim->n_vocab) {
            colo_set_err(d->err, d->errlen, "logit_bias: '%.32s' is not a token id of this model (0 to %d)", k,
                         d->lim->n_vocab - 1);
            return COLO_EINVAL;
        }
        if (!json_is_number(x) || !isfinite(json_number_value(x)) || json_number_value(x) < -100 ||
            json_number_value(x) > 100)
            return bad(d, "logit_bias", "each bias must be a number from -100 to 100");
        b[i].token = (int32_t)id;
        b[i++].bias = (float)json_number_value(x);
    }
    d->in->r->params.logit_bias = b;
    d->in->r->params.n_logit_bias = (int)n;
    return COLO_OK;
}

static colo_status add_stop(dec *d, json_t *s)
{
    colo_api_input *in = d->in;
    if (json_is_integer(s)) { /* a token id */
        if (json_integer_value(s) < 0 || json_integer_value(s) >= d->lim->n_vocab)
            return bad(d, "stop", "a token id outside the vocabulary");
        if (in->r->params.n_stop_ids >= COLO_REQ_MAX_STOP)
            return bad(d, "stop", "at most 8 stop token ids");
        in->r->params.stop_ids[in->r->params.n_stop_ids++] = (int32_t)json_integer_value(s);
        return COLO_OK;
    }
    if (!plain_string(s) || json_string_length(s) == 0)
        return bad(d, "stop", "must be a non-empty string, a token id, or an array of them");
    if (json_string_length(s) > MAX_STOP_BYTES)
        return bad(d, "stop", "a stop string is longer than 256 bytes");
    if (in->r->params.n_stop >= COLO_REQ_MAX_STOP)
        return bad(d, "stop", "at most 8 stop strings");
    char *c = colo_pool_strndup(in->r->pool, json_string_value(s), json_string_length(s));
    if (!c)
        return bad(d, "stop", "out of memory");
    in->r->params.stop[in->r->params.n_stop++] = c;
    return COLO_OK;
}

/* ---- fields, one handler each ------------------------------------------------------ */

/* A body field's reader; a dialect's fields are tables of them, looked up
 * by name (unknown names are refused). null_ok: on the OpenAI-compatible
 * routes, null means "not given". */
typedef colo_status (*field_fn)(dec *d, const char *key, json_t *v);
typedef struct field {
    const char *name;
    field_fn fn;
    bool null_ok;
} field;

/* One endpoint's body: its fields for a generative model and for an
 * encoder (NULL: refused for that kind of model), and what decoding
 * them means. */
struct colo_api_body {
    /* for a generative model: its fields (NULL-ended tables) and what
     * reading them means; NULL: refused */
    const field *const *gen;
    colo_status (*decode_gen)(dec *d, json_t *body);
    const field *const *embed; /* the same for an encoder */
    colo_status (*decode_embed)(dec *d, json_t *body);
    const char *hint;          /* after "unknown field 'x'" */
    bool openai;               /* null means "not given"; text parts in messages; a message may have a name */
    bool chat;                 /* tool roles and calls in messages */
    bool prompt_array;         /* prompt may be ["one string"] */
    bool count;                /* count_tokens: max_tokens not needed */
    const char *required;      /* the field named when neither prompt nor messages is given */
    const char *required_why;
    int default_max_tokens;
};

static colo_status f_skip(dec *d, const char *key, json_t *v)
{
    (void)d, (void)key, (void)v;
    return COLO_OK;
}

static colo_status f_prompt(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->prompt = v;
    return COLO_OK;
}

static colo_status f_messages(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->messages = v;
    return COLO_OK;
}

static colo_status f_system(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->system = v;
    return COLO_OK;
}

static colo_status f_input(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->input = v;
    return COLO_OK;
}

static colo_status f_tokens(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->tokens = v;
    return COLO_OK;
}

static colo_status f_max_tokens(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 1, d->lim->max_seq_len, &x);
    if (st == COLO_OK) {
        d->in->r->params.max_tokens = (int)x;
        d->max_tokens_set = true;
    }
    return st;
}

static colo_status f_temperature(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, 0, 2, false, &f);
    if (st == COLO_OK)
        d->in->r->params.temperature = (float)f;
    return st;
}

/* Anthropic's range is [0, 1]. */
static colo_status f_temperature_1(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, 0, 1, false, &f);
    if (st == COLO_OK)
        d->in->r->params.temperature = (float)f;
    return st;
}

static colo_status f_top_p(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, 0, 1, true, &f);
    if (st == COLO_OK)
        d->in->r->params.top_p = (float)f;
    return st;
}

static colo_status f_top_k(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 0, d->lim->n_vocab, &x);
    if (st == COLO_OK)
        d->in->r->params.top_k = (int)x;
    return st;
}

static colo_status f_seed(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 0, INT64_MAX, &x);
    if (st == COLO_OK)
        d->in->r->params.seed = (uint64_t)x;
    return st;
}

static colo_status f_stop(dec *d, const char *key, json_t *v)
{
    (void)key;
    if (!json_is_array(v))
        return add_stop(d, v);
    size_t i;
    json_t *s;
    colo_status st = COLO_OK;
    json_array_foreach(v, i, s) if ((st = add_stop(d, s)) != COLO_OK) return st;
    return COLO_OK;
}

static colo_status f_stop_sequences(dec *d, const char *key, json_t *v)
{
    if (!json_is_array(v))
        return bad(d, key, "must be an array of strings");
    return f_stop(d, key, v);
}

static colo_status f_stream(dec *d, const char *key, json_t *v)
{
    return get_bool(d, key, v, &d->in->r->params.stream);
}

static colo_status f_stream_options(dec *d, const char *key, json_t *v)
{
    if (!json_is_object(v))
        return bad(d, key, "must be an object");
    json_t *u = json_object_get(v, "include_usage");
    return u ? get_bool(d, "stream_options.include_usage", u, &d->in->include_usage) : COLO_OK;
}

static colo_status f_priority(dec *d, const char *key, json_t *v)
{
    if (!json_is_string(v) || colo_priority_parse(json_string_value(v), &d->in->priority) != COLO_OK)
        return bad(d, key, "must be \"high\", \"normal\" or \"low\"");
    d->in->has_priority = true;
    return COLO_OK;
}

/* presence_penalty, frequency_penalty */
static colo_status f_penalty(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, -2, 2, false, &f);
    if (st == COLO_OK)
        *(key[0] == 'p' ? &d->in->r->params.presence_penalty : &d->in->r->params.frequency_penalty) = (float)f;
    return st;
}

static colo_status f_repetition_penalty(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, 0, 10, true, &f);
    if (st == COLO_OK)
        d->in->r->params.repetition_penalty = (float)f;
    return st;
}

static colo_status f_min_p(dec *d, const char *key, json_t *v)
{
    double f;
    colo_status st = get_num(d, key, v, 0, 1, false, &f);
    if (st == COLO_OK)
        d->in->r->params.min_p = (float)f;
    return st;
}

static colo_status f_logit_bias(dec *d, const char *key, json_t *v)
{
    (void)key;
    return logit_bias(d, v);
}

/* /infer and completions: how many top alternatives per token. */
static colo_status f_logprobs_n(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 0, COLO_REQ_MAX_LOGPROBS, &x);
    if (st == COLO_OK)
        d->in->r->params.logprobs = (int)x;
    return st;
}

/* Chat: a bool; top_logprobs says how many. */
static colo_status f_logprobs_bool(dec *d, const char *key, json_t *v)
{
    bool on = false;
    colo_status st = get_bool(d, key, v, &on);
    if (st == COLO_OK && on && d->in->r->params.logprobs < 0)
        d->in->r->params.logprobs = 0;
    if (st == COLO_OK && !on)
        d->logprobs_off = true;
    return st;
}

static colo_status f_top_logprobs(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 0, COLO_REQ_MAX_LOGPROBS, &x);
    if (st == COLO_OK)
        d->top_logprobs = (int)x;
    return st;
}

/* choices sharing the prompt */
static colo_status f_n(dec *d, const char *key, json_t *v)
{
    long long x;
    colo_status st = get_int(d, key, v, 1, COLO_REQ_MAX_CHOICES, &x);
    if (st == COLO_OK)
        d->in->r->params.n = (int)x;
    return st;
}

static colo_status f_echo(dec *d, const char *key, json_t *v)
{
    return get_bool(d, key, v, &d->in->r->params.echo);
}

static colo_status f_best_of(dec *d, const char *key, json_t *v)
{
    if (json_is_integer(v) && json_integer_value(v) == 1)
        return COLO_OK;
    return bad(d, key, "only 1 is supported");
}

static bool off(json_t *v)
{
    return json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_string(v) && !strcmp(json_string_value(v), "none"));
}

/* Accepted only when they say "off": ignoring them would change results. */
static colo_status f_off(dec *d, const char *key, json_t *v)
{
    return off(v) ? COLO_OK : bad(d, key, "is not supported on this endpoint");
}

static colo_status f_off_chat(dec *d, const char *key, json_t *v)
{
    return off(v) ? COLO_OK : bad(d, key, "is not supported (use tools and tool_choice)");
}

static colo_status f_response_format(dec *d, const char *key, json_t *v)
{
    (void)key;
    return colo_api_response_format(d->in->r, v, d->err, d->errlen);
}

static colo_status f_openai_tools(dec *d, const char *key, json_t *v)
{
    (void)key;
    return colo_api_openai_tools(d->in->r, v, d->err, d->errlen);
}

static colo_status f_openai_tool_choice(dec *d, const char *key, json_t *v)
{
    (void)key;
    return colo_api_openai_tool_choice(d->in->r, v, d->err, d->errlen);
}

static colo_status f_anthropic_tools(dec *d, const char *key, json_t *v)
{
    (void)key;
    return colo_api_anthropic_tools(d->in->r, v, d->err, d->errlen);
}

static colo_status f_anthropic_tool_choice(dec *d, const char *key, json_t *v)
{
    (void)key;
    return colo_api_anthropic_tool_choice(d->in->r, v, d->err, d->errlen);
}

/* output_config, container: only empty. */
static colo_status f_empty_object(dec *d, const char *key, json_t *v)
{
    return json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ? COLO_OK
                                                                              : bad(d, key, "is not supported");
}

static colo_status f_mcp_servers(dec *d, const char *key, json_t *v)
{
    return json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0)
               ? COLO_OK
               : bad(d, key, "MCP servers are not supported");
}

/* thinking: {"type": "enabled", "budget_tokens": N} or disabled. Accepted:
 * a reasoning model (a DeepSeek-R1 distill) thinks as it was trained to,
 * and another one does not; the budget cannot be honoured and is not. */
static colo_status f_thinking(dec *d, const char *key, json_t *v)
{
    if (json_is_null(v))
        return COLO_OK;
    json_t *t = json_object_get(v, "type"), *b = json_object_get(v, "budget_tokens");
    if (!json_is_object(v) || !json_is_string(t) ||
        (strcmp(json_string_value(t), "enabled") && strcmp(json_string_value(t), "disabled")))
        return bad(d, key, "must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    if (b && (!json_is_integer(b) || json_integer_value(b) < 1))
        return bad(d, key, "budget_tokens must be a positive integer");
    return COLO_OK;
}

/* One of names (NULL-ended), or refused naming them. */
static colo_status one_of(dec *d, const char *key, json_t *v, const char *const *names)
{
    for (int i = 0; json_is_string(v) && names[i]; i++)
        if (!strcmp(json_string_value(v), names[i]))
            return COLO_OK;
    char all[160] = "";
    for (int i = 0; names[i]; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s\"%s\"", i ? ", " : "", names[i]);
    colo_set_err(d->err, d->errlen, "%s: must be one of %s", key, all);
    return COLO_EINVAL;
}

/* reasoning_effort: the models colo serves take no reasoning budget;
 * a valid value is accepted and changes nothing. */
static colo_status f_reasoning_effort(dec *d, const char *key, json_t *v)
{
    static const char *const names[] = {"none", "minimal", "low", "medium", "high", NULL};
    return one_of(d, key, v, names);
}

/* verbosity: a hint to models trained for it; accepted, changes nothing. */
static colo_status f_verbosity(dec *d, const char *key, json_t *v)
{
    static const char *const names[] = {"low", "medium", "high", NULL};
    return one_of(d, key, v, names);
}

/* modalities: text only. */
static colo_status f_modalities(dec *d, const char *key, json_t *v)
{
    if (!json_is_array(v))
        return bad(d, key, "must be an array, e.g. [\"text\"]");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (!json_is_string(m))
            return bad(d, key, "must be an array of strings");
        if (strcmp(json_string_value(m), "text")) {
            colo_set_err(d->err, d->errlen, "%s: \"%.32s\" output is not supported (only \"text\")", key,
                         json_string_value(m));
            return COLO_EINVAL;
        }
    }
    return COLO_OK;
}

/* audio: the parameters of audio output, which colo does not make. */
static colo_status f_audio(dec *d, const char *key, json_t *v)
{
    (void)v;
    return bad(d, key, "audio output is not supported");
}

/* prediction: a predicted output only speeds up the answer elsewhere; it
 * cannot change it. Accepted when well-formed and ignored. */
static colo_status f_prediction(dec *d, const char *key, json_t *v)
{
    json_t *t = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(t) || strcmp(json_string_value(t), "content"))
        return bad(d, key, "must be {\"type\": \"content\", \"content\": ...}");
    return COLO_OK;
}

/* web_search_options: colo searches nothing; only an empty object. */
static colo_status f_web_search(dec *d, const char *key, json_t *v)
{
    return json_is_object(v) && json_object_size(v) == 0 ? COLO_OK : bad(d, key, "web search is not supported");
}

static colo_status f_encoding_format(dec *d, const char *key, json_t *v)
{
    if (!json_is_string(v) || (strcmp(json_string_value(v), "float") && strcmp(json_string_value(v), "base64")))
        return bad(d, key, "must be \"float\" or \"base64\"");
    d->in->base64 = !strcmp(json_string_value(v), "base64");
    return COLO_OK;
}

/* speculative: false: plain decoding, nothing drafted (the same output);
 * true: as the model's config says. */
static colo_status f_speculative(dec *d, const char *key, json_t *v)
{
    bool on;
    colo_status st = get_bool(d, key, v, &on);
    if (st == COLO_OK)
        d->in->r->params.no_spec = !on;
    return st;
}

static colo_status f_truncate(dec *d, const char *key, json_t *v)
{
    return get_bool(d, key, v, &d->in->r->params.truncate);
}

static colo_status f_dimensions(dec *d, const char *key, json_t *v)
{
    (void)v;
    return bad(d, key, "is not supported (the model's embeddings have a fixed size)");
}

/* ---- the tables -------------------------------------------------------------------- */

/* Generation fields of /infer and the OpenAI-compatible routes. */
static const field gen_fields[] = {
    {"max_tokens", f_max_tokens, true},
    {"temperature", f_temperature, true},
    {"top_p", f_top_p, true},
    {"top_k", f_top_k, false},
    {"seed", f_seed, true},
    {"stop", f_stop, true},
    {"stream", f_stream, true},
    {"priority", f_priority, false},
    {"presence_penalty", f_penalty, true},
    {"frequency_penalty", f_penalty, true},
    {"repetition_penalty", f_repetition_penalty, true},
    {"min_p", f_min_p, true},
    {"logit_bias", f_logit_bias, true},
    {"n", f_n, true},
    {"speculative", f_speculative, false},
    {NULL, NULL, false},
};

static const field infer_gen_fields[] = {
    {"prompt", f_prompt, false},
    {"messages", f_messages, false},
    {"logprobs", f_logprobs_n, false},
    {NULL, NULL, false},
};

/* Accepted and ignored on the OpenAI-compatible routes: they change
 * nothing here (docs/API.md). */
static const field openai_fields[] = {
    {"model", f_skip, false},
    {"user", f_skip, false},
    {"store", f_skip, false},
    {"metadata", f_skip, false},
    {"service_tier", f_skip, false},
    {"parallel_tool_calls", f_skip, false},
    {"prompt_cache_key", f_skip, false},
    {"safety_identifier", f_skip, false},
    {"best_of", f_best_of, true},
    {"stream_options", f_stream_options, true},
    {"response_format", f_response_format, false},
    {NULL, NULL, false},
};

static const field completions_fields[] = {
    {"prompt", f_prompt, false},
    {"logprobs", f_logprobs_n, true},
    {"echo", f_echo, true},
    {"suffix", f_off, false},
    {"tools", f_off, false},
    {"tool_choice", f_off, false},
    {"functions", f_off, false},
    {"function_call", f_off, false},
    {NULL, NULL, false},
};

static const field chat_fields[] = {
    {"messages", f_messages, false},
    {"max_completion_tokens", f_max_tokens, true},
    {"logprobs", f_logprobs_bool, true},
    {"top_logprobs", f_top_logprobs, true},
    {"tools", f_openai_tools, false},
    {"tool_choice", f_openai_tool_choice, false},
    {"suffix", f_off_chat, false},
    {"functions", f_off_chat, false},
    {"function_call", f_off_chat, false},
    {"reasoning_effort", f_reasoning_effort, true},
    {"verbosity", f_verbosity, true},
    {"modalities", f_modalities, true},
    {"audio", f_audio, true},
    {"prediction", f_prediction, true},
    {"web_search_options", f_web_search, true},
    {NULL, NULL, false},
};

/* Anthropic's count_tokens takes these and the generation's below. */
static const field anthropic_count_fields[] = {
    {"model", f_skip, false},
    {"system", f_system, false},
    {"messages", f_messages, false},
    {"metadata", f_skip, false},
    {"service_tier", f_skip, false},
    {"cache_control", f_skip, false},
    {"inference_geo", f_skip, false},
    {"speed", f_skip, false},
    {"user_profile_id", f_skip, false},
    {"workspace_id", f_skip, false},
    {"diagnostics", f_skip, false},
    {"output_config", f_empty_object, false},
    {"container", f_empty_object, false},
    {"tools", f_anthropic_tools, false},
    {"tool_choice", f_anthropic_tool_choice, false},
    {"mcp_servers", f_mcp_servers, false},
    {"thinking", f_thinking, false},
    {NULL, NULL, false},
};

static const field anthropic_fields[] = {
    {"max_tokens", f_max_tokens, false},
    {"temperature", f_temperature_1, false},
    {"top_p", f_top_p, false},
    {"top_k", f_top_k, false},
    {"stop_sequences", f_stop_sequences, false},
    {"stream", f_stream, false},
    {"priority", f_priority, false},
    {"speculative", f_speculative, false},
    {NULL, NULL, false},
};

static const field embeddings_fields[] = {
    {"input", f_input, false},
    {"model", f_skip, false},
    {"user", f_skip, false},
    {"encoding_format", f_encoding_format, true},
    {"dimensions", f_dimensions, true},
    {"truncate", f_truncate, true},
    {"priority", f_priority, false},
    {NULL, NULL, false},
};

static const field infer_embed_fields[] = {
    {"inputs", f_input, false},
    {"priority", f_priority, false},
    {NULL, NULL, false},
};

static const field tokenize_fields[] = {
    {"prompt", f_prompt, false},
    {"messages", f_messages, false},
    {NULL, NULL, false},
};

static const field detokenize_fields[] = {
    {"tokens", f_tokens, false},
    {NULL, NULL, false},
};

/* Reads every field of body through tables (a NULL-ended list, searched
 * in order); an unknown name is refused, with hint after it. */
static colo_status read_fields(dec *d, json_t *body, const field *const *tables, const char *hint)
{
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        const field *f = NULL;
        for (int t = 0; !f && tables[t]; t++)
            for (const field *x = tables[t]; x->name; x++)
                if (!strcmp(x->name, key)) {
                    f = x;
                    break;
                }
        if (!f) {
            colo_set_err(d->err, d->errlen, "unknown field '%.32s'%s", key, hint);
            return COLO_EINVAL;
        }
        if (f->null_ok && d->rules->openai && json_is_null(v))
            continue;
        colo_status st = f->fn(d, key, v);
        if (st != COLO_OK)
            return st;
    }
    return COLO_OK;
}

/* ---- what each endpoint reads -------------------------------------------------------- */

static colo_status decode_gen(dec *d, json_t *body);
static colo_status decode_responses(dec *d, json_t *body);
static colo_status decode_embed(dec *d, json_t *body);
static colo_status decode_anthropic(dec *d, json_t *body);
static colo_status decode_tokenize(dec *d, json_t *body);
static colo_status decode_detokenize(dec *d, json_t *body);

/* ---- OpenAI's Responses API ------------------------------------------------------- */

/* A Responses body is read as the chat completion it asks for: its fields
 * are turned into chat's (input items into messages, text.format into
 * response_format, flat tools into chat's), and the chat decoder checks
 * them; a message names the Responses field. */
static colo_status r_set(dec *d, const char *key, json_t *v)
{
    return json_object_set(d->chat, key, v) ? bad(d, key, "out of memory") : COLO_OK;
}

static colo_status r_copy(dec *d, const char *key, json_t *v) { return r_set(d, key, v); }

static colo_status r_input(dec *d, const char *key, json_t *v)
{
    (void)key;
    d->input = v;
    return COLO_OK;
}

static colo_status r_instructions(dec *d, const char *key, json_t *v)
{
    if (!json_is_null(v) && !json_is_string(v))
        return bad(d, key, "must be a string");
    d->system = v;
    return COLO_OK;
}

static colo_status r_max_output_tokens(dec *d, const char *key, json_t *v)
{
    (void)key;
    return r_set(d, "max_completion_tokens", v);
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", "name",
 * "schema", "strict"}} -> response_format. */
static colo_status r_text(dec *d, const char *key, json_t *v)
{
    if (!json_is_object(v))
        return bad(d, key, "must be {\"format\": {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}}");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) if (strcmp(k, "format") && strcmp(k, "verbosity"))
    {
        colo_set_err(d->err, d->errlen, "text.%.32s: not a field of text (format, verbosity)", k);
        return COLO_EINVAL;
    }
    json_t *f = json_object_get(v, "format"), *t = json_object_get(f, "type");
    if (!f || json_is_null(f))
        return COLO_OK;
    if (!json_is_object(f) || !json_is_string(t))
        return bad(d, "text.format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    json_t *rf;
    if (!strcmp(json_string_value(t), "json_schema")) {
        json_t *inner = json_deep_copy(f);
        if (!inner)
            return bad(d, key, "out of memory");
        json_object_del(inner, "type");
        rf = json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", inner);
    } else {
        rf = json_deep_copy(f);
    }
    if (!rf || json_object_set_new(d->chat, "response_format", rf))
        return bad(d, key, "out of memory");
    return COLO_OK;
}

/* tools: [{"type": "function", "name", "description", "parameters", "strict"}]
 * -> chat's [{"type": "function", "function": {...}}]. */
static colo_status r_tools(dec *d, const char *key, json_t *v)
{
    if (!json_is_array(v))
        return bad(d, key, "must be an array of {\"type\": \"function\", \"name\", \"parameters\"}");
    json_t *tools = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function")) {
            json_decref(tools);
            colo_set_err(d->err, d->errlen, "tools[%zu]: only function tools are supported (no built-in tools)", i);
            return COLO_EINVAL;
        }
        json_t *fn = json_deep_copy(t);
        if (fn)
            json_object_del(fn, "type");
        if (!fn || json_array_append_new(tools, json_pack("{s:s,s:o}", "type", "function", "function", fn))) {
            json_decref(tools);
            return bad(d, key, "out of memory");
        }
    }
    if (json_object_set_new(d->chat, "tools", tools))
        return bad(d, key, "out of memory");
    return COLO_OK;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "name"}. */
static colo_status r_tool_choice(dec *d, const char *key, json_t *v)
{
    json_t *name = json_object_get(v, "name");
    if (json_is_object(v) && json_is_string(name))
        return json_object_set_new(d->chat, key, json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name))
                   ? bad(d, key, "out of memory")
                   : COLO_OK;
    return r_set(d, key, v);
}

static colo_status r_false_only(dec *d, const char *key, json_t *v)
{
    if (json_is_false(v))
        return COLO_OK;
    return bad(d, key, "only false is supported");
}

static colo_status r_store(dec *d, const char *key, json_t *v)
{
    if (!json_is_boolean(v) && !json_is_null(v))
        return bad(d, key, "must be a boolean");
    d->in->store = json_is_true(v);
    return COLO_OK;
}

/* The response this one continues: its conversation was put before input
 * by the front end (server/responses.c) before the body is read. */
static colo_status r_previous(dec *d, const char *key, json_t *v)
{
    if (json_is_null(v))
        return COLO_OK;
    if (!plain_string(v) || json_string_length(v) == 0 || json_string_length(v) > 128)
        return bad(d, key, "must be a response's id");
    colo_request *r = d->in->r;
    d->in->previous_response_id = colo_pool_strndup(r->pool, json_string_value(v), json_string_length(v));
    return d->in->previous_response_id ? COLO_OK : bad(d, key, "out of memory");
}

/* reasoning: {"effort", "summary"}: the models colo serves take no budget. */
static colo_status r_reasoning(dec *d, const char *key, json_t *v)
{
    return json_is_object(v) ? COLO_OK : bad(d, key, "must be an object");
}

static colo_status r_truncation(dec *d, const char *key, json_t *v)
{
    static const char *const names[] = {"disabled", "auto", NULL};
    return one_of(d, key, v, names);
}

static colo_status r_include(dec *d, const char *key, json_t *v)
{
    return json_is_array(v) ? COLO_OK : bad(d, key, "must be an array");
}

static const field responses_fields[] = {
    {"model", f_skip, false},
    {"input", r_input, false},
    {"instructions", r_instructions, true},
    {"max_output_tokens", r_max_output_tokens, true},
    {"temperature", r_copy, true},
    {"top_p", r_copy, true},
    {"stream", r_copy, true},
    {"text", r_text, true},
    {"tools", r_tools, true},
    {"tool_choice", r_tool_choice, true},
    {"parallel_tool_calls", f_skip, true},
    {"store", r_store, true},
    {"background", r_false_only, true},
    {"previous_response_id", r_previous, true},
    {"reasoning", r_reasoning, true},
    {"truncation", r_truncation, true},
    {"include", r_include, true},
    {"metadata", f_skip, false},
    {"user", f_skip, false},
    {"service_tier", f_skip, false},
    {"prompt_cache_key", f_skip, false},
    {"safety_identifier", f_skip, false},
    {"max_tool_calls", f_skip, true},
    {"priority", r_copy, false},
    {"speculative", r_copy, false},
    {NULL, NULL, false},
};

#define TABLES(...) (const field *const[]){__VA_ARGS__, NULL}

/* One per endpoint dialect; each dialect's row (api_dialect.c) names its own. */
const colo_api_body colo_api_body_infer = {
    TABLES(gen_fields, infer_gen_fields), decode_gen, TABLES(infer_embed_fields), decode_embed, "",
    .required = "prompt", .required_why = "required (or messages)", .default_max_tokens = 256};
const colo_api_body colo_api_body_completions = {
    TABLES(gen_fields, openai_fields, completions_fields), decode_gen, NULL, NULL, "", .openai = true,
    .prompt_array = true, .required = "prompt", .required_why = "required", .default_max_tokens = 16};
const colo_api_body colo_api_body_chat = {
    TABLES(gen_fields, openai_fields, chat_fields), decode_gen, NULL, NULL, "", .openai = true, .chat = true,
    .required = "messages", .required_why = "required", .default_max_tokens = 256};
const colo_api_body colo_api_body_embeddings = {NULL, NULL, TABLES(embeddings_fields), decode_embed, "",
                                                .openai = true};
const colo_api_body colo_api_body_messages = {TABLES(anthropic_count_fields, anthropic_fields), decode_anthropic,
                                              NULL, NULL, .hint = ""};
const colo_api_body colo_api_body_count_tokens = {TABLES(anthropic_count_fields), decode_anthropic, NULL, NULL, "",
                                                  .count = true};
const colo_api_body colo_api_body_tokenize = {TABLES(tokenize_fields), decode_tokenize, TABLES(tokenize_fields),
                                              decode_tokenize, .hint = " (give prompt or messages)"};
const colo_api_body colo_api_body_detokenize = {TABLES(detokenize_fields), decode_detokenize, NULL, NULL,
                                                .hint = " (give tokens)"};
const colo_api_body colo_api_body_responses = {TABLES(responses_fields), decode_responses, NULL, NULL, "",
                                               .openai = true};

/* ---- prompts ------------------------------------------------------------------ */

static colo_status check_prompt_bytes(dec *d, size_t len)
{
    if (len == 0)
        return bad(d, d->messages ? "messages" : "prompt", "is empty");
    if (d->lim->max_prompt_bytes && len > d->lim->max_prompt_bytes) {
        colo_set_err(d->err, d->errlen, "%s: %zu bytes is longer than the model's context allows (%zu bytes)",
                     d->messages ? "messages" : "prompt", len, d->lim->max_prompt_bytes);
        return COLO_ETOOLONG;
    }
    return COLO_OK;
}

static colo_status decode_prompt(dec *d)
{
    json_t *v = d->prompt;
    if (json_is_array(v) && d->rules->prompt_array) {
        if (json_array_size(v) != 1 || !json_is_string(json_array_get(v, 0)))
            return bad(d, "prompt", "must be a string (or an array of exactly one string)");
        v = json_array_get(v, 0);
    }
    if (!json_is_string(v))
        return bad(d, "prompt", "must be a string");
    if (!plain_string(v))
        return bad(d, "prompt", "must not contain NUL characters");
    colo_request *r = d->in->r;
    colo_status st = check_prompt_bytes(d, json_string_length(v));
    if (st != COLO_OK)
        return st;
    if (!(r->in.prompt = colo_pool_strndup(r->pool, json_string_value(v), json_string_length(v))))
        return bad(d, "prompt", "out of memory");
    r->in.prompt_len = json_string_length(v);
    return COLO_OK;
}

/* content: a string, or (OpenAI) an array of {"type":"text","text":...} parts. */
static colo_status message_content(dec *d, json_t *c, const char **out, size_t *len)
{
    colo_pool *pool = d->in->r->pool;
    if (plain_string(c)) {
        *len = json_string_length(c);
        *out = colo_pool_strndup(pool, json_string_value(c), *len);
        return *out ? COLO_OK : bad(d, "messages", "out of memory");
    }
    if (!json_is_array(c) || !d->rules->openai)
        return bad(d, "messages", "each content must be a string without NUL characters");
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) {
        json_t *t = json_object_get(p, "type"), *x = json_object_get(p, "text");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !plain_string(x))
            return bad(d, "messages", "content parts must be {\"type\":\"text\",\"text\":\"...\"}");
        total += json_string_length(x);
    }
    char *s = colo_pool_alloc(pool, total + 1);
    if (!s)
        return bad(d, "messages", "out of memory");
    size_t o = 0;
    json_array_foreach(c, i, p) {
        json_t *x = json_object_get(p, "text");
        memcpy(s + o, json_string_value(x), json_string_length(x));
        o += json_string_length(x);
    }
    s[o] = 0;
    *out = s;
    *len = o;
    return COLO_OK;
}

static colo_status decode_messages(dec *d)
{
    json_t *v = d->messages;
    colo_request *r = d->in->r;
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(d, "messages", "must be a non-empty array of {\"role\",\"content\"}");
    size_t n = json_array_size(v);
    if (n > MAX_MESSAGES)
        return bad(d, "messages", "more than 1024 messages");
    colo_chat_message *msgs = colo_pool_calloc(r->pool, n, sizeof *msgs);
    if (!msgs)
        return bad(d, "messages", "out of memory");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i), *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        bool chat = d->rules->chat;
        json_t *calls = chat ? json_object_get(m, "tool_calls") : NULL;
        const char *rl = json_string_value(role);
        /* an assistant turn that only calls tools may have no content */
        bool no_content = rl && !strcmp(rl, "assistant") && calls && !json_is_null(calls) && (!c || json_is_null(c));
        if (!json_is_object(m) || !json_is_string(role) || (!c && !no_content))
            return bad(d, "messages", "each message needs a string role and a content");
        if (!strcmp(rl, "developer"))
            rl = "system";
        if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant") && (!chat || strcmp(rl, "tool")))
            return bad(d, "messages", chat ? "role must be system, user, assistant or tool"
                                           : "role must be system, user or assistant");
        const char *k;
        json_t *x;
        json_object_foreach(m, k, x) if (strcmp(k, "role") && strcmp(k, "content") &&
                                         (!d->rules->openai || strcmp(k, "name")) &&
                                         (!chat || (strcmp(k, "tool_calls") && strcmp(k, "tool_call_id") &&
                                                    strcmp(k, "refusal"))))
        {
            colo_set_err(d->err, d->errlen, "messages: unknown field '%s' in a message", k);
            return COLO_EINVAL;
        }
        size_t len;
        colo_status st = COLO_OK;
        if (no_content)
            msgs[i].content = "", len = 0;
        else
            st = message_content(d, c, &msgs[i].content, &len);
        if (st != COLO_OK)
            return st;
        /* the role names are static: "system", "user", "assistant", "tool" */
        msgs[i].role = !strcmp(rl, "system") ? "system" : !strcmp(rl, "user") ? "user"
                       : !strcmp(rl, "tool")                                 ? "tool"
                                                                             : "assistant";
        if (calls && !strcmp(rl, "assistant") &&
            (st = colo_api_openai_message_calls(r, calls, &msgs[i], d->err, d->errlen)) != COLO_OK)
            return st;
        json_t *tcid = json_object_get(m, "tool_call_id");
        if (json_is_string(tcid) && !(msgs[i].tool_call_id = colo_pool_strndup(r->pool, json_string_value(tcid),
                                                                               json_string_length(tcid))))
            return bad(d, "messages", "out of memory");
        total += len + strlen(rl);
    }
    colo_status st = check_prompt_bytes(d, total);
    if (st != COLO_OK)
        return st;
    r->in.messages = msgs;
    r->in.n_messages = (int)n;
    return COLO_OK;
}

/* One input's token ids (an array of integers). */
static colo_status token_input(dec *d, const char *key, json_t *a, size_t i, const int32_t **out, int *n)
{
    size_t len = json_array_size(a);
    if (len == 0 || len > (size_t)d->lim->max_seq_len * 4 + 64) {
        colo_set_err(d->err, d->errlen, "%s[%zu]: %zu token ids (1 to %d)", key, i, len, d->lim->max_seq_len * 4 + 64);
        return COLO_EINVAL;
    }
    int32_t *ids = colo_pool_alloc(d->in->r->pool, len * sizeof *ids);
    if (!ids)
        return bad(d, key, "out of memory");
    for (size_t k = 0; k < len; k++) {
        json_t *t = json_array_get(a, k);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= d->lim->n_vocab) {
            colo_set_err(d->err, d->errlen, "%s[%zu][%zu]: not a token id of this model (0 to %d)", key, i, k,
                         d->lim->n_vocab - 1);
            return COLO_EINVAL;
        }
        ids[k] = (int32_t)json_integer_value(t);
    }
    *out = ids;
    *n = (int)len;
    return COLO_OK;
}

/* input as token ids, OpenAI's two forms: [1, 2, 3] (one input) or
 * [[1, 2], [3]]. */
static colo_status decode_token_inputs(dec *d, const char *key)
{
    colo_request *r = d->in->r;
    json_t *v = d->input;
    bool one = json_is_integer(json_array_get(v, 0));
    size_t n = one ? 1 : json_array_size(v);
    if ((int)n > d->lim->max_inputs) {
        colo_set_err(d->err, d->errlen, "%s: %zu inputs; at most %d per request", key, n, d->lim->max_inputs);
        return COLO_EINVAL;
    }
    const int32_t **ids = colo_pool_calloc(r->pool, n, sizeof *ids);
    int *lens = colo_pool_calloc(r->pool, n, sizeof *lens);
    if (!ids || !lens)
        return bad(d, key, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *a = one ? v : json_array_get(v, i);
        if (!json_is_array(a))
            return bad(d, key, "must be a string, an array of strings, an array of token ids or an array of them");
        colo_status st = token_input(d, key, a, i, &ids[i], &lens[i]);
        if (st != COLO_OK)
            return st;
    }
    r->in.token_inputs = ids;
    r->in.token_lens = lens;
    r->in.n_texts = (int)n;
    return COLO_OK;
}

static colo_status decode_inputs(dec *d, const char *key)
{
    colo_request *r = d->in->r;
    json_t *v = d->input;
    json_t *first = json_array_get(v, 0);
    if (d->rules->openai && (json_is_integer(first) || json_is_array(first)))
        return decode_token_inputs(d, key);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return bad(d, key, "must be a string or an array of strings");
    if (n == 0)
        return bad(d, key, "is empty");
    if ((int)n > d->lim->max_inputs || n > 1u << 20) {
        colo_set_err(d->err, d->errlen, "%s: %zu inputs; at most %d per request", key, n, d->lim->max_inputs);
        return COLO_EINVAL;
    }
    const char **texts = colo_pool_calloc(r->pool, n, sizeof *texts);
    size_t *lens = colo_pool_calloc(r->pool, n, sizeof *lens);
    if (!texts || !lens)
        return bad(d, key, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!plain_string(s))
            return bad(d, key, json_is_string(s) ? "inputs must not contain NUL characters"
                                                 : "must be a string or an array of strings");
        if (d->lim->max_prompt_bytes && json_string_length(s) > d->lim->max_prompt_bytes)
            return bad(d, key, "an input is too long");
        if (!(texts[i] = colo_pool_strndup(r->pool, json_string_value(s), json_string_length(s))))
            return bad(d, key, "out of memory");
        lens[i] = json_string_length(s);
    }
    r->in.texts = texts;
    r->in.text_lens = lens;
    r->in.n_texts = (int)n;
    return COLO_OK;
}

/* ---- Anthropic's Messages API ---------------------------------------------------- */

/* A content: a string or an array of {"type":"text","text":...} blocks
 * (cache_control and citations are accepted and have no effect). */
static colo_status anthropic_content(dec *d, const char *key, json_t *c, const char **out, size_t *len)
{
    colo_pool *pool = d->in->r->pool;
    if (json_is_string(c)) {
        if (!plain_string(c))
            return bad(d, key, "must not contain NUL characters");
        *len = json_string_length(c);
        *out = colo_pool_strndup(pool, json_string_value(c), *len);
        return *out ? COLO_OK : bad(d, key, "out of memory");
    }
    if (!json_is_array(c))
        return bad(d, key, "must be a string or an array of content blocks");
    size_t total = 0, i;
    json_t *b;
    json_array_foreach(c, i, b) {
        json_t *t = json_object_get(b, "type"), *x = json_object_get(b, "text");
        if (!json_is_object(b) || !json_is_string(t))
            return bad(d, key, "each content block needs a string type");
        if (!strcmp(key, "messages") &&
            (!strcmp(json_string_value(t), "tool_use") || !strcmp(json_string_value(t), "tool_result")))
            continue; /* read by anthropic_tool_blocks */
        if (!strcmp(key, "messages") &&
            (!strcmp(json_string_value(t), "thinking") || !strcmp(json_string_value(t), "redacted_thinking")))
            continue; /* an earlier turn's reasoning: not part of the prompt, as in Anthropic's API */
        if (strcmp(json_string_value(t), "text")) {
            colo_set_err(d->err, d->errlen, "%s: content blocks of type '%.32s' are not supported (only text)", key,
                         json_string_value(t));
            return COLO_EINVAL;
        }
        if (!plain_string(x))
            return bad(d, key, "a text block needs a text string without NUL characters");
        const char *k;
        json_t *v;
        json_object_foreach(b, k, v) if (strcmp(k, "type") && strcmp(k, "text") && strcmp(k, "cache_control") &&
                                         strcmp(k, "citations"))
        {
            colo_set_err(d->err, d->errlen, "%s: unknown field '%.32s' in a text block", key, k);
            return COLO_EINVAL;
        }
        total += json_string_length(x);
    }
    char *s = colo_pool_alloc(pool, total + 1);
    if (!s)
        return bad(d, key, "out of memory");
    size_t o = 0;
    json_array_foreach(c, i, b) {
        json_t *x = json_object_get(b, "text");
        if (!json_is_string(x) || strcmp(json_string_value(json_object_get(b, "type")), "text"))
            continue;
        memcpy(s + o, json_string_value(x), json_string_length(x));
        o += json_string_length(x);
    }
    s[o] = 0;
    *out = s;
    *len = o;
    return COLO_OK;
}

/* The tool_use blocks of an assistant message (into m's calls), or the
 * tool_result blocks of a user message (each a "tool" message at
 * msgs[*k], *k advanced). */
static colo_status anthropic_tool_blocks(dec *d, json_t *c, bool assistant, colo_chat_message *m,
                                         colo_chat_message *msgs, int *k)
{
    colo_request *r = d->in->r;
    if (!json_is_array(c))
        return COLO_OK;
    size_t i, n_use = 0;
    json_t *b;
    json_array_foreach(c, i, b) {
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!t)
            return bad(d, "messages", "each content block needs a string \"type\"");
        n_use += !strcmp(t, "tool_use");
    }
    colo_req_tool_call *calls = n_use ? colo_pool_calloc(r->pool, n_use, sizeof *calls) : NULL;
    if (n_use && !calls)
        return bad(d, "messages", "out of memory");
    json_array_foreach(c, i, b) {
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!strcmp(t, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!assistant)
                return bad(d, "messages", "tool_use blocks belong in assistant messages");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input))
                return bad(d, "messages", "a tool_use block needs an id, a name and an input object");
            char *args = json_dumps(input, JSON_COMPACT);
            colo_req_tool_call *tc = &calls[m->n_tool_calls++];
            tc->id = colo_pool_strndup(r->pool, json_string_value(id), json_string_length(id));
            tc->name = colo_pool_strndup(r->pool, json_string_value(name), json_string_length(name));
            tc->arguments = args ? colo_pool_strndup(r->pool, args, strlen(args)) : NULL;
            free(args);
            if (!tc->id || !tc->name || !tc->arguments)
                return bad(d, "messages", "out of memory");
            m->tool_calls = calls;
        } else if (!strcmp(t, "tool_result")) {
            json_t *id = json_object_get(b, "tool_use_id"), *rc = json_object_get(b, "content");
            if (assistant)
                return bad(d, "messages", "tool_result blocks belong in user messages");
            if (!json_is_string(id))
                return bad(d, "messages", "a tool_result block needs a tool_use_id");
            colo_chat_message *tm = &msgs[(*k)++];
            size_t len = 0;
            tm->role = "tool";
            tm->content = "";
            if (rc && !json_is_null(rc)) {
                colo_status st = anthropic_content(d, "tool_result", rc, &tm->content, &len);
                if (st != COLO_OK)
                    return st;
            }
            if (!(tm->tool_call_id = colo_pool_strndup(r->pool, json_string_value(id), json_string_length(id))))
                return bad(d, "messages", "out of memory");
        }
    }
    return COLO_OK;
}

/* system + messages -> the request's chat (system first). */
static colo_status anthropic_chat(dec *d, json_t *system, json_t *messages)
{
    colo_request *r = d->in->r;
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return bad(d, "messages", "required: a non-empty array of {\"role\",\"content\"}");
    size_t n = json_array_size(messages);
    if (n > MAX_MESSAGES)
        return bad(d, "messages", "more than 1024 messages");
    bool sys = system && !json_is_null(system);
    size_t n_results = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(json_array_get(messages, i), "content"), *b;
        size_t j;
        json_array_foreach(c, j, b) n_results += !strcmp(json_string_value(json_object_get(b, "type")) ?
                                                         json_string_value(json_object_get(b, "type")) : "",
                                                         "tool_result");
    }
    colo_chat_message *msgs = colo_pool_calloc(r->pool, n + 1 + n_results, sizeof *msgs);
    if (!msgs)
        return bad(d, "messages", "out of memory");
    size_t total = 0, len;
    int k = 0;
    if (sys) {
        colo_status st = anthropic_content(d, "system", system, &msgs[0].content, &len);
        if (st != COLO_OK)
            return st;
        msgs[k++].role = "system";
        total += len;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i), *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role) || !c)
            return bad(d, "messages", "each message needs a string role and a content");
        const char *rl = json_string_value(role);
        if (strcmp(rl, "user") && strcmp(rl, "assistant"))
            return bad(d, "messages", "role must be user or assistant (the system prompt is the top-level system)");
        const char *key;
        json_t *x;
        json_object_foreach(m, key, x) if (strcmp(key, "role") && strcmp(key, "content"))
        {
            colo_set_err(d->err, d->errlen, "messages: unknown field '%.32s' in a message", key);
            return COLO_EINVAL;
        }
        bool assistant = !strcmp(rl, "assistant");
        int before = k;
        colo_status st = anthropic_tool_blocks(d, c, assistant, &msgs[k], msgs, &k);
        if (st != COLO_OK)
            return st;
        for (int t = before; t < k; t++)
            total += strlen(msgs[t].content) + 4;
        if (k > before && json_is_array(c)) { /* tool results: a user text after them only if there is one */
            const char *text;
            if ((st = anthropic_content(d, "messages", c, &text, &len)) != COLO_OK)
                return st;
            if (!len)
                continue;
            msgs[k].content = text;
        } else if ((st = anthropic_content(d, "messages", c, &msgs[k].content, &len)) != COLO_OK) {
            return st;
        }
        msgs[k++].role = assistant ? "assistant" : "user";
        total += len + strlen(rl);
    }
    if (!strcmp(msgs[k - 1].role, "assistant"))
        return bad(d, "messages", "the last message must be the user's (continuing an assistant turn is not "
                                  "supported)");
    colo_status st = check_prompt_bytes(d, total);
    if (st != COLO_OK)
        return st;
    r->in.messages = msgs;
    r->in.n_messages = k;
    return COLO_OK;
}

static colo_status decode_anthropic(dec *d, json_t *body)
{
    colo_request *r = d->in->r;
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st != COLO_OK)
        return st;
    if (!d->rules->count && !d->max_tokens_set)
        return bad(d, "max_tokens", "required");
    r->params.max_tokens_set = d->max_tokens_set;
    if (d->rules->count)
        r->params.max_tokens = 1;
    return anthropic_chat(d, d->system, d->messages);
}

/* ---- tokenize and detokenize ------------------------------------------------------- */

static colo_status decode_tokenize(dec *d, json_t *body)
{
    colo_request *r = d->in->r;
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st != COLO_OK)
        return st;
    if (!!d->prompt == !!d->messages)
        return bad(d, "prompt", "give prompt or messages (one of them)");
    r->params.max_tokens = 1;
    st = d->prompt ? decode_prompt(d) : decode_messages(d);
    if (st != COLO_OK || d->task == COLO_TASK_GENERATE)
        return st;
    /* an encoder tokenizes the prompt as its one input */
    if (d->messages)
        return bad(d, "messages", "an encoder has no chat template; give prompt");
    const char **texts = colo_pool_calloc(r->pool, 1, sizeof *texts);
    size_t *lens = colo_pool_calloc(r->pool, 1, sizeof *lens);
    if (!texts || !lens)
        return bad(d, "prompt", "out of memory");
    texts[0] = r->in.prompt, lens[0] = r->in.prompt_len;
    r->in.texts = texts, r->in.text_lens = lens, r->in.n_texts = 1;
    r->in.prompt = NULL;
    return COLO_OK;
}

static colo_status decode_detokenize(dec *d, json_t *body)
{
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st != COLO_OK)
        return st;
    json_t *tokens = d->tokens;
    if (!json_is_array(tokens))
        return bad(d, "tokens", "required: an array of token ids");
    size_t n = json_array_size(tokens);
    if (n > (size_t)d->lim->max_seq_len * 4 + 64)
        return bad(d, "tokens", "too many tokens");
    int32_t *ids = colo_pool_alloc(d->in->r->pool, (n ? n : 1) * sizeof *ids);
    if (!ids)
        return bad(d, "tokens", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= d->lim->n_vocab) {
            colo_set_err(d->err, d->errlen, "tokens: element %zu is not a token id of this model (0 to %d)", i,
                         d->lim->n_vocab - 1);
            return COLO_EINVAL;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    d->in->tokens = ids;
    d->in->n_tokens = (int)n;
    return COLO_OK;
}

/* ---- the endpoints ------------------------------------------------------------ */

static colo_status decode_gen(dec *d, json_t *body)
{
    colo_api_input *in = d->in;
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st != COLO_OK)
        return st;
    if (d->top_logprobs >= 0) {
        if (in->r->params.logprobs < 0 && !d->logprobs_off && d->top_logprobs > 0)
            return bad(d, "top_logprobs", "needs logprobs: true");
        if (in->r->params.logprobs >= 0)
            in->r->params.logprobs = d->top_logprobs;
    }
    if (d->prompt && d->messages)
        return bad(d, "prompt", "give prompt or messages, not both");
    if (!d->prompt && !d->messages)
        return bad(d, d->rules->required, d->rules->required_why);
    in->r->params.max_tokens_set = d->max_tokens_set;
    if (!d->max_tokens_set) {
        /* the model's kind shortens it to what the context leaves */
        int def = d->rules->default_max_tokens;
        in->r->params.max_tokens = def < d->lim->max_seq_len ? def : d->lim->max_seq_len;
    }
    return d->prompt ? decode_prompt(d) : decode_messages(d);
}

static colo_status decode_embed(dec *d, json_t *body)
{
    const char *input_key = d->rules->openai ? "input" : "inputs";
    /* OpenAI refuses an input past the window unless asked to cut it; /infer cuts */
    d->in->r->params.truncate = !d->rules->openai;
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st != COLO_OK)
        return st;
    if (!d->input)
        return bad(d, input_key, "required");
    return decode_inputs(d, input_key);
}

/* One input item's text: a string, or parts {"type": "input_text" |
 * "output_text", "text"}. */
static json_t *item_text(dec *d, json_t *c, size_t i)
{
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c)) {
        colo_set_err(d->err, d->errlen, "input[%zu].content: must be a string or an array of text parts", i);
        return NULL;
    }
    json_t *parts = json_array();
    size_t k;
    json_t *p;
    json_array_foreach(c, k, p) {
        json_t *t = json_object_get(p, "type"), *x = json_object_get(p, "text");
        const char *ty = json_string_value(t);
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) || !json_is_string(x)) {
            json_decref(parts);
            colo_set_err(d->err, d->errlen, "input[%zu].content[%zu]: only text parts are supported (%.32s)", i, k,
                         ty ? ty : "no type");
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", x));
    }
    return parts;
}

/* input (a string, or items) and instructions -> chat's messages. */
static colo_status responses_messages(dec *d)
{
    json_t *msgs = json_array(), *calls = NULL; /* calls: the assistant message function_call items join */
    if (!msgs || json_object_set_new(d->chat, "messages", msgs))
        return bad(d, "input", "out of memory");
    if (json_is_string(d->system) &&
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", d->system)))
        return bad(d, "input", "out of memory");
    if (json_is_string(d->input))
        return json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", d->input))
                   ? bad(d, "input", "out of memory")
                   : COLO_OK;
    if (!json_is_array(d->input))
        return bad(d, "input", d->input ? "must be a string or an array of items" : "required");
    size_t i;
    json_t *it;
    json_array_foreach(d->input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        json_t *role = json_object_get(it, "role");
        if (!json_is_object(it)) {
            colo_set_err(d->err, d->errlen, "input[%zu]: must be an item object", i);
            return COLO_EINVAL;
        }
        if (!type || !strcmp(type, "message")) {
            json_t *text = item_text(d, json_object_get(it, "content"), i);
            if (!text)
                return COLO_EINVAL;
            if (!json_is_string(role)) {
                json_decref(text);
                colo_set_err(d->err, d->errlen, "input[%zu]: a message needs a role", i);
                return COLO_EINVAL;
            }
            calls = NULL;
            if (json_array_append_new(msgs, json_pack("{s:O,s:o}", "role", role, "content", text)))
                return bad(d, "input", "out of memory");
        } else if (!strcmp(type, "function_call")) {
            json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args)) {
                colo_set_err(d->err, d->errlen, "input[%zu]: a function_call needs call_id, name and arguments", i);
                return COLO_EINVAL;
            }
            if (calls && json_array_size(calls) >= COLO_API_MAX_TOOLS) {
                colo_set_err(d->err, d->errlen, "input[%zu]: at most %d function_call items in a row (the calls of "
                                                "one turn)", i, COLO_API_MAX_TOOLS);
                return COLO_EINVAL;
            }
            if (!calls) { /* consecutive calls are one assistant turn */
                calls = json_array();
                if (!calls || json_array_append_new(msgs, json_pack("{s:s,s:n,s:o}", "role", "assistant", "content",
                                                                    "tool_calls", calls)))
                    return bad(d, "input", "out of memory");
            }
            if (json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args)))
                return bad(d, "input", "out of memory");
        } else if (!strcmp(type, "function_call_output")) {
            json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
            if (!json_is_string(id) || !json_is_string(out)) {
                colo_set_err(d->err, d->errlen, "input[%zu]: a function_call_output needs call_id and output", i);
                return COLO_EINVAL;
            }
            calls = NULL;
            if (json_array_append_new(msgs, json_pack("{s:s,s:O,s:O}", "role", "tool", "tool_call_id", id, "content",
                                                      out)))
                return bad(d, "input", "out of memory");
        } else if (!strcmp(type, "reasoning")) {
            continue; /* an earlier turn's reasoning: not part of the prompt */
        } else {
            colo_set_err(d->err, d->errlen, "input[%zu]: items of type '%.32s' are not supported", i, type);
            return COLO_EINVAL;
        }
    }
    return COLO_OK;
}

void colo_api_responses_words(char *err, size_t errlen)
{
    static const char *const words[][2] = {{"max_completion_tokens", "max_output_tokens"},
                                           {"response_format.json_schema", "text.format"},
                                           {"response_format", "text.format"},
                                           {"messages", "input"}};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t n = strlen(words[i][0]);
        if (strncmp(err, words[i][0], n))
            continue;
        char rest[512];
        snprintf(rest, sizeof rest, "%s", err + n);
        snprintf(err, errlen, "%s%s", words[i][1], rest);
        return;
    }
}

/* The fields of body that the response object repeats, as sent. */
static colo_status responses_echo(dec *d, json_t *body)
{
    static const char *const keys[] = {"instructions", "tools",       "tool_choice", "text",
                                       "parallel_tool_calls", "metadata", "truncation", "reasoning",
                                       "max_tool_calls", "temperature", "top_p",      "max_output_tokens"};
    json_t *echo = json_object();
    bool ok = echo != NULL;
    for (size_t i = 0; ok && i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (v && !json_is_null(v))
            ok = json_object_set(echo, keys[i], v) == 0;
    }
    char *s = ok ? json_dumps(echo, JSON_COMPACT) : NULL;
    json_decref(echo);
    colo_request *r = d->in->r;
    d->in->echo = s ? colo_pool_strndup(r->pool, s, strlen(s)) : NULL;
    free(s);
    return d->in->echo ? COLO_OK : bad(d, "body", "out of memory");
}

static colo_status decode_responses(dec *d, json_t *body)
{
    if (!(d->chat = json_object()))
        return bad(d, "body", "out of memory");
    colo_status st = read_fields(d, body, d->fields, d->rules->hint);
    if (st == COLO_OK)
        st = responses_messages(d);
    if (st == COLO_OK) {
        dec c = *d;
        c.rules = &colo_api_body_chat;
        c.fields = colo_api_body_chat.gen;
        c.prompt = c.messages = c.input = c.system = NULL;
        st = decode_gen(&c, d->chat);
        if (st != COLO_OK)
            colo_api_responses_words(d->err, d->errlen);
    }
    if (st == COLO_OK)
        st = responses_echo(d, body);
    json_decref(d->chat);
    d->chat = NULL;
    return st;
}

colo_status colo_api_decode(const colo_api_body *how, colo_task task, json_t *body, const colo_api_limits *lim,
                            colo_api_input *in, char *err, size_t errlen)
{
    colo_request *r = in->r;
    memset(in, 0, sizeof *in);
    in->r = r;
    r->task = task;
    r->params.temperature = 1.0f;
    r->params.top_p = 1.0f;
    r->params.seed = UINT64_MAX; /* none given: the caller picks one */
    if (!how) {
        colo_set_err(err, errlen, "no such endpoint");
        return COLO_EINVAL;
    }
    dec d = {.rules = how, .task = task, .lim = lim, .in = in, .err = err, .errlen = errlen,
             .top_logprobs = -1};
    r->params.repetition_penalty = 1.0f;
    r->params.logprobs = -1;
    if (!json_is_object(body))
        return bad(&d, "body", "must be a JSON object");
    bool gen = task == COLO_TASK_GENERATE;
    d.fields = gen ? d.rules->gen : d.rules->embed;
    if (!d.fields) {
        colo_set_err(err, errlen, "model: this model is %s; use %s", gen ? "generative" : "an encoder",
                     gen ? "/v1/completions, /v1/chat/completions or /v1/messages" : "/v1/embeddings");
        return COLO_EINVAL;
    }
    return gen ? d.rules->decode_gen(&d, body) : d.rules->decode_embed(&d, body);
}
