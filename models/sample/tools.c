/* Tools in a chat: the prompt in the model's own format, the schema of a
 * forced call, and calls read back from an output (models/sample/tools.h). */
#include "models/sample/tools.h"

#include "runtime/status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum style { HERMES, LLAMA3, MISTRAL } style;

static style style_of(const colo_chat_template *t)
{
    switch (t->format) {
    case COLO_CHAT_LLAMA3: return LLAMA3;
    case COLO_CHAT_MISTRAL_V1:
    case COLO_CHAT_MISTRAL_V3:
    case COLO_CHAT_MISTRAL_V3_TEKKEN: return MISTRAL;
    default: return HERMES;
    }
}

/* Text, and which of its bytes are the client's (plain[i] 1: a control
 * token written there stays text) and which are the format's markup (0). */
typedef struct buf {
    char *s;
    uint8_t *plain;
    size_t len, cap;
    bool oom;
} buf;

static void put_marked(buf *b, const char *s, size_t n, uint8_t mark)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t;
        uint8_t *q = realloc(b->plain, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->plain = q, b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    memset(b->plain + b->len, mark, n);
    b->len += n;
    b->s[b->len] = 0;
    b->plain[b->len] = 0;
}

/* The format's markup. */
static void put(buf *b, const char *s) { put_marked(b, s, s ? strlen(s) : 0, 0); }
/* The client's text (contents, tool definitions, calls, results). */
static void put_text(buf *b, const char *s) { put_marked(b, s, s ? strlen(s) : 0, 1); }

/* json text -> value (an empty object when it is not one) */
static json_t *params_value(const char *text)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_pack("{s:s,s:{}}", "type", "object", "properties");
    }
    return v;
}

/* {"type": "function", "function": {...}} as the templates write it */
static void put_tool(buf *b, const colo_tool_def *t, size_t flags)
{
    json_t *fn = json_object();
    json_t *v = json_object();
    if (!fn || !v) {
        b->oom = true;
        goto out;
    }
    json_object_set_new(fn, "name", json_string(t->name));
    if (t->description && t->description[0])
        json_object_set_new(fn, "description", json_string(t->description));
    json_object_set_new(fn, "parameters", params_value(t->parameters));
    json_object_set_new(v, "type", json_string("function"));
    json_object_set(v, "function", fn);
    char *s = json_dumps(v, flags | JSON_PRESERVE_ORDER);
    if (!s)
        b->oom = true;
    put_text(b, s);
    free(s);
out:
    json_decref(fn);
    json_decref(v);
}

/* {"name": "f", "arguments": {...}} (key "parameters" for llama3) */
static void put_call(buf *b, style st, const char *name, const char *args)
{
    json_t *v = json_object();
    json_t *a = params_value(args);
    if (args) { /* keep what the client sent, even if not an object */
        json_t *x = json_loads(args, JSON_DECODE_ANY, NULL);
        if (x) {
            json_decref(a);
            a = x;
        }
    }
    if (!v || !a) {
        b->oom = true;
    } else {
        json_object_set_new(v, "name", json_string(name ? name : ""));
        json_object_set(v, st == LLAMA3 ? "parameters" : "arguments", a);
        char *s = json_dumps(v, JSON_PRESERVE_ORDER);
        if (!s)
            b->oom = true;
        put_text(b, s);
        free(s);
    }
    json_decref(v);
    json_decref(a);
}

static void put_tools_block(buf *b, style st, const colo_tool_def *tools, int n_tools)
{
    if (st == HERMES) {
        put(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (int i = 0; i < n_tools; i++) {
            put(b, "\n");
            put_tool(b, &tools[i], 0);
        }
        put(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call>");
    } else if (st == LLAMA3) {
        put(b, "Given the following functions, please respond with a JSON for a function call with its proper "
               "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
               "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n");
        for (int i = 0; i < n_tools; i++) {
            put_tool(b, &tools[i], JSON_INDENT(4));
            put(b, "\n\n");
        }
    } else {
        put(b, "[AVAILABLE_TOOLS] [");
        for (int i = 0; i < n_tools; i++) {
            if (i)
                put(b, ", ");
            put_tool(b, &tools[i], 0);
        }
        put(b, "][/AVAILABLE_TOOLS]");
    }
}

/* b's text (the caller frees), its marks into *plain (the caller frees;
 * NULL for ""); NULL when out of memory. */
static char *take(buf *b, uint8_t **plain)
{
    *plain = NULL;
    if (b->oom) {
        free(b->s);
        free(b->plain);
        return NULL;
    }
    if (!b->s)
        return strdup("");
    *plain = b->plain;
    return b->s;
}

/* The tool results starting at msgs[*i] as one turn into b; returns the
 * turn's role. Hermes gathers consecutive results into one user turn and
 * leaves *i on the last of them. */
static const char *put_tool_results(buf *b, style st, const colo_tool_msg *msgs, int n, int *i)
{
    const colo_tool_msg *m = &msgs[*i];
    if (st == HERMES) {
        for (; *i < n && !strcmp(msgs[*i].m.role, "tool"); (*i)++) {
            if (b->len)
                put(b, "\n");
            put(b, "<tool_response>\n");
            put_text(b, msgs[*i].m.content);
            put(b, "\n</tool_response>");
        }
        (*i)--;
        return "user";
    }
    if (st == LLAMA3) {
        put_text(b, m->m.content);
        return "ipython";
    }
    json_t *r = json_pack("{s:s,s:s}", "content", m->m.content ? m->m.content : "", "call_id",
                          m->tool_call_id ? m->tool_call_id : "");
    char *s = r ? json_dumps(r, JSON_PRESERVE_ORDER) : NULL;
    json_decref(r);
    if (!s)
        b->oom = true;
    put(b, "[TOOL_RESULTS] ");
    put_text(b, s);
    put(b, "[/TOOL_RESULTS]");
    free(s);
    return "tool"; /* written as it is, outside [INST] (models/sample/chat.c) */
}

/* An assistant turn with tool calls into b: its text, then the calls in
 * the family's format. */
static void put_assistant_calls(buf *b, style st, const colo_tool_msg *m)
{
    put_text(b, m->m.content);
    if (st == HERMES) {
        for (int c = 0; c < m->n_calls; c++) {
            if (b->len)
                put(b, "\n");
            put(b, "<tool_call>\n");
            put_call(b, st, m->call_names[c], m->call_args[c]);
            put(b, "\n</tool_call>");
        }
    } else if (st == LLAMA3) {
        for (int c = 0; c < m->n_calls; c++) {
            if (b->len)
                put(b, "\n");
            put_call(b, st, m->call_names[c], m->call_args[c]);
        }
    } else {
        put(b, "[TOOL_CALLS] [");
        for (int c = 0; c < m->n_calls; c++) {
            if (c)
                put(b, ", ");
            put_call(b, st, m->call_names[c], m->call_args[c]);
        }
        put(b, "]");
    }
}

/* A forced call (Hermes): prompt and its marks (*pm) end with the call's
 * opening tag, which is ours. Returns the prompt, or NULL (prompt freed)
 * when out of memory; *pm stays the caller's to free. */
static char *open_forced_call(char *prompt, uint8_t **pm)
{
    size_t l = strlen(prompt), add = strlen("<tool_call>\n");
    char *p = realloc(prompt, l + add + 1);
    uint8_t *q = p ? realloc(*pm, l + add + 1) : NULL;
    if (p)
        prompt = p;
    if (q)
        *pm = q;
    if (!p || !q) {
        free(prompt);
        return NULL;
    }
    memcpy(prompt + l, "<tool_call>\n", add + 1);
    memset(*pm + l, 0, add + 1);
    return prompt;
}

char *colo_tools_prompt_marked(const colo_chat_template *t, const colo_tool_msg *msgs, int n,
                               const colo_tool_def *tools, int n_tools, bool forced, uint8_t **plain)
{
    if (t->format == COLO_CHAT_NONE)
        return NULL;
    style st = style_of(t);
    /* at most one more message (a system message for the tools) */
    colo_chat_msg *out = calloc((size_t)n + 1, sizeof *out);
    char **owned = calloc((size_t)n + 1, sizeof *owned);
    uint8_t **owned_plain = calloc((size_t)n + 1, sizeof *owned_plain);
    const uint8_t **out_plain = calloc((size_t)n + 1, sizeof *out_plain); /* per out[k]; NULL: the client's */
    uint8_t *pm = NULL;
    int k = 0;
    char *prompt = NULL;
    if (plain)
        *plain = NULL;
    if (!out || !owned || !owned_plain || !out_plain)
        goto out_free;
    int last_user = -1, first_user = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(msgs[i].m.role, "user")) {
            last_user = i;
            if (first_user < 0)
                first_user = i;
        }
    if (n_tools > 0 && st == HERMES) {
        buf b = {0};
        const char *sys = n > 0 && !strcmp(msgs[0].m.role, "system") ? msgs[0].m.content : t->default_system;
        if (sys && sys[0]) {
            if (sys == t->default_system)
                put(&b, sys);
            else
                put_text(&b, sys);
            put(&b, "\n\n");
        }
        put_tools_block(&b, st, tools, n_tools);
        if (!(owned[k] = take(&b, &owned_plain[k])))
            goto out_free;
        out[k] = (colo_chat_msg){"system", owned[k]};
        out_plain[k] = owned_plain[k];
        k++;
    }
    for (int i = 0; i < n; i++) {
        const colo_tool_msg *m = &msgs[i];
        buf b = {0};
        const char *role = m->m.role;
        if (i == 0 && n_tools > 0 && st == HERMES && !strcmp(role, "system"))
            continue; /* written above, with the tools */
        if (!strcmp(role, "tool")) {
            role = put_tool_results(&b, st, msgs, n, &i);
        } else if (!strcmp(role, "assistant") && m->n_calls > 0) {
            put_assistant_calls(&b, st, m);
        } else if (n_tools > 0 && !strcmp(role, "user") && st == LLAMA3 && i == first_user) {
            put_tools_block(&b, st, tools, n_tools);
            put_text(&b, m->m.content);
        } else if (n_tools > 0 && !strcmp(role, "user") && st == MISTRAL && i == last_user) {
            /* the tool list just before the last user turn, as its own block */
            put_tools_block(&b, st, tools, n_tools);
            if (!(owned[k] = take(&b, &owned_plain[k])))
                goto out_free;
            out[k] = (colo_chat_msg){"tools", owned[k]};
            out_plain[k] = owned_plain[k];
            k++;
            out[k++] = m->m;
            continue;
        } else {
            out[k++] = m->m;
            continue;
        }
        if (!(owned[k] = take(&b, &owned_plain[k])))
            goto out_free;
        out[k] = (colo_chat_msg){role, owned[k]};
        out_plain[k] = owned_plain[k];
        k++;
    }
    prompt = colo_chat_prompt_marked(t, out, k, out_plain, &pm);
    if (prompt && forced && st == HERMES)
        prompt = open_forced_call(prompt, &pm);
    if (prompt && plain) {
        *plain = pm;
        pm = NULL;
    }
out_free:
    free(pm);
    if (owned)
        for (int i = 0; i <= n; i++)
            free(owned[i]);
    if (owned_plain)
        for (int i = 0; i <= n; i++)
            free(owned_plain[i]);
    free(owned_plain);
    free(out_plain);
    free(owned);
    free(out);
    return prompt;
}

char *colo_tools_prompt(const colo_chat_template *t, const colo_tool_msg *msgs, int n, const colo_tool_def *tools,
                        int n_tools, bool forced)
{
    return colo_tools_prompt_marked(t, msgs, n, tools, n_tools, forced, NULL);
}

char *colo_tools_call_schema(const colo_chat_template *t, const colo_tool_def *tools, int n_tools, int only,
                             char *err, size_t errlen)
{
    style st = style_of(t);
    json_t *root = json_object(), *defs = json_object(), *alts = json_array();
    char *text = NULL;
    if (!root || !defs || !alts) {
        colo_set_err(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n_tools; i++) {
        if (only >= 0 && i != only)
            continue;
        json_t *params = tools[i].parameters ? json_loads(tools[i].parameters, 0, NULL) : NULL;
        if (tools[i].parameters && !json_is_object(params)) {
            json_decref(params);
            colo_set_err(err, errlen, "tools: the parameters of '%.64s' are not a JSON object", tools[i].name);
            goto out;
        }
        if (!params)
            params = json_pack("{s:s}", "type", "object");
        /* $refs point at the document's root: the definitions go there */
        static const char *const keys[] = {"$defs", "definitions"};
        for (int d = 0; d < 2; d++) {
            json_t *x = json_object_get(params, keys[d]);
            if (json_is_object(x)) {
                json_t *into = json_object_get(root, keys[d]);
                if (!into) {
                    into = json_object();
                    json_object_set_new(root, keys[d], into);
                }
                json_object_update(into, x);
                json_object_del(params, keys[d]);
            }
        }
        json_t *one = json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object", "properties", "name",
                                "const", tools[i].name, st == LLAMA3 ? "parameters" : "arguments", params,
                                "required", "name", st == LLAMA3 ? "parameters" : "arguments",
                                "additionalProperties", 0);
        if (!one || json_array_append_new(alts, one)) {
            colo_set_err(err, errlen, "out of memory");
            goto out;
        }
    }
    if (json_array_size(alts) == 0) {
        colo_set_err(err, errlen, "tool_choice: no such function");
        goto out;
    }
    if (json_array_size(alts) == 1)
        json_object_update(root, json_array_get(alts, 0));
    else
        json_object_set(root, "anyOf", alts);
    if (!(text = json_dumps(root, JSON_COMPACT)))
        colo_set_err(err, errlen, "out of memory");
out:
    json_decref(root);
    json_decref(defs);
    json_decref(alts);
    return text;
}

static int tool_index(const colo_tool_def *tools, int n_tools, const char *name)
{
    for (int i = 0; i < n_tools; i++)
        if (!strcmp(tools[i].name, name))
            return i;
    return -1;
}

/* One call object ({"name", "arguments"|"parameters"}), appended to *calls. */
static int add_call(json_t *v, const colo_tool_def *tools, int n_tools, colo_tool_call **calls, int *n)
{
    json_t *name = json_object_get(v, "name");
    json_t *args = json_object_get(v, "arguments");
    if (!args)
        args = json_object_get(v, "parameters");
    if (!json_is_string(name) || tool_index(tools, n_tools, json_string_value(name)) < 0)
        return 0;
    json_t *owned = NULL;
    if (json_is_string(args)) /* arguments as a JSON string */
        args = owned = json_loads(json_string_value(args), 0, NULL);
    if (!args)
        args = owned = json_object();
    if (!json_is_object(args)) {
        json_decref(owned);
        return 0;
    }
    colo_tool_call *c = realloc(*calls, (size_t)(*n + 1) * sizeof *c);
    if (!c) {
        json_decref(owned);
        return -1;
    }
    *calls = c;
    c[*n].name = strdup(json_string_value(name));
    c[*n].arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(owned);
    if (!c[*n].name || !c[*n].arguments) {
        free(c[*n].name);
        free(c[*n].arguments);
        return -1;
    }
    (*n)++;
    return 0;
}

/* A JSON value at the head of s (after whitespace): its calls; *used the
 * bytes read. */
static int parse_value(const char *s, size_t len, size_t *used, const colo_tool_def *tools, int n_tools,
                       colo_tool_call **calls, int *n)
{
    size_t skip = 0;
    while (skip < len && strchr(" \t\r\n", s[skip]))
        skip++;
    json_error_t je;
    json_t *v = json_loadb(s + skip, len - skip, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (!v) {
        *used = 0;
        return 0;
    }
    *used = skip + (size_t)je.position;
    int rc = 0;
    if (json_is_object(v))
        rc = add_call(v, tools, n_tools, calls, n);
    else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (rc == 0 && json_is_object(x)) rc = add_call(x, tools, n_tools, calls, n);
    }
    json_decref(v);
    return rc;
}

int colo_tools_parse(const char *text, size_t len, const colo_tool_def *tools, int n_tools, colo_tool_call **calls,
                     size_t *content_len)
{
    *calls = NULL;
    *content_len = len;
    int n = 0;
    static const char open[] = "<tool_call>", close[] = "</tool_call>", mistral[] = "[TOOL_CALLS]";
    const char *end = text + len;
    const char *h = memmem(text, len, open, sizeof open - 1);
    const char *m = memmem(text, len, mistral, sizeof mistral - 1);
    size_t used;
    if (h && (!m || h < m)) {
        const char *p = h;
        while (p && p < end) {
            p += sizeof open - 1;
            if (parse_value(p, (size_t)(end - p), &used, tools, n_tools, calls, &n) < 0)
                goto oom;
            if (!used)
                break;
            p += used;
            while (p < end && strchr(" \t\r\n", *p))
                p++;
            if ((size_t)(end - p) >= sizeof close - 1 && !memcmp(p, close, sizeof close - 1))
                p += sizeof close - 1;
            p = memmem(p, (size_t)(end - p), open, sizeof open - 1);
        }
        if (n)
            *content_len = (size_t)(h - text);
    } else if (m) {
        const char *p = m + sizeof mistral - 1;
        if (parse_value(p, (size_t)(end - p), &used, tools, n_tools, calls, &n) < 0)
            goto oom;
        if (n)
            *content_len = (size_t)(m - text);
    } else {
        /* a bare call: the whole output is a JSON object or array of calls */
        size_t skip = 0;
        while (skip < len && strchr(" \t\r\n", text[skip]))
            skip++;
        if (skip < len && (text[skip] == '{' || text[skip] == '[')) {
            if (parse_value(text, len, &used, tools, n_tools, calls, &n) < 0)
                goto oom;
            if (n)
                *content_len = 0;
        }
    }
    while (n && *content_len && strchr(" \t\r\n", text[*content_len - 1]))
        (*content_len)--;
    return n;
oom:
    colo_tools_calls_free(*calls, n);
    *calls = NULL;
    return -1;
}

void colo_tools_calls_free(colo_tool_call *calls, int n)
{
    if (!calls)
        return;
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
