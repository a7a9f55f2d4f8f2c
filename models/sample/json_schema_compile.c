/* JSON Schema -> the tables of models/sample/json_schema_impl.h: nodes, properties,
 * literals, alternatives and patterns, with a message naming the construct
 * and where it is for what is not supported. */
#include "models/sample/json_schema_impl.h"

#include "runtime/status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct comp {
    colo_schema *g;
    json_t *doc;
    char *err;
    size_t errlen;
    const char *refs[COLO_SCHEMA_MAX_DEPTH * 2]; /* $refs being expanded (recursion check) */
    int n_refs;
    int depth;
    int list_depth; /* the depth of a schema whose 'type' is a list (its keywords serve several types) */
} comp;

/* A bound the schema leaves open: the default, raised to what the schema
 * needs at least (0: no default, so none). */
static int open_bound(int dflt, int least)
{
    if (dflt <= 0)
        return -1;
    return dflt > least ? dflt : least;
}

static bool grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return true;
    int c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static int new_node(comp *c, uint8_t kind)
{
    colo_schema *g = c->g;
    if (g->n_nodes >= COLO_SCHEMA_MAX_NODES) {
        colo_set_err(c->err, c->errlen, "the schema is too large (more than %d nodes)", COLO_SCHEMA_MAX_NODES);
        return -1;
    }
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    node *nd = &g->nodes[g->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->max = -1;
    nd->items = -1;
    nd->pattern = -1;
    return g->n_nodes++;
}

static int fail(comp *c, const char *path, const char *fmt, const char *what)
{
    char msg[320];
    snprintf(msg, sizeof msg, fmt, what);
    colo_set_err(c->err, c->errlen, "%s at %s", msg, path);
    return -1;
}

static bool add_lit(comp *c, json_t *v)
{
    colo_schema *g = c->g;
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t || !grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof *g->lits)) {
        free(t);
        colo_set_err(c->err, c->errlen, "out of memory");
        return false;
    }
    g->lits[g->n_lits++] = (lit){t, strlen(t)};
    return true;
}

static bool type_matches(const char *type, json_t *v)
{
    if (!strcmp(type, "object"))
        return json_is_object(v);
    if (!strcmp(type, "array"))
        return json_is_array(v);
    if (!strcmp(type, "string"))
        return json_is_string(v);
    if (!strcmp(type, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(type, "number"))
        return json_is_number(v);
    if (!strcmp(type, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(type, "null"))
        return json_is_null(v);
    return false;
}

static int compile_node(comp *c, json_t *s, const char *path);

static const char *const ignored_keys[] = {"title", "description", "default", "examples", "$schema", "$id",
                                           "$comment", "strict", "$defs", "definitions", NULL};

static bool key_in(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i]))
            return true;
    return false;
}

/* Checks s uses only the keywords of its type (and the annotations). */
static int check_keys(comp *c, json_t *s, const char *path, const char *const *allowed)
{
    static const char *const any_type[] = {"type", "properties", "required", "additionalProperties", "items",
                                           "minItems", "maxItems", "minLength", "maxLength", "pattern",
                                           "enum", "const", NULL};
    if (c->list_depth == c->depth)
        allowed = any_type;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        (void)v;
        if (!key_in(k, ignored_keys) && !key_in(k, allowed)) {
            char what[80];
            snprintf(what, sizeof what, "%.60s", k);
            return fail(c, path, "unsupported keyword '%s'", what);
        }
    }
    return 0;
}

static int get_count(comp *c, json_t *s, const char *key, const char *path, int dflt, int *out)
{
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000)
        return fail(c, path, "'%s' must be an integer from 0 to 100000", key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int compile_pattern(comp *c, const char *src, const char *path)
{
    colo_schema *g = c->g;
    if (!grow((void **)&g->pats, &g->cap_pats, g->n_pats + 1, sizeof *g->pats)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    const char *why;
    if (colo_schema_pattern_build(&g->pats[g->n_pats], src, &why))
        return g->n_pats++;
    char what[200];
    snprintf(what, sizeof what, "pattern '%.60s' %s", src, why);
    return fail(c, path, "%s", what);
}

static int compile_object(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "properties", "required", "additionalProperties", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (addl && !json_is_boolean(addl))
        return fail(c, path, "%s", "unsupported keyword 'additionalProperties' (only false is supported)");
    if (!props) {
        if (req && json_array_size(req))
            return fail(c, path, "%s", "'required' names properties the schema does not define");
        if (addl && json_is_false(addl)) { /* the empty object */
            int id = new_node(c, K_OBJECT);
            return id;
        }
        return new_node(c, K_ANY_OBJECT);
    }
    if (!json_is_object(props))
        return fail(c, path, "%s", "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail(c, path, "%s", "'required' must be an array of names");
    size_t n = json_object_size(props);
    if (n > COLO_SCHEMA_MAX_PROPS)
        return fail(c, path, "more than %s properties", "64");
    int id = new_node(c, K_OBJECT);
    if (id < 0)
        return -1;
    colo_schema *g = c->g;
    int first = g->n_props;
    if (!grow((void **)&g->props, &g->cap_props, g->n_props + (int)n, sizeof *g->props)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    g->n_props += (int)n;
    g->nodes[id].first = first;
    g->nodes[id].n = (int)n;
    int i = 0;
    const char *k;
    json_t *v;
    for (int j = 0; j < (int)n; j++)
        g->props[first + j] = (prop){NULL, 0, -1};
    json_object_foreach(props, k, v)
    {
        json_t *ks = json_string(k);
        char *enc = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!enc) {
            colo_set_err(c->err, c->errlen, "out of memory");
            return -1;
        }
        size_t el = strlen(enc);
        memmove(enc, enc + 1, el - 2);
        enc[el - 2] = 0;
        g->props[first + i].name = enc;
        g->props[first + i].len = el - 2;
        char sub[256];
        snprintf(sub, sizeof sub, "%s/properties/%.80s", path, k);
        int child = compile_node(c, v, sub);
        if (child < 0)
            return -1;
        g->props[first + i].node = child;
        i++;
    }
    size_t ri;
    json_t *r;
    json_array_foreach(req, ri, r)
    {
        if (!json_is_string(r))
            return fail(c, path, "%s", "'required' must be an array of names");
        int found = -1;
        i = 0;
        json_object_foreach(props, k, v)
        {
            if (!strcmp(k, json_string_value(r)))
                found = i;
            i++;
        }
        if (found < 0) {
            char what[120];
            snprintf(what, sizeof what, "'required' names '%.60s', which is not in 'properties'", json_string_value(r));
            return fail(c, path, "%s", what);
        }
        g->nodes[id].required |= 1ull << found;
    }
    return id;
}

static int compile_array(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "items", "minItems", "maxItems", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    int lo, hi;
    if (get_count(c, s, "minItems", path, 0, &lo) < 0 || get_count(c, s, "maxItems", path, -1, &hi) < 0)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "%s", "'maxItems' is less than 'minItems'");
    json_t *items = json_object_get(s, "items");
    if (hi < 0)
        hi = open_bound(c->g->opt.default_max_items, lo);
    int id = new_node(c, K_ARRAY);
    if (id < 0)
        return -1;
    int child;
    if (items) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/items", path);
        child = compile_node(c, items, sub);
    } else {
        child = new_node(c, K_ANY);
    }
    if (child < 0)
        return -1;
    node *nd = &c->g->nodes[id];
    nd->items = child;
    nd->min = lo;
    nd->max = hi;
    return id;
}

static int compile_string(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "minLength", "maxLength", "pattern", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    int lo, hi;
    if (get_count(c, s, "minLength", path, 0, &lo) < 0 || get_count(c, s, "maxLength", path, -1, &hi) < 0)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "%s", "'maxLength' is less than 'minLength'");
    json_t *pat = json_object_get(s, "pattern");
    int pi = -1;
    if (pat) {
        if (!json_is_string(pat))
            return fail(c, path, "%s", "'pattern' must be a string");
        if ((pi = compile_pattern(c, json_string_value(pat), path)) < 0)
            return -1;
    }
    if (hi < 0) { /* at least the minimum, and a pattern's shortest match */
        int least = pi >= 0 && c->g->pats[pi].shortest > lo ? c->g->pats[pi].shortest : lo;
        hi = open_bound(c->g->opt.default_max_length, least);
    }
    int id = new_node(c, K_STRING);
    if (id < 0)
        return -1;
    node *nd = &c->g->nodes[id];
    nd->min = lo, nd->max = hi, nd->pattern = pi;
    return id;
}

static int compile_literals(comp *c, json_t *s, const char *path, const char *type)
{
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *vals = en;
    json_t *one = NULL;
    if (cn) {
        one = json_array();
        if (!one || json_array_append(one, cn)) {
            json_decref(one);
            colo_set_err(c->err, c->errlen, "out of memory");
            return -1;
        }
        vals = one;
    }
    int id = -1;
    if (!json_is_array(vals) || json_array_size(vals) == 0) {
        fail(c, path, "%s", "'enum' must be a non-empty array");
        goto out;
    }
    if (json_array_size(vals) > COLO_SCHEMA_MAX_PROPS) {
        fail(c, path, "%s", "'enum' has more than 64 values");
        goto out;
    }
    if ((id = new_node(c, K_LITERAL)) < 0)
        goto out;
    c->g->nodes[id].first = c->g->n_lits;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v)
    {
        if (en && cn && !json_equal(v, cn))
            continue;
        if (type && !type_matches(type, v))
            continue;
        if (!add_lit(c, v)) {
            id = -1;
            goto out;
        }
        c->g->nodes[id].n++;
    }
    if (c->g->nodes[id].n == 0)
        id = fail(c, path, "%s", "no value of 'enum'/'const' fits the schema's type");
out:
    json_decref(one);
    return id;
}

static int compile_typed(comp *c, json_t *s, const char *path, const char *type)
{
    static const char *const scalar[] = {"type", NULL};
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        static const char *const allowed[] = {"type", "enum", "const", NULL};
        if (check_keys(c, s, path, allowed) < 0)
            return -1;
        return compile_literals(c, s, path, type);
    }
    if (!type) {
        if (json_object_get(s, "properties"))
            type = "object";
        else if (json_object_get(s, "items"))
            type = "array";
        else {
            static const char *const none[] = {NULL};
            if (check_keys(c, s, path, none) < 0)
                return -1;
            return new_node(c, K_ANY);
        }
    }
    if (!strcmp(type, "object"))
        return compile_object(c, s, path);
    if (!strcmp(type, "array"))
        return compile_array(c, s, path);
    if (!strcmp(type, "string"))
        return compile_string(c, s, path);
    if (check_keys(c, s, path, scalar) < 0)
        return -1;
    if (!strcmp(type, "integer"))
        return new_node(c, K_INTEGER);
    if (!strcmp(type, "number"))
        return new_node(c, K_NUMBER);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        int id = new_node(c, K_LITERAL);
        if (id < 0)
            return -1;
        c->g->nodes[id].first = c->g->n_lits;
        json_t *t = json_true(), *f = json_false(), *nl = json_null();
        bool ok = !strcmp(type, "null") ? add_lit(c, nl) : add_lit(c, t) && add_lit(c, f);
        if (!ok)
            return -1;
        c->g->nodes[id].n = !strcmp(type, "null") ? 1 : 2;
        return id;
    }
    char what[80];
    snprintf(what, sizeof what, "%.60s", type);
    return fail(c, path, "unknown type '%s'", what);
}

static int compile_alts(comp *c, json_t *list, const char *path, const char *key, json_t *s)
{
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0)
        return fail(c, path, "'%s' must be a non-empty array", key);
    if (n > COLO_SCHEMA_MAX_BRANCHES)
        return fail(c, path, "'%s' has more than 8 alternatives", key);
    int *ids = calloc(n, sizeof *ids);
    if (!ids) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    int id = -1;
    for (size_t i = 0; i < n; i++) {
        char sub[256];
        json_t *item = json_array_get(list, i);
        if (s) { /* a list of types: the schema with each type in turn */
            if (!json_is_string(item)) {
                fail(c, path, "%s", "'type' must be a name or a list of names");
                goto out;
            }
            snprintf(sub, sizeof sub, "%s", path);
            int saved = c->list_depth;
            c->list_depth = c->depth;
            ids[i] = compile_typed(c, s, sub, json_string_value(item));
            c->list_depth = saved;
        } else {
            snprintf(sub, sizeof sub, "%s/%s/%zu", path, key, i);
            ids[i] = compile_node(c, item, sub);
        }
        if (ids[i] < 0)
            goto out;
    }
    colo_schema *g = c->g;
    if ((id = new_node(c, K_ANYOF)) < 0)
        goto out;
    if (!grow((void **)&g->alts, &g->cap_alts, g->n_alts + (int)n, sizeof *g->alts)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        id = -1;
        goto out;
    }
    g->nodes[id].first = g->n_alts;
    g->nodes[id].n = (int)n;
    for (size_t i = 0; i < n; i++)
        g->alts[g->n_alts++] = ids[i];
out:
    free(ids);
    return id;
}

static int compile_ref(comp *c, json_t *s, const char *path)
{
    json_t *ref = json_object_get(s, "$ref");
    static const char *const allowed[] = {"$ref", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    if (!json_is_string(ref))
        return fail(c, path, "%s", "'$ref' must be a string");
    const char *r = json_string_value(ref);
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], r))
            return fail(c, path, "recursive $ref '%.80s' (not supported)", r);
    json_t *target = NULL;
    const char *name = NULL;
    if (!strncmp(r, "#/$defs/", 8))
        target = json_object_get(json_object_get(c->doc, "$defs"), name = r + 8);
    else if (!strncmp(r, "#/definitions/", 14))
        target = json_object_get(json_object_get(c->doc, "definitions"), name = r + 14);
    else if (!strcmp(r, "#"))
        return fail(c, path, "%s", "recursive $ref '#' (not supported)");
    if (!name)
        return fail(c, path, "$ref '%.80s' (only #/$defs/NAME and #/definitions/NAME are supported)", r);
    if (!target)
        return fail(c, path, "$ref '%.80s' names no definition", r);
    if (c->n_refs >= (int)(sizeof c->refs / sizeof *c->refs))
        return fail(c, path, "%s", "$refs nested too deep");
    c->refs[c->n_refs++] = r;
    char sub[256];
    snprintf(sub, sizeof sub, "%.200s", r);
    int id = compile_node(c, target, sub);
    c->n_refs--;
    return id;
}

static int compile_node(comp *c, json_t *s, const char *path)
{
    if (json_is_true(s))
        return new_node(c, K_ANY);
    if (!json_is_object(s))
        return fail(c, path, "%s", "a schema must be an object");
    if (++c->depth > COLO_SCHEMA_MAX_DEPTH - 2) {
        c->depth--;
        return fail(c, path, "the schema nests deeper than %s levels", "22");
    }
    int id;
    json_t *type = json_object_get(s, "type");
    if (json_object_get(s, "$ref"))
        id = compile_ref(c, s, path);
    else if (json_object_get(s, "anyOf")) {
        static const char *const allowed[] = {"anyOf", NULL};
        id = check_keys(c, s, path, allowed) < 0 ? -1 : compile_alts(c, json_object_get(s, "anyOf"), path, "anyOf", NULL);
    } else if (json_is_array(type))
        id = json_array_size(type) == 1 ? compile_typed(c, s, path, json_string_value(json_array_get(type, 0)))
                                        : compile_alts(c, type, path, "type", s);
    else if (type && !json_is_string(type))
        id = fail(c, path, "%s", "'type' must be a name or a list of names");
    else if (type && !strcmp(json_string_value(type), "null") && json_object_get(s, "enum"))
        id = compile_typed(c, s, path, "null");
    else
        id = compile_typed(c, s, path, type ? json_string_value(type) : NULL);
    c->depth--;
    return id;
}

/* opt NULL: the defaults; bounds past what a state counts are clamped. */
static colo_schema *schema_new(const colo_schema_options *opt)
{
    colo_schema *g = calloc(1, sizeof(colo_schema));
    if (!g)
        return NULL;
    g->opt = opt ? *opt : COLO_SCHEMA_OPTIONS_DEFAULT;
    int *bound[] = {&g->opt.default_max_length, &g->opt.default_max_items};
    for (int i = 0; i < 2; i++)
        *bound[i] = *bound[i] < 0 ? 0 : *bound[i] > UINT16_MAX ? UINT16_MAX : *bound[i];
    return g;
}

colo_schema *colo_schema_compile(const char *text, size_t len, char *err, size_t errlen)
{
    return colo_schema_compile_opts(text, len, NULL, err, errlen);
}

colo_schema *colo_schema_compile_opts(const char *text, size_t len, const colo_schema_options *opt, char *err,
                                      size_t errlen)
{
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    if (!doc) {
        colo_set_err(err, errlen, "not JSON: %s", je.text);
        return NULL;
    }
    colo_schema *g = schema_new(opt);
    if (!g) {
        json_decref(doc);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    comp c = {.g = g, .doc = doc, .err = err, .errlen = errlen};
    int root = compile_node(&c, doc, "#");
    if (root >= 0) {
        bool object = true;
        const node *r = &g->nodes[root];
        if (r->kind == K_ANYOF) { /* alternatives that are all objects */
            for (int i = 0; i < r->n; i++) {
                uint8_t k = g->nodes[g->alts[r->first + i]].kind;
                object &= k == K_OBJECT || k == K_ANY_OBJECT;
            }
        } else
            object = r->kind == K_OBJECT || r->kind == K_ANY_OBJECT;
        if (!object) {
            colo_set_err(err, errlen, "the root must be an object (\"type\":\"object\") at #");
            root = -1;
        }
    }
    json_decref(doc);
    if (root < 0) {
        colo_schema_free(g);
        return NULL;
    }
    g->root = root;
    return g;
}

colo_schema *colo_schema_any_object(void)
{
    return colo_schema_any_object_opts(NULL);
}

colo_schema *colo_schema_any_object_opts(const colo_schema_options *opt)
{
    colo_schema *g = schema_new(opt);
    if (!g)
        return NULL;
    comp c = {.g = g};
    if ((g->root = new_node(&c, K_ANY_OBJECT)) < 0) {
        colo_schema_free(g);
        return NULL;
    }
    return g;
}

void colo_schema_free(colo_schema *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_props; i++)
        free(g->props[i].name);
    for (int i = 0; i < g->n_lits; i++)
        free(g->lits[i].text);
    free(g->nodes);
    free(g->props);
    free(g->alts);
    free(g->lits);
    free(g->pats);
    free(g);
}
