/* Reading responses (llhttp, Server-Sent Events) and opening connections.
 *
 * llhttp's callbacks only record what they see; the caller decides what a
 * finished response means. */
#include "loadtest/http_client.h"

#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loadtest/clock.h"

static double ns_to_ms(uint64_t ns) { return (double)ns / 1e6; }

static bool grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 256;
    while (nc < need)
        nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb)
        return false;
    *buf = nb;
    *cap = nc;
    return true;
}

/* Reads usage.completion_tokens (or a top-level completion_tokens) and
 * usage.prompt_tokens of a parsed body. */
static void usage_of(json_t *root, bool *has_out, uint64_t *out, bool *has_prompt, uint64_t *prompt)
{
    json_t *usage = json_object_get(root, "usage");
    json_t *v = json_object_get(usage, "completion_tokens");
    if (!v)
        v = json_object_get(root, "completion_tokens");
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        *has_out = true;
    }
    v = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *prompt = (uint64_t)json_integer_value(v);
        *has_prompt = true;
    }
}

static void parse_usage(const char *text, size_t len, bool *has_out, uint64_t *out, bool *has_prompt,
                        uint64_t *prompt)
{
    if (!memmem(text, len, "_tokens", 7))
        return;
    json_t *root = json_loadb(text, len, 0, NULL);
    usage_of(root, has_out, out, has_prompt, prompt);
    json_decref(root);
}

static bool nonempty_string(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

/* Whether an SSE data event carries generated text: colo's infer events
 * ({"token", "text"}), OpenAI chunks with a non-empty choices[0].text or
 * choices[0].delta.content, or anything that is not JSON. Role-only and
 * usage-only chunks, errors and named events (event: done) do not. Reads
 * the usage an event carries either way. */
static bool sse_token_event(lt_http_response *r)
{
    if (r->event_len && strcmp(r->event, "message") != 0) {
        parse_usage(r->data, r->data_len, &r->has_tokens, &r->tokens, &r->has_prompt_tokens, &r->prompt_tokens);
        return false;
    }
    json_t *root = r->data_len && r->data[0] == '{' ? json_loadb(r->data, r->data_len, 0, NULL) : NULL;
    if (!root)
        return true;
    usage_of(root, &r->has_tokens, &r->tokens, &r->has_prompt_tokens, &r->prompt_tokens);
    bool token;
    json_t *choices = json_object_get(root, "choices");
    if (json_is_array(choices)) {
        json_t *c0 = json_array_get(choices, 0);
        token = nonempty_string(json_object_get(c0, "text")) ||
                nonempty_string(json_object_get(json_object_get(c0, "delta"), "content"));
    } else if (json_object_get(root, "token")) {
        token = true;
    } else if (json_object_get(root, "text")) {
        token = nonempty_string(json_object_get(root, "text"));
    } else {
        token = !json_object_get(root, "error");
    }
    json_decref(root);
    return token;
}

/* ---- Server-Sent Events -------------------------------------------------------- */

static void sse_event(lt_http_response *r)
{
    if (r->data_len == 6 && memcmp(r->data, "[DONE]", 6) == 0)
        return;
    uint64_t now = lt_now_ns();
    if (!sse_token_event(r))
        return;
    if (!r->has_ttft) {
        r->has_ttft = true;
        r->ttft_ms = ns_to_ms(now - r->start_ns);
    } else if (lt_samples_push(&r->itl_ms, ns_to_ms(now - r->last_event_ns)) != LT_OK) {
        r->out_of_memory = true;
    }
    r->last_event_ns = now;
    r->events++;
}

static int sse_line(lt_http_response *r, const char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 0) {
        if (r->has_data)
            sse_event(r);
        r->has_data = false;
        r->data_len = 0;
        r->event_len = 0;
        r->event[0] = '\0';
        return 0;
    }
    if (len >= 6 && memcmp(line, "event:", 6) == 0) {
        line += 6;
        len -= 6;
        if (len && line[0] == ' ') {
            line++;
            len--;
        }
        r->event_len = len < sizeof r->event - 1 ? len : sizeof r->event - 1;
        memcpy(r->event, line, r->event_len);
        r->event[r->event_len] = '\0';
        return 0;
    }
    if (len < 5 || memcmp(line, "data:", 5) != 0)
        return 0; /* id:, retry:, comments */
    line += 5;
    len -= 5;
    if (len && line[0] == ' ') {
        line++;
        len--;
    }
    size_t sep = r->has_data ? 1 : 0;
    if (!grow(&r->data, &r->data_cap, r->data_len + sep + len + 1))
        return -1;
    if (sep)
        r->data[r->data_len++] = '\n';
    memcpy(r->data + r->data_len, line, len);
    r->data_len += len;
    r->data[r->data_len] = '\0';
    r->has_data = true;
    return 0;
}

static int sse_body(lt_http_response *r, const char *at, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(at, '\n', len);
        size_t take = nl ? (size_t)(nl - at) : len;
        if (!grow(&r->line, &r->line_cap, r->line_len + take + 1))
            return -1;
        memcpy(r->line + r->line_len, at, take);
        r->line_len += take;
        if (!nl)
            break;
        if (sse_line(r, r->line, r->line_len))
            return -1;
        r->line_len = 0;
        at += take + 1;
        len -= take + 1;
    }
    return 0;
}

/* ---- llhttp callbacks ------------------------------------------------------------ */

/* Appends what fits of at[0..n) to buf (cap bytes, *len used), which stays
 * NUL-terminated: a longer header is cut. */
static void append_capped(char *buf, size_t cap, size_t *len, const char *at, size_t n)
{
    size_t room = cap - 1 - *len;
    size_t take = n < room ? n : room;
    memcpy(buf + *len, at, take);
    *len += take;
    buf[*len] = '\0';
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    lt_http_response *r = p->data;
    if (r->sse)
        return sse_body(r, at, len);
    if (r->status < 200 || r->status > 299 || r->body_len + len > LT_BODY_KEEP_MAX)
        return 0;
    if (!grow(&r->body, &r->body_cap, r->body_len + len + 1))
        return -1;
    memcpy(r->body + r->body_len, at, len);
    r->body_len += len;
    r->body[r->body_len] = '\0';
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    lt_http_response *r = p->data;
    append_capped(r->hdr_name, sizeof r->hdr_name, &r->hdr_name_len, at, len);
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    lt_http_response *r = p->data;
    if (strcasecmp(r->hdr_name, "content-type") != 0)
        return 0;
    append_capped(r->ctype, sizeof r->ctype, &r->ctype_len, at, len);
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    lt_http_response *r = p->data;
    r->hdr_name_len = 0;
    r->hdr_name[0] = '\0';
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    lt_http_response *r = p->data;
    r->status = p->status_code;
    r->sse = strstr(r->ctype, "text/event-stream") != NULL;
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    lt_http_response *r = p->data;
    if (r->sse && r->line_len) { /* a last line without its newline */
        if (sse_line(r, r->line, r->line_len))
            return -1;
        r->line_len = 0;
    }
    if (r->sse && r->has_data) {
        sse_event(r);
        r->has_data = false;
    }
    r->complete = true;
    /* only valid here: llhttp resets its flags once the callback returns */
    r->keep_alive = llhttp_should_keep_alive(p);
    return 0;
}

static const llhttp_settings_t settings = {
    .on_body = on_body,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

/* ---- the response ------------------------------------------------------------------ */

void lt_http_response_init(lt_http_response *r)
{
    memset(r, 0, sizeof *r);
    llhttp_init(&r->parser, HTTP_RESPONSE, &settings);
    r->parser.data = r;
}

void lt_http_response_reset(lt_http_response *r, uint64_t start_ns)
{
    r->start_ns = start_ns;
    r->last_event_ns = 0;
    r->complete = false;
    r->keep_alive = false;
    r->status = 0;
    r->sse = false;
    r->hdr_name_len = 0;
    r->hdr_name[0] = '\0';
    r->ctype_len = 0;
    r->ctype[0] = '\0';
    r->body_len = r->line_len = r->data_len = 0;
    r->has_data = r->has_ttft = r->has_tokens = r->has_prompt_tokens = false;
    r->prompt_tokens = 0;
    r->event_len = 0;
    r->event[0] = '\0';
    r->itl_ms.n = 0;
    r->tokens = r->events = 0;
    r->out_of_memory = false;
}

lt_status lt_http_response_feed(lt_http_response *r, const char *buf, size_t len)
{
    return llhttp_execute(&r->parser, buf, len) == HPE_OK ? LT_OK : LT_EFORMAT;
}

lt_status lt_http_response_finish(lt_http_response *r)
{
    return llhttp_finish(&r->parser) == HPE_OK && r->complete ? LT_OK : LT_EFORMAT;
}

bool lt_http_response_tokens(const lt_http_response *r, uint64_t *tokens)
{
    *tokens = r->has_tokens ? r->tokens : r->events;
    bool found = r->has_tokens || r->events > 0;
    if (!r->sse && r->body_len) {
        bool has = false, has_p = false;
        uint64_t p;
        parse_usage(r->body, r->body_len, &has, tokens, &has_p, &p);
        found = found || has;
    }
    return found;
}

bool lt_http_response_prompt_tokens(const lt_http_response *r, uint64_t *tokens)
{
    bool has = r->has_prompt_tokens, has_o = false;
    uint64_t o;
    *tokens = r->prompt_tokens;
    if (!r->sse && r->body_len)
        parse_usage(r->body, r->body_len, &has_o, &o, &has, tokens);
    return has;
}

void lt_http_response_fini(lt_http_response *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->line);
    free(r->data);
    lt_samples_free(&r->itl_ms);
}

/* ---- connections -------------------------------------------------------------------- */

lt_status lt_http_connect(struct bufferevent *bev, const lt_target *t)
{
    if (bufferevent_socket_connect(bev, (const struct sockaddr *)&t->addr, (int)t->addrlen) != 0)
        return LT_EIO;
    int one = 1;
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return LT_OK;
}
