/* loadtest/workload.h: the target URL, request bodies and request bytes.
 *
 * A body is a JSON object text; a request is the full HTTP/1.1 request
 * (request line, headers, body) ready to write, built once per run so the
 * load generator only copies bytes. Ownership: lt_bodies and lt_requests own
 * their strings; the _free functions release them and accept NULL. */
#ifndef COLO_LOADTEST_WORKLOAD_H
#define COLO_LOADTEST_WORKLOAD_H

#include <stdbool.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#include "loadtest/status.h"

typedef struct lt_target {
    char host[256];          /* without brackets for IPv6 */
    char port[16];
    char authority[300];     /* the Host header: host[:port] as given */
    char base_path[256];     /* path prefix from the URL, without trailing '/' */
    struct sockaddr_storage addr; /* resolved once */
    socklen_t addrlen;
} lt_target;

/* Parses http://host[:port][/prefix] and resolves the host. Only plain
 * http is supported. LT_EINVAL with a message on a bad URL or name. */
lt_status lt_target_parse(const char *url, lt_target *t, char *err, size_t errlen);

typedef enum lt_kind {
    LT_KIND_AUTO = 0,    /* ask GET /v1/models/<name> */
    LT_KIND_GENERATIVE,  /* {"prompt", "max_tokens"} */
    LT_KIND_ENCODER,     /* {"inputs": [...]} */
} lt_kind;

const char *lt_kind_name(lt_kind kind);

typedef struct lt_bodies {
    char **v;
    size_t n;
} lt_bodies;

typedef struct lt_body_opts {
    int max_tokens;      /* < 0: leave as given (built-in prompts use 16) */
    bool stream;         /* add "stream": true to generative bodies */
} lt_body_opts;

/* The built-in bodies for a kind (several short prompts, or one set of
 * sentences for an encoder). kind must not be LT_KIND_AUTO. */
lt_status lt_bodies_builtin(lt_kind kind, const lt_body_opts *o, lt_bodies *out,
                            char *err, size_t errlen);

/* The next JSON object of a JSON-lines file (blank lines skipped), or NULL
 * at its end, or NULL with *st = LT_EFORMAT and err naming path and line
 * when a line is not a JSON object. *line and *cap are getline's buffer
 * (the caller frees *line); *lineno counts the lines read. The caller
 * decrefs the object. */
json_t *lt_jsonl_next(FILE *f, const char *path, char **line, size_t *cap, unsigned *lineno, lt_status *st,
                      char *err, size_t errlen);

/* Reads a JSON-lines prompts file: each line {"prompt"|"messages"|"inputs": ...}
 * or {"body": {...}}, optionally with "model" (then it applies to that model
 * only). Blank lines are skipped. Errors name the file and line. */
lt_status lt_bodies_from_file(const char *path, const char *model, const lt_body_opts *o,
                              lt_bodies *out, char *err, size_t errlen);
void lt_bodies_free(lt_bodies *b);

/* Synthetic generative bodies with a length distribution, as vllm bench
 * serve's random dataset: each prompt is input_len words (common English
 * words, about one token each; the server's usage.prompt_tokens gives the
 * exact count) and asks for output_len tokens, each length drawn uniformly
 * from [len * (1 - spread), len * (1 + spread)] (at least 1), seeded. */
typedef struct lt_synth_opts {
    int input_len;       /* > 0 */
    int output_len;      /* > 0 */
    double spread;       /* 0 <= spread < 1 */
    size_t count;        /* bodies to make, > 0 */
    unsigned long long seed;
    bool stream;
} lt_synth_opts;

lt_status lt_bodies_synthetic(const lt_synth_opts *o, lt_bodies *out, char *err, size_t errlen);

/* Synthetic generative bodies of given lengths: body i is a prompt of
 * in_lens[i] words and asks for out_lens[i] tokens (both > 0). */
lt_status lt_bodies_sized(const int *in_lens, const int *out_lens, size_t n, unsigned long long seed, bool stream,
                          lt_bodies *out, char *err, size_t errlen);

/* Adapts generative bodies to an OpenAI endpoint: sets "model" when absent;
 * for chat (/v1/chat/completions), turns "prompt" into one user message;
 * with "stream": true asks for stream_options.include_usage, so that the
 * last event carries the token counts. */
lt_status lt_bodies_openai(lt_bodies *b, const char *model, bool chat, char *err, size_t errlen);

typedef struct lt_requests {
    char **v;
    size_t *len;
    size_t n;
} lt_requests;

/* One request per body (or one body-less request when bodies is NULL or
 * empty, for GET). path is the request target after the URL's prefix.
 * api_key, when not NULL or empty, goes into "Authorization: Bearer". */
lt_status lt_requests_build(const lt_target *t, const char *method, const char *path,
                            const lt_bodies *bodies, const char *api_key,
                            lt_requests *out, char *err, size_t errlen);
void lt_requests_free(lt_requests *r);

/* GET <prefix><path> (blocking, timeout_s, a connection of its own):
 * *status the HTTP status, *body the body NUL-terminated (malloc'ed, the
 * caller frees; NULL when empty). LT_EIO when no complete response came. */
lt_status lt_http_get(const lt_target *t, const char *path, const char *api_key, double timeout_s, int *status,
                      char **body, char *err, size_t errlen);

/* GET <prefix>/v1/models/<model> (blocking, timeout_s): task "embeddings"
 * is an encoder, anything else generative. LT_EIO when the server cannot be
 * reached, LT_EINVAL when it answers 404, LT_ERR when the model's state
 * is "failed"; err says which. */
lt_status lt_model_probe(const lt_target *t, const char *model, const char *api_key,
                         double timeout_s, lt_kind *kind, char *err, size_t errlen);

#endif
