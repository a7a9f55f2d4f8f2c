/* Chat templates of the common model families, rendered in C. */
#include "models/sample/chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name;
    colo_chat_format f;
} formats[] = {
    {"chatml", COLO_CHAT_CHATML},
    {"llama3", COLO_CHAT_LLAMA3},
    {"gemma", COLO_CHAT_GEMMA},
    {"phi3", COLO_CHAT_PHI3},
    {"mistral", COLO_CHAT_MISTRAL_V3},
    {"mistral-v1", COLO_CHAT_MISTRAL_V1},
    {"mistral-v3", COLO_CHAT_MISTRAL_V3},
    {"mistral-v3-tekken", COLO_CHAT_MISTRAL_V3_TEKKEN},
    {"deepseek-r1", COLO_CHAT_DEEPSEEK_R1},
};

bool colo_chat_format_known(const char *name)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(formats[i].name, name))
            return true;
    return false;
}

const char *colo_chat_format_name_at(int i)
{
    return i >= 0 && (size_t)i < sizeof formats / sizeof formats[0] ? formats[i].name : NULL;
}

/* Every name a config may give, comma-separated, for messages. */
static void format_names(char *out, size_t cap)
{
    size_t o = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0] && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", formats[i].name);
}

const char *colo_chat_format_name(colo_chat_format f)
{
    if (f == COLO_CHAT_MISTRAL_V3)
        return "mistral-v3";
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i].f == f)
            return formats[i].name;
    return "none";
}

static void add_stop(colo_chat_template *t, int id)
{
    if (id < 0 || t->n_stop_ids >= COLO_CHAT_MAX_STOP_IDS)
        return;
    for (int i = 0; i < t->n_stop_ids; i++)
        if (t->stop_ids[i] == id)
            return;
    t->stop_ids[t->n_stop_ids++] = id;
}

/* The family of a jinja template, by markers that stay when templates
 * grow tools and options; COLO_CHAT_NONE when none fits. */
static colo_chat_format detect(const char *j)
{
    if (strstr(j, "<|im_start|>"))
        return COLO_CHAT_CHATML;
    if (strstr(j, "<｜User｜>") && strstr(j, "<｜Assistant｜>"))
        return COLO_CHAT_DEEPSEEK_R1;
    if (strstr(j, "<|start_header_id|>") && strstr(j, "<|end_header_id|>"))
        return COLO_CHAT_LLAMA3;
    if (strstr(j, "<start_of_turn>"))
        return COLO_CHAT_GEMMA;
    if (strstr(j, "<|user|>") && strstr(j, "<|assistant|>") && strstr(j, "<|end|>"))
        return COLO_CHAT_PHI3;
    if (strstr(j, "[INST]") && !strstr(j, "<<SYS>>") && !strstr(j, "[SYSTEM_PROMPT]")) {
        if (strstr(j, "\"[INST]\"") || strstr(j, "'[INST]'"))
            return COLO_CHAT_MISTRAL_V3_TEKKEN;
        if (strstr(j, " [/INST]"))
            return COLO_CHAT_MISTRAL_V1;
        return COLO_CHAT_MISTRAL_V3;
    }
    return COLO_CHAT_NONE;
}

/* ChatML templates (SmolLM2, Qwen 2.5) that write a system message of
 * their own when the chat has none hold it as a string literal
 * '<|im_start|>system\n...<|im_end|>'; copies its text, unescaped. */
static void chatml_default_system(const char *j, char *out, size_t cap)
{
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    out[0] = 0;
    for (int h = 0; h < 2; h++) {
        for (const char *p = strstr(j, heads[h]); p; p = strstr(p + 1, heads[h])) {
            const char *s = p + strlen(heads[h]), *end = strstr(s, "<|im_end|>");
            if (!end || end == s || strcspn(s, "{}+'\"") < (size_t)(end - s))
                continue; /* not a literal: the chat's own system message is written there */
            size_t o = 0;
            for (; s < end && o + 1 < cap; s++) {
                if (*s == '\\' && s + 1 < end) {
                    s++;
                    out[o++] = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
                } else {
                    out[o++] = *s;
                }
            }
            out[o] = 0;
            return;
        }
    }
}

/* Llama 3.1+ templates open with a system block that dates the chat:
 * the date the template fixes, or today's (strftime_now). */
static void llama3_date(const char *j, char *out, size_t cap)
{
    out[0] = 0;
    if (!strstr(j, "Cutting Knowledge Date"))
        return;
    if (strstr(j, "strftime_now")) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(out, cap, "%d %b %Y", &tm);
        return;
    }
    const char *p = strstr(j, "date_string = \"");
    if (p) {
        p += strlen("date_string = \"");
        const char *e = strchr(p, '"');
        if (e && (size_t)(e - p) < cap) {
            memcpy(out, p, (size_t)(e - p));
            out[e - p] = 0;
            return;
        }
    }
    snprintf(out, cap, "26 Jul 2024");
}

static void copy_token(const colo_tokenizer *tok, int id, char *out, size_t cap)
{
    const char *s = id >= 0 ? colo_tokenizer_token_text(tok, id) : NULL;
    snprintf(out, cap, "%s", s ? s : "");
}

colo_status colo_chat_template_from_text(colo_chat_template *t, const char *j, const char *override,
                                         const char *bos, const char *eos, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (override && *override) {
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (!strcmp(formats[i].name, override))
                t->format = formats[i].f;
        if (t->format == COLO_CHAT_NONE) {
            char names[256];
            format_names(names, sizeof names);
            colo_set_err(err, errlen, "chat_template '%s' is not one colo renders (%s)", override, names);
            return COLO_EINVAL;
        }
    } else if (j) {
        t->format = detect(j);
        if (t->format == COLO_CHAT_NONE) {
            colo_set_err(err, errlen,
                         "the file's chat template (tokenizer.chat_template) is not one colo recognises; set "
                         "chat_template: to chatml, llama3, gemma, phi3, mistral or deepseek-r1 in the model's config");
            return COLO_EINVAL;
        }
    }
    snprintf(t->bos, sizeof t->bos, "%s", bos ? bos : "");
    snprintf(t->eos, sizeof t->eos, "%s", eos ? eos : "");
    if (j && t->format == COLO_CHAT_CHATML)
        chatml_default_system(j, t->default_system, sizeof t->default_system);
    if (t->format == COLO_CHAT_LLAMA3)
        llama3_date(j ? j : "Cutting Knowledge Date date_string = \"26 Jul 2024\"", t->date, sizeof t->date);
    t->close_think = t->format == COLO_CHAT_DEEPSEEK_R1 && j && strstr(j, "enable_thinking");
    t->inst_space = t->format == COLO_CHAT_MISTRAL_V1 && (!j || strstr(j, "' [INST] '") || strstr(j, "\" [INST] \""));
    return COLO_OK;
}

colo_status colo_chat_template_init(colo_chat_template *t, const colo_tokenizer *tok, const char *override,
                                    char *err, size_t errlen)
{
    char bos[64], eos[64];
    copy_token(tok, colo_tokenizer_bos(tok), bos, sizeof bos);
    copy_token(tok, colo_tokenizer_eos(tok), eos, sizeof eos);
    colo_status st = colo_chat_template_from_text(t, colo_tokenizer_chat_template(tok), override, bos, eos, err, errlen);
    if (st != COLO_OK)
        return st;
    static const char *const turn_end[] = {
        [COLO_CHAT_CHATML] = "<|im_end|>",   [COLO_CHAT_LLAMA3] = "<|eot_id|>", [COLO_CHAT_GEMMA] = "<end_of_turn>",
        [COLO_CHAT_PHI3] = "<|end|>",        [COLO_CHAT_DEEPSEEK_R1] = "<｜end▁of▁sentence｜>",
    };
    add_stop(t, colo_tokenizer_eos(tok));
    if ((size_t)t->format < sizeof turn_end / sizeof turn_end[0] && turn_end[t->format])
        add_stop(t, colo_tokenizer_find(tok, turn_end[t->format]));
    if (t->format == COLO_CHAT_LLAMA3)
        add_stop(t, colo_tokenizer_find(tok, "<|eom_id|>"));
    add_stop(t, colo_tokenizer_eot(tok));
    if (t->format == COLO_CHAT_CHATML)
        add_stop(t, colo_tokenizer_find(tok, "<|endoftext|>"));
    return COLO_OK;
}

/* ---- rendering --------------------------------------------------------------------------- */

/* The prompt, and which of its bytes are messages' text (plain[i] 1):
 * the template's own bytes are 0. */
typedef struct {
    char *s;
    uint8_t *plain;
    size_t n, cap;
    bool oom;
    const colo_chat_msg *msgs;          /* the messages rendered */
    const uint8_t *const *content_plain; /* their marks (colo_chat_prompt_marked) */
} sbuf;

/* n bytes of s; mask: their plain marks (NULL: all `fill`). */
static void put_marked(sbuf *b, const char *s, size_t n, const uint8_t *mask, uint8_t fill)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        uint8_t *q = realloc(b->plain, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->plain = q;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    if (mask)
        memcpy(b->plain + b->n, mask, n);
    else
        memset(b->plain + b->n, fill, n);
    b->n += n;
    b->s[b->n] = 0;
    b->plain[b->n] = 0;
}

/* The template's own text. */
static void put_n(sbuf *b, const char *s, size_t n) { put_marked(b, s, n, NULL, 0); }
static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

/* Text of message m (one of b->msgs): s points into m->content (n
 * bytes). Its plain marks are the message's, or all set. */
static void put_msg_n(sbuf *b, const colo_chat_msg *m, const char *s, size_t n)
{
    const uint8_t *mask = b->content_plain ? b->content_plain[m - b->msgs] : NULL;
    put_marked(b, s, n, mask ? mask + (s - m->content) : NULL, 1);
}
static void put_msg(sbuf *b, const colo_chat_msg *m, const char *s) { put_msg_n(b, m, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* jinja's |trim of message m's text s */
static void put_trim(sbuf *b, const colo_chat_msg *m, const char *s)
{
    size_t n = strlen(s);
    while (n && is_ws(*s))
        s++, n--;
    while (n && is_ws(s[n - 1]))
        n--;
    put_msg_n(b, m, s, n);
}

static bool role_is(const colo_chat_msg *m, const char *r) { return !strcmp(m->role, r); }

/* Message m as a turn headed by its role: open, the role, head_end, its
 * text (trimmed: jinja's |trim), end. */
static void put_turn(sbuf *b, const colo_chat_msg *m, const char *open, const char *head_end, bool trim,
                     const char *end)
{
    put(b, open);
    put(b, m->role);
    put(b, head_end);
    if (trim)
        put_trim(b, m, m->content);
    else
        put_msg(b, m, m->content);
    put(b, end);
}

static void render_chatml(const colo_chat_template *t, const colo_chat_msg *m, int n, sbuf *b)
{
    if (t->default_system[0] && n > 0 && !role_is(&m[0], "system")) {
        put(b, "<|im_start|>system\n");
        put(b, t->default_system);
        put(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++)
        put_turn(b, &m[i], "<|im_start|>", "\n", false, "<|im_end|>\n");
    put(b, "<|im_start|>assistant\n");
}

static void render_llama3(const colo_chat_template *t, const colo_chat_msg *m, int n, sbuf *b)
{
    put(b, t->bos);
    int i = 0;
    if (t->date[0]) { /* Llama 3.1+: the system block is always there */
        put(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        put(b, t->date);
        put(b, "\n\n");
        if (n > 0 && role_is(&m[0], "system")) {
            put_trim(b, &m[0], m[0].content);
            i = 1;
        }
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++)
        put_turn(b, &m[i], "<|start_header_id|>", "<|end_header_id|>\n\n", true, "<|eot_id|>");
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_gemma(const colo_chat_template *t, const colo_chat_msg *m, int n, sbuf *b)
{
    put(b, t->bos);
    const char *prefix = NULL;
    int i = 0;
    if (n > 0 && role_is(&m[0], "system")) {
        prefix = m[0].content;
        i = 1;
    }
    for (bool first = true; i < n; i++, first = false) {
        put(b, "<start_of_turn>");
        put(b, role_is(&m[i], "assistant") ? "model" : m[i].role);
        put(b, "\n");
        if (first && prefix) {
            put_msg(b, &m[0], prefix);
            put(b, "\n\n");
        }
        put_trim(b, &m[i], m[i].content);
        put(b, "<end_of_turn>\n");
    }
    put(b, "<start_of_turn>model\n");
}

static void render_phi3(const colo_chat_msg *m, int n, sbuf *b)
{
    for (int i = 0; i < n; i++) {
        const char *tag = role_is(&m[i], "system") ? (m[i].content[0] ? "<|system|>\n" : NULL)
                          : role_is(&m[i], "user")    ? "<|user|>\n"
                          : role_is(&m[i], "assistant") ? "<|assistant|>\n"
                                                        : NULL;
        if (!tag)
            continue;
        put(b, tag);
        put_msg(b, &m[i], m[i].content);
        put(b, "<|end|>\n");
    }
    put(b, "<|assistant|>\n");
}

/* Mistral v3: the system message goes into the last user turn, when the
 * chat ends with one (or with tool calls and results after it); tekken has
 * no spaces inside [INST]...[/INST]. v1 puts it into the first user turn,
 * with spaces around [INST] and [/INST]. The roles "tools" and "tool", and
 * an assistant turn that is a [TOOL_CALLS] block, are models/sample/tools.c's
 * blocks, written as they are. */
static void render_mistral(const colo_chat_template *t, const colo_chat_msg *m, int n, sbuf *b)
{
    bool tekken = t->format == COLO_CHAT_MISTRAL_V3_TEKKEN, v1 = t->format == COLO_CHAT_MISTRAL_V1;
    const char *open = tekken ? "[INST]" : v1 && t->inst_space ? " [INST] " : "[INST] ";
    const char *close = v1 ? " [/INST]" : "[/INST]";
    const char *sys = NULL;
    int i = 0;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = m[0].content;
        i = 1;
    }
    /* v3: the system message goes into the last user turn when nothing but
     * tool calls and results (models/sample/tools.c) follow it */
    int sys_at = n - 1;
    for (int j = n - 1; j >= i && !role_is(&m[j], "user"); j--) {
        bool toolish = role_is(&m[j], "tool") || role_is(&m[j], "tools") ||
                       (role_is(&m[j], "assistant") && !strncmp(m[j].content, "[TOOL_CALLS]", 12));
        sys_at = toolish ? j - 1 : -1;
        if (!toolish)
            break;
    }
    put(b, t->bos);
    for (int first = i; i < n; i++) {
        if (role_is(&m[i], "tool") || role_is(&m[i], "tools")) {
            put_msg(b, &m[i], m[i].content); /* tools.c's [AVAILABLE_TOOLS] and [TOOL_RESULTS] blocks, outside [INST] */
        } else if (role_is(&m[i], "assistant") && !strncmp(m[i].content, "[TOOL_CALLS]", 12)) {
            put_msg(b, &m[i], m[i].content);
            put(b, t->eos);
        } else if (role_is(&m[i], "user")) {
            put(b, open);
            if (sys && (v1 ? i == first : i == sys_at)) {
                put_msg(b, &m[0], sys);
                put(b, "\n\n");
            }
            put_msg(b, &m[i], m[i].content);
            put(b, close);
        } else if (role_is(&m[i], "assistant")) {
            if (v1) {
                put(b, t->inst_space ? " " : "");
                put_msg(b, &m[i], m[i].content);
            } else if (tekken) {
                put_msg(b, &m[i], m[i].content);
            } else {
                put(b, " ");
                put_trim(b, &m[i], m[i].content);
            }
            put(b, t->eos);
        }
    }
}

static void render_deepseek_r1(const colo_chat_template *t, const colo_chat_msg *m, int n, sbuf *b)
{
    put(b, t->bos);
    const colo_chat_msg *sys = NULL;
    for (int i = 0; i < n; i++)
        if (role_is(&m[i], "system"))
            sys = &m[i];
    if (sys)
        put_msg(b, sys, sys->content);
    for (int i = 0; i < n; i++) {
        if (role_is(&m[i], "user")) {
            put(b, "<｜User｜>");
            put_msg(b, &m[i], m[i].content);
        } else if (role_is(&m[i], "assistant")) {
            const char *c = m[i].content, *think;
            while ((think = strstr(c, "</think>")))
                c = think + strlen("</think>");
            put(b, "<｜Assistant｜>");
            put_msg(b, &m[i], c);
            put(b, "<｜end▁of▁sentence｜>");
        }
    }
    put(b, "<｜Assistant｜><think>\n");
    if (t->close_think)
        put(b, "</think>");
}

char *colo_chat_prompt_marked(const colo_chat_template *t, const colo_chat_msg *msgs, int n,
                              const uint8_t *const *content_plain, uint8_t **plain)
{
    sbuf b = {.msgs = msgs, .content_plain = content_plain};
    switch (t->format) {
    case COLO_CHAT_NONE: return NULL;
    case COLO_CHAT_CHATML: render_chatml(t, msgs, n, &b); break;
    case COLO_CHAT_LLAMA3: render_llama3(t, msgs, n, &b); break;
    case COLO_CHAT_GEMMA: render_gemma(t, msgs, n, &b); break;
    case COLO_CHAT_PHI3: render_phi3(msgs, n, &b); break;
    case COLO_CHAT_MISTRAL_V1:
    case COLO_CHAT_MISTRAL_V3:
    case COLO_CHAT_MISTRAL_V3_TEKKEN: render_mistral(t, msgs, n, &b); break;
    case COLO_CHAT_DEEPSEEK_R1: render_deepseek_r1(t, msgs, n, &b); break;
    }
    put(&b, "");
    if (b.oom) {
        free(b.s);
        free(b.plain);
        return NULL;
    }
    if (plain)
        *plain = b.plain;
    else
        free(b.plain);
    return b.s;
}

char *colo_chat_prompt(const colo_chat_template *t, const colo_chat_msg *msgs, int n)
{
    return colo_chat_prompt_marked(t, msgs, n, NULL, NULL);
}

char *colo_chatml_prompt(const colo_chat_msg *msgs, int n)
{
    colo_chat_template t = {.format = COLO_CHAT_CHATML};
    return colo_chat_prompt(&t, msgs, n);
}
