/* loadtest/workload.c: URL parsing, request bodies, request bytes, model probe. */
#include "loadtest/workload.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <math.h>
#include <stdint.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

const char *lt_kind_name(lt_kind kind)
{
    switch (kind) {
    case LT_KIND_GENERATIVE: return "generative";
    case LT_KIND_ENCODER: return "encoder";
    default: return "auto";
    }
}

lt_status lt_target_parse(const char *url, lt_target *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0) {
        lt_set_err(err, errlen, "bad URL '%s': only http://host[:port][/prefix] is supported", url);
        return LT_EINVAL;
    }
    p += 7;
    const char *slash = strchr(p, '/');
    size_t auth_len = slash ? (size_t)(slash - p) : strlen(p);
    if (auth_len == 0 || auth_len >= sizeof t->authority) {
        lt_set_err(err, errlen, "bad URL '%s': no host", url);
        return LT_EINVAL;
    }
    memcpy(t->authority, p, auth_len);
    const char *host = t->authority, *port = NULL;
    size_t host_len;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (!close) {
            lt_set_err(err, errlen, "bad URL '%s': unclosed '['", url);
            return LT_EINVAL;
        }
        host_len = (size_t)(close - host - 1);
        memcpy(t->host, host + 1, host_len);
        if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0') {
            lt_set_err(err, errlen, "bad URL '%s'", url);
            return LT_EINVAL;
        }
    } else {
        const char *colon = strchr(host, ':');
        host_len = colon ? (size_t)(colon - host) : strlen(host);
        if (host_len >= sizeof t->host) {
            lt_set_err(err, errlen, "bad URL '%s': host too long", url);
            return LT_EINVAL;
        }
        memcpy(t->host, host, host_len);
        if (colon)
            port = colon + 1;
    }
    if (t->host[0] == '\0') {
        lt_set_err(err, errlen, "bad URL '%s': no host", url);
        return LT_EINVAL;
    }
    if (port) {
        char *end;
        errno = 0;
        long v = strtol(port, &end, 10);
        if (*port == '\0' || *end != '\0' || errno || v < 1 || v > 65535) {
            lt_set_err(err, errlen, "bad URL '%s': bad port", url);
            return LT_EINVAL;
        }
        snprintf(t->port, sizeof t->port, "%ld", v);
    } else {
        snprintf(t->port, sizeof t->port, "80");
    }
    if (slash) {
        size_t n = strlen(slash);
        while (n > 0 && slash[n - 1] == '/')
            n--;
        if (n >= sizeof t->base_path || memchr(slash, '?', n) || memchr(slash, '#', n)) {
            lt_set_err(err, errlen, "bad URL '%s': path prefix too long or has a query", url);
            return LT_EINVAL;
        }
        memcpy(t->base_path, slash, n);
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(t->host, t->port, &hints, &res);
    if (rc != 0 || !res) {
        lt_set_err(err, errlen, "bad URL '%s': cannot resolve '%s': %s", url, t->host, gai_strerror(rc));
        return LT_EINVAL;
    }
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return LT_OK;
}

/* ---- bodies ---------------------------------------------------------------- */

/* splitmix64, for the synthetic prompts */
static uint64_t lt_wl_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const char *const builtin_prompts[] = {
    "Write one sentence about the sea.",
    "What is the capital of France?",
    "List three colours.",
    "Explain what a CPU cache is in one sentence.",
    "Say hello in Spanish.",
    "Give a short tip for writing clear code.",
    "Name a planet and one fact about it.",
    "Complete the phrase: the quick brown fox",
};

static const char *const builtin_sentences[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Several models can share one accelerator if memory and compute are divided with care.",
    "Latency matters most for interactive requests.",
    "A sentence encoder maps text to a vector.",
};

static lt_status bodies_push(lt_bodies *b, json_t *obj, char *err, size_t errlen)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    char **v = text ? realloc(b->v, (b->n + 1) * sizeof *v) : NULL;
    if (!v) {
        free(text);
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    b->v = v;
    b->v[b->n++] = text;
    return LT_OK;
}

static bool body_is_generative(const json_t *obj)
{
    return json_object_get(obj, "prompt") || json_object_get(obj, "messages");
}

/* Applies --max-tokens and --stream to a generative body. */
static int body_apply_opts(json_t *obj, const lt_body_opts *o)
{
    if (!body_is_generative(obj))
        return 0;
    if (o->max_tokens >= 0 && json_object_set_new(obj, "max_tokens", json_integer(o->max_tokens)))
        return -1;
    if (o->stream && !json_object_get(obj, "stream") && json_object_set_new(obj, "stream", json_true()))
        return -1;
    return 0;
}

/* Applies o to obj (NULL: out of memory) and adds it to b; takes obj. */
static lt_status bodies_add(lt_bodies *b, json_t *obj, const lt_body_opts *o, char *err, size_t errlen)
{
    lt_status st;
    if (!obj || body_apply_opts(obj, o)) {
        lt_set_err(err, errlen, "out of memory");
        st = LT_ENOMEM;
    } else {
        st = bodies_push(b, obj, err, errlen);
    }
    json_decref(obj);
    return st;
}

lt_status lt_bodies_builtin(lt_kind kind, const lt_body_opts *o, lt_bodies *out,
                            char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    lt_status st = LT_OK;
    if (kind == LT_KIND_ENCODER) {
        json_t *obj = json_object(), *arr = json_array();
        if (!obj || !arr) {
            json_decref(obj);
            json_decref(arr);
            lt_set_err(err, errlen, "out of memory");
            return LT_ENOMEM;
        }
        for (size_t i = 0; i < sizeof builtin_sentences / sizeof *builtin_sentences; i++)
            json_array_append_new(arr, json_string(builtin_sentences[i]));
        json_object_set_new(obj, "inputs", arr);
        st = bodies_push(out, obj, err, errlen);
        json_decref(obj);
        return st;
    }
    lt_body_opts eff = *o;
    if (eff.max_tokens < 0)
        eff.max_tokens = 16;
    for (size_t i = 0; i < sizeof builtin_prompts / sizeof *builtin_prompts && st == LT_OK; i++)
        st = bodies_add(out, json_pack("{s:s}", "prompt", builtin_prompts[i]), &eff, err, errlen);
    if (st != LT_OK)
        lt_bodies_free(out);
    return st;
}

json_t *lt_jsonl_next(FILE *f, const char *path, char **line, size_t *cap, unsigned *lineno, lt_status *st,
                      char *err, size_t errlen)
{
    ssize_t len;
    while ((len = getline(line, cap, f)) >= 0) {
        ++*lineno;
        size_t i = 0;
        const char *l = *line;
        while (i < (size_t)len && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r' || l[i] == '\n'))
            i++;
        if (i == (size_t)len)
            continue;
        json_error_t jerr;
        json_t *obj = json_loadb(l, (size_t)len, 0, &jerr);
        if (obj && json_is_object(obj))
            return obj;
        lt_set_err(err, errlen, "%s:%u: not a JSON object%s%s", path, *lineno, obj ? "" : ": ", obj ? "" : jerr.text);
        json_decref(obj);
        *st = LT_EFORMAT;
        return NULL;
    }
    return NULL;
}

lt_status lt_bodies_from_file(const char *path, const char *model, const lt_body_opts *o,
                              lt_bodies *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    lt_status st = LT_OK;
    char *line = NULL;
    size_t cap = 0;
    unsigned lineno = 0;
    json_t *obj;
    while (st == LT_OK && (obj = lt_jsonl_next(f, path, &line, &cap, &lineno, &st, err, errlen))) {
        json_t *m = json_object_get(obj, "model");
        if (m && !json_is_string(m)) {
            lt_set_err(err, errlen, "%s:%u: \"model\" must be a string", path, lineno);
            json_decref(obj);
            st = LT_EFORMAT;
            break;
        }
        if (m && model && strcmp(json_string_value(m), model) != 0) {
            json_decref(obj);
            continue;
        }
        json_t *body = json_object_get(obj, "body");
        if (body) {
            if (!json_is_object(body)) {
                lt_set_err(err, errlen, "%s:%u: \"body\" must be an object", path, lineno);
                json_decref(obj);
                st = LT_EFORMAT;
                break;
            }
            json_incref(body);
        } else if (json_object_get(obj, "prompt") || json_object_get(obj, "messages") ||
                   json_object_get(obj, "inputs")) {
            body = json_deep_copy(obj);
            if (body)
                json_object_del(body, "model");
        } else {
            lt_set_err(err, errlen, "%s:%u: needs \"prompt\", \"messages\", \"inputs\" or \"body\"",
                       path, lineno);
            json_decref(obj);
            st = LT_EFORMAT;
            break;
        }
        json_decref(obj);
        st = bodies_add(out, body, o, err, errlen);
    }
    free(line);
    fclose(f);
    if (st == LT_OK && out->n == 0) {
        lt_set_err(err, errlen, "%s: no prompts for model '%s'", path, model ? model : "");
        st = LT_EFORMAT;
    }
    if (st != LT_OK)
        lt_bodies_free(out);
    return st;
}

static const char *const synth_words[] = {
    "the", "of", "and", "to", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with",
    "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "word", "but",
    "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your",
    "how", "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way", "about",
    "many", "then", "them", "write", "would", "like", "so", "these", "her", "long", "make", "thing",
    "see", "him", "two", "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound",
    "no", "most", "people", "my", "over", "know", "water", "than", "call", "first", "who", "may", "down",
    "side", "been", "now", "find", "any", "new", "work", "part", "take", "get", "place", "made", "live",
};

/* uniform in [len * (1 - spread), len * (1 + spread)], at least 1 */
static int synth_len(uint64_t *rng, int len, double spread)
{
    double lo = len * (1.0 - spread), hi = len * (1.0 + spread);
    double u = (double)(lt_wl_rand(rng) >> 11) * (1.0 / 9007199254740992.0);
    int v = (int)floor(lo + u * (hi - lo + 1.0));
    if (v > (int)floor(hi))
        v = (int)floor(hi);
    return v < 1 ? 1 : v;
}

/* Appends one synthetic body: in_len words, max_tokens out_len. text/cap
 * is a scratch buffer the caller frees. */
static lt_status synth_push(lt_bodies *out, uint64_t *rng, int in_len, int out_len, bool stream, char **text,
                            size_t *cap, char *err, size_t errlen)
{
    const size_t n_words = sizeof synth_words / sizeof *synth_words;
    size_t need = (size_t)in_len * 8 + 1;
    if (need > *cap) {
        char *t = realloc(*text, need);
        if (!t)
            return LT_ENOMEM;
        *text = t;
        *cap = need;
    }
    size_t len = 0;
    for (int w = 0; w < in_len; w++) {
        const char *word = synth_words[lt_wl_rand(rng) % n_words];
        if (w)
            (*text)[len++] = ' ';
        size_t wl = strlen(word);
        memcpy(*text + len, word, wl);
        len += wl;
    }
    (*text)[len] = '\0';
    json_t *obj = json_pack("{s:s,s:i}", "prompt", *text, "max_tokens", out_len);
    if (!obj || (stream && json_object_set_new(obj, "stream", json_true()))) {
        json_decref(obj);
        return LT_ENOMEM;
    }
    lt_status st = bodies_push(out, obj, err, errlen);
    json_decref(obj);
    return st;
}

/* Ends a run of synth_push: frees the text buffer, and out unless st is
 * LT_OK. */
static lt_status synth_end(lt_bodies *out, char *text, lt_status st, char *err, size_t errlen)
{
    free(text);
    if (st == LT_ENOMEM)
        lt_set_err(err, errlen, "out of memory");
    if (st != LT_OK)
        lt_bodies_free(out);
    return st;
}

lt_status lt_bodies_synthetic(const lt_synth_opts *o, lt_bodies *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (o->input_len <= 0 || o->output_len <= 0 || o->count == 0 || !(o->spread >= 0 && o->spread < 1)) {
        lt_set_err(err, errlen, "synthetic prompts: lengths must be positive and the spread in [0, 1)");
        return LT_EINVAL;
    }
    uint64_t rng = o->seed ^ 0x5eed5eedull;
    lt_status st = LT_OK;
    char *text = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < o->count && st == LT_OK; i++) {
        int in_len = synth_len(&rng, o->input_len, o->spread);
        int out_len = synth_len(&rng, o->output_len, o->spread);
        st = synth_push(out, &rng, in_len, out_len, o->stream, &text, &cap, err, errlen);
    }
    return synth_end(out, text, st, err, errlen);
}

lt_status lt_bodies_sized(const int *in_lens, const int *out_lens, size_t n, unsigned long long seed, bool stream,
                          lt_bodies *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    uint64_t rng = seed ^ 0x5eed5eedull;
    lt_status st = LT_OK;
    char *text = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n && st == LT_OK; i++) {
        if (in_lens[i] <= 0 || out_lens[i] <= 0) {
            lt_set_err(err, errlen, "synthetic prompts: lengths must be positive");
            st = LT_EINVAL;
            break;
        }
        st = synth_push(out, &rng, in_lens[i], out_lens[i], stream, &text, &cap, err, errlen);
    }
    return synth_end(out, text, st, err, errlen);
}

lt_status lt_bodies_openai(lt_bodies *b, const char *model, bool chat, char *err, size_t errlen)
{
    for (size_t i = 0; i < b->n; i++) {
        json_t *obj = json_loads(b->v[i], 0, NULL);
        if (!obj) {
            lt_set_err(err, errlen, "out of memory");
            return LT_ENOMEM;
        }
        int bad = 0;
        if (!json_object_get(obj, "model"))
            bad |= json_object_set_new(obj, "model", json_string(model));
        json_t *prompt = json_object_get(obj, "prompt");
        if (chat && json_is_string(prompt) && !json_object_get(obj, "messages")) {
            bad |= json_object_set_new(obj, "messages",
                                       json_pack("[{s:s,s:O}]", "role", "user", "content", prompt));
            bad |= json_object_del(obj, "prompt");
        }
        if (json_is_true(json_object_get(obj, "stream")) && !json_object_get(obj, "stream_options"))
            bad |= json_object_set_new(obj, "stream_options", json_pack("{s:b}", "include_usage", 1));
        char *text = bad ? NULL : json_dumps(obj, JSON_COMPACT);
        json_decref(obj);
        if (!text) {
            lt_set_err(err, errlen, "out of memory");
            return LT_ENOMEM;
        }
        free(b->v[i]);
        b->v[i] = text;
    }
    return LT_OK;
}

void lt_bodies_free(lt_bodies *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        free(b->v[i]);
    free(b->v);
    b->v = NULL;
    b->n = 0;
}

/* ---- requests ---------------------------------------------------------------- */

static char *request_format(const lt_target *t, const char *method, const char *path,
                            const char *body, const char *api_key, size_t *len_out)
{
    char auth[512] = "";
    if (api_key && api_key[0])
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", api_key);
    size_t body_len = body ? strlen(body) : 0;
    char *buf = NULL;
    int n;
    if (body)
        n = asprintf(&buf,
                     "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: colo-loadtest\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, t->base_path, path, t->authority, auth, body_len, body);
    else
        n = asprintf(&buf, "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: colo-loadtest\r\n%s\r\n",
                     method, t->base_path, path, t->authority, auth);
    if (n < 0)
        return NULL;
    *len_out = (size_t)n;
    return buf;
}

lt_status lt_requests_build(const lt_target *t, const char *method, const char *path,
                            const lt_bodies *bodies, const char *api_key,
                            lt_requests *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t n = bodies && bodies->n ? bodies->n : 1;
    out->v = calloc(n, sizeof *out->v);
    out->len = calloc(n, sizeof *out->len);
    if (!out->v || !out->len)
        goto out_nomem;
    for (size_t i = 0; i < n; i++) {
        const char *body = bodies && bodies->n ? bodies->v[i] : NULL;
        out->v[i] = request_format(t, method, path, body, api_key, &out->len[i]);
        if (!out->v[i])
            goto out_nomem;
        out->n = i + 1;
    }
    return LT_OK;
out_nomem:
    lt_requests_free(out);
    lt_set_err(err, errlen, "out of memory");
    return LT_ENOMEM;
}

void lt_requests_free(lt_requests *r)
{
    if (!r)
        return;
    if (r->v)
        for (size_t i = 0; i < r->n; i++)
            free(r->v[i]);
    free(r->v);
    free(r->len);
    memset(r, 0, sizeof *r);
}

/* ---- model probe ---------------------------------------------------------------- */

typedef struct probe_body {
    char *buf;
    size_t len, cap;
    bool done;
} probe_body;

static int probe_on_body(llhttp_t *p, const char *at, size_t len)
{
    probe_body *b = p->data;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *nb = realloc(b->buf, cap);
        if (!nb)
            return -1;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, at, len);
    b->len += len;
    b->buf[b->len] = '\0';
    return 0;
}

static int probe_on_complete(llhttp_t *p)
{
    ((probe_body *)p->data)->done = true;
    return 0;
}

lt_status lt_http_get(const lt_target *t, const char *path, const char *api_key, double timeout_s, int *status,
                      char **body_out, char *err, size_t errlen)
{
    *status = 0;
    *body_out = NULL;
    size_t req_len;
    char *req = request_format(t, "GET", path, NULL, api_key, &req_len);
    lt_status st = LT_OK;
    probe_body body = {0};
    int fd = -1;
    if (!req) {
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    fd = socket(t->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        lt_set_err(err, errlen, "socket: %s", strerror(errno));
        st = LT_EIO;
        goto out_free_req;
    }
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addrlen) != 0) {
        lt_set_err(err, errlen, "cannot connect to %s: %s", t->authority, strerror(errno));
        st = LT_EIO;
        goto out_close;
    }
    for (size_t off = 0; off < req_len;) {
        ssize_t w = write(fd, req + off, req_len - off);
        if (w <= 0) {
            lt_set_err(err, errlen, "write to %s: %s", t->authority, strerror(errno));
            st = LT_EIO;
            goto out_close;
        }
        off += (size_t)w;
    }
    llhttp_settings_t settings;
    llhttp_settings_init(&settings);
    settings.on_body = probe_on_body;
    settings.on_message_complete = probe_on_complete;
    llhttp_t parser;
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    parser.data = &body;
    char buf[4096];
    while (!body.done) {
        ssize_t r = read(fd, buf, sizeof buf);
        llhttp_errno_t pe = r > 0 ? llhttp_execute(&parser, buf, (size_t)r) : llhttp_finish(&parser);
        if (pe != HPE_OK || r < 0 || (r == 0 && !body.done)) {
            lt_set_err(err, errlen, "GET %s from %s: no complete response", path, t->authority);
            st = LT_EIO;
            goto out_close;
        }
    }
    *status = parser.status_code;
    *body_out = body.buf;
    body.buf = NULL;
out_close:
    close(fd);
out_free_req:
    free(body.buf);
    free(req);
    return st;
}

lt_status lt_model_probe(const lt_target *t, const char *model, const char *api_key,
                         double timeout_s, lt_kind *kind, char *err, size_t errlen)
{
    char path[512];
    snprintf(path, sizeof path, "/v1/models/%s", model);
    int status;
    char *body = NULL;
    lt_status st = lt_http_get(t, path, api_key, timeout_s, &status, &body, err, errlen);
    if (st != LT_OK)
        return st;
    if (status == 404) {
        lt_set_err(err, errlen, "model '%s' is not served at %s", model, t->authority);
        st = LT_EINVAL;
        goto out_free;
    }
    if (status < 200 || status > 299) {
        lt_set_err(err, errlen, "GET %s: HTTP %d", path, status);
        st = LT_EIO;
        goto out_free;
    }
    json_t *info = body ? json_loads(body, 0, NULL) : NULL;
    const char *task = json_string_value(json_object_get(info, "task"));
    const char *state = json_string_value(json_object_get(info, "state"));
    if (state && strcmp(state, "failed") == 0) {
        lt_set_err(err, errlen, "model '%s' failed to load", model);
        st = LT_ERR;
    }
    /* the model's task, not its kind's name: a new kind needs nothing here */
    *kind = task && strcmp(task, "embeddings") == 0 ? LT_KIND_ENCODER : LT_KIND_GENERATIVE;
    json_decref(info);
out_free:
    free(body);
    return st;
}
