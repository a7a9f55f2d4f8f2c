/* Structured output and tools in request bodies and answers. */
#include "server/api/api_tools.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>


static char *pool_dump(colo_request *r, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char *p = s ? colo_pool_strndup(r->pool, s, strlen(s)) : NULL;
    free(s);
    return p;
}

static const char *pool_str(colo_request *r, json_t *v)
{
    return colo_pool_strndup(r->pool, json_string_value(v), json_string_length(v));
}

/* The first key of object o not in allowed (NULL-ended), or NULL. */
static const char *unknown_key(json_t *o, const char *const *allowed)
{
    const char *k;
    json_t *x;
    json_object_foreach(o, k, x) {
        bool known = false;
        for (int i = 0; allowed[i] && !known; i++)
            known = !strcmp(k, allowed[i]);
        if (!known)
            return k;
    }
    return NULL;
}

colo_status colo_api_response_format(colo_request *r, json_t *v, char *err, size_t errlen)
{
    json_t *t = json_object_get(v, "type");
    if (json_is_null(v))
        return COLO_OK;
    if (!json_is_object(v) || !json_is_string(t)) {
        colo_set_err(err, errlen, "response_format: must be {\"type\":\"text\"|\"json_object\"|\"json_schema\"}");
        return COLO_EINVAL;
    }
    const char *type = json_string_value(t);
    static const char *const text_keys[] = {"type", NULL}, *const object_keys[] = {"type", "schema", NULL},
                             *const schema_keys[] = {"type", "json_schema", NULL},
                             *const inner_keys[] = {"name", "schema", "strict", "description", NULL};
    bool text = !strcmp(type, "text"), object = !strcmp(type, "json_object"), js_type = !strcmp(type, "json_schema");
    if (!text && !object && !js_type) {
        colo_set_err(err, errlen, "response_format.type: '%.32s' is not text, json_object or json_schema", type);
        return COLO_EINVAL;
    }
    const char *unknown = unknown_key(v, text ? text_keys : object ? object_keys : schema_keys);
    if (unknown) {
        colo_set_err(err, errlen, "response_format.%.32s: not a field of a %s response format", unknown, type);
        return COLO_EINVAL;
    }
    if (text)
        return COLO_OK;
    json_t *js = json_object_get(v, "json_schema");
    json_t *schema = object ? json_object_get(v, "schema") : json_object_get(js, "schema");
    if (object && !schema) {
        r->params.json_object = true;
        return COLO_OK;
    }
    /* json_object with a schema: the schema, as llama.cpp's and vLLM's servers do */
    json_t *name = json_object_get(js, "name");
    if (js_type && (!json_is_object(js) || !json_is_string(name) || json_string_length(name) == 0 ||
                    json_string_length(name) > 64)) {
        colo_set_err(err, errlen, "response_format.json_schema: must be {\"name\":\"...\",\"schema\":{...},"
                                  "\"strict\":true} (a name of 1 to 64 characters is required)");
        return COLO_EINVAL;
    }
    if (js_type && (unknown = unknown_key(js, inner_keys))) {
        colo_set_err(err, errlen, "response_format.json_schema.%.32s: not a field of json_schema", unknown);
        return COLO_EINVAL;
    }
    if (!schema) /* OpenAI: no schema means any object */
        schema = json_pack("{s:s}", "type", "object");
    else
        json_incref(schema);
    if (!json_is_object(schema)) {
        json_decref(schema);
        colo_set_err(err, errlen, "response_format.%s: must be a JSON Schema object",
                     object ? "schema" : "json_schema.schema");
        return COLO_EINVAL;
    }
    r->params.json_schema = pool_dump(r, schema);
    json_decref(schema);
    if (!r->params.json_schema) {
        colo_set_err(err, errlen, "response_format: out of memory");
        return COLO_ENOMEM;
    }
    return COLO_OK; /* compiled (and refused with the construct) by the model's kind */
}

static bool good_name(json_t *n)
{
    if (!json_is_string(n) || json_string_length(n) == 0 || json_string_length(n) > 64)
        return false;
    for (const char *p = json_string_value(n); *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-' || *p == '.'))
            return false;
    return true;
}

/* One tool (name, description, parameters) into t. */
static colo_status tool_def(colo_request *r, json_t *name, json_t *desc, json_t *params, const char *where, int i,
                            colo_req_tool *t, char *err, size_t errlen)
{
    if (!good_name(name)) {
        colo_set_err(err, errlen, "%s[%d]: name must be 1 to 64 of a-z, A-Z, 0-9, '_', '-', '.'", where, i);
        return COLO_EINVAL;
    }
    if (desc && !json_is_null(desc) && !json_is_string(desc)) {
        colo_set_err(err, errlen, "%s[%d]: description must be a string", where, i);
        return COLO_EINVAL;
    }
    if (params && !json_is_null(params) && !json_is_object(params)) {
        colo_set_err(err, errlen, "%s[%d]: the parameters must be a JSON Schema object", where, i);
        return COLO_EINVAL;
    }
    t->name = pool_str(r, name);
    t->description = json_is_string(desc) ? pool_str(r, desc) : "";
    t->parameters = json_is_object(params) ? pool_dump(r, params) : "{\"type\":\"object\",\"properties\":{}}";
    if (!t->name || !t->description || !t->parameters) {
        colo_set_err(err, errlen, "%s: out of memory", where);
        return COLO_ENOMEM;
    }
    return COLO_OK;
}

static colo_status tools_common(colo_request *r, json_t *v, bool openai, char *err, size_t errlen)
{
    const char *where = "tools";
    if (json_is_null(v))
        return COLO_OK;
    if (!json_is_array(v) || json_array_size(v) > COLO_API_MAX_TOOLS) {
        colo_set_err(err, errlen, "tools: must be an array of at most %d tools", COLO_API_MAX_TOOLS);
        return COLO_EINVAL;
    }
    size_t n = json_array_size(v), i;
    if (n == 0)
        return COLO_OK;
    colo_req_tool *t = colo_pool_calloc(r->pool, n, sizeof *t);
    if (!t) {
        colo_set_err(err, errlen, "tools: out of memory");
        return COLO_ENOMEM;
    }
    json_t *x;
    json_array_foreach(v, i, x)
    {
        colo_status st;
        if (openai) {
            json_t *type = json_object_get(x, "type"), *fn = json_object_get(x, "function");
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn)) {
                colo_set_err(err, errlen, "tools[%zu]: must be {\"type\":\"function\",\"function\":{...}}", i);
                return COLO_EINVAL;
            }
            st = tool_def(r, json_object_get(fn, "name"), json_object_get(fn, "description"),
                          json_object_get(fn, "parameters"), where, (int)i, &t[i], err, errlen);
        } else {
            json_t *type = json_object_get(x, "type");
            if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "custom"))) {
                colo_set_err(err, errlen, "tools[%zu]: server tools (type '%.32s') are not supported", i,
                             json_is_string(type) ? json_string_value(type) : "?");
                return COLO_EINVAL;
            }
            json_t *schema = json_object_get(x, "input_schema");
            if (!json_is_object(schema)) {
                colo_set_err(err, errlen, "tools[%zu].input_schema: required (a JSON Schema object)", i);
                return COLO_EINVAL;
            }
            st = tool_def(r, json_object_get(x, "name"), json_object_get(x, "description"), schema, where, (int)i,
                          &t[i], err, errlen);
        }
        if (st != COLO_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(t[j].name, t[i].name)) {
                colo_set_err(err, errlen, "tools[%zu]: a second tool named '%s'", i, t[i].name);
                return COLO_EINVAL;
            }
    }
    r->params.tools = t;
    r->params.n_tools = (int)n;
    return COLO_OK;
}

colo_status colo_api_openai_tools(colo_request *r, json_t *v, char *err, size_t errlen)
{
    return tools_common(r, v, true, err, errlen);
}

colo_status colo_api_anthropic_tools(colo_request *r, json_t *v, char *err, size_t errlen)
{
    return tools_common(r, v, false, err, errlen);
}

colo_status colo_api_openai_tool_choice(colo_request *r, json_t *v, char *err, size_t errlen)
{
    if (json_is_null(v))
        return COLO_OK;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "auto"))
            r->params.tool_choice = COLO_TOOLS_AUTO;
        else if (!strcmp(s, "none"))
            r->params.tool_choice = COLO_TOOLS_NONE;
        else if (!strcmp(s, "required"))
            r->params.tool_choice = COLO_TOOLS_REQUIRED;
        else
            goto bad;
        return COLO_OK;
    }
    json_t *type = json_object_get(v, "type"), *name = json_object_get(json_object_get(v, "function"), "name");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_string(name))
        goto bad;
    r->params.tool_choice = COLO_TOOLS_NAMED;
    if (!(r->params.tool_name = pool_str(r, name))) {
        colo_set_err(err, errlen, "tool_choice: out of memory");
        return COLO_ENOMEM;
    }
    return COLO_OK;
bad:
    colo_set_err(err, errlen, "tool_choice: must be \"auto\", \"none\", \"required\" or "
                              "{\"type\":\"function\",\"function\":{\"name\":...}}");
    return COLO_EINVAL;
}

colo_status colo_api_anthropic_tool_choice(colo_request *r, json_t *v, char *err, size_t errlen)
{
    if (json_is_null(v))
        return COLO_OK;
    json_t *type = json_object_get(v, "type");
    const char *t = json_string_value(type);
    if (!t)
        goto bad;
    if (!strcmp(t, "auto"))
        r->params.tool_choice = COLO_TOOLS_AUTO;
    else if (!strcmp(t, "none"))
        r->params.tool_choice = COLO_TOOLS_NONE;
    else if (!strcmp(t, "any"))
        r->params.tool_choice = COLO_TOOLS_REQUIRED;
    else if (!strcmp(t, "tool")) {
        json_t *name = json_object_get(v, "name");
        if (!json_is_string(name))
            goto bad;
        r->params.tool_choice = COLO_TOOLS_NAMED;
        if (!(r->params.tool_name = pool_str(r, name))) {
            colo_set_err(err, errlen, "tool_choice: out of memory");
            return COLO_ENOMEM;
        }
    } else
        goto bad;
    return COLO_OK;
bad:
    colo_set_err(err, errlen, "tool_choice: must be {\"type\":\"auto\"|\"any\"|\"none\"} or "
                              "{\"type\":\"tool\",\"name\":...}");
    return COLO_EINVAL;
}

colo_status colo_api_openai_message_calls(colo_request *r, json_t *calls, colo_chat_message *m, char *err,
                                          size_t errlen)
{
    if (json_is_null(calls))
        return COLO_OK;
    if (!json_is_array(calls) || json_array_size(calls) > COLO_API_MAX_TOOLS) {
        colo_set_err(err, errlen, "messages: tool_calls must be an array of calls");
        return COLO_EINVAL;
    }
    size_t n = json_array_size(calls), i;
    colo_req_tool_call *c = colo_pool_calloc(r->pool, n ? n : 1, sizeof *c);
    if (!c) {
        colo_set_err(err, errlen, "messages: out of memory");
        return COLO_ENOMEM;
    }
    json_t *x;
    json_array_foreach(calls, i, x)
    {
        json_t *id = json_object_get(x, "id"), *fn = json_object_get(x, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || (args && !json_is_string(args)) || (id && !json_is_string(id))) {
            colo_set_err(err, errlen, "messages: each tool call needs {\"id\",\"type\":\"function\",\"function\":"
                                      "{\"name\",\"arguments\"}} (arguments a JSON string)");
            return COLO_EINVAL;
        }
        c[i].id = id ? pool_str(r, id) : "";
        c[i].name = pool_str(r, name);
        c[i].arguments = args ? pool_str(r, args) : "{}";
        if (!c[i].id || !c[i].name || !c[i].arguments) {
            colo_set_err(err, errlen, "messages: out of memory");
            return COLO_ENOMEM;
        }
    }
    m->tool_calls = c;
    m->n_tool_calls = (int)n;
    return COLO_OK;
}

json_t *colo_api_tool_calls_json(const colo_req_outcome *out, bool stream)
{
    json_t *a = json_array();
    for (int i = 0; a && i < out->n_tool_calls; i++) {
        const colo_req_tool_call *c = &out->tool_calls[i];
        json_t *x = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", c->id, "type", "function", "function", "name", c->name,
                              "arguments", c->arguments);
        if (x && stream)
            json_object_set_new(x, "index", json_integer(i));
        if (!x || json_array_append_new(a, x)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

colo_status colo_api_tool_use_blocks(const colo_req_outcome *out, json_t *content)
{
    for (int i = 0; i < out->n_tool_calls; i++) {
        const colo_req_tool_call *c = &out->tool_calls[i];
        json_t *input = json_loads(c->arguments, 0, NULL);
        char id[48];
        snprintf(id, sizeof id, "toolu_%s", !strncmp(c->id, "call_", 5) ? c->id + 5 : c->id);
        json_t *b = input ? json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name", c->name, "input",
                                      input)
                          : NULL;
        if (!b || json_array_append_new(content, b))
            return COLO_ENOMEM;
    }
    return COLO_OK;
}

bool colo_api_tools_hold_stream(const colo_request *r)
{
    return r->params.n_tools > 0 && r->params.tool_choice != COLO_TOOLS_NONE && r->in.messages;
}
